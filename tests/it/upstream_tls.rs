//! Upstream TLS: the gateway's upstream client against the simulator serving HTTPS with a
//! certificate from a private test CA. Trusted through `tollgate.upstream.ca_file`, a chat
//! goes through; from an unknown CA or for another name, it is a 502 `upstream_error` that
//! says so, with no request reaching the upstream and at most one handshake per attempt.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::certs::TestCa;
use crate::harness::{Gateway, GatewayBuilder, Sim};

/// The most attempts (routes) a request makes in these tests.
const MAX_ATTEMPTS: u64 = 2;

/// The simulator serving HTTPS with a certificate for `names` issued by `ca`, and the
/// directory holding its files and the CA's.
struct TlsSim {
    sim: Sim,
    ca_file: PathBuf,
    client: reqwest::Client,
    _dir: tempfile::TempDir,
}

impl TlsSim {
    fn start(ca: &TestCa, names: &[&str]) -> TlsSim {
        Self::start_with(ca, names, &[])
    }

    /// With more flags of the simulator's.
    fn start_with(ca: &TestCa, names: &[&str], flags: &[&str]) -> TlsSim {
        let dir = tempfile::tempdir().unwrap();
        let (cert, key) = ca.issue(names).write(dir.path(), "sim");
        let ca_file = dir.path().join("ca.pem");
        std::fs::write(&ca_file, ca.pem()).unwrap();
        let mut args = vec![
            "--tls-cert",
            cert.to_str().unwrap(),
            "--tls-key",
            key.to_str().unwrap(),
        ];
        args.extend_from_slice(flags);
        let sim = Sim::start_with(&args);
        assert!(sim.url.starts_with("https://127.0.0.1:"), "{}", sim.url);
        // The test's own view of the simulator; whatever name its certificate is for.
        let client = reqwest::Client::builder()
            .tls_built_in_root_certs(false)
            .add_root_certificate(ca.root())
            .danger_accept_invalid_hostnames(true)
            .build()
            .unwrap();
        TlsSim {
            sim,
            ca_file,
            client,
            _dir: dir,
        }
    }

    async fn stats(&self) -> Value {
        let url = format!("{}/_sim/stats", self.sim.url);
        let res = self.client.get(url).send().await.unwrap();
        res.json().await.unwrap()
    }

    /// A gateway whose Developer API route (the only one: Vertex has no credentials) goes to
    /// this simulator, with `upstream` settings.
    fn gateway(&self, upstream: String) -> GatewayBuilder {
        Gateway::builder()
            .simulator(&self.sim)
            .without_env("TEST_VERTEX_PROJECT")
            .without_env("TEST_VERTEX_CREDENTIALS")
            .upstream(format!("max_attempts: {MAX_ATTEMPTS}{upstream}"))
    }

    fn trusting_the_ca(&self) -> GatewayBuilder {
        self.gateway(format!(", ca_file: \"{}\"", self.ca_file.display()))
    }
}

fn hello() -> Value {
    json!({
        "model": "google/gemini-2.5-flash-lite",
        "messages": [{"role": "user", "content": "hello"}]
    })
}

/// A chat through `gw`: its status and body.
async fn chat(gw: &Gateway) -> (u16, Value) {
    let (_, key) = gw.workspace_with_key();
    let res = gw.chat(&key, hello()).await;
    let status = res.status().as_u16();
    (status, res.json().await.unwrap())
}

/// A refused handshake: 502 `upstream_error` naming the certificate and nothing of the
/// upstream's address; nothing reached the simulator, and it saw at most one handshake per
/// attempt, every one refused.
async fn assert_refused(tls: &TlsSim, (status, body): (u16, Value), secret_bits: &[&str]) {
    assert_eq!(status, 502, "{body}");
    assert_eq!(body["error"]["code"], "upstream_error", "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("TLS") && message.contains("certificate"),
        "{message}"
    );
    let port = tls.sim.url.rsplit(':').next().unwrap();
    for leak in [port, "127.0.0.1", "https://"].iter().chain(secret_bits) {
        assert!(!message.contains(leak), "{leak:?} in {message}");
    }
    let stats = tls.stats().await;
    assert_eq!(stats["requests_total"], 0, "{stats}");
    // Every handshake the gateway began was counted before it could fail; the test's own
    // stats request is one more (on one pooled connection).
    let gateway_handshakes = stats["tls_handshakes"].as_u64().unwrap() - 1;
    assert!((1..=MAX_ATTEMPTS).contains(&gateway_handshakes), "{stats}");
    // The simulator counts a refusal once it has read the gateway's alert: wait for it.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let stats = tls.stats().await;
        if stats["tls_handshakes_failed"] == gateway_handshakes {
            break;
        }
        assert!(Instant::now() < deadline, "{stats}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn a_private_ca_in_ca_file_is_trusted() {
    let ca = TestCa::new();
    let tls = TlsSim::start(&ca, &["127.0.0.1", "localhost"]);
    let gw = tls.trusting_the_ca().start();
    let (status, body) = chat(&gw).await;
    assert_eq!(status, 200, "{body}");
    assert!(
        body["choices"][0]["message"]["content"].is_string(),
        "{body}"
    );
    let stats = tls.stats().await;
    assert_eq!(stats["requests_total"], 1, "{stats}");
    assert_eq!(stats["tls_handshakes_failed"], 0, "{stats}");
}

/// Over TLS the upstream's choice (ALPN) decides, as with every provider: one that offers
/// HTTP/2 gets concurrent calls on one connection, one that offers only HTTP/1.1 gets that.
#[tokio::test]
async fn over_tls_http2_is_used_where_the_upstream_offers_it() {
    let ca = TestCa::new();
    for (flags, http2) in [(&[][..], true), (&["--http1-only"][..], false)] {
        let tls = TlsSim::start_with(&ca, &["127.0.0.1"], flags);
        let gw = tls
            .gateway(format!(
                ", ca_file: \"{}\", http2: auto",
                tls.ca_file.display()
            ))
            .start();
        let (_, key) = gw.workspace_with_key();
        let calls = (0..6).map(|_| gw.chat(&key, hello()));
        for res in futures_util::future::join_all(calls).await {
            assert_eq!(res.status(), 200, "{flags:?}");
        }
        let stats = tls.stats().await;
        assert_eq!(stats["requests_total"], 6, "{stats}");
        assert_eq!(
            stats["http2_requests"],
            if http2 { 6 } else { 0 },
            "{stats}"
        );
        // The test's own stats requests are one more handshake.
        let handshakes = stats["tls_handshakes"].as_u64().unwrap() - 1;
        if http2 {
            assert_eq!(handshakes, 1, "{stats}");
        } else {
            // A connection per call in flight, and the one that learnt HTTP/2 was declined.
            assert!(handshakes > 1, "{stats}");
        }
    }
}

/// `catalog check` asks the listings with the upstream client's trust: through the CA file the
/// Developer API's listing answers over TLS, and its route is listed rather than unchecked.
#[tokio::test]
async fn catalog_check_trusts_the_ca_file_too() {
    let ca = TestCa::new();
    let tls = TlsSim::start(&ca, &["127.0.0.1", "localhost"]);
    let gw = tls.trusting_the_ca().build();
    let out = gw.cli_with_credentials(&["--json", "catalog", "check"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let report: Value =
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {stderr}"));
    let route = crate::catalog_check::route(&report, "google/gemini-2.5-flash-lite", "gemini-api");
    assert_eq!(route["status"], "listed", "{route}");
    let stats = tls.stats().await;
    assert_eq!(stats["tls_handshakes_failed"], 0, "{stats}");
}

#[tokio::test]
async fn context_cache_creation_trusts_the_ca_file_too() {
    let ca = TestCa::new();
    let tls = TlsSim::start(&ca, &["127.0.0.1"]);
    let gw = tls.trusting_the_ca().start();
    let (_, key) = gw.workspace_with_key();
    // Above 2.5 Flash's minimum for an explicit cache (gemini.rs has the rule).
    let long = "You are a meticulous assistant. ".repeat(400);
    let system = json!({"role": "system", "content": [{"type": "text", "text": long,
                        "cache_control": {"type": "ephemeral"}}]});
    let body = json!({"model": "google/gemini-2.5-flash-lite",
                      "messages": [system, {"role": "user", "content": "hi"}]});
    let res = gw.chat(&key, body).await;
    assert_eq!(res.status(), 200);
    let url = format!("{}/_sim/requests", tls.sim.url);
    let seen: Vec<Value> = tls
        .client
        .get(url)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let routes: Vec<&Value> = seen.iter().map(|r| &r["route"]).collect();
    let created = seen
        .iter()
        .filter(|r| r["route"] == "gemini.cache" && r["method"] == "POST")
        .count();
    assert_eq!(created, 1, "{routes:?}");
}

#[tokio::test]
async fn a_private_ca_alone_is_enough_without_the_system_roots() {
    let ca = TestCa::new();
    let tls = TlsSim::start(&ca, &["127.0.0.1"]);
    let gw = tls
        .gateway(format!(
            ", ca_file: \"{}\", system_roots: false",
            tls.ca_file.display()
        ))
        .start();
    let (status, body) = chat(&gw).await;
    assert_eq!(status, 200, "{body}");
}

#[tokio::test]
async fn a_certificate_from_an_unknown_ca_is_refused() {
    let ca = TestCa::new();
    let tls = TlsSim::start(&ca, &["127.0.0.1", "localhost"]);
    let gw = tls.gateway(String::new()).start();
    let answer = chat(&gw).await;
    assert_refused(&tls, answer, &["tollgate test CA"]).await;
}

#[tokio::test]
async fn a_certificate_for_another_name_is_refused() {
    let ca = TestCa::new();
    let tls = TlsSim::start(&ca, &["other.example"]);
    let gw = tls.trusting_the_ca().start();
    let answer = chat(&gw).await;
    let ca_path = tls.ca_file.display().to_string();
    assert_refused(&tls, answer, &["other.example", &ca_path]).await;
}

#[tokio::test]
async fn an_unusable_ca_file_stops_the_start_naming_it() {
    let ca = TestCa::new();
    let tls = TlsSim::start(&ca, &["127.0.0.1"]);
    let not_pem = tls.ca_file.with_file_name("not-a-ca.pem");
    std::fs::write(&not_pem, "hello\n").unwrap();
    let gw = tls
        .gateway(format!(", ca_file: \"{}\"", not_pem.display()))
        .build();
    let stderr = gw
        .refused_start(&[("TEST_GEMINI_KEY", "sim-gemini-key")])
        .await;
    assert!(
        stderr.contains("tollgate.upstream.ca_file")
            && stderr.contains(&not_pem.display().to_string())
            && stderr.contains("holds no certificate"),
        "{stderr}"
    );
}

/// Another test's client may reach this simulator's port when it held it before (a
/// PostgreSQL client reconnecting to a stopped database, a readiness probe): only peers that
/// open a TLS handshake are counted, so the refusal tests count the gateway's alone.
#[tokio::test]
async fn a_peer_that_does_not_speak_tls_is_not_counted_as_a_handshake() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let ca = TestCa::new();
    let tls = TlsSim::start(&ca, &["127.0.0.1"]);
    let addr = tls.sim.url.trim_start_matches("https://");
    for hello in [
        &b"GET / HTTP/1.1\r\nHost: sim\r\n\r\n"[..],
        b"\0\0\0\x08\x04\xd2\x16\x2f",
        b"",
    ] {
        let mut stranger = tokio::net::TcpStream::connect(addr).await.unwrap();
        stranger.write_all(hello).await.unwrap();
        stranger.shutdown().await.unwrap();
        // The simulator closes the connection once it has given up on it.
        let mut rest = Vec::new();
        let _ = stranger.read_to_end(&mut rest).await;
    }
    let stats = tls.stats().await;
    assert_eq!(
        stats["tls_handshakes"], 1,
        "the test's own request: {stats}"
    );
    assert_eq!(stats["tls_handshakes_failed"], 0, "{stats}");
}
