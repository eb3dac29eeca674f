//! Route health: a circuit breaker per route, per process.
//!
//! A route that failed `failures` times in a row (no connection, a timeout, a 5xx) or was
//! throttled (429) cools down, for the upstream's `Retry-After` if it gave one, else
//! `cooldown`; while it does, route choice skips it for any other eligible route. Once the
//! cooldown is over the route is half-open: the next live request that would use it is its
//! probe (no extra upstream call), and the probe's outcome closes or reopens the breaker. When
//! every route of a model is cooling, the one that recovers first is still used: health alone
//! never makes the gateway refuse a request.
//!
//! The state is a few atomics hung on each catalog [`Route`](super::Route), found again by
//! [`Healths`] when a refresh rebuilds the snapshot, so the hot path takes no lock.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::config::BreakerConf;

/// What route choice may do with a route now.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum State {
    /// Take it.
    Healthy,
    /// Cooling over: the next request may probe it.
    HalfOpen,
    /// A probe is in flight, or the route is cooling down: skip it if another can serve.
    Cooling,
}

/// One route's breaker.
#[derive(Debug)]
pub struct RouteHealth {
    conf: BreakerConf,
    /// Where the millisecond clocks below count from.
    epoch: Instant,
    /// Consecutive failures since the last success.
    failures: AtomicU32,
    /// Cooling until this many ms after `epoch`; 0: closed.
    open_until: AtomicU64,
    /// When the current probe began (ms after `epoch`, +1 so that 0 means none).
    probe_since: AtomicU64,
}

impl PartialEq for RouteHealth {
    /// One breaker per route: equal only to itself.
    fn eq(&self, other: &Self) -> bool {
        std::ptr::eq(self, other)
    }
}
impl Eq for RouteHealth {}

impl Default for RouteHealth {
    fn default() -> Self {
        RouteHealth::new(BreakerConf::default(), Instant::now())
    }
}

impl RouteHealth {
    pub fn new(conf: BreakerConf, epoch: Instant) -> Self {
        RouteHealth {
            conf,
            epoch,
            failures: AtomicU32::new(0),
            open_until: AtomicU64::new(0),
            probe_since: AtomicU64::new(0),
        }
    }

    fn ms(&self, at: Instant) -> u64 {
        u64::try_from(at.saturating_duration_since(self.epoch).as_millis()).unwrap_or(u64::MAX)
    }

    pub fn state(&self, now: Instant) -> State {
        let until = self.open_until.load(Ordering::Acquire);
        let now = self.ms(now);
        if until == 0 {
            State::Healthy
        } else if now < until || self.probing(now) {
            State::Cooling
        } else {
            State::HalfOpen
        }
    }

    /// A probe that never reported (its request vanished) stops counting after a cooldown.
    fn probing(&self, now: u64) -> bool {
        let since = self.probe_since.load(Ordering::Acquire);
        since != 0 && now < since - 1 + ms_of(self.conf.cooldown)
    }

    /// Whether a request may use the route now; taking a half-open route makes this request
    /// its probe (one at a time).
    pub fn admit(&self, now: Instant) -> bool {
        match self.state(now) {
            State::Healthy => true,
            State::Cooling => false,
            State::HalfOpen => {
                let seen = self.probe_since.load(Ordering::Acquire);
                let mine = self.ms(now) + 1;
                self.probe_since
                    .compare_exchange(seen, mine, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok()
            }
        }
    }

    /// When the cooldown ends (for choosing among routes that all cool down).
    pub fn cooling_until(&self) -> u64 {
        self.open_until.load(Ordering::Acquire)
    }

    /// The route answered: the breaker closes.
    pub fn succeeded(&self) {
        self.failures.store(0, Ordering::Release);
        self.probe_since.store(0, Ordering::Release);
        self.open_until.store(0, Ordering::Release);
    }

    /// The route failed before answering (no connection, timeout, 5xx): it cools down after
    /// `failures` in a row, or at once when it was being probed.
    pub fn failed(&self, now: Instant) {
        let failures = self.failures.fetch_add(1, Ordering::AcqRel) + 1;
        let probed = self.open_until.load(Ordering::Acquire) != 0;
        if probed || failures >= self.conf.failures {
            self.cool(now, self.conf.cooldown);
        }
    }

    /// The route throttled the request: it cools down for `retry_after` (capped) or the
    /// configured cooldown.
    pub fn throttled(&self, now: Instant, retry_after: Option<Duration>) {
        self.failures.fetch_add(1, Ordering::AcqRel);
        let wait = retry_after.map_or(self.conf.cooldown, |d| d.min(self.conf.max_cooldown));
        self.cool(now, wait);
    }

    fn cool(&self, now: Instant, wait: Duration) {
        let until = self.ms(now).saturating_add(ms_of(wait)).max(1);
        self.open_until.store(until, Ordering::Release);
        self.probe_since.store(0, Ordering::Release);
    }

    /// For the admin listener.
    pub fn view(&self, now: Instant) -> HealthView {
        let until = self.cooling_until();
        let now_ms = self.ms(now);
        HealthView {
            state: self.state(now),
            consecutive_failures: self.failures.load(Ordering::Acquire),
            cooling_for_ms: until.saturating_sub(now_ms),
        }
    }
}

#[derive(Debug, Serialize)]
pub struct HealthView {
    pub state: State,
    pub consecutive_failures: u32,
    pub cooling_for_ms: u64,
}

fn ms_of(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// Every route's breaker, by route, kept across catalog refreshes (read only when a snapshot
/// is built).
#[derive(Debug)]
pub struct Healths {
    conf: BreakerConf,
    epoch: Instant,
    by_route: Mutex<HashMap<String, Arc<RouteHealth>>>,
}

impl Default for Healths {
    fn default() -> Self {
        Healths::new(BreakerConf::default())
    }
}

impl Healths {
    pub fn new(conf: BreakerConf) -> Self {
        Healths {
            conf,
            epoch: Instant::now(),
            by_route: Mutex::new(HashMap::new()),
        }
    }

    /// The breaker of the route `key` (model, kind, region and URL), made on first sight.
    pub fn of(&self, key: String) -> Arc<RouteHealth> {
        let mut map = self.by_route.lock().unwrap_or_else(|p| p.into_inner());
        map.entry(key)
            .or_insert_with(|| Arc::new(RouteHealth::new(self.conf, self.epoch)))
            .clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn breaker() -> (RouteHealth, Instant) {
        let conf = BreakerConf {
            failures: 2,
            cooldown: Duration::from_secs(10),
            max_cooldown: Duration::from_secs(60),
        };
        let epoch = Instant::now();
        (RouteHealth::new(conf, epoch), epoch)
    }

    fn s(secs: u64) -> Duration {
        Duration::from_secs(secs)
    }

    #[test]
    fn consecutive_failures_open_it_and_a_success_in_between_resets_them() {
        let (h, t) = breaker();
        h.failed(t);
        h.succeeded();
        h.failed(t);
        assert_eq!(h.state(t), State::Healthy, "not two in a row");
        h.failed(t);
        assert_eq!(h.state(t), State::Cooling);
        assert!(!h.admit(t + s(9)));
        assert_eq!(h.state(t + s(10)), State::HalfOpen);
    }

    #[test]
    fn throttling_cools_for_the_retry_after_capped_or_the_cooldown() {
        let (h, t) = breaker();
        h.throttled(t, Some(s(3)));
        assert_eq!(h.state(t + s(2)), State::Cooling);
        assert_eq!(h.state(t + s(3)), State::HalfOpen);
        h.throttled(t, Some(s(3600)));
        assert_eq!(h.state(t + s(59)), State::Cooling, "capped at max_cooldown");
        assert_eq!(h.state(t + s(60)), State::HalfOpen);
        h.throttled(t, None);
        assert_eq!(h.state(t + s(9)), State::Cooling);
        assert_eq!(h.state(t + s(10)), State::HalfOpen);
    }

    #[test]
    fn half_open_admits_one_probe_whose_outcome_decides() {
        let (h, t) = breaker();
        h.throttled(t, Some(s(1)));
        let later = t + s(2);
        assert!(h.admit(later), "the probe");
        assert!(!h.admit(later), "one probe at a time");
        h.failed(later);
        assert_eq!(
            h.state(later + s(9)),
            State::Cooling,
            "a failed probe reopens"
        );
        assert!(h.admit(later + s(10)));
        h.succeeded();
        assert_eq!(h.state(later + s(10)), State::Healthy);
        assert!(h.admit(later + s(10)) && h.admit(later + s(10)));
    }

    #[test]
    fn a_probe_that_never_reports_is_given_up_after_a_cooldown() {
        let (h, t) = breaker();
        h.throttled(t, Some(s(1)));
        assert!(h.admit(t + s(1)));
        assert!(!h.admit(t + s(5)));
        assert!(h.admit(t + s(11)), "a new probe");
    }

    #[test]
    fn a_route_keeps_its_breaker_across_snapshots() {
        let healths = Healths::default();
        let a = healths.of("m|vertex".into());
        a.throttled(Instant::now(), None);
        assert!(Arc::ptr_eq(&a, &healths.of("m|vertex".into())));
        assert!(!Arc::ptr_eq(&a, &healths.of("m|gemini-api".into())));
    }
}
