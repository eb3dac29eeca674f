//! The admin listener's Pingora side: the public listener's head, body and idle deadlines
//! around [`Admin::handle`], which answers plain values.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use pingora_core::apps::{HttpServerApp, ReusedHttpStream};
use pingora_core::protocols::http::ServerSession;
use pingora_core::server::ShutdownWatch;

use crate::admin::{self, Admin};
use crate::api::limits::Limits;
use crate::api::GatewayError;
use crate::client_addr::TrustedProxies;
use crate::proxy::listener;

pub struct AdminApp {
    pub admin: Admin,
    /// The public listener's deadlines (`tollgate.limits`).
    pub limits: Limits,
    /// The process is being upgraded or stopped: answers close their connections.
    pub draining: Arc<AtomicBool>,
    /// `tollgate.trusted_proxies`: the sign-in throttle counts the client they name.
    pub trusted_proxies: Arc<TrustedProxies>,
}

#[async_trait]
impl HttpServerApp for AdminApp {
    async fn process_new_http(
        self: &Arc<Self>,
        mut session: ServerSession,
        shutdown: &ShutdownWatch,
    ) -> Option<ReusedHttpStream> {
        if !listener::read_head(&mut session, shutdown, self.limits.idle_timeout).await {
            return None;
        }
        let closing = *shutdown.borrow() || self.draining.load(Ordering::Relaxed);
        listener::keep_alive(&mut session, self.limits.idle_timeout, closing);
        session.set_write_timeout(Some(self.limits.client_write_timeout));
        let res = match read_request(&mut session, self.limits.body_timeout).await {
            Ok(mut req) => {
                req.peer = listener::client_addr(&session, &self.trusted_proxies);
                self.admin.handle(&req).await
            }
            Err(e) => {
                session.set_keepalive(None); // the body was not read whole
                refusal(&e)
            }
        };
        if let Err(e) = write_response(&mut session, res).await {
            tracing::debug!("writing an admin answer: {e}");
            return None;
        }
        listener::reuse(session).await
    }
}

/// The gateway's error envelope for a request whose body could not be read.
fn refusal(e: &GatewayError) -> admin::http::Response {
    let status = http::StatusCode::from_u16(e.status()).unwrap_or(http::StatusCode::BAD_REQUEST);
    admin::http::Response::new(status, "application/json", e.envelope().to_vec())
}

async fn write_response(
    session: &mut ServerSession,
    res: admin::http::Response,
) -> pingora_error::Result<()> {
    let mut header = pingora_http::ResponseHeader::build(res.status, Some(3 + res.headers.len()))?;
    header.insert_header("content-type", res.content_type)?;
    header.insert_header("content-length", res.body.len().to_string())?;
    header.insert_header("cache-control", "no-store")?;
    for (name, value) in res.headers {
        header.append_header(name, value)?;
    }
    session.write_response_header(Box::new(header)).await?;
    session.write_response_body(res.body.into(), true).await
}

/// The session's request as a plain value, its body read whole (at most
/// `admin::http::MAX_BODY` bytes) within `deadline`.
async fn read_request(
    session: &mut ServerSession,
    deadline: Duration,
) -> Result<admin::http::Request, GatewayError> {
    let max = admin::http::MAX_BODY as u64;
    let body = crate::proxy::body::read_within(session, max, deadline).await?;
    let head = session.req_header();
    let target = head.uri.path_and_query().map_or("/", |p| p.as_str());
    let mut req = admin::http::Request::new(head.method.clone(), target);
    req.headers = head.headers.clone();
    req.body = body;
    Ok(req)
}
