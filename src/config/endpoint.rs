//! A parsed upstream base URL: scheme, host, port and path prefix. Only what the proxy needs
//! to build a peer and a request path; no general URL handling.

use http::uri::{Authority, Scheme, Uri};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    pub tls: bool,
    pub host: String,
    pub port: u16,
    /// Path prefix without a trailing slash (`""` or e.g. `/v1`).
    pub base_path: String,
    /// `host[:port]` as a request's URI and `Host` carry it (the port only when it is not the
    /// scheme's default), parsed once: every upstream call's URI is built from it.
    authority: Authority,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EndpointError {
    #[error("{0:?} must start with http:// or https://")]
    Scheme(String),
    #[error("{0:?} has no host")]
    Host(String),
    #[error("{0:?} has a bad port")]
    Port(String),
}

impl Endpoint {
    pub fn parse(url: &str) -> Result<Self, EndpointError> {
        let (tls, rest) = if let Some(r) = url.strip_prefix("https://") {
            (true, r)
        } else if let Some(r) = url.strip_prefix("http://") {
            (false, r)
        } else {
            return Err(EndpointError::Scheme(url.to_owned()));
        };
        let (authority, path) = match rest.find('/') {
            Some(i) => rest.split_at(i),
            None => (rest, ""),
        };
        let (host, port) = match authority.rsplit_once(':') {
            Some((h, p)) if !h.ends_with(']') || authority.starts_with('[') => (
                h,
                p.parse::<u16>()
                    .map_err(|_| EndpointError::Port(url.to_owned()))?,
            ),
            _ => (authority, if tls { 443 } else { 80 }),
        };
        let host = host.trim_start_matches('[').trim_end_matches(']');
        if host.is_empty() {
            return Err(EndpointError::Host(url.to_owned()));
        }
        let named = if host.contains(':') {
            format!("[{host}]")
        } else {
            host.to_owned()
        };
        let default = if tls { 443 } else { 80 };
        let authority = if port == default {
            named
        } else {
            format!("{named}:{port}")
        };
        Ok(Endpoint {
            tls,
            host: host.to_owned(),
            port,
            base_path: path.trim_end_matches('/').to_owned(),
            authority: authority
                .parse()
                .map_err(|_| EndpointError::Host(url.to_owned()))?,
        })
    }

    /// The `Host` header value.
    pub fn authority(&self) -> &str {
        self.authority.as_str()
    }

    /// The URI of an upstream call to `path_and_query` (which already carries the base path),
    /// or of a connection's dial (`/`), built from parts: the origin is neither formatted nor
    /// parsed again on every call.
    pub fn uri(&self, path_and_query: String) -> Result<Uri, http::Error> {
        let scheme = if self.tls {
            Scheme::HTTPS
        } else {
            Scheme::HTTP
        };
        Uri::builder()
            .scheme(scheme)
            .authority(self.authority.clone())
            .path_and_query(path_and_query)
            .build()
    }

    /// The absolute URL of `path_and_query`, for the gateway's cold-path HTTP calls (context
    /// caches, sent with `reqwest`, which takes text).
    pub fn url(&self, path_and_query: &str) -> String {
        let scheme = if self.tls { "https" } else { "http" };
        format!("{scheme}://{}{path_and_query}", self.authority)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_shapes_we_use() {
        let e = Endpoint::parse("https://api.openai.com/v1/").unwrap();
        assert_eq!(
            (e.tls, e.host.as_str(), e.port, e.base_path.as_str()),
            (true, "api.openai.com", 443, "/v1")
        );
        let e = Endpoint::parse("http://127.0.0.1:8000").unwrap();
        assert_eq!((e.tls, e.port, e.base_path.as_str()), (false, 8000, ""));
        assert_eq!(e.authority(), "127.0.0.1:8000");
        assert_eq!(e.url("/v1/x?alt=sse"), "http://127.0.0.1:8000/v1/x?alt=sse");
        let e = Endpoint::parse("https://h.example/base").unwrap();
        assert_eq!(e.url("/base/v1"), "https://h.example/base/v1");
        assert_eq!(
            e.uri("/base/v1?alt=sse".into()).unwrap(),
            "https://h.example/base/v1?alt=sse"
        );
        let e = Endpoint::parse("http://[::1]:8000/v1").unwrap();
        assert_eq!((e.host.as_str(), e.authority()), ("::1", "[::1]:8000"));
        assert_eq!(e.uri("/v1/x".into()).unwrap(), "http://[::1]:8000/v1/x");
        assert!(Endpoint::parse("http://h ost").is_err());
        assert!(Endpoint::parse("ftp://x").is_err());
        assert!(Endpoint::parse("http://:80").is_err());
        assert!(Endpoint::parse("http://h:notaport").is_err());
    }
}
