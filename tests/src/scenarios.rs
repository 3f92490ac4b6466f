//! The nodes the tests, the example and the benchmarks are built from.

use crate::hosttree::{Layout, Node, Pod, Runtime};

/// The same Spark workload on any layout: a driver and an executor pinned, one executor's
/// cgroup drifted from its entry, one executor gone with its entry left behind, a Burstable
/// web pod in the shared pool, and a pending Guaranteed pod that cannot fit.
pub fn spark_node(name: &str, layout: Layout, runtime: Runtime) -> Node {
    Node::new(name, layout, runtime)
        .pod(Pod::driver("etl", 2).exclusive("1,5"))
        .pod(Pod::executor("etl", 1).exclusive("2,6").cgroup_cpus("2-3,6"))
        .pod(Pod::executor("etl", 2).exclusive("3,7").gone())
        .pod(Pod::new("web", 1).burstable())
        .pod(Pod::new("report-builder", 2).pending())
}

/// The four fixture layouts of the golden tests: (name, layout, runtime).
pub const FIXTURES: &[(&str, Layout, Runtime)] = &[
    ("v1-cgroupfs-containerd", Layout::V1Cgroupfs, Runtime::Containerd),
    ("v1-systemd-crio", Layout::V1Systemd, Runtime::Crio),
    ("v2-systemd-containerd", Layout::V2Systemd, Runtime::Containerd),
    ("v2-cgroupfs-docker", Layout::V2Cgroupfs, Runtime::Docker),
];

/// The bundled example node (`examples/worker-stale`): 16 CPUs, a nightly Spark job with a
/// stale executor entry and a drifted one, a finished batch pod whose CPUs were never freed
/// (kubernetes #107074), and two executors the kubelet could not pin.
pub fn example_node() -> Node {
    let mut node = Node::new("worker-stale", Layout::V1Cgroupfs, Runtime::Containerd).cpus(1, 8, 2);
    node.kubelet_yaml = node
        .kubelet_yaml
        .replace("reservedSystemCPUs: \"0,4\"", "reservedSystemCPUs: \"0,8\"");
    node.kubelet_config_path = "/etc/kubernetes/kubelet-config.yaml".into();
    // How systemd starts the kubelet (kubeadm's package unit and drop-in, the drop-in naming
    // the configuration above): what the configuration is found by while the kubelet is
    // stopped.
    node.file(
        "/lib/systemd/system/kubelet.service",
        b"[Unit]\nDescription=kubelet: The Kubernetes Node Agent\n\n[Service]\nExecStart=/usr/bin/kubelet\nRestart=always\n\n[Install]\nWantedBy=multi-user.target\n".to_vec(),
    )
    .file(
        "/etc/systemd/system/kubelet.service.d/10-kubeadm.conf",
        b"[Service]\n\
          Environment=\"KUBELET_KUBECONFIG_ARGS=--bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf --kubeconfig=/etc/kubernetes/kubelet.conf\"\n\
          Environment=\"KUBELET_CONFIG_ARGS=--config=/etc/kubernetes/kubelet-config.yaml\"\n\
          EnvironmentFile=-/var/lib/kubelet/kubeadm-flags.env\n\
          EnvironmentFile=-/etc/default/kubelet\n\
          ExecStart=\n\
          ExecStart=/usr/bin/kubelet $KUBELET_KUBECONFIG_ARGS $KUBELET_CONFIG_ARGS $KUBELET_KUBEADM_ARGS $KUBELET_EXTRA_ARGS\n"
            .to_vec(),
    )
    .pod(Pod::driver("nightly-etl", 2).exclusive("1,9"))
        .pod(Pod::executor("nightly-etl", 1).exclusive("2-3,10-11"))
        .pod(
            Pod::executor("nightly-etl", 2)
                .exclusive("4-5,12-13")
                .cgroup_cpus("4-5,12-15"),
        )
        .pod(Pod::executor("nightly-etl", 3).exclusive("6,14").gone())
        .pod(Pod::new("feature-backfill", 1).exclusive("7").finished("Succeeded"))
        .pod(Pod::new("metrics-agent", 1).burstable())
        .pod(Pod::executor("nightly-etl", 4).rejected(
            "UnexpectedAdmissionError",
            "Allocate failed due to not enough cpus available to satisfy request, which is unexpected",
        ))
        .pod(Pod::executor("nightly-etl", 5).pending())
}

/// A big node for benchmarks: `pods` executor pods on 256 CPUs (2 sockets x 64 cores x 2
/// threads), three containers each (executor, a sidecar, an init container's leftover
/// leaf), `procs_per_pod` processes in the executor; every fourth pod pinned. Their drivers
/// (one per ten executors) run on another node and are in the pod list, so a healthy node
/// has no Spark findings.
pub fn big_node(pods: usize, procs_per_pod: u32) -> Node {
    let mut node = Node::new("bench-node", Layout::V1Cgroupfs, Runtime::Containerd).cpus(2, 64, 2);
    let mut next_cpu = 2u32;
    for i in 0..pods {
        let mut p = Pod::executor(&format!("app{}", i / 10), i as u32);
        p.uid = crate::hosttree::pod_uid(&format!("bench-{i}"));
        p.containers[0].processes = procs_per_pod;
        for extra in ["log-shipper", "spark-init"] {
            let mut c = p.containers[0].clone();
            c.name = extra.into();
            c.processes = 1;
            c.cpu_millis = 500;
            p.containers.push(c);
        }
        if i % 4 == 0 && next_cpu + 1 < 256 {
            p = p.exclusive(&format!("{next_cpu}-{}", next_cpu + 1));
            next_cpu += 2;
        } else {
            p = p.burstable();
        }
        node = node.pod(p);
    }
    for app in 0..pods.div_ceil(10) {
        node = node.pod(Pod::driver(&format!("app{app}"), 1).on_node("worker-2"));
    }
    node.kubelet_yaml = node
        .kubelet_yaml
        .replace("reservedSystemCPUs: \"0,4\"", "reservedSystemCPUs: \"0-1\"");
    node
}

/// Fills an API server double with `node`, its pods as `kubectl get pods` would return them,
/// the namespaces they live in, and the drivers they are owned by (on another node, where the
/// generated list does not already hold them). Returns how many drivers the pods name.
pub fn seed_api(store: &crate::apiserver::Store, node: &Node) -> usize {
    use serde_json::json;
    store.create(json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": node.name}}));
    let list = node.pods_json();
    let mut drivers = std::collections::BTreeSet::new();
    for item in list["items"].as_array().cloned().unwrap_or_default() {
        if let Some(owner) = item["metadata"]["ownerReferences"][0].as_object() {
            let text = |v: &serde_json::Value| v.as_str().unwrap_or("").to_string();
            drivers.insert((
                text(&item["metadata"]["namespace"]),
                text(&owner["name"]),
                text(&owner["uid"]),
                text(&item["metadata"]["labels"]["spark-app-selector"]),
            ));
        }
        store.create(item);
    }
    let namespaces: std::collections::BTreeSet<&String> = drivers.iter().map(|d| &d.0).collect();
    for ns in namespaces {
        if store.get("namespaces", None, ns).is_none() {
            store.create(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}));
        }
    }
    for (ns, name, uid, app) in &drivers {
        if store.get("pods", Some(ns), name).is_some() {
            continue;
        }
        store.create(json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": ns, "uid": uid, "labels": {"spark-role": "driver", "spark-app-selector": app}},
            "spec": {"nodeName": "worker-2", "containers": [{"name": "spark-kubernetes-driver", "image": "apache/spark:3.5.1"}]},
            "status": {"phase": "Running", "podIP": "10.9.0.1"}}));
    }
    drivers.len()
}
