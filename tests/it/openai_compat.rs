//! The OpenAI-compatible family end to end: what reaches the upstream, what comes back.

use serde_json::{json, Value};

use crate::harness::{sse_data, FakeUpstream, Gateway, FAKE_KEY};

fn hello(stream: bool) -> Value {
    json!({"model": "acme/echo", "messages": [{"role": "user", "content": "hello there"}], "stream": stream, "seed": 7, "user": "u-1"})
}

#[tokio::test]
async fn buffered_chat_rewrites_model_and_credentials_only() {
    let sim = FakeUpstream::start().await;
    let gw = Gateway::builder().fake_openai(&sim).start();
    let (_, key) = gw.workspace_with_key();
    let res = gw.chat(&key, hello(false)).await;
    assert_eq!(res.status(), 200);
    assert_eq!(res.headers()["content-type"], "application/json");
    let request_id = res.headers()["x-request-id"].to_str().unwrap().to_owned();
    let v: Value = res.json().await.unwrap();
    assert_eq!(v["object"], "chat.completion");
    assert_eq!(
        v["model"], "acme/echo",
        "the tollgate model id, not the upstream's"
    );
    assert_eq!(v["id"], request_id.as_str(), "the gateway's completion id");
    assert!(v["id"].as_str().unwrap().starts_with("chatcmpl-"));
    assert!(v["choices"][0]["message"]["content"]
        .as_str()
        .unwrap()
        .contains("hello there"));
    assert!(v["usage"]["prompt_tokens"].as_u64().unwrap() > 0);

    let seen = sim.requests();
    assert_eq!(seen.len(), 1);
    let r = &seen[0];
    assert_eq!(r["path"], "/v1/chat/completions");
    assert_eq!(
        r["headers"]["authorization"],
        format!("Bearer {FAKE_KEY}"),
        "the provider credential, never the client's key"
    );
    assert!(
        !r["headers"].to_string().contains(&key),
        "the client's key must not leak upstream"
    );
    assert_eq!(r["body"]["model"], "echo-1");
    assert_eq!(r["body"]["seed"], 7, "other fields pass through");
    assert_eq!(r["body"]["user"], "u-1");
    assert!(
        r["body"].get("stream_options").is_none(),
        "no stream options on a buffered request"
    );
}

#[tokio::test]
async fn streamed_chat_ends_with_usage_then_done() {
    let sim = FakeUpstream::start().await;
    let gw = Gateway::builder().fake_openai(&sim).start();
    let (_, key) = gw.workspace_with_key();
    let res = gw.chat(&key, hello(true)).await;
    assert_eq!(res.status(), 200);
    assert_eq!(res.headers()["content-type"], "text/event-stream");
    let text = res.text().await.unwrap();
    let frames = sse_data(&text);
    assert_eq!(frames.last().unwrap(), "[DONE]", "{text}");
    let chunks: Vec<Value> = frames[..frames.len() - 1]
        .iter()
        .map(|f| serde_json::from_str(f).unwrap())
        .collect();
    let last = chunks.last().unwrap();
    assert_eq!(last["choices"], json!([]));
    assert!(
        last["usage"]["total_tokens"].as_u64().unwrap() > 0,
        "{last}"
    );
    assert_eq!(
        chunks.iter().filter(|c| c["choices"] == json!([])).count(),
        1,
        "one usage chunk"
    );
    let content: String = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
        .collect();
    assert!(content.contains("hello there"), "{content}");
    assert!(chunks
        .iter()
        .all(|c| c["model"] == "acme/echo" && c["id"] == chunks[0]["id"]));

    let seen = sim.requests();
    assert_eq!(
        seen[0]["body"]["stream_options"]["include_usage"], true,
        "usage asked of the upstream"
    );
}

#[tokio::test]
async fn upstream_throttling_keeps_its_status() {
    let sim = FakeUpstream::start().await;
    let gw = Gateway::builder().fake_openai(&sim).start();
    let (_, key) = gw.workspace_with_key();
    for (fault, status) in [("429", 429), ("503", 503)] {
        let body = json!({"model": "acme/echo", "messages": [{"role": "user", "content": format!("x [sim:fault={fault}]")}]});
        let res = gw.chat(&key, body).await;
        assert_eq!(res.status(), status);
        let v: Value = res.json().await.unwrap();
        assert_eq!(v["error"]["type"], "upstream_error");
        assert_eq!(v["error"]["code"], "upstream_error");
        assert!(
            v["error"]["message"]
                .as_str()
                .unwrap()
                .contains(&status.to_string()),
            "{v}"
        );
    }
}

#[tokio::test]
async fn stream_broken_mid_way_ends_with_error_frame_then_done() {
    let sim = FakeUpstream::start().await;
    let gw = Gateway::builder().fake_openai(&sim).start();
    let (_, key) = gw.workspace_with_key();
    // Repeated: the break races the events before it inside the gateway (Pingora may report
    // the subrequest's failure before piping what it wrote), and every run must deliver them.
    for _ in 0..30 {
        let body = json!({"model": "acme/echo", "stream": true, "messages": [{"role": "user", "content": "x [sim:fault=break-after=2]"}]});
        let res = gw.chat(&key, body).await;
        assert_eq!(res.status(), 200);
        let text = res
            .text()
            .await
            .expect("the client sees a cleanly ended stream");
        let frames = sse_data(&text);
        assert_eq!(frames.last().unwrap(), "[DONE]", "{text}");
        let err: Value = serde_json::from_str(&frames[frames.len() - 2]).unwrap();
        assert_eq!(err["error"]["type"], "upstream_error", "{text}");
        assert!(
            frames.len() >= 3,
            "content before the break was delivered: {text}"
        );
    }
}

#[tokio::test]
async fn unreachable_upstream_is_a_502_envelope() {
    let sim = FakeUpstream::start().await;
    let gw = Gateway::builder().fake_openai(&sim).start();
    let (_, key) = gw.workspace_with_key();
    drop(sim);
    let res = gw.chat(&key, hello(false)).await;
    assert_eq!(res.status(), 502);
    let v: Value = res.json().await.unwrap();
    assert_eq!(v["error"]["type"], "upstream_error");
}

#[tokio::test]
async fn openai_embeddings_pass_through() {
    let sim = FakeUpstream::start().await;
    let gw = Gateway::builder().fake_openai(&sim).start();
    let (_, key) = gw.workspace_with_key();
    let res = reqwest::Client::new()
        .post(gw.url("/v1/embeddings"))
        .bearer_auth(&key)
        .json(&json!({"model": "acme/embed", "input": ["a", "b"]}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    let v: Value = res.json().await.unwrap();
    assert_eq!(v["model"], "acme/embed");
    assert_eq!(v["data"].as_array().unwrap().len(), 2);
    assert_eq!(sim.requests()[0]["path"], "/v1/embeddings");
}

/// The text of an answer, buffered or streamed, with its status.
async fn answer(gw: &Gateway, key: &str, stream: bool, fault: &str) -> (u16, String) {
    let body = json!({"model": "acme/echo", "stream": stream,
                      "messages": [{"role": "user", "content": format!("hi [sim:fault={fault}]")}]});
    let res = gw.chat(key, body).await;
    (res.status().as_u16(), res.text().await.unwrap())
}

#[tokio::test]
async fn an_upstream_refusing_the_credential_is_reported_without_its_words() {
    let sim = FakeUpstream::start().await;
    let gw = Gateway::builder().fake_openai(&sim).capture_logs().start();
    let (_, key) = gw.workspace_with_key();
    for (stream, status) in [(false, 401), (true, 401), (false, 403)] {
        let (got, text) = answer(&gw, &key, stream, &format!("echo-{status}")).await;
        assert_eq!(got, status, "the upstream's status: {text}");
        assert!(!text.contains(FAKE_KEY), "the credential: {text}");
        assert!(
            !text.contains("Incorrect API key"),
            "the upstream's words: {text}"
        );
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["error"]["type"], "upstream_error", "{v}");
        assert_eq!(v["error"]["code"], "upstream_error", "{v}");
        assert_eq!(
            v["error"]["message"],
            "the upstream refused the gateway's credentials"
        );
    }
    let log = std::fs::read_to_string(&gw.log_file).unwrap();
    assert!(
        log.contains("Incorrect API key provided"),
        "the operator reads the upstream's words in the log"
    );
    assert!(!log.contains(FAKE_KEY), "but not the credential");
}

#[tokio::test]
async fn other_upstream_errors_keep_their_words_but_not_a_credential() {
    let sim = FakeUpstream::start().await;
    let gw = Gateway::builder().fake_openai(&sim).start();
    let (_, key) = gw.workspace_with_key();
    for (stream, status) in [(false, 400), (true, 400), (false, 500)] {
        let (got, text) = answer(&gw, &key, stream, &format!("echo-{status}")).await;
        assert_eq!(got, status, "{text}");
        let v: Value = serde_json::from_str(&text).unwrap();
        let message = v["error"]["message"].as_str().unwrap();
        assert!(
            message.starts_with(&format!(
                "upstream answered HTTP {status}: Incorrect API key provided: Bearer [redacted]"
            )),
            "{message}"
        );
        assert!(!text.contains(FAKE_KEY), "{text}");
    }
}

#[tokio::test]
async fn an_in_band_stream_error_never_quotes_the_credential() {
    let sim = FakeUpstream::start().await;
    let gw = Gateway::builder().fake_openai(&sim).capture_logs().start();
    let (_, key) = gw.workspace_with_key();
    let (status, text) = answer(&gw, &key, true, "stream-echo").await;
    assert_eq!(status, 200, "the stream had begun: {text}");
    assert!(text.contains("session lost for key [redacted]"), "{text}");
    assert!(
        !text.contains(FAKE_KEY),
        "the credential reached the client: {text}"
    );
    let log = std::fs::read_to_string(&gw.log_file).unwrap();
    assert!(!log.contains(FAKE_KEY), "nor the log");
}
