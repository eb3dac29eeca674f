//! The JSON admin API under `/admin/v1`: one route table, one plain function per operation,
//! each a thin call of the command layer (`crate::commands`) the CLI uses too. The
//! `#[utoipa::path]` on each function is where the OpenAPI document comes from. Every call is
//! first put to [`scope::permits`] (the admin token and console sessions may do everything, a
//! management key its own workspace's keys, usage and balance).

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, NaiveDate, Utc};
use http::{Method, StatusCode};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use utoipa::ToSchema;

use super::error::AdminError;
use super::http::{segments, Request, Response};
use super::scope::{self, Caller, Op, Scope};
use super::session::{Bearer, Guard};
use crate::commands::{
    self, Actor, AlertRequest, KeyPatch, KeyRequest, KeyView, ManagementKeyRequest,
    ManagementKeyView, ModelPatch, PageRequest, WorkspaceView,
};
use crate::money::json_decimal_text;
use crate::store::{self, Done, LimitReset, Store, UsageFilter};

/// What the admin API works with.
pub struct Api {
    pub guard: Guard,
    pub key_prefix: String,
    /// `tollgate.alerts.allow_private_webhooks`: what webhook URLs may be set.
    pub allow_private_webhooks: bool,
    store_url: String,
    /// Opened on first use, on the admin service's own runtime.
    store: tokio::sync::OnceCell<Arc<dyn Store>>,
    /// `tollgate.store_read_url`: where the pages and rollups read (`None`: the store).
    read_store_url: Option<String>,
    read_store: tokio::sync::OnceCell<Arc<dyn Store>>,
}

type Answer = Result<Response, AdminError>;

impl Api {
    pub fn new(guard: Guard, key_prefix: String, store_url: String) -> Self {
        Api {
            guard,
            key_prefix,
            allow_private_webhooks: false,
            store_url,
            store: tokio::sync::OnceCell::new(),
            read_store_url: None,
            read_store: tokio::sync::OnceCell::new(),
        }
    }

    /// Pages and rollups read from `url` (a read replica), when there is one.
    pub fn with_read_store(mut self, url: Option<String>) -> Self {
        self.read_store_url = url;
        self
    }

    /// An `Api` over a store already open (tests).
    pub fn with_store(guard: Guard, key_prefix: &str, store: Arc<dyn Store>) -> Self {
        Api {
            guard,
            key_prefix: key_prefix.to_owned(),
            allow_private_webhooks: false,
            store_url: String::new(),
            store: tokio::sync::OnceCell::new_with(Some(store)),
            read_store_url: None,
            read_store: tokio::sync::OnceCell::new(),
        }
    }

    async fn store(&self) -> Result<&dyn Store, AdminError> {
        let store = self
            .store
            .get_or_try_init(|| store::open(&self.store_url))
            .await?;
        Ok(store.as_ref())
    }

    /// Where a page or a rollup reads: the read replica when one is set, else the store. Only
    /// GETs that show what is there come here; writes, what they check (a refund's balance)
    /// and who the caller is (management keys, console sessions) stay on the store.
    async fn reads(&self) -> Result<&dyn Store, AdminError> {
        let Some(url) = &self.read_store_url else {
            return self.store().await;
        };
        let store = self.read_store.get_or_try_init(|| store::open(url)).await?;
        Ok(store.as_ref())
    }

    /// Answers a request whose path starts with `/admin/v1/`.
    pub async fn handle(&self, req: &Request) -> Response {
        self.route(req).await.unwrap_or_else(|e| e.response())
    }

    async fn route(&self, req: &Request) -> Answer {
        let seg = segments(&req.path);
        let seg: Vec<&str> = seg.iter().skip(2).map(String::as_str).collect();
        if seg == ["session"] {
            return self.session(req).await;
        }
        let caller = self.caller(req).await?;
        let s = self.store().await?;
        let m = &req.method;
        authorize(s, &caller.scope, m, &seg).await?;
        let actor = caller.actor;
        let now = Utc::now();
        match (m, seg.as_slice()) {
            (&Method::GET, ["workspaces"]) => list_workspaces(self.reads().await?, req).await,
            (&Method::POST, ["workspaces"]) => create_workspace(s, &actor, req).await,
            (&Method::GET, ["workspaces", ws]) => get_workspace(self.reads().await?, ws).await,
            (&Method::PATCH, ["workspaces", ws]) => rename_workspace(s, &actor, ws, req).await,
            (&Method::GET, ["workspaces", ws, "keys"]) => {
                list_keys(self.reads().await?, ws, req, now).await
            }
            (&Method::POST, ["workspaces", ws, "keys"]) => {
                create_key(s, &actor, &self.key_prefix, ws, req, now).await
            }
            (&Method::PATCH, ["keys", id]) => update_key(s, &actor, id, req, now).await,
            (&Method::POST, ["keys", id, "revoke"]) => revoke_key(s, &actor, id, now).await,
            (&Method::POST, ["keys", id, "rotate"]) => {
                rotate_key(s, &actor, &self.key_prefix, id, req, now).await
            }
            (&Method::GET, ["workspaces", ws, "credits"]) => {
                list_credits(self.reads().await?, ws, req).await
            }
            (&Method::POST, ["workspaces", ws, "credits"]) => add_credit(s, &actor, ws, req).await,
            (&Method::POST, ["workspaces", ws, "refunds"]) => refund(s, &actor, ws, req).await,
            (&Method::GET, ["workspaces", ws, "usage"]) => {
                list_usage(self.reads().await?, ws, req).await
            }
            (&Method::GET, ["workspaces", ws, "usage", "daily"]) => {
                daily_usage(self.reads().await?, ws, req, now).await
            }
            (&Method::GET, ["workspaces", ws, "alerts"]) => {
                get_alerts(self.reads().await?, ws).await
            }
            (&Method::PUT, ["workspaces", ws, "alerts"]) => {
                put_alerts(s, &actor, ws, req, self.allow_private_webhooks).await
            }
            (&Method::GET, ["workspaces", ws, "alerts", "deliveries"]) => {
                list_deliveries(self.reads().await?, ws, req).await
            }
            (&Method::GET, ["catalog"]) => get_catalog(self.reads().await?).await,
            (&Method::PATCH, ["catalog", "models", id]) => update_model(s, &actor, id, req).await,
            (&Method::PATCH, ["catalog", "models", id, "routes", n]) => {
                update_route(s, &actor, id, n, req).await
            }
            (&Method::GET, ["audit"]) => list_audit(self.reads().await?, req).await,
            (&Method::GET, ["workspaces", ws, "management-keys"]) => {
                list_management_keys(self.reads().await?, ws, now).await
            }
            (&Method::POST, ["workspaces", ws, "management-keys"]) => {
                create_management_key(s, &actor, ws, req, now).await
            }
            (&Method::POST, ["management-keys", id, "revoke"]) => {
                revoke_management_key(s, &actor, id, now).await
            }
            (_, path) if known(path) => Err(AdminError::Method(m.to_string())),
            _ => Err(AdminError::NotFound(format!("no admin route {}", req.path))),
        }
    }

    /// Who is calling: the holder of the admin token or of a working management key (read
    /// from the store), or a console session (from the store).
    pub async fn caller(&self, req: &Request) -> Result<Caller, AdminError> {
        match self.guard.bearer(req)? {
            Some(Bearer::Admin) => Ok(Caller::operator(Actor::admin_token())),
            Some(Bearer::Management(secret)) => {
                let store = self.store().await?;
                match commands::management_caller(store, secret, Utc::now()).await? {
                    Some(key) => Ok(Caller {
                        actor: Actor::management_key(&key.id),
                        scope: Scope::Workspace(key.workspace_id),
                    }),
                    None => Err(self
                        .guard
                        .refuse(req, "unknown, revoked or expired management key")),
                }
            }
            None => {
                let actor = self.guard.console(req, self.store().await?).await?;
                Ok(Caller::operator(actor))
            }
        }
    }

    /// `/admin/v1/session`: the console signs in, asks for its CSRF token, signs out.
    async fn session(&self, req: &Request) -> Answer {
        self.guard.require_enabled()?;
        let s = self.store().await?;
        match req.method {
            Method::POST => {
                let body: SignIn = json_body(req)?;
                let signed = self.guard.sign_in(req, &body.token, s).await?;
                let csrf_token = signed.csrf;
                Ok(Response::json(StatusCode::OK, &Csrf { csrf_token })
                    .with_header(http::header::SET_COOKIE, signed.cookie))
            }
            Method::GET => {
                let csrf_token = self.guard.session(req, s).await?.csrf;
                Ok(Response::json(StatusCode::OK, &Csrf { csrf_token }))
            }
            Method::DELETE => {
                self.guard.console(req, s).await?;
                let cleared = self.guard.sign_out(req, s).await?;
                Ok(
                    Response::json(StatusCode::OK, &serde_json::json!({"signed_out": true}))
                        .with_header(http::header::SET_COOKIE, cleared),
                )
            }
            ref m => Err(AdminError::Method(m.to_string())),
        }
    }
}

/// What a call's operation applies to, for [`scope::permits`].
enum Target<'a> {
    Workspace(&'a str),
    Key(&'a str),
    Nothing,
}

/// The operation of a call, and what it applies to; `None` for one the table does not
/// classify (then it is the operator's alone).
fn operation<'a>(m: &Method, path: &[&'a str]) -> Option<(Op, Target<'a>)> {
    use Target::{Key, Nothing, Workspace};
    let (op, target) = match (m, path) {
        (&Method::GET, ["workspaces"]) => (Op::ListWorkspaces, Nothing),
        (&Method::POST, ["workspaces"]) => (Op::CreateWorkspace, Nothing),
        (&Method::GET, ["workspaces", ws]) => (Op::ReadWorkspace, Workspace(ws)),
        (&Method::PATCH, ["workspaces", ws]) => (Op::RenameWorkspace, Workspace(ws)),
        (&Method::GET, ["workspaces", ws, "keys"]) => (Op::ListKeys, Workspace(ws)),
        (&Method::POST, ["workspaces", ws, "keys"]) => (Op::CreateKey, Workspace(ws)),
        (&Method::PATCH, ["keys", id]) => (Op::UpdateKey, Key(id)),
        (&Method::POST, ["keys", id, "revoke"]) => (Op::RevokeKey, Key(id)),
        (&Method::POST, ["keys", id, "rotate"]) => (Op::RotateKey, Key(id)),
        (&Method::GET, ["workspaces", ws, "credits"]) => (Op::ListCredits, Workspace(ws)),
        (&Method::POST, ["workspaces", ws, "credits"]) => (Op::AddCredit, Workspace(ws)),
        (&Method::POST, ["workspaces", ws, "refunds"]) => (Op::Refund, Workspace(ws)),
        (&Method::GET, ["workspaces", ws, "usage"]) => (Op::ListUsage, Workspace(ws)),
        (&Method::GET, ["workspaces", ws, "usage", "daily"]) => (Op::DailyUsage, Workspace(ws)),
        (&Method::GET, ["workspaces", ws, "alerts"]) => (Op::ReadAlerts, Workspace(ws)),
        (&Method::PUT, ["workspaces", ws, "alerts"]) => (Op::SetAlerts, Workspace(ws)),
        (&Method::GET, ["workspaces", ws, "alerts", "deliveries"]) => {
            (Op::ListDeliveries, Workspace(ws))
        }
        (&Method::GET, ["catalog"]) => (Op::ReadCatalog, Nothing),
        (&Method::PATCH, ["catalog", "models", _]) => (Op::UpdateModel, Nothing),
        (&Method::PATCH, ["catalog", "models", _, "routes", _]) => (Op::UpdateRoute, Nothing),
        (&Method::GET, ["audit"]) => (Op::ReadAudit, Nothing),
        (&Method::GET, ["workspaces", ws, "management-keys"]) => {
            (Op::ListManagementKeys, Workspace(ws))
        }
        (&Method::POST, ["workspaces", ws, "management-keys"]) => {
            (Op::CreateManagementKey, Workspace(ws))
        }
        (&Method::POST, ["management-keys", _, "revoke"]) => (Op::RevokeManagementKey, Nothing),
        _ => return None,
    };
    Some((op, target))
}

/// Puts the call to [`scope::permits`], reading a key's workspace from the store when a
/// management key calls (the operator may do everything: nothing is read for it). A path the
/// table does not classify is the operator's alone; an unknown one goes on to its 404.
async fn authorize(
    s: &dyn Store,
    scope: &Scope,
    m: &Method,
    path: &[&str],
) -> Result<(), AdminError> {
    let Some((op, target)) = operation(m, path) else {
        return match scope {
            Scope::Workspace(_) if known(path) => Err(AdminError::Forbidden),
            _ => Ok(()),
        };
    };
    let workspace = match (scope, &target) {
        (Scope::Operator, _) | (_, Target::Nothing) => None,
        (_, Target::Workspace(ws)) => Some((*ws).to_owned()),
        (_, Target::Key(id)) => s.get_key(id).await?.map(|k| k.workspace_id),
    };
    let missing = || match target {
        Target::Workspace(ws) => format!("workspace {ws} not found"),
        Target::Key(id) => format!("key {id} not found"),
        Target::Nothing => format!("no admin route /{}", path.join("/")),
    };
    scope::permits(scope, op, workspace.as_deref()).check(missing)
}

/// Whether some method serves this path (so a wrong method is 405, not 404).
fn known(path: &[&str]) -> bool {
    matches!(
        path,
        ["workspaces"]
            | ["workspaces", _]
            | [
                "workspaces",
                _,
                "keys" | "credits" | "refunds" | "usage" | "alerts" | "management-keys"
            ]
            | ["workspaces", _, "usage", "daily"]
            | ["workspaces", _, "alerts", "deliveries"]
            | ["keys", _]
            | ["keys", _, "revoke" | "rotate"]
            | ["management-keys", _, "revoke"]
            | ["catalog"]
            | ["catalog", "models", _]
            | ["catalog", "models", _, "routes", _]
            | ["audit"]
    )
}

fn json_body<T: serde::de::DeserializeOwned>(req: &Request) -> Result<T, AdminError> {
    let body: &[u8] = if req.body.is_empty() {
        b"{}"
    } else {
        &req.body
    };
    let de = &mut serde_json::Deserializer::from_slice(body);
    serde_path_to_error::deserialize(de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        AdminError::Invalid(if path == "." {
            format!("body: {inner}")
        } else {
            format!("{path}: {inner}")
        })
    })
}

fn page(req: &Request) -> Result<PageRequest, AdminError> {
    Ok(PageRequest::parse(
        req.param("cursor").as_deref(),
        req.param("limit").as_deref(),
    )?)
}

/// A decimal given as a JSON string or number, as its exact text (a number is read from the
/// digits sent, never through a double; the command layer parses it digit by digit and
/// refuses more than 12 decimal places); null or blank is none.
fn decimal(field: &str, v: Option<&RawValue>) -> Result<Option<String>, AdminError> {
    v.map(json_decimal_text)
        .transpose()
        .map(Option::flatten)
        .map_err(|e| AdminError::Invalid(format!("{field}: {e}")))
}

fn ok(value: &impl Serialize) -> Answer {
    Ok(Response::json(StatusCode::OK, value))
}

fn created(value: &impl Serialize) -> Answer {
    Ok(Response::json(StatusCode::CREATED, value))
}

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SignIn {
    pub token: String,
}

#[derive(Serialize, ToSchema)]
pub struct Csrf {
    pub csrf_token: String,
}

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NameBody {
    /// 1 to 100 characters (trimmed), without control characters or bidirectional overrides.
    pub name: String,
}

#[utoipa::path(get, path = "/admin/v1/workspaces", tag = "workspaces",
    params(PageParams), responses((status = 200, body = commands::Page<WorkspaceView>)))]
pub async fn list_workspaces(s: &dyn Store, req: &Request) -> Answer {
    ok(&commands::workspaces_page(s, &page(req)?).await?)
}

#[utoipa::path(post, path = "/admin/v1/workspaces", tag = "workspaces", request_body = NameBody,
    responses((status = 201, body = crate::store::Workspace)))]
pub async fn create_workspace(s: &dyn Store, actor: &Actor, req: &Request) -> Answer {
    let body: NameBody = json_body(req)?;
    created(&commands::create_workspace(s, actor, &body.name).await?)
}

#[utoipa::path(get, path = "/admin/v1/workspaces/{ws}", tag = "workspaces",
    params(("ws" = String, Path)), responses((status = 200, body = WorkspaceView)))]
pub async fn get_workspace(s: &dyn Store, ws: &str) -> Answer {
    ok(&commands::workspace_view(s, ws).await?)
}

#[utoipa::path(patch, path = "/admin/v1/workspaces/{ws}", tag = "workspaces",
    params(("ws" = String, Path)), request_body = NameBody,
    responses((status = 200, body = crate::store::Workspace)))]
pub async fn rename_workspace(s: &dyn Store, actor: &Actor, ws: &str, req: &Request) -> Answer {
    let body: NameBody = json_body(req)?;
    ok(&commands::rename_workspace(s, actor, ws, &body.name).await?)
}

/// `cursor` and `limit` (1–200, default 50).
#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct PageParams {
    /// The `next_cursor` of the previous page.
    pub cursor: Option<String>,
    pub limit: Option<u32>,
}

#[utoipa::path(get, path = "/admin/v1/workspaces/{ws}/keys", tag = "keys",
    params(("ws" = String, Path), PageParams), responses((status = 200, body = commands::Page<KeyView>)))]
pub async fn list_keys(s: &dyn Store, ws: &str, req: &Request, now: DateTime<Utc>) -> Answer {
    ok(&commands::keys_page(s, ws, &page(req)?, now).await?)
}

/// A new key's settings.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewKeyBody {
    /// 1 to 100 characters (trimmed), without control characters or bidirectional overrides.
    pub name: Option<String>,
    pub expires_at: Option<DateTime<Utc>>,
    /// Exact decimal USD per window, with `limit_reset`: a string (`"2.5"`) or a JSON number
    /// read from its exact text (never rounded); at most 12 decimal places.
    #[schema(value_type = Option<String>)]
    pub spend_limit_usd: Option<Box<RawValue>>,
    pub limit_reset: Option<LimitReset>,
    /// Model id patterns the key may call: `*` matches any run of characters
    /// (`google/gemini-*`); a pattern admits a model when it matches the model's catalog id or
    /// one of its aliases. Absent or empty: every model. At most 64 patterns.
    #[serde(default)]
    pub allowed_models: Vec<String>,
}

/// A new key: its secret appears in this answer only.
#[derive(Serialize, ToSchema)]
pub struct KeyCreated {
    pub key: KeyView,
    pub secret: String,
}

#[utoipa::path(post, path = "/admin/v1/workspaces/{ws}/keys", tag = "keys",
    params(("ws" = String, Path)), request_body = NewKeyBody,
    responses((status = 201, body = KeyCreated)))]
pub async fn create_key(
    s: &dyn Store,
    actor: &Actor,
    prefix: &str,
    ws: &str,
    req: &Request,
    now: DateTime<Utc>,
) -> Answer {
    let body: NewKeyBody = json_body(req)?;
    let spend_limit_usd = decimal("spend_limit_usd", body.spend_limit_usd.as_deref())?;
    let request = KeyRequest {
        workspace: ws.to_owned(),
        name: body.name.filter(|n| !n.trim().is_empty()),
        expires_at: body.expires_at,
        spend_limit_usd,
        limit_reset: body.limit_reset,
        allowed_models: body.allowed_models,
    };
    let made = commands::create_key(s, actor, prefix, request).await?;
    created(&KeyCreated {
        key: KeyView::new(made.key, None, now),
        secret: made.secret,
    })
}

/// A change of a key's settings: each field left out stays as it is.
#[derive(Deserialize, ToSchema, Default)]
#[serde(deny_unknown_fields)]
pub struct KeyPatchBody {
    /// 1 to 100 characters (trimmed); `null` or blank: no name.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<String>)]
    pub name: Option<Option<String>>,
    /// The whole new list of model id patterns (see `NewKeyBody`); `[]` or `null`: every
    /// model.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<Vec<String>>)]
    pub allowed_models: Option<Option<Vec<String>>>,
    /// A new limit, exact decimal USD per window (string or JSON number, read from its exact
    /// text). A key without a limit needs `limit_reset` with it. A limit cannot be removed
    /// (`null` is refused) and its period, once set, cannot change: the gates count spend per
    /// window of that period.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<String>)]
    pub spend_limit_usd: Option<Option<Box<RawValue>>>,
    pub limit_reset: Option<LimitReset>,
}

/// A field that may be absent (`None`), `null` (`Some(None)`) or set.
fn present<'de, D, T>(d: D) -> Result<Option<Option<T>>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    Option::<T>::deserialize(d).map(Some)
}

#[utoipa::path(patch, path = "/admin/v1/keys/{key}", tag = "keys",
    params(("key" = String, Path)), request_body = KeyPatchBody,
    responses((status = 200, body = KeyView),
        (status = 400, description = "a bad name, pattern or limit; a limit removed or moved to \
            another period"),
        (status = 404, description = "no such key (or, for a management key, another \
            workspace's)")))]
pub async fn update_key(
    s: &dyn Store,
    actor: &Actor,
    id: &str,
    req: &Request,
    now: DateTime<Utc>,
) -> Answer {
    let body: KeyPatchBody = json_body(req)?;
    let spend_limit_usd = match body.spend_limit_usd {
        None => None,
        Some(None) => {
            return Err(AdminError::Invalid(
                "spend_limit_usd: a key's limit cannot be removed (set another amount, or \
                 create a key without one)"
                    .into(),
            ))
        }
        Some(Some(raw)) => decimal("spend_limit_usd", Some(&raw))?,
    };
    let patch = KeyPatch {
        name: body.name.map(|n| n.filter(|n| !n.trim().is_empty())),
        spend_limit_usd,
        limit_reset: body.limit_reset,
        allowed_models: body.allowed_models.map(Option::unwrap_or_default),
    };
    let key = commands::update_key(s, actor, id, patch).await?;
    let mut views = commands::key_views(s, vec![key], now).await?;
    match views.pop() {
        Some(view) => ok(&view),
        None => Err(AdminError::NotFound(format!("key {id} not found"))),
    }
}

#[utoipa::path(post, path = "/admin/v1/keys/{key}/revoke", tag = "keys",
    params(("key" = String, Path)), responses((status = 200, body = KeyView)))]
pub async fn revoke_key(s: &dyn Store, actor: &Actor, id: &str, now: DateTime<Utc>) -> Answer {
    commands::revoke_key(s, actor, id, now).await?;
    ok(&commands::key_view(s, id, now).await?)
}

#[derive(Deserialize, ToSchema, Default)]
#[serde(deny_unknown_fields)]
pub struct RotateBody {
    /// Seconds the old key keeps working (its `expires_at`, never later than it was); 0 or
    /// absent: revoked now. At most 2592000 (30 days). A key already rotated is refused
    /// (409): rotate its replacement.
    pub grace_seconds: Option<u64>,
}

#[derive(Serialize, ToSchema)]
pub struct KeyRotated {
    pub key: KeyView,
    pub secret: String,
    pub old: KeyView,
}

#[utoipa::path(post, path = "/admin/v1/keys/{key}/rotate", tag = "keys",
    params(("key" = String, Path)), request_body = RotateBody,
    responses((status = 201, body = KeyRotated),
        (status = 400, description = "grace_seconds over 2592000, or the key is revoked or expired"),
        (status = 409, description = "the key was already rotated (rotate its replacement)")))]
pub async fn rotate_key(
    s: &dyn Store,
    actor: &Actor,
    prefix: &str,
    id: &str,
    req: &Request,
    now: DateTime<Utc>,
) -> Answer {
    let body: RotateBody = json_body(req)?;
    let grace = body.grace_seconds.map(Duration::from_secs);
    let r = commands::rotate_key(s, actor, prefix, id, grace, now).await?;
    let mut views = commands::key_views(s, vec![r.key, r.old], now).await?;
    let (old, key) = (views.pop(), views.pop());
    let (Some(key), Some(old)) = (key, old) else {
        return Err(AdminError::NotFound(format!("key {id}")));
    };
    created(&KeyRotated {
        key,
        secret: r.secret,
        old,
    })
}

#[utoipa::path(get, path = "/admin/v1/workspaces/{ws}/credits", tag = "credits",
    params(("ws" = String, Path), PageParams), responses((status = 200, body = commands::LedgerPage)))]
pub async fn list_credits(s: &dyn Store, ws: &str, req: &Request) -> Answer {
    ok(&commands::ledger_page(s, ws, &page(req)?).await?)
}

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreditBody {
    /// Exact decimal USD, positive: a string (`"10.5"`) or a JSON number read from its exact
    /// text (never rounded); at most 12 decimal places. A credit that would take the balance
    /// past 9223372.036854775807 USD is refused (400).
    #[schema(value_type = String)]
    pub amount_usd: Box<RawValue>,
    /// Free text without control characters or bidirectional overrides.
    pub note: Option<String>,
}

/// The `Idempotency-Key` header of a credit movement.
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Header)]
pub struct IdempotencyHeader {
    /// 1 to 255 printable ASCII characters, such as a payment provider's event id. The same
    /// key with the same request within 24 hours answers the first answer again (the same
    /// status and body, with `Idempotent-Replayed: true`) and moves no credit; with another
    /// request it is refused (409 `idempotency_key_reused`). Keys are per workspace and
    /// operation; only a movement made is kept (a refused one may be retried with its key).
    #[param(rename = "Idempotency-Key")]
    pub idempotency_key: Option<String>,
}

#[utoipa::path(post, path = "/admin/v1/workspaces/{ws}/credits", tag = "credits",
    params(("ws" = String, Path), IdempotencyHeader), request_body = CreditBody,
    responses((status = 201, body = commands::Credited,
            description = "the credit made, or the first answer to its `Idempotency-Key`"),
        (status = 400, description = "an amount that is not a positive exact decimal, a \
            malformed `Idempotency-Key`, or a balance past the largest amount"),
        (status = 404, description = "no such workspace"),
        (status = 409, description = "`idempotency_key_reused`: the key was used for another \
            request")))]
pub async fn add_credit(s: &dyn Store, actor: &Actor, ws: &str, req: &Request) -> Answer {
    let body: CreditBody = json_body(req)?;
    let amount = decimal("amount_usd", Some(&body.amount_usd))?
        .ok_or_else(|| AdminError::Invalid("amount_usd: a decimal is needed".into()))?;
    let request = commands::CreditRequest {
        workspace: ws,
        usd: &amount,
        note: body.note.as_deref().filter(|n| !n.trim().is_empty()),
        idempotency_key: idempotency_key(req)?,
    };
    answered(commands::grant_credit(s, actor, &request).await?)
}

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RefundBody {
    /// Exact decimal USD to take back, positive, at most the balance: a string (`"1.5"`) or a
    /// JSON number read from its exact text (never rounded); at most 12 decimal places.
    #[schema(value_type = String)]
    pub amount_usd: Box<RawValue>,
    /// Why (required): free text without control characters or bidirectional overrides,
    /// kept as the ledger entry's note and in the audit log.
    pub reason: String,
}

#[utoipa::path(post, path = "/admin/v1/workspaces/{ws}/refunds", tag = "credits",
    params(("ws" = String, Path), IdempotencyHeader), request_body = RefundBody,
    responses((status = 201, body = commands::Credited,
            description = "the refund made (a `refund` ledger entry, negative), or the first \
            answer to its `Idempotency-Key`"),
        (status = 400, description = "an amount that is not a positive exact decimal, no \
            reason, or a malformed `Idempotency-Key`"),
        (status = 404, description = "no such workspace"),
        (status = 409, description = "`conflict`: more than the balance (only credit not spent \
            is refunded); `idempotency_key_reused`: the key was used for another request")))]
pub async fn refund(s: &dyn Store, actor: &Actor, ws: &str, req: &Request) -> Answer {
    let body: RefundBody = json_body(req)?;
    let amount = decimal("amount_usd", Some(&body.amount_usd))?
        .ok_or_else(|| AdminError::Invalid("amount_usd: a decimal is needed".into()))?;
    let request = commands::CreditRequest {
        workspace: ws,
        usd: &amount,
        note: Some(&body.reason),
        idempotency_key: idempotency_key(req)?,
    };
    answered(commands::refund_credit(s, actor, &request).await?)
}

/// The request's `Idempotency-Key`, if it sent one (its value is checked by the command).
fn idempotency_key(req: &Request) -> Result<Option<&str>, AdminError> {
    match req.headers.get("idempotency-key") {
        None => Ok(None),
        Some(v) => v.to_str().map(Some).map_err(|_| {
            AdminError::Invalid("Idempotency-Key: printable ASCII characters expected".into())
        }),
    }
}

/// A credit movement's answer: 201 with what was made, or with the first answer to its key.
fn answered(done: Done<commands::Credited>) -> Answer {
    match done {
        Done::Made(credited) => created(&credited),
        Done::Replayed(json) => {
            Ok(
                Response::new(StatusCode::CREATED, "application/json", json.into_bytes())
                    .with_header(
                        http::HeaderName::from_static("idempotent-replayed"),
                        "true".into(),
                    ),
            )
        }
    }
}

/// Which records: by key, model and a time range (RFC 3339; `from` inclusive, `to` not).
#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct UsageParams {
    pub key: Option<String>,
    pub model: Option<String>,
    pub from: Option<DateTime<Utc>>,
    pub to: Option<DateTime<Utc>>,
}

fn time_param(req: &Request, name: &str) -> Result<Option<DateTime<Utc>>, AdminError> {
    req.param(name)
        .map(|v| {
            DateTime::parse_from_rfc3339(&v)
                .map(|t| t.with_timezone(&Utc))
                .map_err(|_| AdminError::Invalid(format!("{name}: an RFC 3339 time expected")))
        })
        .transpose()
}

#[utoipa::path(get, path = "/admin/v1/workspaces/{ws}/usage", tag = "usage",
    params(("ws" = String, Path), UsageParams, PageParams),
    responses((status = 200, body = commands::Page<crate::store::UsageRecord>)))]
pub async fn list_usage(s: &dyn Store, ws: &str, req: &Request) -> Answer {
    let filter = UsageFilter {
        key_id: req.param("key"),
        model_id: req.param("model"),
        from: time_param(req, "from")?,
        to: time_param(req, "to")?,
    };
    ok(&commands::usage_page(s, ws, &filter, &page(req)?).await?)
}

/// UTC days, both included (`YYYY-MM-DD`); by default the last 30 days.
#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct DayParams {
    pub from: Option<NaiveDate>,
    pub to: Option<NaiveDate>,
}

#[derive(Serialize, ToSchema)]
pub struct DailyPage {
    pub data: Vec<crate::store::DailyUsage>,
}

#[utoipa::path(get, path = "/admin/v1/workspaces/{ws}/usage/daily", tag = "usage",
    params(("ws" = String, Path), DayParams), responses((status = 200, body = DailyPage)))]
pub async fn daily_usage(s: &dyn Store, ws: &str, req: &Request, now: DateTime<Utc>) -> Answer {
    let day = |name: &str| {
        req.param(name)
            .map(|v| {
                NaiveDate::parse_from_str(&v, "%Y-%m-%d")
                    .map_err(|_| AdminError::Invalid(format!("{name}: YYYY-MM-DD expected")))
            })
            .transpose()
    };
    let to = day("to")?.unwrap_or(now.date_naive());
    let from = match day("from")? {
        Some(from) => from,
        None => to
            .checked_sub_days(chrono::Days::new(29))
            .ok_or_else(|| AdminError::Invalid("to: too early a day".into()))?,
    };
    let data = commands::usage_daily(s, ws, from, to).await?;
    ok(&DailyPage { data })
}

#[utoipa::path(get, path = "/admin/v1/workspaces/{ws}/alerts", tag = "alerts",
    params(("ws" = String, Path)), responses((status = 200, body = crate::store::AlertSettings)))]
pub async fn get_alerts(s: &dyn Store, ws: &str) -> Answer {
    match s.get_alerts(ws).await? {
        Some(a) => ok(&a),
        None => Err(AdminError::NotFound(format!("no alerts set for {ws}"))),
    }
}

#[derive(ToSchema)]
pub struct AlertBody {
    pub webhook_url: String,
    /// Exact decimal USD, positive: a string or a JSON number read from its exact text
    /// (never rounded); at most 12 decimal places.
    #[schema(value_type = Option<String>)]
    pub low_balance_usd: Option<String>,
    pub key_limit_percents: Vec<u8>,
}

#[utoipa::path(put, path = "/admin/v1/workspaces/{ws}/alerts", tag = "alerts",
    params(("ws" = String, Path)), request_body = AlertBody,
    responses((status = 200, body = crate::store::AlertSettings)))]
pub async fn put_alerts(
    s: &dyn Store,
    actor: &Actor,
    ws: &str,
    req: &Request,
    allow_private: bool,
) -> Answer {
    let body: AlertRequest = json_body(req)?;
    ok(&commands::put_alerts(s, actor, ws, body, allow_private).await?)
}

#[utoipa::path(get, path = "/admin/v1/workspaces/{ws}/alerts/deliveries", tag = "alerts",
    params(("ws" = String, Path), PageParams),
    responses((status = 200, body = commands::Page<crate::store::Delivery>)))]
pub async fn list_deliveries(s: &dyn Store, ws: &str, req: &Request) -> Answer {
    ok(&commands::deliveries(s, ws, &page(req)?).await?)
}

#[derive(Serialize, ToSchema)]
pub struct CatalogDoc {
    pub models: Vec<commands::ModelView>,
}

#[utoipa::path(get, path = "/admin/v1/catalog", tag = "catalog",
    responses((status = 200, body = CatalogDoc)))]
pub async fn get_catalog(s: &dyn Store) -> Answer {
    ok(&CatalogDoc {
        models: commands::catalog_view(s).await?,
    })
}

#[utoipa::path(patch, path = "/admin/v1/catalog/models/{model}", tag = "catalog",
    params(("model" = String, Path, description = "percent-encoded model id")),
    request_body = ModelPatch, responses((status = 200, body = commands::ModelView)))]
pub async fn update_model(s: &dyn Store, actor: &Actor, id: &str, req: &Request) -> Answer {
    let patch: ModelPatch = json_body(req)?;
    ok(&commands::update_model(s, actor, id, patch).await?)
}

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RouteBody {
    pub active: bool,
}

#[utoipa::path(patch, path = "/admin/v1/catalog/models/{model}/routes/{n}", tag = "catalog",
    params(("model" = String, Path), ("n" = usize, Path, description = "0-based route position")),
    request_body = RouteBody, responses((status = 200, body = commands::ModelView)))]
pub async fn update_route(
    s: &dyn Store,
    actor: &Actor,
    id: &str,
    n: &str,
    req: &Request,
) -> Answer {
    let n = n
        .parse()
        .map_err(|_| AdminError::Invalid("route: a 0-based position".into()))?;
    let body: RouteBody = json_body(req)?;
    ok(&commands::set_route_active(s, actor, id, n, body.active).await?)
}

/// Only this workspace's entries.
#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct AuditParams {
    pub workspace: Option<String>,
}

#[utoipa::path(get, path = "/admin/v1/audit", tag = "audit", params(AuditParams, PageParams),
    responses((status = 200, body = commands::Page<crate::store::AuditEntry>)))]
pub async fn list_audit(s: &dyn Store, req: &Request) -> Answer {
    let ws = req.param("workspace");
    ok(&commands::audit_log(s, ws.as_deref(), &page(req)?).await?)
}

/// A workspace's management keys, newest first (never their secrets).
#[derive(Serialize, ToSchema)]
pub struct ManagementKeyList {
    pub data: Vec<ManagementKeyView>,
}

#[utoipa::path(get, path = "/admin/v1/workspaces/{ws}/management-keys", tag = "management keys",
    params(("ws" = String, Path)), responses((status = 200, body = ManagementKeyList)))]
pub async fn list_management_keys(s: &dyn Store, ws: &str, now: DateTime<Utc>) -> Answer {
    ok(&ManagementKeyList {
        data: commands::management_keys(s, ws, now).await?,
    })
}

/// A new management key's settings.
#[derive(Deserialize, ToSchema, Default)]
#[serde(deny_unknown_fields)]
pub struct NewManagementKeyBody {
    /// 1 to 100 characters (trimmed), without control characters or bidirectional overrides.
    pub name: Option<String>,
    /// When it stops working; absent: never.
    pub expires_at: Option<DateTime<Utc>>,
}

#[utoipa::path(post, path = "/admin/v1/workspaces/{ws}/management-keys", tag = "management keys",
    params(("ws" = String, Path)), request_body = NewManagementKeyBody,
    responses((status = 201, body = commands::CreatedManagementKey,
        description = "the key and its secret (`mk-tg-…`), shown in this answer only")))]
pub async fn create_management_key(
    s: &dyn Store,
    actor: &Actor,
    ws: &str,
    req: &Request,
    now: DateTime<Utc>,
) -> Answer {
    let body: NewManagementKeyBody = json_body(req)?;
    let request = ManagementKeyRequest {
        workspace: ws.to_owned(),
        name: body.name.filter(|n| !n.trim().is_empty()),
        expires_at: body.expires_at,
    };
    created(&commands::create_management_key(s, actor, request, now).await?)
}

#[utoipa::path(post, path = "/admin/v1/management-keys/{id}/revoke", tag = "management keys",
    params(("id" = String, Path)), responses((status = 200, body = ManagementKeyView)))]
pub async fn revoke_management_key(
    s: &dyn Store,
    actor: &Actor,
    id: &str,
    now: DateTime<Utc>,
) -> Answer {
    ok(&commands::revoke_management_key(s, actor, id, now).await?)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every route the table serves is classified, as the operation it is (so a management key
    /// is judged by what the call does, not by its path's shape).
    #[test]
    fn every_route_is_an_operation() {
        let routes: &[(Method, &str, Op)] = &[
            (Method::GET, "workspaces", Op::ListWorkspaces),
            (Method::POST, "workspaces", Op::CreateWorkspace),
            (Method::GET, "workspaces/w", Op::ReadWorkspace),
            (Method::PATCH, "workspaces/w", Op::RenameWorkspace),
            (Method::GET, "workspaces/w/keys", Op::ListKeys),
            (Method::POST, "workspaces/w/keys", Op::CreateKey),
            (Method::PATCH, "keys/k", Op::UpdateKey),
            (Method::POST, "keys/k/revoke", Op::RevokeKey),
            (Method::POST, "keys/k/rotate", Op::RotateKey),
            (Method::GET, "workspaces/w/credits", Op::ListCredits),
            (Method::POST, "workspaces/w/credits", Op::AddCredit),
            (Method::POST, "workspaces/w/refunds", Op::Refund),
            (Method::GET, "workspaces/w/usage", Op::ListUsage),
            (Method::GET, "workspaces/w/usage/daily", Op::DailyUsage),
            (Method::GET, "workspaces/w/alerts", Op::ReadAlerts),
            (Method::PUT, "workspaces/w/alerts", Op::SetAlerts),
            (
                Method::GET,
                "workspaces/w/alerts/deliveries",
                Op::ListDeliveries,
            ),
            (Method::GET, "catalog", Op::ReadCatalog),
            (Method::PATCH, "catalog/models/m", Op::UpdateModel),
            (Method::PATCH, "catalog/models/m/routes/0", Op::UpdateRoute),
            (Method::GET, "audit", Op::ReadAudit),
            (
                Method::GET,
                "workspaces/w/management-keys",
                Op::ListManagementKeys,
            ),
            (
                Method::POST,
                "workspaces/w/management-keys",
                Op::CreateManagementKey,
            ),
            (
                Method::POST,
                "management-keys/m/revoke",
                Op::RevokeManagementKey,
            ),
        ];
        for (method, path, want) in routes {
            let segments: Vec<&str> = path.split('/').collect();
            assert!(known(&segments), "{path}");
            let got = operation(method, &segments).map(|(op, _)| op);
            assert_eq!(got, Some(*want), "{method} {path}");
        }
        let classified: Vec<Op> = routes.iter().map(|r| r.2).collect();
        for op in Op::ALL.iter().filter(|op| **op != Op::Metrics) {
            assert!(classified.contains(op), "{op:?} has no route here");
        }
        assert!(operation(&Method::DELETE, &["workspaces", "w", "keys"]).is_none());
        assert!(operation(&Method::GET, &["keys", "k"]).is_none());
    }
}
