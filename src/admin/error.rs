//! The admin API's errors, mapped to the OpenAI-style envelope in one place.

use http::StatusCode;

use super::http::Response;
use crate::commands::CommandError;
use crate::store::StoreError;

#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    #[error("no admin token configured: set the environment variable {0} and restart to use the admin API and console")]
    Disabled(String),
    #[error("a valid admin token or management key (Authorization: Bearer …), or a console session, is required")]
    Unauthorized,
    #[error("missing or wrong X-CSRF-Token header for this console session")]
    Csrf,
    #[error("a management key may only read its own workspace, its usage and its credits, and manage its API keys")]
    Forbidden,
    #[error("too many wrong admin tokens from this address: retry in {retry_after} s")]
    Throttled { retry_after: u64 },
    #[error("too many sign-in attempts from this address: retry in {retry_after} s")]
    TooManySignIns { retry_after: u64 },
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    Invalid(String),
    #[error("{0}")]
    Conflict(String),
    /// An `Idempotency-Key` already used for a different request.
    #[error("{0}")]
    IdempotencyKeyReused(String),
    #[error("method {0} not allowed here")]
    Method(String),
    #[error("the store is unavailable: {0}")]
    Store(String),
}

impl AdminError {
    fn status_and_code(&self) -> (StatusCode, &'static str) {
        match self {
            Self::Disabled(_) => (StatusCode::NOT_FOUND, "admin_disabled"),
            Self::Unauthorized => (StatusCode::UNAUTHORIZED, "unauthorized"),
            Self::Csrf => (StatusCode::FORBIDDEN, "csrf_failed"),
            Self::Forbidden => (StatusCode::FORBIDDEN, "forbidden"),
            Self::Throttled { .. } | Self::TooManySignIns { .. } => {
                (StatusCode::TOO_MANY_REQUESTS, "rate_limited")
            }
            Self::NotFound(_) => (StatusCode::NOT_FOUND, "not_found"),
            Self::Invalid(_) => (StatusCode::BAD_REQUEST, "invalid_request"),
            Self::Conflict(_) => (StatusCode::CONFLICT, "conflict"),
            Self::IdempotencyKeyReused(_) => (StatusCode::CONFLICT, "idempotency_key_reused"),
            Self::Method(_) => (StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed"),
            Self::Store(_) => (StatusCode::SERVICE_UNAVAILABLE, "store_unavailable"),
        }
    }

    pub fn response(&self) -> Response {
        let (status, code) = self.status_and_code();
        let kind = match status.as_u16() {
            401 => "authentication_error",
            403 => "permission_error",
            404 => "not_found_error",
            503 => "api_error",
            _ => "invalid_request_error",
        };
        let res = Response::json(
            status,
            &serde_json::json!({
                "error": { "message": self.to_string(), "type": kind, "code": code }
            }),
        );
        match self {
            Self::Throttled { retry_after } | Self::TooManySignIns { retry_after } => {
                res.with_header(http::header::RETRY_AFTER, retry_after.to_string())
            }
            _ => res,
        }
    }
}

impl From<CommandError> for AdminError {
    fn from(e: CommandError) -> Self {
        match e {
            CommandError::Store(s) => s.into(),
            CommandError::Invalid(m) => Self::Invalid(m),
            CommandError::Conflict(m) => Self::Conflict(m),
            CommandError::Money(m) => Self::Invalid(m.to_string()),
            CommandError::Import(i) => Self::Invalid(i.to_string()),
        }
    }
}

impl From<StoreError> for AdminError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::NotFound(what) => Self::NotFound(format!("{what} not found")),
            StoreError::Conflict(m) => Self::Conflict(m),
            StoreError::Overflow(m) => Self::Invalid(m),
            e @ StoreError::IdempotencyKeyReused(_) => Self::IdempotencyKeyReused(e.to_string()),
            other => {
                tracing::warn!("admin API: {other}");
                Self::Store(other.to_string())
            }
        }
    }
}
