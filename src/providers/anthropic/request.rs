//! OpenAI chat body → Anthropic Messages API body.
//!
//! Driven by the model's parameter profile (`catalog::Profile`, `claude` in
//! conf/catalog.yaml): a field is translated only when the profile forwards it; everything else
//! (penalties, `seed`, `top_a`, `min_p`, `repetition_penalty`, `logit_bias`, `logprobs`,
//! `verbosity`, `user`, `service_tier` …) is accepted and dropped. Tools are the exception:
//! `tools`, `tool_choice` and tool-call history are refused (400 `unsupported_parameter`)
//! because a silently dropped tool would change what the model answers.
//!
//! Mappings (`docs/wire.md#anthropic-request-body`):
//! - system/developer messages → `system` text blocks; a `cache_control` on the first system
//!   message (on the message or on one of its parts, OpenRouter style) → `cache_control`
//!   `{type: ephemeral, ttl?}` on the last system block;
//! - user/assistant messages → `messages`, adjacent same-role turns merged (the API wants
//!   alternating roles); string content or `text` / `image_url` parts; empty text dropped;
//! - `max_tokens` = `max_completion_tokens`, else `max_tokens`, else the model's
//!   `max_output_tokens` (4096 when the catalog has none), never above that cap;
//! - **temperature rule**: the client's value as sent, capped at 1 (Anthropic's range is 0–1;
//!   values above it are sent as 1), which is what Anthropic's own OpenAI-compatible endpoint
//!   does: 0.7 means 0.7 on both APIs;
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
//! - reasoning on an **effort** profile (adaptive thinking: Opus 4.6+ / Sonnet 4.6+ / the 5.x
//!   models, which refuse `budget_tokens` with a 400) → `thinking: {type: adaptive, display}`
//!   and a top-level `output_config: {effort}`; never a budget, and `max_tokens` is left as
//!   it is (the model fits its thinking into it). `display` is `summarized` (the 5.x default
//!   is `omitted`: empty thinking text) or `omitted` when the client excluded reasoning. The
//!   effort is the client's, rounded up to the nearest level the profile lists (`minimal` →
//!   lowest, `xhigh` → `max` where there is no `xhigh`); `reasoning.max_tokens` becomes an
//!   effort by the budget table above read backwards (`Effort::of_budget`: ≤ 512 minimal,
//!   ≤ 1024 low, ≤ 8192 medium, more high) — adaptive models take no budget, and a level
//!   is the closest thing to one. `reasoning: {}`, `enabled: true` or `max_tokens: -1` send
//!   adaptive thinking with no effort (the model's default). Effort `none`, budget 0 or
//!   `enabled: false` send `{type: disabled}` where the profile `can_disable`, else the
//!   lowest level (Opus 5.5, Sonnet 5.5 and Fable cannot stop thinking). No reasoning field,
//!   or only `exclude`, sends neither field: the model's default applies. With adaptive
//!   thinking on, `temperature`, `top_k` and `top_p` follow the thinking rule above.

use std::borrow::Cow;

use bytes::Bytes;
use serde::Serialize;
use serde_json::value::RawValue;

use crate::api::chat::{MessageIn, PartIn};
use crate::api::{GatewayError, RawRequest, Str};
use crate::catalog::{Profile, Thinking};
use crate::providers::common::{forwarded, part_text, reasoning_ask, stop, Ask, Effort};
use crate::providers::Target;

/// `max_tokens` when neither the client nor the catalog names one.
const FALLBACK_MAX_TOKENS: u32 = 4096;

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
    #[serde(skip_serializing_if = "Option::is_none")]
    output_config: Option<OutputConfig<'a>>,
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
#[serde(tag = "type", rename_all = "snake_case")]
enum ThinkingOut {
    /// A manual budget (budget profiles).
    Enabled {
        budget_tokens: u32,
    },
    /// The model decides how much to think (effort profiles); `display` says whether the
    /// thinking text comes back summarized or empty.
    Adaptive {
        display: &'static str,
    },
    Disabled,
}

impl ThinkingOut {
    /// Anthropic's sampling restrictions apply (they do while the model thinks).
    fn is_on(&self) -> bool {
        !matches!(self, Self::Disabled)
    }
}

/// Top-level `output_config` (not inside `thinking`): the adaptive thinking effort.
#[derive(Serialize, Debug, PartialEq, Eq)]
struct OutputConfig<'a> {
    effort: &'a str,
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
    let cap = model
        .max_output_tokens
        .unwrap_or(FALLBACK_MAX_TOKENS)
        .max(1);
    let asked = match forwarded::<u32>(req, p, "max_tokens", "max_completion_tokens")? {
        Some(n) => Some(n),
        None => forwarded::<u32>(req, p, "max_tokens", "max_tokens")?,
    };
    let mut max_tokens = asked.unwrap_or(cap).clamp(1, cap);
    let (thinking, output_config) = match &p.thinking {
        Thinking::Effort {
            levels,
            can_disable,
        } => adaptive(req, p, levels, *can_disable)?,
        _ => (budget_thinking(req, p, &mut max_tokens, cap)?, None),
    };
    let mut temperature = forwarded::<f64>(req, p, "temperature", "temperature")?.map(temperature);
    let mut top_p = forwarded::<f64>(req, p, "top_p", "top_p")?;
    let mut top_k = forwarded::<u32>(req, p, "top_k", "top_k")?.filter(|&k| k > 0);
    if thinking.as_ref().is_some_and(ThinkingOut::is_on) {
        temperature = None;
        top_k = None;
        top_p = top_p.filter(|&v| v >= 0.95);
    }
    if temperature.is_some() {
        top_p = None;
    }
    let body = MessagesRequest {
        anthropic_version: vertex.then_some(super::VERTEX_VERSION),
        model: (!vertex).then_some(target.upstream_model()),
        max_tokens,
        system,
        messages,
        temperature,
        top_p,
        top_k,
        stop_sequences: stop(req, p)?,
        thinking,
        output_config,
        stream: target.stream,
    };
    serde_json::to_vec(&body).map(Bytes::from).map_err(|e| {
        GatewayError::Internal(format!("serialising the anthropic request: {e}").into())
    })
}

/// Anthropic's temperature from OpenAI's: the same value, kept within Anthropic's 0–1.
fn temperature(openai: f64) -> f64 {
    openai.clamp(0.0, 1.0)
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

/// `thinking` from the reasoning controls on a budget profile; adjusts `max_tokens` so the
/// budget fits below it.
fn budget_thinking(
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
    Ok(Some(ThinkingOut::Enabled {
        budget_tokens: budget,
    }))
}

/// `thinking` and `output_config` from the reasoning controls on an effort profile (adaptive
/// thinking): the rules are in the module doc.
fn adaptive<'p>(
    req: &RawRequest<'_>,
    p: &Profile,
    levels: &'p [String],
    can_disable: bool,
) -> Result<(Option<ThinkingOut>, Option<OutputConfig<'p>>), GatewayError> {
    if !p.forwards("reasoning") {
        return Ok((None, None));
    }
    let Some(asked) = reasoning_ask(req)? else {
        return Ok((None, None));
    };
    let effort = match asked.ask {
        // Only asking for the text to be left out changes nothing upstream.
        Ask::Default if asked.exclude => return Ok((None, None)),
        Ask::Default | Ask::Dynamic => None,
        Ask::Budget(n) => Some(Effort::of_budget(n)),
        Ask::Effort(e) => Some(e),
    };
    if effort == Some(Effort::None) && can_disable {
        return Ok((Some(ThinkingOut::Disabled), None));
    }
    let display = if asked.exclude {
        "omitted"
    } else {
        "summarized"
    };
    let output_config = effort
        .and_then(|e| e.nearest_level(levels))
        .map(|effort| OutputConfig { effort });
    Ok((Some(ThinkingOut::Adaptive { display }), output_config))
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
        Ok(vec![PartIn::text(text)])
    }
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
            let url = p.image_url.ok_or_else(|| {
                GatewayError::invalid(format!("{}: image_url.url is required", at()))
            })?;
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
            Cow::Owned(_) => (
                Cow::Owned(media_type.to_owned()),
                Cow::Owned(data.to_owned()),
            ),
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

#[cfg(test)]
mod tests {
    use super::super::test_support::*;
    use super::temperature;
    use crate::catalog::RouteKind;
    use serde_json::{json, Value};

    fn with(extra: Value) -> Value {
        let mut req = json!({"model": "anthropic/claude-test", "messages": [{"role": "user", "content": "hi"}]});
        for (k, v) in extra.as_object().unwrap() {
            req[k] = v.clone();
        }
        req
    }

    fn err(req: Value) -> crate::api::GatewayError {
        try_body(&req).unwrap_err()
    }

    #[test]
    fn messages_system_and_merging() {
        let b = body(json!({"model": "m", "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "developer", "content": [{"type": "text", "text": "Use English."}, {"type": "text", "text": ""}]},
            {"role": "user", "content": "one"},
            {"role": "user", "content": [{"type": "text", "text": "two"}, {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]},
            {"role": "assistant", "content": "three"},
            {"role": "assistant", "content": [{"type": "text", "text": "four"}, {"type": "refusal", "refusal": "no"}]},
            {"role": "system", "content": "Late rule."},
            {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "https://x.test/a.jpg"}}]},
            {"role": "assistant", "content": null},
            {"role": "user", "content": ""}
        ]}));
        assert_eq!(
            b["system"],
            json!([{"type": "text", "text": "Be brief."}, {"type": "text", "text": "Use English."}, {"type": "text", "text": "Late rule."}])
        );
        assert_eq!(
            b["messages"],
            json!([
                {"role": "user", "content": [
                    {"type": "text", "text": "one"},
                    {"type": "text", "text": "two"},
                    {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}}]},
                {"role": "assistant", "content": [{"type": "text", "text": "three"}, {"type": "text", "text": "four"}]},
                {"role": "user", "content": [{"type": "image", "source": {"type": "url", "url": "https://x.test/a.jpg"}}]}
            ])
        );
        assert_eq!(b["model"], "claude-test");
        assert_eq!(b["max_tokens"], 64000, "the model's cap by default");
        assert!(b.get("stream").is_none());
        for bad in [
            json!([{"role": "system", "content": "only system"}]),
            json!([{"role": "wizard", "content": "x"}]),
            json!([{"role": "user", "content": [{"type": "input_audio", "input_audio": {"data": "x", "format": "wav"}}]}]),
            json!([{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "ftp://x"}}]}]),
            json!([{"role": "user", "content": 5}]),
        ] {
            let e = err(json!({"model": "m", "messages": bad}));
            assert_eq!(e.status(), 400, "{bad}: {e}");
            assert_eq!(e.code(), "invalid_request_error", "{bad}: {e}");
        }
    }

    #[test]
    fn sampling_parameters_map_and_the_rest_is_dropped() {
        let b = body(with(json!({
            "temperature": 1.4, "top_k": 40, "stop": ["END", "STOP"], "max_tokens": 500,
            "frequency_penalty": 0.5, "presence_penalty": 0.1, "seed": 7, "top_a": 0.1, "min_p": 0.1,
            "repetition_penalty": 1.1, "logit_bias": {"1": 2}, "logprobs": true, "top_logprobs": 2,
            "verbosity": "low", "user": "u1", "service_tier": "priority", "n": 2,
            "response_format": {"type": "json_object"}, "parallel_tool_calls": false,
            "stream_options": {"include_usage": true}, "metadata": {"a": "b"}
        })));
        let keys: Vec<&str> = b.as_object().unwrap().keys().map(String::as_str).collect();
        let mut keys = keys;
        keys.sort_unstable();
        assert_eq!(
            keys,
            [
                "max_tokens",
                "messages",
                "model",
                "stop_sequences",
                "temperature",
                "top_k"
            ]
        );
        assert_eq!(b["temperature"], 1.0, "capped at Anthropic's 1");
        assert_eq!(b["top_k"], 40);
        assert_eq!(b["stop_sequences"], json!(["END", "STOP"]));
        assert_eq!(b["max_tokens"], 500);

        let b = body(with(
            json!({"top_p": 0.9, "stop": "X", "top_k": 0, "max_completion_tokens": 300, "max_tokens": 900}),
        ));
        assert_eq!(b["top_p"], 0.9);
        assert_eq!(b["stop_sequences"], json!(["X"]));
        assert!(b.get("top_k").is_none(), "top_k 0 means off");
        assert_eq!(b["max_tokens"], 300, "max_completion_tokens wins");
        let b = body(with(json!({"temperature": 0.2, "top_p": 0.9})));
        assert_eq!(b["temperature"], 0.2);
        assert!(
            b.get("top_p").is_none(),
            "Claude 4.1+ rejects both together"
        );
        let b = body(with(
            json!({"max_tokens": 999_999, "temperature": null, "stop": []}),
        ));
        assert_eq!(b["max_tokens"], 64000, "capped at the model's output cap");
        assert!(b.get("temperature").is_none() && b.get("stop_sequences").is_none());
        let e = err(with(json!({"temperature": "hot"})));
        assert!(
            e.to_string().starts_with("invalid value for temperature"),
            "{e}"
        );

        let m = model(None);
        let (_, _, b) = try_built(&with(json!({})), &m, RouteKind::Anthropic, None, false).unwrap();
        assert_eq!(b["max_tokens"], 4096, "fallback without a catalog cap");
    }

    #[test]
    fn temperature_rule() {
        for (openai, want) in [
            (0.0, 0.0),
            (0.35, 0.35),
            (0.7, 0.7),
            (1.0, 1.0),
            (1.5, 1.0),
            (2.0, 1.0),
            (-1.0, 0.0),
        ] {
            assert!(
                (temperature(openai) - want).abs() < f64::EPSILON,
                "{openai}"
            );
        }
    }

    fn thinking(extra: Value) -> (Value, Value) {
        let b = body(with(extra));
        assert!(
            b.get("output_config").is_none(),
            "never on a budget profile: {b}"
        );
        (b["thinking"].clone(), b["max_tokens"].clone())
    }

    #[test]
    fn thinking_budget_is_clamped_and_fits_below_max_tokens() {
        let on = |n: u32| json!({"type": "enabled", "budget_tokens": n});
        for (extra, want, max_tokens) in [
            (
                json!({"reasoning": {"max_tokens": 2000}, "max_tokens": 8000}),
                on(2000),
                json!(8000),
            ),
            (
                json!({"reasoning": {"max_tokens": 100}, "max_tokens": 8000}),
                on(1024),
                json!(8000),
            ),
            (
                json!({"reasoning": {"max_tokens": 99999}}),
                on(63999),
                json!(64000),
            ),
            (
                json!({"reasoning": {"max_tokens": 5000}, "max_tokens": 1000}),
                on(5000),
                json!(5001),
            ),
            (
                json!({"reasoning": {"max_tokens": 2000}, "max_tokens": 2000}),
                on(2000),
                json!(2001),
            ),
            (
                json!({"reasoning_effort": "low", "max_tokens": 100}),
                on(1024),
                json!(1025),
            ),
            (
                json!({"reasoning_effort": "medium"}),
                on(8192),
                json!(64000),
            ),
            (
                json!({"reasoning": {"effort": "high"}, "max_tokens": 30000}),
                on(24576),
                json!(30000),
            ),
            (
                json!({"reasoning_effort": "xhigh"}),
                on(32768),
                json!(64000),
            ),
            (
                json!({"reasoning_effort": "minimal"}),
                on(1024),
                json!(64000),
            ),
            (json!({"reasoning": {}}), on(8192), json!(64000)),
            (
                json!({"reasoning": {"enabled": true}}),
                on(8192),
                json!(64000),
            ),
            (json!({"include_reasoning": true}), on(8192), json!(64000)),
            (
                json!({"reasoning": {"exclude": true, "effort": "low"}}),
                on(1024),
                json!(64000),
            ),
            (
                json!({"reasoning": {"exclude": true}}),
                Value::Null,
                json!(64000),
            ),
            (
                json!({"include_reasoning": false}),
                Value::Null,
                json!(64000),
            ),
            (
                json!({"reasoning_effort": "none"}),
                Value::Null,
                json!(64000),
            ),
            (
                json!({"reasoning": {"max_tokens": 0}}),
                Value::Null,
                json!(64000),
            ),
            (
                json!({"reasoning": {"enabled": false}}),
                Value::Null,
                json!(64000),
            ),
            (json!({}), Value::Null, json!(64000)),
        ] {
            assert_eq!(thinking(extra.clone()), (want, max_tokens), "{extra}");
        }
        // A model cap leaves the budget below it.
        let m = model(Some(2000));
        let (_, _, b) = try_built(
            &with(json!({"reasoning": {"max_tokens": 5000}})),
            &m,
            RouteKind::Anthropic,
            None,
            false,
        )
        .unwrap();
        assert_eq!(b["thinking"], on(1999));
        assert_eq!(b["max_tokens"], 2000);
        // With thinking on, modified temperature and top_k are not allowed; top_p ≥ 0.95 is.
        let b = body(with(
            json!({"reasoning_effort": "low", "temperature": 0.3, "top_k": 5, "top_p": 0.97}),
        ));
        assert!(b.get("temperature").is_none() && b.get("top_k").is_none());
        assert_eq!(b["top_p"], 0.97);
        let b = body(with(json!({"reasoning_effort": "low", "top_p": 0.5})));
        assert!(b.get("top_p").is_none());
        let e = err(with(json!({"reasoning_effort": "max"})));
        assert!(
            e.to_string()
                .starts_with("invalid value for reasoning_effort"),
            "{e}"
        );
    }

    const ALL_LEVELS: &[&str] = &["low", "medium", "high", "xhigh", "max"];

    /// The body for `extra` on a model with an effort profile (`[temperature, top_p, top_k,
    /// max_tokens, stop, reasoning]` forwarded, output cap 64000), on the direct route.
    fn adaptive_body(extra: Value, levels: &[&str], can_disable: bool) -> Value {
        let m = effort_model(levels, can_disable);
        try_built(&with(extra), &m, RouteKind::Anthropic, None, false)
            .unwrap()
            .2
    }

    /// (`thinking`, `output_config`) sent for `extra`.
    fn adaptive(extra: Value, levels: &[&str], can_disable: bool) -> (Value, Value) {
        let b = adaptive_body(extra, levels, can_disable);
        assert!(
            b["thinking"].get("budget_tokens").is_none(),
            "never a budget: {b}"
        );
        assert!(
            b["thinking"].get("effort").is_none(),
            "effort is top-level: {b}"
        );
        (b["thinking"].clone(), b["output_config"].clone())
    }

    fn summarized() -> Value {
        json!({"type": "adaptive", "display": "summarized"})
    }

    #[test]
    fn effort_profiles_map_every_openai_effort_to_a_level() {
        let no_xhigh = &["low", "medium", "high", "max"];
        for (effort, level, without_xhigh) in [
            ("minimal", "low", "low"),
            ("low", "low", "low"),
            ("medium", "medium", "medium"),
            ("high", "high", "high"),
            ("xhigh", "xhigh", "max"),
        ] {
            for can_disable in [false, true] {
                for extra in [
                    json!({"reasoning_effort": effort}),
                    json!({"reasoning": {"effort": effort}}),
                ] {
                    assert_eq!(
                        adaptive(extra.clone(), ALL_LEVELS, can_disable),
                        (summarized(), json!({"effort": level})),
                        "{extra}"
                    );
                }
            }
            assert_eq!(
                adaptive(json!({"reasoning_effort": effort}), no_xhigh, false),
                (summarized(), json!({"effort": without_xhigh})),
                "{effort} without xhigh"
            );
        }
        // `none`: off where the model allows it, else the least thinking there is.
        for off in [
            json!({"reasoning_effort": "none"}),
            json!({"reasoning": {"enabled": false}}),
            json!({"reasoning": {"max_tokens": 0}}),
        ] {
            assert_eq!(
                adaptive(off.clone(), ALL_LEVELS, true),
                (json!({"type": "disabled"}), Value::Null),
                "{off}"
            );
            assert_eq!(
                adaptive(off.clone(), ALL_LEVELS, false),
                (summarized(), json!({"effort": "low"})),
                "{off}"
            );
        }
    }

    #[test]
    fn effort_profiles_read_budgets_as_efforts() {
        for (tokens, level) in [
            (1, "low"),
            (512, "low"),
            (1024, "low"),
            (1025, "medium"),
            (8192, "medium"),
            (20000, "high"),
            (100_000, "high"),
        ] {
            assert_eq!(
                adaptive(
                    json!({"reasoning": {"max_tokens": tokens}}),
                    ALL_LEVELS,
                    false
                ),
                (summarized(), json!({"effort": level})),
                "{tokens}"
            );
        }
        // The budget wins over an effort, as on budget profiles.
        assert_eq!(
            adaptive(
                json!({"reasoning": {"max_tokens": 2000, "effort": "high"}}),
                ALL_LEVELS,
                false
            ),
            (summarized(), json!({"effort": "medium"}))
        );
        // Dynamic or no amount: adaptive thinking at the model's default effort.
        for extra in [
            json!({"reasoning": {"max_tokens": -1}}),
            json!({"reasoning": {"enabled": true}}),
            json!({"reasoning": {}}),
            json!({"include_reasoning": true}),
        ] {
            assert_eq!(
                adaptive(extra.clone(), ALL_LEVELS, false),
                (summarized(), Value::Null),
                "{extra}"
            );
        }
    }

    #[test]
    fn effort_profiles_leave_out_the_text_or_send_nothing() {
        let omitted = json!({"type": "adaptive", "display": "omitted"});
        for (extra, want) in [
            (
                json!({"reasoning": {"effort": "high", "exclude": true}}),
                (omitted.clone(), json!({"effort": "high"})),
            ),
            (
                json!({"include_reasoning": false, "reasoning_effort": "low"}),
                (omitted.clone(), json!({"effort": "low"})),
            ),
            (
                json!({"reasoning": {"enabled": true, "exclude": true}}),
                (omitted.clone(), Value::Null),
            ),
            // Only leaving the text out: nothing to ask upstream (its default applies).
            (
                json!({"reasoning": {"exclude": true}}),
                (Value::Null, Value::Null),
            ),
            (
                json!({"include_reasoning": false}),
                (Value::Null, Value::Null),
            ),
            // No reasoning field at all: the model's default.
            (json!({}), (Value::Null, Value::Null)),
            (
                json!({"reasoning": null, "reasoning_effort": null}),
                (Value::Null, Value::Null),
            ),
        ] {
            assert_eq!(adaptive(extra.clone(), ALL_LEVELS, false), want, "{extra}");
        }
        let e = try_built(
            &with(json!({"reasoning_effort": "max"})),
            &effort_model(ALL_LEVELS, false),
            RouteKind::Anthropic,
            None,
            false,
        )
        .unwrap_err();
        assert!(
            e.to_string()
                .starts_with("invalid value for reasoning_effort"),
            "OpenAI's values only: {e}"
        );
    }

    #[test]
    fn effort_profiles_keep_max_tokens_and_follow_the_sampling_rule() {
        let b = adaptive_body(
            json!({"reasoning_effort": "xhigh", "max_tokens": 100}),
            ALL_LEVELS,
            false,
        );
        assert_eq!(b["max_tokens"], 100, "no budget to make room for");
        let b = adaptive_body(json!({"reasoning_effort": "high"}), ALL_LEVELS, false);
        assert_eq!(b["max_tokens"], 64000);
        // Thinking on: modified temperature and top_k dropped, top_p kept from 0.95.
        let b = adaptive_body(
            json!({"reasoning_effort": "low", "temperature": 0.3, "top_k": 5, "top_p": 0.97}),
            ALL_LEVELS,
            false,
        );
        assert!(
            b.get("temperature").is_none() && b.get("top_k").is_none(),
            "{b}"
        );
        assert_eq!(b["top_p"], 0.97);
        // Thinking off, or not asked for: sampling as sent (the profile decides).
        for extra in [
            json!({"reasoning_effort": "none", "temperature": 0.3, "top_k": 5}),
            json!({"temperature": 0.3, "top_k": 5}),
        ] {
            let b = adaptive_body(extra.clone(), ALL_LEVELS, true);
            assert_eq!(
                (b["temperature"].clone(), b["top_k"].clone()),
                (json!(0.3), json!(5)),
                "{extra}"
            );
        }
        // A profile that does not forward reasoning sends no thinking at all.
        let mut m = effort_model(ALL_LEVELS, false);
        std::sync::Arc::make_mut(&mut m.profile)
            .forward
            .retain(|f| f != "reasoning");
        let (_, _, b) = try_built(
            &with(json!({"reasoning_effort": "high"})),
            &m,
            RouteKind::Anthropic,
            None,
            false,
        )
        .unwrap();
        assert!(
            b.get("thinking").is_none() && b.get("output_config").is_none(),
            "{b}"
        );
        // Vertex gets the same fields beside its envelope.
        let (_, _, b) = try_built(
            &with(json!({"reasoning_effort": "medium"})),
            &effort_model(ALL_LEVELS, false),
            RouteKind::VertexAnthropic,
            Some("us-east5"),
            true,
        )
        .unwrap();
        assert_eq!(b["thinking"], summarized());
        assert_eq!(b["output_config"], json!({"effort": "medium"}));
        assert_eq!(b["anthropic_version"], "vertex-2023-10-16");
    }

    #[test]
    fn cache_control_on_the_system_message_marks_the_last_system_block() {
        let b = body(json!({"model": "m", "messages": [
            {"role": "system", "content": [
                {"type": "text", "text": "long doc", "cache_control": {"type": "ephemeral", "ttl": "1h"}},
                {"type": "text", "text": "rules"}]},
            {"role": "user", "content": "q"}
        ]}));
        assert_eq!(
            b["system"],
            json!([{"type": "text", "text": "long doc"},
                   {"type": "text", "text": "rules", "cache_control": {"type": "ephemeral", "ttl": "1h"}}])
        );
        let b = body(json!({"model": "m", "messages": [
            {"role": "system", "content": "doc", "cache_control": {"type": "ephemeral"}},
            {"role": "system", "content": "more"},
            {"role": "user", "content": "q"}
        ]}));
        assert_eq!(
            b["system"],
            json!([{"type": "text", "text": "doc"},
                   {"type": "text", "text": "more", "cache_control": {"type": "ephemeral"}}])
        );
        let b = body(
            json!({"model": "m", "messages": [{"role": "system", "content": "doc"}, {"role": "user", "content": "q"}]}),
        );
        assert_eq!(b["system"], json!([{"type": "text", "text": "doc"}]));
        let b = body(
            json!({"model": "m", "messages": [{"role": "user", "content": [
            {"type": "text", "text": "big", "cache_control": {"type": "ephemeral", "ttl": "5m"}}]}]}),
        );
        assert_eq!(
            b["messages"][0]["content"][0]["cache_control"],
            json!({"type": "ephemeral", "ttl": "5m"})
        );
    }

    #[test]
    fn tools_are_refused_naming_the_parameter() {
        let tool = json!([{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]);
        for (extra, param) in [
            (json!({"tools": tool}), "tools"),
            (json!({"tools": []}), "tools"),
            (json!({"tool_choice": "auto"}), "tool_choice"),
        ] {
            let e = err(with(extra.clone()));
            assert_eq!(e.status(), 400);
            assert_eq!(e.code(), "unsupported_parameter");
            assert_eq!(
                e.to_string(),
                format!("{param} is not supported by model \"anthropic/claude-test\""),
                "{extra}"
            );
        }
        body(with(json!({"tools": null, "tool_choice": null})));
        // History from another family: ids with characters outside [A-Za-z0-9_-] must not
        // break anything — tool calls are refused the same way.
        for messages in [
            json!([{"role": "user", "content": "hi"},
                   {"role": "assistant", "content": null, "tool_calls": [{"id": "call_Ab3x_0.CiIB+/9a8w==", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
                   {"role": "tool", "tool_call_id": "call_Ab3x_0.CiIB+/9a8w==", "content": "ok"}]),
            json!([{"role": "user", "content": "hi"}, {"role": "tool", "tool_call_id": "a.b/c", "content": "ok"}]),
        ] {
            let e = err(json!({"model": "m", "messages": messages}));
            assert_eq!(e.code(), "unsupported_parameter", "{e}");
            assert!(
                e.to_string().starts_with("tool_calls is not supported"),
                "{e}"
            );
        }
        body(
            json!({"model": "m", "messages": [{"role": "assistant", "content": "x", "tool_calls": []}, {"role": "user", "content": "y"}]}),
        );
    }
}
