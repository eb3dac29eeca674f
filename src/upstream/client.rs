//! The gateway's one upstream client: every planned call goes through it. [`UpstreamClient::open`]
//! sends one call and hands back its answer as it begins (a stream); `run` sends the calls of
//! a plan (one for a buffered answer; several for an adapter's
//! [`FanOut`](crate::providers::FanOut), e.g. an embeddings batch above the upstream's per-call
//! limit) and collects their bodies, bounded, in call order. A failure is a [`CallFailure`]: what
//! failover and route health need to know about it, and the upstream's `Retry-After`.
//!
//! Invariants: at most [`MAX_IN_FLIGHT`] calls of one request are in flight at once; the first
//! failure (non-2xx answer or transport error) ends the run and drops the calls still in
//! flight — one failing part fails the whole request, so nothing is joined or billed. One
//! `reqwest::Client` (its connection pool) is shared by every request, with the upstream
//! timeouts of the config.

use std::time::Duration;

use bytes::Bytes;
use futures_util::stream::{self, StreamExt};

use crate::catalog::Endpoint;
use crate::config::UpstreamConf;
use crate::providers::UpstreamRequest;

/// Calls of one request sent at the same time.
pub const MAX_IN_FLIGHT: usize = 4;

/// Why a call (or one of a fan-out's calls) did not answer.
#[derive(Debug)]
pub enum CallFailure {
    /// A call answered non-2xx: its status, body and `Retry-After`, for the error envelope.
    Status {
        status: u16,
        body: Bytes,
        retry_after: Option<String>,
    },
    /// A call timed out (connect or read).
    Timeout,
    /// A call could not connect.
    Connect,
    /// A call's answer was larger than `tollgate.upstream.max_answer_body`.
    TooLarge { limit: u64 },
    /// A call's connection failed after connecting, or its answer could not be read.
    Broken,
    /// A stream that failed before its first content: an in-band error as its first event, or
    /// its connection broken or its body ended first. Nothing reached the client.
    EarlyEnd { message: String },
}

impl CallFailure {
    /// A failure before the upstream answered that another route may not have: no connection,
    /// a timeout, throttling (429), a server error (5xx, Anthropic's 529 included), a stream
    /// ending before its first content, or the route's own credential refused (401/403: the
    /// gateway's key, not the client's, is at fault, and another route has its own).
    pub fn worth_another_route(&self) -> bool {
        match self {
            CallFailure::Connect | CallFailure::Timeout | CallFailure::EarlyEnd { .. } => true,
            CallFailure::Status { status, .. } => {
                matches!(status, 401 | 403 | 429) || *status >= 500
            }
            CallFailure::Broken | CallFailure::TooLarge { .. } => false,
        }
    }

    pub fn is_throttled(&self) -> bool {
        matches!(self, CallFailure::Status { status: 429, .. })
    }

    /// How long a throttling upstream asked to wait: its `Retry-After` in seconds, else
    /// Google's `RetryInfo.retryDelay` (`"37s"`) in the error body.
    pub fn retry_after(&self) -> Option<Duration> {
        let CallFailure::Status {
            retry_after, body, ..
        } = self
        else {
            return None;
        };
        if let Some(secs) = retry_after.as_deref().and_then(|s| s.trim().parse().ok()) {
            return Some(Duration::from_secs(secs));
        }
        google_retry_delay(body)
    }

    /// Which of two attempts' failures the client is told about: a throttled one before any
    /// other (the SDKs retry it), of two throttled ones the one asking to wait least (a
    /// `Retry-After` in seconds; none counts as longest), else the later one.
    pub fn to_report(earlier: Option<CallFailure>, later: CallFailure) -> CallFailure {
        let wait = |f: &CallFailure| match f {
            CallFailure::Status { retry_after, .. } => retry_after
                .as_deref()
                .and_then(|s| s.trim().parse::<u64>().ok())
                .unwrap_or(u64::MAX),
            _ => u64::MAX,
        };
        match earlier {
            Some(e) if e.is_throttled() && (!later.is_throttled() || wait(&e) < wait(&later)) => e,
            _ => later,
        }
    }
}

/// A successful call's answer as it begins: its status, and its body still to be read. The
/// head is dropped: hyper's header values share its first read buffer, which a long stream
/// would otherwise keep alive beside the next one (8 KB an open stream).
pub struct Answer {
    pub status: u16,
    /// `Content-Length`, when sent.
    length: Option<u64>,
    body: reqwest::Body,
}

impl From<reqwest::Response> for Answer {
    fn from(response: reqwest::Response) -> Self {
        Answer {
            status: response.status().as_u16(),
            length: response.content_length(),
            body: response.into(),
        }
    }
}

impl Answer {
    /// The body's next chunk; `None` at its end.
    pub async fn chunk(&mut self) -> Result<Option<Bytes>, reqwest::Error> {
        use http_body_util::BodyExt;
        while let Some(frame) = self.body.frame().await {
            if let Ok(data) = frame?.into_data() {
                return Ok(Some(data));
            }
        }
        Ok(None)
    }
}

pub struct UpstreamClient {
    client: reqwest::Client,
    max_answer: u64,
}

impl UpstreamClient {
    pub fn new(conf: &UpstreamConf) -> Self {
        let client = reqwest::Client::builder()
            .connect_timeout(conf.connect_timeout)
            .read_timeout(conf.read_timeout)
            .pool_idle_timeout(Duration::from_secs(60))
            // An upstream's redirect is its failure to report, not a place to resend the
            // credential to.
            .redirect(reqwest::redirect::Policy::none())
            // Retrying is failover's (`proxy/failover.rs`); and reqwest's own policy copies
            // every request's head in case it retries.
            .retry(reqwest::retry::never().max_retries_per_request(0))
            .user_agent(concat!("tollgate/", env!("CARGO_PKG_VERSION")))
            .build()
            .unwrap_or_default();
        UpstreamClient {
            client,
            max_answer: conf.max_answer_body.as_u64(),
        }
    }

    /// Every call's answer body, in call order, or the first failure.
    pub async fn run(
        &self,
        endpoint: &Endpoint,
        calls: Vec<UpstreamRequest>,
    ) -> Result<Vec<Bytes>, CallFailure> {
        let count = calls.len();
        let mut answers: Vec<Option<Bytes>> = vec![None; count];
        let mut pending = stream::iter(calls.into_iter().enumerate())
            .map(|(i, call)| async move { (i, self.send(endpoint, call).await) })
            .buffer_unordered(MAX_IN_FLIGHT);
        while let Some((i, answer)) = pending.next().await {
            if let Some(slot) = answers.get_mut(i) {
                *slot = Some(answer?);
            }
        }
        answers
            .into_iter()
            .collect::<Option<Vec<Bytes>>>()
            .ok_or(CallFailure::Broken)
    }

    async fn send(&self, endpoint: &Endpoint, call: UpstreamRequest) -> Result<Bytes, CallFailure> {
        let response = self.open(endpoint, call, "application/json").await?;
        self.read_bounded(response).await
    }

    /// Sends one call and returns its successful answer as it begins (the body still to be
    /// read: a stream); a non-2xx answer is read (bounded) into the failure.
    pub async fn open(
        &self,
        endpoint: &Endpoint,
        call: UpstreamRequest,
        accept: &'static str,
    ) -> Result<Answer, CallFailure> {
        let mut request = self
            .client
            .post(endpoint.url(&call.path))
            .header(http::header::ACCEPT, accept)
            .body(call.body);
        for (name, value) in call.headers {
            request = request.header(name, value);
        }
        let response = request.send().await.map_err(transport)?;
        if response.status().is_success() {
            return Ok(Answer::from(response));
        }
        let retry_after = response
            .headers()
            .get(http::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let answer = Answer::from(response);
        Err(CallFailure::Status {
            status: answer.status,
            body: self.read_bounded(answer).await?,
            retry_after,
        })
    }
}

impl UpstreamClient {
    /// The answer's body, refused as soon as it grows past the limit (whatever
    /// `Content-Length` says).
    async fn read_bounded(&self, mut answer: Answer) -> Result<Bytes, CallFailure> {
        let too_large = CallFailure::TooLarge {
            limit: self.max_answer,
        };
        if answer.length.is_some_and(|n| n > self.max_answer) {
            return Err(too_large);
        }
        let mut body = bytes::BytesMut::new();
        while let Some(chunk) = answer.chunk().await.map_err(transport)? {
            if (body.len() + chunk.len()) as u64 > self.max_answer {
                return Err(too_large);
            }
            body.extend_from_slice(&chunk);
        }
        Ok(body.freeze())
    }
}

/// `error.details[].retryDelay` of a Google error body (`RetryInfo`), e.g. `"37s"` or `"0.5s"`.
fn google_retry_delay(body: &[u8]) -> Option<Duration> {
    #[derive(serde::Deserialize)]
    struct Envelope {
        error: Detailed,
    }
    #[derive(serde::Deserialize)]
    struct Detailed {
        #[serde(default)]
        details: Vec<serde_json::Value>,
    }
    let parsed: Envelope = serde_json::from_slice(body).ok()?;
    let delay = parsed
        .error
        .details
        .iter()
        .find_map(|d| d.get("retryDelay")?.as_str())?;
    let secs: f64 = delay.strip_suffix('s')?.parse().ok()?;
    Duration::try_from_secs_f64(secs).ok()
}

/// The kind of a transport failure; the details go to the log, not to the client.
pub fn transport(e: reqwest::Error) -> CallFailure {
    let kind = if e.is_timeout() {
        CallFailure::Timeout
    } else if e.is_connect() {
        CallFailure::Connect
    } else {
        CallFailure::Broken
    };
    tracing::warn!("upstream call failed: {}", e.without_url());
    kind
}

#[cfg(test)]
mod failover_tests {
    use super::*;

    fn status(status: u16, retry_after: Option<&str>) -> CallFailure {
        CallFailure::Status {
            status,
            body: Bytes::new(),
            retry_after: retry_after.map(str::to_owned),
        }
    }

    #[test]
    fn failures_before_an_answer_are_worth_another_route() {
        for f in [
            CallFailure::Connect,
            CallFailure::Timeout,
            status(429, None),
            status(500, None),
            status(529, None),
            status(401, None),
            status(403, None),
            CallFailure::EarlyEnd {
                message: "overloaded".into(),
            },
        ] {
            assert!(f.worth_another_route(), "{f:?}");
        }
        for f in [
            CallFailure::Broken,
            CallFailure::TooLarge { limit: 1 },
            status(400, None),
            status(404, None),
        ] {
            assert!(!f.worth_another_route(), "{f:?}");
        }
    }

    #[test]
    fn the_wait_is_retry_after_else_googles_retry_delay() {
        assert_eq!(
            status(429, Some("7")).retry_after(),
            Some(Duration::from_secs(7))
        );
        let google = CallFailure::Status {
            status: 429,
            body: Bytes::from_static(
                br#"{"error":{"code":429,"status":"RESOURCE_EXHAUSTED","details":[{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"37s"}]}}"#,
            ),
            retry_after: None,
        };
        assert_eq!(google.retry_after(), Some(Duration::from_secs(37)));
        assert_eq!(status(429, None).retry_after(), None);
        assert_eq!(CallFailure::Timeout.retry_after(), None);
    }

    #[test]
    fn throttling_is_reported_first_with_the_shortest_wait() {
        let retry = |f: &CallFailure| match f {
            CallFailure::Status {
                status,
                retry_after,
                ..
            } => (*status, retry_after.clone()),
            _ => (0, None),
        };
        let r = CallFailure::to_report(Some(status(503, None)), status(500, None));
        assert_eq!(retry(&r), (500, None), "no throttling: the later failure");
        let mut reported = None;
        for f in [
            status(429, Some("30")),
            status(429, Some("5")),
            status(429, None),
            CallFailure::Timeout,
            status(503, None),
        ] {
            reported = Some(CallFailure::to_report(reported, f));
        }
        assert_eq!(retry(&reported.unwrap()), (429, Some("5".to_owned())));
    }
}
