//! `webtensor demo`: ggml's examples/simple on the chosen device, printed as ggml prints it, then an NxN f32
//! matmul timed on the chosen device and on the CPU backend, and checked against the CPU backend.

use super::device::{choose_device, describe};
use super::error::CliError;
use super::util::{self, outln, SplitMix64};
use indicatif::{ProgressBar, ProgressStyle};
use std::time::Duration;
use webtensor::{DType, Device, Graph, HostTensor, PlanStats};

#[derive(clap::Args)]
pub struct DemoArgs {
    /// Size of the NxN f32 matmul.
    #[arg(long, default_value_t = 1024, value_parser = clap::value_parser!(u32).range(1..=16384))]
    n: u32,
    /// Device to run on. Without the flag, Device::best() decides and honours WEBTENSOR_BACKEND; `auto` takes
    /// the best GPU adapter, else the CPU, ignoring that variable.
    #[arg(long, value_parser = crate::cli::device::backend_parser())]
    backend: Option<webtensor::BackendKind>,
    /// Print the NxN plan's statistics (dispatches, pipelines, kernels, buffers, memory).
    #[arg(long)]
    stats: bool,
    /// Most timed runs after one warm-up run; the median is reported. Timing stops early after
    /// 5 s once 3 runs are done, so that slow devices (llvmpipe) finish quickly.
    #[arg(long, default_value_t = 7, value_parser = clap::value_parser!(u32).range(1..=1000))]
    runs: u32,
}

/// Timing stops after this much time once [`MIN_RUNS`] runs are done.
const TIME_BUDGET: Duration = Duration::from_secs(5);
const MIN_RUNS: usize = 3;

/// Largest error accepted, relative to the largest reference value.
const TOLERANCE: f64 = 1e-3;

/// ggml examples/simple: A 4x2, B 3x2, `ggml_mul_mat(A, B)` = B·Aᵀ, 3x4.
const SEED_A: [f32; 8] = [2., 8., 5., 1., 4., 2., 8., 6.];
const SEED_B: [f32; 6] = [10., 5., 9., 9., 5., 4.];
const SEED_C: [f32; 12] = [60., 55., 50., 110., 90., 54., 54., 126., 42., 29., 28., 64.];

/// Runs the seed example on `device`, prints it as ggml's simple-ctx does, and checks every value.
fn seed(device: &Device) -> Result<(), CliError> {
    let mut g = Graph::new();
    let a = g.input("a", DType::F32, &[4, 2])?;
    let b = g.input("b", DType::F32, &[3, 2])?;
    let at = g.t(a)?;
    let c = g.matmul(b, at)?;
    let av = HostTensor::f32(&[4, 2], SEED_A.to_vec())?;
    let bv = HostTensor::f32(&[3, 2], SEED_B.to_vec())?;
    let out = device.compile(&g, &[c])?.run(&[(a, &av), (b, &bv)])?;
    let (shape, v) = (&out[0].shape, out[0].data.to_f32());
    let [rows, cols] = shape[..] else {
        return Err(CliError::Msg(format!("seed example: result has shape {shape:?}, expected [3, 4]")));
    };
    // ggml prints ne[0] x ne[1], i.e. columns x rows.
    let mut s = format!("mul mat ({cols} x {rows}) (transposed result):\n[");
    for (j, row) in v.chunks(cols).enumerate() {
        if j > 0 {
            s.push('\n');
        }
        for x in row {
            s += &format!(" {x:.2}");
        }
    }
    outln!("{s} ]");
    if shape[..] != [3, 4] || v.iter().zip(SEED_C).any(|(g, w)| (g - w).abs() > 1e-4) {
        return Err(CliError::Msg(format!(
            "seed example on {} is wrong: got {v:?}, expected {SEED_C:?}",
            describe(device)
        )));
    }
    Ok(())
}

struct Bench {
    out: Vec<f32>,
    runs: usize,
    median: Duration,
    min: Duration,
    compile: Duration,
    stats: PlanStats,
}

/// The GPU's own time for one n³ matmul: the median of a plan of [`CHAIN`] matmuls (summed: the adds ride in
/// their epilogues) less the median of the one-matmul run, over `CHAIN - 1`: uploads and readback cancel.
const CHAIN: usize = 5;

fn compute_time(device: &Device, a: &HostTensor, b: &HostTensor, one: Duration) -> Result<Duration, CliError> {
    let mut g = Graph::new();
    let ta = g.input("a", DType::F32, &a.shape)?;
    let tb = g.input("b", DType::F32, &b.shape)?;
    let mut c = g.matmul(ta, tb)?;
    for _ in 1..CHAIN {
        let d = g.matmul(ta, tb)?;
        c = g.add(c, d)?;
    }
    let mut plan = device.compile(&g, &[c])?;
    let inputs = [(ta, a), (tb, b)];
    plan.run(&inputs)?;
    let mut samples = Vec::new();
    for _ in 0..MIN_RUNS.max(3) {
        samples.push(util::timed(|| plan.run(&inputs)).1);
    }
    let chain = util::median(&mut samples);
    Ok(chain.saturating_sub(one) / (CHAIN as u32 - 1))
}

/// Compiles `a @ b` for `device`, runs it once to warm up, then `runs` times, timing each run (upload,
/// dispatch, readback).
fn bench(device: &Device, a: &HostTensor, b: &HostTensor, runs: u32, label: &str) -> Result<Bench, CliError> {
    let mut g = Graph::new();
    let ta = g.input("a", DType::F32, &a.shape)?;
    let tb = g.input("b", DType::F32, &b.shape)?;
    let c = g.matmul(ta, tb)?;
    let (plan, compile) = util::timed(|| device.compile(&g, &[c]));
    let mut plan = plan?;
    let inputs = [(ta, a), (tb, b)];
    let pb = ProgressBar::new(u64::from(runs) + 1).with_message(format!("{label}: warm-up"));
    if let Ok(style) = ProgressStyle::with_template("{msg:30} [{bar:30}] {pos}/{len} runs") {
        pb.set_style(style.progress_chars("=> "));
    }
    let mut out = plan.run(&inputs)?;
    pb.inc(1);
    pb.set_message(format!("{label}: timing"));
    let mut samples = Vec::with_capacity(runs as usize);
    for _ in 0..runs {
        let (r, d) = util::timed(|| plan.run(&inputs));
        out = r?;
        samples.push(d);
        pb.inc(1);
        if samples.len() >= MIN_RUNS && samples.iter().sum::<Duration>() > TIME_BUDGET {
            break;
        }
    }
    pb.finish_and_clear();
    let min = samples.iter().copied().min().unwrap_or_default();
    let runs = samples.len();
    Ok(Bench {
        out: out.swap_remove(0).data.to_f32(),
        runs,
        median: util::median(&mut samples),
        min,
        compile,
        stats: plan.stats(),
    })
}

fn gflops(n: usize, t: Duration) -> f64 {
    2.0 * (n as f64).powi(3) / t.as_secs_f64() / 1e9
}

fn timing_line(label: &str, n: usize, b: &Bench) -> String {
    format!(
        "  {label:<44} {:>10.3} ms {:>9.2} GFLOP/s   (median of {} runs, min {:.3} ms, compile {:.1} ms)",
        util::ms(b.median),
        gflops(n, b.median),
        b.runs,
        util::ms(b.min),
        util::ms(b.compile)
    )
}

/// Largest error of `c` at a few sampled entries against the exact product of `a` and `b` (n x n, f64),
/// relative to the largest exact value there: checks the CPU backend, the reference, itself.
fn spot_check(n: usize, a: &[f32], b: &[f32], c: &[f32]) -> f64 {
    let mut rng = SplitMix64::new(0x5eed);
    let (mut err, mut scale) = (0f64, 0f64);
    for _ in 0..64 {
        let (i, j) = ((rng.next_u64() % n as u64) as usize, (rng.next_u64() % n as u64) as usize);
        let exact: f64 = (0..n).map(|k| a[i * n + k] as f64 * b[k * n + j] as f64).sum();
        let d = (c[i * n + j] as f64 - exact).abs();
        if d.is_nan() {
            return f64::INFINITY;
        }
        err = err.max(d);
        scale = scale.max(exact.abs());
    }
    if err == 0.0 {
        0.0
    } else {
        err / scale
    }
}

fn check(what: &str, err: f64) -> Result<(), CliError> {
    let ok = err <= TOLERANCE;
    outln!(
        "  check: {what}: max relative error {err:.2e} (limit {TOLERANCE:.0e}): {}",
        if ok { "ok" } else { "FAILED" }
    );
    if ok {
        Ok(())
    } else {
        Err(CliError::Msg(format!("{what}: max relative error {err:.2e} exceeds {TOLERANCE:.0e}")))
    }
}

/// On a hardware GPU whose matmuls run the generic kernel, says so and why (the tuner found no tiled
/// configuration correct there).
fn generic_note(caps: &webtensor::Capabilities, stats: &PlanStats) {
    if caps.device_type == webtensor::DeviceType::Cpu || !stats.kernels.iter().any(|k| k == "matmul") {
        return;
    }
    let why = webtensor::gpu::tuned_kernels(caps).tiled_why;
    let why = why.map_or(String::new(), |w| format!(": {w}"));
    outln!("note: {} runs the generic matmul kernel, the slowest; the tuner found no tiled configuration correct there{why}", caps.name);
}

/// The device's timing line, and how much of it is compute and how much moving data and overhead.
fn device_lines(device: &Device, (a, b): (&HostTensor, &HostTensor), n: usize, d: &Bench) -> Result<(), CliError> {
    let caps = device.capabilities();
    outln!("{}", timing_line(&format!("{} [{}]", caps.name, caps.backend), n, d));
    let compute = compute_time(device, a, b, d.median)?.min(d.median);
    let t = &d.stats.transfer;
    let moved = util::bytes(t.upload_bytes + t.readback_bytes);
    let rest = d.median - compute;
    let rate = (t.upload_bytes + t.readback_bytes) as f64 / rest.as_secs_f64().max(1e-9) / 1e9;
    let split = if rest.as_secs_f64() < 0.02 * d.median.as_secs_f64() {
        format!("moving {moved} within the timing noise")
    } else {
        // a rate only where the transfers are most of what is left
        let rate = if rate >= 0.1 { format!(", {rate:.1} GB/s") } else { String::new() };
        format!("moving {moved} and the run's overhead {:.3} ms{rate}", util::ms(rest))
    };
    outln!("    of which compute {:.3} ms ({:.2} GFLOP/s), {split}", util::ms(compute), gflops(n, compute));
    Ok(())
}

/// The device against the CPU backend, `speedup` the device's.
fn speedup_line(caps: &webtensor::Capabilities, speedup: f64) -> String {
    let backend = &caps.backend;
    if speedup >= 1.0 {
        return format!("  {backend} is {speedup:.1}x faster than the CPU backend");
    }
    let why =
        if caps.device_type == webtensor::DeviceType::Cpu { " (this adapter is itself a CPU emulation)" } else { "" };
    format!("  the CPU backend is {:.1}x faster than {backend}{why}", 1.0 / speedup)
}

/// `--stats`: the plan's counts.
fn stats_lines(s: &PlanStats, n: usize, device: &Device) {
    outln!("\nplan stats ({n}x{n} matmul on {}):", describe(device));
    outln!("  {:<18} {}", "dispatches", s.dispatches);
    outln!("  {:<18} {}", "pipelines", s.pipelines);
    let kernels = if s.kernels.is_empty() { "-".to_string() } else { s.kernels.join(", ") };
    outln!("  {:<18} {kernels}", "kernels");
    outln!("  {:<18} {}", "buffers", s.buffers);
    outln!("  {:<18} {}", "memory", util::bytes(s.memory_bytes));
    outln!("  {:<18} {}", "peak live", util::bytes(s.peak_live_bytes));
    let t = &s.transfer;
    let (up, down, host) = (util::bytes(t.upload_bytes), util::bytes(t.readback_bytes), util::bytes(t.host_copy_bytes));
    outln!("  {:<18} {up} up, {down} down, {host} copied by the host (a run)", "transfers");
}

pub fn run(args: &DemoArgs) -> Result<(), CliError> {
    let n = args.n as usize;
    let chosen = choose_device(args.backend)?;
    let device = &chosen.device;
    outln!("device: {} (chosen by {})", describe(device), chosen.how);
    if chosen.fell_back {
        let why = crate::cli::device::fallback_reason(&Device::adapters());
        outln!("note: running on the CPU backend: {why}; the GPU path is not exercised");
    }
    outln!();
    seed(device)?;
    outln!("seed example: ok (matches ggml's 60 55 50 110 / 90 54 54 126 / 42 29 28 64)\n");

    let mut rng = SplitMix64::new(42);
    let a = HostTensor::f32(&[n, n], rng.vec_f32(n * n))?;
    let b = HostTensor::f32(&[n, n], rng.vec_f32(n * n))?;
    outln!(
        "matmul {n}x{n} @ {n}x{n} f32 (splitmix64 inputs in [-1, 1)); median time after a warm-up run, \
         each run = upload + compute + readback"
    );
    let cpu_label = "CPU backend";
    let (dev_bench, cpu_bench) = if device.is_cpu() {
        (None, bench(device, &a, &b, args.runs, cpu_label)?)
    } else {
        let d = bench(device, &a, &b, args.runs, device.capabilities().backend.name())?;
        let cpu = bench(&Device::cpu(), &a, &b, args.runs, cpu_label)?;
        (Some(d), cpu)
    };
    let dev_caps = device.capabilities();
    if let Some(d) = &dev_bench {
        device_lines(device, (&a, &b), n, d)?;
    }
    let cpu_name = if device.is_cpu() { format!("{cpu_label} (the device itself)") } else { cpu_label.to_string() };
    outln!("{}", timing_line(&cpu_name, n, &cpu_bench));
    if let Some(d) = &dev_bench {
        outln!("{}", speedup_line(dev_caps, cpu_bench.median.as_secs_f64() / d.median.as_secs_f64()));
    }
    let (a32, b32) = (a.data.to_f32(), b.data.to_f32());
    check("CPU backend vs exact f64 at 64 sampled entries", spot_check(n, &a32, &b32, &cpu_bench.out))?;
    match &dev_bench {
        Some(d) => check(
            &format!("{} vs CPU backend, all {} entries", dev_caps.backend, n * n),
            util::max_rel_error(&d.out, &cpu_bench.out),
        )?,
        None => outln!("  (the device is the CPU backend, so there is no second backend to compare with)"),
    }
    if args.stats {
        stats_lines(&dev_bench.as_ref().unwrap_or(&cpu_bench).stats, n, device);
    }
    if let Some(d) = &dev_bench {
        generic_note(dev_caps, &d.stats);
    }
    Ok(())
}
