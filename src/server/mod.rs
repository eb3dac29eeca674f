//! Process wiring for `tollgate serve`: the shared state is built from the store first
//! ([`state`]: migrations, the first catalog import, warm caches), then Pingora runs the public
//! listener (the proxy), the admin listener ([`admin_app`]) and the background services
//! ([`services`]).

mod admin_app;
mod listeners;
mod services;
mod state;

use pingora_core::server::configuration::Opt;
use pingora_core::server::Server;

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

/// Runs the gateway until the process is stopped (or upgraded); returns only when it cannot
/// start.
pub fn serve(config: Config, opts: ServeOptions) -> Result<(), ServeError> {
    let store_url = config.store_url(|k| std::env::var(k).ok());
    let Config {
        server: pingora_conf,
        tollgate: t,
    } = config;
    let state = State::build(&t, store_url)?;
    let (public_limits, admin_limits) = t.connections.fitted(connections::open_file_limit());
    let mut server = Server::new_with_opt_and_conf(opts.pingora(), pingora_conf);
    server.bootstrap();
    listeners::follow_shutdown(server.watch_execution_phase(), state.draining.clone());
    let trusted = state.gateway.trusted_proxies.clone();
    let admin = AdminApp {
        admin: state.admin,
        limits: state.gateway.limits.clone(),
        draining: state.draining,
        trusted_proxies: trusted.clone(),
    };
    let mut public = listeners::public(state.gateway, public_limits, t.listen);
    let mut admin = listeners::admin(admin, admin_limits, t.admin_listen);
    if t.listeners.public.proxy_protocol {
        listeners::read_proxy_protocol(&mut public, &trusted, "public");
    }
    if t.listeners.admin.proxy_protocol {
        listeners::read_proxy_protocol(&mut admin, &trusted, "admin");
    }
    server.add_service(public);
    server.add_service(admin);
    services::add(&mut server, state.background);
    tracing::info!(listen = %t.listen, admin = %t.admin_listen, "tollgate serving");
    server.run_forever()
}
