//! What every decoder architecture reduces to: a [`DecoderConfig`] (widths, heads, rope, norms and the settings that
//! tell the families apart) and the weights of its blocks ([`Block`]), some optional (biases, q/k norms,
//! post-norms, attention sinks), the feed-forward dense or a mixture of experts ([`Ffn`]). The architecture files
//! fill them from GGUF metadata and tensor names; the runner builds its graphs from them alone.

use crate::ops::{Rope, RopeMode};
use crate::resident::Resident;

/// A decoder-only transformer's shape, as llama.cpp's `llama_hparams` holds it. Widths in elements.
#[derive(Clone, Debug, PartialEq)]
pub struct DecoderConfig {
    /// The file's `general.architecture` (one of [`crate::models::arch::supported`]).
    pub arch: String,
    /// Transformer blocks (`{arch}.block_count`).
    pub n_layers: usize,
    /// Residual-stream width E (`{arch}.embedding_length`).
    pub n_embd: usize,
    /// Query heads H (`{arch}.attention.head_count`).
    pub n_heads: usize,
    /// Key/value heads Hkv, dividing H (`{arch}.attention.head_count_kv`; H when absent).
    pub n_kv_heads: usize,
    /// Dims per head D (`{arch}.attention.key_length`; E / H when absent).
    pub head_dim: usize,
    /// Feed-forward width F (`{arch}.feed_forward_length`).
    pub n_ff: usize,
    /// Vocabulary size V (rows of `token_embd.weight`).
    pub n_vocab: usize,
    /// Positions the model was trained for (`{arch}.context_length`).
    pub n_ctx_train: usize,
    /// RMS norm epsilon (`{arch}.attention.layer_norm_rms_epsilon`).
    pub rms_eps: f32,
    /// Rope θ base (`{arch}.rope.freq_base`, 10000 when absent) of full-attention layers.
    pub rope_base: f32,
    /// Rope scaling of full-attention layers, linear or YaRN's: positions are multiplied by this
    /// (1 / `rope.scaling.factor`).
    pub rope_scale: f32,
    /// YaRN (`rope.scaling.type` yarn): its `ext_factor` and its ramp's first and last pairs
    /// ([`Rope::yarn_corr_dims`] of `rope.scaling.original_context_length` and the beta keys); `None` otherwise.
    pub rope_yarn: Option<(f32, [f32; 2])>,
    /// Scale of rope's cos and sin (`rope.scaling.attn_factor`; 1 when absent).
    pub rope_attn_factor: f32,
    /// Positions the model was trained for before its rope was scaled (`rope.scaling.original_context_length`;
    /// `n_ctx_train` when absent): YaRN's ramp and LongRoPE's choice of factors depend on it.
    pub n_ctx_orig: usize,
    /// Dims of each head that rotate (`{arch}.rope.dimension_count`; D when absent).
    pub rope_dims: usize,
    /// Which pairs turn: llama's adjacent pairs (its converter permutes Q and K for them), or halves (the
    /// NeoX layout of Qwen, Phi-3 and Gemma).
    pub rope_mode: RopeMode,
    /// Whether the output head is its own tensor (`output.weight`) or the token embedding (tied).
    pub tied_output: bool,
    /// The feed-forward gate's activation: SiLU (SwiGLU) or GELU's tanh form (GeGLU, Gemma).
    pub ffn_act: Activation,
    /// Multiplies the token embeddings (Gemma: √E); `None` for 1.
    pub embd_scale: Option<f32>,
    /// Multiplies `q·kᵀ` (1/√D unless the architecture says otherwise).
    pub attn_scale: f32,
    /// Attention logit soft-capping c: scores become `c · tanh(s / c)` (Gemma 2's `attn_logit_softcapping`).
    pub attn_softcap: Option<f32>,
    /// Output logit soft-capping (Gemma 2's `final_logit_softcapping`).
    pub final_softcap: Option<f32>,
    /// Sliding-window attention: a query at position p sees keys at p − W + 1 ..= p on the layers marked in
    /// `swa_layers` (`{arch}.attention.sliding_window`).
    pub sliding_window: Option<usize>,
    /// Per layer: whether it attends over the sliding window (empty when there is none).
    pub swa_layers: Vec<bool>,
    /// Rope θ base and linear scale of the sliding-window layers (Gemma 3's local layers: 10000 and 1).
    pub rope_swa: (f32, f32),
    /// The mixture of experts in place of every block's feed-forward (`{arch}.expert_count` and the keys with it);
    /// `None` for a dense model.
    pub experts: Option<ExpertsConfig>,
    /// The gated delta-net layers of a hybrid model (Qwen3.5, Qwen3-Next); `None` for attention-only models.
    pub linear: Option<LinearConfig>,
}

/// A hybrid model's gated delta-net (linear-attention) layers, as llama.cpp reads them (`{arch}.ssm.*`).
#[derive(Clone, Debug, PartialEq)]
pub struct LinearConfig {
    /// The causal conv's taps K (`ssm.conv_kernel`).
    pub conv_kernel: usize,
    /// Query and key heads Hk (`ssm.group_count`).
    pub n_k_heads: usize,
    /// Value heads Hv (`ssm.time_step_rank`), a multiple of Hk.
    pub n_v_heads: usize,
    /// Each head's width S, keys' and values' (`ssm.state_size`; `ssm.inner_size` = Hv · S).
    pub head_dim: usize,
    /// Whether value head j reads key head j / (Hv / Hk) (Qwen3-Next's files) rather than j mod Hk (Qwen3.5's,
    /// whose converter reorders the value heads so).
    pub grouped: bool,
    /// Per layer: whether it is a gated delta-net layer (`attention.recurrent_layers`, or every layer but each
    /// `full_attention_interval`-th).
    pub layers: Vec<bool>,
    /// Trailing multi-token-prediction blocks of the file (`nextn_predict_layers`), not part of the forward pass
    /// (not counted in [`DecoderConfig::n_layers`]).
    pub mtp_layers: usize,
}

impl LinearConfig {
    /// Channels of the conv: Q and K (Hk · S each) and V (Hv · S).
    pub fn conv_dim(&self) -> usize {
        (2 * self.n_k_heads + self.n_v_heads) * self.head_dim
    }
}

/// A mixture-of-experts feed-forward, as llama.cpp's `build_moe_ffn` takes it: a router scores the `n_expert`
/// experts for each token, the `n_expert_used` best run, and their outputs are summed, each times its weight.
#[derive(Clone, Debug, PartialEq)]
pub struct ExpertsConfig {
    /// Experts X (`{arch}.expert_count`).
    pub n_expert: usize,
    /// Experts each token runs, K (`{arch}.expert_used_count`, at most X).
    pub n_expert_used: usize,
    /// Each expert's feed-forward width (`{arch}.expert_feed_forward_length`; the architecture's default without
    /// it: `feed_forward_length` for llama and olmoe, `feed_forward_length / K` for the Qwen MoE models).
    pub n_ff_exp: usize,
    /// The shared expert's width (`{arch}.expert_shared_feed_forward_length`; Qwen2-MoE), `None` without one.
    pub n_ff_shexp: Option<usize>,
    /// How router logits become weights (`{arch}.expert_gating_func`, the architecture's own without it).
    pub gating: Gating,
    /// Whether the K selected weights are divided by their sum (`{arch}.expert_weights_norm`; Mixtral and
    /// Qwen3-MoE yes, Qwen2-MoE and OLMoE no), the sum clamped below at 6.103515625e-5 as llama.cpp does.
    pub norm_weights: bool,
    /// Multiplies the weights (`{arch}.expert_weights_scale`; 1 without it).
    pub weights_scale: f32,
    /// The experts' gate activation: SwiGLU, or gpt-oss's clamped form.
    pub act: Activation,
}

/// How a mixture-of-experts router's logits become the selected experts' weights (llama.cpp's
/// `llama_expert_gating_func_type`; GGUF `expert_gating_func` 1, 2 and 3).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Gating {
    /// Softmax over all experts, the top K selected, their probabilities the weights.
    Softmax,
    /// Each logit's sigmoid, the top K selected, those the weights.
    Sigmoid,
    /// The top K logits selected, softmax over those K the weights (gpt-oss).
    SoftmaxWeight,
}

impl DecoderConfig {
    /// Whether layer `l` is a gated delta-net layer (a recurrent state in place of a KV cache).
    pub fn is_recurrent(&self, l: usize) -> bool {
        self.linear.as_ref().is_some_and(|c| c.layers.get(l).copied().unwrap_or(false))
    }

    /// Layers that keep a KV cache (all but the gated delta-net layers).
    pub fn attention_layers(&self) -> usize {
        (0..self.n_layers).filter(|&l| !self.is_recurrent(l)).count()
    }

    /// Bytes of one sequence's recurrent state, constant in its length: per gated delta-net layer its conv's last
    /// K − 1 inputs and its delta rule's Hv · S · S state, f32 (0 for attention-only models).
    pub fn recurrent_state_bytes(&self) -> usize {
        let Some(c) = &self.linear else { return 0 };
        let per_layer = ((c.conv_kernel - 1) * c.conv_dim() + c.n_v_heads * c.head_dim * c.head_dim) * 4;
        per_layer * c.layers.iter().filter(|&&r| r).count()
    }

    /// Whether layer `l` attends over the sliding window.
    pub fn is_swa(&self, l: usize) -> bool {
        self.sliding_window.is_some() && self.swa_layers.get(l).copied().unwrap_or(false)
    }

    /// Layer `l`'s rope (ggml_rope_ext's parameters as llama.cpp sets them from the file).
    pub fn rope(&self, l: usize) -> Rope {
        let (freq_base, freq_scale) = if self.is_swa(l) { self.rope_swa } else { (self.rope_base, self.rope_scale) };
        let (ext_factor, corr_dims) = self.rope_yarn.unwrap_or((0.0, [0.0, 0.0]));
        Rope {
            freq_scale,
            ext_factor,
            attn_factor: self.rope_attn_factor,
            corr_dims,
            ..Rope::new(self.rope_dims, self.rope_mode, freq_base)
        }
    }
}

/// A gated feed-forward's activation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Activation {
    /// `silu(gate) · up` (ggml_swiglu).
    Silu,
    /// `gelu_tanh(gate) · up` (ggml_geglu).
    GeluTanh,
    /// gpt-oss's clamped SwiGLU (ggml_swiglu_oai with alpha 1.702, limit 7):
    /// `g · sigmoid(1.702 · g) · (clamp(up, −7, 7) + 1)` with `g = min(gate, 7)`.
    SwigluOai,
}

/// One block's weights, resident on the device (GGUF names `blk.N.*`; matrices `[out, in]`). Phi-3's `ffn_up`,
/// which holds gate and up, is split into its parts at load (one dual matmul multiplies both).
pub(crate) struct Block {
    pub attn_norm: Resident,
    /// What mixes the positions: attention over the KV cache, or a linear-attention (recurrent) layer.
    pub mixer: Mixer,
    /// Norm of the attention's output before the residual add (Gemma 2 and 3).
    pub post_attn_norm: Option<Resident>,
    /// The norm before the feed-forward (`ffn_norm`; gpt-oss and the Qwen3.5 family name it
    /// `post_attention_norm`).
    pub ffn_norm: Resident,
    pub ffn: Ffn,
    /// Norm of the feed-forward's output before the residual add (Gemma 2 and 3).
    pub post_ffn_norm: Option<Resident>,
}

/// A block's token mixer.
pub(crate) enum Mixer {
    Attention(Attention),
    /// A gated delta-net layer (Qwen3.5, Qwen3-Next: [`super::linear`]).
    Linear(Box<LinearAttention>),
}

/// A gated delta-net layer's weights (`blk.N.attn_qkv`, `attn_gate`, `ssm_*`).
pub(crate) struct LinearAttention {
    /// `attn_qkv` `[conv_dim, E]`: rows Q (Hk · S), K (Hk · S), V (Hv · S).
    pub qkv: Resident,
    /// `attn_gate` `[Hv · S, E]`: z.
    pub z: Resident,
    /// `ssm_beta` and `ssm_alpha` `[Hv, E]` (Qwen3.5), or `None` and `ssm_ba` `[2 · Hv, E]` in `beta` (Qwen3-Next:
    /// per key head, its value heads' β logits then their decay logits).
    pub beta: Resident,
    pub alpha: Option<Resident>,
    /// `ssm_conv1d` `[conv_dim, K]`.
    pub conv: Resident,
    /// `ssm_dt.bias` and `ssm_a` `[Hv]`.
    pub dt_bias: Resident,
    pub a: Resident,
    /// `ssm_norm` `[S]`.
    pub norm: Resident,
    /// `ssm_out` `[E, Hv · S]`.
    pub out: Resident,
}

/// A self-attention's weights.
pub(crate) struct Attention {
    /// The Q, K and V projections (biased in Qwen2).
    pub qkv: Qkv,
    /// Whether Q's projection gives each head its queries and then as many gate logits (`[H, 2·D]` rows: Qwen3.5
    /// and Qwen3-Next), the attention's output multiplied by their sigmoid.
    pub gated_q: bool,
    /// RMS norms of each head's queries and keys before rope, `[D]` (Qwen3, Gemma 3).
    pub q_norm: Option<Resident>,
    pub k_norm: Option<Resident>,
    pub wo: Resident,
    /// The output projection's bias (gpt-oss).
    pub wo_bias: Option<Resident>,
    /// f32 `[H]`: each head's sink logit (gpt-oss's `attn_sinks`).
    pub sinks: Option<Resident>,
}

impl Block {
    /// The block's attention weights: every block of the attention-only architectures has them.
    pub(crate) fn attention(&self) -> Option<&Attention> {
        match &self.mixer {
            Mixer::Attention(a) => Some(a),
            Mixer::Linear(_) => None,
        }
    }
}

/// A block's feed-forward.
pub(crate) enum Ffn {
    /// `down(act(gate(x)) · up(x))`: `ffn_gate`, `ffn_up` `[F, E]`, `ffn_down` `[E, F]`.
    Dense { gate: Resident, up: Resident, down: Resident },
    /// A mixture of experts ([`ExpertsConfig`]).
    Experts(Box<Experts>),
}

/// A mixture of experts' weights (GGUF `blk.N.ffn_*_exps`, stacked: expert e's matrix is `[e]`).
pub(crate) struct Experts {
    /// `ffn_gate_inp` `[X, E]` (and its bias `[X]`, gpt-oss).
    pub router: Resident,
    pub router_bias: Option<Resident>,
    /// `ffn_gate_exps`, `ffn_up_exps` `[X, Fe, E]` (or both in one `ffn_gate_up_exps` `[X, 2·Fe, E]`, each
    /// expert's gate rows first: Qwen3.5 MoE), `ffn_down_exps` `[X, E, Fe]`.
    pub gate_up: GateUp,
    pub down: Resident,
    /// Their biases `[X, Fe]`, `[X, Fe]`, `[X, E]` (gpt-oss).
    pub biases: Option<[Resident; 3]>,
    /// Qwen2-MoE's shared expert, which every token runs.
    pub shared: Option<SharedExpert>,
    /// The settings they run with (the model's [`DecoderConfig::experts`]).
    pub config: ExpertsConfig,
}

/// The experts' gate and up projections: two stacks, or one of both (one `mul_mat_id` for both).
pub(crate) enum GateUp {
    Split { gate: Resident, up: Resident },
    Fused(Resident),
}

/// A shared expert: a dense feed-forward (`ffn_{gate,up,down}_shexp`) whose output is added to the experts',
/// times `sigmoid(x · ffn_gate_inp_shexp)` where the file has that gate (`[E]`).
pub(crate) struct SharedExpert {
    pub gate_inp: Option<Resident>,
    pub gate: Resident,
    pub up: Resident,
    pub down: Resident,
}

/// The Q, K and V projections of a block, `[H · D, E]`, `[Hkv · D, E]` and `[Hkv · D, E]` (GGUF `attn_q`, `attn_k`,
/// `attn_v`), with their biases where the architecture has them.
pub(crate) enum Qkv {
    /// The three as one matrix `[(H + 2 · Hkv) · D, E]` (rows Q, then K, then V) and one bias: one matmul reads the
    /// normed rows once for all three, as llama.cpp does with a file's fused `attn_qkv`. A file's fused tensor
    /// (Phi-3), or the three concatenated at load where they share a dtype.
    Fused { w: Resident, bias: Option<Resident> },
    /// Three matrices of different dtypes (a mixed quantization: `attn_v` often in more bits), each its own matmul.
    Split { w: [Resident; 3], bias: Option<[Resident; 3]> },
}
