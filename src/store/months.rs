//! Archives of a month's usage records, what both backends share: the per-workspace totals an
//! archived month leaves behind (`archived_totals`, so the books stay verifiable once its
//! records are gone) and the checks an archive and a restore make. The types (`UsageMonth`,
//! `MonthTotal`, `ArchivedMonth`) are with the other records.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};

use super::{ArchivedMonth, MonthTotal, StoreError, StoreResult, UsageMonth, UsageRecord};
use crate::money::Usd;

/// How many months after the current one have their partition made ahead (PostgreSQL): at
/// start, and by the gateway's daily job, so a month's partition exists well before its first
/// record and the default partition never takes one.
pub const PARTITIONS_AHEAD: u32 = 2;

/// Per-workspace totals of `records`, by workspace id (byte order); `Overflow` past `i64`
/// pico-USD, the range of the column that keeps them.
pub fn month_totals<'r>(
    records: impl IntoIterator<Item = &'r UsageRecord>,
) -> StoreResult<Vec<MonthTotal>> {
    let mut sums: BTreeMap<&str, (u64, Usd)> = BTreeMap::new();
    for r in records {
        let (n, cost) = sums.entry(&r.workspace_id).or_insert((0, Usd::ZERO));
        *n += 1;
        *cost = cost.checked_add(r.cost).ok_or_else(|| {
            StoreError::Overflow(format!("the month's cost of {}", r.workspace_id))
        })?;
    }
    Ok(sums
        .into_iter()
        .map(|(w, (records, cost))| MonthTotal {
            workspace_id: w.to_owned(),
            records,
            cost,
        })
        .collect())
}

/// `archived_totals` rows, in month order, grouped by month.
pub(crate) fn group_months(rows: Vec<(UsageMonth, MonthTotal)>) -> Vec<ArchivedMonth> {
    let mut months: Vec<ArchivedMonth> = Vec::new();
    for (month, total) in rows {
        match months.last_mut() {
            Some(last) if last.month == month => last.totals.push(total),
            _ => months.push(ArchivedMonth {
                month,
                totals: vec![total],
            }),
        }
    }
    months
}

/// `Conflict` unless `found` (the store's) equals `expected` (an archive's), naming `what`.
pub(crate) fn same_totals(
    what: &str,
    month: UsageMonth,
    expected: &[MonthTotal],
    found: &[MonthTotal],
) -> StoreResult<()> {
    if expected == found {
        return Ok(());
    }
    Err(StoreError::Conflict(format!(
        "{what} of {month} do not match: expected {}, found {}",
        describe(expected),
        describe(found)
    )))
}

fn describe(totals: &[MonthTotal]) -> String {
    if totals.is_empty() {
        return "none".into();
    }
    totals
        .iter()
        .map(|t| format!("{} {} records {} USD", t.workspace_id, t.records, t.cost))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The current month (of `at`) and later ones are still written to: `Conflict`.
pub(crate) fn not_current(month: UsageMonth, at: DateTime<Utc>) -> StoreResult<()> {
    if month < UsageMonth::of(at) {
        return Ok(());
    }
    Err(StoreError::Conflict(format!(
        "{month} is not over yet: only months before {} can be archived",
        UsageMonth::of(at)
    )))
}

/// A restore inserts every record of its archive or none: records of it already stored
/// (`inserted` short of `expected`) refuse it, and its transaction writes nothing.
pub(crate) fn all_inserted(month: UsageMonth, inserted: u64, expected: usize) -> StoreResult<()> {
    let expected = expected as u64;
    if inserted == expected {
        return Ok(());
    }
    Err(StoreError::Conflict(format!(
        "{month}: {} of the archive's records are stored already",
        expected.saturating_sub(inserted)
    )))
}

/// What a restore of `records` into `month` brings back: their totals, every one of them in
/// the month (`Conflict` otherwise).
pub(crate) fn restored(month: UsageMonth, records: &[UsageRecord]) -> StoreResult<ArchivedMonth> {
    if let Some(r) = records
        .iter()
        .find(|r| UsageMonth::of(r.finished_at) != month)
    {
        return Err(StoreError::Conflict(format!(
            "record {} finished at {}, outside {month}",
            r.id, r.finished_at
        )));
    }
    Ok(ArchivedMonth {
        month,
        totals: month_totals(records)?,
    })
}

#[cfg(test)]
mod tests {
    use super::super::UsageMonth;

    #[test]
    fn months_parse_print_and_bound() {
        let m: UsageMonth = "2026-12".parse().unwrap();
        assert_eq!(m.to_string(), "2026-12");
        assert_eq!(m.next().to_string(), "2027-01");
        assert_eq!(m.start().to_rfc3339(), "2026-12-01T00:00:00+00:00");
        assert_eq!(m.end().to_rfc3339(), "2027-01-01T00:00:00+00:00");
        assert_eq!(m.partition(), "usage_records_2026_12");
        for bad in [
            "2026-13", "2026-00", "2026-1", "26-01", "2026/01", "2026-1x", "",
        ] {
            assert!(bad.parse::<UsageMonth>().is_err(), "{bad}");
        }
        let last = "2026-11-30T23:59:59.999999Z".parse().unwrap();
        assert_eq!(UsageMonth::of(last).to_string(), "2026-11");
    }
}
