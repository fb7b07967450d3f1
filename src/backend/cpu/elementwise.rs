//! Elementwise kernels on the CPU: an expression tree (one op, or a fused chain) evaluated over chunks of the
//! output, each intermediate rounded to the dtype the graph gave it, so a fused plan gives what the unfused one
//! does. The math is the op tables' f32 functions (`src/ops`).

use super::buffer::{positions, Memory, View};
use super::parallel::for_ranges;
use super::target::{leaf, CpuFamily, CpuTarget, Leaf};
use crate::compile::ir::{ElemOp, Expr, Program, Step};
use crate::dtype::DType;
use crate::error::Result;
use crate::graph::NodeId;

/// Elements evaluated at a time.
pub(crate) const CHUNK: usize = 1024;

/// `out[i] = expr(leaves at i)` for every element `i` of a contiguous output.
#[derive(Clone, Debug)]
pub(crate) struct ElementwiseKernel {
    pub out: NodeId,
    pub out_dtype: DType,
    pub numel: usize,
    pub expr: Expr,
    pub leaves: Vec<Leaf>,
}

impl CpuFamily for ElementwiseKernel {
    fn lower(p: &Program, id: NodeId, _t: &CpuTarget) -> Option<Self> {
        let Step::Elementwise { expr, srcs } = &p.nodes[id].step else { return None };
        let node = &p.nodes[id];
        let shape = &node.layout.shape;
        let leaves = srcs.iter().map(|&s| leaf(p, s, Some(shape))).collect();
        Some(ElementwiseKernel {
            out: id,
            out_dtype: node.dtype,
            numel: node.layout.numel(),
            expr: expr.clone(),
            leaves,
        })
    }

    /// Every element of the output, split over the CPU's threads.
    fn run(&self, mem: &Memory) -> Result<()> {
        for_ranges(self.numel, GRAIN, |range| self.run_range(mem, range));
        Ok(())
    }
}

fn round(dtype: DType, v: &mut [f32]) {
    if dtype == DType::F16 {
        v.iter_mut().for_each(|x| *x = half::f16::from_f32(*x).to_f32());
    }
}

/// Evaluates `expr` into `out` (one chunk), with leaf k's values in `leaves[k]` and the accumulators
/// ([`Expr::Acc`], [`Expr::Acc2`]) in `acc` (empty where the expression has none).
pub(crate) fn eval(expr: &Expr, leaves: &[Vec<f32>], acc: [&[f32]; 2], out: &mut [f32]) {
    let n = out.len();
    match expr {
        Expr::Leaf(k) => out.copy_from_slice(&leaves[*k][..n]),
        Expr::Acc => out.copy_from_slice(&acc[0][..n]),
        Expr::Acc2 => out.copy_from_slice(&acc[1][..n]),
        Expr::Node { op, args, dtype } => {
            eval(&args[0], leaves, acc, out);
            match op {
                ElemOp::Unary { op, a, b } => {
                    op.eval_slice(out, f32::from_bits(*a), f32::from_bits(*b));
                }
                ElemOp::Binary(op) => with_operand(&args[1], leaves, acc, n, |y| op.eval_slice(out, y)),
                ElemOp::Glu(op) => with_operand(&args[1], leaves, acc, n, |y| {
                    // `op.eval` over the slice: the activation's own loop (no dispatch per element), then the product
                    op.activation().eval_slice(out, 0.0, 0.0);
                    out.iter_mut().zip(y).for_each(|(x, &y)| *x *= y)
                }),
                ElemOp::Cast => {}
            }
            round(*dtype, out);
        }
    }
}

/// Calls `f` with the values of `e` over a chunk of `n`: a leaf's or the accumulator's own slice, else a new
/// buffer evaluated into.
fn with_operand(e: &Expr, leaves: &[Vec<f32>], acc: [&[f32]; 2], n: usize, f: impl FnOnce(&[f32])) {
    match e {
        Expr::Leaf(k) => f(&leaves[*k][..n]),
        Expr::Acc => f(&acc[0][..n]),
        Expr::Acc2 => f(&acc[1][..n]),
        _ => {
            let mut y = vec![0f32; n];
            eval(e, leaves, acc, &mut y);
            f(&y)
        }
    }
}

/// The i32 value of a one-op integer expression (every operand and the output i32).
fn eval_i32(expr: &Expr, a: i32, b: i32) -> i32 {
    match expr {
        Expr::Node { op: ElemOp::Unary { op, .. }, .. } => op.eval_i32(a).unwrap_or(a),
        Expr::Node { op: ElemOp::Binary(op), .. } => op.eval_i32(a, b).unwrap_or(0),
        _ => a,
    }
}

/// Loads `out.len()` values of `leaf` from flat index `start` into `out`: a contiguous leaf in one copy, a leaf
/// whose last axis is long in runs along it (a row, or a broadcast value), any other through `pos`.
pub(crate) fn load(mem: &Memory, leaf: &Leaf, start: usize, pos: &mut [usize], out: &mut [f32]) {
    let v = mem.view(leaf.storage, leaf.dtype);
    let l = &leaf.layout;
    if l.is_contiguous() {
        return v.row_f32(l.offset + start, 1, out);
    }
    let inner = l.shape.last().copied().unwrap_or(1);
    if inner >= 16 {
        let stride = l.strides[l.rank() - 1];
        let mut done = 0;
        while done < out.len() {
            let i = start + done;
            let run = (inner - i % inner).min(out.len() - done);
            v.row_f32(l.index_of(i), stride, &mut out[done..done + run]);
            done += run;
        }
        return;
    }
    let pos = &mut pos[..out.len()];
    positions(l, start, pos);
    out.iter_mut().zip(pos.iter()).for_each(|(o, &p)| *o = v.get(p));
}

/// Elements per task when an elementwise pass is split over threads.
pub(crate) const GRAIN: usize = 16 * 1024;

/// `out[i] = expr(acc[i], leaves at i)` for the `numel` elements of the output (a matmul's, row-major), split
/// over the CPU's threads: a fused epilogue. `acc` is the product, or `None` when it is in the output already
/// (each element is then read before it is overwritten); `acc2` a dual matmul's second product (else empty).
pub(crate) fn epilogue(
    mem: &Memory,
    (out, dtype, numel): (NodeId, DType, usize),
    expr: &Expr,
    leaves: &[Leaf],
    (acc, acc2): (Option<&[f32]>, &[f32]),
) {
    for_ranges(numel, GRAIN, |range| {
        let out = mem.view(out, dtype);
        // buffers of the task's length where it is under a chunk (a decode step's outputs are a few thousand)
        let chunk = CHUNK.min(range.len());
        let mut pos = vec![0usize; chunk];
        let mut vals = vec![vec![0f32; chunk]; leaves.len()];
        let (mut res, mut own) = (vec![0f32; chunk], vec![0f32; if acc.is_none() { chunk } else { 0 }]);
        for i in range.clone().step_by(CHUNK) {
            let len = CHUNK.min(range.end - i);
            for (leaf, v) in leaves.iter().zip(vals.iter_mut()) {
                load(mem, leaf, i, &mut pos, &mut v[..len]);
            }
            let acc = match acc {
                Some(a) => &a[i..i + len],
                None => {
                    out.row_f32(i, 1, &mut own[..len]);
                    &own[..len]
                }
            };
            let acc2 = if acc2.is_empty() { acc2 } else { &acc2[i..i + len] };
            eval(expr, &vals, [acc, acc2], &mut res[..len]);
            out.write_f32(i, &res[..len]);
        }
    });
}

impl ElementwiseKernel {
    /// Whether every dtype is i32: the expression is then computed in wrapping integer arithmetic.
    fn integer(&self) -> bool {
        self.out_dtype == DType::I32 && self.leaves.iter().all(|l| l.dtype == DType::I32)
    }

    /// Elements `range` of the output.
    pub(crate) fn run_range(&self, mem: &Memory, range: std::ops::Range<usize>) {
        let out = mem.view(self.out, self.out_dtype);
        if self.integer() {
            return self.run_i32(mem, out, range);
        }
        let chunk = CHUNK.min(range.len());
        let mut pos = vec![0usize; chunk];
        let mut vals = vec![vec![0f32; chunk]; self.leaves.len()];
        let mut res = vec![0f32; chunk];
        let mut i = range.start;
        while i < range.end {
            let n = CHUNK.min(range.end - i);
            for (leaf, v) in self.leaves.iter().zip(vals.iter_mut()) {
                load(mem, leaf, i, &mut pos[..n], &mut v[..n]);
            }
            eval(&self.expr, &vals, [&[], &[]], &mut res[..n]);
            out.write_f32(i, &res[..n]);
            i += n;
        }
    }

    fn run_i32(&self, mem: &Memory, out: View, range: std::ops::Range<usize>) {
        let mut pos = vec![vec![0usize; range.len()]; self.leaves.len()];
        for (leaf, p) in self.leaves.iter().zip(pos.iter_mut()) {
            positions(&leaf.layout, range.start, p);
        }
        let views: Vec<View> = self.leaves.iter().map(|l| mem.view(l.storage, l.dtype)).collect();
        for (j, i) in range.enumerate() {
            let a = views[0].get_i32(pos[0][j]);
            let b = if views.len() > 1 { views[1].get_i32(pos[1][j]) } else { 0 };
            out.set_i32(i, eval_i32(&self.expr, a, b));
        }
    }
}
