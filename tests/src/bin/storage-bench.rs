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
//!    - **unchanged, every file recent**: nothing changed since the last walk, every file
//!      modified within `HOT_SECONDS` (may still grow): a stat per directory and per file;
//!    - **unchanged, old files**: nothing changed, the files older than that: a stat per
//!      directory;
//!    - **1% new files**: every pod writes FILES/100 new files between two walks (a shuffle
//!      being written; the earlier files old): the directories that changed are listed again;
//!    - **the kubelet's figures**: with `kubelet_stats_url`, a `/stats/summary` answer of the
//!      node (the executors and 60 other pods, each with its containers' CPU, memory, rootfs
//!      and log figures, network and volumes, as a kubelet 1.33 writes it) parsed, and the
//!      executors' emptyDirs taken from it instead of walked (the request itself not counted).
//!
//!    The store is given its clock (as the daemon gives it the time), so which files are
//!    recent does not depend on how long the writing took.
//! 3. Counts the file-system operations of one walk of each state with the agent's own
//!    recorder (every listing and stat goes through it), and the memory the store keeps
//!    between walks: in a child process (this program, `--store-rss ROOT PODS AT`) that
//!    makes one walk, the growth of its resident set from before the store to after the walk,
//!    with the files recent and with them old.
//!
//! 4. Times a one-shot `nodemedic scan` of the node (its pods file beside it; `NODEMEDIC_BIN`,
//!    else the `nodemedic` beside this program) against the same node with its local dirs
//!    empty: a scan does not measure local storage (it has no growth to forecast), and this
//!    shows what the files cost it.
//!
//! Prints a Markdown table; docs/performance.md ("Spark's local storage") has the numbers.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::Instant;

use nodemedic::collect::kubelet_stats;
use nodemedic::collect::localstore::LocalStore;
use nodemedic::collect::read::trace::{self, Op};
use nodemedic::host::HostPaths;
use nodemedic_rules::snapshot::{ImageFs, LocalDirVolume, Observed, PodInfo};
use nodemedic_tests::measure::{self, Spread, stats, status_kib};

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
    /// When the writing of the files began and ended, unix seconds.
    began: f64,
    ended: f64,
}

impl Bench {
    /// The node's paths and pods (nothing written).
    fn layout(root: &Path, pods: usize) -> Bench {
        let host = HostPaths::new(root, None);
        let kubelet = host.kubelet_dir(None);
        let mut infos = vec![];
        let mut blockmgrs = vec![];
        for p in 0..pods {
            let uid = format!("0000{p:04}-5b1e-4c3a-9d2f-6a7b8c9d0e1f");
            blockmgrs.push(
                kubelet
                    .join("pods")
                    .join(&uid)
                    .join("volumes/kubernetes.io~empty-dir/spark-local-dir-1")
                    .join(format!("blockmgr-{p:08}-3f2e-4d1c-8b7a-0123456789ab")),
            );
            infos.push(PodInfo {
                uid,
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
        }
        Bench {
            host,
            kubelet,
            pods: infos,
            blockmgrs,
            began: 0.0,
            ended: 0.0,
        }
    }

    /// The pods as `kubectl get pods -o json` lists them, for a scan's `--pods`.
    fn pods_json(&self) -> String {
        let items: Vec<serde_json::Value> = self
            .pods
            .iter()
            .map(|p| {
                serde_json::json!({
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {"name": p.name, "namespace": p.namespace, "uid": p.uid, "labels": p.labels},
                    "spec": {
                        "nodeName": "bench-node",
                        "containers": [{"name": "spark-kubernetes-executor", "image": "apache/spark:3.5.3"}],
                        "volumes": [{"name": "spark-local-dir-1", "emptyDir": {}}]
                    },
                    "status": {"phase": "Running"}
                })
            })
            .collect();
        serde_json::json!({"apiVersion": "v1", "kind": "List", "items": items}).to_string()
    }

    /// Writes the node: every pod's 64 subdirectories and its `files` shuffle files.
    fn write(root: &Path, pods: usize, files: usize) -> Result<Bench, String> {
        let mut bench = Bench::layout(root, pods);
        bench.began = unix_now().floor() - 1.0;
        for p in 0..pods {
            for sub in 0..64 {
                let d = bench.blockmgrs[p].join(format!("{sub:02x}"));
                std::fs::create_dir_all(&d).map_err(|e| format!("{}: {e}", d.display()))?;
            }
            bench.shuffle(p, 0, files, None)?;
        }
        bench.ended = unix_now();
        Ok(bench)
    }

    /// Writes the shuffle files `from..to` of pod `p`: a `.data` and an `.index` per map task,
    /// placed in the subdirectory of their name's hash as Spark does (here: the map id); with
    /// `mtime`, their modification time is set to it (unix seconds).
    fn shuffle(&self, p: usize, from: usize, to: usize, mtime: Option<f64>) -> Result<(), String> {
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
            if let Some(at) = mtime {
                let t = nix::sys::time::TimeSpec::new(at as i64, 0);
                nix::sys::stat::utimensat(
                    nix::fcntl::AT_FDCWD,
                    &path,
                    &t,
                    &t,
                    nix::sys::stat::UtimensatFlags::NoFollowSymlink,
                )
                .map_err(|e| format!("{}: {e}", path.display()))?;
            }
        }
        Ok(())
    }

    /// One measurement, with the kubelet's `summary` when given; the files it counted (none on
    /// a store's first measurement, which has no growth yet and reports nothing).
    fn measure(
        &self,
        store: &mut LocalStore,
        now: f64,
        summary: Option<&kubelet_stats::Summary>,
    ) -> Result<Option<u64>, String> {
        let measured = store.measure_with(
            &self.host,
            &self.kubelet,
            &self.pods,
            now,
            WINDOW,
            ImageFs::default(),
            summary,
        );
        match measured {
            Observed::Ok(s) => Ok(Some(s.pods.iter().flat_map(|p| &p.dirs).map(|d| d.files).sum())),
            Observed::NotApplicable { reason } if reason.starts_with("growth needs") => Ok(None),
            other => Err(format!("local storage not measured: {other:?}")),
        }
    }
}

/// A `/stats/summary` answer for `pods` and `others` more pods at unix second `at`: what a
/// kubelet writes per pod (its containers' CPU, memory, rootfs and logs; network; volumes;
/// ephemeral storage), the executors' local dir at `used` bytes in `files` files.
fn summary_json(pods: &[PodInfo], others: usize, at: f64, used: u64, files: usize) -> Vec<u8> {
    let time = jiff::Timestamp::from_second(at as i64)
        .map(|t| t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string())
        .unwrap_or_default();
    let fs = |bytes: u64| {
        serde_json::json!({"time": time, "availableBytes": 400_000_000_000u64,
        "capacityBytes": 1_000_000_000_000u64, "usedBytes": bytes, "inodesFree": 60_000_000u64,
        "inodes": 61_000_000u64, "inodesUsed": 20_000})
    };
    let container = |name: &str| {
        serde_json::json!({
            "name": name, "startTime": time,
            "cpu": {"time": time, "usageNanoCores": 1_200_000_000u64, "usageCoreNanoSeconds": 9_000_000_000_000u64},
            "memory": {"time": time, "availableBytes": 1_000_000_000u64, "usageBytes": 3_000_000_000u64,
                "workingSetBytes": 2_900_000_000u64, "rssBytes": 2_800_000_000u64, "pageFaults": 100_000, "majorPageFaults": 10},
            "rootfs": fs(40_960), "logs": fs(1_048_576),
            "swap": {"time": time, "swapAvailableBytes": 0, "swapUsageBytes": 0}
        })
    };
    let pod = |name: &str, namespace: &str, uid: &str, local: Option<u64>| {
        let mut volumes = vec![serde_json::json!({"name": "kube-api-access-6xq2v", "time": time,
            "usedBytes": 12_288, "inodesUsed": 9, "capacityBytes": 1_000_000_000u64, "availableBytes": 999_987_712u64})];
        if let Some(bytes) = local {
            let mut v = fs(bytes);
            v["name"] = "spark-local-dir-1".into();
            v["inodesUsed"] = files.into();
            volumes.push(v);
            let mut conf = fs(4096);
            conf["name"] = "spark-conf-volume-exec".into();
            volumes.push(conf);
        }
        serde_json::json!({
            "podRef": {"name": name, "namespace": namespace, "uid": uid},
            "startTime": time,
            "containers": [container("main"), container("sidecar")],
            "cpu": {"time": time, "usageNanoCores": 1_300_000_000u64, "usageCoreNanoSeconds": 9_100_000_000_000u64},
            "memory": {"time": time, "usageBytes": 3_100_000_000u64, "workingSetBytes": 3_000_000_000u64},
            "network": {"time": time, "name": "eth0", "rxBytes": 9_000_000_000u64, "rxErrors": 0,
                "txBytes": 8_000_000_000u64, "txErrors": 0,
                "interfaces": [{"name": "eth0", "rxBytes": 9_000_000_000u64, "rxErrors": 0, "txBytes": 8_000_000_000u64, "txErrors": 0}]},
            "volume": volumes,
            "ephemeral-storage": fs(local.unwrap_or(0) + 1_089_536),
            "process_stats": {"process_count": 40}
        })
    };
    let mut items: Vec<serde_json::Value> = pods
        .iter()
        .map(|p| pod(&p.name, &p.namespace, &p.uid, Some(used)))
        .collect();
    items.extend((0..others).map(|i| {
        pod(
            &format!("web-{i}"),
            "apps",
            &format!("{i:08}-0000-4000-8000-000000000000"),
            None,
        )
    }));
    serde_json::to_vec(&serde_json::json!({
        "node": {"nodeName": "bench-node", "startTime": time, "fs": fs(600_000_000_000u64)},
        "pods": items
    }))
    .unwrap_or_default()
}

/// One row: a state's wall times and the operations of one of its walks.
struct Row {
    state: &'static str,
    millis: Vec<f64>,
    lists: usize,
    stats: usize,
    files: u64,
}

/// Times `walk` `runs` times after `prepare`, then records the operations of one more.
fn row(
    state: &'static str,
    runs: usize,
    mut prepare: impl FnMut() -> Result<(), String>,
    mut walk: impl FnMut() -> Result<Option<u64>, String>,
    written: impl Fn() -> u64,
) -> Result<Row, String> {
    let mut millis = vec![];
    let mut files = 0;
    for _ in 0..runs {
        prepare()?;
        let t = Instant::now();
        files = walk()?.unwrap_or_else(&written);
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
        files,
    })
}

fn rss_kib() -> u64 {
    status_kib(std::process::id(), "VmRSS:").unwrap_or(0)
}

/// The child: one walk of the tree at `root` by a new store at unix time `at`; prints the
/// growth of the resident set in KiB.
fn store_rss(root: &Path, pods: usize, at: f64) -> Result<(), String> {
    let bench = Bench::layout(root, pods);
    let before = rss_kib();
    let mut store = LocalStore::default();
    bench.measure(&mut store, at, None)?;
    println!("{}", rss_kib().saturating_sub(before));
    drop(store);
    Ok(())
}

/// [`store_rss`] in a child process.
fn child_rss(root: &Path, pods: usize, at: f64) -> Result<f64, String> {
    let me = std::env::current_exe().map_err(|e| format!("this program: {e}"))?;
    let out = Command::new(me)
        .arg("--store-rss")
        .arg(root)
        .args([pods.to_string(), format!("{at:.3}")])
        .output()
        .map_err(|e| format!("--store-rss: {e}"))?;
    let text = String::from_utf8_lossy(&out.stdout);
    text.trim()
        .parse::<f64>()
        .map(|kib| kib / 1024.0)
        .map_err(|_| format!("--store-rss printed {text:?}: {}", String::from_utf8_lossy(&out.stderr)))
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
    // The store's clock decides which files are recent (modified within HOT_SECONDS of it):
    // set to when the writing began, every file is; set past the window after it ended, none.
    let (began, ended) = (bench.began, bench.ended);
    let later = ended + WINDOW + 60.0;
    let recent_mib = child_rss(tmp.path(), pods, began)?;
    let old_mib = child_rss(tmp.path(), pods, later)?;
    let total = (pods * files) as u64;
    let mut rows = vec![];

    // A new store on every run: what the agent does once, when it starts (with every file
    // recent, the most it keeps).
    rows.push(row(
        "first walk (agent start)",
        runs,
        || Ok(()),
        || bench.measure(&mut LocalStore::default(), began, None),
        || total,
    )?);

    // The same store walking a tree that did not change, its clock at `at`.
    let unchanged = |state: &'static str, at: f64| {
        let mut store = LocalStore::default();
        bench.measure(&mut store, at, None)?;
        row(state, runs, || Ok(()), || bench.measure(&mut store, at, None), || total)
    };
    rows.push(unchanged(
        "unchanged, every file recent (modified within HOT_SECONDS)",
        began,
    )?);
    rows.push(unchanged("unchanged, old files", later)?);

    // A shuffle being written: between two walks a minute apart every pod writes 1% more
    // files (recent: modified a second before the walk); the earlier ones are old.
    let step = (files / 100).max(1);
    let written = std::cell::Cell::new(files);
    let clock = std::cell::Cell::new(later);
    let mut store = LocalStore::default();
    bench.measure(&mut store, later, None)?;
    rows.push(row(
        "1% new files per pod since the last walk",
        runs,
        || {
            clock.set(clock.get() + 60.0);
            for p in 0..pods {
                bench.shuffle(p, written.get(), written.get() + step, Some(clock.get() - 1.0))?;
            }
            written.set(written.get() + step);
            Ok(())
        },
        || bench.measure(&mut store, clock.get(), None),
        || (pods * written.get()) as u64,
    )?);

    // The kubelet's figures: its answer parsed, the executors' emptyDirs not walked.
    const OTHERS: usize = 60;
    let kubelet_clock = std::cell::Cell::new(later + 600.0);
    let body = std::cell::RefCell::new(Vec::new());
    let mut store = LocalStore::default();
    rows.push(row(
        "the kubelet's figures (its /stats/summary parsed)",
        runs,
        || {
            kubelet_clock.set(kubelet_clock.get() + 60.0);
            *body.borrow_mut() = summary_json(&bench.pods, OTHERS, kubelet_clock.get(), 1 << 30, files);
            Ok(())
        },
        || {
            let now = kubelet_clock.get();
            let summary = kubelet_stats::parse(&body.borrow(), now as i64)?;
            bench.measure(&mut store, now, Some(&summary))
        },
        || total,
    )?);
    let summary_bytes = body.borrow().len();

    println!();
    println!(
        "| state ({pods} pods x {files} files) | wall ms, median (min-max) of {runs} | per 1,000 files | listings | stats |"
    );
    println!("|---|---|---|---|---|");
    for r in &rows {
        let (min, median, max) = stats(r.millis.clone());
        println!(
            "| {} | {median:.1} ({min:.1}-{max:.1}) | {:.3} ms | {} | {} |",
            r.state,
            median / (r.files as f64 / 1000.0),
            r.lists,
            r.stats,
        );
    }
    // A one-shot scan of the same node, against the same node with its local dirs empty.
    let empty = tempfile::Builder::new()
        .prefix("storage-bench-empty-")
        .tempdir_in(dir)
        .map_err(|e| format!("{}: {e}", dir.display()))?;
    Bench::write(empty.path(), pods, 0)?;
    let scan = |root: &Path| -> Result<(Spread, Spread), String> {
        let pods_file = root.join("pods.json");
        std::fs::write(&pods_file, bench.pods_json()).map_err(|e| format!("{}: {e}", pods_file.display()))?;
        let (root, pods_file) = (root.display().to_string(), pods_file.display().to_string());
        measure::measure_scans(&measure::scan_args(&root, &pods_file), runs)
    };
    let (full_wall, full_rss) = scan(tmp.path())?;
    let (empty_wall, empty_rss) = scan(empty.path())?;

    println!();
    println!(
        "one-shot `nodemedic scan` ({}), median (min-max) of {runs}: {:.1} ms ({:.1}-{:.1}), peak RSS {:.1} MiB, \
         with the {} shuffle files; {:.1} ms ({:.1}-{:.1}), {:.1} MiB with the local dirs empty",
        measure::nodemedic_bin().display(),
        full_wall.1,
        full_wall.0,
        full_wall.2,
        full_rss.1,
        pods * files,
        empty_wall.1,
        empty_wall.0,
        empty_wall.2,
        empty_rss.1,
    );
    println!(
        "the kubelet's /stats/summary of the last row: {pods} executors and {OTHERS} other pods, {:.0} KiB",
        summary_bytes as f64 / 1024.0
    );
    println!(
        "memory the store keeps after one walk (resident set growth of a child process): \
         {recent_mib:.1} MiB with the files recent, {old_mib:.1} MiB with them past the window"
    );
    Ok(())
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("--measure-one") {
        return measure::measure_one(&measure::nodemedic_bin(), &args[1..]);
    }
    let result = if args.first().map(String::as_str) == Some("--store-rss") {
        let n = |i: usize| args.get(i).and_then(|a| a.parse::<f64>().ok()).unwrap_or(0.0);
        match args.get(1) {
            Some(root) => store_rss(Path::new(root), n(2) as usize, n(3)),
            None => Err("--store-rss ROOT PODS AT".into()),
        }
    } else {
        let arg = |i: usize, default: usize| args.get(i).and_then(|a| a.parse().ok()).unwrap_or(default);
        let dir = args.get(3).map_or(PathBuf::from("/var/tmp"), PathBuf::from);
        run(arg(0, 50), arg(1, 10_000), arg(2, 11).max(1), &dir)
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("storage-bench: {e}");
            ExitCode::FAILURE
        }
    }
}
