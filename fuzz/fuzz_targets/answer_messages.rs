//! An upstream's buffered answer to a Messages-door request, through Claude's pass-through and
//! through each translated family: never a panic, a translated body is JSON.
#![no_main]

#[path = "common.rs"]
mod common;

use libfuzzer_sys::fuzz_target;
use tollgate::catalog::Family;

fuzz_target!(|data: &[u8]| {
    for family in [Family::Anthropic, Family::Gemini, Family::OpenAiCompat] {
        common::answer_with(common::messages_adapter(family), data);
    }
});
