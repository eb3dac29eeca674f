//! The cost of one request, exactly, from its token buckets and the prices of the tier it
//! fell in.
//!
//! Why integers: a price is micro-USD per 1M tokens, so `tokens × price` is exactly the cost
//! in pico-USD (see `money`). The formula is
//!
//! ```text
//! cost = input          × input price
//!      + audio_input    × (audio price,          else input price)
//!      + cache_read     × (cache_read price,     else input price)
//!      + cache_write    × (cache_write price,    else input price)
//!      + cache_write_1h × (cache_write_1h price, else input price)
//!      + output         × output price
//!      + ⌈cache_storage_token_seconds × storage price / 3600⌉   (no storage price: free)
//! ```
//!
//! Invariants:
//! - The buckets of `Usage` are disjoint: `input` counts only uncached, non-audio input, so no
//!   token is priced twice. `output` already includes reasoning; `reasoning` is a breakdown of
//!   it and is never priced on its own.
//! - The tier is chosen by the caller (`Pricing::rates_for`): a long-context tier prices the
//!   whole request, every bucket, as the providers do.
//! - Every multiplication and addition is checked: a result outside `i64` pico-USD (about
//!   9.2 million USD for one request) is an error, never a wrap or a rounding. Storage alone is
//!   rounded, up, to the pico-dollar.
//! - No floats anywhere. The same formula is enforced again by the database on every usage
//!   record (a CHECK on `usage_records.cost_pico`), so a record whose cost disagrees with its
//!   own tokens and prices cannot be stored.

use crate::api::usage::Usage;
use crate::catalog::Rates;
use crate::money::{Price, Usd};

/// Why a cost could not be computed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum CostError {
    /// A product or the total does not fit `i64` pico-USD.
    #[error("cost of {bucket} tokens overflows i64 pico-USD")]
    Overflow { bucket: &'static str },
}

/// The exact cost of `usage` at `rates`, in pico-USD. Zero usage costs zero.
pub fn cost(usage: &Usage, rates: &Rates) -> Result<Usd, CostError> {
    let or_input = |p: Option<Price>| p.unwrap_or(rates.input);
    let parts: [(&'static str, Option<Usd>); 7] = [
        ("input", rates.input.cost(usage.input)),
        (
            "audio_input",
            or_input(rates.audio_input).cost(usage.audio_input),
        ),
        (
            "cache_read",
            or_input(rates.cache_read).cost(usage.cache_read),
        ),
        (
            "cache_write",
            or_input(rates.cache_write).cost(usage.cache_write),
        ),
        (
            "cache_write_1h",
            or_input(rates.cache_write_1h).cost(usage.cache_write_1h),
        ),
        ("output", rates.output.cost(usage.output)),
        (
            "cache_storage",
            rates
                .cache_storage
                .unwrap_or_default()
                .storage_cost(usage.cache_storage_token_seconds),
        ),
    ];
    parts
        .into_iter()
        .try_fold(Usd::ZERO, |total, (bucket, part)| {
            part.and_then(|c| total.checked_add(c))
                .ok_or(CostError::Overflow { bucket })
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(text: &str) -> Price {
        text.parse().unwrap()
    }

    fn pricing(input: &str, output: &str, read: Option<&str>, write: Option<&str>) -> Rates {
        Rates {
            cache_read: read.map(p),
            cache_write: write.map(p),
            ..Rates::flat(p(input), p(output))
        }
    }

    fn usage(input: u64, cache_read: u64, cache_write: u64, output: u64, reasoning: u64) -> Usage {
        Usage {
            input,
            cache_read,
            cache_write,
            output,
            reasoning,
            ..Usage::default()
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

    // ----- the dimensions beyond the four /v1/models shows ---------------------------------

    use crate::catalog::{LongContext, Pricing};

    /// Claude Sonnet 4.5 as the default catalog prices it: 3 / 15, cache read 0.30, 5-minute
    /// writes 3.75, 1-hour writes 6; above 200,000 prompt tokens 6 / 22.50, 0.60, 7.50, 12.
    fn sonnet() -> Pricing {
        Pricing {
            base: Rates {
                cache_write_1h: Some(p("6")),
                ..pricing("3", "15", Some("0.30"), Some("3.75"))
            },
            long_context: Some(LongContext {
                above: 200_000,
                rates: Rates {
                    cache_write_1h: Some(p("12")),
                    ..pricing("6", "22.50", Some("0.60"), Some("7.50"))
                },
            }),
        }
    }

    #[test]
    fn one_hour_cache_writes_cost_twice_the_input_and_five_minute_ones_a_quarter_more() {
        let pr = sonnet();
        let five = Usage {
            cache_write: 1_000,
            ..Usage::default()
        };
        let hour = Usage {
            cache_write_1h: 1_000,
            ..Usage::default()
        };
        let rates = pr.rates_for(1_000);
        // 1,000 × 3,750,000 and 1,000 × 6,000,000 pico.
        assert_eq!(cost(&five, rates), Ok(pico(3_750_000_000)));
        assert_eq!(cost(&hour, rates), Ok(pico(6_000_000_000)));
        // Without a 1-hour price, 1-hour writes are billed at the input price.
        let no_1h = pricing("3", "15", Some("0.30"), Some("3.75"));
        assert_eq!(cost(&hour, &no_1h), Ok(pico(3_000_000_000)));
    }

    #[test]
    fn the_long_context_tier_prices_the_whole_request_above_its_threshold() {
        let pr = sonnet();
        // A prompt of exactly 200,000 tokens stays in the base tier …
        let at = usage(150_000, 40_000, 10_000, 1_000, 0);
        assert_eq!(at.prompt_tokens(), 200_000);
        let base = pr.rates_for(at.prompt_tokens());
        assert_eq!(base.input, p("3"));
        // 150,000 × 3 + 40,000 × 0.30 + 10,000 × 3.75 + 1,000 × 15 (µUSD)
        let expected_base: i64 = 450_000_000_000 + 12_000_000_000 + 37_500_000_000 + 15_000_000_000;
        assert_eq!(cost(&at, base), Ok(pico(expected_base)));
        // … one more token (a cached one counts) moves every bucket to the long prices.
        let over = usage(150_000, 40_001, 10_000, 1_000, 0);
        let long = pr.rates_for(over.prompt_tokens());
        assert_eq!(long.input, p("6"));
        // 150,000 × 6 + 40,001 × 0.60 + 10,000 × 7.50 + 1,000 × 22.50 (µUSD)
        let expected_long: i64 = 900_000_000_000 + 24_000_600_000 + 75_000_000_000 + 22_500_000_000;
        assert_eq!(cost(&over, long), Ok(pico(expected_long)));
        // A model without a tier never leaves its base prices.
        let flat = Pricing {
            base: pr.base,
            long_context: None,
        };
        assert_eq!(flat.rates_for(10_000_000).input, p("3"));
    }

    #[test]
    fn audio_input_has_its_own_price_and_falls_back_to_the_input_price() {
        // gemini-2.5-flash: 0.30 text, 1.00 audio.
        let pr = Rates {
            audio_input: Some(p("1.00")),
            ..pricing("0.30", "2.50", Some("0.03"), None)
        };
        let u = Usage {
            input: 100,
            audio_input: 3_200,
            output: 10,
            ..Usage::default()
        };
        // 100 × 300,000 + 3,200 × 1,000,000 + 10 × 2,500,000
        assert_eq!(
            cost(&u, &pr),
            Ok(pico(30_000_000 + 3_200_000_000 + 25_000_000))
        );
        let text_only = pricing("0.30", "2.50", Some("0.03"), None);
        assert_eq!(
            cost(&u, &text_only),
            Ok(pico(30_000_000 + 960_000_000 + 25_000_000))
        );
    }

    #[test]
    fn cache_storage_is_billed_per_token_hour_rounded_up_to_the_pico() {
        // gemini-2.5-pro: storage 4.50 per 1M tokens per hour; a 5,000-token cache kept
        // 300 s, and the 5,000 creation tokens at the input price (no cache-write price).
        let pr = Rates {
            cache_storage: Some(p("4.50")),
            ..pricing("1.25", "10", Some("0.125"), None)
        };
        let u = Usage {
            cache_write: 5_000,
            cache_storage_token_seconds: 5_000 * 300,
            ..Usage::default()
        };
        // 5,000 × 1,250,000 + 5,000 × 300 × 4,500,000 / 3,600
        assert_eq!(cost(&u, &pr), Ok(pico(6_250_000_000 + 1_875_000_000)));
        // One token-second at 4.50: 1,250 pico exactly; at 0.000001: 1/3600 pico, rounded up.
        let one = Usage {
            cache_storage_token_seconds: 1,
            ..Usage::default()
        };
        assert_eq!(cost(&one, &pr), Ok(pico(1_250)));
        let tiny = Rates {
            cache_storage: Some(p("0.000001")),
            ..pricing("1", "1", None, None)
        };
        assert_eq!(cost(&one, &tiny), Ok(pico(1)));
        // No storage price: storage is free.
        assert_eq!(
            cost(&u, &pricing("1.25", "10", None, None)),
            Ok(pico(6_250_000_000))
        );
    }
}
