//! Lowering of rope and attention.

use super::target::{dispatch, grid, GpuTarget};
use crate::backend::gpu::kernel::{Dispatch, DynamicGrid, KernelKey, KernelKind, SCRATCH};
use crate::backend::gpu::params::{vec4, AttentionParams, Params, RopeParams};
use crate::backend::gpu::wgsl::attention::shared_bytes;
use crate::compile::ir::Program;
use crate::graph::NodeId;
use crate::ops::{Rope, RopeMode};
use crate::shape::Layout;
use crate::{DType, Error, Result};

/// `[B, T, H, D]` rotated at positions `pos`, one invocation per output element.
pub(super) fn rope(p: &Program, id: NodeId, x: NodeId, pos: NodeId, rope: &Rope, t: &GpuTarget) -> Result<Dispatch> {
    let nodes = &p.nodes;
    let lx = &nodes[x].layout;
    let (shape, strides) = lx.padded4();
    let lp = &nodes[pos].layout;
    let count = lx.numel();
    let params = RopeParams {
        count: count as u32,
        n_dims: rope.n_dims as u32,
        neox: (rope.mode == RopeMode::Neox) as u32,
        theta_scale: rope.theta_scale(),
        freq_scale: rope.freq_scale,
        x_offset: lx.offset as u32,
        pos_offset: lp.offset as u32,
        pos_stride: lp.strides[0] as u32,
        shape: vec4(shape),
        x_strides: vec4(strides),
    };
    let key = KernelKey::new(KernelKind::Rope, nodes[id].dtype, vec![nodes[x].dtype, nodes[pos].dtype]);
    let bindings = vec![nodes[id].storage, nodes[x].storage, nodes[pos].storage];
    let workgroups = grid("rope", (count as u64).div_ceil(256), t.max_groups)?;
    Ok(dispatch(key, Params::RopeParams(params), bindings, workgroups))
}

/// Strides (b, h, t, last) of a `[.., h, t, last]` layout, batch stride 0 without a batch dim.
fn strides4(l: &Layout) -> [u32; 4] {
    let r = l.rank();
    let b = if r == 4 { l.strides[0] } else { 0 };
    vec4([b, l.strides[r - 3], l.strides[r - 2], l.strides[r - 1]])
}

/// The attention step's operands.
pub(super) struct AttentionStep {
    pub q: NodeId,
    pub k: NodeId,
    pub v: NodeId,
    pub mask: Option<NodeId>,
    pub kv_len: Option<NodeId>,
    pub scale: f32,
    pub causal: bool,
}

/// Tile sizes (BR queries, BC keys) for head dims `d`, `dv` and `t` queries that fit `max_shared` bytes.
fn tiles(d: u32, dv: u32, t: usize, max_shared: u32) -> Result<(u32, u32)> {
    let br = if t == 1 { 1 } else { 16 };
    [64, 32, 16, 8, 4].into_iter().find(|&bc| shared_bytes(d, dv, br, bc) <= max_shared).map(|bc| (br, bc)).ok_or_else(
        || Error::LimitExceeded {
            what: format!("attention with head dims {d}/{dv}: workgroup memory of its smallest tile"),
            size: shared_bytes(d, dv, br, 4) as u64,
            unit: "bytes",
            limit_name: "max_compute_workgroup_storage_size",
            limit: max_shared as u64,
        },
    )
}

/// The attention step's uniforms, for `splits` splits of `split_len` keys and tiles of `bc` keys.
fn params(p: &Program, a: &AttentionStep, splits: usize, split_len: usize, bc: u32) -> AttentionParams {
    let nodes = &p.nodes;
    let (lq, lk, lv) = (&nodes[a.q].layout, &nodes[a.k].layout, &nodes[a.v].layout);
    let r = lq.rank();
    let (h, tq, d) = (lq.shape[r - 3], lq.shape[r - 2], lq.shape[r - 1]);
    let (hkv, s, dv) = (lk.shape[r - 3], lk.shape[r - 2], lv.shape[r - 1]);
    let (mask_strides, mask_offset) = match a.mask {
        Some(m) => {
            let mut full = lq.shape.clone();
            full[r - 1] = s;
            let l = nodes[m].layout.broadcast_operand(&full);
            (strides4(&l), l.offset as u32)
        }
        None => ([0; 4], 0),
    };
    AttentionParams {
        h: h as u32,
        t: tq as u32,
        s: s as u32,
        group: (h / hkv) as u32,
        static_len: s as u32,
        causal: a.causal as u32,
        scale: a.scale,
        splits: splits as u32,
        split_len: split_len as u32,
        batch: if r == 4 { lq.shape[0] as u32 } else { 1 },
        mask_offset,
        kv_len_offset: a.kv_len.map_or(0, |l| nodes[l].layout.offset as u32),
        q_strides: strides4(lq),
        k_strides: strides4(lk),
        v_strides: strides4(lv),
        mask_strides,
        q_offset: lq.offset as u32,
        k_offset: lk.offset as u32,
        v_offset: lv.offset as u32,
        d: d as u32,
        dv: dv as u32,
        bc,
        _pad0: 0,
        _pad1: 0,
    }
}

/// Flash attention: one dispatch, or for one query over many keys (decode) a split over the keys and a combine
/// pass through the plan's scratch buffer.
pub(super) fn attention(p: &Program, id: NodeId, a: &AttentionStep, t: &GpuTarget) -> Result<Vec<Dispatch>> {
    let nodes = &p.nodes;
    let (lq, lk, lv) = (&nodes[a.q].layout, &nodes[a.k].layout, &nodes[a.v].layout);
    let r = lq.rank();
    let (h, tq, d) = (lq.shape[r - 3], lq.shape[r - 2], lq.shape[r - 1]);
    let (s, dv) = (lk.shape[r - 2], lv.shape[r - 1]);
    let batch = if r == 4 { lq.shape[0] } else { 1 };
    let (br, bc) = tiles(d as u32, dv as u32, tq, t.max_shared)?;
    let split_len = if tq == 1 && s > 256 { s.div_ceil(64).max(256).div_ceil(bc as usize) * bc as usize } else { s };
    let splits = s.div_ceil(split_len);
    let params = params(p, a, splits, split_len, bc);
    let partial = splits > 1;
    let (mask, dyn_len) = (a.mask.is_some(), a.kv_len.is_some());
    let kind = KernelKind::Attention { d: d as u32, dv: dv as u32, br, bc, partial, mask, dyn_len };
    let mut ins = vec![nodes[a.q].dtype, nodes[a.k].dtype, nodes[a.v].dtype];
    let out = nodes[id].storage;
    let mut bindings =
        vec![if partial { SCRATCH } else { out }, nodes[a.q].storage, nodes[a.k].storage, nodes[a.v].storage];
    for n in a.mask.iter().chain(&a.kv_len) {
        ins.push(nodes[*n].dtype);
        bindings.push(nodes[*n].storage);
    }
    if partial {
        // the output too: a run whose length reaches one split writes it directly, and skips the combine
        ins.push(nodes[id].dtype);
        bindings.push(out);
    }
    let z = batch * tq.div_ceil(br as usize);
    if [splits, h, z].into_iter().any(|n| n > t.max_groups as usize) {
        return Err(Error::LimitExceeded {
            what: format!("attention over {splits} splits, {h} heads and {z} query blocks: workgroups per dimension"),
            size: splits.max(h).max(z) as u64,
            unit: "workgroups",
            limit_name: "max_compute_workgroups_per_dimension",
            limit: t.max_groups as u64,
        });
    }
    let workgroups = [splits as u32, h as u32, z as u32];
    let out_dtype = if partial { DType::F32 } else { nodes[id].dtype };
    let mut first =
        dispatch(KernelKey::new(kind, out_dtype, ins), Params::AttentionParams(params), bindings, workgroups);
    if !partial {
        return Ok(vec![first]);
    }
    // a KV cache's capacity sets the splits; a run-time length the run uploads sets how many are dispatched
    let host_len = a.kv_len.filter(|&l| p.inputs.contains(&nodes[l].storage));
    let grid_of = |l: NodeId, skip_single| DynamicGrid {
        input: nodes[l].storage,
        offset: nodes[l].layout.offset,
        per_group: split_len as u32,
        max_len: s as u32,
        skip_single,
    };
    first.dynamic = host_len.map(|l| grid_of(l, false));
    first.scratch = (batch * h * tq * splits * (dv + 2) * 4) as u64;
    let mut ins = vec![DType::F32];
    let mut bindings = vec![out, SCRATCH];
    if let Some(l) = a.kv_len {
        ins.push(nodes[l].dtype);
        bindings.push(nodes[l].storage);
    }
    let key = KernelKey::new(KernelKind::AttentionCombine { dv: dv as u32, dyn_len }, nodes[id].dtype, ins);
    let groups = grid("attention combine", (batch * h * tq) as u64, t.max_groups)?;
    let mut combine = dispatch(key, Params::AttentionParams(params), bindings, groups);
    combine.scratch = first.scratch;
    combine.dynamic = host_len.map(|l| grid_of(l, true));
    Ok(vec![first, combine])
}
