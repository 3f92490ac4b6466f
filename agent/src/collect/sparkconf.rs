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
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;
    use std::path::PathBuf;

    fn props(text: &str) -> Vec<(String, String)> {
        parse_spark_properties(text).into_iter().collect()
    }

    fn pair(k: &str, v: &str) -> (String, String) {
        (k.to_string(), v.to_string())
    }

    #[test]
    fn what_spark_writes() {
        let text = "#Java properties built from Kubernetes config map with name: spark-drv-6b1dcd956d6c0338-conf-map\n\
                    #Thu Nov 21 10:00:00 UTC 2024\n\
                    spark.kubernetes.driver.requestTimeout=30000\n\
                    spark.master=k8s\\://https\\://10.96.0.1\\:443\n\
                    spark.app.name=etl\\ hourly\n\
                    spark.driver.extraJavaOptions=-Dfoo\\=bar -Dpath\\=C\\:\\\\tmp\n\
                    spark.kubernetes.submission.requestTimeout=60000\n";
        assert_eq!(
            props(text),
            [
                pair("spark.app.name", "etl hourly"),
                pair("spark.driver.extraJavaOptions", "-Dfoo=bar -Dpath=C:\\tmp"),
                pair("spark.kubernetes.driver.requestTimeout", "30000"),
                pair("spark.kubernetes.submission.requestTimeout", "60000"),
                pair("spark.master", "k8s://https://10.96.0.1:443"),
            ]
        );
    }

    #[test]
    fn separators_comments_and_whitespace() {
        let text = "a=1\n\
                    b: 2\n\
                    c 3\n\
                    d = 4\n\
                    e\t:\t5\n\
                    f:=6\n\
                    g==7\n\
                    \x20  ! bang comment\n\
                    \t# hash comment\n\
                    \n   \n\
                    \x20  h = indented\n\
                    i=\n\
                    j\n\
                    k\\ with\\ spaces\\=and\\:colons = v\n\
                    l = trailing  \n\
                    a=last wins\n";
        assert_eq!(
            props(text),
            [
                pair("a", "last wins"),
                pair("b", "2"),
                pair("c", "3"),
                pair("d", "4"),
                pair("e", "5"),
                pair("f", "=6"),
                pair("g", "=7"),
                pair("h", "indented"),
                pair("i", ""),
                pair("j", ""),
                pair("k with spaces=and:colons", "v"),
                pair("l", "trailing  "),
            ]
        );
    }

    #[test]
    fn continuations_and_line_ends() {
        let text = "list = a,\\\n      b,\\\r\n\t c\n\
                    even=ends in a backslash\\\\\n\
                    next=1\n\
                    # a comment does not continue \\\n\
                    after=comment\n\
                    cont=x\\\n# not a comment here\n\
                    blank=y\\\n\nz=after blank\r\
                    cr=only\r\n\
                    eof=z\\";
        assert_eq!(
            props(text),
            [
                pair("after", "comment"),
                pair("blank", "y"),
                pair("cont", "x# not a comment here"),
                pair("cr", "only"),
                pair("eof", "z"),
                pair("even", "ends in a backslash\\"),
                pair("list", "a,b,c"),
                pair("next", "1"),
                pair("z", "after blank"),
            ]
        );
    }

    #[test]
    fn escapes_and_unicode() {
        let text = "u=caf\\u00e9 \\uD83D\\uDE00 \\u20ac\n\
                    lone=\\uD83Dx\n\
                    bad=\\u12G4 and \\u12\n\
                    ctl=tab\\there\\nline\\rcr\\fff\\q\n\
                    raw=ünïcode as is\n";
        assert_eq!(
            props(text),
            [
                pair("bad", "u12G4 and u12"),
                pair("ctl", "tab\there\nline\rcr\x0cffq"),
                pair("lone", "\u{fffd}x"),
                pair("raw", "ünïcode as is"),
                pair("u", "café 😀 €"),
            ]
        );
        assert!(props("").is_empty());
        assert!(props("\\").is_empty() || props("\\") == [pair("", "")]);
    }

    proptest::proptest! {
        #[test]
        fn never_panics(text in "\\PC*") {
            let _ = parse_spark_properties(&text);
        }

        #[test]
        fn never_panics_on_escape_heavy_text(text in "[a-z=: \\\\u0-9A-F#!\t\r\n]{0,60}") {
            let _ = parse_spark_properties(&text);
        }
    }

    /// A ConfigMap volume laid out as the kubelet's atomic writer does.
    fn configmap_volume(root: &Path, uid: &str, volume: &str, files: &[(&str, &str)]) -> PathBuf {
        let dir = root.join(format!(
            "var/lib/kubelet/pods/{uid}/volumes/kubernetes.io~configmap/{volume}"
        ));
        let stamp = "..2024_11_21_10_00_00.123456789";
        std::fs::create_dir_all(dir.join(stamp)).unwrap();
        symlink(stamp, dir.join("..data")).unwrap();
        for (name, content) in files {
            std::fs::write(dir.join(stamp).join(name), content).unwrap();
            symlink(format!("..data/{name}"), dir.join(name)).unwrap();
        }
        dir
    }

    fn driver(uid: &str, version: Option<&str>) -> PodInfo {
        let mut p = PodInfo {
            uid: uid.into(),
            namespace: "spark-jobs".into(),
            name: "etl-driver".into(),
            ..Default::default()
        };
        p.labels.insert("spark-role".into(), "driver".into());
        if let Some(v) = version {
            p.labels.insert("spark-version".into(), v.into());
        }
        p
    }

    #[test]
    fn reads_the_driver_conf_volume_through_the_kubelets_links() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        configmap_volume(
            root,
            "u31",
            "spark-conf-volume-driver",
            &[
                ("spark.properties", "#x\nspark.kubernetes.driver.requestTimeout=30000\n"),
                ("log4j2.properties", "rootLogger.level=info\n"),
            ],
        );
        configmap_volume(
            root,
            "u24",
            "spark-conf-volume",
            &[("spark.properties", "spark.kubernetes.namespace=old\n")],
        );
        configmap_volume(root, "other", "app-config", &[("spark.properties", "x=1\n")]);
        let host = HostPaths::new(root, None);
        let kubelet = host.kubelet_dir(None);

        let conf = read_spark_conf(&host, &kubelet, &driver("u31", Some("3.5.1")))
            .unwrap()
            .unwrap();
        assert_eq!(conf.version.as_deref(), Some("3.5.1"));
        assert_eq!(
            conf.properties
                .get("spark.kubernetes.driver.requestTimeout")
                .map(String::as_str),
            Some("30000")
        );
        assert_eq!(conf.kubernetes_request_timeout_env, None);
        let (shown, _) = find_spark_properties(&host, &kubelet, &driver("u31", None))
            .unwrap()
            .unwrap();
        assert_eq!(
            shown,
            "/var/lib/kubelet/pods/u31/volumes/kubernetes.io~configmap/spark-conf-volume-driver/spark.properties"
        );

        let old = read_spark_conf(&host, &kubelet, &driver("u24", None)).unwrap().unwrap();
        assert_eq!(old.version, None);
        assert_eq!(
            old.properties.get("spark.kubernetes.namespace").map(String::as_str),
            Some("old")
        );

        assert!(
            read_spark_conf(&host, &kubelet, &driver("other", None))
                .ok()
                .flatten()
                .is_none(),
            "not a Spark conf volume"
        );
        assert!(
            read_spark_conf(&host, &kubelet, &driver("absent", None))
                .ok()
                .flatten()
                .is_none()
        );
        assert!(
            read_spark_conf(&host, &kubelet, &driver("..", None))
                .ok()
                .flatten()
                .is_none()
        );
        assert!(
            read_spark_conf(&host, &kubelet, &driver("../u31", None))
                .ok()
                .flatten()
                .is_none()
        );
    }

    #[test]
    fn refuses_links_out_of_the_volume_and_large_files() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join("etc")).unwrap();
        std::fs::write(root.join("etc/secret"), "password=hunter2\n").unwrap();
        let vol = configmap_volume(root, "evil", "spark-conf-volume-driver", &[]);
        symlink("../../../../../../../../etc/secret", vol.join("spark.properties")).unwrap();
        let big = "x=".to_string() + &"y".repeat(PROPERTIES_LIMIT as usize);
        configmap_volume(root, "big", "spark-conf-volume-driver", &[("spark.properties", &big)]);
        let host = HostPaths::new(root, None);
        let kubelet = host.kubelet_dir(None);

        let err = find_spark_properties(&host, &kubelet, &driver("evil", None)).unwrap_err();
        assert!(
            err.to_string().starts_with(
                "/var/lib/kubelet/pods/evil/volumes/kubernetes.io~configmap/spark-conf-volume-driver/spark.properties: resolves to "
            ),
            "{err}"
        );
        assert!(err.to_string().ends_with("/etc/secret, outside its volume"), "{err}");
        assert!(
            read_spark_conf(&host, &kubelet, &driver("evil", None)).is_err(),
            "a file outside its volume is an error, not an absent file"
        );

        let err = find_spark_properties(&host, &kubelet, &driver("big", None)).unwrap_err();
        assert!(
            err.to_string()
                .ends_with("larger than the 1048576-byte limit for this file"),
            "{err}"
        );
    }

    /// The `spark_conf` collector: a driver whose properties are read, a driver with none here,
    /// and one whose file points outside its volume; the record says which read failed, and the
    /// other drivers' configurations are kept.
    #[test]
    fn the_collector_reads_every_driver_and_names_the_one_it_could_not() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        configmap_volume(
            root,
            "good",
            "spark-conf-volume-driver",
            &[("spark.properties", "spark.kubernetes.driver.requestTimeout=30000\n")],
        );
        std::fs::create_dir_all(root.join("etc")).unwrap();
        std::fs::write(root.join("etc/secret"), "password=hunter2\n").unwrap();
        let vol = configmap_volume(root, "evil", "spark-conf-volume-driver", &[]);
        symlink("../../../../../../../../etc/secret", vol.join("spark.properties")).unwrap();
        let host = HostPaths::new(root, None);
        let kubelet = host.kubelet_dir(None);
        let pods = [driver("good", None), driver("none-here", None), driver("evil", None)];

        let read = read_drivers(&host, &kubelet, &pods, "worker-1");
        assert_eq!(read.confs.keys().collect::<Vec<_>>(), ["good"]);
        assert_eq!(read.errors.len(), 1, "{:?}", read.errors);
        let (status, failed) = read.status();
        assert!(failed);
        assert!(status.starts_with("error: driver "), "{status}");
        assert!(
            status.contains("/evil/") && status.ends_with("outside its volume"),
            "{status}"
        );

        let fine = read_drivers(&host, &kubelet, &pods[..2], "worker-1");
        assert_eq!(fine.status(), ("ok".to_string(), false));
        let two = DriverConfs {
            errors: vec!["a".into(), "b".into(), "c".into()],
            ..Default::default()
        };
        assert_eq!(two.status(), ("error: a (and 2 more drivers)".to_string(), true));
    }

    /// Per driver, the snapshot says whether its configuration was read, is not there to read
    /// (no conf volume; waiting to start; being deleted) or failed (a read error; a driver that
    /// has started with its conf volume and has no `spark.properties` in it, which the
    /// collector once counted as "no such volume here", hiding the failure behind `ok`).
    #[test]
    fn the_collector_says_per_driver_whether_its_conf_was_read() {
        use nodemedic_rules::snapshot::{ConfVolume, ContainerInfo};
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        configmap_volume(
            root,
            "read",
            "spark-conf-volume-driver",
            &[("spark.properties", "spark.kubernetes.driver.requestTimeout=5000\n")],
        );
        // A directory where the file should be: a read error.
        let odd = configmap_volume(root, "unreadable", "spark-conf-volume-driver", &[]);
        std::fs::create_dir_all(odd.join("..data/spark.properties")).unwrap();
        symlink("..data/spark.properties", odd.join("spark.properties")).unwrap();
        // The pod's directory, without its conf volume.
        std::fs::create_dir_all(root.join("var/lib/kubelet/pods/started/volumes")).unwrap();
        let host = HostPaths::new(root, None);
        let kubelet = host.kubelet_dir(None);
        let with_volume = |uid: &str, phase: PodPhase, container: Option<&str>| {
            let mut p = driver(uid, Some("3.5.1"));
            p.phase = phase;
            p.conf_volume = Some(ConfVolume {
                volume: "spark-conf-volume-driver".into(),
                config_map: format!("spark-drv-{uid}-conf-map"),
            });
            p.containers = container
                .map(|state| ContainerInfo {
                    name: "spark-kubernetes-driver".into(),
                    state: Some(state.into()),
                    ..Default::default()
                })
                .into_iter()
                .collect();
            p
        };
        let mut deleting = with_volume("deleting", PodPhase::Running, Some("running"));
        deleting.deleting = true;
        let mut client_mode = driver("client-mode", None);
        client_mode.phase = PodPhase::Running;
        let pods = [
            with_volume("read", PodPhase::Running, Some("running")),
            with_volume("unreadable", PodPhase::Running, Some("running")),
            with_volume("started", PodPhase::Running, Some("running")),
            // Pending, but its container has run: the kubelet had mounted its volumes.
            with_volume("restarted", PodPhase::Pending, Some("terminated")),
            with_volume("waiting", PodPhase::Pending, Some("waiting")),
            deleting,
            client_mode,
        ];

        let got = read_drivers(&host, &kubelet, &pods, "worker-1");
        let state = |uid: &str| got.reads.get(uid).cloned();
        let conf_path = |uid: &str| {
            format!(
                "/var/lib/kubelet/pods/{uid}/volumes/kubernetes.io~configmap/spark-conf-volume-driver/spark.properties"
            )
        };
        assert_eq!(
            state("read"),
            Some(SparkConfRead::Read {
                path: conf_path("read")
            })
        );
        assert_eq!(
            got.confs["read"]
                .properties
                .get("spark.kubernetes.driver.requestTimeout")
                .map(String::as_str),
            Some("5000")
        );
        assert_eq!(
            state("unreadable"),
            Some(SparkConfRead::Failed {
                reason: format!("{}: is a directory, not a file", conf_path("unreadable"))
            })
        );
        let not_in_volume = |uid: &str| SparkConfRead::Failed {
            reason: format!(
                "{}: not there, although the driver has started with its conf volume spark-conf-volume-driver",
                conf_path(uid)
            ),
        };
        assert_eq!(state("started"), Some(not_in_volume("started")));
        assert_eq!(state("restarted"), Some(not_in_volume("restarted")));
        assert_eq!(
            state("waiting"),
            Some(SparkConfRead::NotThere {
                reason: "it waits to start: the kubelet has not set up its conf volume spark-conf-volume-driver yet"
                    .into()
            })
        );
        assert_eq!(
            state("deleting"),
            Some(SparkConfRead::NotThere {
                reason: "it is being deleted: the kubelet tears its volumes down".into()
            })
        );
        assert_eq!(
            state("client-mode"),
            Some(SparkConfRead::NotThere {
                reason: "its pod mounts no Spark conf volume (spark-conf-volume-driver or spark-conf-volume): client \
                         mode, or a Spark before 2.4"
                    .into()
            })
        );
        assert_eq!(got.reads.len(), pods.len(), "every unfinished driver has a state");
        // The record names the first failure and counts the others.
        assert_eq!(got.errors.len(), 3, "{:?}", got.errors);
        let (status, failed) = got.status();
        assert!(failed);
        assert_eq!(
            status,
            format!(
                "error: driver spark-jobs/etl-driver: {}: is a directory, not a file (and 2 more drivers)",
                conf_path("unreadable")
            )
        );
        // A finished driver is not looked at.
        let mut done = with_volume("started", PodPhase::Succeeded, Some("terminated"));
        done.uid = "done".into();
        assert!(read_drivers(&host, &kubelet, &[done], "worker-1").reads.is_empty());
    }

    #[test]
    fn conf_mount_tells_a_missing_volume_from_a_pod_the_kubelet_has_not_started() {
        use nodemedic_rules::snapshot::ConfVolume;
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let host = HostPaths::new(root, None);
        let kubelet = host.kubelet_dir(None);
        let pods = root.join("var/lib/kubelet/pods");
        let waiting = |uid: &str| PodInfo {
            uid: uid.into(),
            conf_volume: Some(ConfVolume {
                volume: "spark-conf-volume-driver".into(),
                config_map: "spark-drv-1-conf-map".into(),
            }),
            ..Default::default()
        };
        let volume =
            |uid: &str| format!("/var/lib/kubelet/pods/{uid}/volumes/kubernetes.io~configmap/spark-conf-volume-driver");
        std::fs::create_dir_all(pods.join("mounted/volumes/kubernetes.io~configmap/spark-conf-volume-driver")).unwrap();
        std::fs::create_dir_all(pods.join("missing/volumes/kubernetes.io~projected/kube-api-access-1")).unwrap();
        // A file where the volume's directory should be is not a set-up volume.
        std::fs::create_dir_all(pods.join("odd/volumes/kubernetes.io~configmap")).unwrap();
        std::fs::write(
            pods.join("odd/volumes/kubernetes.io~configmap/spark-conf-volume-driver"),
            "x",
        )
        .unwrap();
        let mount = |uid: &str| conf_mount(&host, &kubelet, &waiting(uid));
        assert_eq!(
            mount("mounted"),
            Some(ConfMount::Mounted {
                path: volume("mounted")
            })
        );
        assert_eq!(
            mount("missing"),
            Some(ConfMount::Missing {
                path: volume("missing")
            })
        );
        assert_eq!(mount("odd"), Some(ConfMount::Missing { path: volume("odd") }));
        assert_eq!(
            mount("new"),
            Some(ConfMount::NoPodDir {
                path: "/var/lib/kubelet/pods/new".into()
            })
        );
        // A UID or volume name that is not one path component is never looked up.
        assert_eq!(mount(".."), None);
        let mut sneaky = waiting("missing");
        sneaky.conf_volume.as_mut().unwrap().volume = "../../../etc".into();
        assert_eq!(conf_mount(&host, &kubelet, &sneaky), None);
        assert_eq!(
            conf_mount(
                &host,
                &kubelet,
                &PodInfo {
                    uid: "missing".into(),
                    ..Default::default()
                }
            ),
            None
        );
        // A pod directory the agent may not read is said as such.
        std::fs::write(pods.join("file-not-dir"), "x").unwrap();
        let m = mount("file-not-dir");
        assert!(
            matches!(m, Some(ConfMount::Unknown { ref reason }) if reason.contains("file-not-dir")),
            "{m:?}"
        );
    }
}
