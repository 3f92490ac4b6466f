//! Small helpers the double needs and the dependency list does not bring: random UIDs and
//! names, Kubernetes timestamps, base64, query-string decoding and name validation.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};

/// 64 unpredictable bits: std's per-process random hash keys mixed with a counter and the clock.
/// Good enough for UIDs and generated names in tests; not for anything secret.
pub(crate) fn random_u64() -> u64 {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut h = RandomState::new().build_hasher();
    h.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    h.write_u128(nanos);
    h.finish()
}

/// A random version 4 UUID in the usual 8-4-4-4-12 hex form, as the API server assigns to
/// `metadata.uid`.
pub(crate) fn new_uid() -> String {
    let mut b = [0u8; 16];
    b[..8].copy_from_slice(&random_u64().to_le_bytes());
    b[8..].copy_from_slice(&random_u64().to_le_bytes());
    b[6] = (b[6] & 0x0f) | 0x40; // version 4
    b[8] = (b[8] & 0x3f) | 0x80; // RFC 4122 variant
    let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &hex[..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..]
    )
}

/// The 5-character suffix the API server appends to `metadata.generateName`
/// (apimachinery's `utilrand.String`: consonants and digits that cannot spell words).
pub(crate) fn name_suffix() -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut n = random_u64();
    (0..5)
        .map(|_| {
            let c = ALPHABET[(n % ALPHABET.len() as u64) as usize] as char;
            n /= ALPHABET.len() as u64;
            c
        })
        .collect()
}

/// Now as a `metav1.Time`: RFC 3339 in UTC with whole seconds, as the API server writes
/// `creationTimestamp`.
pub(crate) fn now_rfc3339() -> String {
    rfc3339_after(0)
}

/// `secs` seconds from now as a `metav1.Time` (for `deletionTimestamp`).
pub(crate) fn rfc3339_after(secs: i64) -> String {
    let ts = jiff::Timestamp::now()
        .checked_add(jiff::SignedDuration::from_secs(secs))
        .unwrap_or_else(|_| jiff::Timestamp::now());
    ts.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

const B64_STD: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
const B64_URL: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

fn b64_encode(data: &[u8], alphabet: &[u8; 64], pad: bool) -> String {
    let mut out = String::with_capacity(data.len().div_ceil(3) * 4);
    for chunk in data.chunks(3) {
        let n = match chunk.len() {
            3 => (u32::from(chunk[0]) << 16) | (u32::from(chunk[1]) << 8) | u32::from(chunk[2]),
            2 => (u32::from(chunk[0]) << 16) | (u32::from(chunk[1]) << 8),
            _ => u32::from(chunk[0]) << 16,
        };
        let chars = chunk.len() + 1;
        for i in 0..4 {
            if i < chars {
                out.push(alphabet[((n >> (18 - 6 * i)) & 0x3f) as usize] as char);
            } else if pad {
                out.push('=');
            }
        }
    }
    out
}

/// Standard base64 with padding (kubeconfig `certificate-authority-data`).
pub(crate) fn base64_std(data: &[u8]) -> String {
    b64_encode(data, B64_STD, true)
}

/// URL-safe base64 without padding (continue tokens, as apimachinery's `RawURLEncoding`).
pub(crate) fn base64_url(data: &[u8]) -> String {
    b64_encode(data, B64_URL, false)
}

/// Decodes URL-safe base64, padded or not; `None` on any character outside the alphabet.
pub(crate) fn base64_url_decode(text: &str) -> Option<Vec<u8>> {
    let text = text.trim_end_matches('=');
    let mut out = Vec::with_capacity(text.len() * 3 / 4);
    let mut acc = 0u32;
    let mut bits = 0;
    for c in text.bytes() {
        let v = B64_URL.iter().position(|&a| a == c)? as u32;
        acc = (acc << 6) | v;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    Some(out)
}

/// Decodes one `application/x-www-form-urlencoded` component: `+` is a space, `%XX` a byte.
/// Malformed escapes are kept literally rather than rejected.
pub(crate) fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).ok();
                match hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                    Some(b) => {
                        out.push(b);
                        i += 2;
                    }
                    None => out.push(b'%'),
                }
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Splits a raw query string into decoded pairs, skipping empty pieces (kube-rs sends
/// `?&watch=true...`).
pub(crate) fn parse_query(raw: &str) -> Vec<(String, String)> {
    raw.split('&')
        .filter(|p| !p.is_empty())
        .map(|p| match p.split_once('=') {
            Some((k, v)) => (percent_decode(k), percent_decode(v)),
            None => (percent_decode(p), String::new()),
        })
        .collect()
}

/// The RFC 1123 subdomain rule object names follow (`metadata.name` of pods, nodes, events):
/// lowercase alphanumerics, `-` and `.`, starting and ending alphanumeric, at most 253 long.
/// `Err` carries the API server's wording.
pub(crate) fn validate_subdomain(name: &str) -> Result<(), String> {
    const MSG: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', \
                       and must start and end with an alphanumeric character (e.g. 'example.com', regex used for \
                       validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";
    if name.len() > 253 {
        return Err("must be no more than 253 characters".into());
    }
    let ok = !name.is_empty()
        && name.split('.').all(|part| {
            !part.is_empty()
                && part
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && part.as_bytes()[0] != b'-'
                && part.as_bytes()[part.len() - 1] != b'-'
        });
    if ok { Ok(()) } else { Err(MSG.into()) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uid_has_uuid_v4_shape() {
        let u = new_uid();
        assert_eq!(u.len(), 36);
        assert_eq!(&u[14..15], "4");
        assert_ne!(new_uid(), u);
    }

    #[test]
    fn base64_round_trip_and_known_values() {
        assert_eq!(base64_std(b"hello"), "aGVsbG8=");
        assert_eq!(base64_std(b"hi!"), "aGkh");
        assert_eq!(base64_url(b"\xfb\xff"), "-_8");
        for s in [&b""[..], b"a", b"ab", b"abc", b"abcd", b"{\"rv\":12}\x00"] {
            assert_eq!(base64_url_decode(&base64_url(s)).as_deref(), Some(s));
        }
        assert_eq!(base64_url_decode("a*b"), None);
    }

    #[test]
    fn query_decoding() {
        let q = parse_query("&watch=true&fieldSelector=spec.nodeName%3Dn1&labelSelector=a+in+(x%2Cy)&flag&bad=%zz");
        assert_eq!(
            q,
            vec![
                ("watch".into(), "true".into()),
                ("fieldSelector".into(), "spec.nodeName=n1".into()),
                ("labelSelector".into(), "a in (x,y)".into()),
                ("flag".into(), String::new()),
                ("bad".into(), "%zz".into()),
            ]
        );
        assert_eq!(percent_decode("100%"), "100%");
        assert_eq!(percent_decode("%4"), "%4");
    }

    #[test]
    fn subdomain_names() {
        assert!(validate_subdomain("spark-pi-driver").is_ok());
        assert!(validate_subdomain("worker-1.example").is_ok());
        assert!(validate_subdomain("Bad_Name").is_err());
        assert!(validate_subdomain("-x").is_err());
        assert!(validate_subdomain("").is_err());
    }
}
