//! The multi-page CBC kernel against the plain library CBC, for every key size.

use inpath_seal::aes::{self, AnyAes, Block, Key};
use inpath_seal::gen;
use inpath_seal::kernel::cbc_encrypt_lanes;

#[test]
fn interleaved_cbc_equals_library_cbc_page_by_page() {
    for bits in [128u32, 192, 256] {
        let key = Key::new(&gen::random_bytes(bits as usize / 8, u64::from(bits))).unwrap();
        let aes = AnyAes::new(&key);
        for lanes in [1usize, 2, 7, 8, 9, 17] {
            // Uneven lengths, some empty.
            let pages: Vec<Vec<u8>> = (0..lanes)
                .map(|i| gen::random_bytes(16 * ((i * 37) % 300), i as u64))
                .collect();
            let ivs: Vec<[u8; 16]> = (0..lanes)
                .map(|i| gen::random_bytes(16, 1000 + i as u64).try_into().unwrap())
                .collect();
            let mut expected = pages.clone();
            for (p, iv) in expected.iter_mut().zip(&ivs) {
                aes::cbc_encrypt(&aes, iv, p);
            }
            let mut got = pages.clone();
            let mut refs: Vec<(Block, &mut [u8])> = got
                .iter_mut()
                .zip(&ivs)
                .map(|(p, iv)| (Block::from(*iv), p.as_mut_slice()))
                .collect();
            cbc_encrypt_lanes(&aes, &mut refs);
            assert_eq!(got, expected, "AES-{bits}, {lanes} lanes");
        }
    }
}

#[test]
fn batched_ctr_equals_library_ctr_including_counter_wrap() {
    for bits in [128u32, 192, 256] {
        let key = Key::new(&gen::random_bytes(bits as usize / 8, u64::from(bits) + 7)).unwrap();
        let aes = AnyAes::new(&key);
        let mut ivs: Vec<[u8; 16]> = vec![
            [0u8; 16],
            [0xff; 16],
            gen::random_bytes(16, 5).try_into().unwrap(),
        ];
        let mut near_wrap = [0xffu8; 16];
        near_wrap[15] = 0xf0; // wraps the low 64 bits and the whole 128 bits within a few blocks
        ivs.push(near_wrap);
        for iv in ivs {
            for len in [0usize, 1, 15, 16, 17, 2047, 2048, 2049, 4096, 100_000] {
                let data = gen::random_bytes(len, len as u64);
                let mut want = data.clone();
                aes::ctr_apply_library(&aes, &iv, &mut want);
                let mut got = data.clone();
                inpath_seal::kernel::ctr_apply(&aes, &iv, &mut got);
                assert_eq!(got, want, "AES-{bits} len {len}");
            }
        }
    }
}
