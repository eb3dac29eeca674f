//! The Anthropic Messages door (being built): [`to_chat`] parses an Anthropic Messages request
//! onto the gateway's one request model, the OpenAI chat body (`request.rs`).

mod request;

pub use request::to_chat;
