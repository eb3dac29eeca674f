//! An upstream's SSE stream answering a Messages-door request — Claude's passed through, or
//! Gemini's rendered as Anthropic events (the second byte chooses) — split where the first byte
//! says: never a panic, every frame is JSON, and the split changes nothing.
#![no_main]

#[path = "common.rs"]
mod common;

use libfuzzer_sys::fuzz_target;
use tollgate::catalog::Family;

fuzz_target!(|data: &[u8]| {
    let Some((&choice, rest)) = data.split_first() else {
        return;
    };
    let family = if choice & 1 == 0 {
        Family::Anthropic
    } else {
        Family::Gemini
    };
    common::stream_with(common::messages_adapter(family), rest);
});
