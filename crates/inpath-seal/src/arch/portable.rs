//! The portable twins of the vector kernels' two batched loops, over any RustCrypto block
//! cipher (the `library` kernel, and every CPU that is not x86-64): CTR with the counter
//! blocks written and encrypted in batches, and CBC encryption of several pages side by side.
//! A leaf: safe Rust over the `aes` crate's traits, importing nothing from the crate.

use aes::cipher::array::Array;
use aes::cipher::consts::U16;
use aes::cipher::BlockCipherEncrypt;

/// One AES block (the same type as the library front's `Block`).
type Block = Array<u8, U16>;

/// Pages [`cbc_encrypt_group`] takes at once.
pub(crate) const LANES: usize = 16;

/// Counter blocks encrypted per batch by [`ctr_apply`]: a multiple of the VAES-512 backend's
/// 64 parallel blocks (8 KiB of keystream: stays in L1, amortises the per-call key setup).
const CTR_BATCH: usize = 512;

/// CBC-encrypts up to [`LANES`] independent pages in place, block `i` of every page in one
/// call into the cipher (which then runs them in parallel). Each lane is `(iv, data)` with
/// `data` whole blocks; each `iv` becomes its lane's last ciphertext block.
pub(crate) fn cbc_encrypt_group<C: BlockCipherEncrypt<BlockSize = U16>>(
    cipher: &C,
    lanes: &mut [(Block, &mut [u8])],
) {
    debug_assert!(lanes.len() <= LANES);
    debug_assert!(lanes.iter().all(|(_, d)| d.len() % 16 == 0));
    let blocks = lanes.iter().map(|(_, d)| d.len() / 16).max().unwrap_or(0);
    let mut batch = [Block::default(); LANES];
    let mut which = [0usize; LANES];
    let mut chains = [0u128; LANES];
    for (chain, (iv, _)) in chains.iter_mut().zip(lanes.iter()) {
        *chain = u128::from_ne_bytes((*iv).into());
    }
    for i in 0..blocks {
        let at = i * 16;
        // Gather block i of every lane still running, XORed with its chain value.
        let mut n = 0;
        for (lane, (_, data)) in lanes.iter().enumerate() {
            if let Some(bytes) = data.get(at..at + 16) {
                let x = u128::from_ne_bytes(bytes.try_into().expect("16 bytes")) ^ chains[lane];
                batch[n] = Block::from(x.to_ne_bytes());
                which[n] = lane;
                n += 1;
            }
        }
        cipher.encrypt_blocks(&mut batch[..n]);
        for (block, &lane) in batch[..n].iter().zip(&which[..n]) {
            lanes[lane].1[at..at + 16].copy_from_slice(block);
            chains[lane] = u128::from_ne_bytes((*block).into());
        }
    }
    for ((iv, _), chain) in lanes.iter_mut().zip(chains) {
        *iv = Block::from(chain.to_ne_bytes());
    }
}

/// AES-CTR over `data` in place with a 128-bit big-endian counter starting at `iv`: the same
/// bytes as `ctr::Ctr128BE`. The `ctr` crate feeds the cipher's parallel path from a generic
/// counter loop; here the counter blocks are written 512 at a time and encrypted in one call,
/// then XORed into the data as 128-bit words.
pub(crate) fn ctr_apply<C: BlockCipherEncrypt<BlockSize = U16>>(
    cipher: &C,
    iv: &[u8; 16],
    data: &mut [u8],
) {
    let mut counter = u128::from_be_bytes(*iv);
    let mut keystream = [Block::default(); CTR_BATCH];
    for chunk in data.chunks_mut(CTR_BATCH * 16) {
        let blocks = chunk.len().div_ceil(16);
        for block in keystream[..blocks].iter_mut() {
            *block = Block::from(counter.to_be_bytes());
            counter = counter.wrapping_add(1);
        }
        cipher.encrypt_blocks(&mut keystream[..blocks]);
        let (words, tail) = chunk.as_chunks_mut::<16>();
        for (word, ks) in words.iter_mut().zip(keystream.iter()) {
            let x = u128::from_ne_bytes(*word) ^ u128::from_ne_bytes((*ks).into());
            *word = x.to_ne_bytes();
        }
        if !tail.is_empty() {
            let ks = &keystream[words.len()];
            for (b, k) in tail.iter_mut().zip(ks.iter()) {
                *b ^= k;
            }
        }
    }
}
