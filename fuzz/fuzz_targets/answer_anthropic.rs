//! An upstream's buffered answer (or error body) on the anthropic family: never a panic; a
//! translated answer is JSON.
#![no_main]

#[path = "common.rs"]
mod common;

use libfuzzer_sys::fuzz_target;
use tollgate::catalog::Family;

fuzz_target!(|data: &[u8]| common::answer(Family::Anthropic, data));
