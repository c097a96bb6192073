//! The key file the CLI reads: a small text file holding AES keys by key id.
//!
//! ```text
//! # inpath seal key file: keep it secret (mode 0600); keys are hex, 32/48/64 digits
//! inpath-seal-keys 1
//! key 1 603deb1015ca71be2b73aef0857d77811f352c073b6108d72d9810a30914dff4
//! key 7 2b7e151628aed2a6abf7158809cf4f3c
//! ```
//!
//! The first line that is not blank or a `#` comment is the signature `inpath-seal-keys 1`
//! (format version 1). Each further line is `key <id> <hex>`: a decimal id (0 to 2^32-1) and
//! the key in hex (16, 24 or 32 bytes: AES-128, -192 or -256). Ids are unique. Errors name the
//! line, never its content. The text is wiped from memory after parsing.

use crate::aes::{Key, KeyRing};
use crate::error::{Error, Result};
use zeroize::Zeroizing;

/// The signature line.
pub const SIGNATURE: &str = "inpath-seal-keys 1";

/// What a key file should look like, for error messages.
pub const EXPECTED: &str = "an inpath key file is text: the line `inpath-seal-keys 1`, then one \
    `key <id> <hex>` line per key (32, 48 or 64 hex digits); make one with \
    `inpath seal keygen -o keys.txt`";

/// A parsed key file: the keys and the id of the first key (the default for sealing).
#[derive(Debug)]
pub struct KeyFile {
    /// All keys.
    pub ring: KeyRing,
    /// Id of the first key in the file.
    pub first_id: u32,
}

/// Parses key file text. Takes ownership so the text can be wiped.
pub fn parse(text: Zeroizing<String>) -> Result<KeyFile> {
    let bad = |line: usize, detail: &str| Error::Corrupt {
        format: "key file",
        detail: format!("line {line}: {detail}"),
    };
    let mut ring = KeyRing::new();
    let mut first_id = None;
    let mut signed = false;
    for (n, line) in text.lines().enumerate() {
        let n = n + 1;
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if !signed {
            if line != SIGNATURE {
                return Err(bad(
                    n,
                    &format!("expected the signature line `{SIGNATURE}`"),
                ));
            }
            signed = true;
            continue;
        }
        let mut fields = line.split_whitespace();
        if fields.next() != Some("key") {
            return Err(bad(n, "expected `key <id> <hex>`"));
        }
        let id: u32 = fields
            .next()
            .and_then(|f| f.parse().ok())
            .ok_or_else(|| bad(n, "the key id is not a number from 0 to 4294967295"))?;
        let hex = fields
            .next()
            .ok_or_else(|| bad(n, "the key's hex digits are missing"))?;
        if fields.next().is_some() {
            return Err(bad(n, "unexpected text after the key"));
        }
        let bytes =
            Zeroizing::new(decode_hex(hex).ok_or_else(|| bad(n, "the key is not hex digits"))?);
        let key = Key::new(&bytes).map_err(|_| {
            bad(
                n,
                &format!("the key is {} bytes; AES needs 16, 24 or 32", bytes.len()),
            )
        })?;
        if ring.get(id).is_ok() {
            return Err(bad(n, &format!("key id {id} appears twice")));
        }
        ring.insert(id, key);
        first_id.get_or_insert(id);
    }
    if !signed {
        return Err(Error::Corrupt {
            format: "key file",
            detail: format!("empty: the first line must be `{SIGNATURE}`"),
        });
    }
    let first_id = first_id.ok_or_else(|| Error::Corrupt {
        format: "key file",
        detail: "holds no keys".into(),
    })?;
    Ok(KeyFile { ring, first_id })
}

/// Parses key file bytes as read from disk: like [`parse`], but bytes that are not text (a
/// raw binary key, say) get an error naming the expected format and `inpath seal keygen`
/// instead of a UTF-8 complaint. Takes ownership so the bytes can be wiped.
pub fn parse_bytes(bytes: Zeroizing<Vec<u8>>) -> Result<KeyFile> {
    let text = match std::str::from_utf8(&bytes) {
        Ok(text) => Zeroizing::new(text.to_owned()),
        Err(_) => {
            return Err(Error::Corrupt {
                format: "key file",
                detail: format!(
                    "it is not text ({} bytes, perhaps a raw binary key); {EXPECTED}",
                    bytes.len()
                ),
            })
        }
    };
    parse(text).map_err(|e| match e {
        Error::Corrupt { format, detail } => Error::Corrupt {
            format,
            detail: format!("{detail} ({EXPECTED})"),
        },
        other => other,
    })
}

/// Formats keys as key file text (wiped when dropped).
pub fn format(keys: &[(u32, &Key)]) -> Zeroizing<String> {
    let mut text = Zeroizing::new(String::new());
    text.push_str("# inpath seal key file: keep it secret (mode 0600); keys are hex\n");
    text.push_str(SIGNATURE);
    text.push('\n');
    for (id, key) in keys {
        text.push_str(&format!("key {id} "));
        for b in key.expose_secret() {
            text.push_str(&format!("{b:02x}"));
        }
        text.push('\n');
    }
    text
}

fn decode_hex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    let digit = |c: u8| -> Option<u8> {
        match c {
            b'0'..=b'9' => Some(c - b'0'),
            b'a'..=b'f' => Some(c - b'a' + 10),
            b'A'..=b'F' => Some(c - b'A' + 10),
            _ => None,
        }
    };
    text.as_bytes()
        .chunks(2)
        .map(|p| Some(digit(p[0])? << 4 | digit(p[1])?))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formatted_keys_parse_back() {
        let key = Key::new(&[7u8; 32]).unwrap();
        let text = format(&[(3, &key)]);
        let parsed = parse_bytes(Zeroizing::new(text.as_bytes().to_vec())).unwrap();
        assert_eq!(parsed.first_id, 3);
        assert_eq!(parsed.ring.get(3).unwrap().expose_secret(), &[7u8; 32]);
    }

    #[test]
    fn raw_binary_key_names_the_format_and_keygen() {
        let raw: Vec<u8> = (0..32u8).map(|i| i.wrapping_mul(37) | 0x80).collect();
        let err = parse_bytes(Zeroizing::new(raw)).unwrap_err().to_string();
        assert!(err.contains("not text"), "{err}");
        assert!(err.contains("inpath-seal-keys 1"), "{err}");
        assert!(err.contains("inpath seal keygen"), "{err}");
        assert!(!err.contains("UTF-8"), "{err}");
    }

    #[test]
    fn unparsable_text_names_the_line_and_the_format() {
        for (text, fragment) in [
            ("", "empty"),
            (
                "603deb1015ca71be2b73aef0857d7781\n",
                "line 1: expected the signature",
            ),
            ("inpath-seal-keys 1\nkey x 00\n", "line 2: the key id"),
            (
                "inpath-seal-keys 1\nkey 1 abc\n",
                "line 2: the key is not hex",
            ),
            ("inpath-seal-keys 1\nkey 1 0011\n", "AES needs 16, 24 or 32"),
        ] {
            let err = parse_bytes(Zeroizing::new(text.as_bytes().to_vec()))
                .unwrap_err()
                .to_string();
            assert!(err.contains(fragment), "{text:?}: {err}");
            assert!(
                err.contains("inpath seal keygen") || fragment == "empty",
                "{text:?}: {err}"
            );
        }
    }
}
