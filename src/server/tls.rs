//! TLS on the listeners: each TLS listener's certificates, chosen by SNI, loaded at start and
//! swapped whole on `SIGHUP` ([`reload_on_hangup`]) without touching open connections.
//!
//! A listener's [`Certificates`] is the rustls certificate resolver Pingora's acceptor asks at
//! every handshake: the first certificate whose names (its DNS subject alternative names, a
//! `*.` wildcard covering one label) match the client's SNI, else the first one configured.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arc_swap::ArcSwap;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;

use crate::config::listeners::{CertificateConf, TlsConf};

/// Why a listener's certificates could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("{listener}: cannot read {path}: {source}")]
    Read {
        listener: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{listener}: {path}: {what}")]
    Invalid {
        listener: &'static str,
        path: PathBuf,
        what: String,
    },
    #[error("{listener}: no certificates")]
    Empty { listener: &'static str },
    #[error("the TLS acceptor: {0}")]
    Acceptor(String),
}

/// The certificates a listener serves, in their configured order.
#[derive(Debug)]
struct Loaded {
    /// `[0]` is the default.
    keys: Vec<Arc<CertifiedKey>>,
    /// Exact DNS names (lowercase) → index in `keys`, the first certificate naming one wins.
    names: HashMap<String, usize>,
    /// `*.example.com` is kept as `example.com` → index.
    wildcards: HashMap<String, usize>,
}

impl Loaded {
    fn pick(&self, sni: Option<&str>) -> Option<&Arc<CertifiedKey>> {
        let chosen = sni.and_then(|name| {
            let name = name.trim_end_matches('.').to_ascii_lowercase();
            self.names.get(&name).copied().or_else(|| {
                let (_, parent) = name.split_once('.')?;
                self.wildcards.get(parent).copied()
            })
        });
        self.keys.get(chosen.unwrap_or(0))
    }
}

/// One TLS listener's certificates: what its files held at start or at the last good reload.
#[derive(Debug)]
pub struct Certificates {
    /// `public` or `admin`: names the listener in errors, logs and metrics.
    pub listener: &'static str,
    conf: TlsConf,
    current: ArcSwap<Loaded>,
}

impl Certificates {
    /// Reads every certificate and key of `conf`; any unreadable or invalid file is an error.
    pub fn load(listener: &'static str, conf: &TlsConf) -> Result<Arc<Self>, TlsError> {
        let loaded = load_all(listener, &conf.certificates)?;
        Ok(Arc::new(Certificates {
            listener,
            conf: conf.clone(),
            current: ArcSwap::from_pointee(loaded),
        }))
    }

    /// Reads the files again and serves them to the next handshakes; on any error the
    /// certificates served stay as they were.
    pub fn reload(&self) -> Result<(), TlsError> {
        let loaded = load_all(self.listener, &self.conf.certificates)?;
        self.current.store(Arc::new(loaded));
        Ok(())
    }

    /// Offer HTTP/2 by ALPN.
    pub fn h2(&self) -> bool {
        self.conf.h2
    }
}

impl ResolvesServerCert for Certificates {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        self.current.load().pick(hello.server_name()).cloned()
    }
}

fn load_all(listener: &'static str, confs: &[CertificateConf]) -> Result<Loaded, TlsError> {
    if confs.is_empty() {
        return Err(TlsError::Empty { listener });
    }
    let mut loaded = Loaded {
        keys: Vec::with_capacity(confs.len()),
        names: HashMap::new(),
        wildcards: HashMap::new(),
    };
    for (index, conf) in confs.iter().enumerate() {
        let (key, names) = load_one(listener, conf)?;
        loaded.keys.push(Arc::new(key));
        for name in names {
            let name = name.to_ascii_lowercase();
            match name.strip_prefix("*.") {
                Some(parent) => loaded.wildcards.entry(parent.to_owned()),
                None => loaded.names.entry(name),
            }
            .or_insert(index);
        }
    }
    Ok(loaded)
}

/// One chain and its key, checked to belong together, with the DNS names the leaf is for.
fn load_one(
    listener: &'static str,
    conf: &CertificateConf,
) -> Result<(CertifiedKey, Vec<String>), TlsError> {
    let invalid = |path: &Path, what: String| TlsError::Invalid {
        listener,
        path: path.to_owned(),
        what,
    };
    let cert_pem = read(listener, &conf.cert)?;
    let chain = CertificateDer::pem_slice_iter(&cert_pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| invalid(&conf.cert, format!("not a PEM certificate chain: {e}")))?;
    let Some(leaf) = chain.first() else {
        return Err(invalid(&conf.cert, "no certificate in the file".into()));
    };
    let names = dns_names(leaf).map_err(|what| invalid(&conf.cert, what))?;
    let key_pem = read(listener, &conf.key)?;
    let key = PrivateKeyDer::from_pem_slice(&key_pem)
        .map_err(|e| invalid(&conf.key, format!("no PEM private key: {e}")))?;
    let provider = rustls::crypto::ring::default_provider();
    let certified = CertifiedKey::from_der(chain, key, &provider).map_err(|e| {
        let cert = conf.cert.display();
        invalid(&conf.key, format!("not a usable key for {cert}: {e}"))
    })?;
    Ok((certified, names))
}

fn read(listener: &'static str, path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read {
        listener,
        path: path.to_owned(),
        source,
    })
}

/// The leaf's DNS subject alternative names.
fn dns_names(leaf: &CertificateDer<'_>) -> Result<Vec<String>, String> {
    use x509_parser::extensions::GeneralName;
    let (_, cert) = x509_parser::parse_x509_certificate(leaf)
        .map_err(|e| format!("not an X.509 certificate: {e}"))?;
    let san = cert
        .subject_alternative_name()
        .map_err(|e| format!("bad subject alternative names: {e}"))?;
    Ok(san
        .map(|ext| {
            ext.value
                .general_names
                .iter()
                .filter_map(|n| match n {
                    GeneralName::DNSName(name) => Some((*name).to_owned()),
                    _ => None,
                })
                .collect()
        })
        .unwrap_or_default())
}

/// Reloads every TLS listener's certificates on each `SIGHUP` until `shutdown` resolves. A
/// listener whose files fail to load keeps serving what it had, and the failure is logged.
pub async fn reload_on_hangup(
    all: Vec<Arc<Certificates>>,
    shutdown: impl std::future::Future<Output = ()>,
) {
    use tokio::signal::unix::{signal, SignalKind};
    let mut hangups = match signal(SignalKind::hangup()) {
        Ok(s) => s,
        Err(e) => {
            tracing::error!("cannot watch SIGHUP: certificates will not be reloaded: {e}");
            return;
        }
    };
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            () = &mut shutdown => return,
            got = hangups.recv() => if got.is_none() { return },
        }
        if all.is_empty() {
            tracing::info!("SIGHUP: no TLS listener, nothing to reload");
        }
        for certs in &all {
            reload_logged(certs);
        }
    }
}

fn reload_logged(certs: &Certificates) {
    let result = certs.reload();
    let ok = result.is_ok();
    match result {
        Ok(()) => tracing::info!(listener = certs.listener, "TLS certificates reloaded"),
        Err(e) => tracing::error!("TLS certificates not reloaded, the old ones stay: {e}"),
    }
    crate::metrics::METRICS.tls_reload(certs.listener, ok);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn loaded(names: &[(&str, usize)], wildcards: &[(&str, usize)], n: usize) -> Loaded {
        let provider = rustls::crypto::ring::default_provider();
        let keys = (0..n)
            .map(|_| {
                let key = rcgen::KeyPair::generate().unwrap();
                let cert = rcgen::CertificateParams::new(vec!["x.test".to_owned()])
                    .unwrap()
                    .self_signed(&key)
                    .unwrap();
                let der = PrivateKeyDer::try_from(key.serialize_der()).unwrap();
                Arc::new(CertifiedKey::from_der(vec![cert.der().clone()], der, &provider).unwrap())
            })
            .collect();
        let map = |pairs: &[(&str, usize)]| {
            pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), *v))
                .collect::<HashMap<_, _>>()
        };
        Loaded {
            keys,
            names: map(names),
            wildcards: map(wildcards),
        }
    }

    /// A self-signed certificate for `a.test` written as `a.crt` and `a.key` in `dir`; its DER.
    fn write_pair(dir: &Path) -> Vec<u8> {
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec!["a.test".to_owned()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        std::fs::write(dir.join("a.crt"), cert.pem()).unwrap();
        std::fs::write(dir.join("a.key"), key.serialize_pem()).unwrap();
        cert.der().to_vec()
    }

    #[test]
    fn a_failed_reload_keeps_the_certificates_served() {
        let dir = tempfile::tempdir().unwrap();
        let conf = TlsConf {
            certificates: vec![CertificateConf {
                cert: dir.path().join("a.crt"),
                key: dir.path().join("a.key"),
            }],
            h2: true,
        };
        let first = write_pair(dir.path());
        let certs = Certificates::load("public", &conf).unwrap();
        let served = || certs.current.load().pick(Some("a.test")).unwrap().cert[0].to_vec();
        assert_eq!(served(), first);

        std::fs::write(dir.path().join("a.key"), "not a key").unwrap();
        let e = certs.reload().unwrap_err().to_string();
        assert!(e.starts_with("public: ") && e.contains("a.key"), "{e}");
        assert_eq!(served(), first);

        // A key that is not the certificate's.
        let cert_of_first = std::fs::read(dir.path().join("a.crt")).unwrap();
        let second = write_pair(dir.path());
        std::fs::write(dir.path().join("a.crt"), &cert_of_first).unwrap();
        let e = certs.reload().unwrap_err().to_string();
        assert!(e.contains("not a usable key"), "{e}");
        assert_eq!(served(), first);

        let third = write_pair(dir.path());
        certs.reload().unwrap();
        assert_eq!(served(), third);
        assert_ne!(second, third);

        std::fs::remove_file(dir.path().join("a.crt")).unwrap();
        let e = certs.reload().unwrap_err().to_string();
        assert!(e.contains("cannot read") && e.contains("a.crt"), "{e}");
    }

    fn index(l: &Loaded, sni: Option<&str>) -> usize {
        let picked = l.pick(sni).unwrap();
        l.keys.iter().position(|k| Arc::ptr_eq(k, picked)).unwrap()
    }

    #[test]
    fn sni_picks_exact_then_wildcard_then_the_first() {
        let l = loaded(
            &[("a.test", 1), ("b.example.com", 2)],
            &[("example.com", 1)],
            3,
        );
        assert_eq!(index(&l, Some("a.test")), 1);
        assert_eq!(
            index(&l, Some("A.Test.")),
            1,
            "case and a final dot do not matter"
        );
        assert_eq!(index(&l, Some("b.example.com")), 2, "exact beats wildcard");
        assert_eq!(index(&l, Some("c.example.com")), 1);
        assert_eq!(
            index(&l, Some("x.c.example.com")),
            0,
            "a wildcard is one label"
        );
        assert_eq!(index(&l, Some("example.com")), 0);
        assert_eq!(index(&l, Some("unknown.test")), 0);
        assert_eq!(index(&l, None), 0);
    }
}
