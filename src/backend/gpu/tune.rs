//! Per-device choice of the matmul tile configuration (native only): each candidate that fits the device runs
//! a 512³ f32 matmul, is checked against the CPU backend (NMSE ≤ 1e-7; a candidate that fails is never used),
//! and is timed (best of 3 runs, wall clock around submit and readback). The fastest wins. The result is cached
//! in memory per device and on disk per adapter and driver, in `$XDG_CACHE_HOME/webtensor/matmul-tuning.txt`
//! (or `~/.cache/...`); `WEBTENSOR_TUNE_CACHE=off` disables the file, `WEBTENSOR_MATMUL` skips tuning.

use super::matmul::{MatmulChoice, TILE_CONFIGS};
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

fn cached(key: &str) -> Option<MatmulChoice> {
    let text = std::fs::read_to_string(cache_file()?).ok()?;
    text.lines().rev().find_map(|l| l.strip_prefix(key)?.strip_prefix(" = ")?.parse().ok())
}

fn store(key: &str, choice: &str) {
    let Some(path) = cache_file() else { return };
    let _ = std::fs::create_dir_all(path.parent().expect("a file in a folder"));
    let mut text = std::fs::read_to_string(&path).unwrap_or_default();
    text.push_str(&format!("{key} = {choice}\n"));
    let _ = std::fs::write(&path, text);
}

/// Chooses the matmul kernel for `gpu` (see the module docs).
pub(crate) async fn tune(gpu: &Arc<GpuBackend>) -> Result<MatmulChoice> {
    let key = device_key(gpu);
    if let Some(c) = cached(&key) {
        log::info!("webtensor: matmul kernel for {key} from the tuning cache: {c:?}");
        return Ok(c);
    }
    let (m, k, n) = (512, 512, 512);
    let mut g = Graph::new();
    let a = g.input("a", DType::F32, &[m, k])?;
    let b = g.input("b", DType::F32, &[k, n])?;
    let c = g.matmul(a, b)?;
    let gen = |len: usize, seed: u32| -> Vec<f32> {
        (0..len as u32)
            .map(|i| ((i.wrapping_mul(2654435761).wrapping_add(seed) >> 8) % 2001) as f32 / 1000.0 - 1.0)
            .collect()
    };
    let av = HostTensor::f32(&[m, k], gen(m * k, 1))?;
    let bv = HostTensor::f32(&[k, n], gen(k * n, 2))?;
    let inputs = [(a, &av), (b, &bv)];
    let want = Device::cpu().compile(&g, &[c])?.run(&inputs)?.remove(0).data.to_f64();
    let ids = [(a.index(), &av), (b.index(), &bv)];
    let mut best: Option<(Duration, MatmulChoice)> = None;
    for cfg in TILE_CONFIGS.iter().filter(|c| c.shared_bytes() <= gpu.caps.max_workgroup_storage_bytes) {
        let choice = MatmulChoice::Tiled(*cfg);
        let options = CompileOptions { poison: true, matmul: Some(choice), ..Default::default() };
        let mut plan = match GpuPlan::new(gpu.clone(), Program::new(&g, &[c])?, &options).await {
            Ok(p) => p,
            Err(e) => {
                gpu.check_alive("matmul tuning")?; // a lost device is not a verdict on the configuration
                log::warn!("webtensor: matmul config {} does not build on {key}: {e}", cfg.name());
                continue;
            }
        };
        let got = plan.run(&ids).await?.remove(0).data.to_f64();
        let err: f64 = got.iter().zip(&want).map(|(x, y)| (x - y) * (x - y)).sum::<f64>()
            / want.iter().map(|y| y * y).sum::<f64>();
        if err.is_nan() || err > 1e-7 {
            log::warn!("webtensor: matmul config {} is wrong on {key} (NMSE {err:.2e}); never used", cfg.name());
            continue;
        }
        let mut t = Duration::MAX;
        for _ in 0..3 {
            let start = Instant::now();
            plan.run(&ids).await?;
            t = t.min(start.elapsed());
        }
        log::info!("webtensor: matmul config {} on {key}: {:.3} ms for 512³", cfg.name(), t.as_secs_f64() * 1e3);
        if best.is_none_or(|(bt, _)| t < bt) {
            best = Some((t, choice));
        }
    }
    let choice = best.map(|(_, c)| c).unwrap_or(MatmulChoice::Generic);
    let name = match choice {
        MatmulChoice::Generic => "generic".to_string(),
        MatmulChoice::Tiled(c) => c.name(),
    };
    log::info!("webtensor: matmul kernel for {key}: {name}");
    store(&key, &name);
    Ok(choice)
}
