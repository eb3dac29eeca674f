//! Every failure the gateway itself produces, and its one rendering:
//! `{"error":{"message","type","code"}}` with the matching HTTP status.
//!
//! Status, type and code come from exhaustive matches (no `_` arm), so a new variant cannot
//! be added without deciding all three. The code doubles as a low-cardinality log/metric label.

use bytes::Bytes;
use serde::Serialize;

/// Who caused a failure; decides the log level.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Blame {
    Client,
    Gateway,
    Upstream,
}

/// How an upstream call failed below HTTP (see [`GatewayError::transport`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    Timeout,
    Connect,
    Broken,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GatewayError {
    #[error("missing or malformed Authorization header (expected: Bearer <API_KEY>)")]
    MissingAuth,
    #[error("invalid api key")]
    InvalidKey,
    #[error("api key has expired")]
    ExpiredKey,
    #[error("insufficient credit balance")]
    InsufficientCredit,
    /// Strict credit: the balance cannot pay for the request's worst case. The envelope says
    /// how many output tokens it can pay for (as OpenRouter tells its users).
    #[error("insufficient credit balance")]
    CreditShort { affordable_output_tokens: u64 },
    #[error("api key spend limit exceeded")]
    SpendLimitExceeded,
    #[error("model \"{0}\" not found")]
    ModelNotFound(Box<str>),
    #[error("model \"{0}\" does not support embeddings")]
    EmbeddingsUnsupported(Box<str>),
    #[error("model \"{0}\" is an embedding model; use /v1/embeddings")]
    ChatUnsupported(Box<str>),
    #[error("{param} is not supported by model \"{model}\"")]
    UnsupportedParameter {
        param: &'static str,
        model: Box<str>,
    },
    #[error("{0}")]
    InvalidRequest(Box<str>),
    #[error("request body exceeds the limit of {limit} bytes")]
    BodyTooLarge { limit: u64 },
    /// A count bound of `tollgate.limits` (messages, content parts, embeddings inputs, …).
    #[error("too many {what} in one request: the limit is {limit}")]
    TooMany { what: &'static str, limit: u64 },
    #[error("request headers exceed the limit of {limit} {what}")]
    HeadersTooLarge { what: &'static str, limit: u64 },
    #[error("request body not received within {secs} s")]
    BodyTimeout { secs: u64 },
    #[error("this model's maximum context length is {limit} tokens; the request carries about {estimate} (estimated at 4 bytes a token)")]
    ContextLengthExceeded { limit: u64, estimate: u64 },
    #[error("no such endpoint: {0}")]
    NotFound(Box<str>),
    #[error("method {method} not allowed here (allowed: {allow})")]
    MethodNotAllowed {
        method: Box<str>,
        allow: &'static str,
    },
    #[error("model \"{0}\" has no reachable route")]
    NoRoute(Box<str>),
    #[error("credentials for {0} are not configured on this gateway")]
    MissingCredentials(&'static str),
    #[error("{message}")]
    Upstream { status: u16, message: Box<str> },
    /// The upstream refused the operator's credential (its 401 or 403). Its own words may
    /// quote that credential back: the customer gets this line only, the log the rest.
    #[error("the upstream refused the gateway's credentials")]
    UpstreamCredentials { status: u16 },
    /// The upstream failed after the client's 200 and part of the answer were sent: the
    /// stream ends with an error frame; its status is never sent.
    #[error("{0}")]
    MidStream(Box<str>),
    #[error("no generation {0} in this workspace")]
    NoGeneration(Box<str>),
    #[error("usage records cannot be read right now; retry shortly")]
    StoreUnavailable,
    #[error("internal error: {0}")]
    Internal(Box<str>),
}

impl GatewayError {
    pub fn invalid(message: impl Into<Box<str>>) -> Self {
        Self::InvalidRequest(message.into())
    }

    /// An upstream call that failed below HTTP, with no answer to relay: 504 when it timed
    /// out, else 502. `detail` (what the transport reported) follows the one wording.
    pub fn transport(failure: Transport, detail: Option<&str>) -> Self {
        let (status, what) = match failure {
            Transport::Timeout => (504, "upstream timed out"),
            Transport::Connect => (502, "cannot connect to upstream"),
            Transport::Broken => (502, "upstream failed"),
        };
        let message = match detail {
            Some(d) => format!("{what}: {d}").into(),
            None => what.into(),
        };
        Self::Upstream { status, message }
    }

    /// An upstream's non-2xx answer, `message` its scrubbed wording: an error status is the
    /// client's, any other (a redirect, which is not followed) a 502.
    pub fn upstream_answer(status: u16, message: &str) -> Self {
        match status {
            401 | 403 => Self::UpstreamCredentials { status },
            400..=599 => Self::Upstream {
                status,
                message: message.into(),
            },
            _ => Self::Upstream {
                status: 502,
                message: message.into(),
            },
        }
    }

    pub fn status(&self) -> u16 {
        match self {
            Self::MissingAuth | Self::InvalidKey | Self::ExpiredKey => 401,
            Self::InsufficientCredit | Self::CreditShort { .. } => 402,
            Self::SpendLimitExceeded => 429,
            Self::ModelNotFound(_)
            | Self::EmbeddingsUnsupported(_)
            | Self::ChatUnsupported(_)
            | Self::UnsupportedParameter { .. }
            | Self::InvalidRequest(_)
            | Self::TooMany { .. }
            | Self::ContextLengthExceeded { .. } => 400,
            Self::BodyTooLarge { .. } => 413,
            Self::HeadersTooLarge { .. } => 431,
            Self::BodyTimeout { .. } => 408,
            Self::NotFound(_) | Self::NoGeneration(_) => 404,
            Self::StoreUnavailable => 503,
            Self::MethodNotAllowed { .. } => 405,
            Self::NoRoute(_) | Self::MissingCredentials(_) => 503,
            Self::Upstream { status, .. } | Self::UpstreamCredentials { status } => *status,
            Self::MidStream(_) => 502,
            Self::Internal(_) => 500,
        }
    }

    pub fn error_type(&self) -> &'static str {
        match self {
            Self::MissingAuth | Self::InvalidKey | Self::ExpiredKey => "authentication_error",
            Self::InsufficientCredit
            | Self::CreditShort { .. }
            | Self::SpendLimitExceeded
            | Self::ModelNotFound(_)
            | Self::EmbeddingsUnsupported(_)
            | Self::ChatUnsupported(_)
            | Self::UnsupportedParameter { .. }
            | Self::InvalidRequest(_)
            | Self::TooMany { .. }
            | Self::ContextLengthExceeded { .. }
            | Self::BodyTooLarge { .. }
            | Self::HeadersTooLarge { .. }
            | Self::BodyTimeout { .. }
            | Self::NotFound(_)
            | Self::NoGeneration(_)
            | Self::MethodNotAllowed { .. } => "invalid_request_error",
            Self::Upstream { .. } | Self::UpstreamCredentials { .. } | Self::MidStream(_) => {
                "upstream_error"
            }
            Self::NoRoute(_)
            | Self::MissingCredentials(_)
            | Self::StoreUnavailable
            | Self::Internal(_) => "server_error",
        }
    }

    pub fn code(&self) -> &'static str {
        match self {
            Self::MissingAuth => "missing_auth",
            Self::InvalidKey => "invalid_key",
            Self::ExpiredKey => "expired_key",
            Self::InsufficientCredit | Self::CreditShort { .. } => "insufficient_credit",
            Self::SpendLimitExceeded => "spend_limit_exceeded",
            Self::ModelNotFound(_) => "model_not_found",
            Self::EmbeddingsUnsupported(_) => "embeddings_unsupported",
            Self::ChatUnsupported(_) => "chat_unsupported",
            Self::UnsupportedParameter { .. } => "unsupported_parameter",
            Self::InvalidRequest(_) => "invalid_request_error",
            Self::BodyTooLarge { .. } => "request_too_large",
            Self::TooMany { .. } => "limit_exceeded",
            Self::HeadersTooLarge { .. } => "headers_too_large",
            Self::BodyTimeout { .. } => "request_timeout",
            Self::ContextLengthExceeded { .. } => "context_length_exceeded",
            Self::NotFound(_) => "not_found",
            Self::NoGeneration(_) => "generation_not_found",
            Self::StoreUnavailable => "store_unavailable",
            Self::MethodNotAllowed { .. } => "method_not_allowed",
            Self::NoRoute(_) => "no_route",
            Self::MissingCredentials(_) => "upstream_unconfigured",
            Self::Upstream { .. } | Self::UpstreamCredentials { .. } | Self::MidStream(_) => {
                "upstream_error"
            }
            Self::Internal(_) => "internal_error",
        }
    }

    pub fn blame(&self) -> Blame {
        match self {
            Self::Upstream { .. } | Self::UpstreamCredentials { .. } | Self::MidStream(_) => {
                Blame::Upstream
            }
            Self::NoRoute(_)
            | Self::MissingCredentials(_)
            | Self::StoreUnavailable
            | Self::Internal(_) => Blame::Gateway,
            Self::MissingAuth
            | Self::InvalidKey
            | Self::ExpiredKey
            | Self::InsufficientCredit
            | Self::CreditShort { .. }
            | Self::SpendLimitExceeded
            | Self::ModelNotFound(_)
            | Self::EmbeddingsUnsupported(_)
            | Self::ChatUnsupported(_)
            | Self::UnsupportedParameter { .. }
            | Self::InvalidRequest(_)
            | Self::TooMany { .. }
            | Self::ContextLengthExceeded { .. }
            | Self::BodyTooLarge { .. }
            | Self::HeadersTooLarge { .. }
            | Self::BodyTimeout { .. }
            | Self::NotFound(_)
            | Self::NoGeneration(_)
            | Self::MethodNotAllowed { .. } => Blame::Client,
        }
    }

    /// The `Allow` header a 405 must carry.
    pub fn allow(&self) -> Option<&'static str> {
        match self {
            Self::MethodNotAllowed { allow, .. } => Some(allow),
            _ => None,
        }
    }

    /// The JSON error envelope.
    pub fn envelope(&self) -> Bytes {
        let affordable = match self {
            Self::CreditShort {
                affordable_output_tokens,
            } => Some(*affordable_output_tokens),
            _ => None,
        };
        render(
            &self.to_string(),
            self.error_type(),
            self.code(),
            affordable,
        )
    }
}

/// Renders `{"error":{"message","type","code"}}`; the only renderer of the envelope.
pub fn envelope(message: &str, error_type: &str, code: &str) -> Bytes {
    render(message, error_type, code, None)
}

fn render(message: &str, error_type: &str, code: &str, affordable: Option<u64>) -> Bytes {
    #[derive(Serialize)]
    struct Inner<'a> {
        message: &'a str,
        #[serde(rename = "type")]
        error_type: &'a str,
        code: &'a str,
        #[serde(skip_serializing_if = "Option::is_none")]
        affordable_output_tokens: Option<u64>,
    }
    #[derive(Serialize)]
    struct Envelope<'a> {
        error: Inner<'a>,
    }
    let e = Envelope {
        error: Inner {
            message,
            error_type,
            code,
            affordable_output_tokens: affordable,
        },
    };
    serde_json::to_vec(&e).map(Bytes::from).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(e: &GatewayError) -> serde_json::Value {
        serde_json::from_slice(&e.envelope()).unwrap()
    }

    #[test]
    fn specified_errors_render_exactly() {
        let cases = [
            (
                GatewayError::InvalidKey,
                401,
                "authentication_error",
                "invalid_key",
                "invalid api key",
            ),
            (
                GatewayError::ExpiredKey,
                401,
                "authentication_error",
                "expired_key",
                "api key has expired",
            ),
            (
                GatewayError::InsufficientCredit,
                402,
                "invalid_request_error",
                "insufficient_credit",
                "insufficient credit balance",
            ),
            (
                GatewayError::SpendLimitExceeded,
                429,
                "invalid_request_error",
                "spend_limit_exceeded",
                "api key spend limit exceeded",
            ),
            (
                GatewayError::ModelNotFound("x/y".into()),
                400,
                "invalid_request_error",
                "model_not_found",
                "model \"x/y\" not found",
            ),
            (
                GatewayError::EmbeddingsUnsupported("a/b".into()),
                400,
                "invalid_request_error",
                "embeddings_unsupported",
                "model \"a/b\" does not support embeddings",
            ),
        ];
        for (e, status, ty, code, message) in cases {
            let v = parse(&e);
            assert_eq!(e.status(), status, "{e:?}");
            assert_eq!(v["error"]["type"], ty, "{e:?}");
            assert_eq!(v["error"]["code"], code, "{e:?}");
            assert_eq!(v["error"]["message"], message, "{e:?}");
            assert_eq!(v["error"].as_object().unwrap().len(), 3);
        }
    }

    #[test]
    fn upstream_errors_keep_the_upstream_status() {
        let e = GatewayError::Upstream {
            status: 529,
            message: "overloaded".into(),
        };
        assert_eq!(e.status(), 529);
        assert_eq!(parse(&e)["error"]["type"], "upstream_error");
        assert_eq!(e.blame(), Blame::Upstream);
    }

    #[test]
    fn a_refused_credential_is_told_without_the_upstreams_words() {
        for status in [401, 403] {
            let e = GatewayError::upstream_answer(status, "Incorrect API key: Bearer [redacted]");
            let v = parse(&e);
            assert_eq!(e.status(), status);
            assert_eq!(
                (&v["error"]["type"], &v["error"]["code"]),
                (&"upstream_error".into(), &"upstream_error".into())
            );
            assert_eq!(
                v["error"]["message"],
                "the upstream refused the gateway's credentials"
            );
        }
        let e = GatewayError::upstream_answer(429, "slow down");
        assert_eq!((e.status(), e.to_string().as_str()), (429, "slow down"));
        assert_eq!(GatewayError::upstream_answer(302, "moved").status(), 502);
    }

    #[test]
    fn a_short_strict_credit_says_what_the_balance_affords() {
        let e = GatewayError::CreditShort {
            affordable_output_tokens: 1234,
        };
        let v = parse(&e);
        assert_eq!(e.status(), 402);
        assert_eq!(v["error"]["message"], "insufficient credit balance");
        assert_eq!(v["error"]["code"], "insufficient_credit");
        assert_eq!(v["error"]["affordable_output_tokens"], 1234);
    }

    #[test]
    fn transport_failures_have_one_wording() {
        let t = GatewayError::transport(Transport::Timeout, None);
        assert_eq!(
            (t.status(), t.to_string().as_str()),
            (504, "upstream timed out")
        );
        let c = GatewayError::transport(Transport::Connect, Some("ConnectRefused"));
        assert_eq!(
            (c.status(), c.to_string().as_str()),
            (502, "cannot connect to upstream: ConnectRefused")
        );
        let b = GatewayError::transport(Transport::Broken, None);
        assert_eq!((b.status(), b.code()), (502, "upstream_error"));
    }

    #[test]
    fn a_mid_stream_failure_is_its_own_variant() {
        let e = GatewayError::MidStream("upstream failed mid-response: ReadError".into());
        assert_eq!(e.code(), "upstream_error");
        assert_eq!(e.blame(), Blame::Upstream);
        assert_ne!(e.status(), 200, "never the client's 200");
    }
}
