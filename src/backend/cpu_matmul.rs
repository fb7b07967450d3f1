//! CPU matmul through the `gemm` crate: strided operands read in place, f32 accumulation, multithreaded
//! natively (rayon) with the widest SIMD the CPU has, chosen at run time (AVX-512 with the `x86-v4` feature).

use crate::shape::Layout;
use crate::Data;
use std::borrow::Cow;

fn as_f32(d: &Data) -> Cow<'_, [f32]> {
    match d {
        Data::F32(v) => Cow::Borrowed(v),
        other => Cow::Owned(other.to_f32()),
    }
}

fn parallelism(m: usize, n: usize, k: usize) -> gemm::Parallelism {
    #[cfg(not(target_arch = "wasm32"))]
    if (m * n * k) >= 64 * 64 * 64 {
        return gemm::Parallelism::Rayon(0);
    }
    let _ = (m, n, k);
    gemm::Parallelism::None
}

/// `out[b] = a[b] @ b[b]` for every batch index; `la` is `[batch.., m, k]`, `lb` `[batch.., k, n]` (both already
/// broadcast to the output's batch dims), `out` is contiguous `[batch.., m, n]`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn matmul(da: &Data, la: &Layout, db: &Data, lb: &Layout, out: &mut Data, m: usize, k: usize, n: usize) {
    let (a, b) = (as_f32(da), as_f32(db));
    let batches = out.len() / (m * n);
    let mut tmp = Vec::new();
    let f32_out = matches!(out, Data::F32(_));
    if !f32_out {
        tmp = vec![0f32; out.len()];
    }
    let dst: &mut [f32] = match out {
        Data::F32(v) => v,
        _ => &mut tmp,
    };
    let (ra, rb) = (la.rank(), lb.rank());
    for bi in 0..batches {
        // batch offsets from the (up to two) batch dims
        let batch_off = |l: &Layout, r: usize| -> usize {
            let mut rem = bi;
            let mut off = l.offset;
            for d in (0..r - 2).rev() {
                off += (rem % l.shape[d]) * l.strides[d];
                rem /= l.shape[d];
            }
            off
        };
        let (oa, ob) = (batch_off(la, ra), batch_off(lb, rb));
        let c = &mut dst[bi * m * n..(bi + 1) * m * n];
        // SAFETY: every index gemm forms is `offset + i*rs + j*cs` for i < rows, j < cols, which is inside the
        // storage because the layouts were validated against it; dst is an exclusive slice of m*n elements.
        unsafe {
            gemm::gemm(
                m,
                n,
                k,
                c.as_mut_ptr(),
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
    if let Data::F16(v) = out {
        v.iter_mut().zip(tmp.iter()).for_each(|(o, &x)| *o = half::f16::from_f32(x));
    }
}
