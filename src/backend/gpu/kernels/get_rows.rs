//! get_rows (`get_rows.wgsl`): `out[i.., :] = table[idx[i..], :]`, one invocation per output element.

use crate::backend::gpu::kernel::{Binding, Dispatch, Family, KernelKey, KernelKind, SplitRule};
use crate::backend::gpu::params::{params, vec4, Params, ParamsBlock, ParamsLayout};
use crate::backend::gpu::target::{dispatch, grid, GpuTarget};
use crate::backend::gpu::wgsl::template::{compute_type, render};
use crate::compile::ir::{Program, Step};
use crate::dtype::DType;
use crate::error::Result;
use crate::graph::{NodeId, Op};

const GET_ROWS: &str = include_str!("get_rows.wgsl");

params! {
    /// `get_rows.wgsl`: `out[i.., :] = table[idx[i..], :]`.
    GetRowsParams {
        /// Output elements.
        count: u32,
        /// Row length D.
        dim: u32,
        /// Table rows V.
        rows: u32,
        /// The table's offset within its binding.
        table_offset: u32,
        /// idx's shape, rank 4 (the output's shape without its last dim).
        idx_shape: [u32; 4],
        /// idx's strides.
        idx_strides: [u32; 4],
        /// idx's offset within its binding.
        idx_offset: u32,
        /// The table's row stride.
        row_stride: u32,
        /// The table's column stride.
        col_stride: u32,
        _pad0: u32,
        /// First table row of the window bound (a table larger than one binding), else 0.
        window_lo: u32,
        /// End of the window's rows, or 0 when the whole table is bound.
        window_hi: u32,
        _pad1: u32,
        _pad2: u32,
    }
}

/// `get_rows.wgsl`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct GetRows;

impl Family for GetRows {
    fn name(&self) -> String {
        "get_rows".into()
    }

    fn params(&self) -> ParamsLayout {
        GetRowsParams::layout()
    }

    fn bindings(&self, key: &KernelKey) -> Vec<Binding> {
        vec![Binding::output("out", key.out), Binding::input("src0", key.ins[0]), Binding::input("src1", key.ins[1])]
    }

    fn wgsl(&self, key: &KernelKey, bindings: String) -> String {
        render(GET_ROWS, &[("BINDINGS", bindings), ("OUT_C", compute_type(key.out).into())])
    }

    fn split(&self) -> SplitRule {
        SplitRule::TableRows
    }
}

/// Lowers get_rows.
pub(crate) fn lower(program: &Program, id: NodeId, t: &GpuTarget) -> Option<Result<Vec<Dispatch>>> {
    let nodes = &program.nodes;
    let Step::Op(Op::GetRows { table, idx }) = nodes[id].step else { return None };
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
    let key = KernelKey::new(KernelKind::new(GetRows), nodes[id].dtype, vec![nodes[table].dtype, nodes[idx].dtype]);
    let bindings = vec![id, nodes[table].storage, nodes[idx].storage];
    let workgroups = grid("get_rows", (numel as u64).div_ceil(256), t.max_groups);
    Some(workgroups.map(|g| vec![dispatch(key, Params::new(p), bindings, g)]))
}

/// Tables of every dtype, storage formats dequantized to f32 and f16.
pub(crate) fn variants(keys: &mut Vec<KernelKey>) {
    use DType::{F16, F32, I32};
    for d in [F32, F16, I32] {
        keys.push(KernelKey::new(KernelKind::new(GetRows), d, vec![d, I32]));
    }
    for q in DType::ALL.into_iter().filter(|d| d.is_storage_format()) {
        for out in [F32, F16] {
            keys.push(KernelKey::new(KernelKind::new(GetRows), out, vec![q, I32]));
        }
    }
}
