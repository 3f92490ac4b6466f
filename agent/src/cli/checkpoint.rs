//! `nodemedic checkpoint`: one kubelet checkpoint file read, verified against the layouts its
//! kubelet versions write, and shown (its verdict, and with `--show` its state).

use nodemedic_rules::checkpoint::Verification;
use serde_json::json;

use super::args::{self, CheckpointAction};
use super::{CliError, EXIT_FINDINGS, EXIT_OK, print};
use crate::collect::checkpoint::read_checkpoint_file;
use crate::output::Format;

pub(super) fn checkpoint(action: CheckpointAction) -> Result<u8, CliError> {
    let (file, kind, format, show) = match action {
        CheckpointAction::Verify { file, kind, format } => (file, kind, format.get(), false),
        CheckpointAction::Show { file, kind, format } => (file, kind, format.get(), true),
    };
    use nodemedic_rules::managers::{devices, dra, memory};
    match kind.unwrap_or_else(|| args::CheckpointKind::of(&file)) {
        args::CheckpointKind::Cpu => {}
        args::CheckpointKind::Memory => return manager_checkpoint::<memory::MemoryCheckpoint>(&file, format, show),
        args::CheckpointKind::Devices => {
            return manager_checkpoint::<devices::DeviceCheckpoint>(&file, format, show);
        }
        args::CheckpointKind::Dra => return manager_checkpoint::<dra::DraCheckpoint>(&file, format, show),
        args::CheckpointKind::NvidiaGpu => return driver_checkpoint(&file, format, show),
    }
    let shown = file.display().to_string();
    let parsed = read_checkpoint_file(&file)?;
    let (verification, layout, state, error) = match &parsed {
        Err(e) => (None, None, None, Some(e.to_string())),
        Ok(cp) => {
            let v = cp.verify();
            match cp.state() {
                Ok(s) => (Some(v), Some(cp.layout()), Some(s), None),
                Err(e) => (Some(v), Some(cp.layout()), None, Some(e.to_string())),
            }
        }
    };
    // The same judgement as `scan`'s: the findings of its checkpoint rules on this file alone
    // (without the node's configuration and CPUs, the checks that need them are skipped).
    let refusals = nodemedic_rules::validate::file_refusals(
        nodemedic_rules::snapshot::CheckpointFile::new(shown.clone(), None, parsed.clone()),
        nodemedic_rules::snapshot::Observed::NotApplicable {
            reason: "checkpoint verify reads the file alone".into(),
        },
        nodemedic_rules::snapshot::Observed::NotApplicable {
            reason: "checkpoint verify reads the file alone".into(),
        },
        "<node>",
    );
    let valid = refusals.is_empty();
    match format {
        Format::Json => {
            let mut out = json!({
                "file": shown, "valid": valid, "layout": layout,
                "verification": verification, "error": error, "findings": refusals,
            });
            if show {
                out["state"] = serde_json::to_value(&state).unwrap_or_default();
            }
            print(&(serde_json::to_string_pretty(&out).unwrap_or_default() + "\n"));
        }
        Format::Text => {
            let mut text = String::new();
            let mut verdict = verdict(error.as_deref(), verification.as_ref());
            if let (false, Some(f)) = (verdict.starts_with("invalid"), refusals.first()) {
                let why = f
                    .evidence
                    .get("kubelet_error")
                    .and_then(|v| v.as_str())
                    .unwrap_or(&f.summary);
                verdict = format!("invalid: the kubelet refuses it ({why}) [{}]", f.rule);
            }
            text.push_str(&format!("{shown}: {verdict}\n"));
            if let (true, Some(s)) = (show, &state) {
                text.push_str(&format!(
                    "policy:      {}\ndefault set: {}\n",
                    s.policy_name, s.default_cpus
                ));
                text.push_str(&format!("assignments: {}\n", s.assignments.len()));
                for a in &s.assignments {
                    let who = match &a.key {
                        nodemedic_rules::checkpoint::EntryKey::Container { pod_uid, container } => {
                            format!("{pod_uid} {container}")
                        }
                        nodemedic_rules::checkpoint::EntryKey::ContainerId { container_id } => container_id.clone(),
                    };
                    text.push_str(&format!("  {who:<60} {}\n", a.cpus));
                }
                for (uid, cpus) in &s.pod_assignments {
                    text.push_str(&format!("  {uid:<60} {cpus} (pod-level)\n"));
                }
            }
            print(&text);
        }
    }
    Ok(if valid { EXIT_OK } else { EXIT_FINDINGS })
}

/// The verdict line of a verification, as `checkpoint verify` prints it.
fn verdict(error: Option<&str>, verification: Option<&Verification>) -> String {
    match (error, verification) {
        (Some(e), _) => format!("invalid: {e}"),
        (None, Some(Verification::Matched { layout, type_name, .. })) => {
            format!("valid: checksum matches layout {layout} as {type_name}")
        }
        (None, Some(Verification::Unverified { layout })) => {
            format!("valid: layout {layout} with checksum 0 (not verified; the kubelet accepts it)")
        }
        (None, Some(Verification::Mismatch { stored, computed })) => {
            let tried: Vec<String> = computed.iter().map(|(n, s)| format!("{n} = {s}")).collect();
            format!(
                "invalid: stored checksum {stored} matches no kubelet layout (computed: {})",
                tried.join(", ")
            )
        }
        (None, None) => "invalid".to_string(),
    }
}

/// `checkpoint verify|show` of a memory, device or DRA manager checkpoint: the same verdicts
/// and exit codes as for the CPU manager's; `show` adds what the file holds.
fn manager_checkpoint<C>(file: &std::path::Path, format: Format, show: bool) -> Result<u8, CliError>
where
    C: nodemedic_rules::managers::KubeletCheckpoint,
    C::State: serde::Serialize,
{
    let shown = file.display().to_string();
    let content = crate::collect::checkpoint::read_named_file(file)?.and_then(|b| C::parse(&b));
    let (verification, state, error) = match &content {
        Err(e) => (None, None, Some(e.to_string())),
        Ok(cp) => match cp.state() {
            Ok(s) => (Some(cp.verify()), Some(s), None),
            Err(e) => (Some(cp.verify()), None, Some(e.to_string())),
        },
    };
    let valid = error.is_none() && verification.as_ref().is_some_and(Verification::accepted);
    let layout = match &verification {
        Some(Verification::Matched { layout, .. } | Verification::Unverified { layout }) => Some(*layout),
        _ => None,
    };
    let state = serde_json::to_value(&state).unwrap_or_default();
    match format {
        Format::Json => {
            let mut out = json!({
                "file": shown, "kind": C::MANAGER, "valid": valid, "layout": layout,
                "verification": verification, "error": error,
            });
            if show {
                out["state"] = state;
            }
            print(&(serde_json::to_string_pretty(&out).unwrap_or_default() + "\n"));
        }
        Format::Text => {
            let mut text = format!(
                "{shown} ({} checkpoint): {}\n",
                C::MANAGER,
                verdict(error.as_deref(), verification.as_ref())
            );
            if show && !state.is_null() {
                text.push_str(&serde_json::to_string_pretty(&state).unwrap_or_default());
                text.push('\n');
            }
            print(&text);
        }
    }
    Ok(if valid { EXIT_OK } else { EXIT_FINDINGS })
}

/// `checkpoint verify|show` of the NVIDIA GPU DRA driver's checkpoint: read, not verified (its
/// checksum covers Kubernetes API structs as the driver's build renders them).
fn driver_checkpoint(file: &std::path::Path, format: Format, show: bool) -> Result<u8, CliError> {
    use nodemedic_rules::managers::drivers::{DriverFormat, parse};
    let shown = file.display().to_string();
    let claims = crate::collect::checkpoint::read_named_file(file)?.and_then(|b| parse(DriverFormat::NvidiaGpu, &b));
    let valid = claims.is_ok();
    match format {
        Format::Json => {
            let mut out = json!({
                "file": shown, "kind": DriverFormat::NvidiaGpu.name(), "valid": valid,
                "error": claims.as_ref().err().map(ToString::to_string),
            });
            if let (true, Ok(c)) = (show, &claims) {
                out["claims"] = serde_json::to_value(c).unwrap_or_default();
            }
            print(&(serde_json::to_string_pretty(&out).unwrap_or_default() + "\n"));
        }
        Format::Text => {
            let mut text = match &claims {
                Ok(c) => format!(
                    "{shown} (NVIDIA GPU DRA driver checkpoint): read: {} claim(s) (the driver's checksum is not verified)\n",
                    c.len()
                ),
                Err(e) => format!("{shown} (NVIDIA GPU DRA driver checkpoint): invalid: {e}\n"),
            };
            if let (true, Ok(c)) = (show, &claims) {
                for claim in c {
                    let name = match (&claim.namespace, &claim.claim_name) {
                        (Some(ns), Some(n)) => format!("{ns}/{n}"),
                        _ => "-".to_string(),
                    };
                    text.push_str(&format!(
                        "  {} {name} {} pods: {} devices: {}\n",
                        claim.claim_uid,
                        if claim.state.is_empty() {
                            "-"
                        } else {
                            claim.state.as_str()
                        },
                        claim.pod_uids.join(","),
                        claim.devices.join(",")
                    ));
                }
            }
            print(&text);
        }
    }
    Ok(if valid { EXIT_OK } else { EXIT_FINDINGS })
}
