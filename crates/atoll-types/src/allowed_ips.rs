//! The allowed-IP rules of a database (`allowed_ips` of its configuration): which rules
//! the control plane accepts, and which addresses a rule lets in on the node.

/// Whether `text` is an allowed-IP rule a database may be given: an address, or an
/// address and a prefix length that fits it (`10.0.0.0/8`, `2001:db8::/32`).
pub fn is_valid_rule(text: &str) -> bool {
    let (ip, prefix) = text
        .split_once('/')
        .map_or((text, None), |(ip, p)| (ip, Some(p)));
    let Ok(addr) = ip.parse::<std::net::IpAddr>() else {
        return false;
    };
    match prefix {
        None => true,
        Some(p) => p
            .parse::<u8>()
            .is_ok_and(|bits| bits <= if addr.is_ipv4() { 32 } else { 128 }),
    }
}

/// `ip` is `rule` (an address) or inside it (a CIDR range).
pub fn ip_matches(ip: std::net::IpAddr, rule: &str) -> bool {
    use std::net::IpAddr;
    let (address, bits) = match rule.split_once('/') {
        Some((a, b)) => (a, b.parse::<u32>().ok()),
        None => (rule, None),
    };
    let Ok(network) = address.trim().parse::<IpAddr>() else {
        return false;
    };
    let ip = match (ip, network) {
        // An IPv4 client may show up as an IPv4-mapped IPv6 address.
        (IpAddr::V6(v6), IpAddr::V4(_)) => v6.to_ipv4_mapped().map(IpAddr::V4).unwrap_or(ip),
        _ => ip,
    };
    match (ip, network) {
        (IpAddr::V4(a), IpAddr::V4(n)) => {
            let bits = bits.unwrap_or(32).min(32);
            let mask = if bits == 0 {
                0
            } else {
                u32::MAX << (32 - bits)
            };
            u32::from(a) & mask == u32::from(n) & mask
        }
        (IpAddr::V6(a), IpAddr::V6(n)) => {
            let bits = bits.unwrap_or(128).min(128);
            let mask = if bits == 0 {
                0
            } else {
                u128::MAX << (128 - bits)
            };
            u128::from(a) & mask == u128::from(n) & mask
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::{ip_matches, is_valid_rule};

    #[test]
    fn addresses_and_ranges() {
        let ip = |s: &str| s.parse().unwrap();
        assert!(ip_matches(ip("203.0.113.7"), "203.0.113.7"));
        assert!(!ip_matches(ip("203.0.113.8"), "203.0.113.7"));
        assert!(ip_matches(ip("10.1.2.3"), "10.0.0.0/8"));
        assert!(!ip_matches(ip("11.1.2.3"), "10.0.0.0/8"));
        assert!(ip_matches(ip("::ffff:127.0.0.1"), "127.0.0.0/8"));
        assert!(ip_matches(ip("2001:db8::1"), "2001:db8::/32"));
        assert!(!ip_matches(ip("2001:db9::1"), "2001:db8::/32"));
        assert!(ip_matches(ip("1.2.3.4"), "0.0.0.0/0"));
        assert!(!ip_matches(ip("1.2.3.4"), "garbage"));
    }

    #[test]
    fn rules_a_database_may_be_given() {
        for rule in ["203.0.113.7", "10.0.0.0/8", "2001:db8::/32", "0.0.0.0/0"] {
            assert!(is_valid_rule(rule), "{rule}");
        }
        for rule in ["garbage", "10.0.0.0/33", "2001:db8::/129", "10.0.0.0/x", ""] {
            assert!(!is_valid_rule(rule), "{rule}");
        }
    }
}
