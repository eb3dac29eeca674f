//! Front doors: the client dialects besides OpenAI's (which is `api`, the request model every
//! door parses onto). A door reads its wire format into that model, renders answers, stream
//! events and errors in its own shape, and passes requests through untouched where the route's
//! upstream speaks the dialect natively. Admission, gates, reservations, routing, failover and
//! billing are not here: they exist once, for every door.
//!
//! - `messages`: Anthropic's Messages API (`/v1/messages`, `/v1/messages/count_tokens`), as
//!   Claude Code and the Anthropic SDKs speak it.
//! - `responses`: OpenAI's Responses API (`/v1/responses`), as Codex and the Agents SDK speak it.
//!
//! Shared by the doors: `bridge` (a family's chat adapter answering in a door's shapes),
//! `chat_out` (the chat body a door writes), `chat_in` (the chat adapter's answers as a door
//! reads them, handed over typed or, from an OpenAI-compatible upstream, as JSON) and
//! `door_stream` (a door's events over the chat adapter's stream, its chunks handed over
//! typed); `forward` (client headers a native upstream gets); `one_pass` (a conversation's
//! content read with its messages).

mod bridge;
pub mod charge;
pub(crate) mod chat_in;
pub(crate) mod chat_out;
mod door_stream;
pub mod forward;
pub mod messages;
mod one_pass;
pub mod responses;

pub use bridge::{bridged, Bridged};
