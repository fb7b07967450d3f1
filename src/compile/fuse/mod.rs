//! Fusion (stage 2, compile pass 2): a list of rewrite rules ([`RULES`]), one file each, applied in order to the
//! program. Each rule finds a pattern of steps, builds the fused step that replaces it, and keeps it only where
//! the backend lowers that step ([`rewrite::Lowers`], the one question a rule asks the backend): a fused step either
//! lowers on every backend that keeps it, or its rule declines and the steps stay as they were.
//!
//! Fused steps stay steps of the shared program, so the memory planner sees them (an absorbed node gets no
//! memory and no kernel) and `tests/fusion.rs` counts them on every backend.
//!
//! Fusion never changes a result: every intermediate keeps the dtype the graph gave it (each backend rounds an
//! f16 node of an expression to f16, and a matmul's product to its dtype before its epilogue), so a fused plan
//! gives the unfused plan's values, overflow to inf included.
//!
//! A new fusion is a file here with its `RULE` and one line in [`RULES`].

mod dual_matmul;
mod elementwise;
mod norm_prologue;
mod rewrite;
mod rope_kv_writes;
mod rope_set_rows;

use super::ir::Program;
use rewrite::{Lowers, Rule};

/// The rules, in the order they apply: each later rule sees the earlier ones' fused steps.
pub(crate) const RULES: [Rule; 5] =
    [elementwise::RULE, rope_set_rows::RULE, dual_matmul::RULE, norm_prologue::RULE, rope_kv_writes::RULE];

/// `program` rewritten by every rule in turn, each asking `lowers` about the steps it fuses.
pub(crate) fn fuse(program: Program, lowers: &Lowers) -> Program {
    RULES.iter().fold(program, |p, rule| {
        let before = p.steps.len();
        let p = (rule.apply)(p, lowers);
        log::debug!("fusion rule {}: {before} -> {} steps", rule.name, p.steps.len());
        p
    })
}
