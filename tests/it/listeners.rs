//! Listeners that cannot be held: each listener caps its connections, in total and per client
//! address, and refuses the extra ones at once with a `503`; a flood of slow heads on one
//! listener leaves the other answering (the process keeps file handles for it).
//! Deadlines on heads, bodies and idle connections, on both listeners, are in `hostile.rs`.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::harness::{eventually, Gateway};
use crate::raw::{connect_from, read_until_closed};

fn host_port(url: &str) -> String {
    url.trim_start_matches("http://").to_owned()
}

/// Raises this test process's open-file limit to its hard limit: a flood holds thousands of
/// sockets at once.
fn raise_open_files() {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
    if soft < hard {
        setrlimit(Resource::RLIMIT_NOFILE, hard, hard).unwrap();
    }
    let (soft, _) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
    assert!(
        soft >= 5_000,
        "a flood test needs 5,000 file handles; the limit is {soft}"
    );
}

/// The gateway's open file handles (Linux).
fn open_handles(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count())
}

/// `n` connections that each sent the start of a head and then add a header line every
/// 500 ms, as the security review's attacker did; the ones the gateway closes are dropped (so
/// the test's own handles stay bounded), the rest until the flood is dropped.
struct Flood {
    open: Arc<AtomicUsize>,
    trickler: tokio::task::JoinHandle<()>,
}

impl Drop for Flood {
    fn drop(&mut self) {
        self.trickler.abort();
    }
}

async fn flood(addr: &str, n: usize) -> Flood {
    let mut socks = Vec::with_capacity(n);
    for batch in 0..n.div_ceil(250) {
        let connects = (0..250.min(n - batch * 250)).map(|_| async {
            let connect = tokio::time::timeout(Duration::from_secs(2), TcpStream::connect(addr));
            let mut sock = connect.await.ok()?.ok()?;
            sock.write_all(b"GET /health HTTP/1.1\r\nHost: x\r\n")
                .await
                .ok()?;
            Some(sock)
        });
        socks.extend(
            futures_util::future::join_all(connects)
                .await
                .into_iter()
                .flatten(),
        );
    }
    let open = Arc::new(AtomicUsize::new(socks.len()));
    let counter = open.clone();
    let trickler = tokio::spawn(async move {
        loop {
            tokio::time::sleep(Duration::from_millis(500)).await;
            socks.retain(|s| match s.try_write(b"X-Slow: 1\r\n") {
                Ok(_) => true,
                Err(e) => e.kind() == std::io::ErrorKind::WouldBlock,
            });
            counter.store(socks.len(), Ordering::Relaxed);
        }
    });
    Flood { open, trickler }
}

/// `GET /health` on a fresh connection: its status line and how long it took, or what went
/// wrong within 5 s.
async fn health(addr: &str) -> Result<(String, Duration), String> {
    let started = Instant::now();
    let exchange = async {
        let mut sock = TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
        sock.write_all(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .await
            .map_err(|e| e.to_string())?;
        let mut answer = Vec::new();
        sock.read_to_end(&mut answer)
            .await
            .map_err(|e| e.to_string())?;
        let answer = String::from_utf8_lossy(&answer).into_owned();
        Ok::<_, String>(answer.lines().next().unwrap_or("(nothing)").to_owned())
    };
    match tokio::time::timeout(Duration::from_secs(5), exchange).await {
        Ok(Ok(status)) => Ok((status, started.elapsed())),
        Ok(Err(e)) => Err(e),
        Err(_) => Err("no answer within 5 s".into()),
    }
}

/// Floods `flooded` with 4,000 slow heads and asks `other` for `/health` ten times meanwhile:
/// every answer must be a 200. Returns the slowest answer.
async fn flood_one_ask_the_other(gw: &Gateway, flooded: &str, other: &str) -> Duration {
    raise_open_files();
    let before = open_handles(gw.pid());
    let flood = flood(flooded, 4_000).await;
    let (mut slowest, mut handles) = (Duration::ZERO, 0);
    for i in 0..10 {
        handles = handles.max(open_handles(gw.pid()));
        let answer = health(other).await;
        let (status, took) = answer
            .unwrap_or_else(|e| panic!("probe {i} of {other} while {flooded} is flooded: {e}"));
        assert!(status.starts_with("HTTP/1.1 200"), "probe {i}: {status}");
        slowest = slowest.max(took);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    eprintln!(
        "flood of {flooded}: the gateway held at most {handles} file handles ({before} \
         before); {} of 4,000 connections open after the probes; slowest /health of {other}: \
         {slowest:?}",
        flood.open.load(Ordering::Relaxed)
    );
    drop(flood);
    // Once the flood is gone the flooded listener answers again.
    let back = eventually(Duration::from_secs(10), || async {
        health(flooded)
            .await
            .is_ok_and(|(s, _)| s.starts_with("HTTP/1.1 200"))
    });
    assert!(back.await.is_some(), "{flooded} never answered again");
    slowest
}

#[tokio::test]
async fn a_slow_head_flood_on_the_admin_port_leaves_the_public_port_answering() {
    // A small host: 1,024 file handles, fewer than the flood's connections.
    let gw = Gateway::builder()
        .open_files(1_024)
        .limits("idle_timeout: 3s")
        .start();
    flood_one_ask_the_other(&gw, &host_port(&gw.admin), &host_port(&gw.base)).await;
}

#[tokio::test]
async fn a_slow_head_flood_on_the_public_port_leaves_the_admin_port_answering() {
    let gw = Gateway::builder()
        .open_files(1_024)
        .limits("idle_timeout: 3s")
        .start();
    flood_one_ask_the_other(&gw, &host_port(&gw.base), &host_port(&gw.admin)).await;
}

/// A connection from `source` that asked for `/health` and was answered `200` (kept alive, so
/// it goes on counting), retried for up to 5 s while a connection just closed is still
/// counted.
async fn served_from(source: &str, addr: &str) -> TcpStream {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let (sock, answer) = ask_from(source, addr).await;
        if answer.starts_with("HTTP/1.1 200") {
            return sock;
        }
        assert!(
            Instant::now() < deadline,
            "{source} is still refused after 5 s: {answer}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// `GET /health` from `source` on a new connection, and the first part of the answer.
async fn ask_from(source: &str, addr: &str) -> (TcpStream, String) {
    let mut sock = connect_from(source, addr).await.unwrap();
    sock.write_all(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut answer = vec![0; 4096];
    let n = tokio::time::timeout(Duration::from_secs(5), sock.read(&mut answer))
        .await
        .expect("an answer within 5 s")
        .unwrap_or(0);
    (sock, String::from_utf8_lossy(&answer[..n]).into_owned())
}

/// The refusal a connection from `source` gets, read until the gateway closes it.
async fn refused_from(source: &str, addr: &str) -> String {
    let mut sock = connect_from(source, addr).await.unwrap();
    let _ = sock
        .write_all(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        .await;
    read_until_closed(&mut sock, "a refused connection is closed")
        .await
        .0
}

fn assert_refused(answer: &str, why: &str) {
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
    let lower = answer.to_ascii_lowercase();
    assert!(lower.contains("\r\nconnection: close\r\n"), "{answer}");
    assert!(lower.contains("\r\nretry-after: "), "{answer}");
    let body = &answer[answer.find("\r\n\r\n").unwrap() + 4..];
    let v: serde_json::Value = serde_json::from_str(body).unwrap();
    assert_eq!(v["error"]["code"], "too_many_connections", "{v}");
    let message = v["error"]["message"].as_str().unwrap();
    assert!(message.contains(why), "{message}");
}

#[tokio::test]
async fn connections_from_one_address_are_capped() {
    let gw = Gateway::builder()
        .connections("public: {max: 10, per_address: 2}")
        .start();
    let public = host_port(&gw.base);
    let first = served_from("127.0.0.1", &public).await;
    let _second = served_from("127.0.0.1", &public).await;
    // The third from the same address is refused at once; another address is served.
    assert_refused(
        &refused_from("127.0.0.1", &public).await,
        "from your address",
    );
    let _other = served_from("127.0.0.2", &public).await;
    // Once one of its connections closes, the address is served again.
    drop(first);
    served_from("127.0.0.1", &public).await;
}

#[tokio::test]
async fn the_connections_of_a_listener_are_capped_in_total() {
    let gw = Gateway::builder()
        .connections("admin: {max: 3, per_address: 2}")
        .start();
    let admin = host_port(&gw.admin);
    let first = served_from("127.0.0.1", &admin).await;
    let _held = [
        served_from("127.0.0.1", &admin).await,
        served_from("127.0.0.2", &admin).await,
    ];
    // A fourth, from an address with none open, is refused: the listener is full.
    assert_refused(
        &refused_from("127.0.0.3", &admin).await,
        "this listener is full",
    );
    // The public listener counts its own connections.
    served_from("127.0.0.3", &host_port(&gw.base)).await;
    drop(first);
    served_from("127.0.0.3", &admin).await;
}
