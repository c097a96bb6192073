//! Readable differences: assertions that name the first line (or byte) where two outputs part,
//! with a little context, instead of printing two long values side by side.
//!
//! ```
//! use inpath_testkit::diff::{assert_same_text, first_difference};
//! assert_same_text("greeting", "a\nb\n", "a\nb\n");
//! assert_eq!(first_difference(b"abcd", b"abXd"), Some(2));
//! ```

/// Lines of context shown around the first differing line.
const CONTEXT: usize = 2;

/// The offset of the first byte where `a` and `b` differ (the shorter one's length when one is
/// a prefix of the other), or `None` when they are equal.
pub fn first_difference(a: &[u8], b: &[u8]) -> Option<usize> {
    if a == b {
        return None;
    }
    Some(
        a.iter()
            .zip(b)
            .position(|(x, y)| x != y)
            .unwrap_or(a.len().min(b.len())),
    )
}

/// Panics unless `got` equals `expected`, naming the first differing line (from 1) with the
/// lines around it from both sides, and both line counts.
pub fn assert_same_text(what: &str, expected: &str, got: &str) {
    if expected == got {
        return;
    }
    let want: Vec<&str> = expected.lines().collect();
    let have: Vec<&str> = got.lines().collect();
    let at = want
        .iter()
        .zip(&have)
        .position(|(a, b)| a != b)
        .unwrap_or(want.len().min(have.len()));
    let window = |lines: &[&str]| {
        let lo = at.saturating_sub(CONTEXT);
        let hi = (at + CONTEXT + 1).min(lines.len());
        (lo..hi)
            .map(|i| {
                format!(
                    "{}{:>6} | {}",
                    if i == at { ">" } else { " " },
                    i + 1,
                    lines[i]
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    };
    panic!(
        "{what}: the texts part at line {} (expected {} lines, got {}; {} and {} bytes)\n--- expected\n{}\n--- got\n{}",
        at + 1,
        want.len(),
        have.len(),
        expected.len(),
        got.len(),
        window(&want),
        window(&have)
    );
}

/// Panics unless `got` equals `expected`, naming the first differing byte offset with 16 bytes
/// of each side in hex from there, and both lengths.
pub fn assert_same_bytes(what: &str, expected: &[u8], got: &[u8]) {
    let Some(at) = first_difference(expected, got) else {
        return;
    };
    let hex = |bytes: &[u8]| {
        bytes[at.min(bytes.len())..(at + 16).min(bytes.len())]
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<Vec<_>>()
            .join(" ")
    };
    panic!(
        "{what}: the bytes part at offset {at} (expected {} bytes, got {})\n--- expected from there: {}\n--- got from there:      {}",
        expected.len(),
        got.len(),
        hex(expected),
        hex(got)
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_the_first_difference() {
        assert_eq!(first_difference(b"", b""), None);
        assert_eq!(first_difference(b"abc", b"abc"), None);
        assert_eq!(first_difference(b"abc", b"abd"), Some(2));
        assert_eq!(first_difference(b"ab", b"abc"), Some(2));
        let message = std::panic::catch_unwind(|| assert_same_text("t", "a\nb\nc\n", "a\nB\nc\n"))
            .unwrap_err();
        let message = message.downcast_ref::<String>().unwrap();
        assert!(message.contains("part at line 2"), "{message}");
        assert!(message.contains(">     2 | B"), "{message}");
        let message = std::panic::catch_unwind(|| assert_same_bytes("b", b"\x00\x01", b"\x00\x02"))
            .unwrap_err();
        let message = message.downcast_ref::<String>().unwrap();
        assert!(message.contains("offset 1"), "{message}");
    }
}
