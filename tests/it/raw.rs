//! A minimal HTTP/1.1 client over a raw socket, for what reqwest will not do: `Expect:
//! 100-continue`, hand-made chunked bodies, exact control over headers, and watching when the
//! gateway closes a connection.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

pub struct RawResponse {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    /// Whether a `100 Continue` arrived before the final response.
    pub continued: bool,
}

impl RawResponse {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&self.body)))
    }
}

pub enum Framing {
    ContentLength,
    Chunked,
}

/// POSTs `body` to `path`; with `expect_continue`, waits for the 100 before sending the body.
pub fn post(
    addr: &str,
    path: &str,
    key: &str,
    body: &[u8],
    framing: Framing,
    expect_continue: bool,
) -> RawResponse {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut head = format!("POST {path} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {key}\r\nContent-Type: application/json\r\nConnection: close\r\n");
    match framing {
        Framing::ContentLength => head.push_str(&format!("Content-Length: {}\r\n", body.len())),
        Framing::Chunked => head.push_str("Transfer-Encoding: chunked\r\n"),
    }
    if expect_continue {
        head.push_str("Expect: 100-continue\r\n");
    }
    head.push_str("\r\n");
    s.write_all(head.as_bytes()).unwrap();
    let mut reader = BufReader::new(s.try_clone().unwrap());
    let mut continued = false;
    if expect_continue {
        let mut line = String::new();
        reader.read_line(&mut line).unwrap();
        if line.starts_with("HTTP/1.1 100") {
            continued = true;
            loop {
                let mut l = String::new();
                reader.read_line(&mut l).unwrap();
                if l == "\r\n" {
                    break;
                }
            }
        } else {
            // Final answer without a 100 (e.g. 413): parse it from this status line.
            return read_response(line, reader, false);
        }
    }
    match framing {
        Framing::ContentLength => {
            // Write in pieces: a slow client must still be read whole.
            for piece in body.chunks(256 * 1024) {
                if s.write_all(piece).is_err() {
                    break;
                }
            }
        }
        Framing::Chunked => {
            for piece in body.chunks(100_000) {
                let _ = write!(s, "{:x}\r\n", piece.len());
                let _ = s.write_all(piece);
                let _ = s.write_all(b"\r\n");
            }
            let _ = s.write_all(b"0\r\n\r\n");
        }
    }
    let mut line = String::new();
    reader.read_line(&mut line).unwrap();
    read_response(line, reader, continued)
}

fn read_response(
    status_line: String,
    mut reader: BufReader<TcpStream>,
    continued: bool,
) -> RawResponse {
    let status: u16 = status_line
        .split(' ')
        .nth(1)
        .unwrap_or_else(|| panic!("bad status line {status_line:?}"))
        .parse()
        .unwrap();
    let mut headers = Vec::new();
    loop {
        let mut l = String::new();
        reader.read_line(&mut l).unwrap();
        let l = l.trim_end();
        if l.is_empty() {
            break;
        }
        let (k, v) = l.split_once(':').unwrap();
        headers.push((k.trim().to_owned(), v.trim().to_owned()));
    }
    let mut raw = Vec::new();
    let _ = reader.read_to_end(&mut raw);
    let chunked = headers
        .iter()
        .any(|(k, v)| k.eq_ignore_ascii_case("transfer-encoding") && v.contains("chunked"));
    let body = if chunked { dechunk(&raw) } else { raw };
    RawResponse {
        status,
        headers,
        body,
        continued,
    }
}

fn dechunk(mut raw: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let Some(eol) = raw.windows(2).position(|w| w == b"\r\n") else {
            return out;
        };
        let size = usize::from_str_radix(
            std::str::from_utf8(&raw[..eol])
                .unwrap()
                .split(';')
                .next()
                .unwrap()
                .trim(),
            16,
        )
        .unwrap();
        if size == 0 {
            return out;
        }
        out.extend_from_slice(&raw[eol + 2..eol + 2 + size]);
        raw = &raw[eol + 2 + size + 2..];
    }
}

/// What the gateway still sends on `sock`, read until it closes the connection (within 10 s:
/// `what` names the close expected), and how long that took.
pub async fn read_until_closed(sock: &mut tokio::net::TcpStream, what: &str) -> (String, Duration) {
    use tokio::io::AsyncReadExt;
    let started = Instant::now();
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), sock.read_to_end(&mut answer))
        .await
        .unwrap_or_else(|_| panic!("{what}"))
        .unwrap();
    let answer = String::from_utf8_lossy(&answer).into_owned();
    (answer, started.elapsed())
}

/// A connection that asked for `/health` and may be kept alive, and the answer it got.
pub async fn health_kept_alive(addr: &str) -> (tokio::net::TcpStream, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut sock = tokio::net::TcpStream::connect(addr).await.unwrap();
    sock.write_all(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut answer = vec![0; 4096];
    let n = sock.read(&mut answer).await.unwrap();
    (sock, String::from_utf8_lossy(&answer[..n]).into_owned())
}

/// Sends the start of a head to `addr`, then one more header byte every 200 ms (each read
/// arrives well within any per-read timeout, so only a limit on the whole head ends it) until
/// the gateway closes the connection: how long after the head began that was (at most 6 s:
/// past that the head is still being read, and this fails).
pub async fn trickle_head_until_closed(addr: &str, path: &str) -> Duration {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut sock = tokio::net::TcpStream::connect(addr).await.unwrap();
    let start = format!("POST {path} HTTP/1.1\r\nHost: x\r\n");
    sock.write_all(start.as_bytes()).await.unwrap();
    let started = Instant::now();
    let mut buf = [0u8; 1024];
    loop {
        assert!(
            started.elapsed() < Duration::from_secs(6),
            "a head trickled in for 6 s to {addr} is still being read"
        );
        if sock.write_all(b"X").await.is_err() {
            return started.elapsed();
        }
        match tokio::time::timeout(Duration::from_millis(200), sock.read(&mut buf)).await {
            Err(_) | Ok(Ok(1..)) => {} // still open
            Ok(Ok(0)) | Ok(Err(_)) => return started.elapsed(),
        }
    }
}

/// A connection to `addr` from the loopback address `source` (any of 127.0.0.0/8), so that
/// one test can be several clients.
pub async fn connect_from(source: &str, addr: &str) -> std::io::Result<tokio::net::TcpStream> {
    let socket = tokio::net::TcpSocket::new_v4()?;
    socket.bind(format!("{source}:0").parse().unwrap())?;
    socket.connect(addr.parse().unwrap()).await
}
