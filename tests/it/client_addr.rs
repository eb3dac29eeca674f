//! Who asked and whom the upstream says answered: the client's address behind trusted proxies
//! (`Forwarded` / `X-Forwarded-For`, the PROXY protocol) and the upstream's own request id, on
//! the usage record and in the access log; the id whole in an upstream error's message.

use std::time::Duration;

use serde_json::{json, Value};

use crate::harness::{Gateway, Sim};

fn hello(model: &str, stream: bool) -> Value {
    json!({"model": model, "stream": stream, "max_tokens": 20,
        "messages": [{"role": "user", "content": "hi"}]})
}

/// A chat from the loopback address `from`, with `headers`, named `id`.
async fn chat_from(gw: &Gateway, key: &str, from: &str, id: &str, headers: &[(&str, &str)]) {
    let client = reqwest::Client::builder()
        .local_address(Some(from.parse().unwrap()))
        .build()
        .unwrap();
    let mut req = client
        .post(gw.url("/v1/chat/completions"))
        .bearer_auth(key)
        .header("x-request-id", id)
        .json(&hello("google/gemini-2.5-flash", false));
    for (name, value) in headers {
        req = req.header(*name, *value);
    }
    let res = req.send().await.unwrap();
    assert_eq!(res.status(), 200, "{id}");
}

/// The workspace's record of request `id`, once the ledger has at least `n` records.
async fn record(gw: &Gateway, ws: &str, n: usize, id: &str) -> Value {
    let records = gw.usage_records(ws, n).await;
    records
        .into_iter()
        .find(|r| r["request_id"] == id)
        .unwrap_or_else(|| panic!("no record of {id}"))
}

/// The access event of request `id`, once written (the gateway logs it after the answer's last
/// byte, so a client can read its answer first).
async fn access_line(gw: &Gateway, id: &str) -> String {
    let find = || {
        let log = std::fs::read_to_string(&gw.log_file).unwrap();
        log.lines()
            .find(|l| l.contains("tollgate::access") && l.contains(id))
            .map(str::to_owned)
    };
    for _ in 0..50 {
        if let Some(line) = find() {
            return line;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    find().unwrap_or_else(|| panic!("no access event of {id}"))
}

#[tokio::test]
async fn forwarded_for_is_believed_from_a_trusted_proxy_only() {
    let sim = Sim::start();
    let gw = Gateway::builder()
        .simulator(&sim)
        .capture_logs()
        .settings("  trusted_proxies: [127.0.0.2/32, \"::1/128\"]\n")
        .start();
    let (ws, key) = gw.workspace_with_key();
    // The client forged the first hop; the trusted balancer appended the address it saw.
    let xff = [("x-forwarded-for", "6.6.6.6, 198.51.100.7")];
    chat_from(&gw, &key, "127.0.0.2", "via-trusted", &xff).await;
    let fwd = [("forwarded", r#"for="[2001:db8::7]:4711";proto=https"#)];
    chat_from(&gw, &key, "127.0.0.2", "via-trusted-fwd", &fwd).await;
    // Anyone else's headers are ignored.
    chat_from(
        &gw,
        &key,
        "127.0.0.3",
        "direct",
        &[("x-forwarded-for", "198.51.100.9")],
    )
    .await;

    for (id, client) in [
        ("via-trusted", "198.51.100.7"),
        ("via-trusted-fwd", "2001:db8::7"),
        ("direct", "127.0.0.3"),
    ] {
        let r = record(&gw, &ws, 3, id).await;
        assert_eq!(r["client_addr"], client, "{id}: {r}");
        let line = access_line(&gw, id).await;
        assert!(line.contains(client), "{id}: {line}");
    }
    assert!(!access_line(&gw, "direct").await.contains("198.51.100.9"));
    // Gemini's buffered answer names itself (`responseId`).
    let r = record(&gw, &ws, 3, "direct").await;
    assert!(
        r["upstream_request_id"]
            .as_str()
            .is_some_and(|s| !s.is_empty()),
        "{r}"
    );
}

/// A request written by hand after `preamble` on a fresh connection from `from`; the answer's
/// text (empty when the gateway closed without one).
async fn raw_after(gw: &Gateway, from: &str, preamble: &[u8], id: &str, key: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let addr = gw.base.trim_start_matches("http://");
    let mut s = crate::raw::connect_from(from, addr).await.unwrap();
    let body = hello("google/gemini-2.5-flash", false).to_string();
    let head = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {key}\r\n\
         x-request-id: {id}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n",
        body.len()
    );
    let _ = s
        .write_all(&[preamble, head.as_bytes(), body.as_bytes()].concat())
        .await;
    let mut answer = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(20), s.read_to_end(&mut answer)).await;
    assert!(
        read.is_ok(),
        "{id}: the gateway neither answered nor closed"
    );
    String::from_utf8_lossy(&answer).into_owned()
}

fn v2_header(command: u8, source: [u8; 4], port: u16) -> Vec<u8> {
    let mut h = b"\r\n\r\n\x00\r\nQUIT\n".to_vec();
    h.extend_from_slice(&[0x20 | command, 0x11, 0, 12]);
    h.extend_from_slice(&source);
    h.extend_from_slice(&[10, 0, 0, 1]);
    h.extend_from_slice(&port.to_be_bytes());
    h.extend_from_slice(&443u16.to_be_bytes());
    h
}

#[tokio::test]
async fn the_proxy_protocol_names_the_client_when_a_trusted_balancer_sends_it() {
    let sim = Sim::start();
    let mut gw = Gateway::builder()
        .simulator(&sim)
        .capture_logs()
        .settings(
            "  trusted_proxies: [127.0.0.2/32]\n  listeners: {public: {proxy_protocol: true}}\n",
        )
        .build();
    // Made before the start: the harness's check that a new key works speaks plain HTTP.
    let (ws, key) = gw.workspace_with_key();
    gw.start();
    let v1 = b"PROXY TCP4 198.51.100.21 10.0.0.1 4711 443\r\n".to_vec();
    let cases = [
        ("pp-v1", v1, "198.51.100.21"),
        ("pp-v2", v2_header(1, [203, 0, 113, 5], 4712), "203.0.113.5"),
        // A health check of the balancer's own: the peer is the client.
        (
            "pp-v2-local",
            v2_header(0, [203, 0, 113, 6], 1),
            "127.0.0.2",
        ),
    ];
    for (id, preamble, _) in &cases {
        let answer = raw_after(&gw, "127.0.0.2", preamble, id, &key).await;
        assert!(answer.starts_with("HTTP/1.1 200"), "{id}: {answer}");
    }
    for (id, _, client) in &cases {
        let r = record(&gw, &ws, cases.len(), id).await;
        assert_eq!(r["client_addr"], *client, "{id}: {r}");
        assert!(access_line(&gw, id).await.contains(client), "{id}");
    }
    // Not from the balancer, or no header: closed unanswered.
    let untrusted = raw_after(&gw, "127.0.0.3", &cases[0].1, "pp-untrusted", &key).await;
    assert_eq!(untrusted, "", "an untrusted peer's header is not believed");
    let missing = raw_after(&gw, "127.0.0.2", b"", "pp-missing", &key).await;
    assert_eq!(missing, "", "a connection without its header is closed");
    let records = gw.usage_records(&ws, cases.len() + 1).await;
    assert_eq!(
        records.len(),
        cases.len(),
        "the refused ones reached nobody"
    );
}

#[tokio::test]
async fn the_upstreams_request_id_is_recorded_and_whole_in_its_error() {
    let sim = Sim::start();
    let gw = Gateway::builder()
        .simulator(&sim)
        .capture_logs()
        .upstream("max_attempts: 1")
        .start();
    let (ws, key) = gw.workspace_with_key();
    let claude = "anthropic/claude-haiku-4-5";
    for stream in [false, true] {
        let id = format!("claude-{stream}");
        let res = reqwest::Client::new()
            .post(gw.url("/v1/chat/completions"))
            .bearer_auth(&key)
            .header("x-request-id", &id)
            .json(&hello(claude, stream))
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), 200);
        let _ = res.text().await.unwrap();
    }
    for stream in [false, true] {
        let id = format!("claude-{stream}");
        let r = record(&gw, &ws, 2, &id).await;
        let upstream = r["upstream_request_id"].as_str().unwrap_or_default();
        assert!(upstream.starts_with("req_011C"), "{id}: {r}");
        assert!(access_line(&gw, &id).await.contains(upstream), "{id}");
    }

    let mut failing = hello(claude, false);
    failing["messages"][0]["content"] = json!("[sim:fault=500] hi");
    let res = reqwest::Client::new()
        .post(gw.url("/v1/chat/completions"))
        .bearer_auth(&key)
        .header("x-request-id", "claude-500")
        .json(&failing)
        .send()
        .await
        .unwrap();
    assert!(res.status().is_server_error(), "{}", res.status());
    let v: Value = res.json().await.unwrap();
    let message = v["error"]["message"].as_str().unwrap();
    let quoted = message
        .split("request ")
        .nth(1)
        .and_then(|rest| rest.split(')').next())
        .unwrap_or_else(|| panic!("no request id in {message}"));
    assert!(
        quoted.starts_with("req_011C") && !quoted.contains("redacted"),
        "{message}"
    );
    assert!(
        access_line(&gw, "claude-500").await.contains(quoted),
        "the access log names the same upstream request"
    );
}
