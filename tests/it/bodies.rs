//! Request bodies of every size up to the limit reach the upstream intact, whatever the
//! framing, with and without `Expect: 100-continue`, buffered and streamed.

use serde_json::{json, Value};

use crate::harness::{sse_data, FakeUpstream, Gateway};
use crate::raw::{post, Framing};

fn body_of(size: usize, stream: bool) -> (String, Vec<u8>) {
    // Varied, JSON-escaped content so a dropped or shifted byte cannot go unnoticed.
    let text: String = (0..size)
        .map(|i| char::from(b'a' + (i * 7 % 26) as u8))
        .collect::<String>()
        + "\"\n end";
    let body = json!({"model": "acme/echo", "messages": [{"role": "user", "content": text}], "stream": stream});
    (text, serde_json::to_vec(&body).unwrap())
}

async fn check(size: usize, framing: Framing, stream: bool) {
    let sim = FakeUpstream::start().await;
    let gw = Gateway::builder().fake_openai(&sim).start();
    let (_, key) = gw.workspace_with_key();
    let (text, body) = body_of(size, stream);
    let addr = gw.base.trim_start_matches("http://").to_owned();
    let res = tokio::task::spawn_blocking(move || {
        post(&addr, "/v1/chat/completions", &key, &body, framing, true)
    })
    .await
    .unwrap();
    assert!(
        res.continued,
        "the gateway must answer Expect: 100-continue"
    );
    assert_eq!(
        res.status,
        200,
        "{}",
        String::from_utf8_lossy(&res.body[..res.body.len().min(500)])
    );
    if stream {
        assert_eq!(res.header("content-type"), Some("text/event-stream"));
        let frames = sse_data(std::str::from_utf8(&res.body).unwrap());
        assert_eq!(frames.last().unwrap(), "[DONE]");
        let usage: Value = serde_json::from_str(&frames[frames.len() - 2]).unwrap();
        assert_eq!(usage["choices"], json!([]));
    } else {
        let v = res.json();
        assert_eq!(v["object"], "chat.completion");
        assert_eq!(v["model"], "acme/echo");
    }
    let seen = sim.requests();
    assert_eq!(seen.len(), 1);
    let upstream = &seen[0]["body"];
    assert_eq!(
        upstream["messages"][0]["content"].as_str().unwrap().len(),
        text.len()
    );
    assert!(
        upstream["messages"][0]["content"] == text.as_str(),
        "content must arrive byte for byte"
    );
    assert_eq!(upstream["model"], "echo-1");
}

#[tokio::test]
async fn one_megabyte_with_content_length_buffered() {
    check(1 << 20, Framing::ContentLength, false).await;
}

#[tokio::test]
async fn one_megabyte_chunked_streamed() {
    check(1 << 20, Framing::Chunked, true).await;
}

#[tokio::test]
async fn ten_megabytes_with_content_length_streamed() {
    check(10 << 20, Framing::ContentLength, true).await;
}

#[tokio::test]
async fn ten_megabytes_chunked_buffered() {
    check(10 << 20, Framing::Chunked, false).await;
}

#[tokio::test]
async fn small_body_chunked_with_expect() {
    check(100, Framing::Chunked, false).await;
}

#[tokio::test]
async fn oversized_bodies_get_413_either_framing() {
    let gw = Gateway::builder().max_body("1MiB").start();
    let (_, key) = gw.workspace_with_key();
    for framing in [Framing::ContentLength, Framing::Chunked] {
        let (_, body) = body_of(2 << 20, false);
        let addr = gw.base.trim_start_matches("http://").to_owned();
        let key = key.clone();
        let res = tokio::task::spawn_blocking(move || {
            post(&addr, "/v1/chat/completions", &key, &body, framing, true)
        })
        .await
        .unwrap();
        assert_eq!(res.status, 413);
        assert_eq!(res.json()["error"]["code"], "request_too_large");
    }
}
