//! memcached's UDP protocol (`-U PORT`; doc/protocol.txt, "UDP protocol"): every datagram is an
//! 8-byte frame header then requests in the text or binary protocol, answered by the same
//! protocol steps as a TCP connection; the reply goes back in datagrams of at most 1400 bytes,
//! each with the header again.
//!
//! ```text
//!  0      2      4      6      8
//!  +------+------+------+------+---------------------------+
//!  |  id  | seq  |total | 0    | payload (at most 1392)    |   16-bit big-endian fields
//!  +------+------+------+------+---------------------------+
//! ```
//!
//! - A request is one datagram: `seq` 0 and `total` 1, else it is dropped (memcached drops
//!   multi-datagram requests). A datagram of 8 bytes or less is dropped.
//! - The reply carries the request's id, sequence numbers 0..n-1 and the count n; the client
//!   joins the payloads in sequence order. memcached 1.6 numbers each key's part of a multi-key
//!   get as a message of its own (sequence 0 again); here the whole reply of a datagram is one
//!   message, as the protocol document describes.
//! - Every command the TCP connection takes is taken (gets, sets, deletes, arithmetic, stats,
//!   binary requests), as memcached does; a request cut short by the datagram's end is
//!   dropped, and so is a `quit`'s (there is no connection to close).

use crate::proto::{self, Step};
use crate::store::Store;
use crate::types::Protocol;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

/// Bytes of the frame header.
pub const HEADER: usize = 8;
/// Largest datagram the server sends (memcached's `UDP_MAX_PAYLOAD_SIZE`).
pub const MAX_DATAGRAM: usize = 1400;
/// Reply bytes per datagram.
pub const PAYLOAD: usize = MAX_DATAGRAM - HEADER;
/// Most reply bytes one request datagram gets (65535 datagrams).
const MAX_REPLY: usize = u16::MAX as usize * PAYLOAD;
/// Largest datagram read (memcached's read buffer).
const READ_BUFFER: usize = 65536;

/// Serves datagrams until the socket fails.
pub async fn serve(sock: &tokio::net::UdpSocket, store: &Arc<Store>, protocol: Protocol) {
    let mut buf = vec![0u8; READ_BUFFER];
    loop {
        let (n, from) = match sock.recv_from(&mut buf).await {
            Ok(r) => r,
            // A reply to an unreachable client shows up as an error on the next receive.
            Err(_) => continue,
        };
        store.counters.bytes_read.fetch_add(n as u64, Relaxed);
        let Some((id, reply)) = answer(store, protocol, &buf[..n]).await else {
            continue;
        };
        for d in frames(id, &reply) {
            match sock.send_to(&d, from).await {
                Ok(sent) => {
                    store.counters.bytes_written.fetch_add(sent as u64, Relaxed);
                }
                Err(_) => break,
            }
        }
    }
}

/// The reply payload of one request datagram with its request id, or `None` when the datagram
/// is dropped (too short, or part of a multi-datagram request).
pub async fn answer(
    store: &Arc<Store>,
    protocol: Protocol,
    datagram: &[u8],
) -> Option<(u16, Vec<u8>)> {
    if datagram.len() <= HEADER {
        return None;
    }
    let id = u16::from_be_bytes([datagram[0], datagram[1]]);
    if datagram[4..6] != [0, 1] {
        return None;
    }
    let mut input = datagram[HEADER..].to_vec();
    let binary = match protocol {
        Protocol::Ascii => false,
        Protocol::Binary => true,
        Protocol::Auto => input[0] == proto::binary::REQUEST_MAGIC,
    };
    let mut out = Vec::new();
    let mut start = 0usize;
    // A reply is at most 65535 datagrams: what a datagram's requests ask beyond that (a 64 KiB
    // multiget of large values) is not produced, so memory stays bounded.
    while start < input.len() && out.len() < MAX_REPLY {
        let step = if binary {
            proto::binary::step(store, &input[start..], &mut out).await
        } else {
            proto::step(store, &input[start..], &mut out).await
        };
        match step {
            Step::NeedMore | Step::Close => break,
            Step::Done(n) => start += n,
            Step::Swallow(n, skip) => start = start.saturating_add(n).saturating_add(skip),
            Step::Resume { consumed, prefix } => {
                let Some(back) = consumed.checked_sub(prefix.len()) else {
                    break;
                };
                let at = start + back;
                input[at..at + prefix.len()].copy_from_slice(&prefix);
                start = at;
            }
        }
    }
    Some((id, out))
}

/// The datagrams of a reply: `payload` cut into [`PAYLOAD`]-byte parts, each behind a header
/// with the request id, its sequence number and the count (at most 65535 datagrams; a longer
/// reply is cut there). An empty reply (noreply) sends nothing.
pub fn frames(id: u16, payload: &[u8]) -> Vec<Vec<u8>> {
    let parts: Vec<&[u8]> = payload.chunks(PAYLOAD).take(u16::MAX as usize).collect();
    let total = parts.len() as u16;
    parts
        .into_iter()
        .enumerate()
        .map(|(seq, part)| {
            let mut d = Vec::with_capacity(HEADER + part.len());
            d.extend_from_slice(&id.to_be_bytes());
            d.extend_from_slice(&(seq as u16).to_be_bytes());
            d.extend_from_slice(&total.to_be_bytes());
            d.extend_from_slice(&[0, 0]);
            d.extend_from_slice(part);
            d
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_follow_the_documented_header() {
        assert!(frames(7, b"").is_empty());
        let one = frames(0x1234, b"END\r\n");
        assert_eq!(
            one,
            vec![b"\x12\x34\x00\x00\x00\x01\x00\x00END\r\n".to_vec()]
        );
        // 1392 bytes fill one datagram exactly; one more byte makes two.
        let full = vec![b'x'; PAYLOAD];
        assert_eq!(frames(1, &full).len(), 1);
        assert_eq!(frames(1, &full)[0].len(), MAX_DATAGRAM);
        let mut more = full.clone();
        more.push(b'y');
        let two = frames(0xFFFF, &more);
        assert_eq!(two.len(), 2);
        assert_eq!(&two[0][..8], b"\xff\xff\x00\x00\x00\x02\x00\x00");
        assert_eq!(&two[1][..8], b"\xff\xff\x00\x01\x00\x02\x00\x00");
        assert_eq!(&two[1][8..], b"y");
        let joined: Vec<u8> = two.iter().flat_map(|d| d[8..].to_vec()).collect();
        assert_eq!(joined, more);
    }
}
