//! TLS on Atoll's listeners (`--tls-cert` / `--tls-key`), with rustls on the `ring`
//! provider.
//!
//! Certificates are renewed often (Let's Encrypt: every 60 to 90 days) and a restart
//! drops every open WebSocket, so the files are re-read without one: every handshake
//! compares the files' metadata (modification time, length, inode: two `stat` calls,
//! next to the handshake's public-key operations) with what was loaded, and a change
//! loads them again. New connections get the new certificate; open ones keep theirs.
//! A replacement that cannot be used (half-written, a key that does not match the
//! certificate, not PEM) is logged and the previous certificate stays in service, so a
//! botched renewal never takes the server off the air; the files are tried again when
//! they change next.

use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

/// Why the certificate files cannot be served.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("cannot read the TLS certificate {0}: {1}")]
    Certificate(PathBuf, String),
    #[error("the TLS certificate file {0} holds no certificate (PEM `BEGIN CERTIFICATE`)")]
    NoCertificate(PathBuf),
    #[error("cannot read the TLS private key {0}: {1}")]
    PrivateKey(PathBuf, String),
    #[error("the TLS private key {key} does not fit the certificate {certificate}: {reason}")]
    Mismatch {
        certificate: PathBuf,
        key: PathBuf,
        reason: String,
    },
    #[error("cannot set up TLS: {0}")]
    Config(String),
}

/// A listener's TLS: the acceptor of its handshakes, over a certificate that follows its
/// files. Cheap to clone.
#[derive(Clone)]
pub struct ServerTls {
    acceptor: tokio_rustls::TlsAcceptor,
    provider: Arc<CryptoProvider>,
    resolver: Arc<ReloadingCertificate>,
}

/// The certificate a client presented in the TLS handshake (DER), with proof that it holds
/// the certificate's private key (the handshake's signature). Nothing more: whether the
/// certificate is worth anything is for the request's handler to decide
/// (`atoll_data::auth::authenticate_certificate` for database hosts).
#[derive(Debug, Clone)]
pub struct ClientCertificate(pub Arc<Vec<u8>>);

impl std::fmt::Debug for ServerTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ServerTls")
    }
}

impl ServerTls {
    /// Serves the PEM certificate chain (leaf first) in `certificate` with the PEM private
    /// key (PKCS#8, PKCS#1 or SEC1) in `private_key`. Fails when they cannot be used now: a
    /// server must not start without a working certificate.
    pub fn from_files(certificate: &Path, private_key: &Path) -> Result<ServerTls, TlsError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let files = CertificateFiles {
            certificate: certificate.to_path_buf(),
            private_key: private_key.to_path_buf(),
        };
        let fingerprint = files.fingerprint();
        let loaded = files.load(&provider)?;
        let resolver = ReloadingCertificate {
            files,
            provider: Arc::clone(&provider),
            current: Mutex::new(Current {
                fingerprint,
                key: Arc::new(loaded),
            }),
        };
        let resolver = Arc::new(resolver);
        let mut config = rustls::ServerConfig::builder_with_provider(Arc::clone(&provider))
            .with_safe_default_protocol_versions()
            .map_err(|e| TlsError::Config(e.to_string()))?
            .with_no_client_auth()
            .with_cert_resolver(Arc::clone(&resolver) as Arc<dyn ResolvesServerCert>);
        // The listeners speak HTTP/1.1 only (WebSocket upgrades need it); saying so lets
        // clients that offer HTTP/2 first settle on it during the handshake.
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(ServerTls {
            acceptor: tokio_rustls::TlsAcceptor::from(Arc::new(config)),
            provider,
            resolver,
        })
    }

    /// The same certificate, and asking clients for a certificate of their own, which they
    /// may send or not (database hosts: a client certificate is an alternative to a
    /// token). The handshake checks only that the client holds the certificate's key; the
    /// request's handler decides what it is worth, against the right organization's CA.
    pub fn accepting_client_certificates(&self) -> Result<ServerTls, TlsError> {
        let verifier = Arc::new(AnyClientCertificate {
            algorithms: self.provider.signature_verification_algorithms,
        });
        let mut config = rustls::ServerConfig::builder_with_provider(Arc::clone(&self.provider))
            .with_safe_default_protocol_versions()
            .map_err(|e| TlsError::Config(e.to_string()))?
            .with_client_cert_verifier(verifier)
            .with_cert_resolver(Arc::clone(&self.resolver) as Arc<dyn ResolvesServerCert>);
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(ServerTls {
            acceptor: tokio_rustls::TlsAcceptor::from(Arc::new(config)),
            provider: Arc::clone(&self.provider),
            resolver: Arc::clone(&self.resolver),
        })
    }

    pub(crate) fn acceptor(&self) -> &tokio_rustls::TlsAcceptor {
        &self.acceptor
    }
}

struct CertificateFiles {
    certificate: PathBuf,
    private_key: PathBuf,
}

/// What identifies a version of the two files without reading them. `None` for a file
/// that cannot be looked at (being replaced, say).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Fingerprint([Option<FileStamp>; 2]);

#[derive(Debug, Clone, PartialEq, Eq)]
struct FileStamp {
    modified: Option<SystemTime>,
    len: u64,
    /// A file replaced by a rename (how careful tools write) is a new inode, even when
    /// its time and length look the same.
    inode: u64,
}

impl FileStamp {
    fn of(path: &Path) -> Option<FileStamp> {
        let metadata = std::fs::metadata(path).ok()?;
        #[cfg(unix)]
        let inode = std::os::unix::fs::MetadataExt::ino(&metadata);
        #[cfg(not(unix))]
        let inode = 0;
        Some(FileStamp {
            modified: metadata.modified().ok(),
            len: metadata.len(),
            inode,
        })
    }
}

impl CertificateFiles {
    fn fingerprint(&self) -> Fingerprint {
        Fingerprint([
            FileStamp::of(&self.certificate),
            FileStamp::of(&self.private_key),
        ])
    }

    fn load(&self, provider: &CryptoProvider) -> Result<CertifiedKey, TlsError> {
        let chain = CertificateDer::pem_file_iter(&self.certificate)
            .and_then(|certificates| certificates.collect::<Result<Vec<_>, _>>())
            .map_err(|e| TlsError::Certificate(self.certificate.clone(), e.to_string()))?;
        if chain.is_empty() {
            return Err(TlsError::NoCertificate(self.certificate.clone()));
        }
        let key = PrivateKeyDer::from_pem_file(&self.private_key)
            .map_err(|e| TlsError::PrivateKey(self.private_key.clone(), e.to_string()))?;
        // Also parses the leaf and checks that the key is the certificate's.
        CertifiedKey::from_der(chain, key, provider).map_err(|e| TlsError::Mismatch {
            certificate: self.certificate.clone(),
            key: self.private_key.clone(),
            reason: e.to_string(),
        })
    }
}

/// The certificate in service and the version of the files last looked at (which is not
/// the served one when a replacement was unusable: it is not tried again until the files
/// change once more).
struct Current {
    fingerprint: Fingerprint,
    key: Arc<CertifiedKey>,
}

struct ReloadingCertificate {
    files: CertificateFiles,
    provider: Arc<CryptoProvider>,
    current: Mutex<Current>,
}

impl std::fmt::Debug for ReloadingCertificate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReloadingCertificate")
            .field("certificate", &self.files.certificate)
            .field("private_key", &self.files.private_key)
            .finish()
    }
}

impl ReloadingCertificate {
    fn lock(&self) -> std::sync::MutexGuard<'_, Current> {
        // The guarded data is replaced whole, so a panic elsewhere cannot leave it torn.
        self.current.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl ResolvesServerCert for ReloadingCertificate {
    fn resolve(&self, _client_hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        let seen = self.files.fingerprint();
        {
            let current = self.lock();
            if current.fingerprint == seen {
                return Some(Arc::clone(&current.key));
            }
        }
        // The files changed. Reading two small files on this thread is rare enough (once
        // per renewal) not to need the blocking pool. Two handshakes may both load the
        // same new files; either result is right.
        let loaded = self.files.load(&self.provider);
        let mut current = self.lock();
        current.fingerprint = seen;
        match loaded {
            Ok(key) => {
                tracing::info!(
                    certificate = %self.files.certificate.display(),
                    "TLS certificate reloaded"
                );
                current.key = Arc::new(key);
            }
            Err(error) => tracing::warn!(
                %error,
                "the TLS certificate files changed but cannot be used; still serving the previous certificate"
            ),
        }
        Some(Arc::clone(&current.key))
    }
}

/// Asks for a client certificate, accepts any (or none), and checks the handshake's
/// signature with it: the client proves it holds the certificate's private key. Trust in
/// the certificate itself is decided per request, against the CA of the database's
/// organization (a listener serves many organizations, each with its own CA).
#[derive(Debug)]
struct AnyClientCertificate {
    algorithms: rustls::crypto::WebPkiSupportedAlgorithms,
}

impl rustls::server::danger::ClientCertVerifier for AnyClientCertificate {
    fn offer_client_auth(&self) -> bool {
        true
    }

    fn client_auth_mandatory(&self) -> bool {
        false
    }

    fn root_hint_subjects(&self) -> &[rustls::DistinguishedName] {
        &[]
    }

    fn verify_client_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _now: rustls::pki_types::UnixTime,
    ) -> Result<rustls::server::danger::ClientCertVerified, rustls::Error> {
        Ok(rustls::server::danger::ClientCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}
