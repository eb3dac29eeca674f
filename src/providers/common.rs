//! Family-neutral pieces of request and response translation: the wording of upstream failures
//! ([`upstream_message`], [`quote`]), request fields every family reads the same way
//! ([`forwarded`], [`stop`], [`part_text`]), and the client's reasoning controls (OpenRouter
//! `reasoning`, OpenAI `reasoning_effort`, deprecated `include_reasoning`) read into one
//! [`ReasoningAsk`] that each family then maps onto its own thinking knobs (Gemini
//! `thinkingConfig`, Anthropic `thinking.budget_tokens` or adaptive `output_config.effort`). The wire types themselves are `api`'s.

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::value::RawValue;

use crate::api::chat::Text;
use crate::api::{GatewayError, RawRequest};
use crate::catalog::Profile;

pub(crate) use crate::api::Str;

/// How much of an unreadable upstream error body an error message quotes.
pub(crate) const QUOTE_LIMIT: usize = 512;

/// `upstream answered HTTP 429: <detail>`: how every family words an upstream failure, the
/// detail [`scrub`]bed.
pub(crate) fn upstream_message(status: u16, detail: &str) -> String {
    if detail.is_empty() {
        format!("upstream answered HTTP {status}")
    } else {
        format!("upstream answered HTTP {status}: {}", scrub(detail))
    }
}

/// An upstream's error text with what identifies the operator's accounts taken out: Google
/// names the project (`projects/<id>/…`, `project <id>`, 12-digit project numbers) and service
/// accounts (e-mail addresses) in its messages, and a message may echo a credential (API keys
/// `AIza…` / `sk-…`, OAuth tokens `ya29.…`, whatever follows `Bearer`, `Basic` or an API-key
/// header's name, `key=…` query parameters). The rest — what went wrong — is kept. The
/// gateway's own secrets are also taken out literally (`Credentials::redact`).
pub(crate) fn scrub(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut after_project = false;
    let mut after_credential_name = false;
    for word in text.split_inclusive(char::is_whitespace) {
        let trimmed = word.trim_end();
        let (body_start, body_end) = core_span(trimmed);
        let (lead, core, tail) = (
            &trimmed[..body_start],
            &trimmed[body_start..body_end],
            &word[body_end..],
        );
        out.push_str(lead);
        if is_secret(core)
            || after_credential_name && !core.is_empty()
            || after_project && looks_like_project_id(core)
        {
            out.push_str("[redacted]");
        } else if let Some(word) = redact_parameters(core) {
            out.push_str(&word);
        } else if let Some(at) = core.find("projects/") {
            let id_start = at + "projects/".len();
            let id_end = core[id_start..]
                .find('/')
                .map_or(core.len(), |i| id_start + i);
            out.push_str(&core[..id_start]);
            out.push_str("[redacted]");
            out.push_str(&core[id_end..]);
        } else {
            out.push_str(core);
        }
        out.push_str(tail);
        after_project = core.eq_ignore_ascii_case("project");
        after_credential_name = CREDENTIAL_NAMES
            .iter()
            .any(|n| core.eq_ignore_ascii_case(n));
    }
    redact_long_numbers(&out)
}

/// Words a credential follows: auth schemes and API-key header names (`x-api-key: …`).
const CREDENTIAL_NAMES: &[&str] = &[
    "bearer",
    "basic",
    "x-api-key",
    "x-goog-api-key",
    "api-key",
    "api_key",
    "apikey",
];

/// `word` with the values of its credential parameters taken out (`key=AIza…` in a quoted
/// URL, `access_token=…`, `x-api-key=…`), when it has any.
fn redact_parameters(word: &str) -> Option<String> {
    let mut out = String::with_capacity(word.len());
    let mut found = false;
    for piece in word.split_inclusive(['?', '&']) {
        let (param, sep) = match piece.strip_suffix(['?', '&']) {
            Some(p) => (p, &piece[p.len()..]),
            None => (piece, ""),
        };
        let secret = param.split_once('=').filter(|(name, value)| {
            !value.is_empty()
                && ["key", "access_token", "token"]
                    .iter()
                    .chain(CREDENTIAL_NAMES)
                    .any(|n| name.eq_ignore_ascii_case(n))
        });
        match secret {
            Some((name, _)) => {
                found = true;
                out.push_str(name);
                out.push_str("=[redacted]");
            }
            None => out.push_str(param),
        }
        out.push_str(sep);
    }
    found.then_some(out)
}

/// Runs of 10 or more digits standing on their own (Google project numbers are 12:
/// `project_number:123456789012`, `consumer 123456789012`). A run glued to a letter or an
/// underscore is part of an identifier — an upstream's request id (`req_…`, a trace id), which
/// an operator quotes to the provider and which is not a secret — and stays.
fn redact_long_numbers(text: &str) -> String {
    let in_id = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphabetic() || c == '_');
    let mut out = String::with_capacity(text.len());
    let mut digits = 0;
    let mut before = None;
    for (i, c) in text.char_indices() {
        if c.is_ascii_digit() {
            digits += 1;
            continue;
        }
        push_run(
            &mut out,
            &text[i - digits..i],
            in_id(before) || in_id(Some(c)),
        );
        digits = 0;
        out.push(c);
        before = Some(c);
    }
    push_run(&mut out, &text[text.len() - digits..], in_id(before));
    out
}

fn push_run(out: &mut String, run: &str, in_id: bool) {
    out.push_str(if run.len() >= 10 && !in_id {
        "[redacted]"
    } else {
        run
    });
}

/// The span of `word` without the quotes and punctuation around it.
fn core_span(word: &str) -> (usize, usize) {
    let wrap = |c: char| "`'\"()[]{}<>,.;:!?".contains(c);
    let start = word.len() - word.trim_start_matches(wrap).len();
    let end = start + word[start..].trim_end_matches(wrap).len();
    (start, end.max(start))
}

fn is_secret(word: &str) -> bool {
    let email = word
        .split_once('@')
        .is_some_and(|(user, host)| !user.is_empty() && host.contains('.'));
    email
        || word.starts_with("AIza") && word.len() >= 30
        || word.starts_with("ya29.")
        || (word.starts_with("sk-") || word.starts_with("sk_")) && word.len() >= 12
}

/// A Google project id after the word "project": 6–30 of `[a-z0-9-]` with a digit or a hyphen
/// (so that plain words, as in "your project does not have access", stay).
fn looks_like_project_id(word: &str) -> bool {
    (6..=30).contains(&word.len())
        && word
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && word.bytes().any(|b| b.is_ascii_digit() || b == b'-')
}

/// The start of an upstream body that is not a known error shape, for a message (scrubbed by
/// [`upstream_message`]).
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
    text: Option<Text<'a>>,
) -> Result<Text<'a>, GatewayError> {
    text.ok_or_else(|| {
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

    /// The allowed level (lowest first) nearest to this effort, rounding up — `minimal` →
    /// `low` where there is no `minimal`, `xhigh` → `max` where there is no `xhigh` — or the
    /// highest level when none is as high; `none` is the lowest level (callers that can turn
    /// thinking off decide that before). Level names outside the ladder are never picked by
    /// rank. `None` only for an empty list.
    pub fn nearest_level(self, levels: &[String]) -> Option<&str> {
        const LADDER: [&str; 6] = ["minimal", "low", "medium", "high", "xhigh", "max"];
        let rank = |name: &str| LADDER.iter().position(|l| *l == name);
        let want = match self {
            Self::None => return levels.first().map(String::as_str),
            Self::Minimal => 0,
            Self::Low => 1,
            Self::Medium => 2,
            Self::High => 3,
            Self::XHigh => 4,
        };
        levels
            .iter()
            .find(|l| rank(l).is_some_and(|r| r >= want))
            .or(levels.last())
            .map(String::as_str)
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

/// Valid JSON without the whitespace between tokens (strings untouched); no tree is built.
pub(crate) fn compact(json: &str) -> String {
    let mut out = String::with_capacity(json.len());
    let (mut in_string, mut escaped) = (false, false);
    for c in json.chars() {
        if in_string {
            out.push(c);
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == '"' {
                in_string = false;
            }
        } else if !matches!(c, ' ' | '\t' | '\n' | '\r') {
            in_string = c == '"';
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upstream_messages_lose_the_operators_identifiers_and_credentials() {
        for (google, want) in [
            (
                "Publisher Model `projects/acme-prod-42/locations/us-central1/publishers/google/models/gemini-9` was not found or your project does not have access to it.",
                "Publisher Model `projects/[redacted]/locations/us-central1/publishers/google/models/gemini-9` was not found or your project does not have access to it.",
            ),
            (
                "Permission denied on resource project acme-prod-42.",
                "Permission denied on resource project [redacted].",
            ),
            (
                "Quota exceeded for quota metric 'Generate Content requests' of service 'aiplatform.googleapis.com' for consumer 'project_number:123456789012'.",
                "Quota exceeded for quota metric 'Generate Content requests' of service 'aiplatform.googleapis.com' for consumer 'project_number:[redacted]'.",
            ),
            (
                "Caller tollgate@acme-prod-42.iam.gserviceaccount.com lacks permission",
                "Caller [redacted] lacks permission",
            ),
            (
                "API key not valid: AIzaSyA1234567890abcdefghijklmnopqrstuv. Please pass a valid API key.",
                "API key not valid: [redacted]. Please pass a valid API key.",
            ),
            (
                "invalid token ya29.a0AfB_byC-secret",
                "invalid token [redacted]",
            ),
            (
                "The input token count (1048577) exceeds the maximum number of tokens allowed (1048576).",
                "The input token count (1048577) exceeds the maximum number of tokens allowed (1048576).",
            ),
        ] {
            assert_eq!(scrub(google), want);
        }
        assert_eq!(
            upstream_message(403, "Permission denied on resource project acme-prod-42."),
            "upstream answered HTTP 403: Permission denied on resource project [redacted]."
        );
    }

    #[test]
    fn upstream_request_ids_stay_whole() {
        for id in [
            "req_mock0000123a",
            "req_mock0000000123a",
            "req_011CVEA3SF7rnb3DuBZytqQa",
            "req_vrtx_0123456789012345",
            "105445aa7843bc8bf206b12000100000",
        ] {
            let text = format!("Overloaded (overloaded_error; request {id})");
            assert_eq!(scrub(&text), text);
        }
        assert_eq!(
            scrub("request req_0123456789 for project_number:123456789012"),
            "request req_0123456789 for project_number:[redacted]",
            "a bare number still goes"
        );
        assert_eq!(
            scrub("projects/123456789012/locations, consumer 123456789012"),
            "projects/[redacted]/locations, consumer [redacted]"
        );
    }

    #[test]
    fn credentials_echoed_back_are_taken_out() {
        for (echo, want) in [
            (
                "Incorrect API key provided: Bearer sec-dummy-openai.",
                "Incorrect API key provided: Bearer [redacted].",
            ),
            (
                "Authorization: bearer abc.def-ghi was refused",
                "Authorization: bearer [redacted] was refused",
            ),
            (
                "invalid x-api-key: 'ant-dummy-key' (check it)",
                "invalid x-api-key: '[redacted]' (check it)",
            ),
            (
                "GET /v1beta/models?alt=sse&key=not-a-google-key failed",
                "GET /v1beta/models?alt=sse&key=[redacted] failed",
            ),
            (
                "Basic dXNlcjpwYXNz rejected",
                "Basic [redacted] rejected",
            ),
            (
                "Incorrect API key provided: sk-proj-abc1. You can find your API key at https://platform.openai.com/account/api-keys.",
                "Incorrect API key provided: [redacted]. You can find your API key at https://platform.openai.com/account/api-keys.",
            ),
            ("key sk_live_0123456789", "key [redacted]"),
            (
                "The api key is not valid for this model",
                "The api key is not valid for this model",
            ),
        ] {
            assert_eq!(scrub(echo), want);
        }
    }

    #[test]
    fn efforts_round_up_to_the_nearest_level() {
        let levels = |l: &[&str]| l.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        let claude = levels(&["low", "medium", "high", "xhigh", "max"]);
        let no_xhigh = levels(&["low", "medium", "high", "max"]);
        let gemini = levels(&["low", "high"]);
        for (effort, on_claude, on_no_xhigh, on_gemini) in [
            (Effort::None, "low", "low", "low"),
            (Effort::Minimal, "low", "low", "low"),
            (Effort::Low, "low", "low", "low"),
            (Effort::Medium, "medium", "medium", "high"),
            (Effort::High, "high", "high", "high"),
            (Effort::XHigh, "xhigh", "max", "high"),
        ] {
            assert_eq!(effort.nearest_level(&claude), Some(on_claude), "{effort:?}");
            assert_eq!(
                effort.nearest_level(&no_xhigh),
                Some(on_no_xhigh),
                "{effort:?}"
            );
            assert_eq!(effort.nearest_level(&gemini), Some(on_gemini), "{effort:?}");
        }
        assert_eq!(Effort::High.nearest_level(&[]), None);
    }

    #[test]
    fn strings_borrow_when_unescaped() {
        let s: Str = serde_json::from_str(r#""plain""#).unwrap();
        assert!(matches!(s.0, Cow::Borrowed("plain")));
        let s: Option<Str> = serde_json::from_str(r#""a\nb""#).unwrap();
        assert_eq!(s.as_deref(), Some("a\nb"));
    }
}
