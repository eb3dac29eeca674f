//! A chat request's input tokens, counted by the surface's `:countTokens` (the Messages door's
//! `count_tokens` on a Gemini route; `docs/wire.md#gemini-counting-tokens`). The request is
//! translated exactly as for `generateContent` (`request.rs`), so the count is of what would
//! be sent:
//!
//! - Developer API: `POST {base}/v1beta/models/{m}:countTokens` with
//!   `{"generateContentRequest": {"model": "models/{m}", …the generateContent body…}}` (the
//!   generation and tool config included: thinking and tools can change the count);
//! - Vertex: `POST …/publishers/google/models/{m}:countTokens` with `contents`,
//!   `systemInstruction` and `tools` at the top level (Vertex's count request has no tool
//!   config, and the generation config counts nothing);
//! - both answer `{"totalTokens": N, …}`; proto3 JSON leaves a zero out, so an answer without
//!   it counts 0.

use bytes::Bytes;
use serde::Deserialize;

use super::{header, request, transport};
use crate::api::{GatewayError, RawRequest};
use crate::catalog::RouteKind;
use crate::providers::{Credentials, Target, TranslateError, UpstreamRequest};

/// The `countTokens` call counting `req` (an OpenAI chat body) on the route's surface.
pub(super) fn request(
    req: &RawRequest<'_>,
    target: &Target<'_>,
    creds: &Credentials,
) -> Result<UpstreamRequest, GatewayError> {
    let t = request::translate(req, &target.model.profile)?;
    let mut headers = vec![header("content-type", "application/json")?];
    let path = transport(target, creds, "countTokens", &mut headers)?;
    let body = match target.route.kind {
        RouteKind::GeminiApi => developer_body(target.upstream_model(), &request::whole_body(&t)?),
        _ => request::prompt_body(&t)?,
    };
    Ok(UpstreamRequest {
        path,
        headers,
        body,
    })
}

/// `{"generateContentRequest":{"model":"models/{model}",…}}` around a `generateContent` body
/// (an object whose first field is `contents`, so never empty).
fn developer_body(model: &str, generate: &[u8]) -> Bytes {
    let name = format!("models/{model}");
    let mut out = Vec::with_capacity(generate.len() + name.len() + 48);
    out.extend_from_slice(br#"{"generateContentRequest":{"model":"#);
    crate::api::json::string(&mut out, &name);
    out.push(b',');
    out.extend_from_slice(generate.get(1..).unwrap_or_default());
    out.push(b'}');
    Bytes::from(out)
}

/// The `totalTokens` of a `countTokens` answer.
pub(super) fn read(body: &[u8]) -> Result<u64, TranslateError> {
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Count {
        #[serde(default)]
        total_tokens: u64,
    }
    // serde would read a struct from an array too.
    if !body.trim_ascii_start().starts_with(b"{") {
        return Err(TranslateError::Shape(
            "countTokens answer: expected a JSON object".into(),
        ));
    }
    serde_json::from_slice::<Count>(body)
        .map(|c| c.total_tokens)
        .map_err(|e| TranslateError::Shape(format!("countTokens answer: {e}")))
}

#[cfg(test)]
mod tests {
    use serde_json::{json, Value};

    use super::super::test_support::*;
    use super::super::Gemini;
    use crate::api::{GatewayError, Operation, RawRequest};
    use crate::catalog::RouteKind;
    use crate::providers::{Adapter, Credentials, Secret, TranslateError, UpstreamRequest};

    fn creds() -> Credentials {
        let c = Credentials {
            gemini: Some(Secret::new("AIza-key")),
            vertex_project: Some("proj-1".into()),
            ..Credentials::default()
        };
        c.vertex_token.set(Some(Secret::new("ya29.tok")));
        c
    }

    fn count(
        req: &Value,
        kind: RouteKind,
        c: &Credentials,
    ) -> Result<UpstreamRequest, GatewayError> {
        let bytes = serde_json::to_vec(req).unwrap();
        let raw = RawRequest::parse(&bytes, Operation::Chat)?;
        let m = model(profile_25_flash());
        let r = route(kind, Some("europe-west4"));
        Gemini.count_tokens(&raw, &target(&m, &r, false), c)
    }

    fn request() -> Value {
        json!({
            "model": "google/gemini-test",
            "messages": [
                {"role": "system", "content": "be brief"},
                {"role": "user", "content": "hi"}
            ],
            "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}],
            "tool_choice": "required",
            "max_tokens": 50,
            "stream": true
        })
    }

    #[test]
    fn developer_api_wraps_the_generate_body() {
        let up = count(&request(), RouteKind::GeminiApi, &creds()).unwrap();
        assert_eq!(
            up.path,
            "/base/v1beta/models/gemini-test:countTokens?prettyPrint=false"
        );
        assert!(up
            .headers
            .iter()
            .any(|(k, v)| k == "x-goog-api-key" && v == "AIza-key"));
        let body: Value = serde_json::from_slice(&up.body).unwrap();
        let keys: Vec<&String> = body.as_object().unwrap().keys().collect();
        assert_eq!(keys, ["generateContentRequest"]);
        // Exactly what generateContent would have been sent, with the model named.
        let mut generate = super::super::test_support::body(request(), profile_25_flash());
        generate["model"] = json!("models/gemini-test");
        assert_eq!(body["generateContentRequest"], generate);
        let g = &body["generateContentRequest"];
        assert_eq!(g["systemInstruction"]["parts"][0]["text"], "be brief");
        assert_eq!(
            g["contents"],
            json!([{"role": "user", "parts": [{"text": "hi"}]}])
        );
        assert_eq!(g["toolConfig"]["functionCallingConfig"]["mode"], "ANY");
        assert_eq!(g["generationConfig"]["maxOutputTokens"], 50);
    }

    #[test]
    fn vertex_takes_the_prompt_at_the_top() {
        let up = count(&request(), RouteKind::Vertex, &creds()).unwrap();
        assert_eq!(
            up.path,
            "/base/v1/projects/proj-1/locations/europe-west4/publishers/google/models/gemini-test:countTokens?prettyPrint=false"
        );
        assert!(up
            .headers
            .iter()
            .any(|(k, v)| k == "authorization" && v == "Bearer ya29.tok"));
        let body: Value = serde_json::from_slice(&up.body).unwrap();
        let mut keys: Vec<&String> = body.as_object().unwrap().keys().collect();
        keys.sort();
        assert_eq!(keys, ["contents", "systemInstruction", "tools"]);
        assert_eq!(
            body["contents"],
            json!([{"role": "user", "parts": [{"text": "hi"}]}])
        );
        assert_eq!(
            body["tools"][0]["functionDeclarations"][0]["name"], "f",
            "{body}"
        );
        let up = count(&request(), RouteKind::VertexGlobal, &creds()).unwrap();
        assert!(up.path.contains("/locations/global/"), "{}", up.path);
    }

    #[test]
    fn refusals_and_credentials() {
        let no_user = json!({"model": "m", "messages": [{"role": "system", "content": "x"}]});
        assert!(matches!(
            count(&no_user, RouteKind::GeminiApi, &creds()),
            Err(GatewayError::InvalidRequest(_))
        ));
        assert_eq!(
            count(&request(), RouteKind::GeminiApi, &Credentials::default()).unwrap_err(),
            GatewayError::MissingCredentials("gemini")
        );
    }

    #[test]
    fn reads_total_tokens() {
        assert_eq!(
            Gemini.read_count(&fixture("gemini-count-tokens.json")),
            Ok(5)
        );
        assert_eq!(
            Gemini.read_count(br#"{"totalTokens": 31, "totalBillableCharacters": 90}"#),
            Ok(31)
        );
        assert_eq!(Gemini.read_count(b"{}"), Ok(0), "proto3 leaves a zero out");
        assert!(matches!(
            Gemini.read_count(br#"{"totalTokens": "x"}"#),
            Err(TranslateError::Shape(_))
        ));
        assert!(matches!(
            Gemini.read_count(b"[1]"),
            Err(TranslateError::Shape(_))
        ));
    }
}
