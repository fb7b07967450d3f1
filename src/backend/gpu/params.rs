//! Typed kernel parameters: one `#[repr(C)]` struct per kernel family, uploaded as the uniform block `P` of each
//! dispatch. The WGSL `struct Params` of a family is generated from the same field list (`wgsl_fields`),
//! so host and shader cannot disagree on a field; `tests/wgsl.rs` checks naga's layout of every generated struct
//! against Rust's offsets. Fields are `u32`, `f32`, `vec4<u32>` (`[u32; 4]`) or arrays of `vec4<u32>` (arrays of
//! scalars would have a 16-byte stride in a uniform block), placed so every vec4 starts at a multiple of 16 bytes.
//! Units are elements unless a field says otherwise.

/// A Rust field type and its WGSL spelling in a uniform struct.
pub(crate) trait WgslType {
    /// The WGSL type.
    fn wgsl() -> String;
}

impl WgslType for u32 {
    fn wgsl() -> String {
        "u32".into()
    }
}

impl WgslType for f32 {
    fn wgsl() -> String {
        "f32".into()
    }
}

impl WgslType for [u32; 4] {
    fn wgsl() -> String {
        "vec4<u32>".into()
    }
}

impl<const N: usize> WgslType for [[u32; 4]; N] {
    fn wgsl() -> String {
        format!("array<vec4<u32>, {N}>")
    }
}

/// One kernel family's parameters as both sides lay them out.
#[doc(hidden)]
#[derive(Clone, Debug)]
pub struct ParamsLayout {
    /// The Rust struct's name.
    pub name: &'static str,
    /// The generated WGSL `struct Params`.
    pub wgsl: String,
    /// `(field, byte offset)` in Rust.
    pub offsets: Vec<(&'static str, usize)>,
    /// Size of the Rust struct in bytes.
    pub size: usize,
}

macro_rules! params {
    ($($(#[doc = $doc:literal])* $name:ident { $($(#[doc = $fdoc:literal])* $field:ident : $ty:ty,)* })*) => {
        $(
            $(#[doc = $doc])*
            #[repr(C)]
            #[derive(Clone, Copy, Debug, Default, PartialEq, bytemuck::Pod, bytemuck::Zeroable)]
            pub(crate) struct $name {
                $($(#[doc = $fdoc])* pub $field: $ty,)*
            }

            impl $name {
                /// `(field, byte offset)` of every field as Rust lays them out.
                pub(crate) fn offsets() -> Vec<(&'static str, usize)> {
                    vec![$((stringify!($field), std::mem::offset_of!($name, $field))),*]
                }

                /// `struct Params { .. }` in WGSL, the fields in the same order.
                pub(crate) fn wgsl_fields() -> String {
                    let mut s = String::from("struct Params {\n");
                    $(s.push_str(&format!("    {}: {},\n", stringify!($field), <$ty as WgslType>::wgsl()));)*
                    s.push_str("}\n");
                    s
                }
            }
        )*

        /// The parameters of one dispatch, of its kernel family.
        #[allow(clippy::enum_variant_names)] // the variants are the families' structs
        #[derive(Clone, Copy, Debug, PartialEq)]
        pub(crate) enum Params {
            $($name($name),)*
        }

        impl Params {
            /// The bytes uploaded as the uniform block.
            pub(crate) fn bytes(&self) -> &[u8] {
                match self { $(Params::$name(p) => bytemuck::bytes_of(p),)* }
            }

        }

        /// Every family's parameter layout (for the layout test).
        pub(crate) fn layouts() -> Vec<ParamsLayout> {
            vec![$(ParamsLayout {
                name: stringify!($name),
                wgsl: $name::wgsl_fields(),
                offsets: $name::offsets(),
                size: std::mem::size_of::<$name>(),
            }),*]
        }
    };
}

params! {
    /// `elementwise.wgsl`: `out[i] = expr(x0, x1, ..)` over a chunk of a contiguous output.
    ElementwiseParams {
        /// Elements this dispatch computes.
        count: u32,
        /// Flat index of the chunk's first element in the whole output.
        first: u32,
        /// Where the chunk's first element sits in the output binding.
        out_offset: u32,
        _pad0: u32,
        /// Output shape, rank 4, left-padded with 1.
        out_shape: [u32; 4],
        /// Strides of input k (0 on broadcast dims), at `in_strides[k]`.
        in_strides: [[u32; 4]; 6],
        /// Offset of input k within its binding, at `in_offsets[k / 4][k % 4]`.
        in_offsets: [[u32; 4]; 2],
    }

    /// The matmul kernels (`matmul.wgsl`, `matmul_tiled.wgsl`, `matmul_coop.wgsl`, `matvec.wgsl`):
    /// `C[b, m, n] = epilogue(Σ_k A[b, m, k] · B[b, k, n])`.
    MatmulParams {
        /// Rows of C this dispatch computes.
        m: u32,
        /// Columns of C this dispatch computes (columns `n0 .. n0 + n`).
        n: u32,
        /// The contracted dimension.
        k: u32,
        /// Size of batch dim 1: workgroup z = b0 · batch1 + b1.
        batch1: u32,
        /// A's strides (batch0, batch1, row, col), broadcast batch dims 0.
        a_strides: [u32; 4],
        /// B's strides (batch0, batch1, row, col).
        b_strides: [u32; 4],
        /// A's offset within its binding.
        a_offset: u32,
        /// B's offset within its binding.
        b_offset: u32,
        /// First output column of this dispatch (a B larger than one binding is split by columns).
        n0: u32,
        /// Output row stride: all of the output's columns.
        ldc: u32,
        /// First output row of this dispatch (an A larger than one binding is split by rows).
        m0: u32,
        /// Index of the output binding's first element when the output is bound as a window.
        out_window: u32,
        /// First batch of this dispatch: workgroup z is batch `batch0 + z` (more batches than one dispatch's
        /// z may count are dispatched in groups).
        batch0: u32,
        _pad1: u32,
        /// Strides of epilogue operand k, broadcast to C's coordinates (b0, b1, m, n).
        epi_strides: [[u32; 4]; 5],
        /// Offset of epilogue operand k, at `epi_offsets[k / 4][k % 4]`.
        epi_offsets: [[u32; 4]; 2],
    }

    /// `rows.wgsl`: softmax, the norms and the reductions, one workgroup per row of the last axis.
    RowsParams {
        /// Row length N.
        n: u32,
        /// Rows this dispatch computes.
        rows: u32,
        /// x's offset within its binding.
        x_offset: u32,
        /// The mask's offset within its binding.
        mask_offset: u32,
        /// x's shape, rank 4.
        x_shape: [u32; 4],
        /// x's strides.
        x_strides: [u32; 4],
        /// The mask's strides, broadcast to x's shape.
        mask_strides: [u32; 4],
        /// Softmax's scale.
        scale: f32,
        /// The norms' epsilon.
        eps: f32,
        /// Index of this dispatch's first row (a chunk of a larger tensor).
        first_row: u32,
        /// Where the first row's output sits in the output binding.
        out_offset: u32,
    }

    /// `get_rows.wgsl`: `out[i.., :] = table[idx[i..], :]`.
    GetRowsParams {
        /// Output elements.
        count: u32,
        /// Row length D.
        dim: u32,
        /// Table rows V.
        rows: u32,
        /// The table's offset within its binding.
        table_offset: u32,
        /// idx's shape, rank 4 (the output's shape without its last dim).
        idx_shape: [u32; 4],
        /// idx's strides.
        idx_strides: [u32; 4],
        /// idx's offset within its binding.
        idx_offset: u32,
        /// The table's row stride.
        row_stride: u32,
        /// The table's column stride.
        col_stride: u32,
        _pad0: u32,
        /// First table row of the window bound (a table larger than one binding), else 0.
        window_lo: u32,
        /// End of the window's rows, or 0 when the whole table is bound.
        window_hi: u32,
        _pad1: u32,
        _pad2: u32,
    }

    /// `set_rows.wgsl`: `dst[idx[r], :] = src[r, :]`.
    SetRowsParams {
        /// Elements written: N rows of D.
        count: u32,
        /// Row length D.
        dim: u32,
        /// Destination rows R.
        rows: u32,
        /// Source rows N.
        n: u32,
        /// The destination's offset within its binding.
        dst_offset: u32,
        /// The destination's row stride.
        dst_row_stride: u32,
        /// The source's offset within its binding.
        src_offset: u32,
        /// The source's row stride.
        src_row_stride: u32,
        /// The source's column stride.
        src_col_stride: u32,
        /// The indices' offset within their binding.
        idx_offset: u32,
        /// The indices' stride.
        idx_stride: u32,
        _pad0: u32,
    }

    /// `copy_into.wgsl`: `dst[c] = src[c]` through dst's strides.
    CopyParams {
        /// Elements written.
        count: u32,
        /// dst's offset within its binding.
        dst_offset: u32,
        /// src's offset within its binding.
        src_offset: u32,
        _pad0: u32,
        /// dst's shape, rank 4.
        shape: [u32; 4],
        /// dst's strides.
        dst_strides: [u32; 4],
        /// src's strides, broadcast to dst's shape.
        src_strides: [u32; 4],
    }

    /// `rope.wgsl`: rotary position embedding of a `[B, T, H, D]` tensor.
    RopeParams {
        /// Output elements.
        count: u32,
        /// Rotated dims of each head.
        n_dims: u32,
        /// 1 for neox pairs (i, i + n_dims / 2), 0 for adjacent pairs.
        neox: u32,
        /// `freq_base^(-2 / n_dims)`.
        theta_scale: f32,
        /// Linear position scaling.
        freq_scale: f32,
        /// x's offset within its binding.
        x_offset: u32,
        /// The positions' offset within their binding.
        pos_offset: u32,
        /// The positions' stride.
        pos_stride: u32,
        /// Shape (B, T, H, D).
        shape: [u32; 4],
        /// x's strides.
        x_strides: [u32; 4],
    }

    /// `attention.wgsl` and `attention_combine.wgsl`.
    AttentionParams {
        /// Query heads H.
        h: u32,
        /// Queries T.
        t: u32,
        /// Key positions S (the keys' length: the most the run-time length may be).
        s: u32,
        /// Query heads per K/V head (H / Hkv).
        group: u32,
        /// The KV length when it is not given at run time (S).
        static_len: u32,
        /// 1 for causal masking.
        causal: u32,
        /// Multiplies q·k.
        scale: f32,
        /// Splits of the keys per query (1 without the combine pass).
        splits: u32,
        /// Keys per split.
        split_len: u32,
        /// Batches B.
        batch: u32,
        /// The mask's offset within its binding.
        mask_offset: u32,
        /// The run-time length's offset within its binding.
        kv_len_offset: u32,
        /// q's strides (b, h, t, d).
        q_strides: [u32; 4],
        /// k's strides (b, g, s, d).
        k_strides: [u32; 4],
        /// v's strides (b, g, s, d).
        v_strides: [u32; 4],
        /// The mask's strides (b, h, t, s), broadcast.
        mask_strides: [u32; 4],
        /// q's offset within its binding.
        q_offset: u32,
        /// k's offset within its binding.
        k_offset: u32,
        /// v's offset within its binding.
        v_offset: u32,
        /// Head dim of q and k (the kernel's D, as a loop bound).
        d: u32,
        /// Head dim of v (DV).
        dv: u32,
        /// Keys a tile (BC).
        bc: u32,
        _pad0: u32,
        _pad1: u32,
    }

    /// `concat.wgsl`: `out = concatenate([a, b], axis)`.
    ConcatParams {
        /// Output elements.
        count: u32,
        /// The axis, in rank-4 coordinates.
        axis: u32,
        /// a's size along the axis.
        split: u32,
        _pad0: u32,
        /// Output shape, rank 4.
        out_shape: [u32; 4],
        /// a's strides.
        a_strides: [u32; 4],
        /// b's strides.
        b_strides: [u32; 4],
        /// a's offset within its binding.
        a_offset: u32,
        /// b's offset within its binding.
        b_offset: u32,
        _pad1: u32,
        _pad2: u32,
    }
}

/// `v` as a `vec4<u32>` of u32s.
pub(crate) fn vec4(v: [usize; 4]) -> [u32; 4] {
    v.map(|x| x as u32)
}

/// Sets element `k` of a `[[u32; 4]; N]` array of packed scalars.
pub(crate) fn set_packed<const N: usize>(a: &mut [[u32; 4]; N], k: usize, v: usize) {
    a[k / 4][k % 4] = v as u32;
}

/// Element `k` of a `[[u32; 4]; N]` array of packed scalars.
pub(crate) fn get_packed<const N: usize>(a: &[[u32; 4]; N], k: usize) -> u32 {
    a[k / 4][k % 4]
}
