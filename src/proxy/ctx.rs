//! Everything a request carries from `request_filter` to `logging`.

use std::sync::Arc;
use std::time::Instant;

use bytes::BytesMut;

use crate::api::{GatewayError, Operation, Usage};
use crate::catalog::{Model, Route};
use crate::providers::{Adapter, ResponseCx, StreamTranslator, UpstreamRequest};
use crate::store::ApiKey;

/// The routing decision made in `request_filter`; moved whole into a subrequest when the body
/// is too large for Pingora's replay buffer.
pub struct Admitted {
    pub op: Operation,
    pub key: Arc<ApiKey>,
    pub model: Arc<Model>,
    pub route: Route,
    pub adapter: &'static dyn Adapter,
    pub stream: bool,
    pub upstream: Upstream,
    pub response_cx: ResponseCx,
}

/// How the request reaches its upstream.
#[derive(Debug)]
pub enum Upstream {
    /// One request, sent and answered through Pingora's upstream phases.
    Proxied(UpstreamRequest),
    /// Several requests the gateway sent itself (`Adapter::fan_out`), answered locally in
    /// `request_filter`; nothing is left for Pingora to send.
    FannedOut,
}

/// How the upstream's response body is being turned into the client's.
#[derive(Default)]
pub enum Translation {
    /// Nothing to translate (local answer, or the response is not ours to touch).
    #[default]
    None,
    /// A buffered JSON answer: collected whole, translated at its end.
    Buffered(BytesMut),
    /// An SSE answer: translated incrementally.
    Stream(Box<dyn StreamTranslator>),
    /// An upstream non-2xx: its body is collected to explain it in the error envelope.
    UpstreamError(BytesMut),
}

pub struct Ctx {
    pub started: Instant,
    /// Wall-clock start, for the usage record.
    pub started_at: chrono::DateTime<chrono::Utc>,
    /// When the upstream call began (peer chosen), for the upstream latency.
    pub upstream_at: Option<Instant>,
    /// When the first response body byte went to the client (time to first token).
    pub first_body_at: Option<Instant>,
    pub admitted: Option<Admitted>,
    pub translation: Translation,
    /// The failure the client was answered with, if any (logged once, in `logging`).
    pub error: Option<GatewayError>,
    pub upstream_status: Option<u16>,
    pub first_byte_at: Option<Instant>,
    pub usage: Usage,
    /// This request's body was too large to replay: a subrequest carried it and does the
    /// accounting; the parent only pipes bytes.
    pub handed_off: bool,
    /// The body was read completely (the connection can be kept alive after a local answer).
    pub body_read: bool,
}

impl Default for Ctx {
    fn default() -> Self {
        Ctx {
            started: Instant::now(),
            started_at: chrono::Utc::now(),
            upstream_at: None,
            first_body_at: None,
            admitted: None,
            translation: Translation::None,
            error: None,
            upstream_status: None,
            first_byte_at: None,
            usage: Usage::default(),
            handed_off: false,
            body_read: false,
        }
    }
}
