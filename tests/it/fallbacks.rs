//! Request-level routing, OpenRouter's shapes, on every door: `models` (fallback models tried
//! when the one before failed before anything reached the client, billed at the model that
//! answered, whose id the answer carries) and `provider` (`only`, `ignore`, `order`,
//! `allow_fallbacks`, `max_price`), never forwarded upstream. The real gateway against
//! `tollgate-sim`, whose surfaces refuse unknown fields as the real services do.

use serde_json::{json, Value};

use crate::harness::{sse_data, Gateway, GatewayBuilder, Sim};

/// Test models with known prices and routes (the default catalog's profiles).
const CATALOG: &str = "models:
  - {id: fb/flash, provider: google, family: gemini, kind: chat, upstream_model: gemini-2.5-flash, profile: gemini-2.5-flash, input_price: 0.30, output_price: 2.50}
  - {id: fb/lite, provider: google, family: gemini, kind: chat, upstream_model: gemini-2.5-flash-lite, profile: gemini-2.5-flash-lite, input_price: 0.10, output_price: 0.40}
  - {id: fb/haiku, provider: anthropic, family: anthropic, kind: chat, upstream_model: claude-haiku-4-5, profile: claude, input_price: 1, output_price: 5, max_output_tokens: 64000}
  - {id: fb/split, provider: google, family: gemini, kind: chat, upstream_model: gemini-2.5-flash, profile: gemini-2.5-flash, input_price: 0.30, output_price: 2.50}
routes:
  - {model_id: fb/flash, kind: gemini-api}
  - {model_id: fb/lite, kind: gemini-api}
  - {model_id: fb/haiku, kind: anthropic}
  - {model_id: fb/split, kind: gemini-api, priority: 0}
  - {model_id: fb/split, kind: vertex, region: us-central1, priority: 10}
  - {model_id: fb/split, kind: vertex, region: europe-west4, priority: 20}
";

/// An OpenAI-compatible model on the simulator (chat, and the Responses API passed through):
/// both copy the client's unknown fields, and the simulator refuses them.
fn openai_catalog(sim: &Sim) -> String {
    format!(
        "models:\n\
         \x20 - {{id: fb/gpt, provider: acme, family: openai, kind: chat, upstream_model: gpt-5-mini, input_price: 1, output_price: 8}}\n\
         \x20 - {{id: fb/gpt-native, provider: acme, family: openai, kind: chat, upstream_model: gpt-5-mini, input_price: 1, output_price: 8}}\n\
         routes:\n\
         \x20 - {{model_id: fb/gpt, kind: openai, base_url: \"{url}/v1\"}}\n\
         \x20 - {{model_id: fb/gpt-native, kind: openai, base_url: \"{url}/v1\", api: responses}}\n",
        url = sim.url
    )
}

struct Env {
    sim: Sim,
    gw: Gateway,
    ws: String,
    key: String,
}

fn start() -> Env {
    start_with(|b| b)
}

/// [`start`] with more settings.
fn start_with(settings: impl FnOnce(GatewayBuilder) -> GatewayBuilder) -> Env {
    let sim = Sim::start();
    let mut gw = settings(Gateway::builder().simulator(&sim)).build();
    for (name, yaml) in [
        ("fb.yaml", CATALOG.to_owned()),
        ("gpt.yaml", openai_catalog(&sim)),
    ] {
        let file = gw.dir.path().join(name);
        std::fs::write(&file, yaml).unwrap();
        gw.cli(&["catalog", "import", file.to_str().unwrap()]);
    }
    gw.start();
    let (ws, key) = gw.workspace_with_key();
    Env { sim, gw, ws, key }
}

fn hello(model: &str, routing: Value) -> Value {
    let mut body = json!({"model": model, "messages": [{"role": "user", "content": "hi"}]});
    body.as_object_mut()
        .unwrap()
        .extend(routing.as_object().unwrap().clone());
    body
}

async fn post(env: &Env, path: &str, body: &Value) -> reqwest::Response {
    reqwest::Client::new()
        .post(env.gw.url(path))
        .bearer_auth(&env.key)
        .header("anthropic-version", "2023-06-01")
        .json(body)
        .send()
        .await
        .unwrap()
}

async fn answer(env: &Env, path: &str, body: &Value) -> (u16, Value) {
    let res = post(env, path, body).await;
    let status = res.status().as_u16();
    (status, res.json().await.unwrap())
}

/// The regions of the Vertex calls since `from`, and `gemini-api` for the Developer API's.
async fn routes_since(sim: &Sim, from: usize) -> Vec<String> {
    sim.requests().await[from..]
        .iter()
        .map(|r| {
            let path = r["path"].as_str().unwrap();
            match path.split("/locations/").nth(1) {
                Some(rest) => format!("vertex:{}", rest.split('/').next().unwrap()),
                None => "gemini-api".to_owned(),
            }
        })
        .collect()
}

/// A decimal amount (`"0.000012"`) in pico-USD.
fn pico(v: &Value) -> i128 {
    let s = v
        .as_str()
        .unwrap_or_else(|| panic!("an amount string: {v}"));
    let (whole, frac) = s.split_once('.').unwrap_or((s, ""));
    let negative = whole.starts_with('-');
    let whole: i128 = whole.trim_start_matches('-').parse().unwrap();
    let frac: i128 = format!("{frac:0<12}").parse().unwrap();
    let value = whole * 1_000_000_000_000 + frac;
    if negative {
        -value
    } else {
        value
    }
}

#[tokio::test]
async fn a_503_falls_back_to_the_next_model_billed_at_its_prices_on_every_door() {
    let env = start();
    let routing =
        json!({"models": ["fb/haiku"], "provider": {"only": ["gemini-api", "anthropic"]}});
    // The chat door, buffered: Gemini fails, Claude answers (another family, another adapter).
    env.sim.queue_fault("503", "gemini", 1).await;
    let from = env.sim.requests().await.len();
    let body = hello("fb/flash", routing.clone());
    let (status, chat) = answer(&env, "/v1/chat/completions", &body).await;
    assert_eq!(status, 200, "{chat}");
    assert_eq!(chat["model"], "fb/haiku", "the model that answered");
    assert_eq!(
        env.sim.routes_since(from).await,
        ["gemini.generate", "anthropic.messages"]
    );
    // Streamed: the same, before the first data frame.
    env.sim.queue_fault("503", "gemini", 1).await;
    let mut streamed = body.clone();
    streamed["stream"] = json!(true);
    let text = post(&env, "/v1/chat/completions", &streamed)
        .await
        .text()
        .await
        .unwrap();
    let frames = sse_data(&text);
    assert_eq!(frames.last().map(String::as_str), Some("[DONE]"), "{text}");
    let first: Value = serde_json::from_str(&frames[0]).unwrap();
    assert_eq!(first["model"], "fb/haiku", "{text}");
    // The Messages door: Gemini served the door's translation, Claude the client's body.
    env.sim.queue_fault("503", "gemini", 1).await;
    let from = env.sim.requests().await.len();
    let mut messages = body.clone();
    messages["max_tokens"] = json!(64);
    let (status, message) = answer(&env, "/v1/messages", &messages).await;
    assert_eq!(status, 200, "{message}");
    assert_eq!(
        (message["type"].as_str(), message["model"].as_str()),
        (Some("message"), Some("fb/haiku"))
    );
    let sent = env.sim.requests().await.pop().unwrap();
    assert_eq!(sent["route"], "anthropic.messages");
    assert_eq!(sent["body"]["model"], "claude-haiku-4-5");
    assert_eq!(env.sim.routes_since(from).await.len(), 2);
    // The Responses door.
    env.sim.queue_fault("503", "gemini", 1).await;
    let responses = json!({"model": "fb/flash", "input": "hi", "models": ["fb/haiku"],
        "provider": {"ignore": ["google-vertex"]}});
    let (status, response) = answer(&env, "/v1/responses", &responses).await;
    assert_eq!(status, 200, "{response}");
    assert_eq!(response["model"], "fb/haiku");
    assert_eq!(response["status"], "completed");

    // Four records, each at Claude Haiku's prices (1 and 5 USD per 1M: 1 and 5 micro-USD a
    // token), and the ledger debited exactly that.
    let records = env.gw.usage_records(&env.ws, 4).await;
    assert_eq!(records.len(), 4, "only the answering attempts are billed");
    let mut total = 0i128;
    for r in &records {
        assert_eq!(
            (r["model_id"].as_str(), r["route"].as_str()),
            (Some("fb/haiku"), Some("anthropic")),
            "{r}"
        );
        let cost = r["input_tokens"].as_i64().unwrap() as i128 * 1_000_000
            + r["output_tokens"].as_i64().unwrap() as i128 * 5_000_000;
        assert!(cost > 0);
        assert_eq!(
            pico(&r["cost"]),
            cost,
            "exact, at the served model's prices: {r}"
        );
        assert_eq!(r["attempts"], 2, "{r}");
        total += cost;
    }
    let ledger = env.gw.cli_json(&["ledger", "--workspace", &env.ws]);
    let debits: i128 = ledger["entries"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == "debit")
        .map(|e| pico(&e["amount"]))
        .sum();
    assert_eq!(debits, -total);
}

#[tokio::test]
async fn a_fallback_of_the_same_family_and_without_model_the_first_of_models() {
    let env = start();
    env.sim.queue_fault("429", "gemini", 1).await;
    let from = env.sim.requests().await.len();
    // OpenRouter's shape: no `model`, the first of `models` is the model.
    let body =
        json!({"models": ["fb/flash", "fb/lite"], "messages": [{"role": "user", "content": "hi"}]});
    let (status, chat) = answer(&env, "/v1/chat/completions", &body).await;
    assert_eq!(status, 200, "{chat}");
    assert_eq!(chat["model"], "fb/lite");
    let sent: Vec<Value> = env.sim.requests().await[from..].to_vec();
    let models: Vec<&str> = sent
        .iter()
        .map(|r| r["path"].as_str().unwrap().split("models/").nth(1).unwrap())
        .collect();
    assert_eq!(
        models,
        [
            "gemini-2.5-flash:generateContent?prettyPrint=false",
            "gemini-2.5-flash-lite:generateContent?prettyPrint=false"
        ]
    );
    let records = env.gw.usage_records(&env.ws, 1).await;
    assert_eq!(records[0]["model_id"], "fb/lite");
    assert_eq!(records[0]["input_price"], 0.1);
}

#[tokio::test]
async fn only_is_never_left_during_failover_and_ignore_is_never_used() {
    let env = start();
    // fb/split: gemini-api, then Vertex us-central1, then Vertex europe-west4. Only Vertex: when
    // both Vertex routes fail, the Developer API is not tried, nor is a fallback model that
    // has no Vertex route.
    env.sim.queue_fault("503", "vertex", 2).await;
    let from = env.sim.requests().await.len();
    let body = hello(
        "fb/split",
        json!({"models": ["fb/flash"], "provider": {"only": ["vertex"]}}),
    );
    let (status, error) = answer(&env, "/v1/chat/completions", &body).await;
    assert_eq!(status, 503, "{error}");
    assert_eq!(
        routes_since(&env.sim, from).await,
        ["vertex:us-central1", "vertex:europe-west4"]
    );
    // `ignore`: the best route ignored, the next serves.
    let from = env.sim.requests().await.len();
    let body = hello(
        "fb/split",
        json!({"provider": {"ignore": ["gemini-api", "vertex:us-central1"]}}),
    );
    let (status, chat) = answer(&env, "/v1/chat/completions", &body).await;
    assert_eq!(status, 200, "{chat}");
    assert_eq!(routes_since(&env.sim, from).await, ["vertex:europe-west4"]);
    // Nothing allowed: refused before any upstream call.
    let from = env.sim.requests().await.len();
    let body = hello("fb/flash", json!({"provider": {"only": ["google-vertex"]}}));
    let (status, error) = answer(&env, "/v1/chat/completions", &body).await;
    assert_eq!(
        (status, error["error"]["code"].as_str()),
        (400, Some("no_allowed_route"))
    );
    assert!(routes_since(&env.sim, from).await.is_empty());
    let records = env.gw.usage_records(&env.ws, 1).await;
    assert_eq!(records.len(), 1, "the failed request billed nothing");
}

#[tokio::test]
async fn order_ranks_routes_and_without_fallbacks_bounds_them() {
    // Routes fail here on purpose, more than a breaker lets a route be chosen first.
    let env = start_with(|b| b.upstream("breaker: {failures: 100}"));
    // `order`: europe-west4, then the Developer API, then the rest.
    env.sim.queue_fault("503", "any", 2).await;
    let from = env.sim.requests().await.len();
    let order = json!({"provider": {"order": ["vertex:europe-west4", "gemini-api"]}});
    let (status, chat) = answer(&env, "/v1/chat/completions", &hello("fb/split", order)).await;
    assert_eq!(status, 200, "{chat}");
    assert_eq!(
        routes_since(&env.sim, from).await,
        ["vertex:europe-west4", "gemini-api", "vertex:us-central1"]
    );
    // `allow_fallbacks: false` without `order`: the first route only.
    env.sim.queue_fault("503", "gemini", 1).await;
    let from = env.sim.requests().await.len();
    let off = json!({"provider": {"allow_fallbacks": false}});
    let (status, _) = answer(&env, "/v1/chat/completions", &hello("fb/split", off)).await;
    assert_eq!(status, 503);
    assert_eq!(routes_since(&env.sim, from).await, ["gemini-api"]);
    // With `order`: the routes it names, in its order, and no other.
    env.sim.queue_fault("503", "any", 2).await;
    let from = env.sim.requests().await.len();
    let named = json!({"provider": {"allow_fallbacks": false, "order": ["vertex:europe-west4", "gemini-api"]}});
    let (status, _) = answer(&env, "/v1/chat/completions", &hello("fb/split", named)).await;
    assert_eq!(status, 503);
    assert_eq!(
        routes_since(&env.sim, from).await,
        ["vertex:europe-west4", "gemini-api"]
    );
    // Fallback models are still tried (OpenRouter's `allow_fallbacks` is about providers), each
    // on its first route.
    env.sim.queue_fault("503", "gemini", 1).await;
    let from = env.sim.requests().await.len();
    let with_models = json!({"models": ["fb/haiku"], "provider": {"allow_fallbacks": false}});
    let (status, chat) = answer(
        &env,
        "/v1/chat/completions",
        &hello("fb/split", with_models),
    )
    .await;
    assert_eq!((status, chat["model"].as_str()), (200, Some("fb/haiku")));
    assert_eq!(
        env.sim.routes_since(from).await,
        ["gemini.generate", "anthropic.messages"]
    );
}

#[tokio::test]
async fn max_price_refuses_before_any_upstream_call_or_leaves_a_dear_model_out() {
    let env = start();
    let from = env.sim.requests().await.len();
    // fb/haiku: 1 / 5 USD per 1M tokens.
    let dear = json!({"provider": {"max_price": {"prompt": 0.5, "completion": 5}}});
    let (status, error) = answer(&env, "/v1/chat/completions", &hello("fb/haiku", dear)).await;
    assert_eq!(status, 400, "{error}");
    assert_eq!(error["error"]["code"], "no_route_within_price");
    assert_eq!(error["error"]["type"], "invalid_request_error");
    let mut messages = hello(
        "fb/haiku",
        json!({"provider": {"max_price": {"prompt": "0.999999"}}}),
    );
    messages["max_tokens"] = json!(64);
    let (status, error) = answer(&env, "/v1/messages", &messages).await;
    assert_eq!(
        (status, error["error"]["type"].as_str()),
        (400, Some("invalid_request_error"))
    );
    assert_eq!(error["error"]["code"], "no_route_within_price");
    assert!(
        env.sim.requests().await[from..].is_empty(),
        "the simulator saw nothing"
    );
    // A cheap fallback within the price serves; the dear model is never called.
    let cheap = json!({"models": ["fb/lite"], "provider": {"max_price": {"prompt": 0.1, "completion": 0.4}}});
    let (status, chat) = answer(&env, "/v1/chat/completions", &hello("fb/haiku", cheap)).await;
    assert_eq!(
        (status, chat["model"].as_str()),
        (200, Some("fb/lite")),
        "{chat}"
    );
    assert_eq!(env.sim.routes_since(from).await, ["gemini.generate"]);
    let records = env.gw.usage_records(&env.ws, 1).await;
    assert_eq!(
        (records.len(), records[0]["model_id"].as_str()),
        (1, Some("fb/lite"))
    );
}

#[tokio::test]
async fn the_routing_fields_never_reach_an_upstream_that_copies_unknown_fields() {
    let env = start();
    let routing = json!({"models": ["fb/flash"], "provider": {"only": ["openai", "gemini-api"], "sort": "price"}});
    let (status, chat) = answer(
        &env,
        "/v1/chat/completions",
        &hello("fb/gpt", routing.clone()),
    )
    .await;
    assert_eq!(
        (status, chat["model"].as_str()),
        (200, Some("fb/gpt")),
        "{chat}"
    );
    let sent = env.sim.requests().await.pop().unwrap();
    assert_eq!(sent["route"], "openai.chat");
    assert!(sent["body"].get("models").is_none() && sent["body"].get("provider").is_none());
    // The Responses door passing its body through to the Responses API.
    let body = json!({"model": "fb/gpt-native", "input": "hi", "models": ["fb/gpt"],
        "provider": {"only": ["openai"]}});
    let (status, response) = answer(&env, "/v1/responses", &body).await;
    assert_eq!(
        (status, response["model"].as_str()),
        (200, Some("fb/gpt-native")),
        "{response}"
    );
    let sent = env.sim.requests().await.pop().unwrap();
    assert_eq!(sent["route"], "openai.responses");
    assert!(sent["body"].get("models").is_none() && sent["body"].get("provider").is_none());
    // Claude's pass-through on the Messages door.
    let mut messages = hello(
        "fb/haiku",
        json!({"models": ["fb/flash"], "provider": {"ignore": ["vertex"]}}),
    );
    messages["max_tokens"] = json!(64);
    let (status, message) = answer(&env, "/v1/messages", &messages).await;
    assert_eq!(
        (status, message["model"].as_str()),
        (200, Some("fb/haiku")),
        "{message}"
    );
    // Bounded: a list past eight fallbacks is the client's error.
    let many: Vec<String> = (0..9).map(|_| "fb/lite".to_owned()).collect();
    let (status, error) = answer(
        &env,
        "/v1/chat/completions",
        &hello("fb/flash", json!({"models": many})),
    )
    .await;
    assert_eq!(status, 400, "{error}");
    let (status, error) = answer(
        &env,
        "/v1/chat/completions",
        &hello("fb/flash", json!({"models": ["fb/nope"]})),
    )
    .await;
    assert_eq!(
        (status, error["error"]["code"].as_str()),
        (400, Some("model_not_found"))
    );
}
