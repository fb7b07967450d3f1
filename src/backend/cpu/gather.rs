//! Gathers and writes on the CPU: get_rows, concat, set_rows (a KV cache's write) and copy_into.

use super::buffer::{Memory, View};
use super::target::{leaf, CpuFamily, CpuTarget, Leaf};
use crate::compile::ir::{Program, Step};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::graph::{NodeId, Op};

/// `out[r, :] = table[idx[r], :]`.
#[derive(Clone, Debug)]
pub(crate) struct GetRowsKernel {
    pub out: NodeId,
    pub out_dtype: DType,
    /// `[V, D]` through its own layout.
    pub table: Leaf,
    pub idx: Leaf,
}

impl CpuFamily for GetRowsKernel {
    /// `get_rows` of a float or i32 table (a table in a storage format is `GetRowsQKernel`'s).
    fn lower(p: &Program, id: NodeId, _t: &CpuTarget) -> Option<Self> {
        let Step::Op(Op::GetRows { table, idx }) = p.nodes[id].step else { return None };
        let (out_dtype, table, idx) = (p.nodes[id].dtype, leaf(p, table, None), leaf(p, idx, None));
        Some(GetRowsKernel { out: id, out_dtype, table, idx })
    }

    /// # Errors
    /// [`Error::BadInput`] naming the index, its position and the table's row count when an index is out of range.
    fn run(&self, mem: &Memory) -> Result<()> {
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

impl CpuFamily for ConcatKernel {
    fn lower(p: &Program, id: NodeId, _t: &CpuTarget) -> Option<Self> {
        let Step::Op(Op::Concat { a, b, axis }) = p.nodes[id].step else { return None };
        let node = &p.nodes[id];
        let (a, b) = (leaf(p, a, None), leaf(p, b, None));
        Some(ConcatKernel { out: id, out_dtype: node.dtype, out_shape: node.layout.shape.clone(), a, b, axis })
    }

    fn run(&self, mem: &Memory) -> Result<()> {
        let out = mem.view(self.out, self.out_dtype);
        let (va, vb) = (mem.view(self.a.storage, self.a.dtype), mem.view(self.b.storage, self.b.dtype));
        let split = self.a.layout.shape[self.axis];
        let rank = self.out_shape.len();
        let numel: usize = self.out_shape.iter().product();
        // floats a row of the last axis at a time (each from one operand, or from both when that axis is the one
        // joined), i32 element by element
        let n = self.out_shape.last().copied().unwrap_or(1).max(1);
        let float = self.out_dtype != DType::I32 && rank > 0;
        let mut c = vec![0usize; rank];
        let mut row = vec![0f32; if float { n } else { 0 }];
        let step = if float { n } else { 1 };
        for i in (0..numel).step_by(step) {
            let mut rem = i;
            for d in (0..rank).rev() {
                c[d] = rem % self.out_shape[d];
                rem /= self.out_shape[d];
            }
            let at = |c: &[usize], l: &crate::shape::Layout| {
                l.offset + (0..rank).map(|d| c[d] * l.strides[d]).sum::<usize>()
            };
            if float && self.axis + 1 == rank {
                let (la, lb) = (&self.a.layout, &self.b.layout);
                va.row_f32(at(&c, la), la.strides[rank - 1], &mut row[..split]);
                c[self.axis] = 0;
                vb.row_f32(at(&c, lb), lb.strides[rank - 1], &mut row[split..]);
                out.write_f32(i, &row);
                continue;
            }
            let (v, l) = if c[self.axis] < split {
                (&va, &self.a.layout)
            } else {
                c[self.axis] -= split;
                (&vb, &self.b.layout)
            };
            let pos = at(&c, l);
            if float {
                v.row_f32(pos, l.strides[rank - 1], &mut row);
                out.write_f32(i, &row);
            } else if self.out_dtype == DType::I32 {
                out.set_i32(i, v.get_i32(pos));
            } else {
                out.set(i, v.get(pos));
            }
        }
        Ok(())
    }
}

/// `dst[idx[i], :] = src[i, :]` for each row `i` of `src`, in order (so the last of repeated indices wins).
#[derive(Clone, Debug)]
pub(crate) struct SetRowsKernel {
    /// `[R, D]`, its rows contiguous.
    pub dst: Leaf,
    pub idx: Leaf,
    /// `[N, D]`.
    pub src: Leaf,
}

impl CpuFamily for SetRowsKernel {
    fn lower(p: &Program, id: NodeId, _t: &CpuTarget) -> Option<Self> {
        let Step::Op(Op::SetRows { dst, idx, src }) = p.nodes[id].step else { return None };
        Some(SetRowsKernel { dst: leaf(p, dst, None), idx: leaf(p, idx, None), src: leaf(p, src, None) })
    }

    /// # Errors
    /// [`Error::BadInput`] naming the index, its position and the row count when an index is out of range.
    fn run(&self, mem: &Memory) -> Result<()> {
        let s = mem.view(self.src.storage, self.src.dtype);
        if self.dst.dtype == DType::I32 {
            return self.scatter_with(mem, &|i| s.get_i32(self.src.layout.index_of(i)), &|d, at, v| d.set_i32(at, v));
        }
        self.scatter(mem, &|i| s.get(self.src.layout.index_of(i)))
    }
}

impl SetRowsKernel {
    /// Writes row `r` of the source, element `c` from `value(r * dim + c)`, into a float destination.
    pub(crate) fn scatter(&self, mem: &Memory, value: &dyn Fn(usize) -> f32) -> Result<()> {
        self.scatter_with(mem, value, &|d, at, v| d.set(at, v))
    }

    fn scatter_with<T>(&self, mem: &Memory, value: &dyn Fn(usize) -> T, store: &dyn Fn(&View, usize, T)) -> Result<()> {
        let (rows, dim) = (self.dst.layout.shape[0], self.dst.layout.shape[1]);
        let d = mem.view(self.dst.storage, self.dst.dtype);
        let ix = mem.view(self.idx.storage, self.idx.dtype);
        let n = self.idx.layout.numel();
        for i in 0..n {
            let r = ix.get_i32(self.idx.layout.index_of(i));
            if r < 0 || r as usize >= rows {
                return Err(Error::BadInput {
                    name: "set_rows".into(),
                    reason: format!(
                        "index {r} at position {i} is outside 0..{rows} of the destination {:?}",
                        self.dst.layout.shape
                    ),
                });
            }
            let base = self.dst.layout.offset + r as usize * self.dst.layout.strides[0];
            for c in 0..dim {
                store(&d, base + c * self.dst.layout.strides[1], value(i * dim + c));
            }
        }
        Ok(())
    }
}

/// `dst[...] = src` through dst's view layout (src broadcast to it).
#[derive(Clone, Debug)]
pub(crate) struct CopyIntoKernel {
    pub dst: Leaf,
    /// Broadcast to dst's shape.
    pub src: Leaf,
}

impl CpuFamily for CopyIntoKernel {
    fn lower(p: &Program, id: NodeId, _t: &CpuTarget) -> Option<Self> {
        let Step::Op(Op::CopyInto { dst, src }) = p.nodes[id].step else { return None };
        let dst = leaf(p, dst, None);
        let src = leaf(p, src, Some(&dst.layout.shape));
        Some(CopyIntoKernel { dst, src })
    }

    fn run(&self, mem: &Memory) -> Result<()> {
        let d = mem.view(self.dst.storage, self.dst.dtype);
        let s = mem.view(self.src.storage, self.src.dtype);
        let (ld, ls) = (&self.dst.layout, &self.src.layout);
        if self.dst.dtype == DType::I32 {
            for i in 0..ld.numel() {
                d.set_i32(ld.index_of(i), s.get_i32(ls.index_of(i)));
            }
            return Ok(());
        }
        // a row of the last axis at a time: read at the source's stride, written in one store where the
        // destination's row is contiguous (a recurrent state's rows), else element by element
        let n = ld.shape.last().copied().unwrap_or(1).max(1);
        let (sd, ss) = (ld.strides.last().copied().unwrap_or(1), ls.strides.last().copied().unwrap_or(1));
        let mut row = vec![0f32; n];
        for r in 0..ld.numel() / n {
            s.row_f32(ls.index_of(r * n), ss, &mut row);
            let to = ld.index_of(r * n);
            if sd == 1 {
                d.write_f32(to, &row);
            } else {
                row.iter().enumerate().for_each(|(j, &v)| d.set(to + j * sd, v));
            }
        }
        Ok(())
    }
}
