use super::*;
use crate::rules::testkit::{SnapshotBuilder, pod};
use crate::settings::Settings;
use crate::snapshot::Observed;
use crate::topology::{CpuInfo, CpuTopology};

fn uses(cells: &[CpuCell]) -> String {
    cells.iter().map(|c| c.used.mark()).collect()
}

/// Two sockets, one NUMA node each, 4 CPUs each: 0-3 on socket 0, 4-7 on socket 1.
fn two_sockets() -> CpuTopology {
    CpuTopology::new(
        (0..8)
            .map(|cpu| CpuInfo {
                cpu,
                core: cpu % 4,
                socket: cpu / 4,
                numa: cpu / 4,
            })
            .collect(),
    )
}

/// A static node: CPU 0 reserved, 1-2 pinned to a live pod's container, 5 to a gone pod's, the
/// rest shared; the gone pod is in no pod list, the live one is.
fn node() -> NodeSnapshot {
    let live = pod("uid-live", "exec-1", "Running", &[("executor", "cid-live")]);
    let mut snap = SnapshotBuilder::static_node(
        "0,3-4,6-7",
        &[("uid-live", "executor", "1-2"), ("uid-gone", "app", "5")],
    )
    .with_pod_list(&[live])
    .with_cpu_manager(|c| c.reserved_system_cpus = Some(CpuSet::parse("0").unwrap()))
    .build();
    snap.host.cpus = Observed::Ok(two_sockets());
    snap
}

#[test]
fn every_cpu_is_reserved_shared_live_or_stale_with_its_holder() {
    let snap = node();
    let settings = Settings::default();
    let facts = crate::facts::derive(&snap, &settings);
    let map = cpu_map(&snap, &facts).expect("the CPUs were read");
    assert_eq!(uses(&map), "RLL..S..");
    assert_eq!(map[1].holder.as_deref(), Some("default/exec-1 container executor"));
    assert_eq!(map[5].holder.as_deref(), Some("pod uid-gone container app"));
    assert_eq!(map[5].used, CpuUse::Stale);
    assert_eq!((map[5].socket, map[5].numa_node), (Some(1), Some(1)));
    assert!(map[3].holder.is_none());
    // The JSON of one cell: the contract of the report's `cpu_map`.
    assert_eq!(
        serde_json::to_value(&map[5]).unwrap(),
        serde_json::json!({"cpu": 5, "socket": 1, "numa_node": 1, "state": "stale", "holder": "pod uid-gone container app"})
    );
    assert_eq!(
        serde_json::to_value(&map[3]).unwrap(),
        serde_json::json!({"cpu": 3, "socket": 0, "numa_node": 0, "state": "shared"})
    );
}

#[test]
fn an_unreadable_checkpoint_is_unknown_never_shared() {
    let mut snap = node();
    snap.host.checkpoint = Observed::Error {
        reason: "cpu_manager_state: permission denied".into(),
    };
    let settings = Settings::default();
    let facts = crate::facts::derive(&snap, &settings);
    let map = cpu_map(&snap, &facts).unwrap();
    assert_eq!(uses(&map), "R???????");
    assert!(map.iter().all(|c| c.holder.is_none()));
}

#[test]
fn under_the_none_policy_every_cpu_is_shared_and_offline_cpus_are_shown() {
    let mut snap = node();
    snap.host.checkpoint = Observed::Missing {
        path: "/var/lib/kubelet/cpu_manager_state".into(),
    };
    if let Observed::Ok(k) = &mut snap.host.kubelet {
        k.cpu_manager.policy = "none".into();
    }
    let mut topo = two_sockets();
    topo.offline = CpuSet::parse("8-9").unwrap();
    snap.host.cpus = Observed::Ok(topo);
    let settings = Settings::default();
    let facts = crate::facts::derive(&snap, &settings);
    let map = cpu_map(&snap, &facts).unwrap();
    assert_eq!(uses(&map), "........xx");
    assert_eq!((map[8].socket, map[8].numa_node), (None, None));
}

#[test]
fn an_unknown_policy_is_unknown_never_shared() {
    // Neither the kubelet's configuration nor the checkpoint read: the policy is not known.
    let mut snap = node();
    snap.host.checkpoint = Observed::Missing {
        path: "/var/lib/kubelet/cpu_manager_state".into(),
    };
    snap.host.kubelet = Observed::Error {
        reason: "config.yaml: permission denied".into(),
    };
    let settings = Settings::default();
    let facts = crate::facts::derive(&snap, &settings);
    assert_eq!(uses(&cpu_map(&snap, &facts).unwrap()), "????????");
    // The configuration alone says none: shared.
    let mut snap = node();
    snap.host.checkpoint = Observed::Missing {
        path: "/var/lib/kubelet/cpu_manager_state".into(),
    };
    if let Observed::Ok(k) = &mut snap.host.kubelet {
        k.cpu_manager.policy = "none".into();
    }
    let facts = crate::facts::derive(&snap, &settings);
    assert_eq!(uses(&cpu_map(&snap, &facts).unwrap()), "........");
}

#[test]
fn no_map_without_the_cpus() {
    let mut snap = node();
    snap.host.cpus = Observed::Error {
        reason: "online: EIO".into(),
    };
    let settings = Settings::default();
    let facts = crate::facts::derive(&snap, &settings);
    assert_eq!(cpu_map(&snap, &facts), None);
}

#[test]
fn the_drawing_is_a_grid_per_socket_and_numa_node_with_the_holders() {
    let snap = node();
    let settings = Settings::default();
    let facts = crate::facts::derive(&snap, &settings);
    let mut map = cpu_map(&snap, &facts).unwrap();
    map.push(CpuCell {
        cpu: 8,
        socket: None,
        numa_node: None,
        used: CpuUse::Offline,
        holder: None,
    });
    assert_eq!(
        draw(&map),
        "cpu map (9 CPUs; R reserved, . shared pool, L pinned by a live container, S held by a stale entry, x offline, ? unknown):\n\
         \x20 socket 0, NUMA node 0   cpu  0  1  2  3\n\
         \x20                              R  L  L  .\n\
         \x20 socket 1, NUMA node 1   cpu  4  5  6  7\n\
         \x20                              .  S  .  .\n\
         \x20 offline: CPUs 8\n\
         \x20 L 1-2          default/exec-1 container executor\n\
         \x20 S 5            pod uid-gone container app (stale entry)\n"
    );
}

#[test]
fn a_wide_numa_node_wraps_at_16_cpus() {
    let topo = CpuTopology::uniform(1, 20, 1);
    let cells: Vec<CpuCell> = topo
        .cpus
        .iter()
        .map(|c| CpuCell {
            cpu: c.cpu,
            socket: Some(c.socket),
            numa_node: Some(c.numa),
            used: CpuUse::Shared,
            holder: None,
        })
        .collect();
    let text = draw(&cells);
    let rows: Vec<&str> = text.lines().skip(1).filter(|l| l.contains("cpu ")).collect();
    assert_eq!(rows.len(), 2, "{text}");
    assert!(
        rows[0].starts_with("  socket 0, NUMA node 0") && rows[0].ends_with("15"),
        "{text}"
    );
    assert!(rows[1].trim_start().starts_with("cpu 16 17 18 19"), "{text}");
}
