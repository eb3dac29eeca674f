//! A private test CA and the certificates it issues, made at test time (rcgen), written as PEM
//! files for the gateway's TLS listeners (and the simulator's TLS), and clients that trust it.

use std::path::{Path, PathBuf};

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair, KeyUsagePurpose};

/// A CA that signs the tests' certificates.
pub struct TestCa {
    cert: rcgen::Certificate,
    key: KeyPair,
}

/// A certificate and its key, as PEM, and the certificate's DER (what a client sees).
pub struct Issued {
    pub cert_pem: String,
    pub key_pem: String,
    pub der: Vec<u8>,
}

impl TestCa {
    pub fn new() -> TestCa {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params
            .distinguished_name
            .push(DnType::CommonName, "tollgate test CA");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let cert = params.self_signed(&key).unwrap();
        TestCa { cert, key }
    }

    pub fn pem(&self) -> String {
        self.cert.pem()
    }

    /// The CA as a root reqwest trusts.
    pub fn root(&self) -> reqwest::Certificate {
        reqwest::Certificate::from_pem(self.pem().as_bytes()).unwrap()
    }

    /// A server certificate for `names` (DNS names, or IP addresses as text), signed by the CA.
    pub fn issue(&self, names: &[&str]) -> Issued {
        let key = KeyPair::generate().unwrap();
        let names: Vec<String> = names.iter().map(|n| (*n).to_owned()).collect();
        let mut params = CertificateParams::new(names.clone()).unwrap();
        params.distinguished_name.push(
            DnType::CommonName,
            names.first().cloned().unwrap_or_default(),
        );
        let cert = params.signed_by(&key, &self.cert, &self.key).unwrap();
        Issued {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
            der: cert.der().to_vec(),
        }
    }
}

impl Issued {
    /// Writes `<name>.crt` and `<name>.key` into `dir`; returns their paths.
    pub fn write(&self, dir: &Path, name: &str) -> (PathBuf, PathBuf) {
        let cert = dir.join(format!("{name}.crt"));
        let key = dir.join(format!("{name}.key"));
        std::fs::write(&cert, &self.cert_pem).unwrap();
        std::fs::write(&key, &self.key_pem).unwrap();
        (cert, key)
    }
}

/// A listener's transport (`GatewayBuilder::public_listener`) serving these certificate files,
/// in order (the first is the default).
pub fn tls_listener(files: &[(PathBuf, PathBuf)], h2: bool) -> String {
    let certificates: Vec<String> = files
        .iter()
        .map(|(cert, key)| {
            format!(
                "{{cert: \"{}\", key: \"{}\"}}",
                cert.display(),
                key.display()
            )
        })
        .collect();
    format!(
        "{{tls: {{h2: {h2}, certificates: [{}]}}}}",
        certificates.join(", ")
    )
}

/// A client trusting only `ca`, reaching `host` (any name) at `addr`; it reports the peer
/// certificate of each answer (`peer_certificate`).
pub fn client(ca: &TestCa, host: &str, addr: std::net::SocketAddr) -> reqwest::ClientBuilder {
    reqwest::Client::builder()
        .tls_built_in_root_certs(false)
        .add_root_certificate(ca.root())
        .resolve(host, addr)
        .tls_info(true)
}

/// The DER of the certificate the server presented for `res`.
pub fn peer_certificate(res: &reqwest::Response) -> Vec<u8> {
    res.extensions()
        .get::<reqwest::tls::TlsInfo>()
        .and_then(|info| info.peer_certificate())
        .expect("a TLS answer")
        .to_vec()
}
