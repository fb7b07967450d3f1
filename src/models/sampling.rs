//! Choosing the next token from a step's logits, as llama.cpp's default sampler chain does: repetition penalty,
//! then top-k, top-p and min-p on the temperature-scaled distribution, then a draw from a seeded generator.
//! Temperature 0 is greedy (the argmax, ties to the lowest id).

/// How to pick tokens. The default is greedy.
#[derive(Clone, Debug, PartialEq)]
pub struct SamplingOptions {
    /// Softmax temperature, finite and ≥ 0; 0 picks the most likely token.
    pub temperature: f32,
    /// Keep the `top_k` most likely tokens (0: all).
    pub top_k: usize,
    /// Keep the smallest set of most likely tokens whose probabilities sum to at least `top_p` (1: all).
    pub top_p: f32,
    /// Drop tokens less likely than `min_p` times the most likely one (0: none).
    pub min_p: f32,
    /// Divide positive logits (multiply negative ones) of tokens seen in the last `repeat_last_n` tokens by this
    /// (1: off), as llama.cpp and Hugging Face do.
    pub repetition_penalty: f32,
    /// Tokens the penalties look back over.
    pub repeat_last_n: usize,
    /// Subtracted from the logit of every token seen in the last `repeat_last_n` tokens (0: off; OpenAI's
    /// `presence_penalty`, llama.cpp's `--presence-penalty`), in [-2, 2].
    pub presence_penalty: f32,
    /// Subtracted from a token's logit once for each time it was seen in the last `repeat_last_n` tokens (0: off;
    /// OpenAI's `frequency_penalty`), in [-2, 2].
    pub frequency_penalty: f32,
    /// Seed of the draws: the same seed and prompt give the same text.
    pub seed: u64,
}

impl Default for SamplingOptions {
    fn default() -> Self {
        SamplingOptions {
            temperature: 0.0,
            top_k: 40,
            top_p: 0.95,
            min_p: 0.05,
            repetition_penalty: 1.0,
            repeat_last_n: 64,
            presence_penalty: 0.0,
            frequency_penalty: 0.0,
            seed: 0,
        }
    }
}

impl SamplingOptions {
    /// The generic chat defaults: temperature 0.7 (llama-cli and Ollama use 0.8; a little lower suits small
    /// models), top-k 40 (both), top-p 0.9 (Ollama's), min-p 0.05 (llama-cli's), a repetition penalty of 1.1 over
    /// the last 64 tokens (Ollama's). Greedy decoding with no penalty lets a small model fall into a loop after a
    /// near tie (SmolLM2 answering "What is the capital of France?" with "la femme, la femme, ..." on the CPU
    /// backend). [`LanguageModel::chat_sampling`](crate::models::LanguageModel::chat_sampling) puts a model file's own
    /// recommendations over these. The caller picks the seed (and should say it, so an answer can be repeated).
    pub fn chat(seed: u64) -> SamplingOptions {
        SamplingOptions {
            temperature: 0.7,
            top_k: 40,
            top_p: 0.9,
            min_p: 0.05,
            repetition_penalty: 1.1,
            repeat_last_n: 64,
            presence_penalty: 0.0,
            frequency_penalty: 0.0,
            seed,
        }
    }

    /// One line naming the settings (`greedy` or `temperature 0.7, top-k 40, ..., seed 42`).
    pub fn describe(&self) -> String {
        let mut penalty = String::new();
        if self.repetition_penalty != 1.0 {
            penalty = format!(", repetition penalty {} over {} tokens", self.repetition_penalty, self.repeat_last_n);
        }
        if self.presence_penalty != 0.0 || self.frequency_penalty != 0.0 {
            let (p, f) = (self.presence_penalty, self.frequency_penalty);
            penalty += &format!(", presence penalty {p}, frequency penalty {f} over {} tokens", self.repeat_last_n);
        }
        if self.temperature <= 0.0 {
            return format!("greedy{penalty}");
        }
        format!(
            "temperature {}, top-k {}, top-p {}, min-p {}{penalty}, seed {}",
            self.temperature, self.top_k, self.top_p, self.min_p, self.seed
        )
    }

    /// Checks every option against its valid range, as llama.cpp's `common/arg.cpp` would want them:
    /// `temperature` finite and ≥ 0 (0 is greedy), `top_p` finite in (0, 1], `min_p` finite in [0, 1],
    /// `repetition_penalty` finite and > 0 (1 is off). `top_k` 0 means all tokens.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) naming the option, its value and its range.
    pub fn validate(&self) -> crate::error::Result<()> {
        let checks: [(&str, f32, bool, &str); 6] = [
            ("temperature", self.temperature, self.temperature >= 0.0, "finite and at least 0 (0 is greedy)"),
            ("top_p", self.top_p, self.top_p > 0.0 && self.top_p <= 1.0, "above 0 and at most 1 (1 keeps all)"),
            ("min_p", self.min_p, (0.0..=1.0).contains(&self.min_p), "from 0 to 1 (0 drops none)"),
            (
                "repetition_penalty",
                self.repetition_penalty,
                self.repetition_penalty > 0.0,
                "finite and above 0 (1 is off)",
            ),
            ("presence_penalty", self.presence_penalty, self.presence_penalty.abs() <= 2.0, "from -2 to 2 (0 is off)"),
            (
                "frequency_penalty",
                self.frequency_penalty,
                self.frequency_penalty.abs() <= 2.0,
                "from -2 to 2 (0 is off)",
            ),
        ];
        for (name, value, ok, range) in checks {
            if !value.is_finite() || !ok {
                return Err(crate::error::Error::InvalidArgument {
                    op: "sampling",
                    reason: format!("{name} is {value}: it must be {range}"),
                });
            }
        }
        Ok(())
    }

    /// True when the choice is the argmax of the raw logits (computed on the device; no logits read back).
    pub fn is_greedy(&self) -> bool {
        self.temperature <= 0.0 && !self.penalized()
    }

    /// Whether any penalty changes the logits.
    fn penalized(&self) -> bool {
        self.repetition_penalty != 1.0 || self.presence_penalty != 0.0 || self.frequency_penalty != 0.0
    }
}

/// A seeded sampler (xorshift64*, so a seed gives the same draws on every platform).
pub struct Sampler {
    options: SamplingOptions,
    state: u64,
}

impl Sampler {
    pub fn new(options: SamplingOptions) -> Sampler {
        let state = options.seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        Sampler { options, state }
    }

    pub fn options(&self) -> &SamplingOptions {
        &self.options
    }

    fn uniform(&mut self) -> f64 {
        self.state ^= self.state >> 12;
        self.state ^= self.state << 25;
        self.state ^= self.state >> 27;
        (self.state.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 11) as f64 / (1u64 << 53) as f64
    }

    /// The next token given the logits and the tokens so far (for the repetition penalty).
    pub fn sample(&mut self, logits: &[f32], history: &[u32]) -> u32 {
        let o = &self.options;
        let mut l = logits.to_vec();
        if o.penalized() {
            let from = history.len().saturating_sub(o.repeat_last_n);
            let mut seen: std::collections::HashMap<u32, u32> = Default::default();
            for &id in &history[from..] {
                *seen.entry(id).or_default() += 1;
            }
            // llama.cpp's penalties sampler: the repetition penalty, then frequency and presence
            for (&id, &count) in &seen {
                if let Some(x) = l.get_mut(id as usize) {
                    *x = if *x > 0.0 { *x / o.repetition_penalty } else { *x * o.repetition_penalty };
                    *x -= count as f32 * o.frequency_penalty + o.presence_penalty;
                }
            }
        }
        if o.temperature <= 0.0 {
            return argmax(&l);
        }
        let mut cand: Vec<(u32, f32)> =
            l.iter().enumerate().filter(|(_, x)| x.is_finite()).map(|(i, &x)| (i as u32, x / o.temperature)).collect();
        if cand.is_empty() {
            return argmax(&l);
        }
        cand.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        if !cand[0].1.is_finite() {
            // a temperature so small that the scaled logits overflow: the choice is the most likely token
            return argmax(&l);
        }
        if o.top_k > 0 {
            cand.truncate(o.top_k);
        }
        let max = cand[0].1;
        let mut p: Vec<f64> = cand.iter().map(|c| ((c.1 - max) as f64).exp()).collect();
        let total: f64 = p.iter().sum();
        p.iter_mut().for_each(|x| *x /= total);
        let mut keep = p.len();
        if o.top_p < 1.0 {
            let mut acc = 0.0;
            keep = p
                .iter()
                .position(|&x| {
                    acc += x;
                    acc >= o.top_p as f64
                })
                .map_or(p.len(), |i| i + 1);
        }
        if o.min_p > 0.0 {
            keep = keep.min(p.iter().take_while(|&&x| x >= o.min_p as f64 * p[0]).count().max(1));
        }
        let total: f64 = p[..keep].iter().sum();
        let (last, mut r) = (cand[keep - 1].0, self.uniform() * total);
        for (i, &x) in p[..keep].iter().enumerate() {
            r -= x;
            if r < 0.0 {
                return cand[i].0;
            }
        }
        last
    }
}

/// The index of the largest value (the first of equals; NaN never wins).
pub fn argmax(x: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &v) in x.iter().enumerate() {
        if v > x[best] || x[best].is_nan() {
            best = i;
        }
    }
    best as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn greedy_takes_the_argmax_and_penalty_moves_it() {
        let l = [0.5, 2.0, 1.9, -1.0];
        let mut s = Sampler::new(SamplingOptions::default());
        assert_eq!(s.sample(&l, &[]), 1);
        let mut p = Sampler::new(SamplingOptions { repetition_penalty: 1.5, ..Default::default() });
        assert_eq!(p.sample(&l, &[1]), 2, "2.0 / 1.5 falls below 1.9");
    }

    #[test]
    fn draws_follow_the_seed_and_the_filters() {
        let l: Vec<f32> = (0..100).map(|i| (i as f32 * 0.37).sin() * 3.0).collect();
        let o = SamplingOptions { temperature: 0.8, top_k: 5, top_p: 1.0, min_p: 0.0, seed: 7, ..Default::default() };
        let draw = |o: &SamplingOptions| {
            let mut s = Sampler::new(o.clone());
            (0..200).map(|_| s.sample(&l, &[])).collect::<Vec<_>>()
        };
        let (a, b) = (draw(&o), draw(&o));
        assert_eq!(a, b, "same seed, same draws");
        assert_ne!(a, draw(&SamplingOptions { seed: 8, ..o.clone() }), "another seed, other draws");
        let mut top: Vec<u32> = (0..100).collect();
        top.sort_by(|&x, &y| l[y as usize].total_cmp(&l[x as usize]));
        assert!(a.iter().all(|t| top[..5].contains(t)), "only the top 5 are drawn");
        assert!(top[..5].iter().filter(|t| a.contains(t)).count() >= 3, "more than one of them is drawn");
        let min_p = SamplingOptions { min_p: 0.999, ..o };
        assert!(draw(&min_p).iter().all(|&t| t == top[0]), "min_p near 1 keeps only the most likely");
    }
}
