//! `tollgate catalog check` against the simulator's model listings: a catalog the providers
//! fully list passes, a withdrawn model fails its active routes, models no route calls are
//! reported, and a route kind without credentials is unchecked.

use serde_json::{json, Value};

use crate::harness::{Gateway, Sim};

/// Every checked route kind, one inactive retired model, one OpenAI-compatible route.
const CATALOG: &str = "
profiles:
  - name: plain
    spec: {forward: [max_tokens], thinking: {kind: none}}
models:
  - {id: t/flash, provider: google, family: gemini, kind: chat, upstream_model: gemini-3.8-flash, profile: plain, input_price: 1, output_price: 2}
  - {id: t/embed, provider: google, family: gemini, kind: embedding, upstream_model: gemini-embedding-001, profile: plain, input_price: 0.1, output_price: 0}
  - {id: t/haiku, provider: anthropic, family: anthropic, kind: chat, upstream_model: claude-haiku-4-5, profile: plain, input_price: 1, output_price: 5}
  - {id: t/sonnet-vertex, provider: anthropic, family: anthropic, kind: chat, upstream_model: claude-sonnet-4-5@20250929, profile: plain, input_price: 3, output_price: 15}
  - {id: t/opus, provider: anthropic, family: anthropic, kind: chat, upstream_model: claude-opus-5-5, profile: plain, input_price: 5, output_price: 25}
  - {id: t/retired, provider: google, family: gemini, kind: chat, upstream_model: gemini-2.0-flash, profile: plain, input_price: 1, output_price: 1, active: false}
  - {id: t/echo, provider: acme, family: openai, kind: chat, upstream_model: echo-1, profile: plain, input_price: 1, output_price: 1}
routes:
  - {model_id: t/flash, kind: gemini-api}
  - {model_id: t/flash, kind: vertex, region: us-central1, priority: 10}
  - {model_id: t/flash, kind: vertex-global, region: global, priority: 20}
  - {model_id: t/embed, kind: gemini-api}
  - {model_id: t/embed, kind: vertex, region: us-central1, priority: 10}
  - {model_id: t/haiku, kind: anthropic}
  - {model_id: t/sonnet-vertex, kind: vertex-anthropic, region: us-east5}
  - {model_id: t/opus, kind: anthropic}
  - {model_id: t/opus, kind: vertex-anthropic, region: us-east5, priority: 10}
  - {model_id: t/retired, kind: gemini-api}
  - {model_id: t/echo, kind: openai, base_url: 'http://127.0.0.1:9/v1'}
";

/// `catalog check --json [extra]`: exit success, the report, stderr.
fn check(gw: &Gateway, extra: &[&str]) -> (bool, Value, String) {
    let mut args = vec!["--json", "catalog", "check"];
    args.extend_from_slice(extra);
    let out = gw.cli_with_credentials(&args);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let report = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("no JSON report ({e}); stderr: {stderr}"));
    (out.status.success(), report, stderr)
}

/// The route of `model` of `kind` in a report.
pub(crate) fn route<'a>(report: &'a Value, model: &str, kind: &str) -> &'a Value {
    report["routes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["model"] == model && r["route"] == kind)
        .unwrap_or_else(|| panic!("no route {model} {kind} in {report:#}"))
}

fn not_in_catalog(report: &Value) -> Vec<(String, String)> {
    report["not_in_catalog"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| {
            let s = |k: &str| n[k].as_str().unwrap().to_owned();
            (s("surface"), s("model"))
        })
        .collect()
}

#[tokio::test]
async fn a_fully_listed_catalog_passes() {
    let sim = Sim::start();
    let gw = Gateway::builder()
        .simulator(&sim)
        .only_catalog(CATALOG)
        .build();
    let (ok, report, stderr) = check(&gw, &[]);
    assert!(ok, "{stderr}\n{report:#}");
    for r in report["routes"].as_array().unwrap() {
        let want = match (r["model"].as_str().unwrap(), r["route"].as_str().unwrap()) {
            ("t/retired", _) => "missing",
            (_, "openai") => "unchecked",
            _ => "listed",
        };
        assert_eq!(r["status"], want, "{r}");
    }
    assert_eq!(report["failures"], json!([]));
    assert_eq!(report["notes"], json!([]));
    let unused = not_in_catalog(&report);
    assert!(unused.contains(&("gemini-api".into(), "gemini-4-neon".into())));
    assert!(unused.contains(&("vertex-google".into(), "text-embedding-005".into())));
    assert!(unused.contains(&("anthropic".into(), "claude-haiku-5-5".into())));
    assert!(unused.contains(&(
        "vertex-anthropic".into(),
        "claude-haiku-4-5@20251001".into()
    )));
    assert!(
        !unused.iter().any(|(_, m)| m == "gemini-3.8-flash"
            || m == "claude-haiku-4-5-20251001"
            || m == "claude-sonnet-4-5@20250929"),
        "{unused:?}"
    );
    // Vertex regional and global are asked at their own endpoints (one simulator here).
    let surfaces: Vec<&str> = report["surfaces"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["surface"].as_str().unwrap())
        .collect();
    assert_eq!(
        surfaces,
        [
            "gemini-api",
            "vertex-google",
            "anthropic",
            "vertex-anthropic"
        ],
        "the sim's one base URL serves regional and global alike"
    );
    let routes = sim.routes_since(0).await;
    for name in ["gemini.models", "vertex.models", "anthropic.models"] {
        assert!(
            routes.iter().any(|r| r == name),
            "{name} not asked: {routes:?}"
        );
    }

    // Small pages come to the same report.
    let (ok, paged, _) = check(&gw, &["--page-size", "2"]);
    assert!(ok);
    assert_eq!(paged["routes"], report["routes"]);
    assert_eq!(paged["not_in_catalog"], report["not_in_catalog"]);
    let gemini_pages = sim
        .requests()
        .await
        .iter()
        .filter(|r| {
            r["route"] == "gemini.models" && r["path"].as_str().unwrap().contains("pageSize=2")
        })
        .count();
    assert!(gemini_pages >= 8, "{gemini_pages} pages of 2 for 17 models");

    // The table.
    let out = gw.cli_with_credentials(&["catalog", "check"]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("not in catalog:"), "{text}");
    assert!(text.contains("missing (inactive: expected)"), "{text}");
    assert!(text.contains("unchecked: OpenAI-compatible"), "{text}");
}

#[tokio::test]
async fn a_withdrawn_model_fails_its_active_routes() {
    let sim = Sim::start();
    let gw = Gateway::builder()
        .simulator(&sim)
        .only_catalog(CATALOG)
        .build();
    let withdrawn = ::reqwest::Client::new()
        .post(format!("{}/_sim/models/withdraw", sim.url))
        .json(&json!({"surface": "vertex", "model": "gemini-3.8-flash"}))
        .send()
        .await
        .unwrap();
    assert_eq!(withdrawn.status(), 200);
    let (ok, report, stderr) = check(&gw, &[]);
    assert!(!ok, "a missing active route fails the check");
    assert_eq!(route(&report, "t/flash", "vertex")["status"], "missing");
    assert_eq!(
        route(&report, "t/flash", "vertex-global")["status"],
        "missing"
    );
    assert_eq!(route(&report, "t/flash", "gemini-api")["status"], "listed");
    assert_eq!(report["failures"].as_array().unwrap().len(), 2);
    assert!(
        stderr.contains("catalog drift: 2 active route(s)")
            && stderr.contains("t/flash: route vertex (us-central1) calls gemini-3.8-flash"),
        "{stderr}"
    );
}

#[tokio::test]
async fn a_route_kind_without_credentials_is_unchecked() {
    let sim = Sim::start();
    let gw = Gateway::builder()
        .simulator(&sim)
        .only_catalog(CATALOG)
        .without_env("TEST_ANTHROPIC_KEY")
        .build();
    let (ok, report, stderr) = check(&gw, &[]);
    assert!(ok, "unchecked is not a failure: {stderr}");
    let haiku = route(&report, "t/haiku", "anthropic");
    assert_eq!(haiku["status"], "unchecked");
    assert_eq!(
        haiku["reason"],
        "no Anthropic API key (TEST_ANTHROPIC_KEY is unset)"
    );
    assert_eq!(
        route(&report, "t/opus", "vertex-anthropic")["status"],
        "listed"
    );
    assert!(
        !not_in_catalog(&report)
            .iter()
            .any(|(s, _)| s == "anthropic"),
        "an unchecked surface reports no unused models"
    );
}
