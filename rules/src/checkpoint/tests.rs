use super::*;
use proptest::prelude::*;

/// docs/kubelet.md, "The checksum": (content, layout, type name) from the kubelet's own tests
/// (kubernetes/kubernetes `pkg/kubelet/cm/cpumanager/state/state_checkpoint_test.go`).
const UPSTREAM_VECTORS: &[(&str, &str, &str)] = &[
    (
        r#"{"policyName":"none","defaultCPUSet":"4-6","entries":{},"checksum":354655845}"#,
        "V2",
        "CPUManagerCheckpoint",
    ),
    (
        r#"{"policyName":"none","defaultCPUSet":"1-3","entries":{"pod":{"container1":"4-6","container2":"1-3"}},"checksum":3610638499}"#,
        "V2",
        "CPUManagerCheckpoint",
    ),
    (
        r#"{"policyName":"static","defaultCPUSet":"7-9","entries":{"containerID1":"4-6","containerID2":"1-3"},"checksum":2026311253}"#,
        "V1",
        "CPUManagerCheckpoint",
    ),
    (
        r#"{"policyName":"none","defaultCPUSet":"1-3","entries":{"container1":"4-6","container2":"1-3"},"checksum":1535905563}"#,
        "V1",
        "CPUManagerCheckpoint",
    ),
    (
        r#"{"policyName":"static","defaultCPUSet":"1-2","entries":{"pod1":{"container1":"5-6","container2":"3-4"}},"podEntries":{"pod2":{"cpuSet":"7-9"}},"checksum":766259872}"#,
        "V3",
        "CPUManagerCheckpoint",
    ),
    (
        r#"{"policyName":"static","defaultCPUSet":"1-2","entries":{"pod1":{"container1":"5-6","container2":"3-4"}},"podEntries":{"pod2":{"cpuSet":"7-9"}},"checksum":2284712151}"#,
        "V3",
        "CPUManagerCheckpointV3",
    ),
    (
        r#"{"policyName":"static","defaultCPUSet":"1-3","entries":{"pod":{"container1":"4-6","container2":"7-9"}},"checksum":1659543133}"#,
        "V3",
        "CPUManagerCheckpoint",
    ),
    // docs/kubelet.md, "The checkpoint file": examples as a kubelet writes them.
    (
        r#"{"policyName":"none","defaultCpuSet":"","checksum":1353318690}"#,
        "V2",
        "CPUManagerCheckpoint",
    ),
    (
        r#"{"policyName":"static","defaultCpuSet":"0-1","entries":{"uid1":{"c1":"2-3"}},"checksum":3094260139}"#,
        "V2",
        "CPUManagerCheckpoint",
    ),
];

#[test]
fn every_upstream_vector_verifies_with_its_layout() {
    for (content, layout, type_name) in UPSTREAM_VECTORS {
        let cp = Checkpoint::parse(content.as_bytes()).unwrap_or_else(|e| panic!("{content}: {e}"));
        match cp.verify() {
            Verification::Matched {
                layout: l,
                type_name: t,
                v4,
            } => {
                assert_eq!((l, t, v4), (*layout, *type_name, false), "{content}");
            }
            other => panic!("{content}: {other:?}"),
        }
    }
}

#[test]
fn tampered_vectors_fail() {
    for (content, _, _) in UPSTREAM_VECTORS {
        let tampered = [
            content.replacen("checksum\":", "checksum\":1", 1),
            content.replacen("\"policyName\":\"", "\"policyName\":\"x", 1),
            content.replace("-6", "-5"),
            content.replace("\"checksum\"", "\"entries\":null,\"checksum\""),
        ];
        for t in tampered.iter().filter(|t| t != content) {
            let cp = Checkpoint::parse(t.as_bytes()).unwrap();
            assert!(!cp.verify().accepted(), "tampered copy verified: {t}");
        }
    }
    // The deliberately wrong checksums of the kubelet's tests.
    for wrong in [1337, 1234] {
        let t = format!(r#"{{"policyName":"none","defaultCPUSet":"4-6","entries":{{}},"checksum":{wrong}}}"#);
        match Checkpoint::parse(t.as_bytes()).unwrap().verify() {
            Verification::Mismatch { stored, computed } => {
                assert_eq!(stored, wrong);
                assert!(
                    computed
                        .iter()
                        .any(|(name, sum)| name == "V2 as CPUManagerCheckpoint" && *sum == 354_655_845)
                );
            }
            other => panic!("{other:?}"),
        }
    }
}

#[test]
fn reader_is_case_insensitive_and_ignores_unknown_keys() {
    let cp = Checkpoint::parse(
        br#"{"POLICYNAME":"static","DefaultCpuSet":"0-1","ENTRIES":{"uid1":{"c1":"2-3"}},"futureField":[1,2],"Checksum":3094260139}"#,
    )
    .unwrap();
    assert_eq!(cp.policy_name, "static");
    assert_eq!(cp.default_cpu_set, "0-1");
    assert!(matches!(cp.verify(), Verification::Matched { layout: "V2", .. }));
    // A later duplicate wins, as in Go.
    let cp =
        Checkpoint::parse(br#"{"policyName":"none","defaultCpuSet":"1","defaultCPUSet":"2","checksum":0}"#).unwrap();
    assert_eq!(cp.default_cpu_set, "2");
}

#[test]
fn checksum_zero_is_unverified_but_accepted() {
    let cp = Checkpoint::parse(br#"{"policyName":"static","defaultCpuSet":"0-3","checksum":0}"#).unwrap();
    assert_eq!(cp.verify(), Verification::Unverified { layout: "V2" });
    let v3 = Checkpoint::parse(
        br#"{"policyName":"static","defaultCpuSet":"0-3","podEntries":{"p":{"cpuSet":"1"}},"checksum":0}"#,
    )
    .unwrap();
    assert!(!v3.verify().accepted());
}

#[test]
fn v4_payload_is_verified_and_used() {
    let data = r#"{"policyName":"static","defaultCpuSet":"0-1","entries":{"uid1":{"c1":"2-3"}}}"#;
    let sum = checksum::data_checksum(data);
    let file = serde_json::json!({
        "policyName": "static", "defaultCpuSet": "0-3", "checksum": 0,
        "data": data, "dataChecksum": sum,
    })
    .to_string();
    let cp = Checkpoint::parse(file.as_bytes()).unwrap();
    assert_eq!(cp.layout(), "V4");
    assert_eq!(
        cp.verify(),
        Verification::Matched {
            layout: "V4",
            type_name: "string",
            v4: true
        }
    );
    let state = cp.state().unwrap();
    assert_eq!(state.default_cpus.to_string(), "0-1");
    assert_eq!(state.assignments.len(), 1);
    let bad = file.replace(&sum.to_string(), &(sum ^ 1).to_string());
    assert!(!Checkpoint::parse(bad.as_bytes()).unwrap().verify().accepted());
}

#[test]
fn malformed_files_give_errors_naming_the_problem() {
    let cases: &[(&[u8], &str)] = &[
        (b"", "empty"),
        (b"  \n", "empty"),
        (
            br#"{"policyName":"static","defaultCpuSet":"0-1","entr"#,
            "line 1 column",
        ),
        (b"[1,2]", "an array, not an object"),
        (b"null", "null, not an object"),
        (
            br#"{"policyName":3}"#,
            "field policyName: expected a string, found a number",
        ),
        (
            br#"{"checksum":-1}"#,
            "field checksum: expected an unsigned 64-bit integer",
        ),
        (br#"{"checksum":1.5}"#, "field checksum"),
        (
            br#"{"checksum":"12"}"#,
            "field checksum: expected an unsigned integer, found a string",
        ),
        (br#"{"entries":[]}"#, "field entries: expected an object"),
        (
            br#"{"entries":{"a":"1","b":{"c":"2"}}}"#,
            "a mix of strings and objects",
        ),
        (
            br#"{"entries":{"a":{"c":7}}}"#,
            "field entries[\"a\"][\"c\"]: expected a string",
        ),
        (
            br#"{"podEntries":{"p":"1"}}"#,
            "field podEntries[\"p\"]: expected an object",
        ),
        (b"\xff\xfe{}", "invalid JSON"),
        (br#"{"data":"{nope"}"#, "field data (V4 payload): invalid JSON"),
        (br#"{} trailing"#, "trailing characters"),
        (
            br#"{"checksum":0,"data":"{\"entries\":{\"0\":\"\"},\"podEntries\":{\"a\":{\"cpuSet\":\"\"}}}"}"#,
            "field data (V4 payload): entries are keyed by container ID (V1)",
        ),
        (
            br#"{"data":"{\"data\":\"{}\"}"}"#,
            "field data (V4 payload): the payload has a data field of its own",
        ),
    ];
    for (input, want) in cases {
        let err = Checkpoint::parse(input)
            .expect_err(&String::from_utf8_lossy(input))
            .to_string();
        assert!(err.contains(want), "{:?}: {err}", String::from_utf8_lossy(input));
    }
}

#[test]
fn bad_cpusets_name_the_field() {
    let cp = Checkpoint::parse(
        br#"{"policyName":"static","defaultCpuSet":"0-1","entries":{"uid1":{"c1":"1.3"}},"checksum":0}"#,
    )
    .unwrap();
    assert_eq!(
        cp.state().unwrap_err().to_string(),
        "field entries[\"uid1\"][\"c1\"]: invalid cpuset token \"1.3\": not a CPU id or a low-high range"
    );
    let cp = Checkpoint::parse(br#"{"policyName":"static","defaultCpuSet":"3-1","checksum":0}"#).unwrap();
    assert!(
        cp.state()
            .unwrap_err()
            .to_string()
            .starts_with("field defaultCpuSet: invalid cpuset range \"3-1\"")
    );
}

#[test]
fn too_large_input_is_refused_before_parsing() {
    let big = vec![b' '; (MAX_CHECKPOINT_BYTES + 1) as usize];
    assert!(matches!(Checkpoint::parse(&big), Err(CheckpointError::TooLarge { .. })));
}

#[test]
fn writer_output_is_byte_identical_to_the_kubelet_examples() {
    let state = Checkpoint::parse(
        br#"{"policyName":"static","defaultCpuSet":"0-1","entries":{"uid1":{"c1":"2-3"}},"checksum":3094260139}"#,
    )
    .unwrap()
    .state()
    .unwrap();
    assert_eq!(
        state.to_checkpoint_json(),
        r#"{"policyName":"static","defaultCpuSet":"0-1","entries":{"uid1":{"c1":"2-3"}},"checksum":3094260139}"#
    );
    let none = CpuState {
        policy_name: "none".into(),
        default_cpus: CpuSet::new(),
        assignments: vec![],
        pod_assignments: vec![],
    };
    assert_eq!(
        none.to_checkpoint_json(),
        r#"{"policyName":"none","defaultCpuSet":"","checksum":1353318690}"#
    );
}

#[test]
fn writer_writes_v3_only_with_pod_entries() {
    let cp = Checkpoint::parse(UPSTREAM_VECTORS[4].0.as_bytes()).unwrap();
    let json = cp.state().unwrap().to_checkpoint_json();
    assert!(json.contains(r#""podEntries":{"pod2":{"cpuSet":"7-9"}}"#), "{json}");
    // Canonical cpuset "1-2" etc. hash the same as the upstream file.
    assert!(json.ends_with(r#""checksum":766259872}"#), "{json}");
}

/// States of up to 512 CPUs, 12 container and 3 pod entries: what the writer must write.
fn arb_state() -> impl Strategy<Value = CpuState> {
    let uid = "[a-f0-9]{8}(-[a-f0-9]{4}){0,2}";
    let name = "[a-z][a-z0-9-]{0,12}";
    let cpus = proptest::collection::btree_set(0u32..512, 1..6).prop_map(CpuSet::from_ids);
    (
        proptest::sample::select(vec!["static", "none"]),
        proptest::collection::btree_set(0u32..512, 0..20).prop_map(CpuSet::from_ids),
        proptest::collection::btree_map((uid, name), cpus.clone(), 0..12),
        proptest::collection::btree_map(uid, cpus, 0..3),
    )
        .prop_map(|(policy, default_cpus, entries, pods)| CpuState {
            policy_name: policy.to_string(),
            default_cpus,
            assignments: entries
                .into_iter()
                .map(|((pod_uid, container), cpus)| Assignment {
                    key: EntryKey::Container { pod_uid, container },
                    cpus,
                })
                .collect(),
            pod_assignments: pods.into_iter().collect(),
        })
}

proptest! {
    // As many cases as the fuzz suite gives each checkpoint property (tests/tests/fuzz.rs).
    #![proptest_config(ProptestConfig { cases: 1500, ..ProptestConfig::default() })]

    #[test]
    fn anything_written_verifies_and_reads_back_equal(state in arb_state()) {
        let json = state.to_checkpoint_json();
        let cp = Checkpoint::parse(json.as_bytes()).unwrap();
        let want_layout = if state.pod_assignments.is_empty() { "V2" } else { "V3" };
        prop_assert_eq!(cp.verify(), Verification::Matched { layout: want_layout, type_name: "CPUManagerCheckpoint", v4: false });
        prop_assert_eq!(cp.state().unwrap(), state);
        // The raw model round trips too.
        prop_assert_eq!(Checkpoint::parse(cp.to_json().as_bytes()).unwrap(), cp);
    }

    #[test]
    fn parser_never_panics_on_mutated_files(
        base in proptest::sample::select(UPSTREAM_VECTORS.iter().map(|v| v.0).collect::<Vec<_>>()),
        cut in 0usize..200, byte in any::<u8>(), pos in 0usize..200,
    ) {
        let mut bytes = base.as_bytes().to_vec();
        let p = pos % bytes.len();
        bytes[p] = byte;
        bytes.truncate(cut.max(1).min(bytes.len()));
        if let Ok(cp) = Checkpoint::parse(&bytes) {
            let _ = cp.verify();
            let _ = cp.state();
        }
    }
}
