//! rope fused with the KV-cache write (`rope_set_rows.wgsl`): `dst[idx[r], :] = rope(x, pos)[r, :]` over the
//! rope's output seen as rows (llama.cpp's rope + set_rows fusion), one invocation per rotated element; the
//! compiler makes the step (`compile/fuse.rs`), saving the rope's dispatch and its memory.

use super::rope::{rotate, RopeAngles, RopeX};
use super::set_rows::TARGET_ROW;
use crate::backend::gpu::kernel::{Binding, Dispatch, Family, KernelKey, KernelKind};
use crate::backend::gpu::params::{params, Params, ParamsBlock, ParamsLayout};
use crate::backend::gpu::target::{dispatch, grid, GpuTarget};
use crate::backend::gpu::wgsl::template::{compute_type, render};
use crate::compile::ir::{Program, Step};
use crate::dtype::DType;
use crate::error::Result;
use crate::graph::NodeId;

const ROPE_SET_ROWS: &str = include_str!("rope_set_rows.wgsl");

params! {
    /// `rope_set_rows.wgsl`: rope's fields as `RopeParams` names them, then set_rows'.
    RopeSetRowsParams {
        /// The roped tensor (its elements N rows of `dim`) and its positions.
        x: RopeX,
        /// The rope's angles.
        rope: RopeAngles,
        /// Row length of the written rows (the destination's columns).
        dim: u32,
        /// Destination rows R.
        rows: u32,
        /// Rows written N.
        n: u32,
        /// The destination's offset within its binding.
        dst_offset: u32,
        /// The destination's row stride.
        dst_row_stride: u32,
        /// The indices' offset within their binding.
        idx_offset: u32,
        /// The indices' stride.
        idx_stride: u32,
        _pad0: u32,
    }
}

/// `rope_set_rows.wgsl`; `rope_dtype` is the dtype each rotated value is rounded to before the write.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct RopeSetRows {
    pub rope_dtype: DType,
}

impl Family for RopeSetRows {
    fn name(&self) -> String {
        "rope+set_rows".into()
    }

    fn params(&self) -> ParamsLayout {
        RopeSetRowsParams::layout()
    }

    fn bindings(&self, key: &KernelKey) -> Vec<Binding> {
        let ins = ["src0", "src1", "src2", "src3"].into_iter().zip(&key.ins).map(|(name, &d)| Binding::input(name, d));
        std::iter::once(Binding::output("out", key.out)).chain(ins).collect()
    }

    fn wgsl(&self, key: &KernelKey, bindings: String) -> String {
        let round = if self.rope_dtype == DType::F16 { "f16_round(v)" } else { "v" };
        let subs = [("BINDINGS", bindings), ("OUT_C", compute_type(key.out).into()), ("ROUND", round.into())];
        let target = render(TARGET_ROW, &[("IDX", "src2".into())]);
        render(ROPE_SET_ROWS, &subs) + &rotate("rope_value", "src0", (key.ins.len() == 4).then_some("src3")) + &target
    }
}

/// Lowers the fused step: the destination is written in place.
pub(crate) fn lower(p: &Program, id: NodeId, t: &GpuTarget) -> Option<Result<Vec<Dispatch>>> {
    let nodes = &p.nodes;
    let Step::RopeSetRows { dst, idx, x, pos, factors, rope, rope_dtype } = nodes[id].step else { return None };
    let (lx, ld, li, lp) = (&nodes[x].layout, &nodes[dst].layout, &nodes[idx].layout, &nodes[pos].layout);
    let count = lx.numel();
    let params = RopeSetRowsParams {
        x: RopeX::of(lx, lp),
        rope: RopeAngles::of(&rope),
        dim: ld.shape[1] as u32,
        rows: ld.shape[0] as u32,
        n: li.numel() as u32,
        dst_offset: ld.offset as u32,
        dst_row_stride: ld.strides[0] as u32,
        idx_offset: li.offset as u32,
        idx_stride: li.strides[0] as u32,
        ..Default::default()
    };
    let srcs = [x, pos, idx].into_iter().chain(factors);
    let ins = srcs.clone().map(|n| nodes[n].dtype).collect();
    let key = KernelKey::new(KernelKind::new(RopeSetRows { rope_dtype }), nodes[dst].dtype, ins);
    let bindings = std::iter::once(id).chain(srcs).map(|n| nodes[n].storage).collect();
    let workgroups = grid("rope+set_rows", (count as u64).div_ceil(256), t.max_groups);
    Some(workgroups.map(|g| vec![dispatch(key, Params::new(params), bindings, g)]))
}

/// KV caches of f32 and f16 written from ropes of either dtype, and positions that are the indices.
pub(crate) fn variants(keys: &mut Vec<KernelKey>) {
    use DType::{F16, F32, I32};
    for (dst, rope) in [(F32, F32), (F16, F32), (F16, F16), (F32, F16)] {
        keys.push(KernelKey::new(KernelKind::new(RopeSetRows { rope_dtype: rope }), dst, vec![rope, I32, I32]));
        keys.push(KernelKey::new(KernelKind::new(RopeSetRows { rope_dtype: rope }), dst, vec![rope, I32, I32, F32]));
    }
    // the rope's positions are the rows written (a language model's KV cache): one binding
    let mut same = KernelKey::new(KernelKind::new(RopeSetRows { rope_dtype: F32 }), F16, vec![F32, I32, I32]);
    same.alias = vec![0, 1, 2, 2];
    keys.push(same);
    let mut same = KernelKey::new(KernelKind::new(RopeSetRows { rope_dtype: F32 }), F16, vec![F32, I32, I32, F32]);
    same.alias = vec![0, 1, 2, 2, 4];
    keys.push(same);
}
