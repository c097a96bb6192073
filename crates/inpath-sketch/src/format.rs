//! The sketch file: a stable, versioned binary format.
//!
//! ```text
//! offset  size  field
//!  0       8    magic "INPSKTCH"
//!  8       2    format version, u16 LE: 1, or 2 when a sketch is not kept (see below)
//! 10       1    hash: 0 = fast (XXH3-128), 1 = compat (MurmurHash3_x64_128)
//! 11       1    item kind: 0 = u32, 1 = u64, 2 = bytes
//! 12       1    HLL precision P (4..18; 0 = no HyperLogLog, version 2 only)
//! 13       1    Count-Min rows R (1..16; 0 = no Count-Min, version 2 only)
//! 14       1    Count-Min index bits P (4..20)
//! 15       1    Fast-AGMS rows R (1..16; 0 = no Fast-AGMS, version 2 only)
//! 16       1    Fast-AGMS index bits P (4..20)
//! 17       7    reserved, zero
//! 24       8    seed, u64 LE
//! 32       8    count of items, u64 LE
//! 40       8    min: u64 for integer kinds, f64 bits for bytes (values parsed as numbers)
//! 48       8    max: likewise
//! 56       8    items the min/max cover: = count for integer kinds; numeric values for bytes
//! 64       2^P_HLL          HLL registers, one byte each (0..129-P)
//!  ...     R·2^P · 8        Count-Min counters, u64 LE, row-major
//!  ...     R·2^P · 8        Fast-AGMS counters, i64 LE, row-major
//! end−4    4                CRC-32 (IEEE) of every byte before it, u32 LE
//! ```
//! A sketch that is not kept (`inpath sketch --sketches`) has zero size: its section is empty.
//! Writers use version 1 when all three are kept, so older readers still read such files, and
//! version 2 otherwise (version 1 readers then refuse the file by its version, not silently).
//! All integers are little-endian. Readers check the magic, the version, every parameter's
//! range, the exact file length the parameters imply (before allocating anything), the
//! checksum, that every register is a possible rank, that no counter exceeds the item count in
//! magnitude and that every Count-Min row sums to it.

use crate::hash::HashMode;
use crate::params::Params;
use crate::sketch::{Extremes, ItemKind, Sketch};
use crate::{Error, Result};

/// The file magic.
pub const MAGIC: &[u8; 8] = b"INPSKTCH";
/// The newest version this code writes (for sketches that do not keep all three); it reads
/// every version up to it.
pub const VERSION: u16 = 2;
/// The largest sketch file a reader takes (1 GiB): the largest valid sketch (HLL P = 18,
/// Count-Min and Fast-AGMS 16 rows of 2^20 counters) is about 256 MiB.
pub const MAX_FILE: u64 = 1 << 30;
const HEADER: usize = 64;

/// Serializes a sketch.
pub fn to_bytes(sketch: &Sketch) -> Vec<u8> {
    let p = sketch.params();
    let mut out = Vec::with_capacity(file_len(p));
    out.extend_from_slice(MAGIC);
    let version: u16 = if p.parts() == crate::Parts::ALL { 1 } else { 2 };
    out.extend_from_slice(&version.to_le_bytes());
    out.push(match p.hash {
        HashMode::Fast => 0,
        HashMode::Compat => 1,
    });
    out.push(match sketch.kind() {
        ItemKind::U32 => 0,
        ItemKind::U64 => 1,
        ItemKind::Bytes => 2,
    });
    out.extend_from_slice(&[p.hll_p, p.cm_rows, p.cm_p, p.agms_rows, p.agms_p]);
    out.extend_from_slice(&[0; 7]);
    out.extend_from_slice(&p.seed.to_le_bytes());
    out.extend_from_slice(&sketch.count().to_le_bytes());
    let (min, max, covered) = match sketch.extremes() {
        Extremes::Int(Some((min, max))) => (min, max, sketch.count()),
        Extremes::Int(None) => (u64::MAX, 0, 0),
        Extremes::Numeric {
            range: Some((min, max)),
            numeric,
        } => (min.to_bits(), max.to_bits(), numeric),
        Extremes::Numeric {
            range: None,
            numeric,
        } => (
            f64::INFINITY.to_bits(),
            f64::NEG_INFINITY.to_bits(),
            numeric,
        ),
    };
    out.extend_from_slice(&min.to_le_bytes());
    out.extend_from_slice(&max.to_le_bytes());
    out.extend_from_slice(&covered.to_le_bytes());
    debug_assert_eq!(out.len(), HEADER);
    out.extend_from_slice(sketch.hll_registers());
    for c in sketch.cm_counters() {
        out.extend_from_slice(&c.to_le_bytes());
    }
    for c in sketch.agms_counters() {
        out.extend_from_slice(&c.to_le_bytes());
    }
    let crc = crc32fast::hash(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

fn file_len(p: &Params) -> usize {
    HEADER
        + p.hll_registers()
        + 8 * p.cm_rows as usize * p.cm_width()
        + 8 * p.agms_rows as usize * p.agms_width()
        + 4
}

/// Reads a sketch; `what` names the source in error messages (e.g. `sketch file a.skt`).
pub fn from_bytes(bytes: &[u8], what: &str) -> Result<Sketch> {
    let bad = |detail: String| Error::corrupt(what, detail);
    if bytes.len() < HEADER + 4 {
        return Err(bad(format!(
            "it is {} bytes long, shorter than the {}-byte header and checksum (truncated, or not a sketch file)",
            bytes.len(),
            HEADER + 4
        )));
    }
    if &bytes[..8] != MAGIC {
        return Err(bad(
            "it does not start with the sketch magic \"INPSKTCH\" (not a sketch file)".into(),
        ));
    }
    let version = u16::from_le_bytes([bytes[8], bytes[9]]);
    if version == 0 || version > VERSION {
        return Err(bad(format!(
            "format version {version} is not supported (this build reads versions 1 to {VERSION}; a newer inpath may read it)"
        )));
    }
    let hash = match bytes[10] {
        0 => HashMode::Fast,
        1 => HashMode::Compat,
        other => return Err(bad(format!("unknown hash code {other} (expected 0 or 1)"))),
    };
    let kind = match bytes[11] {
        0 => ItemKind::U32,
        1 => ItemKind::U64,
        2 => ItemKind::Bytes,
        other => {
            return Err(bad(format!(
                "unknown item kind code {other} (expected 0, 1 or 2)"
            )))
        }
    };
    if bytes[17..24].iter().any(|&b| b != 0) {
        return Err(bad("reserved header bytes 17..24 are not zero (damaged, or written by an incompatible tool)".into()));
    }
    let u64_at = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"));
    let params = Params {
        hll_p: bytes[12],
        cm_rows: bytes[13],
        cm_p: bytes[14],
        agms_rows: bytes[15],
        agms_p: bytes[16],
        hash,
        seed: u64_at(24),
    };
    params
        .validate()
        .map_err(|e| bad(format!("invalid parameters in header: {e}")))?;
    if version == 1 && params.parts() != crate::Parts::ALL {
        return Err(bad(format!(
            "a version 1 file must keep all three sketches, but its header has HLL P={}, Count-Min rows {}, Fast-AGMS rows {}",
            params.hll_p, params.cm_rows, params.agms_rows
        )));
    }
    let expected = file_len(&params);
    if bytes.len() != expected {
        return Err(bad(format!(
            "it is {} bytes long but its parameters (HLL P={}, Count-Min {}x{}, Fast-AGMS {}x{}) imply {expected} bytes ({})",
            bytes.len(),
            params.hll_p,
            params.cm_rows,
            params.cm_p,
            params.agms_rows,
            params.agms_p,
            if bytes.len() < expected { "truncated" } else { "extra bytes at the end" }
        )));
    }
    let body = &bytes[..expected - 4];
    let stored = u32::from_le_bytes(bytes[expected - 4..].try_into().expect("4 bytes"));
    let actual = crc32fast::hash(body);
    if stored != actual {
        return Err(bad(format!(
            "checksum mismatch (stored {stored:#010x}, computed {actual:#010x}): the file is damaged"
        )));
    }
    let count = u64_at(32);
    let (min, max, covered) = (u64_at(40), u64_at(48), u64_at(56));
    // The min/max fields have one encoding each (see the table above); anything else was not
    // written by a writer of this format.
    let consistent = match kind {
        ItemKind::U32 | ItemKind::U64 => {
            covered == count && (count > 0 || (min, max) == (u64::MAX, 0))
        }
        ItemKind::Bytes => {
            covered <= count
                && (covered > 0
                    || (min, max) == (f64::INFINITY.to_bits(), f64::NEG_INFINITY.to_bits()))
        }
    };
    if !consistent {
        return Err(bad(format!(
            "the min/max fields (min {min:#x}, max {max:#x}, covering {covered} items) do not fit \
             the count of {count} items"
        )));
    }
    let extremes = match kind {
        ItemKind::U32 | ItemKind::U64 => Extremes::Int((count > 0).then_some((min, max))),
        ItemKind::Bytes => Extremes::Numeric {
            range: (covered > 0).then(|| (f64::from_bits(min), f64::from_bits(max))),
            numeric: covered,
        },
    };
    let mut at = HEADER;
    let hll = body[at..at + params.hll_registers()].to_vec();
    at += params.hll_registers();
    let max_rank = 129 - params.hll_p;
    if let Some(pos) = hll.iter().position(|&r| r > max_rank) {
        return Err(bad(format!(
            "HLL register {pos} holds {} but ranks run from 0 to {max_rank} at P={}",
            hll[pos], params.hll_p
        )));
    }
    let cm_len = params.cm_rows as usize * params.cm_width();
    let cm_raw: Vec<u64> = body[at..at + 8 * cm_len]
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")))
        .collect();
    if let Some(pos) = cm_raw.iter().position(|&c| c > count) {
        return Err(bad(format!(
            "Count-Min counter {pos} holds {} but the file counts only {count} items",
            cm_raw[pos]
        )));
    }
    let cm: Vec<i64> = cm_raw.into_iter().map(|c| c as i64).collect();
    at += 8 * cm_len;
    let agms_len = params.agms_rows as usize * params.agms_width();
    let agms: Vec<i64> = body[at..at + 8 * agms_len]
        .chunks_exact(8)
        .map(|c| i64::from_le_bytes(c.try_into().expect("8 bytes")))
        .collect();
    // Each item moves one Fast-AGMS counter per row by one: no counter exceeds the count (the
    // in-memory tiers rely on it).
    if let Some(pos) = agms.iter().position(|&c| c.unsigned_abs() > count) {
        return Err(bad(format!(
            "Fast-AGMS counter {pos} holds {} but the file counts only {count} items",
            agms[pos]
        )));
    }
    // Every Count-Min row sums to the item count; a mismatch means a writer bug or tampering
    // that kept the checksum valid.
    for (row, counters) in cm.chunks_exact(params.cm_width()).enumerate() {
        let sum: i128 = counters.iter().map(|&c| c as i128).sum();
        if sum != count as i128 {
            return Err(bad(format!(
                "Count-Min row {row} sums to {sum} but the file counts {count} items"
            )));
        }
    }
    Sketch::from_parts(params, kind, count, extremes, hll, cm, agms)
}
