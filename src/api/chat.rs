//! The client's chat request, below its top-level fields ([`RawRequest`](super::RawRequest)):
//! messages, content parts, tool calls and declarations, `response_format` — OpenAI's shapes
//! with OpenRouter's extensions (`cache_control` on messages and parts, `file` parts).
//!
//! Read on demand by the provider family that translates them, borrowed from the request bytes
//! ([`Str`], raw slices for what is forwarded untouched, like tool schemas). The types carry
//! every field any family reads; each family decides what it accepts and how it refuses the
//! rest (Gemini reads audio and files; the chat door keeps tools off Claude at admission).

use std::borrow::Cow;
use std::ops::Deref;

use serde::de::{Error as _, Unexpected};
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::value::RawValue;

use super::list::Items;
use super::{GatewayError, RawRequest};

/// A borrowed-when-possible JSON string. `Option<Cow<str>>` fields never borrow under serde;
/// this newtype does, so unescaped strings stay slices of the request or response bytes.
#[derive(Debug, Deserialize)]
#[serde(transparent)]
pub struct Str<'a>(#[serde(borrow)] pub Cow<'a, str>);

impl Deref for Str<'_> {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

/// A JSON string as the client wrote it, escapes and all, or text a translation made. Written
/// into the next body byte for byte, so that a long conversation's text is neither unescaped nor
/// escaped again on its way through; read as text ([`into_cow`](Self::into_cow)) only where a
/// translation needs its value.
#[derive(Debug, Clone)]
pub enum Text<'a> {
    /// A JSON string (its quotes included), never another kind of value.
    Json(&'a RawValue),
    Made(Cow<'a, str>),
}

impl<'a> Text<'a> {
    pub fn is_empty(&self) -> bool {
        match self {
            Text::Json(raw) => raw.get() == "\"\"",
            Text::Made(text) => text.is_empty(),
        }
    }

    /// The JSON value `raw` as text: a string is taken as it is (read whole already, it needs
    /// no second read), anything else is the error `Text`'s reading gives.
    pub fn of(raw: &'a RawValue) -> Result<Self, serde_json::Error> {
        if raw.get().starts_with('"') {
            return Ok(Text::Json(raw));
        }
        serde_json::from_str(raw.get())
    }

    /// Its length in bytes as written (an escape counts as its characters): an estimate's.
    pub fn written_len(&self) -> usize {
        match self {
            Text::Json(raw) => raw.get().len().saturating_sub(2),
            Text::Made(text) => text.len(),
        }
    }

    /// The text itself, unescaped; `at` names it in the error.
    pub fn into_cow(self, at: &dyn std::fmt::Display) -> Result<Cow<'a, str>, GatewayError> {
        match self {
            Text::Json(raw) => serde_json::from_str::<Str<'a>>(raw.get())
                .map(|s| s.0)
                .map_err(|e| GatewayError::invalid(format!("invalid value for {at}: {e}"))),
            Text::Made(text) => Ok(text),
        }
    }
}

impl<'a> From<Cow<'a, str>> for Text<'a> {
    fn from(text: Cow<'a, str>) -> Self {
        Text::Made(text)
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for Text<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let raw = <&'de RawValue>::deserialize(d)?;
        // What it is instead, not the value itself (which may be large).
        let other = match raw.get().as_bytes().first() {
            Some(b'"') => return Ok(Text::Json(raw)),
            Some(b'{') => Unexpected::Map,
            Some(b'[') => Unexpected::Seq,
            Some(b't' | b'f') => Unexpected::Other("a boolean"),
            Some(b'n') => Unexpected::Unit,
            _ => Unexpected::Other("a number"),
        };
        Err(D::Error::invalid_type(other, &"a string"))
    }
}

impl Serialize for Text<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Text::Json(raw) => raw.serialize(s),
            Text::Made(text) => s.serialize_str(text),
        }
    }
}

/// The request's `messages` (none when absent), each read as `T` as the caller takes it, in one
/// pass where they all read ([`list`](super::list)), so that an error is the first message's that
/// fails (`messages[i]: …`) where the caller's own checks of the messages before it come first.
pub fn messages<'a, T: Deserialize<'a>>(
    req: &RawRequest<'a>,
) -> Result<Messages<'a, T>, GatewayError> {
    let Some(raw) = req.get("messages") else {
        return Ok(Messages(None));
    };
    let items = super::list::items(raw)
        .map_err(|e| GatewayError::invalid(format!("invalid value for messages: {e}")))?;
    Ok(Messages(Some(items)))
}

/// What [`messages`] yields.
pub struct Messages<'a, T>(Option<Items<'a, T>>);

impl<'a, T: Deserialize<'a>> Iterator for Messages<'a, T> {
    type Item = Result<T, GatewayError>;

    fn next(&mut self) -> Option<Self::Item> {
        let (i, message) = self.0.as_mut()?.next()?;
        Some(message.map_err(|e| GatewayError::invalid(format!("messages[{i}]: {e}"))))
    }
}

/// One entry of `messages`; `content` stays raw (a string, an array of parts, or null).
#[derive(Deserialize)]
pub struct MessageIn<'a> {
    #[serde(borrow)]
    pub role: Str<'a>,
    #[serde(borrow, default)]
    pub content: Option<&'a RawValue>,
    #[serde(borrow, default)]
    pub name: Option<Str<'a>>,
    #[serde(borrow, default)]
    pub tool_calls: Option<Vec<ToolCallIn<'a>>>,
    #[serde(borrow, default)]
    pub tool_call_id: Option<Str<'a>>,
    #[serde(borrow, default)]
    pub cache_control: Option<CacheControlIn<'a>>,
    /// An assistant message's reasoning as the upstream must see it again (OpenRouter's
    /// convention): Claude's thinking text with its signature, or its redacted thinking.
    #[serde(borrow, default)]
    pub reasoning_details: Option<Vec<ReasoningDetailIn<'a>>>,
}

/// One entry of an assistant message's `reasoning_details`: `reasoning.text` (`text` and its
/// `signature`) or `reasoning.encrypted` (opaque `data`); other types are ignored.
#[derive(Deserialize)]
pub struct ReasoningDetailIn<'a> {
    #[serde(rename = "type", borrow)]
    pub kind: Str<'a>,
    #[serde(borrow, default)]
    pub text: Option<Str<'a>>,
    #[serde(borrow, default)]
    pub signature: Option<Str<'a>>,
    #[serde(borrow, default)]
    pub data: Option<Str<'a>>,
}

/// One content part (`text`, `image_url`, `input_audio`, `file`).
#[derive(Deserialize)]
pub struct PartIn<'a> {
    #[serde(rename = "type", borrow)]
    pub kind: Str<'a>,
    #[serde(borrow, default)]
    pub text: Option<Text<'a>>,
    #[serde(borrow, default)]
    pub image_url: Option<UrlIn<'a>>,
    #[serde(borrow, default)]
    pub input_audio: Option<AudioIn<'a>>,
    #[serde(borrow, default)]
    pub file: Option<FileIn<'a>>,
    #[serde(borrow, default)]
    pub cache_control: Option<CacheControlIn<'a>>,
}

impl<'a> PartIn<'a> {
    /// A text part (what a string `content` stands for).
    pub fn text(text: Text<'a>) -> Self {
        PartIn {
            kind: Str(Cow::Borrowed("text")),
            text: Some(text),
            image_url: None,
            input_audio: None,
            file: None,
            cache_control: None,
        }
    }
}

/// An `image_url` content part's URL.
#[derive(Deserialize)]
pub struct UrlIn<'a> {
    #[serde(borrow)]
    pub url: Str<'a>,
}

/// An `input_audio` part: base64 data and its format (`wav`, `mp3`, …).
#[derive(Deserialize)]
pub struct AudioIn<'a> {
    #[serde(borrow)]
    pub data: Str<'a>,
    #[serde(borrow)]
    pub format: Str<'a>,
}

/// A `file` part (a data URL or a URL in `file_data`).
#[derive(Deserialize)]
pub struct FileIn<'a> {
    #[serde(borrow, default)]
    pub file_data: Option<Str<'a>>,
}

/// A `cache_control` breakpoint (OpenRouter convention); only its TTL matters upstream.
#[derive(Deserialize)]
pub struct CacheControlIn<'a> {
    #[serde(borrow, default)]
    pub ttl: Option<Str<'a>>,
}

/// A tool call in an assistant message of the history.
#[derive(Deserialize)]
pub struct ToolCallIn<'a> {
    #[serde(borrow)]
    pub id: Str<'a>,
    #[serde(borrow)]
    pub function: FunctionCallIn<'a>,
}

#[derive(Deserialize)]
pub struct FunctionCallIn<'a> {
    #[serde(borrow)]
    pub name: Str<'a>,
    /// The arguments as the JSON text the model produced.
    #[serde(borrow, default)]
    pub arguments: Option<Str<'a>>,
}

/// One entry of `tools`.
#[derive(Deserialize)]
pub struct ToolIn<'a> {
    #[serde(rename = "type", borrow)]
    pub kind: Str<'a>,
    #[serde(borrow, default)]
    pub function: Option<FunctionDeclIn<'a>>,
}

/// The request's function tools (none when `tools` is absent or null), each checked: a
/// `function` tool whose `parameters`, if any, are a JSON Schema object. Errors name the tool
/// (`tools[i]: …`), after the checks of the tools before it.
pub fn function_tools<'a>(req: &RawRequest<'a>) -> Result<Vec<FunctionDeclIn<'a>>, GatewayError> {
    let Some(list) = req.get("tools").filter(|raw| raw.get() != "null") else {
        return Ok(Vec::new());
    };
    let list = super::list::items::<ToolIn<'a>>(list)
        .map_err(|e| GatewayError::invalid(format!("invalid value for tools: {e}")))?;
    let mut functions = Vec::with_capacity(list.len());
    for (i, tool) in list {
        let bad = |why: String| GatewayError::invalid(format!("tools[{i}]: {why}"));
        let tool = tool.map_err(|e| bad(e.to_string()))?;
        let function = match (&*tool.kind, tool.function) {
            ("function", Some(f)) => f,
            ("function", None) => return Err(bad("function is required".into())),
            (other, _) => {
                return Err(bad(format!(
                    "only function tools are supported, not {other:?}"
                )))
            }
        };
        if function
            .parameters
            .is_some_and(|p| !p.get().starts_with('{'))
        {
            return Err(bad(
                "function.parameters must be a JSON Schema object".into()
            ));
        }
        functions.push(function);
    }
    Ok(functions)
}

#[derive(Deserialize)]
pub struct FunctionDeclIn<'a> {
    #[serde(borrow)]
    pub name: Str<'a>,
    #[serde(borrow, default)]
    pub description: Option<Str<'a>>,
    /// The JSON schema, forwarded as written.
    #[serde(borrow, default)]
    pub parameters: Option<&'a RawValue>,
}

/// A `tool_choice` naming one function: `{"type":"function","function":{"name":…}}`.
#[derive(Deserialize)]
pub struct NamedFunctionIn<'a> {
    #[serde(borrow)]
    pub function: NameIn<'a>,
}

#[derive(Deserialize)]
pub struct NameIn<'a> {
    #[serde(borrow)]
    pub name: Str<'a>,
}

/// `response_format`: `text`, `json_object`, or `json_schema` with its schema.
#[derive(Deserialize)]
pub struct ResponseFormatIn<'a> {
    #[serde(rename = "type", borrow)]
    pub kind: Str<'a>,
    #[serde(borrow, default)]
    pub json_schema: Option<JsonSchemaIn<'a>>,
}

#[derive(Deserialize)]
pub struct JsonSchemaIn<'a> {
    #[serde(borrow, default)]
    pub schema: Option<&'a RawValue>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_is_a_string_kept_as_written_and_a_refusal_does_not_echo_the_value() {
        let p: PartIn = serde_json::from_str(r#"{"type":"text","text":"a\nb \u00e9"}"#).unwrap();
        let text = p.text.unwrap();
        assert_eq!(serde_json::to_string(&text).unwrap(), r#""a\nb \u00e9""#);
        assert_eq!(text.written_len(), 11);
        assert!(!text.is_empty());
        assert_eq!(text.into_cow(&"t").unwrap(), "a\nb \u{e9}");

        let secret = "x".repeat(10_000);
        for (json, kind) in [
            (format!(r#"{{"k":"{secret}"}}"#), "map"),
            (format!(r#"["{secret}"]"#), "sequence"),
            ("12345678".to_owned(), "a number"),
            ("true".to_owned(), "a boolean"),
        ] {
            let body = format!(r#"{{"type":"text","text":{json}}}"#);
            let e = serde_json::from_str::<PartIn>(&body)
                .err()
                .unwrap()
                .to_string();
            assert!(e.contains(kind) && e.contains("expected a string"), "{e}");
            assert!(!e.contains("xxxx") && !e.contains("12345678"), "{e}");
        }
    }

    #[test]
    fn text_of_a_raw_value_is_what_reading_it_gives() {
        for json in [r#""a\nb \u00e9""#, r#""""#, "7", "[\"a\"]", "null", "{}"] {
            let raw: &RawValue = serde_json::from_str(json).unwrap();
            let read =
                serde_json::from_str::<Text>(json).map(|t| serde_json::to_string(&t).unwrap());
            let of = Text::of(raw).map(|t| serde_json::to_string(&t).unwrap());
            assert_eq!(
                of.as_ref().map_err(ToString::to_string),
                read.as_ref().map_err(ToString::to_string),
                "{json}"
            );
        }
    }

    #[derive(Deserialize, Debug, PartialEq)]
    struct Numbered {
        role: String,
        #[serde(default)]
        n: Option<u32>,
    }

    fn read_messages(body: &str) -> Result<Vec<Result<Numbered, String>>, String> {
        let req = RawRequest::parse_head(body.as_bytes()).unwrap();
        let all = messages::<Numbered>(&req).map_err(|e| e.to_string())?;
        Ok(all.map(|m| m.map_err(|e| e.to_string())).collect())
    }

    #[test]
    fn messages_are_read_in_one_pass_or_one_by_one_up_to_the_first_that_fails() {
        let ok = r#"{"model":"m","messages":[{"role":"user","n":1},{"role":"assistant"}]}"#;
        let req = RawRequest::parse_head(ok.as_bytes()).unwrap();
        assert!(matches!(
            messages::<Numbered>(&req),
            Ok(Messages(Some(Items::Read(_))))
        ));
        assert_eq!(
            read_messages(ok).unwrap(),
            vec![
                Ok(Numbered {
                    role: "user".into(),
                    n: Some(1)
                }),
                Ok(Numbered {
                    role: "assistant".into(),
                    n: None
                }),
            ]
        );
        // The messages before the one that fails come first, as the caller reads them.
        let third_fails = r#"{"model":"m","messages":[{"role":"user"},{"role":"user","n":2},{"role":"user","n":"x"},{"role":5}]}"#;
        let read = read_messages(third_fails).unwrap();
        assert_eq!(read.len(), 4);
        assert_eq!(
            read[1],
            Ok(Numbered {
                role: "user".into(),
                n: Some(2)
            })
        );
        let e = read[2].as_ref().unwrap_err();
        assert!(
            e.starts_with("messages[2]: invalid type: string \"x\""),
            "{e}"
        );
        assert!(read[3].as_ref().unwrap_err().starts_with("messages[3]: "));
        // Not a list: the field's own error; absent: none.
        let e = read_messages(r#"{"model":"m","messages":{"role":"user"}}"#).unwrap_err();
        assert!(e.starts_with("invalid value for messages: "), "{e}");
        assert_eq!(read_messages(r#"{"model":"m"}"#).unwrap(), vec![]);
    }
}
