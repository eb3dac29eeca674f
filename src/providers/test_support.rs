//! Test helpers shared by every family's translator tests: fixtures, stream runs cut at
//! chosen offsets, and the client frames as JSON.

use bytes::BytesMut;

use super::{Adapter, ResponseCx};

pub fn fixture(name: &str) -> Vec<u8> {
    std::fs::read(format!(
        "{}/tests/fixtures/{name}",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap_or_else(|e| panic!("fixture {name}: {e}"))
}

/// The frames a whole upstream stream becomes, fed to `adapter` in pieces cut at `cuts`.
pub fn run_stream(adapter: &dyn Adapter, cx: ResponseCx, input: &[u8], cuts: &[usize]) -> Vec<u8> {
    let mut t = adapter.stream_translator(cx);
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
