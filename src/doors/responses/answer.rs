//! The buffered answer: the `chat.completion` an adapter produced → a `response` object; and
//! the pieces the stream renders the same way (its items, its final object).
//!
//! ## The mapping
//!
//! `output` holds, in this order:
//! - one `reasoning` item per reasoning block: `summary` = the block's thinking text as one
//!   `summary_text` (empty list when there is none), `encrypted_content` = the block's
//!   `reasoning_details` (Claude's signed thinking, redacted thinking) as a `tg1.` blob
//!   (`reasoning::encode`; absent when the block has none). Blocks are runs of details with
//!   one `index`; a message with reasoning text and no details gives one item;
//! - a `message` item (`role: assistant`) when there is text: `output_text` (with empty
//!   `annotations` and `logprobs`), then a `refusal` part when the model refused;
//! - one `function_call` item per tool call: `call_id` the tool call's id verbatim (Gemini's
//!   thought signatures ride in the ids this gateway mints), `arguments` the JSON text as the
//!   model wrote it; a name the request flattened from a Codex `namespace` tool
//!   (`names::flat_name`) is split back into `namespace` and `name`, the pair Codex looks its
//!   handler up by.
//!
//! Item ids derive from the response id (`resp_X` → `rs_X_0`, `msg_X`, `fc_X_<call index>`):
//! the stream mints the same ones, and an answer continued later names the same items.
//!
//! `status`: `completed`; `incomplete` when the finish reason is `length`
//! (`incomplete_details.reason: max_output_tokens`) or `content_filter` (`content_filter`),
//! and then the last item (a message or call cut short) is `incomplete` too. `usage` comes
//! from the exact [`Usage`] buckets the adapter counted, never from the completion's JSON:
//! `input_tokens` counts every input token (cache reads and writes included, as OpenAI's does),
//! `cached_tokens` the cache reads, `cache_write_tokens` the writes, `output_tokens` every
//! output token (reasoning included, `reasoning_tokens` its part).
//!
//! Request echoes are not reproduced: the translator never sees the request, so
//! `instructions`, `temperature`, `top_p` are `null`, `tools` is `[]`, `tool_choice` `auto`,
//! `parallel_tool_calls` `true`, `text.format` `text`, `metadata` `{}` whatever the client sent,
//! and `max_output_tokens`, `previous_response_id`, `reasoning`, `store`, `truncation`,
//! `user`, `service_tier` are left out. The SDKs and Codex read none of them back.

use bytes::Bytes;
use serde::Serialize;

use super::names::split_name;
use super::reasoning::{self, Detail};
use crate::api::{Str, Usage};
use crate::doors::chat_in::{first_choice, CompletionChoiceIn, FunctionIn, ReasoningDetailIn};
use crate::providers::chat_answer::{AnswerRender, ChatAnswer};
use crate::providers::{ResponseCx, TranslateError};

/// The `response` object for `completion`, a chat completion's JSON (the first choice), with
/// `usage` and `cx`'s id and model.
pub fn to_response(
    completion: &[u8],
    usage: &Usage,
    cx: &ResponseCx,
) -> Result<Bytes, TranslateError> {
    AsResponse.render(ChatAnswer::Json(completion), usage, cx)
}

/// The Responses door's buffered answers.
pub struct AsResponse;

impl AnswerRender for AsResponse {
    fn render(
        &self,
        answer: ChatAnswer<'_>,
        usage: &Usage,
        cx: &ResponseCx,
    ) -> Result<Bytes, TranslateError> {
        response(first_choice(answer)?, usage, cx)
    }
}

fn response(
    choice: CompletionChoiceIn<'_>,
    usage: &Usage,
    cx: &ResponseCx,
) -> Result<Bytes, TranslateError> {
    let mut m = choice.message;
    let ids = Ids::of(&cx.id);
    let details = std::mem::take(&mut m.reasoning_details);
    let mut output = reasoning_items(m.reasoning(), details, &ids);
    let mut content = Vec::with_capacity(2);
    if let Some(text) = m.content.filter(|t| !t.is_empty()) {
        content.push(Part::text(text.0.into_owned()));
    }
    if let Some(refusal) = m.refusal.filter(|t| !t.is_empty()) {
        content.push(Part::Refusal {
            refusal: refusal.0.into_owned(),
        });
    }
    if !content.is_empty() {
        output.push(Item::Message {
            id: ids.message(0),
            status: COMPLETED,
            role: "assistant",
            content,
        });
    }
    output.reserve(m.tool_calls.len());
    for (at, call) in m.tool_calls.into_iter().enumerate() {
        let (
            Some(call_id),
            Some(FunctionIn {
                name: Some(name),
                arguments,
            }),
        ) = (call.id, call.function)
        else {
            return Err(TranslateError::Shape(
                "a tool call without its id or function name".into(),
            ));
        };
        let index = u32::try_from(at).unwrap_or(u32::MAX);
        output.push(Item::call(
            ids.call(index),
            call_id.0.into_owned(),
            &name,
            arguments.map(|a| a.0.into_owned()).unwrap_or_default(),
            COMPLETED,
        ));
    }
    let outcome = Outcome::of(choice.finish_reason.as_deref());
    if let Some(last) = output.last_mut() {
        last.set_status(outcome.item_status());
    }
    Ok(render(cx, State::Done(outcome), &output, Some(usage)))
}

/// The reasoning items of a message: one per run of details sharing an `index`; without
/// details, one for the reasoning text alone.
fn reasoning_items(
    text: Option<Str<'_>>,
    details: Vec<ReasoningDetailIn<'_>>,
    ids: &Ids,
) -> Vec<Item> {
    let text = text.filter(|t| !t.is_empty());
    // Runs, not a lookup by index: a block's details come together, and this stays linear.
    let mut blocks: Vec<(u32, Vec<Detail>)> = Vec::new();
    for (index, d) in details.into_iter().filter_map(detail) {
        match blocks.last_mut() {
            Some((at, ds)) if *at == index => ds.push(d),
            _ => blocks.push((index, vec![d])),
        }
    }
    if blocks.is_empty() {
        return text
            .map(|t| reasoning_item(ids.reasoning(0), t.0.into_owned(), &[]))
            .into_iter()
            .collect();
    }
    let mut items: Vec<Item> = blocks
        .iter()
        .zip(0..)
        .map(|((_, ds), n)| {
            let summary: String = ds.iter().filter_map(|d| d.text.as_deref()).collect();
            reasoning_item(ids.reasoning(n), summary, ds)
        })
        .collect();
    // Details that carry no text (only signatures): the message's reasoning text is the
    // summary of the first block rather than lost.
    if let (Some(text), Some(Item::Reasoning { summary, .. })) = (text, items.first_mut()) {
        if summary.is_empty()
            && blocks
                .iter()
                .all(|(_, ds)| ds.iter().all(|d| d.text.is_none()))
        {
            summary.push(SummaryText::of(text.0.into_owned()));
        }
    }
    items
}

/// A chat reasoning detail as the `tg1.` blob keeps it, with its block index; `None` for one
/// that carries nothing to replay (an empty marker, a kind the request side cannot replay).
pub(super) fn detail(d: ReasoningDetailIn<'_>) -> Option<(u32, Detail)> {
    let owned = |s: Option<Str<'_>>| s.filter(|s| !s.is_empty()).map(|s| s.0.into_owned());
    let detail = match &*d.kind {
        TEXT_DETAIL => Detail {
            kind: TEXT_DETAIL.into(),
            text: owned(d.text),
            signature: owned(d.signature),
            data: None,
        },
        ENCRYPTED_DETAIL => Detail {
            kind: ENCRYPTED_DETAIL.into(),
            text: None,
            signature: None,
            data: owned(d.data),
        },
        _ => return None,
    };
    let empty = detail.text.is_none() && detail.signature.is_none() && detail.data.is_none();
    (!empty).then_some((d.index, detail))
}

pub(super) const TEXT_DETAIL: &str = "reasoning.text";
pub(super) const ENCRYPTED_DETAIL: &str = "reasoning.encrypted";
pub(super) const COMPLETED: &str = "completed";
pub(super) const IN_PROGRESS: &str = "in_progress";

/// A reasoning item: `summary` as one `summary_text` (none when empty), `details` as its
/// `encrypted_content`.
pub(super) fn reasoning_item(id: String, summary: String, details: &[Detail]) -> Item {
    Item::Reasoning {
        id,
        summary: if summary.is_empty() {
            Vec::new()
        } else {
            vec![SummaryText::of(summary)]
        },
        encrypted_content: reasoning::encode(details),
    }
}

/// The ids of a response's items, derived from its own.
pub(super) struct Ids {
    tail: String,
}

impl Ids {
    /// From `resp_X`: `X` (an id without `_` is used whole).
    pub fn of(id: &str) -> Self {
        let tail = id.split_once('_').map_or(id, |(_, tail)| tail);
        Ids { tail: tail.into() }
    }
    /// The `n`th message item: `msg_X`, then `msg_X_1`, … (a stream that returns to text).
    pub fn message(&self, n: u32) -> String {
        match n {
            0 => format!("msg_{}", self.tail),
            n => format!("msg_{}_{n}", self.tail),
        }
    }
    /// The `n`th reasoning item.
    pub fn reasoning(&self, n: u32) -> String {
        format!("rs_{}_{n}", self.tail)
    }
    /// The item of the tool call at chat `index`.
    pub fn call(&self, index: u32) -> String {
        format!("fc_{}_{index}", self.tail)
    }
    /// A `call_id` for a streamed tool call the upstream gave none.
    pub fn call_id(&self, index: u32) -> String {
        format!("call_{}_{index}", self.tail)
    }
}

/// How an answer ended, from its finish reason.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Outcome {
    Completed,
    /// `incomplete_details.reason`.
    Incomplete(&'static str),
}

impl Outcome {
    pub fn of(finish_reason: Option<&str>) -> Self {
        match finish_reason {
            Some("length") => Outcome::Incomplete("max_output_tokens"),
            Some("content_filter") => Outcome::Incomplete("content_filter"),
            _ => Outcome::Completed,
        }
    }
    /// The status of the item the answer ended in.
    pub fn item_status(self) -> &'static str {
        match self {
            Outcome::Completed => COMPLETED,
            Outcome::Incomplete(_) => "incomplete",
        }
    }
    /// The stream's last event.
    pub fn event(self) -> &'static str {
        match self {
            Outcome::Completed => "response.completed",
            Outcome::Incomplete(_) => "response.incomplete",
        }
    }
}

/// What the response object says of its progress.
#[derive(Debug, Clone, Copy)]
pub(super) enum State<'a> {
    InProgress,
    Done(Outcome),
    /// The upstream failed, saying this.
    Failed(&'a str),
}

/// The `response` object.
pub(super) fn render(
    cx: &ResponseCx,
    state: State<'_>,
    output: &[Item],
    usage: Option<&Usage>,
) -> Bytes {
    let (status, error, incomplete_details) = match state {
        State::InProgress => (IN_PROGRESS, None, None),
        State::Done(Outcome::Completed) => (COMPLETED, None, None),
        State::Done(Outcome::Incomplete(reason)) => {
            ("incomplete", None, Some(IncompleteDetails { reason }))
        }
        State::Failed(message) => (
            "failed",
            // `server_error`, not `upstream_error`: the SDKs type this code as an enum.
            Some(ErrorOut {
                code: "server_error",
                message,
            }),
            None,
        ),
    };
    let response = ResponseOut {
        id: &cx.id,
        object: "response",
        created_at: cx.created,
        status,
        error,
        incomplete_details,
        instructions: None,
        model: &cx.model_id,
        output,
        parallel_tool_calls: true,
        temperature: None,
        top_p: None,
        tool_choice: "auto",
        tools: [],
        text: TextOut {
            format: Format { kind: "text" },
        },
        metadata: Empty {},
        usage: usage.map(UsageOut::of),
    };
    // Room for the fixed fields without growing; an answer's text grows it once or twice.
    let mut body = Vec::with_capacity(1024);
    // Our own structs, string keys only: serialising cannot fail.
    match crate::api::json::append(&mut body, &response) {
        Ok(()) => Bytes::from(body),
        Err(_) => Bytes::new(),
    }
}

/// One output item, as `response.output` and the stream's `output_item` events carry it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(super) enum Item {
    Reasoning {
        id: String,
        summary: Vec<SummaryText>,
        #[serde(skip_serializing_if = "Option::is_none")]
        encrypted_content: Option<String>,
    },
    Message {
        id: String,
        status: &'static str,
        role: &'static str,
        content: Vec<Part>,
    },
    FunctionCall {
        id: String,
        status: &'static str,
        call_id: String,
        name: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        namespace: Option<String>,
        arguments: String,
    },
}

impl Item {
    /// A `function_call` for the tool `flat_name` (split back when the request flattened a
    /// namespace into it).
    pub fn call(
        id: String,
        call_id: String,
        flat_name: &str,
        arguments: String,
        status: &'static str,
    ) -> Self {
        let (namespace, name) = match split_name(flat_name) {
            Some((ns, name)) => (Some(ns.to_owned()), name.to_owned()),
            None => (None, flat_name.to_owned()),
        };
        Item::FunctionCall {
            id,
            status,
            call_id,
            name,
            namespace,
            arguments,
        }
    }

    /// Sets a message's or call's status (reasoning items have none).
    pub fn set_status(&mut self, to: &'static str) {
        match self {
            Item::Message { status, .. } | Item::FunctionCall { status, .. } => *status = to,
            Item::Reasoning { .. } => {}
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(super) struct SummaryText {
    #[serde(rename = "type")]
    kind: &'static str,
    pub text: String,
}

impl SummaryText {
    pub fn of(text: String) -> Self {
        SummaryText {
            kind: "summary_text",
            text,
        }
    }
}

/// A part of a message item's `content`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(super) enum Part {
    OutputText {
        text: String,
        annotations: [(); 0],
        logprobs: [(); 0],
    },
    Refusal {
        refusal: String,
    },
}

impl Part {
    pub fn text(text: String) -> Self {
        Part::OutputText {
            text,
            annotations: [],
            logprobs: [],
        }
    }
    /// What the part says, to append to.
    pub fn said_mut(&mut self) -> &mut String {
        match self {
            Part::OutputText { text, .. } => text,
            Part::Refusal { refusal } => refusal,
        }
    }
}

#[derive(Serialize)]
struct ResponseOut<'a> {
    id: &'a str,
    object: &'static str,
    created_at: i64,
    status: &'static str,
    error: Option<ErrorOut<'a>>,
    incomplete_details: Option<IncompleteDetails>,
    instructions: Option<()>,
    model: &'a str,
    output: &'a [Item],
    parallel_tool_calls: bool,
    temperature: Option<()>,
    top_p: Option<()>,
    tool_choice: &'static str,
    tools: [(); 0],
    text: TextOut,
    metadata: Empty,
    usage: Option<UsageOut>,
}

#[derive(Serialize)]
struct ErrorOut<'a> {
    code: &'static str,
    message: &'a str,
}

#[derive(Serialize)]
struct IncompleteDetails {
    reason: &'static str,
}

#[derive(Serialize)]
struct TextOut {
    format: Format,
}

#[derive(Serialize)]
struct Format {
    #[serde(rename = "type")]
    kind: &'static str,
}

/// `{}`.
#[derive(Serialize)]
struct Empty {}

/// The Responses API's `usage` from the gateway's disjoint buckets.
#[derive(Serialize)]
struct UsageOut {
    input_tokens: u64,
    input_tokens_details: InputDetails,
    output_tokens: u64,
    output_tokens_details: OutputDetails,
    total_tokens: u64,
}

#[derive(Serialize)]
struct InputDetails {
    cached_tokens: u64,
    cache_write_tokens: u64,
}

#[derive(Serialize)]
struct OutputDetails {
    reasoning_tokens: u64,
}

impl UsageOut {
    fn of(u: &Usage) -> Self {
        let input = u.prompt_tokens();
        UsageOut {
            input_tokens: input,
            input_tokens_details: InputDetails {
                cached_tokens: u.cache_read,
                cache_write_tokens: u.cache_write.saturating_add(u.cache_write_1h),
            },
            output_tokens: u.output,
            output_tokens_details: OutputDetails {
                reasoning_tokens: u.reasoning,
            },
            total_tokens: input.saturating_add(u.output),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::reasoning::decode;
    use super::super::test_support::{cx, fixture};
    use super::*;
    use crate::providers::anthropic::Anthropic;
    use crate::providers::{gemini::Gemini, openai_compat::OpenAiCompat, Adapter};
    use serde_json::{json, Value};

    fn response(completion: Value, usage: &Usage) -> Value {
        let bytes = to_response(&serde_json::to_vec(&completion).unwrap(), usage, &cx()).unwrap();
        serde_json::from_slice(&bytes).unwrap()
    }

    fn completion(message: Value, finish: &str) -> Value {
        json!({"id": "x", "object": "chat.completion", "choices": [
            {"index": 0, "message": message, "finish_reason": finish}
        ]})
    }

    /// `adapter`'s buffered answer to `body`, through the door.
    fn through(adapter: &dyn Adapter, body: &[u8]) -> (Value, Value) {
        let chat = adapter.translate_buffered(body, &cx()).unwrap();
        let r = to_response(&chat.body, &chat.usage, &cx()).unwrap();
        (
            serde_json::from_slice(&r).unwrap(),
            serde_json::from_slice(&chat.body).unwrap(),
        )
    }

    fn kinds(r: &Value) -> Vec<&str> {
        r["output"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i["type"].as_str().unwrap())
            .collect()
    }

    #[test]
    fn a_text_answer_is_one_message_in_a_complete_response() {
        let body = fixture("openai-chat-completion.json");
        let (r, chat) = through(&OpenAiCompat, &body);
        let text = &chat["choices"][0]["message"]["content"];
        assert_eq!(
            r,
            json!({
                "id": "resp_gw7",
                "object": "response",
                "created_at": 1_700_000_000,
                "status": "completed",
                "error": null,
                "incomplete_details": null,
                "instructions": null,
                "model": "google/gemini-test",
                "output": [{"type": "message", "id": "msg_gw7", "status": "completed", "role": "assistant",
                    "content": [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}]}],
                "parallel_tool_calls": true,
                "temperature": null,
                "top_p": null,
                "tool_choice": "auto",
                "tools": [],
                "text": {"format": {"type": "text"}},
                "metadata": {},
                "usage": {"input_tokens": 16, "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
                    "output_tokens": 363, "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 379}
            })
        );
    }

    #[test]
    fn gemini_calls_keep_their_ids_and_arguments() {
        let body = fixture("gemini-function-call-thought-signature-2.5-pro-devapi.json");
        let (r, chat) = through(&Gemini, &body);
        assert_eq!(kinds(&r), ["reasoning", "function_call"]);
        let m = &chat["choices"][0]["message"];
        let call = &m["tool_calls"][0];
        let id = call["id"].as_str().unwrap();
        assert!(id.len() > 100, "the id carries the thought signature: {id}");
        assert_eq!(
            r["output"][1],
            json!({"type": "function_call", "id": "fc_gw7_0", "status": "completed", "call_id": id,
                "name": call["function"]["name"], "arguments": call["function"]["arguments"]})
        );
        assert_eq!(
            r["output"][0],
            json!({"type": "reasoning", "id": "rs_gw7_0",
                "summary": [{"type": "summary_text", "text": m["reasoning"]}]}),
            "no details: no encrypted_content"
        );
        assert_eq!(r["status"], "completed");
        assert_eq!(
            (
                r["usage"]["input_tokens"].as_u64(),
                r["usage"]["output_tokens"].as_u64()
            ),
            (Some(38), Some(8 + 501))
        );
        assert_eq!(r["usage"]["output_tokens_details"]["reasoning_tokens"], 501);

        let body = fixture("gemini-function-call-parallel-vertex.json");
        let (r, chat) = through(&Gemini, &body);
        let calls = chat["choices"][0]["message"]["tool_calls"]
            .as_array()
            .unwrap();
        assert!(calls.len() > 1);
        let items: Vec<(&Value, &Value)> = r["output"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|i| i["type"] == "function_call")
            .map(|i| (&i["id"], &i["call_id"]))
            .collect();
        let want: Vec<(Value, &Value)> = calls
            .iter()
            .enumerate()
            .map(|(n, c)| (json!(format!("fc_gw7_{n}")), &c["id"]))
            .collect();
        let want: Vec<(&Value, &Value)> = want.iter().map(|(a, b)| (a, *b)).collect();
        assert_eq!(items, want, "one item per call, in order, ids verbatim");
    }

    #[test]
    fn gemini_thinking_comes_before_the_text() {
        let body = fixture("gemini-generate-thinking-2.5-flash-devapi.json");
        let (r, chat) = through(&Gemini, &body);
        assert_eq!(kinds(&r), ["reasoning", "message"]);
        let m = &chat["choices"][0]["message"];
        assert_eq!(r["output"][0]["summary"][0]["text"], m["reasoning"]);
        assert_eq!(r["output"][1]["content"][0]["text"], m["content"]);
    }

    #[test]
    fn claude_answers_carry_their_reasoning_details() {
        let body = fixture("anthropic-message-thinking.json");
        let (r, chat) = through(&Anthropic, &body);
        assert_eq!(kinds(&r), ["reasoning", "message"]);
        assert_eq!(
            r["output"][0]["summary"][0]["text"],
            "925 divided by 5 = 185"
        );
        assert_eq!(r["output"][1]["content"][0]["text"], "925 ÷ 5 = 185");
        // What the adapter gives as details is what the blob carries (none before the
        // adapter kept signatures).
        let raw = serde_json::to_vec(&chat["choices"][0]["message"]["reasoning_details"]).unwrap();
        let details: Vec<ReasoningDetailIn> = serde_json::from_slice(&raw).unwrap_or_default();
        let want: Vec<Detail> = details
            .into_iter()
            .filter_map(detail)
            .map(|d| d.1)
            .collect();
        assert_eq!(
            r["output"][0]["encrypted_content"]
                .as_str()
                .map(str::to_owned),
            reasoning::encode(&want)
        );
        let body = fixture("anthropic-message-text.json");
        let (r, _) = through(&Anthropic, &body);
        assert_eq!(kinds(&r), ["message"]);
    }

    #[test]
    fn each_reasoning_block_is_an_item_with_its_signed_details() {
        let r = response(
            completion(
                json!({"role": "assistant", "content": "Done.", "reasoning": "First.Second.",
                "reasoning_details": [
                    {"type": "reasoning.text", "text": "First.", "signature": "sig0", "index": 0},
                    {"type": "reasoning.encrypted", "data": "redacted", "index": 1},
                    {"type": "reasoning.text", "text": "Second.", "signature": "sig2", "index": 2},
                    {"type": "reasoning.text", "text": "", "signature": "", "index": 3},
                    {"type": "reasoning.summary", "summary": "ignored", "index": 3}
                ]}),
                "stop",
            ),
            &Usage::default(),
        );
        assert_eq!(
            kinds(&r),
            ["reasoning", "reasoning", "reasoning", "message"]
        );
        let out = &r["output"];
        let ids: Vec<&Value> = (0..3).map(|i| &out[i]["id"]).collect();
        assert_eq!(
            ids,
            [&json!("rs_gw7_0"), &json!("rs_gw7_1"), &json!("rs_gw7_2")]
        );
        assert_eq!(
            out[0]["summary"],
            json!([{"type": "summary_text", "text": "First."}])
        );
        assert_eq!(out[1]["summary"], json!([]));
        assert_eq!(
            out[2]["summary"],
            json!([{"type": "summary_text", "text": "Second."}])
        );
        let blob = |i: usize| decode(out[i]["encrypted_content"].as_str().unwrap()).unwrap();
        let text = |t: &str, s: &str| Detail {
            kind: TEXT_DETAIL.into(),
            text: Some(t.into()),
            signature: Some(s.into()),
            data: None,
        };
        assert_eq!(blob(0), [text("First.", "sig0")]);
        assert_eq!(
            blob(1),
            [Detail {
                kind: ENCRYPTED_DETAIL.into(),
                text: None,
                signature: None,
                data: Some("redacted".into()),
            }]
        );
        assert_eq!(blob(2), [text("Second.", "sig2")]);
    }

    #[test]
    fn signatures_without_text_keep_the_reasoning_text_as_summary() {
        // A client that excluded reasoning: the signature is kept, there is no text.
        let r = response(
            completion(
                json!({"role": "assistant", "content": "4", "reasoning_details": [
                    {"type": "reasoning.text", "signature": "sig0", "index": 0}
                ]}),
                "stop",
            ),
            &Usage::default(),
        );
        assert_eq!(r["output"][0]["summary"], json!([]));
        let details = decode(r["output"][0]["encrypted_content"].as_str().unwrap()).unwrap();
        assert_eq!(details[0].signature.as_deref(), Some("sig0"));
        assert_eq!(details[0].text, None);
        // Text on the message only: the first block's summary.
        let r = response(
            completion(
                json!({"role": "assistant", "content": "4", "reasoning_content": "Add.",
                "reasoning_details": [{"type": "reasoning.text", "signature": "sig0", "index": 0}]}),
                "stop",
            ),
            &Usage::default(),
        );
        assert_eq!(
            r["output"][0]["summary"],
            json!([{"type": "summary_text", "text": "Add."}])
        );
        assert!(r["output"][0]["encrypted_content"].is_string());
    }

    #[test]
    fn namespaced_calls_come_back_split() {
        let flat = super::super::names::flat_name("mcp__github__", "create_issue").unwrap();
        let r = response(
            completion(
                json!({"role": "assistant", "content": null, "tool_calls": [
                    {"id": "c0", "type": "function", "function": {"name": flat, "arguments": "{}"}},
                    {"id": "c1", "type": "function", "function": {"name": "mcp__server__tool", "arguments": "{}"}}
                ]}),
                "tool_calls",
            ),
            &Usage::default(),
        );
        assert_eq!(
            r["output"],
            json!([
                {"type": "function_call", "id": "fc_gw7_0", "status": "completed", "call_id": "c0",
                    "name": "create_issue", "namespace": "mcp__github__", "arguments": "{}"},
                {"type": "function_call", "id": "fc_gw7_1", "status": "completed", "call_id": "c1",
                    "name": "mcp__server__tool", "arguments": "{}"}
            ])
        );
    }

    #[test]
    fn cut_answers_are_incomplete() {
        for (finish, reason) in [
            ("length", "max_output_tokens"),
            ("content_filter", "content_filter"),
        ] {
            let r = response(
                completion(
                    json!({"role": "assistant", "content": "Half", "tool_calls": [
                        {"id": "c0", "type": "function", "function": {"name": "f", "arguments": "{\"a\":"}}
                    ]}),
                    finish,
                ),
                &Usage::default(),
            );
            assert_eq!(r["status"], "incomplete", "{finish}");
            assert_eq!(
                r["incomplete_details"],
                json!({"reason": reason}),
                "{finish}"
            );
            assert_eq!(r["output"][0]["status"], "completed", "{finish}");
            assert_eq!(
                r["output"][1]["status"], "incomplete",
                "{finish}: the last item was cut"
            );
            assert_eq!(r["output"][1]["arguments"], "{\"a\":", "{finish}");
        }
        for finish in ["stop", "tool_calls", "something_new"] {
            let r = response(
                completion(json!({"role": "assistant", "content": "x"}), finish),
                &Usage::default(),
            );
            assert_eq!(r["status"], "completed", "{finish}");
            assert_eq!(r["incomplete_details"], Value::Null, "{finish}");
        }
        let r = response(
            completion(
                json!({"role": "assistant", "content": null}),
                "content_filter",
            ),
            &Usage::default(),
        );
        assert_eq!(r["output"], json!([]), "a blocked prompt has no output");
        assert_eq!(r["status"], "incomplete");
    }

    #[test]
    fn refusals_are_refusal_parts() {
        let r = response(
            completion(
                json!({"role": "assistant", "content": null, "refusal": "I can't help with that."}),
                "stop",
            ),
            &Usage::default(),
        );
        assert_eq!(
            r["output"][0]["content"],
            json!([{"type": "refusal", "refusal": "I can't help with that."}])
        );
    }

    #[test]
    fn usage_comes_from_the_exact_buckets() {
        let usage = Usage {
            input: 11,
            audio_input: 4,
            cache_read: 300,
            cache_write: 50,
            cache_write_1h: 7,
            output: 90,
            reasoning: 60,
            cache_storage_token_seconds: 9,
        };
        let mut c = completion(json!({"role": "assistant", "content": "x"}), "stop");
        c["usage"] = json!({"prompt_tokens": 1, "completion_tokens": 1});
        let r = response(c, &usage);
        assert_eq!(
            r["usage"],
            json!({
                "input_tokens": 372,
                "input_tokens_details": {"cached_tokens": 300, "cache_write_tokens": 57},
                "output_tokens": 90,
                "output_tokens_details": {"reasoning_tokens": 60},
                "total_tokens": 462
            })
        );
    }

    #[test]
    fn item_ids_follow_the_response_id() {
        let ids = Ids::of("resp_0kX3abc");
        assert_eq!(
            [
                ids.message(0),
                ids.message(2),
                ids.reasoning(1),
                ids.call(3),
                ids.call_id(3)
            ],
            [
                "msg_0kX3abc",
                "msg_0kX3abc_2",
                "rs_0kX3abc_1",
                "fc_0kX3abc_3",
                "call_0kX3abc_3"
            ]
        );
        assert_eq!(Ids::of("plain").message(0), "msg_plain");
    }

    #[test]
    fn unreadable_completions_are_translate_errors() {
        assert!(matches!(
            to_response(b"{", &Usage::default(), &cx()),
            Err(TranslateError::Json(_))
        ));
        assert!(matches!(
            to_response(br#"{"choices":[]}"#, &Usage::default(), &cx()),
            Err(TranslateError::Shape(_))
        ));
        let nameless =
            br#"{"choices":[{"message":{"tool_calls":[{"id":"c","function":{"arguments":"{}"}}]}}]}"#;
        assert!(matches!(
            to_response(nameless, &Usage::default(), &cx()),
            Err(TranslateError::Shape(_))
        ));
        let idless = br#"{"choices":[{"message":{"tool_calls":[{"function":{"name":"f"}}]}}]}"#;
        assert!(matches!(
            to_response(idless, &Usage::default(), &cx()),
            Err(TranslateError::Shape(_))
        ));
    }
}
