//! An upstream's buffered answer to a Responses-door request, through each family's chat
//! adapter and the door's rendering: never a panic, a translated body is JSON.
#![no_main]

#[path = "common.rs"]
mod common;

use libfuzzer_sys::fuzz_target;
use tollgate::api::Door;
use tollgate::catalog::Family;
use tollgate::doors::bridged;

fuzz_target!(|data: &[u8]| {
    for family in [Family::Anthropic, Family::Gemini, Family::OpenAiCompat] {
        common::answer_with(bridged(Door::Responses, family), data);
    }
});
