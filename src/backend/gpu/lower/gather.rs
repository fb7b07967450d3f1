//! Lowering of get_rows and concat.

use super::target::{dispatch, grid, GpuTarget};
use crate::backend::gpu::kernel::{Dispatch, KernelKey, KernelKind};
use crate::backend::gpu::params::{vec4, ConcatParams, GetRowsParams, Params};
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
