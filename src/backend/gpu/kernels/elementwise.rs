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
const ELEMENTWISE_VEC4: &str = include_str!("elementwise_vec4.wgsl");

/// Output elements an invocation of the vec4 variant computes.
const QUAD: u64 = 4;

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
#[derive(Clone, PartialEq, Eq, Hash)]
pub(crate) struct Elementwise {
    pub expr: Expr,
    /// Four outputs an invocation (`elementwise_vec4.wgsl`), each operand read as its entry says; one an
    /// invocation (`elementwise.wgsl`) when None.
    pub quads: Option<Vec<Quad>>,
}

impl std::fmt::Debug for Elementwise {
    // the one-an-invocation variant as it printed before the vec4 one existed (the kernel snapshot's keys)
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut s = f.debug_struct("Elementwise");
        s.field("expr", &self.expr);
        if let Some(q) = &self.quads {
            s.field("quads", q);
        }
        s.finish()
    }
}

/// How the vec4 variant reads an operand for its four consecutive outputs (along the output's last axis).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Quad {
    /// Laid out as the output (at its flat index plus the operand's offset, a multiple of 4): no coordinates.
    Flat,
    /// Contiguous along the last axis, 4-aligned (offset and the other strides multiples of 4): 4 elements at the
    /// first output's coordinates.
    Row,
    /// Broadcast along the last axis: one element for the four.
    Splat,
}

impl Family for Elementwise {
    fn name(&self) -> String {
        if self.quads.is_some() { "elementwise vec4" } else { "elementwise" }.into()
    }

    fn params(&self) -> ParamsLayout {
        ElementwiseParams::layout()
    }

    fn bindings(&self, key: &KernelKey) -> Vec<Binding> {
        let vec4 = |k: usize| self.quads.as_ref().is_some_and(|q| q[k] != Quad::Splat);
        let ins = key.ins.iter().enumerate().map(|(k, &d)| Binding::input(format!("in{k}"), d).vec4(vec4(k)));
        std::iter::once(Binding::output("out", key.out).vec4(self.quads.is_some())).chain(ins).collect()
    }

    fn wgsl(&self, key: &KernelKey, bindings: String) -> String {
        if let Some(quads) = &self.quads {
            return quad_wgsl(&self.expr, quads, bindings);
        }
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
        SplitRule::Elements { per_invocation: self.per_invocation() }
    }
}

impl Elementwise {
    /// Output elements an invocation computes.
    fn per_invocation(&self) -> u64 {
        if self.quads.is_some() {
            QUAD
        } else {
            1
        }
    }
}

/// The vec4 variant's WGSL (`elementwise_vec4.wgsl`): the expression a function of the operands' values,
/// evaluated for each of the four outputs.
fn quad_wgsl(expr: &Expr, quads: &[Quad], bindings: String) -> String {
    let off = |k: usize| format!("P.in_offsets[{}].{}", k / 4, ["x", "y", "z", "w"][k % 4]);
    let loads = quads
        .iter()
        .enumerate()
        .map(|(k, q)| match q {
            Quad::Flat => format!("    let v{k} = ld4_in{k}({} + P.first + i);", off(k)),
            Quad::Row => format!("    let v{k} = ld4_in{k}(at(c, P.in_strides[{k}], {}));", off(k)),
            Quad::Splat => format!("    let v{k} = vec4<f32>(f32(ld_in{k}(at(c, P.in_strides[{k}], {}))));", off(k)),
        })
        .collect::<Vec<_>>()
        .join("\n");
    let coords = if quads.iter().any(|&q| q != Quad::Flat) {
        "\n    let c = coords4(i + P.first, P.out_shape);"
    } else {
        ""
    };
    let args = (0..quads.len()).map(|k| format!("x{k}: f32")).collect::<Vec<_>>().join(", ");
    let call = |lane: &str| {
        let vals = (0..quads.len()).map(|k| format!("v{k}.{lane}")).collect::<Vec<_>>().join(", ");
        format!("expr({vals})")
    };
    let calls = ["x", "y", "z", "w"].map(call).join(", ");
    let subs = [
        ("BINDINGS", bindings),
        ("ARGS", args),
        ("EXPR", render_expr(expr)),
        ("COORDS", coords.into()),
        ("QUAD_LOADS", loads),
        ("CALLS", calls),
    ];
    render(ELEMENTWISE_VEC4, &subs)
}

/// How a vec4 variant would read each of `srcs` for step `id`, or None where the step runs one output an
/// invocation: an i32 operand or output (its values are not all exact in f32), the output's last axis not a
/// multiple of 4, or an operand neither laid out as the output, nor 4-aligned along a contiguous last axis, nor
/// broadcast along it.
fn quads(program: &Program, id: NodeId, srcs: &[NodeId]) -> Option<Vec<Quad>> {
    let node = &program.nodes[id];
    let (shape, _) = node.layout.padded4();
    if !shape[3].is_multiple_of(QUAD as usize) || node.dtype == DType::I32 {
        return None;
    }
    let flat = crate::shape::contiguous_strides(&shape);
    let quad = |&s: &NodeId| {
        if program.nodes[s].dtype == DType::I32 {
            return None;
        }
        let l = program.operand_layout(s, id);
        let (_, st) = l.padded4();
        // a size-1 axis adds nothing to an index, whatever its stride
        let used: Vec<usize> = (0..4).filter(|&d| shape[d] > 1).collect();
        let aligned = l.offset.is_multiple_of(4);
        if aligned && used.iter().all(|&d| st[d] == flat[d]) {
            Some(Quad::Flat)
        } else if st[3] == 0 {
            Some(Quad::Splat)
        } else if aligned && st[3] == 1 && used.iter().all(|&d| d == 3 || st[d].is_multiple_of(4)) {
            Some(Quad::Row)
        } else {
            None
        }
    };
    srcs.iter().map(quad).collect()
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
    let kernel = Elementwise { expr: expr.clone(), quads: quads(program, id, srcs) };
    let per_invocation = kernel.per_invocation();
    let key = KernelKey::new(KernelKind::new(kernel), node.dtype, ins);
    let bindings = std::iter::once(id).chain(srcs.iter().map(|&s| program.nodes[s].storage)).collect();
    let name = node.step.name();
    let groups = grid(&name, (numel as u64).div_ceil(256 * per_invocation), t.max_groups);
    Some(groups.map(|g| vec![dispatch(key, Params::new(p), bindings, g)]))
}

/// The one-op kernel `op(x0, ..)` of output dtype `out`.
pub(crate) fn one_op(op: ElemOp, out: DType, ins: Vec<DType>) -> KernelKey {
    let expr = Expr::Node { op, args: (0..ins.len()).map(Expr::Leaf).collect(), dtype: out };
    KernelKey::new(KernelKind::new(Elementwise { expr, quads: None }), out, ins)
}

/// The vec4 variant of [`one_op`], each operand read as `quads` says.
fn one_op_quads(op: ElemOp, out: DType, ins: Vec<DType>, quads: &[Quad]) -> KernelKey {
    let mut key = one_op(op, out, ins);
    let expr = key.kind.get::<Elementwise>().expect("an elementwise kernel").expr.clone();
    key.kind = KernelKind::new(Elementwise { expr, quads: Some(quads.to_vec()) });
    key
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
    quad_variants(keys);
}

/// The vec4 variants: each way to read an operand, f16 in and out, blocks dequantized, in place, and an operand
/// read another width than the binding over the same memory declared first (`x + x[..., :1]`).
fn quad_variants(keys: &mut Vec<KernelKey>) {
    use DType::{F16, F32, Q4_K, Q8_0};
    use Quad::{Flat, Row, Splat};
    let add = ElemOp::Binary(BinaryOp::Add);
    let silu = ElemOp::Unary { op: UnaryOp::Silu, a: 0, b: 0 };
    keys.push(one_op_quads(ElemOp::Cast, F32, vec![F32], &[Flat]));
    keys.push(one_op_quads(ElemOp::Cast, F16, vec![F16], &[Row]));
    keys.push(one_op_quads(silu, F16, vec![F16], &[Flat]));
    for (a, b) in [(Flat, Row), (Row, Splat), (Splat, Flat)] {
        keys.push(one_op_quads(add, F32, vec![F32, F32], &[a, b]));
        keys.push(one_op_quads(add, F16, vec![F16, F16], &[a, b]));
    }
    keys.push(one_op_quads(ElemOp::Glu(GluOp::SwiGlu), F32, vec![F16, F32], &[Row, Row]));
    for q in [Q4_K, Q8_0] {
        keys.push(one_op_quads(ElemOp::Cast, F32, vec![q], &[Flat]));
        keys.push(one_op_quads(ElemOp::Cast, F16, vec![q], &[Row]));
    }
    let mut in_place = one_op_quads(add, F32, vec![F32, F32], &[Flat, Splat]);
    in_place.alias = vec![0, 0, 2];
    let mut widths = one_op_quads(add, F32, vec![F32, F32], &[Splat, Row]);
    widths.alias = vec![0, 1, 1];
    let mut widths_f16 = one_op_quads(add, F16, vec![F16, F16], &[Row, Splat]);
    widths_f16.alias = vec![0, 1, 1];
    keys.extend([in_place, widths, widths_f16]);
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

#[cfg(test)]
mod tests {
    use super::{one_op_quads, ElemOp, Quad};
    use crate::dtype::DType::{F16, F32};
    use crate::ops::BinaryOp;

    /// Memory read as vec4 by one operand and as scalars by another is declared with scalar elements, whichever
    /// binding comes first (a vec4 array would hold only its whole vec4s: `x[0:8] + x[8:9]` over an x of 9 would
    /// read element 8 outside it); f16 packed in u32 words likewise. Lavapipe reads past a declared array without
    /// complaint, so tests/elementwise.rs cannot show this one.
    #[test]
    fn memory_read_at_two_widths_is_declared_scalar() {
        let add = ElemOp::Binary(BinaryOp::Add);
        for (dtype, packed, elem) in [(F32, false, "f32"), (F16, false, "f16"), (F16, true, "u32")] {
            for quads in [[Quad::Row, Quad::Splat], [Quad::Splat, Quad::Flat]] {
                let mut key = one_op_quads(add, dtype, vec![dtype, dtype], &quads);
                key.alias = vec![0, 1, 1];
                key.packed_f16 = packed;
                let text = key.wgsl();
                let decl = format!("var<storage, read_write> in0: array<{elem}>;");
                assert!(text.contains(&decl), "{quads:?} {dtype} packed {packed}: no `{decl}` in\n{text}");
            }
        }
    }
}
