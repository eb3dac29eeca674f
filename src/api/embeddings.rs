//! The `/v1/embeddings` answer: a `list` of `embedding` objects in input order, each vector as
//! JSON numbers (`float`) or as little-endian `f32` bytes in standard padded base64
//! (`base64`), and usage with input tokens only.

use base64::Engine as _;
use bytes::Bytes;

/// One vector as the answer carries it.
#[derive(Debug, PartialEq)]
pub enum Vector<'a> {
    /// A JSON array of numbers as the upstream wrote it, copied without its whitespace: a
    /// vector nothing changes is never parsed into floats and printed again (four fifths of an
    /// embedding's cost when it was).
    Numbers(&'a str),
    /// Floats the gateway computed (a vector it normalised).
    Floats(Vec<f32>),
    /// Base64 of the floats' little-endian bytes ([`base64_vector`]).
    Base64(String),
}

impl<'a> Vector<'a> {
    /// `json` as [`Vector::Numbers`] when it is an array of numbers, `None` otherwise. `json`
    /// must be one well-formed JSON value (as a `RawValue` is): then an array whose inside has
    /// only number characters, commas and whitespace holds numbers only.
    pub fn numbers(json: &'a str) -> Option<Self> {
        let inside = json.trim().strip_prefix('[')?.strip_suffix(']')?;
        inside
            .bytes()
            .all(|b| b.is_ascii_digit() || b",.-+eE".contains(&b) || b.is_ascii_whitespace())
            .then_some(Vector::Numbers(json))
    }

    fn write(&self, out: &mut Vec<u8>) {
        match self {
            Vector::Numbers(json) => {
                out.extend(json.bytes().filter(|b| !b.is_ascii_whitespace()));
            }
            // Each float as its shortest text that reads back the same (`null` for one JSON
            // cannot hold); a slice of floats serializes infallibly into a `Vec`.
            Vector::Floats(v) => {
                let _ = serde_json::to_writer(out, v);
            }
            Vector::Base64(text) => {
                out.push(b'"');
                out.extend_from_slice(text.as_bytes());
                out.push(b'"');
            }
        }
    }
}

/// Little-endian `f32` bytes in standard padded base64, as the OpenAI API encodes vectors.
pub fn base64_vector(v: &[f32]) -> String {
    let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// The client's body for `vectors` (in input order) of `model`, having used `tokens`.
pub fn render(vectors: &[Vector], model: &str, tokens: u64) -> Bytes {
    let numbers: usize = vectors
        .iter()
        .map(|v| match v {
            Vector::Numbers(json) => json.len(),
            Vector::Floats(f) => f.len().saturating_mul(16),
            Vector::Base64(text) => text.len(),
        })
        .sum();
    let mut out =
        Vec::with_capacity(numbers.saturating_add(vectors.len().saturating_mul(48)) + 160);
    out.extend_from_slice(br#"{"object":"list","data":["#);
    let mut number = itoa::Buffer::new();
    for (i, v) in vectors.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(br#"{"object":"embedding","index":"#);
        out.extend_from_slice(number.format(i).as_bytes());
        out.extend_from_slice(br#","embedding":"#);
        v.write(&mut out);
        out.push(b'}');
    }
    out.extend_from_slice(br#"],"model":"#);
    // A string serializes infallibly into a `Vec`.
    let _ = serde_json::to_writer(&mut out, model);
    // `completion_tokens` is always 0: clients that read it (chat-shaped usage readers) see no
    // output.
    out.extend_from_slice(br#","usage":{"prompt_tokens":"#);
    out.extend_from_slice(number.format(tokens).as_bytes());
    out.extend_from_slice(br#","completion_tokens":0,"total_tokens":"#);
    out.extend_from_slice(number.format(tokens).as_bytes());
    out.extend_from_slice(b"}}");
    Bytes::from(out)
}

#[cfg(test)]
mod tests {
    use serde_json::{json, Value};

    use super::*;

    #[test]
    fn only_an_array_of_numbers_passes_through() {
        let pretty = "[\n  -0.039315943,\n  1.5e-7,\n  3\n]";
        assert_eq!(Vector::numbers(pretty), Some(Vector::Numbers(pretty)));
        assert!(Vector::numbers("[]").is_some());
        for not in [
            r#"["1"]"#,
            "[null]",
            "[[1]]",
            "[{}]",
            "1",
            r#"{"a":1}"#,
            "[true]",
        ] {
            assert_eq!(Vector::numbers(not), None, "{not}");
        }
    }

    #[test]
    fn every_kind_of_vector_renders_as_openai_writes_it() {
        let vectors = [
            Vector::Numbers("[\n  -0.25,\n  1e-7\n]"),
            Vector::Floats(vec![0.1, -2.0, f32::NAN]),
            Vector::Base64(base64_vector(&[1.0, -2.0])),
        ];
        let body = render(&vectors, "google/\"quoted\"", 7);
        let v: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(
            v,
            json!({"object": "list", "model": "google/\"quoted\"",
                   "data": [
                       {"object": "embedding", "index": 0, "embedding": [-0.25, 1e-7]},
                       {"object": "embedding", "index": 1, "embedding": [0.1, -2.0, null]},
                       {"object": "embedding", "index": 2, "embedding": "AACAPwAAAMA="}],
                   "usage": {"prompt_tokens": 7, "completion_tokens": 0, "total_tokens": 7}})
        );
        assert!(
            std::str::from_utf8(&body)
                .unwrap()
                .contains(r#""embedding":[-0.25,1e-7]}"#),
            "the upstream's numbers as written, without their whitespace"
        );
        assert!(
            std::str::from_utf8(&body)
                .unwrap()
                .contains("[0.1,-2.0,null]"),
            "f32's shortest text"
        );
    }
}
