//! `/metrics` exposes no pod names, namespaces, environment values or file contents, and its
//! label names and values are bounded: the scrape target identifies the node, nothing else
//! about the workloads leaks into Prometheus.

use std::collections::BTreeSet;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use nodemedic_rules::promtext;
use nodemedic_tests::agent::{Agent, NODE, wait_for};
use nodemedic_tests::apiserver::ApiServer;
use nodemedic_tests::hosttree::{Layout, Node, Pod, Runtime, pod_uid};
use nodemedic_tests::sparkpods::{SparkApp, SparkVersion, rejected_pod};
use serde_json::{Value, json};

/// A distinctive lowercase string (valid in DNS names) that appears nowhere else.
fn secret(tag: &str) -> String {
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_nanos();
    let mut h: u64 = 0xcbf2_9ce4_8422_2325 ^ u64::from(std::process::id());
    for b in tag.bytes().chain(nanos.to_le_bytes()) {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("q{}{h:016x}", &tag[..tag.len().min(3)])
}

const ALLOWED_LABELS: &[&str] = &[
    "rule",
    "severity",
    "collector",
    "reason",
    "probe",
    "action",
    "result",
    "version",
    "le",
    "task",
    "kind",
    "revision",
    // nodemedic_fence_actions_total: off/dry-run/on and fenced/would_fence/failed;
    // nodemedic_node_resource_topology_writes_total: created/updated/unchanged/conflict/failed;
    // nodemedic_scan_loop_turns_total: judged/api/current/failed.
    "mode",
    "outcome",
    // nodemedic_exclusive_cpus: a NUMA node's id and free/live/stale/reserved;
    // nodemedic_memory_manager_bytes: also allocatable; nodemedic_devices_checkpointed:
    // registered/allocated/stale; nodemedic_dra_prepared_claims: live/stale.
    "numa_node",
    "state",
    // nodemedic_local_storage_*: a Spark application's id (its spark-app-selector), `none`
    // or `other`; at most 51 of them.
    "app",
    // nodemedic_memory_manager_stale_bytes: a block's NUMA nodes (`0`, `0,1`).
    "numa_nodes",
    // A resource name: memory, hugepages-<size>, or a device plugin's (nvidia.com/gpu).
    "resource",
    // nodemedic_dra_prepared_claims: kubelet or a driver checkpoint format.
    "source",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_hold_no_names_values_or_contents() {
    let ns = secret("namespace");
    let app_name = secret("application");
    let driver_host = secret("driverhost");
    let env_secret = secret("envsecret");
    let container = secret("container");
    let gone_pod = secret("gonepod");
    let props_secret = secret("properties");
    let mut secrets = vec![
        ns.clone(),
        app_name.clone(),
        driver_host.clone(),
        env_secret.clone(),
        container.clone(),
        gone_pod.clone(),
        props_secret.clone(),
    ];

    let api = ApiServer::start().await.unwrap();
    let store = api.store();
    store.create(json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE}}));
    let app = SparkApp::new(SparkVersion::V3_5, &ns, &app_name);
    // A driver here with a Spark conf volume, and executors: one orphaned (driver gone), one
    // in client mode naming a driver host that does not exist.
    let driver_uid = pod_uid(&secret("driveruid"));
    let mut driver = app.driver(&driver_uid, NODE, "10.42.7.9");
    add_env(&mut driver, "AWS_SECRET_ACCESS_KEY", &env_secret);
    store.create(driver);
    let mut exec = app.executor(
        1,
        &secret("execuid"),
        NODE,
        Some((&secret("drivername"), &secret("ownuid"))),
        &driver_host,
    );
    add_env(&mut exec, "DB_PASSWORD", &env_secret);
    store.create(exec);
    let mut client = app.executor(2, &secret("clientuid"), NODE, None, &driver_host);
    client["metadata"]["name"] = json!(format!("{}-client-exec", app.prefix));
    store.create(client);
    // Rejected pods with a free-text reason and message (a reason a pod's writer chose must
    // not become a label value).
    let free_reason = format!("Q{}", secret("reason"));
    secrets.push(free_reason.clone());
    for i in 0..3 {
        store.create(rejected_pod(
            &ns,
            &format!("{}-rej-{i}", app.prefix),
            &secret(&format!("rejuid{i}")),
            NODE,
            "default-scheduler",
            match i {
                0 => "OutOfcpu",
                1 => "UnexpectedAdmissionError",
                _ => free_reason.as_str(),
            },
            &format!("Pod was rejected: {env_secret}"),
        ));
    }
    secrets.push(app.prefix.clone());
    secrets.push(app.app_id.clone());

    // The host: a stale checkpoint entry of a gone pod with a distinctive container name.
    let mut gone = Pod::new(&gone_pod, 2);
    gone.containers[0].name = container.clone();
    gone.namespace = ns.clone();
    // ... whose memory, device and DRA entries are left too, under a claim of a secret name:
    // their gauges carry a resource name, NUMA nodes and a source, never these.
    let claim_name = secret("claimname");
    let gone_uid = pod_uid(&gone_pod);
    let host = {
        use nodemedic_tests::checkpoints::*;
        Node::new(NODE, Layout::V1Cgroupfs, Runtime::Containerd)
            .pod(gone.exclusive("2,6").gone())
            .file(
                "/var/lib/kubelet/memory_manager_state",
                memory_manager_state(2, 8 * GIB, &[MemoryEntry::new(&gone_uid, &container, 1, GIB)]),
            )
            .file(
                "/var/lib/kubelet/device-plugins/kubelet_internal_checkpoint",
                device_checkpoint(
                    &[DeviceEntry::new(
                        &gone_uid,
                        &container,
                        "nvidia.com/gpu",
                        &[("GPU-0", 0)],
                    )],
                    &[("nvidia.com/gpu", &["GPU-0"])],
                ),
            )
            .file(
                "/var/lib/kubelet/dra_manager_state",
                dra_manager_state(&[DraClaim {
                    uid: pod_uid(&claim_name),
                    namespace: ns.clone(),
                    name: claim_name.clone(),
                    pods: vec![gone_uid.clone()],
                    devices: vec![("gpu.nvidia.com".into(), NODE.into(), "gpu-0".into())],
                }]),
            )
    };
    secrets.push(gone_uid.clone());
    secrets.push(claim_name.clone());
    let agent = Agent::start(&api, Some(&host), &[]);
    // The driver's spark.properties, in its conf volume.
    let root = agent.host_root();
    let conf = root.join(format!(
        "var/lib/kubelet/pods/{driver_uid}/volumes/kubernetes.io~configmap/spark-conf-volume-driver"
    ));
    std::fs::create_dir_all(&conf).unwrap();
    std::fs::write(
        conf.join("spark.properties"),
        format!("spark.app.name={app_name}\nspark.hadoop.fs.s3a.secret.key={props_secret}\nspark.kubernetes.namespace={ns}\nspark.kubernetes.submission.requestTimeout=10000\n"),
    )
    .unwrap();
    secrets.push(driver_uid.clone());

    wait_for("readyz", Duration::from_secs(60), &agent, || {
        agent.get("/readyz").0 == 200
    })
    .await;
    wait_for("the findings", Duration::from_secs(60), &agent, || {
        agent.metric("nodemedic_rule_firing{rule=\"stale-cpu-assignment\"}") == Some(1.0)
            && agent.metric("nodemedic_rule_firing{rule=\"stale-dra-claim\"}") == Some(1.0)
            && agent.metric("nodemedic_devices_checkpointed{resource=\"nvidia.com/gpu\",state=\"stale\"}") == Some(1.0)
            && agent.metric("nodemedic_orphaned_executors").is_some_and(|v| v >= 1.0)
            && agent.metric("nodemedic_rule_firing{rule=\"admission-rejection\"}") == Some(1.0)
    })
    .await;
    wait_for("a few more scans", Duration::from_secs(30), &agent, || {
        agent.scans() >= 8
    })
    .await;
    let (code, body) = agent.get("/metrics");
    assert_eq!(code, 200);

    // The findings carry the secrets (so they were seen)...
    let log = agent.log();
    assert!(log.contains(&app.prefix), "the executors were judged:\n{log}");
    // ...but the exposition holds none of them.
    let lower = body.to_lowercase();
    for s in &secrets {
        assert!(!lower.contains(&s.to_lowercase()), "/metrics leaks {s:?}:\n{body}");
    }
    assert!(!body.contains(NODE), "the scrape target names the node, not a label");

    // Label names from a fixed set; label values bounded.
    let rule_ids: BTreeSet<String> = rule_ids();
    let mut samples = 0;
    for line in body.lines() {
        let Some(sample) = promtext::parse_line(line) else {
            assert!(line.is_empty() || line.starts_with('#'), "unreadable line {line:?}");
            continue;
        };
        samples += 1;
        assert!(
            sample.name.starts_with("nodemedic_") || sample.name.starts_with("process_"),
            "{line}"
        );
        for (k, v) in &sample.labels {
            assert!(ALLOWED_LABELS.contains(&k.as_str()), "label {k:?} not allowed: {line}");
            let ok = match k.as_str() {
                "rule" => rule_ids.contains(v),
                "severity" => ["critical", "warning", "info"].contains(&v.as_str()),
                "le" => v == "+Inf" || v.parse::<f64>().is_ok(),
                "probe" => ["get", "list", "create_dry_run"].contains(&v.as_str()),
                "version" => v == env!("CARGO_PKG_VERSION"),
                "task" => ["pod_watch", "api_probes", "fencing", "topology", "kubelet_version"].contains(&v.as_str()),
                "collector" => [
                    "checkpoint",
                    "kubelet_config",
                    "cpus",
                    "cgroups",
                    "procfs",
                    "podresources",
                    "pods",
                    "local_dirs",
                    "local_storage",
                    "spark_conf",
                    "listeners",
                    "manager_files",
                    "kubelet_version",
                ]
                .contains(&v.as_str()),
                "mode" => ["dry-run", "on"].contains(&v.as_str()),
                "outcome" => [
                    "fenced",
                    "would_fence",
                    "failed",
                    "created",
                    "updated",
                    "unchanged",
                    "conflict",
                    "judged",
                    "api",
                    "current",
                ]
                .contains(&v.as_str()),
                "numa_node" => !v.is_empty() && v.len() <= 5 && v.bytes().all(|b| b.is_ascii_digit()),
                "state" => [
                    "free",
                    "live",
                    "stale",
                    "reserved",
                    "allocatable",
                    "registered",
                    "allocated",
                ]
                .contains(&v.as_str()),
                "numa_nodes" => !v.is_empty() && v.len() <= 64 && v.bytes().all(|b| b.is_ascii_digit() || b == b','),
                // Kubernetes resource names: a DNS-subdomain prefix and a name of at most 63.
                "resource" => {
                    !v.is_empty()
                        && v.len() <= 317
                        && v.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_./".contains(&b))
                }
                "source" => ["kubelet", "nvidia-gpu"].contains(&v.as_str()),
                "app" => {
                    ["none", "other"].contains(&v.as_str())
                        || (v.len() <= 63 && v.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b)))
                }
                "revision" => v == "unknown" || (v.len() <= 40 && v.bytes().all(|b| b.is_ascii_hexdigit())),
                "kind" => ["event", "node_condition", "pod_deletion"].contains(&v.as_str()),
                // Ids of our own (actions, results, reasons): short identifiers.
                _ => {
                    !v.is_empty()
                        && v.len() <= 40
                        && v.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
                }
            };
            assert!(ok, "unbounded value for {k}: {v:?} in {line}");
        }
    }
    assert!(samples > 20, "{body}");
}

/// The rule ids of the catalogue.
fn rule_ids() -> BTreeSet<String> {
    let run = nodemedic_tests::nodemedic(&["rules", "--format", "json"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let v: Value = serde_json::from_str(&run.stdout).unwrap();
    let list = v
        .as_array()
        .or_else(|| v["rules"].as_array())
        .unwrap_or_else(|| panic!("{v:#}"));
    list.iter()
        .map(|r| r["id"].as_str().or_else(|| r["rule"].as_str()).unwrap().to_string())
        .collect()
}

fn add_env(pod: &mut Value, name: &str, value: &str) {
    pod["spec"]["containers"][0]["env"]
        .as_array_mut()
        .unwrap()
        .push(json!({"name": name, "value": value}));
}
