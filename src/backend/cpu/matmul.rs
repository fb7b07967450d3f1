//! Matmul on the CPU through the `gemm` crate: strided operands read in place (f16 operands widened to f32 first),
//! f32 accumulation, multithreaded natively (rayon) with the widest SIMD the CPU has, chosen at run time (AVX-512
//! with the `x86-v4` feature). A fused epilogue is applied to the product before the store.

use super::buffer::Memory;
use super::elementwise::{eval, load, Leaf, CHUNK};
use crate::compile::ir::Expr;
use crate::graph::NodeId;
use crate::shape::Layout;
use crate::DType;
use std::borrow::Cow;

/// `out[b] = epilogue(a[b] @ b[b])` for every batch index.
#[derive(Clone, Debug)]
pub(crate) struct MatmulKernel {
    pub out: NodeId,
    pub out_dtype: DType,
    /// `[batch.., m, k]`, broadcast to the output's batch dims.
    pub a: Leaf,
    /// `[batch.., k, n]`, broadcast likewise.
    pub b: Leaf,
    pub m: usize,
    pub k: usize,
    pub n: usize,
    /// The epilogue over `Expr::Acc` and its operands (broadcast to the output's shape).
    pub epilogue: Option<(Expr, Vec<Leaf>)>,
}

/// The operand's storage as f32, borrowed when it is f32 already.
fn as_f32<'a>(mem: &'a Memory, leaf: &Leaf) -> Cow<'a, [f32]> {
    let v = mem.view(leaf.storage, leaf.dtype);
    match v.f32_ptr() {
        // SAFETY: the view covers `v.len()` f32 elements of live storage for the run; nothing writes it while this
        // step runs (a matmul never writes in place).
        Some(p) => Cow::Borrowed(unsafe { std::slice::from_raw_parts(p, v.len()) }),
        None => Cow::Owned(v.widen_to_f32()),
    }
}

pub(crate) fn parallelism(m: usize, n: usize, k: usize) -> gemm::Parallelism {
    #[cfg(not(target_arch = "wasm32"))]
    if (m * n * k) >= 64 * 64 * 64 {
        return gemm::Parallelism::Rayon(0);
    }
    let _ = (m, n, k);
    gemm::Parallelism::None
}

/// Element offset of batch `bi`'s first element in a layout `[batch.., rows, cols]`.
fn batch_offset(l: &Layout, bi: usize) -> usize {
    let r = l.rank();
    let mut rem = bi;
    let mut off = l.offset;
    for d in (0..r - 2).rev() {
        off += (rem % l.shape[d]) * l.strides[d];
        rem /= l.shape[d];
    }
    off
}

impl MatmulKernel {
    /// Every batch of the product, then the epilogue and the store.
    pub(crate) fn run(&self, mem: &Memory) {
        let (m, k, n) = (self.m, self.k, self.n);
        let (a, b) = (as_f32(mem, &self.a), as_f32(mem, &self.b));
        let out = mem.view(self.out, self.out_dtype);
        let total = out.len();
        // the product goes straight into an f32 output without an epilogue, else through a temporary
        let direct = out.f32_mut_ptr().filter(|_| self.epilogue.is_none());
        let mut tmp = if direct.is_some() { Vec::new() } else { vec![0f32; total] };
        let c: &mut [f32] = match direct {
            // SAFETY: the output's storage holds `total` f32 elements and nothing else reads or writes it while this
            // step runs (a matmul never writes in place).
            Some(p) => unsafe { std::slice::from_raw_parts_mut(p, total) },
            None => &mut tmp,
        };
        let (la, lb) = (&self.a.layout, &self.b.layout);
        let (ra, rb) = (la.rank(), lb.rank());
        for bi in 0..total / (m * n).max(1) {
            let (oa, ob) = (batch_offset(la, bi), batch_offset(lb, bi));
            let dst = &mut c[bi * m * n..(bi + 1) * m * n];
            // SAFETY: every index gemm forms is `offset + i*rs + j*cs` for i < rows, j < cols, which is inside the
            // storage because the layouts were validated against it; dst is an exclusive slice of m*n elements.
            unsafe {
                gemm::gemm(
                    m,
                    n,
                    k,
                    dst.as_mut_ptr(),
                    1,
                    n as isize,
                    false,
                    a.as_ptr().add(oa),
                    la.strides[ra - 1] as isize,
                    la.strides[ra - 2] as isize,
                    b.as_ptr().add(ob),
                    lb.strides[rb - 1] as isize,
                    lb.strides[rb - 2] as isize,
                    0.0f32,
                    1.0f32,
                    false,
                    false,
                    false,
                    parallelism(m, n, k),
                );
            }
        }
        match &self.epilogue {
            None if direct.is_some() => {}
            None => c.iter().enumerate().for_each(|(i, &v)| out.set(i, v)),
            Some((expr, leaves)) => {
                let mut pos = vec![0usize; CHUNK];
                let mut vals = vec![vec![0f32; CHUNK]; leaves.len()];
                let mut res = vec![0f32; CHUNK];
                for i in (0..total).step_by(CHUNK) {
                    let len = CHUNK.min(total - i);
                    for (leaf, v) in leaves.iter().zip(vals.iter_mut()) {
                        load(mem, leaf, i, &mut pos[..len], &mut v[..len]);
                    }
                    eval(expr, &vals, &c[i..i + len], &mut res[..len]);
                    res[..len].iter().enumerate().for_each(|(j, &v)| out.set(i + j, v));
                }
            }
        }
    }
}
