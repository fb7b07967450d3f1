//! Rotary position embedding's parameters (vocabulary of the rope op on every backend).

/// How [`Graph::rope`](crate::Graph::rope) pairs the dims of a head.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RopeMode {
    /// Adjacent pairs `(2i, 2i + 1)` (ggml's `GGML_ROPE_TYPE_NORMAL`, LLaMA's GGUF files).
    Normal,
    /// Halves `(i, i + n_dims / 2)` (ggml's `GGML_ROPE_TYPE_NEOX`, GPT-NeoX, Hugging Face's `rotate_half`).
    Neox,
}

/// The parameters of [`Graph::rope`](crate::Graph::rope): ggml_rope_ext's, YaRN's included.
///
/// Pair `i` of a head at position `pos` turns by θ = `freq_scale · θₑ`, θₑ = `pos · freq_base^(-2i / n_dims) /
/// factor` (the extrapolated angle; `factor` the pair's frequency factor, 1 without them). With YaRN
/// (`ext_factor` ≠ 0) the pairs below `corr_dims[0]` keep θₑ, those above `corr_dims[1]` take θ, those between
/// a linear mix (ggml's `rope_yarn_ramp`), and cos and sin are scaled by `1 + 0.1 · ln(1 / freq_scale)`. cos and
/// sin are always scaled by `attn_factor`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Rope {
    /// Dims of each head that rotate (the first `n_dims`; the rest pass through); even.
    pub n_dims: usize,
    pub mode: RopeMode,
    /// θ base: pair `i` turns by `pos · freq_scale · freq_base^(-2i / n_dims)` radians.
    pub freq_base: f32,
    /// Position scaling: 1 for none, `1 / factor` for linear or YaRN scaling by `factor`.
    pub freq_scale: f32,
    /// YaRN's weight of the extrapolated angle in the ramp (ggml's `ext_factor`): 0 for none, 1 for YaRN.
    pub ext_factor: f32,
    /// Scale of cos and sin (ggml's `attn_factor`; LongRoPE's and GGUF's `rope.scaling.attn_factor`): 1 for none.
    pub attn_factor: f32,
    /// YaRN's ramp from pair `corr_dims[0]` to pair `corr_dims[1]` ([`Rope::yarn_corr_dims`]).
    pub corr_dims: [f32; 2],
}

impl Rope {
    /// Plain rope: no scaling, no YaRN, cos and sin unscaled.
    pub fn new(n_dims: usize, mode: RopeMode, freq_base: f32) -> Rope {
        Rope { n_dims, mode, freq_base, freq_scale: 1.0, ext_factor: 0.0, attn_factor: 1.0, corr_dims: [0.0, 0.0] }
    }

    /// YaRN's ramp bounds in pairs, as ggml_rope_yarn_corr_dims computes them: the pairs that turn `beta_fast`
    /// and `beta_slow` times over `n_ctx_orig` positions (floor and ceiling), clamped to `[0, n_dims - 1]`.
    pub fn yarn_corr_dims(
        n_dims: usize,
        n_ctx_orig: usize,
        freq_base: f32,
        beta_fast: f32,
        beta_slow: f32,
    ) -> [f32; 2] {
        let dim = |rotations: f32| {
            n_dims as f32 * (n_ctx_orig as f32 / (rotations * 2.0 * std::f32::consts::PI)).ln() / (2.0 * freq_base.ln())
        };
        [dim(beta_fast).floor().max(0.0), dim(beta_slow).ceil().min(n_dims as f32 - 1.0)]
    }

    /// `freq_base^(-2 / n_dims)`: the factor between the angles of neighbouring pairs.
    pub(crate) fn theta_scale(&self) -> f32 {
        self.freq_base.powf(-2.0 / self.n_dims as f32)
    }

    /// `(sin, cos)` of the angle by which each pair `i` of a head at position `pos` turns (`out.len()` pairs,
    /// pair `i` with `factors[i]`), scaled: θᵢ computed in f32 as ggml does (and as the GPU kernel does, so both
    /// agree): `pos · theta_scale · .. · theta_scale / factor`, `i` factors of `theta_scale` (each product formed
    /// once, in order, for all pairs); then YaRN's mix and scales as [`Rope`] describes.
    pub(crate) fn sin_cos_table(&self, pos: i32, factors: &[f32], out: &mut [(f32, f32)]) {
        let ts = self.theta_scale();
        let mut theta = pos as f32;
        for (i, (o, &factor)) in out.iter_mut().zip(factors).enumerate() {
            if i > 0 {
                theta *= ts;
            }
            *o = self.sin_cos_of(theta, i, factor);
        }
    }

    /// Pair `i`'s (sin, cos) for the unscaled angle `theta` (`pos · theta_scale^i`).
    fn sin_cos_of(&self, theta: f32, i: usize, factor: f32) -> (f32, f32) {
        let extrap = theta / factor;
        let mut angle = self.freq_scale * extrap;
        let mut mscale = self.attn_factor;
        if self.ext_factor != 0.0 {
            let [low, high] = self.corr_dims;
            let y = (i as f32 - low) / (high - low).max(0.001);
            let mix = (1.0 - y.clamp(0.0, 1.0)) * self.ext_factor;
            angle = angle * (1.0 - mix) + extrap * mix;
            mscale *= 1.0 + 0.1 * (1.0 / self.freq_scale).ln();
        }
        let (sin, cos) = angle.sin_cos();
        (sin * mscale, cos * mscale)
    }

    /// The element indices (within a head) of pair `i`.
    pub(crate) fn pair(&self, i: usize) -> (usize, usize) {
        match self.mode {
            RopeMode::Normal => (2 * i, 2 * i + 1),
            RopeMode::Neox => (i, i + self.n_dims / 2),
        }
    }
}
