//! The mixture-of-experts kernels on the CPU: top-k along the last axis, gathering along it, and the matmul over
//! selected experts, which groups a step's rows by expert so that each selected expert's weight is read once per
//! step (llama.cpp's `ggml_compute_forward_mul_mat_id`), its product by the quantized matmul's paths.

use super::buffer::Memory;
use super::parallel::{for_ranges, rows_per_task};
use super::qdot::{self, Q8Row};
use super::quant::{QMatmulKernel, Weight};
use super::target::{leaf, CpuFamily, CpuTarget, Leaf};
use crate::compile::ir::{Program, Step};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::graph::{NodeId, Op};

/// The indices of the `k` largest entries of each row, largest first (ties: the lower index; NaN the largest).
#[derive(Clone, Debug)]
pub(crate) struct TopKKernel {
    pub out: NodeId,
    pub x: Leaf,
    pub k: usize,
}

/// `a` ranks before `b` (descending, NaN first, ties by index: the caller sorts stably).
fn before(a: f32, b: f32) -> std::cmp::Ordering {
    match (a.is_nan(), b.is_nan()) {
        (true, true) => std::cmp::Ordering::Equal,
        (true, false) => std::cmp::Ordering::Less,
        (false, true) => std::cmp::Ordering::Greater,
        _ => b.partial_cmp(&a).expect("no NaN"),
    }
}

impl CpuFamily for TopKKernel {
    fn lower(p: &Program, id: NodeId, _t: &CpuTarget) -> Option<Self> {
        let Step::Op(Op::TopK { x, k }) = p.nodes[id].step else { return None };
        Some(TopKKernel { out: id, x: leaf(p, x, None), k })
    }

    fn run(&self, mem: &Memory) -> Result<()> {
        let l = &self.x.layout;
        let n = *l.shape.last().expect("rank >= 1");
        let (x, out) = (mem.view(self.x.storage, self.x.dtype), mem.view(self.out, DType::I32));
        let mut row = vec![0f32; n];
        let mut order: Vec<usize> = (0..n).collect();
        for r in 0..l.numel() / n.max(1) {
            x.row_f32(l.index_of(r * n), l.strides[l.rank() - 1], &mut row);
            order.iter_mut().enumerate().for_each(|(i, o)| *o = i);
            // a stable sort: equal values keep their index order
            order.sort_by(|&i, &j| before(row[i], row[j]));
            for (j, &i) in order[..self.k].iter().enumerate() {
                out.set_i32(r * self.k + j, i as i32);
            }
        }
        Ok(())
    }
}

/// `out[.., j] = x[.., idx[.., j]]`.
#[derive(Clone, Debug)]
pub(crate) struct TakeAlongAxisKernel {
    pub out: NodeId,
    pub out_dtype: DType,
    pub x: Leaf,
    pub idx: Leaf,
}

impl CpuFamily for TakeAlongAxisKernel {
    fn lower(p: &Program, id: NodeId, _t: &CpuTarget) -> Option<Self> {
        let Step::Op(Op::TakeAlongAxis { x, idx }) = p.nodes[id].step else { return None };
        Some(TakeAlongAxisKernel {
            out: id,
            out_dtype: p.nodes[id].dtype,
            x: leaf(p, x, None),
            idx: leaf(p, idx, None),
        })
    }

    /// # Errors
    /// [`Error::BadInput`] naming the index and its position when it is outside the row.
    fn run(&self, mem: &Memory) -> Result<()> {
        let (lx, li) = (&self.x.layout, &self.idx.layout);
        let (n, j) = (*lx.shape.last().expect("rank >= 1"), *li.shape.last().expect("rank >= 1"));
        let (x, ix, out) = (
            mem.view(self.x.storage, self.x.dtype),
            mem.view(self.idx.storage, DType::I32),
            mem.view(self.out, self.out_dtype),
        );
        for e in 0..li.numel() {
            let i = ix.get_i32(li.index_of(e));
            if i < 0 || i as usize >= n {
                let reason = format!("index {i} at position {e} is outside the rows' 0..{n}");
                return Err(Error::BadInput { name: "take_along_axis".into(), reason });
            }
            let at = lx.index_of(e / j * n + i as usize);
            if self.out_dtype == DType::I32 {
                out.set_i32(e, x.get_i32(at));
            } else {
                out.set(e, x.get(at));
            }
        }
        Ok(())
    }
}

/// `out[t, j, :] = a[t, j mod A, :] @ t(w[ids[t, j]])`, each expert's rows multiplied together.
#[derive(Clone, Debug)]
pub(crate) struct MulMatIdKernel {
    pub out: NodeId,
    /// `[T, A, K]`.
    pub a: Leaf,
    /// `[E, N, K]`, row-major: expert e is rows `e·N..` of `[E·N, K]`.
    pub w: Weight,
    pub experts: usize,
    pub n: usize,
    /// `[T, U]`.
    pub ids: Leaf,
    pub f32_activations: bool,
}

impl CpuFamily for MulMatIdKernel {
    fn lower(p: &Program, id: NodeId, t: &CpuTarget) -> Option<Self> {
        let Step::Op(Op::MulMatId { a, w, ids }) = p.nodes[id].step else { return None };
        let (lw, dw) = (&p.nodes[w].layout, p.nodes[w].dtype);
        let (experts, n, k) = (lw.shape[0], lw.shape[1], lw.shape[2]);
        let weight = Weight { storage: p.nodes[w].storage, dtype: dw, row0: lw.offset / k.max(1), k };
        let (a, ids) = (leaf(p, a, None), leaf(p, ids, None));
        Some(MulMatIdKernel { out: id, a, w: weight, experts, n, ids, f32_activations: t.f32_activations })
    }

    /// # Errors
    /// [`Error::BadInput`] naming the id and its position when it names no expert.
    fn run(&self, mem: &Memory) -> Result<()> {
        let (t, u) = (self.ids.layout.shape[0], self.ids.layout.shape[1]);
        let (rows_a, k) = (self.a.layout.shape[1], self.w.k);
        let ix = mem.view(self.ids.storage, DType::I32);
        // the (token, slot) pairs of each expert, in order
        let mut by_expert: Vec<Vec<usize>> = vec![Vec::new(); self.experts];
        for p in 0..t * u {
            let e = ix.get_i32(self.ids.layout.index_of(p));
            if e < 0 || e as usize >= self.experts {
                let reason = format!("expert id {e} at position {p} is outside 0..{}", self.experts);
                return Err(Error::BadInput { name: "mul_mat_id".into(), reason });
            }
            by_expert[e as usize].push(p);
        }
        if self.flat_mat_vec(mem, &by_expert, u) {
            return Ok(());
        }
        let (av, out) = (mem.view(self.a.storage, self.a.dtype), mem.view(self.out, DType::F32));
        let la = &self.a.layout;
        for (e, pairs) in by_expert.iter().enumerate().filter(|(_, p)| !p.is_empty()) {
            let mut rows = vec![0f32; pairs.len() * k];
            for (r, &p) in pairs.iter().enumerate() {
                let (tok, slot) = (p / u, p % u);
                let first = (tok * rows_a + slot % rows_a) * k;
                av.row_f32(la.index_of(first), la.strides[2], &mut rows[r * k..(r + 1) * k]);
            }
            let w = Weight { row0: self.w.row0 + e * self.n, ..self.w.clone() };
            let c = QMatmulKernel::of_rows(w, self.n, self.f32_activations).product(mem, &rows, pairs.len());
            for (r, &p) in pairs.iter().enumerate() {
                out.write_f32(p * self.n, &c[r * self.n..(r + 1) * self.n]);
            }
        }
        Ok(())
    }
}

impl MulMatIdKernel {
    /// A decode step's experts (a few rows each, an integer dot for the type): every selected expert's rows in one
    /// parallel pass, each activation row rounded to 8 bits once (the experts that share a token's row share it),
    /// instead of a pass and a rounding an expert. False, doing nothing, where that does not apply.
    fn flat_mat_vec(&self, mem: &Memory, by_expert: &[Vec<usize>], u: usize) -> bool {
        let Some(dot) = qdot::dot_fn(self.w.dtype).filter(|_| !self.f32_activations) else { return false };
        if by_expert.iter().any(|p| p.len() > 2) {
            return false;
        }
        let (rows_a, k, n) = (self.a.layout.shape[1], self.w.k, self.n);
        let (av, la) = (mem.view(self.a.storage, self.a.dtype), &self.a.layout);
        // a's rows that some pair reads, each quantized once; `act[p]` the pair's
        let (mut q8, mut seen) = (Vec::new(), std::collections::HashMap::new());
        let mut act = vec![0usize; self.ids.layout.numel()];
        let mut row = vec![0f32; k];
        for &p in by_expert.iter().flatten() {
            let first = ((p / u) * rows_a + (p % u) % rows_a) * k;
            act[p] = *seen.entry(first).or_insert_with(|| {
                av.row_f32(la.index_of(first), la.strides[2], &mut row);
                q8.push(Q8Row::quantize(&row));
                q8.len() - 1
            });
        }
        let used: Vec<(usize, &Vec<usize>)> = by_expert.iter().enumerate().filter(|(_, p)| !p.is_empty()).collect();
        let row_bytes = k / self.w.dtype.block_size() * self.w.dtype.block_bytes();
        for_ranges(used.len() * n, rows_per_task(used.len() * n, row_bytes), |range| {
            let out = mem.view(self.out, DType::F32);
            for r in range {
                let ((e, pairs), j) = (used[r / n], r % n);
                let bytes = self.w.bytes(mem, e * n + j);
                pairs.iter().for_each(|&p| out.set(p * n + j, dot(bytes, &q8[act[p]])));
            }
        });
        true
    }
}
