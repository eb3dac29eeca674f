//! Hostile clients: every request costs bounded CPU and memory before it is refused or
//! admitted, and what a client may make an upstream fetch is limited to public URLs.
//! Bodies are built as bytes (a `serde_json::Value` cannot hold duplicate or 60,000 keys
//! cheaply) and sent with a key whose workspace has no credit, as an attacker's would.

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::harness::{FakeUpstream, Gateway, Sim, SimEnv, ADMIN_TOKEN};
use crate::raw::{health_kept_alive, read_until_closed, trickle_head_until_closed};

async fn post(gw: &Gateway, path: &str, key: &str, body: Vec<u8>) -> (u16, Value, Duration) {
    let started = Instant::now();
    let res = reqwest::Client::new()
        .post(gw.url(path))
        .bearer_auth(key)
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .unwrap();
    let status = res.status().as_u16();
    let v = res.json().await.unwrap();
    (status, v, started.elapsed())
}

/// A key whose workspace has no credit: what an attacker who signed up for free holds.
fn broke_key(gw: &Gateway) -> String {
    let ws = gw.workspace();
    gw.key(&ws, &[])
}

#[tokio::test]
async fn crafted_bodies_are_refused_at_once() {
    let sim = Sim::start();
    let gw = Gateway::builder().simulator(&sim).start();
    let key = broke_key(&gw);
    let msg = r#"{"role":"user","content":"hi"}"#;
    let part = r#"{"type":"text","text":"a"}"#;
    let fields: String = (0..60_000).map(|i| format!(r#","k{i}":0"#)).collect();
    let cases = [
        (
            // The case that froze a worker for 6.4 s: 60,000 top-level keys (769 KB).
            format!(r#"{{"model":"google/gemini-2.5-flash","messages":[{msg}]{fields}}}"#),
            "more than 256 top-level fields",
        ),
        (
            format!(
                r#"{{"model":"google/gemini-2.5-flash","messages":[{}]}}"#,
                vec![msg; 60_000].join(",")
            ),
            "too many messages in one request: the limit is 10000",
        ),
        (
            format!(
                r#"{{"model":"google/gemini-2.5-flash","messages":[{{"role":"user","content":[{}]}}]}}"#,
                vec![part; 60_000].join(",")
            ),
            "too many content parts in one request: the limit is 10000",
        ),
    ];
    for (body, want) in cases {
        let (status, v, took) = post(&gw, "/v1/chat/completions", &key, body.into_bytes()).await;
        assert_eq!(status, 400, "{v}");
        assert_eq!(v["error"]["type"], "invalid_request_error");
        assert!(
            v["error"]["message"].as_str().unwrap().contains(want),
            "{v}"
        );
        // A behaviour bound, not a speed target: the old quadratic check took seconds here.
        assert!(
            took < Duration::from_secs(2),
            "{want}: answered in {took:?}"
        );
    }
    let inputs = format!(
        r#"{{"model":"google/text-embedding-004","input":[{}]}}"#,
        vec![r#""x""#; 2_049].join(",")
    );
    let (status, v, _) = post(&gw, "/v1/embeddings", &key, inputs.into_bytes()).await;
    assert_eq!(status, 400, "{v}");
    assert_eq!(v["error"]["code"], "limit_exceeded");
    assert_eq!(
        v["error"]["message"],
        "too many embeddings inputs in one request: the limit is 2048"
    );
    assert!(
        sim.requests().await.is_empty(),
        "nothing reached an upstream"
    );
}

#[tokio::test]
async fn a_prompt_beyond_the_context_window_is_refused_before_the_gates() {
    let sim = Sim::start();
    let gw = Gateway::builder().simulator(&sim).start();
    let key = broke_key(&gw);
    // Claude Haiku 4.5's window is 200,000 tokens: 880 KB of text is about 220,000.
    let text = "word ".repeat(176_000);
    let body = json!({"model": "anthropic/claude-haiku-4-5", "messages": [{"role": "user", "content": text}]});
    let (status, v, _) = post(
        &gw,
        "/v1/chat/completions",
        &key,
        body.to_string().into_bytes(),
    )
    .await;
    assert_eq!(status, 400, "{v}");
    assert_eq!(v["error"]["code"], "context_length_exceeded");
    let message = v["error"]["message"].as_str().unwrap();
    assert!(
        message.starts_with("this model's maximum context length is 200000 tokens"),
        "{message}"
    );
    // Below the window, the same key meets the credit gate as before.
    let small = json!({"model": "anthropic/claude-haiku-4-5", "messages": [{"role": "user", "content": "hi"}]});
    let (status, v, _) = post(
        &gw,
        "/v1/chat/completions",
        &key,
        small.to_string().into_bytes(),
    )
    .await;
    assert_eq!(status, 402, "{v}");
    assert!(sim.requests().await.is_empty());
}

#[tokio::test]
async fn only_https_and_data_urls_reach_an_upstream() {
    let env = SimEnv::start();
    let image = |model: &str, url: &str| {
        json!({"model": model, "messages": [{"role": "user", "content": [
            {"type": "text", "text": "what is this?"},
            {"type": "image_url", "image_url": {"url": url}}
        ]}]})
    };
    let models = [
        "google/gemini-2.5-flash",
        "vertex/gemini-2.5-flash",
        "anthropic/claude-sonnet-4-5",
        "vertex/claude-sonnet-4-5",
    ];
    for model in models {
        for url in [
            "gs://operator-bucket/private.png",
            "http://169.254.169.254/computeMetadata/v1/",
            "file:///etc/passwd",
        ] {
            let (status, v) = env.chat(image(model, url)).await;
            assert_eq!(status, 400, "{model} {url}: {v}");
            let message = v["error"]["message"].as_str().unwrap();
            assert!(
                message.starts_with(
                    "messages[0].content[1].image_url.url: only https: and data: URLs are accepted"
                ),
                "{model} {url}: {message}"
            );
        }
    }
    assert!(
        env.sim.requests().await.is_empty(),
        "no URL reached an upstream"
    );
    let (status, v) = env
        .chat(image(
            "vertex/gemini-2.5-flash",
            "https://example.com/cat.png",
        ))
        .await;
    assert_eq!(status, 200, "{v}");
    let sent = env.last_upstream().await;
    let uri = &sent["body"]["contents"][0]["parts"][1]["fileData"]["fileUri"];
    assert_eq!(uri, "https://example.com/cat.png", "{sent}");
}

#[tokio::test]
async fn n_below_one_is_a_400_as_openai_answers_it() {
    let env = SimEnv::start();
    for (model, n) in [
        ("google/gemini-2.5-flash", 0),
        ("anthropic/claude-haiku-4-5", 0),
        ("google/gemini-2.5-flash", 129),
    ] {
        let body = json!({"model": model, "n": n, "messages": [{"role": "user", "content": "hi"}]});
        let (status, v) = env.chat(body).await;
        assert_eq!(status, 400, "{v}");
        assert_eq!(
            v["error"]["message"],
            format!("invalid value for n: expected an integer from 1 to 128, got {n}")
        );
    }
    assert!(env.sim.requests().await.is_empty());
    let body = json!({"model": "google/gemini-2.5-flash", "n": 2, "messages": [{"role": "user", "content": "hi"}]});
    let (status, v) = env.chat(body).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(
        env.last_upstream().await["body"]["generationConfig"]["candidateCount"],
        2
    );
}

#[tokio::test]
async fn upstream_errors_never_reveal_the_operators_project() {
    let sim = Sim::start();
    let gw = Gateway::builder().simulator(&sim).start();
    let file = gw.dir.path().join("missing-model.yaml");
    std::fs::write(
        &file,
        "models:\n  - {id: vertex/gemini-9, provider: google, family: gemini, kind: chat, upstream_model: palm-9, profile: gemini-2.5-flash, input_price: 1, output_price: 1}\n\
         routes:\n  - {model_id: vertex/gemini-9, kind: vertex, region: us-central1}\n",
    )
    .unwrap();
    gw.cli(&["catalog", "import", file.to_str().unwrap()]);
    let (_, key) = gw.workspace_with_key();
    let body = json!({"model": "vertex/gemini-9", "messages": [{"role": "user", "content": "hi"}]});
    let mut answer = None;
    for _ in 0..50 {
        let res = gw.chat(&key, body.clone()).await;
        if res.status() != 400 {
            answer = Some((res.status().as_u16(), res.json::<Value>().await.unwrap()));
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await; // the catalog reload
    }
    let (status, v) = answer.expect("the imported model was never served");
    assert_eq!(status, 404, "Google's status is kept: {v}");
    assert_eq!(v["error"]["type"], "upstream_error");
    let message = v["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("was not found"),
        "the useful part stays: {message}"
    );
    assert!(
        message.contains("projects/[redacted]/locations/us-central1"),
        "{message}"
    );
    assert!(
        !message.contains("tollgate-test"),
        "the project id is gone: {message}"
    );
}

#[tokio::test]
async fn readiness_names_missing_credentials_and_health_stays_exact() {
    let get = |url: String| async move {
        let res = reqwest::get(url).await.unwrap();
        (res.status().as_u16(), res.text().await.unwrap())
    };
    // No provider credentials in the environment: the default catalog's routes cannot work.
    let bare = Gateway::builder().start();
    let (status, body) = get(bare.admin.clone() + "/ready").await;
    assert_eq!(status, 503, "{body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["status"], "degraded");
    let problems = v["problems"].to_string();
    for kind in ["gemini-api", "anthropic", "vertex"] {
        assert!(problems.contains(kind), "{kind} missing from {problems}");
    }
    for health in [bare.url("/health"), bare.admin.clone() + "/health"] {
        assert_eq!(get(health).await, (200, r#"{"status":"ok"}"#.to_owned()));
    }
    // Every credential configured (the simulator's), store up, spool empty: ready.
    let sim = Sim::start();
    let wired = Gateway::builder().simulator(&sim).start();
    let (status, body) = get(wired.admin.clone() + "/ready").await;
    assert_eq!((status, body.as_str()), (200, r#"{"status":"ready"}"#));
}

/// Chat models of both families on every route kind the simulator serves.
const CHAT_ROUTES: [&str; 4] = [
    "google/gemini-2.5-flash",
    "vertex/gemini-2.5-flash",
    "anthropic/claude-haiku-4-5",
    "vertex/claude-sonnet-4-5",
];

#[tokio::test]
async fn an_untranslatable_answer_is_a_502_and_nothing_is_billed() {
    let env = SimEnv::start();
    for model in CHAT_ROUTES {
        let body = json!({"model": model, "messages": [{"role": "user", "content": "hi [sim:fault=garbage]"}]});
        let (status, v) = env.chat(body).await;
        assert_eq!(
            status, 502,
            "{model}: the status follows the translation: {v}"
        );
        assert_eq!(v["error"]["type"], "upstream_error", "{model}: {v}");
        assert_eq!(v["error"]["code"], "upstream_error", "{model}: {v}");
    }
    let records = env.gw.cli_json(&["usage", "--workspace", &env.ws]);
    assert_eq!(
        records,
        json!([]),
        "an answer that reported no usage bills nothing"
    );
}

#[tokio::test]
async fn a_buffered_answer_is_bounded_in_size() {
    let sim = Sim::start();
    let gw = Gateway::builder()
        .simulator(&sim)
        .max_answer_body("1KiB")
        .start();
    let (ws, key) = gw.workspace_with_key();
    let small = json!({"model": "google/gemini-2.5-flash", "messages": [{"role": "user", "content": "hi"}]});
    assert_eq!(gw.chat(&key, small).await.status(), 200);
    let long = "many words ".repeat(200);
    let big = json!({"model": "google/gemini-2.5-flash", "messages": [{"role": "user", "content": long}]});
    let res = gw.chat(&key, big).await;
    assert_eq!(res.status(), 502);
    let v: Value = res.json().await.unwrap();
    assert_eq!(v["error"]["code"], "upstream_error");
    assert_eq!(
        v["error"]["message"],
        "upstream answer exceeds the limit of 1024 bytes"
    );
    let records = gw.cli_json(&["usage", "--workspace", &ws]);
    assert_eq!(
        records.as_array().unwrap().len(),
        1,
        "only the small answer is billed"
    );
}

#[tokio::test]
async fn oversized_heads_are_refused_with_431() {
    let sim = Sim::start();
    let gw = Gateway::builder().simulator(&sim).start();
    let (_, key) = gw.workspace_with_key();
    let body = json!({"model": "google/gemini-2.5-flash", "messages": [{"role": "user", "content": "hi"}]});
    let client = reqwest::Client::new();
    let mut many = client
        .post(gw.url("/v1/chat/completions"))
        .bearer_auth(&key)
        .json(&body);
    for i in 0..120 {
        many = many.header(format!("x-pad-{i}"), "1");
    }
    let huge = client
        .post(gw.url("/v1/chat/completions"))
        .bearer_auth(&key)
        .header("x-pad", "a".repeat(40_000))
        .json(&body);
    for (what, req) in [("fields", many), ("bytes", huge)] {
        let res = req.send().await.unwrap();
        assert_eq!(res.status(), 431, "{what}");
        let v: Value = res.json().await.unwrap();
        assert_eq!(v["error"]["code"], "headers_too_large", "{v}");
        assert!(
            v["error"]["message"].as_str().unwrap().ends_with(what),
            "{v}"
        );
    }
    assert!(sim.requests().await.is_empty());
}

/// What the gateway answers a POST to `path` whose body stops after a few bytes, read until it
/// closes the connection, and how long that took.
async fn stalled_upload(addr: &str, path: &str, key: &str) -> (String, Duration) {
    use tokio::io::AsyncWriteExt;
    let mut sock = tokio::net::TcpStream::connect(addr).await.unwrap();
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {key}\r\n\
         Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{{\"model\":"
    );
    sock.write_all(head.as_bytes()).await.unwrap();
    // The rest of the body never comes: the gateway answers and closes the connection.
    let what = format!("{addr} closes a stalled upload");
    read_until_closed(&mut sock, &what).await
}

#[tokio::test]
async fn a_slow_upload_times_out_with_408_on_both_listeners() {
    let sim = Sim::start();
    let gw = Gateway::builder()
        .simulator(&sim)
        .body_timeout("1s")
        .start();
    let (_, key) = gw.workspace_with_key();
    let public = gw.base.trim_start_matches("http://").to_owned();
    let admin = gw.admin.trim_start_matches("http://").to_owned();
    for (addr, path, key) in [
        (&public, "/v1/chat/completions", key.as_str()),
        (&admin, "/admin/v1/workspaces", ADMIN_TOKEN),
    ] {
        let (answer, took) = stalled_upload(addr, path, key).await;
        assert!(answer.starts_with("HTTP/1.1 408"), "{path}: {answer}");
        assert!(answer.contains("request_timeout"), "{path}: {answer}");
        assert!(
            took >= Duration::from_millis(900),
            "{path}: not before the deadline"
        );
    }
    assert!(sim.requests().await.is_empty());
}

#[tokio::test]
async fn an_upstream_redirect_is_not_followed() {
    let fake = FakeUpstream::start().await;
    let gw = Gateway::builder().fake_openai(&fake).start();
    let (_, key) = gw.workspace_with_key();
    let body = json!({"model": "acme/echo", "messages": [{"role": "user", "content": "[sim:fault=redirect]"}]});
    let res = gw.chat(&key, body).await;
    assert!(res.status().is_server_error(), "{}", res.status());
    let v: Value = res.json().await.unwrap();
    assert_eq!(v["error"]["code"], "upstream_error", "{v}");
    assert_eq!(
        fake.requests().len(),
        1,
        "the request and its credential went upstream once, not again to the redirect's target"
    );
}

/// What one raw exchange gets back: the whole answer, read until the gateway closes (within
/// 10 s: a connection kept alive fails the exchange).
async fn exchange(addr: &str, request: &str) -> String {
    use tokio::io::AsyncWriteExt;
    let mut sock = tokio::net::TcpStream::connect(addr).await.unwrap();
    sock.write_all(request.as_bytes()).await.unwrap();
    read_until_closed(&mut sock, "the gateway closes the connection")
        .await
        .0
}

#[tokio::test]
async fn malformed_heads_and_connect_are_refused_and_the_connection_closed() {
    use tokio::io::AsyncWriteExt;
    let sim = Sim::start();
    let gw = Gateway::builder().simulator(&sim).start();
    let (_, key) = gw.workspace_with_key();
    let addr = gw.base.trim_start_matches("http://").to_owned();
    let garbage = exchange(
        &addr,
        "GET /health HTTP/1.1\r\nHost: x\r\nbad header\r\n\r\n",
    )
    .await;
    assert!(garbage.starts_with("HTTP/1.1 400"), "{garbage}");
    // CONNECT: no tunnel, whatever its target, and the connection is not kept.
    let connect = format!(
        "CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\nAuthorization: Bearer {key}\r\n\r\n"
    );
    let answer = exchange(&addr, &connect).await;
    assert!(answer.starts_with("HTTP/1.1 4"), "{answer}");
    // Two requests one after the other on one connection are both answered (keep-alive).
    let (mut sock, first) = health_kept_alive(&addr).await;
    assert!(first.starts_with("HTTP/1.1 200"), "{first}");
    let second = "GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    sock.write_all(second.as_bytes()).await.unwrap();
    // `Connection: close` is honoured, idle limit or not.
    let (answer, _) = read_until_closed(&mut sock, "`Connection: close` closes").await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(sim.requests().await.is_empty());
}

#[tokio::test]
async fn an_idle_kept_alive_connection_is_closed_on_both_listeners() {
    let gw = Gateway::builder().limits("idle_timeout: 1s").start();
    for url in [&gw.base, &gw.admin] {
        let addr = url.trim_start_matches("http://");
        let (mut sock, answer) = health_kept_alive(addr).await;
        assert!(answer.starts_with("HTTP/1.1 200"), "{url}: {answer}");
        assert!(
            answer.to_ascii_lowercase().contains("keep-alive"),
            "{url}: {answer}"
        );
        // Nothing more is sent: the gateway closes the connection after the idle limit.
        let what = format!("{url}: an idle connection is closed");
        let (rest, took) = read_until_closed(&mut sock, &what).await;
        assert!(rest.is_empty(), "{url}: {rest}");
        assert!(
            took >= Duration::from_millis(900),
            "{url}: not before the limit"
        );
    }
}

#[tokio::test]
async fn a_head_trickled_in_is_cut_off_at_the_idle_limit_on_both_listeners() {
    let gw = Gateway::builder().limits("idle_timeout: 1s").start();
    for (url, path) in [
        (&gw.base, "/v1/chat/completions"),
        (&gw.admin, "/admin/v1/workspaces"),
    ] {
        let addr = url.trim_start_matches("http://");
        let took = trickle_head_until_closed(addr, path).await;
        assert!(
            took < Duration::from_secs(4),
            "{url}: closed {took:?} after the head began"
        );
    }
}
