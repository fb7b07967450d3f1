//! f64 references of the linear-attention ops: l2 normalization, the causal depthwise conv, and the gated delta
//! rule both as its recurrence (token by token) and in the chunked form (WY representation, as the published
//! delta-net kernels and llama.cpp's chunked path compute it), written from the Gated DeltaNet paper and
//! `transformers`' `torch_recurrent_gated_delta_rule` / `torch_chunk_gated_delta_rule`.

use super::reference::Arr;

/// `x / max(‖x‖₂, eps)` over the last axis (`torch.nn.functional.normalize`).
pub fn l2_norm(x: &Arr, eps: f64) -> Arr {
    let n = *x.shape.last().expect("rank >= 1");
    let mut out = x.data.clone();
    for row in out.chunks_mut(n.max(1)) {
        let norm = row.iter().map(|v| v * v).sum::<f64>().sqrt().max(eps);
        row.iter_mut().for_each(|v| *v /= norm);
    }
    Arr::new(&x.shape, out)
}

/// `out[b, t, c] = Σ_k w[c, k] · x[b, t + k, c]` for x `[B, T + K − 1, C]` (or without B) and w `[C, K]`.
pub fn ssm_conv(x: &Arr, w: &Arr) -> Arr {
    let (c, k) = (w.shape[0], w.shape[1]);
    let rows = x.shape[x.shape.len() - 2];
    let t = rows + 1 - k;
    let batches = x.data.len() / (rows * c);
    let mut out = vec![0.0; batches * t * c];
    for b in 0..batches {
        for ti in 0..t {
            for ch in 0..c {
                out[(b * t + ti) * c + ch] =
                    (0..k).map(|j| w.data[ch * k + j] * x.data[(b * rows + ti + j) * c + ch]).sum();
            }
        }
    }
    let mut shape = x.shape.clone();
    let n = shape.len();
    shape[n - 2] = t;
    Arr::new(&shape, out)
}

/// The operands of the gated delta rule: q, k `[B, T, Hk, Dk]`, v `[B, T, Hv, Dv]`, g, beta `[B, T, Hv]`, state
/// `[B, Hv, Dv, Dk]`.
pub struct Delta<'a> {
    pub q: &'a Arr,
    pub k: &'a Arr,
    pub v: &'a Arr,
    pub g: &'a Arr,
    pub beta: &'a Arr,
    pub state: &'a Arr,
    pub scale: f64,
}

impl Delta<'_> {
    fn dims(&self) -> (usize, usize, usize, usize, usize, usize) {
        let (sq, sv) = (&self.q.shape, &self.v.shape);
        (sq[0], sq[1], sq[2], sq[3], sv[2], sv[3])
    }

    /// Row `t` of q or k for batch b and value head h (key head h mod Hk).
    fn key_row<'b>(&self, a: &'b Arr, b: usize, t: usize, h: usize) -> &'b [f64] {
        let (_, tt, hk, dk, _, _) = self.dims();
        let at = ((b * tt + t) * hk + h % hk) * dk;
        &a.data[at..at + dk]
    }
}

/// The recurrence, token by token: `S ← exp(g)·S; δ = β·(v − S·k); S ← S + δ ⊗ k; out = scale · S·q`, S a head's
/// `[Dv, Dk]` state. Returns (out `[B, T, Hv, Dv]`, new state `[B, Hv, Dv, Dk]`).
pub fn gated_delta_net(d: &Delta) -> (Arr, Arr) {
    let (b, t, _, dk, hv, dv) = d.dims();
    let mut out = vec![0.0; b * t * hv * dv];
    let mut state = d.state.data.clone();
    for bi in 0..b {
        for h in 0..hv {
            let s = &mut state[(bi * hv + h) * dv * dk..(bi * hv + h + 1) * dv * dk];
            for ti in 0..t {
                let (k, q) = (d.key_row(d.k, bi, ti, h), d.key_row(d.q, bi, ti, h));
                let gi = (bi * t + ti) * hv + h;
                let (decay, beta) = (d.g.data[gi].exp(), d.beta.data[gi]);
                for j in 0..dv {
                    let row = &mut s[j * dk..(j + 1) * dk];
                    row.iter_mut().for_each(|x| *x *= decay);
                    let kv: f64 = row.iter().zip(k).map(|(a, b)| a * b).sum();
                    let delta = beta * (d.v.data[gi * dv + j] - kv);
                    row.iter_mut().zip(k).for_each(|(x, k)| *x += delta * k);
                    out[gi * dv + j] = d.scale * row.iter().zip(q).map(|(a, b)| a * b).sum::<f64>();
                }
            }
        }
    }
    (Arr::new(&[b, t, hv, dv], out), Arr::new(&[b, hv, dv, dk], state))
}

/// The chunked form over chunks of `c` tokens (the WY representation: within a chunk, with cumulative log
/// decays γ, `U = (I + tril(β·(K Kᵀ)∘Γ, −1))⁻¹ · β·(V − (S₀ Kᵀ)ᵀ∘e^γ)`, outputs `(Q S₀ᵀ)∘e^γ + tril((Q Kᵀ)∘Γ) U`
/// and the state `e^{γ_last} S₀ + Σ_i e^{γ_last − γ_i} u_i ⊗ k_i`), each chunk's triangular system solved by
/// forward substitution. Equal to [`gated_delta_net`] up to rounding; the two together check that a chunked
/// kernel's algebra, not only its arithmetic, matches the recurrence.
pub fn gated_delta_net_chunked(d: &Delta, c: usize) -> (Arr, Arr) {
    let (b, t, _, dk, hv, dv) = d.dims();
    let mut out = vec![0.0; b * t * hv * dv];
    let mut state = d.state.data.clone();
    let dot = |a: &[f64], b: &[f64]| a.iter().zip(b).map(|(x, y)| x * y).sum::<f64>();
    for bi in 0..b {
        for h in 0..hv {
            let s = &mut state[(bi * hv + h) * dv * dk..(bi * hv + h + 1) * dv * dk];
            for c0 in (0..t).step_by(c.max(1)) {
                let n = c.min(t - c0);
                let gi = |i: usize| (bi * t + c0 + i) * hv + h;
                let k: Vec<&[f64]> = (0..n).map(|i| d.key_row(d.k, bi, c0 + i, h)).collect();
                let q: Vec<&[f64]> = (0..n).map(|i| d.key_row(d.q, bi, c0 + i, h)).collect();
                let mut gamma = vec![0.0; n];
                let mut acc = 0.0;
                for (i, gm) in gamma.iter_mut().enumerate() {
                    acc += d.g.data[gi(i)];
                    *gm = acc;
                }
                // u_i = β_i (v_i − e^{γ_i} S₀ k_i − Σ_{j<i} e^{γ_i − γ_j} (k_i·k_j) u_j), by forward substitution
                let mut u = vec![vec![0.0; dv]; n];
                for i in 0..n {
                    let beta = d.beta.data[gi(i)];
                    for jv in 0..dv {
                        let mut r = d.v.data[gi(i) * dv + jv] - gamma[i].exp() * dot(&s[jv * dk..(jv + 1) * dk], k[i]);
                        for j in 0..i {
                            r -= (gamma[i] - gamma[j]).exp() * dot(k[i], k[j]) * u[j][jv];
                        }
                        u[i][jv] = beta * r;
                    }
                }
                // o_i = scale (e^{γ_i} S₀ q_i + Σ_{j≤i} e^{γ_i − γ_j} (q_i·k_j) u_j)
                for i in 0..n {
                    for jv in 0..dv {
                        let mut o = gamma[i].exp() * dot(&s[jv * dk..(jv + 1) * dk], q[i]);
                        for j in 0..=i {
                            o += (gamma[i] - gamma[j]).exp() * dot(q[i], k[j]) * u[j][jv];
                        }
                        out[gi(i) * dv + jv] = d.scale * o;
                    }
                }
                let last = gamma[n - 1];
                for jv in 0..dv {
                    for ik in 0..dk {
                        let add: f64 = (0..n).map(|i| (last - gamma[i]).exp() * u[i][jv] * k[i][ik]).sum();
                        s[jv * dk + ik] = last.exp() * s[jv * dk + ik] + add;
                    }
                }
            }
        }
    }
    (Arr::new(&[b, t, hv, dv], out), Arr::new(&[b, hv, dv, dk], state))
}
