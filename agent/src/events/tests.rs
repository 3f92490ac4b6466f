//! The Event recorder: names, series, the cap per window, references.

use super::*;
use nodemedic_rules::finding::{Subject, SubjectKind};

fn finding(rule: impl Into<nodemedic_rules::RuleId>, subject: Subject) -> Finding {
    Finding::new(rule.into(), Severity::Critical, subject, "s".repeat(2000), "r".into())
}

#[test]
fn keys_and_references() {
    let pod = Subject {
        kind: SubjectKind::Pod,
        namespace: Some("spark".into()),
        name: Some("exec-1".into()),
        uid: Some("u1".into()),
        container: Some("c".into()),
    };
    let f = finding("orphaned-executor", pod.clone());
    assert_eq!(f.key().to_string(), "orphaned-executor|Pod|u1|c|");
    let r = reference(&f, "n1");
    assert_eq!(
        (r.kind.as_deref(), r.namespace.as_deref(), r.name.as_deref()),
        (Some("Pod"), Some("spark"), Some("exec-1"))
    );
    // A pod known only by UID (gone) gets its event on the node.
    let gone = finding("stale-cpu-assignment", Subject::pod_uid("u9"));
    let r = reference(&gone, "n1");
    assert_eq!(
        (r.kind.as_deref(), r.name.as_deref(), r.namespace.as_deref()),
        (Some("Node"), Some("n1"), None)
    );
    assert!(note_text(gone.summary.clone()).len() <= 1024);
    let node = finding("checkpoint-invalid-state", Subject::node("n1")).with("problem", "cpus-mismatch");
    assert_eq!(
        node.key().to_string(),
        "checkpoint-invalid-state|Node|n1||cpus-mismatch"
    );
}

/// A recorder whose client is never used (a kube client needs a runtime to be built).
fn recorder(node: &str) -> EventRecorder {
    let config = kube::Config::new("http://127.0.0.1:9".parse().unwrap());
    let client = kube::Client::try_from(config).unwrap();
    EventRecorder::new(client, node, "nodemedic-x", Duration::from_secs(600))
        .with_cluster_object(lease_reference("nodemedic", "nodemedic-prober"))
}

fn name_of(recorder: &EventRecorder, f: &Finding) -> String {
    let r = recorder.reference(f);
    series_name(r.name.as_deref().unwrap_or_default(), &recorder.identity(&f.key()))
}

#[tokio::test]
async fn series_names_are_fixed_valid_and_one_per_finding() {
    let rec = recorder("worker-3");
    let stale = finding("stale-cpu-assignment", Subject::pod_uid("39b3c1d2")).with("cpus", "2-3");
    let name = name_of(&rec, &stale);
    // The same in every process and build (a restarted agent finds its Event by it): the
    // value is FNV-1a 64 of "worker-3\0stale-cpu-assignment\0Pod\039b3c1d2\0\0\0".
    assert_eq!(name, "worker-3.c69cabe58d47e321");
    assert_eq!(name_of(&recorder("worker-3"), &stale), name);
    // The evidence beyond the identity (CPUs, summary) does not move it.
    let again = finding("stale-cpu-assignment", Subject::pod_uid("39b3c1d2")).with("cpus", "2-5");
    assert_eq!(name_of(&rec, &again), name);
    // Anything of the identity does: node, rule, subject, container, problem.
    let pod = Subject {
        kind: SubjectKind::Pod,
        namespace: Some("spark".into()),
        name: Some("exec-1".into()),
        uid: Some("u1".into()),
        container: Some("c".into()),
    };
    let variants = [
        name_of(&recorder("worker-4"), &stale),
        name_of(&rec, &finding("cross-pod-cpu-overlap", Subject::pod_uid("39b3c1d2"))),
        name_of(&rec, &finding("stale-cpu-assignment", Subject::pod_uid("39b3c1d3"))),
        name_of(&rec, &finding("orphaned-executor", pod.clone())),
        name_of(
            &rec,
            &finding(
                "orphaned-executor",
                Subject {
                    container: Some("d".into()),
                    ..pod.clone()
                },
            ),
        ),
        name_of(
            &rec,
            &finding("checkpoint-invalid-state", Subject::node("worker-3")).with("problem", "a"),
        ),
        name_of(
            &rec,
            &finding("checkpoint-invalid-state", Subject::node("worker-3")).with("problem", "b"),
        ),
        series_name("worker-3", &["worker-3", SUMMARY_REASON]),
    ];
    let mut all: Vec<&String> = variants.iter().chain([&name]).collect();
    all.sort();
    all.dedup();
    assert_eq!(all.len(), variants.len() + 1, "{variants:#?}");
    for n in &variants {
        assert!(is_dns_subdomain(n), "{n}");
    }
    // A pod finding is named after its pod; a join of parts that run together does not collide.
    assert!(variants[3].starts_with("exec-1."), "{}", variants[3]);
    assert_ne!(series_name("n", &["ab", "c"]), series_name("n", &["a", "bc"]));
}

#[test]
fn series_names_stay_within_kubernetes_name_rules() {
    let long_label = "a".repeat(63);
    let longest = [long_label.as_str(); 4].join(".") + ".b"; // 255 > 253: cut
    let cut_at_dash = format!("{}-{}", "x".repeat(235), "y".repeat(17));
    let cut_at_dot = format!("{}.{}", "x".repeat(235), "y".repeat(17));
    for object in [
        "worker-3",
        "ip-10-0-3-17.eu-west-1.compute.internal",
        &longest[..253],
        &cut_at_dash,
        &cut_at_dot,
        "",
        "Not_A_Name",
        "ünïcode",
    ] {
        let name = series_name(object, &["n", "r"]);
        assert!(is_dns_subdomain(&name), "{object:?} gave {name:?}");
        assert!(name.len() <= 253, "{}", name.len());
        assert_eq!(name.rsplit_once('.').map(|(_, h)| h.len()), Some(16), "{name}");
    }
    assert!(series_name("", &[]).starts_with("nodemedic."));
    assert!(series_name("Not_A_Name", &[]).starts_with("nodemedic."));
    assert!(series_name(&cut_at_dash, &[]).starts_with(&"x".repeat(235)));
    for bad in ["", "-a", "a-", "a..b", "A", "a_b", ".a", &"a".repeat(254)] {
        assert!(!is_dns_subdomain(bad), "{bad:?}");
    }
}

#[tokio::test]
async fn cluster_findings_are_one_series_whichever_agent_probes() {
    let f = |node: &str| finding(CLUSTER_RULES[0], Subject::node(node)).with("problem", "slow");
    let a = name_of(&recorder("worker-3"), &f("worker-3"));
    let b = name_of(&recorder("worker-7"), &f("worker-7"));
    assert_eq!(a, b);
    assert!(a.starts_with("nodemedic-prober."), "{a}");
}

#[tokio::test]
async fn admission_findings_are_recorded_on_the_prober_lease_the_rest_on_their_subject() {
    let config = kube::Config::new("http://127.0.0.1:9".parse().unwrap());
    let client = kube::Client::try_from(config).unwrap();
    let recorder = EventRecorder::new(client, "worker-3", "nodemedic-x", Duration::from_secs(600))
        .with_cluster_object(lease_reference("nodemedic", "nodemedic-prober"));
    for rule in CLUSTER_RULES {
        let r = recorder.reference(&finding(*rule, Subject::node("worker-3")));
        assert_eq!(
            (
                r.api_version.as_deref(),
                r.kind.as_deref(),
                r.namespace.as_deref(),
                r.name.as_deref()
            ),
            (
                Some("coordination.k8s.io/v1"),
                Some("Lease"),
                Some("nodemedic"),
                Some("nodemedic-prober")
            ),
            "{rule}"
        );
    }
    let node_finding = recorder.reference(&finding("stale-cpu-assignment", Subject::node("worker-3")));
    assert_eq!(
        (node_finding.kind.as_deref(), node_finding.name.as_deref()),
        (Some("Node"), Some("worker-3"))
    );
}

/// Event names are how a restarted agent finds its series, so the hashed identity text must
/// never move. These names were computed by the `|`-joined string key this type replaced
/// (rule, kind, UID else name, container, `evidence["problem"]`), for every shape of identity.
#[tokio::test]
async fn series_names_are_those_of_the_string_keys_they_replaced() {
    let rec = recorder("worker-3");
    let pod = Subject {
        kind: SubjectKind::Pod,
        namespace: Some("spark".into()),
        name: Some("exec-1".into()),
        uid: Some("u1".into()),
        container: Some("app".into()),
    };
    let claim = Subject {
        kind: SubjectKind::ResourceClaim,
        namespace: Some("ml".into()),
        name: Some("gpu".into()),
        uid: None,
        container: None,
    };
    let cases = [
        finding("orphaned-executor", pod.clone()),
        finding("orphaned-executor", Subject { container: None, ..pod }),
        finding("checkpoint-invalid-state", Subject::node("worker-3")).with("problem", "cpus-mismatch"),
        finding("stale-cpu-assignment", Subject::node("worker-3")),
        finding("stale-dra-claim", claim),
        finding(CLUSTER_RULES[0], Subject::node("worker-3")).with("problem", "slow"),
        finding(CLUSTER_RULES[0], Subject::node("worker-3")),
    ];
    let names: Vec<String> = cases.iter().map(|f| name_of(&rec, f)).collect();
    assert_eq!(
        names,
        [
            "exec-1.bfc43b057457d038",
            "exec-1.98df045d5b77a971",
            "worker-3.dfdbf5a9425c7031",
            "worker-3.7f04a2ec44aaa981",
            "worker-3.cdf6e76d4a7c2e17",
            "nodemedic-prober.07a8e18d8ba6171e",
            "nodemedic-prober.79c8a21e0345c991",
        ]
    );
}
