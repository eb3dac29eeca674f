//! Any bytes through the gateway's JSON reader and writer (`tollgate::api::json`): read as
//! serde_json's `from_slice` reads them, and what is read written back as serde_json writes it,
//! byte for byte. And any JSON through `canonical_strings`: the same value, its strings as the
//! writer writes them (so a second pass and serde_json's own output are left as they are).
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
    let canonical = json::canonical_strings(data).expect("valid JSON has canonical strings");
    assert_eq!(
        serde_json::from_slice::<Value>(&canonical).ok(),
        Some(value),
        "canonical strings changed the value"
    );
    let again = json::canonical_strings(&canonical).expect("still valid");
    assert!(matches!(again, std::borrow::Cow::Borrowed(_)), "not a fixed point");
    let serde_wrote = json::canonical_strings(&written).expect("serde's own output");
    assert!(matches!(serde_wrote, std::borrow::Cow::Borrowed(_)), "serde's escapes rewritten");
});
