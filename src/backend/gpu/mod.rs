//! The wgpu backend: devices ([`device`]), the kernel vocabulary ([`kernel`], [`params`]), what lowering knows of
//! a device ([`target`]), the kernel families ([`kernels`]: each one file beside its shader), lowering
//! ([`lower`]), WGSL assembly ([`wgsl`]), the variant catalogue, plans ([`plan`]) and per-device tuning (`tune`,
//! native).

pub(crate) mod catalogue;
pub(crate) mod config;
pub(crate) mod device;
pub(crate) mod external;
pub(crate) mod kernel;
pub(crate) mod kernels;
pub(crate) mod lower;
pub(crate) mod params;
pub(crate) mod plan;
pub(crate) mod profile;
pub(crate) mod readback;
pub(crate) mod target;
pub(crate) mod timing;
#[cfg(not(target_arch = "wasm32"))]
pub(crate) mod tune;
pub(crate) mod wgsl;

#[cfg(not(target_arch = "wasm32"))]
pub(crate) use device::enumerate;
pub(crate) use device::GpuBackend;

use super::{Backend, CompileOptions, Executable, LocalFuture};
use crate::backend::gpu::config::MatmulKernels;
use crate::caps::Capabilities;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::graph::Op;
use crate::graph::{Graph, Tensor};
use crate::resident::{Bytes, External, ExternalInfo};
#[cfg(not(target_arch = "wasm32"))]
use crate::tuning::MATMUL_ENV;
use crate::tuning::{MatmulChoice, COOP_CONFIGS, TILE_CONFIGS};
use external::GpuMemory;
use std::sync::Arc;

/// The matmul kernels for a plan: the plan's pin, else `WEBTENSOR_MATMUL`, else the device's choice, tuned on first
/// use natively (the default configuration on wasm).
async fn matmul_choice(gpu: &Arc<GpuBackend>, pinned: Option<MatmulChoice>) -> Result<MatmulKernels> {
    let unknown = |what: String| Error::InvalidArgument {
        op: "matmul",
        reason: format!("{what} is not one of webtensor's matmul configurations (TILE_CONFIGS, COOP_CONFIGS)"),
    };
    if let Some(c) = pinned {
        return match c {
            MatmulChoice::Tiled(cfg) if !TILE_CONFIGS.contains(&cfg) => Err(unknown(format!("{cfg:?}"))),
            MatmulChoice::Coop(cfg) if !COOP_CONFIGS.contains(&cfg) => Err(unknown(format!("{cfg:?}"))),
            c => Ok(MatmulKernels::pinned(c)),
        };
    }
    #[cfg(not(target_arch = "wasm32"))]
    if let Ok(v) = std::env::var(MATMUL_ENV) {
        if !v.is_empty() {
            return Ok(MatmulKernels::pinned(v.parse()?));
        }
    }
    if let Some(c) = *gpu.matmul.lock().unwrap_or_else(|e| e.into_inner()) {
        return Ok(c);
    }
    #[cfg(not(target_arch = "wasm32"))]
    let c = Box::pin(tune::tune(gpu)).await?;
    #[cfg(target_arch = "wasm32")]
    let c =
        MatmulKernels { pinned: false, ..MatmulKernels::pinned(MatmulChoice::Tiled(crate::tuning::DEFAULT_CONFIG)) };
    *gpu.matmul.lock().unwrap_or_else(|e| e.into_inner()) = Some(c);
    Ok(c)
}

/// Compiles a plan on `gpu`: the matmul choice (tuning on first use), then the pass list and the device objects.
async fn compile_plan(
    gpu: &Arc<GpuBackend>,
    graph: &Graph,
    outputs: &[Tensor],
    options: &CompileOptions,
) -> Result<plan::GpuPlan> {
    gpu.check_alive("compile")?;
    // tuning runs on a device's first matmul (a dead one counts too: tuning happens once per device anyway)
    let matmul = if graph.nodes.iter().any(|n| matches!(n.op, Op::MatMul { .. })) {
        matmul_choice(gpu, options.matmul).await?
    } else {
        MatmulKernels::pinned(MatmulChoice::Generic)
    };
    plan::GpuPlan::compile(gpu, graph, outputs, options, matmul).await
}

impl Backend for Arc<GpuBackend> {
    fn capabilities(&self) -> &Capabilities {
        &self.caps
    }

    fn upload(&self, name: &str, dtype: DType, shape: &[usize], bytes: Bytes, writable: bool) -> Result<Arc<External>> {
        let size = bytes.len() as u64;
        if size > self.caps.max_buffer_bytes {
            let what = format!("{name} ({dtype} {shape:?})");
            let limit = self.caps.max_buffer_bytes;
            return Err(Error::LimitExceeded { what, size, unit: "bytes", limit_name: "max_buffer_size", limit });
        }
        #[cfg(not(target_arch = "wasm32"))]
        let _serial = self.serialize();
        self.check_alive(&format!("uploading {name}"))?;
        let usage = wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST | wgpu::BufferUsages::COPY_SRC;
        let buffer = self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some(name),
            size: size.div_ceil(4).max(1) * 4,
            usage,
            mapped_at_creation: false,
        });
        let data = bytes.as_slice();
        let whole = data.len() / 4 * 4;
        // in pieces, so the queue's staging copy of a large weight stays small
        for start in (0..whole).step_by(64 << 20) {
            let end = (start + (64 << 20)).min(whole);
            self.queue.write_buffer(&buffer, start as u64, &data[start..end]);
        }
        if whole < data.len() {
            let mut tail = data[whole..].to_vec();
            tail.resize(4, 0);
            self.queue.write_buffer(&buffer, whole as u64, &tail);
        }
        let memory = Box::new(GpuMemory { buffer, device: self.clone() });
        let info = ExternalInfo { name, dtype, shape, writable };
        Ok(External::new(info, self.id, memory, &self.resident))
    }

    fn resident_bytes(&self) -> u64 {
        self.resident.load(std::sync::atomic::Ordering::Relaxed)
    }

    fn resource_counts(&self) -> Option<[isize; 3]> {
        #[cfg(not(target_arch = "wasm32"))]
        {
            let c = self.device.get_internal_counters().hal;
            Some([c.buffers.read(), c.bind_groups.read(), c.compute_pipelines.read()])
        }
        #[cfg(target_arch = "wasm32")]
        None
    }

    fn compile<'a>(
        &'a self,
        graph: &'a Graph,
        outputs: &'a [Tensor],
        options: &'a CompileOptions,
    ) -> LocalFuture<'a, Result<Box<dyn Executable>>> {
        Box::pin(async move {
            #[cfg(not(target_arch = "wasm32"))]
            let _serial = self.serialize();
            let plan: Box<dyn Executable> = Box::new(compile_plan(self, graph, outputs, options).await?);
            Ok(plan)
        })
    }

    fn destroy_for_tests(&self) {
        #[cfg(not(target_arch = "wasm32"))]
        let _serial = self.serialize(); // releases GL objects: see `GpuBackend::serialize`
        self.device.destroy();
    }

    fn build_wgsl_for_tests<'a>(&'a self, wgsl: &'a str) -> LocalFuture<'a, Result<()>> {
        Box::pin(async move {
            #[cfg(not(target_arch = "wasm32"))]
            let _serial = self.serialize();
            self.create_pipeline(wgsl, "a test shader").await.map(drop)
        })
    }
}
