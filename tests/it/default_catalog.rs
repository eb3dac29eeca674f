//! The default catalog against the simulator, which knows the upstream ids Google and
//! Anthropic serve (and answers retired ones with their 404): every active model answers on
//! every route it lists, chat buffered and streamed with every parameter a client may send (its
//! profile decides what is forwarded, the simulator refuses what the real service refuses), and
//! `/v1/models` lists exactly the active models.

use std::path::Path;

use serde_json::{json, Value};
use tollgate::store::{CatalogRows, ModelRow, RouteRow};

use crate::harness::{chunks, sse_data, Gateway, Sim, SimEnv};

fn default_catalog() -> CatalogRows {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("conf/catalog.yaml");
    tollgate::catalog::import::read_file(&path).unwrap()
}

/// One model per (model, active route) of the default catalog, pinned to that route:
/// `pin/<n>/<model id>`, same upstream id, profile and prices; `models[i]`'s route is
/// `routes[i]`.
fn pinned(rows: &CatalogRows) -> CatalogRows {
    let mut out = CatalogRows::default();
    for m in rows.models.iter().filter(|m| m.active) {
        let routes = rows
            .routes
            .iter()
            .filter(|r| r.model_id == m.id && r.active);
        for (n, r) in routes.enumerate() {
            let id = format!("pin/{n}/{}", m.id);
            out.routes.push(RouteRow {
                model_id: id.clone(),
                priority: 0,
                ..r.clone()
            });
            // Aliases name one model: the pins go without.
            out.models.push(ModelRow {
                id,
                aliases: Vec::new(),
                ..m.clone()
            });
        }
    }
    out
}

/// Everything an OpenAI client may send with a chat; each model forwards what its profile
/// says and drops the rest.
fn chat_body(model: &str, stream: bool) -> Value {
    json!({"model": model, "stream": stream,
        "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hello catalog"}],
        "temperature": 0.4, "top_p": 0.9, "top_k": 20, "max_tokens": 2048, "stop": ["\n\n\n"],
        "seed": 7, "frequency_penalty": 0.5, "presence_penalty": 0.25, "n": 1,
        "reasoning_effort": "medium", "user": "catalog-test", "logit_bias": {"1": 2}})
}

#[tokio::test]
async fn every_active_model_answers_on_every_route_it_lists() {
    let pins = pinned(&default_catalog());
    let sim = Sim::start();
    let mut gw = Gateway::builder().simulator(&sim).build();
    let file = gw.dir.path().join("pinned.yaml");
    std::fs::write(&file, serde_json::to_string(&pins).unwrap()).unwrap();
    gw.cli(&["catalog", "import", file.to_str().unwrap()]);
    gw.start();
    let (_, key) = gw.workspace_with_key();
    let kinds: Vec<&str> = pins.routes.iter().map(|r| r.kind.as_str()).collect();
    for kind in [
        "gemini-api",
        "vertex",
        "vertex-global",
        "anthropic",
        "vertex-anthropic",
    ] {
        assert!(kinds.contains(&kind), "no {kind} route in the catalog");
    }
    let post = |path: &'static str, body: Value| {
        let req = reqwest::Client::new()
            .post(gw.url(path))
            .bearer_auth(&key)
            .json(&body);
        async move {
            let res = req.send().await.unwrap();
            (res.status().as_u16(), res.text().await.unwrap())
        }
    };
    let mut failures = Vec::new();
    for (model, route) in pins.models.iter().zip(&pins.routes) {
        let id = &model.id;
        let what = format!("{id} on {} {:?}", route.kind, route.region);
        if model.kind == "embedding" {
            let (status, body) = post(
                "/v1/embeddings",
                json!({"model": id, "input": ["one", "two"]}),
            )
            .await;
            let v: Value = serde_json::from_str(&body).unwrap_or_default();
            let width = v["data"][1]["embedding"].as_array().map(Vec::len);
            let want = if id.ends_with("/google/text-embedding-004") {
                768
            } else {
                3072
            };
            if status != 200 || width != Some(want) {
                failures.push(format!(
                    "{what}: embeddings {status} width {width:?} {body}"
                ));
            }
            continue;
        }
        let (status, body) = post("/v1/chat/completions", chat_body(id, false)).await;
        let v: Value = serde_json::from_str(&body).unwrap_or_default();
        let text = v["choices"][0]["message"]["content"].as_str().unwrap_or("");
        if status != 200 || !text.contains("hello catalog") {
            failures.push(format!("{what}: buffered {status} {body}"));
            continue;
        }
        let (status, body) = post("/v1/chat/completions", chat_body(id, true)).await;
        let frames = sse_data(&body);
        if status != 200 || frames.last().map(String::as_str) != Some("[DONE]") {
            failures.push(format!("{what}: stream {status} {body}"));
            continue;
        }
        let streamed: String = chunks(&frames)
            .iter()
            .filter_map(|c| {
                c["choices"][0]["delta"]["content"]
                    .as_str()
                    .map(str::to_owned)
            })
            .collect();
        if !streamed.contains("hello catalog") {
            failures.push(format!("{what}: streamed text {streamed:?}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[tokio::test]
async fn models_lists_exactly_the_active_models() {
    let e = SimEnv::start();
    let rows = default_catalog();
    let listed = e.gw.model_ids(&e.key).await;
    for m in &rows.models {
        assert_eq!(
            listed.contains(&m.id),
            m.active,
            "{} (active: {}) in {listed:?}",
            m.id,
            m.active
        );
    }
}

#[tokio::test]
async fn retired_models_stay_in_the_catalog_but_are_not_served() {
    let e = SimEnv::start();
    let rows = default_catalog();
    let retired: Vec<&ModelRow> = rows.models.iter().filter(|m| !m.active).collect();
    assert!(!retired.is_empty() && retired.iter().all(|m| m.shutdown.is_some()));
    for m in retired {
        let (status, v) = e.chat(chat_body(&m.id, false)).await;
        assert_eq!(status, 400, "{}: {v}", m.id);
        assert_eq!(v["error"]["code"], "model_not_found", "{v}");
    }
}

#[tokio::test]
async fn the_gateway_warns_at_start_of_models_near_their_shutdown() {
    let sim = Sim::start();
    let mut gw = Gateway::builder().simulator(&sim).capture_logs().build();
    let today = chrono::Utc::now().date_naive();
    let soon = today + chrono::Days::new(10);
    let later = today + chrono::Days::new(31);
    let file = gw.dir.path().join("lifecycle.yaml");
    std::fs::write(
        &file,
        format!(
            "models:\n  - {{id: g/soon, provider: google, family: gemini, kind: chat, upstream_model: gemini-2.5-flash-lite, profile: gemini-2.5-flash-lite, input_price: 1, output_price: 1, shutdown: {soon}}}\n\
             \x20 - {{id: g/later, provider: google, family: gemini, kind: chat, upstream_model: gemini-2.5-flash-lite, profile: gemini-2.5-flash-lite, input_price: 1, output_price: 1, shutdown: {later}}}\n\
             \x20 - {{id: g/gone, provider: google, family: gemini, kind: chat, upstream_model: gemini-2.5-flash-lite, profile: gemini-2.5-flash-lite, input_price: 1, output_price: 1, shutdown: {today}, active: false}}\n\
             \x20 - {{id: g/hosted, provider: google, family: gemini, kind: chat, upstream_model: gemini-2.5-flash-lite, profile: gemini-2.5-flash-lite, input_price: 1, output_price: 1, shutdown: {today}}}\n\
             routes:\n\
             \x20 - {{model_id: g/soon, kind: gemini-api}}\n\
             \x20 - {{model_id: g/later, kind: gemini-api}}\n\
             \x20 - {{model_id: g/gone, kind: gemini-api}}\n\
             \x20 - {{model_id: g/hosted, kind: gemini-api, active: false}}\n\
             \x20 - {{model_id: g/hosted, kind: vertex, region: us-central1, priority: 10}}\n"
        ),
    )
    .unwrap();
    gw.cli(&["catalog", "import", file.to_str().unwrap()]);
    let listed = gw.cli(&["catalog", "list"]);
    assert!(listed.contains(&format!("[shutdown {soon}]")), "{listed}");
    assert!(
        listed.contains(&format!("[inactive, shut down {today}]")),
        "{listed}"
    );
    gw.start();
    let log = std::fs::read_to_string(&gw.log_file).unwrap();
    let warned = |id: &str| {
        log.lines()
            .any(|l| l.contains("WARN") && l.contains(&format!("model {id} is shut down")))
    };
    assert!(warned("g/soon"), "{log}");
    assert!(!warned("g/later") && !warned("g/gone"), "{log}");
    // Shut down today, but only by its provider's API, which it no longer calls.
    assert!(
        !log.lines()
            .any(|l| l.contains("WARN") && l.contains("g/hosted")),
        "{log}"
    );
    // The default catalog's own models past their dates call their providers no more.
    assert!(!log.contains("still routed to its provider"), "{log}");
}

/// From a model's shutdown day its provider's API is called no more (it would answer 404, or
/// with another model billed at this one's prices): the model answers on Vertex, and the start
/// says so. Catalogs imported before a shutdown keep their routes, so this is what protects them.
#[tokio::test]
async fn a_model_past_its_providers_shutdown_answers_through_vertex_only() {
    let sim = Sim::start();
    let mut gw = Gateway::builder().simulator(&sim).capture_logs().build();
    let yesterday = chrono::Utc::now().date_naive() - chrono::Days::new(1);
    let file = gw.dir.path().join("moved.yaml");
    std::fs::write(
        &file,
        format!(
            "models:\n  - {{id: g/moved, provider: google, family: gemini, kind: chat, upstream_model: gemini-2.5-flash-lite, profile: gemini-2.5-flash-lite, input_price: 1, output_price: 1, shutdown: {yesterday}}}\n\
             routes:\n\
             \x20 - {{model_id: g/moved, kind: gemini-api, priority: 0}}\n\
             \x20 - {{model_id: g/moved, kind: vertex, region: us-central1, priority: 10}}\n"
        ),
    )
    .unwrap();
    gw.cli(&["catalog", "import", file.to_str().unwrap()]);
    gw.start();
    let (ws, key) = gw.workspace_with_key();
    for stream in [false, true] {
        let res = gw.chat(&key, chat_body("g/moved", stream)).await;
        assert_eq!(res.status(), 200, "{}", res.text().await.unwrap());
        let _ = res.text().await;
    }
    let records = gw.usage_records(&ws, 2).await;
    assert!(
        records.iter().all(|r| r["route"] == "vertex"),
        "{records:?}"
    );
    let called = sim.routes_since(0).await;
    assert!(
        called.iter().all(|r| r.starts_with("vertex.")),
        "the Gemini API is not called: {called:?}"
    );
    let log = std::fs::read_to_string(&gw.log_file).unwrap();
    assert!(
        log.lines().any(|l| l.contains("WARN")
            && l.contains("model g/moved is still routed to its provider")
            && l.contains("that route is skipped")),
        "{log}"
    );
}

#[tokio::test]
async fn the_default_catalog_passes_its_own_check() {
    let sim = Sim::start();
    let gw = Gateway::builder().simulator(&sim).build();
    let out = gw.cli_with_credentials(&["--json", "catalog", "check"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let report: Value =
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {stderr}"));
    assert!(out.status.success(), "{stderr}\n{report:#}");
    let rows = default_catalog();
    for r in report["routes"].as_array().unwrap() {
        let active = rows
            .models
            .iter()
            .any(|m| m.active && r["model"] == m.id.as_str());
        if active && r["route_active"] == true {
            assert_eq!(r["status"], "listed", "{r}");
        } else if active {
            assert_eq!(
                r["status"], "missing",
                "a route turned off is one its upstream shut down: {r}"
            );
        } else if rows.models.iter().any(|m| r["model"] == m.id.as_str()) && !active {
            assert_eq!(
                r["status"], "missing",
                "a retired model is gone upstream: {r}"
            );
        }
    }
    let unlisted: Vec<&str> = report["not_in_catalog"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| m["model"].as_str())
        .collect();
    assert!(
        unlisted.iter().any(|m| m.starts_with("gemini-4-")),
        "{unlisted:?}"
    );
}

#[tokio::test]
async fn models_answer_to_their_aliases_under_their_own_id() {
    let sim = Sim::start();
    let gw = Gateway::builder().simulator(&sim).start();

    // The CLI shows the aliases, as text and as JSON.
    let listed = gw.cli(&["catalog", "list"]);
    let sonnet = listed
        .lines()
        .find(|l| l.starts_with("anthropic/claude-sonnet-4-5 "))
        .unwrap_or_else(|| panic!("{listed}"));
    assert!(
        sonnet.contains("  aliases claude-sonnet-4-5, claude-sonnet-4-5-20250929  [shutdown"),
        "{sonnet}"
    );
    let rows = gw.cli_json(&["catalog", "list"]);
    let haiku = rows["models"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["id"] == "anthropic/claude-haiku-4-5")
        .unwrap();
    assert_eq!(
        haiku["aliases"],
        json!(["claude-haiku-4-5", "claude-haiku-4-5-20251001"])
    );

    // A chat by the dated id is the catalog model's: answered, billed and recorded under its id.
    let (ws, key) = gw.workspace_with_key();
    let res = reqwest::Client::new()
        .post(gw.url("/v1/chat/completions"))
        .bearer_auth(&key)
        .json(
            &json!({"model": "claude-sonnet-4-5-20250929", "max_tokens": 64,
            "messages": [{"role": "user", "content": "hello alias"}]}),
        )
        .send()
        .await
        .unwrap();
    let status = res.status().as_u16();
    let v: Value = res.json().await.unwrap();
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["model"], "anthropic/claude-sonnet-4-5", "{v}");
    let records = crate::billing::records(&gw, &ws, 1).await;
    assert_eq!(records[0]["model_id"], "anthropic/claude-sonnet-4-5");
    assert_eq!(records[0]["endpoint"], "chat");

    // `/v1/models` lists ids only.
    let ids = gw.model_ids(&key).await;
    assert!(ids.contains(&"anthropic/claude-sonnet-4-5".to_owned()));
    assert!(
        !ids.iter().any(|id| !id.contains('/')),
        "no alias is listed: {ids:?}"
    );

    // An import whose alias another model holds is refused, naming both.
    let file = gw.dir.path().join("taken.yaml");
    std::fs::write(
        &file,
        "models:\n  - {id: acme/sonnet, provider: acme, family: openai, kind: chat, \
         upstream_model: s, input_price: 1, output_price: 1, aliases: [claude-sonnet-4-5]}\n",
    )
    .unwrap();
    let out = gw.cli_raw(&["catalog", "import", file.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains(
            r#"model acme/sonnet: alias "claude-sonnet-4-5" is already model anthropic/claude-sonnet-4-5's alias"#
        ),
        "{stderr}"
    );
    assert!(!gw.cli(&["catalog", "list"]).contains("acme/sonnet"));
}
