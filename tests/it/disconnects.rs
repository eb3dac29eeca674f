//! A stream the client leaves early is billed what the upstream produced: the gateway keeps
//! reading the upstream (for `drain_after_disconnect`) to its own final counts — Anthropic
//! counts its output, Vertex Gemini all its tokens, only at the end. With draining off, the
//! record is an estimate of at least what was delivered.

use serde_json::{json, Value};

use crate::billing::records;
use crate::harness::{chunks, sse_data, Gateway, Sim, SimEnv};

/// A slow stream: 30 events 50 ms apart (the simulator's reply is a function of the prompt).
fn slow_stream(model: &str) -> Value {
    json!({"model": model, "stream": true, "max_tokens": 400,
        "messages": [{"role": "user", "content": format!(
            "[sim:chunks=30] [sim:chunk-delay=50] {}", "tell me a long story ".repeat(30))}]})
}

/// Reads `body`'s stream until three content frames arrived, then hangs up; returns the
/// content bytes received.
async fn read_then_leave(gw: &Gateway, key: &str, body: Value) -> usize {
    let mut res = gw.chat(key, body).await;
    assert_eq!(res.status(), 200);
    let mut text = String::new();
    let content = |text: &str| -> Vec<usize> {
        sse_data(text)
            .iter()
            .filter_map(|d| serde_json::from_str::<Value>(d).ok())
            .filter_map(|f| f["choices"][0]["delta"]["content"].as_str().map(str::len))
            .collect()
    };
    while content(&text).len() < 3 {
        let chunk = res.chunk().await.unwrap().expect("the stream goes on");
        text.push_str(&String::from_utf8_lossy(&chunk));
    }
    drop(res);
    content(&text).iter().sum()
}

#[tokio::test]
async fn a_left_stream_is_billed_the_upstreams_final_counts_on_every_family() {
    let e = SimEnv::start();
    let models = [
        "anthropic/claude-sonnet-4-5",
        "vertex/claude-sonnet-4-5",
        "vertex/gemini-2.5-flash",
        "google/gemini-2.5-flash",
    ];
    for (i, model) in models.into_iter().enumerate() {
        // The whole answer first, for its counts.
        let (status, frames) = e.stream(slow_stream(model)).await;
        assert_eq!(status, 200, "{model}");
        let whole = chunks(&frames).last().unwrap()["usage"].clone();
        assert!(
            whole["completion_tokens"].as_u64().unwrap() > 10,
            "{model}: {whole}"
        );

        let delivered = read_then_leave(&e.gw, &e.key, slow_stream(model)).await;
        let recs = records(&e.gw, &e.ws, 2 * (i + 1)).await;
        let left: Vec<&Value> = recs
            .iter()
            .filter(|r| r["model_id"] == model && r["outcome"] == "client_disconnected")
            .collect();
        assert_eq!(left.len(), 1, "{model}: {recs:?}");
        let r = left[0];
        assert_eq!(r["usage_source"], "reported", "{model}: {r}");
        let output = r["output_tokens"].as_u64().unwrap();
        assert_eq!(output, whole["completion_tokens"], "{model}: {r}");
        assert!(output as usize > delivered.div_ceil(4), "{model}: {r}");
        let prompt = r["input_tokens"].as_u64().unwrap()
            + r["cache_read_tokens"].as_u64().unwrap()
            + r["cache_write_tokens"].as_u64().unwrap();
        assert_eq!(prompt, whole["prompt_tokens"], "{model}: {r}");
    }
    let verify = e.gw.cli_json(&["ledger", "verify"]);
    assert_eq!(verify["inconsistent"], json!([]), "{verify}");
}

#[tokio::test]
async fn without_draining_a_left_stream_is_billed_an_estimate_of_what_was_delivered() {
    let sim = Sim::start();
    let gw = Gateway::builder()
        .simulator(&sim)
        .drain_after_disconnect("0s")
        .start();
    let (ws, key) = gw.workspace_with_key();
    for (i, model) in ["anthropic/claude-sonnet-4-5", "vertex/gemini-2.5-flash"]
        .into_iter()
        .enumerate()
    {
        let delivered = read_then_leave(&gw, &key, slow_stream(model)).await;
        let recs = records(&gw, &ws, i + 1).await;
        let r = recs.iter().find(|r| r["model_id"] == model).unwrap();
        assert_eq!(r["outcome"], "client_disconnected", "{r}");
        assert_eq!(r["usage_source"], "estimated", "{r}");
        let output = r["output_tokens"].as_u64().unwrap();
        assert!(
            output as usize >= delivered.div_ceil(4) && output > 1,
            "{model}: {output} output tokens billed for {delivered} bytes delivered: {r}"
        );
        assert!(r["input_tokens"].as_u64().unwrap() > 0, "{model}: {r}");
    }
}
