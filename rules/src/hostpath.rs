//! Host paths compared as paths, not as text: a pod may mount its local dir as `/mnt//spark`,
//! `/mnt/./spark/` or `/mnt/spark` (Kubernetes rejects only `..`), and all three are the same
//! directory. One function spells them one way, used wherever a pod's hostPath, a configured
//! local-dir root or a kubelet path is compared.

/// `path` with repeated `/` collapsed, `.` components and a trailing `/` dropped: `/mnt//./spark/`
/// is `/mnt/spark`, `///` is `/`. Lexical only: `..` components are kept as they are (resolving
/// them needs the file system, and symlinks make a lexical answer wrong), so a path with `..`
/// matches only itself. A relative path stays relative.
pub fn normalize(path: &str) -> String {
    let absolute = path.starts_with('/');
    let parts: Vec<&str> = path.split('/').filter(|p| !p.is_empty() && *p != ".").collect();
    match (absolute, parts.is_empty()) {
        (true, _) => format!("/{}", parts.join("/")),
        (false, true) => ".".to_string(),
        (false, false) => parts.join("/"),
    }
}

/// Whether `path` has a `..` component.
pub fn has_parent_component(path: &str) -> bool {
    path.split('/').any(|p| p == "..")
}

/// A file name's bytes as text that can be turned back into them ([`unescape`]): valid UTF-8
/// as it is (a `\` doubled), any other byte as `\xNN`. A directory Spark named with bytes
/// that are not UTF-8 is still scanned, shown, and found again by the repair.
pub fn escape(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len());
    for chunk in bytes.utf8_chunks() {
        for c in chunk.valid().chars() {
            if c == '\\' {
                out.push_str("\\\\");
            } else {
                out.push(c);
            }
        }
        for b in chunk.invalid() {
            out.push_str(&format!("\\x{b:02x}"));
        }
    }
    out
}

/// The bytes [`escape`] turned into `text`; text it did not make comes back as its own bytes.
pub fn unescape(text: &str) -> Vec<u8> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match (bytes[i], bytes.get(i + 1)) {
            (b'\\', Some(b'\\')) => {
                out.push(b'\\');
                i += 2;
            }
            (b'\\', Some(b'x')) => match text.get(i + 2..i + 4).and_then(|h| u8::from_str_radix(h, 16).ok()) {
                Some(b) => {
                    out.push(b);
                    i += 4;
                }
                None => {
                    out.push(b'\\');
                    i += 1;
                }
            },
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spellings_of_one_path_are_one() {
        for (given, want) in [
            ("/mnt/spark", "/mnt/spark"),
            ("/mnt//spark", "/mnt/spark"),
            ("/mnt/./spark/", "/mnt/spark"),
            ("//mnt/spark//", "/mnt/spark"),
            ("/./", "/"),
            ("///", "/"),
            ("/", "/"),
            ("/mnt/../spark", "/mnt/../spark"),
            ("mnt/./spark", "mnt/spark"),
            ("./", "."),
        ] {
            assert_eq!(normalize(given), want, "{given}");
        }
        assert!(has_parent_component("/mnt/../etc") && !has_parent_component("/mnt/..spark"));
    }

    #[test]
    fn names_that_are_not_utf8_round_trip() {
        for name in [
            b"blockmgr-1".to_vec(),
            b"spark-\xff\xfe".to_vec(),
            b"spark-a\\x41".to_vec(),
            "spark-ü with space\nnewline".as_bytes().to_vec(),
            b"\\".to_vec(),
        ] {
            let shown = escape(&name);
            assert!(std::str::from_utf8(shown.as_bytes()).is_ok());
            assert_eq!(unescape(&shown), name, "{shown}");
        }
        assert_eq!(escape(b"spark-\xff"), "spark-\\xff");
        assert_eq!(escape(b"a\\b"), "a\\\\b");
    }
}
