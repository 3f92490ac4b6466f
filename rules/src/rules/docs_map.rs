//! The rule tables of docs/architecture.md and README.md, generated from the catalogue
//! ([`super::ALL`]) and checked against it, so the map cannot drift from the code: a rule added
//! to the catalogue and not to the docs fails here. `NODEMEDIC_BLESS_DOCS=1 cargo test -p
//! nodemedic-rules docs_map` writes them.
//!
//! Each table sits between a `<!-- generated: ... -->` line and an `<!-- end generated -->`
//! line; the text around them is the docs' own.

use std::path::{Path, PathBuf};

use super::ALL;

fn repository() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The module file of rule `id`, relative to the repository root.
fn module_of(id: &str) -> String {
    format!("rules/src/rules/{}.rs", id.replace('-', "_"))
}

/// docs/architecture.md's table: each rule's module and page.
fn architecture_table() -> String {
    let mut out = String::from("| rule id | module | page |\n|---|---|---|\n");
    for r in ALL {
        out.push_str(&format!(
            "| `{}` | `{}` | [{}](rules/{}.md) |\n",
            r.id,
            module_of(r.id.as_str()),
            r.id,
            r.id
        ));
    }
    out
}

/// README.md's table: each rule's page, usual severity and what it finds.
fn readme_table() -> String {
    let mut out = String::from("| rule | usual severity | what it finds |\n|---|---|---|\n");
    for r in ALL {
        out.push_str(&format!(
            "| [`{}`](docs/rules/{}.md) | {} | {} |\n",
            r.id,
            r.id,
            r.severity.as_str(),
            r.title
        ));
    }
    out
}

/// Checks (or with `bless`, writes) the generated block named `name` of `file`: `Err` says
/// what differs.
// Err: a test's failure message (this file is test code), printed by the test that calls it.
fn check_block(file: &Path, name: &str, want: &str, bless: bool) -> Result<(), String> {
    let text = std::fs::read_to_string(file).map_err(|e| format!("{}: {e}", file.display()))?;
    let open = format!("<!-- generated: {name} ");
    let start = text
        .find(&open)
        .ok_or_else(|| format!("{}: no `{open}...-->` line", file.display()))?;
    let body = start + text[start..].find('\n').map_or(text.len() - start, |n| n + 1);
    let end = body
        + text[body..]
            .find("<!-- end generated -->")
            .ok_or_else(|| format!("{}: the {name} block has no end line", file.display()))?;
    if &text[body..end] == want {
        return Ok(());
    }
    if bless {
        let new = format!("{}{want}{}", &text[..body], &text[end..]);
        return std::fs::write(file, new).map_err(|e| format!("{}: {e}", file.display()));
    }
    Err(format!(
        "{}: the {name} table is not the catalogue's (NODEMEDIC_BLESS_DOCS=1 writes it):\n--- have\n{}--- want\n{want}",
        file.display(),
        &text[body..end]
    ))
}

#[test]
fn the_docs_rule_tables_are_the_catalogues() {
    let bless = std::env::var_os("NODEMEDIC_BLESS_DOCS").is_some();
    let root = repository();
    let mut wrong = vec![];
    for (file, name, want) in [
        ("docs/architecture.md", "rule table", architecture_table()),
        ("README.md", "rule table", readme_table()),
    ] {
        if let Err(e) = check_block(&root.join(file), name, &want, bless) {
            wrong.push(e);
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n\n"));
}

/// Every rule's module and page exist where the tables say.
#[test]
fn every_rule_has_its_module_and_its_page() {
    let root = repository();
    for r in ALL {
        for path in [module_of(r.id.as_str()), r.docs_path()] {
            assert!(root.join(&path).is_file(), "rule {}: {path} is missing", r.id);
        }
    }
}

/// The check finds a missing rule: a table one row short is refused, and names the file.
#[test]
fn a_table_without_a_rule_is_refused() {
    let dir = std::env::temp_dir().join(format!("nodemedic-docs-map-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("page.md");
    let full = readme_table();
    let short: String = full
        .lines()
        .filter(|l| !l.contains("half-submitted-driver"))
        .map(|l| format!("{l}\n"))
        .collect();
    assert_ne!(short, full, "the catalogue has half-submitted-driver");
    std::fs::write(
        &file,
        format!("intro\n<!-- generated: rule table (x) -->\n{short}<!-- end generated -->\nafter\n"),
    )
    .unwrap();
    let err = check_block(&file, "rule table", &full, false).unwrap_err();
    assert!(
        err.contains("page.md") && err.contains("half-submitted-driver"),
        "{err}"
    );
    check_block(&file, "rule table", &full, true).unwrap();
    assert_eq!(check_block(&file, "rule table", &full, false), Ok(()));
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(
        text.starts_with("intro\n") && text.ends_with("<!-- end generated -->\nafter\n"),
        "{text}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Every path docs/architecture.md names in backticks exists, and every module of this crate
/// has its row in the table of `rules/`: the map names no file that is gone and leaves out no
/// module.
#[test]
fn the_architecture_names_files_that_exist_and_every_module_of_the_core() {
    let root = repository();
    let text = std::fs::read_to_string(root.join("docs/architecture.md")).unwrap();
    let mut gone = vec![];
    for quoted in text.split('`').skip(1).step_by(2) {
        let path = quoted.trim_end_matches('/');
        let is_path = ["agent/", "rules/", "tests/", "daemonset/"]
            .iter()
            .any(|p| path.starts_with(p))
            && path.chars().all(|c| c.is_ascii_alphanumeric() || "/._-".contains(c));
        if is_path && !root.join(path).exists() {
            gone.push(path.to_string());
        }
    }
    assert!(
        gone.is_empty(),
        "docs/architecture.md names paths that do not exist: {gone:?}"
    );
    let lib = std::fs::read_to_string(root.join("rules/src/lib.rs")).unwrap();
    let unmapped: Vec<&str> = lib
        .lines()
        .filter_map(|l| l.strip_prefix("pub mod ")?.strip_suffix(';'))
        .filter(|m| !text.contains(&format!("| `{m}` |")) && !text.contains(&format!("| `{m}/` |")))
        .collect();
    assert!(
        unmapped.is_empty(),
        "modules of rules/src/lib.rs without a row in docs/architecture.md: {unmapped:?}"
    );
}
