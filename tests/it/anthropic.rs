//! Family B end to end: the real gateway against `tollgate-sim`, on the Messages API and on
//! Vertex (`rawPredict` / `streamRawPredict`), asserting what the client gets, what reached
//! upstream, and what was billed.

use serde_json::{json, Value};

use crate::billing::{pico, records};
use crate::harness::{chunks, SimEnv};

/// The same model on both routes: direct (catalog default) and pinned to Vertex.
const MODELS: [&str; 2] = ["anthropic/claude-haiku-4-5", "vertex/claude-haiku-4-5"];

async fn env() -> SimEnv {
    SimEnv::start()
}

fn user(model: &str, text: &str) -> Value {
    json!({"model": model, "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": text}]})
}

fn vertex(model: &str) -> bool {
    model.starts_with("vertex/")
}

impl SimEnv {
    /// Asserts transport details of the last upstream request and returns its body.
    async fn check_upstream(&self, model: &str, stream: bool) -> Value {
        let r = self.last_upstream().await;
        if vertex(model) {
            let method = if stream {
                "streamRawPredict"
            } else {
                "rawPredict"
            };
            assert_eq!(
                r["path"],
                format!("/v1/projects/tollgate-test/locations/us-east5/publishers/anthropic/models/claude-haiku-4-5@20251001:{method}")
            );
            assert!(r["headers"]["authorization"]
                .as_str()
                .unwrap()
                .starts_with("Bearer "));
            assert!(r["headers"].get("x-api-key").is_none());
            assert_eq!(r["body"]["anthropic_version"], "vertex-2023-10-16");
            assert!(r["body"].get("model").is_none());
        } else {
            assert_eq!(r["path"], "/v1/messages");
            assert_eq!(r["headers"]["x-api-key"], "sim-anthropic-key");
            assert!(r["headers"]["anthropic-version"].is_string());
            assert!(
                r["headers"].get("authorization").is_none(),
                "the client's key must not travel"
            );
            assert_eq!(r["body"]["model"], "claude-haiku-4-5");
        }
        r["body"].clone()
    }
}

fn joined(c: &[Value], field: &str) -> String {
    c.iter()
        .filter_map(|x| x["choices"][0]["delta"][field].as_str())
        .collect()
}

#[tokio::test]
async fn buffered_on_both_routes() {
    let e = env().await;
    for model in MODELS {
        let (status, v) = e.chat(user(model, "hello claude")).await;
        assert_eq!(status, 200, "{v}");
        assert_eq!(v["object"], "chat.completion");
        assert_eq!(v["model"], model);
        assert_eq!(v["choices"][0]["message"]["role"], "assistant");
        assert_eq!(v["choices"][0]["message"]["content"], "Echo: hello claude");
        assert!(v["choices"][0]["message"].get("reasoning").is_none());
        assert_eq!(v["choices"][0]["finish_reason"], "stop");
        let u = &v["usage"];
        assert!(u["prompt_tokens"].as_u64().unwrap() > 0);
        assert_eq!(
            u["total_tokens"],
            u["prompt_tokens"].as_u64().unwrap() + u["completion_tokens"].as_u64().unwrap()
        );
        let body = e.check_upstream(model, false).await;
        assert_eq!(
            body["system"],
            json!([{"type": "text", "text": "Be brief."}])
        );
        assert_eq!(
            body["messages"],
            json!([{"role": "user", "content": [{"type": "text", "text": "hello claude"}]}])
        );
        assert_eq!(body["max_tokens"], 64000, "the catalog's output cap");
        assert!(body.get("stream").is_none());
    }
}

#[tokio::test]
async fn streamed_on_both_routes() {
    let e = env().await;
    for model in MODELS {
        let mut req = user(model, "stream me please");
        req["stream"] = json!(true);
        let (status, frames) = e.stream(req).await;
        assert_eq!(status, 200);
        let c = chunks(&frames);
        assert_eq!(c[0]["choices"][0]["delta"]["role"], "assistant");
        assert_eq!(joined(&c, "content"), "Echo: stream me please");
        let finish: Vec<&Value> = c
            .iter()
            .filter(|x| x["choices"] != json!([]) && !x["choices"][0]["finish_reason"].is_null())
            .collect();
        assert_eq!(finish.len(), 1);
        assert_eq!(finish[0]["choices"][0]["finish_reason"], "stop");
        let last = c.last().unwrap();
        assert_eq!(last["choices"], json!([]));
        assert!(last["usage"]["prompt_tokens"].as_u64().unwrap() > 0);
        assert!(last["usage"]["completion_tokens"].as_u64().unwrap() > 0);
        let body = e.check_upstream(model, true).await;
        assert_eq!(body["stream"], true);
    }
}

#[tokio::test]
async fn thinking_on_both_routes() {
    let e = env().await;
    for model in MODELS {
        let mut req = user(model, "think first");
        req["reasoning"] = json!({"max_tokens": 2000});
        req["max_tokens"] = json!(1500);
        req["temperature"] = json!(0.4);
        let (status, v) = e.chat(req.clone()).await;
        assert_eq!(status, 200, "{v}");
        let m = &v["choices"][0]["message"];
        assert!(!m["reasoning"].as_str().unwrap().is_empty(), "{v}");
        assert_eq!(m["content"], "Echo: think first");
        let body = e.check_upstream(model, false).await;
        assert_eq!(
            body["thinking"],
            json!({"type": "enabled", "budget_tokens": 2000})
        );
        assert_eq!(body["max_tokens"], 2001, "raised above the budget");
        assert!(
            body.get("temperature").is_none(),
            "not allowed with thinking"
        );

        req["stream"] = json!(true);
        let (status, frames) = e.stream(req.clone()).await;
        assert_eq!(status, 200);
        let c = chunks(&frames);
        assert!(!joined(&c, "reasoning").is_empty());
        assert_eq!(joined(&c, "content"), "Echo: think first");

        req["reasoning"] = json!({"max_tokens": 2000, "exclude": true});
        let (_, frames) = e.stream(req).await;
        let c = chunks(&frames);
        assert_eq!(joined(&c, "reasoning"), "", "excluded");
        assert_eq!(joined(&c, "content"), "Echo: think first");
    }
}

#[tokio::test]
async fn cache_write_then_read_is_billed_exactly() {
    let e = env().await;
    // Sonnet 4.5 caches prefixes of 1024 tokens and more; the simulator counts 4 bytes a token.
    // Haiku 4.5 caches prefixes of 4,096 tokens or more.
    let doc = "The quick brown fox jumps over the lazy dog. ".repeat(400);
    let mut ids = Vec::new();
    for (n, model) in MODELS.iter().enumerate() {
        let req = |q: &str, stream: bool| {
            json!({"model": model, "stream": stream, "messages": [
                {"role": "system", "content": [{"type": "text", "text": format!("{model} {doc}"),
                                                "cache_control": {"type": "ephemeral", "ttl": "5m"}}]},
                {"role": "user", "content": q}]})
        };
        let (status, first) = e.chat(req("first question", false)).await;
        assert_eq!(status, 200, "{first}");
        let body = e.check_upstream(model, false).await;
        assert_eq!(
            body["system"][0]["cache_control"],
            json!({"type": "ephemeral", "ttl": "5m"})
        );
        let u = &first["usage"];
        let written = u["prompt_tokens_details"]["cache_write_tokens"]
            .as_u64()
            .unwrap();
        assert!(written >= 1024, "{u}");
        assert_eq!(u["prompt_tokens_details"]["cached_tokens"], 0);

        let (status, frames) = e.stream(req("second question", true)).await;
        assert_eq!(status, 200);
        let c = chunks(&frames);
        let u2 = &c.last().unwrap()["usage"];
        assert_eq!(
            u2["prompt_tokens_details"]["cached_tokens"], written,
            "{u2}"
        );
        assert_eq!(u2["prompt_tokens_details"]["cache_write_tokens"], 0);
        assert!(u2["prompt_tokens"].as_u64().unwrap() > written);
        ids.push((first["id"].as_str().unwrap().to_owned(), u.clone()));
        ids.push((c[0]["id"].as_str().unwrap().to_owned(), u2.clone()));

        let recs = records(&e.gw, &e.ws, 2 * (n + 1)).await;
        for (id, usage) in &ids {
            let r = recs.iter().find(|r| r["id"] == id.as_str()).unwrap();
            let input = r["input_tokens"].as_i64().unwrap() as i128;
            let read = r["cache_read_tokens"].as_i64().unwrap() as i128;
            let write = r["cache_write_tokens"].as_i64().unwrap() as i128;
            let output = r["output_tokens"].as_i64().unwrap() as i128;
            assert_eq!(read as u64, usage["prompt_tokens_details"]["cached_tokens"]);
            assert_eq!(
                write as u64,
                usage["prompt_tokens_details"]["cache_write_tokens"]
            );
            assert_eq!((input + read + write) as u64, usage["prompt_tokens"]);
            assert_eq!(output as u64, usage["completion_tokens"]);
            // claude-haiku-4-5: 1 input, 0.10 cache read, 1.25 cache write, 5 output (USD/1M).
            let expected =
                input * 1_000_000 + read * 100_000 + write * 1_250_000 + output * 5_000_000;
            assert_eq!(pico(&r["cost"]), expected, "exact cost: {r}");
            assert_eq!(r["outcome"], "complete");
        }
    }
}

#[tokio::test]
async fn one_hour_cache_writes_are_billed_at_their_own_price() {
    let e = env().await;
    let doc = "An hour is a long time for a cache. ".repeat(500);
    let req = |ttl: &str| {
        json!({"model": "anthropic/claude-haiku-4-5", "messages": [
            {"role": "system", "content": [{"type": "text", "text": format!("{ttl} {doc}"),
                                            "cache_control": {"type": "ephemeral", "ttl": ttl}}]},
            {"role": "user", "content": "hello"}]})
    };
    let mut ids = Vec::new();
    for ttl in ["1h", "5m"] {
        let (status, v) = e.chat(req(ttl)).await;
        assert_eq!(status, 200, "{v}");
        let written = v["usage"]["prompt_tokens_details"]["cache_write_tokens"]
            .as_u64()
            .unwrap();
        assert!(written >= 1024, "{v}");
        ids.push((v["id"].as_str().unwrap().to_owned(), ttl, written));
    }
    let recs = records(&e.gw, &e.ws, 2).await;
    for (id, ttl, written) in ids {
        let r = recs.iter().find(|r| r["id"] == id.as_str()).unwrap();
        let n = |k: &str| r[k].as_i64().unwrap() as i128;
        let (five, hour) = if ttl == "1h" {
            (0, written)
        } else {
            (written, 0)
        };
        assert_eq!(r["cache_write_tokens"], five, "{r}");
        assert_eq!(r["cache_write_1h_tokens"], hour, "{r}");
        // claude-haiku-4-5: 1 in, 1.25 5-minute writes, 2 1-hour writes, 5 out (USD/1M).
        let expected = n("input_tokens") * 1_000_000
            + n("cache_write_tokens") * 1_250_000
            + n("cache_write_1h_tokens") * 2_000_000
            + n("output_tokens") * 5_000_000;
        assert_eq!(pico(&r["cost"]), expected, "{ttl}: {r}");
    }
}

#[tokio::test]
async fn tools_are_refused_before_anything_is_sent() {
    let e = env().await;
    for model in MODELS {
        for (extra, param) in [
            (
                json!({"tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]}),
                "tools",
            ),
            (json!({"tool_choice": "auto"}), "tool_choice"),
        ] {
            let mut req = user(model, "call a tool");
            for (k, v) in extra.as_object().unwrap() {
                req[k] = v.clone();
            }
            let (status, v) = e.chat(req).await;
            assert_eq!(status, 400, "{v}");
            assert_eq!(v["error"]["code"], "unsupported_parameter");
            assert_eq!(v["error"]["type"], "invalid_request_error");
            assert!(
                v["error"]["message"]
                    .as_str()
                    .unwrap()
                    .starts_with(&format!("{param} is not supported by model")),
                "{v}"
            );
        }
        let history = json!({"model": model, "messages": [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": null, "tool_calls": [{"id": "call_x_0.CiIB+/9a8w==", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "call_x_0.CiIB+/9a8w==", "content": "ok"}]});
        let (status, v) = e.chat(history).await;
        assert_eq!(status, 400, "{v}");
        assert_eq!(v["error"]["code"], "unsupported_parameter");
    }
    assert_eq!(
        e.sim.requests().await,
        Vec::<Value>::new(),
        "nothing upstream"
    );
}

#[tokio::test]
async fn dropped_parameters_never_reach_upstream() {
    let e = env().await;
    for model in MODELS {
        let mut req = user(model, "parameters");
        for (k, v) in [
            ("temperature", json!(0.7)),
            ("top_k", json!(20)),
            ("stop", json!(["ZZZ"])),
            ("max_tokens", json!(300)),
            ("frequency_penalty", json!(0.5)),
            ("presence_penalty", json!(0.5)),
            ("seed", json!(1)),
            ("top_a", json!(0.2)),
            ("min_p", json!(0.1)),
            ("repetition_penalty", json!(1.1)),
            ("logit_bias", json!({"50256": -100})),
            ("logprobs", json!(true)),
            ("verbosity", json!("low")),
            ("user", json!("someone")),
            ("service_tier", json!("priority")),
            ("stream_options", json!({"include_usage": true})),
        ] {
            req[k] = v;
        }
        let (status, v) = e.chat(req).await;
        assert_eq!(status, 200, "{v}");
        let body = e.check_upstream(model, false).await;
        let mut keys: Vec<&str> = body
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .filter(|k| !["model", "anthropic_version"].contains(k))
            .collect();
        keys.sort_unstable();
        assert_eq!(
            keys,
            [
                "max_tokens",
                "messages",
                "stop_sequences",
                "system",
                "temperature",
                "top_k"
            ]
        );
        assert_eq!(body["temperature"], 0.7, "the client's value, as sent");
        assert_eq!(body["stop_sequences"], json!(["ZZZ"]));
        assert_eq!(body["max_tokens"], 300);
    }
}

#[tokio::test]
async fn upstream_429_and_529_pass_through() {
    let e = env().await;
    for model in MODELS {
        for status in [429u16, 529] {
            let (got, v) = e
                .chat(user(model, &format!("[sim:fault={status}] hello")))
                .await;
            assert_eq!(got, status, "{model}: {v}");
            assert_eq!(v["error"]["code"], "upstream_error", "{v}");
            let message = v["error"]["message"].as_str().unwrap();
            assert!(
                message.starts_with(&format!("upstream answered HTTP {status}: ")),
                "{message}"
            );
        }
    }
}

#[tokio::test]
async fn mid_stream_error_event_ends_the_stream() {
    let e = env().await;
    for model in MODELS {
        let mut req = user(model, "[sim:fault=error-event] tell me more");
        req["stream"] = json!(true);
        let (status, frames) = e.stream(req).await;
        assert_eq!(status, 200);
        let c = chunks(&frames);
        let last = c.last().unwrap();
        assert_eq!(last["error"]["code"], "upstream_error", "{frames:?}");
        assert_eq!(
            last["error"]["message"], "Overloaded (overloaded_error)",
            "{frames:?}"
        );
        assert!(
            c.iter().all(|x| x["choices"] != json!([])),
            "no usage chunk after an error"
        );
    }
}
