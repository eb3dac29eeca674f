//! The cost formula over the whole integer range: random token counts in every bucket and
//! random prices. A cost is exact (the same sum in i128) and never negative; an error only when
//! the exact sum does not fit i64 pico-USD. So no usage is ever priced free or wrapped.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tollgate::api::Usage;
use tollgate::billing::cost::cost;
use tollgate::catalog::Rates;
use tollgate::money::Price;

fuzz_target!(|input: ([u64; 8], [u64; 7], u8)| {
    let ([input_t, audio, read, write, write_1h, output, reasoning, storage], prices, some) =
        input;
    // Prices are never negative (the parser refuses them): the fuzzer's u64 folded into i64.
    let price = |i: usize| Price::from_micro_per_mtok((prices[i] >> 1) as i64);
    let optional = |i: usize| (some & (1 << i) != 0).then(|| price(i));
    let rates = Rates {
        input: price(0),
        output: price(1),
        cache_read: optional(2),
        cache_write: optional(3),
        cache_write_1h: optional(4),
        audio_input: optional(5),
        cache_storage: optional(6),
    };
    let usage = Usage {
        input: input_t,
        audio_input: audio,
        cache_read: read,
        cache_write: write,
        cache_write_1h: write_1h,
        output,
        reasoning: reasoning.min(output),
        cache_storage_token_seconds: storage,
    };
    let p = |o: Option<Price>| i128::from(o.unwrap_or(rates.input).micro_per_mtok());
    let storage_price = i128::from(rates.cache_storage.unwrap_or_default().micro_per_mtok());
    // The exact sum in i128, `None` past i128 (six products of up to 2^127 each can exceed it).
    let storage_pico_seconds = i128::from(storage).checked_mul(storage_price);
    let exact: Option<i128> = [
        (input_t, i128::from(rates.input.micro_per_mtok())),
        (audio, p(rates.audio_input)),
        (read, p(rates.cache_read)),
        (write, p(rates.cache_write)),
        (write_1h, p(rates.cache_write_1h)),
        (output, i128::from(rates.output.micro_per_mtok())),
    ]
    .iter()
    .try_fold(0i128, |sum, &(n, price)| {
        sum.checked_add(i128::from(n).checked_mul(price)?)
    })
    .and_then(|sum| sum.checked_add(storage_pico_seconds?.checked_add(3_599)? / 3_600));
    let fits = |n: u64| i64::try_from(n).is_ok();
    let counts_fit = [input_t, audio, read, write, write_1h, output, storage]
        .into_iter()
        .all(fits);
    let max = i128::from(i64::MAX);
    match cost(&usage, &rates) {
        Ok(c) => {
            assert!(c.pico() >= 0, "a negative cost: {c}");
            assert_eq!(Some(i128::from(c.pico())), exact, "not the exact cost");
        }
        // Storage is checked before rounding (token-seconds × price), so it may fail a hair
        // before the rounded total would; any other failure must be a true overflow.
        Err(e) => assert!(
            !counts_fit
                || exact.is_none_or(|x| x > max)
                || storage_pico_seconds.is_none_or(|x| x + 3_599 > max),
            "refused a cost that fits: {e}, exact {exact:?}"
        ),
    }
});
