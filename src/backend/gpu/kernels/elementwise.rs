//! The elementwise family (`elementwise.wgsl`): `out = expr(x0, x1, ..)` over every element of a contiguous
//! output, for elementwise steps (fused or not) and dequantizing copies. Also renders expression trees for the
//! matmul epilogues.

use crate::backend::gpu::kernel::{Binding, Dispatch, Family, KernelKey, KernelKind, SplitRule};
use crate::backend::gpu::params::{params, set_packed, vec4, Params, ParamsBlock, ParamsLayout};
use crate::backend::gpu::target::{dispatch, grid, GpuTarget};
use crate::backend::gpu::wgsl::template::{compute_type, render};
use crate::compile::ir::{ElemOp, Expr, Program, Step};
use crate::dtype::DType;
use crate::error::Result;
use crate::graph::NodeId;
use crate::ops::{BinaryOp, GluOp, UnaryOp};

const ELEMENTWISE: &str = include_str!("elementwise.wgsl");

params! {
    /// `elementwise.wgsl`: `out[i] = expr(x0, x1, ..)` over a chunk of a contiguous output.
    ElementwiseParams {
        /// Elements this dispatch computes.
        count: u32,
        /// Flat index of the chunk's first element in the whole output.
        first: u32,
        /// Where the chunk's first element sits in the output binding.
        out_offset: u32,
        _pad0: u32,
        /// Output shape, rank 4, left-padded with 1.
        out_shape: [u32; 4],
        /// Strides of input k (0 on broadcast dims), at `in_strides[k]`.
        in_strides: [[u32; 4]; 6],
        /// Offset of input k within its binding, at `in_offsets[k / 4][k % 4]`.
        in_offsets: [[u32; 4]; 2],
    }
}

/// `out = expr(x0, x1, ..)`; `expr` is an expression tree over the loaded operands.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Elementwise {
    pub expr: Expr,
}

impl Family for Elementwise {
    fn name(&self) -> String {
        "elementwise".into()
    }

    fn params(&self) -> ParamsLayout {
        ElementwiseParams::layout()
    }

    fn bindings(&self, key: &KernelKey) -> Vec<Binding> {
        let ins = key.ins.iter().enumerate().map(|(k, &d)| Binding::input(format!("in{k}"), d));
        std::iter::once(Binding::output("out", key.out)).chain(ins).collect()
    }

    fn wgsl(&self, key: &KernelKey, bindings: String) -> String {
        let int = key.out == DType::I32 && key.ins.iter().all(|&d| d == DType::I32);
        let c = if int { "i32" } else { "f32" };
        let loads = (0..key.ins.len())
            .map(|k| {
                let off = format!("P.in_offsets[{}].{}", k / 4, ["x", "y", "z", "w"][k % 4]);
                format!("    let x{k} = {c}(ld_in{k}(at(c, P.in_strides[{k}], {off})));")
            })
            .collect::<Vec<_>>()
            .join("\n");
        let expr = render_expr(&self.expr);
        let subs = [("BINDINGS", bindings), ("OUT_C", compute_type(key.out).into()), ("LOADS", loads), ("EXPR", expr)];
        render(ELEMENTWISE, &subs)
    }

    fn split(&self) -> SplitRule {
        SplitRule::Elements
    }
}

/// The WGSL of one expression node over its rendered arguments, computed in f32 (i32 for integer kernels); an
/// f16 node is rounded to f16 (`f16_round`, `wgsl/f16_round.wgsl`), so that a fused kernel gives what storing the
/// node would.
fn node(op: ElemOp, dtype: DType, args: &[String]) -> String {
    let v = match op {
        ElemOp::Unary { op, a, b } => op.wgsl(&args[0], a, b),
        ElemOp::Binary(op) => op.wgsl(&args[0], &args[1]),
        ElemOp::Glu(op) => op.wgsl(&args[0], &args[1]),
        ElemOp::Cast => args[0].clone(),
    };
    if dtype == DType::F16 {
        format!("f16_round({v})")
    } else {
        v
    }
}

/// The WGSL of `expr` with operand k as `xk` and the matmul accumulator as `acc`.
pub(crate) fn render_expr(expr: &Expr) -> String {
    expr.render(&|k| format!("x{k}"), &node)
}

/// Lowers elementwise steps and dequantizing copies: `expr(srcs)` over every element of step `id`'s contiguous
/// output.
pub(crate) fn lower(program: &Program, id: NodeId, t: &GpuTarget) -> Option<Result<Vec<Dispatch>>> {
    let node = &program.nodes[id];
    let cast;
    let (expr, srcs) = match &node.step {
        Step::Elementwise { expr, srcs } => (expr, srcs.as_slice()),
        Step::Dequantize { x } => {
            // the element accessors of a storage-format binding decode blocks: a copy kernel dequantizes
            cast = Expr::Node { op: ElemOp::Cast, args: vec![Expr::Leaf(0)], dtype: node.dtype };
            (&cast, std::slice::from_ref(x))
        }
        _ => return None,
    };
    let numel = node.layout.numel();
    let mut p =
        ElementwiseParams { count: numel as u32, out_shape: vec4(node.layout.padded4().0), ..Default::default() };
    for (k, &s) in srcs.iter().enumerate() {
        let l = program.operand_layout(s, id);
        p.in_strides[k] = vec4(l.padded4().1);
        set_packed(&mut p.in_offsets, k, l.offset);
    }
    let ins = srcs.iter().map(|&s| program.nodes[s].dtype).collect();
    let key = KernelKey::new(KernelKind::new(Elementwise { expr: expr.clone() }), node.dtype, ins);
    let bindings = std::iter::once(id).chain(srcs.iter().map(|&s| program.nodes[s].storage)).collect();
    let name = node.step.name();
    let groups = grid(&name, (numel as u64).div_ceil(256), t.max_groups);
    Some(groups.map(|g| vec![dispatch(key, Params::new(p), bindings, g)]))
}

/// The one-op kernel `op(x0, ..)` of output dtype `out`.
pub(crate) fn one_op(op: ElemOp, out: DType, ins: Vec<DType>) -> KernelKey {
    let expr = Expr::Node { op, args: (0..ins.len()).map(Expr::Leaf).collect(), dtype: out };
    KernelKey::new(KernelKind::new(Elementwise { expr }), out, ins)
}

/// One-op elementwise kernels of every table, in every dtype each accepts, and every cast.
pub(crate) fn variants(keys: &mut Vec<KernelKey>) {
    use DType::{F16, F32, I32};
    for &op in UnaryOp::ALL {
        let (a, b) = (1.5f32.to_bits(), 2.5f32.to_bits());
        for d in [F32, F16] {
            keys.push(one_op(ElemOp::Unary { op, a, b }, d, vec![d]));
        }
        if op.accepts().dtype(I32) {
            keys.push(one_op(ElemOp::Unary { op, a, b }, I32, vec![I32]));
        }
    }
    for (from, to) in [(F32, F16), (F16, F32), (F32, I32), (I32, F32), (F16, I32), (I32, F16), (F32, F32), (I32, I32)] {
        keys.push(one_op(ElemOp::Cast, to, vec![from]));
    }
    for &op in BinaryOp::ALL {
        for (a, b, o) in [(F32, F32, F32), (F16, F16, F16), (F16, F32, F32), (F32, F16, F32), (I32, I32, I32)] {
            if op.accepts().dtype(o) {
                keys.push(one_op(ElemOp::Binary(op), o, vec![a, b]));
            }
        }
    }
    for &op in GluOp::ALL {
        for (a, b, o) in [(F32, F32, F32), (F16, F16, F16), (F16, F32, F32)] {
            keys.push(one_op(ElemOp::Glu(op), o, vec![a, b]));
        }
    }
    // storage formats (bf16, the GGUF block types) dequantized to f32 and f16
    for q in DType::ALL.into_iter().filter(|d| d.is_storage_format()) {
        for out in [F32, F16] {
            keys.push(one_op(ElemOp::Cast, out, vec![q]));
        }
    }
    // x + x and in-place x = exp(x): bindings over the same memory bound once
    let mut add = one_op(ElemOp::Binary(BinaryOp::Add), F32, vec![F32, F32]);
    add.alias = vec![0, 1, 1];
    let exp = ElemOp::Unary { op: UnaryOp::Exp, a: 0, b: 0 };
    let mut in_place = one_op(exp, F32, vec![F32]);
    in_place.alias = vec![0, 0];
    keys.extend([add, in_place]);
}

/// The `epilogue(acc, c)` function of a kernel with a fused epilogue (a matmul's, a row op's): the expression
/// over `acc` and the `operands` extra operands (bindings `e0..`), each read at the output element's coordinates
/// `c` (rank 4) through its strides and offset in the parameters (`P.epi_strides[k]`,
/// `P.epi_offsets[k / 4][k % 4]`). The identity when nothing was fused.
pub(crate) fn epilogue_fn(operands: usize, epi: Option<&Expr>) -> String {
    let Some(expr) = epi else {
        return "fn epilogue(acc: f32, c: vec4<u32>) -> f32 {\n    return acc;\n}".into();
    };
    let loads: String = (0..operands)
        .map(|k| {
            let off = format!("P.epi_offsets[{}].{}", k / 4, ["x", "y", "z", "w"][k % 4]);
            format!("    let x{k} = f32(ld_e{k}(at(c, P.epi_strides[{k}], {off})));\n")
        })
        .collect();
    format!("fn epilogue(acc: f32, c: vec4<u32>) -> f32 {{\n{loads}    return {};\n}}", render_expr(expr))
}
