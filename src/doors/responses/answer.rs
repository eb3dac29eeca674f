//! The buffered answer: the `chat.completion` an adapter produced → a `response` object.

use bytes::Bytes;

use crate::api::Usage;
use crate::providers::{ResponseCx, TranslateError};

/// The `response` object for `completion` (the first choice), with `usage` and `cx`'s id and
/// model.
pub fn to_response(
    completion: &[u8],
    usage: &Usage,
    cx: &ResponseCx,
) -> Result<Bytes, TranslateError> {
    let _ = (completion, usage, cx);
    Err(TranslateError::Shape(
        "the Responses door is not built yet".into(),
    ))
}
