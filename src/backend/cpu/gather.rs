//! get_rows and concat on the CPU.

use super::buffer::Memory;
use super::elementwise::Leaf;
use crate::graph::NodeId;
use crate::{DType, Error, Result};

/// `out[r, :] = table[idx[r], :]`.
#[derive(Clone, Debug)]
pub(crate) struct GetRowsKernel {
    pub out: NodeId,
    pub out_dtype: DType,
    /// `[V, D]` through its own layout.
    pub table: Leaf,
    pub idx: Leaf,
}

impl GetRowsKernel {
    /// # Errors
    /// [`Error::BadInput`] naming the index, its position and the table's row count when an index is out of range.
    pub(crate) fn run(&self, mem: &Memory) -> Result<()> {
        let (rows, dim) = (self.table.layout.shape[0], self.table.layout.shape[1]);
        let t = mem.view(self.table.storage, self.table.dtype);
        let ix = mem.view(self.idx.storage, self.idx.dtype);
        let out = mem.view(self.out, self.out_dtype);
        for r in 0..self.idx.layout.numel() {
            let row = ix.get_i32(self.idx.layout.index_of(r));
            if row < 0 || row as usize >= rows {
                return Err(Error::BadInput {
                    name: "get_rows".into(),
                    reason: format!(
                        "index {row} at position {r} is outside 0..{rows} of table {:?}",
                        self.table.layout.shape
                    ),
                });
            }
            for c in 0..dim {
                let src = self.table.layout.index_of(row as usize * dim + c);
                if self.out_dtype == DType::I32 {
                    out.set_i32(r * dim + c, t.get_i32(src));
                } else {
                    out.set(r * dim + c, t.get(src));
                }
            }
        }
        Ok(())
    }
}

/// `out = concatenate([a, b], axis)`.
#[derive(Clone, Debug)]
pub(crate) struct ConcatKernel {
    pub out: NodeId,
    pub out_dtype: DType,
    pub out_shape: Vec<usize>,
    pub a: Leaf,
    pub b: Leaf,
    pub axis: usize,
}

impl ConcatKernel {
    pub(crate) fn run(&self, mem: &Memory) {
        let out = mem.view(self.out, self.out_dtype);
        let (va, vb) = (mem.view(self.a.storage, self.a.dtype), mem.view(self.b.storage, self.b.dtype));
        let split = self.a.layout.shape[self.axis];
        let rank = self.out_shape.len();
        let numel: usize = self.out_shape.iter().product();
        let mut c = vec![0usize; rank];
        for i in 0..numel {
            let mut rem = i;
            for d in (0..rank).rev() {
                c[d] = rem % self.out_shape[d];
                rem /= self.out_shape[d];
            }
            let (v, l) = if c[self.axis] < split {
                (&va, &self.a.layout)
            } else {
                c[self.axis] -= split;
                (&vb, &self.b.layout)
            };
            let pos = l.offset + (0..rank).map(|d| c[d] * l.strides[d]).sum::<usize>();
            if self.out_dtype == DType::I32 {
                out.set_i32(i, v.get_i32(pos));
            } else {
                out.set(i, v.get(pos));
            }
        }
    }
}
