//! What `webtensor bench matmul` times: the workloads, their sizes in FLOPs and bytes, their inputs, and the
//! graphs webtensor runs for them (one op, or a chain of ops for the marginal kernel time).

use serde_json::{json, Value};
use webtensor::{DType, Data, Device, Graph, HostTensor, Plan, Tensor};

use crate::cli::util::SplitMix64;

/// One thing to time.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Work {
    /// `[n, n] @ [n, n]`.
    MatMul { n: usize, dtype: DType },
    /// `[1, k] f32 @ [k, k] f16`; `transposed`: the weight is stored [k, k] and read as `t(w)`.
    MatVec { k: usize, transposed: bool },
    /// `[m, k] f32 @ t(W [k, k])` with W block-quantized (`dtype`, stored [N, K] as a model's weights are): a
    /// prefill projection for m > 1, a decode step's mat-vec for m = 1.
    QuantMatMul { m: usize, k: usize, dtype: DType },
    /// A copy of `bytes` of f32.
    Copy { bytes: usize },
}

impl Work {
    pub fn flops(&self) -> f64 {
        match *self {
            Work::MatMul { n, .. } => 2.0 * (n as f64).powi(3),
            Work::MatVec { k, .. } => 2.0 * (k as f64).powi(2),
            Work::QuantMatMul { m, k, .. } => 2.0 * m as f64 * (k as f64).powi(2),
            Work::Copy { .. } => 0.0,
        }
    }

    /// Bytes that define the bandwidth figure: W for mat-vec (its blocks for a quantized W), read + write for copy.
    pub fn bytes(&self) -> f64 {
        match *self {
            Work::MatMul { .. } => 0.0,
            Work::MatVec { k, .. } => 2.0 * (k as f64).powi(2),
            Work::QuantMatMul { k, dtype, .. } => dtype.bytes_of(k * k).unwrap_or(0) as f64,
            Work::Copy { bytes } => 2.0 * bytes as f64,
        }
    }

    pub fn title(&self) -> String {
        match *self {
            Work::MatMul { n, dtype } => format!("matmul {n}³ {}", short(dtype)),
            Work::MatVec { k, transposed: false } => format!("mat-vec 1×{k} · {k}×{k} (W [K, N] f16)"),
            Work::MatVec { k, transposed: true } => format!("mat-vec 1×{k} · ({k}×{k})ᵀ (W [N, K] f16)"),
            Work::QuantMatMul { m: 1, k, dtype } => format!("mat-vec 1×{k} · ({k}×{k} {})ᵀ", short(dtype)),
            Work::QuantMatMul { m, k, dtype } => format!("matmul {m}×{k} · ({k}×{k} {})ᵀ", short(dtype)),
            Work::Copy { bytes } => format!("copy {} MiB f32", bytes >> 20),
        }
    }

    /// Whether the figure is a bandwidth (GB/s of the weights) rather than GFLOP/s.
    pub fn is_matvec(&self) -> bool {
        matches!(self, Work::MatVec { .. } | Work::QuantMatMul { m: 1, .. })
    }

    /// The request that prepares this workload in the peer helper.
    pub fn peer_spec(&self) -> Value {
        match *self {
            Work::MatMul { n, dtype } => json!({"kind": "matmul", "m": n, "k": n, "n": n, "dtype": short(dtype)}),
            Work::MatVec { k, transposed } => {
                json!({"kind": "matmul", "m": 1, "k": k, "n": k, "dtype": "f16", "transpose_b": transposed})
            }
            // the peer's f16 weights are the quantized ones dequantized: the same shape, cuBLAS's f16 path
            Work::QuantMatMul { m, k, .. } => {
                json!({"kind": "matmul", "m": m, "k": k, "n": k, "dtype": "f16", "transpose_b": true})
            }
            Work::Copy { bytes } => json!({"kind": "copy", "bytes": bytes}),
        }
    }
}

pub fn short(d: DType) -> &'static str {
    match d {
        DType::F16 => "f16",
        DType::I32 => "i32",
        DType::F32 => "f32",
        other => other.name(),
    }
}

/// A compiled plan of `reps` chained ops and the input handles, in the order of the workload's data.
pub struct Built {
    pub plan: Plan,
    pub inputs: Vec<Tensor>,
}

pub fn build(device: &Device, work: Work, reps: usize) -> webtensor::Result<Built> {
    let mut g = Graph::new();
    let (inputs, out) = match work {
        Work::MatMul { n, dtype } => {
            let (a, b) = (g.input("a", dtype, &[n, n])?, g.input("b", dtype, &[n, n])?);
            let mut x = a;
            for _ in 0..reps {
                x = g.matmul(x, b)?;
            }
            (vec![a, b], x)
        }
        Work::MatVec { k, transposed } => {
            let (x, w) = (g.input("x", DType::F32, &[1, k])?, g.input("w", DType::F16, &[k, k])?);
            let w2 = if transposed { g.t(w)? } else { w };
            let mut y = x;
            for _ in 0..reps {
                y = g.matmul(y, w2)?;
            }
            (vec![x, w], y)
        }
        Work::QuantMatMul { m, k, dtype } => {
            let (x, w) = (g.input("x", DType::F32, &[m, k])?, g.input("w", dtype, &[k, k])?);
            let wt = g.t(w)?;
            let mut y = x;
            for _ in 0..reps {
                y = g.matmul(y, wt)?;
            }
            (vec![x, w], y)
        }
        Work::Copy { bytes } => {
            let len = bytes / 4;
            let x = g.input("x", DType::F32, &[len])?;
            let mut y = x;
            for i in 0..reps {
                // Each copy reads its source through a reshape view, which keeps the copies from being fused
                // into one kernel.
                let shape: &[usize] = if i % 2 == 0 { &[len / 4, 4] } else { &[len] };
                let v = g.reshape(y, shape)?;
                y = g.contiguous(v)?;
            }
            // Read back 64 elements, not the whole tensor.
            let flat = g.reshape(y, &[len])?;
            let head = g.slice(flat, 0, 0, 64)?;
            (vec![x], g.contiguous(head)?)
        }
    };
    Ok(Built { plan: device.compile(&g, &[out])?, inputs })
}

/// Inputs of a workload. Chains stay bounded: B and W are scaled by √(3/K), so every product keeps the
/// variance of its input (no overflow, no subnormals).
pub fn data(work: Work) -> webtensor::Result<Vec<HostTensor>> {
    let mut rng = SplitMix64::new(0xBE7C);
    let mut tensor = |shape: &[usize], scale: f32, dtype: DType| {
        let v: Vec<f32> = (0..shape.iter().product()).map(|_| rng.next_f32() * scale).collect();
        let d = match dtype {
            DType::F16 => Data::F16(v.into_iter().map(half::f16::from_f32).collect()),
            _ => Data::F32(v),
        };
        HostTensor::new(shape, d)
    };
    match work {
        Work::MatMul { n, dtype } => {
            Ok(vec![tensor(&[n, n], 1.0, dtype)?, tensor(&[n, n], (3.0 / n as f32).sqrt(), dtype)?])
        }
        Work::MatVec { k, .. } => {
            Ok(vec![tensor(&[1, k], 1.0, DType::F32)?, tensor(&[k, k], (3.0 / k as f32).sqrt(), DType::F16)?])
        }
        Work::QuantMatMul { m, k, dtype } => {
            let x = tensor(&[m, k], 1.0, DType::F32)?;
            let w = quant_weight(dtype, k, &mut rng)?;
            Ok(vec![x, w])
        }
        Work::Copy { bytes } => Ok(vec![tensor(&[bytes / 4], 1.0, DType::F32)?]),
    }
}

/// The multiple of its scale `d` that a block type's min (its second scale field, `DType::scale_offsets`) is set
/// to so that its values centre on zero for uniformly random quants: for Q4_1, values d·q + m with q in 0..16, so
/// m = −7.5·d; for Q4_K, d·sc·q − dmin·mn, so dmin = 7.5·d. Formulas as ggml-common.h.
fn min_multiple(dtype: DType) -> f32 {
    match dtype {
        DType::Q4_1 => -7.5,
        DType::Q5_1 => -15.5,
        DType::Q2_K => 1.5,
        DType::Q4_K => 7.5,
        DType::Q5_K => 15.5,
        _ => 0.0,
    }
}

/// Blocks of random quants with every block's scale set to `d` (and its min to the centring multiple of `d`).
fn blocks_with_scale(dtype: DType, quants: &[u8], d: f32) -> Vec<u8> {
    let mut bytes = quants.to_vec();
    for block in bytes.chunks_exact_mut(dtype.block_bytes()) {
        for (i, &at) in dtype.scale_offsets().iter().enumerate() {
            let value = if i == 0 { d } else { min_multiple(dtype) * d };
            block[at..at + 2].copy_from_slice(&half::f16::from_f32(value).to_le_bytes());
        }
    }
    bytes
}

/// A `[k, k]` weight of block type `dtype`: random quants, and scales that keep a chain of products bounded — the
/// scale is calibrated on the CPU backend so that `x · t(W)` has the root mean square of `x`.
fn quant_weight(dtype: DType, k: usize, rng: &mut SplitMix64) -> webtensor::Result<HostTensor> {
    if dtype.scale_offsets().is_empty() || !k.is_multiple_of(dtype.block_size()) {
        return Err(webtensor::Error::UnsupportedDType {
            op: "bench matmul --quant",
            dtype,
            shape: vec![k, k],
            reason: format!("a block-quantized type whose block of {} values divides K", dtype.block_size()),
        });
    }
    let len = dtype.bytes_of(k * k).unwrap_or(0);
    let quants: Vec<u8> = (0..len.div_ceil(8)).flat_map(|_| rng.next_u64().to_le_bytes()).take(len).collect();
    let unit = HostTensor::new(&[k, k], Data::from_bytes(dtype, &blocks_with_scale(dtype, &quants, 1.0)))?;
    let x = HostTensor::f32(&[1, k], rng.vec_f32(k))?;
    let mut g = Graph::new();
    let (xi, wi) = (g.input("x", DType::F32, &[1, k])?, g.input("w", dtype, &[k, k])?);
    let wt = g.t(wi)?;
    let y = g.matmul(xi, wt)?;
    let mut plan = Device::cpu().compile(&g, &[y])?;
    let out = plan.run(&[(xi, &x), (wi, &unit)])?.remove(0).data.into_f32();
    let rms = |v: &[f32]| (v.iter().map(|&a| f64::from(a) * f64::from(a)).sum::<f64>() / v.len() as f64).sqrt();
    let gain = rms(&out) / rms(&x.data.to_f32());
    let d = if gain.is_finite() && gain > 0.0 { (1.0 / gain) as f32 } else { 1.0 };
    HostTensor::new(&[k, k], Data::from_bytes(dtype, &blocks_with_scale(dtype, &quants, d)))
}

/// One library's figures for one workload.
pub struct Entry {
    /// e.g. `webtensor vulkan`, `webtensor cpu`, `numpy`, `torch-tf32`.
    pub label: String,
    pub ours: bool,
    /// Runs on the CPU (numpy, the CPU backend, a software adapter): compared with CPU peers.
    pub on_cpu: bool,
    pub outcome: Result<Timing, String>,
}

/// A library's time for one workload.
pub struct Timing {
    /// Seconds per op (webtensor: the marginal kernel time).
    pub s: f64,
    /// webtensor only: seconds of `Plan::run` of the one-op plan.
    pub run_s: Option<f64>,
    /// webtensor only: the plan's kernels (`PlanStats::kernels`) and the chain length Q.
    pub kernels: Vec<String>,
    pub chain: usize,
    /// webtensor only: what one run of the one-op plan moved and copied on the host.
    pub transfer: webtensor::TransferStats,
    /// Fastest and slowest sample, seconds per op (webtensor: per-round marginal times), for the JSON.
    pub range: (f64, f64),
    /// webtensor only: the marginal op measured above a whole run's time, so `s` is the run's (the op alone is at
    /// least that fast): reported as a bound, "≥".
    pub bounded: bool,
}

/// Every library's figures for one workload.
pub struct Measured {
    pub work: Work,
    pub entries: Vec<Entry>,
}
