//! The PROXY protocol on a listener (`tollgate.listeners.<name>.proxy_protocol`): every
//! connection starts with a header (v1 or v2, `client_addr::proxy_protocol`) read before
//! anything else — on a TLS listener before the handshake (Pingora's pre-TLS hook,
//! [`PreTlsProcess`]), on a plain one first thing in [`Bounded`](super::listener::Bounded).
//!
//! The client's address reaches the rest of the gateway as the connection's peer address: the
//! header's source replaces the stream's `SocketDigest` (its `peer_addr` set up front; the
//! local address is still read from the socket). Everything that asks the session for its
//! client — the connection limit, `Forwarded` handling, the access log, the admin sign-in
//! throttle — then sees the client, with no wrapper stream around Pingora's.
//!
//! A header is believed only from a peer in `trusted_proxies`: a connection from anyone else
//! is closed unread (it cannot be served either way: its first bytes would be a PROXY header,
//! not HTTP, or else a client skipping the balancer that the operator said is always there).
//! So is one whose header is missing, malformed, longer than its bound, or not whole within
//! [`HEADER_DEADLINE`].

use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use pingora_core::listeners::PreTlsProcess;
use pingora_core::protocols::l4::socket::SocketAddr as PeerAddr;
use pingora_core::protocols::l4::stream::Stream as L4Stream;
use pingora_core::protocols::{GetSocketDigest, SocketDigest, Stream};
use pingora_error::{Error, ErrorType};

use crate::client_addr::proxy_protocol::{read_header, Header, ProxyHeaderError};
use crate::client_addr::TrustedProxies;

/// How long a connection may take to send its whole header (a balancer sends it at once).
pub const HEADER_DEADLINE: Duration = Duration::from_secs(5);

/// Reads the PROXY protocol header of a listener's connections.
#[derive(Debug)]
pub struct ProxyProtocol {
    trusted: Arc<TrustedProxies>,
    /// For the refusal metric: `public` or `admin`.
    listener: &'static str,
}

#[derive(Debug, thiserror::Error)]
enum Refusal {
    #[error("PROXY protocol header from an untrusted peer {0:?}")]
    Untrusted(Option<std::net::IpAddr>),
    #[error("{0}")]
    Header(#[from] ProxyHeaderError),
    #[error("no PROXY protocol header within {HEADER_DEADLINE:?}")]
    Slow,
}

impl ProxyProtocol {
    pub fn new(trusted: Arc<TrustedProxies>, listener: &'static str) -> Arc<Self> {
        Arc::new(ProxyProtocol { trusted, listener })
    }

    /// A plain connection with its header read (`None`: refused, closed). A TLS connection
    /// read its header before the handshake, and passes as it is.
    pub async fn plain(&self, stream: Stream) -> Option<Stream> {
        if !stream.as_any().is::<L4Stream>() {
            return Some(stream);
        }
        let mut l4 = stream.into_any().downcast::<L4Stream>().ok()?;
        match self.accept(&mut l4).await {
            Ok(()) => Some(l4),
            Err(why) => {
                self.refused(&why);
                None
            }
        }
    }

    /// Reads the header off `l4`, hands the bytes read past it back to the stream, and makes
    /// its source the connection's peer address.
    async fn accept(&self, l4: &mut L4Stream) -> Result<(), Refusal> {
        let peer = l4
            .get_socket_digest()
            .and_then(|d| d.peer_addr().and_then(|a| a.as_inet()).map(|a| a.ip()));
        if !peer.is_some_and(|ip| self.trusted.trusts(ip)) {
            return Err(Refusal::Untrusted(peer));
        }
        let (header, rest) = tokio::time::timeout(HEADER_DEADLINE, read_header(l4))
            .await
            .map_err(|_| Refusal::Slow)??;
        l4.rewind(&rest);
        if let Header::Proxied { source } = header {
            let digest = SocketDigest::from_raw_fd(l4.as_raw_fd());
            let _ = digest.peer_addr.set(Some(PeerAddr::Inet(source)));
            l4.set_socket_digest(digest);
        }
        Ok(())
    }

    fn refused(&self, why: &Refusal) {
        tracing::debug!(listener = self.listener, "connection refused: {why}");
        crate::metrics::METRICS.connection_refused(self.listener, "proxy_protocol");
    }
}

/// A TLS listener's connections: the header comes before the handshake. An error drops the
/// connection.
#[async_trait]
impl PreTlsProcess for ProxyProtocol {
    async fn process(&self, stream: &mut L4Stream) -> pingora_error::Result<()> {
        self.accept(stream).await.map_err(|why| {
            self.refused(&why);
            Error::explain(ErrorType::AcceptError, why.to_string())
        })
    }
}
