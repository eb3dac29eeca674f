//! tollgate: an OpenAI-compatible LLM gateway on Pingora.
//!
//! Rooms (see README "How it works"): `proxy` (the only Pingora code besides `server`) calls
//! into `api`, `providers`, `auth`, `catalog` and `billing`, which sit on `store`. Arrows point
//! one way; nothing imports `proxy`.
pub mod admin;
pub mod admission;
pub mod api;
pub mod auth;
pub mod billing;
pub mod catalog;
pub mod cli;
pub mod commands;
pub mod config;
pub mod money;
pub mod providers;
pub mod proxy;
pub mod server;
pub mod store;
pub mod sync;
pub mod upstream;
