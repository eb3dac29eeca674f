//! What the route's chat adapter wrote, read back: a completion's `message` and a chunk's
//! `delta` have one shape, every field optional (the buffered answer insists on what it needs).

use serde::Deserialize;

use crate::api::Str;

#[derive(Deserialize)]
pub(super) struct MessageIn<'a> {
    #[serde(borrow, default)]
    pub content: Option<Str<'a>>,
    #[serde(borrow, default)]
    pub refusal: Option<Str<'a>>,
    #[serde(borrow, default)]
    reasoning: Option<Str<'a>>,
    /// What vLLM and DeepSeek call the reasoning text.
    #[serde(borrow, default)]
    reasoning_content: Option<Str<'a>>,
    #[serde(borrow, default, deserialize_with = "null_as_empty")]
    pub tool_calls: Vec<ToolCallIn<'a>>,
}

impl<'a> MessageIn<'a> {
    /// The reasoning text, by either name.
    pub fn reasoning(&mut self) -> Option<Str<'a>> {
        self.reasoning.take().or(self.reasoning_content.take())
    }
}

#[derive(Deserialize)]
pub(super) struct ToolCallIn<'a> {
    /// Which call a stream's fragment belongs to.
    #[serde(default)]
    pub index: u32,
    #[serde(borrow, default)]
    pub id: Option<Str<'a>>,
    #[serde(borrow, default)]
    pub function: Option<FunctionIn<'a>>,
}

#[derive(Deserialize)]
pub(super) struct FunctionIn<'a> {
    #[serde(borrow, default)]
    pub name: Option<Str<'a>>,
    #[serde(borrow, default)]
    pub arguments: Option<Str<'a>>,
}

/// A list that may be sent as `null`: empty.
pub(super) fn null_as_empty<'de, D, T>(d: D) -> Result<Vec<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    Option::<Vec<T>>::deserialize(d).map(Option::unwrap_or_default)
}
