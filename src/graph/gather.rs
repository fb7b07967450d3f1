//! Gather and join: get_rows and concat.

use super::{Graph, Op, Tensor};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::shape::{check_shape, resolve_axis};

impl Graph {
    /// Embedding lookup: `out[i..., :] = table[idx[i...], :]`.
    ///
    /// # Shapes
    /// table `[V, D]`, idx of rank ≤ 3 → out `idx.shape + [D]`.
    /// # DTypes
    /// table any dtype (the output has it), or a storage format (bf16, block-quantized: a token embedding), whose
    /// rows come out as f32; idx i32.
    /// # Errors
    /// [`Error::InvalidShape`] for a table of rank ≠ 2 or idx of rank 4, or a table of 0 rows with indices; [`Error::UnsupportedDType`] for
    /// non-i32 indices. At run time an index outside `0..V` is an [`Error::BadInput`] on the CPU and gives a row
    /// of zeros on the GPU (which never reads outside the table).
    /// # Reference
    /// ggml_get_rows; `torch.nn.functional.embedding(idx, table)`.
    pub fn get_rows(&mut self, table: Tensor, idx: Tensor) -> Result<Tensor> {
        let (it, dt, st) = self.info("get_rows", table)?;
        let (ii, di, si) = self.info("get_rows", idx)?;
        if st.len() != 2 {
            return Err(Error::InvalidShape { op: "get_rows", shape: st, reason: "the table must be [V, D]".into() });
        }
        if di != DType::I32 {
            return Err(Error::UnsupportedDType {
                op: "get_rows",
                dtype: di,
                shape: si,
                reason: "indices must be i32".into(),
            });
        }
        let mut shape = si.clone();
        shape.push(st[1]);
        check_shape("get_rows", &shape)?;
        if st[0] == 0 && shape.iter().product::<usize>() > 0 {
            let reason = "the table has no rows to gather (numpy's indexing raises IndexError)".into();
            return Err(Error::InvalidShape { op: "get_rows", shape: st, reason });
        }
        let out = if dt.is_storage_format() {
            let l = &self.nodes[it].layout;
            if l.strides != [st[1], 1] {
                let reason = format!("a {dt} table must be a row-major [V, D] (a resident weight, or rows of one)");
                return Err(Error::UnsupportedDType { op: "get_rows", dtype: dt, shape: st, reason });
            }
            DType::F32
        } else {
            dt
        };
        self.push(Op::GetRows { table: it, idx: ii }, out, &shape)
    }

    /// Joins tensors along `axis` (negative axes count from the end).
    ///
    /// # Shapes
    /// Every tensor has the same rank (≥ 1) and the same dims except along `axis`, which adds up.
    /// # DTypes
    /// Any, all equal; the output has it.
    /// # Errors
    /// [`Error::InvalidShape`] for an empty list; [`Error::ShapeMismatch`] when ranks or other dims differ;
    /// [`Error::DTypeMismatch`] when dtypes differ; [`Error::InvalidAxis`] for a bad axis.
    /// # Reference
    /// `numpy.concatenate`; ggml_concat.
    pub fn concat(&mut self, xs: &[Tensor], axis: isize) -> Result<Tensor> {
        let (&first, rest) = xs.split_first().ok_or(Error::InvalidShape {
            op: "concat",
            shape: vec![],
            reason: "no tensors given".into(),
        })?;
        let mut acc = first;
        let (_, _, s0) = self.info("concat", first)?;
        resolve_axis("concat", axis, &s0)?;
        for &x in rest {
            let (ia, da, sa) = self.info("concat", acc)?;
            let (ib, db, sb) = self.info("concat", x)?;
            let ax = resolve_axis("concat", axis, &sa)?;
            if da != db {
                return Err(Error::DTypeMismatch { op: "concat", lhs: da, lhs_shape: sa, rhs: db, rhs_shape: sb });
            }
            if da.is_storage_format() {
                let reason = "cast storage formats to f32 or f16 first".into();
                return Err(Error::UnsupportedDType { op: "concat", dtype: da, shape: sa, reason });
            }
            if sa.len() != sb.len() || (0..sa.len()).any(|d| d != ax && sa[d] != sb[d]) {
                return Err(Error::ShapeMismatch {
                    op: "concat",
                    lhs: sa,
                    rhs: sb,
                    reason: format!("all dims but axis {ax} must match"),
                });
            }
            let mut shape = sa.clone();
            shape[ax] += sb[ax];
            // a side of length 0 along the axis adds nothing (and an empty operand must not reach a kernel whose
            // output is not empty)
            if shape == sa {
                continue;
            }
            if shape == sb {
                acc = x;
                continue;
            }
            acc = self.push(Op::Concat { a: ia, b: ib, axis: ax }, da, &shape)?;
        }
        Ok(acc)
    }
}
