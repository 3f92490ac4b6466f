//! The kubelet's other resource managers' checkpoints: memory, devices, Dynamic Resource
//! Allocation, and the DRA drivers' own files.
//!
//! Each reader is pure, like the CPU codec in [`crate::checkpoint`]: bytes in, a raw model
//! out ([`memory::MemoryCheckpoint::parse`] and its siblings), a checksum verification that
//! says which kubelet layout matched ([`crate::Verification`]), and the file's meaning
//! ([`memory::MemoryState`], [`devices::DeviceState`], [`dra::DraState`],
//! [`drivers::DriverClaim`]) for the rules. Bad input is a [`CheckpointError`] that names the
//! field; nothing here panics on input. docs/kubelet.md has the formats and the checksums.

pub mod devices;
pub mod dra;
pub mod drivers;
pub mod memory;

use serde_json::Value;

use crate::checkpoint::{CheckpointError, MAX_CHECKPOINT_BYTES, json_kind, json_reason};

/// The bytes of a checkpoint as one JSON object, with the CPU reader's limits and errors
/// (too large, empty, invalid JSON, not an object).
pub(crate) fn parse_object(bytes: &[u8]) -> Result<serde_json::Map<String, Value>, CheckpointError> {
    if bytes.len() as u64 > MAX_CHECKPOINT_BYTES {
        return Err(CheckpointError::TooLarge {
            size: bytes.len() as u64,
            limit: MAX_CHECKPOINT_BYTES,
        });
    }
    if bytes.iter().all(|b| b.is_ascii_whitespace()) {
        return Err(CheckpointError::Empty);
    }
    let value: Value = serde_json::from_slice(bytes).map_err(|e| CheckpointError::Json {
        line: e.line(),
        column: e.column(),
        reason: json_reason(&e),
    })?;
    match value {
        Value::Object(obj) => Ok(obj),
        other => Err(CheckpointError::NotAnObject {
            found: json_kind(&other),
        }),
    }
}

/// What every kubelet checkpoint reader offers: the file's name, its parse, the checksum check
/// and its meaning.
pub trait KubeletCheckpoint: Sized + std::fmt::Debug + Clone + PartialEq {
    /// The parsed meaning the rules read.
    type State: std::fmt::Debug + Clone + PartialEq;
    /// The file's path below the kubelet directory (`memory_manager_state`).
    const FILE: &'static str;
    /// The resource manager that owns it, for people (`memory manager`).
    const MANAGER: &'static str;

    /// Reads the file's bytes (no checksum check).
    fn parse(bytes: &[u8]) -> Result<Self, CheckpointError>;
    /// Which kubelet layout's checksum matches.
    fn verify(&self) -> crate::Verification;
    /// The file's meaning.
    fn state(&self) -> Result<Self::State, CheckpointError>;
}

impl KubeletCheckpoint for memory::MemoryCheckpoint {
    type State = memory::MemoryState;
    const FILE: &'static str = "memory_manager_state";
    const MANAGER: &'static str = "memory manager";

    fn parse(bytes: &[u8]) -> Result<Self, CheckpointError> {
        memory::MemoryCheckpoint::parse(bytes)
    }
    fn verify(&self) -> crate::Verification {
        memory::MemoryCheckpoint::verify(self)
    }
    fn state(&self) -> Result<Self::State, CheckpointError> {
        memory::MemoryCheckpoint::state(self)
    }
}

impl KubeletCheckpoint for devices::DeviceCheckpoint {
    type State = devices::DeviceState;
    const FILE: &'static str = "device-plugins/kubelet_internal_checkpoint";
    const MANAGER: &'static str = "device manager";

    fn parse(bytes: &[u8]) -> Result<Self, CheckpointError> {
        devices::DeviceCheckpoint::parse(bytes)
    }
    fn verify(&self) -> crate::Verification {
        devices::DeviceCheckpoint::verify(self)
    }
    fn state(&self) -> Result<Self::State, CheckpointError> {
        devices::DeviceCheckpoint::state(self)
    }
}

impl KubeletCheckpoint for dra::DraCheckpoint {
    type State = dra::DraState;
    const FILE: &'static str = "dra_manager_state";
    const MANAGER: &'static str = "DRA manager";

    fn parse(bytes: &[u8]) -> Result<Self, CheckpointError> {
        dra::DraCheckpoint::parse(bytes)
    }
    fn verify(&self) -> crate::Verification {
        dra::DraCheckpoint::verify(self)
    }
    fn state(&self) -> Result<Self::State, CheckpointError> {
        dra::DraCheckpoint::state(self)
    }
}
