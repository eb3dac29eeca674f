//! A stream the client leaves early is billed at least what it was sent, even when the
//! upstream had not counted it yet (Anthropic reports output only at the end of a stream).

use serde_json::{json, Value};

use crate::billing::records;
use crate::harness::{sse_data, SimEnv};

#[tokio::test]
async fn a_left_anthropic_stream_is_billed_what_was_delivered() {
    let e = SimEnv::start();
    let body = json!({"model": "anthropic/claude-sonnet-4-5", "stream": true, "max_tokens": 400,
        "messages": [{"role": "user", "content": format!(
            "[sim:chunks=40] [sim:chunk-delay=100] {}", "tell me a long story ".repeat(30))}]});
    let mut res = e.gw.chat(&e.key, body).await;
    assert_eq!(res.status(), 200);
    // Read until a few content frames arrived, then hang up.
    let mut text = String::new();
    let mut delivered = 0usize;
    while delivered < 3 {
        let chunk = res.chunk().await.unwrap().expect("the stream goes on");
        text.push_str(&String::from_utf8_lossy(&chunk));
        delivered = sse_data(&text)
            .iter()
            .filter_map(|d| serde_json::from_str::<Value>(d).ok())
            .filter(|f| f["choices"][0]["delta"]["content"].is_string())
            .count();
    }
    drop(res);
    let content: usize = sse_data(&text)
        .iter()
        .filter_map(|d| serde_json::from_str::<Value>(d).ok())
        .filter_map(|f| f["choices"][0]["delta"]["content"].as_str().map(str::len))
        .sum();
    let recs = records(&e.gw, &e.ws, 1).await;
    let r = &recs[0];
    assert_eq!(r["outcome"], "client_disconnected", "{r}");
    assert_eq!(r["usage_source"], "estimated", "{r}");
    let output = r["output_tokens"].as_u64().unwrap();
    assert!(
        output as usize >= content.div_ceil(4) && output > 1,
        "{output} output tokens billed for {content} bytes delivered: {r}"
    );
    assert!(r["input_tokens"].as_u64().unwrap() > 0, "{r}");
}
