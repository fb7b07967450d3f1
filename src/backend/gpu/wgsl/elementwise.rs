//! WGSL of elementwise kernels (`shaders/elementwise.wgsl`) and of expression trees, which matmul epilogues use
//! too.

use super::template::{compute_type, render};
use crate::backend::gpu::kernel::KernelKey;
use crate::compile::ir::{ElemOp, Expr};
use crate::DType;

const ELEMENTWISE: &str = include_str!("../../../../shaders/elementwise.wgsl");

/// The WGSL of one expression node over its rendered arguments, computed in f32 (i32 for integer kernels); an
/// f16 node is rounded to f16 (`f16_round`, `shaders/f16_round.wgsl`), so that a fused kernel gives what storing the node would.
pub(crate) fn node(op: ElemOp, dtype: DType, args: &[String]) -> String {
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

/// The elementwise kernel computing `expr` over the key's inputs.
pub(super) fn wgsl(key: &KernelKey, bindings: String, expr: &str) -> String {
    let int = key.out == DType::I32 && key.ins.iter().all(|&d| d == DType::I32);
    let c = if int { "i32" } else { "f32" };
    let loads = (0..key.ins.len())
        .map(|k| {
            let off = format!("P.in_offsets[{}].{}", k / 4, ["x", "y", "z", "w"][k % 4]);
            format!("    let x{k} = {c}(ld_in{k}(at(c, P.in_strides[{k}], {off})));")
        })
        .collect::<Vec<_>>()
        .join("\n");
    let subs =
        [("BINDINGS", bindings), ("OUT_C", compute_type(key.out).into()), ("LOADS", loads), ("EXPR", expr.into())];
    render(ELEMENTWISE, &subs)
}
