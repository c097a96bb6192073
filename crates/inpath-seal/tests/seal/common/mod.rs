//! Shared helpers of the seal integration tests.
#![allow(dead_code)]

pub mod library;

use inpath_seal::gen;
use inpath_seal::kernel::{self, AesKernel};
use inpath_seal::{Cipher, Compression, Key, KeyRing, SealConfig, Unsealer};

pub fn key(bits: u32, fill: u8) -> Key {
    Key::new(&vec![fill; bits as usize / 8]).unwrap()
}

/// Every tier: (name, config, key bits).
pub fn tiers() -> Vec<(String, SealConfig, u32)> {
    let compressions = [
        Compression::None,
        Compression::Deflate(1),
        Compression::Lz4,
        Compression::Zstd(1),
        Compression::Snappy,
    ];
    let mut ciphers = vec![(Cipher::None, 0u32)];
    for bits in [128, 192, 256] {
        for c in [Cipher::Ecb, Cipher::Ctr, Cipher::Cbc] {
            ciphers.push((c, bits));
        }
    }
    ciphers.push((Cipher::Gcm, 256));
    let mut out = Vec::new();
    for comp in compressions {
        for (cipher, bits) in &ciphers {
            let name = format!(
                "{}+{}{}",
                comp.describe(),
                cipher.name(),
                if *bits > 0 {
                    bits.to_string()
                } else {
                    String::new()
                }
            );
            out.push((
                name,
                SealConfig {
                    compression: comp,
                    cipher: *cipher,
                },
                *bits,
            ));
        }
    }
    out
}

/// A key ring holding key id `bits` for each key size (ids 128, 192, 256).
pub fn ring() -> KeyRing {
    let mut ring = KeyRing::new();
    for bits in [128, 192, 256] {
        ring.insert(bits, key(bits, bits as u8 ^ 0x5a));
    }
    ring
}

pub fn ring_key(bits: u32) -> Key {
    key(bits, bits as u8 ^ 0x5a)
}

/// An unsealer over `ring` on every AES kernel this CPU has (`kernel::aes_kernels()`), lowest
/// first: for the checks of the page layer that depend on the kernel.
pub fn unsealers(ring: &KeyRing) -> Vec<(AesKernel, Unsealer)> {
    kernel::aes_kernels()
        .into_iter()
        .map(|k| {
            (
                k,
                Unsealer::with_kernel(ring, k).expect("an allowed kernel"),
            )
        })
        .collect()
}

#[derive(Clone, Copy, Debug)]
pub enum Data {
    Random,
    Zero,
    Text,
}

pub fn data(kind: Data, len: usize, seed: u64) -> Vec<u8> {
    match kind {
        Data::Random => gen::random_bytes(len, seed),
        Data::Zero => vec![0u8; len],
        Data::Text => gen::lineitem_text(len, seed),
    }
}

/// Sizes from the issue: 0, 1, 15, 16, 17, 63, 64, 65 bytes, 4 KiB and up, 118 784 (the HANA
/// log write).
pub const SMALL_SIZES: [usize; 12] = [0, 1, 15, 16, 17, 63, 64, 65, 4096, 65536, 118_784, 1 << 20];
