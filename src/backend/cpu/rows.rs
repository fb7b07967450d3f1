//! Row ops on the CPU (the row-op and reduction tables' f64 functions over each row).

use super::buffer::Memory;
use super::elementwise::{eval, load, GRAIN};
use super::parallel::for_ranges;
use super::target::{epilogue, leaf, CpuFamily, CpuTarget, Leaf};
use crate::compile::ir::{Expr, Program, Step};
use crate::dtype::DType;
use crate::error::Result;
use crate::graph::{NodeId, Op};
use crate::ops::{ReduceOp, RowOp, RowParams};

/// Which table's op.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum RowKind {
    Row(RowOp, RowParams),
    Reduce(ReduceOp),
}

/// An op over the last axis of `x` (its own layout), one output row (or value) per row.
#[derive(Clone, Debug)]
pub(crate) struct RowsKernel {
    pub op: RowKind,
    pub out: NodeId,
    pub out_dtype: DType,
    pub x: Leaf,
    /// The mask, broadcast to x's shape (softmax).
    pub mask: Option<Leaf>,
    /// Row length.
    pub n: usize,
    /// Rows.
    pub rows: usize,
    /// The expression each row's values pass through before the store (over [`Expr::Acc`] and these operands,
    /// broadcast to the output's shape).
    pub epilogue: Option<(Expr, Vec<Leaf>)>,
}

impl CpuFamily for RowsKernel {
    /// A row op (with its mask and epilogue) or a reduction over the last axis.
    fn lower(p: &Program, id: NodeId, _t: &CpuTarget) -> Option<Self> {
        let (op, x, mask, epi) = match &p.nodes[id].step {
            Step::Row { op, x, mask, params, epilogue } => (RowKind::Row(*op, *params), *x, *mask, epilogue.as_ref()),
            Step::Op(Op::Reduce { op, x }) => (RowKind::Reduce(*op), *x, None, None),
            _ => return None,
        };
        let node = &p.nodes[id];
        let x = leaf(p, x, None);
        let n = x.layout.shape.last().copied().unwrap_or(1);
        let rows = x.layout.numel() / n.max(1);
        let mask = mask.map(|m| leaf(p, m, Some(&x.layout.shape)));
        let epilogue = epilogue(p, epi, &node.layout.shape);
        Some(RowsKernel { op, out: id, out_dtype: node.dtype, x, mask, n, rows, epilogue })
    }

    /// Every row, split over the CPU's threads.
    fn run(&self, mem: &Memory) -> Result<()> {
        for_ranges(self.rows, (GRAIN / self.n.max(1)).max(1), |range| self.run_range(mem, range));
        Ok(())
    }
}

impl RowsKernel {
    /// Rows `range`.
    fn run_range(&self, mem: &Memory, range: std::ops::Range<usize>) {
        let n = self.n;
        let x = mem.view(self.x.storage, self.x.dtype);
        let out = mem.view(self.out, self.out_dtype);
        let mask = self.mask.as_ref().map(|m| (mem.view(m.storage, m.dtype), &m.layout));
        let last = |l: &crate::shape::Layout| l.strides.last().copied().unwrap_or(1);
        let (mut row, mut mrow) = (vec![0f32; n], vec![0f32; if mask.is_some() { n } else { 0 }]);
        let mut v = vec![0f64; if matches!(self.op, RowKind::Row(..)) { n } else { 0 }];
        let mut epi = self.epilogue.as_ref().map(|(_, leaves)| Epilogue::new(leaves.len(), n));
        for r in range {
            x.row_f32(self.x.layout.index_of(r * n), last(&self.x.layout), &mut row);
            match self.op {
                RowKind::Reduce(ReduceOp::ArgMax) => out.set_i32(r, ReduceOp::ArgMax.eval(&row) as i32),
                RowKind::Reduce(op) => out.set(r, op.eval(&row) as f32),
                RowKind::Row(op, p) => {
                    v.iter_mut().zip(&row).for_each(|(e, &x)| *e = x as f64);
                    if op == RowOp::Softmax {
                        v.iter_mut().for_each(|e| *e *= p.scale as f64);
                        if let Some((mv, ml)) = &mask {
                            mv.row_f32(ml.index_of(r * n), last(ml), &mut mrow);
                            v.iter_mut().zip(&mrow).for_each(|(e, &m)| *e += m as f64);
                        }
                    }
                    op.eval(&mut v, p);
                    row.iter_mut().zip(&v).for_each(|(o, &e)| *o = e as f32);
                    if let (Some((expr, leaves)), Some(e)) = (&self.epilogue, epi.as_mut()) {
                        // before the store: the output may be an operand's storage (in place)
                        e.apply(mem, (expr, leaves), r * n, &mut row);
                    }
                    out.write_f32(r * n, &row);
                }
            }
        }
    }
}

/// Buffers for a row's epilogue: its operands' values and positions, and the result.
struct Epilogue {
    vals: Vec<Vec<f32>>,
    pos: Vec<usize>,
    res: Vec<f32>,
}

impl Epilogue {
    fn new(leaves: usize, n: usize) -> Epilogue {
        Epilogue { vals: vec![vec![0f32; n]; leaves], pos: vec![0; n], res: vec![0f32; n] }
    }

    /// `row` (the op's values of the output's elements `start..`) replaced by the epilogue over them.
    fn apply(&mut self, mem: &Memory, (expr, leaves): (&Expr, &[Leaf]), start: usize, row: &mut [f32]) {
        for (leaf, v) in leaves.iter().zip(self.vals.iter_mut()) {
            load(mem, leaf, start, &mut self.pos, v);
        }
        eval(expr, &self.vals, [row, &[]], &mut self.res);
        row.copy_from_slice(&self.res);
    }
}
