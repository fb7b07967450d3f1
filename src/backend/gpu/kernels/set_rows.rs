//! set_rows (`set_rows.wgsl`): `dst[idx[r], :] = src[r, :]`, one invocation per element of src.

use crate::backend::gpu::kernel::{Binding, Dispatch, Family, KernelKey, KernelKind};
use crate::backend::gpu::params::{params, Params, ParamsBlock, ParamsLayout};
use crate::backend::gpu::target::{dispatch, grid, GpuTarget};
use crate::backend::gpu::wgsl::template::{compute_type, render};
use crate::compile::ir::{Program, Step};
use crate::dtype::DType;
use crate::error::Result;
use crate::graph::{NodeId, Op};

const SET_ROWS: &str = include_str!("set_rows.wgsl");
/// `target_row(r)`, shared with the rope fused into a KV-cache write (`rope_set_rows.rs`): which row a source row
/// is written to, reading the indices through `ld_{{IDX}}`.
pub(crate) const TARGET_ROW: &str = include_str!("set_rows_target.wgsl");

params! {
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
}

/// `set_rows.wgsl`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct SetRows;

impl Family for SetRows {
    fn name(&self) -> String {
        "set_rows".into()
    }

    fn params(&self) -> ParamsLayout {
        SetRowsParams::layout()
    }

    fn bindings(&self, key: &KernelKey) -> Vec<Binding> {
        vec![Binding::output("out", key.out), Binding::input("src0", key.ins[0]), Binding::input("src1", key.ins[1])]
    }

    fn wgsl(&self, key: &KernelKey, bindings: String) -> String {
        let target = render(TARGET_ROW, &[("IDX", "src1".into())]);
        render(SET_ROWS, &[("BINDINGS", bindings), ("OUT_C", compute_type(key.out).into())]) + &target
    }
}

/// Lowers set_rows: the destination is written in place.
pub(crate) fn lower(program: &Program, id: NodeId, t: &GpuTarget) -> Option<Result<Vec<Dispatch>>> {
    let nodes = &program.nodes;
    let Step::Op(Op::SetRows { dst, idx, src }) = nodes[id].step else { return None };
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
    let kind = KernelKind::new(SetRows);
    let key = KernelKey::new(kind, nodes[dst].dtype, vec![nodes[src].dtype, nodes[idx].dtype]);
    let bindings = vec![nodes[id].storage, nodes[src].storage, nodes[idx].storage];
    let workgroups = grid("set_rows", (count as u64).div_ceil(256), t.max_groups);
    Some(workgroups.map(|g| vec![dispatch(key, Params::new(params), bindings, g)]))
}

/// Destination and source dtypes as KV caches mix them.
pub(crate) fn variants(keys: &mut Vec<KernelKey>) {
    use DType::{F16, F32, I32};
    for (dst, src) in [(F32, F32), (F16, F32), (F16, F16), (F32, F16), (I32, I32)] {
        keys.push(KernelKey::new(KernelKind::new(SetRows), dst, vec![src, I32]));
    }
}
