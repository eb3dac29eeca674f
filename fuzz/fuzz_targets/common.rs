//! What every target shares: the default catalog, credentials that let every route plan, the
//! response context, and the one property every translator must keep — each `data:` frame it
//! emits (but `[DONE]`) is valid JSON.
#![allow(dead_code)]

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use tollgate::api::{Door, Operation};
use tollgate::catalog::{Family, Snapshot};
use tollgate::config::ProvidersConf;
use tollgate::doors::bridged;
use tollgate::providers::anthropic::AnthropicNative;
use tollgate::providers::{adapter_for, Adapter, Credentials, ResponseCx, Secret};
use tollgate::store::CatalogRows;

const CATALOG: &str = include_str!("../../conf/catalog.yaml");

pub fn catalog() -> Snapshot {
    let rows: CatalogRows = serde_yaml::from_str(CATALOG).expect("the default catalog parses");
    Snapshot::build(&rows, &ProvidersConf::default(), &HashMap::new())
}

pub fn credentials() -> Credentials {
    let creds = Credentials {
        openai: Some(Secret::new("openai-key")),
        gemini: Some(Secret::new("gemini-key")),
        anthropic: Some(Secret::new("anthropic-key")),
        anthropic_version: "2023-06-01".into(),
        vertex_project: Some("fuzz-project".into()),
        ..Credentials::default()
    };
    creds.vertex_token.set(Some(Secret::new("vertex-token")));
    creds
}

pub fn cx(op: Operation, exclude_reasoning: bool) -> ResponseCx {
    ResponseCx {
        id: Arc::from("chatcmpl-fuzz"),
        model_id: Arc::from("fuzz/model"),
        op,
        created: 0,
        exclude_reasoning,
    }
}

pub const MAX_CACHE_TTL: Duration = Duration::from_secs(3600);

/// JSON by the grammar (RFC 8259): numbers beyond f64's range, which pass-through families copy
/// byte for byte, are still JSON.
fn is_json(bytes: &[u8]) -> Result<(), serde_json::Error> {
    serde_json::from_slice::<&serde_json::value::RawValue>(bytes).map(|_| ())
}

/// Asserts that every SSE frame in `out` carries JSON (or `[DONE]`); a frame may name its event
/// (the Messages door's).
pub fn frames_are_json(out: &[u8]) {
    let text = std::str::from_utf8(out).expect("the gateway emits UTF-8");
    for frame in text.split("\n\n").filter(|f| !f.trim().is_empty()) {
        for line in frame.lines() {
            let Some(data) = line.strip_prefix("data: ") else {
                let named = line.starts_with("event: ");
                assert!(line.starts_with(':') || named, "not an SSE data line: {line:?}");
                continue;
            };
            if data != "[DONE]" {
                is_json(data.as_bytes())
                    .unwrap_or_else(|e| panic!("frame is not JSON ({e}): {data:?}"));
            }
        }
    }
}

/// The adapters a family's answers go through on the Messages door: Claude's native pass-through,
/// or the family's own behind the door's translation.
pub fn messages_adapter(family: Family) -> &'static dyn Adapter {
    match family {
        Family::Anthropic => &AnthropicNative,
        other => bridged(Door::Messages, other),
    }
}

/// A buffered answer: never a panic; a translated body is JSON.
pub fn answer(family: Family, data: &[u8]) {
    answer_with(adapter_for(family), data);
}

/// [`answer`] through `adapter`.
pub fn answer_with(adapter: &dyn Adapter, data: &[u8]) {
    let _ = adapter.upstream_error_message(502, data);
    for op in [Operation::Chat, Operation::Embeddings] {
        if let Ok(t) = adapter.translate_buffered(data, &cx(op, data.len() % 2 == 0)) {
            is_json(&t.body).expect("a translated answer is JSON");
        }
    }
}

/// A stream cut where the first byte says: never a panic; every frame is JSON; the output does
/// not depend on where the upstream's bytes were split.
pub fn stream(family: Family, data: &[u8]) {
    stream_with(adapter_for(family), data);
}

/// [`stream`] through `adapter`.
pub fn stream_with(adapter: &dyn Adapter, data: &[u8]) {
    let Some((&seed, body)) = data.split_first() else {
        return;
    };
    let run = |step: usize| {
        let mut t = adapter.stream_translator(cx(Operation::Chat, seed & 1 == 1));
        let mut out = BytesMut::new();
        for chunk in body.chunks(step.max(1)) {
            t.feed(chunk, &mut out);
        }
        t.finish(&mut out);
        out
    };
    let whole = run(body.len());
    frames_are_json(&whole);
    let split = run(usize::from(seed % 7) + 1);
    assert_eq!(
        whole, split,
        "splitting the upstream stream changed the output"
    );
}
