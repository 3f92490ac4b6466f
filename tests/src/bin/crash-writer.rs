//! Test helper for the crash-safety tests of `repair cpu-state` (tests/tests/repair_cpu_state.rs):
//! replaces a checkpoint the way `apply` does (backup, then atomic write), and dies by SIGKILL
//! when told to, right after a given step.
//!
//! ```text
//! crash-writer CHECKPOINT BACKUP_DIR NEW_CONTENT_FILE [STEP]
//! ```
//!
//! STEP is `backup`, `temp_created`, `written`, `synced`, `renamed` or `dir_synced`; without it
//! the write runs to the end (the parent may kill it at any moment). It prints `started` once
//! it has read its inputs, so the parent can time its kill from there.

use std::io::Write as _;
use std::os::unix::fs::MetadataExt as _;
use std::path::PathBuf;

use nodemedic::repair::atomic::{Attrs, Step};
use nodemedic::repair::cpu_state::{CommitStep, backup_path, replace_with_backup};

fn step_name(s: CommitStep) -> &'static str {
    match s {
        CommitStep::BackupWritten => "backup",
        CommitStep::Replace(Step::TempCreated) => "temp_created",
        CommitStep::Replace(Step::Written) => "written",
        CommitStep::Replace(Step::Synced) => "synced",
        CommitStep::Replace(Step::Renamed) => "renamed",
        CommitStep::Replace(Step::DirSynced) => "dir_synced",
    }
}

fn main() -> std::process::ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.len() < 3 {
        eprintln!("usage: crash-writer CHECKPOINT BACKUP_DIR NEW_CONTENT_FILE [STEP]");
        return std::process::ExitCode::from(2);
    }
    let checkpoint = PathBuf::from(&args[0]);
    let backup_dir = PathBuf::from(&args[1]);
    let crash_at = args.get(3).cloned();
    let original = std::fs::read(&checkpoint).unwrap();
    let new = std::fs::read(&args[2]).unwrap();
    let meta = std::fs::metadata(&checkpoint).unwrap();
    let attrs = Attrs {
        mode: meta.mode() & 0o7777,
        owner: Some((meta.uid(), meta.gid())),
    };
    println!("started");
    std::io::stdout().flush().unwrap();
    let backup = backup_path(&backup_dir);
    let result = replace_with_backup(&checkpoint, &backup, &original, &new, attrs, &mut |s| {
        if crash_at.as_deref() == Some(step_name(s)) {
            let _ = nix::sys::signal::raise(nix::sys::signal::Signal::SIGKILL);
        }
    });
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("crash-writer: {e}");
            std::process::ExitCode::from(1)
        }
    }
}
