//! The credit gate (402) and the per-key spend gate (429), answered from memory.
//!
//! Each workspace balance and each limited key's window spend is kept as `committed` (the last
//! value read from the database) and `available`: `committed` less the charges this process has
//! made that the database does not have yet. A gate reads `available`: no lock, no database.
//! When a batch commits, the ledger writer reads the new values back and settles the batch's
//! charges with them, in one move of `available`; the change-feed follower takes the database's
//! value whenever any replica changes it, which is how exhaustion on one replica reaches the
//! others within about a second.
//!
//! A read of the database made between a batch's commit and its settling would hold that
//! batch's charges while they are still subtracted as pending: a false 402 until the settling
//! (or, applied after it, credit the database no longer has). So the writer holds
//! [`Accounts::sync_turn`] from before its commit until its settling, and the follower holds it
//! while it reads and applies the database's values.
//!
//! Reservations: admission ([`Accounts::reserve`]) holds a request's worst-case cost against
//! its workspace (and, for chat, its key's window) in a third atomic, `reserved`, until the
//! request ends and the returned [`Reservation`] drops; its actual cost is charged just before.
//! The credit gate admits while `available − reserved` is positive, so with nothing in
//! flight any credit left admits, but concurrent requests cannot multiply an overdraft. The
//! spend gate admits while the window's spend plus the other chat requests' reservations is
//! below the limit, so the first request of a window is always admitted and the one that
//! crosses the limit completes. Check and reservation are one compare-and-swap.
//!
//! Overdraft bound: on one replica, one request's worst case beyond the credit (the one that
//! saw the last credit); across replicas, plus what the others admit within the feed's delay
//! (~1 s). The same bound applies to a key's spend limit.
//!
//! Order: the credit gate answers first; a key over its limit in a workspace without credit
//! gets 402.

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, Ordering::Relaxed};
use std::sync::Arc;

use arc_swap::ArcSwap;
use chrono::{DateTime, Utc};

use super::window::window_start;
use crate::api::GatewayError;
use crate::money::Usd;
use crate::store::{ApiKey, BalanceRow};

/// A workspace's credit as one process sees it (`GET /v1/credits`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Credits {
    /// Credit granted less credit refunded, as last read from the database.
    pub credited: Usd,
    /// The balance the credit gate reads: the database's, less this process's charges not yet
    /// committed.
    pub balance: Usd,
    /// The worst cases of this process's requests in flight.
    pub reserved: Usd,
}

impl Credits {
    /// What was charged: the credited total less the balance (the charges not yet committed
    /// included).
    pub fn charged(&self) -> Usd {
        Usd::from_pico(self.credited.pico().saturating_sub(self.balance.pico()))
    }
}

#[derive(Debug, Default)]
struct Cell {
    /// The database's value as last read (start-up, the change feed, the writer's read-back).
    committed: AtomicI64,
    /// What the gates read: `committed` less this process's charges the database does not have
    /// yet. One atomic, moved by one addition at a time: a reader never sees the database's
    /// new value with the charges it includes still subtracted, nor the reverse.
    available: AtomicI64,
    /// Worst cases of the requests in flight (pico-USD).
    reserved: AtomicI64,
    /// A balance's credited total (credit granted less refunded) as last read with
    /// `committed`, for `GET /v1/credits`; unused by spend cells.
    credited: AtomicI64,
}

impl Cell {
    fn value(&self) -> i64 {
        self.available.load(Relaxed)
    }

    /// Reserves `amount` (never negative) if `admit(value, reserved so far)` allows it, in one
    /// step. A sum that would overflow is refused: saturating it would let the release of the
    /// whole amount later take more out than went in, and leave the cell holding credit that
    /// does not exist.
    fn reserve(&self, amount: i64, admit: impl Fn(i64, i64) -> bool) -> bool {
        debug_assert!(amount >= 0, "a reservation is never negative");
        let mut held = self.reserved.load(Relaxed);
        loop {
            let Some(next) = held.checked_add(amount) else {
                return false;
            };
            if !admit(self.value(), held) {
                return false;
            }
            match self
                .reserved
                .compare_exchange_weak(held, next, Relaxed, Relaxed)
            {
                Ok(_) => return true,
                Err(now) => held = now,
            }
        }
    }

    /// Gives back what [`reserve`](Self::reserve) took.
    fn unreserve(&self, amount: i64) {
        let before = self.reserved.fetch_sub(amount, Relaxed);
        debug_assert!(
            before >= amount,
            "released {amount} of {before} reserved: the in-flight total went negative"
        );
    }

    /// Moves what the gates read by `delta`, saturating: charges beyond `i64` (millions of USD
    /// in flight) read as no credit at all, which refuses rather than gives.
    fn shift(&self, delta: i64) {
        let _ = self
            .available
            .fetch_update(Relaxed, Relaxed, |v| Some(v.saturating_add(delta)));
    }

    /// Takes the database's value `read`, which includes `settled`: this process's charges that
    /// now leave the pending ones. Both in one move. Without a read, the database's value is
    /// the last one less those charges (a debit is its record's cost).
    fn settle(&self, read: Option<i64>, settled: i64) {
        let read = read.unwrap_or_else(|| self.committed.load(Relaxed).saturating_sub(settled));
        let moved = read.saturating_sub(self.committed.swap(read, Relaxed));
        self.shift(moved.saturating_add(settled));
    }
}

/// A request's worst case, held against its workspace's balance (and its key's window) while
/// it is in flight; released when dropped.
#[derive(Debug)]
pub struct Reservation {
    balance: Arc<Cell>,
    spend: Option<Arc<Spend>>,
    amount: i64,
}

impl Reservation {
    pub fn amount(&self) -> Usd {
        Usd::from_pico(self.amount)
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        self.balance.unreserve(self.amount);
        if let Some(s) = &self.spend {
            s.cell.unreserve(self.amount);
        }
    }
}

/// A key's spend in one window (`window` = its start, unix seconds). A new window gets a new
/// `Spend`, swapped into the map whole: a charge always lands in the cell of its own window,
/// never in one that a rollover is about to empty.
#[derive(Debug, Default)]
struct Spend {
    window: i64,
    cell: Cell,
}

type Map<T> = ArcSwap<HashMap<Box<str>, Arc<T>>>;

#[derive(Default)]
pub struct Accounts {
    balances: Map<Cell>,
    spends: Map<Spend>,
    /// Whose turn it is to bring the database's values in (see the module doc).
    sync: tokio::sync::Mutex<()>,
}

/// The map's cell for `id`, created (copy-on-write) the first time it is needed.
fn entry<T: Default>(map: &Map<T>, id: &str) -> Arc<T> {
    if let Some(e) = map.load().get(id) {
        return e.clone();
    }
    let mut made = None;
    map.rcu(|current| {
        let mut next = HashMap::clone(current);
        let e = next
            .entry(id.into())
            .or_insert_with(|| Arc::new(T::default()))
            .clone();
        made = Some(e);
        next
    });
    made.unwrap_or_default()
}

impl Accounts {
    /// Admits a request that may cost up to `worst` (see the module doc): 402 when its
    /// workspace has no credit left that requests in flight have not reserved, then — for chat
    /// — 429 when its key's window spend and the other chat reservations reach the limit.
    /// `strict`: the unreserved credit must cover the whole worst case, not just be positive.
    pub fn reserve(
        &self,
        key: &ApiKey,
        chat: bool,
        worst: Usd,
        strict: bool,
        now: DateTime<Utc>,
    ) -> Result<Reservation, GatewayError> {
        let amount = worst.pico().max(0);
        let balance = entry(&self.balances, &key.workspace_id);
        let covered = |value: i64, held: i64| {
            let free = value.saturating_sub(held);
            free > 0 && (!strict || free >= amount)
        };
        if !balance.reserve(amount, covered) {
            return Err(GatewayError::InsufficientCredit);
        }
        let mut reservation = Reservation {
            balance,
            spend: None,
            amount,
        };
        let (Some(limit), Some(reset), true) = (key.spend_limit, key.limit_reset, chat) else {
            return Ok(reservation);
        };
        let window = window_start(reset, now).timestamp();
        let Some(spend) = self.spend_in(&key.id, window) else {
            return Ok(reservation);
        };
        // Spend is stored negated (as a charge against zero), so `-value` is what was spent.
        let under =
            |value: i64, held: i64| value.saturating_neg().saturating_add(held) < limit.pico();
        if !spend.cell.reserve(amount, under) {
            return Err(GatewayError::SpendLimitExceeded); // drops the credit reservation
        }
        reservation.spend = Some(spend);
        Ok(reservation)
    }

    /// 402 when the workspace has no credit left (unknown workspaces have none), reservations
    /// aside: the gates' bare arithmetic, checked by the tests (admission uses `reserve`).
    #[cfg(test)]
    fn check_credit(&self, workspace_id: &str) -> Result<(), GatewayError> {
        let balance = self
            .balances
            .load()
            .get(workspace_id)
            .map_or(0, |c| c.value());
        if balance > 0 {
            Ok(())
        } else {
            Err(GatewayError::InsufficientCredit)
        }
    }

    /// 429 when the key has a spend limit and its current window's spend has reached it,
    /// reservations aside (tests only, as `check_credit`).
    #[cfg(test)]
    fn check_spend(&self, key: &ApiKey, now: DateTime<Utc>) -> Result<(), GatewayError> {
        let (Some(limit), Some(reset)) = (key.spend_limit, key.limit_reset) else {
            return Ok(());
        };
        let window = window_start(reset, now).timestamp();
        let spent = match self.spends.load().get(key.id.as_str()) {
            Some(s) if s.window == window => s.cell.value(),
            _ => 0,
        };
        // Spend is stored negated (as a charge against zero), so `-value` is what was spent.
        if spent.saturating_neg() >= limit.pico() {
            Err(GatewayError::SpendLimitExceeded)
        } else {
            Ok(())
        }
    }

    /// A finished request's cost, charged at once (before it is committed).
    pub fn charge(&self, workspace_id: &str, key: Option<(&str, DateTime<Utc>)>, cost: Usd) {
        self.shift(workspace_id, key, cost.pico().saturating_neg());
    }

    /// Moves what the gates read of a workspace's balance and (with a key) its window's spend.
    fn shift(&self, workspace_id: &str, key: Option<(&str, DateTime<Utc>)>, delta: i64) {
        entry(&self.balances, workspace_id).shift(delta);
        if let Some(s) = key.and_then(|(id, window)| self.spend_in(id, window.timestamp())) {
            s.cell.shift(delta);
        }
    }

    /// The turn at bringing the database's values in: the writer holds it from before a batch's
    /// commit until the batch is settled, the follower while it reads and applies values.
    pub async fn sync_turn(&self) -> tokio::sync::MutexGuard<'_, ()> {
        self.sync.lock().await
    }

    /// A committed batch's `charges` against a workspace stop being pending, and the database's
    /// balance row read after the commit (`None`: the read failed) comes in, in one move. Hold
    /// [`sync_turn`](Self::sync_turn) from before the commit.
    pub fn settle_balance(&self, workspace_id: &str, read: Option<BalanceRow>, charges: Usd) {
        let cell = entry(&self.balances, workspace_id);
        if let Some(row) = read {
            cell.credited.store(row.credited.pico(), Relaxed);
        }
        cell.settle(read.map(|row| row.balance.pico()), charges.pico());
    }

    /// As [`settle_balance`](Self::settle_balance), for a key's spend in the window starting at
    /// `window`, with the spend read back.
    pub fn settle_spend(
        &self,
        key_id: &str,
        window: DateTime<Utc>,
        read: Option<Usd>,
        charges: Usd,
    ) {
        if let Some(s) = self.spend_in(key_id, window.timestamp()) {
            // Spend is kept negated (as a charge against zero).
            s.cell.settle(
                read.map(|spent| spent.pico().saturating_neg()),
                charges.pico(),
            );
        }
    }

    /// The charge will never commit (its record was refused): it stops being pending.
    pub fn release(&self, workspace_id: &str, key: Option<(&str, DateTime<Utc>)>, cost: Usd) {
        self.shift(workspace_id, key, cost.pico());
    }

    /// The database's balance for a workspace (tests and benches).
    pub fn set_balance(&self, workspace_id: &str, balance: Usd) {
        entry(&self.balances, workspace_id).settle(Some(balance.pico()), 0);
    }

    /// The database's balance row for a workspace, read in one statement (start-up, the
    /// change feed, the ledger writer's read-back): its balance and credited total together.
    pub fn set_balance_row(&self, workspace_id: &str, row: BalanceRow) {
        self.settle_balance(workspace_id, Some(row), Usd::ZERO);
    }

    /// A workspace's credit as this process sees it; zeros for a workspace it does not know.
    pub fn credits(&self, workspace_id: &str) -> Credits {
        self.balances
            .load()
            .get(workspace_id)
            .map_or_else(Credits::default, |c| Credits {
                credited: Usd::from_pico(c.credited.load(Relaxed)),
                balance: Usd::from_pico(c.value()),
                reserved: Usd::from_pico(c.reserved.load(Relaxed)),
            })
    }

    /// The database's spend for a key in the window starting at `window`.
    pub fn set_spend(&self, key_id: &str, window: DateTime<Utc>, spent: Usd) {
        self.settle_spend(key_id, window, Some(spent), Usd::ZERO);
    }

    /// The key's spend cell for `window`, a fresh one when `window` is newer than the one held;
    /// `None` for a window older than the current one (its charges no longer gate anything).
    fn spend_in(&self, key_id: &str, window: i64) -> Option<Arc<Spend>> {
        match self.spends.load().get(key_id) {
            Some(s) if s.window == window => return Some(s.clone()),
            Some(s) if s.window > window => return None,
            _ => {}
        }
        let mut found = None;
        self.spends.rcu(|current| match current.get(key_id) {
            Some(s) if s.window >= window => {
                found = (s.window == window).then(|| s.clone());
                Arc::clone(current)
            }
            _ => {
                let fresh = Arc::new(Spend {
                    window,
                    cell: Cell::default(),
                });
                found = Some(fresh.clone());
                let mut next = HashMap::clone(current);
                next.insert(key_id.into(), fresh);
                Arc::new(next)
            }
        });
        found
    }

    /// The credit requests in flight have not reserved.
    pub fn unreserved(&self, workspace_id: &str) -> Usd {
        let free = self
            .balances
            .load()
            .get(workspace_id)
            .map_or(0, |c| c.value().saturating_sub(c.reserved.load(Relaxed)));
        Usd::from_pico(free)
    }

    /// What a key has spent in the window starting at `window`, as this process sees it
    /// (committed and pending charges; zero when it holds another window).
    pub fn spent(&self, key_id: &str, window: DateTime<Utc>) -> Usd {
        let value = match self.spends.load().get(key_id) {
            Some(s) if s.window == window.timestamp() => s.cell.value(),
            _ => 0,
        };
        // Spend is stored negated (as a charge against zero).
        Usd::from_pico(value.saturating_neg())
    }

    /// The balance this process sees (the database's less pending charges), for status and
    /// tests.
    pub fn balance(&self, workspace_id: &str) -> Usd {
        Usd::from_pico(
            self.balances
                .load()
                .get(workspace_id)
                .map_or(0, |c| c.value()),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::money::usd;
    use crate::store::LimitReset;
    use chrono::TimeZone;

    fn key(limit: Option<Usd>) -> ApiKey {
        ApiKey {
            id: "key_1".into(),
            workspace_id: "ws_1".into(),
            name: None,
            secret_hash: String::new(),
            hint: String::new(),
            created_at: Utc::now(),
            expires_at: None,
            revoked_at: None,
            spend_limit: limit,
            limit_reset: limit.map(|_| LimitReset::Daily),
            replaced_by: None,
            allowed_models: Vec::new(),
        }
    }

    #[test]
    fn credit_gate_follows_balance_charges_and_commits() {
        let a = Accounts::default();
        assert_eq!(
            a.check_credit("ws_1"),
            Err(GatewayError::InsufficientCredit),
            "unknown = no credit"
        );
        a.set_balance("ws_1", usd(1));
        assert_eq!(a.check_credit("ws_1"), Ok(()));
        a.charge("ws_1", None, usd(1));
        assert_eq!(
            a.check_credit("ws_1"),
            Err(GatewayError::InsufficientCredit),
            "a pending charge counts at once"
        );
        let read = BalanceRow {
            balance: Usd::ZERO, // the writer's read after the commit
            credited: usd(1),
        };
        a.settle_balance("ws_1", Some(read), usd(1));
        assert_eq!(a.balance("ws_1"), Usd::ZERO);
        a.set_balance("ws_1", Usd::from_pico(1));
        assert_eq!(a.check_credit("ws_1"), Ok(()), "the database's value wins");
    }

    #[test]
    fn spend_gate_counts_the_window_and_resets_with_it() {
        let a = Accounts::default();
        let k = key(Some(usd(2)));
        let day1 = Utc.with_ymd_and_hms(2026, 3, 1, 10, 0, 0).unwrap();
        let w1 = window_start(LimitReset::Daily, day1);
        assert_eq!(a.check_spend(&k, day1), Ok(()));
        a.charge("ws_1", Some(("key_1", w1)), usd(1));
        assert_eq!(a.check_spend(&k, day1), Ok(()), "below the limit");
        a.charge("ws_1", Some(("key_1", w1)), usd(1));
        assert_eq!(
            a.check_spend(&k, day1),
            Err(GatewayError::SpendLimitExceeded),
            "reached"
        );
        let day2 = day1 + chrono::Duration::days(1);
        assert_eq!(a.check_spend(&k, day2), Ok(()), "a new window starts empty");
        assert_eq!(a.check_spend(&key(None), day1), Ok(()), "no limit, no gate");
        a.set_spend("key_1", w1, usd(5));
        assert_eq!(
            a.check_spend(&k, day1),
            Err(GatewayError::SpendLimitExceeded)
        );
    }

    #[test]
    fn late_charges_do_not_reset_a_newer_window() {
        let a = Accounts::default();
        let now = Utc.with_ymd_and_hms(2026, 3, 2, 0, 0, 1).unwrap();
        let k = key(Some(usd(2)));
        let today = window_start(LimitReset::Daily, now);
        a.charge("ws_1", Some(("key_1", today)), usd(1));
        a.charge(
            "ws_1",
            Some(("key_1", today - chrono::Duration::days(1))),
            usd(3),
        );
        assert_eq!(
            a.check_spend(&k, now),
            Ok(()),
            "yesterday's charge does not count today"
        );
        assert_eq!(
            a.balance("ws_1"),
            Usd::from_pico(-usd(4).pico()),
            "but the balance pays for both"
        );
    }

    /// The spent amount this process sees for `key_1` in `window` (0 if another window is held).
    fn spent_in(a: &Accounts, window: DateTime<Utc>) -> i64 {
        a.spends
            .load()
            .get("key_1")
            .filter(|s| s.window == window.timestamp())
            .map_or(0, |s| -s.cell.value())
    }

    #[test]
    fn a_rollover_never_wipes_a_charge_made_in_the_new_window() {
        let day1 = Utc.with_ymd_and_hms(2026, 3, 2, 0, 0, 0).unwrap();
        let day2 = day1 + chrono::Duration::days(1);
        // Two threads cross into day 2 at once, many times: whichever rolls the window over,
        // both charges must land in day 2 (a reset after the other's charge would drop it).
        for round in 0..10_000 {
            let a = Accounts::default();
            a.set_spend("key_1", day1, usd(1));
            let start = std::sync::Barrier::new(2);
            std::thread::scope(|s| {
                for _ in 0..2 {
                    s.spawn(|| {
                        start.wait();
                        a.charge("ws_1", Some(("key_1", day2)), Usd::from_pico(1));
                    });
                }
            });
            assert_eq!(spent_in(&a, day2), 2, "round {round}: a charge was wiped");
        }
    }

    #[test]
    fn with_nothing_in_flight_any_credit_admits_and_reservations_hold_the_rest_back() {
        let a = Accounts::default();
        let now = Utc.with_ymd_and_hms(2026, 3, 2, 12, 0, 0).unwrap();
        let k = key(None);
        a.set_balance("ws_1", Usd::from_pico(1));
        let first = a
            .reserve(&k, true, usd(30), false, now)
            .expect("a pico of credit admits");
        assert_eq!(
            a.reserve(&k, true, usd(1), false, now).unwrap_err(),
            GatewayError::InsufficientCredit,
            "the credit is promised to the request in flight"
        );
        drop(first);
        assert!(
            a.reserve(&k, false, usd(1), false, now).is_ok(),
            "released when it ends"
        );
    }

    #[test]
    fn concurrent_requests_on_a_tiny_balance_admit_one() {
        let a = Accounts::default();
        let now = Utc.with_ymd_and_hms(2026, 3, 2, 12, 0, 0).unwrap();
        let k = key(None);
        a.set_balance("ws_1", Usd::from_pico(1));
        let start = std::sync::Barrier::new(16);
        let held: Vec<Reservation> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..16)
                .map(|_| {
                    s.spawn(|| {
                        start.wait();
                        a.reserve(&k, true, usd(1), false, now).ok()
                    })
                })
                .collect();
            handles
                .into_iter()
                .filter_map(|h| h.join().unwrap())
                .collect()
        });
        assert_eq!(
            held.len(),
            1,
            "one admitted, the others refused while it is in flight"
        );
    }

    #[test]
    fn the_spend_gate_counts_other_chat_reservations() {
        let a = Accounts::default();
        let now = Utc.with_ymd_and_hms(2026, 3, 2, 12, 0, 0).unwrap();
        let k = key(Some(usd(2)));
        a.set_balance("ws_1", usd(100));
        let first = a
            .reserve(&k, true, usd(5), false, now)
            .expect("the window's first request");
        assert_eq!(
            a.reserve(&k, true, usd(1), false, now).unwrap_err(),
            GatewayError::SpendLimitExceeded,
            "the first request may still spend the whole limit"
        );
        let embeddings = a
            .reserve(&k, false, usd(1), false, now)
            .expect("embeddings are not limited");
        drop((first, embeddings));
        let w = window_start(LimitReset::Daily, now);
        a.charge("ws_1", Some(("key_1", w)), usd(1));
        assert!(
            a.reserve(&k, true, usd(5), false, now).is_ok(),
            "1 of 2 USD spent: admitted"
        );
        a.charge("ws_1", Some(("key_1", w)), usd(1));
        assert_eq!(
            a.reserve(&k, true, usd(1), false, now).unwrap_err(),
            GatewayError::SpendLimitExceeded
        );
        assert_eq!(
            a.balance("ws_1"),
            usd(98),
            "a refused spend gate leaves no credit reserved"
        );
    }

    /// What a gate reads after each step (the test is the only writer, so no step can be seen
    /// half done).
    #[test]
    fn a_committed_charge_is_never_subtracted_twice() {
        let a = Accounts::default();
        let row = |balance| BalanceRow {
            balance,
            credited: usd(10),
        };
        a.set_balance("ws_1", usd(10));
        a.charge("ws_1", None, usd(1));
        assert_eq!(a.balance("ws_1"), usd(9), "pending counts at once");
        // The batch commits; the database says 9, which includes the charge.
        a.settle_balance("ws_1", Some(row(usd(9))), usd(1));
        assert_eq!(a.balance("ws_1"), usd(9), "not 8: a false 402");
        // Another replica charged 2 meanwhile: the read-back has both.
        a.charge("ws_1", None, usd(1));
        a.settle_balance("ws_1", Some(row(usd(6))), usd(1));
        assert_eq!(a.balance("ws_1"), usd(6));
        // The read-back failed: the database has the charge all the same.
        a.charge("ws_1", None, usd(1));
        a.settle_balance("ws_1", None, usd(1));
        assert_eq!(
            a.balance("ws_1"),
            usd(5),
            "not 6: credit the database has spent"
        );
        a.set_balance_row("ws_1", row(usd(5)));
        assert_eq!(a.balance("ws_1"), usd(5), "the feed's read agrees");
        a.set_balance_row("ws_1", row(usd(4)));
        assert_eq!(a.balance("ws_1"), usd(4), "and brings others' charges");
    }

    #[test]
    fn a_key_window_settles_like_a_balance() {
        let a = Accounts::default();
        let now = Utc.with_ymd_and_hms(2026, 3, 2, 12, 0, 0).unwrap();
        let w = window_start(LimitReset::Daily, now);
        a.set_spend("key_1", w, usd(1));
        a.charge("ws_1", Some(("key_1", w)), usd(2));
        assert_eq!(a.spent("key_1", w), usd(3));
        a.settle_spend("key_1", w, Some(usd(3)), usd(2));
        assert_eq!(a.spent("key_1", w), usd(3), "not 5");
        a.charge("ws_1", Some(("key_1", w)), usd(1));
        a.settle_spend("key_1", w, None, usd(1));
        assert_eq!(a.spent("key_1", w), usd(4));
        a.charge("ws_1", Some(("key_1", w)), usd(1));
        a.release("ws_1", Some(("key_1", w)), usd(1));
        assert_eq!(a.spent("key_1", w), usd(4), "a refused record is not spend");
    }

    #[test]
    fn strict_credit_needs_the_whole_worst_case_unreserved() {
        let a = Accounts::default();
        let now = Utc.with_ymd_and_hms(2026, 3, 2, 12, 0, 0).unwrap();
        let k = key(None);
        a.set_balance("ws_1", usd(3));
        assert_eq!(
            a.reserve(&k, true, usd(4), true, now).unwrap_err(),
            GatewayError::InsufficientCredit,
            "3 USD cannot pay for a 4 USD worst case"
        );
        let held = a.reserve(&k, true, usd(2), true, now).expect("covered");
        assert_eq!(a.unreserved("ws_1"), usd(1));
        assert!(
            a.reserve(&k, true, usd(2), true, now).is_err(),
            "only 1 USD left unreserved"
        );
        drop(held);
        assert!(
            a.reserve(&k, true, usd(3), true, now).is_ok(),
            "exactly covered"
        );
    }

    #[test]
    fn credits_follow_the_balance_row_charges_and_reservations() {
        let a = Accounts::default();
        let now = Utc.with_ymd_and_hms(2026, 3, 2, 12, 0, 0).unwrap();
        assert_eq!(a.credits("ws_1"), Credits::default(), "unknown: zeros");
        a.set_balance_row(
            "ws_1",
            BalanceRow {
                balance: usd(7),
                credited: usd(10),
            },
        );
        let seen = a.credits("ws_1");
        assert_eq!((seen.balance, seen.charged()), (usd(7), usd(3)));
        a.charge("ws_1", None, usd(1));
        let held = a.reserve(&key(None), true, usd(2), false, now).unwrap();
        let seen = a.credits("ws_1");
        assert_eq!(
            (seen.credited, seen.balance, seen.charged(), seen.reserved),
            (usd(10), usd(6), usd(4), usd(2)),
            "a charge not yet committed counts as charged; a request in flight as reserved"
        );
        drop(held);
        assert_eq!(a.credits("ws_1").reserved, Usd::ZERO);
    }

    /// What the workspace's cell holds reserved (tests).
    fn reserved(a: &Accounts, ws: &str) -> i64 {
        a.balances
            .load()
            .get(ws)
            .map_or(0, |c| c.reserved.load(Relaxed))
    }

    #[test]
    fn a_worst_case_that_would_overflow_the_in_flight_total_is_refused_not_saturated() {
        // The phantom-credit sequence: one ordinary request in flight, then one whose worst
        // case is i64::MAX. Saturating the sum and releasing both in full left the total at
        // minus the first reservation: credit that existed only in memory.
        let a = Accounts::default();
        let now = Utc.with_ymd_and_hms(2026, 3, 2, 12, 0, 0).unwrap();
        let k = key(Some(usd(1_000)));
        a.set_balance("ws_1", usd(1));
        let ordinary = a.reserve(&k, true, usd(2), false, now).expect("admitted");
        let huge = a.reserve(&k, true, Usd::from_pico(i64::MAX), false, now);
        assert_eq!(huge.unwrap_err(), GatewayError::InsufficientCredit);
        drop(ordinary);
        assert_eq!(
            reserved(&a, "ws_1"),
            0,
            "nothing left reserved, nothing below zero"
        );
        assert_eq!(a.unreserved("ws_1"), usd(1), "no credit appeared");
        let alone = a.reserve(&k, true, Usd::from_pico(i64::MAX), false, now);
        assert!(
            alone.is_ok(),
            "alone, it fits the total (admission bounds it first)"
        );
        drop(alone);
        assert_eq!(reserved(&a, "ws_1"), 0);
    }

    #[test]
    fn pending_charges_saturate_towards_no_credit() {
        let a = Accounts::default();
        a.set_balance("ws_1", usd(1));
        a.charge("ws_1", None, Usd::from_pico(i64::MAX));
        a.charge("ws_1", None, Usd::from_pico(i64::MAX));
        assert!(
            a.check_credit("ws_1").is_err(),
            "a wrapped sum would have read as a fortune"
        );
    }

    proptest::proptest! {
        /// Any mix of reservations (amounts across the whole range) and releases, in any
        /// order: the in-flight total is exactly the sum of the live reservations, never
        /// negative, and the credit seen never exceeds the balance.
        #[test]
        fn reservations_never_make_the_in_flight_total_negative(
            ops in proptest::collection::vec(
                (proptest::prop_oneof![0..=1_000i64, 0..=i64::MAX, (i64::MAX - 8)..=i64::MAX],
                 proptest::bool::ANY, proptest::bool::ANY, 0..4usize),
                1..64),
            balance in 0..=i64::MAX,
        ) {
            let a = Accounts::default();
            let now = Utc.with_ymd_and_hms(2026, 3, 2, 12, 0, 0).unwrap();
            let k = key(Some(Usd::from_pico(balance.max(1))));
            a.set_balance("ws_1", Usd::from_pico(balance));
            let mut live: Vec<Reservation> = Vec::new();
            for (amount, strict, chat, drop_at) in ops {
                if let Ok(r) = a.reserve(&k, chat, Usd::from_pico(amount), strict, now) {
                    live.push(r);
                }
                if drop_at < live.len() && drop_at % 2 == 0 {
                    live.swap_remove(drop_at);
                }
                let sum = live.iter().try_fold(0i64, |s, r| s.checked_add(r.amount));
                proptest::prop_assert_eq!(Some(reserved(&a, "ws_1")), sum);
                proptest::prop_assert!(reserved(&a, "ws_1") >= 0);
                proptest::prop_assert!(a.unreserved("ws_1").pico() <= balance);
            }
            drop(live);
            proptest::prop_assert_eq!(reserved(&a, "ws_1"), 0);
            proptest::prop_assert_eq!(a.unreserved("ws_1").pico(), balance);
        }
    }
}
