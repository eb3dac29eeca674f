//! What the route's chat adapter wrote, read back by the doors that render it in their own
//! shapes: a completion's `message` and a chunk's `delta` have one shape, every field optional
//! (the buffered answers insist on what they need); a completion's first choice
//! ([`CompletionIn`]) and a stream frame ([`ChunkIn`]: a chunk or an in-band error). A
//! completion or chunk the chat translator hands over typed is read the same way
//! ([`first_choice`], [`ChunkChoiceIn::first_of`]), borrowing its strings.

use std::borrow::Cow;

use serde::Deserialize;

use crate::api::chunk::{Chunk, Delta};
use crate::api::completion::{Completion, Message, ReasoningDetail, ToolCall};
use crate::api::{json, Str};
use crate::providers::chat_answer::ChatAnswer;
use crate::providers::TranslateError;

#[derive(Deserialize)]
pub(crate) struct MessageIn<'a> {
    #[serde(borrow, default)]
    pub content: Option<Str<'a>>,
    #[serde(borrow, default)]
    pub refusal: Option<Str<'a>>,
    #[serde(borrow, default)]
    reasoning: Option<Str<'a>>,
    /// What vLLM and DeepSeek call the reasoning text.
    #[serde(borrow, default)]
    reasoning_content: Option<Str<'a>>,
    /// Claude's thinking signatures and redacted thinking (`api::completion::ReasoningDetail`).
    #[serde(borrow, default, deserialize_with = "null_as_empty")]
    pub reasoning_details: Vec<ReasoningDetailIn<'a>>,
    #[serde(borrow, default, deserialize_with = "null_as_empty")]
    pub tool_calls: Vec<ToolCallIn<'a>>,
}

#[derive(Deserialize)]
pub(crate) struct ReasoningDetailIn<'a> {
    #[serde(rename = "type", borrow)]
    pub kind: Str<'a>,
    #[serde(borrow, default)]
    pub text: Option<Str<'a>>,
    #[serde(borrow, default)]
    pub signature: Option<Str<'a>>,
    #[serde(borrow, default)]
    pub data: Option<Str<'a>>,
    /// Which reasoning block the entry belongs to.
    #[serde(default)]
    pub index: u32,
}

impl<'a> MessageIn<'a> {
    /// The reasoning text, by either name.
    pub fn reasoning(&mut self) -> Option<Str<'a>> {
        self.reasoning.take().or(self.reasoning_content.take())
    }
}

/// A `chat.completion`: only its choices are read.
#[derive(Deserialize)]
pub(crate) struct CompletionIn<'a> {
    #[serde(borrow, default)]
    choices: Vec<CompletionChoiceIn<'a>>,
}

#[derive(Deserialize)]
pub(crate) struct CompletionChoiceIn<'a> {
    #[serde(default)]
    index: u32,
    #[serde(borrow)]
    pub message: MessageIn<'a>,
    #[serde(borrow, default)]
    pub finish_reason: Option<Str<'a>>,
}

impl<'a> CompletionIn<'a> {
    /// The choice with the lowest index (the doors ask for one).
    pub fn first_choice(self) -> Option<CompletionChoiceIn<'a>> {
        self.choices.into_iter().min_by_key(|c| c.index)
    }
}

/// The choice with the lowest index of a chat answer, typed or JSON, as its JSON would read.
pub(crate) fn first_choice(
    answer: ChatAnswer<'_>,
) -> Result<CompletionChoiceIn<'_>, TranslateError> {
    let choice = match answer {
        ChatAnswer::Typed(completion) => CompletionChoiceIn::first_of(completion),
        ChatAnswer::Json(body) => json::from_slice::<CompletionIn>(body)
            .map_err(|e| TranslateError::Json(e.to_string()))?
            .first_choice(),
    };
    choice.ok_or_else(|| TranslateError::Shape("a completion without choices".into()))
}

impl<'a> CompletionChoiceIn<'a> {
    fn first_of(completion: &'a Completion<'_>) -> Option<Self> {
        let choice = completion.choices.iter().min_by_key(|c| c.index)?;
        Some(Self {
            index: choice.index,
            message: MessageIn::of_message(&choice.message),
            finish_reason: Some(borrowed(choice.finish_reason)),
        })
    }
}

/// One frame of a chat stream: a `chat.completion.chunk`, or an in-band `error`.
#[derive(Deserialize)]
pub(crate) struct ChunkIn<'a> {
    #[serde(borrow, default, deserialize_with = "null_as_empty")]
    pub choices: Vec<ChunkChoiceIn<'a>>,
    #[serde(borrow, default)]
    pub error: Option<ErrorIn<'a>>,
}

#[derive(Deserialize)]
pub(crate) struct ErrorIn<'a> {
    #[serde(borrow, default)]
    pub message: Option<Str<'a>>,
}

impl ErrorIn<'_> {
    /// The message, or a generic one.
    pub fn message(self) -> String {
        self.message
            .map_or_else(|| "upstream stream failed".into(), |m| m.0.into_owned())
    }
}

#[derive(Deserialize)]
pub(crate) struct ChunkChoiceIn<'a> {
    #[serde(default)]
    pub index: u32,
    #[serde(borrow, default)]
    pub delta: Option<MessageIn<'a>>,
    #[serde(borrow, default)]
    pub finish_reason: Option<Str<'a>>,
}

impl<'a> ChunkChoiceIn<'a> {
    /// The first choice's part of a chunk the chat translator made (`None`: another choice's),
    /// as its JSON would read.
    pub fn first_of(chunk: &'a Chunk<'_>) -> Option<Self> {
        let [choice] = &chunk.choices;
        (choice.index == 0).then(|| Self {
            index: 0,
            delta: Some(MessageIn::of(&choice.delta)),
            finish_reason: choice.finish_reason.map(borrowed),
        })
    }
}

impl<'a> MessageIn<'a> {
    fn of_message(m: &'a Message<'_>) -> Self {
        Self {
            content: m.content.as_deref().map(borrowed),
            refusal: None,
            reasoning: m.reasoning.as_deref().map(borrowed),
            reasoning_content: None,
            reasoning_details: m
                .reasoning_details
                .iter()
                .map(ReasoningDetailIn::of)
                .collect(),
            tool_calls: m.tool_calls.iter().map(ToolCallIn::of).collect(),
        }
    }

    fn of(delta: &'a Delta<'_>) -> Self {
        Self {
            content: delta.content.map(borrowed),
            refusal: None,
            reasoning: delta.reasoning.map(borrowed),
            reasoning_content: None,
            reasoning_details: delta
                .reasoning_details
                .iter()
                .flatten()
                .map(ReasoningDetailIn::of)
                .collect(),
            tool_calls: delta
                .tool_calls
                .iter()
                .flatten()
                .map(ToolCallIn::of)
                .collect(),
        }
    }
}

impl<'a> ReasoningDetailIn<'a> {
    fn of(d: &'a ReasoningDetail<'_>) -> Self {
        Self {
            kind: borrowed(d.kind),
            text: d.text.as_deref().map(borrowed),
            signature: d.signature.as_deref().map(borrowed),
            data: d.data.as_deref().map(borrowed),
            index: d.index,
        }
    }
}

impl<'a> ToolCallIn<'a> {
    fn of(call: &'a ToolCall<'_>) -> Self {
        Self {
            index: call.index.unwrap_or(0),
            id: call.id.as_deref().map(borrowed),
            function: Some(FunctionIn {
                name: call.function.name.map(borrowed),
                arguments: Some(borrowed(&call.function.arguments)),
            }),
        }
    }
}

fn borrowed(s: &str) -> Str<'_> {
    Str(Cow::Borrowed(s))
}

#[derive(Deserialize)]
pub(crate) struct ToolCallIn<'a> {
    /// Which call a stream's fragment belongs to.
    #[serde(default)]
    pub index: u32,
    #[serde(borrow, default)]
    pub id: Option<Str<'a>>,
    #[serde(borrow, default)]
    pub function: Option<FunctionIn<'a>>,
}

#[derive(Deserialize)]
pub(crate) struct FunctionIn<'a> {
    #[serde(borrow, default)]
    pub name: Option<Str<'a>>,
    #[serde(borrow, default)]
    pub arguments: Option<Str<'a>>,
}

/// A list that may be sent as `null`: empty.
pub(crate) fn null_as_empty<'de, D, T>(d: D) -> Result<Vec<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    Option::<Vec<T>>::deserialize(d).map(Option::unwrap_or_default)
}
