//! go-spew's `%#v` rendering, the parts the kubelet's memory, device and DRA checkpoint
//! checksums share: slices, maps of pointers, and the one piece of printer state that leaks
//! from one value into the next.
//!
//! A nil slice prints `<nil>`, any other `[e1 e2 ...]` (`[]` when empty), its elements
//! separated by one space and printed without a type.
//!
//! go-spew (`spew/format.go`, as kubernetes vendors it) keeps one flag, `ignoreNextType`, that
//! stops the next value from printing its `(type)`. The map and slice printers set it before
//! every key, value and element; printing any value that is not a pointer clears it (after
//! deciding whether to print its type), and printing a non-nil pointer sets it again for the
//! value it points to. A *nil* pointer met with the flag set is the exception: `formatPtr`
//! writes `<nil>` and returns without clearing it, and the struct printer does not reset it
//! between fields. So when the last value of a `map[K]*T` is nil, the struct field printed
//! after the map loses its `(type)`. A nil value before another key changes nothing, since the
//! next key sets the flag again. [`NextType`] carries that flag from one value to the next.
//!
//! Only the memory manager's structs hold pointers in maps (`map[int]*NUMANodeState`,
//! `map[v1.ResourceName]*MemoryTable`). The device manager's and the DRA manager's hold none in
//! a map or a slice: the 1.30 DRA handle's `StructuredData` pointer is a struct field, which
//! go-spew meets with the flag clear and prints with its type, nil or not.

use std::collections::BTreeMap;
use std::fmt::{Display, Write as _};

/// go-spew's `ignoreNextType` after a value was printed: whether the next struct field prints
/// its `(type)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub(crate) enum NextType {
    /// The flag is clear: the next field prints `Name:(type)value`.
    Shown,
    /// A nil pointer was the last value printed, inside a map or a slice: the next field
    /// prints `Name:value`.
    Skipped,
}

/// The name and the type of a struct field whose Go type is not a pointer (`Name:(type)`,
/// or `Name:` after [`NextType::Skipped`]). Its value, printed next, clears the flag, so the
/// field after it shows its type again.
pub(crate) fn field(out: &mut String, name: &str, go_type: &str, before: NextType) {
    out.push_str(name);
    out.push(':');
    if before == NextType::Shown {
        out.push('(');
        out.push_str(go_type);
        out.push(')');
    }
}

/// A `map[K]*T` with its keys in go-spew's sorted order (`SortKeys`; ints numerically,
/// strings bytewise, which is the `BTreeMap` order of `i64` and `String`): `map[k:<*>{...}
/// k:<nil>]`, `<nil>` for a nil map. `each` writes a non-nil value's struct and says what
/// its last field left behind.
///
/// Returns [`NextType::Skipped`] when the last value printed was a nil pointer, or the last
/// struct left the flag set; a nil or empty map leaves it clear.
pub(crate) fn pointer_map<K: Display, T>(
    out: &mut String,
    map: Option<&BTreeMap<K, Option<T>>>,
    mut each: impl FnMut(&mut String, &T) -> NextType,
) -> NextType {
    let Some(map) = map else {
        out.push_str("<nil>");
        return NextType::Shown;
    };
    out.push_str("map[");
    let mut after = NextType::Shown;
    for (i, (key, value)) in map.iter().enumerate() {
        if i > 0 {
            out.push(' ');
        }
        let _ = write!(out, "{key}:");
        after = match value {
            None => {
                out.push_str("<nil>");
                NextType::Skipped
            }
            Some(value) => {
                out.push_str("<*>");
                each(out, value)
            }
        };
    }
    out.push(']');
    after
}

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

    /// `map[int]*T` followed by a `[]int` field, as go-spew prints it. Only a nil value in the
    /// last place takes the next field's type away.
    #[test]
    fn a_nil_pointer_last_in_its_map_hides_the_next_fields_type() {
        let render = |map: Option<&BTreeMap<i64, Option<u8>>>| {
            let mut out = String::new();
            let after = pointer_map(&mut out, map, |out, v| {
                let _ = write!(out, "{{V:(uint8){v}}}");
                NextType::Shown
            });
            field(&mut out, " Cells", "[]int", after);
            out.push_str("[]");
            out
        };
        let map = |pairs: &[(i64, Option<u8>)]| pairs.iter().copied().collect::<BTreeMap<_, _>>();
        let cases = [
            (Some(map(&[(0, None)])), "map[0:<nil>] Cells:[]"),
            (
                Some(map(&[(0, None), (1, Some(7))])),
                "map[0:<nil> 1:<*>{V:(uint8)7}] Cells:([]int)[]",
            ),
            (
                Some(map(&[(1, None), (0, Some(7))])),
                "map[0:<*>{V:(uint8)7} 1:<nil>] Cells:[]",
            ),
            (Some(map(&[(-1, None), (0, None)])), "map[-1:<nil> 0:<nil>] Cells:[]"),
            (Some(map(&[])), "map[] Cells:([]int)[]"),
            (None, "<nil> Cells:([]int)[]"),
        ];
        for (m, want) in cases {
            assert_eq!(render(m.as_ref()), want);
        }
    }
}
