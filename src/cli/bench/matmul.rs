//! `webtensor bench matmul`: this library (the chosen device and the CPU backend) against the peers present on
//! the machine — numpy on the CPU, PyTorch on CUDA (f32 with TF32 off, TF32, f16) — in ONE run, interleaved
//! sample by sample, with a progress bar. Writes `matmul.md`, `matmul.json` and `matmul.svg` to `--out` and
//! prints the markdown table last.
//!
//! Method (also written into the reports): every figure is the median of `--repeats` samples taken after a
//! warm-up; in each round every library takes one sample in turn. For webtensor, "run" is `Plan::run` of a
//! plan with one op (upload + dispatch + readback; a sample is the mean of back-to-back runs filling ≥ 20 ms,
//! as for numpy and torch) and the headline "kernel" figure is the marginal time of one op: (run of a plan chaining 1+Q ops − run of the one-op plan) / Q. The uploads and the readback are the
//! same in both plans and cancel, so the kernel figure compares with the peers, whose data stay on their
//! device. 1 GFLOP = 10⁹ floating-point operations, 2·M·N·K per matmul. Mat-vec reports GB/s of weights
//! (bytes of W / time); copy bandwidth is (read + write bytes) / time of a plain copy (`Graph::contiguous`,
//! torch's `dst.copy_(src)`), the yardstick for mat-vec.

use super::helper::median;
use super::work::{build, data, Built, Entry, Measured, Timing, Work};
use super::{peer, report};
use crate::cli::device::{choose_device, describe};
use crate::cli::error::CliError;
use crate::cli::util::{emit, outln};
use indicatif::{ProgressBar, ProgressStyle};
use std::path::PathBuf;
use std::time::{Duration, Instant};
use webtensor::{DType, Device, HostTensor, Tensor};

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum PeerArg {
    Numpy,
    Torch,
    None,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum DtypeArg {
    F32,
    F16,
    All,
}

#[derive(clap::Args)]
pub struct MatmulArgs {
    /// Sizes N of the square N×N · N×N matmuls.
    #[arg(long, value_delimiter = ',', default_value = "256,512,1024,2048",
          value_parser = clap::value_parser!(u32).range(1..=32768))]
    sizes: Vec<u32>,
    /// Peers to run alongside: numpy (CPU, its BLAS), torch (CUDA: f32 with TF32 off, TF32, f16), or none.
    /// A peer that is not installed is reported as absent.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "numpy,torch")]
    vs: Vec<PeerArg>,
    /// Device for webtensor besides the CPU backend. Without the flag, Device::best() decides and honours
    /// WEBTENSOR_BACKEND.
    #[arg(long, value_parser = crate::cli::device::backend_parser())]
    backend: Option<webtensor::BackendKind>,
    /// Element type of the matmuls (f16: f16 in, f16 out, f32 accumulation).
    #[arg(long, value_enum, default_value = "f32")]
    dtype: DtypeArg,
    /// Also time mat-vec 1×K · K×N (K = N) with f16 weights, as W [K, N] and as a transposed view of W [N, K],
    /// and the device's copy bandwidth.
    #[arg(long)]
    matvec: bool,
    /// K = N of the mat-vec [default: 8192; 4096 on software adapters such as lavapipe].
    #[arg(long, value_parser = clap::value_parser!(u32).range(4..=65536))]
    matvec_size: Option<u32>,
    /// Block-quantized weight types (q4_0, q4_1, q5_0, q5_1, q8_0, q2_k, q3_k, q4_k, q5_k, q6_k), each timed as
    /// a decode step's mat-vec x f32 [1, K] · t(W [K, K]) (K as --matvec-size; GB/s of the blocks, beside the
    /// copy bandwidth) and as a prefill projection x f32 [512, K] · t(W [K, K]) (K as --prefill-size) beside
    /// torch f16 on the same shape (cuBLAS on the weights dequantized).
    #[arg(long, value_delimiter = ',', value_parser = quant_type)]
    quant: Vec<DType>,
    /// K = N of --quant's prefill projections [default: 4096; 1024 on software adapters such as lavapipe].
    #[arg(long, value_parser = clap::value_parser!(u32).range(256..=65536))]
    prefill_size: Option<u32>,
    /// Timed samples per library and workload, after one warm-up; medians are reported.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=1000))]
    repeats: u32,
    /// Folder for matmul.md, matmul.json and matmul.svg (created if missing; files there are replaced whole).
    #[arg(long, default_value = "bench-results")]
    out: PathBuf,
    /// Largest N timed on the CPU (webtensor's CPU backend and numpy); 0 leaves the CPU out.
    #[arg(long, default_value_t = 4096)]
    cpu_max: usize,
    /// Python interpreter that runs the peers.
    #[arg(long, default_value = "python3")]
    python: String,
}

/// Rows of the quantized prefill projection ([`Work::QuantMatMul`]), llama-bench's pp512.
const PREFILL_ROWS: usize = 512;

/// A `--quant` value: a block-quantized type by its GGUF name.
fn quant_type(s: &str) -> Result<DType, String> {
    let blocks = || DType::ALL.into_iter().filter(|d| d.block_size() > 1);
    blocks().find(|d| d.name().eq_ignore_ascii_case(s)).ok_or_else(|| {
        format!("not a block-quantized type; one of {}", blocks().map(DType::name).collect::<Vec<_>>().join(", "))
    })
}

/// Least extra time of the chained plan over the one-op plan (see [`Ours::new`]).
const CHAIN_SECONDS: f64 = 0.15;
/// Least duration of one sample of the one-op plan, as for the peers (scripts/peer_matmul.py).
const SAMPLE_SECONDS: f64 = 0.02;
/// Chain length of the probe that estimates one op's time, and the longest chain.
const PROBE_Q: usize = 4;
const MAX_Q: usize = 512;
/// Pause before each CPU-bound sample, so that the previous library's spinning worker threads have gone to
/// sleep and do not steal cores from the next. OpenBLAS's threads spin for 2^28 cycles (about 0.1 s) after a
/// call; with a 50 ms pause, webtensor's CPU samples that followed numpy's ran at about half speed on 2 cores.
const SETTLE: Duration = Duration::from_millis(300);
/// Bytes copied by the copy-bandwidth workload (less where the device's largest binding is smaller).
const COPY_BYTES: u64 = 256 << 20;

/// Mean seconds of `times` back-to-back `Plan::run`s.
fn run_mean(b: &mut Built, data: &[HostTensor], times: usize) -> webtensor::Result<f64> {
    let inputs: Vec<(Tensor, &HostTensor)> = b.inputs.iter().copied().zip(data).collect();
    let t0 = Instant::now();
    for _ in 0..times {
        b.plan.run(&inputs)?;
    }
    Ok(t0.elapsed().as_secs_f64() / times as f64)
}

fn run_once(b: &mut Built, data: &[HostTensor]) -> webtensor::Result<f64> {
    run_mean(b, data, 1)
}

/// webtensor on one device for one workload: the one-op plan, the chained plan, their samples.
struct Ours {
    one: Built,
    chain: Built,
    q: usize,
    /// Back-to-back runs of the one-op plan per sample (a sample lasts at least [`SAMPLE_SECONDS`]).
    inner: usize,
    one_s: Vec<f64>,
    chain_s: Vec<f64>,
}

impl Ours {
    /// Compiles both plans, warms them up and chooses Q: a probe chain of [`PROBE_Q`] ops estimates the time
    /// of one op, and Q makes the chain's extra time at least [`CHAIN_SECONDS`] and twice the one-op run (so
    /// that the op's time stands out of the upload and readback noise).
    fn new(device: &Device, work: Work, data: &[HostTensor]) -> webtensor::Result<Ours> {
        let mut one = build(device, work, 1)?;
        run_once(&mut one, data)?;
        let t1 = run_once(&mut one, data)?.min(run_once(&mut one, data)?);
        let mut probe = build(device, work, 1 + PROBE_Q)?;
        run_once(&mut probe, data)?;
        let tp = run_once(&mut probe, data)?.min(run_once(&mut probe, data)?);
        let per_op = ((tp - t1) / PROBE_Q as f64).max(1e-7);
        let q = ((CHAIN_SECONDS.max(2.0 * t1) / per_op).ceil() as usize).clamp(2, MAX_Q);
        let chain = if q == PROBE_Q { probe } else { build(device, work, 1 + q)? };
        let (d1, dq) = (one.plan.stats().dispatches, chain.plan.stats().dispatches);
        if dq < d1 + q {
            return Err(webtensor::Error::Unsupported {
                op: "bench".into(),
                backend: device.capabilities().backend.name().to_string(),
                reason: format!("the compiler merged the chained ops ({dq} dispatches for {} ops)", 1 + q),
            });
        }
        let inner = ((SAMPLE_SECONDS / t1.max(1e-7)).ceil() as usize).clamp(1, 1000);
        let mut ours = Ours { one, chain, q, inner, one_s: vec![], chain_s: vec![] };
        // the chain's warm-up run: its output stays finite, or the data were not scaled to keep it bounded (an
        // overflow to inf and NaN would time other arithmetic than a model's)
        let inputs: Vec<(Tensor, &HostTensor)> = ours.chain.inputs.iter().copied().zip(data).collect();
        let out = ours.chain.plan.run(&inputs)?;
        if out.iter().any(|t| t.data.to_f32().iter().any(|v| !v.is_finite())) {
            return Err(webtensor::Error::InvalidArgument {
                op: "bench",
                reason: format!("the chain of {} ops overflowed: its output is not finite", 1 + q),
            });
        }
        Ok(ours)
    }

    fn sample(&mut self, data: &[HostTensor]) -> webtensor::Result<()> {
        self.one_s.push(run_mean(&mut self.one, data, self.inner)?);
        self.chain_s.push(run_once(&mut self.chain, data)?);
        Ok(())
    }

    fn timing(self) -> Result<Timing, String> {
        let (one, chain) = (median(&self.one_s), median(&self.chain_s));
        let (s, bounded) = marginal(one, chain, self.q)?;
        let per_round: Vec<f64> = self.chain_s.iter().zip(&self.one_s).map(|(c, o)| (c - o) / self.q as f64).collect();
        let range = per_round.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &x| (lo.min(x), hi.max(x)));
        let stats = self.one.plan.stats();
        let (kernels, transfer) = (stats.kernels, stats.transfer);
        Ok(Timing { s, run_s: Some(one), kernels, chain: self.q, transfer, range, bounded })
    }
}

/// One op's marginal time from a one-op plan's run `one` and a `1 + q`-op chain's `chain` (seconds): `(chain −
/// one) / q`, refused as too noisy where it is not positive. It cannot exceed a whole run's time (the run is
/// upload, the op and readback): where the samples put it above, the run's time is reported as its bound (`true`:
/// the op alone is at least as fast as the run, said "≥" in the tables), never a figure below the run's.
fn marginal(one: f64, chain: f64, q: usize) -> Result<(f64, bool), String> {
    let s = (chain - one) / q as f64;
    if s <= 0.0 {
        return Err(format!("too noisy: the {}-op chain ran no slower than one op", 1 + q));
    }
    Ok(if s > one { (one, true) } else { (s, false) })
}

/// A library taking part in one workload: webtensor on a device, or a prepared peer case.
enum Runner {
    Ours(Box<Ours>),
    Peer(String),
}

pub fn run(args: &MatmulArgs) -> Result<(), CliError> {
    let started = Instant::now();
    let chosen = choose_device(args.backend)?;
    let mut devices = vec![chosen.device.clone()];
    if !chosen.device.is_cpu() && args.cpu_max > 0 {
        devices.push(Device::cpu());
    }
    let software = chosen.device.capabilities().device_type == webtensor::DeviceType::Cpu;
    std::fs::create_dir_all(&args.out)
        .map_err(|e| CliError::Msg(format!("cannot create {}: {e}", args.out.display())))?;
    eprintln!("webtensor bench: device {} (chosen by {})", describe(&chosen.device), chosen.how);

    let want = |p: PeerArg| args.vs.contains(&p);
    let mut peers = if want(PeerArg::Numpy) || want(PeerArg::Torch) {
        peer::Peers::start(&args.python)
    } else {
        peer::Peers::none()
    };

    let mut works = Vec::new();
    let dtypes: &[DType] = match args.dtype {
        DtypeArg::F32 => &[DType::F32],
        DtypeArg::F16 => &[DType::F16],
        DtypeArg::All => &[DType::F32, DType::F16],
    };
    for &dtype in dtypes {
        works.extend(args.sizes.iter().map(|&n| Work::MatMul { n: n as usize, dtype }));
    }
    let k = args.matvec_size.map_or(if software { 4096 } else { 8192 }, |k| k as usize);
    if args.matvec {
        works.push(Work::MatVec { k, transposed: false });
        works.push(Work::MatVec { k, transposed: true });
    }
    let prefill_k = args.prefill_size.map_or(if software { 1024 } else { 4096 }, |k| k as usize);
    works.extend(args.quant.iter().map(|&dtype| Work::QuantMatMul { m: 1, k, dtype }));
    works.extend(args.quant.iter().map(|&dtype| Work::QuantMatMul { m: PREFILL_ROWS, k: prefill_k, dtype }));
    // the copy bandwidth: the mat-vecs' yardstick
    if (args.matvec || !args.quant.is_empty()) && (!chosen.device.is_cpu() || want(PeerArg::Torch)) {
        let max = chosen.device.capabilities().max_storage_binding_bytes.min(COPY_BYTES);
        works.push(Work::Copy { bytes: (max as usize / 4096) * 4096 });
    }

    let pb = ProgressBar::new((works.len() * (args.repeats as usize + 1)) as u64);
    if let Ok(style) = ProgressStyle::with_template("{elapsed:>4} [{bar:30}] {pos}/{len} {msg}") {
        pb.set_style(style.progress_chars("=> "));
    }
    let mut measured = Vec::new();
    let mut load = report::load_average();
    for &work in &works {
        pb.set_message(format!("{}: preparing", work.title()));
        measured.push(measure(args, work, &devices, &mut peers, &pb)?);
        load = match (load, report::load_average()) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
    }
    pb.finish_and_clear();
    for w in report::noise_warnings(&measured, load) {
        eprintln!("warning: {w}");
    }

    let doc = report::Doc::new(&measured, &devices, &peers.hello, args.repeats, started.elapsed(), load);
    let write = |name: &str, text: &str| {
        let path = args.out.join(name);
        webtensor::io::write_file(&path.display().to_string(), text.as_bytes()).map_err(CliError::from)?;
        Ok::<PathBuf, CliError>(path)
    };
    let md = doc.markdown();
    let json = serde_json::to_string_pretty(&doc.json()).map_err(|e| CliError::Msg(format!("JSON: {e}")))?;
    let paths = [write("matmul.md", &md)?, write("matmul.json", &json)?];
    let svg = args.out.join("matmul.svg");
    match doc.plot(&svg) {
        Ok(true) => outln!("wrote {}, {} and {}", paths[0].display(), paths[1].display(), svg.display()),
        Ok(false) => outln!("wrote {} and {} (no matmul figures to plot)", paths[0].display(), paths[1].display()),
        Err(e) => outln!("wrote {} and {}; the plot failed: {e}", paths[0].display(), paths[1].display()),
    }
    outln!();
    emit(&md);
    Ok(())
}

/// ` (software)` for a software adapter (lavapipe, llvmpipe, WARP), named as one wherever its figures appear.
fn software_suffix(d: &Device) -> &'static str {
    if !d.is_cpu() && d.capabilities().device_type == webtensor::DeviceType::Cpu {
        " (software)"
    } else {
        ""
    }
}

/// The peers that time `work` (their helper's library names) and whether each runs on the CPU.
fn peer_libs(args: &MatmulArgs, work: Work) -> Vec<(&'static str, bool)> {
    let mut libs = Vec::new();
    if args.vs.contains(&PeerArg::Numpy) && matches!(work, Work::MatMul { dtype: DType::F32, .. }) {
        libs.push(("numpy", true));
    }
    if args.vs.contains(&PeerArg::Torch) {
        match work {
            Work::MatMul { dtype: DType::F32, .. } => libs.extend([("torch-f32", false), ("torch-tf32", false)]),
            Work::MatMul { .. } | Work::MatVec { .. } => libs.push(("torch-f16", false)),
            // a quantized mat-vec's yardstick is the copy bandwidth; torch has no kernel for ggml's blocks
            Work::QuantMatMul { m: 1, .. } => {}
            Work::QuantMatMul { .. } => libs.push(("torch-f16", false)),
            Work::Copy { .. } => libs.push(("torch", false)),
        }
    }
    libs
}

/// Times `work` with every library that applies: webtensor on each device, then the peers, one sample each
/// per round.
fn measure(
    args: &MatmulArgs,
    work: Work,
    devices: &[Device],
    peers: &mut peer::Peers,
    pb: &ProgressBar,
) -> Result<Measured, CliError> {
    let data = data(work)?;
    let mut runners = our_runners(args, work, devices, &data);
    runners.extend(peer_runners(args, work, peers));
    pb.inc(1);
    let mut samples: Vec<Vec<f64>> = vec![vec![]; runners.len()];
    for round in 0..args.repeats {
        pb.set_message(format!("{}: round {}/{}", work.title(), round + 1, args.repeats));
        for (i, (entry, runner)) in runners.iter_mut().enumerate() {
            let (Some(runner), Ok(_)) = (runner, &entry.outcome) else { continue };
            if entry.on_cpu {
                std::thread::sleep(SETTLE);
            }
            let r = match runner {
                Runner::Ours(o) => o.sample(&data).map_err(|e| format!("failed: {e}")),
                Runner::Peer(id) => peers.time(id).map(|s| samples[i].push(s)),
            };
            if let Err(e) = r {
                entry.outcome = Err(e);
            }
        }
        pb.inc(1);
    }
    let mut entries = Vec::new();
    for ((mut entry, runner), s) in runners.into_iter().zip(samples) {
        if let Some(Runner::Peer(id)) = &runner {
            peers.free(id);
        }
        if let (Some(runner), Ok(_)) = (runner, &entry.outcome) {
            entry.outcome = match runner {
                Runner::Ours(o) => o.timing(),
                Runner::Peer(_) => {
                    let range =
                        s.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &x| (lo.min(x), hi.max(x)));
                    Ok(Timing { s: median(&s), range, ..empty_timing() })
                }
            };
        }
        entries.push(entry);
    }
    Ok(Measured { work, entries })
}

/// The size `--cpu-max` bounds: N of a matmul, K of a mat-vec.
fn cpu_size(work: Work) -> usize {
    match work {
        Work::MatMul { n, .. } => n,
        Work::MatVec { k, .. } | Work::QuantMatMul { k, .. } => k,
        Work::Copy { .. } => 0,
    }
}

/// webtensor's entry on each device, with its runner; an entry whose outcome is already an Err (skipped, n/a,
/// failed) has none.
fn our_runners(args: &MatmulArgs, work: Work, devices: &[Device], data: &[HostTensor]) -> Vec<(Entry, Option<Runner>)> {
    let mut runners = Vec::new();
    for d in devices {
        let c = d.capabilities();
        let entry = |outcome| Entry {
            label: format!("webtensor {}{}", c.backend, software_suffix(d)),
            ours: true,
            on_cpu: c.device_type == webtensor::DeviceType::Cpu,
            outcome,
        };
        let needs_f16 = matches!(work, Work::MatVec { .. } | Work::MatMul { dtype: DType::F16, .. });
        if d.is_cpu() && matches!(work, Work::Copy { .. }) {
            continue; // the CPU backend's copy is its f64 reference loop, not a bandwidth figure
        } else if d.is_cpu() && cpu_size(work) > args.cpu_max {
            runners.push((entry(Err(format!("skipped: N > --cpu-max {}", args.cpu_max))), None));
        } else if needs_f16 && !c.dtypes.contains(&DType::F16) {
            runners.push((entry(Err("n/a: no f16 on this device (SHADER_F16)".into())), None));
        } else {
            match Ours::new(d, work, data) {
                Ok(o) => runners.push((entry(Ok(empty_timing())), Some(Runner::Ours(Box::new(o))))),
                Err(e) => runners.push((entry(Err(format!("failed: {e}"))), None)),
            }
        }
    }
    runners
}

/// Each peer's entry, prepared, with its runner (none where it is skipped or absent).
fn peer_runners(args: &MatmulArgs, work: Work, peers: &mut peer::Peers) -> Vec<(Entry, Option<Runner>)> {
    let mut runners = Vec::new();
    for (i, &(lib, on_cpu)) in peer_libs(args, work).iter().enumerate() {
        let entry = |outcome| Entry { label: lib.to_string(), ours: false, on_cpu, outcome };
        let id = format!("p{i}");
        if on_cpu && cpu_size(work) > args.cpu_max {
            runners.push((entry(Err(format!("skipped: N > --cpu-max {}", args.cpu_max))), None));
        } else {
            match peers.prepare(&id, lib, &work.peer_spec()) {
                Ok(()) => runners.push((entry(Ok(empty_timing())), Some(Runner::Peer(id)))),
                Err(why) => runners.push((entry(Err(why)), None)),
            }
        }
    }
    runners
}

fn empty_timing() -> Timing {
    Timing {
        s: f64::NAN,
        run_s: None,
        kernels: vec![],
        chain: 0,
        transfer: Default::default(),
        range: (f64::NAN, f64::NAN),
        bounded: false,
    }
}

#[cfg(test)]
mod tests {
    use super::marginal;

    /// The op-alone figure is never below the whole run's: where the samples put its time above a run's, the
    /// run's time is its bound.
    #[test]
    fn the_marginal_op_never_costs_more_than_a_run() {
        assert_eq!(marginal(2.0e-3, 8.0e-3, 4), Ok((1.5e-3, false)));
        assert_eq!(marginal(2.0e-3, 20.0e-3, 4), Ok((2.0e-3, true)));
        assert!(marginal(2.0e-3, 1.9e-3, 4).unwrap_err().contains("no slower"));
    }
}
