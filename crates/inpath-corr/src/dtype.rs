//! The item types a stream may hold, and how each is split into exact `f64` limbs for the kernel.

use inpath_core::{Error, Result};

/// The type of every item of every stream (little-endian in binary layouts).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DType {
    /// Unsigned 8-bit integer (exact).
    U8,
    /// Unsigned 16-bit integer (exact).
    U16,
    /// Unsigned 32-bit integer (exact).
    U32,
    /// Unsigned 64-bit integer (exact, 256-bit product accumulators).
    U64,
    /// Signed 8-bit integer (exact).
    I8,
    /// Signed 16-bit integer (exact).
    I16,
    /// Signed 32-bit integer (exact).
    I32,
    /// Signed 64-bit integer (exact, 256-bit product accumulators).
    I64,
    /// IEEE 754 binary32 (products exact, sums in double-double).
    F32,
    /// IEEE 754 binary64 (sums in double-double).
    F64,
}

/// How the statistics of a type are held.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exactness {
    /// Exact integers, 128-bit product sums (8, 16 and 32-bit types).
    Int128,
    /// Exact integers, 256-bit product sums (64-bit types).
    Int256,
    /// Double-double floating point sums (f32, f64).
    DoubleDouble,
}

impl DType {
    /// Every type, in the order of their codes.
    pub const ALL: [DType; 10] = [
        DType::U8,
        DType::U16,
        DType::U32,
        DType::U64,
        DType::I8,
        DType::I16,
        DType::I32,
        DType::I64,
        DType::F32,
        DType::F64,
    ];

    /// Bytes per item.
    pub fn width(self) -> usize {
        match self {
            DType::U8 | DType::I8 => 1,
            DType::U16 | DType::I16 => 2,
            DType::U32 | DType::I32 | DType::F32 => 4,
            DType::U64 | DType::I64 | DType::F64 => 8,
        }
    }

    /// The name used on the command line and in files (`u32`, `f64`...).
    pub fn name(self) -> &'static str {
        match self {
            DType::U8 => "u8",
            DType::U16 => "u16",
            DType::U32 => "u32",
            DType::U64 => "u64",
            DType::I8 => "i8",
            DType::I16 => "i16",
            DType::I32 => "i32",
            DType::I64 => "i64",
            DType::F32 => "f32",
            DType::F64 => "f64",
        }
    }

    /// Parses a type name.
    pub fn parse(name: &str) -> Result<DType> {
        DType::ALL
            .iter()
            .copied()
            .find(|t| t.name() == name)
            .ok_or_else(|| {
                Error::parameter(
                    "type",
                    name,
                    "one of u8, u16, u32, u64, i8, i16, i32, i64, f32, f64",
                )
            })
    }

    /// The type's code in the statistics file.
    pub fn code(self) -> u8 {
        DType::ALL.iter().position(|t| *t == self).unwrap_or(0) as u8
    }

    /// The type with this file code.
    pub fn from_code(code: u8) -> Option<DType> {
        DType::ALL.get(code as usize).copied()
    }

    /// Whether the type is a signed integer.
    pub(crate) fn is_signed(self) -> bool {
        matches!(self, DType::I8 | DType::I16 | DType::I32 | DType::I64)
    }

    /// Whether the type is a float (statistics rounded) rather than an integer (exact).
    pub fn is_float(self) -> bool {
        matches!(self, DType::F32 | DType::F64)
    }

    /// How the statistics of this type are held.
    pub fn exactness(self) -> Exactness {
        match self {
            DType::U64 | DType::I64 => Exactness::Int256,
            DType::F32 | DType::F64 => Exactness::DoubleDouble,
            _ => Exactness::Int128,
        }
    }

    /// Streams in one 64-byte line of this type (the reference's M: 64, 32, 16 or 8).
    pub fn per_line(self) -> usize {
        64 / self.width()
    }

    /// The limb plan of this type (see [`Plan`]).
    pub(crate) fn plan(self) -> Plan {
        match self {
            DType::U8 | DType::I8 | DType::U16 | DType::I16 => Plan {
                a_limbs: 1,
                b_limbs: 1,
                limb_bits: 0,
                max_rows: 256,
                max_product: if matches!(self, DType::U16 | DType::I16) {
                    1 << 32
                } else {
                    1 << 16
                },
            },
            DType::U32 | DType::I32 => Plan {
                a_limbs: 1,
                b_limbs: 2,
                limb_bits: 16,
                max_rows: 32,
                max_product: 1 << 48,
            },
            DType::U64 | DType::I64 => Plan {
                a_limbs: 3,
                b_limbs: 3,
                limb_bits: 22,
                max_rows: 256,
                max_product: 1 << 44,
            },
            DType::F32 | DType::F64 => Plan {
                a_limbs: 1,
                b_limbs: 1,
                limb_bits: 0,
                max_rows: 64,
                max_product: 0,
            },
        }
    }
}

impl std::fmt::Display for DType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// How a type's values enter the `f64` kernel exactly.
///
/// The kernel multiplies an "A" lane by a "B" lane in `f64` and sums a block of rows; for
/// integer types every product and every block sum is an integer below 2^53, so the `f64`
/// arithmetic is exact. A value is split into limbs of `limb_bits` bits (lowest first, the top
/// limb keeping the sign) where it does not fit: u32 times u32 would need 64 bits, so B holds
/// the 16-bit halves of each value (products below 2^48, 32 rows per block); 64-bit values are
/// split into three 22-bit limbs on both sides (products below 2^44).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Plan {
    /// Limbs per value on the A side (1: the value itself).
    pub a_limbs: usize,
    /// Limbs per value on the B side.
    pub b_limbs: usize,
    /// Bits per limb when there is more than one.
    pub limb_bits: u32,
    /// Rows per kernel block: the most rows whose summed products stay below 2^53.
    pub max_rows: usize,
    /// A bound on |A lane x B lane| (0 for floats).
    pub max_product: u64,
}

impl Plan {
    /// Whether A and B are the same lanes (one panel serves both).
    pub fn shared(&self) -> bool {
        self.a_limbs == self.b_limbs && self.limb_bits_a() == self.limb_bits
    }

    /// Limb width on the A side.
    pub fn limb_bits_a(&self) -> u32 {
        if self.a_limbs == 1 {
            0
        } else {
            self.limb_bits
        }
    }
}
