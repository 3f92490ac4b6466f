//! The real `spark-submit`, for tests that put Spark's own Kubernetes client (fabric8 on okhttp)
//! in front of the API server double.
//!
//! [`SparkSubmit::locate`] finds the `spark-submit` that PyPI's pyspark installs (inside the
//! package, `<site-packages>/pyspark/bin/spark-submit`, else the `spark-submit` pip put on
//! `PATH`) and the `java` it will run; [`SparkSubmit::run`] runs it with a timeout and captures
//! its output. Nothing here skips: a machine without them gets an error that says to run
//! `tests/run.sh`, which installs Debian's `openjdk-17-jre-headless` and `pyspark==3.5.9`.
//!
//! ```no_run
//! # async fn demo() {
//! use std::time::Duration;
//! use nodemedic_tests::apiserver::ApiServer;
//! use nodemedic_tests::spark_submit::{SparkSubmit, cluster_mode_args};
//! let api = ApiServer::start().await.unwrap();
//! let spark = SparkSubmit::require();
//! let args = cluster_mode_args(&api.http_url(), "spark", "pi", "apache/spark:3.5.1");
//! let run = tokio::task::spawn_blocking(move || spark.run(&args, Duration::from_secs(180))).await.unwrap();
//! assert_eq!(run.code, Some(0), "{}", run.output());
//! # }
//! ```

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The pyspark release the tests are written against (`tests/run.sh` installs it).
pub const PYSPARK_VERSION: &str = "3.5.9";

/// The application every submission runs: the Pi example of the apache/spark image. `local://`
/// is a path inside the image, so spark-submit uploads nothing.
pub const PI_PY: &str = "local:///opt/spark/examples/src/main/python/pi.py";

const HOW_TO_INSTALL: &str = "run tests/run.sh as root (it installs Debian's openjdk-17-jre-headless and \
     pyspark==3.5.9 from PyPI), or by hand: apt-get install openjdk-17-jre-headless; python3 -m pip install pyspark==3.5.9";

/// A `spark-submit` and the `java` it runs.
#[derive(Debug, Clone)]
pub struct SparkSubmit {
    /// The `spark-submit` script.
    pub script: PathBuf,
    /// pyspark's version (`pyspark.__version__`), when pyspark is importable.
    pub version: Option<String>,
    /// The `java` spark-class will run: `$JAVA_HOME/bin/java`, else the first on `PATH`.
    pub java: PathBuf,
}

/// One finished (or killed) `spark-submit`.
#[derive(Debug)]
pub struct Submission {
    /// The exit code; `None` when it was killed (by the timeout, or a signal).
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
    /// From the spawn to the exit.
    pub elapsed: Duration,
    /// Killed by [`SparkSubmit::run`]'s timeout.
    pub timed_out: bool,
    /// The command line, for messages.
    pub command: String,
}

impl Submission {
    /// stdout then stderr (Spark logs to stderr).
    pub fn output(&self) -> String {
        format!("{}{}", self.stdout, self.stderr)
    }
}

/// The first executable `name` on `PATH`.
fn on_path(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join(name))
            .find(|p| is_executable(p))
    })
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// pyspark's directory and version, from the machine's `python3`.
fn pyspark() -> Option<(PathBuf, String)> {
    let out = Command::new("python3")
        .args([
            "-c",
            "import os, pyspark; print(os.path.dirname(pyspark.__file__)); print(pyspark.__version__)",
        ])
        .stderr(Stdio::null())
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let mut lines = text.lines();
    Some((PathBuf::from(lines.next()?.trim()), lines.next()?.trim().to_string()))
}

impl SparkSubmit {
    /// Finds pyspark's `spark-submit` and a `java`, or says what is missing and how to install it.
    pub fn locate() -> Result<SparkSubmit, String> {
        let installed = pyspark();
        let script = installed
            .as_ref()
            .map(|(dir, _)| dir.join("bin/spark-submit"))
            .filter(|p| is_executable(p))
            .or_else(|| on_path("spark-submit"))
            .ok_or_else(|| {
                format!("spark-submit not found (python3 cannot import pyspark, and none is on PATH): {HOW_TO_INSTALL}")
            })?;
        let java = match std::env::var_os("JAVA_HOME").filter(|h| !h.is_empty()) {
            Some(home) => Some(PathBuf::from(home).join("bin/java")).filter(|p| is_executable(p)),
            None => on_path("java"),
        }
        .ok_or_else(|| format!("java not found ($JAVA_HOME/bin/java, or java on PATH): {HOW_TO_INSTALL}"))?;
        Ok(SparkSubmit {
            script,
            version: installed.map(|(_, v)| v),
            java,
        })
    }

    /// [`SparkSubmit::locate`], panicking with its message: a test that needs the real client
    /// fails on a machine without it rather than passing without having run.
    pub fn require() -> SparkSubmit {
        SparkSubmit::locate().unwrap_or_else(|e| panic!("{e}"))
    }

    /// Runs `spark-submit ARGS` in its own process group, killed (the whole group) after
    /// `timeout`. The environment is the test's, less whatever could point Spark or its client
    /// elsewhere: `KUBECONFIG` names a file that does not exist (fabric8 would otherwise read
    /// `~/.kube/config`), every `KUBERNETES_*` variable is removed, `SPARK_HOME` is pyspark's
    /// own, `SPARK_CONF_DIR` an empty directory (no `spark-defaults.conf`), `JAVA_HOME` the one
    /// that holds [`SparkSubmit::java`], and `SPARK_LOCAL_IP` is `127.0.0.1`.
    pub fn run(&self, args: &[String], timeout: Duration) -> Submission {
        let scratch = tempfile::tempdir().expect("a temporary directory");
        let conf_dir = scratch.path().join("conf");
        std::fs::create_dir_all(&conf_dir).expect("an empty SPARK_CONF_DIR");
        let stdout_path = scratch.path().join("stdout");
        let stderr_path = scratch.path().join("stderr");
        let file = |p: &Path| std::fs::File::create(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
        let mut cmd = Command::new(&self.script);
        cmd.args(args)
            .stdin(Stdio::null())
            .stdout(file(&stdout_path))
            .stderr(file(&stderr_path))
            .current_dir(scratch.path());
        for (key, _) in std::env::vars_os() {
            if key.to_string_lossy().starts_with("KUBERNETES_") {
                cmd.env_remove(&key);
            }
        }
        cmd.env("KUBECONFIG", "/nonexistent/nodemedic-tests/kubeconfig")
            .env("SPARK_CONF_DIR", &conf_dir)
            .env("SPARK_LOCAL_IP", "127.0.0.1")
            .env_remove("PYSPARK_SUBMIT_ARGS");
        if let Some(home) = self.java.parent().and_then(Path::parent) {
            cmd.env("JAVA_HOME", home);
        }
        if let Some(spark_home) = self.script.parent().and_then(Path::parent) {
            cmd.env("SPARK_HOME", spark_home);
        }
        std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
        let command = format!("{} {}", self.script.display(), args.join(" "));
        let started = Instant::now();
        let mut child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", self.script.display()));
        let mut timed_out = false;
        let status = loop {
            match child.try_wait() {
                Ok(Some(status)) => break Some(status),
                Ok(None) if started.elapsed() >= timeout => {
                    timed_out = true;
                    // The whole group: spark-submit execs java, which may have children.
                    let _ = nix::sys::signal::killpg(
                        nix::unistd::Pid::from_raw(child.id() as i32),
                        nix::sys::signal::Signal::SIGKILL,
                    );
                    break child.wait().ok();
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(50)),
                Err(_) => break None,
            }
        };
        let elapsed = started.elapsed();
        let read = |p: &Path| String::from_utf8_lossy(&std::fs::read(p).unwrap_or_default()).into_owned();
        Submission {
            code: status.and_then(|s| s.code()),
            stdout: read(&stdout_path),
            stderr: read(&stderr_path),
            elapsed,
            timed_out,
            command,
        }
    }
}

/// The arguments of a cluster-mode submission of [`PI_PY`] to `api_url` (`http://127.0.0.1:PORT`:
/// the master is `k8s://` and that URL), in `namespace`, named `app_name` (which also prefixes
/// the names of the driver pod, its Service and its ConfigMap), with the container image `image`
/// (nothing pulls it) and `spark.kubernetes.submission.waitAppCompletion=false`, so that
/// spark-submit returns once the driver's resources exist. Append `--conf` pairs before
/// submitting; the application resource must stay last, so add them with
/// [`with_confs`].
pub fn cluster_mode_args(api_url: &str, namespace: &str, app_name: &str, image: &str) -> Vec<String> {
    [
        "--master",
        &format!("k8s://{api_url}"),
        "--deploy-mode",
        "cluster",
        "--name",
        app_name,
        "--conf",
        &format!("spark.kubernetes.namespace={namespace}"),
        "--conf",
        &format!("spark.kubernetes.container.image={image}"),
        "--conf",
        "spark.kubernetes.submission.waitAppCompletion=false",
        PI_PY,
    ]
    .map(str::to_string)
    .to_vec()
}

/// `args` (ending with the application resource) with `confs` inserted before that resource,
/// as `--conf key=value` pairs; a `conf` may also be given as the two words `--conf`,
/// `key=value` already split.
pub fn with_confs(args: &[String], confs: &[String]) -> Vec<String> {
    let (resource, rest) = args.split_last().expect("arguments end with the application resource");
    let mut out = rest.to_vec();
    for w in confs {
        if w == "--conf" {
            continue;
        }
        out.push("--conf".to_string());
        out.push(w.clone());
    }
    out.push(resource.clone());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn confs_go_before_the_application_resource() {
        let args = cluster_mode_args("http://127.0.0.1:1", "spark", "pi", "img");
        assert_eq!(args.last().map(String::as_str), Some(PI_PY));
        assert_eq!(args[1], "k8s://http://127.0.0.1:1");
        let more = with_confs(&args, &["--conf".into(), "a=1".into(), "b=2".into()]);
        assert_eq!(more.len(), args.len() + 4);
        assert_eq!(&more[args.len() - 1..], ["--conf", "a=1", "--conf", "b=2", PI_PY]);
    }
}
