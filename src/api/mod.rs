//! The OpenAI wire format the clients speak, both directions, written once for every provider
//! family: the request's top-level fields (`request`) and its messages, parts and tools
//! (`chat`) and what one request may carry (`limits`); the buffered completion (`completion`), the stream chunk (`chunk`), the
//! embeddings answer (`embeddings`), `Usage` (`usage`), and the one place a gateway error
//! becomes a status and an error envelope (`error`), with the place in a request it names (`at`);
//! how all of it is read and written as JSON (`json`), a list read in one pass (`list`). Families
//! keep only their upstream's types.
pub mod at;
pub mod chat;
pub mod chunk;
pub mod completion;
pub mod embeddings;
pub mod error;
pub mod json;
pub mod limits;
pub mod list;
pub mod request;
pub mod usage;

pub use at::At;
pub use chat::Str;
pub use error::GatewayError;
pub use request::RawRequest;
pub use usage::Usage;

/// Which client endpoint a request came in on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    Chat,
    Embeddings,
}

/// Which client dialect (front door) a request came in through: its wire format, its
/// answers' and errors' shapes. Admission, gates, routing, failover and billing are the same
/// for every door.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Door {
    /// OpenAI's Chat Completions and Embeddings (`/v1/chat/completions`, `/v1/embeddings`).
    #[default]
    OpenAi,
    /// Anthropic's Messages API (`/v1/messages`, `/v1/messages/count_tokens`).
    Messages,
    /// OpenAI's Responses API (`/v1/responses`), as Codex and the Agents SDK speak it.
    Responses,
}

impl Door {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::OpenAi => "openai",
            Self::Messages => "messages",
            Self::Responses => "responses",
        }
    }
}

impl Operation {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Chat => "chat",
            Self::Embeddings => "embeddings",
        }
    }
}
