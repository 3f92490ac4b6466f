//! Generates the PodResources gRPC server (for the fake kubelet) and client (for its own
//! tests) from the agent's `proto/podresources.proto`, so both sides share one wire contract.
//! protox compiles the file to descriptors without `protoc`; tonic-prost-build writes the Rust.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let proto = "../agent/proto/podresources.proto";
    println!("cargo:rerun-if-changed={proto}");
    let descriptors = protox::compile([proto], ["../agent/proto"])?;
    tonic_prost_build::configure()
        .build_server(true)
        .build_client(true)
        // Prost's codec, except for the fake kubelet's huge answers (src/podresources/huge.rs).
        .codec_path("crate::podresources::Codec")
        .compile_fds(descriptors)?;
    Ok(())
}
