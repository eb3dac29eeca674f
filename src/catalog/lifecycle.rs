//! Model lifecycles: providers announce a shutdown date for a model, serve it until then, and
//! answer 404 after. The catalog records the date (`shutdown`); the gateway warns at start for
//! every active model whose date is near or past, so an operator moves clients before the
//! provider does it for them.

use chrono::NaiveDate;

use crate::store::ModelRow;

/// How far ahead of a shutdown the gateway starts warning.
pub const WARN_DAYS: i64 = 30;

/// An active model at most [`WARN_DAYS`] from its shutdown date, or past it.
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
                "model {model} is still active but its provider shut it down on {day}: \
                 deactivate it or route it to a successor"
            ),
            0 => write!(
                f,
                "model {model} is shut down by its provider today ({day})"
            ),
            d => write!(
                f,
                "model {model} is shut down by its provider on {day}, in {d} days"
            ),
        }
    }
}

/// The notices of `models` on `today`, soonest shutdown first. Inactive models are already
/// retired here and need no notice.
pub fn shutdown_notices(models: &[ModelRow], today: NaiveDate) -> Vec<ShutdownNotice> {
    let mut notices: Vec<ShutdownNotice> = models
        .iter()
        .filter(|m| m.active)
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
    fn warns_within_thirty_days_and_after_but_not_for_retired_models() {
        let rows: CatalogRows = serde_yaml::from_str(
            r#"
models:
  - {id: g/far, provider: g, family: gemini, kind: chat, upstream_model: far, input_price: 1, output_price: 1, shutdown: 2027-05-07}
  - {id: g/edge, provider: g, family: gemini, kind: chat, upstream_model: edge, input_price: 1, output_price: 1, shutdown: 2026-12-26}
  - {id: g/soon, provider: g, family: gemini, kind: chat, upstream_model: soon, input_price: 1, output_price: 1, shutdown: 2026-12-01}
  - {id: g/past, provider: g, family: gemini, kind: chat, upstream_model: past, input_price: 1, output_price: 1, shutdown: 2026-06-01}
  - {id: g/gone, provider: g, family: gemini, kind: chat, upstream_model: gone, input_price: 1, output_price: 1, shutdown: 2026-03-09, active: false}
  - {id: g/open, provider: g, family: gemini, kind: chat, upstream_model: open, input_price: 1, output_price: 1}
"#,
        )
        .unwrap();
        let notices = shutdown_notices(&rows.models, day("2026-11-26"));
        let got: Vec<(&str, i64)> = notices
            .iter()
            .map(|n| (n.model.as_str(), n.days_left))
            .collect();
        assert_eq!(got, [("g/past", -178), ("g/soon", 5), ("g/edge", 30)]);
        assert!(notices[0]
            .to_string()
            .contains("shut it down on 2026-06-01"));
        assert_eq!(
            notices[1].to_string(),
            "model g/soon is shut down by its provider on 2026-12-01, in 5 days"
        );
        assert!(shutdown_notices(&rows.models, day("2026-11-25"))
            .iter()
            .all(|n| n.model != "g/edge"));
    }
}
