//! The comparison, on hand-made catalogs and listings (no network).

use std::collections::BTreeMap;

use super::compare::{self, bare, callable_ids, Listed, Listing, Surface};
use super::*;
use crate::config::ProvidersConf;
use crate::store::CatalogRows;

fn rows(yaml: &str) -> CatalogRows {
    serde_yaml::from_str(yaml).unwrap()
}

fn providers() -> ProvidersConf {
    let mut p = ProvidersConf::default();
    p.gemini.base_url = "http://g".into();
    p.anthropic.base_url = "http://a".into();
    p.vertex.base_url = "http://{region}.v".into();
    p.vertex.global_base_url = "http://global.v".into();
    p
}

fn surface(kind: SurfaceKind, base: &str) -> Surface {
    Surface {
        kind,
        base_url: base.into(),
    }
}

fn listed(names: &[&str]) -> Listing {
    Ok(names
        .iter()
        .map(|n| {
            let (name, version) = match n.split_once('#') {
                Some((n, v)) => (n, Some(v.to_owned())),
                None => (*n, None),
            };
            Listed {
                name: name.into(),
                version,
            }
        })
        .collect())
}

const CATALOG: &str = "
models:
  - {id: g/flash, provider: google, family: gemini, kind: chat, upstream_model: gemini-3.8-flash, profile: p, input_price: 1, output_price: 1}
  - {id: g/old, provider: google, family: gemini, kind: chat, upstream_model: gemini-2.0-flash, profile: p, input_price: 1, output_price: 1, active: false}
  - {id: a/sonnet, provider: anthropic, family: anthropic, kind: chat, upstream_model: claude-sonnet-4-5, profile: p, input_price: 1, output_price: 1}
  - {id: a/opus, provider: anthropic, family: anthropic, kind: chat, upstream_model: claude-opus-5-5, profile: p, input_price: 1, output_price: 1, active: false}
  - {id: o/echo, provider: acme, family: openai, kind: chat, upstream_model: echo, profile: p, input_price: 1, output_price: 1}
routes:
  - {model_id: g/flash, kind: gemini-api}
  - {model_id: g/flash, kind: vertex, region: europe-west4, priority: 10}
  - {model_id: g/flash, kind: vertex-global, region: global, priority: 20}
  - {model_id: g/old, kind: gemini-api}
  - {model_id: a/sonnet, kind: anthropic}
  - {model_id: a/sonnet, kind: vertex-anthropic, region: us-east5, priority: 10, active: false}
  - {model_id: a/opus, kind: anthropic}
  - {model_id: o/echo, kind: openai, base_url: 'http://o/v1'}
";

fn listings() -> BTreeMap<Surface, Listing> {
    BTreeMap::from([
        (
            surface(SurfaceKind::GeminiApi, "http://g"),
            listed(&["models/gemini-3.8-flash", "models/gemini-4-neon"]),
        ),
        (
            surface(SurfaceKind::VertexGoogle, "http://europe-west4.v"),
            listed(&["publishers/google/models/gemini-2.5-pro#001"]),
        ),
        (
            surface(SurfaceKind::VertexGoogle, "http://global.v"),
            Err("no Vertex token".into()),
        ),
        (
            surface(SurfaceKind::Anthropic, "http://a"),
            listed(&["claude-opus-5-5", "claude-sonnet-4-5-20250929"]),
        ),
        (
            surface(SurfaceKind::VertexAnthropic, "http://us-east5.v"),
            listed(&["publishers/anthropic/models/claude-sonnet-4-5#20250929"]),
        ),
    ])
}

fn route<'a>(r: &'a DriftReport, model: &str, kind: &str) -> &'a RouteCheck {
    r.routes
        .iter()
        .find(|c| c.model == model && c.route == kind)
        .unwrap()
}

#[test]
fn surfaces_follow_route_kind_region_and_base_url() {
    let s = compare::surfaces(&rows(CATALOG), &providers());
    let got: Vec<(SurfaceKind, &str)> = s.iter().map(|s| (s.kind, s.base_url.as_str())).collect();
    assert_eq!(
        got,
        vec![
            (SurfaceKind::GeminiApi, "http://g"),
            (SurfaceKind::VertexGoogle, "http://europe-west4.v"),
            (SurfaceKind::VertexGoogle, "http://global.v"),
            (SurfaceKind::Anthropic, "http://a"),
            (SurfaceKind::VertexAnthropic, "http://us-east5.v"),
        ],
        "OpenAI-compatible routes are not asked"
    );
}

#[test]
fn routes_are_listed_missing_or_unchecked() {
    let r = compare::check(&rows(CATALOG), &providers(), &listings());
    assert_eq!(route(&r, "g/flash", "gemini-api").status, Status::Listed);
    let vertex = route(&r, "g/flash", "vertex");
    assert_eq!(vertex.status, Status::Missing);
    assert_eq!(vertex.base_url.as_deref(), Some("http://europe-west4.v"));
    let global = route(&r, "g/flash", "vertex-global");
    assert_eq!(global.status, Status::Unchecked);
    assert_eq!(global.reason.as_deref(), Some("no Vertex token"));
    assert_eq!(
        route(&r, "a/sonnet", "anthropic").status,
        Status::Listed,
        "an alias of a listed dated id"
    );
    let on_vertex = route(&r, "a/sonnet", "vertex-anthropic");
    assert_eq!(
        on_vertex.status,
        Status::Missing,
        "Vertex needs the @date on 4.5"
    );
    assert_eq!(
        on_vertex.reason.as_deref(),
        Some("listed as claude-sonnet-4-5@20250929 (Vertex needs the version)")
    );
    let openai = route(&r, "o/echo", "openai");
    assert_eq!(openai.status, Status::Unchecked);
    assert!(openai
        .reason
        .as_deref()
        .unwrap()
        .contains("OpenAI-compatible"));
}

#[test]
fn only_active_routes_of_active_models_fail() {
    let r = compare::check(&rows(CATALOG), &providers(), &listings());
    // g/flash on Vertex fails; g/old (inactive model) and a/sonnet's Vertex route (inactive
    // route) are missing too, but expected.
    assert_eq!(r.failures.len(), 1, "{:?}", r.failures);
    assert!(
        r.failures[0].starts_with("g/flash: route vertex (europe-west4) calls gemini-3.8-flash")
    );
    assert_eq!(route(&r, "g/old", "gemini-api").status, Status::Missing);
    assert_eq!(
        r.notes,
        vec!["a/opus is inactive, but anthropic still lists claude-opus-5-5"]
    );
}

#[test]
fn listed_models_no_route_calls_are_reported() {
    let r = compare::check(&rows(CATALOG), &providers(), &listings());
    let unused: Vec<(SurfaceKind, &str)> = r
        .not_in_catalog
        .iter()
        .map(|n| (n.surface, n.model.as_str()))
        .collect();
    assert_eq!(
        unused,
        vec![
            (SurfaceKind::GeminiApi, "gemini-4-neon"),
            (SurfaceKind::VertexGoogle, "gemini-2.5-pro"),
            (SurfaceKind::VertexAnthropic, "claude-sonnet-4-5@20250929"),
        ]
    );
    let surfaces: Vec<(SurfaceKind, Option<usize>)> =
        r.surfaces.iter().map(|s| (s.surface, s.models)).collect();
    assert_eq!(surfaces.len(), 5);
    assert!(surfaces.contains(&(SurfaceKind::VertexGoogle, None)));
}

#[test]
fn ids_compare_as_each_surface_calls_them() {
    let l = |name: &str, version: Option<&str>| Listed {
        name: name.into(),
        version: version.map(str::to_owned),
    };
    assert_eq!(bare("models/gemini-2.5-flash"), "gemini-2.5-flash");
    assert_eq!(
        bare("publishers/google/models/gemini-2.5-flash"),
        "gemini-2.5-flash"
    );
    assert_eq!(bare("gemini-2.5-flash"), "gemini-2.5-flash");
    assert_eq!(
        callable_ids(
            SurfaceKind::Anthropic,
            &l("claude-haiku-4-5-20251001", None)
        ),
        vec!["claude-haiku-4-5-20251001", "claude-haiku-4-5"]
    );
    assert_eq!(
        callable_ids(SurfaceKind::Anthropic, &l("claude-opus-5-5", None)),
        vec!["claude-opus-5-5"]
    );
    let vertex = SurfaceKind::VertexAnthropic;
    assert_eq!(
        callable_ids(
            vertex,
            &l(
                "publishers/anthropic/models/claude-haiku-4-5",
                Some("20251001")
            )
        ),
        vec!["claude-haiku-4-5@20251001"]
    );
    assert_eq!(
        callable_ids(
            vertex,
            &l("publishers/anthropic/models/claude-opus-5-5", Some("001"))
        ),
        vec!["claude-opus-5-5"]
    );
    assert_eq!(
        callable_ids(
            vertex,
            &l("publishers/anthropic/models/claude-x@20250101", None)
        ),
        vec!["claude-x@20250101"]
    );
    assert_eq!(
        callable_ids(
            SurfaceKind::GeminiApi,
            &l("models/gemini-3-flash-preview", None)
        ),
        vec!["gemini-3-flash-preview"]
    );
}

#[test]
fn an_unasked_surface_leaves_its_routes_unchecked() {
    let r = compare::check(&rows(CATALOG), &providers(), &BTreeMap::new());
    assert!(r.routes.iter().all(|c| c.status == Status::Unchecked));
    assert!(r.failures.is_empty() && r.not_in_catalog.is_empty());
}

#[test]
fn a_route_is_checked_by_the_id_it_calls() {
    let rows = rows(
        "models:\n  - {id: anthropic/h, provider: anthropic, family: anthropic, kind: chat, upstream_model: claude-haiku-4-5, input_price: 1, output_price: 5}\n\
         routes:\n  - {model_id: anthropic/h, kind: anthropic}\n  - {model_id: anthropic/h, kind: vertex-anthropic, region: us-east5, upstream_model: claude-haiku-4-5@20251001}\n",
    );
    let (model, routes) = (&rows.models[0], &rows.routes);
    assert_eq!(compare::upstream_id(model, &routes[0]), "claude-haiku-4-5");
    assert_eq!(
        compare::upstream_id(model, &routes[1]),
        "claude-haiku-4-5@20251001"
    );
}
