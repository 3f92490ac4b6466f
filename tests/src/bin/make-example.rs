//! Writes the bundled example node: `cargo run -p nodemedic-tests --bin make-example -- examples/worker-stale`.
//! The `example_is_current` test checks the committed tree matches this generator.
//!
//! `make-example DIR --big-node PODS` writes the benchmarks' generated node of PODS pods
//! instead (`scenarios::big_node`), for profiling one scan by hand:
//! `nodemedic scan --host-root DIR --pods DIR/pods.json --node bench-node`.

use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (dir, node) = match args.as_slice() {
        // A flag is never a directory: the tree at DIR is removed before it is written.
        [dir, ..] if dir.starts_with('-') => {
            eprintln!("usage: make-example DIR [--big-node PODS]");
            return ExitCode::from(2);
        }
        [dir] => (dir, nodemedic_tests::scenarios::example_node()),
        [dir, flag, pods] if flag == "--big-node" => match pods.parse::<usize>() {
            Ok(pods) => (dir, nodemedic_tests::scenarios::big_node(pods, 5)),
            Err(e) => {
                eprintln!("make-example: --big-node {pods:?}: {e}");
                return ExitCode::from(2);
            }
        },
        _ => {
            eprintln!("usage: make-example DIR [--big-node PODS]");
            return ExitCode::from(2);
        }
    };
    let dir = std::path::PathBuf::from(dir);
    if dir.exists() {
        if let Err(e) = std::fs::remove_dir_all(&dir) {
            eprintln!("make-example: {}: {e}", dir.display());
            return ExitCode::from(2);
        }
    }
    match node.write(&dir) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("make-example: {}: {e}", dir.display());
            ExitCode::from(2)
        }
    }
}
