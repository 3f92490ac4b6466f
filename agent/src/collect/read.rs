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
    let io = |source: std::io::Error| ReadError::Io {
        path: shown.to_string(),
        source,
    };
    let file = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io(e)),
    };
    // No fstat: a directory shows itself by EISDIR on read, and procfs, sysfs and cgroupfs
    // report size 0 anyway, so the limit is enforced by reading one byte past it.
    let mut buf = Vec::new();
    file.take(limit + 1).read_to_end(&mut buf).map_err(|e| match e.kind() {
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
    Ok(Some(buf))
}

/// [`read_bytes`] as UTF-8 text.
pub fn read_text(path: &Path, shown: &dyn Display, limit: u64) -> Result<Option<String>, ReadError> {
    match read_bytes(path, shown, limit)? {
        None => Ok(None),
        Some(bytes) => String::from_utf8(bytes).map(Some).map_err(|_| ReadError::NotUtf8 {
            path: shown.to_string(),
        }),
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
}
