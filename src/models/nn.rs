//! Building blocks of transformer graphs shared by the model runners: linear layers (any weight dtype, an
//! optional bias), RMS norms, gated feed-forwards (SwiGLU, GeGLU), soft-capping, and attention over a KV cache's
//! views, fused or, where the scores need soft-capping, spelled out as matmul, tanh, masked softmax, matmul.

use crate::error::Result;
use crate::graph::{Attention, Graph, Tensor};
use crate::resident::Resident;

/// `x · wᵀ (+ bias)` for a weight stored `[out, in]` (`torch.nn.functional.linear`).
pub(crate) fn linear(g: &mut Graph, x: Tensor, w: &Resident, bias: Option<&Resident>) -> Result<Tensor> {
    let w = g.resident(w)?;
    let wt = g.t(w)?;
    let y = g.matmul(x, wt)?;
    match bias {
        None => Ok(y),
        Some(b) => {
            let b = g.resident(b)?;
            g.add(y, b)
        }
    }
}

/// `rms_norm(x) · weight` over the last axis.
pub(crate) fn rms_norm(g: &mut Graph, x: Tensor, weight: &Resident, eps: f32) -> Result<Tensor> {
    let n = g.rms_norm(x, eps)?;
    let w = g.resident(weight)?;
    g.mul(n, w)
}

/// `rms_norm(x) · weight` when there is a weight, else x.
pub(crate) fn maybe_rms_norm(g: &mut Graph, x: Tensor, weight: Option<&Resident>, eps: f32) -> Result<Tensor> {
    match weight {
        Some(w) => rms_norm(g, x, w, eps),
        None => Ok(x),
    }
}

/// `c · tanh(x / c)`: soft-capping at c (Gemma 2).
pub(crate) fn softcap(g: &mut Graph, x: Tensor, c: f32) -> Result<Tensor> {
    let s = g.scale(x, 1.0 / c)?;
    let t = g.tanh(s)?;
    g.scale(t, c)
}

/// Attention of queries `[.., H, T, D]` over keys and values `[.., Hkv, S, D]` (grouped: query head h reads KV
/// head h / (H / Hkv)) with an additive mask broadcast to `[.., H, T, S]`, → `[.., T, H, D]` (as
/// [`Graph::attention`]). With `softcap`,
/// the scores are soft-capped before the mask: the matmuls and softmax as separate ops, over all S keys.
/// Without, the fused attention op, over the first `kv_len` keys, `causal` as [`Attention::causal`].
pub(crate) struct AttendSpec {
    pub scale: f32,
    pub softcap: Option<f32>,
    pub causal: bool,
    pub mask: Option<Tensor>,
    pub kv_len: Option<Tensor>,
}

/// See [`AttendSpec`].
pub(crate) fn attend(g: &mut Graph, q: Tensor, k: Tensor, v: Tensor, spec: &AttendSpec) -> Result<Tensor> {
    let Some(cap) = spec.softcap else {
        let a = Attention { scale: spec.scale, causal: spec.causal, mask: spec.mask, kv_len: spec.kv_len };
        return g.attention(q, k, v, &a);
    };
    let qs = g.shape(q)?.to_vec();
    let ks = g.shape(k)?.to_vec();
    let r = qs.len();
    let (h, t, d, hkv) = (qs[r - 3], qs[r - 2], qs[r - 1], ks[r - 3]);
    let lead = &qs[..r - 3];
    // [.., Hkv, G·T, D]: the G query heads of a KV head one after another, so one batched matmul serves them
    let grouped: Vec<usize> = lead.iter().copied().chain([hkv, h / hkv * t, d]).collect();
    let qg = g.reshape(q, &grouped)?;
    let kt = g.transpose(k, -2, -1)?;
    let s = g.matmul(qg, kt)?; // [.., Hkv, G·T, S]
    let s = g.scale(s, spec.scale)?;
    let s = softcap(g, s, cap)?;
    let scores: Vec<usize> = lead.iter().copied().chain([h, t, ks[r - 2]]).collect();
    let s = g.reshape(s, &scores)?;
    let mask = spec.mask.expect("soft-capped attention takes its causal mask as an input");
    let p = g.softmax_ext(s, Some(mask), 1.0)?;
    let sg: Vec<usize> = lead.iter().copied().chain([hkv, h / hkv * t, ks[r - 2]]).collect();
    let p = g.reshape(p, &sg)?;
    let o = g.matmul(p, v)?; // [.., Hkv, G·T, D]
    let o = g.reshape(o, &qs)?;
    g.transpose(o, -3, -2)
}

/// The gated feed-forward `down(act(gate(x)) · up(x))` with act SiLU (SwiGLU) or GELU's tanh form (GeGLU).
pub(crate) fn gated_ffn(
    g: &mut Graph,
    x: Tensor,
    (gate, up, down): (&Resident, &Resident, &Resident),
    act: crate::models::arch::spec::Activation,
) -> Result<Tensor> {
    let gt = linear(g, x, gate, None)?;
    let u = linear(g, x, up, None)?;
    let a = match act {
        crate::models::arch::spec::Activation::Silu => g.swiglu(gt, u)?,
        crate::models::arch::spec::Activation::GeluTanh => g.geglu(gt, u)?,
    };
    linear(g, a, down, None)
}
