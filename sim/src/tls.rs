//! TLS for the simulator (`--tls-cert`, `--tls-key`), so that the gateway's upstream TLS —
//! its roots, name checks and failures — is tested against a real handshake. Handshakes run
//! on their own tasks (a stalled one holds up no other) and are counted in the stats:
//! `tls_handshakes` and `tls_handshakes_failed` (a client that refused the certificate),
//! which tell how often a client tried when none of its requests arrived. Only connections
//! that opened with a TLS `ClientHello` count: a stranger that does not speak TLS (another
//! test's PostgreSQL client retrying a port this simulator now holds, a port probe) is
//! dropped uncounted, so the counts are the TLS clients' alone.

use std::io;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_rustls::server::TlsStream;
use tokio_rustls::LazyConfigAcceptor;

use crate::Sim;

/// The longest a client may take over its handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// A server configuration serving the certificate chain and key of these PEM files, offering
/// HTTP/2 and HTTP/1.1 (as the providers do), or HTTP/1.1 only.
pub fn server_config(
    cert: &Path,
    key: &Path,
    http2: bool,
) -> io::Result<Arc<rustls::ServerConfig>> {
    let invalid = |what: &Path, e: &dyn std::fmt::Display| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{}: {e}", what.display()),
        )
    };
    let chain = CertificateDer::pem_file_iter(cert)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .map_err(|e| invalid(cert, &e))?;
    if chain.is_empty() {
        return Err(invalid(cert, &"no certificate"));
    }
    let key_der = PrivateKeyDer::from_pem_file(key).map_err(|e| invalid(key, &e))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| invalid(cert, &e))?
        .with_no_client_auth()
        .with_single_cert(chain, key_der)
        .map_err(|e| invalid(cert, &e))?;
    config.alpn_protocols = if http2 {
        vec![b"h2".to_vec(), b"http/1.1".to_vec()]
    } else {
        vec![b"http/1.1".to_vec()]
    };
    Ok(Arc::new(config))
}

/// A listener handing out connections whose TLS handshake succeeded.
pub struct TlsListener {
    ready: mpsc::Receiver<(TlsStream<TcpStream>, SocketAddr)>,
    local: SocketAddr,
}

impl TlsListener {
    /// Accepts on `tcp` and shakes hands on each connection with `config`.
    pub fn new(tcp: TcpListener, config: Arc<rustls::ServerConfig>, sim: Arc<Sim>) -> Self {
        let local = tcp
            .local_addr()
            .unwrap_or_else(|_| SocketAddr::from(([127, 0, 0, 1], 0)));
        let (ready_tx, ready) = mpsc::channel(64);
        tokio::spawn(async move {
            loop {
                let Ok((stream, peer)) = tcp.accept().await else {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                };
                let _ = stream.set_nodelay(true);
                sim.stats.connections.fetch_add(1, Ordering::Relaxed);
                let (config, ready_tx, sim) = (config.clone(), ready_tx.clone(), sim.clone());
                tokio::spawn(async move {
                    if let Some(tls) = shake_hands(stream, config, &sim).await {
                        let _ = ready_tx.send((tls, peer)).await;
                    }
                });
            }
        });
        TlsListener { ready, local }
    }
}

/// The handshake on one connection, counted once its `ClientHello` has arrived; `None` when
/// it failed or the peer never spoke TLS.
async fn shake_hands(
    stream: TcpStream,
    config: Arc<rustls::ServerConfig>,
    sim: &Sim,
) -> Option<TlsStream<TcpStream>> {
    let hello = LazyConfigAcceptor::new(rustls::server::Acceptor::default(), stream);
    let start = tokio::time::timeout(HANDSHAKE_TIMEOUT, hello)
        .await
        .ok()?
        .ok()?;
    sim.stats.tls_handshakes.fetch_add(1, Ordering::Relaxed);
    let shaken = tokio::time::timeout(HANDSHAKE_TIMEOUT, start.into_stream(config)).await;
    if let Ok(Ok(tls)) = shaken {
        return Some(tls);
    }
    sim.stats
        .tls_handshakes_failed
        .fetch_add(1, Ordering::Relaxed);
    None
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.ready.recv().await {
            Some(conn) => conn,
            // The accepting task is gone only with the runtime.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        Ok(self.local)
    }
}
