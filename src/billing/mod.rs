//! Billing: the cost formula, spend windows, the in-memory gates and the ledger writer.
//! Exact amounts and prices live in the leaf module [`crate::money`].
//!
//! - `cost`: the cost of one request from its token buckets and the prices in force.
//! - `window`: the UTC calendar windows of per-key spend limits.
//! - `gates`: the credit (402) and spend-limit (429) checks, answered from memory.
//! - `writer`: usage records and debits committed in batches off the response path, with a
//!   spool for database outages.
//! - `journal`: usage records on disk before their answers' last bytes leave, so a process
//!   crash loses none.
// Money and token arithmetic is checked or saturating by rule: a wrap here gives credit away
// (tests may use plain operators).
#![cfg_attr(not(test), warn(clippy::arithmetic_side_effects))]
pub mod cost;
#[cfg(test)]
mod default_prices;
pub mod gates;
pub mod journal;
pub mod record;
pub mod spool;
pub mod window;
pub mod writer;
