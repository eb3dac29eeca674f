//! The buffered answer: the `chat.completion` an adapter produced → an Anthropic `message`.
//!
//! Content blocks come in the order Anthropic writes them: the thinking (from
//! `message.reasoning`, with an empty `signature`: there is no Anthropic signature to give),
//! the text, then one `tool_use` block per tool call. Usage is rendered from the exact
//! [`Usage`] buckets the adapter counted, never re-read from the completion's JSON.

use std::borrow::Cow;

use bytes::Bytes;
use serde::Serialize;
use serde_json::value::RawValue;

use crate::api::Usage;
use crate::doors::chat_in::{first_choice, CompletionChoiceIn, FunctionIn};
use crate::providers::chat_answer::{AnswerRender, ChatAnswer};
use crate::providers::{ResponseCx, TranslateError};

/// The Anthropic message for `completion`, a chat completion's JSON (the first choice), with
/// `usage` and `cx`'s id and model.
pub fn to_message(
    completion: &[u8],
    usage: &Usage,
    cx: &ResponseCx,
) -> Result<Bytes, TranslateError> {
    AsMessage.render(ChatAnswer::Json(completion), usage, cx)
}

/// The Messages door's buffered answers.
pub struct AsMessage;

impl AnswerRender for AsMessage {
    fn render(
        &self,
        answer: ChatAnswer<'_>,
        usage: &Usage,
        cx: &ResponseCx,
    ) -> Result<Bytes, TranslateError> {
        message(first_choice(answer)?, usage, cx)
    }
}

fn message(
    choice: CompletionChoiceIn<'_>,
    usage: &Usage,
    cx: &ResponseCx,
) -> Result<Bytes, TranslateError> {
    let mut m = choice.message;
    let mut content = Vec::with_capacity(2 + m.tool_calls.len());
    if let Some(thinking) = m.reasoning().filter(|t| !t.is_empty()) {
        content.push(Block::Thinking {
            thinking: thinking.0,
            signature: "",
        });
    }
    let refused = m.content.is_none() && m.refusal.is_some();
    if let Some(text) = m.content.or(m.refusal).filter(|t| !t.is_empty()) {
        content.push(Block::Text { text: text.0 });
    }
    for call in m.tool_calls {
        let (
            Some(id),
            Some(FunctionIn {
                name: Some(name),
                arguments,
            }),
        ) = (call.id, call.function)
        else {
            return Err(TranslateError::Shape(
                "a tool call without its id or function name".into(),
            ));
        };
        content.push(Block::ToolUse {
            id: id.0,
            name: name.0,
            input: input(arguments.as_deref()),
        });
    }
    let stop_reason = if refused {
        "refusal"
    } else {
        stop_reason(choice.finish_reason.as_deref())
    };
    let message = MessageOut {
        id: &cx.id,
        kind: "message",
        role: "assistant",
        model: &cx.model_id,
        content,
        stop_reason,
        stop_sequence: None,
        usage: UsageOut::of(usage),
    };
    let mut body = Vec::with_capacity(ENVELOPE + text_len(&message.content));
    crate::api::json::append(&mut body, &message)
        .map(|()| Bytes::from(body))
        .map_err(|e| TranslateError::Shape(e.to_string()))
}

/// About what a message's JSON holds besides its blocks' text.
const ENVELOPE: usize = 384;

/// The text a message's blocks carry: what its JSON's size mostly is.
fn text_len(content: &[Block<'_>]) -> usize {
    content
        .iter()
        .map(|b| match b {
            Block::Thinking { thinking, .. } => thinking.len(),
            Block::Text { text } => text.len(),
            Block::ToolUse { id, name, input } => {
                id.len() + name.len() + input.0.as_ref().map_or(2, |raw| raw.get().len()) + 64
            }
        })
        .sum()
}

/// Anthropic's `stop_reason` for an OpenAI `finish_reason`.
pub(super) fn stop_reason(finish_reason: Option<&str>) -> &'static str {
    match finish_reason {
        Some("length") => "max_tokens",
        Some("tool_calls" | "function_call") => "tool_use",
        Some("content_filter") => "refusal",
        _ => "end_turn",
    }
}

/// A tool call's arguments as the `input` object; anything but a JSON object is `{}`.
fn input(arguments: Option<&str>) -> Input {
    Input(
        arguments
            .map(str::trim)
            .filter(|a| a.starts_with('{'))
            .and_then(|a| RawValue::from_string(a.to_owned()).ok()),
    )
}

/// A tool call's `input`: the arguments object as the model wrote it, or `{}`.
pub(super) struct Input(Option<Box<RawValue>>);

impl Serialize for Input {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        match &self.0 {
            Some(raw) => raw.serialize(s),
            None => s.serialize_map(Some(0))?.end(),
        }
    }
}

/// Anthropic's `usage` from the gateway's disjoint buckets: `input_tokens` counts uncached
/// input only, as Anthropic's does.
#[derive(Serialize)]
pub(super) struct UsageOut {
    pub input_tokens: u64,
    pub cache_creation_input_tokens: u64,
    pub cache_read_input_tokens: u64,
    pub cache_creation: CacheCreation,
    pub output_tokens: u64,
}

#[derive(Serialize)]
pub(super) struct CacheCreation {
    pub ephemeral_5m_input_tokens: u64,
    pub ephemeral_1h_input_tokens: u64,
}

impl UsageOut {
    pub fn of(u: &Usage) -> Self {
        UsageOut {
            input_tokens: u.input.saturating_add(u.audio_input),
            cache_creation_input_tokens: u.cache_write.saturating_add(u.cache_write_1h),
            cache_read_input_tokens: u.cache_read,
            cache_creation: CacheCreation {
                ephemeral_5m_input_tokens: u.cache_write,
                ephemeral_1h_input_tokens: u.cache_write_1h,
            },
            output_tokens: u.output,
        }
    }
}

#[derive(Serialize)]
struct MessageOut<'a> {
    id: &'a str,
    #[serde(rename = "type")]
    kind: &'static str,
    role: &'static str,
    model: &'a str,
    content: Vec<Block<'a>>,
    stop_reason: &'static str,
    stop_sequence: Option<()>,
    usage: UsageOut,
}

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Block<'a> {
    Thinking {
        thinking: Cow<'a, str>,
        signature: &'static str,
    },
    Text {
        text: Cow<'a, str>,
    },
    ToolUse {
        id: Cow<'a, str>,
        name: Cow<'a, str>,
        input: Input,
    },
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{cx, fixture};
    use super::*;
    use crate::providers::{gemini::Gemini, openai_compat::OpenAiCompat, Adapter};
    use serde_json::{json, Value};

    fn message(completion: Value, usage: &Usage) -> Value {
        let bytes = to_message(&serde_json::to_vec(&completion).unwrap(), usage, &cx()).unwrap();
        serde_json::from_slice(&bytes).unwrap()
    }

    fn completion(message: Value, finish: &str) -> Value {
        json!({"id": "x", "object": "chat.completion", "choices": [
            {"index": 0, "message": message, "finish_reason": finish}
        ]})
    }

    #[test]
    fn thinking_text_and_tool_use_come_in_anthropics_order() {
        let m = message(
            completion(
                json!({"role": "assistant", "content": "Let me look.", "reasoning": "User wants weather.",
                "tool_calls": [
                    {"id": "call_gw7_0.c2ln", "type": "function", "function": {"name": "weather", "arguments": "{\"city\":\"Paris\",\"days\":[1,2]}"}},
                    {"id": "call_gw7_1", "type": "function", "function": {"name": "now", "arguments": ""}},
                    {"id": "call_gw7_2", "type": "function", "function": {"name": "bad", "arguments": "{\"cut"}},
                    {"id": "call_gw7_3", "type": "function", "function": {"name": "list", "arguments": "[1]"}}
                ]}),
                "tool_calls",
            ),
            &Usage::default(),
        );
        assert_eq!(m["id"], "msg_gw7");
        assert_eq!(m["type"], "message");
        assert_eq!(m["role"], "assistant");
        assert_eq!(m["model"], "google/gemini-test");
        assert_eq!(
            m["content"],
            json!([
                {"type": "thinking", "thinking": "User wants weather.", "signature": ""},
                {"type": "text", "text": "Let me look."},
                {"type": "tool_use", "id": "call_gw7_0.c2ln", "name": "weather", "input": {"city": "Paris", "days": [1, 2]}},
                {"type": "tool_use", "id": "call_gw7_1", "name": "now", "input": {}},
                {"type": "tool_use", "id": "call_gw7_2", "name": "bad", "input": {}},
                {"type": "tool_use", "id": "call_gw7_3", "name": "list", "input": {}}
            ])
        );
        assert_eq!(m["stop_reason"], "tool_use");
        assert_eq!(m["stop_sequence"], Value::Null);
    }

    #[test]
    fn tool_input_keeps_the_models_key_order() {
        let c = completion(
            json!({"role": "assistant", "content": null, "tool_calls": [
                {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{\"z\":1,\"a\":2}"}}
            ]}),
            "tool_calls",
        );
        let bytes = to_message(&serde_json::to_vec(&c).unwrap(), &Usage::default(), &cx()).unwrap();
        let text = std::str::from_utf8(&bytes).unwrap();
        assert!(
            text.contains(
                r#""content":[{"type":"tool_use","id":"c","name":"f","input":{"z":1,"a":2}}]"#
            ),
            "{text}"
        );
    }

    #[test]
    fn finish_reasons_become_stop_reasons() {
        for (finish, stop) in [
            ("stop", "end_turn"),
            ("length", "max_tokens"),
            ("tool_calls", "tool_use"),
            ("content_filter", "refusal"),
            ("something_new", "end_turn"),
        ] {
            let m = message(
                completion(json!({"role": "assistant", "content": "x"}), finish),
                &Usage::default(),
            );
            assert_eq!(m["stop_reason"], stop, "{finish}");
        }
        let m = message(
            json!({"choices": [{"index": 0, "message": {"role": "assistant", "content": "x"}, "finish_reason": null}]}),
            &Usage::default(),
        );
        assert_eq!(m["stop_reason"], "end_turn");
        let m = message(
            completion(
                json!({"role": "assistant", "content": null, "refusal": "I can't help with that."}),
                "stop",
            ),
            &Usage::default(),
        );
        assert_eq!(
            m["content"],
            json!([{"type": "text", "text": "I can't help with that."}])
        );
        assert_eq!(m["stop_reason"], "refusal");
        let m = message(
            completion(
                json!({"role": "assistant", "content": null}),
                "content_filter",
            ),
            &Usage::default(),
        );
        assert_eq!(m["content"], json!([]), "a blocked prompt has no content");
    }

    #[test]
    fn usage_comes_from_the_exact_buckets() {
        let usage = Usage {
            input: 11,
            audio_input: 4,
            cache_read: 300,
            cache_write: 50,
            cache_write_1h: 7,
            output: 90,
            reasoning: 60,
            cache_storage_token_seconds: 9,
        };
        // The completion's own usage says something else: it is not read.
        let mut c = completion(json!({"role": "assistant", "content": "x"}), "stop");
        c["usage"] = json!({"prompt_tokens": 1, "completion_tokens": 1});
        let m = message(c, &usage);
        assert_eq!(
            m["usage"],
            json!({
                "input_tokens": 15,
                "cache_creation_input_tokens": 57,
                "cache_read_input_tokens": 300,
                "cache_creation": {"ephemeral_5m_input_tokens": 50, "ephemeral_1h_input_tokens": 7},
                "output_tokens": 90
            })
        );
    }

    #[test]
    fn gemini_answers_render_as_messages() {
        let body = fixture("gemini-function-call-thought-signature-2.5-pro-devapi.json");
        let chat = Gemini.translate_buffered(&body, &cx()).unwrap();
        let m: Value =
            serde_json::from_slice(&to_message(&chat.body, &chat.usage, &cx()).unwrap()).unwrap();
        let content = m["content"].as_array().unwrap();
        let kinds: Vec<&str> = content
            .iter()
            .map(|b| b["type"].as_str().unwrap())
            .collect();
        assert_eq!(kinds, ["thinking", "tool_use"]);
        let g: Value = serde_json::from_slice(&body).unwrap();
        let parts = &g["candidates"][0]["content"]["parts"];
        assert_eq!(content[0]["thinking"], parts[0]["text"]);
        assert_eq!(content[1]["name"], parts[1]["functionCall"]["name"]);
        assert_eq!(content[1]["input"], parts[1]["functionCall"]["args"]);
        let id = content[1]["id"].as_str().unwrap();
        assert!(
            id.starts_with("call_msggw7_0.") && id.len() > 100,
            "the minted id carries the thought signature: {id}"
        );
        assert_eq!(m["stop_reason"], "tool_use");
        assert_eq!(
            (
                m["usage"]["input_tokens"].as_u64(),
                m["usage"]["output_tokens"].as_u64()
            ),
            (Some(38), Some(8 + 501))
        );

        let body = fixture("gemini-generate-thinking-2.5-flash-devapi.json");
        let chat = Gemini.translate_buffered(&body, &cx()).unwrap();
        let m: Value =
            serde_json::from_slice(&to_message(&chat.body, &chat.usage, &cx()).unwrap()).unwrap();
        let kinds: Vec<&str> = m["content"]
            .as_array()
            .unwrap()
            .iter()
            .map(|b| b["type"].as_str().unwrap())
            .collect();
        assert_eq!(kinds, ["thinking", "text"]);
        assert_eq!(m["stop_reason"], "end_turn");
    }

    #[test]
    fn openai_answers_render_as_messages() {
        let body = fixture("openai-chat-completion.json");
        let chat = OpenAiCompat.translate_buffered(&body, &cx()).unwrap();
        let m: Value =
            serde_json::from_slice(&to_message(&chat.body, &chat.usage, &cx()).unwrap()).unwrap();
        let orig: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(
            m["content"],
            json!([{"type": "text", "text": orig["choices"][0]["message"]["content"]}])
        );
        assert_eq!(m["usage"]["input_tokens"], 16);
        assert_eq!(m["usage"]["output_tokens"], 363);
        assert_eq!(m["model"], "google/gemini-test");
    }

    #[test]
    fn unreadable_completions_are_translate_errors() {
        assert!(matches!(
            to_message(b"{", &Usage::default(), &cx()),
            Err(TranslateError::Json(_))
        ));
        assert!(matches!(
            to_message(br#"{"choices":[]}"#, &Usage::default(), &cx()),
            Err(TranslateError::Shape(_))
        ));
        let nameless = br#"{"choices":[{"message":{"tool_calls":[{"id":"c","function":{"arguments":"{}"}}]}}]}"#;
        assert!(matches!(
            to_message(nameless, &Usage::default(), &cx()),
            Err(TranslateError::Shape(_))
        ));
    }
}
