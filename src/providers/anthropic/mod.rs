//! Family "anthropic": Claude behind the OpenAI chat wire, on both surfaces it is served from —
//! the Messages API (`POST {base}/v1/messages`, `x-api-key` + `anthropic-version` headers) and
//! Vertex AI (`{base}/v1/projects/{p}/locations/{l}/publishers/anthropic/models/{m}:rawPredict`
//! or `:streamRawPredict`, OAuth bearer token, `anthropic_version: "vertex-2023-10-16"` in the
//! body and no `model`). The body and the response/stream formats are otherwise identical, so
//! only the transport is decided here from the route kind.
//!
//! Files: `request.rs` (OpenAI body → Messages API body: tools and tool history, replayed
//! signed thinking, thinking and caching), `response.rs` (buffered message →
//! `chat.completion`: tool calls, signatures as `reasoning_details`; shared usage/stop
//! mappings), `stream.rs` (Messages SSE events → `chat.completion.chunk` frames, signatures
//! included), `error.rs` (Anthropic and Google error bodies), `native.rs`
//! ([`AnthropicNative`]: requests that arrive in the Messages API's own dialect, passed through
//! with the gateway's model id, credential and surface; counting tokens). The transport
//! (paths, credential and version headers) is `transport` here, shared by both adapters. Wire
//! notes: `docs/wire.md` (the Anthropic sections); fixtures: `tests/fixtures/anthropic-*`
//! (`tests/fixtures/SOURCES.md`).
//!
//! Tools and tool loops are translated both ways (`tools`/`tool_choice` → Claude's, tool calls
//! and results ↔ `tool_use`/`tool_result` blocks), and Claude's signed thinking survives a
//! round trip through the client as `reasoning_details`, so that a door translating onto the
//! chat body (the Responses door) runs tool loops with extended thinking on Claude. The chat
//! door itself does not offer tools on Claude: admission refuses them there, naming the
//! parameter [`tool_parameter`] finds.

mod error;
pub mod native;
mod request;
mod response;
mod stream;

pub use native::AnthropicNative;
pub use request::tool_parameter;

use super::chat_answer::AnswerRender;
use super::chat_stream::{ChatSse, ChatStream};
use super::{
    header, Adapter, ChatAdapter, Credentials, Plan, ResponseCx, StreamTranslator, Target,
    TranslateError, Translated, UpstreamRequest,
};
use crate::api::{GatewayError, Operation, RawRequest};
use crate::catalog::RouteKind;

/// The `anthropic_version` Vertex expects in the body.
pub const VERTEX_VERSION: &str = "vertex-2023-10-16";

/// The Anthropic adapter (Messages API and Claude on Vertex AI).
pub struct Anthropic;

impl Adapter for Anthropic {
    fn plan(
        &self,
        req: &RawRequest<'_>,
        target: &Target<'_>,
        creds: &Credentials,
    ) -> Result<Plan, GatewayError> {
        chat_only(target)?;
        let vertex = target.route.kind == RouteKind::VertexAnthropic;
        let body = request::build(req, target, vertex)?;
        let mut headers = vec![header("content-type", "application/json")?];
        let call = Call::Message {
            stream: target.stream,
        };
        let path = transport(target, creds, call, None, &mut headers)?;
        Ok(Plan::single(UpstreamRequest {
            path,
            headers,
            body,
        }))
    }

    fn translate_buffered(
        &self,
        body: &[u8],
        cx: &ResponseCx,
    ) -> Result<Translated, TranslateError> {
        response::translate(body, cx, None)
    }

    fn stream_translator(&self, cx: ResponseCx) -> Box<dyn StreamTranslator> {
        Box::new(ChatSse::new(stream::AnthropicStream::new(cx)))
    }

    fn upstream_error_message(&self, status: u16, body: &[u8]) -> String {
        error::upstream_error_message(status, body)
    }
}

impl ChatAdapter for Anthropic {
    fn translate_answer(
        &self,
        body: &[u8],
        cx: &ResponseCx,
        door: &dyn AnswerRender,
    ) -> Result<Translated, TranslateError> {
        response::translate(body, cx, Some(door))
    }

    fn chat_stream(&self, cx: ResponseCx) -> Box<dyn ChatStream> {
        Box::new(stream::AnthropicStream::new(cx))
    }
}

/// Claude serves chat only: anything else is refused before a body is built.
fn chat_only(target: &Target<'_>) -> Result<(), GatewayError> {
    if target.op == Operation::Chat {
        Ok(())
    } else {
        let model = target.model.id.as_ref().into();
        Err(GatewayError::EmbeddingsUnsupported(model))
    }
}

/// Which call of the Messages API a request is, on either surface.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Call {
    /// A message, buffered or streamed (`/v1/messages`; Vertex `:rawPredict` /
    /// `:streamRawPredict`).
    Message { stream: bool },
    /// Input tokens counted (`/v1/messages/count_tokens`; Vertex
    /// `…/publishers/anthropic/models/count-tokens:rawPredict`, the model in the body).
    CountTokens,
}

/// The request path of `call` on the route's surface; pushes the credential headers: on the
/// Messages API `x-api-key` and `anthropic-version` (`version` when the client sent one, else
/// the configured one), on Vertex the bearer token (the version is a body field there).
fn transport(
    target: &Target<'_>,
    creds: &Credentials,
    call: Call,
    version: Option<&http::HeaderValue>,
    headers: &mut Vec<(http::HeaderName, http::HeaderValue)>,
) -> Result<String, GatewayError> {
    let base = &target.route.endpoint.base_path;
    if target.route.kind != RouteKind::VertexAnthropic {
        let key = creds
            .anthropic
            .as_ref()
            .ok_or(GatewayError::MissingCredentials("anthropic"))?;
        headers.push(header("x-api-key", key.expose())?);
        headers.push(match version {
            Some(v) => (
                http::HeaderName::from_static("anthropic-version"),
                v.clone(),
            ),
            None => header("anthropic-version", &creds.anthropic_version)?,
        });
        return Ok(match call {
            Call::Message { .. } => format!("{base}/v1/messages"),
            Call::CountTokens => format!("{base}/v1/messages/count_tokens"),
        });
    }
    let project = creds
        .vertex_project
        .as_deref()
        .ok_or(GatewayError::MissingCredentials("vertex project"))?;
    let token = creds
        .vertex_token
        .current()
        .ok_or(GatewayError::MissingCredentials("vertex"))?;
    headers.push(header(
        "authorization",
        &format!("Bearer {}", token.expose()),
    )?);
    let location = target.route.region.as_deref().unwrap_or("global");
    let (model, method) = match call {
        Call::Message { stream: true } => (target.upstream_model(), "streamRawPredict"),
        Call::Message { stream: false } => (target.upstream_model(), "rawPredict"),
        Call::CountTokens => ("count-tokens", "rawPredict"),
    };
    Ok(format!(
        "{base}/v1/projects/{project}/locations/{location}/publishers/anthropic/models/{model}:{method}"
    ))
}

/// Shared by the tests of every file here: targets, models and fixtures.
#[cfg(test)]
pub(super) mod test_support {
    use std::sync::Arc;

    use serde_json::Value;

    use crate::api::{GatewayError, Operation, RawRequest};
    use crate::catalog::{
        Endpoint, Family, Model, ModelKind, Pricing, Profile, Route, RouteKind, Thinking,
    };
    use crate::providers::{Adapter, Credentials, ResponseCx, Secret, Target};

    pub use crate::providers::test_support::{fixture, frames, run_stream};

    pub fn cx() -> ResponseCx {
        ResponseCx {
            id: Arc::from("chatcmpl-gw7"),
            model_id: Arc::from("anthropic/claude-test"),
            op: Operation::Chat,
            created: 1_700_000_000,
            exclude_reasoning: false,
        }
    }

    /// Like conf/catalog.yaml `claude`.
    pub fn profile() -> Profile {
        Profile {
            forward: [
                "temperature",
                "top_p",
                "top_k",
                "max_tokens",
                "stop",
                "reasoning",
            ]
            .iter()
            .map(|s| (*s).to_owned())
            .collect(),
            thinking: Thinking::Budget {
                min: 1024,
                max: 63999,
                can_disable: true,
            },
            min_cache_tokens: 1024,
            dimensions: None,
        }
    }

    /// A model with an effort profile (adaptive thinking) over `levels`, forwarding what
    /// `profile()` forwards, with a 64000-token output cap.
    pub fn effort_model(levels: &[&str], can_disable: bool) -> Model {
        let mut m = model(Some(64000));
        m.profile = Arc::new(Profile {
            thinking: Thinking::Effort {
                levels: levels.iter().map(|l| (*l).to_owned()).collect(),
                can_disable,
            },
            ..profile()
        });
        m
    }

    pub fn model(max_output_tokens: Option<u32>) -> Model {
        Model {
            id: Arc::from("anthropic/claude-test"),
            provider: "anthropic".into(),
            family: Family::Anthropic,
            kind: ModelKind::Chat,
            upstream_model: "claude-test".into(),
            profile_name: "claude".into(),
            profile: Arc::new(profile()),
            pricing: Pricing::default(),
            capabilities: Vec::new(),
            aliases: Vec::new(),
            max_output_tokens,
            context_window: None,
            routes: Vec::new(),
        }
    }

    pub fn route(kind: RouteKind, region: Option<&str>) -> Route {
        Route {
            kind,
            endpoint: Endpoint::parse("https://upstream.test/base").unwrap(),
            region: region.map(str::to_owned),
            addr: None,
            priority: 0,
            weight: 1,
            health: Default::default(),
            upstream_model: None,
            api: Default::default(),
        }
    }

    pub fn creds() -> Credentials {
        let c = Credentials {
            anthropic: Some(Secret::new("ak-test")),
            anthropic_version: "2023-06-01".into(),
            vertex_project: Some("proj".into()),
            ..Credentials::default()
        };
        c.vertex_token.set(Some(Secret::new("vtok")));
        c
    }

    /// An upstream request as the tests read it: path, headers, JSON body.
    pub type Built = (String, Vec<(String, String)>, Value);

    /// The upstream request (path, headers, body) for `req` on a route of `kind`.
    pub fn try_built(
        req: &Value,
        m: &Model,
        kind: RouteKind,
        region: Option<&str>,
        stream: bool,
    ) -> Result<Built, GatewayError> {
        let bytes = serde_json::to_vec(req).unwrap();
        let raw = RawRequest::parse(&bytes, Operation::Chat)?;
        let r = route(kind, region);
        let t = Target {
            model: m,
            route: &r,
            op: Operation::Chat,
            stream,
            max_cache_ttl: crate::providers::DEFAULT_MAX_CACHE_TTL,
            forward: &[],
        };
        let up =
            crate::providers::test_support::single(super::Anthropic.plan(&raw, &t, &creds())?);
        let headers = up
            .headers
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_str().unwrap().to_owned()))
            .collect();
        Ok((up.path, headers, serde_json::from_slice(&up.body).unwrap()))
    }

    /// The body sent on the direct route for a model with a 64000-token output cap.
    pub fn try_body(req: &Value) -> Result<Value, GatewayError> {
        try_built(req, &model(Some(64000)), RouteKind::Anthropic, None, false).map(|(_, _, b)| b)
    }

    pub fn body(req: Value) -> Value {
        try_body(&req).unwrap()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::test_support::*;
    use crate::api::GatewayError;
    use crate::catalog::RouteKind;
    use crate::providers::Credentials;

    fn hello() -> serde_json::Value {
        json!({"model": "anthropic/claude-test", "messages": [{"role": "user", "content": "hi"}]})
    }

    #[test]
    fn direct_transport() {
        let m = model(Some(64000));
        let (path, headers, body) =
            try_built(&hello(), &m, RouteKind::Anthropic, None, true).unwrap();
        assert_eq!(path, "/base/v1/messages");
        let h = |n: &str| headers.iter().find(|(k, _)| k == n).map(|(_, v)| v.clone());
        assert_eq!(h("x-api-key").as_deref(), Some("ak-test"));
        assert_eq!(h("anthropic-version").as_deref(), Some("2023-06-01"));
        assert_eq!(h("content-type").as_deref(), Some("application/json"));
        assert_eq!(h("authorization"), None);
        assert_eq!(body["model"], "claude-test");
        assert_eq!(body["stream"], true);
        assert!(body.get("anthropic_version").is_none());
    }

    #[test]
    fn vertex_transport() {
        let m = model(Some(64000));
        for (region, stream, want) in [
            (Some("us-east5"), false, "/base/v1/projects/proj/locations/us-east5/publishers/anthropic/models/claude-test:rawPredict"),
            (Some("us-east5"), true, "/base/v1/projects/proj/locations/us-east5/publishers/anthropic/models/claude-test:streamRawPredict"),
            (None, false, "/base/v1/projects/proj/locations/global/publishers/anthropic/models/claude-test:rawPredict"),
        ] {
            let (path, headers, body) =
                try_built(&hello(), &m, RouteKind::VertexAnthropic, region, stream).unwrap();
            assert_eq!(path, want);
            assert!(headers.contains(&("authorization".into(), "Bearer vtok".into())));
            assert!(!headers.iter().any(|(k, _)| k == "x-api-key" || k == "anthropic-version"));
            assert_eq!(body["anthropic_version"], "vertex-2023-10-16");
            assert!(body.get("model").is_none(), "{body}");
            assert_eq!(body.get("stream").is_some(), stream);
        }
    }

    #[test]
    fn missing_credentials() {
        let m = model(Some(64000));
        let bytes = serde_json::to_vec(&hello()).unwrap();
        let raw = crate::api::RawRequest::parse(&bytes, crate::api::Operation::Chat).unwrap();
        for kind in [RouteKind::Anthropic, RouteKind::VertexAnthropic] {
            let r = route(kind, None);
            let t = crate::providers::Target {
                model: &m,
                route: &r,
                op: crate::api::Operation::Chat,
                stream: false,
                max_cache_ttl: crate::providers::DEFAULT_MAX_CACHE_TTL,
                forward: &[],
            };
            let e = crate::providers::Adapter::plan(
                &super::Anthropic,
                &raw,
                &t,
                &Credentials::default(),
            )
            .unwrap_err();
            assert!(matches!(e, GatewayError::MissingCredentials(_)), "{e}");
        }
    }
}
