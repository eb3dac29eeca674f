//! tollgate: an OpenAI-compatible LLM gateway on Pingora.
pub mod billing;
pub mod store;
