//! Shared by the tests of the door's translators: a response context, the door's events as
//! JSON (the framing and numbering checked on the way), and a chat stream folded into the
//! completion the same answer gives buffered.

use std::sync::Arc;

use bytes::BytesMut;
use serde_json::{json, Map, Value};

use crate::api::{Operation, Usage};
use crate::providers::test_support::frames;
use crate::providers::{Adapter, ResponseCx};

pub use crate::providers::test_support::{fixture, stream_fixture};

pub fn cx() -> ResponseCx {
    ResponseCx {
        id: Arc::from("resp_gw7"),
        model_id: Arc::from("google/gemini-test"),
        op: Operation::Chat,
        created: 1_700_000_000,
        exclude_reasoning: false,
    }
}

/// The events of a Responses stream as (name, data) pairs. Every event is checked to be
/// `event: <name>\ndata: <json>\n\n`, its data's `type` equal to its name, its
/// `sequence_number` one more than the last (from 0).
pub fn events(out: &[u8]) -> Vec<(String, Value)> {
    let text = std::str::from_utf8(out).unwrap();
    assert!(
        text.is_empty() || text.ends_with("\n\n"),
        "events end with a blank line: {text:?}"
    );
    text.split("\n\n")
        .filter(|e| !e.is_empty())
        .zip(0u64..)
        .map(|(e, seq)| {
            let (name, data) = e
                .strip_prefix("event: ")
                .and_then(|e| e.split_once("\ndata: "))
                .unwrap_or_else(|| panic!("not an event: {e:?}"));
            let data: Value = serde_json::from_str(data).unwrap();
            assert_eq!(data["type"], name, "{e}");
            assert_eq!(data["sequence_number"], seq, "{e}");
            (name.to_owned(), data)
        })
        .collect()
}

/// What `adapter`'s own stream translator makes of `input` (the chat frames), folded into the
/// `chat.completion` the same answer gives buffered, with the translator's final usage. A
/// reasoning detail without text gets the reasoning text streamed since the block before, as
/// a buffered answer carries it.
pub fn chat_answer(adapter: &dyn Adapter, input: &[u8]) -> (Vec<u8>, Usage) {
    let mut t = adapter.stream_translator(cx());
    let mut out = BytesMut::new();
    t.feed(input, &mut out);
    t.finish(&mut out);
    let mut content = String::new();
    let mut refusal = String::new();
    let mut reasoning = String::new();
    let mut block_text = String::new();
    let mut details: Vec<Value> = Vec::new();
    let mut calls: Vec<(u64, Value)> = Vec::new();
    let mut finish = Value::Null;
    for frame in frames(&out) {
        let choices = frame["choices"].as_array().into_iter().flatten();
        let Some(choice) = choices.into_iter().find(|c| c["index"] == 0) else {
            continue;
        };
        let delta = &choice["delta"];
        let said = |key: &str| delta[key].as_str().unwrap_or("").to_owned();
        content += &said("content");
        refusal += &said("refusal");
        let thought = said("reasoning") + &said("reasoning_content");
        reasoning += &thought;
        block_text += &thought;
        for d in delta["reasoning_details"].as_array().into_iter().flatten() {
            let same = details.last().is_some_and(|last: &Value| {
                last["index"] == d["index"] && last["type"] == d["type"]
            });
            if !same {
                details.push(json!({"type": d["type"], "index": d["index"]}));
            }
            let last = details.last_mut().unwrap().as_object_mut().unwrap();
            if let Some(text) = d["text"].as_str() {
                let so_far = last.get("text").and_then(Value::as_str).unwrap_or("");
                last.insert("text".into(), json!(format!("{so_far}{text}")));
            }
            for key in ["signature", "data"] {
                if let Some(v) = d[key].as_str().filter(|v| !v.is_empty()) {
                    last.insert(key.into(), json!(v));
                }
            }
            let closes = last.contains_key("signature") || last.contains_key("data");
            if closes {
                let text = last.get("text").and_then(Value::as_str).unwrap_or("");
                if text.is_empty() && d["type"] == "reasoning.text" {
                    last.insert("text".into(), json!(block_text));
                }
                block_text.clear();
            }
        }
        for call in delta["tool_calls"].as_array().into_iter().flatten() {
            let index = call["index"].as_u64().unwrap();
            if calls.last().map(|(i, _)| *i) != Some(index) {
                if calls.iter().any(|(i, _)| *i == index) {
                    continue; // a late fragment of an earlier call: streams drop it too
                }
                calls.push((
                    index,
                    json!({"id": call["id"], "type": "function",
                        "function": {"name": call["function"]["name"], "arguments": ""}}),
                ));
            }
            let so_far = &mut calls.last_mut().unwrap().1["function"]["arguments"];
            let args = call["function"]["arguments"].as_str().unwrap_or("");
            *so_far = json!(format!("{}{args}", so_far.as_str().unwrap()));
        }
        if !choice["finish_reason"].is_null() {
            finish = choice["finish_reason"].clone();
        }
    }
    let mut message = Map::new();
    message.insert("role".into(), json!("assistant"));
    let text_or_null = |s: String| if s.is_empty() { Value::Null } else { json!(s) };
    message.insert("content".into(), text_or_null(content));
    if !refusal.is_empty() {
        message.insert("refusal".into(), json!(refusal));
    }
    if !reasoning.is_empty() {
        message.insert("reasoning".into(), json!(reasoning));
    }
    if !details.is_empty() {
        message.insert("reasoning_details".into(), json!(details));
    }
    if !calls.is_empty() {
        let calls: Vec<Value> = calls.into_iter().map(|(_, c)| c).collect();
        message.insert("tool_calls".into(), json!(calls));
    }
    let completion = json!({"id": "x", "object": "chat.completion", "choices": [
        {"index": 0, "message": message, "finish_reason": finish}
    ]});
    (serde_json::to_vec(&completion).unwrap(), t.usage())
}
