//! Family-neutral pieces of request and response translation: the wording of upstream failures
//! ([`upstream_message`], [`quote`]), request fields every family reads the same way
//! ([`forwarded`], [`stop`], [`part_text`]), and the client's reasoning controls (OpenRouter
//! `reasoning`, OpenAI `reasoning_effort`, deprecated `include_reasoning`) read into one
//! [`ReasoningAsk`] that each family then maps onto its own thinking knobs (Gemini
//! `thinkingConfig`, Anthropic `thinking.budget_tokens`). The wire types themselves are `api`'s.

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::value::RawValue;

use crate::api::{GatewayError, RawRequest};
use crate::catalog::Profile;

pub(crate) use crate::api::Str;

/// How much of an unreadable upstream error body an error message quotes.
pub(crate) const QUOTE_LIMIT: usize = 512;

/// `upstream answered HTTP 429: <detail>`: how every family words an upstream failure.
pub(crate) fn upstream_message(status: u16, detail: &str) -> String {
    if detail.is_empty() {
        format!("upstream answered HTTP {status}")
    } else {
        format!("upstream answered HTTP {status}: {detail}")
    }
}

/// The start of an upstream body that is not a known error shape, for a message.
pub(crate) fn quote(body: &[u8]) -> String {
    String::from_utf8_lossy(body)
        .trim()
        .chars()
        .take(QUOTE_LIMIT)
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Request pieces every family reads the same way
// ---------------------------------------------------------------------------------------------

/// The request's `field` if the profile forwards `profile_field`; otherwise it is dropped.
pub(crate) fn forwarded<'a, T: Deserialize<'a>>(
    req: &RawRequest<'a>,
    profile: &Profile,
    profile_field: &str,
    field: &str,
) -> Result<Option<T>, GatewayError> {
    if !profile.forwards(profile_field) {
        return Ok(None);
    }
    Ok(req.typed::<Option<T>>(field)?.flatten())
}

/// `stop` as a list (a string or an array of strings), when the profile forwards it.
pub(crate) fn stop<'a>(
    req: &RawRequest<'a>,
    p: &Profile,
) -> Result<Option<Vec<Cow<'a, str>>>, GatewayError> {
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

/// The text of content part `j` of message `i`, which must have one.
pub(crate) fn part_text<'a>(
    i: usize,
    j: usize,
    text: Option<Str<'a>>,
) -> Result<Cow<'a, str>, GatewayError> {
    text.map(|t| t.0).ok_or_else(|| {
        GatewayError::invalid(format!(
            "messages[{i}].content[{j}]: a text part needs text"
        ))
    })
}

#[derive(Deserialize, Default)]
struct ReasoningIn<'a> {
    #[serde(borrow, default)]
    effort: Option<Str<'a>>,
    #[serde(default)]
    max_tokens: Option<i64>,
    #[serde(default)]
    exclude: Option<bool>,
    #[serde(default)]
    enabled: Option<bool>,
}

/// OpenAI / OpenRouter reasoning effort, lowest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Effort {
    None,
    Minimal,
    Low,
    Medium,
    High,
    XHigh,
}

impl Effort {
    fn parse(s: &str, field: &str) -> Result<Self, GatewayError> {
        Ok(match s {
            "none" => Self::None,
            "minimal" => Self::Minimal,
            "low" => Self::Low,
            "medium" => Self::Medium,
            "high" => Self::High,
            "xhigh" => Self::XHigh,
            other => {
                return Err(GatewayError::invalid(format!(
                    "invalid value for {field}: {other:?} (expected none, minimal, low, medium, high or xhigh)"
                )))
            }
        })
    }

    /// The thinking budget (tokens) an effort stands for.
    pub fn budget(self) -> i64 {
        match self {
            Self::None => 0,
            Self::Minimal => 512,
            Self::Low => 1024,
            Self::Medium => 8192,
            Self::High => 24_576,
            Self::XHigh => 32_768,
        }
    }

    /// The effort a budget stands for, by the same table.
    pub fn of_budget(tokens: i64) -> Self {
        match tokens {
            0 => Self::None,
            1..=512 => Self::Minimal,
            513..=1024 => Self::Low,
            1025..=8192 => Self::Medium,
            _ => Self::High,
        }
    }
}

/// What the client asked of thinking, before a profile's limits apply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ask {
    /// Reasoning mentioned, but no amount: the model's default.
    Default,
    /// `enabled: true` or `max_tokens: -1`: dynamic thinking.
    Dynamic,
    Budget(i64),
    Effort(Effort),
}

/// The client's reasoning request: how much, and whether the text is to be left out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ReasoningAsk {
    pub ask: Ask,
    pub exclude: bool,
}

/// Reads the reasoning controls; `None` when the client mentioned none of them.
/// `reasoning.max_tokens` wins over an effort, `reasoning.effort` over `reasoning_effort`.
pub(crate) fn reasoning_ask(req: &RawRequest<'_>) -> Result<Option<ReasoningAsk>, GatewayError> {
    let reasoning = req.typed::<Option<ReasoningIn>>("reasoning")?.flatten();
    let top_effort = req.typed::<Option<Str>>("reasoning_effort")?.flatten();
    let include = req.typed::<Option<bool>>("include_reasoning")?.flatten();
    if reasoning.is_none() && top_effort.is_none() && include.is_none() {
        return Ok(None);
    }
    let r = reasoning.unwrap_or_default();
    let effort = match (r.effort, top_effort) {
        (Some(e), _) => Some(Effort::parse(&e, "reasoning.effort")?),
        (None, Some(e)) => Some(Effort::parse(&e, "reasoning_effort")?),
        (None, None) => None,
    };
    let ask =
        match (r.max_tokens, effort, r.enabled) {
            (Some(-1), _, _) => Ask::Dynamic,
            (Some(n), _, _) if n < 0 => return Err(GatewayError::invalid(
                "invalid value for reasoning.max_tokens: expected -1 (dynamic) or a token count",
            )),
            (Some(n), _, _) => Ask::Budget(n),
            (None, Some(e), _) => Ask::Effort(e),
            (None, None, Some(true)) => Ask::Dynamic,
            (None, None, Some(false)) => Ask::Effort(Effort::None),
            (None, None, None) => Ask::Default,
        };
    let exclude = r.exclude.or(include.map(|i| !i)).unwrap_or(false);
    Ok(Some(ReasoningAsk { ask, exclude }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_borrow_when_unescaped() {
        let s: Str = serde_json::from_str(r#""plain""#).unwrap();
        assert!(matches!(s.0, Cow::Borrowed("plain")));
        let s: Option<Str> = serde_json::from_str(r#""a\nb""#).unwrap();
        assert_eq!(s.as_deref(), Some("a\nb"));
    }
}
