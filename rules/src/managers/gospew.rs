//! go-spew's `%#v` rendering of Go slices, the part the kubelet's memory, device and DRA
//! checkpoint checksums share: a nil slice prints `<nil>`, any other `[e1 e2 ...]` (`[]` when
//! empty), its elements separated by one space and printed without a type.

use std::fmt::{Display, Write as _};

/// A slice whose elements `each` writes. `None` from `each` (an element the layout being
/// rendered cannot hold) stops the rendering and is returned.
pub(crate) fn slice<T>(
    out: &mut String,
    items: Option<&[T]>,
    mut each: impl FnMut(&mut String, &T) -> Option<()>,
) -> Option<()> {
    let Some(items) = items else {
        out.push_str("<nil>");
        return Some(());
    };
    out.push('[');
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            out.push(' ');
        }
        each(out, item)?;
    }
    out.push(']');
    Some(())
}

/// A slice of values go-spew prints as they are: `[]string` (raw), `[]int`, and `[]byte` (in
/// decimal: its hex dump is only `Dump`'s, not the `%#v` formatter's).
pub(crate) fn plain_slice<T: Display>(out: &mut String, items: Option<&[T]>) {
    let _ = slice(out, items, |out, v| {
        let _ = write!(out, "{v}");
        Some(())
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nil_empty_and_filled() {
        let mut out = String::new();
        plain_slice::<i64>(&mut out, None);
        out.push('|');
        plain_slice::<i64>(&mut out, Some(&[]));
        out.push('|');
        plain_slice(&mut out, Some(&["a", "b c"][..]));
        out.push('|');
        plain_slice(&mut out, Some(&[0u8, 255][..]));
        assert_eq!(out, "<nil>|[]|[a b c]|[0 255]");
        let mut out = String::new();
        let stopped = slice(&mut out, Some(&[1, 2, 3][..]), |out, n| (*n < 2).then(|| out.push('x')));
        assert_eq!((stopped, out.as_str()), (None, "[x "));
    }
}
