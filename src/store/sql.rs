//! SQL text both dialects share: every table's column list, and the statements built from
//! them, with placeholders written `{mark}1`, `{mark}2`, … (`?` for SQLite, `$` for
//! PostgreSQL). A record's columns are always listed in its `*_COLS` order, so the values a
//! statement binds (`params`) and the rows it reads back (`rows`) agree by position.

use super::params::Param;
use super::{Cursor, UsageFilter};

pub(crate) const WORKSPACE_COLS: &str = "id, name, created_at";
pub(crate) const KEY_COLS: &str = "id, workspace_id, name, secret_hash, hint, created_at, \
                                   expires_at, revoked_at, spend_limit_pico, limit_reset, \
                                   replaced_by, allowed_models";
pub(crate) const MANAGEMENT_KEY_COLS: &str =
    "id, workspace_id, name, secret_hash, hint, created_at, expires_at, revoked_at";
/// Ledger entries are read as `LEDGER_COLS, usage_id` (the usage id is set by debits only).
pub(crate) const LEDGER_COLS: &str = "id, workspace_id, kind, amount_pico, note, created_at";
pub(crate) const MODEL_COLS: &str = "id, provider, family, kind, upstream_model, profile, \
                                     input_price_micro, output_price_micro, \
                                     cache_read_price_micro, cache_write_price_micro, \
                                     capabilities, max_output_tokens, active, \
                                     cache_write_1h_price_micro, audio_input_price_micro, \
                                     cache_storage_price_micro, long_context_threshold, \
                                     long_input_price_micro, long_output_price_micro, \
                                     long_cache_read_price_micro, \
                                     long_cache_write_price_micro, \
                                     long_cache_write_1h_price_micro, context_window, \
                                     shutdown_on, source, aliases";
pub(crate) const PROFILE_COLS: &str = "name, spec";
pub(crate) const ROUTE_COLS: &str =
    "model_id, kind, base_url, region, priority, active, weight, upstream_model, api";
pub(crate) const USAGE_COLS: &str = "id, workspace_id, key_id, model_id, route, endpoint, \
                                     stream, input_tokens, cache_read_tokens, \
                                     cache_write_tokens, output_tokens, reasoning_tokens, \
                                     input_price_micro, output_price_micro, \
                                     cache_read_price_micro, cache_write_price_micro, cost_pico, \
                                     outcome, started_at, finished_at, upstream_latency_us, \
                                     ttft_us, spend_window_start, usage_source, \
                                     audio_input_tokens, cache_write_1h_tokens, \
                                     cache_storage_token_seconds, audio_input_price_micro, \
                                     cache_write_1h_price_micro, cache_storage_price_micro, \
                                     attempts, request_id, review, client_addr, \
                                     upstream_request_id, waived";
pub(crate) const AUDIT_COLS: &str =
    "id, at, actor, action, workspace_id, target, before_json, after_json";
pub(crate) const DAILY_COLS: &str =
    "day, model_id, requests, input_tokens, output_tokens, cost_pico";
pub(crate) const ALERT_COLS: &str =
    "workspace_id, webhook_url, secret, low_balance_pico, key_limit_percents";
pub(crate) const DELIVERY_COLS: &str =
    "id, workspace_id, event_id, event, attempt, at, status, error, delivered";
pub(crate) const RESPONSE_COLS: &str =
    "id, workspace_id, key_id, model, created_at, expires_at, items, response";

pub(crate) const SESSION_COLS: &str = "id_hash, name, csrf, created_at, last_seen, expires_at";

/// Moves a live console session's `last_seen` to now and reads it back (parameters: id_hash,
/// now, idle_since); an ended session changes and returns nothing.
pub(crate) fn session_touch_sql(mark: char) -> String {
    format!(
        "UPDATE console_sessions SET last_seen = {mark}2 \
         WHERE id_hash = {mark}1 AND last_seen > {mark}3 AND expires_at > {mark}2 \
         RETURNING {SESSION_COLS}"
    )
}

/// Deletes the ended console sessions (parameters: now, idle_since).
pub(crate) fn sessions_purge_sql(mark: char) -> String {
    format!("DELETE FROM console_sessions WHERE expires_at <= {mark}1 OR last_seen <= {mark}2")
}

/// Deletes all but the most recently seen console sessions (parameter: how many to keep).
pub(crate) fn sessions_cap_sql(mark: char) -> String {
    format!(
        "DELETE FROM console_sessions WHERE id_hash IN \
         (SELECT id_hash FROM console_sessions ORDER BY last_seen DESC, id_hash \
          LIMIT 9223372036854775807 OFFSET {mark}1)"
    )
}

/// Adds a credit to its workspace's balance row and its credited total, creating the row
/// (parameters: workspace_id, amount), and returns the new balance: one statement, so
/// concurrent credits serialise on the row. The amount is positive, so `MAX - amount` cannot
/// overflow: a balance or total it would take past BIGINT is left as it is (no row returned),
/// and the caller refuses the whole credit.
pub(crate) fn credit_balance_sql(mark: char) -> String {
    format!(
        "INSERT INTO balances (workspace_id, balance_pico, credited_pico) \
         VALUES ({mark}1, {mark}2, {mark}2) \
         ON CONFLICT (workspace_id) DO UPDATE \
         SET balance_pico = balances.balance_pico + excluded.balance_pico, \
             credited_pico = balances.credited_pico + excluded.credited_pico \
         WHERE balances.balance_pico <= 9223372036854775807 - excluded.balance_pico \
         AND balances.credited_pico <= 9223372036854775807 - excluded.credited_pico \
         RETURNING balance_pico"
    )
}

/// Takes a refund (parameters: workspace_id, the amount, positive) out of its workspace's
/// balance and credited total, and returns the new balance: only while the balance covers it
/// (no row returned otherwise, and the caller refuses the refund). Never below zero, so the
/// subtraction cannot overflow.
pub(crate) fn refund_balance_sql(mark: char) -> String {
    format!(
        "UPDATE balances SET balance_pico = balance_pico - {mark}2, \
         credited_pico = credited_pico - {mark}2 \
         WHERE workspace_id = {mark}1 AND balance_pico >= {mark}2 RETURNING balance_pico"
    )
}

/// A workspace's balance row, `BalanceRow` order (parameter: workspace_id).
pub(crate) fn balance_row_sql(mark: char) -> String {
    format!("SELECT balance_pico, credited_pico FROM balances WHERE workspace_id = {mark}1")
}

/// Every balance row, by workspace id: the id, then `BalanceRow` order (PostgreSQL appends its
/// byte-order collation).
pub(crate) const BALANCE_ROWS: &str =
    "SELECT workspace_id, balance_pico, credited_pico FROM balances ORDER BY workspace_id";

/// An idempotency key's columns; its `answer` is set by [`idempotency_answer_sql`].
pub(crate) const IDEMPOTENCY_COLS: &str =
    "workspace_id, operation, idempotency_key, request_hash, created_at, expires_at";

/// Deletes the idempotency keys expired by now (parameter: now), through `expires_at`'s index.
pub(crate) fn idempotency_purge_sql(mark: char) -> String {
    format!("DELETE FROM idempotency_keys WHERE expires_at <= {mark}1")
}

/// Claims an idempotency key (parameters: `params::idempotency_claim`); changes no row when it
/// is held. A concurrent claim not yet committed makes this one wait for its outcome
/// (PostgreSQL; SQLite's writers are serialised anyway).
pub(crate) fn idempotency_claim_sql(mark: char) -> String {
    format!(
        "{} ON CONFLICT (workspace_id, operation, idempotency_key) DO NOTHING",
        insert_sql("idempotency_keys", IDEMPOTENCY_COLS, mark)
    )
}

/// A held key's request hash and answer (parameters: workspace_id, operation, key).
pub(crate) fn idempotency_held_sql(mark: char) -> String {
    format!(
        "SELECT request_hash, answer FROM idempotency_keys \
         WHERE workspace_id = {mark}1 AND operation = {mark}2 AND idempotency_key = {mark}3"
    )
}

/// Keeps the answer with a key just claimed (parameters: workspace_id, operation, key,
/// answer).
pub(crate) fn idempotency_answer_sql(mark: char) -> String {
    format!(
        "UPDATE idempotency_keys SET answer = {mark}4 \
         WHERE workspace_id = {mark}1 AND operation = {mark}2 AND idempotency_key = {mark}3"
    )
}

/// A kept response, only for its own workspace and only before it expires (parameters: id,
/// workspace_id, now): another workspace's id and an expired one read alike, as absent.
pub(crate) fn response_select_sql(mark: char) -> String {
    format!(
        "SELECT {RESPONSE_COLS} FROM responses \
         WHERE id = {mark}1 AND workspace_id = {mark}2 AND expires_at > {mark}3"
    )
}

/// Deletes a workspace's kept response (parameters: id, workspace_id).
pub(crate) fn response_delete_sql(mark: char) -> String {
    format!("DELETE FROM responses WHERE id = {mark}1 AND workspace_id = {mark}2")
}

/// Kept responses a purge deletes per statement: each statement is short, so the writes
/// waiting behind it (SQLite's one writer: the ledger) wait little, however much has expired.
pub(crate) const PURGE_CHUNK: i64 = 1_000;

/// Deletes up to `PURGE_CHUNK` responses expired at a time (parameters: before, limit), found
/// through the `expires_at` index.
pub(crate) fn responses_purge_sql(mark: char) -> String {
    format!(
        "DELETE FROM responses WHERE id IN \
         (SELECT id FROM responses WHERE expires_at <= {mark}1 LIMIT {mark}2)"
    )
}

/// `load_catalog`'s reads, made in one snapshot: models, routes (in their order), profiles.
pub(crate) fn catalog_selects() -> [String; 3] {
    [
        format!("SELECT {MODEL_COLS} FROM models ORDER BY id"),
        format!("SELECT {ROUTE_COLS} FROM routes ORDER BY model_id, seq"),
        format!("SELECT {PROFILE_COLS} FROM profiles ORDER BY name"),
    ]
}

/// `INSERT INTO {table} ({cols}) VALUES (…)` with one placeholder per column, written
/// `{mark}1`, `{mark}2`, … (`?` for SQLite, `$` for PostgreSQL).
pub(crate) fn insert_sql(table: &str, cols: &str, mark: char) -> String {
    let values: Vec<String> = (1..=cols.split(',').count())
        .map(|i| format!("{mark}{i}"))
        .collect();
    format!(
        "INSERT INTO {table} ({cols}) VALUES ({})",
        values.join(", ")
    )
}

/// Rotation's conditional UPDATE of the old key (parameters: id, replaced_by, revoked_at,
/// expires_at, now): it changes a key only while it is not replaced, not revoked and not
/// expired, so exactly one of concurrent rotations changes it.
pub(crate) fn rotate_old_sql(mark: char) -> String {
    let m = |i: u8| format!("{mark}{i}");
    format!(
        "UPDATE api_keys SET replaced_by = {}, revoked_at = {}, expires_at = {} \
         WHERE id = {} AND replaced_by IS NULL AND revoked_at IS NULL \
         AND (expires_at IS NULL OR expires_at > {}) RETURNING {KEY_COLS}",
        m(2),
        m(3),
        m(4),
        m(1),
        m(5)
    )
}

/// A key's settings written whole (parameters: id, name, spend_limit_pico, limit_reset,
/// allowed_models), the key read back; no row when it does not exist.
pub(crate) fn key_update_sql(mark: char) -> String {
    format!(
        "UPDATE api_keys SET name = {mark}2, spend_limit_pico = {mark}3, limit_reset = {mark}4, \
         allowed_models = {mark}5 WHERE id = {mark}1 RETURNING {KEY_COLS}"
    )
}

/// The management key whose `column` (`id` or `secret_hash`) is the parameter.
pub(crate) fn management_key_sql(column: &str, mark: char) -> String {
    format!("SELECT {MANAGEMENT_KEY_COLS} FROM management_keys WHERE {column} = {mark}1")
}

/// A workspace's management keys, newest first (parameter: workspace_id).
pub(crate) fn management_keys_sql(mark: char) -> String {
    format!(
        "SELECT {MANAGEMENT_KEY_COLS} FROM management_keys WHERE workspace_id = {mark}1 \
         ORDER BY created_at DESC, id DESC"
    )
}

/// Revokes a management key not yet revoked (parameters: id, revoked_at), read back.
pub(crate) fn management_revoke_sql(mark: char) -> String {
    format!(
        "UPDATE management_keys SET revoked_at = {mark}2 WHERE id = {mark}1 AND revoked_at IS NULL \
         RETURNING {MANAGEMENT_KEY_COLS}"
    )
}

/// An upsert of a whole row into `table`: every `cols` column is written, the first being the
/// conflict target.
pub(crate) fn upsert_sql(table: &str, cols: &str, mark: char) -> String {
    let names: Vec<&str> = cols.split(',').map(str::trim).collect();
    let set: Vec<String> = names[1..]
        .iter()
        .map(|c| format!("{c} = excluded.{c}"))
        .collect();
    format!(
        "{} ON CONFLICT ({}) DO UPDATE SET {}",
        insert_sql(table, cols, mark),
        names[0],
        set.join(", ")
    )
}

/// A newest-first page query, the same for both dialects but for how a parameter is written
/// (`mark(n)`: `?n` or `$n`). Parameters, in order: one per `equal` column, then `from` and
/// `to` when asked, then the cursor's time and id when `after`, then the limit. The cursor is
/// a row-value comparison, `(time, id) < (?, ?)`, which both databases answer with one range
/// of the listing's index.
pub(crate) struct PageSql {
    pub cols: &'static str,
    pub table: &'static str,
    /// The time column the page is ordered by (with `id`).
    pub time: &'static str,
    pub equal: Vec<&'static str>,
    pub from: bool,
    pub to: bool,
    pub after: bool,
}

/// Ledger entries with their usage id, as a page reads them.
const LEDGER_PAGE_COLS: &str = "id, workspace_id, kind, amount_pico, note, created_at, usage_id";

impl PageSql {
    fn of(cols: &'static str, table: &'static str, time: &'static str, after: bool) -> Self {
        PageSql {
            cols,
            table,
            time,
            equal: Vec::new(),
            from: false,
            to: false,
            after,
        }
    }

    fn of_workspace(mut self) -> Self {
        self.equal.push("workspace_id");
        self
    }

    pub(crate) fn workspaces(after: bool) -> Self {
        Self::of(WORKSPACE_COLS, "workspaces", "created_at", after)
    }

    pub(crate) fn keys(after: bool) -> Self {
        Self::of(KEY_COLS, "api_keys", "created_at", after).of_workspace()
    }

    pub(crate) fn ledger(after: bool) -> Self {
        Self::of(LEDGER_PAGE_COLS, "ledger_entries", "created_at", after).of_workspace()
    }

    /// Parameters: workspace, then the filter's key and model when set, then from and to.
    pub(crate) fn usage(filter: &UsageFilter, after: bool) -> Self {
        let mut q = Self::of(USAGE_COLS, "usage_records", "finished_at", after).of_workspace();
        if filter.key_id.is_some() {
            q.equal.push("key_id");
        }
        if filter.model_id.is_some() {
            q.equal.push("model_id");
        }
        q.from = filter.from.is_some();
        q.to = filter.to.is_some();
        q
    }

    pub(crate) fn audit(of_workspace: bool, after: bool) -> Self {
        let q = Self::of(AUDIT_COLS, "audit_log", "at", after);
        if of_workspace {
            q.of_workspace()
        } else {
            q
        }
    }

    pub(crate) fn deliveries(after: bool) -> Self {
        Self::of(DELIVERY_COLS, "webhook_deliveries", "at", after).of_workspace()
    }

    pub(crate) fn sql(&self, mark: impl Fn(usize) -> String) -> String {
        let mut n = 0;
        let mut next = || {
            n += 1;
            mark(n)
        };
        let t = self.time;
        let mut conds: Vec<String> = self
            .equal
            .iter()
            .map(|c| format!("{c} = {}", next()))
            .collect();
        if self.from {
            conds.push(format!("{t} >= {}", next()));
        }
        if self.to {
            conds.push(format!("{t} < {}", next()));
        }
        if self.after {
            let (at, id) = (next(), next());
            conds.push(format!("({t}, id) < ({at}, {id})"));
        }
        let filter = if conds.is_empty() {
            String::new()
        } else {
            format!(" WHERE {}", conds.join(" AND "))
        };
        format!(
            "SELECT {} FROM {}{filter} ORDER BY {t} DESC, id DESC LIMIT {}",
            self.cols,
            self.table,
            next()
        )
    }
}

/// A page query with its parameters, in the order [`PageSql::sql`] numbers them.
pub(crate) struct Page<'a> {
    pub q: PageSql,
    pub args: Vec<Param<'a>>,
}

impl<'a> Page<'a> {
    /// `q` with `args` for its `equal`, `from` and `to` columns, then the cursor and the limit.
    fn of(q: PageSql, mut args: Vec<Param<'a>>, after: Option<&Cursor>, limit: usize) -> Self {
        if let Some(c) = after {
            args.push(c.at.into());
            args.push(c.id.clone().into());
        }
        args.push(i64::try_from(limit).unwrap_or(i64::MAX).into());
        Page { q, args }
    }

    pub(crate) fn workspaces(after: Option<&Cursor>, limit: usize) -> Self {
        Self::of(PageSql::workspaces(after.is_some()), vec![], after, limit)
    }

    pub(crate) fn keys(workspace_id: &'a str, after: Option<&Cursor>, limit: usize) -> Self {
        let q = PageSql::keys(after.is_some());
        Self::of(q, vec![workspace_id.into()], after, limit)
    }

    pub(crate) fn ledger(workspace_id: &'a str, after: Option<&Cursor>, limit: usize) -> Self {
        let q = PageSql::ledger(after.is_some());
        Self::of(q, vec![workspace_id.into()], after, limit)
    }

    /// Of the two upper bounds, `to` and the cursor, only the tighter is kept ([`usage_bounds`]).
    pub(crate) fn usage(
        workspace_id: &'a str,
        filter: &UsageFilter,
        after: Option<&Cursor>,
        limit: usize,
    ) -> Self {
        let (f, after) = usage_bounds(filter, after);
        let q = PageSql::usage(&f, after.is_some());
        let mut args = vec![workspace_id.into()];
        args.extend(
            [f.key_id, f.model_id]
                .into_iter()
                .flatten()
                .map(Param::from),
        );
        args.extend([f.from, f.to].into_iter().flatten().map(Param::from));
        Self::of(q, args, after.as_ref(), limit)
    }

    pub(crate) fn audit(
        workspace_id: Option<&'a str>,
        after: Option<&Cursor>,
        limit: usize,
    ) -> Self {
        let q = PageSql::audit(workspace_id.is_some(), after.is_some());
        let args = workspace_id.into_iter().map(Param::from).collect();
        Self::of(q, args, after, limit)
    }

    pub(crate) fn deliveries(workspace_id: &'a str, after: Option<&Cursor>, limit: usize) -> Self {
        let q = PageSql::deliveries(after.is_some());
        Self::of(q, vec![workspace_id.into()], after, limit)
    }

    /// The same page, borrowing nothing (SQLite's statements run on another thread).
    pub(crate) fn into_owned(self) -> Page<'static> {
        let args = self.args.into_iter().map(Param::into_owned).collect();
        Page { q: self.q, args }
    }
}

/// A usage page's filter and cursor with the looser of two upper bounds dropped: `to` and the
/// cursor both bound `finished_at` from above, and SQLite ranges its index on one only (the
/// other filtered row by row, which makes a deep page under a `to` scan its way down).
pub(crate) fn usage_bounds(
    filter: &UsageFilter,
    after: Option<&Cursor>,
) -> (UsageFilter, Option<Cursor>) {
    let mut filter = filter.clone();
    match (filter.to, after) {
        // Rows before the cursor are all before `to` already.
        (Some(to), Some(c)) if c.at < to => {
            filter.to = None;
            (filter, Some(c.clone()))
        }
        // Rows before `to` are all before the cursor already.
        (Some(_), Some(_)) => (filter, None),
        (_, after) => (filter, after.cloned()),
    }
}

/// `month_usage_page`: a month's records after an id, in id order (parameters: the month's
/// start and end, the id after which, the limit). The id index (PostgreSQL: each partition's
/// primary key) serves the order, so each page is one range scan.
pub(crate) fn month_usage_sql(mark: char) -> String {
    format!(
        "SELECT {USAGE_COLS} FROM usage_records \
         WHERE finished_at >= {mark}1 AND finished_at < {mark}2 AND id > {mark}3 \
         ORDER BY id LIMIT {mark}4"
    )
}

/// An archived month's totals row (parameters: workspace_id, month, records, cost_pico,
/// archived_at).
pub(crate) fn archived_total_insert_sql(mark: char) -> String {
    insert_sql(
        "archived_totals",
        "workspace_id, month, records, cost_pico, archived_at",
        mark,
    )
}

/// Every archived month's totals, oldest month first.
pub(crate) const ARCHIVED_TOTALS: &str = "SELECT month, workspace_id, records, cost_pico \
     FROM archived_totals ORDER BY month, workspace_id";

/// A month's carried-forward rows, by workspace (parameter: month).
pub(crate) fn archived_month_sql(mark: char) -> String {
    format!(
        "SELECT month, workspace_id, records, cost_pico FROM archived_totals \
         WHERE month = {mark}1 ORDER BY workspace_id"
    )
}

/// Removes a month's carried-forward rows when its records are restored (parameter: month).
pub(crate) fn archived_month_delete_sql(mark: char) -> String {
    format!("DELETE FROM archived_totals WHERE month = {mark}1")
}

/// A workspace's record by id within a range of `finished_at` (parameters: id, workspace_id,
/// from, to): the range prunes PostgreSQL's month partitions.
pub(crate) fn usage_record_within_sql(mark: char) -> String {
    format!(
        "SELECT {USAGE_COLS} FROM usage_records WHERE id = {mark}1 AND workspace_id = {mark}2 \
         AND finished_at >= {mark}3 AND finished_at < {mark}4"
    )
}

#[cfg(test)]
mod tests {
    use super::{usage_bounds, PageSql};
    use crate::store::{Cursor, UsageFilter};

    #[test]
    fn of_two_upper_bounds_only_the_tighter_is_kept() {
        let t = |s: i64| chrono::DateTime::from_timestamp(s, 0).unwrap();
        let filter = UsageFilter {
            to: Some(t(100)),
            ..Default::default()
        };
        let cursor = |s| Cursor {
            at: t(s),
            id: "x".into(),
        };
        let (f, c) = usage_bounds(&filter, Some(&cursor(50)));
        assert_eq!((f.to, c), (None, Some(cursor(50))));
        let (f, c) = usage_bounds(&filter, Some(&cursor(100)));
        assert_eq!((f.to, c), (Some(t(100)), None));
        let (f, c) = usage_bounds(&filter, None);
        assert_eq!((f.to, c), (Some(t(100)), None));
    }

    #[test]
    fn an_upsert_writes_every_column_but_the_first_its_key() {
        assert_eq!(
            super::upsert_sql("profiles", super::PROFILE_COLS, '$'),
            "INSERT INTO profiles (name, spec) VALUES ($1, $2) \
             ON CONFLICT (name) DO UPDATE SET spec = excluded.spec"
        );
    }

    #[test]
    fn a_page_query_numbers_its_parameters_in_order() {
        let filter = UsageFilter {
            key_id: Some("k".into()),
            to: Some(chrono::Utc::now()),
            ..Default::default()
        };
        let sql = PageSql::usage(&filter, true).sql(|n| format!("${n}"));
        let tail = sql.split(" FROM ").nth(1).unwrap();
        assert_eq!(
            tail,
            "usage_records WHERE workspace_id = $1 AND key_id = $2 AND finished_at < $3 AND \
             (finished_at, id) < ($4, $5) ORDER BY finished_at DESC, id DESC LIMIT $6"
        );
    }
}
