//! Per-device choice of the matmul tile configurations (native only): each candidate that fits the device runs
//! a 512³ matmul (f32 for the tiled kernel; f16 for the cooperative-matrix kernel, on adapters that have it), is
//! checked against the CPU backend (NMSE ≤ 1e-7 for f32, 1e-5 for f16; a candidate that fails is never used),
//! and is timed (best of 3 runs, wall clock around submit and readback). The fastest wins. The result is cached
//! in memory per device and on disk per adapter and driver, in `$XDG_CACHE_HOME/webtensor/matmul-tuning.txt`
//! (or `~/.cache/...`); `WEBTENSOR_TUNE_CACHE=off` disables the file, `WEBTENSOR_MATMUL` skips tuning.

use super::matmul::MatmulChoice::{self, Coop, Generic, Tiled};
use super::matmul::{MatmulKernels, COOP_CONFIGS, TILE_CONFIGS};
use super::plan::GpuPlan;
use super::GpuBackend;
use crate::backend::{CompileOptions, Executable};
use crate::compile::Program;
use crate::{DType, Device, Graph, HostTensor, Result};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

fn cache_file() -> Option<PathBuf> {
    if std::env::var("WEBTENSOR_TUNE_CACHE").as_deref() == Ok("off") {
        return None;
    }
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))?;
    Some(base.join("webtensor").join("matmul-tuning.txt"))
}

fn device_key(gpu: &GpuBackend) -> String {
    let c = &gpu.caps;
    format!("{}|{}|{}", c.backend, c.name, c.driver).replace(['\n', '='], " ")
}

/// The last value stored for `key` in the cache file.
fn cached_line(key: &str) -> Option<String> {
    let text = std::fs::read_to_string(cache_file()?).ok()?;
    text.lines().rev().find_map(|l| Some(l.strip_prefix(key)?.strip_prefix(" = ")?.to_string()))
}

fn cached(key: &str) -> Option<MatmulChoice> {
    cached_line(key)?.parse().ok()
}

fn store(key: &str, choice: &str) {
    let Some(path) = cache_file() else { return };
    let _ = std::fs::create_dir_all(path.parent().expect("a file in a folder"));
    let mut text = std::fs::read_to_string(&path).unwrap_or_default();
    text.push_str(&format!("{key} = {choice}\n"));
    let _ = std::fs::write(&path, text);
}

/// An n³ matmul of `dtype` with its CPU-backend answer, for checking and timing candidates.
struct Problem {
    graph: Graph,
    out: crate::Tensor,
    inputs: Vec<(usize, HostTensor)>,
    want: Vec<f64>,
}

impl Problem {
    fn new(dtype: DType, size: usize) -> Result<Problem> {
        let (m, k, n) = (size, size, size);
        let mut g = Graph::new();
        let a = g.input("a", dtype, &[m, k])?;
        let b = g.input("b", dtype, &[k, n])?;
        let c = g.matmul(a, b)?;
        let gen = |len: usize, seed: u32| -> Vec<f32> {
            (0..len as u32)
                .map(|i| ((i.wrapping_mul(2654435761).wrapping_add(seed) >> 8) % 2001) as f32 / 1000.0 - 1.0)
                .collect()
        };
        let cast = |v: Vec<f32>| match dtype {
            DType::F16 => crate::Data::F16(v.into_iter().map(half::f16::from_f32).collect()),
            _ => crate::Data::F32(v),
        };
        let av = HostTensor::new(&[m, k], cast(gen(m * k, 1)))?;
        let bv = HostTensor::new(&[k, n], cast(gen(k * n, 2)))?;
        let want = Device::cpu().compile(&g, &[c])?.run(&[(a, &av), (b, &bv)])?.remove(0).data.to_f64();
        Ok(Problem { graph: g, out: c, inputs: vec![(a.index(), av), (b.index(), bv)], want })
    }

    /// Builds the plan pinned to `choice`, checks that it uses a kernel named `kernel…` and that its answer
    /// matches the CPU backend's (NMSE ≤ `tolerance`), and times it (best of 3 runs, wall clock around submit
    /// and readback). `Ok(None)`: the candidate does not build, is not used, or is wrong — it is never used.
    async fn time(
        &self,
        gpu: &Arc<GpuBackend>,
        choice: MatmulChoice,
        kernel: &str,
        tolerance: f64,
    ) -> Result<Option<Duration>> {
        let key = device_key(gpu);
        let options = CompileOptions { poison: true, matmul: Some(choice), ..Default::default() };
        let mut plan = match GpuPlan::new(gpu.clone(), Program::new(&self.graph, &[self.out])?, &options).await {
            Ok(p) => p,
            Err(e) => {
                gpu.check_alive("matmul tuning")?; // a lost device is not a verdict on the configuration
                log::warn!("webtensor: matmul config {} does not build on {key}: {e}", choice.name());
                return Ok(None);
            }
        };
        if !plan.stats().kernels.iter().any(|k| k.starts_with(kernel)) {
            log::warn!("webtensor: matmul config {} is not used on {key}: {:?}", choice.name(), plan.stats().kernels);
            return Ok(None);
        }
        let ids: Vec<(usize, &HostTensor)> = self.inputs.iter().map(|(i, t)| (*i, t)).collect();
        let got = plan.run(&ids).await?.remove(0).data.to_f64();
        let want = &self.want;
        let err: f64 =
            got.iter().zip(want).map(|(x, y)| (x - y) * (x - y)).sum::<f64>() / want.iter().map(|y| y * y).sum::<f64>();
        if err.is_nan() || err > tolerance {
            log::warn!("webtensor: matmul config {} is wrong on {key} (NMSE {err:.2e}); never used", choice.name());
            return Ok(None);
        }
        let mut t = Duration::MAX;
        for _ in 0..3 {
            let start = Instant::now();
            plan.run(&ids).await?;
            t = t.min(start.elapsed());
        }
        let n = self.inputs[0].1.shape[0];
        log::info!("webtensor: matmul config {} on {key}: {:.3} ms for {n}³", choice.name(), t.as_secs_f64() * 1e3);
        Ok(Some(t))
    }
}

/// The fastest candidate that passes (see [`Problem::time`]).
async fn fastest(
    gpu: &Arc<GpuBackend>,
    problem: &Problem,
    candidates: impl Iterator<Item = MatmulChoice>,
    kernel: &str,
    tolerance: f64,
) -> Result<Option<MatmulChoice>> {
    let mut best: Option<(Duration, MatmulChoice)> = None;
    for choice in candidates {
        if let Some(t) = problem.time(gpu, choice, kernel, tolerance).await? {
            if best.is_none_or(|(bt, _)| t < bt) {
                best = Some((t, choice));
            }
        }
    }
    Ok(best.map(|(_, c)| c))
}

/// Chooses the matmul kernels for `gpu` (see the module docs).
pub(crate) async fn tune(gpu: &Arc<GpuBackend>) -> Result<MatmulKernels> {
    let key = device_key(gpu);
    let coop_key = format!("{key}|f16 coop");
    let tiled = match cached(&key) {
        Some(c) => {
            log::info!("webtensor: matmul kernel for {key} from the tuning cache: {}", c.name());
            c
        }
        None => {
            let max_shared = gpu.caps.max_workgroup_storage_bytes;
            let candidates = TILE_CONFIGS.iter().filter(|c| c.shared_bytes() <= max_shared).map(|&c| Tiled(c));
            let c = fastest(gpu, &Problem::new(DType::F32, 512)?, candidates, "matmul_tiled", 1e-7)
                .await?
                .unwrap_or(Generic);
            log::info!("webtensor: matmul kernel for {key}: {}", c.name());
            store(&key, &c.name());
            c
        }
    };
    let coop = match gpu.coop_frag {
        None => None,
        Some(frag) => match cached_line(&coop_key) {
            Some(v) => v.parse::<MatmulChoice>().ok().and_then(|c| if let Coop(c) = c { Some(c) } else { None }),
            None => {
                let max_shared = gpu.caps.max_workgroup_storage_bytes;
                let candidates =
                    COOP_CONFIGS.iter().filter(|c| c.frag == frag && c.shared_bytes() <= max_shared).map(|&c| Coop(c));
                // f16 inputs and output, f32 accumulation on both sides: the answers differ by f16 roundings.
                // An emulated device (tests) is checked on a smaller problem: its timings mean nothing.
                let size = if gpu.coop_emulated { 128 } else { 512 };
                let c = fastest(gpu, &Problem::new(DType::F16, size)?, candidates, "matmul_coop", 1e-5).await?;
                let name = c.map_or("none".to_string(), |c| c.name());
                log::info!("webtensor: f16 cooperative-matrix kernel for {key}: {name}");
                store(&coop_key, &name);
                c.and_then(|c| if let Coop(c) = c { Some(c) } else { None })
            }
        },
    };
    Ok(MatmulKernels { tiled, coop })
}
