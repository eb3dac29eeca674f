//! The web console's files, embedded in the binary (no front-end build step): one page, one
//! script, one stylesheet, all talking to the admin API.

/// `(content type, body)` of a console file, by path.
pub fn asset(path: &str) -> Option<(&'static str, &'static [u8])> {
    match path {
        "/" | "/index.html" => Some((
            "text/html; charset=utf-8",
            include_bytes!("console/index.html"),
        )),
        "/console/app.js" => Some((
            "text/javascript; charset=utf-8",
            include_bytes!("console/app.js"),
        )),
        "/console/app.css" => Some(("text/css; charset=utf-8", include_bytes!("console/app.css"))),
        _ => None,
    }
}

/// Headers every console page carries: no framing (clickjacking), no inline scripts, nothing
/// fetched from elsewhere.
pub const SECURITY_HEADERS: [(&str, &str); 4] = [
    ("x-frame-options", "DENY"),
    (
        "content-security-policy",
        "default-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; frame-ancestors 'none'",
    ),
    ("x-content-type-options", "nosniff"),
    ("referrer-policy", "no-referrer"),
];
