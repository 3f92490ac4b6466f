//! The kubelet's command line when no kubelet runs: the one its systemd unit starts it with
//! (docs/kubelet.md, "The kubelet's configuration").
//!
//! A stopped kubelet is exactly when a prediction matters (the restart that will refuse the
//! checkpoint), and then `/proc` has no command line to read. systemd builds it from the unit
//! `kubelet.service` and its drop-ins, the way `systemd.unit(5)` and `systemd.exec(5)` say:
//!
//! - the unit file is the first of [`UNIT_DIRS`] that has one; drop-ins are every
//!   `kubelet.service.d/*.conf` of those directories, a name in an earlier directory hiding
//!   the same name in a later one, applied in name order whatever their directory;
//! - `Environment=` assignments (quoted words, later ones win, an empty value clears them),
//!   then `EnvironmentFile=` files in order (`-` before the path: optional), which override
//!   `Environment=`;
//! - the last `ExecStart=` after the last empty one, split into words with quotes removed; a
//!   word that is exactly `$NAME` becomes the variable's value split at whitespace, `${NAME}`
//!   inside a word its value as it is.
//!
//! kubeadm's packages ship the drop-in `10-kubeadm.conf` (`$KUBELET_CONFIG_ARGS` with
//! `--config=/var/lib/kubelet/config.yaml`, `$KUBELET_KUBEADM_ARGS` from
//! `/var/lib/kubelet/kubeadm-flags.env`, `$KUBELET_EXTRA_ARGS` from `/etc/default/kubelet` or
//! `/etc/sysconfig/kubelet`); EKS's AMIs put `--config` on the unit's `ExecStart` and flags in
//! drop-ins (`10-kubelet-args.conf`) or `/etc/eks/kubelet/environment`; GKE's COS nodes and
//! kube-up put every flag in `KUBELET_OPTS` in `/etc/default/kubelet`; kOps in `DAEMON_ARGS`
//! in `/etc/sysconfig/kubelet`. All of those are read the same way.
//!
//! Parsing is pure ([`parse_unit`], [`parse_env_file`], [`split_words`], [`command_line`]);
//! [`read_unit`] reads the files under the host root, each bounded.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::read::{ReadError, read_text};
use crate::host::HostPaths;

/// The unit's name.
pub const UNIT: &str = "kubelet.service";

/// Where systemd looks for system units, highest priority first (`systemd.unit(5)`, "Unit File
/// Load Path"; `/lib/systemd/system` on distributions whose `/lib` is not `/usr/lib`).
pub const UNIT_DIRS: [&str; 5] = [
    "/etc/systemd/system",
    "/run/systemd/system",
    "/usr/local/lib/systemd/system",
    "/usr/lib/systemd/system",
    "/lib/systemd/system",
];

/// A unit, drop-in or environment file is small; anything larger is not one.
const UNIT_LIMIT: u64 = 256 * 1024;
/// At most this many drop-ins per directory are read.
const MAX_DROP_INS: usize = 64;
/// Symbolic links followed for one unit file.
const MAX_LINKS: usize = 8;

/// Why the unit could not be read.
#[derive(Debug, thiserror::Error)]
pub enum UnitError {
    #[error(transparent)]
    Read(#[from] ReadError),
    #[error("{dir}: {source}")]
    List { dir: String, source: std::io::Error },
    /// The `ExecStart=` line in force (in `file`, a host path) cannot be split into words.
    #[error("{file}: ExecStart: {source}")]
    ExecStart { file: String, source: SplitError },
}

/// Why a command line cannot be split into words as systemd would (`ExecStart=`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SplitError {
    /// A backslash is the last character: it escapes nothing.
    #[error("a backslash ends the line")]
    TrailingBackslash,
    /// A quote (`"` or `'`) opened and never closed.
    #[error("unterminated {0} quote")]
    UnterminatedQuote(char),
}

/// One word of a command line, and the host path of the file it came from (the unit line
/// that has it, or the file that set the variable it was expanded from).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Word {
    pub text: String,
    pub from: String,
}

/// An `EnvironmentFile=` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnvFile {
    /// The file's host path.
    pub path: String,
    /// Written with a leading `-`: a missing file is not an error.
    pub optional: bool,
}

/// What the `[Service]` sections of a unit and its drop-ins say, in the order read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Service {
    /// `Environment=` assignments: (name, value, file).
    pub environment: Vec<(String, String, String)>,
    /// `EnvironmentFile=` entries.
    pub environment_files: Vec<EnvFile>,
    /// The `ExecStart=` line in force and the file that has it.
    pub exec_start: Option<(String, String)>,
}

/// The unit's command line, as systemd would start it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnitCommand {
    /// Host path of the unit file.
    pub unit: String,
    /// Host paths of the drop-ins, in the order applied.
    pub drop_ins: Vec<String>,
    /// The command line (the program first), each word with where it came from; empty when
    /// the unit has no `ExecStart=`.
    pub words: Vec<Word>,
    /// What was skipped (a glob, lines that assign nothing), for the report.
    pub notes: Vec<String>,
    /// Environment files the unit requires (`EnvironmentFile=` without `-`) that are not
    /// visible: the command line is then not known.
    pub missing: Vec<String>,
}

/// Adds the `[Service]` settings of one unit or drop-in file (`file`: its host path) to
/// `service`. Lines the kubelet's start does not depend on are ignored, as are lines without
/// `=` (systemd logs and skips them).
pub fn parse_unit(text: &str, file: &str, service: &mut Service) {
    let mut in_service = false;
    for line in logical_lines(text) {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if line.starts_with('[') {
            in_service = line == "[Service]";
            continue;
        }
        if !in_service {
            continue;
        }
        let Some((key, value)) = line.split_once('=') else {
            continue;
        };
        let value = value.trim();
        match key.trim() {
            "Environment" if value.is_empty() => service.environment.clear(),
            "Environment" => {
                for word in split_words(value, true).unwrap_or_default() {
                    if let Some((name, v)) = word.split_once('=').filter(|(n, _)| valid_name(n)) {
                        service
                            .environment
                            .push((name.to_string(), v.to_string(), file.to_string()));
                    }
                }
            }
            "EnvironmentFile" if value.is_empty() => service.environment_files.clear(),
            "EnvironmentFile" => {
                let (optional, path) = match value.strip_prefix('-') {
                    Some(p) => (true, p.trim()),
                    None => (false, value),
                };
                service.environment_files.push(EnvFile {
                    path: path.to_string(),
                    optional,
                });
            }
            "ExecStart" if value.is_empty() => service.exec_start = None,
            "ExecStart" => service.exec_start = Some((value.to_string(), file.to_string())),
            _ => {}
        }
    }
}

/// A unit file's lines with backslash continuations joined (systemd joins them with a space
/// and skips comment lines inside a continuation).
fn logical_lines(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut pending: Option<String> = None;
    for raw in text.lines() {
        let trimmed = raw.trim();
        if let Some(acc) = &mut pending {
            if trimmed.starts_with('#') || trimmed.starts_with(';') {
                continue;
            }
            match raw.strip_suffix('\\') {
                Some(head) => {
                    acc.push(' ');
                    acc.push_str(head);
                }
                None => {
                    acc.push(' ');
                    acc.push_str(raw);
                    out.extend(pending.take());
                }
            }
            continue;
        }
        let is_comment = trimmed.starts_with('#') || trimmed.starts_with(';');
        match raw.strip_suffix('\\') {
            Some(head) if !is_comment => pending = Some(head.to_string()),
            _ => out.push(raw.to_string()),
        }
    }
    out.extend(pending);
    out
}

/// Whether `name` is an environment variable name systemd accepts in an assignment.
fn valid_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Splits `text` into words at unquoted whitespace, removing double and single quotes and
/// resolving backslash escapes (`\n`, `\t`, `\\`, `\"`, `\'`, `\ `; any other escaped character
/// stands for itself). `relax`: an unterminated quote ends at the end of the text (how systemd
/// splits a variable's value); otherwise it is an error (how it splits `ExecStart=`).
pub fn split_words(text: &str, relax: bool) -> Result<Vec<String>, SplitError> {
    let mut words = Vec::new();
    let mut word: Option<String> = None;
    let mut quote: Option<char> = None;
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        match (quote, c) {
            (None, c) if c.is_whitespace() => words.extend(word.take()),
            (None, '"' | '\'') => {
                quote = Some(c);
                word.get_or_insert_with(String::new);
            }
            (Some(q), c) if c == q => quote = None,
            (Some('\''), c) => word.get_or_insert_with(String::new).push(c),
            (_, '\\') => {
                let escaped = match chars.next() {
                    Some('n') => '\n',
                    Some('t') => '\t',
                    Some(other) => other,
                    None if relax => '\\',
                    None => return Err(SplitError::TrailingBackslash),
                };
                word.get_or_insert_with(String::new).push(escaped);
            }
            (_, c) => word.get_or_insert_with(String::new).push(c),
        }
    }
    if let (Some(q), false) = (quote, relax) {
        return Err(SplitError::UnterminatedQuote(q));
    }
    words.extend(word);
    Ok(words)
}

/// The assignments of an environment file (`systemd.exec(5)`, `EnvironmentFile=`): `KEY=VALUE`
/// lines, `#` and `;` comment lines, values in double quotes (backslash escapes, may span
/// lines) or single quotes (literal), unquoted values trimmed, a trailing backslash joining the
/// next line. Lines that assign nothing are skipped and counted in the second value.
pub fn parse_env_file(text: &str) -> (Vec<(String, String)>, usize) {
    let mut out = Vec::new();
    let mut skipped = 0;
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        let line = line.trim_start();
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        let Some((name, rest)) = line.split_once('=').map(|(n, r)| (n.trim(), r.trim_start())) else {
            skipped += 1;
            continue;
        };
        if !valid_name(name) {
            skipped += 1;
            continue;
        }
        let value = match rest.chars().next() {
            Some(q @ ('"' | '\'')) => {
                let mut value = String::new();
                let mut current = rest[1..].to_string();
                loop {
                    let mut chars = current.chars();
                    let mut closed = false;
                    while let Some(c) = chars.next() {
                        match c {
                            c if c == q => {
                                closed = true;
                                break;
                            }
                            '\\' if q == '"' => value.extend(chars.next()),
                            c => value.push(c),
                        }
                    }
                    if closed {
                        break;
                    }
                    // A quoted value goes on to the next line; a double-quoted one drops a
                    // line-ending backslash.
                    match lines.next() {
                        Some(next) => {
                            if !(q == '"' && current.ends_with('\\')) {
                                value.push('\n');
                            }
                            current = next.to_string();
                        }
                        None => break,
                    }
                }
                value
            }
            _ => {
                let mut value = String::new();
                let mut current = rest.to_string();
                while let Some(head) = current.strip_suffix('\\') {
                    value.push_str(head);
                    match lines.next() {
                        Some(next) => current = next.trim_start().to_string(),
                        None => {
                            current = String::new();
                            break;
                        }
                    }
                }
                value.push_str(&current);
                value.trim_end().to_string()
            }
        };
        out.push((name.to_string(), value));
    }
    (out, skipped)
}

/// The command line of `ExecStart=` (`line`, in `file`) with the variables in `env`
/// ((value, file it came from) by name). Prefixes that change how systemd runs the program
/// (`-`, `+`, `!`, `:`) are dropped; with `@` the second word is argv\[0\] and is dropped too.
pub fn command_line(line: &str, file: &str, env: &BTreeMap<String, (String, String)>) -> Result<Vec<Word>, SplitError> {
    let mut rest = line.trim_start();
    let mut at = false;
    while let Some(c) = rest.chars().next().filter(|c| matches!(c, '-' | '+' | '!' | ':' | '@')) {
        at |= c == '@';
        rest = &rest[1..];
    }
    let mut words = Vec::new();
    for (i, raw) in split_words(rest, false)?.into_iter().enumerate() {
        if at && i == 1 {
            continue;
        }
        if let Some(name) = raw.strip_prefix('$').filter(|n| valid_name(n)) {
            if let Some((value, from)) = env.get(name) {
                for w in split_words(value, true).unwrap_or_default() {
                    words.push(Word {
                        text: w,
                        from: from.clone(),
                    });
                }
            }
            continue;
        }
        let (text, from) = substitute_braced(&raw, env);
        words.push(Word {
            text,
            from: from.unwrap_or_else(|| file.to_string()),
        });
    }
    Ok(words)
}

/// `${NAME}` in `word` replaced by the variable's value (empty when unset), `$$` by `$`; and
/// the file of the last variable used.
fn substitute_braced(word: &str, env: &BTreeMap<String, (String, String)>) -> (String, Option<String>) {
    let mut out = String::new();
    let mut from = None;
    let mut rest = word;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        if let Some(tail) = after.strip_prefix('$') {
            out.push('$');
            rest = tail;
        } else if let Some((name, tail)) = after
            .strip_prefix('{')
            .and_then(|a| a.split_once('}'))
            .filter(|(n, _)| valid_name(n))
        {
            if let Some((value, file)) = env.get(name) {
                out.push_str(value);
                from = Some(file.clone());
            }
            rest = tail;
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    (out, from)
}

/// A host path's local path with the symbolic links of its last component followed under the
/// host root (an absolute target is a host path too); `None` when it links to `/dev/null`
/// (a masked unit) or loops.
fn resolve(host: &HostPaths, host_path: &str) -> Option<PathBuf> {
    let mut local = host.host(host_path);
    for _ in 0..MAX_LINKS {
        super::read::trace::stat(&local);
        let Ok(target) = std::fs::read_link(&local) else {
            return Some(local);
        };
        if target == Path::new("/dev/null") {
            return None;
        }
        local = if target.is_absolute() {
            host.host(&target.to_string_lossy())
        } else {
            local.parent().map_or(target.clone(), |p| p.join(&target))
        };
    }
    None
}

/// Reads a unit, drop-in or environment file at `host_path`; `Ok(None)` when it is not there
/// (or masked).
fn read_host_file(host: &HostPaths, host_path: &str) -> Result<Option<String>, ReadError> {
    let Some(local) = resolve(host, host_path) else {
        return Ok(None);
    };
    match read_text(&local, &host_path, UNIT_LIMIT) {
        Err(e) if e.is_not_found() => Ok(None),
        other => other,
    }
}

/// The `*.conf` names in the host directory `dir` (none when it is not there), sorted.
fn drop_in_names(host: &HostPaths, dir: &str) -> Result<Vec<String>, UnitError> {
    let local = host.host(dir);
    super::read::trace::dir(&local);
    let entries = match std::fs::read_dir(&local) {
        Ok(e) => e,
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory
            ) =>
        {
            return Ok(vec![]);
        }
        Err(source) => {
            return Err(UnitError::List {
                dir: dir.to_string(),
                source,
            });
        }
    };
    let mut names: Vec<String> = entries
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.ends_with(".conf"))
        .collect();
    names.sort();
    names.truncate(MAX_DROP_INS);
    Ok(names)
}

/// Reads `kubelet.service`, its drop-ins and environment files under the host root and
/// builds the command line systemd would start the kubelet with; `Ok(None)` when there is no
/// unit (or it is masked).
pub fn read_unit(host: &HostPaths) -> Result<Option<UnitCommand>, UnitError> {
    let mut unit = None;
    for dir in UNIT_DIRS {
        let path = format!("{dir}/{UNIT}");
        if let Some(text) = read_host_file(host, &path)? {
            unit = Some((path, text));
            break;
        }
    }
    let Some((unit_path, unit_text)) = unit else {
        return Ok(None);
    };
    // Drop-ins by name: the first directory that has a name wins.
    let mut drop_ins: BTreeMap<String, String> = BTreeMap::new();
    for dir in UNIT_DIRS {
        let d = format!("{dir}/{UNIT}.d");
        for name in drop_in_names(host, &d)? {
            drop_ins.entry(name.clone()).or_insert_with(|| format!("{d}/{name}"));
        }
    }
    let mut service = Service::default();
    parse_unit(&unit_text, &unit_path, &mut service);
    let mut applied = Vec::new();
    for path in drop_ins.into_values() {
        if let Some(text) = read_host_file(host, &path)? {
            parse_unit(&text, &path, &mut service);
            applied.push(path);
        }
    }
    let mut notes = Vec::new();
    let mut missing = Vec::new();
    let mut env: BTreeMap<String, (String, String)> = BTreeMap::new();
    for (name, value, file) in &service.environment {
        env.insert(name.clone(), (value.clone(), file.clone()));
    }
    for f in &service.environment_files {
        if f.path.contains(['*', '?', '[']) || !f.path.starts_with('/') {
            notes.push(format!(
                "{unit_path}: EnvironmentFile={} is not read (a glob or a relative path)",
                f.path
            ));
            continue;
        }
        match read_host_file(host, &f.path)? {
            Some(text) => {
                let (pairs, skipped) = parse_env_file(&text);
                if skipped > 0 {
                    notes.push(format!(
                        "{}: {skipped} line(s) that assign nothing were skipped",
                        f.path
                    ));
                }
                for (name, value) in pairs {
                    env.insert(name, (value, f.path.clone()));
                }
            }
            None if f.optional => {}
            None => missing.push(f.path.clone()),
        }
    }
    let words = match &service.exec_start {
        Some((line, file)) => command_line(line, file, &env).map_err(|source| UnitError::ExecStart {
            file: file.clone(),
            source,
        })?,
        None => vec![],
    };
    Ok(Some(UnitCommand {
        unit: unit_path,
        drop_ins: applied,
        words,
        notes,
        missing,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn texts(words: &[Word]) -> Vec<&str> {
        words.iter().map(|w| w.text.as_str()).collect()
    }

    /// kubeadm's drop-in as its packages install it (kubernetes/release, `10-kubeadm.conf`;
    /// kubernetes.io "Configuring each kubelet in your cluster using kubeadm").
    const KUBEADM: &str = r#"# Note: This dropin only works with kubeadm and kubelet v1.11+
[Service]
Environment="KUBELET_KUBECONFIG_ARGS=--bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf --kubeconfig=/etc/kubernetes/kubelet.conf"
Environment="KUBELET_CONFIG_ARGS=--config=/var/lib/kubelet/config.yaml"
# This is a file that "kubeadm init" and "kubeadm join" generates at runtime, populating the KUBELET_KUBEADM_ARGS variable dynamically
EnvironmentFile=-/var/lib/kubelet/kubeadm-flags.env
# This is a file that the user can use for overrides of the kubelet args as a last resort.
EnvironmentFile=-/etc/default/kubelet
ExecStart=
ExecStart=/usr/bin/kubelet $KUBELET_KUBECONFIG_ARGS $KUBELET_CONFIG_ARGS $KUBELET_KUBEADM_ARGS $KUBELET_EXTRA_ARGS
"#;

    const BASE_UNIT: &str = "[Unit]\nDescription=kubelet: The Kubernetes Node Agent\n\n[Service]\nExecStart=/usr/bin/kubelet\nRestart=always\n\n[Install]\nWantedBy=multi-user.target\n";

    #[test]
    fn kubeadm_drop_in_over_the_package_unit() {
        let mut s = Service::default();
        parse_unit(BASE_UNIT, "/usr/lib/systemd/system/kubelet.service", &mut s);
        let drop_in = "/usr/lib/systemd/system/kubelet.service.d/10-kubeadm.conf";
        parse_unit(KUBEADM, drop_in, &mut s);
        assert_eq!(s.environment.len(), 2);
        assert_eq!(
            s.environment_files,
            [
                EnvFile {
                    path: "/var/lib/kubelet/kubeadm-flags.env".into(),
                    optional: true
                },
                EnvFile {
                    path: "/etc/default/kubelet".into(),
                    optional: true
                }
            ]
        );
        let (line, file) = s.exec_start.clone().unwrap();
        assert_eq!(file, drop_in);
        let mut env: BTreeMap<String, (String, String)> = s
            .environment
            .iter()
            .map(|(n, v, f)| (n.clone(), (v.clone(), f.clone())))
            .collect();
        let (flags, skipped) = parse_env_file(
            "KUBELET_KUBEADM_ARGS=\"--container-runtime-endpoint=unix:///var/run/containerd/containerd.sock --pod-infra-container-image=registry.k8s.io/pause:3.9\"\n",
        );
        assert_eq!(skipped, 0);
        for (n, v) in flags {
            env.insert(n, (v, "/var/lib/kubelet/kubeadm-flags.env".into()));
        }
        let words = command_line(&line, &file, &env).unwrap();
        assert_eq!(
            texts(&words),
            [
                "/usr/bin/kubelet",
                "--bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf",
                "--kubeconfig=/etc/kubernetes/kubelet.conf",
                "--config=/var/lib/kubelet/config.yaml",
                "--container-runtime-endpoint=unix:///var/run/containerd/containerd.sock",
                "--pod-infra-container-image=registry.k8s.io/pause:3.9",
            ]
        );
        // Each word knows where it came from.
        assert_eq!(words[3].from, drop_in);
        assert_eq!(words[4].from, "/var/lib/kubelet/kubeadm-flags.env");
        assert_eq!(words[0].from, drop_in);
    }

    #[test]
    fn resets_sections_and_continuations() {
        let mut s = Service::default();
        parse_unit(
            "[Service]\nEnvironment=A=1 \"B=two words\" C\nExecStart=/bin/first\n[Install]\nExecStart=/bin/not-a-service-line\n",
            "u",
            &mut s,
        );
        assert_eq!(
            s.environment,
            [
                ("A".to_string(), "1".to_string(), "u".to_string()),
                ("B".to_string(), "two words".to_string(), "u".to_string())
            ]
        );
        assert_eq!(s.exec_start, Some(("/bin/first".to_string(), "u".to_string())));
        // An empty assignment clears what came before, also from other files.
        parse_unit(
            "[Service]\nEnvironment=\nEnvironmentFile=\nExecStart=\n; comment\nExecStart=/usr/bin/kubelet \\\n  --config /etc/k.yaml \\\n# a comment inside\n  --v=2\nno equals sign here\n",
            "d",
            &mut s,
        );
        assert!(s.environment.is_empty() && s.environment_files.is_empty());
        let (line, _) = s.exec_start.clone().unwrap();
        let words = command_line(&line, "d", &BTreeMap::new()).unwrap();
        assert_eq!(texts(&words), ["/usr/bin/kubelet", "--config", "/etc/k.yaml", "--v=2"]);
    }

    #[test]
    fn exec_start_words_and_variables() {
        let env: BTreeMap<String, (String, String)> = [
            (
                "OPTS",
                "--config /home/kubernetes/kubelet-config.yaml --v=2",
                "/etc/default/kubelet",
            ),
            ("DIR", "/etc/kubernetes", "unit"),
            ("QUOTED", "--node-labels=\"a=b c\" --x", "env"),
        ]
        .into_iter()
        .map(|(n, v, f)| (n.to_string(), (v.to_string(), f.to_string())))
        .collect();
        let w = command_line(
            "-/home/kubernetes/bin/kubelet $OPTS \"$OPTS\" --dir=${DIR}/x '$OPTS' $UNSET ${UNSET}end $$HOME",
            "unit",
            &env,
        )
        .unwrap();
        assert_eq!(
            texts(&w),
            [
                "/home/kubernetes/bin/kubelet",
                "--config",
                "/home/kubernetes/kubelet-config.yaml",
                "--v=2",
                // kOps writes ExecStart=... "$DAEMON_ARGS": quotes are removed first, so the
                // word is still a whole `$NAME` and is split.
                "--config",
                "/home/kubernetes/kubelet-config.yaml",
                "--v=2",
                "--dir=/etc/kubernetes/x",
                "--config",
                "/home/kubernetes/kubelet-config.yaml",
                "--v=2",
                "end",
                "$HOME",
            ]
        );
        assert_eq!(w[1].from, "/etc/default/kubelet");
        assert_eq!(w[7].from, "unit");
        // A value's own quotes group words.
        let q = command_line("kubelet $QUOTED", "u", &env).unwrap();
        assert_eq!(texts(&q), ["kubelet", "--node-labels=a=b c", "--x"]);
        // `@`: the second word is argv[0].
        let at = command_line("@/usr/bin/kubelet kubelet --v=1", "u", &env).unwrap();
        assert_eq!(texts(&at), ["/usr/bin/kubelet", "--v=1"]);
        // Malformed: an unterminated quote or a trailing backslash.
        assert_eq!(
            command_line("/usr/bin/kubelet \"--config=/x", "u", &env).map_err(|e| e.to_string()),
            Err("unterminated \" quote".into())
        );
        assert_eq!(
            command_line("/usr/bin/kubelet \"--config=/x", "u", &env),
            Err(SplitError::UnterminatedQuote('"'))
        );
        assert_eq!(
            command_line("/usr/bin/kubelet \\", "u", &env),
            Err(SplitError::TrailingBackslash)
        );
    }

    #[test]
    fn environment_files() {
        let text = "# kubeadm-flags.env\n\
            KUBELET_KUBEADM_ARGS=\"--cgroup-driver=systemd --kube-reserved cpu=500m,memory=1Gi\"\n\
            ; another comment\n\
            KUBELET_EXTRA_ARGS=--reserved-cpus=0,8   \n\
            SINGLE='a \\\"b\\\" $c'\n\
            DAEMON_ARGS=\"--v=2 \\\n  --config=/var/lib/kubelet/kubelet.conf\"\n\
            CONT=one \\\ntwo\n\
            EMPTY=\n\
            no assignment\n\
            9BAD=1\n";
        let (pairs, skipped) = parse_env_file(text);
        let get = |k: &str| pairs.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
        assert_eq!(
            get("KUBELET_KUBEADM_ARGS"),
            Some("--cgroup-driver=systemd --kube-reserved cpu=500m,memory=1Gi")
        );
        assert_eq!(get("KUBELET_EXTRA_ARGS"), Some("--reserved-cpus=0,8"));
        assert_eq!(get("SINGLE"), Some("a \\\"b\\\" $c"));
        assert_eq!(
            get("DAEMON_ARGS"),
            Some("--v=2   --config=/var/lib/kubelet/kubelet.conf")
        );
        assert_eq!(get("CONT"), Some("one two"));
        assert_eq!(get("EMPTY"), Some(""));
        // A line without `=` and a name that is not one assign nothing.
        assert_eq!(skipped, 2);
        assert_eq!(pairs.len(), 6);
        // An unterminated quote takes the rest of the file, as systemd does.
        let (pairs, _) = parse_env_file("A=\"open\nB=1\n");
        assert_eq!(pairs, [("A".to_string(), "open\nB=1".to_string())]);
    }

    #[test]
    fn words() {
        assert_eq!(
            split_words("  a  'b c' \"d\\\"e\" f\\ g  ", false).unwrap(),
            ["a", "b c", "d\"e", "f g"]
        );
        assert_eq!(split_words("x=\"\"", false).unwrap(), ["x="]);
        assert_eq!(split_words("\"\"", false).unwrap(), [""]);
        assert_eq!(split_words("'open", true).unwrap(), ["open"]);
        assert_eq!(
            split_words("'open", false).map_err(|e| e.to_string()),
            Err("unterminated ' quote".into())
        );
    }

    proptest::proptest! {
        #[test]
        fn unit_parsers_never_panic(text in "\\PC{0,300}") {
            let mut s = Service::default();
            parse_unit(&text, "f", &mut s);
            let _ = parse_env_file(&text);
            let _ = split_words(&text, true);
            let _ = command_line(&text, "f", &BTreeMap::new());
        }
    }
}
