//! The Messages door end to end (`/v1/messages`, `/v1/messages/count_tokens`): the real
//! gateway against `tollgate-sim`, asserting what the client gets in Anthropic's shapes, what
//! reached the upstream (passed through to Claude, translated for Gemini), and what was billed.

use std::time::Duration;

use serde_json::{json, Value};

use crate::billing::pico;
use crate::harness::{eventually, Gateway, Sim, SimEnv};

/// A Messages request with one user turn.
fn ask(model: &str, text: &str) -> Value {
    json!({"model": model, "max_tokens": 300,
        "messages": [{"role": "user", "content": text}]})
}

fn streamed(mut body: Value) -> Value {
    body["stream"] = json!(true);
    body
}

/// Posts to a Messages-door `path` with the key in `x-api-key` (as the Anthropic SDKs send it),
/// plus `headers`.
async fn post(
    gw: &Gateway,
    path: &str,
    key: &str,
    body: &Value,
    headers: &[(&str, &str)],
) -> reqwest::Response {
    let mut req = reqwest::Client::new()
        .post(gw.url(path))
        .header("x-api-key", key)
        .json(body);
    for (name, value) in headers {
        req = req.header(*name, *value);
    }
    req.send().await.unwrap()
}

async fn messages(gw: &Gateway, key: &str, body: &Value) -> (u16, Value) {
    let res = post(gw, "/v1/messages", key, body, &[]).await;
    let status = res.status().as_u16();
    (status, res.json().await.unwrap())
}

/// A Messages stream's events, as `(event, data)`.
fn events(text: &str) -> Vec<(String, Value)> {
    text.split("\n\n")
        .filter(|frame| frame.lines().any(|l| l.starts_with("data:")))
        .map(|frame| {
            let field = |name: &str| {
                frame
                    .lines()
                    .find_map(|l| l.strip_prefix(name))
                    .map(|v| v.trim().to_owned())
                    .unwrap_or_default()
            };
            let data = serde_json::from_str(&field("data:")).unwrap_or(Value::Null);
            (field("event:"), data)
        })
        .collect()
}

async fn stream_events(gw: &Gateway, key: &str, body: &Value) -> Vec<(String, Value)> {
    let res = post(gw, "/v1/messages", key, body, &[]).await;
    assert_eq!(res.status(), 200);
    assert_eq!(res.headers()["content-type"], "text/event-stream");
    events(&res.text().await.unwrap())
}

/// The event names of a stream, and that its shape is Anthropic's: `message_start` first,
/// every block started before its deltas and stopped after, `message_delta` then
/// `message_stop` last.
fn check_shape(events: &[(String, Value)]) -> Vec<&str> {
    let names: Vec<&str> = events.iter().map(|(e, _)| e.as_str()).collect();
    assert_eq!(names.first(), Some(&"message_start"), "{names:?}");
    assert_eq!(
        &names[names.len() - 2..],
        ["message_delta", "message_stop"],
        "{names:?}"
    );
    assert_eq!(
        names.iter().filter(|n| **n == "message_start").count(),
        1,
        "{names:?}"
    );
    let mut open: Option<u64> = None;
    for (name, data) in events {
        assert_eq!(
            data["type"],
            name.as_str(),
            "the data names its event: {data}"
        );
        match name.as_str() {
            "content_block_start" => {
                assert!(open.is_none(), "{names:?}");
                open = data["index"].as_u64();
            }
            "content_block_delta" => assert_eq!(open, data["index"].as_u64(), "{names:?}"),
            "content_block_stop" => {
                assert_eq!(open, data["index"].as_u64(), "{names:?}");
                open = None;
            }
            _ => {}
        }
    }
    names
}

fn text_of(events: &[(String, Value)]) -> String {
    events
        .iter()
        .filter_map(|(_, d)| d["delta"]["text"].as_str())
        .collect()
}

fn assert_anthropic_error(status: u16, body: &Value, want_status: u16, ty: &str, code: &str) {
    assert_eq!(status, want_status, "{body}");
    assert_eq!(body["type"], "error", "{body}");
    assert_eq!(body["error"]["type"], ty, "{body}");
    assert_eq!(body["error"]["code"], code, "{body}");
}

#[tokio::test]
async fn every_key_state_and_gate_is_answered_in_anthropics_shape() {
    let sim = Sim::start();
    let gw = Gateway::builder().simulator(&sim).start();
    let (ws, key) = gw.workspace_with_key();
    let body = ask("anthropic/claude-haiku-4-5", "hi");
    let res = reqwest::Client::new()
        .post(gw.url("/v1/messages"))
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = res.status().as_u16();
    let v: Value = res.json().await.unwrap();
    assert_anthropic_error(status, &v, 401, "authentication_error", "missing_auth");
    let (status, v) = messages(&gw, "sk-tg-not-a-real-key", &body).await;
    assert_anthropic_error(status, &v, 401, "authentication_error", "invalid_key");
    let expired = gw.key(&ws, &["--expires-at", "2020-01-01T00:00:00Z"]);
    let revoked = gw.key(&ws, &[]);
    gw.cli(&["key", "revoke", &gw.key_id(&ws, &revoked)]);
    assert!(eventually(Duration::from_secs(5), || async {
        messages(&gw, &expired, &body).await.0 == 401
            && messages(&gw, &revoked, &body).await.0 == 401
    })
    .await
    .is_some());
    let (status, v) = messages(&gw, &expired, &body).await;
    assert_anthropic_error(status, &v, 401, "authentication_error", "expired_key");
    let (status, v) = messages(&gw, &revoked, &body).await;
    assert_anthropic_error(status, &v, 401, "authentication_error", "invalid_key");

    let unknown = ask("claude-nope-9", "hi");
    let (status, v) = messages(&gw, &key, &unknown).await;
    assert_anthropic_error(status, &v, 404, "not_found_error", "model_not_found");
    assert_eq!(v["error"]["message"], r#"model "claude-nope-9" not found"#);

    let broke = gw.workspace();
    let broke_key = gw.key(&broke, &[]);
    let (status, v) = messages(&gw, &broke_key, &body).await;
    assert_anthropic_error(status, &v, 402, "billing_error", "insufficient_credit");

    let limited = gw.key(
        &ws,
        &["--spend-limit-usd", "0.000001", "--limit-reset", "daily"],
    );
    let refused = eventually(Duration::from_secs(5), || async {
        messages(&gw, &limited, &body).await.0 == 429
    })
    .await;
    assert!(refused.is_some(), "the key over its limit must be refused");
    let (status, v) = messages(&gw, &limited, &body).await;
    assert_anthropic_error(status, &v, 429, "rate_limit_error", "spend_limit_exceeded");
    let upstream_calls = sim.requests().await.len();
    assert!(
        upstream_calls >= 1,
        "the limited key's first request went through"
    );
}

#[tokio::test]
async fn claude_routes_get_the_body_as_sent_with_the_allowed_betas() {
    let e = SimEnv::start();
    for model in ["anthropic/claude-haiku-4-5", "vertex/claude-haiku-4-5"] {
        let body = json!({
            "model": model, "max_tokens": 300, "top_k": 5, "service_tier": "auto",
            "metadata": {"user_id": "{\"device\":\"d1\"}"},
            "system": [{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}],
            "tools": [{"name": "get_weather", "description": "Weather",
                       "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}],
            "messages": [{"role": "user", "content": "hello claude"}]
        });
        let res = post(
            &e.gw,
            "/v1/messages?beta=true",
            &e.key,
            &body,
            &[
                ("anthropic-version", "2023-06-01"),
                (
                    "anthropic-beta",
                    "interleaved-thinking-2025-05-14,not-a-beta-we-allow",
                ),
                ("anthropic-beta", "claude-code-20250219"),
            ],
        )
        .await;
        assert_eq!(res.status(), 200, "{model}");
        let v: Value = res.json().await.unwrap();
        assert_eq!(v["type"], "message", "{v}");
        assert_eq!(v["model"], model, "{v}");
        assert!(v["id"].as_str().unwrap().starts_with("msg_"), "{v}");
        assert_eq!(v["content"][0]["text"], "Echo: hello claude", "{v}");
        assert_eq!(v["stop_reason"], "end_turn");

        let up = e.last_upstream().await;
        let sent = &up["body"];
        assert_eq!(
            sent["tools"], body["tools"],
            "tools pass through on this door"
        );
        assert_eq!(sent["system"], body["system"]);
        assert_eq!(sent["metadata"], body["metadata"]);
        assert_eq!(sent["top_k"], 5);
        assert!(sent.get("service_tier").is_none(), "{sent}");
        assert_eq!(
            up["headers"]["anthropic-beta"], "interleaved-thinking-2025-05-14,claude-code-20250219",
            "{model}: only allowed betas, in order"
        );
        if model.starts_with("vertex/") {
            assert!(
                up["path"].as_str().unwrap().ends_with(":rawPredict"),
                "{up}"
            );
            assert!(sent.get("model").is_none());
            assert_eq!(sent["anthropic_version"], "vertex-2023-10-16");
        } else {
            assert_eq!(up["path"], "/v1/messages");
            assert_eq!(sent["model"], "claude-haiku-4-5");
            assert_eq!(up["headers"]["anthropic-version"], "2023-06-01");
            assert_eq!(up["headers"]["x-api-key"], "sim-anthropic-key");
        }
    }
    let records = e.gw.usage_records(&e.ws, 2).await;
    assert!(
        records.iter().all(|r| r["endpoint"] == "messages"),
        "{records:?}"
    );
    // The record is the client's to read, by the message id it was answered with.
    let id = records[0]["id"].as_str().unwrap();
    assert!(id.starts_with("msg_"), "{id}");
    let generation: Value = reqwest::Client::new()
        .get(e.gw.url(&format!("/v1/generation?id={id}")))
        .bearer_auth(&e.key)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(generation["data"]["endpoint"], "messages", "{generation}");
    let metrics = reqwest::get(format!("{}/metrics", e.gw.admin))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("tollgate_requests_total{")
                && l.contains(r#"endpoint="messages""#)
                && l.contains(r#"status="200""#)),
        "the request metrics name the door"
    );
}

#[tokio::test]
async fn a_claude_stream_passes_through_and_is_billed_its_final_counts() {
    let e = SimEnv::start();
    for (n, model) in ["anthropic/claude-haiku-4-5", "vertex/claude-sonnet-4-5"]
        .into_iter()
        .enumerate()
    {
        let events = stream_events(&e.gw, &e.key, &streamed(ask(model, "stream to me"))).await;
        let names = check_shape(&events);
        assert!(names.contains(&"content_block_delta"), "{names:?}");
        let start = &events[0].1["message"];
        assert_eq!(start["model"], model);
        assert!(start["id"].as_str().unwrap().starts_with("msg_"));
        assert_eq!(text_of(&events), "Echo: stream to me");
        let id = start["id"].as_str().unwrap().to_owned();
        let last = &events[events.len() - 2].1;
        let output = last["usage"]["output_tokens"].as_u64().unwrap();
        // This stream's record too, not only the first model's (records land off the
        // response path).
        let records = e.gw.usage_records(&e.ws, n + 1).await;
        let record = records.iter().find(|r| r["id"] == id.as_str());
        let Some(record) = record else {
            panic!("{id} billed: {records:?}");
        };
        assert_eq!(record["output_tokens"], output, "{record}");
        assert_eq!(record["endpoint"], "messages");
        assert_eq!(record["stream"], true);
    }
}

#[tokio::test]
async fn every_usage_bucket_of_a_claude_answer_is_billed_exactly() {
    let e = SimEnv::start();
    // Haiku 4.5 caches prefixes of 4,096 tokens or more.
    let long = "The gateway bills every bucket exactly. ".repeat(450);
    let body = |ttl: &str| {
        json!({"model": "anthropic/claude-haiku-4-5", "max_tokens": 200,
            "system": [{"type": "text", "text": long, "cache_control": {"type": "ephemeral", "ttl": ttl}}],
            "messages": [{"role": "user", "content": "hello"}]})
    };
    let (status, first) = messages(&e.gw, &e.key, &body("1h")).await;
    assert_eq!(status, 200, "{first}");
    let u = &first["usage"];
    let written = u["cache_creation"]["ephemeral_1h_input_tokens"]
        .as_u64()
        .unwrap();
    assert!(written > 1000, "{u}");
    let (status, second) = messages(&e.gw, &e.key, &body("1h")).await;
    assert_eq!(status, 200, "{second}");
    assert!(
        second["usage"]["cache_read_input_tokens"].as_u64() > Some(1000),
        "{second}"
    );
    let records = e.gw.usage_records(&e.ws, 2).await;
    for answer in [&first, &second] {
        let u = &answer["usage"];
        let r = records.iter().find(|r| r["id"] == answer["id"]).unwrap();
        assert_eq!(r["input_tokens"], u["input_tokens"], "{r}");
        assert_eq!(r["output_tokens"], u["output_tokens"], "{r}");
        assert_eq!(r["cache_read_tokens"], u["cache_read_input_tokens"], "{r}");
        assert_eq!(
            r["cache_write_1h_tokens"], u["cache_creation"]["ephemeral_1h_input_tokens"],
            "{r}"
        );
        assert_eq!(
            r["cache_write_tokens"], u["cache_creation"]["ephemeral_5m_input_tokens"],
            "{r}"
        );
        assert!(pico(&r["cost"]) > 0, "{r}");
    }
    let verify = e.gw.cli_json(&["ledger", "verify"]);
    assert_eq!(verify["inconsistent"], json!([]), "{verify}");
}

/// Claude Code switched from Claude to a Gemini 3 model mid-session: the history's tool calls
/// are Claude's (`toolu_…`) and carry no Gemini signature, which Gemini 3 would refuse.
#[tokio::test]
async fn a_conversation_moves_from_claude_to_gemini_3_with_its_tool_calls() {
    let e = SimEnv::start();
    let body = json!({"model": "google/gemini-3.5-flash-lite", "max_tokens": 300,
        "tools": [{"name": "get_weather", "input_schema": {"type": "object"}}],
        "messages": [
            {"role": "user", "content": "weather in Paris?"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_01A",
                "name": "get_weather", "input": {"city": "Paris"}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_01A",
                "content": "sunny"}]}]});
    let (status, v) = messages(&e.gw, &e.key, &body).await;
    assert_eq!(status, 200, "{v}");
    let sent = e.last_upstream().await["body"].clone();
    assert_eq!(
        sent["contents"][1]["parts"][0]["thoughtSignature"], "skip_thought_signature_validator",
        "{sent}"
    );
}

#[tokio::test]
async fn a_gemini_route_answers_in_anthropics_shape_and_completes_a_tool_loop() {
    let e = SimEnv::start();
    let model = "google/gemini-2.5-flash";
    let (status, v) = messages(&e.gw, &e.key, &ask(model, "hello gemini")).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(
        (v["type"].as_str(), v["model"].as_str()),
        (Some("message"), Some(model))
    );
    assert!(
        v["content"]
            .as_array()
            .unwrap()
            .iter()
            .any(|b| b["type"] == "text"),
        "{v}"
    );
    assert!(v["usage"]["input_tokens"].as_u64() > Some(0));

    let tools = json!([{"name": "get_weather", "description": "Weather in a city",
        "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}]);
    let first = json!({"model": model, "max_tokens": 300, "tools": tools,
        "messages": [{"role": "user", "content": "weather? [sim:call=get_weather]"}]});
    let (status, v) = messages(&e.gw, &e.key, &first).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["stop_reason"], "tool_use", "{v}");
    let call = v["content"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["type"] == "tool_use")
        .cloned()
        .unwrap();
    assert_eq!(call["name"], "get_weather");
    assert!(call["input"].is_object(), "{call}");
    let second = json!({"model": model, "max_tokens": 300, "tools": tools, "messages": [
        {"role": "user", "content": "weather? [sim:call=get_weather]"},
        {"role": "assistant", "content": v["content"]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call["id"], "content": "sunny"}]}
    ]});
    let (status, v) = messages(&e.gw, &e.key, &second).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["stop_reason"], "end_turn", "{v}");
    let sent = e.last_upstream().await["body"].clone();
    let parts = sent["contents"][2]["parts"].as_array().unwrap();
    assert!(
        parts
            .iter()
            .any(|p| p["functionResponse"]["name"] == "get_weather"),
        "{sent}"
    );

    // A tool_result answering nothing changes the conversation's meaning: refused.
    let orphan = json!({"model": model, "max_tokens": 300, "messages": [
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_x", "content": "?"}]}]});
    let (status, v) = messages(&e.gw, &e.key, &orphan).await;
    assert_anthropic_error(
        status,
        &v,
        400,
        "invalid_request_error",
        "invalid_request_error",
    );

    let events = stream_events(&e.gw, &e.key, &streamed(ask(model, "stream gemini"))).await;
    check_shape(&events);
    assert!(!text_of(&events).is_empty(), "{events:?}");
    let records = e.gw.usage_records(&e.ws, 4).await;
    assert!(
        records
            .iter()
            .all(|r| r["endpoint"] == "messages" && r["model_id"] == model),
        "{records:?}"
    );
}

#[tokio::test]
async fn a_messages_stream_failing_before_its_first_content_event_fails_over() {
    let e = SimEnv::start();
    // Anthropic's overloaded stream: a 200, message_start, then an error event.
    e.sim.queue_fault("error-first", "anthropic", 1).await;
    let body = streamed(ask("anthropic/claude-haiku-4-5", "hi"));
    let events = stream_events(&e.gw, &e.key, &body).await;
    let names = check_shape(&events);
    assert!(
        !names.contains(&"error"),
        "no trace of the failed attempt: {names:?}"
    );
    assert_eq!(
        e.sim.routes_since(0).await,
        ["anthropic.messages", "vertex.claude_stream"]
    );
    let records = e.gw.usage_records(&e.ws, 1).await;
    assert_eq!(records[0]["attempts"], 2, "{records:?}");
    assert_eq!(records[0]["route"], "vertex-anthropic");
}

#[tokio::test]
async fn a_left_messages_stream_is_billed_at_least_what_was_delivered() {
    let e = SimEnv::start();
    for model in ["anthropic/claude-sonnet-4-5", "google/gemini-2.5-flash"] {
        let body = json!({"model": model, "stream": true, "max_tokens": 400,
            "messages": [{"role": "user", "content": format!(
                "[sim:chunks=30] [sim:chunk-delay=50] {}", "tell me a long story ".repeat(30))}]});
        let mut res = post(&e.gw, "/v1/messages", &e.key, &body, &[]).await;
        assert_eq!(res.status(), 200);
        let mut text = String::new();
        while events(&text)
            .iter()
            .filter(|(n, _)| n == "content_block_delta")
            .count()
            < 3
        {
            let chunk = res.chunk().await.unwrap().expect("the stream goes on");
            text.push_str(&String::from_utf8_lossy(&chunk));
        }
        drop(res);
        let delivered = text_of(&events(&text)).len() as u64;
        let records = eventually(Duration::from_secs(10), || async {
            e.gw.usage_records(&e.ws, 1)
                .await
                .iter()
                .any(|r| r["model_id"] == model && r["outcome"] == "client_disconnected")
        })
        .await;
        assert!(records.is_some(), "{model}: the left stream is billed");
        let all = e.gw.usage_records(&e.ws, 1).await;
        let r = all.iter().find(|r| r["model_id"] == model).unwrap();
        assert!(
            r["output_tokens"].as_u64().unwrap() >= delivered.div_ceil(4),
            "{r}"
        );
    }
}

#[tokio::test]
async fn count_tokens_counts_on_every_upstream_and_is_never_billed() {
    let sim = Sim::start();
    let gw = Gateway::builder().simulator(&sim).start();
    let broke = gw.workspace();
    let key = gw.key(&broke, &[]);
    for model in [
        "anthropic/claude-haiku-4-5",
        "vertex/claude-sonnet-4-5",
        "google/gemini-2.5-flash-lite",
        "vertex/gemini-2.5-flash",
    ] {
        let body = json!({"model": model, "system": "Be brief.",
            "messages": [{"role": "user", "content": "count these words please"}]});
        let res = post(
            &gw,
            "/v1/messages/count_tokens",
            &key,
            &body,
            &[("anthropic-version", "2023-06-01")],
        )
        .await;
        let status = res.status().as_u16();
        let v: Value = res.json().await.unwrap();
        assert_eq!(status, 200, "{model}: {v}");
        assert!(v["input_tokens"].as_u64() > Some(0), "{model}: {v}");
        assert_eq!(v.as_object().unwrap().len(), 1, "{v}");
    }
    let routes: Vec<String> = sim
        .requests()
        .await
        .iter()
        .map(|r| r["path"].as_str().unwrap().to_owned())
        .collect();
    assert!(
        routes[0].ends_with("/v1/messages/count_tokens"),
        "{routes:?}"
    );
    assert!(routes[1].ends_with("count-tokens:rawPredict"), "{routes:?}");
    assert!(
        routes[2].ends_with(":countTokens?prettyPrint=false")
            && routes[3].ends_with(":countTokens?prettyPrint=false"),
        "{routes:?}"
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        gw.usage_records(&broke, 0).await.is_empty(),
        "counting is never billed"
    );
    let body =
        json!({"model": "google/gemini-2.5-flash", "messages": [{"role": "user", "content": "x"}]});
    let res = post(&gw, "/v1/messages/count_tokens", "sk-tg-nope", &body, &[]).await;
    assert_eq!(res.status(), 401, "counting needs a key");
}
