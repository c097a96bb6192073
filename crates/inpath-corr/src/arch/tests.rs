//! Kernel checks that need the choice made here: each kernel runs only where [`super`] would
//! choose it. (Every level against the portable kernels, through the engine, is the `corr`
//! integration suite; each leaf's own twins are compared in the leaf.)

use super::*;
use crate::stats::Statistics;
use rand::{Rng, SeedableRng};

/// The fast tiles and the biased safe tiles give the same statistics wherever the fast
/// ones may run (no lane of all -32768 digits), for every type and chunking; on every CPU
/// with AVX2 that `INPATH_ISA` leaves at the AVX2 level or above (AVX-512 ones included).
#[test]
fn safe_and_fast_tiles_agree() {
    if !avx2_i16(DType::U32, Level::Avx2) {
        return;
    }
    let mut rng = rand::rngs::StdRng::seed_from_u64(5);
    for dtype in [DType::U16, DType::I16, DType::U32, DType::I32] {
        for (m, n) in [(3, 9_001), (16, 70_001), (9, 257)] {
            let w = dtype.width();
            let bytes: Vec<u8> = (0..n * m * w).map(|_| rng.gen()).collect();
            let run = |safe: bool, chunk: usize| {
                let mut stats = Statistics::new(dtype, crate::default_names(m)).unwrap();
                let mut acc = Madd16Accumulator::new(dtype, m);
                acc.force_safe = safe;
                for part in bytes.chunks(chunk * m * w) {
                    acc.push_rows(part, &mut stats).unwrap();
                }
                acc.close(&mut stats).unwrap();
                stats
            };
            let fast = run(false, n);
            assert_eq!(run(true, n), fast, "{dtype} M={m} N={n}");
            assert_eq!(run(true, 7), fast, "{dtype} M={m} N={n} chunks of 7 rows");
            assert_eq!(run(false, 3), fast, "{dtype} M={m} N={n} chunks of 3 rows");
        }
    }
}
