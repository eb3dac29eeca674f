//! Admission's worst case and its reservation over the whole integer range: random prices (up to
//! i64, beyond what a catalog accepts), output caps, context windows, `max_tokens`, `n` and
//! body sizes. Never a panic; a worst case that is computed covers its own token counts at the
//! model's prices, and reserving it next to an ordinary request and releasing both, in either
//! order, leaves exactly the credit there was: no negative reservation, no credit created.
#![no_main]

use std::collections::HashMap;
use std::time::Duration;

use chrono::{TimeZone, Utc};
use libfuzzer_sys::fuzz_target;
use tollgate::admission::worst_case;
use tollgate::api::{Operation, RawRequest};
use tollgate::billing::gates::Accounts;
use tollgate::catalog::Snapshot;
use tollgate::config::ProvidersConf;
use tollgate::money::{Price, Usd};
use tollgate::store::{ApiKey, CatalogRows};

type Input = ([u64; 3], Option<u32>, Option<u32>, u64, u8, u16, bool, u64);

fuzz_target!(|input: Input| {
    let (prices, cap, window, max_tokens, n, pad, cache, balance) = input;
    let price = |i: usize| Price::from_micro_per_mtok((prices[i] >> 1) as i64);
    let optional = |v: Option<u32>| v.map_or("null".to_owned(), |v| v.to_string());
    let yaml = format!(
        "models:\n  - {{id: f/m, provider: f, family: openai, kind: chat, upstream_model: m, \
         input_price: {}, output_price: {}, cache_storage_price: {}, \
         max_output_tokens: {}, context_window: {}}}\n",
        price(0),
        price(1),
        price(2),
        optional(cap),
        optional(window),
    );
    let Ok(rows) = serde_yaml::from_str::<CatalogRows>(&yaml) else {
        return;
    };
    let catalog = Snapshot::build(&rows, &ProvidersConf::default(), &HashMap::new());
    let Some(model) = catalog.model("f/m") else {
        return;
    };
    let marker = if cache { "cache_control" } else { "" };
    let body = format!(
        r#"{{"model":"f/m","max_tokens":{max_tokens},"n":{},"messages":[{{"role":"user","content":"{marker}{}"}}]}}"#,
        n % 130,
        "x".repeat(usize::from(pad % 4096)),
    );
    let Ok(req) = RawRequest::parse(body.as_bytes(), Operation::Chat) else {
        return; // max_tokens beyond u32, n out of range: refused before admission
    };
    let Some(worst) = worst_case(model, &req, body.as_bytes(), Operation::Chat, HOUR) else {
        return; // refused 400: nothing reserved
    };
    assert!(worst.cost.pico() >= 0);
    let rates = model.pricing.rates_for(worst.input_tokens);
    let floor = rates
        .input
        .cost(worst.input_tokens)
        .and_then(|i| i.checked_add(rates.output.cost(worst.output_tokens)?));
    assert!(
        floor.is_some_and(|f| f <= worst.cost),
        "the worst case does not cover its own counts: {worst:?}"
    );

    let accounts = Accounts::default();
    let balance = Usd::from_pico((balance >> 1) as i64);
    accounts.set_balance("ws", balance);
    let key: ApiKey = serde_json::from_value(serde_json::json!({
        "id": "key", "workspace_id": "ws", "name": null, "hint": "", "created_at": "2026-09-21T00:00:00Z",
        "expires_at": null, "revoked_at": null, "spend_limit": balance, "limit_reset": "daily",
    }))
    .expect("a key");
    let now = Utc.timestamp_opt(NOW, 0).single().expect("a time");
    let ordinary = accounts.reserve(&key, true, Usd::from_pico(1_000), false, now);
    let huge = accounts.reserve(&key, true, worst.cost, false, now);
    if n % 2 == 0 {
        drop(huge);
        drop(ordinary);
    } else {
        drop(ordinary);
        drop(huge);
    }
    assert_eq!(
        accounts.unreserved("ws"),
        balance,
        "releasing both left a different credit"
    );
});

const HOUR: Duration = Duration::from_secs(3_600);
const NOW: i64 = 1_790_000_000;
