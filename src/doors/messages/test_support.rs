//! Shared by the tests of the door's translators: a response context and the Anthropic events
//! of a stream as JSON.

use std::sync::Arc;

use crate::api::Operation;
use crate::providers::ResponseCx;

pub use crate::providers::test_support::{fixture, stream_fixture};

pub fn cx() -> ResponseCx {
    ResponseCx {
        id: Arc::from("msg_gw7"),
        model_id: Arc::from("google/gemini-test"),
        op: Operation::Chat,
        created: 1_700_000_000,
        exclude_reasoning: false,
    }
}

/// The events of an Anthropic stream as (name, data) pairs; every event is checked to be
/// `event: <name>\ndata: <json>\n\n` with the data's `type` equal to its name.
pub fn events(out: &[u8]) -> Vec<(String, serde_json::Value)> {
    let text = std::str::from_utf8(out).unwrap();
    assert!(
        text.is_empty() || text.ends_with("\n\n"),
        "events end with a blank line: {text:?}"
    );
    text.split("\n\n")
        .filter(|e| !e.is_empty())
        .map(|e| {
            let (name, data) = e
                .strip_prefix("event: ")
                .and_then(|e| e.split_once("\ndata: "))
                .unwrap_or_else(|| panic!("not an event: {e:?}"));
            let data: serde_json::Value = serde_json::from_str(data).unwrap();
            assert_eq!(data["type"], name, "{e}");
            (name.to_owned(), data)
        })
        .collect()
}
