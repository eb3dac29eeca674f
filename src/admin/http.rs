//! The admin listener's requests and answers as plain values: the handlers never see Pingora,
//! and tests call them without a socket.

use bytes::Bytes;
use http::{HeaderMap, Method, StatusCode};
use serde::Serialize;

/// The largest request body the admin API reads.
pub const MAX_BODY: usize = 64 * 1024;

#[derive(Debug, Clone)]
pub struct Request {
    pub method: Method,
    pub path: String,
    pub query: Option<String>,
    pub headers: HeaderMap,
    pub body: Bytes,
    /// The client's address (what failed sign-ins are counted and logged under).
    pub peer: Option<std::net::IpAddr>,
}

impl Request {
    pub fn new(method: Method, path_and_query: &str) -> Self {
        let (path, query) = match path_and_query.split_once('?') {
            Some((p, q)) => (p, Some(q.to_owned())),
            None => (path_and_query, None),
        };
        Request {
            method,
            path: path.to_owned(),
            query,
            headers: HeaderMap::new(),
            body: Bytes::new(),
            peer: None,
        }
    }

    /// The first value of query parameter `name`, percent-decoded.
    pub fn param(&self, name: &str) -> Option<String> {
        let query = self.query.as_deref()?;
        url::form_urlencoded::parse(query.as_bytes())
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.into_owned())
            .filter(|v| !v.is_empty())
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// The value of cookie `name`.
    pub fn cookie(&self, name: &str) -> Option<&str> {
        self.headers
            .get_all(http::header::COOKIE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(';'))
            .filter_map(|c| c.trim().split_once('='))
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v)
    }
}

#[derive(Debug, Clone)]
pub struct Response {
    pub status: StatusCode,
    pub content_type: &'static str,
    pub headers: Vec<(http::HeaderName, String)>,
    pub body: Vec<u8>,
}

impl Response {
    pub fn new(status: StatusCode, content_type: &'static str, body: Vec<u8>) -> Self {
        Response {
            status,
            content_type,
            headers: Vec::new(),
            body,
        }
    }

    pub fn json(status: StatusCode, value: &impl Serialize) -> Self {
        let body = serde_json::to_vec(value).unwrap_or_default();
        Self::new(status, "application/json", body)
    }

    pub fn with_header(mut self, name: http::HeaderName, value: String) -> Self {
        self.headers.push((name, value));
        self
    }
}

/// Splits a path into its percent-decoded segments (`/a/b%2Fc` → `["a", "b/c"]`).
pub fn segments(path: &str) -> Vec<String> {
    path.split('/')
        .filter(|s| !s.is_empty())
        .map(|s| {
            percent_encoding::percent_decode_str(s)
                .decode_utf8_lossy()
                .into_owned()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_queries_and_cookies_are_read() {
        let mut req = Request::new(Method::GET, "/admin/v1/x?limit=5&key=key_a%2Bb&empty=");
        req.headers.insert(
            http::header::COOKIE,
            "a=1; tg_session=s3cr3t".parse().unwrap(),
        );
        assert_eq!(req.path, "/admin/v1/x");
        assert_eq!(req.param("limit").as_deref(), Some("5"));
        assert_eq!(req.param("key").as_deref(), Some("key_a+b"));
        assert_eq!(req.param("empty"), None);
        assert_eq!(req.cookie("tg_session"), Some("s3cr3t"));
        assert_eq!(req.cookie("b"), None);
        assert_eq!(
            segments("/admin/v1/catalog/models/google%2Fgemini-2.5-flash/routes/1"),
            [
                "admin",
                "v1",
                "catalog",
                "models",
                "google/gemini-2.5-flash",
                "routes",
                "1"
            ]
        );
    }
}
