//! `previous_response_id`: which stored response a body continues, and the conversation that
//! gives the door (the stored request's items, then its answer's output items), built from the
//! stored JSON texts without re-rendering an item.

use serde::Deserialize;
use serde_json::value::RawValue;

use crate::api::request::object_fields;
use crate::api::{GatewayError, RawRequest};

/// The body's `previous_response_id`, if it names one.
pub fn previous_response_id(body: &[u8]) -> Result<Option<String>, GatewayError> {
    // Most bodies name none, and admission reads the whole body next: a pass of `memmem` over
    // it, not a read of its JSON, tells most of them. The key, however spelled, is written as
    // is or with a `\u` escape (the one escape that stands for a letter or `_`).
    let find = |needle: &[u8]| memchr::memmem::find(body, needle).is_some();
    if !find(b"previous_response_id") && !find(b"\\u") {
        return Ok(None);
    }
    let head = RawRequest::parse_head(body)?;
    Ok(head
        .typed::<Option<String>>("previous_response_id")?
        .flatten()
        .filter(|id| !id.is_empty()))
}

/// The conversation a stored response continues into: `items` (a JSON array) followed by the
/// `output` array of `response` (a response object), as one JSON array.
pub fn continued(items: &str, response: &str) -> Result<Vec<u8>, GatewayError> {
    #[derive(Deserialize)]
    struct Answer<'a> {
        #[serde(borrow)]
        output: &'a RawValue,
    }
    let corrupt = |what: &str| GatewayError::Internal(format!("a kept response's {what}").into());
    let answer: Answer =
        serde_json::from_str(response).map_err(|_| corrupt("answer is not a response"))?;
    let before = list_items(items).ok_or_else(|| corrupt("items are not a list"))?;
    let output = list_items(answer.output.get()).ok_or_else(|| corrupt("output is not a list"))?;
    let parts: Vec<&str> = [before, output]
        .into_iter()
        .filter(|p| !p.is_empty())
        .collect();
    Ok(format!("[{}]", parts.join(",")).into_bytes())
}

/// The items of a JSON array as written, without its brackets and the space around them:
/// `[ {…}, {…} ]` → `{…}, {…}`; empty for `[]`; `None` for what is not bracketed.
pub(super) fn list_items(array: &str) -> Option<&str> {
    let inner = array.trim().strip_prefix('[')?.strip_suffix(']')?;
    Some(inner.trim())
}

/// The client's `body` with `input` replaced by `conversation` (a JSON array): what an
/// upstream that keeps nothing of this gateway's is sent when the request continues a kept
/// response. Every other field is as sent.
pub fn with_input(body: &[u8], conversation: &[u8]) -> Result<Vec<u8>, GatewayError> {
    let fields = object_fields(body)
        .map_err(|e| GatewayError::invalid(format!("request body is not valid JSON: {e}")))?;
    let mut out = Vec::with_capacity(body.len() + conversation.len());
    out.push(b'{');
    for (name, value) in fields.iter().filter(|(name, _)| name != "input") {
        serde_json::to_writer(&mut out, name)
            .map_err(|e| GatewayError::Internal(e.to_string().into()))?;
        out.push(b':');
        out.extend_from_slice(value.get().as_bytes());
        out.push(b',');
    }
    out.extend_from_slice(b"\"input\":");
    out.extend_from_slice(conversation);
    out.push(b'}');
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    #[test]
    fn the_conversation_is_the_items_then_the_output() {
        let items = r#"[{"type":"message","role":"user","content":"hi"}]"#;
        let response = r#"{"id":"resp_1","output":[{"type":"message","role":"assistant","content":[{"type":"output_text","text":"Echo: hi"}]}]}"#;
        let joined: Value = serde_json::from_slice(&continued(items, response).unwrap()).unwrap();
        assert_eq!(
            joined,
            json!([{"type":"message","role":"user","content":"hi"},
                {"type":"message","role":"assistant","content":[{"type":"output_text","text":"Echo: hi"}]}])
        );
        let empty: Value =
            serde_json::from_slice(&continued("[]", r#"{"output": []}"#).unwrap()).unwrap();
        assert_eq!(empty, json!([]));
        let only_output: Value =
            serde_json::from_slice(&continued(" [ ] ", response).unwrap()).unwrap();
        assert_eq!(only_output.as_array().unwrap().len(), 1);
        assert!(continued("{}", response).is_err());
        assert!(continued(items, "{}").is_err());
    }

    #[test]
    fn a_continued_body_sends_the_whole_conversation_as_input() {
        let body =
            br#"{"model":"m","input":"again?","previous_response_id":"resp_1","stream":true}"#;
        let out = with_input(
            body,
            br#"[{"role":"user","content":"hi"},{"role":"user","content":"again?"}]"#,
        )
        .unwrap();
        let v: Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(
            v,
            json!({"model": "m", "previous_response_id": "resp_1", "stream": true,
                "input": [{"role": "user", "content": "hi"}, {"role": "user", "content": "again?"}]})
        );
        let v: Value =
            serde_json::from_slice(&with_input(br#"{"model":"m"}"#, b"[]").unwrap()).unwrap();
        assert_eq!(v, json!({"model": "m", "input": []}));
        assert!(with_input(b"[]", b"[]").is_err());
    }

    #[test]
    fn the_previous_response_id_is_read_from_the_body() {
        let read = |b: &str| previous_response_id(b.as_bytes());
        assert_eq!(
            read(r#"{"model":"m","previous_response_id":"resp_1"}"#).unwrap(),
            Some("resp_1".into())
        );
        assert_eq!(read(r#"{"model":"m"}"#).unwrap(), None);
        assert_eq!(
            read(r#"{"model":"m","previous_response_id":null}"#).unwrap(),
            None
        );
        assert_eq!(
            read(r#"{"model":"m","previous_response_id":""}"#).unwrap(),
            None
        );
        assert!(read(r#"{"model":"m","previous_response_id":7}"#).is_err());
        // The key spelled with an escape.
        assert_eq!(
            read(r#"{"model":"m","previous\u005fresponse_id":"resp_2"}"#).unwrap(),
            Some("resp_2".into())
        );
        assert_eq!(read(r#"{"model":"m","input":"caf\u00e9"}"#).unwrap(), None);
    }
}
