//! The OpenAI-shaped wire the clients speak: the parsed request, usage, and the one place a
//! gateway error becomes a status and an error envelope.
pub mod error;
pub mod request;
pub mod usage;

pub use error::GatewayError;
pub use request::RawRequest;
pub use usage::Usage;

/// Which client endpoint a request came in on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    Chat,
    Embeddings,
}

impl Operation {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Chat => "chat",
            Self::Embeddings => "embeddings",
        }
    }
}
