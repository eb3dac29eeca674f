//! Integration tests, in one binary with one harness (`harness.rs`): the real `tollgate serve`
//! process against the upstream simulator (in-process, `tollgate_sim::spawn`) over loopback
//! HTTP, every test with its own simulator and gateway on free ports; the store suite on
//! SQLite and PostgreSQL (`store.rs`); the ledger writer against a real store; the Gemini
//! adapter against the simulator's request validation (`gemini_adapter.rs`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
// Tests start their own fake upstreams, servers and clients as they need them.
#![allow(clippy::disallowed_methods)]

mod adaptive;
mod admin;
mod answer_cost;
mod anthropic;
mod architecture;
mod billing;
mod bodies;
mod catalog_check;
mod certs;
mod client_addr;
mod console;
mod crash;
mod default_catalog;
mod disconnects;
mod docs;
mod edge;
mod embeddings;
mod fake_upstream;
mod fallbacks;
mod faults;
mod foundation;
mod gemini;
mod gemini_adapter;
mod harness;
mod hostile;
mod ledger_writer;
mod listeners;
mod live;
mod management;
mod messages;
mod messages_clients;
mod migrations;
mod money;
mod observability;
mod openai_compat;
mod outage;
mod private_pg;
mod python_sdk;
mod raw;
mod read_replica;
mod reservations;
mod responses;
mod responses_clients;
mod responses_native;
mod restarts;
mod retention;
mod routing;
mod secrets;
mod shipped;
mod soak;
mod store;
mod sync;
mod upstream_http2;
mod upstream_tls;
