//! mul_mat_id (`mul_mat_id.wgsl`): each token's row times the weights of the experts its ids select, 8 output
//! columns of one (token, slot) pair a workgroup.

use crate::backend::gpu::kernel::{Binding, Dispatch, Family, KernelKey, KernelKind};
use crate::backend::gpu::params::{params, vec4, Params, ParamsBlock, ParamsLayout};
use crate::backend::gpu::target::{dispatch, grid, GpuTarget};
use crate::backend::gpu::wgsl::template::render;
use crate::compile::ir::{Program, Step};
use crate::dtype::DType;
use crate::error::Result;
use crate::graph::{NodeId, Op};

const MUL_MAT_ID: &str = include_str!("mul_mat_id.wgsl");

params! {
    /// `mul_mat_id.wgsl`: `out[t, j, n] = a[t, j mod A, :] · w[ids[t, j], n, :]`.
    MulMatIdParams {
        /// Output columns N.
        n: u32,
        /// Inner length K.
        k: u32,
        /// Experts E.
        experts: u32,
        /// Slots a token U.
        u: u32,
        /// Rows of a a token A (1 or U).
        a_rows: u32,
        /// (token, slot) pairs T · U.
        pairs: u32,
        /// Workgroups a pair: ceil(N / 8).
        col_groups: u32,
        /// a's offset within its binding.
        a_offset: u32,
        /// a's strides (token, row, k, -).
        a_strides: [u32; 4],
        /// ids' strides (token, slot, -, -).
        ids_strides: [u32; 4],
        /// w's offset within its binding, in elements.
        w_offset: u32,
        /// ids' offset within its binding.
        ids_offset: u32,
        _pad0: u32,
        _pad1: u32,
    }
}

/// `mul_mat_id.wgsl`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct MulMatId;

impl Family for MulMatId {
    fn name(&self) -> String {
        "mul_mat_id".into()
    }

    fn params(&self) -> ParamsLayout {
        MulMatIdParams::layout()
    }

    fn bindings(&self, key: &KernelKey) -> Vec<Binding> {
        let ins = ["src0", "src1", "src2"].into_iter().zip(&key.ins).map(|(name, &d)| Binding::input(name, d));
        std::iter::once(Binding::output("out", key.out)).chain(ins).collect()
    }

    fn wgsl(&self, _key: &KernelKey, bindings: String) -> String {
        render(MUL_MAT_ID, &[("BINDINGS", bindings)])
    }
}

/// Lowers mul_mat_id.
pub(crate) fn lower(program: &Program, id: NodeId, t: &GpuTarget) -> Option<Result<Vec<Dispatch>>> {
    let nodes = &program.nodes;
    let Step::Op(Op::MulMatId { a, w, ids }) = nodes[id].step else { return None };
    let (la, lw, li) = (&nodes[a].layout, &nodes[w].layout, &nodes[ids].layout);
    let (experts, n, k) = (lw.shape[0], lw.shape[1], lw.shape[2]);
    let (tokens, u) = (li.shape[0], li.shape[1]);
    let col_groups = n.div_ceil(8);
    let p = MulMatIdParams {
        n: n as u32,
        k: k as u32,
        experts: experts as u32,
        u: u as u32,
        a_rows: la.shape[1] as u32,
        pairs: (tokens * u) as u32,
        col_groups: col_groups as u32,
        a_offset: la.offset as u32,
        a_strides: vec4([la.strides[0], la.strides[1], la.strides[2], 0]),
        ids_strides: vec4([li.strides[0], li.strides[1], 0, 0]),
        w_offset: lw.offset as u32,
        ids_offset: li.offset as u32,
        ..Default::default()
    };
    let ins = vec![nodes[a].dtype, nodes[w].dtype, DType::I32];
    let key = KernelKey::new(KernelKind::new(MulMatId), DType::F32, ins);
    let bindings = vec![id, nodes[a].storage, nodes[w].storage, nodes[ids].storage];
    let workgroups = grid("mul_mat_id", (col_groups * tokens * u) as u64, t.max_groups);
    Some(workgroups.map(|g| vec![dispatch(key, Params::new(p), bindings, g)]))
}

/// Activations of f32 and f16, experts of f32, f16 and every storage format.
pub(crate) fn variants(keys: &mut Vec<KernelKey>) {
    let weights = DType::ALL.into_iter().filter(|d| *d != DType::I32);
    for w in weights {
        for a in [DType::F32, DType::F16] {
            keys.push(KernelKey::new(KernelKind::new(MulMatId), DType::F32, vec![a, w, DType::I32]));
        }
    }
}
