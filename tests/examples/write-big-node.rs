//! Writes a generated benchmark node: `cargo run --release -p nodemedic-tests --example write-big-node -- DIR [PODS] [PROCS_PER_EXECUTOR]`.
fn main() {
    let mut args = std::env::args().skip(1);
    let dir = args.next().unwrap_or_else(|| "big-node".into());
    let pods = args.next().and_then(|a| a.parse().ok()).unwrap_or(250);
    let procs = args.next().and_then(|a| a.parse().ok()).unwrap_or(5);
    if let Err(e) = nodemedic_tests::scenarios::big_node(pods, procs).write(std::path::Path::new(&dir)) {
        eprintln!("write-big-node: {dir}: {e}");
        std::process::exit(2);
    }
}
