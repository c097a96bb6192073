//! The authentication gate in front of a connection's requests, as memcached 1.6.18 keeps it
//! (`proto_text.c`, `try_read_command_asciiauth`; `proto_bin.c`, the SASL opcodes):
//!
//! - `-Y` (ASCII authentication, text protocol only): until the connection authenticates,
//!   the only request is `set <key> <flags> <exptime> <bytes>` with `user password` as the
//!   value; the key, flags and exptime are ignored. `STORED` on success; `CLIENT_ERROR
//!   authentication failure` on a wrong pair, `CLIENT_ERROR unauthenticated` for any other
//!   line, `CLIENT_ERROR bad command line termination` and `CLIENT_ERROR bad authentication
//!   token format` for a malformed value. The connection stays open after each; a line over
//!   2048 bytes without a newline closes it.
//! - `-S` (SASL, binary protocol only): List Mechs answers `PLAIN`; Auth with mechanism
//!   `PLAIN` and `authzid NUL user NUL password` answers "Authenticated" or status 0x20 "Auth
//!   failure." (the connection stays open); any other request but Version before that is
//!   answered 0x20 "Auth failure." and the connection closed.
//! - `refresh_certs` (text): reloads the TLS certificate and key for new connections: `OK`,
//!   or memcached's error line.
//!
//! Each authentication attempt is counted (`auth_cmds`, `auth_errors`) and, from an address
//! that failed more than a few times a second, made to wait its turn first ([`Gated::Wait`]).

use crate::access::{Security, Users};
use crate::proto::binary::REQUEST_MAGIC;
use crate::proto::Step;
use crate::store::Store;
use std::net::IpAddr;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

const LIST_MECHS: u8 = 0x20;
const AUTH: u8 = 0x21;
const STEP: u8 = 0x22;
const VERSION: u8 = 0x0b;
const STATUS_AUTH_ERROR: u16 = 0x20;
const STATUS_EINVAL: u16 = 0x04;
const STATUS_ENOMEM: u16 = 0x82;
/// memcached's longest SASL mechanism name.
const MAX_MECH: usize = 32;

/// What the gate did with the unread input.
pub enum Gated {
    /// Nothing: the protocol serves it.
    Pass,
    /// The gate answered into the output: continue with this step.
    Done(Step),
    /// The address failed often just now: wait this long, then call again.
    Wait(Duration),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Open,
    Ascii,
    Sasl,
}

/// One connection's authentication state.
#[derive(Debug)]
pub struct Gate {
    mode: Mode,
    authenticated: bool,
    /// The current attempt waited for its slot already.
    admitted: bool,
    tls: bool,
    /// Nothing of the connection was looked at yet.
    first: bool,
}

impl Gate {
    /// The gate of a new connection (`tls`: it came in on a TLS listener).
    pub fn new(security: &Security, tls: bool) -> Gate {
        let mode = if security.ascii.is_some() {
            Mode::Ascii
        } else if security.sasl.is_some() {
            Mode::Sasl
        } else {
            Mode::Open
        };
        Gate {
            mode,
            authenticated: false,
            admitted: false,
            tls,
            first: true,
        }
    }

    /// Looks at the start of `buf` (a whole request or a part of one) and handles what is the
    /// gate's: authentication, refusals before it, `refresh_certs`.
    pub fn step(
        &mut self,
        security: &Security,
        store: &Store,
        peer: Option<IpAddr>,
        buf: &[u8],
        binary: bool,
        out: &mut Vec<u8>,
    ) -> Gated {
        if std::mem::take(&mut self.first) && !self.tls && inpath_net::tls::looks_like_tls(buf) {
            // A TLS client on a plain listener: memcached would read its handshake as text
            // and let it wait; closing at once tells the client (and is counted).
            store.access.ssl_handshake_errors.fetch_add(1, Relaxed);
            if store.verbosity() >= 1 {
                eprintln!("a TLS client on a plain listener: closed");
            }
            return Gated::Done(Step::Close);
        }
        match (self.mode, binary) {
            (Mode::Sasl, true) => self.sasl(security, store, peer, buf, out),
            (Mode::Ascii, false) if !self.authenticated => {
                self.ascii(security, store, peer, buf, out)
            }
            (_, false) => refresh_certs(store, buf, out),
            _ => Gated::Pass,
        }
    }

    /// Waits for the address's slot once per attempt; `Some` when the caller must wait first.
    fn admit(&mut self, security: &Security, store: &Store, peer: Option<IpAddr>) -> Option<Gated> {
        if self.admitted {
            self.admitted = false;
            return None;
        }
        let wait = security.limiter.admit(peer?)?;
        store.access.auth_slowed.fetch_add(1, Relaxed);
        self.admitted = true;
        Some(Gated::Wait(wait))
    }

    fn verdict(
        &mut self,
        security: &Security,
        store: &Store,
        peer: Option<IpAddr>,
        users: &Users,
        user: &[u8],
        password: &[u8],
    ) -> bool {
        let ok = users.check(user, password);
        store.access.auth_cmds.fetch_add(1, Relaxed);
        if !ok {
            store.access.auth_errors.fetch_add(1, Relaxed);
            if let Some(p) = peer {
                security.limiter.failed(p);
            }
        }
        if store.verbosity() >= 2 {
            let how = if self.tls { " over TLS" } else { "" };
            let what = if ok {
                "authenticated"
            } else {
                "authentication failed"
            };
            eprintln!("{what}{how}: user {}", String::from_utf8_lossy(user));
        }
        ok
    }

    fn ascii(
        &mut self,
        security: &Security,
        store: &Store,
        peer: Option<IpAddr>,
        buf: &[u8],
        out: &mut Vec<u8>,
    ) -> Gated {
        let Some(nl) = memchr::memchr(b'\n', buf) else {
            // No newline after 2 KiB: junk; memcached closes without a word.
            return Gated::Done(if buf.len() > 2048 {
                Step::Close
            } else {
                Step::NeedMore
            });
        };
        let line = &buf[..nl];
        let toks: Vec<&[u8]> = line
            .split(|&b| b == b' ')
            .filter(|t| !t.is_empty())
            .collect();
        let size = (toks.len() >= 5 && toks[0] == b"set")
            .then(|| parse_u32(toks[4]))
            .flatten();
        let Some(size) = size else {
            out.extend_from_slice(b"CLIENT_ERROR unauthenticated\r\n");
            return Gated::Done(Step::Done(nl + 1));
        };
        let need = nl + 1 + size as usize + 2;
        if buf.len() < need {
            return Gated::Done(Step::NeedMore);
        }
        let data = &buf[nl + 1..need];
        if !data.ends_with(b"\r\n") {
            out.extend_from_slice(b"CLIENT_ERROR bad command line termination\r\n");
            return Gated::Done(Step::Done(need));
        }
        let words: Vec<&[u8]> = data[..size as usize]
            .split(|&b| b == b' ')
            .filter(|t| !t.is_empty())
            .collect();
        if words.len() < 2 {
            out.extend_from_slice(b"CLIENT_ERROR bad authentication token format\r\n");
            return Gated::Done(Step::Done(need));
        }
        if let Some(wait) = self.admit(security, store, peer) {
            return wait;
        }
        let Some(users) = security.ascii.as_deref() else {
            return Gated::Pass;
        };
        if self.verdict(security, store, peer, users, words[0], words[1]) {
            self.authenticated = true;
            out.extend_from_slice(b"STORED\r\n");
        } else {
            out.extend_from_slice(b"CLIENT_ERROR authentication failure\r\n");
        }
        Gated::Done(Step::Done(need))
    }

    fn sasl(
        &mut self,
        security: &Security,
        store: &Store,
        peer: Option<IpAddr>,
        buf: &[u8],
        out: &mut Vec<u8>,
    ) -> Gated {
        if buf.first().is_some_and(|&b| b != REQUEST_MAGIC) {
            return Gated::Pass;
        }
        if buf.len() < 24 {
            return Gated::Done(Step::NeedMore);
        }
        let opcode = buf[1];
        let keylen = u16::from_be_bytes([buf[2], buf[3]]) as usize;
        let extlen = buf[4] as usize;
        let bodylen = u32::from_be_bytes([buf[8], buf[9], buf[10], buf[11]]) as usize;
        let opaque = [buf[12], buf[13], buf[14], buf[15]];
        if keylen + extlen > bodylen {
            // Malformed: the protocol answers and closes, as memcached.
            return Gated::Pass;
        }
        match opcode {
            LIST_MECHS if extlen == 0 && keylen == 0 && bodylen == 0 => {
                reply(out, opcode, opaque, 0, b"PLAIN");
                Gated::Done(Step::Done(24))
            }
            LIST_MECHS => {
                reply(out, opcode, opaque, STATUS_EINVAL, b"Invalid arguments");
                Gated::Done(Step::Close)
            }
            AUTH | STEP if extlen != 0 || keylen == 0 => {
                reply(out, opcode, opaque, STATUS_EINVAL, b"Invalid arguments");
                Gated::Done(Step::Close)
            }
            AUTH | STEP => {
                let vlen = bodylen - keylen;
                if keylen > MAX_MECH {
                    reply(out, opcode, opaque, STATUS_EINVAL, b"Invalid arguments");
                    return Gated::Done(Step::Swallow(24, bodylen));
                }
                if vlen + 2 > store.item_max() {
                    reply(out, opcode, opaque, STATUS_ENOMEM, b"Out of memory");
                    return Gated::Done(Step::Swallow(24, bodylen));
                }
                if buf.len() < 24 + bodylen {
                    return Gated::Done(Step::NeedMore);
                }
                if let Some(wait) = self.admit(security, store, peer) {
                    return wait;
                }
                let mech = &buf[24..24 + keylen];
                let value = &buf[24 + keylen..24 + bodylen];
                let ok = match (opcode, security.sasl.as_deref(), plain(value)) {
                    (AUTH, Some(users), Some((user, password))) if mech == b"PLAIN" => {
                        self.verdict(security, store, peer, users, user, password)
                    }
                    // Another mechanism, a malformed PLAIN message, or a Step (PLAIN has
                    // one step): memcached's Cyrus SASL fails them all.
                    _ => {
                        store.access.auth_cmds.fetch_add(1, Relaxed);
                        store.access.auth_errors.fetch_add(1, Relaxed);
                        if let Some(p) = peer {
                            security.limiter.failed(p);
                        }
                        false
                    }
                };
                self.authenticated = ok;
                if ok {
                    reply(out, opcode, opaque, 0, b"Authenticated");
                } else {
                    reply(out, opcode, opaque, STATUS_AUTH_ERROR, b"Auth failure.");
                }
                Gated::Done(Step::Done(24 + bodylen))
            }
            VERSION => Gated::Pass,
            _ if self.authenticated => Gated::Pass,
            _ => {
                reply(out, opcode, opaque, STATUS_AUTH_ERROR, b"Auth failure.");
                Gated::Done(Step::Close)
            }
        }
    }
}

/// A SASL PLAIN message: `authzid NUL authcid NUL password`; the authorisation identity
/// must be empty or the user's own.
fn plain(value: &[u8]) -> Option<(&[u8], &[u8])> {
    let mut parts = value.splitn(3, |&b| b == 0);
    let (authz, user, password) = (parts.next()?, parts.next()?, parts.next()?);
    (authz.is_empty() || authz == user).then_some((user, password))
}

fn parse_u32(token: &[u8]) -> Option<u32> {
    let t = token.strip_suffix(b"\r").unwrap_or(token);
    if t.is_empty() || !t.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(t).ok()?.parse().ok()
}

/// A binary response: header (magic 0x81, the opcode, no key or extras, the status, the
/// body's length, the request's opaque, cas 0) and the body.
fn reply(out: &mut Vec<u8>, opcode: u8, opaque: [u8; 4], status: u16, body: &[u8]) {
    out.extend_from_slice(&[0x81, opcode, 0, 0, 0, 0]);
    out.extend_from_slice(&status.to_be_bytes());
    out.extend_from_slice(&(body.len() as u32).to_be_bytes());
    out.extend_from_slice(&opaque);
    out.extend_from_slice(&[0; 8]);
    out.extend_from_slice(body);
}

/// memcached's `refresh_certs [noreply]`: the TLS certificate and key read again for new
/// connections.
fn refresh_certs(store: &Store, buf: &[u8], out: &mut Vec<u8>) -> Gated {
    const CMD: &[u8] = b"refresh_certs";
    if !buf.starts_with(CMD) || buf.get(CMD.len()).is_some_and(|&b| !b" \r\n".contains(&b)) {
        return Gated::Pass;
    }
    let Some(nl) = memchr::memchr(b'\n', buf) else {
        return Gated::Done(Step::NeedMore);
    };
    let line = &buf[..nl];
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let noreply = line.split(|&b| b == b' ').next_back() == Some(&b"noreply"[..]);
    let answer = match store.access.tls() {
        None => "Error TLS not enabled\r\n".to_string(),
        Some(tls) => match tls.reload() {
            Ok(()) => "OK\r\n".to_string(),
            Err(e) => {
                let mut text = e.to_string();
                let mut cause = std::error::Error::source(&e);
                while let Some(c) = cause {
                    text.push_str(&format!(": {c}"));
                    cause = c.source();
                }
                format!("Error loading the certificate chain: {text}\r\n")
            }
        },
    };
    if !noreply {
        out.extend_from_slice(answer.as_bytes());
    }
    Gated::Done(Step::Done(nl + 1))
}
