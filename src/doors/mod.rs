//! Front doors: the client dialects besides OpenAI's (which is `api`, the request model every
//! door parses onto). A door reads its wire format into that model, renders answers, stream
//! events and errors in its own shape, and passes requests through untouched where the route's
//! upstream speaks the dialect natively. Admission, gates, reservations, routing, failover and
//! billing are not here: they exist once, for every door.
//!
//! - `messages`: Anthropic's Messages API (`/v1/messages`, `/v1/messages/count_tokens`), as
//!   Claude Code and the Anthropic SDKs speak it.

pub mod forward;
pub mod messages;
