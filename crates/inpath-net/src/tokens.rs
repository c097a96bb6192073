//! Tokens with roles, hashed at rest.
//!
//! A server reads a token file, one token a line, that holds a name, a role and the SHA-256 of
//! the token, never the token itself:
//!
//! ```text
//! # inpath token file: NAME ROLE sha256:HEX (docs/SECURITY.md)
//! alice write sha256:2f1c...64 hex digits
//! ci    read  sha256:9b07...
//! ```
//!
//! Tokens are 256 random bits (`inpath_` and 64 hexadecimal digits, [`generate`]), so one
//! SHA-256 is enough to keep a stolen file from yielding them (a slow password hash protects
//! guessable secrets; these are not guessable), and a lookup by hash compares no secret
//! byte by byte. A client sends its token once per connection, over TLS.

use crate::error::{NetError, Result};
use crate::files;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// What a credential may do.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Role {
    /// Reads: kernels, `read`, listings, counters.
    Read,
    /// Also changes: `put`, `rm`, index builds.
    Write,
}

impl Role {
    /// `read` or `write`.
    pub fn name(self) -> &'static str {
        match self {
            Role::Read => "read",
            Role::Write => "write",
        }
    }

    /// Parses `read` or `write`.
    pub fn parse(text: &str) -> Result<Role> {
        match text {
            "read" => Ok(Role::Read),
            "write" => Ok(Role::Write),
            other => Err(NetError::Setting {
                name: "role",
                value: other.to_string(),
                valid: "read (kernels and reads) or write (also put and rm)".into(),
            }),
        }
    }

    /// Whether this role may do what `needed` allows.
    pub fn allows(self, needed: Role) -> bool {
        self >= needed
    }
}

/// Who a credential is: its name in the token file (or the certificate's), and its role.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Grant {
    /// The token's name, or `client certificate`.
    pub name: String,
    /// What it may do.
    pub role: Role,
}

/// A token file, read.
#[derive(Clone, Debug, Default)]
pub struct Tokens {
    path: PathBuf,
    by_hash: HashMap<[u8; 32], Grant>,
}

/// The first line of a token file [`entry_line`] starts.
pub const HEADER: &str =
    "# inpath token file: NAME ROLE sha256:HEX a line; the tokens themselves are not stored";

const PREFIX: &str = "inpath_";

fn digest(token: &str) -> [u8; 32] {
    let d = ring::digest::digest(&ring::digest::SHA256, token.trim().as_bytes());
    let mut out = [0u8; 32];
    out.copy_from_slice(d.as_ref());
    out
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> Option<[u8; 32]> {
    if text.len() != 64 || !text.is_ascii() {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, pair) in text.as_bytes().chunks(2).enumerate() {
        let s = std::str::from_utf8(pair).ok()?;
        out[i] = u8::from_str_radix(s, 16).ok()?;
    }
    Some(out)
}

/// Whether `name` is a valid token name: 1 to 64 of `A-Z a-z 0-9 . _ @ -`.
pub fn valid_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._@-".contains(&b))
}

impl Tokens {
    /// Reads a token file; refused when others may change it (they could add a token).
    pub fn load(path: &Path) -> Result<Tokens> {
        const WHAT: &str = "token file";
        files::check_unwritable(path, WHAT)?;
        let bytes = files::read(path, WHAT)?;
        let text = String::from_utf8(bytes).map_err(|_| NetError::Entry {
            what: WHAT,
            path: path.to_path_buf(),
            line: 1,
            detail: "the file is not text (UTF-8)".into(),
        })?;
        Tokens::parse(&text, path)
    }

    /// Parses a token file's text (`path` names it in errors).
    pub fn parse(text: &str, path: &Path) -> Result<Tokens> {
        let bad = |line: usize, detail: String| NetError::Entry {
            what: "token file",
            path: path.to_path_buf(),
            line,
            detail,
        };
        let mut by_hash = HashMap::new();
        let mut names = std::collections::HashSet::new();
        for (i, line) in text.lines().enumerate() {
            let n = i + 1;
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let fields: Vec<&str> = line.split_whitespace().collect();
            let [name, role, hash] = fields[..] else {
                return Err(bad(
                    n,
                    format!(
                        "expected `NAME ROLE sha256:HEX` (three fields), found {} fields",
                        fields.len()
                    ),
                ));
            };
            if !valid_name(name) {
                return Err(bad(
                    n,
                    format!("the name {name:?} is not 1 to 64 of A-Z a-z 0-9 . _ @ -"),
                ));
            }
            let role = Role::parse(role).map_err(|e| bad(n, e.to_string()))?;
            let digest = hash
                .strip_prefix("sha256:")
                .and_then(unhex)
                .ok_or_else(|| {
                    bad(
                        n,
                        "the hash is not sha256: and 64 hexadecimal digits (a token file holds \
                     hashes; `inpath tls token` adds one)"
                            .into(),
                    )
                })?;
            if !names.insert(name.to_string()) {
                return Err(bad(n, format!("the name {name:?} is given twice")));
            }
            let grant = Grant {
                name: name.to_string(),
                role,
            };
            if by_hash.insert(digest, grant).is_some() {
                return Err(bad(n, "this token's hash is given twice".into()));
            }
        }
        Ok(Tokens {
            path: path.to_path_buf(),
            by_hash,
        })
    }

    /// Who `token` is, if it is in the file.
    pub fn check(&self, token: &str) -> Option<&Grant> {
        self.by_hash.get(&digest(token))
    }

    /// The number of tokens.
    pub fn len(&self) -> usize {
        self.by_hash.len()
    }

    /// Whether the file holds no token (nobody can authenticate with one).
    pub fn is_empty(&self) -> bool {
        self.by_hash.is_empty()
    }

    /// The file read.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// A new token: `inpath_` and 256 random bits in hexadecimal.
pub fn generate() -> Result<String> {
    use ring::rand::SecureRandom;
    let mut bytes = [0u8; 32];
    ring::rand::SystemRandom::new()
        .fill(&mut bytes)
        .map_err(|_| NetError::Io {
            what: "cannot draw a random token".into(),
            source: std::io::Error::other("the system's random source failed"),
        })?;
    Ok(format!("{PREFIX}{}", hex(&bytes)))
}

/// The token file line for `token` under `name` with `role`.
pub fn entry_line(name: &str, role: Role, token: &str) -> String {
    format!("{name} {} sha256:{}", role.name(), hex(&digest(token)))
}

/// The token file's text with `name` given `role` and `token`: the line replaces the name's
/// old one (rotation), other lines are kept as they are.
pub fn with_entry(old: &str, name: &str, role: Role, token: &str) -> String {
    let mut out = String::new();
    if !old.lines().any(|l| l.trim() == HEADER) {
        out.push_str(HEADER);
        out.push('\n');
    }
    for line in old.lines() {
        if line.split_whitespace().next() == Some(name) {
            continue;
        }
        out.push_str(line);
        out.push('\n');
    }
    out.push_str(&entry_line(name, role, token));
    out.push('\n');
    out
}

/// Reads a client's token: the first line of `path` that is not empty or a `#` comment. The
/// file is refused when others can read it (the token is a secret).
pub fn read_token_file(path: &Path) -> Result<String> {
    const WHAT: &str = "token";
    files::check_secret(path, WHAT)?;
    if let Some(m) = files::mode(path) {
        if m & 0o040 != 0 {
            return Err(NetError::Mode {
                what: WHAT,
                path: path.to_path_buf(),
                mode: m,
                detail: format!(
                    "its group can read the token; `chmod 600 {}`",
                    path.display()
                ),
            });
        }
    }
    let bytes = files::read(path, WHAT)?;
    let text = String::from_utf8_lossy(&bytes);
    text.lines()
        .map(str::trim)
        .find(|l| !l.is_empty() && !l.starts_with('#'))
        .map(str::to_string)
        .ok_or_else(|| NetError::Entry {
            what: WHAT,
            path: path.to_path_buf(),
            line: 1,
            detail: "holds no token".into(),
        })
}
