//! Element types: f32, f16, i32, and ggml's storage formats — bf16 and the block-quantized types, whose tensors are
//! rows of whole blocks (a block holds `block_size` values in `block_bytes` bytes: scales and packed quants).

use std::fmt;

/// Declares [`DType`], [`DType::ALL`] and the type table [`TRAITS`] from one row a type: its doc, its variant,
/// its name, its ggml type id, and its layout — `plain(bytes)` for the element types, `block(Struct)` for the
/// storage formats whose block struct (`crate::quant::blocks`) gives the values and bytes per block and where its
/// scales lie.
macro_rules! dtypes {
    ($($(#[doc = $doc:literal])* $variant:ident => ($name:literal, $ggml:literal, $kind:ident($($layout:tt)*)),)*) => {
        /// Element type of a tensor.
        #[allow(non_camel_case_types)]
        #[non_exhaustive]
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum DType {
            $($(#[doc = $doc])* $variant,)*
        }

        /// The number of dtypes.
        const COUNT: usize = [$(DType::$variant),*].len();

        impl DType {
            /// Every dtype.
            pub const ALL: [DType; COUNT] = [$(DType::$variant),*];
        }

        /// The type table, in [`DType`]'s order.
        const TRAITS: [Traits; COUNT] = {
            #[allow(unused_imports)]
            use crate::quant::blocks::*;
            [$(traits_row!($kind($($layout)*), DType::$variant, $name, $ggml)),*]
        };
    };
}

macro_rules! traits_row {
    (plain($bytes:expr), $dtype:expr, $name:expr, $ggml:expr) => {
        Traits { dtype: $dtype, name: $name, ggml_type: $ggml, block_size: 1, block_bytes: $bytes, scales: &[] }
    };
    (block($b:ty), $dtype:expr, $name:expr, $ggml:expr) => {
        Traits {
            dtype: $dtype,
            name: $name,
            ggml_type: $ggml,
            block_size: <$b as crate::quant::blocks::Block>::VALUES,
            block_bytes: std::mem::size_of::<$b>(),
            scales: <$b as crate::quant::blocks::Block>::SCALES,
        }
    };
}

dtypes! {
    /// IEEE 754 binary32.
    F32 => ("float32", 0, plain(4)),
    /// IEEE 754 binary16. Arithmetic on it accumulates in f32 on every backend.
    F16 => ("float16", 1, plain(2)),
    /// Two's-complement 32-bit integer (indices, argmax results).
    I32 => ("int32", 26, plain(4)),
    /// bfloat16 storage (weights): the top 16 bits of an f32.
    BF16 => ("bf16", 30, plain(2)),
    /// ggml's Q4_0: blocks of 32, an f16 scale d and 16 bytes of 4-bit quants q; value `(q − 8)·d`.
    Q4_0 => ("q4_0", 2, block(BlockQ4_0)),
    /// ggml's Q4_1: blocks of 32, f16 d and m, 16 bytes of 4-bit quants; value `q·d + m`.
    Q4_1 => ("q4_1", 3, block(BlockQ4_1)),
    /// ggml's Q5_0: blocks of 32, f16 d, 4 bytes of fifth bits, 16 bytes of low nibbles; `(q − 16)·d`.
    Q5_0 => ("q5_0", 6, block(BlockQ5_0)),
    /// ggml's Q5_1: blocks of 32, f16 d and m, fifth bits, nibbles; `q·d + m`.
    Q5_1 => ("q5_1", 7, block(BlockQ5_1)),
    /// ggml's Q8_0: blocks of 32, f16 d and 32 int8 quants; `q·d`.
    Q8_0 => ("q8_0", 8, block(BlockQ8_0)),
    /// ggml's Q2_K: super-blocks of 256 in 16 groups of 16 with 4-bit scales and mins.
    Q2_K => ("q2_k", 10, block(BlockQ2K)),
    /// ggml's Q3_K: super-blocks of 256, 3-bit quants (2 low bits and a high-bit mask), 6-bit scales.
    Q3_K => ("q3_k", 11, block(BlockQ3K)),
    /// ggml's Q4_K: super-blocks of 256 in 8 groups of 32 with 6-bit scales and mins.
    Q4_K => ("q4_k", 12, block(BlockQ4K)),
    /// ggml's Q5_K: as Q4_K with a fifth bit per quant.
    Q5_K => ("q5_k", 13, block(BlockQ5K)),
    /// ggml's Q6_K: super-blocks of 256, 6-bit quants in 16 groups of 16 with 8-bit scales.
    Q6_K => ("q6_k", 14, block(BlockQ6K)),
    /// ggml's IQ2_XXS: super-blocks of 256, rows of 8 from a 256-row grid with even-parity signs, 2.06 bits a value.
    IQ2_XXS => ("iq2_xxs", 16, block(BlockIq2Xxs)),
    /// ggml's IQ2_XS: as IQ2_XXS with a 512-row grid and a scale per 16 values, 2.31 bits a value.
    IQ2_XS => ("iq2_xs", 17, block(BlockIq2Xs)),
    /// ggml's IQ3_XXS: super-blocks of 256, rows of 4 from a 256-row grid with even-parity signs, 3.06 bits.
    IQ3_XXS => ("iq3_xxs", 18, block(BlockIq3Xxs)),
    /// ggml's IQ1_S: super-blocks of 256, rows of 8 values in {−1, 0, 1} (a 2048-row grid) plus a ±1/8 delta,
    /// 1.56 bits a value.
    IQ1_S => ("iq1_s", 19, block(BlockIq1S)),
    /// ggml's IQ4_NL: blocks of 32, an f16 scale and 4-bit indices into 16 non-linear values.
    IQ4_NL => ("iq4_nl", 20, block(BlockIq4Nl)),
    /// ggml's IQ3_S: super-blocks of 256, rows of 4 from a 512-row grid, explicit signs, 3.44 bits a value.
    IQ3_S => ("iq3_s", 21, block(BlockIq3S)),
    /// ggml's IQ2_S: super-blocks of 256, rows of 8 from a 1024-row grid, explicit signs, 2.56 bits a value.
    IQ2_S => ("iq2_s", 22, block(BlockIq2S)),
    /// ggml's IQ4_XS: super-blocks of 256, IQ4_NL's values with a 6-bit scale per 32, 4.25 bits a value.
    IQ4_XS => ("iq4_xs", 23, block(BlockIq4Xs)),
    /// ggml's IQ1_M: as IQ1_S with a scale per 16 values and a delta per 8, the f16 scale spread over the
    /// scales' top bits, 1.75 bits a value.
    IQ1_M => ("iq1_m", 29, block(BlockIq1M)),
    /// ggml's TQ1_0: super-blocks of 256 ternary values, five base-3 digits a byte, 1.69 bits a value.
    TQ1_0 => ("tq1_0", 34, block(BlockTq1_0)),
    /// ggml's TQ2_0: super-blocks of 256 ternary values, 2 bits each.
    TQ2_0 => ("tq2_0", 35, block(BlockTq2_0)),
    /// OCP's MXFP4 (ggml's): blocks of 32 E2M1 values sharing an E8M0 exponent (gpt-oss's experts).
    MXFP4 => ("mxfp4", 39, block(BlockMxfp4)),
}

impl DType {
    /// The type's row of [`TRAITS`].
    fn traits(self) -> &'static Traits {
        &TRAITS[self as usize]
    }

    /// Values per block: 1 for f32, f16, i32 and bf16; 32 for the Q*_0/Q*_1 types, IQ4_NL and MXFP4; 256 for the
    /// K-quants and the other IQ and TQ types.
    pub fn block_size(self) -> usize {
        self.traits().block_size
    }

    /// Bytes per block (ggml's `type_size`): the element size for the plain types.
    pub fn block_bytes(self) -> usize {
        self.traits().block_bytes
    }

    /// Size of one element in bytes, for the types that have one (every type but the block-quantized ones, whose
    /// size is [`DType::block_bytes`] per [`DType::block_size`] elements; they return 0).
    pub fn size_bytes(self) -> usize {
        if self.block_size() == 1 {
            self.block_bytes()
        } else {
            0
        }
    }

    /// Bytes of `numel` elements (`numel` a multiple of the block size for block types), or `None` on overflow.
    pub fn bytes_of(self, numel: usize) -> Option<usize> {
        (numel / self.block_size()).checked_mul(self.block_bytes())
    }

    /// Bytes of a tensor of `shape` (numpy order): `None` when the element count overflows or, for a block type,
    /// the last dimension is not a whole number of blocks.
    pub fn bytes_of_shape(self, shape: &[usize]) -> Option<usize> {
        if shape.last().is_some_and(|&d| d % self.block_size() != 0) {
            return None;
        }
        let numel = shape.iter().try_fold(1usize, |n, &d| n.checked_mul(d))?;
        self.bytes_of(numel)
    }

    /// True for f32 and f16, the types arithmetic runs on.
    pub fn is_float(self) -> bool {
        matches!(self, DType::F32 | DType::F16)
    }

    /// True for bf16 and the block-quantized types: storage formats that matmul weights (`x @ t(w)`), get_rows
    /// tables and casts to f32 or f16 read, and nothing else.
    pub fn is_storage_format(self) -> bool {
        !matches!(self, DType::F32 | DType::F16 | DType::I32)
    }

    /// The name: numpy's for the plain types (`float32`, `float16`, `int32`), ggml's for the others (`bf16`,
    /// `q4_1`, `q6_k`).
    pub fn name(self) -> &'static str {
        self.traits().name
    }

    /// ggml's type id (`GGML_TYPE_*`, as GGUF files store it), for the types ggml has (all of them).
    pub fn ggml_type(self) -> Option<u32> {
        Some(self.traits().ggml_type)
    }

    /// Byte offsets within a block of a block type's f16 scale fields: its scale `d` first, then its min (`m`,
    /// `dmin`) where it has one, as ggml-common.h lays them out; empty for the plain types and for the two block
    /// types whose scale is no f16 field (IQ1_M spreads it over its sub-scales' top bits, MXFP4's is an E8M0
    /// exponent byte). What a check of a file's scales, or a benchmark's synthetic weights, needs to know of a
    /// block's bytes.
    pub fn scale_offsets(self) -> &'static [usize] {
        self.traits().scales
    }

    /// The dtype of ggml type id `t`, if webtensor has it.
    pub fn from_ggml_type(t: u32) -> Option<DType> {
        DType::ALL.into_iter().find(|d| d.ggml_type() == Some(t))
    }
}

/// One row of the type table, ggml's `type_traits[]`: what a type's bytes are.
struct Traits {
    dtype: DType,
    name: &'static str,
    ggml_type: u32,
    block_size: usize,
    block_bytes: usize,
    /// Byte offsets within a block of its f16 scale fields (`Block::SCALES`).
    scales: &'static [usize],
}

// every row in its dtype's place
const _: () = {
    let mut i = 0;
    while i < TRAITS.len() {
        assert!(TRAITS[i].dtype as usize == i && DType::ALL[i] as usize == i);
        i += 1;
    }
};

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
