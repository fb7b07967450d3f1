//! The unary table: elementwise functions of one operand (and up to two f32 parameters `a`, `b`).

use super::common::{fill, wgsl_f32, Accepts};

/// The unary table. `$callback!` receives every row as
/// `(Variant, method, "js name", accepts, |x, a, b| cpu f32 expression, "WGSL of {x} {a} {b}", "doc", params)`,
/// where `params` is the number of f32 parameters (0 for the ops that get a generated `Graph` method).
macro_rules! for_each_unary {
    ($callback:ident) => {
        $callback! {
            (Neg, neg, "neg", FloatOrInt, |x, _a, _b| -x, "(-{x})", "`-x` (`torch.neg`).", 0)
            (Abs, abs, "abs", FloatOrInt, |x, _a, _b| x.abs(), "abs({x})", "`|x|` (`torch.abs`).", 0)
            (Sqr, sqr, "sqr", FloatOrInt, |x, _a, _b| x * x, "({x} * {x})", "`x²` (`torch.square`, ggml_sqr).", 0)
            (Sqrt, sqrt, "sqrt", Float, |x, _a, _b| x.sqrt(), "sqrt({x})",
                "`√x`, NaN for x < 0 (`torch.sqrt`).", 0)
            (Exp, exp, "exp", Float, |x, _a, _b| x.exp(), "exp({x})", "`eˣ` (`torch.exp`).", 0)
            (Log, log, "log", Float, |x, _a, _b| x.ln(), "log({x})",
                "Natural logarithm: −inf at 0, NaN below (`torch.log`).", 0)
            (Sin, sin, "sin", Float, |x, _a, _b| x.sin(), "wt_sin({x})",
                "`sin x` in radians (`torch.sin`); accurate to a few f32 ulps for |x| < 10⁵ on every backend.", 0)
            (Cos, cos, "cos", Float, |x, _a, _b| x.cos(), "wt_cos({x})",
                "`cos x` in radians (`torch.cos`); accurate like [`Graph::sin`](crate::graph::Graph::sin).", 0)
            (Tanh, tanh, "tanh", Float, |x, _a, _b| x.tanh(), "wt_tanh({x})",
                "`tanh x`, finite for every finite x (`torch.tanh`).", 0)
            (Relu, relu, "relu", Float, |x, _a, _b| x.max(0.0), "max({x}, 0.0)", "`max(x, 0)` (`torch.relu`).", 0)
            (Gelu, gelu, "gelu", Float, |x, _a, _b| crate::ops::unary::gelu_tanh(x), "wt_gelu({x})",
                "GELU, tanh form: `0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))` (ggml_gelu, \
                 `torch.nn.functional.gelu(x, approximate=\"tanh\")`).", 0)
            (GeluErf, gelu_erf, "geluErf", Float, |x, _a, _b| 0.5 * x * (1.0 + crate::ops::unary::erf(x * std::f32::consts::FRAC_1_SQRT_2)),
                "wt_gelu_erf({x})",
                "GELU, exact erf form: `0.5·x·(1 + erf(x/√2))` (ggml_gelu_erf, PyTorch's default `gelu`).", 0)
            (GeluQuick, gelu_quick, "geluQuick", Float, |x, _a, _b| x * crate::ops::unary::sigmoid(1.702 * x),
                "wt_gelu_quick({x})", "Quick GELU: `x·σ(1.702·x)` (ggml_gelu_quick).", 0)
            (Silu, silu, "silu", Float, |x, _a, _b| x * crate::ops::unary::sigmoid(x), "wt_silu({x})",
                "`x·σ(x)` (`torch.nn.functional.silu`, ggml_silu).", 0)
            (Sigmoid, sigmoid, "sigmoid", Float, |x, _a, _b| crate::ops::unary::sigmoid(x), "wt_sigmoid({x})",
                "`1 / (1 + e⁻ˣ)`, stable for large |x| (`torch.sigmoid`).", 0)
            (Elu, elu, "elu", Float, |x, _a, _b| if x > 0.0 { x } else { x.exp_m1() }, "wt_elu({x})",
                "`x` for x > 0, else `eˣ − 1` (`torch.nn.functional.elu` with α = 1, ggml_elu).", 0)
            (Softplus, softplus, "softplus", Float, |x, _a, _b| crate::ops::unary::softplus(x), "wt_softplus({x})",
                "`log(1 + eˣ)`, computed stably for every x (`torch.nn.functional.softplus` with β = 1).", 0)
            (Scale, scale, "scale", Float, |x, a, _b| x * a, "({x} * {a})",
                "`x · s` (ggml_scale); `s` is the op's parameter.", 1)
            (Clamp, clamp, "clamp", Float, |x, a, b| x.max(a).min(b), "min(max({x}, {a}), {b})",
                "`min(max(x, lo), hi)` (`torch.clamp`); NaN stays NaN on the CPU.", 2)
        }
    };
}
pub(crate) use for_each_unary;

macro_rules! define_unary {
    ($(($var:ident, $method:ident, $js:literal, $acc:ident, |$x:ident, $a:ident, $b:ident| $cpu:expr,
        $wgsl:literal, $doc:literal, $params:literal))*) => {
        /// Elementwise functions of one operand, computed in f32 and rounded once to the output dtype. Each
        /// matches the PyTorch function of the same name; see the [`Graph`](crate::Graph) method of each.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum UnaryOp {
            $(#[doc = $doc] $var,)*
        }

        impl UnaryOp {
            /// Every unary op, in table order.
            pub const ALL: &'static [UnaryOp] = &[$(UnaryOp::$var),*];

            /// The PyTorch-style name (`gelu_erf`), as in error messages and `Graph::unary_by_name`.
            pub fn name(self) -> &'static str {
                match self { $(UnaryOp::$var => stringify!($method),)* }
            }

            /// The element types the op accepts.
            pub fn accepts(self) -> Accepts {
                match self { $(UnaryOp::$var => Accepts::$acc,)* }
            }

            /// How many f32 parameters the op takes (`scale`: 1, `clamp`: 2, the rest 0).
            pub fn params(self) -> usize {
                match self { $(UnaryOp::$var => $params,)* }
            }

            /// The op's f32 value (the CPU backend's function) at every element of `xs` in place, with parameters
            /// `a`, `b`: one loop per op, which the compiler vectorizes where the op's function allows (eight lanes
            /// and fused multiply-adds where the CPU has AVX2 and FMA: the same operations, so the same bits).
            pub(crate) fn eval_slice(self, xs: &mut [f32], a: f32, b: f32) {
                #[cfg(target_arch = "x86_64")]
                if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
                    // SAFETY: the CPU has the features (checked above)
                    return unsafe { self.eval_slice_avx2(xs, a, b) };
                }
                self.eval_slice_inline(xs, a, b)
            }

            /// [`UnaryOp::eval_slice`] compiled for AVX2 and FMA.
            ///
            /// # Safety
            /// The CPU has AVX2 and FMA.
            #[cfg(target_arch = "x86_64")]
            #[target_feature(enable = "avx2,fma")]
            unsafe fn eval_slice_avx2(self, xs: &mut [f32], a: f32, b: f32) {
                self.eval_slice_inline(xs, a, b)
            }

            #[allow(unused_variables)]
            #[inline(always)]
            fn eval_slice_inline(self, xs: &mut [f32], a: f32, b: f32) {
                match self {
                    $(UnaryOp::$var => {
                        let f = |$x: f32, $a: f32, $b: f32| -> f32 { $cpu };
                        xs.iter_mut().for_each(|x| *x = f(*x, a, b));
                    })*
                }
            }

            /// The WGSL expression template over `{x}`, `{a}` and `{b}` (functions from `src/backend/gpu/wgsl/common.wgsl`).
            pub(crate) fn wgsl_template(self) -> &'static str {
                match self { $(UnaryOp::$var => $wgsl,)* }
            }
        }

        impl std::str::FromStr for UnaryOp {
            type Err = crate::error::Error;
            fn from_str(s: &str) -> crate::error::Result<UnaryOp> {
                UnaryOp::ALL.iter().copied().find(|op| op.name() == s).ok_or_else(|| crate::error::Error::InvalidArgument {
                    op: "unary",
                    reason: format!("unknown unary op '{s}'"),
                })
            }
        }
    };
}
for_each_unary!(define_unary);

impl UnaryOp {
    /// The WGSL expression of the op applied to `x`, with its parameters (f32 bits) as constants.
    pub(crate) fn wgsl(self, x: &str, a: u32, b: u32) -> String {
        fill(self.wgsl_template(), &[("x", x), ("a", &wgsl_f32(a)), ("b", &wgsl_f32(b))])
    }

    /// The i32 value of an integer op (wrapping, as WGSL and hardware do); `None` for float-only ops.
    pub(crate) fn eval_i32(self, x: i32) -> Option<i32> {
        Some(match self {
            UnaryOp::Neg => x.wrapping_neg(),
            UnaryOp::Abs => x.wrapping_abs(),
            UnaryOp::Sqr => x.wrapping_mul(x),
            _ => return None,
        })
    }
}

/// `erf x` in f32 as `x·P(x²)/Q(x²)` with x clamped to ±3.92 (past it, ±1: erf rounds to within an ulp of ±1 in f32): a rational
/// least-squares fit (relative error 4.7e-9 in exact arithmetic; within 6 f32 ulps, 3.6e-7 relative, as evaluated
/// here, against `math.erf` over 2·10⁵ points of [0, 3.92]). Branch-free, so loops over it vectorize, where
/// libm's `erff` is a call per element; NaN stays NaN.
#[inline(always)]
pub(crate) fn erf(x: f32) -> f32 {
    const P: [f32; 7] = [
        std::f32::consts::FRAC_2_SQRT_PI,
        0.185_071_66,
        0.054_214_366,
        0.003_833_366_8,
        0.000_375_781_9,
        4.583_752e-6,
        -1.265_826_3e-8,
    ];
    const Q: [f32; 6] = [1.0, 0.497_348_9, 0.113_828_73, 0.015_415_997, 0.001_299_163_4, 6.216_145e-5];
    let c = x.clamp(-3.92, 3.92);
    let t = c * c;
    let p = P.iter().rev().fold(0.0f32, |acc, &k| acc * t + k);
    let q = Q.iter().rev().fold(0.0f32, |acc, &k| acc * t + k);
    // past the clamp erf rounds to ±1, which the fit reaches only to within an ulp
    if x.abs() >= 3.92 {
        1f32.copysign(x)
    } else {
        c * p / q
    }
}

/// `1 / (1 + e⁻ˣ)`, evaluated so that neither side overflows (`e^-|x|` is at most 1), without a branch or a
/// library call, so that loops over it vectorize.
pub(crate) fn sigmoid(x: f32) -> f32 {
    let e = exp(-x.abs());
    let s = 1.0 / (1.0 + e);
    if x >= 0.0 {
        s
    } else {
        e * s
    }
}

/// `eˣ` in f32 within 2 ulps of the exact value (Cephes' `expf`: `x = k·ln 2 + r` with `ln 2` in two parts, a
/// degree-6 polynomial for `eʳ` on |r| ≤ ln 2 / 2, then `2ᵏ` as two powers of two by their exponent bits, so that
/// subnormal results and `k` = 128 come out right); 0 below −103.98, ∞ above 88.72283 (ln of f32's largest), NaN
/// kept. Branch-free and without a library call, so that loops over it vectorize (a call to libm's `expf` per
/// value was most of a SiLU epilogue's and a softmax's time).
#[inline(always)]
pub(crate) fn exp(x: f32) -> f32 {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    // round to nearest by the 1.5·2²³ trick: vector adds only
    const ROUND: f32 = 12_582_912.0;
    let c = x.clamp(-103.98, 88.722_83);
    let t = c * LOG2E + ROUND;
    let k = t - ROUND;
    // k as an integer from the bits (t lies in [2²³, 2²⁴), where its ulp is 1): a vector integer subtraction,
    // where `k as i32` (saturating) was a scalar conversion per value
    let ki = t.to_bits().wrapping_sub(ROUND.to_bits()) as i32;
    let r = c - k * 0.693_359_4 - k * -2.121_944_4e-4;
    let p = 1.987_569_2e-4;
    let p = p * r + 1.398_2e-3;
    let p = p * r + 8.333_452e-3;
    let p = p * r + 4.166_579_6e-2;
    let p = p * r + 1.666_666_5e-1;
    let p = p * r + 0.5;
    let y = p * (r * r) + r + 1.0;
    let pow2 = |e: i32| f32::from_bits((e.wrapping_add(127) as u32) << 23);
    let v = y * pow2(ki >> 1) * pow2(ki.wrapping_sub(ki >> 1));
    if x < -103.98 {
        0.0
    } else if x > 88.722_83 {
        f32::INFINITY
    } else {
        v
    }
}

/// GELU's tanh form; `x³` may overflow to inf, where tanh saturates and the result is `x` (or −0).
pub(crate) fn gelu_tanh(x: f32) -> f32 {
    let c = 0.797_884_6_f32; // √(2/π)
    0.5 * x * (1.0 + (c * (x + 0.044715 * x * x * x)).tanh())
}

/// `log(1 + eˣ) = max(x, 0) + log1p(e^-|x|)`.
pub(crate) fn softplus(x: f32) -> f32 {
    x.max(0.0) + (-x.abs()).exp().ln_1p()
}

#[cfg(test)]
mod tests {
    /// The vector exp against f64's at 2·10⁶ points over [−87.3, 88.72] (normal results) and the edges: within
    /// 2 f32 ulps (relative 2.4e-7) everywhere; subnormals within 2⁻¹⁴⁹; 0, ∞ and NaN where they belong.
    #[test]
    fn exp_is_within_two_ulps() {
        let n = 2_000_000;
        let mut worst = 0f64;
        for i in 0..=n {
            let x = -87.3 + (88.72 + 87.3) * i as f64 / n as f64;
            let (got, want) = (super::exp(x as f32) as f64, (x as f32 as f64).exp());
            worst = worst.max(((got - want) / want).abs());
        }
        assert!(worst <= 2.4e-7, "worst relative error {worst:e}");
        assert_eq!(super::exp(0.0), 1.0);
        assert_eq!(super::exp(f32::NEG_INFINITY), 0.0);
        for x in [-90.0f32, -100.0, -103.9] {
            assert!((super::exp(x) as f64 - (x as f64).exp()).abs() <= 2f64.powi(-149), "{x}");
        }
        assert_eq!(super::exp(-104.0), 0.0);
        assert_eq!(super::exp(89.0), f32::INFINITY);
        assert_eq!(super::exp(f32::INFINITY), f32::INFINITY);
        assert!(super::exp(f32::NAN).is_nan());
        assert!((super::sigmoid(-30.0) - 9.357623e-14).abs() < 1e-19 && super::sigmoid(30.0) == 1.0);
        assert!(super::sigmoid(f32::NAN).is_nan());
    }

    /// The rational erf against libm's `erff` (correctly rounded to within 1 ulp), at 10⁶ points over
    /// [−4.5, 4.5] and the edges: within 7 f32 ulps of it everywhere; odd; ±1 past the clamp; NaN kept.
    #[test]
    fn erf_is_within_a_few_ulps() {
        let ulp = |v: f32| (f32::from_bits(v.abs().to_bits() + 1) - v.abs()).max(f32::MIN_POSITIVE);
        let mut worst = 0f32;
        for i in 0..=1_000_000 {
            let x = -4.5 + 9.0 * i as f32 / 1e6;
            let (got, want) = (super::erf(x), libm::erff(x));
            worst = worst.max((got - want).abs() / ulp(want));
            assert_eq!(super::erf(-x), -got, "odd at {x}");
        }
        assert!(worst <= 7.0, "erf: {worst} ulps");
        assert_eq!((super::erf(f32::INFINITY), super::erf(f32::NEG_INFINITY)), (1.0, -1.0));
        assert_eq!(super::erf(0.0), 0.0);
        assert!(super::erf(f32::NAN).is_nan());
        assert!(super::erf(1e-30) > 0.0);
    }
}
