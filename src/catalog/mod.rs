//! The routing catalog: models, their prices and parameter profiles, and the routes that reach
//! them, held in memory as one immutable [`Snapshot`] that a refresher swaps atomically.
//!
//! Readers (`Catalog::snapshot`) never lock and never touch the database; the refresher
//! (`refresh`) reloads rows from the store every `catalog_refresh`, resolves route hosts
//! off the hot path, and publishes. The `/v1/models` body is rendered once per snapshot.

pub mod health;
pub mod import;
pub mod lifecycle;
pub mod profile;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;

use arc_swap::ArcSwap;
use bytes::Bytes;
use serde::Serialize;

pub use crate::config::endpoint::{Endpoint, EndpointError};
pub use profile::{Profile, Thinking};

use crate::config::ProvidersConf;
use crate::money::Price;
use crate::store::{CatalogRows, ModelRow, RouteRow, Store, StoreResult};
pub use health::{Healths, RouteHealth};

/// Which translator speaks to the model's upstream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Family {
    /// Upstreams that already speak the OpenAI wire format (OpenAI, vLLM, Ollama, llama.cpp).
    OpenAiCompat,
    /// Family A: Google Gemini (Developer API and Vertex AI).
    Gemini,
    /// Family B: Anthropic Claude (direct and Vertex AI).
    Anthropic,
}

impl Family {
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "openai" => Some(Self::OpenAiCompat),
            "gemini" => Some(Self::Gemini),
            "anthropic" => Some(Self::Anthropic),
            _ => None,
        }
    }
    pub fn as_str(self) -> &'static str {
        match self {
            Self::OpenAiCompat => "openai",
            Self::Gemini => "gemini",
            Self::Anthropic => "anthropic",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ModelKind {
    Chat,
    Embedding,
}

/// How a route reaches its upstream; decides URL shape and credentials.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RouteKind {
    OpenAi,
    GeminiApi,
    Vertex,
    VertexGlobal,
    Anthropic,
    VertexAnthropic,
}

impl RouteKind {
    pub const ALL: [RouteKind; 6] = [
        Self::OpenAi,
        Self::GeminiApi,
        Self::Vertex,
        Self::VertexGlobal,
        Self::Anthropic,
        Self::VertexAnthropic,
    ];
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "openai" => Self::OpenAi,
            "gemini-api" => Self::GeminiApi,
            "vertex" => Self::Vertex,
            "vertex-global" => Self::VertexGlobal,
            "anthropic" => Self::Anthropic,
            "vertex-anthropic" => Self::VertexAnthropic,
            _ => return None,
        })
    }
    pub fn as_str(self) -> &'static str {
        match self {
            Self::OpenAi => "openai",
            Self::GeminiApi => "gemini-api",
            Self::Vertex => "vertex",
            Self::VertexGlobal => "vertex-global",
            Self::Anthropic => "anthropic",
            Self::VertexAnthropic => "vertex-anthropic",
        }
    }
    /// Whether this kind calls the model's provider directly (Google's Gemini API, Anthropic's
    /// API, an OpenAI-compatible server) rather than a cloud that hosts it (Vertex), which
    /// publishes its own shutdown dates. A model's `shutdown` is its provider's date.
    pub fn is_providers_own(self) -> bool {
        matches!(self, Self::OpenAi | Self::GeminiApi | Self::Anthropic)
    }
    /// The family a route kind can carry.
    pub fn family(self) -> Family {
        match self {
            Self::OpenAi => Family::OpenAiCompat,
            Self::GeminiApi | Self::Vertex | Self::VertexGlobal => Family::Gemini,
            Self::Anthropic | Self::VertexAnthropic => Family::Anthropic,
        }
    }
    /// The configured default endpoint for this kind (`{region}` substituted).
    pub fn default_base(self, providers: &ProvidersConf, region: Option<&str>) -> String {
        let p = providers;
        let regional = || {
            p.vertex
                .base_url
                .replace("{region}", region.unwrap_or("us-central1"))
        };
        match self {
            Self::OpenAi => p.openai.base_url.clone(),
            Self::GeminiApi => p.gemini.base_url.clone(),
            Self::Anthropic => p.anthropic.base_url.clone(),
            Self::VertexGlobal => p.vertex.global_base_url.clone(),
            Self::Vertex | Self::VertexAnthropic if region == Some("global") => {
                p.vertex.global_base_url.clone()
            }
            Self::Vertex | Self::VertexAnthropic => regional(),
        }
    }
}

/// Which OpenAI API an `openai` route's upstream is called with: Chat Completions (every
/// OpenAI-compatible server) or, for a server that speaks it, the Responses API, to which the
/// Responses door passes its requests through untranslated (`api: responses` in the catalog).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum RouteApi {
    #[default]
    Chat,
    Responses,
}

impl RouteApi {
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "chat" => Some(Self::Chat),
            "responses" => Some(Self::Responses),
            _ => None,
        }
    }
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Chat => "chat",
            Self::Responses => "responses",
        }
    }
}

/// One tier's prices, USD per 1M tokens (storage: per 1M tokens per hour). A cache or audio
/// price left out bills those tokens at the tier's input price; no storage price, no storage
/// fee. Serialises as the specification's `/v1/models` `pricing` object (the first four).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Rates {
    pub input: Price,
    pub output: Price,
    pub cache_read: Option<Price>,
    pub cache_write: Option<Price>,
    #[serde(skip)]
    pub cache_write_1h: Option<Price>,
    #[serde(skip)]
    pub audio_input: Option<Price>,
    #[serde(skip)]
    pub cache_storage: Option<Price>,
}

impl Rates {
    /// Prices of input and output only (embeddings, tests).
    pub fn flat(input: Price, output: Price) -> Rates {
        Rates {
            input,
            output,
            cache_read: None,
            cache_write: None,
            cache_write_1h: None,
            audio_input: None,
            cache_storage: None,
        }
    }
    /// The dearest price any input token can be billed at.
    pub fn dearest_input(&self) -> Price {
        [self.cache_write, self.cache_write_1h, self.audio_input]
            .into_iter()
            .flatten()
            .fold(self.input, Price::max)
    }
}

/// A model's prices: the base tier and, optionally, a long-context tier that applies to the
/// whole request once its prompt exceeds a number of tokens (as Gemini 2.5/3 Pro and Claude
/// Sonnet's 1M-context mode bill).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Pricing {
    pub base: Rates,
    pub long_context: Option<LongContext>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LongContext {
    /// Prompts of more than this many tokens (cached ones included) fall in the tier.
    pub above: u64,
    pub rates: Rates,
}

impl Pricing {
    /// The tier a request whose prompt has `prompt_tokens` tokens is billed at.
    pub fn rates_for(&self, prompt_tokens: u64) -> &Rates {
        match &self.long_context {
            Some(long) if prompt_tokens > long.above => &long.rates,
            _ => &self.base,
        }
    }
}

/// One way to reach a model: a resolved upstream endpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    pub kind: RouteKind,
    pub endpoint: Endpoint,
    pub region: Option<String>,
    /// The upstream id on this route when it differs from the model's (Vertex's `name@date`).
    pub upstream_model: Option<String>,
    /// The upstream API the route calls (`Responses`: `openai` routes only).
    pub api: RouteApi,
    /// Resolved when the snapshot was built; `None` if resolution failed.
    pub addr: Option<SocketAddr>,
    /// Lower is preferred; routes of equal priority share the load.
    pub priority: i32,
    /// The route's share of that load (1–1000).
    pub weight: u32,
    /// This process's circuit breaker for the route (kept across refreshes).
    pub health: Arc<RouteHealth>,
}

#[derive(Debug, Clone)]
pub struct Model {
    pub id: Arc<str>,
    pub provider: String,
    pub family: Family,
    pub kind: ModelKind,
    pub upstream_model: String,
    /// Name of the parameter profile.
    pub profile_name: String,
    /// Which request fields this model forwards, and its thinking controls.
    pub profile: Arc<Profile>,
    pub pricing: Pricing,
    pub capabilities: Vec<String>,
    /// Other ids clients call the model by (`claude-sonnet-4-5-20250929` for
    /// `anthropic/claude-sonnet-4-5`); [`Snapshot::model`] resolves them to this model.
    pub aliases: Vec<String>,
    pub max_output_tokens: Option<u32>,
    /// The most input tokens a request may carry, if the catalog says.
    pub context_window: Option<u32>,
    /// Active routes, best (lowest priority number) first.
    pub routes: Vec<Route>,
}

impl Model {
    pub fn has_capability(&self, name: &str) -> bool {
        self.capabilities.iter().any(|c| c == name)
    }
}

/// An immutable view of the active catalog.
#[derive(Debug, Default)]
pub struct Snapshot {
    models: HashMap<Box<str>, Arc<Model>>,
    /// Each alias of an active model, to its model (never a key of `models`).
    aliases: HashMap<Box<str>, Arc<Model>>,
    /// What `GET /v1/models` lists (the models with a served route), by id.
    listed: Vec<Arc<Model>>,
    /// The rendered `GET /v1/models` body.
    models_json: Bytes,
}

impl Snapshot {
    /// The active model a client names, by its id or one of its aliases; an id wins over an
    /// alias. The model returned carries its own id (`Model::id`), whichever name was used.
    pub fn model(&self, id: &str) -> Option<&Arc<Model>> {
        self.models.get(id).or_else(|| self.aliases.get(id))
    }
    /// Every model, in no particular order (each once: aliases are not models).
    pub fn models(&self) -> impl Iterator<Item = &Arc<Model>> {
        self.models.values()
    }
    pub fn models_json(&self) -> Bytes {
        self.models_json.clone()
    }
    /// The `GET /v1/models` body of the listed models `keep` admits (a key's allowlist),
    /// rendered now.
    pub fn models_json_where(&self, keep: impl Fn(&Model) -> bool) -> Bytes {
        render_models_json(self.listed.iter().filter(|m| keep(m)))
    }
    pub fn len(&self) -> usize {
        self.models.len()
    }
    /// The kinds of every active route, each once.
    pub fn route_kinds(&self) -> Vec<RouteKind> {
        let mut kinds: Vec<RouteKind> = Vec::new();
        for route in self.models.values().flat_map(|m| &m.routes) {
            if !kinds.contains(&route.kind) {
                kinds.push(route.kind);
            }
        }
        kinds.sort_by_key(|k| k.as_str());
        kinds
    }
    pub fn is_empty(&self) -> bool {
        self.models.is_empty()
    }

    /// A snapshot of `rows` whose routes are all served, with fresh breakers, as of today
    /// (tests, tools).
    pub fn build(
        rows: &CatalogRows,
        providers: &ProvidersConf,
        addrs: &HashMap<(String, u16), SocketAddr>,
    ) -> Snapshot {
        let all = Served::every_kind();
        let today = chrono::Utc::now().date_naive();
        Snapshot::build_with(rows, providers, addrs, &Healths::default(), &all, today)
    }

    /// Builds a snapshot from store rows as of `today` (a route to a provider that has shut
    /// its model down is left out: [`lifecycle::shut_down`]); hosts must already be resolved
    /// into `addrs`. Rows that cannot be understood are skipped with a warning rather than
    /// hiding the whole catalog. `/v1/models` lists the models with a route of a `served` kind.
    pub fn build_with(
        rows: &CatalogRows,
        providers: &ProvidersConf,
        addrs: &HashMap<(String, u16), SocketAddr>,
        healths: &Healths,
        served: &Served,
        today: chrono::NaiveDate,
    ) -> Snapshot {
        let mut profiles = HashMap::new();
        for p in &rows.profiles {
            match serde_json::from_value::<Profile>(p.spec.clone()) {
                Ok(profile) => {
                    profiles.insert(p.name.as_str(), Arc::new(profile));
                }
                Err(e) => tracing::warn!(profile = %p.name, "profile skipped: {e}"),
            }
        }
        let mut models = HashMap::new();
        for row in rows.models.iter().filter(|m| m.active) {
            match model_from_row(
                row,
                &rows.routes,
                &profiles,
                providers,
                addrs,
                healths,
                today,
            ) {
                Ok(model) => {
                    models.insert(row.id.clone().into_boxed_str(), Arc::new(model));
                }
                Err(why) => tracing::warn!(model = %row.id, "catalog row skipped: {why}"),
            }
        }
        let aliases = aliases_of(&models);
        let mut listed: Vec<Arc<Model>> = models
            .values()
            .filter(|m| m.routes.iter().any(|r| served.serves(r.kind)))
            .cloned()
            .collect();
        listed.sort_by(|a, b| a.id.cmp(&b.id));
        let models_json = render_models_json(listed.iter());
        Snapshot {
            models,
            aliases,
            listed,
            models_json,
        }
    }
}

/// Every alias of `models`, to its model. An alias that is also a model's id is left to the
/// id, and one claimed by two models goes to the first by id, each with a warning: the import
/// refuses both, so only rows written around it (two imports racing) can hold them.
fn aliases_of(models: &HashMap<Box<str>, Arc<Model>>) -> HashMap<Box<str>, Arc<Model>> {
    let mut by_id: Vec<&Arc<Model>> = models.values().filter(|m| !m.aliases.is_empty()).collect();
    by_id.sort_by(|a, b| a.id.cmp(&b.id));
    let mut aliases: HashMap<Box<str>, Arc<Model>> = HashMap::new();
    for model in by_id {
        for alias in &model.aliases {
            if models.contains_key(alias.as_str()) {
                tracing::warn!(model = %model.id, alias, "alias skipped: it is a model's id");
            } else if let Some(first) = aliases.get(alias.as_str()) {
                if !Arc::ptr_eq(first, model) {
                    tracing::warn!(
                        model = %model.id, alias, owner = %first.id,
                        "alias skipped: it is already an alias of another model"
                    );
                }
            } else {
                aliases.insert(alias.as_str().into(), Arc::clone(model));
            }
        }
    }
    aliases
}

fn model_from_row(
    row: &ModelRow,
    routes: &[RouteRow],
    profiles: &HashMap<&str, Arc<Profile>>,
    providers: &ProvidersConf,
    addrs: &HashMap<(String, u16), SocketAddr>,
    healths: &Healths,
    today: chrono::NaiveDate,
) -> Result<Model, String> {
    let family = Family::parse(&row.family).ok_or(format!("unknown family {:?}", row.family))?;
    let kind = match row.kind.as_str() {
        "chat" => ModelKind::Chat,
        "embedding" => ModelKind::Embedding,
        other => return Err(format!("unknown kind {other:?}")),
    };
    // OpenAI-compatible upstreams get the request as sent: no profile applies.
    let profile = match family {
        Family::OpenAiCompat => Arc::default(),
        _ => profiles
            .get(row.profile.as_str())
            .cloned()
            .ok_or(format!("unknown profile {:?}", row.profile))?,
    };
    let mut own: Vec<&RouteRow> = routes
        .iter()
        .filter(|r| r.model_id == row.id && r.active)
        .collect();
    own.sort_by_key(|r| r.priority);
    let mut out = Vec::with_capacity(own.len());
    for r in own {
        let kind = RouteKind::parse(&r.kind).ok_or(format!("unknown route kind {:?}", r.kind))?;
        if lifecycle::shut_down(row, kind, today) {
            continue;
        }
        if kind.family() != family {
            return Err(format!(
                "route {} cannot carry family {}",
                r.kind, row.family
            ));
        }
        let api = RouteApi::parse(&r.api).ok_or(format!("unknown route api {:?}", r.api))?;
        if api == RouteApi::Responses && family != Family::OpenAiCompat {
            return Err(format!("route {} cannot call the Responses API", r.kind));
        }
        let base = match &r.base_url {
            Some(url) => url.clone(),
            None => kind.default_base(providers, r.region.as_deref()),
        };
        let endpoint = Endpoint::parse(&base).map_err(|e| format!("route {}: {e}", r.kind))?;
        let addr = addrs.get(&(endpoint.host.clone(), endpoint.port)).copied();
        let region = r.region.as_deref().unwrap_or("");
        // A Responses route has its own breaker: a server may serve one API and not the other.
        let api_key = match api {
            RouteApi::Chat => "",
            RouteApi::Responses => "|responses",
        };
        let health = healths.of(format!("{}|{}|{region}|{base}{api_key}", row.id, r.kind));
        out.push(Route {
            kind,
            endpoint,
            region: r.region.clone(),
            upstream_model: r.upstream_model.clone(),
            api,
            addr,
            priority: r.priority,
            weight: u32::try_from(r.weight).unwrap_or(1).max(1),
            health,
        });
    }
    Ok(Model {
        id: row.id.as_str().into(),
        provider: row.provider.clone(),
        family,
        kind,
        upstream_model: row.upstream_model.clone(),
        profile_name: row.profile.clone(),
        profile,
        pricing: pricing_of(row),
        capabilities: row.capabilities.clone(),
        aliases: row.aliases.clone(),
        max_output_tokens: row.max_output_tokens,
        context_window: row.context_window,
        routes: out,
    })
}

fn pricing_of(row: &ModelRow) -> Pricing {
    let base = Rates {
        input: row.input_price,
        output: row.output_price,
        cache_read: row.cache_read_price,
        cache_write: row.cache_write_price,
        cache_write_1h: row.cache_write_1h_price,
        audio_input: row.audio_input_price,
        cache_storage: row.cache_storage_price,
    };
    let long_context = row.long_context.as_ref().map(|l| LongContext {
        above: l.above,
        rates: Rates {
            input: l.input_price,
            output: l.output_price,
            cache_read: l.cache_read_price,
            cache_write: l.cache_write_price,
            cache_write_1h: l.cache_write_1h_price,
            audio_input: None,
            cache_storage: base.cache_storage,
        },
    });
    Pricing { base, long_context }
}

/// `created` is the same constant for every entry (the specification).
const MODELS_CREATED: i64 = 1_704_067_200;

/// The `GET /v1/models` body listing `models` (in the order given).
fn render_models_json<'a>(models: impl Iterator<Item = &'a Arc<Model>>) -> Bytes {
    #[derive(Serialize)]
    struct Entry<'a> {
        id: &'a str,
        object: &'static str,
        created: i64,
        owned_by: &'a str,
        pricing: &'a Rates,
    }
    #[derive(Serialize)]
    struct List<'a> {
        object: &'static str,
        data: Vec<Entry<'a>>,
    }
    let data: Vec<Entry> = models
        .map(|m| Entry {
            id: &m.id,
            object: "model",
            created: MODELS_CREATED,
            owned_by: &m.provider,
            pricing: &m.pricing.base,
        })
        .collect();
    let list = List {
        object: "list",
        data,
    };
    serde_json::to_vec(&list)
        .map(Bytes::from)
        .unwrap_or_default()
}

/// The route kinds this gateway has credentials for: `/v1/models` lists only the models one of
/// whose active routes is of such a kind.
#[derive(Debug, Clone)]
pub struct Served(Vec<RouteKind>);

impl Served {
    pub fn new(kinds: impl IntoIterator<Item = RouteKind>) -> Self {
        Served(kinds.into_iter().collect())
    }
    pub fn every_kind() -> Self {
        Served(RouteKind::ALL.to_vec())
    }
    pub fn serves(&self, kind: RouteKind) -> bool {
        self.0.contains(&kind)
    }
}

/// The shared handle: wait-free reads, atomic publication.
pub struct Catalog {
    current: ArcSwap<Snapshot>,
}

impl Catalog {
    pub fn new(snapshot: Snapshot) -> Self {
        Self {
            current: ArcSwap::from_pointee(snapshot),
        }
    }
    /// One load per request; every phase of that request then sees the same version.
    pub fn snapshot(&self) -> Arc<Snapshot> {
        self.current.load_full()
    }
    pub fn publish(&self, next: Snapshot) {
        self.current.store(Arc::new(next));
    }
}

/// Every distinct (host, port) the rows' routes point at.
fn hosts_of(rows: &CatalogRows, providers: &ProvidersConf) -> Vec<(String, u16)> {
    let mut hosts: Vec<(String, u16)> = rows
        .routes
        .iter()
        .filter_map(|r| {
            let kind = RouteKind::parse(&r.kind)?;
            let base = r
                .base_url
                .clone()
                .unwrap_or_else(|| kind.default_base(providers, r.region.as_deref()));
            Endpoint::parse(&base).ok().map(|e| (e.host, e.port))
        })
        .collect();
    hosts.sort();
    hosts.dedup();
    hosts
}

/// Host resolution for routes, off the hot path: IP literals need no lookup; names are looked
/// up concurrently with a timeout (a stalled resolver must not stall the follower) and cached
/// for `RESOLVE_TTL`; a failed lookup keeps the previous address, if any.
#[derive(Debug, Default)]
pub struct Resolver {
    cache: HashMap<(String, u16), (Option<SocketAddr>, std::time::Instant)>,
}

const RESOLVE_TTL: std::time::Duration = std::time::Duration::from_secs(60);
const RESOLVE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);

impl Resolver {
    /// Addresses for every route host of `rows`.
    pub async fn resolve(
        &mut self,
        rows: &CatalogRows,
        providers: &ProvidersConf,
    ) -> HashMap<(String, u16), SocketAddr> {
        let now = std::time::Instant::now();
        let stale: Vec<(String, u16)> = hosts_of(rows, providers)
            .into_iter()
            .filter(|k| {
                self.cache
                    .get(k)
                    .is_none_or(|(_, at)| now.duration_since(*at) > RESOLVE_TTL)
            })
            .collect();
        let lookups = stale.iter().map(|(host, port)| async move {
            if let Ok(ip) = host.parse::<std::net::IpAddr>() {
                return Some(SocketAddr::new(ip, *port));
            }
            let found = tokio::time::timeout(
                RESOLVE_TIMEOUT,
                tokio::net::lookup_host((host.as_str(), *port)),
            )
            .await;
            found.ok().and_then(Result::ok).and_then(|mut it| it.next())
        });
        let results = futures_util::future::join_all(lookups).await;
        for (key, found) in stale.into_iter().zip(results) {
            if found.is_none() {
                tracing::warn!(host = %key.0, port = key.1, "cannot resolve upstream host");
            }
            let previous = self.cache.get(&key).and_then(|(a, _)| *a);
            self.cache.insert(key, (found.or(previous), now));
        }
        self.cache
            .iter()
            .filter_map(|(k, (a, _))| Some((k.clone(), (*a)?)))
            .collect()
    }
}

/// What turns the store's catalog rows into snapshots, at start and on every refresh.
pub struct Loader {
    pub providers: ProvidersConf,
    pub served: Served,
    /// Route breakers, kept from one snapshot to the next.
    pub healths: Healths,
    resolver: Resolver,
}

impl Loader {
    pub fn new(providers: ProvidersConf, served: Served, healths: Healths) -> Self {
        Loader {
            providers,
            served,
            healths,
            resolver: Resolver::default(),
        }
    }

    /// Loads the catalog from the store and builds a snapshot.
    pub async fn load(&mut self, store: &dyn Store) -> StoreResult<Snapshot> {
        let rows = store.load_catalog().await?;
        let addrs = self.resolver.resolve(&rows, &self.providers).await;
        Ok(Snapshot::build_with(
            &rows,
            &self.providers,
            &addrs,
            &self.healths,
            &self.served,
            chrono::Utc::now().date_naive(),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn day(s: &str) -> chrono::NaiveDate {
        s.parse().unwrap()
    }

    fn rows() -> CatalogRows {
        serde_yaml::from_str(
            r#"
profiles:
  - {name: g, spec: {forward: [temperature]}}
models:
  - {id: acme/llama, provider: acme, family: openai, kind: chat, upstream_model: llama-3,
     input_price: 0.5, output_price: "1.5"}
  - {id: google/x, provider: google, family: gemini, kind: chat, upstream_model: x, profile: g,
     input_price: 1.25, output_price: 10, cache_read_price: 0.125}
  - {id: off/y, provider: off, family: openai, kind: chat, upstream_model: y,
     input_price: 1, output_price: 1, active: false}
  - {id: bad/z, provider: bad, family: cobol, kind: chat, upstream_model: z,
     input_price: 1, output_price: 1}
routes:
  - {model_id: acme/llama, kind: openai, base_url: "http://127.0.0.1:9/v1", priority: 2}
  - {model_id: acme/llama, kind: openai, base_url: "http://127.0.0.1:8/v1", priority: 1}
  - {model_id: google/x, kind: vertex, region: europe-west4}
"#,
        )
        .unwrap()
    }

    #[test]
    fn models_are_listed_only_with_a_route_this_gateway_can_use() {
        let ids = |served: Served| {
            let snap = Snapshot::build_with(
                &rows(),
                &ProvidersConf::default(),
                &HashMap::new(),
                &Healths::default(),
                &served,
                day("2026-12-07"),
            );
            let list: serde_json::Value = serde_json::from_slice(&snap.models_json()).unwrap();
            let ids: Vec<String> = list["data"]
                .as_array()
                .unwrap()
                .iter()
                .map(|m| m["id"].as_str().unwrap().to_owned())
                .collect();
            (ids, snap.len())
        };
        let (listed, known) = ids(Served::new([RouteKind::OpenAi]));
        assert_eq!(
            listed,
            ["acme/llama"],
            "no Vertex credentials: google/x is hidden"
        );
        assert_eq!(known, 2, "but still known (its requests say why they fail)");
        let (listed, _) = ids(Served::every_kind());
        assert_eq!(listed, ["acme/llama", "google/x"]);
        let snap = Snapshot::build(&rows(), &ProvidersConf::default(), &HashMap::new());
        let everything = snap.models_json_where(|_| true);
        assert_eq!(
            everything,
            snap.models_json(),
            "the same body, rendered again"
        );
        let google: serde_json::Value =
            serde_json::from_slice(&snap.models_json_where(|m| m.id.starts_with("google/")))
                .unwrap();
        assert_eq!(google["object"], "list");
        assert_eq!(google["data"].as_array().unwrap().len(), 1);
        assert_eq!(google["data"][0]["id"], "google/x");
    }

    #[test]
    fn a_refresh_keeps_each_routes_breaker() {
        let healths = Healths::default();
        let build = || {
            Snapshot::build_with(
                &rows(),
                &ProvidersConf::default(),
                &HashMap::new(),
                &healths,
                &Served::every_kind(),
                day("2026-12-07"),
            )
        };
        let (a, b) = (build(), build());
        let routes = |s: &Snapshot| s.model("acme/llama").unwrap().routes.clone();
        let (ra, rb) = (routes(&a), routes(&b));
        assert!(Arc::ptr_eq(&ra[0].health, &rb[0].health));
        assert!(!Arc::ptr_eq(&ra[0].health, &ra[1].health), "one per route");
    }

    #[test]
    fn from_its_shutdown_day_a_model_is_no_longer_sent_to_its_provider() {
        let rows: CatalogRows = serde_yaml::from_str(
            r#"
profiles:
  - {name: g, spec: {forward: []}}
models:
  - {id: g/moved, provider: google, family: gemini, kind: chat, upstream_model: m, profile: g,
     input_price: 1, output_price: 1, shutdown: 2026-12-01}
  - {id: g/gone, provider: google, family: gemini, kind: chat, upstream_model: n, profile: g,
     input_price: 1, output_price: 1, shutdown: 2026-12-01}
  - {id: a/open, provider: anthropic, family: anthropic, kind: chat, upstream_model: o,
     profile: g, input_price: 1, output_price: 1}
routes:
  - {model_id: g/moved, kind: gemini-api, priority: 0}
  - {model_id: g/moved, kind: vertex, region: us-central1, priority: 10}
  - {model_id: g/gone, kind: gemini-api}
  - {model_id: a/open, kind: anthropic}
"#,
        )
        .unwrap();
        let routes = |today: &str| {
            let snap = Snapshot::build_with(
                &rows,
                &ProvidersConf::default(),
                &HashMap::new(),
                &Healths::default(),
                &Served::every_kind(),
                day(today),
            );
            let kinds = |id: &str| -> Vec<&str> {
                let model = snap.model(id).unwrap();
                model.routes.iter().map(|r| r.kind.as_str()).collect()
            };
            (kinds("g/moved"), kinds("g/gone"), kinds("a/open"))
        };
        assert_eq!(
            routes("2026-11-30"),
            (
                vec!["gemini-api", "vertex"],
                vec!["gemini-api"],
                vec!["anthropic"]
            )
        );
        // From the day itself: Vertex keeps the model; with no other route it answers nowhere.
        for today in ["2026-12-01", "2027-01-01"] {
            assert_eq!(
                routes(today),
                (vec!["vertex"], vec![], vec!["anthropic"]),
                "{today}"
            );
        }
    }

    #[test]
    fn builds_active_models_with_ordered_routes() {
        let snap = Snapshot::build(&rows(), &ProvidersConf::default(), &HashMap::new());
        assert_eq!(
            snap.len(),
            2,
            "inactive and unknown-family rows are left out"
        );
        let m = snap.model("acme/llama").unwrap();
        assert_eq!(m.routes[0].endpoint.port, 8, "lowest priority number first");
        let g = snap.model("google/x").unwrap();
        assert_eq!(
            g.routes[0].endpoint.host,
            "europe-west4-aiplatform.googleapis.com"
        );
        assert!(g.routes[0].endpoint.tls);
        assert!(
            g.profile.forwards("temperature"),
            "the named profile is attached"
        );
    }

    #[test]
    fn a_route_says_which_api_it_calls_and_has_its_own_breaker() {
        let mut rows = rows();
        let mut responses = rows.routes[1].clone();
        responses.api = "responses".into();
        rows.routes.push(responses);
        let snap = Snapshot::build(&rows, &ProvidersConf::default(), &HashMap::new());
        let routes = &snap.model("acme/llama").unwrap().routes;
        let apis: Vec<RouteApi> = routes.iter().map(|r| r.api).collect();
        assert_eq!(apis, [RouteApi::Chat, RouteApi::Responses, RouteApi::Chat]);
        assert_eq!(routes[0].endpoint, routes[1].endpoint, "the same server");
        assert!(
            !Arc::ptr_eq(&routes[0].health, &routes[1].health),
            "a server may serve one API and not the other"
        );
        // Rows written around the import: a Responses route of another family, an unknown api.
        for (model, api) in [("google/x", "responses"), ("acme/llama", "completions")] {
            let mut bad = rows.clone();
            bad.routes
                .iter_mut()
                .filter(|r| r.model_id == model)
                .for_each(|r| r.api = api.into());
            let snap = Snapshot::build(&bad, &ProvidersConf::default(), &HashMap::new());
            assert!(snap.model(model).is_none(), "{model} {api}: skipped");
        }
    }

    /// Models with aliases: `acme/b` claims `acme/a`'s id and shares an alias with `acme/a`
    /// (rows only a race between imports could write), `off/y` is inactive.
    fn aliased_rows() -> CatalogRows {
        serde_yaml::from_str(
            r#"
models:
  - {id: acme/a, provider: acme, family: openai, kind: chat, upstream_model: a-1,
     input_price: 1, output_price: 1, aliases: [a, a-20250101, shared]}
  - {id: acme/b, provider: acme, family: openai, kind: chat, upstream_model: b-1,
     input_price: 1, output_price: 1, aliases: [b, acme/a, shared]}
  - {id: off/y, provider: off, family: openai, kind: chat, upstream_model: y,
     input_price: 1, output_price: 1, active: false, aliases: [y]}
routes:
  - {model_id: acme/a, kind: openai, base_url: "http://127.0.0.1:9/v1"}
  - {model_id: acme/b, kind: openai, base_url: "http://127.0.0.1:8/v1"}
"#,
        )
        .unwrap()
    }

    #[test]
    fn an_alias_resolves_to_its_model() {
        let snap = Snapshot::build(&aliased_rows(), &ProvidersConf::default(), &HashMap::new());
        let id_of = |name: &str| snap.model(name).map(|m| m.id.to_string());
        assert_eq!(id_of("acme/a").as_deref(), Some("acme/a"));
        assert_eq!(id_of("a").as_deref(), Some("acme/a"));
        assert_eq!(id_of("a-20250101").as_deref(), Some("acme/a"));
        assert_eq!(id_of("b").as_deref(), Some("acme/b"));
        assert!(
            Arc::ptr_eq(snap.model("a").unwrap(), snap.model("acme/a").unwrap()),
            "one model, two names"
        );
        assert_eq!(
            snap.model("a").unwrap().aliases,
            ["a", "a-20250101", "shared"]
        );
        assert_eq!(id_of("y"), None, "an inactive model's aliases name nothing");
        assert_eq!(id_of("A"), None, "names are exact");
        assert_eq!(id_of("acme/c"), None);
        assert_eq!(snap.len(), 2, "aliases are not models");
        assert_eq!(snap.models().count(), 2);
    }

    #[test]
    fn an_id_wins_over_an_alias_and_the_first_model_keeps_a_shared_alias() {
        let snap = Snapshot::build(&aliased_rows(), &ProvidersConf::default(), &HashMap::new());
        let id_of = |name: &str| snap.model(name).map(|m| m.id.to_string());
        assert_eq!(
            id_of("acme/a").as_deref(),
            Some("acme/a"),
            "acme/b's alias acme/a is acme/a's id"
        );
        assert_eq!(
            id_of("shared").as_deref(),
            Some("acme/a"),
            "the first model by id"
        );
    }

    #[test]
    fn models_json_lists_ids_only() {
        let snap = Snapshot::build(&aliased_rows(), &ProvidersConf::default(), &HashMap::new());
        let v: serde_json::Value = serde_json::from_slice(&snap.models_json()).unwrap();
        let ids: Vec<&str> = v["data"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["id"].as_str().unwrap())
            .collect();
        assert_eq!(ids, ["acme/a", "acme/b"]);
        let mut keys: Vec<&String> = v["data"][0].as_object().unwrap().keys().collect();
        keys.sort();
        assert_eq!(keys, ["created", "id", "object", "owned_by", "pricing"]);
    }

    #[test]
    fn models_json_has_the_specified_shape() {
        let snap = Snapshot::build(&rows(), &ProvidersConf::default(), &HashMap::new());
        let v: serde_json::Value = serde_json::from_slice(&snap.models_json()).unwrap();
        assert_eq!(v["object"], "list");
        let google = &v["data"][1];
        assert_eq!(google["id"], "google/x");
        assert_eq!(google["object"], "model");
        assert_eq!(google["created"], 1704067200);
        assert_eq!(google["owned_by"], "google");
        assert_eq!(google["pricing"]["input"], 1.25);
        assert_eq!(google["pricing"]["cache_read"], 0.125);
        assert!(google["pricing"]["cache_write"].is_null());
        let text = String::from_utf8(snap.models_json().to_vec()).unwrap();
        assert!(
            text.contains(r#""output":1.5,"#),
            "exact decimal, not 1.5000001: {text}"
        );
    }
}
