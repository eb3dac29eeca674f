//! Integration tests: the real `tollgate serve` process against the upstream simulator, over
//! loopback HTTP. One binary; every test starts its own simulator and gateway.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod anthropic;
mod billing;
mod bodies;
mod embeddings;
mod fake_upstream;
mod foundation;
mod gemini;
mod harness;
mod openai_compat;
mod outage;
mod python_sdk;
mod raw;
mod sync;
