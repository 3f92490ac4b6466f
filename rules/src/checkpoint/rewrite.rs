//! Rewriting a checkpoint without some of its entries: the pure half of `nodemedic repair
//! cpu-state`. Every value that stays keeps the very string the file had (the kubelet hashes
//! strings as written, so a live entry written `"5,4"` stays `"5,4"`); only the new default set
//! is given by the caller, and the checksum is the one a writer uses.

use super::checksum::{self, Candidate};
use super::{Checkpoint, Entries, EntryKey, PodEntries};

/// An entry of the checkpoint, by what the kubelet keys it on.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Target {
    /// A V2/V3 container entry, `entries[pod_uid][container]`.
    Container { pod_uid: String, container: String },
    /// A V1 entry, `entries[container_id]`.
    ContainerId { container_id: String },
    /// A V3 pod-level entry, `podEntries[pod_uid]`.
    Pod { pod_uid: String },
}

impl Target {
    /// The target of an assignment's key.
    pub fn of_key(key: &EntryKey) -> Target {
        match key {
            EntryKey::Container { pod_uid, container } => Target::Container {
                pod_uid: pod_uid.clone(),
                container: container.clone(),
            },
            EntryKey::ContainerId { container_id } => Target::ContainerId {
                container_id: container_id.clone(),
            },
        }
    }

    /// The pod UID, when the entry names one.
    pub fn pod_uid(&self) -> Option<&str> {
        match self {
            Target::Container { pod_uid, .. } | Target::Pod { pod_uid } => Some(pod_uid),
            Target::ContainerId { .. } => None,
        }
    }

    /// `pod <uid> container <name>`, `container id <id>`, `pod <uid> (pod-level)`.
    pub fn display(&self) -> String {
        match self {
            Target::Container { pod_uid, container } => format!("pod {pod_uid} container {container}"),
            Target::ContainerId { container_id } => format!("container id {container_id}"),
            Target::Pod { pod_uid } => format!("pod {pod_uid} (pod-level)"),
        }
    }

    /// The entry's cpuset string as written in `cp`, when it is there.
    pub fn raw_in(&self, cp: &Checkpoint) -> Option<String> {
        let cp = cp.effective();
        match (self, &cp.entries, &cp.pod_entries) {
            (Target::Container { pod_uid, container }, Entries::ByPod(map), _) => {
                map.get(pod_uid)?.as_ref()?.get(container).cloned()
            }
            (Target::ContainerId { container_id }, Entries::ByContainerId(map), _) => map.get(container_id).cloned(),
            (Target::Pod { pod_uid }, _, PodEntries::Map(map)) => map.get(pod_uid).cloned(),
            _ => None,
        }
    }
}

/// The checkpoint `cp` with `targets` removed and `defaultCpuSet` set to `default`, with the
/// checksum of the layout a writer uses: V1 for a V1 file, V3 when pod entries remain, else
/// V2, always under the name `CPUManagerCheckpoint` (docs/kubelet.md, "The checksum"). Every other value
/// keeps its raw text.
pub fn rewrite(cp: &Checkpoint, targets: &[Target], default: &str) -> (Checkpoint, Candidate) {
    let src = cp.effective();
    let v1 = matches!(src.entries, Entries::ByContainerId(_));
    let entries = match &src.entries {
        Entries::Absent | Entries::Null => Entries::Absent,
        Entries::ByContainerId(map) => {
            let mut map = map.clone();
            for t in targets {
                if let Target::ContainerId { container_id } = t {
                    map.remove(container_id);
                }
            }
            if map.is_empty() {
                Entries::Absent
            } else {
                Entries::ByContainerId(map)
            }
        }
        Entries::ByPod(map) => {
            let mut map = map.clone();
            for t in targets {
                if let Target::Container { pod_uid, container } = t {
                    if let Some(Some(containers)) = map.get_mut(pod_uid) {
                        containers.remove(container);
                        // The kubelet drops a pod whose last container it unassigns.
                        if containers.is_empty() {
                            map.remove(pod_uid);
                        }
                    }
                }
            }
            if map.is_empty() {
                Entries::Absent
            } else {
                Entries::ByPod(map)
            }
        }
    };
    let pod_entries = match &src.pod_entries {
        PodEntries::Map(map) => {
            let mut map = map.clone();
            for t in targets {
                if let Target::Pod { pod_uid } = t {
                    map.remove(pod_uid);
                }
            }
            if map.is_empty() {
                PodEntries::Absent
            } else {
                PodEntries::Map(map)
            }
        }
        PodEntries::Absent | PodEntries::Null => PodEntries::Absent,
    };
    let mut out = Checkpoint {
        policy_name: src.policy_name.clone(),
        default_cpu_set: default.to_string(),
        entries,
        pod_entries,
        checksum: 0,
        v4: None,
    };
    let candidate = if v1 {
        Candidate::V1
    } else if matches!(out.pod_entries, PodEntries::Map(_)) {
        Candidate::V3
    } else {
        Candidate::V2
    };
    out.checksum = checksum::checksum(&out, candidate).map_or(0, u64::from);
    (out, candidate)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    use crate::{CpuSet, Verification};

    fn raw_v2(default: &str, entries: &[(&str, &str, &str)], pod_entries: &[(&str, &str)]) -> Checkpoint {
        let mut pods: BTreeMap<String, Option<BTreeMap<String, String>>> = BTreeMap::new();
        for (p, c, cpus) in entries {
            pods.entry(p.to_string())
                .or_insert_with(|| Some(BTreeMap::new()))
                .as_mut()
                .unwrap()
                .insert(c.to_string(), cpus.to_string());
        }
        let mut cp = Checkpoint {
            policy_name: "static".into(),
            default_cpu_set: default.into(),
            entries: if pods.is_empty() {
                Entries::Absent
            } else {
                Entries::ByPod(pods)
            },
            pod_entries: if pod_entries.is_empty() {
                PodEntries::Absent
            } else {
                PodEntries::Map(
                    pod_entries
                        .iter()
                        .map(|(u, c)| (u.to_string(), c.to_string()))
                        .collect(),
                )
            },
            checksum: 0,
            v4: None,
        };
        let cand = if pod_entries.is_empty() {
            Candidate::V2
        } else {
            Candidate::V3
        };
        cp.checksum = u64::from(checksum::checksum(&cp, cand).unwrap());
        cp
    }

    fn container(p: &str, c: &str) -> Target {
        Target::Container {
            pod_uid: p.into(),
            container: c.into(),
        }
    }

    #[test]
    fn rewrite_keeps_raw_strings_and_verifies_as_v2() {
        // A live entry written non-canonically ("5,4"): it stays exactly so.
        let cp = raw_v2(
            "0-1",
            &[("live", "app", "5,4"), ("gone", "app", "2-3"), ("live", "side", "6")],
            &[],
        );
        assert!(matches!(cp.verify(), Verification::Matched { layout: "V2", .. }));
        let (out, cand) = rewrite(&cp, &[container("gone", "app")], "0-3");
        assert_eq!(cand, Candidate::V2);
        let text = out.to_json();
        assert_eq!(
            text,
            format!(
                r#"{{"policyName":"static","defaultCpuSet":"0-3","entries":{{"live":{{"app":"5,4","side":"6"}}}},"checksum":{}}}"#,
                out.checksum
            )
        );
        let back = Checkpoint::parse(text.as_bytes()).unwrap();
        assert_eq!(
            back.verify(),
            Verification::Matched {
                layout: "V2",
                type_name: "CPUManagerCheckpoint",
                v4: false
            }
        );
    }

    #[test]
    fn rewrite_drops_empty_pods_and_pod_level_entries() {
        let cp = raw_v2("0", &[("a", "c", "1"), ("b", "c", "2")], &[("p1", "3-4"), ("p2", "5")]);
        assert!(matches!(cp.verify(), Verification::Matched { layout: "V3", .. }));
        // One pod-level entry left: still V3.
        let (out, cand) = rewrite(
            &cp,
            &[container("a", "c"), Target::Pod { pod_uid: "p1".into() }],
            "0-1,3-4",
        );
        assert_eq!(cand, Candidate::V3);
        let back = Checkpoint::parse(out.to_json().as_bytes()).unwrap();
        assert!(matches!(
            back.verify(),
            Verification::Matched {
                layout: "V3",
                type_name: "CPUManagerCheckpoint",
                ..
            }
        ));
        let s = back.state().unwrap();
        assert_eq!(s.assignments.len(), 1);
        assert_eq!(s.pod_assignments, [("p2".to_string(), CpuSet::parse("5").unwrap())]);
        // None left: V2, no podEntries and no entries keys.
        let (out, cand) = rewrite(
            &cp,
            &[
                container("a", "c"),
                container("b", "c"),
                Target::Pod { pod_uid: "p1".into() },
                Target::Pod { pod_uid: "p2".into() },
            ],
            "0-5",
        );
        assert_eq!(cand, Candidate::V2);
        let text = out.to_json();
        assert!(
            text.starts_with(r#"{"policyName":"static","defaultCpuSet":"0-5","checksum":"#),
            "{text}"
        );
        assert!(Checkpoint::parse(text.as_bytes()).unwrap().verify().accepted());
    }

    #[test]
    fn rewrite_v1_stays_v1() {
        let text = r#"{"policyName":"static","defaultCpuSet":"7-9","entries":{"containerID1":"4-6","containerID2":"1-3"},"checksum":2026311253}"#;
        let cp = Checkpoint::parse(text.as_bytes()).unwrap();
        let (out, cand) = rewrite(
            &cp,
            &[Target::ContainerId {
                container_id: "containerID2".into(),
            }],
            "1-3,7-9",
        );
        assert_eq!(cand, Candidate::V1);
        let back = Checkpoint::parse(out.to_json().as_bytes()).unwrap();
        assert!(matches!(back.verify(), Verification::Matched { layout: "V1", .. }));
        let (out, _) = rewrite(
            &cp,
            &[
                Target::ContainerId {
                    container_id: "containerID1".into(),
                },
                Target::ContainerId {
                    container_id: "containerID2".into(),
                },
            ],
            "1-9",
        );
        let back = Checkpoint::parse(out.to_json().as_bytes()).unwrap();
        assert!(matches!(back.verify(), Verification::Matched { layout: "V1", .. }));
    }
}
