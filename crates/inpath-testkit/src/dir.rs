//! Temporary directories for tests: removed when dropped, named after the test's purpose so a
//! leftover one (a killed run) says where it came from.
//!
//! ```
//! let dir = inpath_testkit::dir::scratch("doc");
//! let file = inpath_testkit::dir::write(dir.path(), "a.txt", b"hello\n");
//! assert_eq!(std::fs::read(file).unwrap(), b"hello\n");
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// A fresh temporary directory named `inpath-test-<purpose>-...`, removed when dropped.
pub fn scratch(purpose: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(&format!("inpath-test-{purpose}-"))
        .tempdir()
        .unwrap_or_else(|e| panic!("cannot make a temporary directory for {purpose}: {e}"))
}

/// Writes `bytes` to `dir/name` and returns the path.
pub fn write(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, bytes).unwrap_or_else(|e| panic!("cannot write {}: {e}", path.display()));
    path
}

/// Every entry under `dir` (recursively): path -> file contents (None for directories, the
/// target for links): two snapshots compare equal when a command left the directory as it
/// found it.
pub fn snapshot(dir: &Path) -> BTreeMap<PathBuf, Option<Vec<u8>>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let entry = entry.unwrap();
            let path = entry.path();
            let kind = entry.file_type().unwrap();
            let rel = path.strip_prefix(dir).unwrap().to_path_buf();
            if kind.is_dir() {
                stack.push(path);
                out.insert(rel, None);
            } else if kind.is_symlink() {
                out.insert(
                    rel,
                    Some(
                        std::fs::read_link(&path)
                            .unwrap()
                            .into_os_string()
                            .into_encoded_bytes(),
                    ),
                );
            } else {
                out.insert(rel, Some(std::fs::read(&path).unwrap()));
            }
        }
    }
    out
}

/// What changed between two [`snapshot`]s, in words: new, changed and removed paths.
pub fn describe_change(
    before: &BTreeMap<PathBuf, Option<Vec<u8>>>,
    after: &BTreeMap<PathBuf, Option<Vec<u8>>>,
) -> String {
    let mut notes = Vec::new();
    for (path, content) in after {
        match before.get(path) {
            None => notes.push(format!("new {}", path.display())),
            Some(old) if old != content => notes.push(format!("changed {}", path.display())),
            _ => {}
        }
    }
    for path in before.keys() {
        if !after.contains_key(path) {
            notes.push(format!("removed {}", path.display()));
        }
    }
    notes.join(", ")
}
