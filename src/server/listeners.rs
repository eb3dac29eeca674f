//! The two listening services, each behind its connection limit, and the watch that makes
//! their answers close connections once the process is being upgraded or stopped.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use pingora_core::listeners::ListenerConfig;
use pingora_core::protocols::l4::stream::L4BufferSettings;
use pingora_core::server::ExecutionPhase;
use pingora_core::services::listening::Service;

use crate::client_addr::TrustedProxies;
use crate::config::ListenerLimits;
use crate::connections::Limiter;
use crate::proxy::listener::Bounded;
use crate::proxy::proxy_protocol::ProxyProtocol;
use crate::proxy::Gateway;

use super::admin_app::AdminApp;

/// The OpenAI-compatible API on `tollgate.listen`.
pub fn public(
    gateway: Gateway,
    limits: ListenerLimits,
    addr: SocketAddr,
) -> Service<Bounded<Gateway>> {
    let mut service = Service::new(
        "tollgate".to_owned(),
        Bounded::new(gateway, Limiter::new(limits), "public"),
    );
    // No L4 read buffer: Pingora reads heads and bodies into buffers of its own, so its default
    // 64 KiB one (zeroed, so fully resident once the allocator reuses memory) only added a copy
    // and up to 64 KB to every connection, an open stream's included.
    service.add_listener(
        ListenerConfig::tcp(addr.to_string()).l4_buffer(L4BufferSettings::default().read(0)),
    );
    service
}

/// Health, metrics, the admin API and the console on `tollgate.admin_listen`.
pub fn admin(
    app: AdminApp,
    limits: ListenerLimits,
    addr: SocketAddr,
) -> Service<Bounded<AdminApp>> {
    let mut service = Service::new(
        "tollgate admin".to_owned(),
        Bounded::new(app, Limiter::new(limits), "admin"),
    );
    service.add_tcp(&addr.to_string());
    service
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
