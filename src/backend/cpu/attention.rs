//! Rotary position embedding and attention on the CPU, in f32.

use super::buffer::Memory;
use super::elementwise::Leaf;
use super::gather::SetRowsKernel;
use super::matmul::product;
use super::parallel::{for_chunks, threads};
use super::qdot::dot_f32;
use super::sgemm::Operand;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::graph::NodeId;
use crate::ops::Rope;
use crate::shape::Layout;

/// `[.., T, H, D]` rotated at positions `pos[T]`.
#[derive(Clone, Debug)]
pub(crate) struct RopeKernel {
    pub out: NodeId,
    pub out_dtype: DType,
    pub x: Leaf,
    pub pos: Leaf,
    /// Each pair's frequency factor (`[n_dims / 2]`, f32).
    pub factors: Option<Leaf>,
    pub rope: Rope,
}

/// (T, H, D) of a `[.., T, H, D]` layout and the number of leading (batch) rows.
fn thd(l: &Layout) -> (usize, usize, usize, usize) {
    let r = l.rank();
    let (t, h, d) = (l.shape[r - 3], l.shape[r - 2], l.shape[r - 1]);
    (l.numel() / (t * h * d), t, h, d)
}

impl RopeKernel {
    pub(crate) fn run(&self, mem: &Memory) {
        let out = mem.view(self.out, self.out_dtype);
        self.rotate(mem, &mut |i, v| out.set(i, v));
    }

    /// Passes each element of the contiguous output to `sink` as (flat index, value in f32).
    fn rotate(&self, mem: &Memory, sink: &mut dyn FnMut(usize, f32)) {
        let x = mem.view(self.x.storage, self.x.dtype);
        let pos = mem.view(self.pos.storage, self.pos.dtype);
        let (b, t, h, d) = thd(&self.x.layout);
        let l = &self.x.layout;
        let st = l.strides[l.rank() - 1];
        let mut row = vec![0f32; d];
        let factors: Vec<f32> = match &self.factors {
            Some(f) => {
                let v = mem.view(f.storage, f.dtype);
                (0..self.rope.n_dims / 2).map(|i| v.get(f.layout.index_of(i))).collect()
            }
            None => vec![1.0; self.rope.n_dims / 2],
        };
        for bi in 0..b {
            for ti in 0..t {
                let p = pos.get_i32(self.pos.layout.index_of(ti));
                for hi in 0..h {
                    let first = ((bi * t + ti) * h + hi) * d;
                    x.row_f32(l.index_of(first), st, &mut row);
                    for (i, &factor) in factors.iter().enumerate() {
                        let (a, c) = self.rope.pair(i);
                        let (sin, cos) = self.rope.sin_cos(p, i, factor);
                        let (x0, x1) = (row[a], row[c]);
                        row[a] = x0 * cos - x1 * sin;
                        row[c] = x0 * sin + x1 * cos;
                    }
                    row.iter().enumerate().for_each(|(j, &v)| sink(first + j, v));
                }
            }
        }
    }
}

/// rope fused with the KV-cache write: `set.dst[set.idx[r], :] = rope(x, pos)[r, :]` over the rope's output seen
/// as `set`'s rows, each value rounded to the rope's dtype first (as the unfused plan stores it).
#[derive(Clone, Debug)]
pub(crate) struct RopeSetRowsKernel {
    /// The rope; its `out` is unused (the rotated values go straight to `set`).
    pub rope: RopeKernel,
    /// The write; its `src` is unused (its rows are the rope's output).
    pub set: SetRowsKernel,
}

impl RopeSetRowsKernel {
    /// # Errors
    /// As [`SetRowsKernel::run`].
    pub(crate) fn run(&self, mem: &Memory) -> Result<()> {
        let mut rows = vec![0f32; self.rope.x.layout.numel()];
        let f16 = self.rope.out_dtype == DType::F16;
        self.rope.rotate(mem, &mut |i, v| rows[i] = if f16 { half::f16::from_f32(v).to_f32() } else { v });
        self.set.scatter(mem, &|i| rows[i])
    }
}

/// Query rows from which a prefill's attention runs as matrix products (below, a row at a time, where packing
/// the operands for `gemm` would cost more than it saves).
const GEMM_ROWS: usize = 64;
/// Scores a prefill's block of query rows holds at most (f32 values: 16 MiB).
const SCORES: usize = 1 << 22;

/// `softmax(q·kᵀ·scale + mask)·v` per (batch, head, query), written as `[.., T, H, Dv]`.
#[derive(Clone, Debug)]
pub(crate) struct AttentionKernel {
    pub out: NodeId,
    pub out_dtype: DType,
    /// `[.., H, T, D]`.
    pub q: Leaf,
    /// `[.., Hkv, S, D]`.
    pub k: Leaf,
    /// `[.., Hkv, S, Dv]`.
    pub v: Leaf,
    /// Broadcast to `[.., H, T, S]`.
    pub mask: Option<Leaf>,
    pub kv_len: Option<Leaf>,
    pub scale: f32,
    pub causal: bool,
}

/// Attention's sizes: query heads H, query rows T, key width D, KV heads Hkv, value width Dv.
struct Dims {
    h: usize,
    t: usize,
    d: usize,
    hkv: usize,
    dv: usize,
}

/// Start of `[.., a, b, :]` in a rank-r layout and the stride of its last dim.
fn row_at(l: &Layout, batch: usize, a: usize, b: usize) -> (usize, usize) {
    let r = l.rank();
    let mut off = l.offset + a * l.strides[r - 3] + b * l.strides[r - 2];
    if r == 4 {
        off += batch * l.strides[0];
    }
    (off, l.strides[r - 1])
}

impl AttentionKernel {
    /// Keys query row `ti` of `t` sees among `len`: all, or with causal masking those up to its position.
    fn visible(&self, len: usize, t: usize, ti: usize) -> usize {
        if self.causal {
            (len + ti + 1).saturating_sub(t).min(len)
        } else {
            len
        }
    }

    /// The mask's row for query `(b, head, ti)` (its first `out.len()` keys) into `out`; false without a mask.
    fn mask_row(&self, mem: &Memory, (b, hi, ti): (usize, usize, usize), s: usize, out: &mut [f32]) -> bool {
        let Some(m) = &self.mask else { return false };
        let Dims { h, t, .. } = self.dims();
        let ml = &m.layout;
        let (mo, ms) = (ml.index_of(((b * h + hi) * t + ti) * s), ml.strides[ml.rank() - 1]);
        mem.view(m.storage, m.dtype).row_f32(mo, ms, out);
        true
    }

    fn dims(&self) -> Dims {
        let (q, k, v) = (&self.q.layout, &self.k.layout, &self.v.layout);
        let r = q.rank();
        Dims { h: q.shape[r - 3], t: q.shape[r - 2], d: q.shape[r - 1], hkv: k.shape[r - 3], dv: v.shape[r - 1] }
    }

    /// The KV length of this run: the run-time length, checked, or S.
    fn length(&self, mem: &Memory, s: usize) -> Result<usize> {
        let Some(l) = &self.kv_len else { return Ok(s) };
        let n = mem.view(l.storage, l.dtype).get_i32(l.layout.offset);
        if n < 1 || n as usize > s {
            return Err(Error::BadInput {
                name: "attention".into(),
                reason: format!("KV length {n} is outside 1..={s} (the keys' length)"),
            });
        }
        Ok(n as usize)
    }

    /// # Errors
    /// [`Error::BadInput`] when the run-time KV length is outside `1..=S`.
    ///
    /// A prefill (T > 1) first converts every K and V row to contiguous f32 once; from [`GEMM_ROWS`] query
    /// rows it runs per (batch element, head) as matrix products (`prefill_head`), below a row at a time
    /// multithreaded over the rows of every batch element and head together, reading the converted rows; a
    /// decode step (T = 1) reads them in place.
    pub(crate) fn run(&self, mem: &Memory) -> Result<()> {
        let (q, k, v) = (&self.q.layout, &self.k.layout, &self.v.layout);
        let r = q.rank();
        let (h, t) = (q.shape[r - 3], q.shape[r - 2]);
        let (hkv, s, d, dv) = (k.shape[r - 3], k.shape[r - 2], q.shape[r - 1], v.shape[r - 1]);
        let batches = if r == 4 { q.shape[0] } else { 1 };
        let len = self.length(mem, s)?;
        let (kf, vf) = match t > 1 {
            true => {
                (self.to_f32(mem, &self.k, batches * hkv, len, d), self.to_f32(mem, &self.v, batches * hkv, len, dv))
            }
            false => (Vec::new(), Vec::new()),
        };
        // res [batches, h, t, dv]: one row per (b, head, query)
        let mut res = vec![0f32; batches * h * t * dv];
        if t >= GEMM_ROWS {
            // a long prefill: per (batch element, head), scores and weighted values as matrix products
            for_chunks(&mut res, t * dv, |ci, o| {
                let (b, hi) = (ci / h, ci % h);
                let (nk, nv) = (hkv * len * d, hkv * len * dv);
                self.prefill_head(mem, (b, hi), (len, s), (&kf[b * nk..(b + 1) * nk], &vf[b * nv..(b + 1) * nv]), o);
            });
        } else {
            let rows = (batches * h * t).div_ceil(4 * threads()).max(1);
            for_chunks(&mut res, rows * dv, |ci, chunk| {
                let mut scratch = Scratch::new(len, d, dv);
                for (j, o) in chunk.chunks_exact_mut(dv).enumerate() {
                    let row = ci * rows + j;
                    let (b, hi, ti) = (row / (h * t), row / t % h, row % t);
                    // this element's converted rows, or none (read in place)
                    let (nk, nv) = (hkv * len * d, hkv * len * dv);
                    let kv = match t > 1 {
                        true => (&kf[b * nk..(b + 1) * nk], &vf[b * nv..(b + 1) * nv]),
                        false => (&[][..], &[][..]),
                    };
                    self.row(mem, (b, hi, ti), (len, s), kv, &mut scratch, o);
                }
            });
        }
        // written as [.., t, h, dv]
        let out = mem.view(self.out, self.out_dtype);
        for (row, src) in res.chunks_exact(dv).enumerate() {
            let (b, hi, ti) = (row / (h * t), row / t % h, row % t);
            out.write_f32(((b * t + ti) * h + hi) * dv, src);
        }
        Ok(())
    }

    /// The rows `[b, g, 0..len, :]` of `x` (K or V) for every batch element `b` and KV head `g` (`heads` of
    /// them in all), as f32 `[heads, len, width]`.
    fn to_f32(&self, mem: &Memory, x: &Leaf, heads: usize, len: usize, width: usize) -> Vec<f32> {
        let mut out = vec![0f32; heads * len * width];
        let hkv = x.layout.shape[x.layout.rank() - 3];
        let per = (heads * len).div_ceil(4 * threads()).max(1);
        for_chunks(&mut out, per * width, |ci, chunk| {
            let view = mem.view(x.storage, x.dtype);
            for (j, row) in chunk.chunks_exact_mut(width).enumerate() {
                let n = ci * per + j;
                let (bg, si) = (n / len, n % len);
                let (o, st) = row_at(&x.layout, bg / hkv, bg % hkv, si);
                view.row_f32(o, st, row);
            }
        });
        out
    }

    /// Every query row of head `hi` of batch element `b` (a prefill), into `out [T, Dv]`: `S = q·kᵀ·scale` for
    /// a block of query rows at a time by `gemm` (K and V converted to f32 `[Hkv, len, ·]` in `kf`/`vf`), the
    /// mask added, each row's softmax over its visible keys (a row with none gives zeros), then `P·v` by `gemm`
    /// and each row divided by its sum. Blocks of rows keep `S` within [`SCORES`] values.
    fn prefill_head(
        &self,
        mem: &Memory,
        (b, hi): (usize, usize),
        (len, s): (usize, usize),
        (kf, vf): (&[f32], &[f32]),
        out: &mut [f32],
    ) {
        let q = &self.q.layout;
        let Dims { h, t, d, hkv, dv } = self.dims();
        let g = hi / (h / hkv);
        let (kg, vg) = (&kf[g * len * d..(g + 1) * len * d], &vf[g * len * dv..(g + 1) * len * dv]);
        let block = (SCORES / len).clamp(1, t);
        let (mut qb, mut sc, mut mask) = (vec![0f32; block * d], vec![0f32; block * len], vec![0f32; len]);
        let qv = mem.view(self.q.storage, self.q.dtype);
        for t0 in (0..t).step_by(block) {
            let rows = block.min(t - t0);
            for (i, row) in qb.chunks_exact_mut(d).take(rows).enumerate() {
                let (qo, qs) = row_at(q, b, hi, t0 + i);
                qv.row_f32(qo, qs, row);
            }
            let (qm, km) = (
                Operand { ptr: qb.as_ptr(), rs: d as isize, cs: 1 },
                Operand { ptr: kg.as_ptr(), rs: 1, cs: d as isize },
            );
            // SAFETY: qb holds rows × d, kg len × d (read as its transpose), sc rows × len.
            unsafe { product(rows, len, d, qm, km, &mut sc[..rows * len]) };
            let mut sums = vec![0f32; rows];
            for (i, x) in sc.chunks_exact_mut(len).take(rows).enumerate() {
                let ti = t0 + i;
                let visible = self.visible(len, t, ti);
                x.iter_mut().for_each(|e| *e *= self.scale);
                if self.mask_row(mem, (b, hi, ti), s, &mut mask[..visible]) {
                    x.iter_mut().zip(&mask[..visible]).for_each(|(e, m)| *e += m);
                }
                let max = x[..visible].iter().fold(f32::NEG_INFINITY, |a, &e| nan_max(a, e));
                if max == f32::NEG_INFINITY {
                    x.iter_mut().for_each(|e| *e = 0.0);
                    continue;
                }
                x[..visible].iter_mut().for_each(|e| *e = (*e - max).exp());
                x[visible..].iter_mut().for_each(|e| *e = 0.0);
                sums[i] = x[..visible].iter().sum();
            }
            let o = &mut out[t0 * dv..(t0 + rows) * dv];
            let (pm, vm) = (
                Operand { ptr: sc.as_ptr(), rs: len as isize, cs: 1 },
                Operand { ptr: vg.as_ptr(), rs: dv as isize, cs: 1 },
            );
            // SAFETY: sc holds rows × len, vg len × dv, o rows × dv.
            unsafe { product(rows, dv, len, pm, vm, o) };
            for (row, &sum) in o.chunks_exact_mut(dv).zip(&sums) {
                let inv = if sum > 0.0 { 1.0 / sum } else { 0.0 };
                row.iter_mut().for_each(|a| *a *= inv);
            }
        }
    }

    /// One query row `(b, head, t)`: its scores over the visible keys, their softmax, the weighted sum of V
    /// into `out [Dv]`. `kf`/`vf` hold the keys and values as f32 when converted (else they are read in place).
    #[allow(clippy::too_many_arguments)]
    fn row(
        &self,
        mem: &Memory,
        (b, hi, ti): (usize, usize, usize),
        (len, s): (usize, usize),
        (kf, vf): (&[f32], &[f32]),
        sc: &mut Scratch,
        out: &mut [f32],
    ) {
        let q = &self.q.layout;
        let Dims { h, t, d, hkv, dv } = self.dims();
        let g = hi / (h / hkv);
        let (qo, qs) = row_at(q, b, hi, ti);
        mem.view(self.q.storage, self.q.dtype).row_f32(qo, qs, &mut sc.q);
        let (kv, vv) = (mem.view(self.k.storage, self.k.dtype), mem.view(self.v.storage, self.v.dtype));
        let visible = self.visible(len, t, ti);
        let masked = self.mask_row(mem, (b, hi, ti), s, &mut sc.mask[..visible]);
        let mut max = f32::NEG_INFINITY;
        for si in 0..visible {
            let key: &[f32] = if kf.is_empty() {
                let (ko, ks) = row_at(&self.k.layout, b, g, si);
                kv.row_f32(ko, ks, &mut sc.k);
                &sc.k
            } else {
                &kf[(g * len + si) * d..][..d]
            };
            let mut x = dot_f32(&sc.q, key) * self.scale;
            if masked {
                x += sc.mask[si];
            }
            sc.scores[si] = x;
            max = nan_max(max, x);
        }
        out.iter_mut().for_each(|a| *a = 0.0);
        let mut sum = 0f32;
        // a row with no visible key gives zeros; a NaN score gives NaN (as PyTorch's softmax), never zeros
        if max != f32::NEG_INFINITY {
            for si in 0..visible {
                let p = (sc.scores[si] - max).exp();
                sum += p;
                let val: &[f32] = if vf.is_empty() {
                    let (vo, vs) = row_at(&self.v.layout, b, g, si);
                    vv.row_f32(vo, vs, &mut sc.v);
                    &sc.v
                } else {
                    &vf[(g * len + si) * dv..][..dv]
                };
                out.iter_mut().zip(val).for_each(|(a, &x)| *a += p * x);
            }
        }
        let inv = if sum > 0.0 { 1.0 / sum } else { 0.0 };
        out.iter_mut().for_each(|a| *a *= inv);
    }
}

/// The larger of `a` and `b`, NaN when either is (`f32::max` drops a NaN: a row of NaN scores became zeros).
#[inline]
fn nan_max(a: f32, b: f32) -> f32 {
    if a.is_nan() || b.is_nan() {
        f32::NAN
    } else {
        a.max(b)
    }
}

/// A task's buffers: the query row, a K and a V row read in place, the scores and the mask's row.
struct Scratch {
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    scores: Vec<f32>,
    mask: Vec<f32>,
}

impl Scratch {
    fn new(len: usize, d: usize, dv: usize) -> Scratch {
        Scratch { q: vec![0.0; d], k: vec![0.0; d], v: vec![0.0; dv], scores: vec![0.0; len], mask: vec![0.0; len] }
    }
}
