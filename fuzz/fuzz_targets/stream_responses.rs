//! An upstream's SSE stream answering a Responses-door request, rendered as the Responses API's
//! events over Claude's, Gemini's or an OpenAI-compatible upstream's chat frames (the first
//! byte chooses), split where the second byte says: never a panic, every frame is JSON, and the
//! split changes nothing.
#![no_main]

#[path = "common.rs"]
mod common;

use libfuzzer_sys::fuzz_target;
use tollgate::api::Door;
use tollgate::catalog::Family;
use tollgate::doors::bridged;

fuzz_target!(|data: &[u8]| {
    let Some((&choice, rest)) = data.split_first() else {
        return;
    };
    let family = match choice % 3 {
        0 => Family::Anthropic,
        1 => Family::Gemini,
        _ => Family::OpenAiCompat,
    };
    common::stream_with(bridged(Door::Responses, family), rest);
});
