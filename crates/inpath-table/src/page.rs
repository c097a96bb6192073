//! Page contents before sealing: the accumulator a writer fills, the encoder and the decoder.
//!
//! ```text
//! offset size field
//!  0     1    encoding: 1 FOR, 2 float, 3 bitmap, 4 dictionary codes, 5 lengths + heap
//!  1     1    flags: bit 0 = a validity bitmap follows; other bits zero
//!  2     2    reserved, zero
//!  4     4    rows n, u32
//!  8     ⌈n/8⌉ validity bitmap (bit i of byte i/8, LSB first, 1 = valid), only with flag bit 0
//!  …     -    body: FOR: one FOR block (pack.rs); float: n × f64 LE; bitmap: ⌈n/8⌉ bytes of
//!             values; dictionary: one FOR block of codes; heap: one FOR block of byte
//!             lengths, then the heap (the strings back to back, exactly to the page's end)
//! ```

use crate::error::{malformed, Malformed};
use crate::format::{Encoding, LogicalType, Scalar, DICTIONARY_LIMIT};
use crate::pack;
use arrow_array::{
    Array, ArrayRef, BooleanArray, Date32Array, Decimal128Array, Float64Array, Int32Array,
    Int64Array, LargeStringArray, StringArray, StringViewArray,
};
use arrow_buffer::{BooleanBuffer, Buffer, NullBuffer, OffsetBuffer, ScalarBuffer};
use std::collections::HashMap;
use std::sync::Arc;

const PAGE_HEADER: usize = 8;
const FLAG_VALIDITY: u8 = 1;

/// Values of one column waiting for their page.
#[derive(Debug)]
pub(crate) enum Values {
    Int(Vec<i128>),
    Float(Vec<f64>),
    Bool(Vec<bool>),
    Str { lens: Vec<u32>, heap: Vec<u8> },
}

/// Rows of one column waiting for their page: values and validity.
#[derive(Debug)]
pub(crate) struct Acc {
    pub values: Values,
    pub valid: Vec<bool>,
    pub nulls: usize,
}

impl Acc {
    pub fn new(logical: LogicalType) -> Acc {
        let values = match logical {
            LogicalType::Float64 => Values::Float(Vec::new()),
            LogicalType::Boolean => Values::Bool(Vec::new()),
            LogicalType::Utf8 => Values::Str {
                lens: Vec::new(),
                heap: Vec::new(),
            },
            _ => Values::Int(Vec::new()),
        };
        Acc {
            values,
            valid: Vec::new(),
            nulls: 0,
        }
    }

    pub fn len(&self) -> usize {
        self.valid.len()
    }

    pub fn clear(&mut self) {
        self.valid.clear();
        self.nulls = 0;
        match &mut self.values {
            Values::Int(v) => v.clear(),
            Values::Float(v) => v.clear(),
            Values::Bool(v) => v.clear(),
            Values::Str { lens, heap } => {
                lens.clear();
                heap.clear();
            }
        }
    }

    /// Appends rows `start..start+len` of `array` (whose type was checked against the column's).
    /// Returns `false` when the array's type does not fit the accumulator.
    pub fn append(&mut self, array: &dyn Array, start: usize, len: usize) -> bool {
        let range = start..start + len;
        for i in range.clone() {
            let v = array.is_valid(i);
            self.valid.push(v);
            self.nulls += usize::from(!v);
        }
        let any = array.as_any();
        macro_rules! ints {
            ($ty:ty, $v:ident) => {
                if let Some(a) = any.downcast_ref::<$ty>() {
                    let vals = a.values();
                    $v.extend(vals[range].iter().map(|&x| x as i128));
                    return true;
                }
            };
        }
        macro_rules! strs {
            ($ty:ty, $lens:ident, $heap:ident) => {
                if let Some(a) = any.downcast_ref::<$ty>() {
                    for i in range.clone() {
                        let s: &str = if a.is_valid(i) { a.value(i) } else { "" };
                        $lens.push(s.len() as u32);
                        $heap.extend_from_slice(s.as_bytes());
                    }
                    return true;
                }
            };
        }
        match &mut self.values {
            Values::Int(v) => {
                ints!(Int32Array, v);
                ints!(Int64Array, v);
                ints!(Date32Array, v);
                ints!(Decimal128Array, v);
            }
            Values::Float(v) => {
                if let Some(a) = any.downcast_ref::<Float64Array>() {
                    v.extend_from_slice(&a.values()[range]);
                    return true;
                }
            }
            Values::Bool(v) => {
                if let Some(a) = any.downcast_ref::<BooleanArray>() {
                    v.extend(range.map(|i| a.value(i)));
                    return true;
                }
            }
            Values::Str { lens, heap } => {
                strs!(StringArray, lens, heap);
                strs!(LargeStringArray, lens, heap);
                strs!(StringViewArray, lens, heap);
            }
        }
        false
    }
}

/// The dictionary state of a string column: codes in order of first appearance.
#[derive(Debug, Default)]
pub(crate) struct Dict {
    pub map: HashMap<Vec<u8>, u32>,
    pub values: Vec<String>,
    /// Set once a page did not fit; every later page is a heap page.
    pub closed: bool,
}

/// What the encoder reports about a page besides its bytes.
pub(crate) struct Encoded {
    pub encoding: Encoding,
    pub width: u8,
    pub min: Option<Scalar>,
    pub max: Option<Scalar>,
    pub has_nan: bool,
}

/// Encodes the rows in `acc` into `out` (cleared first).
pub(crate) fn encode(
    acc: &Acc,
    logical: LogicalType,
    dict: Option<&mut Dict>,
    out: &mut Vec<u8>,
) -> Encoded {
    out.clear();
    let n = acc.len();
    let valid = (acc.nulls > 0).then_some(acc.valid.as_slice());
    let is_valid = |i: usize| valid.is_none_or(|v| v[i]);
    let header = |out: &mut Vec<u8>, encoding: Encoding| {
        out.push(encoding.code());
        out.push(if valid.is_some() { FLAG_VALIDITY } else { 0 });
        out.extend_from_slice(&[0, 0]);
        out.extend_from_slice(&(n as u32).to_le_bytes());
        if let Some(v) = valid {
            push_bitmap(out, v);
        }
    };
    match &acc.values {
        Values::Int(values) => {
            header(out, Encoding::For);
            let width = pack::encode_for(values, valid, out);
            let mut mm: Option<(i128, i128)> = None;
            for (i, &v) in values.iter().enumerate() {
                if is_valid(i) {
                    mm = Some(mm.map_or((v, v), |(a, b)| (a.min(v), b.max(v))));
                }
            }
            let _ = logical;
            Encoded {
                encoding: Encoding::For,
                width,
                min: mm.map(|m| Scalar::Int(m.0)),
                max: mm.map(|m| Scalar::Int(m.1)),
                has_nan: false,
            }
        }
        Values::Float(values) => {
            header(out, Encoding::Float);
            let mut mm: Option<(f64, f64)> = None;
            let mut has_nan = false;
            for (i, &v) in values.iter().enumerate() {
                let v = if is_valid(i) { v } else { 0.0 };
                out.extend_from_slice(&v.to_le_bytes());
                if is_valid(i) {
                    if v.is_nan() {
                        has_nan = true;
                    } else {
                        mm = Some(mm.map_or((v, v), |(a, b)| {
                            (if v < a { v } else { a }, if v > b { v } else { b })
                        }));
                    }
                }
            }
            Encoded {
                encoding: Encoding::Float,
                width: 64,
                min: mm.map(|m| Scalar::float(m.0)),
                max: mm.map(|m| Scalar::float(m.1)),
                has_nan,
            }
        }
        Values::Bool(values) => {
            header(out, Encoding::Bitmap);
            let masked: Vec<bool> = (0..n).map(|i| is_valid(i) && values[i]).collect();
            push_bitmap(out, &masked);
            let mut seen = [false; 2];
            for (i, &v) in values.iter().enumerate() {
                if is_valid(i) {
                    seen[usize::from(v)] = true;
                }
            }
            let (min, max) = match seen {
                [false, false] => (None, None),
                [true, false] => (Some(false), Some(false)),
                [false, true] => (Some(true), Some(true)),
                [true, true] => (Some(false), Some(true)),
            };
            Encoded {
                encoding: Encoding::Bitmap,
                width: 1,
                min: min.map(Scalar::Bool),
                max: max.map(Scalar::Bool),
                has_nan: false,
            }
        }
        Values::Str { lens, heap } => {
            // Each string's byte range in the heap.
            let mut ranges = Vec::with_capacity(n);
            let mut at = 0usize;
            for &l in lens {
                ranges.push(at..at + l as usize);
                at += l as usize;
            }
            let s = |i: usize| &heap[ranges[i].clone()];
            let mut mm: Option<(usize, usize)> = None;
            for i in 0..n {
                if is_valid(i) {
                    mm = Some(mm.map_or((i, i), |(a, b)| {
                        (
                            if s(i) < s(a) { i } else { a },
                            if s(i) > s(b) { i } else { b },
                        )
                    }));
                }
            }
            let text = |i: usize| Scalar::Str(String::from_utf8_lossy(s(i)).into_owned());
            let (min, max) = (mm.map(|m| text(m.0)), mm.map(|m| text(m.1)));
            if let Some(dict) = dict.filter(|d| !d.closed) {
                let mut fresh: Vec<&[u8]> = Vec::new();
                let mut fresh_set = std::collections::HashSet::new();
                for i in 0..n {
                    if is_valid(i) && !dict.map.contains_key(s(i)) && fresh_set.insert(s(i)) {
                        fresh.push(s(i));
                    }
                }
                if dict.map.len() + fresh.len() <= DICTIONARY_LIMIT {
                    for f in fresh {
                        let code = dict.values.len() as u32;
                        dict.map.insert(f.to_vec(), code);
                        dict.values.push(String::from_utf8_lossy(f).into_owned());
                    }
                    let codes: Vec<i128> = (0..n)
                        .map(|i| {
                            if is_valid(i) {
                                i128::from(dict.map[s(i)])
                            } else {
                                0
                            }
                        })
                        .collect();
                    header(out, Encoding::Dictionary);
                    let width = pack::encode_for(&codes, valid, out);
                    return Encoded {
                        encoding: Encoding::Dictionary,
                        width,
                        min,
                        max,
                        has_nan: false,
                    };
                }
                dict.closed = true;
            }
            header(out, Encoding::Heap);
            let lens128: Vec<i128> = lens.iter().map(|&l| i128::from(l)).collect();
            // Null slots hold empty strings: their length (0) is packed like any other.
            let width = pack::encode_for(&lens128, None, out);
            out.extend_from_slice(heap);
            Encoded {
                encoding: Encoding::Heap,
                width,
                min,
                max,
                has_nan: false,
            }
        }
    }
}

fn push_bitmap(out: &mut Vec<u8>, bits: &[bool]) {
    for chunk in bits.chunks(8) {
        let mut b = 0u8;
        for (j, &v) in chunk.iter().enumerate() {
            b |= u8::from(v) << j;
        }
        out.push(b);
    }
}

/// Decodes a page of `rows` rows of a column of type `logical` into an Arrow array.
/// `dictionary` is the column's dictionary. Errors are descriptions (the caller names the
/// table, column and page).
/// The FOR block of a FOR page of `rows` values without a validity bitmap whose deltas are
/// at most 32 bits wide; `None` for any other page (which [`decode`] then reads, or reports as
/// damaged).
pub(crate) fn for_block(bytes: &[u8], rows: usize) -> Option<pack::ForBlock<'_>> {
    if bytes.len() < PAGE_HEADER
        || Encoding::from_code(bytes[0]) != Some(Encoding::For)
        || bytes[1..4] != [0, 0, 0]
        || u32::from_le_bytes(bytes[4..8].try_into().ok()?) as usize != rows
    {
        return None;
    }
    let rest = &bytes[PAGE_HEADER..];
    let (block, used) = pack::parse_for(rest, rows).ok()?;
    (used == rest.len() && block.width <= 32).then_some(block)
}

pub(crate) fn decode(
    bytes: &[u8],
    rows: usize,
    logical: LogicalType,
    nullable: bool,
    dictionary: Option<&[String]>,
    codes_only: bool,
    narrow_decimals: bool,
) -> Result<(ArrayRef, Encoding), Malformed> {
    if bytes.len() < PAGE_HEADER {
        return Err(malformed!(
            "{} bytes, shorter than the page header",
            bytes.len()
        ));
    }
    let encoding = Encoding::from_code(bytes[0])
        .ok_or_else(|| malformed!("unknown encoding code {}", bytes[0]))?;
    let flags = bytes[1];
    if flags & !FLAG_VALIDITY != 0 || bytes[2..4] != [0, 0] {
        return Err(malformed!(
            "flags {flags:#04x} or reserved bytes are not valid"
        ));
    }
    let n = u32::from_le_bytes(bytes[4..8].try_into().expect("4 bytes")) as usize;
    if n != rows {
        return Err(malformed!("it holds {n} rows, the manifest says {rows}"));
    }
    let mut at = PAGE_HEADER;
    let bitmap_len = n.div_ceil(8);
    let take = |at: &mut usize, len: usize| -> Result<&[u8], Malformed> {
        let end = at
            .checked_add(len)
            .filter(|&e| e <= bytes.len())
            .ok_or_else(|| malformed!("ends early: {len} bytes needed at {at}"))?;
        let s = &bytes[*at..end];
        *at = end;
        Ok(s)
    };
    let nulls = if flags & FLAG_VALIDITY != 0 {
        if !nullable {
            return Err(malformed!("a validity bitmap in a column without nulls"));
        }
        let bits = take(&mut at, bitmap_len)?;
        let buf = BooleanBuffer::new(Buffer::from(bits.to_vec()), 0, n);
        Some(NullBuffer::new(buf))
    } else {
        None
    };
    let expected = match logical {
        LogicalType::Float64 => &[Encoding::Float][..],
        LogicalType::Boolean => &[Encoding::Bitmap][..],
        LogicalType::Utf8 => &[Encoding::Dictionary, Encoding::Heap][..],
        _ => &[Encoding::For][..],
    };
    if !expected.contains(&encoding) {
        return Err(malformed!(
            "encoding {} does not fit type {logical:?}",
            encoding.name()
        ));
    }
    let rest = &bytes[at..];
    let for_block = |rest| pack::parse_for(rest, n);
    let finish = |used: usize| -> Result<(), Malformed> {
        if used != rest.len() {
            return Err(malformed!(
                "{} unexpected bytes at the end",
                rest.len() - used
            ));
        }
        Ok(())
    };
    let array: ArrayRef = match logical {
        LogicalType::Int32 | LogicalType::Date32 | LogicalType::Int64 => {
            let (block, used) = for_block(rest)?;
            finish(used)?;
            let (lo, hi) = logical.int_range();
            let max_width = if logical == LogicalType::Int64 {
                64
            } else {
                32
            };
            if block.reference < lo || block.reference > hi || block.width > max_width {
                return Err(malformed!(
                    "reference {} or width {} does not fit {logical:?}",
                    block.reference,
                    block.width
                ));
            }
            match logical {
                LogicalType::Int64 => {
                    Arc::new(Int64Array::new(ScalarBuffer::from(block.to_i64()), nulls))
                }
                _ => {
                    // Straight to 32 bits unless the width could reach past i32 (values near
                    // its edge): then through 64 bits (the writer's values all fit).
                    let values = block
                        .to_i32()
                        .unwrap_or_else(|| block.to_i64().into_iter().map(|v| v as i32).collect());
                    if logical == LogicalType::Int32 {
                        Arc::new(Int32Array::new(ScalarBuffer::from(values), nulls))
                    } else {
                        Arc::new(Date32Array::new(ScalarBuffer::from(values), nulls))
                    }
                }
            }
        }
        LogicalType::Decimal128 { precision, scale } => {
            let (block, used) = for_block(rest)?;
            finish(used)?;
            // The i64 fast path when reference + the widest delta stays inside i64.
            let fits_i64 = block.width <= 64
                && i64::try_from(block.reference).ok().is_some_and(|r| {
                    let widest = if block.width == 64 {
                        u64::MAX
                    } else {
                        (1u64 << block.width) - 1
                    };
                    (r as i128 + widest as i128) <= i64::MAX as i128
                });
            if fits_i64 && narrow_decimals {
                // The scaled integers themselves, 8 bytes a value (the offload device's
                // columns): no 16-byte copy to narrow again.
                return Ok((
                    Arc::new(Int64Array::new(ScalarBuffer::from(block.to_i64()), nulls)),
                    encoding,
                ));
            }
            let values: Vec<i128> = if fits_i64 {
                block.to_i64().into_iter().map(i128::from).collect()
            } else {
                block.to_i128()
            };
            let array = Decimal128Array::new(ScalarBuffer::from(values), nulls)
                .with_precision_and_scale(precision, scale)
                .map_err(|e| Malformed(e.to_string()))?;
            Arc::new(array)
        }
        LogicalType::Float64 => {
            let data = take(&mut at, n * 8)?;
            if at != bytes.len() {
                return Err(malformed!(
                    "{} unexpected bytes at the end",
                    bytes.len() - at
                ));
            }
            let values: Vec<f64> = data
                .chunks_exact(8)
                .map(|c| f64::from_le_bytes(c.try_into().expect("8 bytes")))
                .collect();
            Arc::new(Float64Array::new(ScalarBuffer::from(values), nulls))
        }
        LogicalType::Boolean => {
            let data = take(&mut at, bitmap_len)?;
            if at != bytes.len() {
                return Err(malformed!(
                    "{} unexpected bytes at the end",
                    bytes.len() - at
                ));
            }
            let values = BooleanBuffer::new(Buffer::from(data.to_vec()), 0, n);
            Arc::new(BooleanArray::new(values, nulls))
        }
        LogicalType::Utf8 => match encoding {
            Encoding::Dictionary if codes_only => {
                // The codes alone (an Int32Array; nulls keep their place with code 0), for a
                // DictionaryArray over the column's dictionary: no string is touched.
                let (block, used) = for_block(rest)?;
                finish(used)?;
                let dict = dictionary.ok_or_else(|| {
                    malformed!("a dictionary page in a column without dictionary")
                })?;
                // Every code the block can hold is in the dictionary: no code to check.
                if nulls.is_none() && block.reference >= 0 {
                    if let Some(keys) = block.to_i32().filter(|k| {
                        let widest = if block.width == 0 {
                            0
                        } else {
                            (1i128 << block.width) - 1
                        };
                        block.reference + widest < dict.len() as i128
                            || crate::arch::codes_within::run(k, dict.len())
                    }) {
                        return Ok((
                            Arc::new(Int32Array::new(ScalarBuffer::from(keys), None)),
                            encoding,
                        ));
                    }
                }
                let codes = block.to_i64();
                let valid_at = |i: usize| nulls.as_ref().is_none_or(|nb| nb.is_valid(i));
                let mut keys = Vec::with_capacity(n);
                for (i, &code) in codes.iter().enumerate() {
                    if !valid_at(i) {
                        keys.push(0);
                    } else if code < 0 || code as usize >= dict.len() {
                        return Err(malformed!(
                            "code {code} is outside the dictionary of {} values",
                            dict.len()
                        ));
                    } else {
                        keys.push(code as i32);
                    }
                }
                Arc::new(Int32Array::new(ScalarBuffer::from(keys), nulls))
            }
            Encoding::Dictionary => {
                let (block, used) = for_block(rest)?;
                finish(used)?;
                let dict = dictionary.ok_or_else(|| {
                    malformed!("a dictionary page in a column without dictionary")
                })?;
                let mut offsets = Vec::with_capacity(n + 1);
                offsets.push(0i32);
                let mut heap = Vec::new();
                let mut bad = None;
                let valid_at = |i: usize| nulls.as_ref().is_none_or(|nb| nb.is_valid(i));
                block.for_each(|i, d| {
                    let code = block.reference.wrapping_add(d as i128);
                    if valid_at(i) {
                        match usize::try_from(code).ok().and_then(|c| dict.get(c)) {
                            Some(s) => heap.extend_from_slice(s.as_bytes()),
                            None => bad = Some(code),
                        }
                    }
                    offsets.push(heap.len() as i32);
                });
                if let Some(code) = bad {
                    return Err(malformed!(
                        "code {code} is outside the dictionary of {} values",
                        dict.len()
                    ));
                }
                if heap.len() > i32::MAX as usize {
                    return Err(malformed!("more than 2 GiB of text in one page"));
                }
                let array = StringArray::try_new(
                    OffsetBuffer::new(ScalarBuffer::from(offsets)),
                    Buffer::from(heap),
                    nulls,
                )
                .map_err(|e| Malformed(e.to_string()))?;
                Arc::new(array)
            }
            _ => {
                let (block, used) = for_block(rest)?;
                let heap = &rest[used..];
                let mut offsets = Vec::with_capacity(n + 1);
                offsets.push(0i64);
                let mut total: i64 = 0;
                let mut overflow = false;
                block.for_each(|_, d| {
                    let len = block.reference.wrapping_add(d as i128);
                    match i64::try_from(len).ok().filter(|l| *l >= 0) {
                        Some(l) => total = total.saturating_add(l),
                        None => overflow = true,
                    }
                    offsets.push(total);
                });
                if overflow || total != heap.len() as i64 || total > i32::MAX as i64 {
                    return Err(malformed!(
                        "string lengths add up to {total}, the heap holds {} bytes",
                        heap.len()
                    ));
                }
                let offsets: Vec<i32> = offsets.into_iter().map(|o| o as i32).collect();
                let array = StringArray::try_new(
                    OffsetBuffer::new(ScalarBuffer::from(offsets)),
                    Buffer::from(heap.to_vec()),
                    nulls,
                )
                .map_err(|e| Malformed(e.to_string()))?;
                Arc::new(array)
            }
        },
    };
    Ok((array, encoding))
}
