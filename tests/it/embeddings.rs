//! Embeddings on family A end to end: the real gateway against `tollgate-sim`, on the Developer
//! API (`google/text-embedding-004`, the default catalog's first route, served by
//! `gemini-embedding-001` at 768 dimensions) and on Vertex (`vertex/text-embedding-005`, pinned
//! by the harness), asserting what the client gets and what reached upstream. The simulator's vectors depend only on the text and the width (see its
//! `content.rs`), so both routes must give the same vectors for the same text.

use std::time::Instant;

use base64::Engine as _;
use serde_json::{json, Value};

use crate::harness::{Gateway, Sim};

const VERTEX: &str = "vertex/text-embedding-005";
const DEVAPI: &str = "google/text-embedding-004";
const ROUTES: [&str; 2] = [VERTEX, DEVAPI];

struct Env {
    sim: Sim,
    gw: Gateway,
    key: String,
}

async fn env() -> Env {
    let sim = Sim::start();
    let gw = Gateway::builder().simulator(&sim).start();
    let (_, key) = gw.workspace_with_key();
    Env { sim, gw, key }
}

impl Env {
    async fn post(&self, path: &str, body: Value) -> (u16, reqwest::header::HeaderMap, Value) {
        let res = reqwest::Client::new()
            .post(self.gw.url(path))
            .bearer_auth(&self.key)
            .json(&body)
            .send()
            .await
            .unwrap();
        let status = res.status().as_u16();
        let headers = res.headers().clone();
        (status, headers, res.json().await.unwrap())
    }

    async fn embed(&self, body: Value) -> (u16, Value) {
        let (status, _, v) = self.post("/v1/embeddings", body).await;
        (status, v)
    }

    async fn ok(&self, body: Value) -> Value {
        let (status, v) = self.embed(body).await;
        assert_eq!(status, 200, "{v}");
        v
    }

    /// Recorded upstream embedding calls (model requests only), oldest first.
    async fn calls(&self) -> Vec<Value> {
        self.sim.requests().await
    }

    async fn clear(&self) {
        reqwest::Client::new()
            .delete(format!("{}/_sim/requests", self.sim.url))
            .send()
            .await
            .unwrap();
    }
}

fn floats(v: &Value) -> Vec<f32> {
    v.as_array()
        .unwrap_or_else(|| panic!("not a float vector: {v}"))
        .iter()
        .map(|x| x.as_f64().unwrap() as f32)
        .collect()
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

fn decode(v: &Value) -> Vec<f32> {
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(v.as_str().unwrap())
        .unwrap();
    assert_eq!(bytes.len() % 4, 0);
    bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// The simulator's token rule: `ceil(bytes / 4)`.
fn tok(text: &str) -> u64 {
    text.len().div_ceil(4) as u64
}

/// Checks the list shape and returns the vectors in order.
fn vectors(v: &Value, model: &str, n: usize) -> Vec<Vec<f32>> {
    assert_eq!(v["object"], "list", "{v}");
    assert_eq!(v["model"], model);
    let data = v["data"].as_array().unwrap();
    assert_eq!(data.len(), n);
    data.iter()
        .enumerate()
        .map(|(i, d)| {
            assert_eq!(d["object"], "embedding");
            assert_eq!(d["index"], i, "data[i].index == i");
            floats(&d["embedding"])
        })
        .collect()
}

fn usage(v: &Value) -> u64 {
    let u = &v["usage"];
    let prompt = u["prompt_tokens"].as_u64().unwrap();
    assert_eq!(u["total_tokens"], prompt, "total == prompt: {u}");
    assert_eq!(u["completion_tokens"], 0, "{u}");
    prompt
}

fn assert_error(status: u16, v: &Value, want_status: u16, code: &str) {
    assert_eq!(status, want_status, "{v}");
    assert_eq!(v["error"]["code"], code, "{v}");
}

#[tokio::test]
async fn single_string_on_both_routes() {
    let e = env().await;
    let mut by_route = Vec::new();
    for model in ROUTES {
        e.clear().await;
        let v = e.ok(json!({"model": model, "input": "hello world"})).await;
        let vs = vectors(&v, model, 1);
        assert_eq!(vs[0].len(), 768, "default dimensionality");
        let norm: f32 = vs[0].iter().map(|x| x * x).sum::<f32>().sqrt();
        assert!((norm - 1.0).abs() < 1e-3, "unit vector, got {norm}");
        assert_eq!(usage(&v), tok("hello world"));
        let calls = e.calls().await;
        assert_eq!(calls.len(), 1, "{calls:?}");
        let c = &calls[0];
        if model == VERTEX {
            assert_eq!(c["route"], "vertex.predict");
            assert_eq!(c["path"], "/v1/projects/tollgate-test/locations/us-central1/publishers/google/models/text-embedding-005:predict?prettyPrint=false");
            assert!(c["headers"]["authorization"]
                .as_str()
                .unwrap()
                .starts_with("Bearer "));
            assert_eq!(
                c["body"],
                json!({"instances": [{"content": "hello world"}]})
            );
        } else {
            assert_eq!(c["route"], "gemini.batch_embed");
            assert_eq!(
                c["path"],
                "/v1beta/models/gemini-embedding-001:batchEmbedContents?prettyPrint=false"
            );
            assert_eq!(c["headers"]["x-goog-api-key"], "sim-gemini-key");
            assert_eq!(
                c["body"],
                json!({"requests": [{"model": "models/gemini-embedding-001", "content": {"parts": [{"text": "hello world"}]}, "outputDimensionality": 768}]})
            );
        }
        assert!(
            c["headers"].get("authorization").is_none()
                || !c["headers"]["authorization"]
                    .as_str()
                    .unwrap()
                    .contains(&e.key),
            "the client's key must not travel"
        );
        by_route.push(vs.into_iter().next().unwrap());
    }
    // Two upstream models: close (the simulator derives both from the text) but not the same.
    let apart: f32 = by_route[0]
        .iter()
        .zip(&by_route[1])
        .map(|(a, b)| (a - b).abs())
        .fold(0.0, f32::max);
    assert!(apart < 1e-3, "same text, nearly the same vector: {apart}");
}

#[tokio::test]
async fn array_of_one_equals_the_string() {
    let e = env().await;
    for model in ROUTES {
        let one = e.ok(json!({"model": model, "input": ["just one"]})).await;
        let s = e.ok(json!({"model": model, "input": "just one"})).await;
        assert_eq!(
            bits(&vectors(&one, model, 1)[0]),
            bits(&vectors(&s, model, 1)[0])
        );
        assert_eq!(usage(&one), usage(&s));
    }
}

#[tokio::test]
async fn array_of_250_is_split_and_reassembled_in_order() {
    let e = env().await;
    // ~400 bytes each (100 tokens): 25,000 tokens in all, above Vertex's 20,000 a call.
    let inputs: Vec<String> = (0..250)
        .map(|i| format!("document {i:03} {}", "lorem ipsum ".repeat(32)))
        .collect();
    let total: u64 = inputs.iter().map(|t| tok(t)).sum();
    for (model, route, want) in [
        (VERTEX, "vertex.predict", vec![200, 50]),
        (DEVAPI, "gemini.batch_embed", vec![100, 100, 50]),
    ] {
        e.clear().await;
        let v = e.ok(json!({"model": model, "input": inputs})).await;
        let batch = vectors(&v, model, 250);
        assert_eq!(usage(&v), total, "{model}");
        let calls = e.calls().await;
        assert!(calls.iter().all(|c| c["route"] == route), "{calls:?}");
        let mut sizes = Vec::new();
        let mut sent = Vec::new();
        // Calls run concurrently: order them by their first input to check coverage.
        for c in &calls {
            let texts: Vec<String> = if model == VERTEX {
                c["body"]["instances"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|i| i["content"].as_str().unwrap().to_owned())
                    .collect()
            } else {
                c["body"]["requests"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|r| {
                        r["content"]["parts"][0]["text"]
                            .as_str()
                            .unwrap()
                            .to_owned()
                    })
                    .collect()
            };
            sizes.push(texts.len());
            sent.push(texts);
        }
        sent.sort();
        sizes.sort_unstable_by(|a, b| b.cmp(a));
        assert_eq!(sizes, want, "{model} batch sizes");
        assert_eq!(sent.concat(), inputs, "{model}: every input once, in order");
        // Each vector is the one the input gets on its own.
        e.clear().await;
        for (i, text) in inputs.iter().enumerate() {
            let single = e.ok(json!({"model": model, "input": text})).await;
            assert_eq!(
                bits(&vectors(&single, model, 1)[0]),
                bits(&batch[i]),
                "{model}: data[{i}] is the vector of input {i}"
            );
        }
    }
}

#[tokio::test]
async fn calls_run_concurrently_with_a_bound_of_four() {
    // Long enough that a loaded machine's overhead cannot blur the four-at-once pattern.
    const SLOW_MS: i64 = 1_000;
    let e = env().await;
    // 800 inputs on the Developer API: 8 calls; each call's first input delays its answer.
    let inputs: Vec<String> = (0..800)
        .map(|i| {
            if i % 100 == 0 {
                format!("slow {i} [sim:latency={SLOW_MS}]")
            } else {
                format!("fast {i}")
            }
        })
        .collect();
    let started = Instant::now();
    let v = e.ok(json!({"model": DEVAPI, "input": inputs})).await;
    let took = started.elapsed().as_millis();
    assert_eq!(vectors(&v, DEVAPI, 800).len(), 800);
    let mut ts: Vec<i64> = e
        .calls()
        .await
        .iter()
        .map(|c| c["ts_ms"].as_i64().unwrap())
        .collect();
    assert_eq!(ts.len(), 8);
    ts.sort_unstable();
    assert!(
        ts[3] - ts[0] < SLOW_MS,
        "the first four calls were in flight together: {ts:?}"
    );
    assert!(
        ts[4] - ts[0] >= SLOW_MS - 10,
        "the fifth call waited for a free slot: {ts:?}"
    );
    assert!(took < 8 * SLOW_MS as u128, "not sequential: {took} ms");
}

#[tokio::test]
async fn dimensions_and_task_type_reach_upstream() {
    let e = env().await;
    for model in ROUTES {
        let full = e.ok(json!({"model": model, "input": "tune me"})).await;
        let full = vectors(&full, model, 1).remove(0);
        e.clear().await;
        let v = e
            .ok(json!({"model": model, "input": ["tune me", "and me"], "dimensions": 256, "task_type": "RETRIEVAL_DOCUMENT"}))
            .await;
        let vs = vectors(&v, model, 2);
        assert!(vs.iter().all(|x| x.len() == 256), "{model}");
        if model == VERTEX {
            assert_eq!(
                bits(&vs[0]),
                bits(&full[..256]),
                "{model}: a truncated (Matryoshka) prefix"
            );
        } else {
            // gemini-embedding-001 is unit length only at 3072: the gateway normalises cuts,
            // so the 256 prefix is the 768 vector's prefix scaled to unit length.
            let norm = full[..256].iter().map(|x| x * x).sum::<f32>().sqrt();
            for (got, want) in vs[0].iter().zip(&full[..256]) {
                assert!(
                    (got - want / norm).abs() < 1e-5,
                    "{model}: {got} vs {}",
                    want / norm
                );
            }
        }
        let calls = e.calls().await;
        assert_eq!(calls.len(), 1);
        let b = &calls[0]["body"];
        if model == VERTEX {
            assert_eq!(b["parameters"]["outputDimensionality"], 256);
            for i in b["instances"].as_array().unwrap() {
                assert_eq!(i["task_type"], "RETRIEVAL_DOCUMENT");
            }
        } else {
            for r in b["requests"].as_array().unwrap() {
                assert_eq!(r["outputDimensionality"], 256);
                assert_eq!(r["taskType"], "RETRIEVAL_DOCUMENT");
            }
        }
    }
    // Google's enum is upper case; the gateway accepts any case and sends Google's.
    e.clear().await;
    e.ok(json!({"model": VERTEX, "input": "q", "task_type": "retrieval_query", "dimensions": 768}))
        .await;
    let b = &e.calls().await[0]["body"];
    assert_eq!(b["instances"][0]["task_type"], "RETRIEVAL_QUERY");
    assert_eq!(b["parameters"]["outputDimensionality"], 768);
}

#[tokio::test]
async fn base64_round_trip_equals_floats() {
    let e = env().await;
    let inputs = ["first text", "second, longer text", "third"];
    for model in ROUTES {
        let f = e
            .ok(json!({"model": model, "input": inputs, "encoding_format": "float"}))
            .await;
        let b = e
            .ok(json!({"model": model, "input": inputs, "encoding_format": "base64"}))
            .await;
        let tokens = |v: &Value| {
            (
                v["usage"]["prompt_tokens"].clone(),
                v["usage"]["cost"].clone(),
            )
        };
        assert_eq!(tokens(&f), tokens(&b), "the same tokens at the same cost");
        assert_ne!(f["usage"]["generation_id"], b["usage"]["generation_id"]);
        assert_eq!(b["object"], "list");
        let floats = vectors(&f, model, 3);
        for (i, d) in b["data"].as_array().unwrap().iter().enumerate() {
            assert_eq!(d["index"], i);
            assert_eq!(d["object"], "embedding");
            assert_eq!(
                bits(&decode(&d["embedding"])),
                bits(&floats[i]),
                "{model} vector {i}: base64 decodes to the float answer, bit for bit"
            );
        }
    }
}

#[tokio::test]
async fn successor_model_on_the_developer_api() {
    let e = env().await;
    let model = "devapi/gemini-embedding-001";
    let v = e.ok(json!({"model": model, "input": "successor"})).await;
    assert_eq!(vectors(&v, model, 1)[0].len(), 3072);
    let v = e
        .ok(json!({"model": model, "input": "successor", "dimensions": 768, "task_type": "CODE_RETRIEVAL_QUERY"}))
        .await;
    assert_eq!(vectors(&v, model, 1)[0].len(), 768);
    let (status, v) = e
        .embed(json!({"model": model, "input": "x", "dimensions": 4096}))
        .await;
    assert_error(status, &v, 400, "invalid_request_error");
    assert!(v["error"]["message"]
        .as_str()
        .unwrap()
        .contains("between 1 and 3072"));
}

#[tokio::test]
async fn client_errors_are_400_before_upstream() {
    let e = env().await;
    let cases = [
        (json!({"model": VERTEX, "input": ""}), "input must not be an empty string"),
        (json!({"model": VERTEX, "input": []}), "input must not be an empty array"),
        (json!({"model": DEVAPI, "input": ["ok", ""]}), "input[1] must not be an empty string"),
        (json!({"model": VERTEX, "input": [1, 2, 3]}), "token ids is not supported"),
        (json!({"model": DEVAPI, "input": [[1, 2]]}), "token ids is not supported"),
        (json!({"model": VERTEX}), "missing required field: input"),
        (json!({"model": VERTEX, "input": "x", "dimensions": 0}), "dimensions must be between 1 and 768 for model \"vertex/text-embedding-005\" (got 0)"),
        (json!({"model": DEVAPI, "input": "x", "dimensions": 3073}), "dimensions must be between 1 and 3072 for model \"google/text-embedding-004\" (got 3073)"),
        (json!({"model": VERTEX, "input": "x", "task_type": "SUMMARIZATION"}), "task_type \"SUMMARIZATION\" is not supported by model \"vertex/text-embedding-005\"; use one of: RETRIEVAL_QUERY,"),
        (json!({"model": VERTEX, "input": "x", "encoding_format": "int8"}), "encoding_format must be \"float\" or \"base64\""),
        (json!({"model": VERTEX, "input": "x", "stream": true}), "embeddings cannot be streamed"),
    ];
    for (body, message) in cases {
        let (status, v) = e.embed(body.clone()).await;
        assert_error(status, &v, 400, "invalid_request_error");
        assert_eq!(v["error"]["type"], "invalid_request_error");
        assert!(
            v["error"]["message"].as_str().unwrap().contains(message),
            "{body}: {v}"
        );
    }
    for chat_model in ["google/gemini-2.5-flash", "anthropic/claude-sonnet-4-5"] {
        let (status, v) = e.embed(json!({"model": chat_model, "input": "x"})).await;
        assert_error(status, &v, 400, "embeddings_unsupported");
        assert_eq!(
            v["error"]["message"],
            format!("model \"{chat_model}\" does not support embeddings")
        );
    }
    let (status, v) = e.embed(json!({"model": "google/nope", "input": "x"})).await;
    assert_error(status, &v, 400, "model_not_found");
    assert_eq!(v["error"]["message"], "model \"google/nope\" not found");
    let (status, _, v) = e
        .post(
            "/v1/chat/completions",
            json!({"model": VERTEX, "messages": [{"role": "user", "content": "hi"}]}),
        )
        .await;
    assert_eq!(status, 400, "an embedding model is not a chat model: {v}");
    assert!(v["error"]["message"]
        .as_str()
        .unwrap()
        .contains("use /v1/embeddings"));
    assert!(e.calls().await.is_empty(), "nothing reached upstream");
}

#[tokio::test]
async fn upstream_429_fails_the_request_with_its_status() {
    let e = env().await;
    for model in ROUTES {
        let (status, headers, v) = e
            .post(
                "/v1/embeddings",
                json!({"model": model, "input": ["fine", "throttle me [sim:fault=429]"]}),
            )
            .await;
        assert_error(status, &v, 429, "upstream_error");
        assert_eq!(v["error"]["type"], "upstream_error");
        let message = v["error"]["message"].as_str().unwrap();
        assert!(
            message.contains("HTTP 429") && message.contains("RESOURCE_EXHAUSTED"),
            "{model}: {message}"
        );
        assert!(v.get("data").is_none());
        assert!(headers.get("x-request-id").is_some());
    }
}

#[tokio::test]
async fn one_failing_batch_fails_the_whole_request() {
    let e = env().await;
    // Models with one route each: a failover would retry the whole request elsewhere.
    for (model, calls) in [("devapi/gemini-embedding-001", 3), (VERTEX, 2)] {
        e.clear().await;
        let mut inputs: Vec<String> = (0..251).map(|i| format!("input {i}")).collect();
        inputs[180] = "this one fails [sim:fault=503]".into();
        let (status, v) = e.embed(json!({"model": model, "input": inputs})).await;
        assert_error(status, &v, 503, "upstream_error");
        assert!(v.get("data").is_none() && v.get("usage").is_none(), "{v}");
        let seen = e.calls().await.len();
        assert!(
            (1..=calls).contains(&seen),
            "{model}: {seen} calls for {calls} batches"
        );
    }
}

#[tokio::test]
async fn broken_and_stalled_upstreams_are_502_and_504() {
    let e = env().await;
    let (status, v) = e
        .embed(json!({"model": VERTEX, "input": ["a", "cut me [sim:fault=break-after=10]"]}))
        .await;
    assert_error(status, &v, 502, "upstream_error");
    let (status, v) = e
        .embed(json!({"model": DEVAPI, "input": ["stall me [sim:fault=stall]"]}))
        .await;
    assert_error(status, &v, 504, "upstream_error");
    assert_eq!(v["error"]["message"], "upstream timed out");
}
