//! The operators' listener (`admin_listen`, loopback by default; never the public port):
//! health, readiness, route health and Prometheus metrics (`ops`), the JSON admin API under
//! `/admin/v1` (`api`, behind the admin token) with the billing metrics too
//! (`/admin/v1/metrics`), its OpenAPI document, and the web console.
//! Everything here takes and returns plain values (`http::Request`/`Response`); the Pingora
//! glue is in `server/admin_app.rs`.
#![warn(clippy::arithmetic_side_effects)]

pub mod api;
pub mod console;
pub mod error;
pub mod http;
pub mod openapi;
pub mod ops;
pub mod scope;
pub mod session;
pub mod throttle;

use ::http::{Method, StatusCode};

pub use api::Api;
pub use ops::Ops;

use self::http::{Request, Response};

pub struct Admin {
    pub ops: Ops,
    pub api: Api,
    /// The OpenAPI document, rendered at start.
    openapi: Vec<u8>,
}

impl Admin {
    pub fn new(ops: Ops, api: Api) -> Self {
        Admin {
            ops,
            api,
            openapi: openapi::json(),
        }
    }

    pub async fn handle(&self, req: &Request) -> Response {
        let get = matches!(req.method, Method::GET | Method::HEAD);
        if req.path.starts_with("/admin/v1/") {
            if get && req.path == "/admin/v1/openapi.json" {
                let body = self.openapi.clone();
                return Response::new(StatusCode::OK, "application/json", body);
            }
            if get && req.path == "/admin/v1/metrics" {
                let caller = self.api.caller(req).await;
                let permitted = caller.and_then(|c| {
                    scope::permits(&c.scope, scope::Op::Metrics, None).check(String::new)
                });
                return match permitted {
                    Ok(()) => {
                        Response::new(StatusCode::OK, ops::METRICS_TYPE, self.ops.metrics(true))
                    }
                    Err(e) => e.response(),
                };
            }
            return self.api.handle(req).await;
        }
        if get {
            if let Some((status, content_type, body)) = self.ops.get(&req.path) {
                let status = StatusCode::from_u16(status).unwrap_or(StatusCode::OK);
                return Response::new(status, content_type, body);
            }
            if let Some((content_type, body)) = console::asset(&req.path) {
                let mut res = Response::new(StatusCode::OK, content_type, body.to_vec());
                for (name, value) in console::SECURITY_HEADERS {
                    res = res.with_header(::http::HeaderName::from_static(name), value.into());
                }
                return res;
            }
        }
        let missing = crate::api::GatewayError::NotFound(req.path.as_str().into()).envelope();
        Response::new(StatusCode::NOT_FOUND, "application/json", missing.to_vec())
    }
}
