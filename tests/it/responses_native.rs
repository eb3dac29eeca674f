//! The Responses door on `openai` routes that speak the Responses API (`api: responses`): the
//! request passes through to the upstream's `/v1/responses` untranslated (the route's model,
//! `store: false`, the conversation a `previous_response_id` names expanded into `input`), the
//! answer and the stream come back with the gateway's id and model, failover before the first
//! output, billing. The real gateway against `tollgate-sim`'s Responses endpoint.

use std::time::Duration;

use serde_json::{json, Value};

use crate::answer_cost::cost_text;
use crate::harness::{eventually, Gateway, Sim, FAKE_KEY};

const MODEL: &str = "acme/gpt";
/// The same model behind two Responses routes, for failover.
const TWO_ROUTES: &str = "acme/gpt-twice";

struct Native {
    sim: Sim,
    gw: Gateway,
    ws: String,
    key: String,
}

fn start() -> Native {
    let sim = Sim::start();
    // The catalog names the simulator's URL; the builder takes a `'static` text.
    let catalog: &'static str = Box::leak(
        format!(
            "models:\n\
             \x20 - {{id: {MODEL}, provider: acme, family: openai, kind: chat, upstream_model: gpt-5-mini,\n\
             \x20    input_price: 1, output_price: 8, cache_read_price: 0.1}}\n\
             \x20 - {{id: {TWO_ROUTES}, provider: acme, family: openai, kind: chat, upstream_model: gpt-5,\n\
             \x20    input_price: 1, output_price: 8}}\n\
             routes:\n\
             \x20 - {{model_id: {MODEL}, kind: openai, base_url: \"{url}/v1\", api: responses}}\n\
             \x20 - {{model_id: {TWO_ROUTES}, kind: openai, base_url: \"{url}/v1\", api: responses, priority: 0}}\n\
             \x20 - {{model_id: {TWO_ROUTES}, kind: openai, base_url: \"{url}/v1/\", api: responses, priority: 1}}\n",
            url = sim.url
        )
        .into_boxed_str(),
    );
    let gw = Gateway::builder().only_catalog(catalog).start();
    let (ws, key) = gw.workspace_with_key();
    Native { sim, gw, ws, key }
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

async fn respond(n: &Native, body: &Value) -> (u16, Value) {
    let res = post(&n.gw, &n.key, body).await;
    let status = res.status().as_u16();
    (status, res.json().await.unwrap())
}

/// The Responses requests the simulator received.
async fn upstream(sim: &Sim) -> Vec<Value> {
    sim.requests()
        .await
        .into_iter()
        .filter(|r| r["route"] == "openai.responses")
        .collect()
}

/// A stream's events as `(event, data)`, checked: each named after its data's `type` and
/// numbered 0, 1, 2… .
fn events(text: &str) -> Vec<(String, Value)> {
    let events: Vec<(String, Value)> = text
        .split("\n\n")
        .filter(|frame| frame.lines().any(|l| l.starts_with("data:")))
        .map(|frame| {
            let field = |name: &str| {
                frame
                    .lines()
                    .find_map(|l| l.strip_prefix(name))
                    .map(|v| v.trim().to_owned())
                    .unwrap_or_default()
            };
            (
                field("event:"),
                serde_json::from_str(&field("data:")).unwrap(),
            )
        })
        .collect();
    for (n, (name, data)) in events.iter().enumerate() {
        assert_eq!(data["type"], name.as_str(), "{text}");
        assert_eq!(data["sequence_number"], n as u64, "{text}");
    }
    events
}

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

fn tok(s: &str) -> u64 {
    (s.len() as u64).div_ceil(4)
}

#[tokio::test]
async fn a_response_passes_through_to_a_route_that_speaks_the_api() {
    let n = start();
    let input =
        json!([{"role": "user", "content": [{"type": "input_text", "text": "hello native"}]}]);
    let body = json!({"model": MODEL, "instructions": "be brief", "input": input,
        "max_output_tokens": 300, "metadata": {"k": "v"}, "include": ["reasoning.encrypted_content"]});
    let res = post(&n.gw, &n.key, &body).await;
    assert_eq!(res.status(), 200);
    let request_id = res.headers()["x-request-id"].to_str().unwrap().to_owned();
    let text = res.text().await.unwrap();
    let v: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["object"], "response", "{v}");
    assert_eq!(v["status"], "completed", "{v}");
    assert_eq!(v["model"], MODEL, "the gateway's model id: {v}");
    let id = v["id"].as_str().unwrap();
    assert!(id.starts_with("resp_"), "{v}");
    assert_eq!(id, request_id, "the gateway's id, not the upstream's");
    assert_eq!(output_text(&v), "Echo: hello native", "{v}");
    assert_eq!(
        v["metadata"],
        json!({"k": "v"}),
        "the upstream's answer: {v}"
    );
    assert_eq!(v["usage"]["input_tokens"], tok("be briefhello native"));

    let seen = upstream(&n.sim).await;
    assert_eq!(seen.len(), 1, "{seen:?}");
    let r = &seen[0];
    assert_eq!(r["path"], "/v1/responses");
    assert_eq!(r["headers"]["authorization"], format!("Bearer {FAKE_KEY}"));
    assert!(!r["headers"].to_string().contains(&n.key));
    let sent = &r["body"];
    assert_eq!(sent["model"], "gpt-5-mini", "the route's upstream model");
    assert_eq!(
        sent["store"], false,
        "the gateway keeps answers, not the upstream"
    );
    assert_eq!(sent["input"], input, "{sent}");
    assert_eq!(sent["instructions"], "be brief");
    assert_eq!(sent["max_output_tokens"], 300);
    assert_eq!(sent["include"], json!(["reasoning.encrypted_content"]));
    assert!(
        n.sim
            .requests()
            .await
            .iter()
            .all(|r| r["route"] != "openai.chat"),
        "nothing went to /chat/completions"
    );

    let billed = eventually(Duration::from_secs(5), || async {
        n.gw.usage_records(&n.ws, 1)
            .await
            .iter()
            .any(|r| r["id"] == id)
    })
    .await;
    assert!(billed.is_some(), "billed");
    let records = n.gw.usage_records(&n.ws, 1).await;
    let record = records.iter().find(|r| r["id"] == id).unwrap();
    assert_eq!(record["endpoint"], "responses", "{record}");
    assert_eq!(
        record["input_tokens"], v["usage"]["input_tokens"],
        "{record}"
    );
    assert_eq!(
        record["output_tokens"], v["usage"]["output_tokens"],
        "{record}"
    );
    assert_eq!(
        cost_text(&text),
        record["cost"],
        "the answer's cost is the record's"
    );
    let verify = n.gw.cli_json(&["ledger", "verify"]);
    assert_eq!(verify["inconsistent"], json!([]), "{verify}");
}

#[tokio::test]
async fn a_stream_passes_event_by_event_with_the_gateways_ids() {
    let n = start();
    let body = json!({"model": MODEL, "stream": true, "input": "[sim:chunks=4] stream native"});
    let res = post(&n.gw, &n.key, &body).await;
    assert_eq!(res.status(), 200);
    assert_eq!(res.headers()["content-type"], "text/event-stream");
    let request_id = res.headers()["x-request-id"].to_str().unwrap().to_owned();
    let text = res.text().await.unwrap();
    let events = events(&text);
    let names: Vec<&str> = events.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names[..3],
        [
            "response.created",
            "response.in_progress",
            "response.output_item.added"
        ]
    );
    assert_eq!(names.last(), Some(&"response.completed"), "{names:?}");
    for (name, data) in &events {
        if let Some(response) = data.get("response") {
            assert_eq!(response["id"], request_id.as_str(), "{name}");
            assert_eq!(response["model"], MODEL, "{name}");
        }
    }
    let deltas: String = events
        .iter()
        .filter(|(n, _)| n == "response.output_text.delta")
        .filter_map(|(_, d)| d["delta"].as_str())
        .collect();
    assert_eq!(deltas, "Echo: stream native");
    let completed = &events.last().unwrap().1["response"];
    assert_eq!(output_text(completed), deltas);
    assert_eq!(upstream(&n.sim).await[0]["body"]["stream"], true);

    let billed = eventually(Duration::from_secs(5), || async {
        n.gw.usage_records(&n.ws, 1)
            .await
            .iter()
            .any(|r| r["id"] == request_id.as_str())
    })
    .await;
    assert!(billed.is_some(), "billed");
    let records = n.gw.usage_records(&n.ws, 1).await;
    let record = records
        .iter()
        .find(|r| r["id"] == request_id.as_str())
        .unwrap();
    assert_eq!(
        record["output_tokens"], completed["usage"]["output_tokens"],
        "{record}"
    );
    assert_eq!(record["endpoint"], "responses", "{record}");
    assert_eq!(
        cost_text(&text),
        record["cost"],
        "the answer's cost is the record's"
    );
}

/// A tool round over `previous_response_id`: the upstream stores nothing (and refuses the id),
/// so it gets the whole conversation in `input`, its own function call included.
#[tokio::test]
async fn a_tool_round_continues_with_the_conversation_expanded_into_input() {
    let n = start();
    let tools = json!([{"type": "function", "name": "shell", "parameters": {"type": "object",
        "properties": {"command": {"type": "string"}}}}]);
    let first = json!({"model": MODEL, "tools": tools,
        "input": "list files [sim:call=shell] [sim:args={\"command\":\"ls\"}]"});
    let (status, v) = respond(&n, &first).await;
    assert_eq!(status, 200, "{v}");
    let call = &v["output"][0];
    assert_eq!(call["type"], "function_call", "{v}");
    assert_eq!(call["arguments"], r#"{"command":"ls"}"#);
    let next = json!({"model": MODEL, "tools": tools, "previous_response_id": v["id"],
        "input": [{"type": "function_call_output", "call_id": call["call_id"], "output": "a.rs"}]});
    let (status, v) = respond(&n, &next).await;
    assert_eq!(status, 200, "{v}");
    let seen = upstream(&n.sim).await;
    assert_eq!(
        output_text(&v),
        "Echo: received 1 tool result(s)",
        "{v}\nthe upstream saw: {seen:?}"
    );
    let sent = &upstream(&n.sim).await[1]["body"];
    assert!(sent.get("previous_response_id").is_none(), "{sent}");
    let items = sent["input"].as_array().unwrap();
    let kinds: Vec<&str> = items.iter().filter_map(|i| i["type"].as_str()).collect();
    assert!(
        kinds.ends_with(&["function_call", "function_call_output"]),
        "{sent}"
    );
    assert!(sent["input"].to_string().contains("list files"), "{sent}");
}

#[tokio::test]
async fn an_error_before_the_first_output_fails_over_to_the_next_responses_route() {
    let n = start();
    n.sim.queue_fault("error-first", "openai", 1).await;
    let body = json!({"model": TWO_ROUTES, "stream": true, "input": "hi"});
    let res = post(&n.gw, &n.key, &body).await;
    assert_eq!(res.status(), 200);
    let events = events(&res.text().await.unwrap());
    let names: Vec<&str> = events.iter().map(|(n, _)| n.as_str()).collect();
    assert!(
        !names.contains(&"error"),
        "no trace of the failed attempt: {names:?}"
    );
    assert_eq!(names.last(), Some(&"response.completed"), "{names:?}");
    assert_eq!(
        upstream(&n.sim).await.len(),
        2,
        "both routes called /responses"
    );
    let records = n.gw.usage_records(&n.ws, 1).await;
    assert_eq!(records[0]["attempts"], 2, "{records:?}");
}

#[tokio::test]
async fn an_error_after_output_ends_the_stream_with_the_apis_failure_events() {
    let n = start();
    let body = json!({"model": MODEL, "stream": true, "input": "hi [sim:fault=error-event]"});
    let res = post(&n.gw, &n.key, &body).await;
    assert_eq!(res.status(), 200);
    let events = events(&res.text().await.unwrap());
    let names: Vec<&str> = events.iter().map(|(n, _)| n.as_str()).collect();
    assert!(names.contains(&"response.output_text.delta"), "{names:?}");
    assert_eq!(
        names[names.len() - 2..],
        ["error", "response.failed"],
        "{names:?}"
    );
    let failed = &events.last().unwrap().1["response"];
    assert_eq!(failed["status"], "failed");
    assert_eq!(failed["model"], MODEL);
}

#[tokio::test]
async fn the_route_api_is_shown_where_routes_are() {
    let n = start();
    let listing = n.gw.cli(&["catalog", "list"]);
    let line = listing.lines().find(|l| l.starts_with(MODEL)).unwrap();
    assert!(line.contains("openai:responses"), "{listing}");
    let rows = n.gw.cli_json(&["catalog", "list"]);
    let routes: Vec<&Value> = rows["routes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["model_id"] == MODEL)
        .collect();
    assert_eq!(routes.len(), 1, "{rows}");
    assert_eq!(routes[0]["api"], "responses");
    let ops: Value = reqwest::get(format!("{}/routes", n.gw.admin))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let shown: Vec<&Value> = ops["routes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["model"] == MODEL)
        .collect();
    assert_eq!(shown.len(), 1, "{ops}");
    assert_eq!(shown[0]["api"], "responses", "{ops}");
}
