//! The kernel vocabulary (leaf of the GPU backend): the [`Family`] contract every kernel family in `kernels/`
//! fulfils, which WGSL variant a dispatch runs ([`KernelKey`], whose [`KernelKind`] is a family's own variant
//! struct), what it binds ([`Binding`]) and how many workgroups it launches ([`Dispatch`]). Nothing here names a
//! family: `kernels/` lists them.

use super::params::{Params, ParamsLayout};
use crate::dtype::DType;
use crate::error::Result;
use crate::graph::NodeId;
use std::any::Any;
use std::fmt::Debug;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

/// A kernel family's variant struct: the part of a [`KernelKey`] that selects its code (tile configuration,
/// operand layouts, fused expressions as expression trees). One file of `kernels/` beside its shader defines the
/// struct, its parameters ([`Family::params`]), bindings, WGSL generation, and its lowering and variant list (the
/// file's `lower` and `variants` functions, which `kernels/mod.rs` lists).
pub(crate) trait Family: AnyKey {
    /// A short human-readable name: `elementwise`, `matmul_tiled 128x128x8`, `matvec serial`, ...
    fn name(&self) -> String;

    /// The family's uniform block, as Rust and WGSL lay it out.
    fn params(&self) -> ParamsLayout;

    /// The storage bindings of a variant, output first, in binding order (binding 0 is the uniform block).
    fn bindings(&self, key: &KernelKey) -> Vec<Binding>;

    /// The variant's WGSL body, given its generated storage declarations and accessors (the caller prepends the
    /// `enable`s, `struct Params` and `common.wgsl`).
    fn wgsl(&self, key: &KernelKey, bindings: String) -> String;

    /// `enable` directives beyond f16 (which the key decides).
    fn enables(&self) -> &'static str {
        ""
    }

    /// Whether the variant needs SHADER_F16 (f16 cannot be packed in u32 words for it).
    fn needs_shader_f16(&self) -> bool {
        false
    }

    /// The variant as a matmul kernel (generic, tiled, cooperative-matrix, mat-vec): what the split pass and the
    /// tuner need of one; `None` for every other family.
    fn as_matmul(&self) -> Option<&dyn MatmulKernel> {
        None
    }

    /// How a dispatch of the family is split when an operand exceeds one storage binding.
    fn split(&self) -> SplitRule {
        SplitRule::None
    }
}

/// What the split pass (`lower/split.rs`) and the tuner need of a matmul kernel.
pub(crate) trait MatmulKernel {
    /// Output rows and columns one workgroup covers (a mat-vec: one row, and its columns a workgroup).
    fn tile(&self) -> (u64, u64);

    /// The workgroup grid of a dispatch over `cols` output columns, whose grid over all columns was `whole`.
    fn column_grid(&self, cols: u64, whole: [u32; 3], _max_groups: u32) -> Result<[u32; 3]> {
        Ok([cols.div_ceil(self.tile().1) as u32, whole[1], 1])
    }
}

/// How the split pass (`lower/split.rs`) cuts a dispatch whose operands exceed one storage binding.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SplitRule {
    /// Not split: a binding over the limit is an error.
    None,
    /// Chunks of output elements (`ElementwiseParams`), `per_invocation` each invocation (chunks a multiple of
    /// it).
    Elements { per_invocation: u64 },
    /// Chunks of whole rows; `reduces`: one output per row (`RowsParams`).
    Rows { reduces: bool },
    /// Windows of table rows (`GetRowsParams`).
    TableRows,
    /// Chunks of output columns over windows of B's rows (`MatmulParams`).
    Columns,
    /// Chunks of output rows when A is large, else of output columns (`MatmulParams`).
    RowsOrColumns,
}

/// What makes a family struct usable inside a [`KernelKey`] behind `dyn`: comparison, hashing and downcasting
/// by its concrete type. Implemented for every `Eq + Hash + Debug` type.
pub(crate) trait AnyKey: Any + Debug + Send + Sync {
    fn as_any(&self) -> &dyn Any;
    fn eq_dyn(&self, other: &dyn Any) -> bool;
    fn hash_dyn(&self, state: &mut dyn Hasher);
}

impl<T: Any + Debug + Eq + Hash + Send + Sync> AnyKey for T {
    fn as_any(&self) -> &dyn Any {
        self
    }

    fn eq_dyn(&self, other: &dyn Any) -> bool {
        other.downcast_ref::<T>() == Some(self)
    }

    fn hash_dyn(&self, mut state: &mut dyn Hasher) {
        std::any::TypeId::of::<T>().hash(&mut state);
        self.hash(&mut state);
    }
}

/// Which kernel family and which variant of it: a family's variant struct.
#[derive(Clone)]
pub(crate) struct KernelKind(Arc<dyn Family>);

impl KernelKind {
    /// The kind of family variant `f`.
    pub(crate) fn new(f: impl Family) -> KernelKind {
        KernelKind(Arc::new(f))
    }

    /// The variant struct, when it is a `T`.
    pub(crate) fn get<T: Family>(&self) -> Option<&T> {
        self.0.as_any().downcast_ref::<T>()
    }
}

impl std::ops::Deref for KernelKind {
    type Target = dyn Family;

    fn deref(&self) -> &dyn Family {
        &*self.0
    }
}

impl PartialEq for KernelKind {
    fn eq(&self, other: &KernelKind) -> bool {
        self.0.eq_dyn(other.0.as_any())
    }
}

impl Eq for KernelKind {}

impl Hash for KernelKind {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.0.hash_dyn(state);
    }
}

impl Debug for KernelKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

/// How the mat-vec kernel's partial sums of one output meet (K contiguous; with N contiguous, `Subgroups` is not
/// used and `Shared` splits K 16 ways). Here rather than in `kernels/matmul/` because devices and profiles name
/// a preference before any kernel exists.
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

/// One storage binding of a kernel: its variable name in the shader, dtype, whether it is read or written as
/// vec4, whether it is written.
pub(crate) struct Binding {
    pub name: String,
    pub dtype: DType,
    pub vec4: bool,
    pub output: bool,
}

impl Binding {
    /// A scalar input binding.
    pub(crate) fn input(name: impl Into<String>, dtype: DType) -> Binding {
        Binding { name: name.into(), dtype, vec4: false, output: false }
    }

    /// A scalar output binding.
    pub(crate) fn output(name: impl Into<String>, dtype: DType) -> Binding {
        Binding { output: true, ..Binding::input(name, dtype) }
    }

    /// The binding read or written as vec4 when `vec4`.
    pub(crate) fn vec4(self, vec4: bool) -> Binding {
        Binding { vec4, ..self }
    }
}

/// The names of the matmul kernels (generic, tiled, cooperative-matrix, mat-vec) among `dispatches`, one per
/// dispatch.
pub(crate) fn matmul_kernel_names<'a>(dispatches: impl IntoIterator<Item = &'a Dispatch>) -> Vec<String> {
    dispatches.into_iter().filter(|d| d.key.kind.as_matmul().is_some()).map(|d| d.key.kind.name()).collect()
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

    /// Whether the variant declares f16 arithmetic (`enable f16;`): f16 tensors not packed, or a kernel that
    /// computes in f16 whatever its tensors' dtypes (cooperative matrices).
    pub(crate) fn uses_f16(&self) -> bool {
        let tensors = self.out == DType::F16 || self.ins.contains(&DType::F16);
        !self.packed_f16 && (tensors || self.kind.needs_shader_f16())
    }
}

/// A binding that is the plan's scratch buffer rather than a tensor (the partial results of split attention).
pub(crate) const SCRATCH: NodeId = NodeId::MAX;
/// A binding that is the device's table of the IQ block types' lookup grids rather than a tensor: the last binding
/// of a dispatch that reads such a type (`wgsl::grid_table`), outside its key's aliases.
pub(crate) const TABLES: NodeId = NodeId::MAX - 1;

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
