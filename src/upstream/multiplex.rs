//! HTTP/2 to the upstreams that speak it: many calls share one connection.
//!
//! Over HTTP/1.1 every call in flight holds a connection of its own: a socket, hyper's two
//! 8 KB buffers, its dispatch channel and task, about 33 KB for as long as a stream lasts, and
//! a TLS handshake whenever the pool runs short. Over HTTP/2 a call is a stream on a shared
//! connection, and a thousand streams are ten connections.
//!
//! hyper's pooled client puts every call to a host on one HTTP/2 connection and, once the
//! upstream's `SETTINGS_MAX_CONCURRENT_STREAMS` is reached, queues the rest behind it: with
//! LLM streams that last minutes, a gateway would stall at the hundred-and-first. So this pool
//! is the gateway's own: it counts the streams open on each connection and dials another when
//! every one is full (`http2_max_streams`, or fewer where the upstream's settings say so).
//! It speaks through the `h2` crate rather than hyper's HTTP/2 client, which hands a call's
//! body to a task of its own once the head is queued, so that the two leave in two writes
//! (measured as 70–150 µs more per call at 2,000 calls/s); here both are queued at once.
//!
//! Per upstream (scheme, host, port) it keeps the connections, oldest first and filled first,
//! so that the last empties and is closed after a minute idle, and a dial lock: one connection
//! is dialled at a time, and the callers that waited on a dial that failed get its failure at
//! once rather than each waiting out a connect timeout of its own. An upstream that declines
//! HTTP/2 in its TLS handshake (ALPN) is remembered as HTTP/1.1's, and its calls go to the
//! HTTP/1.1 pool.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use h2::client::SendRequest;
use h2::RecvStream;
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::{Connection as _, HttpConnector};
use hyper_util::rt::TokioIo;
use tokio::io::BufReader;
use tower_service::Service;

use crate::catalog::Endpoint;
use crate::config::Http2Mode;
use crate::upstream::failure::{transport, CallFailure};

/// An empty connection beside others is closed after this long unused.
const IDLE: Duration = Duration::from_secs(60);
/// Flow-control windows: what the upstream may send ahead of the gateway's reading, per stream
/// and per connection. The protocol's own 64 KB would cost a buffered answer of a few MB dozens
/// of round trips. A stream whose client stops reading stops being read (until
/// `client_write_timeout`) and holds its unread part of the connection's window: at 1 MB a
/// stream, sixteen such streams are needed to stall the others on a connection.
const STREAM_WINDOW: u32 = 1 << 20;
const CONNECTION_WINDOW: u32 = 16 << 20;
/// The connection's reads: `h2` reads the socket 8 KB at a time, which made a 2.3 MB answer
/// about 290 reads (and 3 ms more than over HTTP/1.1, whose buffer grows); one buffer a
/// connection, not a stream.
const READ_BUFFER: usize = 64 << 10;
/// The largest answer head taken from an upstream.
const MAX_HEADER_LIST: u32 = 64 << 10;

/// The HTTP/2 connections to every upstream that speaks it.
pub struct Multiplexer {
    connector: HttpsConnector<HttpConnector>,
    mode: Http2Mode,
    max_streams: usize,
    upstreams: Mutex<Vec<Upstream>>,
}

/// One upstream's connections.
struct Upstream {
    tls: bool,
    host: Box<str>,
    port: u16,
    /// It declined HTTP/2 in a TLS handshake.
    http1: bool,
    conns: Vec<Conn>,
    /// Held while a connection is dialled; the last dial's failure, for those who waited on it.
    dial: Arc<tokio::sync::Mutex<Option<DialFailure>>>,
}

struct Conn {
    send: SendRequest<Bytes>,
    /// Streams open on it (a [`Stream`] each).
    open: Arc<AtomicUsize>,
    /// Its task ended, or a call could not be sent on it: it takes no more.
    closed: Arc<AtomicBool>,
    /// When it was last seen with no stream open.
    idle_since: Option<Instant>,
}

impl Conn {
    /// One stream on it, counted until the answer is dropped.
    fn claim(&self) -> Ready {
        self.open.fetch_add(1, Ordering::AcqRel);
        Ready {
            send: self.send.clone(),
            closed: self.closed.clone(),
            stream: Stream(self.open.clone()),
        }
    }
}

struct DialFailure {
    at: Instant,
    failure: CallFailure,
}

/// A call's claim on its connection: one stream counted until the answer is dropped.
pub struct Stream(Arc<AtomicUsize>);

/// What [`Multiplexer::send`] sends: the head (its version set to HTTP/2 here) and the body.
pub type Call = (http::Request<()>, Bytes);

impl Drop for Stream {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Release);
    }
}

/// Why a call did not go over HTTP/2.
pub enum NotSent {
    /// The upstream speaks HTTP/1.1 only: the call, for the HTTP/1.1 pool.
    Http1(Call),
    Failed(CallFailure),
}

enum Checkout {
    Ready(Ready),
    Dial(Arc<tokio::sync::Mutex<Option<DialFailure>>>),
    Http1,
}

/// A connection with room, and the stream counted on it.
struct Ready {
    send: SendRequest<Bytes>,
    closed: Arc<AtomicBool>,
    stream: Stream,
}

impl Multiplexer {
    /// `connector` offers `h2` in its TLS handshakes.
    pub fn new(
        connector: HttpsConnector<HttpConnector>,
        mode: Http2Mode,
        max_streams: u32,
    ) -> Self {
        Multiplexer {
            connector,
            mode,
            max_streams: max_streams.max(1) as usize,
            upstreams: Mutex::new(Vec::new()),
        }
    }

    /// Whether calls to `endpoint` are tried over HTTP/2.
    pub fn serves(&self, endpoint: &Endpoint) -> bool {
        match self.mode {
            Http2Mode::Never => false,
            Http2Mode::Auto if !endpoint.tls => false,
            _ => true,
        }
    }

    /// Sends `call` on a connection to `endpoint` with a stream to spare, dialling one if none
    /// has. The head and the body are queued together, so they leave in one write.
    pub async fn send(
        &self,
        endpoint: &Endpoint,
        (mut head, body): Call,
    ) -> Result<(http::Response<RecvStream>, Stream), NotSent> {
        let arrived = Instant::now();
        let ready = match self.checkout(endpoint) {
            Checkout::Ready(ready) => ready,
            Checkout::Http1 => return Err(NotSent::Http1((head, body))),
            Checkout::Dial(lock) => match self.dial(endpoint, &lock, arrived).await {
                Ok(Some(ready)) => ready,
                Ok(None) => return Err(NotSent::Http1((head, body))),
                Err(failure) => return Err(NotSent::Failed(failure)),
            },
        };
        *head.version_mut() = http::Version::HTTP_2;
        let Ready {
            mut send,
            closed,
            stream,
        } = ready;
        let sent = send
            .send_request(head, body.is_empty())
            .and_then(|(answer, mut out)| {
                if !body.is_empty() {
                    out.send_data(body, true)?;
                }
                Ok(answer)
            });
        let answer = match sent {
            Ok(answer) => answer,
            Err(e) => {
                // Not sent: the connection is going away (its `GOAWAY`, an error) and takes
                // no more calls.
                closed.store(true, Ordering::Release);
                return Err(NotSent::Failed(not_connected(transport(&e))));
            }
        };
        match answer.await {
            Ok(response) => Ok((response, stream)),
            Err(e) => {
                if e.is_go_away() {
                    closed.store(true, Ordering::Release);
                }
                Err(NotSent::Failed(refused_or(&e)))
            }
        }
    }

    /// A connection to `endpoint` with a stream to spare (counted), else what to do.
    fn checkout(&self, endpoint: &Endpoint) -> Checkout {
        let mut upstreams = self.upstreams.lock().unwrap_or_else(|e| e.into_inner());
        let upstream = upstream_of(&mut upstreams, endpoint);
        if upstream.http1 {
            return Checkout::Http1;
        }
        let mut spare = None;
        let mut now = None;
        upstream.conns.retain_mut(|conn| {
            if conn.closed.load(Ordering::Acquire) {
                return false;
            }
            let open = conn.open.load(Ordering::Acquire);
            if open > 0 {
                conn.idle_since = None;
            } else if spare.is_some() {
                // Not needed now that an earlier one has room: closed after a minute so.
                let now = *now.get_or_insert_with(Instant::now);
                if now - *conn.idle_since.get_or_insert(now) >= IDLE {
                    return false;
                }
            }
            let limit = self.max_streams.min(conn.send.current_max_send_streams());
            if spare.is_none() && open < limit {
                conn.idle_since = None;
                spare = Some(conn.claim());
            }
            true
        });
        match spare {
            Some(ready) => Checkout::Ready(ready),
            None => Checkout::Dial(upstream.dial.clone()),
        }
    }

    /// Dials a connection to `endpoint`, one at a time: who waited finds room on the one just
    /// made, or the failure of a dial that began after it arrived. `None`: HTTP/1.1 only.
    async fn dial(
        &self,
        endpoint: &Endpoint,
        lock: &tokio::sync::Mutex<Option<DialFailure>>,
        arrived: Instant,
    ) -> Result<Option<Ready>, CallFailure> {
        let mut last = lock.lock().await;
        if let Some(failed) = last.as_ref().filter(|f| f.at >= arrived) {
            return Err(failed.failure.clone());
        }
        match self.checkout(endpoint) {
            Checkout::Ready(ready) => return Ok(Some(ready)),
            Checkout::Http1 => return Ok(None),
            Checkout::Dial(_) => {}
        }
        let at = Instant::now();
        // Boxed: a connection's opening (4 KB, its TLS handshake's) would otherwise be part of
        // every call's state, and so of every open stream's for its whole life.
        match Box::pin(self.connect(endpoint)).await {
            Ok(Some(conn)) => {
                *last = None;
                let ready = conn.claim();
                let mut upstreams = self.upstreams.lock().unwrap_or_else(|e| e.into_inner());
                upstream_of(&mut upstreams, endpoint).conns.push(conn);
                Ok(Some(ready))
            }
            Ok(None) => {
                let mut upstreams = self.upstreams.lock().unwrap_or_else(|e| e.into_inner());
                upstream_of(&mut upstreams, endpoint).http1 = true;
                tracing::info!(
                    "upstream {} declined HTTP/2: its calls go over HTTP/1.1",
                    endpoint.authority()
                );
                Ok(None)
            }
            Err(failure) => {
                *last = Some(DialFailure {
                    at,
                    failure: failure.clone(),
                });
                Err(failure)
            }
        }
    }

    /// A new HTTP/2 connection to `endpoint`, its task spawned;
    /// `None` when its TLS handshake chose HTTP/1.1.
    async fn connect(&self, endpoint: &Endpoint) -> Result<Option<Conn>, CallFailure> {
        let uri = endpoint.uri("/".into()).map_err(|_| CallFailure::Connect)?;
        let io = self
            .connector
            .clone()
            .call(uri)
            .await
            .map_err(|e| not_connected(transport(&*e)))?;
        if endpoint.tls && !io.connected().is_negotiated_h2() {
            return Ok(None);
        }
        let (send, connection) = h2::client::Builder::new()
            .initial_window_size(STREAM_WINDOW)
            .initial_connection_window_size(CONNECTION_WINDOW)
            .max_header_list_size(MAX_HEADER_LIST)
            .handshake(BufReader::with_capacity(READ_BUFFER, TokioIo::new(io)))
            .await
            .map_err(|e| not_connected(transport(&e)))?;
        let closed = Arc::new(AtomicBool::new(false));
        let ended = closed.clone();
        #[expect(
            clippy::disallowed_methods,
            reason = "a connection serves the calls of many requests; it ends with its last stream once the pool lets it go"
        )]
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!("upstream HTTP/2 connection ended: {e}");
            }
            ended.store(true, Ordering::Release);
        });
        tracing::debug!(
            "upstream {}: HTTP/2 connection opened",
            endpoint.authority()
        );
        Ok(Some(Conn {
            send,
            open: Arc::default(),
            closed,
            idle_since: None,
        }))
    }
}

/// The entry of `endpoint`'s upstream, added on first use (upstreams are few: a scan).
fn upstream_of<'a>(upstreams: &'a mut Vec<Upstream>, endpoint: &Endpoint) -> &'a mut Upstream {
    let at = upstreams.iter().position(|u| {
        u.tls == endpoint.tls && u.port == endpoint.port && *u.host == *endpoint.host
    });
    let at = at.unwrap_or_else(|| {
        upstreams.push(Upstream {
            tls: endpoint.tls,
            host: endpoint.host.as_str().into(),
            port: endpoint.port,
            http1: false,
            conns: Vec::new(),
            dial: Arc::default(),
        });
        upstreams.len() - 1
    });
    &mut upstreams[at]
}

/// A dial's failure: a timeout or a refused certificate as such, anything else a failure to
/// connect (which failover may take elsewhere; hyper's pool says the same of its dials).
fn not_connected(failure: CallFailure) -> CallFailure {
    match failure {
        CallFailure::Broken => CallFailure::Connect,
        other => other,
    }
}

/// A stream the upstream refused before processing it (`REFUSED_STREAM`, or one beyond its
/// `GOAWAY`) was never seen by it: a failure to connect, which failover may take elsewhere.
fn refused_or(e: &h2::Error) -> CallFailure {
    if e.reason() == Some(h2::Reason::REFUSED_STREAM) {
        tracing::warn!("upstream call failed: its HTTP/2 stream was refused");
        return CallFailure::Connect;
    }
    transport(e)
}
