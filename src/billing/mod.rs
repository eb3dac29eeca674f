//! Billing: exact money, the cost formula, spend windows, the in-memory gates and the ledger
//! writer.
//!
//! - `money`: exact USD (`Usd`, pico-dollars) and prices (`Price`, micro-USD per 1M tokens).
//! - `cost`: the cost of one request from its token buckets and the prices in force.
//! - `window`: the UTC calendar windows of per-key spend limits.
//! - `gates`: the credit (402) and spend-limit (429) checks, answered from memory.
//! - `writer`: usage records and debits committed in batches off the response path, with a
//!   spool for database outages.
pub mod cost;
pub mod gates;
pub mod money;
pub mod record;
pub mod window;
pub mod writer;
