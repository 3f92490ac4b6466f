use proptest::prelude::*;

use super::*;

/// Files written by real kubelets (1.20 or later, V2), quoted in public write-ups: a
/// single-board node whose GPU reports no topology (`-1`), a node with two NUMA nodes and
/// three GPUs (one or two containers, a device list in a kubelet's unsorted order, a
/// container holding GPUs on both nodes), and a node where no container holds a device.
/// No upstream test and no published file of the V1 layout exists (see `v1_*` below).
const KUBELET_FILES: &[&str] = &[
    r#"{"Data":{"PodDeviceEntries":[{"PodUID":"bf52b2cd-b611-4e79-86b1-280b283185c3","ContainerName":"check","ResourceName":"nvidia.com/gpu","DeviceIDs":{"-1":["tegra"]},"AllocResp":"Ch8KFk5WSURJQV9WSVNJQkxFX0RFVklDRVMSBXRlZ3Jh"}],"RegisteredDevices":{"nvidia.com/gpu":["tegra"]}},"Checksum":3660592824}"#,
    r#"{"Data":{"PodDeviceEntries":[{"PodUID":"9a15d2b5-c152-46b9-96e0-d57032629e1f","ContainerName":"app","ResourceName":"nvidia.com/gpu","DeviceIDs":{"1":["GPU-9b341c59-f96b-ba85-c137-78c3652fea65","GPU-c1e9f249-b37b-81c2-a8d9-ba5ca0294841"]},"AllocResp":"CmsKFk5WSURJQV9WSVNJQkxFX0RFVklDRVMSUUdQVS1jMWU5ZjI0OS1iMzdiLTgxYzItYThkOS1iYTVjYTAyOTQ4NDEsR1BVLTliMzQxYzU5LWY5NmItYmE4NS1jMTM3LTc4YzM2NTJmZWE2NRokCg4vZGV2L252aWRpYWN0bBIOL2Rldi9udmlkaWFjdGwaAnJ3GiYKDy9kZXYvbnZpZGlhLXV2bRIPL2Rldi9udmlkaWEtdXZtGgJydxoyChUvZGV2L252aWRpYS11dm0tdG9vbHMSFS9kZXYvbnZpZGlhLXV2bS10b29scxoCcncaLgoTL2Rldi9udmlkaWEtbW9kZXNldBITL2Rldi9udmlkaWEtbW9kZXNldBoCcncaIAoML2Rldi9udmlkaWExEgwvZGV2L252aWRpYTEaAnJ3GiAKDC9kZXYvbnZpZGlhMhIML2Rldi9udmlkaWEyGgJydw=="}],"RegisteredDevices":{"nvidia.com/gpu":["GPU-77a702db-e37f-3a74-d46d-c5713f66058c","GPU-9b341c59-f96b-ba85-c137-78c3652fea65","GPU-c1e9f249-b37b-81c2-a8d9-ba5ca0294841"]}},"Checksum":2530956716}"#,
    r#"{"Data":{"PodDeviceEntries":[{"PodUID":"513cb897-0262-4868-826f-aa943ee45a38","ContainerName":"app","ResourceName":"nvidia.com/gpu","DeviceIDs":{"0":["GPU-77a702db-e37f-3a74-d46d-c5713f66058c"]},"AllocResp":"CkIKFk5WSURJQV9WSVNJQkxFX0RFVklDRVMSKEdQVS03N2E3MDJkYi1lMzdmLTNhNzQtZDQ2ZC1jNTcxM2Y2NjA1OGMaJAoOL2Rldi9udmlkaWFjdGwSDi9kZXYvbnZpZGlhY3RsGgJydxomCg8vZGV2L252aWRpYS11dm0SDy9kZXYvbnZpZGlhLXV2bRoCcncaMgoVL2Rldi9udmlkaWEtdXZtLXRvb2xzEhUvZGV2L252aWRpYS11dm0tdG9vbHMaAnJ3Gi4KEy9kZXYvbnZpZGlhLW1vZGVzZXQSEy9kZXYvbnZpZGlhLW1vZGVzZXQaAnJ3GiAKDC9kZXYvbnZpZGlhMBIML2Rldi9udmlkaWEwGgJydw=="}],"RegisteredDevices":{"nvidia.com/gpu":["GPU-77a702db-e37f-3a74-d46d-c5713f66058c","GPU-9b341c59-f96b-ba85-c137-78c3652fea65","GPU-c1e9f249-b37b-81c2-a8d9-ba5ca0294841"]}},"Checksum":133412836}"#,
    r#"{"Data":{"PodDeviceEntries":[{"PodUID":"513cb897-0262-4868-826f-aa943ee45a38","ContainerName":"app","ResourceName":"nvidia.com/gpu","DeviceIDs":{"0":["GPU-77a702db-e37f-3a74-d46d-c5713f66058c"]},"AllocResp":"CkIKFk5WSURJQV9WSVNJQkxFX0RFVklDRVMSKEdQVS03N2E3MDJkYi1lMzdmLTNhNzQtZDQ2ZC1jNTcxM2Y2NjA1OGMaJAoOL2Rldi9udmlkaWFjdGwSDi9kZXYvbnZpZGlhY3RsGgJydxomCg8vZGV2L252aWRpYS11dm0SDy9kZXYvbnZpZGlhLXV2bRoCcncaMgoVL2Rldi9udmlkaWEtdXZtLXRvb2xzEhUvZGV2L252aWRpYS11dm0tdG9vbHMaAnJ3Gi4KEy9kZXYvbnZpZGlhLW1vZGVzZXQSEy9kZXYvbnZpZGlhLW1vZGVzZXQaAnJ3GiAKDC9kZXYvbnZpZGlhMBIML2Rldi9udmlkaWEwGgJydw=="},{"PodUID":"f22736b4-45a9-4852-8fdd-feb948918597","ContainerName":"app","ResourceName":"nvidia.com/gpu","DeviceIDs":{"1":["GPU-9b341c59-f96b-ba85-c137-78c3652fea65"]},"AllocResp":"CkIKFk5WSURJQV9WSVNJQkxFX0RFVklDRVMSKEdQVS05YjM0MWM1OS1mOTZiLWJhODUtYzEzNy03OGMzNjUyZmVhNjUaJAoOL2Rldi9udmlkaWFjdGwSDi9kZXYvbnZpZGlhY3RsGgJydxomCg8vZGV2L252aWRpYS11dm0SDy9kZXYvbnZpZGlhLXV2bRoCcncaMgoVL2Rldi9udmlkaWEtdXZtLXRvb2xzEhUvZGV2L252aWRpYS11dm0tdG9vbHMaAnJ3Gi4KEy9kZXYvbnZpZGlhLW1vZGVzZXQSEy9kZXYvbnZpZGlhLW1vZGVzZXQaAnJ3GiAKDC9kZXYvbnZpZGlhMRIML2Rldi9udmlkaWExGgJydw=="}],"RegisteredDevices":{"nvidia.com/gpu":["GPU-c1e9f249-b37b-81c2-a8d9-ba5ca0294841","GPU-77a702db-e37f-3a74-d46d-c5713f66058c","GPU-9b341c59-f96b-ba85-c137-78c3652fea65"]}},"Checksum":3082069630}"#,
    r#"{"Data":{"PodDeviceEntries":[{"PodUID":"08b4a90a-534a-4fc6-90c3-b57ee777071d","ContainerName":"app","ResourceName":"nvidia.com/gpu","DeviceIDs":{"0":["GPU-77a702db-e37f-3a74-d46d-c5713f66058c"],"1":["GPU-9b341c59-f96b-ba85-c137-78c3652fea65"]},"AllocResp":"CmsKFk5WSURJQV9WSVNJQkxFX0RFVklDRVMSUUdQVS05YjM0MWM1OS1mOTZiLWJhODUtYzEzNy03OGMzNjUyZmVhNjUsR1BVLTc3YTcwMmRiLWUzN2YtM2E3NC1kNDZkLWM1NzEzZjY2MDU4YxokCg4vZGV2L252aWRpYWN0bBIOL2Rldi9udmlkaWFjdGwaAnJ3GiYKDy9kZXYvbnZpZGlhLXV2bRIPL2Rldi9udmlkaWEtdXZtGgJydxoyChUvZGV2L252aWRpYS11dm0tdG9vbHMSFS9kZXYvbnZpZGlhLXV2bS10b29scxoCcncaLgoTL2Rldi9udmlkaWEtbW9kZXNldBITL2Rldi9udmlkaWEtbW9kZXNldBoCcncaIAoML2Rldi9udmlkaWEwEgwvZGV2L252aWRpYTAaAnJ3GiAKDC9kZXYvbnZpZGlhMRIML2Rldi9udmlkaWExGgJydw=="},{"PodUID":"f21fe02b-e6e2-4d04-9a4a-9e57367fa324","ContainerName":"app","ResourceName":"nvidia.com/gpu","DeviceIDs":{"1":["GPU-c1e9f249-b37b-81c2-a8d9-ba5ca0294841"]},"AllocResp":"CkIKFk5WSURJQV9WSVNJQkxFX0RFVklDRVMSKEdQVS1jMWU5ZjI0OS1iMzdiLTgxYzItYThkOS1iYTVjYTAyOTQ4NDEaJAoOL2Rldi9udmlkaWFjdGwSDi9kZXYvbnZpZGlhY3RsGgJydxomCg8vZGV2L252aWRpYS11dm0SDy9kZXYvbnZpZGlhLXV2bRoCcncaMgoVL2Rldi9udmlkaWEtdXZtLXRvb2xzEhUvZGV2L252aWRpYS11dm0tdG9vbHMaAnJ3Gi4KEy9kZXYvbnZpZGlhLW1vZGVzZXQSEy9kZXYvbnZpZGlhLW1vZGVzZXQaAnJ3GiAKDC9kZXYvbnZpZGlhMhIML2Rldi9udmlkaWEyGgJydw=="}],"RegisteredDevices":{"nvidia.com/gpu":["GPU-77a702db-e37f-3a74-d46d-c5713f66058c","GPU-9b341c59-f96b-ba85-c137-78c3652fea65","GPU-c1e9f249-b37b-81c2-a8d9-ba5ca0294841"]}},"Checksum":3342579237}"#,
    r#"{"Data":{"PodDeviceEntries":null,"RegisteredDevices":{"nvidia.com/gpu":["GPU-0650a168-e770-3ea8-8ac3-8a1d419763e0"]}},"Checksum":3952659280}"#,
];

fn parse(text: &str) -> DeviceCheckpoint {
    DeviceCheckpoint::parse(text.as_bytes()).unwrap_or_else(|e| panic!("{text}: {e}"))
}

fn error(text: &str) -> String {
    DeviceCheckpoint::parse(text.as_bytes()).expect_err(text).to_string()
}

fn dump(text: &str, layout: Layout) -> String {
    parse(text).spew_dump(layout).unwrap()
}

const MATCHED_V2: Verification = Verification::Matched {
    layout: "V2",
    type_name: "checkpointData",
    v4: false,
};

#[test]
fn every_kubelet_file_verifies_as_v2() {
    for file in KUBELET_FILES {
        assert_eq!(parse(file).verify(), MATCHED_V2, "{file}");
    }
}

#[test]
fn the_rendering_is_byte_for_byte_what_the_kubelet_hashes() {
    let dump = dump(KUBELET_FILES[0], Layout::V2);
    assert_eq!(
        dump,
        "(checkpoint.checkpointData){PodDeviceEntries:([]checkpoint.PodDevicesEntry)[{PodUID:(string)bf52b2cd-b611-4e79-86b1-280b283185c3 \
             ContainerName:(string)check ResourceName:(string)nvidia.com/gpu DeviceIDs:(checkpoint.DevicesPerNUMA)map[-1:[tegra]] \
             AllocResp:([]uint8)[10 31 10 22 78 86 73 68 73 65 95 86 73 83 73 66 76 69 95 68 69 86 73 67 69 83 18 5 116 101 103 114 97]}] \
             RegisteredDevices:(map[string][]string)map[nvidia.com/gpu:[tegra]]}"
    );
    assert_eq!(fnv1a32(dump.as_bytes()), 3_660_592_824);
}

#[test]
fn tampered_copies_fail() {
    for file in KUBELET_FILES {
        let tampered = [
            file.replacen("\"Checksum\":", "\"Checksum\":1", 1),
            file.replacen("GPU-77a7", "GPU-77a8", 1),
            file.replacen("bf52b2cd", "bf52b2ce", 1),
            file.replacen("\"-1\":", "\"-2\":", 1),
            file.replacen("\"1\":[", "\"2\":[", 1),
            // One base64 symbol in the middle: one decoded byte changes.
            file.replacen("SURJQV9W", "SURJQV8W", 1),
            file.replacen("\"nvidia.com/gpu\":[", "\"nvidia.com/gpu\":[\"x\",", 1),
            file.replacen("\"PodDeviceEntries\":null", "\"PodDeviceEntries\":[]", 1),
            file.replacen("\"ContainerName\":\"app\"", "\"ContainerName\":\"app2\"", 1),
        ];
        for t in tampered.iter().filter(|t| t != file) {
            let verdict = parse(t).verify();
            assert!(!verdict.accepted(), "tampered copy verified: {t}");
        }
    }
}

#[test]
fn a_zero_or_wrong_checksum_is_refused_and_the_hashes_tried_are_listed() {
    // A file with per-NUMA device IDs has no V1 rendering, so only V2 is tried.
    let zero = KUBELET_FILES[0].replace("3660592824", "0");
    assert_eq!(
        parse(&zero).verify(),
        Verification::Mismatch {
            stored: 0,
            computed: vec![("V2 as checkpointData".to_string(), 3_660_592_824)],
        }
    );
    // No entries: both layouts render alike; V2 is tried (and reported) first.
    let empty = parse(KUBELET_FILES[5]);
    assert_eq!(empty.spew_dump(Layout::V1), empty.spew_dump(Layout::V2));
    assert_eq!(empty.verify(), MATCHED_V2);
    let wrong = KUBELET_FILES[5].replace("3952659280", "3952659281");
    assert_eq!(
        parse(&wrong).verify(),
        Verification::Mismatch {
            stored: 3_952_659_281,
            computed: vec![
                ("V2 as checkpointData".to_string(), 3_952_659_280),
                ("V1 as checkpointData".to_string(), 3_952_659_280),
            ],
        }
    );
}

#[test]
fn state_keeps_file_order_and_numa_nodes() {
    let state = parse(KUBELET_FILES[4]).state().unwrap();
    assert_eq!(state.layout, "V2");
    let summary: Vec<_> = state
        .entries
        .iter()
        .map(|e| {
            (
                &e.pod_uid[..8],
                e.container.as_str(),
                e.resource.as_str(),
                e.alloc_resp_bytes,
            )
        })
        .collect();
    assert_eq!(
        summary,
        [
            ("08b4a90a", "app", "nvidia.com/gpu", 355),
            ("f21fe02b", "app", "nvidia.com/gpu", 280)
        ]
    );
    assert_eq!(
        state.entries[0].devices,
        [
            Device {
                id: "GPU-77a702db-e37f-3a74-d46d-c5713f66058c".into(),
                numa_node: Some(0)
            },
            Device {
                id: "GPU-9b341c59-f96b-ba85-c137-78c3652fea65".into(),
                numa_node: Some(1)
            },
        ]
    );
    assert_eq!(state.registered["nvidia.com/gpu"].len(), 3);
    // The kubelet's own (unsorted) order of a device list is kept.
    let state = parse(KUBELET_FILES[3]).state().unwrap();
    assert_eq!(
        state.registered["nvidia.com/gpu"][0],
        "GPU-c1e9f249-b37b-81c2-a8d9-ba5ca0294841"
    );
    let empty = parse(KUBELET_FILES[5]).state().unwrap();
    assert!(empty.entries.is_empty());
    assert_eq!(empty.registered.len(), 1);
}

#[test]
fn no_topology_is_none_in_the_state_and_minus_one_in_the_hash() {
    let cp = parse(KUBELET_FILES[0]);
    let state = cp.state().unwrap();
    assert_eq!(
        state.entries[0].devices,
        [Device {
            id: "tegra".into(),
            numa_node: None
        }]
    );
    assert_eq!(state.entries[0].alloc_resp_bytes, 33);
    assert!(cp.spew_dump(Layout::V2).unwrap().contains("map[-1:[tegra]]"));
}

#[test]
fn a_device_on_two_numa_nodes_is_listed_once_per_node() {
    let state = parse(r#"{"Data":{"PodDeviceEntries":[{"PodUID":"p","DeviceIDs":{"1":["d"],"0":["d","e"]}}]}}"#)
        .state()
        .unwrap();
    let devices: Vec<_> = state.entries[0]
        .devices
        .iter()
        .map(|d| (d.id.as_str(), d.numa_node))
        .collect();
    assert_eq!(devices, [("d", Some(0)), ("e", Some(0)), ("d", Some(1))]);
}

/// V1 (before 1.20): no upstream vector exists, so the rendering is checked against
/// the rules of checkpointv1.go: the V1 type names, then the renaming.
const V1_FILE: &str = r#"{"Data":{"PodDeviceEntries":[{"PodUID":"pod1","ContainerName":"c1","ResourceName":"example.com/dev","DeviceIDs":["dev2","dev1"],"AllocResp":"CgA="}],"RegisteredDevices":{"example.com/dev":["dev1","dev2"]}},"Checksum":4026212169}"#;

#[test]
fn v1_renders_with_the_v1_types_renamed() {
    let cp = parse(V1_FILE);
    assert_eq!(cp.spew_dump(Layout::V2), None, "a flat list has no V2 rendering");
    assert_eq!(
        cp.spew_dump(Layout::V1).unwrap(),
        "(checkpoint.checkpointData){PodDeviceEntries:([]checkpoint.PodDevicesEntry)[{PodUID:(string)pod1 \
             ContainerName:(string)c1 ResourceName:(string)example.com/dev DeviceIDs:([]string)[dev2 dev1] \
             AllocResp:([]uint8)[10 0]}] RegisteredDevices:(map[string][]string)map[example.com/dev:[dev1 dev2]]}"
    );
    assert_eq!(
        cp.verify(),
        Verification::Matched {
            layout: "V1",
            type_name: "checkpointData",
            v4: false
        }
    );
    let state = cp.state().unwrap();
    assert_eq!(state.layout, "V1");
    let devices: Vec<_> = state.entries[0]
        .devices
        .iter()
        .map(|d| (d.id.as_str(), d.numa_node))
        .collect();
    assert_eq!(devices, [("dev2", None), ("dev1", None)]);
    assert_eq!(state.entries[0].alloc_resp_bytes, 2);
}

#[test]
fn v1_renaming_reaches_values_too() {
    // strings.Replace runs over the whole rendering, so a value holding the V1 type name
    // is renamed as well; only the first checkpointDataV1 is.
    let cp = parse(
        r#"{"Data":{"PodDeviceEntries":[{"PodUID":"PodDevicesEntryV1","ContainerName":"checkpointDataV1","DeviceIDs":[]}]}}"#,
    );
    let dump = cp.spew_dump(Layout::V1).unwrap();
    assert!(
        dump.contains("PodUID:(string)PodDevicesEntry ContainerName:(string)checkpointDataV1 "),
        "{dump}"
    );
}

#[test]
fn nil_empty_and_missing_render_as_go_holds_them() {
    let cases = [
        (r#"{"Data":{"PodDeviceEntries":null}}"#, "PodDevicesEntry)<nil> "),
        (r#"{"Data":{"PodDeviceEntries":[]}}"#, "PodDevicesEntry)[] "),
        // The kubelet decodes into empty (not nil) values: a missing key stays empty.
        (
            r#"{}"#,
            "PodDevicesEntry)[] RegisteredDevices:(map[string][]string)map[]}",
        ),
        (
            r#"{"Data":null}"#,
            "PodDevicesEntry)[] RegisteredDevices:(map[string][]string)map[]}",
        ),
        (r#"{"Data":{"RegisteredDevices":null}}"#, "(map[string][]string)<nil>}"),
        (r#"{"Data":{"RegisteredDevices":{"r":null}}}"#, "map[r:<nil>]}"),
        (r#"{"Data":{"RegisteredDevices":{"r":[]}}}"#, "map[r:[]]}"),
        (
            r#"{"Data":{"PodDeviceEntries":[{}]}}"#,
            "DevicesPerNUMA)<nil> AllocResp:([]uint8)<nil>}",
        ),
        (
            r#"{"Data":{"PodDeviceEntries":[null]}}"#,
            "[{PodUID:(string) ContainerName:(string) ResourceName:(string) ",
        ),
        (
            r#"{"Data":{"PodDeviceEntries":[{"DeviceIDs":{}}]}}"#,
            "DevicesPerNUMA)map[] ",
        ),
        (
            r#"{"Data":{"PodDeviceEntries":[{"DeviceIDs":{"0":null}}]}}"#,
            "DevicesPerNUMA)map[0:<nil>] ",
        ),
        (
            r#"{"Data":{"PodDeviceEntries":[{"AllocResp":""}]}}"#,
            "AllocResp:([]uint8)[]}",
        ),
        (
            r#"{"Data":{"PodDeviceEntries":[{"AllocResp":null}]}}"#,
            "AllocResp:([]uint8)<nil>}",
        ),
        (
            r#"{"Data":{"PodDeviceEntries":[{"AllocResp":[1,2,255]}]}}"#,
            "AllocResp:([]uint8)[1 2 255]}",
        ),
    ];
    for (file, want) in cases {
        let dump = dump(file, Layout::V2);
        assert!(dump.contains(want), "{file}: {dump}");
    }
}

#[test]
fn alloc_resp_is_decoded_as_go_decodes_base64() {
    let bytes = |file: &str| parse(file).entries.unwrap()[0].alloc_resp.clone().unwrap();
    // Stray low bits are ignored (not strict), line breaks anywhere are skipped.
    assert_eq!(bytes(r#"{"Data":{"PodDeviceEntries":[{"AllocResp":"AB=="}]}}"#), [0]);
    assert_eq!(
        bytes(r#"{"Data":{"PodDeviceEntries":[{"AllocResp":"AA\nA\r\nA"}]}}"#),
        [0, 0, 0]
    );
    assert_eq!(
        bytes(r#"{"Data":{"PodDeviceEntries":[{"AllocResp":"AAA=\n"}]}}"#),
        [0, 0]
    );
    assert_eq!(
        bytes(r#"{"Data":{"PodDeviceEntries":[{"AllocResp":"+/+/"}]}}"#),
        [0xfb, 0xff, 0xbf]
    );
    for bad in [
        "AAA", "A===", "AA=A", "AA==AA==", "AA-A", "AA_A", "AAAA=", "AAA=AAAA", " AAA",
    ] {
        let file = format!(
            r#"{{"Data":{{"PodDeviceEntries":[{{}},{{}},{{}},{{"AllocResp":{}}}]}}}}"#,
            serde_json::to_string(bad).unwrap()
        );
        let err = DeviceCheckpoint::parse(file.as_bytes()).unwrap_err();
        match err {
            CheckpointError::Value { field, reason } => {
                assert_eq!(field, "Data.PodDeviceEntries[3].AllocResp", "{bad}");
                assert!(
                    reason.starts_with("illegal base64 data at input byte "),
                    "{bad}: {reason}"
                );
            }
            other => panic!("{bad}: {other:?}"),
        }
    }
}

#[test]
fn numa_keys_are_read_as_strconv_reads_them() {
    let cp = parse(r#"{"Data":{"PodDeviceEntries":[{"DeviceIDs":{"+1":["a"],"007":["b"],"-0":["c"],"1":["d"]}}]}}"#);
    // "+1" and "1" are the same node: the later one wins.
    assert!(cp.spew_dump(Layout::V2).unwrap().contains("map[0:[c] 1:[d] 7:[b]]"));
    // Sorted as integers, not as text.
    let cp = parse(r#"{"Data":{"PodDeviceEntries":[{"DeviceIDs":{"10":["a"],"9":["b"],"-1":["c"]}}]}}"#);
    assert!(cp.spew_dump(Layout::V2).unwrap().contains("map[-1:[c] 9:[b] 10:[a]]"));
    for bad in ["x", "1.5", "", " 1", "0x1", "1_0", "9223372036854775808"] {
        let file = format!(r#"{{"Data":{{"PodDeviceEntries":[{{"DeviceIDs":{{"{bad}":[]}}}}]}}}}"#);
        assert_eq!(
            DeviceCheckpoint::parse(file.as_bytes()).unwrap_err(),
            CheckpointError::Value {
                field: format!("Data.PodDeviceEntries[0].DeviceIDs[{bad:?}]"),
                reason: "not a NUMA node id (a 64-bit decimal integer)".into()
            }
        );
    }
}

#[test]
fn keys_match_as_go_matches_them_and_boot_id_is_not_hashed() {
    let file = KUBELET_FILES[0]
        .replace("\"Data\"", "\"data\"")
        .replace("\"PodDeviceEntries\"", "\"PODDEVICEENTRIES\"")
        .replace("\"DeviceIDs\"", "\"deviceIds\"")
        // The Kelvin sign and the long s fold into k and s in Go.
        .replace("\"Checksum\"", "\"Chec\u{212A}\u{017F}um\"")
        .replace("\"ContainerName\"", "\"futureField\":[1,{}],\"ContainerName\"")
        .replacen('{', r#"{"BootID":"6c1f0c1e","#, 1);
    let cp = parse(&file);
    assert_eq!(cp.boot_id, "6c1f0c1e");
    assert_eq!(cp.verify(), MATCHED_V2, "{file}");
    // Near misses are not the field.
    let cp = parse(r#"{"Checksums":5,"Data_":{"PodDeviceEntries":null}}"#);
    assert_eq!(cp.checksum, 0);
    assert_eq!(cp.entries, Some(Vec::new()));
}

#[test]
fn a_field_spelled_twice_is_decoded_over_itself() {
    let cp = parse(
        r#"{"Data":{"PodDeviceEntries":[{"PodUID":"a","ContainerName":"c"}]},
                "data":{"RegisteredDevices":{"r":["x"]},"podDeviceEntries":[{"poduid":null,"ResourceName":"res"}]},
                "Checksum":7,"checksum":null}"#,
    );
    let entry = &cp.entries.as_ref().unwrap()[0];
    assert_eq!((entry.pod_uid.as_str(), entry.container_name.as_str()), ("a", "c"));
    assert_eq!(entry.resource_name, "res");
    assert_eq!(cp.registered.unwrap()["r"], Some(vec!["x".to_string()]));
    assert_eq!(cp.checksum, 7);
    // Per-NUMA maps merge; an identical duplicate key is collapsed by the parser (last wins).
    let cp = parse(
        r#"{"Data":{"PodDeviceEntries":[{"DeviceIDs":{"0":["a"]},"deviceids":{"1":["b"]},"PodUID":"x","PodUID":"y"}]}}"#,
    );
    let entry = &cp.entries.unwrap()[0];
    assert_eq!(entry.pod_uid, "y");
    assert_eq!(
        entry.device_ids,
        DeviceIds::ByNuma(BTreeMap::from([
            (0, Some(vec!["a".into()])),
            (1, Some(vec!["b".into()]))
        ]))
    );
}

#[test]
fn bad_input_names_the_field() {
    let cases: &[(&str, &str)] = &[
        ("", "file is empty"),
        ("[]", "top-level JSON value is an array, not an object"),
        (r#"{"Data":"#, "invalid JSON at line 1"),
        (r#"{"Data":[]}"#, "field Data: expected an object, found an array"),
        (
            r#"{"Checksum":-1}"#,
            "field Checksum: expected an unsigned 64-bit integer, found the number -1",
        ),
        (
            r#"{"Checksum":1.0}"#,
            "field Checksum: expected an unsigned 64-bit integer",
        ),
        (
            r#"{"Checksum":"1"}"#,
            "field Checksum: expected an unsigned integer, found a string",
        ),
        (r#"{"BootID":1}"#, "field BootID: expected a string, found a number"),
        (
            r#"{"Data":{"PodDeviceEntries":{}}}"#,
            "field Data.PodDeviceEntries: expected an array, found an object",
        ),
        (
            r#"{"Data":{"PodDeviceEntries":[{},"x"]}}"#,
            "field Data.PodDeviceEntries[1]: expected an object, found a string",
        ),
        (
            r#"{"Data":{"PodDeviceEntries":[{"PodUID":5}]}}"#,
            "field Data.PodDeviceEntries[0].PodUID: expected a string, found a number",
        ),
        (
            r#"{"Data":{"PodDeviceEntries":[{"containername":true}]}}"#,
            "field Data.PodDeviceEntries[0].ContainerName: expected a string, found a boolean",
        ),
        (
            r#"{"Data":{"PodDeviceEntries":[{"DeviceIDs":"d"}]}}"#,
            "field Data.PodDeviceEntries[0].DeviceIDs: expected an object of NUMA node -> device IDs (V2) or an array of device IDs (V1), found a string",
        ),
        (
            r#"{"Data":{"PodDeviceEntries":[{"DeviceIDs":{"0":["a",3]}}]}}"#,
            "field Data.PodDeviceEntries[0].DeviceIDs[\"0\"][1]: expected a string, found a number",
        ),
        (
            r#"{"Data":{"PodDeviceEntries":[{"DeviceIDs":{"0":"a"}}]}}"#,
            "field Data.PodDeviceEntries[0].DeviceIDs[\"0\"]: expected an array of strings, found a string",
        ),
        (
            r#"{"Data":{"PodDeviceEntries":[{"DeviceIDs":["a"]},{"DeviceIDs":null},{"DeviceIDs":{"0":["b"]}}]}}"#,
            "field Data.PodDeviceEntries[2].DeviceIDs: expected an array of device IDs, as in the earlier entries (V1), found an object",
        ),
        (
            r#"{"Data":{"PodDeviceEntries":[{"DeviceIDs":{"0":[]},"deviceids":["a"]}]}}"#,
            "field Data.PodDeviceEntries[0].DeviceIDs: expected an object of NUMA node -> device IDs (V2), found an array",
        ),
        (
            r#"{"Data":{"PodDeviceEntries":[{"AllocResp":7}]}}"#,
            "field Data.PodDeviceEntries[0].AllocResp: expected a base64 string, found a number",
        ),
        (
            r#"{"Data":{"PodDeviceEntries":[{"AllocResp":[1,256]}]}}"#,
            "field Data.PodDeviceEntries[0].AllocResp[1]: expected a byte (an integer from 0 to 255), found the number 256",
        ),
        (
            r#"{"Data":{"PodDeviceEntries":[{"AllocResp":[-1]}]}}"#,
            "field Data.PodDeviceEntries[0].AllocResp[0]: expected a byte",
        ),
        (
            r#"{"Data":{"PodDeviceEntries":[{"AllocResp":["1"]}]}}"#,
            "field Data.PodDeviceEntries[0].AllocResp[0]: expected a byte (an integer from 0 to 255), found a string",
        ),
        (
            r#"{"Data":{"RegisteredDevices":[]}}"#,
            "field Data.RegisteredDevices: expected an object, found an array",
        ),
        (
            r#"{"Data":{"RegisteredDevices":{"nvidia.com/gpu":["a",null,{}]}}}"#,
            "field Data.RegisteredDevices[\"nvidia.com/gpu\"][2]: expected a string, found an object",
        ),
    ];
    for (input, want) in cases {
        let err = error(input);
        assert!(err.contains(want), "{input}: {err}");
    }
}

#[test]
fn null_elements_read_as_go_zero_values() {
    let cp = parse(r#"{"Data":{"RegisteredDevices":{"r":["a",null]},"PodDeviceEntries":[{"AllocResp":[null,7]}]}}"#);
    assert_eq!(cp.registered.unwrap()["r"], Some(vec!["a".to_string(), String::new()]));
    assert_eq!(cp.entries.unwrap()[0].alloc_resp, Some(vec![0, 7]));
}

/// Test-only writer: the JSON a kubelet writes for a raw model, checksum included.
fn to_kubelet_json(cp: &DeviceCheckpoint) -> String {
    let entries = cp.entries.as_ref().map(|entries| {
        entries
            .iter()
            .map(|e| {
                let ids = match &e.device_ids {
                    DeviceIds::Nil => Value::Null,
                    DeviceIds::ByNuma(map) => Value::Object(
                        map.iter()
                            .map(|(k, v)| (k.to_string(), serde_json::to_value(v).unwrap()))
                            .collect(),
                    ),
                    DeviceIds::Flat(list) => serde_json::to_value(list).unwrap(),
                };
                serde_json::json!({
                    "PodUID": e.pod_uid, "ContainerName": e.container_name, "ResourceName": e.resource_name,
                    "DeviceIDs": ids, "AllocResp": e.alloc_resp.as_deref().map(base64),
                })
            })
            .collect::<Vec<_>>()
    });
    let sum = fnv1a32(cp.spew_dump(cp.layout()).unwrap().as_bytes());
    serde_json::json!({
        "Data": {"PodDeviceEntries": entries, "RegisteredDevices": cp.registered},
        "Checksum": sum,
    })
    .to_string()
}

fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let word = chunk
            .iter()
            .enumerate()
            .fold(0u32, |w, (i, &b)| w | (u32::from(b) << (16 - 8 * i)));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[((word >> (18 - 6 * i)) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

fn arb_checkpoint() -> impl Strategy<Value = DeviceCheckpoint> {
    let text = || "\\PC{0,10}";
    let list = || proptest::option::of(proptest::collection::vec(text(), 0..4));
    let ids = prop_oneof![
        Just(DeviceIds::Nil),
        proptest::collection::btree_map(-1i64..4, list(), 0..3).prop_map(DeviceIds::ByNuma),
    ];
    let entry = (
        text(),
        text(),
        text(),
        ids,
        proptest::option::of(proptest::collection::vec(any::<u8>(), 0..40)),
    )
        .prop_map(
            |(pod_uid, container_name, resource_name, device_ids, alloc_resp)| RawDeviceEntry {
                pod_uid,
                container_name,
                resource_name,
                device_ids,
                alloc_resp,
            },
        );
    (
        proptest::option::of(proptest::collection::vec(entry, 0..5)),
        proptest::option::of(proptest::collection::btree_map(text(), list(), 0..3)),
    )
        .prop_map(|(entries, registered)| DeviceCheckpoint {
            entries,
            registered,
            checksum: 0,
            boot_id: String::new(),
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1500, ..ProptestConfig::default() })]

    #[test]
    fn whatever_a_kubelet_writes_reads_back_and_verifies(cp in arb_checkpoint()) {
        let json = to_kubelet_json(&cp);
        let read = DeviceCheckpoint::parse(json.as_bytes()).unwrap();
        prop_assert_eq!(read.verify(), MATCHED_V2);
        prop_assert_eq!(&read.entries, &cp.entries);
        prop_assert_eq!(&read.registered, &cp.registered);
        let state = read.state().unwrap();
        prop_assert_eq!(state.entries.len(), cp.entries.as_ref().map_or(0, Vec::len));
    }

    #[test]
    fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
        if let Ok(cp) = DeviceCheckpoint::parse(&bytes) {
            let _ = cp.verify();
            let _ = cp.state();
        }
    }

    #[test]
    fn mutated_kubelet_files_never_panic(
        base in proptest::sample::select(KUBELET_FILES.to_vec()),
        edits in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..4),
        cut in any::<usize>(),
    ) {
        let mut bytes = base.as_bytes().to_vec();
        for (pos, byte) in edits {
            let p = pos % bytes.len();
            bytes[p] = byte;
        }
        bytes.truncate(cut % (bytes.len() + 1));
        if let Ok(cp) = DeviceCheckpoint::parse(&bytes) {
            let _ = cp.verify();
            let _ = cp.state();
        }
    }

    #[test]
    fn base64_never_panics_and_reads_what_is_written(bytes in proptest::collection::vec(any::<u8>(), 0..64), noise in "[A-Za-z0-9+/=\\n-]{0,12}") {
        prop_assert_eq!(go_std_base64(&base64(&bytes)).unwrap(), bytes);
        let _ = go_std_base64(&noise);
    }
}
