//! sysfs: the online CPUs and their cores and sockets.
//!
//! `/sys/devices/system/cpu/online` lists the online CPUs; for each,
//! `cpuN/topology/core_id` and `physical_package_id` place it. A missing topology file
//! (some virtual machines) counts the CPU as its own core on socket 0, and says so.

use nodemedic_rules::CpuSet;
use nodemedic_rules::snapshot::Observed;
use nodemedic_rules::topology::{CpuInfo, CpuTopology};

use super::read::read_text;
use crate::host::HostPaths;

const SMALL_FILE: u64 = 64 * 1024;

/// A single integer sysfs value (`3\n`).
pub fn parse_sysfs_u32(text: &str) -> Result<u32, String> {
    let t = text.trim();
    t.parse().map_err(|_| format!("expected a number, found {t:?}"))
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
    for cpu in online.iter() {
        let topo = cpu_dir.join(format!("cpu{cpu}/topology"));
        let read = |name: &str| -> Option<u32> {
            let p = topo.join(name);
            let text = read_text(&p, &host.shown(&p), SMALL_FILE).ok()??;
            parse_sysfs_u32(&text).ok()
        };
        match (read("core_id"), read("physical_package_id")) {
            (Some(core), Some(socket)) => cpus.push(CpuInfo { cpu, core, socket }),
            _ => {
                guessed += 1;
                cpus.push(CpuInfo {
                    cpu,
                    core: cpu,
                    socket: 0,
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
    Observed::Ok(CpuTopology::new(cpus))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sysfs_numbers() {
        assert_eq!(parse_sysfs_u32("3\n"), Ok(3));
        assert!(parse_sysfs_u32("").is_err());
        assert!(parse_sysfs_u32("-1").is_err());
        assert!(parse_sysfs_u32("x").unwrap_err().contains("\"x\""));
    }

    #[test]
    fn reads_a_tree_and_notes_gaps() {
        let dir = tempfile::tempdir().unwrap();
        let cpu = dir.path().join("sys/devices/system/cpu");
        std::fs::create_dir_all(cpu.join("cpu0/topology")).unwrap();
        std::fs::create_dir_all(cpu.join("cpu1/topology")).unwrap();
        std::fs::write(cpu.join("online"), "0-2\n").unwrap();
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
                socket: 0
            }
        );
        assert_eq!(
            topo.cpus[2],
            CpuInfo {
                cpu: 2,
                core: 2,
                socket: 0
            }
        );
        assert!(notes[0].starts_with("1 online CPU(s) have no readable topology under /sys/devices/system/cpu"));
        std::fs::write(cpu.join("online"), "0-\n").unwrap();
        assert!(
            matches!(read_cpus(&host, &mut notes), Observed::Error { reason } if reason.starts_with("/sys/devices/system/cpu/online: invalid cpuset"))
        );
    }
}
