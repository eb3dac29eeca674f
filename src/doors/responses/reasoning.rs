//! A reasoning item's `encrypted_content` as this gateway writes it: the answer's
//! `reasoning_details` (Claude's thinking text with its signature, or its redacted thinking),
//! as JSON, base64url-encoded behind a `tg1.` tag. Opaque to the client, who sends it back
//! in the next turn's input; read back onto the assistant message's `reasoning_details`, so
//! Claude sees its own signed thinking again with no state in the gateway. Nothing in it is
//! secret (the client saw the thinking text), and Claude checks its own signatures, so a
//! forged blob gains nothing.
//!
//! A blob without the tag (OpenAI's own encrypted reasoning, from another gateway or the
//! real API) reads as nothing: the item is dropped.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use serde::{Deserialize, Serialize};

const TAG: &str = "tg1.";

/// One reasoning block: `reasoning.text` (`text`, `signature`) or `reasoning.encrypted`
/// (`data`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Detail {
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signature: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<String>,
}

/// The `encrypted_content` carrying `details`; `None` when there are none.
pub fn encode(details: &[Detail]) -> Option<String> {
    if details.is_empty() {
        return None;
    }
    let json = serde_json::to_vec(details).ok()?;
    Some(format!("{TAG}{}", URL_SAFE_NO_PAD.encode(json)))
}

/// The details an `encrypted_content` written by [`encode`] carries; `None` for anything else.
pub fn decode(content: &str) -> Option<Vec<Detail>> {
    let json = URL_SAFE_NO_PAD.decode(content.strip_prefix(TAG)?).ok()?;
    serde_json::from_slice(&json).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn details_round_trip_and_foreign_blobs_read_as_nothing() {
        let details = vec![
            Detail {
                kind: "reasoning.text".into(),
                text: Some("Think \"twice\".".into()),
                signature: Some("EqQBCkYIBxgCKkA=".into()),
                data: None,
            },
            Detail {
                kind: "reasoning.encrypted".into(),
                text: None,
                signature: None,
                data: Some("redacted".into()),
            },
        ];
        let blob = encode(&details).unwrap();
        assert!(blob.starts_with("tg1."));
        assert_eq!(decode(&blob), Some(details));
        assert_eq!(encode(&[]), None);
        assert_eq!(decode("gAAAAABo-openai-blob"), None);
        assert_eq!(decode("tg1.!!!"), None);
        assert_eq!(
            decode(&format!("tg1.{}", URL_SAFE_NO_PAD.encode("{}"))),
            None
        );
    }
}
