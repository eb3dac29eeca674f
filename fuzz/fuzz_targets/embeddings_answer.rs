//! A Google embeddings answer: the gateway's own reader of it never panics, and whatever it
//! reads, serde_json reads to the same numbers, bit for bit.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tollgate::providers::gemini::embed::{check_against_serde, Check};

fuzz_target!(|data: &[u8]| {
    if let Check::Disagreed(how) = check_against_serde(data) {
        panic!("the embeddings reader disagrees with serde_json: {how}");
    }
});
