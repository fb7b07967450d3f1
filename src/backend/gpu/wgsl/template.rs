//! Template helpers every WGSL family uses: token substitution and compute types.

use crate::dtype::DType;

/// Replaces each `{{NAME}}` of a template. Every token of a template is ours: one left unreplaced is a bug in
/// webtensor, caught by the naga test over every variant.
pub(crate) fn render(template: &str, subs: &[(&str, String)]) -> String {
    let mut s = template.to_string();
    for (k, v) in subs {
        s = s.replace(&format!("{{{{{k}}}}}"), v);
    }
    debug_assert!(!s.contains("{{"), "unreplaced token in WGSL template:\n{s}");
    s
}

/// The WGSL scalar type an element is computed in: f32 for float tensors, i32 for integer ones.
pub(crate) fn compute_type(d: DType) -> &'static str {
    if d == DType::I32 {
        "i32"
    } else {
        "f32"
    }
}
