//! A layer's queries, keys and values in one dispatch (`rope_kv_writes.wgsl`): the queries' rope, the keys' rope
//! written into their cache and the values written into theirs, each part over its own range of invocations. The
//! compiler makes the step (`compile/fuse.rs`, [`Step::RopeKvWrites`]), saving two dispatches a layer.

use super::rope::{rotate, RopeAngles, RopeX};
use super::set_rows::TARGET_ROW;
use crate::backend::gpu::kernel::{Binding, Dispatch, Family, KernelKey, KernelKind};
use crate::backend::gpu::params::{params, Params, ParamsBlock, ParamsLayout};
use crate::backend::gpu::target::{dispatch, grid, GpuTarget};
use crate::backend::gpu::wgsl::template::{compute_type, render};
use crate::compile::ir::{Program, Step};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::graph::NodeId;

const ROPE_KV_WRITES: &str = include_str!("rope_kv_writes.wgsl");

/// Storage bindings the kernel may use: WebGPU's guaranteed `maxStorageBuffersPerShaderStage` (the fusion is
/// declined when the step's distinct storages are more).
pub(crate) const MAX_BINDINGS: usize = 8;

params! {
    /// `rope_kv_writes.wgsl`: the queries' rope, the keys' rope and write, the values' write; set_rows' fields
    /// as `SetRowsParams` names them.
    RopeKvWritesParams {
        /// The queries and their positions.
        q: RopeX,
        /// The keys (N rows of `k_dim`) and their positions (the queries').
        k: RopeX,
        /// The rope's angles.
        rope: RopeAngles,
        /// Row length of the keys' cache.
        k_dim: u32,
        /// The keys' cache offset within its binding.
        k_dst_offset: u32,
        /// The keys' cache row stride.
        k_dst_row_stride: u32,
        /// The values' elements: N rows of `v_dim`.
        v_count: u32,
        /// Row length of the values' cache.
        v_dim: u32,
        /// The values' cache offset within its binding.
        v_dst_offset: u32,
        /// The values' cache row stride.
        v_dst_row_stride: u32,
        /// The values' offset within their binding.
        v_src_offset: u32,
        /// The values' row stride.
        v_src_row_stride: u32,
        /// The values' column stride.
        v_src_col_stride: u32,
        /// Rows of either cache R.
        rows: u32,
        /// Rows written N.
        n: u32,
        /// The indices' offset within their binding.
        idx_offset: u32,
        /// The indices' stride.
        idx_stride: u32,
        _pad0: u32,
        _pad1: u32,
    }
}

/// `rope_kv_writes.wgsl`; `k_rope_dtype` is the dtype each rotated key is rounded to before its write.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct RopeKvWrites {
    pub k_rope_dtype: DType,
}

impl Family for RopeKvWrites {
    fn name(&self) -> String {
        "rope+kv_writes".into()
    }

    fn params(&self) -> ParamsLayout {
        RopeKvWritesParams::layout()
    }

    /// The queries' rope, the two caches (written), then the queries, positions, indices, keys, values and
    /// (a sixth input) the frequency factors.
    fn bindings(&self, key: &KernelKey) -> Vec<Binding> {
        let caches = [Binding::output("kc", key.ins[0]), Binding::output("vc", key.ins[1])];
        let names = ["src0", "src1", "src2", "src3", "src4", "src5"];
        let ins = names.into_iter().zip(&key.ins[2..]).map(|(name, &d)| Binding::input(name, d));
        std::iter::once(Binding::output("out", key.out)).chain(caches).chain(ins).collect()
    }

    fn wgsl(&self, key: &KernelKey, bindings: String) -> String {
        let round = if self.k_rope_dtype == DType::F16 { "f16_round(v)" } else { "v" };
        let subs = [
            ("BINDINGS", bindings),
            ("OUT_C", compute_type(key.out).into()),
            ("KC_C", compute_type(key.ins[0]).into()),
            ("VC_C", compute_type(key.ins[1]).into()),
            ("K_ROUND", round.into()),
        ];
        let factors = (key.ins.len() == 8).then_some("src5");
        let target = render(TARGET_ROW, &[("IDX", "src2".into())]);
        render(ROPE_KV_WRITES, &subs)
            + &rotate("rope_q", "src0", factors)
            + &rotate("rope_k", "src3", factors)
            + &target
    }
}

/// Lowers the fused step: the caches are written in place.
pub(crate) fn lower(p: &Program, id: NodeId, t: &GpuTarget) -> Option<Result<Vec<Dispatch>>> {
    let nodes = &p.nodes;
    let Step::RopeKvWrites { x, pos, factors, rope, idx, k, k_rope_dtype, v } = nodes[id].step else { return None };
    let (lq, lk, lv) = (&nodes[x].layout, &nodes[k.src].layout, &nodes[v.src].layout);
    let (lkd, lvd, li, lp) = (&nodes[k.dst].layout, &nodes[v.dst].layout, &nodes[idx].layout, &nodes[pos].layout);
    let (q_count, k_count, v_count) = (lq.numel(), lk.numel(), lv.numel());
    let params = RopeKvWritesParams {
        q: RopeX::of(lq, lp),
        k: RopeX::of(lk, lp),
        rope: RopeAngles::of(&rope),
        k_dim: lkd.shape[1] as u32,
        k_dst_offset: lkd.offset as u32,
        k_dst_row_stride: lkd.strides[0] as u32,
        v_count: v_count as u32,
        v_dim: lvd.shape[1] as u32,
        v_dst_offset: lvd.offset as u32,
        v_dst_row_stride: lvd.strides[0] as u32,
        v_src_offset: lv.offset as u32,
        v_src_row_stride: lv.strides[0] as u32,
        v_src_col_stride: lv.strides[1] as u32,
        rows: lkd.shape[0] as u32,
        n: li.numel() as u32,
        idx_offset: li.offset as u32,
        idx_stride: li.strides[0] as u32,
        ..Default::default()
    };
    let srcs = [k.dst, v.dst, x, pos, idx, k.src, v.src].into_iter().chain(factors);
    let ins = srcs.clone().map(|n| nodes[n].dtype).collect();
    let key = KernelKey::new(KernelKind::new(RopeKvWrites { k_rope_dtype }), nodes[id].dtype, ins);
    let bindings: Vec<NodeId> = std::iter::once(id).chain(srcs).map(|n| nodes[n].storage).collect();
    let distinct = bindings.iter().enumerate().filter(|&(i, b)| !bindings[..i].contains(b)).count();
    if distinct > MAX_BINDINGS {
        let reason = format!("{distinct} storage bindings, past the {MAX_BINDINGS} every adapter has");
        return Some(Err(Error::Unsupported { op: "rope+kv_writes".into(), backend: "GPU".into(), reason }));
    }
    let count = (q_count + k_count + v_count) as u64;
    let workgroups = grid("rope+kv_writes", count.div_ceil(256), t.max_groups);
    Some(workgroups.map(|g| vec![dispatch(key, Params::new(params), bindings, g)]))
}

/// A language model's layer: queries of f32 or f16, caches of f16 or f32, with and without frequency factors;
/// and as it binds in a decode step (queries, keys and values columns of one projection, the positions the
/// indices).
pub(crate) fn variants(keys: &mut Vec<KernelKey>) {
    use DType::{F16, F32, I32};
    let kind = |k_rope_dtype| KernelKind::new(RopeKvWrites { k_rope_dtype });
    for (q, cache) in [(F32, F16), (F32, F32), (F16, F16)] {
        for factors in [false, true] {
            let ins: Vec<DType> = [cache, cache, q, I32, I32, q, q].into_iter().chain(factors.then_some(F32)).collect();
            keys.push(KernelKey::new(kind(q), q, ins.clone()));
            if q == F32 && cache == F16 {
                let mut same = KernelKey::new(kind(q), q, ins);
                same.alias = [0, 1, 2, 3, 4, 4, 3, 3].into_iter().chain(factors.then_some(8)).collect();
                keys.push(same);
            }
        }
    }
}
