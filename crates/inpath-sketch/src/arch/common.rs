//! What the dispatcher and every kernel leaf share: the state arrays a kernel updates, the job
//! and its items, the resolved row layout and the batch size.

use crate::hash::HashMode;
use crate::params::{Params, Parts, Slicing};

/// Items hashed per batch before the sketch rows are updated.
pub const BATCH: usize = 8192;

/// The state arrays a kernel updates.
pub(crate) struct Target<'a> {
    pub hll: &'a mut [u8],
    pub cm: &'a mut [i16],
    /// Fast-AGMS hot counts split by sign: per row, the −1 counts then the +1 counts.
    pub agms: &'a mut [i16],
}

/// What to do with the items.
#[derive(Clone, Copy)]
pub(crate) struct Job {
    pub layout: Layout,
    pub parts: Parts,
    pub mode: HashMode,
    pub seed: u64,
}

/// The items of one call.
#[derive(Clone, Copy)]
pub(crate) enum Items<'a> {
    /// Little-endian u32 items.
    U32(&'a [u8]),
    /// Little-endian u64 items.
    U64(&'a [u8]),
    /// Hashes already computed (byte values).
    Hashes(&'a [u64], &'a [u64]),
}

/// A little-endian item of `width` (4 or 8) bytes.
#[inline(always)]
pub(super) fn read_item(item: &[u8], width: usize) -> u64 {
    if width == 4 {
        u32::from_le_bytes(item.try_into().expect("4 bytes")) as u64
    } else {
        u64::from_le_bytes(item.try_into().expect("8 bytes"))
    }
}

/// Where each row's bits are, resolved for the kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Layout {
    pub(super) hll_p: u32,
    pub(super) cm_p: u32,
    pub(super) cm_rows: usize,
    pub(super) agms_p: u32,
    pub(super) agms_rows: usize,
    pub(super) cm_rows_per_block: u32,
    pub(super) agms_rows_per_block: u32,
}

impl Layout {
    /// P_HLL = 16, Count-Min 6×13, Fast-AGMS 6×13: all rows in the first 128 bits.
    pub(super) const DEFAULT: Layout = Layout {
        hll_p: 16,
        cm_p: 13,
        cm_rows: 6,
        agms_p: 13,
        agms_rows: 6,
        cm_rows_per_block: 128 / 13,
        agms_rows_per_block: 128 / 14,
    };

    pub(crate) fn new(params: &Params, slicing: &Slicing) -> Layout {
        Layout {
            hll_p: params.hll_p as u32,
            cm_p: params.cm_p as u32,
            cm_rows: params.cm_rows as usize,
            agms_p: params.agms_p as u32,
            agms_rows: params.agms_rows as usize,
            cm_rows_per_block: slicing.cm_rows_per_block,
            agms_rows_per_block: slicing.agms_rows_per_block,
        }
    }
}
