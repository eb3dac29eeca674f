//! Alerts: a workspace's low balance and its keys' spend against their limits, delivered as
//! signed webhooks.
//!
//! A background loop looks at every workspace with alert settings each `alerts.interval`.
//! What is due is decided by a pure function ([`due`]); each alert fires once — the store's
//! `claim_alert` decides between replicas — and a low-balance alert is re-armed once the
//! balance is back above its threshold. A delivery is a POST of the event's JSON signed with
//! HMAC-SHA256 (`tollgate-signature: t=<unix seconds>,v1=<hex of HMAC(secret, "<t>.<body>")>`,
//! as Stripe signs), retried with doubling backoff; every attempt is recorded and shown in
//! the console.
//!
//! The operator's gateway sends these requests from inside its network, to a URL an admin
//! typed: so only public addresses are reached (unless `alerts.allow_private_webhooks`), a
//! name is resolved once and the checked addresses are the ones connected to, redirects are
//! not followed, and a delivery records only the status class and timing of the answer.

use std::error::Error as StdError;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use hmac::{Hmac, Mac};
use serde::Serialize;
use sha2::Sha256;

use crate::auth::new_id;
use crate::billing::window::{current_spends, window_start};
use crate::config::AlertsConf;
use crate::money::Usd;
use crate::store::{AlertSettings, ApiKey, Delivery, StatusClass, Store};

/// One alert that should fire, or a low-balance alert to re-arm.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Due {
    /// Fire once per claim key.
    Fire { claim: String, event: Event },
    /// The balance is back above the threshold: the next fall fires again.
    Rearm { claim: String },
}

/// A webhook event as delivered (its JSON is the body that is signed).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Event {
    /// `balance.low` or `key.spend_limit`.
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub workspace_id: String,
    pub data: serde_json::Value,
}

const LOW_BALANCE: &str = "balance.low";

/// What is due for a workspace with `balance` and `keys` (each with its current window spend).
pub fn due(
    settings: &AlertSettings,
    balance: Usd,
    keys: &[(ApiKey, Usd)],
    now: DateTime<Utc>,
) -> Vec<Due> {
    let mut out = Vec::new();
    if let Some(threshold) = settings.low_balance {
        let claim = LOW_BALANCE.to_owned();
        if balance < threshold {
            let data = serde_json::json!({ "balance": balance, "threshold": threshold });
            out.push(Due::Fire {
                claim,
                event: event(settings, LOW_BALANCE, data),
            });
        } else {
            out.push(Due::Rearm { claim });
        }
    }
    for (key, spend) in keys {
        let (Some(limit), Some(reset)) = (key.spend_limit, key.limit_reset) else {
            continue;
        };
        if key.revoked_at.is_some() || key.expires_at.is_some_and(|e| e <= now) {
            continue;
        }
        let window = window_start(reset, now);
        for &percent in &settings.key_limit_percents {
            if !reached(*spend, limit, percent) {
                continue;
            }
            let claim = format!(
                "key.spend_limit:{}:{percent}:{}",
                key.id,
                window.timestamp()
            );
            let data = serde_json::json!({
                "key_id": key.id, "key_name": key.name, "percent": percent,
                "spend": spend, "spend_limit": limit, "window_start": window,
            });
            out.push(Due::Fire {
                claim,
                event: event(settings, "key.spend_limit", data),
            });
        }
    }
    out
}

fn event(settings: &AlertSettings, kind: &'static str, data: serde_json::Value) -> Event {
    Event {
        kind,
        workspace_id: settings.workspace_id.clone(),
        data,
    }
}

/// Whether `spend` is at least `percent` % of `limit` (exact: integer pico-USD).
fn reached(spend: Usd, limit: Usd, percent: u8) -> bool {
    i128::from(spend.pico()) * 100 >= i128::from(limit.pico()) * i128::from(percent)
}

/// The `tollgate-signature` header of `body` sent at `t` (unix seconds).
pub fn signature(secret: &str, t: i64, body: &[u8]) -> String {
    let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(secret.as_bytes()) else {
        return String::new(); // HMAC takes keys of any length
    };
    mac.update(t.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    format!("t={t},v1={}", hex::encode(mac.finalize().into_bytes()))
}

/// Why a webhook URL is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WebhookRefused {
    #[error("webhook_url: {0}")]
    Url(String),
    #[error("webhook_url: an http(s) URL with a host expected")]
    Scheme,
    #[error(
        "webhook_url: {0} is a loopback, private, link-local or otherwise non-public address; \
         webhooks go to public addresses only (tollgate.alerts.allow_private_webhooks allows \
         private ones)"
    )]
    Address(IpAddr),
}

/// Checks a webhook URL as far as it can be checked without DNS: an http(s) URL whose host,
/// when it is an IP address (in any spelling the URL standard accepts: `0x7f000001`,
/// `2130706433`, `127.1` are all 127.0.0.1), is public unless `allow_private`.
pub fn check_url(url: &str, allow_private: bool) -> Result<reqwest::Url, WebhookRefused> {
    let url = reqwest::Url::parse(url).map_err(|e| WebhookRefused::Url(e.to_string()))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(WebhookRefused::Scheme);
    }
    let ip = match url.host() {
        None => return Err(WebhookRefused::Scheme),
        Some(url::Host::Domain(_)) => None,
        Some(url::Host::Ipv4(ip)) => Some(IpAddr::V4(ip)),
        Some(url::Host::Ipv6(ip)) => Some(IpAddr::V6(ip)),
    };
    match ip {
        Some(ip) if !allow_private && !is_public(ip) => Err(WebhookRefused::Address(ip)),
        _ => Ok(url),
    }
}

/// Whether `ip` is a public unicast address: not loopback, private, link-local, shared
/// (CGNAT), unspecified, broadcast, multicast, documentation or reserved, nor an IPv6 form
/// (IPv4-mapped, -compatible, NAT64) of such an IPv4 address.
pub fn is_public(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => public_v4(v4),
        IpAddr::V6(v6) => match embedded_v4(v6) {
            Some(v4) => public_v4(v4),
            None => public_v6(v6),
        },
    }
}

fn public_v4(ip: Ipv4Addr) -> bool {
    let [a, b, c, _] = ip.octets();
    !(ip.is_loopback()
        || ip.is_private()
        || ip.is_link_local()
        || ip.is_unspecified()
        || ip.is_broadcast()
        || ip.is_multicast()
        || ip.is_documentation()
        || a == 0 // "this network"
        || a >= 240 // reserved
        || a == 100 && (64..128).contains(&b) // shared address space (CGNAT)
        || a == 192 && b == 0 && c == 0 // IETF protocol assignments
        || a == 198 && (18..20).contains(&b)) // benchmarking
}

fn public_v6(ip: Ipv6Addr) -> bool {
    let first = ip.segments()[0];
    !(ip.is_loopback()
        || ip.is_unspecified()
        || ip.is_multicast()
        || ip.is_unique_local()
        || ip.is_unicast_link_local()
        || first & 0xffc0 == 0xfec0 // site-local (deprecated)
        || first == 0x2001 && ip.segments()[1] == 0x0db8) // documentation
}

/// The IPv4 address an IPv6 one stands for: mapped (`::ffff:a.b.c.d`), compatible
/// (`::a.b.c.d`, deprecated) or NAT64 (`64:ff9b::a.b.c.d`).
fn embedded_v4(ip: Ipv6Addr) -> Option<Ipv4Addr> {
    if let Some(v4) = ip.to_ipv4_mapped() {
        return Some(v4);
    }
    let s = ip.segments();
    let tail = Ipv4Addr::from((u32::from(s[6]) << 16) | u32::from(s[7]));
    let compatible = s[..6].iter().all(|&x| x == 0) && !ip.is_loopback() && !ip.is_unspecified();
    let nat64 = s[..6] == [0x64, 0xff9b, 0, 0, 0, 0];
    (compatible || nat64).then_some(tail)
}

/// A name resolved to an address webhooks may not reach.
#[derive(Debug, thiserror::Error)]
#[error("the webhook's host resolves to a non-public address")]
struct AddressNotAllowed;

/// Resolves webhook hosts and refuses the name when any of its addresses is not public. The
/// client connects to the addresses returned here, so what was checked is what is reached.
struct PublicOnly;

impl reqwest::dns::Resolve for PublicOnly {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        Box::pin(resolve_public(name.as_str().to_owned()))
    }
}

async fn resolve_public(
    host: String,
) -> Result<reqwest::dns::Addrs, Box<dyn StdError + Send + Sync>> {
    let addrs: Vec<SocketAddr> = tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
    if addrs.iter().any(|a| !is_public(a.ip())) {
        return Err(Box::new(AddressNotAllowed));
    }
    Ok(Box::new(addrs.into_iter()))
}

/// The webhook client: no redirects, no proxy from the environment (a proxy would resolve
/// the name itself), and unless private addresses are allowed, the checking resolver.
fn webhook_client(conf: AlertsConf) -> reqwest::Result<reqwest::Client> {
    let builder = reqwest::Client::builder()
        .timeout(conf.timeout)
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy();
    if conf.allow_private_webhooks {
        builder.build()
    } else {
        builder.dns_resolver(Arc::new(PublicOnly)).build()
    }
}

/// What one delivery attempt came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The receiver answered; `took` is the time to its answer's head.
    Answered {
        status: u16,
        took: Duration,
    },
    /// The address is not one webhooks may reach.
    AddressRefused,
    Timeout,
    /// No answer: DNS, connection or TLS failure, or the connection broke.
    Failed,
}

impl Outcome {
    fn of(sent: Result<reqwest::Response, reqwest::Error>, took: Duration) -> Self {
        match sent {
            Ok(r) => Outcome::Answered {
                status: r.status().as_u16(),
                took,
            },
            Err(e) if caused_by_refusal(&e) => Outcome::AddressRefused,
            Err(e) if e.is_timeout() => Outcome::Timeout,
            Err(_) => Outcome::Failed,
        }
    }

    pub fn delivered(self) -> bool {
        matches!(self, Outcome::Answered { status, .. } if (200..300).contains(&status))
    }

    pub fn status(self) -> Option<StatusClass> {
        match self {
            Outcome::Answered { status, .. } => Some(StatusClass::of(status)),
            _ => None,
        }
    }

    /// The line the deliveries list shows.
    pub fn result(self) -> String {
        match self {
            Outcome::Answered { status, took } => {
                let (class, ms) = (StatusClass::of(status), took.as_millis());
                if self.delivered() {
                    format!("delivered {class} in {ms} ms")
                } else {
                    format!("refused: non-2xx ({class}) in {ms} ms")
                }
            }
            Outcome::AddressRefused => "refused: address not allowed".into(),
            Outcome::Timeout => "failed: timeout".into(),
            Outcome::Failed => "failed: connection error".into(),
        }
    }
}

fn caused_by_refusal(e: &reqwest::Error) -> bool {
    let mut source: Option<&(dyn StdError + 'static)> = e.source();
    while let Some(s) = source {
        if s.is::<AddressNotAllowed>() {
            return true;
        }
        source = s.source();
    }
    false
}

/// The loop: evaluates every workspace's alerts each interval until `shutdown`.
pub async fn run(store: Arc<dyn Store>, conf: AlertsConf, shutdown: impl std::future::Future) {
    let client = match webhook_client(conf) {
        Ok(c) => c,
        Err(e) => {
            tracing::error!("alerts off: cannot build the webhook client: {e}");
            return;
        }
    };
    tokio::pin!(shutdown);
    loop {
        if let Err(e) = check_all(&store, &client, conf).await {
            tracing::warn!("alerts: {e}");
        }
        tokio::select! {
            _ = &mut shutdown => return,
            _ = tokio::time::sleep(conf.interval) => {}
        }
    }
}

async fn check_all(
    store: &Arc<dyn Store>,
    client: &reqwest::Client,
    conf: AlertsConf,
) -> Result<(), crate::store::StoreError> {
    let now = Utc::now();
    for settings in store.all_alerts().await? {
        let ws = &settings.workspace_id;
        let balance = store.balance(ws).await?;
        let keys = if settings.key_limit_percents.is_empty() {
            Vec::new()
        } else {
            let keys: Vec<ApiKey> = store
                .list_keys(ws)
                .await?
                .into_iter()
                .filter(|k| k.limit_reset.is_some() && k.revoked_at.is_none())
                .collect();
            let spends = current_spends(store.as_ref(), &keys, now).await?;
            keys.into_iter()
                .zip(spends)
                .filter_map(|(k, s)| Some((k, s?)))
                .collect()
        };
        for d in due(&settings, balance, &keys, now) {
            match d {
                Due::Rearm { claim } => {
                    store.release_alert(ws, &claim).await?;
                }
                Due::Fire { claim, event } => {
                    if store.claim_alert(ws, &claim, now).await? {
                        let (store, client) = (store.clone(), client.clone());
                        let settings = settings.clone();
                        #[expect(
                            clippy::disallowed_methods,
                            reason = "a delivery retries for minutes; the check that claimed it must not wait"
                        )]
                        tokio::spawn(deliver(store, client, settings, event, conf));
                    }
                }
            }
        }
    }
    Ok(())
}

/// Sends one event until it is accepted (a 2xx) or the attempts run out, recording each.
async fn deliver(
    store: Arc<dyn Store>,
    client: reqwest::Client,
    settings: AlertSettings,
    event: Event,
    conf: AlertsConf,
) {
    let event_id = new_id("evt");
    let body = serde_json::json!({
        "id": event_id, "type": event.kind, "created_at": Utc::now(),
        "workspace_id": event.workspace_id, "data": event.data,
    })
    .to_string();
    let mut wait = conf.backoff;
    for attempt in 1..=conf.attempts.max(1) {
        let at = Utc::now();
        let outcome = match check_url(&settings.webhook_url, conf.allow_private_webhooks) {
            // Literal addresses are not resolved: checked here (stored URLs predate checks).
            Err(WebhookRefused::Address(_)) => Outcome::AddressRefused,
            Err(_) => Outcome::Failed,
            Ok(url) => {
                let started = Instant::now();
                let sent = client
                    .post(url)
                    .header("content-type", "application/json")
                    .header("tollgate-event-id", &event_id)
                    .header(
                        "tollgate-signature",
                        signature(&settings.secret, at.timestamp(), body.as_bytes()),
                    )
                    .body(body.clone())
                    .send()
                    .await;
                Outcome::of(sent, started.elapsed())
            }
        };
        let record = Delivery {
            id: new_id("dlv"),
            workspace_id: settings.workspace_id.clone(),
            event_id: event_id.clone(),
            event: event.kind.to_owned(),
            attempt,
            at,
            status: outcome.status(),
            result: outcome.result(),
            delivered: outcome.delivered(),
        };
        if let Err(e) = store.record_delivery(&record).await {
            tracing::warn!("alerts: recording a delivery: {e}");
        }
        if outcome.delivered() {
            return;
        }
        if outcome == Outcome::AddressRefused {
            break; // the same answer on every attempt
        }
        tokio::time::sleep(wait).await;
        wait = wait.saturating_mul(2);
    }
    tracing::warn!(
        event = event.kind,
        "alert webhook not delivered after every attempt"
    );
}

#[cfg(test)]
mod tests {
    use std::str::FromStr;

    use super::*;
    use crate::money::usd;
    use crate::store::LimitReset;

    fn settings() -> AlertSettings {
        AlertSettings {
            workspace_id: "ws_a".into(),
            webhook_url: "http://127.0.0.1:9/hook".into(),
            secret: "whsec_x".into(),
            low_balance: Some(usd(5)),
            key_limit_percents: vec![80, 100],
        }
    }

    fn key(limit: i64) -> ApiKey {
        ApiKey {
            id: "key_a".into(),
            workspace_id: "ws_a".into(),
            name: Some("ci".into()),
            secret_hash: String::new(),
            hint: String::new(),
            created_at: Utc::now(),
            expires_at: None,
            revoked_at: None,
            spend_limit: Some(usd(limit)),
            limit_reset: Some(LimitReset::Daily),
            replaced_by: None,
            allowed_models: Vec::new(),
        }
    }

    fn claims(d: &[Due]) -> Vec<String> {
        d.iter()
            .map(|d| match d {
                Due::Fire { claim, .. } => format!("fire {claim}"),
                Due::Rearm { claim } => format!("rearm {claim}"),
            })
            .collect()
    }

    #[test]
    fn low_balance_fires_below_the_threshold_and_rearms_above() {
        let now = Utc::now();
        assert_eq!(
            claims(&due(&settings(), usd(4), &[], now)),
            ["fire balance.low"]
        );
        assert_eq!(
            claims(&due(&settings(), usd(5), &[], now)),
            ["rearm balance.low"]
        );
        let none = AlertSettings {
            low_balance: None,
            ..settings()
        };
        assert!(due(&none, usd(0), &[], now).is_empty());
    }

    #[test]
    fn each_percentage_reached_fires_once_per_window() {
        let now = Utc::now();
        let keys_only = AlertSettings {
            low_balance: None,
            ..settings()
        };
        let spend = |s: Usd| due(&keys_only, usd(100), &[(key(10), s)], now);
        assert!(spend(Usd::from_pico(7_999_999_999_999)).is_empty());
        let at80 = claims(&spend(usd(8)));
        assert_eq!(at80.len(), 1, "{at80:?}");
        assert!(
            at80[0].starts_with("fire key.spend_limit:key_a:80:"),
            "{at80:?}"
        );
        assert_eq!(claims(&spend(usd(10))).len(), 2);
        let mut revoked = key(10);
        revoked.revoked_at = Some(now);
        assert!(due(&keys_only, usd(100), &[(revoked, usd(10))], now).is_empty());
    }

    #[test]
    fn only_public_addresses_are_webhook_hosts() {
        for private in [
            "127.0.0.1",
            "127.255.0.9",
            "0.0.0.0",
            "0.1.2.3",
            "10.0.0.1",
            "172.16.5.4",
            "192.168.0.1",
            "169.254.169.254",
            "100.64.0.1",
            "100.127.255.254",
            "224.0.0.1",
            "255.255.255.255",
            "240.0.0.1",
            "192.0.0.8",
            "198.18.0.1",
            "192.0.2.1",
            "::1",
            "::",
            "fe80::1",
            "fc00::1",
            "fd12:3456::1",
            "fec0::1",
            "ff02::1",
            "::ffff:127.0.0.1",
            "::ffff:10.0.0.1",
            "::ffff:169.254.169.254",
            "::10.0.0.1",
            "64:ff9b::7f00:1",
            "2001:db8::1",
        ] {
            assert!(!is_public(private.parse().unwrap()), "{private}");
        }
        for public in [
            "8.8.8.8",
            "1.1.1.1",
            "100.128.0.1",
            "172.32.0.1",
            "192.169.0.1",
            "2606:4700::1111",
            "::ffff:8.8.8.8",
            "64:ff9b::808:808",
        ] {
            assert!(is_public(public.parse().unwrap()), "{public}");
        }
    }

    #[test]
    fn literal_addresses_are_checked_in_every_spelling() {
        for url in [
            "http://127.0.0.1:8081/status",
            "http://0x7f000001/",
            "http://2130706433/",
            "http://127.1/",
            "http://0177.0.0.1/",
            "http://[::1]/",
            "http://[::ffff:7f00:1]/",
            "https://10.0.0.1/",
        ] {
            let refused = check_url(url, false).unwrap_err();
            assert!(
                matches!(refused, WebhookRefused::Address(_)),
                "{url}: {refused}"
            );
            assert!(refused.to_string().contains("allow_private_webhooks"));
            assert!(
                check_url(url, true).is_ok(),
                "{url}: allowed by the setting"
            );
        }
        assert!(check_url("https://hooks.example.com/x", false).is_ok());
        assert!(
            check_url("http://localhost:9/x", false).is_ok(),
            "a name: checked when resolved"
        );
        assert_eq!(check_url("ftp://x/", true), Err(WebhookRefused::Scheme));
        assert!(matches!(
            check_url("not a url", true),
            Err(WebhookRefused::Url(_))
        ));
    }

    #[test]
    fn a_delivery_shows_the_class_and_timing_only() {
        let answered = |status| Outcome::Answered {
            status,
            took: Duration::from_millis(120),
        };
        assert_eq!(answered(204).result(), "delivered 2xx in 120 ms");
        assert!(answered(204).delivered());
        assert_eq!(answered(302).result(), "refused: non-2xx (3xx) in 120 ms");
        assert!(!answered(302).delivered());
        assert_eq!(
            answered(503).status().map(|c| c.to_string()).as_deref(),
            Some("5xx")
        );
        assert_eq!(Outcome::Timeout.result(), "failed: timeout");
        assert_eq!(Outcome::Failed.result(), "failed: connection error");
        assert_eq!(
            Outcome::AddressRefused.result(),
            "refused: address not allowed"
        );
        assert_eq!(Outcome::Failed.status(), None);
    }

    #[tokio::test]
    async fn names_resolving_to_private_addresses_are_refused_before_connecting() {
        let resolver = PublicOnly;
        let name = |n: &str| reqwest::dns::Name::from_str(n).unwrap();
        let refused = reqwest::dns::Resolve::resolve(&resolver, name("localhost")).await;
        assert!(refused.is_err_and(|e| e.is::<AddressNotAllowed>()));
    }

    #[test]
    fn the_signature_is_hmac_sha256_of_time_and_body() {
        // Computed independently: Python's hmac.new(b"whsec_x", b"1700000000.{}", sha256).
        let want = "be8cb8325f2202445260a855532f967e30ad2a9394ce28da66ee02880ddcb661";
        let sig = signature("whsec_x", 1_700_000_000, b"{}");
        assert_eq!(sig, format!("t=1700000000,v1={want}"));
        assert_ne!(signature("other", 1_700_000_000, b"{}"), sig);
    }
}
