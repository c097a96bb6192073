//! TLS configurations from PEM files (rustls on the `ring` provider): a server's certificate
//! chain and key, the optional check of client certificates against a CA file (mutual TLS),
//! the lowest protocol version; a client's CA file and optional certificate. Also the words
//! every server and client uses to say why a handshake failed.
//!
//! rustls speaks TLS 1.2 and 1.3 only; older versions are never offered.

use crate::error::{NetError, Result};
use crate::files;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::{ClientConfig, RootCertStore, ServerConfig};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock, RwLock};
use std::time::{Duration, Instant};

/// The crypto provider every configuration uses: rustls' `ring` provider (ECDHE over X25519,
/// P-256 and P-384; AES-GCM and ChaCha20-Poly1305).
///
/// rustls 0.23.48 deprecates it because it has no post-quantum key exchange (X25519MLKEM768,
/// which its `aws-lc-rs` provider offers): a recording of today's traffic could be decrypted
/// by a future quantum computer. It is kept because `aws-lc-rs` more than doubles the TLS
/// stack's build (53 s against 23 s of wall time on 2 cores, on a gate near its 20 minutes);
/// switching is this function and the workspace's features (docs/SECURITY.md).
pub fn provider() -> Arc<CryptoProvider> {
    static PROVIDER: OnceLock<Arc<CryptoProvider>> = OnceLock::new();
    #[allow(deprecated)]
    let make = || Arc::new(rustls::crypto::ring::default_provider());
    PROVIDER.get_or_init(make).clone()
}

/// Whether a server asks for client certificates, and whether it requires one (memcached's
/// `ssl_verify_mode` 0, 1, and 2 or 3). A certificate that is presented is always checked
/// against the client CA file.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ClientCerts {
    /// Not asked for (memcached's mode 0, `None`).
    #[default]
    Ignore,
    /// Asked for and checked when given; a client without one still connects (mode 1,
    /// `Request`).
    Request,
    /// Required: a client without a certificate signed by the CA is refused (modes 2,
    /// `Require`, and 3, `Once`: there is no renegotiation here, so once is always).
    Require,
}

/// The lowest TLS version a server accepts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum MinVersion {
    /// TLS 1.2 and 1.3 (the default; TLS 1.0 and 1.1 are never offered).
    #[default]
    Tls12,
    /// TLS 1.3 only.
    Tls13,
}

impl MinVersion {
    /// `tlsv1.2` or `tlsv1.3`, as memcached names them.
    pub fn name(self) -> &'static str {
        match self {
            MinVersion::Tls12 => "tlsv1.2",
            MinVersion::Tls13 => "tlsv1.3",
        }
    }

    fn versions(self) -> &'static [&'static rustls::SupportedProtocolVersion] {
        static BOTH: [&rustls::SupportedProtocolVersion; 2] =
            [&rustls::version::TLS13, &rustls::version::TLS12];
        static ONLY13: [&rustls::SupportedProtocolVersion; 1] = [&rustls::version::TLS13];
        match self {
            MinVersion::Tls12 => &BOTH,
            MinVersion::Tls13 => &ONLY13,
        }
    }
}

/// The files of a server's TLS.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServerTlsFiles {
    /// The certificate chain (PEM): the server's certificate first, then intermediates.
    pub cert_chain: PathBuf,
    /// The private key (PEM: PKCS#8, PKCS#1 or SEC1); `None`: it is in the chain file.
    pub key: Option<PathBuf>,
    /// CA certificates (PEM) that client certificates must chain to.
    pub client_ca: Option<PathBuf>,
    /// Whether client certificates are asked for or required.
    pub client_certs: ClientCerts,
    /// The lowest protocol version accepted.
    pub min_version: MinVersion,
    /// Let clients resume sessions (a cache of 256 in memory; memcached's
    /// `ssl_session_cache`, off by default there, on here for the store).
    pub session_cache: bool,
}

impl ServerTlsFiles {
    /// A certificate chain and its key, no client certificates, TLS 1.2 and 1.3.
    pub fn new(cert_chain: impl Into<PathBuf>, key: impl Into<PathBuf>) -> ServerTlsFiles {
        ServerTlsFiles {
            cert_chain: cert_chain.into(),
            key: Some(key.into()),
            client_ca: None,
            client_certs: ClientCerts::Ignore,
            min_version: MinVersion::Tls12,
            session_cache: true,
        }
    }

    /// The same with client certificates checked against `ca` (`Require` or `Request`).
    pub fn with_client_ca(mut self, ca: impl Into<PathBuf>, certs: ClientCerts) -> Self {
        self.client_ca = Some(ca.into());
        self.client_certs = certs;
        self
    }

    /// Reads the files and builds the rustls configuration.
    pub fn build(&self) -> Result<Arc<ServerConfig>> {
        let chain = load_certs(&self.cert_chain, "TLS certificate chain")?;
        let key_path = self.key.as_deref().unwrap_or(&self.cert_chain);
        let key = load_key(key_path)?;
        let builder = ServerConfig::builder_with_provider(provider())
            .with_protocol_versions(self.min_version.versions())
            .map_err(|source| NetError::Tls {
                what: "TLS versions".into(),
                source,
            })?;
        let builder = match (self.client_certs, &self.client_ca) {
            (ClientCerts::Ignore, _) => builder.with_no_client_auth(),
            (_, None) => {
                return Err(NetError::Setting {
                    name: "client certificates",
                    value: format!("{:?}", self.client_certs).to_lowercase(),
                    valid: "checking client certificates needs the CA file that signs them \
                            (--tls-client-ca, or memcached's ssl_ca_cert)"
                        .into(),
                })
            }
            (mode, Some(ca)) => {
                let roots = Arc::new(load_roots(ca, "client CA file")?);
                let mut verifier =
                    rustls::server::WebPkiClientVerifier::builder_with_provider(roots, provider());
                if mode == ClientCerts::Request {
                    verifier = verifier.allow_unauthenticated();
                }
                let verifier = verifier.build().map_err(|e| NetError::Pem {
                    what: "client CA file",
                    path: ca.clone(),
                    detail: e.to_string(),
                })?;
                builder.with_client_cert_verifier(verifier)
            }
        };
        let mut config = builder
            .with_single_cert(chain, key)
            .map_err(|source| NetError::Tls {
                what: format!(
                    "the TLS certificate {} and key {}",
                    self.cert_chain.display(),
                    key_path.display()
                ),
                source,
            })?;
        if !self.session_cache {
            config.session_storage = Arc::new(rustls::server::NoServerSessionStorage {});
            config.send_tls13_tickets = 0;
        }
        Ok(Arc::new(config))
    }
}

/// A server's TLS: the configuration new connections take, reloadable from the same files
/// while serving (memcached's `refresh_certs`; connections already open keep theirs).
#[derive(Debug)]
pub struct ServerTls {
    files: ServerTlsFiles,
    config: RwLock<Arc<ServerConfig>>,
    loaded: Mutex<Instant>,
}

impl ServerTls {
    /// Reads the files.
    pub fn load(files: ServerTlsFiles) -> Result<ServerTls> {
        let config = files.build()?;
        Ok(ServerTls {
            files,
            config: RwLock::new(config),
            loaded: Mutex::new(Instant::now()),
        })
    }

    /// The configuration for the next connection.
    pub fn config(&self) -> Arc<ServerConfig> {
        self.config
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Reads the files again; on an error the previous configuration stays in use.
    pub fn reload(&self) -> Result<()> {
        let config = self.files.build()?;
        *self.config.write().unwrap_or_else(|p| p.into_inner()) = config;
        *self.loaded.lock().unwrap_or_else(|p| p.into_inner()) = Instant::now();
        Ok(())
    }

    /// The files.
    pub fn files(&self) -> &ServerTlsFiles {
        &self.files
    }

    /// How long ago the files were read.
    pub fn since_load(&self) -> Duration {
        self.loaded
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .elapsed()
    }

    /// Whether a client must present a certificate signed by the client CA.
    pub fn requires_client_cert(&self) -> bool {
        self.files.client_certs == ClientCerts::Require
    }
}

/// The files of a client's TLS.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClientTlsFiles {
    /// CA certificates (PEM) the server's certificate must chain to.
    pub ca: PathBuf,
    /// The client's certificate chain (PEM), for a server that checks client certificates.
    pub cert: Option<PathBuf>,
    /// The client certificate's key (PEM); `None`: in the certificate file.
    pub key: Option<PathBuf>,
}

impl ClientTlsFiles {
    /// Reads the files and builds the rustls configuration (TLS 1.3 and 1.2).
    pub fn build(&self) -> Result<Arc<ClientConfig>> {
        let roots = load_roots(&self.ca, "CA file")?;
        let builder = ClientConfig::builder_with_provider(provider())
            .with_protocol_versions(MinVersion::Tls12.versions())
            .map_err(|source| NetError::Tls {
                what: "TLS versions".into(),
                source,
            })?
            .with_root_certificates(roots);
        let config = match &self.cert {
            Some(cert) => {
                let chain = load_certs(cert, "client certificate")?;
                let key_path = self.key.as_deref().unwrap_or(cert);
                let key = load_key(key_path)?;
                builder
                    .with_client_auth_cert(chain, key)
                    .map_err(|source| NetError::Tls {
                        what: format!(
                            "the client certificate {} and key {}",
                            cert.display(),
                            key_path.display()
                        ),
                        source,
                    })?
            }
            None if self.key.is_some() => {
                return Err(NetError::Setting {
                    name: "client key",
                    value: self
                        .key
                        .as_deref()
                        .map(|p| p.display().to_string())
                        .unwrap_or_default(),
                    valid: "a client key goes with a client certificate (--tls-cert)".into(),
                })
            }
            None => builder.with_no_client_auth(),
        };
        Ok(Arc::new(config))
    }
}

/// The certificates of a PEM file, in order; an error when it holds none.
pub fn load_certs(path: &Path, what: &'static str) -> Result<Vec<CertificateDer<'static>>> {
    let bytes = files::read(path, what)?;
    let certs = CertificateDer::pem_slice_iter(&bytes)
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| NetError::Pem {
            what,
            path: path.to_path_buf(),
            detail: format!("not a PEM file of certificates: {e}"),
        })?;
    if certs.is_empty() {
        return Err(NetError::Pem {
            what,
            path: path.to_path_buf(),
            detail: "holds no certificate (expected -----BEGIN CERTIFICATE-----)".into(),
        });
    }
    Ok(certs)
}

/// The private key of a PEM file (PKCS#8, PKCS#1 or SEC1), refused when others can read it.
pub fn load_key(path: &Path) -> Result<PrivateKeyDer<'static>> {
    const WHAT: &str = "TLS private key";
    files::check_secret(path, WHAT)?;
    let bytes = files::read(path, WHAT)?;
    PrivateKeyDer::from_pem_slice(&bytes).map_err(|e| NetError::Pem {
        what: WHAT,
        path: path.to_path_buf(),
        detail: match e {
            rustls::pki_types::pem::Error::NoItemsFound => {
                "holds no private key (expected -----BEGIN PRIVATE KEY-----, RSA PRIVATE KEY \
                 or EC PRIVATE KEY)"
                    .into()
            }
            other => format!("not a PEM private key: {other}"),
        },
    })
}

/// The CA certificates of a PEM file as trust anchors.
pub fn load_roots(path: &Path, what: &'static str) -> Result<RootCertStore> {
    let certs = load_certs(path, what)?;
    let mut roots = RootCertStore::empty();
    for cert in certs {
        roots.add(cert).map_err(|e| NetError::Pem {
            what,
            path: path.to_path_buf(),
            detail: format!("a certificate cannot be a trust anchor: {e}"),
        })?;
    }
    Ok(roots)
}

/// The name a client checks the server's certificate against: the host of `HOST:PORT` (an
/// IP address or a DNS name), or `name` when given.
pub fn server_name(addr: &str, name: Option<&str>) -> Result<ServerName<'static>> {
    let host = match name {
        Some(n) => n,
        None => host_of(addr),
    };
    ServerName::try_from(host.to_string()).map_err(|e| NetError::Address {
        addr: host.to_string(),
        detail: format!("not a name a certificate can hold ({e}); give --tls-server-name"),
    })
}

/// The host part of `HOST:PORT`, `[V6]:PORT` or a bare host.
pub fn host_of(addr: &str) -> &str {
    let host = match addr.rsplit_once(':') {
        Some((h, p)) if p.parse::<u16>().is_ok() && !h.is_empty() => h,
        _ => addr,
    };
    host.trim_start_matches('[').trim_end_matches(']')
}

/// Whether the first bytes of a connection look like a TLS handshake record (`0x16`, then a
/// version `0x03 0x00..=0x04`); checks as many of the three as are given.
pub fn looks_like_tls(first: &[u8]) -> bool {
    let want = [Some(0x16u8), Some(0x03), None];
    !first.is_empty()
        && first.iter().zip(want).all(|(b, w)| match w {
            Some(w) => *b == w,
            None => *b <= 0x04,
        })
}

/// Why a TLS peer was refused or a handshake failed, in words a user can act on. `server`:
/// the text is for the server's log (the peer is a client) rather than for a client.
pub fn describe(e: &rustls::Error, server: bool) -> String {
    use rustls::{AlertDescription as A, CertificateError as C, Error as E};
    let peer = if server { "client" } else { "server" };
    match e {
        E::InvalidCertificate(c) => match c {
            C::Expired | C::ExpiredContext { .. } => {
                format!("the {peer}'s certificate has expired")
            }
            C::NotValidYet | C::NotValidYetContext { .. } => {
                format!("the {peer}'s certificate is not valid yet")
            }
            C::UnknownIssuer => format!(
                "the {peer}'s certificate is not signed by a trusted CA ({})",
                if server {
                    "the client CA file"
                } else {
                    "the CA file given with --tls-ca"
                }
            ),
            C::NotValidForName | C::NotValidForNameContext { .. } => format!(
                "the {peer}'s certificate is not valid for the name connected to (give the \
                 name it holds with --tls-server-name)"
            ),
            C::BadSignature => format!(
                "the {peer}'s certificate does not verify: signed by another CA of the same \
                 name, or damaged"
            ),
            C::Revoked => format!("the {peer}'s certificate is revoked"),
            C::InvalidPurpose | C::InvalidPurposeContext { .. } => format!(
                "the {peer}'s certificate is not for {} use",
                if server { "client" } else { "server" }
            ),
            other => format!("the {peer}'s certificate was refused: {other:?}"),
        },
        E::NoCertificatesPresented => {
            format!("the {peer} sent no certificate, and one is required")
        }
        E::AlertReceived(alert) => match alert {
            A::CertificateRequired => {
                "the server requires a client certificate (give --tls-cert and --tls-key)".into()
            }
            A::UnknownCA
            | A::BadCertificate
            | A::CertificateUnknown
            | A::AccessDenied
            | A::DecryptError
                if !server =>
            {
                "the server refused this client's certificate (not signed by a CA it trusts)".into()
            }
            A::CertificateExpired if !server => {
                "the server refused this client's certificate: it has expired".into()
            }
            A::ProtocolVersion | A::HandshakeFailure | A::InsufficientSecurity => format!(
                "the {peer} refused the handshake ({alert:?}): no TLS version or cipher in \
                 common (the server may require TLS 1.3)"
            ),
            other => format!("the {peer} ended the handshake with the alert {other:?}"),
        },
        E::InvalidMessage(_) | E::InappropriateMessage { .. } if !server => {
            "the server did not answer the TLS handshake: it does not speak TLS on this port \
             (a plain server: connect without --tls-ca)"
                .into()
        }
        E::InvalidMessage(_) | E::InappropriateMessage { .. } => {
            "the client did not send a TLS handshake (a plain client on a TLS port)".into()
        }
        E::PeerIncompatible(p) => {
            format!("the {peer} has no TLS version or cipher in common with this one ({p:?})")
        }
        other => format!("TLS: {other}"),
    }
}

/// [`describe`] for an I/O error that carries a rustls error (what the stream types return);
/// other I/O errors in the system's words.
pub fn describe_io(e: &std::io::Error, server: bool) -> String {
    match e
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>())
    {
        Some(tls) => describe(tls, server),
        None => e.to_string(),
    }
}
