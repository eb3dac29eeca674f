//! How each listener speaks to its clients (`tollgate.listeners.public|admin`): TLS with
//! certificates chosen by SNI, HTTP/2, the PROXY protocol; and whose word about a client's
//! address is believed (`tollgate.trusted_proxies`).

use std::path::PathBuf;

use serde::Deserialize;

/// Both listeners' transport options.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ListenersConf {
    /// `tollgate.listen`.
    pub public: ListenerConf,
    /// `tollgate.admin_listen`.
    pub admin: ListenerConf,
}

/// One listener's transport: plain HTTP/1.1 unless said otherwise.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ListenerConf {
    /// Terminate TLS here; absent: plain HTTP (loopback and internal listeners).
    pub tls: Option<TlsConf>,
    /// HTTP/2 with prior knowledge on a plain listener (internal clients that speak h2c).
    pub h2c: bool,
    /// Every connection begins with a PROXY protocol header (v1 or v2), believed only from a
    /// trusted proxy.
    pub proxy_protocol: bool,
}

impl ListenerConf {
    /// The listener speaks TLS (the console's cookie can then be `Secure`).
    pub fn is_tls(&self) -> bool {
        self.tls.is_some()
    }

    /// What is wrong with it, each naming its field under `at`. The files are read when the
    /// gateway starts (`serve`), so that other commands run where the keys are not readable.
    pub fn problems(&self, at: &str) -> Vec<String> {
        let mut problems = Vec::new();
        if let Some(tls) = &self.tls {
            if tls.certificates.is_empty() {
                problems.push(format!("{at}.tls.certificates: at least one"));
            }
            if self.h2c {
                problems.push(format!(
                    "{at}: h2c is for plain listeners (HTTP/2 over TLS is tls.h2)"
                ));
            }
        }
        problems
    }
}

/// A TLS listener (TLS 1.2 and 1.3 only).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsConf {
    /// Served by SNI; the first one also to clients that name no known host.
    pub certificates: Vec<CertificateConf>,
    /// Offer HTTP/2 by ALPN.
    #[serde(default = "yes")]
    pub h2: bool,
}

/// A certificate chain and its private key, PEM files.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CertificateConf {
    pub cert: PathBuf,
    pub key: PathBuf,
}

fn yes() -> bool {
    true
}
