//! rope (`rope.wgsl`): rotary position embedding of a `[B, T, H, D]` tensor at positions `pos`, one invocation
//! per output element.

use crate::backend::gpu::kernel::{Binding, Dispatch, Family, KernelKey, KernelKind};
use crate::backend::gpu::params::{params, vec4, Params, ParamsBlock, ParamsLayout};
use crate::backend::gpu::target::{dispatch, grid, GpuTarget};
use crate::backend::gpu::wgsl::template::{compute_type, render};
use crate::compile::ir::{Program, Step};
use crate::dtype::DType;
use crate::error::Result;
use crate::graph::{NodeId, Op};
use crate::ops::RopeMode;

const ROPE: &str = include_str!("rope.wgsl");
const ROTATE: &str = include_str!("rope_rotate.wgsl");

/// `rope_value(i)`, shared with the rope fused into a KV-cache write (`rope_set_rows.rs`): each pair's angle
/// divided by its frequency factor read from the binding `factors` names, or by none.
pub(crate) fn rotate(factors: Option<&str>) -> String {
    let theta = factors.map_or("theta".into(), |b| format!("(theta / f32(ld_{b}(pair)))"));
    render(ROTATE, &[("THETA", theta)])
}

params! {
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
        /// Position scaling (linear or YaRN's).
        freq_scale: f32,
        /// YaRN's weight of the extrapolated angle (0: none).
        ext_factor: f32,
        /// Scale of cos and sin.
        attn_factor: f32,
        /// YaRN's ramp: its first pair.
        corr_low: f32,
        /// YaRN's ramp: its last pair.
        corr_high: f32,
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
        render(ROPE, &[("BINDINGS", bindings), ("OUT_C", compute_type(key.out).into())]) + &rotate(factors)
    }
}

/// Lowers rope.
pub(crate) fn lower(p: &Program, id: NodeId, t: &GpuTarget) -> Option<Result<Vec<Dispatch>>> {
    let nodes = &p.nodes;
    let Step::Op(Op::Rope { x, pos, factors, rope }) = &nodes[id].step else { return None };
    let lx = &nodes[*x].layout;
    let (shape, strides) = lx.padded4();
    let lp = &nodes[*pos].layout;
    let count = lx.numel();
    let params = RopeParams {
        count: count as u32,
        n_dims: rope.n_dims as u32,
        neox: (rope.mode == RopeMode::Neox) as u32,
        theta_scale: rope.theta_scale(),
        freq_scale: rope.freq_scale,
        ext_factor: rope.ext_factor,
        attn_factor: rope.attn_factor,
        corr_low: rope.corr_dims[0],
        corr_high: rope.corr_dims[1],
        x_offset: lx.offset as u32,
        pos_offset: lp.offset as u32,
        pos_stride: lp.strides[0] as u32,
        shape: vec4(shape),
        x_strides: vec4(strides),
    };
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
