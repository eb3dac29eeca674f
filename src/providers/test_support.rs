//! Test helpers shared by every family's translator tests: fixtures, stream runs cut at
//! chosen offsets, and the client frames as JSON.

use bytes::BytesMut;

use super::{Adapter, ResponseCx, StreamTranslator};

pub fn fixture(name: &str) -> Vec<u8> {
    std::fs::read(format!(
        "{}/tests/fixtures/{name}",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap_or_else(|e| panic!("fixture {name}: {e}"))
}

/// The upstream bytes of a stream fixture. `.chunks.jsonl` fixtures hold one event's JSON a
/// line (the recorder stripped the SSE framing): each becomes a `data:` event ended by
/// `separator`, named after its `type` field when `named` (Anthropic names its events).
pub fn stream_fixture(name: &str, named: bool, separator: &str) -> Vec<u8> {
    let raw = fixture(name);
    if !name.ends_with(".chunks.jsonl") {
        return raw;
    }
    let text = String::from_utf8(raw).unwrap();
    let mut out = String::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        if named {
            let v: serde_json::Value = serde_json::from_str(line).unwrap();
            out.push_str(&format!("event: {}\n", v["type"].as_str().unwrap()));
        }
        out.push_str(&format!("data: {line}{separator}"));
    }
    out.into_bytes()
}

/// The frames a whole upstream stream becomes, fed to `adapter` in pieces cut at `cuts`.
pub fn run_stream(adapter: &dyn Adapter, cx: ResponseCx, input: &[u8], cuts: &[usize]) -> Vec<u8> {
    feed_in_pieces(&mut *adapter.stream_translator(cx), input, cuts)
}

/// What `t` writes for `input` fed in pieces cut at `cuts`, then finished.
pub fn feed_in_pieces(t: &mut dyn StreamTranslator, input: &[u8], cuts: &[usize]) -> Vec<u8> {
    let mut out = BytesMut::new();
    let mut last = 0;
    for &c in cuts.iter().chain([&input.len()]) {
        t.feed(&input[last..c], &mut out);
        last = c;
    }
    t.finish(&mut out);
    out.to_vec()
}

/// Client frames as JSON values; `[DONE]` becomes the string "[DONE]".
pub fn frames(out: &[u8]) -> Vec<serde_json::Value> {
    let text = std::str::from_utf8(out).unwrap();
    assert!(
        text.is_empty() || text.ends_with("\n\n"),
        "frames end with a blank line"
    );
    text.split("\n\n")
        .filter(|f| !f.is_empty())
        .map(|f| {
            let data = f.strip_prefix("data: ").unwrap();
            if data == "[DONE]" {
                serde_json::Value::String("[DONE]".into())
            } else {
                serde_json::from_str(data).unwrap()
            }
        })
        .collect()
}

/// The one upstream request of a plan that has no cache step and no fan-out.
pub fn single(plan: crate::providers::Plan) -> crate::providers::UpstreamRequest {
    match plan {
        crate::providers::Plan::Proxy {
            request,
            cache: None,
        } => request,
        other => panic!("expected one plain request, got {other:?}"),
    }
}
