//! Adaptive thinking end to end: Claude models whose profile is `kind: effort` get
//! `thinking: {type: adaptive, display}` and a top-level `output_config.effort`, never a
//! budget, on the Messages API and on Vertex; the client gets the summarized thinking as
//! `reasoning` when it asked for it, and nothing when the text is omitted. The simulator
//! validates per model generation, so a budget profile on an adaptive-only model fails with
//! the upstream 400 — what a wrong catalog mapping would do in production.
//!
//! Own profiles and models (not the default catalog's, which its owners change apart).

use serde_json::{json, Value};

use crate::harness::{chunks, Gateway, Sim, SimEnv};

const CATALOG: &str = "profiles:
  - name: test-effort
    spec: {forward: [max_tokens, stop, reasoning],
           thinking: {kind: effort, levels: [low, medium, high, xhigh, max]}, min_cache_tokens: 4096}
  - name: test-effort-off
    spec: {forward: [max_tokens, stop, reasoning],
           thinking: {kind: effort, levels: [low, medium, high, xhigh, max], can_disable: true}}
  - name: test-budget
    spec: {forward: [max_tokens, stop, reasoning],
           thinking: {kind: budget, min: 1024, max: 63999, can_disable: true}}
models:
  - {id: test/claude-opus-5-5, provider: anthropic, family: anthropic, kind: chat, upstream_model: claude-opus-5-5,
     profile: test-effort, input_price: 5, output_price: 25, max_output_tokens: 64000}
  - {id: test-vertex/claude-opus-5-5, provider: anthropic, family: anthropic, kind: chat, upstream_model: claude-opus-5-5,
     profile: test-effort, input_price: 5, output_price: 25, max_output_tokens: 64000}
  - {id: test/claude-sonnet-5, provider: anthropic, family: anthropic, kind: chat, upstream_model: claude-sonnet-5,
     profile: test-effort-off, input_price: 3, output_price: 15, max_output_tokens: 64000}
  - {id: test/budget-on-opus-5-5, provider: anthropic, family: anthropic, kind: chat, upstream_model: claude-opus-5-5,
     profile: test-budget, input_price: 5, output_price: 25, max_output_tokens: 64000}
  - {id: test/effort-on-haiku-4-5, provider: anthropic, family: anthropic, kind: chat, upstream_model: claude-haiku-4-5,
     profile: test-effort, input_price: 1, output_price: 5, max_output_tokens: 64000}
routes:
  - {model_id: test/claude-opus-5-5, kind: anthropic}
  - {model_id: test-vertex/claude-opus-5-5, kind: vertex-anthropic, region: us-east5}
  - {model_id: test/claude-sonnet-5, kind: anthropic}
  - {model_id: test/budget-on-opus-5-5, kind: anthropic}
  - {model_id: test/effort-on-haiku-4-5, kind: anthropic}
";

/// The same adaptive-only model on both surfaces.
const OPUS: [&str; 2] = ["test/claude-opus-5-5", "test-vertex/claude-opus-5-5"];

/// A simulator and a gateway with this file's catalog imported before it starts.
fn env() -> SimEnv {
    let sim = Sim::start();
    let mut gw = Gateway::builder().simulator(&sim).build();
    let file = gw.dir.path().join("adaptive-catalog.yaml");
    std::fs::write(&file, CATALOG).unwrap();
    gw.cli(&["catalog", "import", file.to_str().unwrap()]);
    gw.start();
    let (ws, key) = gw.workspace_with_key();
    SimEnv { sim, gw, ws, key }
}

fn ask(model: &str, text: &str, extra: Value) -> Value {
    let mut body = json!({"model": model, "messages": [{"role": "user", "content": text}]});
    for (k, v) in extra.as_object().unwrap() {
        body[k] = v.clone();
    }
    body
}

fn joined(c: &[Value], field: &str) -> String {
    c.iter()
        .filter_map(|x| x["choices"][0]["delta"][field].as_str())
        .collect()
}

impl SimEnv {
    /// The last upstream body, after checking it went to `model`'s surface.
    async fn sent(&self, model: &str) -> Value {
        let r = self.last_upstream().await;
        let path = r["path"].as_str().unwrap();
        if model.starts_with("test-vertex/") {
            assert!(
                path.contains("/locations/us-east5/publishers/anthropic/models/claude-opus-5-5:"),
                "{path}"
            );
        } else {
            assert_eq!(path, "/v1/messages");
        }
        let body = r["body"].clone();
        let thinking = &body["thinking"];
        assert!(thinking.get("budget_tokens").is_none(), "{body}");
        assert!(
            thinking.get("effort").is_none(),
            "effort is top-level: {body}"
        );
        body
    }
}

#[tokio::test]
async fn effort_and_summarized_thinking_on_both_surfaces() {
    let e = env();
    for model in OPUS {
        let (status, v) = e
            .chat(ask(
                model,
                "hello opus",
                json!({"reasoning": {"effort": "high"}, "max_tokens": 900}),
            ))
            .await;
        assert_eq!(status, 200, "{model}: {v}");
        let m = &v["choices"][0]["message"];
        assert_eq!(m["content"], "Echo: hello opus");
        assert_eq!(m["reasoning"], "Thinking: hello opus", "{model}");
        let body = e.sent(model).await;
        assert_eq!(
            body["thinking"],
            json!({"type": "adaptive", "display": "summarized"})
        );
        assert_eq!(body["output_config"], json!({"effort": "high"}));
        assert_eq!(body["max_tokens"], 900, "not raised for a budget");

        let mut req = ask(model, "stream opus", json!({"reasoning_effort": "xhigh"}));
        req["stream"] = json!(true);
        let (status, frames) = e.stream(req).await;
        assert_eq!(status, 200);
        let c = chunks(&frames);
        assert_eq!(c[0]["choices"][0]["delta"]["role"], "assistant");
        assert_eq!(joined(&c, "reasoning"), "Thinking: stream opus", "{model}");
        assert_eq!(joined(&c, "content"), "Echo: stream opus");
        let body = e.sent(model).await;
        assert_eq!(body["output_config"], json!({"effort": "xhigh"}));
        assert_eq!(body["stream"], true);
        // Thinking is billed as output.
        let usage = &c.last().unwrap()["usage"];
        assert!(
            usage["completion_tokens"].as_u64().unwrap() > "Echo: stream opus".len() as u64 / 4,
            "{usage}"
        );
    }
}

#[tokio::test]
async fn efforts_and_budgets_become_levels() {
    let e = env();
    for (extra, effort) in [
        (json!({"reasoning_effort": "minimal"}), json!("low")),
        (json!({"reasoning_effort": "medium"}), json!("medium")),
        (json!({"reasoning": {"max_tokens": 5000}}), json!("medium")),
        (json!({"reasoning": {"max_tokens": 30000}}), json!("high")),
        (json!({"reasoning_effort": "none"}), json!("low")),
        (json!({"reasoning": {"enabled": true}}), Value::Null),
    ] {
        let (status, v) = e.chat(ask(OPUS[0], "levels", extra.clone())).await;
        assert_eq!(status, 200, "{extra}: {v}");
        let body = e.sent(OPUS[0]).await;
        assert_eq!(body["thinking"]["type"], "adaptive", "{extra}");
        assert_eq!(body["output_config"]["effort"], effort, "{extra}");
    }
    // Where the model can stop thinking, `none` stops it: no thinking block, no reasoning.
    let (status, v) = e
        .chat(ask(
            "test/claude-sonnet-5",
            "quiet",
            json!({"reasoning_effort": "none"}),
        ))
        .await;
    assert_eq!(status, 200, "{v}");
    assert!(v["choices"][0]["message"].get("reasoning").is_none(), "{v}");
    let body = e.last_upstream().await["body"].clone();
    assert_eq!(body["thinking"], json!({"type": "disabled"}));
    assert!(body.get("output_config").is_none(), "{body}");
}

#[tokio::test]
async fn omitted_or_unasked_thinking_gives_no_reasoning() {
    let e = env();
    for model in OPUS {
        for stream in [false, true] {
            for (extra, thinking, output_config) in [
                (
                    json!({"reasoning": {"effort": "low", "exclude": true}}),
                    json!({"type": "adaptive", "display": "omitted"}),
                    json!({"effort": "low"}),
                ),
                // No reasoning field: nothing sent, the model thinks by default, text omitted.
                (json!({}), Value::Null, Value::Null),
            ] {
                let mut req = ask(model, "say little", extra.clone());
                if stream {
                    req["stream"] = json!(true);
                    let (status, frames) = e.stream(req).await;
                    assert_eq!(status, 200);
                    let c = chunks(&frames);
                    assert_eq!(joined(&c, "reasoning"), "", "{model} {extra}");
                    assert!(
                        c.iter()
                            .all(|x| x["choices"][0]["delta"].get("reasoning").is_none()),
                        "no empty reasoning frames: {c:?}"
                    );
                    assert_eq!(c[0]["choices"][0]["delta"]["role"], "assistant");
                    assert_eq!(joined(&c, "content"), "Echo: say little");
                } else {
                    let (status, v) = e.chat(req).await;
                    assert_eq!(status, 200, "{v}");
                    let m = &v["choices"][0]["message"];
                    assert!(m.get("reasoning").is_none(), "{model} {extra}: {m}");
                    assert_eq!(m["content"], "Echo: say little");
                    // The omitted thinking is still billed upstream and here.
                    let thought = "Thinking: say little".len().div_ceil(4) as u64;
                    let echo = "Echo: say little".len().div_ceil(4) as u64;
                    assert_eq!(v["usage"]["completion_tokens"], thought + echo);
                }
                let body = e.sent(model).await;
                assert_eq!(body["thinking"], thinking, "{model} {extra}");
                assert_eq!(body["output_config"], output_config, "{model} {extra}");
            }
        }
    }
}

#[tokio::test]
async fn the_simulator_refuses_a_wrong_mapping() {
    let e = env();
    // A budget profile on an adaptive-only model: the budget goes out and Anthropic's 400
    // comes back.
    let (status, v) = e
        .chat(ask(
            "test/budget-on-opus-5-5",
            "budget",
            json!({"reasoning_effort": "high"}),
        ))
        .await;
    assert_eq!(status, 400, "{v}");
    let message = v["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("budget_tokens is not supported on this model"),
        "{message}"
    );
    let body = e.last_upstream().await["body"].clone();
    assert_eq!(body["thinking"]["type"], "enabled");
    assert!(body.get("output_config").is_none(), "{body}");
    // An effort profile on a budget-only model: no effort there.
    let (status, v) = e
        .chat(ask(
            "test/effort-on-haiku-4-5",
            "effort",
            json!({"reasoning_effort": "high"}),
        ))
        .await;
    assert_eq!(status, 400, "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("not supported on this model"),
        "{v}"
    );
}
