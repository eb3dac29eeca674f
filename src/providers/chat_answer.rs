//! A family's buffered answer before it is bytes: the `chat.completion` a family made goes to
//! a door's [`AnswerRender`] typed ([`ChatAnswer`]), as a stream's chunks go to a
//! [`ChatSink`](super::chat_stream::ChatSink). The chat door writes its JSON; the Messages and
//! Responses doors render their own object from the same value, so no door reads back JSON the
//! chat translator wrote.

use bytes::Bytes;

use super::{ResponseCx, TranslateError, Translated};
use crate::api::completion::Completion;
use crate::api::Usage;

/// A chat answer as a family hands it to a door.
pub enum ChatAnswer<'a> {
    /// A completion the family made.
    Typed(&'a Completion<'a>),
    /// A completion that is chat JSON already: an OpenAI-compatible upstream's own, rewritten.
    Json(&'a [u8]),
}

/// How a door other than chat writes a chat answer.
pub trait AnswerRender {
    /// The door's body for `answer`, whose exact counts are `usage`. Every door writes the
    /// usage object last ([`Translated::usage_last`]).
    fn render(
        &self,
        answer: ChatAnswer<'_>,
        usage: &Usage,
        cx: &ResponseCx,
    ) -> Result<Bytes, TranslateError>;
}

/// The answer `completion` (counted as `usage`) as `door` renders it, or as its chat JSON
/// without one: what a family's buffered translation returns.
pub fn render(
    door: Option<&dyn AnswerRender>,
    completion: &Completion<'_>,
    usage: Usage,
    upstream_id: Option<Box<str>>,
    cx: &ResponseCx,
) -> Result<Translated, TranslateError> {
    let body = match door {
        Some(door) => door.render(ChatAnswer::Typed(completion), &usage, cx)?,
        None => crate::api::json::to_vec(completion)
            .map(Bytes::from)
            .map_err(|e| TranslateError::Shape(e.to_string()))?,
    };
    // A completion's usage is its last field too.
    Ok(Translated::usage_last(body, usage, upstream_id))
}
