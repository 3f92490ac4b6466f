//! Property tests of every parser that reads untrusted input: the kubelet checkpoint, cpusets,
//! cgroup directory names and `cgroup.procs`, procfs files, the kubelet configuration, pod
//! lists, `spark.properties`, the Prometheus text format, the daemon configuration, and the
//! other resource managers' checkpoints (memory, devices, DRA, the NVIDIA GPU driver's).
//!
//! Each parser gets "never panics" on arbitrary and on mutated realistic input, and the
//! stronger property it has where one exists (a writer round trip, a canonical form). Case
//! counts are set per block so the whole file runs in well under a minute in a debug build;
//! `PROPTEST_CASES` in the environment does not override them, `NODEMEDIC_FUZZ_SCALE`
//! multiplies them for a long run. Any crash found is kept below
//! as a plain `#[test]` with the literal input.

use std::collections::BTreeMap;

use nodemedic::collect::cgroups::{LeafName, parse_cgroup_procs, parse_leaf_name, parse_pod_dir_name};
use nodemedic::collect::kubelet::parse_kubelet_config;
use nodemedic::collect::pods::{parse_pods_json, read_pods};
use nodemedic::collect::procfs::{parse_cmdline, parse_status_cpus_allowed};
use nodemedic::collect::sparkconf::parse_spark_properties;
use nodemedic_rules::promtext;
use nodemedic_rules::{Checkpoint, CpuSet};
use proptest::prelude::*;
use serde_json::{Value, json};

/// The case count of a block, times `NODEMEDIC_FUZZ_SCALE` (default 1) for long runs by hand:
/// `NODEMEDIC_FUZZ_SCALE=100 cargo test --release -p nodemedic-tests --test e2e fuzz::`.
fn scaled(cases: u32) -> u32 {
    let scale = std::env::var("NODEMEDIC_FUZZ_SCALE")
        .ok()
        .and_then(|v| v.parse::<u32>().ok())
        .filter(|&n| n > 0)
        .unwrap_or(1);
    cases.saturating_mul(scale)
}

/// Checkpoints as kubelets wrote them (docs/kubelet.md#the-checksum, the kubelet's own tests).
const UPSTREAM_VECTORS: &[&str] = &[
    r#"{"policyName":"none","defaultCPUSet":"4-6","entries":{},"checksum":354655845}"#,
    r#"{"policyName":"none","defaultCPUSet":"1-3","entries":{"pod":{"container1":"4-6","container2":"1-3"}},"checksum":3610638499}"#,
    r#"{"policyName":"static","defaultCPUSet":"7-9","entries":{"containerID1":"4-6","containerID2":"1-3"},"checksum":2026311253}"#,
    r#"{"policyName":"none","defaultCPUSet":"1-3","entries":{"container1":"4-6","container2":"1-3"},"checksum":1535905563}"#,
    r#"{"policyName":"static","defaultCPUSet":"1-2","entries":{"pod1":{"container1":"5-6","container2":"3-4"}},"podEntries":{"pod2":{"cpuSet":"7-9"}},"checksum":766259872}"#,
    r#"{"policyName":"static","defaultCPUSet":"1-2","entries":{"pod1":{"container1":"5-6","container2":"3-4"}},"podEntries":{"pod2":{"cpuSet":"7-9"}},"checksum":2284712151}"#,
    r#"{"policyName":"static","defaultCPUSet":"1-3","entries":{"pod":{"container1":"4-6","container2":"7-9"}},"checksum":1659543133}"#,
    r#"{"policyName":"none","defaultCpuSet":"","checksum":1353318690}"#,
    r#"{"policyName":"static","defaultCpuSet":"0-1","entries":{"uid1":{"c1":"2-3"}},"checksum":3094260139}"#,
];

/// Runs the whole reader on `bytes`; whatever it accepts, the writer must write a file that
/// verifies and reads back to the same state.
fn check_checkpoint(bytes: &[u8]) -> Result<(), TestCaseError> {
    let Ok(cp) = Checkpoint::parse(bytes) else {
        return Ok(());
    };
    let _ = cp.layout();
    let verification = cp.verify();
    let _ = verification.accepted();
    let _ = cp.effective();
    let Ok(state) = cp.state() else {
        return Ok(());
    };
    // Mixed V1 (container id) and V2 (pod/container) keys cannot come out of one file.
    let json = state.to_checkpoint_json();
    let again = Checkpoint::parse(json.as_bytes())
        .map_err(|e| TestCaseError::fail(format!("the writer's output does not parse: {e}\n{json}")))?;
    // A file no kubelet accepts (a bad checksum, or a layout no kubelet writes, like V1
    // entries beside V3 podEntries) cannot be written back as one it accepts.
    prop_assert!(
        !verification.accepted() || again.verify().accepted(),
        "the writer's output does not verify: {:?}\n{}",
        again.verify(),
        json
    );
    let back = again
        .state()
        .map_err(|e| TestCaseError::fail(format!("the writer's output has no state: {e}\n{json}")))?;
    prop_assert_eq!(back, state, "round trip of {}", json);
    Ok(())
}

/// Case-variants of the checkpoint's keys, so that the case-insensitive matching is exercised.
fn arb_key() -> impl Strategy<Value = String> {
    prop_oneof![
        proptest::sample::select(vec![
            "policyName",
            "policyname",
            "POLICYNAME",
            "defaultCpuSet",
            "defaultCPUSet",
            "DefaultCpuset",
            "entries",
            "Entries",
            "podEntries",
            "podentries",
            "checksum",
            "Checksum",
            "data",
            "dataChecksum",
            "cpuSet",
        ])
        .prop_map(str::to_string),
        "[a-zA-Z0-9_-]{0,10}",
    ]
}

/// Strings that are often cpusets, sometimes nearly.
fn arb_cpuset_text() -> impl Strategy<Value = String> {
    prop_oneof![
        proptest::collection::btree_set(0u32..130, 0..8).prop_map(|s| CpuSet::from_ids(s).to_string()),
        "[0-9,\\- \n]{0,12}",
        Just("65536".to_string()),
        Just("0-65535".to_string()),
        Just("4294967296".to_string()),
    ]
}

fn arb_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<u64>().prop_map(|n| json!(n)),
        any::<i64>().prop_map(|n| json!(n)),
        any::<f64>().prop_map(|n| json!(n)),
        (0u64..5_000_000_000).prop_map(|n| json!(n)),
        arb_cpuset_text().prop_map(Value::String),
        "\\PC{0,8}".prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            proptest::collection::vec((arb_key(), inner), 0..6).prop_map(|kv| Value::Object(kv.into_iter().collect())),
        ]
    })
}

/// A checkpoint-shaped object whose fields are sometimes of the wrong type.
fn arb_checkpoint_value() -> impl Strategy<Value = Value> {
    let uid = "[a-z0-9-]{1,12}";
    let pod_map = proptest::collection::btree_map(
        uid,
        prop_oneof![
            3 => proptest::collection::btree_map("[a-z0-9]{1,6}", arb_cpuset_text().prop_map(Value::String), 0..3)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
            1 => arb_json(),
        ],
        0..4,
    )
    .prop_map(|m| Value::Object(m.into_iter().collect()));
    let v1_map = proptest::collection::btree_map("[a-f0-9]{1,16}", arb_cpuset_text().prop_map(Value::String), 0..4)
        .prop_map(|m| Value::Object(m.into_iter().collect()));
    let pod_entries = proptest::collection::btree_map(
        uid,
        prop_oneof![arb_cpuset_text().prop_map(|c| json!({ "cpuSet": c })), arb_json(),],
        0..3,
    )
    .prop_map(|m| Value::Object(m.into_iter().collect()));
    (
        proptest::option::of(prop_oneof![Just(json!("static")), Just(json!("none")), arb_json()]),
        proptest::option::of(prop_oneof![arb_cpuset_text().prop_map(Value::String), arb_json()]),
        proptest::option::of(prop_oneof![pod_map, v1_map, Just(Value::Null), arb_json()]),
        proptest::option::of(prop_oneof![pod_entries, Just(Value::Null)]),
        proptest::option::of(prop_oneof![(0u64..5_000_000_000).prop_map(|n| json!(n)), arb_json()]),
        proptest::option::of(arb_json()),
        any::<bool>(),
    )
        .prop_map(|(policy, default, entries, pod_entries, checksum, extra, v4)| {
            let mut obj = serde_json::Map::new();
            let mut put = |k: &str, v: Option<Value>| {
                if let Some(v) = v {
                    obj.insert(k.to_string(), v);
                }
            };
            put("policyName", policy);
            put("defaultCpuSet", default);
            put("entries", entries);
            put("podEntries", pod_entries);
            put("checksum", checksum);
            put("unknownField", extra);
            let inner = Value::Object(obj);
            if v4 {
                // A V4 file: the checkpoint as a string in `data`, with its own checksum.
                let data = inner.to_string();
                json!({"data": data, "checksum": 0, "dataChecksum": nodemedic_rules::checkpoint::checksum::data_checksum(&data)})
            } else {
                inner
            }
        })
}

/// Java `Properties.store` escaping of a key or value (every space escaped, non-ASCII as
/// `\uXXXX` UTF-16 units).
fn java_escape(s: &str) -> String {
    let mut out = String::new();
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\t' => out.push_str("\\t"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\x0c' => out.push_str("\\f"),
            '=' | ':' | '#' | '!' | ' ' => {
                out.push('\\');
                out.push(c);
            }
            c if (' '..='~').contains(&c) => out.push(c),
            c => {
                let mut buf = [0u16; 2];
                for unit in c.encode_utf16(&mut buf) {
                    out.push_str(&format!("\\u{unit:04X}"));
                }
            }
        }
    }
    out
}

/// A Prometheus label value, escaped.
fn prom_escape(s: &str) -> String {
    s.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

proptest! {
    #![proptest_config(ProptestConfig { cases: scaled(1500), failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn checkpoint_reader_on_mutated_upstream_vectors(
        base in proptest::sample::select(UPSTREAM_VECTORS.to_vec()),
        edits in proptest::collection::vec((0usize..400, any::<u8>(), 0u8..3), 1..6),
        cut in proptest::option::of(0usize..400),
    ) {
        let mut bytes = base.as_bytes().to_vec();
        for (pos, byte, op) in edits {
            let pos = pos % (bytes.len() + 1);
            match op {
                0 if pos < bytes.len() => bytes[pos] = byte,
                1 => bytes.insert(pos, byte),
                _ if pos < bytes.len() => { bytes.remove(pos); }
                _ => {}
            }
        }
        if let Some(cut) = cut {
            bytes.truncate(cut);
        }
        check_checkpoint(&bytes)?;
    }

    #[test]
    fn checkpoint_reader_on_arbitrary_json(v in arb_json()) {
        check_checkpoint(v.to_string().as_bytes())?;
    }

    #[test]
    fn checkpoint_reader_on_checkpoint_shaped_json(v in arb_checkpoint_value()) {
        check_checkpoint(v.to_string().as_bytes())?;
        check_checkpoint(serde_json::to_string_pretty(&v).unwrap().as_bytes())?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: scaled(5000), failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn cpuset_parser_never_panics_and_its_output_is_canonical(text in "[0-9,\\- \t\n]{0,24}|\\PC{0,12}") {
        if let Ok(set) = CpuSet::parse(&text) {
            let canonical = set.to_string();
            prop_assert_eq!(CpuSet::parse(&canonical).unwrap(), set.clone());
            // Canonical is a fixed point.
            prop_assert_eq!(CpuSet::parse(&canonical).unwrap().to_string(), canonical.clone());
            prop_assert!(set.iter().all(|id| id <= CpuSet::MAX_CPU));
            prop_assert_eq!(set.len(), set.iter().count());
        }
    }

    #[test]
    fn cpuset_canonical_form_round_trips(ids in proptest::collection::btree_set(0u32..=CpuSet::MAX_CPU, 0..40)) {
        let set = CpuSet::from_ids(ids.iter().copied());
        let text = set.to_string();
        prop_assert_eq!(CpuSet::parse(&text).unwrap(), set.clone());
        prop_assert_eq!(set.iter().collect::<Vec<_>>(), ids.iter().copied().collect::<Vec<_>>());
        // Canonical form: sorted tokens, runs of two or more as a-b, no blanks.
        let mut prev: Option<u32> = None;
        for token in text.split(',').filter(|t| !t.is_empty()) {
            let (lo, hi) = match token.split_once('-') {
                Some((a, b)) => (a.parse::<u32>().unwrap(), b.parse::<u32>().unwrap()),
                None => { let a = token.parse::<u32>().unwrap(); (a, a) }
            };
            prop_assert!(lo < hi || !token.contains('-'), "{}", text);
            if let Some(p) = prev { prop_assert!(lo > p + 1, "adjacent runs not merged: {}", text); }
            prev = Some(hi);
        }
        // Kernel-style input (blanks, newline, unsorted duplicates) reads to the same set.
        let noisy: Vec<String> = ids.iter().rev().map(|i| i.to_string()).collect();
        prop_assert_eq!(CpuSet::parse(&format!(" {}\n", noisy.join(","))).unwrap_or_default(), set);
    }

    #[test]
    fn pod_dir_names(name in "\\PC{0,80}") {
        if let Some(uid) = parse_pod_dir_name(&name) {
            prop_assert!(!uid.is_empty() && uid.len() <= 64);
            prop_assert!(uid.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-'));
        }
    }

    #[test]
    fn pod_dir_names_of_both_drivers_give_the_uid(uid in "[a-f0-9]{8}-[a-f0-9]{4}-[a-f0-9]{4}-[a-f0-9]{4}-[a-f0-9]{12}",
                                                   qos in proptest::sample::select(vec!["", "-burstable", "-besteffort"])) {
        prop_assert_eq!(parse_pod_dir_name(&format!("pod{uid}")), Some(uid.clone()));
        let systemd = format!("kubepods{qos}-pod{}.slice", uid.replace('-', "_"));
        prop_assert_eq!(parse_pod_dir_name(&systemd), Some(uid));
    }

    #[test]
    fn leaf_names(name in "\\PC{0,90}|(cri-containerd-|crio-|docker-|crio-conmon-)?[0-9a-fA-F]{0,70}(\\.scope)?") {
        match parse_leaf_name(&name) {
            LeafName::Container(_, id) => {
                prop_assert!(!id.is_empty() && id.len() <= 64);
                prop_assert!(id.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)));
                prop_assert!(name.contains(&id));
            }
            LeafName::Conmon => prop_assert!(name.starts_with("crio-conmon-")),
            LeafName::Other => {}
        }
    }

    #[test]
    fn container_leaf_names_give_the_id(id in "[0-9a-f]{64}", prefix in proptest::sample::select(vec!["cri-containerd-", "crio-", "docker-", ""]), scope in any::<bool>()) {
        let name = if prefix.is_empty() { id.clone() } else { format!("{prefix}{id}{}", if scope { ".scope" } else { "" }) };
        match parse_leaf_name(&name) {
            LeafName::Container(_, got) => prop_assert_eq!(got, id),
            other => prop_assert!(false, "{} read as {:?}", name, other),
        }
    }

    #[test]
    fn cgroup_procs(text in "[0-9 \n\t]{0,40}|\\PC{0,30}") {
        if let Ok(pids) = parse_cgroup_procs(&text) {
            prop_assert_eq!(pids.len(), text.split_whitespace().count());
        }
    }

    #[test]
    fn cgroup_procs_round_trip(pids in proptest::collection::vec(any::<u32>(), 0..50)) {
        let text: String = pids.iter().map(|p| format!("{p}\n")).collect();
        prop_assert_eq!(parse_cgroup_procs(&text).unwrap(), pids);
    }

    #[test]
    fn status_cpus_allowed(text in "\\PC{0,60}", ids in proptest::collection::btree_set(0u32..1024, 0..20)) {
        let _ = parse_status_cpus_allowed(&text);
        let set = CpuSet::from_ids(ids);
        let status = format!("Name:\tjava\nState:\tS (sleeping)\nCpus_allowed:\tff\nCpus_allowed_list:\t{set}\nMems_allowed_list:\t0\n{text}");
        prop_assert_eq!(parse_status_cpus_allowed(&status).unwrap(), Some(set));
    }

    #[test]
    fn cmdline_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
        let args = parse_cmdline(&bytes);
        prop_assert!(args.iter().all(|a| !a.is_empty()));
    }

    #[test]
    fn cmdline_join_round_trips(args in proptest::collection::vec("[^\u{0}]{1,20}", 0..10), trailing in any::<bool>()) {
        let mut bytes = args.join("\0").into_bytes();
        if trailing && !args.is_empty() {
            bytes.push(0);
        }
        prop_assert_eq!(parse_cmdline(&bytes), args);
    }

    #[test]
    fn spark_properties_never_panic(text in "\\PC{0,200}|[a-z.=:\\\\ \t\n\r!#u0-9]{0,80}") {
        let _ = parse_spark_properties(&text);
    }

    #[test]
    fn spark_properties_store_round_trips(props in proptest::collection::btree_map("\\PC{1,16}", "\\PC{0,24}", 0..8),
                                          sep in proptest::sample::select(vec!["=", ": ", " ", " = ", "\t:"])) {
        let mut text = String::from("#Spark configuration\n#Sat Nov 21 10:00:00 UTC 2026\n");
        for (k, v) in &props {
            text.push_str(&format!("{}{}{}\n", java_escape(k), sep, java_escape(v)));
        }
        prop_assert_eq!(parse_spark_properties(&text), props);
    }

    #[test]
    fn prometheus_lines_never_panic(line in "\\PC{0,120}|[a-z_{}=\",\\\\ 0-9.eE+\\-#]{0,60}") {
        let _ = promtext::parse_line(&line);
    }

    #[test]
    fn prometheus_samples_round_trip(
        name in "[a-zA-Z_:][a-zA-Z0-9_:]{0,30}",
        labels in proptest::collection::btree_map("[a-zA-Z_][a-zA-Z0-9_]{0,12}", "\\PC{0,20}", 0..5),
        value in any::<f64>(),
        timestamp in proptest::option::of(any::<i64>()),
        trailing_comma in any::<bool>(),
    ) {
        let mut line = name.clone();
        if !labels.is_empty() {
            let parts: Vec<String> = labels.iter().map(|(k, v)| format!("{k}=\"{}\"", prom_escape(v))).collect();
            line.push('{');
            line.push_str(&parts.join(","));
            if trailing_comma { line.push(','); }
            line.push('}');
        }
        let value_text = if value.is_nan() { "NaN".to_string() } else if value == f64::INFINITY { "+Inf".to_string() } else if value == f64::NEG_INFINITY { "-Inf".to_string() } else { format!("{value:?}") };
        line.push(' ');
        line.push_str(&value_text);
        if let Some(ts) = timestamp { line.push_str(&format!(" {ts}")); }
        let s = promtext::parse_line(&line).unwrap_or_else(|| panic!("not read: {line}"));
        prop_assert_eq!(&s.name, &name);
        prop_assert_eq!(&s.labels, &labels);
        prop_assert!(s.value == value || (s.value.is_nan() && value.is_nan()), "{}: {}", line, s.value);
    }
}

proptest! {
    // YAML and JSON documents: slower per case.
    #![proptest_config(ProptestConfig { cases: scaled(600), failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn kubelet_config_never_panics(
        yaml in proptest::option::of(prop_oneof![
            "\\PC{0,120}",
            "(cpuManagerPolicy|cpuManagerReconcilePeriod|reservedSystemCPUs|kubeReserved|systemReserved|cpuManagerPolicyOptions|topologyManagerPolicy|featureGates|kind|apiVersion): (static|none|10s|-1h|0-3|\"\"|\\[\\]|\\{\\}|\\{cpu: 2\\}|~|1e400|9999999999999999999999)\n{0,1}",
        ]),
        args in proptest::collection::vec(prop_oneof![
            "\\PC{0,20}",
            "--(cpu-manager-policy|cpu-manager-reconcile-period|reserved-cpus|kube-reserved|system-reserved|config|cpu-manager-policy-options)(=(static|none|[0-9smh.-]{0,6}|cpu=[0-9m]{0,5}|full-pcpus-only=true))?",
        ], 0..6),
    ) {
        let _ = parse_kubelet_config(yaml.as_deref(), &args);
    }

    #[test]
    fn kubelet_config_on_generated_documents(
        fields in proptest::collection::btree_map(
            proptest::sample::select(vec!["cpuManagerPolicy", "cpuManagerReconcilePeriod", "reservedSystemCPUs", "kubeReserved", "systemReserved", "cpuManagerPolicyOptions", "featureGates", "topologyManagerPolicy", "kind", "apiVersion"]),
            arb_json(), 0..6),
    ) {
        let doc = Value::Object(fields.into_iter().map(|(k, v)| (k.to_string(), v)).collect());
        // JSON is YAML.
        let _ = parse_kubelet_config(Some(&doc.to_string()), &[]);
    }

    #[test]
    fn daemon_config_never_panics(text in "\\PC{0,160}|([a-z_]{1,12}:( [a-z0-9.\\-]{0,8})?\n(  [a-z_]{1,24}: [a-z0-9.\\-\\[\\]]{0,8}\n){0,3}){0,3}") {
        let _ = nodemedic::config::parse(&text);
    }

    #[test]
    fn daemon_config_on_generated_documents(
        sections in proptest::collection::btree_map(
            proptest::sample::select(vec!["repair", "rules", "scan", "events", "conditions", "api", "listen", "metrics", "disable_rules", "rule_settings"]),
            arb_json(), 0..5),
    ) {
        let doc = Value::Object(sections.into_iter().map(|(k, v)| (k.to_string(), v)).collect());
        let _ = nodemedic::config::parse(&doc.to_string());
    }
}

fn arb_pod() -> impl Strategy<Value = Value> {
    let container = (
        "[a-z]{1,8}",
        proptest::option::of(prop_oneof![
            Just(json!("2")),
            Just(json!("500m")),
            Just(json!("1.5")),
            Just(json!("-1")),
            Just(json!("1e3")),
            arb_json()
        ]),
    )
        .prop_map(|(name, cpu)| {
            let mut c = json!({"name": name});
            if let Some(cpu) = cpu {
                c["resources"] = json!({"requests": {"cpu": cpu.clone()}, "limits": {"cpu": cpu}});
            }
            c
        });
    (
        "[a-z0-9-]{0,12}",
        proptest::option::of("[a-z0-9-]{0,36}"),
        proptest::collection::vec(container, 0..3),
        proptest::option::of(proptest::sample::select(vec!["Running", "Pending", "Failed", "Succeeded", "Unknown", ""])),
        proptest::option::of(arb_json()),
        proptest::option::of(proptest::collection::btree_map(proptest::sample::select(vec!["spark-role", "spark-app-selector", "spark-exec-id", "spark-app-name"]), "[a-z0-9-]{0,10}", 0..4)),
        proptest::option::of(arb_json()),
    )
        .prop_map(|(name, uid, containers, phase, junk, labels, owner)| {
            let mut p = json!({"metadata": {"name": name, "namespace": "ns"}, "spec": {"nodeName": "n", "containers": containers}, "status": {}});
            if let Some(uid) = uid { p["metadata"]["uid"] = json!(uid); }
            if let Some(phase) = phase { p["status"]["phase"] = json!(phase); }
            if let Some(labels) = labels { p["metadata"]["labels"] = json!(labels); }
            if let Some(owner) = owner { p["metadata"]["ownerReferences"] = json!([owner]); }
            if let Some(junk) = junk { p["status"]["containerStatuses"] = junk; }
            p
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: scaled(1500), failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn pods_json_never_panics_on_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
        same_from_memory_and_stream(&bytes)?;
    }

    #[test]
    fn pods_json_never_panics_on_arbitrary_json(v in arb_json()) {
        same_from_memory_and_stream(v.to_string().as_bytes())?;
    }

    #[test]
    fn pods_json_lists(pods in proptest::collection::vec(arb_pod(), 0..5), kind in proptest::sample::select(vec!["List", "PodList"])) {
        let list = json!({"apiVersion": "v1", "kind": kind, "items": pods});
        let text = list.to_string();
        same_from_memory_and_stream(text.as_bytes())?;
        // Truncations of a valid list are errors, never panics.
        for cut in [text.len() / 3, text.len() / 2, text.len().saturating_sub(1)] {
            prop_assert!(parse_pods_json(&text.as_bytes()[..cut]).is_err());
        }
    }
}

/// The pods reader from memory and from a stream: the same pods, or the same error (its
/// column may differ by the one byte a reader has consumed past the fault).
fn same_from_memory_and_stream(bytes: &[u8]) -> Result<(), TestCaseError> {
    let whole = parse_pods_json(bytes).map_err(|e| without_column(&e.to_string()));
    let streamed = read_pods(bytes).map_err(|e| without_column(&e.to_string()));
    prop_assert_eq!(whole, streamed, "{}", String::from_utf8_lossy(bytes));
    Ok(())
}

/// `text` with the number after each "column " taken out.
fn without_column(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(i) = rest.find("column ") {
        out.push_str(&rest[..i + "column ".len()]);
        rest = rest[i + "column ".len()..].trim_start_matches(|c: char| c.is_ascii_digit());
    }
    out + rest
}

// Regression inputs found while writing this file (kept as literal inputs).

#[test]
fn regression_examples_stay_fixed() {
    // Edge inputs of the cpuset parser: above the cap, u32 overflow, reversed, blanks.
    for t in [
        "65536",
        "0-65536",
        "4294967296",
        "99999999999999999999",
        "3-1",
        "1,,2",
        " ",
        "-",
        "1-",
        "-1",
    ] {
        let _ = CpuSet::parse(t);
    }
    assert_eq!(CpuSet::parse("0-65535").unwrap().len(), 65536);
    // Empty and absurd checkpoints.
    for t in [
        "",
        "null",
        "[]",
        "{}",
        "{\"data\":\"{\\\"data\\\":\\\"\\\"}\"}",
        "{\"entries\":{\"\":null}}",
    ] {
        check_checkpoint(t.as_bytes()).unwrap();
    }
    // Found by CI (2026-11-21): a V4 file whose payload held container-ID (V1) entries beside
    // podEntries verified by its dataChecksum, and the writer could not write that state back
    // as a file any kubelet accepts. A V4 kubelet cannot unmarshal such a payload either, so
    // the reader now rejects it, and names why.
    let found = r#"{"data":"{\"entries\":{\"0\":\"\"},\"podEntries\":{\"a\":{\"cpuSet\":\"\"}}}","checksum":0,"dataChecksum":249044885}"#;
    let err = Checkpoint::parse(found.as_bytes()).expect_err(found).to_string();
    assert!(err.contains("keyed by container ID (V1)"), "{err}");
    check_checkpoint(found.as_bytes()).unwrap();
    let mut m = BTreeMap::new();
    m.insert("a b".to_string(), "".to_string());
    assert_eq!(parse_spark_properties("a\\ b"), m);
}

/// A node whose checkpoint pins `owners` (CPU `i` to `owners[i]`: a pod index and a container
/// name, or the default set), and the kubelet's view of it: the pods in `alive` listed with
/// exactly their entries, their UIDs known or not (`uid_known`).
fn agreeing_node(owners: &[Option<(u8, bool)>], alive: &[bool], uid_known: &[bool]) -> nodemedic_rules::NodeSnapshot {
    use nodemedic_rules::kubelet_view::{KubeletContainer, KubeletPod, KubeletView, UidSource};
    use nodemedic_rules::snapshot::{CheckpointFile, Observed, PodSource};
    let uid = |p: u8| format!("pod-{p}");
    let name = |app: bool| if app { "app" } else { "sidecar" };
    let mut entries: BTreeMap<String, BTreeMap<String, Vec<u32>>> = BTreeMap::new();
    let mut default = Vec::new();
    for (cpu, owner) in owners.iter().enumerate() {
        match owner {
            Some((p, app)) => entries
                .entry(uid(*p))
                .or_default()
                .entry(name(*app).into())
                .or_default()
                .push(cpu as u32),
            None => default.push(cpu as u32),
        }
    }
    let json_entries: serde_json::Map<String, Value> = entries
        .iter()
        .map(|(u, cs)| {
            let m: serde_json::Map<String, Value> = cs
                .iter()
                .map(|(c, cpus)| (c.clone(), json!(CpuSet::from_ids(cpus.iter().copied()).to_string())))
                .collect();
            (u.clone(), Value::Object(m))
        })
        .collect();
    let file = json!({"policyName": "static", "defaultCpuSet": CpuSet::from_ids(default).to_string(),
                      "entries": json_entries, "checksum": 0});
    let mut snap = nodemedic_rules::NodeSnapshot::empty("node-a", 1_700_000_000);
    snap.host.checkpoint = Observed::Ok(CheckpointFile::new(
        "/var/lib/kubelet/cpu_manager_state".into(),
        Some(3600.0),
        Checkpoint::parse(file.to_string().as_bytes()),
    ));
    snap.pods.source = PodSource::PodResources;
    let pods = entries
        .iter()
        .filter(|(u, _)| {
            let i: usize = u[4..].parse().unwrap();
            alive[i]
        })
        .map(|(u, cs)| {
            let i: usize = u[4..].parse().unwrap();
            KubeletPod {
                namespace: "spark".into(),
                name: format!("exec-{i}"),
                uids: if uid_known[i] { vec![u.clone()] } else { vec![] },
                uid_source: uid_known[i].then_some(UidSource::PodList),
                containers: cs
                    .iter()
                    .map(|(c, cpus)| KubeletContainer {
                        name: c.clone(),
                        cpus: CpuSet::from_ids(cpus.iter().copied()),
                        ..Default::default()
                    })
                    .collect(),
            }
        })
        .collect();
    snap.host.kubelet_view = Observed::Ok(KubeletView {
        socket: "/var/lib/kubelet/pod-resources/kubelet.sock".into(),
        pods,
        allocatable_cpus: Observed::NotApplicable {
            reason: "not asked".into(),
        },
        checkpoint_changed: false,
        listed_at: 1_700_000_000,
    });
    snap
}

proptest! {
    #![proptest_config(ProptestConfig { cases: scaled(800), failure_persistence: None, ..ProptestConfig::default() })]

    /// A kubelet whose memory is its file: no divergence, and by its list exactly the entries
    /// of the pods it does not list are stale, whatever UIDs it could be tied to.
    #[test]
    fn the_kubelets_view_of_its_own_file_agrees_and_judges_liveness_exactly(
        owners in proptest::collection::vec(proptest::option::of((0u8..6, any::<bool>())), 1..24),
        alive in proptest::collection::vec(any::<bool>(), 6),
        uid_known in proptest::collection::vec(any::<bool>(), 6),
    ) {
        let snap = agreeing_node(&owners, &alive, &uid_known);
        let settings = nodemedic_rules::Settings::default();
        let facts = nodemedic_rules::facts::derive(&snap, &settings);
        let divergent = nodemedic_rules::rules::kubelet_state_divergence::check(&snap, &facts, &settings);
        prop_assert!(divergent.is_empty(), "{divergent:#?}");
        let mut stale: Vec<String> = facts.stale_cpu.iter().filter_map(|e| e.pod_uid.clone()).collect();
        stale.sort();
        stale.dedup();
        let mut want: Vec<String> = owners
            .iter()
            .flatten()
            .map(|(p, _)| *p)
            .filter(|p| !alive[*p as usize])
            .map(|p| format!("pod-{p}"))
            .collect();
        want.sort();
        want.dedup();
        prop_assert_eq!(stale, want);
    }
}

// The other resource managers' checkpoints (memory, devices, DRA, the NVIDIA driver's): each
// reader on mutated files as the kubelet writes them, and the rules on whatever they accept.

/// Files of the four formats for pods `pod-0`..`pod-5`: `(memory, devices, dra, nvidia)`.
fn manager_files(entries: &[(u8, u8, u8)]) -> [Vec<u8>; 4] {
    use nodemedic_tests::checkpoints as cp;
    let pod = |p: u8| format!("pod-{p}");
    let memory: Vec<cp::MemoryEntry> = entries
        .iter()
        .map(|(p, numa, gib)| cp::MemoryEntry::new(&pod(*p), "app", i64::from(*numa % 2), u64::from(*gib) * cp::GIB))
        .collect();
    let devices: Vec<cp::DeviceEntry> = entries
        .iter()
        .enumerate()
        .map(|(i, (p, numa, _))| {
            cp::DeviceEntry::new(
                &pod(*p),
                "app",
                "nvidia.com/gpu",
                &[(&format!("GPU-{i}"), i64::from(*numa % 2))],
            )
        })
        .collect();
    let claims: Vec<cp::DraClaim> = entries
        .iter()
        .enumerate()
        .map(|(i, (p, _, _))| cp::DraClaim {
            uid: format!("claim-{i}"),
            namespace: "spark".into(),
            name: format!("c{i}"),
            pods: vec![pod(*p)],
            devices: vec![("gpu.nvidia.com".into(), "node-a".into(), format!("gpu-{i}"))],
        })
        .collect();
    let driver: Vec<cp::DriverClaim> = entries
        .iter()
        .enumerate()
        .map(|(i, (p, numa, _))| cp::DriverClaim {
            uid: format!("claim-{i}"),
            namespace: "spark".into(),
            name: format!("c{i}"),
            state: if numa % 2 == 0 {
                "PrepareCompleted"
            } else {
                "PrepareStarted"
            }
            .into(),
            pods: vec![pod(*p)],
            gpus: vec![format!("gpu-{i}")],
            pool: "node-a".into(),
        })
        .collect();
    [
        cp::memory_manager_state(2, 64 * cp::GIB, &memory),
        cp::device_checkpoint(&devices, &[]),
        cp::dra_manager_state(&claims),
        cp::nvidia_checkpoint(&driver),
    ]
}

/// A node whose pod list has `alive` of `pod-0`..`pod-5` running, with the four files as given.
fn manager_node(files: &[Vec<u8>; 4], alive: &[bool]) -> nodemedic_rules::NodeSnapshot {
    use nodemedic_rules::managers::KubeletCheckpoint;
    use nodemedic_rules::managers::devices::DeviceCheckpoint;
    use nodemedic_rules::managers::dra::DraCheckpoint;
    use nodemedic_rules::managers::drivers::{DriverFormat, parse};
    use nodemedic_rules::managers::memory::MemoryCheckpoint;
    use nodemedic_rules::snapshot::{DriverFile, ManagerFile, Observed, PodInfo, PodSource};
    fn file<C: KubeletCheckpoint>(bytes: &[u8]) -> Observed<ManagerFile<C>> {
        Observed::Ok(ManagerFile::new(
            format!("/var/lib/kubelet/{}", C::FILE),
            Some(3600.0),
            C::parse(bytes),
        ))
    }
    let mut snap = nodemedic_rules::NodeSnapshot::empty("node-a", 1_700_000_000);
    snap.host.managers.memory = file::<MemoryCheckpoint>(&files[0]);
    snap.host.managers.devices = file::<DeviceCheckpoint>(&files[1]);
    snap.host.managers.dra = file::<DraCheckpoint>(&files[2]);
    snap.host.managers.drivers.push(DriverFile {
        format: DriverFormat::NvidiaGpu,
        path: "/var/lib/kubelet/plugins/gpu.nvidia.com/checkpoint.json".into(),
        age_seconds: Some(3600.0),
        claims: match parse(DriverFormat::NvidiaGpu, &files[3]) {
            Ok(c) => Observed::Ok(c),
            Err(e) => Observed::Error { reason: e.to_string() },
        },
    });
    snap.pods.source = PodSource::File;
    snap.pods.bound = alive
        .iter()
        .enumerate()
        .filter(|(_, a)| **a)
        .map(|(i, _)| PodInfo {
            uid: format!("pod-{i}"),
            namespace: "spark".into(),
            name: format!("exec-{i}"),
            node_name: Some("node-a".into()),
            phase: "Running".into(),
            containers: vec![nodemedic_rules::snapshot::ContainerInfo {
                name: "app".into(),
                ..Default::default()
            }],
            ..Default::default()
        })
        .collect();
    snap
}

/// The pod UIDs of a rule's findings' `key` evidence.
fn finding_uids(findings: &[nodemedic_rules::Finding], rule: &str, key: &str) -> Vec<String> {
    let mut uids: Vec<String> = findings
        .iter()
        .filter(|f| f.rule.as_str() == rule)
        .flat_map(|f| match &f.evidence[key] {
            Value::String(s) => vec![s.clone()],
            Value::Array(a) => a.iter().filter_map(|v| v.as_str().map(str::to_string)).collect(),
            _ => vec![],
        })
        .collect();
    uids.sort();
    uids.dedup();
    uids
}

proptest! {
    #![proptest_config(ProptestConfig { cases: scaled(400), failure_persistence: None, ..ProptestConfig::default() })]

    /// Signed files of random entries: every stale finding names exactly the entries of pods not
    /// alive, in each file, and nothing else fires on them.
    #[test]
    fn manager_entries_are_stale_exactly_when_their_pod_is_gone(
        entries in proptest::collection::vec((0u8..6, 0u8..4, 1u8..32), 0..10),
        alive in proptest::collection::vec(any::<bool>(), 6),
    ) {
        let files = manager_files(&entries);
        let snap = manager_node(&files, &alive);
        let findings = nodemedic_rules::rules::evaluate(&snap, &nodemedic_rules::Settings::default());
        let mut gone: Vec<String> = entries
            .iter()
            .map(|(p, _, _)| *p)
            .filter(|p| !alive[*p as usize])
            .map(|p| format!("pod-{p}"))
            .collect();
        gone.sort();
        gone.dedup();
        prop_assert_eq!(finding_uids(&findings, "stale-memory-assignment", "pod_uid"), gone.clone());
        prop_assert_eq!(finding_uids(&findings, "stale-device-assignment", "pod_uid"), gone.clone());
        prop_assert_eq!(finding_uids(&findings, "stale-dra-claim", "pod_uids"), gone);
        prop_assert!(findings.iter().all(|f| f.rule.as_str() != "checkpoint-unreadable"), "{findings:#?}");
    }

    /// The same files mutated: the readers never panic, and neither do the rules on what they
    /// accept; a file that changed and still parses is either accepted or named unreadable.
    #[test]
    fn mutated_manager_files_never_panic(
        entries in proptest::collection::vec((0u8..6, 0u8..4, 1u8..32), 1..5),
        which in 0usize..4,
        edits in proptest::collection::vec((0usize..2000, any::<u8>(), 0u8..3), 1..6),
        cut in proptest::option::of(0usize..2000),
    ) {
        let mut files = manager_files(&entries);
        let bytes = &mut files[which];
        for (pos, byte, op) in edits {
            let pos = pos % (bytes.len() + 1);
            match op {
                0 if pos < bytes.len() => bytes[pos] = byte,
                1 => bytes.insert(pos, byte),
                _ if pos < bytes.len() => { bytes.remove(pos); }
                _ => {}
            }
        }
        if let Some(cut) = cut {
            bytes.truncate(cut);
        }
        let snap = manager_node(&files, &[true, false, true, false, true, false]);
        let findings = nodemedic_rules::rules::evaluate(&snap, &nodemedic_rules::Settings::default());
        for f in &findings {
            prop_assert!(!f.summary.is_empty() && !f.remedy.is_empty(), "{f:#?}");
        }
        // A kubelet file the kubelet would not take (unreadable, refused by its checksum, or a
        // value it cannot use) is named by checkpoint-unreadable; one it takes is not.
        let (accepted, path) = match which {
            0 => (snap.host.managers.memory.ok().is_some_and(|f| f.accepted_state().is_some()), "memory_manager_state"),
            1 => (snap.host.managers.devices.ok().is_some_and(|f| f.accepted_state().is_some()), "kubelet_internal_checkpoint"),
            2 => (snap.host.managers.dra.ok().is_some_and(|f| f.accepted_state().is_some()), "dra_manager_state"),
            _ => (true, "checkpoint.json"),
        };
        let named = findings
            .iter()
            .any(|f| f.rule.as_str() == "checkpoint-unreadable" && f.evidence["path"].as_str().is_some_and(|p| p.ends_with(path)));
        prop_assert_eq!(named, !accepted, "{}", String::from_utf8_lossy(&files[which]));
    }
}
