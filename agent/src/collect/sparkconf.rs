//! Spark driver configurations as the node sees them (docs/stories/thirty-second-webhook.md).
//!
//! spark-submit puts the driver's resolved configuration into a ConfigMap, under the key
//! `spark.properties`, and mounts it into the driver at `/opt/spark/conf`. The volume is named
//! `spark-conf-volume-driver` since Spark 3.1 (`Constants.SPARK_CONF_VOLUME_DRIVER`) and
//! `spark-conf-volume` in 2.4 and 3.0 (`Constants.SPARK_CONF_VOLUME`). On the node the kubelet
//! keeps a ConfigMap volume at
//! `<kubelet dir>/pods/<pod uid>/volumes/kubernetes.io~configmap/<volume>/`, each key a relative
//! symlink into `..data/`, which itself links to a timestamped directory the kubelet swaps on
//! updates. [`read_spark_conf`] reads `spark.properties` through those links, refusing a file
//! that resolves outside its volume, and [`parse_spark_properties`] reads the Java properties
//! format Spark writes it in (`java.util.Properties.store`).
//!
//! [`read_drivers`] says of every unfinished driver whether its configuration was read, is
//! not there to read, or failed ([`SparkConfRead`]). Not there, normally: a pod without a Spark
//! conf volume (client mode; Spark 2.3, which passes the driver's configuration in
//! `SPARK_JAVA_OPT_*` variables, has no such volume), a driver that waits to start (the kubelet
//! sets the volume up before it starts any container: `WaitForAttachAndMount` precedes the
//! runtime's `SyncPod` in kubernetes/kubernetes `pkg/kubelet/kubelet.go`), and a driver being
//! deleted (the kubelet tears its volumes down). A driver that has started with its conf volume
//! and has no `spark.properties` there is a failure: the agent is not looking where the kubelet
//! keeps its pods.

use std::collections::BTreeMap;
use std::io::ErrorKind;
use std::path::Path;

use nodemedic_rules::snapshot::{ConfMount, PodInfo, PodPhase, SparkConf, SparkConfRead};

use crate::collect::read::{ReadError, read_text, trace};
use crate::host::HostPaths;

/// The driver's Spark conf volume: Spark 3.1 and later, then Spark 2.4 and 3.0.
pub const CONF_VOLUMES: [&str; 2] = ["spark-conf-volume-driver", "spark-conf-volume"];

/// The key (and file) holding the driver's configuration.
pub const PROPERTIES_FILE: &str = "spark.properties";

/// The largest `spark.properties` read, bytes.
pub const PROPERTIES_LIMIT: u64 = 1 << 20;

/// Why a driver's `spark.properties` could not be read.
#[derive(Debug, thiserror::Error)]
pub enum SparkConfError {
    #[error(transparent)]
    Read(#[from] ReadError),
    #[error("{path}: resolves to {target}, outside its volume")]
    OutsideVolume { path: String, target: String },
    #[error("{path}: not there, although the driver has started with its conf volume {volume}")]
    NotInVolume { path: String, volume: String },
}

/// Java's properties whitespace (`' '`, `'\t'`, `'\f'`).
fn is_blank(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\x0c')
}

/// Splits `text` into logical lines as `java.util.Properties.load` does: blank lines and
/// comment lines (`#` or `!` first) are dropped, leading whitespace is skipped, and a line
/// ending in an odd number of backslashes continues on the next one (that backslash, the line
/// end and the next line's leading whitespace removed). Escapes other than line continuations
/// are left in place.
fn logical_lines(text: &str) -> Vec<String> {
    let mut lines = Vec::new();
    let mut line = String::new();
    let mut skip_blanks = true;
    let mut new_line = true;
    let mut comment = false;
    let mut continuation_begins = false;
    let mut preceding_backslash = false;
    let mut skip_lf = false;
    for c in text.chars() {
        if skip_lf {
            skip_lf = false;
            if c == '\n' {
                continue;
            }
        }
        if skip_blanks {
            if is_blank(c) || (!continuation_begins && (c == '\r' || c == '\n')) {
                continue;
            }
            skip_blanks = false;
            continuation_begins = false;
        }
        if new_line {
            new_line = false;
            if c == '#' || c == '!' {
                comment = true;
                continue;
            }
        }
        if c != '\n' && c != '\r' {
            if !comment {
                line.push(c);
                preceding_backslash = c == '\\' && !preceding_backslash;
            }
            continue;
        }
        // A line ends.
        if comment || line.is_empty() {
            comment = false;
            new_line = true;
            skip_blanks = true;
            line.clear();
            preceding_backslash = false;
        } else if preceding_backslash {
            line.pop();
            preceding_backslash = false;
            skip_blanks = true;
            continuation_begins = true;
            skip_lf = c == '\r';
        } else {
            lines.push(std::mem::take(&mut line));
            new_line = true;
            skip_blanks = true;
        }
    }
    if !comment && !line.is_empty() {
        if preceding_backslash {
            line.pop();
        }
        lines.push(line);
    }
    lines
}

/// Resolves the escapes of a key or value: `\t`, `\n`, `\r`, `\f`, `\uXXXX` (UTF-16, surrogate
/// pairs joined; a lone surrogate becomes U+FFFD), and `\c` for any other `c`. A malformed
/// `\u` escape (Java refuses the whole file) keeps the `u` and what follows.
fn unescape(raw: &str) -> String {
    let mut out = String::with_capacity(raw.len());
    let mut units: Vec<u16> = Vec::new();
    let flush = |units: &mut Vec<u16>, out: &mut String| {
        out.extend(char::decode_utf16(units.drain(..)).map(|r| r.unwrap_or(char::REPLACEMENT_CHARACTER)));
    };
    let mut chars = raw.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            flush(&mut units, &mut out);
            out.push(c);
            continue;
        }
        let Some(e) = chars.next() else { break };
        if e == 'u' {
            let hex: String = chars.clone().take(4).collect();
            // Exactly four hex digits (from_str_radix alone would take a sign).
            let unit = if hex.len() == 4 && hex.chars().all(|h| h.is_ascii_hexdigit()) {
                u16::from_str_radix(&hex, 16).ok()
            } else {
                None
            };
            if let Some(unit) = unit {
                units.push(unit);
                chars.nth(3);
                continue;
            }
        }
        flush(&mut units, &mut out);
        out.push(match e {
            't' => '\t',
            'n' => '\n',
            'r' => '\r',
            'f' => '\x0c',
            other => other,
        });
    }
    flush(&mut units, &mut out);
    out
}

/// Splits a logical line into its raw key and value: the key ends at the first unescaped `=`,
/// `:` or whitespace; then whitespace, at most one `=` or `:`, and whitespace are skipped.
fn split_key_value(line: &str) -> (&str, &str) {
    let mut preceding_backslash = false;
    let mut key_end = line.len();
    let mut value_start = line.len();
    let mut separator = false;
    for (i, c) in line.char_indices() {
        if !preceding_backslash && (c == '=' || c == ':' || is_blank(c)) {
            key_end = i;
            value_start = i + c.len_utf8();
            separator = c == '=' || c == ':';
            break;
        }
        preceding_backslash = c == '\\' && !preceding_backslash;
    }
    let rest = &line[value_start..];
    let mut skip = 0;
    for c in rest.chars() {
        if is_blank(c) {
            skip += c.len_utf8();
        } else if !separator && (c == '=' || c == ':') {
            separator = true;
            skip += 1;
        } else {
            break;
        }
    }
    (&line[..key_end], &rest[skip..])
}

/// Parses a Java properties file (`key=value`, `key: value`, `key value`; `#` and `!`
/// comments; escapes, line continuations and `\uXXXX`), the format of Spark's
/// `spark.properties`. A key given twice keeps its last value. Never fails: what Java would
/// refuse (a malformed `\u` escape) is read as literally as possible.
pub fn parse_spark_properties(text: &str) -> BTreeMap<String, String> {
    logical_lines(text)
        .iter()
        .map(|line| {
            let (key, value) = split_key_value(line);
            (unescape(key), unescape(value))
        })
        .collect()
}

/// Whether `s` is a single safe path component (a pod UID from the API).
fn is_component(s: &str) -> bool {
    !s.is_empty() && s != "." && s != ".." && !s.contains(['/', '\0'])
}

/// Finds and reads the `spark.properties` of driver `pod` from its Spark conf volume:
/// `Ok(Some((host path, text)))`, `Ok(None)` when the pod has no such volume on this node.
pub fn find_spark_properties(
    host: &HostPaths,
    kubelet_dir: &Path,
    pod: &PodInfo,
) -> Result<Option<(String, String)>, SparkConfError> {
    if !is_component(&pod.uid) {
        return Ok(None);
    }
    let volumes = kubelet_dir
        .join("pods")
        .join(&pod.uid)
        .join("volumes/kubernetes.io~configmap");
    for volume in CONF_VOLUMES {
        // The kubelet may swap `..data` between the resolution and the read: look again once.
        for _ in 0..2 {
            match find_in_volume(host, &volumes.join(volume))? {
                Found::Text(shown, text) => return Ok(Some((shown, text))),
                Found::Vanished => continue,
                Found::NotThere => break,
            }
        }
    }
    Ok(None)
}

/// What one conf volume held.
enum Found {
    /// `spark.properties` (host path, text).
    Text(String, String),
    /// It resolved, then vanished before it was read.
    Vanished,
    /// No `spark.properties` in this volume.
    NotThere,
}

/// Reads `spark.properties` of the conf volume `dir`, never outside it.
fn find_in_volume(host: &HostPaths, dir: &Path) -> Result<Found, SparkConfError> {
    let file = dir.join(PROPERTIES_FILE);
    let shown = host.display(&file);
    let io = |path: &str, source: std::io::Error| {
        SparkConfError::Read(ReadError::Io {
            path: path.to_string(),
            source,
        })
    };
    // The key is a symlink to `..data/spark.properties`; follow it, but stay in the volume.
    trace::stat(&file);
    let target = match std::fs::canonicalize(&file) {
        Ok(t) => t,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(Found::NotThere),
        Err(e) => return Err(io(&shown, e)),
    };
    trace::stat(dir);
    let root = std::fs::canonicalize(dir).map_err(|e| io(&host.display(dir), e))?;
    if !target.starts_with(&root) {
        return Err(SparkConfError::OutsideVolume {
            path: shown,
            target: target.display().to_string(),
        });
    }
    Ok(match read_text(&target, &shown, PROPERTIES_LIMIT)? {
        Some(text) => Found::Text(shown, text),
        None => Found::Vanished,
    })
}

/// The Spark configuration of driver `pod` from its conf volume on this node, with the
/// version from its `spark-version` label (Spark 3.3+) or its Spark image's tag. `Ok(None)` when
/// the pod has no `spark.properties` here; an error says which file could not be read and why.
/// The driver's environment variables are left for the caller to fill.
pub fn read_spark_conf(
    host: &HostPaths,
    kubelet_dir: &Path,
    pod: &PodInfo,
) -> Result<Option<SparkConf>, SparkConfError> {
    Ok(
        find_spark_properties(host, kubelet_dir, pod)?.map(|(_, text)| SparkConf {
            version: pod_version(pod),
            properties: parse_spark_properties(&text),
            kubernetes_request_timeout_env: None,
            spark_submit_opts_env: None,
        }),
    )
}

/// The Spark version of `pod`, from its label or image.
fn pod_version(pod: &PodInfo) -> Option<String> {
    pod.spark_version().map(|(v, _)| v)
}

/// Why driver `pod` has no `spark.properties` here, when that is normal: it mounts no Spark
/// conf volume, waits to start (no container has run: the kubelet mounts volumes before it
/// starts any), or is being deleted. A driver that has started with its conf volume should have
/// the file: its absence is [`SparkConfError::NotInVolume`].
pub fn not_there(host: &HostPaths, kubelet_dir: &Path, pod: &PodInfo) -> Result<String, SparkConfError> {
    let Some(volume) = &pod.conf_volume else {
        return Ok(format!(
            "its pod mounts no Spark conf volume ({}): client mode, or a Spark before 2.4",
            CONF_VOLUMES.join(" or ")
        ));
    };
    if pod.deleting {
        return Ok("it is being deleted: the kubelet tears its volumes down".into());
    }
    let started = pod.phase == PodPhase::Running
        || pod
            .containers
            .iter()
            .any(|c| matches!(c.state.as_deref(), Some("running" | "terminated")));
    if !started {
        return Ok(format!(
            "it waits to start: the kubelet has not set up its conf volume {} yet",
            volume.volume
        ));
    }
    Err(SparkConfError::NotInVolume {
        path: host.display(
            &kubelet_dir
                .join("pods")
                .join(&pod.uid)
                .join("volumes/kubernetes.io~configmap")
                .join(&volume.volume)
                .join(PROPERTIES_FILE),
        ),
        volume: volume.volume.clone(),
    })
}

/// What the `spark_conf` collector read: the Spark configuration of the drivers running on the
/// node (by pod UID), whether the kubelet set up the configuration volume of the drivers that
/// wait to start, and the reads that failed.
#[derive(Debug, Default)]
pub struct DriverConfs {
    pub confs: BTreeMap<String, SparkConf>,
    /// Whether each unfinished driver's `spark.properties` was read, by pod UID.
    pub reads: BTreeMap<String, SparkConfRead>,
    pub mounts: BTreeMap<String, ConfMount>,
    /// One line per driver whose `spark.properties` could not be read (one with nothing to
    /// read is no failure: see [`not_there`]).
    pub errors: Vec<String>,
}

impl DriverConfs {
    /// The record's status: `ok`, or the first failed read and how many failed.
    pub fn status(&self) -> (String, bool) {
        match self.errors.as_slice() {
            [] => ("ok".to_string(), false),
            [one] => (format!("error: {one}"), true),
            [first, rest @ ..] => (format!("error: {first} (and {} more drivers)", rest.len()), true),
        }
    }
}

/// Reads the Spark configuration of the running drivers among `pods` (their `spark.properties`,
/// with the environment variables the pod list gives) and the configuration volumes of the
/// drivers that wait to start on `node`.
pub fn read_drivers(host: &HostPaths, kubelet_dir: &Path, pods: &[PodInfo], node: &str) -> DriverConfs {
    let mut out = DriverConfs::default();
    for p in pods
        .iter()
        .filter(|p| nodemedic_rules::spark::is_driver(p) && !p.is_terminal())
    {
        let found = find_spark_properties(host, kubelet_dir, p).and_then(|found| match found {
            Some(found) => Ok(Ok(found)),
            None => not_there(host, kubelet_dir, p).map(Err),
        });
        let (mut conf, read) = match found {
            Ok(Ok((path, text))) => (
                SparkConf {
                    version: pod_version(p),
                    properties: parse_spark_properties(&text),
                    ..Default::default()
                },
                SparkConfRead::Read { path },
            ),
            Ok(Err(reason)) => (SparkConf::default(), SparkConfRead::NotThere { reason }),
            Err(e) => {
                out.errors.push(format!("driver {}/{}: {e}", p.namespace, p.name));
                (SparkConf::default(), SparkConfRead::Failed { reason: e.to_string() })
            }
        };
        out.reads.insert(p.uid.clone(), read);
        conf.kubernetes_request_timeout_env = p.kubernetes_request_timeout_env.clone();
        conf.spark_submit_opts_env = p.spark_submit_opts_env.clone();
        conf.version = conf.version.or_else(|| pod_version(p));
        if !conf.properties.is_empty()
            || conf.kubernetes_request_timeout_env.is_some()
            || conf.spark_submit_opts_env.is_some()
        {
            out.confs.insert(p.uid.clone(), conf);
        }
    }
    out.mounts = pods
        .iter()
        .filter(|p| nodemedic_rules::spark::driver_waits_to_start(p, node))
        .filter_map(|p| Some((p.uid.clone(), conf_mount(host, kubelet_dir, p)?)))
        .collect();
    out
}

/// Whether the kubelet set up driver `pod`'s configuration volume ([`PodInfo::conf_volume`])
/// under its pod directory: `None` for a pod without one (or with a UID that is no path
/// component). The kubelet creates `volumes/kubernetes.io~configmap/<volume>` only after it has
/// read the ConfigMap, and the pod's directory before it sets up any volume.
pub fn conf_mount(host: &HostPaths, kubelet_dir: &Path, pod: &PodInfo) -> Option<ConfMount> {
    let volume = pod.conf_volume.as_ref()?;
    if !is_component(&pod.uid) || !is_component(&volume.volume) {
        return None;
    }
    let pod_dir = kubelet_dir.join("pods").join(&pod.uid);
    let dir = pod_dir.join("volumes/kubernetes.io~configmap").join(&volume.volume);
    let exists = |p: &Path| {
        trace::stat(p);
        match std::fs::symlink_metadata(p) {
            Ok(m) => Ok(m.is_dir()),
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(false),
            Err(e) => Err(format!("{}: {e}", host.display(p))),
        }
    };
    Some(match (exists(&dir), exists(&pod_dir)) {
        (Ok(true), _) => ConfMount::Mounted {
            path: host.display(&dir),
        },
        (Ok(false), Ok(true)) => ConfMount::Missing {
            path: host.display(&dir),
        },
        (Ok(false), Ok(false)) => ConfMount::NoPodDir {
            path: host.display(&pod_dir),
        },
        (Err(reason), _) | (_, Err(reason)) => ConfMount::Unknown { reason },
    })
}

#[cfg(test)]
mod tests;
