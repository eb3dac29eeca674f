//! Family A end to end: the real gateway against `tollgate-sim`, on the Developer API and on
//! Vertex (regional and global), asserting what the client gets and what reached upstream.

use serde_json::{json, Value};

use crate::harness::{chunks, Gateway, Sim, SimEnv};

async fn env() -> SimEnv {
    SimEnv::start()
}

fn user(text: &str) -> Value {
    json!([{"role": "system", "content": "Be brief."}, {"role": "user", "content": text}])
}

#[tokio::test]
async fn developer_api_buffered() {
    let e = env().await;
    let (status, v) = e
        .chat(json!({"model": "google/gemini-2.5-flash-lite", "messages": user("hello gemini")}))
        .await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["object"], "chat.completion");
    assert_eq!(v["model"], "google/gemini-2.5-flash-lite");
    assert_eq!(v["choices"][0]["message"]["role"], "assistant");
    assert_eq!(v["choices"][0]["message"]["content"], "Echo: hello gemini");
    assert_eq!(v["choices"][0]["finish_reason"], "stop");
    let u = &v["usage"];
    assert_eq!(
        u["total_tokens"],
        u["prompt_tokens"].as_u64().unwrap() + u["completion_tokens"].as_u64().unwrap()
    );
    assert!(u["completion_tokens_details"]["reasoning_tokens"].is_u64());
    assert!(u["prompt_tokens_details"]["cached_tokens"].is_u64());

    let r = e.last_upstream().await;
    assert_eq!(
        r["path"],
        "/v1beta/models/gemini-2.5-flash-lite:generateContent?prettyPrint=false"
    );
    assert_eq!(r["headers"]["x-goog-api-key"], "sim-gemini-key");
    assert!(
        r["headers"].get("authorization").is_none(),
        "the client's key must not travel"
    );
    assert_eq!(
        r["body"]["systemInstruction"]["parts"][0]["text"],
        "Be brief."
    );
    assert_eq!(
        r["body"]["contents"],
        json!([{"role": "user", "parts": [{"text": "hello gemini"}]}])
    );
}

#[tokio::test]
async fn developer_api_streamed() {
    let e = env().await;
    let (status, frames) = e.stream(json!({"model": "google/gemini-2.5-flash-lite", "stream": true, "messages": user("stream me please")})).await;
    assert_eq!(status, 200);
    let c = chunks(&frames);
    assert_eq!(
        c[0]["choices"][0]["delta"]["role"], "assistant",
        "the first delta carries the role"
    );
    let text: String = c
        .iter()
        .filter_map(|x| x["choices"][0]["delta"]["content"].as_str())
        .collect();
    assert_eq!(text, "Echo: stream me please");
    let finish: Vec<&Value> = c
        .iter()
        .filter(|x| !x["choices"][0]["finish_reason"].is_null() && x["choices"] != json!([]))
        .collect();
    assert_eq!(finish.len(), 1);
    assert_eq!(finish[0]["choices"][0]["finish_reason"], "stop");
    let last = c.last().unwrap();
    assert_eq!(last["choices"], json!([]));
    assert!(last["usage"]["total_tokens"].as_u64().unwrap() > 0);
    assert_eq!(
        e.last_upstream().await["path"],
        "/v1beta/models/gemini-2.5-flash-lite:streamGenerateContent?alt=sse"
    );
}

#[tokio::test]
async fn an_upstream_at_an_ipv6_address_is_called() {
    // The gateway once wrote such a base URL's origin without its brackets (`::1:PORT`),
    // which no URI parses: every call failed to connect.
    let sim = Sim::start_with(&["--listen", "[::1]:0"]);
    assert!(sim.url.starts_with("http://[::1]:"), "{}", sim.url);
    let gw = Gateway::builder().simulator(&sim).start();
    let (ws, key) = gw.workspace_with_key();
    let e = SimEnv { sim, gw, ws, key };
    let (status, v) = e
        .chat(json!({"model": "google/gemini-2.5-flash", "messages": user("hello over v6")}))
        .await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["choices"][0]["message"]["content"], "Echo: hello over v6");
    let (status, frames) = e.stream(json!({"model": "google/gemini-2.5-flash", "stream": true, "messages": user("v6 stream")})).await;
    assert_eq!(status, 200);
    let text: String = chunks(&frames)
        .iter()
        .filter_map(|x| x["choices"][0]["delta"]["content"].as_str())
        .collect();
    assert_eq!(text, "Echo: v6 stream");
}

#[tokio::test]
async fn vertex_regional_buffered_and_streamed() {
    let e = env().await;
    let (status, v) = e
        .chat(json!({"model": "vertex/gemini-2.5-flash", "messages": user("via vertex")}))
        .await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["choices"][0]["message"]["content"], "Echo: via vertex");
    let r = e.last_upstream().await;
    assert_eq!(r["path"], "/v1/projects/tollgate-test/locations/us-central1/publishers/google/models/gemini-2.5-flash:generateContent?prettyPrint=false");
    assert!(
        r["headers"]["authorization"]
            .as_str()
            .unwrap()
            .starts_with("Bearer sim-"),
        "an OAuth token from the token endpoint"
    );

    let (status, frames) = e.stream(json!({"model": "vertex/gemini-2.5-flash", "stream": true, "messages": user("vertex stream")})).await;
    assert_eq!(status, 200);
    let c = chunks(&frames);
    let text: String = c
        .iter()
        .filter_map(|x| x["choices"][0]["delta"]["content"].as_str())
        .collect();
    assert_eq!(text, "Echo: vertex stream");
    assert!(
        c.last().unwrap()["usage"]["prompt_tokens"]
            .as_u64()
            .unwrap()
            > 0,
        "usage from the final Vertex chunk"
    );
}

#[tokio::test]
async fn thinking_maps_to_a_clamped_budget_on_2_5() {
    let e = env().await;
    let cases = [
        (
            json!({"reasoning": {"effort": "high"}}),
            json!({"thinkingBudget": 24576, "includeThoughts": true}),
        ),
        (
            json!({"reasoning": {"max_tokens": 100000}}),
            json!({"thinkingBudget": 24576, "includeThoughts": true}),
        ),
        (
            json!({"reasoning_effort": "low"}),
            json!({"thinkingBudget": 1024, "includeThoughts": true}),
        ),
        (
            json!({"reasoning": {"effort": "none"}}),
            json!({"thinkingBudget": 0, "includeThoughts": true}),
        ),
        (
            json!({"reasoning": {"effort": "low", "exclude": true}}),
            json!({"thinkingBudget": 1024, "includeThoughts": false}),
        ),
        (
            json!({"reasoning_effort": "medium", "include_reasoning": false}),
            json!({"thinkingBudget": 8192, "includeThoughts": false}),
        ),
    ];
    for (extra, expected) in cases {
        let mut body = json!({"model": "google/gemini-2.5-flash", "messages": user("think")});
        body.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        let (status, v) = e.chat(body).await;
        assert_eq!(status, 200, "{extra}: {v}");
        let sent = &e.last_upstream().await["body"]["generationConfig"]["thinkingConfig"];
        assert_eq!(sent, &expected, "for {extra}");
        let reasoning = &v["choices"][0]["message"]["reasoning"];
        if expected["includeThoughts"] == true && expected["thinkingBudget"] != 0 {
            assert!(
                reasoning.as_str().is_some_and(|r| !r.is_empty()),
                "thought text returns as reasoning: {v}"
            );
        } else {
            assert!(
                reasoning.is_null(),
                "excluded reasoning must not appear: {v}"
            );
        }
    }
    // 2.5 Pro cannot turn thinking off: 0 becomes its minimum.
    let (status, _) = e.chat(json!({"model": "google/gemini-2.5-pro", "messages": user("x"), "reasoning": {"effort": "none"}})).await;
    assert_eq!(status, 200);
    assert_eq!(
        e.last_upstream().await["body"]["generationConfig"]["thinkingConfig"]["thinkingBudget"],
        128
    );
}

#[tokio::test]
async fn thinking_maps_to_a_level_on_gemini_3() {
    let e = env().await;
    // 3.1 Pro and 3.8 Flash have no `minimal` level (the simulator answers it with Google's
    // 400); 3 Flash has.
    for (model, effort, level) in [
        ("google/gemini-3.1-pro-preview", "low", "low"),
        ("google/gemini-3.1-pro-preview", "medium", "medium"),
        ("google/gemini-3.1-pro-preview", "xhigh", "high"),
        ("google/gemini-3.8-flash", "minimal", "low"),
        ("google/gemini-3.8-flash", "none", "low"),
        ("google/gemini-3-flash-preview", "minimal", "minimal"),
        ("google/gemini-3.6-flash", "high", "high"),
    ] {
        let (status, v) = e
            .chat(json!({"model": model, "messages": user("think"), "reasoning_effort": effort}))
            .await;
        assert_eq!(status, 200, "{model} {effort}: {v}");
        let sent = &e.last_upstream().await["body"]["generationConfig"]["thinkingConfig"];
        assert_eq!(
            sent,
            &json!({"thinkingLevel": level, "includeThoughts": true}),
            "{model} effort {effort}"
        );
    }
}

#[tokio::test]
async fn unsupported_parameters_are_dropped_per_generation() {
    let e = env().await;
    let extras = json!({"frequency_penalty": 0.5, "presence_penalty": 0.25, "seed": 7, "top_a": 0.1, "min_p": 0.1,
        "repetition_penalty": 1.1, "logit_bias": {"1": 2}, "logprobs": true, "top_logprobs": 2, "verbosity": "low",
        "user": "u", "temperature": 0.3, "top_p": 0.9, "top_k": 20, "max_tokens": 300, "stop": ["END"]});
    let with = |model: &str| {
        let mut b = json!({"model": model, "messages": user("params")});
        b.as_object_mut()
            .unwrap()
            .extend(extras.as_object().unwrap().clone());
        b
    };
    let (status, v) = e.chat(with("google/gemini-2.5-flash")).await;
    assert_eq!(
        status, 200,
        "2.5 must not see the penalties it rejects: {v}"
    );
    let body = e.last_upstream().await["body"].clone();
    let g = &body["generationConfig"];
    assert_eq!(
        (
            g["temperature"].as_f64(),
            g["topP"].as_f64(),
            g["topK"].as_u64()
        ),
        (Some(0.3), Some(0.9), Some(20))
    );
    assert_eq!(g["maxOutputTokens"], 300);
    assert_eq!(g["stopSequences"], json!(["END"]));
    assert_eq!(g["seed"], 7, "2.5 forwards seed: {g}");
    for dropped in [
        "frequencyPenalty",
        "presencePenalty",
        "logprobs",
        "responseLogprobs",
    ] {
        assert!(
            g.get(dropped).is_none(),
            "{dropped} must be dropped on 2.5: {g}"
        );
    }
    let text = body.to_string();
    for dropped in [
        "top_a",
        "min_p",
        "repetition",
        "logit",
        "verbosity",
        "\"u\"",
    ] {
        assert!(!text.contains(dropped), "{dropped} leaked upstream: {text}");
    }

    // Google deprecated the sampling parameters from 3.6 on: seed goes with them.
    for model in ["google/gemini-3.8-flash", "google/gemini-3.5-flash-lite"] {
        let (status, v) = e.chat(with(model)).await;
        assert_eq!(status, 200, "{model}: {v}");
        let g = e.last_upstream().await["body"]["generationConfig"].clone();
        for dropped in [
            "temperature",
            "topP",
            "topK",
            "seed",
            "frequencyPenalty",
            "presencePenalty",
        ] {
            assert!(g.get(dropped).is_none(), "{model} sent {dropped}: {g}");
        }
        assert_eq!(g["maxOutputTokens"], 300, "{model}");
    }
}

fn weather_tools() -> Value {
    json!([{"type": "function", "function": {"name": "get_weather", "description": "Weather for a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}])
}

#[tokio::test]
async fn tool_calls_round_trip_with_thought_signatures() {
    let e = env().await;
    for model in [
        "google/gemini-3.1-pro-preview",
        "vertex/gemini-3.1-pro-preview",
        "google/gemini-2.5-flash",
    ] {
        let mut messages = user("weather in Paris? [sim:call=get_weather]")
            .as_array()
            .unwrap()
            .clone();
        let (status, v) = e.chat(json!({"model": model, "messages": messages, "tools": weather_tools(), "tool_choice": "auto"})).await;
        assert_eq!(status, 200, "{model}: {v}");
        let choice = &v["choices"][0];
        assert_eq!(choice["finish_reason"], "tool_calls", "{v}");
        let call = &choice["message"]["tool_calls"][0];
        assert_eq!(call["type"], "function");
        assert_eq!(call["function"]["name"], "get_weather");
        let args: Value =
            serde_json::from_str(call["function"]["arguments"].as_str().unwrap()).unwrap();
        assert!(args.is_object());
        let decl = &e.last_upstream().await["body"]["tools"][0]["functionDeclarations"][0];
        assert_eq!(decl["name"], "get_weather");

        // The client sends the assistant turn back as it got it, plus the tool result.
        messages.push(choice["message"].clone());
        messages.push(
            json!({"role": "tool", "tool_call_id": call["id"], "content": "{\"temp_c\": 21}"}),
        );
        let (status, v) = e
            .chat(json!({"model": model, "messages": messages, "tools": weather_tools()}))
            .await;
        assert_eq!(
            status, 200,
            "{model}: the follow-up must be accepted upstream (signature intact): {v}"
        );
        let sent = e.last_upstream().await["body"].clone();
        let model_turn = &sent["contents"][1];
        assert_eq!(model_turn["role"], "model");
        assert_eq!(
            model_turn["parts"][0]["functionCall"]["name"],
            "get_weather"
        );
        assert_eq!(
            sent["contents"][2]["parts"][0]["functionResponse"]["name"],
            "get_weather"
        );
        assert_eq!(
            sent["contents"][2]["parts"][0]["functionResponse"]["response"],
            json!({"temp_c": 21})
        );
    }
}

/// A conversation whose tool calls Gemini did not make (another model's, or ids the client chose)
/// has no signatures to give back; Gemini 3 refuses such a turn unless it carries Google's
/// placeholder.
#[tokio::test]
async fn gemini_3_accepts_tool_history_from_another_model() {
    let e = env().await;
    let messages = json!([
        {"role": "user", "content": "weather in Paris?"},
        {"role": "assistant", "content": null, "tool_calls": [{"id": "toolu_01A", "type": "function",
            "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}}]},
        {"role": "tool", "tool_call_id": "toolu_01A", "content": "{\"temp_c\": 21}"},
    ]);
    for model in [
        "google/gemini-3.5-flash-lite",
        "vertex/gemini-3.1-pro-preview",
    ] {
        let (status, v) = e
            .chat(json!({"model": model, "messages": messages, "tools": weather_tools()}))
            .await;
        assert_eq!(status, 200, "{model}: {v}");
        let sent = e.last_upstream().await["body"].clone();
        assert_eq!(
            sent["contents"][1]["parts"][0]["thoughtSignature"], "skip_thought_signature_validator",
            "{model}"
        );
    }
}

#[tokio::test]
async fn tool_choice_modes_reach_upstream() {
    let e = env().await;
    let cases = [
        (
            json!("none"),
            json!({"functionCallingConfig": {"mode": "NONE"}}),
        ),
        (
            json!("required"),
            json!({"functionCallingConfig": {"mode": "ANY"}}),
        ),
        (
            json!({"type": "function", "function": {"name": "get_weather"}}),
            json!({"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["get_weather"]}}),
        ),
    ];
    for (choice, expected) in cases {
        let (status, v) = e.chat(json!({"model": "google/gemini-2.5-flash", "messages": user("w"), "tools": weather_tools(), "tool_choice": choice})).await;
        assert_eq!(status, 200, "{v}");
        assert_eq!(e.last_upstream().await["body"]["toolConfig"], expected);
    }
}

#[tokio::test]
async fn streamed_tool_call() {
    let e = env().await;
    let (status, frames) = e.stream(json!({"model": "google/gemini-2.5-flash", "stream": true, "messages": user("w [sim:call=get_weather]"), "tools": weather_tools()})).await;
    assert_eq!(status, 200);
    let c = chunks(&frames);
    let call = c
        .iter()
        .find_map(|x| {
            x["choices"][0]["delta"]["tool_calls"][0]
                .as_object()
                .cloned()
        })
        .expect("a tool call delta");
    assert_eq!(call["function"]["name"], "get_weather");
    assert!(call["id"].as_str().unwrap().starts_with("call_"));
    assert!(c
        .iter()
        .any(|x| x["choices"][0]["finish_reason"] == "tool_calls"));
}

#[tokio::test]
async fn flex_is_a_header_and_only_on_the_global_route() {
    let e = env().await;
    for (model, flex) in [
        ("global/gemini-2.5-flash", true),
        ("vertex/gemini-2.5-flash", false),
        // The default catalog's model has a global route: a flex request is sent there,
        // although its Developer API route comes first.
        ("google/gemini-2.5-flash", true),
    ] {
        let (status, v) = e
            .chat(json!({"model": model, "messages": user("cheap"), "service_tier": "flex"}))
            .await;
        assert_eq!(status, 200, "{model}: {v}");
        let r = e.last_upstream().await;
        assert_eq!(
            r["headers"]
                .get("x-vertex-ai-llm-shared-request-type")
                .and_then(Value::as_str)
                == Some("flex"),
            flex,
            "{model}: {}",
            r["headers"]
        );
        let body = r["body"].to_string();
        assert!(
            !body.contains("serviceTier") && !body.contains("service_tier"),
            "never a body field: {body}"
        );
    }
    assert_eq!(
        e.sim.stats().await["vertex_flex_requests"],
        2,
        "the requests sent to the global route were served as flex"
    );
}

#[tokio::test]
async fn upstream_failures_keep_their_status() {
    let e = env().await;
    for (fault, status) in [("429", 429), ("500", 500), ("503", 503)] {
        for model in ["google/gemini-2.5-flash", "vertex/gemini-2.5-flash"] {
            let (got, v) = e
                .chat(json!({"model": model, "messages": user(&format!("x [sim:fault={fault}]"))}))
                .await;
            assert_eq!(got, status, "{model}: {v}");
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
}

#[tokio::test]
async fn broken_stream_ends_with_error_frame_then_done() {
    let e = env().await;
    for fault in ["break-after=2", "error-event"] {
        let (status, frames) = e.stream(json!({"model": "google/gemini-2.5-flash", "stream": true, "messages": user(&format!("a long answer here [sim:chunks=5] [sim:fault={fault}]"))})).await;
        assert_eq!(status, 200);
        assert_eq!(frames.last().unwrap(), "[DONE]", "{fault}: {frames:?}");
        let err: Value = serde_json::from_str(&frames[frames.len() - 2]).unwrap();
        assert_eq!(
            err["error"]["type"], "upstream_error",
            "{fault}: {frames:?}"
        );
        assert!(
            !frames.iter().any(|f| f.contains("\"choices\":[]")),
            "no usage chunk after an error: {frames:?}"
        );
    }
}

fn cached_system(text: &str) -> Value {
    json!({"role": "system", "content": [{"type": "text", "text": text, "cache_control": {"type": "ephemeral"}}]})
}

#[tokio::test]
async fn cache_control_creates_and_reuses_an_explicit_cache() {
    let e = env().await;
    // ~3,000 tokens by the simulator's rule (4 bytes a token): above 2.5 Flash-Lite's 2,048
    // minimum.
    let long = "You are a meticulous assistant. ".repeat(400);
    for round in 0..2 {
        let body = json!({"model": "google/gemini-2.5-flash-lite", "messages": [cached_system(&long), {"role": "user", "content": format!("question {round}")}]});
        let (status, v) = e.chat(body).await;
        assert_eq!(status, 200, "round {round}: {v}");
        let sent = e.last_upstream().await;
        assert!(
            sent["body"]["cachedContent"]
                .as_str()
                .is_some_and(|n| n.starts_with("cachedContents/")),
            "round {round}: {}",
            sent["body"]
        );
        assert!(
            sent["body"].get("systemInstruction").is_none(),
            "the prefix lives in the cache"
        );
        assert!(
            v["usage"]["prompt_tokens_details"]["cached_tokens"]
                .as_u64()
                .unwrap()
                > 2000,
            "cached tokens are reported: {v}"
        );
    }
    let creations = e
        .sim
        .requests()
        .await
        .iter()
        .filter(|r| r["route"] == "gemini.cache")
        .count();
    assert_eq!(creations, 1, "one cache for one prefix, reused");
}

#[tokio::test]
async fn short_cacheable_prefix_falls_back_to_implicit_caching() {
    let e = env().await;
    let body = json!({"model": "google/gemini-2.5-flash-lite", "messages": [cached_system("Short system prompt."), {"role": "user", "content": "hi"}]});
    let (status, v) = e.chat(body).await;
    assert_eq!(status, 200, "{v}");
    let sent = e.last_upstream().await;
    assert!(sent["body"].get("cachedContent").is_none());
    assert_eq!(
        sent["body"]["systemInstruction"]["parts"][0]["text"],
        "Short system prompt."
    );
    assert_eq!(
        e.sim
            .requests()
            .await
            .iter()
            .filter(|r| r["route"] == "gemini.cache")
            .count(),
        0
    );
}

fn cached_system_ttl(text: &str, ttl: &str) -> Value {
    json!({"role": "system", "content": [{"type": "text", "text": text,
           "cache_control": {"type": "ephemeral", "ttl": ttl}}]})
}

/// The `cachedContents` creations the simulator saw.
async fn creations(e: &SimEnv) -> Vec<Value> {
    e.sim
        .requests()
        .await
        .into_iter()
        .filter(|r| r["route"] == "gemini.cache" && r["method"] == "POST")
        .collect()
}

#[tokio::test]
async fn explicit_caches_are_capped_reused_and_kept_per_workspace() {
    let e = env().await;
    let long = "You are a meticulous assistant. ".repeat(400);
    let ask = |ttl: &str, q: &str| {
        json!({"model": "google/gemini-2.5-flash-lite",
               "messages": [cached_system_ttl(&long, ttl), {"role": "user", "content": q}]})
    };
    // A year is asked: the cache is created for the configured hour at most.
    let (status, v) = e.chat(ask("8760h", "one")).await;
    assert_eq!(status, 200, "{v}");
    let made = creations(&e).await;
    assert_eq!(made.len(), 1);
    assert_eq!(
        made[0]["body"]["ttl"], "3600s",
        "capped: {}",
        made[0]["body"]
    );

    // A 10 s cache is reused by the next request, not re-created for each one.
    let short = "A different, also long, system prompt. ".repeat(300);
    let short_ask = |q: &str| {
        json!({"model": "google/gemini-2.5-flash-lite",
               "messages": [cached_system_ttl(&short, "10s"), {"role": "user", "content": q}]})
    };
    for q in ["two", "three"] {
        let (status, v) = e.chat(short_ask(q)).await;
        assert_eq!(status, 200, "{v}");
    }
    assert_eq!(
        creations(&e).await.len(),
        2,
        "one creation for the 10 s prefix"
    );

    // Another workspace with the same prefix gets its own cache.
    let (_, other) = e.gw.workspace_with_key();
    let res = e.gw.chat(&other, short_ask("four")).await;
    assert_eq!(res.status(), 200);
    assert_eq!(
        creations(&e).await.len(),
        3,
        "caches are not shared across workspaces"
    );
}

/// The cost of a gemini-2.5-flash-lite record by the default catalog's prices (µUSD per 1M
/// tokens: 0.10 in — creation tokens too, the model has no cache-write price —, 0.01 cached,
/// 0.40 out, 1.00 per 1M tokens per hour stored).
fn flash_lite_cost(r: &Value) -> i128 {
    let n = |k: &str| i128::from(r[k].as_u64().unwrap_or_else(|| panic!("{k}: {r}")));
    n("input_tokens") * 100_000
        + n("cache_read_tokens") * 10_000
        + n("cache_write_tokens") * 100_000
        + n("output_tokens") * 400_000
        + (n("cache_storage_token_seconds") * 1_000_000 + 3_599) / 3_600
}

#[tokio::test]
async fn the_request_that_creates_an_explicit_cache_pays_its_creation_and_storage_once() {
    let e = env().await;
    let long = "You are a meticulous assistant. ".repeat(400);
    let short = "A different, also long, system prompt. ".repeat(300);
    let ask = |prefix: &str, ttl: &str, q: &str| {
        json!({"model": "google/gemini-2.5-flash-lite",
               "messages": [cached_system_ttl(prefix, ttl), {"role": "user", "content": q}]})
    };
    // A year asked (capped to the hour), then a 10 s cache; each prefix used twice.
    let mut cached = Vec::new();
    for (prefix, ttl, q) in [
        (&long, "8760h", "one"),
        (&long, "8760h", "two"),
        (&short, "10s", "three"),
        (&short, "10s", "four"),
    ] {
        let (status, v) = e.chat(ask(prefix, ttl, q)).await;
        assert_eq!(status, 200, "{v}");
        cached.push(
            v["usage"]["prompt_tokens_details"]["cached_tokens"]
                .as_u64()
                .unwrap(),
        );
    }
    assert_eq!(creations(&e).await.len(), 2);
    let mut recs = crate::billing::records(&e.gw, &e.ws, 4).await;
    recs.sort_by_key(|r| r["started_at"].as_str().unwrap().to_owned());
    for (i, (r, ttl)) in recs.iter().zip([3_600, 3_600, 10, 10]).enumerate() {
        let creates = i % 2 == 0;
        let tokens = cached[i];
        assert!(tokens > 2_000, "{r}");
        assert_eq!(r["cache_read_tokens"], tokens, "{r}");
        let (written, stored) = if creates {
            (tokens, tokens * ttl)
        } else {
            (0, 0)
        };
        assert_eq!(r["cache_write_tokens"], written, "request {i}: {r}");
        assert_eq!(r["cache_storage_token_seconds"], stored, "request {i}: {r}");
        assert_eq!(r["cache_storage_price"].as_f64(), Some(1.0), "{r}");
        assert_eq!(crate::billing::pico(&r["cost"]), flash_lite_cost(r), "{r}");
    }
    let verify = e.gw.cli_json(&["ledger", "verify"]);
    assert_eq!(verify["inconsistent"], json!([]), "{verify}");
}

#[tokio::test]
async fn audio_input_is_billed_at_the_audio_price() {
    use base64::Engine;
    let e = env().await;
    let audio = base64::engine::general_purpose::STANDARD.encode(vec![7u8; 6_000]);
    let body = json!({"model": "google/gemini-2.5-flash", "messages": [{"role": "user", "content": [
        {"type": "text", "text": "What is said here?"},
        {"type": "input_audio", "input_audio": {"data": audio, "format": "wav"}}]}]});
    let (status, v) = e.chat(body).await;
    assert_eq!(status, 200, "{v}");
    let sent = e.last_upstream().await;
    assert_eq!(
        sent["body"]["contents"][0]["parts"][1]["inlineData"]["mimeType"],
        "audio/wav"
    );
    let r = &crate::billing::records(&e.gw, &e.ws, 1).await[0];
    let n = |k: &str| i128::from(r[k].as_u64().unwrap_or_else(|| panic!("{k}: {r}")));
    assert!(n("audio_input_tokens") > 1_000, "{r}");
    assert!(n("input_tokens") > 0, "the text is not audio: {r}");
    assert_eq!(
        (n("input_tokens") + n("audio_input_tokens")) as u64,
        v["usage"]["prompt_tokens"].as_u64().unwrap(),
        "{r}"
    );
    // gemini-2.5-flash: 0.30 text in, 1.00 audio in, 2.50 out (USD/1M).
    let expected = n("input_tokens") * 300_000
        + n("audio_input_tokens") * 1_000_000
        + n("output_tokens") * 2_500_000;
    assert_eq!(crate::billing::pico(&r["cost"]), expected, "{r}");
    assert_eq!(r["audio_input_price"].as_f64(), Some(1.0), "{r}");
}

#[tokio::test]
async fn a_prompt_over_the_threshold_is_billed_whole_at_the_long_context_prices() {
    let e = env().await;
    // gemini-2.5-pro: 1.25 / 10 (USD/1M) up to 200,000 prompt tokens, 2.50 / 15 above; the
    // simulator counts 4 bytes a token.
    for (words, long) in [(10, false), (90_000, true)] {
        let text = "lorem ipsu ".repeat(words);
        let body = json!({"model": "google/gemini-2.5-pro", "max_tokens": 50,
                          "messages": [{"role": "user", "content": text}]});
        let (status, v) = e.chat(body).await;
        assert_eq!(status, 200, "{v}");
        let prompt = v["usage"]["prompt_tokens"].as_u64().unwrap();
        assert_eq!(prompt > 200_000, long, "{prompt} prompt tokens");
        let id = v["id"].as_str().unwrap().to_owned();
        let recs = crate::billing::records(&e.gw, &e.ws, if long { 2 } else { 1 }).await;
        let r = recs.iter().find(|r| r["id"] == id.as_str()).unwrap();
        let (input_price, output_price) = if long {
            (2_500_000, 15_000_000)
        } else {
            (1_250_000, 10_000_000)
        };
        assert_eq!(
            r["input_price"].as_f64().unwrap() * 1e6,
            input_price as f64,
            "{r}"
        );
        let n = |k: &str| i128::from(r[k].as_u64().unwrap());
        let expected = n("input_tokens") * input_price + n("output_tokens") * output_price;
        assert_eq!(crate::billing::pico(&r["cost"]), expected, "{r}");
    }
}

/// A failed-over request can make one cache per route: the upstream charges for each, so each
/// is billed (the later one used to replace the earlier one on the usage record).
#[tokio::test]
async fn every_cache_a_failed_over_request_made_is_billed() {
    let e = env().await;
    let long = "You are a meticulous assistant. ".repeat(400);
    let ask = || json!({"model": "google/gemini-2.5-flash-lite", "messages": [cached_system(&long), {"role": "user", "content": "q"}]});
    let (status, v) = e.chat(ask()).await;
    assert_eq!(status, 200, "{v}");
    let one = e.gw.usage_records(&e.ws, 1).await[0]["cache_write_tokens"]
        .as_u64()
        .unwrap();
    assert!(one > 2000, "the creation is billed as cache writes: {one}");

    // Another workspace (caches are never shared): the Developer API makes its cache, then
    // fails the request; Vertex makes its own and answers.
    let (ws, key) = e.gw.workspace_with_key();
    e.sim.queue_fault("503", "gemini", 1).await;
    let res = e.gw.chat(&key, ask()).await;
    assert_eq!(res.status(), 200);
    let made: Vec<Value> = e
        .sim
        .requests()
        .await
        .into_iter()
        .filter(|r| {
            r["method"] == "POST" && (r["route"] == "gemini.cache" || r["route"] == "vertex.cache")
        })
        .map(|r| r["route"].clone())
        .collect();
    assert_eq!(
        made,
        ["gemini.cache", "gemini.cache", "vertex.cache"],
        "one cache on each surface for the second workspace"
    );
    let record = &e.gw.usage_records(&ws, 1).await[0];
    assert_eq!(record["attempts"], 2, "{record}");
    assert_eq!(
        record["cache_write_tokens"].as_u64().unwrap(),
        2 * one,
        "{record}"
    );
}
