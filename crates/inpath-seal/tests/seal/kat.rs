//! Known-answer tests for the AES layer.
//!
//! Sources (the data is copied beside each test):
//! - FIPS-197 (Advanced Encryption Standard), appendix C.1-C.3: example vectors for
//!   AES-128/192/256.
//! - NIST SP 800-38A (Recommendation for Block Cipher Modes of Operation, 2001), appendix F:
//!   F.1 ECB, F.2 CBC, F.3.13-F.3.18 CFB128, F.4 OFB, F.5 CTR, each for AES-128/192/256,
//!   encryption and decryption.
//! - The GCM specification (McGrew and Viega, "The Galois/Counter Mode of Operation", 2005,
//!   the test cases NIST's CAVP GCM vectors reproduce), test cases 13-16 (256-bit keys).
//!
//! All vectors were also checked against Python `cryptography` 48.0.0 (OpenSSL).
//!
//! Every vector runs on every AES kernel this CPU has (`kernel::aes_kernels()`), and through
//! the one-call API on the kernel the process picked.

use inpath_seal::aes::{apply, AnyAes, Block, CipherStream, Direction, Gcm, Key, Mode, Padding};
use inpath_seal::kernel::{self, AesKernel};

/// A stream on `kern`: through `CipherStream::new` for the kernel the process picked (so that
/// constructor is covered too), else `CipherStream::with_kernel`.
fn stream_at(
    kern: AesKernel,
    key: &Key,
    mode: Mode,
    direction: Direction,
    iv: Option<[u8; 16]>,
) -> CipherStream {
    if kern == kernel::aes_kernel() {
        CipherStream::new(key, mode, direction, iv, Padding::None).unwrap()
    } else {
        CipherStream::with_kernel(key, kern, mode, direction, iv, Padding::None).unwrap()
    }
}

/// `input` through a fresh stream on `kern` in one piece.
fn apply_at(
    kern: AesKernel,
    key: &Key,
    mode: Mode,
    direction: Direction,
    iv: Option<[u8; 16]>,
    input: &[u8],
) -> Vec<u8> {
    let mut stream = stream_at(kern, key, mode, direction, iv);
    let mut out = Vec::new();
    stream.push(input, &mut out).unwrap();
    stream.finish(&mut out).unwrap();
    out
}

fn h(s: &str) -> Vec<u8> {
    let s: String = s.split_whitespace().collect();
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

#[test]
fn fips197_appendix_c() {
    let pt = h("00112233445566778899aabbccddeeff");
    for (key, ct) in [
        (
            "000102030405060708090a0b0c0d0e0f",
            "69c4e0d86a7b0430d8cdb78070b4c55a",
        ),
        (
            "000102030405060708090a0b0c0d0e0f1011121314151617",
            "dda97ca4864cdfe06eaf70a0ec0d7191",
        ),
        (
            "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f",
            "8ea2b7ca516745bfeafc49904b496089",
        ),
    ] {
        let key = Key::new(&h(key)).unwrap();
        let out = apply(
            &key,
            Mode::Ecb,
            Direction::Encrypt,
            None,
            Padding::None,
            &pt,
        )
        .unwrap();
        assert_eq!(out, h(ct), "FIPS-197 C, AES-{}", key.bits());
        let back = apply(
            &key,
            Mode::Ecb,
            Direction::Decrypt,
            None,
            Padding::None,
            &out,
        )
        .unwrap();
        assert_eq!(back, pt);
        // The block cipher of every kernel, one block each way.
        for kern in kernel::aes_kernels() {
            let aes = AnyAes::with_kernel(&key, kern).unwrap();
            let mut block = [Block::from(<[u8; 16]>::try_from(&pt[..]).unwrap())];
            aes.encrypt_blocks(&mut block);
            assert_eq!(
                &block[0][..],
                &h(ct)[..],
                "{kern} FIPS-197 C, AES-{}",
                key.bits()
            );
            aes.decrypt_blocks(&mut block);
            assert_eq!(
                &block[0][..],
                &pt[..],
                "{kern} FIPS-197 C, AES-{}",
                key.bits()
            );
        }
    }
}

const SP800_38A_PT: &str = "6bc1bee22e409f96e93d7e117393172a ae2d8a571e03ac9c9eb76fac45af8e51
                            30c81c46a35ce411e5fbc1191a0a52ef f69f2445df4f9b17ad2b417be66c3710";
const KEY128: &str = "2b7e151628aed2a6abf7158809cf4f3c";
const KEY192: &str = "8e73b0f7da0e6452c810f32b809079e562f8ead2522c6b7b";
const KEY256: &str = "603deb1015ca71be2b73aef0857d77811f352c073b6108d72d9810a30914dff4";
const IV: &str = "000102030405060708090a0b0c0d0e0f";
const CTR0: &str = "f0f1f2f3f4f5f6f7f8f9fafbfcfdfeff";

/// (section, mode, key, ciphertext) from SP 800-38A appendix F.
const SP800_38A: [(&str, Mode, &str, &str); 15] = [
    ("F.1.1/F.1.2", Mode::Ecb, KEY128, "3ad77bb40d7a3660a89ecaf32466ef97 f5d3d58503b9699de785895a96fdbaaf 43b1cd7f598ece23881b00e3ed030688 7b0c785e27e8ad3f8223207104725dd4"),
    ("F.1.3/F.1.4", Mode::Ecb, KEY192, "bd334f1d6e45f25ff712a214571fa5cc 974104846d0ad3ad7734ecb3ecee4eef ef7afd2270e2e60adce0ba2face6444e 9a4b41ba738d6c72fb16691603c18e0e"),
    ("F.1.5/F.1.6", Mode::Ecb, KEY256, "f3eed1bdb5d2a03c064b5a7e3db181f8 591ccb10d410ed26dc5ba74a31362870 b6ed21b99ca6f4f9f153e7b1beafed1d 23304b7a39f9f3ff067d8d8f9e24ecc7"),
    ("F.2.1/F.2.2", Mode::Cbc, KEY128, "7649abac8119b246cee98e9b12e9197d 5086cb9b507219ee95db113a917678b2 73bed6b8e3c1743b7116e69e22229516 3ff1caa1681fac09120eca307586e1a7"),
    ("F.2.3/F.2.4", Mode::Cbc, KEY192, "4f021db243bc633d7178183a9fa071e8 b4d9ada9ad7dedf4e5e738763f69145a 571b242012fb7ae07fa9baac3df102e0 08b0e27988598881d920a9e64f5615cd"),
    ("F.2.5/F.2.6", Mode::Cbc, KEY256, "f58c4c04d6e5f1ba779eabfb5f7bfbd6 9cfc4e967edb808d679f777bc6702c7d 39f23369a9d9bacfa530e26304231461 b2eb05e2c39be9fcda6c19078c6a9d1b"),
    ("F.3.13/F.3.14", Mode::Cfb, KEY128, "3b3fd92eb72dad20333449f8e83cfb4a c8a64537a0b3a93fcde3cdad9f1ce58b 26751f67a3cbb140b1808cf187a4f4df c04b05357c5d1c0eeac4c66f9ff7f2e6"),
    ("F.3.15/F.3.16", Mode::Cfb, KEY192, "cdc80d6fddf18cab34c25909c99a4174 67ce7f7f81173621961a2b70171d3d7a 2e1e8a1dd59b88b1c8e60fed1efac4c9 c05f9f9ca9834fa042ae8fba584b09ff"),
    ("F.3.17/F.3.18", Mode::Cfb, KEY256, "dc7e84bfda79164b7ecd8486985d3860 39ffed143b28b1c832113c6331e5407b df10132415e54b92a13ed0a8267ae2f9 75a385741ab9cef82031623d55b1e471"),
    ("F.4.1/F.4.2", Mode::Ofb, KEY128, "3b3fd92eb72dad20333449f8e83cfb4a 7789508d16918f03f53c52dac54ed825 9740051e9c5fecf64344f7a82260edcc 304c6528f659c77866a510d9c1d6ae5e"),
    ("F.4.3/F.4.4", Mode::Ofb, KEY192, "cdc80d6fddf18cab34c25909c99a4174 fcc28b8d4c63837c09e81700c1100401 8d9a9aeac0f6596f559c6d4daf59a5f2 6d9f200857ca6c3e9cac524bd9acc92a"),
    ("F.4.5/F.4.6", Mode::Ofb, KEY256, "dc7e84bfda79164b7ecd8486985d3860 4febdc6740d20b3ac88f6ad82a4fb08d 71ab47a086e86eedf39d1c5bba97c408 0126141d67f37be8538f5a8be740e484"),
    ("F.5.1/F.5.2", Mode::Ctr, KEY128, "874d6191b620e3261bef6864990db6ce 9806f66b7970fdff8617187bb9fffdff 5ae4df3edbd5d35e5b4f09020db03eab 1e031dda2fbe03d1792170a0f3009cee"),
    ("F.5.3/F.5.4", Mode::Ctr, KEY192, "1abc932417521ca24f2b0459fe7e6e0b 090339ec0aa6faefd5ccc2c6f4ce8e94 1e36b26bd1ebc670d1bd1d665620abf7 4f78a7f6d29809585a97daec58c6b050"),
    ("F.5.5/F.5.6", Mode::Ctr, KEY256, "601ec313775789a5b7a7f504bbf3d228 f443e3ca4d62b59aca84e990cacaf5c5 2b0930daa23de94ce87017ba2d84988d dfc9c58db67aada613c2dd08457941a6"),
];

fn iv_for(mode: Mode) -> Option<[u8; 16]> {
    match mode {
        Mode::Ecb => None,
        Mode::Ctr => Some(h(CTR0).try_into().unwrap()),
        _ => Some(h(IV).try_into().unwrap()),
    }
}

#[test]
fn sp800_38a_all_modes_all_key_sizes() {
    let pt = h(SP800_38A_PT);
    for (section, mode, key, ct) in SP800_38A {
        let key = Key::new(&h(key)).unwrap();
        let ct = h(ct);
        let enc = apply(
            &key,
            mode,
            Direction::Encrypt,
            iv_for(mode),
            Padding::None,
            &pt,
        )
        .unwrap();
        assert_eq!(enc, ct, "SP 800-38A {section} encrypt");
        let dec = apply(
            &key,
            mode,
            Direction::Decrypt,
            iv_for(mode),
            Padding::None,
            &ct,
        )
        .unwrap();
        assert_eq!(dec, pt, "SP 800-38A {section} decrypt");
        for kern in kernel::aes_kernels() {
            let enc = apply_at(kern, &key, mode, Direction::Encrypt, iv_for(mode), &pt);
            assert_eq!(enc, ct, "{kern} SP 800-38A {section} encrypt");
            let dec = apply_at(kern, &key, mode, Direction::Decrypt, iv_for(mode), &ct);
            assert_eq!(dec, pt, "{kern} SP 800-38A {section} decrypt");
        }
    }
}

/// Every split of the 64-byte message into two chunks, and byte-at-a-time, gives the vector,
/// on every kernel.
#[test]
fn sp800_38a_any_chunking_gives_the_same_bytes() {
    let pt = h(SP800_38A_PT);
    for ((section, mode, key, ct), kern) in SP800_38A
        .into_iter()
        .flat_map(|v| kernel::aes_kernels().into_iter().map(move |k| (v, k)))
    {
        let key = Key::new(&h(key)).unwrap();
        let ct = h(ct);
        for (direction, input, want) in [
            (Direction::Encrypt, &pt, &ct),
            (Direction::Decrypt, &ct, &pt),
        ] {
            let mut stream = stream_at(kern, &key, mode, direction, iv_for(mode));
            for cut in 0..=input.len() {
                let mut out = Vec::new();
                stream.push(&input[..cut], &mut out).unwrap();
                stream.push(&input[cut..], &mut out).unwrap();
                stream.finish(&mut out).unwrap();
                assert_eq!(&out, want, "{kern} {section} {direction:?} split at {cut}");
                stream.restart(iv_for(mode)).unwrap();
            }
            let mut out = Vec::new();
            for b in input.chunks(1) {
                stream.push(b, &mut out).unwrap();
            }
            stream.finish(&mut out).unwrap();
            assert_eq!(&out, want, "{kern} {section} {direction:?} byte at a time");
        }
    }
}

#[test]
fn gcm_spec_test_cases_13_to_16() {
    use aes_gcm::aead::AeadInOut;
    use aes_gcm::{Aes256Gcm, KeyInit};
    let k15 = "feffe9928665731c6d6a8f9467308308feffe9928665731c6d6a8f9467308308";
    let p15 = "d9313225f88406e5a55909c5aff5269a86a7a9531534f7da2e4c303d8a318a72\
               1c3c0c95956809532fcf0e2449a6b525b16aedf5aa0de657ba637b391aafd255";
    let c15 = "522dc1f099567d07f47f37a32a84427d643a8cdcbfe5c0c97598a2bd2555d1aa\
               8cb08e48590dbb3da7b08b1056828838c5f61e6393ba7a0abcc9f662898015ad";
    let cases = [
        (
            "13",
            "00".repeat(32),
            "00".repeat(12),
            String::new(),
            String::new(),
            String::new(),
            "530f8afbc74536b9a963b4f1c4cb738b",
        ),
        (
            "14",
            "00".repeat(32),
            "00".repeat(12),
            "00".repeat(16),
            String::new(),
            "cea7403d4d606b6e074ec5d3baf39d18".into(),
            "d0d1c8a799996bf0265b98b5d48ab919",
        ),
        (
            "15",
            k15.into(),
            "cafebabefacedbaddecaf888".into(),
            p15.into(),
            String::new(),
            c15.into(),
            "b094dac5d93471bdec1a502270e3cc6c",
        ),
        (
            "16",
            k15.into(),
            "cafebabefacedbaddecaf888".into(),
            p15[..120].into(),
            "feedfacedeadbeeffeedfacedeadbeefabaddad2".into(),
            c15[..120].into(),
            "76fc6ece0f4e1768cddf8853bb2d551b",
        ),
    ];
    for (case, key, nonce, pt, aad, ct, tag) in cases {
        let gcm = Aes256Gcm::new_from_slice(&h(&key)).unwrap();
        let nonce: [u8; 12] = h(&nonce).try_into().unwrap();
        let mut buf = h(&pt);
        let got_tag = gcm
            .encrypt_inout_detached(&nonce.into(), &h(&aad), (&mut buf[..]).into())
            .unwrap();
        assert_eq!(buf, h(&ct), "GCM test case {case} ciphertext");
        assert_eq!(got_tag.to_vec(), h(tag), "GCM test case {case} tag");
        let tag: [u8; 16] = h(tag).try_into().unwrap();
        gcm.decrypt_inout_detached(&nonce.into(), &h(&aad), (&mut buf[..]).into(), &tag.into())
            .unwrap();
        assert_eq!(buf, h(&pt));
        // The crate's own GCM on every kernel: the same ciphertext and tag, and it opens.
        let key = Key::new(&h(&key)).unwrap();
        for kern in kernel::aes_kernels() {
            let ours = Gcm::with_kernel(&key, kern).unwrap().unwrap();
            let mut buf = h(&pt);
            let got_tag = ours.encrypt(&nonce, &h(&aad), &mut buf).unwrap();
            assert_eq!(buf, h(&ct), "{kern} GCM test case {case} ciphertext");
            assert_eq!(got_tag, tag, "{kern} GCM test case {case} tag");
            assert!(
                ours.decrypt(&nonce, &h(&aad), &mut buf, &tag),
                "{kern} {case}"
            );
            assert_eq!(buf, h(&pt), "{kern} GCM test case {case} decrypt");
        }
    }
}
