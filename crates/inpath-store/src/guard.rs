//! Who may use a store server (docs/SECURITY.md): TLS on its port (`inpath_net`), and every
//! request authenticated, by a client certificate the server's CA signed or by a token sent
//! once per connection, each with a role (`read`: kernels, `read`, `ls`, `stats`; `write`:
//! also `put`, `rm`, `index`). A refused request changes nothing and says why; wrong tokens
//! are counted and slowed per address.
//!
//! The connection layer (`remote::serve`) calls [`open`] on each accepted socket, then
//! [`Session::check`] for each request frame.

use crate::error::StoreError;
use inpath_net::http::HttpCounters;
use inpath_net::stream::{self, peek_first, FirstBytes, Stream};
use inpath_net::{ClientCerts, Grant, Limiter, Protection, Role, ServerTls, Tokens};
use serde_json::{json, Value};
use std::net::{IpAddr, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

/// How long a client has to finish its TLS handshake.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a plain port waits for a connection's first bytes (as long as for a request).
const FIRST_BYTES_TIMEOUT: Duration = Duration::from_secs(300);

/// What protects a store server. The default protects nothing: plain TCP, no credential
/// (what a loopback listener may run with).
#[derive(Clone, Debug)]
pub struct Security {
    /// TLS on the port (and client certificates, when its files name a client CA).
    pub tls: Option<Arc<ServerTls>>,
    /// Tokens a client may send.
    pub tokens: Option<Arc<Tokens>>,
    /// The role of a client that presents a certificate the client CA signed.
    pub cert_role: Role,
    /// Counts and slows wrong tokens per address.
    pub limiter: Arc<Limiter>,
}

impl Default for Security {
    fn default() -> Security {
        Security {
            tls: None,
            tokens: None,
            cert_role: Role::Read,
            limiter: Arc::new(Limiter::default()),
        }
    }
}

impl Security {
    /// Whether client certificates authenticate.
    pub fn takes_certificates(&self) -> bool {
        self.tls
            .as_ref()
            .is_some_and(|t| t.files().client_certs != ClientCerts::Ignore)
    }

    /// Whether every request must be authenticated.
    pub fn requires_auth(&self) -> bool {
        self.tokens.is_some() || self.takes_certificates()
    }

    /// What the listener policy sees.
    pub fn protection(&self) -> Protection {
        Protection {
            tls: self.tls.is_some(),
            auth: self.requires_auth(),
        }
    }

    /// How a credential is given, for messages.
    fn how(&self) -> &'static str {
        match (self.tokens.is_some(), self.takes_certificates()) {
            (true, true) => {
                "a client certificate signed by the server's CA (--tls-cert, --tls-key) or a \
                 token (--token-file, or INPATH_TOKEN)"
            }
            (true, false) => "a token (--token-file, or INPATH_TOKEN)",
            (false, _) => "a client certificate signed by the server's CA (--tls-cert, --tls-key)",
        }
    }

    /// A line for the start of the log: what protects the port.
    pub fn describe(&self) -> String {
        let tls = match &self.tls {
            None => "plain TCP".to_string(),
            Some(t) => format!("TLS ({}+)", t.files().min_version.name()),
        };
        let mut who = Vec::new();
        if let Some(t) = &self.tls {
            match t.files().client_certs {
                ClientCerts::Require => who.push(format!(
                    "client certificates required (role {})",
                    self.cert_role.name()
                )),
                ClientCerts::Request => who.push(format!(
                    "client certificates (role {})",
                    self.cert_role.name()
                )),
                ClientCerts::Ignore => {}
            }
        }
        if let Some(t) = &self.tokens {
            who.push(format!("{} tokens from {}", t.len(), t.path().display()));
        }
        if who.is_empty() {
            format!("{tls}, no authentication")
        } else {
            format!("{tls}, {}", who.join(" or "))
        }
    }
}

/// Refusals and their kinds, for `stats` and `/metrics`.
#[derive(Debug, Default)]
pub struct GuardCounters {
    /// Connections that authenticated (a certificate or a token).
    pub authenticated: AtomicU64,
    /// Requests refused for want of a credential.
    pub auth_missing: AtomicU64,
    /// Wrong tokens (and certificates refused in the handshake).
    pub auth_failures: AtomicU64,
    /// Attempts made to wait because their address failed often just now.
    pub auth_slowed: AtomicU64,
    /// Requests refused for their role.
    pub forbidden: AtomicU64,
    /// TLS handshakes that failed, plain clients on the TLS port and TLS clients on a plain
    /// one.
    pub tls_errors: AtomicU64,
    /// The HTTP port's refusals, once it runs.
    pub http: OnceLock<Arc<HttpCounters>>,
}

impl GuardCounters {
    /// The counters as JSON fields.
    pub fn json(&self) -> Value {
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let http = self.http.get();
        let http_load = |f: fn(&HttpCounters) -> &AtomicU64| http.map_or(0, |h| load(f(h)));
        json!({
            "auth_connections": load(&self.authenticated),
            "auth_missing": load(&self.auth_missing),
            "auth_failures": load(&self.auth_failures),
            "auth_slowed": load(&self.auth_slowed),
            "auth_forbidden": load(&self.forbidden),
            "tls_errors": load(&self.tls_errors),
            "http_auth_missing": http_load(|h| &h.unauthenticated),
            "http_auth_failures": http_load(|h| &h.bad_tokens),
            "http_tls_errors": http_load(|h| &h.tls_errors),
        })
    }
}

/// A connection that could not be opened: the reason for the log, and the plain socket when
/// the client should be told in the store's own protocol (a plain client on a TLS port).
pub struct Refusal {
    /// Why, for the server's log.
    pub reason: String,
    /// The socket to write an error frame to, if the client can read one.
    pub plain: Option<Box<(TcpStream, StoreError)>>,
}

/// Opens an accepted connection: the TLS handshake when the port speaks TLS, and the
/// credential a client certificate gives.
pub fn open(
    security: &Security,
    counters: &GuardCounters,
    tcp: TcpStream,
) -> Result<Session, Refusal> {
    let peer = tcp.peer_addr().map(|a| a.ip()).ok();
    let Some(tls) = &security.tls else {
        // A TLS client on a plain port would wait for a handshake answer; close it, and say
        // so in the log (it reads the close as a refused handshake).
        return match peek_first(&tcp, FIRST_BYTES_TIMEOUT) {
            FirstBytes::Tls => {
                counters.tls_errors.fetch_add(1, Ordering::Relaxed);
                Err(Refusal {
                    reason: "a TLS client on this plain port (the server has no --tls-cert)".into(),
                    plain: None,
                })
            }
            _ => Ok(Session::new(Stream::Plain(tcp), None, peer)),
        };
    };
    match peek_first(&tcp, HANDSHAKE_TIMEOUT) {
        FirstBytes::Nothing => Err(Refusal {
            reason: "closed before a TLS handshake".into(),
            plain: None,
        }),
        FirstBytes::Plain => {
            counters.tls_errors.fetch_add(1, Ordering::Relaxed);
            Err(Refusal {
                reason: "a plain client on this TLS port".into(),
                plain: Some(Box::new((
                    tcp,
                    StoreError::Refused {
                        detail: "this server speaks TLS: connect with --tls-ca (the CA that \
                                 signs its certificate) and a credential"
                            .into(),
                    },
                ))),
            })
        }
        FirstBytes::Tls => match stream::accept(tcp, tls.config(), HANDSHAKE_TIMEOUT) {
            Err(e) => {
                counters.tls_errors.fetch_add(1, Ordering::Relaxed);
                if let inpath_net::stream::HandshakeError::Refused {
                    source: Some(inpath_net::rustls::Error::InvalidCertificate(_)),
                    ..
                }
                | inpath_net::stream::HandshakeError::Refused {
                    source: Some(inpath_net::rustls::Error::NoCertificatesPresented),
                    ..
                } = &e
                {
                    counters.auth_failures.fetch_add(1, Ordering::Relaxed);
                }
                Err(Refusal {
                    reason: format!("TLS handshake: {e}"),
                    plain: None,
                })
            }
            Ok(stream) => {
                let grant = stream.client_certified().then(|| Grant {
                    name: "client certificate".into(),
                    role: security.cert_role,
                });
                if grant.is_some() {
                    counters.authenticated.fetch_add(1, Ordering::Relaxed);
                }
                Ok(Session::new(stream, grant, peer))
            }
        },
    }
}

/// An open connection and who it is.
pub struct Session {
    /// The connection.
    pub stream: Stream,
    grant: Option<Grant>,
    peer: Option<IpAddr>,
}

/// What to do with a request frame.
#[derive(Debug)]
pub enum Verdict {
    /// Serve it.
    Serve,
    /// It was the `auth` frame: answer this and go on.
    Answer(Value),
    /// Refuse it (nothing changed); `close` ends the connection after the answer.
    Refuse {
        /// The error to answer with.
        error: StoreError,
        /// Whether the connection ends.
        close: bool,
    },
}

impl Session {
    fn new(stream: Stream, grant: Option<Grant>, peer: Option<IpAddr>) -> Session {
        Session {
            stream,
            grant,
            peer,
        }
    }

    /// Who the connection is, once authenticated.
    pub fn grant(&self) -> Option<&Grant> {
        self.grant.as_ref()
    }

    /// Decides on a request frame: the `auth` frame (`{"op": "auth", "token": T}`) is
    /// handled here; any other request needs a credential when the server requires one,
    /// and a role that allows `needed` (`None`: the frame did not parse, and the request
    /// layer will say why).
    pub fn check(
        &mut self,
        security: &Security,
        counters: &GuardCounters,
        frame: &[u8],
        needed: Option<Role>,
    ) -> Verdict {
        if let Some(token) = auth_token(frame) {
            return self.authenticate(security, counters, token);
        }
        if !security.requires_auth() {
            return Verdict::Serve;
        }
        let Some(grant) = &self.grant else {
            counters.auth_missing.fetch_add(1, Ordering::Relaxed);
            return Verdict::Refuse {
                error: StoreError::Refused {
                    detail: format!(
                        "authentication required: this server takes {}",
                        security.how()
                    ),
                },
                close: true,
            };
        };
        match needed {
            Some(role) if !grant.role.allows(role) => {
                counters.forbidden.fetch_add(1, Ordering::Relaxed);
                Verdict::Refuse {
                    error: StoreError::Refused {
                        detail: format!(
                            "{} has role {}; this request needs role {}",
                            grant.name,
                            grant.role.name(),
                            role.name()
                        ),
                    },
                    close: false,
                }
            }
            _ => Verdict::Serve,
        }
    }

    fn authenticate(
        &mut self,
        security: &Security,
        counters: &GuardCounters,
        token: Result<String, String>,
    ) -> Verdict {
        let refuse = |detail: String| Verdict::Refuse {
            error: StoreError::Refused { detail },
            close: true,
        };
        let Some(tokens) = &security.tokens else {
            return refuse(format!(
                "this server takes no tokens; it takes {}",
                if security.requires_auth() {
                    security.how()
                } else {
                    "no credential at all"
                }
            ));
        };
        if security.tls.is_none() && self.peer.is_some_and(|p| !p.is_loopback()) {
            return refuse("a token is only taken over TLS".into());
        }
        let token = match token {
            Ok(t) => t,
            Err(detail) => return refuse(detail),
        };
        if let Some(peer) = self.peer {
            if let Some(wait) = security.limiter.admit(peer) {
                counters.auth_slowed.fetch_add(1, Ordering::Relaxed);
                std::thread::sleep(wait);
            }
        }
        match tokens.check(&token) {
            Some(grant) => {
                counters.authenticated.fetch_add(1, Ordering::Relaxed);
                self.grant = Some(grant.clone());
                Verdict::Answer(json!({"name": grant.name, "role": grant.role.name()}))
            }
            None => {
                counters.auth_failures.fetch_add(1, Ordering::Relaxed);
                if let Some(peer) = self.peer {
                    security.limiter.failed(peer);
                }
                refuse("the token is not valid".into())
            }
        }
    }
}

/// The token of an `auth` frame; `None` when the frame is another request; `Some(Err)` for
/// an `auth` frame without a token string.
pub fn auth_token(frame: &[u8]) -> Option<Result<String, String>> {
    // Cheap test first: a request frame that is not `auth` need not be parsed twice.
    if !frame.windows(6).any(|w| w == b"\"auth\"") {
        return None;
    }
    let v: Value = serde_json::from_slice(frame).ok()?;
    if v.get("op").and_then(Value::as_str) != Some("auth") {
        return None;
    }
    Some(
        v.get("token")
            .and_then(Value::as_str)
            .map(str::to_string)
            .ok_or_else(|| "an auth request needs a \"token\" string".to_string()),
    )
}

/// After refusing a plain client in writing: the error frame goes out with a FIN and what
/// the client still sends is read and dropped, so the close does not turn into a reset that
/// throws the error frame away before the client reads it (`inpath_net::stream::linger`).
pub fn linger(mut tcp: TcpStream) {
    stream::linger(&mut tcp);
}

/// The `auth` frame a client sends first.
pub fn auth_frame(token: &str) -> Vec<u8> {
    json!({"op": "auth", "token": token, "v": 1})
        .to_string()
        .into_bytes()
}
