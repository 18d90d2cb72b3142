//! TLS to `https://` upstreams: the trust anchors and client certificate of each upstream, read
//! and checked once at start-up, and the rustls client configuration built from them.
//!
//! Server names come from the upstream URL's host (hyper-rustls): a DNS name is sent as SNI and
//! must be in the certificate's subject alternative names; an IP address is not sent (RFC 6066
//! allows names only) and must be one of the certificate's IP addresses.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use rustls::client::ResolvesClientCert;
use rustls::pki_types::pem::{self, PemObject};
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::sign::CertifiedKey;
use rustls::{ClientConfig, RootCertStore, SignatureScheme};

use crate::config::{ClientCertificate, TlsRoots, TlsSettings};

/// Why the TLS settings of an upstream cannot be used. Each names the configuration key and
/// the file, so the operator knows which line to fix.
#[derive(Debug, thiserror::Error)]
pub enum TlsSetupError {
    #[error("{key} `{}` cannot be read: {source}", path.display())]
    Read {
        key: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{key} `{}` is not valid PEM: {source}", path.display())]
    Pem {
        key: &'static str,
        path: PathBuf,
        #[source]
        source: pem::Error,
    },
    #[error("{key} `{}` holds no PEM certificate (-----BEGIN CERTIFICATE-----)", path.display())]
    NoCertificate { key: &'static str, path: PathBuf },
    #[error("tls.ca_file `{}`: certificate {index} is not a usable CA certificate: {source}", path.display())]
    BadAnchor {
        path: PathBuf,
        index: usize,
        #[source]
        source: rustls::Error,
    },
    #[error(
        "tls.client_key `{}` holds no PEM private key (PKCS#8, PKCS#1 RSA or SEC1 EC)", path.display()
    )]
    NoPrivateKey { path: PathBuf },
    #[error(
        "tls.client_cert `{}` and tls.client_key `{}` cannot be used together: {source}",
        cert.display(),
        key.display()
    )]
    ClientIdentity {
        cert: PathBuf,
        key: PathBuf,
        #[source]
        source: rustls::Error,
    },
    #[error("tls.roots: system: no usable certificate in the system's trust store{details}")]
    NoSystemRoots { details: String },
    #[error("tls.roots: none trusts only tls.ca_file, so tls.ca_file must be set")]
    NoRoots,
}

impl TlsSettings {
    /// Reads and checks every file the settings name and builds the rustls configuration, so
    /// that requests never touch the file system and never fail on a bad file.
    pub fn load(
        roots: TlsRoots,
        ca_file: Option<PathBuf>,
        client_cert: Option<ClientCertificate>,
    ) -> Result<Self, TlsSetupError> {
        let mut anchors = match roots {
            TlsRoots::Webpki => webpki_roots(),
            TlsRoots::System => system_roots()?,
            TlsRoots::CaFileOnly if ca_file.is_none() => return Err(TlsSetupError::NoRoots),
            TlsRoots::CaFileOnly => RootCertStore::empty(),
        };
        if let Some(path) = &ca_file {
            for (index, certificate) in certificates("tls.ca_file", path)?.into_iter().enumerate() {
                anchors
                    .add(certificate)
                    .map_err(|source| TlsSetupError::BadAnchor {
                        path: path.clone(),
                        index: index + 1,
                        source,
                    })?;
            }
        }
        let builder = ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .expect("ring supports rustls's default protocol versions")
            .with_root_certificates(anchors);
        let config = match &client_cert {
            None => builder.with_no_client_auth(),
            Some(identity) => {
                let chain = certificates("tls.client_cert", &identity.cert_file)?;
                let key = private_key(&identity.key_file)?;
                builder
                    .with_client_auth_cert(chain, key)
                    .map_err(|source| TlsSetupError::ClientIdentity {
                        cert: identity.cert_file.clone(),
                        key: identity.key_file.clone(),
                        source,
                    })?
            }
        };
        Ok(TlsSettings {
            roots,
            ca_file,
            client_cert,
            client_config: Some(Arc::new(config)),
        })
    }

    /// The rustls configuration to connect with (ALPN is set by the connector).
    pub(crate) fn client_config(&self) -> ClientConfig {
        match &self.client_config {
            Some(config) => ClientConfig::clone(config),
            None => ClientConfig::clone(default_client_config()),
        }
    }
}

/// ring, as everywhere in the gateway, chosen explicitly: the process-wide default provider
/// cannot be picked by rustls when another crate also compiles in aws-lc-rs.
fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The built-in roots without a client certificate: what [`TlsSettings::default`] connects with.
fn default_client_config() -> &'static Arc<ClientConfig> {
    static CONFIG: OnceLock<Arc<ClientConfig>> = OnceLock::new();
    CONFIG.get_or_init(|| {
        Arc::new(
            ClientConfig::builder_with_provider(provider())
                .with_safe_default_protocol_versions()
                .expect("ring supports rustls's default protocol versions")
                .with_root_certificates(webpki_roots())
                .with_no_client_auth(),
        )
    })
}

fn webpki_roots() -> RootCertStore {
    RootCertStore {
        roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
    }
}

/// The system's trust store. Certificates it cannot parse are skipped (stores often hold a few
/// odd ones); a store with no usable certificate at all is an error, not an empty trust.
fn system_roots() -> Result<RootCertStore, TlsSetupError> {
    let found = rustls_native_certs::load_native_certs();
    let mut store = RootCertStore::empty();
    let (added, skipped) = store.add_parsable_certificates(found.certs);
    if skipped > 0 || !found.errors.is_empty() {
        tracing::warn!(
            added,
            skipped,
            errors = found.errors.len(),
            "some certificates of the system trust store could not be used"
        );
    }
    if added == 0 {
        let details = found
            .errors
            .iter()
            .map(|e| format!("; {e}"))
            .collect::<String>();
        return Err(TlsSetupError::NoSystemRoots { details });
    }
    Ok(store)
}

fn read(key: &'static str, path: &Path) -> Result<Vec<u8>, TlsSetupError> {
    std::fs::read(path).map_err(|source| TlsSetupError::Read {
        key,
        path: path.to_owned(),
        source,
    })
}

/// Every certificate of a PEM file, in order; at least one.
fn certificates(
    key: &'static str,
    path: &Path,
) -> Result<Vec<CertificateDer<'static>>, TlsSetupError> {
    let text = read(key, path)?;
    let certificates = CertificateDer::pem_slice_iter(&text)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|source| TlsSetupError::Pem {
            key,
            path: path.to_owned(),
            source,
        })?;
    if certificates.is_empty() {
        return Err(TlsSetupError::NoCertificate {
            key,
            path: path.to_owned(),
        });
    }
    Ok(certificates)
}

/// The first private key of a PEM file.
fn private_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsSetupError> {
    let text = read("tls.client_key", path)?;
    PrivateKeyDer::from_pem_slice(&text).map_err(|source| match source {
        pem::Error::NoItemsFound => TlsSetupError::NoPrivateKey {
            path: path.to_owned(),
        },
        source => TlsSetupError::Pem {
            key: "tls.client_key",
            path: path.to_owned(),
            source,
        },
    })
}

/// Answers an upstream's request for a client certificate — with the configured one, or with
/// none, as rustls would — and remembers that the upstream asked. An upstream that requires a
/// certificate, or refuses the one it got, says so only after the handshake (TLS 1.3), often by
/// just closing the connection; knowing it asked is how the error can still name the cause.
#[derive(Debug)]
pub(crate) struct ClientCertRequests {
    upstream: String,
    /// The configured certificate's resolver; `None` when there is none.
    configured: Option<Arc<dyn ResolvesClientCert>>,
    asked: AtomicBool,
}

impl ClientCertRequests {
    /// Wraps `resolver`, the one rustls was configured with.
    pub(crate) fn new(upstream: &str, resolver: Arc<dyn ResolvesClientCert>) -> Self {
        Self {
            upstream: upstream.to_owned(),
            configured: resolver.has_certs().then_some(resolver),
            asked: AtomicBool::new(false),
        }
    }

    /// Whether the upstream has asked for a client certificate on any connection.
    pub(crate) fn asked(&self) -> bool {
        self.asked.load(Ordering::Relaxed)
    }

    /// Whether a client certificate is configured.
    pub(crate) fn configured(&self) -> bool {
        self.configured.is_some()
    }
}

impl ResolvesClientCert for ClientCertRequests {
    fn resolve(
        &self,
        root_hint_subjects: &[&[u8]],
        sigschemes: &[SignatureScheme],
    ) -> Option<Arc<CertifiedKey>> {
        // Once: an upstream that merely offers client authentication asks on every connection.
        let first = !self.asked.swap(true, Ordering::Relaxed);
        match &self.configured {
            Some(resolver) => resolver.resolve(root_hint_subjects, sigschemes),
            None => {
                if first {
                    tracing::warn!(
                        upstream = %self.upstream,
                        "the upstream asked for a client certificate and none is configured \
                         (tls.client_cert, tls.client_key); if it requires one, it refuses \
                         every request"
                    );
                }
                None
            }
        }
    }

    fn has_certs(&self) -> bool {
        self.configured.is_some()
    }
}
