//! The row family (`rows.wgsl`): softmax, the norms and the reductions, one workgroup per row of the last axis.

use crate::backend::gpu::kernel::{Binding, Dispatch, Family, KernelKey, KernelKind, SplitRule};
use crate::backend::gpu::kernels::elementwise::epilogue_fn;
use crate::backend::gpu::params::{params, set_packed, vec4, Params, ParamsBlock, ParamsLayout};
use crate::backend::gpu::target::{dispatch, grid, GpuTarget};
use crate::backend::gpu::wgsl::template::{compute_type, render};
use crate::compile::ir::{ElemOp, Expr, Program, Step};
use crate::dtype::DType;
use crate::error::Result;
use crate::graph::{NodeId, Op};
use crate::ops::{BinaryOp, ReduceOp, RowOp};

const ROWS: &str = include_str!("rows.wgsl");

params! {
    /// `rows.wgsl`: softmax, the norms and the reductions, one workgroup per row of the last axis.
    RowsParams {
        /// Row length N.
        n: u32,
        /// Rows this dispatch computes.
        rows: u32,
        /// x's offset within its binding.
        x_offset: u32,
        /// The mask's offset within its binding.
        mask_offset: u32,
        /// x's shape, rank 4.
        x_shape: [u32; 4],
        /// x's strides.
        x_strides: [u32; 4],
        /// The mask's strides, broadcast to x's shape.
        mask_strides: [u32; 4],
        /// Softmax's scale.
        scale: f32,
        /// The norms' epsilon.
        eps: f32,
        /// Index of this dispatch's first row (a chunk of a larger tensor).
        first_row: u32,
        /// Where the first row's output sits in the output binding.
        out_offset: u32,
        /// Strides of epilogue operand k, broadcast to the output's shape (rank 4).
        epi_strides: [[u32; 4]; 5],
        /// Offset of epilogue operand k, at `epi_offsets[k / 4][k % 4]`.
        epi_offsets: [[u32; 4]; 2],
    }
}

/// The ops of `rows.wgsl`: a row op or a reduction.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum RowKernel {
    Row(RowOp),
    Reduce(ReduceOp),
}

impl RowKernel {
    /// Every row kernel: the row-op table, then the reduction table.
    fn all() -> impl Iterator<Item = RowKernel> {
        RowOp::ALL.iter().map(|&o| RowKernel::Row(o)).chain(ReduceOp::ALL.iter().map(|&o| RowKernel::Reduce(o)))
    }

    /// `softmax`, `rms_norm`, ..., `argmax`.
    fn name(self) -> &'static str {
        match self {
            RowKernel::Row(op) => op.name(),
            RowKernel::Reduce(op) => op.name(),
        }
    }

    /// The op's constant in rows.wgsl.
    fn wgsl_const(self) -> &'static str {
        match self {
            RowKernel::Row(op) => op.wgsl_const(),
            RowKernel::Reduce(op) => op.wgsl_const(),
        }
    }
}

/// `rows.wgsl` for op `op`, with an additive mask bound (`mask`, softmax only), and a row op's values passed
/// through `epi` (over `acc` and the operands bound after x and the mask) before the store.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Rows {
    pub op: RowKernel,
    pub mask: bool,
    pub epi: Option<Expr>,
}

impl Family for Rows {
    fn name(&self) -> String {
        let epi = if self.epi.is_some() { "+epilogue" } else { "" };
        format!("rows {}{epi}", self.op.name())
    }

    fn params(&self) -> ParamsLayout {
        RowsParams::layout()
    }

    fn bindings(&self, key: &KernelKey) -> Vec<Binding> {
        let mut v = vec![Binding::output("out", key.out), Binding::input("x_in", key.ins[0])];
        let first = 1 + usize::from(self.mask);
        if self.mask {
            v.push(Binding::input("m_in", key.ins[1]));
        }
        v.extend(key.ins.iter().skip(first).enumerate().map(|(k, &d)| Binding::input(format!("e{k}"), d)));
        v
    }

    fn wgsl(&self, key: &KernelKey, bindings: String) -> String {
        // the mask's accessor exists only in the variant that binds a mask
        let f = if self.mask {
            "fn load_mask(base: u32, j: u32) -> f32 {\n    return f32(ld_m_in(base + j * P.mask_strides.w));\n}"
        } else {
            "fn load_mask(base: u32, j: u32) -> f32 {\n    return 0.0;\n}"
        };
        let subs = [
            ("BINDINGS", bindings),
            ("OUT_C", compute_type(key.out).into()),
            ("MASK_FN", f.into()),
            ("OP", self.op.wgsl_const().into()),
            ("HAS_MASK", self.mask.to_string()),
            ("EPILOGUE", epilogue_fn(key.ins.len() - 1 - usize::from(self.mask), self.epi.as_ref())),
        ];
        render(ROWS, &subs)
    }

    fn split(&self) -> SplitRule {
        SplitRule::Rows { reduces: matches!(self.op, RowKernel::Reduce(_)) }
    }
}

/// Lowers row ops and reductions: one workgroup per row of the operand.
pub(crate) fn lower(program: &Program, id: NodeId, t: &GpuTarget) -> Option<Result<Vec<Dispatch>>> {
    let nodes = &program.nodes;
    let (op, x, mask, scale, eps, epilogue) = match &nodes[id].step {
        Step::Row { op, x, mask, params, epilogue } => {
            (RowKernel::Row(*op), *x, *mask, params.scale, params.eps, epilogue.as_ref())
        }
        Step::Op(Op::Reduce { op, x }) => (RowKernel::Reduce(*op), *x, None, 1.0, 0.0, None),
        _ => return None,
    };
    let lx = &nodes[x].layout;
    let n = lx.shape[lx.rank() - 1];
    let nrows = lx.numel() / n;
    let (xs, xst) = lx.padded4();
    let (mst, moff) = match mask {
        Some(m) => {
            let l = nodes[m].layout.broadcast_operand(&lx.shape);
            (l.padded4().1, l.offset)
        }
        None => ([0; 4], 0),
    };
    let p = RowsParams {
        n: n as u32,
        rows: nrows as u32,
        x_offset: lx.offset as u32,
        mask_offset: moff as u32,
        x_shape: vec4(xs),
        x_strides: vec4(xst),
        mask_strides: vec4(mst),
        scale,
        eps,
        first_row: 0,
        out_offset: 0,
        ..Default::default()
    };
    let mut p = p;
    let mut ins = vec![nodes[x].dtype];
    let mut bindings = vec![id, nodes[x].storage];
    if let Some(m) = mask {
        ins.push(nodes[m].dtype);
        bindings.push(nodes[m].storage);
    }
    for (j, &s) in epilogue.iter().flat_map(|(_, srcs)| srcs).enumerate() {
        let l = program.operand_layout(s, id);
        p.epi_strides[j] = vec4(l.padded4().1);
        set_packed(&mut p.epi_offsets, j, l.offset);
        ins.push(nodes[s].dtype);
        bindings.push(nodes[s].storage);
    }
    let kind = Rows { op, mask: mask.is_some(), epi: epilogue.map(|(e, _)| e.clone()) };
    let key = KernelKey::new(KernelKind::new(kind), nodes[id].dtype, ins);
    let workgroups = grid(&nodes[id].step.name(), nrows as u64, t.max_groups);
    Some(workgroups.map(|g| vec![dispatch(key, Params::new(p), bindings, g)]))
}

/// Every row kernel in f32 and f16, softmax with a mask of either, and softmax(x, mask = x) bound once.
pub(crate) fn variants(keys: &mut Vec<KernelKey>) {
    use DType::{F16, F32};
    for d in [F32, F16] {
        for op in RowKernel::all() {
            let out = if let RowKernel::Reduce(r) = op { r.out_dtype(d) } else { d };
            keys.push(KernelKey::new(KernelKind::new(Rows { op, mask: false, epi: None }), out, vec![d]));
        }
        for m in [F32, F16] {
            let softmax = Rows { op: RowKernel::Row(RowOp::Softmax), mask: true, epi: None };
            keys.push(KernelKey::new(KernelKind::new(softmax), d, vec![d, m]));
            // a norm's weight and a residual: h + rms_norm(x) · w, the operands in either dtype
            let (acc, x0, x1) = (Expr::Acc, Expr::Leaf(0), Expr::Leaf(1));
            let mul = Expr::Node { op: ElemOp::Binary(BinaryOp::Mul), args: vec![acc, x0], dtype: d };
            let add = Expr::Node { op: ElemOp::Binary(BinaryOp::Add), args: vec![mul, x1], dtype: d };
            let norm = Rows { op: RowKernel::Row(RowOp::RmsNorm), mask: false, epi: Some(add) };
            keys.push(KernelKey::new(KernelKind::new(norm), d, vec![d, m, m]));
        }
    }
    let softmax = Rows { op: RowKernel::Row(RowOp::Softmax), mask: true, epi: None };
    let mut same = KernelKey::new(KernelKind::new(softmax), F32, vec![F32, F32]);
    same.alias = vec![0, 0, 0];
    keys.push(same);
}
