//! gated_delta_net (`gated_delta_net.wgsl`): the gated delta rule token by token, a workgroup a block of a
//! head's value rows.

use crate::backend::gpu::kernel::{Binding, Dispatch, Family, KernelKey, KernelKind};
use crate::backend::gpu::params::{params, Params, ParamsBlock, ParamsLayout};
use crate::backend::gpu::target::{dispatch, grid, GpuTarget};
use crate::backend::gpu::wgsl::template::render;
use crate::compile::ir::{Program, Step};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::graph::{NodeId, Op};

const GATED_DELTA_NET: &str = include_str!("gated_delta_net.wgsl");

/// Value rows a workgroup (`ROWS` in the shader).
const ROWS: usize = 64;
/// The widest key head the shader's workgroup arrays hold (`MAX_DK`).
const MAX_DK: usize = 256;
/// Loop iterations an invocation may run in one dispatch: llvmpipe (Mesa's gallivm) ends any loop after 65535
/// iterations, nested loops' counted together (measured: a 600-token step stopped at token 493 with Dk = 64,
/// `2·Dk + 5` iterations a token), so a step's tokens go in dispatches of fewer.
const LOOP_BUDGET: usize = 60_000;

params! {
    /// `gated_delta_net.wgsl`: the gated delta rule over T tokens.
    GatedDeltaNetParams {
        /// Batch B.
        b: u32,
        /// Tokens T.
        t: u32,
        /// Key heads Hk.
        hk: u32,
        /// Key width Dk.
        dk: u32,
        /// Value heads Hv.
        hv: u32,
        /// Value width Dv.
        dv: u32,
        /// The output's scale.
        scale: f32,
        /// Where the states start in the output (B·T·Hv·Dv).
        states_at: u32,
        /// The operands' offsets within their bindings.
        q_offset: u32,
        k_offset: u32,
        v_offset: u32,
        g_offset: u32,
        beta_offset: u32,
        state_offset: u32,
        /// The first token of this dispatch (0: the state copied in first).
        t0: u32,
        /// Tokens this dispatch.
        tn: u32,
    }
}

/// `gated_delta_net.wgsl`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct GatedDeltaNet;

impl Family for GatedDeltaNet {
    fn name(&self) -> String {
        "gated_delta_net".into()
    }

    fn params(&self) -> ParamsLayout {
        GatedDeltaNetParams::layout()
    }

    fn bindings(&self, key: &KernelKey) -> Vec<Binding> {
        let ins = (0..6).map(|i| Binding::input(format!("src{i}"), key.ins[i]));
        std::iter::once(Binding::output("out", key.out)).chain(ins).collect()
    }

    fn wgsl(&self, _key: &KernelKey, bindings: String) -> String {
        render(GATED_DELTA_NET, &[("BINDINGS", bindings)])
    }
}

/// Lowers gated_delta_net (its operands contiguous f32: `Graph::gated_delta_net` makes them so).
pub(crate) fn lower(program: &Program, id: NodeId, t: &GpuTarget) -> Option<Result<Vec<Dispatch>>> {
    let nodes = &program.nodes;
    let Step::Op(Op::GatedDeltaNet { q, k, v, g, beta, state, scale }) = nodes[id].step else { return None };
    let (sq, sv) = (&nodes[q].layout.shape, &nodes[v].layout.shape);
    let (b, tokens, hk, dk, hv, dv) = (sq[0], sq[1], sq[2], sq[3], sv[2], sv[3]);
    if dk > MAX_DK {
        let reason = format!("key heads of {dk} are wider than the GPU kernel's {MAX_DK}");
        return Some(Err(Error::Unsupported { op: "gated_delta_net".into(), backend: "gpu".into(), reason }));
    }
    let offset = |n: NodeId| nodes[n].layout.offset as u32;
    let p = GatedDeltaNetParams {
        b: b as u32,
        t: tokens as u32,
        hk: hk as u32,
        dk: dk as u32,
        hv: hv as u32,
        dv: dv as u32,
        scale,
        states_at: (b * tokens * hv * dv) as u32,
        q_offset: offset(q),
        k_offset: offset(k),
        v_offset: offset(v),
        g_offset: offset(g),
        beta_offset: offset(beta),
        state_offset: offset(state),
        t0: 0,
        tn: 0,
    };
    let key = KernelKey::new(KernelKind::new(GatedDeltaNet), DType::F32, vec![DType::F32; 6]);
    let bindings: Vec<NodeId> = std::iter::once(id).chain([q, k, v, g, beta, state].map(|n| nodes[n].storage)).collect();
    let groups = (b * hv * dv.div_ceil(ROWS)) as u64;
    let workgroups = grid("gated_delta_net", groups, t.max_groups);
    let per_dispatch = ((LOOP_BUDGET - dk) / (2 * dk + 8)).max(1);
    Some(workgroups.map(|g| {
        (0..tokens.max(1))
            .step_by(per_dispatch)
            .map(|t0| {
                let tn = per_dispatch.min(tokens - t0);
                let p = GatedDeltaNetParams { t0: t0 as u32, tn: tn as u32, ..p };
                dispatch(key.clone(), Params::new(p), bindings.clone(), g)
            })
            .collect()
    }))
}

/// f32 only.
pub(crate) fn variants(keys: &mut Vec<KernelKey>) {
    keys.push(KernelKey::new(KernelKind::new(GatedDeltaNet), DType::F32, vec![DType::F32; 6]));
}
