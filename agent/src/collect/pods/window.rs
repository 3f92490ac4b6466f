//! JSON values decoded one at a time from a bounded window over a reader.
//!
//! A pods file is a few MB at most nodes (2.4 MB at 250 pods, 9.7 MB at 1,000) and up to
//! hundreds of MB for a `kubectl get pods -A` of a large cluster. Read whole, it sat in memory
//! beside the pods decoded from it, so a scan's peak memory grew with the file; decoded from
//! a plain reader (serde_json's `from_reader`), every byte goes through the reader one call
//! at a time and every string is copied, which took twice as long. A [`Window`] holds a
//! slice of the file, [`WINDOW`] bytes to start with, and decodes each value with serde_json
//! from that slice (strings borrowed, as from memory); the caller walks the grammar between
//! values (an object's keys, an array's commas) with [`Window::peek`] and [`Window::bump`].
//!
//! A value cut by the end of the window is decoded again once the window holds more: the
//! window is refilled before a value whenever fewer than [`LOW`] bytes are left, so that only
//! a value larger than that (a pod is about 10 kB) can be cut at all, and a value larger than
//! the window makes it grow. Errors are placed in the whole document (line and column), as
//! serde_json places them when it reads the document from memory.

use std::io::Read;

use serde::Deserialize;
use serde_json::error::Category;

/// The window's first size.
pub const WINDOW: usize = 256 * 1024;

/// Before each value, the window is refilled when fewer bytes than this are left in it.
pub const LOW: usize = 32 * 1024;

/// A JSON error, placed in the whole document.
#[derive(Debug)]
pub struct Fault {
    pub category: Category,
    /// What is wrong, without the place.
    pub message: String,
    /// 1-based, as serde_json counts.
    pub line: usize,
    /// Bytes before the place on its line, as serde_json counts.
    pub column: usize,
}

impl Fault {
    /// The message with the place, worded as serde_json words it.
    pub fn placed(&self) -> String {
        format!("{} at line {} column {}", self.message, self.line, self.column)
    }
}

/// The window's bytes: as a `String` while they are all UTF-8, which serde_json decodes from
/// a `&str` without checking each string again (checking each string cost 6 M instructions
/// of a 250-pod scan, checking the window once per refill a fifth of that), else as they
/// are (serde_json then checks each string it decodes, and places bytes that are not UTF-8).
/// The buffer is zeroed once, when it is made or grows, and read into in place from then on:
/// past `end` it holds zeroes or bytes already decoded (the last read of a file fills it only
/// in part), which are checked with the rest and never decoded.
enum Held {
    Text(String),
    Bytes(Vec<u8>),
}

impl Held {
    fn bytes(&self) -> &[u8] {
        match self {
            Held::Text(text) => text.as_bytes(),
            Held::Bytes(bytes) => bytes,
        }
    }
}

/// A window over `reader`: `held`'s bytes up to `end` are the bytes read and not yet
/// dropped, and `pos` is the first that was not yet decoded.
pub struct Window<R> {
    reader: R,
    held: Held,
    end: usize,
    pos: usize,
    /// The reader has given everything.
    eof: bool,
    /// Newlines in the bytes already dropped.
    dropped_lines: usize,
    /// Bytes after the last newline of the bytes already dropped.
    dropped_column: usize,
}

fn is_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r')
}

fn newlines(bytes: &[u8]) -> usize {
    memchr::memchr_iter(b'\n', bytes).count()
}

/// The line and column of `buf[at]`, after `lines` dropped lines and `column` bytes dropped
/// of the current line.
fn place(buf: &[u8], at: usize, lines: usize, column: usize) -> (usize, usize) {
    let before = &buf[..at];
    let line = 1 + lines + newlines(before);
    let column = match memchr::memrchr(b'\n', before) {
        Some(i) => at - i - 1,
        None => column + at,
    };
    (line, column)
}

/// The next value of a serde_json reader, and the bytes it took.
fn next_value<'de, R, T>(de: serde_json::Deserializer<R>) -> (Option<serde_json::Result<T>>, usize)
where
    R: serde_json::de::Read<'de>,
    T: Deserialize<'de>,
{
    let mut values = de.into_iter::<T>();
    let next = values.next();
    (next, values.byte_offset())
}

impl<R: Read> Window<R> {
    pub fn new(reader: R) -> Self {
        Window {
            reader,
            held: Held::Bytes(vec![0; WINDOW]),
            end: 0,
            pos: 0,
            eof: false,
            dropped_lines: 0,
            dropped_column: 0,
        }
    }

    /// Drops what was decoded and reads more: to the window's size, which doubles when what
    /// is left fills half of it (a value too large for the window). Sets `eof` when the reader
    /// has nothing more, so each call either reads or ends the input. Then checks the window
    /// as UTF-8.
    fn refill(&mut self) -> Result<(), Fault> {
        let mut buf = match std::mem::replace(&mut self.held, Held::Bytes(Vec::new())) {
            Held::Text(text) => text.into_bytes(),
            Held::Bytes(bytes) => bytes,
        };
        let read = self.read_into(&mut buf);
        self.held = match String::from_utf8(buf) {
            Ok(text) => Held::Text(text),
            Err(e) => Held::Bytes(e.into_bytes()),
        };
        read
    }

    fn read_into(&mut self, buf: &mut Vec<u8>) -> Result<(), Fault> {
        let dropped = &buf[..self.pos];
        match memchr::memrchr(b'\n', dropped) {
            Some(last) => {
                self.dropped_lines += newlines(dropped);
                self.dropped_column = self.pos - last - 1;
            }
            None => self.dropped_column += self.pos,
        }
        buf.copy_within(self.pos..self.end, 0);
        self.end -= self.pos;
        self.pos = 0;
        if self.end >= buf.len() / 2 {
            buf.resize(2 * buf.len(), 0);
        }
        while self.end < buf.len() {
            match self.reader.read(&mut buf[self.end..]) {
                Ok(0) => {
                    self.eof = true;
                    break;
                }
                Ok(n) => self.end += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => {
                    let (line, column) = place(buf, self.end, self.dropped_lines, self.dropped_column);
                    return Err(Fault {
                        category: Category::Io,
                        message: e.to_string(),
                        line,
                        column,
                    });
                }
            }
        }
        Ok(())
    }

    /// The line and column of the window's byte `at` in the whole document.
    fn place(&self, at: usize) -> (usize, usize) {
        place(self.held.bytes(), at, self.dropped_lines, self.dropped_column)
    }

    /// A fault at the next byte, placed as serde_json places an error about the byte it
    /// peeked at (just after it), or at the end.
    pub fn fault(&self, category: Category, message: &str) -> Fault {
        let (line, column) = self.place((self.pos + 1).min(self.end));
        Fault {
            category,
            message: message.to_string(),
            line,
            column,
        }
    }

    /// Places an error serde_json gave for the slice that starts at `buf[start]`.
    fn placed(&self, e: &serde_json::Error, start: usize) -> Fault {
        let text = e.to_string();
        let suffix = format!(" at line {} column {}", e.line(), e.column());
        let message = text.strip_suffix(&suffix).unwrap_or(&text).to_string();
        let (base_line, base_column) = self.place(start);
        let (line, column) = if e.line() <= 1 {
            (base_line, base_column + e.column())
        } else {
            (base_line + e.line() - 1, e.column())
        };
        Fault {
            category: e.classify(),
            message,
            line,
            column,
        }
    }

    /// The next byte that is not whitespace, without taking it; `None` at the end.
    pub fn peek(&mut self) -> Result<Option<u8>, Fault> {
        loop {
            while let Some(&b) = self.held.bytes()[..self.end].get(self.pos) {
                if !is_space(b) {
                    return Ok(Some(b));
                }
                self.pos += 1;
            }
            if self.eof {
                return Ok(None);
            }
            self.refill()?;
        }
    }

    /// Takes the byte [`Window::peek`] returned.
    pub fn bump(&mut self) {
        self.pos += 1;
    }

    /// Whether an error of serde_json for a slice of `len` bytes may come from the slice's
    /// end alone: an end of input, or an error at the last byte (a number cut after its `.`
    /// or `e` is refused as invalid, not as cut short).
    fn cut_short(e: &serde_json::Error, slice: &[u8]) -> bool {
        if e.is_eof() {
            return true;
        }
        // The error's byte offset in the slice, from its line and column.
        let line_start = match e.line() {
            0 | 1 => 0,
            n => slice
                .iter()
                .enumerate()
                .filter(|&(_, &b)| b == b'\n')
                .nth(n - 2)
                .map_or(slice.len(), |(i, _)| i + 1),
        };
        line_start + e.column() + 1 >= slice.len()
    }

    /// Decodes the next value as `T`.
    pub fn value<T>(&mut self) -> Result<T, Fault>
    where
        T: for<'de> Deserialize<'de>,
    {
        loop {
            if !self.eof && self.end - self.pos < LOW {
                self.refill()?;
            }
            let slice = &self.held.bytes()[self.pos..self.end];
            // `pos` and `end` fall between characters (after ASCII bytes, or where the
            // text's zeroes start): `get` checks it, and serde_json reads the bytes otherwise.
            let text = match &self.held {
                Held::Text(text) => text.get(self.pos..self.end),
                Held::Bytes(_) => None,
            };
            let (next, used) = match text {
                Some(text) => next_value(serde_json::Deserializer::from_str(text)),
                None => next_value(serde_json::Deserializer::from_slice(slice)),
            };
            match next {
                Some(Ok(value)) => {
                    self.pos += used;
                    return Ok(value);
                }
                Some(Err(e)) if !self.eof && Self::cut_short(&e, slice) => self.refill()?,
                Some(Err(e)) => return Err(self.placed(&e, self.pos)),
                // Nothing but whitespace is left: more, or serde_json's own word for an end.
                None if !self.eof => self.refill()?,
                None => {
                    return Err(match serde_json::from_slice::<serde::de::IgnoredAny>(slice) {
                        Err(e) => self.placed(&e, self.pos),
                        // Not reached: whitespace alone is no value.
                        Ok(_) => self.fault(Category::Eof, "EOF while parsing a value"),
                    });
                }
            }
        }
    }

    /// Takes `close` if it is next (an object or array opened just before is empty).
    pub fn closes(&mut self, close: u8) -> Result<bool, Fault> {
        let closed = self.peek()? == Some(close);
        if closed {
            self.bump();
        }
        Ok(closed)
    }

    /// After a member of an object (`close` is `}`) or an array (`]`): takes the comma and
    /// says another member follows, or takes `close` and says none does; anything else is
    /// refused as serde_json words it.
    pub fn another(&mut self, close: u8) -> Result<bool, Fault> {
        let (what, expected) = match close {
            b'}' => ("an object", "expected `,` or `}`"),
            _ => ("a list", "expected `,` or `]`"),
        };
        match self.peek()? {
            Some(b',') => {
                self.bump();
                if self.peek()? == Some(close) {
                    return Err(self.fault(Category::Syntax, "trailing comma"));
                }
                Ok(true)
            }
            Some(b) if b == close => {
                self.bump();
                Ok(false)
            }
            Some(_) => Err(self.fault(Category::Syntax, expected)),
            None => Err(self.fault(Category::Eof, &format!("EOF while parsing {what}"))),
        }
    }

    /// The end of the document: nothing but whitespace may follow.
    pub fn end(&mut self) -> Result<(), Fault> {
        match self.peek()? {
            None => Ok(()),
            Some(_) => Err(self.fault(Category::Syntax, "trailing characters")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reader that gives at most `step` bytes per read, to cut values anywhere.
    struct Trickle<'a> {
        rest: &'a [u8],
        step: usize,
    }

    impl Read for Trickle<'_> {
        fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
            let n = self.rest.len().min(self.step).min(out.len());
            out[..n].copy_from_slice(&self.rest[..n]);
            self.rest = &self.rest[n..];
            Ok(n)
        }
    }

    /// Values of a top-level array, decoded through a window.
    fn array(w: &mut Window<impl Read>) -> Result<Vec<serde_json::Value>, Fault> {
        assert_eq!(w.peek()?, Some(b'['));
        w.bump();
        let mut out = vec![w.value()?];
        while w.another(b']')? {
            out.push(w.value()?);
        }
        w.end()?;
        Ok(out)
    }

    #[test]
    fn values_larger_than_the_window_and_cut_anywhere_decode_as_from_memory() {
        // Numbers that a cut after `.` or `e` would make invalid, strings with escapes and
        // multi-byte characters, and one value four times the window.
        let big = "x".repeat(4 * WINDOW);
        let text = format!(
            "[1.5e3, -0.25, \"a\\u00e9\\n\u{e9}\u{1f600}\", {{\"k\": [true, null, 12345678901]}},\n \"{big}\", 7]"
        );
        let want: Vec<serde_json::Value> = serde_json::from_str(&text).unwrap();
        for step in [1, 3, 4096, usize::MAX] {
            let mut w = Window::new(Trickle {
                rest: text.as_bytes(),
                step,
            });
            assert_eq!(array(&mut w).unwrap(), want, "step {step}");
        }
    }

    #[test]
    fn a_character_cut_by_the_window_s_end_and_bytes_that_are_not_utf8() {
        // Strings of 1,000 bytes, the last ending in a two-byte character that the first
        // refill cuts in the middle: those bytes are not UTF-8 as read, and decode as from
        // memory once the window holds the rest.
        let filler = format!("\"{}\",", "a".repeat(998));
        let mut text = String::from("[");
        while text.len() + filler.len() < WINDOW - 100 {
            text.push_str(&filler);
        }
        text.push('"');
        text.push_str(&"b".repeat(WINDOW - 1 - text.len()));
        text.push_str("\u{e9}tail\", 1]");
        let cut = text.find('\u{e9}').unwrap();
        assert_eq!(cut, WINDOW - 1, "the character straddles the first window's end");
        let want: Vec<serde_json::Value> = serde_json::from_str(&text).unwrap();
        let mut w = Window::new(text.as_bytes());
        assert_eq!(array(&mut w).unwrap(), want);
        // Bytes that are not UTF-8: refused where serde_json refuses them in the whole text.
        let mut bad = text.clone().into_bytes();
        let at = 3 * filler.len() + 10;
        bad[at] = 0xff;
        let whole = serde_json::from_slice::<serde_json::Value>(&bad).unwrap_err();
        let fault = array(&mut Window::new(&bad[..])).unwrap_err();
        assert_eq!(fault.placed(), whole.to_string());
    }

    #[test]
    fn errors_are_placed_in_the_whole_document() {
        // Past the first window, on a later line: the same place serde_json gives reading
        // the whole text from memory.
        let filler = format!("\"{}\",\n", "y".repeat(1000));
        let text = format!("[{}\n  {{\"a\": tru}}]", filler.repeat(600));
        let whole = serde_json::from_str::<serde_json::Value>(&text).unwrap_err();
        let mut w = Window::new(text.as_bytes());
        let fault = array(&mut w).unwrap_err();
        assert_eq!((fault.line, fault.column), (whole.line(), whole.column()), "{fault:?}");
        assert_eq!(fault.placed(), whole.to_string());
        assert_eq!(fault.category, Category::Syntax);
        // An end of input inside a value, and nothing at all.
        let fault = array(&mut Window::new(&b"[1, {\"a\": "[..])).unwrap_err();
        assert_eq!(fault.category, Category::Eof);
        assert_eq!(fault.placed(), "EOF while parsing a value at line 1 column 10");
        let fault = Window::new(&b"  "[..]).value::<serde_json::Value>().unwrap_err();
        assert_eq!(fault.placed(), "EOF while parsing a value at line 1 column 2");
        // A token the caller refuses, placed as serde_json places it.
        let fault = array(&mut Window::new(&b"[1 2]"[..])).unwrap_err();
        let whole = serde_json::from_str::<serde_json::Value>("[1 2]").unwrap_err();
        assert_eq!((fault.line, fault.column), (whole.line(), whole.column()));
        let fault = array(&mut Window::new(&b"[1] x"[..])).unwrap_err();
        let whole = serde_json::from_str::<serde_json::Value>("[1] x").unwrap_err();
        assert_eq!(fault.placed(), whole.to_string());
    }

    #[test]
    fn the_window_stays_bounded_by_its_largest_value() {
        let item = format!("\"{}\"", "z".repeat(9_000));
        let text = format!("[{}]", vec![item; 1_000].join(","));
        assert!(text.len() > 30 * WINDOW);
        let mut w = Window::new(text.as_bytes());
        assert_eq!(array(&mut w).unwrap().len(), 1_000);
        assert_eq!(w.held.bytes().len(), WINDOW);
    }

    #[test]
    fn a_read_error_is_an_io_fault() {
        struct Broken;
        impl Read for Broken {
            fn read(&mut self, _: &mut [u8]) -> std::io::Result<usize> {
                Err(std::io::Error::other("disk on fire"))
            }
        }
        let fault = Window::new(Broken).value::<serde_json::Value>().unwrap_err();
        assert_eq!(fault.category, Category::Io);
        assert_eq!(fault.message, "disk on fire");
    }
}
