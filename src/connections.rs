//! How many connections each listener holds, and the file handles they may take.
//!
//! Each listener counts its open connections in total and per client address ([`Limiter`],
//! one [`Guard`] per connection); past either limit a new connection is refused at once with
//! a `503` ([`refusal`]) and closed, so a flood of slow clients meets a clean refusal instead
//! of exhausting the process's file handles. At start the open-file limit is raised as far as
//! allowed ([`raise_open_files`]) and the configured limits are fitted into it with room to
//! spare (`ConnectionsConf::fit` in `config`), so that a flood of one listener never starves
//! the other, the upstream calls, the store or the logs.

use std::net::{IpAddr, Ipv6Addr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use dashmap::mapref::entry::Entry;
use dashmap::DashMap;

use crate::config::ListenerLimits;

/// Why a new connection was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    #[error("too many connections from your address (the limit is {0}); retry shortly")]
    PerAddress(usize),
    #[error("too many connections: this listener is full (the limit is {0}); retry shortly")]
    Total(usize),
}

impl Refused {
    /// A metric label.
    pub fn reason(self) -> &'static str {
        match self {
            Self::PerAddress(_) => "per_address",
            Self::Total(_) => "total",
        }
    }
}

/// The open connections of one listener: an atomic total and a sharded count per client
/// address (no lock held beyond one shard's entry, never across an await).
#[derive(Debug)]
pub struct Limiter {
    limits: ListenerLimits,
    total: AtomicUsize,
    by_client: DashMap<IpAddr, usize>,
}

/// One counted connection; dropping it (the connection ended) gives its place back.
#[derive(Debug)]
pub struct Guard {
    limiter: Arc<Limiter>,
    client: Option<IpAddr>,
}

impl Limiter {
    pub fn new(limits: ListenerLimits) -> Arc<Self> {
        Arc::new(Limiter {
            limits,
            total: AtomicUsize::new(0),
            by_client: DashMap::new(),
        })
    }

    /// Counts a new connection from `peer` (`None`: not an IP peer, counted in the total
    /// only), or says why it is refused.
    pub fn admit(self: &Arc<Self>, peer: Option<IpAddr>) -> Result<Guard, Refused> {
        if self.total.fetch_add(1, Ordering::AcqRel) >= self.limits.max {
            self.total.fetch_sub(1, Ordering::AcqRel);
            return Err(Refused::Total(self.limits.max));
        }
        let client = peer.map(client_of);
        if let Some(client) = client {
            let mut open = self.by_client.entry(client).or_insert(0);
            if *open >= self.limits.per_address {
                drop(open);
                self.total.fetch_sub(1, Ordering::AcqRel);
                return Err(Refused::PerAddress(self.limits.per_address));
            }
            *open += 1;
        }
        Ok(Guard {
            limiter: self.clone(),
            client,
        })
    }

    /// Connections open now.
    pub fn open(&self) -> usize {
        self.total.load(Ordering::Acquire)
    }

    pub fn limits(&self) -> ListenerLimits {
        self.limits
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        if let Some(client) = self.client {
            if let Entry::Occupied(mut open) = self.limiter.by_client.entry(client) {
                *open.get_mut() -= 1;
                if *open.get() == 0 {
                    open.remove(); // the map holds only addresses with connections open
                }
            }
        }
        self.limiter.total.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The "address" a per-address limit counts (here, and in the admin sign-in throttle): an IPv4
/// address (an IPv4-mapped IPv6 one included), or an IPv6 /64, the block one subscriber is
/// given (counting single IPv6 addresses would let one client open as many connections, or
/// make as many guesses, as it has addresses).
pub fn client_of(ip: IpAddr) -> IpAddr {
    match ip.to_canonical() {
        IpAddr::V6(v6) => {
            let prefix = u128::from(v6) & !((1u128 << 64) - 1);
            IpAddr::V6(Ipv6Addr::from(prefix))
        }
        v4 => v4,
    }
}

/// What a refused client reads before the connection closes: a `503` with `Connection:
/// close`, `Retry-After: 1` and the gateway's error envelope.
pub fn refusal(why: Refused) -> Vec<u8> {
    let body =
        crate::api::error::envelope(&why.to_string(), "server_error", "too_many_connections");
    let head = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n\
         content-length: {}\r\nretry-after: 1\r\nconnection: close\r\n\r\n",
        body.len()
    );
    [head.as_bytes(), &body].concat()
}

/// The process's open-file limit after [`raise_open_files`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpenFiles {
    /// The soft limit found at start.
    pub before: u64,
    /// The soft limit now in force.
    pub now: u64,
    /// The hard limit: how far the soft one may go.
    pub hard: u64,
}

/// Raises the soft open-file limit to the hard one (as far as the system allows: Linux caps
/// it at `fs.nr_open`); every connection, upstream call and log file takes one handle.
pub fn raise_open_files() -> Result<OpenFiles, nix::Error> {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let (before, hard) = getrlimit(Resource::RLIMIT_NOFILE)?;
    if before < hard {
        if let Err(e) = setrlimit(Resource::RLIMIT_NOFILE, hard, hard) {
            tracing::debug!("cannot raise the open-file limit to {hard}: {e}");
        }
    }
    let (now, hard) = getrlimit(Resource::RLIMIT_NOFILE)?;
    Ok(OpenFiles { before, now, hard })
}

/// The open-file limit after [`raise_open_files`] (said in the log); 1024 when it cannot be
/// read.
pub fn open_file_limit() -> u64 {
    match raise_open_files() {
        Ok(files) => {
            tracing::info!(
                "open-file limit {} (was {}, hard limit {})",
                files.now,
                files.before,
                files.hard
            );
            files.now
        }
        Err(e) => {
            tracing::warn!("cannot read the open-file limit ({e}); assuming 1024");
            1024
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limiter(max: usize, per_address: usize) -> Arc<Limiter> {
        Limiter::new(ListenerLimits { max, per_address })
    }

    fn ip(s: &str) -> Option<IpAddr> {
        Some(s.parse().unwrap())
    }

    #[test]
    fn an_address_gets_its_share_and_back_after_a_close() {
        let l = limiter(10, 2);
        let a = l.admit(ip("10.0.0.1")).unwrap();
        let _b = l.admit(ip("10.0.0.1")).unwrap();
        assert_eq!(l.admit(ip("10.0.0.1")).unwrap_err(), Refused::PerAddress(2));
        let _other = l.admit(ip("10.0.0.2")).unwrap();
        assert_eq!(l.open(), 3, "the refused one is not counted");
        drop(a);
        assert_eq!(l.open(), 2);
        let _again = l.admit(ip("10.0.0.1")).unwrap();
    }

    #[test]
    fn the_total_is_capped_whoever_connects() {
        let l = limiter(3, 2);
        let first = l.admit(ip("10.0.0.1")).unwrap();
        let _rest = [l.admit(ip("10.0.0.2")).unwrap(), l.admit(None).unwrap()];
        assert_eq!(l.admit(ip("10.0.0.3")).unwrap_err(), Refused::Total(3));
        assert_eq!(l.admit(None).unwrap_err(), Refused::Total(3));
        drop(first);
        let _fourth = l.admit(ip("10.0.0.3")).unwrap();
        assert_eq!(l.open(), 3);
    }

    #[test]
    fn the_map_forgets_addresses_with_nothing_open() {
        let l = limiter(10, 2);
        let guards: Vec<_> = (1..=5)
            .map(|i| l.admit(ip(&format!("10.0.0.{i}"))).unwrap())
            .collect();
        assert_eq!(l.by_client.len(), 5);
        drop(guards);
        assert!(l.by_client.is_empty());
        assert_eq!(l.open(), 0);
    }

    #[test]
    fn ipv6_clients_count_by_slash_64_and_mapped_ipv4_as_ipv4() {
        let l = limiter(10, 1);
        let _a = l.admit(ip("2001:db8:1:2::1")).unwrap();
        assert!(l.admit(ip("2001:db8:1:2:ffff::9")).is_err(), "same /64");
        let _b = l.admit(ip("2001:db8:1:3::1")).unwrap();
        let _c = l.admit(ip("192.0.2.7")).unwrap();
        assert!(
            l.admit(ip("::ffff:192.0.2.7")).is_err(),
            "the same IPv4 client"
        );
    }

    #[test]
    fn no_more_than_the_limit_are_held_under_concurrent_connections() {
        let l = limiter(2, 2);
        let held = AtomicUsize::new(0);
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for _ in 0..10_000 {
                        if let Ok(guard) = l.admit(ip("10.0.0.1")) {
                            assert!(held.fetch_add(1, Ordering::SeqCst) < 2, "a third held");
                            held.fetch_sub(1, Ordering::SeqCst);
                            drop(guard);
                        }
                    }
                });
            }
        });
        assert_eq!(l.open(), 0);
        assert!(l.by_client.is_empty());
    }

    #[test]
    fn the_refusal_is_a_whole_503_that_closes() {
        let text = String::from_utf8(refusal(Refused::PerAddress(8))).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        assert!(
            head.starts_with("HTTP/1.1 503 Service Unavailable\r\n"),
            "{head}"
        );
        assert!(head.contains("\r\nconnection: close"), "{head}");
        assert!(
            head.contains(&format!("\r\ncontent-length: {}", body.len())),
            "{head}"
        );
        let v: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!(v["error"]["code"], "too_many_connections");
        assert_eq!(v["error"]["type"], "server_error");
        assert!(
            v["error"]["message"].as_str().unwrap().contains("is 8"),
            "{v}"
        );
    }

    #[test]
    fn the_open_file_limit_is_raised_to_the_hard_limit() {
        let got = raise_open_files().unwrap();
        assert!(got.now >= got.before && got.now <= got.hard, "{got:?}");
    }
}
