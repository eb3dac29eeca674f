//! Every failure the gateway itself produces, and its one rendering per front door: OpenAI's
//! `{"error":{"message","type","code"}}`, or Anthropic's
//! `{"type":"error","error":{"type","message","code"}}` on the Messages door (its type chosen
//! by status, as Anthropic's SDKs choose their exception classes), with the matching HTTP
//! status. The tollgate `code` is in both.
//!
//! Status, type and code come from exhaustive matches (no `_` arm), so a new variant cannot
//! be added without deciding all three. The code doubles as a low-cardinality log/metric label.

use bytes::{BufMut, Bytes, BytesMut};
use serde::Serialize;

use super::Door;

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
    /// The key's allowlist (`allowed_models`) does not name the model: refused before any
    /// reservation or upstream call.
    #[error("this api key is not allowed to use model \"{0}\"")]
    ModelNotAllowed(Box<str>),
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
    /// No model the request names (`model`, `models`) is priced within its
    /// `provider.max_price` (the text names the cap).
    #[error("no model of this request is priced within its provider.max_price ({0})")]
    NoRouteWithinPrice(Box<str>),
    /// The request's `provider` preferences (`only`, `ignore`, `order` without fallbacks)
    /// leave no route of any model it names.
    #[error("the request's provider preferences allow no route of model \"{0}\"")]
    NoAllowedRoute(Box<str>),
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
    /// A stored response (`previous_response_id`, `/v1/responses/{id}`) this workspace does
    /// not have: never kept, deleted, expired, or another workspace's.
    #[error("no response {0} in this workspace")]
    NoResponse(Box<str>),
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
            Self::ModelNotAllowed(_) => 403,
            Self::SpendLimitExceeded => 429,
            Self::ModelNotFound(_)
            | Self::EmbeddingsUnsupported(_)
            | Self::ChatUnsupported(_)
            | Self::UnsupportedParameter { .. }
            | Self::InvalidRequest(_)
            | Self::TooMany { .. }
            | Self::ContextLengthExceeded { .. }
            | Self::NoRouteWithinPrice(_)
            | Self::NoAllowedRoute(_) => 400,
            Self::BodyTooLarge { .. } => 413,
            Self::HeadersTooLarge { .. } => 431,
            Self::BodyTimeout { .. } => 408,
            Self::NotFound(_) | Self::NoGeneration(_) | Self::NoResponse(_) => 404,
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
            Self::ModelNotAllowed(_) => "permission_error",
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
            | Self::NoRouteWithinPrice(_)
            | Self::NoAllowedRoute(_)
            | Self::BodyTooLarge { .. }
            | Self::HeadersTooLarge { .. }
            | Self::BodyTimeout { .. }
            | Self::NotFound(_)
            | Self::NoGeneration(_)
            | Self::NoResponse(_)
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
            Self::ModelNotAllowed(_) => "model_not_allowed",
            Self::UnsupportedParameter { .. } => "unsupported_parameter",
            Self::InvalidRequest(_) => "invalid_request_error",
            Self::BodyTooLarge { .. } => "request_too_large",
            Self::TooMany { .. } => "limit_exceeded",
            Self::HeadersTooLarge { .. } => "headers_too_large",
            Self::BodyTimeout { .. } => "request_timeout",
            Self::ContextLengthExceeded { .. } => "context_length_exceeded",
            Self::NotFound(_) => "not_found",
            Self::NoGeneration(_) => "generation_not_found",
            Self::NoResponse(_) => "response_not_found",
            Self::StoreUnavailable => "store_unavailable",
            Self::MethodNotAllowed { .. } => "method_not_allowed",
            Self::NoRoute(_) => "no_route",
            Self::NoRouteWithinPrice(_) => "no_route_within_price",
            Self::NoAllowedRoute(_) => "no_allowed_route",
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
            | Self::ModelNotAllowed(_)
            | Self::UnsupportedParameter { .. }
            | Self::InvalidRequest(_)
            | Self::TooMany { .. }
            | Self::ContextLengthExceeded { .. }
            | Self::NoRouteWithinPrice(_)
            | Self::NoAllowedRoute(_)
            | Self::BodyTooLarge { .. }
            | Self::HeadersTooLarge { .. }
            | Self::BodyTimeout { .. }
            | Self::NotFound(_)
            | Self::NoGeneration(_)
            | Self::NoResponse(_)
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

    /// The status on `door`: the specification's, except that an unknown model is a 404 on
    /// the Messages door, as Anthropic answers it.
    pub fn status_in(&self, door: Door) -> u16 {
        match (door, self) {
            (Door::Messages, Self::ModelNotFound(_)) => 404,
            _ => self.status(),
        }
    }

    /// The error body in `door`'s shape.
    pub fn envelope_in(&self, door: Door) -> Bytes {
        match door {
            Door::OpenAi | Door::Responses => self.envelope(),
            Door::Messages => {
                let message = self.to_string();
                let error_type = anthropic_type(self.status_in(door));
                anthropic_envelope(&message, error_type, self.code())
            }
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

/// Anthropic's error type for an HTTP status (what its SDKs and Claude Code key on).
pub fn anthropic_type(status: u16) -> &'static str {
    match status {
        401 => "authentication_error",
        402 => "billing_error",
        403 => "permission_error",
        404 => "not_found_error",
        413 => "request_too_large",
        429 => "rate_limit_error",
        503 | 529 => "overloaded_error",
        504 => "timeout_error",
        500..=599 => "api_error",
        _ => "invalid_request_error",
    }
}

/// Renders `{"type":"error","error":{"type","message","code"}}`, Anthropic's error body (the
/// `code` is tollgate's, an extra field its SDKs keep).
pub fn anthropic_envelope(message: &str, error_type: &str, code: &str) -> Bytes {
    #[derive(Serialize)]
    struct Inner<'a> {
        #[serde(rename = "type")]
        error_type: &'a str,
        message: &'a str,
        code: &'a str,
    }
    #[derive(Serialize)]
    struct Envelope<'a> {
        #[serde(rename = "type")]
        kind: &'static str,
        error: Inner<'a>,
    }
    let e = Envelope {
        kind: "error",
        error: Inner {
            error_type,
            message,
            code,
        },
    };
    serde_json::to_vec(&e).map(Bytes::from).unwrap_or_default()
}

/// The frame that ends a stream failing after it began, in `door`'s shape: OpenAI's error
/// envelope as a `data:` frame then `data: [DONE]`, Anthropic's `error` event, or the Responses
/// API's `error` event (numbered 0: the Responses door's translator numbers its own, see
/// `StreamTranslator::abort_frame`; this one ends a stream that never began).
pub fn stream_error_frame(door: Door, message: &str) -> Bytes {
    let mut out = BytesMut::new();
    match door {
        Door::OpenAi => {
            out.put_slice(b"data: ");
            out.put_slice(&envelope(message, "upstream_error", "upstream_error"));
            out.put_slice(b"\n\ndata: [DONE]\n\n");
        }
        Door::Messages => {
            out.put_slice(b"event: error\ndata: ");
            out.put_slice(&anthropic_envelope(message, "api_error", "upstream_error"));
            out.put_slice(b"\n\n");
        }
        Door::Responses => {
            #[derive(Serialize)]
            struct Event<'a> {
                #[serde(rename = "type")]
                kind: &'static str,
                code: &'static str,
                message: &'a str,
                param: Option<()>,
                sequence_number: u64,
            }
            let e = Event {
                kind: "error",
                code: "upstream_error",
                message,
                param: None,
                sequence_number: 0,
            };
            out.put_slice(b"event: error\ndata: ");
            out.put_slice(&serde_json::to_vec(&e).unwrap_or_default());
            out.put_slice(b"\n\n");
        }
    }
    out.freeze()
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
    fn the_messages_door_renders_anthropics_shape_with_tollgates_code() {
        let cases = [
            (GatewayError::MissingAuth, 401, "authentication_error"),
            (GatewayError::InsufficientCredit, 402, "billing_error"),
            (GatewayError::SpendLimitExceeded, 429, "rate_limit_error"),
            (
                GatewayError::ModelNotFound("x/y".into()),
                404,
                "not_found_error",
            ),
            (
                GatewayError::BodyTooLarge { limit: 1 },
                413,
                "request_too_large",
            ),
            (GatewayError::invalid("bad"), 400, "invalid_request_error"),
            (GatewayError::NoRoute("m".into()), 503, "overloaded_error"),
            (
                GatewayError::transport(Transport::Timeout, None),
                504,
                "timeout_error",
            ),
            (GatewayError::Internal("x".into()), 500, "api_error"),
        ];
        for (e, status, ty) in cases {
            let v: serde_json::Value =
                serde_json::from_slice(&e.envelope_in(Door::Messages)).unwrap();
            assert_eq!(e.status_in(Door::Messages), status, "{e:?}");
            assert_eq!(v["type"], "error", "{e:?}");
            assert_eq!(v["error"]["type"], ty, "{e:?}");
            assert_eq!(v["error"]["code"], e.code(), "{e:?}");
            assert_eq!(v["error"]["message"], e.to_string(), "{e:?}");
        }
        assert_eq!(
            GatewayError::ModelNotFound("x".into()).status_in(Door::OpenAi),
            400
        );
    }

    #[test]
    fn a_model_outside_the_keys_allowlist_is_403_in_every_doors_shape() {
        let e = GatewayError::ModelNotAllowed("anthropic/claude-opus-4-1".into());
        let message = "this api key is not allowed to use model \"anthropic/claude-opus-4-1\"";
        for door in [Door::OpenAi, Door::Responses, Door::Messages] {
            assert_eq!(e.status_in(door), 403, "{door:?}");
        }
        // OpenAI's envelope (the chat and Responses doors), then Anthropic's.
        let anthropic: serde_json::Value =
            serde_json::from_slice(&e.envelope_in(Door::Messages)).unwrap();
        assert_eq!(anthropic["type"], "error");
        for v in [parse(&e), anthropic] {
            let error = &v["error"];
            assert_eq!(
                (&error["type"], &error["code"], &error["message"]),
                (
                    &"permission_error".into(),
                    &"model_not_allowed".into(),
                    &message.into()
                ),
                "{v}"
            );
        }
    }

    #[test]
    fn a_stream_fails_in_its_doors_shape() {
        let openai = stream_error_frame(Door::OpenAi, "boom");
        assert!(openai.starts_with(b"data: {\"error\""));
        assert!(openai.ends_with(b"data: [DONE]\n\n"));
        let messages = stream_error_frame(Door::Messages, "boom");
        let text = std::str::from_utf8(&messages).unwrap();
        let data = text
            .strip_prefix("event: error\ndata: ")
            .unwrap()
            .trim_end();
        let v: serde_json::Value = serde_json::from_str(data).unwrap();
        assert_eq!(
            (v["type"].as_str(), v["error"]["message"].as_str()),
            (Some("error"), Some("boom"))
        );
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
