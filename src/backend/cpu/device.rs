//! The CPU device (stage 3): its capabilities, and uploads of resident and state tensors.

use super::external::{CpuBytes, CpuState};
use super::plan::compile;
use super::target::MAX_TENSOR_BYTES;
use crate::backend::{Backend, Executable, LocalFuture};
use crate::caps::{next_id, BackendKind, Capabilities, DeviceType};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::graph::{Graph, Tensor};
use crate::options::CompileOptions;
use crate::resident::{Bytes, External, ExternalInfo, ExternalMemory};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// The CPU backend's driver string: on wasm it names the build's SIMD (scripts/build-wasm.sh makes a simd128 build
/// and a relaxed-simd one; the package loads the latter where the engine validates it), so a page can show it.
const DRIVER: &str = if cfg!(all(target_arch = "wasm32", target_feature = "relaxed-simd")) {
    "webtensor cpu (wasm simd128, relaxed-simd)"
} else if cfg!(all(target_arch = "wasm32", target_feature = "simd128")) {
    "webtensor cpu (wasm simd128)"
} else {
    "webtensor cpu"
};

/// The SIMD the CPU backend's kernels run on this machine (figures differ by it: docs/performance.md's were measured with
/// AVX-512 on some days and AVX2 on others): the matmuls' (`gemm` picks at run time) and the quantized dot
/// products' (AVX-512 VNNI on repacked weights, AVX2 + FMA, simd128, else scalar).
fn simd_path() -> &'static str {
    #[cfg(target_arch = "x86_64")]
    {
        let avx2 = std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma");
        if super::qdot::repack::available(crate::dtype::DType::Q4_0) {
            return "AVX-512 matmuls, AVX-512 VNNI quantized matmuls (Q4_0-Q8_0, Q4_K-Q6_K repacked)";
        }
        match (std::arch::is_x86_feature_detected!("avx512f"), avx2) {
            (true, true) => "AVX-512 matmuls, AVX2 quantized dots",
            (false, true) => "AVX2+FMA",
            _ => "SSE2 (no AVX2: slower)",
        }
    }
    #[cfg(target_arch = "aarch64")]
    {
        "NEON matmuls, scalar quantized dots"
    }
    #[cfg(all(target_arch = "wasm32", target_feature = "relaxed-simd"))]
    {
        "wasm simd128 + relaxed-simd"
    }
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128", not(target_feature = "relaxed-simd")))]
    {
        "wasm simd128"
    }
    #[cfg(not(any(
        target_arch = "x86_64",
        target_arch = "aarch64",
        all(target_arch = "wasm32", target_feature = "simd128")
    )))]
    {
        "scalar"
    }
}

pub(crate) struct CpuBackend {
    caps: Capabilities,
    id: u64,
    /// Bytes of the live resident and state tensors on this device.
    resident: Arc<AtomicU64>,
}

impl CpuBackend {
    pub(crate) fn new() -> CpuBackend {
        let threads = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
        CpuBackend {
            caps: Capabilities {
                backend: BackendKind::Cpu,
                name: format!(
                    "{} CPU, {threads} thread{}, {}",
                    std::env::consts::ARCH,
                    if threads == 1 { "" } else { "s" },
                    simd_path()
                ),
                device_type: DeviceType::Cpu,
                driver: DRIVER.into(),
                max_storage_binding_bytes: MAX_TENSOR_BYTES,
                max_buffer_bytes: MAX_TENSOR_BYTES,
                max_workgroup_storage_bytes: 0,
                max_invocations_per_workgroup: 0,
                max_workgroups_per_dimension: 0,
                min_storage_offset_alignment: 4,
                min_uniform_offset_alignment: 4,
                shader_f16: false,
                subgroups: false,
                subgroup_size: (0, 0),
                cooperative_matrix: vec![],
                dtypes: DType::ALL.to_vec(),
                unusable: None,
            },
            id: next_id(),
            resident: Arc::new(AtomicU64::new(0)),
        }
    }
}

/// 8-byte-aligned bytes: an aligned copy of a tensor whose bytes were not.
struct AlignedWords(Vec<u64>);

impl AsRef<[u8]> for AlignedWords {
    fn as_ref(&self) -> &[u8] {
        bytemuck::cast_slice(&self.0)
    }
}

impl Backend for CpuBackend {
    fn capabilities(&self) -> &Capabilities {
        &self.caps
    }

    fn upload(&self, name: &str, dtype: DType, shape: &[usize], bytes: Bytes, writable: bool) -> Result<Arc<External>> {
        let size = bytes.len() as u64;
        if size > MAX_TENSOR_BYTES {
            let what = format!("{name} ({dtype} {shape:?}) on the CPU backend");
            return Err(Error::LimitExceeded {
                what,
                size,
                unit: "bytes",
                limit_name: "the CPU backend's largest tensor",
                limit: MAX_TENSOR_BYTES,
            });
        }
        // the bytes are used where they lie (a mapped file) when they are aligned for their element type; a file
        // that places a tensor at an odd offset (safetensors does not require alignment) gets an aligned copy
        let align = if dtype.is_storage_format() { 1 } else { dtype.size_bytes() };
        let aligned = (bytes.as_slice().as_ptr() as usize).is_multiple_of(align);
        let memory: Box<dyn ExternalMemory> = if writable {
            // zeroed lazily and only the pages with something to copy written: a state made of zeros (a KV cache)
            // costs no memory until used, and never twice its size
            let out_of_memory = || Error::OutOfMemory { what: format!("{name} ({dtype} {shape:?})"), bytes: size };
            let mut words = crate::resident::try_zeroed::<u64>(bytes.len().div_ceil(8)).ok_or_else(out_of_memory)?;
            let dst = &mut bytemuck::cast_slice_mut::<u64, u8>(&mut words)[..bytes.len()];
            for (d, s) in dst.chunks_mut(4096).zip(bytes.as_slice().chunks(4096)) {
                if s.iter().any(|&b| b != 0) {
                    d.copy_from_slice(s);
                }
            }
            Box::new(CpuState::new(words))
        } else if aligned {
            Box::new(CpuBytes::new(bytes))
        } else {
            let mut words = vec![0u64; bytes.len().div_ceil(8)];
            bytemuck::cast_slice_mut::<u64, u8>(&mut words)[..bytes.len()].copy_from_slice(bytes.as_slice());
            let copy = Bytes::from_owner(std::sync::Arc::new(AlignedWords(words)), 0..bytes.len())?;
            Box::new(CpuBytes::new(copy))
        };
        let info = ExternalInfo { name, dtype, shape, writable };
        Ok(External::new(info, self.id, memory, &self.resident))
    }

    fn resident_bytes(&self) -> u64 {
        self.resident.load(Ordering::Relaxed)
    }

    fn compile<'a>(
        &'a self,
        graph: &'a Graph,
        outputs: &'a [Tensor],
        options: &'a CompileOptions,
    ) -> LocalFuture<'a, Result<Box<dyn Executable>>> {
        let plan = compile(graph, outputs, options, self.id).map(|p| Box::new(p) as Box<dyn Executable>);
        Box::pin(async move { plan })
    }
}
