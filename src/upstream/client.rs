//! The gateway's one upstream client: every planned call goes through it. [`UpstreamClient::open`]
//! sends one call and hands back its answer as it begins (a stream); `run` sends the calls of
//! a plan (one for a buffered answer; several for an adapter's
//! [`FanOut`](crate::providers::FanOut), e.g. an embeddings batch above the upstream's per-call
//! limit) and collects their bodies, bounded, in call order. A failure is a [`CallFailure`]
//! (`failure.rs`).
//!
//! Invariants: at most [`MAX_IN_FLIGHT`] calls of one request are in flight at once; the first
//! failure (non-2xx answer or transport error) ends the run and drops the calls still in
//! flight — one failing part fails the whole request, so nothing is joined or billed. The
//! connections are shared by every request, with the upstream timeouts of the config: HTTP/2
//! ones in the [`Multiplexer`] where the upstream speaks it (`tollgate.upstream.http2`), else
//! hyper's HTTP/1.1 pool.

use std::time::Duration;

use bytes::Bytes;
use futures_util::stream::{self, StreamExt};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};

use crate::catalog::Endpoint;
use crate::config::UpstreamConf;
use crate::providers::UpstreamRequest;
use crate::upstream::failure::{transport, CallFailure};
use crate::upstream::multiplex::{Call, Multiplexer, NotSent, Stream};
use crate::upstream::roots::{upstream_tls, RootsError};

/// Calls of one request sent at the same time.
pub const MAX_IN_FLIGHT: usize = 4;

/// A successful call's answer as it begins: its status, and its body still to be read. The
/// head is dropped: hyper's header values share its first read buffer, which a long stream
/// would otherwise keep alive beside the next one (8 KB an open stream).
pub struct Answer {
    pub status: u16,
    /// The upstream's own id for the call ([`upstream_request_id`]).
    pub request_id: Option<Box<str>>,
    /// `Content-Length`, when sent.
    length: Option<u64>,
    body: AnswerBody,
    /// The longest wait for the body's next bytes.
    read_timeout: Duration,
}

/// An answer's body as each protocol hands it over.
enum AnswerBody {
    Http1(Incoming),
    Http2 {
        body: h2::RecvStream,
        /// Counted on its connection while the answer is read.
        _stream: Stream,
    },
}

impl AnswerBody {
    /// `Content-Length`, when sent.
    fn length(&self, headers: &http::HeaderMap) -> Option<u64> {
        match self {
            AnswerBody::Http1(body) => hyper::body::Body::size_hint(body).exact(),
            AnswerBody::Http2 { .. } => headers
                .get(http::header::CONTENT_LENGTH)?
                .to_str()
                .ok()?
                .parse()
                .ok(),
        }
    }

    /// The next bytes; `None` at the end.
    async fn next(&mut self) -> Option<Result<Bytes, CallFailure>> {
        use http_body_util::BodyExt;
        match self {
            AnswerBody::Http1(body) => loop {
                match body.frame().await? {
                    Err(e) => return Some(Err(transport(&e))),
                    Ok(frame) => {
                        if let Ok(data) = frame.into_data() {
                            return Some(Ok(data));
                        }
                    }
                }
            },
            AnswerBody::Http2 { body, .. } => match body.data().await? {
                Err(e) => Some(Err(transport(&e))),
                Ok(data) => {
                    // Read: the upstream may send as much again.
                    let _ = body.flow_control().release_capacity(data.len());
                    Some(Ok(data))
                }
            },
        }
    }
}

impl Answer {
    /// The body's next chunk; `None` at its end. `Err`: [`CallFailure::Timeout`] or
    /// [`CallFailure::Broken`].
    pub async fn chunk(&mut self) -> Result<Option<Bytes>, CallFailure> {
        tokio::time::timeout(self.read_timeout, self.body.next())
            .await
            .map_err(|_| timed_out("reading"))?
            .transpose()
    }
}

/// What a run's calls answered: every body, in call order, and the upstream's request id of
/// the first call.
#[derive(Debug)]
pub struct Answered {
    pub bodies: Vec<Bytes>,
    pub request_id: Option<Box<str>>,
}

/// The longest upstream request id kept (the usage record's column holds 128).
const MAX_REQUEST_ID: usize = 128;

/// The upstream's own id for a call, read off its answer's head, the first of: Anthropic's
/// `request-id` (Vertex's Claude too), OpenAI's `x-request-id`, Google's
/// `x-cloud-trace-context` (its trace id, before the `/`). Not a secret — it is what the
/// provider asks for in a support ticket — but it is the upstream's text: kept only when it is
/// 1–128 visible ASCII characters.
pub fn upstream_request_id(headers: &http::HeaderMap) -> Option<Box<str>> {
    let trace = || {
        let v = headers.get("x-cloud-trace-context")?.to_str().ok()?;
        v.split('/').next()
    };
    let id = ["request-id", "x-request-id"]
        .iter()
        .find_map(|name| headers.get(*name)?.to_str().ok())
        .or_else(trace)?
        .trim();
    let printable = id.bytes().all(|b| b.is_ascii_graphic());
    (printable && (1..=MAX_REQUEST_ID).contains(&id.len())).then(|| id.into())
}

/// The upstream connection pool's client: hyper's own, without the layers `reqwest` puts on
/// every call (its URL parsed three times, a redirect policy and a retry policy the gateway
/// turns off), which were a quarter of the proxy thread's instructions per request.
type Pool = hyper_util::client::legacy::Client<HttpsConnector<HttpConnector>, Full<Bytes>>;

pub struct UpstreamClient {
    /// HTTP/1.1: a connection per call in flight.
    pool: Pool,
    /// HTTP/2, for the upstreams that speak it.
    multiplexer: Multiplexer,
    read_timeout: Duration,
    max_answer: u64,
}

const USER_AGENT: http::HeaderValue =
    http::HeaderValue::from_static(concat!("tollgate/", env!("CARGO_PKG_VERSION")));

impl UpstreamClient {
    /// The client of `conf`; an unusable `ca_file` is an error.
    pub fn new(conf: &UpstreamConf) -> Result<Self, RootsError> {
        Ok(Self::with_tls(conf, upstream_tls(conf)?))
    }

    /// The client of `conf` with its TLS configuration ([`upstream_tls`]) already made.
    pub fn with_tls(conf: &UpstreamConf, tls_config: rustls::ClientConfig) -> Self {
        let mut tcp = HttpConnector::new();
        tcp.enforce_http(false); // https is the TLS layer's
        tcp.set_nodelay(true);
        tcp.set_connect_timeout(Some(conf.connect_timeout));
        let multiplexed = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls_config.clone())
            .https_or_http()
            .enable_all_versions()
            .wrap_connector(tcp.clone());
        let tls = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls_config)
            .https_or_http()
            .enable_http1()
            .wrap_connector(tcp);
        // No retries of its own but a request on a pooled connection the upstream had closed
        // before it was sent (hyper's default, safe): retrying is failover's
        // (`proxy/failover.rs`). No redirects either: an upstream's redirect is its failure to
        // report, not a place to resend the credential to.
        let pool = hyper_util::client::legacy::Client::builder(TokioExecutor::new())
            .pool_timer(TokioTimer::new())
            .pool_idle_timeout(Duration::from_secs(60))
            .build(tls);
        UpstreamClient {
            pool,
            multiplexer: Multiplexer::new(multiplexed, conf.http2, conf.http2_max_streams),
            read_timeout: conf.read_timeout,
            max_answer: conf.max_answer_body.as_u64(),
        }
    }

    /// Every call's answer body, in call order, or the first failure.
    pub async fn run(
        &self,
        endpoint: &Endpoint,
        calls: Vec<UpstreamRequest>,
    ) -> Result<Answered, CallFailure> {
        let count = calls.len();
        let mut answers: Vec<Option<Bytes>> = vec![None; count];
        let mut request_id = None;
        let mut pending = stream::iter(calls.into_iter().enumerate())
            .map(|(i, call)| async move { (i, self.send(endpoint, call).await) })
            .buffer_unordered(MAX_IN_FLIGHT);
        while let Some((i, answer)) = pending.next().await {
            let (body, id) = answer?;
            if i == 0 {
                request_id = id;
            }
            if let Some(slot) = answers.get_mut(i) {
                *slot = Some(body);
            }
        }
        let bodies = answers
            .into_iter()
            .collect::<Option<Vec<Bytes>>>()
            .ok_or(CallFailure::Broken)?;
        Ok(Answered { bodies, request_id })
    }

    async fn send(
        &self,
        endpoint: &Endpoint,
        call: UpstreamRequest,
    ) -> Result<(Bytes, Option<Box<str>>), CallFailure> {
        let mut response = self.open(endpoint, call, "application/json").await?;
        let request_id = response.request_id.take();
        Ok((self.read_bounded(response).await?, request_id))
    }

    /// Sends one call and returns its successful answer as it begins (the body still to be
    /// read: a stream); a non-2xx answer is read (bounded) into the failure.
    pub async fn open(
        &self,
        endpoint: &Endpoint,
        call: UpstreamRequest,
        accept: &'static str,
    ) -> Result<Answer, CallFailure> {
        let mut request = http::Request::new(());
        *request.method_mut() = http::Method::POST;
        *request.uri_mut() = endpoint.uri(call.path).map_err(|e| {
            tracing::warn!("upstream call not sent: {e}");
            CallFailure::Connect
        })?;
        let headers = request.headers_mut();
        headers.insert(http::header::ACCEPT, http::HeaderValue::from_static(accept));
        headers.insert(http::header::USER_AGENT, USER_AGENT);
        for (name, value) in call.headers {
            headers.append(name, value);
        }
        let (head, body) = tokio::time::timeout(
            self.read_timeout,
            self.request(endpoint, (request, call.body)),
        )
        .await
        .map_err(|_| timed_out("awaiting the answer"))??;
        let answer = Answer {
            status: head.status.as_u16(),
            request_id: upstream_request_id(&head.headers),
            length: body.length(&head.headers),
            body,
            read_timeout: self.read_timeout,
        };
        if head.status.is_success() {
            return Ok(answer);
        }
        let retry_after = head
            .headers
            .get(http::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        drop(head);
        let mut answer = answer;
        let request_id = answer.request_id.take();
        Err(CallFailure::Status {
            status: answer.status,
            retry_after,
            request_id,
            body: self.read_bounded(answer).await?,
        })
    }
}

impl UpstreamClient {
    /// Sends `call` over HTTP/2 where `endpoint` speaks it, else HTTP/1.1: the answer's head
    /// and its body still to be read.
    async fn request(
        &self,
        endpoint: &Endpoint,
        call: Call,
    ) -> Result<(http::response::Parts, AnswerBody), CallFailure> {
        let (head, body) = if self.multiplexer.serves(endpoint) {
            match self.multiplexer.send(endpoint, call).await {
                Ok((response, stream)) => {
                    let (head, body) = response.into_parts();
                    return Ok((
                        head,
                        AnswerBody::Http2 {
                            body,
                            _stream: stream,
                        },
                    ));
                }
                Err(NotSent::Failed(failure)) => return Err(failure),
                Err(NotSent::Http1(call)) => call,
            }
        } else {
            call
        };
        let response = self.pool.request(head.map(|()| Full::new(body))).await;
        let (head, body) = response.map_err(|e| transport(&e))?.into_parts();
        Ok((head, AnswerBody::Http1(body)))
    }

    /// The answer's body, refused as soon as it grows past the limit (whatever
    /// `Content-Length` says).
    async fn read_bounded(&self, mut answer: Answer) -> Result<Bytes, CallFailure> {
        let too_large = CallFailure::TooLarge {
            limit: self.max_answer,
        };
        if answer.length.is_some_and(|n| n > self.max_answer) {
            return Err(too_large);
        }
        // Room for the stated length (within the limit, checked above), so that a large answer
        // (embeddings of 100 inputs: 2.3 MB) is not copied at each doubling as it arrives.
        let stated = answer.length.and_then(|n| usize::try_from(n).ok());
        let mut body = bytes::BytesMut::with_capacity(stated.unwrap_or_default());
        while let Some(chunk) = answer.chunk().await? {
            if (body.len() + chunk.len()) as u64 > self.max_answer {
                return Err(too_large);
            }
            body.extend_from_slice(&chunk);
        }
        Ok(body.freeze())
    }
}

fn timed_out(waiting: &str) -> CallFailure {
    tracing::warn!("upstream call failed: timed out {waiting}");
    CallFailure::Timeout
}

/// The client against raw local sockets: what each way an upstream can fail becomes.
#[cfg(test)]
mod client_tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    fn client(max_answer: u64) -> UpstreamClient {
        UpstreamClient::new(&UpstreamConf {
            read_timeout: Duration::from_millis(300),
            max_answer_body: bytesize::ByteSize::b(max_answer),
            ..UpstreamConf::default()
        })
        .unwrap()
    }

    fn call() -> UpstreamRequest {
        UpstreamRequest {
            path: "/v1/x?alt=sse".into(),
            headers: vec![(
                http::HeaderName::from_static("x-goog-api-key"),
                http::HeaderValue::from_static("k"),
            )],
            body: Bytes::from_static(b"{\"a\":1}"),
        }
    }

    /// A one-connection upstream that reads the request head and body, then writes `answer`
    /// (and keeps the connection open); the request it read comes back on the handle.
    async fn upstream(answer: &'static [u8]) -> (Endpoint, tokio::task::JoinHandle<String>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let endpoint = Endpoint::parse(&format!("http://{}", listener.local_addr().unwrap()));
        #[expect(
            clippy::disallowed_methods,
            reason = "a test's fake upstream serves while the test calls it"
        )]
        let served = tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.unwrap();
            let mut request = Vec::new();
            let mut buf = [0u8; 4096];
            while !request.ends_with(b"{\"a\":1}") {
                let n = socket.read(&mut buf).await.unwrap();
                assert!(n > 0, "the request ended early");
                request.extend_from_slice(&buf[..n]);
            }
            socket.write_all(answer).await.unwrap();
            tokio::time::sleep(Duration::from_secs(2)).await;
            String::from_utf8(request).unwrap()
        });
        (endpoint.unwrap(), served)
    }

    #[tokio::test]
    async fn a_call_is_sent_as_planned_and_its_answer_read() {
        let (endpoint, served) = upstream(
            b"HTTP/1.1 200 OK\r\nrequest-id: req_0123456789\r\ncontent-length: 5\r\n\r\nhello",
        )
        .await;
        let answered = client(1024).run(&endpoint, vec![call()]).await.unwrap();
        assert_eq!(answered.bodies, vec![Bytes::from_static(b"hello")]);
        assert_eq!(answered.request_id.as_deref(), Some("req_0123456789"));
        let request = served.await.unwrap().to_ascii_lowercase();
        assert!(
            request.starts_with("post /v1/x?alt=sse http/1.1\r\n"),
            "{request}"
        );
        for header in [
            "x-goog-api-key: k",
            "accept: application/json",
            "user-agent: tollgate/",
        ] {
            assert!(request.contains(header), "{header} in {request}");
        }
    }

    #[tokio::test]
    async fn failures_are_told_apart() {
        let failure = |answer: &'static [u8], max: u64| async move {
            let (endpoint, _served) = upstream(answer).await;
            client(max).run(&endpoint, vec![call()]).await.unwrap_err()
        };
        let throttled = failure(
            b"HTTP/1.1 429 Too Many\r\nretry-after: 7\r\nx-request-id: req_429\r\ncontent-length: 4\r\n\r\nslow",
            1024,
        )
        .await;
        let CallFailure::Status {
            status,
            body,
            retry_after,
            request_id,
        } = throttled
        else {
            panic!("{throttled:?}");
        };
        assert_eq!(
            (status, &body[..], retry_after.as_deref()),
            (429, &b"slow"[..], Some("7"))
        );
        assert_eq!(request_id.as_deref(), Some("req_429"));
        let declared = failure(
            b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\n0123456789",
            8,
        )
        .await;
        assert!(
            matches!(declared, CallFailure::TooLarge { limit: 8 }),
            "{declared:?}"
        );
        let chunked = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\n01234\r\n5\r\n56789\r\n0\r\n\r\n";
        let grown = failure(chunked, 8).await;
        assert!(
            matches!(grown, CallFailure::TooLarge { limit: 8 }),
            "{grown:?}"
        );
        let silent_head = failure(b"", 1024).await;
        assert!(
            matches!(silent_head, CallFailure::Timeout),
            "{silent_head:?}"
        );
        let silent_body =
            failure(b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\n01234", 1024).await;
        assert!(
            matches!(silent_body, CallFailure::Timeout),
            "{silent_body:?}"
        );
        let broken = failure(b"HTTP/1.1 200 OK\r\nbroken\r\n\r\n", 1024).await;
        assert!(matches!(broken, CallFailure::Broken), "{broken:?}");
    }

    #[tokio::test]
    async fn no_listener_is_a_connect_failure() {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port(); // closed again: nothing listens there
        let endpoint = Endpoint::parse(&format!("http://127.0.0.1:{port}")).unwrap();
        let failure = client(1024).run(&endpoint, vec![call()]).await.unwrap_err();
        assert!(matches!(failure, CallFailure::Connect), "{failure:?}");
    }
}

#[cfg(test)]
mod request_id_tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> http::HeaderMap {
        let mut h = http::HeaderMap::new();
        for (name, value) in pairs {
            h.append(*name, http::HeaderValue::from_str(value).unwrap());
        }
        h
    }

    #[test]
    fn the_upstream_request_id_comes_from_the_providers_header() {
        let id = |pairs: &[(&'static str, &str)]| upstream_request_id(&headers(pairs));
        assert_eq!(
            id(&[("request-id", "req_011CVEA3SF7rnb3DuBZytqQa")]).as_deref(),
            Some("req_011CVEA3SF7rnb3DuBZytqQa")
        );
        assert_eq!(
            id(&[("x-request-id", "req_abc"), ("request-id", "req_first")]).as_deref(),
            Some("req_first")
        );
        assert_eq!(
            id(&[(
                "x-cloud-trace-context",
                "105445aa7843bc8bf206b12000100000/1;o=1"
            )])
            .as_deref(),
            Some("105445aa7843bc8bf206b12000100000")
        );
        assert_eq!(id(&[]), None);
        assert_eq!(id(&[("request-id", "")]), None);
        assert_eq!(id(&[("request-id", "two words")]), None);
        assert_eq!(id(&[("request-id", &"x".repeat(129))]), None);
        assert_eq!(
            id(&[("request-id", &"x".repeat(128))]).map(|i| i.len()),
            Some(128)
        );
    }
}
