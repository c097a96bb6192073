//! The shared key schedule against FIPS-197, once, and every vector kernel this CPU has
//! through the dispatcher (the modes against the RustCrypto crates, on every kernel, are in
//! `tests/seal/kernels.rs`).

use super::common::RoundKeys;
use super::{aes_kernels, AesKernel, Keys};

fn hex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

/// FIPS-197 Appendix A key expansion (first, an inner and the last round key) for AES-128,
/// AES-192 and AES-256: the one schedule every kernel's keys come from.
#[test]
fn key_expansion_matches_fips_197_appendix_a() {
    if !super::common::aes_ni() {
        eprintln!("skipped: no AES-NI on this CPU");
        return;
    }
    let cases = [
        (
            "2b7e151628aed2a6abf7158809cf4f3c",
            1,
            "a0fafe1788542cb123a339392a6c7605",
            "d014f9a8c9ee2589e13f0cc8b6630ca6",
        ),
        (
            "8e73b0f7da0e6452c810f32b809079e562f8ead2522c6b7b",
            1,
            "62f8ead2522c6b7bfe0c91f72402f5a5",
            "e98ba06f448c773c8ecc720401002202",
        ),
        (
            "603deb1015ca71be2b73aef0857d77811f352c073b6108d72d9810a30914dff4",
            2,
            "9ba354118e6925afa51a8b5f2067fcde",
            "fe4890d1e6188d0b046df344706c631e",
        ),
    ];
    for (key, r, round_r, last) in cases {
        let keys = RoundKeys::new(&hex(key)).unwrap();
        let rk = keys.encryption_keys();
        assert_eq!(rk.len(), hex(key).len() / 4 + 7);
        assert_eq!(rk[0].to_vec(), hex(key)[..16].to_vec(), "{key}");
        assert_eq!(rk[r].to_vec(), hex(round_r), "{key} round {r}");
        assert_eq!(rk[rk.len() - 1].to_vec(), hex(last), "{key} last round");
    }
}

/// FIPS-197 Appendix C.3 (AES-256 of 00112233..ff) through every vector kernel's ECB, three
/// copies (a whole register and a partial one for the wider kernels), and one block.
#[test]
fn every_kernel_matches_fips_197_appendix_c3() {
    let key = hex("000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f");
    let plain = hex("00112233445566778899aabbccddeeff");
    let cipher = hex("8ea2b7ca516745bfeafc49904b496089");
    for kernel in aes_kernels() {
        let Some(keys) = Keys::new(&key, kernel) else {
            assert_eq!(kernel, AesKernel::Library);
            continue;
        };
        assert_eq!(keys.kernel(), kernel);
        let mut data = plain.repeat(3);
        keys.ecb_encrypt(&mut data);
        assert_eq!(data, cipher.repeat(3), "{kernel}");
        keys.ecb_decrypt(&mut data);
        assert_eq!(data, plain.repeat(3), "{kernel}");
        let mut block: [u8; 16] = plain.clone().try_into().unwrap();
        keys.encrypt_block(&mut block);
        assert_eq!(block.to_vec(), cipher, "{kernel}");
    }
}

#[test]
fn wrong_key_lengths_are_refused() {
    for len in [0, 8, 15, 17, 31, 33] {
        assert!(RoundKeys::new(&vec![0u8; len]).is_none());
        for kernel in AesKernel::ALL {
            assert!(Keys::new(&vec![0u8; len], kernel).is_none(), "{kernel}");
        }
    }
}

/// A bad `INPATH_AES` is a typed error whose message names the value and the valid ones (the
/// CLI prints it and stops).
#[test]
fn a_bad_kernel_choice_names_the_value_and_the_valid_ones() {
    let e = super::EnvError {
        var: super::AES_ENV,
        value: "turbo".into(),
        expected: "an AES kernel; use library, aesni, vaes256 or vaes512",
    };
    let message = e.to_string();
    assert!(message.starts_with("INPATH_AES=\"turbo\""), "{message}");
    assert!(
        message.contains("use library, aesni, vaes256 or vaes512"),
        "{message}"
    );
    let _: &dyn std::error::Error = &e;
    for k in AesKernel::ALL {
        assert_eq!(AesKernel::parse(k.name()), Some(k));
        assert_eq!(AesKernel::parse(&k.name().to_uppercase()), Some(k));
    }
}
