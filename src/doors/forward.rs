//! Which client headers a door passes to an upstream that speaks its dialect natively: for the
//! Messages door on a Claude route, `anthropic-version` as sent and the `anthropic-beta`s the
//! operator allows (`tollgate.providers.anthropic.betas`). The bank comes first: a beta that
//! changes what the upstream charges passes only when the model's catalog entry prices it.

use http::{HeaderName, HeaderValue};

use crate::catalog::Model;

/// A Messages-door request's Anthropic headers, as the client sent them (`anthropic-beta`
/// values joined with commas, whether sent in one header or several).
#[derive(Debug, Clone, Default)]
pub struct AnthropicHeaders {
    pub version: Option<String>,
    pub betas: String,
}

/// The headers to forward to `model`'s Claude routes: the version, and the betas both allowed
/// and priced, in the client's order, each once.
pub fn anthropic(
    client: &AnthropicHeaders,
    allowed: &[String],
    model: &Model,
) -> Vec<(HeaderName, HeaderValue)> {
    let mut out = Vec::with_capacity(2);
    let version = client.version.as_deref().map(HeaderValue::from_str);
    if let Some(Ok(version)) = version {
        out.push((HeaderName::from_static("anthropic-version"), version));
    }
    let mut betas: Vec<&str> = Vec::new();
    for beta in client.betas.split(',').map(str::trim) {
        let wanted = allowed.iter().any(|a| a == beta) && priced(beta, model);
        if wanted && !betas.contains(&beta) {
            betas.push(beta);
        }
    }
    if let Ok(value) = HeaderValue::from_str(&betas.join(",")) {
        if !betas.is_empty() {
            out.push((HeaderName::from_static("anthropic-beta"), value));
        }
    }
    out
}

/// Whether the catalog prices what `beta` makes the upstream charge: the 1M-token context is
/// billed at long-context rates, which the model must have; a faster, dearer mode has no
/// price in the catalog at all.
fn priced(beta: &str, model: &Model) -> bool {
    if beta.starts_with("context-1m") {
        model.pricing.long_context.is_some()
    } else {
        !beta.starts_with("fast-mode")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::LongContext;
    use crate::doors::messages::test_support::gemini_model;

    /// A model priced at one flat rate (its family does not matter here).
    fn flat() -> Model {
        let mut model = gemini_model();
        model.pricing.long_context = None;
        model
    }

    fn header_values(h: &[(HeaderName, HeaderValue)]) -> Vec<(String, String)> {
        h.iter()
            .map(|(n, v)| (n.to_string(), v.to_str().unwrap().to_owned()))
            .collect()
    }

    #[test]
    fn only_allowed_and_priced_betas_pass_in_the_clients_order() {
        let flat = flat();
        let mut tiered = flat.clone();
        tiered.pricing.long_context = Some(LongContext {
            above: 200_000,
            rates: tiered.pricing.base,
        });
        let allowed: Vec<String> = ["b-1", "context-1m-2025-08-07", "fast-mode-x", "b-2"]
            .map(String::from)
            .to_vec();
        let client = AnthropicHeaders {
            version: Some("2023-06-01".into()),
            betas: "b-2, unknown,context-1m-2025-08-07,fast-mode-x,b-1,b-2".into(),
        };
        assert_eq!(
            header_values(&anthropic(&client, &allowed, &flat)),
            [
                ("anthropic-version".into(), "2023-06-01".into()),
                ("anthropic-beta".into(), "b-2,b-1".into())
            ]
        );
        assert_eq!(
            header_values(&anthropic(&client, &allowed, &tiered))[1].1,
            "b-2,context-1m-2025-08-07,b-1"
        );
        let none = AnthropicHeaders::default();
        assert!(anthropic(&none, &allowed, &flat).is_empty());
    }
}
