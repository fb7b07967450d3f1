//! f64 reference implementation ("oracle") of tensor ops with numpy / PyTorch
//! semantics. Used by the test suite to check the CPU and GPU backends.
//!
//! Everything here is written for obviousness, not speed: plain loops over
//! row-major contiguous `f64` buffers with generic index arithmetic, so every
//! rank (including 0) works. Shapes are in numpy order (outermost first).
//! Only `std` is used.
#![allow(dead_code)]

/// A dense, row-major (C-contiguous) f64 array.
#[derive(Clone, Debug, PartialEq)]
pub struct Arr {
    pub shape: Vec<usize>,
    pub data: Vec<f64>,
}

/// Row-major strides of `shape` (in elements).
fn strides(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1usize; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * shape[i + 1];
    }
    s
}

/// Multi-index of the flat row-major position `flat` in `shape`.
fn unravel(mut flat: usize, shape: &[usize]) -> Vec<usize> {
    let mut idx = vec![0usize; shape.len()];
    for i in (0..shape.len()).rev() {
        idx[i] = flat % shape[i];
        flat /= shape[i];
    }
    idx
}

/// Flat row-major position of the multi-index `idx` in `shape` (bounds-checked).
fn ravel(idx: &[usize], shape: &[usize]) -> usize {
    assert_eq!(idx.len(), shape.len(), "index rank {:?} vs shape {:?}", idx, shape);
    let mut flat = 0;
    for (i, (&k, &d)) in idx.iter().zip(shape).enumerate() {
        assert!(k < d, "index {:?} out of bounds for shape {:?} (axis {})", idx, shape, i);
        flat = flat * d + k;
    }
    flat
}

fn product(shape: &[usize]) -> usize {
    shape.iter().product()
}

impl Arr {
    /// Wraps `data` (row-major). Panics unless `data.len()` equals the product of `shape`.
    pub fn new(shape: &[usize], data: Vec<f64>) -> Arr {
        assert_eq!(data.len(), product(shape), "data length vs shape {:?}", shape);
        Arr { shape: shape.to_vec(), data }
    }

    /// Array whose element at flat (row-major) index `i` is `f(i)`.
    pub fn from_fn(shape: &[usize], f: impl Fn(usize) -> f64) -> Arr {
        Arr::new(shape, (0..product(shape)).map(f).collect())
    }

    pub fn numel(&self) -> usize {
        self.data.len()
    }

    /// Element at multi-index `idx` (one entry per axis, bounds-checked).
    pub fn get(&self, idx: &[usize]) -> f64 {
        self.data[ravel(idx, &self.shape)]
    }

    /// Same data, new shape (element count must match).
    pub fn reshape(&self, shape: &[usize]) -> Arr {
        Arr::new(shape, self.data.clone())
    }

    /// `torch.permute`: output axis `i` is input axis `dims[i]`.
    pub fn permute(&self, dims: &[usize]) -> Arr {
        let r = self.shape.len();
        assert_eq!(dims.len(), r, "permute dims {:?} vs shape {:?}", dims, self.shape);
        let mut seen = vec![false; r];
        for &d in dims {
            assert!(d < r && !seen[d], "permute dims {:?} is not a permutation", dims);
            seen[d] = true;
        }
        let out_shape: Vec<usize> = dims.iter().map(|&d| self.shape[d]).collect();
        Arr::from_fn(&out_shape, |flat| {
            let out_idx = unravel(flat, &out_shape);
            let mut in_idx = vec![0usize; r];
            for i in 0..r {
                in_idx[dims[i]] = out_idx[i];
            }
            self.get(&in_idx)
        })
    }

    /// Swaps axes `a` and `b` (`torch.transpose`).
    pub fn transpose(&self, a: usize, b: usize) -> Arr {
        let mut dims: Vec<usize> = (0..self.shape.len()).collect();
        dims.swap(a, b);
        self.permute(&dims)
    }

    /// `x[..., start:end, ...]` along `axis` (requires `start <= end <= shape[axis]`).
    pub fn slice(&self, axis: usize, start: usize, end: usize) -> Arr {
        assert!(axis < self.shape.len(), "slice axis {} of shape {:?}", axis, self.shape);
        assert!(start <= end && end <= self.shape[axis], "slice {}..{} of dim {}", start, end, self.shape[axis]);
        let mut out_shape = self.shape.clone();
        out_shape[axis] = end - start;
        Arr::from_fn(&out_shape, |flat| {
            let mut idx = unravel(flat, &out_shape);
            idx[axis] += start;
            self.get(&idx)
        })
    }

    /// `numpy.broadcast_to`: shapes are right-aligned, size-1 axes expand and
    /// leading axes may be added. Panics if not broadcastable.
    pub fn broadcast_to(&self, shape: &[usize]) -> Arr {
        let r = self.shape.len();
        assert!(r <= shape.len(), "cannot broadcast {:?} to {:?}", self.shape, shape);
        let lead = shape.len() - r;
        for i in 0..r {
            let (s, t) = (self.shape[i], shape[lead + i]);
            assert!(s == t || s == 1, "cannot broadcast {:?} to {:?}", self.shape, shape);
        }
        Arr::from_fn(shape, |flat| {
            let out_idx = unravel(flat, shape);
            let in_idx: Vec<usize> = (0..r).map(|i| if self.shape[i] == 1 { 0 } else { out_idx[lead + i] }).collect();
            self.get(&in_idx)
        })
    }

    /// Elementwise `f`.
    pub fn map(&self, f: impl Fn(f64) -> f64) -> Arr {
        Arr::new(&self.shape, self.data.iter().map(|&v| f(v)).collect())
    }

    /// Number of rows along the last axis and the row length (rank must be >= 1).
    fn rows(&self) -> (usize, usize) {
        assert!(!self.shape.is_empty(), "last-axis op on a rank-0 array");
        let n = *self.shape.last().unwrap();
        (product(&self.shape[..self.shape.len() - 1]), n)
    }

    /// Applies `f(row) -> new row` to every last-axis row; `out_n` is the new row length.
    fn map_rows(&self, out_n: usize, f: impl Fn(&[f64]) -> Vec<f64>) -> Arr {
        let (outer, n) = self.rows();
        let mut data = Vec::with_capacity(outer * out_n);
        for r in 0..outer {
            let out = f(&self.data[r * n..(r + 1) * n]);
            assert_eq!(out.len(), out_n);
            data.extend(out);
        }
        let mut shape = self.shape.clone();
        *shape.last_mut().unwrap() = out_n;
        Arr::new(&shape, data)
    }
}

/// numpy broadcasting rule: right-align, each pair of dims must be equal or
/// one of them 1. Panics if incompatible.
pub fn broadcast_shapes(a: &[usize], b: &[usize]) -> Vec<usize> {
    let r = a.len().max(b.len());
    (0..r)
        .map(|i| {
            // dim i of the result, counting from the left of the longer shape
            let da = if i + a.len() >= r { a[i + a.len() - r] } else { 1 };
            let db = if i + b.len() >= r { b[i + b.len() - r] } else { 1 };
            assert!(da == db || da == 1 || db == 1, "incompatible shapes {:?} and {:?}", a, b);
            if da == 1 {
                db
            } else {
                da
            }
        })
        .collect()
}

/// Elementwise `f(a, b)` with numpy broadcasting.
pub fn binary(a: &Arr, b: &Arr, f: impl Fn(f64, f64) -> f64) -> Arr {
    let shape = broadcast_shapes(&a.shape, &b.shape);
    let (a, b) = (a.broadcast_to(&shape), b.broadcast_to(&shape));
    Arr::new(&shape, a.data.iter().zip(&b.data).map(|(&x, &y)| f(x, y)).collect())
}

/// `numpy.matmul`: `[..., M, K] @ [..., K, N] -> [..., M, N]` with broadcast
/// batch dims. A 1-D lhs gets a 1 prepended (then removed from the result);
/// a 1-D rhs gets a 1 appended (then removed). Sums are accumulated in order k = 0..K.
pub fn matmul(a: &Arr, b: &Arr) -> Arr {
    assert!(!a.shape.is_empty() && !b.shape.is_empty(), "matmul of a rank-0 array");
    let a_vec = a.shape.len() == 1;
    let b_vec = b.shape.len() == 1;
    let a2 = if a_vec { a.reshape(&[1, a.shape[0]]) } else { a.clone() };
    let b2 = if b_vec { b.reshape(&[b.shape[0], 1]) } else { b.clone() };
    let (ra, rb) = (a2.shape.len(), b2.shape.len());
    let (m, k) = (a2.shape[ra - 2], a2.shape[ra - 1]);
    let (k2, n) = (b2.shape[rb - 2], b2.shape[rb - 1]);
    assert_eq!(k, k2, "matmul inner dims: {:?} @ {:?}", a.shape, b.shape);
    let batch = broadcast_shapes(&a2.shape[..ra - 2], &b2.shape[..rb - 2]);
    let nb = product(&batch);
    let a3 = a2.broadcast_to(&[&batch[..], &[m, k]].concat());
    let b3 = b2.broadcast_to(&[&batch[..], &[k, n]].concat());
    let mut out = vec![0.0; nb * m * n];
    for bi in 0..nb {
        for i in 0..m {
            for j in 0..n {
                let mut acc = 0.0;
                for p in 0..k {
                    acc += a3.data[bi * m * k + i * k + p] * b3.data[bi * k * n + p * n + j];
                }
                out[bi * m * n + i * n + j] = acc;
            }
        }
    }
    let mut shape = batch.clone();
    if !a_vec {
        shape.push(m);
    }
    if !b_vec {
        shape.push(n);
    }
    Arr::new(&shape, out)
}

/// Softmax over the last axis of `x * scale + mask` (mask broadcast to x's shape).
/// Max-subtraction form. Deviation from torch: a row whose maximum is -inf
/// (e.g. fully masked) yields all zeros instead of NaN.
pub fn softmax(x: &Arr, mask: Option<&Arr>, scale: f64) -> Arr {
    let mut z = x.map(|v| v * scale);
    if let Some(m) = mask {
        let m = m.broadcast_to(&x.shape);
        for (zi, mi) in z.data.iter_mut().zip(&m.data) {
            *zi += mi;
        }
    }
    let n = z.rows().1;
    z.map_rows(n, |row| {
        let max = row.iter().fold(f64::NEG_INFINITY, |a, &v| if v > a || v.is_nan() { v } else { a });
        if max == f64::NEG_INFINITY {
            return vec![0.0; row.len()];
        }
        let e: Vec<f64> = row.iter().map(|&v| (v - max).exp()).collect();
        let s: f64 = e.iter().sum();
        e.iter().map(|&v| v / s).collect()
    })
}

/// Multiplies `y` (shape of x) by `w` broadcast onto that shape, if present.
fn apply_affine(y: Arr, w: Option<&Arr>, b: Option<&Arr>) -> Arr {
    let mut y = y;
    if let Some(w) = w {
        let w = w.broadcast_to(&y.shape);
        y.data.iter_mut().zip(&w.data).for_each(|(v, &k)| *v *= k);
    }
    if let Some(b) = b {
        let b = b.broadcast_to(&y.shape);
        y.data.iter_mut().zip(&b.data).for_each(|(v, &k)| *v += k);
    }
    y
}

/// RMSNorm over the last axis: `x / sqrt(mean(x^2) + eps) * weight`.
pub fn rms_norm(x: &Arr, weight: Option<&Arr>, eps: f64) -> Arr {
    let n = x.rows().1;
    let y = x.map_rows(n, |row| {
        let ms = row.iter().map(|v| v * v).sum::<f64>() / n as f64;
        let inv = 1.0 / (ms + eps).sqrt();
        row.iter().map(|v| v * inv).collect()
    });
    apply_affine(y, weight, None)
}

/// `torch.nn.functional.layer_norm` over the last axis (biased variance):
/// `(x - mean) / sqrt(var + eps) * weight + bias`.
pub fn layer_norm(x: &Arr, weight: Option<&Arr>, bias: Option<&Arr>, eps: f64) -> Arr {
    let n = x.rows().1;
    let y = x.map_rows(n, |row| {
        let mean = row.iter().sum::<f64>() / n as f64;
        let var = row.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / n as f64;
        let inv = 1.0 / (var + eps).sqrt();
        row.iter().map(|v| (v - mean) * inv).collect()
    });
    apply_affine(y, weight, bias)
}

/// Sum over the last axis, keepdim (shape `[..., 1]`).
pub fn sum_last(x: &Arr) -> Arr {
    x.map_rows(1, |row| vec![row.iter().sum()])
}

/// Mean over the last axis, keepdim.
pub fn mean_last(x: &Arr) -> Arr {
    x.map_rows(1, |row| vec![row.iter().sum::<f64>() / row.len() as f64])
}

/// Index of the first maximum of a non-empty row; NaN counts as maximal (numpy).
fn argmax_row(row: &[f64]) -> usize {
    assert!(!row.is_empty(), "max/argmax of an empty row");
    let mut best = 0;
    for (i, &v) in row.iter().enumerate() {
        if row[best].is_nan() {
            break;
        }
        if v > row[best] || v.is_nan() {
            best = i;
        }
    }
    best
}

/// Max over the last axis, keepdim (NaN propagates, like numpy.max).
pub fn max_last(x: &Arr) -> Arr {
    x.map_rows(1, |row| vec![row[argmax_row(row)]])
}

/// Argmax over the last axis, keepdim, as f64; first occurrence wins (numpy.argmax).
pub fn argmax_last(x: &Arr) -> Arr {
    x.map_rows(1, |row| vec![argmax_row(row) as f64])
}

/// `torch.nn.functional.embedding`: `table` is `[V, D]`, `idx` holds
/// integer-valued indices in `0..V`; output shape is `idx.shape + [D]`.
pub fn get_rows(table: &Arr, idx: &Arr) -> Arr {
    assert_eq!(table.shape.len(), 2, "get_rows table must be [V, D]");
    let (v, d) = (table.shape[0], table.shape[1]);
    let mut data = Vec::with_capacity(idx.numel() * d);
    for &f in &idx.data {
        assert!(f >= 0.0 && f.fract() == 0.0 && (f as usize) < v, "bad row index {} (V = {})", f, v);
        let r = f as usize;
        data.extend_from_slice(&table.data[r * d..(r + 1) * d]);
    }
    let mut shape = idx.shape.clone();
    shape.push(d);
    Arr::new(&shape, data)
}

/// `numpy.concatenate((a, b), axis)`.
pub fn concat(a: &Arr, b: &Arr, axis: usize) -> Arr {
    assert_eq!(a.shape.len(), b.shape.len(), "concat rank mismatch");
    assert!(axis < a.shape.len(), "concat axis out of range");
    for i in 0..a.shape.len() {
        assert!(i == axis || a.shape[i] == b.shape[i], "concat shapes {:?} {:?}", a.shape, b.shape);
    }
    let mut shape = a.shape.clone();
    shape[axis] += b.shape[axis];
    Arr::from_fn(&shape, |flat| {
        let mut idx = unravel(flat, &shape);
        if idx[axis] < a.shape[axis] {
            a.get(&idx)
        } else {
            idx[axis] -= a.shape[axis];
            b.get(&idx)
        }
    })
}

// ---------------------------------------------------------------- scalars

const FRAC_2_SQRT_PI: f64 = std::f64::consts::FRAC_2_SQRT_PI;

/// erf(x) to ~1e-15. For |x| < 2 uses the all-positive series
/// `erf(x) = 2/sqrt(pi) * exp(-x^2) * sum_n 2^n x^(2n+1) / (1*3*...*(2n+1))`
/// (no cancellation); otherwise `sign(x) * (1 - erfc(|x|))`.
pub fn erf(x: f64) -> f64 {
    if x.is_nan() {
        return x;
    }
    if x.abs() < 2.0 {
        let x2 = x * x;
        let (mut term, mut sum) = (x, x);
        for n in 1..200 {
            term *= 2.0 * x2 / (2 * n + 1) as f64;
            sum += term;
            if term.abs() <= 1e-17 * sum.abs() {
                break;
            }
        }
        FRAC_2_SQRT_PI * (-x2).exp() * sum
    } else {
        x.signum() * (1.0 - erfc(x.abs()))
    }
}

/// erfc(x) = 1 - erf(x), accurate in relative terms for large positive x.
/// For x >= 1 uses Laplace's continued fraction
/// `erfc(x) = exp(-x^2)/sqrt(pi) / (x + (1/2)/(x + 1/(x + (3/2)/(x + ...))))`
/// evaluated backwards from a fixed depth of 200 (converged to ~4e-16 relative
/// at x = 1, faster beyond); otherwise `1 - erf(x)` (little cancellation there).
pub fn erfc(x: f64) -> f64 {
    if x.is_nan() {
        return x;
    }
    if x < 1.0 {
        return 1.0 - erf(x);
    }
    let mut t = x;
    for k in (1..=200).rev() {
        t = x + (k as f64 / 2.0) / t;
    }
    (-x * x).exp() / std::f64::consts::PI.sqrt() / t
}

/// GELU, tanh approximation: `0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))`.
pub fn gelu_tanh(x: f64) -> f64 {
    let c = (2.0 / std::f64::consts::PI).sqrt();
    0.5 * x * (1.0 + (c * (x + 0.044715 * x * x * x)).tanh())
}

/// Exact GELU: `0.5 x (1 + erf(x / sqrt 2))`, computed as `0.5 x erfc(-x / sqrt 2)`
/// so negative x keeps full relative precision.
pub fn gelu_erf(x: f64) -> f64 {
    0.5 * x * erfc(-x / std::f64::consts::SQRT_2)
}

/// Logistic sigmoid, stable for any finite |x| (never evaluates exp of a large positive).
pub fn sigmoid(x: f64) -> f64 {
    if x >= 0.0 {
        1.0 / (1.0 + (-x).exp())
    } else {
        let e = x.exp();
        e / (1.0 + e)
    }
}

/// SiLU / swish: `x * sigmoid(x)`.
pub fn silu(x: f64) -> f64 {
    x * sigmoid(x)
}

/// `max(x, 0)`; NaN propagates (torch.relu).
/// An f64 unary function of `x` with parameters `a`, `b`.
pub type UnaryRef = fn(f64, f64, f64) -> f64;
/// How a test maps `u(i)` ∈ [-1, 1) into an op's interesting inputs.
pub type Domain = fn(f64) -> f64;

/// The f64 reference of a unary table op (by name) with parameters `a`, `b`, and the domain its test inputs are
/// mapped into from `u(i)` ∈ [-1, 1). `None` for an op without a reference here: the suite fails on it, so a new
/// table row cannot go untested.
pub fn unary_reference(name: &str) -> Option<(UnaryRef, Domain)> {
    let id = |x: f64| x;
    Some(match name {
        "neg" => (|x, _, _| -x, id),
        "abs" => (|x, _, _| x.abs(), id),
        "sqr" => (|x, _, _| x * x, id),
        "sqrt" => (|x, _, _| x.sqrt(), |x| x.abs() * 4.0),
        "exp" => (|x, _, _| x.exp(), |x| x * 8.0),
        "log" => (|x, _, _| x.ln(), |x| x.abs() * 100.0 + 1e-3),
        "sin" => (|x, _, _| x.sin(), |x| x * 40.0),
        "cos" => (|x, _, _| x.cos(), |x| x * 40.0),
        "tanh" => (|x, _, _| x.tanh(), |x| x * 6.0),
        "relu" => (|x, _, _| relu(x), id),
        "gelu" => (|x, _, _| gelu_tanh(x), |x| x * 6.0),
        "gelu_erf" => (|x, _, _| gelu_erf(x), |x| x * 6.0),
        "gelu_quick" => (|x, _, _| x * sigmoid(1.702 * x), |x| x * 6.0),
        "silu" => (|x, _, _| silu(x), |x| x * 10.0),
        "sigmoid" => (|x, _, _| sigmoid(x), |x| x * 10.0),
        "elu" => (|x, _, _| if x > 0.0 { x } else { x.exp_m1() }, |x| x * 6.0),
        "softplus" => (|x, _, _| x.max(0.0) + (-x.abs()).exp().ln_1p(), |x| x * 30.0),
        "scale" => (|x, a, _| x * a, id),
        "clamp" => (|x, a, b| x.max(a).min(b), id),
        _ => return None,
    })
}

/// Parameters the unary tests give each op that takes some.
pub fn unary_params(name: &str) -> Vec<f32> {
    match name {
        "scale" => vec![-1.5],
        "clamp" => vec![-0.25, 0.5],
        _ => vec![],
    }
}

pub fn relu(x: f64) -> f64 {
    if x > 0.0 || x.is_nan() {
        x
    } else {
        0.0
    }
}

// ---------------------------------------------------------------- error

/// Normalised mean squared error `sum((o-r)^2) / sum(r^2)` (or the plain
/// `sum((o-r)^2)` when `sum(r^2) == 0`). Positions where both are NaN, or both
/// the same infinity, contribute 0. Any other non-finite mismatch (NaN in `out`
/// where `reference` is finite, infinities that differ, NaN in `reference`
/// only) returns `f64::INFINITY`. Non-finite reference values are excluded
/// from the denominator.
pub fn nmse(out: &[f64], reference: &[f64]) -> f64 {
    assert_eq!(out.len(), reference.len(), "nmse length mismatch");
    let (mut num, mut den) = (0.0, 0.0);
    for (&o, &r) in out.iter().zip(reference) {
        if !(o.is_finite() && r.is_finite()) {
            let same = (o.is_nan() && r.is_nan()) || (o.is_infinite() && o == r);
            if same {
                continue;
            }
            return f64::INFINITY;
        }
        num += (o - r) * (o - r);
        den += r * r;
    }
    if den == 0.0 {
        num
    } else {
        num / den
    }
}

// ---------------------------------------------------------------- inputs

/// Deterministic test input in [-1, 1), exactly representable in f32.
/// `x = seed * 0x9E3779B97F4A7C15 + i` (wrapping), then the standard
/// splitmix64 step: `z = x + 0x9E3779B97F4A7C15`,
/// `z = (z ^ z>>30) * 0xBF58476D1CE4E5B9`, `z = (z ^ z>>27) * 0x94D049BB133111EB`,
/// `z ^= z>>31`. Keep the top 24 bits `b = z >> 40`; return `b / 2^23 - 1`.
pub fn u(i: usize, seed: u64) -> f64 {
    const G: u64 = 0x9E37_79B9_7F4A_7C15;
    let x = seed.wrapping_mul(G).wrapping_add(i as u64);
    let mut z = x.wrapping_add(G);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    (z >> 40) as f64 / (1u64 << 23) as f64 - 1.0
}

/// Rotary position embedding of x `[.., T, H, D]` at positions `pos` as ggml_rope_ext defines it: the extrapolated
/// angle `theta_e = pos · ts^i / factors[i]` with `ts = f32(freq_base^(-2/n_dims))` multiplied in f32 as ggml does
/// (factors 1 where there are none), then in f64: `theta = freq_scale · theta_e`, YaRN's ramp where `ext_factor`
/// is not 0 (pair i below `corr_dims[0]` keeps `theta_e`, above `corr_dims[1]` takes `theta`, linear between, cos
/// and sin scaled by `1 + 0.1 ln(1 / freq_scale)`), cos and sin scaled by `attn_factor`.
pub fn rope(x: &Arr, pos: &Arr, rope: &webtensor::Rope) -> Arr {
    rope_ext(x, pos, None, rope)
}

/// [`rope`] with frequency factors `[n_dims / 2]`.
pub fn rope_ext(x: &Arr, pos: &Arr, factors: Option<&Arr>, rope: &webtensor::Rope) -> Arr {
    let r = x.shape.len();
    let (t, h, d) = (x.shape[r - 3], x.shape[r - 2], x.shape[r - 1]);
    let (n_dims, neox) = (rope.n_dims, rope.mode == webtensor::RopeMode::Neox);
    let ts = rope.freq_base.powf(-2.0 / n_dims as f32);
    let freq_scale = rope.freq_scale as f64;
    let mut out = x.clone();
    for b in 0..x.numel() / (t * h * d) {
        for ti in 0..t {
            for hi in 0..h {
                let base = ((b * t + ti) * h + hi) * d;
                for i in 0..n_dims / 2 {
                    let (a, c) = if neox { (i, i + n_dims / 2) } else { (2 * i, 2 * i + 1) };
                    let mut theta = pos.data[ti] as f32;
                    for _ in 0..i {
                        theta *= ts;
                    }
                    let extrap = theta as f64 / factors.map_or(1.0, |f| f.data[i]);
                    let (mut theta, mut mscale) = (freq_scale * extrap, rope.attn_factor as f64);
                    if rope.ext_factor != 0.0 {
                        let [low, high] = rope.corr_dims.map(f64::from);
                        let ramp = 1.0 - ((i as f64 - low) / (high - low).max(0.001)).clamp(0.0, 1.0);
                        let mix = ramp * rope.ext_factor as f64;
                        theta = theta * (1.0 - mix) + extrap * mix;
                        mscale *= 1.0 + 0.1 * (1.0 / freq_scale).ln();
                    }
                    let (sin, cos) = (theta.sin() * mscale, theta.cos() * mscale);
                    let (x0, x1) = (x.data[base + a], x.data[base + c]);
                    out.data[base + a] = x0 * cos - x1 * sin;
                    out.data[base + c] = x0 * sin + x1 * cos;
                }
            }
        }
    }
    out
}

/// Attention over q `[.., H, T, D]`, k `[.., Hkv, S, D]`, v `[.., Hkv, S, Dv]` (query head h uses K/V head
/// `h / (H / Hkv)`), with an optional additive mask broadcast to `[.., H, T, S]`, the first `len` keys only, and
/// causal masking of query t to keys `s <= len - T + t`; a row with no visible key gives zeros. Output
/// `[.., T, H, Dv]`, in f64.
#[allow(clippy::too_many_arguments)]
pub fn attention(q: &Arr, k: &Arr, v: &Arr, mask: Option<&Arr>, scale: f64, causal: bool, len: usize) -> Arr {
    attention_sinks(q, k, v, (mask, None), scale, causal, len)
}

/// [`attention`] with attention sinks `[H]` where given: head h's softmax has `sinks[h]` as one more logit in its
/// denominator, with no value (Hugging Face's gpt-oss `eager_attention_forward`: the sink as a last column of the
/// scores, dropped after the softmax). A query that sees no key gives zeros.
pub fn attention_sinks(
    q: &Arr,
    k: &Arr,
    v: &Arr,
    (mask, sinks): (Option<&Arr>, Option<&Arr>),
    scale: f64,
    causal: bool,
    len: usize,
) -> Arr {
    let r = q.shape.len();
    let (h, t, d) = (q.shape[r - 3], q.shape[r - 2], q.shape[r - 1]);
    let (hkv, s, dv) = (k.shape[r - 3], k.shape[r - 2], v.shape[r - 1]);
    let batches = q.numel() / (h * t * d);
    let mut full = q.shape.clone();
    full[r - 1] = s;
    let mask = mask.map(|m| m.broadcast_to(&full));
    let mut shape = q.shape[..r - 3].to_vec();
    shape.extend([t, h, dv]);
    let mut out = vec![0.0; batches * t * h * dv];
    for b in 0..batches {
        for hi in 0..h {
            let g = hi / (h / hkv);
            for ti in 0..t {
                let visible = if causal { (len + ti + 1).saturating_sub(t).min(len) } else { len };
                let mut sc: Vec<f64> = (0..visible)
                    .map(|si| {
                        let dot: f64 = (0..d)
                            .map(|j| q.data[((b * h + hi) * t + ti) * d + j] * k.data[((b * hkv + g) * s + si) * d + j])
                            .sum();
                        let m = mask.as_ref().map_or(0.0, |m| m.data[((b * h + hi) * t + ti) * s + si]);
                        dot * scale + m
                    })
                    .collect();
                let max = sc.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                if max == f64::NEG_INFINITY {
                    continue;
                }
                let sink = sinks.map(|s| s.data[hi]);
                let max = max.max(sink.unwrap_or(f64::NEG_INFINITY));
                sc.iter_mut().for_each(|x| *x = (*x - max).exp());
                let total: f64 = sc.iter().sum::<f64>() + sink.map_or(0.0, |s| (s - max).exp());
                for j in 0..dv {
                    let o: f64 =
                        sc.iter().enumerate().map(|(si, p)| p * v.data[((b * hkv + g) * s + si) * dv + j]).sum();
                    out[((b * t + ti) * h + hi) * dv + j] = o / total;
                }
            }
        }
    }
    Arr::new(&shape, out)
}

/// `torch.topk(x, k, dim=-1).indices` as f64: the k largest entries of each last-axis row, largest first, equal
/// values by their index, NaN above every number.
pub fn top_k(x: &Arr, k: usize) -> Arr {
    let n = *x.shape.last().expect("rank >= 1");
    let rows = x.numel() / n.max(1);
    let mut shape = x.shape.clone();
    *shape.last_mut().unwrap() = k;
    let mut out = Vec::with_capacity(rows * k);
    for r in 0..rows {
        let row = &x.data[r * n..(r + 1) * n];
        let mut order: Vec<usize> = (0..n).collect();
        order.sort_by(|&i, &j| match (row[i].is_nan(), row[j].is_nan()) {
            (true, true) => std::cmp::Ordering::Equal,
            (true, false) => std::cmp::Ordering::Less,
            (false, true) => std::cmp::Ordering::Greater,
            _ => row[j].partial_cmp(&row[i]).unwrap(),
        });
        out.extend(order[..k].iter().map(|&i| i as f64));
    }
    Arr::new(&shape, out)
}

/// `numpy.take_along_axis(x, idx, -1)`.
pub fn take_along_axis(x: &Arr, idx: &Arr) -> Arr {
    let (n, j) = (*x.shape.last().unwrap(), *idx.shape.last().unwrap());
    Arr::from_fn(&idx.shape, |e| x.data[e / j * n + idx.data[e] as usize])
}

/// ggml_mul_mat_id: `out[t, j, :] = w[ids[t, j]] @ a[t, j mod A, :]` for a `[T, A, K]`, w `[E, N, K]`, ids
/// `[T, U]`.
pub fn mul_mat_id(a: &Arr, w: &Arr, ids: &Arr) -> Arr {
    let (t, rows_a, k) = (a.shape[0], a.shape[1], a.shape[2]);
    let (n, u) = (w.shape[1], ids.shape[1]);
    Arr::from_fn(&[t, u, n], |i| {
        let (tok, slot, col) = (i / (u * n), i / n % u, i % n);
        let e = ids.data[tok * u + slot] as usize;
        let arow = &a.data[(tok * rows_a + slot % rows_a) * k..][..k];
        let wrow = &w.data[(e * n + col) * k..][..k];
        arow.iter().zip(wrow).map(|(x, y)| x * y).sum()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn broadcast_mul() {
        let a = Arr::new(&[2, 2], vec![10., 20., 30., 40.]);
        let b = Arr::new(&[2, 1], vec![2., 4.]);
        assert_eq!(binary(&a, &b, |x, y| x * y), Arr::new(&[2, 2], vec![20., 40., 120., 160.]));
        assert_eq!(broadcast_shapes(&[3, 1, 5], &[4, 1]), vec![3, 4, 5]);
        let r = Arr::new(&[3], vec![1., 2., 3.]).broadcast_to(&[2, 3]);
        assert_eq!(r.data, vec![1., 2., 3., 1., 2., 3.]);
    }

    #[test]
    #[should_panic]
    fn broadcast_incompatible() {
        broadcast_shapes(&[3, 2], &[3]);
    }

    #[test]
    fn ggml_matmul_example() {
        let a = Arr::new(&[4, 2], vec![2., 8., 5., 1., 4., 2., 8., 6.]);
        let b = Arr::new(&[3, 2], vec![10., 5., 9., 9., 5., 4.]);
        let c = matmul(&b, &a.transpose(0, 1));
        let want = vec![60., 55., 50., 110., 90., 54., 54., 126., 42., 29., 28., 64.];
        assert_eq!(c, Arr::new(&[3, 4], want));
    }

    #[test]
    fn matmul_batch_and_vectors() {
        let a = Arr::from_fn(&[2, 4, 3, 3], |i| u(i, 1));
        let b = Arr::from_fn(&[4, 3, 3], |i| u(i, 2));
        let c = matmul(&a, &b);
        assert_eq!(c.shape, vec![2, 4, 3, 3]);
        // batch (1, 2), element (0, 1) computed by hand
        let want: f64 = (0..3).map(|p| a.get(&[1, 2, 0, p]) * b.get(&[2, p, 1])).sum();
        assert_eq!(c.get(&[1, 2, 0, 1]), want);
        let a = Arr::from_fn(&[3, 1, 5, 7], |i| u(i, 3));
        let b = Arr::from_fn(&[1, 4, 7, 6], |i| u(i, 4));
        let c = matmul(&a, &b);
        assert_eq!(c.shape, vec![3, 4, 5, 6]);
        let want: f64 = (0..7).map(|p| a.get(&[2, 0, 4, p]) * b.get(&[0, 3, p, 5])).sum();
        assert_eq!(c.get(&[2, 3, 4, 5]), want);
        let m = Arr::new(&[2, 3], vec![1., 2., 3., 4., 5., 6.]);
        let v = Arr::new(&[3], vec![1., 0., -1.]);
        assert_eq!(matmul(&m, &v), Arr::new(&[2], vec![-2., -2.]));
        let w = Arr::new(&[2], vec![1., 1.]);
        assert_eq!(matmul(&w, &m), Arr::new(&[3], vec![5., 7., 9.]));
        assert_eq!(matmul(&v, &v), Arr::new(&[], vec![2.]));
    }

    #[test]
    fn views() {
        let x = Arr::from_fn(&[2, 3, 4], |i| i as f64);
        let p = x.permute(&[2, 0, 1]);
        assert_eq!(p.shape, vec![4, 2, 3]);
        assert_eq!(p.get(&[3, 1, 2]), x.get(&[1, 2, 3]));
        assert_eq!(x.slice(1, 1, 3).data[..4], [4., 5., 6., 7.]);
        let c = concat(&x, &x.slice(2, 0, 1), 2);
        assert_eq!(c.shape, vec![2, 3, 5]);
        assert_eq!(c.get(&[1, 2, 4]), x.get(&[1, 2, 0]));
        assert_eq!(x.reshape(&[6, 4]).get(&[5, 3]), 23.);
    }

    #[test]
    fn erf_values() {
        let cases = [
            (0.5, 0.5204998778130465),
            (1.0, 0.8427007929497149),
            (2.0, 0.9953222650189527),
            (3.0, 0.9999779095030014),
        ];
        for (x, want) in cases {
            assert!((erf(x) - want).abs() < 2e-16, "erf({}) = {}", x, erf(x));
            assert_eq!(erf(-x), -erf(x));
        }
        assert_eq!(erf(0.0), 0.0);
        assert!((erf(6.0) - 1.0).abs() < 1e-15);
        assert_eq!(erf(f64::INFINITY), 1.0);
        assert!((erfc(2.0) / 0.004677734981047266 - 1.0).abs() < 1e-14);
        assert!((erfc(3.0) / 2.209049699858544e-05 - 1.0).abs() < 1e-14);
        assert!((erfc(1.0) / 0.15729920705028513 - 1.0).abs() < 1e-14);
        assert!((gelu_erf(1.0) - 0.8413447460685429).abs() < 1e-15);
    }

    #[test]
    fn activations_extreme() {
        assert_eq!(sigmoid(1e30), 1.0);
        assert_eq!(sigmoid(-1e30), 0.0);
        assert_eq!(silu(-1e30), 0.0);
        assert_eq!(silu(1e30), 1e30);
        assert_eq!(sigmoid(0.0), 0.5);
        assert_eq!(relu(-2.0), 0.0);
        assert!(relu(f64::NAN).is_nan());
        assert_eq!(gelu_tanh(1e30), 1e30);
        assert_eq!(gelu_tanh(-1e30), 0.0);
        assert!((gelu_tanh(1.0) - 0.8411919906082768).abs() < 1e-15);
    }

    #[test]
    fn softmax_rows() {
        let x = Arr::from_fn(&[3, 5], |i| u(i, 7) * 10.0);
        let s = softmax(&x, None, 0.5);
        for r in 0..3 {
            let row = &s.data[r * 5..r * 5 + 5];
            assert!((row.iter().sum::<f64>() - 1.0).abs() < 1e-15);
        }
        let mask = Arr::new(&[3, 1], vec![0.0, f64::NEG_INFINITY, 0.0]);
        let m = softmax(&x, Some(&mask), 1.0);
        assert_eq!(&m.data[5..10], &[0.0; 5]);
        let e = softmax(&Arr::new(&[2], vec![0., 2f64.ln()]), None, 1.0);
        assert!((e.data[0] - 1.0 / 3.0).abs() < 1e-15 && (e.data[1] - 2.0 / 3.0).abs() < 1e-15);
    }

    #[test]
    fn reductions_and_norms() {
        let x = Arr::new(&[2, 4], vec![1., 3., 3., 0., -1., -5., -1., -2.]);
        assert_eq!(argmax_last(&x), Arr::new(&[2, 1], vec![1., 0.]));
        assert_eq!(max_last(&x).data, vec![3., -1.]);
        assert_eq!(sum_last(&x).data, vec![7., -9.]);
        assert_eq!(mean_last(&x).data, vec![1.75, -2.25]);
        let y = rms_norm(&Arr::new(&[1, 2], vec![3., 4.]), Some(&Arr::new(&[2], vec![1., 2.])), 0.0);
        let s = (12.5f64).sqrt();
        assert_eq!(y.data, vec![3. / s, 8. / s]);
        let l = layer_norm(&Arr::new(&[2], vec![1., 3.]), None, Some(&Arr::new(&[1], vec![10.])), 0.0);
        assert_eq!(l.data, vec![9., 11.]);
        let t = Arr::from_fn(&[3, 2], |i| i as f64);
        let g = get_rows(&t, &Arr::new(&[2, 2], vec![2., 0., 1., 2.]));
        assert_eq!(g.shape, vec![2, 2, 2]);
        assert_eq!(g.data, vec![4., 5., 0., 1., 2., 3., 4., 5.]);
    }

    #[test]
    fn nmse_rules() {
        assert_eq!(nmse(&[1., 2.], &[1., 2.]), 0.0);
        assert_eq!(nmse(&[1., 1.], &[0., 0.]), 2.0);
        assert_eq!(nmse(&[2., 0.], &[1., 0.]), 1.0);
        assert_eq!(nmse(&[f64::NAN], &[1.0]), f64::INFINITY);
        assert_eq!(nmse(&[f64::NAN, f64::INFINITY, 1.0], &[f64::NAN, f64::INFINITY, 1.0]), 0.0);
        assert_eq!(nmse(&[f64::NEG_INFINITY], &[f64::INFINITY]), f64::INFINITY);
    }

    #[test]
    fn generator() {
        for i in 0..1000 {
            let v = u(i, 42);
            assert!((-1.0..1.0).contains(&v));
            assert_eq!(v as f32 as f64, v);
        }
        assert_ne!(u(0, 1), u(0, 2));
        // pinned values (checked against an independent Python implementation)
        assert_eq!(u(0, 0), 0.7666215896606445);
        assert_eq!(u(1, 0), 0.13312304019927979);
        assert_eq!(u(12345, 7), -0.13708293437957764);
    }
}
