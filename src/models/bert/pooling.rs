//! Pooling: how the token vectors of a sentence become one vector.

/// How token vectors become one sentence vector: the modes of sentence-transformers' `Pooling` module
/// (`1_Pooling/config.json`), over the sentence's real tokens.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pooling {
    /// The mean (`pooling_mode_mean_tokens`; the default).
    Mean,
    /// The first token's (`[CLS]`; `pooling_mode_cls_token`).
    Cls,
    /// The largest value of each dimension (`pooling_mode_max_tokens`).
    Max,
    /// The last real token's (`pooling_mode_lasttoken`).
    LastToken,
    /// The sum divided by √n (`pooling_mode_mean_sqrt_len_tokens`).
    MeanSqrtLen,
    /// The mean weighted by position, 1 to n (`pooling_mode_weightedmean_tokens`).
    WeightedMean,
}

impl Pooling {
    /// The weight of token `j` of a sentence of `n` real tokens (the weighted-sum modes).
    pub(crate) fn weight(self, j: usize, n: usize) -> f32 {
        match self {
            Pooling::Mean => 1.0 / n as f32,
            Pooling::Cls => (j == 0) as u8 as f32,
            Pooling::LastToken => (j + 1 == n) as u8 as f32,
            Pooling::MeanSqrtLen => 1.0 / (n as f32).sqrt(),
            Pooling::WeightedMean => (j + 1) as f32 / (n * (n + 1) / 2) as f32,
            Pooling::Max => 0.0,
        }
    }
}
