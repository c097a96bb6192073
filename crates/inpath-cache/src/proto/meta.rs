//! Meta commands: mg, ms, md, ma (mn is answered in `text`).
//!
//! Supported flags: mg b c f k O q s t v T; ms b c C E F I(ignored) k O q s T M N; md b C k O q
//! T(ignored); ma b C N J D T M O q t c v k. Return flags come back in the order they were sent.

use super::types::Step;
use crate::store::Store;
use crate::types::{abs_exptime, now_unix, ArithRes, DelRes, Mode, StoreReq, StoreRes, KEY_MAX};
use std::sync::Arc;

const MAX_OPAQUE: usize = 32;

fn err(out: &mut Vec<u8>, msg: &str) {
    out.extend_from_slice(b"CLIENT_ERROR ");
    out.extend_from_slice(msg.as_bytes());
    out.extend_from_slice(b"\r\n");
}

fn num<T: std::str::FromStr>(t: &[u8]) -> Option<T> {
    if t.is_empty() || !t.iter().all(|b| b.is_ascii_digit() || *b == b'-') {
        return None;
    }
    std::str::from_utf8(t).ok()?.parse().ok()
}

fn ttl_arg(t: &[u8]) -> Option<u32> {
    let v: i64 = num(t)?;
    if v < i32::MIN as i64 || v > i32::MAX as i64 {
        return None;
    }
    Some(abs_exptime(v))
}

fn ttl_left(exptime: u32) -> i64 {
    if exptime == 0 {
        -1
    } else {
        (exptime as i64 - now_unix() as i64).max(0)
    }
}

const B64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

#[cfg(test)]
pub fn b64_encode(data: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(data.len().div_ceil(3) * 4);
    for c in data.chunks(3) {
        let n = (c[0] as u32) << 16
            | (*c.get(1).unwrap_or(&0) as u32) << 8
            | *c.get(2).unwrap_or(&0) as u32;
        out.push(B64[(n >> 18) as usize & 63]);
        out.push(B64[(n >> 12) as usize & 63]);
        out.push(if c.len() > 1 {
            B64[(n >> 6) as usize & 63]
        } else {
            b'='
        });
        out.push(if c.len() > 2 {
            B64[n as usize & 63]
        } else {
            b'='
        });
    }
    out
}

pub fn b64_decode(data: &[u8]) -> Option<Vec<u8>> {
    if data.is_empty() || !data.len().is_multiple_of(4) {
        return None;
    }
    let val = |c: u8| B64.iter().position(|&x| x == c).map(|p| p as u32);
    let mut out = Vec::with_capacity(data.len() / 4 * 3);
    let nchunks = data.len() / 4;
    for (i, c) in data.chunks(4).enumerate() {
        let last = i + 1 == nchunks;
        let pad = c.iter().rev().take_while(|&&b| b == b'=').count();
        if pad > 2 || (pad > 0 && !last) {
            return None;
        }
        let mut n = 0u32;
        for &b in &c[..4 - pad] {
            n = n << 6 | val(b)?;
        }
        n <<= 6 * pad as u32;
        out.push((n >> 16) as u8);
        if pad < 2 {
            out.push((n >> 8) as u8);
        }
        if pad < 1 {
            out.push(n as u8);
        }
    }
    Some(out)
}

struct Flags<'a> {
    list: Vec<(u8, &'a [u8])>,
}

impl<'a> Flags<'a> {
    fn has(&self, f: u8) -> bool {
        self.list.iter().any(|(c, _)| *c == f)
    }
    fn arg(&self, f: u8) -> Option<&'a [u8]> {
        self.list.iter().find(|(c, _)| *c == f).map(|(_, t)| *t)
    }
}

/// Echoes the flags that are returned whatever the outcome (O, k, b).
fn echo_common(out: &mut Vec<u8>, flags: &Flags, raw_key: &[u8], binary: bool) {
    for (c, t) in &flags.list {
        match c {
            b'O' => {
                out.extend_from_slice(b" O");
                out.extend_from_slice(t);
            }
            b'k' => {
                out.extend_from_slice(b" k");
                out.extend_from_slice(raw_key);
                if binary {
                    out.extend_from_slice(b" b");
                }
            }
            _ => {}
        }
    }
}

pub async fn meta(
    store: &Arc<Store>,
    cmd: &[u8],
    toks: &[&[u8]],
    input: &[u8],
    consumed: usize,
    out: &mut Vec<u8>,
) -> Step {
    if toks.len() < 2 {
        err(out, "bad command line format");
        return Step::Done(consumed);
    }
    let raw_key = toks[1];
    let is_ms = cmd == b"ms";
    let flag_start = if is_ms { 3 } else { 2 };
    // ms: the data length comes before the flags; a bad one cannot be skipped safely.
    let vlen = if is_ms {
        match toks.get(2).and_then(|t| num::<i64>(t)) {
            Some(v) if v >= 0 => Some(v as usize),
            _ => {
                err(out, "bad data chunk");
                return Step::Done(consumed);
            }
        }
    } else {
        None
    };
    let mut flags = Flags { list: Vec::new() };
    for t in toks.iter().skip(flag_start) {
        flags.list.push((t[0], &t[1..]));
    }
    let binary = flags.has(b'b');
    let key_owned;
    let key: &[u8] = if binary {
        match b64_decode(raw_key) {
            Some(k) => {
                key_owned = k;
                &key_owned
            }
            None => {
                err(out, "error decoding key");
                return swallow_ms(vlen, consumed);
            }
        }
    } else {
        raw_key
    };
    if key.is_empty() || key.len() > KEY_MAX {
        err(out, "bad command line format");
        return swallow_ms(vlen, consumed);
    }
    if flags.arg(b'O').is_some_and(|o| o.len() > MAX_OPAQUE) {
        err(out, "opaque token too long");
        return swallow_ms(vlen, consumed);
    }
    let q = flags.has(b'q');
    match cmd {
        b"mg" => {
            for (c, _) in &flags.list {
                if !b"bcfkOqstvTuEP L".contains(c) {
                    err(out, "invalid flag");
                    return Step::Done(consumed);
                }
            }
            let touch = match flags.arg(b'T') {
                Some(t) => match ttl_arg(t) {
                    Some(e) => Some(e),
                    None => {
                        err(out, "bad token in command line format");
                        return Step::Done(consumed);
                    }
                },
                None => None,
            };
            match store.get(key, touch).await {
                None => {
                    if !q {
                        out.extend_from_slice(b"EN");
                        echo_common(out, &flags, raw_key, binary);
                        out.extend_from_slice(b"\r\n");
                    }
                }
                Some(it) => {
                    let v = flags.has(b'v');
                    if v {
                        out.extend_from_slice(b"VA ");
                        out.extend_from_slice(it.value.len().to_string().as_bytes());
                    } else {
                        out.extend_from_slice(b"HD");
                    }
                    for (c, t) in &flags.list {
                        match c {
                            b'c' => out.extend_from_slice(format!(" c{}", it.cas).as_bytes()),
                            b'f' => out.extend_from_slice(format!(" f{}", it.flags).as_bytes()),
                            b's' => {
                                out.extend_from_slice(format!(" s{}", it.value.len()).as_bytes())
                            }
                            b't' => out.extend_from_slice(
                                format!(" t{}", ttl_left(it.exptime)).as_bytes(),
                            ),
                            b'O' => {
                                out.extend_from_slice(b" O");
                                out.extend_from_slice(t);
                            }
                            b'k' => {
                                out.extend_from_slice(b" k");
                                out.extend_from_slice(raw_key);
                                if binary {
                                    out.extend_from_slice(b" b");
                                }
                            }
                            _ => {}
                        }
                    }
                    out.extend_from_slice(b"\r\n");
                    if v {
                        out.extend_from_slice(&it.value);
                        out.extend_from_slice(b"\r\n");
                    }
                }
            }
            Step::Done(consumed)
        }
        b"ms" => {
            let vlen = vlen.unwrap_or(0);
            if vlen > store.item_max() {
                out.extend_from_slice(b"SERVER_ERROR object too large for cache\r\n");
                return Step::Swallow(consumed, vlen + 2);
            }
            if input.len() < consumed + vlen + 2 {
                return Step::NeedMore;
            }
            let total = consumed + vlen + 2;
            if &input[consumed + vlen..total] != b"\r\n" {
                err(out, "bad data chunk");
                return Step::Done(total);
            }
            let data = &input[consumed..consumed + vlen];
            let mut mode = Mode::Set;
            let mut req_flags = 0u32;
            let mut exptime = 0u32;
            let mut cas = None;
            let mut new_cas = None;
            let mut vivify = None;
            for (c, t) in &flags.list {
                let ok = match c {
                    b'F' => num::<u32>(t).map(|v| req_flags = v).is_some(),
                    b'T' => ttl_arg(t).map(|v| exptime = v).is_some(),
                    b'C' => num::<u64>(t).map(|v| cas = Some(v)).is_some(),
                    b'E' => num::<u64>(t).map(|v| new_cas = Some(v)).is_some(),
                    b'N' => ttl_arg(t).map(|v| vivify = Some(v)).is_some(),
                    b'M' => {
                        mode = match t.first().map(u8::to_ascii_uppercase) {
                            Some(b'E') => Mode::Add,
                            Some(b'A') => Mode::Append,
                            Some(b'P') => Mode::Prepend,
                            Some(b'R') => Mode::Replace,
                            Some(b'S') => Mode::Set,
                            _ => {
                                err(out, "invalid mode for ms STORE");
                                return Step::Done(total);
                            }
                        };
                        true
                    }
                    b'b' | b'c' | b'k' | b'O' | b'q' | b's' | b'I' | b'P' | b'L' => true,
                    _ => {
                        err(out, "invalid flag");
                        return Step::Done(total);
                    }
                };
                if !ok {
                    err(out, "bad token in command line format");
                    return Step::Done(total);
                }
            }
            let r = store
                .store(
                    key,
                    StoreReq {
                        mode,
                        flags: req_flags,
                        exptime,
                        value: data,
                        cas,
                        new_cas,
                        vivify,
                    },
                )
                .await;
            let (code, stored): (&[u8], _) = match r {
                StoreRes::Stored { cas, size } => (b"HD", Some((cas, size))),
                StoreRes::NotStored => (b"NS", None),
                StoreRes::Exists => (b"EX", None),
                StoreRes::NotFound => (b"NF", None),
                StoreRes::TooLarge => {
                    out.extend_from_slice(b"SERVER_ERROR object too large for cache\r\n");
                    return Step::Done(total);
                }
                StoreRes::OutOfMemory => {
                    out.extend_from_slice(b"SERVER_ERROR out of memory storing object\r\n");
                    return Step::Done(total);
                }
            };
            if q && stored.is_some() {
                return Step::Done(total);
            }
            out.extend_from_slice(code);
            for (c, t) in &flags.list {
                match c {
                    b'c' => {
                        out.extend_from_slice(format!(" c{}", stored.map_or(0, |s| s.0)).as_bytes())
                    }
                    b's' => {
                        if let Some((_, size)) = stored {
                            out.extend_from_slice(format!(" s{size}").as_bytes());
                        }
                    }
                    b'O' => {
                        out.extend_from_slice(b" O");
                        out.extend_from_slice(t);
                    }
                    b'k' => {
                        out.extend_from_slice(b" k");
                        out.extend_from_slice(raw_key);
                        if binary {
                            out.extend_from_slice(b" b");
                        }
                    }
                    _ => {}
                }
            }
            out.extend_from_slice(b"\r\n");
            Step::Done(total)
        }
        b"md" => {
            let mut cas = None;
            for (c, t) in &flags.list {
                match c {
                    b'C' => match num::<u64>(t) {
                        Some(v) => cas = Some(v),
                        None => {
                            err(out, "bad token in command line format");
                            return Step::Done(consumed);
                        }
                    },
                    b'b' | b'k' | b'O' | b'q' | b'T' | b'P' | b'L' => {}
                    _ => {
                        err(out, "invalid flag");
                        return Step::Done(consumed);
                    }
                }
            }
            let r = store.delete(key, cas).await;
            if q && r == DelRes::Deleted {
                return Step::Done(consumed);
            }
            out.extend_from_slice(match r {
                DelRes::Deleted => b"HD",
                DelRes::NotFound => b"NF",
                DelRes::Exists => b"EX",
            });
            echo_common(out, &flags, raw_key, binary);
            out.extend_from_slice(b"\r\n");
            Step::Done(consumed)
        }
        _ => {
            // ma
            let mut incr = true;
            let mut delta = 1u64;
            let mut cas = None;
            let mut vivify_ttl = None;
            let mut initial = 0u64;
            let mut ttl = None;
            for (c, t) in &flags.list {
                let ok = match c {
                    b'D' => num::<u64>(t).map(|v| delta = v).is_some(),
                    b'J' => num::<u64>(t).map(|v| initial = v).is_some(),
                    b'N' => ttl_arg(t).map(|v| vivify_ttl = Some(v)).is_some(),
                    b'T' => ttl_arg(t).map(|v| ttl = Some(v)).is_some(),
                    b'C' => num::<u64>(t).map(|v| cas = Some(v)).is_some(),
                    b'M' => {
                        incr = match t.first() {
                            Some(b'I' | b'i' | b'+') => true,
                            Some(b'D' | b'd' | b'-') => false,
                            _ => {
                                err(out, "invalid mode for ma M token");
                                return Step::Done(consumed);
                            }
                        };
                        true
                    }
                    b'b' | b'k' | b'O' | b'q' | b't' | b'c' | b'v' | b'P' | b'L' => true,
                    _ => {
                        err(out, "invalid flag");
                        return Step::Done(consumed);
                    }
                };
                if !ok {
                    err(out, "invalid numeric delta argument");
                    return Step::Done(consumed);
                }
            }
            let r = store
                .arith(key, incr, delta, cas, vivify_ttl.map(|e| (initial, e)), ttl)
                .await;
            match r {
                ArithRes::Value {
                    value,
                    cas,
                    exptime,
                } => {
                    let v = flags.has(b'v');
                    if q && !v {
                        return Step::Done(consumed);
                    }
                    let text = value.to_string();
                    if v {
                        out.extend_from_slice(format!("VA {}", text.len()).as_bytes());
                    } else {
                        out.extend_from_slice(b"HD");
                    }
                    for (c, t) in &flags.list {
                        match c {
                            b'c' => out.extend_from_slice(format!(" c{cas}").as_bytes()),
                            b't' => {
                                out.extend_from_slice(format!(" t{}", ttl_left(exptime)).as_bytes())
                            }
                            b'O' => {
                                out.extend_from_slice(b" O");
                                out.extend_from_slice(t);
                            }
                            b'k' => {
                                out.extend_from_slice(b" k");
                                out.extend_from_slice(raw_key);
                                if binary {
                                    out.extend_from_slice(b" b");
                                }
                            }
                            _ => {}
                        }
                    }
                    out.extend_from_slice(b"\r\n");
                    if v {
                        out.extend_from_slice(text.as_bytes());
                        out.extend_from_slice(b"\r\n");
                    }
                }
                ArithRes::OutOfMemory => {
                    out.extend_from_slice(b"SERVER_ERROR out of memory\r\n");
                }
                ArithRes::NonNumeric => {
                    err(out, "cannot increment or decrement non-numeric value");
                }
                other => {
                    out.extend_from_slice(match other {
                        ArithRes::Exists => b"EX",
                        _ => b"NF",
                    });
                    echo_common(out, &flags, raw_key, binary);
                    out.extend_from_slice(b"\r\n");
                }
            }
            Step::Done(consumed)
        }
    }
}

/// After an error on an ms line, its data block still has to be skipped.
fn swallow_ms(vlen: Option<usize>, consumed: usize) -> Step {
    match vlen {
        Some(v) => Step::Swallow(consumed, v + 2),
        None => Step::Done(consumed),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_round_trip() {
        for data in [&b""[..], b"a", b"ab", b"abc", b"\x00\xff\x10binary"] {
            let e = b64_encode(data);
            if data.is_empty() {
                assert!(b64_decode(&e).is_none());
            } else {
                assert_eq!(b64_decode(&e).as_deref(), Some(data));
            }
        }
        assert_eq!(b64_encode(b"foo"), b"Zm9v");
        assert!(b64_decode(b"Zm9").is_none());
        assert!(b64_decode(b"Z=9v").is_none());
        assert!(b64_decode(b"Zm9v!!!!").is_none());
    }
}
