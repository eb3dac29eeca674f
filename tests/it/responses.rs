//! The Responses door end to end (`POST /v1/responses`, `GET`/`DELETE /v1/responses/{id}`): the
//! real gateway against `tollgate-sim`, asserting what the client gets in the Responses API's
//! shapes, what reached the upstream (translated for Gemini and for Claude), and what was billed.

use std::time::Duration;

use serde_json::{json, Value};

use crate::harness::{eventually, Gateway, SimEnv};

const GEMINI: &str = "google/gemini-2.5-flash-lite";
const CLAUDE: &str = "anthropic/claude-haiku-4-5";

fn ask(model: &str, text: &str) -> Value {
    json!({"model": model, "input": text, "max_output_tokens": 300})
}

fn streamed(mut body: Value) -> Value {
    body["stream"] = json!(true);
    body
}

async fn post(gw: &Gateway, key: &str, body: &Value) -> reqwest::Response {
    reqwest::Client::new()
        .post(gw.url("/v1/responses"))
        .bearer_auth(key)
        .json(body)
        .send()
        .await
        .unwrap()
}

async fn respond(gw: &Gateway, key: &str, body: &Value) -> (u16, Value) {
    let res = post(gw, key, body).await;
    let status = res.status().as_u16();
    (status, res.json().await.unwrap())
}

async fn stored(gw: &Gateway, key: &str, id: &str, method: reqwest::Method) -> (u16, Value) {
    let res = reqwest::Client::new()
        .request(method, gw.url(&format!("/v1/responses/{id}")))
        .bearer_auth(key)
        .send()
        .await
        .unwrap();
    let status = res.status().as_u16();
    (status, res.json().await.unwrap_or(Value::Null))
}

/// A Responses stream's events as `(event, data)`.
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

/// The event names, checked for the Responses API's shape: every event names itself in its
/// data and is numbered from 0 without gaps; `response.created` first; each output item added
/// before its deltas and done after; one terminal event last.
fn check_shape(events: &[(String, Value)]) -> Vec<&str> {
    let names: Vec<&str> = events.iter().map(|(e, _)| e.as_str()).collect();
    assert_eq!(
        &names[..2],
        ["response.created", "response.in_progress"],
        "{names:?}"
    );
    let last = *names.last().unwrap();
    assert!(
        [
            "response.completed",
            "response.incomplete",
            "response.failed"
        ]
        .contains(&last),
        "{names:?}"
    );
    let mut open: Option<u64> = None;
    for (n, (name, data)) in events.iter().enumerate() {
        assert_eq!(
            data["type"],
            name.as_str(),
            "the data names its event: {data}"
        );
        assert_eq!(data["sequence_number"], n as u64, "{names:?}");
        match name.as_str() {
            "response.output_item.added" => {
                assert!(open.is_none(), "{names:?}");
                open = data["output_index"].as_u64();
            }
            "response.output_item.done" => {
                assert_eq!(open, data["output_index"].as_u64(), "{names:?}");
                open = None;
            }
            n if n.ends_with(".delta") => {
                assert_eq!(open, data["output_index"].as_u64(), "{names:?}")
            }
            _ => {}
        }
    }
    names
}

/// The text of a response object's `message` items.
fn output_text(response: &Value) -> String {
    response["output"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| i["type"] == "message")
        .flat_map(|i| i["content"].as_array().unwrap().iter())
        .filter_map(|p| p["text"].as_str())
        .collect()
}

fn function_calls(response: &Value) -> Vec<Value> {
    response["output"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| i["type"] == "function_call")
        .cloned()
        .collect()
}

#[tokio::test]
async fn a_response_is_answered_and_billed_on_gemini_and_on_claude() {
    let e = SimEnv::start();
    for model in [GEMINI, CLAUDE] {
        let res = post(&e.gw, &e.key, &ask(model, "hello responses")).await;
        assert_eq!(res.status(), 200);
        let request_id = res.headers()["x-request-id"].to_str().unwrap().to_owned();
        let v: Value = res.json().await.unwrap();
        assert_eq!(v["object"], "response", "{v}");
        assert_eq!(v["status"], "completed", "{v}");
        assert_eq!(v["model"], model, "{v}");
        let id = v["id"].as_str().unwrap();
        assert!(id.starts_with("resp_"), "{v}");
        assert_eq!(request_id, id, "the request id is the response id");
        assert_eq!(output_text(&v), "Echo: hello responses", "{v}");
        let u = &v["usage"];
        assert_eq!(
            u["total_tokens"].as_u64(),
            Some(u["input_tokens"].as_u64().unwrap() + u["output_tokens"].as_u64().unwrap()),
            "{v}"
        );

        let generation: Value = reqwest::Client::new()
            .get(e.gw.url(&format!("/v1/generation?id={id}")))
            .bearer_auth(&e.key)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let found = eventually(Duration::from_secs(5), || async {
            let records = e.gw.usage_records(&e.ws, 1).await;
            records.iter().any(|r| r["id"] == id)
        })
        .await;
        assert!(found.is_some(), "{model}: billed");
        let records = e.gw.usage_records(&e.ws, 1).await;
        let r = records.iter().find(|r| r["id"] == id).unwrap();
        assert_eq!(r["endpoint"], "responses", "{r}");
        assert_eq!(r["input_tokens"], u["input_tokens"], "{r} {u}");
        assert_eq!(r["output_tokens"], u["output_tokens"], "{r} {u}");
        let _ = generation;
    }
    let verify = e.gw.cli_json(&["ledger", "verify"]);
    assert_eq!(verify["inconsistent"], json!([]), "{verify}");
}

#[tokio::test]
async fn a_response_stream_has_the_apis_events_in_order_and_ends_with_the_whole_response() {
    let e = SimEnv::start();
    for model in [GEMINI, CLAUDE] {
        let body = streamed(ask(model, "[sim:chunks=5] stream me please"));
        let res = post(&e.gw, &e.key, &body).await;
        assert_eq!(res.status(), 200);
        assert_eq!(res.headers()["content-type"], "text/event-stream");
        let events = events(&res.text().await.unwrap());
        let names = check_shape(&events);
        assert_eq!(names.last(), Some(&"response.completed"), "{names:?}");
        let deltas: String = events
            .iter()
            .filter(|(n, _)| n == "response.output_text.delta")
            .filter_map(|(_, d)| d["delta"].as_str())
            .collect();
        assert_eq!(deltas, "Echo: stream me please", "{model}");
        let done = events
            .iter()
            .rev()
            .find(|(n, _)| n == "response.output_item.done")
            .map(|(_, d)| d["item"].clone())
            .unwrap();
        assert_eq!(done["type"], "message");
        assert_eq!(done["content"][0]["text"], deltas.as_str());
        let completed = &events.last().unwrap().1["response"];
        assert_eq!(output_text(completed), deltas, "{completed}");
        assert!(
            completed["usage"]["output_tokens"].as_u64() > Some(0),
            "{completed}"
        );
        let id = completed["id"].as_str().unwrap();
        let (status, kept) = stored(&e.gw, &e.key, id, reqwest::Method::GET).await;
        assert_eq!(status, 200, "{kept}");
        assert!(
            completed["usage"]["cost"].as_f64() > Some(0.0),
            "{completed}"
        );
        assert_eq!(
            kept["usage"], completed["usage"],
            "{model}: kept as the stream ended it, its charge included"
        );
    }
}

/// Five turns, each asking for a call and answering it: the upstream sees every call with its
/// result, ids unchanged, and no call twice.
#[tokio::test]
async fn a_five_turn_tool_loop_keeps_every_call_paired() {
    let e = SimEnv::start();
    let tools = json!([{"type": "function", "name": "get_weather", "description": "Weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}]);
    for model in [GEMINI, CLAUDE] {
        let mut input: Vec<Value> = Vec::new();
        let mut ids = Vec::new();
        for turn in 0..5 {
            input.push(json!({"role": "user", "content": format!(
                "turn {turn}: weather? [sim:call=get_weather] [sim:args={{\"city\":\"c{turn}\"}}]")}));
            let body = json!({"model": model, "input": input, "tools": tools, "store": false});
            let (status, v) = respond(&e.gw, &e.key, &body).await;
            assert_eq!(status, 200, "{model} turn {turn}: {v}");
            let calls = function_calls(&v);
            assert_eq!(calls.len(), 1, "{model} turn {turn}: {v}");
            let call = &calls[0];
            assert_eq!(call["name"], "get_weather");
            assert_eq!(call["arguments"], format!("{{\"city\":\"c{turn}\"}}"));
            ids.push(call["call_id"].as_str().unwrap().to_owned());
            // What the client sends back: every output item, then the call's result.
            input.extend(v["output"].as_array().unwrap().iter().cloned());
            input.push(
                json!({"type": "function_call_output", "call_id": call["call_id"],
                "output": format!("sunny in c{turn}")}),
            );
            let body = json!({"model": model, "input": input, "tools": tools, "store": false});
            let (status, v) = respond(&e.gw, &e.key, &body).await;
            assert_eq!(status, 200, "{model} turn {turn}: {v}");
            assert!(function_calls(&v).is_empty(), "no call repeated: {v}");
            assert_eq!(output_text(&v), "Echo: received 1 tool result(s)", "{v}");
            input.extend(v["output"].as_array().unwrap().iter().cloned());
        }
        let mut unique = ids.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), 5, "{ids:?}");
        let sent = e.last_upstream().await["body"].to_string();
        for turn in 0..5 {
            assert!(
                sent.contains(&format!("sunny in c{turn}")),
                "{model}: {sent}"
            );
        }
    }
}

/// A tool loop with a call made elsewhere (the client's own call id, nothing signed), for
/// `model`.
fn loop_begun_elsewhere(model: &str) -> Value {
    json!({"model": model,
        "tools": [{"type": "function", "name": "get_weather", "parameters": {"type": "object"}}],
        "input": [
            {"role": "user", "content": "weather in Paris?"},
            {"type": "function_call", "call_id": "fc_local_1", "name": "get_weather",
             "arguments": "{\"city\":\"Paris\"}"},
            {"type": "function_call_output", "call_id": "fc_local_1", "output": "sunny"}]})
}

/// A client that kept its own history (its own call ids, no Gemini signatures) sends a tool loop
/// to Gemini 3, which refuses a replayed call without a signature.
#[tokio::test]
async fn gemini_3_takes_function_calls_it_did_not_make() {
    let e = SimEnv::start();
    let body = loop_begun_elsewhere("google/gemini-3.5-flash-lite");
    let (status, v) = respond(&e.gw, &e.key, &body).await;
    assert_eq!(status, 200, "{v}");
    let sent = e.last_upstream().await["body"].clone();
    assert_eq!(
        sent["contents"][1]["parts"][0]["thoughtSignature"], "skip_thought_signature_validator",
        "{sent}"
    );
}

/// The same on Claude: a tool loop begun on another model (Gemini, say, then a switch or a
/// failover) has no signed thinking to replay, and Claude refuses to continue it with thinking
/// on, so the gateway sends that request without thinking.
#[tokio::test]
async fn claude_continues_a_tool_loop_begun_elsewhere_without_thinking() {
    let e = SimEnv::start();
    let mut body = loop_begun_elsewhere(CLAUDE);
    body["reasoning"] = json!({"effort": "low"});
    body["max_output_tokens"] = json!(4000);
    let (status, v) = respond(&e.gw, &e.key, &body).await;
    assert_eq!(status, 200, "{v}");
    let sent = e.last_upstream().await["body"].clone();
    assert_eq!(sent["thinking"], json!({"type": "disabled"}), "{sent}");
    assert_eq!(
        sent["messages"][1]["content"][0]["type"], "tool_use",
        "{sent}"
    );
}

#[tokio::test]
async fn a_response_stream_failing_before_its_first_output_fails_over() {
    let e = SimEnv::start();
    e.sim.queue_fault("error-first", "anthropic", 1).await;
    let res = post(&e.gw, &e.key, &streamed(ask(CLAUDE, "hi"))).await;
    assert_eq!(res.status(), 200);
    let events = events(&res.text().await.unwrap());
    let names = check_shape(&events);
    assert!(
        !names.contains(&"error"),
        "no trace of the failed attempt: {names:?}"
    );
    let records = e.gw.usage_records(&e.ws, 1).await;
    assert_eq!(records[0]["attempts"], 2, "{records:?}");
}

#[tokio::test]
async fn a_left_response_stream_is_billed_at_least_what_was_delivered() {
    let e = SimEnv::start();
    for model in [CLAUDE, GEMINI] {
        let body = streamed(
            json!({"model": model, "max_output_tokens": 400, "input": format!(
            "[sim:chunks=30] [sim:chunk-delay=50] {}", "tell me a long story ".repeat(30))}),
        );
        let mut res = post(&e.gw, &e.key, &body).await;
        assert_eq!(res.status(), 200);
        let mut text = String::new();
        let deltas = |t: &str| {
            events(t)
                .into_iter()
                .filter(|(n, _)| n == "response.output_text.delta")
                .filter_map(|(_, d)| d["delta"].as_str().map(str::to_owned))
                .collect::<Vec<_>>()
        };
        while deltas(&text).len() < 3 {
            let chunk = res.chunk().await.unwrap().expect("the stream goes on");
            text.push_str(&String::from_utf8_lossy(&chunk));
        }
        drop(res);
        let delivered = deltas(&text).concat().len() as u64;
        let billed = eventually(Duration::from_secs(10), || async {
            e.gw.usage_records(&e.ws, 1)
                .await
                .iter()
                .any(|r| r["model_id"] == model && r["outcome"] == "client_disconnected")
        })
        .await;
        assert!(billed.is_some(), "{model}: the left stream is billed");
        let all = e.gw.usage_records(&e.ws, 1).await;
        let r = all.iter().find(|r| r["model_id"] == model).unwrap();
        assert!(
            r["output_tokens"].as_u64().unwrap() >= delivered.div_ceil(4),
            "{r}"
        );
        assert_eq!(r["endpoint"], "responses", "{r}");
    }
    let verify = e.gw.cli_json(&["ledger", "verify"]);
    assert_eq!(verify["inconsistent"], json!([]), "{verify}");
}

#[tokio::test]
async fn errors_come_in_openais_envelope() {
    let e = SimEnv::start();
    let (status, v) = respond(&e.gw, "tg-nope", &ask(GEMINI, "hi")).await;
    assert_eq!(status, 401, "{v}");
    assert!(v["error"]["code"].is_string(), "{v}");
    let (status, v) = respond(&e.gw, &e.key, &ask("acme/none", "hi")).await;
    assert_eq!(
        (status, v["error"]["code"].as_str()),
        (400, Some("model_not_found")),
        "{v}"
    );
    let (status, v) = respond(&e.gw, &e.key, &json!({"model": GEMINI})).await;
    assert_eq!(status, 400, "{v}");
    assert_eq!(v["error"]["type"], "invalid_request_error", "{v}");
    let poor = e.gw.workspace();
    let poor_key = e.gw.key(&poor, &[]);
    let (status, v) = respond(&e.gw, &poor_key, &ask(GEMINI, "hi")).await;
    assert_eq!(status, 402, "{v}");
}

/// `previous_response_id` continues a stored response; stored responses belong to their
/// workspace, and can be read and deleted by its keys only.
#[tokio::test]
async fn stored_responses_continue_conversations_within_their_workspace() {
    let e = SimEnv::start();
    for model in [GEMINI, CLAUDE] {
        let (status, first) = respond(&e.gw, &e.key, &ask(model, "my name is Ada")).await;
        assert_eq!(status, 200, "{first}");
        let id = first["id"].as_str().unwrap();
        let next = json!({"model": model, "input": "what is my name?", "previous_response_id": id});
        let (status, second) = respond(&e.gw, &e.key, &next).await;
        assert_eq!(status, 200, "{second}");
        let sent = e.last_upstream().await["body"].to_string();
        assert!(
            sent.contains("my name is Ada"),
            "{model}: the first turn reached the upstream: {sent}"
        );
        assert!(
            sent.contains("Echo: my name is Ada"),
            "{model}: and its answer: {sent}"
        );
        assert!(sent.contains("what is my name?"), "{sent}");

        let third = json!({"model": model, "input": "and again?",
            "previous_response_id": second["id"]});
        let (status, _) = respond(&e.gw, &e.key, &third).await;
        assert_eq!(status, 200);
        let sent = e.last_upstream().await["body"].to_string();
        assert!(
            sent.contains("my name is Ada") && sent.contains("what is my name?"),
            "{sent}"
        );

        let (status, got) = stored(&e.gw, &e.key, id, reqwest::Method::GET).await;
        assert_eq!(status, 200, "{got}");
        assert_eq!(got["id"], id);
        assert_eq!(output_text(&got), output_text(&first));
        assert!(first["usage"]["cost"].as_f64() > Some(0.0), "{first}");
        assert_eq!(
            got["usage"], first["usage"],
            "{model}: kept as answered, its charge included"
        );

        let (other_ws, other_key) = e.gw.workspace_with_key();
        let _ = other_ws;
        let (status, v) = stored(&e.gw, &other_key, id, reqwest::Method::GET).await;
        assert_eq!(status, 404, "another workspace's response: {v}");
        let foreign = json!({"model": model, "input": "x", "previous_response_id": id});
        let (status, v) = respond(&e.gw, &other_key, &foreign).await;
        assert_eq!(status, 404, "{v}");
        let (status, _) = stored(&e.gw, &other_key, id, reqwest::Method::DELETE).await;
        assert_eq!(status, 404);

        let (status, v) = stored(&e.gw, &e.key, id, reqwest::Method::DELETE).await;
        assert_eq!(status, 200, "{v}");
        assert_eq!(v["deleted"], true, "{v}");
        let (status, _) = stored(&e.gw, &e.key, id, reqwest::Method::GET).await;
        assert_eq!(status, 404);

        // store: false keeps nothing.
        let mut body = ask(model, "forget me");
        body["store"] = json!(false);
        let (_, v) = respond(&e.gw, &e.key, &body).await;
        let (status, _) = stored(
            &e.gw,
            &e.key,
            v["id"].as_str().unwrap(),
            reqwest::Method::GET,
        )
        .await;
        assert_eq!(status, 404);
    }
}
