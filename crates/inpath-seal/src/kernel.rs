//! Multi-page CBC encryption: the software analog of the reference's round-robin CBC engines.
//!
//! CBC encryption is a chain: block `i` needs the ciphertext of block `i - 1`, so one page runs
//! at the latency of the AES rounds, not their throughput (about 4x slower than CTR on AES-NI).
//! Pages are independent, though, so this kernel walks up to [`LANES`] pages side by side and
//! encrypts block `i` of every page in one call to the block cipher's parallel path, which keeps
//! the AES units busy. The output of each page is exactly the plain library CBC output (the
//! tests compare them for every key size and uneven page lengths).

use crate::aes::{with_aes, AnyAes, Block};
use aes::cipher::BlockCipherEncrypt;

/// Pages encrypted side by side.
pub const LANES: usize = 8;

/// CBC-encrypts several independent pages in place. Each lane is `(iv, data)` where `data` is
/// a whole number of 16-byte blocks; lanes may have different lengths. Any number of lanes is
/// accepted; they are processed [`LANES`] at a time.
pub fn cbc_encrypt_lanes(aes: &AnyAes, lanes: &mut [(Block, &mut [u8])]) {
    for group in lanes.chunks_mut(LANES) {
        with_aes!(aes, c => encrypt_group(c, group));
    }
}

fn encrypt_group<C: BlockCipherEncrypt<BlockSize = aes::cipher::consts::U16>>(
    cipher: &C,
    lanes: &mut [(Block, &mut [u8])],
) {
    debug_assert!(lanes.len() <= LANES);
    debug_assert!(lanes.iter().all(|(_, d)| d.len() % 16 == 0));
    let blocks = lanes.iter().map(|(_, d)| d.len() / 16).max().unwrap_or(0);
    let mut batch = [Block::default(); LANES];
    let mut which = [0usize; LANES];
    for i in 0..blocks {
        // Gather block i of every lane still running, XORed with its chain value.
        let mut n = 0;
        for (lane, (chain, data)) in lanes.iter().enumerate() {
            let at = i * 16;
            if at < data.len() {
                let b = &mut batch[n];
                for k in 0..16 {
                    b[k] = data[at + k] ^ chain[k];
                }
                which[n] = lane;
                n += 1;
            }
        }
        cipher.encrypt_blocks(&mut batch[..n]);
        for (slot, &lane) in which[..n].iter().enumerate() {
            let (chain, data) = &mut lanes[lane];
            let at = i * 16;
            data[at..at + 16].copy_from_slice(&batch[slot]);
            *chain = batch[slot];
        }
    }
}
