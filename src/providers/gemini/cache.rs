//! The explicit context cache a request could use (`docs/wire.md#gemini-context-caching`), as
//! a pure plan.
//!
//! OpenRouter's convention marks a cacheable prefix with `cache_control` on a text part
//! (`docs/wire.md#client-side-cache-markers`). Gemini caches are separate resources holding the
//! system instruction, tools and tool config; a request that names a cache must leave those
//! three out. So: if the first system message is in part form and one of its text parts carries
//! `cache_control`, the plan is to cache the whole system instruction plus tools and tool
//! config. The adapter turns it into the plan's cache step: create the cache with `create_body`
//! (or reuse one under the same `key`), then send the body that names it and leaves the cached
//! parts out (`request::naming_cache`).
//!
//! The key hashes the upstream model and the JSON of what is cached, each followed by a 0 byte,
//! so the conversation after the prefix never changes it. Its strings are written one way
//! first (`api::json::canonical_strings`): text is copied as the client wrote it, and `é`
//! written as `\u00e9` is the same prompt, so it must name the same cache. Keys stay in the
//! order written: the gateway's own in one order, a tool's schema in its client's (a client
//! that reorders a schema's keys gets a cache of its own). A model whose profile says
//! `min_cache_tokens: 0` never gets a plan; comparing `estimated_tokens` with the minimum is
//! the caller's decision.

use bytes::Bytes;
use sha2::{Digest, Sha256};

use super::request::{to_bytes, Translation};
use super::vertex_model;
use crate::api::json::{self, canonical_strings};
use crate::api::{GatewayError, Operation};
use crate::catalog::RouteKind;
use crate::providers::{Credentials, Target};

/// An explicit context cache the request could use: create it with `create_body` (POST to the
/// surface's `cachedContents`), then send the request naming it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CachePlan {
    /// Hex SHA-256 of the upstream model and the cached parts (system instruction, tools, tool
    /// config): equal keys can share one cache.
    pub key: String,
    /// The `cachedContents` create request.
    pub create_body: Bytes,
    /// Rough size of the cached prefix (bytes / 4), to compare with the profile's minimum.
    pub estimated_tokens: u32,
    /// How long the upstream keeps the cache (`cache_control.ttl`, default 300 s, at most
    /// `Target::max_cache_ttl`).
    pub ttl_seconds: u64,
}

/// The explicit cache for a translated request whose first system message marks a text part
/// with `cache_control` (OpenRouter convention), or `None`. Models whose profile sets
/// `min_cache_tokens: 0` never get one. `creds` supply the Vertex project of the model's
/// resource name (Vertex caches name the model by its full path).
pub(super) fn cache_plan(
    t: &Translation<'_>,
    target: &Target<'_>,
    creds: &Credentials,
) -> Result<Option<CachePlan>, GatewayError> {
    if target.op != Operation::Chat || target.model.profile.min_cache_tokens == 0 {
        return Ok(None);
    }
    let (Some(ttl), Some(system)) = (&t.cache_mark, &t.system) else {
        return Ok(None);
    };
    // Capped: the operator pays the upstream for the cache's storage.
    let ttl = ttl_seconds(ttl.as_deref())?.min(target.max_cache_ttl.as_secs().max(1));
    let model = match target.route.kind {
        RouteKind::GeminiApi => format!("models/{}", target.upstream_model()),
        _ => vertex_model(target, creds)?,
    };
    let system_json = to_bytes(system)?;
    let tools_json = t
        .tools
        .as_ref()
        .map(to_bytes)
        .transpose()?
        .unwrap_or_default();
    let config_json = t
        .tool_config
        .as_ref()
        .map(to_bytes)
        .transpose()?
        .unwrap_or_default();
    let mut hash = Sha256::new();
    hash.update(target.upstream_model().as_bytes());
    hash.update([0u8]);
    for piece in [&system_json, &tools_json, &config_json] {
        hash.update(
            canonical_strings(piece).map_err(|e| {
                GatewayError::Internal(format!("the context cache's key: {e}").into())
            })?,
        );
        hash.update([0u8]);
    }
    let system_bytes: usize = system.parts.iter().map(|p| p.text.written_len()).sum();
    let create = create_body(&model, &system_json, &tools_json, &config_json, ttl);
    Ok(Some(CachePlan {
        key: hex::encode(hash.finalize()),
        create_body: create,
        estimated_tokens: u32::try_from((system_bytes + tools_json.len()) / 4).unwrap_or(u32::MAX),
        ttl_seconds: ttl,
    }))
}

/// The `cachedContents` create request, from the cached parts already written (`tools` and
/// `config` empty when absent), without writing those parts twice: the bytes serde writes for
/// the struct `CreateCache` of the tests.
fn create_body(model: &str, system: &[u8], tools: &[u8], config: &[u8], ttl: u64) -> Bytes {
    let mut out = Vec::with_capacity(system.len() + tools.len() + config.len() + model.len() + 96);
    out.extend_from_slice(br#"{"model":"#);
    json::string(&mut out, model);
    out.extend_from_slice(br#","systemInstruction":"#);
    out.extend_from_slice(system);
    for (name, piece) in [
        (&br#","tools":"#[..], tools),
        (br#","toolConfig":"#, config),
    ] {
        if !piece.is_empty() {
            out.extend_from_slice(name);
            out.extend_from_slice(piece);
        }
    }
    out.extend_from_slice(br#","ttl":""#);
    out.extend_from_slice(itoa::Buffer::new().format(ttl).as_bytes());
    out.extend_from_slice(br#"s"}"#);
    Bytes::from(out)
}

/// `cache_control.ttl` in seconds: `"5m"`, `"1h"`, `"300s"` or a bare number of seconds;
/// absent → 300 (Anthropic's and OpenRouter's default).
fn ttl_seconds(ttl: Option<&str>) -> Result<u64, GatewayError> {
    let Some(ttl) = ttl else { return Ok(300) };
    let (digits, unit) = match ttl.strip_suffix(['s', 'm', 'h']) {
        Some(d) => (d, &ttl[d.len()..]),
        None => (ttl, "s"),
    };
    let n: u64 = digits.parse().map_err(|_| {
        GatewayError::invalid(format!("invalid value for cache_control.ttl: {ttl:?}"))
    })?;
    let scale = match unit {
        "m" => 60,
        "h" => 3600,
        _ => 1,
    };
    Ok(n.saturating_mul(scale))
}

#[cfg(test)]
mod tests {
    use super::super::request::{translate, SystemInstruction, ToolConfig, ToolOut};
    use super::super::test_support::*;
    use super::*;
    use crate::api::RawRequest;
    use crate::catalog::{Model, Profile};
    use serde_json::{json, Value};

    fn cacheable() -> Value {
        json!({
            "model": "google/gemini-test",
            "messages": [
                {"role": "system", "content": [
                    {"type": "text", "text": "You are a librarian. "},
                    {"type": "text", "text": "BIG STABLE CORPUS", "cache_control": {"type": "ephemeral", "ttl": "1h"}}
                ]},
                {"role": "system", "content": "Answer in French."},
                {"role": "user", "content": "Who wrote it?"}
            ],
            "tools": [{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}],
            "tool_choice": "auto",
            "temperature": 0.2
        })
    }

    #[test]
    fn cached_content_leaves_out_what_the_cache_holds() {
        let mut profile = profile_25_flash();
        profile.min_cache_tokens = 1;
        let m = model(profile);
        let (b, _) = built(
            &cacheable(),
            &m,
            RouteKind::GeminiApi,
            Some("cachedContents/abc"),
        );
        assert_eq!(
            b,
            json!({
                "cachedContent": "cachedContents/abc",
                "contents": [{"role": "user", "parts": [{"text": "Who wrote it?"}]}],
                "generationConfig": {"temperature": 0.2}
            })
        );
        let (b, _) = built(&cacheable(), &m, RouteKind::GeminiApi, None);
        assert!(
            b.get("systemInstruction").is_some()
                && b.get("tools").is_some()
                && b.get("toolConfig").is_some()
        );
    }

    fn plan(req: &Value, m: &Model, kind: RouteKind) -> Result<Option<CachePlan>, GatewayError> {
        plan_of(&serde_json::to_vec(req).unwrap(), m, kind)
    }

    /// [`plan`] of a body as written.
    fn plan_of(
        bytes: &[u8],
        m: &Model,
        kind: RouteKind,
    ) -> Result<Option<CachePlan>, GatewayError> {
        let raw = RawRequest::parse(bytes, Operation::Chat).unwrap();
        let t = translate(&raw, &m.profile)?;
        let r = route(kind, Some("europe-west4"));
        let creds = Credentials {
            vertex_project: Some("proj-9".into()),
            ..Default::default()
        };
        cache_plan(&t, &target(m, &r, false), &creds)
    }

    #[derive(serde::Serialize)]
    #[serde(rename_all = "camelCase")]
    struct CreateCache<'p, 'a> {
        model: &'p str,
        system_instruction: &'p SystemInstruction<'a>,
        #[serde(skip_serializing_if = "Option::is_none")]
        tools: Option<&'p [ToolOut<'a>; 1]>,
        #[serde(skip_serializing_if = "Option::is_none")]
        tool_config: Option<&'p ToolConfig<'a>>,
        ttl: String,
    }

    #[test]
    fn the_create_body_is_what_serde_writes_for_it() {
        let m = model(profile_25_flash());
        let mut without_tools = cacheable();
        without_tools.as_object_mut().unwrap().remove("tools");
        without_tools.as_object_mut().unwrap().remove("tool_choice");
        for req in [cacheable(), without_tools] {
            let bytes = serde_json::to_vec(&req).unwrap();
            let raw = RawRequest::parse(&bytes, Operation::Chat).unwrap();
            let t = translate(&raw, &m.profile).unwrap();
            let r = route(RouteKind::GeminiApi, None);
            let p = cache_plan(&t, &target(&m, &r, false), &Credentials::default())
                .unwrap()
                .unwrap();
            let serde = serde_json::to_vec(&CreateCache {
                model: "models/gemini-test",
                system_instruction: t.system.as_ref().unwrap(),
                tools: t.tools.as_ref(),
                tool_config: t.tool_config.as_ref(),
                ttl: "3600s".into(),
            })
            .unwrap();
            assert_eq!(
                String::from_utf8_lossy(&p.create_body),
                String::from_utf8_lossy(&serde)
            );
        }
    }

    #[test]
    fn a_long_ttl_is_capped() {
        let m = model(profile_25_flash());
        let mut year = cacheable();
        year["messages"][0]["content"][1]["cache_control"]["ttl"] = json!("8760h");
        let bytes = serde_json::to_vec(&year).unwrap();
        let raw = RawRequest::parse(&bytes, Operation::Chat).unwrap();
        let t = translate(&raw, &m.profile).unwrap();
        let r = route(RouteKind::GeminiApi, None);
        let mut target = target(&m, &r, false);
        let p = cache_plan(&t, &target, &Credentials::default())
            .unwrap()
            .unwrap();
        assert_eq!(p.ttl_seconds, 3600, "a year asked, an hour by default");
        target.max_cache_ttl = std::time::Duration::from_secs(600);
        let p = cache_plan(&t, &target, &Credentials::default())
            .unwrap()
            .unwrap();
        assert_eq!(p.ttl_seconds, 600);
        let create: Value = serde_json::from_slice(&p.create_body).unwrap();
        assert_eq!(
            create["ttl"], "600s",
            "the upstream is asked for the capped TTL"
        );
    }

    #[test]
    fn cache_plan_for_a_marked_system_prefix() {
        let m = model(profile_25_flash());
        let p = plan(&cacheable(), &m, RouteKind::GeminiApi)
            .unwrap()
            .unwrap();
        let create: Value = serde_json::from_slice(&p.create_body).unwrap();
        let system = json!({"parts": [{"text": "You are a librarian. "}, {"text": "BIG STABLE CORPUS"}, {"text": "Answer in French."}]});
        let tools = json!([{"functionDeclarations": [{"name": "lookup", "parametersJsonSchema": {"type": "object"}}]}]);
        let tool_config = json!({"functionCallingConfig": {"mode": "AUTO"}});
        assert_eq!(
            create,
            json!({"model": "models/gemini-test", "systemInstruction": system, "tools": tools, "toolConfig": tool_config, "ttl": "3600s"})
        );
        let mut hash = Sha256::new();
        for piece in [
            "gemini-test".to_owned(),
            system.to_string(),
            tools.to_string(),
            tool_config.to_string(),
        ] {
            hash.update(piece.as_bytes());
            hash.update([0u8]);
        }
        assert_eq!(p.key, hex::encode(hash.finalize()));
        let system_bytes = "You are a librarian. BIG STABLE CORPUSAnswer in French.".len();
        assert_eq!(
            p.estimated_tokens as usize,
            (system_bytes + tools.to_string().len()) / 4
        );

        let vertex = plan(&cacheable(), &m, RouteKind::Vertex).unwrap().unwrap();
        let create: Value = serde_json::from_slice(&vertex.create_body).unwrap();
        assert_eq!(
            create["model"],
            "projects/proj-9/locations/europe-west4/publishers/google/models/gemini-test"
        );
        assert_eq!(
            vertex.key, p.key,
            "the key names the content, not the surface"
        );

        let mut other_tools = cacheable();
        other_tools["tools"][0]["function"]["name"] = json!("search");
        assert_ne!(
            plan(&other_tools, &m, RouteKind::GeminiApi)
                .unwrap()
                .unwrap()
                .key,
            p.key
        );
        let mut later_user = cacheable();
        later_user["messages"][2]["content"] = json!("Something else?");
        assert_eq!(
            plan(&later_user, &m, RouteKind::GeminiApi)
                .unwrap()
                .unwrap()
                .key,
            p.key,
            "the conversation is not in the key"
        );
    }

    #[test]
    fn the_key_names_the_prompt_however_its_text_is_escaped() {
        let m = model(profile_25_flash());
        let key = |body: String| {
            plan_of(body.as_bytes(), &m, RouteKind::GeminiApi)
                .unwrap()
                .unwrap()
                .key
        };
        let plain = cacheable().to_string();
        assert!(plain.contains("BIG STABLE CORPUS"));
        let written = |corpus: &str| plain.replace("BIG STABLE CORPUS", corpus);
        assert_eq!(
            key(written("caf\\u00e9 \\\"menu\\\"")),
            key(written("café \\\"menu\\\"")),
            "an escape is the character it stands for"
        );
        assert_eq!(key(written("a\\/b")), key(written("a/b")));
        assert_ne!(key(written("cafe")), key(written("café")));
    }

    #[test]
    fn cache_plan_ttl_and_absence() {
        let m = model(profile_25_flash());
        let ttl_of = |ttl: Value| {
            let mut req = cacheable();
            req["messages"][0]["content"][1]["cache_control"] = ttl;
            plan(&req, &m, RouteKind::GeminiApi).map(|p| {
                let v: Value = serde_json::from_slice(&p.unwrap().create_body).unwrap();
                v["ttl"].clone()
            })
        };
        assert_eq!(ttl_of(json!({"type": "ephemeral"})).unwrap(), "300s");
        assert_eq!(
            ttl_of(json!({"type": "ephemeral", "ttl": "5m"})).unwrap(),
            "300s"
        );
        assert_eq!(
            ttl_of(json!({"type": "ephemeral", "ttl": "90s"})).unwrap(),
            "90s"
        );
        assert!(ttl_of(json!({"type": "ephemeral", "ttl": "soon"}))
            .unwrap_err()
            .to_string()
            .contains("cache_control.ttl"));

        let mut string_system = cacheable();
        string_system["messages"][0]["content"] = json!("You are a librarian.");
        let mut unmarked = cacheable();
        unmarked["messages"][0]["content"][1]
            .as_object_mut()
            .unwrap()
            .remove("cache_control");
        let mut marked_second = unmarked.clone();
        marked_second["messages"][1]["content"] =
            json!([{"type": "text", "text": "x", "cache_control": {"type": "ephemeral"}}]);
        let mut no_system = cacheable();
        no_system["messages"].as_array_mut().unwrap().drain(..2);
        for req in [string_system, unmarked, marked_second, no_system] {
            assert_eq!(plan(&req, &m, RouteKind::GeminiApi).unwrap(), None, "{req}");
        }
        let off = model(Profile {
            min_cache_tokens: 0,
            ..profile_25_flash()
        });
        assert_eq!(
            plan(&cacheable(), &off, RouteKind::GeminiApi).unwrap(),
            None
        );
        let no_tools = model(Profile {
            forward: vec![],
            ..profile_25_flash()
        });
        let p = plan(&cacheable(), &no_tools, RouteKind::GeminiApi)
            .unwrap()
            .unwrap();
        let create: Value = serde_json::from_slice(&p.create_body).unwrap();
        assert!(create.get("tools").is_none() && create.get("toolConfig").is_none());
        let e = plan(&cacheable(), &m, RouteKind::Vertex);
        assert!(e.is_ok());
        let bytes = serde_json::to_vec(&cacheable()).unwrap();
        let raw = RawRequest::parse(&bytes, Operation::Chat).unwrap();
        let t = translate(&raw, &m.profile).unwrap();
        let r = route(RouteKind::VertexGlobal, None);
        assert_eq!(
            cache_plan(&t, &target(&m, &r, false), &Credentials::default()).unwrap_err(),
            GatewayError::MissingCredentials("vertex project")
        );
    }
}
