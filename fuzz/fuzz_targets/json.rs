//! Any bytes through the gateway's JSON reader and writer (`tollgate::api::json`): read as
//! serde_json's `from_slice` reads them, and what is read written back as serde_json writes it,
//! byte for byte.
#![no_main]

use libfuzzer_sys::fuzz_target;
use serde_json::Value;
use tollgate::api::json;

fuzz_target!(|data: &[u8]| {
    let serde = serde_json::from_slice::<Value>(data);
    let mine = json::from_slice::<Value>(data);
    assert_eq!(mine.is_ok(), serde.is_ok(), "one reader failed");
    let (Ok(value), Ok(same)) = (serde, mine) else {
        return;
    };
    assert_eq!(value, same, "the readers disagree");
    let written = json::to_vec(&value).expect("a Value serialises");
    assert_eq!(
        written,
        serde_json::to_vec(&value).expect("a Value serialises"),
        "the writers disagree"
    );
});
