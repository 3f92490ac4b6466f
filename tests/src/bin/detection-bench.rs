//! Detection latency of the daemon (issue 16): on the generated 250-pod node, with
//! `nodemedic run` against the in-repo API server double and every periodic timer of the
//! daemon at 300 s or more, the time from a change to the `/metrics` sample that reports it,
//! for three changes (see `nodemedic_tests::detection`): a checkpoint entry turned stale (pod
//! deleted, cgroups removed), a client-mode driver deleted (its executors orphaned), a pinned
//! container's cpuset rewritten (drift). Goal: each under 2 s at the 95th percentile.
//!
//! ```text
//! cargo build --release -p nodemedic -p nodemedic-tests
//! target/release/detection-bench [ROUNDS] [TIMEOUT_SECONDS]
//! ```
//!
//! ROUNDS (default 20, at most 31) of each action, one action after the other, on one
//! daemon; a round not detected within TIMEOUT_SECONDS (default 30) counts as a miss, longer
//! than any detection. `NODEMEDIC_BIN` names another nodemedic (the shipped build:
//! `target/dist/nodemedic`); by default the one beside this program.

use std::process::{Command, ExitCode};
use std::time::{Duration, Instant};

use nodemedic_tests::detection::{self, Action, MAX_ROUNDS, Scenario};
use nodemedic_tests::measure;

fn main() -> ExitCode {
    // The daemon is started by the test support's `Agent`, which finds nodemedic through
    // NODEMEDIC_BIN when the program is not a test: name the one beside this program.
    if std::env::var_os("NODEMEDIC_BIN").is_none() {
        let bin = measure::nodemedic_bin();
        if !bin.is_file() {
            eprintln!(
                "detection-bench: {} not found: cargo build --release -p nodemedic (or set NODEMEDIC_BIN)",
                bin.display()
            );
            return ExitCode::from(2);
        }
        let me = std::env::current_exe().unwrap_or_default();
        return match Command::new(&me)
            .args(std::env::args_os().skip(1))
            .env("NODEMEDIC_BIN", &bin)
            .status()
        {
            Ok(s) => ExitCode::from(s.code().unwrap_or(2).clamp(0, 255) as u8),
            Err(e) => {
                eprintln!("detection-bench: cannot re-run {}: {e}", me.display());
                ExitCode::from(2)
            }
        };
    }
    let mut args = std::env::args().skip(1);
    let rounds: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(20);
    let timeout = Duration::from_secs_f64(args.next().and_then(|a| a.parse().ok()).unwrap_or(30.0));
    if rounds == 0 || rounds > MAX_ROUNDS {
        eprintln!("detection-bench: ROUNDS must be 1 to {MAX_ROUNDS}");
        return ExitCode::from(2);
    }
    measure::run_bench("detection-bench", 2, bench(rounds, timeout))
}

async fn bench(rounds: usize, timeout: Duration) -> Result<(), String> {
    let started = Instant::now();
    let mut scenario = Scenario::start(250).await?;
    println!(
        "nodemedic: {}\ndaemon pid {}, 250 pods, {rounds} rounds per action, timeout {} s, poll every {} ms",
        measure::nodemedic_bin().display(),
        scenario.agent.pid(),
        timeout.as_secs_f64(),
        detection::POLL.as_millis()
    );
    for note in &scenario.notes {
        println!("{note}");
    }
    println!("ready after {:.1} s\n", started.elapsed().as_secs_f64());
    let mut results = vec![];
    for action in Action::ALL {
        let mut outcomes = vec![];
        for round in 1..=rounds {
            let outcome = scenario
                .round(action, timeout)
                .await
                .map_err(|e| format!("{action}, round {round}: {e}"))?;
            eprintln!("{action}, round {round}: {outcome}");
            outcomes.push(outcome);
        }
        results.push((action, outcomes));
    }
    println!("{}", detection::table(&results, timeout));
    let cpu = measure::cpu_seconds(scenario.agent.pid()).unwrap_or(f64::NAN);
    let rss = measure::status_kib(scenario.agent.pid(), "VmHWM:").unwrap_or(0) as f64 / 1024.0;
    println!(
        "daemon: {cpu:.2} s of CPU, peak RSS {rss:.1} MiB over the whole run ({:.0} s, scraped every {} ms while waiting)",
        started.elapsed().as_secs_f64(),
        detection::POLL.as_millis()
    );
    println!(
        "load average at end: {}",
        std::fs::read_to_string("/proc/loadavg").unwrap_or_default().trim()
    );
    if scenario.agent.log().contains("panicked") {
        return Err(format!("the daemon panicked\n{}", scenario.log_tail(40)));
    }
    Ok(())
}
