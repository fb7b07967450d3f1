//! Lowering of get_rows and concat.

use super::target::{dispatch, grid, GpuTarget};
use crate::backend::gpu::kernel::{Dispatch, KernelKey, KernelKind};
use crate::backend::gpu::params::{vec4, ConcatParams, CopyParams, GetRowsParams, Params, SetRowsParams};
use crate::compile::ir::Program;
use crate::graph::NodeId;
use crate::Result;

/// `out[i.., :] = table[idx[i..], :]`, one invocation per output element.
pub(super) fn get_rows(program: &Program, id: NodeId, table: NodeId, idx: NodeId, t: &GpuTarget) -> Result<Dispatch> {
    let nodes = &program.nodes;
    let numel = nodes[id].layout.numel();
    let lt = &nodes[table].layout;
    let li = &nodes[idx].layout;
    let (ishape, istrides) = li.padded4();
    let p = GetRowsParams {
        count: numel as u32,
        dim: lt.shape[1] as u32,
        rows: lt.shape[0] as u32,
        table_offset: lt.offset as u32,
        idx_shape: vec4(ishape),
        idx_strides: vec4(istrides),
        idx_offset: li.offset as u32,
        row_stride: lt.strides[0] as u32,
        col_stride: lt.strides[1] as u32,
        ..Default::default()
    };
    let key = KernelKey::new(KernelKind::GetRows, nodes[id].dtype, vec![nodes[table].dtype, nodes[idx].dtype]);
    let bindings = vec![id, nodes[table].storage, nodes[idx].storage];
    let workgroups = grid("get_rows", (numel as u64).div_ceil(256), t.max_groups)?;
    Ok(dispatch(key, Params::GetRowsParams(p), bindings, workgroups))
}

/// `out = concatenate([a, b], axis)`, one invocation per output element.
pub(super) fn concat(
    program: &Program,
    id: NodeId,
    a: NodeId,
    b: NodeId,
    axis: usize,
    t: &GpuTarget,
) -> Result<Dispatch> {
    let nodes = &program.nodes;
    let node = &nodes[id];
    let numel = node.layout.numel();
    let (la, lb) = (&nodes[a].layout, &nodes[b].layout);
    let lead = 4 - node.layout.rank();
    let p = ConcatParams {
        count: numel as u32,
        axis: (lead + axis) as u32,
        split: la.shape[axis] as u32,
        out_shape: vec4(node.layout.padded4().0),
        a_strides: vec4(la.padded4().1),
        b_strides: vec4(lb.padded4().1),
        a_offset: la.offset as u32,
        b_offset: lb.offset as u32,
        ..Default::default()
    };
    let key = KernelKey::new(KernelKind::Concat, node.dtype, vec![nodes[a].dtype, nodes[b].dtype]);
    let bindings = vec![id, nodes[a].storage, nodes[b].storage];
    let workgroups = grid("concat", (numel as u64).div_ceil(256), t.max_groups)?;
    Ok(dispatch(key, Params::ConcatParams(p), bindings, workgroups))
}

/// `dst[idx[r], :] = src[r, :]`, one invocation per element of src.
pub(super) fn set_rows(
    p: &Program,
    id: NodeId,
    dst: NodeId,
    idx: NodeId,
    src: NodeId,
    t: &GpuTarget,
) -> Result<Dispatch> {
    let nodes = &p.nodes;
    let (ld, li, ls) = (&nodes[dst].layout, &nodes[idx].layout, &nodes[src].layout);
    let (rows, dim, n) = (ld.shape[0], ld.shape[1], ls.shape[0]);
    let count = n * dim;
    let params = SetRowsParams {
        count: count as u32,
        dim: dim as u32,
        rows: rows as u32,
        n: n as u32,
        dst_offset: ld.offset as u32,
        dst_row_stride: ld.strides[0] as u32,
        src_offset: ls.offset as u32,
        src_row_stride: ls.strides[0] as u32,
        src_col_stride: ls.strides[1] as u32,
        idx_offset: li.offset as u32,
        idx_stride: li.strides[0] as u32,
        _pad0: 0,
    };
    let key = KernelKey::new(KernelKind::SetRows, nodes[dst].dtype, vec![nodes[src].dtype, nodes[idx].dtype]);
    let bindings = vec![nodes[id].storage, nodes[src].storage, nodes[idx].storage];
    let workgroups = grid("set_rows", (count as u64).div_ceil(256), t.max_groups)?;
    Ok(dispatch(key, Params::SetRowsParams(params), bindings, workgroups))
}

/// `dst[c] = src[c]` through dst's strides, one invocation per element.
pub(super) fn copy_into(p: &Program, id: NodeId, dst: NodeId, src: NodeId, t: &GpuTarget) -> Result<Dispatch> {
    let nodes = &p.nodes;
    let ld = &nodes[dst].layout;
    let ls = nodes[src].layout.broadcast_operand(&ld.shape);
    let (shape, dst_strides) = ld.padded4();
    let count = ld.numel();
    let params = CopyParams {
        count: count as u32,
        dst_offset: ld.offset as u32,
        src_offset: ls.offset as u32,
        _pad0: 0,
        shape: vec4(shape),
        dst_strides: vec4(dst_strides),
        src_strides: vec4(ls.padded4().1),
    };
    let key = KernelKey::new(KernelKind::CopyInto, nodes[dst].dtype, vec![nodes[src].dtype]);
    let bindings = vec![nodes[id].storage, nodes[src].storage];
    let workgroups = grid("copy_into", (count as u64).div_ceil(256), t.max_groups)?;
    Ok(dispatch(key, Params::CopyParams(params), bindings, workgroups))
}
