//! What a finished request is billed: decided from how it ended and the usage it produced,
//! with no Pingora types, so every case is a unit test.
//!
//! Billed: a complete answer; an answer the client left early (what was received so far); a
//! stream the upstream broke after producing tokens (what was received); an explicit cache the
//! gateway created for the request, whatever became of the answer (the upstream bills its
//! creation and storage, and the workspace's later requests reuse it). Not billed: anything
//! else that failed before the upstream answered, an upstream error answer, and usage of zero.
//!
//! A stream cut short is billed at least what was delivered: where the upstream had not yet
//! counted it (Anthropic's output arrives at the end, Vertex Gemini's counts too), the output is
//! raised to the delivered content at 4 bytes a token, and a missing input count to the
//! request's estimate; the record says `usage_source: estimated`.
//!
//! Waived (`tollgate.waive_empty_failures`, off by default): a billed request that produced no
//! output tokens and failed — the upstream broke or erred before any output, or failed after
//! its cache was created — keeps its record and tokens at cost 0, marked `waived`
//! ([`waived`]). A client that left is not a failure: it pays for what it used.

use std::net::IpAddr;
use std::time::Duration;

use chrono::{DateTime, Utc};

use super::Admitted;
use crate::api::error::Blame;
use crate::api::{Door, GatewayError, Operation, Usage};
use crate::billing::cost::CostError;
use crate::billing::record::{usage_record, CacheCreation, Charge};
use crate::money::Usd;
use crate::store::{UsageEndpoint, UsageOutcome, UsageRecord, UsageSource};

/// How a request that was admitted ended, as far as billing cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ending {
    /// The upstream answered and the answer was delivered.
    Complete,
    /// The client went away (or its connection failed) while being answered.
    ClientLeft,
    /// The client went away, but the upstream's answer was still read to its end (a drained
    /// stream): its counts are final.
    ClientLeftAnswerRead,
    /// The upstream failed after the answer had begun (a broken or errored stream).
    BrokeMidStream,
    /// The request failed before a successful answer began.
    Failed,
}

impl Ending {
    /// From the error the client was answered with (if any), who, if anyone, stopped the
    /// answer before its end (the proxy's own I/O failing, or the client leaving a stream that
    /// was not read on to its end), and whether the client left.
    pub fn of(
        answered_with: Option<&GatewayError>,
        proxy_failure: Option<Blame>,
        client_left: bool,
    ) -> Ending {
        let ending = match (answered_with, proxy_failure) {
            (None, None) => Ending::Complete,
            (None, Some(Blame::Client)) => Ending::ClientLeft,
            (Some(GatewayError::MidStream(_)), _) => Ending::BrokeMidStream,
            _ => Ending::Failed,
        };
        match ending {
            Ending::Complete if client_left => Ending::ClientLeftAnswerRead,
            Ending::Failed => Ending::Failed,
            _ if client_left => Ending::ClientLeft,
            other => other,
        }
    }
}

/// The outcome billed for a request that ended so with `usage` (and a cache created for it,
/// if any); `None`: nothing is billed.
pub fn billed(
    ending: Ending,
    usage: &Usage,
    cache_created: Option<CacheCreation>,
) -> Option<UsageOutcome> {
    let created = cache_created.is_some_and(|c| c.tokens > 0);
    if usage.is_zero() && !created {
        return None;
    }
    match ending {
        Ending::Complete => Some(UsageOutcome::Complete),
        Ending::ClientLeft | Ending::ClientLeftAnswerRead => Some(UsageOutcome::ClientDisconnected),
        Ending::BrokeMidStream => Some(UsageOutcome::UpstreamFailed),
        Ending::Failed if created => Some(UsageOutcome::UpstreamFailed),
        Ending::Failed => None,
    }
}

/// Whether a billed request that ended so with `usage` (settled) is waived when the operator
/// waives empty failures: no output tokens (reasoning included), and the request failed — the
/// upstream broke or erred mid-stream (its finish reason an error, or none), or failed before
/// answering once the request's cache was created. A complete answer has a finish reason even
/// when empty, and a client that left chose to: neither is waived.
pub fn waived(ending: Ending, usage: &Usage) -> bool {
    usage.output == 0 && matches!(ending, Ending::BrokeMidStream | Ending::Failed)
}

/// Content bytes an estimated token stands for (the rule the embeddings estimate uses too).
const BYTES_PER_TOKEN: u64 = 4;

/// The usage billed for a request that ended so: the upstream's `reported` counts, raised —
/// when the answer was cut short — to what was delivered (`delivered` content bytes) and to the
/// request's `input_estimate` where the upstream had counted nothing yet.
pub fn settle(
    ending: Ending,
    reported: Usage,
    delivered: u64,
    input_estimate: u64,
) -> (Usage, UsageSource) {
    if !matches!(ending, Ending::ClientLeft | Ending::BrokeMidStream) {
        return (reported, UsageSource::Reported);
    }
    let mut usage = reported;
    let mut source = UsageSource::Reported;
    let output = delivered.div_ceil(BYTES_PER_TOKEN);
    if output > usage.output {
        usage.output = output;
        source = UsageSource::Estimated;
    }
    if usage.prompt_tokens() == 0 && usage.output > 0 {
        usage.input = input_estimate;
        source = UsageSource::Estimated;
    }
    (usage, source)
}

/// When things happened, for the usage record.
#[derive(Debug, Clone, Copy)]
pub struct Timings {
    pub started_at: DateTime<Utc>,
    pub finished_at: DateTime<Utc>,
    /// From sending the upstream request to its response header.
    pub upstream_latency: Option<Duration>,
    /// From receiving the request to the first body byte sent to the client.
    pub ttft: Option<Duration>,
}

/// What a finished request produced, for billing.
#[derive(Debug, Clone, Copy, Default)]
pub struct Produced {
    /// The upstream's counts (zero when it reported none).
    pub reported: Usage,
    /// Content bytes a stream sent the client (see [`settle`]).
    pub delivered: u64,
    /// An explicit cache created for the request.
    pub cache_created: Option<CacheCreation>,
    /// Routes tried, the answering one included (0 reads as 1).
    pub attempts: u32,
}

/// Who asked and whom the upstream says answered, for the record (and a ticket with the
/// provider).
#[derive(Debug, Clone, Copy, Default)]
pub struct Traced<'a> {
    /// The client's address (`client_addr`).
    pub client_addr: Option<IpAddr>,
    /// The answering upstream's own request id.
    pub upstream_request_id: Option<&'a str>,
}

/// The usage record of a finished request, or `None` when nothing is billed.
///
/// A usage that cannot be priced (its cost overflows `i64` pico-USD: a price or a count no
/// real request reaches) is never served free: the record bills the request's reserved worst
/// case instead, as an estimate, and says in `review` what the upstream reported. `Err` only
/// if even that cannot be priced, which admission rules out (it refuses a worst case that does
/// not fit, at the same model's prices).
pub fn usage_record_for(
    a: &Admitted,
    ending: Ending,
    produced: Produced,
    t: Timings,
    traced: Traced<'_>,
) -> Option<Result<UsageRecord, CostError>> {
    let (usage, usage_source) = settle(
        ending,
        produced.reported,
        produced.delivered,
        a.input_estimate,
    );
    let outcome = billed(ending, &usage, produced.cache_created)?;
    let waive = a.waive_empty_failures && waived(ending, &usage);
    let micros = |d: Option<Duration>| d.map(|d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX));
    let charge = |usage, usage_source, cache_created| Charge {
        id: &a.response_cx.id,
        key: &a.key,
        model: &a.model,
        route: a.route.kind.as_str(),
        endpoint: match (a.door, a.op) {
            (Door::Messages, _) => UsageEndpoint::Messages,
            (Door::Responses, _) => UsageEndpoint::Responses,
            (Door::OpenAi, Operation::Chat) => UsageEndpoint::Chat,
            (Door::OpenAi, Operation::Embeddings) => UsageEndpoint::Embeddings,
        },
        stream: a.stream,
        usage,
        cache_created,
        outcome,
        started_at: t.started_at,
        finished_at: t.finished_at,
        upstream_latency_us: micros(t.upstream_latency),
        ttft_us: micros(t.ttft),
        usage_source,
        attempts: produced.attempts,
        request_id: &a.request_id,
    };
    let traced = |mut record: UsageRecord| {
        record.client_addr = traced.client_addr.map(ip_text);
        record.upstream_request_id = traced.upstream_request_id.map(str::to_owned);
        record
    };
    let unpriced = match usage_record(charge(usage, usage_source, produced.cache_created)) {
        Ok(mut record) => {
            if waive {
                record.cost = Usd::ZERO;
                record.waived = true;
            }
            return Some(Ok(traced(record)));
        }
        // Not waived even so: a usage that cannot be priced goes to an operator's review.
        Err(err) => err,
    };
    let worst = Usage {
        input: a.worst_case.input_tokens,
        output: a.worst_case.output_tokens,
        ..Usage::default()
    };
    Some(
        usage_record(charge(worst, UsageSource::Estimated, None)).map(|mut record| {
            record.review = Some(review_note(unpriced, &usage, produced.cache_created));
            traced(record)
        }),
    )
}

/// What a record billed at its worst case says about the usage that could not be priced.
fn review_note(err: CostError, usage: &Usage, cache: Option<CacheCreation>) -> String {
    let cache = cache.map_or(String::new(), |c| {
        format!(", a cache of {} tokens for {} s", c.tokens, c.ttl_secs)
    });
    format!(
        "unpriceable usage ({err}): reported input {}, audio input {}, cache read {}, \
         cache write {} (1 h: {}), output {}, cache storage {} token-seconds{cache}; \
         billed the request's reserved worst case instead",
        usage.input,
        usage.audio_input,
        usage.cache_read,
        usage.cache_write,
        usage.cache_write_1h,
        usage.output,
        usage.cache_storage_token_seconds,
    )
}

/// `ip` as text, an IPv4 address without the formatter (its `Display` runs about 1,300
/// instructions, on every request with a client address).
fn ip_text(ip: IpAddr) -> String {
    let IpAddr::V4(v4) = ip else {
        return ip.to_string();
    };
    let mut text = String::with_capacity(15);
    for (i, octet) in v4.octets().into_iter().enumerate() {
        if i > 0 {
            text.push('.');
        }
        text.push_str(itoa::Buffer::new().format(octet));
    }
    text
}

#[cfg(test)]
mod tests {
    use std::net::{Ipv4Addr, Ipv6Addr};

    use proptest::prelude::*;

    use super::*;

    proptest! {
        #[test]
        fn an_address_is_written_as_display_writes_it(v4 in any::<u32>(), v6 in any::<u128>()) {
            let v4 = IpAddr::V4(Ipv4Addr::from(v4));
            prop_assert_eq!(ip_text(v4), v4.to_string());
            let v6 = IpAddr::V6(Ipv6Addr::from(v6));
            prop_assert_eq!(ip_text(v6), v6.to_string());
        }
    }
}
