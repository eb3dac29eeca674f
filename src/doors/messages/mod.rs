//! The Anthropic Messages door (`POST /v1/messages`) for routes whose upstream does not speak
//! the Messages API (Gemini, OpenAI-compatible servers): pure translators, no I/O. Claude routes
//! are passed through natively instead (another adapter), keeping what these cannot carry.
//!
//! The request is parsed onto the gateway's one request model, the OpenAI chat body
//! ([`to_chat`], `request.rs`); the route's own chat adapter plans and translates it as it does
//! for the chat door; the answer and the stream are rendered back into Anthropic's shapes
//! ([`AsMessage`], `answer.rs`, from the completion the family hands over typed;
//! [`MessagesStream`], `stream.rs`). `doors::Bridged` wraps a
//! family's chat adapter with these so the rest of the gateway sees one [`Adapter`] per route.
//!
//! ## The request
//!
//! Mapped:
//! - `model`, `temperature`, `top_p`, `top_k`, `max_tokens` copied; `stop_sequences` → `stop`;
//!   `stream` copied, with `stream_options.include_usage` so the final usage is counted;
//! - `system` (a string, or text blocks with their `cache_control`) → a leading `system`
//!   message (text parts when blocks);
//! - message content (a string or blocks): `text` (its `cache_control` kept, `ttl` included);
//!   `image` with a base64 source → an `image_url` data URL, with a URL source → that URL;
//!   `document` with a base64 or URL PDF → a `file` part, a plain-text source → a text part, a
//!   `content` source → its text and image parts;
//! - assistant `tool_use` → `tool_calls` (the id verbatim: Gemini's thought signatures travel
//!   in the ids this gateway mints, see the module doc of `providers::gemini`; `input` as the
//!   compact JSON `arguments`), its text kept as `content`;
//! - user `tool_result` → a `tool` message placed before the rest of that user turn: its text
//!   (text blocks joined by newlines), prefixed `Error: ` when `is_error`; a `cache_control` on
//!   it makes the content one text part carrying it. It must answer a `tool_use` of the
//!   assistant message just before (400 otherwise);
//! - custom `tools` → function tools, `input_schema` copied byte for byte as `parameters`;
//!   `tool_choice` auto/any/tool/none → `auto`/`required`/the named function/`none`, and
//!   `disable_parallel_tool_use` → `parallel_tool_calls: false`;
//! - `thinking`: `enabled` + `budget_tokens` → `reasoning.max_tokens`; `adaptive` →
//!   `reasoning.enabled`, or `reasoning_effort` when `output_config.effort` is set (`xhigh` and
//!   `max` → `xhigh`; an effort without `thinking` also becomes `reasoning_effort`);
//!   `disabled` → `reasoning_effort: "none"`; `display: "omitted"` → `reasoning.exclude` (the
//!   answer then has no thinking block at all, rather than one with empty text).
//!
//! These are the chat door's fields, and the route's adapter treats them as it treats the chat
//! door's: Gemini's forwards what the model's profile lists, an OpenAI-compatible upstream gets
//! them as written (and refuses those it does not know, as it would from a chat client).
//!
//! Dropped, because nothing on the chat model carries them: assistant `thinking` and
//! `redacted_thinking` blocks (their signatures are Anthropic's own), images and documents
//! inside tool results, Anthropic's server tools (`web_search_…`, `bash_…`, `text_editor_…`,
//! `code_execution_…`, `computer_…`, `memory_…`, `tool_search_tool_…`: any tool `type` other
//! than `custom`) and a `tool_choice` naming one, the tool fields `cache_control`,
//! `defer_loading`, `input_examples` and `strict`, document `title`, `context` and `citations`,
//! and the top-level `metadata`, `context_management`, `service_tier`, `container`,
//! `mcp_servers`, `output_config` (but its `effort`), `anthropic_version`, `betas` and any
//! unknown field. Refused (400): block types the chat model has no part for (`search_result`,
//! `server_tool_use`, `web_search_tool_result`, `container_upload`, …) and Files API sources.
//!
//! ## The answer
//!
//! `thinking` (from the reasoning text, `signature` empty), `text`, then one `tool_use` per tool
//! call (`input` the arguments object, `{}` when they are not one); `stop_reason` from the
//! finish reason (`stop` → `end_turn`, `length` → `max_tokens`, `tool_calls` → `tool_use`,
//! `content_filter` → `refusal`); usage from the exact buckets: `input_tokens` = uncached input
//! (audio included), `cache_read_input_tokens`, `cache_creation_input_tokens` with its 5-minute
//! and 1-hour split. `stop_sequence` is always `null`: no adapter reports which one matched.
//!
//! Errors are rendered by `api::error`, not here.

mod answer;
mod request;
mod stream;
#[cfg(test)]
pub(crate) mod test_support;

pub use answer::{to_message, AsMessage};
pub use request::{to_chat, to_chat_from};
pub(crate) use stream::stream;

#[cfg(doc)]
use crate::providers::Adapter;
