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
use std::fmt::Display;

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use super::continued::list_items;
use super::names;
use super::reasoning::{self, Detail};
use crate::api::list::items;
use crate::api::request::RawRequest;
use crate::api::{At, GatewayError, Str};
use crate::catalog::Family;
use crate::doors::chat_out::{
    checked, ephemeral, typed, AudioOut, ChatOut, ContentOut, FileOut, FunctionCallOut,
    FunctionDeclOut, JsonSchemaOut, MessageOut, PartOut, ReasoningOut, ResponseFormatOut, Text,
    ToolCallOut, ToolChoiceOut, ToolOut, UrlOut,
};
use crate::doors::one_pass::StringOrList;
use crate::providers::common::compact;

/// A Responses request read onto the request model.
#[derive(Debug)]
pub struct Parsed {
    /// The chat body the route's adapter plans from.
    pub chat: Vec<u8>,
    /// The conversation before the answer as Responses input items (a JSON array): the prior
    /// items, then this request's `input`. Empty when the answer will not be stored and
    /// continues no kept one.
    pub items: Vec<u8>,
    /// The client lets the gateway keep the answer (`store`, default true).
    pub store: bool,
}

/// Reads a Responses `body` onto the chat body. `prior` is the stored conversation a
/// `previous_response_id` continues (a JSON array of items: its input, then its output);
/// `family` is the route family's, which decides where cache breakpoints go.
pub fn parse(body: &[u8], prior: Option<&[u8]>, family: Family) -> Result<Parsed, GatewayError> {
    parse_from(&RawRequest::parse_head(body)?, prior, family)
}

/// [`parse`] of a body whose fields are already read (admission reads them first).
pub fn parse_from(
    req: &RawRequest<'_>,
    prior: Option<&[u8]>,
    family: Family,
) -> Result<Parsed, GatewayError> {
    translate(req, prior, family)
}

fn translate<'a>(
    req: &RawRequest<'a>,
    prior: Option<&'a [u8]>,
    family: Family,
) -> Result<Parsed, GatewayError> {
    let get = |name: &str| req.get(name).filter(|v| v.get() != "null");

    if get("background")
        .map(|v| typed::<bool>(v, "background"))
        .transpose()?
        == Some(true)
    {
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

    // `parse_head` checked it: a non-empty string (the first of `models` when absent).
    let model =
        get("model").ok_or_else(|| GatewayError::invalid("missing required field: model"))?;
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
            conv.messages.push(MessageOut::plain(
                "system",
                Some(ContentOut::Text(text.0.into())),
            ));
        }
    }

    // The conversation is kept for a stored answer, and passed whole to an upstream that
    // speaks the Responses API when it continues a kept one.
    let collect = store || prior.is_some();
    let mut items = Vec::new();
    if collect {
        items.push(b'[');
    }
    if let Some(prior) = prior {
        let not_array = |e: String| {
            GatewayError::Internal(format!("the stored conversation is not an array: {e}").into())
        };
        let prior = std::str::from_utf8(prior).map_err(|e| not_array(e.to_string()))?;
        conv.items(prior, &"previous response's items", |e| {
            not_array(e.to_string())
        })?;
        keep(&mut items, collect, list_items(prior).unwrap_or_default());
    }
    match get("input") {
        Some(raw) if raw.get().starts_with('"') => {
            conv.flush();
            conv.messages.push(MessageOut::plain(
                "user",
                Some(ContentOut::Text(Text::Json(raw))),
            ));
            // Kept as the item it stands for: a user message of one `input_text` part.
            if collect {
                const HEAD: &str =
                    r#"{"type":"message","role":"user","content":[{"type":"input_text","text":"#;
                keep(&mut items, collect, HEAD);
                items.extend_from_slice(raw.get().as_bytes());
                items.extend_from_slice(b"}]}");
            }
        }
        Some(raw) => {
            conv.items(raw.get(), &"input", |_| {
                GatewayError::invalid(
                    "invalid value for input: expected a string or an array of items",
                )
            })?;
            keep(
                &mut items,
                collect,
                list_items(raw.get()).unwrap_or_default(),
            );
        }
        None if prior.is_some() => {}
        None => return Err(GatewayError::invalid("missing required field: input")),
    }
    conv.flush();
    if collect {
        items.push(b']');
    }
    if conv.messages.is_empty() {
        return Err(GatewayError::invalid(
            "input must hold at least one message or item",
        ));
    }

    let mut offered = Offered::default();
    if let Some(raw) = get("tools") {
        offered.tools(raw, &"tools")?;
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
        items,
        store,
    })
}

/// Appends items' JSON (one, or a list's without its brackets) to the collected conversation.
fn keep(items: &mut Vec<u8>, collect: bool, raw: &str) {
    if !collect || raw.is_empty() {
        return;
    }
    if items.len() > 1 {
        items.push(b',');
    }
    items.extend_from_slice(raw.as_bytes());
}

// ----- items ---------------------------------------------------------------------------------

/// Every field any item type this door reads has; which ones matter depends on `type`. The
/// fields whose type varies between item types (`arguments`, `input`) stay raw; `content` (`C`)
/// and `output` (`O`) are strings or lists of parts, read with the item ([`Parts`]) in the one
/// pass over a list ([`Conversation::items`]), or left raw ([`RawItem`]) when a part of the
/// list must be named in an error.
#[derive(Deserialize)]
#[serde(bound(deserialize = "C: Deserialize<'de>, O: Deserialize<'de>"))]
struct ItemIn<'a, C, O> {
    #[serde(rename = "type", borrow, default)]
    kind: Option<Str<'a>>,
    #[serde(borrow, default)]
    role: Option<Str<'a>>,
    #[serde(default)]
    content: Option<C>,
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
    #[serde(default)]
    output: Option<O>,
    #[serde(borrow, default)]
    action: Option<&'a RawValue>,
    #[serde(borrow, default)]
    encrypted_content: Option<Str<'a>>,
    #[serde(borrow, default)]
    tools: Option<&'a RawValue>,
}

/// An item read on its own, `content` and `output` raw.
type RawItem<'a> = ItemIn<'a, &'a RawValue, &'a RawValue>;

/// An item read in the one pass over its list.
type ReadItem<'a> = ItemIn<'a, Parts<'a, Text<'a>>, Parts<'a, Cow<'a, str>>>;

/// A string or a list of parts: a message's `content` (`S`: [`Text`], the string as written) or
/// a tool output's `output` (`S`: its value).
type Parts<'a, S> = StringOrList<S, PartIn<'a>>;

/// An item's `content` or `output` as the converter takes it: read in the one pass, or read now
/// from its raw slice (`at` names it in errors).
trait PartsIn<'a, S> {
    fn read(self, at: &dyn Display) -> Result<Parts<'a, S>, GatewayError>;
}

impl<'a, S> PartsIn<'a, S> for Parts<'a, S> {
    fn read(self, _: &dyn Display) -> Result<Parts<'a, S>, GatewayError> {
        Ok(self)
    }
}

impl<'a> PartsIn<'a, Text<'a>> for &'a RawValue {
    fn read(self, at: &dyn Display) -> Result<Parts<'a, Text<'a>>, GatewayError> {
        if self.get().starts_with('"') {
            return Ok(StringOrList::Text(Text::Json(self)));
        }
        raw_parts(self, at).map(StringOrList::List)
    }
}

impl<'a> PartsIn<'a, Cow<'a, str>> for &'a RawValue {
    fn read(self, at: &dyn Display) -> Result<Parts<'a, Cow<'a, str>>, GatewayError> {
        if self.get().starts_with('"') {
            return Ok(StringOrList::Text(field::<Str>(self, at)?.0));
        }
        raw_parts(self, at).map(StringOrList::List)
    }
}

/// A list of parts read part by part, each named in its error.
fn raw_parts<'a>(raw: &'a RawValue, at: &dyn Display) -> Result<Vec<PartIn<'a>>, GatewayError> {
    let list: Vec<&'a RawValue> = serde_json::from_str(raw.get()).map_err(|_| {
        GatewayError::invalid(format!(
            "invalid value for {at}: expected a string or an array of content parts"
        ))
    })?;
    list.into_iter()
        .enumerate()
        .map(|(j, raw)| field(raw, &At::Index(at, j)))
        .collect()
}

/// A content part; which fields matter depends on `type`.
#[derive(Deserialize)]
struct PartIn<'a> {
    #[serde(rename = "type", borrow)]
    kind: Str<'a>,
    /// Copied as written.
    #[serde(borrow, default)]
    text: Option<Text<'a>>,
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
fn field<'a, T: Deserialize<'a>>(raw: &'a RawValue, at: &dyn Display) -> Result<T, GatewayError> {
    serde_json::from_str(raw.get()).map_err(|e| GatewayError::invalid(format!("{at}: {e}")))
}

fn missing(at: &dyn Display, field: &str) -> GatewayError {
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

    /// Translates the items of `list` (a JSON array named `name` in errors; `not_array`: the
    /// error when it is not one). Read in one pass when every item reads; otherwise item by
    /// item, so that the error names the item and part at fault, as the translation would.
    fn items(
        &mut self,
        list: &'a str,
        name: &dyn Display,
        not_array: impl FnOnce(serde_json::Error) -> GatewayError,
    ) -> Result<(), GatewayError> {
        match serde_json::from_str::<Vec<ReadItem<'a>>>(list) {
            Ok(items) => self.read_items(items, name),
            Err(_) => self.raw_items(list, name, not_array),
        }
    }

    /// [`items`](Self::items) read in one pass.
    fn read_items(
        &mut self,
        items: Vec<ReadItem<'a>>,
        name: &dyn Display,
    ) -> Result<(), GatewayError> {
        for (i, item) in items.into_iter().enumerate() {
            self.item(&At::Index(name, i), item)?;
        }
        Ok(())
    }

    /// [`items`](Self::items) read item by item.
    fn raw_items(
        &mut self,
        list: &'a str,
        name: &dyn Display,
        not_array: impl FnOnce(serde_json::Error) -> GatewayError,
    ) -> Result<(), GatewayError> {
        let raws: Vec<&'a RawValue> = serde_json::from_str(list).map_err(not_array)?;
        for (i, raw) in raws.into_iter().enumerate() {
            let at = At::Index(name, i);
            self.item(&at, field::<RawItem<'a>>(raw, &at)?)?;
        }
        Ok(())
    }

    /// Translates one item (at `at`, for messages).
    fn item<C, O>(
        &mut self,
        at: &dyn Display,
        mut item: ItemIn<'a, C, O>,
    ) -> Result<(), GatewayError>
    where
        C: PartsIn<'a, Text<'a>>,
        O: PartsIn<'a, Cow<'a, str>>,
    {
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
            "message" => self.message(at, item.role, item.content),
            "function_call" => {
                let call_id = item.call_id.ok_or_else(|| missing(at, "call_id"))?;
                let name = item.name.ok_or_else(|| missing(at, "name"))?;
                let arguments = match item.arguments.filter(|a| a.get() != "null") {
                    Some(raw) => field::<Str>(raw, &At::Field(at, "arguments"))?.0,
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
                let input = field::<Str>(input, &At::Field(at, "input"))?;
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
                let output = item.output.ok_or_else(|| missing(at, "output"))?;
                let output_at = At::Field(at, "output");
                let text = output_text(output.read(&output_at)?, &output_at)?;
                self.flush();
                self.messages.push(MessageOut {
                    tool_call_id: Some(call_id.0),
                    ..MessageOut::plain("tool", Some(ContentOut::Text(text.into())))
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
                self.extra_tools.push((At::Field(at, "tools").to_string(), tools));
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

    fn message(
        &mut self,
        at: &dyn Display,
        role: Option<Str<'a>>,
        content: Option<impl PartsIn<'a, Text<'a>>>,
    ) -> Result<(), GatewayError> {
        let role = role.ok_or_else(|| missing(at, "role"))?;
        let content = content.ok_or_else(|| missing(at, "content"))?;
        let role = match &*role {
            "user" => "user",
            "system" | "developer" => "system",
            "assistant" => "assistant",
            other => {
                return Err(GatewayError::invalid(format!(
                    "{at}.role: expected user, assistant, system or developer, not {other:?}"
                )))
            }
        };
        let at = At::Field(at, "content");
        let content = content.read(&at)?;
        if role == "assistant" {
            let parts = self.parts(content, &at, Role::Assistant)?;
            self.assistant().parts.extend(parts);
            return Ok(());
        }
        let content = match content {
            StringOrList::Text(text) => ContentOut::Text(text),
            list => {
                let kind = if role == "user" {
                    Role::User
                } else {
                    Role::System
                };
                ContentOut::Parts(self.parts(list, &at, kind)?)
            }
        };
        self.flush();
        self.messages.push(MessageOut::plain(role, Some(content)));
        Ok(())
    }

    /// A message's `content` (a string, or parts) as chat parts for `role`.
    fn parts(
        &self,
        content: Parts<'a, Text<'a>>,
        at: &dyn Display,
        role: Role,
    ) -> Result<Vec<PartOut<'a>>, GatewayError> {
        let list = match content {
            StringOrList::Text(text) if text.is_empty() => return Ok(Vec::new()),
            StringOrList::Text(text) => {
                return Ok(vec![PartOut::Text {
                    text,
                    cache_control: None,
                }])
            }
            StringOrList::List(list) => list,
        };
        let mut out = Vec::with_capacity(list.len());
        for (j, p) in list.into_iter().enumerate() {
            let at = At::Index(at, j);
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
    at: &dyn Display,
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
fn part<'a>(p: PartIn<'a>, at: &dyn Display, role: Role) -> Result<PartOut<'a>, GatewayError> {
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
            Ok(PartOut::Text {
                text,
                cache_control: None,
            })
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

fn no_files_api(at: &dyn Display) -> GatewayError {
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
fn output_text<'a>(
    output: Parts<'a, Cow<'a, str>>,
    at: &dyn Display,
) -> Result<Cow<'a, str>, GatewayError> {
    let list = match output {
        StringOrList::Text(text) => return Ok(text),
        StringOrList::List(list) => list,
    };
    let mut texts: Vec<Cow<'a, str>> = Vec::with_capacity(list.len());
    for (k, p) in list.into_iter().enumerate() {
        let at = At::Index(at, k);
        if matches!(&*p.kind, "input_text" | "output_text") {
            let text = p.text.ok_or_else(|| missing(&at, "text"))?;
            texts.push(text.into_cow(&At::Field(&at, "text"))?);
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
    fn tools(&mut self, raw: &'a RawValue, at: &dyn Display) -> Result<(), GatewayError> {
        let list = items::<ToolIn<'a>>(raw).map_err(|_| {
            GatewayError::invalid(format!("invalid value for {at}: expected an array"))
        })?;
        for (i, t) in list {
            let at = At::Index(at, i);
            let t = t.map_err(|e| GatewayError::invalid(format!("{at}: {e}")))?;
            let kind = t.kind.as_deref().ok_or_else(|| missing(&at, "type"))?;
            match kind {
                "function" | "custom" => self.tool(t, None, &at)?,
                "namespace" => {
                    let namespace = t.name.ok_or_else(|| missing(&at, "name"))?;
                    let inner = t.tools.ok_or_else(|| missing(&at, "tools"))?;
                    let inner = items::<ToolIn<'a>>(inner).map_err(|_| {
                        GatewayError::invalid(format!(
                            "invalid value for {at}.tools: expected an array"
                        ))
                    })?;
                    for (j, t) in inner {
                        let tools = At::Field(&at, "tools");
                        let at = tools.index(j);
                        let t = t.map_err(|e| GatewayError::invalid(format!("{at}: {e}")))?;
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
        at: &dyn Display,
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
fn custom_parameters(
    format: Option<&RawValue>,
    at: &dyn Display,
) -> Result<Box<RawValue>, GatewayError> {
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
        .map(|f| field::<FormatIn>(f, &At::Field(at, "format")))
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
            let name = c.name.ok_or_else(|| missing(&"tool_choice", "name"))?;
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
        Some(other) => {
            return Err(GatewayError::invalid(format!(
            "invalid value for reasoning.summary: {other:?} (expected auto, concise or detailed)"
        )))
        }
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
            let name = present(f.name).ok_or_else(|| missing(&"text.format", "name"))?;
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

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use serde_json::{json, Value};

    use super::*;
    use crate::api::request::object_fields;
    use crate::api::{Door, Operation};
    use crate::catalog::{Model, ModelKind, Pricing, Profile, Route, RouteKind, Thinking};
    use crate::doors::bridged;
    use crate::doors::messages::test_support::{
        creds, fixture, gemini_model, gemini_route, target,
    };
    use crate::providers::test_support::single;
    use crate::providers::{Credentials, Secret};

    fn parsed(req: &Value, family: Family) -> Parsed {
        parse(&serde_json::to_vec(req).unwrap(), None, family).unwrap()
    }

    fn chat(req: Value) -> Value {
        serde_json::from_slice(&parsed(&req, Family::Gemini).chat).unwrap()
    }

    fn err(req: Value) -> String {
        parse(&serde_json::to_vec(&req).unwrap(), None, Family::Gemini)
            .unwrap_err()
            .to_string()
    }

    fn with(extra: Value) -> Value {
        let mut req = json!({"model": "google/gemini-test", "input": "hi"});
        for (k, v) in extra.as_object().unwrap() {
            req[k] = v.clone();
        }
        req
    }

    /// The chat messages of `input`.
    fn messages(input: Value) -> Value {
        chat(with(json!({ "input": input })))["messages"].clone()
    }

    #[test]
    fn text_is_copied_as_written_escapes_and_all() {
        let body = br#"{"model":"m","input":[{"role":"user","content":[{"type":"input_text","text":"a \"q\"\n\/b \u00e9"}]},{"role":"user","content":"caf\u00e9"}],"store":false}"#;
        let out = String::from_utf8(parse(body, None, Family::Gemini).unwrap().chat).unwrap();
        assert!(
            out.contains(r#"{"type":"text","text":"a \"q\"\n\/b \u00e9"}"#),
            "{out}"
        );
        assert!(out.contains(r#""content":"caf\u00e9""#), "{out}");
        let v: Value = serde_json::from_str(&out).unwrap();
        assert_eq!(v["messages"][0]["content"][0]["text"], "a \"q\"\n/b \u{e9}");

        for text in [json!(7), json!(["a"])] {
            let e = err(with(
                json!({"input": [{"role": "user", "content": [{"type": "input_text", "text": text}]}]}),
            ));
            assert!(e.contains("input[0].content[0]"), "{e}");
        }
    }

    /// The Gemini body a chat body becomes through the door's adapter.
    fn gemini_plan(chat: &[u8]) -> Value {
        let raw = RawRequest::parse(chat, Operation::Chat).unwrap();
        let (m, r) = (gemini_model(), gemini_route());
        let up = single(
            bridged(Door::Responses, Family::Gemini)
                .plan(&raw, &target(&m, &r, raw.stream), &creds())
                .unwrap(),
        );
        serde_json::from_slice(&up.body).unwrap()
    }

    /// Like conf/catalog.yaml's `claude` profile on the Anthropic API.
    fn claude() -> (Model, Route, Credentials) {
        let forward = [
            "temperature",
            "top_p",
            "top_k",
            "max_tokens",
            "stop",
            "reasoning",
        ];
        let model = Model {
            aliases: Vec::new(),
            id: Arc::from("anthropic/claude-test"),
            provider: "anthropic".into(),
            family: Family::Anthropic,
            kind: ModelKind::Chat,
            upstream_model: "claude-test".into(),
            profile_name: "claude".into(),
            profile: Arc::new(Profile {
                forward: forward.iter().map(|s| (*s).to_owned()).collect(),
                thinking: Thinking::Budget {
                    min: 1024,
                    max: 63999,
                    can_disable: true,
                },
                min_cache_tokens: 1024,
                dimensions: None,
            }),
            pricing: Pricing::default(),
            capabilities: Vec::new(),
            max_output_tokens: Some(64000),
            context_window: None,
            routes: Vec::new(),
        };
        let route = Route {
            kind: RouteKind::Anthropic,
            ..gemini_route()
        };
        let creds = Credentials {
            anthropic: Some(Secret::new("ak-test")),
            anthropic_version: "2023-06-01".into(),
            ..Credentials::default()
        };
        (model, route, creds)
    }

    fn anthropic_plan(chat: &[u8]) -> Value {
        let raw = RawRequest::parse(chat, Operation::Chat).unwrap();
        let (m, r, c) = claude();
        let up = single(
            bridged(Door::Responses, Family::Anthropic)
                .plan(&raw, &target(&m, &r, raw.stream), &c)
                .unwrap(),
        );
        serde_json::from_slice(&up.body).unwrap()
    }

    const CALL_0: &str = "call_resp7_0.CiIB-_9a8w";

    #[test]
    fn a_codex_request_is_a_chat_body_field_by_field() {
        let body = fixture("responses/codex-request.json");
        let p = parse(&body, None, Family::Gemini).unwrap();
        assert!(!p.store, "store: false");
        assert!(p.items.is_empty(), "nothing kept when not stored");
        let out: Value = serde_json::from_slice(&p.chat).unwrap();
        let fields = object_fields(&p.chat).unwrap();
        let keys: Vec<&str> = fields.iter().map(|(k, _)| &**k).collect();
        assert_eq!(
            keys,
            [
                "model",
                "messages",
                "tools",
                "tool_choice",
                "parallel_tool_calls",
                "reasoning",
                "prompt_cache_key",
                "stream",
                "stream_options"
            ],
            "include, store and the hosted tool leave no trace: {out}"
        );
        assert_eq!(out["model"], "google/gemini-test");
        assert_eq!(out["stream"], true);
        assert_eq!(out["stream_options"], json!({"include_usage": true}));
        assert_eq!(out["tool_choice"], "auto");
        assert_eq!(out["parallel_tool_calls"], true);
        assert_eq!(
            out["reasoning"],
            json!({}),
            "a summary without an effort: the model's default thinking, its text returned"
        );
        assert_eq!(
            out["prompt_cache_key"],
            "0199a7c2-5f0e-7d31-b1de-3f4ad1e0c001"
        );

        let m = out["messages"].as_array().unwrap();
        assert_eq!(m.len(), 8, "{out}");
        assert_eq!(
            m[0]["role"], "system",
            "Codex's base prompt, a developer message"
        );
        assert_eq!(
            m[0]["content"][0]["text"].as_str().unwrap().lines().next(),
            Some("You are Codex, a coding agent. You and the user share the same workspace.")
        );
        assert_eq!(m[1]["role"], "user");
        assert_eq!(m[1]["content"].as_array().unwrap().len(), 2);
        assert_eq!(
            m[2],
            json!({"role": "user", "content": [{"type": "text", "text": "List the Rust files and read the README."}]})
        );
        assert_eq!(
            m[3],
            json!({"role": "assistant", "content": null,
            "tool_calls": [
                {"id": CALL_0, "type": "function",
                    "function": {"name": "exec_command", "arguments": "{\"cmd\":\"ls src\",\"yield_time_ms\":1000}"}},
                {"id": "call_resp7_1", "type": "function",
                    "function": {"name": "mcp__fs__--read_file", "arguments": "{\"path\": \"README.md\"}"}}
            ],
            "reasoning_details": [
                {"type": "reasoning.text", "text": "The user wants the Rust files; list src first.", "signature": "EqQBCkYIBxgCKkAsig"}
            ]}),
            "one assistant turn: both calls, verbatim, and the signed thinking"
        );
        assert_eq!(m[4]["role"], "tool");
        assert_eq!(m[4]["tool_call_id"], CALL_0);
        assert!(m[4]["content"]
            .as_str()
            .unwrap()
            .ends_with("lib.rs\nmain.rs\n"));
        assert_eq!(
            m[5],
            json!({"role": "tool", "tool_call_id": "call_resp7_1", "content": "# Demo\nA small demo crate."}),
            "the image of the output dropped, its texts joined"
        );
        assert_eq!(
            m[6],
            json!({"role": "assistant", "content": "There are two Rust files, lib.rs and main.rs; the README describes a small demo crate."})
        );
        assert_eq!(
            m[7],
            json!({"role": "user", "content": [{"type": "text", "text": "Now run the tests."}]}),
            "no cache breakpoint on a Gemini route"
        );

        let tools = out["tools"].as_array().unwrap();
        let names: Vec<&str> = tools
            .iter()
            .map(|t| t["function"]["name"].as_str().unwrap())
            .collect();
        assert_eq!(
            names,
            ["exec_command", "apply_patch", "mcp__fs__--read_file"]
        );
        assert_eq!(tools[0]["type"], "function");
        assert_eq!(tools[0]["function"]["strict"], false);
        assert_eq!(
            tools[2]["function"],
            json!({"name": "mcp__fs__--read_file", "description": "Read a file of the workspace.",
                "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
                "strict": false})
        );
        assert_eq!(
            names::split_name(names[2]),
            Some(("mcp__fs__", "read_file"))
        );
        assert!(
            RawRequest::parse(&p.chat, Operation::Chat).is_ok(),
            "the chat door's parser takes it"
        );
    }

    #[test]
    fn the_codex_request_reaches_gemini_with_its_signature_and_tools() {
        let body = fixture("responses/codex-request.json");
        let p = parse(&body, None, Family::Gemini).unwrap();
        let g = gemini_plan(&p.chat);
        assert_eq!(
            g["systemInstruction"]["parts"][0]["text"]
                .as_str()
                .unwrap()
                .lines()
                .next(),
            Some("You are Codex, a coding agent. You and the user share the same workspace.")
        );
        let contents = g["contents"].as_array().unwrap();
        let roles: Vec<&str> = contents
            .iter()
            .map(|c| c["role"].as_str().unwrap())
            .collect();
        assert_eq!(roles, ["user", "model", "user", "model", "user"]);
        assert_eq!(
            contents[1]["parts"],
            json!([
                {"functionCall": {"name": "exec_command", "args": {"cmd": "ls src", "yield_time_ms": 1000}},
                    "thoughtSignature": "CiIB+/9a8w=="},
                {"functionCall": {"name": "mcp__fs__--read_file", "args": {"path": "README.md"}}}
            ]),
            "the signature comes back from the call id"
        );
        let results = contents[2]["parts"].as_array().unwrap();
        assert_eq!(results[0]["functionResponse"]["name"], "exec_command");
        assert_eq!(
            results[1]["functionResponse"],
            json!({"name": "mcp__fs__--read_file", "response": {"result": "# Demo\nA small demo crate."}})
        );
        let decls = g["tools"][0]["functionDeclarations"].as_array().unwrap();
        let names: Vec<&str> = decls.iter().map(|d| d["name"].as_str().unwrap()).collect();
        assert_eq!(
            names,
            ["exec_command", "apply_patch", "mcp__fs__--read_file"]
        );
        assert_eq!(g["toolConfig"]["functionCallingConfig"]["mode"], "AUTO");
        assert_eq!(
            g["generationConfig"]["thinkingConfig"],
            json!({"includeThoughts": true}),
            "summary: auto asks for the thoughts"
        );
        assert!(g.get("cachedContent").is_none());
    }

    #[test]
    fn a_tool_free_turn_reaches_claude_with_its_cache_breakpoints() {
        let req = json!({
            "model": "anthropic/claude-test",
            "instructions": "Be brief.",
            "input": [
                {"role": "user", "content": "What is 2+2?"},
                {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "4", "annotations": []}]},
                {"role": "user", "content": [{"type": "input_text", "text": "And 3+3?"}]}
            ],
            "max_output_tokens": 2000,
            "temperature": 0.5,
            "prompt_cache_key": "thread-1",
            "reasoning": null
        });
        let p = parsed(&req, Family::Anthropic);
        let out: Value = serde_json::from_slice(&p.chat).unwrap();
        assert_eq!(
            out["messages"],
            json!([
                {"role": "system", "content": "Be brief.", "cache_control": {"type": "ephemeral"}},
                {"role": "user", "content": "What is 2+2?"},
                {"role": "assistant", "content": "4"},
                {"role": "user", "content": [{"type": "text", "text": "And 3+3?", "cache_control": {"type": "ephemeral"}}]}
            ])
        );
        assert_eq!(out["max_completion_tokens"], 2000);
        let a = anthropic_plan(&p.chat);
        assert_eq!(a["model"], "claude-test");
        assert_eq!(a["max_tokens"], 2000);
        assert_eq!(a["temperature"], 0.5);
        assert!(
            a.get("thinking").is_none(),
            "reasoning: null asks for nothing"
        );
        assert_eq!(
            a["system"],
            json!([{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}])
        );
        assert_eq!(
            a["messages"],
            json!([
                {"role": "user", "content": [{"type": "text", "text": "What is 2+2?"}]},
                {"role": "assistant", "content": [{"type": "text", "text": "4"}]},
                {"role": "user", "content": [{"type": "text", "text": "And 3+3?", "cache_control": {"type": "ephemeral"}}]}
            ])
        );
    }

    #[test]
    fn a_plain_request_is_a_plain_chat_body_with_its_numbers_byte_for_byte() {
        let body = br#"{"model":"google/gemini-test","input":"Hello","max_output_tokens":1024,"temperature":0.70,"top_p":1e-1,"user":"u-1","service_tier":"flex","prompt_cache_key":"k","metadata":{"a":"b"},"include":["message.output_text.logprobs"],"truncation":"auto","top_logprobs":2,"max_tool_calls":3,"prompt_cache_retention":"24h","stream_options":{"include_obfuscation":false},"client_metadata":{},"background":false,"previous_response_id":"resp_1","context_management":[],"some_future_field":1}"#;
        let p = parse(body, None, Family::Gemini).unwrap();
        assert_eq!(
            std::str::from_utf8(&p.chat).unwrap(),
            r#"{"model":"google/gemini-test","messages":[{"role":"user","content":"Hello"}],"max_completion_tokens":1024,"temperature":0.70,"top_p":1e-1,"prompt_cache_key":"k","user":"u-1","service_tier":"flex"}"#
        );
        let raw = RawRequest::parse(&p.chat, Operation::Chat).unwrap();
        assert!(!raw.stream);
        let out = chat(with(json!({"user": "u-1", "safety_identifier": "s-1"})));
        assert_eq!(out["user"], "s-1", "safety_identifier replaces user");
        let out = chat(with(json!({"stream": true})));
        assert_eq!(out["stream_options"], json!({"include_usage": true}));
        assert!(
            RawRequest::parse(
                &parsed(&with(json!({"stream": true})), Family::Gemini).chat,
                Operation::Chat
            )
            .unwrap()
            .stream
        );
    }

    #[test]
    fn string_input_and_instructions() {
        let p = parsed(
            &with(json!({"instructions": "Be brief.", "input": "a \"quoted\" word"})),
            Family::Gemini,
        );
        let out: Value = serde_json::from_slice(&p.chat).unwrap();
        assert_eq!(
            out["messages"],
            json!([
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": "a \"quoted\" word"}
            ])
        );
        assert!(p.store);
        assert_eq!(
            std::str::from_utf8(&p.items).unwrap(),
            r#"[{"type":"message","role":"user","content":[{"type":"input_text","text":"a \"quoted\" word"}]}]"#,
            "instructions are not items"
        );
        let out = chat(with(json!({"instructions": ""})));
        assert_eq!(out["messages"], json!([{"role": "user", "content": "hi"}]));
    }

    #[test]
    fn the_prior_conversation_comes_first_and_items_are_kept_verbatim() {
        let prior = br#"[{"type":"message","role":"user","content":"first" },
            {"type":"reasoning","id":"rs_1","summary":[],"encrypted_content":"gAAAAB-openai"},
            {"type": "function_call", "id":"fc_1", "call_id":"c1", "name":"f", "arguments":"{}", "status":"completed"}]"#;
        let body = br#"{"model":"m","input":[ {"type":"function_call_output","call_id":"c1","output":"ok"} ,{"role":"user","content":"next"}],"instructions":"Now"}"#;
        let p = parse(body, Some(prior), Family::Gemini).unwrap();
        let out: Value = serde_json::from_slice(&p.chat).unwrap();
        assert_eq!(
            out["messages"],
            json!([
                {"role": "system", "content": "Now"},
                {"role": "user", "content": "first"},
                {"role": "assistant", "content": null, "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
                ]},
                {"role": "tool", "tool_call_id": "c1", "content": "ok"},
                {"role": "user", "content": "next"}
            ]),
            "OpenAI's own reasoning blob is dropped"
        );
        // Each list copied whole, inside its brackets: the items and the space between them as
        // they were written.
        assert_eq!(
            std::str::from_utf8(&p.items).unwrap(),
            r#"[{"type":"message","role":"user","content":"first" },
            {"type":"reasoning","id":"rs_1","summary":[],"encrypted_content":"gAAAAB-openai"},
            {"type": "function_call", "id":"fc_1", "call_id":"c1", "name":"f", "arguments":"{}", "status":"completed"},{"type":"function_call_output","call_id":"c1","output":"ok"} ,{"role":"user","content":"next"}]"#
        );
        let items: Value = serde_json::from_slice(&p.items).unwrap();
        assert_eq!(items.as_array().unwrap().len(), 5);

        let p = parse(br#"{"model":"m"}"#, Some(prior), Family::Gemini).unwrap();
        let out: Value = serde_json::from_slice(&p.chat).unwrap();
        assert_eq!(
            out["messages"].as_array().unwrap().len(),
            2,
            "no input: the prior alone"
        );
        assert_eq!(
            std::str::from_utf8(&p.items)
                .unwrap()
                .matches("\"type\"")
                .count(),
            3
        );
        let p = parse(
            br#"{"model":"m","input":"x","store":false}"#,
            Some(prior),
            Family::Gemini,
        )
        .unwrap();
        assert!(!p.store);
        let items: Value = serde_json::from_slice(&p.items).unwrap();
        assert_eq!(
            items.as_array().unwrap().len(),
            4,
            "continuing a kept answer, the conversation is collected even when not stored"
        );
        let p = parse(
            br#"{"model":"m","input":"x","store":false}"#,
            None,
            Family::Gemini,
        )
        .unwrap();
        assert!(!p.store && p.items.is_empty());
        let e = parse(br#"{"model":"m","input":"x"}"#, Some(b"{}"), Family::Gemini).unwrap_err();
        assert!(e.to_string().contains("stored conversation"), "{e}");
    }

    /// A tool loop ending in `turns` answered calls, with the breakpoint-worthy shape of an
    /// agent loop: instructions, a user turn, then calls and outputs.
    fn tool_loop(turns: usize) -> Value {
        let mut input = vec![json!({"role": "user", "content": "Fix the build."})];
        for k in 0..turns {
            let id = format!("call_r{k}_0.CiIB-_9a8w");
            input.push(json!({"type": "reasoning", "summary": [], "encrypted_content": null}));
            input.push(json!({"type": "function_call", "call_id": id, "name": "step", "arguments": format!("{{\"k\":{k}}}")}));
            input.push(json!({"type": "function_call_output", "call_id": id, "output": format!("step {k} done")}));
        }
        json!({
            "model": "google/gemini-test",
            "instructions": "You are an agent.",
            "input": input,
            "tools": [{"type": "function", "name": "step", "parameters": {"type": "object", "properties": {"k": {"type": "integer"}}}}],
            "prompt_cache_key": "loop"
        })
    }

    #[test]
    fn a_five_turn_tool_loop_keeps_every_call_paired() {
        let out = chat(tool_loop(5));
        let m = out["messages"].as_array().unwrap();
        assert_eq!(m.len(), 2 + 2 * 5);
        for k in 0..5 {
            let (call, result) = (&m[2 + 2 * k], &m[3 + 2 * k]);
            let id = format!("call_r{k}_0.CiIB-_9a8w");
            assert_eq!(call["role"], "assistant");
            assert_eq!(call["tool_calls"].as_array().unwrap().len(), 1);
            assert_eq!(call["tool_calls"][0]["id"], id);
            assert_eq!(
                call["tool_calls"][0]["function"]["arguments"],
                format!("{{\"k\":{k}}}")
            );
            assert_eq!(
                result,
                &json!({"role": "tool", "tool_call_id": id, "content": format!("step {k} done")})
            );
        }
        let body = serde_json::to_vec(&out).unwrap();
        let g = gemini_plan(&body);
        let contents = g["contents"].as_array().unwrap();
        assert_eq!(contents.len(), 1 + 2 * 5);
        for k in 0..5 {
            let (call, result) = (&contents[1 + 2 * k], &contents[2 + 2 * k]);
            assert_eq!(call["role"], "model");
            assert_eq!(
                call["parts"][0]["functionCall"],
                json!({"name": "step", "args": {"k": k}})
            );
            assert_eq!(call["parts"][0]["thoughtSignature"], "CiIB+/9a8w==");
            assert_eq!(result["role"], "user");
            assert_eq!(
                result["parts"][0]["functionResponse"],
                json!({"name": "step", "response": {"result": format!("step {k} done")}})
            );
        }
    }

    #[test]
    fn cache_breakpoints_only_on_claude_routes_with_a_prompt_cache_key() {
        let bytes = serde_json::to_vec(&tool_loop(2)).unwrap();
        let p = parse(&bytes, None, Family::Anthropic).unwrap();
        let out: Value = serde_json::from_slice(&p.chat).unwrap();
        let m = out["messages"].as_array().unwrap();
        assert_eq!(m[0]["cache_control"], json!({"type": "ephemeral"}));
        let last = m.last().unwrap();
        assert_eq!(last["role"], "tool");
        assert_eq!(
            last["cache_control"],
            json!({"type": "ephemeral"}),
            "on the tool message"
        );
        assert_eq!(
            std::str::from_utf8(&p.chat)
                .unwrap()
                .matches("cache_control")
                .count(),
            2,
            "two breakpoints"
        );
        for family in [Family::Gemini, Family::OpenAiCompat] {
            let p = parse(&bytes, None, family).unwrap();
            assert!(!std::str::from_utf8(&p.chat)
                .unwrap()
                .contains("cache_control"));
        }
        let mut no_key = tool_loop(2);
        no_key.as_object_mut().unwrap().remove("prompt_cache_key");
        let p = parsed(&no_key, Family::Anthropic);
        assert!(!std::str::from_utf8(&p.chat)
            .unwrap()
            .contains("cache_control"));

        // The last message an assistant turn with only calls: the breakpoint is the message's.
        let req = json!({"model": "m", "prompt_cache_key": "k", "input": [
            {"role": "user", "content": "x"},
            {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"}
        ]});
        let out: Value = serde_json::from_slice(&parsed(&req, Family::Anthropic).chat).unwrap();
        assert_eq!(
            out["messages"][1]["cache_control"],
            json!({"type": "ephemeral"})
        );
        assert!(
            out["messages"][0].get("cache_control").is_none(),
            "no system message to mark"
        );

        // A part's own breakpoint: kept on Claude, nowhere else.
        let req = json!({"model": "m", "input": [
            {"role": "user", "content": [
                {"type": "input_text", "text": "long document", "prompt_cache_breakpoint": {"mode": "explicit"}},
                {"type": "input_text", "text": "question"}
            ]}
        ]});
        let out: Value = serde_json::from_slice(&parsed(&req, Family::Anthropic).chat).unwrap();
        assert_eq!(
            out["messages"][0]["content"],
            json!([
                {"type": "text", "text": "long document", "cache_control": {"type": "ephemeral"}},
                {"type": "text", "text": "question"}
            ])
        );
        let out = chat(req);
        assert!(out["messages"][0]["content"][0]
            .get("cache_control")
            .is_none());
    }

    #[test]
    fn assistant_items_between_two_turns_are_one_message() {
        let blob = reasoning::encode(&[Detail {
            kind: "reasoning.encrypted".into(),
            text: None,
            signature: None,
            data: Some("redacted".into()),
        }])
        .unwrap();
        let got = messages(json!([
            {"role": "user", "content": "a"},
            {"type": "reasoning", "summary": [{"type": "summary_text", "text": "only a summary"}]},
            {"role": "user", "content": "b"},
            {"type": "reasoning", "summary": [], "encrypted_content": blob},
            {"type": "message", "role": "assistant", "content": [
                {"type": "output_text", "text": "one"},
                {"type": "refusal", "refusal": "no"}
            ]},
            {"role": "assistant", "content": "two"},
            {"type": "function_call", "call_id": "c", "name": "f"},
            {"type": "function_call_output", "call_id": "c", "output": []},
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "done"}]}
        ]));
        assert_eq!(
            got,
            json!([
                {"role": "user", "content": "a"},
                {"role": "user", "content": "b"},
                {"role": "assistant", "content": [
                    {"type": "text", "text": "one"},
                    {"type": "text", "text": "no"},
                    {"type": "text", "text": "two"}
                ], "tool_calls": [
                    {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}
                ], "reasoning_details": [{"type": "reasoning.encrypted", "data": "redacted"}]},
                {"role": "tool", "tool_call_id": "c", "content": ""},
                {"role": "assistant", "content": "done"}
            ]),
            "a summary-only turn is left out"
        );
    }

    #[test]
    fn content_parts_map_onto_chat_parts() {
        let got = messages(json!([{"role": "user", "content": [
            {"type": "input_text", "text": "Look:"},
            {"type": "input_image", "image_url": "data:image/png;base64,iVBORw0KGgo=", "detail": "high"},
            {"type": "input_image", "image_url": "https://example.com/cat.jpg", "detail": "auto", "file_id": null},
            {"type": "input_file", "file_data": "data:application/pdf;base64,JVBERi0=", "filename": "a.pdf"},
            {"type": "input_file", "file_data": "aGVsbG8=", "filename": "notes.TXT"},
            {"type": "input_file", "file_data": "JVBERi0="},
            {"type": "input_file", "file_url": "https://example.com/b.pdf"},
            {"type": "input_audio", "input_audio": {"data": "UklGRg==", "format": "wav"}}
        ]}]));
        assert_eq!(
            got,
            json!([{"role": "user", "content": [
                {"type": "text", "text": "Look:"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
                {"type": "image_url", "image_url": {"url": "https://example.com/cat.jpg"}},
                {"type": "file", "file": {"file_data": "data:application/pdf;base64,JVBERi0=", "filename": "a.pdf"}},
                {"type": "file", "file": {"file_data": "data:text/plain;base64,aGVsbG8=", "filename": "notes.TXT"}},
                {"type": "file", "file": {"file_data": "data:application/pdf;base64,JVBERi0="}},
                {"type": "file", "file": {"file_data": "https://example.com/b.pdf"}},
                {"type": "input_audio", "input_audio": {"data": "UklGRg==", "format": "wav"}}
            ]}])
        );
        let g = gemini_plan(
            &parsed(
                &with(json!({"input": [{"role": "user", "content": [
                    {"type": "input_image", "image_url": "data:image/png;base64,iVBORw0KGgo="},
                    {"type": "input_file", "file_data": "JVBERi0=", "filename": "r.pdf"}
                ]}]})),
                Family::Gemini,
            )
            .chat,
        );
        assert_eq!(
            g["contents"][0]["parts"],
            json!([
                {"inlineData": {"mimeType": "image/png", "data": "iVBORw0KGgo="}},
                {"inlineData": {"mimeType": "application/pdf", "data": "JVBERi0="}}
            ])
        );
    }

    #[test]
    fn tools_custom_namespaced_additional_and_hosted() {
        let out = chat(with(json!({
            "input": [
                {"role": "user", "content": "go"},
                {"type": "custom_tool_call", "call_id": "c1", "name": "apply_patch", "input": "*** Begin Patch\n\"x\"\n*** End Patch"},
                {"type": "custom_tool_call_output", "call_id": "c1", "output": "Done!"},
                {"type": "custom_tool_call", "call_id": "c2", "namespace": "edit", "name": "sed", "input": "s/a/b/"},
                {"type": "custom_tool_call_output", "call_id": "c2", "output": [{"type": "input_text", "text": "ok"}]},
                {"type": "local_shell_call", "id": "ls_1", "call_id": "c3", "status": "completed",
                    "action": {"type": "exec", "command": ["ls", "-a"], "env": {}}},
                {"type": "local_shell_call_output", "id": "c3", "output": "{\"output\":\".\"}"},
                {"type": "additional_tools", "role": "developer", "tools": [
                    {"type": "function", "name": "late", "parameters": null},
                    {"type": "function", "name": "exec", "description": "a second exec, ignored"}
                ]}
            ],
            "tools": [
                {"type": "function", "name": "exec", "description": "Run.", "parameters": {"type": "object"}, "strict": true},
                {"type": "custom", "name": "apply_patch", "description": "Patch files.",
                    "format": {"type": "grammar", "syntax": "lark", "definition": "start: \"*** Begin Patch\""}},
                {"type": "namespace", "name": "edit", "description": "Editing.", "tools": [
                    {"type": "custom", "name": "sed"},
                    {"type": "function", "name": "read_file", "parameters": {"type": "object"}}
                ]},
                {"type": "web_search_preview"}, {"type": "file_search", "vector_store_ids": []},
                {"type": "code_interpreter", "container": {"type": "auto"}}, {"type": "image_generation"},
                {"type": "computer_use_preview", "display_width": 1, "display_height": 1, "environment": "linux"},
                {"type": "mcp", "server_label": "x"}, {"type": "local_shell"}, {"type": "shell"},
                {"type": "apply_patch"}, {"type": "tool_search", "execution": "client"}
            ]
        })));
        let m = out["messages"].as_array().unwrap();
        assert_eq!(
            m[1]["tool_calls"][0]["function"],
            json!({"name": "apply_patch", "arguments": "{\"input\":\"*** Begin Patch\\n\\\"x\\\"\\n*** End Patch\"}"})
        );
        assert_eq!(
            m[2],
            json!({"role": "tool", "tool_call_id": "c1", "content": "Done!"})
        );
        assert_eq!(
            m[3]["tool_calls"][0]["function"],
            json!({"name": "edit--sed", "arguments": "{\"input\":\"s/a/b/\"}"})
        );
        assert_eq!(
            m[4],
            json!({"role": "tool", "tool_call_id": "c2", "content": "ok"})
        );
        assert_eq!(
            m[5]["tool_calls"][0],
            json!({"id": "c3", "type": "function", "function": {"name": "local_shell",
                "arguments": "{\"command\":[\"ls\",\"-a\"],\"env\":{},\"type\":\"exec\"}"}}),
            "the action object, compact (json! sorted its keys)"
        );
        assert_eq!(
            m[6],
            json!({"role": "tool", "tool_call_id": "c3", "content": "{\"output\":\".\"}"})
        );
        assert_eq!(m.len(), 7, "additional_tools is no message");

        let tools = out["tools"].as_array().unwrap();
        let names: Vec<&str> = tools
            .iter()
            .map(|t| t["function"]["name"].as_str().unwrap())
            .collect();
        assert_eq!(
            names,
            [
                "exec",
                "apply_patch",
                "edit--sed",
                "edit--read_file",
                "late"
            ]
        );
        assert_eq!(
            tools[0]["function"],
            json!({"name": "exec", "description": "Run.", "parameters": {"type": "object"}, "strict": true})
        );
        assert_eq!(tools[1]["function"]["description"], "Patch files.");
        let input = &tools[1]["function"]["parameters"];
        assert_eq!(input["required"], json!(["input"]));
        assert_eq!(input["properties"]["input"]["type"], "string");
        assert_eq!(
            input["properties"]["input"]["description"],
            "The tool's input, in this lark grammar:\nstart: \"*** Begin Patch\""
        );
        assert_eq!(
            tools[2]["function"]["parameters"]["properties"]["input"]["description"],
            "The tool's input, as free-form text."
        );
        assert_eq!(
            tools[4]["function"],
            json!({"name": "late"}),
            "no parameters, no description"
        );

        let only_hosted = chat(with(json!({
            "tools": [{"type": "web_search"}],
            "tool_choice": "required",
            "parallel_tool_calls": false
        })));
        for gone in ["tools", "tool_choice", "parallel_tool_calls"] {
            assert!(only_hosted.get(gone).is_none(), "{gone}: {only_hosted}");
        }
    }

    #[test]
    fn tool_choice_maps_each_kind() {
        let tools = json!([
            {"type": "function", "name": "exec"},
            {"type": "custom", "name": "apply_patch"},
            {"type": "namespace", "name": "fs", "description": "", "tools": [{"type": "function", "name": "read"}]},
            {"type": "namespace", "name": "a", "description": "", "tools": [{"type": "function", "name": "dup"}]},
            {"type": "namespace", "name": "b", "description": "", "tools": [{"type": "function", "name": "dup"}]},
            {"type": "web_search"}
        ]);
        for (choice, want) in [
            (json!("auto"), json!("auto")),
            (json!("none"), json!("none")),
            (json!("required"), json!("required")),
            (
                json!({"type": "function", "name": "exec"}),
                json!({"type": "function", "function": {"name": "exec"}}),
            ),
            (
                json!({"type": "custom", "name": "apply_patch"}),
                json!({"type": "function", "function": {"name": "apply_patch"}}),
            ),
            (
                json!({"type": "function", "name": "read"}),
                json!({"type": "function", "function": {"name": "fs--read"}}),
            ),
            (
                json!({"type": "function", "name": "fs--read"}),
                json!({"type": "function", "function": {"name": "fs--read"}}),
            ),
            (
                json!({"type": "allowed_tools", "mode": "required", "tools": [{"type": "function", "name": "exec"}]}),
                json!("required"),
            ),
            (
                json!({"type": "allowed_tools", "mode": "auto", "tools": []}),
                json!("auto"),
            ),
            (json!({"type": "web_search_preview"}), json!("auto")),
            (json!({"type": "mcp", "server_label": "x"}), json!("auto")),
            (json!({"type": "image_generation"}), json!("auto")),
        ] {
            let out = chat(with(json!({"tools": tools, "tool_choice": choice})));
            assert_eq!(out["tool_choice"], want, "{choice}");
        }
        for (choice, message) in [
            (
                json!({"type": "function", "name": "nope"}),
                "tool_choice names the tool \"nope\"",
            ),
            (
                json!({"type": "function", "name": "dup"}),
                "in several namespaces",
            ),
            (
                json!({"type": "function"}),
                "tool_choice: missing field `name`",
            ),
            (
                json!("sometimes"),
                "invalid value for tool_choice: \"sometimes\"",
            ),
            (
                json!({"type": "allowed_tools", "mode": "never", "tools": []}),
                "invalid value for tool_choice.mode",
            ),
            (
                json!({"type": "teleport"}),
                "invalid value for tool_choice.type: \"teleport\"",
            ),
        ] {
            let e = err(with(json!({"tools": tools, "tool_choice": choice})));
            assert!(e.contains(message), "{choice}: {e}");
        }
    }

    #[test]
    fn reasoning_maps_to_effort_and_summary_to_the_text() {
        for (reasoning, want_reasoning, want_effort) in [
            (
                json!({"effort": "high", "summary": "auto"}),
                Value::Null,
                json!("high"),
            ),
            (
                json!({"effort": "low"}),
                json!({"exclude": true}),
                json!("low"),
            ),
            (
                json!({"effort": "none", "summary": "none"}),
                json!({"exclude": true}),
                json!("none"),
            ),
            (json!({"summary": "detailed"}), json!({}), Value::Null),
            (
                json!({"generate_summary": "concise"}),
                json!({}),
                Value::Null,
            ),
            (json!({"summary": "none"}), Value::Null, Value::Null),
            (
                json!({"effort": null, "summary": null}),
                Value::Null,
                Value::Null,
            ),
            (json!({}), Value::Null, Value::Null),
            (
                json!({"effort": "max", "summary": "auto", "context": "auto", "mode": "pro"}),
                Value::Null,
                json!("xhigh"),
            ),
            (
                json!({"effort": "minimal", "summary": "concise"}),
                Value::Null,
                json!("minimal"),
            ),
        ] {
            let out = chat(with(json!({ "reasoning": reasoning })));
            assert_eq!(out["reasoning"], want_reasoning, "{reasoning}");
            assert_eq!(out["reasoning_effort"], want_effort, "{reasoning}");
        }
        let p = parsed(
            &with(json!({"reasoning": {"effort": "medium"}})),
            Family::Gemini,
        );
        assert!(
            RawRequest::parse(&p.chat, Operation::Chat)
                .unwrap()
                .excludes_reasoning(),
            "no summary asked: the answer leaves the reasoning text out"
        );
        assert_eq!(
            gemini_plan(&p.chat)["generationConfig"]["thinkingConfig"],
            json!({"includeThoughts": false, "thinkingBudget": 8192})
        );
        let p = parsed(
            &with(json!({"reasoning": {"effort": "low", "summary": "auto"}})),
            Family::Anthropic,
        );
        assert_eq!(
            anthropic_plan(&p.chat)["thinking"],
            json!({"type": "enabled", "budget_tokens": 1024})
        );
        for (reasoning, message) in [
            (
                json!({"effort": "extreme"}),
                "invalid value for reasoning.effort: \"extreme\"",
            ),
            (
                json!({"summary": "verbose"}),
                "invalid value for reasoning.summary: \"verbose\"",
            ),
            (json!("high"), "invalid value for reasoning"),
        ] {
            let e = err(with(json!({ "reasoning": reasoning })));
            assert!(e.starts_with(message), "{reasoning}: {e}");
        }
    }

    #[test]
    fn text_format_and_verbosity() {
        let out = chat(with(json!({"text": {
            "format": {"type": "json_schema", "name": "answer", "description": "The answer.",
                "schema": {"type": "object", "properties": {"n": {"type": "integer"}}}, "strict": true},
            "verbosity": "low"
        }})));
        assert_eq!(
            out["response_format"],
            json!({"type": "json_schema", "json_schema": {"name": "answer", "description": "The answer.",
                "schema": {"type": "object", "properties": {"n": {"type": "integer"}}}, "strict": true}})
        );
        assert_eq!(out["verbosity"], "low");
        let out = chat(with(
            json!({"text": {"format": {"type": "json_schema", "name": "a", "schema": {}, "strict": null}}}),
        ));
        assert_eq!(
            out["response_format"],
            json!({"type": "json_schema", "json_schema": {"name": "a", "schema": {}}})
        );
        let out = chat(with(json!({"text": {"format": {"type": "json_object"}}})));
        assert_eq!(out["response_format"], json!({"type": "json_object"}));
        let out = chat(with(json!({"text": {"format": {"type": "text"}}})));
        assert!(out.get("response_format").is_none() && out.get("verbosity").is_none());
        for (text, message) in [
            (
                json!({"format": {"type": "yaml"}}),
                "invalid value for text.format.type: \"yaml\"",
            ),
            (
                json!({"format": {"type": "json_schema", "name": "a"}}),
                "invalid value for text.format.schema",
            ),
            (
                json!({"format": {"type": "json_schema", "schema": {}}}),
                "text.format: missing field `name`",
            ),
            (json!({"verbosity": 3}), "invalid value for text.verbosity"),
        ] {
            let e = err(with(json!({ "text": text })));
            assert!(e.starts_with(message), "{text}: {e}");
        }
    }

    #[test]
    fn what_the_gateway_cannot_do_is_a_400_saying_so() {
        for (extra, message) in [
            (json!({"background": true}), "background: true is not supported"),
            (json!({"conversation": "conv_1"}), "conversation is not supported"),
            (json!({"prompt": {"id": "pmpt_1"}}), "prompt is not supported"),
            (json!({"input": [{"type": "item_reference", "id": "msg_1"}]}), "input[0]: item references are not supported"),
            (json!({"input": [{"id": "msg_1"}]}), "input[0]: item references are not supported"),
            (json!({"input": [{"role": "user", "content": "x"}, {"type": "web_search_call", "id": "ws", "status": "completed", "action": {"type": "search"}}]}),
                "input[1]: items of type \"web_search_call\" are not supported on this gateway"),
            (json!({"input": [{"type": "compaction", "encrypted_content": "x"}]}), "input[0]: items of type \"compaction\""),
            (json!({"input": [{"type": "function_call_output", "call_id": "nope", "output": "x"}]}),
                "input[0]: function_call_output for call_id \"nope\" answers no earlier call"),
            (json!({"input": [
                {"type": "custom_tool_call_output", "call_id": "later", "output": "x"},
                {"type": "custom_tool_call", "call_id": "later", "name": "f", "input": ""}
            ]}), "input[0]: custom_tool_call_output for call_id \"later\""),
            (json!({"input": [{"role": "user", "content": [{"type": "input_image", "file_id": "file_1", "detail": "auto"}]}]}),
                "input[0].content[0]: file_id is not supported: this gateway has no Files API"),
            (json!({"input": [{"role": "user", "content": [{"type": "input_file", "file_id": "file_1"}]}]}), "input[0].content[0]: file_id is not supported"),
            (json!({"input": [{"role": "developer", "content": [{"type": "input_image", "image_url": "https://a/b.png"}]}]}),
                "input[0].content[0]: input_image parts are not allowed in system or developer messages"),
            (json!({"input": [{"role": "assistant", "content": [{"type": "input_file", "file_url": "https://a/b.pdf"}]}]}),
                "input[0].content[0]: input_file parts are not allowed in assistant messages"),
            (json!({"input": [{"role": "user", "content": [{"type": "refusal", "refusal": "x"}]}]}), "input[0].content[0]: content parts of type \"refusal\""),
            (json!({"input": [{"role": "user", "content": [{"type": "input_video"}]}]}), "input[0].content[0]: content parts of type \"input_video\""),
            (json!({"tools": [{"type": "namespace", "name": "a--b", "tools": [{"type": "function", "name": "f"}]}]}),
                "tools[0].tools[0]: the namespace \"a--b\" cannot be carried"),
            (json!({"tools": [{"type": "function", "name": "my--tool"}]}), "tools[0]: tool names holding \"--\""),
            (json!({"tools": [{"type": "namespace", "name": "n", "tools": [{"type": "namespace", "name": "m", "tools": []}]}]}),
                "tools[0].tools[0]: a namespace holds function and custom tools only"),
            (json!({"tools": [{"type": "function", "name": "f", "parameters": [1]}]}), "tools[0].parameters: expected a JSON Schema object"),
            (json!({"tools": [{"name": "f"}]}), "tools[0]: missing field `type`"),
            (json!({"tools": {}}), "invalid value for tools: expected an array"),
            (json!({"input": [{"type": "function_call", "call_id": "c", "namespace": "x-", "name": "f", "arguments": "{}"}]}),
                "input[0]: the namespace \"x-\" cannot be carried"),
        ] {
            let e = err(with(extra.clone()));
            assert!(e.starts_with(message), "{extra}: {e}");
        }
        assert!(parse(
            br#"{"model":"m","input":"x","background":false}"#,
            None,
            Family::Gemini
        )
        .is_ok());
    }

    #[test]
    fn malformed_requests_are_clear_400s() {
        let e = parse(b"{", None, Family::Gemini).unwrap_err().to_string();
        assert!(e.starts_with("request body is not valid JSON"), "{e}");
        let e = parse(
            br#"{"model":"m","model":"n","input":"x"}"#,
            None,
            Family::Gemini,
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("duplicate"), "{e}");
        for (req, message) in [
            (json!({"input": "x"}), "missing required field: model"),
            (json!({"model": 7, "input": "x"}), "invalid value for model"),
            (
                json!({"model": "", "input": "x"}),
                "model must not be empty",
            ),
            (json!({"model": "m"}), "missing required field: input"),
            (
                json!({"model": "m", "input": 5}),
                "invalid value for input: expected a string or an array of items",
            ),
            (
                json!({"model": "m", "input": []}),
                "input must hold at least one message or item",
            ),
            (
                json!({"model": "m", "input": [{"type": "reasoning", "summary": []}]}),
                "input must hold at least one message or item",
            ),
            (json!({"model": "m", "input": [7]}), "input[0]: "),
            (
                json!({"model": "m", "input": [{"content": "x"}]}),
                "input[0]: an item needs a type",
            ),
            (
                json!({"model": "m", "input": [{"role": "tool", "content": "x"}]}),
                "input[0].role: expected user, assistant, system or developer, not \"tool\"",
            ),
            (
                json!({"model": "m", "input": [{"role": "user"}]}),
                "input[0]: missing field `content`",
            ),
            (
                json!({"model": "m", "input": [{"type": "message", "content": "x"}]}),
                "input[0]: missing field `role`",
            ),
            (
                json!({"model": "m", "input": [{"role": "user", "content": 5}]}),
                "invalid value for input[0].content",
            ),
            (
                json!({"model": "m", "input": [{"role": "user", "content": [{"type": "input_text"}]}]}),
                "input[0].content[0]: missing field `text`",
            ),
            (
                json!({"model": "m", "input": [{"role": "user", "content": [{"text": "no type"}]}]}),
                "input[0].content[0]: missing field `type`",
            ),
            (
                json!({"model": "m", "input": [{"type": "function_call", "name": "f", "arguments": "{}"}]}),
                "input[0]: missing field `call_id`",
            ),
            (
                json!({"model": "m", "input": [{"type": "function_call", "call_id": "c", "name": "f", "arguments": {}}]}),
                "input[0].arguments: ",
            ),
            (
                json!({"model": "m", "input": [{"type": "custom_tool_call", "call_id": "c", "name": "f"}]}),
                "input[0]: missing field `input`",
            ),
            (
                json!({"model": "m", "input": [{"type": "local_shell_call", "call_id": "c", "action": "ls"}]}),
                "input[0].action: expected an object",
            ),
            (
                json!({"model": "m", "input": [
                    {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"},
                    {"type": "function_call_output", "call_id": "c"}
                ]}),
                "input[1]: missing field `output`",
            ),
            (
                json!({"model": "m", "input": [
                    {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"},
                    {"type": "function_call_output", "call_id": "c", "output": 3}
                ]}),
                "invalid value for input[1].output",
            ),
            (
                json!({"model": "m", "input": [{"type": "additional_tools", "role": "developer"}]}),
                "input[0]: missing field `tools`",
            ),
            (
                with(json!({"instructions": ["x"]})),
                "invalid value for instructions",
            ),
            (
                with(json!({"max_output_tokens": -1})),
                "invalid value for max_output_tokens: expected an integer",
            ),
            (
                with(json!({"max_output_tokens": 4_294_967_296_u64})),
                "invalid value for max_output_tokens",
            ),
            (
                with(json!({"temperature": "hot"})),
                "invalid value for temperature: expected a number",
            ),
            (with(json!({"stream": "yes"})), "invalid value for stream"),
            (with(json!({"store": "no"})), "invalid value for store"),
            (
                with(json!({"parallel_tool_calls": 1})),
                "invalid value for parallel_tool_calls",
            ),
            (
                with(json!({"prompt_cache_key": 1})),
                "invalid value for prompt_cache_key: expected a string",
            ),
            (
                with(json!({"service_tier": 1})),
                "invalid value for service_tier: expected a string",
            ),
        ] {
            let e = err(req.clone());
            assert!(e.starts_with(message), "{req}: {e}");
        }
        let out = chat(with(
            json!({"temperature": null, "instructions": null, "tools": null, "reasoning": null, "text": null}),
        ));
        assert_eq!(
            out,
            json!({"model": "google/gemini-test", "messages": [{"role": "user", "content": "hi"}]}),
            "null is absent"
        );
    }

    #[test]
    fn a_developer_message_mid_conversation_is_system_text_on_both_families() {
        let req = json!({"model": "m", "input": [
            {"role": "user", "content": "a"},
            {"role": "developer", "content": [{"type": "input_text", "text": "Context changed."}]},
            {"role": "user", "content": "b"}
        ]});
        let p = parsed(&req, Family::Gemini);
        let out: Value = serde_json::from_slice(&p.chat).unwrap();
        assert_eq!(
            out["messages"][1],
            json!({"role": "system", "content": [{"type": "text", "text": "Context changed."}]}),
            "where it stands"
        );
        let g = gemini_plan(&p.chat);
        assert_eq!(
            g["systemInstruction"],
            json!({"parts": [{"text": "Context changed."}]})
        );
        assert_eq!(
            g["contents"],
            json!([{"role": "user", "parts": [{"text": "a"}, {"text": "b"}]}])
        );
        let a = anthropic_plan(&parsed(&req, Family::Anthropic).chat);
        assert_eq!(
            a["system"],
            json!([{"type": "text", "text": "Context changed."}])
        );
        assert_eq!(
            a["messages"],
            json!([{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}])
        );
    }

    #[test]
    fn the_codex_request_reaches_claude_with_its_signed_thinking_tools_and_breakpoints() {
        let body = fixture("responses/codex-request.json");
        let p = parse(&body, None, Family::Anthropic).unwrap();
        let a = anthropic_plan(&p.chat);
        assert_eq!(
            a["system"][0]["cache_control"],
            json!({"type": "ephemeral"}),
            "Codex's developer message is the system prompt, cached"
        );
        assert_eq!(a["thinking"]["type"], "enabled", "summary: auto thinks");
        let m = a["messages"].as_array().unwrap();
        let roles: Vec<&str> = m.iter().map(|m| m["role"].as_str().unwrap()).collect();
        assert_eq!(roles, ["user", "assistant", "user", "assistant", "user"]);
        let turn = m[1]["content"].as_array().unwrap();
        assert_eq!(
            turn[0],
            json!({"type": "thinking", "thinking": "The user wants the Rust files; list src first.", "signature": "EqQBCkYIBxgCKkAsig"}),
            "the signed thinking replayed first, from the tg1. blob"
        );
        assert_eq!(turn[1]["type"], "tool_use");
        assert_eq!(turn[1]["name"], "exec_command");
        assert_eq!(turn[2]["name"], "mcp__fs__--read_file");
        assert_eq!(turn[2]["id"], "call_resp7_1");
        let results = m[2]["content"].as_array().unwrap();
        assert_eq!(results[0]["tool_use_id"], turn[1]["id"], "paired");
        assert_eq!(results[1]["tool_use_id"], turn[2]["id"], "paired");
        assert_eq!(results[1]["content"], "# Demo\nA small demo crate.");
        assert_eq!(
            m[4]["content"],
            json!([{"type": "text", "text": "Now run the tests.", "cache_control": {"type": "ephemeral"}}]),
            "the rolling breakpoint on the last message"
        );
        let names: Vec<&str> = a["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap())
            .collect();
        assert_eq!(
            names,
            ["exec_command", "apply_patch", "mcp__fs__--read_file"]
        );
        assert_eq!(a["tool_choice"], json!({"type": "auto"}));
    }

    /// What `list` (a JSON array of items) becomes, read in one pass (`None`: that read
    /// declined it) or item by item: the chat messages and the tools its items add, or the
    /// error.
    fn read_both_ways(list: &str) -> (Option<Result<String, String>>, Result<String, String>) {
        let outcome = |mut conv: Conversation<'_>, done: Result<(), GatewayError>| {
            conv.flush();
            done.map(|()| {
                let messages = serde_json::to_string(&conv.messages).unwrap();
                format!("{messages} {:?}", conv.extra_tools)
            })
            .map_err(|e| e.to_string())
        };
        let one_pass = serde_json::from_str::<Vec<ReadItem>>(list)
            .ok()
            .map(|items| {
                let mut conv = Conversation::new(false);
                let done = conv.read_items(items, &"input");
                outcome(conv, done)
            });
        let mut conv = Conversation::new(false);
        let done = conv.raw_items(list, &"input", |e| GatewayError::invalid(e.to_string()));
        (one_pass, outcome(conv, done))
    }

    mod one_pass {
        use proptest::collection::vec;
        use proptest::prelude::*;
        use serde_json::{json, Value};

        use super::read_both_ways;
        use crate::doors::one_pass::text_strategy as text;

        fn part(plain: bool) -> BoxedStrategy<Value> {
            let good = prop_oneof![
                text(false).prop_map(|t| json!({"type": "input_text", "text": t})),
                text(false).prop_map(|t| json!({"type": "output_text", "text": t})),
                text(false).prop_map(|t| json!({"type": "refusal", "refusal": t})),
                Just(json!({"type": "input_image", "image_url": "https://example.com/a.png"})),
            ];
            if plain {
                return good.boxed();
            }
            prop_oneof![
                4 => good,
                1 => Just(json!({"type": "input_text"})),
                1 => Just(json!({"type": "input_text", "text": 5})),
                1 => Just(json!({"type": "input_video"})),
                1 => Just(json!({"text": "no type"})),
            ]
            .boxed()
        }

        /// A `content` or an `output`: a string, or a list of parts (or, not plain, neither).
        fn parts(plain: bool) -> BoxedStrategy<Value> {
            let good = prop_oneof![
                text(plain).prop_map(Value::String),
                vec(part(plain), 0..3).prop_map(Value::Array),
            ];
            if plain {
                return good.boxed();
            }
            prop_oneof![4 => good, 1 => Just(json!(7)), 1 => Just(json!({"text": "x"}))].boxed()
        }

        fn item(plain: bool) -> BoxedStrategy<Value> {
            let roles = if plain {
                vec!["user", "assistant", "system", "developer"]
            } else {
                vec!["user", "assistant", "system", "developer", "tool"]
            };
            let call = prop::sample::select(vec!["c1", "c2"]);
            prop_oneof![
                3 => (prop::sample::select(roles), parts(plain), any::<bool>()).prop_map(
                    |(role, content, typed)| {
                        let mut m = json!({"role": role, "content": content});
                        if typed {
                            m["type"] = json!("message");
                        }
                        m
                    }
                ),
                1 => call.clone().prop_map(|id| json!(
                    {"type": "function_call", "call_id": id, "name": "f", "arguments": "{\"a\":1}"}
                )),
                1 => (call, parts(plain)).prop_map(|(id, output)| json!(
                    {"type": "function_call_output", "call_id": id, "output": output}
                )),
                1 => Just(json!({"type": "reasoning", "summary": [], "encrypted_content": "x"})),
                1 => Just(json!({"type": "additional_tools", "tools": [{"type": "function", "name": "g"}]})),
            ]
            .boxed()
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(1024))]

            /// Whatever the one pass reads, it reads as the item-by-item reading does, down to
            /// the error.
            #[test]
            fn agrees_with_the_reading_item_by_item(items in vec(item(false), 0..6)) {
                let list = serde_json::to_string(&items).unwrap();
                let (one_pass, by_item) = read_both_ways(&list);
                if let Some(one_pass) = one_pass {
                    prop_assert_eq!(one_pass, by_item);
                }
            }

            /// And it reads every list of well-formed items whose string contents have nothing
            /// to escape (text parts and outputs may have escapes).
            #[test]
            fn reads_well_formed_items(items in vec(item(true), 0..6)) {
                let list = serde_json::to_string(&items).unwrap();
                let (one_pass, by_item) = read_both_ways(&list);
                prop_assert_eq!(one_pass, Some(by_item));
            }
        }
    }

    #[test]
    fn a_codex_conversation_is_read_in_one_pass() {
        let body = fixture("responses/codex-request.json");
        let input = &serde_json::from_slice::<Value>(&body).unwrap()["input"];
        let (one_pass, by_item) = read_both_ways(&input.to_string());
        assert!(by_item.is_ok(), "{by_item:?}");
        assert_eq!(one_pass, Some(by_item));
        // A string content with an escape is read item by item, to be copied as written.
        let (one_pass, by_item) = read_both_ways(r#"[{"role": "user", "content": "a\nb"}]"#);
        assert_eq!((one_pass, by_item.is_ok()), (None, true));
    }
}
