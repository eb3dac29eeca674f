//! OpenAI chat body → Gemini `GenerateContentRequest` (thinking in `thinking.rs`, the
//! explicit-cache plan in `cache.rs`).
//!
//! Driven by the model's parameter profile (`catalog::Profile`): a field is translated only
//! when the profile forwards it; every other field is accepted and dropped, so a client written
//! for OpenAI or OpenRouter never breaks on a Gemini model (`docs/wire.md#gemini-request-body`:
//! 2.5 and later answer 400 to non-zero penalties, hence profiles without them). What is
//! forwarded is type-checked, and a wrong type is a 400 naming the field.
//!
//! Invariants (`docs/wire.md`: Gemini request body, thinking, context caching, service tiers):
//! - `contents` only has roles `user` and `model`, always set, adjacent same-role turns merged;
//!   system/developer text goes to `systemInstruction`; tool results are `user` turns of
//!   `functionResponse` parts named after the assistant tool call they answer;
//! - a replayed `functionCall` gets back the `thoughtSignature` its tool-call id carries
//!   (scheme in the `gemini` module doc); on Gemini 3, a model turn whose first call carries
//!   none gets Google's placeholder for history from elsewhere (`sign_unsigned_calls`);
//! - `thinkingConfig` has a budget or a level, never both, within the profile's range;
//! - `cachedContent` excludes `systemInstruction`, `tools` and `toolConfig` (they live in the
//!   cache; Google answers 400 otherwise);
//! - Vertex service tiers are headers, never a body field (the caller adds them).
//!
//! The body is built from borrowed structs: strings stay slices of the client's bytes where
//! JSON escaping allows, tool schemas and image data are never parsed into trees.

use std::borrow::Cow;

use bytes::Bytes;
use serde::Serialize;
use serde_json::value::RawValue;

use super::thinking::{thinking_config, ThinkingConfig};
use super::{call_id_signature, Str};
use crate::api::chat::{
    self, MessageIn, NamedFunctionIn, PartIn, ResponseFormatIn, Text, ToolCallIn,
};
use crate::api::{At, GatewayError, RawRequest};
use crate::catalog::{Profile, Thinking};
use crate::providers::common::{forwarded, part_text, stop};

/// A message's content: a string, or parts (the client's wire types are `api::chat`'s).
enum ContentIn<'a> {
    Text(Text<'a>),
    Parts(Vec<PartIn<'a>>),
}

// ---------------------------------------------------------------------------------------------
// What Gemini receives
// ---------------------------------------------------------------------------------------------

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct GenerateContentRequest<'p, 'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    cached_content: Option<&'p str>,
    contents: &'p [Content<'a>],
    #[serde(skip_serializing_if = "Option::is_none")]
    system_instruction: Option<&'p SystemInstruction<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tools: Option<&'p [ToolOut<'a>; 1]>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_config: Option<&'p ToolConfig<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    generation_config: Option<&'p GenerationConfig<'a>>,
}

#[derive(Serialize)]
struct Content<'a> {
    role: &'static str,
    parts: Vec<Part<'a>>,
}

#[derive(Serialize)]
pub(super) struct SystemInstruction<'a> {
    pub parts: Vec<TextPart<'a>>,
}

#[derive(Serialize)]
pub(super) struct TextPart<'a> {
    pub text: Text<'a>,
}

#[derive(Serialize, Default)]
#[serde(rename_all = "camelCase")]
struct Part<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    text: Option<Text<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    inline_data: Option<Media<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    file_data: Option<FileData<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    function_call: Option<FunctionCall<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    function_response: Option<FunctionResponse<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    thought_signature: Option<String>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Media<'a> {
    mime_type: Cow<'a, str>,
    data: Cow<'a, str>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct FileData<'a> {
    mime_type: &'static str,
    file_uri: Cow<'a, str>,
}

#[derive(Serialize)]
struct FunctionCall<'a> {
    name: Cow<'a, str>,
    args: Cow<'a, RawValue>,
}

#[derive(Serialize)]
struct FunctionResponse<'a> {
    name: Cow<'a, str>,
    response: ToolResult<'a>,
}

/// A tool message's content: a JSON object as sent, or text wrapped as `{"result": text}`.
#[derive(Serialize)]
#[serde(untagged)]
enum ToolResult<'a> {
    Object(Cow<'a, RawValue>),
    Text { result: Cow<'a, str> },
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct ToolOut<'a> {
    function_declarations: Vec<FunctionDecl<'a>>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct FunctionDecl<'a> {
    name: Cow<'a, str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    description: Option<Cow<'a, str>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    parameters_json_schema: Option<&'a RawValue>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct ToolConfig<'a> {
    function_calling_config: FunctionCallingConfig<'a>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct FunctionCallingConfig<'a> {
    mode: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    allowed_function_names: Option<[Cow<'a, str>; 1]>,
}

#[derive(Serialize, Default)]
#[serde(rename_all = "camelCase")]
struct GenerationConfig<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    top_p: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    top_k: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_output_tokens: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    stop_sequences: Option<Vec<Cow<'a, str>>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    candidate_count: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    seed: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    frequency_penalty: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    presence_penalty: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    response_mime_type: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    response_json_schema: Option<&'a RawValue>,
    #[serde(skip_serializing_if = "Option::is_none")]
    thinking_config: Option<ThinkingConfig>,
}

impl GenerationConfig<'_> {
    fn is_empty(&self) -> bool {
        let numbers = [
            self.temperature,
            self.top_p,
            self.frequency_penalty,
            self.presence_penalty,
        ];
        let counts = [self.top_k, self.max_output_tokens, self.candidate_count];
        numbers.iter().all(Option::is_none)
            && counts.iter().all(Option::is_none)
            && self.stop_sequences.is_none()
            && self.seed.is_none()
            && self.response_mime_type.is_none()
            && self.thinking_config.is_none()
    }
}

// ---------------------------------------------------------------------------------------------
// Translation
// ---------------------------------------------------------------------------------------------

/// Everything the request turns into, before it is written one way (generate) or another
/// (cache creation).
pub(super) struct Translation<'a> {
    pub system: Option<SystemInstruction<'a>>,
    /// The first system message marks a cache breakpoint (`cache_control`, OpenRouter style):
    /// its TTL, if it named one.
    pub cache_mark: Option<Option<Str<'a>>>,
    contents: Vec<Content<'a>>,
    pub tools: Option<[ToolOut<'a>; 1]>,
    pub tool_config: Option<ToolConfig<'a>>,
    generation_config: Option<GenerationConfig<'a>>,
    pub service_tier: Option<&'static str>,
}

/// The upstream body carrying the whole translation.
pub(super) fn whole_body(t: &Translation<'_>) -> Result<Bytes, GatewayError> {
    to_bytes(&GenerateContentRequest {
        cached_content: None,
        contents: &t.contents,
        system_instruction: t.system.as_ref(),
        tools: t.tools.as_ref(),
        tool_config: t.tool_config.as_ref(),
        generation_config: t.generation_config.as_ref(),
    })
}

/// The prompt alone — contents, system instruction, tools — for a count that takes neither a
/// generation nor a tool config (Vertex `countTokens`).
pub(super) fn prompt_body(t: &Translation<'_>) -> Result<Bytes, GatewayError> {
    to_bytes(&GenerateContentRequest {
        cached_content: None,
        contents: &t.contents,
        system_instruction: t.system.as_ref(),
        tools: t.tools.as_ref(),
        tool_config: None,
        generation_config: None,
    })
}

/// The upstream body without what an explicit cache holds (system instruction, tools, tool
/// config), still without `cachedContent`: [`naming_cache`] adds it once the cache exists.
pub(super) fn lean_body(t: &Translation<'_>) -> Result<Bytes, GatewayError> {
    to_bytes(&GenerateContentRequest {
        cached_content: None,
        contents: &t.contents,
        system_instruction: None,
        tools: None,
        tool_config: None,
        generation_config: t.generation_config.as_ref(),
    })
}

/// `lean` (from [`lean_body`]) with `"cachedContent": name` in front — the
/// bytes serde writes for `cached_content: Some(name)`, since that field serialises first and
/// `contents` always follows it.
pub(super) fn naming_cache(name: &str, lean: &[u8]) -> Bytes {
    let mut out = Vec::with_capacity(lean.len() + name.len() + 20);
    out.extend_from_slice(br#"{"cachedContent":"#);
    crate::api::json::string(&mut out, name);
    out.push(b',');
    out.extend_from_slice(lean.get(1..).unwrap_or_default());
    Bytes::from(out)
}

pub(super) fn translate<'a>(
    req: &RawRequest<'a>,
    profile: &Profile,
) -> Result<Translation<'a>, GatewayError> {
    let mut conv = conversation(req)?;
    // Gemini 3, whose thinking is set by level, is the generation that checks signatures.
    if matches!(profile.thinking, Thinking::Level { .. }) {
        sign_unsigned_calls(&mut conv.contents);
    }
    if conv.contents.is_empty() {
        return Err(GatewayError::invalid(
            "messages must include at least one user, assistant or tool message",
        ));
    }
    let (tools, tool_config) = if profile.forwards("tools") {
        (tools(req)?, tool_choice(req)?)
    } else {
        (None, None)
    };
    let generation_config = generation_config(req, profile)?;
    Ok(Translation {
        system: (!conv.system.is_empty()).then_some(SystemInstruction { parts: conv.system }),
        cache_mark: conv.cache_mark,
        contents: conv.contents,
        // toolConfig without declarations could only fail upstream.
        tool_config: tool_config.filter(|_| tools.is_some()),
        tools,
        generation_config: Some(generation_config).filter(|g| !g.is_empty()),
        service_tier: service_tier(req, profile)?,
    })
}

pub(super) fn to_bytes<T: Serialize>(value: &T) -> Result<Bytes, GatewayError> {
    crate::api::json::to_vec(value)
        .map(Bytes::from)
        .map_err(|e| GatewayError::Internal(format!("serialising the gemini request: {e}").into()))
}

/// Google's placeholder signature for function calls Gemini did not make or whose signature is
/// lost, documented for history moved from another model.
const SKIP_SIGNATURE: &str = "skip_thought_signature_validator";

/// Gemini 3 answers 400 to a model turn replayed without the signature of its first function
/// call. A call whose id carries none has none to send back: the conversation came from another
/// model (Claude's `toolu_` ids, say) or the client named its calls itself. The first call of
/// each such turn gets [`SKIP_SIGNATURE`], as Google's guide says to do for that history.
fn sign_unsigned_calls(contents: &mut [Content<'_>]) {
    for turn in contents.iter_mut().filter(|c| c.role == "model") {
        if let Some(first) = turn.parts.iter_mut().find(|p| p.function_call.is_some()) {
            first
                .thought_signature
                .get_or_insert_with(|| SKIP_SIGNATURE.to_owned());
        }
    }
}

// ----- messages ------------------------------------------------------------------------------

#[derive(Default)]
struct Conversation<'a> {
    system: Vec<TextPart<'a>>,
    cache_mark: Option<Option<Str<'a>>>,
    seen_system: bool,
    contents: Vec<Content<'a>>,
    /// Assistant tool calls so far, (id, function name), for naming tool results.
    calls: Vec<(Cow<'a, str>, Cow<'a, str>)>,
}

fn conversation<'a>(req: &RawRequest<'a>) -> Result<Conversation<'a>, GatewayError> {
    let mut conv = Conversation::default();
    for (i, m) in chat::messages::<MessageIn<'a>>(req)?.enumerate() {
        let m = m?;
        let content = content(m.content)
            .map_err(|e| GatewayError::invalid(format!("messages[{i}].content: {e}")))?;
        match &*m.role {
            "system" | "developer" => conv.system_message(i, content)?,
            "user" => {
                let parts = user_parts(i, content)?;
                push(&mut conv.contents, "user", parts);
            }
            "assistant" => {
                let parts = conv.assistant_parts(i, content, m.tool_calls)?;
                push(&mut conv.contents, "model", parts);
            }
            "tool" | "function" => {
                let part = conv.tool_result(i, m.tool_call_id, m.name, content)?;
                push(&mut conv.contents, "user", vec![part]);
            }
            other => {
                return Err(GatewayError::invalid(format!(
                    "messages[{i}]: unknown role {other:?}"
                )))
            }
        }
    }
    Ok(conv)
}

fn content(raw: Option<&RawValue>) -> Result<Option<ContentIn<'_>>, serde_json::Error> {
    let Some(raw) = raw else { return Ok(None) };
    if raw.get().starts_with('[') {
        serde_json::from_str(raw.get()).map(|p| Some(ContentIn::Parts(p)))
    } else {
        Text::of(raw).map(|t| Some(ContentIn::Text(t)))
    }
}

/// Appends a turn, merging it into the previous one when the role repeats.
fn push<'a>(contents: &mut Vec<Content<'a>>, role: &'static str, parts: Vec<Part<'a>>) {
    if parts.is_empty() {
        return;
    }
    match contents.last_mut() {
        Some(last) if last.role == role => last.parts.extend(parts),
        _ => contents.push(Content { role, parts }),
    }
}

fn text_part(text: Text<'_>) -> Part<'_> {
    Part {
        text: Some(text),
        ..Part::default()
    }
}

impl<'a> Conversation<'a> {
    fn system_message(
        &mut self,
        i: usize,
        content: Option<ContentIn<'a>>,
    ) -> Result<(), GatewayError> {
        let first = !std::mem::replace(&mut self.seen_system, true);
        match content {
            None => {}
            Some(ContentIn::Text(t)) => self.system.push(TextPart { text: t }),
            Some(ContentIn::Parts(parts)) => {
                for (j, p) in parts.into_iter().enumerate() {
                    if &*p.kind != "text" {
                        return Err(GatewayError::invalid(format!(
                            "messages[{i}].content[{j}]: a system message holds text parts only"
                        )));
                    }
                    if let (true, None, Some(cc)) = (first, &self.cache_mark, p.cache_control) {
                        self.cache_mark = Some(cc.ttl);
                    }
                    self.system.push(TextPart {
                        text: part_text(i, j, p.text)?,
                    });
                }
            }
        }
        // Google rejects empty text parts.
        self.system.retain(|p| !p.text.is_empty());
        Ok(())
    }

    fn assistant_parts(
        &mut self,
        i: usize,
        content: Option<ContentIn<'a>>,
        tool_calls: Option<Vec<ToolCallIn<'a>>>,
    ) -> Result<Vec<Part<'a>>, GatewayError> {
        let mut parts = Vec::new();
        match content {
            None => {}
            Some(ContentIn::Text(t)) => parts.push(text_part(t)),
            Some(ContentIn::Parts(ps)) => {
                for (j, p) in ps.into_iter().enumerate() {
                    match &*p.kind {
                        "text" => parts.push(text_part(part_text(i, j, p.text)?)),
                        "refusal" => {}
                        other => {
                            return Err(GatewayError::invalid(format!(
                                "messages[{i}].content[{j}]: unsupported assistant content part {other:?}"
                            )))
                        }
                    }
                }
            }
        }
        parts.retain(|p| p.text.as_ref().is_none_or(|t| !t.is_empty()));
        for (j, call) in tool_calls.unwrap_or_default().into_iter().enumerate() {
            parts.push(self.function_call(i, j, call)?);
        }
        Ok(parts)
    }

    fn function_call(
        &mut self,
        i: usize,
        j: usize,
        call: ToolCallIn<'a>,
    ) -> Result<Part<'a>, GatewayError> {
        let args = arguments(call.function.arguments).ok_or_else(|| {
            GatewayError::invalid(format!(
                "messages[{i}].tool_calls[{j}].function.arguments must be a JSON object"
            ))
        })?;
        let signature = call_id_signature(&call.id);
        self.calls.push((call.id.0, call.function.name.0.clone()));
        Ok(Part {
            function_call: Some(FunctionCall {
                name: call.function.name.0,
                args,
            }),
            thought_signature: signature,
            ..Part::default()
        })
    }

    fn tool_result(
        &self,
        i: usize,
        id: Option<Str<'a>>,
        legacy_name: Option<Str<'a>>,
        content: Option<ContentIn<'a>>,
    ) -> Result<Part<'a>, GatewayError> {
        let name = match (id, legacy_name) {
            (Some(id), _) => self
                .calls
                .iter()
                .rev()
                .find(|(call_id, _)| *call_id == *id)
                .map(|(_, name)| name.clone())
                .ok_or_else(|| {
                    GatewayError::invalid(format!(
                        "messages[{i}]: tool_call_id {:?} answers no earlier assistant tool call",
                        &*id
                    ))
                })?,
            (None, Some(name)) => name.0,
            (None, None) => {
                return Err(GatewayError::invalid(format!(
                    "messages[{i}]: a tool message needs a tool_call_id"
                )))
            }
        };
        let text = match content {
            None => Cow::Borrowed(""),
            Some(ContentIn::Text(t)) => t.into_cow(&At::Index(&"messages", i).field("content"))?,
            Some(ContentIn::Parts(ps)) => joined_text(i, ps)?,
        };
        Ok(Part {
            function_response: Some(FunctionResponse {
                name,
                response: tool_result_value(text),
            }),
            ..Part::default()
        })
    }
}

fn joined_text<'a>(i: usize, parts: Vec<PartIn<'a>>) -> Result<Cow<'a, str>, GatewayError> {
    let mut texts = Vec::with_capacity(parts.len());
    for (j, p) in parts.into_iter().enumerate() {
        if &*p.kind != "text" {
            return Err(GatewayError::invalid(format!(
                "messages[{i}].content[{j}]: a tool result holds text parts only"
            )));
        }
        let at = At::Index(&"messages", i);
        texts.push(part_text(i, j, p.text)?.into_cow(&at.field("content").index(j))?);
    }
    Ok(match texts.len() {
        1 => texts.swap_remove(0),
        _ => Cow::Owned(texts.concat()),
    })
}

/// A tool-call `arguments` string as a JSON object (`""` means no arguments).
fn arguments(args: Option<Str<'_>>) -> Option<Cow<'_, RawValue>> {
    let args = match args {
        None => return empty_object(),
        Some(a) if a.trim().is_empty() => return empty_object(),
        Some(a) => a.0,
    };
    let raw = match args {
        Cow::Borrowed(s) => serde_json::from_str::<&RawValue>(s).ok().map(Cow::Borrowed),
        Cow::Owned(s) => serde_json::from_str::<Box<RawValue>>(&s)
            .ok()
            .map(Cow::Owned),
    }?;
    raw.get().starts_with('{').then_some(raw)
}

fn empty_object<'a>() -> Option<Cow<'a, RawValue>> {
    serde_json::from_str::<&'static RawValue>("{}")
        .ok()
        .map(Cow::Borrowed)
}

fn tool_result_value(text: Cow<'_, str>) -> ToolResult<'_> {
    if text.trim_start().starts_with('{') {
        let object = match &text {
            Cow::Borrowed(s) => serde_json::from_str::<&RawValue>(s).ok().map(Cow::Borrowed),
            Cow::Owned(s) => serde_json::from_str::<Box<RawValue>>(s)
                .ok()
                .map(Cow::Owned),
        };
        if let Some(object) = object {
            return ToolResult::Object(object);
        }
    }
    ToolResult::Text { result: text }
}

fn user_parts<'a>(i: usize, content: Option<ContentIn<'a>>) -> Result<Vec<Part<'a>>, GatewayError> {
    let parts = match content {
        None => Vec::new(),
        Some(ContentIn::Text(t)) => vec![text_part(t)],
        Some(ContentIn::Parts(ps)) => {
            let mut parts = Vec::with_capacity(ps.len());
            for (j, p) in ps.into_iter().enumerate() {
                parts.push(user_part(i, j, p)?);
            }
            parts
        }
    };
    Ok(parts
        .into_iter()
        .filter(|p| p.text.as_ref().is_none_or(|t| !t.is_empty()))
        .collect())
}

fn user_part<'a>(i: usize, j: usize, p: PartIn<'a>) -> Result<Part<'a>, GatewayError> {
    let at = || format!("messages[{i}].content[{j}]");
    let missing = |what: &str| GatewayError::invalid(format!("{}: {what}", at()));
    match &*p.kind {
        "text" => Ok(text_part(part_text(i, j, p.text)?)),
        "image_url" => {
            let url = p
                .image_url
                .ok_or_else(|| missing("image_url.url is required"))?;
            media_part(url.url.0).ok_or_else(|| {
                missing("image_url.url must be a data: URL with base64 data, or an http(s) URL")
            })
        }
        "input_audio" => {
            let audio = p
                .input_audio
                .ok_or_else(|| missing("input_audio is required"))?;
            Ok(Part {
                inline_data: Some(Media {
                    mime_type: Cow::Owned(format!("audio/{}", &*audio.format)),
                    data: audio.data.0,
                }),
                ..Part::default()
            })
        }
        "file" => {
            let data = p.file.and_then(|f| f.file_data).map(|d| d.0);
            match data.filter(|d| d.starts_with("data:")).and_then(media_part) {
                Some(part) => Ok(part),
                None => Err(missing(
                    "a file part needs file.file_data as a base64 data: URL",
                )),
            }
        }
        other => Err(missing(&format!("unsupported content part type {other:?}"))),
    }
}

/// `data:<mime>;base64,<data>` → `inlineData`; http(s) URLs → `fileData`. Never `gs://`: Vertex
/// would read it with the operator's identity (admission refuses it first, `api::limits`).
fn media_part(url: Cow<'_, str>) -> Option<Part<'_>> {
    if url.starts_with("data:") {
        let comma = url.find(',')?;
        let header = url.get(5..comma)?.strip_suffix(";base64")?;
        let mime = header
            .split(';')
            .next()
            .filter(|m| m.contains('/'))?
            .to_owned();
        let data = match url {
            Cow::Borrowed(s) => Cow::Borrowed(s.get(comma + 1..)?),
            Cow::Owned(mut s) => Cow::Owned(s.split_off(comma + 1)),
        };
        return Some(Part {
            inline_data: Some(Media {
                mime_type: Cow::Owned(mime),
                data,
            }),
            ..Part::default()
        });
    }
    let remote = ["https://", "http://"].iter().any(|s| url.starts_with(s));
    remote.then(|| Part {
        file_data: Some(FileData {
            mime_type: guess_mime(&url),
            file_uri: url,
        }),
        ..Part::default()
    })
}

/// The media type of a URL from its extension; images are the common case.
fn guess_mime(url: &str) -> &'static str {
    let path = url.split(['?', '#']).next().unwrap_or(url);
    let file = path.rsplit('/').next().unwrap_or(path);
    let ext = file.rsplit_once('.').map(|(_, e)| e.to_ascii_lowercase());
    match ext.as_deref() {
        Some("png") => "image/png",
        Some("gif") => "image/gif",
        Some("webp") => "image/webp",
        Some("heic") => "image/heic",
        Some("heif") => "image/heif",
        Some("pdf") => "application/pdf",
        Some("mp3") => "audio/mp3",
        Some("wav") => "audio/wav",
        Some("mp4") => "video/mp4",
        Some("txt") => "text/plain",
        _ => "image/jpeg",
    }
}

// ----- tools ---------------------------------------------------------------------------------

fn tools<'a>(req: &RawRequest<'a>) -> Result<Option<[ToolOut<'a>; 1]>, GatewayError> {
    let declarations: Vec<_> = chat::function_tools(req)?
        .into_iter()
        .map(|function| FunctionDecl {
            name: function.name.0,
            description: function.description.map(|d| d.0),
            parameters_json_schema: function.parameters,
        })
        .collect();
    Ok((!declarations.is_empty()).then_some([ToolOut {
        function_declarations: declarations,
    }]))
}

fn tool_choice<'a>(req: &RawRequest<'a>) -> Result<Option<ToolConfig<'a>>, GatewayError> {
    let Some(raw) = req.get("tool_choice").filter(|r| r.get() != "null") else {
        return Ok(None);
    };
    let bad = || {
        GatewayError::invalid("invalid value for tool_choice: expected \"auto\", \"none\", \"required\" or {\"type\":\"function\",\"function\":{\"name\":…}}")
    };
    let (mode, name) = if raw.get().starts_with('{') {
        let named: NamedFunctionIn<'a> = serde_json::from_str(raw.get()).map_err(|_| bad())?;
        ("ANY", Some([named.function.name.0]))
    } else {
        let mode = match serde_json::from_str::<Str>(raw.get())
            .map_err(|_| bad())?
            .as_ref()
        {
            "auto" => "AUTO",
            "none" => "NONE",
            "required" => "ANY",
            _ => return Err(bad()),
        };
        (mode, None)
    };
    Ok(Some(ToolConfig {
        function_calling_config: FunctionCallingConfig {
            mode,
            allowed_function_names: name,
        },
    }))
}

// ----- generation config ---------------------------------------------------------------------

fn generation_config<'a>(
    req: &RawRequest<'a>,
    p: &Profile,
) -> Result<GenerationConfig<'a>, GatewayError> {
    let max_tokens = match forwarded(req, p, "max_tokens", "max_completion_tokens")? {
        Some(n) => Some(n),
        None => forwarded(req, p, "max_tokens", "max_tokens")?,
    };
    let mut g = GenerationConfig {
        temperature: forwarded(req, p, "temperature", "temperature")?,
        top_p: forwarded(req, p, "top_p", "top_p")?,
        // OpenRouter's top_k 0 means "off"; Gemini has no such value.
        top_k: forwarded::<u32>(req, p, "top_k", "top_k")?.filter(|&k| k > 0),
        max_output_tokens: max_tokens,
        stop_sequences: stop(req, p)?,
        candidate_count: forwarded(req, p, "n", "n")?,
        seed: forwarded(req, p, "seed", "seed")?,
        frequency_penalty: forwarded(req, p, "frequency_penalty", "frequency_penalty")?,
        presence_penalty: forwarded(req, p, "presence_penalty", "presence_penalty")?,
        thinking_config: thinking_config(req, p)?,
        ..GenerationConfig::default()
    };
    if let Some(format) =
        forwarded::<ResponseFormatIn>(req, p, "response_format", "response_format")?
    {
        (g.response_mime_type, g.response_json_schema) = match &*format.kind {
            "text" => (None, None),
            "json_object" => (Some("application/json"), None),
            "json_schema" => (
                Some("application/json"),
                format.json_schema.and_then(|s| s.schema),
            ),
            other => {
                return Err(GatewayError::invalid(format!(
                    "invalid value for response_format: unknown type {other:?}"
                )))
            }
        };
    }
    Ok(g)
}

/// The specification honours `flex` only; `priority` (Vertex Priority PayGo, billed above the
/// catalog's prices) and anything else are dropped.
fn service_tier(req: &RawRequest<'_>, p: &Profile) -> Result<Option<&'static str>, GatewayError> {
    let tier = forwarded::<Str>(req, p, "service_tier", "service_tier")?;
    Ok(tier.filter(|t| &**t == "flex").map(|_| "flex"))
}

#[cfg(test)]
mod tests {
    use super::super::test_support::*;
    use super::*;
    use crate::catalog::RouteKind;
    use crate::providers::Adapter;
    use serde_json::{json, Value};

    #[test]
    fn roles_system_and_merging() {
        let b = body(
            chat(json!([
                {"role": "system", "content": "Be brief."},
                {"role": "system", "content": ""},
                {"role": "user", "content": "one"},
                {"role": "developer", "content": [{"type": "text", "text": "Use metric units."}]},
                {"role": "user", "content": [{"type": "text", "text": "two"}, {"type": "text", "text": ""}]},
                {"role": "assistant", "content": "three", "refusal": null, "reasoning": "x"},
                {"role": "assistant", "content": [{"type": "text", "text": "four"}]},
                {"role": "assistant", "content": null},
                {"role": "user", "content": "five", "name": "bob"}
            ])),
            profile_25_flash(),
        );
        assert_eq!(
            b,
            json!({
                "contents": [
                    {"role": "user", "parts": [{"text": "one"}, {"text": "two"}]},
                    {"role": "model", "parts": [{"text": "three"}, {"text": "four"}]},
                    {"role": "user", "parts": [{"text": "five"}]}
                ],
                "systemInstruction": {"parts": [{"text": "Be brief."}, {"text": "Use metric units."}]}
            })
        );
    }

    #[test]
    fn text_is_copied_as_written_and_tool_results_read_as_text() {
        let body = br#"{"model":"google/gemini-test","messages":[{"role":"system","content":"caf\u00e9"},{"role":"user","content":[{"type":"text","text":"a \"q\"\n\/b"}]},{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}}]},{"role":"tool","tool_call_id":"c1","content":"{\"ok\": \u0074rue}"}]}"#;
        let raw = RawRequest::parse(body, crate::api::Operation::Chat).unwrap();
        let t = translate(&raw, &profile_25_flash()).unwrap();
        let out = String::from_utf8(whole_body(&t).unwrap().to_vec()).unwrap();
        assert!(out.contains(r#"{"text":"a \"q\"\n\/b"}"#), "{out}");
        assert!(out.contains(r#"{"text":"caf\u00e9"}"#), "{out}");
        // A tool's answer is read for its value: a JSON object is sent as one.
        let v: Value = serde_json::from_str(&out).unwrap();
        let response = &v["contents"][2]["parts"][0]["functionResponse"]["response"];
        assert_eq!(response, &json!({"ok": true}), "{out}");
    }

    #[test]
    fn images_audio_and_files() {
        let b = body(
            chat(json!([{"role": "user", "content": [
                {"type": "text", "text": "what is this?"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo=", "detail": "low"}},
                {"type": "image_url", "image_url": {"url": "https://example.com/cat.WEBP?size=2#top"}},
                {"type": "input_audio", "input_audio": {"data": "UklGRg==", "format": "wav"}},
                {"type": "file", "file": {"file_data": "data:application/pdf;base64,JVBERi0=", "filename": "a.pdf"}}
            ]}])),
            profile_25_flash(),
        );
        assert_eq!(
            b["contents"][0]["parts"],
            json!([
                {"text": "what is this?"},
                {"inlineData": {"mimeType": "image/png", "data": "iVBORw0KGgo="}},
                {"fileData": {"mimeType": "image/webp", "fileUri": "https://example.com/cat.WEBP?size=2#top"}},
                {"inlineData": {"mimeType": "audio/wav", "data": "UklGRg=="}},
                {"inlineData": {"mimeType": "application/pdf", "data": "JVBERi0="}}
            ])
        );
        for bad in [
            json!({"type": "image_url", "image_url": {"url": "ftp://x/y.png"}}),
            json!({"type": "image_url", "image_url": {"url": "gs://bucket/photo"}}),
            json!({"type": "image_url", "image_url": {"url": "data:image/png,notbase64"}}),
            json!({"type": "image_url"}),
            json!({"type": "file", "file": {"file_id": "file-1"}}),
            json!({"type": "video", "video": {}}),
        ] {
            let e = err(
                chat(json!([{"role": "user", "content": [{"type": "text", "text": "a"}, bad]}])),
                profile_25_flash(),
            );
            assert!(e.starts_with("messages[0].content[1]: "), "{e}");
        }
    }

    #[test]
    fn malformed_messages_name_their_index() {
        let p = profile_25_flash;
        let cases = [
            (
                json!([{"role": "user", "content": "a"}, {"role": "robot", "content": "b"}]),
                "messages[1]: unknown role \"robot\"",
            ),
            (
                json!([{"role": "user", "content": "a"}, 7]),
                "messages[1]: ",
            ),
            (
                json!([{"content": "a"}]),
                "messages[0]: missing field `role`",
            ),
            (
                json!([{"role": "user", "content": 5}]),
                "messages[0].content: ",
            ),
            (
                json!([{"role": "system", "content": [{"type": "image_url", "image_url": {"url": "https://a/b.png"}}]}]),
                "messages[0].content[0]: a system message holds text parts only",
            ),
            (
                json!([{"role": "system", "content": "only system"}]),
                "messages must include at least one user, assistant or tool message",
            ),
            (
                json!([{"role": "user", "content": [{"type": "text"}]}]),
                "messages[0].content[0]: a text part needs text",
            ),
        ];
        for (messages, want) in cases {
            let e = err(chat(messages.clone()), p());
            assert!(e.starts_with(want), "{messages}: {e}");
        }
    }

    fn history(call_id: &str, arguments: &str, result: Value) -> Value {
        chat(json!([
            {"role": "user", "content": "weather in SF?"},
            {"role": "assistant", "content": null, "tool_calls": [
                {"id": call_id, "type": "function", "function": {"name": "weather", "arguments": arguments}}
            ]},
            {"role": "tool", "tool_call_id": call_id, "content": result}
        ]))
    }

    #[test]
    fn tool_history_round_trips_the_thought_signature() {
        for file in [
            "gemini-function-call-gemini3-pro-devapi.json",
            "gemini-function-call-thought-signature-2.5-pro-devapi.json",
        ] {
            let fixture_json: Value = serde_json::from_slice(&fixture(file)).unwrap();
            let parts = fixture_json["candidates"][0]["content"]["parts"]
                .as_array()
                .unwrap();
            let part = parts
                .iter()
                .find(|p| p.get("functionCall").is_some())
                .unwrap();
            let signature = part["thoughtSignature"].as_str().unwrap();
            let answer = super::super::Gemini
                .translate_buffered(&fixture(file), &cx())
                .unwrap();
            let answer: Value = serde_json::from_slice(&answer.body).unwrap();
            let call = &answer["choices"][0]["message"]["tool_calls"][0];
            let id = call["id"].as_str().unwrap();
            let arguments = call["function"]["arguments"].as_str().unwrap();

            let b = body(
                history(id, arguments, json!("{\"temp\": 18}")),
                profile_levels(&["low", "high"]),
            );
            let model_turn = &b["contents"][1];
            assert_eq!(model_turn["role"], "model", "{file}");
            assert_eq!(model_turn["parts"].as_array().unwrap().len(), 1, "{file}");
            let replayed = &model_turn["parts"][0];
            assert_eq!(
                replayed["thoughtSignature"], signature,
                "{file}: the exact signature comes back"
            );
            assert_eq!(replayed["functionCall"]["name"], "weather", "{file}");
            assert_eq!(
                replayed["functionCall"]["args"], part["functionCall"]["args"],
                "{file}"
            );
            assert_eq!(
                b["contents"][2],
                json!({"role": "user", "parts": [{"functionResponse": {"name": "weather", "response": {"temp": 18}}}]}),
                "{file}"
            );
        }
    }

    #[test]
    fn gemini_3_gets_the_placeholder_for_calls_without_a_signature() {
        let mut parallel = history("toolu_01", "{}", json!("1"));
        parallel["messages"][1]["tool_calls"]
            .as_array_mut()
            .unwrap()
            .push(json!({"id": "toolu_02", "type": "function", "function": {"name": "time", "arguments": "{}"}}));
        parallel["messages"].as_array_mut().unwrap().insert(
            3,
            json!({"role": "tool", "tool_call_id": "toolu_02", "content": "2"}),
        );
        let b = body(parallel.clone(), profile_levels(&["low", "high"]));
        let calls = &b["contents"][1]["parts"];
        assert_eq!(
            calls[0]["thoughtSignature"], SKIP_SIGNATURE,
            "the turn's first call"
        );
        assert!(calls[1].get("thoughtSignature").is_none(), "{calls}");
        let b = body(parallel, profile_25_flash());
        assert!(
            b["contents"][1]["parts"][0]
                .get("thoughtSignature")
                .is_none(),
            "Gemini 2.5 does not check signatures"
        );
    }

    #[test]
    fn tool_results_and_calls() {
        let b = body(history("call_1", "", json!("sunny")), profile_25_flash());
        assert_eq!(
            b["contents"][1]["parts"][0],
            json!({"functionCall": {"name": "weather", "args": {}}}),
            "no signature"
        );
        assert_eq!(
            b["contents"][2]["parts"][0]["functionResponse"]["response"],
            json!({"result": "sunny"})
        );
        let b = body(
            history(
                "call_1",
                "{\"city\": \"SF\"}",
                json!([{"type": "text", "text": "[1, "}, {"type": "text", "text": "2]"}]),
            ),
            profile_25_flash(),
        );
        assert_eq!(
            b["contents"][1]["parts"][0]["functionCall"]["args"],
            json!({"city": "SF"})
        );
        assert_eq!(
            b["contents"][2]["parts"][0]["functionResponse"]["response"],
            json!({"result": "[1, 2]"})
        );
        let b = body(
            history("call.not base64!", "{}", json!("{broken")),
            profile_25_flash(),
        );
        assert!(
            b["contents"][1]["parts"][0]
                .get("thoughtSignature")
                .is_none(),
            "a foreign dotted id is no signature"
        );
        assert_eq!(
            b["contents"][2]["parts"][0]["functionResponse"]["response"],
            json!({"result": "{broken"})
        );

        let mut parallel = history("a", "{}", json!("1"));
        parallel["messages"][1]["tool_calls"]
            .as_array_mut()
            .unwrap()
            .push(json!({"id": "b", "type": "function", "function": {"name": "time", "arguments": "{}"}}));
        parallel["messages"].as_array_mut().unwrap().extend([
            json!({"role": "tool", "tool_call_id": "b", "content": "2"}),
            json!({"role": "user", "content": "thanks"}),
        ]);
        let b = body(parallel, profile_25_flash());
        assert_eq!(
            b["contents"][2],
            json!({"role": "user", "parts": [
                {"functionResponse": {"name": "weather", "response": {"result": "1"}}},
                {"functionResponse": {"name": "time", "response": {"result": "2"}}},
                {"text": "thanks"}
            ]}),
            "tool results and the next user turn merge into one user turn"
        );

        let legacy = chat(
            json!([{"role": "user", "content": "x"}, {"role": "function", "name": "f", "content": "{\"a\":1}"}]),
        );
        assert_eq!(
            body(legacy, profile_25_flash())["contents"][0]["parts"][1],
            json!({"functionResponse": {"name": "f", "response": {"a": 1}}})
        );

        for (req, want) in [
            (
                history("c", "[1]", json!("x")),
                "messages[1].tool_calls[0].function.arguments must be a JSON object",
            ),
            (
                history("c", "{nope", json!("x")),
                "messages[1].tool_calls[0].function.arguments must be a JSON object",
            ),
            (
                chat(
                    json!([{"role": "user", "content": "x"}, {"role": "tool", "tool_call_id": "zz", "content": "r"}]),
                ),
                "messages[1]: tool_call_id \"zz\" answers no earlier assistant tool call",
            ),
            (
                chat(json!([{"role": "user", "content": "x"}, {"role": "tool", "content": "r"}])),
                "messages[1]: a tool message needs a tool_call_id",
            ),
        ] {
            assert_eq!(err(req, profile_25_flash()), want);
        }
    }

    fn all_parameters() -> Value {
        with(json!({
            "temperature": 0.5, "top_p": 0.9, "top_k": 40, "max_tokens": 100, "stop": ["END", "STOP"], "n": 2,
            "seed": 7, "frequency_penalty": 0.5, "presence_penalty": -0.5,
            "top_a": 0.1, "min_p": 0.2, "repetition_penalty": 1.1, "logit_bias": {"42": -100}, "logprobs": true,
            "top_logprobs": 2, "verbosity": "low", "user": "u1", "metadata": {"k": "v"}, "store": false,
            "prompt_cache_key": "pk", "parallel_tool_calls": true, "stream_options": {"include_usage": true},
            "x_unknown_vendor_field": {"a": [1]}
        }))
    }

    #[test]
    fn parameters_forwarded_per_profile() {
        let b = body(all_parameters(), profile_20());
        assert_eq!(
            b["generationConfig"],
            json!({"temperature": 0.5, "topP": 0.9, "topK": 40, "maxOutputTokens": 100, "stopSequences": ["END", "STOP"],
                   "candidateCount": 2, "seed": 7, "frequencyPenalty": 0.5, "presencePenalty": -0.5})
        );
        let b = body(all_parameters(), profile_25_flash());
        assert_eq!(
            b["generationConfig"],
            json!({"temperature": 0.5, "topP": 0.9, "topK": 40, "maxOutputTokens": 100, "stopSequences": ["END", "STOP"], "candidateCount": 2}),
            "2.5 drops seed and penalties"
        );
        let text = b.to_string();
        for absent in [
            "seed",
            "Penalty",
            "logit",
            "top_a",
            "min_p",
            "metadata",
            "u1",
            "store",
            "verbosity",
            "prompt_cache",
            "stream",
            "x_unknown",
        ] {
            assert!(!text.contains(absent), "{absent} leaked into {text}");
        }
        assert_eq!(
            b.as_object().unwrap().keys().collect::<Vec<_>>(),
            ["contents", "generationConfig"]
        );
    }

    #[test]
    fn parameter_details_and_type_checks() {
        let p = profile_25_flash;
        let g = |extra: Value| body(with(extra), p())["generationConfig"].clone();
        assert_eq!(
            g(json!({"max_tokens": 10, "max_completion_tokens": 20})),
            json!({"maxOutputTokens": 20})
        );
        assert_eq!(g(json!({"stop": "END"})), json!({"stopSequences": ["END"]}));
        assert_eq!(
            g(json!({"stop": [], "top_k": 0, "temperature": null})),
            Value::Null
        );
        assert_eq!(g(json!({"response_format": {"type": "text"}})), Value::Null);
        assert_eq!(
            g(json!({"response_format": {"type": "json_object"}})),
            json!({"responseMimeType": "application/json"})
        );
        assert_eq!(
            g(
                json!({"response_format": {"type": "json_schema", "json_schema": {"name": "w", "strict": true,
                "schema": {"type": "object", "properties": {"city": {"type": "string"}}, "additionalProperties": false}}}})
            ),
            json!({"responseMimeType": "application/json",
                   "responseJsonSchema": {"type": "object", "properties": {"city": {"type": "string"}}, "additionalProperties": false}})
        );
        for (extra, field) in [
            (json!({"temperature": "hot"}), "temperature"),
            (json!({"top_p": [1]}), "top_p"),
            (
                json!({"max_completion_tokens": -5}),
                "max_completion_tokens",
            ),
            (json!({"max_tokens": 1.5}), "max_tokens"),
            (json!({"stop": 5}), "stop"),
            (json!({"stop": ["a", 1]}), "stop"),
            (json!({"n": "two"}), "n"),
            (
                json!({"response_format": {"type": "yaml"}}),
                "response_format",
            ),
            (json!({"response_format": "json"}), "response_format"),
            (json!({"service_tier": 3}), "service_tier"),
        ] {
            let e = err(with(extra.clone()), p());
            assert!(
                e.starts_with(&format!("invalid value for {field}")),
                "{extra}: {e}"
            );
        }
        // Dropped fields are not looked at, whatever their type.
        body(
            with(json!({"seed": "x", "frequency_penalty": "y", "logit_bias": 1})),
            p(),
        );
    }

    #[test]
    fn tools_and_tool_choice() {
        let tools = json!([
            {"type": "function", "function": {"name": "weather", "description": "Weather now", "strict": true,
             "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}},
            {"type": "function", "function": {"name": "now"}}
        ]);
        let b = body(with(json!({"tools": tools})), profile_25_flash());
        assert_eq!(
            b["tools"],
            json!([{"functionDeclarations": [
                {"name": "weather", "description": "Weather now",
                 "parametersJsonSchema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}},
                {"name": "now"}
            ]}])
        );
        assert!(
            b.get("toolConfig").is_none(),
            "no tool_choice, no toolConfig"
        );
        for (choice, config) in [
            (json!("auto"), json!({"mode": "AUTO"})),
            (json!("none"), json!({"mode": "NONE"})),
            (json!("required"), json!({"mode": "ANY"})),
            (
                json!({"type": "function", "function": {"name": "now"}}),
                json!({"mode": "ANY", "allowedFunctionNames": ["now"]}),
            ),
        ] {
            let b = body(
                with(json!({"tools": tools, "tool_choice": choice})),
                profile_25_flash(),
            );
            assert_eq!(
                b["toolConfig"],
                json!({"functionCallingConfig": config}),
                "{choice}"
            );
        }
        assert!(
            body(with(json!({"tool_choice": "auto"})), profile_25_flash())
                .get("toolConfig")
                .is_none()
        );
        let no_tools = Profile {
            forward: vec![],
            ..profile_25_flash()
        };
        let b = body(
            with(json!({"tools": tools, "tool_choice": "required"})),
            no_tools,
        );
        assert!(
            b.get("tools").is_none() && b.get("toolConfig").is_none(),
            "tools not in the profile are dropped"
        );
        for (extra, want) in [
            (
                json!({"tools": [{"type": "web_search"}]}),
                "tools[0]: only function tools are supported, not \"web_search\"",
            ),
            (
                json!({"tools": [{"type": "function"}]}),
                "tools[0]: function is required",
            ),
            (
                json!({"tools": [{"type": "function", "function": {"name": "f", "parameters": "x"}}]}),
                "tools[0]: function.parameters must be a JSON Schema object",
            ),
            (
                json!({"tools": tools, "tool_choice": "sometimes"}),
                "invalid value for tool_choice",
            ),
        ] {
            let e = err(with(extra.clone()), profile_25_flash());
            assert!(e.starts_with(want), "{extra}: {e}");
        }
    }
    #[test]
    fn service_tier_is_a_vertex_global_header_only() {
        let m = model(profile_25_flash());
        for (tier, want) in [
            ("flex", Some("flex")),
            ("priority", None),
            ("auto", None),
            ("default", None),
        ] {
            let req = with(json!({"service_tier": tier}));
            for kind in [
                RouteKind::GeminiApi,
                RouteKind::Vertex,
                RouteKind::VertexGlobal,
            ] {
                let (b, headers) = built(&req, &m, kind, None);
                assert!(!b.to_string().contains("ervice"), "never a body field: {b}");
                let expected: Vec<(String, String)> = match (kind, want) {
                    (RouteKind::VertexGlobal, Some(t)) => vec![
                        ("x-vertex-ai-llm-request-type".into(), "shared".into()),
                        ("x-vertex-ai-llm-shared-request-type".into(), t.into()),
                    ],
                    _ => vec![],
                };
                assert_eq!(headers, expected, "{tier} on {kind:?}");
            }
        }
        let not_forwarded = model(Profile {
            forward: vec![],
            ..profile_25_flash()
        });
        let (_, headers) = built(
            &with(json!({"service_tier": "flex"})),
            &not_forwarded,
            RouteKind::VertexGlobal,
            None,
        );
        assert!(headers.is_empty());
    }
}
