//! What both listeners (the public API and the admin one) share around their HTTP apps: a
//! connection limit ([`Bounded`]), a whole-head deadline that also ends an idle kept-alive
//! connection ([`read_head`]), how long a connection is kept alive ([`keep_alive`]) and
//! handing a finished connection back for its next request ([`reuse`]), and the HTTP/2 options
//! of the listener ([`WithHttp`]). The body deadline is `body::read_within`.
//!
//! On an h2 connection Pingora calls the app once per stream: [`read_head`] returns at once
//! (the head came with the stream), [`keep_alive`] and [`reuse`] do nothing (a stream is never
//! reused), the write timeout bounds each wait for flow-control window as well, a stream the
//! client resets fails the next write as a closed connection does, and the connection itself
//! closes after `idle` without streams ([`WithHttp::new`]) and with a GOAWAY on shutdown.

use std::net::IpAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use pingora_core::apps::{
    HttpPersistentSettings, HttpServerApp, HttpServerOptions, ReusedHttpStream, ServerApp,
};
use pingora_core::protocols::http::ServerSession as Session;
use pingora_core::protocols::{Stream, ALPN};
use pingora_core::server::ShutdownWatch;
use pingora_error::ErrorType;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::proxy_protocol::ProxyProtocol;
use crate::client_addr::{Forwarding, TrustedProxies};
use crate::connections::{self, Limiter, Refused};

/// A listener's app behind its connection limit: a connection past it is answered a `503`
/// and closed at once, before anything of it is read (but its PROXY protocol header, when the
/// listener has one: the limit then counts the client it names).
pub struct Bounded<A> {
    app: Arc<A>,
    limiter: Arc<Limiter>,
    /// Read each plain connection's PROXY protocol header first (`proxy_protocol.rs`).
    proxy_protocol: Option<Arc<ProxyProtocol>>,
    /// For the refusal metric: `public` or `admin`.
    listener: &'static str,
    /// Refused connections waiting for their client to close first (see [`refuse`]).
    lingering: AtomicUsize,
}

impl<A> Bounded<A> {
    pub fn new(app: A, limiter: Arc<Limiter>, listener: &'static str) -> Self {
        Bounded {
            app: Arc::new(app),
            limiter,
            proxy_protocol: None,
            listener,
            lingering: AtomicUsize::new(0),
        }
    }

    /// Every connection starts with a PROXY protocol header (read here on a plain listener;
    /// a TLS one reads it before its handshake).
    pub fn set_proxy_protocol(&mut self, proxy_protocol: Arc<ProxyProtocol>) {
        self.proxy_protocol = Some(proxy_protocol);
    }
}

/// How long writing the refusal may take (a fresh socket's buffer takes it at once).
const REFUSAL_WRITE: Duration = Duration::from_secs(1);
/// How long a refused connection waits for its client to close, and how many may wait at once
/// per listener (their file handles come out of `reserve_files`); past that they close at once.
const LINGER: Duration = Duration::from_millis(250);
const MAX_LINGERING: usize = 32;

#[async_trait]
impl<A: ServerApp + Send + Sync + 'static> ServerApp for Bounded<A> {
    async fn process_new(
        self: &Arc<Self>,
        stream: Stream,
        shutdown: &ShutdownWatch,
    ) -> Option<Stream> {
        let stream = match &self.proxy_protocol {
            Some(header) => header.plain(stream).await?,
            None => stream,
        };
        match self.limiter.admit(peer_ip(&stream)) {
            Ok(guard) => {
                // The app serves the whole connection (every kept-alive request) in this call.
                let reused = self.app.process_new(stream, shutdown).await;
                drop(guard);
                reused
            }
            Err(why) => {
                crate::metrics::METRICS.connection_refused(self.listener, why.reason());
                let linger = self.lingering.fetch_add(1, Ordering::AcqRel) < MAX_LINGERING;
                // Boxed: its read buffer would otherwise be part of every connection's state.
                Box::pin(refuse(stream, why, linger)).await;
                self.lingering.fetch_sub(1, Ordering::AcqRel);
                None
            }
        }
    }

    async fn cleanup(&self) {
        self.app.cleanup().await;
    }
}

fn peer_ip(stream: &Stream) -> Option<IpAddr> {
    let digest = stream.get_socket_digest()?;
    digest.peer_addr()?.as_inet().map(|a| a.ip())
}

/// Writes the refusal and closes; with `linger`, only once the client has closed (or after
/// [`LINGER`]): closing with its request unread would reset the connection, and a reset can
/// discard the answer before the client reads it.
async fn refuse(mut stream: Stream, why: Refused, linger: bool) {
    let answer = connections::refusal(why);
    let write = async {
        stream.write_all(&answer).await?;
        AsyncWriteExt::shutdown(&mut stream).await
    };
    match tokio::time::timeout(REFUSAL_WRITE, write).await {
        Ok(Ok(())) if linger => {
            let _ = tokio::time::timeout(LINGER, until_closed(&mut stream)).await;
        }
        Ok(_) => {}
        Err(e) => tracing::debug!("writing a connection refusal: {e}"),
    }
}

/// Reads (and drops) what the client still sends, until it closes.
async fn until_closed(stream: &mut Stream) {
    let mut unread = [0u8; 4096];
    while let Ok(1..) = stream.read(&mut unread).await {}
}

/// Reads the next request's head, whole within `limit` (a head trickled in a byte at a time
/// would otherwise hold the connection as long as each read beat Pingora's per-read timeout);
/// `false`: there is none to answer (the client closed or was too slow, the service is
/// shutting down — a connection idle between requests closes — or the head was malformed and
/// got its `400`).
pub async fn read_head(session: &mut Session, shutdown: &ShutdownWatch, limit: Duration) -> bool {
    let mut shutdown = shutdown.clone();
    let read = tokio::select! {
        biased; // a request already buffered is answered
        read = tokio::time::timeout(limit, session.read_request()) => read,
        _ = shutdown.wait_for(|down| *down) => return false,
    };
    let malformed = match read {
        Ok(Ok(read)) => return read,
        Ok(Err(e)) => e.etype == ErrorType::InvalidHTTPHeader,
        Err(_) => false, // too slow
    };
    if malformed {
        let _ = session.respond_error(400).await;
    }
    session.shutdown().await;
    false
}

/// Keeps the connection open after this answer for at most `idle` (Pingora's HTTP/1.1 default
/// would keep an idle one for as long as the client likes), or not at all when `closing`
/// (the process is being upgraded or stopped: clients move to fresh connections).
pub fn keep_alive(session: &mut Session, idle: Duration, closing: bool) {
    if closing {
        session.set_keepalive(None);
    } else if session.get_keepalive().is_some() {
        session.set_keepalive(Some(idle.as_secs().max(1)));
    }
}

/// The request's client: the connection's peer (the PROXY protocol's client, when the listener
/// reads one), or whom a trusted peer's `Forwarded` / `X-Forwarded-For` names
/// (`client_addr`); `None` for a peer that is no IP address.
pub fn client_addr(session: &Session, trusted: &TrustedProxies) -> Option<IpAddr> {
    let peer = session.client_addr()?.as_inet()?.ip();
    if trusted.is_empty() {
        return Some(peer);
    }
    let headers = &session.req_header().headers;
    let lines =
        |name| -> Vec<&[u8]> { headers.get_all(name).iter().map(|v| v.as_bytes()).collect() };
    let (forwarded, x_forwarded_for) = (lines("forwarded"), lines("x-forwarded-for"));
    let forwarding = Forwarding {
        forwarded: &forwarded,
        x_forwarded_for: &x_forwarded_for,
    };
    Some(crate::client_addr::client_addr(peer, trusted, forwarding))
}

/// Ends the exchange; the connection, if it can carry another request, for the next one.
pub async fn reuse(session: Session) -> Option<ReusedHttpStream> {
    let settings = HttpPersistentSettings::for_session(&session);
    let reusable = session.finish().await.ok().flatten()?;
    Some(ReusedHttpStream::from_reusable_stream(reusable, settings))
}

/// An HTTP app on one listener: HTTP/1.1 (its request loop run here, `serve_http1`), h2 when
/// TLS's ALPN chose it, and with `h2c` HTTP/2 with prior knowledge on a plain connection that
/// opens with the HTTP/2 preface (both left to Pingora's own `ServerApp`).
///
/// Pingora's own h2c detection reads the 24 bytes of the preface with no deadline, so a client
/// that sends nothing (or an HTTP/1.0 request shorter than the preface) would hold the
/// connection for ever: here the preface is looked for within the head deadline instead, and
/// only as far as the bytes still match it.
pub struct WithHttp<A> {
    /// ALPN-chosen h2 (and the app HTTP/1.1 is served with).
    http: Arc<Options<A>>,
    /// The same app for connections that opened with the preface; `None`: no h2c.
    h2c: Option<Arc<Options<A>>>,
    /// How long the opening bytes may take.
    idle: Duration,
}

impl<A> WithHttp<A> {
    /// `idle` bounds the wait for the opening bytes and closes an h2 connection with no stream
    /// open (as an idle HTTP/1.1 connection is closed by [`read_head`]).
    pub fn new(app: A, h2c: bool, idle: Duration) -> Self {
        let app = Arc::new(app);
        let options = |h2c: bool| {
            let mut options = HttpServerOptions::default();
            options.h2c = h2c;
            options.h2_idle_timeout = Some(idle);
            Arc::new(Options {
                app: app.clone(),
                options,
            })
        };
        WithHttp {
            http: options(false),
            h2c: h2c.then(|| options(true)),
            idle,
        }
    }
}

#[async_trait]
impl<A: HttpServerApp + Send + Sync + 'static> ServerApp for WithHttp<A> {
    async fn process_new(
        self: &Arc<Self>,
        mut stream: Stream,
        shutdown: &ShutdownWatch,
    ) -> Option<Stream> {
        let h2 = match &self.h2c {
            Some(h2c) if stream.get_ssl_digest().is_none() => {
                opens_with_preface(&mut stream, self.idle)
                    .await?
                    .then_some(h2c)
            }
            _ => matches!(stream.selected_alpn_proto(), Some(ALPN::H2)).then_some(&self.http),
        };
        match h2 {
            Some(app) => app.process_new(stream, shutdown).await,
            None => self.serve_http1(stream, shutdown).await,
        }
    }

    async fn cleanup(&self) {
        self.http.app.http_cleanup().await;
    }
}

impl<A: HttpServerApp> WithHttp<A> {
    /// Serves an HTTP/1.x connection, one request after another, as Pingora's own `ServerApp`
    /// does (which is left the h2 connections): run here, a connection's state is a few hundred
    /// bytes rather than Pingora's, which is sized for its h2 handshake (3.8 KB), and the app is
    /// called without a forwarding layer's box (0.7 KB), for every connection a stream holds.
    async fn serve_http1(&self, stream: Stream, shutdown: &ShutdownWatch) -> Option<Stream> {
        // Kept alive unless shutting down; [`keep_alive`] decides again at each answer.
        let keepalive = (!*shutdown.borrow()).then(|| self.idle.as_secs().max(1));
        let app = &self.http.app;
        let mut next = Some(ReusedHttpStream::new(stream, None));
        while let Some((stream, settings)) = next.map(ReusedHttpStream::consume) {
            // The session made in the call: a local would keep its place (680 bytes) in this
            // state, beside the app's own copy.
            next = app
                .process_new_http(http1_session(stream, settings, keepalive), shutdown)
                .await;
        }
        None
    }
}

/// A connection's next HTTP/1.x session: as the last one left it, or kept alive `keepalive`.
fn http1_session(
    stream: Stream,
    settings: Option<HttpPersistentSettings>,
    keepalive: Option<u64>,
) -> Session {
    let mut session = Session::new_http1(stream);
    match settings {
        Some(settings) => settings.apply_to_session(&mut session),
        None => session.set_keepalive(keepalive),
    }
    session
}

const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Whether the connection opens with HTTP/2's preface, the bytes read put back for the app;
/// `None`: the client sent too little within `deadline`, or closed. Reads 1, 2, then all 24
/// bytes, stopping as soon as they differ (an HTTP/1 method differs by the second byte).
async fn opens_with_preface(stream: &mut Stream, deadline: Duration) -> Option<bool> {
    let mut opening = [0u8; H2_PREFACE.len()];
    let sniff = async {
        for n in [1, 2, H2_PREFACE.len()] {
            let (seen, preface) = (opening.get_mut(..n)?, H2_PREFACE.get(..n)?);
            if !stream.try_peek(seen).await.ok()? || seen != preface {
                return Some(false); // not peekable (then not h2c) or not the preface
            }
        }
        Some(true)
    };
    tokio::time::timeout(deadline, sniff).await.ok().flatten()
}

/// The app with Pingora's options for one kind of connection.
struct Options<A> {
    app: Arc<A>,
    options: HttpServerOptions,
}

#[async_trait]
impl<A: HttpServerApp + Send + Sync + 'static> HttpServerApp for Options<A> {
    async fn process_new_http(
        self: &Arc<Self>,
        session: Session,
        shutdown: &ShutdownWatch,
    ) -> Option<ReusedHttpStream> {
        self.app.process_new_http(session, shutdown).await
    }

    fn server_options(&self) -> Option<&HttpServerOptions> {
        Some(&self.options)
    }
}
