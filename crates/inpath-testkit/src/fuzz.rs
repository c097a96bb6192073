//! A seeded mutator for the bounded fuzz passes that run inside the normal test suites (stable
//! Rust, no `cargo fuzz`): start from a committed corpus of valid inputs, apply a few random
//! mutations (bit flips, interesting bytes, truncations, junk insertions, copied runs, splices
//! with another corpus entry, and edits of 1/2/4/8-byte length fields in either byte order),
//! and feed the result to a reader, which must answer with an error or a valid result and never
//! panic, hang or allocate without bound.
//!
//! Deterministic: the same seed gives the same mutations on every machine, so any failure is a
//! reproducible test case (and becomes a named regression test).
//!
//! ```
//! use inpath_testkit::fuzz::Mutator;
//! let mut m = Mutator::new(7);
//! let a = m.mutate(b"hello world", &[b"other input".as_slice()]);
//! let mut again = Mutator::new(7);
//! assert_eq!(a, again.mutate(b"hello world", &[b"other input".as_slice()]));
//! ```

use std::path::Path;

/// A deterministic mutator (SplitMix64 underneath).
#[derive(Clone, Debug)]
pub struct Mutator {
    state: u64,
}

impl Mutator {
    /// A mutator from a fixed seed.
    pub fn new(seed: u64) -> Mutator {
        Mutator {
            state: seed ^ 0x6a09_e667_f3bc_c908,
        }
    }

    /// The next pseudo-random 64 bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A value in `0..n` (0 when `n` is 0).
    pub fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next_u64() % n as u64) as usize
        }
    }

    /// A mutated copy of `input`: one to four mutations; `others` supplies splice material.
    pub fn mutate(&mut self, input: &[u8], others: &[&[u8]]) -> Vec<u8> {
        let mut v = input.to_vec();
        for _ in 0..1 + self.below(4) {
            self.mutate_once(&mut v, others);
        }
        v
    }

    fn mutate_once(&mut self, v: &mut Vec<u8>, others: &[&[u8]]) {
        match self.below(9) {
            0 if !v.is_empty() => {
                let at = self.below(v.len());
                v[at] ^= 1 << self.below(8);
            }
            1 if !v.is_empty() => {
                let at = self.below(v.len());
                v[at] = [0, 1, 0x7f, 0x80, 0xff][self.below(5)];
            }
            2 => {
                let at = self.below(v.len() + 1);
                v.truncate(at);
            }
            3 => {
                let at = self.below(v.len() + 1);
                let n = 1 + self.below(16);
                let junk: Vec<u8> = (0..n).map(|_| self.next_u64() as u8).collect();
                v.splice(at..at, junk);
            }
            4 if v.len() > 8 => {
                // Copy a run from one place to another (keeps structure, breaks meaning).
                let len = 1 + self.below(8.min(v.len() / 2));
                let from = self.below(v.len() - len + 1);
                let to = self.below(v.len() - len + 1);
                let run = v[from..from + len].to_vec();
                v[to..to + len].copy_from_slice(&run);
            }
            5 if !others.is_empty() => {
                // Splice: our head, another input's tail.
                let other = others[self.below(others.len())];
                let cut = self.below(v.len() + 1);
                let from = self.below(other.len() + 1);
                v.truncate(cut);
                v.extend_from_slice(&other[from..]);
            }
            6 | 7 if v.len() >= 8 => {
                // A length or count field: an aligned 1, 2, 4 or 8-byte word set to an edge value.
                let width = [1usize, 2, 4, 8][self.below(4)];
                let at = self.below(v.len() / width) * width;
                let len = v.len() as u64;
                let value = [
                    0,
                    1,
                    len.wrapping_sub(1),
                    len,
                    len + 1,
                    u64::MAX,
                    u64::MAX >> 1,
                    1 << 31,
                    u32::MAX as u64,
                    self.next_u64(),
                ][self.below(10)];
                let bytes = if self.below(2) == 0 {
                    value.to_le_bytes()
                } else {
                    value.to_be_bytes()
                };
                let field = if self.below(2) == 0 {
                    &bytes[..width]
                } else {
                    &bytes[8 - width..]
                };
                v[at..at + width].copy_from_slice(field);
            }
            _ => {
                // Cut and pad with a repeated byte.
                let at = self.below(v.len() + 1);
                v.truncate(at);
                let byte = self.next_u64() as u8;
                let n = self.below(40);
                v.extend(std::iter::repeat_n(byte, n));
            }
        }
    }

    /// Random cut points splitting `len` bytes into chunks (for streaming readers): the ends
    /// of each chunk, ascending, the last one `len`.
    pub fn cuts(&mut self, len: usize) -> Vec<usize> {
        let mut cuts: Vec<usize> = (0..self.below(6)).map(|_| self.below(len + 1)).collect();
        cuts.push(len);
        cuts.sort_unstable();
        cuts
    }
}

/// Runs `iterations` mutations of the corpus `files` (from `seed`) through a reader of a
/// checksummed format. Every other mutation gets `fix_checksum` applied first, so it reaches the
/// structure checks behind the checksum; mutations that change nothing are skipped.
/// `read(i, name, original, mutated)` must check the reader's answer itself and return whether
/// it refused the input. Returns `(refused, total)` over the mutations whose checksum was
/// *not* fixed, which a reader should refuse almost always.
pub fn run_checksummed(
    files: &[(String, Vec<u8>)],
    seed: u64,
    iterations: usize,
    fix_checksum: impl Fn(&mut [u8]),
    mut read: impl FnMut(usize, &str, &[u8], &[u8]) -> bool,
) -> (usize, usize) {
    let others: Vec<&[u8]> = files.iter().map(|(_, b)| b.as_slice()).collect();
    let mut m = Mutator::new(seed);
    let (mut refused, mut total) = (0usize, 0usize);
    for i in 0..iterations {
        let (name, original) = &files[i % files.len()];
        let mut bad = m.mutate(original, &others);
        if bad == *original {
            continue; // a mutation that changed nothing (a run copied over its equal...)
        }
        let fixed = i % 2 == 1 && bad.len() >= 4;
        if fixed {
            fix_checksum(&mut bad);
        }
        let was_refused = read(i, name, original, &bad);
        if !fixed {
            total += 1;
            refused += usize::from(was_refused);
        }
    }
    (refused, total)
}

/// The files of a corpus directory, by name, sorted (an unreadable or empty directory is an
/// error: a fuzz pass over nothing would pass silently).
pub fn corpus(dir: &Path) -> std::io::Result<Vec<(String, Vec<u8>)>> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        if entry.file_type()?.is_file() {
            let name = entry.file_name().to_string_lossy().into_owned();
            files.push((name, std::fs::read(entry.path())?));
        }
    }
    files.sort();
    if files.is_empty() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::NotFound,
            format!("no corpus files in {}", dir.display()),
        ));
    }
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mutations_are_deterministic_and_varied() {
        let input: Vec<u8> = (0..100u8).collect();
        let mut a = Mutator::new(1);
        let mut b = Mutator::new(1);
        let mut distinct = std::collections::HashSet::new();
        for _ in 0..500 {
            let x = a.mutate(&input, &[b"spliced tail"]);
            assert_eq!(x, b.mutate(&input, &[b"spliced tail"]));
            distinct.insert(x);
        }
        assert!(distinct.len() > 450, "{}", distinct.len());
        assert!(distinct.iter().any(|x| x.len() < input.len()));
        assert!(distinct.iter().any(|x| x.len() > input.len()));
        let cuts = a.cuts(10);
        assert_eq!(*cuts.last().unwrap(), 10);
        assert!(cuts.windows(2).all(|w| w[0] <= w[1]));
        // Empty inputs are fine too.
        for _ in 0..100 {
            let _ = a.mutate(&[], &[]);
        }
    }
}
