//! Kubernetes resource quantities: CPU (`500m`, `2`, `1.5`, `1k`) read as millicores, and
//! sizes (`10Gi`, `500M`, `1e9`) read as bytes.
//!
//! Mirrors `resource.Quantity.MilliValue()`: the value in thousandths, rounded up. Only the
//! suffixes that make sense for a CPU count are accepted (none, `m`, and the decimal SI
//! suffixes `k`, `M`, `G`); binary suffixes (`Ki`) and exponents are rejected as not a CPU
//! amount anyone writes.

/// Why a quantity could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid {of} quantity {text:?}: {reason}")]
pub struct QuantityError {
    /// What the quantity is of: `CPU`, `size`.
    pub of: &'static str,
    pub text: String,
    pub reason: &'static str,
}

/// Reads a CPU quantity as millicores, rounding up like `MilliValue`.
pub fn parse_cpu_millis(text: &str) -> Result<u64, QuantityError> {
    let err = |reason| QuantityError {
        of: "CPU",
        text: text.to_string(),
        reason,
    };
    let t = text.trim();
    let (number, scale_millis): (&str, u128) = if let Some(n) = t.strip_suffix('m') {
        (n, 1)
    } else if let Some(n) = t.strip_suffix('k') {
        (n, 1_000_000)
    } else if let Some(n) = t.strip_suffix('M') {
        (n, 1_000_000_000)
    } else if let Some(n) = t.strip_suffix('G') {
        (n, 1_000_000_000_000)
    } else {
        (t, 1000)
    };
    let number = number.strip_prefix('+').unwrap_or(number);
    let (int, frac) = number.split_once('.').unwrap_or((number, ""));
    if int.is_empty() && frac.is_empty() {
        return Err(err("no digits"));
    }
    if !int.bytes().all(|b| b.is_ascii_digit()) || !frac.bytes().all(|b| b.is_ascii_digit()) {
        return Err(err("not a decimal number with an optional m, k, M or G suffix"));
    }
    if int.len() > 18 || frac.len() > 18 {
        return Err(err("too many digits"));
    }
    let int_v: u128 = if int.is_empty() {
        0
    } else {
        int.parse().map_err(|_| err("too large"))?
    };
    let frac_v: u128 = if frac.is_empty() {
        0
    } else {
        frac.parse().map_err(|_| err("too large"))?
    };
    let frac_den: u128 = 10u128.pow(frac.len() as u32);
    // value_millis = (int + frac/den) * scale, rounded up.
    let numerator = (int_v * frac_den + frac_v) * scale_millis;
    let millis = numerator.div_ceil(frac_den);
    u64::try_from(millis).map_err(|_| err("too large"))
}

/// Reads a size (memory, ephemeral storage, a threshold) as bytes, rounding up like
/// `resource.Quantity.Value()`: a decimal number with one of the binary suffixes (`Ki` to
/// `Ei`), the decimal ones (`n`, `u`, `m`, none, `k`, `M`, `G`, `T`, `P`, `E`) or a decimal
/// exponent (`1e9`, `5E3`). Negative sizes are refused.
pub fn parse_bytes(text: &str) -> Result<u64, QuantityError> {
    let err = |reason| QuantityError {
        of: "size",
        text: text.to_string(),
        reason,
    };
    let t = text.trim();
    let t = t.strip_prefix('+').unwrap_or(t);
    let digits_end = t
        .bytes()
        .position(|b| !(b.is_ascii_digit() || b == b'.'))
        .unwrap_or(t.len());
    let (number, suffix) = t.split_at(digits_end);
    // (numerator, denominator) of the suffix's factor.
    let (mul, div): (u128, u128) = match suffix {
        "" => (1, 1),
        "Ki" => (1 << 10, 1),
        "Mi" => (1 << 20, 1),
        "Gi" => (1 << 30, 1),
        "Ti" => (1 << 40, 1),
        "Pi" => (1 << 50, 1),
        "Ei" => (1 << 60, 1),
        "n" => (1, 1_000_000_000),
        "u" => (1, 1_000_000),
        "m" => (1, 1000),
        "k" => (1000, 1),
        "M" => (1_000_000, 1),
        "G" => (1_000_000_000, 1),
        "T" => (1_000_000_000_000, 1),
        "P" => (1_000_000_000_000_000, 1),
        "E" => (1_000_000_000_000_000_000, 1),
        s if s.starts_with(['e', 'E']) => {
            let exp: u32 = s[1..]
                .strip_prefix('+')
                .unwrap_or(&s[1..])
                .parse()
                .map_err(|_| err("not a number with a size suffix"))?;
            if exp > 18 {
                return Err(err("too large"));
            }
            (10u128.pow(exp), 1)
        }
        _ => return Err(err("not a number with a size suffix (Ki, Mi, Gi, k, M, G, ...)")),
    };
    let (int, frac) = number.split_once('.').unwrap_or((number, ""));
    if int.is_empty() && frac.is_empty() {
        return Err(err("no digits"));
    }
    if frac.contains('.') || int.len() > 19 || frac.len() > 18 {
        return Err(err("not a decimal number"));
    }
    let int_v: u128 = if int.is_empty() {
        0
    } else {
        int.parse().map_err(|_| err("too large"))?
    };
    let frac_v: u128 = if frac.is_empty() {
        0
    } else {
        frac.parse().map_err(|_| err("too large"))?
    };
    let frac_den = 10u128.pow(frac.len() as u32);
    let numerator = (int_v * frac_den + frac_v)
        .checked_mul(mul)
        .ok_or_else(|| err("too large"))?;
    let bytes = numerator.div_ceil(frac_den * div);
    u64::try_from(bytes).map_err(|_| err("too large"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_sizes_as_bytes() {
        for (text, want) in [
            ("1Gi", 1u64 << 30),
            ("100Mi", 100 << 20),
            ("1.5Ki", 1536),
            ("10G", 10_000_000_000),
            ("500M", 500_000_000),
            ("1e9", 1_000_000_000),
            ("5E3", 5000),
            ("1234", 1234),
            ("+2k", 2000),
            ("1500m", 2),
            ("0.5", 1),
            ("0", 0),
        ] {
            assert_eq!(parse_bytes(text), Ok(want), "{text}");
        }
        for bad in ["", "Gi", "-1Gi", "1GB", "1.2.3", "1e99", "99999999999Ei"] {
            let e = parse_bytes(bad).unwrap_err();
            assert!(
                e.to_string().starts_with(&format!("invalid size quantity {bad:?}: ")),
                "{e}"
            );
        }
    }

    #[test]
    fn reads_cpu_quantities() {
        for (text, want) in [
            ("1", 1000),
            ("500m", 500),
            ("1.5", 1500),
            ("0.1", 100),
            ("0.0001", 1),
            ("2000m", 2000),
            ("1k", 1_000_000),
            (".5", 500),
            ("+2", 2000),
            ("0", 0),
        ] {
            assert_eq!(parse_cpu_millis(text), Ok(want), "{text}");
        }
    }

    #[test]
    fn rejects_garbage() {
        for text in ["", "m", "abc", "1Ki", "-1", "1e3", "1.2.3", "99999999999999999999999"] {
            assert!(parse_cpu_millis(text).is_err(), "{text}");
        }
    }
}
