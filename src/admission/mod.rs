//! Admission: what the gateway decides about a request before anything goes upstream, and what
//! a finished request is billed ([`outcome`]). Plain functions over plain values — no Pingora,
//! no I/O, the clock passed in — so every branch is a unit test; the proxy phases only turn
//! the session into a [`RequestHead`] and a body and call in here.
//!
//! Two steps, because the body is read only for an authenticated request:
//! 1. [`Admission::head`]: endpoint and method, then the key (`/health` needs none) →
//!    a local answer, or "read the body".
//! 2. [`Admission::admit`]: parse the body once → model → gates (credit, then the key's spend
//!    window for chat) → route → the adapter's [`Plan`] (translated once).
//!
//! Every refusal is a [`GatewayError`], rendered by `api::error` alone.

pub mod outcome;

use std::sync::Arc;

use bytes::Bytes;
use chrono::{DateTime, Utc};

use crate::api::{GatewayError, Operation, RawRequest};
use crate::auth::{bearer_token, new_id, KeyCache};
use crate::billing::gates::Accounts;
use crate::catalog::{Model, ModelKind, Route, Snapshot};
use crate::providers::{adapter_for, Adapter, Credentials, Plan, ResponseCx, Target};
use crate::store::ApiKey;

const HEALTH_BODY: &[u8] = br#"{"status":"ok"}"#;

/// The parts of a request head admission reads (borrowed from the proxy's session).
#[derive(Debug, Clone, Copy)]
pub struct RequestHead<'a> {
    pub method: &'a http::Method,
    pub path: &'a str,
    /// The raw `Authorization` header, if any.
    pub authorization: Option<&'a [u8]>,
}

/// What the head alone decides.
#[derive(Debug)]
pub enum HeadDecision {
    /// Answer locally with this JSON body (`/health`, `/v1/models`).
    Answer(Bytes),
    /// An authenticated request for `op`: read its body, then [`Admission::admit`].
    ReadBody { op: Operation, key: Arc<ApiKey> },
}

/// An admitted request: who asked, for what, and how to reach it. Moved whole into a
/// subrequest when the body is too large for Pingora's replay buffer.
pub struct Admitted {
    pub op: Operation,
    pub key: Arc<ApiKey>,
    pub model: Arc<Model>,
    pub route: Route,
    pub adapter: &'static dyn Adapter,
    pub stream: bool,
    pub response_cx: ResponseCx,
}

/// An admitted request and what to send upstream for it.
pub struct Decision {
    pub admitted: Admitted,
    pub plan: Plan,
}

/// The read-mostly state admission consults; one catalog snapshot per request.
pub struct Admission<'a> {
    pub catalog: &'a Snapshot,
    pub keys: &'a KeyCache,
    pub accounts: &'a Accounts,
    pub credentials: &'a Credentials,
}

impl Admission<'_> {
    /// Endpoint, method and key: a local answer, or the go-ahead to read the body.
    pub fn head(
        &self,
        head: &RequestHead<'_>,
        now: DateTime<Utc>,
    ) -> Result<HeadDecision, GatewayError> {
        match classify(head.method, head.path)? {
            Endpoint::Health => Ok(HeadDecision::Answer(Bytes::from_static(HEALTH_BODY))),
            Endpoint::Models => {
                self.authenticate(head, now)?;
                Ok(HeadDecision::Answer(self.catalog.models_json()))
            }
            Endpoint::Proxied(op) => Ok(HeadDecision::ReadBody {
                op,
                key: self.authenticate(head, now)?,
            }),
        }
    }

    /// Parses the body and decides model, gates, route and the upstream plan.
    pub fn admit(
        &self,
        key: Arc<ApiKey>,
        op: Operation,
        body: &[u8],
        now: DateTime<Utc>,
    ) -> Result<Decision, GatewayError> {
        let req = RawRequest::parse(body, op)?;
        let model = self.model_for(&req, op)?;
        self.gates(&key, op, now)?;
        let route = route_for(&model)?;
        let adapter = adapter_for(model.family);
        let target = Target {
            model: &model,
            route: &route,
            op,
            stream: req.stream,
        };
        let plan = adapter.plan(&req, &target, self.credentials)?;
        let response_cx = ResponseCx {
            id: completion_id(op),
            model_id: model.id.clone(),
            op,
            created: now.timestamp(),
            exclude_reasoning: req.excludes_reasoning(),
        };
        let admitted = Admitted {
            op,
            key,
            stream: req.stream,
            model,
            route,
            adapter,
            response_cx,
        };
        Ok(Decision { admitted, plan })
    }

    fn authenticate(
        &self,
        head: &RequestHead<'_>,
        now: DateTime<Utc>,
    ) -> Result<Arc<ApiKey>, GatewayError> {
        self.keys
            .authenticate(bearer_token(head.authorization)?, now)
    }

    /// The catalog model the request names, if it serves this endpoint.
    fn model_for(&self, req: &RawRequest<'_>, op: Operation) -> Result<Arc<Model>, GatewayError> {
        let model = self
            .catalog
            .model(&req.model)
            .ok_or_else(|| GatewayError::ModelNotFound(req.model.as_ref().into()))?;
        match (op, model.kind) {
            (Operation::Embeddings, ModelKind::Chat) => Err(GatewayError::EmbeddingsUnsupported(
                model.id.as_ref().into(),
            )),
            (Operation::Chat, ModelKind::Embedding) => {
                Err(GatewayError::ChatUnsupported(model.id.as_ref().into()))
            }
            (Operation::Embeddings, _) if req.stream => {
                Err(GatewayError::invalid("embeddings cannot be streamed"))
            }
            _ => Ok(model.clone()),
        }
    }

    /// The gates: credit first (every billed endpoint), then the key's spend (chat only).
    fn gates(&self, key: &ApiKey, op: Operation, now: DateTime<Utc>) -> Result<(), GatewayError> {
        self.accounts.check_credit(&key.workspace_id)?;
        if op == Operation::Chat {
            self.accounts.check_spend(key, now)?;
        }
        Ok(())
    }
}

/// What a request path and method ask for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Endpoint {
    Health,
    Models,
    Proxied(Operation),
}

fn classify(method: &http::Method, path: &str) -> Result<Endpoint, GatewayError> {
    let (endpoint, allow) = match path {
        "/health" => (Endpoint::Health, "GET, HEAD"),
        "/v1/models" => (Endpoint::Models, "GET, HEAD"),
        "/v1/chat/completions" => (Endpoint::Proxied(Operation::Chat), "POST"),
        "/v1/embeddings" => (Endpoint::Proxied(Operation::Embeddings), "POST"),
        other => return Err(GatewayError::NotFound(other.into())),
    };
    let ok = match endpoint {
        Endpoint::Proxied(_) => method == http::Method::POST,
        _ => method == http::Method::GET || method == http::Method::HEAD,
    };
    if ok {
        Ok(endpoint)
    } else {
        Err(GatewayError::MethodNotAllowed {
            method: method.as_str().into(),
            allow,
        })
    }
}

/// The best route whose upstream host resolved.
fn route_for(model: &Model) -> Result<Route, GatewayError> {
    model
        .routes
        .iter()
        .find(|r| r.addr.is_some())
        .cloned()
        .ok_or_else(|| GatewayError::NoRoute(model.id.as_ref().into()))
}

/// A fresh completion id such as `chatcmpl-3fK…` (also the usage record's id).
fn completion_id(op: Operation) -> Arc<str> {
    let prefix = match op {
        Operation::Chat => "chatcmpl",
        Operation::Embeddings => "emb",
    };
    new_id(prefix).replacen('_', "-", 1).into()
}

#[cfg(test)]
mod tests;
