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

use std::sync::Arc;

use chrono::{DateTime, Utc};
use hmac::{Hmac, Mac};
use serde::Serialize;
use sha2::Sha256;

use crate::auth::new_id;
use crate::billing::window::{current_spends, window_start};
use crate::config::AlertsConf;
use crate::money::Usd;
use crate::store::{AlertSettings, ApiKey, Delivery, Store};

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

/// The loop: evaluates every workspace's alerts each interval until `shutdown`.
pub async fn run(store: Arc<dyn Store>, conf: AlertsConf, shutdown: impl std::future::Future) {
    let client = reqwest::Client::builder()
        .timeout(conf.timeout)
        .build()
        .unwrap_or_default();
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
        let sent = client
            .post(&settings.webhook_url)
            .header("content-type", "application/json")
            .header("tollgate-event-id", &event_id)
            .header(
                "tollgate-signature",
                signature(&settings.secret, at.timestamp(), body.as_bytes()),
            )
            .body(body.clone())
            .send()
            .await;
        let (status, error) = match &sent {
            Ok(r) => (Some(r.status().as_u16()), None),
            Err(e) => (None, Some(e.to_string())),
        };
        let delivered = status.is_some_and(|s| (200..300).contains(&s));
        let record = Delivery {
            id: new_id("dlv"),
            workspace_id: settings.workspace_id.clone(),
            event_id: event_id.clone(),
            event: event.kind.to_owned(),
            attempt,
            at,
            status,
            error,
            delivered,
        };
        if let Err(e) = store.record_delivery(&record).await {
            tracing::warn!("alerts: recording a delivery: {e}");
        }
        if delivered {
            return;
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
    fn the_signature_is_hmac_sha256_of_time_and_body() {
        // Computed independently: Python's hmac.new(b"whsec_x", b"1700000000.{}", sha256).
        let want = "be8cb8325f2202445260a855532f967e30ad2a9394ce28da66ee02880ddcb661";
        let sig = signature("whsec_x", 1_700_000_000, b"{}");
        assert_eq!(sig, format!("t=1700000000,v1={want}"));
        assert_ne!(signature("other", 1_700_000_000, b"{}"), sig);
    }
}
