//! The `/v1/embeddings` answer: a `list` of `embedding` objects in input order, each vector as
//! JSON numbers (`float`) or as little-endian `f32` bytes in standard padded base64
//! (`base64`), and usage with input tokens only.

use base64::Engine as _;
use bytes::Bytes;
use serde::Serialize;

#[derive(Serialize)]
#[serde(untagged)]
enum Vector<'a> {
    Float(&'a [f32]),
    Base64(String),
}

#[derive(Serialize)]
struct Item<'a> {
    object: &'static str,
    index: usize,
    embedding: Vector<'a>,
}

#[derive(Serialize)]
struct EmbeddingUsage {
    prompt_tokens: u64,
    /// Always 0: clients that read it (chat-shaped usage readers) see no output.
    completion_tokens: u64,
    total_tokens: u64,
}

#[derive(Serialize)]
struct List<'a> {
    object: &'static str,
    data: Vec<Item<'a>>,
    model: &'a str,
    usage: EmbeddingUsage,
}

/// Little-endian `f32` bytes in standard padded base64, as the OpenAI API encodes vectors.
pub fn base64_vector(v: &[f32]) -> String {
    let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// The client's body for `vectors` (in input order) of `model`, having used `tokens`.
pub fn render(
    vectors: &[Vec<f32>],
    base64: bool,
    model: &str,
    tokens: u64,
) -> Result<Bytes, serde_json::Error> {
    let data = vectors
        .iter()
        .enumerate()
        .map(|(index, v)| Item {
            object: "embedding",
            index,
            embedding: if base64 {
                Vector::Base64(base64_vector(v))
            } else {
                Vector::Float(v)
            },
        })
        .collect();
    let list = List {
        object: "list",
        data,
        model,
        usage: EmbeddingUsage {
            prompt_tokens: tokens,
            completion_tokens: 0,
            total_tokens: tokens,
        },
    };
    let mut body = Vec::with_capacity(capacity(vectors, base64, model));
    super::json::append(&mut body, &list)?;
    Ok(Bytes::from(body))
}

/// About the size of the body, so that it is written without growing: most floats take 12 or
/// 13 bytes with their comma (`-0.039315943,`), the longest 16 (`-1.1754944e-38,`), and a
/// vector that runs over grows once.
fn capacity(vectors: &[Vec<f32>], base64: bool, model: &str) -> usize {
    let values: usize = vectors.iter().map(Vec::len).sum();
    let per_value = if base64 { 6 } else { 13 };
    values * per_value + vectors.len() * 48 + model.len() + 128
}
