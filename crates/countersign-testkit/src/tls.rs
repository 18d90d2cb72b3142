//! Test certificate authorities: a CA generated per test (rcgen), the server and client
//! certificates it issues, written as PEM files for the gateway to read, and rustls server
//! configurations for TLS fake upstreams.

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose, SanType,
};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig};

use crate::temp::TempDir;

/// A certificate authority of the test's own, whose files live in a temporary directory that
/// goes when this is dropped.
pub struct TestCa {
    issuer: CertifiedIssuer<'static, KeyPair>,
    dir: TempDir,
}

impl std::fmt::Debug for TestCa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestCa")
            .field("dir", &self.dir.path())
            .finish_non_exhaustive()
    }
}

/// A certificate and its private key, in memory and as PEM files.
#[derive(Debug, Clone)]
pub struct Identity {
    pub cert_der: CertificateDer<'static>,
    key_der: Vec<u8>,
    /// The certificate (PEM).
    pub cert_file: PathBuf,
    /// Its PKCS#8 private key (PEM).
    pub key_file: PathBuf,
}

/// How a test certificate should look.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Validity {
    /// Valid from 1975 to 4096.
    Current,
    /// Not valid after 1 January 2000.
    Expired,
}

impl TestCa {
    /// A new CA called `name`; its certificate is written to `ca.pem`.
    pub fn new(name: &str) -> Self {
        let mut params = CertificateParams::default();
        params.distinguished_name.push(DnType::CommonName, name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let key = KeyPair::generate().expect("generate a CA key");
        let issuer = CertifiedIssuer::self_signed(params, key).expect("self-sign the CA");
        let dir = TempDir::new();
        std::fs::write(dir.path().join("ca.pem"), issuer.pem()).expect("write ca.pem");
        Self { issuer, dir }
    }

    /// The CA certificate's PEM file, for `tls.ca_file` or `ssl_ca_certs`.
    pub fn cert_file(&self) -> PathBuf {
        self.dir.path().join("ca.pem")
    }

    pub fn cert_der(&self) -> CertificateDer<'static> {
        self.issuer.der().clone()
    }

    /// The directory the CA writes its files to.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// A server certificate for `names` (DNS names or IP addresses), written as
    /// `<file_stem>.pem` and `<file_stem>.key`.
    pub fn server(&self, file_stem: &str, names: &[&str], validity: Validity) -> Identity {
        self.issue(
            file_stem,
            names,
            ExtendedKeyUsagePurpose::ServerAuth,
            validity,
        )
    }

    /// A client certificate for mTLS, written as `<file_stem>.pem` and `<file_stem>.key`.
    pub fn client(&self, file_stem: &str, name: &str) -> Identity {
        self.issue(
            file_stem,
            &[name],
            ExtendedKeyUsagePurpose::ClientAuth,
            Validity::Current,
        )
    }

    fn issue(
        &self,
        file_stem: &str,
        names: &[&str],
        usage: ExtendedKeyUsagePurpose,
        validity: Validity,
    ) -> Identity {
        let mut params = CertificateParams::default();
        params.distinguished_name = rcgen::DistinguishedName::new();
        params
            .distinguished_name
            .push(DnType::CommonName, names.first().copied().unwrap_or("test"));
        params.subject_alt_names = names
            .iter()
            .map(|name| match name.parse::<IpAddr>() {
                Ok(ip) => SanType::IpAddress(ip),
                Err(_) => SanType::DnsName((*name).try_into().expect("a valid DNS name")),
            })
            .collect();
        params.extended_key_usages = vec![usage];
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.use_authority_key_identifier_extension = true;
        if validity == Validity::Expired {
            params.not_before = rcgen::date_time_ymd(1999, 1, 1);
            params.not_after = rcgen::date_time_ymd(2000, 1, 1);
        }
        let key = KeyPair::generate().expect("generate a key");
        let certificate = params
            .signed_by(&key, &self.issuer)
            .expect("sign the certificate");
        let cert_file = self.dir.path().join(format!("{file_stem}.pem"));
        let key_file = self.dir.path().join(format!("{file_stem}.key"));
        std::fs::write(&cert_file, certificate.pem()).expect("write the certificate");
        std::fs::write(&key_file, key.serialize_pem()).expect("write the key");
        Identity {
            cert_der: certificate.der().clone(),
            key_der: key.serialize_der(),
            cert_file,
            key_file,
        }
    }
}

impl Identity {
    pub fn key_der(&self) -> PrivateKeyDer<'static> {
        PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(self.key_der.clone()))
    }
}

/// What a TLS fake upstream offers and asks for.
#[derive(Debug, Clone)]
pub struct TlsServer {
    pub identity: Identity,
    /// ALPN protocols in preference order, e.g. `[b"h2", b"http/1.1"]`; empty: none.
    pub alpn: Vec<Vec<u8>>,
    /// Require a client certificate issued by this CA.
    pub client_ca: Option<CertificateDer<'static>>,
}

impl TlsServer {
    /// Serves `identity`, negotiating HTTP/2 or HTTP/1.1.
    pub fn new(identity: Identity) -> Self {
        Self {
            identity,
            alpn: vec![b"h2".to_vec(), b"http/1.1".to_vec()],
            client_ca: None,
        }
    }

    /// Offers only these ALPN protocols.
    pub fn alpn(mut self, protocols: &[&[u8]]) -> Self {
        self.alpn = protocols.iter().map(|p| p.to_vec()).collect();
        self
    }

    /// Requires a client certificate of `ca`.
    pub fn require_client_cert(mut self, ca: &TestCa) -> Self {
        self.client_ca = Some(ca.cert_der());
        self
    }

    pub fn config(&self) -> Arc<ServerConfig> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .expect("ring supports the default protocol versions");
        let builder = match &self.client_ca {
            None => builder.with_no_client_auth(),
            Some(ca) => {
                let mut roots = RootCertStore::empty();
                roots.add(ca.clone()).expect("a valid CA certificate");
                let verifier = WebPkiClientVerifier::builder_with_provider(roots.into(), provider)
                    .build()
                    .expect("a client verifier");
                builder.with_client_cert_verifier(verifier)
            }
        };
        let mut config = builder
            .with_single_cert(
                vec![self.identity.cert_der.clone()],
                self.identity.key_der(),
            )
            .expect("a matching certificate and key");
        config.alpn_protocols = self.alpn.clone();
        Arc::new(config)
    }
}
