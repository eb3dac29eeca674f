//! Value conversions both backends share, so the two cannot drift apart: timestamps at
//! microsecond precision, enum columns as text, capabilities and aliases as JSON arrays,
//! counts and exact sums, and the checks made before anything is written.

use chrono::{DateTime, SubsecRound, Utc};

use super::{
    ChangeKind, LedgerKind, LimitReset, StoreError, StoreResult, UsageEndpoint, UsageOutcome,
    UsageSource,
};
use crate::money::Usd;

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
        "spend" => Ok(ChangeKind::Spend),
        other => Err(StoreError::Corrupt(format!(
            "unknown change kind {other:?}"
        ))),
    }
}

pub(crate) fn ledger_kind_str(kind: LedgerKind) -> &'static str {
    match kind {
        LedgerKind::Credit => "credit",
        LedgerKind::Debit => "debit",
        LedgerKind::Refund => "refund",
    }
}

pub(crate) fn ledger_kind_from(text: &str) -> StoreResult<LedgerKind> {
    match text {
        "credit" => Ok(LedgerKind::Credit),
        "debit" => Ok(LedgerKind::Debit),
        "refund" => Ok(LedgerKind::Refund),
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

/// A list of strings (a model's capabilities or aliases) as its TEXT column holds it: a JSON
/// array.
pub(crate) fn strings_to_db(what: &str, items: &[String]) -> StoreResult<String> {
    serde_json::to_string(items).map_err(|e| StoreError::Backend(format!("encoding {what}: {e}")))
}

pub(crate) fn strings_from_db(what: &str, text: &str) -> StoreResult<Vec<String>> {
    serde_json::from_str(text).map_err(|e| {
        StoreError::Corrupt(format!("{what} {text:?} is not a JSON string array: {e}"))
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

/// A credit or refund is a positive amount (a refund's entry holds it negated).
pub(crate) fn check_credit(amount: Usd) -> StoreResult<()> {
    if amount.is_positive() {
        Ok(())
    } else {
        Err(StoreError::Conflict(format!(
            "a credit or refund must be a positive amount, got {amount} USD"
        )))
    }
}

pub(crate) fn endpoint_str(e: UsageEndpoint) -> &'static str {
    match e {
        UsageEndpoint::Chat => "chat",
        UsageEndpoint::Embeddings => "embeddings",
        UsageEndpoint::Messages => "messages",
        UsageEndpoint::Responses => "responses",
    }
}

pub(crate) fn endpoint_from(text: &str) -> StoreResult<UsageEndpoint> {
    match text {
        "chat" => Ok(UsageEndpoint::Chat),
        "embeddings" => Ok(UsageEndpoint::Embeddings),
        "messages" => Ok(UsageEndpoint::Messages),
        "responses" => Ok(UsageEndpoint::Responses),
        other => Err(StoreError::Corrupt(format!("unknown endpoint {other:?}"))),
    }
}

pub(crate) fn outcome_str(o: UsageOutcome) -> &'static str {
    match o {
        UsageOutcome::Complete => "complete",
        UsageOutcome::ClientDisconnected => "client_disconnected",
        UsageOutcome::UpstreamFailed => "upstream_failed",
    }
}

pub(crate) fn source_str(s: UsageSource) -> &'static str {
    match s {
        UsageSource::Reported => "reported",
        UsageSource::Estimated => "estimated",
    }
}

pub(crate) fn source_from(text: &str) -> StoreResult<UsageSource> {
    match text {
        "reported" => Ok(UsageSource::Reported),
        "estimated" => Ok(UsageSource::Estimated),
        other => Err(StoreError::Corrupt(format!(
            "unknown usage source {other:?}"
        ))),
    }
}

pub(crate) fn outcome_from(text: &str) -> StoreResult<UsageOutcome> {
    match text {
        "complete" => Ok(UsageOutcome::Complete),
        "client_disconnected" => Ok(UsageOutcome::ClientDisconnected),
        "upstream_failed" => Ok(UsageOutcome::UpstreamFailed),
        other => Err(StoreError::Corrupt(format!("unknown outcome {other:?}"))),
    }
}

/// A token count or duration as the BIGINT column holds it; beyond `i64` the record is
/// refused (it could never have been priced).
pub(crate) fn count_to_db(id: &str, what: &str, v: u64) -> StoreResult<i64> {
    i64::try_from(v).map_err(|_| {
        StoreError::Conflict(format!(
            "usage record {id}: {what} {v} does not fit a BIGINT"
        ))
    })
}

/// A BIGINT column read back as a count; a negative value is a corrupt row (the schema's
/// CHECKs forbid it).
pub(crate) fn count_from_db(what: &str, v: i64) -> StoreResult<u64> {
    u64::try_from(v).map_err(|_| StoreError::Corrupt(format!("{what} {v} is negative")))
}

pub(crate) fn opt_count_from_db(what: &str, v: Option<i64>) -> StoreResult<Option<u64>> {
    v.map(|n| count_from_db(what, n)).transpose()
}

/// An exact decimal integer as PostgreSQL prints a NUMERIC sum, as `Usd`.
pub(crate) fn sum_from_text(what: &str, text: &str) -> StoreResult<Usd> {
    let n: i128 = text
        .parse()
        .map_err(|e| StoreError::Corrupt(format!("{what} {text:?} is not an integer: {e}")))?;
    i64::try_from(n)
        .map(Usd::from_pico)
        .map_err(|_| StoreError::Corrupt(format!("{what} {n} pico-USD is out of range")))
}

/// A sum SQLite computed in two parts, `SUM(x >> 32)` and `SUM(x & 0xFFFFFFFF)` (each exact
/// in INTEGER for up to 2^31 rows; SQLite raises "integer overflow" rather than rounding
/// beyond that), put back together exactly.
pub(crate) fn sum_from_parts(what: &str, hi: i64, lo: i64) -> StoreResult<Usd> {
    let n = (i128::from(hi) << 32) + i128::from(lo);
    i64::try_from(n)
        .map(Usd::from_pico)
        .map_err(|_| StoreError::Corrupt(format!("{what} {n} pico-USD is out of range")))
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
    fn split_sums_are_exact() {
        for xs in [
            vec![i64::MAX, 1, -2],
            vec![i64::MIN + 1, -1, 5, 4_294_967_295, -4_294_967_296],
            vec![-1, -1, -1],
            vec![123_456_789_012_345, -98_765_432_109],
        ] {
            let hi: i64 = xs.iter().map(|x| x >> 32).sum();
            let lo: i64 = xs.iter().map(|x| x & 0xFFFF_FFFF).sum();
            let exact: i128 = xs.iter().map(|&x| i128::from(x)).sum();
            let got = sum_from_parts("t", hi, lo).unwrap();
            assert_eq!(i128::from(got.pico()), exact, "{xs:?}");
        }
        assert!(sum_from_parts("t", i64::MAX >> 31, 0).is_err());
        assert_eq!(sum_from_text("t", "-42").unwrap(), Usd::from_pico(-42));
        assert!(sum_from_text("t", "9223372036854775808").is_err());
        assert!(sum_from_text("t", "1.5").is_err());
    }

    #[test]
    fn string_lists_are_json() {
        let caps = vec!["tools".to_owned(), "a,b".to_owned()];
        let text = strings_to_db("capabilities", &caps).unwrap();
        assert_eq!(text, r#"["tools","a,b"]"#);
        assert_eq!(strings_from_db("capabilities", &text).unwrap(), caps);
        let err = strings_from_db("aliases", "tools").unwrap_err().to_string();
        assert!(err.contains("aliases"), "{err}");
        assert_eq!(
            strings_from_db("aliases", "[]").unwrap(),
            Vec::<String>::new()
        );
    }
}
