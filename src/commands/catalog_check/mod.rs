//! `tollgate catalog check`: asks each provider's model listing which models it still serves
//! and compares the catalog against it (catalog drift). The listings are fetched by
//! `listing` (network), the comparison is `compare::check` (a pure function of the rows and
//! the listings).

mod compare;
mod listing;

use std::time::Duration;

pub use compare::{DriftReport, RouteCheck, Status, SurfaceKind};

use super::CommandResult;
use crate::config::{ProvidersConf, UpstreamConf};
use crate::store::Store;

/// How the listings are asked.
#[derive(Debug, Clone, Copy)]
pub struct CheckOptions {
    /// Bound of each listing request (and of minting the Vertex token).
    pub timeout: Duration,
    /// Models asked per listing page.
    pub page_size: usize,
}

/// Checks every catalog route against its surface's listing, with the conf's credentials
/// (`env` reads the variables the conf names) and its upstream client's trust (`upstream`).
pub async fn check_catalog(
    store: &dyn Store,
    providers: &ProvidersConf,
    upstream: &UpstreamConf,
    env: impl Fn(&str) -> Option<String>,
    opts: CheckOptions,
) -> CommandResult<DriftReport> {
    let rows = store.load_catalog().await?;
    let surfaces = compare::surfaces(&rows, providers);
    let need_vertex = surfaces.iter().any(|s| {
        matches!(
            s.kind,
            SurfaceKind::VertexGoogle | SurfaceKind::VertexAnthropic
        )
    });
    let keys = listing::Keys::from_env(providers, env, need_vertex, opts.timeout).await;
    let listings = match listing::client(opts.timeout, upstream) {
        Ok(client) => listing::ask_all(&client, &keys, surfaces, opts.page_size).await,
        // Without a client nothing is asked: every surface is unchecked, for this reason.
        Err(e) => surfaces
            .into_iter()
            .map(|s| (s, Err(e.to_string())))
            .collect(),
    };
    Ok(compare::check(&rows, providers, &listings))
}

#[cfg(test)]
mod tests;
