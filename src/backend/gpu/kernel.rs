//! The kernel vocabulary (leaf of the GPU backend): which WGSL variant a dispatch runs ([`KernelKey`]), what it
//! binds and how many workgroups it launches ([`Dispatch`]). Lowering (`lower/`) makes these; WGSL generation
//! (`wgsl/`) and the plan read them.

use super::params::Params;
use crate::backend::gpu::config::{CoopConfig, TileConfig};
use crate::graph::NodeId;
use crate::ops::{ReduceOp, RowOp};
use crate::DType;

/// The ops of `rows.wgsl`, one workgroup per row of the last axis: a row op or a reduction.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum RowKernel {
    Row(RowOp),
    Reduce(ReduceOp),
}

impl RowKernel {
    /// Every row kernel: the row-op table, then the reduction table.
    pub(crate) fn all() -> impl Iterator<Item = RowKernel> {
        RowOp::ALL.iter().map(|&o| RowKernel::Row(o)).chain(ReduceOp::ALL.iter().map(|&o| RowKernel::Reduce(o)))
    }

    /// `softmax`, `rms_norm`, ..., `argmax`.
    pub(crate) fn name(self) -> &'static str {
        match self {
            RowKernel::Row(op) => op.name(),
            RowKernel::Reduce(op) => op.name(),
        }
    }

    /// The op's constant in rows.wgsl.
    pub(crate) fn wgsl_const(self) -> &'static str {
        match self {
            RowKernel::Row(op) => op.wgsl_const(),
            RowKernel::Reduce(op) => op.wgsl_const(),
        }
    }

    /// Whether the kernel writes one value per row (a reduction) rather than one per element.
    pub(crate) fn reduces(self) -> bool {
        matches!(self, RowKernel::Reduce(_))
    }
}

/// Which shader file and which compile-time variant of it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) enum KernelKind {
    /// `out = expr(x0, x1, ..)`; `expr` is WGSL over the loaded operands.
    Elementwise { expr: String },
    /// `matmul.wgsl`, with an optional epilogue expression over `acc` and operands x0.. (bindings 4..).
    MatMul { epi: Option<String> },
    /// `matmul_tiled.wgsl`: register-blocked, vec4 loads.
    MatMulTiled { cfg: TileConfig, a_kcontig: bool, b_ncontig: bool, out_vec4: bool, epi: Option<String> },
    /// `matmul_coop.wgsl`: cooperative matrices, f16 operands.
    MatMulCoop {
        cfg: CoopConfig,
        a_kcontig: bool,
        b_ncontig: bool,
        epi: Option<String>,
        /// The cooperative operations written out in plain WGSL (tests on adapters without them).
        emulated: bool,
    },
    /// `matvec.wgsl` (`matvec_serial.wgsl` for [`MatVecReduce::Serial`]): one-row inputs.
    MatVec { b_ncontig: bool, reduce: MatVecReduce, epi: Option<String> },
    /// `rows.wgsl`.
    Rows { op: RowKernel, mask: bool },
    /// `get_rows.wgsl`.
    GetRows,
    /// `concat.wgsl`.
    Concat,
    /// `set_rows.wgsl`.
    SetRows,
    /// `copy_into.wgsl`.
    CopyInto,
    /// `rope.wgsl`.
    Rope,
    /// `attention.wgsl`: head dims `d` and `dv`, `br` queries and `bc` keys a tile, `partial` results of a split
    /// for the combine pass, an additive `mask`, a run-time length (`dyn_len`).
    Attention { d: u32, dv: u32, br: u32, bc: u32, partial: bool, mask: bool, dyn_len: bool },
    /// `attention_combine.wgsl`: head dim `dv`; with `dyn_len`, only the splits a run-time length reaches.
    AttentionCombine { dv: u32, dyn_len: bool },
}

/// How the mat-vec kernel's partial sums of one output meet (K contiguous; with N contiguous, `Subgroups` is not
/// used and `Shared` splits K 16 ways).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum MatVecReduce {
    /// 32 invocations an output, summed with `subgroupAdd` (adapters with subgroups whose size divides 32).
    Subgroups,
    /// 32 invocations an output, summed through workgroup memory.
    Shared,
    /// One invocation an output (four with N contiguous) and no partial sums: adapters that run on CPU cores,
    /// where barriers are expensive (SwiftShader, llvmpipe).
    Serial,
}

impl KernelKind {
    /// A short human-readable name: `elementwise`, `matmul`, `matmul_tiled 128x128x8`, `matvec serial`, ...
    pub(crate) fn name(&self) -> String {
        let epi = |e: &Option<String>| if e.is_some() { "+epilogue" } else { "" };
        match self {
            KernelKind::Elementwise { .. } => "elementwise".into(),
            KernelKind::MatMul { epi: e } => format!("matmul{}", epi(e)),
            KernelKind::MatMulTiled { cfg, epi: e, .. } => format!("matmul_tiled {}{}", cfg.name(), epi(e)),
            KernelKind::MatMulCoop { cfg, epi: e, emulated, .. } => {
                format!("matmul_coop {}{}{}", cfg.name(), if *emulated { " (emulated)" } else { "" }, epi(e))
            }
            KernelKind::MatVec { reduce, epi: e, .. } => {
                let r = match reduce {
                    MatVecReduce::Subgroups => " subgroups",
                    MatVecReduce::Shared => " shared",
                    MatVecReduce::Serial => " serial",
                };
                format!("matvec{r}{}", epi(e))
            }
            KernelKind::Rows { op, .. } => format!("rows {}", op.name()),
            KernelKind::GetRows => "get_rows".into(),
            KernelKind::Concat => "concat".into(),
            KernelKind::SetRows => "set_rows".into(),
            KernelKind::CopyInto => "copy_into".into(),
            KernelKind::Rope => "rope".into(),
            KernelKind::Attention { br, partial, .. } => {
                format!(
                    "attention {}{}",
                    if *br == 1 { "decode" } else { "prefill" },
                    if *partial { " split" } else { "" }
                )
            }
            KernelKind::AttentionCombine { .. } => "attention combine".into(),
        }
    }

    /// Output columns one workgroup of the mat-vec kernel covers (None for other kernels).
    pub(crate) fn matvec_columns(&self) -> Option<u64> {
        match self {
            KernelKind::MatVec { b_ncontig, reduce, .. } => Some(match (reduce, b_ncontig) {
                (MatVecReduce::Serial, false) => 64,
                (MatVecReduce::Serial, true) => 256,
                (_, false) => 8,
                (_, true) => 64,
            }),
            _ => None,
        }
    }

    /// A matmul kernel of any kind (generic, tiled, cooperative-matrix, mat-vec).
    pub(crate) fn is_matmul(&self) -> bool {
        self.matmul_tile().is_some() || matches!(self, KernelKind::MatVec { .. })
    }

    /// Output rows and columns one workgroup of a 2-D matmul kernel covers (None for other kernels).
    pub(crate) fn matmul_tile(&self) -> Option<(u64, u64)> {
        match self {
            KernelKind::MatMul { .. } => Some((64, 64)),
            KernelKind::MatMulTiled { cfg, .. } => Some((64 * cfg.rm as u64, 64 * cfg.rn as u64)),
            KernelKind::MatMulCoop { cfg, .. } => Some((cfg.bm() as u64, cfg.bn() as u64)),
            _ => None,
        }
    }
}

/// The names of the matmul kernels (generic, tiled, cooperative-matrix, mat-vec) among `dispatches`, one per
/// dispatch.
pub(crate) fn matmul_kernel_names<'a>(dispatches: impl IntoIterator<Item = &'a Dispatch>) -> Vec<String> {
    dispatches.into_iter().filter(|d| d.key.kind.is_matmul()).map(|d| d.key.kind.name()).collect()
}

/// Everything that makes one WGSL variant: cached pipelines are keyed by it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct KernelKey {
    pub kind: KernelKind,
    /// Storage dtype of the output.
    pub out: DType,
    /// Storage dtypes of the inputs, in binding order.
    pub ins: Vec<DType>,
    /// For each binding (output first, then inputs), the first binding over the same memory (itself when none).
    pub alias: Vec<usize>,
    /// f16 tensors are stored as pairs in u32 words and unpacked in the shader (the adapter lacks SHADER_F16).
    pub packed_f16: bool,
}

impl KernelKey {
    /// The key with no aliased bindings.
    pub(crate) fn new(kind: KernelKind, out: DType, ins: Vec<DType>) -> KernelKey {
        let alias = (0..=ins.len()).collect();
        KernelKey { kind, out, ins, alias, packed_f16: false }
    }

    /// Whether the variant declares f16 arithmetic (`enable f16;`).
    pub(crate) fn uses_f16(&self) -> bool {
        !self.packed_f16 && (self.out == DType::F16 || self.ins.contains(&DType::F16))
    }
}

/// A binding that is the plan's scratch buffer rather than a tensor (the partial results of split attention).
pub(crate) const SCRATCH: NodeId = NodeId::MAX;

/// A grid that follows a run-time length L, the i32 at element `offset` of host input `input`, read when the run
/// uploads it (a length that is not a host input gives the compiled grid), with `n = clamp(ceil(min(L, max_len) /
/// per_group), 1, ..)` the groups L reaches: the x extent is `n` (at most the compiled one), or with `skip_single`
/// the compiled grid when `n > 1` and no dispatch at all when `n == 1`. The kernels must not depend on what is
/// skipped.
#[derive(Clone, Copy, Debug)]
pub(crate) struct DynamicGrid {
    pub input: NodeId,
    pub offset: usize,
    pub per_group: u32,
    pub max_len: u32,
    pub skip_single: bool,
}

impl DynamicGrid {
    /// The x extent for the run whose inputs are `inputs` (0: skip the dispatch); `compiled` is the compiled one.
    pub(crate) fn x(&self, inputs: &[(NodeId, &[u8])], compiled: u32) -> u32 {
        let Some(&(_, bytes)) = inputs.iter().find(|(id, _)| *id == self.input) else { return compiled };
        let Some(b) = bytes.get(self.offset * 4..self.offset * 4 + 4) else { return compiled };
        let len = i32::from_le_bytes([b[0], b[1], b[2], b[3]]).clamp(0, self.max_len as i32) as u32;
        let n = len.div_ceil(self.per_group.max(1)).max(1);
        match (self.skip_single, n) {
            (true, 1) => 0,
            (true, _) => compiled,
            (false, _) => n.min(compiled.max(1)),
        }
    }
}

/// One dispatch of a plan: the kernel, its uniform block, the storage nodes bound (output first; [`SCRATCH`] for
/// the scratch buffer), for each binding the window bound (byte offset within the tensor's block, byte size;
/// `None`: the whole block), the grid (its x extent set per run where `dynamic` says), and the scratch bytes it
/// needs.
#[derive(Clone, Debug)]
pub(crate) struct Dispatch {
    pub key: KernelKey,
    pub params: Params,
    pub bindings: Vec<NodeId>,
    pub windows: Vec<Option<(u64, u64)>>,
    pub workgroups: [u32; 3],
    pub dynamic: Option<DynamicGrid>,
    pub scratch: u64,
}
