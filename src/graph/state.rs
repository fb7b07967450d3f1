//! Tensors that outlive a run: resident weights and states, and the ops that write states in place.

use super::{ExternalRef, Graph, Node, Op, Tensor};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::resident::{External, Resident, State};
use crate::shape::broadcast_shapes;
use std::sync::Arc;

impl Graph {
    fn external(&mut self, ext: &Arc<External>) -> Result<Tensor> {
        if let Some(r) = self.externals.iter().find(|r| Arc::ptr_eq(&r.ext, ext)) {
            return Ok(self.handle(r.node));
        }
        let slot = self.externals.len();
        let t = self.push(Op::External { slot }, ext.dtype, &ext.shape)?;
        self.externals.push(ExternalRef { ext: ext.clone(), node: t.index() });
        Ok(t)
    }

    /// The resident tensor `r` as a tensor of this graph (the same tensor each time it is asked for). Plans
    /// compiled from the graph bind it at compile time, on `r`'s device only.
    ///
    /// # Shapes
    /// `r`'s shape.
    /// # DTypes
    /// `r`'s dtype.
    /// # Errors
    /// None here; compiling on another device than `r`'s is an [`Error::InvalidArgument`] naming it.
    /// # Reference
    /// ggml's tensors in a backend buffer that lives across graph computations (`ggml_backend_alloc_ctx_tensors`).
    pub fn resident(&mut self, r: &Resident) -> Result<Tensor> {
        self.external(&r.inner)
    }

    /// The state `s` as a tensor of this graph: read it through views, write it with [`Graph::set_rows`] and
    /// [`Graph::copy_into`].
    ///
    /// # Shapes
    /// `s`'s shape.
    /// # DTypes
    /// `s`'s dtype.
    /// # Errors
    /// None here; compiling on another device than `s`'s is an [`Error::InvalidArgument`] naming it.
    /// # Reference
    /// A ggml tensor in a persistent backend buffer (llama.cpp's KV cache).
    pub fn state(&mut self, s: &State) -> Result<Tensor> {
        self.external(&s.inner)
    }

    /// The state under `t` (its storage), if `t` is a state or a view of one.
    fn state_of(&self, op: &'static str, t: Tensor) -> Result<&ExternalRef> {
        let node = self.node(op, t)?;
        let owner = &self.nodes[node.storage];
        match owner.op {
            Op::External { slot } if self.externals[slot].ext.writable => Ok(&self.externals[slot]),
            _ => Err(Error::InvalidArgument {
                op,
                reason: format!(
                    "the destination {:?} is not a state (create one with Device::state)",
                    node.layout.shape
                ),
            }),
        }
    }

    /// Records a write into `dst`'s storage: the new node aliases `dst` (same storage and layout), so reads of it
    /// come after the write.
    fn push_write(&mut self, op: Op, dst: Tensor) -> Tensor {
        let d = &self.nodes[dst.index()];
        let node = Node { op, dtype: d.dtype, layout: d.layout.clone(), storage: d.storage };
        self.nodes.push(node);
        self.handle(self.nodes.len() - 1)
    }

    /// Writes row `i` of `src` into row `idx[i]` of `dst`, converting to `dst`'s dtype (f32 rows into an f16
    /// cache). With repeated indices the last row wins. Returns `dst` after the write.
    ///
    /// # Shapes
    /// dst `[R, D]` (a state or a view of one whose rows are contiguous), idx `[N]`, src `[N, D]` → dst's shape.
    /// # DTypes
    /// dst f32 or f16 (or i32, with i32 src); src f32 or f16; idx i32.
    /// # Errors
    /// [`Error::InvalidArgument`] when dst is not a state; [`Error::InvalidShape`] or [`Error::ShapeMismatch`] for
    /// other shapes; [`Error::UnsupportedDType`] for non-i32 indices. At run time an index outside `0..R` is an
    /// [`Error::BadInput`] naming it on the CPU; the GPU skips that row (never writing outside `dst`).
    /// # Reference
    /// ggml_set_rows.
    pub fn set_rows(&mut self, dst: Tensor, idx: Tensor, src: Tensor) -> Result<Tensor> {
        self.state_of("set_rows", dst)?;
        let (_, dd, sd) = self.info("set_rows", dst)?;
        let (_, di, si) = self.info("set_rows", idx)?;
        let (_, ds, ss) = self.info("set_rows", src)?;
        let rows_ok = sd.len() == 2 && self.nodes[dst.index()].layout.strides[1] == 1;
        if !rows_ok {
            let reason = "dst must be [R, D] with contiguous rows".into();
            return Err(Error::InvalidShape { op: "set_rows", shape: sd, reason });
        }
        if di != DType::I32 {
            return Err(Error::UnsupportedDType {
                op: "set_rows",
                dtype: di,
                shape: si,
                reason: "indices must be i32".into(),
            });
        }
        if si.len() != 1 || ss.len() != 2 || ss[0] != si[0] || ss[1] != sd[1] {
            let reason = format!("src must be [N, {}] with idx [N]; idx is {si:?}", sd[1]);
            return Err(Error::ShapeMismatch { op: "set_rows", lhs: sd, rhs: ss, reason });
        }
        if dd.is_float() != ds.is_float() {
            let (lhs_shape, rhs_shape) = (sd, ss);
            return Err(Error::DTypeMismatch { op: "set_rows", lhs: dd, lhs_shape, rhs: ds, rhs_shape });
        }
        let op = Op::SetRows { dst: dst.index(), idx: idx.index(), src: src.index() };
        Ok(self.push_write(op, dst))
    }

    /// Writes `src` into `dst`, a view of a state, converting to `dst`'s dtype. Returns `dst` after the write.
    ///
    /// # Shapes
    /// src broadcasts to dst's shape (numpy assignment `dst[...] = src`); dst may be any view.
    /// # DTypes
    /// Floats into floats, i32 into i32.
    /// # Errors
    /// [`Error::InvalidArgument`] when dst is not (a view of) a state; [`Error::ShapeMismatch`] when src does not
    /// broadcast to dst; [`Error::DTypeMismatch`] for float with int.
    /// # Reference
    /// ggml_cpy into a view (`ggml_cpy(ctx, src, ggml_view_2d(ctx, cache, ...))`).
    pub fn copy_into(&mut self, dst: Tensor, src: Tensor) -> Result<Tensor> {
        self.state_of("copy_into", dst)?;
        let (_, dd, sd) = self.info("copy_into", dst)?;
        let (_, ds, ss) = self.info("copy_into", src)?;
        if broadcast_shapes("copy_into", &ss, &sd)? != sd {
            let reason = "src must broadcast to dst's shape".into();
            return Err(Error::ShapeMismatch { op: "copy_into", lhs: sd, rhs: ss, reason });
        }
        if dd.is_float() != ds.is_float() {
            let (lhs_shape, rhs_shape) = (sd, ss);
            return Err(Error::DTypeMismatch { op: "copy_into", lhs: dd, lhs_shape, rhs: ds, rhs_shape });
        }
        Ok(self.push_write(Op::CopyInto { dst: dst.index(), src: src.index() }, dst))
    }
}
