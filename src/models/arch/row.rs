//! An architecture's row ([`Arch`]: how its metadata and tensor names map onto a config and weights, and its
//! block's graph function), the model's [`Weights`] with that function, and what it is given ([`Layer`]: the
//! config, the block, the KV cache and the step's inputs).

use super::hparams::Hparams;
use super::loader::Loader;
use super::spec::{Block, DecoderConfig};
use crate::error::Result;
use crate::graph::{Graph, Tensor};
use crate::resident::Resident;
use crate::resident::State;

/// One architecture: how its metadata and tensor names map onto a [`DecoderConfig`] and [`Block`]s.
pub(crate) struct Arch {
    /// Its `general.architecture`.
    pub name: &'static str,
    /// The models it is known by, for messages and `inspect`.
    pub models: &'static str,
    /// Sets what tells this architecture apart on `cfg`, whose common hyperparameters [`common::read`] filled.
    ///
    /// [`common::read`]: super::common::read
    pub configure: fn(&Hparams, &mut DecoderConfig) -> Result<()>,
    /// Block `l`'s weights.
    pub block: fn(&Loader, usize, &DecoderConfig) -> Result<Block>,
    /// A block's graph (llama.cpp's per-architecture `llm_build_*`): [`super::graph::llama_layer`], the shared llama-shaped block
    /// whose optional parts the config and weights switch on, for every architecture whose block is one; an
    /// architecture that is not llama-shaped (experts in place of the feed-forward, linear attention) has a
    /// function of its own, built from the same parts ([`super::graph`]), rather than one more option here.
    pub layer: LayerFn,
}

/// The KV cache of several sequences (slots): per attention block, keys and values `[slots · capacity, Hkv · D]`,
/// sequence `s` in rows `s · capacity ..` (a row per position); per gated delta-net block (`None` in `k` and `v`),
/// each sequence's recurrent state: its conv's last inputs `[slots, K − 1, conv_dim]` and its delta rule's state
/// `[slots, Hv, S, S]`.
pub(crate) struct KvCache {
    pub k: Vec<Option<State>>,
    pub v: Vec<Option<State>>,
    pub conv: Vec<Option<State>>,
    pub ssm: Vec<Option<State>>,
    /// Positions per sequence.
    pub capacity: usize,
}

impl KvCache {
    /// Block `l`'s recurrent states (conv, delta rule).
    ///
    /// # Errors
    /// [`crate::Error::Unsupported`] when block `l` has none (an attention block).
    pub(crate) fn recurrent(&self, l: usize) -> Result<(&State, &State)> {
        match (self.conv.get(l), self.ssm.get(l)) {
            (Some(Some(c)), Some(Some(s))) => Ok((c, s)),
            _ => Err(crate::Error::Unsupported {
                op: "gated_delta_net".into(),
                backend: "cache".into(),
                reason: format!("block {l} has no recurrent state"),
            }),
        }
    }

    /// Whether some block carries a recurrent state (a cached prefix can then only be continued, not cut).
    pub(crate) fn is_recurrent(&self) -> bool {
        self.conv.iter().any(Option::is_some)
    }
}

/// A block's graph: `h` `[R, E]` (the residual stream's rows) to the block's output rows (see [`Layer`]).
pub(crate) type LayerFn = fn(&mut Graph, &Layer, Tensor) -> Result<Tensor>;

/// What a block's graph function builds from: the model's config, the block's index and weights, the KV cache
/// and the step's inputs.
pub(crate) struct Layer<'a> {
    pub cfg: &'a DecoderConfig,
    pub l: usize,
    pub block: &'a Block,
    pub cache: &'a KvCache,
    pub io: &'a Io,
    /// Whether only the last row leaves this layer: a step's last layer, whose logits are its last row's, runs
    /// its feed-forward on that row alone (its attention on every row, whose keys and values are cached), as
    /// llama.cpp's `inp_out_ids` does.
    pub last_row_only: bool,
}

/// Where a graph's layers find their run-time inputs and how they view the cache.
pub(crate) struct Io {
    pub pos: Tensor,
    pub rows: Tensor,
    pub kv_len: Tensor,
    /// The mask of full-attention layers (`None`: causal over `kv_len`).
    pub mask: Option<Tensor>,
    pub swa_mask: Option<Tensor>,
    /// One sequence's rows (first cache row, positions), or `n` sequences, one per slot from the first.
    pub view: View,
    /// Rope's frequency factors, where the model has them.
    pub rope_factors: Option<Tensor>,
    /// f32 `[B]`: 1 for the rows of a batched decode step that decode, 0 for idle rows, whose sequences' recurrent
    /// states must not move (`None` without recurrent states, and in single-sequence steps).
    pub row_live: Option<Tensor>,
}

#[derive(Clone, Copy)]
pub(crate) enum View {
    Step { first: usize, len: usize },
    Batch { n: usize },
}

/// Every weight of the model, resident.
pub(crate) struct Weights {
    pub token_embd: Resident,
    pub blocks: Vec<Block>,
    pub output_norm: Resident,
    /// `output.weight`, or `None` when the head is tied to the token embedding.
    pub output: Option<Resident>,
    /// `rope_freqs.weight`: each rope pair's frequency factor, f32 `[rope_dims / 2]` (Llama 3.1's rope scaling).
    pub rope_factors: Option<Resident>,
    /// The architecture's block graph ([`Arch::layer`]).
    pub layer: LayerFn,
}
