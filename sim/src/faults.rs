//! Fault injection and stream pacing: the failure modes the gateway must survive, selectable
//! per request by a `[sim:fault=KIND]` marker or queued with `POST /_sim/faults`.
//!
//! Kinds (the marker value / the control API's `"fault"`):
//! - `429`, `500`, `503`, `529`: the provider's real error body for that status before any
//!   byte of the answer (`fixtures.rs`). `529` is Anthropic's overloaded status; Google and
//!   OpenAI surfaces answer it with their own "overloaded" 503. Anthropic direct answers `503`
//!   with an `overloaded_error` body at status 503 (it has no 503 of its own). Claude on Vertex
//!   uses Google's envelope for `429`/`503` (quota / capacity) and Anthropic's for `500`/`529`.
//! - `break-after=N`: streams send N events, pause briefly so they reach the wire, then the
//!   connection is dropped without the terminating chunk. Buffered answers send the first N
//!   bytes of the JSON body, then drop.
//! - `stall`: headers (and, for streams, the first event) go out, then nothing until the client
//!   goes away.
//! - `error-event`: streams end with the provider's mid-stream error (Anthropic `event: error`
//!   overloaded_error, Gemini's bare JSON error object of fixture
//!   `gemini-stream-error-mid-stream-vertex.txt`, OpenAI `data: {"error":…}`) after the first
//!   content event; buffered requests get the 500 body instead.
//! - `error-first`: the same error before any content (after Anthropic's `message_start`,
//!   block start and ping), as an overloaded upstream sends it.
//! - `garbage`: a 200 whose body is not the provider's answer at all (an HTML page from a proxy
//!   in between), for buffered and streamed requests alike.
//! - `blocked`: a 200 answer refusing the prompt (Gemini `promptFeedback.blockReason: SAFETY`
//!   without candidates, Anthropic `stop_reason: "refusal"`, OpenAI `finish_reason:
//!   "content_filter"`).
//!
//! Queued faults apply to the next `count` model requests (generation, streaming, counting,
//! embeddings) of the given surface (`any` by default) after authentication succeeded; the
//! token endpoint, cache administration and the control API never consume them.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use axum::body::Body;
use bytes::Bytes;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fault {
    Status(u16),
    BreakAfter(usize),
    Stall,
    ErrorEvent,
    /// A stream's error event before any content (Anthropic's overloaded stream); buffered
    /// requests get the 500 body, as with `error-event`.
    ErrorFirst,
    Blocked,
    Garbage,
}

impl Fault {
    pub fn parse(s: &str) -> Option<Fault> {
        let s = s.trim();
        match s {
            "stall" => Some(Fault::Stall),
            "error-event" => Some(Fault::ErrorEvent),
            "error-first" => Some(Fault::ErrorFirst),
            "blocked" => Some(Fault::Blocked),
            "garbage" => Some(Fault::Garbage),
            _ => {
                if let Some(n) = s.strip_prefix("break-after=") {
                    return n.trim().parse().ok().map(Fault::BreakAfter);
                }
                match s.parse::<u16>() {
                    Ok(code @ (429 | 500 | 503 | 529)) => Some(Fault::Status(code)),
                    _ => None,
                }
            }
        }
    }

    pub fn label(&self) -> String {
        match self {
            Fault::Status(c) => c.to_string(),
            Fault::BreakAfter(n) => format!("break-after={n}"),
            Fault::Stall => "stall".into(),
            Fault::ErrorEvent => "error-event".into(),
            Fault::ErrorFirst => "error-first".into(),
            Fault::Blocked => "blocked".into(),
            Fault::Garbage => "garbage".into(),
        }
    }
}

/// Which family of routes a request belongs to, for queued-fault filtering.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Surface {
    Gemini,
    Vertex,
    Anthropic,
    AnthropicVertex,
    OpenAi,
}

impl Surface {
    pub fn name(self) -> &'static str {
        match self {
            Surface::Gemini => "gemini",
            Surface::Vertex => "vertex",
            Surface::Anthropic => "anthropic",
            Surface::AnthropicVertex => "anthropic-vertex",
            Surface::OpenAi => "openai",
        }
    }
}

#[derive(Debug, Deserialize)]
pub struct QueueRequest {
    pub fault: String,
    #[serde(default = "one")]
    pub count: u64,
    #[serde(default)]
    pub surface: Option<String>,
}

fn one() -> u64 {
    1
}

#[derive(Debug, Clone, Serialize)]
pub struct QueuedFault {
    pub fault: String,
    pub remaining: u64,
    pub surface: String,
}

/// Faults queued by the control API. `pending` lets the hot path skip the lock.
#[derive(Default)]
pub struct FaultQueue {
    pending: AtomicUsize,
    queue: Mutex<VecDeque<QueuedFault>>,
}

impl FaultQueue {
    pub fn push(&self, req: QueueRequest) -> Result<usize, String> {
        let fault =
            Fault::parse(&req.fault).ok_or_else(|| format!("unknown fault {:?}", req.fault))?;
        let surface = req.surface.unwrap_or_else(|| "any".into());
        let known = [
            "any",
            "gemini",
            "vertex",
            "anthropic",
            "anthropic-vertex",
            "openai",
        ];
        if !known.contains(&surface.as_str()) {
            return Err(format!("unknown surface {surface:?} (one of {known:?})"));
        }
        if req.count == 0 {
            return Err("count must be at least 1".into());
        }
        let mut q = self
            .queue
            .lock()
            .map_err(|_| "fault queue poisoned".to_owned())?;
        q.push_back(QueuedFault {
            fault: fault.label(),
            remaining: req.count,
            surface,
        });
        self.pending.store(q.len(), Ordering::Release);
        Ok(q.len())
    }

    /// Takes one use of the first queued fault matching `surface`.
    pub fn take(&self, surface: Surface) -> Option<Fault> {
        if self.pending.load(Ordering::Acquire) == 0 {
            return None;
        }
        let mut q = self.queue.lock().ok()?;
        let idx = q
            .iter()
            .position(|f| f.surface == "any" || f.surface == surface.name())?;
        let entry = q.get_mut(idx)?;
        let fault = Fault::parse(&entry.fault);
        entry.remaining = entry.remaining.saturating_sub(1);
        if entry.remaining == 0 {
            q.remove(idx);
        }
        self.pending.store(q.len(), Ordering::Release);
        fault
    }

    pub fn list(&self) -> Vec<QueuedFault> {
        self.queue
            .lock()
            .map(|q| q.iter().cloned().collect())
            .unwrap_or_default()
    }

    pub fn clear(&self) -> usize {
        let Ok(mut q) = self.queue.lock() else {
            return 0;
        };
        let n = q.len();
        q.clear();
        self.pending.store(0, Ordering::Release);
        n
    }
}

/// How a rendered stream should misbehave.
#[derive(Debug, Clone)]
pub enum StreamFault {
    None,
    /// Drop the connection after this many events.
    BreakAfter(usize),
    /// Stop (forever) after this many events.
    StallAfter(usize),
    /// After this many events send `tail`, then end normally.
    ErrorTail(usize, Bytes),
}

struct Delivery {
    events: std::vec::IntoIter<Bytes>,
    sent: usize,
    delay: Duration,
    fault: StreamFault,
    done: bool,
}

/// Turns pre-rendered events into a chunked body with pacing and the selected fault.
pub fn deliver(events: Vec<Bytes>, delay: Duration, fault: StreamFault) -> Body {
    if delay.is_zero() && matches!(fault, StreamFault::None) {
        let iter = events.into_iter().map(Ok::<Bytes, std::io::Error>);
        return Body::from_stream(futures_util::stream::iter(iter));
    }
    let st = Delivery {
        events: events.into_iter(),
        sent: 0,
        delay,
        fault,
        done: false,
    };
    Body::from_stream(futures_util::stream::unfold(st, |mut st| async move {
        if st.done {
            return None;
        }
        match &st.fault {
            StreamFault::BreakAfter(n) if st.sent >= *n => {
                // Let what was written reach the client, then fail the body: hyper aborts the
                // connection without the final zero-length chunk.
                tokio::time::sleep(Duration::from_millis(30)).await;
                st.done = true;
                let err =
                    std::io::Error::new(std::io::ErrorKind::ConnectionAborted, "sim break-after");
                return Some((Err(err), st));
            }
            StreamFault::StallAfter(n) if st.sent >= *n => {
                std::future::pending::<()>().await;
                return None;
            }
            StreamFault::ErrorTail(n, tail) if st.sent >= *n => {
                let tail = tail.clone();
                if st.sent > 0 && !st.delay.is_zero() {
                    tokio::time::sleep(st.delay).await;
                }
                st.done = true;
                return Some((Ok(tail), st));
            }
            _ => {}
        }
        let ev = st.events.next()?;
        if st.sent > 0 && !st.delay.is_zero() {
            tokio::time::sleep(st.delay).await;
        }
        st.sent += 1;
        Some((Ok(ev), st))
    }))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    #[test]
    fn parse_kinds() {
        assert_eq!(Fault::parse("429"), Some(Fault::Status(429)));
        assert_eq!(Fault::parse("529"), Some(Fault::Status(529)));
        assert_eq!(Fault::parse("418"), None);
        assert_eq!(Fault::parse("break-after=3"), Some(Fault::BreakAfter(3)));
        assert_eq!(Fault::parse("stall"), Some(Fault::Stall));
        assert_eq!(Fault::parse("error-event"), Some(Fault::ErrorEvent));
        assert_eq!(Fault::parse("error-first"), Some(Fault::ErrorFirst));
        assert_eq!(Fault::parse("nope"), None);
    }

    #[test]
    fn queue_counts_and_filters() {
        let q = FaultQueue::default();
        assert_eq!(q.take(Surface::Gemini), None);
        q.push(QueueRequest {
            fault: "500".into(),
            count: 2,
            surface: Some("openai".into()),
        })
        .unwrap();
        assert_eq!(q.take(Surface::Gemini), None);
        assert_eq!(q.take(Surface::OpenAi), Some(Fault::Status(500)));
        assert_eq!(q.take(Surface::OpenAi), Some(Fault::Status(500)));
        assert_eq!(q.take(Surface::OpenAi), None);
        assert!(q
            .push(QueueRequest {
                fault: "x".into(),
                count: 1,
                surface: None
            })
            .is_err());
        q.push(QueueRequest {
            fault: "stall".into(),
            count: 1,
            surface: None,
        })
        .unwrap();
        assert_eq!(q.clear(), 1);
    }
}
