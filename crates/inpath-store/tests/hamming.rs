//! Every Hamming kernel this CPU runs (under `INPATH_ISA`) against the scalar reference and a
//! brute-force top-k (numpy's stable argsort: ties to the lowest index), for odd item sizes
//! and query counts that fill, miss and overrun the query block.

use inpath_store::hamming::{distance, QUERY_BLOCK};
use inpath_store::kernel::run_slice;
use inpath_store::{Hamming, HammingKernel, Neighbour};

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
}

/// Items: random ones, repeats of a few (ties), all-zero and all-one ones (extreme distances).
fn items(is: usize, n: usize, r: &mut Rng) -> Vec<u8> {
    let pool: Vec<Vec<u8>> = (0..3).map(|_| r.bytes(is)).collect();
    (0..n)
        .flat_map(|i| match r.next() % 6 {
            0 | 1 => pool[(r.next() % 3) as usize].clone(),
            2 if i % 2 == 0 => vec![0; is],
            2 => vec![0xff; is],
            _ => r.bytes(is),
        })
        .collect()
}

fn brute_force(items: &[u8], queries: &[u8], is: usize, k: usize) -> Vec<Vec<Neighbour>> {
    queries
        .chunks_exact(is)
        .map(|q| {
            let mut all: Vec<Neighbour> = items
                .chunks_exact(is)
                .enumerate()
                .map(|(i, item)| Neighbour {
                    distance: distance(item, q),
                    index: i as u64,
                })
                .collect();
            // Stable sort by distance: equal distances keep index order (numpy's
            // argsort(kind="stable")).
            all.sort_by_key(|n| n.distance);
            all.truncate(k);
            all
        })
        .collect()
}

#[test]
fn every_kernel_here_equals_the_scalar_reference() {
    let kernels = HammingKernel::available();
    eprintln!(
        "Hamming kernels here: {:?} (best {})",
        kernels,
        HammingKernel::best()
    );
    assert_eq!(kernels[0], HammingKernel::Portable);
    assert!(kernels.contains(&HammingKernel::best()));
    for is in [1usize, 7, 8, 33, 64, 100, 8192] {
        let mut r = Rng(is as u64 * 31 + 7);
        let n = if is >= 8192 { 24 } else { 150 };
        let items = items(is, n, &mut r);
        for nq in [1usize, 3, 8, 9, 16, 17] {
            // Queries: random, an item itself (distance 0), an item's complement.
            let mut queries = r.bytes(nq * is);
            queries[..is].copy_from_slice(&items[is..2 * is]);
            if nq > 1 {
                for (q, x) in queries[is..2 * is].iter_mut().zip(&items[..is]) {
                    *q = !x;
                }
            }
            for k in [1usize, 5, n + 3] {
                let want = brute_force(&items, &queries, is, k);
                for &kernel in &kernels {
                    let h = Hamming::new(is, queries.clone(), k)
                        .unwrap()
                        .with_kernel(kernel)
                        .unwrap();
                    for (lanes, chunk) in [(1, 1 << 20), (3, 777), (2, 1)] {
                        let got = run_slice(&items, &h, lanes, 512, chunk);
                        assert_eq!(
                            got.queries, want,
                            "kernel {kernel} item size {is} queries {nq} k {k} lanes {lanes} chunk {chunk}"
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn kernels_agree_on_every_distance_up_to_large_counts() {
    // Items long enough that the AVX2 byte accumulators fold many times (31-vector rounds)
    // and distances reach tens of thousands of bits.
    for is in [992usize, 1000, 65536 + 40] {
        let mut r = Rng(is as u64);
        let items: Vec<u8> = [vec![0u8; is], vec![0xff; is], r.bytes(is * 3)].concat();
        let queries: Vec<u8> = [vec![0u8; is], r.bytes(is * (QUERY_BLOCK + 1))].concat();
        let n = items.len() / is;
        let want = brute_force(&items, &queries, is, n);
        for kernel in HammingKernel::available() {
            let h = Hamming::new(is, queries.clone(), n)
                .unwrap()
                .with_kernel(kernel)
                .unwrap();
            let got = run_slice(&items, &h, 1, 4096, 1 << 20);
            assert_eq!(got.queries, want, "kernel {kernel} item size {is}");
        }
        assert_eq!(want[0][n - 1].distance, is as u32 * 8);
    }
}

#[test]
fn kernels_outside_the_cap_are_refused_with_the_valid_ones() {
    for kernel in HammingKernel::ALL {
        let h = Hamming::new(8, vec![0; 8], 1).unwrap().with_kernel(kernel);
        assert_eq!(h.is_ok(), kernel.runs_here(), "{kernel}");
        if let Err(e) = h {
            assert!(e.to_string().contains("portable"), "{e}");
        }
        assert_eq!(HammingKernel::parse(kernel.name()), Some(kernel));
    }
}

#[test]
fn bad_parameters_are_errors() {
    let msg = |r: inpath_store::Result<Hamming>| r.unwrap_err().to_string();
    assert!(msg(Hamming::new(0, vec![0; 8], 1)).contains("item size"));
    assert!(msg(Hamming::new(8, vec![0; 12], 1)).contains("multiple of the item size"));
    assert!(msg(Hamming::new(8, vec![], 1)).contains("queries"));
    assert!(msg(Hamming::new(8, vec![0; 8], 0)).contains("k = 0"));
    let e = Hamming::new(4, vec![0; 4], 3)
        .unwrap()
        .check_size(10)
        .unwrap_err();
    assert!(
        e.to_string().contains("divisor of the handle's size"),
        "{e}"
    );
}

/// Kernel speeds on 8 KiB items in memory (not a test: `cargo test --release -p inpath-store
/// --test hamming -- --ignored --nocapture`).
#[test]
#[ignore]
fn kernel_speeds() {
    let is = 8192;
    let mut r = Rng(5);
    let items = r.bytes(is * 8192); // 64 MiB
    for nq in [1usize, 8, 16] {
        let queries = r.bytes(is * nq);
        for kernel in HammingKernel::available() {
            let h = Hamming::new(is, queries.clone(), 1)
                .unwrap()
                .with_kernel(kernel)
                .unwrap();
            let mut best = f64::MAX;
            for _ in 0..5 {
                let t = std::time::Instant::now();
                std::hint::black_box(run_slice(&items, &h, 1, 8192, 1 << 20));
                best = best.min(t.elapsed().as_secs_f64());
            }
            let gb = (items.len() * nq) as f64 / 1e9;
            eprintln!(
                "{nq:>2} queries {:<18} {:7.2} ms  {:6.2} GB/s of item-query bytes",
                kernel.name(),
                best * 1e3,
                gb / best
            );
        }
    }
}
