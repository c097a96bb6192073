//! The RustCrypto reference the hand-written AES kernels are compared with, and the keys and
//! lengths the comparisons run over (shared by tests/vaes.rs and tests/ni.rs).

use aes::cipher::{BlockModeDecrypt, BlockModeEncrypt, InnerIvInit, KeyIvInit, StreamCipher};
use inpath_seal::aes::{Block, Direction, Key, Mode};
use inpath_seal::gen;

pub fn keys() -> Vec<Key> {
    [16usize, 24, 32]
        .iter()
        .map(|&n| Key::new(&gen::random_bytes(n, n as u64 * 31)).unwrap())
        .collect()
}

pub fn lengths() -> Vec<usize> {
    let mut v: Vec<usize> = (0..=300).collect();
    v.extend([511, 512, 513, 1000, 4096, 65_536 + 48, 100_003]);
    v
}

/// The same bytes through the library types for each key size.
pub fn lib_cbc_enc(key: &Key, iv: &[u8; 16], data: &mut [u8]) {
    let b = key.expose_secret();
    let blocks = Block::slice_as_chunks_mut(data).0;
    match b.len() {
        16 => cbc::Encryptor::<aes::Aes128>::new(b.try_into().unwrap(), iv.into())
            .encrypt_blocks(blocks),
        24 => cbc::Encryptor::<aes::Aes192>::new(b.try_into().unwrap(), iv.into())
            .encrypt_blocks(blocks),
        _ => cbc::Encryptor::<aes::Aes256>::new(b.try_into().unwrap(), iv.into())
            .encrypt_blocks(blocks),
    }
}

pub fn lib_cbc_dec(key: &Key, iv: &[u8; 16], data: &mut [u8]) {
    let b = key.expose_secret();
    let blocks = Block::slice_as_chunks_mut(data).0;
    match b.len() {
        16 => cbc::Decryptor::<aes::Aes128>::new(b.try_into().unwrap(), iv.into())
            .decrypt_blocks(blocks),
        24 => cbc::Decryptor::<aes::Aes192>::new(b.try_into().unwrap(), iv.into())
            .decrypt_blocks(blocks),
        _ => cbc::Decryptor::<aes::Aes256>::new(b.try_into().unwrap(), iv.into())
            .decrypt_blocks(blocks),
    }
}

pub fn lib_stream(key: &Key, mode: Mode, dir: Direction, iv: &[u8; 16], data: &mut [u8]) {
    fn go<C>(c: C, mode: Mode, dir: Direction, iv: &[u8; 16], data: &mut [u8])
    where
        C: aes::cipher::BlockCipherEncrypt<BlockSize = aes::cipher::consts::U16> + Clone,
    {
        match (mode, dir) {
            (Mode::Ctr, _) => ctr::Ctr128BE::from_core(ctr::CtrCore::inner_iv_init(c, iv.into()))
                .apply_keystream(data),
            (Mode::Ofb, _) => {
                ofb::Ofb::from_core(ofb::OfbCore::inner_iv_init(c, iv.into())).apply_keystream(data)
            }
            (Mode::Cfb, Direction::Encrypt) => {
                cfb_mode::BufEncryptor::inner_iv_init(c, iv.into()).encrypt(data)
            }
            (Mode::Cfb, Direction::Decrypt) => {
                cfb_mode::BufDecryptor::inner_iv_init(c, iv.into()).decrypt(data)
            }
            _ => unreachable!(),
        }
    }
    use aes::cipher::KeyInit;
    let b = key.expose_secret();
    match b.len() {
        16 => go(aes::Aes128::new(b.try_into().unwrap()), mode, dir, iv, data),
        24 => go(aes::Aes192::new(b.try_into().unwrap()), mode, dir, iv, data),
        _ => go(aes::Aes256::new(b.try_into().unwrap()), mode, dir, iv, data),
    }
}
