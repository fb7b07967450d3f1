//! Lowering for the CPU (stage 2, compile pass 5): each step of a program becomes a [`CpuKernel`] of its family.

use super::attention::{AttentionKernel, RopeKernel, RopeSetRowsKernel};
use super::buffer::Memory;
use super::elementwise::{ElementwiseKernel, Leaf};
use super::gather::{ConcatKernel, CopyIntoKernel, GetRowsKernel, SetRowsKernel};
use super::matmul::{MatmulKernel, TransposedB};
use super::quant::{self, DequantizeKernel, GetRowsQKernel, QMatmulKernel, Weight};
use super::rows::{RowKind, RowsKernel};
use crate::compile::ir::{Expr, Program, Step};
use crate::compile::memory::{MemoryLimits, MemoryPlan};
use crate::compile::Target;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::graph::{NodeId, Op};
use crate::ops::MatmulPrecision;

/// Largest tensor the CPU backend holds, in bytes: 2 GiB on wasm32 (4 GiB address space), 16 GiB natively.
pub(super) const MAX_TENSOR_BYTES: u64 = if cfg!(target_pointer_width = "32") { 1 << 31 } else { 1 << 34 };

/// One lowered step.
#[derive(Clone, Debug)]
pub(super) enum CpuKernel {
    Elementwise(ElementwiseKernel),
    MatMul(MatmulKernel),
    Rows(RowsKernel, usize),
    GetRows(GetRowsKernel),
    Concat(ConcatKernel),
    SetRows(SetRowsKernel),
    CopyInto(CopyIntoKernel),
    Rope(RopeKernel),
    RopeSetRows(RopeSetRowsKernel),
    Attention(AttentionKernel),
    Dequantize(DequantizeKernel),
    GetRowsQ(GetRowsQKernel),
    QMatmul(QMatmulKernel),
}

/// The CPU's side of the pass list.
pub(super) struct CpuTarget {
    pub(super) fusion: bool,
    pub(super) device: u64,
    pub(super) f32_activations: bool,
}

fn leaf(p: &Program, src: NodeId, shape: Option<&[usize]>) -> Leaf {
    let n = &p.nodes[src];
    let layout = match shape {
        Some(s) => n.layout.broadcast_operand(s),
        None => n.layout.clone(),
    };
    Leaf { storage: n.storage, dtype: n.dtype, layout }
}

/// The weight behind `t(w)` (layout `[K, N]`, strides `[1, K]`) and N.
fn weight_of_transposed(p: &Program, b: NodeId) -> (Weight, usize) {
    let l = &p.nodes[b].layout;
    let (k, n) = (l.shape[0], l.shape[1]);
    (Weight { storage: p.nodes[b].storage, dtype: p.nodes[b].dtype, row0: l.offset / k, k }, n)
}

/// The weight of a row-major `[.., K]` tensor (rows of a storage format) and its number of rows.
fn weight_of_rows(p: &Program, x: NodeId) -> (Weight, usize) {
    let l = &p.nodes[x].layout;
    let k = l.shape.last().copied().unwrap_or(1);
    (Weight { storage: p.nodes[x].storage, dtype: p.nodes[x].dtype, row0: l.offset / k, k }, l.numel() / k)
}

/// A mat-vec (at most `VEC_ROWS` rows of a) over an f16 weight read as `t(w)` (w `[N, K]` row-major): converted a
/// row at a time by the quantized kernel's mat-vec, not as a whole as `gemm`'s path would.
/// Whether `a @ b` runs the quantized matmul kernel (`QMatmulKernel`): b in a storage format, or f16 for few rows.
fn quantized_matmul(p: &Program, a: NodeId, b: NodeId) -> bool {
    p.nodes[b].dtype.is_storage_format() || half_mat_vec(p, a, b)
}

fn half_mat_vec(p: &Program, a: NodeId, b: NodeId) -> bool {
    let lb = &p.nodes[b].layout;
    let k = lb.shape[0];
    p.nodes[b].dtype == DType::F16
        && lb.rank() == 2
        && lb.strides == [1, k]
        && lb.offset.is_multiple_of(k)
        && p.nodes[a].layout.numel() / k.max(1) <= quant::VEC_ROWS
}

fn matmul_kernel(
    p: &Program,
    id: NodeId,
    a: NodeId,
    b: NodeId,
    epi: Option<&(crate::compile::ir::Expr, Vec<NodeId>)>,
) -> MatmulKernel {
    let node = &p.nodes[id];
    let shape = &node.layout.shape;
    let r = shape.len();
    let (m, n) = (shape[r - 2], shape[r - 1]);
    let k = p.nodes[a].layout.shape[p.nodes[a].layout.rank() - 1];
    let batch = &shape[..r - 2];
    let la = leaf(p, a, Some(&[batch, &[m, k]].concat()));
    let lb = leaf(p, b, Some(&[batch, &[k, n]].concat()));
    let epilogue = epi.map(|(e, srcs)| (e.clone(), srcs.iter().map(|&s| leaf(p, s, Some(shape))).collect()));
    // many rows against an f32 weight read as t(w): the weight's transposed copy (a few rows: gemm reads each
    // weight row once either way, and the copy would double the weight's memory for nothing)
    let b_transposed = match p.external(p.nodes[b].storage) {
        Some(r) if m > quant::VEC_ROWS => TransposedB::of(&r.ext, &p.nodes[b].layout),
        _ => None,
    };
    MatmulKernel { out: id, out_dtype: node.dtype, a: la, b: lb, m, k, n, epilogue, b_transposed }
}

impl Target for CpuTarget {
    type Kernel = CpuKernel;

    fn device_id(&self) -> u64 {
        self.device
    }

    fn fusion(&self) -> bool {
        self.fusion
    }

    fn memory_limits(&self) -> MemoryLimits {
        MemoryLimits { align: 64, max_arena: 1 << 40, max_tensor: MAX_TENSOR_BYTES, place_inputs: false }
    }

    /// Two quantized weights of one dtype: `QMatmulKernel` computes both products, its activations rounded
    /// once (and, repacked, both weights' panels in one parallel pass).
    fn dual_matmul(&self, p: &Program, a: NodeId, b: NodeId, b2: NodeId) -> bool {
        quantized_matmul(p, a, b) && quantized_matmul(p, a, b2) && p.nodes[b].dtype == p.nodes[b2].dtype
    }

    fn lower(&self, p: &Program, _memory: &MemoryPlan, id: NodeId) -> Result<Vec<CpuKernel>> {
        self.kernel(p, id).map(|k| vec![k])
    }
}

/// `get_rows` of a table in a storage format (read through its repacked copy once it has one, where it is a
/// resident).
fn get_rows_q_kernel(p: &Program, out: NodeId, table: NodeId, idx: NodeId) -> GetRowsQKernel {
    let (w, rows) = weight_of_rows(p, table);
    GetRowsQKernel {
        out,
        table: w,
        rows,
        idx: leaf(p, idx, None),
        #[cfg(target_arch = "x86_64")]
        resident: p
            .external(p.nodes[table].storage)
            .filter(|e| !e.ext.writable)
            .map(|e| quant::TableResident(e.ext.clone())),
    }
}

/// The rope of `x` at `pos` (with frequency factors where given) into `out` of `dtype`.
fn rope_kernel(
    p: &Program,
    (out, out_dtype): (NodeId, DType),
    (x, pos, factors): (NodeId, NodeId, Option<NodeId>),
    rope: crate::ops::Rope,
) -> RopeKernel {
    let (x, pos) = (leaf(p, x, None), leaf(p, pos, None));
    RopeKernel { out, out_dtype, x, pos, factors: factors.map(|f| leaf(p, f, None)), rope }
}

impl CpuTarget {
    fn kernel(&self, p: &Program, id: NodeId) -> Result<CpuKernel> {
        let node = &p.nodes[id];
        let shape = &node.layout.shape;
        let (out, out_dtype) = (id, node.dtype);
        let rows = |op: RowKind, x: NodeId, mask: Option<NodeId>, epi: Option<&(Expr, Vec<NodeId>)>| {
            let x = leaf(p, x, None);
            let n = x.layout.shape.last().copied().unwrap_or(1);
            let count = x.layout.numel() / n.max(1);
            let mask = mask.map(|m| leaf(p, m, Some(&x.layout.shape)));
            let epilogue = epi.map(|(e, srcs)| (e.clone(), srcs.iter().map(|&s| leaf(p, s, Some(shape))).collect()));
            CpuKernel::Rows(RowsKernel { op, out, out_dtype, x, mask, n, epilogue }, count)
        };
        Ok(match &node.step {
            Step::Elementwise { expr, srcs } => CpuKernel::Elementwise(ElementwiseKernel {
                out,
                out_dtype,
                numel: node.layout.numel(),
                expr: expr.clone(),
                leaves: srcs.iter().map(|&s| leaf(p, s, Some(shape))).collect(),
            }),
            Step::MatMul { norm: Some(_), .. } => unreachable!("the CPU backend takes no norm into a matmul"),
            Step::MatMul { a, b, b2, epilogue, prec, .. } if quantized_matmul(p, *a, *b) => {
                let f32_activations = self.f32_activations || *prec == MatmulPrecision::F32;
                let mut k = qmatmul_kernel(p, id, (*a, *b), epilogue.as_ref(), f32_activations);
                // a dual matmul's second product (`dual_matmul` allowed only a quantized weight of b's dtype)
                k.second = b2.map(|b2| Box::new(qmatmul_kernel(p, id, (*a, b2), None, f32_activations)));
                CpuKernel::QMatmul(k)
            }
            Step::MatMul { b2: Some(_), .. } => unreachable!("dual matmuls are fused over quantized weights only"),
            Step::MatMul { a, b, epilogue, .. } => CpuKernel::MatMul(matmul_kernel(p, id, *a, *b, epilogue.as_ref())),
            Step::Op(Op::GetRows { table, idx }) if p.nodes[*table].dtype.is_storage_format() => {
                CpuKernel::GetRowsQ(get_rows_q_kernel(p, out, *table, *idx))
            }
            Step::Dequantize { x } => {
                let (w, rows) = weight_of_rows(p, *x);
                CpuKernel::Dequantize(DequantizeKernel { out, out_dtype, w, rows })
            }
            Step::Row { op, x, mask, params, epilogue } => {
                rows(RowKind::Row(*op, *params), *x, *mask, epilogue.as_ref())
            }
            Step::Op(Op::Reduce { op, x }) => rows(RowKind::Reduce(*op), *x, None, None),
            Step::Op(Op::GetRows { table, idx }) => CpuKernel::GetRows(GetRowsKernel {
                out,
                out_dtype,
                table: leaf(p, *table, None),
                idx: leaf(p, *idx, None),
            }),
            Step::Op(Op::Concat { a, b, axis }) => CpuKernel::Concat(ConcatKernel {
                out,
                out_dtype,
                out_shape: shape.clone(),
                a: leaf(p, *a, None),
                b: leaf(p, *b, None),
                axis: *axis,
            }),
            Step::Op(Op::SetRows { dst, idx, src }) => CpuKernel::SetRows(SetRowsKernel {
                dst: leaf(p, *dst, None),
                idx: leaf(p, *idx, None),
                src: leaf(p, *src, None),
            }),
            Step::Op(Op::CopyInto { dst, src }) => {
                let dst = leaf(p, *dst, None);
                let src = leaf(p, *src, Some(&dst.layout.shape));
                CpuKernel::CopyInto(CopyIntoKernel { dst, src })
            }
            &Step::Op(Op::Rope { x, pos, factors, rope }) => {
                CpuKernel::Rope(rope_kernel(p, (out, out_dtype), (x, pos, factors), rope))
            }
            &Step::RopeSetRows { dst, idx, x, pos, factors, rope, rope_dtype } => {
                CpuKernel::RopeSetRows(RopeSetRowsKernel {
                    rope: rope_kernel(p, (out, rope_dtype), (x, pos, factors), rope),
                    set: SetRowsKernel { dst: leaf(p, dst, None), idx: leaf(p, idx, None), src: leaf(p, x, None) },
                })
            }
            Step::RopeKvWrites { .. } => unreachable!("the CPU backend keeps a rope and the KV-cache writes apart"),
            Step::Op(Op::Attention { q, k, v, mask, kv_len, scale, causal }) => {
                let q = leaf(p, *q, None);
                let k = leaf(p, *k, None);
                let r = q.layout.rank();
                let mut full = q.layout.shape.clone();
                full[r - 1] = k.layout.shape[r - 2];
                CpuKernel::Attention(AttentionKernel {
                    out,
                    out_dtype,
                    q,
                    k,
                    v: leaf(p, *v, None),
                    mask: mask.map(|m| leaf(p, m, Some(&full))),
                    kv_len: kv_len.map(|l| leaf(p, l, None)),
                    scale: *scale,
                    causal: *causal,
                })
            }
            // inputs, views and externals are not scheduled; the other graph ops became the compiler's steps
            Step::Op(op) => {
                let reason = "this graph op has no kernel of its own (a bug: the compiler should have replaced it)";
                return Err(Error::Unsupported { op: op.name().into(), backend: "cpu".into(), reason: reason.into() });
            }
        })
    }
}

/// The kernel of a matmul whose weight `b` is stored in a block or half format (or a half mat-vec).
fn qmatmul_kernel(
    p: &Program,
    out: NodeId,
    (a, b): (NodeId, NodeId),
    epilogue: Option<&(crate::compile::ir::Expr, Vec<NodeId>)>,
    f32_activations: bool,
) -> QMatmulKernel {
    let node = &p.nodes[out];
    let (w, n) = weight_of_transposed(p, b);
    let epilogue =
        epilogue.map(|(e, srcs)| (e.clone(), srcs.iter().map(|&s| leaf(p, s, Some(&node.layout.shape))).collect()));
    #[cfg(target_arch = "x86_64")]
    let repacked = match p.external(p.nodes[b].storage) {
        Some(r) if !f32_activations => quant::RepackedW::of(&r.ext, &p.nodes[b].layout),
        _ => None,
    };
    QMatmulKernel {
        out,
        out_dtype: node.dtype,
        a: leaf(p, a, None),
        w,
        n,
        epilogue,
        f32_activations,
        #[cfg(target_arch = "x86_64")]
        repacked,
        second: None,
    }
}

impl CpuKernel {
    pub(super) fn run(&self, mem: &Memory) -> Result<()> {
        match self {
            CpuKernel::Elementwise(k) => k.run_all(mem),
            CpuKernel::MatMul(k) => k.run(mem),
            CpuKernel::Rows(k, rows) => k.run_all(mem, *rows),
            CpuKernel::GetRows(k) => k.run(mem)?,
            CpuKernel::Concat(k) => k.run(mem),
            CpuKernel::SetRows(k) => k.run(mem)?,
            CpuKernel::CopyInto(k) => k.run(mem),
            CpuKernel::Rope(k) => k.run(mem),
            CpuKernel::RopeSetRows(k) => k.run(mem)?,
            CpuKernel::Attention(k) => k.run(mem)?,
            CpuKernel::Dequantize(k) => k.run(mem),
            CpuKernel::GetRowsQ(k) => k.run(mem)?,
            CpuKernel::QMatmul(k) => k.run(mem),
        }
        Ok(())
    }
}
