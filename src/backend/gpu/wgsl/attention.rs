//! WGSL of rope (`shaders/rope.wgsl`) and flash attention (`shaders/attention.wgsl`, `attention_combine.wgsl`).

use super::template::{compute_type, render};
use crate::backend::gpu::kernel::{KernelKey, KernelKind};

const ROPE: &str = include_str!("../../../../shaders/rope.wgsl");
const ATTENTION: &str = include_str!("../../../../shaders/attention.wgsl");
const COMBINE: &str = include_str!("../../../../shaders/attention_combine.wgsl");

pub(super) fn wgsl(key: &KernelKey, bindings: String) -> String {
    let out_c = compute_type(key.out).to_string();
    match key.kind {
        KernelKind::Rope => render(ROPE, &[("BINDINGS", bindings), ("OUT_C", out_c)]),
        KernelKind::AttentionCombine { dv, dyn_len } => {
            let subs = [
                ("BINDINGS", bindings),
                ("OUT_C", out_c),
                ("DV", dv.to_string()),
                ("LENGTH_FN", length_fn(dyn_len, false)),
            ];
            render(COMBINE, &subs)
        }
        KernelKind::Attention { d, dv, br, bc, partial, mask, dyn_len } => {
            // the mask's and the length's accessors exist only in the variants that bind them
            let mask_fn = if mask {
                "fn mask_at(b: u32, h: u32, t: u32, s: u32) -> f32 {\n    let st = P.mask_strides;\n    \
                 return f32(ld_mask(P.mask_offset + b * st.x + h * st.y + t * st.z + s * st.w));\n}"
            } else {
                "fn mask_at(b: u32, h: u32, t: u32, s: u32) -> f32 {\n    return 0.0;\n}"
            };
            let n = |v: u32| v.to_string();
            let subs = [
                ("BINDINGS", bindings),
                ("OUT_C", out_c),
                ("BR", n(br)),
                ("BC", n(bc)),
                ("D", n(d)),
                ("DV", n(dv)),
                ("PARTIAL", partial.to_string()),
                ("Q_SHARED", n(br * d)),
                ("K_SHARED", n(bc * d)),
                ("V_SHARED", n(bc * dv)),
                ("P_SHARED", n(br * bc)),
                ("LENGTH_FN", length_fn(dyn_len, true)),
                ("FIN_STORE", fin_store(key, partial)),
                ("MASK_FN", mask_fn.into()),
            ];
            render(ATTENTION, &subs)
        }
        _ => unreachable!("attention::wgsl for {:?}", key.kind),
    }
}

/// In a split variant: the final output's store when the length reaches only the first split.
fn fin_store(key: &KernelKey, partial: bool) -> String {
    if !partial {
        return String::new();
    }
    let c = compute_type(*key.ins.last().expect("the final output's dtype"));
    format!(
        "if ((L + P.split_len - 1u) / P.split_len <= 1u) {{\n                    let l = l_s[r];\n                    \
         st_fin(((b * T + t) * P.h + hi) * ndv + d, {c}(select(0.0, acc[j] / l, l > 0.0)));\n                }}"
    )
}

/// `kv_length()`: the run-time length (clamped at 0) where the variant binds one, else the static length. With
/// `uniform`, the run-time length goes through `workgroupUniformLoad`, so that loops bounded by it may hold
/// barriers: a value read from a storage buffer is not uniform to WGSL's uniformity analysis (Tint rejects the
/// kernel; naga does not check), one loaded that way is. That form must be called in uniform control flow.
fn length_fn(dyn_len: bool, uniform: bool) -> String {
    if dyn_len && uniform {
        "var<workgroup> kv_length_s: u32;\n\nfn kv_length() -> u32 {\n    \
         // every invocation stores the same value\n    kv_length_s = u32(max(ld_kv(P.kv_len_offset), 0));\n    \
         return workgroupUniformLoad(&kv_length_s);\n}"
            .into()
    } else if dyn_len {
        "fn kv_length() -> u32 {\n    return u32(max(ld_kv(P.kv_len_offset), 0));\n}".into()
    } else {
        "fn kv_length() -> u32 {\n    return P.static_len;\n}".into()
    }
}

/// Workgroup memory of an attention tile, in bytes.
pub(crate) fn shared_bytes(d: u32, dv: u32, br: u32, bc: u32) -> u32 {
    4 * (br * d + bc * d + bc * dv + br * bc + 3 * br)
}
