//! memcached's binary protocol (the "Memcache Binary Protocol", as memcached 1.6 serves it) over
//! a connection's byte buffer, with the same contract as the text protocol's `step`: look at the
//! unread input, then ask for more bytes, or consume one request and append its reply.
//!
//! Every request is a 24-byte header (magic 0x80, opcode, key length, extras length, data type,
//! vbucket, total body length, opaque, cas) and a body of extras, key and value. Every reply is
//! a 24-byte header (magic 0x81, the request's opcode, status, the request's opaque, a cas) and
//! a body. memcached's rules are kept:
//!
//! - A header memcached finds malformed (key and extras longer than the body) is answered
//!   "unknown command" and the connection closed; a key over 250 bytes, or extras, key or body
//!   lengths wrong for the opcode, are answered "invalid arguments" and the connection closed.
//!   A byte other than 0x80 where a header starts closes the connection without a reply.
//! - A value over the item size limit is answered "too large" and swallowed; a failed set
//!   removes the old value, as memcached does.
//! - Unknown opcodes (the SASL ones included: no SASL here) are answered "unknown command"
//!   and their body skipped.
//! - Quiet variants send nothing on success (GetQ, GetKQ, GATQ and GATKQ: nothing on a miss,
//!   the value on a hit); errors are always sent.
//! - A body over 1 GiB is answered "invalid arguments" and the connection closed (memcached
//!   after 1.6.18 does the same).
//!
//! Where this differs from memcached 1.6.18 on purpose: Verbosity is accepted (memcached 1.6
//! answers "unknown command" and then skips 4 bytes of the next request); an unknown opcode
//! has exactly its body skipped (memcached skips the body length after the extras and key,
//! eating the next request); bytes behind a Stat, Touch or GAT key are skipped rather than
//! read as the next request; a delayed Flush runs as the text `flush_all N` does.
//!
//! Only the whole request is ever buffered: a body is at most the extras, a key of 250 bytes
//! and a value of `item_max` bytes; anything else that would need more (a value over the limit,
//! junk behind a Stat key) is swallowed as it arrives.

use super::types::Step;
use crate::store::Store;
use crate::types::{
    abs_exptime, now_unix, ArithRes, DelRes, ItemOut, Mode, StoreReq, StoreRes, KEY_MAX,
};
use std::sync::Arc;

/// Length of a request or response header.
const HEADER: usize = 24;
/// The first byte of every request.
pub const REQUEST_MAGIC: u8 = 0x80;
/// The first byte of every response.
const RESPONSE_MAGIC: u8 = 0x81;
/// Incr/decr expiration that means "do not create the item on a miss".
const NO_VIVIFY: u32 = 0xffff_ffff;

/// The opcodes of the binary protocol.
mod op {
    pub const GET: u8 = 0x00;
    pub const SET: u8 = 0x01;
    pub const ADD: u8 = 0x02;
    pub const REPLACE: u8 = 0x03;
    pub const DELETE: u8 = 0x04;
    pub const INCREMENT: u8 = 0x05;
    pub const DECREMENT: u8 = 0x06;
    pub const QUIT: u8 = 0x07;
    pub const FLUSH: u8 = 0x08;
    pub const GETQ: u8 = 0x09;
    pub const NOOP: u8 = 0x0a;
    pub const VERSION: u8 = 0x0b;
    pub const GETK: u8 = 0x0c;
    pub const GETKQ: u8 = 0x0d;
    pub const APPEND: u8 = 0x0e;
    pub const PREPEND: u8 = 0x0f;
    pub const STAT: u8 = 0x10;
    pub const SETQ: u8 = 0x11;
    pub const ADDQ: u8 = 0x12;
    pub const REPLACEQ: u8 = 0x13;
    pub const DELETEQ: u8 = 0x14;
    pub const INCREMENTQ: u8 = 0x15;
    pub const DECREMENTQ: u8 = 0x16;
    pub const QUITQ: u8 = 0x17;
    pub const FLUSHQ: u8 = 0x18;
    pub const APPENDQ: u8 = 0x19;
    pub const PREPENDQ: u8 = 0x1a;
    pub const VERBOSITY: u8 = 0x1b;
    pub const TOUCH: u8 = 0x1c;
    pub const GAT: u8 = 0x1d;
    pub const GATQ: u8 = 0x1e;
    pub const SASL_LIST_MECHS: u8 = 0x20;
    pub const SASL_AUTH: u8 = 0x21;
    pub const SASL_STEP: u8 = 0x22;
    pub const GATK: u8 = 0x23;
    pub const GATKQ: u8 = 0x24;
}

/// Response status codes (the header's "status" field).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Status {
    Ok = 0x0000,
    NotFound = 0x0001,
    Exists = 0x0002,
    TooLarge = 0x0003,
    Invalid = 0x0004,
    NotStored = 0x0005,
    NonNumeric = 0x0006,
    /// What memcached answers a flush when flushing is turned off (`-F`).
    AuthError = 0x0020,
    UnknownCommand = 0x0081,
    /// Evictions are off (`-M`) and the value does not fit.
    OutOfMemory = 0x0082,
    NotSupported = 0x0083,
}

impl Status {
    /// The body memcached sends with an error status.
    fn text(self) -> &'static [u8] {
        match self {
            Status::Ok => b"",
            Status::NotFound => b"Not found",
            Status::Exists => b"Data exists for key.",
            Status::TooLarge => b"Too large.",
            Status::Invalid => b"Invalid arguments",
            Status::NotStored => b"Not stored.",
            Status::NonNumeric => b"Non-numeric server-side value for incr or decr",
            Status::AuthError => b"Auth failure.",
            Status::OutOfMemory => b"Out of memory",
            Status::UnknownCommand => b"Unknown command",
            Status::NotSupported => b"Not supported",
        }
    }
}

/// A request header, in host byte order.
#[derive(Clone, Copy, Debug)]
struct Header {
    opcode: u8,
    keylen: u16,
    extlen: u8,
    bodylen: u32,
    opaque: u32,
    cas: u64,
}

impl Header {
    fn parse(b: &[u8; HEADER]) -> Header {
        Header {
            opcode: b[1],
            keylen: u16::from_be_bytes([b[2], b[3]]),
            extlen: b[4],
            bodylen: u32::from_be_bytes([b[8], b[9], b[10], b[11]]),
            opaque: u32::from_be_bytes([b[12], b[13], b[14], b[15]]),
            cas: u64::from_be_bytes([b[16], b[17], b[18], b[19], b[20], b[21], b[22], b[23]]),
        }
    }

    /// Extras and key: what precedes the value in the body.
    fn fixed(&self) -> usize {
        usize::from(self.extlen) + usize::from(self.keylen)
    }
}

/// What a request asks for, the quiet variants folded into their loud ones.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Cmd {
    /// get / getk / touch / gat / gatk: `touch` reads an expiry from the extras, `key`
    /// returns the key, `value` returns the value.
    Get {
        touch: bool,
        key: bool,
        value: bool,
    },
    /// set / add / replace (8 bytes of extras: flags, expiry).
    Update(Mode),
    /// append / prepend (no extras).
    Concat(Mode),
    Delete,
    Arith {
        incr: bool,
    },
    Quit,
    Flush,
    Noop,
    Version,
    Stat,
    Verbosity,
    /// SASL is not built in: answered as memcached without SASL answers it.
    SaslList,
    SaslAuth,
    Unknown,
}

/// The command of an opcode and whether it is a quiet variant.
fn decode(opcode: u8) -> (Cmd, bool) {
    let get = |touch, key, value| Cmd::Get { touch, key, value };
    match opcode {
        op::GET => (get(false, false, true), false),
        op::GETQ => (get(false, false, true), true),
        op::GETK => (get(false, true, true), false),
        op::GETKQ => (get(false, true, true), true),
        op::TOUCH => (get(true, false, false), false),
        op::GAT => (get(true, false, true), false),
        op::GATQ => (get(true, false, true), true),
        op::GATK => (get(true, true, true), false),
        op::GATKQ => (get(true, true, true), true),
        op::SET => (Cmd::Update(Mode::Set), false),
        op::SETQ => (Cmd::Update(Mode::Set), true),
        op::ADD => (Cmd::Update(Mode::Add), false),
        op::ADDQ => (Cmd::Update(Mode::Add), true),
        op::REPLACE => (Cmd::Update(Mode::Replace), false),
        op::REPLACEQ => (Cmd::Update(Mode::Replace), true),
        op::APPEND => (Cmd::Concat(Mode::Append), false),
        op::APPENDQ => (Cmd::Concat(Mode::Append), true),
        op::PREPEND => (Cmd::Concat(Mode::Prepend), false),
        op::PREPENDQ => (Cmd::Concat(Mode::Prepend), true),
        op::DELETE => (Cmd::Delete, false),
        op::DELETEQ => (Cmd::Delete, true),
        op::INCREMENT => (Cmd::Arith { incr: true }, false),
        op::INCREMENTQ => (Cmd::Arith { incr: true }, true),
        op::DECREMENT => (Cmd::Arith { incr: false }, false),
        op::DECREMENTQ => (Cmd::Arith { incr: false }, true),
        op::QUIT => (Cmd::Quit, false),
        op::QUITQ => (Cmd::Quit, true),
        op::FLUSH => (Cmd::Flush, false),
        op::FLUSHQ => (Cmd::Flush, true),
        op::NOOP => (Cmd::Noop, false),
        op::VERSION => (Cmd::Version, false),
        op::STAT => (Cmd::Stat, false),
        op::VERBOSITY => (Cmd::Verbosity, false),
        op::SASL_LIST_MECHS => (Cmd::SaslList, false),
        op::SASL_AUTH | op::SASL_STEP => (Cmd::SaslAuth, false),
        _ => (Cmd::Unknown, false),
    }
}

/// Whether the extras, key and body lengths are the ones the command takes (memcached's checks).
fn well_formed(cmd: Cmd, h: &Header) -> bool {
    let (ext, key, body) = (h.extlen, h.keylen, h.bodylen);
    let key_body = u32::from(key) + u32::from(ext);
    match cmd {
        Cmd::Version | Cmd::Noop | Cmd::Quit | Cmd::SaslList => ext == 0 && key == 0 && body == 0,
        Cmd::Flush => key == 0 && body == u32::from(ext) && (ext == 0 || ext == 4),
        Cmd::Update(_) => ext == 8 && key != 0,
        Cmd::Concat(_) | Cmd::SaslAuth => ext == 0 && key != 0,
        Cmd::Get { touch: false, .. } | Cmd::Delete => ext == 0 && key != 0 && body == key_body,
        Cmd::Get { touch: true, .. } => ext == 4 && key != 0,
        Cmd::Arith { .. } => ext == 20 && key != 0 && body == key_body,
        Cmd::Stat => ext == 0,
        Cmd::Verbosity => ext == 4 && key == 0 && body == 4,
        Cmd::Unknown => true,
    }
}

/// Appends one response: header, extras, key, value.
fn respond(
    out: &mut Vec<u8>,
    h: &Header,
    status: Status,
    cas: u64,
    extras: &[u8],
    key: &[u8],
    value: &[u8],
) {
    // Extras are at most 8 bytes and keys at most 250 (a stat name), so the casts are exact;
    // a value is at most `item_max`, which a configuration caps far below 4 GiB.
    let body = extras.len() + key.len() + value.len();
    out.reserve(HEADER + body);
    out.push(RESPONSE_MAGIC);
    out.push(h.opcode);
    out.extend_from_slice(&(key.len() as u16).to_be_bytes());
    out.push(extras.len() as u8);
    out.push(0); // data type: raw bytes
    out.extend_from_slice(&(status as u16).to_be_bytes());
    out.extend_from_slice(&u32::try_from(body).unwrap_or(u32::MAX).to_be_bytes());
    out.extend_from_slice(&h.opaque.to_be_bytes());
    out.extend_from_slice(&cas.to_be_bytes());
    out.extend_from_slice(extras);
    out.extend_from_slice(key);
    out.extend_from_slice(value);
}

/// An error response: the status and memcached's text for it.
fn error(out: &mut Vec<u8>, h: &Header, status: Status) {
    respond(out, h, status, 0, &[], &[], status.text());
}

/// A success response with no body, unless the request was quiet.
fn ok(out: &mut Vec<u8>, h: &Header, quiet: bool, cas: u64) {
    if !quiet {
        respond(out, h, Status::Ok, cas, &[], &[], &[]);
    }
}

fn be32(b: &[u8], at: usize) -> u32 {
    let mut a = [0u8; 4];
    if let Some(s) = b.get(at..at + 4) {
        a.copy_from_slice(s);
    }
    u32::from_be_bytes(a)
}

fn be64(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    if let Some(s) = b.get(at..at + 8) {
        a.copy_from_slice(s);
    }
    u64::from_be_bytes(a)
}

/// A binary expiry (unsigned seconds: relative up to 30 days, else a unix time) made absolute.
fn expiry(t: u32) -> u32 {
    abs_exptime(i64::from(t))
}

/// The largest body length taken at all (memcached's `ITEM_SIZE_MAX_UPPER_LIMIT`); larger
/// is answered "invalid arguments" and the connection closed.
const BODY_UPPER_LIMIT: u32 = 1 << 30;

/// Processes one binary request from `input` (unread bytes), appending the reply to `out`.
pub async fn step(store: &Arc<Store>, input: &[u8], out: &mut Vec<u8>) -> Step {
    let Some(&magic) = input.first() else {
        return Step::NeedMore;
    };
    if magic != REQUEST_MAGIC {
        // memcached drops a connection whose header has the wrong magic, without a reply.
        return Step::Close;
    }
    let Some(raw) = input
        .get(..HEADER)
        .and_then(|b| <&[u8; HEADER]>::try_from(b).ok())
    else {
        return Step::NeedMore;
    };
    let h = Header::parse(raw);
    let (cmd, quiet) = decode(h.opcode);
    let fixed = h.fixed();
    if fixed as u64 > u64::from(h.bodylen) {
        error(out, &h, Status::UnknownCommand);
        return Step::Close;
    }
    if h.bodylen > BODY_UPPER_LIMIT {
        error(out, &h, Status::Invalid);
        return Step::Close;
    }
    let body = h.bodylen as usize;
    // Keys are 16 bits long on the wire, at most 250 bytes in memcached.
    if usize::from(h.keylen) > KEY_MAX || !well_formed(cmd, &h) {
        error(out, &h, Status::Invalid);
        return Step::Close;
    }
    if matches!(cmd, Cmd::Unknown | Cmd::SaslList | Cmd::SaslAuth) {
        // memcached without SASL: "unknown command", the body skipped.
        error(out, &h, Status::UnknownCommand);
        return Step::Swallow(HEADER, body);
    }
    let head = HEADER + fixed;
    let vlen = body - fixed;
    if matches!(cmd, Cmd::Update(_) | Cmd::Concat(_)) {
        if vlen > store.item_max() {
            let Some(key) = input.get(HEADER + usize::from(h.extlen)..head) else {
                return Step::NeedMore;
            };
            error(out, &h, Status::TooLarge);
            if cmd == Cmd::Update(Mode::Set) {
                // As memcached: a failed set must not leave the old value behind.
                store.delete(key, None).await;
            }
            return Step::Swallow(head, vlen);
        }
        let Some(req) = input.get(..HEADER + body) else {
            return Step::NeedMore;
        };
        update(store, cmd, quiet, &h, req, out).await;
        return Step::Done(HEADER + body);
    }
    // Every other command has a body of extras and key; any value behind them (memcached
    // leaves it to be read as the next request) is skipped.
    let Some(req) = input.get(..head) else {
        return Step::NeedMore;
    };
    let done = if vlen > 0 {
        Step::Swallow(head, vlen)
    } else {
        Step::Done(head)
    };
    let extras = &req[HEADER..HEADER + usize::from(h.extlen)];
    let key = &req[HEADER + usize::from(h.extlen)..];
    match cmd {
        Cmd::Get {
            touch,
            key: with_key,
            value,
        } => {
            let exp = touch.then(|| expiry(be32(extras, 0)));
            match store.get(key, exp).await {
                Some(it) => hit(out, &h, key, &it, with_key, value),
                None if quiet => {}
                None if with_key => respond(out, &h, Status::NotFound, 0, &[], key, &[]),
                None => error(out, &h, Status::NotFound),
            }
        }
        Cmd::Delete => match store.delete(key, (h.cas != 0).then_some(h.cas)).await {
            DelRes::Deleted => ok(out, &h, quiet, 0),
            DelRes::NotFound => error(out, &h, Status::NotFound),
            DelRes::Exists => error(out, &h, Status::Exists),
        },
        Cmd::Arith { incr } => {
            let delta = be64(extras, 0);
            let initial = be64(extras, 8);
            let exp = be32(extras, 16);
            let vivify = (exp != NO_VIVIFY).then(|| (initial, expiry(exp)));
            let cas = (h.cas != 0).then_some(h.cas);
            match store.arith(key, incr, delta, cas, vivify, None).await {
                ArithRes::Value { value, cas, .. } => {
                    if !quiet {
                        respond(out, &h, Status::Ok, cas, &[], &[], &value.to_be_bytes());
                    }
                }
                ArithRes::NotFound => error(out, &h, Status::NotFound),
                ArithRes::NonNumeric => error(out, &h, Status::NonNumeric),
                ArithRes::Exists => error(out, &h, Status::Exists),
                ArithRes::OutOfMemory => error(out, &h, Status::OutOfMemory),
            }
        }
        Cmd::Quit => {
            ok(out, &h, quiet, 0);
            return Step::Close;
        }
        Cmd::Flush => {
            if !store.flush_all_enabled() {
                error(out, &h, Status::AuthError);
            } else {
                flush(store, be32(extras, 0));
                ok(out, &h, quiet, 0);
            }
        }
        Cmd::Noop => ok(out, &h, false, 0),
        Cmd::Version => {
            respond(
                out,
                &h,
                Status::Ok,
                0,
                &[],
                &[],
                crate::types::VERSION.as_bytes(),
            );
        }
        // Accepted and ignored, as the text protocol's `verbosity` (see the module doc).
        Cmd::Verbosity => ok(out, &h, false, 0),
        Cmd::Stat => stat(store, &h, key, out),
        // Handled above: these never get here.
        Cmd::Update(_) | Cmd::Concat(_) | Cmd::Unknown | Cmd::SaslList | Cmd::SaslAuth => {
            error(out, &h, Status::UnknownCommand);
        }
    }
    done
}

/// A get hit: flags in the extras, the key for the K variants, the value unless Touch.
fn hit(out: &mut Vec<u8>, h: &Header, key: &[u8], it: &ItemOut, with_key: bool, value: bool) {
    let key = if with_key { key } else { &[] };
    let value: &[u8] = if value { &it.value } else { &[] };
    respond(
        out,
        h,
        Status::Ok,
        it.cas,
        &it.flags.to_be_bytes(),
        key,
        value,
    );
}

/// set / add / replace / append / prepend with the whole request in `req`.
async fn update(
    store: &Arc<Store>,
    cmd: Cmd,
    quiet: bool,
    h: &Header,
    req: &[u8],
    out: &mut Vec<u8>,
) {
    let ext_end = HEADER + usize::from(h.extlen);
    let extras = &req[HEADER..ext_end];
    let key = &req[ext_end..ext_end + usize::from(h.keylen)];
    let value = &req[ext_end + usize::from(h.keylen)..];
    let cas = (h.cas != 0).then_some(h.cas);
    let (mode, flags, exptime) = match cmd {
        // With a cas, set, add and replace all become a cas (memcached's NREAD_CAS).
        Cmd::Update(mode) => (
            if cas.is_some() { Mode::Set } else { mode },
            be32(extras, 0),
            expiry(be32(extras, 4)),
        ),
        Cmd::Concat(mode) => (mode, 0, 0),
        _ => return error(out, h, Status::UnknownCommand),
    };
    let r = store
        .store(key, StoreReq::new(mode, flags, exptime, value, cas))
        .await;
    let status = match (r, cmd) {
        (StoreRes::Stored { cas, .. }, _) => return ok(out, h, quiet, cas),
        (StoreRes::OutOfMemory, _) => Status::OutOfMemory,
        (StoreRes::Exists, _) => Status::Exists,
        // A cas on a missing item: set/add/replace say "not found", append/prepend "not
        // stored" (memcached's append keeps its own mode when given a cas).
        (StoreRes::NotFound, Cmd::Update(_)) => Status::NotFound,
        (StoreRes::NotFound, _) => Status::NotStored,
        // Not stored (or grown too large by append/prepend): memcached words it by command.
        (StoreRes::NotStored | StoreRes::TooLarge, Cmd::Update(Mode::Add)) => Status::Exists,
        (StoreRes::NotStored | StoreRes::TooLarge, Cmd::Update(Mode::Replace)) => Status::NotFound,
        (StoreRes::NotStored | StoreRes::TooLarge, _) => Status::NotStored,
    };
    error(out, h, status);
}

/// Flush, now or `delay` (a binary expiry) from now, as the text protocol's `flush_all N`.
fn flush(store: &Arc<Store>, delay: u32) {
    let at = if delay == 0 { 0 } else { expiry(delay) };
    store.flush_all_after(u64::from(at.saturating_sub(now_unix())));
}

/// Stat: one response per statistic (key: its name, value: its value), then an empty one.
/// The groups are the text protocol's `stats [group]`.
fn stat(store: &Arc<Store>, h: &Header, group: &[u8], out: &mut Vec<u8>) {
    let lines: Vec<(String, String)> = match group {
        // memcached matches these three by prefix.
        g if g.starts_with(b"reset") => {
            store.reset_stats();
            Vec::new()
        }
        g if g.starts_with(b"settings") => {
            super::stats::group(store, Some(b"settings")).unwrap_or_default()
        }
        g if g.starts_with(b"detail") => match g.get(6..).unwrap_or_default() {
            b" off" => Vec::new(),
            // Per-prefix statistics are not collected: the dump is memcached's empty one.
            b" dump" => vec![("detailed".into(), "END\r\n".into())],
            b" on" => return error(out, h, Status::NotSupported),
            _ => return error(out, h, Status::NotFound),
        },
        b"" => super::stats::group(store, None).unwrap_or_default(),
        g => match super::stats::group(store, Some(g)) {
            Some(lines) => lines,
            None => return error(out, h, Status::NotFound),
        },
    };
    for (k, v) in lines {
        respond(out, h, Status::Ok, 0, &[], k.as_bytes(), v.as_bytes());
    }
    respond(out, h, Status::Ok, 0, &[], &[], &[]);
}
