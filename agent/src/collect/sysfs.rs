//! sysfs: the online CPUs and their cores and sockets.
//!
//! `/sys/devices/system/cpu/online` lists the online CPUs; for each,
//! `cpuN/topology/core_id` and `physical_package_id` place it. A missing topology file
//! (some virtual machines) counts the CPU as its own core on socket 0, and says so. Its NUMA
//! node comes from `/sys/devices/system/node`: one listing for the `nodeM` directories and
//! one read of each one's `cpulist`, whatever the number of CPUs. Where that directory is not
//! there, each CPU's directory is listed for its `cpuN/nodeM` link instead (only the name is
//! read). A CPU in no node's list, or without such a link (a kernel without NUMA has neither),
//! is on node 0, as the kubelet counts them.

use nodemedic_rules::CpuSet;
use nodemedic_rules::snapshot::Observed;
use nodemedic_rules::topology::{CpuInfo, CpuTopology};

use super::read::{list_dir, read_text};
use crate::host::HostPaths;

const SMALL_FILE: u64 = 64 * 1024;

/// Why a sysfs value is not what the file should hold.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SysfsError {
    /// Not a non-negative integer (the text, trimmed).
    #[error("expected a number, found {text:?}")]
    NotANumber { text: String },
}

/// A single integer sysfs value (`3\n`).
pub fn parse_sysfs_u32(text: &str) -> Result<u32, SysfsError> {
    let t = text.trim();
    t.parse().map_err(|_| SysfsError::NotANumber { text: t.to_string() })
}

/// Reads the online CPUs and their topology. `notes` collects files that were absent.
pub fn read_cpus(host: &HostPaths, notes: &mut Vec<String>) -> Observed<CpuTopology> {
    let cpu_dir = host.host("/sys/devices/system/cpu");
    let online_path = cpu_dir.join("online");
    let shown = host.display(&online_path);
    let online = match read_text(&online_path, &shown, SMALL_FILE) {
        Ok(None) => return Observed::Missing { path: shown },
        Err(e) => return Observed::Error { reason: e.to_string() },
        Ok(Some(text)) => match CpuSet::parse(&text) {
            Ok(set) => set,
            Err(e) => {
                return Observed::Error {
                    reason: format!("{shown}: {e}"),
                };
            }
        },
    };
    let mut cpus = Vec::with_capacity(online.len());
    let mut guessed = 0;
    let nodes = numa_nodes(host);
    for cpu in online.iter() {
        let topo = cpu_dir.join(format!("cpu{cpu}/topology"));
        let read = |name: &str| -> Option<u32> {
            let p = topo.join(name);
            let text = read_text(&p, &host.shown(&p), SMALL_FILE).ok()??;
            parse_sysfs_u32(&text).ok()
        };
        let numa = match &nodes {
            Some(nodes) => nodes.iter().find(|(_, cpus)| cpus.contains(cpu)).map(|(node, _)| *node),
            None => numa_node_of(&cpu_dir.join(format!("cpu{cpu}"))),
        }
        .unwrap_or(0);
        match (read("core_id"), read("physical_package_id")) {
            (Some(core), Some(socket)) => cpus.push(CpuInfo {
                cpu,
                core,
                socket,
                numa,
            }),
            _ => {
                guessed += 1;
                cpus.push(CpuInfo {
                    cpu,
                    core: cpu,
                    socket: 0,
                    numa,
                });
            }
        }
    }
    if guessed > 0 {
        notes.push(format!(
            "{guessed} online CPU(s) have no readable topology under {}: each counted as its own core on socket 0",
            host.display(&cpu_dir)
        ));
    }
    let mut topology = CpuTopology::new(cpus);
    // Present but offline (an empty line when none; the file is absent on kernels without CPU
    // hotplug).
    let offline_path = cpu_dir.join("offline");
    match read_text(&offline_path, &host.shown(&offline_path), SMALL_FILE) {
        Ok(None) => {}
        Ok(Some(text)) => match CpuSet::parse(&text) {
            Ok(set) => topology.offline = set,
            Err(e) => notes.push(format!("{}: {e}: offline CPUs not shown", host.display(&offline_path))),
        },
        Err(e) => notes.push(format!("{e}: offline CPUs not shown")),
    }
    Observed::Ok(topology)
}

/// Each NUMA node and its CPUs (`/sys/devices/system/node/nodeM/cpulist`), in node order:
/// one listing and a read per node. `None` when the directory cannot be listed, holds no
/// `nodeM`, or a node's `cpulist` is missing or not a CPU list: then [`numa_node_of`] lists
/// each CPU's directory instead. That happens in a container that mounts
/// `/sys/devices/system/cpu` without `/sys/devices/system/node` (the DaemonSet mounts both;
/// manifests older than this mounted only the first), on a kernel built without NUMA (no
/// node directory: every CPU is on node 0 either way), and in host trees written without the
/// lists.
fn numa_nodes(host: &HostPaths) -> Option<Vec<(u32, CpuSet)>> {
    let dir = host.host("/sys/devices/system/node");
    let mut nodes: Vec<u32> = list_dir(&dir)
        .ok()?
        .filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().to_str()?.strip_prefix("node")?.parse::<u32>().ok())
        .collect();
    if nodes.is_empty() {
        return None;
    }
    nodes.sort_unstable();
    nodes
        .into_iter()
        .map(|node| {
            let path = dir.join(format!("node{node}/cpulist"));
            let text = read_text(&path, &host.shown(&path), SMALL_FILE).ok()??;
            Some((node, CpuSet::parse(&text).ok()?))
        })
        .collect()
}

/// The NUMA node of the CPU whose sysfs directory is `dir`: the number in the name of its
/// `nodeM` entry (the smallest, should there be several).
fn numa_node_of(dir: &std::path::Path) -> Option<u32> {
    list_dir(dir)
        .ok()?
        .filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().to_str()?.strip_prefix("node")?.parse::<u32>().ok())
        .min()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sysfs_numbers() {
        assert_eq!(parse_sysfs_u32("3\n"), Ok(3));
        assert!(parse_sysfs_u32("").is_err());
        assert!(parse_sysfs_u32("-1").is_err());
        let e = parse_sysfs_u32(" x\n").unwrap_err();
        assert_eq!(e, SysfsError::NotANumber { text: "x".into() });
        assert_eq!(e.to_string(), "expected a number, found \"x\"");
    }

    #[test]
    fn reads_a_tree_and_notes_gaps() {
        let dir = tempfile::tempdir().unwrap();
        let cpu = dir.path().join("sys/devices/system/cpu");
        std::fs::create_dir_all(cpu.join("cpu0/topology")).unwrap();
        std::fs::create_dir_all(cpu.join("cpu1/topology")).unwrap();
        std::fs::write(cpu.join("online"), "0-2\n").unwrap();
        // cpu1 sits on NUMA node 1 (a link whose target is not there, as in the agent's mount).
        std::os::unix::fs::symlink("../../node/node1", cpu.join("cpu1/node1")).unwrap();
        for (c, core) in [(0, 0), (1, 0)] {
            std::fs::write(cpu.join(format!("cpu{c}/topology/core_id")), format!("{core}\n")).unwrap();
            std::fs::write(cpu.join(format!("cpu{c}/topology/physical_package_id")), "0\n").unwrap();
        }
        let host = HostPaths::new(dir.path(), None);
        let mut notes = vec![];
        let Observed::Ok(topo) = read_cpus(&host, &mut notes) else {
            panic!()
        };
        assert_eq!(topo.all().to_string(), "0-2");
        assert_eq!(
            topo.cpus[1],
            CpuInfo {
                cpu: 1,
                core: 0,
                socket: 0,
                numa: 1
            }
        );
        assert_eq!(
            topo.cpus[2],
            CpuInfo {
                cpu: 2,
                core: 2,
                socket: 0,
                numa: 0
            }
        );
        assert!(notes[0].starts_with("1 online CPU(s) have no readable topology under /sys/devices/system/cpu"));
        std::fs::write(cpu.join("online"), "0-\n").unwrap();
        assert!(
            matches!(read_cpus(&host, &mut notes), Observed::Error { reason } if reason.starts_with("/sys/devices/system/cpu/online: invalid cpuset"))
        );
    }

    #[test]
    fn numa_nodes_from_one_list_per_node_else_per_cpu() {
        use super::super::read::trace::{self, Op};
        let dir = tempfile::tempdir().unwrap();
        let sys = dir.path().join("sys/devices/system");
        let (cpu, node) = (sys.join("cpu"), sys.join("node"));
        std::fs::create_dir_all(&cpu).unwrap();
        std::fs::write(cpu.join("online"), "0-5\n").unwrap();
        for c in 0..6 {
            std::fs::create_dir_all(cpu.join(format!("cpu{c}/topology"))).unwrap();
            std::fs::write(cpu.join(format!("cpu{c}/topology/core_id")), format!("{c}\n")).unwrap();
            std::fs::write(cpu.join(format!("cpu{c}/topology/physical_package_id")), "0\n").unwrap();
        }
        // Two nodes, as the kernel shows them (and its other entries, which are not nodes);
        // CPU 4 is in neither list: node 0. No CPU has a `nodeM` link yet, so only the node
        // directory can place CPUs 2, 3 and 5 on node 1.
        for (n, list) in [(0, "0-1\n"), (1, "2-3,5\n")] {
            std::fs::create_dir_all(node.join(format!("node{n}"))).unwrap();
            std::fs::write(node.join(format!("node{n}/cpulist")), list).unwrap();
        }
        std::fs::create_dir_all(node.join("power")).unwrap();
        std::fs::write(node.join("online"), "0-1\n").unwrap();
        std::fs::write(node.join("has_cpu"), "0-1\n").unwrap();
        let host = HostPaths::new(dir.path(), None);
        let read = || {
            let _one_recording = trace::TEST_LOCK.lock().unwrap_or_else(|e| e.into_inner());
            trace::start();
            let mut notes = vec![];
            let got = read_cpus(&host, &mut notes);
            let ops = trace::stop();
            let Observed::Ok(topo) = got else { panic!("{got:?}") };
            assert!(notes.is_empty(), "{notes:?}");
            let numa: Vec<u32> = topo.cpus.iter().map(|c| c.numa).collect();
            // Other tests of this binary may read files meanwhile (the recorder is process-wide).
            let lists: Vec<_> = ops
                .iter()
                .filter(|(op, p)| *op == Op::List && p.starts_with(dir.path()))
                .map(|(_, p)| p.strip_prefix(&sys).unwrap().to_string_lossy().into_owned())
                .collect();
            (numa, lists)
        };
        let expected = [0, 0, 1, 1, 0, 1];
        assert_eq!(read(), (expected.to_vec(), vec!["node".to_string()]));

        // The kernel's links, then the node directory gone (a container that mounts only
        // /sys/devices/system/cpu): the same answers, from a listing per CPU.
        for c in [0, 1, 2, 3, 5] {
            let n = expected[c];
            std::os::unix::fs::symlink(format!("../../node/node{n}"), cpu.join(format!("cpu{c}/node{n}"))).unwrap();
        }
        let per_cpu: Vec<String> = (0..6).map(|c| format!("cpu/cpu{c}")).collect();
        let moved = dir.path().join("node-elsewhere");
        std::fs::rename(&node, &moved).unwrap();
        let mut want = vec!["node".to_string()];
        want.extend(per_cpu.iter().cloned());
        assert_eq!(read(), (expected.to_vec(), want.clone()));

        // A node without a readable list (a tree that has only each node's meminfo), or one
        // that is not a CPU list: per CPU too, not every CPU on node 0.
        std::fs::rename(&moved, &node).unwrap();
        std::fs::remove_file(node.join("node1/cpulist")).unwrap();
        assert_eq!(read(), (expected.to_vec(), want.clone()));
        std::fs::write(node.join("node1/cpulist"), "2-x\n").unwrap();
        assert_eq!(read(), (expected.to_vec(), want));
        // An empty node directory: per CPU.
        std::fs::remove_dir_all(&node).unwrap();
        std::fs::create_dir(&node).unwrap();
        let mut want = vec!["node".to_string()];
        want.extend(per_cpu);
        assert_eq!(read(), (expected.to_vec(), want));
    }
}

/// Each NUMA node's memory in bytes: `MemTotal` of `/sys/devices/system/node/nodeN/meminfo`
/// (`Node 0 MemTotal:  32768000 kB`). Empty when the directory is not visible (the base
/// DaemonSet does not mount it; components/node-resource-topology does).
pub fn read_numa_memory(host: &HostPaths) -> std::collections::BTreeMap<u32, u64> {
    let mut out = std::collections::BTreeMap::new();
    let dir = host.host("/sys/devices/system/node");
    let Ok(entries) = list_dir(&dir) else {
        return out;
    };
    for entry in entries.filter_map(|e| e.ok()) {
        let Some(node) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.strip_prefix("node"))
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let path = entry.path().join("meminfo");
        if let Ok(Some(text)) = read_text(&path, &host.shown(&path), SMALL_FILE) {
            if let Some(bytes) = parse_node_mem_total(&text) {
                out.insert(node, bytes);
            }
        }
    }
    out
}

/// `MemTotal` of a NUMA node's `meminfo`, in bytes.
pub fn parse_node_mem_total(text: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.contains("MemTotal:"))?;
    let mut words = line.split_once("MemTotal:")?.1.split_whitespace();
    let value: u64 = words.next()?.parse().ok()?;
    match words.next() {
        Some("kB") => value.checked_mul(1024),
        None => Some(value),
        Some(_) => None,
    }
}

#[cfg(test)]
mod numa_memory_tests {
    use super::*;

    #[test]
    fn offline_cpus_are_read_and_a_bad_list_is_a_note() {
        let dir = tempfile::tempdir().unwrap();
        let cpu = dir.path().join("sys/devices/system/cpu");
        std::fs::create_dir_all(&cpu).unwrap();
        std::fs::write(cpu.join("online"), "0-1\n").unwrap();
        let host = HostPaths::new(dir.path(), None);
        let read = |notes: &mut Vec<String>| match read_cpus(&host, notes) {
            Observed::Ok(topo) => topo,
            other => panic!("{other:?}"),
        };
        // No `offline` file (a kernel without CPU hotplug), and an empty one: none offline.
        let mut notes = vec![];
        assert!(read(&mut notes).offline.is_empty());
        std::fs::write(cpu.join("offline"), "\n").unwrap();
        assert!(read(&mut notes).offline.is_empty());
        std::fs::write(cpu.join("offline"), "2-3,6\n").unwrap();
        assert_eq!(read(&mut notes).offline.to_string(), "2-3,6");
        let only_gaps = notes.iter().all(|n| n.contains("no readable topology"));
        assert!(only_gaps, "{notes:?}");
        std::fs::write(cpu.join("offline"), "2-x\n").unwrap();
        let mut notes = vec![];
        let topo = read(&mut notes);
        assert!(topo.offline.is_empty());
        assert_eq!(topo.all().to_string(), "0-1", "the online CPUs stand");
        assert!(
            notes
                .iter()
                .any(|n| n.starts_with("/sys/devices/system/cpu/offline: ") && n.ends_with(": offline CPUs not shown")),
            "{notes:?}"
        );
    }

    #[test]
    fn node_meminfo() {
        let text = "Node 0 MemTotal:       32768000 kB\nNode 0 MemFree:        1024 kB\n";
        assert_eq!(parse_node_mem_total(text), Some(32_768_000 * 1024));
        assert_eq!(parse_node_mem_total("Node 0 MemFree: 1 kB\n"), None);
        assert_eq!(parse_node_mem_total("Node 0 MemTotal: x kB\n"), None);
        let dir = tempfile::tempdir().unwrap();
        let node = dir.path().join("sys/devices/system/node");
        for (n, kb) in [(0, 1000), (1, 2000)] {
            std::fs::create_dir_all(node.join(format!("node{n}"))).unwrap();
            std::fs::write(
                node.join(format!("node{n}/meminfo")),
                format!("Node {n} MemTotal: {kb} kB\n"),
            )
            .unwrap();
        }
        std::fs::create_dir_all(node.join("power")).unwrap();
        let host = HostPaths::new(dir.path(), None);
        let got = read_numa_memory(&host);
        assert_eq!(got.into_iter().collect::<Vec<_>>(), [(0, 1_024_000), (1, 2_048_000)]);
    }
}
