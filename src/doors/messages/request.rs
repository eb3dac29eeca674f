//! Anthropic Messages request body → the gateway's request model (the OpenAI chat body).
//!
//! The output is what a client of the chat door could have sent for the same conversation, so
//! the route's adapter plans it as it plans any chat request. What is mapped and what is
//! dropped is listed in the module doc of `doors::messages`. Borrowed raw slices are copied
//! byte for byte where the two wire formats agree (tool schemas, numbers, `cache_control`);
//! only `tool_use.input` is rewritten, as the compact JSON text an OpenAI `arguments` holds.
//!
//! `messages` is read in one pass ([`conversation`]); a list that pass cannot read is read
//! message by message, each block where it is used, so that the error names it.

use std::borrow::Cow;
use std::fmt::Display;

use serde::de;
use serde::Deserialize;
use serde_json::value::RawValue;

use crate::api::list::items;
use crate::api::request::RawRequest;
use crate::api::{At, GatewayError, Str};
use crate::doors::chat_out::{
    checked, typed, ChatOut, ContentOut, FileOut, FunctionCallOut, FunctionDeclOut, MessageOut,
    PartOut, ReasoningOut, Text, ToolCallOut, ToolChoiceOut, ToolOut, UrlOut,
};
use crate::doors::one_pass::StringOrList;
use crate::providers::common::compact;

/// The Anthropic body (`body`) as an OpenAI chat body, or a 400 naming what is wrong.
pub fn to_chat(body: &[u8]) -> Result<Vec<u8>, GatewayError> {
    to_chat_from(&RawRequest::parse_head(body)?)
}

/// [`to_chat`] of a body whose fields are already read (admission reads them first: reading
/// them again was a fifth of what the door added to a request).
pub fn to_chat_from(req: &RawRequest<'_>) -> Result<Vec<u8>, GatewayError> {
    let get = |name: &str| req.get(name).filter(|v| v.get() != "null");
    // `parse_head` checked it: a non-empty string (the first of `models` when absent).
    let model =
        get("model").ok_or_else(|| GatewayError::invalid("missing required field: model"))?;

    let mut messages = Vec::new();
    if let Some(system) = get("system") {
        match system_blocks(system) {
            Some(blocks) => system_message(blocks, &"system", &mut messages)?,
            None => system_message(system, &"system", &mut messages)?,
        }
    }
    let raw_messages =
        get("messages").ok_or_else(|| GatewayError::invalid("missing required field: messages"))?;
    conversation(raw_messages.get(), &mut messages)?;

    let max_tokens = get("max_tokens")
        .map(|v| checked::<u32>(v, "max_tokens", "an integer from 0 to 4294967295"))
        .transpose()?;
    let stop = get("stop_sequences")
        .map(|v| checked::<Vec<Str>>(v, "stop_sequences", "an array of strings"))
        .transpose()?;
    let temperature = get("temperature")
        .map(|v| checked::<f64>(v, "temperature", "a number"))
        .transpose()?;
    let top_p = get("top_p")
        .map(|v| checked::<f64>(v, "top_p", "a number"))
        .transpose()?;
    let top_k = get("top_k")
        .map(|v| checked::<u64>(v, "top_k", "a non-negative integer"))
        .transpose()?;
    let stream = get("stream")
        .map(|v| typed::<bool>(v, "stream"))
        .transpose()?
        .unwrap_or(false);

    let (tools, names) = match get("tools") {
        Some(raw) => tools(raw)?,
        None => (Vec::new(), Vec::new()),
    };
    let (tool_choice, parallel_tool_calls) = match get("tool_choice") {
        Some(raw) if !tools.is_empty() => tool_choice(raw, &names)?,
        Some(raw) => {
            // Validated, then dropped: no tool is left to choose.
            tool_choice(raw, &names)?;
            (None, None)
        }
        None => (None, None),
    };
    let (reasoning, reasoning_effort) = thinking(get("thinking"), get("output_config"))?;

    let mut out = ChatOut {
        max_tokens,
        stop,
        temperature,
        top_p,
        top_k,
        tools,
        tool_choice,
        parallel_tool_calls,
        reasoning,
        reasoning_effort,
        ..ChatOut::new(model, messages)
    };
    out.streaming(stream);
    out.to_vec()
}

// ----- what the Anthropic client sent --------------------------------------------------------

/// A message: `content` (`C`) read with it in the one pass over the list ([`Blocks`]), or left
/// raw when a part of the list must be named in an error.
#[derive(Deserialize)]
#[serde(bound(deserialize = "C: Deserialize<'de>"))]
struct MessageIn<'a, C> {
    #[serde(borrow)]
    role: Str<'a>,
    #[serde(default)]
    content: Option<C>,
}

/// Just a block's `type`, read before the rest (whose shape depends on it).
#[derive(Deserialize)]
struct KindIn<'a> {
    #[serde(rename = "type", borrow)]
    kind: Str<'a>,
}

#[derive(Deserialize)]
struct TextIn<'a> {
    /// Copied as written.
    #[serde(borrow)]
    text: Text<'a>,
    #[serde(borrow, default)]
    cache_control: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct MediaIn<'a> {
    #[serde(borrow)]
    source: SourceIn<'a>,
    #[serde(borrow, default)]
    cache_control: Option<&'a RawValue>,
}

/// An image's or a document's `source`; which fields matter depends on `type`.
#[derive(Deserialize)]
struct SourceIn<'a> {
    #[serde(rename = "type", borrow)]
    kind: Str<'a>,
    #[serde(borrow, default)]
    media_type: Option<Str<'a>>,
    #[serde(borrow, default)]
    data: Option<Str<'a>>,
    #[serde(borrow, default)]
    url: Option<Str<'a>>,
    #[serde(borrow, default)]
    content: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct ToolUseIn<'a> {
    #[serde(borrow)]
    id: Str<'a>,
    #[serde(borrow)]
    name: Str<'a>,
    #[serde(borrow, default)]
    input: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct ToolResultIn<'a> {
    #[serde(borrow)]
    tool_use_id: Str<'a>,
    #[serde(borrow, default)]
    content: Option<&'a RawValue>,
    #[serde(default)]
    is_error: Option<bool>,
    #[serde(borrow, default)]
    cache_control: Option<&'a RawValue>,
}

/// Parses block `raw` of `at` as `T`; a block missing a field is a 400 naming it.
fn block<'a, T: Deserialize<'a>>(raw: &'a RawValue, at: &dyn Display) -> Result<T, GatewayError> {
    serde_json::from_str(raw.get()).map_err(|e| GatewayError::invalid(format!("{at}: {e}")))
}

fn kind_of<'a>(raw: &'a RawValue, at: &dyn Display) -> Result<Str<'a>, GatewayError> {
    block::<KindIn>(raw, at)
        .map(|k| k.kind)
        .map_err(|_| GatewayError::invalid(format!("{at}: a content block needs a string type")))
}

/// A `cache_control` worth keeping (absent and `null` are the same).
fn cache(raw: Option<&RawValue>) -> Option<&RawValue> {
    raw.filter(|r| r.get() != "null")
}

/// `content` as blocks: a string is one text block. (The one pass reads it with its message:
/// a string only when it has no escapes, so that it is copied as written.)
type Blocks<'a> = StringOrList<Text<'a>, Block<'a>>;

fn blocks<'a>(raw: &'a RawValue, at: &dyn Display) -> Result<Blocks<'a>, GatewayError> {
    if raw.get().starts_with('"') {
        return Ok(StringOrList::Text(Text::Json(raw)));
    }
    serde_json::from_str::<Vec<&RawValue>>(raw.get())
        .map(|list| StringOrList::List(list.into_iter().map(Block::Raw).collect()))
        .map_err(|_| {
            GatewayError::invalid(format!(
                "invalid value for {at}: expected a string or an array of content blocks"
            ))
        })
}

/// A message's `content` as the conversation takes it: read in the one pass, or read now from
/// its raw slice (`at` names it in errors).
trait ContentIn<'a> {
    fn blocks(self, at: &dyn Display) -> Result<Blocks<'a>, GatewayError>;
}

impl<'a> ContentIn<'a> for &'a RawValue {
    fn blocks(self, at: &dyn Display) -> Result<Blocks<'a>, GatewayError> {
        blocks(self, at)
    }
}

impl<'a> ContentIn<'a> for Blocks<'a> {
    fn blocks(self, _: &dyn Display) -> Result<Blocks<'a>, GatewayError> {
        Ok(self)
    }
}

/// A content block: raw, read where it is used with its place named in errors; or read in the
/// one pass, as the fields its `type` has.
enum Block<'a> {
    Raw(&'a RawValue),
    Read(Str<'a>, Read<'a>),
}

/// A block's fields, by its `type` (a block is read as the same struct wherever it stands).
enum Read<'a> {
    Text(TextIn<'a>),
    Media(MediaIn<'a>),
    ToolUse(ToolUseIn<'a>),
    ToolResult(ToolResultIn<'a>),
    /// Thinking and the types no door reads: only the `type` matters.
    Other,
}

impl<'a> Block<'a> {
    fn kind(&self, at: &dyn Display) -> Result<Str<'a>, GatewayError> {
        match self {
            Block::Raw(raw) => kind_of(raw, at),
            Block::Read(kind, _) => Ok(Str(kind.0.clone())),
        }
    }

    /// The block's fields as `T`, the struct its `type` is read as.
    fn fields<T: FieldsOf<'a>>(self, at: &dyn Display) -> Result<T, GatewayError> {
        match self {
            Block::Raw(raw) => block(raw, at),
            Block::Read(_, read) => T::of(read).ok_or_else(|| {
                GatewayError::Internal(format!("{at}: a block read as another type").into())
            }),
        }
    }
}

/// A struct a block is read as, taken from the one pass's reading.
trait FieldsOf<'a>: Deserialize<'a> {
    fn of(read: Read<'a>) -> Option<Self>;
}

impl<'a> FieldsOf<'a> for TextIn<'a> {
    fn of(read: Read<'a>) -> Option<Self> {
        match read {
            Read::Text(t) => Some(t),
            _ => None,
        }
    }
}

impl<'a> FieldsOf<'a> for MediaIn<'a> {
    fn of(read: Read<'a>) -> Option<Self> {
        match read {
            Read::Media(m) => Some(m),
            _ => None,
        }
    }
}

impl<'a> FieldsOf<'a> for ToolUseIn<'a> {
    fn of(read: Read<'a>) -> Option<Self> {
        match read {
            Read::ToolUse(u) => Some(u),
            _ => None,
        }
    }
}

impl<'a> FieldsOf<'a> for ToolResultIn<'a> {
    fn of(read: Read<'a>) -> Option<Self> {
        match read {
            Read::ToolResult(r) => Some(r),
            _ => None,
        }
    }
}

/// The one pass's block: every field any block type this door reads has, then the struct its
/// `type` is read as, made of them. A block that does not make one (a field missing or of
/// another type, even one its type does not read) declines the pass: reading the list message
/// by message then says what is wrong, if anything.
#[derive(Deserialize)]
struct AnyBlockIn<'a> {
    #[serde(rename = "type", borrow)]
    kind: Str<'a>,
    #[serde(borrow, default)]
    text: Option<Text<'a>>,
    #[serde(borrow, default)]
    cache_control: Option<&'a RawValue>,
    /// An object in images and documents (a string in types this door refuses).
    #[serde(borrow, default)]
    source: Option<&'a RawValue>,
    #[serde(borrow, default)]
    id: Option<Str<'a>>,
    #[serde(borrow, default)]
    name: Option<Str<'a>>,
    #[serde(borrow, default)]
    input: Option<&'a RawValue>,
    #[serde(borrow, default)]
    tool_use_id: Option<Str<'a>>,
    #[serde(borrow, default)]
    content: Option<&'a RawValue>,
    #[serde(default)]
    is_error: Option<bool>,
}

impl<'a> AnyBlockIn<'a> {
    /// The struct its type is read as; `None` where reading that struct would fail.
    fn read(self) -> Option<Read<'a>> {
        let cache_control = self.cache_control;
        Some(match &*self.kind {
            "text" => Read::Text(TextIn {
                text: self.text?,
                cache_control,
            }),
            "image" | "document" => Read::Media(MediaIn {
                source: serde_json::from_str(self.source?.get()).ok()?,
                cache_control,
            }),
            "tool_use" => Read::ToolUse(ToolUseIn {
                id: self.id?,
                name: self.name?,
                input: self.input,
            }),
            "tool_result" => Read::ToolResult(ToolResultIn {
                tool_use_id: self.tool_use_id?,
                content: self.content,
                is_error: self.is_error,
                cache_control,
            }),
            _ => Read::Other,
        })
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for Block<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let any = AnyBlockIn::deserialize(d)?;
        let kind = Str(any.kind.0.clone());
        let read = any
            .read()
            .ok_or_else(|| de::Error::custom("a block its type's struct cannot read"))?;
        Ok(Block::Read(kind, read))
    }
}

// ----- system --------------------------------------------------------------------------------

/// The top-level `system`, a list of blocks, read in one pass (Claude Code's is 29 KB); `None`
/// for a string, or a list that pass declines, which is read block by block as a message's is.
fn system_blocks(raw: &RawValue) -> Option<Blocks<'_>> {
    if !raw.get().starts_with('[') {
        return None;
    }
    serde_json::from_str(raw.get()).ok()
}

/// The system prompt `raw` (at `at`: the top-level `system`, or a `system` message in the
/// conversation) as a chat `system` message.
fn system_message<'a>(
    content: impl ContentIn<'a>,
    at: &dyn Display,
    out: &mut Vec<MessageOut<'a>>,
) -> Result<(), GatewayError> {
    let content = match content.blocks(at)? {
        StringOrList::Text(t) if t.is_empty() => return Ok(()),
        StringOrList::Text(t) => ContentOut::Text(t),
        StringOrList::List(list) if list.is_empty() => return Ok(()),
        StringOrList::List(list) => {
            let mut parts = Vec::with_capacity(list.len());
            for (j, b) in list.into_iter().enumerate() {
                let at = At::Index(at, j);
                let kind = b.kind(&at)?;
                if &*kind != "text" {
                    return Err(GatewayError::invalid(format!(
                        "{at}: a system prompt holds text blocks only, not {:?}",
                        &*kind
                    )));
                }
                let t: TextIn = b.fields(&at)?;
                parts.push(PartOut::Text {
                    text: t.text,
                    cache_control: cache(t.cache_control),
                });
            }
            ContentOut::Parts(parts)
        }
    };
    out.push(MessageOut::plain("system", Some(content)));
    Ok(())
}

// ----- messages ------------------------------------------------------------------------------

/// Appends the OpenAI messages of `list` (the `messages` array) to `out`. Read in one pass
/// when every message reads; otherwise message by message, so that the error names the
/// message and block at fault, as the translation would.
fn conversation<'a>(list: &'a str, out: &mut Vec<MessageOut<'a>>) -> Result<(), GatewayError> {
    match serde_json::from_str::<Vec<MessageIn<'a, Blocks<'a>>>>(list) {
        Ok(messages) => each_message(messages.into_iter().map(Ok), out),
        Err(_) => raw_messages(list, out),
    }
}

/// [`conversation`] read message by message.
fn raw_messages<'a>(list: &'a str, out: &mut Vec<MessageOut<'a>>) -> Result<(), GatewayError> {
    let raws: Vec<&'a RawValue> = serde_json::from_str(list).map_err(|_| not_a_list())?;
    let messages = raws.into_iter().enumerate().map(|(i, raw)| {
        serde_json::from_str::<MessageIn<'a, &'a RawValue>>(raw.get())
            .map_err(|e| GatewayError::invalid(format!("messages[{i}]: {e}")))
    });
    each_message(messages, out)
}

fn not_a_list() -> GatewayError {
    GatewayError::invalid("messages must be a non-empty array")
}

/// Appends each of `messages` (none is a 400), read as it comes.
fn each_message<'a, C: ContentIn<'a>>(
    messages: impl ExactSizeIterator<Item = Result<MessageIn<'a, C>, GatewayError>>,
    out: &mut Vec<MessageOut<'a>>,
) -> Result<(), GatewayError> {
    if messages.len() == 0 {
        return Err(not_a_list());
    }
    let mut previous_calls: Vec<Cow<'a, str>> = Vec::new();
    for (i, m) in messages.enumerate() {
        conversation_message(i, m?, &mut previous_calls, out)?;
    }
    Ok(())
}

/// Appends message `i`'s OpenAI messages to `out`. `previous_calls` holds the tool-use ids of
/// the assistant message just before (what this message's tool results may answer); it is
/// replaced by this message's own.
fn conversation_message<'a>(
    i: usize,
    m: MessageIn<'a, impl ContentIn<'a>>,
    previous_calls: &mut Vec<Cow<'a, str>>,
    out: &mut Vec<MessageOut<'a>>,
) -> Result<(), GatewayError> {
    let content = m
        .content
        .ok_or_else(|| GatewayError::invalid(format!("messages[{i}]: missing field `content`")))?;
    let message = At::Index(&"messages", i);
    let at = At::Field(&message, "content");
    if &*m.role == "system" {
        // A mid-conversation system message (Claude Code sends its context so): system text
        // where it stands, which the route's adapter gathers with the rest.
        return system_message(content, &at, out);
    }
    let content = content.blocks(&at)?;
    match &*m.role {
        "user" => {
            let answered = std::mem::take(previous_calls);
            user_message(i, content, &answered, out)
        }
        "assistant" => {
            previous_calls.clear();
            assistant_message(i, content, previous_calls, out)
        }
        other => Err(GatewayError::invalid(format!(
            "messages[{i}].role: expected \"user\", \"assistant\" or \"system\", got {other:?}"
        ))),
    }
}

fn user_message<'a>(
    i: usize,
    content: Blocks<'a>,
    answered: &[Cow<'a, str>],
    out: &mut Vec<MessageOut<'a>>,
) -> Result<(), GatewayError> {
    let list = match content {
        StringOrList::Text(t) => {
            out.push(MessageOut::plain("user", Some(ContentOut::Text(t))));
            return Ok(());
        }
        StringOrList::List(list) => list,
    };
    let message = At::Index(&"messages", i);
    let content_at = message.field("content");
    let mut parts = Vec::with_capacity(list.len());
    for (j, b) in list.into_iter().enumerate() {
        let at = content_at.index(j);
        let kind = b.kind(&at)?;
        match &*kind {
            // Tool results go first, in order: OpenAI wants them right after the calls.
            "tool_result" => out.push(tool_result(b, &at, answered)?),
            _ => parts.extend(user_part(b, &kind, &at, "user")?),
        }
    }
    if !parts.is_empty() {
        out.push(MessageOut::plain("user", Some(ContentOut::Parts(parts))));
    }
    Ok(())
}

/// One content part of a user message (or of a document's `content` source).
fn user_part<'a>(
    b: Block<'a>,
    kind: &str,
    at: &dyn Display,
    role: &str,
) -> Result<Vec<PartOut<'a>>, GatewayError> {
    Ok(match kind {
        "text" => {
            let t: TextIn = b.fields(at)?;
            vec![PartOut::Text {
                text: t.text,
                cache_control: cache(t.cache_control),
            }]
        }
        "image" => {
            let m: MediaIn = b.fields(at)?;
            vec![PartOut::ImageUrl {
                image_url: UrlOut {
                    url: source_url(&m.source, at, "image")?,
                },
                cache_control: cache(m.cache_control),
            }]
        }
        "document" => document(b, at)?,
        "tool_use" | "thinking" | "redacted_thinking" | "tool_result" => {
            return Err(GatewayError::invalid(format!(
                "{at}: {kind} blocks are not allowed in {role} messages"
            )))
        }
        other => return Err(unsupported(at, other)),
    })
}

fn unsupported(at: &dyn Display, kind: &str) -> GatewayError {
    GatewayError::invalid(format!(
        "{at}: content blocks of type {kind:?} are not supported on this model"
    ))
}

/// An image's URL: a `data:` URL for base64 data, the URL itself for a `url` source.
fn source_url<'a>(
    source: &SourceIn<'a>,
    at: &dyn Display,
    what: &str,
) -> Result<Cow<'a, str>, GatewayError> {
    let missing = |field: &str| {
        GatewayError::invalid(format!(
            "{at}.source: a {} source needs {field}",
            &*source.kind
        ))
    };
    match &*source.kind {
        "base64" => {
            let media_type = source
                .media_type
                .as_deref()
                .ok_or_else(|| missing("media_type"))?;
            let data = source.data.as_deref().ok_or_else(|| missing("data"))?;
            Ok(Cow::Owned(format!("data:{media_type};base64,{data}")))
        }
        "url" => source
            .url
            .as_ref()
            .map(|u| u.0.clone())
            .ok_or_else(|| missing("url")),
        other => Err(GatewayError::invalid(format!(
            "{at}.source: {what} sources of type {other:?} are not supported on this model"
        ))),
    }
}

/// A `document` block: a PDF (base64 or URL) becomes a `file` part, plain text a text part,
/// a `content` source its own text and image blocks.
fn document<'a>(b: Block<'a>, at: &dyn Display) -> Result<Vec<PartOut<'a>>, GatewayError> {
    let m: MediaIn<'a> = b.fields(at)?;
    let cache_control = cache(m.cache_control);
    let s = &m.source;
    match &*s.kind {
        "base64" | "url" => Ok(vec![PartOut::File {
            file: FileOut {
                file_data: source_url(s, at, "document")?,
                filename: None,
            },
            cache_control,
        }]),
        "text" => {
            let data = s.data.as_ref().ok_or_else(|| {
                GatewayError::invalid(format!("{at}.source: a text source needs data"))
            })?;
            Ok(vec![PartOut::Text {
                text: data.0.clone().into(),
                cache_control,
            }])
        }
        "content" => {
            let inner = s.content.ok_or_else(|| {
                GatewayError::invalid(format!("{at}.source: a content source needs content"))
            })?;
            let source = At::Field(at, "source");
            let source_content = source.field("content");
            let list = match blocks(inner, &source_content)? {
                StringOrList::Text(t) => {
                    return Ok(vec![PartOut::Text {
                        text: t,
                        cache_control,
                    }])
                }
                StringOrList::List(list) => list,
            };
            let mut parts = Vec::with_capacity(list.len());
            for (k, b) in list.into_iter().enumerate() {
                let at = At::Index(&source_content, k);
                let kind = b.kind(&at)?;
                match &*kind {
                    "text" | "image" => parts.extend(user_part(b, &kind, &at, "document")?),
                    other => return Err(unsupported(&at, other)),
                }
            }
            Ok(parts)
        }
        other => Err(GatewayError::invalid(format!(
            "{at}.source: document sources of type {other:?} are not supported on this model"
        ))),
    }
}

/// A `tool_result` block → a `tool` message. Its text blocks are joined by newlines; images
/// and documents in it are dropped (an OpenAI tool message holds text only).
fn tool_result<'a>(
    b: Block<'a>,
    at: &dyn Display,
    answered: &[Cow<'a, str>],
) -> Result<MessageOut<'a>, GatewayError> {
    let r: ToolResultIn<'a> = b.fields(at)?;
    if !answered.iter().any(|id| *id == *r.tool_use_id) {
        return Err(GatewayError::invalid(format!(
            "{at}: tool_result for tool_use_id {:?} answers no tool_use block of the previous assistant message",
            &*r.tool_use_id
        )));
    }
    let content_at = At::Field(at, "content");
    let mut text: Cow<'a, str> = match r.content.filter(|c| c.get() != "null") {
        None => Cow::Borrowed(""),
        Some(c) => match blocks(c, &content_at)? {
            StringOrList::Text(t) => t.into_cow(&content_at)?,
            StringOrList::List(list) => {
                let mut texts: Vec<Cow<'a, str>> = Vec::with_capacity(list.len());
                for (k, b) in list.into_iter().enumerate() {
                    let at = At::Index(&content_at, k);
                    let kind = b.kind(&at)?;
                    match &*kind {
                        "text" => texts.push(b.fields::<TextIn>(&at)?.text.into_cow(&at)?),
                        "image" | "document" => {}
                        other => return Err(unsupported(&at, other)),
                    }
                }
                match texts.len() {
                    1 => texts.swap_remove(0),
                    _ => Cow::Owned(texts.join("\n")),
                }
            }
        },
    };
    if r.is_error == Some(true) {
        text = Cow::Owned(format!("Error: {text}"));
    }
    // A cache breakpoint on the result stays one, on a text part (OpenRouter's convention).
    let content = match cache(r.cache_control) {
        None => ContentOut::Text(text.into()),
        Some(cc) => ContentOut::Parts(vec![PartOut::Text {
            text: text.into(),
            cache_control: Some(cc),
        }]),
    };
    Ok(MessageOut {
        tool_call_id: Some(r.tool_use_id.0),
        ..MessageOut::plain("tool", Some(content))
    })
}

fn assistant_message<'a>(
    i: usize,
    content: Blocks<'a>,
    calls: &mut Vec<Cow<'a, str>>,
    out: &mut Vec<MessageOut<'a>>,
) -> Result<(), GatewayError> {
    let list = match content {
        StringOrList::Text(t) => {
            out.push(MessageOut::plain("assistant", Some(ContentOut::Text(t))));
            return Ok(());
        }
        StringOrList::List(list) => list,
    };
    let mut parts = Vec::new();
    let mut tool_calls = Vec::new();
    let message = At::Index(&"messages", i);
    let content_at = message.field("content");
    for (j, b) in list.into_iter().enumerate() {
        let at = content_at.index(j);
        let kind = b.kind(&at)?;
        match &*kind {
            "text" => {
                let t: TextIn = b.fields(&at)?;
                parts.push((t.text, cache(t.cache_control)));
            }
            "tool_use" => {
                let u: ToolUseIn<'a> = b.fields(&at)?;
                let arguments = match u.input.filter(|v| v.get() != "null") {
                    None => "{}".to_owned(),
                    Some(v) if v.get().starts_with('{') => compact(v.get()),
                    Some(_) => {
                        return Err(GatewayError::invalid(format!(
                            "{at}.input: expected an object"
                        )))
                    }
                };
                calls.push(u.id.0.clone());
                tool_calls.push(ToolCallOut {
                    id: u.id.0,
                    kind: "function",
                    function: FunctionCallOut {
                        name: u.name.0,
                        arguments: Cow::Owned(arguments),
                    },
                });
            }
            // Gemini's thought signatures travel in the tool-call ids; other upstreams take
            // no thinking back.
            "thinking" | "redacted_thinking" => {}
            "image" | "document" | "tool_result" => {
                return Err(GatewayError::invalid(format!(
                    "{at}: {} blocks are not allowed in assistant messages",
                    &*kind
                )))
            }
            other => return Err(unsupported(&at, other)),
        }
    }
    let content = match parts.len() {
        0 => None,
        // One plain text block is plain content: every OpenAI-compatible server reads that.
        1 if parts[0].1.is_none() => parts.pop().map(|(t, _)| ContentOut::Text(t)),
        _ => Some(ContentOut::Parts(
            parts
                .into_iter()
                .map(|(text, cache_control)| PartOut::Text {
                    text,
                    cache_control,
                })
                .collect(),
        )),
    };
    if content.is_none() && tool_calls.is_empty() {
        // Only thinking: nothing an OpenAI upstream can take.
        return Ok(());
    }
    out.push(MessageOut {
        tool_calls,
        ..MessageOut::plain("assistant", content)
    });
    Ok(())
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
    input_schema: Option<&'a RawValue>,
}

/// Custom tools as OpenAI function tools (and their names); Anthropic's server tools
/// (`web_search_…`, `bash_…`, `text_editor_…`, …: any other `type`) are dropped.
fn tools(raw: &RawValue) -> Result<(Vec<ToolOut<'_>>, Vec<Cow<'_, str>>), GatewayError> {
    let list = items::<ToolIn>(raw)
        .map_err(|_| GatewayError::invalid("invalid value for tools: expected an array"))?;
    let mut tools = Vec::with_capacity(list.len());
    let mut names = Vec::with_capacity(list.len());
    for (i, t) in list {
        let t = t.map_err(|e| GatewayError::invalid(format!("tools[{i}]: {e}")))?;
        if t.kind.as_deref().is_some_and(|k| k != "custom") {
            continue;
        }
        let name = t
            .name
            .ok_or_else(|| GatewayError::invalid(format!("tools[{i}]: missing field `name`")))?;
        let parameters = t
            .input_schema
            .filter(|s| s.get().starts_with('{'))
            .ok_or_else(|| {
                GatewayError::invalid(format!("tools[{i}].input_schema: expected an object"))
            })?;
        names.push(name.0.clone());
        tools.push(ToolOut {
            kind: "function",
            function: FunctionDeclOut {
                name: name.0,
                description: t.description.map(|d| d.0),
                parameters: Some(Cow::Borrowed(parameters)),
                strict: None,
            },
        });
    }
    Ok((tools, names))
}

#[derive(Deserialize)]
struct ToolChoiceIn<'a> {
    #[serde(rename = "type", borrow)]
    kind: Str<'a>,
    #[serde(borrow, default)]
    name: Option<Str<'a>>,
    #[serde(default)]
    disable_parallel_tool_use: Option<bool>,
}

type ToolChoice<'a> = (Option<ToolChoiceOut<'a>>, Option<bool>);

/// `tool_choice` and `parallel_tool_calls`. A choice naming a tool that is not a custom tool
/// (a dropped server tool) is dropped with it.
fn tool_choice<'a>(
    raw: &'a RawValue,
    names: &[Cow<'a, str>],
) -> Result<ToolChoice<'a>, GatewayError> {
    let c: ToolChoiceIn = serde_json::from_str(raw.get()).map_err(|_| {
        GatewayError::invalid(
            "invalid value for tool_choice: expected {\"type\": \"auto\" | \"any\" | \"tool\" | \"none\"}",
        )
    })?;
    let parallel = (c.disable_parallel_tool_use == Some(true)).then_some(false);
    let choice = match &*c.kind {
        "auto" => ToolChoiceOut::Mode("auto"),
        "any" => ToolChoiceOut::Mode("required"),
        "none" => ToolChoiceOut::Mode("none"),
        "tool" => {
            let name = c.name.ok_or_else(|| {
                GatewayError::invalid("tool_choice: a choice of type \"tool\" needs a name")
            })?;
            if !names.iter().any(|n| *n == *name) {
                return Ok((None, parallel));
            }
            ToolChoiceOut::function(name.0)
        }
        other => {
            return Err(GatewayError::invalid(format!(
                "invalid value for tool_choice.type: {other:?} (expected auto, any, tool or none)"
            )))
        }
    };
    Ok((Some(choice), parallel))
}

// ----- thinking ------------------------------------------------------------------------------

#[derive(Deserialize)]
struct ThinkingIn<'a> {
    #[serde(rename = "type", borrow)]
    kind: Str<'a>,
    #[serde(default)]
    budget_tokens: Option<u64>,
    #[serde(borrow, default)]
    display: Option<Str<'a>>,
}

#[derive(Deserialize)]
struct OutputConfigIn<'a> {
    #[serde(borrow, default)]
    effort: Option<Str<'a>>,
}

/// `thinking` and `output_config.effort` → `reasoning` and `reasoning_effort`.
fn thinking(
    thinking: Option<&RawValue>,
    output_config: Option<&RawValue>,
) -> Result<(Option<ReasoningOut>, Option<&'static str>), GatewayError> {
    let effort = match output_config {
        None => None,
        Some(raw) => {
            let c: OutputConfigIn = typed(raw, "output_config")?;
            match c.effort.as_deref() {
                None => None,
                Some("low") => Some("low"),
                Some("medium") => Some("medium"),
                Some("high") => Some("high"),
                Some("xhigh" | "max") => Some("xhigh"),
                Some(other) => {
                    return Err(GatewayError::invalid(format!(
                        "invalid value for output_config.effort: {other:?} (expected low, medium, high, xhigh or max)"
                    )))
                }
            }
        }
    };
    let Some(raw) = thinking else {
        return Ok((None, effort));
    };
    let t: ThinkingIn = typed(raw, "thinking")?;
    let mut reasoning = ReasoningOut::default();
    let mut reasoning_effort = None;
    match &*t.kind {
        "enabled" => {
            let budget = t.budget_tokens.ok_or_else(|| {
                GatewayError::invalid("thinking: type \"enabled\" needs budget_tokens")
            })?;
            reasoning.max_tokens = Some(budget);
        }
        "adaptive" => match effort {
            Some(e) => reasoning_effort = Some(e),
            None => reasoning.enabled = Some(true),
        },
        "disabled" => reasoning_effort = Some("none"),
        other => {
            return Err(GatewayError::invalid(format!(
            "invalid value for thinking.type: {other:?} (expected enabled, adaptive or disabled)"
        )))
        }
    }
    match t.display.as_deref() {
        None | Some("summarized") => {}
        Some("omitted") => reasoning.exclude = Some(true),
        Some(other) => {
            return Err(GatewayError::invalid(format!(
                "invalid value for thinking.display: {other:?} (expected summarized or omitted)"
            )))
        }
    }
    let reasoning = (reasoning != ReasoningOut::default()).then_some(reasoning);
    Ok((reasoning, reasoning_effort))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{Operation, RawRequest};
    use serde_json::{json, Value};

    fn chat(req: Value) -> Value {
        let bytes = to_chat(&serde_json::to_vec(&req).unwrap()).unwrap();
        serde_json::from_slice(&bytes).unwrap()
    }

    fn err(req: Value) -> String {
        to_chat(&serde_json::to_vec(&req).unwrap())
            .unwrap_err()
            .to_string()
    }

    fn with(extra: Value) -> Value {
        let mut req = json!({
            "model": "google/gemini-test",
            "max_tokens": 100,
            "messages": [{"role": "user", "content": "hi"}]
        });
        for (k, v) in extra.as_object().unwrap() {
            req[k] = v.clone();
        }
        req
    }

    /// The messages of a conversation's chat body.
    fn messages(msgs: Value) -> Value {
        chat(with(json!({ "messages": msgs })))["messages"].clone()
    }

    #[test]
    fn a_system_message_in_the_conversation_is_system_text_where_it_stands() {
        let got = messages(json!([
            {"role": "user", "content": "hi"},
            {"role": "system", "content": [{"type": "text", "text": "context", "cache_control": {"type": "ephemeral"}}]},
            {"role": "assistant", "content": "hello"},
            {"role": "system", "content": "more"}
        ]));
        assert_eq!(
            got,
            json!([
                {"role": "user", "content": "hi"},
                {"role": "system", "content": [{"type": "text", "text": "context", "cache_control": {"type": "ephemeral"}}]},
                {"role": "assistant", "content": "hello"},
                {"role": "system", "content": "more"}
            ])
        );
    }

    #[test]
    fn a_plain_request_is_a_plain_chat_body_with_its_numbers_byte_for_byte() {
        let body = br#"{"model":"google/gemini-test","max_tokens":1024,"messages":[{"role":"user","content":"Hello"}],"temperature":0.70,"top_p":1e-1,"top_k":40,"stop_sequences":["END", "STOP"],"metadata":{"user_id":"u1"},"service_tier":"auto","container":"c1","context_management":{"edits":[]},"mcp_servers":[],"anthropic_version":"2023-06-01","betas":["x"],"some_future_field":1}"#;
        let out = to_chat(body).unwrap();
        assert_eq!(
            std::str::from_utf8(&out).unwrap(),
            r#"{"model":"google/gemini-test","messages":[{"role":"user","content":"Hello"}],"max_tokens":1024,"stop":["END", "STOP"],"temperature":0.70,"top_p":1e-1,"top_k":40}"#
        );
        let raw = RawRequest::parse(&out, Operation::Chat).unwrap();
        assert_eq!(raw.model, "google/gemini-test");
        assert!(!raw.stream);
    }

    #[test]
    fn text_is_copied_as_written_escapes_and_all() {
        // The client's escapes are kept (`\u00e9`, `\/`), not unescaped and written again.
        let body = br#"{"model":"m","max_tokens":8,"system":"caf\u00e9","messages":[{"role":"user","content":[{"type":"text","text":"a \"q\"\n\/b \u00e9"}]},{"role":"assistant","content":"x\ty"}]}"#;
        let out = String::from_utf8(to_chat(body).unwrap()).unwrap();
        assert!(
            out.contains(r#"{"role":"system","content":"caf\u00e9"}"#),
            "{out}"
        );
        assert!(
            out.contains(r#"{"type":"text","text":"a \"q\"\n\/b \u00e9"}"#),
            "{out}"
        );
        assert!(
            out.contains(r#"{"role":"assistant","content":"x\ty"}"#),
            "{out}"
        );
        // It reads as the same text.
        let v: Value = serde_json::from_str(&out).unwrap();
        assert_eq!(v["messages"][1]["content"][0]["text"], "a \"q\"\n/b \u{e9}");

        for text in [json!(7), json!(null), json!(["a"])] {
            let e = err(with(
                json!({"messages": [{"role": "user", "content": [{"type": "text", "text": text}]}]}),
            ));
            assert!(e.contains("messages[0].content[0]"), "{e}");
        }
    }

    #[test]
    fn streaming_asks_for_the_usage() {
        let out = chat(with(json!({"stream": true})));
        assert_eq!(out["stream"], true);
        assert_eq!(out["stream_options"], json!({"include_usage": true}));
        let out = chat(with(json!({"stream": false})));
        assert!(out.get("stream").is_none() && out.get("stream_options").is_none());
        let bytes = to_chat(&serde_json::to_vec(&with(json!({"stream": true}))).unwrap()).unwrap();
        assert!(RawRequest::parse(&bytes, Operation::Chat).unwrap().stream);
    }

    #[test]
    fn the_system_prompt_leads_with_its_cache_breakpoints() {
        let out = chat(with(json!({"system": "Be brief."})));
        assert_eq!(
            out["messages"][0],
            json!({"role": "system", "content": "Be brief."})
        );
        assert_eq!(out["messages"][1]["role"], "user");
        let out = chat(with(json!({"system": [
            {"type": "text", "text": "You are Claude Code."},
            {"type": "text", "text": "Long rules.", "cache_control": {"type": "ephemeral", "ttl": "1h"}}
        ]})));
        assert_eq!(
            out["messages"][0],
            json!({"role": "system", "content": [
                {"type": "text", "text": "You are Claude Code."},
                {"type": "text", "text": "Long rules.", "cache_control": {"type": "ephemeral", "ttl": "1h"}}
            ]})
        );
        for empty in [json!(""), json!([])] {
            let out = chat(with(json!({ "system": empty })));
            assert_eq!(out["messages"][0]["role"], "user", "{empty}");
        }
        assert!(
            err(with(json!({"system": [{"type": "image", "source": {}}]})))
                .starts_with("system[0]: a system prompt holds text blocks only")
        );
        assert!(err(with(json!({"system": 7}))).starts_with("invalid value for system"));
    }

    #[test]
    fn user_blocks_become_parts() {
        let got = messages(json!([{"role": "user", "content": [
            {"type": "text", "text": "Look:", "cache_control": {"type": "ephemeral", "ttl": "5m"}},
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}},
            {"type": "image", "source": {"type": "url", "url": "https://example.com/cat.jpg"}},
            {"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": "JVBERi0="}, "title": "t", "citations": {"enabled": true}},
            {"type": "document", "source": {"type": "url", "url": "https://example.com/a.pdf"}},
            {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "plain words"}, "context": "c"},
            {"type": "document", "source": {"type": "content", "content": [
                {"type": "text", "text": "chunk one"},
                {"type": "image", "source": {"type": "url", "url": "https://example.com/d.png"}}
            ]}, "cache_control": {"type": "ephemeral"}}
        ]}]));
        assert_eq!(
            got,
            json!([{"role": "user", "content": [
                {"type": "text", "text": "Look:", "cache_control": {"type": "ephemeral", "ttl": "5m"}},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
                {"type": "image_url", "image_url": {"url": "https://example.com/cat.jpg"}},
                {"type": "file", "file": {"file_data": "data:application/pdf;base64,JVBERi0="}},
                {"type": "file", "file": {"file_data": "https://example.com/a.pdf"}},
                {"type": "text", "text": "plain words"},
                {"type": "text", "text": "chunk one"},
                {"type": "image_url", "image_url": {"url": "https://example.com/d.png"}}
            ]}])
        );
    }

    /// An assistant turn with thinking and two calls, answered by the next user turn.
    fn tool_history(results: Value) -> Value {
        json!([
            {"role": "user", "content": "What is the weather in Paris and Rome?"},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "I should call the tool.", "signature": "c2ln"},
                {"type": "redacted_thinking", "data": "abc"},
                {"type": "text", "text": "Checking."},
                {"type": "tool_use", "id": "call_Ab3x_0.CiIB-_9a8w", "name": "weather", "input": {"city": "Paris", "units": {"t": "C"}}},
                {"type": "tool_use", "id": "toolu_2", "name": "weather", "input": {}}
            ]},
            {"role": "user", "content": results}
        ])
    }

    #[test]
    fn tool_use_and_tool_result_become_calls_and_tool_messages() {
        let got = messages(tool_history(json!([
            {"type": "text", "text": "Both, please."},
            {"type": "tool_result", "tool_use_id": "call_Ab3x_0.CiIB-_9a8w", "content": "18C"},
            {"type": "tool_result", "tool_use_id": "toolu_2", "is_error": true, "content": [
                {"type": "text", "text": "timeout"},
                {"type": "image", "source": {"type": "url", "url": "https://example.com/x.png"}},
                {"type": "text", "text": "retry later"}
            ]}
        ])));
        assert_eq!(
            got,
            json!([
                {"role": "user", "content": "What is the weather in Paris and Rome?"},
                {"role": "assistant", "content": "Checking.", "tool_calls": [
                    {"id": "call_Ab3x_0.CiIB-_9a8w", "type": "function", "function": {"name": "weather", "arguments": "{\"city\":\"Paris\",\"units\":{\"t\":\"C\"}}"}},
                    {"id": "toolu_2", "type": "function", "function": {"name": "weather", "arguments": "{}"}}
                ]},
                {"role": "tool", "tool_call_id": "call_Ab3x_0.CiIB-_9a8w", "content": "18C"},
                {"role": "tool", "tool_call_id": "toolu_2", "content": "Error: timeout\nretry later"},
                {"role": "user", "content": [{"type": "text", "text": "Both, please."}]}
            ])
        );
    }

    #[test]
    fn tool_arguments_keep_the_clients_key_order_and_strings() {
        let body = br#"{"model":"m","messages":[{"role":"user","content":"x"},{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"f","input":{ "z" : 1, "a" : "b  c\" }" }}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1"}]}]}"#;
        let out: Value = serde_json::from_slice(&to_chat(body).unwrap()).unwrap();
        assert_eq!(
            out["messages"][1]["tool_calls"][0]["function"]["arguments"],
            r#"{"z":1,"a":"b  c\" }"}"#
        );
        assert_eq!(
            out["messages"][2],
            json!({"role": "tool", "tool_call_id": "t1", "content": ""}),
            "a result without content is empty text"
        );
    }

    #[test]
    fn assistant_turns_keep_text_and_lose_thinking() {
        let got = messages(json!([
            {"role": "user", "content": "a"},
            {"role": "assistant", "content": [{"type": "thinking", "thinking": "t", "signature": "s"}]},
            {"role": "user", "content": "b"},
            {"role": "assistant", "content": [
                {"type": "text", "text": "one"},
                {"type": "text", "text": "two", "cache_control": {"type": "ephemeral"}}
            ]},
            {"role": "assistant", "content": "prefill"}
        ]));
        assert_eq!(
            got,
            json!([
                {"role": "user", "content": "a"},
                {"role": "user", "content": "b"},
                {"role": "assistant", "content": [
                    {"type": "text", "text": "one"},
                    {"type": "text", "text": "two", "cache_control": {"type": "ephemeral"}}
                ]},
                {"role": "assistant", "content": "prefill"}
            ]),
            "a thinking-only turn is left out"
        );
    }

    #[test]
    fn a_cached_tool_result_is_one_text_part_with_its_breakpoint() {
        let got = messages(tool_history(json!([
            {"type": "tool_result", "tool_use_id": "toolu_2", "content": [{"type": "text", "text": "ok"}], "cache_control": {"type": "ephemeral", "ttl": "1h"}},
            {"type": "tool_result", "tool_use_id": "call_Ab3x_0.CiIB-_9a8w", "content": "x"}
        ])));
        assert_eq!(
            got[2],
            json!({"role": "tool", "tool_call_id": "toolu_2", "content": [
                {"type": "text", "text": "ok", "cache_control": {"type": "ephemeral", "ttl": "1h"}}
            ]})
        );
        assert_eq!(got.as_array().unwrap().len(), 4, "no empty user message");
    }

    #[test]
    fn a_tool_result_must_answer_the_previous_assistant_turn() {
        let e = err(with(json!({"messages": tool_history(json!([
            {"type": "text", "text": "x"},
            {"type": "tool_result", "tool_use_id": "toolu_9", "content": "r"}
        ]))})));
        assert!(
            e.starts_with("messages[2].content[1]: tool_result for tool_use_id \"toolu_9\""),
            "{e}"
        );
        let e = err(with(json!({"messages": [
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": "r"}]}
        ]})));
        assert!(e.starts_with("messages[0].content[0]: tool_result"), "{e}");
        // Two turns back does not count.
        let mut history = tool_history(json!("fine"));
        history.as_array_mut().unwrap().extend([
            json!({"role": "assistant", "content": "ok"}),
            json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_2", "content": "r"}]}),
        ]);
        let e = err(with(json!({ "messages": history })));
        assert!(e.starts_with("messages[4].content[0]: tool_result"), "{e}");
    }

    #[test]
    fn blocks_without_a_chat_equivalent_are_refused_by_type() {
        for (role, block) in [
            (
                "user",
                json!({"type": "search_result", "source": "https://x", "title": "t", "content": []}),
            ),
            ("user", json!({"type": "container_upload", "file_id": "f"})),
            (
                "assistant",
                json!({"type": "server_tool_use", "id": "s", "name": "web_search", "input": {}}),
            ),
            (
                "assistant",
                json!({"type": "web_search_tool_result", "tool_use_id": "s", "content": []}),
            ),
        ] {
            let kind = block["type"].as_str().unwrap().to_owned();
            let e = err(with(json!({"messages": [
                {"role": "user", "content": "q"},
                {"role": role, "content": [block]}
            ]})));
            assert_eq!(
                e,
                format!("messages[1].content[0]: content blocks of type {kind:?} are not supported on this model")
            );
        }
        let e = err(with(json!({"messages": [{"role": "user", "content": [
            {"type": "tool_use", "id": "t", "name": "f", "input": {}}
        ]}]})));
        assert_eq!(
            e,
            "messages[0].content[0]: tool_use blocks are not allowed in user messages"
        );
        let e = err(with(json!({"messages": [{"role": "assistant", "content": [
            {"type": "image", "source": {"type": "url", "url": "https://a/b.png"}}
        ]}]})));
        assert_eq!(
            e,
            "messages[0].content[0]: image blocks are not allowed in assistant messages"
        );
        let e = err(with(json!({"messages": [{"role": "user", "content": [
            {"type": "image", "source": {"type": "file", "file_id": "file_1"}}
        ]}]})));
        assert!(
            e.contains("image sources of type \"file\" are not supported"),
            "{e}"
        );
        let e = err(with(json!({"messages": [{"role": "user", "content": [
            {"type": "image", "source": {"type": "base64", "data": "AA=="}}
        ]}]})));
        assert_eq!(
            e,
            "messages[0].content[0].source: a base64 source needs media_type"
        );
        let e = err(with(
            json!({"messages": [{"role": "user", "content": [{"text": "no type"}]}]}),
        ));
        assert!(e.contains("needs a string type"), "{e}");
    }

    #[test]
    fn custom_tools_become_functions_and_server_tools_are_dropped() {
        let body = br#"{"model":"m","messages":[{"role":"user","content":"x"}],"tools":[
            {"name":"get_weather","description":"Weather.","input_schema":{"type": "object", "properties": {"z": {"type":"number","minimum":1.50}, "a": {}}},"cache_control":{"type":"ephemeral"},"defer_loading":true,"input_examples":[{}],"strict":true},
            {"type":"custom","name":"no_description","input_schema":{}},
            {"type":"web_search_20250305","name":"web_search","max_uses":5},
            {"type":"bash_20250124","name":"bash"},
            {"type":"text_editor_20250728","name":"str_replace_based_edit_tool"},
            {"type":"code_execution_20250825","name":"code_execution"},
            {"type":"computer_20250124","name":"computer","display_width_px":1024,"display_height_px":768},
            {"type":"memory_20250818","name":"memory"},
            {"type":"tool_search_tool_regex_20251119","name":"tool_search_tool_regex"}
        ],"tool_choice":{"type":"any","disable_parallel_tool_use":true}}"#;
        let out = to_chat(body).unwrap();
        let text = std::str::from_utf8(&out).unwrap();
        assert!(
            text.contains(r#""parameters":{"type": "object", "properties": {"z": {"type":"number","minimum":1.50}, "a": {}}}"#),
            "the schema byte for byte: {text}"
        );
        let v: Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(
            v["tools"],
            json!([
                {"type": "function", "function": {"name": "get_weather", "description": "Weather.",
                    "parameters": {"type": "object", "properties": {"z": {"type": "number", "minimum": 1.5}, "a": {}}}}},
                {"type": "function", "function": {"name": "no_description", "parameters": {}}}
            ])
        );
        assert_eq!(v["tool_choice"], "required");
        assert_eq!(v["parallel_tool_calls"], false);
    }

    #[test]
    fn tool_choice_maps_each_type() {
        let tools = json!([{"name": "f", "input_schema": {"type": "object"}}, {"type": "web_search_20250305", "name": "web_search"}]);
        for (choice, want, parallel) in [
            (json!({"type": "auto"}), json!("auto"), Value::Null),
            (json!({"type": "any"}), json!("required"), Value::Null),
            (json!({"type": "none"}), json!("none"), Value::Null),
            (
                json!({"type": "tool", "name": "f", "disable_parallel_tool_use": true}),
                json!({"type": "function", "function": {"name": "f"}}),
                json!(false),
            ),
            (
                json!({"type": "auto", "disable_parallel_tool_use": false}),
                json!("auto"),
                Value::Null,
            ),
            (
                json!({"type": "tool", "name": "web_search"}),
                Value::Null,
                Value::Null,
            ),
        ] {
            let out = chat(with(json!({"tools": tools, "tool_choice": choice})));
            assert_eq!(out["tool_choice"], want, "{choice}");
            assert_eq!(out["parallel_tool_calls"], parallel, "{choice}");
        }
        let out = chat(with(json!({
            "tools": [{"type": "web_search_20250305", "name": "web_search"}],
            "tool_choice": {"type": "any"}
        })));
        assert!(
            out.get("tools").is_none() && out.get("tool_choice").is_none(),
            "no tool left, no choice: {out}"
        );
        assert!(err(with(
            json!({"tools": tools, "tool_choice": {"type": "sometimes"}})
        ))
        .starts_with("invalid value for tool_choice.type"));
        assert!(err(with(
            json!({"tools": tools, "tool_choice": {"type": "tool"}})
        ))
        .contains("needs a name"));
        assert_eq!(
            err(with(json!({"tools": [{"name": "f"}]}))),
            "tools[0].input_schema: expected an object"
        );
        assert_eq!(
            err(with(json!({"tools": [{"input_schema": {}}]}))),
            "tools[0]: missing field `name`"
        );
    }

    #[test]
    fn thinking_maps_to_reasoning_controls() {
        for (extra, reasoning, effort) in [
            (
                json!({"thinking": {"type": "enabled", "budget_tokens": 2048}}),
                json!({"max_tokens": 2048}),
                Value::Null,
            ),
            (
                json!({"thinking": {"type": "enabled", "budget_tokens": 2048, "display": "omitted"}, "output_config": {"effort": "low"}}),
                json!({"max_tokens": 2048, "exclude": true}),
                Value::Null,
            ),
            (
                json!({"thinking": {"type": "adaptive"}}),
                json!({"enabled": true}),
                Value::Null,
            ),
            (
                json!({"thinking": {"type": "adaptive", "display": "omitted"}}),
                json!({"enabled": true, "exclude": true}),
                Value::Null,
            ),
            (
                json!({"thinking": {"type": "adaptive", "display": "summarized"}, "output_config": {"effort": "medium", "format": {"type": "json_schema"}}}),
                Value::Null,
                json!("medium"),
            ),
            (
                json!({"thinking": {"type": "adaptive", "display": "omitted"}, "output_config": {"effort": "max"}}),
                json!({"exclude": true}),
                json!("xhigh"),
            ),
            (
                json!({"thinking": {"type": "adaptive"}, "output_config": {"effort": "xhigh"}}),
                Value::Null,
                json!("xhigh"),
            ),
            (
                json!({"output_config": {"effort": "high"}}),
                Value::Null,
                json!("high"),
            ),
            (
                json!({"thinking": {"type": "disabled"}, "output_config": {"effort": "high"}}),
                Value::Null,
                json!("none"),
            ),
            (json!({"output_config": {}}), Value::Null, Value::Null),
        ] {
            let out = chat(with(extra.clone()));
            assert_eq!(out["reasoning"], reasoning, "{extra}");
            assert_eq!(out["reasoning_effort"], effort, "{extra}");
            assert!(out.get("output_config").is_none() && out.get("thinking").is_none());
        }
        let bytes = to_chat(
            &serde_json::to_vec(&with(
                json!({"thinking": {"type": "adaptive", "display": "omitted"}}),
            ))
            .unwrap(),
        )
        .unwrap();
        assert!(
            RawRequest::parse(&bytes, Operation::Chat)
                .unwrap()
                .excludes_reasoning(),
            "the answer leaves the reasoning out"
        );
        for (extra, message) in [
            (
                json!({"thinking": {"type": "enabled"}}),
                "needs budget_tokens",
            ),
            (
                json!({"thinking": {"type": "on"}}),
                "invalid value for thinking.type",
            ),
            (
                json!({"thinking": {"type": "adaptive", "display": "full"}}),
                "invalid value for thinking.display",
            ),
            (
                json!({"output_config": {"effort": "extreme"}}),
                "invalid value for output_config.effort",
            ),
            (
                json!({"thinking": {"type": "enabled", "budget_tokens": -1}}),
                "invalid value for thinking",
            ),
        ] {
            let e = err(with(extra.clone()));
            assert!(e.contains(message), "{extra}: {e}");
        }
    }

    #[test]
    fn malformed_requests_are_clear_400s() {
        let e = to_chat(b"{").unwrap_err().to_string();
        assert!(e.starts_with("request body is not valid JSON"), "{e}");
        assert!(to_chat(b"[1]")
            .unwrap_err()
            .to_string()
            .contains("not valid JSON"));
        let e = to_chat(br#"{"model":"m","model":"n","messages":[]}"#)
            .unwrap_err()
            .to_string();
        assert!(e.contains("duplicate"), "{e}");
        for (req, message) in [
            (
                json!({"messages": [{"role": "user", "content": "x"}]}),
                "missing required field: model",
            ),
            (
                json!({"model": 7, "messages": [{"role": "user", "content": "x"}]}),
                "invalid value for model",
            ),
            (json!({"model": "m"}), "missing required field: messages"),
            (
                json!({"model": "m", "messages": []}),
                "messages must be a non-empty array",
            ),
            (
                json!({"model": "m", "messages": {}}),
                "messages must be a non-empty array",
            ),
            (
                json!({"model": "m", "messages": [{"role": "tool", "content": "x"}]}),
                "messages[0].role: expected \"user\", \"assistant\" or \"system\", got \"tool\"",
            ),
            (
                json!({"model": "m", "messages": [{"role": "system", "content": [{"type": "image"}]}]}),
                "messages[0].content[0]: a system prompt holds text blocks only, not \"image\"",
            ),
            (
                json!({"model": "m", "messages": [{"content": "x"}]}),
                "messages[0]: missing field `role`",
            ),
            (
                json!({"model": "m", "messages": [{"role": "user"}]}),
                "messages[0]: missing field `content`",
            ),
            (
                json!({"model": "m", "messages": [{"role": "user", "content": 5}]}),
                "invalid value for messages[0].content",
            ),
            (
                json!({"model": "m", "messages": [{"role": "user", "content": [{"type": "text"}]}]}),
                "messages[0].content[0]: missing field `text`",
            ),
            (
                with(json!({"max_tokens": "many"})),
                "invalid value for max_tokens: expected an integer",
            ),
            (
                with(json!({"max_tokens": 4_294_967_296_u64})),
                "invalid value for max_tokens",
            ),
            (
                with(json!({"stop_sequences": "END"})),
                "invalid value for stop_sequences: expected an array of strings",
            ),
            (
                with(json!({"temperature": "hot"})),
                "invalid value for temperature",
            ),
            (with(json!({"top_k": -1})), "invalid value for top_k"),
            (with(json!({"stream": "yes"})), "invalid value for stream"),
            (
                with(json!({"tools": {}})),
                "invalid value for tools: expected an array",
            ),
            (
                json!({"model": "m", "messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "f", "input": [1]}]}]}),
                "messages[1].content[0].input: expected an object",
            ),
        ] {
            let e = err(req.clone());
            assert!(e.starts_with(message), "{req}: {e}");
        }
        assert!(
            chat(with(json!({"temperature": null, "metadata": null})))
                .get("temperature")
                .is_none(),
            "null is absent"
        );
    }

    /// What `list` (a `messages` array) becomes, read in one pass (`None`: that read declined
    /// it) or message by message: the chat messages, or the error.
    fn read_both_ways(list: &str) -> (Option<Result<String, String>>, Result<String, String>) {
        let outcome = |out: Vec<MessageOut<'_>>, done: Result<(), GatewayError>| {
            done.map(|()| serde_json::to_string(&out).unwrap())
                .map_err(|e| e.to_string())
        };
        let one_pass = serde_json::from_str::<Vec<MessageIn<Blocks>>>(list)
            .ok()
            .map(|messages| {
                let mut out = Vec::new();
                let done = each_message(messages.into_iter().map(Ok), &mut out);
                outcome(out, done)
            });
        let mut out = Vec::new();
        let done = raw_messages(list, &mut out);
        (one_pass, outcome(out, done))
    }

    /// What the top-level `system` `list` becomes, read in one pass (`None`: declined) or block
    /// by block: the chat messages, or the error.
    fn system_both_ways(list: &str) -> (Option<Result<String, String>>, Result<String, String>) {
        let raw: &RawValue = serde_json::from_str(list).unwrap();
        let outcome = |out: Vec<MessageOut<'_>>, done: Result<(), GatewayError>| {
            done.map(|()| serde_json::to_string(&out).unwrap())
                .map_err(|e| e.to_string())
        };
        let one_pass = system_blocks(raw).map(|blocks| {
            let mut out = Vec::new();
            let done = system_message(blocks, &"system", &mut out);
            outcome(out, done)
        });
        let mut out = Vec::new();
        let done = system_message(raw, &"system", &mut out);
        (one_pass, outcome(out, done))
    }

    mod one_pass {
        use proptest::collection::vec;
        use proptest::prelude::*;
        use serde_json::{json, Value};

        use super::{read_both_ways, system_both_ways};
        use crate::doors::one_pass::text_strategy as text;

        fn text_block() -> impl Strategy<Value = Value> {
            (text(false), any::<bool>()).prop_map(|(t, cached)| {
                let mut b = json!({"type": "text", "text": t});
                if cached {
                    b["cache_control"] = json!({"type": "ephemeral"});
                }
                b
            })
        }

        fn block(plain: bool) -> BoxedStrategy<Value> {
            let id = prop::sample::select(vec!["t1", "t2"]);
            let result = prop_oneof![
                text(false).prop_map(Value::String),
                vec(text_block(), 0..3).prop_map(Value::Array),
            ];
            let good = prop_oneof![
                3 => text_block(),
                1 => Just(json!({"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "aGk="}})),
                1 => Just(json!({"type": "image", "source": {"type": "url", "url": "https://example.com/a.png"}})),
                1 => text(false).prop_map(|t| json!({"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": t}})),
                2 => id.clone().prop_map(|id| json!({"type": "tool_use", "id": id, "name": "f", "input": {"a": [1, "x"]}})),
                2 => (id, result, any::<bool>()).prop_map(|(id, content, is_error)| json!(
                    {"type": "tool_result", "tool_use_id": id, "content": content, "is_error": is_error}
                )),
                1 => Just(json!({"type": "thinking", "thinking": "hm", "signature": "s"})),
                1 => Just(json!({"type": "redacted_thinking", "data": "d"})),
            ];
            if plain {
                return good.boxed();
            }
            prop_oneof![
                6 => good,
                1 => Just(json!({"type": "text"})),
                1 => Just(json!({"type": "text", "text": 5})),
                1 => Just(json!({"type": "text", "text": "x", "id": 5})),
                1 => Just(json!({"type": "search_result", "source": "https://example.com", "title": "t", "content": []})),
                1 => Just(json!({"type": "image", "source": {"type": "file", "file_id": "f"}})),
                1 => Just(json!({"type": "tool_use", "name": "f"})),
                1 => Just(json!({"text": "no type"})),
                1 => Just(json!({"type": 5})),
            ]
            .boxed()
        }

        fn message(plain: bool) -> BoxedStrategy<Value> {
            let roles = if plain {
                vec!["user", "assistant", "system"]
            } else {
                vec!["user", "assistant", "system", "tool"]
            };
            let content = prop_oneof![
                text(plain).prop_map(Value::String),
                vec(block(plain), 0..4).prop_map(Value::Array),
            ];
            let content = if plain {
                content.boxed()
            } else {
                prop_oneof![5 => content, 1 => Just(json!(7)), 1 => Just(json!({"text": "x"}))]
                    .boxed()
            };
            (prop::sample::select(roles), content)
                .prop_map(|(role, content)| json!({"role": role, "content": content}))
                .boxed()
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(1024))]

            /// Whatever the one pass reads, it reads as the reading message by message does,
            /// down to the error.
            #[test]
            fn agrees_with_the_reading_message_by_message(list in vec(message(false), 0..6)) {
                let list = serde_json::to_string(&list).unwrap();
                let (one_pass, by_message) = read_both_ways(&list);
                if let Some(one_pass) = one_pass {
                    prop_assert_eq!(one_pass, by_message);
                }
            }

            /// The top-level `system` likewise: read in one pass as block by block, and in one
            /// pass whenever its blocks are well-formed.
            #[test]
            fn reads_a_system_list_as_block_by_block(
                blocks in vec(block(false), 0..4),
                plain in vec(block(true), 0..4),
            ) {
                let (one_pass, by_block) = system_both_ways(&serde_json::to_string(&blocks).unwrap());
                if let Some(one_pass) = one_pass {
                    prop_assert_eq!(one_pass, by_block);
                }
                let (one_pass, by_block) = system_both_ways(&serde_json::to_string(&plain).unwrap());
                prop_assert_eq!(one_pass, Some(by_block));
            }

            /// And it reads every list of well-formed messages whose string contents have
            /// nothing to escape (text blocks and tool results may have escapes), in any key
            /// order (these are sorted: a block's `type` comes last).
            #[test]
            fn reads_well_formed_messages(list in vec(message(true), 0..6)) {
                let list = serde_json::to_string(&list).unwrap();
                let (one_pass, by_message) = read_both_ways(&list);
                prop_assert_eq!(one_pass, Some(by_message));
            }
        }
    }

    #[test]
    fn a_string_content_with_escapes_is_read_message_by_message() {
        let (one_pass, by_message) = read_both_ways(r#"[{"role": "user", "content": "a\nb"}]"#);
        assert_eq!((one_pass, by_message.is_ok()), (None, true));
        let (one_pass, by_message) = read_both_ways(r#"[{"role": "user", "content": "ab"}]"#);
        assert_eq!(one_pass, Some(by_message));
    }
}
