//! Anthropic Messages API, direct (`POST /v1/messages`, `/v1/messages/count_tokens`) and on
//! Vertex (`:rawPredict` / `:streamRawPredict`, and the count at
//! `…/publishers/anthropic/models/count-tokens:rawPredict`, routed by `vertex.rs`). Shapes follow fixtures
//! `anthropic-message-*.json` (direct: `model` first, `cache_creation` split, `service_tier`,
//! `inference_geo`), `anthropic-stream-thinking.sse` / `.chunks.jsonl` (event order:
//! `message_start`, `content_block_start`, `ping`, deltas, `signature_delta`,
//! `content_block_stop`, `message_delta` with cumulative usage, `message_stop`) and
//! `anthropic-vertex-stream-cache-*.sse` (Vertex: `msg_vrtx_` ids, `message_delta.usage` =
//! `{output_tokens}` only).
//!
//! Validates (`docs/wire.md`: Anthropic endpoints, request body, prompt caching), answering
//! with the real `invalid_request_error` body (`"<field>: <pydantic-style message>"`):
//! - direct: `x-api-key` must match (401 `authentication_error`), `anthropic-version` header
//!   required, `model` required, body `anthropic_version` is an extra input;
//! - Vertex: body `anthropic_version` must be `"vertex-2023-10-16"`, `model` must be absent;
//! - unknown top-level fields → `"x: Extra inputs are not permitted"`;
//! - counting takes only the count endpoint's fields ([`COUNT_FIELDS`]: Anthropic's API
//!   reference, "Count tokens in a Message" — `max_tokens`, `stream`, sampling and the like
//!   are extra inputs there) and no `max_tokens`; the same message, system, thinking and
//!   output-config rules; `anthropic-beta` values are not checked (Claude Code sends several),
//!   nor are tool definitions (`defer_loading` and server tools pass). On Vertex the model is
//!   the body's (a Vertex id, else the publisher-model 404) and `anthropic_version` may be
//!   left out (Google's example has none; Anthropic's SDK sends it);
//! - `max_tokens` required (≥ 1), `messages` non-empty, roles `user`/`assistant` only,
//!   starting with `user` and alternating; content string or known block types; `system`
//!   string or `text` blocks; `temperature` in 0–1; `temperature` + `top_p` together on
//!   newer models (Sonnet/Haiku 4.5+, Opus 4.1+); at most 4 `cache_control` blocks (those
//!   inside a `tool_result` counted): "A maximum of 4 blocks with cache_control may be
//!   provided. Found N.";
//! - `tool_result` blocks must answer `tool_use` ids of the previous assistant message, and
//!   an assistant `tool_use` must be answered in the next message; both ids of Anthropic's
//!   alphabet (`^[a-zA-Z0-9_-]+$`, as pydantic words it);
//! - a forcing `tool_choice` (`any`, `tool`): refused with budget thinking ("Thinking may not
//!   be enabled when `tool_choice` forces tool use."), and on Opus 5.5, Sonnet 5.5 and Fable
//!   5.1 whatever the thinking; taken with adaptive thinking elsewhere, which it skips;
//! - thinking: `budget_tokens` ≥ 1024 and < `max_tokens` (unless the
//!   `interleaved-thinking-2025-05-14` beta is sent), no modified `temperature`, no `top_k`,
//!   `top_p` ≥ 0.95, a final assistant message (a prefill) must start with a thinking block;
//!   only the fields of each type (`effort` inside `thinking` is an extra input), `display`
//!   `summarized` or `omitted`;
//! - replayed thinking, as the real API checks it: when the request thinks (asked, or the
//!   adaptive-only default) and no forced tool skips the thinking, the last assistant turn, if
//!   it holds a `tool_use`, must start with a `thinking` / `redacted_thinking` block (the tool
//!   loop continues from its thinking: "Expected `thinking` or `redacted_thinking`, but found
//!   …"); a `thinking` block anywhere must carry a signature this simulator issued for that
//!   very text ("Invalid `signature` in `thinking` block"; an empty text passes, as a block
//!   shown with `display: omitted` comes back), and `redacted_thinking` data ours ("Invalid
//!   `data` in `redacted_thinking` block");
//! - per model generation ([`generation`], by id): adaptive-only models (Opus 5.5 / 5, Sonnet
//!   5.5 / 5, Haiku 5.5, Fable 5.x, Opus 4.7 / 4.8) refuse `type: enabled` (budget_tokens,
//!   use adaptive + `output_config.effort`), non-default `temperature`, any `top_p` / `top_k`;
//!   Opus 5.5, Sonnet 5.5, Haiku 5.5 and Fable refuse `type: disabled` (Sonnet 5.5 takes
//!   `between_tools`); `adaptive` only on Opus / Sonnet 4.6+; `output_config.effort` (low,
//!   medium, high, xhigh, max) only on models with effort (Opus 4.5+, Sonnet 4.6+).
//!
//! Thinking in answers: a `thinking` block when asked for, or on adaptive-only models unless
//! disabled (they think by default). Its text is `Thinking: <subject>`, left empty — and not
//! streamed: no `thinking_delta`, only the `signature_delta` — when `display` is `omitted`,
//! the default of adaptive-only models. Its signature is a keyed hash of the full text
//! ([`thinking_signature`]), checked when the block comes back. A last user text holding
//! Anthropic's test string [`REDACTED_TRIGGER`] gets a `redacted_thinking` block instead
//! (streamed whole in its block start). Its tokens count in `output_tokens` either way.
//!
//! Prompt caching: breakpoints are the blocks carrying `cache_control` in the order tools →
//! system → messages (plus the end of the prompt for a top-level `cache_control`). A
//! breakpoint is cacheable when its prefix reaches the model minimum (4096 tokens for Opus
//! 4.5/4.6 and Haiku 4.5, 2048 for Sonnet 4.6 and Haiku 3/3.5, else 1024). The longest prefix
//! already seen (same model, unexpired 5 min / 1 h TTL, refreshed on hit) is reported as
//! `cache_read_input_tokens`; the rest up to the last cacheable breakpoint as
//! `cache_creation_input_tokens` (split into `ephemeral_5m/1h` by the last breakpoint's TTL);
//! `input_tokens` is what remains.
//!
//! Tokens counted here: tool definitions as compact JSON, system texts, message string
//! contents and text blocks, `tool_use` = name + input JSON, `tool_result` = its text (or
//! JSON), other blocks as JSON, thinking blocks 0.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use axum::http::StatusCode;
use axum::response::Response;
use base64::Engine as _;
use bytes::Bytes;
use serde::Serialize;
use serde_json::{Map, Value};

use crate::content::{
    self, apply_stop, call_tokens_with, cap_tokens, json_len, prompt_tok, random_id, split_pieces,
    tok, Fnv, Markers,
};
use crate::faults::{self, Fault, StreamFault, Surface};
use crate::fixtures;
use crate::respond::{self, JSON_PLAIN};
use crate::{Req, Sim};

type R = Result<Response, Response>;

const TOP_FIELDS: &[&str] = &[
    "model",
    "messages",
    "max_tokens",
    "system",
    "metadata",
    "stop_sequences",
    "stream",
    "temperature",
    "top_p",
    "top_k",
    "tools",
    "tool_choice",
    "thinking",
    "service_tier",
    "cache_control",
    "container",
    "context_management",
    "mcp_servers",
    "output_config",
    "inference_geo",
];
/// The top-level fields the count endpoint takes (`speed` and the deprecated `output_format`
/// included, though they change no input count).
pub const COUNT_FIELDS: &[&str] = &[
    "model",
    "messages",
    "system",
    "tools",
    "tool_choice",
    "thinking",
    "mcp_servers",
    "context_management",
    "output_config",
    "output_format",
    "cache_control",
    "speed",
];
const BLOCK_TYPES: &[&str] = &[
    "text",
    "image",
    "document",
    "search_result",
    "thinking",
    "redacted_thinking",
    "tool_use",
    "tool_result",
    "server_tool_use",
    "web_search_tool_result",
    "web_fetch_tool_result",
    "code_execution_tool_result",
    "bash_code_execution_tool_result",
    "text_editor_code_execution_tool_result",
    "mcp_tool_use",
    "mcp_tool_result",
    "container_upload",
];
pub const VERTEX_VERSION: &str = "vertex-2023-10-16";

#[derive(Default)]
pub struct PromptCache {
    map: Mutex<HashMap<u64, Instant>>,
}

impl PromptCache {
    pub fn clear(&self) {
        if let Ok(mut m) = self.map.lock() {
            m.clear();
        }
    }
}

fn invalid(msg: &str, vertex: bool) -> Response {
    fixtures::anthropic_invalid(msg, vertex)
}

/// The key of the simulator's thinking signatures and redacted data: a keyed hash, so that a
/// client cannot sign modified thinking (it would need the key, as with Claude's own).
const SIGN_KEY: &[u8] = b"tollgate-sim: Claude thinking key";
const THINKING_MAGIC: &[u8] = b"SIMTHK1:";
const REDACTED_MAGIC: &[u8] = b"SIMRDT1:";

/// What Anthropic's test prompts say to get redacted thinking back (its extended-thinking
/// guide): a user text holding it makes the answer's thinking a `redacted_thinking` block.
pub const REDACTED_TRIGGER: &str =
    "ANTHROPIC_MAGIC_STRING_TRIGGER_REDACTED_THINKING_46C9A13E193C177646C7398A98432ECCCE4C1253";

/// base64(`magic` ‖ `digest` ‖ keyed hash of both).
fn sealed(magic: &[u8], digest: [u8; 8]) -> String {
    let mut mac = Fnv::new();
    mac.feed(SIGN_KEY);
    mac.feed(magic);
    mac.feed(&digest);
    let mut raw = magic.to_vec();
    raw.extend_from_slice(&digest);
    raw.extend_from_slice(&mac.0.to_le_bytes());
    base64::engine::general_purpose::STANDARD.encode(raw)
}

/// The digest inside a blob [`sealed`] with `magic`, if it is one.
fn unseal(magic: &[u8], blob: &str) -> Option<[u8; 8]> {
    let raw = base64::engine::general_purpose::STANDARD
        .decode(blob)
        .ok()?;
    let digest: [u8; 8] = raw.strip_prefix(magic)?.get(..8)?.try_into().ok()?;
    (sealed(magic, digest) == blob).then_some(digest)
}

/// The signature of a thinking block whose full text is `text`.
pub fn thinking_signature(text: &str) -> String {
    sealed(
        THINKING_MAGIC,
        content::fnv64(text.as_bytes()).to_le_bytes(),
    )
}

/// Whether `sig` is a signature this simulator issued for `text`. An empty text passes with any
/// of its signatures: that is how a block comes back whose text was not shown (`display:
/// omitted`).
fn thinking_signature_ok(sig: &str, text: &str) -> bool {
    unseal(THINKING_MAGIC, sig)
        .is_some_and(|d| text.is_empty() || d == content::fnv64(text.as_bytes()).to_le_bytes())
}

/// A `redacted_thinking` block's opaque data for a thought on `subject`.
fn redacted_data(subject: &str) -> String {
    sealed(
        REDACTED_MAGIC,
        content::fnv64(subject.as_bytes()).to_le_bytes(),
    )
}

fn redacted_data_ok(data: &str) -> bool {
    unseal(REDACTED_MAGIC, data).is_some()
}

/// Anthropic's tool-id alphabet (`^[a-zA-Z0-9_-]+$`).
fn is_tool_id(id: &str) -> bool {
    !id.is_empty()
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// `POST /v1/messages` and `/v1/messages/count_tokens`.
pub fn handle_direct(sim: &Sim, req: &Req, count_only: bool) -> Response {
    if let Err(r) = direct_auth(sim, req) {
        return r;
    }
    let r = if count_only {
        count_tokens(sim, req)
    } else {
        messages(sim, req, None, false)
    };
    r.unwrap_or_else(|e| e)
}

/// The Anthropic API's `x-api-key` and `anthropic-version` checks (messages and listing).
pub fn direct_auth(sim: &Sim, req: &Req) -> Result<(), Response> {
    match req.headers.get("x-api-key").and_then(|v| v.to_str().ok()) {
        None => {
            return Err(fixtures::anthropic_error(
                401,
                "authentication_error",
                "x-api-key header is required",
                false,
            ))
        }
        Some(k) if k != sim.cfg.anthropic_key => {
            return Err(fixtures::anthropic_error(
                401,
                "authentication_error",
                "invalid x-api-key",
                false,
            ))
        }
        Some(_) => {}
    }
    if req.headers.get("anthropic-version").is_none() {
        return Err(invalid("anthropic-version: header is required", false));
    }
    Ok(())
}

/// A direct-API 400 `invalid_request_error`.
pub fn invalid_direct(msg: &str) -> Response {
    invalid(msg, false)
}

/// The direct API's 404 for a model it does not serve.
fn model_not_found(model: &str) -> Response {
    fixtures::anthropic_error(404, "not_found_error", &format!("model: {model}"), false)
}

/// Vertex `:rawPredict` / `:streamRawPredict` (bearer already checked).
pub fn handle_vertex(sim: &Sim, req: &Req, url_model: &str, stream_route: bool) -> Response {
    messages(sim, req, Some(url_model), stream_route).unwrap_or_else(|e| e)
}

/// Vertex `…/publishers/anthropic/models/count-tokens:rawPredict` (bearer already checked).
pub fn handle_vertex_count(sim: &Sim, req: &Req, project: &str, location: &str) -> Response {
    vertex_count(sim, req, project, location).unwrap_or_else(|e| e)
}

fn parse(body: &Bytes, vertex: bool) -> Result<Map<String, Value>, Response> {
    match serde_json::from_slice::<Value>(body) {
        Ok(Value::Object(m)) => Ok(m),
        Ok(_) => Err(invalid("Input should be a valid dictionary", vertex)),
        Err(e) => Err(invalid(
            &format!("There was an error parsing the body: {e}"),
            vertex,
        )),
    }
}

/// The last user message's text and how many tool results it holds.
fn last_user_turn(msgs: &[Value]) -> (String, usize) {
    for m in msgs.iter().rev() {
        if m.get("role").and_then(Value::as_str) != Some("user") {
            continue;
        }
        return match m.get("content") {
            Some(Value::String(s)) => (s.clone(), 0),
            Some(Value::Array(blocks)) => {
                let mut text = String::new();
                let mut results = 0;
                for b in blocks {
                    match b.get("type").and_then(Value::as_str) {
                        Some("text") => {
                            text.push_str(b.get("text").and_then(Value::as_str).unwrap_or(""))
                        }
                        Some("tool_result") => results += 1,
                        _ => {}
                    }
                }
                (text, results)
            }
            _ => (String::new(), 0),
        };
    }
    (String::new(), 0)
}

fn is_newer_sampling_model(model: &str) -> bool {
    [
        "sonnet-4-5",
        "sonnet-4-6",
        "haiku-4-5",
        "opus-4-1",
        "opus-4-5",
        "opus-4-6",
        "sonnet-5",
        "opus-5",
        "haiku-5",
    ]
    .iter()
    .any(|p| model.contains(p))
}

/// `output_config.effort` values.
const EFFORTS: &[&str] = &["low", "medium", "high", "xhigh", "max"];

/// What a Claude generation accepts for thinking and sampling.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Generation {
    /// `thinking: {type: enabled, budget_tokens}` (a manual budget).
    budget: bool,
    /// `thinking: {type: adaptive}`.
    adaptive: bool,
    /// `output_config.effort`.
    effort: bool,
    /// `thinking: {type: disabled}`.
    can_disable: bool,
    /// `thinking: {type: between_tools}` (Sonnet 5.5's least thinking).
    between_tools: bool,
    /// Adaptive-only: thinks when not told otherwise, shows no thinking text unless
    /// `display: summarized`, and takes only default sampling parameters.
    adaptive_only: bool,
    /// Non-default `temperature`, any `top_p` / `top_k` are refused.
    default_sampling: bool,
    /// A forcing `tool_choice` (`any`, `tool`) is taken (with adaptive thinking the model
    /// then skips its thinking); Opus 5.5, Sonnet 5.5 and Fable 5.1 refuse it.
    forced_tools: bool,
}

/// A model's generation from its id (dated and Vertex `@` ids alike). Where the rules come
/// from: Anthropic's model pages and the adaptive-thinking / effort guides, Nov 2026 —
/// Opus 5.5, Sonnet 5.5, Haiku 5.5 and Fable 5.x are adaptive-only and cannot turn thinking
/// off (Sonnet 5.5 offers `between_tools` instead); Opus 5 / Sonnet 5 and Opus 4.7 / 4.8 are
/// adaptive-only but can; all of those refuse `budget_tokens` and non-default sampling.
/// Opus 4.6 / Sonnet 4.6 take adaptive + effort and still the (deprecated) budget; Opus 4.5
/// takes effort with a budget (no adaptive); older models (Haiku 4.5, Sonnet 4.5, Opus 4.1
/// …) know only `budget_tokens`. Forced tool use ("Thinking with tool use", Nov 2026): refused
/// with budget thinking everywhere, taken with adaptive thinking (which it skips) except on
/// Opus 5.5, Sonnet 5.5 and Fable 5.1, which refuse it whatever the thinking.
fn generation(model: &str) -> Generation {
    let has = |ids: &[&str]| ids.iter().any(|p| model.contains(p));
    let adaptive_only = Generation {
        budget: false,
        adaptive: true,
        effort: true,
        can_disable: true,
        between_tools: false,
        adaptive_only: true,
        default_sampling: true,
        forced_tools: true,
    };
    let budget_only = Generation {
        budget: true,
        adaptive: false,
        effort: false,
        can_disable: true,
        between_tools: false,
        adaptive_only: false,
        default_sampling: false,
        forced_tools: true,
    };
    // Longer ids first: `opus-5` is also a prefix of `opus-5-5`.
    if has(&["opus-5-5", "fable-5"]) {
        Generation {
            can_disable: false,
            forced_tools: false,
            ..adaptive_only
        }
    } else if has(&["haiku-5-5"]) {
        Generation {
            can_disable: false,
            ..adaptive_only
        }
    } else if has(&["sonnet-5-5"]) {
        Generation {
            can_disable: false,
            between_tools: true,
            forced_tools: false,
            ..adaptive_only
        }
    } else if has(&["opus-5", "sonnet-5", "opus-4-7", "opus-4-8"]) {
        adaptive_only
    } else if has(&["opus-4-6", "sonnet-4-6"]) {
        Generation {
            adaptive: true,
            effort: true,
            ..budget_only
        }
    } else if has(&["opus-4-5"]) {
        Generation {
            effort: true,
            ..budget_only
        }
    } else {
        budget_only
    }
}

/// Whether the model thinks on this request, and whether its thinking text is shown: an
/// explicit type decides (`between_tools` thinks only after tool results), else the
/// generation; `display` decides the text, by default shown except on adaptive-only models.
fn thinking_mode(th: Option<&Value>, gen: Generation, tool_results: usize) -> (bool, bool) {
    let thinks = match th.and_then(|t| t.get("type")).and_then(Value::as_str) {
        Some("enabled" | "adaptive") => true,
        Some("between_tools") => tool_results > 0,
        Some(_) => false,
        None => gen.adaptive_only,
    };
    let shown = match th.and_then(|t| t.get("display")).and_then(Value::as_str) {
        Some(d) => d == "summarized",
        None => !gen.adaptive_only,
    };
    (thinks, shown)
}

fn cache_minimum(model: &str) -> u64 {
    if ["opus-4-6", "opus-4-5", "haiku-4-5"]
        .iter()
        .any(|p| model.contains(p))
    {
        4096
    } else if ["sonnet-4-6", "haiku-3-5", "3-5-haiku", "haiku-3", "3-haiku"]
        .iter()
        .any(|p| model.contains(p))
    {
        2048
    } else {
        1024
    }
}

/// A `cache_control` breakpoint: prefix bytes, prefix hash, 1 h TTL?
struct Breakpoint {
    bytes: usize,
    hash: u64,
    long: bool,
}

struct PromptScan {
    bytes: usize,
    breakpoints: Vec<Breakpoint>,
}

fn is_long_ttl(cc: &Value) -> bool {
    cc.get("ttl").and_then(Value::as_str) == Some("1h")
}

fn block_bytes(b: &Value) -> usize {
    match b.get("type").and_then(Value::as_str) {
        Some("text") => b.get("text").and_then(Value::as_str).map_or(0, str::len),
        Some("thinking") | Some("redacted_thinking") => 0,
        Some("tool_use") | Some("server_tool_use") => {
            b.get("name").and_then(Value::as_str).map_or(0, str::len)
                + b.get("input").map_or(0, json_len)
        }
        Some("tool_result") => match b.get("content") {
            Some(Value::String(s)) => s.len(),
            Some(Value::Array(inner)) => inner.iter().map(block_bytes).sum(),
            Some(other) => json_len(other),
            None => 0,
        },
        _ => json_len(b),
    }
}

fn scan_prompt(obj: &Map<String, Value>, model: &str) -> PromptScan {
    let mut h = Fnv::new();
    h.feed(model.as_bytes());
    let mut bytes = 0usize;
    let mut bps = Vec::new();
    let mark = |bytes: usize, h: &Fnv, cc: Option<&Value>, bps: &mut Vec<Breakpoint>| {
        if let Some(cc) = cc {
            bps.push(Breakpoint {
                bytes,
                hash: h.0,
                long: is_long_ttl(cc),
            });
        }
    };
    if let Some(Value::Array(tools)) = obj.get("tools") {
        for t in tools {
            let s = serde_json::to_vec(t).unwrap_or_default();
            bytes += s.len();
            h.feed(&s);
            mark(bytes, &h, t.get("cache_control"), &mut bps);
        }
    }
    match obj.get("system") {
        Some(Value::String(s)) => {
            bytes += s.len();
            h.feed(s.as_bytes());
        }
        Some(Value::Array(blocks)) => {
            for b in blocks {
                let t = b.get("text").and_then(Value::as_str).unwrap_or("");
                bytes += t.len();
                h.feed(t.as_bytes());
                mark(bytes, &h, b.get("cache_control"), &mut bps);
            }
        }
        _ => {}
    }
    if let Some(Value::Array(msgs)) = obj.get("messages") {
        for m in msgs {
            h.feed(
                m.get("role")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .as_bytes(),
            );
            match m.get("content") {
                Some(Value::String(s)) => {
                    bytes += s.len();
                    h.feed(s.as_bytes());
                }
                Some(Value::Array(blocks)) => {
                    for b in blocks {
                        bytes += block_bytes(b);
                        if b.get("type").and_then(Value::as_str) == Some("text") {
                            h.feed(
                                b.get("text")
                                    .and_then(Value::as_str)
                                    .unwrap_or("")
                                    .as_bytes(),
                            );
                        } else {
                            h.feed(&serde_json::to_vec(b).unwrap_or_default());
                        }
                        mark(bytes, &h, b.get("cache_control"), &mut bps);
                    }
                }
                _ => {}
            }
        }
    }
    if let Some(cc) = obj.get("cache_control") {
        mark(bytes, &h, Some(cc), &mut bps);
    }
    PromptScan {
        bytes,
        breakpoints: bps,
    }
}

/// Input-side usage: (input, cache_creation, cache_read, creation_is_1h).
fn cache_usage(sim: &Sim, scan: &PromptScan, model: &str, total: u64) -> (u64, u64, u64, bool) {
    let min = cache_minimum(model);
    let eligible: Vec<&Breakpoint> = scan
        .breakpoints
        .iter()
        .filter(|b| tok(b.bytes) >= min)
        .collect();
    let Some(last) = eligible.last() else {
        return (total, 0, 0, false);
    };
    let now = Instant::now();
    let Ok(mut map) = sim.pcache.map.lock() else {
        return (total, 0, 0, false);
    };
    let mut read = 0u64;
    for b in &eligible {
        if map.get(&b.hash).is_some_and(|exp| *exp > now) {
            read = read.max(tok(b.bytes));
        }
    }
    for b in &eligible {
        let ttl = if b.long {
            Duration::from_secs(3600)
        } else {
            Duration::from_secs(300)
        };
        map.insert(b.hash, now + ttl);
    }
    let creation = tok(last.bytes).saturating_sub(read);
    let input = total.saturating_sub(read + creation);
    (input, creation, read, last.long)
}

/// The request checks; `model` is the body's, or on Vertex the URL's.
fn validate(
    obj: &Map<String, Value>,
    model: &str,
    vertex: bool,
    headers: &axum::http::HeaderMap,
    count_only: bool,
) -> Result<(), Response> {
    let inv = |m: &str| invalid(m, vertex);
    check_envelope(obj, vertex, count_only).map_err(|m| inv(&m))?;
    let msgs = match obj.get("messages") {
        None => return Err(inv("messages: Field required")),
        Some(Value::Array(a)) => a,
        Some(_) => return Err(inv("messages: Input should be a valid list")),
    };
    if msgs.is_empty() {
        return Err(inv("messages: at least one message is required"));
    }
    let mut cache_blocks = check_messages(msgs).map_err(|m| inv(&m))?;
    check_tool_pairing(msgs).map_err(|m| inv(&m))?;
    cache_blocks += check_system(obj).map_err(|m| inv(&m))?;
    if let Some(Value::Array(tools)) = obj.get("tools") {
        cache_blocks += tools
            .iter()
            .filter(|t| t.get("cache_control").is_some())
            .count();
    }
    if cache_blocks > 4 {
        return Err(inv(&format!(
            "A maximum of 4 blocks with cache_control may be provided. Found {cache_blocks}."
        )));
    }
    let gen = generation(model);
    check_sampling(obj, model, gen).map_err(|m| inv(&m))?;
    check_output_config(obj, gen).map_err(|m| inv(&m))?;
    check_tool_choice(obj, gen).map_err(|m| inv(&m))?;
    if let Some(th) = obj.get("thinking") {
        check_thinking(obj, th, msgs, headers, count_only, gen).map_err(|m| inv(&m))?;
    }
    if !count_only {
        check_thinking_replayed(obj, msgs, gen).map_err(|m| inv(&m))?;
    }
    Ok(())
}

/// Whether `tool_choice` forces a tool (`any` or `tool`).
fn forces_tool(obj: &Map<String, Value>) -> bool {
    obj.get("tool_choice")
        .and_then(|t| t.get("type"))
        .and_then(Value::as_str)
        .is_some_and(|t| t == "any" || t == "tool")
}

/// A forcing `tool_choice`: never with budget thinking, nowhere on the models that refuse it.
fn check_tool_choice(obj: &Map<String, Value>, gen: Generation) -> Result<(), String> {
    if !forces_tool(obj) {
        return Ok(());
    }
    if !gen.forced_tools {
        return Err("tool_choice: forced tool use (`any` or `tool`) is not supported on this model; use `auto` or `none`".into());
    }
    let budget = obj
        .get("thinking")
        .and_then(|t| t.get("type"))
        .and_then(Value::as_str)
        == Some("enabled");
    if budget {
        return Err("Thinking may not be enabled when `tool_choice` forces tool use.".into());
    }
    Ok(())
}

/// When the model thinks (and no forced tool makes it skip thinking), the last assistant turn,
/// if it called tools, must start with its thinking: the tool loop continues from there.
fn check_thinking_replayed(
    obj: &Map<String, Value>,
    msgs: &[Value],
    gen: Generation,
) -> Result<(), String> {
    let (_, tool_results) = last_user_turn(msgs);
    let (thinks, _) = thinking_mode(obj.get("thinking"), gen, tool_results);
    if !thinks || forces_tool(obj) {
        return Ok(());
    }
    let Some((k, last)) = msgs
        .iter()
        .enumerate()
        .rev()
        .find(|(_, m)| m.get("role").and_then(Value::as_str) == Some("assistant"))
    else {
        return Ok(());
    };
    let Some(Value::Array(blocks)) = last.get("content") else {
        return Ok(());
    };
    let kind = |b: &Value| {
        b.get("type")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned()
    };
    if !blocks.iter().any(|b| kind(b) == "tool_use") {
        return Ok(());
    }
    let first = blocks.first().map(kind).unwrap_or_default();
    if first == "thinking" || first == "redacted_thinking" {
        return Ok(());
    }
    Err(must_start_with_thinking(k, &first))
}

/// Anthropic's refusal of an assistant turn `k` that should start with its thinking.
fn must_start_with_thinking(k: usize, first: &str) -> String {
    format!(
        "messages.{k}.content.0.type: Expected `thinking` or `redacted_thinking`, but found `{first}`. When `thinking` is enabled, a final `assistant` message must start with a thinking block (preceeding the lastmost set of `tool_use` and `tool_result` blocks). We recommend you include thinking blocks from previous turns. To avoid this requirement, disable `thinking`. Please consult our documentation at https://docs.claude.com/en/docs/build-with-claude/extended-thinking"
    )
}

/// Top-level fields (a count's fewer), `anthropic_version` on Vertex (where the model is in the
/// URL, except when counting), `model` and `max_tokens` on the Messages API.
fn check_envelope(obj: &Map<String, Value>, vertex: bool, count_only: bool) -> Result<(), String> {
    let fields = if count_only { COUNT_FIELDS } else { TOP_FIELDS };
    for k in obj.keys() {
        let ok = fields.contains(&k.as_str()) || (vertex && k == "anthropic_version");
        if !ok || (vertex && !count_only && k == "model") {
            return Err(format!("{k}: Extra inputs are not permitted"));
        }
    }
    if vertex {
        match obj.get("anthropic_version") {
            None if count_only => {}
            None => return Err("anthropic_version: Field required".into()),
            Some(Value::String(s)) if s == VERTEX_VERSION => {}
            Some(_) => {
                return Err(format!(
                    "anthropic_version: Input should be '{VERTEX_VERSION}'"
                ))
            }
        }
    }
    if (!vertex || count_only) && !obj.contains_key("model") {
        return Err("model: Field required".into());
    }
    if count_only {
        return Ok(());
    }
    match obj.get("max_tokens").map(Value::as_i64) {
        None => Err("max_tokens: Field required".into()),
        Some(Some(n)) if n >= 1 => Ok(()),
        Some(Some(_)) => Err("max_tokens: Input should be greater than or equal to 1".into()),
        Some(None) => Err("max_tokens: Input should be a valid integer".into()),
    }
}

/// Roles alternate from `user`; content is a string or known blocks. Returns how many blocks
/// carry `cache_control`.
fn check_messages(msgs: &[Value]) -> Result<usize, String> {
    let mut prev_role: Option<&str> = None;
    let mut cache_blocks = 0usize;
    for (i, m) in msgs.iter().enumerate() {
        let role = match m.get("role").and_then(Value::as_str) {
            Some(r @ ("user" | "assistant")) => r,
            _ => {
                return Err(format!(
                    "messages.{i}.role: Input should be 'user' or 'assistant'"
                ))
            }
        };
        if i == 0 && role != "user" {
            return Err("messages: first message must use the \"user\" role".into());
        }
        if prev_role == Some(role) {
            return Err(format!(
                "messages: roles must alternate between \"user\" and \"assistant\", but found multiple \"{role}\" roles in a row"
            ));
        }
        prev_role = Some(role);
        match m.get("content") {
            Some(Value::String(_)) => {}
            Some(Value::Array(blocks)) => cache_blocks += check_blocks(i, blocks)?,
            None => return Err(format!("messages.{i}.content: Field required")),
            Some(_) => {
                return Err(format!(
                    "messages.{i}.content: Input should be a valid list"
                ))
            }
        }
    }
    Ok(cache_blocks)
}

/// The content blocks of message `i`: known types, text present, thinking signed by us for
/// that text, redacted thinking ours, tool ids of Anthropic's alphabet. Returns how many
/// blocks carry `cache_control` (those inside a `tool_result` included).
fn check_blocks(i: usize, blocks: &[Value]) -> Result<usize, String> {
    let mut cache_blocks = 0;
    for (j, b) in blocks.iter().enumerate() {
        let t = b.get("type").and_then(Value::as_str).unwrap_or("");
        if !BLOCK_TYPES.contains(&t) {
            return Err(format!(
                "messages.{i}.content.{j}: Input tag '{t}' found using 'type' does not match any of the expected tags: 'text', 'image', 'document', 'search_result', 'thinking', 'redacted_thinking', 'tool_use', 'tool_result', 'server_tool_use', 'web_search_tool_result'"
            ));
        }
        if t == "text" && !b.get("text").is_some_and(Value::is_string) {
            return Err(format!(
                "messages.{i}.content.{j}.text.text: Field required"
            ));
        }
        if t == "thinking" {
            let sig = b.get("signature").and_then(Value::as_str).unwrap_or("");
            let text = b.get("thinking").and_then(Value::as_str).unwrap_or("");
            if !thinking_signature_ok(sig, text) {
                return Err(format!(
                    "messages.{i}.content.{j}: Invalid `signature` in `thinking` block"
                ));
            }
        }
        if t == "redacted_thinking" {
            let data = b.get("data").and_then(Value::as_str).unwrap_or("");
            if !redacted_data_ok(data) {
                return Err(format!(
                    "messages.{i}.content.{j}: Invalid `data` in `redacted_thinking` block"
                ));
            }
        }
        for (kind, key) in [("tool_use", "id"), ("tool_result", "tool_use_id")] {
            let id = b.get(key).and_then(Value::as_str);
            if t == kind && !id.is_some_and(is_tool_id) {
                return Err(format!(
                    "messages.{i}.content.{j}.{kind}.{key}: String should match pattern '^[a-zA-Z0-9_-]+$'"
                ));
            }
        }
        if b.get("cache_control").is_some() {
            cache_blocks += 1;
        }
        if let (true, Some(Value::Array(inner))) = (t == "tool_result", b.get("content")) {
            cache_blocks += inner
                .iter()
                .filter(|c| c.get("cache_control").is_some())
                .count();
        }
    }
    Ok(cache_blocks)
}

/// The ids of message `m`'s blocks of type `kind`, read from `key`.
fn block_ids(m: &Value, kind: &str, key: &str) -> Vec<String> {
    m.get("content")
        .and_then(Value::as_array)
        .map(|bs| {
            bs.iter()
                .filter(|b| b.get("type").and_then(Value::as_str) == Some(kind))
                .filter_map(|b| b.get(key).and_then(Value::as_str).map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// Every `tool_result` answers a `tool_use` of the message before, and every `tool_use` is
/// answered in the next message.
fn check_tool_pairing(msgs: &[Value]) -> Result<(), String> {
    for (i, m) in msgs.iter().enumerate() {
        let results = block_ids(m, "tool_result", "tool_use_id");
        if !results.is_empty() {
            let prev = i.checked_sub(1).and_then(|k| msgs.get(k));
            let uses = prev
                .map(|p| block_ids(p, "tool_use", "id"))
                .unwrap_or_default();
            if let Some((j, bad)) = results.iter().enumerate().find(|(_, r)| !uses.contains(r)) {
                return Err(format!(
                    "messages.{i}.content.{j}: unexpected `tool_use_id` found in `tool_result` blocks: {bad}. Each `tool_result` block must have a corresponding `tool_use` block in the previous message."
                ));
            }
        }
        let uses = block_ids(m, "tool_use", "id");
        if !uses.is_empty() && i + 1 < msgs.len() {
            let answered = msgs
                .get(i + 1)
                .map(|n| block_ids(n, "tool_result", "tool_use_id"))
                .unwrap_or_default();
            let missing: Vec<&str> = uses
                .iter()
                .filter(|u| !answered.contains(u))
                .map(String::as_str)
                .collect();
            if !missing.is_empty() {
                return Err(format!(
                    "messages.{i}: `tool_use` ids were found without `tool_result` blocks immediately after: {}. Each `tool_use` block must have a corresponding `tool_result` block in the next message.",
                    missing.join(", ")
                ));
            }
        }
    }
    Ok(())
}

/// `system`: a string or text blocks. Returns how many blocks carry `cache_control`.
fn check_system(obj: &Map<String, Value>) -> Result<usize, String> {
    match obj.get("system") {
        None | Some(Value::String(_)) => Ok(0),
        Some(Value::Array(blocks)) => {
            let mut cache_blocks = 0;
            for (j, b) in blocks.iter().enumerate() {
                if b.get("type").and_then(Value::as_str) != Some("text") {
                    return Err(format!("system.{j}.type: Input should be 'text'"));
                }
                if !b.get("text").is_some_and(Value::is_string) {
                    return Err(format!("system.{j}.text: Field required"));
                }
                if b.get("cache_control").is_some() {
                    cache_blocks += 1;
                }
            }
            Ok(cache_blocks)
        }
        Some(_) => Err("system: Input should be a valid string".into()),
    }
}

/// `temperature` in [0, 1], not beside `top_p` on newer models, only defaults on the
/// adaptive-only generations; string stop sequences.
fn check_sampling(obj: &Map<String, Value>, model: &str, gen: Generation) -> Result<(), String> {
    let temperature = obj.get("temperature").and_then(Value::as_f64);
    if let Some(t) = temperature {
        if t > 1.0 {
            return Err("temperature: Input should be less than or equal to 1".into());
        }
        if t < 0.0 {
            return Err("temperature: Input should be greater than or equal to 0".into());
        }
    }
    if gen.default_sampling {
        check_default_sampling(obj, temperature)?;
    }
    if temperature.is_some() && obj.get("top_p").is_some() && is_newer_sampling_model(model) {
        return Err("`temperature` and `top_p` cannot both be specified for this model. Please use only one.".into());
    }
    if let Some(Value::Array(stops)) = obj.get("stop_sequences") {
        if stops.iter().any(|s| !s.is_string()) {
            return Err("stop_sequences.0: Input should be a valid string".into());
        }
    }
    Ok(())
}

/// On the adaptive-only generations: `temperature` only at its default 1, no `top_p`, no
/// `top_k` (the sampling parameters are deprecated there).
fn check_default_sampling(
    obj: &Map<String, Value>,
    temperature: Option<f64>,
) -> Result<(), String> {
    if temperature.is_some_and(|t| t != 1.0) {
        return Err("temperature: this model only supports the default temperature of 1; leave `temperature` unset".into());
    }
    for name in ["top_p", "top_k"] {
        if obj.get(name).is_some_and(|v| !v.is_null()) {
            return Err(format!(
                "{name}: `{name}` is not supported on this model; leave it unset"
            ));
        }
    }
    Ok(())
}

/// Top-level `output_config`: `effort` one of the five levels, and only on models with effort.
fn check_output_config(obj: &Map<String, Value>, gen: Generation) -> Result<(), String> {
    let Some(oc) = obj.get("output_config") else {
        return Ok(());
    };
    let Some(oc) = oc.as_object() else {
        return Err("output_config: Input should be a valid dictionary".into());
    };
    if let Some(k) = oc
        .keys()
        .find(|k| !["effort", "format"].contains(&k.as_str()))
    {
        return Err(format!("output_config.{k}: Extra inputs are not permitted"));
    }
    let Some(effort) = oc.get("effort") else {
        return Ok(());
    };
    if !gen.effort {
        return Err("output_config.effort: effort is not supported on this model".into());
    }
    match effort.as_str() {
        Some(e) if EFFORTS.contains(&e) => Ok(()),
        _ => Err(
            "output_config.effort: Input should be 'low', 'medium', 'high', 'xhigh' or 'max'"
                .into(),
        ),
    }
}

/// The fields a `thinking` object of type `kind` may hold, and its `display`.
fn check_thinking_fields(kind: &str, th: &Value) -> Result<(), String> {
    let allowed: &[&str] = match kind {
        "enabled" => &["type", "budget_tokens", "display"],
        "adaptive" | "between_tools" => &["type", "display"],
        _ => &["type"],
    };
    if let Some(k) = th
        .as_object()
        .and_then(|o| o.keys().find(|k| !allowed.contains(&k.as_str())))
    {
        return Err(format!(
            "thinking.{kind}.{k}: Extra inputs are not permitted"
        ));
    }
    match th.get("display") {
        None => Ok(()),
        Some(Value::String(d)) if d == "summarized" || d == "omitted" => Ok(()),
        Some(_) => Err(format!(
            "thinking.{kind}.display: Input should be 'summarized' or 'omitted'"
        )),
    }
}

/// `thinking`: its type (as the model's generation allows it), the budget (at least 1024,
/// below `max_tokens` unless interleaved), and what thinking forbids.
fn check_thinking(
    obj: &Map<String, Value>,
    th: &Value,
    msgs: &[Value],
    headers: &axum::http::HeaderMap,
    count_only: bool,
    gen: Generation,
) -> Result<(), String> {
    let kind = th.get("type").and_then(Value::as_str).unwrap_or("");
    check_thinking_fields(kind, th)?;
    match kind {
        "disabled" if gen.can_disable => return Ok(()),
        "disabled" => return Err("thinking.type: thinking cannot be disabled on this model; use `output_config.effort: \"low\"` to think less".into()),
        "between_tools" if gen.between_tools => return Ok(()),
        "between_tools" => return Err("thinking.type: 'between_tools' is not supported on this model".into()),
        "adaptive" if gen.adaptive => {}
        "adaptive" => return Err("thinking.type: adaptive thinking is not supported on this model; use `thinking: {\"type\": \"enabled\", \"budget_tokens\": N}`".into()),
        "enabled" if !gen.budget => return Err("thinking.enabled.budget_tokens: budget_tokens is not supported on this model. Use adaptive thinking (`thinking: {\"type\": \"adaptive\"}`) with `output_config.effort` to control how much the model thinks.".into()),
        "enabled" => {
            let budget = th
                .get("budget_tokens")
                .and_then(Value::as_i64)
                .ok_or("thinking.enabled.budget_tokens: Field required")?;
            if budget < 1024 {
                return Err("thinking.enabled.budget_tokens: Input should be greater than or equal to 1024".into());
            }
            let interleaved = headers
                .get("anthropic-beta")
                .and_then(|v| v.to_str().ok())
                .is_some_and(|b| b.contains("interleaved-thinking"));
            let max = obj.get("max_tokens").and_then(Value::as_i64).unwrap_or(i64::MAX);
            if !count_only && !interleaved && budget >= max {
                return Err("`max_tokens` must be greater than `thinking.budget_tokens`. Please consult our documentation at https://docs.claude.com/en/docs/build-with-claude/extended-thinking#max-tokens-and-context-window-size".into());
            }
        }
        other => {
            return Err(format!(
                "thinking: Input tag '{other}' found using 'type' does not match any of the expected tags: 'disabled', 'enabled', 'adaptive', 'between_tools'"
            ))
        }
    }
    check_thinking_compatible(obj, msgs)
}

/// With thinking on: temperature 1, no `top_k`, `top_p` ≥ 0.95, and a final assistant message
/// (a prefill) that starts with a thinking block.
fn check_thinking_compatible(obj: &Map<String, Value>, msgs: &[Value]) -> Result<(), String> {
    let doc = "Please consult our documentation at https://docs.claude.com/en/docs/build-with-claude/extended-thinking#feature-compatibility";
    let temperature = obj.get("temperature").and_then(Value::as_f64);
    if temperature.is_some_and(|t| t != 1.0) {
        return Err(format!(
            "`temperature` may only be set to 1 when thinking is enabled. {doc}"
        ));
    }
    if obj.get("top_k").is_some() {
        return Err(format!(
            "`top_k` must be unset when thinking is enabled. {doc}"
        ));
    }
    if obj
        .get("top_p")
        .and_then(Value::as_f64)
        .is_some_and(|p| p < 0.95)
    {
        return Err(format!("`top_p` must be greater than or equal to 0.95 or unset when thinking is enabled. {doc}"));
    }
    let Some(last) = msgs
        .last()
        .filter(|m| m.get("role").and_then(Value::as_str) == Some("assistant"))
    else {
        return Ok(());
    };
    let first = match last.get("content") {
        Some(Value::Array(bs)) => bs
            .first()
            .and_then(|b| b.get("type"))
            .and_then(Value::as_str)
            .unwrap_or("text"),
        _ => "text",
    };
    if first == "thinking" || first == "redacted_thinking" {
        return Ok(());
    }
    Err(must_start_with_thinking(msgs.len() - 1, first))
}

fn status_fault(f: &Fault, vertex: bool, model: &str) -> Option<Response> {
    match (f, vertex) {
        (Fault::Status(429), false) => Some(fixtures::anthropic_429(false)),
        (Fault::Status(429), true) => Some(fixtures::vertex_claude_429(model)),
        (Fault::Status(500), v) => Some(fixtures::anthropic_500(v)),
        (Fault::Status(503), true) => Some(fixtures::gemini_503()),
        (Fault::Status(code), v) => Some(fixtures::anthropic_overloaded(*code, v)),
        (Fault::Garbage, _) => Some(fixtures::garbage_200()),
        _ => None,
    }
}

fn count_tokens(sim: &Sim, req: &Req) -> R {
    let obj = parse(req.body, false)?;
    let model = obj.get("model").and_then(Value::as_str).unwrap_or("");
    validate(&obj, model, false, req.headers, true)?;
    if sim.models.claude(Surface::Anthropic, model).is_none() {
        return Err(model_not_found(model));
    }
    Ok(counted(&obj, model))
}

/// The Vertex count: the model is the body's, a Vertex id (`claude-sonnet-4-5@20250929`).
fn vertex_count(sim: &Sim, req: &Req, project: &str, location: &str) -> R {
    let obj = parse(req.body, true)?;
    let model = obj.get("model").and_then(Value::as_str).unwrap_or("");
    // Vertex knows the model before it reads the rest (as on its other routes).
    if obj.contains_key("model") && sim.models.claude(Surface::AnthropicVertex, model).is_none() {
        return Err(fixtures::vertex_model_not_found(
            project,
            location,
            "anthropic",
            model,
        ));
    }
    validate(&obj, model, true, req.headers, true)?;
    Ok(counted(&obj, model))
}

/// `{"input_tokens": N}`: the prompt as a message of `model` would count it.
fn counted(obj: &Map<String, Value>, model: &str) -> Response {
    let scan = scan_prompt(obj, model);
    let v = serde_json::json!({ "input_tokens": prompt_tok(scan.bytes) });
    respond::json(StatusCode::OK, JSON_PLAIN, &v)
}

// ---------------------------------------------------------------------------------------------
// Response shapes
// ---------------------------------------------------------------------------------------------

#[derive(Serialize, Clone)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Block<'a> {
    Thinking {
        thinking: &'a str,
        signature: &'a str,
    },
    RedactedThinking {
        data: &'a str,
    },
    Text {
        text: &'a str,
    },
    ToolUse {
        id: &'a str,
        name: &'a str,
        input: &'a Value,
    },
}

#[derive(Serialize, Clone, Copy)]
struct CacheCreation {
    ephemeral_5m_input_tokens: u64,
    ephemeral_1h_input_tokens: u64,
}

#[derive(Serialize, Clone, Copy)]
struct Usage {
    #[serde(skip_serializing_if = "Option::is_none")]
    input_tokens: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    cache_creation_input_tokens: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    cache_read_input_tokens: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    cache_creation: Option<CacheCreation>,
    output_tokens: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    service_tier: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    inference_geo: Option<&'static str>,
}

/// `model` is serialised first on the direct API and after `role` on Vertex (as captured).
#[derive(Serialize)]
struct Msg<'a> {
    #[serde(rename = "model", skip_serializing_if = "Option::is_none")]
    model_first: Option<&'a str>,
    id: &'a str,
    #[serde(rename = "type")]
    kind: &'static str,
    role: &'static str,
    #[serde(rename = "model", skip_serializing_if = "Option::is_none")]
    model_last: Option<&'a str>,
    content: Vec<Block<'a>>,
    stop_reason: Option<&'a str>,
    stop_sequence: Option<&'a str>,
    usage: Usage,
}

#[derive(Serialize)]
struct MsgStart<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    message: Msg<'a>,
}

#[derive(Serialize)]
struct BlockStart<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    index: usize,
    content_block: Block<'a>,
}

/// Variant names are the wire `type`s (`text_delta`, …).
#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
#[allow(clippy::enum_variant_names)]
enum Delta<'a> {
    TextDelta { text: &'a str },
    ThinkingDelta { thinking: &'a str },
    SignatureDelta { signature: &'a str },
    InputJsonDelta { partial_json: &'a str },
}

#[derive(Serialize)]
struct BlockDelta<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    index: usize,
    delta: Delta<'a>,
}

#[derive(Serialize)]
struct IndexOnly {
    #[serde(rename = "type")]
    kind: &'static str,
    index: usize,
}

#[derive(Serialize)]
struct TypeOnly {
    #[serde(rename = "type")]
    kind: &'static str,
}

#[derive(Serialize)]
struct StopDelta<'a> {
    stop_reason: &'a str,
    stop_sequence: Option<&'a str>,
}

#[derive(Serialize)]
struct MsgDelta<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    delta: StopDelta<'a>,
    usage: Usage,
}

struct Answer {
    /// Thinking text (empty when not shown) and its signature.
    thinking: Option<(String, String)>,
    /// Redacted thinking's data, in place of `thinking`.
    redacted: Option<String>,
    text: Option<String>,
    calls: Vec<(String, String)>,
    /// The calls' arguments (`Markers::call_args`).
    args: Value,
    stop_reason: &'static str,
    stop_sequence: Option<String>,
    output_tokens: u64,
    input: u64,
    creation: u64,
    read: u64,
    long_ttl: bool,
}

fn choose_calls(obj: &Map<String, Value>, markers: &Markers) -> Vec<String> {
    let declared: Vec<String> = obj
        .get("tools")
        .and_then(Value::as_array)
        .map(|ts| {
            ts.iter()
                .filter_map(|t| t.get("name").and_then(Value::as_str))
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default();
    if declared.is_empty() {
        return Vec::new();
    }
    let tc = obj.get("tool_choice");
    let kind = tc
        .and_then(|t| t.get("type"))
        .and_then(Value::as_str)
        .unwrap_or("auto");
    let single = tc
        .and_then(|t| t.get("disable_parallel_tool_use"))
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let name = match kind {
        "none" => None,
        "tool" => tc
            .and_then(|t| t.get("name"))
            .and_then(Value::as_str)
            .map(str::to_owned),
        "any" => markers
            .call
            .clone()
            .filter(|c| declared.contains(c))
            .or_else(|| declared.first().cloned()),
        _ => match &markers.call {
            Some(c) if declared.contains(c) => Some(c.clone()),
            Some(_) => None,
            None if markers.parallel.is_some() => declared.first().cloned(),
            None => None,
        },
    };
    let n = if single {
        1
    } else {
        markers.parallel.unwrap_or(1)
    };
    name.map(|n0| vec![n0; n]).unwrap_or_default()
}

fn messages(sim: &Sim, req: &Req, url_model: Option<&str>, stream_route: bool) -> R {
    let vertex = url_model.is_some();
    let obj = parse(req.body, vertex)?;
    let msgs: &[Value] = obj
        .get("messages")
        .and_then(Value::as_array)
        .map_or(&[], |v| v.as_slice());
    let (user_text, tool_results) = last_user_turn(msgs);
    let markers = Markers::scan(&user_text);
    let latency = markers.latency_ms;
    let model_raw = url_model
        .map(str::to_owned)
        .or_else(|| obj.get("model").and_then(Value::as_str).map(str::to_owned))
        .unwrap_or_default();
    let surface = if vertex {
        Surface::AnthropicVertex
    } else {
        Surface::Anthropic
    };
    let fault = sim.pick_fault(&markers, surface);
    if let Some(r) = fault
        .as_ref()
        .and_then(|f| status_fault(f, vertex, &model_raw))
    {
        return Ok(respond::with_latency(r, latency));
    }
    let r = answer(
        sim,
        req,
        &obj,
        vertex,
        &model_raw,
        stream_route,
        &markers,
        &user_text,
        tool_results,
        fault,
    );
    Ok(respond::with_latency(r.unwrap_or_else(|e| e), latency))
}

#[allow(clippy::too_many_arguments)]
fn answer(
    sim: &Sim,
    req: &Req,
    obj: &Map<String, Value>,
    vertex: bool,
    model_raw: &str,
    stream_route: bool,
    markers: &Markers,
    user_text: &str,
    tool_results: usize,
    fault: Option<Fault>,
) -> R {
    validate(obj, model_raw, vertex, req.headers, false)?;
    // Vertex checked the id against its registry before the body (`vertex.rs`); its ids
    // `claude-x@YYYYMMDD` come back as `claude-x-YYYYMMDD`. The direct API answers an alias
    // with the dated id it resolves to.
    let model = if vertex {
        model_raw.replace('@', "-")
    } else {
        sim.models
            .claude(Surface::Anthropic, model_raw)
            .ok_or_else(|| model_not_found(model_raw))?
            .api_id()
    };
    let stream = stream_route || obj.get("stream").and_then(Value::as_bool).unwrap_or(false);
    let max_tokens = obj.get("max_tokens").and_then(Value::as_u64).unwrap_or(1);
    let gen = generation(&model);
    let (thinks, shown) = thinking_mode(obj.get("thinking"), gen, tool_results);
    // A forced tool (where taken) skips the thinking: the answer starts with the call.
    let thinks = thinks && !forces_tool(obj);
    let scan = scan_prompt(obj, &model);
    let total = prompt_tok(scan.bytes);
    let (input, creation, read, long_ttl) = cache_usage(sim, &scan, &model, total);
    let subject = content::user_subject(user_text, tool_results);
    let blocked = matches!(fault, Some(Fault::Blocked));
    let mut ans = Answer {
        thinking: None,
        redacted: None,
        text: None,
        calls: Vec::new(),
        args: markers.call_args(),
        stop_reason: "end_turn",
        stop_sequence: None,
        output_tokens: 0,
        input,
        creation,
        read,
        long_ttl,
    };
    if blocked {
        ans.stop_reason = "refusal";
    } else {
        let mut used = 0u64;
        if thinks {
            // Billed in full whether or not the text is shown.
            let t = content::thought_text(&subject);
            used = tok(t.len());
            if user_text.contains(REDACTED_TRIGGER) {
                ans.redacted = Some(redacted_data(&subject));
            } else {
                let sig = thinking_signature(&t);
                ans.thinking = Some((if shown { t } else { String::new() }, sig));
            }
        }
        let calls = choose_calls(obj, markers);
        if !calls.is_empty() {
            ans.output_tokens = used
                + calls
                    .iter()
                    .map(|c| call_tokens_with(c, &ans.args))
                    .sum::<u64>();
            let prefix = if vertex { "toolu_vrtx_01" } else { "toolu_01" };
            ans.calls = calls
                .into_iter()
                .map(|n| (format!("{prefix}{}", random_id(22)), n))
                .collect();
            ans.stop_reason = "tool_use";
        } else {
            let full = content::reply_text(&subject);
            let stops: Vec<String> = obj
                .get("stop_sequences")
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .filter_map(Value::as_str)
                        .map(str::to_owned)
                        .collect()
                })
                .unwrap_or_default();
            let (stopped, hit) = apply_stop(&full, &stops);
            let (kept, cut) = cap_tokens(stopped, max_tokens.saturating_sub(used));
            if cut {
                ans.stop_reason = "max_tokens";
            } else if let Some(h) = hit {
                ans.stop_reason = "stop_sequence";
                ans.stop_sequence = Some(h.to_owned());
            }
            ans.output_tokens = used + tok(kept.len());
            ans.text = Some(kept.to_owned());
        }
    }
    let id = if vertex {
        format!("msg_vrtx_01{}", random_id(22))
    } else {
        format!("msg_01{}", random_id(22))
    };
    let rid = fixtures::anthropic_request_id(vertex);
    let resp = if stream {
        let events = stream_events(&ans, &model, &id, vertex, sim.chunks(markers));
        let sf = match fault {
            Some(Fault::BreakAfter(k)) => StreamFault::BreakAfter(k),
            Some(Fault::Stall) => StreamFault::StallAfter(1),
            Some(f @ (Fault::ErrorEvent | Fault::ErrorFirst)) => {
                // Before or after the first content event (message_start, block start and ping
                // come first).
                let first_delta = events
                    .iter()
                    .position(|e| e.starts_with(b"event: content_block_delta"))
                    .unwrap_or(events.len());
                let after = usize::from(f == Fault::ErrorEvent);
                let at = (first_delta + after).min(events.len());
                StreamFault::ErrorTail(at, fixtures::anthropic_error_event())
            }
            _ => StreamFault::None,
        };
        let mut r = respond::sse(faults::deliver(events, sim.delay(markers), sf));
        if let Ok(v) = axum::http::HeaderValue::from_str("text/event-stream; charset=utf-8") {
            r.headers_mut().insert(axum::http::header::CONTENT_TYPE, v);
        }
        r
    } else {
        let msg = build_msg(&ans, &model, &id, vertex, &ans.args, false);
        let body = serde_json::to_vec(&msg).map_err(|e| respond::internal(&e.to_string()))?;
        crate::buffered_with_fault(Bytes::from(body), JSON_PLAIN, fault.as_ref(), || {
            fixtures::anthropic_500(vertex)
        })
    };
    Ok(respond::with_header(resp, "request-id", &rid))
}

fn usage(ans: &Answer, vertex: bool, output: u64) -> Usage {
    if vertex {
        return Usage {
            input_tokens: Some(ans.input),
            cache_creation_input_tokens: Some(ans.creation),
            cache_read_input_tokens: Some(ans.read),
            cache_creation: None,
            output_tokens: output,
            service_tier: None,
            inference_geo: None,
        };
    }
    let (m5, h1) = if ans.long_ttl {
        (0, ans.creation)
    } else {
        (ans.creation, 0)
    };
    Usage {
        input_tokens: Some(ans.input),
        cache_creation_input_tokens: Some(ans.creation),
        cache_read_input_tokens: Some(ans.read),
        cache_creation: Some(CacheCreation {
            ephemeral_5m_input_tokens: m5,
            ephemeral_1h_input_tokens: h1,
        }),
        output_tokens: output,
        service_tier: Some("standard"),
        inference_geo: Some("not_available"),
    }
}

fn build_msg<'a>(
    ans: &'a Answer,
    model: &'a str,
    id: &'a str,
    vertex: bool,
    args: &'a Value,
    start: bool,
) -> Msg<'a> {
    let mut content = Vec::new();
    if !start {
        if let Some((t, s)) = &ans.thinking {
            content.push(Block::Thinking {
                thinking: t,
                signature: s,
            });
        }
        if let Some(data) = &ans.redacted {
            content.push(Block::RedactedThinking { data });
        }
        if let Some(t) = &ans.text {
            content.push(Block::Text { text: t });
        }
        for (cid, name) in &ans.calls {
            content.push(Block::ToolUse {
                id: cid,
                name,
                input: args,
            });
        }
    }
    Msg {
        model_first: (!vertex).then_some(model),
        id,
        kind: "message",
        role: "assistant",
        model_last: vertex.then_some(model),
        content,
        stop_reason: (!start).then_some(ans.stop_reason),
        stop_sequence: if start {
            None
        } else {
            ans.stop_sequence.as_deref()
        },
        usage: usage(ans, vertex, if start { 1 } else { ans.output_tokens }),
    }
}

fn stream_events(ans: &Answer, model: &str, id: &str, vertex: bool, chunks: usize) -> Vec<Bytes> {
    let args = Value::Object(Map::new());
    let mut ev = Vec::new();
    ev.push(respond::sse_event(
        "message_start",
        &MsgStart {
            kind: "message_start",
            message: build_msg(ans, model, id, vertex, &args, true),
        },
    ));
    let mut index = 0usize;
    let mut pinged = false;
    let mut start_block = |ev: &mut Vec<Bytes>, index: usize, block: Block| {
        ev.push(respond::sse_event(
            "content_block_start",
            &BlockStart {
                kind: "content_block_start",
                index,
                content_block: block,
            },
        ));
        if !pinged {
            ev.push(respond::sse_event("ping", &TypeOnly { kind: "ping" }));
            pinged = true;
        }
    };
    let delta = |index: usize, d: Delta| {
        respond::sse_event(
            "content_block_delta",
            &BlockDelta {
                kind: "content_block_delta",
                index,
                delta: d,
            },
        )
    };
    let stop = |index: usize| {
        respond::sse_event(
            "content_block_stop",
            &IndexOnly {
                kind: "content_block_stop",
                index,
            },
        )
    };
    if let Some((t, s)) = &ans.thinking {
        start_block(
            &mut ev,
            index,
            Block::Thinking {
                thinking: "",
                signature: "",
            },
        );
        // With the text omitted only the signature comes.
        if !t.is_empty() {
            for piece in split_pieces(t, chunks) {
                ev.push(delta(index, Delta::ThinkingDelta { thinking: piece }));
            }
            ev.push(delta(index, Delta::ThinkingDelta { thinking: "" }));
        }
        ev.push(delta(index, Delta::SignatureDelta { signature: s }));
        ev.push(stop(index));
        index += 1;
    }
    // Redacted thinking comes whole in its block start, no deltas.
    if let Some(data) = &ans.redacted {
        start_block(&mut ev, index, Block::RedactedThinking { data });
        ev.push(stop(index));
        index += 1;
    }
    if let Some(t) = &ans.text {
        start_block(&mut ev, index, Block::Text { text: "" });
        for piece in split_pieces(t, chunks) {
            ev.push(delta(index, Delta::TextDelta { text: piece }));
        }
        ev.push(stop(index));
        index += 1;
    }
    for (cid, name) in &ans.calls {
        start_block(
            &mut ev,
            index,
            Block::ToolUse {
                id: cid,
                name,
                input: &args,
            },
        );
        ev.push(delta(index, Delta::InputJsonDelta { partial_json: "" }));
        let json = ans.args.to_string();
        let mut mid = json.len() / 2;
        while !json.is_char_boundary(mid) {
            mid -= 1;
        }
        let (a, b) = json.split_at(mid);
        ev.push(delta(index, Delta::InputJsonDelta { partial_json: a }));
        ev.push(delta(index, Delta::InputJsonDelta { partial_json: b }));
        ev.push(stop(index));
        index += 1;
    }
    let final_usage = if vertex {
        Usage {
            input_tokens: None,
            cache_creation_input_tokens: None,
            cache_read_input_tokens: None,
            cache_creation: None,
            output_tokens: ans.output_tokens,
            service_tier: None,
            inference_geo: None,
        }
    } else {
        Usage {
            cache_creation: None,
            service_tier: None,
            inference_geo: None,
            ..usage(ans, false, ans.output_tokens)
        }
    };
    ev.push(respond::sse_event(
        "message_delta",
        &MsgDelta {
            kind: "message_delta",
            delta: StopDelta {
                stop_reason: ans.stop_reason,
                stop_sequence: ans.stop_sequence.as_deref(),
            },
            usage: final_usage,
        },
    ));
    ev.push(respond::sse_event(
        "message_stop",
        &TypeOnly {
            kind: "message_stop",
        },
    ));
    if vertex {
        return ev;
    }
    // First-party quirks: padded JSON lines and `{"type": "ping"}` with a space.
    ev.into_iter()
        .enumerate()
        .map(|(i, e)| {
            if e.starts_with(b"event: ping\n") {
                Bytes::from_static(b"event: ping\ndata: {\"type\": \"ping\"}\n\n")
            } else {
                respond::pad_event(e, (i * 7 + 3) % 16)
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;
    use serde_json::json;

    fn v(x: Value) -> Map<String, Value> {
        x.as_object().unwrap().clone()
    }

    fn msg_of(r: Result<(), Response>) -> String {
        match r {
            Ok(()) => String::new(),
            Err(resp) => resp.status().to_string(),
        }
    }

    #[test]
    fn validation_rules() {
        let h = axum::http::HeaderMap::new();
        let ok = v(
            json!({"model":"claude-sonnet-4-5","max_tokens":10,"messages":[{"role":"user","content":"hi"}]}),
        );
        assert!(validate(&ok, "claude-sonnet-4-5", false, &h, false).is_ok());
        let no_max =
            v(json!({"model":"claude-haiku-4-5","messages":[{"role":"user","content":"hi"}]}));
        assert_eq!(
            msg_of(validate(&no_max, "claude-haiku-4-5", false, &h, false)),
            "400 Bad Request"
        );
        let twice = v(
            json!({"model":"claude-haiku-4-5","max_tokens":5,"messages":[{"role":"user","content":"a"},{"role":"user","content":"b"}]}),
        );
        assert!(validate(&twice, "claude-haiku-4-5", false, &h, false).is_err());
        let extra = v(
            json!({"model":"claude-haiku-4-5","max_tokens":5,"messages":[{"role":"user","content":"a"}],"n":2}),
        );
        assert!(validate(&extra, "claude-haiku-4-5", false, &h, false).is_err());
        let low_budget = v(
            json!({"model":"claude-haiku-4-5","max_tokens":5000,"thinking":{"type":"enabled","budget_tokens":512},"messages":[{"role":"user","content":"a"}]}),
        );
        assert!(validate(&low_budget, "claude-haiku-4-5", false, &h, false).is_err());
        let over = v(
            json!({"model":"claude-haiku-4-5","max_tokens":2000,"thinking":{"type":"enabled","budget_tokens":2000},"messages":[{"role":"user","content":"a"}]}),
        );
        assert!(validate(&over, "claude-haiku-4-5", false, &h, false).is_err());
        let vertex_model = v(
            json!({"model":"claude-haiku-4-5","anthropic_version":VERTEX_VERSION,"max_tokens":5,"messages":[{"role":"user","content":"a"}]}),
        );
        assert!(validate(&vertex_model, "claude-haiku-4-5", true, &h, false).is_err());
        let orphan = v(
            json!({"model":"claude-haiku-4-5","max_tokens":5,"messages":[
            {"role":"user","content":"a"},{"role":"assistant","content":"b"},
            {"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_x","content":"r"}]}]}),
        );
        assert!(validate(&orphan, "claude-haiku-4-5", false, &h, false).is_err());
        let both = v(
            json!({"model":"claude-sonnet-4-5","max_tokens":5,"temperature":0.5,"top_p":0.9,"messages":[{"role":"user","content":"a"}]}),
        );
        assert!(validate(&both, "claude-sonnet-4-5", false, &h, false).is_err());
    }

    /// The 400 message of `body` for `model` (empty when valid), direct or on Vertex.
    fn refusal(model: &str, extra: Value, vertex: bool) -> String {
        let mut body = json!({"max_tokens": 4000, "messages": [{"role": "user", "content": "a"}]});
        if vertex {
            body["anthropic_version"] = json!(VERTEX_VERSION);
        } else {
            body["model"] = json!(model);
        }
        for (k, val) in extra.as_object().unwrap() {
            body[k] = val.clone();
        }
        let h = axum::http::HeaderMap::new();
        match validate(&v(body), model, vertex, &h, false) {
            Ok(()) => String::new(),
            Err(resp) => {
                assert_eq!(resp.status(), 400);
                let bytes = futures_body(resp);
                let e: Value = serde_json::from_slice(&bytes).unwrap();
                let e = &e["error"];
                assert_eq!(e["type"], "invalid_request_error", "{e}");
                e["message"].as_str().unwrap().to_owned()
            }
        }
    }

    fn futures_body(resp: Response) -> Bytes {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        rt.block_on(axum::body::to_bytes(resp.into_body(), usize::MAX))
            .unwrap()
    }

    const ADAPTIVE_ONLY: &[&str] = &[
        "claude-opus-5-5",
        "claude-sonnet-5-5",
        "claude-haiku-5-5",
        "claude-fable-5-1",
        "claude-fable-5-2",
        "claude-fable-5",
        "claude-opus-5",
        "claude-sonnet-5",
        "claude-opus-4-8",
        "claude-opus-4-7",
    ];

    #[test]
    fn generations_by_id() {
        for m in ADAPTIVE_ONLY {
            let g = generation(m);
            assert!(
                g.adaptive_only && !g.budget && g.adaptive && g.effort,
                "{m}"
            );
            assert!(g.default_sampling, "{m}");
        }
        for (m, can_disable) in [
            ("claude-opus-5-5", false),
            ("claude-sonnet-5-5@20261001", false),
            ("claude-haiku-5-5", false),
            ("claude-fable-5-2", false),
            ("claude-opus-5-20260301", true),
            ("claude-sonnet-5", true),
            ("claude-opus-4-7", true),
        ] {
            assert_eq!(generation(m).can_disable, can_disable, "{m}");
        }
        assert!(generation("claude-sonnet-5-5").between_tools);
        assert!(!generation("claude-opus-5-5").between_tools);
        let both = generation("claude-opus-4-6");
        assert!(both.budget && both.adaptive && both.effort && !both.adaptive_only);
        assert_eq!(generation("claude-sonnet-4-6"), both);
        for m in [
            "claude-haiku-4-5-20251001",
            "claude-sonnet-4-5@20250929",
            "claude-opus-4-1",
            "claude-3-5-haiku",
        ] {
            let g = generation(m);
            assert!(
                g.budget && !g.adaptive && !g.effort && !g.default_sampling,
                "{m}"
            );
        }
    }

    #[test]
    fn adaptive_only_models_refuse_budgets_and_sampling() {
        let budget = json!({"thinking": {"type": "enabled", "budget_tokens": 2048}});
        for m in ADAPTIVE_ONLY {
            for vertex in [false, true] {
                let e = refusal(m, budget.clone(), vertex);
                assert!(
                    e.contains("budget_tokens is not supported on this model")
                        && e.contains("adaptive")
                        && e.contains("output_config.effort"),
                    "{m}: {e}"
                );
                assert_eq!(
                    refusal(
                        m,
                        json!({"thinking": {"type": "adaptive"}, "output_config": {"effort": "max"}}),
                        vertex
                    ),
                    "",
                    "{m}"
                );
            }
            for sampling in [
                json!({"temperature": 0.5}),
                json!({"top_p": 0.9}),
                json!({"top_p": 1}),
                json!({"top_k": 5}),
            ] {
                assert_ne!(refusal(m, sampling.clone(), false), "", "{m} {sampling}");
            }
            assert_eq!(refusal(m, json!({"temperature": 1}), false), "", "{m}");
        }
        let off = json!({"thinking": {"type": "disabled"}});
        for m in [
            "claude-opus-5-5",
            "claude-fable-5-1",
            "claude-sonnet-5-5",
            "claude-haiku-5-5",
        ] {
            assert!(
                refusal(m, off.clone(), false).contains("cannot be disabled"),
                "{m}"
            );
        }
        for m in [
            "claude-opus-5",
            "claude-sonnet-5",
            "claude-opus-4-8",
            "claude-opus-4-6",
            "claude-haiku-4-5",
        ] {
            assert_eq!(refusal(m, off.clone(), false), "", "{m}");
        }
        let between = json!({"thinking": {"type": "between_tools"}});
        assert_eq!(refusal("claude-sonnet-5-5", between.clone(), false), "");
        assert_ne!(refusal("claude-opus-5-5", between, false), "");
    }

    #[test]
    fn effort_and_display_are_checked() {
        for effort in EFFORTS {
            let oc = json!({"thinking": {"type": "adaptive", "display": "summarized"}, "output_config": {"effort": effort}});
            assert_eq!(
                refusal("claude-opus-5-5", oc.clone(), false),
                "",
                "{effort}"
            );
            assert_eq!(refusal("claude-opus-4-6", oc, false), "", "{effort}");
        }
        for (model, extra, want) in [
            (
                "claude-opus-5-5",
                json!({"output_config": {"effort": "minimal"}}),
                "output_config.effort: Input should be",
            ),
            (
                "claude-opus-5-5",
                json!({"output_config": {"effort": "extreme"}}),
                "output_config.effort: Input should be",
            ),
            (
                "claude-opus-5-5",
                json!({"output_config": {"budget": 1}}),
                "output_config.budget: Extra inputs",
            ),
            (
                "claude-opus-5-5",
                json!({"thinking": {"type": "adaptive", "effort": "high"}}),
                "thinking.adaptive.effort: Extra inputs are not permitted",
            ),
            (
                "claude-opus-5-5",
                json!({"thinking": {"type": "adaptive", "display": "full"}}),
                "thinking.adaptive.display: Input should be 'summarized' or 'omitted'",
            ),
            (
                "claude-opus-5-5",
                json!({"thinking": {"type": "adaptive", "budget_tokens": 2048}}),
                "thinking.adaptive.budget_tokens: Extra inputs",
            ),
            (
                "claude-haiku-4-5",
                json!({"output_config": {"effort": "low"}}),
                "output_config.effort: effort is not supported on this model",
            ),
            (
                "claude-sonnet-4-5",
                json!({"output_config": {"effort": "high"}}),
                "output_config.effort: effort is not supported",
            ),
            (
                "claude-haiku-4-5",
                json!({"thinking": {"type": "adaptive"}}),
                "thinking.type: adaptive thinking is not supported",
            ),
            (
                "claude-opus-4-5",
                json!({"thinking": {"type": "adaptive"}}),
                "thinking.type: adaptive thinking is not supported",
            ),
        ] {
            let e = refusal(model, extra.clone(), false);
            assert!(e.starts_with(want), "{model} {extra}: {e}");
        }
        // Budget models keep their rules; 4.6 still takes a budget.
        let budget = json!({"thinking": {"type": "enabled", "budget_tokens": 2048}});
        assert_eq!(refusal("claude-haiku-4-5", budget.clone(), false), "");
        assert_eq!(refusal("claude-opus-4-6", budget, false), "");
        assert_eq!(
            refusal(
                "claude-opus-4-5",
                json!({"output_config": {"effort": "low"}}),
                false
            ),
            ""
        );
    }

    #[test]
    fn thinking_modes_by_generation() {
        let opus55 = generation("claude-opus-5-5");
        let sonnet45 = generation("claude-sonnet-4-5");
        let t = |x: Value| Some(x);
        // (thinks, text shown)
        assert_eq!(
            thinking_mode(None, opus55, 0),
            (true, false),
            "on by default, omitted"
        );
        assert_eq!(
            thinking_mode(t(json!({"type": "adaptive"})).as_ref(), opus55, 0),
            (true, false)
        );
        assert_eq!(
            thinking_mode(
                t(json!({"type": "adaptive", "display": "summarized"})).as_ref(),
                opus55,
                0
            ),
            (true, true)
        );
        let off = t(json!({"type": "disabled"}));
        let opus5 = generation("claude-opus-5");
        assert_eq!(thinking_mode(off.as_ref(), opus5, 0), (false, false));
        let between = t(json!({"type": "between_tools"}));
        assert_eq!(thinking_mode(between.as_ref(), opus55, 0), (false, false));
        assert_eq!(thinking_mode(between.as_ref(), opus55, 1), (true, false));
        assert_eq!(
            thinking_mode(None, sonnet45, 0),
            (false, true),
            "off by default"
        );
        assert_eq!(
            thinking_mode(
                t(json!({"type": "enabled", "budget_tokens": 1024})).as_ref(),
                sonnet45,
                0
            ),
            (true, true),
            "budget models show the text as before"
        );
    }

    /// The 400 message of a count body (empty when valid), direct or on Vertex.
    fn count_refusal(model: &str, body: Value, vertex: bool) -> String {
        let h = axum::http::HeaderMap::new();
        match validate(&v(body), model, vertex, &h, true) {
            Ok(()) => String::new(),
            Err(resp) => {
                let e: Value = serde_json::from_slice(&futures_body(resp)).unwrap();
                e["error"]["message"].as_str().unwrap().to_owned()
            }
        }
    }

    #[test]
    fn counting_takes_what_claude_code_sends_and_only_the_count_fields() {
        let model = "claude-opus-4-6";
        let claude_code = json!({
            "model": model,
            "messages": [{"role": "user", "content": [{"type": "text", "text": "hi", "cache_control": {"type": "ephemeral"}}]}],
            "system": [{"type": "text", "text": "You are Claude Code."}],
            "tools": [
                {"name": "Read", "description": "reads", "input_schema": {"type": "object"}, "defer_loading": true},
                {"type": "tool_search_tool_regex_20251119", "name": "tool_search_tool_regex"}
            ],
            "thinking": {"type": "adaptive"},
            "output_config": {"effort": "high"},
            "context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]},
            "mcp_servers": [],
            "cache_control": {"type": "ephemeral"},
            "speed": "standard"
        });
        assert_eq!(count_refusal(model, claude_code.clone(), false), "");
        for extra in [
            "max_tokens",
            "stream",
            "temperature",
            "metadata",
            "service_tier",
        ] {
            let mut b = claude_code.clone();
            b[extra] = json!(1);
            assert_eq!(
                count_refusal(model, b, false),
                format!("{extra}: Extra inputs are not permitted")
            );
        }
        // The generation rules still apply when counting.
        let mut b = claude_code.clone();
        b["output_config"] = json!({"effort": "high"});
        assert!(count_refusal("claude-haiku-4-5", b, false).starts_with("output_config.effort"));
        let mut no_model = claude_code.clone();
        no_model.as_object_mut().unwrap().remove("model");
        assert_eq!(
            count_refusal(model, no_model.clone(), false),
            "model: Field required"
        );

        // On Vertex: the model is the body's, the version optional but exact.
        assert_eq!(count_refusal(model, claude_code.clone(), true), "");
        assert_eq!(
            count_refusal(model, no_model, true),
            "model: Field required"
        );
        let mut b = claude_code.clone();
        b["anthropic_version"] = json!(VERTEX_VERSION);
        assert_eq!(count_refusal(model, b.clone(), true), "");
        assert_eq!(
            count_refusal(model, b, false),
            "anthropic_version: Extra inputs are not permitted"
        );
        let mut b = claude_code;
        b["anthropic_version"] = json!("2023-06-01");
        assert_eq!(
            count_refusal(model, b, true),
            format!("anthropic_version: Input should be '{VERTEX_VERSION}'")
        );
    }

    #[test]
    fn breakpoints_follow_blocks() {
        let big = "x".repeat(8000);
        let o = v(
            json!({"system":[{"type":"text","text":big,"cache_control":{"type":"ephemeral"}}],
            "messages":[{"role":"user","content":"hello"}]}),
        );
        let s = scan_prompt(&o, "claude-sonnet-4-5");
        assert_eq!(s.breakpoints.len(), 1);
        assert_eq!(s.breakpoints[0].bytes, 8000);
        assert_eq!(s.bytes, 8005);
    }

    /// A tool loop on `model`: the assistant turn as given, its `toolu_1` call answered.
    fn tool_loop(assistant: Value, extra: Value) -> Value {
        let mut body = json!({
            "tools": [{"name": "f", "input_schema": {"type": "object"}}],
            "messages": [
                {"role": "user", "content": "a"},
                {"role": "assistant", "content": assistant},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "r"}]}
            ]
        });
        for (k, val) in extra.as_object().unwrap() {
            body[k] = val.clone();
        }
        body
    }

    fn call() -> Value {
        json!({"type": "tool_use", "id": "toolu_1", "name": "f", "input": {}})
    }

    #[test]
    fn thinking_signatures_are_bound_to_their_text() {
        let text = "Thinking: weather";
        let sig = thinking_signature(text);
        assert!(thinking_signature_ok(&sig, text));
        assert!(
            thinking_signature_ok(&sig, ""),
            "shown with display omitted"
        );
        assert!(!thinking_signature_ok(&sig, "Thinking: weather!"));
        assert!(!thinking_signature_ok(&content::signature(text), text));
        assert!(!thinking_signature_ok("Zm9yZ2Vk", ""));
        assert!(!thinking_signature_ok("%%", ""));
        // A signature with its digest changed is not one of ours.
        let mut raw = base64::engine::general_purpose::STANDARD
            .decode(&sig)
            .unwrap();
        raw[THINKING_MAGIC.len()] ^= 1;
        let tampered = base64::engine::general_purpose::STANDARD.encode(raw);
        assert!(!thinking_signature_ok(&tampered, ""));
        assert!(redacted_data_ok(&redacted_data("s")));
        assert!(
            !redacted_data_ok(&sig),
            "a thinking signature is no redacted data"
        );
    }

    #[test]
    fn tool_loops_with_thinking_replay_it_unmodified() {
        let budget = json!({"thinking": {"type": "enabled", "budget_tokens": 2048}});
        let text = "Thinking: a";
        let sig = thinking_signature(text);
        let thinking =
            |t: &str, s: &str| json!({"type": "thinking", "thinking": t, "signature": s});
        let plain = json!([{"type": "text", "text": "calling"}, call()]);
        let e = refusal(
            "claude-sonnet-4-5",
            tool_loop(plain.clone(), budget.clone()),
            false,
        );
        assert!(
            e.starts_with("messages.1.content.0.type: Expected `thinking` or `redacted_thinking`, but found `text`. When `thinking` is enabled, a final `assistant` message must start with a thinking block"),
            "{e}"
        );
        for ok in [
            json!([thinking(text, &sig), call()]),
            json!([thinking("", &sig), {"type": "text", "text": "calling"}, call()]),
            json!([{"type": "redacted_thinking", "data": redacted_data("a")}, call()]),
        ] {
            assert_eq!(
                refusal(
                    "claude-sonnet-4-5",
                    tool_loop(ok.clone(), budget.clone()),
                    false
                ),
                "",
                "{ok}"
            );
        }
        for (bad, want) in [
            (
                json!([thinking("Thinking: b", &sig), call()]),
                "messages.1.content.0: Invalid `signature` in `thinking` block",
            ),
            (
                json!([thinking(text, &content::signature(text)), call()]),
                "messages.1.content.0: Invalid `signature` in `thinking` block",
            ),
            (
                json!([{"type": "redacted_thinking", "data": "bm9wZQ=="}, call()]),
                "messages.1.content.0: Invalid `data` in `redacted_thinking` block",
            ),
        ] {
            assert_eq!(
                refusal(
                    "claude-sonnet-4-5",
                    tool_loop(bad.clone(), json!({})),
                    false
                ),
                want,
                "checked with thinking off too: {bad}"
            );
        }
        // Thinking off: the turn needs no thinking.
        assert_eq!(
            refusal(
                "claude-sonnet-4-5",
                tool_loop(plain.clone(), json!({})),
                false
            ),
            ""
        );
        assert_eq!(
            refusal(
                "claude-opus-5",
                tool_loop(plain.clone(), json!({"thinking": {"type": "disabled"}})),
                false
            ),
            ""
        );
        // Adaptive-only models think by default, so they want it back by default.
        assert!(
            refusal("claude-opus-5", tool_loop(plain.clone(), json!({})), false)
                .contains("but found `text`")
        );
        assert!(refusal(
            "claude-opus-4-6",
            tool_loop(plain.clone(), json!({"thinking": {"type": "adaptive"}})),
            true
        )
        .contains("but found `text`"));
        // A turn without a tool call needs none (earlier thinking is optional).
        let answered = json!({"thinking": {"type": "enabled", "budget_tokens": 2048}, "messages": [
            {"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}, {"role": "user", "content": "c"}]});
        assert_eq!(refusal("claude-sonnet-4-5", answered, false), "");
        // Counting does not check it.
        let mut count = tool_loop(plain, budget);
        count["model"] = json!("claude-sonnet-4-5");
        assert_eq!(count_refusal("claude-sonnet-4-5", count, false), "");
    }

    #[test]
    fn forced_tools_follow_the_thinking_mode_and_the_model() {
        let tools = json!([{"name": "f", "input_schema": {"type": "object"}}]);
        let with = |choice: Value, thinking: Value| {
            let mut b = json!({"tools": tools, "tool_choice": choice});
            if !thinking.is_null() {
                b["thinking"] = thinking;
            }
            b
        };
        let any = json!({"type": "any"});
        let named = json!({"type": "tool", "name": "f"});
        let budget = json!({"type": "enabled", "budget_tokens": 2048});
        let adaptive = json!({"type": "adaptive"});
        for forced in [&any, &named] {
            assert_eq!(
                refusal(
                    "claude-sonnet-4-5",
                    with(forced.clone(), budget.clone()),
                    false
                ),
                "Thinking may not be enabled when `tool_choice` forces tool use."
            );
            assert_eq!(
                refusal(
                    "claude-sonnet-4-5",
                    with(forced.clone(), Value::Null),
                    false
                ),
                ""
            );
            for m in ["claude-opus-4-6", "claude-opus-5", "claude-haiku-5-5"] {
                assert_eq!(
                    refusal(m, with(forced.clone(), adaptive.clone()), false),
                    "",
                    "{m}"
                );
            }
            for m in ["claude-opus-5-5", "claude-sonnet-5-5", "claude-fable-5-1"] {
                for thinking in [Value::Null, adaptive.clone()] {
                    assert!(
                        refusal(m, with(forced.clone(), thinking), false)
                            .starts_with("tool_choice: forced tool use"),
                        "{m}"
                    );
                }
                assert_eq!(
                    refusal(m, with(json!({"type": "auto"}), Value::Null), false),
                    ""
                );
            }
        }
        // A forced tool skips the thinking: the loop it starts has none to replay.
        let plain = json!([{"type": "text", "text": "calling"}, call()]);
        assert_eq!(
            refusal(
                "claude-opus-4-6",
                tool_loop(plain, json!({"thinking": adaptive, "tool_choice": any})),
                false
            ),
            ""
        );
    }

    #[test]
    fn tool_ids_and_breakpoints_are_checked() {
        let dotted = json!([{"type": "tool_use", "id": "call_x.1", "name": "f", "input": {}}]);
        let mut body = tool_loop(dotted, json!({}));
        assert_eq!(
            refusal("claude-sonnet-4-5", body.clone(), false),
            "messages.1.content.0.tool_use.id: String should match pattern '^[a-zA-Z0-9_-]+$'"
        );
        body["messages"][1]["content"][0]["id"] = json!("toolu_1");
        body["messages"][2]["content"][0]["tool_use_id"] = json!("toolu/1");
        assert_eq!(
            refusal("claude-sonnet-4-5", body, false),
            "messages.2.content.0.tool_result.tool_use_id: String should match pattern '^[a-zA-Z0-9_-]+$'"
        );
        let cc = json!({"type": "ephemeral"});
        let text = |t: &str| json!({"type": "text", "text": t, "cache_control": cc});
        let mut body = tool_loop(json!([call()]), json!({"system": [text("s")]}));
        body["messages"][0]["content"] = json!([text("a"), text("b")]);
        body["messages"][2]["content"] =
            json!([{"type": "tool_result", "tool_use_id": "toolu_1", "content": [text("r")]}]);
        assert_eq!(refusal("claude-sonnet-4-5", body.clone(), false), "");
        body["messages"][2]["content"][0]["cache_control"] = cc.clone();
        assert_eq!(
            refusal("claude-sonnet-4-5", body, false),
            "A maximum of 4 blocks with cache_control may be provided. Found 5."
        );
    }

    #[test]
    fn redacted_thinking_streams_whole_in_its_block_start() {
        let data = redacted_data("x");
        let ans = Answer {
            thinking: None,
            redacted: Some(data.clone()),
            text: Some("Echo: x".into()),
            calls: Vec::new(),
            args: Value::Null,
            stop_reason: "end_turn",
            stop_sequence: None,
            output_tokens: 5,
            input: 1,
            creation: 0,
            read: 0,
            long_ttl: false,
        };
        let msg = serde_json::to_value(build_msg(
            &ans,
            "claude-opus-4-6",
            "msg_1",
            false,
            &Value::Null,
            false,
        ))
        .unwrap();
        assert_eq!(
            msg["content"][0],
            json!({"type": "redacted_thinking", "data": data})
        );
        let events: Vec<Value> = stream_events(&ans, "claude-opus-4-6", "msg_1", true, 2)
            .iter()
            .filter_map(|e| {
                let text = std::str::from_utf8(e).unwrap();
                text.lines()
                    .find_map(|l| l.strip_prefix("data: "))
                    .map(|d| serde_json::from_str(d).unwrap())
            })
            .collect();
        assert_eq!(
            events[1],
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "redacted_thinking", "data": data}})
        );
        assert_eq!(events[2], json!({"type": "ping"}));
        assert_eq!(events[3], json!({"type": "content_block_stop", "index": 0}));
        assert!(!events
            .iter()
            .any(|e| e["index"] == 0 && e["type"] == "content_block_delta"));
    }
}
