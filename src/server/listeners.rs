//! The two listening services, each behind its connection limit, plain or TLS (certificates by
//! SNI, ALPN `h2`) or h2c, and the watch that makes their answers close connections once the
//! process is being upgraded or stopped.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use pingora_core::apps::HttpServerApp;
use pingora_core::listeners::tls::TlsSettings;
use pingora_core::listeners::ListenerConfig;
use pingora_core::protocols::l4::stream::L4BufferSettings;
use pingora_core::server::configuration::ServerConf;
use pingora_core::server::ExecutionPhase;
use pingora_core::services::listening::Service;

use crate::client_addr::TrustedProxies;
use crate::config::listeners::ListenerConf;
use crate::config::ListenerLimits;
use crate::connections::Limiter;
use crate::proxy::listener::{Bounded, WithHttp};
use crate::proxy::proxy_protocol::ProxyProtocol;
use crate::proxy::Gateway;

use super::admin_app::AdminApp;
use super::tls::{Certificates, TlsError};

/// One listener as configured: where, its connection limits and its transport.
pub struct Listener {
    pub addr: SocketAddr,
    pub limits: ListenerLimits,
    /// Its certificates when it speaks TLS.
    pub tls: Option<Arc<Certificates>>,
    /// HTTP/2 with prior knowledge (plain listeners only).
    pub h2c: bool,
}

impl Listener {
    /// Loads the listener's certificates (`name`: `public` or `admin`) when it speaks TLS.
    pub fn new(
        name: &'static str,
        addr: SocketAddr,
        limits: ListenerLimits,
        conf: &ListenerConf,
    ) -> Result<Listener, TlsError> {
        let tls = match &conf.tls {
            Some(tls) => Some(Certificates::load(name, tls)?),
            None => None,
        };
        Ok(Listener {
            addr,
            limits,
            tls,
            h2c: conf.h2c,
        })
    }
}

/// The OpenAI-compatible API on `tollgate.listen`.
pub fn public(
    gateway: Gateway,
    listener: &Listener,
    server: &ServerConf,
) -> Result<Service<Bounded<WithHttp<Gateway>>>, TlsError> {
    let idle = gateway.limits.idle_timeout;
    // No L4 read buffer: Pingora reads heads and bodies into buffers of its own, so its default
    // 64 KiB one (zeroed, so fully resident once the allocator reuses memory) only added a copy
    // and up to 64 KB to every connection, an open stream's included.
    let l4 = L4BufferSettings::default().read(0);
    let app = WithHttp::new(gateway, listener.h2c, idle);
    service("tollgate", "public", app, listener, l4, server)
}

/// Health, metrics, the admin API and the console on `tollgate.admin_listen`.
pub fn admin(
    app: AdminApp,
    listener: &Listener,
    server: &ServerConf,
) -> Result<Service<Bounded<WithHttp<AdminApp>>>, TlsError> {
    let idle = app.limits.idle_timeout;
    let app = WithHttp::new(app, listener.h2c, idle);
    service(
        "tollgate admin",
        "admin",
        app,
        listener,
        L4BufferSettings::default(),
        server,
    )
}

/// Every listening service is built here: its app behind the connection limit, on a plain or
/// TLS endpoint.
fn service<A: HttpServerApp + Send + Sync + 'static>(
    name: &str,
    label: &'static str,
    app: WithHttp<A>,
    listener: &Listener,
    l4: L4BufferSettings,
    server: &ServerConf,
) -> Result<Service<Bounded<WithHttp<A>>>, TlsError> {
    let bounded = Bounded::new(app, Limiter::new(listener.limits), label);
    let mut service = Service::new(name.to_owned(), bounded);
    let mut endpoint = ListenerConfig::tcp(listener.addr.to_string()).l4_buffer(l4);
    if let Some(certs) = &listener.tls {
        endpoint = endpoint.tls(tls_settings(certs, server)?);
    }
    service.add_listener(endpoint);
    Ok(service)
}

/// Pingora's rustls acceptor (TLS 1.2 and 1.3 only) asking `certs` at every handshake.
fn tls_settings(certs: &Arc<Certificates>, server: &ServerConf) -> Result<TlsSettings, TlsError> {
    // No files: the resolver serves every certificate (Pingora ignores the paths then).
    let mut settings =
        TlsSettings::intermediate("", "").map_err(|e| TlsError::Acceptor(e.to_string()))?;
    settings.set_cert_resolver(certs.clone());
    if certs.h2() {
        settings.enable_h2();
    }
    settings.set_offload_threadpool_from_server_conf(server);
    Ok(settings)
}

/// Makes every connection of `service` start with a PROXY protocol header, read before
/// anything else: on its TLS endpoints before the handshake (Pingora's pre-TLS hook), on its
/// plain ones first thing in [`Bounded`]. Believed only from `trusted` peers (others are
/// closed); see `proxy::proxy_protocol`.
pub fn read_proxy_protocol<A>(
    service: &mut Service<Bounded<A>>,
    trusted: &Arc<TrustedProxies>,
    listener: &'static str,
) {
    let header = ProxyProtocol::new(trusted.clone(), listener);
    service.endpoints().set_pre_tls_callback(header.clone());
    if let Some(bounded) = service.app_logic_mut() {
        bounded.set_proxy_protocol(header);
    }
}

/// Sets `draining` once the process is being upgraded or stopped, so that every later answer
/// closes its connection: clients move to fresh connections (the new process's, on an upgrade)
/// instead of sending on idle ones Pingora drops when it shuts down.
pub fn follow_shutdown(
    mut phases: tokio::sync::broadcast::Receiver<ExecutionPhase>,
    draining: Arc<AtomicBool>,
) {
    use tokio::sync::broadcast::error::RecvError;
    std::thread::spawn(move || loop {
        match phases.blocking_recv() {
            Ok(
                ExecutionPhase::Setup
                | ExecutionPhase::Bootstrap
                | ExecutionPhase::BootstrapComplete
                | ExecutionPhase::Running,
            )
            | Err(RecvError::Lagged(_)) => {}
            Ok(_) => draining.store(true, Ordering::Relaxed),
            Err(RecvError::Closed) => return,
        }
    });
}
