//! Bounded file reads with errors that name the file.
//!
//! Host files are small (a cgroup file, a status file, a checkpoint); a read that would
//! load more than the caller's limit is refused instead, so a corrupt or hostile file cannot
//! make the agent balloon.

use std::fmt::Display;
use std::io::{ErrorKind, Read};
use std::path::Path;

/// Why a host file could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("{path}: {source}")]
    Io { path: String, source: std::io::Error },
    #[error("{path}: is a directory, not a file")]
    IsDir { path: String },
    #[error("{path}: larger than the {limit}-byte limit for this file")]
    TooLarge { path: String, limit: u64 },
    #[error("{path}: not UTF-8 text")]
    NotUtf8 { path: String },
}

impl ReadError {
    /// Whether the file vanished (between listing and reading, or never was).
    pub fn is_not_found(&self) -> bool {
        matches!(self, ReadError::Io { source, .. } if source.kind() == ErrorKind::NotFound)
    }
}

/// Reads at most `limit` bytes of `path`; `Ok(None)` when it does not exist.
/// `shown` is the path as reported (the host's view), formatted only for an error.
pub fn read_bytes(path: &Path, shown: &dyn Display, limit: u64) -> Result<Option<Vec<u8>>, ReadError> {
    with_bytes(path, shown, limit, <[u8]>::to_vec)
}

/// Reads at most `limit` bytes of `path` and hands them to `parse`, without a copy: the bytes
/// are in a buffer this thread keeps. `Ok(None)` when the file does not exist; `shown` as for
/// [`read_bytes`]. A `parse` that itself reads a file gets a buffer of its own for that.
pub fn with_bytes<T>(
    path: &Path,
    shown: &dyn Display,
    limit: u64,
    parse: impl FnOnce(&[u8]) -> T,
) -> Result<Option<T>, ReadError> {
    let io = |source: std::io::Error| ReadError::Io {
        path: shown.to_string(),
        source,
    };
    trace::file(path);
    let file = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io(e)),
    };
    // No fstat: a directory shows itself by EISDIR on read, and procfs, sysfs and cgroupfs
    // report size 0 anyway, so the limit is enforced by reading one byte past it. The bytes go
    // to a buffer this thread keeps: a fresh empty `Vec` would be read into 32 bytes at first
    // and then doubled, five `read` calls for a 167-byte status file where two do (a scan
    // reads 3,500 such files).
    thread_local! {
        static BUFFER: std::cell::RefCell<Vec<u8>> = std::cell::RefCell::new(Vec::with_capacity(READ_BUFFER));
    }
    let read_into = |buf: &mut Vec<u8>| -> Result<T, ReadError> {
        buf.clear();
        file.take(limit + 1).read_to_end(buf).map_err(|e| match e.kind() {
            ErrorKind::IsADirectory => ReadError::IsDir {
                path: shown.to_string(),
            },
            _ => io(e),
        })?;
        if buf.len() as u64 > limit {
            return Err(ReadError::TooLarge {
                path: shown.to_string(),
                limit,
            });
        }
        Ok(parse(buf))
    };
    BUFFER
        .with(|cell| match cell.try_borrow_mut() {
            Ok(mut buf) => {
                let result = read_into(&mut buf);
                if buf.capacity() > READ_BUFFER_KEPT {
                    *buf = Vec::with_capacity(READ_BUFFER);
                }
                result
            }
            // Already lent out (a parse that reads): a buffer of its own.
            Err(_) => read_into(&mut Vec::new()),
        })
        .map(Some)
}

/// The reading buffer's size: the files of procfs, sysfs and cgroupfs fit in one read.
const READ_BUFFER: usize = 16 * 1024;
/// A buffer grown past this (a large pods file, checkpoint) is not kept.
const READ_BUFFER_KEPT: usize = 1024 * 1024;

/// [`read_bytes`] as UTF-8 text.
pub fn read_text(path: &Path, shown: &dyn Display, limit: u64) -> Result<Option<String>, ReadError> {
    match read_bytes(path, shown, limit)? {
        None => Ok(None),
        Some(bytes) => String::from_utf8(bytes).map(Some).map_err(|_| ReadError::NotUtf8 {
            path: shown.to_string(),
        }),
    }
}

/// Lists `dir` (`std::fs::read_dir`), recorded as a listing (see [`trace`]).
pub fn list_dir(dir: &Path) -> std::io::Result<std::fs::ReadDir> {
    trace::dir(dir);
    std::fs::read_dir(dir)
}

/// `path`'s own metadata (`std::fs::symlink_metadata`), recorded as a stat.
pub fn symlink_metadata(path: &Path) -> std::io::Result<std::fs::Metadata> {
    trace::stat(path);
    std::fs::symlink_metadata(path)
}

/// `path`'s metadata, following links (`std::fs::metadata`), recorded as a stat.
pub fn metadata(path: &Path) -> std::io::Result<std::fs::Metadata> {
    trace::stat(path);
    std::fs::metadata(path)
}

/// Whether `path` is a directory, following links (`Path::is_dir`), recorded as a stat.
pub fn is_dir(path: &Path) -> bool {
    trace::stat(path);
    path.is_dir()
}

pub mod trace {
    //! What a scan did to the file system, in order, for the floor bench
    //! (`tests/src/bin/floor-bench.rs`): switched on by `nodemedic scan --record-reads FILE`
    //! (hidden), off otherwise, where each hook costs one relaxed atomic load.
    //!
    //! The collectors call [`file()`] before opening a file to read it whole
    //! ([`read_bytes`](super::read_bytes) does for every bounded read), [`dir`] before listing a
    //! directory and [`stat`] before a metadata call (a link count, `is_dir`, `is_file`, a
    //! `canonicalize`); [`list_dir`](super::list_dir), [`is_dir`](super::is_dir),
    //! [`metadata`](super::metadata) and [`symlink_metadata`](super::symlink_metadata) record
    //! and make the call in one. An attempt is recorded whether or not it succeeds: a missing
    //! file costs its lookup too. `tests/tests/floor.rs` runs a scan under `strace` and fails
    //! when it touches a path under the host root that is not recorded as often as it was
    //! touched.

    use std::path::{Path, PathBuf};
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicBool, Ordering};

    static ON: AtomicBool = AtomicBool::new(false);
    /// Held by a test that starts and stops the recorder, which is process-wide, so that
    /// another test's [`stop`] does not end its recording (under `cargo test`'s threads).
    #[cfg(test)]
    pub(crate) static TEST_LOCK: Mutex<()> = Mutex::new(());
    static OPS: Mutex<Vec<(Op, PathBuf)>> = Mutex::new(Vec::new());

    /// One kind of file-system operation.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum Op {
        /// A file opened and read to its end (or its limit).
        Read,
        /// A directory listed.
        List,
        /// A metadata call.
        Stat,
    }

    impl Op {
        /// The word of a recorded line.
        pub fn as_str(self) -> &'static str {
            match self {
                Op::Read => "read",
                Op::List => "list",
                Op::Stat => "stat",
            }
        }
    }

    /// Starts recording (process-wide).
    pub fn start() {
        ON.store(true, Ordering::Relaxed);
    }

    /// Stops recording and returns what was recorded, in order.
    pub fn stop() -> Vec<(Op, PathBuf)> {
        ON.store(false, Ordering::Relaxed);
        OPS.lock().map(|mut ops| std::mem::take(&mut *ops)).unwrap_or_default()
    }

    /// Whether recording is on: a caller that would build a path only to record it asks first.
    #[inline]
    pub fn on() -> bool {
        ON.load(Ordering::Relaxed)
    }

    fn record(op: Op, path: &Path) {
        if ON.load(Ordering::Relaxed) {
            if let Ok(mut ops) = OPS.lock() {
                ops.push((op, path.to_path_buf()));
            }
        }
    }

    /// A file about to be opened and read.
    #[inline]
    pub fn file(path: &Path) {
        record(Op::Read, path);
    }

    /// A directory about to be listed.
    #[inline]
    pub fn dir(path: &Path) {
        record(Op::List, path);
    }

    /// A path about to be looked at without being opened (metadata).
    #[inline]
    pub fn stat(path: &Path) {
        record(Op::Stat, path);
    }

    /// Writes `ops` one a line, `<op> <path>`; a backslash or a newline in a path is
    /// written `\\` or `\\n` (see [`parse_line`]).
    pub fn write(out: &mut impl std::io::Write, ops: &[(Op, PathBuf)]) -> std::io::Result<()> {
        use std::os::unix::ffi::OsStrExt as _;
        for (op, path) in ops {
            out.write_all(op.as_str().as_bytes())?;
            out.write_all(b" ")?;
            for &b in path.as_os_str().as_bytes() {
                match b {
                    b'\\' => out.write_all(b"\\\\")?,
                    b'\n' => out.write_all(b"\\n")?,
                    _ => out.write_all(&[b])?,
                }
            }
            out.write_all(b"\n")?;
        }
        out.flush()
    }

    /// One line written by [`write()`] (without its newline) back as an operation and a path.
    pub fn parse_line(line: &[u8]) -> Option<(Op, PathBuf)> {
        use std::os::unix::ffi::OsStringExt as _;
        let space = line.iter().position(|b| *b == b' ')?;
        let op = match &line[..space] {
            b"read" => Op::Read,
            b"list" => Op::List,
            b"stat" => Op::Stat,
            _ => return None,
        };
        let mut path = Vec::with_capacity(line.len() - space);
        let mut bytes = line[space + 1..].iter();
        while let Some(&b) = bytes.next() {
            path.push(match (b, bytes.clone().next()) {
                (b'\\', Some(b'n')) => {
                    bytes.next();
                    b'\n'
                }
                (b'\\', Some(b'\\')) => {
                    bytes.next();
                    b'\\'
                }
                _ => b,
            });
        }
        Some((op, PathBuf::from(std::ffi::OsString::from_vec(path))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_and_errors_name_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("f");
        std::fs::write(&f, b"12345").unwrap();
        assert_eq!(read_text(&f, &"/f", 5).unwrap().as_deref(), Some("12345"));
        let err = read_text(&f, &"/f", 4).unwrap_err().to_string();
        assert_eq!(err, "/f: larger than the 4-byte limit for this file");
        assert!(read_text(&dir.path().join("nope"), &"/nope", 5).unwrap().is_none());
        assert_eq!(
            read_text(dir.path(), &"/d", 5).unwrap_err().to_string(),
            "/d: is a directory, not a file"
        );
        std::fs::write(&f, b"\xff\xfe").unwrap();
        assert_eq!(read_text(&f, &"/f", 5).unwrap_err().to_string(), "/f: not UTF-8 text");
    }

    /// The bytes are handed over as read, without a copy; a parse that reads another file
    /// meanwhile gets its own buffer (no panic, both right); the limit holds.
    #[test]
    fn bytes_are_lent_and_a_nested_read_gets_its_own_buffer() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a"), dir.path().join("b"));
        std::fs::write(&a, b"outer").unwrap();
        std::fs::write(&b, b"inner").unwrap();
        let got = with_bytes(&a, &"/a", 16, |outer| {
            let inner = with_bytes(&b, &"/b", 16, <[u8]>::to_vec).unwrap().unwrap();
            (outer.to_vec(), inner)
        })
        .unwrap()
        .unwrap();
        assert_eq!(got, (b"outer".to_vec(), b"inner".to_vec()));
        assert_eq!(with_bytes(&a, &"/a", 16, <[u8]>::len).unwrap(), Some(5));
        assert!(
            with_bytes(&dir.path().join("none"), &"/none", 16, <[u8]>::len)
                .unwrap()
                .is_none()
        );
        let err = with_bytes(&a, &"/a", 4, <[u8]>::len).unwrap_err().to_string();
        assert_eq!(err, "/a: larger than the 4-byte limit for this file");
    }

    #[test]
    fn the_recorder_lists_what_was_read_and_listed() {
        use trace::Op;
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("f");
        std::fs::write(&f, b"1").unwrap();
        // Off: nothing is kept.
        assert_eq!(read_text(&f, &"/f", 5).unwrap().as_deref(), Some("1"));
        let _one_recording = trace::TEST_LOCK.lock().unwrap_or_else(|e| e.into_inner());
        trace::start();
        assert_eq!(read_text(&f, &"/f", 5).unwrap().as_deref(), Some("1"));
        std::fs::create_dir(dir.path().join("proc")).unwrap();
        let host = crate::host::HostPaths::new(dir.path(), None);
        assert!(super::super::procfs::list_pids(&host).unwrap().is_empty());
        let odd = dir.path().join("a\\b\nc");
        trace::stat(&odd);
        let ops = trace::stop();
        // Other tests of this binary may read files meanwhile (the recorder is process-wide).
        let mine: Vec<_> = ops.into_iter().filter(|(_, p)| p.starts_with(dir.path())).collect();
        assert_eq!(mine, [(Op::Read, f.clone()), (Op::List, host.proc()), (Op::Stat, odd)]);
        let mut text = Vec::new();
        trace::write(&mut text, &mine).unwrap();
        let back: Vec<_> = text
            .split(|b| *b == b'\n')
            .filter(|l| !l.is_empty())
            .map(trace::parse_line)
            .collect();
        assert_eq!(back.len(), 3);
        assert!(back.iter().zip(&mine).all(|(b, m)| b.as_ref() == Some(m)));
        assert!(trace::parse_line(b"open /x").is_none());
    }
}
