//! The floor's recording is complete: every file `nodemedic scan` opens, directory it lists
//! and path it looks at under the host root, as `strace` sees the process do it, is one
//! `nodemedic scan --record-reads` wrote down (what `floor-bench` replays as the least I/O a
//! scan could do), and nothing is recorded that the scan did not do. Needs Debian's `strace`
//! (tests/run.sh installs it) and ptrace, which root has here.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use nodemedic::collect::read::trace::{self, Op};
use nodemedic_tests::measure::scan_args;
use nodemedic_tests::nodemedic_bin;

/// Paths outside the host root that the process may touch: the dynamic loader's cache and
/// preload list, the shared libraries, the process's own `/proc/self` (the standard library's
/// stack guard reads `/proc/self/maps`). Anything else outside the root fails the test.
const OUTSIDE_ROOT: [&str; 6] = [
    "/etc/ld.so.cache",
    "/etc/ld.so.preload",
    "/lib/",
    "/lib64/",
    "/usr/lib/",
    "/proc/self/",
];

/// One file-system operation as `strace -e trace=%file` prints it, by the kind the recorder
/// uses: an `open`/`openat` with `O_DIRECTORY` is a listing (`read_dir` opens the directory
/// so), any other open a read, every other call that names a path (`statx`, `newfstatat`,
/// `access`, `readlink`, ...) a stat. `None` for lines that name no path (a call on an open
/// descriptor, `"", AT_EMPTY_PATH`; the second half of an interrupted call) and for the
/// `execve` of the binary itself. `Err` for a path relative to a directory descriptor, which
/// this test cannot place.
fn parse_strace_line(line: &str) -> Result<Option<(Op, String)>, String> {
    // `PID name(args) = result` or `PID name(args <unfinished ...>`.
    let Some((_pid, call)) = line.split_once(' ') else {
        return Ok(None);
    };
    // strace pads the process id to a width.
    let Some((name, args)) = call.trim_start().split_once('(') else {
        return Ok(None);
    };
    if name.starts_with('<') || name == "execve" {
        return Ok(None);
    }
    let (dirfd, rest) = match args.strip_prefix('"') {
        Some(rest) => (None, rest),
        None => match args.split_once(", \"") {
            Some((fd, rest)) => (Some(fd), rest),
            None => return Ok(None),
        },
    };
    let Some(end) = rest.find('"') else {
        return Err(format!("unterminated path: {line}"));
    };
    let path = &rest[..end];
    match dirfd {
        _ if path.is_empty() => return Ok(None),
        Some(fd) if fd != "AT_FDCWD" => return Err(format!("a path relative to descriptor {fd}: {line}")),
        _ => {}
    }
    if !path.starts_with('/') {
        return Err(format!("a relative path: {line}"));
    }
    let op = match name {
        "open" | "openat" | "openat2" if rest[end..].contains("O_DIRECTORY") => Op::List,
        "open" | "openat" | "openat2" => Op::Read,
        _ => Op::Stat,
    };
    Ok(Some((op, path.to_string())))
}

/// How many times each (operation, path) occurs.
type Counted = BTreeMap<(&'static str, String), usize>;

fn count(ops: impl IntoIterator<Item = (Op, String)>) -> Counted {
    let mut out = Counted::new();
    for (op, path) in ops {
        *out.entry((op.as_str(), path)).or_default() += 1;
    }
    out
}

/// Runs the benches' scan of the tree at `root` under strace with `--record-reads`: what the
/// process did under `root` and what it recorded, each as counted operations.
fn scan_traced(dir: &Path, root: &Path) -> (Counted, Counted) {
    let (list, strace_out) = (dir.join("recorded.txt"), dir.join("strace.txt"));
    let (root_s, pods) = (root.to_string_lossy(), root.join("pods.json"));
    let pods_s = pods.to_string_lossy();
    let mut args: Vec<String> = scan_args(&root_s, &pods_s).iter().map(|s| s.to_string()).collect();
    args.extend(["--record-reads".into(), list.to_string_lossy().into_owned()]);
    let status = Command::new("strace")
        .args(["-f", "-qq", "-e", "trace=%file", "-o"])
        .arg(&strace_out)
        .arg(nodemedic_bin())
        .args(&args)
        // cargo's library path for the test would send the loader through target/ first.
        .env_remove("LD_LIBRARY_PATH")
        .stdout(std::process::Stdio::null())
        .status()
        .expect("strace (Debian's strace; tests/run.sh installs it)");
    // A scan exits 0 (no findings) or 1 (findings).
    assert!(matches!(status.code(), Some(0 | 1)), "strace nodemedic scan: {status}");

    let text = std::fs::read_to_string(&strace_out).unwrap();
    let mut touched = vec![];
    let mut outside = vec![];
    for line in text.lines() {
        match parse_strace_line(line) {
            Ok(Some((op, path))) if Path::new(&path).starts_with(root) => touched.push((op, path)),
            Ok(Some((_, path))) if path == list.to_string_lossy() => {}
            Ok(Some((_, path))) if OUTSIDE_ROOT.iter().any(|p| path.starts_with(p)) => {}
            Ok(Some((op, path))) => outside.push(format!("{} {path}", op.as_str())),
            Ok(None) => {}
            Err(e) => panic!("{e}"),
        }
    }
    assert!(
        outside.is_empty(),
        "the scan touched paths outside the host root: {outside:?}"
    );
    let recorded: Vec<(Op, String)> = std::fs::read(&list)
        .unwrap()
        .split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .map(|l| trace::parse_line(l).unwrap_or_else(|| panic!("bad recorded line {:?}", String::from_utf8_lossy(l))))
        .map(|(op, p): (Op, PathBuf)| (op, p.to_string_lossy().into_owned()))
        .collect();
    assert!(
        recorded.iter().all(|(_, p)| Path::new(p).starts_with(root)),
        "recorded outside the root"
    );
    (count(touched), count(recorded))
}

/// The operations in `a` that `b` lacks (or has fewer of), for a readable failure.
fn missing(a: &Counted, b: &Counted) -> Vec<String> {
    a.iter()
        .filter(|(k, n)| b.get(*k).copied().unwrap_or(0) < **n)
        .map(|((op, p), n)| {
            format!(
                "{op} {p} x{n} (recorded x{})",
                b.get(&(*op, p.clone())).copied().unwrap_or(0)
            )
        })
        .collect()
}

fn listings_under(ops: &Counted, root: &Path, dir: &str) -> usize {
    let dir = root.join(dir);
    ops.iter()
        .filter(|((op, p), _)| *op == "list" && Path::new(p).starts_with(&dir))
        .map(|(_, n)| n)
        .sum()
}

/// Every host operation done was recorded, and every one recorded was done, as often.
fn assert_recorded_is_done(touched: &Counted, recorded: &Counted) {
    assert_eq!(
        missing(touched, recorded),
        Vec::<String>::new(),
        "done but not recorded"
    );
    assert_eq!(
        missing(recorded, touched),
        Vec::<String>::new(),
        "recorded but not done"
    );
}

#[test]
fn the_recording_is_every_host_operation_of_a_scan() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("node");
    // 256 CPUs on 2 NUMA nodes, 20 executor pods.
    nodemedic_tests::scenarios::big_node(20, 2).write(&root).unwrap();
    let (touched, recorded) = scan_traced(dir.path(), &root);
    assert_recorded_is_done(&touched, &recorded);
    assert_eq!(touched, recorded);
    // The CPUs' NUMA nodes: one listing of /sys/devices/system/node and a read of each node's
    // `cpulist`, no listing of a CPU's directory.
    assert_eq!(listings_under(&touched, &root, "sys/devices/system/cpu"), 0);
    assert_eq!(listings_under(&touched, &root, "sys/devices/system/node"), 1);
    let cpulists = touched
        .keys()
        .filter(|(op, p)| *op == "read" && p.ends_with("/cpulist"))
        .count();
    assert_eq!(cpulists, 2);

    // Without /sys/devices/system/node (a container that mounts only the cpu directory): a
    // listing per CPU, each one recorded.
    std::fs::remove_dir_all(root.join("sys/devices/system/node")).unwrap();
    let (touched, recorded) = scan_traced(dir.path(), &root);
    assert_recorded_is_done(&touched, &recorded);
    assert_eq!(touched, recorded);
    assert_eq!(listings_under(&touched, &root, "sys/devices/system/cpu"), 256);
}

/// A kubeadm node with Spark pods, stale pinning, Spark local dirs and a driver's
/// `spark.properties`: the walk of the local dirs and the Spark configuration are recorded too.
#[test]
fn the_recording_is_complete_on_a_spark_node() {
    use nodemedic_tests::hosttree::{Layout, Runtime};
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("node");
    nodemedic_tests::scenarios::spark_node("worker-3", Layout::V1Cgroupfs, Runtime::Containerd)
        .write(&root)
        .unwrap();
    let (touched, recorded) = scan_traced(dir.path(), &root);
    assert_recorded_is_done(&touched, &recorded);
}

#[test]
fn strace_lines_are_read_as_operations() {
    let p = |l: &str| parse_strace_line(l);
    assert_eq!(
        p(r#"7 openat(AT_FDCWD, "/r/sys", O_RDONLY|O_NONBLOCK|O_CLOEXEC|O_DIRECTORY) = 9"#),
        Ok(Some((Op::List, "/r/sys".into())))
    );
    assert_eq!(
        p(r#"7 openat(AT_FDCWD, "/r/f", O_RDONLY|O_CLOEXEC <unfinished ...>"#),
        Ok(Some((Op::Read, "/r/f".into())))
    );
    assert_eq!(
        p(r#"7 statx(AT_FDCWD, "/r", AT_STATX_SYNC_AS_STAT, STATX_ALL, {stx_mask=STATX_ALL}) = 0"#),
        Ok(Some((Op::Stat, "/r".into())))
    );
    assert_eq!(
        p(r#"7 access("/etc/ld.so.preload", R_OK) = -1 ENOENT (No such file or directory)"#),
        Ok(Some((Op::Stat, "/etc/ld.so.preload".into())))
    );
    assert_eq!(
        p(r#"7 newfstatat(3, "", {st_mode=S_IFREG|0644}, AT_EMPTY_PATH) = 0"#),
        Ok(None)
    );
    assert_eq!(p(r#"7 <... openat resumed>) = 3"#), Ok(None));
    assert_eq!(p(r#"7  execve("/bin/x", ["x"], 0x7ffd /* 3 vars */) = 0"#), Ok(None));
    assert_eq!(p(r#"7  access("/x", R_OK) = 0"#), Ok(Some((Op::Stat, "/x".into()))));
    assert!(p(r#"7 openat(9, "cpu0", O_RDONLY) = 3"#).is_err());
}
