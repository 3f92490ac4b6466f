//! `CpuSet`: a set of logical CPU ids, read and written in the kubelet's (and the kernel's)
//! list format.
//!
//! The list format is comma-separated tokens, each a CPU id (`4`) or an inclusive range
//! (`4-7`). The canonical form, which the kubelet writes and hashes (`k8s.io/utils/cpuset`
//! `CPUSet.String`), is sorted, with every run of two or more consecutive ids written as
//! `a-b`: `0,2-3,5-9`. The empty set is the empty string.
//!
//! Parsing follows `cpuset.Parse`: surrounding white space (a trailing newline in a cgroup
//! file) is ignored, every token must be a number or a `low-high` range with `low <= high`,
//! and an empty token (`1,,2`) is an error. Ids are capped at [`CpuSet::MAX_CPU`] so that a
//! corrupt file cannot make us allocate gigabytes.

use std::fmt;

/// Why a cpuset string could not be read; names the offending token.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CpuSetError {
    /// A token is not a number or a `low-high` range of numbers.
    #[error("invalid cpuset token {token:?}: not a CPU id or a low-high range")]
    BadToken { token: String },
    /// A range whose start is above its end, like `3-1`.
    #[error("invalid cpuset range {token:?}: {low} > {high}")]
    Reversed { token: String, low: u32, high: u32 },
    /// A CPU id above [`CpuSet::MAX_CPU`].
    #[error("invalid cpuset token {token:?}: CPU id above {}", CpuSet::MAX_CPU)]
    TooLarge { token: String },
}

/// A set of logical CPU ids, stored as a bitmap (64 ids per word).
#[derive(Clone, Default, PartialEq, Eq, Hash)]
pub struct CpuSet {
    words: Vec<u64>,
}

impl CpuSet {
    /// The largest CPU id accepted (Linux's `NR_CPUS` tops out at 8192; this leaves room).
    pub const MAX_CPU: u32 = 65_535;

    /// The empty set.
    pub fn new() -> Self {
        Self::default()
    }

    /// Reads the list format; see the module documentation.
    pub fn parse(text: &str) -> Result<Self, CpuSetError> {
        let text = text.trim();
        let mut set = CpuSet::new();
        if text.is_empty() {
            return Ok(set);
        }
        for token in text.split(',') {
            let (low, high) = match token.split_once('-') {
                None => {
                    let id = parse_id(token, token)?;
                    (id, id)
                }
                Some((a, b)) => {
                    let low = parse_id(a, token)?;
                    let high = parse_id(b, token)?;
                    if low > high {
                        return Err(CpuSetError::Reversed {
                            token: token.to_string(),
                            low,
                            high,
                        });
                    }
                    (low, high)
                }
            };
            set.insert_range(low, high);
        }
        Ok(set)
    }

    /// A set from ids; ids above [`CpuSet::MAX_CPU`] are a programming error and ignored.
    pub fn from_ids<I: IntoIterator<Item = u32>>(ids: I) -> Self {
        let mut set = CpuSet::new();
        for id in ids {
            set.insert(id);
        }
        set
    }

    /// Adds one CPU id (ignored above [`CpuSet::MAX_CPU`]).
    pub fn insert(&mut self, id: u32) {
        if id > Self::MAX_CPU {
            return;
        }
        let (w, b) = ((id / 64) as usize, id % 64);
        if self.words.len() <= w {
            self.words.resize(w + 1, 0);
        }
        self.words[w] |= 1 << b;
    }

    /// Adds `low..=high` (both at most [`CpuSet::MAX_CPU`]) a word at a time: `0-255` is four
    /// stores, not 256 inserts.
    fn insert_range(&mut self, low: u32, high: u32) {
        let (first, last) = ((low / 64) as usize, (high / 64) as usize);
        if self.words.len() <= last {
            self.words.resize(last + 1, 0);
        }
        for (w, word) in self.words.iter_mut().enumerate().take(last + 1).skip(first) {
            let from = if w == first { low % 64 } else { 0 };
            let to = if w == last { high % 64 } else { 63 };
            // Bits from..=to: all ones shifted up by `from`, cut above `to`.
            *word |= (u64::MAX << from) & (u64::MAX >> (63 - to));
        }
    }

    /// Whether `id` is in the set.
    pub fn contains(&self, id: u32) -> bool {
        let (w, b) = ((id / 64) as usize, id % 64);
        self.words.get(w).is_some_and(|word| word & (1 << b) != 0)
    }

    /// Number of CPUs in the set.
    pub fn len(&self) -> usize {
        self.words.iter().map(|w| w.count_ones() as usize).sum()
    }

    /// Whether the set has no CPU.
    pub fn is_empty(&self) -> bool {
        self.words.iter().all(|w| *w == 0)
    }

    /// The set as people read it: the list format, or `none` for the empty set (whose list
    /// format, the empty string, reads as a missing word: `CPUs ,`, `()`). For summaries,
    /// evidence and notes only; files and hashes keep [`Display`](fmt::Display)'s `""`.
    pub fn human(&self) -> String {
        if self.is_empty() {
            "none".to_string()
        } else {
            self.to_string()
        }
    }

    /// The ids in ascending order.
    pub fn iter(&self) -> impl Iterator<Item = u32> + '_ {
        self.words.iter().enumerate().flat_map(|(i, &word)| {
            let mut bits = word;
            std::iter::from_fn(move || {
                if bits == 0 {
                    return None;
                }
                let b = bits.trailing_zeros();
                bits &= bits - 1;
                Some(i as u32 * 64 + b)
            })
        })
    }

    /// The smallest id, if any.
    pub fn first(&self) -> Option<u32> {
        self.iter().next()
    }

    fn zip_with(&self, other: &CpuSet, op: impl Fn(u64, u64) -> u64) -> CpuSet {
        let n = self.words.len().max(other.words.len());
        let mut words: Vec<u64> = (0..n)
            .map(|i| {
                op(
                    self.words.get(i).copied().unwrap_or(0),
                    other.words.get(i).copied().unwrap_or(0),
                )
            })
            .collect();
        while words.last() == Some(&0) {
            words.pop();
        }
        CpuSet { words }
    }

    /// Ids in either set.
    pub fn union(&self, other: &CpuSet) -> CpuSet {
        self.zip_with(other, |a, b| a | b)
    }

    /// Ids in both sets.
    pub fn intersection(&self, other: &CpuSet) -> CpuSet {
        self.zip_with(other, |a, b| a & b)
    }

    /// Ids in `self` and not in `other`.
    pub fn difference(&self, other: &CpuSet) -> CpuSet {
        self.zip_with(other, |a, b| a & !b)
    }

    /// Whether every id of `self` is in `other`.
    pub fn is_subset(&self, other: &CpuSet) -> bool {
        self.difference(other).is_empty()
    }

    /// Whether the sets share an id.
    pub fn intersects(&self, other: &CpuSet) -> bool {
        self.words.iter().zip(other.words.iter()).any(|(a, b)| a & b != 0)
    }
}

fn parse_id(digits: &str, token: &str) -> Result<u32, CpuSetError> {
    // strconv.Atoi accepts one leading '+'; anything else but ASCII digits is an error.
    let digits = digits.strip_prefix('+').unwrap_or(digits);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(CpuSetError::BadToken {
            token: token.to_string(),
        });
    }
    match digits.parse::<u64>() {
        Ok(id) if id <= u64::from(CpuSet::MAX_CPU) => Ok(id as u32),
        _ => Err(CpuSetError::TooLarge {
            token: token.to_string(),
        }),
    }
}

impl fmt::Display for CpuSet {
    /// The canonical list format (see the module documentation).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut ids = self.iter().peekable();
        let mut first = true;
        while let Some(low) = ids.next() {
            let mut high = low;
            while ids.peek() == Some(&(high + 1)) {
                high += 1;
                ids.next();
            }
            if !first {
                f.write_str(",")?;
            }
            first = false;
            if high == low {
                write!(f, "{low}")?;
            } else {
                write!(f, "{low}-{high}")?;
            }
        }
        Ok(())
    }
}

impl fmt::Debug for CpuSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CpuSet({self})")
    }
}

impl serde::Serialize for CpuSet {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for CpuSet {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        CpuSet::parse(&text).map_err(serde::de::Error::custom)
    }
}

impl std::str::FromStr for CpuSet {
    type Err = CpuSetError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        CpuSet::parse(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn parses_and_formats_canonically() {
        let cases = [
            ("", ""),
            ("0", "0"),
            ("0-1", "0-1"),
            ("1,2", "1-2"),
            ("0,4-27", "0,4-27"),
            ("5,3,4,1", "1,3-5"),
            ("0-3,2-5", "0-5"),
            (" 2-3\n", "2-3"),
            ("+1-+3", "1-3"),
            ("7,9,11", "7,9,11"),
            ("63-65", "63-65"),
        ];
        for (input, want) in cases {
            let set = CpuSet::parse(input).unwrap_or_else(|e| panic!("{input:?}: {e}"));
            assert_eq!(set.to_string(), want, "input {input:?}");
        }
    }

    #[test]
    fn rejects_bad_tokens_and_names_them() {
        let cases = [
            ("1.3", "\"1.3\""),
            ("3-1", "\"3-1\""),
            ("1,,2", "\"\""),
            ("a", "\"a\""),
            ("-1", "\"-1\""),
            ("1-", "\"1-\""),
            ("1-2-3", "\"1-2-3\""),
            ("99999999999", "\"99999999999\""),
            ("65536", "\"65536\""),
            ("0x3", "\"0x3\""),
            ("１", "\"１\""),
        ];
        for (input, token) in cases {
            let err = CpuSet::parse(input).expect_err(input).to_string();
            assert!(err.contains(token), "{input:?} gave {err:?}");
        }
        assert_eq!(
            CpuSet::parse("3-1"),
            Err(CpuSetError::Reversed {
                token: "3-1".into(),
                low: 3,
                high: 1
            })
        );
    }

    #[test]
    fn set_algebra() {
        let a = CpuSet::parse("0-7").unwrap();
        let b = CpuSet::parse("4-11").unwrap();
        assert_eq!(a.union(&b).to_string(), "0-11");
        assert_eq!(a.intersection(&b).to_string(), "4-7");
        assert_eq!(a.difference(&b).to_string(), "0-3");
        assert_eq!(b.difference(&a).to_string(), "8-11");
        assert!(a.intersects(&b));
        assert!(!a.intersects(&CpuSet::parse("100").unwrap()));
        assert!(CpuSet::parse("2-3").unwrap().is_subset(&a));
        assert!(!b.is_subset(&a));
        assert_eq!(a.len(), 8);
        assert_eq!(b.first(), Some(4));
        // Equality ignores trailing empty words.
        assert_eq!(a.difference(&CpuSet::parse("200").unwrap()), a);
        assert_eq!(
            CpuSet::parse("300").unwrap().difference(&CpuSet::parse("300").unwrap()),
            CpuSet::new()
        );
    }

    proptest! {
        #[test]
        fn format_of_parse_is_canonical(ids in proptest::collection::btree_set(0u32..300, 0..40)) {
            // Write the ids in a scrambled, non-canonical way: reversed singles and overlapping ranges.
            let mut tokens: Vec<String> = ids.iter().rev().map(|i| i.to_string()).collect();
            if let (Some(lo), Some(hi)) = (ids.first(), ids.last()) {
                if ids.len() == (hi - lo + 1) as usize { tokens.push(format!("{lo}-{hi}")); }
            }
            let text = tokens.join(",");
            let set = CpuSet::parse(&text).unwrap();
            let canonical = set.to_string();
            prop_assert_eq!(CpuSet::parse(&canonical).unwrap().to_string(), canonical.clone());
            prop_assert_eq!(set.iter().collect::<Vec<_>>(), ids.iter().copied().collect::<Vec<_>>());
            // Canonical: ascending, no run of 2+ written as singles.
            let nums: Vec<(u32, u32)> = canonical.split(',').filter(|t| !t.is_empty()).map(|t| match t.split_once('-') {
                Some((a, b)) => (a.parse().unwrap(), b.parse().unwrap()),
                None => { let v = t.parse().unwrap(); (v, v) }
            }).collect();
            for pair in nums.windows(2) {
                prop_assert!(pair[0].1 + 1 < pair[1].0, "runs must be merged: {}", canonical);
            }
        }

        #[test]
        fn parse_of_format_roundtrips(ids in proptest::collection::vec(0u32..2000, 0..100)) {
            let set = CpuSet::from_ids(ids);
            prop_assert_eq!(CpuSet::parse(&set.to_string()).unwrap(), set);
        }

        /// A range is added a word at a time; the set is the one of its CPUs added one by one,
        /// whatever word boundaries the range crosses, into a set that has words or none.
        #[test]
        fn a_range_is_its_cpus(low in 0u32..700, len in 0u32..400, before in proptest::collection::vec(0u32..900, 0..4)) {
            let high = low + len;
            let mut ranged = CpuSet::from_ids(before.iter().copied());
            ranged.insert_range(low, high);
            let one_by_one = CpuSet::from_ids(before.iter().copied().chain(low..=high));
            prop_assert_eq!(&ranged, &one_by_one);
            prop_assert_eq!(CpuSet::parse(&format!("{low}-{high}")).unwrap(), CpuSet::from_ids(low..=high));
        }

        #[test]
        fn parse_never_panics(text in "\\PC{0,40}") {
            let _ = CpuSet::parse(&text);
        }
    }
}
