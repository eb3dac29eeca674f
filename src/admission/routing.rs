//! Request-level routing, in OpenRouter's shapes: `models` (the models to fall back to, in
//! order) and `provider` (which of a model's routes may serve it, in what order, and at what
//! price). Both arrive as [`RoutingFields`], which the request model takes out of the body so
//! that no adapter forwards them; this module reads them into [`Asked`], and its [`Prefs`]
//! answer, route by route and model by model, what admission and failover may use.
//!
//! A route is named `<kind>` or `<kind>:<region>`: the catalog's route kinds (`gemini-api`,
//! `vertex`, `vertex-global`, `anthropic`, `vertex-anthropic`, `openai`), or OpenRouter's
//! names for the same providers (`google-vertex`: every Vertex kind; `google-ai-studio`:
//! `gemini-api`), case-insensitive; `:<region>` narrows to the routes of that region
//! (`vertex:europe-west4`). A name that is none of these matches no route. The lists are
//! bounded ([`MAX_MODELS`], [`MAX_NAMES`]): past that, a 400 — the body is the client's, and
//! each entry is work on every failover.
//!
//! Prices are per model in this catalog (all routes of a model bill alike), so `max_price`
//! leaves out models, not routes: a model is within it when its input price is at most
//! `prompt` and its output price at most `completion` (USD per 1M tokens, read from their
//! decimal text, never through a float), for its base tier and, when the request's body could
//! reach it, its long-context tier.

use std::borrow::Cow;
use std::fmt;

use serde::Deserialize;
use serde_json::value::RawValue;

use crate::api::request::{bounded_list, RoutingFields};
use crate::api::GatewayError;
use crate::catalog::{Model, Rates, Route, RouteKind};
use crate::money::{json_decimal_text, Price};

/// The most fallback models a request may list in `models`.
pub const MAX_MODELS: usize = 8;

/// The most route names each of `provider.order`, `only` and `ignore` may hold.
pub const MAX_NAMES: usize = 16;

/// What a request asked of routing beyond its `model`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Asked<'a> {
    /// `models`, in order, as the client named them (the request's `model` may be among them:
    /// admission tries each model once).
    pub models: Vec<Cow<'a, str>>,
    pub prefs: Prefs,
}

impl<'a> Asked<'a> {
    /// Reads the request's routing fields.
    pub fn read(fields: &RoutingFields<'a>) -> Result<Self, GatewayError> {
        let prefs = match fields.provider {
            Some(raw) if raw.get() != "null" => Prefs::read(raw)?,
            _ => Prefs::default(),
        };
        let models = match fields.models {
            Some(raw) if raw.get() != "null" => names(raw, MAX_MODELS, "models", "model ids")?,
            _ => Vec::new(),
        };
        if models.iter().any(|id| id.is_empty()) {
            return Err(GatewayError::invalid("models must not hold an empty id"));
        }
        Ok(Asked { models, prefs })
    }

    /// Whether the request asked anything of routing.
    pub fn is_plain(&self) -> bool {
        self.models.is_empty() && self.prefs == Prefs::default()
    }
}

/// `provider`: which routes may serve, and in what order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Prefs {
    /// These first, in this order (then the others, unless `allow_fallbacks` is false).
    pub order: Vec<RouteName>,
    /// Only these (`None`: every route).
    pub only: Option<Vec<RouteName>>,
    /// Never these.
    pub ignore: Vec<RouteName>,
    /// `false`: no route but those in `order`, or without `order` only the first chosen.
    pub allow_fallbacks: bool,
    pub max_price: MaxPrice,
}

impl Default for Prefs {
    fn default() -> Self {
        Prefs {
            order: Vec::new(),
            only: None,
            ignore: Vec::new(),
            allow_fallbacks: true,
            max_price: MaxPrice::default(),
        }
    }
}

impl Prefs {
    fn read(raw: &RawValue) -> Result<Self, GatewayError> {
        /// The fields read; any other is ignored, like other unsupported parameters.
        #[derive(Deserialize)]
        struct ProviderIn<'a> {
            #[serde(borrow, default)]
            order: Option<&'a RawValue>,
            #[serde(borrow, default)]
            only: Option<&'a RawValue>,
            #[serde(borrow, default)]
            ignore: Option<&'a RawValue>,
            #[serde(default)]
            allow_fallbacks: Option<bool>,
            #[serde(borrow, default)]
            max_price: Option<&'a RawValue>,
        }
        let p: ProviderIn<'_> = serde_json::from_str(raw.get())
            .map_err(|e| GatewayError::invalid(format!("invalid value for provider: {e}")))?;
        let list = |raw: Option<&RawValue>, field: &str| match raw {
            Some(raw) if raw.get() != "null" => {
                let what = format!("provider.{field}");
                let names = names(raw, MAX_NAMES, &what, "route names")?;
                Ok(Some(
                    names.iter().filter_map(|n| RouteName::parse(n)).collect(),
                ))
            }
            _ => Ok::<_, GatewayError>(None),
        };
        Ok(Prefs {
            order: list(p.order, "order")?.unwrap_or_default(),
            only: list(p.only, "only")?,
            ignore: list(p.ignore, "ignore")?.unwrap_or_default(),
            allow_fallbacks: p.allow_fallbacks.unwrap_or(true),
            max_price: match p.max_price {
                Some(raw) if raw.get() != "null" => MaxPrice::read(raw)?,
                _ => MaxPrice::default(),
            },
        })
    }

    /// Whether `route` may serve the request at all.
    pub fn allows(&self, route: &Route) -> bool {
        let named = |names: &[RouteName]| names.iter().any(|n| n.matches(route));
        self.only.as_deref().is_none_or(named)
            && !named(&self.ignore)
            && (self.allow_fallbacks || self.order.is_empty() || named(&self.order))
    }

    /// Where `route` stands in `order`: the place of the first name matching it, after all of
    /// them if none does (so without `order`, every route ranks alike).
    pub fn rank(&self, route: &Route) -> usize {
        (self.order.iter().position(|n| n.matches(route))).unwrap_or(self.order.len())
    }

    /// Whether a model's other routes may be tried after the first: not when fallbacks are
    /// off and no `order` lists the routes allowed.
    pub fn route_failover(&self) -> bool {
        self.allow_fallbacks || !self.order.is_empty()
    }

    /// Whether any route of `model` is allowed.
    pub fn allows_model(&self, model: &Model) -> bool {
        model.routes.iter().any(|r| self.allows(r))
    }
}

/// One name of `order`, `only` or `ignore`: route kinds, maybe a region.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouteName {
    kinds: &'static [RouteKind],
    region: Option<Box<str>>,
}

impl RouteName {
    /// `<kind>` or `<kind>:<region>` (module doc); `None`: it names no route kind.
    pub fn parse(text: &str) -> Option<Self> {
        let (name, region) = match text.split_once(':') {
            Some((name, region)) => (name, Some(region.trim())),
            None => (text, None),
        };
        let name = name.trim().to_ascii_lowercase();
        let kinds: &'static [RouteKind] = match name.as_str() {
            "google-vertex" => &[
                RouteKind::Vertex,
                RouteKind::VertexGlobal,
                RouteKind::VertexAnthropic,
            ],
            "google-ai-studio" | "gemini-api" => &[RouteKind::GeminiApi],
            "vertex" => &[RouteKind::Vertex],
            "vertex-global" => &[RouteKind::VertexGlobal],
            "anthropic" => &[RouteKind::Anthropic],
            "vertex-anthropic" => &[RouteKind::VertexAnthropic],
            "openai" => &[RouteKind::OpenAi],
            _ => return None,
        };
        Some(RouteName {
            kinds,
            region: region.map(Into::into),
        })
    }

    pub fn matches(&self, route: &Route) -> bool {
        self.kinds.contains(&route.kind)
            && self.region.as_deref().is_none_or(|want| {
                (route.region.as_deref()).is_some_and(|r| r.eq_ignore_ascii_case(want))
            })
    }
}

/// `provider.max_price`: USD per 1M tokens; an absent side is not capped.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MaxPrice {
    /// Input (`prompt`, or `input`).
    pub prompt: Option<Price>,
    /// Output (`completion`, or `output`).
    pub completion: Option<Price>,
}

impl MaxPrice {
    fn read(raw: &RawValue) -> Result<Self, GatewayError> {
        #[derive(Deserialize)]
        struct MaxPriceIn<'a> {
            #[serde(borrow, default)]
            prompt: Option<&'a RawValue>,
            #[serde(borrow, default)]
            completion: Option<&'a RawValue>,
            #[serde(borrow, default)]
            input: Option<&'a RawValue>,
            #[serde(borrow, default)]
            output: Option<&'a RawValue>,
        }
        let m: MaxPriceIn<'_> = serde_json::from_str(raw.get()).map_err(|e| {
            GatewayError::invalid(format!("invalid value for provider.max_price: {e}"))
        })?;
        Ok(MaxPrice {
            prompt: price(m.prompt.or(m.input), "prompt")?,
            completion: price(m.completion.or(m.output), "completion")?,
        })
    }

    /// Whether the request sets a cap.
    pub fn is_set(&self) -> bool {
        self.prompt.is_some() || self.completion.is_some()
    }

    /// Whether `model` is within the caps for a request of `body_len` bytes: its base tier,
    /// and its long-context tier when that many bytes (each at most a token) could reach it.
    pub fn admits(&self, model: &Model, body_len: u64) -> bool {
        let within = |rates: &Rates| {
            self.prompt.is_none_or(|cap| rates.input <= cap)
                && self.completion.is_none_or(|cap| rates.output <= cap)
        };
        let long = model.pricing.long_context.filter(|l| body_len > l.above);
        within(&model.pricing.base) && long.is_none_or(|l| within(&l.rates))
    }
}

/// For the refusal's message: `prompt 1.25, completion 10.0 USD per 1M tokens`.
impl fmt::Display for MaxPrice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let sides = [("prompt", self.prompt), ("completion", self.completion)];
        let mut first = true;
        for (name, cap) in sides {
            if let Some(cap) = cap {
                let sep = if first { "" } else { ", " };
                write!(f, "{sep}{name} {cap}")?;
                first = false;
            }
        }
        f.write_str(" USD per 1M tokens")
    }
}

/// One side of `max_price`, from its exact decimal text (a string or a number).
fn price(raw: Option<&RawValue>, side: &str) -> Result<Option<Price>, GatewayError> {
    let invalid = |e: String| {
        GatewayError::invalid(format!("invalid value for provider.max_price.{side}: {e}"))
    };
    let Some(raw) = raw else {
        return Ok(None);
    };
    let Some(text) = json_decimal_text(raw).map_err(invalid)? else {
        return Ok(None);
    };
    text.parse::<Price>()
        .map(Some)
        .map_err(|e| invalid(e.to_string()))
}

/// A list of at most `max` strings (`what` says what they are, for the refusal).
fn names<'a>(
    raw: &'a RawValue,
    max: usize,
    field: &str,
    what: &str,
) -> Result<Vec<Cow<'a, str>>, GatewayError> {
    let refused = || {
        GatewayError::invalid(format!(
            "invalid value for {field}: expected an array of at most {max} {what}"
        ))
    };
    let (kept, count) = bounded_list(raw, max).map_err(|_| refused())?;
    if count > max {
        return Err(refused());
    }
    kept.into_iter()
        .map(|raw| serde_json::from_str::<Cow<'a, str>>(raw.get()).map_err(|_| refused()))
        .collect()
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::net::SocketAddr;
    use std::sync::Arc;

    use super::*;
    use crate::api::{Operation, RawRequest};
    use crate::catalog::Snapshot;
    use crate::config::ProvidersConf;
    use crate::money::price_micro;
    use crate::store::CatalogRows;

    fn asked(body: &str) -> Result<Asked<'_>, GatewayError> {
        let req = RawRequest::parse(body.as_bytes(), Operation::Chat)?;
        Asked::read(&req.routing).map(|a| Asked {
            models: a
                .models
                .into_iter()
                .map(|m| m.into_owned().into())
                .collect(),
            prefs: a.prefs,
        })
    }

    fn prefs(provider: &str) -> Prefs {
        let body = format!(r#"{{"model":"m","messages":[1],"provider":{provider}}}"#);
        asked(&body).unwrap().prefs
    }

    fn refusal(body: &str) -> String {
        asked(body).unwrap_err().to_string()
    }

    const CATALOG: &str = r#"
profiles:
  - {name: g, spec: {forward: [temperature]}}
models:
  - {id: g/pro, provider: google, family: gemini, kind: chat, upstream_model: p, profile: g,
     input_price: 1.25, output_price: 10,
     long_context: {above: 200000, input_price: 2.5, output_price: 15}}
routes:
  - {model_id: g/pro, kind: gemini-api, base_url: "http://127.0.0.1:8"}
  - {model_id: g/pro, kind: vertex, region: us-central1, base_url: "http://127.0.0.1:8"}
  - {model_id: g/pro, kind: vertex, region: europe-west4, base_url: "http://127.0.0.1:8"}
  - {model_id: g/pro, kind: vertex-global, region: global, base_url: "http://127.0.0.1:8"}
"#;

    fn model() -> Arc<Model> {
        let rows: CatalogRows = serde_yaml::from_str(CATALOG).unwrap();
        let addr: SocketAddr = "127.0.0.1:8".parse().unwrap();
        let addrs = HashMap::from([(("127.0.0.1".to_owned(), 8), addr)]);
        let catalog = Snapshot::build(&rows, &ProvidersConf::default(), &addrs);
        catalog.model("g/pro").unwrap().clone()
    }

    /// The routes of `g/pro` `prefs` allows, as `kind` or `kind:region`.
    fn allowed(prefs: &Prefs) -> Vec<String> {
        model()
            .routes
            .iter()
            .filter(|r| prefs.allows(r))
            .map(|r| match (r.kind, r.region.as_deref()) {
                (RouteKind::Vertex, Some(region)) => format!("vertex:{region}"),
                (kind, _) => kind.as_str().to_owned(),
            })
            .collect()
    }

    #[test]
    fn models_are_read_in_order_bounded_and_strings() {
        let a = asked(r#"{"model":"a","models":["b","a","c"],"messages":[1]}"#).unwrap();
        assert_eq!(a.models, ["b", "a", "c"]);
        assert!(asked(r#"{"model":"a","models":null,"messages":[1]}"#)
            .unwrap()
            .is_plain());
        let eight: Vec<String> = (0..8).map(|i| format!("\"m{i}\"")).collect();
        let body = format!(
            r#"{{"model":"a","models":[{}],"messages":[1]}}"#,
            eight.join(",")
        );
        assert_eq!(asked(&body).unwrap().models.len(), 8);
        let body = format!(
            r#"{{"model":"a","models":[{},"m8"],"messages":[1]}}"#,
            eight.join(",")
        );
        let nine = refusal(&body);
        assert_eq!(
            nine,
            "invalid value for models: expected an array of at most 8 model ids"
        );
        for bad in [r#""b""#, "[1]", r#"["b",{}]"#, "{}"] {
            let body = format!(r#"{{"model":"a","models":{bad},"messages":[1]}}"#);
            assert!(
                refusal(&body).starts_with("invalid value for models"),
                "{bad}"
            );
        }
        let empty = refusal(r#"{"model":"a","models":["b",""],"messages":[1]}"#);
        assert_eq!(empty, "models must not hold an empty id");
    }

    #[test]
    fn a_hostile_models_list_is_refused_without_keeping_it() {
        let many = vec!["\"x\""; 100_000].join(",");
        let body = format!(r#"{{"model":"a","models":[{many}],"messages":[1]}}"#);
        assert!(refusal(&body).contains("at most 8"));
        let list = format!("[{many}]");
        let raw: &RawValue = serde_json::from_str(&list).unwrap();
        let (kept, count) = bounded_list(raw, 8).unwrap();
        assert_eq!((kept.len(), count), (8, 100_000));
    }

    #[test]
    fn provider_fields_are_read_and_unknown_ones_ignored() {
        let p = prefs(
            r#"{"order":["vertex:europe-west4","gemini-api"],"only":["google-vertex","GEMINI-API"],
                "ignore":["vertex-global"],"allow_fallbacks":false,
                "max_price":{"prompt":1.25,"completion":"10","request":1},
                "sort":"price","data_collection":"deny","quantizations":["fp8"]}"#,
        );
        assert_eq!(p.order.len(), 2);
        assert_eq!(p.only.as_ref().map(Vec::len), Some(2));
        assert!(!p.allow_fallbacks);
        assert_eq!(p.max_price.prompt, Some(price_micro(1_250_000)));
        assert_eq!(p.max_price.completion, Some(price_micro(10_000_000)));
        assert_eq!(prefs("null"), Prefs::default());
        assert_eq!(prefs("{}"), Prefs::default());
    }

    #[test]
    fn provider_values_of_the_wrong_shape_are_refused() {
        let body = |p: &str| format!(r#"{{"model":"m","messages":[1],"provider":{p}}}"#);
        let cases = [
            (r#""vertex""#, "invalid value for provider"),
            (r#"{"only":"vertex"}"#, "invalid value for provider.only"),
            (r#"{"order":[1]}"#, "invalid value for provider.order"),
            (r#"{"allow_fallbacks":"no"}"#, "invalid value for provider"),
            (
                r#"{"max_price":{"prompt":-1}}"#,
                "provider.max_price.prompt",
            ),
            (
                r#"{"max_price":{"completion":0.0000001}}"#,
                "provider.max_price.completion",
            ),
            (
                r#"{"max_price":{"prompt":1e-3}}"#,
                "provider.max_price.prompt",
            ),
            (
                r#"{"max_price":{"prompt":true}}"#,
                "provider.max_price.prompt",
            ),
        ];
        for (provider, names) in cases {
            let e = refusal(&body(provider));
            assert!(e.contains(names), "{provider}: {e}");
        }
        let many = vec!["\"vertex\""; MAX_NAMES + 1].join(",");
        let e = refusal(&body(&format!(r#"{{"ignore":[{many}]}}"#)));
        assert!(e.contains("at most 16 route names"), "{e}");
    }

    #[test]
    fn names_are_kinds_or_openrouters_providers_with_a_region_maybe() {
        let only = |names: &str| allowed(&prefs(&format!(r#"{{"only":{names}}}"#)));
        assert_eq!(only(r#"["gemini-api"]"#), ["gemini-api"]);
        assert_eq!(only(r#"["Google-AI-Studio"]"#), ["gemini-api"]);
        assert_eq!(
            only(r#"["vertex"]"#),
            ["vertex:us-central1", "vertex:europe-west4"]
        );
        assert_eq!(only(r#"["vertex:europe-west4"]"#), ["vertex:europe-west4"]);
        assert_eq!(
            only(r#"["google-vertex"]"#),
            ["vertex:us-central1", "vertex:europe-west4", "vertex-global"]
        );
        assert_eq!(only(r#"["google-vertex:global"]"#), ["vertex-global"]);
        assert!(only(r#"["vertx", "together"]"#).is_empty(), "no such kind");
        assert!(only("[]").is_empty());
    }

    #[test]
    fn only_ignore_and_order_without_fallbacks_narrow_the_routes() {
        let routes = |p: &str| allowed(&prefs(p));
        assert_eq!(routes("{}").len(), 4);
        assert_eq!(
            routes(r#"{"ignore":["gemini-api","vertex:us-central1"]}"#),
            ["vertex:europe-west4", "vertex-global"]
        );
        assert_eq!(
            routes(r#"{"only":["vertex"],"ignore":["vertex:us-central1"]}"#),
            ["vertex:europe-west4"],
            "ignore wins over only"
        );
        // `order` ranks; without fallbacks it also bounds.
        assert_eq!(routes(r#"{"order":["vertex-global"]}"#).len(), 4);
        assert_eq!(
            routes(r#"{"order":["vertex-global","gemini-api"],"allow_fallbacks":false}"#),
            ["gemini-api", "vertex-global"]
        );
        assert_eq!(routes(r#"{"allow_fallbacks":false}"#).len(), 4);
        let p = prefs(r#"{"order":["vertex-global","vertex:europe-west4"]}"#);
        let ranks: Vec<usize> = model().routes.iter().map(|r| p.rank(r)).collect();
        assert_eq!(ranks, [2, 2, 1, 0]);
        assert!(p.route_failover());
        assert!(!prefs(r#"{"allow_fallbacks":false}"#).route_failover());
        assert!(prefs(r#"{"allow_fallbacks":false,"order":["vertex"]}"#).route_failover());
    }

    #[test]
    fn max_price_admits_a_model_by_its_tiers_exactly() {
        let model = model(); // 1.25 / 10, above 200,000 tokens 2.5 / 15
        let cap = |p: &str| prefs(&format!(r#"{{"max_price":{p}}}"#)).max_price;
        let short = 1_000;
        assert!(cap(r#"{"prompt":1.25,"completion":10}"#).admits(&model, short));
        assert!(cap(r#"{"prompt":"1.25"}"#).admits(&model, short));
        assert!(cap(r#"{"input":1.25,"output":10.0}"#).admits(&model, short));
        assert!(!cap(r#"{"prompt":1.249999}"#).admits(&model, short));
        assert!(!cap(r#"{"completion":9.999999}"#).admits(&model, short));
        assert!(cap("{}").admits(&model, short) && !cap("{}").is_set());
        // A body that could reach the long-context tier is held to it too.
        let long = 200_001;
        assert!(!cap(r#"{"prompt":1.25,"completion":10}"#).admits(&model, long));
        assert!(cap(r#"{"prompt":2.5,"completion":15}"#).admits(&model, long));
        assert_eq!(
            cap(r#"{"prompt":0.5,"completion":2}"#).to_string(),
            "prompt 0.5, completion 2.0 USD per 1M tokens"
        );
    }
}
