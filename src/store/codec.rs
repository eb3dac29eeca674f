//! Value conversions both backends share, so the two cannot drift apart: timestamps at
//! microsecond precision, enum columns as text, capabilities as a JSON array, and the checks
//! made before anything is written.

use std::collections::BTreeSet;

use chrono::{DateTime, SubsecRound, Utc};

use super::{CatalogRows, ChangeKind, LedgerKind, LimitReset, StoreError, StoreResult};
use crate::billing::money::Usd;

/// Both databases keep microseconds; every timestamp the store writes or returns is
/// truncated to that, so what `create_*` returns equals what a later read returns.
pub(crate) fn trunc(t: DateTime<Utc>) -> DateTime<Utc> {
    t.trunc_subsecs(6)
}

/// The current time at storage precision.
pub(crate) fn now() -> DateTime<Utc> {
    trunc(Utc::now())
}

/// SQLite representation: microseconds since the Unix epoch.
pub(crate) fn to_micros(t: DateTime<Utc>) -> i64 {
    t.timestamp_micros()
}

pub(crate) fn from_micros(us: i64) -> StoreResult<DateTime<Utc>> {
    DateTime::from_timestamp_micros(us)
        .ok_or_else(|| StoreError::Corrupt(format!("timestamp {us} µs is out of range")))
}

pub(crate) fn change_kind_from(text: &str) -> StoreResult<ChangeKind> {
    match text {
        "key" => Ok(ChangeKind::Key),
        "workspace" => Ok(ChangeKind::Workspace),
        "balance" => Ok(ChangeKind::Balance),
        "catalog" => Ok(ChangeKind::Catalog),
        other => Err(StoreError::Corrupt(format!(
            "unknown change kind {other:?}"
        ))),
    }
}

pub(crate) fn ledger_kind_str(kind: LedgerKind) -> &'static str {
    match kind {
        LedgerKind::Credit => "credit",
        LedgerKind::Debit => "debit",
    }
}

pub(crate) fn ledger_kind_from(text: &str) -> StoreResult<LedgerKind> {
    match text {
        "credit" => Ok(LedgerKind::Credit),
        "debit" => Ok(LedgerKind::Debit),
        other => Err(StoreError::Corrupt(format!(
            "unknown ledger kind {other:?}"
        ))),
    }
}

pub(crate) fn limit_reset_from(text: Option<String>) -> StoreResult<Option<LimitReset>> {
    text.map(|t| {
        LimitReset::parse(&t)
            .ok_or_else(|| StoreError::Corrupt(format!("unknown limit_reset {t:?}")))
    })
    .transpose()
}

pub(crate) fn capabilities_to_db(caps: &[String]) -> StoreResult<String> {
    serde_json::to_string(caps)
        .map_err(|e| StoreError::Backend(format!("encoding capabilities: {e}")))
}

pub(crate) fn capabilities_from_db(text: &str) -> StoreResult<Vec<String>> {
    serde_json::from_str(text).map_err(|e| {
        StoreError::Corrupt(format!(
            "capabilities {text:?} is not a JSON string array: {e}"
        ))
    })
}

pub(crate) fn max_tokens_to_db(v: Option<u32>) -> Option<i64> {
    v.map(i64::from)
}

pub(crate) fn max_tokens_from_db(v: Option<i64>) -> StoreResult<Option<u32>> {
    v.map(|n| {
        u32::try_from(n)
            .map_err(|_| StoreError::Corrupt(format!("max_output_tokens {n} out of range")))
    })
    .transpose()
}

/// A credit must be a positive amount (refunds and corrections are separate, signed entries).
pub(crate) fn check_credit(amount: Usd) -> StoreResult<()> {
    if amount.is_positive() {
        Ok(())
    } else {
        Err(StoreError::Conflict(format!(
            "a credit must be a positive amount, got {amount} USD"
        )))
    }
}

/// Every model id whose routes `import_catalog` replaces: those of the models and the routes.
pub(crate) fn catalog_model_ids(rows: &CatalogRows) -> BTreeSet<&str> {
    rows.models
        .iter()
        .map(|m| m.id.as_str())
        .chain(rows.routes.iter().map(|r| r.model_id.as_str()))
        .collect()
}

/// Profile rows as stored (name, JSON text) → records; bad JSON is a corrupt row.
pub(super) fn profiles_from_db(rows: Vec<(String, String)>) -> StoreResult<Vec<super::ProfileRow>> {
    rows.into_iter()
        .map(|(name, spec)| {
            let spec = serde_json::from_str(&spec)
                .map_err(|e| StoreError::Corrupt(format!("profile {name}: {e}")))?;
            Ok(super::ProfileRow { name, spec })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn micros_round_trip_and_truncate() {
        let t = DateTime::from_timestamp(1_700_000_000, 123_456_789).unwrap();
        let t6 = trunc(t);
        assert_eq!(t6.timestamp_subsec_nanos(), 123_456_000);
        assert_eq!(from_micros(to_micros(t6)).unwrap(), t6);
        let before_epoch = DateTime::from_timestamp(-5, 999_999_000).unwrap();
        assert_eq!(from_micros(to_micros(before_epoch)).unwrap(), before_epoch);
    }

    #[test]
    fn credits_must_be_positive() {
        assert!(check_credit(Usd::from_pico(1)).is_ok());
        assert!(matches!(
            check_credit(Usd::ZERO),
            Err(StoreError::Conflict(_))
        ));
        assert!(matches!(
            check_credit(Usd::from_pico(-1)),
            Err(StoreError::Conflict(_))
        ));
    }

    #[test]
    fn capabilities_are_json() {
        let caps = vec!["tools".to_owned(), "a,b".to_owned()];
        let text = capabilities_to_db(&caps).unwrap();
        assert_eq!(text, r#"["tools","a,b"]"#);
        assert_eq!(capabilities_from_db(&text).unwrap(), caps);
        assert!(capabilities_from_db("tools").is_err());
    }
}
