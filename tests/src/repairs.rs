//! Running the pod repairs (`repair orphans | failed-pods | half-submitted`) in the test's
//! process, through the library as `nodemedic repair` runs them.

use nodemedic::cli::args::RepairAction;
use nodemedic::repair::pods;

/// Runs a pod repair on a blocking thread (the command makes its own current-thread runtime,
/// while the API server double serves from the test's), a question answered by nobody: (exit
/// code or error, stdout).
pub async fn run_pod_repair(command: RepairAction) -> (Result<u8, String>, String) {
    tokio::task::spawn_blocking(move || {
        let mut out = vec![];
        let code = nodemedic::cli::pod_repair_options(command)
            .map_err(|e| e.to_string())
            .and_then(|opts| {
                pods::run(&opts, &mut out, &mut |_| Ok(false))
                    .map(|ran| ran.code())
                    .map_err(|e| e.to_string())
            });
        (code, String::from_utf8_lossy(&out).into_owned())
    })
    .await
    .unwrap()
}
