//! An upstream's SSE stream on the openai family, split where the first byte says: never a
//! panic, every frame is JSON, and the split changes nothing.
#![no_main]

#[path = "common.rs"]
mod common;

use libfuzzer_sys::fuzz_target;
use tollgate::catalog::Family;

fuzz_target!(|data: &[u8]| common::stream(Family::OpenAiCompat, data));
