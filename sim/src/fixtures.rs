//! Real provider error bodies (and the one canned success body) the simulator returns, so the
//! gateway's error mapping is exercised against the shapes it will meet in production.
//!
//! Sources (all under `tests/fixtures/`, see `tests/fixtures/SOURCES.md`):
//! - Gemini: `gemini-error-400-api-key-invalid-devapi.json`, `gemini-error-400-batch-embed-limit.json`,
//!   `gemini-error-400-penalty-not-enabled.json`, `gemini-error-400-thinking-config-live.json`,
//!   `gemini-error-400-thinking-level-minimal-unsupported.json`, `gemini-error-403-permission-denied-vertex.json`,
//!   `gemini-error-404-model-not-found-devapi.json`, `gemini-error-404-embed-model-not-found.json`,
//!   `gemini-error-429-retryinfo-devapi.json` (Developer API 429), `gemini-stream-error-mid-stream-vertex.txt`
//!   (mid-stream bare error object), `gemini-prompt-blocked-safety-vertex.json`.
//! - Anthropic: `anthropic-error-*.json` envelope (`type`, `error{type,message}`, `request_id`);
//!   429/500/529 use that envelope with the types of `docs/wire.md#anthropic-errors` (no
//!   recorded body exists).
//! - OpenAI: `openai-error-400-unsupported-parameter.json` envelope.
//!
//! Bodies not captured in the fixtures are written from `docs/wire.md#gemini-errors` /
//! `docs/wire.md#anthropic-errors` and the
//! providers' published messages; each such function says so. Google errors are
//! pretty-printed like the captures.

use axum::http::StatusCode;
use axum::response::Response;
use serde::Serialize;
use serde_json::{json, Value};

use crate::content::random_id;
use crate::respond::{self, JSON_GOOGLE, JSON_PLAIN};

// ---------------------------------------------------------------------------------------------
// Google (Gemini Developer API and Vertex AI)
// ---------------------------------------------------------------------------------------------

#[derive(Serialize)]
struct GoogleError<'a> {
    error: GoogleErrorBody<'a>,
}

#[derive(Serialize)]
struct GoogleErrorBody<'a> {
    code: u16,
    message: &'a str,
    status: &'a str,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    details: Vec<Value>,
}

/// The JSON of a Google error (used for the mid-stream tail too).
pub fn google_error_value(code: u16, status: &str, message: &str, details: Vec<Value>) -> Value {
    serde_json::to_value(GoogleError {
        error: GoogleErrorBody {
            code,
            message,
            status,
            details,
        },
    })
    .unwrap_or(Value::Null)
}

pub fn google_error(code: u16, status: &str, message: &str, details: Vec<Value>) -> Response {
    let http = StatusCode::from_u16(code).unwrap_or(StatusCode::BAD_REQUEST);
    respond::json_pretty(
        http,
        JSON_GOOGLE,
        &GoogleError {
            error: GoogleErrorBody {
                code,
                message,
                status,
                details,
            },
        },
    )
}

/// 400 INVALID_ARGUMENT with a plain message (the penalty / thinking fixtures' shape).
pub fn invalid_argument(message: &str) -> Response {
    google_error(400, "INVALID_ARGUMENT", message, Vec::new())
}

/// 400 for unknown JSON fields. `violations` holds `(field path or "", unknown name)`.
/// Shape: "Invalid JSON payload received. Unknown name \"x\" at 'generation_config': Cannot
/// find field." plus a `google.rpc.BadRequest` detail listing each violation.
pub fn unknown_fields(violations: &[(String, String)]) -> Response {
    let mut messages = Vec::with_capacity(violations.len());
    let mut fvs = Vec::with_capacity(violations.len());
    for (field, name) in violations {
        let desc = if field.is_empty() {
            format!("Invalid JSON payload received. Unknown name \"{name}\": Cannot find field.")
        } else {
            format!(
                "Invalid JSON payload received. Unknown name \"{name}\" at '{field}': Cannot find field."
            )
        };
        if field.is_empty() {
            fvs.push(json!({ "description": desc }));
        } else {
            fvs.push(json!({ "field": field, "description": desc }));
        }
        messages.push(desc);
    }
    let details = vec![json!({
        "@type": "type.googleapis.com/google.rpc.BadRequest",
        "fieldViolations": fvs,
    })];
    google_error(400, "INVALID_ARGUMENT", &messages.join("\n"), details)
}

/// 400 for a value of the wrong type/enum: "Invalid value at 'path' (TYPE), VALUE".
pub fn invalid_value(path: &str, type_name: &str, value: &Value) -> Response {
    let shown = match value {
        Value::String(s) => format!("\"{s}\""),
        other => other.to_string(),
    };
    let msg = format!("Invalid value at '{path}' ({type_name}), {shown}");
    let details = vec![json!({
        "@type": "type.googleapis.com/google.rpc.BadRequest",
        "fieldViolations": [ { "field": path, "description": format!("Invalid value at '{path}' ({type_name}), {shown}") } ],
    })];
    google_error(400, "INVALID_ARGUMENT", &msg, details)
}

/// Fixture `gemini-error-400-api-key-invalid-devapi.json` (the DebugInfo names the key sent).
pub fn gemini_api_key_invalid(key: &str) -> Response {
    let msg = "API key not valid. Please pass a valid API key.";
    google_error(
        400,
        "INVALID_ARGUMENT",
        msg,
        vec![
            json!({
                "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                "reason": "API_KEY_INVALID",
                "domain": "googleapis.com",
                "metadata": { "service": "generativelanguage.googleapis.com" }
            }),
            json!({
                "@type": "type.googleapis.com/google.rpc.LocalizedMessage",
                "locale": "en-US",
                "message": msg
            }),
            json!({
                "@type": "type.googleapis.com/google.rpc.DebugInfo",
                "detail": format!("Invalid API key: {key}")
            }),
        ],
    )
}

/// No key at all: Google's 403 for unregistered callers (published message, not a fixture).
pub fn gemini_api_key_missing() -> Response {
    google_error(
        403,
        "PERMISSION_DENIED",
        "Method doesn't allow unregistered callers (callers without established identity). Please use API Key or other form of API consumer identity to call this API.",
        Vec::new(),
    )
}

/// Fixture `gemini-error-400-batch-embed-limit.json`.
pub fn gemini_batch_limit() -> Response {
    invalid_argument(
        "* BatchEmbedContentsRequest.requests: at most 100 requests can be in one batch\n",
    )
}

/// Fixture `gemini-error-400-penalty-not-enabled.json`.
pub fn gemini_penalty(model: &str) -> Response {
    invalid_argument(&format!("Penalty is not enabled for models/{model}"))
}

/// Fixture `gemini-error-400-thinking-config-live.json` (`thinkingLevelAndBudgetResponse`).
pub fn gemini_thinking_both() -> Response {
    invalid_argument("You can only set only one of thinking budget and thinking level.")
}

/// Fixture `gemini-error-400-thinking-level-minimal-unsupported.json` (LEVEL upper-cased).
pub fn gemini_level_unsupported(level_upper: &str) -> Response {
    invalid_argument(&format!(
        "Thinking level {level_upper} is not supported for this model. Please retry with other thinking level."
    ))
}

/// Fixture `gemini-error-404-model-not-found-devapi.json`, parameterised.
pub fn gemini_model_not_found(model: &str, version: &str, method: &str) -> Response {
    let msg = format!(
        "models/{model} is not found for API version {version}, or is not supported for {method}. Call ListModels to see the list of available models and their supported methods."
    );
    if method == "generateContent" || method == "streamGenerateContent" {
        let details = vec![
            json!({
                "@type": "type.googleapis.com/google.rpc.DebugInfo",
                "detail": format!("[ORIGINAL ERROR] generic::not_found: {msg} [google.rpc.error_details_ext] {{ message: \"{msg}\" }}")
            }),
            json!({ "@type": "type.googleapis.com/google.rpc.DebugInfo", "detail": msg }),
        ];
        google_error(404, "NOT_FOUND", &msg, details)
    } else {
        // `gemini-error-404-embed-model-not-found.json` has no details.
        google_error(404, "NOT_FOUND", &msg, Vec::new())
    }
}

/// Vertex publisher-model 404 (published Vertex message, not a fixture).
pub fn vertex_model_not_found(
    project: &str,
    location: &str,
    publisher: &str,
    model: &str,
) -> Response {
    google_error(
        404,
        "NOT_FOUND",
        &format!(
            "Publisher Model `projects/{project}/locations/{location}/publishers/{publisher}/models/{model}` was not found or your project does not have access to it. Please ensure you are using a valid model version. For more information, see: https://cloud.google.com/vertex-ai/generative-ai/docs/learn/model-versions"
        ),
        Vec::new(),
    )
}

/// Developer API 429: fixture `gemini-error-429-retryinfo-devapi.json`.
pub fn gemini_429_dev() -> Response {
    google_error(
        429,
        "RESOURCE_EXHAUSTED",
        "You exceeded your current quota, please check your plan.",
        vec![
            json!({
                "@type": "type.googleapis.com/google.rpc.QuotaFailure",
                "violations": [ { "quotaId": "GenerateRequestsPerMinutePerProjectPerModel-FreeTier" } ]
            }),
            json!({ "@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "34.4s" }),
        ],
    )
}

/// Vertex 429 (shared-capacity exhaustion; Vertex's published message,
/// `docs/wire.md#gemini-errors`).
pub fn vertex_429() -> Response {
    google_error(
        429,
        "RESOURCE_EXHAUSTED",
        "Resource exhausted. Please try again later. Please refer to https://cloud.google.com/vertex-ai/generative-ai/docs/error-code-429 for more details.",
        Vec::new(),
    )
}

/// Vertex quota 429 as Claude-on-Vertex returns it (Google envelope,
/// `docs/wire.md#anthropic-endpoints-and-headers`).
pub fn vertex_claude_429(model: &str) -> Response {
    let base = model.split('@').next().unwrap_or(model);
    google_error(
        429,
        "RESOURCE_EXHAUSTED",
        &format!(
            "Quota exceeded for aiplatform.googleapis.com/online_prediction_requests_per_base_model with base model: anthropic-{base}. Please submit a quota increase request. https://cloud.google.com/vertex-ai/docs/generative-ai/quotas-genai."
        ),
        Vec::new(),
    )
}

/// 500 INTERNAL (`docs/wire.md#gemini-errors`; Developer API wording).
pub fn gemini_500(vertex: bool) -> Response {
    let msg = if vertex {
        "Internal error encountered."
    } else {
        "An internal error has occurred. Please retry or report in https://developers.generativeai.google/guide/troubleshooting"
    };
    google_error(500, "INTERNAL", msg, Vec::new())
}

/// 503 UNAVAILABLE (`docs/wire.md#gemini-errors`).
/// A 200 that is not the provider's answer: what a misbehaving proxy in between may send.
pub fn garbage_200() -> Response {
    respond::raw(
        StatusCode::OK,
        "text/html",
        "<html><body><h1>Service temporarily rerouted</h1></body></html>\n",
    )
}

pub fn gemini_503() -> Response {
    google_error(
        503,
        "UNAVAILABLE",
        "The model is overloaded. Please try again later.",
        Vec::new(),
    )
}

/// The bare error object appended mid-stream: fixture `gemini-stream-error-mid-stream-vertex.txt`
/// (pretty-printed JSON after the last `data:` event, newline-terminated).
pub fn gemini_midstream_error_tail() -> bytes::Bytes {
    let v = google_error_value(
        499,
        "CANCELLED",
        "The operation was cancelled.",
        vec![json!({
            "@type": "type.googleapis.com/google.rpc.DebugInfo",
            "detail": "[ORIGINAL ERROR] generic::cancelled: "
        })],
    );
    let mut b = serde_json::to_vec_pretty(&v).unwrap_or_default();
    b.push(b'\n');
    bytes::Bytes::from(b)
}

/// `promptFeedback` of fixture `gemini-prompt-blocked-safety-vertex.json`.
pub fn gemini_prompt_feedback_blocked() -> Value {
    json!({
        "blockReason": "SAFETY",
        "safetyRatings": [
            { "category": "HARM_CATEGORY_SEXUALLY_EXPLICIT", "probability": "NEGLIGIBLE" },
            { "category": "HARM_CATEGORY_HATE_SPEECH", "probability": "HIGH" },
            { "category": "HARM_CATEGORY_HARASSMENT", "probability": "NEGLIGIBLE" },
            { "category": "HARM_CATEGORY_DANGEROUS_CONTENT", "probability": "NEGLIGIBLE" }
        ]
    })
}

fn vertex_error_info(reason: &str, method: &str) -> Value {
    json!({
        "@type": "type.googleapis.com/google.rpc.ErrorInfo",
        "reason": reason,
        "domain": "googleapis.com",
        "metadata": { "method": method, "service": "aiplatform.googleapis.com" }
    })
}

/// Vertex 401 without credentials (Google's published body; reason CREDENTIALS_MISSING).
pub fn vertex_401_missing(method: &str) -> Response {
    google_error(
        401,
        "UNAUTHENTICATED",
        "Request is missing required authentication credential. Expected OAuth 2 access token, login cookie or other valid authentication credential. See https://developers.google.com/identity/sign-in/web/devconsole-project.",
        vec![vertex_error_info("CREDENTIALS_MISSING", method)],
    )
}

/// Vertex 401 for an unknown (`ACCESS_TOKEN_TYPE_UNSUPPORTED`) or expired
/// (`ACCESS_TOKEN_EXPIRED`) bearer token.
pub fn vertex_401_invalid(method: &str, reason: &str) -> Response {
    google_error(
        401,
        "UNAUTHENTICATED",
        "Request had invalid authentication credentials. Expected OAuth 2 access token, login cookie or other valid authentication credential. See https://developers.google.com/identity/sign-in/web/devconsole-project.",
        vec![vertex_error_info(reason, method)],
    )
}

/// Vertex 403 for a token without the cloud-platform scope.
pub fn vertex_403_scope(method: &str) -> Response {
    google_error(
        403,
        "PERMISSION_DENIED",
        "Request had insufficient authentication scopes.",
        vec![vertex_error_info("ACCESS_TOKEN_SCOPE_INSUFFICIENT", method)],
    )
}

/// Fixture `gemini-error-403-permission-denied-vertex.json` for `resource`
/// (`projects/P/locations/L/publishers/X/models/M`).
pub fn vertex_403_iam(resource: &str) -> Response {
    google_error(
        403,
        "PERMISSION_DENIED",
        &format!(
            "Permission 'aiplatform.endpoints.predict' denied on resource '//aiplatform.googleapis.com/{resource}' (or it may not exist)."
        ),
        vec![json!({
            "@type": "type.googleapis.com/google.rpc.ErrorInfo",
            "reason": "IAM_PERMISSION_DENIED",
            "domain": "aiplatform.googleapis.com",
            "metadata": { "permission": "aiplatform.endpoints.predict", "resource": resource }
        })],
    )
}

// ---------------------------------------------------------------------------------------------
// Anthropic
// ---------------------------------------------------------------------------------------------

#[derive(Serialize)]
struct AnthropicError<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    error: AnthropicErrorBody<'a>,
    request_id: String,
}

#[derive(Serialize)]
struct AnthropicErrorBody<'a> {
    #[serde(rename = "type")]
    kind: &'a str,
    message: &'a str,
}

pub fn anthropic_request_id(vertex: bool) -> String {
    if vertex {
        format!("req_vrtx_011C{}", random_id(20))
    } else {
        format!("req_011C{}", random_id(20))
    }
}

/// `{"type":"error","error":{"type":…,"message":…},"request_id":…}` with a `request-id` header.
pub fn anthropic_error(status: u16, kind: &str, message: &str, vertex: bool) -> Response {
    let rid = anthropic_request_id(vertex);
    let http = StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_REQUEST);
    let resp = respond::json(
        http,
        JSON_PLAIN,
        &AnthropicError {
            kind: "error",
            error: AnthropicErrorBody { kind, message },
            request_id: rid.clone(),
        },
    );
    respond::with_header(resp, "request-id", &rid)
}

pub fn anthropic_invalid(message: &str, vertex: bool) -> Response {
    anthropic_error(400, "invalid_request_error", message, vertex)
}

/// 429 `rate_limit_error` (Anthropic's published message) with `retry-after`.
pub fn anthropic_429(vertex: bool) -> Response {
    let resp = anthropic_error(
        429,
        "rate_limit_error",
        "This request would exceed the rate limit for your organization of 50 requests per minute. For details, refer to: https://docs.claude.com/en/api/rate-limits. You can see the response headers for current usage. Please reduce the prompt length or the maximum tokens requested, or try again later. You may also contact sales at https://www.anthropic.com/contact-sales to discuss your options for a rate limit increase.",
        vertex,
    );
    respond::with_header(resp, "retry-after", "1")
}

pub fn anthropic_500(vertex: bool) -> Response {
    anthropic_error(500, "api_error", "Internal server error", vertex)
}

/// 529 `overloaded_error` (also sent for the `503` fault on the direct API, where Anthropic
/// has no 503 of its own).
pub fn anthropic_overloaded(status: u16, vertex: bool) -> Response {
    let resp = anthropic_error(status, "overloaded_error", "Overloaded", vertex);
    respond::with_header(resp, "retry-after", "1")
}

/// The mid-stream `event: error` frame (`docs/wire.md#anthropic-streaming`).
pub fn anthropic_error_event() -> bytes::Bytes {
    bytes::Bytes::from_static(
        b"event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n",
    )
}

// ---------------------------------------------------------------------------------------------
// OpenAI
// ---------------------------------------------------------------------------------------------

#[derive(Serialize)]
struct OpenAiError<'a> {
    error: OpenAiErrorBody<'a>,
}

#[derive(Serialize)]
struct OpenAiErrorBody<'a> {
    message: &'a str,
    #[serde(rename = "type")]
    kind: &'a str,
    param: Option<&'a str>,
    code: Option<&'a str>,
}

pub fn openai_error_value(
    message: &str,
    kind: &str,
    param: Option<&str>,
    code: Option<&str>,
) -> Value {
    serde_json::to_value(OpenAiError {
        error: OpenAiErrorBody {
            message,
            kind,
            param,
            code,
        },
    })
    .unwrap_or(Value::Null)
}

pub fn openai_error(
    status: u16,
    message: &str,
    kind: &str,
    param: Option<&str>,
    code: Option<&str>,
) -> Response {
    let http = StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_REQUEST);
    let resp = respond::json(
        http,
        JSON_PLAIN,
        &OpenAiError {
            error: OpenAiErrorBody {
                message,
                kind,
                param,
                code,
            },
        },
    );
    respond::with_header(resp, "x-request-id", &format!("req_{}", random_id(32)))
}

pub fn openai_invalid(message: &str, param: Option<&str>, code: Option<&str>) -> Response {
    openai_error(400, message, "invalid_request_error", param, code)
}

pub fn openai_429() -> Response {
    let resp = openai_error(
        429,
        "Rate limit reached for requests in organization org-sim on requests per min (RPM): Limit 500, Used 500, Requested 1. Please try again in 120ms. Visit https://platform.openai.com/account/rate-limits to learn more.",
        "requests",
        None,
        Some("rate_limit_exceeded"),
    );
    respond::with_header(resp, "retry-after", "1")
}

pub fn openai_500() -> Response {
    openai_error(
        500,
        "The server had an error while processing your request. Sorry about that!",
        "server_error",
        None,
        None,
    )
}

pub fn openai_503() -> Response {
    openai_error(
        503,
        "The engine is currently overloaded, please try again later.",
        "server_error",
        None,
        None,
    )
}
