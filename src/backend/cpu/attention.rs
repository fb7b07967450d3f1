//! Rotary position embedding and attention on the CPU, in f32.

use super::buffer::Memory;
use super::elementwise::Leaf;
use crate::graph::NodeId;
use crate::ops::Rope;
use crate::shape::Layout;
use crate::{DType, Error, Result};

/// `[.., T, H, D]` rotated at positions `pos[T]`.
#[derive(Clone, Debug)]
pub(crate) struct RopeKernel {
    pub out: NodeId,
    pub out_dtype: DType,
    pub x: Leaf,
    pub pos: Leaf,
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
        let x = mem.view(self.x.storage, self.x.dtype);
        let pos = mem.view(self.pos.storage, self.pos.dtype);
        let out = mem.view(self.out, self.out_dtype);
        let (b, t, h, d) = thd(&self.x.layout);
        let l = &self.x.layout;
        let st = l.strides[l.rank() - 1];
        let mut row = vec![0f32; d];
        for bi in 0..b {
            for ti in 0..t {
                let p = pos.get_i32(self.pos.layout.index_of(ti));
                for hi in 0..h {
                    let first = ((bi * t + ti) * h + hi) * d;
                    x.row_f32(l.index_of(first), st, &mut row);
                    for i in 0..self.rope.n_dims / 2 {
                        let (a, c) = self.rope.pair(i);
                        let (sin, cos) = self.rope.theta(p, i).sin_cos();
                        let (x0, x1) = (row[a], row[c]);
                        row[a] = x0 * cos - x1 * sin;
                        row[c] = x0 * sin + x1 * cos;
                    }
                    row.iter().enumerate().for_each(|(j, &v)| out.set(first + j, v));
                }
            }
        }
    }
}

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
    pub(crate) fn run(&self, mem: &Memory) -> Result<()> {
        let (q, k, v) = (&self.q.layout, &self.k.layout, &self.v.layout);
        let r = q.rank();
        let (h, t, d) = (q.shape[r - 3], q.shape[r - 2], q.shape[r - 1]);
        let (hkv, s, dv) = (k.shape[r - 3], k.shape[r - 2], v.shape[r - 1]);
        let batches = if r == 4 { q.shape[0] } else { 1 };
        let len = self.length(mem, s)?;
        let (qv, kv, vv) = (
            mem.view(self.q.storage, self.q.dtype),
            mem.view(self.k.storage, self.k.dtype),
            mem.view(self.v.storage, self.v.dtype),
        );
        let mask = self.mask.as_ref().map(|m| (mem.view(m.storage, m.dtype), &m.layout));
        let out = mem.view(self.out, self.out_dtype);
        let (mut qr, mut kr, mut vr) = (vec![0f32; d], vec![0f32; d], vec![0f32; dv]);
        let (mut scores, mut acc) = (vec![0f32; len], vec![0f32; dv]);
        for b in 0..batches {
            for hi in 0..h {
                let g = hi / (h / hkv);
                for ti in 0..t {
                    let (qo, qs) = row_at(q, b, hi, ti);
                    qv.row_f32(qo, qs, &mut qr);
                    let visible = if self.causal { (len + ti + 1).saturating_sub(t).min(len) } else { len };
                    let mut max = f32::NEG_INFINITY;
                    for (si, sc) in scores.iter_mut().enumerate().take(visible) {
                        let (ko, ks) = row_at(k, b, g, si);
                        kv.row_f32(ko, ks, &mut kr);
                        let mut x = qr.iter().zip(&kr).map(|(a, b)| a * b).sum::<f32>() * self.scale;
                        if let Some((mv, ml)) = &mask {
                            x += mv.get(ml.index_of(((b * h + hi) * t + ti) * s + si));
                        }
                        *sc = x;
                        max = max.max(x);
                    }
                    acc.iter_mut().for_each(|a| *a = 0.0);
                    let mut sum = 0f32;
                    if max > f32::NEG_INFINITY {
                        for (si, &sc) in scores.iter().enumerate().take(visible) {
                            let p = (sc - max).exp();
                            sum += p;
                            let (vo, vs) = row_at(v, b, g, si);
                            vv.row_f32(vo, vs, &mut vr);
                            acc.iter_mut().zip(&vr).for_each(|(a, &x)| *a += p * x);
                        }
                    }
                    let base = ((b * t + ti) * h + hi) * dv;
                    let inv = if sum > 0.0 { 1.0 / sum } else { 0.0 };
                    acc.iter().enumerate().for_each(|(j, &a)| out.set(base + j, a * inv));
                }
            }
        }
        Ok(())
    }
}
