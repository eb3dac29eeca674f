//! Buffered Messages API response → OpenAI `chat.completion`, plus the mappings the stream
//! translator shares (usage, stop reasons).
//!
//! - content blocks: `text` → `content` (joined; null when empty), `thinking` → `reasoning`
//!   (left out when the client excluded reasoning, and when every thinking block is empty —
//!   adaptive thinking with `display: omitted` sends the block with a signature and no text),
//!   `tool_use` → `tool_calls` (`id`, `type: function`, `function: {name, arguments}` with
//!   `arguments` the compact JSON of `input`); others (server tools) ignored;
//! - what Claude needs to see its reasoning again → `reasoning_details` (OpenRouter's shape),
//!   one entry per `thinking` / `redacted_thinking` block, `index` its ordinal among them:
//!   `{type: reasoning.text, text, signature, index}` and `{type: reasoning.encrypted, data,
//!   index}`. Kept when the client excluded reasoning, without the `text` (a client that hid
//!   the text still has to send the signature back); an empty text is left out too;
//! - `stop_reason`: `end_turn` / `stop_sequence` / `pause_turn` → `stop`, `max_tokens` /
//!   `model_context_window_exceeded` → `length`, `refusal` → `content_filter`, `tool_use` →
//!   `tool_calls`;
//! - usage (`docs/wire.md#anthropic-responses-and-usage`): `input = input_tokens`,
//!   `cache_read = cache_read_input_tokens`, `cache_write`/`cache_write_1h` =
//!   `cache_creation_input_tokens` split by `cache_creation.ephemeral_{5m,1h}_input_tokens`
//!   (all 5-minute when the split is absent), `output = output_tokens` (thinking included),
//!   `reasoning = output_tokens_details.thinking_tokens` when present (Anthropic does not
//!   split it otherwise).
//!
//! Fixtures: `anthropic-message-*.json` (table test below).

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::value::RawValue;

use crate::api::completion::{
    Choice, Completion, FunctionCall, Message, ReasoningDetail, ToolCall,
};
use crate::api::Usage;
use crate::providers::chat_answer::{self, AnswerRender};
use crate::providers::common::{compact, Str};
use crate::providers::{ResponseCx, TranslateError, Translated};

#[derive(Deserialize)]
struct MessageResponse<'a> {
    #[serde(borrow, default)]
    content: Vec<BlockIn<'a>>,
    #[serde(borrow, default)]
    stop_reason: Option<Str<'a>>,
    #[serde(default)]
    usage: Option<UsageIn>,
}

#[derive(Deserialize)]
pub(super) struct BlockIn<'a> {
    #[serde(rename = "type", borrow)]
    pub kind: Str<'a>,
    #[serde(borrow, default)]
    pub text: Option<Str<'a>>,
    #[serde(borrow, default)]
    pub thinking: Option<Str<'a>>,
    #[serde(borrow, default)]
    pub id: Option<Str<'a>>,
    #[serde(borrow, default)]
    pub name: Option<Str<'a>>,
    #[serde(borrow, default)]
    pub input: Option<&'a RawValue>,
    #[serde(borrow, default)]
    pub signature: Option<Str<'a>>,
    /// A `redacted_thinking` block's opaque thinking.
    #[serde(borrow, default)]
    pub data: Option<Str<'a>>,
}

/// Anthropic's usage object; every count optional (Vertex's `message_delta` has only
/// `output_tokens`).
#[derive(Deserialize, Default)]
pub(super) struct UsageIn {
    pub input_tokens: Option<u64>,
    pub cache_creation_input_tokens: Option<u64>,
    pub cache_read_input_tokens: Option<u64>,
    pub output_tokens: Option<u64>,
    #[serde(default)]
    pub output_tokens_details: Option<OutputDetails>,
    /// The split of `cache_creation_input_tokens` by cache lifetime (priced apart).
    #[serde(default)]
    pub cache_creation: Option<CacheCreationIn>,
}

#[derive(Deserialize, Default)]
pub(super) struct CacheCreationIn {
    #[serde(default)]
    pub ephemeral_5m_input_tokens: u64,
    #[serde(default)]
    pub ephemeral_1h_input_tokens: u64,
}

#[derive(Deserialize, Default)]
pub(super) struct OutputDetails {
    pub thinking_tokens: Option<u64>,
}

impl UsageIn {
    /// Overwrites the buckets this object carries (counts are cumulative, never added up).
    pub fn apply(&self, u: &mut Usage) {
        if let Some(n) = self.input_tokens {
            u.input = n;
        }
        if let Some(n) = self.cache_read_input_tokens {
            u.cache_read = n;
        }
        if let Some(split) = &self.cache_creation {
            u.cache_write = split.ephemeral_5m_input_tokens;
            u.cache_write_1h = split.ephemeral_1h_input_tokens;
        }
        // The total is authoritative; what the last split did not put in the 1-hour cache
        // was written for 5 minutes.
        if let Some(n) = self.cache_creation_input_tokens {
            u.cache_write = n.saturating_sub(u.cache_write_1h);
        }
        if let Some(n) = self.output_tokens {
            u.output = n;
        }
        if let Some(n) = self
            .output_tokens_details
            .as_ref()
            .and_then(|d| d.thinking_tokens)
        {
            u.reasoning = n;
        }
    }
}

/// The OpenAI `finish_reason` of an Anthropic `stop_reason`.
pub(super) fn finish_reason(stop_reason: &str) -> &'static str {
    match stop_reason {
        "max_tokens" | "model_context_window_exceeded" => "length",
        "refusal" => "content_filter",
        "tool_use" => "tool_calls",
        _ => "stop",
    }
}

/// The `reasoning_details` entry of a `thinking` block (the `n`th reasoning block): its text
/// (unless excluded or empty) and its signature.
fn thinking_detail<'a>(b: &'a BlockIn<'_>, n: u32, exclude: bool) -> ReasoningDetail<'a> {
    ReasoningDetail {
        kind: "reasoning.text",
        text: b
            .thinking
            .as_deref()
            .filter(|t| !t.is_empty() && !exclude)
            .map(Cow::Borrowed),
        signature: b.signature.as_deref().map(Cow::Borrowed),
        data: None,
        index: n,
    }
}

/// The `reasoning_details` entry of a `redacted_thinking` block (the `n`th reasoning block).
pub(super) fn redacted_detail<'a>(b: &'a BlockIn<'_>, n: u32) -> ReasoningDetail<'a> {
    ReasoningDetail {
        kind: "reasoning.encrypted",
        text: None,
        signature: None,
        data: b.data.as_deref().map(Cow::Borrowed),
        index: n,
    }
}

pub(super) fn translate(
    body: &[u8],
    cx: &ResponseCx,
    door: Option<&dyn AnswerRender>,
) -> Result<Translated, TranslateError> {
    let resp: MessageResponse =
        crate::api::json::from_slice(body).map_err(|e| TranslateError::Json(e.to_string()))?;
    let mut usage = Usage::default();
    if let Some(u) = &resp.usage {
        u.apply(&mut usage);
    }
    let mut text = String::new();
    let mut thoughts = String::new();
    let mut tool_calls = Vec::new();
    let mut details = Vec::new();
    for b in &resp.content {
        match &*b.kind {
            "text" => text.push_str(b.text.as_deref().unwrap_or("")),
            "thinking" => {
                let thought = b.thinking.as_deref().unwrap_or("");
                thoughts.push_str(thought);
                let index = details.len() as u32;
                details.push(thinking_detail(b, index, cx.exclude_reasoning));
            }
            "redacted_thinking" => {
                let index = details.len() as u32;
                details.push(redacted_detail(b, index));
            }
            "tool_use" => tool_calls.push(ToolCall {
                index: None,
                id: b.id.as_deref().map(Cow::Borrowed),
                kind: Some("function"),
                function: FunctionCall {
                    name: b.name.as_deref(),
                    arguments: b
                        .input
                        .map_or_else(|| "{}".to_owned(), |i| compact(i.get())),
                },
            }),
            _ => {}
        }
    }
    let finish = resp.stop_reason.as_deref().map_or("stop", finish_reason);
    let choice = Choice {
        index: 0,
        message: Message {
            role: "assistant",
            content: (!text.is_empty()).then_some(text),
            reasoning: (!thoughts.is_empty() && !cx.exclude_reasoning).then_some(thoughts),
            reasoning_details: details,
            tool_calls,
        },
        logprobs: None,
        finish_reason: finish,
    };
    let completion = Completion::new(
        &cx.id,
        cx.created,
        &cx.model_id,
        vec![choice],
        usage.to_openai(),
    );
    chat_answer::render(door, &completion, usage, None, cx)
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{cx, fixture};
    use super::*;
    use serde_json::{json, Value};

    fn run(name: &str, exclude: bool) -> (Value, Usage) {
        let mut c = cx();
        c.exclude_reasoning = exclude;
        let t = translate(&fixture(name), &c, None).unwrap();
        (serde_json::from_slice(&t.body).unwrap(), t.usage)
    }

    #[test]
    fn fixtures() {
        let (v, u) = run("anthropic-message-text.json", false);
        assert_eq!(v["object"], "chat.completion");
        assert_eq!(v["id"], "chatcmpl-gw7");
        assert_eq!(v["model"], "anthropic/claude-test");
        assert_eq!(v["created"], 1_700_000_000);
        let m = &v["choices"][0]["message"];
        assert_eq!(m["role"], "assistant");
        assert!(m["content"]
            .as_str()
            .unwrap()
            .starts_with("Hello! I'm doing well"));
        assert!(m.get("reasoning").is_none());
        assert_eq!(v["choices"][0]["finish_reason"], "stop");
        assert_eq!(
            u,
            Usage {
                input: 12,
                output: 29,
                ..Usage::default()
            }
        );
        assert_eq!(v["usage"]["total_tokens"], 41);

        let (v, u) = run("anthropic-message-cache-read-and-write.json", false);
        assert_eq!(
            u,
            Usage {
                input: 3,
                cache_read: 1111,
                cache_write: 418,
                output: 33,
                reasoning: 0,
                ..Usage::default()
            }
        );
        assert_eq!(
            v["usage"],
            json!({"prompt_tokens": 1532, "completion_tokens": 33, "total_tokens": 1565,
                   "prompt_tokens_details": {"cached_tokens": 1111, "cache_write_tokens": 418},
                   "completion_tokens_details": {"reasoning_tokens": 0}})
        );

        let (v, u) = run("anthropic-message-thinking.json", false);
        let m = &v["choices"][0]["message"];
        assert_eq!(m["reasoning"], "925 divided by 5 = 185");
        assert_eq!(m["content"], "925 ÷ 5 = 185");
        assert_eq!((u.input, u.output), (69, 33));
        let sig = "Er4BCkYICxgCKkCoxqLHLrx4mFL9Ox7/aHKht87WDzXfvZ7qbZKSnHV8imA5b3LXxuVqcXQ9z5sXwDx20JIW/+6DJehOSNK72L83Egx0T9s7VzB6QUK9g5kaDO9lGaWN5CPEDJU0lyIw4+Ed3q4N9w+16h3cfQ+9stJXHCl+1nYDxjIOLcyJT8Ug/LTmtlp4bbxWmmfNicayKiasdReHiOnqz1sKEF0pR4kcnF5mQGdLxk8q3A3NY+wGsH8MtUIqxRgB";
        assert_eq!(
            m["reasoning_details"],
            json!([{"type": "reasoning.text", "text": "925 divided by 5 = 185", "signature": sig, "index": 0}])
        );
        let (v, _) = run("anthropic-message-thinking.json", true);
        let m = &v["choices"][0]["message"];
        assert!(m.get("reasoning").is_none());
        assert_eq!(m["content"], "925 ÷ 5 = 185");
        assert_eq!(
            m["reasoning_details"],
            json!([{"type": "reasoning.text", "signature": sig, "index": 0}]),
            "the signature stays when the text is excluded"
        );
        let (v, _) = run("anthropic-message-text.json", false);
        assert!(v["choices"][0]["message"]
            .get("reasoning_details")
            .is_none());
    }

    #[test]
    fn tool_use_and_signed_reasoning() {
        let body = json!({"content": [
            {"type": "thinking", "thinking": "Call it.", "signature": "c2lnMQ=="},
            {"type": "redacted_thinking", "data": "cmVkYWN0ZWQ="},
            {"type": "text", "text": "Checking."},
            {"type": "tool_use", "id": "toolu_01A", "name": "get_weather", "input": {"city": "Paris", "days": [1, 2]}},
            {"type": "thinking", "thinking": "", "signature": "c2lnMg=="},
            {"type": "tool_use", "id": "toolu_01B", "name": "now", "input": {}},
            {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {"query": "q"}}
        ], "stop_reason": "tool_use", "usage": {"input_tokens": 10, "output_tokens": 50}});
        // Anthropic's own answers are compact; a spaced one is compacted all the same.
        let bytes = serde_json::to_vec_pretty(&body).unwrap();
        for exclude in [false, true] {
            let mut c = cx();
            c.exclude_reasoning = exclude;
            let v: Value =
                serde_json::from_slice(&translate(&bytes, &c, None).unwrap().body).unwrap();
            let choice = &v["choices"][0];
            assert_eq!(choice["finish_reason"], "tool_calls");
            let m = &choice["message"];
            assert_eq!(m["content"], "Checking.");
            assert_eq!(
                m["tool_calls"],
                json!([
                    {"id": "toolu_01A", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\",\"days\":[1,2]}"}},
                    {"id": "toolu_01B", "type": "function", "function": {"name": "now", "arguments": "{}"}}
                ])
            );
            let first = if exclude {
                json!({"type": "reasoning.text", "signature": "c2lnMQ==", "index": 0})
            } else {
                json!({"type": "reasoning.text", "text": "Call it.", "signature": "c2lnMQ==", "index": 0})
            };
            assert_eq!(
                m["reasoning_details"],
                json!([
                    first,
                    {"type": "reasoning.encrypted", "data": "cmVkYWN0ZWQ=", "index": 1},
                    {"type": "reasoning.text", "signature": "c2lnMg==", "index": 2}
                ]),
                "exclude: {exclude}"
            );
            assert_eq!(m.get("reasoning").is_some(), !exclude);
        }
    }

    #[test]
    fn empty_thinking_blocks_give_no_reasoning() {
        let run = |content: Value| {
            let body = json!({"content": content, "stop_reason": "end_turn",
                "usage": {"input_tokens": 3, "output_tokens": 40}});
            let t = translate(&serde_json::to_vec(&body).unwrap(), &cx(), None).unwrap();
            let v: Value = serde_json::from_slice(&t.body).unwrap();
            (v["choices"][0]["message"].clone(), t.usage)
        };
        // Adaptive thinking, display omitted: the block is there, signed, and empty.
        let (m, u) = run(json!([
            {"type": "thinking", "thinking": "", "signature": "EqQBCkYIBxgCKkA="},
            {"type": "text", "text": "Echo: hi"}
        ]));
        assert!(m.get("reasoning").is_none(), "{m}");
        assert_eq!(m["content"], "Echo: hi");
        assert_eq!(u.output, 40, "thinking is still billed as output");
        let (m, _) = run(json!([
            {"type": "thinking", "thinking": "", "signature": "a"},
            {"type": "thinking", "thinking": "summary", "signature": "b"},
            {"type": "text", "text": "x"}
        ]));
        assert_eq!(m["reasoning"], "summary");
    }

    #[test]
    fn cache_writes_are_split_by_lifetime() {
        let apply = |objects: &[&str]| {
            let mut u = Usage::default();
            for o in objects {
                serde_json::from_str::<UsageIn>(o).unwrap().apply(&mut u);
            }
            u
        };
        let split = r#"{"input_tokens":5,"cache_creation_input_tokens":1000,
            "cache_creation":{"ephemeral_5m_input_tokens":300,"ephemeral_1h_input_tokens":700}}"#;
        let u = apply(&[split]);
        assert_eq!((u.cache_write, u.cache_write_1h), (300, 700));
        assert_eq!(u.prompt_tokens(), 1005);
        // A later object repeating only the total keeps the split it does not contradict.
        let u = apply(&[
            split,
            r#"{"cache_creation_input_tokens":1000,"output_tokens":9}"#,
        ]);
        assert_eq!((u.cache_write, u.cache_write_1h, u.output), (300, 700, 9));
        // No split: every written token is a 5-minute write.
        let u = apply(&[r#"{"cache_creation_input_tokens":418}"#]);
        assert_eq!((u.cache_write, u.cache_write_1h), (418, 0));
    }

    #[test]
    fn stop_reasons_and_details() {
        for (reason, want) in [
            ("end_turn", "stop"),
            ("stop_sequence", "stop"),
            ("pause_turn", "stop"),
            ("max_tokens", "length"),
            ("model_context_window_exceeded", "length"),
            ("refusal", "content_filter"),
            ("tool_use", "tool_calls"),
        ] {
            let body = json!({"content": [{"type": "text", "text": ""}], "stop_reason": reason,
                "usage": {"input_tokens": 1, "output_tokens": 9, "output_tokens_details": {"thinking_tokens": 4}}});
            let t = translate(&serde_json::to_vec(&body).unwrap(), &cx(), None).unwrap();
            let v: Value = serde_json::from_slice(&t.body).unwrap();
            assert_eq!(v["choices"][0]["finish_reason"], want, "{reason}");
            assert!(v["choices"][0]["message"]["content"].is_null());
            assert_eq!(t.usage.reasoning, 4);
            assert_eq!(
                v["usage"]["completion_tokens_details"]["reasoning_tokens"],
                4
            );
        }
        assert!(matches!(
            translate(b"{oops", &cx(), None),
            Err(TranslateError::Json(_))
        ));
    }
}
