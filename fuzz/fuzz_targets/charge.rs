//! The charge spliced into an answer (`doors::charge`): any bytes, as a buffered body or as a
//! stream's last frames. Never a panic; a body that gets the charge stays JSON with the charge
//! in its usage object, and frames keep everything around the one data line written to.
#![no_main]

use libfuzzer_sys::fuzz_target;
use serde_json::Value;
use tollgate::doors::charge::{into_body, into_frames, Charge};
use tollgate::money::Usd;

fuzz_target!(|data: &[u8]| {
    let charge = Charge {
        cost: Usd::from_pico(123_456_789),
        id: "gen-1".into(),
    };
    // The splice reads the document without checking the UTF-8 of what it skips: a body that
    // was not JSON to begin with need not be after.
    let json = serde_json::from_slice::<Value>(data).is_ok();
    if let Some(body) = into_body(data, None, &charge).filter(|_| json) {
        let v: Value = serde_json::from_slice(&body).expect("a charged body is JSON");
        let usage = match v.get("usage") {
            Some(u) => u,
            None => &v["response"]["usage"],
        };
        assert_eq!(usage["generation_id"], "gen-1", "{v}");
        assert!(body.len() > data.len());
    }
    if let Some(frames) = into_frames(data, None, &charge) {
        let common = frames
            .iter()
            .zip(data)
            .take_while(|(a, b)| a == b)
            .count();
        let tail = frames
            .iter()
            .rev()
            .zip(data.iter().rev())
            .take_while(|(a, b)| a == b)
            .count();
        assert!(common + tail >= data.len(), "only one span was changed");
    }
});
