//! Reading the small files TLS and authentication take (PEM, token and password files), with
//! a size bound and the permission checks secrets need.

use crate::error::{NetError, Result};
use std::path::Path;

/// The largest PEM, token or password file read (1 MiB: a long certificate chain fits).
pub const MAX_FILE: u64 = 1 << 20;

/// Reads `path` whole, at most [`MAX_FILE`] bytes.
pub fn read(path: &Path, what: &'static str) -> Result<Vec<u8>> {
    inpath_core::source::read_bounded(path, what, MAX_FILE).map_err(|source| NetError::Read {
        what,
        path: path.to_path_buf(),
        source: Box::new(source),
    })
}

/// The permission bits of `path` (Unix; `None` elsewhere or when it cannot be read).
pub fn mode(path: &Path) -> Option<u32> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::metadata(path)
            .ok()
            .map(|m| m.permissions().mode() & 0o7777)
    }
    #[cfg(not(unix))]
    {
        let _ = path;
        None
    }
}

/// Refuses a file holding a secret (a private key) that users other than its owner and group
/// may read or write (`o+r`, `o+w`). A key readable by its group is taken: Debian's convention
/// is `0640` with group `ssl-cert`.
pub fn check_secret(path: &Path, what: &'static str) -> Result<()> {
    match mode(path) {
        Some(m) if m & 0o006 != 0 => Err(NetError::Mode {
            what,
            path: path.to_path_buf(),
            mode: m,
            detail: format!(
                "every user of this machine can read it, so it may already be exposed; make it \
                 private with `chmod 600 {}` (or 640 for a group such as ssl-cert)",
                path.display()
            ),
        }),
        _ => Ok(()),
    }
}

/// Refuses a file that decides who may connect (a token file) when users other than its
/// owner may change it (`g+w`, `o+w`): they could add a token of their own.
pub fn check_unwritable(path: &Path, what: &'static str) -> Result<()> {
    match mode(path) {
        Some(m) if m & 0o022 != 0 => Err(NetError::Mode {
            what,
            path: path.to_path_buf(),
            mode: m,
            detail: format!(
                "users other than its owner can change it and add a credential of their own; \
                 `chmod 600 {}`",
                path.display()
            ),
        }),
        _ => Ok(()),
    }
}

/// A warning for a file of plain-text passwords (memcached's `-Y` file) that others can
/// read: memcached takes it, so inpath does too, and says so.
pub fn warn_readable(path: &Path, what: &'static str) -> Option<String> {
    match mode(path) {
        Some(m) if m & 0o044 != 0 => Some(format!(
            "warning: {what} {} has mode {m:04o}: others can read its passwords (chmod 600 it)",
            path.display()
        )),
        _ => None,
    }
}
