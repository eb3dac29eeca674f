//! Embeddings on family A: an OpenAI `/v1/embeddings` body becomes one or more Gemini embedding
//! calls (a [`FanOut`]), and their answers become one OpenAI `list` of `embedding` objects.
//! Wire notes: `docs/wire.md#gemini-embeddings` and `docs/wire.md#client-side-embeddings`;
//! fixtures: `tests/fixtures/gemini-batch-embed-contents*.json`, `vertex-embedding-predict*.json`,
//! `openai-embeddings.json`.
//!
//! ## Surfaces and their per-call limits
//!
//! | Route kind | Call | Per call |
//! |---|---|---|
//! | `gemini-api` | `POST …/v1beta/models/{m}:batchEmbedContents` `{"requests":[{"model":"models/{m}","content":{"parts":[{"text"}]},"taskType"?,"outputDimensionality"?}]}` | ≤ [`DEVAPI_MAX_BATCH`] (100) inputs |
//! | `vertex`, `vertex-global` | `POST …/v1/projects/{p}/locations/{l}/publishers/google/models/{m}:predict` `{"instances":[{"content","task_type"?}],"parameters"?:{"outputDimensionality"}}` | ≤ [`VERTEX_MAX_INSTANCES`] (250; the model's own limit when lower) inputs and ≤ [`VERTEX_MAX_TOKENS`] (20,000) estimated tokens |
//!
//! Inputs are cut, in request order, into consecutive batches, each as large as those limits
//! allow ([`plan_batches`]); the proxy sends them concurrently and the joiner reassembles the
//! answers in call order, so `data[i].index == i` for any batch size. The Developer API answers
//! `{"embeddings":[{"values"}]}`, Vertex `{"predictions":[{"embeddings":{"values","statistics":
//! {"token_count"}}}]}`, both in input order; an answer with a different count is a shape error.
//!
//! ## Models ([`MODELS`])
//!
//! | Upstream model | Dimensions (default = max) | Task types | Vertex inputs per call |
//! |---|---|---|---|
//! | `text-embedding-004`, `text-multilingual-embedding-002` | 1–768 | [`TASK_TYPES`] | 250 |
//! | `text-embedding-005` | 1–768 | [`TASK_TYPES`] + `CODE_RETRIEVAL_QUERY` | 250 |
//! | `gemini-embedding-001` (and any other upstream model) | 1–3072 | [`TASK_TYPES`] + `CODE_RETRIEVAL_QUERY` | 1 |
//!
//! Every model embeds at most 2,048 tokens of an input (longer ones are truncated upstream).
//! `dimensions` outside the range and a `task_type` outside the model's list are 400s with the
//! allowed values in the message (`task_type` is matched without regard to case and sent in
//! Google's upper case). `CODE_RETRIEVAL_QUERY` is not accepted for `text-embedding-004`:
//! Google lists it for text-embedding-005 and gemini-embedding-001 only
//! (`docs/wire.md#gemini-embeddings`).
//!
//! ## Usage
//!
//! `prompt_tokens == total_tokens`, and the gateway's [`Usage`] has input tokens only.
//! - Vertex: the sum of the upstream's `statistics.token_count` (an input whose answer lacks it
//!   counts its estimate).
//! - Developer API (no counts for these models): the estimate [`estimate_tokens`] —
//!   `ceil(UTF-8 bytes / 4)` per input, at least 1, at most the model's 2,048-token input limit.
//!   The same estimate fills Vertex batches up to the token budget.
//!
//! ## Encoding
//!
//! Vectors are read as `f32`, by `embed/answer.rs`'s reader of Google's two answer shapes
//! (serde_json where an answer is shaped otherwise: the same numbers, bit for bit).
//! `encoding_format: "float"` (the default) writes them as JSON numbers in the shortest form that
//! reads back to the same `f32`; `"base64"` writes the little-endian `f32` bytes in standard,
//! padded base64 — what the OpenAI API returns and its SDKs decode (their default). Both
//! encodings come from the same `f32`s, so they agree bit for bit.

mod answer;

#[doc(hidden)]
pub use answer::{check_against_serde, Check};

use std::borrow::Cow;
use std::ops::Range;

use bytes::Bytes;
use serde::Serialize;
use serde_json::value::RawValue;

use super::{header, transport, Str};
use crate::api::{embeddings, GatewayError, RawRequest, Usage};
use crate::catalog::RouteKind;
use crate::providers::{
    Credentials, FanOut, ResponseCx, Target, TranslateError, Translated, UpstreamRequest,
};

/// Requests per Developer API `batchEmbedContents` call (400 above; fixture
/// `gemini-error-400-batch-embed-limit.json`).
pub const DEVAPI_MAX_BATCH: usize = 100;
/// Instances per Vertex `:predict` call.
pub const VERTEX_MAX_INSTANCES: usize = 250;
/// Total input tokens per Vertex `:predict` call.
pub const VERTEX_MAX_TOKENS: u64 = 20_000;

/// Task types every Gemini embedding model accepts (Vertex spelling; the Developer API enum
/// also has `TASK_TYPE_UNSPECIFIED`, which means the same as sending none): all of
/// [`TASK_TYPES_WITH_CODE`] but its last, `CODE_RETRIEVAL_QUERY`.
pub const TASK_TYPES: &[&str] = TASK_TYPES_WITH_CODE
    .split_at(TASK_TYPES_WITH_CODE.len() - 1)
    .0;

/// The task types of the newer models (text-embedding-005, gemini-embedding-001).
pub const TASK_TYPES_WITH_CODE: &[&str] = &[
    "RETRIEVAL_QUERY",
    "RETRIEVAL_DOCUMENT",
    "SEMANTIC_SIMILARITY",
    "CLASSIFICATION",
    "CLUSTERING",
    "QUESTION_ANSWERING",
    "FACT_VERIFICATION",
    "CODE_RETRIEVAL_QUERY",
];

/// What the gateway knows about one upstream embedding model.
#[derive(Debug, PartialEq, Eq)]
pub struct EmbedModel {
    /// Upstream model name (`Model::upstream_model`).
    pub name: &'static str,
    /// Default and largest output dimensionality; `dimensions` may ask for 1 up to this.
    pub max_dims: u32,
    /// Tokens of one input the model embeds (the rest is truncated upstream).
    pub max_input_tokens: u64,
    pub task_types: &'static [&'static str],
    /// Inputs per Vertex `:predict` call (never above [`VERTEX_MAX_INSTANCES`]).
    pub vertex_max_instances: usize,
    /// Whether the model's vectors are unit length only at full width: Google documents that
    /// `gemini-embedding-001` cut below 3072 must be normalised by the caller. OpenAI clients
    /// expect unit vectors at any `dimensions`, so the gateway normalises such cuts.
    pub cut_needs_normalising: bool,
}

/// The embedding models the gateway has limits for (`docs/wire.md#gemini-embeddings`).
pub const MODELS: &[EmbedModel] = &[
    EmbedModel {
        name: "text-embedding-004",
        max_dims: 768,
        max_input_tokens: 2048,
        task_types: TASK_TYPES,
        vertex_max_instances: VERTEX_MAX_INSTANCES,
        cut_needs_normalising: false,
    },
    EmbedModel {
        name: "text-embedding-005",
        max_dims: 768,
        max_input_tokens: 2048,
        task_types: TASK_TYPES_WITH_CODE,
        vertex_max_instances: VERTEX_MAX_INSTANCES,
        cut_needs_normalising: false,
    },
    EmbedModel {
        name: "text-multilingual-embedding-002",
        max_dims: 768,
        max_input_tokens: 2048,
        task_types: TASK_TYPES,
        vertex_max_instances: VERTEX_MAX_INSTANCES,
        cut_needs_normalising: false,
    },
    EmbedModel {
        name: "gemini-embedding-001",
        max_dims: 3072,
        max_input_tokens: 2048,
        task_types: TASK_TYPES_WITH_CODE,
        vertex_max_instances: 1,
        cut_needs_normalising: true,
    },
];

/// Limits for an upstream model not in [`MODELS`] (an operator's successor model): the most
/// permissive dimensions and task types, the most cautious batching.
const OTHER: EmbedModel = EmbedModel {
    name: "",
    max_dims: 3072,
    max_input_tokens: 2048,
    task_types: TASK_TYPES_WITH_CODE,
    vertex_max_instances: 1,
    cut_needs_normalising: true,
};

impl EmbedModel {
    pub fn of(upstream_model: &str) -> &'static EmbedModel {
        MODELS
            .iter()
            .find(|m| m.name == upstream_model)
            .unwrap_or(&OTHER)
    }
}

/// The estimated tokens of one input: `ceil(bytes / 4)`, within `1..=max_input_tokens`.
pub fn estimate_tokens(text: &str, model: &EmbedModel) -> u64 {
    (text.len().div_ceil(4) as u64).clamp(1, model.max_input_tokens.max(1))
}

/// Consecutive ranges covering `estimates` in order, each holding at most `max_items` inputs
/// and, with a budget, at most `max_tokens` estimated tokens (an input over the budget on its
/// own still gets a batch: the upstream decides).
pub fn plan_batches(
    estimates: &[u64],
    max_items: usize,
    max_tokens: Option<u64>,
) -> Vec<Range<usize>> {
    let max_items = max_items.max(1);
    let mut batches = Vec::new();
    let (mut start, mut tokens) = (0, 0u64);
    for (i, &t) in estimates.iter().enumerate() {
        let full = i - start >= max_items || max_tokens.is_some_and(|m| tokens + t > m);
        if full && i > start {
            batches.push(start..i);
            (start, tokens) = (i, 0);
        }
        tokens += t;
    }
    if start < estimates.len() {
        batches.push(start..estimates.len());
    }
    batches
}

/// The two embedding surfaces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Surface {
    DeveloperApi,
    Vertex,
}

impl Surface {
    fn of(kind: RouteKind) -> Result<Self, GatewayError> {
        match kind {
            RouteKind::GeminiApi => Ok(Self::DeveloperApi),
            RouteKind::Vertex | RouteKind::VertexGlobal => Ok(Self::Vertex),
            other => Err(GatewayError::Internal(
                format!(
                    "route kind {} cannot carry Gemini embeddings",
                    other.as_str()
                )
                .into(),
            )),
        }
    }

    fn method(self) -> &'static str {
        match self {
            Self::DeveloperApi => "batchEmbedContents",
            Self::Vertex => "predict",
        }
    }

    /// (inputs, token budget) of one call.
    fn limits(self, model: &EmbedModel) -> (usize, Option<u64>) {
        match self {
            Self::DeveloperApi => (DEVAPI_MAX_BATCH, None),
            Self::Vertex => (
                model.vertex_max_instances.min(VERTEX_MAX_INSTANCES),
                Some(VERTEX_MAX_TOKENS),
            ),
        }
    }
}

/// The checked client request.
#[derive(Debug, PartialEq)]
struct Params<'a> {
    inputs: Vec<Cow<'a, str>>,
    dimensions: Option<u32>,
    task_type: Option<&'static str>,
    base64: bool,
}

fn parse<'a>(
    req: &RawRequest<'a>,
    model: &EmbedModel,
    model_id: &str,
) -> Result<Params<'a>, GatewayError> {
    let inputs = match req.get("input") {
        Some(raw) => inputs(raw)?,
        None => return Err(GatewayError::invalid("missing required field: input")),
    };
    let dimensions = match req.typed::<Option<i64>>("dimensions")?.flatten() {
        None => None,
        Some(d) if d >= 1 && d <= i64::from(model.max_dims) => u32::try_from(d).ok(),
        Some(d) => {
            return Err(GatewayError::invalid(format!(
                "dimensions must be between 1 and {} for model \"{model_id}\" (got {d})",
                model.max_dims
            )))
        }
    };
    let task_type = match req.typed::<Option<Str>>("task_type")?.flatten() {
        None => None,
        Some(t) => Some(
            model
                .task_types
                .iter()
                .copied()
                .find(|known| known.eq_ignore_ascii_case(&t))
                .ok_or_else(|| {
                    GatewayError::invalid(format!(
                        "task_type \"{}\" is not supported by model \"{model_id}\"; use one of: {}",
                        &*t,
                        model.task_types.join(", ")
                    ))
                })?,
        ),
    };
    let base64 = match req.typed::<Option<Str>>("encoding_format")?.flatten() {
        None => false,
        Some(f) if &*f == "float" => false,
        Some(f) if &*f == "base64" => true,
        Some(f) => {
            return Err(GatewayError::invalid(format!(
                "encoding_format must be \"float\" or \"base64\" (got \"{}\")",
                &*f
            )))
        }
    };
    Ok(Params {
        inputs,
        dimensions,
        task_type,
        base64,
    })
}

const TOKEN_IDS: &str = "input as token ids is not supported: Gemini embedding models use their own tokenizer; send the text (a string or an array of strings)";

/// `input`: a non-empty string, or a non-empty array of non-empty strings.
fn inputs<'a>(raw: &'a RawValue) -> Result<Vec<Cow<'a, str>>, GatewayError> {
    let kind = |raw: &RawValue| raw.get().trim_start().bytes().next();
    match kind(raw) {
        Some(b'"') => {
            let text = string(raw, "input")?;
            if text.is_empty() {
                return Err(GatewayError::invalid("input must not be an empty string"));
            }
            Ok(vec![text])
        }
        Some(b'[') => {
            let items: Vec<&'a RawValue> = serde_json::from_str(raw.get())
                .map_err(|e| GatewayError::invalid(format!("invalid value for input: {e}")))?;
            if items.is_empty() {
                return Err(GatewayError::invalid("input must not be an empty array"));
            }
            items
                .into_iter()
                .enumerate()
                .map(|(i, item)| match kind(item) {
                    Some(b'"') => match string(item, "input")? {
                        text if text.is_empty() => Err(GatewayError::invalid(format!(
                            "input[{i}] must not be an empty string"
                        ))),
                        text => Ok(text),
                    },
                    Some(b'-' | b'0'..=b'9' | b'[') => Err(GatewayError::invalid(TOKEN_IDS)),
                    _ => Err(GatewayError::invalid(format!(
                        "input[{i}] must be a string"
                    ))),
                })
                .collect()
        }
        _ => Err(GatewayError::invalid(
            "input must be a string or an array of strings",
        )),
    }
}

fn string<'a>(raw: &'a RawValue, name: &str) -> Result<Cow<'a, str>, GatewayError> {
    serde_json::from_str::<Str<'a>>(raw.get())
        .map(|s| s.0)
        .map_err(|e| GatewayError::invalid(format!("invalid value for {name}: {e}")))
}

/// The calls for `req` on the target's surface, and the joiner of their answers.
pub(super) fn fan_out(
    req: &RawRequest<'_>,
    target: &Target<'_>,
    creds: &Credentials,
) -> Result<FanOut, GatewayError> {
    let upstream = target.upstream_model();
    let model = EmbedModel::of(upstream);
    let mut p = parse(req, model, &target.model.id)?;
    // The catalog id's promised width, when the client names none (`google/text-embedding-004`
    // is 768 wide on a 3072-wide successor).
    p.dimensions = p.dimensions.or(target.model.profile.dimensions);
    let surface = Surface::of(target.route.kind)?;
    let mut headers = vec![header("content-type", "application/json")?];
    let path = transport(target, creds, surface.method(), &mut headers)?;
    let estimates: Vec<u64> = p.inputs.iter().map(|t| estimate_tokens(t, model)).collect();
    let (max_items, max_tokens) = surface.limits(model);
    let batches = plan_batches(&estimates, max_items, max_tokens);
    let model_name = format!("models/{upstream}");
    let calls = batches
        .iter()
        .map(|range| {
            let texts = p.inputs.get(range.clone()).unwrap_or_default();
            let body = match surface {
                Surface::DeveloperApi => dev_body(texts, &model_name, &p),
                Surface::Vertex => vertex_body(texts, &p),
            }?;
            Ok(UpstreamRequest {
                path: path.clone(),
                headers: headers.clone(),
                body,
            })
        })
        .collect::<Result<Vec<_>, GatewayError>>()?;
    let plan = JoinPlan {
        surface,
        batches,
        estimates,
        base64: p.base64,
        normalise: model.cut_needs_normalising && p.dimensions.is_some_and(|d| d < model.max_dims),
    };
    Ok(FanOut {
        calls,
        join: Box::new(move |bodies, cx| plan.join(bodies, cx)),
    })
}

#[derive(Serialize)]
struct Part<'a> {
    text: &'a str,
}

#[derive(Serialize)]
struct Content<'a> {
    parts: [Part<'a>; 1],
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct DevRequest<'a> {
    model: &'a str,
    content: Content<'a>,
    #[serde(skip_serializing_if = "Option::is_none")]
    task_type: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    output_dimensionality: Option<u32>,
}

#[derive(Serialize)]
struct DevBatch<'a> {
    requests: Vec<DevRequest<'a>>,
}

fn dev_body(texts: &[Cow<str>], model: &str, p: &Params) -> Result<Bytes, GatewayError> {
    let requests = texts
        .iter()
        .map(|t| DevRequest {
            model,
            content: Content {
                parts: [Part { text: t }],
            },
            task_type: p.task_type,
            output_dimensionality: p.dimensions,
        })
        .collect();
    to_bytes(&DevBatch { requests })
}

#[derive(Serialize)]
struct Instance<'a> {
    content: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    task_type: Option<&'a str>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Parameters {
    output_dimensionality: u32,
}

#[derive(Serialize)]
struct Predict<'a> {
    instances: Vec<Instance<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    parameters: Option<Parameters>,
}

fn vertex_body(texts: &[Cow<str>], p: &Params) -> Result<Bytes, GatewayError> {
    let instances = texts
        .iter()
        .map(|t| Instance {
            content: t,
            task_type: p.task_type,
        })
        .collect();
    to_bytes(&Predict {
        instances,
        parameters: p.dimensions.map(|d| Parameters {
            output_dimensionality: d,
        }),
    })
}

fn to_bytes(v: &impl Serialize) -> Result<Bytes, GatewayError> {
    crate::api::json::to_vec(v)
        .map(Bytes::from)
        .map_err(|e| GatewayError::Internal(format!("embedding request: {e}").into()))
}

/// What the joiner needs to know about the calls it joins.
struct JoinPlan {
    surface: Surface,
    batches: Vec<Range<usize>>,
    estimates: Vec<u64>,
    base64: bool,
    /// Scale every vector to unit length ([`EmbedModel::cut_needs_normalising`]).
    normalise: bool,
}

impl JoinPlan {
    fn join(&self, bodies: &[Bytes], cx: &ResponseCx) -> Result<Translated, TranslateError> {
        if bodies.len() != self.batches.len() {
            return Err(TranslateError::Shape(format!(
                "{} answers for {} embedding calls",
                bodies.len(),
                self.batches.len()
            )));
        }
        let mut vectors = Vec::with_capacity(self.estimates.len());
        let mut tokens = 0u64;
        for (body, range) in bodies.iter().zip(&self.batches) {
            let embeddings = match self.surface {
                Surface::DeveloperApi => answer::developer_api(body),
                Surface::Vertex => answer::vertex(body),
            }
            .map_err(|e| TranslateError::Json(e.to_string()))?;
            if embeddings.len() != range.len() {
                return Err(TranslateError::Shape(format!(
                    "{} embeddings for a call of {} inputs",
                    embeddings.len(),
                    range.len()
                )));
            }
            let estimates = self.estimates.get(range.clone()).unwrap_or_default();
            for (embedding, estimate) in embeddings.into_iter().zip(estimates) {
                // Whole non-negative counts only; anything else (and the Developer API, which
                // counts nothing) counts the estimate.
                tokens += embedding
                    .token_count
                    .filter(|c| c.fract() == 0.0 && *c >= 0.0)
                    .map_or(*estimate, |c| c as u64);
                vectors.push(embedding.values);
            }
        }
        if self.normalise {
            vectors.iter_mut().for_each(|v| normalise(v));
        }
        let body = embeddings::render(&vectors, self.base64, &cx.model_id, tokens)
            .map_err(|e| TranslateError::Shape(e.to_string()))?;
        let usage = Usage {
            input: tokens,
            ..Usage::default()
        };
        Ok(Translated::usage_last(body, usage, None))
    }
}

/// Scales `v` to unit length (a zero vector stays zero).
fn normalise(v: &mut [f32]) {
    let norm = v
        .iter()
        .map(|x| f64::from(*x) * f64::from(*x))
        .sum::<f64>()
        .sqrt();
    if norm > 0.0 {
        v.iter_mut()
            .for_each(|x| *x = (f64::from(*x) / norm) as f32);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use serde_json::{json, Value};

    use super::*;
    use crate::api::Operation;
    use crate::catalog::{Model, ModelKind, Profile, Route};
    use crate::providers::gemini::test_support::{fixture, model, route};
    use crate::providers::{Adapter, Secret};

    const ID: &str = "google/text-embedding-004";

    fn embed_model(upstream: &str) -> Model {
        let mut m = model(Profile::default());
        m.id = Arc::from(ID);
        m.kind = ModelKind::Embedding;
        m.upstream_model = upstream.into();
        m
    }

    fn creds() -> Credentials {
        let c = Credentials {
            gemini: Some(Secret::new("AIza-key")),
            vertex_project: Some("p".into()),
            ..Credentials::default()
        };
        c.vertex_token.set(Some(Secret::new("ya29.tok")));
        c
    }

    fn cx() -> ResponseCx {
        ResponseCx {
            id: Arc::from("emb-1"),
            model_id: Arc::from(ID),
            op: Operation::Embeddings,
            created: 1_700_000_000,
            exclude_reasoning: false,
        }
    }

    fn try_plan(req: &Value, upstream: &str, kind: RouteKind) -> Result<FanOut, GatewayError> {
        let bytes = serde_json::to_vec(req).unwrap();
        let raw = RawRequest::parse(&bytes, Operation::Embeddings)?;
        let m = embed_model(upstream);
        let r: Route = route(kind, Some("us-central1"));
        let t = Target {
            model: &m,
            route: &r,
            op: Operation::Embeddings,
            stream: false,
            max_cache_ttl: crate::providers::DEFAULT_MAX_CACHE_TTL,
            forward: &[],
        };
        match super::super::Gemini.plan(&raw, &t, &creds())? {
            crate::providers::Plan::FanOut(f) => Ok(f),
            other => panic!("embeddings fan out, got {other:?}"),
        }
    }

    fn plan(req: Value, upstream: &str, kind: RouteKind) -> FanOut {
        try_plan(&req, upstream, kind).unwrap()
    }

    fn err(req: Value) -> String {
        try_plan(&req, "text-embedding-004", RouteKind::Vertex)
            .unwrap_err()
            .to_string()
    }

    fn bodies(f: &FanOut) -> Vec<Value> {
        f.calls
            .iter()
            .map(|c| serde_json::from_slice(&c.body).unwrap())
            .collect()
    }

    /// The inputs each call carries (Developer API `requests`, Vertex `instances`).
    fn call_texts(f: &FanOut) -> Vec<Vec<String>> {
        bodies(f)
            .iter()
            .map(|b| {
                let (items, text) = match b.get("requests") {
                    Some(r) => (r, "/content/parts/0/text"),
                    None => (&b["instances"], "/content"),
                };
                items
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|i| i.pointer(text).unwrap().as_str().unwrap().to_owned())
                    .collect()
            })
            .collect()
    }

    fn call_sizes(f: &FanOut) -> Vec<usize> {
        call_texts(f).iter().map(Vec::len).collect()
    }

    fn texts(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("text number {i}")).collect()
    }

    fn sizes(batches: &[Range<usize>]) -> Vec<usize> {
        batches.iter().map(|r| r.len()).collect()
    }

    /// A Developer API answer whose vector `k` is `[first + k, 0.5]`.
    fn dev_answer(first: usize, n: usize) -> Bytes {
        let embeddings: Vec<Value> = (first..first + n)
            .map(|i| json!({"values": [i as f32, 0.5]}))
            .collect();
        Bytes::from(serde_json::to_vec(&json!({ "embeddings": embeddings })).unwrap())
    }

    /// A Vertex answer whose vector `k` is `[first + k, 0.25]`, each counting `tokens`.
    fn vertex_answer(first: usize, n: usize, tokens: u64) -> Bytes {
        let predictions: Vec<Value> = (first..first + n)
            .map(|i| json!({"embeddings": {"values": [i as f32, 0.25], "statistics": {"token_count": tokens, "truncated": false}}}))
            .collect();
        Bytes::from(serde_json::to_vec(&json!({ "predictions": predictions })).unwrap())
    }

    fn join(f: FanOut, answers: &[Bytes]) -> (Value, Usage) {
        let t = (f.join)(answers, &cx()).unwrap();
        (serde_json::from_slice(&t.body).unwrap(), t.usage)
    }

    fn floats(v: &Value) -> Vec<f32> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_f64().unwrap() as f32)
            .collect()
    }

    fn decode(b64: &Value) -> Vec<f32> {
        use base64::Engine as _;
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(b64.as_str().unwrap())
            .unwrap();
        assert_eq!(bytes.len() % 4, 0);
        bytes
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect()
    }

    #[test]
    fn estimates_are_a_quarter_of_the_bytes_within_the_input_limit() {
        let m = EmbedModel::of("text-embedding-004");
        assert_eq!(estimate_tokens("a", m), 1);
        assert_eq!(estimate_tokens("abcd", m), 1);
        assert_eq!(estimate_tokens("abcde", m), 2);
        assert_eq!(estimate_tokens("héllo", m), 2, "UTF-8 bytes, not chars");
        assert_eq!(estimate_tokens(&"x".repeat(8192), m), 2048);
        assert_eq!(estimate_tokens(&"x".repeat(100_000), m), 2048, "capped");
    }

    #[test]
    fn batches_respect_the_item_limit() {
        for (n, max, want) in [
            (1, 100, vec![1]),
            (100, 100, vec![100]),
            (101, 100, vec![100, 1]),
            (250, 250, vec![250]),
            (251, 250, vec![250, 1]),
            (501, 250, vec![250, 250, 1]),
            (3, 1, vec![1, 1, 1]),
        ] {
            let b = plan_batches(&vec![1; n], max, None);
            assert_eq!(sizes(&b), want, "{n} inputs, {max} a call");
            assert_eq!(b.first().unwrap().start, 0);
            assert!(b.windows(2).all(|w| w[0].end == w[1].start), "contiguous");
            assert_eq!(b.last().unwrap().end, n);
        }
        assert!(plan_batches(&[], 100, None).is_empty());
    }

    #[test]
    fn batches_respect_the_token_budget() {
        let budget = Some(VERTEX_MAX_TOKENS);
        // 9 × 2048 = 18,432 fits, a tenth would make 20,480.
        assert_eq!(sizes(&plan_batches(&[2048; 20], 250, budget)), [9, 9, 2]);
        // Exactly the budget fits; one token more starts a new call.
        assert_eq!(sizes(&plan_batches(&[5000; 4], 250, budget)), [4]);
        assert_eq!(
            sizes(&plan_batches(&[5000, 5000, 5000, 5001], 250, budget)),
            [3, 1]
        );
        // An input over the budget on its own still goes, alone.
        assert_eq!(
            sizes(&plan_batches(&[1, 25_000, 1], 250, budget)),
            [1, 1, 1]
        );
        // Both limits at once: small inputs hit the count first.
        assert_eq!(sizes(&plan_batches(&[10; 300], 250, budget)), [250, 50]);
    }

    #[test]
    fn developer_api_calls_per_100_inputs() {
        for (n, want) in [
            (1, vec![1]),
            (100, vec![100]),
            (101, vec![100, 1]),
            (250, vec![100, 100, 50]),
        ] {
            let f = plan(
                json!({"model": ID, "input": texts(n)}),
                "text-embedding-004",
                RouteKind::GeminiApi,
            );
            assert_eq!(call_sizes(&f), want, "{n} inputs");
            assert_eq!(
                call_texts(&f).concat(),
                texts(n),
                "inputs in order across calls"
            );
        }
    }

    #[test]
    fn vertex_calls_per_250_inputs_and_20000_tokens() {
        for (n, want) in [(1, vec![1]), (250, vec![250]), (251, vec![250, 1])] {
            let f = plan(
                json!({"model": ID, "input": texts(n)}),
                "text-embedding-004",
                RouteKind::Vertex,
            );
            assert_eq!(call_sizes(&f), want, "{n} inputs");
            assert_eq!(
                call_texts(&f).concat(),
                texts(n),
                "inputs in order across calls"
            );
        }
        // 30 inputs of 8 KiB (2,048 tokens each): 9 a call.
        let big = vec!["y".repeat(8192); 30];
        let f = plan(
            json!({"model": ID, "input": big}),
            "text-embedding-004",
            RouteKind::Vertex,
        );
        assert_eq!(call_sizes(&f), [9, 9, 9, 3]);
        // gemini-embedding-001 takes one instance per call on Vertex.
        let f = plan(
            json!({"model": ID, "input": ["a", "b", "c"]}),
            "gemini-embedding-001",
            RouteKind::Vertex,
        );
        assert_eq!(f.calls.len(), 3);
    }

    #[test]
    fn developer_api_body_matches_the_fixture() {
        let f = plan(
            json!({"model": ID, "input": ["hello", "world"], "task_type": "RETRIEVAL_DOCUMENT"}),
            "gemini-embedding-001",
            RouteKind::GeminiApi,
        );
        let mut want: Value =
            serde_json::from_slice(&fixture("gemini-batch-embed-contents.request.json")).unwrap();
        for r in want["requests"].as_array_mut().unwrap() {
            // The captured client also sent the default role; Google does not need it.
            r["content"].as_object_mut().unwrap().remove("role");
        }
        assert_eq!(bodies(&f), [want]);
        let call = &f.calls[0];
        assert_eq!(
            call.path,
            "/base/v1beta/models/gemini-embedding-001:batchEmbedContents?prettyPrint=false"
        );
        let h: Vec<(String, String)> = call
            .headers
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_str().unwrap().to_owned()))
            .collect();
        assert_eq!(
            h,
            [
                ("content-type".into(), "application/json".into()),
                ("x-goog-api-key".into(), "AIza-key".into())
            ]
        );
    }

    #[test]
    fn vertex_body_matches_the_fixture() {
        let f = plan(
            json!({"model": ID, "input": "Hello, world!", "task_type": "RETRIEVAL_QUERY"}),
            "text-embedding-004",
            RouteKind::Vertex,
        );
        let want: Value =
            serde_json::from_slice(&fixture("vertex-embedding-predict.request.json")).unwrap();
        assert_eq!(bodies(&f), [want]);
        let call = &f.calls[0];
        assert_eq!(
            call.path,
            "/base/v1/projects/p/locations/us-central1/publishers/google/models/text-embedding-004:predict?prettyPrint=false"
        );
        assert!(call
            .headers
            .iter()
            .any(|(k, v)| k == "authorization" && v == "Bearer ya29.tok"));
        let f = plan(
            json!({"model": ID, "input": "x"}),
            "text-embedding-004",
            RouteKind::VertexGlobal,
        );
        assert!(f.calls[0].path.contains("/locations/global/"));
    }

    #[test]
    fn dimensions_and_task_type_reach_every_call() {
        let req =
            json!({"model": ID, "input": texts(101), "dimensions": 256, "task_type": "clustering"});
        let f = plan(req.clone(), "text-embedding-004", RouteKind::GeminiApi);
        for b in bodies(&f) {
            for r in b["requests"].as_array().unwrap() {
                assert_eq!(r["outputDimensionality"], 256);
                assert_eq!(r["taskType"], "CLUSTERING", "sent in Google's case");
                assert_eq!(r["model"], "models/text-embedding-004");
            }
        }
        let f = plan(req, "text-embedding-004", RouteKind::Vertex);
        for b in bodies(&f) {
            assert_eq!(b["parameters"], json!({"outputDimensionality": 256}));
            for i in b["instances"].as_array().unwrap() {
                assert_eq!(i["task_type"], "CLUSTERING");
            }
        }
        let f = plan(
            json!({"model": ID, "input": "x"}),
            "text-embedding-004",
            RouteKind::Vertex,
        );
        assert_eq!(
            bodies(&f)[0],
            json!({"instances": [{"content": "x"}]}),
            "nothing unasked"
        );
        let f = plan(
            json!({"model": ID, "input": "x", "dimensions": null, "task_type": null, "encoding_format": null, "user": "u"}),
            "text-embedding-004",
            RouteKind::GeminiApi,
        );
        assert_eq!(
            bodies(&f)[0],
            json!({"requests": [{"model": "models/text-embedding-004", "content": {"parts": [{"text": "x"}]}}]})
        );
    }

    #[test]
    fn developer_api_fixture_joins_with_estimated_usage() {
        let f = plan(
            json!({"model": ID, "input": ["hello", "world"]}),
            "gemini-embedding-001",
            RouteKind::GeminiApi,
        );
        let answer = Bytes::from(fixture("gemini-batch-embed-contents.json"));
        let (v, usage) = join(f, std::slice::from_ref(&answer));
        let upstream: Value = serde_json::from_slice(&answer).unwrap();
        assert_eq!(v["object"], "list");
        assert_eq!(v["model"], ID);
        let data = v["data"].as_array().unwrap();
        assert_eq!(data.len(), 2);
        for (i, d) in data.iter().enumerate() {
            assert_eq!(d["object"], "embedding");
            assert_eq!(d["index"], i);
            let want = floats(&upstream["embeddings"][i]["values"]);
            let got = floats(&d["embedding"]);
            assert_eq!(
                got.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
                want.iter().map(|x| x.to_bits()).collect::<Vec<_>>()
            );
        }
        // "hello" and "world": 5 bytes each → 2 estimated tokens each.
        assert_eq!(
            v["usage"],
            json!({"prompt_tokens": 4, "completion_tokens": 0, "total_tokens": 4})
        );
        assert_eq!(
            usage,
            Usage {
                input: 4,
                ..Usage::default()
            }
        );
    }

    #[test]
    fn vertex_fixture_joins_with_the_upstream_token_count() {
        let f = plan(
            json!({"model": ID, "input": "Hello, world!"}),
            "text-embedding-004",
            RouteKind::Vertex,
        );
        let (v, usage) = join(f, &[Bytes::from(fixture("vertex-embedding-predict.json"))]);
        assert_eq!(v["data"][0]["index"], 0);
        assert_eq!(v["data"][0]["embedding"].as_array().unwrap().len(), 8);
        assert_eq!(
            v["data"][0]["embedding"][0].as_f64().unwrap() as f32,
            -0.020_920_176_f32
        );
        assert_eq!(v["usage"]["prompt_tokens"], 4, "statistics.token_count");
        assert_eq!(v["usage"]["total_tokens"], 4);
        assert_eq!(usage.input, 4);
        assert_eq!(usage.output, 0);
    }

    #[test]
    fn the_response_shape_is_openais() {
        let f = plan(
            json!({"model": ID, "input": ["a", "b"]}),
            "text-embedding-004",
            RouteKind::Vertex,
        );
        let (v, _) = join(f, &[vertex_answer(0, 2, 1)]);
        let want: Value = serde_json::from_slice(&fixture("openai-embeddings.json")).unwrap();
        let keys = |v: &Value| {
            let mut k: Vec<String> = v.as_object().unwrap().keys().cloned().collect();
            k.sort();
            k
        };
        assert_eq!(keys(&v), keys(&want));
        assert_eq!(keys(&v["data"][0]), keys(&want["data"][0]));
        assert_eq!(v["object"], want["object"]);
        assert_eq!(v["data"][1]["object"], want["data"][1]["object"]);
        assert_eq!(v["usage"]["total_tokens"], v["usage"]["prompt_tokens"]);
    }

    #[test]
    fn vectors_cut_below_full_width_are_normalised_where_google_leaves_it_to_the_caller() {
        let three_four = || Bytes::from_static(br#"{"embeddings":[{"values":[3.0,4.0]}]}"#);
        let cases = [
            ("gemini-embedding-001", json!(2), [0.6, 0.8]),
            ("gemini-embedding-001", json!(null), [3.0, 4.0]),
            ("text-embedding-005", json!(2), [3.0, 4.0]),
        ];
        for (upstream, dims, want) in cases {
            let f = plan(
                json!({"model": ID, "input": "x", "dimensions": dims}),
                upstream,
                RouteKind::GeminiApi,
            );
            let (v, _) = join(f, &[three_four()]);
            assert_eq!(
                floats(&v["data"][0]["embedding"]),
                want,
                "{upstream} {dims}"
            );
        }
    }

    #[test]
    fn answers_join_in_call_order() {
        let f = plan(
            json!({"model": ID, "input": texts(251)}),
            "text-embedding-004",
            RouteKind::GeminiApi,
        );
        assert_eq!(f.calls.len(), 3);
        let answers = [
            dev_answer(0, 100),
            dev_answer(100, 100),
            dev_answer(200, 51),
        ];
        let (v, usage) = join(f, &answers);
        let data = v["data"].as_array().unwrap();
        assert_eq!(data.len(), 251);
        for (i, d) in data.iter().enumerate() {
            assert_eq!(d["index"], i);
            assert_eq!(floats(&d["embedding"]), [i as f32, 0.5]);
        }
        let want: u64 = texts(251).iter().map(|t| t.len().div_ceil(4) as u64).sum();
        assert_eq!(usage.input, want, "the estimate of every input");

        let f = plan(
            json!({"model": ID, "input": texts(251)}),
            "text-embedding-004",
            RouteKind::Vertex,
        );
        let (v, usage) = join(f, &[vertex_answer(0, 250, 3), vertex_answer(250, 1, 7)]);
        assert_eq!(v["data"][250]["index"], 250);
        assert_eq!(floats(&v["data"][250]["embedding"]), [250.0, 0.25]);
        assert_eq!(usage.input, 250 * 3 + 7, "sum of statistics.token_count");
        assert_eq!(v["usage"]["prompt_tokens"], 757);
    }

    #[test]
    fn vertex_answers_without_statistics_count_the_estimate() {
        let f = plan(
            json!({"model": ID, "input": ["abcdefgh", "abc"]}),
            "text-embedding-004",
            RouteKind::Vertex,
        );
        let body = json!({"predictions": [
            {"embeddings": {"values": [0.1]}},
            {"embeddings": {"values": [0.2], "statistics": {"token_count": 9.0}}}
        ]});
        let (_, usage) = join(f, &[Bytes::from(body.to_string())]);
        assert_eq!(usage.input, 2 + 9);
    }

    #[test]
    fn wrong_answers_are_shape_errors() {
        let run = |answers: &[Bytes]| {
            let f = plan(
                json!({"model": ID, "input": texts(101)}),
                "text-embedding-004",
                RouteKind::GeminiApi,
            );
            (f.join)(answers, &cx()).unwrap_err()
        };
        assert!(matches!(
            run(&[dev_answer(0, 100), dev_answer(100, 2)]),
            TranslateError::Shape(_)
        ));
        assert!(matches!(
            run(&[dev_answer(0, 99), dev_answer(99, 2)]),
            TranslateError::Shape(_)
        ));
        assert!(matches!(
            run(&[dev_answer(0, 100)]),
            TranslateError::Shape(_)
        ));
        assert!(matches!(
            run(&[dev_answer(0, 100), Bytes::from_static(b"{")]),
            TranslateError::Json(_)
        ));
        let f = plan(
            json!({"model": ID, "input": "x"}),
            "text-embedding-004",
            RouteKind::Vertex,
        );
        assert!(matches!(
            (f.join)(&[Bytes::from_static(b"{}")], &cx()).unwrap_err(),
            TranslateError::Shape(_)
        ));
        // A Vertex answer with more vectors than inputs is one too (the joiner once dropped
        // the extra ones).
        let f = plan(
            json!({"model": ID, "input": "x"}),
            "text-embedding-004",
            RouteKind::Vertex,
        );
        assert!(matches!(
            (f.join)(&[vertex_answer(0, 2, 3)], &cx()).unwrap_err(),
            TranslateError::Shape(_)
        ));
    }

    #[test]
    fn base64_is_little_endian_f32() {
        assert_eq!(embeddings::base64_vector(&[1.0, -2.0]), "AACAPwAAAMA=");
        assert_eq!(embeddings::base64_vector(&[]), "");
    }

    #[test]
    fn base64_round_trips_to_the_float_answer_bit_for_bit() {
        for (upstream, kind, answer) in [
            (
                "gemini-embedding-001",
                RouteKind::GeminiApi,
                fixture("gemini-batch-embed-contents.json"),
            ),
            (
                "text-embedding-004",
                RouteKind::Vertex,
                fixture("vertex-embedding-predict.json"),
            ),
        ] {
            let n = if kind == RouteKind::Vertex { 1 } else { 2 };
            let input = texts(n);
            let answer = Bytes::from(answer);
            let float = plan(
                json!({"model": ID, "input": input, "encoding_format": "float"}),
                upstream,
                kind,
            );
            let b64 = plan(
                json!({"model": ID, "input": input, "encoding_format": "base64"}),
                upstream,
                kind,
            );
            let (vf, uf) = join(float, std::slice::from_ref(&answer));
            let (vb, ub) = join(b64, &[answer]);
            assert_eq!(uf, ub);
            for i in 0..n {
                let f: Vec<u32> = floats(&vf["data"][i]["embedding"])
                    .iter()
                    .map(|x| x.to_bits())
                    .collect();
                let b: Vec<u32> = decode(&vb["data"][i]["embedding"])
                    .iter()
                    .map(|x| x.to_bits())
                    .collect();
                assert_eq!(f, b, "{upstream} vector {i}");
                assert_eq!(vb["data"][i]["index"], i);
            }
        }
    }

    #[test]
    fn input_errors_are_clear_400s() {
        for (input, want) in [
            (json!(""), "input must not be an empty string"),
            (json!([]), "input must not be an empty array"),
            (json!(["a", ""]), "input[1] must not be an empty string"),
            (json!(["a", null]), "input[1] must be a string"),
            (json!(["a", {"text": "b"}]), "input[1] must be a string"),
            (json!([1, 2, 3]), "token ids is not supported"),
            (json!([[1, 2], [3]]), "token ids is not supported"),
            (json!(["a", -1]), "token ids is not supported"),
            (json!(null), "input must be a string or an array of strings"),
            (json!(42), "input must be a string or an array of strings"),
            (
                json!({"text": "a"}),
                "input must be a string or an array of strings",
            ),
        ] {
            let e = try_plan(
                &json!({"model": ID, "input": input}),
                "text-embedding-004",
                RouteKind::Vertex,
            )
            .unwrap_err();
            assert_eq!(e.status(), 400, "{input}");
            assert_eq!(e.code(), "invalid_request_error");
            assert!(e.to_string().contains(want), "{input}: {e}");
        }
        assert!(err(json!({"model": ID})).contains("missing required field: input"));
    }

    #[test]
    fn dimensions_are_range_checked_per_model() {
        for d in [json!(0), json!(769), json!(-1), json!(100_000_000_000_i64)] {
            let e = err(json!({"model": ID, "input": "x", "dimensions": d}));
            assert_eq!(
                e,
                format!("dimensions must be between 1 and 768 for model \"{ID}\" (got {d})")
            );
        }
        for d in [json!("256"), json!(3.5)] {
            assert!(err(json!({"model": ID, "input": "x", "dimensions": d}))
                .contains("invalid value for dimensions"));
        }
        for d in [1, 768] {
            let f = plan(
                json!({"model": ID, "input": "x", "dimensions": d}),
                "text-embedding-004",
                RouteKind::Vertex,
            );
            assert_eq!(bodies(&f)[0]["parameters"]["outputDimensionality"], d);
        }
        let f = plan(
            json!({"model": ID, "input": "x", "dimensions": 3072}),
            "gemini-embedding-001",
            RouteKind::GeminiApi,
        );
        assert_eq!(bodies(&f)[0]["requests"][0]["outputDimensionality"], 3072);
        let e = try_plan(
            &json!({"model": ID, "input": "x", "dimensions": 3073}),
            "gemini-embedding-001",
            RouteKind::GeminiApi,
        )
        .unwrap_err();
        assert!(e.to_string().contains("between 1 and 3072"), "{e}");
    }

    #[test]
    fn task_types_are_checked_against_the_models_list() {
        for t in TASK_TYPES {
            let f = plan(
                json!({"model": ID, "input": "x", "task_type": t}),
                "text-embedding-004",
                RouteKind::Vertex,
            );
            assert_eq!(bodies(&f)[0]["instances"][0]["task_type"], *t);
        }
        let e = err(json!({"model": ID, "input": "x", "task_type": "SUMMARIZE"}));
        assert_eq!(
            e,
            format!("task_type \"SUMMARIZE\" is not supported by model \"{ID}\"; use one of: RETRIEVAL_QUERY, RETRIEVAL_DOCUMENT, SEMANTIC_SIMILARITY, CLASSIFICATION, CLUSTERING, QUESTION_ANSWERING, FACT_VERIFICATION")
        );
        assert!(
            err(json!({"model": ID, "input": "x", "task_type": "CODE_RETRIEVAL_QUERY"}))
                .contains("is not supported by model")
        );
        assert!(err(json!({"model": ID, "input": "x", "task_type": 7}))
            .contains("invalid value for task_type"));
        let f = plan(
            json!({"model": ID, "input": "x", "task_type": "CODE_RETRIEVAL_QUERY"}),
            "text-embedding-005",
            RouteKind::Vertex,
        );
        assert_eq!(
            bodies(&f)[0]["instances"][0]["task_type"],
            "CODE_RETRIEVAL_QUERY"
        );
    }

    #[test]
    fn encoding_format_is_float_or_base64() {
        let e = err(json!({"model": ID, "input": "x", "encoding_format": "int8"}));
        assert_eq!(
            e,
            "encoding_format must be \"float\" or \"base64\" (got \"int8\")"
        );
        let f = plan(
            json!({"model": ID, "input": "x", "encoding_format": "base64"}),
            "text-embedding-004",
            RouteKind::Vertex,
        );
        let (v, _) = join(f, &[vertex_answer(0, 1, 1)]);
        assert!(v["data"][0]["embedding"].is_string());
        let f = plan(
            json!({"model": ID, "input": "x"}),
            "text-embedding-004",
            RouteKind::Vertex,
        );
        let (v, _) = join(f, &[vertex_answer(0, 1, 1)]);
        assert!(v["data"][0]["embedding"].is_array(), "float by default");
    }

    #[test]
    fn unknown_upstream_models_get_cautious_limits() {
        assert_eq!(EmbedModel::of("text-embedding-004").max_dims, 768);
        let other = EmbedModel::of("gemini-embedding-2-preview");
        assert_eq!((other.max_dims, other.vertex_max_instances), (3072, 1));
    }

    #[test]
    fn missing_credentials_are_reported() {
        let bytes = br#"{"model":"m","input":"x"}"#;
        let raw = RawRequest::parse(bytes, Operation::Embeddings).unwrap();
        let m = embed_model("text-embedding-004");
        for (kind, want) in [
            (RouteKind::GeminiApi, "gemini"),
            (RouteKind::Vertex, "vertex project"),
        ] {
            let r = route(kind, None);
            let t = Target {
                model: &m,
                route: &r,
                op: Operation::Embeddings,
                stream: false,
                max_cache_ttl: crate::providers::DEFAULT_MAX_CACHE_TTL,
                forward: &[],
            };
            let e = super::super::Gemini
                .plan(&raw, &t, &Credentials::default())
                .unwrap_err();
            assert_eq!(e, GatewayError::MissingCredentials(want));
        }
    }
}
