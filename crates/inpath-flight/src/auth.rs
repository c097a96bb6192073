//! Who may call: every call passes [`Auth::check`] before the service sees it.
//!
//! - A connection whose TLS handshake verified a client certificate (the server's
//!   `--tls-client-ca`) is let in with the certificate role.
//! - With a token file, a call carries `authorization: Bearer TOKEN` (ADBC's
//!   `authorization_header` option, pyarrow's call headers) or `authorization: Basic
//!   base64(NAME:TOKEN)` (a Flight handshake with a user name and password, whose answer hands
//!   the token back as the bearer token); the token's role must allow reading.
//! - Without either, every call is let in (the listener policy has already refused such a
//!   server beyond loopback unless told otherwise).
//!
//! Failed attempts count per address ([`Limiter`]); an address over the rate is told to wait
//! (`UNAVAILABLE`) without its credential being checked, instead of holding a thread.

use crate::conn::ConnInfo;
use base64::Engine;
use inpath_net::{Limiter, Role, Tokens};
use std::sync::Arc;
use tonic::{Request, Status};

/// What the server checks.
#[derive(Clone)]
pub struct Auth {
    /// The token file, if any.
    pub tokens: Option<Arc<Tokens>>,
    /// Whether the TLS requires or requests client certificates.
    pub certs: bool,
    /// The role of a certificate client.
    pub cert_role: Role,
    /// Failed attempts per address.
    pub limiter: Arc<Limiter>,
}

/// The token of an `authorization` header's value: `Bearer TOKEN`, or `Basic` over
/// `NAME:TOKEN`.
pub fn token_of(value: &str) -> Option<String> {
    let (scheme, rest) = value.trim().split_once(' ')?;
    let rest = rest.trim();
    if scheme.eq_ignore_ascii_case("bearer") {
        return Some(rest.to_string());
    }
    if scheme.eq_ignore_ascii_case("basic") {
        // Padded or not (Go's Flight client sends it unpadded).
        let raw = base64::engine::general_purpose::STANDARD_NO_PAD
            .decode(rest.trim_end_matches('='))
            .ok()?;
        let text = String::from_utf8(raw).ok()?;
        return text.split_once(':').map(|(_, token)| token.to_string());
    }
    None
}

impl Auth {
    /// Whether anything is checked at all.
    pub fn open(&self) -> bool {
        self.tokens.is_none() && !self.certs
    }

    /// Lets the call through or says why not.
    #[allow(clippy::result_large_err)] // tonic's interceptor signature
    pub fn check(&self, request: Request<()>) -> Result<Request<()>, Status> {
        if self.open() {
            return Ok(request);
        }
        let info = request.extensions().get::<ConnInfo>().cloned();
        if info.as_ref().is_some_and(|i| i.client_cert) && self.cert_role.allows(Role::Read) {
            return Ok(request);
        }
        let Some(tokens) = &self.tokens else {
            return Err(Status::unauthenticated(
                "this server takes clients with a certificate its client CA signed; none was \
                 presented",
            ));
        };
        let ip = info.map(|i| i.peer.ip());
        if let Some(ip) = ip {
            if let Some(wait) = self.limiter.admit(ip) {
                if !wait.is_zero() {
                    return Err(Status::unavailable(format!(
                        "too many failed attempts from {ip}: try again in {} ms",
                        wait.as_millis().max(1)
                    )));
                }
            }
        }
        let token = request
            .metadata()
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .and_then(token_of);
        let fail = |why: &str| {
            if let Some(ip) = ip {
                self.limiter.failed(ip);
            }
            Err(Status::unauthenticated(why.to_string()))
        };
        match token.as_deref().map(|t| tokens.check(t)) {
            None => fail(
                "this server takes a token: send the header `authorization: Bearer TOKEN` \
                 (or a handshake with the token as the password)",
            ),
            Some(None) => fail("the token was refused"),
            Some(Some(grant)) if !grant.role.allows(Role::Read) => {
                Err(Status::permission_denied(format!(
                    "token {:?} has role {}, which may not read",
                    grant.name,
                    grant.role.name()
                )))
            }
            Some(Some(_)) => Ok(request),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_come_from_bearer_and_basic_headers() {
        assert_eq!(token_of("Bearer abc").as_deref(), Some("abc"));
        assert_eq!(token_of("bearer  abc ").as_deref(), Some("abc"));
        // base64("ci:inpath_x")
        let basic = base64::engine::general_purpose::STANDARD.encode("ci:inpath_x");
        assert_eq!(
            token_of(&format!("Basic {basic}")).as_deref(),
            Some("inpath_x")
        );
        let unpadded = base64::engine::general_purpose::STANDARD_NO_PAD.encode("ci:inpath_xy");
        assert_eq!(
            token_of(&format!("Basic {unpadded}")).as_deref(),
            Some("inpath_xy")
        );
        assert_eq!(token_of("Basic !!!"), None);
        assert_eq!(token_of("Digest abc"), None);
        assert_eq!(token_of("Bearer"), None);
    }
}
