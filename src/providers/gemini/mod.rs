//! Family "gemini": Google Gemini behind the OpenAI chat wire, on both surfaces Google serves it
//! from — the Developer API (`generativelanguage…/v1beta/models/{m}:generateContent`, API key)
//! and Vertex AI (`…/v1/projects/{p}/locations/{l}/publishers/google/models/{m}:…`, OAuth
//! bearer token). The surfaces share one body format; only the transport (path, credential
//! header, service-tier headers) differs, and it is decided here from the route kind.
//!
//! Files: `request.rs` (OpenAI body → `GenerateContentRequest`), `thinking.rs` (reasoning
//! controls → `thinkingConfig` per profile), `cache.rs` (the explicit context-cache plan),
//! `response.rs` (buffered `GenerateContentResponse` → `chat.completion`), `stream.rs`
//! (`alt=sse` events → `chat.completion.chunk` frames), `error.rs` (Google error bodies),
//! `embed.rs` (`/v1/embeddings` → batched `batchEmbedContents` / `:predict` calls, a
//! [`FanOut`], with the per-model embedding limits), `count.rs` (a chat request's input tokens
//! counted by `:countTokens`, for the Messages door's `count_tokens`).
//! Wire notes: `docs/wire.md` (the Gemini sections); fixtures: `tests/fixtures/gemini-*`
//! (`tests/fixtures/SOURCES.md`).
//!
//! ## Tool-call ids carry thought signatures
//!
//! Gemini does not give ordinary function calls an id, so the gateway mints them, and Gemini 3
//! rejects a replayed `functionCall` part that lost its `thoughtSignature` (400). The OpenAI
//! wire has no place for the signature, but every OpenAI client sends tool-call ids back
//! unchanged, so the signature travels inside the id:
//!
//! - minted id: `call_<r>_<k>` — `<r>` is the alphanumeric tail of the completion id
//!   (`ResponseCx.id`, unique per response), `<k>` counts the response's calls from 0;
//! - with a signature: `call_<r>_<k>.<signature>` — the signature's standard base64 rewritten
//!   to the URL-safe alphabet (`+`→`-`, `/`→`_`) without `=` padding, so the id stays
//!   `[A-Za-z0-9_.-]`;
//! - on the way back (assistant `tool_calls` in history) an id with a `.` has the part after
//!   the first `.` turned back into standard, padded base64 and sent as that `functionCall`
//!   part's `thoughtSignature`. Google's signatures are canonical padded base64, so the round
//!   trip is byte-exact. A tail that is not URL-safe base64 (another client's dotted id) is
//!   ignored rather than sent as a corrupt signature.
//!
//! Signatures on text parts (Gemini 3 puts one on the answer, or on a trailing empty part of a
//! stream) are not carried: Google enforces signatures on function calls only.

mod cache;
mod count;
pub mod embed;
mod error;
mod request;
mod response;
mod stream;
mod thinking;

use super::chat_answer::AnswerRender;
use super::chat_stream::{ChatSse, ChatStream};
use super::{
    header, Adapter, CacheStep, ChatAdapter, Credentials, Plan, ResponseCx, StreamTranslator,
    Target, TranslateError, Translated, UpstreamRequest,
};
use crate::api::{GatewayError, Operation, RawRequest};
use crate::catalog::RouteKind;
pub(crate) use crate::providers::common::Str;

use cache::cache_plan;

/// The Gemini adapter (Developer API and Vertex AI).
pub struct Gemini;

impl Adapter for Gemini {
    /// Embeddings fan out (`embed.rs`); chat is translated once into the upstream request and,
    /// when the client marked a cacheable prefix, a cache step.
    fn plan(
        &self,
        req: &RawRequest<'_>,
        target: &Target<'_>,
        creds: &Credentials,
    ) -> Result<Plan, GatewayError> {
        if target.op == Operation::Embeddings {
            return embed::fan_out(req, target, creds).map(Plan::FanOut);
        }
        let t = request::translate(req, &target.model.profile)?;
        Ok(Plan::Proxy {
            request: chat_request(&t, target, creds)?,
            cache: cache_step(&t, target, creds)?,
        })
    }

    fn translate_buffered(
        &self,
        body: &[u8],
        cx: &ResponseCx,
    ) -> Result<Translated, TranslateError> {
        response::translate(body, cx, None)
    }

    fn stream_translator(&self, cx: ResponseCx) -> Box<dyn StreamTranslator> {
        Box::new(ChatSse::new(stream::GeminiStream::new(cx)))
    }

    fn upstream_error_message(&self, status: u16, body: &[u8]) -> String {
        error::upstream_error_message(status, body)
    }

    fn count_tokens(
        &self,
        req: &RawRequest<'_>,
        target: &Target<'_>,
        creds: &Credentials,
    ) -> Result<UpstreamRequest, GatewayError> {
        count::request(req, target, creds)
    }

    fn read_count(&self, body: &[u8]) -> Result<u64, TranslateError> {
        count::read(body)
    }
}

impl ChatAdapter for Gemini {
    fn translate_answer(
        &self,
        body: &[u8],
        cx: &ResponseCx,
        door: &dyn AnswerRender,
    ) -> Result<Translated, TranslateError> {
        response::translate(body, cx, Some(door))
    }

    fn chat_stream(&self, cx: ResponseCx) -> Box<dyn ChatStream> {
        Box::new(stream::GeminiStream::new(cx))
    }
}

/// The `generateContent` (or streaming) request carrying the whole translation.
fn chat_request(
    t: &request::Translation<'_>,
    target: &Target<'_>,
    creds: &Credentials,
) -> Result<UpstreamRequest, GatewayError> {
    let method = if target.stream {
        "streamGenerateContent?alt=sse"
    } else {
        "generateContent"
    };
    let mut headers = vec![header("content-type", "application/json")?];
    let path = transport(target, creds, method, &mut headers)?;
    if let (RouteKind::VertexGlobal, Some(tier)) = (target.route.kind, t.service_tier) {
        headers.push(header("x-vertex-ai-llm-request-type", "shared")?);
        headers.push(header("x-vertex-ai-llm-shared-request-type", tier)?);
    }
    Ok(UpstreamRequest {
        path,
        headers,
        body: request::whole_body(t)?,
    })
}

/// The explicit cache step when the client marked a prefix that reaches the profile's minimum;
/// below it the request goes as is and Gemini's implicit caching applies.
fn cache_step(
    t: &request::Translation<'_>,
    target: &Target<'_>,
    creds: &Credentials,
) -> Result<Option<CacheStep>, GatewayError> {
    let Some(plan) = cache_plan(t, target, creds)? else {
        return Ok(None);
    };
    if plan.estimated_tokens < target.model.profile.min_cache_tokens {
        return Ok(None);
    }
    let mut headers = vec![header("content-type", "application/json")?];
    let path = cache_path(target, creds, &mut headers)?;
    let lean = request::lean_body(t)?;
    Ok(Some(CacheStep {
        // Caches live per surface and location: the path keeps them apart.
        key: format!("{path} {}", plan.key),
        create: UpstreamRequest {
            path,
            headers,
            body: plan.create_body,
        },
        ttl: std::time::Duration::from_secs(plan.ttl_seconds),
        body_using: Box::new(move |name| request::naming_cache(name, &lean)),
    }))
}

/// Google indents its JSON answers unless the query says `prettyPrint=false` (a system
/// parameter of every Google API). Compact answers are smaller and cheaper to read: an
/// embedding of 768 values is 42 % smaller, a short chat answer 30 %.
const COMPACT: &str = "?prettyPrint=false";

/// The request path of `method` on the route's surface; pushes the credential header. A method
/// without a query of its own (every buffered call; streams are `?alt=sse`, one line an event)
/// asks for compact JSON.
fn transport(
    target: &Target<'_>,
    creds: &Credentials,
    method: &str,
    headers: &mut Vec<(http::HeaderName, http::HeaderValue)>,
) -> Result<String, GatewayError> {
    let base = target.route.endpoint.base_path.as_str();
    let query = if method.contains('?') { "" } else { COMPACT };
    // `concat`, not `format!`, for the paths of every call: one allocation, no formatter.
    let path = match target.route.kind {
        RouteKind::GeminiApi => [
            base,
            "/v1beta/models/",
            target.upstream_model(),
            ":",
            method,
            query,
        ]
        .concat(),
        _ => [
            base,
            "/v1/",
            &vertex_model(target, creds)?,
            ":",
            method,
            query,
        ]
        .concat(),
    };
    credential(target, creds, headers)?;
    Ok(path)
}

/// The surface's credential header: the API key, or the Vertex access token.
fn credential(
    target: &Target<'_>,
    creds: &Credentials,
    headers: &mut Vec<(http::HeaderName, http::HeaderValue)>,
) -> Result<(), GatewayError> {
    if target.route.kind == RouteKind::GeminiApi {
        let key = creds
            .gemini
            .as_ref()
            .ok_or(GatewayError::MissingCredentials("gemini"))?;
        headers.push(header("x-goog-api-key", key.expose())?);
        return Ok(());
    }
    let token = creds
        .vertex_token
        .current()
        .ok_or(GatewayError::MissingCredentials("vertex"))?;
    headers.push(header(
        "authorization",
        &format!("Bearer {}", token.expose()),
    )?);
    Ok(())
}

/// Where the route's surface creates caches (`cachedContents` of the API, or of the Vertex
/// project and location); pushes the credential header.
fn cache_path(
    target: &Target<'_>,
    creds: &Credentials,
    headers: &mut Vec<(http::HeaderName, http::HeaderValue)>,
) -> Result<String, GatewayError> {
    let base = &target.route.endpoint.base_path;
    let path = match target.route.kind {
        RouteKind::GeminiApi => format!("{base}/v1beta/cachedContents"),
        _ => format!(
            "{base}/v1/{}/cachedContents",
            vertex_location(target, creds)?
        ),
    };
    credential(target, creds, headers)?;
    Ok(path)
}

/// `projects/{p}/locations/{l}/publishers/google/models/{m}`: a Vertex model's resource name.
fn vertex_model(target: &Target<'_>, creds: &Credentials) -> Result<String, GatewayError> {
    Ok([
        &vertex_location(target, creds)?,
        "/publishers/google/models/",
        target.upstream_model(),
    ]
    .concat())
}

/// `projects/{p}/locations/{l}`: where the route's Vertex resources live.
fn vertex_location(target: &Target<'_>, creds: &Credentials) -> Result<String, GatewayError> {
    let project = creds
        .vertex_project
        .as_deref()
        .ok_or(GatewayError::MissingCredentials("vertex project"))?;
    let route = target.route;
    let location = match (route.kind, route.region.as_deref()) {
        (RouteKind::VertexGlobal, _) | (_, Some("global")) => "global",
        (_, Some(region)) => region,
        // Same default as the catalog's regional base URL.
        (_, None) => "us-central1",
    };
    Ok(["projects/", project, "/locations/", location].concat())
}

/// The tool-call id of the `k`-th call of the response `cx_id`, carrying `signature`.
fn mint_call_id(cx_id: &str, k: usize, signature: Option<&str>) -> String {
    use std::fmt::Write;
    let tail = cx_id.rsplit('-').next().unwrap_or(cx_id);
    let mut id = String::with_capacity(16 + tail.len() + signature.map_or(0, str::len));
    id.push_str("call_");
    id.extend(tail.chars().filter(char::is_ascii_alphanumeric));
    let _ = write!(id, "_{k}");
    if let Some(sig) = signature {
        id.push('.');
        id.extend(sig.chars().filter(|&c| c != '=').map(|c| match c {
            '+' => '-',
            '/' => '_',
            c => c,
        }));
    }
    id
}

/// The thought signature a minted tool-call id carries, as standard padded base64.
fn call_id_signature(id: &str) -> Option<String> {
    let (_, tail) = id.split_once('.')?;
    let url_safe = |c: char| c.is_ascii_alphanumeric() || c == '-' || c == '_';
    if tail.is_empty() || tail.len() % 4 == 1 || !tail.chars().all(url_safe) {
        return None;
    }
    let mut sig = String::with_capacity(tail.len() + 3);
    sig.extend(tail.chars().map(|c| match c {
        '-' => '+',
        '_' => '/',
        c => c,
    }));
    while !sig.len().is_multiple_of(4) {
        sig.push('=');
    }
    Some(sig)
}

/// Shared by the tests of every file here: fixtures, profiles, targets, frame parsing.
#[cfg(test)]
pub(super) mod test_support {
    use std::sync::Arc;

    use serde_json::{json, Value};

    use super::request;
    use super::Gemini;
    use crate::api::{GatewayError, Operation, RawRequest};
    use crate::catalog::{
        Endpoint, Family, Model, ModelKind, Pricing, Profile, Route, RouteKind, Thinking,
    };
    use crate::providers::{Adapter, ResponseCx, Target};

    pub use crate::providers::test_support::{fixture, frames};

    pub fn cx() -> ResponseCx {
        ResponseCx {
            id: Arc::from("chatcmpl-gw7"),
            model_id: Arc::from("google/gemini-test"),
            op: Operation::Chat,
            created: 1_700_000_000,
            exclude_reasoning: false,
        }
    }

    fn profile(forward: &[&str], thinking: Thinking) -> Profile {
        Profile {
            forward: forward.iter().map(|s| (*s).to_owned()).collect(),
            thinking,
            min_cache_tokens: 2048,
            dimensions: None,
        }
    }

    const COMMON: &[&str] = &[
        "temperature",
        "top_p",
        "top_k",
        "max_tokens",
        "stop",
        "n",
        "response_format",
        "tools",
        "service_tier",
    ];

    /// Like conf/catalog.yaml `gemini-2.0`: penalties and seed forwarded, no thinking.
    pub fn profile_20() -> Profile {
        let mut f = COMMON.to_vec();
        f.extend(["seed", "frequency_penalty", "presence_penalty"]);
        profile(&f, Thinking::None)
    }

    fn with_reasoning(thinking: Thinking) -> Profile {
        let mut f = COMMON.to_vec();
        f.push("reasoning");
        profile(&f, thinking)
    }

    /// Like `gemini-2.5-flash`: budget 1–24576, can be turned off; penalties and seed dropped.
    pub fn profile_25_flash() -> Profile {
        with_reasoning(Thinking::Budget {
            min: 1,
            max: 24576,
            can_disable: true,
        })
    }

    /// Like `gemini-2.5-pro`: budget 128–32768, never off.
    pub fn profile_25_pro() -> Profile {
        with_reasoning(Thinking::Budget {
            min: 128,
            max: 32768,
            can_disable: false,
        })
    }

    pub fn profile_levels(levels: &[&str]) -> Profile {
        with_reasoning(Thinking::Level {
            levels: levels.iter().map(|s| (*s).to_owned()).collect(),
        })
    }

    pub fn model(profile: Profile) -> Model {
        Model {
            id: Arc::from("google/gemini-test"),
            provider: "google".into(),
            family: Family::Gemini,
            kind: ModelKind::Chat,
            upstream_model: "gemini-test".into(),
            profile_name: "test".into(),
            profile: Arc::new(profile),
            pricing: Pricing::default(),
            capabilities: Vec::new(),
            aliases: Vec::new(),
            max_output_tokens: None,
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

    pub fn target<'a>(model: &'a Model, route: &'a Route, stream: bool) -> Target<'a> {
        Target {
            model,
            route,
            op: Operation::Chat,
            stream,
            max_cache_ttl: crate::providers::DEFAULT_MAX_CACHE_TTL,
            forward: &[],
        }
    }

    pub fn try_body(req: &Value, profile: Profile) -> Result<Value, GatewayError> {
        let bytes = serde_json::to_vec(req).unwrap();
        let raw = RawRequest::parse(&bytes, Operation::Chat)?;
        let t = request::translate(&raw, &profile)?;
        Ok(serde_json::from_slice(&request::whole_body(&t)?).unwrap())
    }

    pub fn body(req: Value, profile: Profile) -> Value {
        try_body(&req, profile).unwrap()
    }

    pub fn err(req: Value, profile: Profile) -> String {
        try_body(&req, profile).unwrap_err().to_string()
    }

    pub fn chat(messages: Value) -> Value {
        json!({"model": "google/gemini-test", "messages": messages})
    }

    pub fn with(extra: Value) -> Value {
        let mut req = chat(json!([{"role": "user", "content": "hi"}]));
        for (k, v) in extra.as_object().unwrap() {
            req[k] = v.clone();
        }
        req
    }

    /// The planned request's body (or, with `cached`, the body naming that cache) and its
    /// Vertex headers.
    pub fn built(
        req: &Value,
        m: &Model,
        kind: RouteKind,
        cached: Option<&str>,
    ) -> (Value, Vec<(String, String)>) {
        let bytes = serde_json::to_vec(req).unwrap();
        let raw = RawRequest::parse(&bytes, Operation::Chat).unwrap();
        let r = route(kind, Some("us-central1"));
        let t = target(m, &r, false);
        let creds = crate::providers::Credentials {
            gemini: Some(crate::providers::Secret::new("k")),
            vertex_project: Some("p".into()),
            ..Default::default()
        };
        creds
            .vertex_token
            .set(Some(crate::providers::Secret::new("t")));
        let (mut up, cache) = match Gemini.plan(&raw, &t, &creds).unwrap() {
            crate::providers::Plan::Proxy { request, cache } => (request, cache),
            other => panic!("chat must be one request: {other:?}"),
        };
        if let Some(name) = cached {
            up.body = (cache.expect("a cache step").body_using)(name);
        }
        let headers = up
            .headers
            .iter()
            .filter(|(k, _)| k.as_str().starts_with("x-vertex"))
            .map(|(k, v)| (k.to_string(), v.to_str().unwrap().to_owned()))
            .collect();
        (serde_json::from_slice(&up.body).unwrap(), headers)
    }

    /// The frames a whole upstream stream becomes, fed in pieces cut at `cuts`.
    pub fn run_stream(cx: ResponseCx, input: &[u8], cuts: &[usize]) -> Vec<u8> {
        crate::providers::test_support::run_stream(&Gemini, cx, input, cuts)
    }
}

#[cfg(test)]
mod tests {
    use super::test_support::*;
    use super::*;
    use crate::providers::{Secret, TokenCell};
    use std::sync::Arc;

    fn creds(gemini: bool, token: bool, project: bool) -> Credentials {
        let cell = TokenCell::default();
        if token {
            cell.set(Some(Secret::new("ya29.tok")));
        }
        Credentials {
            gemini: gemini.then(|| Secret::new("AIza-key")),
            vertex_token: Arc::new(cell),
            vertex_project: project.then(|| "proj-1".to_owned()),
            ..Credentials::default()
        }
    }

    fn headers(r: &UpstreamRequest) -> Vec<(String, String)> {
        r.headers
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_str().unwrap().to_owned()))
            .collect()
    }

    fn build(
        kind: RouteKind,
        region: Option<&str>,
        stream: bool,
        c: &Credentials,
    ) -> Result<UpstreamRequest, GatewayError> {
        let body =
            br#"{"model":"m","messages":[{"role":"user","content":"hi"}],"service_tier":"flex"}"#;
        let req = RawRequest::parse(body, Operation::Chat).unwrap();
        let m = model(profile_25_flash());
        let r = route(kind, region);
        let t = target(&m, &r, stream);
        Gemini
            .plan(&req, &t, c)
            .map(crate::providers::test_support::single)
    }

    #[test]
    fn developer_api_path_and_key() {
        let c = creds(true, true, true);
        let r = build(RouteKind::GeminiApi, None, false, &c).unwrap();
        assert_eq!(
            r.path,
            "/base/v1beta/models/gemini-test:generateContent?prettyPrint=false"
        );
        assert_eq!(
            headers(&r),
            [
                ("content-type".into(), "application/json".into()),
                ("x-goog-api-key".into(), "AIza-key".into())
            ],
            "no bearer token, no tier headers off Vertex global"
        );
        let r = build(RouteKind::GeminiApi, None, true, &c).unwrap();
        assert_eq!(
            r.path,
            "/base/v1beta/models/gemini-test:streamGenerateContent?alt=sse"
        );
        assert_eq!(
            build(RouteKind::GeminiApi, None, false, &creds(false, true, true)).unwrap_err(),
            GatewayError::MissingCredentials("gemini")
        );
    }

    #[test]
    fn vertex_paths_and_bearer_token() {
        let c = creds(true, true, true);
        let r = build(RouteKind::Vertex, Some("europe-west4"), false, &c).unwrap();
        assert_eq!(
            r.path,
            "/base/v1/projects/proj-1/locations/europe-west4/publishers/google/models/gemini-test:generateContent?prettyPrint=false"
        );
        let h = headers(&r);
        assert!(h.contains(&("authorization".into(), "Bearer ya29.tok".into())));
        assert!(
            !h.iter()
                .any(|(k, _)| k.starts_with("x-vertex") || k == "x-goog-api-key"),
            "flex is honoured on the global route kind only: {h:?}"
        );
        let r = build(RouteKind::Vertex, Some("global"), true, &c).unwrap();
        assert_eq!(
            r.path,
            "/base/v1/projects/proj-1/locations/global/publishers/google/models/gemini-test:streamGenerateContent?alt=sse"
        );
        let r = build(RouteKind::VertexGlobal, None, false, &c).unwrap();
        assert_eq!(
            r.path,
            "/base/v1/projects/proj-1/locations/global/publishers/google/models/gemini-test:generateContent?prettyPrint=false"
        );
        let h = headers(&r);
        assert!(h.contains(&("x-vertex-ai-llm-request-type".into(), "shared".into())));
        assert!(h.contains(&("x-vertex-ai-llm-shared-request-type".into(), "flex".into())));
    }

    #[test]
    fn vertex_missing_credentials() {
        for kind in [RouteKind::Vertex, RouteKind::VertexGlobal] {
            assert_eq!(
                build(kind, Some("us-central1"), false, &creds(true, true, false)).unwrap_err(),
                GatewayError::MissingCredentials("vertex project")
            );
            assert_eq!(
                build(kind, Some("us-central1"), false, &creds(true, false, true)).unwrap_err(),
                GatewayError::MissingCredentials("vertex")
            );
        }
    }

    #[test]
    fn embeddings_fan_out_and_chat_does_not() {
        let c = creds(true, true, true);
        let m = model(profile_25_flash());
        let r = route(RouteKind::GeminiApi, None);
        let mut t = target(&m, &r, false);
        let chat = RawRequest::parse(
            br#"{"model":"m","messages":[{"role":"user","content":"hi"}]}"#,
            Operation::Chat,
        )
        .unwrap();
        assert!(matches!(
            Gemini.plan(&chat, &t, &c).unwrap(),
            Plan::Proxy { .. }
        ));
        t.op = Operation::Embeddings;
        let req =
            RawRequest::parse(br#"{"model":"m","input":"x"}"#, Operation::Embeddings).unwrap();
        let Plan::FanOut(f) = Gemini.plan(&req, &t, &c).unwrap() else {
            panic!("embeddings fan out")
        };
        assert_eq!(f.calls.len(), 1);
        assert_eq!(
            f.calls[0].path,
            "/base/v1beta/models/gemini-test:batchEmbedContents?prettyPrint=false"
        );
    }

    #[test]
    fn call_ids_round_trip_signatures() {
        assert_eq!(mint_call_id("chatcmpl-Ab3x", 2, None), "call_Ab3x_2");
        let sig = "CiIB+/9a8w==";
        let id = mint_call_id("chatcmpl-Ab3x", 0, Some(sig));
        assert_eq!(id, "call_Ab3x_0.CiIB-_9a8w");
        assert_eq!(call_id_signature(&id).as_deref(), Some(sig));
        assert_eq!(call_id_signature("call_Ab3x_0"), None);
        assert_eq!(call_id_signature("tool.a+b"), None, "not url-safe base64");
        assert_eq!(call_id_signature("x."), None);
    }
}
