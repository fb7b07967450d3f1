//! Per-device choice of the matmul tile configurations (native only): each candidate that fits the device is
//! checked against the CPU backend in all four operand layouts at an off-tile size and on the timed problem
//! (f32 for the tiled kernel; f16 for the cooperative-matrix kernel, on adapters that have it; NMSE ≤ 1e-7 for
//! f32, 1e-5 for f16; a candidate that fails anywhere is never used), then timed on 1024³ (256³ on software
//! adapters): best of 3 runs of a plan of 8 matmuls less a plan of one, so that uploads and readbacks cancel.
//! The fastest wins. The result is cached
//! in memory per device and on disk per adapter and driver, in `$XDG_CACHE_HOME/webtensor/matmul-tuning.txt`
//! (or `~/.cache/...`); `WEBTENSOR_TUNE_CACHE=off` disables the file, `WEBTENSOR_TUNE_CACHE=PATH` puts it
//! elsewhere (see [`crate::tuning::TUNE_CACHE_ENV`] for the format), `WEBTENSOR_MATMUL` skips tuning.

use super::device::GpuBackend;
use super::plan::GpuPlan;
use crate::backend::gpu::config::MatmulKernels;
use crate::backend::Executable;
use crate::caps::{Capabilities, DeviceType};
use crate::dtype::DType;
use crate::error::Result;
use crate::graph::Graph;
use crate::options::CompileOptions;
use crate::run::Fetch;
use crate::tensor::HostTensor;
use crate::tuning::MatmulChoice::{self, Coop, Generic, Tiled};
use crate::tuning::{CoopConfig, TunedKernels, COOP_CONFIGS, TILE_CONFIGS, TUNE_CACHE_ENV};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

fn cache_file() -> Option<PathBuf> {
    match std::env::var(TUNE_CACHE_ENV) {
        Ok(v) if v == "off" => return None,
        Ok(v) if !v.is_empty() => return Some(PathBuf::from(v)),
        _ => {}
    }
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))?;
    Some(base.join("webtensor").join("matmul-tuning.txt"))
}

fn device_key(gpu: &GpuBackend) -> String {
    caps_key(&gpu.caps)
}

/// The tuning cache's key for an adapter: `backend|name|driver`.
fn caps_key(c: &Capabilities) -> String {
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
    if let Some(dir) = path.parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    let mut text = std::fs::read_to_string(&path).unwrap_or_default();
    text.push_str(&format!("{key} = {choice}\n"));
    // replaced whole: a process reading the cache meanwhile sees the old text or the new, never a part
    let _ = crate::io::write_file(&path.display().to_string(), text.as_bytes());
}

/// One graph a candidate runs: `a @ b` summed `reps` times (each a dispatch of its own), with A stored [k, m] and
/// viewed through `t()` when `ta` (B likewise [n, k] when `tb`), and the CPU backend's answer when `checked`.
struct Check {
    graph: Graph,
    out: crate::graph::Tensor,
    inputs: Vec<(usize, HostTensor)>,
    want: Option<Vec<f64>>,
}

impl Check {
    #[allow(clippy::too_many_arguments)]
    fn new(
        dtype: DType,
        m: usize,
        k: usize,
        n: usize,
        ta: bool,
        tb: bool,
        reps: usize,
        checked: bool,
    ) -> Result<Check> {
        let gen = |shape: [usize; 2], seed: u32| -> Result<HostTensor> {
            let v = (0..(shape[0] * shape[1]) as u32)
                .map(|i| ((i.wrapping_mul(2654435761).wrapping_add(seed) >> 8) % 2001) as f32 / 1000.0 - 1.0);
            let data = match dtype {
                DType::F16 => crate::tensor::Data::F16(v.map(half::f16::from_f32).collect()),
                _ => crate::tensor::Data::F32(v.collect()),
            };
            HostTensor::new(&shape, data)
        };
        let (sa, sb) = (if ta { [k, m] } else { [m, k] }, if tb { [n, k] } else { [k, n] });
        let mut g = Graph::new();
        let (a_in, b_in) = (g.input("a", dtype, &sa)?, g.input("b", dtype, &sb)?);
        let a = if ta { g.t(a_in)? } else { a_in };
        let b = if tb { g.t(b_in)? } else { b_in };
        let mut c = g.matmul(a, b)?;
        for _ in 1..reps {
            let d = g.matmul(a, b)?;
            c = g.add(c, d)?;
        }
        let (av, bv) = (gen(sa, 1)?, gen(sb, 2)?);
        let want = if checked {
            let run = crate::backend::cpu::run_graph(&g, &[c], &[(a_in, &av), (b_in, &bv)]);
            Some(run?.remove(0).data.to_f64())
        } else {
            None
        };
        Ok(Check { graph: g, out: c, inputs: vec![(a_in.index(), av), (b_in.index(), bv)], want })
    }

    /// The plan pinned to `choice`, if it builds and its matmuls run the kernel named `kernel…` (outputs
    /// NaN-filled before each run when `poison`, for checking; not for timing); else why not.
    async fn plan(
        &self,
        gpu: &Arc<GpuBackend>,
        choice: MatmulChoice,
        kernel: &str,
        poison: bool,
    ) -> Result<Verdict<GpuPlan>> {
        let options = CompileOptions { poison, matmul: Some(choice), ..Default::default() };
        let pinned = MatmulKernels::pinned(choice);
        let plan = match GpuPlan::compile(gpu, &self.graph, &[self.out], &options, pinned).await {
            Ok(p) => p,
            Err(e) => {
                gpu.check_alive("matmul tuning")?; // a lost device is not a verdict on the configuration
                return Ok(Err(format!("does not build: {e}")));
            }
        };
        Ok(judge(plan.matmul_kernels(), kernel).map(|()| plan))
    }

    /// Runs `plan` once; whether its answer matches the CPU backend's (NMSE ≤ `tolerance`, and no NaN).
    async fn passes(&self, plan: &mut GpuPlan, tolerance: f64) -> Result<bool> {
        let ids: Vec<(usize, &[u8])> = self.inputs.iter().map(|(i, t)| (*i, t.data.as_bytes())).collect();
        let got = plan.run(&ids, &[Fetch::All]).await?.remove(0).expect("fetched").data.to_f64();
        let Some(want) = &self.want else { return Ok(true) };
        let err: f64 =
            got.iter().zip(want).map(|(x, y)| (x - y) * (x - y)).sum::<f64>() / want.iter().map(|y| y * y).sum::<f64>();
        Ok(!err.is_nan() && err <= tolerance)
    }

    /// Best of 3 runs of `plan`, wall clock around upload, submit and readback.
    async fn time(&self, plan: &mut GpuPlan) -> Result<Duration> {
        let ids: Vec<(usize, &[u8])> = self.inputs.iter().map(|(i, t)| (*i, t.data.as_bytes())).collect();
        let mut t = Duration::MAX;
        for _ in 0..3 {
            let start = Instant::now();
            plan.run(&ids, &[Fetch::All]).await?;
            t = t.min(start.elapsed());
        }
        Ok(t)
    }
}

/// The kernel name a plan pinned to `choice` runs its matmuls on (`matmul_tiled 128x128x16`, ...).
pub(crate) fn kernel_name(choice: MatmulChoice) -> String {
    match choice {
        Generic => "matmul".into(),
        Tiled(c) => format!("matmul_tiled {}", c.name()),
        Coop(c) => format!("matmul_coop {}", c.name()),
    }
}

/// Whether a plan whose matmul dispatches run `matmuls` uses the candidate kernel `kernel` (a name prefix such
/// as `matmul_tiled 128x128x16`): every matmul dispatch must, and there must be one. The plan's other dispatches
/// (the adds of the repeated problem, fused or not) are not the candidate's business.
pub(crate) fn judge(matmuls: &[String], kernel: &str) -> std::result::Result<(), String> {
    match matmuls.iter().find(|k| !k.starts_with(kernel)) {
        _ if matmuls.is_empty() => Err("the plan has no matmul dispatch".into()),
        Some(other) => Err(format!("a matmul dispatch runs {other} (matmul dispatches: {matmuls:?})")),
        None => Ok(()),
    }
}

/// A candidate's result, or why it is passed over.
type Verdict<T> = std::result::Result<T, String>;

/// What each candidate must get right, and the problem it is timed on.
struct Problem {
    /// `a @ b` in all four operand layouts at a size that is no multiple of any tile (132 × 100 × 136).
    layouts: Vec<Check>,
    /// One n³ matmul, checked, then timed.
    single: Check,
    /// `reps` n³ matmuls in one plan: the time per matmul is the difference to `single` over reps - 1, so that
    /// the upload and readback (which dominate n³ on a fast GPU) cancel out. None on software adapters.
    repeated: Option<(Check, usize)>,
}

impl Problem {
    /// The problem for `dtype` timed on `reps` matmuls of `size`³; with `checked`, the CPU backend's answers too.
    fn new(dtype: DType, size: usize, reps: usize, checked: bool) -> Result<Problem> {
        let layouts = [(false, false), (false, true), (true, false), (true, true)]
            .into_iter()
            .map(|(ta, tb)| Check::new(dtype, 132, 100, 136, ta, tb, 1, checked))
            .collect::<Result<_>>()?;
        let single = Check::new(dtype, size, size, size, false, false, 1, checked)?;
        let repeated =
            if reps > 1 { Some((Check::new(dtype, size, size, size, false, false, reps, false)?, reps)) } else { None };
        Ok(Problem { layouts, single, repeated })
    }

    /// Checks `choice` (it must build, be used, and match the CPU backend on every check, NMSE ≤ `tolerance`)
    /// and times it. `Ok(Err(why))`: the candidate fails somewhere, and is never used.
    async fn time(
        &self,
        gpu: &Arc<GpuBackend>,
        choice: MatmulChoice,
        kernel: &str,
        tolerance: f64,
    ) -> Result<Verdict<Duration>> {
        for (i, check) in self.layouts.iter().chain([&self.single]).enumerate() {
            let mut plan = match check.plan(gpu, choice, kernel, true).await? {
                Ok(p) => p,
                Err(why) => return Ok(Err(why)),
            };
            if !check.passes(&mut plan, tolerance).await? {
                return Ok(Err(format!("wrong results (check {i}: NMSE over {tolerance:e} against the CPU backend)")));
            }
        }
        let mut plan = match self.single.plan(gpu, choice, kernel, false).await? {
            Ok(p) => p,
            Err(why) => return Ok(Err(why)),
        };
        let single = self.single.time(&mut plan).await?;
        let t = match &self.repeated {
            None => single,
            Some((check, reps)) => {
                let mut plan = match check.plan(gpu, choice, kernel, false).await? {
                    Ok(p) => p,
                    Err(why) => return Ok(Err(why)),
                };
                let all = check.time(&mut plan).await?;
                let per = all.saturating_sub(single) / (*reps as u32 - 1);
                if per.is_zero() {
                    all / *reps as u32
                } else {
                    per
                }
            }
        };
        let n = self.single.inputs[0].1.shape[0];
        let key = device_key(gpu);
        log::debug!("webtensor: matmul config {} on {key}: {:.3} ms for {n}³", choice.name(), t.as_secs_f64() * 1e3);
        Ok(Ok(t))
    }
}

/// The tuner's verdict on `choice` for an adapter with capabilities `caps` (a recorded profile), from its
/// problem's plans compiled without a device: `Err` says why the candidate would be passed over before it is
/// even checked (a plan that does not build, or a matmul dispatch that does not run the candidate).
pub(crate) fn verdict_for_capabilities(caps: &Capabilities, choice: MatmulChoice) -> Result<Verdict<()>> {
    let dtype = if matches!(choice, Coop(_)) { DType::F16 } else { DType::F32 };
    let (size, reps) = problem_size(caps);
    let problem = Problem::new(dtype, size, reps, false)?;
    let options = CompileOptions { matmul: Some(choice), ..Default::default() };
    let repeated = problem.repeated.iter().map(|(c, _)| c);
    for check in problem.layouts.iter().chain([&problem.single]).chain(repeated) {
        let dispatches = match super::profile::plan_for_capabilities(caps, &check.graph, &[check.out], &options) {
            Ok(d) => d,
            Err(e) => return Ok(Err(format!("does not build: {e}"))),
        };
        if let Err(why) = judge(&super::kernel::matmul_kernel_names(&dispatches), &kernel_name(choice)) {
            return Ok(Err(why));
        }
    }
    Ok(Ok(()))
}

/// The fastest candidate that passes (see [`Problem::time`]), and why each other one was passed over.
async fn fastest(
    gpu: &Arc<GpuBackend>,
    problem: &Problem,
    candidates: impl Iterator<Item = MatmulChoice>,
    tolerance: f64,
) -> Result<(Option<MatmulChoice>, Vec<String>)> {
    let key = device_key(gpu);
    let mut best: Option<(Duration, MatmulChoice)> = None;
    let mut rejected = Vec::new();
    for choice in candidates {
        match problem.time(gpu, choice, &kernel_name(choice), tolerance).await? {
            Ok(t) if best.is_none_or(|(bt, _)| t < bt) => best = Some((t, choice)),
            Ok(_) => {}
            Err(why) => {
                log::warn!("webtensor: matmul config {} is not used on {key}: {why}", choice.name());
                rejected.push(format!("{}: {why}", choice.name()));
            }
        }
    }
    Ok((best.map(|(_, c)| c), rejected))
}

/// The timed problem's size n (n³) and repetitions: 1024 × 8 on a GPU, 256 × 1 on a software adapter (where
/// the choice hardly matters and time does).
fn problem_size(caps: &Capabilities) -> (usize, usize) {
    if caps.device_type == DeviceType::Cpu {
        (256, 1)
    } else {
        (1024, 8)
    }
}

/// The configuration of a [`MatmulChoice::Coop`].
fn coop_config(c: MatmulChoice) -> Option<CoopConfig> {
    match c {
        Coop(cfg) => Some(cfg),
        _ => None,
    }
}

/// Says (on the progress log) that tuning `what` for `key` starts, that it is once, and where it is cached.
fn announce(key: &str, what: &str) {
    let cache =
        cache_file().map_or("not cached: WEBTENSOR_TUNE_CACHE=off".into(), |p| format!("cached in {}", p.display()));
    log::info!(
        target: crate::backend::PROGRESS_LOG,
        "webtensor: tuning the {what} for {key} (seconds, up to minutes on a software adapter; once per adapter and driver, {cache})"
    );
}

/// Stores why no candidate was chosen for `key` (`none_chosen`), as the line `key|why = ...` that `webtensor
/// info` prints; an empty reason when one was.
fn store_why(key: &str, none_chosen: bool, rejected: &[String]) {
    let why = if none_chosen { rejected.join("; ") } else { String::new() };
    if none_chosen || cached_line(&format!("{key}|why")).is_some_and(|w| !w.is_empty()) {
        store(&format!("{key}|why"), &why.replace('\n', " "));
    }
}

/// What the tuning cache (see [`TUNE_CACHE_ENV`]) holds for the adapter with capabilities `caps`: what `webtensor
/// info` prints. Native only; nothing is tuned here (the first matmul plan on a device tunes).
pub fn tuned_kernels(caps: &Capabilities) -> TunedKernels {
    let key = caps_key(caps);
    let coop_key = format!("{key}|f16 coop");
    let why = |k: &str| cached_line(&format!("{k}|why")).filter(|w| !w.is_empty());
    TunedKernels {
        tiled: cached_line(&key),
        tiled_why: why(&key),
        coop: cached_line(&coop_key),
        coop_why: why(&coop_key),
    }
}

/// Chooses the matmul kernels for `gpu` (see the module docs).
pub(crate) async fn tune(gpu: &Arc<GpuBackend>) -> Result<MatmulKernels> {
    let key = device_key(gpu);
    let coop_key = format!("{key}|f16 coop");
    let tiled = match cached(&key) {
        Some(c) => {
            log::debug!("webtensor: matmul kernel for {key} from the tuning cache: {}", c.name());
            c
        }
        None => {
            announce(&key, "matmul kernels");
            let start = Instant::now();
            let max_shared = gpu.caps.max_workgroup_storage_bytes;
            let candidates = TILE_CONFIGS.iter().filter(|c| c.shared_bytes() <= max_shared).map(|&c| Tiled(c));
            let (size, reps) = gpu.tune_problem.unwrap_or_else(|| problem_size(&gpu.caps));
            let problem = Problem::new(DType::F32, size, reps, true)?;
            let (best, rejected) = fastest(gpu, &problem, candidates, 1e-7).await?;
            let c = best.unwrap_or(Generic);
            log::info!(target: crate::backend::PROGRESS_LOG, "webtensor: tuned in {:.1} s: {}", start.elapsed().as_secs_f64(), c.name());
            store_why(&key, best.is_none(), &rejected);
            store(&key, &c.name());
            c
        }
    };
    let coop = match gpu.coop_frag {
        None => None,
        Some(frag) => match cached_line(&coop_key) {
            Some(v) => v.parse::<MatmulChoice>().ok().and_then(coop_config),
            None => {
                announce(&coop_key, "f16 cooperative-matrix kernels");
                let start = Instant::now();
                let max_shared = gpu.caps.max_workgroup_storage_bytes;
                // An emulated device (tests) tunes two configurations on a smaller problem: its timings mean
                // nothing, and each configuration is four large shaders to compile (minutes on lavapipe).
                let tried = if gpu.coop_emulated { 2 } else { COOP_CONFIGS.len() };
                let candidates = COOP_CONFIGS
                    .iter()
                    .filter(|c| c.frag == frag && c.shared_bytes() <= max_shared)
                    .take(tried)
                    .map(|&c| Coop(c));
                // f16 inputs and output, f32 accumulation on both sides: the answers differ by f16 roundings.
                let (size, reps) = match gpu.tune_problem {
                    Some(p) => p,
                    None if gpu.coop_emulated => (128, 1),
                    None => problem_size(&gpu.caps),
                };
                let problem = Problem::new(DType::F16, size, reps, true)?;
                let (c, rejected) = fastest(gpu, &problem, candidates, 1e-5).await?;
                let name = c.map_or("none".to_string(), |c| c.name());
                log::info!(target: crate::backend::PROGRESS_LOG, "webtensor: tuned in {:.1} s: {name}", start.elapsed().as_secs_f64());
                store_why(&coop_key, c.is_none(), &rejected);
                store(&coop_key, &name);
                c.and_then(coop_config)
            }
        },
    };
    Ok(MatmulKernels { tiled, coop, pinned: false })
}
