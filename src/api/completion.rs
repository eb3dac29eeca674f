//! The buffered `chat.completion` body the client gets, written by every family's translator.
//! Field order and omissions are the wire format: `tool_calls` and `reasoning` appear only
//! when present, `content` is `null` when there is none.

use std::borrow::Cow;

use serde::Serialize;

use super::usage::OpenAiUsage;

#[derive(Serialize)]
pub struct Completion<'a> {
    pub id: &'a str,
    /// Always `chat.completion`.
    pub object: &'static str,
    pub created: i64,
    pub model: &'a str,
    pub choices: Vec<Choice<'a>>,
    pub usage: OpenAiUsage,
}

impl<'a> Completion<'a> {
    pub fn new(
        id: &'a str,
        created: i64,
        model: &'a str,
        choices: Vec<Choice<'a>>,
        usage: OpenAiUsage,
    ) -> Self {
        Completion {
            id,
            object: "chat.completion",
            created,
            model,
            choices,
            usage,
        }
    }
}

#[derive(Serialize)]
pub struct Choice<'a> {
    pub index: u32,
    pub message: Message<'a>,
    /// Never produced; `null` as OpenAI writes it.
    pub logprobs: Option<()>,
    pub finish_reason: &'static str,
}

#[derive(Serialize)]
pub struct Message<'a> {
    /// Always `assistant`.
    pub role: &'static str,
    pub content: Option<String>,
    /// The model's thinking text (OpenRouter's field), unless the client excluded it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reasoning: Option<String>,
    /// What the upstream needs to see the reasoning again (Claude's signatures), in
    /// OpenRouter's shape; empty for families without it.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub reasoning_details: Vec<ReasoningDetail<'a>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall<'a>>,
}

/// One entry of `reasoning_details` (OpenRouter's convention): `reasoning.text` with the
/// thinking `text` and its `signature`, or `reasoning.encrypted` with opaque `data` (Claude's
/// redacted thinking). In a stream, a signature arrives as an entry with only `signature`.
#[derive(Serialize, Debug, Clone, PartialEq, Eq)]
pub struct ReasoningDetail<'a> {
    #[serde(rename = "type")]
    pub kind: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub text: Option<Cow<'a, str>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub signature: Option<Cow<'a, str>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub data: Option<Cow<'a, str>>,
    /// Which reasoning block of the answer the entry belongs to (0, 1, … in order).
    pub index: u32,
}

/// One tool call. In a buffered message every field is set; in stream deltas `index` is set
/// and `id`, `type` and the name come only with a call's first delta.
#[derive(Serialize)]
pub struct ToolCall<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub index: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id: Option<Cow<'a, str>>,
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    pub kind: Option<&'static str>,
    pub function: FunctionCall<'a>,
}

#[derive(Serialize)]
pub struct FunctionCall<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<&'a str>,
    /// The arguments as JSON text (a fragment of it in a stream delta).
    pub arguments: String,
}
