//! DRA drivers' own checkpoints (opt-in by configuration): one adapter per known driver.
//!
//! A DRA driver's kubelet plugin keeps its own record of the claims it prepared, next to the
//! kubelet's ([`super::dra`]). The two can disagree: the kubelet forgets a claim once
//! `NodeUnprepareResources` succeeded, while a driver that missed the unprepare keeps the claim
//! and refuses its devices to the next claim (docs/kubelet.md, "DRA driver checkpoints").
//!
//! NVIDIA's GPU driver (`gpu.nvidia.com`, kubernetes-sigs/dra-driver-nvidia-gpu, formerly
//! NVIDIA/k8s-dra-driver-gpu, `cmd/gpu-kubelet-plugin/checkpoint.go` and `checkpointv.go`)
//! writes `{"checksum":N,"v1":{...},"v2":{...}}`: `v1.preparedClaims` holds the completely
//! prepared claims in the first layout (`status`, `preparedDevices`), `v2.preparedClaims` every
//! claim with its `checkpointState` (`PrepareStarted`, `PrepareCompleted`), `name` and
//! `namespace`, and a checksum of its own. A newer driver may add `v3`. The driver reads the
//! newest block present (`ToLatestVersion`: v3, then v2, then v1); so does this reader.
//!
//! No checksum is verified here. The driver's checksums hash its `encoding/json` rendering of
//! structs that embed Kubernetes API types (`ResourceClaimStatus`, `kubeletplugin.Device`), so
//! the value depends on the exact API version the driver was built with (fields added upstream
//! change the rendering: the driver's issue 1080); reproducing it would mean tracking every
//! driver build. Only the fields the adapter reads are type-checked.

use serde_json::{Map, Value};

use crate::checkpoint::{CheckpointError, go_string, type_error};

/// The drivers nodemedic can read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum DriverFormat {
    /// NVIDIA's GPU DRA driver (`gpu.nvidia.com`), `/var/lib/kubelet/plugins/gpu.nvidia.com/checkpoint.json`.
    NvidiaGpu,
}

impl DriverFormat {
    /// Every format, for configuration errors.
    pub const ALL: [DriverFormat; 1] = [DriverFormat::NvidiaGpu];

    /// The configuration's name of the format.
    pub fn name(self) -> &'static str {
        match self {
            DriverFormat::NvidiaGpu => "nvidia-gpu",
        }
    }

    /// The format named `name` in the configuration.
    pub fn from_name(name: &str) -> Option<DriverFormat> {
        Self::ALL.into_iter().find(|f| f.name() == name)
    }

    /// The DRA driver's name (`gpu.nvidia.com`).
    pub fn driver(self) -> &'static str {
        match self {
            DriverFormat::NvidiaGpu => "gpu.nvidia.com",
        }
    }
}

/// One claim a driver's checkpoint holds.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct DriverClaim {
    pub claim_uid: String,
    /// The ResourceClaim's namespace and name, when the checkpoint records them.
    pub namespace: Option<String>,
    pub claim_name: Option<String>,
    /// The driver's own state for it (`PrepareStarted`, `PrepareCompleted`; empty when the
    /// format has none).
    pub state: String,
    /// Pods the claim was reserved for (`status.reservedFor` entries of resource `pods`).
    pub pod_uids: Vec<String>,
    /// The devices prepared for it (the driver's device names).
    pub devices: Vec<String>,
}

/// Reads a driver checkpoint of `format`; claims sorted by UID.
pub fn parse(format: DriverFormat, bytes: &[u8]) -> Result<Vec<DriverClaim>, CheckpointError> {
    let obj = super::parse_object(bytes)?;
    match format {
        DriverFormat::NvidiaGpu => nvidia_claims(&obj, format.driver()),
    }
}

/// The last value whose key equals `name` without regard to ASCII case (Go's field matching).
fn field<'a>(obj: &'a Map<String, Value>, name: &str) -> Option<&'a Value> {
    obj.iter()
        .rev()
        .find(|(k, _)| k.eq_ignore_ascii_case(name))
        .map(|(_, v)| v)
}

/// An optional object field: `None` when absent or `null`.
fn object_field<'a>(
    obj: &'a Map<String, Value>,
    name: &str,
    path: &str,
) -> Result<Option<&'a Map<String, Value>>, CheckpointError> {
    match field(obj, name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Object(inner)) => Ok(Some(inner)),
        Some(other) => Err(type_error(path, "an object", other)),
    }
}

/// An optional array field: empty when absent or `null`.
fn array_field<'a>(obj: &'a Map<String, Value>, name: &str, path: &str) -> Result<&'a [Value], CheckpointError> {
    match field(obj, name) {
        None | Some(Value::Null) => Ok(&[]),
        Some(Value::Array(items)) => Ok(items),
        Some(other) => Err(type_error(path, "an array", other)),
    }
}

/// An optional string field: empty when absent or `null`.
fn string_field(obj: &Map<String, Value>, name: &str, path: &str) -> Result<String, CheckpointError> {
    field(obj, name).map_or(Ok(String::new()), |v| go_string(path, v))
}

/// The NVIDIA GPU plugin's claims, from the newest block the file has.
fn nvidia_claims(obj: &Map<String, Value>, driver: &str) -> Result<Vec<DriverClaim>, CheckpointError> {
    let mut blocks = Vec::with_capacity(3);
    for name in ["v3", "v2", "v1"] {
        blocks.push((name, object_field(obj, name, name)?));
    }
    let Some((version, block)) = blocks.into_iter().find_map(|(name, b)| b.map(|b| (name, b))) else {
        return Ok(Vec::new());
    };
    let path = format!("{version}.preparedClaims");
    let Some(prepared) = object_field(block, "preparedClaims", &path)? else {
        return Ok(Vec::new());
    };
    let mut claims = prepared
        .iter()
        .map(|(uid, claim)| nvidia_claim(&format!("{path}[{uid:?}]"), uid, claim, version != "v1", driver))
        .collect::<Result<Vec<_>, _>>()?;
    claims.sort_by(|a, b| a.claim_uid.cmp(&b.claim_uid));
    Ok(claims)
}

/// One prepared claim. In the first 25.x layout a V1 claim was its device groups alone (an
/// array); later ones are objects with `status` and `preparedDevices`.
fn nvidia_claim(
    path: &str,
    uid: &str,
    claim: &Value,
    has_state: bool,
    driver: &str,
) -> Result<DriverClaim, CheckpointError> {
    let mut out = DriverClaim {
        claim_uid: uid.to_string(),
        ..DriverClaim::default()
    };
    let obj = match claim {
        Value::Null => return Ok(out),
        Value::Array(groups) if !has_state => {
            out.devices = prepared_device_names(path, groups)?;
            return Ok(out);
        }
        Value::Object(obj) => obj,
        other => return Err(type_error(path, "an object", other)),
    };
    if has_state {
        out.state = string_field(obj, "checkpointState", &format!("{path}.checkpointState"))?;
        out.claim_name = non_empty(string_field(obj, "name", &format!("{path}.name"))?);
        out.namespace = non_empty(string_field(obj, "namespace", &format!("{path}.namespace"))?);
    }
    let status_path = format!("{path}.status");
    let status = object_field(obj, "status", &status_path)?;
    if let Some(status) = status {
        out.pod_uids = reserved_pods(&status_path, status)?;
    }
    let groups = array_field(obj, "preparedDevices", &format!("{path}.preparedDevices"))?;
    out.devices = prepared_device_names(&format!("{path}.preparedDevices"), groups)?;
    if out.devices.is_empty() {
        if let Some(status) = status {
            out.devices = allocated_devices(&status_path, status, driver)?;
        }
    }
    Ok(out)
}

fn non_empty(s: String) -> Option<String> {
    (!s.is_empty()).then_some(s)
}

/// The UIDs of `status.reservedFor` entries for core pods, sorted and without repeats.
fn reserved_pods(path: &str, status: &Map<String, Value>) -> Result<Vec<String>, CheckpointError> {
    let list_path = format!("{path}.reservedFor");
    let mut uids = Vec::new();
    for (i, item) in array_field(status, "reservedFor", &list_path)?.iter().enumerate() {
        let p = format!("{list_path}[{i}]");
        let consumer = match item {
            Value::Null => continue,
            Value::Object(consumer) => consumer,
            other => return Err(type_error(p, "an object", other)),
        };
        let resource = string_field(consumer, "resource", &format!("{p}.resource"))?;
        let group = string_field(consumer, "apiGroup", &format!("{p}.apiGroup"))?;
        let uid = string_field(consumer, "uid", &format!("{p}.uid"))?;
        if resource == "pods" && group.is_empty() && !uid.is_empty() {
            uids.push(uid);
        }
    }
    uids.sort();
    uids.dedup();
    Ok(uids)
}

/// `status.allocation.devices.results[].device` of this driver: the devices a claim that was
/// not prepared yet (`PrepareStarted`) is being prepared for.
fn allocated_devices(path: &str, status: &Map<String, Value>, driver: &str) -> Result<Vec<String>, CheckpointError> {
    let alloc_path = format!("{path}.allocation");
    let Some(allocation) = object_field(status, "allocation", &alloc_path)? else {
        return Ok(Vec::new());
    };
    let devices_path = format!("{alloc_path}.devices");
    let Some(devices) = object_field(allocation, "devices", &devices_path)? else {
        return Ok(Vec::new());
    };
    let results_path = format!("{devices_path}.results");
    let mut names = Vec::new();
    for (i, item) in array_field(devices, "results", &results_path)?.iter().enumerate() {
        let p = format!("{results_path}[{i}]");
        let result = match item {
            Value::Null => continue,
            Value::Object(result) => result,
            other => return Err(type_error(p, "an object", other)),
        };
        if string_field(result, "driver", &format!("{p}.driver"))? == driver {
            push_new(&mut names, string_field(result, "device", &format!("{p}.device"))?);
        }
    }
    Ok(names)
}

/// The device names of `preparedDevices`: groups of `devices`, each an object with one kind
/// (`gpu`, `mig`, `vfio`, `imexChannel`, ...) whose `device` carries the canonical name
/// (`DeviceName`, or `device_name` in the drivers that stored the gRPC message). File order,
/// without repeats.
fn prepared_device_names(path: &str, groups: &[Value]) -> Result<Vec<String>, CheckpointError> {
    let mut names = Vec::new();
    for (g, group) in groups.iter().enumerate() {
        let group_path = format!("{path}[{g}]");
        let group = match group {
            Value::Null => continue,
            Value::Object(group) => group,
            other => return Err(type_error(group_path, "an object", other)),
        };
        let devices_path = format!("{group_path}.devices");
        for (d, device) in array_field(group, "devices", &devices_path)?.iter().enumerate() {
            let device_path = format!("{devices_path}[{d}]");
            let kinds = match device {
                Value::Null => continue,
                Value::Object(kinds) => kinds,
                other => return Err(type_error(device_path, "an object", other)),
            };
            for (kind, prepared) in kinds {
                if let Some(name) = kind_device_name(&format!("{device_path}.{kind}"), prepared)? {
                    push_new(&mut names, name);
                }
            }
        }
    }
    Ok(names)
}

/// The name in `<kind>.device`, if the kind is set and names a device.
fn kind_device_name(path: &str, prepared: &Value) -> Result<Option<String>, CheckpointError> {
    let Value::Object(prepared) = prepared else {
        return Ok(None);
    };
    let Some(device) = object_field(prepared, "device", &format!("{path}.device"))? else {
        return Ok(None);
    };
    let name_path = format!("{path}.device.DeviceName");
    let name = match field(device, "DeviceName") {
        Some(v) => go_string(&name_path, v)?,
        None => string_field(device, "device_name", &name_path)?,
    };
    Ok(non_empty(name))
}

fn push_new(names: &mut Vec<String>, name: String) {
    if !name.is_empty() && !names.contains(&name) {
        names.push(name);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const UID_A: &str = "1f0c2a4e-5b6d-4e7f-8a9b-0c1d2e3f4a5b";
    const UID_B: &str = "9a8b7c6d-5e4f-4a3b-2c1d-0e9f8a7b6c5d";
    const POD_A: &str = "aaaaaaaa-0000-4000-8000-000000000001";
    const POD_B: &str = "bbbbbbbb-0000-4000-8000-000000000002";

    fn status(pod: &str, device: &str) -> String {
        format!(
            r#"{{"allocation":{{"devices":{{"results":[{{"request":"gpu","driver":"gpu.nvidia.com","pool":"node-1","device":"{device}"}},{{"request":"nic","driver":"other.example.com","pool":"node-1","device":"nic-0"}}]}}}},"reservedFor":[{{"resource":"pods","name":"p","uid":"{pod}"}},{{"apiGroup":"apps","resource":"pods","name":"x","uid":"not-a-core-pod"}},{{"resource":"jobs","name":"j","uid":"job-uid"}}]}}"#
        )
    }

    fn prepared(device: &str) -> String {
        format!(
            r#"[{{"devices":[{{"gpu":{{"info":{{"uuid":"GPU-1"}},"device":{{"Requests":["gpu"],"PoolName":"node-1","DeviceName":"{device}","CDIDeviceIDs":["k8s.gpu.nvidia.com/device={device}"]}}}}}}],"configState":{{}}}}]"#
        )
    }

    /// What the driver writes today: v1 with the completed claims, v2 with all of them.
    fn current_file() -> String {
        format!(
            r#"{{"version":"v2","checksum":123,"v1":{{"preparedClaims":{{"{UID_A}":{{"status":{sa},"preparedDevices":{pa}}}}}}},"v2":{{"checksum":456,"preparedClaims":{{"{UID_B}":{{"checkpointState":"PrepareStarted","status":{sb},"name":"claim-b","namespace":"ns"}},"{UID_A}":{{"checkpointState":"PrepareCompleted","status":{sa},"preparedDevices":{pa},"name":"claim-a","namespace":"ns"}}}}}}}}"#,
            sa = status(POD_A, "gpu-0"),
            pa = prepared("gpu-0"),
            sb = status(POD_B, "gpu-1"),
        )
    }

    fn nvidia(text: &str) -> Vec<DriverClaim> {
        parse(DriverFormat::NvidiaGpu, text.as_bytes()).unwrap_or_else(|e| panic!("{text}: {e}"))
    }

    fn nvidia_err(text: &str) -> CheckpointError {
        match parse(DriverFormat::NvidiaGpu, text.as_bytes()) {
            Ok(claims) => panic!("{text}: parsed as {claims:?}"),
            Err(e) => e,
        }
    }

    fn assert_field_type(err: CheckpointError, want: &str) {
        match err {
            CheckpointError::FieldType { field, .. } => assert_eq!(field, want),
            other => panic!("expected a type error at {want}, got {other:?}"),
        }
    }

    #[test]
    fn format_names_round_trip() {
        for f in DriverFormat::ALL {
            assert_eq!(DriverFormat::from_name(f.name()), Some(f));
        }
        assert_eq!(DriverFormat::from_name("nvidia"), None);
        assert_eq!(DriverFormat::NvidiaGpu.driver(), "gpu.nvidia.com");
    }

    #[test]
    fn v2_wins_over_v1() {
        let claims = nvidia(&current_file());
        assert_eq!(
            claims,
            vec![
                DriverClaim {
                    claim_uid: UID_A.into(),
                    namespace: Some("ns".into()),
                    claim_name: Some("claim-a".into()),
                    state: "PrepareCompleted".into(),
                    pod_uids: vec![POD_A.into()],
                    devices: vec!["gpu-0".into()],
                },
                DriverClaim {
                    claim_uid: UID_B.into(),
                    namespace: Some("ns".into()),
                    claim_name: Some("claim-b".into()),
                    state: "PrepareStarted".into(),
                    pod_uids: vec![POD_B.into()],
                    // Not prepared yet: the devices of its allocation for this driver.
                    devices: vec!["gpu-1".into()],
                },
            ]
        );
    }

    #[test]
    fn v1_alone_has_no_state_or_names() {
        let text = format!(
            r#"{{"checksum":1,"v1":{{"preparedClaims":{{"{UID_A}":{{"status":{s},"preparedDevices":{p}}}}}}}}}"#,
            s = status(POD_A, "gpu-3"),
            p = prepared("gpu-3")
        );
        assert_eq!(
            nvidia(&text),
            vec![DriverClaim {
                claim_uid: UID_A.into(),
                namespace: None,
                claim_name: None,
                state: String::new(),
                pod_uids: vec![POD_A.into()],
                devices: vec!["gpu-3".into()],
            }]
        );
    }

    #[test]
    fn null_v2_falls_back_to_v1() {
        let text = format!(
            r#"{{"v2":null,"v1":{{"preparedClaims":{{"{UID_A}":{{"preparedDevices":{}}}}}}}}}"#,
            prepared("gpu-2")
        );
        assert_eq!(nvidia(&text)[0].devices, vec!["gpu-2".to_string()]);
    }

    #[test]
    fn v3_wins_when_present() {
        let text = format!(
            r#"{{"v2":{{"preparedClaims":{{"{UID_A}":{{"checkpointState":"PrepareCompleted"}}}}}},"v3":{{"checksum":1,"preparedClaims":{{"{UID_B}":{{"checkpointState":"PrepareCompleted","preparedDevices":[{{"devices":[{{"mig":{{"concrete":{{}},"device":{{"requests":["r"],"poolName":"n","deviceName":"gpu-0-mig-1g.10gb-0"}}}}}}]}}]}}}}}}}}"#
        );
        let claims = nvidia(&text);
        assert_eq!(claims.len(), 1);
        assert_eq!(claims[0].claim_uid, UID_B);
        assert_eq!(claims[0].devices, vec!["gpu-0-mig-1g.10gb-0".to_string()]);
    }

    #[test]
    fn oldest_layout_and_grpc_device_names() {
        // Early 25.x: a V1 claim is its device groups; devices are the gRPC message.
        let text = format!(
            r#"{{"checksum":9,"v1":{{"preparedClaims":{{"{UID_A}":[{{"devices":[{{"gpu":{{"info":{{}},"device":{{"request_names":["g"],"pool_name":"n","device_name":"gpu-5"}}}},"mig":null}}]}}]}}}}}}"#
        );
        assert_eq!(nvidia(&text)[0].devices, vec!["gpu-5".to_string()]);
    }

    #[test]
    fn empty_and_absent_blocks() {
        assert_eq!(nvidia("{}"), vec![]);
        assert_eq!(nvidia(r#"{"checksum":0,"v1":{}}"#), vec![]);
        assert_eq!(nvidia(r#"{"v2":{"preparedClaims":null}}"#), vec![]);
        let text = format!(r#"{{"v2":{{"preparedClaims":{{"{UID_A}":null}}}}}}"#);
        assert_eq!(nvidia(&text)[0].claim_uid, UID_A);
    }

    #[test]
    fn keys_match_without_case() {
        let text = current_file()
            .replace("\"v2\"", "\"V2\"")
            .replace("\"checkpointState\"", "\"CheckpointState\"");
        assert_eq!(nvidia(&text)[1].state, "PrepareStarted");
    }

    #[test]
    fn bad_input_names_the_field() {
        assert_field_type(nvidia_err(r#"{"v2":[]}"#), "v2");
        assert_field_type(nvidia_err(r#"{"v2":{"preparedClaims":[]}}"#), "v2.preparedClaims");
        assert_field_type(
            nvidia_err(r#"{"v2":{"preparedClaims":{"u":[]}}}"#),
            "v2.preparedClaims[\"u\"]",
        );
        assert_field_type(
            nvidia_err(r#"{"v2":{"preparedClaims":{"u":{"checkpointState":1}}}}"#),
            "v2.preparedClaims[\"u\"].checkpointState",
        );
        assert_field_type(
            nvidia_err(r#"{"v2":{"preparedClaims":{"u":{"status":{"reservedFor":{}}}}}}"#),
            "v2.preparedClaims[\"u\"].status.reservedFor",
        );
        assert_field_type(
            nvidia_err(r#"{"v2":{"preparedClaims":{"u":{"status":{"reservedFor":[{"resource":"pods","uid":5}]}}}}}"#),
            "v2.preparedClaims[\"u\"].status.reservedFor[0].uid",
        );
        assert_field_type(
            nvidia_err(
                r#"{"v1":{"preparedClaims":{"u":{"preparedDevices":[{"devices":[{"gpu":{"device":{"DeviceName":0}}}]}]}}}}"#,
            ),
            "v1.preparedClaims[\"u\"].preparedDevices[0].devices[0].gpu.device.DeviceName",
        );
        assert_field_type(
            nvidia_err(
                r#"{"v2":{"preparedClaims":{"u":{"status":{"allocation":{"devices":{"results":[{"driver":1}]}}}}}}}"#,
            ),
            "v2.preparedClaims[\"u\"].status.allocation.devices.results[0].driver",
        );
        assert!(matches!(nvidia_err(""), CheckpointError::Empty));
        assert!(matches!(nvidia_err("{"), CheckpointError::Json { .. }));
        assert!(matches!(nvidia_err("7"), CheckpointError::NotAnObject { .. }));
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 500, ..ProptestConfig::default() })]

        #[test]
        fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            let _ = parse(DriverFormat::NvidiaGpu, &bytes);
        }

        #[test]
        fn mutated_files_never_panic(
            edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..6),
        ) {
            let mut bytes = current_file().into_bytes();
            for (at, byte) in edits {
                let i = at.index(bytes.len());
                bytes[i] = byte;
            }
            if let Ok(claims) = parse(DriverFormat::NvidiaGpu, &bytes) {
                prop_assert!(claims.windows(2).all(|w| w[0].claim_uid <= w[1].claim_uid));
            }
        }
    }
}
