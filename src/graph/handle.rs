//! Tensor handles and the options structs that carry them (leaf of the graph stage).

/// A handle to a tensor of a [`Graph`](crate::Graph): a node id plus the id of the graph that made it. Cheap to copy.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Tensor {
    pub(crate) id: u32,
    pub(crate) graph: u32,
}

impl Tensor {
    /// Position of the node in its graph, in creation order.
    pub fn index(self) -> usize {
        self.id as usize
    }
}

/// The parameters of [`Graph::attention`](crate::Graph::attention).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Attention {
    /// Multiplies `q·kᵀ` before the softmax (usually `1/√head_dim`).
    pub scale: f32,
    /// Query `t` (of T) sees keys `0 ..= L − T + t`, the queries being the last T of the L positions.
    pub causal: bool,
    /// An additive mask broadcast to `[.., heads, T, S]` (−inf hides a key), e.g. `[B, 1, 1, S]` for padding.
    pub mask: Option<Tensor>,
    /// A run-time KV length L (i32 `[1]`, 1 ≤ L ≤ S): only keys `0..L` take part, so one plan serves a growing
    /// KV cache and a step's cost follows L, not S. Without it L = S.
    pub kv_len: Option<Tensor>,
    /// Attention sinks (f32 `[H]`): head h's softmax has one more logit, `sinks[h]` (not scaled, not masked),
    /// in its denominator only, so that a query may attend to nothing (gpt-oss). Without it, none.
    pub sinks: Option<Tensor>,
}
