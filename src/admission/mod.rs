//! Admission: what the gateway decides about a request before anything goes upstream, and what
//! a finished request is billed ([`outcome`]). Plain functions over plain values — no Pingora,
//! no I/O, the clock passed in — so every branch is a unit test; the proxy phases only turn
//! the session into a [`RequestHead`] and a body and call in here.
//!
//! Two steps, because the body is read only for an authenticated request:
//! 1. [`Admission::head`]: endpoint and method, then the key (`/health` needs none) →
//!    a local answer, or "read the body".
//! 2. [`Admission::admit`]: parse the body once → model (and the fallbacks of `models`, held to
//!    the same rules, and to `provider`'s: [`routing`]) → gates (credit, then the key's spend
//!    window for chat), which reserve the request's [`worst_case`] (the dearest of its models')
//!    until it ends → route → the adapter's [`Plan`] (translated once).
//!
//! Failover asks again: [`Admission::fallbacks`] (where a failed attempt may go next: the
//! model's other routes, then the fallback models') and [`Admission::replan`].
//!
//! Every refusal is a [`GatewayError`], rendered by `api::error` alone.
// Money and token arithmetic is checked or saturating by rule: a wrap here gives credit away
// (tests may use plain operators).
#![cfg_attr(not(test), warn(clippy::arithmetic_side_effects))]

pub mod outcome;
pub mod routing;

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use chrono::{DateTime, Utc};
use serde::Serialize;

use crate::api::limits::Limits;
use crate::api::request::RoutingFields;
use crate::api::request::MAX_CHOICES;
use crate::api::{Door, GatewayError, Operation, RawRequest};
use crate::auth::{bearer_token, new_id, CachedKey, KeyCache, ModelAllowlist};
use crate::billing::gates::{Accounts, Reservation};
use crate::billing::record::CacheCreation;
use crate::billing::window::window_start;
use crate::catalog::health::State;
use crate::catalog::{Family, Model, ModelKind, Route, RouteApi, RouteKind, Snapshot};
use crate::doors::forward::{self, AnthropicHeaders};
use crate::doors::{bridged, messages, responses};
use crate::money::{self, Usd};
use crate::providers::anthropic::{self, native::AnthropicNative};
use crate::providers::openai_compat::OpenAiResponses;
use crate::providers::{
    adapter_for, Adapter, Credentials, Plan, ResponseCx, Target, UpstreamRequest,
};
use crate::store::{ApiKey, LimitReset};
use routing::{Asked, Prefs};

const HEALTH_BODY: &[u8] = br#"{"status":"ok"}"#;

/// The parts of a request head admission reads (borrowed from the proxy's session).
#[derive(Debug, Clone, Copy)]
pub struct RequestHead<'a> {
    pub method: &'a http::Method,
    pub path: &'a str,
    /// The query string, if any (`/v1/generation?id=…`).
    pub query: Option<&'a str>,
    /// The raw `Authorization` header, if any.
    pub authorization: Option<&'a [u8]>,
    /// The raw `x-api-key` header, if any (the Messages door takes the key there too).
    pub api_key: Option<&'a [u8]>,
    /// How many header fields the request has, and their names' and values' bytes.
    pub header_count: usize,
    pub header_bytes: usize,
}

/// What the head alone decides.
#[derive(Debug)]
pub enum HeadDecision {
    /// Answer locally with this JSON body (`/health`, `/v1/models`, `/v1/key`, `/v1/credits`).
    Answer(Bytes),
    /// `/v1/generation`: answer with the usage record `id` of this workspace, if it has one.
    Generation {
        workspace_id: Box<str>,
        id: Box<str>,
    },
    /// An authenticated request for `op`: read its body, then [`Admission::admit`].
    ReadBody { op: Operation, key: Arc<CachedKey> },
    /// An authenticated `count_tokens`: read its body, then [`Admission::count_tokens`].
    CountTokens { key: Arc<CachedKey> },
    /// `GET` or `DELETE /v1/responses/{id}`: the workspace's stored response `id`.
    StoredResponse {
        workspace_id: Box<str>,
        id: Box<str>,
        delete: bool,
    },
}

/// An admitted request: who asked, for what, and how to reach it (the route is the one being
/// tried: failover moves it).
pub struct Admitted {
    /// The request's id (`x-request-id`): the client's, else the completion id.
    pub request_id: Arc<str>,
    pub op: Operation,
    /// The front door it came through: the shape of its answers and errors.
    pub door: Door,
    pub key: Arc<CachedKey>,
    pub model: Arc<Model>,
    pub route: Route,
    pub adapter: &'static dyn Adapter,
    /// The client headers the door passes to a native upstream (`Target::forward`).
    pub forward: Vec<(http::HeaderName, http::HeaderValue)>,
    pub stream: bool,
    pub response_cx: ResponseCx,
    /// The request's worst case, held against the gates until the request ends (dropped with
    /// the context, after `logging` has charged the actual cost).
    pub reservation: Reservation,
    /// What the reservation assumed: billed instead of a usage that cannot be priced.
    pub worst_case: WorstCase,
    /// Input tokens estimated from the body (4 bytes a token), billed when a stream is cut
    /// short before the upstream counted its input.
    pub input_estimate: u64,
    /// The explicit cache this request's call created upstream (set by the proxy), billed on
    /// its record.
    pub cache_created: Option<CacheCreation>,
    /// On the Responses door with `store`: the conversation before the answer (Responses input
    /// items, a JSON array), kept with the answer for a later `previous_response_id`.
    pub kept_items: Option<Bytes>,
    /// What the request asked of routing (`models`, `provider`), for failover; `None` when it
    /// asked nothing (boxed: every open stream holds an `Admitted`).
    pub fallbacks: Option<Box<Fallbacks>>,
    /// `tollgate.waive_empty_failures`, for [`outcome`]: a failure with no output costs nothing.
    pub waive_empty_failures: bool,
}

/// The request-level routing an admitted request keeps for failover.
#[derive(Debug, Clone)]
pub struct Fallbacks {
    /// The models to fall back to after the one admitted, in order, each with its worst case.
    pub models: Vec<(Arc<Model>, WorstCase)>,
    pub prefs: Prefs,
}

/// Where failover may send a request next: a model (the admitted one, or a fallback) and one
/// of its routes.
#[derive(Debug, Clone)]
pub struct Candidate {
    pub model: Arc<Model>,
    pub route: Route,
    /// The request's worst case at this model's prices (what an unpriceable usage is billed).
    pub worst_case: WorstCase,
}

/// A request's plan for its next candidate ([`Admission::replan`]).
pub struct Replanned {
    pub plan: Plan,
    /// Set when the candidate is another model: how the door serves that one.
    pub switched: Option<Switched>,
}

/// How the door serves a fallback model ([`Admitted::serve_as`]).
pub struct Switched {
    adapter: &'static dyn Adapter,
    forward: Vec<(http::HeaderName, http::HeaderValue)>,
    translated: Option<Bytes>,
    kept_items: Option<Bytes>,
}

impl Admitted {
    /// Moves the request to `to` for its next attempt: its route, and when `to` is another
    /// model, that model (billed at its prices, named in the answer) and its worst case.
    pub fn move_to(&mut self, to: Candidate) {
        self.route = to.route;
        if to.model.id != self.model.id {
            self.response_cx.model_id = to.model.id.clone();
            self.model = to.model;
            self.worst_case = to.worst_case;
        }
    }

    /// Serves the request as `switched` says (a fallback model's adapter and forwarded
    /// headers); returns the body its plan was made from (`None`: the client's).
    pub fn serve_as(&mut self, switched: Switched) -> Option<Bytes> {
        self.adapter = switched.adapter;
        self.forward = switched.forward;
        self.kept_items = switched.kept_items;
        switched.translated
    }
}

/// An admitted request and what to send upstream for it.
pub struct Decision {
    pub admitted: Admitted,
    pub plan: Plan,
    /// The body adapters plan from when the door translated the client's (the Messages door
    /// on a route that does not speak it): what failover plans again from.
    pub translated: Option<Bytes>,
}

/// How a door serves a model ([`Admission::served`]).
struct Served {
    adapter: &'static dyn Adapter,
    /// The client headers passed to a native upstream (`Target::forward`).
    forward: Vec<(http::HeaderName, http::HeaderValue)>,
    /// The body translated onto the request model, when the door translates.
    translated: Option<Bytes>,
    /// The Responses door's conversation to keep with the answer ([`Admitted::kept_items`]).
    kept_items: Option<Bytes>,
    /// The Responses door's whole conversation, when it continues a kept response: what an
    /// upstream that speaks the Responses API is sent as `input`.
    conversation: Option<Bytes>,
    /// `translated` is a body of the door's own dialect, passed to a native upstream: only its
    /// head (`model`, `stream`) is read as the request model's.
    passed: bool,
}

/// What the Responses door translated for the model its body names, before the route is
/// chosen ([`Admission::admit`]).
struct DoorServed {
    served: Served,
    model_id: Arc<str>,
}

impl Served {
    /// The request the adapter plans from: the translated body's, else the client's.
    fn request<'a>(
        &'a self,
        client: RawRequest<'a>,
        op: Operation,
    ) -> Result<RawRequest<'a>, GatewayError> {
        match &self.translated {
            Some(passed) if self.passed => RawRequest::parse_head(passed),
            Some(chat) => RawRequest::parse(chat, op),
            None => Ok(client),
        }
    }

    /// [`request`](Self::request), the client's body still to parse.
    fn request_from<'a>(
        &'a self,
        client: &'a [u8],
        op: Operation,
    ) -> Result<RawRequest<'a>, GatewayError> {
        match &self.translated {
            Some(passed) if self.passed => RawRequest::parse_head(passed),
            Some(chat) => RawRequest::parse(chat, op),
            None => RawRequest::parse(client, op),
        }
    }

    /// The Responses door on a route whose upstream speaks the Responses API: the client's
    /// `body` passed to it (with the whole conversation as `input` when the request continues a
    /// kept response: the upstream keeps nothing of this gateway's).
    fn passed_through(self, body: &[u8]) -> Result<Served, GatewayError> {
        let passed = match &self.conversation {
            Some(conversation) => responses::with_input(body, conversation)?,
            None => body.to_vec(),
        };
        Ok(Served {
            adapter: &OpenAiResponses,
            forward: Vec::new(),
            translated: Some(Bytes::from(passed)),
            kept_items: self.kept_items,
            conversation: None,
            passed: true,
        })
    }
}

/// The request model read from what `admitted` was planned from.
fn planned_request<'a>(
    admitted: &Admitted,
    body: &'a [u8],
) -> Result<RawRequest<'a>, GatewayError> {
    if passes_responses_through(admitted) {
        RawRequest::parse_head(body)
    } else {
        RawRequest::parse(body, admitted.op)
    }
}

/// Whether `admitted` goes to its upstream in the Responses API's own shapes.
fn passes_responses_through(admitted: &Admitted) -> bool {
    admitted.door == Door::Responses && admitted.route.api == RouteApi::Responses
}

/// A `count_tokens` request: the upstream call that counts, on the route chosen for it.
pub struct Counting {
    pub route: Route,
    pub adapter: &'static dyn Adapter,
    pub request: UpstreamRequest,
}

/// The read-mostly state admission consults; one catalog snapshot per request.
pub struct Admission<'a> {
    pub catalog: &'a Snapshot,
    pub keys: &'a KeyCache,
    pub accounts: &'a Accounts,
    pub credentials: &'a Credentials,
    /// Refuse what the unreserved credit cannot pay for in full (`tollgate.strict_credit`).
    pub strict_credit: bool,
    /// Bill nothing for a request with no output that failed
    /// (`tollgate.waive_empty_failures`; [`outcome::waived`]).
    pub waive_empty_failures: bool,
    /// The longest an explicit context cache may live (`tollgate.max_cache_ttl`).
    pub max_cache_ttl: Duration,
    /// What one request may carry (`tollgate.limits`).
    pub limits: &'a Limits,
    /// A number that differs between requests (a counter): routes of equal priority take
    /// turns by it.
    pub route_turn: u64,
    /// When the request arrived, for route health.
    pub now: Instant,
    /// The client's request id, if it sent a usable one ([`client_request_id`]).
    pub request_id: Option<Arc<str>>,
    /// The front door the request came through ([`door_of`] its path).
    pub door: Door,
    /// On the Messages door: the client's `anthropic-version` and `anthropic-beta`.
    pub anthropic: AnthropicHeaders,
    /// The betas the Messages door may pass to Claude (`tollgate.providers.anthropic.betas`).
    pub anthropic_betas: &'a [String],
    /// On the Responses door: the stored conversation the body's `previous_response_id`
    /// continues (its items, then its answer's output items: a JSON array), looked up by the
    /// proxy for the key's workspace.
    pub previous: Option<&'a [u8]>,
}

impl Admission<'_> {
    /// Endpoint, method and key: a local answer, or the go-ahead to read the body.
    pub fn head(
        &self,
        head: &RequestHead<'_>,
        now: DateTime<Utc>,
    ) -> Result<HeadDecision, GatewayError> {
        self.limits
            .check_headers(head.header_count, head.header_bytes)?;
        match classify(head.method, head.path)? {
            Endpoint::Health => Ok(HeadDecision::Answer(Bytes::from_static(HEALTH_BODY))),
            Endpoint::Models => {
                let key = self.authenticate(head, now)?;
                Ok(HeadDecision::Answer(self.models_json(&key.models)))
            }
            Endpoint::Key => {
                let key = self.authenticate(head, now)?;
                Ok(HeadDecision::Answer(self.key_view(&key, now)))
            }
            Endpoint::Credits => {
                let key = self.authenticate(head, now)?;
                Ok(HeadDecision::Answer(self.credits_view(&key.workspace_id)))
            }
            Endpoint::Generation => {
                let key = self.authenticate(head, now)?;
                Ok(HeadDecision::Generation {
                    workspace_id: key.workspace_id.as_str().into(),
                    id: generation_id(head.query)?,
                })
            }
            Endpoint::Proxied(op) => Ok(HeadDecision::ReadBody {
                op,
                key: self.authenticate(head, now)?,
            }),
            Endpoint::CountTokens => Ok(HeadDecision::CountTokens {
                key: self.authenticate(head, now)?,
            }),
            Endpoint::StoredResponse => {
                let key = self.authenticate(head, now)?;
                let id = head.path.trim_start_matches("/v1/responses/");
                if !plain_id(id.as_bytes()) {
                    return Err(GatewayError::NotFound(head.path.into()));
                }
                Ok(HeadDecision::StoredResponse {
                    workspace_id: key.workspace_id.as_str().into(),
                    id: id.into(),
                    delete: head.method == http::Method::DELETE,
                })
            }
        }
    }

    /// Parses the body and decides model, gates, route and the upstream plan.
    pub fn admit(
        &self,
        key: Arc<CachedKey>,
        op: Operation,
        body: &[u8],
        now: DateTime<Utc>,
    ) -> Result<Decision, GatewayError> {
        // The Responses door's fields are not the request model's: its body is read onto the
        // chat body first, and everything below (limits, reservation, plan) reads that.
        let (door_served, chat, routing_fields) = match self.door {
            Door::Responses => {
                let (served, chat, routing) = self.responses_onto_chat(body)?;
                (Some(served), Some(chat), Some(routing))
            }
            _ => (None, None, None),
        };
        let client_body = body;
        let body = chat.as_deref().unwrap_or(body);
        let req = RawRequest::parse(body, op)?;
        let asked = Asked::read(&routing_fields.unwrap_or(req.routing))?;
        let named = self.named_models(&key, &req, op, &asked)?;
        let mut fitting = self.fitting(&req, op, body, named, &asked.prefs)?;
        let reservation = self.reserve(&key, op, &fitting, &req, body, now)?;
        let (first, route) = self.first_route(&fitting, &req, &asked.prefs)?;
        let later = fitting.split_off(first.saturating_add(1));
        let Some((model, worst_case)) = fitting.pop() else {
            return Err(GatewayError::Internal("no model admitted".into()));
        };
        let fallbacks = (!later.is_empty() || !asked.is_plain()).then(|| {
            Box::new(Fallbacks {
                models: later,
                prefs: asked.prefs,
            })
        });
        let served = match door_served {
            // The door translated for the model the request names: kept unless a later one
            // serves first.
            Some(served) if served.model_id == model.id => match route.api {
                RouteApi::Responses => served.served.passed_through(client_body)?,
                RouteApi::Chat => served.served,
            },
            Some(_) => self.serve(&model, &route, client_body)?,
            None => self.served(&model, body, Some(&req))?,
        };
        let translated = served.translated.clone().or_else(|| chat.clone());
        let req = served.request(req, op)?;
        let target = Target {
            model: &model,
            route: &route,
            op,
            stream: req.stream,
            max_cache_ttl: self.max_cache_ttl,
            forward: &served.forward,
        };
        let plan = served.adapter.plan(&req, &target, self.credentials)?;
        let response_cx = ResponseCx {
            id: completion_id(op, self.door),
            model_id: model.id.clone(),
            op,
            created: now.timestamp(),
            exclude_reasoning: req.excludes_reasoning(),
        };
        let admitted = Admitted {
            request_id: self
                .request_id
                .clone()
                .unwrap_or_else(|| response_cx.id.clone()),
            op,
            door: self.door,
            key,
            stream: req.stream,
            model,
            route,
            adapter: served.adapter,
            forward: served.forward,
            response_cx,
            reservation,
            worst_case,
            input_estimate: (body.len() as u64).div_ceil(4),
            cache_created: None,
            kept_items: served.kept_items,
            fallbacks,
            waive_empty_failures: self.waive_empty_failures,
        };
        Ok(Decision {
            admitted,
            plan,
            translated,
        })
    }

    /// Every model the request names — its `model`, then its `models` — each resolved and
    /// checked alike ([`usable_model`](Self::usable_model)): one the client cannot have is a
    /// refusal wherever it stands. Each model once, in order.
    fn named_models(
        &self,
        key: &CachedKey,
        req: &RawRequest<'_>,
        op: Operation,
        asked: &Asked<'_>,
    ) -> Result<Vec<Arc<Model>>, GatewayError> {
        let mut named = Vec::with_capacity(asked.models.len().saturating_add(1));
        let ids = std::iter::once(&req.model).chain(&asked.models);
        for id in ids {
            // Every model a request names is held to the key's allowlist: a fallback too.
            let model = self.model_named(id, op, req.stream)?;
            allowed(&key.models, id, &model)?;
            if !named.iter().any(|m: &Arc<Model>| m.id == model.id) {
                named.push(model);
            }
        }
        Ok(named)
    }

    /// The named models that can take this request, each with its worst case: the door's
    /// rules, the limits (the context window is the model's), a reservable worst case,
    /// `provider.max_price`, and a route `provider` allows. One that cannot is left out; when
    /// none can, the first one's refusal is the answer.
    fn fitting(
        &self,
        req: &RawRequest<'_>,
        op: Operation,
        body: &[u8],
        named: Vec<Arc<Model>>,
        prefs: &Prefs,
    ) -> Result<Vec<(Arc<Model>, WorstCase)>, GatewayError> {
        let mut fitting = Vec::with_capacity(named.len());
        let mut refusal = None;
        for model in named {
            match self.fits(req, op, body, &model, prefs) {
                Ok(worst) => fitting.push((model, worst)),
                Err(e) => {
                    refusal.get_or_insert(e);
                }
            }
        }
        match refusal {
            Some(e) if fitting.is_empty() => Err(e),
            _ => Ok(fitting),
        }
    }

    /// Whether `model` can take the request ([`fitting`](Self::fitting)), and its worst case.
    fn fits(
        &self,
        req: &RawRequest<'_>,
        op: Operation,
        body: &[u8],
        model: &Model,
        prefs: &Prefs,
    ) -> Result<WorstCase, GatewayError> {
        self.check_door(req, model)?;
        self.limits
            .check(req, op, body.len(), model.context_window)?;
        let worst = worst_case(model, req, body, op, self.max_cache_ttl).ok_or_else(|| {
            GatewayError::invalid(
                "the request's worst-case cost exceeds what one request may reserve \
                 (about 9.2 million USD): lower max_tokens, n or the input",
            )
        })?;
        if !prefs.max_price.admits(model, body.len() as u64) {
            return Err(GatewayError::NoRouteWithinPrice(
                prefs.max_price.to_string().into(),
            ));
        }
        if !prefs.allows_model(model) {
            return Err(GatewayError::NoAllowedRoute(model.id.as_ref().into()));
        }
        Ok(worst)
    }

    /// The first of the fitting models with a route ([`route_for`]), its place and the route;
    /// when none has one, the first one's refusal.
    fn first_route(
        &self,
        fitting: &[(Arc<Model>, WorstCase)],
        req: &RawRequest<'_>,
        prefs: &Prefs,
    ) -> Result<(usize, Route), GatewayError> {
        let mut refusal = None;
        for (i, (model, _)) in fitting.iter().enumerate() {
            match route_for(
                model,
                req,
                self.credentials,
                prefs,
                self.route_turn,
                self.now,
            ) {
                Ok(route) => return Ok((i, route)),
                Err(e) => {
                    refusal.get_or_insert(e);
                }
            }
        }
        Err(refusal.unwrap_or_else(|| GatewayError::Internal("no model to route".into())))
    }

    /// How the door serves `model` on `route`: [`served`](Self::served), passed through to a
    /// route that speaks the Responses API on the Responses door.
    fn serve(&self, model: &Model, route: &Route, client: &[u8]) -> Result<Served, GatewayError> {
        let served = self.served(model, client, None)?;
        match (self.door, route.api) {
            (Door::Responses, RouteApi::Responses) => served.passed_through(client),
            _ => Ok(served),
        }
    }

    /// `count_tokens` (the Messages door): the model's best route and the upstream call that
    /// counts the body's input tokens. Authenticated, but neither gated nor billed.
    pub fn count_tokens(
        &self,
        models: &ModelAllowlist,
        body: &[u8],
    ) -> Result<Counting, GatewayError> {
        let req = RawRequest::parse(body, Operation::Chat)?;
        let model = self.model_for(&req, Operation::Chat)?;
        allowed(models, &req.model, &model)?;
        // Counting sends the prompt upstream too: `provider.only` and `ignore` hold for it.
        let prefs = Asked::read(&req.routing)?.prefs;
        let route = route_for(
            &model,
            &req,
            self.credentials,
            &prefs,
            self.route_turn,
            self.now,
        )?;
        let served = self.served(&model, body, Some(&req))?;
        let req = served.request(req, Operation::Chat)?;
        let target = Target {
            model: &model,
            route: &route,
            op: Operation::Chat,
            stream: false,
            max_cache_ttl: self.max_cache_ttl,
            forward: &served.forward,
        };
        let request = served
            .adapter
            .count_tokens(&req, &target, self.credentials)?;
        Ok(Counting {
            route,
            adapter: served.adapter,
            request,
        })
    }

    /// The Responses door's body read onto the chat body for the model it names (whose family
    /// decides where cache breakpoints go): how the door serves it, planning from the chat body
    /// as it is (`translated` unset: there is nothing else to parse), that body, and the body's
    /// routing fields (the chat body has none).
    fn responses_onto_chat<'b>(
        &self,
        body: &'b [u8],
    ) -> Result<(DoorServed, Bytes, RoutingFields<'b>), GatewayError> {
        let head = RawRequest::parse_head(body)?;
        let model = self.model_for(&head, Operation::Chat)?;
        let mut served = self.served(&model, body, Some(&head))?;
        let chat = served.translated.take().unwrap_or_default();
        let door_served = DoorServed {
            served,
            model_id: model.id.clone(),
        };
        Ok((door_served, chat, head.routing))
    }

    /// What the door requires of a body beyond the request model's own fields: Anthropic's
    /// `max_tokens` on the Messages door; on the chat door, no tools for Claude (the
    /// specification's rule: the Messages and Responses doors offer them, the chat door
    /// refuses them rather than drop them).
    fn check_door(&self, req: &RawRequest<'_>, model: &Model) -> Result<(), GatewayError> {
        match (self.door, model.family) {
            (Door::Messages, _) if req.get("max_tokens").is_none() => {
                Err(GatewayError::invalid("max_tokens: Field required"))
            }
            (Door::OpenAi, Family::Anthropic) => match anthropic::tool_parameter(req) {
                Some(param) => Err(GatewayError::UnsupportedParameter {
                    param,
                    model: model.id.as_ref().into(),
                }),
                None => Ok(()),
            },
            _ => Ok(()),
        }
    }

    /// How this door serves `model`: the family's own adapter on the OpenAI door; on the
    /// Messages door Claude's native pass-through (with the client headers it forwards), or the
    /// family's adapter behind the door's translation of the body. `head`: the body's fields,
    /// when the caller has read them already.
    fn served(
        &self,
        model: &Model,
        body: &[u8],
        head: Option<&RawRequest<'_>>,
    ) -> Result<Served, GatewayError> {
        let (mut kept_items, mut conversation) = (None, None);
        let (adapter, translated): (&'static dyn Adapter, _) = match (self.door, model.family) {
            (Door::OpenAi, family) => (adapter_for(family), None),
            (Door::Messages, Family::Anthropic) => (&AnthropicNative, None),
            (Door::Messages, family) => {
                let chat = match head {
                    Some(head) => messages::to_chat_from(head)?,
                    None => messages::to_chat(body)?,
                };
                (bridged(Door::Messages, family), Some(Bytes::from(chat)))
            }
            (Door::Responses, family) => {
                let parsed = match head {
                    Some(head) => responses::parse_from(head, self.previous, family)?,
                    None => responses::parse(body, self.previous, family)?,
                };
                let items = Bytes::from(parsed.items);
                kept_items = parsed.store.then(|| items.clone());
                conversation = self.previous.is_some().then_some(items);
                (
                    bridged(Door::Responses, family),
                    Some(Bytes::from(parsed.chat)),
                )
            }
        };
        let forward = match (self.door, model.family) {
            (Door::Messages, Family::Anthropic) => {
                forward::anthropic(&self.anthropic, self.anthropic_betas, model)
            }
            _ => Vec::new(),
        };
        Ok(Served {
            adapter,
            forward,
            translated,
            kept_items,
            conversation,
            passed: false,
        })
    }

    /// The gates: the request's worst case — the dearest of its fitting models' — reserved
    /// against its workspace's credit and (chat) its key's window; a strict refusal says what
    /// the credit affords at that model's prices.
    fn reserve(
        &self,
        key: &ApiKey,
        op: Operation,
        fitting: &[(Arc<Model>, WorstCase)],
        req: &RawRequest<'_>,
        body: &[u8],
        now: DateTime<Utc>,
    ) -> Result<Reservation, GatewayError> {
        let ttl = self.max_cache_ttl;
        let Some((model, worst)) = fitting.iter().max_by_key(|(_, w)| w.cost) else {
            return Err(GatewayError::Internal("no model to reserve for".into()));
        };
        self.accounts
            .reserve(
                key,
                op == Operation::Chat,
                worst.cost,
                self.strict_credit,
                now,
            )
            .map_err(|e| match e {
                GatewayError::InsufficientCredit if self.strict_credit => {
                    let free = self.accounts.unreserved(&key.workspace_id);
                    GatewayError::CreditShort {
                        affordable_output_tokens: affordable_output(model, req, body, ttl, free),
                    }
                }
                other => other,
            })
    }

    /// `GET /v1/models`: the catalog's list rendered once per snapshot, or, for a key with an
    /// allowlist, the models it may call (rendered for the request: the unrestricted path
    /// stays a reference-count increment).
    fn models_json(&self, models: &ModelAllowlist) -> Bytes {
        if models.is_unrestricted() {
            self.catalog.models_json()
        } else {
            self.catalog.models_json_where(|m| models.lists(m))
        }
    }

    /// `GET /v1/key`: the calling key's own settings and state — never its secret — and its
    /// workspace's credit, as this gateway sees them.
    fn key_view(&self, key: &ApiKey, now: DateTime<Utc>) -> Bytes {
        #[derive(Serialize)]
        struct KeyView<'a> {
            object: &'static str,
            id: &'a str,
            name: Option<&'a str>,
            hint: &'a str,
            created_at: DateTime<Utc>,
            expires_at: Option<DateTime<Utc>>,
            spend_limit_usd: Option<Usd>,
            limit_reset: Option<&'static str>,
            /// The current spend window: its start and what the key spent in it.
            window_start: Option<DateTime<Utc>>,
            window_spend_usd: Option<Usd>,
            /// The model patterns the key may call; empty: every model.
            allowed_models: &'a [String],
            workspace: WorkspaceView<'a>,
        }
        #[derive(Serialize)]
        struct WorkspaceView<'a> {
            id: &'a str,
            credit_usd: Usd,
        }
        let window = key.limit_reset.map(|reset| window_start(reset, now));
        let view = KeyView {
            object: "key",
            id: &key.id,
            name: key.name.as_deref(),
            hint: &key.hint,
            created_at: key.created_at,
            expires_at: key.expires_at,
            spend_limit_usd: key.spend_limit,
            limit_reset: key.limit_reset.map(LimitReset::as_str),
            window_start: window,
            window_spend_usd: window.map(|w| self.accounts.spent(&key.id, w)),
            allowed_models: &key.allowed_models,
            workspace: WorkspaceView {
                id: &key.workspace_id,
                credit_usd: self.accounts.balance(&key.workspace_id),
            },
        };
        serde_json::to_vec(&view)
            .map(Bytes::from)
            .unwrap_or_default()
    }

    /// `GET /v1/credits`: the workspace's credit as this gateway sees it, in OpenRouter's
    /// shape (`total_credits`, `total_usage`) and tollgate's (`balance`, `reserved`), every
    /// amount a JSON number with the ledger's exact digits. From memory, like the gates: the
    /// balance row as last read (the change feed, the ledger writer) less this process's
    /// charges not yet committed, and its requests in flight.
    fn credits_view(&self, workspace_id: &str) -> Bytes {
        #[derive(Serialize)]
        struct Answer {
            data: Data,
        }
        #[derive(Serialize)]
        struct Data {
            #[serde(serialize_with = "money::as_number")]
            total_credits: Usd,
            #[serde(serialize_with = "money::as_number")]
            total_usage: Usd,
            #[serde(serialize_with = "money::as_number")]
            balance: Usd,
            #[serde(serialize_with = "money::as_number")]
            reserved: Usd,
            currency: &'static str,
        }
        let credits = self.accounts.credits(workspace_id);
        let data = Data {
            total_credits: credits.credited,
            total_usage: credits.charged(),
            balance: credits.balance,
            reserved: credits.reserved,
            currency: "USD",
        };
        serde_json::to_vec(&Answer { data })
            .map(Bytes::from)
            .unwrap_or_default()
    }

    fn authenticate(
        &self,
        head: &RequestHead<'_>,
        now: DateTime<Utc>,
    ) -> Result<Arc<CachedKey>, GatewayError> {
        let token = match (self.door, head.api_key) {
            (Door::Messages, Some(key)) => std::str::from_utf8(key)
                .ok()
                .map(str::trim)
                .filter(|k| !k.is_empty())
                .ok_or(GatewayError::MissingAuth)?,
            _ => bearer_token(head.authorization)?,
        };
        self.keys.authenticate(token, now)
    }

    /// Where to try next, in order, when an admitted request's attempt failed before
    /// answering ([`candidates`]); `planned_from` is the body its plan was made from.
    pub fn fallbacks(&self, admitted: &Admitted, planned_from: &[u8]) -> Vec<Candidate> {
        let Ok(req) = planned_request(admitted, planned_from) else {
            return Vec::new();
        };
        candidates(admitted, &req, self.credentials, Instant::now())
    }

    /// The plan of an admitted request for `to` (failover): from the body it was planned from
    /// (`planned_from`) on another route of its model; for a fallback model, from the client's
    /// body (`client`) as the door serves that model — unless an attempt created a context
    /// cache (billed on the record at the answering model's prices).
    pub fn replan(
        &self,
        admitted: &Admitted,
        client: &[u8],
        planned_from: &[u8],
        to: &Candidate,
    ) -> Result<Replanned, GatewayError> {
        if to.model.id == admitted.model.id {
            let req = planned_request(admitted, planned_from)?;
            let target = Target {
                model: &admitted.model,
                route: &to.route,
                op: admitted.op,
                stream: admitted.stream,
                max_cache_ttl: self.max_cache_ttl,
                forward: &admitted.forward,
            };
            let plan = admitted.adapter.plan(&req, &target, self.credentials)?;
            return Ok(Replanned {
                plan,
                switched: None,
            });
        }
        if admitted.cache_created.is_some() {
            // The record prices the context cache a failed attempt created at the model that
            // answers: another model's prices would misprice what Google bills for it.
            return Err(GatewayError::invalid(
                "a context cache was created for this request's model: no fallback model",
            ));
        }
        let served = self.serve(&to.model, &to.route, client)?;
        let plan = {
            let req = served.request_from(client, admitted.op)?;
            let target = Target {
                model: &to.model,
                route: &to.route,
                op: admitted.op,
                stream: admitted.stream,
                max_cache_ttl: self.max_cache_ttl,
                forward: &served.forward,
            };
            served.adapter.plan(&req, &target, self.credentials)?
        };
        Ok(Replanned {
            plan,
            switched: Some(Switched {
                adapter: served.adapter,
                forward: served.forward,
                translated: served.translated,
                kept_items: served.kept_items,
            }),
        })
    }

    /// The catalog model the request names, if it serves this endpoint.
    fn model_for(&self, req: &RawRequest<'_>, op: Operation) -> Result<Arc<Model>, GatewayError> {
        self.model_named(&req.model, op, req.stream)
    }

    /// The catalog model `id` names, if it serves this endpoint (`stream`ed or not).
    fn model_named(
        &self,
        id: &str,
        op: Operation,
        stream: bool,
    ) -> Result<Arc<Model>, GatewayError> {
        let model = self
            .catalog
            .model(id)
            .ok_or_else(|| GatewayError::ModelNotFound(id.into()))?;
        match (op, model.kind) {
            (Operation::Embeddings, ModelKind::Chat) => Err(GatewayError::EmbeddingsUnsupported(
                model.id.as_ref().into(),
            )),
            (Operation::Chat, ModelKind::Embedding) => {
                Err(GatewayError::ChatUnsupported(model.id.as_ref().into()))
            }
            (Operation::Embeddings, _) if stream => {
                Err(GatewayError::invalid("embeddings cannot be streamed"))
            }
            _ => Ok(model.clone()),
        }
    }
}

/// The key's allowlist admits the model the request names (by that name, the catalog id it
/// resolved to, or another alias: `auth::allowlist`), or the request is refused — before any
/// reservation or upstream call.
fn allowed(models: &ModelAllowlist, name: &str, model: &Model) -> Result<(), GatewayError> {
    if models.allows(name, model) {
        Ok(())
    } else {
        Err(GatewayError::ModelNotAllowed(name.into()))
    }
}

/// What a request path and method ask for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Endpoint {
    Health,
    Models,
    Key,
    Credits,
    Generation,
    Proxied(Operation),
    CountTokens,
    StoredResponse,
}

/// The front door a path belongs to.
pub fn door_of(path: &str) -> Door {
    if path.starts_with("/v1/messages") {
        Door::Messages
    } else if path.starts_with("/v1/responses") {
        Door::Responses
    } else {
        Door::OpenAi
    }
}

fn classify(method: &http::Method, path: &str) -> Result<Endpoint, GatewayError> {
    let (endpoint, allow) = match path {
        "/health" => (Endpoint::Health, "GET, HEAD"),
        "/v1/models" => (Endpoint::Models, "GET, HEAD"),
        "/v1/key" => (Endpoint::Key, "GET, HEAD"),
        "/v1/credits" => (Endpoint::Credits, "GET, HEAD"),
        "/v1/generation" => (Endpoint::Generation, "GET, HEAD"),
        "/v1/chat/completions" => (Endpoint::Proxied(Operation::Chat), "POST"),
        "/v1/embeddings" => (Endpoint::Proxied(Operation::Embeddings), "POST"),
        "/v1/messages" => (Endpoint::Proxied(Operation::Chat), "POST"),
        "/v1/messages/count_tokens" => (Endpoint::CountTokens, "POST"),
        "/v1/responses" => (Endpoint::Proxied(Operation::Chat), "POST"),
        stored if stored.starts_with("/v1/responses/") => {
            (Endpoint::StoredResponse, "GET, HEAD, DELETE")
        }
        other => return Err(GatewayError::NotFound(other.into())),
    };
    let ok = match endpoint {
        Endpoint::Proxied(_) | Endpoint::CountTokens => method == http::Method::POST,
        Endpoint::StoredResponse => {
            [http::Method::GET, http::Method::HEAD, http::Method::DELETE].contains(method)
        }
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

/// Output tokens reserved for a model whose catalog entry gives neither an output cap nor a
/// context window.
const DEFAULT_MAX_OUTPUT: u64 = 32_768;

/// The most a request can cost, at the model's prices, and the token counts behind it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WorstCase {
    pub cost: Usd,
    /// Input tokens assumed: one per body byte.
    pub input_tokens: u64,
    /// Output tokens assumed, all choices together.
    pub output_tokens: u64,
}

/// The most a request can cost, at the model's prices: every body byte taken as an input token
/// (an upper bound for text, since a token is at least one byte; images and audio count far
/// fewer tokens than their bytes) at the dearest input price (cache writes and audio included)
/// of the tier that many tokens fall in, plus the maximum output ([`max_output`]) for each of
/// `n` choices, plus, when the request marks a cache breakpoint on a model that prices cache
/// storage, storing every byte for the longest TTL. Embeddings produce no output.
///
/// `None` when it does not fit `i64` pico-USD (about 9.2 million USD): such a request cannot
/// be reserved, so it is refused before anything goes upstream.
pub fn worst_case(
    model: &Model,
    req: &RawRequest<'_>,
    body: &[u8],
    op: Operation,
    max_cache_ttl: Duration,
) -> Option<WorstCase> {
    let input_tokens = body.len() as u64;
    let rates = model.pricing.rates_for(input_tokens);
    let output_tokens = match op {
        Operation::Embeddings => 0,
        Operation::Chat => max_output(model, req).checked_mul(choices(req))?,
    };
    let storage = match rates.cache_storage {
        Some(price) if marks_cache(body) => {
            price.storage_cost(input_tokens.checked_mul(max_cache_ttl.as_secs())?)?
        }
        _ => Usd::ZERO,
    };
    let cost = rates
        .dearest_input()
        .cost(input_tokens)?
        .checked_add(rates.output.cost(output_tokens)?)?
        .checked_add(storage)?;
    Some(WorstCase {
        cost,
        input_tokens,
        output_tokens,
    })
}

/// Whether the body may carry a `cache_control` breakpoint (a byte search: a false positive
/// only reserves more).
fn marks_cache(body: &[u8]) -> bool {
    const MARK: &[u8] = b"cache_control";
    body.windows(MARK.len()).any(|w| w == MARK)
}

/// How many output tokens (per choice) `free` credit pays for once the input's worst case is
/// paid: what a strict 402 tells the client.
fn affordable_output(
    model: &Model,
    req: &RawRequest<'_>,
    body: &[u8],
    max_cache_ttl: Duration,
    free: Usd,
) -> u64 {
    let Some(input) = worst_case(model, req, body, Operation::Embeddings, max_cache_ttl) else {
        return 0;
    };
    let left = free.pico().saturating_sub(input.cost.pico()).max(0);
    let rates = model.pricing.rates_for(body.len() as u64);
    let per_token = rates.output.micro_per_mtok().max(1);
    let per_choice = u64::try_from(left.checked_div(per_token).unwrap_or(0)).unwrap_or(0);
    per_choice.checked_div(choices(req)).unwrap_or(0)
}

/// The output tokens one choice may produce, for the reservation: the client's
/// `max_completion_tokens`/`max_tokens` within the model's cap — the catalog's
/// `max_output_tokens`, else its context window (no answer is longer than the context that
/// holds it), else 32,768. A client cannot reserve beyond the cap, however large it asks.
fn max_output(model: &Model, req: &RawRequest<'_>) -> u64 {
    let cap = model
        .max_output_tokens
        .or(model.context_window)
        .map_or(DEFAULT_MAX_OUTPUT, u64::from);
    ["max_completion_tokens", "max_tokens"]
        .iter()
        .find_map(|f| req.typed::<u64>(f).ok().flatten())
        .map_or(cap, |asked| asked.min(cap))
}

fn choices(req: &RawRequest<'_>) -> u64 {
    req.typed::<u64>("n")
        .ok()
        .flatten()
        .unwrap_or(1)
        .clamp(1, MAX_CHOICES)
}

/// The route a request goes to: the best of its [`eligible`] routes that is not cooling down
/// (a half-open one is probed by this request) — first by the place `provider.order` gives it,
/// then by priority — routes equally good taking turns by their weights (`turn` is a
/// per-request counter); when all cool down, the one that recovers first. With no credentialed
/// route, the best resolvable one's missing credential is the answer (503
/// `upstream_unconfigured`); with none `prefs` allows, 400 `no_allowed_route`.
fn route_for(
    model: &Model,
    req: &RawRequest<'_>,
    credentials: &Credentials,
    prefs: &Prefs,
    turn: u64,
    now: Instant,
) -> Result<Route, GatewayError> {
    if !prefs.allows_model(model) {
        return Err(GatewayError::NoAllowedRoute(model.id.as_ref().into()));
    }
    let resolved = |r: &&Route| r.addr.is_some() && prefs.allows(r);
    let Some(first) = model.routes.iter().find(resolved) else {
        return Err(GatewayError::NoRoute(model.id.as_ref().into()));
    };
    let routes = || eligible(model, req, credentials, prefs);
    if routes().next().is_none() {
        let missing = credentials.missing_for(first.kind).unwrap_or("upstream");
        return Err(GatewayError::MissingCredentials(missing));
    }
    let ready = |r: &&Route| r.health.state(now) != State::Cooling;
    let standing = |r: &Route| (prefs.rank(r), r.priority);
    if let Some(best) = routes().filter(ready).map(standing).min() {
        let tied = || routes().filter(move |r| standing(r) == best && ready(r));
        let total = tied().map(|r| u64::from(r.weight)).sum();
        let start = weighted_turn(tied().map(|r| r.weight), total, turn);
        let mut turns = tied().skip(start).chain(tied().take(start));
        if let Some(route) = turns.find(|r| r.health.admit(now)) {
            return Ok(route.clone());
        }
    }
    let recovers_first = routes().min_by_key(|r| r.health.cooling_until());
    Ok(recovers_first.unwrap_or(first).clone())
}

/// Where a request whose attempt on `admitted.route` failed may go next, in order: its
/// model's other routes, then each fallback model's — those not cooling down first, then by
/// their place in `provider.order`, then by priority; every one allowed by `provider`. With
/// `allow_fallbacks: false` and no `order`, no other route of the model, and only the best
/// route of each fallback model.
fn candidates(
    admitted: &Admitted,
    req: &RawRequest<'_>,
    credentials: &Credentials,
    now: Instant,
) -> Vec<Candidate> {
    let plain = Prefs::default();
    let (prefs, later) = match &admitted.fallbacks {
        Some(f) => (&f.prefs, &f.models[..]),
        None => (&plain, &[][..]),
    };
    let ordered = |model| ordered_routes(model, req, credentials, prefs, now);
    // A body passed in the Responses API's shapes can only go where they are spoken; a
    // fallback model is served anew.
    let passed = passes_responses_through(admitted);
    let mut next: Vec<Candidate> = Vec::new();
    if prefs.route_failover() {
        let same = ordered(&*admitted.model)
            .into_iter()
            .filter(|r| **r != admitted.route && (!passed || r.api == RouteApi::Responses));
        next.extend(same.map(|route| Candidate {
            model: admitted.model.clone(),
            route: route.clone(),
            worst_case: admitted.worst_case,
        }));
    }
    for (model, worst_case) in later {
        next.extend(ordered(&**model).into_iter().map(|route| Candidate {
            model: model.clone(),
            route: route.clone(),
            worst_case: *worst_case,
        }));
    }
    next
}

/// Which of routes weighing `weights` (`total` together) takes turn `turn`: each takes its
/// weight's share of the turns, in order.
fn weighted_turn(weights: impl Iterator<Item = u32>, total: u64, turn: u64) -> usize {
    let mut point = turn.checked_rem(total).unwrap_or(0);
    weights
        .map(u64::from)
        .position(|w| {
            let here = point < w;
            point = point.saturating_sub(w);
            here
        })
        .unwrap_or(0)
}

/// `model`'s [`eligible`] routes for failover: those not cooling down first, then by their
/// place in `provider.order`, then by priority; the best alone when other routes may not be
/// tried ([`Prefs::route_failover`]).
fn ordered_routes<'m>(
    model: &'m Model,
    req: &RawRequest<'_>,
    credentials: &'m Credentials,
    prefs: &'m Prefs,
    now: Instant,
) -> Vec<&'m Route> {
    let mut routes: Vec<&Route> = eligible(model, req, credentials, prefs).collect();
    routes.sort_by_key(|r| (r.health.state(now) == State::Cooling, prefs.rank(r)));
    if !prefs.route_failover() {
        routes.truncate(1);
    }
    routes
}

/// A model's routes a request may use, by priority: the host resolved, this gateway has the
/// credentials, `provider` allows it, and the kind is the one the request needs if any such
/// route offers it (`flex` is honoured on Vertex global only).
fn eligible<'m>(
    model: &'m Model,
    req: &RawRequest<'_>,
    credentials: &'m Credentials,
    prefs: &'m Prefs,
) -> impl Iterator<Item = &'m Route> {
    let usable = move |r: &&Route| {
        r.addr.is_some() && credentials.missing_for(r.kind).is_none() && prefs.allows(r)
    };
    let global = |r: &&Route| r.kind == RouteKind::VertexGlobal;
    let only_global = wants_flex(req) && model.routes.iter().filter(usable).any(|r| global(&r));
    model
        .routes
        .iter()
        .filter(move |r| usable(r) && (!only_global || global(r)))
}

/// `service_tier: "flex"` (served on Vertex global only).
fn wants_flex(req: &RawRequest<'_>) -> bool {
    req.typed::<Option<crate::api::Str<'_>>>("service_tier")
        .ok()
        .flatten()
        .flatten()
        .is_some_and(|tier| &*tier == "flex")
}

/// The longest client-chosen request id kept.
const MAX_REQUEST_ID: usize = 128;

/// The client's `x-request-id`, kept when it is a plain token (1 to 128 of `[A-Za-z0-9._:-]`,
/// so it is safe in logs and headers). Without one, an admitted request is known by its
/// completion id, anything else by a fresh `req_…` ([`local_request_id`]).
pub fn client_request_id(header: Option<&[u8]>) -> Option<Arc<str>> {
    let id = header.filter(|id| plain_id(id))?;
    std::str::from_utf8(id).ok().map(Arc::from)
}

/// 1 to 128 of `[A-Za-z0-9._:-]`: an id safe to echo in headers and logs.
fn plain_id(id: &[u8]) -> bool {
    let plain = |b: &u8| b.is_ascii_alphanumeric() || b".-_:".contains(b);
    (1..=MAX_REQUEST_ID).contains(&id.len()) && id.iter().all(plain)
}

/// The `id` of a `/v1/generation?id=<completion id>` query.
fn generation_id(query: Option<&str>) -> Result<Box<str>, GatewayError> {
    query
        .unwrap_or_default()
        .split('&')
        .find_map(|pair| pair.strip_prefix("id="))
        .filter(|id| plain_id(id.as_bytes()))
        .map(Into::into)
        .ok_or_else(|| {
            GatewayError::invalid("the id query parameter (a completion id) is required")
        })
}

/// The id of a request answered before admission, when the client sent none.
pub fn local_request_id() -> Arc<str> {
    new_id("req").into()
}

/// A fresh completion id such as `chatcmpl-3fK…`, or `msg_3fK…` on the Messages door (also
/// the usage record's id).
fn completion_id(op: Operation, door: Door) -> Arc<str> {
    match (door, op) {
        (Door::Messages, _) => new_id("msg").into(),
        (Door::Responses, _) => new_id("resp").into(),
        (Door::OpenAi, Operation::Chat) => new_id("chatcmpl").replacen('_', "-", 1).into(),
        (Door::OpenAi, Operation::Embeddings) => new_id("emb").replacen('_', "-", 1).into(),
    }
}

#[cfg(test)]
pub(crate) mod tests;
