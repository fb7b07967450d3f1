//! Rotary position embedding's parameters (vocabulary of the rope op on every backend).

/// How [`Graph::rope`](crate::Graph::rope) pairs the dims of a head.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RopeMode {
    /// Adjacent pairs `(2i, 2i + 1)` (ggml's `GGML_ROPE_TYPE_NORMAL`, LLaMA's GGUF files).
    Normal,
    /// Halves `(i, i + n_dims / 2)` (ggml's `GGML_ROPE_TYPE_NEOX`, GPT-NeoX, Hugging Face's `rotate_half`).
    Neox,
}

/// The parameters of [`Graph::rope`](crate::Graph::rope) (ggml_rope_ext's, without YaRN extrapolation).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Rope {
    /// Dims of each head that rotate (the first `n_dims`; the rest pass through); even.
    pub n_dims: usize,
    pub mode: RopeMode,
    /// θ base: pair `i` turns by `pos · freq_scale · freq_base^(-2i / n_dims)` radians.
    pub freq_base: f32,
    /// Linear position scaling (1 for none).
    pub freq_scale: f32,
}

impl Rope {
    /// `freq_base^(-2 / n_dims)`: the factor between the angles of neighbouring pairs.
    pub(crate) fn theta_scale(&self) -> f32 {
        self.freq_base.powf(-2.0 / self.n_dims as f32)
    }

    /// The angle in radians by which pair `i` of a head at position `pos` turns, computed in f32 as ggml does (and
    /// as the GPU kernel does, so both agree): `freq_scale · (pos · theta_scale · .. · theta_scale / factor)`, `i`
    /// factors of `theta_scale`, `factor` the pair's frequency factor (1 without them).
    pub(crate) fn theta(&self, pos: i32, i: usize, factor: f32) -> f32 {
        let ts = self.theta_scale();
        let mut theta = pos as f32;
        for _ in 0..i {
            theta *= ts;
        }
        self.freq_scale * (theta / factor)
    }

    /// The element indices (within a head) of pair `i`.
    pub(crate) fn pair(&self, i: usize) -> (usize, usize) {
        match self.mode {
            RopeMode::Normal => (2 * i, 2 * i + 1),
            RopeMode::Neox => (i, i + self.n_dims / 2),
        }
    }
}
