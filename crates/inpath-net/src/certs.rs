//! A small certificate authority for quickstarts and tests (rcgen): a CA, server certificates
//! for given host names and IP addresses, client certificates, each with an ECDSA P-256 key,
//! written as PEM files of mode 0600. `inpath tls init DIR` uses it; so do the test suites,
//! which make their certificates at run time (none is ever committed).

use crate::error::{NetError, Result};
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose,
};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// When a certificate is valid.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Validity {
    /// The first second it is valid.
    pub not_before: SystemTime,
    /// The last.
    pub not_after: SystemTime,
}

impl Validity {
    /// From an hour ago (clocks disagree a little) for `days` days.
    pub fn days(days: u32) -> Validity {
        let now = SystemTime::now();
        Validity {
            not_before: now - Duration::from_secs(3600),
            not_after: now + Duration::from_secs(u64::from(days) * 86_400),
        }
    }

    /// Valid from two days ago until yesterday: expired (for tests of refusal).
    pub fn expired() -> Validity {
        let now = SystemTime::now();
        Validity {
            not_before: now - Duration::from_secs(2 * 86_400),
            not_after: now - Duration::from_secs(86_400),
        }
    }

    fn apply(&self, params: &mut CertificateParams) -> Result<()> {
        let at = |t: SystemTime, name: &'static str| -> Result<time::OffsetDateTime> {
            let secs = match t.duration_since(UNIX_EPOCH) {
                Ok(d) => i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
                Err(e) => -i64::try_from(e.duration().as_secs()).unwrap_or(i64::MAX),
            };
            time::OffsetDateTime::from_unix_timestamp(secs).map_err(|_| NetError::Setting {
                name,
                value: secs.to_string(),
                valid: "a time between the years -9999 and 9999".into(),
            })
        };
        if self.not_after <= self.not_before {
            return Err(NetError::Setting {
                name: "validity",
                value: format!(
                    "{} to {}",
                    unix_seconds(self.not_before),
                    unix_seconds(self.not_after)
                ),
                valid: "the end after the start".into(),
            });
        }
        params.not_before = at(self.not_before, "not before")?;
        params.not_after = at(self.not_after, "not after")?;
        Ok(())
    }
}

fn unix_seconds(t: SystemTime) -> i64 {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => d.as_secs() as i64,
        Err(e) => -(e.duration().as_secs() as i64),
    }
}

/// A certificate and its private key, as PEM text.
#[derive(Clone)]
pub struct Issued {
    /// The certificate (PEM).
    pub cert_pem: String,
    /// The private key (PKCS#8 PEM).
    pub key_pem: String,
}

impl std::fmt::Debug for Issued {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Issued")
            .field("cert_pem", &self.cert_pem)
            .finish_non_exhaustive()
    }
}

/// A certificate authority that signs server and client certificates.
pub struct Ca {
    issuer: Issuer<'static, KeyPair>,
    cert_pem: String,
    key_pem: String,
}

impl std::fmt::Debug for Ca {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ca")
            .field("cert_pem", &self.cert_pem)
            .finish_non_exhaustive()
    }
}

fn cert_err(what: &'static str) -> impl Fn(rcgen::Error) -> NetError {
    move |source| NetError::Cert { what, source }
}

fn name(common_name: &str) -> DistinguishedName {
    let mut dn = DistinguishedName::new();
    dn.push(DnType::OrganizationName, "inpath");
    dn.push(DnType::CommonName, common_name);
    dn
}

impl Ca {
    /// A new CA named `common_name` and a random suffix (two CAs made apart never share a
    /// name, so a certificate of one is never taken for the other's), valid for `validity`.
    pub fn new(common_name: &str, validity: Validity) -> Result<Ca> {
        let key = KeyPair::generate().map_err(cert_err("CA key"))?;
        let mut params = CertificateParams::default();
        let suffix = crate::tokens::generate()?;
        params.distinguished_name = name(&format!("{common_name} {}", &suffix[7..19]));
        params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        validity.apply(&mut params)?;
        let cert = params
            .self_signed(&key)
            .map_err(cert_err("CA certificate"))?;
        let key_pem = key.serialize_pem();
        Ok(Ca {
            cert_pem: cert.pem(),
            key_pem,
            issuer: Issuer::new(params, key),
        })
    }

    /// The CA's certificate (PEM): what servers and clients trust.
    pub fn cert_pem(&self) -> &str {
        &self.cert_pem
    }

    /// The CA's private key (PEM): keep it offline; it signs new certificates.
    pub fn key_pem(&self) -> &str {
        &self.key_pem
    }

    /// A server certificate for `hosts` (DNS names or IP addresses; the first is also its
    /// common name).
    pub fn server(&self, hosts: &[String], validity: Validity) -> Result<Issued> {
        if hosts.is_empty() {
            return Err(NetError::Setting {
                name: "host",
                value: String::new(),
                valid: "at least one host name or IP address for the server certificate".into(),
            });
        }
        let mut params =
            CertificateParams::new(hosts.to_vec()).map_err(|source| NetError::Cert {
                what: "server certificate",
                source,
            })?;
        params.distinguished_name = name(&hosts[0]);
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        params.use_authority_key_identifier_extension = true;
        validity.apply(&mut params)?;
        self.sign(params, "server certificate")
    }

    /// A client certificate named `common_name`.
    pub fn client(&self, common_name: &str, validity: Validity) -> Result<Issued> {
        let mut params = CertificateParams::default();
        params.distinguished_name = name(common_name);
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        params.use_authority_key_identifier_extension = true;
        validity.apply(&mut params)?;
        self.sign(params, "client certificate")
    }

    fn sign(&self, params: CertificateParams, what: &'static str) -> Result<Issued> {
        let key = KeyPair::generate().map_err(cert_err(what))?;
        let cert = params
            .signed_by(&key, &self.issuer)
            .map_err(cert_err(what))?;
        Ok(Issued {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        })
    }
}

/// The files `inpath tls init` writes into its directory.
pub const INIT_FILES: [&str; 6] = [
    "ca.pem",
    "ca.key",
    "server.pem",
    "server.key",
    "client.pem",
    "client.key",
];

/// Writes `files` (name, text) into `dir` (created, mode 0700, when missing), each all or
/// nothing with mode 0600. Refuses to replace an existing file unless `replace`.
pub fn write_private(dir: &Path, files: &[(&str, &str)], replace: bool) -> Result<Vec<PathBuf>> {
    if !dir.exists() {
        let mut builder = std::fs::DirBuilder::new();
        builder.recursive(true);
        #[cfg(unix)]
        std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
        builder.create(dir).map_err(|source| NetError::Io {
            what: format!("cannot create the directory {}", dir.display()),
            source,
        })?;
    }
    if !replace {
        for (file, _) in files {
            let path = dir.join(file);
            if path.exists() {
                return Err(NetError::Exists { path });
            }
        }
    }
    let mut written = Vec::with_capacity(files.len());
    for (file, text) in files {
        let path = dir.join(file);
        let mut out = inpath_core::output::OutputFile::create_with_mode(&path, &[], 0o600)
            .map_err(|source| NetError::Write {
                path: path.clone(),
                source: Box::new(source),
            })?;
        std::io::Write::write_all(&mut out, text.as_bytes()).map_err(|source| NetError::Io {
            what: format!("cannot write {}", path.display()),
            source,
        })?;
        out.commit().map_err(|source| NetError::Write {
            path: path.clone(),
            source: Box::new(source),
        })?;
        written.push(path);
    }
    Ok(written)
}

/// What [`init`] makes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InitOptions {
    /// The server certificate's host names and IP addresses.
    pub hosts: Vec<String>,
    /// The client certificate's common name.
    pub client_name: String,
    /// When the three certificates are valid.
    pub validity: Validity,
    /// Replace files already in the directory.
    pub replace: bool,
}

impl Default for InitOptions {
    /// `localhost`, `127.0.0.1` and `::1`; a client named `inpath client`; 365 days.
    fn default() -> InitOptions {
        InitOptions {
            hosts: vec!["localhost".into(), "127.0.0.1".into(), "::1".into()],
            client_name: "inpath client".into(),
            validity: Validity::days(365),
            replace: false,
        }
    }
}

/// The files [`init`] wrote.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InitFiles {
    /// The CA certificate: servers and clients trust it (`--tls-ca`, `--tls-client-ca`).
    pub ca: PathBuf,
    /// The CA's key: signs more certificates; keep it off the servers.
    pub ca_key: PathBuf,
    /// The server's certificate (`--tls-cert`, memcached's `ssl_chain_cert`).
    pub server_cert: PathBuf,
    /// The server's key (`--tls-key`, `ssl_key`).
    pub server_key: PathBuf,
    /// A client certificate (the client's `--tls-cert`).
    pub client_cert: PathBuf,
    /// Its key (the client's `--tls-key`).
    pub client_key: PathBuf,
}

/// Writes a new CA, a server certificate and a client certificate with their keys into
/// `dir` ([`INIT_FILES`], mode 0600).
pub fn init(dir: &Path, options: &InitOptions) -> Result<InitFiles> {
    let ca = Ca::new("inpath CA", options.validity)?;
    let server = ca.server(&options.hosts, options.validity)?;
    let client = ca.client(&options.client_name, options.validity)?;
    let texts = [
        ca.cert_pem(),
        ca.key_pem(),
        &server.cert_pem,
        &server.key_pem,
        &client.cert_pem,
        &client.key_pem,
    ];
    let files: Vec<(&str, &str)> = INIT_FILES.iter().copied().zip(texts).collect();
    let written = write_private(dir, &files, options.replace)?;
    let [ca, ca_key, server_cert, server_key, client_cert, client_key]: [PathBuf; 6] =
        written.try_into().map_err(|_| NetError::Setting {
            name: "files",
            value: dir.display().to_string(),
            valid: "six files written".into(),
        })?;
    Ok(InitFiles {
        ca,
        ca_key,
        server_cert,
        server_key,
        client_cert,
        client_key,
    })
}

/// The start of a day `YYYY-MM-DD` (UTC) as a time: for [`Validity`] from the command line.
pub fn parse_date(text: &str) -> Result<SystemTime> {
    let bad = || NetError::Setting {
        name: "date",
        value: text.to_string(),
        valid: "a day written YYYY-MM-DD, between 1970-01-01 and 9999-12-31".into(),
    };
    let mut parts = text.split('-');
    let (Some(y), Some(m), Some(d), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(bad());
    };
    let year: i32 = y.parse().map_err(|_| bad())?;
    let month: u8 = m.parse().map_err(|_| bad())?;
    let day: u8 = d.parse().map_err(|_| bad())?;
    let month = time::Month::try_from(month).map_err(|_| bad())?;
    let date = time::Date::from_calendar_date(year, month, day).map_err(|_| bad())?;
    let secs = date.midnight().assume_utc().unix_timestamp();
    let secs = u64::try_from(secs).map_err(|_| bad())?;
    Ok(UNIX_EPOCH + Duration::from_secs(secs))
}
