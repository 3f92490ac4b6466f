//! Spark's submission client against this cluster: how long a pod create takes (the dry-run
//! probe), and the client timeout it has to fit in.
//!
//! spark-submit creates the driver pod, and the driver creates its executors, through fabric8's
//! Kubernetes client. Since Spark 3.0 its request timeout is `spark.kubernetes.submission.
//! requestTimeout` (spark-submit) or `spark.kubernetes.driver.requestTimeout` (the driver), 10000
//! ms by default (apache/spark `docs/running-on-kubernetes.md`); Spark 2.4 sets no timeout of its
//! own, so fabric8 4.x's default of 10 s applies, unless the JVM has the system property
//! `kubernetes.request.timeout` or the environment `KUBERNETES_REQUEST_TIMEOUT` (fabric8's
//! `Config` reads the property first, then the variable). Spark 3.x also retries a failed
//! request (`kubernetes.request.retry.backoffLimit`, 3 in Spark 3.5), so a create that always
//! outlives the timeout fails after four tries, about 40 s at the default (docs/stories/
//! thirty-second-webhook.md).
//!
//! Used by `slow-pod-admission` (the finding) and `half-submitted-driver` (its evidence).

use crate::probes::{DRY_RUN_PROBE, api, is_dry_run_unsupported, recent, spread};
use crate::settings::Settings;
use crate::snapshot::{NodeSnapshot, ProbeSample};

/// Spark 3.0+'s timeout of spark-submit's requests (creating the driver), milliseconds.
pub const SUBMISSION_TIMEOUT_KEY: &str = "spark.kubernetes.submission.requestTimeout";
/// Spark 3.0+'s timeout of the driver's requests (creating executors), milliseconds.
pub const DRIVER_TIMEOUT_KEY: &str = "spark.kubernetes.driver.requestTimeout";
/// fabric8's request timeout from the environment, milliseconds; only Spark 2.4 honours it.
pub const FABRIC8_TIMEOUT_ENV: &str = "KUBERNETES_REQUEST_TIMEOUT";
/// fabric8's request timeout as a JVM system property (`-Dkubernetes.request.timeout=N`), read
/// before the environment variable; only Spark 2.4 honours it.
pub const FABRIC8_TIMEOUT_PROPERTY: &str = "kubernetes.request.timeout";
/// The driver JVM's options in its Spark configuration.
pub const DRIVER_JAVA_OPTIONS_KEY: &str = "spark.driver.extraJavaOptions";
/// The environment variable whose JVM options spark-submit's launcher puts on its command line.
pub const SUBMIT_OPTS_ENV: &str = "SPARK_SUBMIT_OPTS";

/// Whether a probe failed by running out of time, on the client (the probe's own `no complete
/// answer within N s`) or in the API server (a webhook call that timed out: `context deadline
/// exceeded`, `Client.Timeout`, HTTP 504): its `total_seconds` is a lower bound of the latency.
pub fn timed_out(s: &ProbeSample) -> bool {
    if s.ok {
        return false;
    }
    let e = s.error.as_deref().unwrap_or("").to_ascii_lowercase();
    s.status == Some(504)
        || ["no complete answer within", "timeout", "timed out", "deadline exceeded"]
            .iter()
            .any(|w| e.contains(w))
}

/// Whether a failed create got as far as sending its request: one that stopped at DNS, connect
/// or the TLS handshake measured the node's path to the API server (`apiserver-unreachable`,
/// `slow-api`), not admission.
fn reached_server(s: &ProbeSample) -> bool {
    matches!(crate::rules::apiserver_unreachable::failure_stage(s), "answer" | "http")
}

/// The pod creates measured in the window.
#[derive(Debug, Clone, PartialEq)]
pub struct CreateLatency<'a> {
    /// The samples that count: answered creates and creates that timed out after reaching the
    /// API server (a lower bound); not those refused because a webhook does not support dry run.
    pub samples: Vec<&'a ProbeSample>,
    pub median: f64,
    pub min: f64,
    pub max: f64,
    /// The slowest sample.
    pub slowest: &'a ProbeSample,
}

/// The dry-run pod creates of the window and their statistics; `None` without any.
pub fn pod_creates<'a>(snap: &'a NodeSnapshot, settings: &Settings) -> Option<CreateLatency<'a>> {
    let api = api(snap)?;
    let samples: Vec<&ProbeSample> = recent(api, snap, settings)
        .filter(|s| {
            s.probe == DRY_RUN_PROBE && (s.ok || (timed_out(s) && reached_server(s))) && !is_dry_run_unsupported(s)
        })
        .filter(|s| s.total_seconds.is_finite())
        .collect();
    let (median, min, max, slowest) = spread(&samples)?;
    Some(CreateLatency {
        samples,
        median,
        min,
        max,
        slowest,
    })
}

/// The Spark client timeout in force, and where it came from.
#[derive(Debug, Clone, PartialEq)]
pub struct ClientTimeout {
    pub seconds: f64,
    /// For people: `spark.kubernetes.driver.requestTimeout=5000 (ms) of driver ns/name`.
    pub source: String,
    /// The driver (`ns/name`) that set it, if one did.
    pub driver: Option<String>,
    /// The key, variable or property that set it (`kubernetes.request.timeout` for `-D`).
    pub key: Option<&'static str>,
}

fn positive_ms(v: &str) -> Option<u64> {
    // Spark's intConf trims; 0 means "no timeout" to fabric8, so it never is the smallest.
    v.trim().parse::<u64>().ok().filter(|ms| *ms > 0)
}

/// Whether a Spark version (`2.4.8`) is 2.x.
pub fn is_spark2(version: Option<&str>) -> bool {
    version.is_some_and(|v| v.starts_with("2."))
}

/// The driver of `uid` as people name it, and whether it still runs (unknown pods count).
pub(crate) fn driver_name(snap: &NodeSnapshot, uid: &str) -> (String, bool) {
    match snap.pod(uid) {
        Some(p) => (p.display(), !p.is_terminal()),
        None => (format!("pod {uid}"), true),
    }
}

/// A live driver on this node whose `spark.properties` could not be read: the client timeout
/// it sets is unknown, and may be smaller than any known one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnreadConf {
    /// The driver as people name it (`ns/name`, or `pod <uid>` when the pod list lacks it).
    pub driver: String,
    /// Where and why the read failed.
    pub reason: String,
}

/// The live drivers here whose `spark.properties` failed to be read
/// ([`crate::snapshot::SparkConfRead::Failed`]), in pod UID order. A driver with nothing to
/// read (no conf volume, or not set up yet) is not one.
pub fn unread_confs(snap: &NodeSnapshot) -> Vec<UnreadConf> {
    snap.pods
        .spark_conf_reads
        .iter()
        .filter_map(|(uid, read)| match read {
            crate::snapshot::SparkConfRead::Failed { reason } => {
                let (driver, alive) = driver_name(snap, uid);
                alive.then(|| UnreadConf {
                    driver,
                    reason: reason.clone(),
                })
            }
            _ => None,
        })
        .collect()
}

/// Splits JVM options the way Spark splits `extraJavaOptions` (`Utils.splitCommandString`):
/// on whitespace, with single quotes literal, double quotes grouping and backslash escaping
/// the next character outside single quotes.
pub fn split_java_options(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let (mut single, mut double, mut escaped) = (false, false, false);
    for c in s.chars() {
        if escaped {
            word.push(c);
            escaped = false;
        } else if single {
            if c == '\'' {
                single = false;
            } else {
                word.push(c);
            }
        } else if double {
            match c {
                '"' => double = false,
                '\\' => escaped = true,
                _ => word.push(c),
            }
        } else {
            match c {
                '\'' => {
                    single = true;
                    in_word = true;
                }
                '"' => {
                    double = true;
                    in_word = true;
                }
                '\\' => {
                    escaped = true;
                    in_word = true;
                }
                c if c.is_whitespace() => {
                    if in_word {
                        out.push(std::mem::take(&mut word));
                        in_word = false;
                    }
                }
                c => {
                    word.push(c);
                    in_word = true;
                }
            }
        }
    }
    if in_word {
        out.push(word);
    }
    out
}

/// The value of the last `-D<property>=VALUE` among JVM options (the JVM keeps the last one).
pub fn java_property(options: &str, property: &str) -> Option<String> {
    let prefix = format!("-D{property}=");
    split_java_options(options)
        .into_iter()
        .filter_map(|w| w.strip_prefix(&prefix).map(str::to_string))
        .next_back()
}

/// What sets a Spark 2.4 driver's fabric8 timeout, as (key for people, value): the system
/// property from `spark.driver.extraJavaOptions` (last on the JVM's command line, so it wins)
/// or `SPARK_SUBMIT_OPTS`, else the environment variable.
fn spark2_timeout(conf: &crate::snapshot::SparkConf) -> Option<(&'static str, String, String)> {
    let from_options = conf
        .properties
        .get(DRIVER_JAVA_OPTIONS_KEY)
        .and_then(|o| java_property(o, FABRIC8_TIMEOUT_PROPERTY))
        .map(|v| (DRIVER_JAVA_OPTIONS_KEY, v))
        .or_else(|| {
            conf.spark_submit_opts_env
                .as_deref()
                .and_then(|o| java_property(o, FABRIC8_TIMEOUT_PROPERTY))
                .map(|v| (SUBMIT_OPTS_ENV, v))
        });
    if let Some((place, v)) = from_options {
        return Some((
            FABRIC8_TIMEOUT_PROPERTY,
            v,
            format!("-D{FABRIC8_TIMEOUT_PROPERTY} in {place}"),
        ));
    }
    conf.kubernetes_request_timeout_env
        .clone()
        .map(|v| (FABRIC8_TIMEOUT_ENV, v, FABRIC8_TIMEOUT_ENV.to_string()))
}

/// The Spark client timeout in force on this node: the smallest request timeout the live
/// drivers here set (`spark.kubernetes.submission.requestTimeout` or
/// `spark.kubernetes.driver.requestTimeout` on Spark 3.0+; `-Dkubernetes.request.timeout` or
/// `KUBERNETES_REQUEST_TIMEOUT` on Spark 2.4; milliseconds), else
/// `spark_client_timeout_seconds`. Drivers whose configuration could not be read
/// ([`unread_confs`]) are not in it: the caller says so.
pub fn client_timeout(snap: &NodeSnapshot, settings: &Settings) -> ClientTimeout {
    let mut found: Option<(u64, String, &'static str, String)> = None;
    for (uid, conf) in &snap.pods.spark_confs {
        let (driver, alive) = driver_name(snap, uid);
        if !alive {
            continue;
        }
        let version = conf.version.as_deref();
        let candidates: Vec<(&'static str, Option<String>, String)> = if is_spark2(version) {
            spark2_timeout(conf)
                .map(|(key, v, shown)| (key, Some(v), shown))
                .into_iter()
                .collect()
        } else {
            [SUBMISSION_TIMEOUT_KEY, DRIVER_TIMEOUT_KEY]
                .into_iter()
                .map(|k| (k, conf.properties.get(k).cloned(), k.to_string()))
                .collect()
        };
        for (key, value, shown) in candidates {
            let Some(ms) = value.as_deref().and_then(positive_ms) else {
                continue;
            };
            if found.as_ref().is_none_or(|(best_ms, ..)| ms < *best_ms) {
                let spark = version.map_or(String::new(), |v| format!(", Spark {v}"));
                found = Some((
                    ms,
                    driver.clone(),
                    key,
                    format!("{shown}={ms} (ms) of driver {driver}{spark}"),
                ));
            }
        }
    }
    match found {
        Some((ms, driver, key, source)) => ClientTimeout {
            seconds: ms as f64 / 1000.0,
            source,
            driver: Some(driver),
            key: Some(key),
        },
        None => ClientTimeout {
            seconds: settings.spark_client_timeout_seconds,
            source: if unread_confs(snap).is_empty() {
                "no driver here sets one: spark_client_timeout_seconds, after Spark's default of 10000 ms"
            } else {
                "no driver here whose configuration was read sets one: spark_client_timeout_seconds, after Spark's \
                 default of 10000 ms"
            }
            .to_string(),
            driver: None,
            key: None,
        },
    }
}

/// The Spark client timeout in force on this node, seconds, and where it came from (see
/// [`client_timeout`]).
pub fn spark_client_timeout(snap: &NodeSnapshot, settings: &Settings) -> (f64, String) {
    let t = client_timeout(snap, settings);
    (t.seconds, t.source)
}

/// The client timeout to advise for creates whose slowest took `max_seconds`: twice that, in
/// whole seconds, in milliseconds.
pub fn suggested_timeout_ms(max_seconds: f64) -> u64 {
    ((2.0 * max_seconds).ceil().max(1.0) as u64) * 1000
}

/// Whether pod creates are slow enough for `slow-pod-admission` to report them: the median at
/// least half the client timeout, or the slowest past it.
pub fn creates_are_slow(latency: &CreateLatency<'_>, timeout: &ClientTimeout) -> bool {
    latency.median >= timeout.seconds / 2.0 || latency.max >= timeout.seconds
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn java_options_split_like_spark() {
        assert_eq!(
            split_java_options(r#"-Da=1  -Db="two words" '-Dc=it''s' -Dd=x\ y"#),
            vec!["-Da=1", "-Db=two words", "-Dc=its", "-Dd=x y"]
        );
        assert_eq!(split_java_options("   "), Vec::<String>::new());
        assert_eq!(split_java_options(r#""""#), vec![""]);
    }

    #[test]
    fn the_last_property_wins() {
        let o = "-XX:+UseG1GC -Dkubernetes.request.timeout=20000 -Dkubernetes.request.timeout=30000";
        assert_eq!(java_property(o, FABRIC8_TIMEOUT_PROPERTY).as_deref(), Some("30000"));
        assert_eq!(
            java_property("-Dkubernetes.request.timeoutx=1", FABRIC8_TIMEOUT_PROPERTY),
            None
        );
        assert_eq!(java_property("-Dother=1", FABRIC8_TIMEOUT_PROPERTY), None);
    }
}
