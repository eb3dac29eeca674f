//! Vertex AI surface: `/{v1|v1beta1}/projects/{p}/locations/{l}/publishers/{google|anthropic}/
//! models/{m}:{method}` and `…/locations/{l}/cachedContents[/{id}]`. Authenticates with the
//! simulator's own OAuth tokens (`oauth.rs`), derives the service tier from the request
//! headers, and hands Gemini work to `gemini.rs` and Claude work to `anthropic.rs`.
//!
//! Rules:
//! - every route needs `Authorization: Bearer <issued token>` (401/403 Google bodies); with
//!   `--vertex-project P` other projects get fixture `gemini-error-403-permission-denied-vertex.json`;
//! - `location` may be a region or `global`;
//! - Claude's token counting is `…/publishers/anthropic/models/count-tokens:rawPredict` with
//!   the model (its Vertex id) in the body, as Google's "Count tokens for Claude models"
//!   describes it
//!   (<https://cloud.google.com/vertex-ai/generative-ai/docs/partner-models/claude/count-tokens>);
//!   the body rules are `anthropic.rs`'s;
//! - service tiers (`docs/wire.md#gemini-service-tiers`): `X-Vertex-AI-LLM-Request-Type:
//!   dedicated` → `PROVISIONED_THROUGHPUT`; on the `global` location
//!   `X-Vertex-AI-LLM-Shared-Request-Type: flex|priority` → `ON_DEMAND_FLEX` /
//!   `ON_DEMAND_PRIORITY`; everything else (including those headers on a regional location,
//!   `shared` alone, or a body `serviceTier`) → `ON_DEMAND`. The value lands in
//!   `usageMetadata.trafficType` (buffered; in streams every chunk carries `{trafficType}` and
//!   only the last one the counts — fixture `gemini-stream-thinking-2.5-flash-vertex.sse`);
//! - model ids: what the registry (`models.rs`) serves on Vertex, else the publisher-model 404
//!   (an undated Claude 4.5 id included);
//! - `:predict` embeddings (text-embedding-005, text-multilingual-embedding-002,
//!   gemini-embedding-001): `instances[]` of
//!   `{content, task_type?, title?}`, `parameters{outputDimensionality?, autoTruncate?}`, at most
//!   250 instances (1 for gemini-embedding-001) and 20,000 tokens, 2,048 tokens per input
//!   (truncated unless `autoTruncate: false`); answer shaped like fixture
//!   `vertex-embedding-predict.json` (`predictions[].embeddings{values, statistics{token_count,
//!   truncated}}`, `metadata.billableCharacterCount` = non-whitespace characters). The limit
//!   error wordings are not captured anywhere and are best effort.

use std::sync::atomic::Ordering;

use axum::response::Response;
use bytes::Bytes;
use serde::Serialize;
use serde_json::Value;

use crate::content::{self, tok, Markers};
use crate::faults::Surface;
use crate::fixtures;
use crate::gemini::{self, GenApi, VertexInfo};
use crate::models::Kind;
use crate::oauth;
use crate::record::Route;
use crate::respond::{self, JSON_GOOGLE};
use crate::{anthropic, Req, Sim};

/// The pseudo-model of Claude's token counting on Vertex:
/// `…/publishers/anthropic/models/count-tokens:rawPredict`, the model named in the body.
pub const CLAUDE_COUNT: &str = "count-tokens";

pub struct VPath<'a> {
    pub version: &'a str,
    pub project: &'a str,
    pub location: &'a str,
    pub kind: VKind<'a>,
}

pub enum VKind<'a> {
    Model {
        publisher: &'a str,
        model: &'a str,
        method: &'a str,
    },
    Cache {
        id: Option<&'a str>,
    },
}

/// Parses a Vertex path, `None` when it is not one.
pub fn parse(path: &str) -> Option<VPath<'_>> {
    let mut segs = path.strip_prefix('/')?.split('/');
    let version = segs.next()?;
    if version != "v1" && version != "v1beta1" {
        return None;
    }
    if segs.next()? != "projects" {
        return None;
    }
    let project = segs.next()?;
    if segs.next()? != "locations" {
        return None;
    }
    let location = segs.next()?;
    let kind = match segs.next()? {
        "publishers" => {
            let publisher = segs.next()?;
            if segs.next()? != "models" {
                return None;
            }
            let (model, method) = segs.next()?.split_once(':')?;
            VKind::Model {
                publisher,
                model,
                method,
            }
        }
        "cachedContents" => VKind::Cache { id: segs.next() },
        _ => return None,
    };
    if segs.next().is_some() {
        return None;
    }
    Some(VPath {
        version,
        project,
        location,
        kind,
    })
}

impl VPath<'_> {
    pub fn route(&self) -> Route {
        match &self.kind {
            VKind::Cache { .. } => Route::VertexCache,
            VKind::Model {
                publisher,
                model,
                method,
            } => match (*publisher, *method) {
                ("google", "generateContent") => Route::VertexGenerate,
                ("google", "streamGenerateContent") => Route::VertexStream,
                ("google", "countTokens") => Route::VertexCountTokens,
                ("google", "predict") => Route::VertexPredict,
                ("anthropic", "rawPredict") if *model == CLAUDE_COUNT => {
                    Route::VertexClaudeCountTokens
                }
                ("anthropic", "rawPredict") => Route::VertexClaude,
                ("anthropic", "streamRawPredict") => Route::VertexClaudeStream,
                _ => Route::Unknown,
            },
        }
    }

    fn rpc(&self) -> String {
        let m = match &self.kind {
            VKind::Cache { .. } => "GenAiCacheService.CreateCachedContent",
            VKind::Model { method, .. } => match *method {
                "generateContent" => "PredictionService.GenerateContent",
                "streamGenerateContent" => "PredictionService.StreamGenerateContent",
                "countTokens" => "LlmUtilityService.CountTokens",
                "rawPredict" => "PredictionService.RawPredict",
                "streamRawPredict" => "PredictionService.StreamRawPredict",
                _ => "PredictionService.Predict",
            },
        };
        format!("google.cloud.aiplatform.{}.{m}", self.version)
    }
}

/// The `trafficType` a request is billed under.
pub fn traffic_type(sim: &Sim, req: &Req, location: &str) -> &'static str {
    let header = |n: &str| {
        req.headers
            .get(n)
            .and_then(|v| v.to_str().ok())
            .map(|s| s.trim().to_ascii_lowercase())
    };
    if header("x-vertex-ai-llm-request-type").as_deref() == Some("dedicated") {
        return "PROVISIONED_THROUGHPUT";
    }
    if location != "global" {
        return "ON_DEMAND";
    }
    match header("x-vertex-ai-llm-shared-request-type").as_deref() {
        Some("flex") => {
            sim.stats.vertex_flex.fetch_add(1, Ordering::Relaxed);
            "ON_DEMAND_FLEX"
        }
        Some("priority") => {
            sim.stats.vertex_priority.fetch_add(1, Ordering::Relaxed);
            "ON_DEMAND_PRIORITY"
        }
        _ => "ON_DEMAND",
    }
}

pub fn handle(sim: &Sim, req: &Req, vp: &VPath) -> Response {
    if let Err(e) = sim.tokens.check(req.headers) {
        return oauth::bearer_error(e, &vp.rpc());
    }
    if let Some(p) = &sim.cfg.vertex_project {
        if p != vp.project {
            let resource = match &vp.kind {
                VKind::Model {
                    publisher, model, ..
                } => format!(
                    "projects/{}/locations/{}/publishers/{publisher}/models/{model}",
                    vp.project, vp.location
                ),
                VKind::Cache { .. } => format!("projects/{}/locations/{}", vp.project, vp.location),
            };
            return fixtures::vertex_403_iam(&resource);
        }
    }
    match &vp.kind {
        VKind::Cache { id } => {
            let parent = format!("projects/{}/locations/{}/", vp.project, vp.location);
            gemini::cache_admin(sim, req, &parent, *id, true)
        }
        VKind::Model {
            publisher: "google",
            model,
            method,
        } => {
            let api = GenApi {
                version: vp.version,
                vertex: Some(VertexInfo {
                    project: vp.project,
                    location: vp.location,
                    traffic_type: traffic_type(sim, req, vp.location),
                }),
            };
            match *method {
                "generateContent" => gemini::generate(sim, req, &api, model, false),
                "streamGenerateContent" => gemini::generate(sim, req, &api, model, true),
                "countTokens" => gemini::count_tokens(sim, req, &api, model),
                "predict" => predict(sim, req, vp, model),
                _ => fixtures::google_error(404, "NOT_FOUND", "Method not found.", Vec::new()),
            }
        }
        VKind::Model {
            publisher: "anthropic",
            model: CLAUDE_COUNT,
            method,
        } => match *method {
            "rawPredict" => anthropic::handle_vertex_count(sim, req, vp.project, vp.location),
            _ => fixtures::google_error(404, "NOT_FOUND", "Method not found.", Vec::new()),
        },
        VKind::Model {
            publisher: "anthropic",
            model,
            ..
        } if sim.models.claude(Surface::AnthropicVertex, model).is_none() => {
            fixtures::vertex_model_not_found(vp.project, vp.location, "anthropic", model)
        }
        VKind::Model {
            publisher: "anthropic",
            model,
            method,
        } => match *method {
            "rawPredict" => anthropic::handle_vertex(sim, req, model, false),
            "streamRawPredict" => anthropic::handle_vertex(sim, req, model, true),
            _ => fixtures::google_error(404, "NOT_FOUND", "Method not found.", Vec::new()),
        },
        VKind::Model {
            publisher, model, ..
        } => fixtures::vertex_model_not_found(vp.project, vp.location, publisher, model),
    }
}

#[derive(Serialize)]
struct Statistics {
    token_count: u64,
    truncated: bool,
}

#[derive(Serialize)]
struct Embeddings {
    values: Vec<f32>,
    statistics: Statistics,
}

#[derive(Serialize)]
struct Prediction {
    embeddings: Embeddings,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Metadata {
    billable_character_count: u64,
}

#[derive(Serialize)]
struct PredictResp {
    predictions: Vec<Prediction>,
    metadata: Metadata,
}

const MAX_INPUT_TOKENS: u64 = 2048;

fn predict(sim: &Sim, req: &Req, vp: &VPath, model: &str) -> Response {
    match predict_inner(sim, req, vp, model) {
        Ok(r) | Err(r) => r,
    }
}

fn predict_inner(sim: &Sim, req: &Req, vp: &VPath, model: &str) -> Result<Response, Response> {
    let v = gemini::parse_body(req.body)?;
    let instances: Vec<&Value> = v
        .get("instances")
        .and_then(Value::as_array)
        .map(|a| a.iter().collect())
        .unwrap_or_default();
    let mut markers = Markers::default();
    for i in &instances {
        if let Some(t) = i.get("content").and_then(Value::as_str) {
            markers.scan_into(t);
        }
    }
    let fault = sim.pick_fault(&markers, Surface::Vertex);
    if let Some(r) = fault
        .as_ref()
        .and_then(|f| gemini::google_status_fault(f, true))
    {
        return Ok(respond::with_latency(r, markers.latency_ms));
    }
    if sim
        .models
        .google(Surface::Vertex, model, Kind::Embedding)
        .is_none()
    {
        return Err(fixtures::vertex_model_not_found(
            vp.project,
            vp.location,
            "google",
            model,
        ));
    }
    if instances.is_empty() {
        return Err(fixtures::invalid_argument(
            "The instances field is empty or missing.",
        ));
    }
    let max = if model.starts_with("gemini-embedding") {
        1
    } else {
        250
    };
    if instances.len() > max {
        return Err(fixtures::invalid_argument(&format!(
            "Unable to submit request because the instances count {} exceeds the maximum instances count {max} for {model}.",
            instances.len()
        )));
    }
    let params = v.get("parameters").and_then(Value::as_object);
    let auto_truncate = params
        .and_then(|p| p.get("autoTruncate"))
        .and_then(Value::as_bool)
        .unwrap_or(true);
    let full = gemini::embedding_width(model);
    let dims = params
        .and_then(|p| p.get("outputDimensionality"))
        .and_then(Value::as_u64)
        .filter(|d| *d > 0)
        .map_or(full, |d| (d as usize).min(full));
    let mut predictions = Vec::with_capacity(instances.len());
    let mut billable = 0u64;
    let mut total = 0u64;
    for (i, inst) in instances.iter().enumerate() {
        let text = inst.get("content").and_then(Value::as_str).ok_or_else(|| {
            fixtures::invalid_argument(&format!(
                "instances[{i}].content is required and must be a string."
            ))
        })?;
        if let Some(t) = inst.get("task_type").or_else(|| inst.get("taskType")) {
            let ok = t.as_str().is_some_and(|s| {
                [
                    "RETRIEVAL_QUERY",
                    "RETRIEVAL_DOCUMENT",
                    "SEMANTIC_SIMILARITY",
                    "CLASSIFICATION",
                    "CLUSTERING",
                    "QUESTION_ANSWERING",
                    "FACT_VERIFICATION",
                    "CODE_RETRIEVAL_QUERY",
                ]
                .contains(&s)
            });
            if !ok {
                return Err(fixtures::invalid_argument(&format!(
                    "Invalid task type: {t}"
                )));
            }
        }
        let mut tokens = tok(text.len());
        let mut truncated = false;
        let mut used = text;
        if tokens > MAX_INPUT_TOKENS {
            if !auto_truncate {
                return Err(fixtures::invalid_argument(&format!(
                    "Unable to submit request because the input token count is {tokens} but the model supports up to {MAX_INPUT_TOKENS}. Reduce the input token count and try again. You can also use the CountTokens API to calculate prompt token count and billable characters."
                )));
            }
            used = content::cap_tokens(text, MAX_INPUT_TOKENS).0;
            tokens = MAX_INPUT_TOKENS;
            truncated = true;
        }
        total += tokens;
        billable += text.chars().filter(|c| !c.is_whitespace()).count() as u64;
        predictions.push(Prediction {
            embeddings: Embeddings {
                values: content::embedding(used, full, dims),
                statistics: Statistics {
                    token_count: tokens,
                    truncated,
                },
            },
        });
    }
    if total > 20_000 {
        return Err(fixtures::invalid_argument(&format!(
            "Unable to submit request because the input token count is {total} but the model supports up to 20000. Reduce the input token count and try again."
        )));
    }
    let resp = PredictResp {
        predictions,
        metadata: Metadata {
            billable_character_count: billable,
        },
    };
    let body = serde_json::to_vec_pretty(&resp).map_err(|e| respond::internal(&e.to_string()))?;
    Ok(respond::with_latency(
        crate::buffered_with_fault(Bytes::from(body), JSON_GOOGLE, fault.as_ref(), || {
            fixtures::gemini_500(true)
        }),
        markers.latency_ms,
    ))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    #[test]
    fn parses_paths() {
        let p = parse("/v1/projects/p1/locations/global/publishers/google/models/gemini-2.5-flash:streamGenerateContent").unwrap();
        assert_eq!(p.project, "p1");
        assert_eq!(p.location, "global");
        assert_eq!(p.route(), Route::VertexStream);
        let c = parse("/v1beta1/projects/p/locations/us-central1/publishers/anthropic/models/claude-sonnet-4-5@20250929:rawPredict").unwrap();
        assert_eq!(c.route(), Route::VertexClaude);
        let n = parse(
            "/v1/projects/p/locations/us-east5/publishers/anthropic/models/count-tokens:rawPredict",
        )
        .unwrap();
        assert_eq!(n.route(), Route::VertexClaudeCountTokens);
        let k = parse("/v1/projects/p/locations/us-central1/cachedContents/123").unwrap();
        assert_eq!(k.route(), Route::VertexCache);
        assert!(parse("/v1/projects/p/locations").is_none());
        assert!(parse("/v2/projects/p/locations/l/publishers/google/models/m:x").is_none());
        assert!(parse("/v1/projects/p/locations/l/publishers/google/models/m:x/extra").is_none());
    }
}
