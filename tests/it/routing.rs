//! Route choice: among a model's routes, those whose credentials this gateway has; the one a
//! request needs (flex → Vertex global); those not cooling down; then priority. Failover
//! before anything reached the client, buffered and streamed; keep-alive comments.

use std::time::Duration;

use serde_json::{json, Value};

use crate::harness::{sse_data, Gateway, Sim};

fn hello(model: &str) -> Value {
    json!({"model": model, "messages": [{"role": "user", "content": "hi"}]})
}

#[tokio::test]
async fn with_vertex_credentials_only_gemini_models_answer_through_vertex() {
    let sim = Sim::start();
    let gw = Gateway::builder()
        .simulator(&sim)
        .without_env("TEST_GEMINI_KEY")
        .start();
    let (_, key) = gw.workspace_with_key();
    // The default catalog lists the Developer API route first; it has no key here.
    let res = gw.chat(&key, hello("google/gemini-3.5-flash")).await;
    assert_eq!(res.status(), 200, "{}", res.text().await.unwrap());
    let sent = sim.requests().await.pop().unwrap();
    assert!(
        sent["route"].as_str().unwrap().starts_with("vertex."),
        "served by Vertex: {}",
        sent["route"]
    );
    let ready: Value = reqwest::get(format!("{}/ready", gw.admin))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(
        ready["problems"].to_string().contains("gemini-api"),
        "readiness still names the unconfigured route kind: {ready}"
    );
}

/// The route of the newest usage record of a workspace.
/// The route of the workspace's one usage record, once the ledger writer has committed it.
async fn billed_route(gw: &Gateway, ws: &str) -> Value {
    let records = gw.usage_records(ws, 1).await;
    assert_eq!(
        records.len(),
        1,
        "only the attempt that answered is billed: {records:?}"
    );
    records[0]["route"].clone()
}

#[tokio::test]
async fn a_route_refusing_connections_fails_over_to_the_next() {
    let sim = Sim::start();
    let gw = Gateway::builder().simulator(&sim).start();
    let file = gw.dir.path().join("flaky.yaml");
    std::fs::write(
        &file,
        format!(
            "models:\n  - {{id: flaky/gemini, provider: google, family: gemini, kind: chat, upstream_model: gemini-2.5-flash, profile: gemini-2.5-flash, input_price: 1, output_price: 1}}\n\
             routes:\n  - {{model_id: flaky/gemini, kind: gemini-api, base_url: \"http://127.0.0.1:9\", priority: 0}}\n\
             \x20 - {{model_id: flaky/gemini, kind: vertex, region: us-central1, base_url: \"{}\", priority: 10}}\n",
            sim.url
        ),
    )
    .unwrap();
    gw.cli(&["catalog", "import", file.to_str().unwrap()]);
    let (ws, key) = gw.workspace_with_key();
    let mut status = 0;
    for _ in 0..50 {
        let res = gw.chat(&key, hello("flaky/gemini")).await;
        status = res.status().as_u16();
        if status != 400 {
            break; // the model is in the catalog snapshot
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(status, 200, "answered by the second route");
    assert_eq!(billed_route(&gw, &ws).await, "vertex");
}

#[tokio::test]
async fn throttling_and_server_errors_fail_over_and_the_answering_route_is_billed() {
    let sim = Sim::start();
    let gw = Gateway::builder().simulator(&sim).start();
    let (ws, key) = gw.workspace_with_key();
    // google/gemini-3.5-flash: Developer API first, then Vertex regional, then global.
    sim.queue_fault("429", "gemini", 1).await;
    let res = gw.chat(&key, hello("google/gemini-3.5-flash")).await;
    assert_eq!(res.status(), 200, "{}", res.text().await.unwrap());
    assert_eq!(billed_route(&gw, &ws).await, "vertex");
    let routes = sim.routes_since(0).await;
    assert_eq!(
        routes.len(),
        2,
        "one failed attempt, one answer: {routes:?}"
    );
}

#[tokio::test]
async fn when_every_route_fails_the_client_gets_the_upstreams_status_throttling_first() {
    let sim = Sim::start();
    let gw = Gateway::builder().simulator(&sim).start();
    let (ws, key) = gw.workspace_with_key();
    sim.queue_fault("503", "any", 3).await;
    let res = gw.chat(&key, hello("google/gemini-3.5-flash")).await;
    assert_eq!(res.status(), 503, "three routes, three 503s");
    let v: Value = res.json().await.unwrap();
    assert_eq!(v["error"]["code"], "upstream_error");
    // A throttled attempt among failures: the client is told to retry, as the SDKs expect.
    sim.queue_fault("429", "gemini", 1).await;
    sim.queue_fault("503", "vertex", 2).await;
    let res = gw.chat(&key, hello("google/gemini-3.5-flash")).await;
    assert_eq!(res.status(), 429);
    let v: Value = res.json().await.unwrap();
    let message = v["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("retry after"),
        "Google's RetryInfo is relayed: {message}"
    );
    assert_eq!(
        sim.requests().await.len(),
        6,
        "three attempts each, no more"
    );
    let records = gw.cli_json(&["usage", "--workspace", &ws]);
    assert_eq!(records, json!([]), "failed attempts bill nothing");
}

/// The admin listener's view of one route's health.
async fn route_state(gw: &Gateway, model: &str, kind: &str) -> Value {
    let v: Value = reqwest::get(format!("{}/routes", gw.admin))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    v["routes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["model"] == model && r["kind"] == kind)
        .cloned()
        .unwrap_or(Value::Null)
}

#[tokio::test]
async fn a_throttled_route_cools_down_for_its_retry_after_then_a_live_request_probes_it() {
    let sim = Sim::start();
    let gw = Gateway::builder()
        .simulator(&sim)
        .upstream("breaker: {cooldown: 1s, max_cooldown: 2s}")
        .start();
    let (_, key) = gw.workspace_with_key();
    let model = "google/gemini-3.5-flash";
    // Google's 429 asks for 34.4 s (RetryInfo.retryDelay), capped at 2 s here.
    sim.queue_fault("429", "gemini", 1).await;
    let res = gw.chat(&key, hello(model)).await;
    assert_eq!(res.status(), 200);
    assert_eq!(
        sim.routes_since(0).await,
        ["gemini.generate", "vertex.generate"]
    );
    let cooling = route_state(&gw, model, "gemini-api").await;
    assert_eq!(cooling["state"], "cooling", "{cooling}");
    assert!(cooling["cooling_for_ms"].as_u64().unwrap() <= 2000);
    for _ in 0..3 {
        assert_eq!(gw.chat(&key, hello(model)).await.status(), 200);
    }
    assert_eq!(
        sim.routes_since(2).await,
        ["vertex.generate"; 3],
        "the cooling route is skipped: no attempt, no delay"
    );
    tokio::time::sleep(Duration::from_millis(2200)).await;
    assert_eq!(
        route_state(&gw, model, "gemini-api").await["state"],
        "half-open"
    );
    assert_eq!(gw.chat(&key, hello(model)).await.status(), 200);
    assert_eq!(
        sim.routes_since(5).await,
        ["gemini.generate"],
        "a live request probes it"
    );
    assert_eq!(
        route_state(&gw, model, "gemini-api").await["state"],
        "healthy"
    );
}

#[tokio::test]
async fn consecutive_server_errors_open_the_breaker_and_a_model_never_goes_unanswered() {
    let sim = Sim::start();
    let gw = Gateway::builder()
        .simulator(&sim)
        .upstream("breaker: {failures: 2, cooldown: 30s}")
        .start();
    let (_, key) = gw.workspace_with_key();
    let model = "google/gemini-3.5-flash";
    sim.queue_fault("500", "gemini", 2).await;
    for _ in 0..2 {
        assert_eq!(gw.chat(&key, hello(model)).await.status(), 200);
    }
    let state = route_state(&gw, model, "gemini-api").await;
    assert_eq!(state["state"], "cooling", "{state}");
    assert_eq!(state["consecutive_failures"], 2);
    // Every route failing: each request tries all three, and the client gets the upstream's
    // own 500; by the second, every route is cooling down.
    sim.queue_fault("500", "any", 6).await;
    let before = sim.requests().await.len();
    for _ in 0..2 {
        let res = gw.chat(&key, hello(model)).await;
        assert_eq!(res.status(), 500);
    }
    assert_eq!(
        sim.routes_since(before).await.len(),
        6,
        "three attempts each"
    );
    for kind in ["gemini-api", "vertex", "vertex-global"] {
        assert_eq!(
            route_state(&gw, model, kind).await["state"],
            "cooling",
            "{kind}"
        );
    }
    let res = gw.chat(&key, hello(model)).await;
    assert_eq!(res.status(), 200, "health alone never refuses a request");
}

/// A streamed request's frames, checked to be one clean stream (no error frame, `[DONE]` last).
async fn clean_stream(res: reqwest::Response) -> Vec<Value> {
    assert_eq!(res.status(), 200);
    let text = res.text().await.unwrap();
    let frames = sse_data(&text);
    assert_eq!(frames.last().map(String::as_str), Some("[DONE]"), "{text}");
    let chunks: Vec<Value> = frames[..frames.len() - 1]
        .iter()
        .map(|f| serde_json::from_str(f).unwrap())
        .collect();
    assert!(
        chunks.iter().all(|c| c.get("error").is_none()),
        "no trace of the failed attempt: {text}"
    );
    let roles = chunks
        .iter()
        .filter(|c| c["choices"][0]["delta"]["role"] == "assistant")
        .count();
    assert_eq!(roles, 1, "one stream, not two spliced: {text}");
    chunks
}

fn stream_of(model: &str, content: &str) -> Value {
    json!({"model": model, "stream": true,
        "messages": [{"role": "user", "content": content}]})
}

#[tokio::test]
async fn a_stream_failing_before_its_first_content_is_served_whole_by_the_next_route() {
    let sim = Sim::start();
    let gw = Gateway::builder().simulator(&sim).start();
    let (ws, key) = gw.workspace_with_key();
    // Anthropic's overloaded stream: a 200, then an error event before any content.
    sim.queue_fault("error-first", "anthropic", 1).await;
    let res = gw
        .chat(&key, stream_of("anthropic/claude-haiku-4-5", "hi"))
        .await;
    let chunks = clean_stream(res).await;
    assert!(chunks
        .iter()
        .any(|c| c["usage"]["completion_tokens"].as_u64() > Some(0)));
    assert_eq!(
        sim.routes_since(0).await,
        ["anthropic.messages", "vertex.claude_stream"]
    );
    // A refusal before the answer began (a 503), on another family.
    sim.queue_fault("503", "gemini", 1).await;
    let res = gw
        .chat(&key, stream_of("google/gemini-3.5-flash", "hi"))
        .await;
    clean_stream(res).await;
    assert_eq!(
        sim.routes_since(2).await,
        ["gemini.stream", "vertex.stream"]
    );
    // A connection broken before any content (Anthropic's first two events carry none).
    sim.queue_fault("break-after=2", "anthropic", 1).await;
    let res = gw
        .chat(&key, stream_of("anthropic/claude-haiku-4-5", "hi"))
        .await;
    clean_stream(res).await;
    assert_eq!(
        sim.routes_since(4).await,
        ["anthropic.messages", "vertex.claude_stream"]
    );
    let billed = gw.usage_records(&ws, 3).await;
    assert_eq!(billed.len(), 3);
    for r in &billed {
        assert_eq!(r["outcome"], "complete", "{r}");
        assert_eq!(r["attempts"], 2, "{r}");
    }
    let routes: Vec<&str> = billed
        .iter()
        .map(|r| r["route"].as_str().unwrap())
        .collect();
    assert!(
        routes.contains(&"vertex-anthropic") && routes.contains(&"vertex"),
        "{routes:?}"
    );
}

#[tokio::test]
async fn a_large_streamed_body_fails_over_intact() {
    let sim = Sim::start();
    let gw = Gateway::builder().simulator(&sim).start();
    let (_, key) = gw.workspace_with_key();
    // Well above Pingora's 64 KiB replay buffer.
    let big = "lorem ipsum ".repeat(20_000);
    sim.queue_fault("503", "gemini", 1).await;
    let res = gw
        .chat(&key, stream_of("google/gemini-3.5-flash", &big))
        .await;
    clean_stream(res).await;
    let sent = sim.requests().await;
    assert_eq!(sent.len(), 2);
    for attempt in &sent {
        let text = attempt["body"]["contents"][0]["parts"][0]["text"]
            .as_str()
            .unwrap_or_default();
        assert_eq!(
            text.len(),
            big.len(),
            "{} got the whole body",
            attempt["route"]
        );
    }
}

#[tokio::test]
async fn a_silent_stream_gets_keep_alive_comments() {
    let sim = Sim::start();
    let gw = Gateway::builder()
        .simulator(&sim)
        .upstream("stream_keep_alive: 200ms")
        .start();
    let (_, key) = gw.workspace_with_key();
    // The upstream takes a second to begin: the client hears comments meanwhile.
    let res = gw
        .chat(
            &key,
            stream_of("google/gemini-3.5-flash", "[sim:latency=1000] hi"),
        )
        .await;
    assert_eq!(res.status(), 200);
    let text = res.text().await.unwrap();
    let comments = text.matches(": keep-alive\n\n").count();
    assert!(
        (2..=6).contains(&comments),
        "{comments} comments in about a second of silence: {text}"
    );
    assert!(text.starts_with(": keep-alive\n\n"), "{text}");
    assert_eq!(sse_data(&text).last().map(String::as_str), Some("[DONE]"));
}

#[tokio::test]
async fn models_are_listed_only_while_a_route_has_credentials() {
    let sim = Sim::start();
    let gw = Gateway::builder()
        .simulator(&sim)
        .without_env("TEST_VERTEX_PROJECT")
        .without_env("TEST_VERTEX_CREDENTIALS")
        .start();
    let (_, key) = gw.workspace_with_key();
    let ids = gw.model_ids(&key).await;
    let listed = |id: &str| ids.iter().any(|i| i == id);
    assert!(
        listed("google/gemini-3.5-flash"),
        "Developer API key: {ids:?}"
    );
    assert!(
        listed("anthropic/claude-haiku-4-5"),
        "Anthropic key: {ids:?}"
    );
    assert!(
        listed("google/text-embedding-004"),
        "served on the Developer API first: {ids:?}"
    );
    for vertex_only in ["vertex/gemini-2.5-flash", "vertex/text-embedding-005"] {
        assert!(
            !listed(vertex_only),
            "{vertex_only} has no credentials: {ids:?}"
        );
    }
}

#[tokio::test]
async fn a_stream_whose_client_left_before_it_began_is_not_failed_over() {
    let sim = Sim::start();
    let gw = Gateway::builder()
        .simulator(&sim)
        .upstream("stream_keep_alive: 100ms")
        .start();
    let (_, key) = gw.workspace_with_key();
    // The first route answers 503 after a second; the client gives up at its first comment.
    sim.queue_fault("503", "gemini", 1).await;
    let res = gw
        .chat(
            &key,
            stream_of("google/gemini-3.5-flash", "[sim:latency=1000] hi"),
        )
        .await;
    assert_eq!(res.status(), 200, "a keep-alive committed the stream");
    drop(res);
    tokio::time::sleep(Duration::from_millis(1800)).await;
    assert_eq!(
        sim.routes_since(0).await,
        ["gemini.stream"],
        "no second route for nobody"
    );
}

#[tokio::test]
async fn an_embeddings_fan_out_fails_over_whole_to_the_next_route() {
    let sim = Sim::start();
    let gw = Gateway::builder().simulator(&sim).start();
    let file = gw.dir.path().join("two-routes.yaml");
    std::fs::write(
        &file,
        "models:\n  - {id: two/embed, provider: google, family: gemini, kind: embedding, upstream_model: gemini-embedding-001, profile: embedding-768, input_price: 0.025, output_price: 0}\n\
         routes:\n  - {model_id: two/embed, kind: gemini-api, priority: 0}\n\
         \x20 - {model_id: two/embed, kind: vertex, region: us-central1, priority: 10}\n",
    )
    .unwrap();
    gw.cli(&["catalog", "import", file.to_str().unwrap()]);
    let (ws, key) = gw.workspace_with_key();
    sim.queue_fault("503", "gemini", 1).await;
    let embed = || async {
        reqwest::Client::new()
            .post(gw.url("/v1/embeddings"))
            .bearer_auth(&key)
            .json(&json!({"model": "two/embed", "input": ["one", "two", "three"]}))
            .send()
            .await
            .unwrap()
    };
    let mut res = embed().await;
    for _ in 0..50 {
        if res.status() != 400 {
            break; // the model is in the catalog snapshot
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        res = embed().await;
    }
    assert_eq!(res.status(), 200);
    let v: Value = res.json().await.unwrap();
    assert_eq!(v["data"].as_array().unwrap().len(), 3, "{v}");
    let tried = sim.routes_since(0).await;
    assert!(
        tried.first().is_some_and(|r| r.starts_with("gemini."))
            && tried.last().is_some_and(|r| r.starts_with("vertex.")),
        "{tried:?}"
    );
    let billed = gw.usage_records(&ws, 1).await;
    assert_eq!(billed.len(), 1);
    assert_eq!(
        (&billed[0]["route"], &billed[0]["attempts"]),
        (&json!("vertex"), &json!(2))
    );
}
