//! Plans for a recorded adapter profile: the pass list and lowering with every adapter-dependent decision taken
//! from a [`Capabilities`], without a device (`tests/profiles.rs`, the tuner's offline verdict).

use super::config::MatmulKernels;
use super::kernel::Dispatch;
use super::target::{coop_fragment, GpuTarget};
use crate::caps::Capabilities;
use crate::error::{Error, Result};
use crate::graph::{Graph, Tensor};
use crate::options::CompileOptions;
use crate::tuning::{MatmulChoice, COOP_CONFIGS, DEFAULT_CONFIG};

/// The matmul kernels a device with capabilities `caps` runs when nothing is pinned and it has not been tuned:
/// the default tiled configuration, and the first cooperative-matrix configuration that fits where the adapter
/// has cooperative matrices webtensor can use (what [`plan_for_capabilities`] assumes).
fn untuned_kernels(caps: &Capabilities) -> MatmulKernels {
    let coop = coop_fragment(caps).and_then(|frag| {
        COOP_CONFIGS.iter().copied().find(|c| c.frag == frag && c.shared_bytes() <= caps.max_workgroup_storage_bytes)
    });
    MatmulKernels { tiled: MatmulChoice::Tiled(DEFAULT_CONFIG), coop, pinned: false }
}

/// The dispatches a GPU with capabilities `caps` (a recorded adapter profile) runs for `outputs` of `graph`,
/// compiled without a device: the pass list and lowering with every adapter-dependent decision taken from
/// `caps`. The matmul kernels are `options.matmul` when pinned, else [`untuned_kernels`].
pub(crate) fn plan_for_capabilities(
    caps: &Capabilities,
    graph: &Graph,
    outputs: &[Tensor],
    options: &CompileOptions,
) -> Result<Vec<Dispatch>> {
    if let Some(why) = &caps.unusable {
        return Err(Error::NoDevice(format!("{} ({}) cannot run compute kernels: {why}", caps.name, caps.backend)));
    }
    let matmul = options.matmul.map_or_else(|| untuned_kernels(caps), MatmulKernels::pinned);
    let target = GpuTarget::new(caps, matmul, !options.no_fusion, PROFILE_DEVICE);
    let compiled = crate::compile::compile(graph, outputs, &target)?;
    Ok(compiled.kernels.into_iter().flatten().collect())
}

/// The device identity of a plan compiled for a profile (no resident tensor can be on it).
const PROFILE_DEVICE: u64 = u64::MAX;
