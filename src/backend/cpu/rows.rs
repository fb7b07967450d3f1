//! Row ops on the CPU (the row-op and reduction tables' f64 functions over each row).

use super::buffer::Memory;
use super::elementwise::Leaf;
use crate::graph::NodeId;
use crate::ops::{ReduceOp, RowOp, RowParams};
use crate::DType;

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
}

impl RowsKernel {
    /// Rows `range`.
    pub(crate) fn run(&self, mem: &Memory, range: std::ops::Range<usize>) {
        let n = self.n;
        let x = mem.view(self.x.storage, self.x.dtype);
        let out = mem.view(self.out, self.out_dtype);
        let mask = self.mask.as_ref().map(|m| (mem.view(m.storage, m.dtype), &m.layout));
        let mut v = vec![0f64; n];
        for r in range {
            for (j, e) in v.iter_mut().enumerate() {
                *e = x.get(self.x.layout.index_of(r * n + j)) as f64;
            }
            match self.op {
                RowKind::Row(op, p) => {
                    if op == RowOp::Softmax {
                        for (j, e) in v.iter_mut().enumerate() {
                            *e *= p.scale as f64;
                            if let Some((mv, ml)) = &mask {
                                *e += mv.get(ml.index_of(r * n + j)) as f64;
                            }
                        }
                    }
                    op.eval(&mut v, p);
                    for (j, &e) in v.iter().enumerate() {
                        out.set(r * n + j, e as f32);
                    }
                }
                RowKind::Reduce(ReduceOp::ArgMax) => out.set_i32(r, ReduceOp::ArgMax.eval(&v) as i32),
                RowKind::Reduce(op) => out.set(r, op.eval(&v) as f32),
            }
        }
    }
}
