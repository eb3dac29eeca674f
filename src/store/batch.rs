//! The backend-independent part of `record_usage`, so the two backends differ only in SQL:
//! the batch's preparation (the first occurrence of each id, in lock order, checked before
//! anything is written), every record's parameters, and what the records actually inserted add
//! up to — per workspace, per (key, window) and per (workspace, day, model), summed exactly
//! once, here.

use std::collections::{BTreeMap, BTreeSet, HashSet};

use chrono::{DateTime, Utc};

use super::codec::{self, count_to_db};
use super::params::Param;
use super::{StoreError, StoreResult, UsageRecord};
use crate::money::Price;

/// A batch ready to write, each record with its integer columns checked.
pub(crate) struct UsageBatch {
    records: Vec<(UsageRecord, UsageInts)>,
}

impl UsageBatch {
    /// The records of `batch` to attempt, in the order every writer inserts them: the first
    /// occurrence of each id, sorted by id (a consistent lock order between concurrent
    /// writers), with timestamps truncated to storage precision. Fails on a record that cannot
    /// be stored (a count beyond BIGINT, a negative cost) before anything is written.
    pub(crate) fn prepare(batch: &[UsageRecord]) -> StoreResult<Self> {
        let mut seen = HashSet::with_capacity(batch.len());
        let mut records = Vec::with_capacity(batch.len());
        for r in batch.iter().filter(|r| seen.insert(r.id.as_str())) {
            if r.cost.pico() < 0 {
                return Err(StoreError::Conflict(format!(
                    "usage record {}: negative cost {} USD",
                    r.id, r.cost
                )));
            }
            let ints = UsageInts::of(r)?;
            let mut r = r.clone();
            r.started_at = codec::trunc(r.started_at);
            r.finished_at = codec::trunc(r.finished_at);
            r.spend_window_start = r.spend_window_start.map(codec::trunc);
            records.push((r, ints));
        }
        // Byte order, like the `COLLATE "C"` the PostgreSQL backend sorts with.
        records.sort_by(|a, b| a.0.id.as_bytes().cmp(b.0.id.as_bytes()));
        Ok(Self { records })
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    /// Each record with its parameters in `USAGE_COLS` order, in the batch's order.
    pub(crate) fn rows(&self) -> impl Iterator<Item = (&UsageRecord, [Param<'_>; 36])> {
        self.records.iter().map(|(r, ints)| (r, usage(r, ints)))
    }

    /// What the records `inserted` names add up to.
    pub(crate) fn totals(&self, inserted: impl Fn(&str) -> bool) -> StoreResult<BatchTotals> {
        let mut totals = BatchTotals::default();
        for (r, _) in self.records.iter().filter(|(r, _)| inserted(&r.id)) {
            totals.add(r)?;
        }
        Ok(totals)
    }
}

/// A new record's ledger debit, `(id, workspace_id, amount_pico, created_at, usage_id)`:
/// `-cost`, dated `finished_at` (PostgreSQL builds the same row in SQL, `'debit:' || id`).
pub(crate) fn debit(r: &UsageRecord) -> [Param<'_>; 5] {
    [
        format!("debit:{}", r.id).into(),
        (&r.workspace_id).into(),
        (-r.cost.pico()).into(),
        r.finished_at.into(),
        (&r.id).into(),
    ]
}

/// A record's parameters in `USAGE_COLS` order.
fn usage<'a>(r: &'a UsageRecord, n: &UsageInts) -> [Param<'a>; 36] {
    let price = |p: Option<Price>| Param::from(p.map(Price::micro_per_mtok));
    let x = &r.extra;
    [
        (&r.id).into(),
        (&r.workspace_id).into(),
        (&r.key_id).into(),
        (&r.model_id).into(),
        (&r.route).into(),
        codec::endpoint_str(r.endpoint).into(),
        r.stream.into(),
        n.input_tokens.into(),
        n.cache_read_tokens.into(),
        n.cache_write_tokens.into(),
        n.output_tokens.into(),
        n.reasoning_tokens.into(),
        r.input_price.micro_per_mtok().into(),
        r.output_price.micro_per_mtok().into(),
        price(r.cache_read_price),
        price(r.cache_write_price),
        r.cost.pico().into(),
        codec::outcome_str(r.outcome).into(),
        r.started_at.into(),
        r.finished_at.into(),
        n.upstream_latency_us.into(),
        n.ttft_us.into(),
        r.spend_window_start.into(),
        codec::source_str(r.usage_source).into(),
        n.audio_input_tokens.into(),
        n.cache_write_1h_tokens.into(),
        n.cache_storage_token_seconds.into(),
        price(x.audio_input_price),
        price(x.cache_write_1h_price),
        price(x.cache_storage_price),
        Param::Count32(r.attempts),
        r.request_id.as_deref().into(),
        r.review.as_deref().into(),
        r.client_addr.as_deref().into(),
        r.upstream_request_id.as_deref().into(),
        r.waived.into(),
    ]
}

/// A usage record's integer columns, converted and checked once for both backends.
#[derive(Debug, Clone, Copy)]
struct UsageInts {
    input_tokens: i64,
    cache_read_tokens: i64,
    cache_write_tokens: i64,
    output_tokens: i64,
    reasoning_tokens: i64,
    upstream_latency_us: Option<i64>,
    ttft_us: Option<i64>,
    audio_input_tokens: i64,
    cache_write_1h_tokens: i64,
    cache_storage_token_seconds: i64,
}

impl UsageInts {
    fn of(r: &UsageRecord) -> StoreResult<Self> {
        let id = r.id.as_str();
        let count = |what: &str, v: u64| count_to_db(id, what, v);
        let opt = |what: &str, v: Option<u64>| v.map(|n| count(what, n)).transpose();
        let x = &r.extra;
        Ok(Self {
            input_tokens: count("input_tokens", r.input_tokens)?,
            cache_read_tokens: count("cache_read_tokens", r.cache_read_tokens)?,
            cache_write_tokens: count("cache_write_tokens", r.cache_write_tokens)?,
            output_tokens: count("output_tokens", r.output_tokens)?,
            reasoning_tokens: count("reasoning_tokens", r.reasoning_tokens)?,
            upstream_latency_us: opt("upstream_latency_us", r.upstream_latency_us)?,
            ttft_us: opt("ttft_us", r.ttft_us)?,
            audio_input_tokens: count("audio_input_tokens", x.audio_input_tokens)?,
            cache_write_1h_tokens: count("cache_write_1h_tokens", x.cache_write_1h_tokens)?,
            cache_storage_token_seconds: count(
                "cache_storage_token_seconds",
                x.cache_storage_token_seconds,
            )?,
        })
    }
}

/// What the newly inserted records of a batch add up to, exactly, each sum keyed and sorted in
/// the order its rows are locked in.
#[derive(Debug, Default)]
pub(crate) struct BatchTotals {
    /// The debits (costs) per workspace.
    by_workspace: BTreeMap<String, i64>,
    /// The spend per (key, window start).
    by_key_window: BTreeMap<(String, DateTime<Utc>), i64>,
    /// The `usage_daily` rollup's additions, by (workspace, UTC day `YYYY-MM-DD`, model).
    by_day: BTreeMap<(String, String, String), DailyTotals>,
    /// The keys that spent, whatever their window: each gets one `spend` change.
    keys: BTreeSet<String>,
}

impl BatchTotals {
    /// Adds one record to each of its sums; a sum past `i64` refuses the batch.
    fn add(&mut self, r: &UsageRecord) -> StoreResult<()> {
        let cost = r.cost.pico();
        let workspace = self.by_workspace.entry(r.workspace_id.clone()).or_default();
        add_to(workspace, cost)
            .ok_or_else(|| overflow(&format!("workspace {}", r.workspace_id)))?;
        let day = (
            r.workspace_id.clone(),
            r.finished_at.date_naive().to_string(),
            r.model_id.clone(),
        );
        let daily = self.by_day.entry(day).or_default();
        daily
            .add(r)
            .ok_or_else(|| overflow(&format!("the day of {}", r.id)))?;
        if !self.keys.contains(&r.key_id) {
            self.keys.insert(r.key_id.clone());
        }
        if let Some(start) = r.spend_window_start {
            let spend = self
                .by_key_window
                .entry((r.key_id.clone(), start))
                .or_default();
            add_to(spend, cost).ok_or_else(|| overflow(&format!("key {}", r.key_id)))?;
        }
        Ok(())
    }

    /// Each workspace's balance change (minus its debits): `(workspace_id, balance_pico)`.
    pub(crate) fn balances(&self) -> impl Iterator<Item = [Param<'_>; 2]> {
        // Costs are never negative, so neither is a debit sum: its negation cannot overflow.
        self.by_workspace
            .iter()
            .map(|(w, debits)| [w.into(), (-debits).into()])
    }

    /// Each (key, window)'s added spend: `(key_id, window_start, spend_pico)`.
    pub(crate) fn key_spends(&self) -> impl Iterator<Item = [Param<'_>; 3]> {
        self.by_key_window
            .iter()
            .map(|((key, start), spend)| [key.into(), (*start).into(), (*spend).into()])
    }

    /// The keys the batch's records spent through, each once: `(key_id)`, for the change feed
    /// (PostgreSQL's statement trigger logs the same set).
    pub(crate) fn spent_keys(&self) -> impl Iterator<Item = [Param<'_>; 1]> {
        self.keys.iter().map(|key| [key.into()])
    }

    /// The daily rollup's additions: `(workspace_id, day, model_id, requests, input_tokens,
    /// output_tokens, cost_pico)`.
    pub(crate) fn daily(&self) -> impl Iterator<Item = [Param<'_>; 7]> {
        self.by_day.iter().map(|((w, day, model), d)| {
            [
                w.into(),
                day.into(),
                model.into(),
                d.requests.into(),
                d.input_tokens.into(),
                d.output_tokens.into(),
                d.cost.into(),
            ]
        })
    }
}

/// One `usage_daily` row's additions: requests, prompt-side tokens, output tokens, cost.
#[derive(Debug, Default, Clone, Copy)]
struct DailyTotals {
    requests: i64,
    input_tokens: i64,
    output_tokens: i64,
    cost: i64,
}

impl DailyTotals {
    fn add(&mut self, r: &UsageRecord) -> Option<()> {
        let x = &r.extra;
        let input = [
            r.input_tokens,
            r.cache_read_tokens,
            r.cache_write_tokens,
            x.cache_write_1h_tokens,
            x.audio_input_tokens,
        ]
        .into_iter()
        .try_fold(0i64, |a, n| a.checked_add(i64::try_from(n).ok()?))?;
        add_to(&mut self.requests, 1)?;
        add_to(&mut self.input_tokens, input)?;
        add_to(
            &mut self.output_tokens,
            i64::try_from(r.output_tokens).ok()?,
        )?;
        add_to(&mut self.cost, r.cost.pico())
    }
}

/// `*sum += n`, or `None` (the sum untouched) past `i64`.
fn add_to(sum: &mut i64, n: i64) -> Option<()> {
    *sum = sum.checked_add(n)?;
    Some(())
}

fn overflow(what: &str) -> StoreError {
    StoreError::Conflict(format!("the batch's total cost for {what} overflows i64"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::money::Usd;
    use crate::store::{UsageEndpoint, UsageOutcome};

    fn record(id: &str, workspace: &str, cost: i64, window: Option<i64>) -> UsageRecord {
        let at = |s: i64| DateTime::from_timestamp(s, 123_456_789).unwrap_or_default();
        UsageRecord {
            id: id.into(),
            workspace_id: workspace.into(),
            key_id: format!("key-{workspace}"),
            model_id: "m".into(),
            route: "r".into(),
            endpoint: UsageEndpoint::Chat,
            stream: false,
            input_tokens: 10,
            cache_read_tokens: 1,
            cache_write_tokens: 0,
            output_tokens: 5,
            reasoning_tokens: 0,
            input_price: Price::from_micro_per_mtok(1),
            output_price: Price::from_micro_per_mtok(1),
            cache_read_price: None,
            cache_write_price: None,
            extra: Default::default(),
            cost: Usd::from_pico(cost),
            outcome: UsageOutcome::Complete,
            started_at: at(1_700_000_000),
            finished_at: at(1_700_000_001),
            upstream_latency_us: None,
            ttft_us: None,
            spend_window_start: window.map(at),
            usage_source: Default::default(),
            attempts: 1,
            request_id: None,
            review: None,
            client_addr: None,
            upstream_request_id: None,
            waived: false,
        }
    }

    #[test]
    fn a_batch_keeps_the_first_of_each_id_in_byte_order_at_storage_precision() {
        let batch = [
            record("b", "w", 1, None),
            record("B", "w", 2, None),
            record("b", "w", 3, None),
        ];
        let batch = UsageBatch::prepare(&batch).unwrap();
        let rows: Vec<(&str, i64)> = batch
            .rows()
            .map(|(r, _)| (r.id.as_str(), r.cost.pico()))
            .collect();
        assert_eq!(rows, [("B", 2), ("b", 1)]);
        let (r, params) = batch.rows().next().unwrap();
        assert_eq!(r.finished_at.timestamp_subsec_nanos(), 123_456_000);
        assert_eq!(params[19], Param::Time(r.finished_at));
    }

    #[test]
    fn a_negative_cost_refuses_the_whole_batch() {
        let batch = [record("a", "w", 1, None), record("b", "w", -1, None)];
        assert!(matches!(
            UsageBatch::prepare(&batch),
            Err(StoreError::Conflict(_))
        ));
    }

    #[test]
    fn totals_sum_only_the_records_inserted() {
        let batch = [
            record("a", "w1", 1, Some(100)),
            record("b", "w1", 2, Some(100)),
            record("c", "w1", 40, Some(100)),
            record("d", "w2", 4, None),
        ];
        let batch = UsageBatch::prepare(&batch).unwrap();
        let totals = batch.totals(|id| id != "c").unwrap();
        let balances: Vec<_> = totals.balances().collect();
        assert_eq!(
            balances,
            [["w1".into(), Param::Int(-3)], ["w2".into(), Param::Int(-4)]]
        );
        let spends: Vec<_> = totals.key_spends().collect();
        assert_eq!(spends.len(), 1, "w2's record has no spend window");
        assert_eq!(spends[0][0], "key-w1".into());
        assert_eq!(spends[0][2], Param::Int(3));
        let daily: Vec<_> = totals.daily().collect();
        let w1 = &daily[0];
        assert_eq!(w1[1], "2023-11-14".into());
        assert_eq!(
            w1[3..],
            [Param::Int(2), Param::Int(22), Param::Int(10), Param::Int(3)],
            "requests, prompt-side tokens, output tokens, cost"
        );
    }

    #[test]
    fn a_sum_past_i64_refuses_the_batch() {
        let batch = [record("a", "w", i64::MAX, None), record("b", "w", 1, None)];
        let batch = UsageBatch::prepare(&batch).unwrap();
        assert!(matches!(
            batch.totals(|_| true),
            Err(StoreError::Conflict(_))
        ));
    }
}
