//! Meta commands: mg, ms, md, ma and me (mn is answered in `text`).
//!
//! Every flag of memcached 1.6's meta commands: mg b c f h k l O q s t u v E N R T (returning
//! W, X, Z); ms b c C E F I k M N O q s T; md b C E F I k O q T x; ma b c C D E J k M N O q t T v.
//! Return flags come back in the order they were sent. A flag meant for another meta command
//! is taken without effect, as memcached's shared flag parser does.

use super::types::Step;
use crate::store::Store;
use crate::types::{
    abs_exptime, now_unix, ArithRes, DelRes, MetaDelete, MetaGet, Mode, StoreReq, StoreRes, KEY_MAX,
};
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

/// The flags memcached 1.6's meta parser knows for every meta command (a flag meant for
/// another command is taken and has no effect), plus `E` (new cas) and `x` (md: empty the value)
/// of later memcached versions.
const KNOWN_FLAGS: &[u8] = b"bNTRlOPLkstcfvhuqFCMJDIEx";

/// Most tokens on a meta command line (memcached's MFLAG_MAX_OPT_LENGTH, less its end token).
const MAX_TOKENS: usize = 19;

/// The meta flags of one request, checked and their arguments parsed.
struct Parsed<'a> {
    flags: Flags<'a>,
    vivify: Option<u32>,
    touch: Option<u32>,
    recache: Option<u32>,
    client_flags: u32,
    cas: Option<u64>,
    new_cas: Option<u64>,
    mode: Option<u8>,
    delta: u64,
    initial: u64,
}

/// Checks the flag tokens as memcached does: an unknown or repeated flag, or a bad argument, is
/// the error memcached names (the last one found, as memcached's parser keeps going).
fn preparse<'a>(tokens: &[&'a [u8]]) -> Result<Parsed<'a>, &'static str> {
    let mut p = Parsed {
        flags: Flags { list: Vec::new() },
        vivify: None,
        touch: None,
        recache: None,
        client_flags: 0,
        cas: None,
        new_cas: None,
        mode: None,
        delta: 1,
        initial: 0,
    };
    let mut seen = [false; 128];
    let mut error = None;
    const BAD_TOKEN: &str = "bad token in command line format";
    for t in tokens {
        let (c, arg) = (t[0], &t[1..]);
        if c >= 127 || seen[c as usize] {
            return Err("duplicate flag");
        }
        seen[c as usize] = true;
        if !KNOWN_FLAGS.contains(&c) {
            return Err("invalid flag");
        }
        let ok = match c {
            b'N' => ttl_arg(arg).map(|v| p.vivify = Some(v)).ok_or(BAD_TOKEN),
            b'T' => ttl_arg(arg).map(|v| p.touch = Some(v)).ok_or(BAD_TOKEN),
            b'R' => ttl_arg(arg).map(|v| p.recache = Some(v)).ok_or(BAD_TOKEN),
            b'F' => num::<u32>(arg)
                .map(|v| p.client_flags = v)
                .ok_or("bad command line format"),
            b'C' => num::<u64>(arg).map(|v| p.cas = Some(v)).ok_or(BAD_TOKEN),
            b'E' => num::<u64>(arg)
                .map(|v| p.new_cas = Some(v))
                .ok_or(BAD_TOKEN),
            b'M' if arg.len() == 1 => {
                p.mode = Some(arg[0]);
                Ok(())
            }
            b'M' => Err("incorrect length for M token"),
            b'J' => num::<u64>(arg)
                .map(|v| p.initial = v)
                .ok_or("invalid numeric initial value"),
            b'D' => num::<u64>(arg)
                .map(|v| p.delta = v)
                .ok_or("invalid numeric delta value"),
            _ => Ok(()),
        };
        if let Err(e) = ok {
            error = Some(e);
        }
        p.flags.list.push((c, arg));
    }
    match error {
        Some(e) => Err(e),
        None => Ok(p),
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

fn push(out: &mut Vec<u8>, s: std::fmt::Arguments) {
    use std::io::Write;
    let _ = out.write_fmt(s);
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
        out.extend_from_slice(b"ERROR\r\n");
        return Step::Done(consumed);
    }
    let raw_key = toks[1];
    let is_ms = cmd == b"ms";
    if raw_key.len() > KEY_MAX {
        err(out, "bad command line format");
        return Step::Done(consumed);
    }
    if toks.len() > MAX_TOKENS {
        err(
            out,
            if cmd == b"mg" {
                "options flags are too long"
            } else {
                "options flags too long"
            },
        );
        return Step::Done(consumed);
    }
    // ms: the data length comes before the flags; without a good one the data cannot be
    // skipped, and memcached does not try.
    let vlen = if is_ms {
        match toks.get(2).and_then(|t| num::<i64>(t)) {
            Some(v) if (0..i32::MAX as i64 - 2).contains(&v) => Some(v as usize),
            _ => {
                err(out, "bad command line format");
                return Step::Done(consumed);
            }
        }
    } else {
        None
    };
    let flag_start = if is_ms { 3 } else { 2 };
    let parsed = match preparse(&toks[flag_start..]) {
        Ok(p) => p,
        Err(e) => {
            // md and ma say this whatever the flag's problem (memcached 1.6).
            let e = if cmd == b"md" || cmd == b"ma" {
                "invalid or duplicate flag"
            } else {
                e
            };
            err(out, e);
            return swallow_ms(vlen, consumed);
        }
    };
    let flags = &parsed.flags;
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
            let req = MetaGet {
                touch: parsed.touch,
                vivify: parsed.vivify,
                recache: parsed.recache,
                no_bump: flags.has(b'u'),
                new_cas: parsed.new_cas,
            };
            match store.meta_get(key, req).await {
                None => {
                    if !q {
                        out.extend_from_slice(b"EN");
                        echo_common(out, flags, raw_key, binary);
                        out.extend_from_slice(b"\r\n");
                    }
                }
                Some(m) => {
                    let it = &m.item;
                    let v = flags.has(b'v');
                    if v {
                        push(out, format_args!("VA {}", it.value.len()));
                    } else {
                        out.extend_from_slice(b"HD");
                    }
                    for (c, t) in &flags.list {
                        match c {
                            b'c' => push(out, format_args!(" c{}", it.cas)),
                            b'f' => push(out, format_args!(" f{}", it.flags)),
                            b's' => push(out, format_args!(" s{}", it.value.len())),
                            b't' => push(out, format_args!(" t{}", ttl_left(it.exptime))),
                            b'l' => push(out, format_args!(" l{}", m.idle)),
                            b'h' => push(out, format_args!(" h{}", u8::from(m.fetched))),
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
                    // As memcached: Z (another client holds the right), X (stale), W (won).
                    if m.token_sent {
                        out.extend_from_slice(b" Z");
                    }
                    if m.stale {
                        out.extend_from_slice(b" X");
                    }
                    if m.won {
                        out.extend_from_slice(b" W");
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
            let mode = match parsed.mode.map(|m| m.to_ascii_uppercase()) {
                None | Some(b'S') => Mode::Set,
                Some(b'E') => Mode::Add,
                Some(b'A') => Mode::Append,
                Some(b'P') => Mode::Prepend,
                Some(b'R') => Mode::Replace,
                Some(_) => {
                    err(out, "invalid mode for ms M token");
                    return Step::Done(total);
                }
            };
            let r = store
                .store(
                    key,
                    StoreReq {
                        mode,
                        flags: parsed.client_flags,
                        exptime: parsed.touch.unwrap_or(0),
                        value: data,
                        cas: parsed.cas,
                        new_cas: parsed.new_cas,
                        vivify: parsed.vivify,
                        invalidate: flags.has(b'I'),
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
                    b'c' => push(out, format_args!(" c{}", stored.map_or(0, |s| s.0))),
                    b's' => {
                        if let Some((_, size)) = stored {
                            push(out, format_args!(" s{size}"));
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
            let req = MetaDelete {
                cas: parsed.cas,
                invalidate: flags.has(b'I'),
                new_ttl: parsed.touch,
                remove_value: flags.has(b'x'),
                flags: parsed.client_flags,
                new_cas: parsed.new_cas,
            };
            let r = store.meta_delete(key, req).await;
            if q && r == DelRes::Deleted {
                return Step::Done(consumed);
            }
            out.extend_from_slice(match r {
                DelRes::Deleted => b"HD",
                DelRes::NotFound => b"NF",
                DelRes::Exists => b"EX",
            });
            echo_common(out, flags, raw_key, binary);
            out.extend_from_slice(b"\r\n");
            Step::Done(consumed)
        }
        _ => {
            // ma
            let incr = match parsed.mode {
                None | Some(b'I' | b'i' | b'+') => true,
                Some(b'D' | b'd' | b'-') => false,
                Some(_) => {
                    err(out, "invalid mode for ma M token");
                    return Step::Done(consumed);
                }
            };
            let r = store
                .arith_with(
                    key,
                    incr,
                    parsed.delta,
                    parsed.cas,
                    parsed.vivify.map(|e| (parsed.initial, e)),
                    parsed.touch,
                    parsed.new_cas,
                )
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
                        push(out, format_args!("VA {}", text.len()));
                    } else {
                        out.extend_from_slice(b"HD");
                    }
                    for (c, t) in &flags.list {
                        match c {
                            b'c' => push(out, format_args!(" c{cas}")),
                            b't' => push(out, format_args!(" t{}", ttl_left(exptime))),
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
                    echo_common(out, flags, raw_key, binary);
                    out.extend_from_slice(b"\r\n");
                }
            }
            Step::Done(consumed)
        }
    }
}

/// `me <key> [b]`: memcached's meta debug line for an item, or `EN`.
pub async fn debug(store: &Arc<Store>, toks: &[&[u8]], out: &mut Vec<u8>) {
    if toks.len() < 2 || toks[1].len() > KEY_MAX {
        err(out, "bad command line format");
        return;
    }
    let binary = toks.len() >= 3 && toks[2] == b"b";
    let key = if binary {
        match b64_decode(toks[1]) {
            Some(k) => k,
            None => {
                err(out, "bad command line format");
                return;
            }
        }
    } else {
        toks[1].to_vec()
    };
    match store.debug_item(&key).await {
        None => out.extend_from_slice(b"EN\r\n"),
        Some(d) => {
            out.extend_from_slice(b"ME ");
            out.extend_from_slice(toks[1]);
            // memcached prints `exp` as now minus the expiry: negative while the item lives.
            let exp = if d.exptime == 0 {
                -1
            } else {
                now_unix() as i64 - d.exptime as i64
            };
            push(
                out,
                format_args!(
                    " exp={exp} la={} cas={} fetch={} cls=1 size={}\r\n",
                    d.idle,
                    d.cas,
                    if d.fetched { "yes" } else { "no" },
                    d.size
                ),
            );
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
