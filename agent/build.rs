//! Two jobs:
//! - sets `NODEMEDIC_REVISION` for `nodemedic_build_info{revision}` and `--version`: the value
//!   of the environment variable of that name when the build sets it (an image build without
//!   the repository's `.git`), else the short commit of the checkout, else `unknown`;
//! - generates the kubelet PodResources gRPC client from `proto/podresources.proto`: protox
//!   compiles the file to descriptors (no `protoc` needed), tonic-prost-build writes the Rust;
//! - lays the binary's functions out (x86_64 Linux with glibc, where rustc links with LLD):
//!   the functions a scan and the daemon run, listed in `link/hot-functions.txt`, go first and
//!   together, so the few pages they fill are most of the binary's code a process faults in
//!   (docs/performance.md, "The code a process touches"). `NODEMEDIC_FUNCTION_ORDER=off`
//!   links without the list (a linker other than LLD or mold: GNU ld does not take it);
//!   `NODEMEDIC_LINK_MAP=FILE` has the linker write its map there, which is how
//!   `tests/hot-functions.sh` learns where each function of the binary it profiles is; and
//!   packs its relative relocations (DT_RELR) where the build machine's glibc is 2.36 or
//!   later (`NODEMEDIC_PACKED_RELOCS=off` links without).

use std::path::{Path, PathBuf};
use std::process::Command;

fn git(dir: &Path, args: &[&str]) -> Option<String> {
    let out = Command::new("git").arg("-C").arg(dir).args(args).output().ok()?;
    let text = String::from_utf8(out.stdout).ok()?;
    let text = text.trim();
    (out.status.success() && !text.is_empty()).then(|| text.to_string())
}

/// A revision is shown in metrics and logs: hex digits (and `-`, `.`) only, at most 40.
fn clean(revision: &str) -> Option<String> {
    let ok = !revision.is_empty()
        && revision.len() <= 40
        && revision
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-.".contains(&b));
    ok.then(|| revision.to_string())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let proto = "proto/podresources.proto";
    println!("cargo::rerun-if-changed={proto}");
    let descriptors = protox::compile([proto], ["proto"])?;
    tonic_prost_build::configure()
        .build_server(false)
        .build_client(true)
        .compile_fds(descriptors)?;

    println!("cargo::rerun-if-env-changed=NODEMEDIC_REVISION");
    let dir = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").unwrap_or_default());
    let from_env = std::env::var("NODEMEDIC_REVISION").ok().and_then(|r| clean(&r));
    let revision = from_env.or_else(|| {
        let revision = git(&dir, &["rev-parse", "--short=12", "HEAD"]).and_then(|r| clean(&r))?;
        // Build again when HEAD moves: HEAD itself, the directory of the branch it names (a
        // commit writes the branch's file there), packed refs. Only paths that exist: cargo
        // reruns a build script on every build while a watched path is missing.
        let path = |p: String| {
            let p = PathBuf::from(p);
            if p.is_absolute() { p } else { dir.join(p) }
        };
        let mut watched = vec![];
        watched.extend(git(&dir, &["rev-parse", "--git-path", "HEAD"]).map(path));
        if let Some(branch) = git(&dir, &["symbolic-ref", "-q", "HEAD"]) {
            let file = git(&dir, &["rev-parse", "--git-path", &branch]).map(path);
            watched.extend(file.and_then(|f| f.parent().map(Path::to_path_buf)));
        }
        watched.extend(git(&dir, &["rev-parse", "--git-path", "packed-refs"]).map(path));
        for p in watched.iter().filter(|p| p.exists()) {
            println!("cargo::rerun-if-changed={}", p.display());
        }
        Some(revision)
    });
    println!(
        "cargo::rustc-env=NODEMEDIC_REVISION={}",
        revision.as_deref().unwrap_or("unknown")
    );
    layout(&dir);
    Ok(())
}

/// The linker arguments that order the binary's functions, and its map when asked for.
fn layout(dir: &Path) {
    println!("cargo::rerun-if-env-changed=NODEMEDIC_FUNCTION_ORDER");
    println!("cargo::rerun-if-env-changed=NODEMEDIC_LINK_MAP");
    let cfg = |key: &str| std::env::var(format!("CARGO_CFG_TARGET_{key}")).unwrap_or_default();
    // rustc links x86_64-unknown-linux-gnu with its own LLD (the default since Rust 1.90); the
    // other targets (aarch64 among them), older compilers and a linker named for the target
    // keep the system's linker, which may be GNU ld.
    if cfg("ARCH") != "x86_64" || cfg("OS") != "linux" || cfg("ENV") != "gnu" {
        return;
    }
    println!("cargo::rerun-if-env-changed=CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_LINKER");
    if std::env::var_os("CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_LINKER").is_some() || !rustc_links_with_lld() {
        return;
    }
    let order = dir.join("link/hot-functions.txt");
    println!("cargo::rerun-if-changed={}", order.display());
    let off = std::env::var("NODEMEDIC_FUNCTION_ORDER").is_ok_and(|v| v == "off");
    if !off && order.is_file() {
        println!(
            "cargo::rustc-link-arg-bins=-Wl,--symbol-ordering-file={}",
            order.display()
        );
        // A name the list has and this build does not (a dependency updated, a function
        // renamed) only goes unplaced: it is not worth a warning in every build.
        println!("cargo::rustc-link-arg-bins=-Wl,--no-warn-symbol-ordering");
    }
    // Relative relocations packed (DT_RELR): the 460 KB of RELA entries of a position-
    // independent binary, which the loader reads whole at every start, become a few KB. glibc
    // applies them from 2.36 on (the image's distroless cc-debian12 has 2.36), and a binary
    // linked so needs that glibc where it runs, so only a build machine with one gets them.
    println!("cargo::rerun-if-env-changed=NODEMEDIC_PACKED_RELOCS");
    let packed_off = std::env::var("NODEMEDIC_PACKED_RELOCS").is_ok_and(|v| v == "off");
    if !packed_off && glibc_at_least(2, 36) {
        println!("cargo::rustc-link-arg-bins=-Wl,-z,pack-relative-relocs");
    }
    if let Some(map) = std::env::var_os("NODEMEDIC_LINK_MAP") {
        // The names as the ordering file needs them: LLD demangles its map's by default.
        println!(
            "cargo::rustc-link-arg-bins=-Wl,-Map={},--no-demangle",
            Path::new(&map).display()
        );
    }
}

/// Whether the build machine's glibc (the one the binary links against) is `major.minor` or
/// later, from `getconf GNU_LIBC_VERSION` ("glibc 2.36").
fn glibc_at_least(major: u32, minor: u32) -> bool {
    let Ok(out) = Command::new("getconf").arg("GNU_LIBC_VERSION").output() else {
        return false;
    };
    let text = String::from_utf8_lossy(&out.stdout);
    let Some(version) = text.trim().strip_prefix("glibc ") else {
        return false;
    };
    let mut parts = version.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
    (parts.next().unwrap_or(0), parts.next().unwrap_or(0)) >= (major, minor)
}

/// Whether the compiler building this is Rust 1.90 or later, whose x86_64 Linux target links
/// with LLD.
fn rustc_links_with_lld() -> bool {
    let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let Ok(out) = Command::new(rustc).arg("--version").output() else {
        return false;
    };
    // "rustc 1.95.0 (59807616e 2026-04-14)"
    let text = String::from_utf8_lossy(&out.stdout);
    let version = text.split_whitespace().nth(1).unwrap_or("");
    let mut parts = version.split(['.', '-']).map(|p| p.parse::<u32>().unwrap_or(0));
    let (major, minor) = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
    (major, minor) >= (1, 90)
}
