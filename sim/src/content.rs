//! The simulator's deterministic "model": what every surface answers, how many tokens that is,
//! and the `[sim:…]` request markers. Tests compute expectations from the rules below, so they
//! are part of the simulator's contract — change them only together with the tests.
//!
//! Token rule (every surface, every count):
//! - `tok(n) = ceil(n / 4)` for a piece of `n` UTF-8 bytes (`tok(0) = 0`).
//! - Prompt tokens = `max(1, tok(B))` where `B` is the byte total of the prompt: every text
//!   (system/instruction texts, message texts, tool results given as text) counts its bytes;
//!   any other structured piece (Gemini `functionCall`/`functionResponse`/`inlineData` part,
//!   Anthropic `tool_use`/`image` block, OpenAI `tool_calls`, tool declarations) counts the
//!   bytes of its compact `serde_json` serialisation (keys sorted). Anthropic `thinking`
//!   blocks in history count 0 (the real API strips them). Each surface's module doc says
//!   which pieces it walks.
//!   `[sim:…]` markers are part of the text and count toward the prompt.
//! - Reply: `"Echo: " + U` where `U` is the text of the last user turn with every `[sim:…]`
//!   marker removed and surrounding whitespace trimmed; when that turn carries only tool /
//!   function results, `U = "received N tool result(s)"`.
//!   JSON mode (Gemini `responseMimeType: application/json`, OpenAI `response_format`
//!   `json_object`/`json_schema`) answers `{"echo":"<U>"}` instead.
//! - Thoughts (when the request thinks): `"Thinking: " + U`; thought tokens = `tok(len)`,
//!   billed whether or not the thought text is returned.
//! - Visible output tokens = `tok(len(reply))`; each tool/function call adds
//!   `tok(len(name) + len(args_json))` where `args_json` is the call's arguments as compact
//!   `serde_json` (keys sorted): `{"arg":"value"}` (15 bytes), or the object of a
//!   `[sim:args=…]` marker (Anthropic and Gemini/Vertex answers; OpenAI keeps the fixed ones).
//! - Output caps (`maxOutputTokens`, `max_tokens`, `max_completion_tokens`): thoughts are
//!   charged first; the reply is cut to `(cap − thoughts) × 4` bytes (at a char boundary) and
//!   the finish reason becomes MAX_TOKENS / `max_tokens` / `length`.
//! - Stop sequences cut the reply before the first occurrence.
//! - Embeddings: a unit vector of the model's full width (768, or 3072 for `gemini-embedding-*`)
//!   drawn from a splitmix64 stream seeded with FNV-1a-64 of the text, then cut to the
//!   requested width without re-normalising (Matryoshka style, like Google); OpenAI
//!   `dimensions` re-normalises the cut vector (like OpenAI).
//!
//! Markers (anywhere in the last user text; for embeddings in any input text):
//! `[sim:fault=KIND]`, `[sim:latency=MS]`, `[sim:chunk-delay=MS]`, `[sim:chunks=N]`,
//! `[sim:call=NAME]`, `[sim:parallel=N]`, `[sim:args=JSON]` (a JSON object — it may hold `]`
//! — given as the arguments of the calls the request makes, so that a real client can run a
//! real tool, e.g. Claude Code's `Bash` with `{"command":"echo hi"}`; not an object: ignored).

use std::sync::atomic::{AtomicU64, Ordering};

use base64::Engine as _;
use serde_json::Value;

/// Tokens for `n` bytes: one per 4 bytes, rounded up.
pub fn tok(n: usize) -> u64 {
    n.div_ceil(4) as u64
}

/// Prompt tokens for a byte total: `max(1, tok(n))`.
pub fn prompt_tok(n: usize) -> u64 {
    tok(n).max(1)
}

/// Bytes of the compact JSON form of a value (keys sorted by serde_json's map).
pub fn json_len(v: &serde_json::Value) -> usize {
    serde_json::to_vec(v).map(|b| b.len()).unwrap_or(0)
}

/// The deterministic arguments of every simulated function call.
pub const CALL_ARGS_JSON: &str = r#"{"arg":"value"}"#;

pub fn call_args() -> serde_json::Value {
    let mut m = serde_json::Map::new();
    m.insert("arg".into(), serde_json::Value::String("value".into()));
    serde_json::Value::Object(m)
}

/// Output tokens of one simulated call with the fixed arguments.
pub fn call_tokens(name: &str) -> u64 {
    tok(name.len() + CALL_ARGS_JSON.len())
}

/// Output tokens of one simulated call with `args`.
pub fn call_tokens_with(name: &str, args: &Value) -> u64 {
    tok(name.len() + json_len(args))
}

/// Markers found in a request's user text.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Markers {
    pub fault: Option<String>,
    pub latency_ms: Option<u64>,
    pub chunk_delay_ms: Option<u64>,
    pub chunks: Option<usize>,
    pub call: Option<String>,
    pub parallel: Option<usize>,
    /// `[sim:args=…]`: the arguments of this request's calls.
    pub args: Option<Value>,
}

/// The next marker in `text`: the offset of its `[sim:`, its inner text, and the offset just
/// after its `]`. An `args=` value is one JSON value (which may hold `]`); any other ends at
/// the first `]`. `None` when there is no complete marker.
fn next_marker(text: &str) -> Option<(usize, &str, usize)> {
    let start = text.find("[sim:")?;
    let after = &text[start + 5..];
    let json_end = after.strip_prefix("args=").and_then(|v| {
        let lead = v.len() - v.trim_start().len();
        let mut values = serde_json::Deserializer::from_str(&v[lead..]).into_iter::<Value>();
        match values.next() {
            Some(Ok(_)) => Some("args=".len() + lead + values.byte_offset()),
            _ => None,
        }
    });
    let from = json_end.unwrap_or(0);
    let end = from + after[from..].find(']')?;
    Some((start, &after[..end], start + 5 + end + 1))
}

impl Markers {
    /// Parses every `[sim:key=value]` in `text` (later markers win).
    pub fn scan_into(&mut self, text: &str) {
        let mut rest = text;
        while let Some((_, inner, next)) = next_marker(rest) {
            let (key, value) = inner.split_once('=').unwrap_or((inner, ""));
            let value = value.trim();
            match key.trim() {
                "fault" => self.fault = Some(value.to_owned()),
                "latency" => self.latency_ms = value.parse().ok().or(self.latency_ms),
                "chunk-delay" => self.chunk_delay_ms = value.parse().ok().or(self.chunk_delay_ms),
                "chunks" => {
                    self.chunks = value.parse().ok().filter(|n| *n > 0).or(self.chunks);
                }
                "call" => self.call = Some(value.to_owned()),
                "parallel" => {
                    self.parallel = value.parse().ok().filter(|n| *n > 0).or(self.parallel);
                }
                "args" => {
                    if let Ok(v @ Value::Object(_)) = serde_json::from_str(value) {
                        self.args = Some(v);
                    }
                }
                _ => {}
            }
            rest = &rest[next..];
        }
    }

    pub fn scan(text: &str) -> Markers {
        let mut m = Markers::default();
        m.scan_into(text);
        m
    }

    /// The arguments of every call this request makes: the marker's, else `{"arg":"value"}`.
    pub fn call_args(&self) -> Value {
        self.args.clone().unwrap_or_else(call_args)
    }
}

/// Removes every `[sim:…]` marker and trims.
pub fn strip_markers(text: &str) -> String {
    if !text.contains("[sim:") {
        return text.trim().to_owned();
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some((start, _, next)) = next_marker(rest) {
        out.push_str(&rest[..start]);
        rest = &rest[next..];
    }
    // An unclosed marker runs to the end.
    out.push_str(rest.find("[sim:").map_or(rest, |start| &rest[..start]));
    out.trim().to_owned()
}

/// `U` of the module rules: the cleaned user text, or the tool-result summary.
pub fn user_subject(last_user_text: &str, tool_results: usize) -> String {
    let cleaned = strip_markers(last_user_text);
    if cleaned.is_empty() && tool_results > 0 {
        format!("received {tool_results} tool result(s)")
    } else {
        cleaned
    }
}

pub fn reply_text(subject: &str) -> String {
    format!("Echo: {subject}")
}

/// JSON-mode reply (Gemini `responseMimeType: application/json`, OpenAI `response_format`
/// `json_object` / `json_schema`): `{"echo":"<U>"}`.
pub fn reply_json(subject: &str) -> String {
    let mut m = serde_json::Map::new();
    m.insert("echo".into(), serde_json::Value::String(subject.to_owned()));
    serde_json::Value::Object(m).to_string()
}

pub fn thought_text(subject: &str) -> String {
    format!("Thinking: {subject}")
}

/// Cuts `text` to at most `max_tokens` tokens (`max_tokens × 4` bytes, char boundary).
/// Returns the kept prefix and whether it was cut.
pub fn cap_tokens(text: &str, max_tokens: u64) -> (&str, bool) {
    if tok(text.len()) <= max_tokens {
        return (text, false);
    }
    let mut end = usize::try_from(max_tokens.saturating_mul(4)).unwrap_or(usize::MAX);
    end = end.min(text.len());
    while end > 0 && !text.is_char_boundary(end) {
        end -= 1;
    }
    (&text[..end], true)
}

/// Cuts `text` before the earliest stop sequence; returns the kept text and the hit sequence.
pub fn apply_stop<'a, 'b>(text: &'a str, stops: &'b [String]) -> (&'a str, Option<&'b str>) {
    let mut best: Option<(usize, &str)> = None;
    for s in stops {
        if s.is_empty() {
            continue;
        }
        if let Some(pos) = text.find(s.as_str()) {
            if best.is_none_or(|(b, _)| pos < b) {
                best = Some((pos, s.as_str()));
            }
        }
    }
    match best {
        Some((pos, s)) => (&text[..pos], Some(s)),
        None => (text, None),
    }
}

/// Splits `text` into at most `n` non-empty pieces of about equal length (char boundaries).
pub fn split_pieces(text: &str, n: usize) -> Vec<&str> {
    let n = n.max(1);
    if text.is_empty() {
        return Vec::new();
    }
    let chars = text.chars().count();
    let pieces = n.min(chars);
    let mut out = Vec::with_capacity(pieces);
    let mut rest = text;
    for i in 0..pieces {
        let remaining_pieces = pieces - i;
        let remaining_chars = rest.chars().count();
        let take = remaining_chars.div_ceil(remaining_pieces);
        let end = rest
            .char_indices()
            .nth(take)
            .map(|(b, _)| b)
            .unwrap_or(rest.len());
        out.push(&rest[..end]);
        rest = &rest[end..];
    }
    out
}

/// FNV-1a 64-bit.
pub fn fnv64(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// Incremental FNV-1a 64 (for prompt-prefix hashing).
#[derive(Clone, Copy)]
pub struct Fnv(pub u64);

impl Fnv {
    pub fn new() -> Fnv {
        Fnv(0xcbf2_9ce4_8422_2325)
    }
    pub fn feed(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 ^= u64::from(*b);
            self.0 = self.0.wrapping_mul(0x0000_0100_0000_01b3);
        }
        // Separator so that ("ab","c") and ("a","bc") differ.
        self.0 ^= 0xff;
        self.0 = self.0.wrapping_mul(0x0000_0100_0000_01b3);
    }
}

pub fn splitmix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Deterministic unit vector of width `full`, cut to `out` values (see module rules).
pub fn embedding(text: &str, full: usize, out: usize) -> Vec<f32> {
    let full = full.max(1);
    let mut state = fnv64(text.as_bytes());
    let mut v: Vec<f64> = (0..full)
        .map(|_| {
            let x = splitmix(&mut state) >> 11; // 53 bits
            (x as f64 / (1u64 << 53) as f64) * 2.0 - 1.0
        })
        .collect();
    let norm = v
        .iter()
        .map(|x| x * x)
        .sum::<f64>()
        .sqrt()
        .max(f64::MIN_POSITIVE);
    for x in &mut v {
        *x /= norm;
    }
    v.truncate(out.clamp(1, full));
    v.into_iter().map(|x| x as f32).collect()
}

/// Re-normalises a cut vector to unit length (OpenAI `dimensions`).
pub fn renormalise(v: &mut [f32]) {
    let norm = v
        .iter()
        .map(|x| f64::from(*x) * f64::from(*x))
        .sum::<f64>()
        .sqrt();
    if norm > 0.0 {
        for x in v {
            *x = (f64::from(*x) / norm) as f32;
        }
    }
}

/// Prefix of every signature the simulator issues (Gemini `thoughtSignature`, Claude
/// thinking `signature`); only these and Google's documented skip value validate.
const SIG_MAGIC: &[u8] = b"SIMSIG1:";

/// A deterministic base64 signature bound to `seed`.
pub fn signature(seed: &str) -> String {
    let h1 = fnv64(seed.as_bytes());
    let mut st = h1;
    let mut raw = Vec::with_capacity(SIG_MAGIC.len() + 48);
    raw.extend_from_slice(SIG_MAGIC);
    for _ in 0..6 {
        raw.extend_from_slice(&splitmix(&mut st).to_le_bytes());
    }
    base64::engine::general_purpose::STANDARD.encode(raw)
}

/// True when `sig` is a signature this simulator issued.
pub fn is_sim_signature(sig: &str) -> bool {
    base64::engine::general_purpose::STANDARD
        .decode(sig)
        .map(|raw| raw.starts_with(SIG_MAGIC))
        .unwrap_or(false)
}

static ID_COUNTER: AtomicU64 = AtomicU64::new(1);

const ALPHABET: &[u8] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

/// A unique (per process) pseudo-random alphanumeric string of `len` characters.
pub fn random_id(len: usize) -> String {
    let mut st = ID_COUNTER
        .fetch_add(1, Ordering::Relaxed)
        .wrapping_mul(0x9e37_79b9_7f4a_7c15)
        ^ start_salt();
    let mut out = String::with_capacity(len);
    let mut word = splitmix(&mut st);
    let mut left = 10;
    for _ in 0..len {
        if left == 0 {
            word = splitmix(&mut st);
            left = 10;
        }
        out.push(char::from(ALPHABET[(word % 62) as usize]));
        word /= 62;
        left -= 1;
    }
    out
}

fn start_salt() -> u64 {
    static SALT: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *SALT.get_or_init(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0x5eed)
            ^ u64::from(std::process::id())
    })
}

pub fn unix_secs() -> i64 {
    chrono::Utc::now().timestamp()
}

/// RFC 3339 with microseconds and `Z`, like Google's `createTime`.
pub fn rfc3339_micros(t: chrono::DateTime<chrono::Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
}

/// RFC 3339 with nanoseconds and `Z`, like Google's cache `expireTime`.
pub fn rfc3339_nanos(t: chrono::DateTime<chrono::Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Nanos, true)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    #[test]
    fn token_rule() {
        assert_eq!(tok(0), 0);
        assert_eq!(tok(1), 1);
        assert_eq!(tok(4), 1);
        assert_eq!(tok(5), 2);
        assert_eq!(prompt_tok(0), 1);
        assert_eq!(call_tokens("get_weather"), tok(11 + 15));
        assert_eq!(call_tokens_with("get_weather", &call_args()), tok(11 + 15));
        let args = serde_json::json!({"command": "echo hi"});
        assert_eq!(call_tokens_with("Bash", &args), tok(4 + 21));
    }

    #[test]
    fn args_marker_holds_json() {
        let t =
            r#"run [sim:call=Bash] [sim:args={"command":"ls [a]","n":[1,2]}] now [sim:chunks=2]"#;
        let m = Markers::scan(t);
        assert_eq!(m.call.as_deref(), Some("Bash"));
        assert_eq!(
            m.call_args(),
            serde_json::json!({"command": "ls [a]", "n": [1, 2]})
        );
        assert_eq!(m.chunks, Some(2));
        assert_eq!(strip_markers(t), "run   now");
        // Not an object: ignored, the fixed arguments stay; broken JSON ends at the first `]`.
        assert_eq!(Markers::scan("[sim:args=[1]]").call_args(), call_args());
        assert_eq!(Markers::scan("[sim:args={oops] x").args, None);
        assert_eq!(strip_markers("a [sim:args={oops] b"), "a  b");
        assert_eq!(strip_markers("a [sim:args={\"x\":1}"), "a");
    }

    #[test]
    fn markers_parse_and_strip() {
        let t = "hi [sim:fault=break-after=2] there [sim:latency=50][sim:chunks=5] [sim:call=f]";
        let m = Markers::scan(t);
        assert_eq!(m.fault.as_deref(), Some("break-after=2"));
        assert_eq!(m.latency_ms, Some(50));
        assert_eq!(m.chunks, Some(5));
        assert_eq!(m.call.as_deref(), Some("f"));
        assert_eq!(strip_markers(t), "hi  there");
        assert_eq!(strip_markers("  plain "), "plain");
        assert_eq!(
            user_subject("[sim:latency=1]", 2),
            "received 2 tool result(s)"
        );
    }

    #[test]
    fn capping_and_stops() {
        assert_eq!(cap_tokens("Echo: hello world", 2), ("Echo: he", true));
        assert_eq!(cap_tokens("abc", 1), ("abc", false));
        assert_eq!(cap_tokens("ééééé", 1), ("éé", true));
        let stops = vec!["lo".to_owned(), "Ec".to_owned()];
        assert_eq!(apply_stop("Echo: hello", &stops), ("", Some("Ec")));
    }

    #[test]
    fn pieces_cover_text() {
        let p = split_pieces("Echo: hello", 3);
        assert_eq!(p.len(), 3);
        assert_eq!(p.concat(), "Echo: hello");
        assert_eq!(split_pieces("ab", 5), vec!["a", "b"]);
        assert!(split_pieces("", 3).is_empty());
    }

    #[test]
    fn embeddings_are_deterministic_prefixes() {
        let a = embedding("hello", 768, 768);
        let b = embedding("hello", 768, 16);
        assert_eq!(&a[..16], &b[..]);
        let n: f64 = a.iter().map(|x| f64::from(*x).powi(2)).sum();
        assert!((n - 1.0).abs() < 1e-4);
        assert_ne!(embedding("world", 768, 8), b[..8].to_vec());
    }

    #[test]
    fn signatures_round_trip() {
        let s = signature("x");
        assert!(is_sim_signature(&s));
        assert_eq!(s, signature("x"));
        assert!(!is_sim_signature("bm90IG91cnM="));
        assert!(!is_sim_signature("%%%"));
    }

    #[test]
    fn ids_are_unique() {
        assert_ne!(random_id(12), random_id(12));
        assert_eq!(random_id(24).len(), 24);
    }
}
