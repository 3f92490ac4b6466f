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
mod gospew;
pub mod memory;

use crate::checkpoint::CheckpointError;

pub(crate) use crate::checkpoint::parse_object;

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
