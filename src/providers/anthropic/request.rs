//! OpenAI chat body → Anthropic Messages API body.
//!
//! Driven by the model's parameter profile (`catalog::Profile`, `claude` in
//! conf/catalog.yaml): a field is translated only when the profile forwards it; everything else
//! (penalties, `seed`, `top_a`, `min_p`, `repetition_penalty`, `logit_bias`, `logprobs`,
//! `verbosity`, `user`, `service_tier` …) is accepted and dropped. Tools are the exception:
//! they are always translated (never dropped, whatever the profile says: a silently dropped
//! tool would change what the model answers). Whether a door offers them is decided before the
//! adapter: the chat door refuses them on Claude at admission ([`tool_parameter`] names the
//! parameter), the Responses door runs its tool loops through here.
//!
//! Mappings (`docs/wire.md#anthropic-request-body`):
//! - system/developer messages → `system` text blocks; user/assistant messages → `messages`,
//!   adjacent same-role turns merged (the API wants alternating roles); string content or
//!   `text` / `image_url` parts; empty text dropped;
//! - `tools` (function tools only, anything else is a 400) → `tools: [{name, description,
//!   input_schema}]`, `input_schema` the `parameters` as written (`{"type":"object"}` when
//!   absent), `strict` dropped;
//! - `tool_choice` `auto` / `required` / `none` / `{type: function, function: {name}}` →
//!   `{type: auto}` / `{type: any}` / `{type: none}` / `{type: tool, name}`;
//!   `parallel_tool_calls: false` → `disable_parallel_tool_use: true` on it (on `{type: auto}`
//!   when no choice was given; not on `none`). Without tools neither is sent (Anthropic takes
//!   no `tool_choice` without tools). A forcing choice (`any`, `tool`) becomes `auto` where
//!   Anthropic refuses it: with budget thinking on (`thinking: {type: enabled}`: "Thinking may
//!   not be enabled when tool_choice forces tool use"), and on profiles whose models cannot
//!   stop thinking (`claude-5.5`: Opus 5.5, Sonnet 5.5 and Fable 5.1 answer any forced tool
//!   use with a 400; Haiku 5.5 shares the profile and loses only the forcing). Adaptive
//!   thinking elsewhere accepts a forced tool (the model then skips its thinking): sent as is;
//! - assistant `tool_calls` → `tool_use` blocks after the text: `id` as sent (an id with
//!   characters outside Anthropic's `[A-Za-z0-9_-]`, from another family's history, has each
//!   such byte written `_XX` in hex, the same in its `tool_result`), `name`, `input` = the
//!   `arguments` JSON object as written (empty arguments → `{}`; anything but an object is a
//!   400: a guessed `{}` would replay a call the model never made);
//! - `tool` messages → `{type: tool_result, tool_use_id, content}` (a string, or the text
//!   parts as text blocks; left out when empty) in a `user` turn; consecutive tool messages and
//!   the user message after them are one user turn, its `tool_result` blocks first (Anthropic
//!   wants them at the start of the turn after the `tool_use`). The legacy `function` role is
//!   refused (it has no call id to answer);
//! - assistant `reasoning_details` (Claude's own, as the answers give them: `reasoning.text`
//!   with its `signature` → `{type: thinking, thinking, signature}`, `reasoning.encrypted` →
//!   `{type: redacted_thinking, data}`; an entry without its signature or data, or of another
//!   type, is skipped) → those blocks first in the assistant turn, unmodified, when this
//!   request thinks: thinking sent on, or an effort profile with no `thinking` sent (the
//!   model's default, on for the adaptive-only generations). Anthropic wants the last
//!   assistant turn's thinking back when a tool loop continues with thinking on, and ignores
//!   earlier ones; with thinking off they are left out. A last assistant turn that calls tools
//!   without signed thinking (another model's, a switch or a failover away) is refused with
//!   thinking on, so such a request is sent with `{type: disabled}` where the profile can
//!   disable thinking (not on Opus 5.5 and Fable, which refuse it);
//! - `cache_control` (OpenRouter style, `{type: ephemeral, ttl?}`) wherever the client put it:
//!   on a system message → its last system block; on a user/assistant message → its last block
//!   (thinking blocks take none); on a part → that part's block; on a `tool` message or its
//!   parts → its `tool_result` block. Claude takes at most 4 breakpoints: the last 4 in prompt
//!   order (system, then messages) are kept, earlier ones dropped — in an agent loop the
//!   rolling breakpoints at the end are the ones that pay;
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
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use crate::api::chat::{
    self, CacheControlIn, MessageIn, NamedFunctionIn, PartIn, ReasoningDetailIn, Text, ToolCallIn,
};
use crate::api::{GatewayError, RawRequest, Str};
use crate::catalog::{Profile, Thinking};
use crate::providers::common::{forwarded, part_text, reasoning_ask, stop, Ask, Effort};
use crate::providers::Target;

/// `max_tokens` when neither the client nor the catalog names one.
const FALLBACK_MAX_TOKENS: u32 = 4096;

/// The most `cache_control` breakpoints one Messages API request may carry.
const MAX_BREAKPOINTS: usize = 4;

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
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tools: Vec<ToolOut<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_choice: Option<ToolChoiceOut<'a>>,
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
        text: Text<'a>,
        #[serde(skip_serializing_if = "Option::is_none")]
        cache_control: Option<CacheControl<'a>>,
    },
    Image {
        source: ImageSource<'a>,
        #[serde(skip_serializing_if = "Option::is_none")]
        cache_control: Option<CacheControl<'a>>,
    },
    ToolUse {
        id: Cow<'a, str>,
        name: Cow<'a, str>,
        input: Cow<'a, RawValue>,
        #[serde(skip_serializing_if = "Option::is_none")]
        cache_control: Option<CacheControl<'a>>,
    },
    ToolResult {
        tool_use_id: Cow<'a, str>,
        #[serde(skip_serializing_if = "Option::is_none")]
        content: Option<ToolResultContent<'a>>,
        #[serde(skip_serializing_if = "Option::is_none")]
        cache_control: Option<CacheControl<'a>>,
    },
    /// Replayed as the answer gave it: Anthropic checks the signature.
    Thinking {
        thinking: Cow<'a, str>,
        signature: Cow<'a, str>,
    },
    RedactedThinking {
        data: Cow<'a, str>,
    },
}

impl<'a> Block<'a> {
    /// The block's breakpoint slot; `None` for blocks that take none (thinking).
    fn cache_control(&mut self) -> Option<&mut Option<CacheControl<'a>>> {
        match self {
            Self::Text { cache_control, .. }
            | Self::Image { cache_control, .. }
            | Self::ToolUse { cache_control, .. }
            | Self::ToolResult { cache_control, .. } => Some(cache_control),
            Self::Thinking { .. } | Self::RedactedThinking { .. } => None,
        }
    }

    fn is_marked(&self) -> bool {
        match self {
            Self::Text { cache_control, .. }
            | Self::Image { cache_control, .. }
            | Self::ToolUse { cache_control, .. }
            | Self::ToolResult { cache_control, .. } => cache_control.is_some(),
            Self::Thinking { .. } | Self::RedactedThinking { .. } => false,
        }
    }
}

/// A `tool_result`'s content: the tool message's string, or its text parts as blocks.
#[derive(Serialize)]
#[serde(untagged)]
enum ToolResultContent<'a> {
    Text(Cow<'a, str>),
    Blocks(Vec<Block<'a>>),
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

impl<'a> CacheControl<'a> {
    fn of(cc: CacheControlIn<'a>) -> Self {
        CacheControl {
            kind: "ephemeral",
            ttl: cc.ttl.map(|t| t.0),
        }
    }
}

#[derive(Serialize)]
struct ToolOut<'a> {
    name: Cow<'a, str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    description: Option<Cow<'a, str>>,
    input_schema: &'a RawValue,
}

/// A JSON value the translation writes itself (`{}`, `{"type":"object"}`).
fn literal(json: &'static str) -> Result<&'static RawValue, GatewayError> {
    serde_json::from_str(json)
        .map_err(|e| GatewayError::Internal(format!("literal {json}: {e}").into()))
}

#[derive(Serialize, Debug, PartialEq, Eq)]
#[serde(tag = "type", rename_all = "snake_case")]
enum ToolChoiceOut<'a> {
    Auto {
        #[serde(skip_serializing_if = "std::ops::Not::not")]
        disable_parallel_tool_use: bool,
    },
    Any {
        #[serde(skip_serializing_if = "std::ops::Not::not")]
        disable_parallel_tool_use: bool,
    },
    Tool {
        name: Cow<'a, str>,
        #[serde(skip_serializing_if = "std::ops::Not::not")]
        disable_parallel_tool_use: bool,
    },
    None,
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
    let model = target.model;
    let p = &model.profile;
    let cap = model
        .max_output_tokens
        .unwrap_or(FALLBACK_MAX_TOKENS)
        .max(1);
    let asked = match forwarded::<u32>(req, p, "max_tokens", "max_completion_tokens")? {
        Some(n) => Some(n),
        None => forwarded::<u32>(req, p, "max_tokens", "max_tokens")?,
    };
    let mut max_tokens = asked.unwrap_or(cap).clamp(1, cap);
    let (mut thinking, mut output_config) = match &p.thinking {
        Thinking::Effort {
            levels,
            can_disable,
        } => adaptive(req, p, levels, *can_disable)?,
        _ => (budget_thinking(req, p, &mut max_tokens, cap)?, None),
    };
    // Whether the model thinks on this request: as sent, else the effort models' default.
    let thinks = match &thinking {
        Some(t) => t.is_on(),
        None => matches!(p.thinking, Thinking::Effort { .. }),
    };
    let (system, mut messages) = conversation(req, thinks)?;
    if thinks && tool_turn_unsigned(&messages) && can_disable(&p.thinking) {
        // A thinking model refuses a tool loop whose last assistant turn does not start with
        // its signed thinking, and a turn another model made (or this one without thinking)
        // has none: as Anthropic advises, that request goes without thinking, and so without
        // the earlier turns' thinking (what `conversation` leaves out when not thinking).
        (thinking, output_config) = (Some(ThinkingOut::Disabled), None);
        for m in &mut messages {
            m.content
                .retain(|b| !matches!(b, Block::Thinking { .. } | Block::RedactedThinking { .. }));
        }
    }
    let tools = tools(req)?;
    // Where Anthropic refuses a forced tool (module doc), the choice becomes `auto`.
    let refuses_forcing = matches!(thinking, Some(ThinkingOut::Enabled { .. }))
        || matches!(
            p.thinking,
            Thinking::Effort {
                can_disable: false,
                ..
            }
        );
    let tool_choice =
        tool_choice(req, !tools.is_empty())?
            .map(|c| if refuses_forcing { c.unforced() } else { c });
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
        tools,
        tool_choice,
        temperature,
        top_p,
        top_k,
        stop_sequences: stop(req, p)?,
        thinking,
        output_config,
        stream: target.stream,
    };
    crate::api::json::to_vec(&body)
        .map(Bytes::from)
        .map_err(|e| {
            GatewayError::Internal(format!("serialising the anthropic request: {e}").into())
        })
}

/// Whether the last assistant turn calls tools without starting with thinking: what a thinking
/// model refuses to continue (the simulator holds the same rule).
fn tool_turn_unsigned(messages: &[Message<'_>]) -> bool {
    let Some(last) = messages.iter().rev().find(|m| m.role == "assistant") else {
        return false;
    };
    let calls = last
        .content
        .iter()
        .any(|b| matches!(b, Block::ToolUse { .. }));
    let signed = matches!(
        last.content.first(),
        Some(Block::Thinking { .. } | Block::RedactedThinking { .. })
    );
    calls && !signed
}

/// Whether the profile can send `{type: disabled}` (Opus 5.5 and Fable always think).
fn can_disable(thinking: &Thinking) -> bool {
    matches!(
        thinking,
        Thinking::Budget {
            can_disable: true,
            ..
        } | Thinking::Effort {
            can_disable: true,
            ..
        }
    )
}

/// Anthropic's temperature from OpenAI's: the same value, kept within Anthropic's 0–1.
fn temperature(openai: f64) -> f64 {
    openai.clamp(0.0, 1.0)
}

/// Which tool parameter a chat request uses, if any — `tools`, `tool_choice` (either present
/// and not null), or `tool_calls` for tool history (an assistant message with tool calls, or a
/// `tool` / legacy `function` message) — so that a door that does not offer tools on Claude
/// can refuse the request naming it. Reads only roles and the presence of `tool_calls`; a body
/// too malformed to read says `None` (its translation refuses it).
pub fn tool_parameter(req: &RawRequest<'_>) -> Option<&'static str> {
    #[derive(Deserialize)]
    struct Turn<'a> {
        #[serde(borrow, default)]
        role: Option<Str<'a>>,
        #[serde(borrow, default)]
        tool_calls: Option<&'a RawValue>,
    }
    for param in ["tools", "tool_choice"] {
        if req.get(param).is_some_and(|v| v.get() != "null") {
            return Some(param);
        }
    }
    let messages = req.typed::<Vec<Turn>>("messages").ok().flatten()?;
    let history = messages.iter().any(|m| {
        let calls = m
            .tool_calls
            .map(|c| c.get().trim_start_matches('[').trim_start())
            .is_some_and(|rest| !rest.starts_with(']') && rest != "null");
        calls
            || m.role
                .as_deref()
                .is_some_and(|r| r == "tool" || r == "function")
    });
    history.then_some("tool_calls")
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

// ----- tools ---------------------------------------------------------------------------------

fn tools<'a>(req: &RawRequest<'a>) -> Result<Vec<ToolOut<'a>>, GatewayError> {
    chat::function_tools(req)?
        .into_iter()
        .map(|function| {
            Ok(ToolOut {
                name: function.name.0,
                description: function.description.map(|d| d.0),
                input_schema: match function.parameters {
                    Some(schema) => schema,
                    None => literal(r#"{"type":"object"}"#)?,
                },
            })
        })
        .collect()
}

/// `tool_choice` with `parallel_tool_calls`; `None` without tools (Anthropic refuses a choice
/// with nothing to choose from), but a malformed choice is refused either way.
fn tool_choice<'a>(
    req: &RawRequest<'a>,
    has_tools: bool,
) -> Result<Option<ToolChoiceOut<'a>>, GatewayError> {
    let bad = || {
        GatewayError::invalid("invalid value for tool_choice: expected \"auto\", \"none\", \"required\" or {\"type\":\"function\",\"function\":{\"name\":…}}")
    };
    let raw = req.get("tool_choice").filter(|r| r.get() != "null");
    let choice = match raw {
        None => None,
        Some(raw) if raw.get().starts_with('{') => {
            let named: NamedFunctionIn<'a> = serde_json::from_str(raw.get()).map_err(|_| bad())?;
            Some(ToolChoiceOut::Tool {
                name: named.function.name.0,
                disable_parallel_tool_use: false,
            })
        }
        Some(raw) => Some(
            match &*serde_json::from_str::<Str>(raw.get()).map_err(|_| bad())? {
                "auto" => ToolChoiceOut::Auto {
                    disable_parallel_tool_use: false,
                },
                "required" => ToolChoiceOut::Any {
                    disable_parallel_tool_use: false,
                },
                "none" => ToolChoiceOut::None,
                _ => return Err(bad()),
            },
        ),
    };
    if !has_tools {
        return Ok(None);
    }
    let single = req.typed::<Option<bool>>("parallel_tool_calls")?.flatten() == Some(false);
    let choice = match choice {
        None if single => Some(ToolChoiceOut::Auto {
            disable_parallel_tool_use: true,
        }),
        other => other,
    };
    Ok(choice.map(|c| c.one_call_at_most(single)))
}

impl<'a> ToolChoiceOut<'a> {
    /// `parallel_tool_calls: false` on a choice that lets the model call (not `none`).
    fn one_call_at_most(mut self, single: bool) -> Self {
        if let Self::Auto {
            disable_parallel_tool_use,
        }
        | Self::Any {
            disable_parallel_tool_use,
        }
        | Self::Tool {
            disable_parallel_tool_use,
            ..
        } = &mut self
        {
            *disable_parallel_tool_use = single;
        }
        self
    }

    /// `auto` in place of a choice that forces a tool, keeping the parallel setting.
    fn unforced(self) -> Self {
        match self {
            Self::Any {
                disable_parallel_tool_use,
            }
            | Self::Tool {
                disable_parallel_tool_use,
                ..
            } => Self::Auto {
                disable_parallel_tool_use,
            },
            other => other,
        }
    }
}

// ----- conversation --------------------------------------------------------------------------

/// One turn being built from adjacent messages of its role. `front` holds what Anthropic wants
/// at the start of the turn whatever the order of the messages merged into it: a user turn's
/// `tool_result` blocks, an assistant turn's thinking blocks.
struct Turn<'a> {
    role: &'static str,
    front: Vec<Block<'a>>,
    rest: Vec<Block<'a>>,
}

/// The system blocks and the alternating messages, with at most 4 breakpoints.
fn conversation<'a>(
    req: &RawRequest<'a>,
    thinks: bool,
) -> Result<(Vec<Block<'a>>, Vec<Message<'a>>), GatewayError> {
    let mut system = Vec::new();
    let mut turns: Vec<Turn<'a>> = Vec::new();
    for (i, m) in chat::messages::<MessageIn<'a>>(req)?.enumerate() {
        let m = m?;
        let (role, front, rest) = match &*m.role {
            "system" | "developer" => {
                system_blocks(i, m, &mut system)?;
                continue;
            }
            "user" => {
                let mut rest = blocks(i, m.content, "user")?;
                mark_last(&mut rest, m.cache_control);
                ("user", Vec::new(), rest)
            }
            "assistant" => {
                let mut rest = blocks(i, m.content, "assistant")?;
                for (j, call) in m.tool_calls.unwrap_or_default().into_iter().enumerate() {
                    rest.push(tool_use(i, j, call)?);
                }
                mark_last(&mut rest, m.cache_control);
                // A turn of thinking alone says nothing: left out with its thinking.
                let front = match (thinks, rest.is_empty()) {
                    (true, false) => reasoning_blocks(m.reasoning_details),
                    _ => Vec::new(),
                };
                ("assistant", front, rest)
            }
            "tool" => ("user", vec![tool_result(i, m)?], Vec::new()),
            "function" => {
                return Err(GatewayError::invalid(format!(
                    "messages[{i}]: the legacy function role is not supported; answer tool_calls with tool messages"
                )))
            }
            other => {
                return Err(GatewayError::invalid(format!(
                    "messages[{i}]: unknown role {other:?}"
                )))
            }
        };
        if front.is_empty() && rest.is_empty() {
            continue;
        }
        match turns.last_mut() {
            Some(last) if last.role == role => {
                last.front.extend(front);
                last.rest.extend(rest);
            }
            _ => turns.push(Turn { role, front, rest }),
        }
    }
    if turns.is_empty() {
        return Err(GatewayError::invalid(
            "messages must include at least one non-empty user or assistant message",
        ));
    }
    let mut messages: Vec<Message<'a>> = turns
        .into_iter()
        .map(|mut t| {
            t.front.append(&mut t.rest);
            Message {
                role: t.role,
                content: t.front,
            }
        })
        .collect();
    keep_last_breakpoints(&mut system, &mut messages);
    Ok((system, messages))
}

/// A system message's text blocks, appended to `system`; its own breakpoint marks its last
/// block.
fn system_blocks<'a>(
    i: usize,
    m: MessageIn<'a>,
    system: &mut Vec<Block<'a>>,
) -> Result<(), GatewayError> {
    let start = system.len();
    for (j, p) in content(i, m.content)?.into_iter().enumerate() {
        if &*p.kind != "text" {
            return Err(GatewayError::invalid(format!(
                "messages[{i}].content[{j}]: a system message holds text parts only"
            )));
        }
        let text = part_text(i, j, p.text)?;
        if !text.is_empty() {
            system.push(Block::Text {
                text,
                cache_control: p.cache_control.map(CacheControl::of),
            });
        }
    }
    let mut own = system.split_off(start);
    mark_last(&mut own, m.cache_control);
    system.append(&mut own);
    Ok(())
}

/// A message's content blocks (parts that carry nothing left out).
fn blocks<'a>(
    i: usize,
    raw: Option<&'a RawValue>,
    role: &str,
) -> Result<Vec<Block<'a>>, GatewayError> {
    let parts = content(i, raw)?;
    let mut out = Vec::with_capacity(parts.len());
    for (j, p) in parts.into_iter().enumerate() {
        if let Some(b) = block(i, j, p, role)? {
            out.push(b);
        }
    }
    Ok(out)
}

/// A message-level breakpoint on the last of the message's blocks that takes one.
fn mark_last<'a>(blocks: &mut [Block<'a>], cc: Option<CacheControlIn<'a>>) {
    let Some(cc) = cc else {
        return;
    };
    if let Some(slot) = blocks.iter_mut().rev().find_map(Block::cache_control) {
        *slot = Some(CacheControl::of(cc));
    }
}

/// Claude refuses more than 4 breakpoints: the earliest are dropped, in prompt order (system
/// blocks, then messages), so the last 4 stay.
fn keep_last_breakpoints<'a>(system: &mut [Block<'a>], messages: &mut [Message<'a>]) {
    let marked = system
        .iter()
        .chain(messages.iter().flat_map(|m| m.content.iter()))
        .filter(|b| b.is_marked())
        .count();
    let mut extra = marked.saturating_sub(MAX_BREAKPOINTS);
    let blocks = system
        .iter_mut()
        .chain(messages.iter_mut().flat_map(|m| m.content.iter_mut()));
    for b in blocks {
        if extra == 0 {
            break;
        }
        if let Some(slot @ Some(_)) = b.cache_control() {
            *slot = None;
            extra -= 1;
        }
    }
}

/// An assistant message's signed reasoning as Claude gave it, in order: thinking text with
/// its signature, or redacted thinking. Entries Claude could not check are skipped.
fn reasoning_blocks<'a>(details: Option<Vec<ReasoningDetailIn<'a>>>) -> Vec<Block<'a>> {
    let present = |s: Option<Str<'a>>| s.filter(|s| !s.is_empty()).map(|s| s.0);
    details
        .unwrap_or_default()
        .into_iter()
        .filter_map(|d| match &*d.kind {
            "reasoning.text" => Some(Block::Thinking {
                signature: present(d.signature)?,
                thinking: d.text.map_or(Cow::Borrowed(""), |t| t.0),
            }),
            "reasoning.encrypted" => Some(Block::RedactedThinking {
                data: present(d.data)?,
            }),
            _ => None,
        })
        .collect()
}

/// One assistant tool call as a `tool_use` block.
fn tool_use<'a>(i: usize, j: usize, call: ToolCallIn<'a>) -> Result<Block<'a>, GatewayError> {
    let input = arguments(call.function.arguments)?.ok_or_else(|| {
        GatewayError::invalid(format!(
            "messages[{i}].tool_calls[{j}].function.arguments must be a JSON object"
        ))
    })?;
    Ok(Block::ToolUse {
        id: tool_id(call.id.0),
        name: call.function.name.0,
        input,
        cache_control: None,
    })
}

/// A tool-call `arguments` string as a JSON object (`""` means none); `None` when it is not
/// one.
fn arguments(args: Option<Str<'_>>) -> Result<Option<Cow<'_, RawValue>>, GatewayError> {
    let args = match args {
        Some(a) if !a.trim().is_empty() => a.0,
        _ => return literal("{}").map(|v| Some(Cow::Borrowed(v))),
    };
    let raw = match args {
        Cow::Borrowed(s) => serde_json::from_str::<&RawValue>(s.trim())
            .ok()
            .map(Cow::Borrowed),
        Cow::Owned(s) => serde_json::from_str::<Box<RawValue>>(s.trim())
            .ok()
            .map(Cow::Owned),
    };
    Ok(raw.filter(|r| r.get().starts_with('{')))
}

/// A tool-call id as Anthropic takes it (`^[a-zA-Z0-9_-]+$`): as sent when it is one, else
/// each other byte written `_XX` (hex) — the same in the `tool_use` and in its `tool_result`.
fn tool_id(id: Cow<'_, str>) -> Cow<'_, str> {
    let ok = |b: u8| b.is_ascii_alphanumeric() || b == b'_' || b == b'-';
    if id.bytes().all(ok) {
        return id;
    }
    let mut out = String::with_capacity(id.len() * 3);
    for b in id.bytes() {
        if ok(b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("_{b:02X}"));
        }
    }
    Cow::Owned(out)
}

/// A `tool` message as a `tool_result` block; a breakpoint on the message or on any of its
/// parts marks the block.
fn tool_result<'a>(i: usize, m: MessageIn<'a>) -> Result<Block<'a>, GatewayError> {
    let id = m.tool_call_id.ok_or_else(|| {
        GatewayError::invalid(format!(
            "messages[{i}]: a tool message needs a tool_call_id"
        ))
    })?;
    let mut cache_control = m.cache_control.map(CacheControl::of);
    let bad = |e: serde_json::Error| GatewayError::invalid(format!("messages[{i}].content: {e}"));
    let content = match m.content.filter(|r| r.get() != "null") {
        None => None,
        Some(raw) if raw.get().starts_with('[') => {
            let parts: Vec<PartIn<'a>> = serde_json::from_str(raw.get()).map_err(bad)?;
            let mut texts = Vec::with_capacity(parts.len());
            for (j, p) in parts.into_iter().enumerate() {
                if &*p.kind != "text" {
                    return Err(GatewayError::invalid(format!(
                        "messages[{i}].content[{j}]: a tool result holds text parts only"
                    )));
                }
                if cache_control.is_none() {
                    cache_control = p.cache_control.map(CacheControl::of);
                }
                let text = part_text(i, j, p.text)?;
                if !text.is_empty() {
                    texts.push(Block::Text {
                        text,
                        cache_control: None,
                    });
                }
            }
            (!texts.is_empty()).then_some(ToolResultContent::Blocks(texts))
        }
        Some(raw) => {
            let text: Str<'a> = serde_json::from_str(raw.get()).map_err(bad)?;
            (!text.is_empty()).then_some(ToolResultContent::Text(text.0))
        }
    };
    Ok(Block::ToolResult {
        tool_use_id: tool_id(id.0),
        content,
        cache_control,
    })
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
        Ok(vec![PartIn::text(Text::of(raw).map_err(bad)?)])
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
    let cache_control = p.cache_control.map(CacheControl::of);
    match (&*p.kind, role) {
        ("text", _) => {
            let text = part_text(i, j, p.text)?;
            Ok((!text.is_empty()).then_some(Block::Text {
                text,
                cache_control,
            }))
        }
        ("refusal", "assistant") => Ok(None),
        ("image_url", "user") => {
            let url = p.image_url.ok_or_else(|| {
                GatewayError::invalid(format!("{}: image_url.url is required", at()))
            })?;
            let source = image(url.url.0).ok_or_else(|| {
                GatewayError::invalid(format!(
                    "{}: image_url.url must be a base64 data: URL or an http(s) URL",
                    at()
                ))
            })?;
            Ok(Some(Block::Image {
                source,
                cache_control,
            }))
        }
        (other, _) => Err(GatewayError::invalid(format!(
            "{}: unsupported {role} content part {other:?}",
            at()
        ))),
    }
}

fn image(url: Cow<'_, str>) -> Option<ImageSource<'_>> {
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
        return Some(ImageSource::Base64 { media_type, data });
    }
    if url.starts_with("https://") || url.starts_with("http://") {
        return Some(ImageSource::Url { url });
    }
    None
}

#[cfg(test)]
mod tests {
    use super::super::test_support::*;
    use super::temperature;
    use crate::catalog::{Model, RouteKind};
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
    fn every_breakpoint_marks_the_block_the_client_marked() {
        let eph = json!({"type": "ephemeral"});
        let hour = json!({"type": "ephemeral", "ttl": "1h"});
        let b = body(json!({"model": "m", "messages": [
            {"role": "system", "content": [
                {"type": "text", "text": "long doc", "cache_control": {"type": "ephemeral", "ttl": "1h"}},
                {"type": "text", "text": "rules"}]},
            {"role": "system", "content": "more", "cache_control": {"type": "ephemeral"}},
            {"role": "user", "content": "q"}
        ]}));
        assert_eq!(
            b["system"],
            json!([{"type": "text", "text": "long doc", "cache_control": hour},
                   {"type": "text", "text": "rules"},
                   {"type": "text", "text": "more", "cache_control": eph}])
        );
        // A message's own breakpoint marks its last block (before any merging); a part's
        // marks that part's block.
        let b = body(json!({"model": "m", "messages": [
            {"role": "system", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}], "cache_control": {"type": "ephemeral"}},
            {"role": "user", "content": [
                {"type": "image_url", "image_url": {"url": "https://x.test/a.png"}, "cache_control": {"type": "ephemeral"}},
                {"type": "text", "text": "one"}]},
            {"role": "user", "content": "two", "cache_control": {"type": "ephemeral", "ttl": "5m"}},
            {"role": "user", "content": "three"}
        ]}));
        assert_eq!(b["system"][0].get("cache_control"), None);
        assert_eq!(b["system"][1]["cache_control"], eph);
        let user = &b["messages"][0]["content"];
        assert_eq!(user[0]["type"], "image");
        assert_eq!(user[0]["cache_control"], eph);
        assert_eq!(user[1].get("cache_control"), None);
        assert_eq!(
            user[2],
            json!({"type": "text", "text": "two", "cache_control": {"type": "ephemeral", "ttl": "5m"}})
        );
        assert_eq!(user[3], json!({"type": "text", "text": "three"}));
        let b = body(
            json!({"model": "m", "messages": [{"role": "system", "content": "doc"}, {"role": "user", "content": "q"}]}),
        );
        assert_eq!(b["system"], json!([{"type": "text", "text": "doc"}]));
    }

    /// A tool loop: an assistant turn with signed thinking, text and two calls, their results.
    fn tool_loop(assistant_cc: Value, tool_cc: Value) -> Value {
        json!([
            {"role": "user", "content": "weather? [sim:call=get_weather]"},
            {"role": "assistant", "content": "Looking.", "cache_control": assistant_cc,
             "reasoning_details": [
                {"type": "reasoning.text", "text": "Two cities.", "signature": "c2ln", "index": 0},
                {"type": "reasoning.encrypted", "data": "cmVk", "index": 1}],
             "tool_calls": [
                {"id": "toolu_01A", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}},
                {"id": "toolu_01B", "type": "function", "function": {"name": "get_weather", "arguments": ""}}]},
            {"role": "tool", "tool_call_id": "toolu_01A", "content": "sunny", "cache_control": tool_cc},
            {"role": "tool", "tool_call_id": "toolu_01B", "content": [{"type": "text", "text": "rain"}, {"type": "text", "text": ""}]},
            {"role": "user", "content": "and now?"}
        ])
    }

    #[test]
    fn a_tool_loop_without_its_signed_thinking_goes_without_thinking() {
        // The same loop as another model (or this one without thinking) left it.
        let mut foreign = tool_loop(Value::Null, Value::Null);
        foreign[1]
            .as_object_mut()
            .unwrap()
            .remove("reasoning_details");
        let asked = |messages: &Value| json!({"model": "m", "reasoning_effort": "low", "max_tokens": 4000, "messages": messages});
        let b = body(asked(&foreign));
        assert_eq!(b["thinking"], json!({"type": "disabled"}), "{b}");
        assert_eq!(b["messages"][1]["content"][0]["type"], "text");
        let b = body(asked(&tool_loop(Value::Null, Value::Null)));
        assert_eq!(
            b["thinking"]["type"], "enabled",
            "its own signed thinking: kept"
        );
        assert_eq!(b["messages"][1]["content"][0]["type"], "thinking");
        // A signed loop, then one made elsewhere: the earlier turn's thinking goes too.
        let mut both = tool_loop(Value::Null, Value::Null);
        both.as_array_mut().unwrap().extend([
            json!({"role": "assistant", "content": null, "tool_calls": [{"id": "call_g1", "type": "function",
                "function": {"name": "get_weather", "arguments": "{}"}}]}),
            json!({"role": "tool", "tool_call_id": "call_g1", "content": "windy"}),
        ]);
        let b = body(asked(&both));
        assert_eq!(b["thinking"], json!({"type": "disabled"}), "{b}");
        assert_eq!(b["messages"][1]["content"][0]["type"], "text", "{b}");
        assert_eq!(b["messages"][3]["content"][0]["type"], "tool_use", "{b}");

        // Effort profiles think by default, asked or not; Opus 5.5 and Fable cannot stop.
        for extra in [json!({"reasoning_effort": "high"}), json!({})] {
            let mut req = with(extra.clone());
            req["messages"] = foreign.clone();
            let sent = |can_disable| {
                let m = effort_model(ALL_LEVELS, can_disable);
                try_built(&req, &m, RouteKind::Anthropic, None, false)
                    .unwrap()
                    .2
            };
            let b = sent(true);
            assert_eq!(b["thinking"], json!({"type": "disabled"}), "{extra}: {b}");
            assert!(b.get("output_config").is_none(), "{b}");
            let b = sent(false);
            assert_ne!(b["thinking"], json!({"type": "disabled"}), "{extra}: {b}");
        }
        // Without tool calls in the last assistant turn, nothing is asked of it.
        let b = body(asked(&json!([
            {"role": "user", "content": "q"}, {"role": "assistant", "content": "a"},
            {"role": "user", "content": "and?"}
        ])));
        assert_eq!(b["thinking"]["type"], "enabled");
    }

    #[test]
    fn breakpoints_on_tool_turns_and_only_the_last_four() {
        let eph = json!({"type": "ephemeral"});
        let b = body(
            json!({"model": "m", "reasoning_effort": "low", "max_tokens": 4000,
            "messages": tool_loop(eph.clone(), eph.clone())}),
        );
        let assistant = &b["messages"][1]["content"];
        assert_eq!(assistant[0]["type"], "thinking", "{assistant}");
        assert_eq!(
            assistant[4],
            json!({"type": "tool_use", "id": "toolu_01B", "name": "get_weather", "input": {}, "cache_control": eph}),
            "the message's last block"
        );
        assert!(assistant
            .as_array()
            .unwrap()
            .iter()
            .take(4)
            .all(|b| b.get("cache_control").is_none()));
        let results = &b["messages"][2]["content"];
        assert_eq!(
            results[0],
            json!({"type": "tool_result", "tool_use_id": "toolu_01A", "content": "sunny", "cache_control": eph})
        );
        // A part's breakpoint in a tool message marks its tool_result too.
        let b = body(json!({"model": "m", "messages": [
            {"role": "user", "content": "x"},
            {"role": "assistant", "content": null, "tool_calls": [{"id": "t1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "t1", "content": [{"type": "text", "text": "r", "cache_control": {"type": "ephemeral", "ttl": "1h"}}]}
        ]}));
        assert_eq!(
            b["messages"][2]["content"][0],
            json!({"type": "tool_result", "tool_use_id": "t1", "content": [{"type": "text", "text": "r"}],
                   "cache_control": {"type": "ephemeral", "ttl": "1h"}})
        );

        // Six breakpoints: the first two in prompt order (system blocks first) are dropped.
        let cc = |ttl: &str| json!({"type": "ephemeral", "ttl": ttl});
        let b = body(json!({"model": "m", "messages": [
            {"role": "system", "content": "s1", "cache_control": cc("1h")},
            {"role": "user", "content": "u1", "cache_control": cc("1h")},
            {"role": "assistant", "content": "a1", "cache_control": cc("5m")},
            {"role": "user", "content": [{"type": "text", "text": "u2", "cache_control": cc("5m")}, {"type": "text", "text": "u3", "cache_control": cc("5m")}]},
            {"role": "system", "content": "s2", "cache_control": cc("5m")}
        ]}));
        let marks: Vec<Value> = b["system"]
            .as_array()
            .unwrap()
            .iter()
            .chain(
                b["messages"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .flat_map(|m| m["content"].as_array().unwrap()),
            )
            .map(|blk| json!([blk["text"], blk.get("cache_control").is_some()]))
            .collect();
        assert_eq!(
            marks,
            [
                json!(["s1", false]),
                json!(["s2", false]),
                json!(["u1", true]),
                json!(["a1", true]),
                json!(["u2", true]),
                json!(["u3", true]),
            ]
        );
    }

    #[test]
    fn tools_and_every_tool_choice_map() {
        let tools = json!([
            {"type": "function", "function": {"name": "get_weather", "description": "Weather.", "strict": true,
             "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}},
            {"type": "function", "function": {"name": "now"}}
        ]);
        let b = body(with(json!({"tools": tools})));
        assert_eq!(
            b["tools"],
            json!([
                {"name": "get_weather", "description": "Weather.",
                 "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}},
                {"name": "now", "input_schema": {"type": "object"}}
            ])
        );
        assert!(b.get("tool_choice").is_none(), "no choice, none sent");
        for (choice, parallel, want) in [
            (json!("auto"), None, json!({"type": "auto"})),
            (json!("required"), None, json!({"type": "any"})),
            (json!("none"), None, json!({"type": "none"})),
            (
                json!({"type": "function", "function": {"name": "now"}}),
                None,
                json!({"type": "tool", "name": "now"}),
            ),
            (json!("auto"), Some(true), json!({"type": "auto"})),
            (
                json!("auto"),
                Some(false),
                json!({"type": "auto", "disable_parallel_tool_use": true}),
            ),
            (
                json!("required"),
                Some(false),
                json!({"type": "any", "disable_parallel_tool_use": true}),
            ),
            (
                json!({"type": "function", "function": {"name": "now"}}),
                Some(false),
                json!({"type": "tool", "name": "now", "disable_parallel_tool_use": true}),
            ),
            (json!("none"), Some(false), json!({"type": "none"})),
            (
                Value::Null,
                Some(false),
                json!({"type": "auto", "disable_parallel_tool_use": true}),
            ),
        ] {
            let mut extra = json!({"tools": tools, "tool_choice": choice});
            if let Some(p) = parallel {
                extra["parallel_tool_calls"] = json!(p);
            }
            let b = body(with(extra.clone()));
            assert_eq!(b["tool_choice"], want, "{extra}");
        }
        // Without tools there is nothing to choose from: neither is sent.
        for extra in [
            json!({"tool_choice": "required", "parallel_tool_calls": false}),
            json!({"tools": [], "tool_choice": "auto"}),
            json!({"tools": null, "tool_choice": null}),
        ] {
            let b = body(with(extra.clone()));
            assert!(
                b.get("tools").is_none() && b.get("tool_choice").is_none(),
                "{extra}: {b}"
            );
        }
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
                json!({"tools": [{"type": "function", "function": {"name": "f", "parameters": [1]}}]}),
                "tools[0]: function.parameters must be a JSON Schema object",
            ),
            (
                json!({"tools": tools, "tool_choice": "sometimes"}),
                "invalid value for tool_choice",
            ),
            (
                json!({"tool_choice": {"type": "allowed_tools"}}),
                "invalid value for tool_choice",
            ),
        ] {
            let e = err(with(extra.clone()));
            assert_eq!(e.code(), "invalid_request_error", "{extra}");
            assert!(e.to_string().starts_with(want), "{extra}: {e}");
        }
    }

    #[test]
    fn a_forced_tool_becomes_auto_where_claude_refuses_it() {
        let tools = json!([{"type": "function", "function": {"name": "f"}}]);
        let named = json!({"type": "function", "function": {"name": "f"}});
        let choice = |m: &Model, extra: Value| {
            let mut req = with(extra);
            req["tools"] = tools.clone();
            try_built(&req, m, RouteKind::Anthropic, None, false)
                .unwrap()
                .2["tool_choice"]
                .clone()
        };
        let budget = model(Some(64000));
        // Budget thinking on: Anthropic refuses a forced tool ("Thinking may not be enabled
        // when tool_choice forces tool use").
        for forced in [json!("required"), named.clone()] {
            assert_eq!(
                choice(
                    &budget,
                    json!({"tool_choice": forced, "reasoning_effort": "low"})
                ),
                json!({"type": "auto"})
            );
            assert_eq!(
                choice(
                    &budget,
                    json!({"tool_choice": forced, "reasoning_effort": "low", "parallel_tool_calls": false})
                ),
                json!({"type": "auto", "disable_parallel_tool_use": true})
            );
        }
        assert_eq!(
            choice(&budget, json!({"tool_choice": "required"})),
            json!({"type": "any"}),
            "no thinking, forced as asked"
        );
        assert_eq!(
            choice(
                &budget,
                json!({"tool_choice": "required", "reasoning_effort": "none"})
            ),
            json!({"type": "any"})
        );
        // Adaptive thinking takes a forced tool, except on the models that cannot stop thinking.
        let can_stop = effort_model(ALL_LEVELS, true);
        let cannot_stop = effort_model(ALL_LEVELS, false);
        for extra in [json!({}), json!({"reasoning_effort": "high"})] {
            let mut e = extra.clone();
            e["tool_choice"] = named.clone();
            assert_eq!(
                choice(&can_stop, e.clone()),
                json!({"type": "tool", "name": "f"}),
                "{extra}"
            );
            assert_eq!(choice(&cannot_stop, e), json!({"type": "auto"}), "{extra}");
        }
        assert_eq!(
            choice(&cannot_stop, json!({"tool_choice": "none"})),
            json!({"type": "none"})
        );
    }

    #[test]
    fn tool_history_becomes_tool_use_and_one_user_turn_of_results() {
        let b = body(json!({"model": "m", "messages": tool_loop(Value::Null, Value::Null)}));
        assert_eq!(
            b["messages"],
            json!([
                {"role": "user", "content": [{"type": "text", "text": "weather? [sim:call=get_weather]"}]},
                {"role": "assistant", "content": [
                    {"type": "text", "text": "Looking."},
                    {"type": "tool_use", "id": "toolu_01A", "name": "get_weather", "input": {"city": "Paris"}},
                    {"type": "tool_use", "id": "toolu_01B", "name": "get_weather", "input": {}}]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_01A", "content": "sunny"},
                    {"type": "tool_result", "tool_use_id": "toolu_01B", "content": [{"type": "text", "text": "rain"}]},
                    {"type": "text", "text": "and now?"}]}
            ]),
            "no thinking asked: the signed reasoning stays out"
        );
        // Results first in their turn, whatever the order of the messages merged into it;
        // ids other families wrote are made Anthropic's, the same on both sides.
        let b = body(json!({"model": "m", "messages": [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": null, "tool_calls": [{"id": "call_Ab3x_0.CiIB+/9a8w==", "type": "function", "function": {"name": "f", "arguments": " {\"a\": [1, 2]} "}}]},
            {"role": "user", "content": "before the result"},
            {"role": "tool", "tool_call_id": "call_Ab3x_0.CiIB+/9a8w==", "content": ""}
        ]}));
        let id = "call_Ab3x_0_2ECiIB_2B_2F9a8w_3D_3D";
        assert_eq!(b["messages"][1]["content"][0]["id"], id);
        assert_eq!(
            b["messages"][1]["content"][0]["input"],
            json!({"a": [1, 2]})
        );
        assert_eq!(
            b["messages"][2]["content"],
            json!([{"type": "tool_result", "tool_use_id": id}, {"type": "text", "text": "before the result"}])
        );
        for (messages, want) in [
            (
                json!([{"role": "user", "content": "x"}, {"role": "assistant", "tool_calls": [{"id": "a", "type": "function", "function": {"name": "f", "arguments": "[1]"}}]}]),
                "messages[1].tool_calls[0].function.arguments must be a JSON object",
            ),
            (
                json!([{"role": "user", "content": "x"}, {"role": "assistant", "tool_calls": [{"id": "a", "type": "function", "function": {"name": "f", "arguments": "{\"cut"}}]}]),
                "messages[1].tool_calls[0].function.arguments must be a JSON object",
            ),
            (
                json!([{"role": "user", "content": "x"}, {"role": "tool", "content": "r"}]),
                "messages[1]: a tool message needs a tool_call_id",
            ),
            (
                json!([{"role": "user", "content": "x"}, {"role": "tool", "tool_call_id": "a", "content": [{"type": "image_url", "image_url": {"url": "https://x.test/i.png"}}]}]),
                "messages[1].content[0]: a tool result holds text parts only",
            ),
            (
                json!([{"role": "user", "content": "x"}, {"role": "function", "name": "f", "content": "r"}]),
                "messages[1]: the legacy function role is not supported",
            ),
        ] {
            let e = err(json!({"model": "m", "messages": messages}));
            assert_eq!(e.code(), "invalid_request_error", "{e}");
            assert!(e.to_string().starts_with(want), "{e}");
        }
        body(
            json!({"model": "m", "messages": [{"role": "assistant", "content": "x", "tool_calls": []}, {"role": "user", "content": "y"}]}),
        );
    }

    #[test]
    fn signed_reasoning_is_replayed_first_only_when_the_request_thinks() {
        // What `tool_loop`'s assistant message carries, as Claude must see it again.
        let replayed = [
            json!({"type": "thinking", "thinking": "Two cities.", "signature": "c2ln"}),
            json!({"type": "redacted_thinking", "data": "cmVk"}),
        ];
        let assistant = |m: &Model, extra: Value| {
            let mut req = with(extra);
            req["messages"] = tool_loop(Value::Null, Value::Null);
            let b = try_built(&req, m, RouteKind::Anthropic, None, false)
                .unwrap()
                .2;
            b["messages"][1]["content"].as_array().unwrap().clone()
        };
        let budget = model(Some(64000));
        let on = assistant(&budget, json!({"reasoning_effort": "low"}));
        assert_eq!(on[..2], replayed, "thinking blocks first, unmodified");
        assert_eq!(on[2]["type"], "text");
        assert_eq!(on.len(), 5);
        for off in [json!({}), json!({"reasoning_effort": "none"})] {
            let blocks = assistant(&budget, off.clone());
            assert_eq!(blocks[0]["type"], "text", "{off}");
            assert_eq!(blocks.len(), 3, "{off}");
        }
        let can_stop = effort_model(ALL_LEVELS, true);
        assert_eq!(
            assistant(&can_stop, json!({"reasoning_effort": "high"}))[..2],
            replayed
        );
        assert_eq!(
            assistant(&can_stop, json!({}))[..2],
            replayed,
            "the model's default: adaptive models think"
        );
        assert_eq!(
            assistant(&can_stop, json!({"reasoning_effort": "none"}))[0]["type"],
            "text",
            "thinking turned off"
        );
        assert_eq!(
            assistant(
                &effort_model(ALL_LEVELS, false),
                json!({"reasoning_effort": "none"})
            )[..2],
            replayed,
            "cannot be turned off"
        );
        // Entries Claude cannot check are skipped; an omitted text replays as empty.
        let b = body(
            json!({"model": "m", "reasoning_effort": "low", "messages": [
                {"role": "user", "content": "x"},
                {"role": "assistant", "content": "y", "reasoning_details": [
                    {"type": "reasoning.text", "text": "no signature"},
                    {"type": "reasoning.summary", "summary": "s"},
                    {"type": "reasoning.encrypted"},
                    {"type": "reasoning.text", "signature": "b21pdHRlZA=="}]},
                {"role": "user", "content": "z"}
            ]}),
        );
        assert_eq!(
            b["messages"][1]["content"],
            json!([{"type": "thinking", "thinking": "", "signature": "b21pdHRlZA=="}, {"type": "text", "text": "y"}])
        );
    }

    #[test]
    fn tool_parameter_names_what_a_door_without_tools_refuses() {
        let param = |req: Value| {
            let bytes = serde_json::to_vec(&req).unwrap();
            let raw = crate::api::RawRequest::parse(&bytes, crate::api::Operation::Chat).unwrap();
            super::tool_parameter(&raw)
        };
        let tool = json!([{"type": "function", "function": {"name": "f"}}]);
        for (extra, want) in [
            (json!({"tools": tool}), Some("tools")),
            (json!({"tools": []}), Some("tools")),
            (json!({"tool_choice": "auto"}), Some("tool_choice")),
            (json!({"tools": null, "tool_choice": null}), None),
            (json!({"parallel_tool_calls": false}), None),
            (json!({}), None),
        ] {
            assert_eq!(param(with(extra.clone())), want, "{extra}");
        }
        for (messages, want) in [
            (tool_loop(Value::Null, Value::Null), Some("tool_calls")),
            (
                json!([{"role": "user", "content": "x"}, {"role": "tool", "tool_call_id": "a", "content": "r"}]),
                Some("tool_calls"),
            ),
            (
                json!([{"role": "user", "content": "x"}, {"role": "function", "name": "f", "content": "r"}]),
                Some("tool_calls"),
            ),
            (
                json!([{"role": "assistant", "content": "x", "tool_calls": [ ]}, {"role": "user", "content": "y"}]),
                None,
            ),
            (
                json!([{"role": "assistant", "content": "x", "tool_calls": null}, {"role": "user", "content": "y"}]),
                None,
            ),
        ] {
            assert_eq!(
                param(json!({"model": "m", "messages": messages})),
                want,
                "{messages}"
            );
        }
    }
}
