//! OpenAI-compatible upstream: `POST /v1/chat/completions` (buffered and SSE),
//! `POST /v1/embeddings` and `GET /v1/models` (`POST /v1/responses`: `openai_responses.rs`). Shapes follow fixtures
//! `openai-chat-completion.json`, `openai-chat-stream-text-usage.sse`,
//! `openai-chat-stream-tool-call-usage.sse` (role chunk, content / tool-call fragments, finish
//! chunk, the `choices: []` usage chunk only with `stream_options.include_usage`, `data:
//! [DONE]`), `openai-embeddings.json` and the error envelope of
//! `openai-error-400-unsupported-parameter.json`.
//!
//! Validates (`docs/wire.md#client-side-openai-chat`): `Authorization: Bearer <--openai-key>` (401
//! `invalid_api_key`); `model` and `messages` required; unknown top-level parameters rejected
//! like api.openai.com ("Unrecognized request argument supplied: x"); embeddings `input` must
//! be a string, strings, token ids or token-id arrays, `encoding_format` `float|base64`.
//! The response echoes the request `model`.
//!
//! Tokens counted here: every message's text content (string or `text` parts), assistant
//! `tool_calls` (name + arguments string), and the compact JSON of `tools`. Embedding inputs
//! count their text bytes (token-id inputs: 1 token per id).

use axum::http::StatusCode;
use axum::response::Response;
use base64::Engine as _;
use bytes::Bytes;
use serde::Serialize;
use serde_json::{Map, Value};

use crate::content::{
    self, apply_stop, call_tokens, cap_tokens, json_len, prompt_tok, random_id, split_pieces, tok,
    unix_secs, Markers, CALL_ARGS_JSON,
};
use crate::faults::{self, Fault, StreamFault, Surface};
use crate::fixtures;
use crate::respond::{self, JSON_PLAIN};
use crate::{Req, Sim};

type R = Result<Response, Response>;

const CHAT_FIELDS: &[&str] = &[
    "model",
    "messages",
    "max_tokens",
    "max_completion_tokens",
    "temperature",
    "top_p",
    "n",
    "stop",
    "presence_penalty",
    "frequency_penalty",
    "logit_bias",
    "logprobs",
    "top_logprobs",
    "seed",
    "response_format",
    "tools",
    "tool_choice",
    "parallel_tool_calls",
    "stream",
    "stream_options",
    "reasoning_effort",
    "service_tier",
    "user",
    "metadata",
    "store",
    "prompt_cache_key",
    "prompt_cache_retention",
    "safety_identifier",
    "modalities",
    "audio",
    "prediction",
    "web_search_options",
    "verbosity",
    "functions",
    "function_call",
];
const EMBED_FIELDS: &[&str] = &["model", "input", "encoding_format", "dimensions", "user"];

pub(crate) fn auth(sim: &Sim, req: &Req) -> Result<(), Response> {
    let header = req
        .headers
        .get("authorization")
        .and_then(|v| v.to_str().ok());
    let Some(token) = header.and_then(|h| h.strip_prefix("Bearer ")) else {
        return Err(fixtures::openai_error(
            401,
            "You didn't provide an API key. You need to provide your API key in an Authorization header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY), or as the password field (with blank username) if you're accessing the API from your browser and are prompted for a username and password. You can obtain an API key from https://platform.openai.com/account/api-keys.",
            "invalid_request_error",
            None,
            None,
        ));
    };
    if token.trim() != sim.cfg.openai_key {
        let shown: String = token.chars().take(6).collect();
        let tail: String = token
            .chars()
            .rev()
            .take(4)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect();
        return Err(fixtures::openai_error(
            401,
            &format!(
                "Incorrect API key provided: {shown}********{tail}. You can find your API key at https://platform.openai.com/account/api-keys."
            ),
            "invalid_request_error",
            None,
            Some("invalid_api_key"),
        ));
    }
    Ok(())
}

pub(crate) fn parse(body: &Bytes) -> Result<Map<String, Value>, Response> {
    match serde_json::from_slice::<Value>(body) {
        Ok(Value::Object(m)) => Ok(m),
        _ => Err(fixtures::openai_invalid(
            "We could not parse the JSON body of your request. (HINT: This likely means you aren't using your HTTP library correctly. The OpenAI API expects a JSON payload, but what was sent was not valid JSON. If you have trouble figuring out how to fix this, please contact us through our help center at help.openai.com.)",
            None,
            None,
        )),
    }
}

pub(crate) fn status_fault(f: &Fault) -> Option<Response> {
    match f {
        Fault::Status(429) => Some(fixtures::openai_429()),
        Fault::Status(500) => Some(fixtures::openai_500()),
        Fault::Status(_) => Some(fixtures::openai_503()),
        Fault::Garbage => Some(fixtures::garbage_200()),
        _ => None,
    }
}

fn text_of(content: Option<&Value>) -> String {
    match content {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(parts)) => parts
            .iter()
            .filter(|p| p.get("type").and_then(Value::as_str) == Some("text"))
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect(),
        _ => String::new(),
    }
}

// ---------------------------------------------------------------------------------------------
// Chat
// ---------------------------------------------------------------------------------------------

#[derive(Serialize)]
struct FnCall<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    name: Option<&'a str>,
    arguments: &'a str,
}

#[derive(Serialize)]
struct ToolCall<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    index: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    id: Option<&'a str>,
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    kind: Option<&'static str>,
    function: FnCall<'a>,
}

#[derive(Serialize)]
struct Message<'a> {
    role: &'static str,
    content: Option<&'a str>,
    refusal: Option<&'a str>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tool_calls: Vec<ToolCall<'a>>,
    annotations: [u8; 0],
}

#[derive(Serialize)]
struct Choice<'a> {
    index: usize,
    message: Message<'a>,
    logprobs: Option<()>,
    finish_reason: &'a str,
}

#[derive(Serialize, Clone, Copy)]
struct PromptDetails {
    cached_tokens: u64,
    audio_tokens: u64,
}

#[derive(Serialize, Clone, Copy)]
struct CompletionDetails {
    reasoning_tokens: u64,
    audio_tokens: u64,
    accepted_prediction_tokens: u64,
    rejected_prediction_tokens: u64,
}

#[derive(Serialize, Clone, Copy)]
struct Usage {
    prompt_tokens: u64,
    completion_tokens: u64,
    total_tokens: u64,
    prompt_tokens_details: PromptDetails,
    completion_tokens_details: CompletionDetails,
}

#[derive(Serialize)]
struct Completion<'a> {
    id: &'a str,
    object: &'static str,
    created: i64,
    model: &'a str,
    choices: Vec<Choice<'a>>,
    usage: Usage,
    service_tier: &'static str,
    system_fingerprint: &'static str,
}

#[derive(Serialize, Default)]
struct Delta<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    role: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    content: Option<Option<&'a str>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_calls: Option<Vec<ToolCall<'a>>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    refusal: Option<Option<&'a str>>,
}

#[derive(Serialize)]
struct ChunkChoice<'a> {
    index: usize,
    delta: Delta<'a>,
    logprobs: Option<()>,
    finish_reason: Option<&'a str>,
}

#[derive(Serialize)]
struct Chunk<'a> {
    id: &'a str,
    object: &'static str,
    created: i64,
    model: &'a str,
    service_tier: &'static str,
    system_fingerprint: &'static str,
    choices: Vec<ChunkChoice<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    usage: Option<Option<Usage>>,
}

const FINGERPRINT: &str = "fp_sim0000001";

pub fn chat(sim: &Sim, req: &Req) -> Response {
    if let Err(r) = auth(sim, req) {
        return r;
    }
    chat_inner(sim, req).unwrap_or_else(|e| e)
}

fn chat_inner(sim: &Sim, req: &Req) -> R {
    let obj = parse(req.body)?;
    let msgs: &[Value] = obj
        .get("messages")
        .and_then(Value::as_array)
        .map_or(&[], |v| v.as_slice());
    let last_user = msgs
        .iter()
        .rev()
        .find(|m| m.get("role").and_then(Value::as_str) == Some("user"));
    let user_text = text_of(last_user.and_then(|m| m.get("content")));
    let tool_results = msgs
        .iter()
        .rev()
        .take_while(|m| m.get("role").and_then(Value::as_str) == Some("tool"))
        .count();
    // After a tool round the "last user turn" is the tool messages.
    let (user_text, tool_results) = if tool_results > 0 {
        (String::new(), tool_results)
    } else {
        (user_text, 0)
    };
    let markers = Markers::scan(&text_of(last_user.and_then(|m| m.get("content"))));
    let latency = markers.latency_ms;
    let fault = sim.pick_fault(&markers, Surface::OpenAi);
    if let Some(r) = fault.as_ref().and_then(status_fault) {
        return Ok(respond::with_latency(r, latency));
    }
    let r = chat_answer(sim, &obj, msgs, &markers, &user_text, tool_results, fault);
    Ok(respond::with_latency(r.unwrap_or_else(|e| e), latency))
}

fn prompt_bytes(obj: &Map<String, Value>, msgs: &[Value]) -> usize {
    let mut bytes = 0;
    for m in msgs {
        bytes += match m.get("content") {
            Some(Value::String(s)) => s.len(),
            Some(Value::Array(parts)) => parts
                .iter()
                .map(|p| match p.get("type").and_then(Value::as_str) {
                    Some("text") => p.get("text").and_then(Value::as_str).map_or(0, str::len),
                    _ => json_len(p),
                })
                .sum(),
            _ => 0,
        };
        if let Some(Value::Array(calls)) = m.get("tool_calls") {
            for c in calls {
                let f = c.get("function");
                bytes += f
                    .and_then(|f| f.get("name"))
                    .and_then(Value::as_str)
                    .map_or(0, str::len);
                bytes += f
                    .and_then(|f| f.get("arguments"))
                    .and_then(Value::as_str)
                    .map_or(0, str::len);
            }
        }
    }
    if let Some(t) = obj.get("tools") {
        bytes += json_len(t);
    }
    bytes
}

fn choose_calls(obj: &Map<String, Value>, markers: &Markers) -> Vec<String> {
    let declared: Vec<String> = obj
        .get("tools")
        .and_then(Value::as_array)
        .map(|ts| {
            ts.iter()
                .filter_map(|t| {
                    t.get("function")
                        .and_then(|f| f.get("name"))
                        .and_then(Value::as_str)
                })
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default();
    if declared.is_empty() {
        return Vec::new();
    }
    let choice = obj.get("tool_choice");
    let forced_name = choice
        .and_then(|c| c.get("function"))
        .and_then(|f| f.get("name"))
        .and_then(Value::as_str)
        .map(str::to_owned);
    let mode = choice.and_then(Value::as_str).unwrap_or("auto");
    let name = if forced_name.is_some() {
        forced_name
    } else {
        match mode {
            "none" => None,
            "required" => markers
                .call
                .clone()
                .filter(|c| declared.contains(c))
                .or_else(|| declared.first().cloned()),
            _ => match &markers.call {
                Some(c) if declared.contains(c) => Some(c.clone()),
                Some(_) => None,
                None if markers.parallel.is_some() => declared.first().cloned(),
                None => None,
            },
        }
    };
    let parallel_ok = obj
        .get("parallel_tool_calls")
        .and_then(Value::as_bool)
        .unwrap_or(true);
    let n = if parallel_ok {
        markers.parallel.unwrap_or(1)
    } else {
        1
    };
    name.map(|n0| vec![n0; n]).unwrap_or_default()
}

/// Validates a chat request and answers it, buffered or streamed, with `fault` applied.
fn chat_answer(
    sim: &Sim,
    obj: &Map<String, Value>,
    msgs: &[Value],
    markers: &Markers,
    user_text: &str,
    tool_results: usize,
    fault: Option<Fault>,
) -> R {
    let model = check_chat(obj, msgs)?;
    let blocked = matches!(fault, Some(Fault::Blocked));
    let calls = if blocked {
        Vec::new()
    } else {
        choose_calls(obj, markers)
    };
    let subject = content::user_subject(user_text, tool_results);
    let (text, finish, completion) = if blocked {
        (Some(String::new()), "content_filter", 0)
    } else if !calls.is_empty() {
        (
            None,
            "tool_calls",
            calls.iter().map(|c| call_tokens(c)).sum(),
        )
    } else {
        let (text, finish, tokens) = text_reply(obj, &subject);
        (Some(text), finish, tokens)
    };
    let reply = Reply {
        id: format!("chatcmpl-{}", random_id(29)),
        created: unix_secs(),
        model,
        text,
        finish,
        call_ids: calls
            .iter()
            .map(|_| format!("call_{}", random_id(24)))
            .collect(),
        calls,
        usage: chat_usage(prompt_tok(prompt_bytes(obj, msgs)), completion),
    };
    let resp = if obj.get("stream").and_then(Value::as_bool).unwrap_or(false) {
        let include_usage = obj
            .get("stream_options")
            .and_then(|s| s.get("include_usage"))
            .and_then(Value::as_bool)
            .unwrap_or(false);
        let events = stream_events(&reply, include_usage, sim.chunks(markers));
        respond::sse(faults::deliver(
            events,
            sim.delay(markers),
            stream_fault(fault),
        ))
    } else {
        buffered(&reply, fault.as_ref())?
    };
    Ok(respond::with_header(
        resp,
        "x-request-id",
        &format!("req_{}", random_id(32)),
    ))
}

/// What the simulated model answers.
struct Reply<'a> {
    id: String,
    created: i64,
    model: &'a str,
    /// `None` when the answer is tool calls only.
    text: Option<String>,
    finish: &'static str,
    calls: Vec<String>,
    call_ids: Vec<String>,
    usage: Usage,
}

/// OpenAI's checks, with its messages: known fields, a model, non-empty messages with known
/// roles. Returns the model.
fn check_chat<'a>(obj: &'a Map<String, Value>, msgs: &[Value]) -> Result<&'a str, Response> {
    if let Some(k) = obj.keys().find(|k| !CHAT_FIELDS.contains(&k.as_str())) {
        return Err(fixtures::openai_invalid(
            &format!("Unrecognized request argument supplied: {k}"),
            None,
            None,
        ));
    }
    let model = match obj.get("model").and_then(Value::as_str) {
        Some(m) if !m.is_empty() => m,
        _ => {
            return Err(fixtures::openai_invalid(
                "you must provide a model parameter",
                None,
                None,
            ))
        }
    };
    if !obj.contains_key("messages") {
        return Err(fixtures::openai_invalid(
            "Missing required parameter: 'messages'.",
            Some("messages"),
            Some("missing_required_parameter"),
        ));
    }
    if msgs.is_empty() {
        return Err(fixtures::openai_invalid(
            "Invalid 'messages': empty array. Expected an array with minimum length 1, but got an empty array instead.",
            Some("messages"),
            Some("empty_array"),
        ));
    }
    check_roles(msgs)?;
    Ok(model)
}

fn check_roles(msgs: &[Value]) -> Result<(), Response> {
    const ROLES: [&str; 6] = [
        "system",
        "developer",
        "user",
        "assistant",
        "tool",
        "function",
    ];
    for (i, m) in msgs.iter().enumerate() {
        let role = m.get("role").and_then(Value::as_str).unwrap_or("");
        if !ROLES.contains(&role) {
            return Err(fixtures::openai_invalid(
                &format!("Invalid value: '{role}'. Supported values are: 'system', 'assistant', 'user', 'function', 'tool', and 'developer'."),
                Some(&format!("messages[{i}].role")),
                Some("invalid_value"),
            ));
        }
    }
    Ok(())
}

/// The text answer (JSON in JSON mode), cut at a stop sequence or the token cap: the text,
/// its finish reason and its tokens.
fn text_reply(obj: &Map<String, Value>, subject: &str) -> (String, &'static str, u64) {
    let json_mode = obj
        .get("response_format")
        .and_then(|f| f.get("type"))
        .and_then(Value::as_str)
        .is_some_and(|t| t == "json_object" || t == "json_schema");
    let full = if json_mode {
        content::reply_json(subject)
    } else {
        content::reply_text(subject)
    };
    let stops: Vec<String> = match obj.get("stop") {
        Some(Value::String(s)) => vec![s.clone()],
        Some(Value::Array(a)) => a
            .iter()
            .filter_map(Value::as_str)
            .map(str::to_owned)
            .collect(),
        _ => Vec::new(),
    };
    let (stopped, _) = apply_stop(&full, &stops);
    let cap = obj
        .get("max_completion_tokens")
        .or_else(|| obj.get("max_tokens"))
        .and_then(Value::as_u64);
    let (kept, cut) = match cap {
        Some(c) => cap_tokens(stopped, c),
        None => (stopped, false),
    };
    let finish = if cut { "length" } else { "stop" };
    (kept.to_owned(), finish, tok(kept.len()))
}

fn chat_usage(prompt: u64, completion: u64) -> Usage {
    Usage {
        prompt_tokens: prompt,
        completion_tokens: completion,
        total_tokens: prompt + completion,
        prompt_tokens_details: PromptDetails {
            cached_tokens: 0,
            audio_tokens: 0,
        },
        completion_tokens_details: CompletionDetails {
            reasoning_tokens: 0,
            audio_tokens: 0,
            accepted_prediction_tokens: 0,
            rejected_prediction_tokens: 0,
        },
    }
}

/// The chunk frame of `delta` (no choice at all when `None`: the usage chunk).
fn chunk_frame(
    r: &Reply<'_>,
    choice: Option<ChunkChoice<'_>>,
    usage: Option<Option<Usage>>,
) -> Bytes {
    respond::sse_data(
        &Chunk {
            id: &r.id,
            object: "chat.completion.chunk",
            created: r.created,
            model: r.model,
            service_tier: "default",
            system_fingerprint: FINGERPRINT,
            choices: choice.into_iter().collect(),
            usage,
        },
        "\n\n",
    )
}

fn delta_choice<'a>(delta: Delta<'a>, finish_reason: Option<&'static str>) -> ChunkChoice<'a> {
    ChunkChoice {
        index: 0,
        delta,
        logprobs: None,
        finish_reason,
    }
}

/// Every event of the streamed answer: the content (text pieces, or each call's header and
/// argument fragments), the finish, the usage chunk if asked for, `[DONE]`.
fn stream_events(r: &Reply<'_>, include_usage: bool, pieces: usize) -> Vec<Bytes> {
    // With include_usage, every chunk carries `"usage": null` until the usage chunk.
    let nu = if include_usage { Some(None) } else { None };
    let mut events = if r.calls.is_empty() {
        text_events(r, nu, pieces)
    } else {
        call_events(r, nu)
    };
    let finish = delta_choice(Delta::default(), Some(r.finish));
    events.push(chunk_frame(r, Some(finish), nu));
    if include_usage {
        events.push(chunk_frame(r, None, Some(Some(r.usage))));
    }
    events.push(Bytes::from_static(b"data: [DONE]\n\n"));
    events
}

fn text_events(r: &Reply<'_>, nu: Option<Option<Usage>>, pieces: usize) -> Vec<Bytes> {
    let first = Delta {
        role: Some("assistant"),
        content: Some(Some("")),
        refusal: Some(None),
        ..Delta::default()
    };
    let mut events = vec![chunk_frame(r, Some(delta_choice(first, None)), nu)];
    for piece in split_pieces(r.text.as_deref().unwrap_or(""), pieces) {
        let delta = Delta {
            content: Some(Some(piece)),
            ..Delta::default()
        };
        events.push(chunk_frame(r, Some(delta_choice(delta, None)), nu));
    }
    events
}

fn call_events(r: &Reply<'_>, nu: Option<Option<Usage>>) -> Vec<Bytes> {
    let mut events = Vec::new();
    for (i, (name, cid)) in r.calls.iter().zip(&r.call_ids).enumerate() {
        let header = ToolCall {
            index: Some(i),
            id: Some(cid),
            kind: Some("function"),
            function: FnCall {
                name: Some(name),
                arguments: "",
            },
        };
        let delta = if i == 0 {
            Delta {
                role: Some("assistant"),
                content: Some(None),
                tool_calls: Some(vec![header]),
                refusal: Some(None),
            }
        } else {
            Delta {
                tool_calls: Some(vec![header]),
                ..Delta::default()
            }
        };
        events.push(chunk_frame(r, Some(delta_choice(delta, None)), nu));
        let (a, b) = CALL_ARGS_JSON.split_at(CALL_ARGS_JSON.len() / 2);
        for frag in [a, b] {
            let fragment = ToolCall {
                index: Some(i),
                id: None,
                kind: None,
                function: FnCall {
                    name: None,
                    arguments: frag,
                },
            };
            let delta = Delta {
                tool_calls: Some(vec![fragment]),
                ..Delta::default()
            };
            events.push(chunk_frame(r, Some(delta_choice(delta, None)), nu));
        }
    }
    events
}

/// How a stream fault shows in an OpenAI stream.
fn stream_fault(fault: Option<Fault>) -> StreamFault {
    match fault {
        Some(Fault::BreakAfter(k)) => StreamFault::BreakAfter(k),
        Some(Fault::Stall) => StreamFault::StallAfter(1),
        Some(f @ (Fault::ErrorEvent | Fault::ErrorFirst)) => {
            let err = fixtures::openai_error_value(
                "The server had an error while processing your request. Sorry about that!",
                "server_error",
                None,
                None,
            );
            let at = if f == Fault::ErrorEvent { 2 } else { 0 };
            StreamFault::ErrorTail(at, respond::sse_data(&err, "\n\n"))
        }
        _ => StreamFault::None,
    }
}

/// The buffered `chat.completion`, with `fault` applied.
fn buffered(r: &Reply<'_>, fault: Option<&Fault>) -> R {
    let tool_calls: Vec<ToolCall> = r
        .calls
        .iter()
        .zip(&r.call_ids)
        .map(|(name, cid)| ToolCall {
            index: None,
            id: Some(cid),
            kind: Some("function"),
            function: FnCall {
                name: Some(name),
                arguments: CALL_ARGS_JSON,
            },
        })
        .collect();
    let body = Completion {
        id: &r.id,
        object: "chat.completion",
        created: r.created,
        model: r.model,
        choices: vec![Choice {
            index: 0,
            message: Message {
                role: "assistant",
                content: r.text.as_deref(),
                refusal: None,
                tool_calls,
                annotations: [],
            },
            logprobs: None,
            finish_reason: r.finish,
        }],
        usage: r.usage,
        service_tier: "default",
        system_fingerprint: FINGERPRINT,
    };
    let bytes = serde_json::to_vec(&body).map_err(|e| respond::internal(&e.to_string()))?;
    Ok(crate::buffered_with_fault(
        Bytes::from(bytes),
        JSON_PLAIN,
        fault,
        fixtures::openai_500,
    ))
}

// ---------------------------------------------------------------------------------------------
// Embeddings
// ---------------------------------------------------------------------------------------------

#[derive(Serialize)]
#[serde(untagged)]
enum Vector {
    Float(Vec<f32>),
    Base64(String),
}

#[derive(Serialize)]
struct EmbeddingItem {
    object: &'static str,
    index: usize,
    embedding: Vector,
}

#[derive(Serialize)]
struct EmbedUsage {
    prompt_tokens: u64,
    total_tokens: u64,
}

#[derive(Serialize)]
struct EmbedResp<'a> {
    object: &'static str,
    data: Vec<EmbeddingItem>,
    model: &'a str,
    usage: EmbedUsage,
}

pub fn embeddings(sim: &Sim, req: &Req) -> Response {
    if let Err(r) = auth(sim, req) {
        return r;
    }
    embeddings_inner(sim, req).unwrap_or_else(|e| e)
}

fn embeddings_inner(sim: &Sim, req: &Req) -> R {
    let obj = parse(req.body)?;
    // (text used for the vector, tokens)
    let inputs: Vec<(String, u64)> = match obj.get("input") {
        Some(Value::String(s)) => vec![(s.clone(), tok(s.len()))],
        Some(Value::Array(a)) if a.iter().all(Value::is_string) && !a.is_empty() => a
            .iter()
            .filter_map(Value::as_str)
            .map(|s| (s.to_owned(), tok(s.len())))
            .collect(),
        Some(Value::Array(a)) if !a.is_empty() && a.iter().all(Value::is_u64) => {
            vec![(Value::Array(a.clone()).to_string(), a.len() as u64)]
        }
        Some(Value::Array(a)) if !a.is_empty() && a.iter().all(|x| x.as_array().is_some_and(|ids| ids.iter().all(Value::is_u64))) => a
            .iter()
            .map(|x| (x.to_string(), x.as_array().map_or(0, |i| i.len() as u64)))
            .collect(),
        None => {
            return Err(fixtures::openai_invalid(
                "Missing required parameter: 'input'.",
                Some("input"),
                Some("missing_required_parameter"),
            ))
        }
        Some(_) => {
            return Err(fixtures::openai_invalid(
                "'$.input' is invalid. Please check the API reference: https://platform.openai.com/docs/api-reference.",
                None,
                None,
            ))
        }
    };
    let mut markers = Markers::default();
    for (t, _) in &inputs {
        markers.scan_into(t);
    }
    let fault = sim.pick_fault(&markers, Surface::OpenAi);
    if let Some(r) = fault.as_ref().and_then(status_fault) {
        return Ok(respond::with_latency(r, markers.latency_ms));
    }
    for k in obj.keys() {
        if !EMBED_FIELDS.contains(&k.as_str()) {
            return Err(fixtures::openai_invalid(
                &format!("Unrecognized request argument supplied: {k}"),
                None,
                None,
            ));
        }
    }
    let model = match obj.get("model").and_then(Value::as_str) {
        Some(m) if !m.is_empty() => m,
        _ => {
            return Err(fixtures::openai_invalid(
                "you must provide a model parameter",
                None,
                None,
            ))
        }
    };
    let base64 = match obj.get("encoding_format").and_then(Value::as_str) {
        None | Some("float") => false,
        Some("base64") => true,
        Some(other) => {
            return Err(fixtures::openai_invalid(
                &format!("Invalid value: '{other}'. Supported values are: 'float' and 'base64'."),
                Some("encoding_format"),
                Some("invalid_value"),
            ))
        }
    };
    let full = if model.contains("3-large") {
        3072
    } else if model.contains("3-small") || model.contains("ada-002") {
        1536
    } else {
        crate::gemini::embedding_width(model)
    };
    let dims = obj
        .get("dimensions")
        .and_then(Value::as_u64)
        .filter(|d| *d > 0)
        .map(|d| d as usize);
    let mut data = Vec::with_capacity(inputs.len());
    let mut prompt = 0;
    for (i, (text, tokens)) in inputs.iter().enumerate() {
        prompt += tokens;
        let mut v = content::embedding(text, full.max(dims.unwrap_or(0)), dims.unwrap_or(full));
        if dims.is_some() {
            content::renormalise(&mut v);
        }
        let embedding = if base64 {
            let mut raw = Vec::with_capacity(v.len() * 4);
            for x in &v {
                raw.extend_from_slice(&x.to_le_bytes());
            }
            Vector::Base64(base64::engine::general_purpose::STANDARD.encode(raw))
        } else {
            Vector::Float(v)
        };
        data.push(EmbeddingItem {
            object: "embedding",
            index: i,
            embedding,
        });
    }
    let body = EmbedResp {
        object: "list",
        data,
        model,
        usage: EmbedUsage {
            prompt_tokens: prompt,
            total_tokens: prompt,
        },
    };
    let bytes = serde_json::to_vec(&body).map_err(|e| respond::internal(&e.to_string()))?;
    Ok(respond::with_latency(
        crate::buffered_with_fault(
            Bytes::from(bytes),
            JSON_PLAIN,
            fault.as_ref(),
            fixtures::openai_500,
        ),
        markers.latency_ms,
    ))
}

/// `GET /v1/models`.
pub fn models(sim: &Sim, req: &Req) -> Response {
    if let Err(r) = auth(sim, req) {
        return r;
    }
    let ids = [
        "gpt-4o-mini",
        "gpt-4.1-nano",
        "text-embedding-3-small",
        "text-embedding-004",
    ];
    let data: Vec<Value> = ids
        .iter()
        .map(|id| serde_json::json!({"id": id, "object": "model", "created": 1_700_000_000, "owned_by": "tollgate-sim"}))
        .collect();
    respond::json(
        StatusCode::OK,
        JSON_PLAIN,
        &serde_json::json!({"object": "list", "data": data}),
    )
}
