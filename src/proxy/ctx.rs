//! Everything a request carries from its head being read to `logging`.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::admission::Admitted;
use crate::api::error::Blame;
use crate::api::{Door, GatewayError, Usage};
use crate::billing::journal::Entry;
use crate::store::UsageRecord;

use super::timing::{Clock, Stamp};

pub struct Ctx {
    /// `x-request-id` as sent, when usable (`admission::client_request_id`).
    pub client_request_id: Option<Arc<str>>,
    /// The id every answer carries: the client's, else the completion id once admitted, else
    /// a fresh `req_…`.
    pub request_id: Arc<str>,
    /// Who the client is (`listener::client_addr`): the peer, or whom a trusted proxy names.
    pub client_addr: Option<IpAddr>,
    /// The answering upstream's own id for the call (Anthropic's `request-id`, …), for a
    /// ticket with the provider (`UpstreamClient` reads it off the answer's head).
    pub upstream_request_id: Option<Box<str>>,
    /// The front door the request came through (its path): the shape of its errors.
    pub door: Door,
    pub started: Instant,
    /// Upstream attempts made (routes tried): 1 unless the request failed over.
    pub attempts: u32,
    /// Wall-clock start, for the usage record.
    pub started_at: chrono::DateTime<chrono::Utc>,
    /// When the first upstream call began, for the upstream latency.
    pub upstream_at: Option<Instant>,
    /// When the answering upstream's response header arrived.
    pub first_byte_at: Option<Instant>,
    /// When the first response body byte went to the client (time to first token).
    pub first_body_at: Option<Instant>,
    /// The gateway's own time as the answer's `Server-Timing` header said it (the metrics
    /// record the same figure).
    pub gateway_time: Option<Duration>,
    /// The admitted request, with the route that answered (or the last one tried). Boxed, as
    /// `journaled`: the context lives in every open stream's state, where these are empty.
    pub admitted: Option<Box<Admitted>>,
    /// The failure the client was answered with, if any (logged once, in `logging`).
    pub error: Option<GatewayError>,
    pub upstream_status: Option<u16>,
    pub usage: Usage,
    /// Content bytes the stream has delivered (`StreamTranslator::delivered`).
    pub delivered: u64,
    /// The body was read completely (the connection can be kept alive after a local answer).
    pub body_read: bool,
    /// The client went away while being answered.
    pub client_left: bool,
    /// Who stopped the answer being read before its end, if anyone (the client, when the
    /// upstream was not drained to its end after it left).
    pub stopped: Option<Blame>,
    /// The usage record journaled before the answer's last bytes went out (`logging` submits
    /// it, or one rebuilt if the request ended otherwise after all, with its journal entry).
    pub journaled: Option<Box<Journaled>>,
}

/// A record written to the journal, with the ending it was written for.
pub struct Journaled {
    pub record: UsageRecord,
    pub ending: crate::admission::outcome::Ending,
    pub entry: Option<Entry>,
}

impl Default for Ctx {
    fn default() -> Self {
        Ctx {
            client_request_id: None,
            request_id: Arc::from(""),
            client_addr: None,
            upstream_request_id: None,
            door: Door::OpenAi,
            started: Instant::now(),
            attempts: 1,
            started_at: chrono::Utc::now(),
            upstream_at: None,
            first_byte_at: None,
            first_body_at: None,
            gateway_time: None,
            admitted: None,
            error: None,
            upstream_status: None,
            usage: Usage::default(),
            delivered: 0,
            body_read: false,
            client_left: false,
            stopped: None,
            journaled: None,
        }
    }
}

impl Ctx {
    /// The time from the first upstream call to the answering upstream's answer (its head, for
    /// a stream), when there was one.
    pub fn upstream_time(&self) -> Option<Duration> {
        self.first_byte_at?
            .checked_duration_since(self.upstream_at?)
    }

    /// When the request's phases happened, for its `Server-Timing`.
    pub fn clock(&self) -> Clock {
        Clock {
            started: self.started,
            upstream_at: self.upstream_at,
            answered_at: self.first_byte_at,
        }
    }

    /// What the answer's head carries, as of now; the gateway's time is kept for the metrics.
    pub fn stamp(&mut self) -> Stamp {
        self.clock().stamp(&self.request_id, &mut self.gateway_time)
    }
}
