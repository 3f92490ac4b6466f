//! How a command writes what it has to say: the output format every command shares, and a
//! write that a closed pipe (`| head`) does not turn into a failure.

use std::io::Write;

/// Output format of a command's report and of the daemon's log.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Format {
    /// For people.
    #[default]
    Text,
    /// One JSON document on stdout (JSON lines in the log).
    Json,
}

/// Writes `text` to `out` and flushes it. A closed pipe is not an error; anything else is,
/// with what failed.
pub fn emit(out: &mut dyn Write, text: &str) -> std::io::Result<()> {
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => other,
    }
}

/// `value` as pretty JSON and a newline.
pub fn pretty_json(value: &impl serde::Serialize) -> String {
    serde_json::to_string_pretty(value).unwrap_or_default() + "\n"
}

#[cfg(test)]
mod tests {
    use super::*;

    struct ClosedPipe;

    impl Write for ClosedPipe {
        fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
            Err(std::io::ErrorKind::BrokenPipe.into())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    struct Full;

    impl Write for Full {
        fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
            Err(std::io::Error::from_raw_os_error(28))
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_closed_pipe_is_not_an_error_but_a_full_disk_is() {
        assert!(emit(&mut ClosedPipe, "x").is_ok());
        assert_eq!(emit(&mut Full, "x").unwrap_err().raw_os_error(), Some(28));
        let mut buf = Vec::new();
        emit(&mut buf, "hello").unwrap();
        assert_eq!(buf, b"hello");
        assert_eq!(pretty_json(&serde_json::json!({"a": 1})), "{\n  \"a\": 1\n}\n");
    }
}
