//! The charge in every answer: what a billed request cost and which usage record bills it,
//! written into the usage object the door already rendered, on every door.
//!
//! - `usage.cost` is OpenRouter's field: a JSON number written with the exact decimal digits of
//!   the ledger's debit (pico-USD, trailing zeros dropped), never through a float.
//! - `usage.generation_id` is the usage record's id (what `/v1/generation?id=` reads).
//!
//! The cost is known only once the answer's usage is (the record is journaled just before the
//! answer's last bytes), so it is spliced into what the translators wrote rather than passed
//! to each of them: a buffered body's usage object, or the last usage object of a stream's
//! final frames (top-level `usage`, or `response.usage` in the Responses door's
//! `response.completed`). A translator that wrote the answer says where that object closes
//! (`Translated::usage_close`, `StreamTranslator::usage_close`), and nothing is read; debug
//! builds check the place against the search. Otherwise (an answer an upstream wrote) the
//! search reads the JSON once with serde's raw values, so text that only looks like a usage
//! object inside a string is never touched.

use serde_json::value::RawValue;

use crate::api::request::object_fields;
use crate::money::Usd;

/// What a billed request cost and its usage record's id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Charge {
    pub cost: Usd,
    pub id: String,
}

impl Charge {
    /// Appends the members added to a usage object: `"cost":…,"generation_id":"…"`.
    fn write_members(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(b"\"cost\":");
        self.cost.write_decimal(out);
        out.extend_from_slice(b",\"generation_id\":");
        crate::api::json::string(out, &self.id);
    }
}

/// `body` (a buffered answer, one JSON object) with the charge in its usage object; `None`
/// when it has none (nothing is changed then). `close`: where that object's `}` is, when the
/// translator that wrote the body says so (`Translated::usage_close`); then nothing is read.
pub fn into_body(body: &[u8], close: Option<usize>, charge: &Charge) -> Option<Vec<u8>> {
    let at = told(body, close, usage_end).or_else(|| usage_end(body))?;
    Some(splice(body, at, charge))
}

/// `frames` (complete SSE events whose data is on one `data:` line) with the charge in the last
/// usage object they carry; `None` when they carry none. `close`: where that object's `}` is,
/// when the translator that wrote the frames says so (`StreamTranslator::usage_close`); then
/// nothing is read.
pub fn into_frames(frames: &[u8], close: Option<usize>, charge: &Charge) -> Option<Vec<u8>> {
    let at = told(frames, close, last_usage_end).or_else(|| last_usage_end(frames))?;
    Some(splice(frames, at, charge))
}

/// The place a translator told (`close`), where `doc` has a `}`; debug builds check that it
/// is the one `find` would have found.
fn told(doc: &[u8], close: Option<usize>, find: fn(&[u8]) -> Option<UsageEnd>) -> Option<UsageEnd> {
    let close = close.filter(|&at| doc.get(at) == Some(&b'}'))?;
    let at = UsageEnd {
        close,
        empty: doc.get(close.wrapping_sub(1)) == Some(&b'{'),
    };
    debug_assert_eq!(Some(at), find(doc), "the translator's usage_close");
    Some(at)
}

/// `doc` with the charge's members added to the usage object that closes at `at`.
fn splice(doc: &[u8], at: UsageEnd, charge: &Charge) -> Vec<u8> {
    // The members: a comma, 26 bytes of names and quotes, a cost of 40 at most, and the id.
    let mut out = Vec::with_capacity(doc.len() + 67 + charge.id.len());
    out.extend_from_slice(&doc[..at.close]);
    if !at.empty {
        out.push(b',');
    }
    charge.write_members(&mut out);
    out.extend_from_slice(&doc[at.close..]);
    out
}

/// Where a usage object closes: the index of its `}`, and whether it has no members.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct UsageEnd {
    close: usize,
    empty: bool,
}

impl UsageEnd {
    /// The same place, in a document where what it was found in begins at `offset`.
    fn shifted(self, offset: usize) -> Self {
        Self {
            close: offset + self.close,
            ..self
        }
    }
}

/// Where the usage object of the last `data:` line that has one closes, in `frames`. Each line
/// is read once: the frame found is spliced at the place found, not searched again.
fn last_usage_end(frames: &[u8]) -> Option<UsageEnd> {
    let mut end = frames.len();
    while end > 0 {
        let start = frames[..end]
            .iter()
            .rposition(|&b| b == b'\n')
            .map_or(0, |i| i + 1);
        let line = &frames[start..end];
        if let Some(json) = line.strip_prefix(b"data:") {
            let offset = start + 5 + json.len() - json.trim_ascii_start().len();
            let json = frames[offset..end].trim_ascii_end();
            if json.starts_with(b"{") {
                if let Some(at) = usage_end(json) {
                    return Some(at.shifted(offset));
                }
            }
        }
        end = start.saturating_sub(1);
    }
    None
}

/// Where the usage object of `doc` closes: the top-level `usage`, else `response.usage`.
fn usage_end(doc: &[u8]) -> Option<UsageEnd> {
    let fields = object_fields(doc).ok()?;
    let field = |name: &str| fields.iter().find(|(k, _)| k == name).map(|(_, v)| *v);
    if let Some(usage) = field("usage") {
        return object_end(doc, usage);
    }
    let response = field("response")?;
    let inner = usage_end(response.get().as_bytes())?;
    Some(inner.shifted(offset_in(doc, response)?))
}

/// Where `value` (a raw value borrowed from `doc`) closes in `doc`, if it is an object.
fn object_end(doc: &[u8], value: &RawValue) -> Option<UsageEnd> {
    let text = value.get();
    if !text.starts_with('{') {
        return None;
    }
    Some(UsageEnd {
        close: offset_in(doc, value)? + text.len() - 1,
        empty: text[1..text.len() - 1].trim_ascii().is_empty(),
    })
}

/// Where `value`, borrowed from `doc`, begins in it.
fn offset_in(doc: &[u8], value: &RawValue) -> Option<usize> {
    let at = (value.get().as_ptr() as usize).checked_sub(doc.as_ptr() as usize)?;
    (at + value.get().len() <= doc.len()).then_some(at)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    fn charge() -> Charge {
        Charge {
            cost: Usd::from_pico(1_234_500_000),
            id: "chatcmpl-1".into(),
        }
    }

    fn body(doc: &str) -> Value {
        serde_json::from_slice(&into_body(doc.as_bytes(), None, &charge()).unwrap()).unwrap()
    }

    #[test]
    fn the_cost_is_the_exact_decimal_of_the_debit() {
        let v = body(r#"{"id":"x","usage":{"prompt_tokens":3}}"#);
        assert_eq!(v["usage"]["prompt_tokens"], 3);
        assert_eq!(v["usage"]["generation_id"], "chatcmpl-1");
        let text = String::from_utf8(into_body(br#"{"usage":{"a":1}}"#, None, &charge()).unwrap())
            .unwrap();
        assert_eq!(
            text,
            r#"{"usage":{"a":1,"cost":0.0012345,"generation_id":"chatcmpl-1"}}"#
        );
        let tiny = Charge {
            cost: Usd::from_pico(1),
            id: "x".into(),
        };
        let text = into_body(br#"{"usage":{}}"#, None, &tiny).unwrap();
        assert_eq!(
            text,
            br#"{"usage":{"cost":0.000000000001,"generation_id":"x"}}"#
        );
    }

    #[test]
    fn only_the_top_level_usage_is_written_to() {
        // A tool's input (a raw object in a Messages answer) may hold its own "usage".
        let doc = r#"{"content":[{"type":"tool_use","input":{"usage":{"n":1}}}], "usage" : { "output_tokens" : 2 } }"#;
        let v = body(doc);
        assert_eq!(v["content"][0]["input"], json!({"usage": {"n": 1}}));
        assert_eq!(v["usage"]["cost"], json!(0.0012345));
        // Text that looks like a usage object inside a string is left alone.
        let v = body(r#"{"text":"\"usage\":{}","usage":{"x":1}}"#);
        assert_eq!(v["text"], r#""usage":{}"#);
        assert_eq!(v["usage"]["x"], 1);
    }

    #[test]
    fn the_responses_object_carries_it_in_response_usage() {
        let v = body(
            r#"{"type":"response.completed","response":{"id":"r","usage":{"total_tokens":5}},"sequence_number":9}"#,
        );
        assert_eq!(v["response"]["usage"]["cost"], json!(0.0012345));
        assert_eq!(v["sequence_number"], 9);
    }

    #[test]
    fn without_a_usage_object_nothing_changes() {
        assert!(into_body(br#"{"usage":null}"#, None, &charge()).is_none());
        assert!(into_body(br#"{"id":"x"}"#, None, &charge()).is_none());
        assert!(into_body(b"not json", None, &charge()).is_none());
        assert!(into_frames(b"data: {\"x\":1}\n\ndata: [DONE]\n\n", None, &charge()).is_none());
    }

    #[test]
    fn a_responses_stream_gets_it_in_its_completed_events_response() {
        // The place found inside `response`, inside the line, inside the frames: three offsets.
        let raw = "event: response.output_text.done\ndata: {\"type\":\"response.output_text.done\",\"text\":\"\\\"usage\\\":{}\"}\n\n\
                   event: response.completed\ndata:  {\"type\":\"response.completed\",\"response\":{\"id\":\"r\",\"usage\":{ }},\"sequence_number\":2} \n\n";
        let frames = into_frames(raw.as_bytes(), None, &charge()).unwrap();
        let text = std::str::from_utf8(&frames).unwrap();
        let (before, after) = raw.split_at(raw.find("{ }").unwrap() + 2);
        assert_eq!(
            text,
            format!("{before}\"cost\":0.0012345,\"generation_id\":\"chatcmpl-1\"{after}")
        );
    }

    #[test]
    fn the_last_frame_with_usage_gets_it() {
        let raw = "event: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":2}}\n\n\
                   event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n";
        let frames = into_frames(raw.as_bytes(), None, &charge()).unwrap();
        let text = std::str::from_utf8(&frames).unwrap();
        assert!(text.starts_with("event: message_delta\ndata: {"));
        assert!(text.ends_with("event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"));
        let data: Value =
            serde_json::from_str(text.lines().nth(1).unwrap().strip_prefix("data: ").unwrap())
                .unwrap();
        assert_eq!(data["usage"]["output_tokens"], 2);
        assert_eq!(data["usage"]["cost"], json!(0.0012345));

        let raw = "data: {\"usage\":{\"a\":1}}\n\ndata: {\"choices\":[],\"usage\":{\"a\":2}}\n\ndata: [DONE]\n\n";
        let frames = into_frames(raw.as_bytes(), None, &charge()).unwrap();
        let text = std::str::from_utf8(&frames).unwrap();
        assert!(
            text.starts_with("data: {\"usage\":{\"a\":1}}\n\n"),
            "{text}"
        );
        assert!(text.contains(r#"{"a":2,"cost":0.0012345,"generation_id":"chatcmpl-1"}"#));
        assert!(text.ends_with("data: [DONE]\n\n"));
    }
}
