//! The kernel itself: one call's items hashed and applied to the state, written once and
//! compiled three times. [`portable`] is the safe twin, built for the target's baseline;
//! `v3` (x86-64-v3: AVX2, BMI2's one-micro-op variable shifts, LZCNT) and `v4` (x86-64-v4:
//! AVX-512, with its vector LZCNT for the HyperLogLog ranks) are the same loops compiled for
//! those levels. Only [`super`] calls them, after checking the CPU.
//!
//! Within each version, the SKT default layout (P_HLL = 16, 6×13, 6×13) has its own copy with
//! every shift a constant. A sketch keeping HyperLogLog alone (`--sketches hll`) takes its own
//! loop: only the high half of each hash, no counter rows. Without AVX-512's vector LZCNT the
//! HyperLogLog ranks are taken in the same scalar pass that updates the registers.

#![allow(unsafe_code)]

use super::common::{Items, Job, Layout, Target, BATCH};
use super::hll::{hll_buckets_and_ranks, hll_only, hll_update};
use super::rows::{apply, hash_and_apply, Scratch};
use crate::hash::{self, HashMode};
use crate::params::Parts;

/// The baseline version (the safe scalar twin of `v3` and `v4`).
pub(super) fn portable(target: Target<'_>, job: &Job, items: Items<'_>) -> Option<(u64, u64)> {
    run_generic::<false>(target, job, items)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,bmi1,bmi2,lzcnt,fma,popcnt")]
pub(super) unsafe fn v3(target: Target<'_>, job: &Job, items: Items<'_>) -> Option<(u64, u64)> {
    run_generic::<false>(target, job, items)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(
    enable = "avx2,bmi1,bmi2,lzcnt,fma,popcnt,avx512f,avx512bw,avx512cd,avx512dq,avx512vl"
)]
pub(super) unsafe fn v4(target: Target<'_>, job: &Job, items: Items<'_>) -> Option<(u64, u64)> {
    run_generic::<true>(target, job, items)
}

#[inline(always)]
/// `VECTOR_LZCNT`: the target has a vector leading-zero count (AVX-512 CD), so HyperLogLog
/// ranks are taken in a vectorised pass; elsewhere a fused scalar pass (LZCNT) is faster.
fn run_generic<const VECTOR_LZCNT: bool>(
    target: Target<'_>,
    job: &Job,
    items: Items<'_>,
) -> Option<(u64, u64)> {
    if job.layout == Layout::DEFAULT {
        body::<VECTOR_LZCNT>(target, &Layout::DEFAULT, job, items)
    } else {
        body::<VECTOR_LZCNT>(target, &job.layout, job, items)
    }
}

#[inline(always)]
fn body<const VECTOR_LZCNT: bool>(
    mut target: Target<'_>,
    layout: &Layout,
    job: &Job,
    items: Items<'_>,
) -> Option<(u64, u64)> {
    let seed = job.seed;
    if job.parts == Parts::HLL {
        // HyperLogLog alone: no counter rows, so no batch of three hash windows either.
        return match (items, job.mode) {
            (Items::U32(bytes), HashMode::Fast) => hll_only(
                target.hll,
                layout.hll_p,
                bytes,
                4,
                |v| hash::xxh3_128_small_high_limbs(v as u32, v as u32, 4, seed),
                |v| hash::xxh3_128_small(v as u32, v as u32, 4, seed),
            ),
            (Items::U64(bytes), HashMode::Fast) => hll_only(
                target.hll,
                layout.hll_p,
                bytes,
                8,
                |v| hash::xxh3_128_small_high_limbs(v as u32, (v >> 32) as u32, 8, seed),
                |v| hash::xxh3_128_small(v as u32, (v >> 32) as u32, 8, seed),
            ),
            (Items::U32(bytes), HashMode::Compat) => hll_only(
                target.hll,
                layout.hll_p,
                bytes,
                4,
                |v| hash::murmur3_x64_128_small(v, 4, seed as u32).1,
                |v| hash::murmur3_x64_128_small(v, 4, seed as u32),
            ),
            (Items::U64(bytes), HashMode::Compat) => hll_only(
                target.hll,
                layout.hll_p,
                bytes,
                8,
                |v| hash::murmur3_x64_128_small(v, 8, seed as u32).1,
                |v| hash::murmur3_x64_128_small(v, 8, seed as u32),
            ),
            (Items::Hashes(lo, hi), _) => {
                let (mut bucket, mut rank) = (vec![0u32; BATCH], vec![0u8; BATCH]);
                for (lo, hi) in lo.chunks(BATCH).zip(hi.chunks(BATCH)) {
                    let n = lo.len();
                    hll_buckets_and_ranks(layout.hll_p, lo, hi, &mut bucket[..n], &mut rank[..n]);
                    hll_update(target.hll, &bucket[..n], &rank[..n]);
                }
                None
            }
        };
    }
    // The batch buffers live as long as the thread: made per call they were allocated and
    // returned to the OS up to 16 times per 4 MiB (once per hot-counter fold), and with two
    // lanes each trim's TLB shootdown interrupted the other lane (2 threads, all three
    // sketches ran markedly slower than in a process whose allocator had stopped trimming).
    // Taken out of the thread-local and put back, not used inside a closure, so that the work
    // stays inlined in the caller compiled for this CPU's features.
    let mut scratch = SCRATCH.take().unwrap_or_else(Scratch::new);
    let range = run_with_scratch::<VECTOR_LZCNT>(&mut target, layout, job, items, &mut scratch);
    SCRATCH.set(Some(scratch));
    range
}

thread_local! {
    static SCRATCH: std::cell::Cell<Option<Scratch>> = const { std::cell::Cell::new(None) };
}

#[inline(always)]
fn run_with_scratch<const VECTOR_LZCNT: bool>(
    target: &mut Target<'_>,
    layout: &Layout,
    job: &Job,
    items: Items<'_>,
    scratch: &mut Scratch,
) -> Option<(u64, u64)> {
    let seed = job.seed;
    match (items, job.mode) {
        (Items::U32(bytes), HashMode::Fast) => {
            hash_and_apply::<VECTOR_LZCNT>(target, layout, job.parts, scratch, bytes, 4, |v| {
                hash::xxh3_128_small_limbs(v as u32, v as u32, 4, seed)
            })
        }
        (Items::U32(bytes), HashMode::Compat) => {
            hash_and_apply::<VECTOR_LZCNT>(target, layout, job.parts, scratch, bytes, 4, |v| {
                hash::murmur3_x64_128_small(v, 4, seed as u32)
            })
        }
        (Items::U64(bytes), HashMode::Fast) => {
            hash_and_apply::<VECTOR_LZCNT>(target, layout, job.parts, scratch, bytes, 8, |v| {
                hash::xxh3_128_small_limbs(v as u32, (v >> 32) as u32, 8, seed)
            })
        }
        (Items::U64(bytes), HashMode::Compat) => {
            hash_and_apply::<VECTOR_LZCNT>(target, layout, job.parts, scratch, bytes, 8, |v| {
                hash::murmur3_x64_128_small(v, 8, seed as u32)
            })
        }
        (Items::Hashes(lo, hi), _) => {
            for (lo, hi) in lo.chunks(BATCH).zip(hi.chunks(BATCH)) {
                let mid = &mut scratch.mid[..lo.len()];
                for ((m, &l), &h) in mid.iter_mut().zip(lo).zip(hi) {
                    *m = (l >> 32) | (h << 32);
                }
                apply::<VECTOR_LZCNT>(target, layout, job.parts, lo, mid, hi, &mut scratch.ranks);
            }
            None
        }
    }
}
