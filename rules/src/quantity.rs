//! Kubernetes resource quantities (`500m`, `2`, `1.5`, `1k`), read as CPU millicores.
//!
//! Mirrors `resource.Quantity.MilliValue()`: the value in thousandths, rounded up. Only the
//! suffixes that make sense for a CPU count are accepted (none, `m`, and the decimal SI
//! suffixes `k`, `M`, `G`); binary suffixes (`Ki`) and exponents are rejected as not a CPU
//! amount anyone writes.

/// Why a quantity could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid CPU quantity {text:?}: {reason}")]
pub struct QuantityError {
    pub text: String,
    pub reason: &'static str,
}

/// Reads a CPU quantity as millicores, rounding up like `MilliValue`.
pub fn parse_cpu_millis(text: &str) -> Result<u64, QuantityError> {
    let err = |reason| QuantityError {
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

#[cfg(test)]
mod tests {
    use super::*;

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
