//! The Gemini adapter against `tollgate-sim`, which validates request bodies the way Google
//! does (unknown fields, roles, thinking ranges per model, thought signatures on replayed
//! calls). Requests are built and answers translated by the library's adapter; only the
//! transport is done here, so a translator bug shows up as the simulator's 400.

use std::sync::Arc;

use bytes::BytesMut;
use serde_json::{json, Value};
use tollgate::api::{Operation, RawRequest};
use tollgate::catalog::{Endpoint, Family, Model, ModelKind, Pricing, Profile, Route, RouteKind};
use tollgate::providers::{adapter_for, Credentials, Plan, ResponseCx, Secret, Target};

use crate::harness::Sim;

const GKEY: &str = "sim-gemini-key";

/// The profiles of conf/catalog.yaml, by name.
fn catalog_profile(name: &str) -> Profile {
    let text =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/conf/catalog.yaml")).unwrap();
    let v: serde_yaml::Value = serde_yaml::from_str(&text).unwrap();
    let entry = v["profiles"]
        .as_sequence()
        .unwrap()
        .iter()
        .find(|p| p["name"].as_str() == Some(name))
        .unwrap();
    serde_yaml::from_value(entry["spec"].clone()).unwrap()
}

fn model(upstream: &str, profile: &str) -> Model {
    Model {
        id: Arc::from(format!("google/{upstream}")),
        provider: "google".into(),
        family: Family::Gemini,
        kind: ModelKind::Chat,
        upstream_model: upstream.into(),
        profile_name: profile.into(),
        profile: Arc::new(catalog_profile(profile)),
        pricing: Pricing::default(),
        capabilities: Vec::new(),
        aliases: Vec::new(),
        max_output_tokens: None,
        context_window: None,
        routes: Vec::new(),
    }
}

fn cx(exclude_reasoning: bool) -> ResponseCx {
    ResponseCx {
        id: Arc::from("chatcmpl-e2e1"),
        model_id: Arc::from("google/x"),
        op: Operation::Chat,
        created: 1,
        exclude_reasoning,
    }
}

/// Sends an OpenAI chat body through the adapter to the simulator; returns the client's view
/// (the `chat.completion` object, or the stream's frames) or the simulator's error.
async fn call(sim: &Sim, m: &Model, body: &Value) -> Result<Value, (u16, String)> {
    let adapter = adapter_for(Family::Gemini);
    let bytes = serde_json::to_vec(body).unwrap();
    let req = RawRequest::parse(&bytes, Operation::Chat).unwrap();
    let route = Route {
        kind: RouteKind::GeminiApi,
        endpoint: Endpoint::parse(&sim.url).unwrap(),
        region: None,
        upstream_model: None,
        api: Default::default(),
        addr: None,
        priority: 0,
        weight: 1,
        health: Default::default(),
    };
    let target = Target {
        model: m,
        route: &route,
        op: Operation::Chat,
        stream: req.stream,
        max_cache_ttl: tollgate::providers::DEFAULT_MAX_CACHE_TTL,
        forward: &[],
    };
    let creds = Credentials {
        gemini: Some(Secret::new(GKEY)),
        ..Credentials::default()
    };
    let Plan::Proxy { request: up, .. } = adapter.plan(&req, &target, &creds).unwrap() else {
        panic!("gemini chat is one proxied request");
    };
    let mut rb = reqwest::Client::new().post(format!("{}{}", sim.url, up.path));
    for (k, v) in &up.headers {
        rb = rb.header(k.as_str(), v.to_str().unwrap());
    }
    let res = rb.body(up.body.to_vec()).send().await.unwrap();
    let status = res.status().as_u16();
    let raw = res.bytes().await.unwrap();
    if status != 200 {
        return Err((status, adapter.upstream_error_message(status, &raw)));
    }
    let exclude = req.excludes_reasoning();
    if !req.stream {
        let t = adapter.translate_buffered(&raw, &cx(exclude)).unwrap();
        return Ok(serde_json::from_slice(&t.body).unwrap());
    }
    let mut t = adapter.stream_translator(cx(exclude));
    let mut out = BytesMut::new();
    for piece in raw.chunks(7) {
        t.feed(piece, &mut out);
    }
    t.finish(&mut out);
    assert_eq!(t.failed(), None);
    let text = String::from_utf8(out.to_vec()).unwrap();
    Ok(Value::Array(
        text.split("\n\n")
            .filter_map(|f| f.strip_prefix("data: "))
            .map(|d| serde_json::from_str(d).unwrap_or(Value::String(d.into())))
            .collect(),
    ))
}

fn weather_tools() -> Value {
    json!([{"type": "function", "function": {"name": "get_weather", "description": "Weather",
        "parameters": {"type": "object", "properties": {"arg": {"type": "string"}}, "required": ["arg"]}}}])
}

fn replay(call: &Value) -> Value {
    json!({
        "model": "x",
        "tools": weather_tools(),
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "weather? [sim:call=get_weather]"},
            {"role": "assistant", "content": null, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": call["id"], "content": "{\"sky\": \"sunny\"}"}
        ]
    })
}

#[tokio::test]
async fn gemini3_tool_call_round_trips_its_signature() {
    let sim = Sim::start();
    let m = model("gemini-3.1-pro-preview", "gemini-3.1-pro");
    for stream in [false, true] {
        let ask = json!({"model": "x", "stream": stream, "tools": weather_tools(), "tool_choice": "required",
            "reasoning_effort": "minimal",
            "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "weather? [sim:call=get_weather]"}]});
        let v = call(&sim, &m, &ask).await.unwrap();
        let tool_call = if stream {
            let frames = v.as_array().unwrap();
            let tc = frames
                .iter()
                .find_map(|f| f["choices"][0]["delta"]["tool_calls"].get(0))
                .unwrap()
                .clone();
            let finish = frames
                .iter()
                .find_map(|f| f["choices"][0]["finish_reason"].as_str());
            assert_eq!(finish, Some("tool_calls"));
            let mut tc = tc;
            tc.as_object_mut().unwrap().remove("index");
            tc
        } else {
            assert_eq!(v["choices"][0]["finish_reason"], "tool_calls");
            v["choices"][0]["message"]["tool_calls"][0].clone()
        };
        let id = tool_call["id"].as_str().unwrap();
        assert!(id.contains('.'), "Gemini 3 signs its call: {id}");
        let v = call(&sim, &m, &replay(&tool_call)).await;
        let v = v.unwrap_or_else(|e| panic!("replay (stream {stream}) rejected: {e:?}"));
        assert_eq!(
            v["choices"][0]["message"]["content"],
            "Echo: received 1 tool result(s)"
        );

        let replayed_signature = |requests: Vec<Value>| {
            requests.last().unwrap()["body"]["contents"][1]["parts"][0]["thoughtSignature"].clone()
        };
        let signed = replayed_signature(sim.requests().await);
        assert!(
            signed
                .as_str()
                .is_some_and(|s| s != "skip_thought_signature_validator"),
            "Gemini's own signature goes back: {signed}"
        );

        // Without the signature in its id, the call gets Google's placeholder rather than the
        // 400 Gemini 3 answers to an unsigned call.
        let mut unsigned = tool_call.clone();
        unsigned["id"] = json!(id.split('.').next().unwrap());
        call(&sim, &m, &replay(&unsigned)).await.unwrap();
        assert_eq!(
            replayed_signature(sim.requests().await),
            "skip_thought_signature_validator"
        );
    }
}

#[tokio::test]
async fn thinking_and_parameters_are_accepted_per_model() {
    let sim = Sim::start();
    let everything = |extra: Value| {
        let mut v = json!({"model": "x", "messages": [{"role": "user", "content": "Why?"}],
            "temperature": 0.3, "top_p": 0.9, "top_k": 20, "max_tokens": 4000, "stop": ["\n\n\n"], "n": 1,
            "seed": 3, "frequency_penalty": 0.4, "presence_penalty": 0.2, "logit_bias": {"1": 2}, "user": "u",
            "response_format": {"type": "text"}, "service_tier": "flex"});
        for (k, x) in extra.as_object().unwrap() {
            v[k] = x.clone();
        }
        v
    };
    let cases = [
        (
            "gemini-3.8-flash",
            "gemini-3.7",
            json!({"reasoning_effort": "minimal"}),
        ),
        (
            "gemini-3.6-flash",
            "gemini-3.6",
            json!({"reasoning_effort": "xhigh"}),
        ),
        // 2.5 Pro and Flash left the Gemini API on 2026-12-01: their profiles are proven on
        // Vertex, end to end (`gemini::thinking_maps_to_a_clamped_budget_on_2_5`).
        (
            "gemini-2.5-flash-lite",
            "gemini-2.5-flash-lite",
            json!({"reasoning": {"max_tokens": 0}}),
        ),
        (
            "gemini-2.5-flash-lite",
            "gemini-2.5-flash-lite",
            json!({"reasoning": {"max_tokens": 100000}}),
        ),
        (
            "gemini-2.5-flash-lite",
            "gemini-2.5-flash-lite",
            json!({"reasoning": {"max_tokens": 100}}),
        ),
        (
            "gemini-2.5-flash-lite",
            "gemini-2.5-flash-lite",
            json!({"reasoning": {"enabled": true}}),
        ),
        (
            "gemini-3.1-pro-preview",
            "gemini-3.1-pro",
            json!({"reasoning_effort": "minimal"}),
        ),
        (
            "gemini-3.1-pro-preview",
            "gemini-3.1-pro",
            json!({"reasoning": {"effort": "none"}}),
        ),
        (
            "gemini-3.1-pro-preview",
            "gemini-3.1-pro",
            json!({"reasoning": {"max_tokens": 5000}}),
        ),
        (
            "gemini-3-flash-preview",
            "gemini-3-flash",
            json!({"reasoning_effort": "medium", "stream": true}),
        ),
        (
            "gemini-2.5-flash-lite",
            "gemini-2.5-flash-lite",
            json!({"response_format": {"type": "json_schema",
            "json_schema": {"name": "a", "schema": {"type": "object", "properties": {"echo": {"type": "string"}}}}}}),
        ),
    ];
    for (upstream, profile, extra) in cases {
        let m = model(upstream, profile);
        let r = call(&sim, &m, &everything(extra.clone())).await;
        assert!(r.is_ok(), "{upstream} {extra}: {r:?}");
    }
    // Thoughts come back as reasoning, unless excluded.
    let m = model("gemini-2.5-flash-lite", "gemini-2.5-flash-lite");
    let v = call(
        &sim,
        &m,
        &everything(json!({"reasoning": {"effort": "low"}})),
    )
    .await
    .unwrap();
    assert_eq!(v["choices"][0]["message"]["reasoning"], "Thinking: Why?");
    assert_eq!(v["choices"][0]["message"]["content"], "Echo: Why?");
    let v = call(
        &sim,
        &m,
        &everything(json!({"reasoning": {"effort": "low", "exclude": true}})),
    )
    .await
    .unwrap();
    assert!(v["choices"][0]["message"].get("reasoning").is_none());
}

#[tokio::test]
async fn images_and_multi_turn_history_are_accepted() {
    let sim = Sim::start();
    let m = model("gemini-2.5-flash-lite", "gemini-2.5-flash-lite");
    let body = json!({"model": "x", "messages": [
        {"role": "developer", "content": "Describe images."},
        {"role": "user", "content": [{"type": "text", "text": "What is this?"},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
            {"type": "image_url", "image_url": {"url": "https://example.com/a.jpg"}}]},
        {"role": "assistant", "content": "A cat."},
        {"role": "user", "content": "And now?"}
    ]});
    let v = call(&sim, &m, &body).await.unwrap();
    assert_eq!(v["choices"][0]["message"]["content"], "Echo: And now?");
}
