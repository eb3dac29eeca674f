//! Process wiring for `tollgate serve`: the shared state is built from the store first
//! ([`state`]: migrations, the first catalog import, warm caches), then Pingora runs the public
//! listener (the proxy), the admin listener ([`admin_app`]), plain or TLS ([`tls`]), and the
//! background services ([`services`]).

mod admin_app;
mod listeners;
mod services;
mod state;
mod tls;

use std::time::Duration;

use async_trait::async_trait;
use pingora_core::server::configuration::Opt;
use pingora_core::server::{
    RunArgs, Server, ShutdownSignal, ShutdownSignalWatch, UnixShutdownSignalWatch,
};

use crate::billing::writer::LedgerSink;

use crate::config::Config;
use crate::connections;

use admin_app::AdminApp;
pub use state::ServeError;
use state::State;

pub struct ServeOptions {
    pub upgrade: bool,
    pub daemon: bool,
}

impl ServeOptions {
    fn pingora(&self) -> Opt {
        Opt {
            upgrade: self.upgrade,
            daemon: self.daemon,
            ..Opt::default()
        }
    }
}

/// Runs the gateway until the process is stopped (or upgraded); `Err` when it cannot start.
pub fn serve(config: Config, opts: ServeOptions) -> Result<(), ServeError> {
    let store_url = config.store_url(|k| std::env::var(k).ok());
    let read_store_url = config.store_read_url(|k| std::env::var(k).ok())?;
    let Config {
        server: pingora_conf,
        tollgate: t,
    } = config;
    let (public_limits, admin_limits) = t.connections.fitted(connections::open_file_limit());
    // Certificates first: a bad file stops the start before the store is touched.
    let ls = &t.listeners;
    let public = listeners::Listener::new("public", t.listen, public_limits, &ls.public)?;
    let admin = listeners::Listener::new("admin", t.admin_listen, admin_limits, &ls.admin)?;
    let state = State::build(&t, store_url, read_store_url)?;
    let mut server = Server::new_with_opt_and_conf(opts.pingora(), pingora_conf);
    server.bootstrap();
    listeners::follow_shutdown(server.watch_execution_phase(), state.draining.clone());
    let signals = Signals {
        ledger: state.gateway.ledger.clone(),
    };
    let trusted = state.gateway.trusted_proxies.clone();
    let admin_app = AdminApp {
        admin: state.admin,
        limits: state.gateway.limits.clone(),
        draining: state.draining,
        trusted_proxies: trusted.clone(),
    };
    let conf = server.configuration.clone();
    let mut public_service = listeners::public(state.gateway, &public, &conf)?;
    let mut admin_service = listeners::admin(admin_app, &admin, &conf)?;
    if ls.public.proxy_protocol {
        listeners::read_proxy_protocol(&mut public_service, &trusted, "public");
    }
    if ls.admin.proxy_protocol {
        listeners::read_proxy_protocol(&mut admin_service, &trusted, "admin");
    }
    server.add_service(public_service);
    server.add_service(admin_service);
    let certificates = [public.tls, admin.tls].into_iter().flatten().collect();
    services::add(&mut server, state.background, certificates);
    tracing::info!(
        listen = %t.listen,
        admin = %t.admin_listen,
        public_tls = ls.public.is_tls(),
        admin_tls = ls.admin.is_tls(),
        "tollgate serving"
    );
    server.run(RunArgs {
        shutdown_signal: Box::new(signals),
    });
    Ok(())
}

/// How long SIGINT waits for the ledger writer before the process exits.
const FAST_SHUTDOWN_DRAIN: Duration = Duration::from_secs(5);

/// Pingora's signals (SIGQUIT: upgrade, SIGTERM: graceful stop, SIGINT: fast stop), except that
/// a fast stop first has the ledger writer commit what is queued: it drops the runtimes at
/// once, and billed records must not wait for the next start's journal replay.
struct Signals {
    ledger: LedgerSink,
}

#[async_trait]
impl ShutdownSignalWatch for Signals {
    async fn recv(&self) -> ShutdownSignal {
        let signal = UnixShutdownSignalWatch.recv().await;
        if matches!(signal, ShutdownSignal::FastShutdown) {
            tracing::info!("SIGINT: draining the ledger before a fast shutdown");
            self.ledger.drain(FAST_SHUTDOWN_DRAIN).await;
        }
        signal
    }
}
