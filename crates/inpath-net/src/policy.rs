//! The listener policy: no port open beyond loopback without TLS and authentication, unless the
//! user says in so many words that they accept it (`--insecure-no-auth`), and then it is said
//! at start.

use crate::error::{NetError, Result};
use std::net::{IpAddr, SocketAddr, ToSocketAddrs};

/// What protects a listener.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Protection {
    /// The link is encrypted (TLS).
    pub tls: bool,
    /// Every client authenticates (a certificate, a token, a password).
    pub auth: bool,
}

/// Whether `ip` is a loopback address (127.0.0.0/8, ::1, or ::ffff:127.x.y.z).
pub fn is_loopback(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => v4.is_loopback(),
        IpAddr::V6(v6) => {
            v6.is_loopback() || v6.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback())
        }
    }
}

/// The addresses `listen` (`HOST:PORT`) stands for.
pub fn resolve(listen: &str) -> Result<Vec<SocketAddr>> {
    let addrs: Vec<SocketAddr> = listen
        .to_socket_addrs()
        .map_err(|e| NetError::Address {
            addr: listen.to_string(),
            detail: format!("{e} (expected HOST:PORT, for example 127.0.0.1:7420)"),
        })?
        .collect();
    if addrs.is_empty() {
        return Err(NetError::Address {
            addr: listen.to_string(),
            detail: "the name resolves to no address".into(),
        });
    }
    Ok(addrs)
}

/// A listen address from a port alone (`7421`: loopback, `127.0.0.1:7421`) or `HOST:PORT`
/// as given: what the live pages' `--http` takes.
pub fn loopback_unless_told(listen: &str) -> String {
    if !listen.is_empty() && listen.bytes().all(|b| b.is_ascii_digit()) {
        format!("127.0.0.1:{listen}")
    } else {
        listen.to_string()
    }
}

/// Checks a listener against the policy. `service` names it in messages (`store serve`),
/// `insecure_flag` is the flag that accepts an unprotected listener and `insecure` whether
/// it was given. Returns the warning to print at start when the flag let an unprotected
/// non-loopback listener through (`None` when there is nothing to say).
pub fn check(
    service: &str,
    listen: &str,
    protection: Protection,
    insecure: bool,
    insecure_flag: &str,
) -> Result<Option<String>> {
    let addrs = resolve(listen)?;
    let open: Vec<&SocketAddr> = addrs.iter().filter(|a| !is_loopback(a.ip())).collect();
    if open.is_empty() || (protection.tls && protection.auth) {
        return Ok(None);
    }
    let missing = match (protection.tls, protection.auth) {
        (false, false) => "without TLS or authentication",
        (true, false) => "with TLS but without authentication",
        (false, true) => "without TLS (credentials and data would cross the network in the clear)",
        (true, true) => unreachable!("handled above"),
    };
    let wildcard = open.iter().any(|a| a.ip().is_unspecified());
    let reach = if wildcard {
        "every network interface".to_string()
    } else {
        format!("{} (not loopback)", open[0].ip())
    };
    if insecure {
        return Ok(Some(format!(
            "warning: inpath {service} listens on {listen}, {reach}, {missing} ({insecure_flag}): \
             anyone who can reach it can use it"
        )));
    }
    Err(NetError::Policy {
        addr: listen.to_string(),
        detail: format!(
            "it is {reach}, and the server would run {missing}. Listen on loopback \
             (127.0.0.1), or give TLS and authentication (docs/SECURITY.md), or accept an open \
             port with {insecure_flag}"
        ),
    })
}
