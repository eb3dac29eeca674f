//! Why an upstream call did not answer ([`CallFailure`]), as failover, route health and the
//! error answer need to know it: the kind of a transport failure ([`transport`]), a non-2xx
//! answer with its `Retry-After`, and which of two attempts' failures the client is told about.

use std::time::Duration;

use bytes::Bytes;

/// Why a call (or one of a fan-out's calls) did not answer.
#[derive(Debug, Clone)]
pub enum CallFailure {
    /// A call answered non-2xx: its status, body and `Retry-After`, for the error envelope.
    Status {
        status: u16,
        body: Bytes,
        retry_after: Option<String>,
        /// The upstream's own id for the call ([`upstream_request_id`](super::client::upstream_request_id)).
        request_id: Option<Box<str>>,
    },
    /// A call timed out (connect or read).
    Timeout,
    /// A call could not connect.
    Connect,
    /// The TLS handshake failed: `certificate` when the upstream's certificate was refused
    /// (an unknown CA, another name, expired), else a protocol mismatch.
    Tls { certificate: bool },
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
            CallFailure::Connect
            | CallFailure::Tls { .. }
            | CallFailure::Timeout
            | CallFailure::EarlyEnd { .. } => true,
            CallFailure::Status { status, .. } => {
                matches!(status, 401 | 403 | 429) || *status >= 500
            }
            CallFailure::Broken | CallFailure::TooLarge { .. } => false,
        }
    }

    /// The upstream's status, when it answered one.
    pub fn status(&self) -> Option<u16> {
        match self {
            CallFailure::Status { status, .. } => Some(*status),
            _ => None,
        }
    }

    /// The upstream's own id for a call it answered with an error.
    pub fn request_id(&self) -> Option<&str> {
        match self {
            CallFailure::Status { request_id, .. } => request_id.as_deref(),
            _ => None,
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
pub fn transport(e: &(dyn std::error::Error + 'static)) -> CallFailure {
    let mut cause = Some(e);
    let mut detail = String::new();
    let mut kind = CallFailure::Broken;
    while let Some(e) = cause {
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            if io.kind() == std::io::ErrorKind::TimedOut {
                kind = CallFailure::Timeout; // hyper's connect timeout
            }
            if let Some(tls) = handshake_failure(io) {
                kind = CallFailure::Tls {
                    certificate: matches!(tls, rustls::Error::InvalidCertificate(_)),
                };
            }
        }
        if matches!(kind, CallFailure::Broken)
            && e.downcast_ref::<hyper_util::client::legacy::Error>()
                .is_some_and(|e| e.is_connect())
        {
            kind = CallFailure::Connect;
        }
        detail = if detail.is_empty() {
            e.to_string()
        } else {
            format!("{detail}: {e}")
        };
        cause = e.source();
    }
    tracing::warn!("upstream call failed: {detail}");
    kind
}

/// The TLS error inside an I/O error: tokio-rustls wraps a handshake's failure in one, which
/// hyper-rustls wraps in another (the chain of `source()` skips both).
fn handshake_failure(io: &std::io::Error) -> Option<&rustls::Error> {
    let mut inner = io.get_ref()?;
    for _ in 0..4 {
        if let Some(tls) = inner.downcast_ref::<rustls::Error>() {
            return Some(tls);
        }
        inner = inner.downcast_ref::<std::io::Error>()?.get_ref()?;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(status: u16, retry_after: Option<&str>) -> CallFailure {
        CallFailure::Status {
            status,
            body: Bytes::new(),
            retry_after: retry_after.map(str::to_owned),
            request_id: None,
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
            request_id: None,
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
