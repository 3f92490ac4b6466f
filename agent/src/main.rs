//! The `nodemedic` binary; everything lives in the library.

fn main() -> std::process::ExitCode {
    nodemedic::cli::main()
}
