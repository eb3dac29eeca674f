//! OpenAI's Responses API: `POST /v1/responses`, buffered and `stream: true`, on the OpenAI
//! surface (its key, its faults, its error envelope). Shapes follow the openai-python types
//! (`types/responses/*`) and streams recorded from api.openai.com: a `response` object (`resp_…`
//! id, `output` items, `usage` with `input_tokens_details.cached_tokens` and
//! `output_tokens_details.reasoning_tokens`); a stream of `event:`/`data:` events, each with its
//! `sequence_number` from 0, in the API's order: `response.created`, `response.in_progress`,
//! then per output item `response.output_item.added`, for a message
//! `response.content_part.added`, `response.output_text.delta`…, `response.output_text.done`,
//! `response.content_part.done`, for a function call `response.function_call_arguments.delta`…
//! and `.done`, then `response.output_item.done`; last `response.completed` (or
//! `response.incomplete`) with the usage.
//!
//! Content rules are the chat endpoint's (`content.rs`): the answer echoes the last user
//! message's text (`input_text` parts, or `input` as a string); after a turn of
//! `function_call_output` items it is "received N tool result(s)"; `[sim:call=NAME]`,
//! `[sim:parallel=N]` and `tool_choice` decide function calls, whose arguments are
//! `{"arg":"value"}` or a `[sim:args=JSON]` object; JSON mode is `text.format` `json_object` /
//! `json_schema`; `max_output_tokens` caps the text (`status: incomplete`, reason
//! `max_output_tokens`); `blocked` answers `incomplete` with reason `content_filter`.
//!
//! Prompt tokens count `instructions`, every message's text (other parts: their compact JSON),
//! each `function_call`'s name and arguments, each `function_call_output`'s output text, and the
//! compact JSON of `tools`; `reasoning` items count nothing.
//!
//! Validates like the real API: unknown top-level parameters (`Unknown parameter: 'x'.`),
//! `model` and `input` required, message roles; a `function_call_output` whose `call_id` no
//! earlier `function_call` of `input` carries is refused (`No tool call found for function call
//! output with call_id …`), and so is any `previous_response_id` (404
//! `previous_response_not_found`: the simulator stores no response).
//!
//! Stream faults: `error-first` sends the API's `error` event and `response.failed` after
//! `response.in_progress`, `error-event` after the first delta; `break-after=N`, `stall`,
//! `garbage` and the status faults as on the chat endpoint.

use axum::response::Response;
use bytes::Bytes;
use serde_json::{json, Map, Value};

use crate::content::{
    self, call_tokens_with, cap_tokens, json_len, prompt_tok, random_id, split_pieces, tok,
    unix_secs, Markers,
};
use crate::faults::{self, Fault, StreamFault, Surface};
use crate::fixtures;
use crate::openai::{auth, parse, status_fault};
use crate::respond::{self, JSON_PLAIN};
use crate::{Req, Sim};

type R = Result<Response, Response>;

const FIELDS: &[&str] = &[
    "model",
    "input",
    "instructions",
    "tools",
    "tool_choice",
    "parallel_tool_calls",
    "max_output_tokens",
    "max_tool_calls",
    "temperature",
    "top_p",
    "top_logprobs",
    "stream",
    "stream_options",
    "store",
    "previous_response_id",
    "conversation",
    "include",
    "reasoning",
    "text",
    "truncation",
    "metadata",
    "user",
    "safety_identifier",
    "prompt_cache_key",
    "prompt_cache_retention",
    "service_tier",
    "background",
    "prompt",
];

const ROLES: [&str; 4] = ["user", "assistant", "system", "developer"];

pub fn create(sim: &Sim, req: &Req) -> Response {
    if let Err(r) = auth(sim, req) {
        return r;
    }
    create_inner(sim, req).unwrap_or_else(|e| e)
}

fn create_inner(sim: &Sim, req: &Req) -> R {
    let obj = parse(req.body)?;
    let input = Input::read(obj.get("input"));
    // After a tool round the last user turn is the call outputs (as on chat): the markers
    // that asked for the calls are not read again, or the calls would repeat forever.
    let markers = Markers::scan(if input.tool_results > 0 {
        ""
    } else {
        &input.last_user
    });
    let latency = markers.latency_ms;
    let fault = sim.pick_fault(&markers, Surface::OpenAi);
    if let Some(r) = fault.as_ref().and_then(status_fault) {
        return Ok(respond::with_latency(r, latency));
    }
    let r = answer(sim, &obj, &input, &markers, fault);
    Ok(respond::with_latency(r.unwrap_or_else(|e| e), latency))
}

/// What the simulator reads of `input`.
struct Input<'a> {
    items: Vec<&'a Value>,
    /// The text of the last user message.
    last_user: String,
    /// `function_call_output` items ending `input`.
    tool_results: usize,
}

impl<'a> Input<'a> {
    fn read(input: Option<&'a Value>) -> Input<'a> {
        let items: Vec<&Value> = match input {
            Some(Value::Array(items)) => items.iter().collect(),
            Some(v @ Value::String(_)) => vec![v],
            _ => Vec::new(),
        };
        let last_user = items
            .iter()
            .rev()
            .find(|i| i.is_string() || role(i) == Some("user"))
            .map(|i| text_of(i))
            .unwrap_or_default();
        let tool_results = items
            .iter()
            .rev()
            .take_while(|i| kind(i) == Some("function_call_output"))
            .count();
        Input {
            items,
            last_user,
            tool_results,
        }
    }
}

fn kind(item: &Value) -> Option<&str> {
    item.get("type").and_then(Value::as_str)
}

fn role(item: &Value) -> Option<&str> {
    match kind(item) {
        None | Some("message") => item.get("role").and_then(Value::as_str),
        Some(_) => None,
    }
}

/// A message's text: `input` as a string, its `content` string, or its text parts.
fn text_of(item: &Value) -> String {
    match item.get("content").unwrap_or(item) {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter(|p| matches!(kind(p), Some("input_text" | "output_text" | "text")))
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect(),
        _ => String::new(),
    }
}

/// Prompt bytes of the module rules.
fn prompt_bytes(obj: &Map<String, Value>, input: &Input<'_>) -> usize {
    let str_len = |v: Option<&Value>| v.and_then(Value::as_str).map_or(0, str::len);
    let mut bytes = str_len(obj.get("instructions"));
    for item in &input.items {
        bytes += match (kind(item), item) {
            (_, Value::String(s)) => s.len(),
            (Some("function_call"), _) => {
                str_len(item.get("name")) + str_len(item.get("arguments"))
            }
            (Some("function_call_output"), _) => match item.get("output") {
                Some(Value::String(s)) => s.len(),
                Some(v @ Value::Array(_)) => text_of(&json!({ "content": v })).len(),
                _ => 0,
            },
            (Some("reasoning"), _) => 0,
            (None | Some("message"), _) => match item.get("content") {
                Some(Value::String(s)) => s.len(),
                Some(Value::Array(parts)) => parts
                    .iter()
                    .map(|p| match (kind(p), p.get("text").and_then(Value::as_str)) {
                        (Some("input_text" | "output_text" | "text"), Some(t)) => t.len(),
                        _ => json_len(p),
                    })
                    .sum(),
                _ => 0,
            },
            _ => json_len(item),
        };
    }
    if let Some(t) = obj.get("tools") {
        bytes += json_len(t);
    }
    bytes
}

/// The request's refusals, in the real API's words.
fn check(obj: &Map<String, Value>, input: &Input<'_>) -> Result<String, Response> {
    if let Some(k) = obj.keys().find(|k| !FIELDS.contains(&k.as_str())) {
        return Err(fixtures::openai_invalid(
            &format!("Unknown parameter: '{k}'."),
            Some(k),
            Some("unknown_parameter"),
        ));
    }
    let model = match obj.get("model").and_then(Value::as_str) {
        Some(m) if !m.is_empty() => m.to_owned(),
        _ => {
            return Err(fixtures::openai_invalid(
                "Missing required parameter: 'model'.",
                Some("model"),
                Some("missing_required_parameter"),
            ))
        }
    };
    if let Some(id) = obj.get("previous_response_id").and_then(Value::as_str) {
        return Err(fixtures::openai_error(
            404,
            &format!("Previous response with id '{id}' not found."),
            "invalid_request_error",
            Some("previous_response_id"),
            Some("previous_response_not_found"),
        ));
    }
    if !matches!(obj.get("input"), Some(Value::String(_) | Value::Array(_))) {
        return Err(fixtures::openai_invalid(
            "Missing required parameter: 'input'.",
            Some("input"),
            Some("missing_required_parameter"),
        ));
    }
    let mut calls: Vec<&str> = Vec::new();
    for (i, item) in input.items.iter().enumerate() {
        match kind(item) {
            Some("function_call") => {
                calls.extend(item.get("call_id").and_then(Value::as_str));
            }
            Some("function_call_output") => {
                let id = item.get("call_id").and_then(Value::as_str).unwrap_or("");
                if !calls.contains(&id) {
                    return Err(fixtures::openai_invalid(
                        &format!("No tool call found for function call output with call_id {id}."),
                        Some("input"),
                        None,
                    ));
                }
            }
            None | Some("message") if !item.is_string() => {
                let r = role(item).unwrap_or("");
                if !ROLES.contains(&r) {
                    return Err(fixtures::openai_invalid(
                        &format!("Invalid value: '{r}'. Supported values are: 'assistant', 'system', 'developer', and 'user'."),
                        Some(&format!("input[{i}].role")),
                        Some("invalid_value"),
                    ));
                }
            }
            _ => {}
        }
    }
    Ok(model)
}

/// The functions this request calls: Responses tools are flat (`{"type": "function", "name"}`).
fn choose_calls(obj: &Map<String, Value>, markers: &Markers) -> Vec<String> {
    let declared: Vec<&str> = obj
        .get("tools")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|t| kind(t) == Some("function"))
        .filter_map(|t| t.get("name").and_then(Value::as_str))
        .collect();
    if declared.is_empty() {
        return Vec::new();
    }
    let choice = obj.get("tool_choice");
    let forced = choice
        .filter(|c| kind(c) == Some("function"))
        .and_then(|c| c.get("name"))
        .and_then(Value::as_str);
    let marked = markers.call.as_deref().filter(|c| declared.contains(c));
    let name = match (forced, choice.and_then(Value::as_str).unwrap_or("auto")) {
        (Some(name), _) => Some(name),
        (None, "none") => None,
        (None, "required") => marked.or(declared.first().copied()),
        (None, _) => match &markers.call {
            Some(_) => marked,
            None if markers.parallel.is_some() => declared.first().copied(),
            None => None,
        },
    };
    let parallel = obj
        .get("parallel_tool_calls")
        .and_then(Value::as_bool)
        .unwrap_or(true);
    let n = if parallel {
        markers.parallel.unwrap_or(1)
    } else {
        1
    };
    name.map(|name| vec![name.to_owned(); n])
        .unwrap_or_default()
}

/// What the simulated model answers.
struct Answer {
    id: String,
    created: i64,
    model: String,
    /// The message's id and text; `None` when the answer is function calls only.
    message: Option<(String, String)>,
    /// Each call's item id, call id and name.
    calls: Vec<(String, String, String)>,
    args: String,
    /// `incomplete_details.reason`, when the answer is cut short.
    incomplete: Option<&'static str>,
    usage: Value,
}

fn answer(
    sim: &Sim,
    obj: &Map<String, Value>,
    input: &Input<'_>,
    markers: &Markers,
    fault: Option<Fault>,
) -> R {
    let model = check(obj, input)?;
    let blocked = matches!(fault, Some(Fault::Blocked));
    let names = if blocked {
        Vec::new()
    } else {
        choose_calls(obj, markers)
    };
    let args = markers.call_args();
    // After a tool round the "last user turn" is the function call outputs (as on chat).
    let user_text = if input.tool_results > 0 {
        ""
    } else {
        input.last_user.as_str()
    };
    let subject = content::user_subject(user_text, input.tool_results);
    let (message, incomplete, output) = if blocked {
        (Some(String::new()), Some("content_filter"), 0)
    } else if !names.is_empty() {
        let tokens = names.iter().map(|n| call_tokens_with(n, &args)).sum();
        (None, None, tokens)
    } else {
        let (text, cut) = text_reply(obj, &subject);
        let tokens = tok(text.len());
        (Some(text), cut.then_some("max_output_tokens"), tokens)
    };
    let prompt = prompt_tok(prompt_bytes(obj, input));
    let a = Answer {
        id: format!("resp_{}", random_id(48)),
        created: unix_secs(),
        model,
        message: message.map(|text| (format!("msg_{}", random_id(48)), text)),
        calls: names
            .into_iter()
            .map(|name| {
                (
                    format!("fc_{}", random_id(48)),
                    format!("call_{}", random_id(24)),
                    name,
                )
            })
            .collect(),
        args: args.to_string(),
        incomplete,
        usage: json!({
            "input_tokens": prompt,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": output,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": prompt + output,
        }),
    };
    let resp = if obj.get("stream").and_then(Value::as_bool).unwrap_or(false) {
        let events = stream_events(&a, obj, sim.chunks(markers));
        let fault = stream_fault(fault, &a, obj, &events);
        respond::sse(faults::deliver(
            events.into_iter().map(|(_, e)| e).collect(),
            sim.delay(markers),
            fault,
        ))
    } else {
        let body = response_object(&a, obj, a.status(), output_items(&a, true), &a.usage);
        let bytes = serde_json::to_vec(&body).map_err(|e| respond::internal(&e.to_string()))?;
        crate::buffered_with_fault(
            Bytes::from(bytes),
            JSON_PLAIN,
            fault.as_ref(),
            fixtures::openai_500,
        )
    };
    Ok(respond::with_header(
        resp,
        "x-request-id",
        &format!("req_{}", random_id(32)),
    ))
}

/// The text answer (JSON in JSON mode), cut at `max_output_tokens`; whether it was cut.
fn text_reply(obj: &Map<String, Value>, subject: &str) -> (String, bool) {
    let json_mode = obj
        .get("text")
        .and_then(|t| t.get("format"))
        .and_then(|f| f.get("type"))
        .and_then(Value::as_str)
        .is_some_and(|t| t == "json_object" || t == "json_schema");
    let full = if json_mode {
        content::reply_json(subject)
    } else {
        content::reply_text(subject)
    };
    match obj.get("max_output_tokens").and_then(Value::as_u64) {
        Some(cap) => {
            let (kept, cut) = cap_tokens(&full, cap);
            (kept.to_owned(), cut)
        }
        None => (full, false),
    }
}

impl Answer {
    fn status(&self) -> &'static str {
        if self.incomplete.is_some() {
            "incomplete"
        } else {
            "completed"
        }
    }
}

/// The output items, finished (`done`) or as first announced (empty, `in_progress`).
fn output_items(a: &Answer, done: bool) -> Vec<Value> {
    let status = match (done, a.incomplete) {
        (false, _) => "in_progress",
        (true, Some(_)) => "incomplete",
        (true, None) => "completed",
    };
    let mut items = Vec::new();
    if let Some((id, text)) = &a.message {
        let content = if done {
            vec![output_text(text)]
        } else {
            Vec::new()
        };
        items.push(json!({"id": id, "type": "message", "status": status, "content": content, "role": "assistant"}));
    }
    for (id, call_id, name) in &a.calls {
        let arguments = if done { a.args.as_str() } else { "" };
        items.push(json!({"id": id, "type": "function_call", "status": status, "arguments": arguments, "call_id": call_id, "name": name}));
    }
    items
}

fn output_text(text: &str) -> Value {
    json!({"type": "output_text", "annotations": [], "logprobs": [], "text": text})
}

/// The `response` object, echoing the request's settings as the API does.
fn response_object(
    a: &Answer,
    obj: &Map<String, Value>,
    status: &str,
    output: Vec<Value>,
    usage: &Value,
) -> Value {
    let echo = |name: &str, default: Value| obj.get(name).cloned().unwrap_or(default);
    let done = status != "in_progress";
    json!({
        "id": a.id,
        "object": "response",
        "created_at": a.created,
        "status": status,
        "background": false,
        "completed_at": if status == "completed" { json!(a.created) } else { Value::Null },
        "error": null,
        "incomplete_details": a.incomplete.filter(|_| done).map(|reason| json!({"reason": reason})),
        "instructions": echo("instructions", Value::Null),
        "max_output_tokens": echo("max_output_tokens", Value::Null),
        "max_tool_calls": echo("max_tool_calls", Value::Null),
        "model": a.model,
        "output": output,
        "parallel_tool_calls": echo("parallel_tool_calls", json!(true)),
        "previous_response_id": null,
        "prompt_cache_key": echo("prompt_cache_key", Value::Null),
        "reasoning": echo("reasoning", json!({"effort": null, "summary": null})),
        "safety_identifier": echo("safety_identifier", Value::Null),
        "service_tier": "default",
        "store": echo("store", json!(true)),
        "temperature": echo("temperature", json!(1)),
        "text": echo("text", json!({"format": {"type": "text"}, "verbosity": "medium"})),
        "tool_choice": echo("tool_choice", json!("auto")),
        "tools": echo("tools", json!([])),
        "top_logprobs": 0,
        "top_p": echo("top_p", json!(1)),
        "truncation": echo("truncation", json!("disabled")),
        "usage": if done { usage.clone() } else { Value::Null },
        "user": null,
        "metadata": echo("metadata", json!({})),
    })
}

/// One event: `type` and `sequence_number` added to `data`.
fn event(events: &mut Vec<(&'static str, Bytes)>, kind: &'static str, mut data: Value) {
    if let Some(m) = data.as_object_mut() {
        m.insert("type".into(), json!(kind));
        m.insert("sequence_number".into(), json!(events.len()));
    }
    events.push((kind, respond::sse_event(kind, &data)));
}

/// Every event of the streamed answer, named.
fn stream_events(
    a: &Answer,
    obj: &Map<String, Value>,
    pieces: usize,
) -> Vec<(&'static str, Bytes)> {
    let mut evs = Vec::new();
    let started = || response_object(a, obj, "in_progress", Vec::new(), &Value::Null);
    event(&mut evs, "response.created", json!({"response": started()}));
    event(
        &mut evs,
        "response.in_progress",
        json!({"response": started()}),
    );
    let (added, done) = (output_items(a, false), output_items(a, true));
    let mut index = 0;
    if let Some((id, text)) = &a.message {
        event(
            &mut evs,
            "response.output_item.added",
            json!({"output_index": index, "item": added[index]}),
        );
        let at = |extra: Value| {
            let mut v = json!({"item_id": id, "output_index": index, "content_index": 0});
            if let (Some(m), Value::Object(e)) = (v.as_object_mut(), extra) {
                m.extend(e);
            }
            v
        };
        event(
            &mut evs,
            "response.content_part.added",
            at(json!({"part": output_text("")})),
        );
        for piece in split_pieces(text, pieces) {
            event(
                &mut evs,
                "response.output_text.delta",
                at(json!({"delta": piece, "logprobs": []})),
            );
        }
        event(
            &mut evs,
            "response.output_text.done",
            at(json!({"text": text, "logprobs": []})),
        );
        event(
            &mut evs,
            "response.content_part.done",
            at(json!({"part": output_text(text)})),
        );
        event(
            &mut evs,
            "response.output_item.done",
            json!({"output_index": index, "item": done[index]}),
        );
        index += 1;
    }
    for (id, _, name) in &a.calls {
        event(
            &mut evs,
            "response.output_item.added",
            json!({"output_index": index, "item": added[index]}),
        );
        let (x, y) = a.args.split_at(a.args.len() / 2);
        for fragment in [x, y] {
            event(
                &mut evs,
                "response.function_call_arguments.delta",
                json!({"item_id": id, "output_index": index, "delta": fragment}),
            );
        }
        event(
            &mut evs,
            "response.function_call_arguments.done",
            json!({"item_id": id, "output_index": index, "arguments": a.args, "name": name}),
        );
        event(
            &mut evs,
            "response.output_item.done",
            json!({"output_index": index, "item": done[index]}),
        );
        index += 1;
    }
    let terminal = if a.incomplete.is_some() {
        "response.incomplete"
    } else {
        "response.completed"
    };
    let finished = response_object(a, obj, a.status(), done, &a.usage);
    event(&mut evs, terminal, json!({"response": finished}));
    evs
}

/// How a stream fault shows in a Responses stream: `error-first` after `response.in_progress`,
/// `error-event` after the first delta, each as the API's `error` event then
/// `response.failed`.
fn stream_fault(
    fault: Option<Fault>,
    a: &Answer,
    obj: &Map<String, Value>,
    events: &[(&'static str, Bytes)],
) -> StreamFault {
    match fault {
        Some(Fault::BreakAfter(k)) => StreamFault::BreakAfter(k),
        Some(Fault::Stall) => StreamFault::StallAfter(1),
        Some(f @ (Fault::ErrorEvent | Fault::ErrorFirst)) => {
            let at = if f == Fault::ErrorFirst {
                2
            } else {
                events
                    .iter()
                    .position(|(kind, _)| kind.ends_with(".delta"))
                    .map_or(2, |i| i + 1)
            };
            let message =
                "The server had an error while processing your request. Sorry about that!";
            let mut tail = Vec::new();
            let mut evs = Vec::new();
            // Numbered on from the events sent before.
            evs.resize(at, ("", Bytes::new()));
            event(
                &mut evs,
                "error",
                json!({"error": {"type": "server_error", "code": "server_error", "message": message, "param": null}}),
            );
            let mut failed = response_object(a, obj, "failed", Vec::new(), &Value::Null);
            failed["error"] = json!({"code": "server_error", "message": message});
            event(&mut evs, "response.failed", json!({"response": failed}));
            for (_, e) in &evs[at..] {
                tail.extend_from_slice(e);
            }
            StreamFault::ErrorTail(at, Bytes::from(tail))
        }
        _ => StreamFault::None,
    }
}
