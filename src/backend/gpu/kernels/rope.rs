//! rope (`rope.wgsl`): rotary position embedding of a `[B, T, H, D]` tensor at positions `pos`, one invocation
//! per output element.

use crate::backend::gpu::kernel::{Binding, Dispatch, Family, KernelKey, KernelKind};
use crate::backend::gpu::params::{params, vec4, Params, ParamsBlock, ParamsLayout, WgslType};
use crate::backend::gpu::target::{dispatch, grid, GpuTarget};
use crate::backend::gpu::wgsl::template::{compute_type, render};
use crate::compile::ir::{Program, Step};
use crate::dtype::DType;
use crate::error::Result;
use crate::graph::{NodeId, Op};
use crate::ops::RopeMode;
use crate::shape::Layout;

const ROPE: &str = include_str!("rope.wgsl");
const ROTATE: &str = include_str!("rope_rotate.wgsl");

/// The rope function `name(i, x: RopeX)` over x in binding `x`, shared with the ropes fused
/// into KV-cache writes (`rope_set_rows.rs`, `rope_kv_writes.rs`): each pair's angle divided by its frequency
/// factor read from the binding `factors` names, or by none.
pub(crate) fn rotate(name: &str, x: &str, factors: Option<&str>) -> String {
    let theta = factors.map_or("theta".into(), |b| format!("(theta / f32(ld_{b}(pair)))"));
    render(ROTATE, &[("NAME", name.into()), ("X", x.into()), ("THETA", theta)])
}

/// The rope's angle parameters, a struct of every rope kernel's uniform block (`P.rope` in `rope_rotate.wgsl`;
/// 32 bytes, placed at a multiple of 16 as a uniform block's struct member must be).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, bytemuck::Pod, bytemuck::Zeroable)]
pub(crate) struct RopeAngles {
    /// Rotated dims of each head.
    pub n_dims: u32,
    /// 1 for neox pairs (i, i + n_dims / 2), 0 for adjacent pairs.
    pub neox: u32,
    /// `freq_base^(-2 / n_dims)`.
    pub theta_scale: f32,
    /// Position scaling (linear or YaRN's).
    pub freq_scale: f32,
    /// YaRN's weight of the extrapolated angle (0: none).
    pub ext_factor: f32,
    /// Scale of cos and sin.
    pub attn_factor: f32,
    /// YaRN's ramp: its first pair.
    pub corr_low: f32,
    /// YaRN's ramp: its last pair.
    pub corr_high: f32,
}

impl RopeAngles {
    /// The angles of `rope`.
    pub(crate) fn of(rope: &crate::ops::Rope) -> RopeAngles {
        RopeAngles {
            n_dims: rope.n_dims as u32,
            neox: (rope.mode == RopeMode::Neox) as u32,
            theta_scale: rope.theta_scale(),
            freq_scale: rope.freq_scale,
            ext_factor: rope.ext_factor,
            attn_factor: rope.attn_factor,
            corr_low: rope.corr_dims[0],
            corr_high: rope.corr_dims[1],
        }
    }
}

impl WgslType for RopeAngles {
    fn wgsl() -> String {
        "RopeAngles".into()
    }

    fn decl() -> String {
        let fields = ["n_dims: u32", "neox: u32", "theta_scale: f32", "freq_scale: f32", "ext_factor: f32"];
        let more = ["attn_factor: f32", "corr_low: f32", "corr_high: f32"];
        let body: String = fields.iter().chain(&more).map(|f| format!("    {f},\n")).collect();
        format!("struct RopeAngles {{\n{body}}}\n")
    }
}

/// A roped operand `[B, T, H, D]` and its positions, a struct of every rope kernel's uniform block (`P.x`, `P.q`,
/// `P.k` in the WGSL, the argument of `rope_rotate.wgsl`'s function; 48 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, bytemuck::Pod, bytemuck::Zeroable)]
pub(crate) struct RopeX {
    /// Shape (B, T, H, D).
    pub shape: [u32; 4],
    /// Strides, in elements.
    pub strides: [u32; 4],
    /// Offset within its binding, in elements.
    pub offset: u32,
    /// Elements.
    pub count: u32,
    /// The positions' offset within their binding.
    pub pos_offset: u32,
    /// The positions' stride.
    pub pos_stride: u32,
}

impl RopeX {
    /// Operand `x` roped at positions `pos` (`[T]`).
    pub(crate) fn of(x: &Layout, pos: &Layout) -> RopeX {
        let (shape, strides) = x.padded4();
        RopeX {
            shape: vec4(shape),
            strides: vec4(strides),
            offset: x.offset as u32,
            count: x.numel() as u32,
            pos_offset: pos.offset as u32,
            pos_stride: pos.strides[0] as u32,
        }
    }
}

impl WgslType for RopeX {
    fn wgsl() -> String {
        "RopeX".into()
    }

    fn decl() -> String {
        let fields = ["shape: vec4<u32>", "strides: vec4<u32>", "offset: u32", "count: u32"];
        let body: String = fields.iter().chain(&["pos_offset: u32", "pos_stride: u32"]).map(|f| format!("    {f},\n")).collect();
        format!("struct RopeX {{\n{body}}}\n")
    }
}

params! {
    /// `rope.wgsl`: rotary position embedding of a `[B, T, H, D]` tensor.
    RopeParams {
        /// The roped tensor and its positions.
        x: RopeX,
        /// The rope's angles.
        rope: RopeAngles,
    }
}

/// `rope.wgsl`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Rope;

impl Family for Rope {
    fn name(&self) -> String {
        "rope".into()
    }

    fn params(&self) -> ParamsLayout {
        RopeParams::layout()
    }

    /// x, positions and (a third input) the frequency factors.
    fn bindings(&self, key: &KernelKey) -> Vec<Binding> {
        let ins = ["src0", "src1", "src2"].into_iter().zip(&key.ins).map(|(name, &d)| Binding::input(name, d));
        std::iter::once(Binding::output("out", key.out)).chain(ins).collect()
    }

    fn wgsl(&self, key: &KernelKey, bindings: String) -> String {
        let factors = (key.ins.len() == 3).then_some("src2");
        render(ROPE, &[("BINDINGS", bindings), ("OUT_C", compute_type(key.out).into())]) + &rotate("rope_value", "src0", factors)
    }
}

/// Lowers rope.
pub(crate) fn lower(p: &Program, id: NodeId, t: &GpuTarget) -> Option<Result<Vec<Dispatch>>> {
    let nodes = &p.nodes;
    let Step::Op(Op::Rope { x, pos, factors, rope }) = &nodes[id].step else { return None };
    let count = nodes[*x].layout.numel();
    let params = RopeParams { x: RopeX::of(&nodes[*x].layout, &nodes[*pos].layout), rope: RopeAngles::of(rope) };
    let ins = [*x, *pos].into_iter().chain(*factors);
    let key = KernelKey::new(KernelKind::new(Rope), nodes[id].dtype, ins.clone().map(|n| nodes[n].dtype).collect());
    let bindings = std::iter::once(id).chain(ins).map(|n| nodes[n].storage).collect();
    let workgroups = grid("rope", (count as u64).div_ceil(256), t.max_groups);
    Some(workgroups.map(|g| vec![dispatch(key, Params::new(params), bindings, g)]))
}

/// f32 and f16, positions i32, with and without f32 frequency factors.
pub(crate) fn variants(keys: &mut Vec<KernelKey>) {
    for d in [DType::F32, DType::F16] {
        keys.push(KernelKey::new(KernelKind::new(Rope), d, vec![d, DType::I32]));
        keys.push(KernelKey::new(KernelKind::new(Rope), d, vec![d, DType::I32, DType::F32]));
    }
}
