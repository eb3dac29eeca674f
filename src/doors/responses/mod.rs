//! The OpenAI Responses door (`POST /v1/responses`), as Codex and the OpenAI Agents SDK speak
//! it: pure translators, no I/O. The request is parsed onto the gateway's one request model,
//! the OpenAI chat body ([`parse`], `request.rs`); the route's chat adapter plans and
//! translates it as it does for the chat door; the answer and the stream are rendered back into
//! the Responses API's shapes ([`AsResponse`], `answer.rs`, from the completion the family
//! hands over typed; [`ResponsesStream`], `stream.rs`).
//!
//! (The mapping tables are written in `request.rs`, `answer.rs` and `stream.rs`; a namespaced
//! tool's flat chat name, both ways, in `names.rs`.)

mod answer;
mod continued;
mod names;
pub mod reasoning;
mod request;
mod stream;
#[cfg(test)]
pub(crate) mod test_support;

pub use answer::{to_response, AsResponse};
pub use continued::{continued, previous_response_id, with_input};
pub use request::{parse, parse_from, Parsed};
pub(crate) use stream::stream;
