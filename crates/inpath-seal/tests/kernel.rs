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
