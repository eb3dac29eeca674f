//! Gemini `generateContent` family, shared by the Developer API (`/v1beta/models/…`) and Vertex
//! (`vertex.rs` calls [`generate`] / [`count_tokens`]), plus the Developer API's embeddings and
//! explicit context caches. Shapes follow the captured fixtures: buffered
//! `gemini-generate-*.json`, `gemini-function-call-*.json`, streams `gemini-stream-*.sse`
//! (`\r\n\r\n` separators, no `[DONE]`), `gemini-count-tokens.json`,
//! `gemini-batch-embed-contents.json`, `gemini-prompt-blocked-safety-vertex.json`.
//!
//! Model ids are the registry's (`models.rs`): an id the surface does not serve (retired,
//! misspelt, or an embedding model asked to generate) gets fixture
//! `gemini-error-404-model-not-found-devapi.json` (Vertex: the publisher-model 404).
//!
//! Validates, with the real 400 bodies (`docs/wire.md`, the Gemini sections):
//! - unknown fields (camelCase or snake_case accepted, like Google's JSON parser) at the top
//!   level, in `generationConfig`, `thinkingConfig`, `contents[].parts[]`, `functionCall`,
//!   `functionResponse`, `tools[]`, `functionDeclarations[]`, their OpenAPI-subset
//!   `parameters` / `responseSchema` (recursively: `properties`, `items`, `anyOf`), and
//!   `toolConfig` → "Invalid JSON payload received. Unknown name …";
//! - roles: only `user` / `model`; a missing role is `user` on the Developer API and a 400
//!   on Vertex; empty `contents` / empty `parts`; non-string `text`; `functionCall.args` and
//!   `functionResponse.response` must be objects;
//! - function-call ordering: a `functionResponse` turn must directly follow a `model` turn
//!   with as many `functionCall` parts; a `functionCall` turn must follow a user turn;
//! - Gemini 3: every `model` turn with calls after the last user text turn must carry a
//!   `thoughtSignature` on its first call; any signature must be one this simulator issued or
//!   `skip_thought_signature_validator`;
//! - Developer API, models `gemini-2.5` and later: non-zero `presencePenalty` /
//!   `frequencyPenalty` → fixture `gemini-error-400-penalty-not-enabled.json`;
//! - `thinkingConfig` (§3): budget and level together → fixture; `thinkingLevel` only on
//!   Gemini 3, per-model level lists (fixture wording); 2.5 budget ranges (Pro 128–32768 and
//!   never 0, Flash 0–24576, Flash-Lite 0 or 512–24576, −1 = dynamic everywhere);
//! - `cachedContent` (§7): unknown/expired → 404, combined with `systemInstruction`, `tools` or
//!   `toolConfig` → 400, different model → 400; cache creation below the minimum (2,048
//!   tokens on 2.5, 4,096 on 3.x and older models, per the newer docs the notes cite) → 400;
//! - `serviceTier`: Developer API `standard|flex|priority` (any case) reflected in
//!   `usageMetadata.serviceTier`; Vertex only accepts the `SERVICE_TIER_*` enum names and
//!   ignores them for billing (trafficType comes from headers, `vertex.rs`).
//!
//! Thinking: Gemini 3 and 2.5 Pro always think; 2.5 Flash thinks unless `thinkingBudget: 0`;
//! 2.5 Flash-Lite only with a non-zero budget; older models never. `includeThoughts` adds the
//! thought part. Thought signatures: Gemini 3 text answers carry one on the text part
//! (buffered) or on a trailing empty text part (stream); the first `functionCall` part carries
//! one on Gemini 3 and on thinking 2.5 turns.
//!
//! Tokens in what this module counts: system instruction texts, all `contents` parts (text
//! bytes; other parts as compact JSON; `functionCall` = name + args JSON, `functionResponse` =
//! name + response JSON) and the compact JSON of `tools`; explicit-cache tokens come on top.

use std::collections::HashMap;
use std::sync::Mutex;

use axum::http::StatusCode;
use axum::response::Response;
use bytes::Bytes;
use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::{Map, Value};

use crate::content::{
    self, apply_stop, call_tokens_with, cap_tokens, json_len, prompt_tok, random_id, split_pieces,
    tok, Markers,
};
use crate::faults::{self, Fault, StreamFault, Surface};
use crate::fixtures;
use crate::models::Kind;
use crate::respond::{self, JSON_GOOGLE};
use crate::{Req, Sim};

type R = Result<Response, Response>;

/// Where a generate request came in.
pub struct GenApi<'a> {
    pub version: &'a str,
    pub vertex: Option<VertexInfo<'a>>,
}

pub struct VertexInfo<'a> {
    pub project: &'a str,
    pub location: &'a str,
    pub traffic_type: &'static str,
}

// ---------------------------------------------------------------------------------------------
// Field tables
// ---------------------------------------------------------------------------------------------

const TOP_DEV: &[&str] = &[
    "model",
    "contents",
    "systemInstruction",
    "tools",
    "toolConfig",
    "safetySettings",
    "generationConfig",
    "cachedContent",
    "serviceTier",
];
const TOP_VERTEX: &[&str] = &[
    "model",
    "contents",
    "systemInstruction",
    "tools",
    "toolConfig",
    "safetySettings",
    "generationConfig",
    "cachedContent",
    "labels",
    "serviceTier",
    "modelArmorConfig",
];
const GEN_CONFIG: &[&str] = &[
    "stopSequences",
    "responseMimeType",
    "responseSchema",
    "responseJsonSchema",
    "_responseJsonSchema",
    "responseModalities",
    "candidateCount",
    "maxOutputTokens",
    "temperature",
    "topP",
    "topK",
    "seed",
    "presencePenalty",
    "frequencyPenalty",
    "responseLogprobs",
    "logprobs",
    "enableEnhancedCivicAnswers",
    "speechConfig",
    "thinkingConfig",
    "imageConfig",
    "mediaResolution",
    "audioTimestamp",
    "routingConfig",
    "modelSelectionConfig",
];
const THINKING: &[&str] = &["includeThoughts", "thinkingBudget", "thinkingLevel"];
const CONTENT: &[&str] = &["role", "parts"];
const PART: &[&str] = &[
    "text",
    "inlineData",
    "fileData",
    "functionCall",
    "functionResponse",
    "executableCode",
    "codeExecutionResult",
    "thought",
    "thoughtSignature",
    "videoMetadata",
    "partMetadata",
    "mediaResolution",
];
const FUNCTION_CALL: &[&str] = &["id", "name", "args", "partialArgs", "willContinue"];
const FUNCTION_RESPONSE: &[&str] = &[
    "id",
    "name",
    "response",
    "parts",
    "willContinue",
    "scheduling",
];
const TOOL: &[&str] = &[
    "functionDeclarations",
    "googleSearch",
    "googleSearchRetrieval",
    "codeExecution",
    "urlContext",
    "retrieval",
    "fileSearch",
    "computerUse",
    "googleMaps",
    "enterpriseWebSearch",
    "mcpServers",
];
const FUNCTION_DECL: &[&str] = &[
    "name",
    "description",
    "parameters",
    "parametersJsonSchema",
    "response",
    "responseJsonSchema",
    "behavior",
];
const SCHEMA: &[&str] = &[
    "type",
    "format",
    "title",
    "description",
    "nullable",
    "enum",
    "maxItems",
    "minItems",
    "properties",
    "required",
    "minProperties",
    "maxProperties",
    "minLength",
    "maxLength",
    "pattern",
    "example",
    "anyOf",
    "propertyOrdering",
    "default",
    "items",
    "minimum",
    "maximum",
];
const TOOL_CONFIG: &[&str] = &["functionCallingConfig", "retrievalConfig"];
const FCC: &[&str] = &["mode", "allowedFunctionNames"];
const CACHE_FIELDS: &[&str] = &[
    "name",
    "model",
    "displayName",
    "contents",
    "systemInstruction",
    "tools",
    "toolConfig",
    "ttl",
    "expireTime",
    "kmsKeyName",
    "encryptionSpec",
];
const EMBED_FIELDS: &[&str] = &[
    "model",
    "content",
    "taskType",
    "title",
    "outputDimensionality",
];
const TASK_TYPES: &[&str] = &[
    "TASK_TYPE_UNSPECIFIED",
    "RETRIEVAL_QUERY",
    "RETRIEVAL_DOCUMENT",
    "SEMANTIC_SIMILARITY",
    "CLASSIFICATION",
    "CLUSTERING",
    "QUESTION_ANSWERING",
    "FACT_VERIFICATION",
    "CODE_RETRIEVAL_QUERY",
];

pub const SKIP_SIGNATURE: &str = "skip_thought_signature_validator";

fn camel(key: &str) -> String {
    let mut out = String::with_capacity(key.len());
    let mut up = false;
    for c in key.chars() {
        if c == '_' && !out.is_empty() {
            up = true;
        } else if up {
            out.extend(c.to_uppercase());
            up = false;
        } else {
            out.push(c);
        }
    }
    out
}

fn known(list: &[&str], key: &str) -> bool {
    list.contains(&key) || (key.contains('_') && list.contains(&camel(key).as_str()))
}

/// A field under either spelling (`fooBar` or `foo_bar`).
pub fn field<'a>(obj: &'a Map<String, Value>, camel_name: &str) -> Option<&'a Value> {
    if let Some(v) = obj.get(camel_name) {
        return Some(v);
    }
    if !camel_name.chars().any(|c| c.is_ascii_uppercase()) {
        return None;
    }
    let mut snake = String::with_capacity(camel_name.len() + 4);
    for c in camel_name.chars() {
        if c.is_ascii_uppercase() {
            snake.push('_');
            snake.push(c.to_ascii_lowercase());
        } else {
            snake.push(c);
        }
    }
    obj.get(&snake)
}

fn check_keys(
    obj: &Map<String, Value>,
    list: &[&str],
    path: &str,
    out: &mut Vec<(String, String)>,
) {
    for k in obj.keys() {
        if !known(list, k) {
            out.push((path.to_owned(), k.clone()));
        }
    }
}

fn check_schema(v: &Value, path: &str, out: &mut Vec<(String, String)>) {
    let Some(obj) = v.as_object() else { return };
    check_keys(obj, SCHEMA, path, out);
    if let Some(Value::Object(props)) = field(obj, "properties") {
        for (i, (_, pv)) in props.iter().enumerate() {
            check_schema(pv, &format!("{path}.properties[{i}].value"), out);
        }
    }
    if let Some(items) = field(obj, "items") {
        check_schema(items, &format!("{path}.items"), out);
    }
    if let Some(Value::Array(any)) = field(obj, "anyOf") {
        for (i, a) in any.iter().enumerate() {
            check_schema(a, &format!("{path}.any_of[{i}]"), out);
        }
    }
}

fn check_content(c: &Value, path: &str, out: &mut Vec<(String, String)>) {
    let Some(obj) = c.as_object() else { return };
    check_keys(obj, CONTENT, path, out);
    let Some(Value::Array(parts)) = obj.get("parts") else {
        return;
    };
    for (j, p) in parts.iter().enumerate() {
        let Some(po) = p.as_object() else { continue };
        let ppath = format!("{path}.parts[{j}]");
        check_keys(po, PART, &ppath, out);
        if let Some(Value::Object(fc)) = field(po, "functionCall") {
            check_keys(fc, FUNCTION_CALL, &format!("{ppath}.function_call"), out);
        }
        if let Some(Value::Object(fr)) = field(po, "functionResponse") {
            check_keys(
                fr,
                FUNCTION_RESPONSE,
                &format!("{ppath}.function_response"),
                out,
            );
        }
    }
}

fn check_tools(obj: &Map<String, Value>, prefix: &str, out: &mut Vec<(String, String)>) {
    if let Some(Value::Array(tools)) = field(obj, "tools") {
        for (i, t) in tools.iter().enumerate() {
            let Some(to) = t.as_object() else { continue };
            let tpath = format!("{prefix}tools[{i}]");
            check_keys(to, TOOL, &tpath, out);
            if let Some(Value::Array(decls)) = field(to, "functionDeclarations") {
                for (k, d) in decls.iter().enumerate() {
                    let Some(dobj) = d.as_object() else { continue };
                    let dpath = format!("{tpath}.function_declarations[{k}]");
                    check_keys(dobj, FUNCTION_DECL, &dpath, out);
                    if let Some(p) = field(dobj, "parameters") {
                        check_schema(p, &format!("{dpath}.parameters"), out);
                    }
                    if let Some(p) = field(dobj, "response") {
                        check_schema(p, &format!("{dpath}.response"), out);
                    }
                }
            }
        }
    }
    if let Some(Value::Object(tc)) = field(obj, "toolConfig") {
        let tcpath = format!("{prefix}tool_config");
        check_keys(tc, TOOL_CONFIG, &tcpath, out);
        if let Some(Value::Object(fcc)) = field(tc, "functionCallingConfig") {
            check_keys(fcc, FCC, &format!("{tcpath}.function_calling_config"), out);
        }
    }
}

/// Unknown-field violations of a generate request.
fn unknown_fields(obj: &Map<String, Value>, vertex: bool) -> Vec<(String, String)> {
    let mut out = Vec::new();
    check_keys(obj, if vertex { TOP_VERTEX } else { TOP_DEV }, "", &mut out);
    if let Some(Value::Object(gc)) = field(obj, "generationConfig") {
        check_keys(gc, GEN_CONFIG, "generation_config", &mut out);
        if let Some(Value::Object(tc)) = field(gc, "thinkingConfig") {
            check_keys(tc, THINKING, "generation_config.thinking_config", &mut out);
        }
        if let Some(s) = field(gc, "responseSchema") {
            check_schema(s, "generation_config.response_schema", &mut out);
        }
    }
    if let Some(Value::Array(contents)) = obj.get("contents") {
        for (i, c) in contents.iter().enumerate() {
            check_content(c, &format!("contents[{i}]"), &mut out);
        }
    }
    if let Some(si) = field(obj, "systemInstruction") {
        check_content(si, "system_instruction", &mut out);
    }
    check_tools(obj, "", &mut out);
    out
}

// ---------------------------------------------------------------------------------------------
// Model families
// ---------------------------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq)]
enum Family {
    G3,
    G25Pro,
    G25Flash,
    G25Lite,
    Old,
}

/// Leading version number of a `gemini-X.Y-…` id (unversioned aliases count as 2.5).
fn version(model: &str) -> f32 {
    model
        .strip_prefix("gemini-")
        .and_then(|r| r.split('-').next())
        .and_then(|v| v.parse::<f32>().ok())
        .unwrap_or(2.5)
}

fn family(model: &str) -> Family {
    let v = version(model);
    if v >= 3.0 {
        Family::G3
    } else if v >= 2.5 {
        if model.contains("flash-lite") {
            Family::G25Lite
        } else if model.contains("pro") {
            Family::G25Pro
        } else {
            Family::G25Flash
        }
    } else {
        Family::Old
    }
}

/// Thinking levels per model (Vertex model guides, Nov 2026): 3.7 and 3.8 Flash dropped
/// `minimal`; 3 Pro Preview had only two levels.
fn g3_levels(model: &str) -> &'static [&'static str] {
    if model.contains("flash") && version(model) < 3.65 {
        &["minimal", "low", "medium", "high"]
    } else if model.contains("pro") && version(model) < 3.05 {
        &["low", "high"]
    } else {
        &["low", "medium", "high"]
    }
}

/// Whether `surface` (Gemini or Vertex) serves `model` as `kind`: the registry decides.
fn serves(sim: &Sim, vertex: bool, model: &str, kind: Kind) -> bool {
    let surface = if vertex {
        Surface::Vertex
    } else {
        Surface::Gemini
    };
    sim.models.google(surface, model, kind).is_some()
}

/// Full (default) embedding width of a model.
pub fn embedding_width(model: &str) -> usize {
    if model.starts_with("gemini-embedding") {
        3072
    } else {
        768
    }
}

/// Minimum explicit-cache size (`docs/wire.md#gemini-context-caching`; Vertex 2,048).
fn cache_minimum(model: &str, vertex: bool) -> u64 {
    if vertex {
        return 2048;
    }
    match family(model) {
        Family::G25Pro | Family::G25Flash | Family::G25Lite => 2048,
        _ => 4096,
    }
}

// ---------------------------------------------------------------------------------------------
// Request walking
// ---------------------------------------------------------------------------------------------

/// The text of the last user turn and how many function responses it holds.
pub fn last_user_turn(contents: Option<&Value>) -> (String, usize) {
    let Some(Value::Array(cs)) = contents else {
        return (String::new(), 0);
    };
    for c in cs.iter().rev() {
        let role = c.get("role").and_then(Value::as_str).unwrap_or("user");
        if role != "user" {
            continue;
        }
        let mut text = String::new();
        let mut results = 0;
        if let Some(Value::Array(parts)) = c.get("parts") {
            for p in parts {
                if let Some(t) = p.get("text").and_then(Value::as_str) {
                    text.push_str(t);
                }
                if p.get("functionResponse")
                    .or_else(|| p.get("function_response"))
                    .is_some()
                {
                    results += 1;
                }
            }
        }
        return (text, results);
    }
    (String::new(), 0)
}

/// Prompt bytes and billable (non-whitespace) characters of contents/system/tools.
pub fn prompt_size(obj: &Map<String, Value>) -> (usize, usize) {
    let mut bytes = 0;
    let mut chars = 0;
    let mut part_size = |p: &Value| {
        let Some(po) = p.as_object() else { return };
        if let Some(t) = po.get("text").and_then(Value::as_str) {
            bytes += t.len();
            chars += t.chars().filter(|c| !c.is_whitespace()).count();
        } else if let Some(Value::Object(fc)) = field(po, "functionCall") {
            bytes += fc.get("name").and_then(Value::as_str).map_or(0, str::len)
                + fc.get("args").map_or(0, json_len);
        } else if let Some(Value::Object(fr)) = field(po, "functionResponse") {
            bytes += fr.get("name").and_then(Value::as_str).map_or(0, str::len)
                + fr.get("response").map_or(0, json_len);
        } else {
            bytes += json_len(p);
        }
    };
    if let Some(si) = field(obj, "systemInstruction") {
        if let Some(Value::Array(parts)) = si.get("parts") {
            parts.iter().for_each(&mut part_size);
        }
    }
    if let Some(Value::Array(cs)) = obj.get("contents") {
        for c in cs {
            if let Some(Value::Array(parts)) = c.get("parts") {
                parts.iter().for_each(&mut part_size);
            }
        }
    }
    if let Some(t) = field(obj, "tools") {
        bytes += json_len(t);
    }
    (bytes, chars)
}

fn declared_functions(tools: Option<&Value>) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(Value::Array(ts)) = tools {
        for t in ts {
            let Some(to) = t.as_object() else { continue };
            if let Some(Value::Array(decls)) = field(to, "functionDeclarations") {
                for d in decls {
                    if let Some(n) = d.get("name").and_then(Value::as_str) {
                        out.push(n.to_owned());
                    }
                }
            }
        }
    }
    out
}

/// Which functions to call (empty = answer with text), per markers and `toolConfig` mode.
fn choose_calls(
    tools: Option<&Value>,
    tool_config: Option<&Value>,
    markers: &Markers,
) -> Vec<String> {
    let declared = declared_functions(tools);
    if declared.is_empty() {
        return Vec::new();
    }
    let fcc = tool_config
        .and_then(Value::as_object)
        .and_then(|tc| field(tc, "functionCallingConfig"))
        .and_then(Value::as_object);
    let mode = fcc
        .and_then(|f| f.get("mode"))
        .and_then(Value::as_str)
        .unwrap_or("AUTO")
        .to_ascii_uppercase();
    let allowed: Vec<String> = fcc
        .and_then(|f| field(f, "allowedFunctionNames"))
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .filter(|a: &Vec<String>| !a.is_empty())
        .unwrap_or_else(|| declared.clone());
    let n = markers.parallel.unwrap_or(1);
    let name = match mode.as_str() {
        "NONE" => None,
        "ANY" => markers
            .call
            .clone()
            .filter(|c| allowed.contains(c))
            .or_else(|| allowed.first().cloned()),
        _ => match &markers.call {
            Some(c) if declared.contains(c) => Some(c.clone()),
            Some(_) => None,
            None if markers.parallel.is_some() => declared.first().cloned(),
            None => None,
        },
    };
    name.map(|n0| vec![n0; n]).unwrap_or_default()
}

// ---------------------------------------------------------------------------------------------
// Validation
// ---------------------------------------------------------------------------------------------

/// `contents` as Google checks them: each turn's role and parts, call/response pairing, and on
/// Gemini 3 the thought signatures of the current turn's calls.
fn validate_contents(
    contents: &[Value],
    vertex: bool,
    g3: bool,
    path0: &str,
) -> Result<(), Response> {
    // Current turn: after the last user turn that has something other than function responses.
    let mut current_start = 0;
    for (i, c) in contents.iter().enumerate() {
        let Some(obj) = c.as_object() else {
            return Err(fixtures::invalid_value(
                &format!("{path0}[{i}]"),
                "type.googleapis.com/google.ai.generativelanguage.v1beta.Content",
                c,
            ));
        };
        let role = turn_role(obj, vertex)?;
        let parts = match obj.get("parts") {
            Some(Value::Array(p)) if !p.is_empty() => p,
            _ => {
                return Err(fixtures::invalid_argument(&format!(
                "* GenerateContentRequest.{path0}[{i}].parts: contents.parts must not be empty.\n"
            )))
            }
        };
        let counts = check_parts(parts, g3, &format!("{path0}[{i}]"))?;
        check_pairing(contents, i, &counts)?;
        if role == "user" && counts.other > 0 {
            current_start = i;
        }
    }
    if g3 {
        check_call_signatures(contents, current_start)?;
    }
    Ok(())
}

/// A turn's role: `user` or `model` (absent or empty means `user` on the Developer API).
fn turn_role(obj: &Map<String, Value>, vertex: bool) -> Result<&str, Response> {
    let role_err = || fixtures::invalid_argument("Please use a valid role: user, model.");
    match obj.get("role") {
        None if vertex => Err(role_err()),
        None => Ok("user"),
        Some(Value::String(r)) if r == "user" || r == "model" => Ok(r.as_str()),
        Some(Value::String(r)) if r.is_empty() && !vertex => Ok("user"),
        Some(_) => Err(role_err()),
    }
}

/// How many parts of a turn are function calls, function responses, or anything else.
struct PartCounts {
    calls: usize,
    responses: usize,
    other: usize,
}

/// A turn's parts: string texts, object args and responses, and (Gemini 3) signatures we made.
fn check_parts(parts: &[Value], g3: bool, path: &str) -> Result<PartCounts, Response> {
    let mut n = PartCounts {
        calls: 0,
        responses: 0,
        other: 0,
    };
    for (j, p) in parts.iter().enumerate() {
        let Some(po) = p.as_object() else { continue };
        let ppath = format!("{path}.parts[{j}]");
        if let Some(t) = po.get("text").filter(|t| !t.is_string()) {
            return Err(fixtures::invalid_value(
                &format!("{ppath}.text"),
                "TYPE_STRING",
                t,
            ));
        }
        let (inner, what) = if let Some(Value::Object(fc)) = field(po, "functionCall") {
            n.calls += 1;
            (fc.get("args"), "function_call.args")
        } else if let Some(Value::Object(fr)) = field(po, "functionResponse") {
            n.responses += 1;
            (fr.get("response"), "function_response.response")
        } else {
            n.other += 1;
            (None, "")
        };
        if let Some(v) = inner.filter(|v| !v.is_object()) {
            return Err(fixtures::invalid_value(
                &format!("{ppath}.{what}"),
                "type.googleapis.com/google.protobuf.Struct",
                v,
            ));
        }
        let sig = field(po, "thoughtSignature").and_then(Value::as_str);
        if g3 && sig.is_some_and(|s| s != SKIP_SIGNATURE && !content::is_sim_signature(s)) {
            return Err(fixtures::invalid_argument("Corrupted thought signature."));
        }
    }
    Ok(n)
}

/// Function responses answer the model turn just before, one for one; function calls follow
/// a user turn.
fn check_pairing(contents: &[Value], i: usize, n: &PartCounts) -> Result<(), Response> {
    let prev = i.checked_sub(1).and_then(|k| contents.get(k));
    if n.responses > 0 {
        let prev_calls = prev
            .filter(|p| p.get("role").and_then(Value::as_str) == Some("model"))
            .and_then(|p| p.get("parts"))
            .and_then(Value::as_array)
            .map_or(0, |ps| {
                ps.iter().filter(|p| function_call(p).is_some()).count()
            });
        if prev_calls == 0 {
            return Err(fixtures::invalid_argument(
                "Please ensure that function response turn comes immediately after a function call turn.",
            ));
        }
        if prev_calls != n.responses {
            return Err(fixtures::invalid_argument(
                "Please ensure that the number of function response parts is equal to the number of function call parts of the function call turn.",
            ));
        }
    }
    let prev_user =
        prev.is_some_and(|p| p.get("role").and_then(Value::as_str).unwrap_or("user") == "user");
    if n.calls > 0 && !prev_user {
        return Err(fixtures::invalid_argument(
            "Please ensure that function call turn comes immediately after a user turn or after a function response turn.",
        ));
    }
    Ok(())
}

/// A part's function call, in either spelling.
fn function_call(p: &Value) -> Option<&Value> {
    p.get("functionCall").or_else(|| p.get("function_call"))
}

/// Gemini 3: in the current turn, each model turn's first function call carries a signature.
fn check_call_signatures(contents: &[Value], current_start: usize) -> Result<(), Response> {
    for (i, c) in contents.iter().enumerate().skip(current_start) {
        if c.get("role").and_then(Value::as_str) != Some("model") {
            continue;
        }
        let Some(Value::Array(parts)) = c.get("parts") else {
            continue;
        };
        let Some(p) = parts.iter().find(|p| function_call(p).is_some()) else {
            continue;
        };
        let has_sig = p
            .get("thoughtSignature")
            .or_else(|| p.get("thought_signature"))
            .is_some();
        if !has_sig {
            let name = function_call(p)
                .and_then(|f| f.get("name"))
                .and_then(Value::as_str)
                .unwrap_or("");
            return Err(fixtures::invalid_argument(&format!(
                "Function call is missing a thought_signature in functionCall parts. This is required for tools to work correctly, and missing thought_signature may lead to degraded model performance. Additional data, function call `default_api:{name}` , position {}. Please refer to https://ai.google.dev/gemini-api/docs/thought-signatures for more details.",
                i + 1
            )));
        }
    }
    Ok(())
}

/// Thinking decision: (thinks, include_thoughts).
fn thinking(
    model: &str,
    gc: Option<&Map<String, Value>>,
    vertex: bool,
) -> Result<(bool, bool), Response> {
    let tc = gc
        .and_then(|g| field(g, "thinkingConfig"))
        .and_then(Value::as_object);
    let budget = tc.and_then(|t| field(t, "thinkingBudget"));
    let level = tc.and_then(|t| field(t, "thinkingLevel"));
    let include = tc
        .and_then(|t| field(t, "includeThoughts"))
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let fam = family(model);
    if budget.is_some() && level.is_some() {
        return Err(fixtures::gemini_thinking_both());
    }
    let budget = match budget {
        None => None,
        Some(b) => match b.as_i64() {
            Some(n) => Some(n),
            None => {
                return Err(fixtures::invalid_value(
                    "generation_config.thinking_config.thinking_budget",
                    "TYPE_INT32",
                    b,
                ))
            }
        },
    };
    if let Some(l) = level {
        let lname = l.as_str().unwrap_or("").to_ascii_lowercase();
        let enum_ok = [
            "minimal",
            "low",
            "medium",
            "high",
            "thinking_level_unspecified",
        ]
        .contains(&lname.as_str());
        if !enum_ok {
            let ty = if vertex {
                "type.googleapis.com/google.cloud.aiplatform.v1.GenerationConfig.ThinkingConfig.ThinkingLevel"
            } else {
                "type.googleapis.com/google.ai.generativelanguage.v1beta.ThinkingConfig.ThinkingLevel"
            };
            return Err(fixtures::invalid_value(
                "generation_config.thinking_config.thinking_level",
                ty,
                l,
            ));
        }
        if fam != Family::G3 {
            return Err(fixtures::invalid_argument(
                "Thinking level is not supported for this model.",
            ));
        }
        if lname != "thinking_level_unspecified" && !g3_levels(model).contains(&lname.as_str()) {
            return Err(fixtures::gemini_level_unsupported(
                &lname.to_ascii_uppercase(),
            ));
        }
    }
    let range_err = |n: i64, lo: i64, hi: i64| {
        fixtures::invalid_argument(&format!(
            "The thinking budget {n} is invalid. Please choose a value between {lo} and {hi}."
        ))
    };
    let thinks = match fam {
        Family::G3 => true,
        Family::G25Pro => {
            match budget {
                Some(0) => {
                    return Err(fixtures::invalid_argument(
                        "Budget 0 is invalid. This model only works in thinking mode.",
                    ))
                }
                Some(n) if n != -1 && !(128..=32768).contains(&n) => {
                    return Err(range_err(n, 128, 32768))
                }
                _ => {}
            }
            true
        }
        Family::G25Flash => match budget {
            Some(n) if n != -1 && !(0..=24576).contains(&n) => return Err(range_err(n, 0, 24576)),
            Some(0) => false,
            _ => true,
        },
        Family::G25Lite => match budget {
            Some(n) if n != -1 && n != 0 && !(512..=24576).contains(&n) => {
                return Err(range_err(n, 512, 24576))
            }
            Some(0) | None => false,
            Some(_) => true,
        },
        Family::Old => false,
    };
    Ok((thinks, include && thinks))
}

// ---------------------------------------------------------------------------------------------
// Explicit caches
// ---------------------------------------------------------------------------------------------

#[derive(Clone)]
struct CacheEntry {
    name: String,
    model: String,
    display_name: Option<String>,
    create: DateTime<Utc>,
    update: DateTime<Utc>,
    expire: DateTime<Utc>,
    tokens: u64,
    tools: Option<Value>,
    tool_config: Option<Value>,
}

#[derive(Default)]
pub struct CacheStore {
    map: Mutex<HashMap<String, CacheEntry>>,
}

impl CacheStore {
    fn get(&self, name: &str) -> Option<CacheEntry> {
        let mut m = self.map.lock().ok()?;
        let now = Utc::now();
        m.retain(|_, e| e.expire > now);
        m.get(name).cloned()
    }

    pub fn clear(&self) {
        if let Ok(mut m) = self.map.lock() {
            m.clear();
        }
    }
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct CacheView<'a> {
    name: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    display_name: Option<&'a str>,
    model: &'a str,
    create_time: String,
    update_time: String,
    expire_time: String,
    usage_metadata: CacheUsage,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct CacheUsage {
    total_token_count: u64,
}

fn cache_view(e: &CacheEntry) -> CacheView<'_> {
    CacheView {
        name: &e.name,
        display_name: e.display_name.as_deref(),
        model: &e.model,
        create_time: content::rfc3339_nanos(e.create),
        update_time: content::rfc3339_nanos(e.update),
        expire_time: content::rfc3339_nanos(e.expire),
        usage_metadata: CacheUsage {
            total_token_count: e.tokens,
        },
    }
}

fn cache_not_found(name: &str, vertex: bool) -> Response {
    if vertex {
        fixtures::google_error(
            404,
            "NOT_FOUND",
            &format!("Not found: cache content metadata for {name}."),
            Vec::new(),
        )
    } else {
        fixtures::google_error(
            404,
            "NOT_FOUND",
            "CachedContent not found (or permission denied)",
            Vec::new(),
        )
    }
}

/// Parses a protobuf Duration (`"300s"`, `"1.5s"`).
fn parse_ttl(v: &Value) -> Option<chrono::Duration> {
    let s = v.as_str()?.strip_suffix('s')?;
    let secs: f64 = s.parse().ok()?;
    if !(0.0..=1e10).contains(&secs) {
        return None;
    }
    Some(chrono::Duration::milliseconds((secs * 1000.0) as i64))
}

fn ttl_or_expire(
    obj: &Map<String, Value>,
    now: DateTime<Utc>,
) -> Result<Option<DateTime<Utc>>, Response> {
    if let Some(t) = obj.get("ttl") {
        return match parse_ttl(t) {
            Some(d) => Ok(Some(now + d)),
            None => Err(fixtures::invalid_value(
                "cached_content.ttl",
                "type.googleapis.com/google.protobuf.Duration",
                t,
            )),
        };
    }
    if let Some(e) = field(obj, "expireTime") {
        return match e
            .as_str()
            .and_then(|s| DateTime::parse_from_rfc3339(s).ok())
        {
            Some(t) => Ok(Some(t.with_timezone(&Utc))),
            None => Err(fixtures::invalid_value(
                "cached_content.expire_time",
                "type.googleapis.com/google.protobuf.Timestamp",
                e,
            )),
        };
    }
    Ok(None)
}

/// `…/cachedContents[/{id}]` for both surfaces. `parent` is `""` (Developer API) or
/// `projects/P/locations/L/`; `id` is the trailing segment when present.
pub fn cache_admin(sim: &Sim, req: &Req, parent: &str, id: Option<&str>, vertex: bool) -> Response {
    match cache_admin_inner(sim, req, parent, id, vertex) {
        Ok(r) | Err(r) => r,
    }
}

fn cache_admin_inner(sim: &Sim, req: &Req, parent: &str, id: Option<&str>, vertex: bool) -> R {
    let method = req.method.as_str();
    match (method, id) {
        ("POST", None) => create_cache(sim, req, parent, vertex),
        ("GET", None) => {
            let m = sim
                .gcache
                .map
                .lock()
                .map_err(|_| respond::internal("cache lock"))?;
            let now = Utc::now();
            let mut entries: Vec<&CacheEntry> = m
                .values()
                .filter(|e| e.expire > now && e.name.starts_with(parent))
                .collect();
            entries.sort_by_key(|e| e.create);
            let views: Vec<CacheView> = entries.into_iter().map(cache_view).collect();
            let body = if views.is_empty() {
                serde_json::json!({})
            } else {
                serde_json::json!({ "cachedContents": views })
            };
            Ok(respond::json_pretty(StatusCode::OK, JSON_GOOGLE, &body))
        }
        ("GET", Some(id)) => {
            let name = format!("{parent}cachedContents/{id}");
            let e = sim
                .gcache
                .get(&name)
                .ok_or_else(|| cache_not_found(&name, vertex))?;
            Ok(respond::json_pretty(
                StatusCode::OK,
                JSON_GOOGLE,
                &cache_view(&e),
            ))
        }
        ("DELETE", Some(id)) => {
            let name = format!("{parent}cachedContents/{id}");
            sim.gcache
                .get(&name)
                .ok_or_else(|| cache_not_found(&name, vertex))?;
            if let Ok(mut m) = sim.gcache.map.lock() {
                m.remove(&name);
            }
            Ok(respond::raw(StatusCode::OK, JSON_GOOGLE, "{}\n"))
        }
        ("PATCH", Some(id)) => {
            let name = format!("{parent}cachedContents/{id}");
            sim.gcache
                .get(&name)
                .ok_or_else(|| cache_not_found(&name, vertex))?;
            let v = parse_body(req.body)?;
            let obj = v
                .as_object()
                .ok_or_else(|| fixtures::invalid_argument("Invalid JSON payload received."))?;
            let now = Utc::now();
            let expire = ttl_or_expire(obj, now)?;
            let mut m = sim
                .gcache
                .map
                .lock()
                .map_err(|_| respond::internal("cache lock"))?;
            let e = m
                .get_mut(&name)
                .ok_or_else(|| cache_not_found(&name, vertex))?;
            if let Some(x) = expire {
                e.expire = x;
            }
            e.update = now;
            Ok(respond::json_pretty(
                StatusCode::OK,
                JSON_GOOGLE,
                &cache_view(e),
            ))
        }
        _ => Err(fixtures::google_error(
            404,
            "NOT_FOUND",
            "Method not found.",
            Vec::new(),
        )),
    }
}

fn create_cache(sim: &Sim, req: &Req, parent: &str, vertex: bool) -> R {
    let v = parse_body(req.body)?;
    let obj = v
        .as_object()
        .ok_or_else(|| fixtures::invalid_argument("Invalid JSON payload received."))?;
    let mut unknown = Vec::new();
    check_keys(obj, CACHE_FIELDS, "", &mut unknown);
    if let Some(Value::Array(cs)) = obj.get("contents") {
        for (i, c) in cs.iter().enumerate() {
            check_content(c, &format!("contents[{i}]"), &mut unknown);
        }
    }
    if let Some(si) = field(obj, "systemInstruction") {
        check_content(si, "system_instruction", &mut unknown);
    }
    check_tools(obj, "", &mut unknown);
    if !unknown.is_empty() {
        return Err(fixtures::unknown_fields(&unknown));
    }
    let model_full = obj
        .get("model")
        .and_then(Value::as_str)
        .ok_or_else(|| fixtures::invalid_argument("* CachedContent.model: model is required.\n"))?;
    let model = model_full.rsplit('/').next().unwrap_or(model_full);
    if !serves(sim, vertex, model, Kind::Chat) {
        return Err(fixtures::gemini_model_not_found(
            model,
            "v1beta",
            "createCachedContent",
        ));
    }
    if let Some(Value::Array(cs)) = obj.get("contents") {
        validate_contents(cs, vertex, family(model) == Family::G3, "contents")?;
    }
    let (bytes, _) = prompt_size(obj);
    let tokens = if bytes == 0 { 0 } else { prompt_tok(bytes) };
    let min = cache_minimum(model, vertex);
    if tokens < min {
        return Err(fixtures::invalid_argument(&format!(
            "Cached content is too small. total_token_count={tokens}, min_total_token_count={min}"
        )));
    }
    let now = Utc::now();
    let expire = ttl_or_expire(obj, now)?.unwrap_or(now + chrono::Duration::hours(1));
    let id = if vertex {
        // Vertex cache ids are numeric.
        let mut st = content::fnv64(random_id(16).as_bytes());
        format!(
            "{}",
            content::splitmix(&mut st) % 10_000_000_000_000_000_000
        )
    } else {
        random_id(16).to_ascii_lowercase()
    };
    let entry = CacheEntry {
        name: format!("{parent}cachedContents/{id}"),
        model: model_full.to_owned(),
        display_name: field(obj, "displayName")
            .and_then(Value::as_str)
            .map(str::to_owned),
        create: now,
        update: now,
        expire,
        tokens,
        tools: field(obj, "tools").cloned(),
        tool_config: field(obj, "toolConfig").cloned(),
    };
    let resp = respond::json_pretty(StatusCode::OK, JSON_GOOGLE, &cache_view(&entry));
    sim.gcache
        .map
        .lock()
        .map_err(|_| respond::internal("cache lock"))?
        .insert(entry.name.clone(), entry);
    Ok(resp)
}

// ---------------------------------------------------------------------------------------------
// Response shapes
// ---------------------------------------------------------------------------------------------

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct GenResp<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    candidates: Option<Vec<Cand<'a>>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    prompt_feedback: Option<&'a Value>,
    usage_metadata: Usage<'a>,
    model_version: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    create_time: Option<&'a str>,
    response_id: &'a str,
}

#[derive(Serialize, Clone)]
#[serde(rename_all = "camelCase")]
struct Cand<'a> {
    content: CandContent<'a>,
    #[serde(skip_serializing_if = "Option::is_none")]
    finish_reason: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    index: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    finish_message: Option<&'static str>,
}

#[derive(Serialize, Clone)]
struct CandContent<'a> {
    #[serde(skip_serializing_if = "Vec::is_empty")]
    parts: Vec<Part<'a>>,
    role: &'static str,
}

#[derive(Serialize, Clone)]
#[serde(rename_all = "camelCase")]
struct Part<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    text: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    thought: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    function_call: Option<FnCall<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    thought_signature: Option<&'a str>,
}

#[derive(Serialize, Clone)]
struct FnCall<'a> {
    name: &'a str,
    args: &'a Value,
}

#[derive(Serialize, Clone, Copy)]
#[serde(rename_all = "camelCase")]
struct Modality {
    modality: &'static str,
    token_count: u64,
}

#[derive(Serialize, Default, Clone)]
#[serde(rename_all = "camelCase")]
struct Usage<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    prompt_token_count: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    candidates_token_count: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    total_token_count: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    cached_content_token_count: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    traffic_type: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    prompt_tokens_details: Option<Vec<Modality>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    cache_tokens_details: Option<[Modality; 1]>,
    #[serde(skip_serializing_if = "Option::is_none")]
    candidates_tokens_details: Option<[Modality; 1]>,
    #[serde(skip_serializing_if = "Option::is_none")]
    thoughts_token_count: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    service_tier: Option<&'a str>,
}

fn text_modality(n: u64) -> Option<[Modality; 1]> {
    Some([Modality {
        modality: "TEXT",
        token_count: n,
    }])
}

/// The prompt's split by modality: audio (`inlineData` with an `audio/*` type) apart.
fn prompt_modalities(prompt: u64, audio: u64) -> Option<Vec<Modality>> {
    let mut out = vec![Modality {
        modality: "TEXT",
        token_count: prompt - audio,
    }];
    if audio > 0 {
        out.push(Modality {
            modality: "AUDIO",
            token_count: audio,
        });
    }
    Some(out)
}

/// Tokens of the request's audio parts, by the same 4-bytes rule as the rest of the prompt.
fn audio_tokens(obj: &Map<String, Value>) -> u64 {
    let bytes: usize = obj
        .get("contents")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|c| c.get("parts").and_then(Value::as_array))
        .flatten()
        .filter_map(|p| field(p.as_object()?, "inlineData"))
        .filter(|d| {
            field(d.as_object().unwrap_or(&Map::new()), "mimeType")
                .and_then(Value::as_str)
                .is_some_and(|m| m.starts_with("audio/"))
        })
        .map(json_len)
        .sum();
    if bytes == 0 {
        0
    } else {
        tok(bytes)
    }
}

/// Everything decided about one answer.
struct Plan {
    prompt: u64,
    /// The part of `prompt` that is audio.
    audio: u64,
    cached: u64,
    thoughts: u64,
    thought_text: Option<String>,
    text: Option<String>,
    calls: Vec<String>,
    /// The calls' arguments (`Markers::call_args`).
    args: Value,
    candidates: u64,
    finish: &'static str,
    blocked: bool,
    signature: Option<String>,
    call_signature: Option<String>,
    g3: bool,
    n: u32,
    service_tier: Option<String>,
}

impl Plan {
    fn usage<'a>(
        &self,
        vertex: Option<&'a str>,
        tier: Option<&'a str>,
        candidates: u64,
    ) -> Usage<'a> {
        let total = self.prompt + candidates * u64::from(self.n) + self.thoughts;
        let cands = candidates * u64::from(self.n);
        Usage {
            prompt_token_count: Some(self.prompt),
            candidates_token_count: (cands > 0).then_some(cands),
            total_token_count: Some(total),
            cached_content_token_count: (self.cached > 0).then_some(self.cached),
            traffic_type: vertex,
            prompt_tokens_details: prompt_modalities(self.prompt, self.audio),
            cache_tokens_details: (self.cached > 0)
                .then(|| text_modality(self.cached))
                .flatten(),
            candidates_tokens_details: if vertex.is_some() && cands > 0 {
                text_modality(cands)
            } else {
                None
            },
            thoughts_token_count: (self.thoughts > 0).then_some(self.thoughts),
            service_tier: tier,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Entry points
// ---------------------------------------------------------------------------------------------

pub fn parse_body(body: &Bytes) -> Result<Value, Response> {
    if body.is_empty() {
        return Ok(Value::Object(Map::new()));
    }
    serde_json::from_slice(body).map_err(|e| {
        fixtures::invalid_argument(&format!(
            "Invalid JSON payload received. Unexpected token.\n(line {}, column {})",
            e.line(),
            e.column()
        ))
    })
}

/// Developer-API key check (`x-goog-api-key` header or `?key=`).
pub fn dev_auth(sim: &Sim, req: &Req) -> Result<(), Response> {
    let key = req
        .headers
        .get("x-goog-api-key")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
        .or_else(|| crate::query_param(req.query, "key"));
    match key {
        None => Err(fixtures::gemini_api_key_missing()),
        Some(k) if k == sim.cfg.gemini_key => Ok(()),
        Some(k) => Err(fixtures::gemini_api_key_invalid(&k)),
    }
}

/// `/v1beta/models/{model}:{method}` (and `/v1/…`).
pub fn handle_dev(sim: &Sim, req: &Req, version: &str, model: &str, method: &str) -> Response {
    if let Err(r) = dev_auth(sim, req) {
        return r;
    }
    let api = GenApi {
        version,
        vertex: None,
    };
    match method {
        "generateContent" => generate(sim, req, &api, model, false),
        "streamGenerateContent" => generate(sim, req, &api, model, true),
        "countTokens" => count_tokens(sim, req, &api, model),
        "embedContent" => embed(sim, req, version, model, false),
        "batchEmbedContents" => embed(sim, req, version, model, true),
        _ => fixtures::google_error(404, "NOT_FOUND", "Method not found.", Vec::new()),
    }
}

/// Fault answer before any byte of a Google response, or `None` to go on.
pub fn google_status_fault(f: &Fault, vertex: bool) -> Option<Response> {
    match f {
        Fault::Status(429) => Some(if vertex {
            fixtures::vertex_429()
        } else {
            fixtures::gemini_429_dev()
        }),
        Fault::Status(500) => Some(fixtures::gemini_500(vertex)),
        Fault::Status(_) => Some(fixtures::gemini_503()),
        Fault::Garbage => Some(fixtures::garbage_200()),
        _ => None,
    }
}

/// Every answer, errors included, carries Google's trace header (`<32 hex>/<span>;o=1`), the
/// id a gateway records when it reads no `responseId`.
pub fn generate(sim: &Sim, req: &Req, api: &GenApi, model: &str, stream: bool) -> Response {
    let r = match generate_inner(sim, req, api, model, stream) {
        Ok(r) | Err(r) => r,
    };
    respond::with_header(r, "x-cloud-trace-context", &trace_context())
}

/// A fresh `x-cloud-trace-context` value.
pub fn trace_context() -> String {
    let hex: String = random_id(32)
        .bytes()
        .map(|b| char::from(b"0123456789abcdef"[usize::from(b % 16)]))
        .collect();
    format!(
        "{hex}/{};o=1",
        u64::from(random_id(1).as_bytes()[0]) * 1_000_003
    )
}

fn generate_inner(sim: &Sim, req: &Req, api: &GenApi, model: &str, stream: bool) -> R {
    let vertex = api.vertex.is_some();
    let v = parse_body(req.body)?;
    let obj = v.as_object().ok_or_else(|| {
        fixtures::invalid_argument("Invalid JSON payload received. Expected an object.")
    })?;
    let (user_text, tool_results) = last_user_turn(obj.get("contents"));
    let markers = Markers::scan(&user_text);
    let latency = markers.latency_ms;
    let surface = if vertex {
        Surface::Vertex
    } else {
        Surface::Gemini
    };
    let fault = sim.pick_fault(&markers, surface);
    if let Some(r) = fault.as_ref().and_then(|f| google_status_fault(f, vertex)) {
        return Ok(respond::with_latency(r, latency));
    }
    let r = generate_validated(
        sim,
        req,
        api,
        model,
        stream,
        obj,
        &markers,
        &user_text,
        tool_results,
        fault,
    );
    Ok(respond::with_latency(r.unwrap_or_else(|e| e), latency))
}

#[allow(clippy::too_many_arguments)]
fn generate_validated(
    sim: &Sim,
    req: &Req,
    api: &GenApi,
    model: &str,
    stream: bool,
    obj: &Map<String, Value>,
    markers: &Markers,
    user_text: &str,
    tool_results: usize,
    fault: Option<Fault>,
) -> R {
    let vertex = api.vertex.is_some();
    check_model(sim, api, model, stream)?;
    let unknown = unknown_fields(obj, vertex);
    if !unknown.is_empty() {
        return Err(fixtures::unknown_fields(&unknown));
    }
    let g3 = family(model) == Family::G3;
    let gc = field(obj, "generationConfig").and_then(Value::as_object);
    let cache = cached_content(sim, obj, model, vertex)?;
    check_body(obj, model, vertex, g3, cache.is_some())?;
    let (thinks, include_thoughts) = thinking(model, gc, vertex)?;
    let service_tier = service_tier(obj, api, vertex)?;
    let ask = Ask {
        obj,
        gc,
        model,
        g3,
        thinks,
        include_thoughts,
        subject: content::user_subject(user_text, tool_results),
        blocked: matches!(fault, Some(Fault::Blocked)),
    };
    let plan = ask.plan(cache.as_ref(), markers, service_tier);
    let create_time = api
        .vertex
        .as_ref()
        .map(|_| content::rfc3339_micros(Utc::now()));
    let response_id = random_id(23);
    let tier = if vertex {
        None
    } else {
        Some(plan.service_tier.as_deref().unwrap_or("standard"))
    };
    let ctx = Render {
        plan: &plan,
        model,
        create_time: create_time.as_deref(),
        response_id: &response_id,
        traffic: api.vertex.as_ref().map(|v| v.traffic_type),
        tier,
        vertex,
    };
    if stream {
        let sse = crate::query_param(req.query, "alt").is_some_and(|a| a == "sse");
        return ctx.stream(sim, markers, sse, fault);
    }
    let body = serde_json::to_vec_pretty(&ctx.buffered())
        .map_err(|e| respond::internal(&e.to_string()))?;
    Ok(crate::buffered_with_fault(
        Bytes::from(body),
        JSON_GOOGLE,
        fault.as_ref(),
        || fixtures::gemini_500(vertex),
    ))
}

/// A model this surface generates with, else the surface's 404.
fn check_model(sim: &Sim, api: &GenApi, model: &str, stream: bool) -> Result<(), Response> {
    if serves(sim, api.vertex.is_some(), model, Kind::Chat) {
        return Ok(());
    }
    Err(match &api.vertex {
        Some(vi) => fixtures::vertex_model_not_found(vi.project, vi.location, "google", model),
        None => fixtures::gemini_model_not_found(
            model,
            api.version,
            if stream {
                "streamGenerateContent"
            } else {
                "generateContent"
            },
        ),
    })
}

/// The explicit cache the request names, checked as Google checks it: it must exist, be for
/// the same model, and the request must not repeat what it holds.
fn cached_content(
    sim: &Sim,
    obj: &Map<String, Value>,
    model: &str,
    vertex: bool,
) -> Result<Option<CacheEntry>, Response> {
    let Some(c) = field(obj, "cachedContent") else {
        return Ok(None);
    };
    let name = c.as_str().unwrap_or("");
    if field(obj, "systemInstruction").is_some()
        || field(obj, "tools").is_some()
        || field(obj, "toolConfig").is_some()
    {
        return Err(fixtures::invalid_argument(
            "CachedContent can not be used with GenerateContent request setting system_instruction, tools or tool_config.",
        ));
    }
    let e = sim
        .gcache
        .get(name)
        .ok_or_else(|| cache_not_found(name, vertex))?;
    let cache_model = e.model.rsplit('/').next().unwrap_or(&e.model);
    if cache_model != model {
        return Err(fixtures::invalid_argument(&format!(
            "Model used by GenerateContent request (models/{model}) and CachedContent ({}) has to be the same.",
            e.model
        )));
    }
    Ok(Some(e))
}

/// Contents (required unless a cache holds the prompt), the system instruction's text parts,
/// and the Developer API's refusal of penalties from 2.5 on.
fn check_body(
    obj: &Map<String, Value>,
    model: &str,
    vertex: bool,
    g3: bool,
    cached: bool,
) -> Result<(), Response> {
    match obj.get("contents") {
        Some(Value::Array(cs)) if !cs.is_empty() => validate_contents(cs, vertex, g3, "contents")?,
        _ if cached => {}
        _ => {
            return Err(fixtures::invalid_argument(
                "* GenerateContentRequest.contents: contents is not specified\n",
            ))
        }
    }
    let parts = field(obj, "systemInstruction")
        .and_then(|si| si.get("parts"))
        .and_then(Value::as_array);
    for (j, p) in parts.into_iter().flatten().enumerate() {
        if let Some(t) = p.get("text").filter(|t| !t.is_string()) {
            return Err(fixtures::invalid_value(
                &format!("system_instruction.parts[{j}].text"),
                "TYPE_STRING",
                t,
            ));
        }
    }
    let gc = field(obj, "generationConfig").and_then(Value::as_object);
    if !vertex && version(model) >= 2.5 {
        for name in ["presencePenalty", "frequencyPenalty"] {
            if gc
                .and_then(|g| field(g, name))
                .and_then(Value::as_f64)
                .is_some_and(|p| p != 0.0)
            {
                return Err(fixtures::gemini_penalty(model));
            }
        }
    }
    Ok(())
}

/// `serviceTier`: checked against the surface's enum; the Developer API echoes the tier it
/// served (`standard`, `flex`, `priority`), Vertex ignores it (it reads headers).
fn service_tier(
    obj: &Map<String, Value>,
    api: &GenApi,
    vertex: bool,
) -> Result<Option<String>, Response> {
    let Some(t) = field(obj, "serviceTier") else {
        return Ok(None);
    };
    let s = t.as_str().unwrap_or("");
    if vertex {
        const VERTEX_TIERS: [&str; 4] = [
            "SERVICE_TIER_UNSPECIFIED",
            "SERVICE_TIER_STANDARD",
            "SERVICE_TIER_FLEX",
            "SERVICE_TIER_PRIORITY",
        ];
        if !VERTEX_TIERS.contains(&s) {
            return Err(fixtures::invalid_value(
                "service_tier",
                &format!(
                    "type.googleapis.com/google.cloud.aiplatform.{}.ServiceTier",
                    api.version
                ),
                t,
            ));
        }
        return Ok(None);
    }
    let l = s.to_ascii_lowercase();
    let l = l.strip_prefix("service_tier_").unwrap_or(&l).to_owned();
    match l.as_str() {
        "standard" | "flex" | "priority" => Ok(Some(l)),
        "unspecified" => Ok(None),
        _ => Err(fixtures::invalid_value(
            "service_tier",
            "type.googleapis.com/google.ai.generativelanguage.v1beta.ServiceTier",
            t,
        )),
    }
}

/// What the answer is planned from.
struct Ask<'a> {
    obj: &'a Map<String, Value>,
    gc: Option<&'a Map<String, Value>>,
    model: &'a str,
    g3: bool,
    thinks: bool,
    include_thoughts: bool,
    subject: String,
    blocked: bool,
}

impl Ask<'_> {
    /// The answer: tool calls if the request's tools call for them, else text; nothing when
    /// blocked.
    fn plan(
        &self,
        cache: Option<&CacheEntry>,
        markers: &Markers,
        service_tier: Option<String>,
    ) -> Plan {
        let (bytes, _) = prompt_size(self.obj);
        let cached = cache.map_or(0, |c| c.tokens);
        let (thought_text, thoughts) = match (self.thinks, self.blocked) {
            (true, false) => {
                let t = content::thought_text(&self.subject);
                let n = tok(t.len());
                (self.include_thoughts.then_some(t), n)
            }
            _ => (None, 0),
        };
        let tools = cache
            .and_then(|c| c.tools.as_ref())
            .or_else(|| field(self.obj, "tools"));
        let tool_config = cache
            .and_then(|c| c.tool_config.as_ref())
            .or_else(|| field(self.obj, "toolConfig"));
        let calls = if self.blocked {
            Vec::new()
        } else {
            choose_calls(tools, tool_config, markers)
        };
        let n = self
            .gc
            .and_then(|g| field(g, "candidateCount"))
            .and_then(Value::as_u64)
            .unwrap_or(1)
            .clamp(1, 8) as u32;
        let prompt = prompt_tok(bytes) + cached;
        let mut plan = Plan {
            prompt,
            audio: audio_tokens(self.obj).min(prompt),
            cached,
            thoughts,
            thought_text,
            text: None,
            calls: Vec::new(),
            args: markers.call_args(),
            candidates: 0,
            finish: "STOP",
            blocked: self.blocked,
            signature: None,
            call_signature: None,
            g3: self.g3,
            n,
            service_tier,
        };
        if self.blocked {
            return plan;
        }
        if calls.is_empty() {
            self.text_answer(&mut plan);
        } else {
            plan.candidates = calls.iter().map(|c| call_tokens_with(c, &plan.args)).sum();
            if self.g3 || self.thinks {
                let what = format!("{}|call|{}", self.model, calls.join(","));
                plan.call_signature = Some(content::signature(&what));
            }
            plan.calls = calls;
        }
        plan
    }

    /// The text answer (JSON with a JSON mime type), cut at a stop sequence or what the
    /// output cap leaves after thinking.
    fn text_answer(&self, plan: &mut Plan) {
        let gc = self.gc;
        let json_mode = gc
            .and_then(|g| field(g, "responseMimeType"))
            .and_then(Value::as_str)
            .is_some_and(|m| m == "application/json");
        let full = if json_mode {
            content::reply_json(&self.subject)
        } else {
            content::reply_text(&self.subject)
        };
        let stops: Vec<String> = gc
            .and_then(|g| field(g, "stopSequences"))
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default();
        let (stopped, _) = apply_stop(&full, &stops);
        let cap = gc
            .and_then(|g| field(g, "maxOutputTokens"))
            .and_then(Value::as_u64);
        let (kept, cut) = match cap {
            Some(c) => cap_tokens(stopped, c.saturating_sub(plan.thoughts)),
            None => (stopped, false),
        };
        if cut {
            plan.finish = "MAX_TOKENS";
        }
        plan.candidates = tok(kept.len());
        if self.g3 && !kept.is_empty() {
            let what = format!("{}|text|{kept}", self.model);
            plan.signature = Some(content::signature(&what));
        }
        plan.text = Some(kept.to_owned());
    }
}

struct Render<'a> {
    plan: &'a Plan,
    model: &'a str,
    create_time: Option<&'a str>,
    response_id: &'a str,
    traffic: Option<&'a str>,
    tier: Option<&'a str>,
    vertex: bool,
}

impl<'a> Render<'a> {
    /// The streamed answer: SSE events (with `alt=sse`), else one JSON array as Google
    /// streams it without (`docs/wire.md#gemini-streaming`); stream faults apply to SSE.
    fn stream(&self, sim: &Sim, markers: &Markers, sse: bool, fault: Option<Fault>) -> R {
        let events = self.stream_chunks(sim.chunks(markers));
        if !sse {
            let mut out = Vec::with_capacity(1024);
            out.push(b'[');
            for (i, ev) in events.iter().enumerate() {
                if i > 0 {
                    out.extend_from_slice(b"\r\n,\r\n");
                }
                if serde_json::to_writer_pretty(&mut out, ev).is_err() {
                    return Err(respond::internal("render"));
                }
            }
            out.extend_from_slice(b"]");
            let body = faults::deliver(
                vec![Bytes::from(out)],
                std::time::Duration::ZERO,
                StreamFault::None,
            );
            return Ok(respond::streamed(StatusCode::OK, JSON_GOOGLE, body));
        }
        let rendered: Vec<Bytes> = events.iter().map(respond::sse_data_google).collect();
        let sf = match fault {
            Some(Fault::BreakAfter(k)) => StreamFault::BreakAfter(k),
            Some(Fault::Stall) => StreamFault::StallAfter(1),
            Some(Fault::ErrorEvent) => {
                StreamFault::ErrorTail(1, fixtures::gemini_midstream_error_tail())
            }
            Some(Fault::ErrorFirst) => {
                StreamFault::ErrorTail(0, fixtures::gemini_midstream_error_tail())
            }
            _ => StreamFault::None,
        };
        Ok(respond::sse(faults::deliver(
            rendered,
            sim.delay(markers),
            sf,
        )))
    }

    fn index(&self, i: u32) -> Option<u32> {
        if !self.vertex || self.plan.n > 1 {
            Some(i)
        } else {
            None
        }
    }

    fn cands(
        &self,
        parts: Vec<Part<'a>>,
        finish: Option<&'static str>,
        finish_message: Option<&'static str>,
    ) -> Vec<Cand<'a>> {
        (0..self.plan.n)
            .map(|i| Cand {
                content: CandContent {
                    parts: parts.clone(),
                    role: "model",
                },
                finish_reason: finish,
                index: self.index(i),
                finish_message,
            })
            .collect()
    }

    fn resp(&self, candidates: Option<Vec<Cand<'a>>>, usage: Usage<'a>) -> GenResp<'a> {
        GenResp {
            candidates,
            prompt_feedback: None,
            usage_metadata: usage,
            model_version: self.model,
            create_time: self.create_time,
            response_id: self.response_id,
        }
    }

    fn final_usage(&self) -> Usage<'a> {
        self.plan
            .usage(self.traffic, self.tier, self.plan.candidates)
    }

    fn call_parts(&self) -> Vec<Part<'a>> {
        self.plan
            .calls
            .iter()
            .enumerate()
            .map(|(i, name)| Part {
                text: None,
                thought: None,
                function_call: Some(FnCall {
                    name,
                    args: &self.plan.args,
                }),
                thought_signature: if i == 0 {
                    self.plan.call_signature.as_deref()
                } else {
                    None
                },
            })
            .collect()
    }

    fn thought_part(&self) -> Option<Part<'a>> {
        self.plan.thought_text.as_deref().map(|t| Part {
            text: Some(t),
            thought: Some(true),
            function_call: None,
            thought_signature: None,
        })
    }

    fn finish_message(&self) -> Option<&'static str> {
        (self.plan.g3 && !self.plan.calls.is_empty()).then_some("Model generated function call(s).")
    }

    fn buffered(&self) -> GenResp<'a> {
        if self.plan.blocked {
            let mut r = self.resp(None, self.plan.usage(self.traffic, self.tier, 0));
            r.prompt_feedback = Some(blocked_feedback());
            return r;
        }
        let mut parts: Vec<Part> = self.thought_part().into_iter().collect();
        if !self.plan.calls.is_empty() {
            parts.extend(self.call_parts());
        } else if let Some(t) = self.plan.text.as_deref().filter(|t| !t.is_empty()) {
            parts.push(Part {
                text: Some(t),
                thought: None,
                function_call: None,
                thought_signature: self.plan.signature.as_deref(),
            });
        }
        let cands = self.cands(parts, Some(self.plan.finish), self.finish_message());
        self.resp(Some(cands), self.final_usage())
    }

    fn running_usage(&self, candidates: u64) -> Usage<'a> {
        if self.vertex {
            Usage {
                traffic_type: self.traffic,
                ..Usage::default()
            }
        } else {
            self.plan.usage(None, self.tier, candidates)
        }
    }

    fn stream_chunks(&self, chunks: usize) -> Vec<GenResp<'a>> {
        let mut out = Vec::new();
        if self.plan.blocked {
            let mut r = self.resp(None, self.plan.usage(self.traffic, self.tier, 0));
            r.prompt_feedback = Some(blocked_feedback());
            out.push(r);
            return out;
        }
        if let Some(tp) = self.thought_part() {
            out.push(self.resp(
                Some(self.cands(vec![tp], None, None)),
                self.running_usage(0),
            ));
        }
        if !self.plan.calls.is_empty() {
            let c = self.cands(
                self.call_parts(),
                Some(self.plan.finish),
                self.finish_message(),
            );
            out.push(self.resp(Some(c), self.final_usage()));
            return out;
        }
        let text = self.plan.text.as_deref().unwrap_or("");
        let pieces = split_pieces(text, chunks);
        let g3_tail = self.plan.signature.is_some();
        let mut sent = 0usize;
        let count = pieces.len();
        for (i, piece) in pieces.into_iter().enumerate() {
            sent += piece.len();
            let last = i + 1 == count && !g3_tail;
            let part = Part {
                text: Some(piece),
                thought: None,
                function_call: None,
                thought_signature: None,
            };
            let finish = last.then_some(self.plan.finish);
            let usage = if last {
                self.final_usage()
            } else {
                self.running_usage(tok(sent))
            };
            out.push(self.resp(Some(self.cands(vec![part], finish, None)), usage));
        }
        if g3_tail {
            let part = Part {
                text: Some(""),
                thought: None,
                function_call: None,
                thought_signature: self.plan.signature.as_deref(),
            };
            out.push(self.resp(
                Some(self.cands(vec![part], Some(self.plan.finish), None)),
                self.final_usage(),
            ));
        } else if count == 0 {
            out.push(self.resp(
                Some(self.cands(Vec::new(), Some(self.plan.finish), None)),
                self.final_usage(),
            ));
        }
        out
    }
}

fn blocked_feedback() -> &'static Value {
    static V: std::sync::OnceLock<Value> = std::sync::OnceLock::new();
    V.get_or_init(fixtures::gemini_prompt_feedback_blocked)
}

// ---------------------------------------------------------------------------------------------
// countTokens
// ---------------------------------------------------------------------------------------------

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct CountResp {
    total_tokens: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    total_billable_characters: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    cached_content_token_count: Option<u64>,
    prompt_tokens_details: [Modality; 1],
}

pub fn count_tokens(sim: &Sim, req: &Req, api: &GenApi, model: &str) -> Response {
    match count_inner(sim, req, api, model) {
        Ok(r) | Err(r) => r,
    }
}

fn count_inner(sim: &Sim, req: &Req, api: &GenApi, model: &str) -> R {
    let vertex = api.vertex.is_some();
    let v = parse_body(req.body)?;
    let obj = v
        .as_object()
        .ok_or_else(|| fixtures::invalid_argument("Invalid JSON payload received."))?;
    let inner = field(obj, "generateContentRequest").and_then(Value::as_object);
    let (text, _) = last_user_turn(inner.unwrap_or(obj).get("contents"));
    let markers = Markers::scan(&text);
    let surface = if vertex {
        Surface::Vertex
    } else {
        Surface::Gemini
    };
    if let Some(f) = sim.pick_fault(&markers, surface) {
        if let Some(r) = google_status_fault(&f, vertex) {
            return Ok(r);
        }
    }
    if !serves(sim, vertex, model, Kind::Chat) && !serves(sim, vertex, model, Kind::Embedding) {
        return Err(match &api.vertex {
            Some(vi) => fixtures::vertex_model_not_found(vi.project, vi.location, "google", model),
            None => fixtures::gemini_model_not_found(model, api.version, "countTokens"),
        });
    }
    let top: &[&str] = if vertex {
        &[
            "model",
            "contents",
            "systemInstruction",
            "tools",
            "generationConfig",
            "instances",
        ]
    } else {
        &["contents", "generateContentRequest"]
    };
    let mut unknown = Vec::new();
    check_keys(obj, top, "", &mut unknown);
    if let Some(Value::Array(cs)) = obj.get("contents") {
        for (i, c) in cs.iter().enumerate() {
            check_content(c, &format!("contents[{i}]"), &mut unknown);
        }
    }
    if let Some(gcr) = inner {
        check_keys(gcr, TOP_DEV, "generate_content_request", &mut unknown);
    }
    if !unknown.is_empty() {
        return Err(fixtures::unknown_fields(&unknown));
    }
    let target = inner.unwrap_or(obj);
    if let Some(Value::Array(cs)) = target.get("contents") {
        validate_contents(cs, vertex, false, "contents")?;
    }
    let (bytes, chars) = prompt_size(target);
    let cached = inner
        .and_then(|g| field(g, "cachedContent"))
        .and_then(Value::as_str)
        .and_then(|n| sim.gcache.get(n))
        .map(|e| e.tokens);
    let total = if bytes == 0 { 0 } else { prompt_tok(bytes) } + cached.unwrap_or(0);
    let resp = CountResp {
        total_tokens: total,
        total_billable_characters: vertex.then_some(chars as u64),
        cached_content_token_count: cached,
        prompt_tokens_details: [Modality {
            modality: "TEXT",
            token_count: total,
        }],
    };
    Ok(respond::json_pretty(StatusCode::OK, JSON_GOOGLE, &resp))
}

// ---------------------------------------------------------------------------------------------
// Developer API embeddings
// ---------------------------------------------------------------------------------------------

/// A vector as Google writes it: each value an `f32` in its shortest form (`-0.039315943`),
/// never widened to `f64`'s seventeen digits.
#[derive(Serialize)]
struct Values {
    values: Vec<f32>,
}

#[derive(Serialize)]
struct Embedded {
    embedding: Values,
}

#[derive(Serialize)]
struct BatchEmbedded {
    embeddings: Vec<Values>,
}

fn embed_one(obj: &Map<String, Value>, model: &str, path: &str) -> Result<Values, Response> {
    if let Some(t) = field(obj, "taskType") {
        if !t.as_str().is_some_and(|s| TASK_TYPES.contains(&s)) {
            let p = if path.is_empty() {
                "task_type".to_owned()
            } else {
                format!("{path}.task_type")
            };
            return Err(fixtures::invalid_value(
                &p,
                "type.googleapis.com/google.ai.generativelanguage.v1beta.TaskType",
                t,
            ));
        }
    }
    let content = obj
        .get("content")
        .and_then(Value::as_object)
        .ok_or_else(|| {
            fixtures::invalid_argument("* EmbedContentRequest.content: content is not specified\n")
        })?;
    let mut text = String::new();
    if let Some(Value::Array(parts)) = content.get("parts") {
        for p in parts {
            if let Some(t) = p.get("text").and_then(Value::as_str) {
                text.push_str(t);
            }
        }
    }
    let full = embedding_width(model);
    let dims = field(obj, "outputDimensionality")
        .and_then(Value::as_u64)
        .filter(|d| *d > 0)
        .map_or(full, |d| (d as usize).min(full));
    Ok(Values {
        values: content::embedding(&text, full, dims),
    })
}

fn embed(sim: &Sim, req: &Req, version: &str, model: &str, batch: bool) -> Response {
    match embed_inner(sim, req, version, model, batch) {
        Ok(r) | Err(r) => r,
    }
}

fn embed_inner(sim: &Sim, req: &Req, version: &str, model: &str, batch: bool) -> R {
    let v = parse_body(req.body)?;
    let obj = v
        .as_object()
        .ok_or_else(|| fixtures::invalid_argument("Invalid JSON payload received."))?;
    let mut markers = Markers::default();
    let mut scan = |o: &Map<String, Value>| {
        if let Some(Value::Array(parts)) = o.get("content").and_then(|c| c.get("parts")) {
            for p in parts {
                if let Some(t) = p.get("text").and_then(Value::as_str) {
                    markers.scan_into(t);
                }
            }
        }
    };
    let requests: Vec<&Map<String, Value>> = if batch {
        obj.get("requests")
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(Value::as_object).collect())
            .unwrap_or_default()
    } else {
        vec![obj]
    };
    requests.iter().for_each(|o| scan(o));
    let fault = sim.pick_fault(&markers, Surface::Gemini);
    if let Some(r) = fault.as_ref().and_then(|f| google_status_fault(f, false)) {
        return Ok(respond::with_latency(r, markers.latency_ms));
    }
    let method = if batch {
        "batchEmbedContents"
    } else {
        "embedContent"
    };
    if !serves(sim, false, model, Kind::Embedding) {
        return Err(fixtures::gemini_model_not_found(model, version, method));
    }
    let mut unknown = Vec::new();
    if batch {
        check_keys(obj, &["requests"], "", &mut unknown);
        for (i, r) in requests.iter().enumerate() {
            check_keys(r, EMBED_FIELDS, &format!("requests[{i}]"), &mut unknown);
        }
    } else {
        check_keys(obj, EMBED_FIELDS, "", &mut unknown);
    }
    if !unknown.is_empty() {
        return Err(fixtures::unknown_fields(&unknown));
    }
    let body = if batch {
        if requests.len() > 100 {
            return Err(fixtures::gemini_batch_limit());
        }
        if requests.is_empty() {
            return Err(fixtures::invalid_argument(
                "* BatchEmbedContentsRequest.requests: requests is not specified\n",
            ));
        }
        let mut embeddings = Vec::with_capacity(requests.len());
        for (i, r) in requests.iter().enumerate() {
            if let Some(m) = r.get("model").and_then(Value::as_str) {
                if m.rsplit('/').next() != Some(model) {
                    return Err(fixtures::invalid_argument(&format!(
                        "* BatchEmbedContentsRequest.requests[{i}].model: the model of each request must match the batch model (models/{model}).\n"
                    )));
                }
            }
            embeddings.push(embed_one(r, model, &format!("requests[{i}]"))?);
        }
        serde_json::to_vec_pretty(&BatchEmbedded { embeddings })
    } else {
        let embedding = embed_one(obj, model, "")?;
        serde_json::to_vec_pretty(&Embedded { embedding })
    };
    let body = body.map_err(|e| respond::internal(&e.to_string()))?;
    Ok(respond::with_latency(
        crate::buffered_with_fault(Bytes::from(body), JSON_GOOGLE, fault.as_ref(), || {
            fixtures::gemini_500(false)
        }),
        markers.latency_ms,
    ))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;
    use serde_json::json;

    #[test]
    fn families_and_versions() {
        assert_eq!(family("gemini-2.5-flash"), Family::G25Flash);
        assert_eq!(family("gemini-2.5-flash-lite"), Family::G25Lite);
        assert_eq!(family("gemini-2.5-pro"), Family::G25Pro);
        assert_eq!(family("gemini-3-pro-preview"), Family::G3);
        assert_eq!(family("gemini-2.0-flash"), Family::Old);
        assert_eq!(g3_levels("gemini-3-pro-preview"), &["low", "high"]);
        assert_eq!(g3_levels("gemini-3.6-flash")[0], "minimal");
        assert_eq!(g3_levels("gemini-3.8-flash"), &["low", "medium", "high"]);
        assert_eq!(
            g3_levels("gemini-3.1-pro-preview"),
            &["low", "medium", "high"]
        );
    }

    #[test]
    fn unknown_field_paths() {
        let v = json!({
            "contents": [{"role":"user","parts":[{"text":"hi","type":"text"}]}],
            "generation_config": {"max_output_tokens": 5, "response_format": {}, "thinking_config": {"budget": 1}},
            "tools": [{"functionDeclarations": [{"name":"f","parameters":{"type":"object","additionalProperties":false,
                "properties":{"a":{"type":"string","const":"x"}}}}]}],
            "stream": true
        });
        let u = unknown_fields(v.as_object().unwrap(), false);
        let names: Vec<(&str, &str)> = u.iter().map(|(a, b)| (a.as_str(), b.as_str())).collect();
        assert!(names.contains(&("", "stream")));
        assert!(names.contains(&("generation_config", "response_format")));
        assert!(names.contains(&("generation_config.thinking_config", "budget")));
        assert!(names.contains(&("contents[0].parts[0]", "type")));
        assert!(names.contains(&(
            "tools[0].function_declarations[0].parameters",
            "additionalProperties"
        )));
        assert!(names.contains(&(
            "tools[0].function_declarations[0].parameters.properties[0].value",
            "const"
        )));
        assert_eq!(u.len(), 6);
    }

    #[test]
    fn thinking_rules() {
        let gc = |v: Value| v.as_object().unwrap().clone();
        assert_eq!(
            thinking("gemini-2.5-flash", None, false).unwrap(),
            (true, false)
        );
        let off = gc(json!({"thinkingConfig": {"thinkingBudget": 0, "includeThoughts": true}}));
        assert_eq!(
            thinking("gemini-2.5-flash", Some(&off), false).unwrap(),
            (false, false)
        );
        assert!(thinking("gemini-2.5-pro", Some(&off), false).is_err());
        let lvl = gc(json!({"thinkingConfig": {"thinkingLevel": "low", "includeThoughts": true}}));
        assert_eq!(
            thinking("gemini-3-pro-preview", Some(&lvl), false).unwrap(),
            (true, true)
        );
        assert!(thinking("gemini-2.5-flash", Some(&lvl), false).is_err());
        let minimal = gc(json!({"thinkingConfig": {"thinkingLevel": "minimal"}}));
        assert!(thinking("gemini-3-pro-preview", Some(&minimal), false).is_err());
        assert!(thinking("gemini-3-flash-preview", Some(&minimal), false).is_ok());
        let both = gc(json!({"thinkingConfig": {"thinkingLevel": "low", "thinkingBudget": 1024}}));
        assert!(thinking("gemini-3-pro-preview", Some(&both), false).is_err());
        let lite = gc(json!({"thinkingConfig": {"thinkingBudget": 100}}));
        assert!(thinking("gemini-2.5-flash-lite", Some(&lite), false).is_err());
        assert_eq!(
            thinking("gemini-2.5-flash-lite", None, false).unwrap(),
            (false, false)
        );
    }

    #[test]
    fn call_choice() {
        let tools = json!([{"functionDeclarations": [{"name": "a"}, {"name": "b"}]}]);
        let m = Markers::scan("[sim:call=b]");
        assert_eq!(choose_calls(Some(&tools), None, &m), vec!["b"]);
        assert!(choose_calls(Some(&tools), None, &Markers::default()).is_empty());
        let any = json!({"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["b"]}});
        assert_eq!(
            choose_calls(Some(&tools), Some(&any), &Markers::default()),
            vec!["b"]
        );
        let none = json!({"functionCallingConfig": {"mode": "NONE"}});
        assert!(choose_calls(Some(&tools), Some(&none), &m).is_empty());
        let p = Markers::scan("[sim:call=a][sim:parallel=3]");
        assert_eq!(choose_calls(Some(&tools), None, &p).len(), 3);
    }

    #[test]
    fn content_order_rules() {
        let ok = json!([
            {"role":"user","parts":[{"text":"q"}]},
            {"role":"model","parts":[{"functionCall":{"name":"f","args":{}}},{"functionCall":{"name":"f","args":{}}}]},
            {"role":"user","parts":[{"functionResponse":{"name":"f","response":{}}},{"functionResponse":{"name":"f","response":{}}}]}
        ]);
        assert!(validate_contents(ok.as_array().unwrap(), false, false, "contents").is_ok());
        // Gemini 3 requires the signature on the first call of the current turn.
        assert!(validate_contents(ok.as_array().unwrap(), false, true, "contents").is_err());
        let short = json!([
            {"role":"user","parts":[{"text":"q"}]},
            {"role":"model","parts":[{"functionCall":{"name":"f","args":{}}},{"functionCall":{"name":"f","args":{}}}]},
            {"role":"user","parts":[{"functionResponse":{"name":"f","response":{}}}]}
        ]);
        assert!(validate_contents(short.as_array().unwrap(), false, false, "contents").is_err());
        let no_role = json!([{"parts":[{"text":"q"}]}]);
        assert!(validate_contents(no_role.as_array().unwrap(), false, false, "contents").is_ok());
        assert!(validate_contents(no_role.as_array().unwrap(), true, false, "contents").is_err());
        let bad_args = json!([{"role":"user","parts":[{"text":"q"}]},{"role":"model","parts":[{"functionCall":{"name":"f","args":"{}"}}]}]);
        assert!(validate_contents(bad_args.as_array().unwrap(), false, false, "contents").is_err());
    }

    #[test]
    fn prompt_bytes() {
        let v = json!({"systemInstruction": {"parts": [{"text": "abcd"}]}, "contents": [{"role":"user","parts":[{"text":"hello"}]}]});
        assert_eq!(prompt_size(v.as_object().unwrap()).0, 9);
    }
}
