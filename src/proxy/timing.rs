//! The gateway's own time on an answer, told to its client in a `Server-Timing` header
//! (`gateway;dur=0.083, upstream;dur=412.500`, in milliseconds) and to the metrics
//! (`tollgate_gateway_added_seconds`): the same figure in both places.
//!
//! "Upstream" is the time from the first upstream call to the answering upstream's answer: the
//! whole answer for a buffered request, its response head (first bytes) for a stream. The
//! gateway's time is everything else from the request's head being read to the answer's head
//! going out: admission, translation both ways, and any wait between failover attempts is
//! upstream time. Pure: no Pingora here.

use std::sync::Arc;
use std::time::{Duration, Instant};

/// The two durations an answer's `Server-Timing` header reports.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ServerTiming {
    pub gateway: Duration,
    /// `None` when no upstream was called (a local answer, a refusal).
    pub upstream: Option<Duration>,
}

impl ServerTiming {
    /// At `now`, for a request whose head was read at `started` and that waited `upstream` on
    /// its upstream calls.
    pub fn at(started: Instant, upstream: Option<Duration>, now: Instant) -> Self {
        let total = now.saturating_duration_since(started);
        ServerTiming {
            gateway: total.saturating_sub(upstream.unwrap_or_default()),
            upstream,
        }
    }

    /// The header's value, durations in milliseconds to the microsecond.
    pub fn header_value(&self) -> String {
        let mut value = String::with_capacity(48);
        value.push_str("gateway;dur=");
        push_ms(&mut value, self.gateway);
        if let Some(upstream) = self.upstream {
            value.push_str(", upstream;dur=");
            push_ms(&mut value, upstream);
        }
        value
    }
}

/// `d` in milliseconds with three decimals, rounded to the microsecond. Integers, not `{:.3}`:
/// float formatting was about 1,000 instructions a duration, on every answer.
fn push_ms(out: &mut String, d: Duration) {
    let micros = (d.as_nanos() + 500) / 1_000;
    let mut digits = itoa::Buffer::new();
    out.push_str(digits.format(micros / 1_000));
    out.push('.');
    let fraction = digits.format(micros % 1_000);
    out.push_str(&"00"[..3 - fraction.len()]);
    out.push_str(fraction);
}

/// What every answer's head carries: the request's id and the timing as of that head.
pub struct Stamp {
    pub request_id: Arc<str>,
    pub timing: ServerTiming,
}

/// When a request's phases happened: its head read, its first upstream call, the answering
/// upstream's answer (or its first bytes).
#[derive(Clone, Copy)]
pub struct Clock {
    pub started: Instant,
    pub upstream_at: Option<Instant>,
    pub answered_at: Option<Instant>,
}

impl Clock {
    /// The timing as of `now`. A call still awaited counts as the upstream's time so far: a
    /// stream's `200` committed by a keep-alive while the upstream thinks is not the gateway's
    /// time.
    pub fn timing(&self, now: Instant) -> ServerTiming {
        let upstream = self.upstream_at.map(|at| {
            self.answered_at
                .unwrap_or(now)
                .saturating_duration_since(at)
        });
        ServerTiming::at(self.started, upstream, now)
    }

    /// `request_id`'s stamp as of now; `said` keeps the first gateway time told (the metrics'
    /// figure).
    pub fn stamp(&self, request_id: &Arc<str>, said: &mut Option<Duration>) -> Stamp {
        let timing = self.timing(Instant::now());
        said.get_or_insert(timing.gateway);
        Stamp {
            request_id: request_id.clone(),
            timing,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_gateway_time_is_the_total_less_the_upstream_and_never_negative() {
        let started = Instant::now();
        let now = started + Duration::from_micros(5_250);
        let upstream = Some(Duration::from_micros(5_000));
        let t = ServerTiming::at(started, upstream, now);
        assert_eq!(t.gateway, Duration::from_micros(250));
        assert_eq!(t.header_value(), "gateway;dur=0.250, upstream;dur=5.000");
        // Clocks read in another order cannot make the gateway's share negative.
        let t = ServerTiming::at(started, Some(Duration::from_secs(1)), now);
        assert_eq!(t.gateway, Duration::ZERO);
    }

    #[test]
    fn a_call_still_awaited_is_the_upstreams_time_so_far() {
        let started = Instant::now();
        let clock = Clock {
            started,
            upstream_at: Some(started + Duration::from_micros(40)),
            answered_at: None,
        };
        let t = clock.timing(started + Duration::from_secs(15));
        assert_eq!(t.gateway, Duration::from_micros(40));
        let answered = Clock {
            answered_at: Some(started + Duration::from_millis(2)),
            ..clock
        };
        let t = answered.timing(started + Duration::from_millis(3));
        assert_eq!(t.upstream, Some(Duration::from_micros(1_960)));
        assert_eq!(t.gateway, Duration::from_micros(1_040));
    }

    #[test]
    fn an_answer_with_no_upstream_call_says_only_the_gateway() {
        let started = Instant::now();
        let t = ServerTiming::at(started, None, started + Duration::from_nanos(83_400));
        assert_eq!(t.header_value(), "gateway;dur=0.083");
    }

    #[test]
    fn durations_are_milliseconds_rounded_to_the_microsecond() {
        let timing = |gateway_ns: u64, upstream_ns: u64| ServerTiming {
            gateway: Duration::from_nanos(gateway_ns),
            upstream: Some(Duration::from_nanos(upstream_ns)),
        };
        assert_eq!(
            timing(1_005_000, 83_600).header_value(),
            "gateway;dur=1.005, upstream;dur=0.084"
        );
        assert_eq!(
            timing(0, 12_345_678_400).header_value(),
            "gateway;dur=0.000, upstream;dur=12345.678"
        );
        assert_eq!(
            timing(999_500, 40_000).header_value(),
            "gateway;dur=1.000, upstream;dur=0.040"
        );
    }
}
