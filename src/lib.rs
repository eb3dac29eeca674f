//! tollgate: an OpenAI-compatible LLM gateway on Pingora.
//!
//! Rooms (see docs/architecture.md): `proxy` (the only Pingora code besides `server`) turns
//! each request's session into plain values and calls `admission` (auth, gates, route, the
//! adapter's plan; what a finished request is billed), which sits on `api` (the OpenAI wire
//! format, the request model), `doors` (the other client dialects, translated at the edge),
//! `providers` (pure translators), `auth`, `catalog` and `billing`; `upstream` does the
//! I/O a plan needs outside Pingora; `kept` keeps the Responses door's answers off the request
//! path; everything rests on `store`, and `money` is a leaf.
//! `commands` holds the operator operations the CLI (`cli`) and the admin API share;
//! `connections` counts each listener's connections (`config` fits their limits into the
//! open-file limit). Arrows point one way (`tests/it/architecture.rs` checks it); only the
//! `server` wiring imports `proxy`.
pub mod admin;
pub mod admission;
pub mod alerts;
pub mod api;
pub mod auth;
pub mod billing;
pub mod catalog;
pub mod cli;
pub mod client_addr;
pub mod commands;
pub mod config;
pub mod connections;
pub mod doors;
pub mod kept;
pub mod metrics;
pub mod money;
pub mod providers;
pub mod proxy;
pub mod server;
pub mod store;
pub mod sync;
pub mod upstream;
