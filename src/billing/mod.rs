//! Money, the cost formula and spend windows; as the billing issue lands, the gates and the
//! ledger writer.
//!
//! - `money`: exact USD (`Usd`, pico-dollars) and prices (`Price`, micro-USD per 1M tokens).
//! - `cost`: the cost of one request from its token buckets and the prices in force.
//! - `window`: the UTC calendar windows of per-key spend limits.
pub mod cost;
pub mod money;
pub mod window;
