//! Writes the bundled example node: `cargo run -p nodemedic-tests --bin make-example -- examples/worker-stale`.
//! The `example_is_current` test checks the committed tree matches this generator.

fn main() -> std::process::ExitCode {
    let Some(dir) = std::env::args().nth(1) else {
        eprintln!("usage: make-example DIR");
        return std::process::ExitCode::from(2);
    };
    let dir = std::path::PathBuf::from(dir);
    if dir.exists() {
        if let Err(e) = std::fs::remove_dir_all(&dir) {
            eprintln!("make-example: {}: {e}", dir.display());
            return std::process::ExitCode::from(2);
        }
    }
    match nodemedic_tests::scenarios::example_node().write(&dir) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("make-example: {}: {e}", dir.display());
            std::process::ExitCode::from(2)
        }
    }
}
