//! The default catalog's prices against the figures recorded from the providers' pages
//! (docs/providers.md): one request in every priced bucket, on each side of every long-context
//! threshold, in exact pico-USD worked out by hand (a price in USD per 1M tokens is that many
//! micro-USD per token-million, i.e. pico-USD per token).

use std::collections::HashMap;
use std::path::Path;

use super::cost::cost;
use crate::api::usage::Usage;
use crate::catalog::{import, Snapshot};
use crate::config::ProvidersConf;

fn catalog() -> Snapshot {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/conf/catalog.yaml");
    let rows = import::read_file(Path::new(path)).unwrap();
    Snapshot::build(&rows, &ProvidersConf::default(), &HashMap::new())
}

fn bill(catalog: &Snapshot, id: &str, usage: Usage) -> i64 {
    let pricing = &catalog.model(id).unwrap().pricing;
    cost(&usage, pricing.rates_for(usage.prompt_tokens()))
        .unwrap()
        .pico()
}

#[test]
fn every_bucket_is_billed_at_the_recorded_price() {
    let catalog = catalog();
    let u = Usage::default;
    let cases: [(&str, Usage, i64); 12] = [
        // Opus 5.5: 4 in, 0.20 read, 5 write (5 min), 8 write (1 h), 20 out.
        (
            "anthropic/claude-opus-5-5",
            Usage {
                input: 1000,
                cache_read: 2000,
                cache_write: 3000,
                cache_write_1h: 4000,
                output: 500,
                ..u()
            },
            1000 * 4_000_000
                + 2000 * 200_000
                + 3000 * 5_000_000
                + 4000 * 8_000_000
                + 500 * 20_000_000,
        ),
        // Sonnet 5.5: the higher of the two published cache reads, 0.20.
        (
            "anthropic/claude-sonnet-5-5",
            Usage {
                input: 1000,
                cache_read: 1000,
                output: 1000,
                ..u()
            },
            1000 * 2_000_000 + 1000 * 200_000 + 1000 * 10_000_000,
        ),
        // Haiku 5.5 at exactly 100,000 prompt tokens: the base tier.
        (
            "anthropic/claude-haiku-5-5",
            Usage {
                input: 90_000,
                cache_read: 10_000,
                output: 1000,
                ..u()
            },
            90_000 * 100_000 + 10_000 * 10_000 + 1000 * 500_000,
        ),
        // One token more: every bucket at the second tier.
        (
            "anthropic/claude-haiku-5-5",
            Usage {
                input: 90_001,
                cache_read: 10_000,
                output: 1000,
                ..u()
            },
            90_001 * 500_000 + 10_000 * 50_000 + 1000 * 2_500_000,
        ),
        (
            "anthropic/claude-sonnet-4-5",
            Usage {
                input: 200_001,
                output: 100,
                ..u()
            },
            200_001 * 6_000_000 + 100 * 22_500_000,
        ),
        (
            "anthropic/claude-fable-5-1",
            Usage {
                input: 10,
                cache_read: 10,
                cache_write: 10,
                cache_write_1h: 10,
                output: 10,
                ..u()
            },
            10 * (10_000_000 + 250_000 + 12_500_000 + 20_000_000 + 50_000_000),
        ),
        // Gemini 3.1 Pro at 200,000 prompt tokens, then one more.
        (
            "google/gemini-3.1-pro-preview",
            Usage {
                input: 199_000,
                cache_read: 1000,
                output: 1000,
                ..u()
            },
            199_000 * 2_000_000 + 1000 * 200_000 + 1000 * 12_000_000,
        ),
        (
            "google/gemini-3.1-pro-preview",
            Usage {
                input: 199_001,
                cache_read: 1000,
                output: 1000,
                ..u()
            },
            199_001 * 4_000_000 + 1000 * 400_000 + 1000 * 18_000_000,
        ),
        // 3.8 Flash at the standard (post-promotion) price.
        (
            "google/gemini-3.8-flash",
            Usage {
                input: 1000,
                cache_read: 1000,
                output: 1000,
                ..u()
            },
            1000 * 1_500_000 + 1000 * 150_000 + 1000 * 7_500_000,
        ),
        // 3.5 Flash-Lite bills audio at the text price; 2.5 Flash has its own.
        (
            "google/gemini-3.5-flash-lite",
            Usage {
                input: 1000,
                audio_input: 1000,
                output: 100,
                ..u()
            },
            1000 * 300_000 + 1000 * 300_000 + 100 * 2_500_000,
        ),
        // 2.5 Flash: audio 1.00, and an hour of storage for 1M tokens at 1.00.
        (
            "google/gemini-2.5-flash",
            Usage {
                audio_input: 1000,
                cache_storage_token_seconds: 3_600_000_000,
                ..u()
            },
            1000 * 1_000_000 + 1_000_000_000_000,
        ),
        (
            "google/text-embedding-004",
            Usage { input: 1000, ..u() },
            1000 * 25_000,
        ),
    ];
    for (id, usage, want) in cases {
        assert_eq!(bill(&catalog, id, usage), want, "{id}: {usage:?}");
    }
}
