//! Buffered `GenerateContentResponse` → OpenAI `chat.completion`, plus the wire types and
//! mappings the stream translator shares (usage, finish reasons, tool calls).
//!
//! Why the mappings look as they do (`docs/wire.md#gemini-responses-and-usage`):
//! - parts: `thought: true` text → `message.reasoning` (left out when the client excluded
//!   reasoning), other text → `content` (null when empty), `functionCall` → `tool_calls` with a
//!   minted id carrying the part's `thoughtSignature` (see the module doc of `gemini`);
//! - finish: `STOP` → `stop`, or `tool_calls` when the candidate called a function (Gemini has
//!   no tool-specific reason); `MAX_TOKENS` → `length`; the safety family → `content_filter`;
//!   everything else → `stop`. A blocked prompt (no candidates, `promptFeedback.blockReason`)
//!   is one choice with null content and `content_filter`;
//! - usage: `promptTokenCount` includes the cached part, so `input = prompt − cached +
//!   toolUsePrompt`, `cache_read = cached`; thoughts are billed as output:
//!   `output = candidates + thoughts`, `reasoning = thoughts`.
//!
//! Fixtures: `gemini-generate-*.json`, `gemini-function-call-*.json`,
//! `gemini-prompt-blocked-safety-vertex.json` (table test below).

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::value::RawValue;

use super::{mint_call_id, Str};
use crate::api;
use crate::api::completion::{Choice, Completion, Message, ToolCall};
use crate::api::Usage;
use crate::providers::chat_answer::{self, AnswerRender};
use crate::providers::common::compact;
use crate::providers::{ResponseCx, TranslateError, Translated};

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct GenerateResponse<'a> {
    #[serde(borrow, default)]
    pub candidates: Vec<Candidate<'a>>,
    #[serde(borrow, default)]
    pub prompt_feedback: Option<PromptFeedback<'a>>,
    #[serde(default)]
    pub usage_metadata: Option<UsageMetadata>,
    /// Google's id for the answer, quoted in a support ticket.
    #[serde(borrow, default)]
    pub response_id: Option<Str<'a>>,
    /// Present when Google reports a failure inside a 200 stream.
    #[serde(borrow, default)]
    pub error: Option<&'a RawValue>,
}

impl GenerateResponse<'_> {
    pub fn blocked(&self) -> bool {
        self.prompt_feedback
            .as_ref()
            .is_some_and(|f| f.block_reason.is_some())
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct Candidate<'a> {
    #[serde(borrow, default)]
    pub content: Option<CandidateContent<'a>>,
    #[serde(borrow, default)]
    pub finish_reason: Option<Str<'a>>,
    #[serde(default)]
    pub index: Option<u32>,
}

impl<'a> Candidate<'a> {
    pub fn parts(&self) -> &[Part<'a>] {
        self.content.as_ref().map_or(&[], |c| c.parts.as_slice())
    }
}

#[derive(Deserialize)]
pub(super) struct CandidateContent<'a> {
    #[serde(borrow, default)]
    pub parts: Vec<Part<'a>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct Part<'a> {
    #[serde(borrow, default)]
    pub text: Option<Str<'a>>,
    #[serde(default)]
    pub thought: bool,
    #[serde(borrow, default)]
    pub function_call: Option<FunctionCall<'a>>,
    #[serde(borrow, default)]
    pub thought_signature: Option<Str<'a>>,
}

#[derive(Deserialize)]
pub(super) struct FunctionCall<'a> {
    #[serde(borrow)]
    pub name: Str<'a>,
    #[serde(borrow, default)]
    pub args: Option<&'a RawValue>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct PromptFeedback<'a> {
    #[serde(borrow, default)]
    pub block_reason: Option<Str<'a>>,
}

/// Token counts; Vertex's intermediate stream chunks carry only `trafficType` (no counts).
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct UsageMetadata {
    prompt_token_count: Option<u64>,
    cached_content_token_count: Option<u64>,
    candidates_token_count: Option<u64>,
    thoughts_token_count: Option<u64>,
    tool_use_prompt_token_count: Option<u64>,
    total_token_count: Option<u64>,
    /// Per-modality split of `promptTokenCount` (audio is priced apart).
    #[serde(default)]
    prompt_tokens_details: Vec<ModalityCount>,
    /// Per-modality split of `cachedContentTokenCount`.
    #[serde(default)]
    cache_tokens_details: Vec<ModalityCount>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ModalityCount {
    modality: Modality,
    #[serde(default)]
    token_count: u64,
}

#[derive(Deserialize, PartialEq, Eq)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
enum Modality {
    Audio,
    #[serde(other)]
    Other,
}

fn audio_in(details: &[ModalityCount]) -> u64 {
    details
        .iter()
        .filter(|d| d.modality == Modality::Audio)
        .map(|d| d.token_count)
        .fold(0, u64::saturating_add)
}

impl UsageMetadata {
    /// The disjoint buckets, or `None` when this object has no counts at all.
    pub fn usage(&self) -> Option<Usage> {
        let counts = [
            self.prompt_token_count,
            self.cached_content_token_count,
            self.candidates_token_count,
            self.thoughts_token_count,
            self.tool_use_prompt_token_count,
            self.total_token_count,
        ];
        if counts.iter().all(Option::is_none) {
            return None;
        }
        let cached = self.cached_content_token_count.unwrap_or(0);
        let thoughts = self.thoughts_token_count.unwrap_or(0);
        let audio = audio_in(&self.prompt_tokens_details)
            .saturating_sub(audio_in(&self.cache_tokens_details));
        Some(Usage {
            input: self
                .prompt_token_count
                .unwrap_or(0)
                .saturating_sub(cached)
                .saturating_sub(audio)
                .saturating_add(self.tool_use_prompt_token_count.unwrap_or(0)),
            audio_input: audio,
            cache_read: cached,
            // Saturating: the counts are the upstream's, and a sum that wrapped would bill
            // next to nothing (a saturated one is flagged as unpriceable instead).
            output: self
                .candidates_token_count
                .unwrap_or(0)
                .saturating_add(thoughts),
            reasoning: thoughts,
            ..Usage::default()
        })
    }
}

/// What a Gemini `finishReason` means to an OpenAI client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Finish {
    Stop,
    Length,
    Filter,
}

impl Finish {
    pub fn of(reason: &str) -> Self {
        match reason {
            "MAX_TOKENS" => Self::Length,
            "SAFETY"
            | "RECITATION"
            | "BLOCKLIST"
            | "PROHIBITED_CONTENT"
            | "SPII"
            | "IMAGE_SAFETY"
            | "IMAGE_PROHIBITED_CONTENT"
            | "IMAGE_RECITATION"
            | "LANGUAGE" => Self::Filter,
            _ => Self::Stop,
        }
    }

    /// The OpenAI `finish_reason`; a stop after function calls is `tool_calls`.
    pub fn openai(self, called_tools: bool) -> &'static str {
        match self {
            Self::Stop if called_tools => "tool_calls",
            Self::Stop => "stop",
            Self::Length => "length",
            Self::Filter => "content_filter",
        }
    }
}

/// The `k`-th tool call of response `cx_id`, from a `functionCall` part (its id minted, the
/// part's thought signature inside it).
pub(super) fn tool_call<'a>(
    cx_id: &str,
    k: usize,
    call: &'a FunctionCall<'_>,
    part: &Part<'_>,
) -> ToolCall<'a> {
    ToolCall {
        index: None,
        id: Some(Cow::Owned(mint_call_id(
            cx_id,
            k,
            part.thought_signature.as_deref(),
        ))),
        kind: Some("function"),
        function: api::completion::FunctionCall {
            name: Some(&call.name),
            arguments: call
                .args
                .map_or_else(|| "{}".to_owned(), |a| compact(a.get())),
        },
    }
}

pub(super) fn translate(
    body: &[u8],
    cx: &ResponseCx,
    door: Option<&dyn AnswerRender>,
) -> Result<Translated, TranslateError> {
    let resp: GenerateResponse =
        crate::api::json::from_slice(body).map_err(|e| TranslateError::Json(e.to_string()))?;
    if let Some(error) = resp.error {
        return Err(TranslateError::Shape(super::error::in_stream_message(
            error,
        )));
    }
    let usage = resp
        .usage_metadata
        .as_ref()
        .and_then(UsageMetadata::usage)
        .unwrap_or_default();
    let choices = if resp.candidates.is_empty() && resp.blocked() {
        vec![blocked_choice()]
    } else if resp.candidates.is_empty() {
        return Err(TranslateError::Shape(
            "no candidates and no block reason".into(),
        ));
    } else {
        choices(&resp.candidates, cx)
    };
    let completion = Completion::new(&cx.id, cx.created, &cx.model_id, choices, usage.to_openai());
    let upstream_id = resp.response_id.as_deref().and_then(upstream_id);
    chat_answer::render(door, &completion, usage, upstream_id, cx)
}

/// Gemini's `responseId`, when it is an id a record can keep (1–128 visible ASCII).
fn upstream_id(id: &str) -> Option<Box<str>> {
    let keepable = (1..=128).contains(&id.len()) && id.bytes().all(|b| b.is_ascii_graphic());
    keepable.then(|| id.into())
}

fn blocked_choice<'a>() -> Choice<'a> {
    Choice {
        index: 0,
        message: Message {
            role: "assistant",
            content: None,
            reasoning: None,
            reasoning_details: Vec::new(),
            tool_calls: Vec::new(),
        },
        logprobs: None,
        finish_reason: Finish::Filter.openai(false),
    }
}

/// One choice per candidate; call ids count across candidates so they stay unique.
fn choices<'a>(candidates: &'a [Candidate<'a>], cx: &ResponseCx) -> Vec<Choice<'a>> {
    let mut calls = 0;
    let mut out = Vec::with_capacity(candidates.len());
    for (pos, cand) in candidates.iter().enumerate() {
        let mut text: Vec<&str> = Vec::new();
        let mut thoughts: Vec<&str> = Vec::new();
        let mut tool_calls = Vec::new();
        for part in cand.parts() {
            if let Some(call) = &part.function_call {
                tool_calls.push(tool_call(&cx.id, calls, call, part));
                calls += 1;
            } else if let Some(t) = part.text.as_deref() {
                let into = if part.thought {
                    &mut thoughts
                } else {
                    &mut text
                };
                into.push(t);
            }
        }
        let finish = cand
            .finish_reason
            .as_deref()
            .map_or(Finish::Stop, Finish::of);
        out.push(Choice {
            index: cand.index.unwrap_or(u32::try_from(pos).unwrap_or(u32::MAX)),
            message: Message {
                role: "assistant",
                content: Some(text.concat()).filter(|t| !t.is_empty()),
                reasoning: Some(thoughts.concat())
                    .filter(|t| !t.is_empty() && !cx.exclude_reasoning),
                reasoning_details: Vec::new(),
                tool_calls,
            },
            logprobs: None,
            finish_reason: finish.openai(has_calls(cand)),
        });
    }
    out
}

fn has_calls(cand: &Candidate<'_>) -> bool {
    cand.parts().iter().any(|p| p.function_call.is_some())
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{cx, fixture};
    use super::super::Gemini;
    use super::*;
    use crate::providers::Adapter;
    use serde_json::{json, Value};

    struct Case {
        file: &'static str,
        content: Value,
        reasoning: Option<&'static str>,
        tool_calls: Value,
        finish: &'static str,
        usage: Usage,
    }

    fn usage(input: u64, cache_read: u64, output: u64, reasoning: u64) -> Usage {
        Usage {
            input,
            cache_read,
            cache_write: 0,
            output,
            reasoning,
            ..Usage::default()
        }
    }

    #[test]
    fn counts_near_u64_max_saturate_instead_of_wrapping_to_a_tiny_bill() {
        let max = u64::MAX;
        let m: UsageMetadata = serde_json::from_value(json!({
            "promptTokenCount": 10, "toolUsePromptTokenCount": max,
            "candidatesTokenCount": max, "thoughtsTokenCount": 2,
            "promptTokensDetails": [{"modality": "AUDIO", "tokenCount": max},
                                    {"modality": "AUDIO", "tokenCount": max}],
        }))
        .unwrap();
        let u = m.usage().unwrap();
        assert_eq!((u.input, u.output, u.audio_input), (max, max, max));
    }

    fn thought_of(file: &str) -> String {
        let v: Value = serde_json::from_slice(&fixture(file)).unwrap();
        v["candidates"][0]["content"]["parts"][0]["text"]
            .as_str()
            .unwrap()
            .to_owned()
    }

    fn cases() -> Vec<Case> {
        let sig_25 = "CtQOAVSoXO74PmYr9AFurEIJNTAtfagOIxtRA5FcMPow3t";
        vec![
            Case {
                file: "gemini-generate-thinking-2.5-flash-devapi.json",
                content: json!("Mountain View"),
                reasoning: Some("thought"),
                tool_calls: Value::Null,
                finish: "stop",
                usage: usage(14, 0, 26, 24),
            },
            Case {
                file: "gemini-generate-implicit-cache-2.5-flash-vertex.json",
                content: json!("Red Riding Hood is looking for **directions** in the forest."),
                reasoning: None,
                tool_calls: Value::Null,
                finish: "stop",
                usage: usage(12013 - 11243, 11243, 15 + 73, 73),
            },
            Case {
                file: "gemini-generate-text-gemini3-pro-devapi.json",
                content: json!("There are **3** r's in strawberry.\n\nHere is the breakdown: st**r**awbe**rr**y."),
                reasoning: None,
                tool_calls: Value::Null,
                finish: "stop",
                usage: usage(9, 0, 28 + 244, 244),
            },
            Case {
                file: "gemini-generate-tool-use-prompt-tokens-devapi.json",
                content: Value::Null,
                reasoning: None,
                tool_calls: Value::Null,
                finish: "stop",
                usage: usage(55 + 89, 0, 51 + 56, 56),
            },
            Case {
                file: "gemini-generate-vertex-global-2.0-flash.json",
                content: json!("The capital of France is Paris.\n"),
                reasoning: None,
                tool_calls: Value::Null,
                finish: "stop",
                usage: usage(13, 0, 8, 0),
            },
            Case {
                file: "gemini-function-call-gemini3-pro-devapi.json",
                content: Value::Null,
                reasoning: None,
                tool_calls: json!([{"id": "call_gw7_0.EskgCsYgAb4-9vtF7_499YQS2bjZs3xcQI-iAl-ILn29nK1j0Kg6su7QsUUUk3nrAAfnS2w5WiVvlcCqu9fAebJ2cvfaEyBahEt5",
                    "type": "function", "function": {"name": "weather", "arguments": "{\"location\":\"San Francisco\"}"}}]),
                finish: "tool_calls",
                usage: usage(29, 0, 15 + 893, 893),
            },
            Case {
                file: "gemini-function-call-parallel-vertex.json",
                content: Value::Null,
                reasoning: None,
                tool_calls: json!([
                    {"id": "call_gw7_0", "type": "function", "function": {"name": "sum", "arguments": "{\"y\":1,\"x\":2}"}},
                    {"id": "call_gw7_1", "type": "function", "function": {"name": "sum", "arguments": "{\"y\":3,\"x\":4}"}},
                    {"id": "call_gw7_2", "type": "function", "function": {"name": "sum", "arguments": "{\"y\":5,\"x\":6}"}},
                ]),
                finish: "tool_calls",
                usage: Usage::default(),
            },
            Case {
                file: "gemini-function-call-thought-signature-2.5-pro-devapi.json",
                content: Value::Null,
                reasoning: Some("thought"),
                tool_calls: json!(sig_25),
                finish: "tool_calls",
                usage: usage(38, 0, 8 + 501, 501),
            },
            Case {
                file: "gemini-prompt-blocked-safety-vertex.json",
                content: Value::Null,
                reasoning: None,
                tool_calls: Value::Null,
                finish: "content_filter",
                usage: Usage::default(),
            },
        ]
    }

    #[test]
    fn the_response_id_is_the_upstreams_id() {
        let t = Gemini
            .translate_buffered(
                &fixture("gemini-generate-text-gemini3-pro-devapi.json"),
                &cx(),
            )
            .unwrap();
        assert_eq!(t.upstream_id.as_deref(), Some("Un6LacrVMcjUxs0PmJfWoQc"));
        let body =
            br#"{"candidates":[{"content":{"parts":[{"text":"hi"}]}}],"responseId":"two words"}"#;
        let t = Gemini.translate_buffered(body, &cx()).unwrap();
        assert_eq!(t.upstream_id, None, "not an id a record keeps");
    }

    #[test]
    fn buffered_fixtures_translate_exactly() {
        for case in cases() {
            let t = Gemini
                .translate_buffered(&fixture(case.file), &cx())
                .unwrap();
            let v: Value = serde_json::from_slice(&t.body).unwrap();
            let name = case.file;
            assert_eq!(v["id"], "chatcmpl-gw7", "{name}");
            assert_eq!(v["object"], "chat.completion", "{name}");
            assert_eq!(v["created"], 1_700_000_000, "{name}");
            assert_eq!(v["model"], "google/gemini-test", "{name}");
            assert_eq!(v["choices"].as_array().unwrap().len(), 1, "{name}");
            let choice = &v["choices"][0];
            let message = &choice["message"];
            assert_eq!(message["role"], "assistant", "{name}");
            assert_eq!(message["content"], case.content, "{name}");
            match case.reasoning {
                Some(_) => assert_eq!(message["reasoning"], json!(thought_of(name)), "{name}"),
                None => assert!(message.get("reasoning").is_none(), "{name}"),
            }
            match &case.tool_calls {
                Value::Null => assert!(message.get("tool_calls").is_none(), "{name}"),
                Value::String(sig_prefix) => {
                    let call = &message["tool_calls"][0];
                    let id = call["id"].as_str().unwrap();
                    let url_safe = sig_prefix.replace('+', "-").replace('/', "_");
                    assert!(
                        id.starts_with(&format!("call_gw7_0.{url_safe}")),
                        "{name}: {id}"
                    );
                    assert_eq!(
                        call["function"],
                        json!({"name": "now", "arguments": "{}"}),
                        "{name}"
                    );
                }
                calls => assert_eq!(&message["tool_calls"], calls, "{name}"),
            }
            assert_eq!(choice["finish_reason"], case.finish, "{name}");
            assert_eq!(t.usage, case.usage, "{name}: usage buckets");
            assert_eq!(
                v["usage"],
                serde_json::to_value(case.usage.to_openai()).unwrap(),
                "{name}"
            );
        }
    }

    #[test]
    fn usage_totals_match_google_totals() {
        for (file, total) in [
            ("gemini-generate-thinking-2.5-flash-devapi.json", 40),
            (
                "gemini-generate-implicit-cache-2.5-flash-vertex.json",
                12101,
            ),
            ("gemini-generate-tool-use-prompt-tokens-devapi.json", 251),
            ("gemini-function-call-gemini3-pro-devapi.json", 937),
        ] {
            let t = Gemini.translate_buffered(&fixture(file), &cx()).unwrap();
            let v: Value = serde_json::from_slice(&t.body).unwrap();
            assert_eq!(v["usage"]["total_tokens"], total, "{file}");
        }
    }

    #[test]
    fn excluded_reasoning_is_left_out() {
        let mut c = cx();
        c.exclude_reasoning = true;
        let t = Gemini
            .translate_buffered(
                &fixture("gemini-generate-thinking-2.5-flash-devapi.json"),
                &c,
            )
            .unwrap();
        let v: Value = serde_json::from_slice(&t.body).unwrap();
        assert!(v["choices"][0]["message"].get("reasoning").is_none());
        assert_eq!(t.usage.reasoning, 24, "thoughts are billed either way");
    }

    #[test]
    fn finish_reasons_and_candidates() {
        let body = br#"{"candidates":[
            {"content":{"parts":[{"text":"a"}]},"finishReason":"MAX_TOKENS","index":0},
            {"content":{"parts":[{"functionCall":{"name":"f","args":{"k": [1, " x y "]}}}]},"finishReason":"SAFETY","index":1},
            {"finishReason":"MALFORMED_FUNCTION_CALL","index":2}]}"#;
        let t = Gemini.translate_buffered(body, &cx()).unwrap();
        let v: Value = serde_json::from_slice(&t.body).unwrap();
        let finishes: Vec<&str> = v["choices"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["finish_reason"].as_str().unwrap())
            .collect();
        assert_eq!(finishes, ["length", "content_filter", "stop"]);
        assert_eq!(
            v["choices"][1]["message"]["tool_calls"][0]["function"]["arguments"],
            r#"{"k":[1," x y "]}"#,
            "compact outside strings only"
        );
        assert_eq!(v["choices"][2]["message"]["content"], Value::Null);
        assert!(Gemini.translate_buffered(b"{}", &cx()).is_err());
        assert!(Gemini.translate_buffered(b"not json", &cx()).is_err());
    }

    #[test]
    fn uncached_audio_tokens_are_their_own_bucket() {
        let meta: UsageMetadata = serde_json::from_str(
            r#"{"promptTokenCount":1300,"cachedContentTokenCount":200,
                "candidatesTokenCount":7,"totalTokenCount":1307,
                "promptTokensDetails":[{"modality":"TEXT","tokenCount":300},
                                       {"modality":"AUDIO","tokenCount":1000}],
                "cacheTokensDetails":[{"modality":"AUDIO","tokenCount":150},
                                      {"modality":"TEXT","tokenCount":50}]}"#,
        )
        .unwrap();
        let u = meta.usage().unwrap();
        // 1,000 audio of which 150 cached; 300 text of which 50 cached.
        assert_eq!((u.audio_input, u.input, u.cache_read), (850, 250, 200));
        assert_eq!(u.prompt_tokens(), 1300);
        // An unknown modality is counted as ordinary input.
        let meta: UsageMetadata = serde_json::from_str(
            r#"{"promptTokenCount":10,"promptTokensDetails":[{"modality":"HOLOGRAM","tokenCount":10}]}"#,
        )
        .unwrap();
        assert_eq!(meta.usage().unwrap().input, 10);
    }
}
