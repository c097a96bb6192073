//! The RustCrypto reference the hand-written AES kernels are compared with, and the keys and
//! lengths the comparisons run over (used by the `kernels` module).

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

/// `fast` (any kernel) against the `aes-gcm` crate under `key` (AES-256): ciphertext and tag for
/// every length of [`lengths`] and a few more, AAD of 0-300 bytes; the right tag opens in place
/// and into another buffer; a flipped bit of tag, AAD or data is refused, leaving the message as
/// it was in place and zeros out of place. `label` names the kernel in failures.
pub fn check_gcm(fast: &inpath_seal::aes::Gcm, key: &Key, label: &str) {
    use aes_gcm::aead::AeadInOut;
    use aes_gcm::KeyInit;
    let lib = aes_gcm::Aes256Gcm::new_from_slice(key.expose_secret()).unwrap();
    let big = gen::random_bytes(100_003 + 64, 19);
    let aad_all = gen::random_bytes(300, 20);
    let mut lens = lengths();
    lens.extend([16 * 256, 16 * 256 + 5, 255, 257, 4096 + 16 * 15]);
    for (n, len) in lens.into_iter().enumerate() {
        let nonce: [u8; 12] = gen::random_bytes(12, n as u64).try_into().unwrap();
        let aad = &aad_all[..[0usize, 1, 15, 16, 17, 48, 255, 256, 300][n % 9]];
        let data = &big[n % 5..n % 5 + len];
        let mut want = data.to_vec();
        let want_tag = lib
            .encrypt_inout_detached(&nonce.into(), aad, (&mut want[..]).into())
            .unwrap();
        let mut got = data.to_vec();
        let tag = fast.encrypt(&nonce, aad, &mut got).unwrap();
        assert_eq!(got, want, "{label} len {len} aad {}", aad.len());
        assert_eq!(tag, <[u8; 16]>::from(want_tag), "{label} tag, len {len}");
        // Decryption: the right tag opens, any flipped bit of tag, aad or data does not.
        let mut back = got.clone();
        assert!(fast.decrypt(&nonce, aad, &mut back, &tag));
        assert_eq!(back, data);
        // Out of place: the same plaintext; a refused message leaves zeros.
        let mut to = vec![0x5a; len];
        assert!(fast.decrypt_to(&nonce, aad, &got, &mut to, &tag));
        assert_eq!(to, data, "{label} decrypt_to, len {len}");
        if len > 0 {
            let mut flipped = got.clone();
            flipped[(n * 7) % len] ^= 1;
            let mut to = vec![0x5a; len];
            assert!(!fast.decrypt_to(&nonce, aad, &flipped, &mut to, &tag));
            assert!(
                to.iter().all(|&b| b == 0),
                "{label}: a refused decrypt_to leaves zeros"
            );
        }
        let mut bad_tag = tag;
        bad_tag[n % 16] ^= 1 << (n % 8);
        let mut same = got.clone();
        assert!(!fast.decrypt(&nonce, aad, &mut same, &bad_tag));
        assert_eq!(same, got, "a refused message is left as it was");
        if len > 0 {
            let mut flipped = got.clone();
            flipped[n % len] ^= 0x80;
            assert!(!fast.decrypt(&nonce, aad, &mut flipped, &tag));
        }
        if !aad.is_empty() {
            let mut aad2 = aad.to_vec();
            aad2[0] ^= 1;
            assert!(!fast.decrypt(&nonce, &aad2, &mut got.clone(), &tag));
        }
    }
}
