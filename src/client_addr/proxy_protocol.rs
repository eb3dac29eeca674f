//! The PROXY protocol (HAProxy's, versions 1 and 2): the header a load balancer writes at the
//! start of a connection to say whom it is relaying. [`parse`] reads one from the bytes
//! received so far; [`read_header`] reads a connection until it has one (bounded to
//! [`MAX_HEADER`] bytes; its caller sets the deadline).
//!
//! A small parser of our own: only the source address is needed, and no crate for it is kept
//! better than these hundred lines and their tests.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use tokio::io::{AsyncRead, AsyncReadExt};

/// The version 2 signature.
const V2_SIGNATURE: &[u8; 12] = b"\r\n\r\n\x00\r\nQUIT\n";
/// The longest version 1 header, `\r\n` included (the specification's bound).
const V1_MAX: usize = 107;
/// The most a header may take; a version 2 header's TLVs beyond that are refused.
pub const MAX_HEADER: usize = 1024;

/// What a header says about the connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Header {
    /// Relayed for this client.
    Proxied { source: SocketAddr },
    /// The balancer's own connection (v2 `LOCAL`, a health check), or one it cannot describe
    /// (v1 `UNKNOWN`, v2 `UNSPEC`, a Unix socket): the peer is the client.
    Local,
}

/// What the bytes so far hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Parsed {
    /// A whole header, `len` bytes long; what follows is the client's.
    Complete { header: Header, len: usize },
    /// The start of a header: more bytes are needed.
    Incomplete,
}

#[derive(Debug, thiserror::Error)]
pub enum ProxyHeaderError {
    #[error("the connection does not start with a PROXY protocol header")]
    Missing,
    #[error("malformed PROXY protocol header: {0}")]
    Malformed(&'static str),
    #[error("PROXY protocol header longer than {MAX_HEADER} bytes")]
    TooLong,
    #[error("the connection closed before its PROXY protocol header was read")]
    Closed,
    #[error("reading the PROXY protocol header: {0}")]
    Io(#[from] std::io::Error),
}

/// Reads `buf`, the first bytes of a connection.
pub fn parse(buf: &[u8]) -> Result<Parsed, ProxyHeaderError> {
    if starts_like(buf, b"PROXY ") {
        v1(buf)
    } else if starts_like(buf, V2_SIGNATURE) {
        v2(buf)
    } else {
        Err(ProxyHeaderError::Missing)
    }
}

/// Whether `buf` and `prefix` agree as far as both go.
fn starts_like(buf: &[u8], prefix: &[u8]) -> bool {
    let n = buf.len().min(prefix.len());
    buf.get(..n) == prefix.get(..n)
}

/// `PROXY TCP4 192.0.2.1 198.51.100.1 56324 443\r\n`, `PROXY UNKNOWN …\r\n`.
fn v1(buf: &[u8]) -> Result<Parsed, ProxyHeaderError> {
    let window = buf.get(..buf.len().min(V1_MAX)).unwrap_or(buf);
    let Some(end) = window.windows(2).position(|w| w == b"\r\n") else {
        return if buf.len() >= V1_MAX {
            Err(ProxyHeaderError::Malformed("v1 line without its end"))
        } else {
            Ok(Parsed::Incomplete)
        };
    };
    let line = window.get(..end).unwrap_or_default();
    let line = std::str::from_utf8(line).map_err(|_| ProxyHeaderError::Malformed("v1 text"))?;
    let mut words = line.split(' ').skip(1);
    let header = match words.next() {
        Some("UNKNOWN") => Header::Local,
        Some(family @ ("TCP4" | "TCP6")) => {
            let mut next = || words.next().ok_or(ProxyHeaderError::Malformed("v1 fields"));
            let source: IpAddr = next()?.parse().map_err(|_| bad("v1 source"))?;
            let dest: IpAddr = next()?.parse().map_err(|_| bad("v1 destination"))?;
            let port: u16 = next()?.parse().map_err(|_| bad("v1 source port"))?;
            next()?
                .parse::<u16>()
                .map_err(|_| bad("v1 destination port"))?;
            if words.next().is_some() {
                return Err(bad("v1 fields"));
            }
            let v4 = family == "TCP4";
            if source.is_ipv4() != v4 || dest.is_ipv4() != v4 {
                return Err(bad("v1 address family"));
            }
            Header::Proxied {
                source: SocketAddr::new(source, port),
            }
        }
        _ => return Err(bad("v1 protocol")),
    };
    Ok(Parsed::Complete {
        header,
        len: end.saturating_add(2),
    })
}

fn bad(what: &'static str) -> ProxyHeaderError {
    ProxyHeaderError::Malformed(what)
}

/// The binary header: signature, version and command, family and protocol, length, addresses.
fn v2(buf: &[u8]) -> Result<Parsed, ProxyHeaderError> {
    let Some(&[ver_cmd, family, hi, lo]) = buf.get(12..16) else {
        return Ok(Parsed::Incomplete);
    };
    if ver_cmd >> 4 != 2 {
        return Err(bad("v2 version"));
    }
    let len = 16usize.saturating_add(usize::from(u16::from_be_bytes([hi, lo])));
    if len > MAX_HEADER {
        return Err(ProxyHeaderError::TooLong);
    }
    let Some(body) = buf.get(16..len) else {
        return Ok(Parsed::Incomplete);
    };
    let header = match ver_cmd & 0x0f {
        0x0 => Header::Local,
        0x1 => proxied(family, body)?,
        _ => return Err(bad("v2 command")),
    };
    Ok(Parsed::Complete { header, len })
}

/// A v2 `PROXY` command's source, by its address family (`family >> 4`).
fn proxied(family: u8, body: &[u8]) -> Result<Header, ProxyHeaderError> {
    let port = |at: usize| {
        body.get(at..at.saturating_add(2))
            .map(|p| u16::from_be_bytes([p[0], p[1]]))
    };
    let source = match family >> 4 {
        0x1 => {
            let ip: [u8; 4] = body
                .get(..4)
                .and_then(|a| a.try_into().ok())
                .ok_or(bad("v2 IPv4"))?;
            SocketAddr::new(Ipv4Addr::from(ip).into(), port(8).ok_or(bad("v2 IPv4"))?)
        }
        0x2 => {
            let ip: [u8; 16] = body
                .get(..16)
                .and_then(|a| a.try_into().ok())
                .ok_or(bad("v2 IPv6"))?;
            SocketAddr::new(Ipv6Addr::from(ip).into(), port(32).ok_or(bad("v2 IPv6"))?)
        }
        0x0 | 0x3 => return Ok(Header::Local), // unspecified, or a Unix socket
        _ => return Err(bad("v2 address family")),
    };
    Ok(Header::Proxied { source })
}

/// Reads `conn` until it has a whole header: the header, and the bytes read past it (the
/// client's first bytes, to be handed back to the connection).
pub async fn read_header<R: AsyncRead + Unpin>(
    conn: &mut R,
) -> Result<(Header, Vec<u8>), ProxyHeaderError> {
    let mut buf = vec![0u8; MAX_HEADER];
    let mut filled = 0;
    loop {
        let read = buf.get(..filled).unwrap_or_default();
        if let Parsed::Complete { header, len } = parse(read)? {
            return Ok((header, buf.get(len..filled).unwrap_or_default().to_vec()));
        }
        let room = buf.get_mut(filled..).unwrap_or_default();
        if room.is_empty() {
            return Err(ProxyHeaderError::TooLong);
        }
        match conn.read(room).await? {
            0 => return Err(ProxyHeaderError::Closed),
            n => filled = filled.saturating_add(n),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn complete(buf: &[u8]) -> (Header, usize) {
        match parse(buf).unwrap() {
            Parsed::Complete { header, len } => (header, len),
            Parsed::Incomplete => panic!("incomplete: {buf:?}"),
        }
    }

    fn sock(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    fn v2_header(cmd: u8, family: u8, addresses: &[u8]) -> Vec<u8> {
        let mut h = V2_SIGNATURE.to_vec();
        h.push(0x20 | cmd);
        h.push(family);
        h.extend_from_slice(&u16::try_from(addresses.len()).unwrap().to_be_bytes());
        h.extend_from_slice(addresses);
        h
    }

    #[test]
    fn v1_tcp4_tcp6_and_unknown() {
        let line = b"PROXY TCP4 192.0.2.1 198.51.100.1 56324 443\r\nGET / HTTP/1.1\r\n";
        let (header, len) = complete(line);
        assert_eq!(
            header,
            Header::Proxied {
                source: sock("192.0.2.1:56324")
            }
        );
        assert_eq!(&line[len..len + 3], b"GET");
        let (header, _) = complete(b"PROXY TCP6 2001:db8::1 2001:db8::2 4711 443\r\n");
        assert_eq!(
            header,
            Header::Proxied {
                source: sock("[2001:db8::1]:4711")
            }
        );
        assert_eq!(complete(b"PROXY UNKNOWN\r\n"), (Header::Local, 15));
        assert_eq!(
            complete(b"PROXY UNKNOWN ffff::1 ffff::2 1 2\r\n").0,
            Header::Local
        );
    }

    #[test]
    fn v1_every_prefix_is_incomplete() {
        let line = b"PROXY TCP4 192.0.2.1 198.51.100.1 56324 443\r\n";
        for n in 0..line.len() {
            assert_eq!(parse(&line[..n]).unwrap(), Parsed::Incomplete, "{n}");
        }
    }

    #[test]
    fn v1_malformed_lines_are_refused() {
        for bad in [
            &b"PROXY TCP4 192.0.2.1 198.51.100.1 56324\r\n"[..],
            b"PROXY TCP4 192.0.2.1 198.51.100.1 56324 443 9\r\n",
            b"PROXY TCP4 2001:db8::1 198.51.100.1 1 2\r\n",
            b"PROXY TCP6 192.0.2.1 198.51.100.1 1 2\r\n",
            b"PROXY TCP4 192.0.2.1 198.51.100.1 65536 443\r\n",
            b"PROXY TCP4  192.0.2.1 198.51.100.1 1 2\r\n",
            b"PROXY UDP4 192.0.2.1 198.51.100.1 1 2\r\n",
            b"PROXY \xff\r\n",
        ] {
            assert!(
                matches!(parse(bad), Err(ProxyHeaderError::Malformed(_))),
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
        let endless = [b"PROXY TCP4 ".as_slice(), &[b'1'; 200]].concat();
        assert!(matches!(
            parse(&endless),
            Err(ProxyHeaderError::Malformed(_))
        ));
    }

    #[test]
    fn anything_else_is_no_header() {
        for other in [
            &b"GET / HTTP/1.1\r\n"[..],
            b"\x16\x03\x01",
            b"proxy ",
            b"\r\n\r\n\x01",
        ] {
            assert!(
                matches!(parse(other), Err(ProxyHeaderError::Missing)),
                "{other:?}"
            );
        }
    }

    #[test]
    fn v2_inet_inet6_local_and_tlvs() {
        let mut v4 = vec![192, 0, 2, 1, 198, 51, 100, 1];
        v4.extend_from_slice(&56324u16.to_be_bytes());
        v4.extend_from_slice(&443u16.to_be_bytes());
        let h = v2_header(1, 0x11, &v4);
        assert_eq!(
            complete(&h),
            (
                Header::Proxied {
                    source: sock("192.0.2.1:56324")
                },
                28
            )
        );
        let mut v6 = "2001:db8::1".parse::<Ipv6Addr>().unwrap().octets().to_vec();
        v6.extend_from_slice(&"2001:db8::2".parse::<Ipv6Addr>().unwrap().octets());
        v6.extend_from_slice(&4711u16.to_be_bytes());
        v6.extend_from_slice(&443u16.to_be_bytes());
        v6.extend_from_slice(&[0x04, 0x00, 0x02, 0xab, 0xcd]); // a TLV (noop)
        let h = v2_header(1, 0x21, &v6);
        let (header, len) = complete(&h);
        assert_eq!(
            header,
            Header::Proxied {
                source: sock("[2001:db8::1]:4711")
            }
        );
        assert_eq!(len, h.len());
        assert_eq!(complete(&v2_header(0, 0x00, &[])), (Header::Local, 16));
        assert_eq!(complete(&v2_header(0, 0x11, &v4)).0, Header::Local, "LOCAL");
        assert_eq!(
            complete(&v2_header(1, 0x31, &[0; 216])).0,
            Header::Local,
            "unix"
        );
        for n in 0..h.len() {
            assert_eq!(parse(&h[..n]).unwrap(), Parsed::Incomplete, "{n}");
        }
    }

    #[test]
    fn v2_malformed_headers_are_refused() {
        let short = v2_header(1, 0x11, &[192, 0, 2, 1]);
        assert!(matches!(parse(&short), Err(ProxyHeaderError::Malformed(_))));
        let short6 = v2_header(1, 0x21, &[0; 20]);
        assert!(matches!(
            parse(&short6),
            Err(ProxyHeaderError::Malformed(_))
        ));
        let mut bad_version = v2_header(1, 0x11, &[0; 12]);
        bad_version[12] = 0x11;
        assert!(matches!(
            parse(&bad_version),
            Err(ProxyHeaderError::Malformed(_))
        ));
        assert!(matches!(
            parse(&v2_header(2, 0x11, &[0; 12])),
            Err(ProxyHeaderError::Malformed(_))
        ));
        assert!(matches!(
            parse(&v2_header(1, 0x41, &[0; 12])),
            Err(ProxyHeaderError::Malformed(_))
        ));
        let mut huge = v2_header(1, 0x11, &[]);
        huge[14..16].copy_from_slice(&u16::MAX.to_be_bytes());
        assert!(matches!(parse(&huge), Err(ProxyHeaderError::TooLong)));
    }

    #[test]
    fn garbage_never_panics() {
        // A cheap deterministic generator: every byte string a few prefixes could lead to.
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let prefixes: [&[u8]; 3] = [b"PROXY ", V2_SIGNATURE, b""];
        for i in 0..20_000 {
            let mut buf = prefixes[i % 3].to_vec();
            let len = (next() % 300) as usize;
            buf.extend((0..len).map(|_| {
                let r = next();
                // Bias towards the bytes the parsers look at.
                match r % 8 {
                    0 => b' ',
                    1 => b'\r',
                    2 => b'\n',
                    3 => b"0123456789.:"[(r >> 8) as usize % 12],
                    _ => (r >> 16) as u8,
                }
            }));
            if let Ok(Parsed::Complete { len, .. }) = parse(&buf) {
                assert!(len <= buf.len());
            }
        }
    }

    #[tokio::test]
    async fn a_header_read_from_a_connection_leaves_the_clients_bytes() {
        let (mut client, mut server) = tokio::io::duplex(64);
        let write = async {
            use tokio::io::AsyncWriteExt;
            for piece in [&b"PROXY TCP4 192.0.2.1 "[..], b"198.51.100.1 1 2\r\nGET"] {
                client.write_all(piece).await.unwrap();
            }
            drop(client);
        };
        let (read, ()) = tokio::join!(read_header(&mut server), write);
        let (header, rest) = read.unwrap();
        assert_eq!(
            header,
            Header::Proxied {
                source: sock("192.0.2.1:1")
            }
        );
        assert_eq!(rest, b"GET");
    }

    #[tokio::test]
    async fn a_connection_closing_early_or_talking_http_has_no_header() {
        let mut early = &b"PROXY TCP4 192.0.2.1"[..];
        assert!(matches!(
            read_header(&mut early).await,
            Err(ProxyHeaderError::Closed)
        ));
        let mut http = &b"GET / HTTP/1.1\r\n\r\n"[..];
        assert!(matches!(
            read_header(&mut http).await,
            Err(ProxyHeaderError::Missing)
        ));
    }
}
