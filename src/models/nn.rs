//! Building blocks of transformer graphs shared by the model runners: linear layers (any weight dtype, an
//! optional bias), RMS norms, gated feed-forwards (SwiGLU, GeGLU), soft-capping, and attention over a KV cache's
//! views, fused or, where the scores need soft-capping, spelled out as matmul, tanh, masked softmax, matmul.

use crate::error::Result;
use crate::graph::{Attention, Graph, Tensor};
use crate::models::arch::spec::Activation;
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

/// `x · sigmoid(gate)` (the output gates of Qwen3.5's and Qwen3-Next's attention).
pub(crate) fn sigmoid_gate(g: &mut Graph, x: Tensor, gate: Tensor) -> Result<Tensor> {
    let s = g.sigmoid(gate)?;
    g.mul(x, s)
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
    /// A logit per query head in each softmax's denominator ([`Attention::sinks`]); not with `softcap`.
    pub sinks: Option<Tensor>,
}

/// See [`AttendSpec`].
pub(crate) fn attend(g: &mut Graph, q: Tensor, k: Tensor, v: Tensor, spec: &AttendSpec) -> Result<Tensor> {
    let Some(cap) = spec.softcap else {
        let a = Attention {
            scale: spec.scale,
            causal: spec.causal,
            mask: spec.mask,
            kv_len: spec.kv_len,
            sinks: spec.sinks,
        };
        return g.attention(q, k, v, &a);
    };
    if spec.sinks.is_some() {
        let reason = "attention sinks with soft-capped scores (no architecture has both)".into();
        return Err(crate::error::Error::InvalidArgument { op: "attention", reason });
    }
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

/// The gated feed-forward `down(act(gate(x)) · up(x))` with act SiLU (SwiGLU), GELU's tanh form (GeGLU) or
/// gpt-oss's clamped SwiGLU.
pub(crate) fn gated_ffn(
    g: &mut Graph,
    x: Tensor,
    (gate, up, down): (&Resident, &Resident, &Resident),
    act: Activation,
) -> Result<Tensor> {
    let gt = linear(g, x, gate, None)?;
    let u = linear(g, x, up, None)?;
    let a = glu(g, gt, u, act)?;
    linear(g, a, down, None)
}

/// The gate's activation times the up projection (same shapes): `act(gate) · up`, or for
/// [`Activation::SwigluOai`] `g · sigmoid(1.702 · g) · (clamp(up, −7, 7) + 1)` with `g = min(gate, 7)`
/// (ggml_swiglu_oai; elementwise ops the compiler fuses into one kernel).
pub(crate) fn glu(g: &mut Graph, gate: Tensor, up: Tensor, act: Activation) -> Result<Tensor> {
    match act {
        Activation::Silu => g.swiglu(gate, up),
        Activation::GeluTanh => g.geglu(gate, up),
        Activation::SwigluOai => {
            // gelu_quick is x · sigmoid(1.702 · x): gpt-oss's alpha
            let gc = g.clamp(gate, f32::MIN, SWIGLU_OAI_LIMIT)?;
            let glu = g.gelu_quick(gc)?;
            let uc = g.clamp(up, -SWIGLU_OAI_LIMIT, SWIGLU_OAI_LIMIT)?;
            let prod = g.mul(glu, uc)?;
            g.add(prod, glu)
        }
    }
}

/// gpt-oss's SwiGLU clamp (`swiglu_limit`).
const SWIGLU_OAI_LIMIT: f32 = 7.0;
