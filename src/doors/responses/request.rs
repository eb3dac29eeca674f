//! The Responses request → the chat body (the request model), what a chat client could have
//! sent for the same conversation, so the route's adapter plans it as it plans any chat
//! request. Raw slices of the client's body are copied byte for byte where the two formats
//! agree (numbers, schemas, call ids, arguments). Every shape is OpenAI's
//! (`openai-python` `types/responses`), as the SDKs and Codex send it.
//!
//! ## Mapped
//!
//! | Responses | chat body |
//! |---|---|
//! | `model`, `temperature`, `top_p`, `parallel_tool_calls`, `prompt_cache_key`, `service_tier` | copied |
//! | `stream` | copied; `true` adds `stream_options.include_usage` (the usage is billed) |
//! | `max_output_tokens` | `max_completion_tokens` |
//! | `safety_identifier`, else `user` | `user` |
//! | `instructions` (a non-empty string) | a leading `system` message |
//! | `input` as a string | one `user` message |
//! | `message` items, `type` optional (EasyInputMessage) | role `user` → `user`; `system`, `developer` → `system` where it stands (every chat adapter gathers system text wherever it is, as the Messages door relies on); `assistant` → below |
//! | parts `input_text`, `output_text` (`refusal` in assistant turns) | `text` |
//! | `input_image` with `image_url` (a data: or https: URL) | `image_url` (`detail` dropped) |
//! | `input_file` with `file_data` (a data: URL, or bare base64 typed by `filename`'s extension, PDF by default) or `file_url` | `file` (`file_data`, `filename`) |
//! | `input_audio` | `input_audio` |
//! | assistant `message`s, `function_call`s and `reasoning` between two user or tool turns | ONE `assistant` message: the text parts, `tool_calls` (`id` = `call_id` verbatim: Gemini's thought signatures ride in the ids this gateway mints; `arguments` verbatim), `reasoning_details` from each `reasoning` item whose `encrypted_content` is this gateway's (`reasoning::decode`: Claude's signed thinking) |
//! | `function_call_output`, `custom_tool_call_output`, `local_shell_call_output` | a `tool` message (`tool_call_id` = `call_id`): the output string, or its `input_text` parts joined by newlines |
//! | `custom_tool_call` (Codex's grammar tools) | a tool call of the function the custom tool became, `arguments` = `{"input": <input>}` |
//! | `local_shell_call` | a tool call of `local_shell`, `arguments` = the `action` object |
//! | `additional_tools` items | their tools join `tools` (first definition of a name wins) |
//! | `tools`: `function` | a function tool: `name`, `description`, `parameters` byte for byte, `strict` |
//! | `tools`: `custom` | a function tool with one string parameter `input` (a grammar `format` is quoted in its description) |
//! | `tools`: `namespace` | its function and custom tools, each named `names::flat_name(namespace, name)` (`<namespace>--<name>`); a `function_call`/`custom_tool_call` item with a `namespace` is named the same way |
//! | `tool_choice` `auto`, `none`, `required` | copied |
//! | `tool_choice` `{type: function \| custom, name}` | the named function (a flat name, or a namespaced tool's own name when only one has it) |
//! | `tool_choice` `{type: allowed_tools, mode}` | `auto` or `required` by `mode`: every tool stays offered (the list is what prompt caches key on) |
//! | `tool_choice` naming a hosted tool | `auto` |
//! | `reasoning.effort` | `reasoning_effort` (`max` → `xhigh`) |
//! | `reasoning.summary` (or `generate_summary`) `auto`, `concise`, `detailed` | the reasoning text is wanted: with no effort, `reasoning: {}` (the model's default thinking, its text returned) |
//! | an effort without a summary | `reasoning: {exclude: true}` besides the effort: the model thinks, the answer carries no reasoning text (as the API's reasoning items then have an empty summary); Claude's signatures still come back (the chat adapter keeps `reasoning_details` under `exclude`) |
//! | `text.format` `json_schema` (`name`, `schema`, `strict`, `description`) / `json_object` | `response_format` |
//! | `text.verbosity` | `verbosity` |
//! | `store` (default true) | [`Parsed::store`] |
//!
//! `previous_response_id` is resolved by the proxy: the stored conversation (`prior`, its items
//! then its answer's output items) comes before `input`, translated the same way; the earlier
//! `instructions` are not carried over (the API's rule). [`Parsed::items`] is that whole
//! conversation as Responses items, each copied verbatim, for the next continuation.
//!
//! Cache breakpoints, on Claude routes only (`family == Anthropic`; Gemini would turn each into
//! a paid explicit cache): a request with a `prompt_cache_key` gets `cache_control:
//! {type: ephemeral}` on the last system message and on the conversation's last message (on
//! its last content part; on the message for a `tool` message or one without content), so an
//! agent loop reads the prefix it wrote the turn before; an input part's
//! `prompt_cache_breakpoint` becomes a breakpoint on that part.
//!
//! ## Dropped
//!
//! - Hosted tools (any tool `type` but `function`, `custom`, `namespace`: `web_search*`,
//!   `file_search`, `code_interpreter`, `image_generation`, `computer*`, `mcp`, `local_shell`,
//!   `shell`, `apply_patch`, `tool_search`, …): no upstream here runs them, so the model does
//!   not see them. Deferred tools (`defer_loading`) are offered at once: `tool_search`, which
//!   would load them, is one of the dropped.
//! - A namespace's `description` (repeating it in every tool would cost its size times theirs);
//!   tool fields `defer_loading`, `allowed_callers`, `output_schema`.
//! - `reasoning` items without this gateway's blob (OpenAI's own encrypted reasoning, or a
//!   summary alone: neither can be replayed upstream); an assistant turn left with nothing but
//!   them. Item `id`, `status`, `phase`; part `detail`, `annotations`, `logprobs`.
//! - Non-text parts of a tool output (images and files: a chat `tool` message holds text).
//! - `top_logprobs`, `max_tool_calls`, `truncation`, `include`, `metadata`, `client_metadata`,
//!   `background: false`, `prompt_cache_retention`, `prompt_cache_options`, the Responses
//!   `stream_options`, `context_management`, `moderation`, `reasoning.context` and
//!   `reasoning.mode`, and any unknown field.
//!
//! A custom tool's call comes back from the chat adapter as a function call with
//! `{"input": …}` arguments: the answer cannot tell it from a function's (nothing is kept
//! between the request and the answer), so it is rendered as a `function_call`.
//!
//! ## Refused (400)
//!
//! - `background: true`, `conversation`, `prompt` (templates): this gateway keeps no
//!   background jobs, conversation objects or prompt templates.
//! - `item_reference` items (and items that are only an `id`): no item is addressable here.
//! - Items of any type not listed above (`web_search_call`, `computer_call`, `mcp_call`,
//!   `compaction`, …), named in the message: their hosted tools never ran here.
//! - A tool output whose `call_id` no earlier call has: every chat adapter needs the pairing.
//! - `file_id` in an image or file part: there is no Files API.
//! - Images, files or audio in a system, developer or assistant message.
//! - A namespace [`names::flat_name`] cannot write (one holding `--` or ending in `-`) and a
//!   plain tool name holding `--` (it would read back as namespaced).
//! - Wrong types, unknown roles, efforts or formats, a `tool_choice` naming no offered tool.
//!
//! The work is linear in the body: every item and part is parsed once, call ids and tool names
//! are kept in hash sets.

use std::borrow::Cow;
use std::collections::HashSet;

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use super::names;
use super::reasoning::{self, Detail};
use crate::api::request::object_fields;
use crate::api::{GatewayError, Str};
use crate::catalog::Family;
use crate::doors::chat_out::{
    checked, ephemeral, typed, AudioOut, ChatOut, ContentOut, FileOut, FunctionCallOut,
    FunctionDeclOut, JsonSchemaOut, MessageOut, PartOut, ReasoningOut, ResponseFormatOut,
    ToolCallOut, ToolChoiceOut, ToolOut, UrlOut,
};
use crate::providers::common::compact;

/// A Responses request read onto the request model.
#[derive(Debug)]
pub struct Parsed {
    /// The chat body the route's adapter plans from.
    pub chat: Vec<u8>,
    /// The conversation before the answer as Responses input items (a JSON array): the prior
    /// items, then this request's `input`. Empty when the answer will not be stored.
    pub items: Vec<u8>,
    /// The client lets the gateway keep the answer (`store`, default true).
    pub store: bool,
}

/// Reads a Responses `body` onto the chat body. `prior` is the stored conversation a
/// `previous_response_id` continues (a JSON array of items: its input, then its output);
/// `family` is the route family's, which decides where cache breakpoints go.
pub fn parse(body: &[u8], prior: Option<&[u8]>, family: Family) -> Result<Parsed, GatewayError> {
    translate(body, prior, family)
}

fn translate<'a>(
    body: &'a [u8],
    prior: Option<&'a [u8]>,
    family: Family,
) -> Result<Parsed, GatewayError> {
    let fields = object_fields(body)
        .map_err(|e| GatewayError::invalid(format!("request body is not valid JSON: {e}")))?;
    let get = |name: &str| {
        fields
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| *v)
            .filter(|v| v.get() != "null")
    };

    if get("background").is_some_and(|v| v.get() == "true") {
        return Err(GatewayError::invalid(
            "background: true is not supported: this gateway runs no background responses",
        ));
    }
    if get("conversation").is_some() {
        return Err(GatewayError::invalid(
            "conversation is not supported: this gateway keeps no conversation objects; use previous_response_id or send the items",
        ));
    }
    if get("prompt").is_some() {
        return Err(GatewayError::invalid(
            "prompt is not supported: this gateway keeps no prompt templates; send instructions and input",
        ));
    }

    let model =
        get("model").ok_or_else(|| GatewayError::invalid("missing required field: model"))?;
    typed::<Str>(model, "model")?;
    let store = get("store")
        .map(|v| typed::<bool>(v, "store"))
        .transpose()?
        .unwrap_or(true);
    let stream = get("stream")
        .map(|v| typed::<bool>(v, "stream"))
        .transpose()?
        .unwrap_or(false);
    let anthropic = family == Family::Anthropic;
    let prompt_cache_key = get("prompt_cache_key")
        .map(|v| checked::<Str>(v, "prompt_cache_key", "a string"))
        .transpose()?;

    let mut conv = Conversation::new(anthropic);
    if let Some(raw) = get("instructions") {
        let text = typed::<Str>(raw, "instructions")?;
        if !text.is_empty() {
            conv.messages
                .push(MessageOut::plain("system", Some(ContentOut::Text(text.0))));
        }
    }

    let mut items = Vec::new();
    if store {
        items.push(b'[');
    }
    if let Some(prior) = prior {
        let list: Vec<&RawValue> = serde_json::from_slice(prior).map_err(|e| {
            GatewayError::Internal(format!("the stored conversation is not an array: {e}").into())
        })?;
        for (i, raw) in list.into_iter().enumerate() {
            conv.item(&format!("previous response's items[{i}]"), raw)?;
            keep(&mut items, store, raw.get());
        }
    }
    match get("input") {
        Some(raw) if raw.get().starts_with('"') => {
            let text = typed::<Str>(raw, "input")?;
            conv.flush();
            conv.messages
                .push(MessageOut::plain("user", Some(ContentOut::Text(text.0))));
            if store {
                let item = format!(
                    r#"{{"type":"message","role":"user","content":[{{"type":"input_text","text":{}}}]}}"#,
                    raw.get()
                );
                keep(&mut items, store, &item);
            }
        }
        Some(raw) => {
            let list: Vec<&RawValue> = serde_json::from_str(raw.get()).map_err(|_| {
                GatewayError::invalid(
                    "invalid value for input: expected a string or an array of items",
                )
            })?;
            for (i, raw) in list.into_iter().enumerate() {
                conv.item(&format!("input[{i}]"), raw)?;
                keep(&mut items, store, raw.get());
            }
        }
        None if prior.is_some() => {}
        None => return Err(GatewayError::invalid("missing required field: input")),
    }
    conv.flush();
    if store {
        items.push(b']');
    }
    if conv.messages.is_empty() {
        return Err(GatewayError::invalid(
            "input must hold at least one message or item",
        ));
    }

    let mut offered = Offered::default();
    if let Some(raw) = get("tools") {
        offered.tools(raw, "tools")?;
    }
    for (at, raw) in std::mem::take(&mut conv.extra_tools) {
        offered.tools(raw, &at)?;
    }
    let tool_choice = get("tool_choice")
        .map(|raw| tool_choice(raw, &offered.tools))
        .transpose()?
        .flatten();
    let parallel_tool_calls = get("parallel_tool_calls")
        .map(|v| typed::<bool>(v, "parallel_tool_calls"))
        .transpose()?;
    let (reasoning, reasoning_effort) = match get("reasoning") {
        Some(raw) => reasoning_controls(raw)?,
        None => (None, None),
    };
    let (response_format, verbosity) = match get("text") {
        Some(raw) => text_controls(raw)?,
        None => (None, None),
    };
    let user = match get("safety_identifier") {
        Some(raw) => Some(checked::<Str>(raw, "safety_identifier", "a string")?),
        None => get("user")
            .map(|raw| checked::<Str>(raw, "user", "a string"))
            .transpose()?,
    };

    if anthropic && prompt_cache_key.is_some() {
        conv.place_breakpoints();
    }
    let has_tools = !offered.tools.is_empty();
    let mut out = ChatOut {
        max_completion_tokens: get("max_output_tokens")
            .map(|v| checked::<u32>(v, "max_output_tokens", "an integer from 0 to 4294967295"))
            .transpose()?,
        temperature: get("temperature")
            .map(|v| checked::<f64>(v, "temperature", "a number"))
            .transpose()?,
        top_p: get("top_p")
            .map(|v| checked::<f64>(v, "top_p", "a number"))
            .transpose()?,
        tools: offered.tools,
        // Without a tool left, a choice or a parallelism setting could only confuse upstreams.
        tool_choice: tool_choice.filter(|_| has_tools),
        parallel_tool_calls: parallel_tool_calls.filter(|_| has_tools),
        reasoning,
        reasoning_effort,
        response_format,
        verbosity,
        prompt_cache_key,
        user,
        service_tier: get("service_tier")
            .map(|v| checked::<Str>(v, "service_tier", "a string"))
            .transpose()?,
        ..ChatOut::new(model, conv.messages)
    };
    out.streaming(stream);
    Ok(Parsed {
        chat: out.to_vec()?,
        items: if store { items } else { Vec::new() },
        store,
    })
}

/// Appends one item's JSON to the kept conversation.
fn keep(items: &mut Vec<u8>, store: bool, raw: &str) {
    if !store {
        return;
    }
    if items.len() > 1 {
        items.push(b',');
    }
    items.extend_from_slice(raw.as_bytes());
}

// ----- items ---------------------------------------------------------------------------------

/// Every field any item type this door reads has; which ones matter depends on `type`. The
/// fields whose type varies between item types (`arguments`, `input`, `output`) stay raw.
#[derive(Deserialize)]
struct ItemIn<'a> {
    #[serde(rename = "type", borrow, default)]
    kind: Option<Str<'a>>,
    #[serde(borrow, default)]
    role: Option<Str<'a>>,
    #[serde(borrow, default)]
    content: Option<&'a RawValue>,
    #[serde(borrow, default)]
    id: Option<Str<'a>>,
    #[serde(borrow, default)]
    call_id: Option<Str<'a>>,
    #[serde(borrow, default)]
    name: Option<Str<'a>>,
    #[serde(borrow, default)]
    namespace: Option<Str<'a>>,
    #[serde(borrow, default)]
    arguments: Option<&'a RawValue>,
    #[serde(borrow, default)]
    input: Option<&'a RawValue>,
    #[serde(borrow, default)]
    output: Option<&'a RawValue>,
    #[serde(borrow, default)]
    action: Option<&'a RawValue>,
    #[serde(borrow, default)]
    encrypted_content: Option<Str<'a>>,
    #[serde(borrow, default)]
    tools: Option<&'a RawValue>,
}

/// A content part; which fields matter depends on `type`.
#[derive(Deserialize)]
struct PartIn<'a> {
    #[serde(rename = "type", borrow)]
    kind: Str<'a>,
    #[serde(borrow, default)]
    text: Option<Str<'a>>,
    #[serde(borrow, default)]
    refusal: Option<Str<'a>>,
    #[serde(borrow, default)]
    image_url: Option<Str<'a>>,
    #[serde(borrow, default)]
    file_id: Option<Str<'a>>,
    #[serde(borrow, default)]
    file_data: Option<Str<'a>>,
    #[serde(borrow, default)]
    file_url: Option<Str<'a>>,
    #[serde(borrow, default)]
    filename: Option<Str<'a>>,
    #[serde(borrow, default)]
    input_audio: Option<AudioIn<'a>>,
    #[serde(borrow, default)]
    prompt_cache_breakpoint: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct AudioIn<'a> {
    #[serde(borrow)]
    data: Str<'a>,
    #[serde(borrow)]
    format: Str<'a>,
}

/// What an item's fields are read as, with its location for messages.
fn field<'a, T: Deserialize<'a>>(raw: &'a RawValue, at: &str) -> Result<T, GatewayError> {
    serde_json::from_str(raw.get()).map_err(|e| GatewayError::invalid(format!("{at}: {e}")))
}

fn missing(at: &str, field: &str) -> GatewayError {
    GatewayError::invalid(format!("{at}: missing field `{field}`"))
}

/// The assistant turn being gathered: everything the model said between two user or tool
/// turns.
#[derive(Default)]
struct Pending<'a> {
    parts: Vec<PartOut<'a>>,
    tool_calls: Vec<ToolCallOut<'a>>,
    details: Vec<Detail>,
}

struct Conversation<'a> {
    messages: Vec<MessageOut<'a>>,
    pending: Option<Pending<'a>>,
    /// Every call id so far: what a tool output may answer.
    calls: HashSet<Cow<'a, str>>,
    /// `additional_tools` items' tools, with where they stand.
    extra_tools: Vec<(String, &'a RawValue)>,
    /// Parts' `prompt_cache_breakpoint`s become `cache_control` (Claude routes).
    breakpoints: bool,
}

impl<'a> Conversation<'a> {
    fn new(breakpoints: bool) -> Self {
        Conversation {
            messages: Vec::new(),
            pending: None,
            calls: HashSet::new(),
            extra_tools: Vec::new(),
            breakpoints,
        }
    }

    fn assistant(&mut self) -> &mut Pending<'a> {
        self.pending.get_or_insert_with(Pending::default)
    }

    /// Ends the assistant turn being gathered: one message, unless it holds nothing an
    /// upstream can take (only reasoning).
    fn flush(&mut self) {
        let Some(mut p) = self.pending.take() else {
            return;
        };
        if p.parts.is_empty() && p.tool_calls.is_empty() {
            return;
        }
        let content = match p.parts.len() {
            0 => None,
            // One plain text is plain content: every OpenAI-compatible server reads that.
            1 if matches!(
                &p.parts[0],
                PartOut::Text {
                    cache_control: None,
                    ..
                }
            ) =>
            {
                match p.parts.pop() {
                    Some(PartOut::Text { text, .. }) => Some(ContentOut::Text(text)),
                    _ => None,
                }
            }
            _ => Some(ContentOut::Parts(p.parts)),
        };
        self.messages.push(MessageOut {
            tool_calls: p.tool_calls,
            reasoning_details: p.details,
            ..MessageOut::plain("assistant", content)
        });
    }

    /// Translates item `raw` (at `at`, for messages).
    fn item(&mut self, at: &str, raw: &'a RawValue) -> Result<(), GatewayError> {
        let mut item: ItemIn<'a> = field(raw, at)?;
        let kind: Cow<'a, str> = match item.kind.take() {
            Some(kind) => kind.0,
            None if item.role.is_some() => Cow::Borrowed("message"),
            None if item.id.is_some() => Cow::Borrowed("item_reference"),
            None => {
                return Err(GatewayError::invalid(format!(
                    "{at}: an item needs a type (or a role, for a message)"
                )))
            }
        };
        let kind = &*kind;
        match kind {
            "message" => self.message(at, item),
            "function_call" => {
                let call_id = item.call_id.ok_or_else(|| missing(at, "call_id"))?;
                let name = item.name.ok_or_else(|| missing(at, "name"))?;
                let arguments = match item.arguments.filter(|a| a.get() != "null") {
                    Some(raw) => field::<Str>(raw, &format!("{at}.arguments"))?.0,
                    None => Cow::Borrowed("{}"),
                };
                let name = call_name(at, item.namespace, name)?;
                self.call(call_id, name, arguments);
                Ok(())
            }
            "custom_tool_call" => {
                let call_id = item.call_id.ok_or_else(|| missing(at, "call_id"))?;
                let name = item.name.ok_or_else(|| missing(at, "name"))?;
                let input = item
                    .input
                    .filter(|a| a.get() != "null")
                    .ok_or_else(|| missing(at, "input"))?;
                let input = field::<Str>(input, &format!("{at}.input"))?;
                let arguments = serde_json::to_string(&CustomArguments { input: &input })
                    .map_err(|e| GatewayError::Internal(e.to_string().into()))?;
                let name = call_name(at, item.namespace, name)?;
                self.call(call_id, name, Cow::Owned(arguments));
                Ok(())
            }
            "local_shell_call" => {
                let call_id = item.call_id.or(item.id).ok_or_else(|| missing(at, "call_id"))?;
                let action = item
                    .action
                    .filter(|a| a.get().starts_with('{'))
                    .ok_or_else(|| GatewayError::invalid(format!("{at}.action: expected an object")))?;
                self.call(
                    call_id,
                    Cow::Borrowed("local_shell"),
                    Cow::Owned(compact(action.get())),
                );
                Ok(())
            }
            "function_call_output" | "custom_tool_call_output" | "local_shell_call_output" => {
                // A local shell output names its call in `id` (openai-python's docs), or in
                // `call_id` as Codex writes every output.
                let call_id = match (item.call_id, kind) {
                    (Some(id), _) => id,
                    (None, "local_shell_call_output") => {
                        item.id.ok_or_else(|| missing(at, "call_id"))?
                    }
                    (None, _) => return Err(missing(at, "call_id")),
                };
                if !self.calls.contains(&*call_id) {
                    return Err(GatewayError::invalid(format!(
                        "{at}: {kind} for call_id {:?} answers no earlier call in the conversation",
                        &*call_id
                    )));
                }
                let output = item
                    .output
                    .filter(|o| o.get() != "null")
                    .ok_or_else(|| missing(at, "output"))?;
                let text = output_text(output, &format!("{at}.output"))?;
                self.flush();
                self.messages.push(MessageOut {
                    tool_call_id: Some(call_id.0),
                    ..MessageOut::plain("tool", Some(ContentOut::Text(text)))
                });
                Ok(())
            }
            "reasoning" => {
                // Only this gateway's blobs carry what an upstream can take back; the rest
                // (OpenAI's encrypted reasoning, a summary alone) is dropped.
                if let Some(details) = item.encrypted_content.as_deref().and_then(reasoning::decode)
                {
                    self.assistant().details.extend(details);
                }
                Ok(())
            }
            "additional_tools" => {
                let tools = item.tools.ok_or_else(|| missing(at, "tools"))?;
                self.extra_tools.push((format!("{at}.tools"), tools));
                Ok(())
            }
            "item_reference" => Err(GatewayError::invalid(format!(
                "{at}: item references are not supported: this gateway keeps no items to refer to; send the item itself (or continue with previous_response_id)"
            ))),
            other => Err(GatewayError::invalid(format!(
                "{at}: items of type {other:?} are not supported on this gateway"
            ))),
        }
    }

    /// One tool call into the assistant turn being gathered.
    fn call(&mut self, id: Str<'a>, name: Cow<'a, str>, arguments: Cow<'a, str>) {
        self.calls.insert(id.0.clone());
        self.assistant().tool_calls.push(ToolCallOut {
            id: id.0,
            kind: "function",
            function: FunctionCallOut { name, arguments },
        });
    }

    fn message(&mut self, at: &str, item: ItemIn<'a>) -> Result<(), GatewayError> {
        let role = item.role.ok_or_else(|| missing(at, "role"))?;
        let content = item
            .content
            .filter(|c| c.get() != "null")
            .ok_or_else(|| missing(at, "content"))?;
        let at = format!("{at}.content");
        let role = match &*role {
            "user" => "user",
            "system" | "developer" => "system",
            "assistant" => {
                let parts = self.parts(content, &at, Role::Assistant)?;
                self.assistant().parts.extend(parts);
                return Ok(());
            }
            other => {
                return Err(GatewayError::invalid(format!(
                    "{at}: role must be user, assistant, system or developer, not {other:?}"
                )))
            }
        };
        let content = if content.get().starts_with('"') {
            ContentOut::Text(field::<Str>(content, &at)?.0)
        } else {
            let kind = if role == "user" {
                Role::User
            } else {
                Role::System
            };
            ContentOut::Parts(self.parts(content, &at, kind)?)
        };
        self.flush();
        self.messages.push(MessageOut::plain(role, Some(content)));
        Ok(())
    }

    /// A message's `content` (a string, or parts) as chat parts for `role`.
    fn parts(
        &self,
        content: &'a RawValue,
        at: &str,
        role: Role,
    ) -> Result<Vec<PartOut<'a>>, GatewayError> {
        if content.get().starts_with('"') {
            let text = field::<Str>(content, at)?.0;
            return Ok(if text.is_empty() {
                Vec::new()
            } else {
                vec![PartOut::text(text)]
            });
        }
        let list: Vec<&'a RawValue> = serde_json::from_str(content.get()).map_err(|_| {
            GatewayError::invalid(format!(
                "invalid value for {at}: expected a string or an array of content parts"
            ))
        })?;
        let mut out = Vec::with_capacity(list.len());
        for (j, raw) in list.into_iter().enumerate() {
            let at = format!("{at}[{j}]");
            let p: PartIn<'a> = field(raw, &at)?;
            let breakpoint =
                self.breakpoints && p.prompt_cache_breakpoint.is_some_and(|b| b.get() != "null");
            let mut part = part(p, &at, role)?;
            if breakpoint {
                *part.cache_control() = ephemeral();
            }
            out.push(part);
        }
        Ok(out)
    }

    /// `cache_control` on the last system message and on the last message (its last part;
    /// the message itself for a `tool` message or one without content).
    fn place_breakpoints(&mut self) {
        if let Some(system) = self.messages.iter_mut().rev().find(|m| m.role == "system") {
            system.cache_control = ephemeral();
        }
        let Some(last) = self.messages.last_mut() else {
            return;
        };
        if last.role == "tool" || last.role == "system" {
            last.cache_control = ephemeral();
            return;
        }
        match last.content.take() {
            None => last.cache_control = ephemeral(),
            Some(ContentOut::Text(text)) => {
                last.content = Some(ContentOut::Parts(vec![PartOut::Text {
                    text,
                    cache_control: ephemeral(),
                }]));
            }
            Some(ContentOut::Parts(mut parts)) => {
                match parts.last_mut() {
                    Some(part) => *part.cache_control() = ephemeral(),
                    None => last.cache_control = ephemeral(),
                }
                last.content = Some(ContentOut::Parts(parts));
            }
        }
    }
}

#[derive(Serialize)]
struct CustomArguments<'s> {
    input: &'s str,
}

/// The chat name of a call to `name`, flattened with its `namespace` when it has one.
fn call_name<'a>(
    at: &str,
    namespace: Option<Str<'a>>,
    name: Str<'a>,
) -> Result<Cow<'a, str>, GatewayError> {
    match namespace {
        None => Ok(name.0),
        Some(ns) => names::flat_name(&ns, &name).map(Cow::Owned).ok_or_else(|| {
            GatewayError::invalid(format!(
                "{at}: the namespace {:?} cannot be carried on this gateway (it may not be empty, hold \"--\" or end with \"-\")",
                &*ns
            ))
        }),
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Role {
    User,
    System,
    Assistant,
}

/// One content part of a message of `role`.
fn part<'a>(p: PartIn<'a>, at: &str, role: Role) -> Result<PartOut<'a>, GatewayError> {
    let text_only = |what: &str| {
        GatewayError::invalid(format!(
            "{at}: {what} parts are not allowed in {} messages",
            match role {
                Role::System => "system or developer",
                _ => "assistant",
            }
        ))
    };
    let kind = &*p.kind;
    match kind {
        "input_text" | "output_text" => {
            let text = p.text.ok_or_else(|| missing(at, "text"))?;
            Ok(PartOut::text(text.0))
        }
        "refusal" if role == Role::Assistant => {
            let text = p.refusal.ok_or_else(|| missing(at, "refusal"))?;
            Ok(PartOut::text(text.0))
        }
        "input_image" | "input_file" | "input_audio" if role != Role::User => Err(text_only(kind)),
        "input_image" => match (p.image_url, p.file_id) {
            (Some(url), _) => Ok(PartOut::ImageUrl {
                image_url: UrlOut { url: url.0 },
                cache_control: None,
            }),
            (None, Some(_)) => Err(no_files_api(at)),
            (None, None) => Err(missing(at, "image_url")),
        },
        "input_file" => {
            let file_data = match (p.file_data, p.file_url, p.file_id) {
                (Some(data), _, _) if data.starts_with("data:") => data.0,
                (Some(data), _, _) => {
                    let mime = mime_of(p.filename.as_deref());
                    Cow::Owned(format!("data:{mime};base64,{}", &*data))
                }
                (None, Some(url), _) => url.0,
                (None, None, Some(_)) => return Err(no_files_api(at)),
                (None, None, None) => return Err(missing(at, "file_data")),
            };
            Ok(PartOut::File {
                file: FileOut {
                    file_data,
                    filename: p.filename.map(|f| f.0),
                },
                cache_control: None,
            })
        }
        "input_audio" => {
            let audio = p.input_audio.ok_or_else(|| missing(at, "input_audio"))?;
            Ok(PartOut::InputAudio {
                input_audio: AudioOut {
                    data: audio.data.0,
                    format: audio.format.0,
                },
                cache_control: None,
            })
        }
        other => Err(GatewayError::invalid(format!(
            "{at}: content parts of type {other:?} are not supported here"
        ))),
    }
}

fn no_files_api(at: &str) -> GatewayError {
    GatewayError::invalid(format!(
        "{at}: file_id is not supported: this gateway has no Files API; send the data inline or a URL"
    ))
}

/// The media type of a bare base64 file, from its name's extension; PDF, the common case,
/// when it has none the table knows.
fn mime_of(filename: Option<&str>) -> &'static str {
    let ext = filename
        .and_then(|f| f.rsplit_once('.'))
        .map(|(_, e)| e.to_ascii_lowercase());
    match ext.as_deref() {
        Some("txt") => "text/plain",
        Some("md") => "text/markdown",
        Some("csv") => "text/csv",
        Some("html" | "htm") => "text/html",
        Some("json") => "application/json",
        Some("png") => "image/png",
        Some("jpg" | "jpeg") => "image/jpeg",
        Some("gif") => "image/gif",
        Some("webp") => "image/webp",
        _ => "application/pdf",
    }
}

/// A tool output: a string, or parts whose `input_text`s are joined by newlines (images and
/// files dropped: a chat tool message holds text).
fn output_text<'a>(raw: &'a RawValue, at: &str) -> Result<Cow<'a, str>, GatewayError> {
    if raw.get().starts_with('"') {
        return Ok(field::<Str>(raw, at)?.0);
    }
    let list: Vec<&'a RawValue> = serde_json::from_str(raw.get()).map_err(|_| {
        GatewayError::invalid(format!(
            "invalid value for {at}: expected a string or an array of content parts"
        ))
    })?;
    let mut texts: Vec<Cow<'a, str>> = Vec::with_capacity(list.len());
    for (k, raw) in list.into_iter().enumerate() {
        let at = format!("{at}[{k}]");
        let p: PartIn<'a> = field(raw, &at)?;
        if matches!(&*p.kind, "input_text" | "output_text") {
            texts.push(p.text.ok_or_else(|| missing(&at, "text"))?.0);
        }
    }
    Ok(match texts.len() {
        0 => Cow::Borrowed(""),
        1 => texts.swap_remove(0),
        _ => Cow::Owned(texts.join("\n")),
    })
}

// ----- tools ---------------------------------------------------------------------------------

#[derive(Deserialize)]
struct ToolIn<'a> {
    #[serde(rename = "type", borrow, default)]
    kind: Option<Str<'a>>,
    #[serde(borrow, default)]
    name: Option<Str<'a>>,
    #[serde(borrow, default)]
    description: Option<Str<'a>>,
    #[serde(borrow, default)]
    parameters: Option<&'a RawValue>,
    #[serde(default)]
    strict: Option<bool>,
    #[serde(borrow, default)]
    format: Option<&'a RawValue>,
    #[serde(borrow, default)]
    tools: Option<&'a RawValue>,
}

/// A custom tool's input `format`.
#[derive(Deserialize)]
struct FormatIn<'a> {
    #[serde(rename = "type", borrow)]
    kind: Str<'a>,
    #[serde(borrow, default)]
    syntax: Option<Str<'a>>,
    #[serde(borrow, default)]
    definition: Option<Str<'a>>,
}

/// The tools the model is offered, by chat name (the first definition of a name wins).
#[derive(Default)]
struct Offered<'a> {
    tools: Vec<ToolOut<'a>>,
    names: HashSet<String>,
}

impl<'a> Offered<'a> {
    /// A `tools` list (the request's, or an `additional_tools` item's) at `at`.
    fn tools(&mut self, raw: &'a RawValue, at: &str) -> Result<(), GatewayError> {
        let list: Vec<&'a RawValue> = serde_json::from_str(raw.get()).map_err(|_| {
            GatewayError::invalid(format!("invalid value for {at}: expected an array"))
        })?;
        for (i, raw) in list.into_iter().enumerate() {
            let at = format!("{at}[{i}]");
            let t: ToolIn<'a> = field(raw, &at)?;
            let kind = t.kind.as_deref().ok_or_else(|| missing(&at, "type"))?;
            match kind {
                "function" | "custom" => self.tool(t, None, &at)?,
                "namespace" => {
                    let namespace = t.name.ok_or_else(|| missing(&at, "name"))?;
                    let inner = t.tools.ok_or_else(|| missing(&at, "tools"))?;
                    let inner: Vec<&'a RawValue> =
                        serde_json::from_str(inner.get()).map_err(|_| {
                            GatewayError::invalid(format!(
                                "invalid value for {at}.tools: expected an array"
                            ))
                        })?;
                    for (j, raw) in inner.into_iter().enumerate() {
                        let at = format!("{at}.tools[{j}]");
                        let t: ToolIn<'a> = field(raw, &at)?;
                        match t.kind.as_deref() {
                            Some("function" | "custom") => self.tool(t, Some(&namespace), &at)?,
                            _ => {
                                return Err(GatewayError::invalid(format!(
                                    "{at}: a namespace holds function and custom tools only"
                                )))
                            }
                        }
                    }
                }
                // Hosted tools: nothing here runs them.
                _ => {}
            }
        }
        Ok(())
    }

    /// A function or custom tool, in `namespace` if any.
    fn tool(
        &mut self,
        t: ToolIn<'a>,
        namespace: Option<&str>,
        at: &str,
    ) -> Result<(), GatewayError> {
        let name = t.name.ok_or_else(|| missing(at, "name"))?;
        let name: Cow<'a, str> = match namespace {
            Some(ns) => Cow::Owned(names::flat_name(ns, &name).ok_or_else(|| {
                GatewayError::invalid(format!(
                    "{at}: the namespace {ns:?} cannot be carried on this gateway (it may not be empty, hold \"--\" or end with \"-\")"
                ))
            })?),
            None if !names::is_plain(&name) => {
                return Err(GatewayError::invalid(format!(
                    "{at}: tool names holding \"--\" are not supported on this gateway (it marks namespaced tools): {:?}",
                    &*name
                )))
            }
            None => name.0,
        };
        if !self.names.insert(name.to_string()) {
            return Ok(());
        }
        let parameters = if t.kind.as_deref() == Some("custom") {
            Some(Cow::Owned(custom_parameters(t.format, at)?))
        } else {
            match t.parameters.filter(|p| p.get() != "null") {
                None => None,
                Some(p) if p.get().starts_with('{') => Some(Cow::Borrowed(p)),
                Some(_) => {
                    return Err(GatewayError::invalid(format!(
                        "{at}.parameters: expected a JSON Schema object"
                    )))
                }
            }
        };
        self.tools.push(ToolOut {
            kind: "function",
            function: FunctionDeclOut {
                name,
                description: t.description.map(|d| d.0),
                parameters,
                strict: t.strict,
            },
        });
        Ok(())
    }
}

/// The parameters of the function a custom tool becomes: one string, `input`, described by the
/// tool's `format` (a grammar is quoted so the model can follow it).
fn custom_parameters(format: Option<&RawValue>, at: &str) -> Result<Box<RawValue>, GatewayError> {
    #[derive(Serialize)]
    struct Schema<'s> {
        #[serde(rename = "type")]
        kind: &'static str,
        properties: Properties<'s>,
        required: [&'static str; 1],
        #[serde(rename = "additionalProperties")]
        additional_properties: bool,
    }
    #[derive(Serialize)]
    struct Properties<'s> {
        input: Input<'s>,
    }
    #[derive(Serialize)]
    struct Input<'s> {
        #[serde(rename = "type")]
        kind: &'static str,
        description: Cow<'s, str>,
    }
    let format = format
        .filter(|f| f.get() != "null")
        .map(|f| field::<FormatIn>(f, &format!("{at}.format")))
        .transpose()?;
    let description = match format {
        Some(FormatIn {
            kind,
            syntax,
            definition: Some(definition),
        }) if &*kind == "grammar" => Cow::Owned(format!(
            "The tool's input, in this {} grammar:\n{}",
            syntax.as_deref().unwrap_or("lark"),
            &*definition
        )),
        _ => Cow::Borrowed("The tool's input, as free-form text."),
    };
    let schema = Schema {
        kind: "object",
        properties: Properties {
            input: Input {
                kind: "string",
                description,
            },
        },
        required: ["input"],
        additional_properties: false,
    };
    serde_json::to_string(&schema)
        .and_then(RawValue::from_string)
        .map_err(|e| GatewayError::Internal(e.to_string().into()))
}

#[derive(Deserialize)]
struct ToolChoiceIn<'a> {
    #[serde(rename = "type", borrow)]
    kind: Str<'a>,
    #[serde(borrow, default)]
    name: Option<Str<'a>>,
    #[serde(borrow, default)]
    mode: Option<Str<'a>>,
}

/// `tool_choice` onto the chat one; `None` when it names a hosted tool (the model chooses).
fn tool_choice<'a>(
    raw: &'a RawValue,
    tools: &[ToolOut<'a>],
) -> Result<Option<ToolChoiceOut<'a>>, GatewayError> {
    if raw.get().starts_with('"') {
        let mode = match &*typed::<Str>(raw, "tool_choice")? {
            "auto" => "auto",
            "none" => "none",
            "required" => "required",
            other => {
                return Err(GatewayError::invalid(format!(
                    "invalid value for tool_choice: {other:?} (expected auto, none, required or an object)"
                )))
            }
        };
        return Ok(Some(ToolChoiceOut::Mode(mode)));
    }
    let c: ToolChoiceIn = typed(raw, "tool_choice")?;
    let choice = match &*c.kind {
        "function" | "custom" => {
            let name = c.name.ok_or_else(|| missing("tool_choice", "name"))?;
            ToolChoiceOut::function(chosen(&name, tools)?)
        }
        "allowed_tools" => match c.mode.as_deref() {
            Some("auto") => ToolChoiceOut::Mode("auto"),
            Some("required") => ToolChoiceOut::Mode("required"),
            _ => {
                return Err(GatewayError::invalid(
                    "invalid value for tool_choice.mode: expected auto or required",
                ))
            }
        },
        "file_search"
        | "web_search"
        | "web_search_preview"
        | "web_search_preview_2025_03_11"
        | "computer"
        | "computer_use"
        | "computer_use_preview"
        | "image_generation"
        | "code_interpreter"
        | "mcp"
        | "shell"
        | "local_shell"
        | "apply_patch"
        | "tool_search"
        | "programmatic_tool_calling" => ToolChoiceOut::Mode("auto"),
        other => {
            return Err(GatewayError::invalid(format!(
                "invalid value for tool_choice.type: {other:?}"
            )))
        }
    };
    Ok(Some(choice))
}

/// The chat name of the tool a choice names: itself, or the one namespaced tool so named.
fn chosen<'a>(name: &str, tools: &[ToolOut<'a>]) -> Result<Cow<'a, str>, GatewayError> {
    if let Some(t) = tools.iter().find(|t| t.function.name == name) {
        return Ok(t.function.name.clone());
    }
    let mut inner = tools
        .iter()
        .filter(|t| names::split_name(&t.function.name).is_some_and(|(_, inner)| inner == name));
    match (inner.next(), inner.next()) {
        (Some(t), None) => Ok(t.function.name.clone()),
        _ => Err(GatewayError::invalid(format!(
            "tool_choice names the tool {name:?}, which tools does not hold (or holds in several namespaces)"
        ))),
    }
}

// ----- reasoning and text ----------------------------------------------------------------

#[derive(Deserialize)]
struct ReasoningIn<'a> {
    #[serde(borrow, default)]
    effort: Option<Str<'a>>,
    #[serde(borrow, default)]
    summary: Option<Str<'a>>,
    #[serde(borrow, default)]
    generate_summary: Option<Str<'a>>,
}

/// `reasoning` → `reasoning` and `reasoning_effort` (the table in the module doc).
fn reasoning_controls(
    raw: &RawValue,
) -> Result<(Option<ReasoningOut>, Option<&'static str>), GatewayError> {
    let r: ReasoningIn = typed(raw, "reasoning")?;
    let effort = match r.effort.as_deref() {
        None => None,
        Some("none") => Some("none"),
        Some("minimal") => Some("minimal"),
        Some("low") => Some("low"),
        Some("medium") => Some("medium"),
        Some("high") => Some("high"),
        Some("xhigh" | "max") => Some("xhigh"),
        Some(other) => {
            return Err(GatewayError::invalid(format!(
                "invalid value for reasoning.effort: {other:?} (expected none, minimal, low, medium, high, xhigh or max)"
            )))
        }
    };
    let summary = match r.summary.or(r.generate_summary).as_deref() {
        None | Some("none") => false,
        Some("auto" | "concise" | "detailed") => true,
        Some(other) => return Err(GatewayError::invalid(format!(
            "invalid value for reasoning.summary: {other:?} (expected auto, concise or detailed)"
        ))),
    };
    Ok(match (effort, summary) {
        (None, false) => (None, None),
        (None, true) => (Some(ReasoningOut::default()), None),
        (Some(e), true) => (None, Some(e)),
        (Some(e), false) => (
            Some(ReasoningOut {
                exclude: Some(true),
                ..ReasoningOut::default()
            }),
            Some(e),
        ),
    })
}

#[derive(Deserialize)]
struct TextIn<'a> {
    #[serde(borrow, default)]
    format: Option<&'a RawValue>,
    #[serde(borrow, default)]
    verbosity: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct TextFormatIn<'a> {
    #[serde(rename = "type", borrow)]
    kind: Str<'a>,
    #[serde(borrow, default)]
    name: Option<&'a RawValue>,
    #[serde(borrow, default)]
    schema: Option<&'a RawValue>,
    #[serde(borrow, default)]
    strict: Option<&'a RawValue>,
    #[serde(borrow, default)]
    description: Option<&'a RawValue>,
}

/// `v` unless it is absent or `null`.
fn present(v: Option<&RawValue>) -> Option<&RawValue> {
    v.filter(|v| v.get() != "null")
}

type TextControls<'a> = (Option<ResponseFormatOut<'a>>, Option<&'a RawValue>);

/// `text` → `response_format` and `verbosity`.
fn text_controls(raw: &RawValue) -> Result<TextControls<'_>, GatewayError> {
    let t: TextIn = typed(raw, "text")?;
    let verbosity = t
        .verbosity
        .filter(|v| v.get() != "null")
        .map(|v| checked::<Str>(v, "text.verbosity", "a string"))
        .transpose()?;
    let Some(format) = t.format.filter(|f| f.get() != "null") else {
        return Ok((None, verbosity));
    };
    let f: TextFormatIn = typed(format, "text.format")?;
    let format = match &*f.kind {
        "text" => None,
        "json_object" => Some(ResponseFormatOut {
            kind: "json_object",
            json_schema: None,
        }),
        "json_schema" => {
            let name = present(f.name).ok_or_else(|| missing("text.format", "name"))?;
            checked::<Str>(name, "text.format.name", "a string")?;
            let schema = present(f.schema)
                .filter(|s| s.get().starts_with('{'))
                .ok_or_else(|| {
                    GatewayError::invalid("invalid value for text.format.schema: expected a JSON Schema object")
                })?;
            Some(ResponseFormatOut {
                kind: "json_schema",
                json_schema: Some(JsonSchemaOut {
                    name,
                    description: present(f.description)
                        .map(|d| checked::<Str>(d, "text.format.description", "a string"))
                        .transpose()?,
                    schema,
                    strict: present(f.strict)
                        .map(|s| checked::<bool>(s, "text.format.strict", "a boolean"))
                        .transpose()?,
                }),
            })
        }
        other => {
            return Err(GatewayError::invalid(format!(
                "invalid value for text.format.type: {other:?} (expected text, json_schema or json_object)"
            )))
        }
    };
    Ok((format, verbosity))
}
