//! The `chat.completion.chunk` a stream is made of, written by every family's stream
//! translator (one choice per chunk), and the stream's last one, [`UsageChunk`]. The error
//! frame is written by `providers::sse`.

use serde::Serialize;

use super::completion::{ReasoningDetail, ToolCall};

#[derive(Serialize)]
pub struct Chunk<'a> {
    pub id: &'a str,
    /// Always `chat.completion.chunk`.
    pub object: &'static str,
    pub created: i64,
    pub model: &'a str,
    pub choices: [ChunkChoice<'a>; 1],
}

#[derive(Serialize)]
pub struct ChunkChoice<'a> {
    pub index: u32,
    pub delta: Delta<'a>,
    pub finish_reason: Option<&'static str>,
}

/// What one chunk adds; only the fields it carries are written.
#[derive(Serialize, Default)]
pub struct Delta<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub role: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reasoning: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reasoning_details: Option<[ReasoningDetail<'a>; 1]>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<[ToolCall<'a>; 1]>,
}

impl Delta<'_> {
    /// Bytes of model output this delta carries (text, reasoning, tool names and arguments):
    /// what an estimate of delivered tokens counts.
    pub fn content_len(&self) -> u64 {
        let text = self.content.map_or(0, str::len) + self.reasoning.map_or(0, str::len);
        let calls = self.tool_calls.as_ref().map_or(0, |[c]| {
            c.function.name.map_or(0, str::len) + c.function.arguments.len()
        });
        (text + calls) as u64
    }
}

/// What the last chunk of a completed stream names besides its usage (it has no choices).
pub struct UsageChunk<'a> {
    pub id: &'a str,
    pub created: i64,
    pub model: &'a str,
}
