//! Model lifecycles: providers announce a shutdown date for a model, serve it on their own API
//! until then, and answer 404 (or another model, at its prices) after. The catalog records the
//! date (`shutdown`). From that day the gateway calls the provider's API for the model no more
//! ([`shut_down`]): the model answers on its other routes, or not at all, never as something
//! else billed at its prices. At start it warns of every active model whose date is near or
//! past while a route still calls the provider's own API, so an operator moves clients (or
//! turns that route off) first. A cloud hosting the model (Vertex) publishes its own dates: its
//! routes are neither skipped nor warned about.

use chrono::NaiveDate;

use super::RouteKind;
use crate::store::{CatalogRows, ModelRow};

/// How far ahead of a shutdown the gateway starts warning.
pub const WARN_DAYS: i64 = 30;

/// Whether a route of `kind` no longer reaches `model` on `today`: it calls the model's
/// provider, which shuts the model down that day or did before.
pub fn shut_down(model: &ModelRow, kind: RouteKind, today: NaiveDate) -> bool {
    kind.is_providers_own() && model.shutdown.is_some_and(|day| day <= today)
}

/// An active model at most [`WARN_DAYS`] from its shutdown date, or past it, with an active
/// route to its provider's own API.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShutdownNotice {
    pub model: String,
    pub shutdown: NaiveDate,
    /// Days from today to the shutdown; negative once it has passed.
    pub days_left: i64,
}

impl std::fmt::Display for ShutdownNotice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (model, day) = (&self.model, self.shutdown);
        match self.days_left {
            d if d < 0 => write!(
                f,
                "model {model} is still routed to its provider, which shut it down on {day}: \
                 that route is skipped; deactivate it or the model, or route it to a successor"
            ),
            0 => write!(
                f,
                "model {model} is shut down by its provider today ({day}): its route there is \
                 skipped from now on"
            ),
            d => write!(
                f,
                "model {model} is shut down by its provider on {day}, in {d} days"
            ),
        }
    }
}

/// The notices of `catalog` on `today`, soonest shutdown first. Inactive models are already
/// retired here, and a model whose provider's routes are all off is served elsewhere (or not
/// at all): neither needs a notice.
pub fn shutdown_notices(catalog: &CatalogRows, today: NaiveDate) -> Vec<ShutdownNotice> {
    let routed_to_provider = |model: &str| {
        catalog.routes.iter().any(|r| {
            r.active
                && r.model_id == model
                && RouteKind::parse(&r.kind).is_some_and(RouteKind::is_providers_own)
        })
    };
    let mut notices: Vec<ShutdownNotice> = catalog
        .models
        .iter()
        .filter(|m| m.active && routed_to_provider(&m.id))
        .filter_map(|m| {
            let shutdown = m.shutdown?;
            let days_left = (shutdown - today).num_days();
            (days_left <= WARN_DAYS).then(|| ShutdownNotice {
                model: m.id.clone(),
                shutdown,
                days_left,
            })
        })
        .collect();
    notices.sort_by_key(|n| (n.shutdown, n.model.clone()));
    notices
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::CatalogRows;

    fn day(s: &str) -> NaiveDate {
        s.parse().unwrap()
    }

    #[test]
    fn warns_within_thirty_days_and_after_while_routed_to_the_provider() {
        let rows: CatalogRows = serde_yaml::from_str(
            r#"
models:
  - {id: g/far, provider: g, family: gemini, kind: chat, upstream_model: far, input_price: 1, output_price: 1, shutdown: 2027-05-07}
  - {id: g/edge, provider: g, family: gemini, kind: chat, upstream_model: edge, input_price: 1, output_price: 1, shutdown: 2026-12-26}
  - {id: g/soon, provider: g, family: gemini, kind: chat, upstream_model: soon, input_price: 1, output_price: 1, shutdown: 2026-12-01}
  - {id: g/past, provider: g, family: gemini, kind: chat, upstream_model: past, input_price: 1, output_price: 1, shutdown: 2026-06-01}
  - {id: g/gone, provider: g, family: gemini, kind: chat, upstream_model: gone, input_price: 1, output_price: 1, shutdown: 2026-03-09, active: false}
  - {id: g/open, provider: g, family: gemini, kind: chat, upstream_model: open, input_price: 1, output_price: 1}
  - {id: g/hosted, provider: g, family: gemini, kind: chat, upstream_model: hosted, input_price: 1, output_price: 1, shutdown: 2026-06-01}
  - {id: a/direct, provider: a, family: anthropic, kind: chat, upstream_model: direct, input_price: 1, output_price: 1, shutdown: 2026-11-30}
  - {id: a/hosted, provider: a, family: anthropic, kind: chat, upstream_model: hosted, input_price: 1, output_price: 1, shutdown: 2026-11-30}
routes:
  - {model_id: g/far, kind: gemini-api}
  - {model_id: g/edge, kind: gemini-api}
  - {model_id: g/soon, kind: gemini-api}
  - {model_id: g/past, kind: gemini-api}
  - {model_id: g/past, kind: vertex, region: us-central1}
  - {model_id: g/gone, kind: gemini-api, active: false}
  - {model_id: g/open, kind: gemini-api}
  - {model_id: g/hosted, kind: gemini-api, active: false}
  - {model_id: g/hosted, kind: vertex-global, region: global}
  - {model_id: a/direct, kind: anthropic}
  - {model_id: a/hosted, kind: anthropic, active: false}
  - {model_id: a/hosted, kind: vertex-anthropic, region: us-east5}
"#,
        )
        .unwrap();
        let notices = shutdown_notices(&rows, day("2026-11-26"));
        let got: Vec<(&str, i64)> = notices
            .iter()
            .map(|n| (n.model.as_str(), n.days_left))
            .collect();
        // g/hosted and a/hosted are past their dates but their provider's routes are off.
        assert_eq!(
            got,
            [
                ("g/past", -178),
                ("a/direct", 4),
                ("g/soon", 5),
                ("g/edge", 30)
            ]
        );
        assert!(notices[0]
            .to_string()
            .contains("which shut it down on 2026-06-01"));
        assert_eq!(
            notices[2].to_string(),
            "model g/soon is shut down by its provider on 2026-12-01, in 5 days"
        );
        assert!(shutdown_notices(&rows, day("2026-11-25"))
            .iter()
            .all(|n| n.model != "g/edge"));
    }
}
