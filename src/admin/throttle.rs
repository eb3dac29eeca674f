//! Attempts per client address: wrong admin tokens (by default) or sign-ins. Each address has a
//! small bucket of allowed attempts (a token bucket: a burst, one more every refill period). An
//! address whose bucket is empty is refused — for wrong tokens, the right token included, so
//! the refusal is no oracle — until its next attempt is allowed again. IPv6 clients count per
//! /64, which one host usually holds.
//!
//! At most `MAX_CLIENTS` addresses are kept: a full bucket is the same as none and is dropped
//! first; past that, the address closest to a full bucket is forgotten.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::connections::client_of;

/// Wrong tokens allowed in a row.
const BURST: u32 = 10;
/// One more wrong token is allowed after this.
const REFILL: Duration = Duration::from_secs(6);
/// Addresses kept at most.
const MAX_CLIENTS: usize = 4096;

#[derive(Debug, Clone, Copy)]
struct Bucket {
    /// Failures still allowed at `at`.
    allowed: f64,
    at: Instant,
}

/// How many attempts in a row, and how soon one more.
#[derive(Debug, Clone, Copy)]
struct Rate {
    burst: f64,
    refill: Duration,
}

impl Bucket {
    fn allowed(&self, now: Instant, rate: Rate) -> f64 {
        let refilled =
            now.saturating_duration_since(self.at).as_secs_f64() / rate.refill.as_secs_f64();
        (self.allowed + refilled).min(rate.burst)
    }
}

pub struct Throttle {
    buckets: Mutex<HashMap<IpAddr, Bucket>>,
    max_clients: usize,
    rate: Rate,
}

/// Wrong admin tokens: 10 in a row, then one every 6 s.
impl Default for Throttle {
    fn default() -> Self {
        Throttle::new(BURST, REFILL, MAX_CLIENTS)
    }
}

impl Throttle {
    fn new(burst: u32, refill: Duration, max_clients: usize) -> Self {
        Throttle {
            buckets: Mutex::new(HashMap::new()),
            max_clients,
            rate: Rate {
                burst: f64::from(burst.max(1)),
                refill,
            },
        }
    }

    /// `n` attempts a minute (at least one): `n` in a row, then one every minute / `n`.
    pub fn per_minute(n: u32) -> Self {
        let n = n.max(1);
        let refill = Duration::from_secs(60).checked_div(n).unwrap_or(REFILL);
        Throttle::new(n, refill, MAX_CLIENTS)
    }

    #[cfg(test)]
    fn with_capacity(max_clients: usize) -> Self {
        Throttle::new(BURST, REFILL, max_clients)
    }

    /// `Err(wait)` while `client` may not try: how long until it may.
    pub fn check(&self, client: IpAddr, now: Instant) -> Result<(), Duration> {
        let Ok(buckets) = self.buckets.lock() else {
            return Ok(());
        };
        let Some(bucket) = buckets.get(&client_of(client)) else {
            return Ok(());
        };
        let allowed = bucket.allowed(now, self.rate);
        if allowed >= 1.0 {
            return Ok(());
        }
        Err(self.rate.refill.mul_f64(1.0 - allowed))
    }

    /// Counts one attempt of `client` (a wrong token, a sign-in).
    pub fn count(&self, client: IpAddr, now: Instant) {
        let Ok(mut buckets) = self.buckets.lock() else {
            return;
        };
        let key = client_of(client);
        if !buckets.contains_key(&key) && buckets.len() >= self.max_clients {
            make_room(&mut buckets, now, self.rate);
        }
        let allowed = buckets
            .get(&key)
            .map_or(self.rate.burst, |b| b.allowed(now, self.rate));
        let bucket = Bucket {
            allowed: (allowed - 1.0).max(0.0),
            at: now,
        };
        buckets.insert(key, bucket);
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.buckets.lock().map_or(0, |b| b.len())
    }
}

/// Drops the full buckets; when there are none, the fullest one.
fn make_room(buckets: &mut HashMap<IpAddr, Bucket>, now: Instant, rate: Rate) {
    let before = buckets.len();
    buckets.retain(|_, b| b.allowed(now, rate) < rate.burst);
    if buckets.len() < before {
        return;
    }
    let fullest = buckets
        .iter()
        .max_by(|a, b| a.1.allowed(now, rate).total_cmp(&b.1.allowed(now, rate)))
        .map(|(k, _)| *k);
    if let Some(k) = fullest {
        buckets.remove(&k);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn a_burst_of_failures_waits_for_the_refill_and_other_addresses_do_not() {
        let t = Throttle::default();
        let (a, now) = (ip("192.0.2.7"), Instant::now());
        for _ in 0..10 {
            assert_eq!(t.check(a, now), Ok(()));
            t.count(a, now);
        }
        assert_eq!(
            t.check(a, now),
            Err(REFILL),
            "the 11th try waits one refill"
        );
        assert_eq!(t.check(ip("192.0.2.8"), now), Ok(()));
        let half = now + REFILL / 2;
        assert_eq!(t.check(a, half), Err(REFILL / 2));
        let later = now + REFILL;
        assert_eq!(t.check(a, later), Ok(()), "one more try after the refill");
        t.count(a, later);
        assert_eq!(t.check(a, later), Err(REFILL));
        assert_eq!(t.check(a, later + REFILL * 20), Ok(()), "forgiven in time");
    }

    #[test]
    fn n_per_minute_allows_n_in_a_row_then_one_every_minute_over_n() {
        let t = Throttle::per_minute(4);
        let (a, now) = (ip("192.0.2.7"), Instant::now());
        for _ in 0..4 {
            assert_eq!(t.check(a, now), Ok(()));
            t.count(a, now);
        }
        assert_eq!(t.check(a, now), Err(Duration::from_secs(15)));
        assert_eq!(t.check(a, now + Duration::from_secs(15)), Ok(()));
    }

    #[test]
    fn ipv6_clients_count_per_64_and_mapped_addresses_as_ipv4() {
        let t = Throttle::default();
        let now = Instant::now();
        for i in 0..10 {
            t.count(ip(&format!("2001:db8:1:2::{i:x}")), now);
        }
        assert!(t.check(ip("2001:db8:1:2:ffff::1"), now).is_err());
        assert!(t.check(ip("2001:db8:1:3::1"), now).is_ok());
        for _ in 0..10 {
            t.count(ip("::ffff:192.0.2.1"), now);
        }
        assert!(t.check(ip("192.0.2.1"), now).is_err());
    }

    #[test]
    fn the_map_stays_bounded() {
        let t = Throttle::with_capacity(8);
        let now = Instant::now();
        for i in 0..100u32 {
            t.count(IpAddr::from(i.to_be_bytes()), now);
        }
        assert_eq!(t.len(), 8);
        // The most restricted addresses are kept longest.
        let guesser = ip("198.51.100.1");
        for _ in 0..10 {
            t.count(guesser, now);
        }
        t.count(ip("198.51.100.2"), now);
        assert!(t.check(guesser, now).is_err());
        assert_eq!(t.len(), 8);
    }
}
