//! Who the client is, behind load balancers and proxies the operator trusts
//! (`tollgate.trusted_proxies`): the address a request's `Forwarded` / `X-Forwarded-For`
//! headers name ([`client_addr`]) or a connection's PROXY protocol header carries
//! ([`proxy_protocol`]). Plain values only: the listeners (`proxy`, `server`) hand in the peer
//! and the headers.
//!
//! Only a trusted peer's word is taken. Each proxy appends the address it was connected from,
//! so the hops are walked right to left, from the peer: while the current hop is a trusted
//! proxy, the address it names is believed; the first untrusted one is the client (every hop
//! trusted: the leftmost). Anything left of an untrusted hop was written by the client itself
//! and is never read.

pub mod proxy_protocol;

use std::net::{IpAddr, SocketAddr};

use ipnet::IpNet;

/// Hops read from the right at most: a header is walked in bounded work, however long.
pub const MAX_HOPS: usize = 32;

/// The CIDRs whose word about a client's address is believed.
#[derive(Debug, Clone, Default)]
pub struct TrustedProxies {
    nets: Vec<IpNet>,
}

impl TrustedProxies {
    pub fn new(nets: Vec<IpNet>) -> Self {
        TrustedProxies { nets }
    }

    pub fn is_empty(&self) -> bool {
        self.nets.is_empty()
    }

    /// Whether `ip` (an IPv4-mapped IPv6 address read as IPv4) is in a trusted CIDR.
    pub fn trusts(&self, ip: IpAddr) -> bool {
        let ip = ip.to_canonical();
        self.nets.iter().any(|net| net.contains(&ip))
    }
}

/// A request's forwarding headers, every line of each in the order received.
#[derive(Debug, Clone, Copy, Default)]
pub struct Forwarding<'a> {
    pub forwarded: &'a [&'a [u8]],
    pub x_forwarded_for: &'a [&'a [u8]],
}

/// The client's address: `peer` when it is not trusted (the headers are ignored), else the
/// rightmost untrusted hop of `Forwarded` (when the request has one; else of
/// `X-Forwarded-For`). A hop that is no address (`unknown`, an obfuscated `_id`, garbage) ends
/// the walk at the proxy that wrote it: who is behind it is not known.
pub fn client_addr(peer: IpAddr, trusted: &TrustedProxies, headers: Forwarding<'_>) -> IpAddr {
    let peer = peer.to_canonical();
    if trusted.is_empty() || !trusted.trusts(peer) {
        return peer;
    }
    if headers.forwarded.is_empty() {
        walk(peer, trusted, hops(headers.x_forwarded_for, xff_hop))
    } else {
        walk(peer, trusted, hops(headers.forwarded, forwarded_hop))
    }
}

/// From the trusted `peer`, leftwards through `hops` (rightmost first) while they are trusted.
fn walk(
    peer: IpAddr,
    trusted: &TrustedProxies,
    hops: impl Iterator<Item = Option<IpAddr>>,
) -> IpAddr {
    let mut current = peer;
    for hop in hops.take(MAX_HOPS) {
        if !trusted.trusts(current) {
            break;
        }
        match hop {
            Some(ip) => current = ip.to_canonical(),
            None => break,
        }
    }
    current
}

/// The hops of every line, rightmost first, each read by `hop`.
fn hops<'a>(
    lines: &'a [&'a [u8]],
    hop: fn(&str) -> Option<IpAddr>,
) -> impl Iterator<Item = Option<IpAddr>> + 'a {
    lines.iter().rev().flat_map(move |line| {
        let text = std::str::from_utf8(line).unwrap_or("\u{0}");
        text.rsplit(',').map(move |h| hop(h.trim()))
    })
}

/// One `X-Forwarded-For` hop: `192.0.2.1`, `2001:db8::1`, `192.0.2.1:4711`, `[2001:db8::1]:80`.
fn xff_hop(hop: &str) -> Option<IpAddr> {
    address(hop)
}

/// One `Forwarded` element (`for=192.0.2.60;proto=https;by=203.0.113.43`): its `for`.
fn forwarded_hop(element: &str) -> Option<IpAddr> {
    let value = element.split(';').find_map(|pair| {
        let (name, value) = pair.split_once('=')?;
        name.trim()
            .eq_ignore_ascii_case("for")
            .then_some(value.trim())
    })?;
    let value = value
        .strip_prefix('"')
        .and_then(|v| v.strip_suffix('"'))
        .unwrap_or(value);
    address(value)
}

/// An IP address, with or without a port (an IPv6 one with a port in brackets).
fn address(text: &str) -> Option<IpAddr> {
    if let Ok(ip) = text.parse::<IpAddr>() {
        return Some(ip);
    }
    if let Ok(with_port) = text.parse::<SocketAddr>() {
        return Some(with_port.ip());
    }
    // `[2001:db8::1]` without a port.
    let bracketed = text.strip_prefix('[')?.strip_suffix(']')?;
    bracketed.parse::<std::net::Ipv6Addr>().ok().map(IpAddr::V6)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trusted(cidrs: &[&str]) -> TrustedProxies {
        TrustedProxies::new(cidrs.iter().map(|c| c.parse().unwrap()).collect())
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn xff(peer: &str, t: &TrustedProxies, lines: &[&str]) -> IpAddr {
        let lines: Vec<&[u8]> = lines.iter().map(|l| l.as_bytes()).collect();
        let headers = Forwarding {
            x_forwarded_for: &lines,
            ..Forwarding::default()
        };
        client_addr(ip(peer), t, headers)
    }

    fn fwd(peer: &str, t: &TrustedProxies, lines: &[&str]) -> IpAddr {
        let lines: Vec<&[u8]> = lines.iter().map(|l| l.as_bytes()).collect();
        let headers = Forwarding {
            forwarded: &lines,
            ..Forwarding::default()
        };
        client_addr(ip(peer), t, headers)
    }

    #[test]
    fn an_untrusted_peers_headers_are_ignored() {
        let t = trusted(&["10.0.0.0/8"]);
        assert_eq!(xff("192.0.2.9", &t, &["198.51.100.7"]), ip("192.0.2.9"));
        assert_eq!(fwd("192.0.2.9", &t, &["for=198.51.100.7"]), ip("192.0.2.9"));
        let none = TrustedProxies::default();
        assert_eq!(xff("10.0.0.1", &none, &["198.51.100.7"]), ip("10.0.0.1"));
    }

    #[test]
    fn the_rightmost_untrusted_hop_is_the_client() {
        let t = trusted(&["10.0.0.0/8", "2001:db8:ffff::/48"]);
        // The client forged the leftmost hop; the balancer appended what it saw.
        let lines = ["6.6.6.6, 198.51.100.7, 10.0.0.2"];
        assert_eq!(xff("10.0.0.1", &t, &lines), ip("198.51.100.7"));
        let lines = ["6.6.6.6", "198.51.100.7:5555", "10.0.0.2"];
        assert_eq!(xff("10.0.0.1", &t, &lines), ip("198.51.100.7"), "lines");
        assert_eq!(
            xff("2001:db8:ffff::1", &t, &["[2001:db8::7]:443"]),
            ip("2001:db8::7")
        );
        assert_eq!(xff("10.0.0.1", &t, &["2001:db8::7"]), ip("2001:db8::7"));
    }

    #[test]
    fn every_hop_trusted_gives_the_leftmost() {
        let t = trusted(&["10.0.0.0/8"]);
        assert_eq!(xff("10.0.0.1", &t, &["10.1.1.1, 10.2.2.2"]), ip("10.1.1.1"));
        assert_eq!(xff("10.0.0.1", &t, &[]), ip("10.0.0.1"), "no header");
    }

    #[test]
    fn forwarded_elements_quoted_v6_and_ports() {
        let t = trusted(&["10.0.0.0/8"]);
        let lines = [r#"for=6.6.6.6, for="[2001:db8::1]:4711";proto=https, For=10.0.0.3"#];
        assert_eq!(fwd("10.0.0.1", &t, &lines), ip("2001:db8::1"));
        let lines = ["for=192.0.2.60;proto=http;by=203.0.113.43"];
        assert_eq!(fwd("10.0.0.1", &t, &lines), ip("192.0.2.60"));
        let lines = [r#"for="192.0.2.61:8080""#, r#"for="[2001:db8::2]""#];
        assert_eq!(fwd("10.0.0.1", &t, &lines), ip("2001:db8::2"));
    }

    #[test]
    fn forwarded_is_read_before_x_forwarded_for() {
        let t = trusted(&["10.0.0.0/8"]);
        let f: [&[u8]; 1] = [b"for=192.0.2.1"];
        let x: [&[u8]; 1] = [b"198.51.100.1"];
        let both = Forwarding {
            forwarded: &f,
            x_forwarded_for: &x,
        };
        assert_eq!(client_addr(ip("10.0.0.1"), &t, both), ip("192.0.2.1"));
    }

    #[test]
    fn unknown_obfuscated_and_garbage_hops_stop_at_the_proxy_that_wrote_them() {
        let t = trusted(&["10.0.0.0/8"]);
        for hop in [
            "for=unknown",
            "for=_hidden",
            "proto=https",
            "for=",
            "for=\"[::1",
            "x",
        ] {
            let lines = [&*format!("for=198.51.100.7, {hop}")];
            assert_eq!(fwd("10.0.0.1", &t, &lines), ip("10.0.0.1"), "{hop}");
        }
        let lines = ["198.51.100.7, unknown, 10.0.0.2"];
        assert_eq!(xff("10.0.0.1", &t, &lines), ip("10.0.0.2"));
        let bytes: [&[u8]; 1] = [b"\xff\xfe, 10.0.0.2"];
        let headers = Forwarding {
            x_forwarded_for: &bytes,
            ..Forwarding::default()
        };
        assert_eq!(client_addr(ip("10.0.0.1"), &t, headers), ip("10.0.0.1"));
    }

    #[test]
    fn mapped_ipv4_peers_and_hops_read_as_ipv4() {
        let t = trusted(&["10.0.0.0/8"]);
        assert_eq!(
            xff("::ffff:10.0.0.1", &t, &["::ffff:198.51.100.7"]),
            ip("198.51.100.7")
        );
    }

    #[test]
    fn a_long_chain_is_read_only_so_far() {
        let t = trusted(&["10.0.0.0/8"]);
        let mut chain: Vec<String> = vec!["198.51.100.7".into()];
        chain.extend((0..100).map(|i| format!("10.0.{}.{}", i / 250, i % 250 + 1)));
        let line = chain.join(", ");
        let got = xff("10.0.0.1", &t, &[&line]);
        assert!(
            t.trusts(got),
            "stopped at a trusted hop after {MAX_HOPS}: {got}"
        );
        assert_ne!(got, ip("198.51.100.7"));
    }

    #[test]
    fn garbage_never_panics() {
        let t = trusted(&["0.0.0.0/0", "::/0"]);
        let samples: [&[u8]; 9] = [
            b"",
            b",,,,",
            b"[",
            b"]:",
            b"for=\"",
            b";;;=;=",
            b"\x00\x01\x02",
            b"for=[::1]:99999",
            b"1.2.3.4:-1, [zz]",
        ];
        for s in samples {
            let lines = [s];
            for headers in [
                Forwarding {
                    forwarded: &lines,
                    ..Forwarding::default()
                },
                Forwarding {
                    x_forwarded_for: &lines,
                    ..Forwarding::default()
                },
            ] {
                let _ = client_addr(ip("10.0.0.1"), &t, headers);
            }
        }
    }
}
