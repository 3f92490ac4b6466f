use super::*;
use proptest::prelude::*;

/// The kubelet's own files (kubernetes/kubernetes
/// `pkg/kubelet/cm/memorymanager/state/state_checkpoint_test.go`, 1.21 to 1.37).
const UPSTREAM_V1: &str = r#"{
        "policyName":"static",
        "machineState":{"0":{"numberOfAssignments":0,"memoryMap":{"memory":{"total":2048,"systemReserved":512,"allocatable":1536,"reserved":512,"free":1024}},"cells":[]}},
        "entries":{"pod":{"container1":[{"numaAffinity":[0],"type":"memory","size":512}]}},
        "checksum": 4215593881
    }"#;
const UPSTREAM_V2: &str = r#"{
        "policyName":"static",
        "machineState":{"0":{"numberOfAssignments":0,"memoryMap":{"memory":{"total":2048,"systemReserved":512,"allocatable":1536,"reserved":512,"free":1024}},"cells":[]}},
        "entries":{"pod":{"container1":[{"numaAffinity":[0],"type":"memory","size":512}]}},
        "podEntries":{"pod":{"memoryBlocks":[{"numaAffinity":[0],"type":"memory","size":512}]}},
        "checksum": 1278640530
    }"#;
/// A V3 file whose outer (V1) part is deliberately wrong: only `data` counts.
const UPSTREAM_V3: &str = r#"{
        "policyName":"other",
        "machineState":{"0":{"numberOfAssignments":5,"memoryMap":{"memory":{"total":1024,"systemReserved":256,"allocatable":768,"reserved":256,"free":512}},"cells":[]}},
        "entries":{"pod":{"containerX":[{"numaAffinity":[0],"type":"memory","size":128}]}},
        "checksum": 1234,
        "data": "{\"policyName\":\"static\",\"machineState\":{\"0\":{\"numberOfAssignments\":0,\"memoryMap\":{\"memory\":{\"total\":2048,\"systemReserved\":512,\"allocatable\":1536,\"reserved\":512,\"free\":1024}},\"cells\":[]}},\"entries\":{\"pod\":{\"container1\":[{\"numaAffinity\":[0],\"type\":\"memory\",\"size\":512}]}}}",
        "dataChecksum": 1849615440
    }"#;
const UPSTREAM_V3_PODS: &str = r#"{
        "policyName":"other",
        "machineState":{"0":{"numberOfAssignments":5,"memoryMap":{"memory":{"total":1024,"systemReserved":256,"allocatable":768,"reserved":256,"free":512}},"cells":[]}},
        "entries":{"pod":{"containerX":[{"numaAffinity":[0],"type":"memory","size":128}]}},
        "podEntries":{"podY":{"memoryBlocks":[{"numaAffinity":[0],"type":"memory","size":64}]}},
        "checksum": 1234,
        "data": "{\"policyName\":\"static\",\"machineState\":{\"0\":{\"numberOfAssignments\":0,\"memoryMap\":{\"memory\":{\"total\":2048,\"systemReserved\":512,\"allocatable\":1536,\"reserved\":512,\"free\":1024}},\"cells\":[]}},\"entries\":{\"pod\":{\"container1\":[{\"numaAffinity\":[0],\"type\":\"memory\",\"size\":512}]}},\"podEntries\":{\"pod\":{\"memoryBlocks\":[{\"numaAffinity\":[0],\"type\":\"memory\",\"size\":512}]}}}",
        "dataChecksum": 637296054
    }"#;
const UPSTREAM_V3_UNKNOWN_FIELD: &str = r#"{
        "policyName":"other",
        "checksum": 1234,
        "data": "{\"unknownField\":\"value\",\"policyName\":\"static\",\"machineState\":{\"0\":{\"numberOfAssignments\":0,\"memoryMap\":{\"memory\":{\"total\":2048,\"systemReserved\":512,\"allocatable\":1536,\"reserved\":512,\"free\":1024}},\"cells\":[]}},\"entries\":{\"pod\":{\"container1\":[{\"numaAffinity\":[0],\"type\":\"memory\",\"size\":512}]}}}",
        "dataChecksum": 2100279793
    }"#;

fn parse(text: &str) -> MemoryCheckpoint {
    MemoryCheckpoint::parse(text.as_bytes()).unwrap_or_else(|e| panic!("{text}: {e}"))
}

fn matched(cp: &MemoryCheckpoint) -> (&'static str, &'static str) {
    match cp.verify() {
        Verification::Matched { layout, type_name, .. } => (layout, type_name),
        other => panic!("not matched: {other:?}"),
    }
}

fn field_of(text: &str) -> String {
    match MemoryCheckpoint::parse(text.as_bytes()) {
        Err(CheckpointError::FieldType { field, .. } | CheckpointError::Value { field, .. }) => field,
        other => panic!("{text}: expected a field error, got {other:?}"),
    }
}

fn block(bytes: u64) -> MemoryBlock {
    MemoryBlock {
        numa_nodes: vec![0],
        resource: "memory".into(),
        bytes,
    }
}

#[test]
fn v1_dump_is_exactly_the_kubelet_string() {
    let cp = parse(UPSTREAM_V1);
    assert_eq!(
        spew_dump(&cp, MemoryCandidate::V1).unwrap(),
        "(*state.MemoryManagerCheckpoint){PolicyName:(string)static MachineState:(state.NUMANodeMap)map[0:<*>{NumberOfAssignments:(int)0 MemoryMap:(map[v1.ResourceName]*state.MemoryTable)map[memory:<*>{TotalMemSize:(uint64)2048 SystemReserved:(uint64)512 Allocatable:(uint64)1536 Reserved:(uint64)512 Free:(uint64)1024}] Cells:([]int)[]}] Entries:(state.ContainerMemoryAssignments)map[pod:map[container1:[{NUMAAffinity:([]int)[0] Type:(v1.ResourceName)memory Size:(uint64)512}]]] Checksum:(checksum.Checksum)0}"
    );
    assert_eq!(matched(&cp), ("V1", "MemoryManagerCheckpoint"));
    assert_eq!(cp.layout(), "V1");
}

#[test]
fn v2_vector_matches_with_its_pod_entries() {
    let cp = parse(UPSTREAM_V2);
    assert!(
            spew_dump(&cp, MemoryCandidate::V2)
                .unwrap()
                .contains(" PodEntries:(state.PodMemoryAssignments)map[pod:{MemoryBlocks:([]state.Block)[{NUMAAffinity:([]int)[0] Type:(v1.ResourceName)memory Size:(uint64)512}]}] Checksum:")
        );
    assert_eq!(matched(&cp), ("V2", "MemoryManagerCheckpoint"));
    assert_eq!(cp.layout(), "V2");
    let state = cp.state().unwrap();
    assert_eq!(state.pod_assignments, vec![("pod".to_string(), vec![block(512)])]);
}

#[test]
fn v1_named_rendering_of_1_36_development_builds_matches() {
    // The same content hashed as `(*state.MemoryManagerCheckpointV1)`.
    let text = UPSTREAM_V1.replace("4215593881", "2267633148");
    assert_eq!(matched(&parse(&text)), ("V1", "MemoryManagerCheckpointV1"));
}

#[test]
fn wrong_checksums_of_the_upstream_tests_are_rejected() {
    // "Restore checkpoint with invalid checksum": also an unknown key (`affinity`).
    let text = UPSTREAM_V1
        .replace("\"numaAffinity\"", "\"affinity\"")
        .replace("4215593881", "101010");
    match parse(&text).verify() {
        Verification::Mismatch { stored, computed } => {
            assert_eq!(stored, 101_010);
            assert_eq!(computed.len(), 3);
        }
        other => panic!("{other:?}"),
    }
    assert!(!parse(&UPSTREAM_V2.replace("1278640530", "101010")).verify().accepted());
    assert!(!parse(&UPSTREAM_V3.replace("1849615440", "1234")).verify().accepted());
}

#[test]
fn checksum_zero_is_unverified_v1_with_or_without_pod_entries() {
    for text in [
        UPSTREAM_V1.replace("4215593881", "0"),
        UPSTREAM_V2.replace("1278640530", "0"),
    ] {
        assert_eq!(parse(&text).verify(), Verification::Unverified { layout: "V1" });
    }
}

#[test]
fn v3_uses_the_payload_and_its_data_checksum() {
    let cp = parse(UPSTREAM_V3);
    assert_eq!(cp.layout(), "V3");
    assert_eq!(
        cp.verify(),
        Verification::Matched {
            layout: "V3",
            type_name: "string",
            v4: true
        }
    );
    let state = cp.state().unwrap();
    assert_eq!(state.policy_name, "static");
    assert_eq!(state.assignments.len(), 1);
    assert_eq!(state.assignments[0].container, "container1");
    assert_eq!(state.assignments[0].blocks, vec![block(512)]);
    assert_eq!(state.numa_nodes[0].resources[0].free, 1024);
    assert!(state.pod_assignments.is_empty());

    let cp = parse(UPSTREAM_V3_PODS);
    assert!(cp.verify().accepted());
    // The outer `podEntries` (podY) is not part of V3; the payload's (pod) is.
    assert_eq!(
        cp.state().unwrap().pod_assignments,
        vec![("pod".to_string(), vec![block(512)])]
    );

    assert!(parse(UPSTREAM_V3_UNKNOWN_FIELD).verify().accepted());
}

#[test]
fn broken_v3_payloads_are_refused() {
    // "Fail to restore checkpoint with invalid data JSON" and "... without data section".
    let bad_json = UPSTREAM_V3.replace(r#""data": "{\"policyName"#, r#""data": "{", "x": "{\"policyName"#);
    assert_eq!(field_of(&bad_json), "data");
    let no_data = r#"{"policyName":"static","checksum":4215593881,"dataChecksum":1234}"#;
    assert_eq!(field_of(no_data), "data");
    let payload_type = r#"{"data":"{\"machineState\":{\"0\":{\"cells\":[-1.5]}}}","dataChecksum":1}"#;
    assert_eq!(field_of(payload_type), r#"data.machineState["0"].cells[0]"#);
    assert_eq!(field_of(r#"{"data":"[1]","dataChecksum":1}"#), "data");
    // A V3 file's data must be a string, its dataChecksum a uint64.
    assert_eq!(field_of(r#"{"data":5,"dataChecksum":7}"#), "data");
    assert_eq!(field_of(r#"{"data":"{}","dataChecksum":-7}"#), "dataChecksum");
}

#[test]
fn not_v3_when_data_is_empty_and_data_checksum_zero() {
    // 1.37 falls back to V2 and V1, which have neither field.
    for extra in [
        r#""data":"""#,
        r#""data":5"#,
        r#""data":null,"dataChecksum":0"#,
        r#""dataChecksum":"x""#,
    ] {
        let text = UPSTREAM_V1.replace("\"checksum\"", &format!("{extra}, \"checksum\""));
        let cp = parse(&text);
        assert_eq!(cp.layout(), "V1", "{extra}");
        assert_eq!(matched(&cp), ("V1", "MemoryManagerCheckpoint"), "{extra}");
    }
    // `"data":"null"` is a V3 payload that decodes to nothing.
    let data = "null";
    let text = format!(
        r#"{{"data":"{data}","dataChecksum":{}}}"#,
        crate::checkpoint::checksum::data_checksum(data)
    );
    let cp = parse(&text);
    assert!(cp.verify().accepted());
    assert_eq!(cp.state().unwrap(), MemoryState::default());
}

#[test]
fn nil_and_empty_render_apart() {
    let cases = [
        (
            r#"{"policyName":"None","machineState":{},"checksum":0}"#,
            "MachineState:(state.NUMANodeMap)map[] Entries:(state.ContainerMemoryAssignments)map[] ",
        ),
        (
            r#"{"machineState":null,"entries":null}"#,
            "MachineState:(state.NUMANodeMap)<nil> Entries:(state.ContainerMemoryAssignments)<nil> ",
        ),
        (r#"{"machineState":{"0":null}}"#, "map[0:<nil>]"),
        (
            r#"{"machineState":{"0":{}}}"#,
            "map[0:<*>{NumberOfAssignments:(int)0 MemoryMap:(map[v1.ResourceName]*state.MemoryTable)<nil> Cells:([]int)<nil>}]",
        ),
        (
            r#"{"machineState":{"0":{"memoryMap":{},"cells":[]}}}"#,
            "MemoryMap:(map[v1.ResourceName]*state.MemoryTable)map[] Cells:([]int)[]}",
        ),
        (
            r#"{"machineState":{"0":{"memoryMap":{"memory":null},"cells":[0,1]}}}"#,
            // The nil table is the map's last value: go-spew prints `Cells` without its type.
            "map[memory:<nil>] Cells:[0 1]}",
        ),
        (
            r#"{"entries":{"p":null,"q":{},"r":{"c":null,"d":[]}}}"#,
            "map[p:<nil> q:map[] r:map[c:<nil> d:[]]]",
        ),
        (
            r#"{"entries":{"p":{"c":[{},null]}}}"#,
            "map[p:map[c:[{NUMAAffinity:([]int)<nil> Type:(v1.ResourceName) Size:(uint64)0} {NUMAAffinity:([]int)<nil> Type:(v1.ResourceName) Size:(uint64)0}]]]",
        ),
    ];
    for (text, part) in cases {
        let dump = spew_dump(&parse(text), MemoryCandidate::V1).unwrap();
        assert!(dump.contains(part), "{text}\n{dump}");
    }
    let pods = [
        (
            r#"{"podEntries":null}"#,
            "PodEntries:(state.PodMemoryAssignments)<nil> ",
        ),
        (r#"{}"#, "PodEntries:(state.PodMemoryAssignments)map[] "),
        (
            r#"{"podEntries":{"a":null,"b":{},"c":{"memoryBlocks":[]}}}"#,
            "map[a:{MemoryBlocks:([]state.Block)<nil>} b:{MemoryBlocks:([]state.Block)<nil>} c:{MemoryBlocks:([]state.Block)[]}]",
        ),
    ];
    for (text, part) in pods {
        let dump = spew_dump(&parse(text), MemoryCandidate::V2).unwrap();
        assert!(dump.contains(part), "{text}\n{dump}");
    }
    // As a 1.35 kubelet writes a node with the None policy.
    let none = r#"{"policyName":"None","machineState":{},"checksum":4236770233}"#;
    assert_eq!(matched(&parse(none)), ("V1", "MemoryManagerCheckpoint"));
}

/// Known answers for `null` NUMA nodes and memory tables, derived by hand from go-spew's
/// `format.go` (see `managers::gospew`): a nil pointer as the last value of its map leaves
/// the next field without its `(type)`; anywhere else it changes nothing. Each checksum is the
/// FNV-1a 32 of the string beside it, computed outside this code.
const NIL_POINTER_VECTORS: [(&str, &str, &str, u32); 6] = [
    (
        "the smallest case: a nil node last, Entries untyped",
        r#"{"policyName":"","machineState":{"0":null}}"#,
        "(*state.MemoryManagerCheckpoint){PolicyName:(string) MachineState:(state.NUMANodeMap)map[0:<nil>] Entries:map[] Checksum:(checksum.Checksum)0}",
        886_686_798,
    ),
    (
        "the None policy's file with a nil node last (the end-to-end test's file)",
        r#"{"policyName":"None","machineState":{"0":{},"1":null}}"#,
        "(*state.MemoryManagerCheckpoint){PolicyName:(string)None MachineState:(state.NUMANodeMap)map[0:<*>{NumberOfAssignments:(int)0 MemoryMap:(map[v1.ResourceName]*state.MemoryTable)<nil> Cells:([]int)<nil>} 1:<nil>] Entries:map[] Checksum:(checksum.Checksum)0}",
        585_895_370,
    ),
    (
        "a nil node before another: the next key sets the flag again",
        r#"{"policyName":"None","machineState":{"0":null,"1":{}}}"#,
        "(*state.MemoryManagerCheckpoint){PolicyName:(string)None MachineState:(state.NUMANodeMap)map[0:<nil> 1:<*>{NumberOfAssignments:(int)0 MemoryMap:(map[v1.ResourceName]*state.MemoryTable)<nil> Cells:([]int)<nil>}] Entries:(state.ContainerMemoryAssignments)map[] Checksum:(checksum.Checksum)0}",
        1_155_174_600,
    ),
    (
        "nested: a nil table last in node 0 (Cells untyped), a nil node last (Entries untyped)",
        r#"{"policyName":"Static","machineState":{"0":{"numberOfAssignments":1,"memoryMap":{"hugepages-1Gi":{"total":0},"memory":null},"cells":[0,1]},"1":null},"entries":{"p":{"c":[{"numaAffinity":[0],"type":"memory","size":512}]}}}"#,
        "(*state.MemoryManagerCheckpoint){PolicyName:(string)Static MachineState:(state.NUMANodeMap)map[0:<*>{NumberOfAssignments:(int)1 MemoryMap:(map[v1.ResourceName]*state.MemoryTable)map[hugepages-1Gi:<*>{TotalMemSize:(uint64)0 SystemReserved:(uint64)0 Allocatable:(uint64)0 Reserved:(uint64)0 Free:(uint64)0} memory:<nil>] Cells:[0 1]} 1:<nil>] Entries:map[p:map[c:[{NUMAAffinity:([]int)[0] Type:(v1.ResourceName)memory Size:(uint64)512}]]] Checksum:(checksum.Checksum)0}",
        3_897_542_761,
    ),
    (
        "a nil table sorted before the last one: Cells keeps its type",
        r#"{"policyName":"Static","machineState":{"0":{"memoryMap":{"memory":{"total":2048,"allocatable":2048,"free":2048},"hugepages-2Mi":null},"cells":[0]}}}"#,
        "(*state.MemoryManagerCheckpoint){PolicyName:(string)Static MachineState:(state.NUMANodeMap)map[0:<*>{NumberOfAssignments:(int)0 MemoryMap:(map[v1.ResourceName]*state.MemoryTable)map[hugepages-2Mi:<nil> memory:<*>{TotalMemSize:(uint64)2048 SystemReserved:(uint64)0 Allocatable:(uint64)2048 Reserved:(uint64)0 Free:(uint64)2048}] Cells:([]int)[0]}] Entries:(state.ContainerMemoryAssignments)map[] Checksum:(checksum.Checksum)0}",
        349_477_202,
    ),
    (
        "V2: a nil Entries after a nil node last prints `<nil>` untyped and clears the flag",
        r#"{"policyName":"Static","machineState":{"0":null},"entries":null,"podEntries":{}}"#,
        "(*state.MemoryManagerCheckpoint){PolicyName:(string)Static MachineState:(state.NUMANodeMap)map[0:<nil>] Entries:<nil> PodEntries:(state.PodMemoryAssignments)map[] Checksum:(checksum.Checksum)0}",
        28_015_666,
    ),
];

#[test]
fn a_nil_pointer_last_in_its_map_takes_the_next_fields_type_away() {
    for (case, text, rendered, sum) in NIL_POINTER_VECTORS {
        assert_eq!(
            crate::checkpoint::checksum::fnv1a32(rendered.as_bytes()),
            sum,
            "{case}: the vector itself"
        );
        let cp = parse(text);
        let candidate = if cp.layout() == "V2" {
            MemoryCandidate::V2
        } else {
            MemoryCandidate::V1
        };
        assert_eq!(spew_dump(&cp, candidate).as_deref(), Some(rendered), "{case}");
        assert_eq!(checksum(&cp, candidate), Some(sum), "{case}");
        // The file signed as the kubelet signs it verifies, in the layout it was written in.
        let signed = format!("{},\"checksum\":{sum}}}", text.strip_suffix('}').unwrap());
        assert_eq!(
            matched(&parse(&signed)),
            (candidate.layout(), "MemoryManagerCheckpoint"),
            "{case}"
        );
    }
}

#[test]
fn keys_sort_as_go_spew_sorts_them() {
    let text = r#"{"machineState":{"10":{"memoryMap":{"memory":{},"hugepages-2Mi":{},"hugepages-1Gi":{}}},"2":{},"-1":{}},
            "entries":{"b":{"z":[],"a":[]},"B":{}}}"#;
    let dump = spew_dump(&parse(text), MemoryCandidate::V1).unwrap();
    let order = [
        "-1:<*>",
        "2:<*>",
        "10:<*>",
        "hugepages-1Gi:",
        "hugepages-2Mi:",
        "memory:",
        "B:map[]",
        "b:map[a:[] z:[]]",
    ];
    let at: Vec<usize> = order
        .iter()
        .map(|s| dump.find(s).unwrap_or_else(|| panic!("{s}: {dump}")))
        .collect();
    assert!(at.windows(2).all(|w| w[0] < w[1]), "{dump}");
    let state = parse(text).state().unwrap();
    assert_eq!(
        state.numa_nodes.iter().map(|n| n.id).collect::<Vec<_>>(),
        vec![-1, 2, 10]
    );
    let resources: Vec<_> = state.numa_nodes[2]
        .resources
        .iter()
        .map(|r| r.resource.as_str())
        .collect();
    assert_eq!(resources, vec!["hugepages-1Gi", "hugepages-2Mi", "memory"]);
}

#[test]
fn numbers_go_would_refuse_name_their_field() {
    let cases = [
        (
            r#"{"entries":{"p":{"c":[{"size":-1}]}}}"#,
            r#"entries["p"]["c"][0].size"#,
        ),
        (
            r#"{"entries":{"p":{"c":[{"size":1.5}]}}}"#,
            r#"entries["p"]["c"][0].size"#,
        ),
        (
            r#"{"entries":{"p":{"c":[{"size":1e3}]}}}"#,
            r#"entries["p"]["c"][0].size"#,
        ),
        (
            r#"{"entries":{"p":{"c":[{"size":18446744073709551616}]}}}"#,
            r#"entries["p"]["c"][0].size"#,
        ),
        (
            r#"{"entries":{"p":{"c":[{"numaAffinity":[0,"1"]}]}}}"#,
            r#"entries["p"]["c"][0].numaAffinity[1]"#,
        ),
        (
            r#"{"machineState":{"0":{"numberOfAssignments":1.0}}}"#,
            r#"machineState["0"].numberOfAssignments"#,
        ),
        (
            r#"{"machineState":{"0":{"numberOfAssignments":9223372036854775808}}}"#,
            r#"machineState["0"].numberOfAssignments"#,
        ),
        (
            r#"{"machineState":{"0":{"memoryMap":{"memory":{"Free":-0}}}}}"#,
            r#"machineState["0"].memoryMap["memory"].free"#,
        ),
        (r#"{"machineState":{"x":{}}}"#, r#"machineState["x"]"#),
        (r#"{"machineState":{"1.0":{}}}"#, r#"machineState["1.0"]"#),
        (r#"{"machineState":[]}"#, "machineState"),
        (r#"{"checksum":-1}"#, "checksum"),
        (r#"{"policyName":1}"#, "policyName"),
        (r#"{"entries":{"p":{"c":{}}}}"#, r#"entries["p"]["c"]"#),
    ];
    for (text, field) in cases {
        assert_eq!(field_of(text), field, "{text}");
    }
    // What Go accepts: `-0` for an int, `+1` and `007` as int map keys, null anywhere.
    let cp = parse(r#"{"machineState":{"+1":{"cells":[-0,null]},"007":null},"checksum":null,"policyName":null}"#);
    let ids: Vec<_> = cp.machine_state.as_ref().unwrap().keys().copied().collect();
    assert_eq!(ids, vec![1, 7]);
    assert_eq!(
        cp.machine_state.as_ref().unwrap()[&1].as_ref().unwrap().cells,
        Some(vec![0, 0])
    );
}

#[test]
fn keys_fold_as_go_folds_them() {
    let text = "{\"PolicyName\":\"Static\",\"machine\u{17F}tate\":{\"0\":{\"NUMBEROFASSIGNMENTS\":2}},\
            \"entries\":{\"p\":{\"c\":[{\"\u{17F}ize\":5,\"TYPE\":\"memory\",\"numaAff\u{131}nity\":[1]}]}},\
            \"podEntries\":{\"p\":{\"memoryBloc\u{212A}s\":[{\"size\":7}]}}}";
    let state = parse(text).state().unwrap();
    assert_eq!(state.policy_name, "Static");
    assert_eq!(state.numa_nodes[0].assignments, 2);
    assert_eq!(
        state.assignments[0].blocks,
        vec![MemoryBlock {
            numa_nodes: vec![1],
            resource: "memory".into(),
            bytes: 5
        }]
    );
    assert_eq!(state.pod_assignments[0].1[0].bytes, 7);
    // Not a fold: a Unicode letter that only looks alike.
    assert_eq!(parse("{\"policyNam\u{435}\":\"x\"}").policy_name, "");
}

#[test]
fn repeated_keys_decode_into_the_same_field() {
    // Two objects for one map field merge; a repeated map key keeps its last value.
    let text = r#"{"machineState":{"0":{"numberOfAssignments":1},"0":{"numberOfAssignments":2}},
            "MachineState":{"1":{}},"policyName":"a","policyName":"b"}"#;
    let cp = parse(text);
    let nodes = cp.machine_state.as_ref().unwrap();
    assert_eq!(nodes.len(), 2);
    assert_eq!(nodes[&0].as_ref().unwrap().number_of_assignments, 2);
    assert_eq!(cp.policy_name, "b");
    // null after an object makes the map nil again.
    assert_eq!(parse(r#"{"entries":{"p":{}},"entries":null}"#).entries, None);
    // A repeated struct field decodes into the same struct.
    let cp = parse(r#"{"entries":{"p":{"c":[{"type":"memory","size":1,"Size":2}]}}}"#);
    assert_eq!(cp.state().unwrap().assignments[0].blocks[0].bytes, 2);
}

#[test]
fn pod_entries_the_v2_struct_cannot_decode_leave_a_v1_file() {
    let text = UPSTREAM_V1.replace(
        "\"checksum\"",
        r#""podEntries":{"p":{"memoryBlocks":[{"size":-1}]}}, "checksum""#,
    );
    let cp = parse(&text);
    assert!(matches!(
        cp.pod_entries,
        PodEntries::Invalid(CheckpointError::FieldType { .. })
    ));
    assert_eq!(spew_dump(&cp, MemoryCandidate::V2), None);
    assert_eq!(matched(&cp), ("V1", "MemoryManagerCheckpoint"));
    assert!(cp.state().unwrap().pod_assignments.is_empty());
}

#[test]
fn state_of_null_parts_is_empty_not_an_error() {
    let cp =
        parse(r#"{"machineState":{"0":null,"1":{"memoryMap":{"memory":null}}},"entries":{"p":null,"q":{"c":null}}}"#);
    let state = cp.state().unwrap();
    assert_eq!(state.numa_nodes.len(), 2);
    assert!(state.numa_nodes[0].resources.is_empty());
    assert_eq!(
        state.numa_nodes[1].resources[0],
        MemoryTable {
            resource: "memory".into(),
            ..MemoryTable::default()
        }
    );
    assert_eq!(
        state.assignments,
        vec![MemoryAssignment {
            pod_uid: "q".into(),
            container: "c".into(),
            blocks: vec![]
        }]
    );
}

#[test]
fn file_level_errors_match_the_cpu_reader() {
    assert_eq!(MemoryCheckpoint::parse(b" \n"), Err(CheckpointError::Empty));
    assert!(matches!(
        MemoryCheckpoint::parse(b"{"),
        Err(CheckpointError::Json { .. })
    ));
    assert_eq!(
        MemoryCheckpoint::parse(b"[]"),
        Err(CheckpointError::NotAnObject { found: "an array" })
    );
}

proptest! {
    #[test]
    fn arbitrary_input_never_panics(text in ".{0,200}") {
        if let Ok(cp) = MemoryCheckpoint::parse(text.as_bytes()) {
            let _ = cp.verify();
            let _ = cp.state();
        }
    }

    #[test]
    fn generated_files_parse_and_state_round_trips(
        nodes in proptest::collection::btree_map(-3i64..64, (0i64..9, 0u64..1 << 40, proptest::collection::vec(0i64..8, 0..4)), 0..4),
        blocks in proptest::collection::btree_map("[a-z0-9-]{1,12}", (0u64..u64::MAX, proptest::collection::vec(0i64..8, 0..3)), 0..4),
    ) {
        let machine: serde_json::Map<String, serde_json::Value> = nodes
            .iter()
            .map(|(id, (n, free, cells))| {
                (id.to_string(), serde_json::json!({"numberOfAssignments": n, "memoryMap": {"memory": {"total": free, "free": free}}, "cells": cells}))
            })
            .collect();
        let containers: serde_json::Map<String, serde_json::Value> = blocks
            .iter()
            .map(|(c, (size, aff))| (c.clone(), serde_json::json!([{"numaAffinity": aff, "type": "memory", "size": size}])))
            .collect();
        let text = serde_json::json!({"policyName": "Static", "machineState": machine, "entries": {"pod": containers}}).to_string();
        let state = MemoryCheckpoint::parse(text.as_bytes()).unwrap().state().unwrap();
        prop_assert_eq!(state.numa_nodes.len(), nodes.len());
        for (node, (id, (n, free, cells))) in state.numa_nodes.iter().zip(&nodes) {
            prop_assert_eq!((node.id, node.assignments, &node.cells), (*id, *n, cells));
            prop_assert_eq!(node.resources[0].free, *free);
        }
        prop_assert_eq!(state.assignments.len(), blocks.len());
        for (a, (c, (size, aff))) in state.assignments.iter().zip(&blocks) {
            prop_assert_eq!((&a.container, a.blocks[0].bytes, &a.blocks[0].numa_nodes), (c, *size, aff));
        }
    }
}
