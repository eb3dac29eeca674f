//! Provider families behind one small adapter trait: plan the upstream request(s) from the parsed
//! OpenAI body, translate a buffered response, translate a stream incrementally, explain an
//! upstream error. Pure: bytes and structs in, bytes and structs out — no I/O, no clock, no
//! database — so every mapping is a unit test on a fixture.
//!
//! Each request gets one [`Plan`] from [`Adapter::plan`], translating the body once: a single
//! upstream request (optionally preceded by an explicit context-cache step), or — for requests
//! that need several upstream calls (Gemini embeddings batches) — a [`FanOut`]: the calls and a
//! pure joiner of their answers. The proxy and `upstream` do the sending.
//!
//! Shared plumbing lives here once: SSE framing and chunk writing (`sse`), a family's chat
//! stream with its chunks typed for the doors (`chat_stream`), a family's buffered answer typed
//! for them (`chat_answer`), usage (`api::Usage`).
//! Families: `openai_compat` (upstreams that already speak the OpenAI wire format), `gemini`
//! (Google Gemini, Developer API and Vertex AI), `anthropic` (Claude, direct and on Vertex AI),
//! all plugged in through [`adapter_for`]. Family-neutral translation pieces (the borrowed
//! string `Str`, the client's reasoning controls) live in `common`.

pub mod anthropic;
pub mod chat_answer;
pub mod chat_stream;
pub(crate) mod common;
pub mod gemini;
pub mod openai_compat;
pub mod sse;
#[cfg(test)]
pub(crate) mod test_support;

use std::fmt;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use http::{HeaderName, HeaderValue};

use crate::api::{GatewayError, Operation, RawRequest, Usage};
use crate::catalog::{Family, Model, Route, RouteKind};
use chat_answer::AnswerRender;
use chat_stream::ChatStream;

/// A credential read from the environment at start; never printed.
#[derive(Clone)]
pub struct Secret(Arc<str>);

impl Secret {
    pub fn new(value: impl Into<Arc<str>>) -> Self {
        Self(value.into())
    }
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(***)")
    }
}

/// A credential that changes over time (an OAuth2 access token): written by a background
/// refresher, read lock-free on the hot path.
#[derive(Debug, Default)]
pub struct TokenCell(arc_swap::ArcSwapOption<Secret>);

impl TokenCell {
    pub fn current(&self) -> Option<Secret> {
        self.0.load_full().map(|s| Secret::clone(&s))
    }
    pub fn set(&self, token: Option<Secret>) {
        self.0.store(token.map(Arc::new));
    }
}

/// Upstream credentials, resolved once at start (`upstream::credentials::from_env`).
#[derive(Debug, Clone, Default)]
pub struct Credentials {
    pub openai: Option<Secret>,
    pub gemini: Option<Secret>,
    pub anthropic: Option<Secret>,
    pub anthropic_version: String,
    /// Vertex AI access token (Gemini and Claude on Vertex), kept fresh in the background.
    pub vertex_token: Arc<TokenCell>,
    /// GCP project for Vertex URLs (env var, else the key file's `project_id`).
    pub vertex_project: Option<String>,
}

impl Credentials {
    /// Whether this gateway is set up to use routes of `kind` at all (a Vertex token being
    /// refreshed right now still counts): what `/v1/models` lists by.
    pub fn configured(&self, kind: RouteKind) -> bool {
        match kind {
            RouteKind::Vertex | RouteKind::VertexGlobal | RouteKind::VertexAnthropic => {
                self.vertex_project.is_some()
            }
            _ => self.missing_for(kind).is_none(),
        }
    }

    /// `text` with every credential of this gateway in it replaced, matched literally: what an
    /// upstream quotes back of the credential it was sent, in whatever words. Secrets shorter
    /// than 8 characters (placeholders for local servers) are left, or they would eat words.
    pub fn redact(&self, text: &str) -> String {
        let vertex = self.vertex_token.current();
        let secrets = [&self.openai, &self.gemini, &self.anthropic, &vertex]
            .into_iter()
            .flatten()
            .map(Secret::expose)
            .filter(|s| s.len() >= 8);
        let mut out = text.to_owned();
        for secret in secrets {
            if out.contains(secret) {
                out = out.replace(secret, "[redacted]");
            }
        }
        out
    }

    /// [`redact`](Self::redact) over translated stream bytes (UTF-8 SSE frames): the same bytes
    /// when no credential is in them.
    pub fn redact_bytes(&self, bytes: Bytes) -> Bytes {
        match std::str::from_utf8(&bytes) {
            Ok(text) => {
                let redacted = self.redact(text);
                if redacted == text {
                    bytes
                } else {
                    Bytes::from(redacted)
                }
            }
            Err(_) => bytes,
        }
    }

    /// What a route of `kind` needs and this gateway lacks, if anything (`openai` routes may
    /// run without a key: local servers expect none).
    pub fn missing_for(&self, kind: RouteKind) -> Option<&'static str> {
        match kind {
            RouteKind::OpenAi => None,
            RouteKind::GeminiApi => self.gemini.is_none().then_some("gemini"),
            RouteKind::Anthropic => self.anthropic.is_none().then_some("anthropic"),
            RouteKind::Vertex | RouteKind::VertexGlobal | RouteKind::VertexAnthropic => {
                if self.vertex_project.is_none() {
                    Some("vertex project")
                } else {
                    self.vertex_token.current().is_none().then_some("vertex")
                }
            }
        }
    }
}

/// Where a request goes: the resolved model and route, and what the client asked for.
pub struct Target<'a> {
    pub model: &'a Model,
    pub route: &'a Route,
    pub op: Operation,
    pub stream: bool,
    /// The longest an explicit context cache may live (`tollgate.max_cache_ttl`): the client's
    /// `cache_control.ttl` is capped to it.
    pub max_cache_ttl: std::time::Duration,
    /// Client headers the front door lets through to an upstream that speaks its dialect
    /// natively (the Messages door: `anthropic-version`, the allowed `anthropic-beta`s).
    pub forward: &'a [(HeaderName, HeaderValue)],
}

impl Target<'_> {
    /// The id the upstream knows the model by on this route.
    pub fn upstream_model(&self) -> &str {
        self.route
            .upstream_model
            .as_deref()
            .unwrap_or(&self.model.upstream_model)
    }
}

/// `tollgate.max_cache_ttl` by default: one hour.
pub const DEFAULT_MAX_CACHE_TTL: std::time::Duration = std::time::Duration::from_secs(3600);

/// The request to send upstream, fully built before the proxy connects.
#[derive(Debug)]
pub struct UpstreamRequest {
    /// Path and query, including the endpoint's base path.
    pub path: String,
    pub headers: Vec<(HeaderName, HeaderValue)>,
    pub body: Bytes,
}

/// What a response translation needs to know about its request.
#[derive(Debug, Clone)]
pub struct ResponseCx {
    /// The completion id the gateway minted; replaces the upstream's.
    pub id: Arc<str>,
    /// The tollgate model id the client asked for; replaces the upstream model name.
    pub model_id: Arc<str>,
    pub op: Operation,
    /// Unix seconds when the gateway received the request (translators have no clock).
    pub created: i64,
    /// The client asked for reasoning text to be left out of the response.
    pub exclude_reasoning: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TranslateError {
    #[error("upstream sent malformed JSON: {0}")]
    Json(String),
    #[error("upstream response has an unexpected shape: {0}")]
    Shape(String),
}

/// A buffered response in the client's wire format, and what it used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Translated {
    pub body: Bytes,
    pub usage: Usage,
    /// The upstream's own id for the answer, when its body says it (Gemini's `responseId`);
    /// preferred to the one its head carried.
    pub upstream_id: Option<Box<str>>,
    /// Where the body's usage object closes (the index of its `}`), when the translator wrote
    /// the body and knows: the charge is spliced there without reading the body
    /// (`doors::charge::into_body`). `None` for a body passed through as the upstream wrote it.
    pub usage_close: Option<usize>,
}

impl Translated {
    /// A body the gateway rendered with its usage object last (`…,"usage":{…}}`): the usage
    /// closes just before the body does.
    pub fn usage_last(body: Bytes, usage: Usage, upstream_id: Option<Box<str>>) -> Self {
        Translated {
            usage_close: body.len().checked_sub(2),
            body,
            usage,
            upstream_id,
        }
    }
}

/// What an adapter sends upstream for one client request, translated once from the parsed
/// body before the proxy connects.
#[derive(Debug)]
pub enum Plan {
    /// One upstream request, proxied; `cache`, when present, is an explicit context cache to
    /// create (or reuse) first, and then use in place of `request`'s body.
    Proxy {
        request: UpstreamRequest,
        cache: Option<CacheStep>,
    },
    /// Several upstream calls the gateway sends itself and joins into one answer.
    FanOut(FanOut),
}

impl Plan {
    /// One upstream request, no cache step.
    pub fn single(request: UpstreamRequest) -> Self {
        Plan::Proxy {
            request,
            cache: None,
        }
    }
}

/// Builds the upstream body that uses the named cache instead of sending the cached prefix.
pub type CachedBody = Box<dyn FnOnce(&str) -> Bytes + Send + Sync>;

/// An explicit context cache the request can use (Gemini): created once with `create` and
/// reused under `key` for `ttl`; once it exists, `body_using(name)` is the upstream body.
/// When creation fails the plan's own request (the whole prefix inline) is sent as is.
pub struct CacheStep {
    pub key: String,
    pub create: UpstreamRequest,
    pub ttl: std::time::Duration,
    pub body_using: CachedBody,
}

impl fmt::Debug for CacheStep {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CacheStep")
            .field("key", &self.key)
            .field("create", &self.create)
            .field("ttl", &self.ttl)
            .finish_non_exhaustive()
    }
}

/// Joins the answers of a [`FanOut`]'s calls, in call order, into the client's body and usage.
pub type Joiner =
    Box<dyn FnOnce(&[Bytes], &ResponseCx) -> Result<Translated, TranslateError> + Send + Sync>;

/// A client request served by several upstream calls (e.g. an embeddings batch larger than the
/// upstream's per-call limit). The proxy sends `calls` to the route's endpoint itself,
/// concurrently with a small bound; when every call answered 2xx it hands their bodies, in call
/// order, to `join` and answers the client locally. Any failing call fails the whole request.
pub struct FanOut {
    pub calls: Vec<UpstreamRequest>,
    pub join: Joiner,
}

impl fmt::Debug for FanOut {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FanOut")
            .field("calls", &self.calls)
            .finish_non_exhaustive()
    }
}

/// One provider family.
pub trait Adapter: Send + Sync {
    /// Everything to send for `req`: one request (maybe after a cache step) or a fan-out.
    fn plan(
        &self,
        req: &RawRequest<'_>,
        target: &Target<'_>,
        creds: &Credentials,
    ) -> Result<Plan, GatewayError>;

    fn translate_buffered(
        &self,
        body: &[u8],
        cx: &ResponseCx,
    ) -> Result<Translated, TranslateError>;

    fn stream_translator(&self, cx: ResponseCx) -> Box<dyn StreamTranslator>;

    /// A useful message for an upstream non-2xx answer (status is preserved by the caller).
    fn upstream_error_message(&self, status: u16, body: &[u8]) -> String;

    /// The upstream call that counts `req`'s input tokens (the Messages door's
    /// `count_tokens`), on the family's own counting endpoint; never billed.
    fn count_tokens(
        &self,
        _req: &RawRequest<'_>,
        target: &Target<'_>,
        _creds: &Credentials,
    ) -> Result<UpstreamRequest, GatewayError> {
        Err(GatewayError::invalid(format!(
            "model \"{}\" cannot count tokens",
            target.model.id
        )))
    }

    /// The input tokens a [`count_tokens`](Self::count_tokens) answer reports.
    fn read_count(&self, _body: &[u8]) -> Result<u64, TranslateError> {
        Err(TranslateError::Shape(
            "this family cannot count tokens".into(),
        ))
    }
}

/// A family whose answers are chat's (every family: the request model is chat's), typed for the
/// doors that render their own objects and events.
pub trait ChatAdapter: Adapter {
    /// The buffered answer `body` rendered by `door` (the chat door's is
    /// [`translate_buffered`](Adapter::translate_buffered)).
    fn translate_answer(
        &self,
        body: &[u8],
        cx: &ResponseCx,
        door: &dyn AnswerRender,
    ) -> Result<Translated, TranslateError>;

    fn chat_stream(&self, cx: ResponseCx) -> Box<dyn ChatStream>;
}

/// Translates an upstream stream incrementally; output never depends on how the bytes were cut.
pub trait StreamTranslator: Send + Sync {
    /// Feeds upstream bytes; appends client bytes (complete SSE frames only) to `out`.
    fn feed(&mut self, chunk: &[u8], out: &mut BytesMut);
    /// The upstream ended cleanly: appends the final usage chunk and `data: [DONE]`
    /// (or, if the upstream reported an error in-band, only `data: [DONE]`).
    fn finish(&mut self, out: &mut BytesMut);
    /// Usage seen so far (what is billed even if the client went away).
    fn usage(&self) -> Usage;
    /// The upstream's in-band error, if it sent one (the stream then ended with an error frame).
    fn failed(&self) -> Option<&str>;
    /// Bytes of model output (text, reasoning, tool calls) delivered to the client so far: what
    /// a cut-short stream's output is estimated from when the upstream has not counted it yet.
    /// 0 when the family does not track it.
    fn delivered(&self) -> u64 {
        0
    }
    /// The door's frames for a stream that broke after it began (`message` says why), where
    /// they depend on what was sent: the Responses door numbers its events and ends with
    /// `response.failed`. `None`: the door's stateless frame
    /// (`api::error::stream_error_frame`).
    fn abort_frame(&mut self, _message: &str) -> Option<Bytes> {
        None
    }
    /// Where, in the bytes the last [`finish`](Self::finish) wrote, the usage object the
    /// request's charge goes into closes (the index of its `}`), when the translator knows
    /// (`None`: the charge splice looks for it; `doors::charge::into_frames`).
    fn usage_close(&self) -> Option<usize> {
        None
    }
    /// The whole answer as the door renders it buffered, once the stream has completed: what a
    /// door that keeps answers stores (the Responses door's `response` object), as
    /// `translate_buffered` would give it. `None` for doors that keep nothing.
    fn final_answer(&self) -> Option<Translated> {
        None
    }
}

/// The adapter of a family.
pub fn adapter_for(family: Family) -> &'static dyn Adapter {
    match family {
        Family::OpenAiCompat => &openai_compat::OpenAiCompat,
        Family::Gemini => &gemini::Gemini,
        Family::Anthropic => &anthropic::Anthropic,
    }
}

/// Headers are built from static names and validated values; a value that is not a valid
/// header (e.g. a credential containing a newline) becomes an internal error, not a panic.
pub(crate) fn header(
    name: &'static str,
    value: &str,
) -> Result<(HeaderName, HeaderValue), GatewayError> {
    let value = HeaderValue::from_str(value)
        .map_err(|_| GatewayError::Internal(format!("invalid value for header {name}").into()))?;
    Ok((HeaderName::from_static(name), value))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_gateways_own_secrets_are_redacted_literally() {
        let creds = Credentials {
            openai: Some(Secret::new("sec-dummy-openai")),
            anthropic: Some(Secret::new("short")),
            ..Credentials::default()
        };
        creds
            .vertex_token
            .set(Some(Secret::new("ya29-like-token-1")));
        assert_eq!(
            creds.redact("key sec-dummy-openai (sec-dummy-openai) and ya29-like-token-1, short"),
            "key [redacted] ([redacted]) and [redacted], short"
        );
    }
}
