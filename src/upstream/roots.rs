//! The certificate authorities the upstream client trusts: the public web roots built into
//! the gateway (Mozilla's, from `webpki-roots`) unless `tollgate.upstream.system_roots` is
//! off, plus every certificate of `tollgate.upstream.ca_file` (an operator's private CA, a
//! TLS-inspecting egress proxy's). Read once at start: a file that cannot be used stops the
//! gateway before it serves, rather than every upstream call failing later.

use std::path::{Path, PathBuf};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;
use rustls::RootCertStore;

use crate::config::UpstreamConf;

/// Why the upstream roots could not be assembled.
#[derive(Debug, thiserror::Error)]
pub enum RootsError {
    #[error("tollgate.upstream.ca_file {path}: cannot read it: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("tollgate.upstream.ca_file {path}: not PEM certificates: {message}")]
    Pem { path: PathBuf, message: String },
    #[error("tollgate.upstream.ca_file {path}: holds no certificate")]
    Empty { path: PathBuf },
    #[error(
        "tollgate.upstream.ca_file {path}: certificate {number} is not a usable CA: {message}"
    )]
    Unusable {
        path: PathBuf,
        number: usize,
        message: String,
    },
    #[error("upstream TLS: {0}")]
    Config(#[from] rustls::Error),
}

/// The TLS client configuration of every call to a provider (the upstream client's, the
/// context caches'): the roots of `conf`, TLS 1.2 and 1.3, ring, no client certificate.
pub fn upstream_tls(conf: &UpstreamConf) -> Result<rustls::ClientConfig, RootsError> {
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    Ok(rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(upstream_roots(conf)?)
        .with_no_client_auth())
}

/// The roots of `conf`. The configuration check guarantees some root: `system_roots` on, or a
/// `ca_file`.
pub fn upstream_roots(conf: &UpstreamConf) -> Result<RootCertStore, RootsError> {
    let mut roots = RootCertStore::empty();
    if conf.system_roots {
        roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    }
    if let Some(path) = &conf.ca_file {
        add_ca_file(&mut roots, path)?;
    }
    Ok(roots)
}

/// Adds every certificate of the PEM file at `path`.
fn add_ca_file(roots: &mut RootCertStore, path: &Path) -> Result<(), RootsError> {
    let pem = std::fs::read(path).map_err(|source| RootsError::Read {
        path: path.to_owned(),
        source,
    })?;
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| RootsError::Pem {
            path: path.to_owned(),
            message: e.to_string(),
        })?;
    if certs.is_empty() {
        return Err(RootsError::Empty {
            path: path.to_owned(),
        });
    }
    for (number, cert) in (1..).zip(certs) {
        roots.add(cert).map_err(|e| RootsError::Unusable {
            path: path.to_owned(),
            number,
            message: e.to_string(),
        })?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conf(ca_file: Option<PathBuf>, system_roots: bool) -> UpstreamConf {
        UpstreamConf {
            ca_file,
            system_roots,
            ..UpstreamConf::default()
        }
    }

    /// A self-signed CA certificate, as PEM.
    fn ca_pem() -> String {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params.self_signed(&key).unwrap().pem()
    }

    #[test]
    fn a_ca_file_adds_to_the_built_in_roots_or_replaces_them() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("cas.pem");
        std::fs::write(&file, format!("{}{}", ca_pem(), ca_pem())).unwrap();
        let built_in = upstream_roots(&conf(None, true)).unwrap().len();
        assert!(built_in > 100, "the public roots: {built_in}");
        let both = upstream_roots(&conf(Some(file.clone()), true)).unwrap();
        assert_eq!(both.len(), built_in + 2);
        let only = upstream_roots(&conf(Some(file), false)).unwrap();
        assert_eq!(only.len(), 2);
    }

    #[test]
    fn an_unusable_ca_file_is_refused_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("missing.pem");
        let empty = dir.path().join("empty.pem");
        std::fs::write(&empty, "not a certificate\n").unwrap();
        let garbled = dir.path().join("garbled.pem");
        std::fs::write(
            &garbled,
            "-----BEGIN CERTIFICATE-----\nnot base64!\n-----END CERTIFICATE-----\n",
        )
        .unwrap();
        let junk_der = dir.path().join("junk.pem");
        std::fs::write(
            &junk_der,
            "-----BEGIN CERTIFICATE-----\nAAECAwQF\n-----END CERTIFICATE-----\n",
        )
        .unwrap();
        for (file, wording) in [
            (&missing, "cannot read it"),
            (&empty, "holds no certificate"),
            (&garbled, "not PEM certificates"),
            (&junk_der, "certificate 1 is not a usable CA"),
        ] {
            let e = upstream_roots(&conf(Some(file.clone()), true)).unwrap_err();
            let text = e.to_string();
            assert!(text.contains(&file.display().to_string()), "{text}");
            assert!(text.contains(wording), "{text}");
        }
    }
}
