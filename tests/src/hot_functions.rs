//! The functions a process of nodemedic runs, in the order the linker should lay them out.
//!
//! A process faults the binary's code in by the page, and the kernel maps the pages around
//! each fault with it (fault-around, and a whole large folio where the page cache holds one):
//! a scan that runs 1 MB of the 9 MB of code scattered over all of it has most of the 9 MB
//! resident. Laid out together, the code that runs fills few pages and the rest is never
//! touched. The agent's build script hands LLD the list this module writes
//! (`agent/link/hot-functions.txt`, `--symbol-ordering-file`).
//!
//! What runs is measured, not guessed: callgrind profiles (`--dump-instr=yes`) of the shipped
//! build's scans and daemon give every instruction address executed in the binary, and the
//! linker's map of that same build (`-Map`, with `--no-demangle`) says which function's
//! section holds each address. The list names those functions in one stretch per stage (a
//! scan of a pods file, a scan of the API, the daemon: [`order`]), the most instructions first
//! within each part. `tests/hot-functions.sh` runs the whole procedure.

use std::collections::{BTreeMap, HashMap};

/// One input section of the map's executable output sections: where it is and the symbols
/// defined in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Section {
    pub addr: u64,
    pub size: u64,
    /// The symbols the map lists inside it, in order; a function section has one.
    pub symbols: Vec<String>,
}

/// The input sections of the `.text` output sections of an LLD map file (`-Map`), sorted by
/// address. Empty sections are left out: no instruction can be in one.
///
/// LLD's map is a table with a header line `VMA LMA Size Align Out In Symbol`: every row has
/// the four numbers, and the column where its text starts says what it is (an output
/// section, an input section, a symbol).
pub fn parse_map(text: &str) -> Result<Vec<Section>, String> {
    let mut lines = text.lines().enumerate();
    let (in_col, sym_col) = loop {
        let Some((_, line)) = lines.next() else {
            return Err("no header line (VMA LMA Size Align Out In Symbol): not an LLD map".into());
        };
        if line.split_whitespace().next() == Some("VMA") {
            let col = |name: &str| line.find(&format!(" {name}")).map(|c| c + 1);
            match (col("In"), col("Symbol")) {
                (Some(i), Some(s)) if i < s => break (i, s),
                _ => return Err(format!("header without In and Symbol columns: {line:?}")),
            }
        }
    };
    let mut sections = vec![];
    let mut in_text = false;
    for (n, line) in lines {
        if line.trim().is_empty() {
            continue;
        }
        let row = || format!("line {}: {line:?}", n + 1);
        let mut fields = line.split_whitespace();
        let mut number = |radix| {
            let field = fields.next().ok_or_else(|| format!("{}: too few columns", row()))?;
            u64::from_str_radix(field, radix).map_err(|e| format!("{}: {field:?}: {e}", row()))
        };
        let addr = number(16)?;
        let _lma = number(16)?;
        let size = number(16)?;
        let _align = number(10)?;
        // The text after the four numbers, and the column it starts at.
        let rest_at = nth_field_end(line, 4).ok_or_else(|| format!("{}: no name", row()))?;
        let name_col = rest_at + line[rest_at..].len() - line[rest_at..].trim_start().len();
        let name = line[name_col..].trim_end();
        if name_col < in_col {
            in_text = name == ".text" || name.starts_with(".text.");
            continue;
        }
        if !in_text {
            continue;
        }
        if name_col < sym_col {
            if size > 0 {
                sections.push(Section {
                    addr,
                    size,
                    symbols: vec![],
                });
            }
        } else if let Some(last) = sections.last_mut() {
            // A demangled name (`app::main::h01...`) is not one the linker can be given back.
            if name.contains("::") {
                return Err(format!(
                    "{}: a demangled name: the map must be written with --no-demangle",
                    row()
                ));
            }
            if (last.addr..last.addr + last.size).contains(&addr) {
                last.symbols.push(name.to_string());
            }
        }
    }
    sections.sort_by_key(|s| s.addr);
    Ok(sections)
}

/// The byte offset just past the `n`th whitespace-separated field of `line`.
fn nth_field_end(line: &str, n: usize) -> Option<usize> {
    let mut end = 0;
    for _ in 0..n {
        let start = end + line[end..].find(|c: char| !c.is_whitespace())?;
        end = start + line[start..].find(char::is_whitespace).unwrap_or(line.len() - start);
    }
    Some(end)
}

/// The instructions a callgrind profile counted in one object (matched by its path or its
/// file name), by address: how many times each ran. The profile must have instruction
/// positions (`--dump-instr=yes`); its first event is taken as the instruction count.
pub fn parse_callgrind(text: &str, object: &str) -> Result<BTreeMap<u64, u64>, String> {
    let wanted = |path: &str| {
        path == object || std::path::Path::new(path).file_name() == std::path::Path::new(object).file_name()
    };
    let mut positions: Option<usize> = None;
    let mut objects: HashMap<String, bool> = HashMap::new();
    let mut here = false;
    let mut last = 0u64;
    let mut counts = BTreeMap::new();
    for (n, line) in text.lines().enumerate() {
        let row = || format!("line {}: {line:?}", n + 1);
        if let Some(spec) = line.strip_prefix("positions:") {
            let spec: Vec<&str> = spec.split_whitespace().collect();
            if spec.first() != Some(&"instr") {
                return Err(format!(
                    "{}: no instruction positions (run callgrind with --dump-instr=yes)",
                    row()
                ));
            }
            positions = Some(spec.len());
            continue;
        }
        // An object is named `(id) path` the first time it appears, as the object of the
        // lines that follow (ob=) or of a call's target (cob=), and `(id)` after.
        let (callee, ob) = match (line.strip_prefix("ob="), line.strip_prefix("cob=")) {
            (Some(ob), _) => (false, Some(ob)),
            (_, Some(ob)) => (true, Some(ob)),
            _ => (false, None),
        };
        if let Some(ob) = ob {
            let (id, path) = match ob.split_once(") ") {
                Some((id, path)) => (format!("{id})"), Some(path)),
                None => (ob.to_string(), None),
            };
            if let Some(path) = path {
                objects.insert(id.clone(), wanted(path));
            }
            if !callee {
                here = *objects
                    .get(&id)
                    .ok_or_else(|| format!("{}: object never named", row()))?;
            }
            continue;
        }
        let first = line.as_bytes().first().copied().unwrap_or(b' ');
        if !(first.is_ascii_digit() || first == b'+' || first == b'-' || first == b'*') {
            // Headers, names (fn=, cfn=, fl=...), calls=: no instruction of their own.
            continue;
        }
        let columns = positions.ok_or_else(|| format!("{}: a cost line before the positions: header", row()))?;
        let mut fields = line.split_whitespace();
        let pos = fields.next().unwrap_or("");
        let addr = match pos.as_bytes().first() {
            Some(b'+') => last.checked_add(number(&pos[1..]).ok_or_else(row)?),
            Some(b'-') => last.checked_sub(number(&pos[1..]).ok_or_else(row)?),
            Some(b'*') => Some(last),
            _ => number(pos),
        }
        .ok_or_else(|| format!("{}: not an instruction position", row()))?;
        last = addr;
        let count = fields.nth(columns - 1).map(number).unwrap_or(Some(0)).ok_or_else(row)?;
        if here {
            *counts.entry(addr).or_insert(0) += count;
        }
    }
    if positions.is_none() {
        return Err("no positions: header: not a callgrind profile".into());
    }
    Ok(counts)
}

/// A callgrind number: hexadecimal with `0x`, else decimal.
fn number(text: &str) -> Option<u64> {
    match text.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => text.parse().ok(),
    }
}

/// What a profiled nodemedic was doing, from callgrind's `cmd:` header: its subcommand (the
/// word after the program: `scan`, `run`), and for a scan whether it read a pods file
/// (`scan --pods`) or asked the API server for the pods (`scan`), which runs the HTTP and TLS
/// code the daemon runs too.
pub fn stage(profile: &str) -> Option<String> {
    let cmd = profile.lines().find_map(|l| l.strip_prefix("cmd:"))?;
    let mut words = cmd.split_whitespace().skip(1);
    let subcommand = words.next()?;
    let pods_file = words.any(|w| w == "--pods" || w.starts_with("--pods="));
    Some(if subcommand == "scan" && pods_file {
        "scan --pods".into()
    } else {
        subcommand.into()
    })
}

/// The instructions one process ran ([`parse_callgrind`]), and what it was doing: processes
/// of one stage (a subcommand) touch the same code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Profile {
    pub stage: String,
    pub counts: BTreeMap<u64, u64>,
}

/// What [`order`] found.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Order {
    /// One symbol per section that ran, in the order to lay them out.
    pub symbols: Vec<String>,
    /// The bytes of those sections.
    pub bytes: u64,
    /// The bytes of every `.text` section.
    pub text_bytes: u64,
    /// Instructions executed at addresses no section of the map holds (a map of another
    /// build gives many; the PLT a few).
    pub unplaced: u64,
}

/// The sections the profiles ran instructions in, each named by its first symbol, laid out so
/// that each stage's code is one stretch, or nearly. The stages count in the order they first
/// appear in `profiles`, and a section is placed by the first and then the last stage that ran
/// it. With two stages, a scan's before the daemon's, that is [scan only | both | daemon
/// only]: a scan touches the first two parts and the daemon the last two. With three (a scan of
/// a pods file, a scan of the API, the daemon) each stage's code is contiguous but for what
/// only the stages on either side of it share. Hottest first within each part. A section
/// without a symbol cannot be named in an ordering file and is left out.
pub fn order(sections: &[Section], profiles: &[Profile]) -> Order {
    let mut stages: Vec<&str> = vec![];
    for p in profiles {
        if !stages.contains(&p.stage.as_str()) {
            stages.push(&p.stage);
        }
    }
    // Per section: the first and the last stage that ran it, and its instructions in all.
    let mut heat: HashMap<usize, (usize, usize, u64)> = HashMap::new();
    let mut unplaced = 0;
    for profile in profiles {
        let stage = stages.iter().position(|s| *s == profile.stage).unwrap_or(0);
        for (&addr, &count) in &profile.counts {
            let i = sections.partition_point(|s| s.addr <= addr);
            match i.checked_sub(1).filter(|&i| addr < sections[i].addr + sections[i].size) {
                Some(i) => {
                    let entry = heat.entry(i).or_insert((stage, stage, 0));
                    entry.0 = entry.0.min(stage);
                    entry.1 = entry.1.max(stage);
                    entry.2 += count.max(1);
                }
                None => unplaced += count,
            }
        }
    }
    let mut hot: Vec<(usize, (usize, usize, u64))> = heat
        .into_iter()
        .filter(|(i, _)| !sections[*i].symbols.is_empty())
        .collect();
    let name = |i: usize| &sections[i].symbols[0];
    hot.sort_by(|(a, (first_a, last_a, heat_a)), (b, (first_b, last_b, heat_b))| {
        (first_a, last_a)
            .cmp(&(first_b, last_b))
            .then(heat_b.cmp(heat_a))
            .then_with(|| name(*a).cmp(name(*b)))
    });
    Order {
        bytes: hot.iter().map(|(i, _)| sections[*i].size).sum(),
        symbols: hot.iter().map(|(i, _)| name(*i).clone()).collect(),
        text_bytes: sections.iter().map(|s| s.size).sum(),
        unplaced,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // The first line is empty: a `\` would also eat the header's leading spaces.
    const MAP: &str = "
             VMA              LMA     Size Align Out     In      Symbol
             2a8              2a8       1c     1 .interp
             2a8              2a8       1c     1         <internal>:(.interp)
            1000             1000      300    64 .text
            1000             1000       26    16         /usr/lib/x86_64-linux-gnu/Scrt1.o:(.text)
            1000             1000        0     1                 _start
            1040             1040       80    16         nodemedic.o:(.text._ZN3app4main17h0123456789abcdefE)
            1040             1040       80     1                 _ZN3app4main17h0123456789abcdefE
            10c0             10c0        0    16         nodemedic.o:(.text._ZN3app5empty17h0000000000000000E)
            10c0             10c0      200    16         nodemedic.o:(.text._ZN3app4cold17hfedcba9876543210E)
            10c0             10c0      200     1                 _ZN3app4cold17hfedcba9876543210E
            12c0             12c0       40    16         nodemedic.o:(.text._ZN3app3hot17h1111111111111111E)
            12c0             12c0       40     1                 _ZN3app3hot17h1111111111111111E
            12c0             12c0       40     1                 hot_alias
            2000             2000       10     8 .rodata
            2000             2000       10     8         nodemedic.o:(.rodata._ZN3app5TABLE17h2222222222222222E)
            2000             2000       10     1                 _ZN3app5TABLE17h2222222222222222E
";

    #[test]
    fn a_map_gives_the_text_sections_with_their_symbols() {
        let sections = parse_map(MAP).unwrap();
        let names: Vec<(u64, u64, Vec<&str>)> = sections
            .iter()
            .map(|s| (s.addr, s.size, s.symbols.iter().map(String::as_str).collect()))
            .collect();
        assert_eq!(
            names,
            vec![
                (0x1000, 0x26, vec!["_start"]),
                (0x1040, 0x80, vec!["_ZN3app4main17h0123456789abcdefE"]),
                (0x10c0, 0x200, vec!["_ZN3app4cold17hfedcba9876543210E"]),
                (0x12c0, 0x40, vec!["_ZN3app3hot17h1111111111111111E", "hot_alias"]),
            ]
        );
    }

    #[test]
    fn what_is_not_a_map_is_refused_with_the_line() {
        assert!(parse_map("hello\n").unwrap_err().contains("not an LLD map"));
        let header: String = MAP.lines().take(2).map(|l| format!("{l}\n")).collect();
        let bad = format!("{header}            zz10             1000      300    64 .text\n");
        let err = parse_map(&bad).unwrap_err();
        assert!(err.contains("line 3") && err.contains("\"zz10\""), "{err}");
        let demangled = MAP.replace(
            "      _ZN3app4main17h0123456789abcdefE\n",
            "      app::main::h0123456789abcdef\n",
        );
        let err = parse_map(&demangled).unwrap_err();
        assert!(err.contains("line 9") && err.contains("--no-demangle"), "{err}");
    }

    /// As callgrind 3.19 writes with `--dump-instr=yes`: objects named once then by id, the
    /// instruction position absolute or relative to the line before, `*` for the same, a call
    /// line whose next cost line is the call site (inclusive cost).
    const PROFILE: &str = "\
# callgrind format
version: 1
positions: instr line
events: Ir
summary: 100

ob=(1) /lib/x86_64-linux-gnu/libc.so.6
fl=(1) ???
fn=(1) memcpy
0x1040 0 7
ob=(2) /tmp/nodemedic
fl=(2) ???
fn=(2) 0x0000000000001000
0x1000 0 1
+4 0 1
fn=(3) 0x0000000000001040
0x1044 0 10
+2 * 10
cob=(1)
cfi=(1)
cfn=(1)
calls=1 0x1040 0
* 0 7
-6 0 3
cob=(3) /lib/x86_64-linux-gnu/libgcc_s.so.1
cfn=(5) _Unwind_Find_FDE
calls=1 0x300 0
+8 0 2
ob=(1)
fn=(1)
0x1050 0 5
ob=(3)
fn=(5)
0x300 0 2
ob=(2)
fn=(4)
0x12c8 0 2
0x9000 0 4
";

    #[test]
    fn a_profile_gives_the_instructions_run_in_one_object() {
        let counts = parse_callgrind(PROFILE, "/tmp/nodemedic").unwrap();
        let got: Vec<(u64, u64)> = counts.into_iter().collect();
        // 0x1046 twice: its own line (10) and the call made there (7, inclusive); 0x1048 a
        // call into an object named by the call (cob=) and only then entered (ob=).
        assert_eq!(
            got,
            vec![
                (0x1000, 1),
                (0x1004, 1),
                (0x1040, 3),
                (0x1044, 10),
                (0x1046, 17),
                (0x1048, 2),
                (0x12c8, 2),
                (0x9000, 4)
            ]
        );
        // By file name too; libc's own lines are libc's.
        let libc = parse_callgrind(PROFILE, "libc.so.6").unwrap();
        assert_eq!(libc.into_iter().collect::<Vec<_>>(), vec![(0x1040, 7), (0x1050, 5)]);
        let gcc = parse_callgrind(PROFILE, "libgcc_s.so.1").unwrap();
        assert_eq!(gcc.into_iter().collect::<Vec<_>>(), vec![(0x300, 2)]);
    }

    #[test]
    fn a_profile_without_instruction_positions_is_refused() {
        let lines = PROFILE.replace("positions: instr line", "positions: line");
        assert!(
            parse_callgrind(&lines, "/tmp/nodemedic")
                .unwrap_err()
                .contains("--dump-instr=yes")
        );
        let err = parse_callgrind("fn=(1) x\n0x10 0 1\n", "x").unwrap_err();
        assert!(err.contains("line 2") && err.contains("before the positions"), "{err}");
        let err = parse_callgrind(&PROFILE.replace("+4 0 1", "+zz 0 1"), "/tmp/nodemedic").unwrap_err();
        assert!(err.contains("\"+zz 0 1\""), "{err}");
    }

    fn profile(stage: &str, counts: &[(u64, u64)]) -> Profile {
        Profile {
            stage: stage.into(),
            counts: counts.iter().copied().collect(),
        }
    }

    #[test]
    fn the_order_is_the_sections_that_ran_hottest_first() {
        let sections = parse_map(MAP).unwrap();
        let counts = parse_callgrind(PROFILE, "/tmp/nodemedic").unwrap();
        let scan = Profile {
            stage: "scan".into(),
            counts,
        };
        let got = order(&sections, &[scan.clone(), scan]);
        // main ran 32 instructions in each profile; _start and hot 2 each, which ties them:
        // by name then.
        assert_eq!(
            got.symbols,
            vec![
                "_ZN3app4main17h0123456789abcdefE",
                "_ZN3app3hot17h1111111111111111E",
                "_start"
            ]
        );
        // The cold function never ran: not listed, and not counted.
        assert_eq!(got.bytes, 0x80 + 0x26 + 0x40);
        assert_eq!(got.text_bytes, 0x26 + 0x80 + 0x200 + 0x40);
        // 0x9000 is in no section: counted apart, twice (two profiles).
        assert_eq!(got.unplaced, 8);
    }

    /// Each stage's code is one stretch: [scan only | scan and daemon | daemon only].
    #[test]
    fn each_stage_s_functions_are_one_stretch() {
        let sections = parse_map(MAP).unwrap();
        let got = order(
            &sections,
            &[
                // _start and hot: the scan's; hot is the daemon's too, and hotter.
                profile("scan", &[(0x12c0, 5), (0x1000, 1)]),
                profile("run", &[(0x10c0, 1000), (0x1040, 900), (0x12c4, 50)]),
                // A second scan after the daemon is still the scan's stage.
                profile("scan", &[(0x1004, 1)]),
            ],
        );
        assert_eq!(
            got.symbols,
            vec![
                "_start",
                "_ZN3app3hot17h1111111111111111E",
                "_ZN3app4cold17hfedcba9876543210E",
                "_ZN3app4main17h0123456789abcdefE",
            ]
        );
    }

    /// Three stages: a pods file's scan (F), the API's scan (P), the daemon (D). The order is
    /// F only | F and P | F, (P) and D | P only | P and D | D only.
    #[test]
    fn three_stages_are_placed_by_the_first_and_the_last_that_ran_them() {
        let sections = parse_map(MAP).unwrap();
        let got = order(
            &sections,
            &[
                profile("scan --pods", &[(0x1000, 1), (0x12c0, 1), (0x1040, 1)]),
                profile("scan", &[(0x12c0, 1), (0x10c0, 1)]),
                profile("run", &[(0x1040, 1), (0x10c0, 1)]),
            ],
        );
        assert_eq!(
            got.symbols,
            vec![
                "_start",                           // F only
                "_ZN3app3hot17h1111111111111111E",  // F and P
                "_ZN3app4main17h0123456789abcdefE", // F and D
                "_ZN3app4cold17hfedcba9876543210E", // P and D
            ]
        );
    }

    #[test]
    fn a_profile_names_its_stage() {
        let scan = "version: 1\ncmd:  /tmp/nm scan --host-root /h --node n\n";
        assert_eq!(stage(scan).as_deref(), Some("scan"));
        let file = "cmd: /tmp/nm scan --host-root /h --pods /h/pods.json --format json\n";
        assert_eq!(stage(file).as_deref(), Some("scan --pods"));
        assert_eq!(stage("cmd: /tmp/nm scan --pods=/p\n").as_deref(), Some("scan --pods"));
        assert_eq!(stage("cmd: /usr/bin/nodemedic run --node n\n").as_deref(), Some("run"));
        assert_eq!(stage(PROFILE), None);
    }

    /// The list the build hands the linker (agent/build.rs) names each function once, as the
    /// linker knows it: a demangled or garbled list would lay nothing out, silently.
    #[test]
    fn the_committed_list_is_one_linker_name_per_line() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../agent/link/hot-functions.txt");
        let text = std::fs::read_to_string(&path).unwrap();
        let names: Vec<&str> = text.lines().filter(|l| !l.starts_with('#')).collect();
        assert!(names.len() > 500, "{} names only", names.len());
        let mut seen = std::collections::HashSet::new();
        for (n, name) in names.iter().enumerate() {
            let symbol_chars = name.bytes().all(|b| b.is_ascii_alphanumeric() || b"_$.".contains(&b));
            assert!(!name.is_empty() && symbol_chars, "name {}: {name:?}", n + 1);
            assert!(seen.insert(*name), "name {} twice: {name}", n + 1);
        }
        // Mostly Rust's (legacy `_ZN...E` and v0 `_R...` manglings), the agent's own among them.
        let rust = names
            .iter()
            .filter(|n| n.starts_with("_ZN") || n.starts_with("_R"))
            .count();
        assert!(rust * 10 > names.len() * 9, "{rust} of {} Rust names", names.len());
        assert!(
            names.iter().any(|n| n.contains("9nodemedic")),
            "none of the agent's own"
        );
    }
}
