//! The cost of one request, exactly, from its token buckets and the catalog prices in force.
//!
//! Why integers: a price is micro-USD per 1M tokens, so `tokens × price` is exactly the cost
//! in pico-USD (see `money`). The formula is
//!
//! ```text
//! cost = input       × input price
//!      + cache_read  × (cache_read price,  else input price)
//!      + cache_write × (cache_write price, else input price)
//!      + output      × output price
//! ```
//!
//! Invariants:
//! - The buckets of `Usage` are disjoint: `input` counts only uncached input, so no token is
//!   priced twice. `output` already includes reasoning; `reasoning` is a breakdown of it and
//!   is never priced on its own.
//! - A model without a distinct cache price bills its cached (read or written) tokens at the
//!   input price.
//! - Every multiplication and addition is checked: a result outside `i64` pico-USD (about
//!   9.2 million USD for one request) is an error, never a wrap or a rounding.
//! - No floats anywhere. The same formula is enforced again by the database on every usage
//!   record (a CHECK on `usage_records.cost_pico`), so a record whose cost disagrees with its
//!   own tokens and prices cannot be stored.

use crate::api::usage::Usage;
use crate::catalog::Pricing;
use crate::money::{Price, Usd};

/// Why a cost could not be computed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum CostError {
    /// A product or the total does not fit `i64` pico-USD.
    #[error("cost of {bucket} tokens overflows i64 pico-USD")]
    Overflow { bucket: &'static str },
}

/// The exact cost of `usage` at `pricing`, in pico-USD. Zero usage costs zero.
pub fn cost(usage: &Usage, pricing: &Pricing) -> Result<Usd, CostError> {
    let cache_read_price = pricing.cache_read.unwrap_or(pricing.input);
    let cache_write_price = pricing.cache_write.unwrap_or(pricing.input);
    let parts: [(&'static str, u64, Price); 4] = [
        ("input", usage.input, pricing.input),
        ("cache_read", usage.cache_read, cache_read_price),
        ("cache_write", usage.cache_write, cache_write_price),
        ("output", usage.output, pricing.output),
    ];
    parts
        .into_iter()
        .try_fold(Usd::ZERO, |total, (bucket, tokens, price)| {
            price
                .cost(tokens)
                .and_then(|c| total.checked_add(c))
                .ok_or(CostError::Overflow { bucket })
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(text: &str) -> Price {
        text.parse().unwrap()
    }

    fn pricing(input: &str, output: &str, read: Option<&str>, write: Option<&str>) -> Pricing {
        Pricing {
            input: p(input),
            output: p(output),
            cache_read: read.map(p),
            cache_write: write.map(p),
        }
    }

    fn usage(input: u64, cache_read: u64, cache_write: u64, output: u64, reasoning: u64) -> Usage {
        Usage {
            input,
            cache_read,
            cache_write,
            output,
            reasoning,
        }
    }

    fn pico(n: i64) -> Usd {
        Usd::from_pico(n)
    }

    #[test]
    fn no_cache_prices_bill_cached_tokens_at_the_input_price() {
        // gpt-4o-mini shape: 0.15 in / 0.60 out, no cache prices.
        let pr = pricing("0.15", "0.6", None, None);
        // 1000 × 150,000 + 200 × 150,000 + 40 × 150,000 + 500 × 600,000
        assert_eq!(
            cost(&usage(1_000, 200, 40, 500, 0), &pr),
            Ok(pico(150_000_000 + 30_000_000 + 6_000_000 + 300_000_000))
        );
        assert_eq!(
            cost(&usage(1_000, 200, 40, 500, 0), &pr),
            Ok(pico(486_000_000))
        );
        // The same tokens all uncached cost the same.
        assert_eq!(
            cost(&usage(1_240, 0, 0, 500, 0), &pr),
            Ok(pico(486_000_000))
        );
    }

    #[test]
    fn cache_read_price_only_gemini() {
        // gemini-2.5-flash shape: 0.30 in, 2.50 out, 0.03 cache read, no cache-write price.
        let pr = pricing("0.3", "2.5", Some("0.03"), None);
        // 1,201 × 300,000 + 9,999 × 30,000 + 3 × 300,000 + 777 × 2,500,000
        let expected: i64 = 360_300_000 + 299_970_000 + 900_000 + 1_942_500_000;
        assert_eq!(expected, 2_603_670_000);
        assert_eq!(
            cost(&usage(1_201, 9_999, 3, 777, 0), &pr),
            Ok(pico(2_603_670_000))
        );
    }

    #[test]
    fn cache_read_and_write_anthropic() {
        // claude-sonnet: 3 in, 15 out, 0.30 cache read, 3.75 cache write. The OpenRouter
        // fixture's usage: 3 uncached + 3211 read + 115 written, 53 out (7 reasoning).
        let pr = pricing("3", "15", Some("0.30"), Some("3.75"));
        // 3 × 3,000,000 + 3211 × 300,000 + 115 × 3,750,000 + 53 × 15,000,000
        let expected: i64 = 9_000_000 + 963_300_000 + 431_250_000 + 795_000_000;
        assert_eq!(expected, 2_198_550_000);
        let c = cost(&usage(3, 3_211, 115, 53, 7), &pr).unwrap();
        assert_eq!(c, pico(2_198_550_000));
        assert_eq!(c.to_string(), "0.00219855");
    }

    #[test]
    fn reasoning_is_part_of_output_and_not_billed_twice() {
        // o3-mini shape: 1.10 in / 4.40 out. 1,000 output tokens of which 800 reasoning.
        let pr = pricing("1.1", "4.4", Some("0.55"), None);
        let with = cost(&usage(100, 0, 0, 1_000, 800), &pr).unwrap();
        let without = cost(&usage(100, 0, 0, 1_000, 0), &pr).unwrap();
        // 100 × 1,100,000 + 1,000 × 4,400,000
        assert_eq!(with, pico(4_510_000_000));
        assert_eq!(with, without);
    }

    #[test]
    fn embeddings_bill_input_only() {
        // text-embedding-3-small: 0.02 in; and a 0.025 model: output price 0.
        let pr = pricing("0.025", "0.0", None, None);
        assert_eq!(cost(&usage(1_000, 0, 0, 0, 0), &pr), Ok(pico(25_000_000)));
        assert_eq!(cost(&usage(1, 0, 0, 0, 0), &pr), Ok(pico(25_000)));
        let small = pricing("0.02", "0", None, None);
        assert_eq!(
            cost(&usage(8_191, 0, 0, 0, 0), &small),
            Ok(pico(163_820_000))
        );
    }

    #[test]
    fn odd_sub_micro_prices_are_exact() {
        // 0.000001 USD / 1M tokens = 1 micro: one token costs one pico-dollar.
        let pr = pricing("0.000001", "3.000007", Some("0.000003"), Some("1.000001"));
        // 7 × 1 + 11 × 3 + 13 × 1,000,001 + 17 × 3,000,007
        assert_eq!(
            cost(&usage(7, 11, 13, 17, 5), &pr),
            Ok(pico(7 + 33 + 13_000_013 + 51_000_119))
        );
    }

    #[test]
    fn zero_usage_costs_zero() {
        let pr = pricing("3", "15", Some("0.3"), Some("3.75"));
        assert_eq!(cost(&Usage::default(), &pr), Ok(Usd::ZERO));
        let free = pricing("0", "0", None, None);
        assert_eq!(
            cost(&usage(1_000_000, 5, 5, 1_000_000, 9), &free),
            Ok(Usd::ZERO)
        );
    }

    #[test]
    fn large_counts_near_overflow() {
        // At 1 micro per 1M tokens a token is a pico: i64::MAX tokens is exactly i64::MAX pico.
        let one = pricing("0.000001", "0.000001", None, None);
        let max = i64::MAX as u64;
        assert_eq!(cost(&usage(max, 0, 0, 0, 0), &one), Ok(pico(i64::MAX)));
        assert_eq!(cost(&usage(max - 3, 1, 1, 1, 0), &one), Ok(pico(i64::MAX)));
        // One more token anywhere overflows the total.
        assert_eq!(
            cost(&usage(max, 0, 0, 1, 0), &one),
            Err(CostError::Overflow { bucket: "output" })
        );
        assert_eq!(
            cost(&usage(max - 1, 1, 1, 0, 0), &one),
            Err(CostError::Overflow {
                bucket: "cache_write"
            })
        );
        // A token count beyond i64 overflows even at the smallest price.
        assert_eq!(
            cost(&usage(u64::MAX, 0, 0, 0, 0), &one),
            Err(CostError::Overflow { bucket: "input" })
        );
        // At 15 USD / 1M: 614,891,469,123 tokens = 9,223,372,036,845,000,000 pico fits; the
        // product of one more million tokens does not.
        let out15 = pricing("3", "15", None, None);
        assert_eq!(
            cost(&usage(0, 0, 0, 614_891_469_123, 0), &out15),
            Ok(pico(9_223_372_036_845_000_000))
        );
        assert_eq!(
            cost(&usage(0, 0, 0, 614_892_469_123, 0), &out15),
            Err(CostError::Overflow { bucket: "output" })
        );
        // The product fits, the sum with the input does not.
        assert_eq!(
            cost(&usage(4, 0, 0, 614_891_469_123, 0), &out15),
            Err(CostError::Overflow { bucket: "output" })
        );
        assert_eq!(
            cost(&usage(3, 0, 0, 614_891_469_123, 0), &out15),
            Ok(pico(9_223_372_036_854_000_000))
        );
    }
}
