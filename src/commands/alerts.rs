//! A workspace's alert settings: where its signed webhooks go and what triggers them.

use rand::distributions::{Alphanumeric, DistString};
use serde::Deserialize;

use super::audit::{self, Actor, Change};
use super::page::{Page, PageRequest};
use super::{plain_text, CommandError, CommandResult};
use crate::money::Usd;
use crate::store::{AlertSettings, Delivery, Store};

/// What an operator sets.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AlertRequest {
    pub webhook_url: String,
    #[serde(default, deserialize_with = "crate::money::exact")]
    pub low_balance_usd: Option<Usd>,
    #[serde(default)]
    pub key_limit_percents: Vec<u8>,
}

/// `allow_private`: `tollgate.alerts.allow_private_webhooks` (else a literal non-public
/// address is refused here; a name is checked each time it is resolved for a delivery).
fn validate(req: &AlertRequest, allow_private: bool) -> CommandResult<()> {
    // The URL parser drops tabs and newlines; the text stored is the one given.
    plain_text("webhook_url", &req.webhook_url)?;
    crate::alerts::check_url(&req.webhook_url, allow_private)
        .map_err(|e| CommandError::Invalid(format!("webhook_url: {e}")))?;
    if req.low_balance_usd.is_some_and(|l| !l.is_positive()) {
        return Err(CommandError::Invalid(
            "low_balance_usd must be positive".into(),
        ));
    }
    if req
        .key_limit_percents
        .iter()
        .any(|p| !(1..=100).contains(p))
    {
        return Err(CommandError::Invalid(
            "key_limit_percents: each 1 to 100".into(),
        ));
    }
    Ok(())
}

/// Sets a workspace's alerts; the signing secret is made the first time and then kept.
pub async fn put_alerts(
    store: &dyn Store,
    actor: &Actor,
    workspace: &str,
    req: AlertRequest,
    allow_private_webhooks: bool,
) -> CommandResult<AlertSettings> {
    validate(&req, allow_private_webhooks)?;
    let before = store.get_alerts(workspace).await?;
    let secret = before.as_ref().map_or_else(
        || {
            format!(
                "whsec_{}",
                Alphanumeric.sample_string(&mut rand::thread_rng(), 32)
            )
        },
        |b| b.secret.clone(),
    );
    let mut percents = req.key_limit_percents;
    percents.sort_unstable();
    percents.dedup();
    let after = AlertSettings {
        workspace_id: workspace.to_owned(),
        webhook_url: req.webhook_url,
        secret,
        low_balance: req.low_balance_usd,
        key_limit_percents: percents,
    };
    let change = Change {
        action: "alerts.update",
        workspace: Some(workspace),
        target: workspace,
    };
    let audit = audit::of(actor, change, before.as_ref().map(public), |s| {
        Some(public(s))
    });
    store.put_alerts(&after, Some(audit)).await?;
    Ok(after)
}

/// Alert settings as the audit log keeps them: never the signing secret.
fn public(s: &AlertSettings) -> serde_json::Value {
    serde_json::json!({
        "webhook_url": s.webhook_url,
        "low_balance_usd": s.low_balance,
        "key_limit_percents": s.key_limit_percents,
    })
}

pub async fn deliveries(
    store: &dyn Store,
    workspace: &str,
    page: &PageRequest,
) -> CommandResult<Page<Delivery>> {
    let rows = store
        .deliveries_page(workspace, page.after.as_ref(), page.fetch())
        .await?;
    Ok(page.finish(rows, |d| (d.at, &d.id)))
}
