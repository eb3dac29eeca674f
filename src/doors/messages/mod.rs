//! The Anthropic Messages door (being built): [`to_chat`] parses an Anthropic Messages request
//! onto the gateway's one request model, the OpenAI chat body (`request.rs`); the route's chat
//! adapter's answer is rendered back as an Anthropic message ([`to_message`], `answer.rs`) and
//! its stream as Anthropic's events ([`MessagesStream`], `stream.rs`).

mod answer;
mod request;
mod stream;
#[cfg(test)]
mod test_support;

pub use answer::to_message;
pub use request::to_chat;
pub use stream::{starts_with_error, MessagesStream};
