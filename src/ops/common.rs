//! What every op table shares: accepted dtypes and WGSL text helpers.

/// Which element types an op accepts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Accepts {
    /// f32 and f16 only.
    Float,
    /// f32, f16 and i32 (integer arithmetic wraps, as in WGSL and two's-complement hardware).
    FloatOrInt,
}

impl Accepts {
    /// Whether a tensor of `dtype` is accepted.
    pub fn dtype(self, dtype: crate::dtype::DType) -> bool {
        dtype.is_float() || (self == Accepts::FloatOrInt && dtype == crate::dtype::DType::I32)
    }
}

/// Replaces `{x}`, `{a}`, `{b}` (and `{y}`) in a WGSL expression template.
pub(crate) fn fill(template: &str, subs: &[(&str, &str)]) -> String {
    let mut s = template.to_string();
    for (k, v) in subs {
        s = s.replace(&format!("{{{k}}}"), v);
    }
    s
}

/// The WGSL literal of an f32 constant: its bits, so every value (including -0, inf and NaN) round-trips.
pub(crate) fn wgsl_f32(bits: u32) -> String {
    format!("bitcast<f32>({bits:#x}u)")
}
