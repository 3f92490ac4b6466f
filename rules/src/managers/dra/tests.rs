use super::checksum::spew_dump;
use super::*;
use crate::checkpoint::checksum::fnv1a32;
use proptest::prelude::*;

const U1: &str = "067798be-454e-4be4-9047-1aa06aea63f7";
const U2: &str = "4cf8db2d-06c0-7d70-1a51-e59b25b2c16c";
const POD: &str = "139cdb46-f989-4f17-9561-ca10cfb509a6";

/// kubernetes/kubernetes `pkg/kubelet/cm/dra/state/state_checkpoint_test.go` (1.30 tree,
/// resource.k8s.io/v1alpha2): `ResourceHandles` with `StructuredData`.
const V130_SINGLE: &str = r#"{"version":"v1","entries":[{"DriverName":"test-driver.cdi.k8s.io","ClassName":"class-name","ClaimUID":"067798be-454e-4be4-9047-1aa06aea63f7","ClaimName":"example","Namespace":"default","PodUIDs":{"139cdb46-f989-4f17-9561-ca10cfb509a6":{}},"ResourceHandles":[{"driverName":"test-driver.cdi.k8s.io","data":"{\"a\": \"b\"}"}],"CDIDevices":{"test-driver.cdi.k8s.io":["example.com/example=cdi-example"]}}],"checksum":113577689}"#;
const V130_TWO_PLUGINS: &str = r#"{"version":"v1","entries":[{"DriverName":"meta-test-driver.cdi.k8s.io","ClassName":"class-name","ClaimUID":"067798be-454e-4be4-9047-1aa06aea63f7","ClaimName":"example","Namespace":"default","PodUIDs":{"139cdb46-f989-4f17-9561-ca10cfb509a6":{}},"ResourceHandles":[{"driverName":"test-driver-1.cdi.k8s.io","data":"{\"a\": \"b\"}"},{"driverName":"test-driver-2.cdi.k8s.io","data":"{\"c\": \"d\"}"}],"CDIDevices":{"test-driver-1.cdi.k8s.io":["example-1.com/example-1=cdi-example-1"],"test-driver-2.cdi.k8s.io":["example-2.com/example-2=cdi-example-2"]}}],"checksum":1466990255}"#;
const V130_TWO_CLAIMS: &str = r#"{"version":"v1","entries":[{"DriverName":"test-driver.cdi.k8s.io","ClassName":"class-name-1","ClaimUID":"067798be-454e-4be4-9047-1aa06aea63f7","ClaimName":"example-1","Namespace":"default","PodUIDs":{"139cdb46-f989-4f17-9561-ca10cfb509a6":{}},"ResourceHandles":[{"driverName":"test-driver.cdi.k8s.io","data":"{\"a\": \"b\"}"}],"CDIDevices":{"test-driver.cdi.k8s.io":["example.com/example=cdi-example-1"]}},{"DriverName":"test-driver.cdi.k8s.io","ClassName":"class-name-2","ClaimUID":"4cf8db2d-06c0-7d70-1a51-e59b25b2c16c","ClaimName":"example-2","Namespace":"default","PodUIDs":{"139cdb46-f989-4f17-9561-ca10cfb509a6":{}},"ResourceHandles":[{"driverName":"test-driver.cdi.k8s.io","data":"{\"c\": \"d\"}"}],"CDIDevices":{"test-driver.cdi.k8s.io":["example.com/example=cdi-example-2"]}}],"checksum":471181742}"#;
/// Same test file, `TestOldCheckpointRestore`: `"ResourceHandles":null` (1.28 to 1.30).
const V128_NULL_HANDLES: &str = r#"{"version":"v1","entries":[{"DriverName":"test-driver.cdi.k8s.io","ClassName":"class-name","ClaimUID":"067798be-454e-4be4-9047-1aa06aea63f7","ClaimName":"example","Namespace":"default","PodUIDs":{"139cdb46-f989-4f17-9561-ca10cfb509a6":{}},"ResourceHandles":null,"CDIDevices":{"test-driver.cdi.k8s.io":["example.com/example=cdi-example"]}}],"checksum":453625682}"#;
/// Same test: a 1.27 file, accepted by 1.28 to 1.30 through the fallback.
const V127: &str = r#"{"version":"v1","entries":[{"DriverName":"test-driver.cdi.k8s.io","ClassName":"class-name","ClaimUID":"067798be-454e-4be4-9047-1aa06aea63f7","ClaimName":"example","Namespace":"default","PodUIDs":{"139cdb46-f989-4f17-9561-ca10cfb509a6":{}},"CDIDevices":{"test-driver.cdi.k8s.io":["example.com/example=cdi-example"]}}],"checksum":153446146}"#;
/// Same file, "invalid checksum": upstream expects `checkpoint is corrupted`.
const CORRUPT_127: &str = r#"{"version":"v1","entries":[{"DriverName":"test-driver.cdi.k8s.io","ClassName":"class-name","ClaimUID":"067798be-454e-4be4-9047-1aa06aea63f7","ClaimName":"example","Namespace":"default","PodUIDs":{"139cdb46-f989-4f17-9561-ca10cfb509a6":{}},"CDIDevices":{"test-driver.cdi.k8s.io":["example.com/example=cdi-example"]}}],"checksum":1988120168}"#;

/// The same test file in a 1.31 development tree (`DriverState`, FNV over go-spew).
const DEV131_SINGLE: &str = r#"{"version":"v1","entries":[{"ClaimUID":"067798be-454e-4be4-9047-1aa06aea63f7","ClaimName":"example","Namespace":"default","PodUIDs":{"139cdb46-f989-4f17-9561-ca10cfb509a6":{}},"DriverState":{"test-driver.cdi.k8s.io":{"Devices":[{"PoolName":"worker-1","DeviceName":"dev-1","RequestNames":["test request"],"CDIDeviceIDs":["example.com/example=cdi-example"]}]}}}],"checksum":1925941526}"#;
const DEV131_TWO_DEVICES: &str = r#"{"version":"v1","entries":[{"ClaimUID":"067798be-454e-4be4-9047-1aa06aea63f7","ClaimName":"example","Namespace":"default","PodUIDs":{"139cdb46-f989-4f17-9561-ca10cfb509a6":{}},"DriverState":{"test-driver.cdi.k8s.io":{"Devices":[{"PoolName":"worker-1","DeviceName":"dev-1","RequestNames":["test request"],"CDIDeviceIDs":["example.com/example=cdi-example"]},{"PoolName":"worker-1","DeviceName":"dev-2","RequestNames":["test request2"],"CDIDeviceIDs":["example.com/example=cdi-example2"]}]}}}],"checksum":3560752542}"#;
const DEV131_TWO_CLAIMS: &str = r#"{"version":"v1","entries":[{"ClaimUID":"067798be-454e-4be4-9047-1aa06aea63f7","ClaimName":"example-1","Namespace":"default","PodUIDs":{"139cdb46-f989-4f17-9561-ca10cfb509a6":{}},"DriverState":{"test-driver.cdi.k8s.io":{"Devices":[{"PoolName":"worker-1","DeviceName":"dev-1","RequestNames":["test request"],"CDIDeviceIDs":["example.com/example=cdi-example"]}]}}},{"ClaimUID":"4cf8db2d-06c0-7d70-1a51-e59b25b2c16c","ClaimName":"example-2","Namespace":"default","PodUIDs":{"139cdb46-f989-4f17-9561-ca10cfb509a6":{}},"DriverState":{"test-driver.cdi.k8s.io":{"Devices":[{"PoolName":"worker-1","DeviceName":"dev-1","RequestNames":["test request"],"CDIDeviceIDs":["example.com/example=cdi-example"]}]}}}],"checksum":351581974}"#;
const DEV131_NULL_LISTS: &str = r#"{"version":"v1","entries":[{"ClaimUID":"067798be-454e-4be4-9047-1aa06aea63f7","ClaimName":"example-1","Namespace":"default","PodUIDs":{"139cdb46-f989-4f17-9561-ca10cfb509a6":{}},"DriverState":{"test-driver.cdi.k8s.io":{"Devices":[{"PoolName":"worker-1","DeviceName":"dev-1","RequestNames":["test request"],"CDIDeviceIDs":["example.com/example=cdi-example"]}]}}},{"ClaimUID":"4cf8db2d-06c0-7d70-1a51-e59b25b2c16c","ClaimName":"example-2","Namespace":"default","PodUIDs":{"139cdb46-f989-4f17-9561-ca10cfb509a6":{}},"DriverState":{"test-driver.cdi.k8s.io":{"Devices":[{"PoolName":"worker-1","DeviceName":"dev-2","RequestNames":null,"CDIDeviceIDs":null}]}}}],"checksum":1191151426}"#;

/// kubernetes/kubernetes `pkg/kubelet/cm/dra/state/checkpointer_test.go` (1.31 and later).
const V131_SINGLE: &str = r#"{"Data":"{\"kind\":\"DRACheckpoint\",\"apiVersion\":\"checkpoint.dra.kubelet.k8s.io/v1\",\"Entries\":[{\"ClaimUID\":\"067798be-454e-4be4-9047-1aa06aea63f7\",\"ClaimName\":\"example\",\"Namespace\":\"default\",\"PodUIDs\":{\"139cdb46-f989-4f17-9561-ca10cfb509a6\":{}},\"DriverState\":{\"test-driver.cdi.k8s.io\":{\"Devices\":[{\"PoolName\":\"worker-1\",\"DeviceName\":\"dev-1\",\"RequestNames\":[\"test request\"],\"CDIDeviceIDs\":[\"example.com/example=cdi-example\"]}]}}}]}","Checksum":1597924435}"#;
const V131_TWO_DEVICES: &str = r#"{"Data":"{\"kind\":\"DRACheckpoint\",\"apiVersion\":\"checkpoint.dra.kubelet.k8s.io/v1\",\"Entries\":[{\"ClaimUID\":\"067798be-454e-4be4-9047-1aa06aea63f7\",\"ClaimName\":\"example\",\"Namespace\":\"default\",\"PodUIDs\":{\"139cdb46-f989-4f17-9561-ca10cfb509a6\":{}},\"DriverState\":{\"test-driver.cdi.k8s.io\":{\"Devices\":[{\"PoolName\":\"worker-1\",\"DeviceName\":\"dev-1\",\"RequestNames\":[\"test request\"],\"CDIDeviceIDs\":[\"example.com/example=cdi-example\"]},{\"PoolName\":\"worker-1\",\"DeviceName\":\"dev-2\",\"RequestNames\":[\"test request\"],\"CDIDeviceIDs\":[\"example.com/example=cdi-example\"]}]}}}]}","Checksum":1812303514}"#;
const V131_TWO_CLAIMS: &str = r#"{"Data":"{\"kind\":\"DRACheckpoint\",\"apiVersion\":\"checkpoint.dra.kubelet.k8s.io/v1\",\"Entries\":[{\"ClaimUID\":\"067798be-454e-4be4-9047-1aa06aea63f7\",\"ClaimName\":\"example-1\",\"Namespace\":\"default\",\"PodUIDs\":{\"139cdb46-f989-4f17-9561-ca10cfb509a6\":{}},\"DriverState\":{\"test-driver.cdi.k8s.io\":{\"Devices\":[{\"PoolName\":\"worker-1\",\"DeviceName\":\"dev-1\",\"RequestNames\":[\"test request\"],\"CDIDeviceIDs\":[\"example.com/example=cdi-example\"]}]}}},{\"ClaimUID\":\"4cf8db2d-06c0-7d70-1a51-e59b25b2c16c\",\"ClaimName\":\"example-2\",\"Namespace\":\"default\",\"PodUIDs\":{\"139cdb46-f989-4f17-9561-ca10cfb509a6\":{}},\"DriverState\":{\"test-driver.cdi.k8s.io\":{\"Devices\":[{\"PoolName\":\"worker-1\",\"DeviceName\":\"dev-2\",\"RequestNames\":null,\"CDIDeviceIDs\":null}]}}}]}","Checksum":3633532417}"#;
/// Same test, "incorrect-checksum": upstream expects `checkpoint is corrupted`.
const V131_CORRUPT: &str = r#"{"Data":"{\"kind\":\"DRACheckpoint\",\"apiVersion\":\"checkpoint.dra.kubelet.k8s.io/v1\",\"Entries\":[{\"ClaimUID\":\"067798be-454e-4be4-9047-1aa06aea63f7\",\"ClaimName\":\"example-1\",\"Namespace\":\"default\",\"PodUIDs\":{\"139cdb46-f989-4f17-9561-ca10cfb509a6\":{}},\"DriverState\":{\"test-driver.cdi.k8s.io\":{\"Devices\":[{\"PoolName\":\"worker-1\",\"DeviceName\":\"dev-1\",\"RequestNames\":[\"test request\"],\"CDIDeviceIDs\":[\"example.com/example=cdi-example\"]}]}}},{\"ClaimUID\":\"4cf8db2d-06c0-7d70-1a51-e59b25b2c16c\",\"ClaimName\":\"example-2\",\"Namespace\":\"default\",\"PodUIDs\":{\"139cdb46-f989-4f17-9561-ca10cfb509a6\":{}},\"DriverState\":{\"test-driver.cdi.k8s.io\":{\"Devices\":[{\"PoolName\":\"worker-1\",\"DeviceName\":\"dev-2\",\"RequestNames\":null,\"CDIDeviceIDs\":null}]}}}]}","Checksum":2930258365}"#;
/// Another revision of that test file, whose list key is `ClaimInfoStateList`.
const V131_LIST_KEY: &str = r#"{"Data":"{\"kind\":\"DRACheckpoint\",\"apiVersion\":\"checkpoint.dra.kubelet.k8s.io/v1\",\"ClaimInfoStateList\":[{\"ClaimUID\":\"067798be-454e-4be4-9047-1aa06aea63f7\",\"ClaimName\":\"example\",\"Namespace\":\"default\",\"PodUIDs\":{\"139cdb46-f989-4f17-9561-ca10cfb509a6\":{}},\"DriverState\":{\"test-driver.cdi.k8s.io\":{\"Devices\":[{\"PoolName\":\"worker-1\",\"DeviceName\":\"dev-1\",\"RequestNames\":[\"test request\"],\"CDIDeviceIDs\":[\"example.com/example=cdi-example\"]}]}}}]}","Checksum":1656016162}"#;
const V131_LIST_KEY_TWO_CLAIMS: &str = r#"{"Data":"{\"kind\":\"DRACheckpoint\",\"apiVersion\":\"checkpoint.dra.kubelet.k8s.io/v1\",\"ClaimInfoStateList\":[{\"ClaimUID\":\"067798be-454e-4be4-9047-1aa06aea63f7\",\"ClaimName\":\"example-1\",\"Namespace\":\"default\",\"PodUIDs\":{\"139cdb46-f989-4f17-9561-ca10cfb509a6\":{}},\"DriverState\":{\"test-driver.cdi.k8s.io\":{\"Devices\":[{\"PoolName\":\"worker-1\",\"DeviceName\":\"dev-1\",\"RequestNames\":[\"test request\"],\"CDIDeviceIDs\":[\"example.com/example=cdi-example\"]}]}}},{\"ClaimUID\":\"4cf8db2d-06c0-7d70-1a51-e59b25b2c16c\",\"ClaimName\":\"example-2\",\"Namespace\":\"default\",\"PodUIDs\":{\"139cdb46-f989-4f17-9561-ca10cfb509a6\":{}},\"DriverState\":{\"test-driver.cdi.k8s.io\":{\"Devices\":[{\"PoolName\":\"worker-1\",\"DeviceName\":\"dev-2\",\"RequestNames\":null,\"CDIDeviceIDs\":null}]}}}]}","Checksum":1582256999}"#;

/// (file, layout, Go type name) of every upstream vector that must verify.
const UPSTREAM_VECTORS: &[(&str, &str, &str)] = &[
    (V130_SINGLE, "1.30", "DRAManagerCheckpoint"),
    (V130_TWO_PLUGINS, "1.30", "DRAManagerCheckpoint"),
    (V130_TWO_CLAIMS, "1.30", "DRAManagerCheckpoint"),
    (V128_NULL_HANDLES, "1.28", "DRAManagerCheckpoint"),
    (V127, "1.27", "DRAManagerCheckpoint"),
    (DEV131_SINGLE, "1.31-dev", "DRAManagerCheckpoint"),
    (DEV131_TWO_DEVICES, "1.31-dev", "DRAManagerCheckpoint"),
    (DEV131_TWO_CLAIMS, "1.31-dev", "DRAManagerCheckpoint"),
    (DEV131_NULL_LISTS, "1.31-dev", "DRAManagerCheckpoint"),
    (V131_SINGLE, "1.31", "Checkpoint"),
    (V131_TWO_DEVICES, "1.31", "Checkpoint"),
    (V131_TWO_CLAIMS, "1.31", "Checkpoint"),
    (V131_LIST_KEY, "1.31", "Checkpoint"),
    (V131_LIST_KEY_TWO_CLAIMS, "1.31", "Checkpoint"),
];

fn parse(text: &str) -> DraCheckpoint {
    DraCheckpoint::parse(text.as_bytes()).unwrap_or_else(|e| panic!("{text}: {e}"))
}

fn parse_err(text: &str) -> CheckpointError {
    match DraCheckpoint::parse(text.as_bytes()) {
        Ok(cp) => panic!("{text}: parsed as {cp:?}"),
        Err(e) => e,
    }
}

fn spew(text: &str) -> SpewBody {
    match parse(text).body {
        DraBody::Spew(body) => body,
        DraBody::Data(_) => panic!("{text}: read as the Data layout"),
    }
}

fn device(driver: &str, pool: &str, name: &str, requests: &[&str]) -> DraDevice {
    DraDevice {
        driver: driver.into(),
        pool: pool.into(),
        device: name.into(),
        requests: requests.iter().map(|r| r.to_string()).collect(),
    }
}

fn claim(uid: &str, name: &str, devices: Vec<DraDevice>) -> DraClaim {
    DraClaim {
        claim_uid: uid.into(),
        claim_name: name.into(),
        namespace: "default".into(),
        pod_uids: vec![POD.into()],
        devices,
    }
}

fn assert_field_type(err: CheckpointError, want: &str) {
    match err {
        CheckpointError::FieldType { field, .. } => assert_eq!(field, want),
        other => panic!("expected a type error at {want}, got {other:?}"),
    }
}

#[test]
fn crc32_matches_reference_values() {
    assert_eq!(crc32_ieee(b""), 0);
    assert_eq!(crc32_ieee(b"123456789"), 0xCBF4_3926);
    assert_eq!(crc32_ieee(b"a"), 0xE8B7_BE43);
}

#[test]
fn every_upstream_vector_verifies_with_its_layout() {
    for (text, layout, type_name) in UPSTREAM_VECTORS {
        match parse(text).verify() {
            Verification::Matched {
                layout: l,
                type_name: t,
                v4,
            } => assert_eq!((l, t, v4), (*layout, *type_name, false), "{text}"),
            other => panic!("{text}: {other:?}"),
        }
    }
}

#[test]
fn upstream_corrupt_vectors_are_refused() {
    for text in [CORRUPT_127, V131_CORRUPT] {
        assert!(!parse(text).verify().accepted(), "{text}");
    }
}

/// The file with the last digit of its stored checksum changed.
fn bump_checksum(text: &str) -> String {
    let end = text.rfind('}').unwrap_or(text.len());
    let mut bytes = text.as_bytes().to_vec();
    if let Some(d) = bytes.get_mut(end.saturating_sub(1)) {
        *d = if *d == b'9' { b'0' } else { *d + 1 };
    }
    String::from_utf8(bytes).unwrap()
}

#[test]
fn tampered_vectors_fail() {
    for (text, _, _) in UPSTREAM_VECTORS {
        let tampered = [
            text.replacen("example", "exbmple", 1),
            text.replacen("139cdb46", "139cdb47", 1),
            bump_checksum(text),
            text.replacen("default", "defaulu", 1),
        ];
        for t in tampered {
            assert_ne!(&t, text);
            let cp = DraCheckpoint::parse(t.as_bytes()).unwrap_or_else(|e| panic!("{t}: {e}"));
            assert!(!cp.verify().accepted(), "{t}");
        }
    }
}

#[test]
fn v130_dump_is_exactly_the_kubelet_string() {
    let dump = spew_dump(&spew(V130_SINGLE), Candidate::V130).unwrap();
    let want = format!(
        "(*state.DRAManagerCheckpoint){{Version:(string)v1 Entries:(state.ClaimInfoStateList)[{{DriverName:(string)test-driver.cdi.k8s.io ClassName:(string)class-name ClaimUID:(types.UID){U1} ClaimName:(string)example Namespace:(string)default PodUIDs:(sets.Set[string])map[{POD}:{{}}] ResourceHandles:([]v1alpha2.ResourceHandle)[{{DriverName:(string)test-driver.cdi.k8s.io Data:(string){{\"a\": \"b\"}} StructuredData:(*v1alpha2.StructuredResourceHandle)<nil>}}] CDIDevices:(map[string][]string)map[test-driver.cdi.k8s.io:[example.com/example=cdi-example]]}}] Checksum:(checksum.Checksum)0}}"
    );
    assert_eq!(dump, want);
    assert_eq!(fnv1a32(dump.as_bytes()), 113_577_689);
}

#[test]
fn dev131_dump_is_exactly_the_kubelet_string() {
    let dump = spew_dump(&spew(DEV131_NULL_LISTS), Candidate::V131Dev).unwrap();
    let want = format!(
        "(*state.DRAManagerCheckpoint){{Version:(string)v1 Entries:(state.ClaimInfoStateList)[{{ClaimUID:(types.UID){U1} ClaimName:(string)example-1 Namespace:(string)default PodUIDs:(sets.Set[string])map[{POD}:{{}}] DriverState:(map[string]state.DriverState)map[test-driver.cdi.k8s.io:{{Devices:([]state.Device)[{{PoolName:(string)worker-1 DeviceName:(string)dev-1 RequestNames:([]string)[test request] CDIDeviceIDs:([]string)[example.com/example=cdi-example]}}]}}]}} {{ClaimUID:(types.UID){U2} ClaimName:(string)example-2 Namespace:(string)default PodUIDs:(sets.Set[string])map[{POD}:{{}}] DriverState:(map[string]state.DriverState)map[test-driver.cdi.k8s.io:{{Devices:([]state.Device)[{{PoolName:(string)worker-1 DeviceName:(string)dev-2 RequestNames:([]string)<nil> CDIDeviceIDs:([]string)<nil>}}]}}]}}] Checksum:(checksum.Checksum)0}}"
    );
    assert_eq!(dump, want);
    assert_eq!(fnv1a32(dump.as_bytes()), 1_191_151_426);
}

#[test]
fn v128_handles_hash_without_structured_data() {
    // No upstream vector has non-null handles in a 1.28/1.29 tree: check the rendering.
    let dump = spew_dump(&spew(V130_SINGLE), Candidate::V128).unwrap();
    assert!(dump.contains(
            "ResourceHandles:([]v1alpha2.ResourceHandle)[{DriverName:(string)test-driver.cdi.k8s.io Data:(string){\"a\": \"b\"}}] CDIDevices:"
        ));
    // The 1.30 vector does not verify as 1.28, and vice versa for a rewritten checksum.
    let sum = fnv1a32(dump.as_bytes());
    let as_128 = V130_SINGLE.replace("113577689", &sum.to_string());
    match parse(&as_128).verify() {
        Verification::Matched { layout, .. } => assert_eq!(layout, "1.28"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn v127_fallback_fixes_version_and_entries() {
    let body = spew(r#"{"version":"v9","entries":null,"checksum":1}"#);
    let own = spew_dump(&body, Candidate::V127).unwrap();
    let fallback = spew_dump(&body, Candidate::V127Fallback).unwrap();
    assert!(
        own.starts_with("(*state.DRAManagerCheckpoint){Version:(string)v9 Entries:(state.ClaimInfoStateList)<nil>")
    );
    assert!(
        fallback.starts_with("(*state.DRAManagerCheckpoint){Version:(string)v1 Entries:(state.ClaimInfoStateList)[]")
    );
}

#[test]
fn structured_data_is_not_rendered() {
    let text = V130_SINGLE.replace(r#""data":"#, r#""structuredData":{"nodeName":"n"},"data":"#);
    let body = spew(&text);
    assert_eq!(spew_dump(&body, Candidate::V130), None);
    assert!(spew_dump(&body, Candidate::V128).is_some());
    assert_eq!(parse(&text).shape_layout(), "1.30");
}

#[test]
fn v131_reads_devices_with_pools_and_requests() {
    let state = parse(V131_TWO_CLAIMS).state().unwrap();
    assert_eq!(state.layout, "1.31");
    assert_eq!(
        state.claims,
        vec![
            claim(
                U1,
                "example-1",
                vec![device("test-driver.cdi.k8s.io", "worker-1", "dev-1", &["test request"])]
            ),
            claim(
                U2,
                "example-2",
                vec![device("test-driver.cdi.k8s.io", "worker-1", "dev-2", &[])]
            ),
        ]
    );
    let list_key = parse(V131_LIST_KEY).state().unwrap();
    assert_eq!(list_key.claims.len(), 1);
    assert_eq!(list_key.claims[0].devices[0].device, "dev-1");
}

#[test]
fn dev131_reads_devices() {
    let state = parse(DEV131_TWO_DEVICES).state().unwrap();
    assert_eq!(state.layout, "1.31-dev");
    assert_eq!(
        state.claims,
        vec![claim(
            U1,
            "example",
            vec![
                device("test-driver.cdi.k8s.io", "worker-1", "dev-1", &["test request"]),
                device("test-driver.cdi.k8s.io", "worker-1", "dev-2", &["test request2"]),
            ]
        )]
    );
}

#[test]
fn classic_layouts_read_devices_from_cdi_ids() {
    let state = parse(V130_TWO_PLUGINS).state().unwrap();
    assert_eq!(state.layout, "1.30");
    assert_eq!(
        state.claims,
        vec![claim(
            U1,
            "example",
            vec![
                device("test-driver-1.cdi.k8s.io", "", "cdi-example-1", &[]),
                device("test-driver-2.cdi.k8s.io", "", "cdi-example-2", &[]),
            ]
        )]
    );
    let old = parse(V127).state().unwrap();
    assert_eq!(old.layout, "1.27");
    assert_eq!(
        old.claims,
        vec![claim(
            U1,
            "example",
            vec![device("test-driver.cdi.k8s.io", "", "cdi-example", &[])]
        )]
    );
    let null = parse(V128_NULL_HANDLES).state().unwrap();
    assert_eq!(null.layout, "1.28");
}

#[test]
fn claims_are_sorted_by_uid() {
    let text = V130_TWO_CLAIMS
        .replace(U1, "ffff")
        .replace("checksum\":471181742", "checksum\":0");
    let state = parse(&text).state().unwrap();
    let uids: Vec<_> = state.claims.iter().map(|c| c.claim_uid.as_str()).collect();
    assert_eq!(uids, vec![U2, "ffff"]);
    // An unverified file is named by its shape.
    assert_eq!(state.layout, "1.28");
}

#[test]
fn files_without_data_key_and_empty_files() {
    // {} is what a 1.31+ kubelet keeps its default for: accepted, empty.
    let empty = parse("{}");
    assert!(matches!(empty.verify(), Verification::Matched { layout: "1.31", .. }));
    assert_eq!(empty.state().unwrap().claims, vec![]);
    // A 1.30 file read by a 1.31+ kubelet is corrupt to it, but verifies as 1.30 here.
    assert!(matches!(parse(V130_SINGLE).body, DraBody::Spew(_)));
    // An old file whose checksum is absent hashes against 0: refused.
    assert!(!parse(r#"{"version":"v1"}"#).verify().accepted());
    // Data without Checksum keeps the default CRC, so only the default data verifies.
    let default_only = format!("{{\"Data\":{}}}", serde_json::to_string(DEFAULT_DATA).unwrap());
    assert!(parse(&default_only).verify().accepted());
    assert!(!parse(r#"{"Data":"{}"}"#).verify().accepted());
}

#[test]
fn keys_match_without_case_and_later_duplicates_win() {
    let text = V131_SINGLE
        .replace("\"Data\"", "\"data\"")
        .replace("\"Checksum\"", "\"CHECKSUM\"");
    assert!(parse(&text).verify().accepted());
    let body = spew(r#"{"Version":"v1","VERSION":"v2","entries":[],"checksum":5}"#);
    assert_eq!(body.version, "v2");
    assert_eq!(body.entries, SpewEntries::List(vec![]));
}

#[test]
fn nil_and_empty_stay_apart() {
    let with = |pods: &str| {
        let text = format!(r#"{{"version":"v1","entries":[{{"ClaimUID":"u","PodUIDs":{pods}}}],"checksum":0}}"#);
        spew_dump(&spew(&text), Candidate::V127).unwrap()
    };
    assert!(with("null").contains("PodUIDs:(sets.Set[string])<nil>"));
    assert!(with("{}").contains("PodUIDs:(sets.Set[string])map[]"));
    let entries = |e: &str| spew(&format!(r#"{{"entries":{e},"checksum":0}}"#)).entries;
    assert_eq!(entries("null"), SpewEntries::Null);
    assert_eq!(entries("[]"), SpewEntries::List(vec![]));
    assert_eq!(spew(r#"{"checksum":0}"#).entries, SpewEntries::Absent);
}

#[test]
fn share_id_is_read() {
    let data = r#"{"Entries":[{"ClaimUID":"u","DriverState":{"d":{"Devices":[{"DeviceName":"x","ShareID":"s-1"}]}}}]}"#;
    let text = format!(
        r#"{{"Data":{},"Checksum":{}}}"#,
        serde_json::to_string(data).unwrap(),
        crc32_ieee(data.as_bytes())
    );
    let DraBody::Data(body) = parse(&text).body else {
        panic!("not the Data layout");
    };
    let devices = body.entries[0].driver_state.as_ref().unwrap()["d"].as_ref().unwrap();
    assert_eq!(devices[0].share_id.as_deref(), Some("s-1"));
    assert!(parse(&text).verify().accepted());
}

#[test]
fn bad_input_names_the_field() {
    assert_field_type(parse_err(r#"{"version":1,"checksum":0}"#), "version");
    assert_field_type(parse_err(r#"{"entries":{},"checksum":0}"#), "entries");
    assert_field_type(parse_err(r#"{"entries":[1],"checksum":0}"#), "entries[0]");
    assert_field_type(parse_err(r#"{"entries":[{"ClaimUID":7}]}"#), "entries[0].ClaimUID");
    assert_field_type(parse_err(r#"{"entries":[{"PodUIDs":[]}]}"#), "entries[0].PodUIDs");
    assert_field_type(
        parse_err(r#"{"entries":[{"PodUIDs":{"p":1}}]}"#),
        "entries[0].PodUIDs[\"p\"]",
    );
    assert_field_type(
        parse_err(r#"{"entries":[{"ResourceHandles":[{"data":1}]}]}"#),
        "entries[0].ResourceHandles[0].data",
    );
    assert_field_type(
        parse_err(r#"{"entries":[{"CDIDevices":{"d":[1]}}]}"#),
        "entries[0].CDIDevices[\"d\"][0]",
    );
    assert_field_type(
        parse_err(r#"{"entries":[{"DriverState":{"d":{"Devices":[{"RequestNames":"r"}]}}}]}"#),
        "entries[0].DriverState[\"d\"].Devices[0].RequestNames",
    );
    assert_field_type(parse_err(r#"{"checksum":-1}"#), "checksum");
    assert_field_type(parse_err(r#"{"checksum":1.5}"#), "checksum");
    assert_field_type(parse_err(r#"{"Data":"{}","Checksum":4294967296}"#), "Checksum");
    assert_field_type(parse_err(r#"{"Data":5}"#), "Data");
    assert_field_type(parse_err(r#"{"Data":"[]"}"#), "Data");
    assert_field_type(parse_err(r#"{"Data":"{\"Entries\":{}}"}"#), "Data.Entries");
    assert_field_type(parse_err(r#"{"Data":"{\"kind\":1}"}"#), "Data.kind");
    assert_field_type(
        parse_err(r#"{"Data":"{\"Entries\":[{\"DriverState\":{\"d\":{\"Devices\":[{\"ShareID\":2}]}}}]}"}"#),
        "Data.Entries[0].DriverState[\"d\"].Devices[0].ShareID",
    );
    match parse_err(r#"{"Data":"{"}"#) {
        CheckpointError::Value { field, .. } => assert_eq!(field, "Data"),
        other => panic!("{other:?}"),
    }
    assert!(matches!(parse_err(""), CheckpointError::Empty));
    assert!(matches!(parse_err("{"), CheckpointError::Json { .. }));
    assert!(matches!(parse_err("[]"), CheckpointError::NotAnObject { .. }));
}

#[test]
fn null_elements_are_zero_values() {
    let body = spew(r#"{"entries":[null,{"ClaimUID":null,"ResourceHandles":[null],"CDIDevices":{"d":null}}]}"#);
    let SpewEntries::List(list) = body.entries else {
        panic!("no list");
    };
    assert_eq!(list[0], ClaimEntry::default());
    assert_eq!(list[1].claim_uid, "");
    assert_eq!(list[1].resource_handles, Some(vec![ResourceHandle::default()]));
    assert_eq!(list[1].cdi_devices.as_ref().unwrap()["d"], None);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 500, ..ProptestConfig::default() })]

    #[test]
    fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        if let Ok(cp) = DraCheckpoint::parse(&bytes) {
            let _ = cp.verify();
            let _ = cp.state();
        }
    }

    #[test]
    fn mutated_vectors_never_panic(
        index in 0..UPSTREAM_VECTORS.len(),
        edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..6),
    ) {
        let mut bytes = UPSTREAM_VECTORS[index].0.as_bytes().to_vec();
        for (at, byte) in edits {
            let i = at.index(bytes.len());
            bytes[i] = byte;
        }
        if let Ok(cp) = DraCheckpoint::parse(&bytes) {
            let _ = cp.verify();
            let state = cp.state();
            prop_assert!(state.is_ok());
        }
    }
}
