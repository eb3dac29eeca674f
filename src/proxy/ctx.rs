//! Everything a request carries from `request_filter` to `logging`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use bytes::BytesMut;

use crate::admission::Admitted;
use crate::api::{GatewayError, Usage};
use crate::providers::{StreamTranslator, UpstreamRequest};

/// How the upstream's response body is being turned into the client's.
#[derive(Default)]
pub enum Translation {
    /// Nothing to translate (local answer, or the response is not ours to touch).
    #[default]
    None,
    /// An SSE answer: translated incrementally.
    Stream(Box<dyn StreamTranslator>),
    /// An upstream non-2xx: its body is collected to explain it in the error envelope.
    UpstreamError(BytesMut),
}

/// An admitted request bound for Pingora's upstream phases, and the one request it sends.
/// Moved whole into a subrequest when the body is too large to replay, or for a stream.
pub struct Proxied {
    pub admitted: Admitted,
    pub request: UpstreamRequest,
    /// Set by the parent of a subrequest when its client went away (the subrequest, still
    /// reading the upstream, bills the request as the client's leaving).
    pub client_left: Option<Arc<AtomicBool>>,
}

impl Proxied {
    pub fn new(admitted: Admitted, request: UpstreamRequest) -> Self {
        Proxied {
            admitted,
            request,
            client_left: None,
        }
    }
}

pub struct Ctx {
    pub started: Instant,
    /// Upstream attempts made (routes tried), 1 unless a buffered request failed over.
    pub attempts: u32,
    /// Wall-clock start, for the usage record.
    pub started_at: chrono::DateTime<chrono::Utc>,
    /// When the upstream call began (peer chosen), for the upstream latency.
    pub upstream_at: Option<Instant>,
    /// When the upstream's response header arrived.
    pub first_byte_at: Option<Instant>,
    /// When the first response body byte went to the client (time to first token).
    pub first_body_at: Option<Instant>,
    /// The admitted request (also set for fan-outs, which never reach the upstream phases).
    pub admitted: Option<Admitted>,
    /// The request Pingora sends upstream.
    pub upstream: Option<UpstreamRequest>,
    pub translation: Translation,
    /// The failure the client was answered with, if any (logged once, in `logging`).
    pub error: Option<GatewayError>,
    pub upstream_status: Option<u16>,
    pub usage: Usage,
    /// Content bytes the stream has delivered (`StreamTranslator::delivered`).
    pub delivered: u64,
    /// This request's body was too large to replay: a subrequest carried it and does the
    /// accounting; the parent only pipes bytes.
    pub handed_off: bool,
    /// The body was read completely (the connection can be kept alive after a local answer).
    pub body_read: bool,
    /// In a subrequest: whether the parent's client went away (see [`Proxied::client_left`]).
    pub client_left: Option<Arc<AtomicBool>>,
}

impl Ctx {
    /// The request is bound for the upstream phases.
    pub fn proxy(&mut self, p: Proxied) {
        self.admitted = Some(p.admitted);
        self.upstream = Some(p.request);
        self.client_left = p.client_left;
    }

    /// Whether the client this request answers went away (known to a subrequest from its
    /// parent).
    pub fn client_left(&self) -> bool {
        self.client_left
            .as_ref()
            .is_some_and(|f| f.load(Ordering::Relaxed))
    }
}

impl Default for Ctx {
    fn default() -> Self {
        Ctx {
            started: Instant::now(),
            attempts: 1,
            started_at: chrono::Utc::now(),
            upstream_at: None,
            first_byte_at: None,
            first_body_at: None,
            admitted: None,
            upstream: None,
            translation: Translation::None,
            error: None,
            upstream_status: None,
            usage: Usage::default(),
            delivered: 0,
            handed_off: false,
            body_read: false,
            client_left: None,
        }
    }
}
