//! The cluster's pod networks: the CIDRs the nodes' `spec.podCIDRs` give out, which tell a
//! client-mode driver's IP that no pod has *now* (a driver pod deleted) from one that never
//! belonged to a pod (a notebook outside the cluster).

use std::net::IpAddr;

/// An IP prefix such as `10.244.1.0/24` or `fd00:10:244::/64`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    base: IpAddr,
    prefix: u8,
}

/// Why a text (a Node's `spec.podCIDRs` entry, as given) is not a CIDR.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CidrError {
    /// No `/`.
    #[error("{text:?}: not a CIDR (no /prefix)")]
    NoPrefix { text: String },
    /// The part before the `/` is not an IPv4 or IPv6 address.
    #[error("{text:?}: {addr:?} is not an IP address")]
    NotAnAddress { text: String, addr: String },
    /// The prefix length is not a number up to the address's bits (32 or 128).
    #[error("{text:?}: prefix {prefix:?} is not 0..={max}")]
    PrefixLength { text: String, prefix: String, max: u8 },
}

impl Cidr {
    /// Parses `a.b.c.d/n` or `x:y::/n`; the address bits past the prefix are ignored.
    pub fn parse(text: &str) -> Result<Cidr, CidrError> {
        let (addr, len) = text
            .trim()
            .split_once('/')
            .ok_or_else(|| CidrError::NoPrefix { text: text.to_string() })?;
        let base: IpAddr = addr.parse().map_err(|_| CidrError::NotAnAddress {
            text: text.to_string(),
            addr: addr.to_string(),
        })?;
        let max = if base.is_ipv4() { 32 } else { 128 };
        let prefix: u8 = len
            .parse()
            .ok()
            .filter(|p| *p <= max)
            .ok_or_else(|| CidrError::PrefixLength {
                text: text.to_string(),
                prefix: len.to_string(),
                max,
            })?;
        Ok(Cidr { base, prefix })
    }

    /// Whether `ip` lies in this prefix (an IPv4 address is never in an IPv6 prefix).
    pub fn contains(&self, ip: IpAddr) -> bool {
        fn leading_equal(a: u128, b: u128, bits: u32, prefix: u8) -> bool {
            let shift = bits - u32::from(prefix);
            shift >= bits || (a >> shift) == (b >> shift)
        }
        match (self.base, ip) {
            (IpAddr::V4(b), IpAddr::V4(i)) => leading_equal(u32::from(b).into(), u32::from(i).into(), 32, self.prefix),
            (IpAddr::V6(b), IpAddr::V6(i)) => leading_equal(u128::from(b), u128::from(i), 128, self.prefix),
            _ => false,
        }
    }
}

impl std::fmt::Display for Cidr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.base, self.prefix)
    }
}

/// The first of `networks` that holds `ip`.
pub fn network_of(networks: &[Cidr], ip: IpAddr) -> Option<Cidr> {
    networks.iter().copied().find(|n| n.contains(ip))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn ipv4_prefixes() {
        let n = Cidr::parse("10.244.1.0/24").unwrap();
        assert!(n.contains(ip("10.244.1.31")));
        assert!(n.contains(ip("10.244.1.0")));
        assert!(n.contains(ip("10.244.1.255")));
        assert!(!n.contains(ip("10.244.2.1")));
        assert!(!n.contains(ip("10.244.0.255")));
        // Host bits in the base are ignored, as the API server's own parser does.
        assert!(Cidr::parse("10.244.1.7/24").unwrap().contains(ip("10.244.1.200")));
        assert!(Cidr::parse("0.0.0.0/0").unwrap().contains(ip("192.0.2.1")));
        assert!(Cidr::parse("10.0.0.5/32").unwrap().contains(ip("10.0.0.5")));
        assert!(!Cidr::parse("10.0.0.5/32").unwrap().contains(ip("10.0.0.4")));
        assert_eq!(n.to_string(), "10.244.1.0/24");
    }

    #[test]
    fn ipv6_prefixes_and_mixed_families() {
        let n = Cidr::parse("fd00:10:244:1::/64").unwrap();
        assert!(n.contains(ip("fd00:10:244:1::1f")));
        assert!(!n.contains(ip("fd00:10:244:2::1")));
        assert!(!n.contains(ip("10.244.1.31")));
        assert!(!Cidr::parse("10.0.0.0/8").unwrap().contains(ip("::ffff:10.0.0.1")));
        assert!(Cidr::parse("::/0").unwrap().contains(ip("2001:db8::1")));
    }

    #[test]
    fn bad_cidrs_say_what_is_wrong() {
        let text = |e: CidrError| e.to_string();
        assert_eq!(
            text(Cidr::parse("10.244.1.0").unwrap_err()),
            "\"10.244.1.0\": not a CIDR (no /prefix)"
        );
        assert_eq!(
            Cidr::parse("10.244.1/24").unwrap_err(),
            CidrError::NotAnAddress {
                text: "10.244.1/24".into(),
                addr: "10.244.1".into()
            }
        );
        assert_eq!(
            text(Cidr::parse("10.244.1/24").unwrap_err()),
            "\"10.244.1/24\": \"10.244.1\" is not an IP address"
        );
        assert_eq!(
            text(Cidr::parse("10.244.1.0/33").unwrap_err()),
            "\"10.244.1.0/33\": prefix \"33\" is not 0..=32"
        );
        assert!(text(Cidr::parse("fd00::/129").unwrap_err()).contains("0..=128"));
        assert!(matches!(
            Cidr::parse("10.0.0.0/x"),
            Err(CidrError::PrefixLength { max: 32, .. })
        ));
    }

    #[test]
    fn the_first_matching_network_is_named() {
        let nets = [
            Cidr::parse("10.244.0.0/24").unwrap(),
            Cidr::parse("10.244.1.0/24").unwrap(),
        ];
        assert_eq!(network_of(&nets, ip("10.244.1.31")), Some(nets[1]));
        assert_eq!(network_of(&nets, ip("192.168.1.5")), None);
    }
}
