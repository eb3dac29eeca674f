//! The gateway at the edge: TLS on both listeners with a private test CA, certificates chosen by
//! SNI and rotated by `SIGHUP` without dropping connections, TLS 1.2 and 1.3 only; HTTP/2 by ALPN
//! and by prior knowledge (h2c), where buffered and streamed answers, billing of a stream its
//! client reset, many streams on one connection and graceful shutdown behave as on HTTP/1.1.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use bytes::Bytes;
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::billing::records;
use crate::certs::{self, peer_certificate, tls_listener, Issued, TestCa};
use crate::harness::{
    eventually, signal, sse_data, whole_answer, Gateway, GatewayBuilder, Sim, ADMIN_TOKEN,
};
use crate::raw::{health_kept_alive, read_until_closed};

const MODEL: &str = "google/gemini-2.5-flash";

fn chat(stream: bool, prompt: &str) -> Value {
    json!({"model": MODEL, "stream": stream, "max_tokens": 400,
        "messages": [{"role": "user", "content": prompt}]})
}

/// A short stream: 8 events 40 ms apart (inside the harness's 1 s grace period).
const SHORT_STREAM: &str = "a steady stream [sim:chunk-delay=40][sim:chunks=8]";
/// A long stream: 30 events 50 ms apart.
fn long_stream() -> String {
    format!(
        "[sim:chunks=30] [sim:chunk-delay=50] {}",
        "tell me a long story ".repeat(30)
    )
}

/// A gateway on the simulator, its keys made before it starts (a TLS client listener cannot be
/// probed over plain HTTP).
fn start(builder: GatewayBuilder) -> (Gateway, String, String) {
    let mut gw = builder.build();
    let (ws, key) = gw.workspace_with_key();
    gw.start();
    (gw, ws, key)
}

/// Certificates written into their own temporary directory.
struct CertFiles {
    dir: tempfile::TempDir,
}

impl CertFiles {
    fn new() -> CertFiles {
        CertFiles {
            dir: tempfile::tempdir().unwrap(),
        }
    }

    fn write(&self, issued: &Issued, name: &str) -> (PathBuf, PathBuf) {
        issued.write(self.dir.path(), name)
    }
}

/// `https://host:port/path` on `addr`'s port.
fn https(host: &str, addr: SocketAddr, path: &str) -> String {
    format!("https://{host}:{}{path}", addr.port())
}

async fn post_chat(
    client: &reqwest::Client,
    url: &str,
    key: &str,
    body: &Value,
) -> reqwest::Response {
    client
        .post(format!("{url}/v1/chat/completions"))
        .bearer_auth(key)
        .json(body)
        .send()
        .await
        .unwrap()
}

#[tokio::test]
async fn both_listeners_speak_tls_with_a_private_ca() {
    let ca = TestCa::new();
    let files = CertFiles::new();
    let public = files.write(&ca.issue(&["api.test"]), "api");
    let admin = files.write(&ca.issue(&["ops.test"]), "ops");
    let gw = Gateway::builder()
        .public_listener(tls_listener(&[public], true))
        .admin_listener(tls_listener(&[admin], false))
        .start();

    let client = certs::client(&ca, "api.test", gw.addr()).build().unwrap();
    let res = client
        .get(https("api.test", gw.addr(), "/health"))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    assert_eq!(
        res.version(),
        reqwest::Version::HTTP_2,
        "ALPN h2 by default"
    );

    let client = certs::client(&ca, "ops.test", gw.admin_addr())
        .build()
        .unwrap();
    let res = client
        .get(https("ops.test", gw.admin_addr(), "/status"))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    assert_eq!(res.version(), reqwest::Version::HTTP_11, "tls.h2: false");

    // TLS 1.2 is served too.
    let tls12 = certs::client(&ca, "api.test", gw.addr())
        .max_tls_version(reqwest::tls::Version::TLS_1_2)
        .build()
        .unwrap();
    let res = tls12
        .get(https("api.test", gw.addr(), "/health"))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);

    // Plain HTTP on a TLS listener gets no HTTP answer.
    assert!(reqwest::get(gw.url("/health")).await.is_err());
    // A client that does not trust the CA is refused.
    let untrusting = reqwest::Client::builder()
        .tls_built_in_root_certs(false)
        .resolve("api.test", gw.addr())
        .build()
        .unwrap();
    let e = untrusting
        .get(https("api.test", gw.addr(), "/health"))
        .send()
        .await
        .unwrap_err();
    assert!(e.is_connect(), "{e:?}");
}

#[tokio::test]
async fn sni_chooses_between_certificates_and_the_first_is_the_default() {
    let ca = TestCa::new();
    let files = CertFiles::new();
    let a = ca.issue(&["a.test", "127.0.0.1"]);
    let b = ca.issue(&["b.test", "*.b.test"]);
    let listener = tls_listener(&[files.write(&a, "a"), files.write(&b, "b")], true);
    let gw = Gateway::builder().public_listener(listener).start();

    for (host, want, name) in [
        ("a.test", &a, "a"),
        ("b.test", &b, "b"),
        ("www.b.test", &b, "b by its wildcard"),
    ] {
        let client = certs::client(&ca, host, gw.addr()).build().unwrap();
        let res = client
            .get(https(host, gw.addr(), "/health"))
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), 200, "{host}");
        assert!(
            peer_certificate(&res) == want.der,
            "{host}: not certificate {name}"
        );
    }
    // An IP address sends no SNI: the first certificate answers.
    let client = certs::client(&ca, "unused.test", gw.addr())
        .build()
        .unwrap();
    let res = client
        .get(format!("https://{}/health", gw.addr()))
        .send()
        .await
        .unwrap();
    assert!(
        peer_certificate(&res) == a.der,
        "no SNI: not the first certificate"
    );
}

/// A TLS 1.1 ClientHello (no `supported_versions`), as a client that knows nothing newer sends.
fn tls11_client_hello() -> Vec<u8> {
    let mut body = vec![0x03, 0x02]; // client_version TLS 1.1
    body.extend_from_slice(&[7u8; 32]); // random
    body.push(0); // no session id
    body.extend_from_slice(&[0x00, 0x04, 0xc0, 0x13, 0x00, 0x2f]); // two CBC suites
    body.extend_from_slice(&[0x01, 0x00]); // null compression
                                           // signature_algorithms (rustls needs it to go as far as the version): two schemes.
    body.extend_from_slice(&[
        0x00, 0x0a, 0x00, 0x0d, 0x00, 0x06, 0x00, 0x04, 0x04, 0x03, 0x04, 0x01,
    ]);
    let mut handshake = vec![0x01, 0x00, 0x00, body.len() as u8];
    handshake.extend(body);
    let mut record = vec![0x16, 0x03, 0x01, 0x00, handshake.len() as u8];
    record.extend(handshake);
    record
}

#[tokio::test]
async fn tls_1_1_is_refused_with_a_protocol_version_alert() {
    let ca = TestCa::new();
    let files = CertFiles::new();
    let listener = tls_listener(&[files.write(&ca.issue(&["api.test"]), "api")], true);
    let gw = Gateway::builder().public_listener(listener).start();
    let mut sock = tokio::net::TcpStream::connect(gw.addr()).await.unwrap();
    sock.write_all(&tls11_client_hello()).await.unwrap();
    let mut answer = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(10), sock.read_to_end(&mut answer)).await;
    assert!(read.is_ok(), "the server neither answered nor closed");
    // An alert record (21), fatal (2), protocol_version (70).
    assert_eq!(answer.first(), Some(&21), "{answer:?}");
    assert_eq!(&answer[answer.len() - 2..], &[2, 70], "{answer:?}");
}

#[tokio::test]
async fn a_bad_certificate_file_stops_the_start_with_a_clear_message() {
    let ca = TestCa::new();
    let files = CertFiles::new();
    let (cert, _) = files.write(&ca.issue(&["api.test"]), "api");
    let missing = files.dir.path().join("missing.key");
    let gw = Gateway::builder()
        .admin_listener(tls_listener(&[(cert, missing.clone())], true))
        .build();
    let stderr = gw.refused_start(&[]).await;
    assert!(
        stderr.contains("admin") && stderr.contains(&missing.display().to_string()),
        "{stderr}"
    );
}

/// `tollgate_tls_reloads_total{listener="public",result}` on the (plain) admin listener.
async fn reloads(gw: &Gateway, result: &str) -> u64 {
    let text = reqwest::get(format!("{}/metrics", gw.admin))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let series = format!("tollgate_tls_reloads_total{{listener=\"public\",result=\"{result}\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&series))
        .map_or(0, |n| n.trim().parse().unwrap())
}

/// The certificate a fresh connection to `host` gets.
async fn served_certificate(ca: &TestCa, host: &str, gw: &Gateway) -> Vec<u8> {
    let client = certs::client(ca, host, gw.addr()).build().unwrap();
    let res = client
        .get(https(host, gw.addr(), "/health"))
        .send()
        .await
        .unwrap();
    peer_certificate(&res)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_serves_new_certificates_to_new_connections_while_a_stream_finishes() {
    let sim = Sim::start();
    let ca = TestCa::new();
    let files = CertFiles::new();
    let old = ca.issue(&["api.test"]);
    let paths = files.write(&old, "api");
    let (gw, ws, key) = start(
        Gateway::builder()
            .simulator(&sim)
            .public_listener(tls_listener(&[paths], true)),
    );
    assert!(served_certificate(&ca, "api.test", &gw).await == old.der);

    // A stream begins on the old certificate's connection.
    let client = certs::client(&ca, "api.test", gw.addr()).build().unwrap();
    let url = https("api.test", gw.addr(), "");
    let mut res = post_chat(&client, &url, &key, &chat(true, &long_stream())).await;
    assert_eq!(res.status(), 200);
    assert!(peer_certificate(&res) == old.der);
    let mut text = String::new();
    text.push_str(&String::from_utf8_lossy(
        &res.chunk().await.unwrap().unwrap(),
    ));

    // The files are replaced and the gateway told.
    let new = ca.issue(&["api.test"]);
    files.write(&new, "api");
    signal(gw.pid(), "HUP");
    let rotated = eventually(Duration::from_secs(10), || async {
        served_certificate(&ca, "api.test", &gw).await == new.der
    })
    .await;
    assert!(rotated.is_some(), "the new certificate was never served");
    assert_eq!(reloads(&gw, "ok").await, 1);

    // The stream that began before goes on to its end.
    while let Some(chunk) = res.chunk().await.unwrap() {
        text.push_str(&String::from_utf8_lossy(&chunk));
    }
    let frames = sse_data(&text);
    assert_eq!(frames.last().map(String::as_str), Some("[DONE]"), "{text}");
    assert!(!text.contains("\"error\""), "{text}");
    records(&gw, &ws, 1).await;

    // A broken key file is not taken: the last good certificates stay.
    std::fs::write(files.dir.path().join("api.key"), "not a key").unwrap();
    signal(gw.pid(), "HUP");
    let failed = eventually(Duration::from_secs(10), || async {
        reloads(&gw, "failed").await == 1
    })
    .await;
    assert!(failed.is_some(), "the failed reload was not counted");
    assert!(served_certificate(&ca, "api.test", &gw).await == new.der);
}

/// The two HTTP/2 transports: (gateway, client for it, its base URL).
async fn h2_gateways(
    sim: &Sim,
    ca: &TestCa,
    files: &CertFiles,
) -> Vec<(Gateway, String, String, reqwest::Client, String)> {
    let paths = files.write(&ca.issue(&["api.test"]), "api");
    let (tls, tls_ws, tls_key) = start(
        Gateway::builder()
            .simulator(sim)
            .public_listener(tls_listener(&[paths], true)),
    );
    let tls_client = certs::client(ca, "api.test", tls.addr()).build().unwrap();
    let tls_url = https("api.test", tls.addr(), "");
    let (h2c, h2c_ws, h2c_key) = start(
        Gateway::builder()
            .simulator(sim)
            .public_listener("{h2c: true}"),
    );
    let h2c_client = reqwest::Client::builder()
        .http2_prior_knowledge()
        .build()
        .unwrap();
    let h2c_url = h2c.base.clone();
    vec![
        (tls, tls_ws, tls_key, tls_client, tls_url),
        (h2c, h2c_ws, h2c_key, h2c_client, h2c_url),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h2_over_tls_and_h2c_answers_buffered_and_streamed_and_bills_a_reset_stream() {
    let sim = Sim::start();
    let ca = TestCa::new();
    let files = CertFiles::new();
    for (gw, ws, key, client, url) in h2_gateways(&sim, &ca, &files).await {
        let res = post_chat(&client, &url, &key, &chat(false, "hello there")).await;
        assert_eq!(res.version(), reqwest::Version::HTTP_2, "{url}");
        whole_answer(res, false).await.unwrap();

        let res = post_chat(&client, &url, &key, &chat(true, SHORT_STREAM)).await;
        assert_eq!(res.version(), reqwest::Version::HTTP_2, "{url}");
        whole_answer(res, true).await.unwrap();

        // A stream the client resets after three content frames is billed the upstream's
        // final counts (the gateway drains it).
        let mut res = post_chat(&client, &url, &key, &chat(true, &long_stream())).await;
        assert_eq!(res.status(), 200);
        let mut text = String::new();
        while sse_data(&text)
            .iter()
            .filter(|f| f.contains("\"content\""))
            .count()
            < 3
        {
            let chunk = res.chunk().await.unwrap().expect("the stream goes on");
            text.push_str(&String::from_utf8_lossy(&chunk));
        }
        drop(res);
        let recs = records(&gw, &ws, 3).await;
        let outcomes: Vec<&Value> = recs.iter().map(|r| &r["outcome"]).collect();
        let left: Vec<&Value> = recs
            .iter()
            .filter(|r| r["outcome"] == "client_disconnected")
            .collect();
        assert_eq!(left.len(), 1, "{url}: {outcomes:?}");
        assert_eq!(left[0]["usage_source"], "reported", "{url}: {}", left[0]);
        assert!(
            left[0]["output_tokens"].as_u64().unwrap() > 10,
            "{}",
            left[0]
        );
        let verify = gw.cli_json(&["ledger", "verify"]);
        assert_eq!(verify["inconsistent"], json!([]), "{verify}");
    }
}

/// Sends `body` on its own stream of `conn`; the status and the whole body.
async fn h2_request(
    mut conn: h2::client::SendRequest<Bytes>,
    addr: SocketAddr,
    key: &str,
    body: &Value,
) -> (u16, String) {
    let req = http::Request::post(format!("http://{addr}/v1/chat/completions"))
        .header("authorization", format!("Bearer {key}"))
        .header("content-type", "application/json")
        .body(())
        .unwrap();
    conn = conn.ready().await.unwrap();
    let (response, mut send) = conn.send_request(req, false).unwrap();
    send.send_data(Bytes::from(body.to_string()), true).unwrap();
    let response = response.await.unwrap();
    let status = response.status().as_u16();
    let mut body = response.into_body();
    let mut text = Vec::new();
    while let Some(chunk) = body.data().await {
        let chunk = chunk.unwrap();
        let _ = body.flow_control().release_capacity(chunk.len());
        text.extend_from_slice(&chunk);
    }
    (status, String::from_utf8(text).unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_concurrent_streams_on_one_h2_connection_are_all_answered() {
    let sim = Sim::start();
    let (gw, ws, key) = start(
        Gateway::builder()
            .simulator(&sim)
            .public_listener("{h2c: true}"),
    );
    let tcp = tokio::net::TcpStream::connect(gw.addr()).await.unwrap();
    let (conn, driver) = h2::client::handshake(tcp).await.unwrap();
    tokio::spawn(driver);
    let requests: Vec<_> = (0..100)
        .map(|i| {
            let stream = i % 2 == 0;
            let body = chat(
                stream,
                &format!("request {i} [sim:latency=200][sim:chunks=4]"),
            );
            let (conn, key, addr) = (conn.clone(), key.clone(), gw.addr());
            tokio::spawn(async move { (stream, h2_request(conn, addr, &key, &body).await) })
        })
        .collect();
    for r in requests {
        let (stream, (status, text)) = r.await.unwrap();
        assert_eq!(status, 200, "{text}");
        if stream {
            assert_eq!(
                sse_data(&text).last().map(String::as_str),
                Some("[DONE]"),
                "{text}"
            );
        } else {
            let v: Value = serde_json::from_str(&text).unwrap();
            assert!(v["choices"][0]["message"]["content"].is_string(), "{text}");
        }
    }
    assert_eq!(records(&gw, &ws, 100).await.len(), 100);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_lets_in_flight_h2_streams_finish() {
    let sim = Sim::start();
    let ca = TestCa::new();
    let files = CertFiles::new();
    let paths = files.write(&ca.issue(&["api.test"]), "api");
    // grace_period_seconds: 1
    let (mut gw, ws, key) = start(
        Gateway::builder()
            .simulator(&sim)
            .public_listener(tls_listener(&[paths], true)),
    );
    let client = certs::client(&ca, "api.test", gw.addr()).build().unwrap();
    let url = https("api.test", gw.addr(), "");
    // Two streams (one h2 connection: the client multiplexes), both begun before the signal.
    let mut streams = Vec::new();
    for _ in 0..2 {
        let res = post_chat(&client, &url, &key, &chat(true, SHORT_STREAM)).await;
        assert_eq!(res.version(), reqwest::Version::HTTP_2);
        streams.push(tokio::spawn(whole_answer(res, true)));
    }
    tokio::task::block_in_place(|| gw.terminate());
    for s in streams {
        s.await
            .unwrap()
            .expect("an in-flight h2 stream finishes after SIGTERM");
    }
    let records = gw.cli_json(&["usage", "--workspace", &ws]);
    assert_eq!(records.as_array().unwrap().len(), 2, "{records}");
}

#[tokio::test]
async fn an_h2c_listener_closes_silent_connections_and_answers_short_http1_requests() {
    let gw = Gateway::builder()
        .public_listener("{h2c: true}")
        .limits("idle_timeout: 1s")
        .start();
    let addr = gw.addr().to_string();
    // Nothing sent: closed at the head deadline (Pingora alone waits for 24 bytes for ever).
    let mut silent = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let (answer, _) = read_until_closed(&mut silent, "a silent connection stays open").await;
    assert!(answer.is_empty(), "{answer}");
    // An HTTP/1.0 request shorter than the h2 preface is answered.
    let mut short = tokio::net::TcpStream::connect(&addr).await.unwrap();
    short.write_all(b"GET / HTTP/1.0\r\n\r\n").await.unwrap();
    let (answer, _) =
        read_until_closed(&mut short, "a short HTTP/1.0 request is not answered").await;
    assert!(answer.starts_with("HTTP/1.1 "), "{answer}");
    // HTTP/1.1 goes on beside h2c.
    let (_, answer) = health_kept_alive(&addr).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
}

#[tokio::test]
async fn an_h2_connection_without_streams_closes_after_the_idle_timeout() {
    let gw = Gateway::builder()
        .public_listener("{h2c: true}")
        .limits("idle_timeout: 1s")
        .start();
    let tcp = tokio::net::TcpStream::connect(gw.addr()).await.unwrap();
    let (conn, driver) = h2::client::handshake(tcp).await.unwrap();
    let driver = tokio::spawn(driver);
    let req = http::Request::get(format!("http://{}/health", gw.addr()))
        .body(())
        .unwrap();
    let (response, _) = conn.ready().await.unwrap().send_request(req, true).unwrap();
    assert_eq!(response.await.unwrap().status(), 200);
    let closed = tokio::time::timeout(Duration::from_secs(10), driver).await;
    assert!(closed.is_ok(), "an idle h2 connection stayed open");
}

/// The console's session cookie: `Secure` when the admin listener speaks TLS, and not on a plain
/// one (a browser would then never send it back).
#[tokio::test]
async fn the_console_cookie_is_secure_exactly_on_a_tls_admin_listener() {
    let ca = TestCa::new();
    let files = CertFiles::new();
    let admin = files.write(&ca.issue(&["ops.test"]), "ops");
    let sign_in = |client: reqwest::Client, url: String| async move {
        let res = client
            .post(url)
            .json(&json!({"token": ADMIN_TOKEN}))
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), 200);
        let cookie = res.headers()["set-cookie"].to_str().unwrap().to_owned();
        cookie.split(';').any(|a| a.trim() == "Secure")
    };
    let tls = Gateway::builder()
        .admin_listener(tls_listener(&[admin], false))
        .start();
    let client = certs::client(&ca, "ops.test", tls.admin_addr())
        .build()
        .unwrap();
    let url = https("ops.test", tls.admin_addr(), "/admin/v1/session");
    assert!(sign_in(client, url).await, "Secure on TLS");
    let plain = Gateway::builder().start();
    let url = format!("{}/admin/v1/session", plain.admin);
    assert!(
        !sign_in(reqwest::Client::new(), url).await,
        "not on plain HTTP"
    );
}

/// A balancer's PROXY header arrives before the TLS handshake; the client it names is recorded.
#[tokio::test]
async fn a_proxy_protocol_header_is_read_before_the_tls_handshake() {
    let sim = Sim::start();
    let ca = TestCa::new();
    let files = CertFiles::new();
    let public = files.write(&ca.issue(&["api.test"]), "api");
    let listener = tls_listener(&[public], false).replacen('{', "{proxy_protocol: true, ", 1);
    let (gw, ws, key) = start(
        Gateway::builder()
            .simulator(&sim)
            .settings("  trusted_proxies: [127.0.0.1/32]\n")
            .public_listener(listener),
    );
    // A TCP relay that writes the balancer's header, then carries the client's TLS bytes.
    let relay = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let relay_addr = relay.local_addr().unwrap();
    let upstream = gw.addr();
    tokio::spawn(async move {
        let (mut client, _) = relay.accept().await.unwrap();
        let mut server = tokio::net::TcpStream::connect(upstream).await.unwrap();
        server
            .write_all(b"PROXY TCP4 198.51.100.77 10.0.0.1 5555 443\r\n")
            .await
            .unwrap();
        let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
    });
    let client = certs::client(&ca, "api.test", relay_addr).build().unwrap();
    let res = client
        .post(https("api.test", relay_addr, "/v1/chat/completions"))
        .bearer_auth(&key)
        .json(&chat(false, "hello"))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    let recs = records(&gw, &ws, 1).await;
    assert_eq!(recs[0]["client_addr"], "198.51.100.77", "{}", recs[0]);
    // Straight to the listener, without the header: closed, no handshake.
    let direct = certs::client(&ca, "api.test", gw.addr()).build().unwrap();
    let refused = direct
        .get(https("api.test", gw.addr(), "/health"))
        .send()
        .await;
    assert!(refused.is_err(), "no PROXY header: no answer");
}
