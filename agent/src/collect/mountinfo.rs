//! The host's mount table (`/proc/1/mountinfo`, through the `/proc` mount the agent already
//! has): which file system holds a host path the agent cannot see, such as the container
//! runtime's image store, so that `local-storage-eviction-risk` knows whether the kubelet's
//! `imagefs.available` threshold applies to the disk Spark's emptyDirs are on.
//!
//! A line is `ID PARENT MAJOR:MINOR ROOT MOUNT_POINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE
//! SUPER_OPTIONS` (proc(5)); spaces, tabs, newlines and backslashes in paths are written as
//! octal escapes (`\040`). Two mounts are of one file system when their `MAJOR:MINOR` are the
//! same (the super block's device: the same for every bind mount and btrfs subvolume of it).

use nodemedic_rules::snapshot::ImageFs;

use crate::host::HostPaths;

/// One mount of the host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mount {
    /// The super block's device, `MAJOR:MINOR`.
    pub device: (u32, u32),
    /// Where it is mounted, unescaped.
    pub mount_point: String,
    pub fstype: String,
}

/// `\040` and the like back to their bytes.
fn unescape(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\' && i + 3 < bytes.len() && bytes[i + 1..i + 4].iter().all(|b| (b'0'..=b'7').contains(b)) {
            let v = (bytes[i + 1] - b'0') as u32 * 64 + (bytes[i + 2] - b'0') as u32 * 8 + (bytes[i + 3] - b'0') as u32;
            if let Ok(b) = u8::try_from(v) {
                out.push(b);
                i += 4;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The mounts of a `mountinfo` text, in its order; a line that does not parse is named in the
/// error (line number and text).
pub fn parse(text: &str) -> Result<Vec<Mount>, String> {
    let mut mounts = Vec::new();
    for (n, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let bad = || format!("line {}: {line:?} is not a mountinfo line", n + 1);
        let fields: Vec<&str> = line.split(' ').collect();
        let device = fields
            .get(2)
            .and_then(|d| d.split_once(':'))
            .and_then(|(a, b)| Some((a.parse().ok()?, b.parse().ok()?)))
            .ok_or_else(bad)?;
        let mount_point = fields.get(4).map(|m| unescape(m)).ok_or_else(bad)?;
        let dash = fields.iter().skip(6).position(|f| *f == "-").ok_or_else(bad)? + 6;
        let fstype = fields.get(dash + 1).map(|f| unescape(f)).ok_or_else(bad)?;
        mounts.push(Mount {
            device,
            mount_point,
            fstype,
        });
    }
    Ok(mounts)
}

/// Whether `path` is `prefix` or below it, component by component.
fn is_below(path: &str, prefix: &str) -> bool {
    let prefix = prefix.trim_end_matches('/');
    prefix.is_empty() || path == prefix || path.strip_prefix(prefix).is_some_and(|rest| rest.starts_with('/'))
}

/// The mount that holds host path `path`: the deepest mount point above it, the last mounted
/// where several share one (a later mount hides an earlier one).
pub fn holding<'a>(mounts: &'a [Mount], path: &str) -> Option<&'a Mount> {
    mounts
        .iter()
        .enumerate()
        .filter(|(_, m)| is_below(path, &m.mount_point))
        .max_by_key(|(i, m)| (m.mount_point.trim_end_matches('/').len(), *i))
        .map(|(_, m)| m)
}

/// Where the runtime behind a CRI endpoint keeps its images (what it reports to the kubelet as
/// the image file system): containerd's overlayfs snapshotter, CRI-O's storage root, docker's
/// data root, each at its default; `None` for a runtime nodemedic does not know.
pub fn image_store(endpoint: &str) -> Option<&'static str> {
    let socket = endpoint.rsplit('/').next().unwrap_or(endpoint);
    if socket.contains("containerd") {
        Some("/var/lib/containerd/io.containerd.snapshotter.v1.overlayfs")
    } else if socket.contains("crio") {
        Some("/var/lib/containers/storage")
    } else if socket.contains("dockerd") || socket.contains("docker") {
        Some("/var/lib/docker")
    } else {
        None
    }
}

/// Whether the runtime's images (behind `endpoint`, the kubelet's `containerRuntimeEndpoint`)
/// are on the file system of `kubelet_dir` (a host path), from the host's mount table.
pub fn image_fs(host: &HostPaths, kubelet_dir: &str, endpoint: Option<&str>) -> ImageFs {
    let Some(endpoint) = endpoint else {
        return ImageFs::Unknown {
            reason: "the kubelet's configuration was not read, so its runtime is not known".into(),
        };
    };
    let Some(store) = image_store(endpoint) else {
        return ImageFs::Unknown {
            reason: format!("where the runtime behind {endpoint} keeps its images is not known to nodemedic"),
        };
    };
    let path = host.proc().join("1/mountinfo");
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) => {
            return ImageFs::Unknown {
                reason: format!("{}: {e}", host.display(&path)),
            };
        }
    };
    let mounts = match parse(&text) {
        Ok(m) => m,
        Err(e) => {
            return ImageFs::Unknown {
                reason: format!("{}: {e}", host.display(&path)),
            };
        }
    };
    match (holding(&mounts, kubelet_dir), holding(&mounts, store)) {
        (Some(k), Some(i)) if k.device == i.device => ImageFs::Shared { path: store.into() },
        (Some(_), Some(_)) => ImageFs::Dedicated { path: store.into() },
        _ => ImageFs::Unknown {
            reason: format!("{} has no mount holding {kubelet_dir} and {store}", host.display(&path)),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A node's table: / on sda1, /var/lib/containerd on its own disk (nvme), the kubelet's
    /// directory on /, a pod's tmpfs below it, a bind mount with a space in its path.
    const TABLE: &str = "\
22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw
25 22 0:21 / /proc rw,nosuid,nodev,noexec,relatime shared:12 - proc proc rw
30 22 259:2 / /var/lib/containerd rw,relatime shared:15 - xfs /dev/nvme0n1p1 rw,attr2
41 22 0:45 / /var/lib/kubelet/pods/0c1d/volumes/kubernetes.io~empty-dir/spark-local-dir-1 rw,relatime shared:20 - tmpfs tmpfs rw,size=1048576k
42 22 8:1 /srv/spark\\040data /mnt/spark\\040data rw,relatime shared:1 - ext4 /dev/sda1 rw
";

    fn host_with(table: Option<&str>) -> (tempfile::TempDir, HostPaths) {
        let dir = tempfile::tempdir().unwrap();
        if let Some(t) = table {
            std::fs::create_dir_all(dir.path().join("proc/1")).unwrap();
            std::fs::write(dir.path().join("proc/1/mountinfo"), t).unwrap();
        }
        let host = HostPaths::new(dir.path(), None);
        (dir, host)
    }

    #[test]
    fn the_mount_holding_a_path_is_the_deepest() {
        let mounts = parse(TABLE).unwrap();
        assert_eq!(mounts.len(), 5);
        assert_eq!(mounts[4].mount_point, "/mnt/spark data");
        assert_eq!(mounts[3].fstype, "tmpfs");
        let dev = |p: &str| holding(&mounts, p).map(|m| m.device);
        assert_eq!(dev("/var/lib/kubelet"), Some((8, 1)));
        assert_eq!(
            dev("/var/lib/containerd/io.containerd.snapshotter.v1.overlayfs"),
            Some((259, 2))
        );
        // A sibling whose name only starts like a mount point is not below it.
        assert_eq!(dev("/var/lib/containerd-old"), Some((8, 1)));
        assert_eq!(
            dev("/var/lib/kubelet/pods/0c1d/volumes/kubernetes.io~empty-dir/spark-local-dir-1/blockmgr-1"),
            Some((0, 45))
        );
        assert_eq!(dev("/mnt/spark data/x"), Some((8, 1)));
        // A later mount on the same point hides the earlier one.
        let stacked = parse(&format!(
            "{TABLE}50 30 0:60 / /var/lib/containerd rw - overlay overlay rw\n"
        ))
        .unwrap();
        assert_eq!(
            holding(&stacked, "/var/lib/containerd/x").map(|m| m.device),
            Some((0, 60))
        );
    }

    #[test]
    fn a_broken_line_is_named() {
        let err = parse("22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw\n23 1 garbage\n").unwrap_err();
        assert_eq!(err, "line 2: \"23 1 garbage\" is not a mountinfo line");
        // No separator.
        assert!(parse("22 1 8:1 / / rw,relatime shared:1 ext4 /dev/sda1 rw\n").is_err());
    }

    #[test]
    fn runtimes_keep_their_images_where_they_report_them() {
        assert_eq!(
            image_store("unix:///run/containerd/containerd.sock"),
            Some("/var/lib/containerd/io.containerd.snapshotter.v1.overlayfs")
        );
        assert_eq!(
            image_store("unix:///var/run/crio/crio.sock"),
            Some("/var/lib/containers/storage")
        );
        assert_eq!(image_store("unix:///var/run/cri-dockerd.sock"), Some("/var/lib/docker"));
        assert_eq!(image_store("unix:///run/k3s/other/runtime.sock"), None);
    }

    #[test]
    fn shared_dedicated_or_unknown_from_the_hosts_table() {
        let containerd = Some("unix:///run/containerd/containerd.sock");
        let (_d, host) = host_with(Some(TABLE));
        assert_eq!(
            image_fs(&host, "/var/lib/kubelet", containerd),
            ImageFs::Dedicated {
                path: "/var/lib/containerd/io.containerd.snapshotter.v1.overlayfs".into()
            }
        );
        // CRI-O's storage is on /, as the kubelet's directory.
        assert_eq!(
            image_fs(&host, "/var/lib/kubelet", Some("unix:///var/run/crio/crio.sock")),
            ImageFs::Shared {
                path: "/var/lib/containers/storage".into()
            }
        );
        // A kubelet directory on the images' disk shares it.
        assert!(matches!(
            image_fs(&host, "/var/lib/containerd/kubelet", containerd),
            ImageFs::Shared { .. }
        ));
        // Not known: no configuration, an unknown runtime, no table, a broken table.
        let unknown = |f: ImageFs| match f {
            ImageFs::Unknown { reason } => reason,
            other => panic!("{other:?}"),
        };
        assert!(unknown(image_fs(&host, "/var/lib/kubelet", None)).contains("not read"));
        assert!(unknown(image_fs(&host, "/var/lib/kubelet", Some("unix:///run/other.sock"))).contains("other.sock"));
        let (_e, bare) = host_with(None);
        assert!(unknown(image_fs(&bare, "/var/lib/kubelet", containerd)).starts_with("/proc/1/mountinfo: "));
        let (_f, broken) = host_with(Some("nonsense\n"));
        assert!(unknown(image_fs(&broken, "/var/lib/kubelet", containerd)).contains("line 1"));
    }
}
