//! What the chat door would have received: the OpenAI chat body the translating doors write
//! (`messages::to_chat`, `responses::parse`), as borrowed `Serialize` structs. Raw slices of
//! the client's body are copied byte for byte (numbers, schemas, `cache_control`); every
//! optional field is left out when absent, so a door writes only what its client sent.

use std::borrow::Cow;

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

pub(crate) use crate::api::chat::Text;
use crate::api::GatewayError;
use crate::doors::responses::reasoning::Detail;

/// The chat body. Fields serialise in this order; a door sets the ones it maps.
#[derive(Serialize)]
pub(crate) struct ChatOut<'a> {
    pub model: &'a RawValue,
    pub messages: Vec<MessageOut<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<&'a RawValue>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_completion_tokens: Option<&'a RawValue>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stop: Option<&'a RawValue>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub temperature: Option<&'a RawValue>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub top_p: Option<&'a RawValue>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub top_k: Option<&'a RawValue>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<ToolOut<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_choice: Option<ToolChoiceOut<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parallel_tool_calls: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reasoning: Option<ReasoningOut>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reasoning_effort: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub response_format: Option<ResponseFormatOut<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub verbosity: Option<&'a RawValue>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prompt_cache_key: Option<&'a RawValue>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub user: Option<&'a RawValue>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub service_tier: Option<&'a RawValue>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stream: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stream_options: Option<StreamOptions>,
}

impl<'a> ChatOut<'a> {
    /// `model` and `messages`, nothing else.
    pub fn new(model: &'a RawValue, messages: Vec<MessageOut<'a>>) -> Self {
        ChatOut {
            model,
            messages,
            max_tokens: None,
            max_completion_tokens: None,
            stop: None,
            temperature: None,
            top_p: None,
            top_k: None,
            tools: Vec::new(),
            tool_choice: None,
            parallel_tool_calls: None,
            reasoning: None,
            reasoning_effort: None,
            response_format: None,
            verbosity: None,
            prompt_cache_key: None,
            user: None,
            service_tier: None,
            stream: None,
            stream_options: None,
        }
    }

    /// `stream: true` with `stream_options.include_usage`, so the final usage is counted.
    pub fn streaming(&mut self, stream: bool) {
        self.stream = stream.then_some(true);
        self.stream_options = stream.then_some(StreamOptions {
            include_usage: true,
        });
    }

    pub fn to_vec(&self) -> Result<Vec<u8>, GatewayError> {
        crate::api::json::to_vec(self).map_err(|e| GatewayError::Internal(e.to_string().into()))
    }
}

#[derive(Serialize)]
pub(crate) struct StreamOptions {
    pub include_usage: bool,
}

#[derive(Serialize)]
pub(crate) struct MessageOut<'a> {
    pub role: &'static str,
    /// `null` for an assistant turn that only calls tools.
    pub content: Option<ContentOut<'a>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCallOut<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<Cow<'a, str>>,
    /// An assistant turn's signed thinking, as the upstream must see it again.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub reasoning_details: Vec<Detail>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cache_control: Option<&'a RawValue>,
}

impl<'a> MessageOut<'a> {
    /// A message of `role` with `content` and nothing else.
    pub fn plain(role: &'static str, content: Option<ContentOut<'a>>) -> Self {
        MessageOut {
            role,
            content,
            tool_calls: Vec::new(),
            tool_call_id: None,
            reasoning_details: Vec::new(),
            cache_control: None,
        }
    }
}

#[derive(Serialize)]
#[serde(untagged)]
pub(crate) enum ContentOut<'a> {
    Text(Text<'a>),
    Parts(Vec<PartOut<'a>>),
}

/// `{"type":"ephemeral"}`: a cache breakpoint the door places itself.
/// (`None` never happens: the literal is JSON.)
pub(crate) fn ephemeral() -> Option<&'static RawValue> {
    serde_json::from_str(r#"{"type":"ephemeral"}"#).ok()
}

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(crate) enum PartOut<'a> {
    Text {
        text: Text<'a>,
        #[serde(skip_serializing_if = "Option::is_none")]
        cache_control: Option<&'a RawValue>,
    },
    ImageUrl {
        image_url: UrlOut<'a>,
        #[serde(skip_serializing_if = "Option::is_none")]
        cache_control: Option<&'a RawValue>,
    },
    InputAudio {
        input_audio: AudioOut<'a>,
        #[serde(skip_serializing_if = "Option::is_none")]
        cache_control: Option<&'a RawValue>,
    },
    File {
        file: FileOut<'a>,
        #[serde(skip_serializing_if = "Option::is_none")]
        cache_control: Option<&'a RawValue>,
    },
}

impl<'a> PartOut<'a> {
    pub fn text(text: Cow<'a, str>) -> Self {
        PartOut::Text {
            text: text.into(),
            cache_control: None,
        }
    }

    /// The part's breakpoint slot.
    pub fn cache_control(&mut self) -> &mut Option<&'a RawValue> {
        match self {
            PartOut::Text { cache_control, .. }
            | PartOut::ImageUrl { cache_control, .. }
            | PartOut::InputAudio { cache_control, .. }
            | PartOut::File { cache_control, .. } => cache_control,
        }
    }
}

#[derive(Serialize)]
pub(crate) struct UrlOut<'a> {
    pub url: Cow<'a, str>,
}

#[derive(Serialize)]
pub(crate) struct AudioOut<'a> {
    pub data: Cow<'a, str>,
    pub format: Cow<'a, str>,
}

#[derive(Serialize)]
pub(crate) struct FileOut<'a> {
    pub file_data: Cow<'a, str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub filename: Option<Cow<'a, str>>,
}

#[derive(Serialize)]
pub(crate) struct ToolCallOut<'a> {
    pub id: Cow<'a, str>,
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub function: FunctionCallOut<'a>,
}

#[derive(Serialize)]
pub(crate) struct FunctionCallOut<'a> {
    pub name: Cow<'a, str>,
    pub arguments: Cow<'a, str>,
}

#[derive(Serialize)]
pub(crate) struct ToolOut<'a> {
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub function: FunctionDeclOut<'a>,
}

#[derive(Serialize)]
pub(crate) struct FunctionDeclOut<'a> {
    pub name: Cow<'a, str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<Cow<'a, str>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parameters: Option<Cow<'a, RawValue>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub strict: Option<bool>,
}

#[derive(Serialize)]
#[serde(untagged)]
pub(crate) enum ToolChoiceOut<'a> {
    Mode(&'static str),
    Named {
        #[serde(rename = "type")]
        kind: &'static str,
        function: NameOut<'a>,
    },
}

impl<'a> ToolChoiceOut<'a> {
    pub fn function(name: Cow<'a, str>) -> Self {
        ToolChoiceOut::Named {
            kind: "function",
            function: NameOut { name },
        }
    }
}

#[derive(Serialize)]
pub(crate) struct NameOut<'a> {
    pub name: Cow<'a, str>,
}

/// OpenRouter's `reasoning` object; `{}` asks for the model's default thinking.
#[derive(Serialize, Default, PartialEq)]
pub(crate) struct ReasoningOut {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exclude: Option<bool>,
}

/// `response_format`: `json_object`, or `json_schema` with its schema.
#[derive(Serialize)]
pub(crate) struct ResponseFormatOut<'a> {
    #[serde(rename = "type")]
    pub kind: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub json_schema: Option<JsonSchemaOut<'a>>,
}

#[derive(Serialize)]
pub(crate) struct JsonSchemaOut<'a> {
    pub name: &'a RawValue,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<&'a RawValue>,
    pub schema: &'a RawValue,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub strict: Option<&'a RawValue>,
}

/// Reads `raw` as `T`; a value of another type is a 400 naming `field`.
pub(crate) fn typed<'a, T: Deserialize<'a>>(
    raw: &'a RawValue,
    field: &str,
) -> Result<T, GatewayError> {
    serde_json::from_str(raw.get())
        .map_err(|e| GatewayError::invalid(format!("invalid value for {field}: {e}")))
}

/// `raw` itself once it reads as `T` (copied byte for byte), else a 400 saying what is wanted.
pub(crate) fn checked<'a, T: Deserialize<'a>>(
    raw: &'a RawValue,
    field: &str,
    want: &str,
) -> Result<&'a RawValue, GatewayError> {
    serde_json::from_str::<T>(raw.get())
        .map(|_| raw)
        .map_err(|_| GatewayError::invalid(format!("invalid value for {field}: expected {want}")))
}
