//! The floor of a one-shot scan: the whole `nodemedic scan` process on the generated 250-pod
//! node against a process that does nothing but the file-system operations that very scan
//! did, measured alternately in the same run. Run it against a release build:
//!
//! ```text
//! cargo build --release -p nodemedic -p nodemedic-tests --bins
//! target/release/floor-bench [RUNS] [PODS]      # defaults 21 and 250
//! ```
//!
//! 1. Writes the node of `make-example DIR --big-node 250` (`scenarios::big_node(250, 5)`)
//!    to a temporary directory.
//! 2. Runs the scan once as the benches run it (`nodemedic scan --host-root DIR --pods
//!    DIR/pods.json --node bench-node --format json`) with the hidden `--record-reads LIST`:
//!    every file it read, directory it listed and path it looked at, in order (all of them:
//!    tests/tests/floor.rs compares the list with what `strace` sees the scan do).
//! 3. RUNS times, alternately: that scan (without the recording), and the floor, this program
//!    re-executed as `floor-bench --floor LIST`, which reads each recorded file to its end into
//!    one reused buffer, lists each directory, `symlink_metadata`s each looked-at path, and
//!    does nothing else. Both are whole processes started the same way (wall time around
//!    spawn and wait, output to /dev/null), so both pay a process start. Two more processes
//!    in the same rotation show what the start alone costs each: `nodemedic rules --format
//!    json` (prints the rule catalogue, reads nothing on the host) and the floor with an empty
//!    list.
//!
//! Prints the operation counts, a Markdown table of median (min-max) wall times and the ratio
//! of the medians, scan / floor (issue 16's goal: at most 1.2). `NODEMEDIC_BIN` names another
//! nodemedic.

use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::Instant;

use nodemedic::collect::read::trace::{self, Op};
use nodemedic_tests::measure::{self, stats};

/// The floor: the operations of `list`, with plain std calls. Prints `reads lists stats
/// bytes failed` (failed: operations that returned an error, as the scan's did too).
fn floor(list: &Path) -> ExitCode {
    let Ok(text) = std::fs::read(list) else {
        eprintln!("floor-bench: cannot read {}", list.display());
        return ExitCode::from(2);
    };
    let ops: Vec<(Op, PathBuf)> = text
        .split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .filter_map(trace::parse_line)
        .collect();
    let mut buf = Vec::with_capacity(64 * 1024);
    let (mut counts, mut bytes, mut failed) = ([0u64; 3], 0u64, 0u64);
    for (op, path) in &ops {
        let ok = match op {
            Op::Read => {
                counts[0] += 1;
                match std::fs::File::open(path) {
                    Ok(f) => read_whole(f, &mut buf).map(|n| bytes += n as u64).is_ok(),
                    Err(_) => false,
                }
            }
            Op::List => {
                counts[1] += 1;
                std::fs::read_dir(path).map(|d| d.for_each(drop)).is_ok()
            }
            Op::Stat => {
                counts[2] += 1;
                std::fs::symlink_metadata(path).is_ok()
            }
        };
        failed += u64::from(!ok);
    }
    println!("{} {} {} {bytes} {failed}", counts[0], counts[1], counts[2]);
    ExitCode::SUCCESS
}

/// Reads `f` to its end into `buf`, which keeps its capacity from file to file: the bytes
/// read. Through `Take`, as the scan reads: `File`'s own `read_to_end` first asks `fstat` and
/// `lseek` for a size hint.
fn read_whole(f: std::fs::File, buf: &mut Vec<u8>) -> std::io::Result<usize> {
    buf.clear();
    f.take(u64::MAX).read_to_end(buf)
}

/// Wall milliseconds of one run of `bin args`, output discarded; `Err` unless it exits with
/// one of `codes`.
fn timed(bin: &Path, args: &[&str], codes: &[i32]) -> Result<f64, String> {
    let start = Instant::now();
    let status = Command::new(bin)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map_err(|e| format!("{}: {e}", bin.display()))?;
    let ms = start.elapsed().as_secs_f64() * 1000.0;
    match status.code() {
        Some(c) if codes.contains(&c) => Ok(ms),
        _ => Err(format!("{} {}: {status}", bin.display(), args.join(" "))),
    }
}

fn bench(runs: usize, node_pods: usize) -> Result<(), String> {
    let me = std::env::current_exe().map_err(|e| format!("cannot find this program: {e}"))?;
    let bin = measure::nodemedic_bin();
    println!("binary: {}", bin.display());
    let load = || {
        std::fs::read_to_string("/proc/loadavg")
            .unwrap_or_default()
            .trim()
            .to_string()
    };
    println!("load average at start: {}", load());
    let dir = tempfile::tempdir().map_err(|e| format!("tempdir: {e}"))?;
    let root = dir.path().join("node");
    nodemedic_tests::scenarios::big_node(node_pods, 5)
        .write(&root)
        .map_err(|e| e.to_string())?;
    let list = dir.path().join("reads.txt");
    let empty = dir.path().join("empty.txt");
    std::fs::write(&empty, "").map_err(|e| format!("{}: {e}", empty.display()))?;
    let (root, pods) = (
        root.to_string_lossy().into_owned(),
        root.join("pods.json").to_string_lossy().into_owned(),
    );
    let scan = [
        "scan",
        "--host-root",
        &root,
        "--pods",
        &pods,
        "--node",
        "bench-node",
        "--format",
        "json",
    ];
    let (list_arg, empty_arg) = (list.to_string_lossy(), empty.to_string_lossy());
    let recorded: Vec<&str> = scan.iter().copied().chain(["--record-reads", &list_arg]).collect();
    // A scan exits 0 (no findings) or 1 (findings).
    timed(&bin, &recorded, &[0, 1])?;

    let out = Command::new(&me)
        .args(["--floor", &list_arg])
        .output()
        .map_err(|e| format!("cannot re-run {}: {e}", me.display()))?;
    let line = String::from_utf8_lossy(&out.stdout);
    let n: Vec<u64> = line.split_whitespace().filter_map(|x| x.parse().ok()).collect();
    if !out.status.success() || n.len() != 5 || n[0] == 0 {
        return Err(format!("bad floor run: {line:?} ({})", out.status));
    }
    println!(
        "\nrecorded operations at {node_pods} pods: {} reads ({:.1} MB read), {} directory lists, {} stats; {} failed, in the floor as in the scan (paths the generated node does not have)",
        n[0],
        n[3] as f64 / 1e6,
        n[1],
        n[2],
        n[4]
    );

    let procs: [(&str, &Path, Vec<&str>, &[i32]); 4] = [
        ("`nodemedic scan`", &bin, scan.to_vec(), &[0, 1]),
        ("floor: the recorded operations", &me, vec!["--floor", &list_arg], &[0]),
        (
            "`nodemedic rules --format json` (start only)",
            &bin,
            vec!["rules", "--format", "json"],
            &[0],
        ),
        (
            "floor with an empty list (start only)",
            &me,
            vec!["--floor", &empty_arg],
            &[0],
        ),
    ];
    let mut walls: Vec<Vec<f64>> = vec![vec![]; procs.len()];
    for run in 0..runs {
        // One run of each in turn; which one starts the round rotates.
        for k in 0..procs.len() {
            let i = (run + k) % procs.len();
            let (_, bin, args, codes) = &procs[i];
            walls[i].push(timed(bin, args, codes)?);
        }
    }
    println!("\n| process ({runs} runs, alternating) | wall median (min-max) ms |");
    println!("|---|---|");
    let mut medians = vec![];
    for ((name, ..), w) in procs.iter().zip(walls) {
        let (min, med, max) = stats(w);
        medians.push(med);
        println!("| {name} | {med:.1} ({min:.1}-{max:.1}) |");
    }
    println!(
        "\nscan / floor (medians): **{:.2}** (goal: at most 1.2); beyond the process starts: {:.1} ms / {:.1} ms = {:.2}",
        medians[0] / medians[1],
        medians[0] - medians[2],
        medians[1] - medians[3],
        (medians[0] - medians[2]) / (medians[1] - medians[3])
    );
    println!("load average at end: {}", load());
    Ok(())
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let [flag, list] = args.as_slice() {
        if flag == "--floor" {
            return floor(Path::new(list));
        }
    }
    let runs: usize = args.first().and_then(|a| a.parse().ok()).unwrap_or(21);
    let pods: usize = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(250);
    if let Err(e) = bench(runs, pods) {
        eprintln!("floor-bench: {e}");
        return ExitCode::from(2);
    }
    ExitCode::SUCCESS
}
