//! Writes the list of functions the linker lays out first (`agent/link/hot-functions.txt`),
//! or says how much of a list a build still has. `tests/hot-functions.sh` runs it; the
//! parsing and the ordering are `nodemedic_tests::hot_functions`.
//!
//! ```text
//! hot-functions write MAP BINARY OUT PROFILE...   # the list from callgrind profiles
//! hot-functions check MAP LIST                    # how much of LIST the mapped build has
//! ```
//!
//! MAP is LLD's map of the build the profiles ran (`NODEMEDIC_LINK_MAP`, written with
//! `--no-demangle`), BINARY the path or file name callgrind named it by, each PROFILE a
//! `callgrind --dump-instr=yes` output file of that binary. A profile's stage is what it ran
//! (a scan of a pods file, a scan of the API, the daemon: `hot_functions::stage`), and the
//! stages are laid out in the order they first appear among the profiles
//! (`hot_functions::order`).

use std::collections::HashSet;
use std::io::Write;
use std::process::ExitCode;

use nodemedic_tests::hot_functions::{Profile, Section, order, parse_callgrind, parse_map, stage};

fn read(path: &str) -> Result<String, String> {
    std::fs::read_to_string(path).map_err(|e| format!("{path}: {e}"))
}

fn map(path: &str) -> Result<Vec<Section>, String> {
    parse_map(&read(path)?).map_err(|e| format!("{path}: {e}"))
}

fn kib(bytes: u64) -> String {
    format!("{:.0} KiB", bytes as f64 / 1024.0)
}

fn write(map_path: &str, binary: &str, out: &str, files: &[String]) -> Result<(), String> {
    let sections = map(map_path)?;
    let mut profiles = vec![];
    for p in files {
        let text = read(p)?;
        // callgrind creates its file when the process starts and fills it at the end: a
        // process killed before it dumped leaves it empty (its earlier dumps are files of
        // their own, PROFILE.1, PROFILE.2...).
        if text.is_empty() {
            println!("{p}: empty (the process was killed before its last dump), skipped");
            continue;
        }
        let stage = stage(&text).unwrap_or_else(|| "other".into());
        let counts = parse_callgrind(&text, binary).map_err(|e| format!("{p}: {e}"))?;
        profiles.push(Profile { stage, counts });
    }
    let found = order(&sections, &profiles);
    if found.symbols.is_empty() {
        return Err(format!(
            "no instruction of {binary} in the profiles falls in {map_path}'s text"
        ));
    }
    let mut text = String::from(
        "# The functions a nodemedic scan and daemon run: the linker places them first and\n\
         # together, the scan's, then the daemon's (agent/build.rs). Written by tests/hot-functions.sh from callgrind\n\
         # profiles of the dist build and that build's link map; write it again when Cargo.lock,\n\
         # the toolchain or the dist profile change (docs/performance.md says how much of it a\n\
         # build still finds).\n",
    );
    for s in &found.symbols {
        text.push_str(s);
        text.push('\n');
    }
    let mut file = std::fs::File::create(out).map_err(|e| format!("{out}: {e}"))?;
    file.write_all(text.as_bytes()).map_err(|e| format!("{out}: {e}"))?;
    println!(
        "{out}: {} functions, {} of the {} of code ({:.1}%); {} instructions outside the map's text (PLT)",
        found.symbols.len(),
        kib(found.bytes),
        kib(found.text_bytes),
        100.0 * found.bytes as f64 / found.text_bytes.max(1) as f64,
        found.unplaced
    );
    Ok(())
}

fn check(map_path: &str, list: &str) -> Result<(), String> {
    let sections = map(map_path)?;
    let text = read(list)?;
    let names: HashSet<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect();
    let mut found = HashSet::new();
    let mut bytes = 0;
    for s in &sections {
        let listed: Vec<&str> = s
            .symbols
            .iter()
            .map(String::as_str)
            .filter(|n| names.contains(n))
            .collect();
        bytes += if listed.is_empty() { 0 } else { s.size };
        found.extend(listed);
    }
    let found = found.len();
    println!(
        "{list}: {found} of its {} functions are in this build ({}); {}",
        names.len(),
        kib(bytes),
        if found * 10 >= names.len() * 9 {
            "the layout holds"
        } else {
            "write the list again (tests/hot-functions.sh)"
        }
    );
    Ok(())
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.as_slice() {
        [cmd, map, binary, out, profiles @ ..] if cmd == "write" && !profiles.is_empty() => {
            write(map, binary, out, profiles)
        }
        [cmd, map, list] if cmd == "check" => check(map, list),
        _ => {
            eprintln!("usage: hot-functions write MAP BINARY OUT PROFILE... | hot-functions check MAP LIST");
            return ExitCode::from(2);
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("hot-functions: {e}");
            ExitCode::FAILURE
        }
    }
}
