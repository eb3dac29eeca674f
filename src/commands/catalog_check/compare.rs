//! Catalog drift as a pure function: the catalog's rows and what each surface's model listing
//! showed in, the report out. No I/O here (`listing.rs` asks the providers).
//!
//! Ids are compared the way each surface accepts calls: a `models/` or `publishers/x/models/`
//! prefix is ignored; the Anthropic API lists dated ids (`claude-sonnet-4-5-20250929`) and
//! takes the undated alias too, so an alias counts as listed; Vertex lists a model undated
//! with a `versionId`, and where that version is a date (`20250929`) a call must carry it
//! (`claude-sonnet-4-5@20250929`): an undated id is missing there, as Vertex 404s it.

use std::collections::{BTreeMap, BTreeSet, HashSet};

use serde::Serialize;

use crate::catalog::RouteKind;
use crate::config::ProvidersConf;
use crate::store::{CatalogRows, ModelRow, RouteRow};

/// The kinds of model listing a route is checked against.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum SurfaceKind {
    /// Gemini Developer API: `GET /v1beta/models`.
    GeminiApi,
    /// Vertex AI, publisher `google` (routes `vertex` and `vertex-global`).
    VertexGoogle,
    /// Anthropic API: `GET /v1/models`.
    Anthropic,
    /// Vertex AI, publisher `anthropic`.
    VertexAnthropic,
}

impl SurfaceKind {
    /// The listing a route kind's calls go to; `None`: not checked (OpenAI-compatible).
    pub fn of(kind: RouteKind) -> Option<Self> {
        match kind {
            RouteKind::OpenAi => None,
            RouteKind::GeminiApi => Some(Self::GeminiApi),
            RouteKind::Vertex | RouteKind::VertexGlobal => Some(Self::VertexGoogle),
            RouteKind::Anthropic => Some(Self::Anthropic),
            RouteKind::VertexAnthropic => Some(Self::VertexAnthropic),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::GeminiApi => "gemini-api",
            Self::VertexGoogle => "vertex-google",
            Self::Anthropic => "anthropic",
            Self::VertexAnthropic => "vertex-anthropic",
        }
    }

    fn is_vertex(self) -> bool {
        matches!(self, Self::VertexGoogle | Self::VertexAnthropic)
    }
}

/// One listing endpoint: a surface at one base URL (each Vertex region is its own host).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct Surface {
    pub kind: SurfaceKind,
    pub base_url: String,
}

/// One model as a listing showed it: its `name` (Gemini `models/x`, Vertex
/// `publishers/p/models/x`) or `id` (Anthropic), and Vertex's `versionId`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listed {
    pub name: String,
    pub version: Option<String>,
}

/// What asking one surface came to: its models, or why it was not checked.
pub type Listing = Result<Vec<Listed>, String>;

/// The upstream id a route calls: its own `upstream_model`, else the model's.
pub fn upstream_id<'a>(model: &'a ModelRow, route: &'a RouteRow) -> &'a str {
    route
        .upstream_model
        .as_deref()
        .unwrap_or(&model.upstream_model)
}

/// The listing a route is checked against, or why it is not checked.
pub fn surface_of(route: &RouteRow, providers: &ProvidersConf) -> Result<Surface, String> {
    let kind = RouteKind::parse(&route.kind)
        .ok_or_else(|| format!("unknown route kind {:?}", route.kind))?;
    let surface = SurfaceKind::of(kind)
        .ok_or_else(|| "OpenAI-compatible routes have no listing to check".to_owned())?;
    let base_url = match &route.base_url {
        Some(url) => url.clone(),
        None => kind.default_base(providers, route.region.as_deref()),
    };
    Ok(Surface {
        kind: surface,
        base_url: base_url.trim_end_matches('/').to_owned(),
    })
}

/// Every listing the catalog's routes need, each once.
pub fn surfaces(rows: &CatalogRows, providers: &ProvidersConf) -> BTreeSet<Surface> {
    rows.routes
        .iter()
        .filter_map(|r| surface_of(r, providers).ok())
        .collect()
}

/// `id` without a `models/` or `publishers/x/models/` prefix.
pub fn bare(id: &str) -> &str {
    if let Some(rest) = id.strip_prefix("publishers/") {
        if let Some((_, model)) = rest.split_once("/models/") {
            return model;
        }
    }
    id.strip_prefix("models/").unwrap_or(id)
}

fn is_date(s: &str) -> bool {
    s.len() == 8 && s.bytes().all(|b| b.is_ascii_digit())
}

/// `id` without its `@version` or `-YYYYMMDD` suffix.
fn stem(id: &str) -> &str {
    if let Some((head, _)) = id.split_once('@') {
        return head;
    }
    match id.rsplit_once('-') {
        Some((head, tail)) if is_date(tail) => head,
        _ => id,
    }
}

/// The ids a call on `kind` may use for a listed model, the listed form first.
pub fn callable_ids(kind: SurfaceKind, listed: &Listed) -> Vec<String> {
    let name = bare(&listed.name);
    match kind {
        SurfaceKind::GeminiApi => vec![name.to_owned()],
        SurfaceKind::Anthropic if stem(name) != name => {
            vec![name.to_owned(), stem(name).to_owned()]
        }
        SurfaceKind::Anthropic => vec![name.to_owned()],
        _ if name.contains('@') => vec![name.to_owned()],
        _ => match listed.version.as_deref() {
            Some(v) if is_date(v) => vec![format!("{name}@{v}")],
            _ => vec![name.to_owned()],
        },
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Listed,
    Missing,
    Unchecked,
}

/// One catalog route, checked.
#[derive(Debug, Clone, Serialize)]
pub struct RouteCheck {
    pub model: String,
    pub model_active: bool,
    pub route: String,
    pub region: Option<String>,
    pub route_active: bool,
    pub upstream_model: String,
    pub surface: Option<SurfaceKind>,
    pub base_url: Option<String>,
    pub status: Status,
    /// Unchecked: why; missing: a listed id of the same model, when there is one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

impl RouteCheck {
    /// A missing route the gateway would still call: a failure of the check.
    pub fn fails(&self) -> bool {
        self.status == Status::Missing && self.model_active && self.route_active
    }
}

/// What asking one listing endpoint came to.
#[derive(Debug, Clone, Serialize)]
pub struct SurfaceCheck {
    pub surface: SurfaceKind,
    pub base_url: String,
    /// Models listed (checked surfaces).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub models: Option<usize>,
    /// Why it was not checked.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unchecked: Option<String>,
}

/// A model a checked surface lists that no catalog route of its kind calls.
#[derive(Debug, Clone, Serialize)]
pub struct NotInCatalog {
    pub surface: SurfaceKind,
    pub model: String,
    /// The checked endpoints that list it.
    pub base_urls: Vec<String>,
}

/// The whole check: `failures` non-empty means an active route calls a model its upstream does
/// not list (the CLI exits 1); `notes` are inactive models their upstream still lists.
#[derive(Debug, Clone, Serialize)]
pub struct DriftReport {
    pub routes: Vec<RouteCheck>,
    pub not_in_catalog: Vec<NotInCatalog>,
    pub surfaces: Vec<SurfaceCheck>,
    pub failures: Vec<String>,
    pub notes: Vec<String>,
}

/// Checks every route of every model (active or not) against `listings`.
pub fn check(
    rows: &CatalogRows,
    providers: &ProvidersConf,
    listings: &BTreeMap<Surface, Listing>,
) -> DriftReport {
    let mut models: Vec<&ModelRow> = rows.models.iter().collect();
    models.sort_by(|a, b| a.id.cmp(&b.id));
    let mut routes = Vec::new();
    for m in models {
        let mut own: Vec<&RouteRow> = rows.routes.iter().filter(|r| r.model_id == m.id).collect();
        own.sort_by_key(|r| r.priority);
        routes.extend(
            own.into_iter()
                .map(|r| check_route(m, r, providers, listings)),
        );
    }
    let failures = routes.iter().filter(|r| r.fails()).map(describe).collect();
    let notes = routes
        .iter()
        .filter(|r| r.status == Status::Listed && !r.model_active)
        .map(|r| {
            format!(
                "{} is inactive, but {} still lists {}",
                r.model, r.route, r.upstream_model
            )
        })
        .collect();
    DriftReport {
        not_in_catalog: not_in_catalog(&routes, listings),
        surfaces: surface_checks(listings),
        routes,
        failures,
        notes,
    }
}

fn check_route(
    model: &ModelRow,
    route: &RouteRow,
    providers: &ProvidersConf,
    listings: &BTreeMap<Surface, Listing>,
) -> RouteCheck {
    let id = bare(upstream_id(model, route));
    let surface = surface_of(route, providers);
    let (status, reason) = match &surface {
        Err(why) => (Status::Unchecked, Some(why.clone())),
        Ok(s) => match listings.get(s) {
            None => (Status::Unchecked, Some("not asked".to_owned())),
            Some(Err(why)) => (Status::Unchecked, Some(why.clone())),
            Some(Ok(listed)) => lookup(s.kind, id, listed),
        },
    };
    let surface = surface.ok();
    RouteCheck {
        model: model.id.clone(),
        model_active: model.active,
        route: route.kind.clone(),
        region: route.region.clone(),
        route_active: route.active,
        upstream_model: id.to_owned(),
        surface: surface.as_ref().map(|s| s.kind),
        base_url: surface.map(|s| s.base_url),
        status,
        reason,
    }
}

/// Whether `listed` has `id`; when not, the listed id of the same model, if any.
fn lookup(kind: SurfaceKind, id: &str, listed: &[Listed]) -> (Status, Option<String>) {
    let ids: Vec<Vec<String>> = listed.iter().map(|l| callable_ids(kind, l)).collect();
    if ids.iter().flatten().any(|c| c == id) {
        return (Status::Listed, None);
    }
    let near = ids
        .iter()
        .filter_map(|c| c.first())
        .find(|c| stem(c) == stem(id));
    let hint = near.map(|c| {
        if kind.is_vertex() {
            format!("listed as {c} (Vertex needs the version)")
        } else {
            format!("listed as {c}")
        }
    });
    (Status::Missing, hint)
}

fn describe(r: &RouteCheck) -> String {
    let region = r
        .region
        .as_deref()
        .map(|g| format!(" ({g})"))
        .unwrap_or_default();
    let surface = r.surface.map_or("its", SurfaceKind::as_str);
    format!(
        "{}: route {}{region} calls {}, which the {surface} listing at {} does not have",
        r.model,
        r.route,
        r.upstream_model,
        r.base_url.as_deref().unwrap_or("its upstream")
    )
}

fn surface_checks(listings: &BTreeMap<Surface, Listing>) -> Vec<SurfaceCheck> {
    listings
        .iter()
        .map(|(s, l)| SurfaceCheck {
            surface: s.kind,
            base_url: s.base_url.clone(),
            models: l.as_ref().ok().map(Vec::len),
            unchecked: l.as_ref().err().cloned(),
        })
        .collect()
}

/// Listed models no catalog route of the same surface kind calls, by surface kind and id.
fn not_in_catalog(
    routes: &[RouteCheck],
    listings: &BTreeMap<Surface, Listing>,
) -> Vec<NotInCatalog> {
    let used: HashSet<(SurfaceKind, &str)> = routes
        .iter()
        .filter_map(|r| Some((r.surface?, r.upstream_model.as_str())))
        .collect();
    let mut unused: BTreeMap<(SurfaceKind, String), Vec<String>> = BTreeMap::new();
    for (s, listed) in listings
        .iter()
        .filter_map(|(s, l)| Some((s, l.as_ref().ok()?)))
    {
        for l in listed {
            let ids = callable_ids(s.kind, l);
            let Some(first) = ids.first() else { continue };
            if !ids.iter().any(|c| used.contains(&(s.kind, c.as_str()))) {
                let urls = unused.entry((s.kind, first.clone())).or_default();
                urls.push(s.base_url.clone());
            }
        }
    }
    unused
        .into_iter()
        .map(|((surface, model), base_urls)| NotInCatalog {
            surface,
            model,
            base_urls,
        })
        .collect()
}
