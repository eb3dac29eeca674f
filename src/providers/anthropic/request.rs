//! OpenAI chat body → Anthropic Messages API body.
//!
//! Driven by the model's parameter profile (`catalog::Profile`, `claude` in
//! conf/catalog.yaml): a field is translated only when the profile forwards it; everything else
//! (penalties, `seed`, `top_a`, `min_p`, `repetition_penalty`, `logit_bias`, `logprobs`,
//! `verbosity`, `user`, `service_tier` …) is accepted and dropped. Tools are the exception:
//! `tools`, `tool_choice` and tool-call history are refused (400 `unsupported_parameter`)
//! because a silently dropped tool would change what the model answers.
//!
//! Mappings (anthropic.md §2):
//! - system/developer messages → `system` text blocks; a `cache_control` on the first system
//!   message (on the message or on one of its parts, OpenRouter style) → `cache_control`
//!   `{type: ephemeral, ttl?}` on the last system block;
//! - user/assistant messages → `messages`, adjacent same-role turns merged (the API wants
//!   alternating roles); string content or `text` / `image_url` parts; empty text dropped;
//! - `max_tokens` = `max_completion_tokens`, else `max_tokens`, else the model's
//!   `max_output_tokens` (4096 when the catalog has none), never above that cap;
//! - **temperature rule**: Anthropic `temperature = clamp(OpenAI temperature / 2, 0, 1)` —
//!   OpenAI's 0–2 scale halved onto Anthropic's 0–1 range (0 → 0, 1 → 0.5, 2 → 1), values
//!   outside clamped;
//! - `top_p`; `top_k` (0 = off, dropped); `stop` (string or list) → `stop_sequences`; Claude
//!   4.1+ rejects `temperature` together with `top_p`, so `top_p` is dropped when a
//!   temperature is sent;
//! - reasoning (`common::reasoning_ask`) → `thinking: {type: enabled, budget_tokens}`: budget
//!   from `reasoning.max_tokens`, else the effort table (low 1024, medium 8192, high 24576,
//!   xhigh 32768; `reasoning: {}` / `enabled: true` → medium), clamped to the profile's range
//!   (≥ 1024) and below `max_tokens` — `max_tokens` is raised to `budget + 1` when needed, never
//!   above the model cap (the budget then shrinks to `cap − 1`). A zero budget, effort `none`
//!   or `enabled: false` sends no `thinking` (the default: off). With thinking on, Anthropic
//!   forbids a modified `temperature` and `top_k` and wants `top_p` ≥ 0.95, so those are
//!   dropped.

use std::borrow::Cow;

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use crate::api::{GatewayError, RawRequest};
use crate::catalog::{Profile, Thinking};
use crate::providers::common::{reasoning_ask, Ask, Effort, Str};
use crate::providers::Target;

/// `max_tokens` when neither the client nor the catalog names one.
const FALLBACK_MAX_TOKENS: u32 = 4096;

// ----- what the client sends -----------------------------------------------------------------

#[derive(Deserialize)]
struct MessageIn<'a> {
    #[serde(borrow)]
    role: Str<'a>,
    #[serde(borrow, default)]
    content: Option<&'a RawValue>,
    #[serde(borrow, default)]
    tool_calls: Option<Vec<&'a RawValue>>,
    #[serde(borrow, default)]
    cache_control: Option<CacheControlIn<'a>>,
}

#[derive(Deserialize)]
struct PartIn<'a> {
    #[serde(rename = "type", borrow)]
    kind: Str<'a>,
    #[serde(borrow, default)]
    text: Option<Str<'a>>,
    #[serde(borrow, default)]
    image_url: Option<UrlIn<'a>>,
    #[serde(borrow, default)]
    cache_control: Option<CacheControlIn<'a>>,
}

#[derive(Deserialize)]
struct UrlIn<'a> {
    #[serde(borrow)]
    url: Str<'a>,
}

#[derive(Deserialize)]
struct CacheControlIn<'a> {
    #[serde(borrow, default)]
    ttl: Option<Str<'a>>,
}

// ----- what Anthropic receives ---------------------------------------------------------------

#[derive(Serialize)]
struct MessagesRequest<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    anthropic_version: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    model: Option<&'a str>,
    max_tokens: u32,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    system: Vec<Block<'a>>,
    messages: Vec<Message<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    top_p: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    top_k: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    stop_sequences: Option<Vec<Cow<'a, str>>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    thinking: Option<ThinkingOut>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    stream: bool,
}

#[derive(Serialize)]
struct Message<'a> {
    role: &'static str,
    content: Vec<Block<'a>>,
}

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Block<'a> {
    Text {
        text: Cow<'a, str>,
        #[serde(skip_serializing_if = "Option::is_none")]
        cache_control: Option<CacheControl<'a>>,
    },
    Image {
        source: ImageSource<'a>,
    },
}

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum ImageSource<'a> {
    Base64 {
        media_type: Cow<'a, str>,
        data: Cow<'a, str>,
    },
    Url {
        url: Cow<'a, str>,
    },
}

#[derive(Serialize, Debug, Clone, PartialEq, Eq)]
struct CacheControl<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    ttl: Option<Cow<'a, str>>,
}

#[derive(Serialize, Debug, PartialEq, Eq)]
struct ThinkingOut {
    #[serde(rename = "type")]
    kind: &'static str,
    budget_tokens: u32,
}

// ----- translation ---------------------------------------------------------------------------

pub(super) fn build(
    req: &RawRequest<'_>,
    target: &Target<'_>,
    vertex: bool,
) -> Result<Bytes, GatewayError> {
    refuse_tools(req, target)?;
    let model = target.model;
    let p = &model.profile;
    let (system, messages) = conversation(req, target)?;
    let cap = model.max_output_tokens.unwrap_or(FALLBACK_MAX_TOKENS).max(1);
    let asked = match forwarded::<u32>(req, p, "max_tokens", "max_completion_tokens")? {
        Some(n) => Some(n),
        None => forwarded::<u32>(req, p, "max_tokens", "max_tokens")?,
    };
    let mut max_tokens = asked.unwrap_or(cap).clamp(1, cap);
    let thinking = thinking(req, p, &mut max_tokens, cap)?;
    let mut temperature = forwarded::<f64>(req, p, "temperature", "temperature")?.map(temperature);
    let mut top_p = forwarded::<f64>(req, p, "top_p", "top_p")?;
    let mut top_k = forwarded::<u32>(req, p, "top_k", "top_k")?.filter(|&k| k > 0);
    if thinking.is_some() {
        temperature = None;
        top_k = None;
        top_p = top_p.filter(|&v| v >= 0.95);
    }
    if temperature.is_some() {
        top_p = None;
    }
    let body = MessagesRequest {
        anthropic_version: vertex.then_some(super::VERTEX_VERSION),
        model: (!vertex).then_some(model.upstream_model.as_str()),
        max_tokens,
        system,
        messages,
        temperature,
        top_p,
        top_k,
        stop_sequences: stop(req, p)?,
        thinking,
        stream: target.stream,
    };
    serde_json::to_vec(&body).map(Bytes::from).map_err(|e| {
        GatewayError::Internal(format!("serialising the anthropic request: {e}").into())
    })
}

/// Anthropic's 0–1 temperature from OpenAI's 0–2: halved, then clamped.
fn temperature(openai: f64) -> f64 {
    (openai / 2.0).clamp(0.0, 1.0)
}

/// Tools are not offered on this family: their presence is a 400 naming the parameter.
fn refuse_tools(req: &RawRequest<'_>, target: &Target<'_>) -> Result<(), GatewayError> {
    for param in ["tools", "tool_choice"] {
        if req.get(param).is_some_and(|v| v.get() != "null") {
            return Err(GatewayError::UnsupportedParameter {
                param,
                model: target.model.id.as_ref().into(),
            });
        }
    }
    Ok(())
}

/// A forwarded field read as `T` (`None` when the profile drops it or it is absent / null).
fn forwarded<'a, T: Deserialize<'a>>(
    req: &RawRequest<'a>,
    p: &Profile,
    profile_field: &str,
    field: &str,
) -> Result<Option<T>, GatewayError> {
    if !p.forwards(profile_field) {
        return Ok(None);
    }
    Ok(req.typed::<Option<T>>(field)?.flatten())
}

fn stop<'a>(req: &RawRequest<'a>, p: &Profile) -> Result<Option<Vec<Cow<'a, str>>>, GatewayError> {
    let Some(raw) = forwarded::<&'a RawValue>(req, p, "stop", "stop")? else {
        return Ok(None);
    };
    let bad = |e: serde_json::Error| GatewayError::invalid(format!("invalid value for stop: {e}"));
    let stops: Vec<Cow<'a, str>> = if raw.get().starts_with('[') {
        let list: Vec<Str<'a>> = serde_json::from_str(raw.get()).map_err(bad)?;
        list.into_iter().map(|s| s.0).collect()
    } else {
        vec![serde_json::from_str::<Str<'a>>(raw.get()).map_err(bad)?.0]
    };
    Ok(Some(stops).filter(|s| !s.is_empty()))
}

/// `thinking` from the reasoning controls; adjusts `max_tokens` so the budget fits below it.
fn thinking(
    req: &RawRequest<'_>,
    p: &Profile,
    max_tokens: &mut u32,
    cap: u32,
) -> Result<Option<ThinkingOut>, GatewayError> {
    let Thinking::Budget {
        min,
        max,
        can_disable,
    } = p.thinking
    else {
        return Ok(None);
    };
    if !p.forwards("reasoning") {
        return Ok(None);
    }
    let Some(asked) = reasoning_ask(req)? else {
        return Ok(None);
    };
    let budget = match asked.ask {
        // Only asking for the text to be left out does not turn thinking on.
        Ask::Default if asked.exclude => return Ok(None),
        Ask::Default | Ask::Dynamic => Effort::Medium.budget(),
        Ask::Budget(n) => n,
        Ask::Effort(e) => e.budget(),
    };
    if budget == 0 && can_disable {
        return Ok(None);
    }
    let mut budget = u32::try_from(budget.clamp(i64::from(min), i64::from(max))).unwrap_or(max);
    if budget >= *max_tokens {
        *max_tokens = budget.saturating_add(1).min(cap);
    }
    if budget >= *max_tokens {
        budget = max_tokens.saturating_sub(1);
    }
    if budget < min {
        // The model's output cap leaves no room for the smallest budget.
        return Ok(None);
    }
    Ok(Some(ThinkingOut {
        kind: "enabled",
        budget_tokens: budget,
    }))
}

/// The system blocks and the alternating messages.
fn conversation<'a>(
    req: &RawRequest<'a>,
    target: &Target<'_>,
) -> Result<(Vec<Block<'a>>, Vec<Message<'a>>), GatewayError> {
    let raw_messages = req
        .typed::<Vec<&'a RawValue>>("messages")?
        .unwrap_or_default();
    let mut system = Vec::new();
    let mut cache_mark: Option<Option<Str<'a>>> = None;
    let mut seen_system = false;
    let mut messages: Vec<Message<'a>> = Vec::new();
    for (i, raw) in raw_messages.into_iter().enumerate() {
        let m: MessageIn<'a> = serde_json::from_str(raw.get())
            .map_err(|e| GatewayError::invalid(format!("messages[{i}]: {e}")))?;
        let parts = content(i, m.content)?;
        let role = match &*m.role {
            "system" | "developer" => {
                let first = !std::mem::replace(&mut seen_system, true);
                if first {
                    if let Some(cc) = m.cache_control {
                        cache_mark = Some(cc.ttl);
                    }
                }
                for (j, p) in parts.into_iter().enumerate() {
                    if &*p.kind != "text" {
                        return Err(GatewayError::invalid(format!(
                            "messages[{i}].content[{j}]: a system message holds text parts only"
                        )));
                    }
                    if let (true, None, Some(cc)) = (first, &cache_mark, p.cache_control) {
                        cache_mark = Some(cc.ttl);
                    }
                    let text = part_text(i, j, p.text)?;
                    if !text.is_empty() {
                        system.push(Block::Text {
                            text,
                            cache_control: None,
                        });
                    }
                }
                continue;
            }
            "user" => "user",
            "assistant" => {
                if m.tool_calls.as_ref().is_some_and(|c| !c.is_empty()) {
                    return Err(tools_unsupported(target));
                }
                "assistant"
            }
            "tool" | "function" => return Err(tools_unsupported(target)),
            other => {
                return Err(GatewayError::invalid(format!(
                    "messages[{i}]: unknown role {other:?}"
                )))
            }
        };
        let mut blocks = Vec::with_capacity(parts.len());
        for (j, p) in parts.into_iter().enumerate() {
            if let Some(b) = block(i, j, p, role)? {
                blocks.push(b);
            }
        }
        if blocks.is_empty() {
            continue;
        }
        match messages.last_mut() {
            Some(last) if last.role == role => last.content.extend(blocks),
            _ => messages.push(Message {
                role,
                content: blocks,
            }),
        }
    }
    if messages.is_empty() {
        return Err(GatewayError::invalid(
            "messages must include at least one non-empty user or assistant message",
        ));
    }
    if let (Some(ttl), Some(Block::Text { cache_control, .. })) = (cache_mark, system.last_mut()) {
        *cache_control = Some(CacheControl {
            kind: "ephemeral",
            ttl: ttl.map(|t| t.0),
        });
    }
    Ok((system, messages))
}

fn tools_unsupported(target: &Target<'_>) -> GatewayError {
    GatewayError::UnsupportedParameter {
        param: "tool_calls",
        model: target.model.id.as_ref().into(),
    }
}

/// A message's content as parts; a string is one text part.
fn content<'a>(i: usize, raw: Option<&'a RawValue>) -> Result<Vec<PartIn<'a>>, GatewayError> {
    let bad = |e: serde_json::Error| GatewayError::invalid(format!("messages[{i}].content: {e}"));
    let Some(raw) = raw.filter(|r| r.get() != "null") else {
        return Ok(Vec::new());
    };
    if raw.get().starts_with('[') {
        serde_json::from_str(raw.get()).map_err(bad)
    } else {
        let text: Str<'a> = serde_json::from_str(raw.get()).map_err(bad)?;
        Ok(vec![PartIn {
            kind: Str(Cow::Borrowed("text")),
            text: Some(text),
            image_url: None,
            cache_control: None,
        }])
    }
}

fn part_text<'a>(i: usize, j: usize, text: Option<Str<'a>>) -> Result<Cow<'a, str>, GatewayError> {
    text.map(|t| t.0).ok_or_else(|| {
        GatewayError::invalid(format!(
            "messages[{i}].content[{j}]: a text part needs text"
        ))
    })
}

/// One content block; `None` for parts that carry nothing (empty text, assistant refusals).
fn block<'a>(
    i: usize,
    j: usize,
    p: PartIn<'a>,
    role: &str,
) -> Result<Option<Block<'a>>, GatewayError> {
    let at = || format!("messages[{i}].content[{j}]");
    match (&*p.kind, role) {
        ("text", _) => {
            let text = part_text(i, j, p.text)?;
            Ok((!text.is_empty()).then(|| Block::Text {
                text,
                cache_control: p.cache_control.map(|cc| CacheControl {
                    kind: "ephemeral",
                    ttl: cc.ttl.map(|t| t.0),
                }),
            }))
        }
        ("refusal", "assistant") => Ok(None),
        ("image_url", "user") => {
            let url = p
                .image_url
                .ok_or_else(|| GatewayError::invalid(format!("{}: image_url.url is required", at())))?;
            image(url.url.0).map(Some).ok_or_else(|| {
                GatewayError::invalid(format!(
                    "{}: image_url.url must be a base64 data: URL or an http(s) URL",
                    at()
                ))
            })
        }
        (other, _) => Err(GatewayError::invalid(format!(
            "{}: unsupported {role} content part {other:?}",
            at()
        ))),
    }
}

fn image(url: Cow<'_, str>) -> Option<Block<'_>> {
    if let Some(rest) = url.strip_prefix("data:") {
        let (media_type, data) = rest.split_once(";base64,")?;
        let (media_type, data) = match &url {
            Cow::Borrowed(u) => {
                let start = u.len() - data.len();
                (
                    Cow::Borrowed(&u[5..5 + media_type.len()]),
                    Cow::Borrowed(&u[start..]),
                )
            }
            Cow::Owned(_) => (Cow::Owned(media_type.to_owned()), Cow::Owned(data.to_owned())),
        };
        return Some(Block::Image {
            source: ImageSource::Base64 { media_type, data },
        });
    }
    if url.starts_with("https://") || url.starts_with("http://") {
        return Some(Block::Image {
            source: ImageSource::Url { url },
        });
    }
    None
}
