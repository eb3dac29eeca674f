//! How command results look on a terminal; `--json` prints the results themselves.

use chrono::Utc;
use serde::Serialize;

use super::CliError;
use crate::catalog::{lifecycle, RouteKind};
use crate::commands::{
    is_hidden_control, Archived, CreatedKey, CreatedManagementKey, Credited, DriftReport, Imported,
    Ledger, ManagementKeyStatus, ManagementKeyView, Migrated, Restored, Revoked, Rotated,
    RouteCheck, RouteStatus, Verified,
};
use crate::money::{Price, Usd};
use crate::store::{ApiKey, CatalogRows, LedgerKind, ModelRow, UsageRecord, Workspace};

/// Prints `value` as pretty JSON, or `text` (if any).
pub fn print<T: Serialize>(json: bool, value: &T, text: &str) -> Result<(), CliError> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    if json {
        serde_json::to_writer_pretty(&mut out, value)
            .map_err(|e| CliError::Usage(e.to_string()))?;
        writeln!(out)?;
    } else if !text.is_empty() {
        writeln!(out, "{text}")?;
    }
    Ok(())
}

pub fn migrated(m: &Migrated) -> String {
    format!("{} migration(s) applied", m.applied)
}

pub fn workspace_created(ws: &Workspace) -> String {
    plain(format!("workspace {} created ({})", ws.id, ws.name))
}

pub fn workspaces(list: &[Workspace]) -> String {
    lines(list, |w| {
        format!("{}  {}  {}", w.id, w.created_at.to_rfc3339(), w.name)
    })
}

pub fn key_created(c: &CreatedKey) -> String {
    format!(
        "{}\nsecret (shown once, store it now): {}",
        key(&c.key),
        c.secret
    )
}

pub fn rotated(r: &Rotated) -> String {
    format!(
        "{}\nsecret (shown once, store it now): {}\nreplaces {}",
        key(&r.key),
        r.secret,
        key(&r.old)
    )
}

pub fn keys(keys: &[ApiKey]) -> String {
    lines(keys, key)
}

pub fn key_updated(k: &ApiKey) -> String {
    format!("updated: {}", key(k))
}

pub fn management_key_created(c: &CreatedManagementKey) -> String {
    format!(
        "{}\nsecret (shown once, store it now): {}",
        management_key(&c.key),
        c.secret
    )
}

pub fn management_keys(keys: &[ManagementKeyView]) -> String {
    lines(keys, management_key)
}

pub fn management_key_revoked(k: &ManagementKeyView) -> String {
    format!("management key {} revoked", k.key.id)
}

/// One line per management key: id, hint, state, workspace, name, expiry.
fn management_key(v: &ManagementKeyView) -> String {
    let k = &v.key;
    let state = match v.status {
        ManagementKeyStatus::Active => "active",
        ManagementKeyStatus::Expired => "expired",
        ManagementKeyStatus::Revoked => "revoked",
    };
    let expires = k
        .expires_at
        .map(|e| format!("  expires {}", e.to_rfc3339()))
        .unwrap_or_default();
    plain(format!(
        "{}  {}  {}  {}  {}{}",
        k.id,
        k.hint,
        state,
        k.workspace_id,
        k.name.as_deref().unwrap_or("-"),
        expires
    ))
}

pub fn revoked(r: &Revoked) -> String {
    if r.changed {
        format!("key {} revoked", r.id)
    } else {
        format!("key {} was already revoked", r.id)
    }
}

pub fn credited(c: &Credited, workspace: &str) -> String {
    match c.entry.kind {
        LedgerKind::Refund => format!(
            "refunded {} USD from {workspace}; balance {} USD",
            Usd::ZERO
                .checked_sub(c.entry.amount)
                .unwrap_or(c.entry.amount),
            c.balance
        ),
        _ => format!(
            "credited {} USD to {workspace}; balance {} USD",
            c.entry.amount, c.balance
        ),
    }
}

pub fn imported(i: &Imported) -> String {
    format!("imported {} model(s), {} route(s)", i.models, i.routes)
}

/// The catalog, a model a line. A route is marked `(off)` when inactive, and `(shut down)` when
/// active but skipped: it calls the model's provider, which has shut the model down.
pub fn catalog(rows: &CatalogRows) -> String {
    let today = Utc::now().date_naive();
    lines(&rows.models, |m| {
        let routes: Vec<String> = rows
            .routes
            .iter()
            .filter(|r| r.model_id == m.id)
            .map(|r| {
                // A route that calls the Responses API says so: `openai:responses`.
                let api = if r.api == "chat" {
                    String::new()
                } else {
                    format!(":{}", r.api)
                };
                let shut_down = RouteKind::parse(&r.kind)
                    .is_some_and(|kind| lifecycle::shut_down(m, kind, today));
                let off = match (r.active, shut_down) {
                    (false, _) => "(off)",
                    (true, true) => "(shut down)",
                    (true, false) => "",
                };
                format!("{}{api}{off}", r.kind)
            })
            .collect();
        format!(
            "{:<36} {:<9} in {:>8} out {:>8}{}  {}{}{}",
            m.id,
            m.kind,
            m.input_price,
            m.output_price,
            other_prices(m),
            routes.join(","),
            aliases(m),
            lifecycle(m)
        )
    })
}

/// `  aliases a, b` when the model has aliases.
fn aliases(m: &ModelRow) -> String {
    if m.aliases.is_empty() {
        String::new()
    } else {
        format!("  aliases {}", m.aliases.join(", "))
    }
}

/// `[inactive]`, with the shutdown date when the catalog knows it.
fn lifecycle(m: &ModelRow) -> String {
    match (m.active, m.shutdown) {
        (true, None) => String::new(),
        (true, Some(day)) => format!("  [shutdown {day}]"),
        (false, None) => "  [inactive]".into(),
        (false, Some(day)) => format!("  [inactive, shut down {day}]"),
    }
}

/// The prices a model has beyond input and output, each as `name price`.
fn other_prices(m: &ModelRow) -> String {
    let named = |name: &str, price: Option<Price>| price.map(|p| format!(" {name} {p}"));
    let mut out: Vec<String> = [
        named("cache_read", m.cache_read_price),
        named("cache_write", m.cache_write_price),
        named("cache_write_1h", m.cache_write_1h_price),
        named("audio", m.audio_input_price),
        named("storage/h", m.cache_storage_price),
    ]
    .into_iter()
    .flatten()
    .collect();
    if let Some(l) = &m.long_context {
        out.push(format!(" | above {} tokens:", l.above));
        out.extend(
            [
                named("in", Some(l.input_price)),
                named("out", Some(l.output_price)),
                named("cache_read", l.cache_read_price),
                named("cache_write", l.cache_write_price),
                named("cache_write_1h", l.cache_write_1h_price),
            ]
            .into_iter()
            .flatten(),
        );
    }
    out.concat()
}

/// `catalog check`: the routes, the models not in the catalog, the surfaces asked, notes and
/// a summary, each section under its heading.
pub fn drift(r: &DriftReport) -> String {
    let mut out = vec!["routes:".to_owned(), lines(&r.routes, route_check)];
    if !r.not_in_catalog.is_empty() {
        out.push("not in catalog:".to_owned());
        out.push(lines(&r.not_in_catalog, |n| {
            format!(
                "  {:<17} {:<40} {}",
                n.surface.as_str(),
                n.model,
                n.base_urls.join(", ")
            )
        }));
    }
    out.push("surfaces:".to_owned());
    out.push(lines(&r.surfaces, |s| {
        let what = match (&s.models, &s.unchecked) {
            (Some(n), _) => format!("{n} models listed"),
            (None, why) => format!("unchecked: {}", why.as_deref().unwrap_or("")),
        };
        format!("  {:<17} {:<40} {what}", s.surface.as_str(), s.base_url)
    }));
    if !r.notes.is_empty() {
        out.push("notes:".to_owned());
        out.push(lines(&r.notes, |n| format!("  {n}")));
    }
    out.push(drift_summary(r));
    out.join("\n")
}

/// One route: model, route (kind, region, off), upstream id, and its status.
fn route_check(c: &RouteCheck) -> String {
    let model = format!(
        "{}{}",
        c.model,
        if c.model_active { "" } else { " [inactive]" }
    );
    let route = format!(
        "{}{}{}",
        c.route,
        c.region
            .as_deref()
            .map(|g| format!(" {g}"))
            .unwrap_or_default(),
        if c.route_active { "" } else { " (off)" }
    );
    let status = match (c.status, c.reason.as_deref()) {
        (RouteStatus::Listed, _) => "listed".to_owned(),
        (RouteStatus::Missing, _) if c.fails() => "MISSING".to_owned(),
        (RouteStatus::Missing, _) => "missing (inactive: expected)".to_owned(),
        (RouteStatus::Unchecked, why) => format!("unchecked: {}", why.unwrap_or("")),
    };
    let hint = match (c.status, c.reason.as_deref()) {
        (RouteStatus::Missing, Some(h)) => format!("; {h}"),
        _ => String::new(),
    };
    format!(
        "  {model:<40} {route:<28} {:<32} {status}{hint}",
        c.upstream_model
    )
}

fn drift_summary(r: &DriftReport) -> String {
    let count = |s: RouteStatus| r.routes.iter().filter(|c| c.status == s).count();
    format!(
        "{} route(s): {} listed, {} missing ({} on active routes of active models), {} unchecked; {} listed model(s) not in catalog",
        r.routes.len(),
        count(RouteStatus::Listed),
        count(RouteStatus::Missing),
        r.failures.len(),
        count(RouteStatus::Unchecked),
        r.not_in_catalog.len()
    )
}

pub fn usage(records: &[UsageRecord]) -> String {
    lines(records, |r| {
        format!(
            "{}  {}  {:<32} {:<16} in {} audio {} cached {} written {}+{}(1h) stored {} token-s out {} (reasoning {})  {} USD  {:?}",
            r.finished_at.to_rfc3339(),
            r.id,
            r.model_id,
            r.route,
            r.input_tokens,
            r.extra.audio_input_tokens,
            r.cache_read_tokens,
            r.cache_write_tokens,
            r.extra.cache_write_1h_tokens,
            r.extra.cache_storage_token_seconds,
            r.output_tokens,
            r.reasoning_tokens,
            r.cost,
            r.outcome
        ) + if r.waived { "  waived" } else { "" }
    })
}

pub fn verified(v: &Verified) -> String {
    let mut text = format!(
        "{} workspace(s) checked, {} inconsistent",
        v.checked,
        v.inconsistent.len()
    );
    if v.default_partition_records > 0 {
        text.push_str(&format!(
            "\nthe default partition of usage_records holds {} record(s): a month without its \
             partition (see docs/operations.md)",
            v.default_partition_records
        ));
    }
    text
}

pub fn archived(a: &Archived) -> String {
    if a.months.is_empty() {
        return "no month to archive".into();
    }
    a.months
        .iter()
        .map(|m| {
            plain(format!(
                "{}  {} records  {} USD  {}",
                m.month,
                m.records,
                m.cost,
                m.file.display()
            ))
        })
        .collect::<Vec<_>>()
        .join("\n")
}

pub fn restored(r: &Restored) -> String {
    format!("{}: {} records restored", r.month, r.records)
}

pub fn ledger(l: &Ledger) -> String {
    let mut text: Vec<String> = l
        .entries
        .iter()
        .map(|e| {
            plain(format!(
                "{}  {:<6} {:>24} USD  {}",
                e.created_at.to_rfc3339(),
                format!("{:?}", e.kind).to_lowercase(),
                e.amount,
                e.note.as_deref().or(e.usage_id.as_deref()).unwrap_or("")
            ))
        })
        .collect();
    text.push(format!("balance {} USD", l.balance));
    text.join("\n")
}

/// One line per key: id, hint, state, name, expiry and limit.
fn key(k: &ApiKey) -> String {
    let state = match (k.revoked_at, k.expires_at) {
        (Some(_), _) => "revoked".to_owned(),
        (None, Some(at)) if at <= Utc::now() => "expired".to_owned(),
        _ => "active".to_owned(),
    };
    let limit = match (k.spend_limit, k.limit_reset) {
        (Some(l), Some(r)) => format!("  limit {l} USD/{}", r.as_str()),
        _ => String::new(),
    };
    let expires = k
        .expires_at
        .map(|e| format!("  expires {}", e.to_rfc3339()))
        .unwrap_or_default();
    let models = if k.allowed_models.is_empty() {
        String::new()
    } else {
        format!("  models {}", k.allowed_models.join(", "))
    };
    plain(format!(
        "{}  {}  {}  {}{}{}{}",
        k.id,
        k.hint,
        state,
        k.name.as_deref().unwrap_or("-"),
        expires,
        limit,
        models
    ))
}

/// One line per item, each [shown plainly](plain).
fn lines<T>(items: &[T], line: impl Fn(&T) -> String) -> String {
    items
        .iter()
        .map(|i| plain(line(i)))
        .collect::<Vec<_>>()
        .join("\n")
}

/// A line of stored text with its control characters and bidi overrides escaped (`\u{1b}`):
/// rows written before names were checked may hold terminal escapes.
fn plain(line: String) -> String {
    if !line.chars().any(is_hidden_control) {
        return line;
    }
    line.chars()
        .map(|c| {
            if is_hidden_control(c) {
                c.escape_unicode().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stored_control_characters_are_shown_escaped() {
        let k = ApiKey {
            id: "key_1".into(),
            workspace_id: "ws_1".into(),
            name: Some("\u{1b}[31mred\u{202e}\n".into()),
            secret_hash: String::new(),
            hint: "sk-…".into(),
            created_at: Utc::now(),
            expires_at: None,
            revoked_at: None,
            spend_limit: None,
            limit_reset: None,
            replaced_by: None,
            allowed_models: vec!["google/*".into()],
        };
        let text = keys(&[k]);
        assert!(text.ends_with("  models google/*"), "{text}");
        assert!(
            !text.chars().any(|c| c.is_control() || c == '\u{202e}'),
            "{text:?}"
        );
        assert!(text.contains(r"\u{1b}[31mred\u{202e}\u{a}"), "{text}");
        let ws = Workspace {
            id: "ws_1".into(),
            name: "a\u{7}b".into(),
            created_at: Utc::now(),
        };
        assert!(workspaces(&[ws]).contains(r"a\u{7}b"));
    }

    #[test]
    fn catalog_lines_show_aliases_before_the_lifecycle() {
        let rows: CatalogRows = serde_yaml::from_str(
            "models:\n\
             - {id: anthropic/claude-sonnet-4-5, provider: anthropic, family: anthropic, \
                kind: chat, upstream_model: claude-sonnet-4-5, input_price: 3, output_price: 15, \
                aliases: [claude-sonnet-4-5, claude-sonnet-4-5-20250929], shutdown: 2026-11-30}\n\
             - {id: acme/plain, provider: acme, family: openai, kind: chat, upstream_model: p, \
                input_price: 1, output_price: 2}\n\
             routes: [{model_id: anthropic/claude-sonnet-4-5, kind: anthropic}, \
                      {model_id: acme/plain, kind: openai, api: responses}, \
                      {model_id: acme/plain, kind: openai, active: false}]",
        )
        .unwrap();
        let text = catalog(&rows);
        let lines: Vec<&str> = text.lines().collect();
        // Past Anthropic's shutdown, its route is skipped.
        assert!(
            lines[0].ends_with(
                "  anthropic(shut down)  aliases claude-sonnet-4-5, claude-sonnet-4-5-20250929  \
                 [shutdown 2026-11-30]"
            ),
            "{text}"
        );
        assert!(!lines[1].contains("aliases"), "{text}");
        assert!(
            lines[1].ends_with("  openai:responses,openai(off)"),
            "{text}"
        );
        let json = serde_json::to_value(&rows).unwrap();
        assert_eq!(
            json["models"][0]["aliases"],
            serde_json::json!(["claude-sonnet-4-5", "claude-sonnet-4-5-20250929"])
        );
        assert_eq!(json["models"][1]["aliases"], serde_json::json!([]));
        assert_eq!(json["routes"][0]["api"], "chat");
        assert_eq!(json["routes"][1]["api"], "responses");
    }
}
