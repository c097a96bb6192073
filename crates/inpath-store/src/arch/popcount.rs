//! The distance kernels, each beside its portable twin: [`portable_items`] (`u64::count_ones`),
//! [`popcnt_items`] (the same loop compiled with POPCNT), [`avx2_items`] (`vpshufb` nibble
//! table) and [`avx512_items`] (VPOPCNTDQ). A leaf: [`super::distances`] picks one for the
//! kernel the CPU runs and calls it with `NQ` queries; the vector ones are called only after
//! [`super::HammingKernel::runs_here`] checked the CPU.

/// The scalar loop: every item word XORed with each query's word and counted.
#[inline(always)]
fn scalar_items<const NQ: usize>(items: &[u8], is: usize, queries: &[u8], out: &mut [u32]) {
    let words = is / 8;
    let q: [&[u8]; NQ] = std::array::from_fn(|j| &queries[j * is..(j + 1) * is]);
    for (item, out) in items.chunks_exact(is).zip(out.chunks_exact_mut(NQ)) {
        let mut d = [0u32; NQ];
        for (w, x) in item[..words * 8].chunks_exact(8).enumerate() {
            let x = u64::from_le_bytes(x.try_into().expect("8 bytes"));
            for j in 0..NQ {
                let y = u64::from_le_bytes(q[j][w * 8..w * 8 + 8].try_into().expect("8 bytes"));
                d[j] += (x ^ y).count_ones();
            }
        }
        for (j, d) in d.iter_mut().enumerate() {
            *d += tail(&item[words * 8..], &q[j][words * 8..]);
        }
        out.copy_from_slice(&d);
    }
}

/// Bits that differ in two equal-length byte strings, one byte at a time.
#[inline(always)]
fn tail(a: &[u8], b: &[u8]) -> u32 {
    a.iter().zip(b).map(|(x, y)| (x ^ y).count_ones()).sum()
}

/// Words `from..` (to the last whole word) and the tail bytes, for one item and one query.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn scalar_rest(item: &[u8], query: &[u8], from: usize) -> u32 {
    let words = item.len() / 8;
    let mut d = 0;
    for w in from..words {
        let x = u64::from_le_bytes(item[w * 8..w * 8 + 8].try_into().expect("8 bytes"));
        let y = u64::from_le_bytes(query[w * 8..w * 8 + 8].try_into().expect("8 bytes"));
        d += (x ^ y).count_ones();
    }
    d + tail(&item[words * 8..], &query[words * 8..])
}

pub(super) fn portable_items<const NQ: usize>(
    items: &[u8],
    is: usize,
    queries: &[u8],
    out: &mut [u32],
) {
    scalar_items::<NQ>(items, is, queries, out)
}

#[cfg(target_arch = "x86_64")]
pub(super) fn popcnt_items<const NQ: usize>(
    items: &[u8],
    is: usize,
    queries: &[u8],
    out: &mut [u32],
) {
    // SAFETY: `super::distances` calls this only when `HammingKernel::Popcnt.runs_here()`, which
    // checked that the CPU has POPCNT.
    unsafe { popcnt_items_tf::<NQ>(items, is, queries, out) }
}

/// [`scalar_items`] compiled with POPCNT, so `count_ones` is one instruction.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "popcnt")]
fn popcnt_items_tf<const NQ: usize>(items: &[u8], is: usize, queries: &[u8], out: &mut [u32]) {
    scalar_items::<NQ>(items, is, queries, out)
}

#[cfg(target_arch = "x86_64")]
pub(super) fn avx2_items<const NQ: usize>(
    items: &[u8],
    is: usize,
    queries: &[u8],
    out: &mut [u32],
) {
    // SAFETY: `super::distances` calls this only when `HammingKernel::Avx2.runs_here()`, which
    // checked that the CPU has AVX2 and POPCNT.
    unsafe { avx2_items_tf::<NQ>(items, is, queries, out) }
}

/// AVX2: per 32-byte vector of an item, for each query: XOR, the popcount of each byte by two
/// `vpshufb` lookups in a 16-entry nibble table, added into a byte accumulator per query;
/// every 31 vectors (31 · 8 = 248 < 256, so bytes never overflow) `vpsadbw` folds the bytes
/// into four 64-bit sums. The words past the last whole vector go through POPCNT.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,popcnt")]
fn avx2_items_tf<const NQ: usize>(items: &[u8], is: usize, queries: &[u8], out: &mut [u32]) {
    use std::arch::x86_64::*;
    let vecs = is / 32;
    assert!(queries.len() >= NQ * is);
    let lut = _mm256_setr_epi8(
        0, 1, 1, 2, 1, 2, 2, 3, 1, 2, 2, 3, 2, 3, 3, 4, 0, 1, 1, 2, 1, 2, 2, 3, 1, 2, 2, 3, 2, 3,
        3, 4,
    );
    let low = _mm256_set1_epi8(0x0f);
    let zero = _mm256_setzero_si256();
    let qp = queries.as_ptr();
    for (item, out) in items.chunks_exact(is).zip(out.chunks_exact_mut(NQ)) {
        let ip = item.as_ptr();
        let mut total = [zero; NQ];
        let mut v = 0;
        while v < vecs {
            let end = (v + 31).min(vecs);
            let mut acc = [zero; NQ];
            while v < end {
                // SAFETY: v < vecs = is / 32, so bytes v·32..v·32+32 lie inside the item
                // (is bytes); unaligned loads.
                let x = unsafe { _mm256_loadu_si256(ip.add(v * 32).cast()) };
                for (j, acc) in acc.iter_mut().enumerate() {
                    // SAFETY: j < NQ and v·32 + 32 ≤ is, so the load lies inside query j
                    // (bytes j·is..(j+1)·is of `queries`, which holds NQ·is, asserted above).
                    let y = unsafe { _mm256_loadu_si256(qp.add(j * is + v * 32).cast()) };
                    let d = _mm256_xor_si256(x, y);
                    let lo = _mm256_and_si256(d, low);
                    let hi = _mm256_and_si256(_mm256_srli_epi16::<4>(d), low);
                    let c =
                        _mm256_add_epi8(_mm256_shuffle_epi8(lut, lo), _mm256_shuffle_epi8(lut, hi));
                    *acc = _mm256_add_epi8(*acc, c);
                }
                v += 1;
            }
            for (t, a) in total.iter_mut().zip(acc) {
                *t = _mm256_add_epi64(*t, _mm256_sad_epu8(a, zero));
            }
        }
        for (j, (o, t)) in out.iter_mut().zip(total).enumerate() {
            let s = _mm_add_epi64(_mm256_castsi256_si128(t), _mm256_extracti128_si256::<1>(t));
            let s = _mm_cvtsi128_si64(_mm_add_epi64(s, _mm_unpackhi_epi64(s, s))) as u64;
            *o = s as u32 + scalar_rest(item, &queries[j * is..(j + 1) * is], vecs * 4);
        }
    }
}

#[cfg(target_arch = "x86_64")]
pub(super) fn avx512_items<const NQ: usize>(
    items: &[u8],
    is: usize,
    queries: &[u8],
    out: &mut [u32],
) {
    // SAFETY: `super::distances` calls this only when `HammingKernel::Avx512.runs_here()`, which
    // checked that the CPU has AVX-512 F, VPOPCNTDQ and POPCNT.
    unsafe { avx512_items_tf::<NQ>(items, is, queries, out) }
}

/// AVX-512 VPOPCNTDQ: per 64-byte vector of an item, for each query: XOR, `vpopcntq`,
/// `vpaddq` into a 64-bit sum per query. The words past the last whole vector go through
/// POPCNT.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512vpopcntdq,popcnt")]
fn avx512_items_tf<const NQ: usize>(items: &[u8], is: usize, queries: &[u8], out: &mut [u32]) {
    use std::arch::x86_64::*;
    let vecs = is / 64;
    assert!(queries.len() >= NQ * is);
    let qp = queries.as_ptr();
    for (item, out) in items.chunks_exact(is).zip(out.chunks_exact_mut(NQ)) {
        let ip = item.as_ptr();
        let mut acc = [_mm512_setzero_si512(); NQ];
        for v in 0..vecs {
            // SAFETY: v < vecs = is / 64, so bytes v·64..v·64+64 lie inside the item.
            let x = unsafe { _mm512_loadu_si512(ip.add(v * 64).cast()) };
            for (j, acc) in acc.iter_mut().enumerate() {
                // SAFETY: j < NQ and v·64 + 64 ≤ is: inside query j (asserted NQ·is bytes).
                let y = unsafe { _mm512_loadu_si512(qp.add(j * is + v * 64).cast()) };
                *acc = _mm512_add_epi64(*acc, _mm512_popcnt_epi64(_mm512_xor_si512(x, y)));
            }
        }
        for (j, (o, a)) in out.iter_mut().zip(acc).enumerate() {
            let s = _mm512_reduce_add_epi64(a) as u64;
            *o = s as u32 + scalar_rest(item, &queries[j * is..(j + 1) * is], vecs * 8);
        }
    }
}
