//! What measuring Spark's local storage costs the daemon: the `local_storage` collector
//! (`LocalStore::measure`, the same code the daemon runs every `local_storage_interval_seconds`)
//! on a node of Spark executors whose local dirs hold shuffle files. Run it against a release
//! build:
//!
//! ```text
//! cargo build --release -p nodemedic-tests --bin storage-bench
//! target/release/storage-bench [PODS] [FILES] [RUNS] [DIR]   # defaults 50, 10000, 11, /var/tmp
//! ```
//!
//! 1. Writes, under a temporary directory in DIR (a real disk file system, not a tmpfs), a
//!    kubelet directory with PODS running executors, each with one `spark-local-dir-1`
//!    emptyDir laid out as Spark's DiskBlockManager does: `blockmgr-<uuid>/<00..3f>/` (64
//!    subdirectories, `spark.diskStore.subDirectories`) holding FILES shuffle files in all,
//!    half `shuffle_<shuffle>_<map>_0.data` (4 KiB written) and half `.index` (64 bytes).
//! 2. Times `measure` (wall, median and range of RUNS, page cache warm: the bench cannot drop
//!    the kernel's caches in every environment, and the agent's walk a minute after the last
//!    one meets a warm cache too) in four states:
//!    - **first walk**: a new store (the agent just started): every directory listed, every
//!      entry stat'd;
//!    - **unchanged, old files**: the files are older than the window (they were written over
//!      ten minutes ago), nothing changed since the last walk: a stat per directory;
//!    - **unchanged, recent files**: the same tree, written within the window (shuffle being
//!      written now may still grow): a stat per directory and per recent file;
//!    - **1% new files**: every pod writes FILES/100 new files between two walks (a shuffle
//!      being written): the directories that changed are listed again.
//! 3. Counts the file-system operations of one walk of each state with the agent's own
//!    recorder (every listing and stat goes through it), and the heap the store keeps between
//!    walks (a counting allocator: bytes live after the walk, less before it).
//!
//! Prints a Markdown table; docs/performance.md ("Spark's local storage") has the numbers.

use std::alloc::{GlobalAlloc, Layout, System};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Instant;

use nodemedic::collect::localstore::LocalStore;
use nodemedic::collect::read::trace::{self, Op};
use nodemedic::host::HostPaths;
use nodemedic_rules::snapshot::{ImageFs, LocalDirVolume, Observed, PodInfo};
use nodemedic_tests::measure::stats;

/// The system allocator, counting the bytes live.
struct Counting;

static LIVE: AtomicI64 = AtomicI64::new(0);

// SAFETY: every call is passed to the system allocator unchanged; only a counter is added.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as i64, Ordering::Relaxed);
        // SAFETY: the caller's contract is System's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as i64, Ordering::Relaxed);
        // SAFETY: the caller's contract is System's.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE.fetch_add(new_size as i64 - layout.size() as i64, Ordering::Relaxed);
        // SAFETY: the caller's contract is System's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

const WINDOW: f64 = 600.0;

fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// The node under test: its kubelet directory and its executors.
struct Bench {
    host: HostPaths,
    kubelet: PathBuf,
    pods: Vec<PodInfo>,
    /// Each pod's block manager directory.
    blockmgrs: Vec<PathBuf>,
    files: usize,
}

impl Bench {
    fn write(root: &Path, pods: usize, files: usize) -> Result<Bench, String> {
        let host = HostPaths::new(root, None);
        let kubelet = host.kubelet_dir(None);
        let mut infos = vec![];
        let mut blockmgrs = vec![];
        for p in 0..pods {
            let uid = format!("0000{p:04}-5b1e-4c3a-9d2f-6a7b8c9d0e1f");
            let blockmgr = kubelet
                .join("pods")
                .join(&uid)
                .join("volumes/kubernetes.io~empty-dir/spark-local-dir-1")
                .join(format!("blockmgr-{p:08}-3f2e-4d1c-8b7a-0123456789ab"));
            for sub in 0..64 {
                let d = blockmgr.join(format!("{sub:02x}"));
                std::fs::create_dir_all(&d).map_err(|e| format!("{}: {e}", d.display()))?;
            }
            infos.push(PodInfo {
                uid: uid.clone(),
                namespace: "spark".into(),
                name: format!("etl-{p}-exec-1"),
                phase: "Running".into(),
                labels: [
                    ("spark-role".to_string(), "executor".to_string()),
                    ("spark-app-selector".to_string(), format!("spark-{p:032x}")),
                ]
                .into(),
                local_dir_volumes: vec![LocalDirVolume {
                    name: "spark-local-dir-1".into(),
                    ..Default::default()
                }],
                ..Default::default()
            });
            blockmgrs.push(blockmgr);
        }
        let bench = Bench {
            host,
            kubelet,
            pods: infos,
            blockmgrs,
            files,
        };
        for p in 0..pods {
            bench.shuffle(p, 0, files)?;
        }
        Ok(bench)
    }

    /// Writes the shuffle files `from..to` of pod `p`: a `.data` and an `.index` per map task,
    /// placed in the subdirectory of their name's hash as Spark does (here: the map id).
    fn shuffle(&self, p: usize, from: usize, to: usize) -> Result<(), String> {
        let data = vec![7u8; 4096];
        for i in from..to {
            let map = i / 2;
            let (name, bytes) = if i % 2 == 0 {
                (format!("shuffle_0_{map}_0.data"), &data[..])
            } else {
                (format!("shuffle_0_{map}_0.index"), &data[..64])
            };
            let path = self.blockmgrs[p].join(format!("{:02x}", map % 64)).join(name);
            std::fs::write(&path, bytes).map_err(|e| format!("{}: {e}", path.display()))?;
        }
        Ok(())
    }

    fn measure(&self, store: &mut LocalStore, now: f64) -> Result<(u64, u64), String> {
        match store.measure(&self.host, &self.kubelet, &self.pods, now, WINDOW, ImageFs::default()) {
            Observed::Ok(s) => Ok((
                s.pods.iter().flat_map(|p| &p.dirs).map(|d| d.bytes).sum(),
                s.pods.iter().flat_map(|p| &p.dirs).map(|d| d.files).sum(),
            )),
            other => Err(format!("local storage not measured: {other:?}")),
        }
    }
}

/// One row: a state's wall times, the operations of one of its walks, and the store's heap.
struct Row {
    state: &'static str,
    millis: Vec<f64>,
    lists: usize,
    stats: usize,
    heap: i64,
    files: u64,
}

/// Times `walk` `runs` times after `prepare`, then records the operations of one more.
fn row(
    state: &'static str,
    runs: usize,
    mut prepare: impl FnMut() -> Result<(), String>,
    mut walk: impl FnMut() -> Result<(u64, u64), String>,
    heap: impl Fn() -> i64,
) -> Result<Row, String> {
    let mut millis = vec![];
    let mut files = 0;
    for _ in 0..runs {
        prepare()?;
        let t = Instant::now();
        files = walk()?.1;
        millis.push(t.elapsed().as_secs_f64() * 1e3);
    }
    prepare()?;
    trace::start();
    walk()?;
    let ops = trace::stop();
    Ok(Row {
        state,
        millis,
        lists: ops.iter().filter(|(op, _)| *op == Op::List).count(),
        stats: ops.iter().filter(|(op, _)| *op == Op::Stat).count(),
        heap: heap(),
        files,
    })
}

fn run(pods: usize, files: usize, runs: usize, dir: &Path) -> Result<(), String> {
    let tmp = tempfile::Builder::new()
        .prefix("storage-bench-")
        .tempdir_in(dir)
        .map_err(|e| format!("{}: {e}", dir.display()))?;
    let t = Instant::now();
    let bench = Bench::write(tmp.path(), pods, files)?;
    println!(
        "wrote {pods} executors x {files} shuffle files ({} files) under {} in {:.1} s",
        pods * files,
        tmp.path().display(),
        t.elapsed().as_secs_f64()
    );
    let mut rows = vec![];

    // Written just now: every file is recent. The store is new on every run.
    let mut kept = 0i64;
    rows.push(row(
        "first walk (agent start)",
        runs,
        || Ok(()),
        || {
            let before = LIVE.load(Ordering::Relaxed);
            let mut store = LocalStore::default();
            let r = bench.measure(&mut store, unix_now());
            kept = LIVE.load(Ordering::Relaxed) - before;
            r
        },
        || kept,
    )?);

    let mut store = LocalStore::default();
    let base = LIVE.load(Ordering::Relaxed);
    bench.measure(&mut store, unix_now())?;
    rows.push(row(
        "unchanged, recent files (within the window)",
        runs,
        || Ok(()),
        || bench.measure(&mut store, unix_now()),
        || LIVE.load(Ordering::Relaxed) - base,
    )?);

    // The same tree seen from the window's end: its files are older than the window now.
    let later = unix_now() + WINDOW + 60.0;
    let mut store = LocalStore::default();
    let base = LIVE.load(Ordering::Relaxed);
    bench.measure(&mut store, later)?;
    rows.push(row(
        "unchanged, old files (past the window)",
        runs,
        || Ok(()),
        || bench.measure(&mut store, later),
        || LIVE.load(Ordering::Relaxed) - base,
    )?);

    // Every pod writes 1% more files between two walks.
    let step = (files / 100).max(1);
    let mut written = files;
    let mut store = LocalStore::default();
    let base = LIVE.load(Ordering::Relaxed);
    bench.measure(&mut store, unix_now())?;
    rows.push(row(
        "1% new files per pod since the last walk",
        runs,
        || {
            for p in 0..pods {
                bench.shuffle(p, written, written + step)?;
            }
            written += step;
            Ok(())
        },
        || bench.measure(&mut store, unix_now()),
        || LIVE.load(Ordering::Relaxed) - base,
    )?);

    println!();
    println!(
        "| state ({pods} pods x {} files) | wall ms, median (min-max) of {runs} | per 1,000 files | listings | stats | store heap |",
        bench.files
    );
    println!("|---|---|---|---|---|---|");
    for r in &rows {
        let (min, median, max) = stats(r.millis.clone());
        println!(
            "| {} | {median:.1} ({min:.1}-{max:.1}) | {:.2} ms | {} | {} | {:.1} MiB |",
            r.state,
            median / (r.files as f64 / 1000.0),
            r.lists,
            r.stats,
            r.heap as f64 / (1 << 20) as f64
        );
    }
    Ok(())
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let arg = |i: usize, default: usize| args.get(i).and_then(|a| a.parse().ok()).unwrap_or(default);
    let dir = args.get(3).map_or(PathBuf::from("/var/tmp"), PathBuf::from);
    match run(arg(0, 50), arg(1, 10_000), arg(2, 11).max(1), &dir) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("storage-bench: {e}");
            ExitCode::FAILURE
        }
    }
}
