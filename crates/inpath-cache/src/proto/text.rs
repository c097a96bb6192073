//! The memcached text protocol over a connection's byte buffer: the classic commands here, the
//! meta commands (mg, ms, md, ma) handed to `meta`.
//!
//! `step` looks at the unread input and either asks for more bytes or consumes one request and
//! appends its reply to the output buffer. Replies follow memcached's doc/protocol.txt, error
//! strings included.

use super::meta;
use super::types::{Step, MAX_LINE, OUT_CHUNK};
use crate::store::Store;
use crate::types::{
    abs_exptime, ArithRes, DelRes, ItemOut, Mode, Resident, StoreReq, StoreRes, KEY_MAX,
};
use std::sync::Arc;

const BAD_FORMAT: &[u8] = b"CLIENT_ERROR bad command line format\r\n";

fn tokens(line: &[u8]) -> Vec<&[u8]> {
    line.split(|&b| b == b' ')
        .filter(|t| !t.is_empty())
        .collect()
}

fn parse_u32(t: &[u8]) -> Option<u32> {
    if t.is_empty() || t.len() > 10 || !t.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(t).ok()?.parse().ok()
}

fn parse_u64(t: &[u8]) -> Option<u64> {
    if t.is_empty() || t.len() > 20 || !t.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(t).ok()?.parse().ok()
}

fn parse_i64(t: &[u8]) -> Option<i64> {
    let (neg, digits) = match t.first() {
        Some(b'-') => (true, &t[1..]),
        _ => (false, t),
    };
    if digits.is_empty() || digits.len() > 18 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let v: i64 = std::str::from_utf8(digits).ok()?.parse().ok()?;
    Some(if neg { -v } else { v })
}

/// memcached exptime: a 32-bit signed integer.
fn parse_exptime(t: &[u8]) -> Option<u32> {
    let v = parse_i64(t)?;
    if v < i32::MIN as i64 || v > i32::MAX as i64 {
        return None;
    }
    Some(abs_exptime(v))
}

fn push_num(out: &mut Vec<u8>, n: impl std::fmt::Display) {
    use std::io::Write;
    let _ = write!(out, "{n}");
}

fn value_line(out: &mut Vec<u8>, key: &[u8], it: &ItemOut, with_cas: bool) {
    value_reply(out, key, it.flags, with_cas.then_some(it.cas), &it.value);
}

/// `VALUE <key> <flags> <bytes> [<cas>]\r\n<data>\r\n`.
fn value_reply(out: &mut Vec<u8>, key: &[u8], flags: u32, cas: Option<u64>, value: &[u8]) {
    let mut num = itoa::Buffer::new();
    out.reserve(key.len() + value.len() + 48);
    out.extend_from_slice(b"VALUE ");
    out.extend_from_slice(key);
    out.push(b' ');
    out.extend_from_slice(num.format(flags).as_bytes());
    out.push(b' ');
    out.extend_from_slice(num.format(value.len()).as_bytes());
    if let Some(cas) = cas {
        out.push(b' ');
        out.extend_from_slice(num.format(cas).as_bytes());
    }
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

/// Answers `keys` of a get/gets/gat/gats (`touch`: gat's new expiry) until the output has
/// grown by [`OUT_CHUNK`]; returns the index of the first key left, if any.
async fn multiget(
    store: &Arc<Store>,
    cmd: &[u8],
    touch: Option<u32>,
    keys: &[&[u8]],
    out: &mut Vec<u8>,
) -> Option<usize> {
    let with_cas = cmd == b"gets" || cmd == b"gats";
    let mark = out.len();
    let mut i = 0;
    // The key a prefetch of flash values last started at: if it is still on flash after it,
    // it takes the one-key path (a record that changed, or in the open log chunk).
    let mut prefetched = None;
    while i < keys.len() {
        if i > 0 && out.len() - mark >= OUT_CHUNK {
            return Some(i);
        }
        if touch.is_none() {
            // get/gets: the keys whose values are in DRAM in one pass under the store's lock,
            // written straight from the store into the reply.
            let from = i;
            let r = store.get_resident(&keys[from..], |j, flags, cas, value| {
                value_reply(out, keys[from + j], flags, with_cas.then_some(cas), value);
                out.len() - mark < OUT_CHUNK
            });
            match r {
                Resident::Done => return None,
                Resident::Paused(j) => {
                    i = from + j;
                    if i < keys.len() {
                        return Some(i);
                    }
                    return None;
                }
                // This key's value is on flash: read it and the next flash values in one go,
                // then answer on from DRAM.
                Resident::Flash(j) => {
                    i = from + j;
                    if prefetched != Some(i) {
                        prefetched = Some(i);
                        store.prefetch(&keys[i..]).await;
                        continue;
                    }
                }
            }
        }
        if let Some(it) = store.get(keys[i], touch).await {
            value_line(out, keys[i], &it, with_cas);
        }
        i += 1;
    }
    None
}

/// The step that hands back the rest of a multiget: consumed up to `next_key` (a token of
/// `input`), to continue after the command and its arguments `head`.
fn resume_at(input: &[u8], head: &[&[u8]], next_key: &[u8]) -> Step {
    let consumed = offset_in(input, next_key);
    let mut prefix = Vec::with_capacity(32);
    for t in head {
        prefix.extend_from_slice(t);
        prefix.push(b' ');
    }
    Step::Resume { consumed, prefix }
}

/// Where the token `t` (a subslice of `input`) starts in `input`.
fn offset_in(input: &[u8], t: &[u8]) -> usize {
    (t.as_ptr() as usize).saturating_sub(input.as_ptr() as usize)
}

/// A get/gets/gat/gats line longer than [`MAX_LINE`] with no end yet: answers its complete
/// keys (those followed by a space) and hands the rest back. `None` when it is not a multiget
/// or holds no complete key (then the line is refused as too long).
async fn long_multiget(store: &Arc<Store>, input: &[u8], out: &mut Vec<u8>) -> Option<Step> {
    let last_space = memchr::memrchr(b' ', input)?;
    let toks = tokens(&input[..last_space]);
    let cmd = *toks.first()?;
    let nargs = match cmd {
        b"get" | b"gets" => 1,
        b"gat" | b"gats" => 2,
        _ => return None,
    };
    if toks.len() <= nargs {
        return None;
    }
    let touch = if nargs == 2 {
        Some(parse_exptime(toks[1])?)
    } else {
        None
    };
    let keys = &toks[nargs..];
    // The last complete key is kept for the rest of the line, so the rest always holds a key
    // (and a line whose only key is the unfinished one is refused: it is over 63 KiB long).
    if keys.len() < 2 {
        return None;
    }
    if keys.iter().any(|k| k.len() > KEY_MAX) {
        // The rest of the line cannot be skipped reliably: say why and close.
        out.extend_from_slice(BAD_FORMAT);
        return Some(Step::Close);
    }
    let now = &keys[..keys.len() - 1];
    let next = multiget(store, cmd, touch, now, out)
        .await
        .unwrap_or(now.len());
    Some(resume_at(input, &toks[..nargs], keys[next]))
}

/// Processes one request from `input` (unread bytes), appending the reply to `out`.
pub async fn step(store: &Arc<Store>, input: &[u8], out: &mut Vec<u8>) -> Step {
    let Some(nl) = memchr::memchr(b'\n', input) else {
        if input.len() > MAX_LINE {
            // A multiget of any length is answered as it arrives, its complete keys first.
            if let Some(step) = long_multiget(store, input, out).await {
                return step;
            }
            out.extend_from_slice(b"CLIENT_ERROR line too long\r\n");
            return Step::Close;
        }
        return Step::NeedMore;
    };
    let consumed = nl + 1;
    let line = &input[..nl];
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let toks = tokens(line);
    let Some(&cmd) = toks.first() else {
        out.extend_from_slice(b"ERROR\r\n");
        return Step::Done(consumed);
    };
    // memcached's noreply hides every reply of a well-formed request, errors included.
    let noreply_at = match cmd {
        b"set" | b"add" | b"replace" | b"append" | b"prepend" => Some(6),
        b"cas" => Some(7),
        b"incr" | b"decr" | b"touch" => Some(4),
        b"delete" => Some(toks.len().clamp(3, 4)),
        _ => None,
    };
    let mark = out.len();
    let step = command(store, cmd, &toks, input, consumed, out).await;
    if noreply_at == Some(toks.len()) && toks.last() == Some(&&b"noreply"[..]) {
        out.truncate(mark);
    }
    step
}

async fn command(
    store: &Arc<Store>,
    cmd: &[u8],
    toks: &[&[u8]],
    input: &[u8],
    consumed: usize,
    out: &mut Vec<u8>,
) -> Step {
    match cmd {
        b"get" | b"gets" | b"gat" | b"gats" => {
            let nargs = if cmd.starts_with(b"gat") { 2 } else { 1 };
            if toks.len() <= nargs {
                out.extend_from_slice(b"ERROR\r\n");
                return Step::Done(consumed);
            }
            let touch = if nargs == 2 {
                match parse_exptime(toks[1]) {
                    Some(exp) => Some(exp),
                    None => {
                        out.extend_from_slice(b"CLIENT_ERROR invalid exptime argument\r\n");
                        return Step::Done(consumed);
                    }
                }
            } else {
                None
            };
            let keys = &toks[nargs..];
            if keys.iter().any(|k| k.len() > KEY_MAX) {
                out.extend_from_slice(BAD_FORMAT);
                return Step::Done(consumed);
            }
            match multiget(store, cmd, touch, keys, out).await {
                None => {
                    out.extend_from_slice(b"END\r\n");
                    Step::Done(consumed)
                }
                // The output is full: the rest of the keys in a later step.
                Some(next) => resume_at(input, &toks[..nargs], keys[next]),
            }
        }
        b"set" | b"add" | b"replace" | b"append" | b"prepend" | b"cas" => {
            storage(store, cmd, toks, input, consumed, out).await
        }
        b"delete" => {
            let noreply = toks.last() == Some(&&b"noreply"[..]);
            let valid = match toks.len() {
                2 => true,
                3 => toks[2] == b"0" || noreply,
                4 => toks[2] == b"0" && noreply,
                _ => false,
            };
            if !valid {
                out.extend_from_slice(
                    b"CLIENT_ERROR bad command line format.  Usage: delete <key> [noreply]\r\n",
                );
            } else if toks[1].len() > KEY_MAX {
                out.extend_from_slice(BAD_FORMAT);
            } else {
                let r = store.delete(toks[1], None).await;
                if !noreply {
                    out.extend_from_slice(match r {
                        DelRes::Deleted => b"DELETED\r\n",
                        _ => b"NOT_FOUND\r\n",
                    });
                }
            }
            Step::Done(consumed)
        }
        b"incr" | b"decr" => {
            if toks.len() != 3 && toks.len() != 4 {
                out.extend_from_slice(b"ERROR\r\n");
                return Step::Done(consumed);
            }
            let noreply = toks.len() == 4 && toks[3] == b"noreply";
            if toks[1].len() > KEY_MAX {
                out.extend_from_slice(BAD_FORMAT);
                return Step::Done(consumed);
            }
            let Some(delta) = parse_u64(toks[2]) else {
                out.extend_from_slice(b"CLIENT_ERROR invalid numeric delta argument\r\n");
                return Step::Done(consumed);
            };
            let r = store
                .arith(toks[1], cmd == b"incr", delta, None, None, None)
                .await;
            match r {
                ArithRes::Value { value, .. } => {
                    if !noreply {
                        push_num(out, value);
                        out.extend_from_slice(b"\r\n");
                    }
                }
                ArithRes::NonNumeric => out.extend_from_slice(
                    b"CLIENT_ERROR cannot increment or decrement non-numeric value\r\n",
                ),
                ArithRes::OutOfMemory => out.extend_from_slice(b"SERVER_ERROR out of memory\r\n"),
                _ => {
                    if !noreply {
                        out.extend_from_slice(b"NOT_FOUND\r\n");
                    }
                }
            }
            Step::Done(consumed)
        }
        b"touch" => {
            if toks.len() != 3 && toks.len() != 4 {
                out.extend_from_slice(b"ERROR\r\n");
                return Step::Done(consumed);
            }
            let noreply = toks.len() == 4 && toks[3] == b"noreply";
            if toks[1].len() > KEY_MAX {
                out.extend_from_slice(BAD_FORMAT);
                return Step::Done(consumed);
            }
            let Some(exp) = parse_exptime(toks[2]) else {
                out.extend_from_slice(b"CLIENT_ERROR invalid exptime argument\r\n");
                return Step::Done(consumed);
            };
            let hit = store.touch(toks[1], exp).await;
            if !noreply {
                out.extend_from_slice(if hit {
                    b"TOUCHED\r\n"
                } else {
                    b"NOT_FOUND\r\n"
                });
            }
            Step::Done(consumed)
        }
        b"flush_all" if !store.flush_all_enabled() => {
            // memcached -F: refused even with noreply, as memcached does.
            out.extend_from_slice(b"CLIENT_ERROR flush_all not allowed\r\n");
            Step::Done(consumed)
        }
        b"flush_all" => {
            let noreply = toks.last() == Some(&&b"noreply"[..]);
            let args = &toks[1..toks.len() - usize::from(noreply)];
            let delay = match args {
                [] => Some(0),
                [d] => parse_i64(d).filter(|&d| (0..=i32::MAX as i64).contains(&d)),
                _ => None,
            };
            match delay {
                None => out.extend_from_slice(b"CLIENT_ERROR invalid exptime argument\r\n"),
                Some(d) => {
                    store.flush_all_after(d as u64);
                    if !noreply {
                        out.extend_from_slice(b"OK\r\n");
                    }
                }
            }
            Step::Done(consumed)
        }
        b"version" => {
            out.extend_from_slice(b"VERSION ");
            out.extend_from_slice(crate::types::VERSION.as_bytes());
            out.extend_from_slice(b"\r\n");
            Step::Done(consumed)
        }
        b"verbosity" => {
            let noreply = toks.last() == Some(&&b"noreply"[..]);
            if toks.len() < 2 || toks.len() > 3 {
                out.extend_from_slice(b"ERROR\r\n");
            } else {
                // memcached 1.6.18 takes a whole number only (`verbosity 1x`: an error; its
                // t/strtol-testing.t), and noreply hides the error too.
                let reply: &[u8] = match parse_u64(toks[1]) {
                    Some(level) => {
                        store.set_verbosity(level);
                        b"OK\r\n"
                    }
                    None => BAD_FORMAT,
                };
                if !noreply {
                    out.extend_from_slice(reply);
                }
            }
            Step::Done(consumed)
        }
        b"quit" => Step::Close,
        b"shutdown" => {
            // memcached answers this unless started with -A (enable_shutdown); with it, `shutdown`
            // or `shutdown graceful` closes the connection and stops the server (final
            // checkpoint), with no reply.
            if !store.settings().shutdown_command {
                out.extend_from_slice(b"ERROR: shutdown not enabled\r\n");
                return Step::Done(consumed);
            }
            match toks {
                [_] | [_, b"graceful"] => {
                    store.request_shutdown();
                    Step::Close
                }
                _ => {
                    out.extend_from_slice(b"CLIENT_ERROR invalid shutdown mode\r\n");
                    Step::Done(consumed)
                }
            }
        }
        b"cache_memlimit" => {
            // `cache_memlimit MEGABYTES [noreply]`: the DRAM budget, changed while serving.
            let noreply = toks.len() == 3 && toks[2] == b"noreply";
            let megabytes = if toks.len() == 2 || noreply {
                parse_u64(toks[1])
            } else {
                None
            };
            let reply = match megabytes {
                None => "ERROR\r\n".to_string(),
                Some(mb) => match store.set_memory_limit(mb.saturating_mul(1 << 20)) {
                    Ok(()) => "OK\r\n".to_string(),
                    Err(e) => format!("MEMLIMIT_TOO_SMALL {e}\r\n"),
                },
            };
            if !noreply {
                out.extend_from_slice(reply.as_bytes());
            }
            Step::Done(consumed)
        }
        b"stats" => {
            stats(store, toks, out);
            Step::Done(consumed)
        }
        b"mn" => {
            out.extend_from_slice(b"MN\r\n");
            Step::Done(consumed)
        }
        b"mg" | b"ms" | b"md" | b"ma" => meta::meta(store, cmd, toks, input, consumed, out).await,
        b"me" => {
            meta::debug(store, toks, out).await;
            Step::Done(consumed)
        }
        // An unknown command whose last word starts with `HTTP/` is someone speaking HTTP to
        // the port (`GET / HTTP/1.0`): memcached hangs up without a reply.
        _ if toks.last().is_some_and(|t| t.starts_with(b"HTTP/")) => Step::Close,
        _ => {
            out.extend_from_slice(b"ERROR\r\n");
            Step::Done(consumed)
        }
    }
}

async fn storage(
    store: &Arc<Store>,
    cmd: &[u8],
    toks: &[&[u8]],
    input: &[u8],
    consumed: usize,
    out: &mut Vec<u8>,
) -> Step {
    let is_cas = cmd == b"cas";
    let base = if is_cas { 6 } else { 5 };
    if toks.len() != base && toks.len() != base + 1 {
        out.extend_from_slice(b"ERROR\r\n");
        return Step::Done(consumed);
    }
    let noreply = toks.len() == base + 1 && toks[base] == b"noreply";
    let key = toks[1];
    if key.len() > KEY_MAX {
        out.extend_from_slice(BAD_FORMAT);
        return Step::Done(consumed);
    }
    let (Some(flags), Some(exptime), Some(vlen)) = (
        parse_u32(toks[2]),
        parse_exptime(toks[3]),
        parse_i64(toks[4]),
    ) else {
        out.extend_from_slice(BAD_FORMAT);
        return Step::Done(consumed);
    };
    let cas = if is_cas {
        match parse_u64(toks[5]) {
            Some(c) => Some(c),
            None => {
                out.extend_from_slice(BAD_FORMAT);
                return Step::Done(consumed);
            }
        }
    } else {
        None
    };
    if !(0..=i32::MAX as i64 - 2).contains(&vlen) {
        out.extend_from_slice(BAD_FORMAT);
        return Step::Done(consumed);
    }
    let vlen = vlen as usize;
    if vlen > store.item_max() {
        store.count_too_large();
        out.extend_from_slice(b"SERVER_ERROR object too large for cache\r\n");
        if cmd == b"set" {
            // As memcached: a failed set must not leave the old value behind.
            store.delete(key, None).await;
        }
        return Step::Swallow(consumed, vlen + 2);
    }
    if input.len() < consumed + vlen + 2 {
        return Step::NeedMore;
    }
    let data = &input[consumed..consumed + vlen];
    let total = consumed + vlen + 2;
    if &input[consumed + vlen..total] != b"\r\n" {
        out.extend_from_slice(b"CLIENT_ERROR bad data chunk\r\n");
        return Step::Done(total);
    }
    let mode = match cmd {
        b"add" => Mode::Add,
        b"replace" => Mode::Replace,
        b"append" => Mode::Append,
        b"prepend" => Mode::Prepend,
        _ => Mode::Set,
    };
    let r = store
        .store(key, StoreReq::new(mode, flags, exptime, data, cas))
        .await;
    let reply: &[u8] = match r {
        StoreRes::Stored { .. } => b"STORED\r\n",
        StoreRes::NotStored => b"NOT_STORED\r\n",
        StoreRes::Exists => b"EXISTS\r\n",
        StoreRes::NotFound => b"NOT_FOUND\r\n",
        StoreRes::TooLarge => b"SERVER_ERROR object too large for cache\r\n",
        StoreRes::OutOfMemory => b"SERVER_ERROR out of memory storing object\r\n",
    };
    if !noreply || matches!(r, StoreRes::TooLarge | StoreRes::OutOfMemory) {
        out.extend_from_slice(reply);
    }
    Step::Done(total)
}

/// memcached's largest `stats cachedump` reply.
const CACHEDUMP_MAX: usize = 2 << 20;
/// memcached's slab class ids are below this (`Illegal slab id` otherwise).
const SLAB_CLASSES: u32 = 64;

/// `stats cachedump CLASS LIMIT`, as memcached answers it: `ITEM key [bytes b; expiry s]` per
/// item (expiry 0: never), `END`, at most 2 MiB. The cache is one class, `1`; every other class
/// below 64 is empty. Lists the items whose values are in DRAM, most recently used first.
fn cachedump(store: &Arc<Store>, toks: &[&[u8]], out: &mut Vec<u8>) {
    if store.settings().dump_disabled {
        out.extend_from_slice(b"CLIENT_ERROR stats cachedump not allowed\r\n");
        return;
    }
    if toks.len() < 4 {
        out.extend_from_slice(b"CLIENT_ERROR bad command line\r\n");
        return;
    }
    let (Some(class), Some(limit)) = (parse_u32(toks[2]), parse_u32(toks[3])) else {
        out.extend_from_slice(BAD_FORMAT);
        return;
    };
    if class >= SLAB_CLASSES {
        out.extend_from_slice(b"CLIENT_ERROR Illegal slab id\r\n");
        return;
    }
    if class == 1 {
        let mut num = itoa::Buffer::new();
        let mark = out.len();
        for (key, bytes, exptime) in store.cachedump(limit as usize) {
            let before = out.len();
            out.extend_from_slice(b"ITEM ");
            out.extend_from_slice(&key);
            out.extend_from_slice(b" [");
            out.extend_from_slice(num.format(bytes).as_bytes());
            out.extend_from_slice(b" b; ");
            out.extend_from_slice(num.format(exptime).as_bytes());
            out.extend_from_slice(b" s]\r\n");
            if out.len() - mark + 6 > CACHEDUMP_MAX {
                out.truncate(before);
                break;
            }
        }
    }
    out.extend_from_slice(b"END\r\n");
}

fn stats(store: &Arc<Store>, toks: &[&[u8]], out: &mut Vec<u8>) {
    let group = toks.get(1).copied();
    let lines = match group {
        Some(b"reset") => {
            store.reset_stats();
            out.extend_from_slice(b"RESET\r\n");
            return;
        }
        Some(b"detail") => {
            let reply: &[u8] = match toks.get(2).copied() {
                // Per-prefix statistics are not collected: say so instead of dumping nothing.
                Some(b"on") => b"SERVER_ERROR stats detail is not supported by inpath\r\n",
                Some(b"off") => b"OK\r\n",
                Some(b"dump") => b"END\r\n",
                _ => b"CLIENT_ERROR usage: stats detail on|off|dump\r\n",
            };
            out.extend_from_slice(reply);
            return;
        }
        Some(b"cachedump") => {
            cachedump(store, toks, out);
            return;
        }
        _ => match super::stats::group(store, group) {
            Some(lines) => lines,
            None => {
                out.extend_from_slice(b"ERROR\r\n");
                return;
            }
        },
    };
    for (k, v) in lines {
        out.extend_from_slice(b"STAT ");
        out.extend_from_slice(k.as_bytes());
        out.push(b' ');
        out.extend_from_slice(v.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"END\r\n");
}
