//! Spark scratch directories on the node (apache/spark `LocalDirsFeatureStep.scala`; docs/rules/orphaned-local-dir.md).
//!
//! Spark writes `blockmgr-<uuid>` and `spark-<uuid>` directories into each local dir. On
//! Kubernetes a local dir is an emptyDir volume named `spark-local-dir-N`, which lives at
//! `<kubelet dir>/pods/<pod uid>/volumes/kubernetes.io~empty-dir/spark-local-dir-N/`, or a
//! hostPath the user mounts (configured here as roots). Each such directory is measured
//! (bytes, newest mtime) without following symlinks; a root that is itself a symlink is
//! skipped and noted, since nothing nodemedic does may leave a root.

use std::path::Path;

use nodemedic_rules::snapshot::{LocalDir, Observed};

use crate::host::HostPaths;

/// At most this many entries are visited below one scratch directory; past it the size is
/// a lower bound and a note says so.
const MAX_ENTRIES: usize = 200_000;

/// Whether a directory name is one Spark creates in a local dir.
pub fn is_spark_scratch_name(name: &str) -> bool {
    name.starts_with("blockmgr-") || name.starts_with("spark-")
}

/// Bytes and newest mtime below `dir`, symlinks not followed; `truncated` when the walk
/// stopped at [`MAX_ENTRIES`].
fn measure(dir: &Path) -> (u64, Option<i64>, bool) {
    use std::os::unix::fs::MetadataExt;
    let mut bytes = 0u64;
    let mut newest: Option<i64> = None;
    let mut seen = 0usize;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else { continue };
        for e in entries.flatten() {
            seen += 1;
            if seen > MAX_ENTRIES {
                return (bytes, newest, true);
            }
            let Ok(meta) = std::fs::symlink_metadata(e.path()) else {
                continue;
            };
            newest = newest.max(Some(meta.mtime()));
            if meta.file_type().is_dir() {
                stack.push(e.path());
            } else if meta.file_type().is_file() {
                bytes += meta.len();
            }
        }
    }
    if let Ok(meta) = std::fs::symlink_metadata(dir) {
        newest = newest.max(Some(meta.mtime()));
    }
    (bytes, newest, false)
}

fn scan_root(host: &HostPaths, root: &Path, pod_uid: Option<&str>, out: &mut Vec<LocalDir>, notes: &mut Vec<String>) {
    let Ok(entries) = std::fs::read_dir(root) else { return };
    let mut found: Vec<_> = entries
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .filter(|e| e.file_name().to_str().is_some_and(is_spark_scratch_name))
        .map(|e| e.path())
        .collect();
    found.sort();
    for dir in found {
        let (bytes, newest_mtime, truncated) = measure(&dir);
        if truncated {
            notes.push(format!(
                "{}: more than {MAX_ENTRIES} entries, size counted up to there",
                host.display(&dir)
            ));
        }
        out.push(LocalDir {
            path: host.display(&dir),
            root: host.display(root),
            pod_uid: pod_uid.map(str::to_string),
            bytes,
            newest_mtime,
        });
    }
}

/// Finds the Spark scratch directories in the kubelet's emptyDir volumes and under the
/// hostPath `roots` (host paths).
pub fn read_local_dirs(
    host: &HostPaths,
    kubelet_dir: &Path,
    roots: &[String],
    notes: &mut Vec<String>,
) -> Observed<Vec<LocalDir>> {
    let pods_dir = kubelet_dir.join("pods");
    let mut out = Vec::new();
    let pods = std::fs::read_dir(&pods_dir);
    if pods.is_err() && roots.is_empty() {
        return Observed::Missing {
            path: host.display(&pods_dir),
        };
    }
    if let Ok(pods) = pods {
        let mut uids: Vec<_> = pods
            .flatten()
            .filter_map(|e| e.file_name().to_str().map(str::to_string))
            .collect();
        uids.sort();
        for uid in uids {
            let empty_dirs = pods_dir.join(&uid).join("volumes/kubernetes.io~empty-dir");
            let Ok(vols) = std::fs::read_dir(&empty_dirs) else {
                continue;
            };
            let mut vols: Vec<_> = vols
                .flatten()
                .filter(|v| v.file_type().is_ok_and(|t| t.is_dir()))
                .filter(|v| {
                    v.file_name()
                        .to_str()
                        .is_some_and(|n| n.starts_with("spark-local-dir-"))
                })
                .map(|v| v.path())
                .collect();
            vols.sort();
            for vol in vols {
                scan_root(host, &vol, Some(&uid), &mut out, notes);
            }
        }
    }
    for root in roots {
        let local = host.host(root);
        match std::fs::symlink_metadata(&local) {
            Ok(m) if m.file_type().is_symlink() => {
                notes.push(format!("local-dir root {root} is a symlink: not followed"));
            }
            Ok(m) if m.is_dir() => scan_root(host, &local, None, &mut out, notes),
            Ok(_) => notes.push(format!("local-dir root {root} is not a directory")),
            Err(_) => {} // not on this node
        }
    }
    Observed::Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_and_measures_scratch_dirs_without_following_links() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let vol = root.join("var/lib/kubelet/pods/u1/volumes/kubernetes.io~empty-dir/spark-local-dir-1");
        std::fs::create_dir_all(vol.join("blockmgr-aa/0c")).unwrap();
        std::fs::write(vol.join("blockmgr-aa/0c/shuffle_0_1_0.data"), vec![0u8; 1000]).unwrap();
        std::fs::create_dir_all(vol.join("spark-bb")).unwrap();
        std::fs::write(vol.join("spark-bb/x"), b"12345").unwrap();
        std::fs::create_dir_all(vol.join("not-spark")).unwrap();
        let outside = root.join("outside");
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(outside.join("big"), vec![0u8; 5000]).unwrap();
        std::os::unix::fs::symlink(&outside, vol.join("spark-bb/link")).unwrap();
        std::os::unix::fs::symlink(&outside, vol.join("blockmgr-link")).unwrap();
        std::fs::create_dir_all(root.join("var/lib/kubelet/pods/u2/volumes/kubernetes.io~empty-dir/other")).unwrap();
        // A hostPath root, and a root that is a symlink.
        std::fs::create_dir_all(root.join("mnt/spark/blockmgr-cc")).unwrap();
        std::fs::write(root.join("mnt/spark/blockmgr-cc/f"), b"abc").unwrap();
        std::os::unix::fs::symlink(root.join("mnt/spark"), root.join("mnt/link")).unwrap();

        let host = HostPaths::new(root, None);
        let mut notes = vec![];
        let Observed::Ok(dirs) = read_local_dirs(
            &host,
            &host.kubelet_dir(None),
            &["/mnt/spark".into(), "/mnt/link".into(), "/mnt/none".into()],
            &mut notes,
        ) else {
            panic!()
        };
        let got: Vec<(&str, Option<&str>, u64)> = dirs
            .iter()
            .map(|d| (d.path.as_str(), d.pod_uid.as_deref(), d.bytes))
            .collect();
        assert_eq!(
            got,
            [
                (
                    "/var/lib/kubelet/pods/u1/volumes/kubernetes.io~empty-dir/spark-local-dir-1/blockmgr-aa",
                    Some("u1"),
                    1000
                ),
                (
                    "/var/lib/kubelet/pods/u1/volumes/kubernetes.io~empty-dir/spark-local-dir-1/spark-bb",
                    Some("u1"),
                    5
                ),
                ("/mnt/spark/blockmgr-cc", None, 3),
            ]
        );
        assert_eq!(dirs[2].root, "/mnt/spark");
        assert!(dirs[0].newest_mtime.is_some());
        assert_eq!(notes, ["local-dir root /mnt/link is a symlink: not followed"]);
    }

    #[test]
    fn no_kubelet_pods_dir_and_no_roots_is_missing() {
        let dir = tempfile::tempdir().unwrap();
        let host = HostPaths::new(dir.path(), None);
        assert!(matches!(
            read_local_dirs(&host, &host.kubelet_dir(None), &[], &mut vec![]),
            Observed::Missing { .. }
        ));
    }
}
