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
    /// A copy of `bytes` of f32.
    Copy { bytes: usize },
}

impl Work {
    pub fn flops(&self) -> f64 {
        match *self {
            Work::MatMul { n, .. } => 2.0 * (n as f64).powi(3),
            Work::MatVec { k, .. } => 2.0 * (k as f64).powi(2),
            Work::Copy { .. } => 0.0,
        }
    }

    /// Bytes that define the bandwidth figure: W for mat-vec, read + write for copy.
    pub fn bytes(&self) -> f64 {
        match *self {
            Work::MatMul { .. } => 0.0,
            Work::MatVec { k, .. } => 2.0 * (k as f64).powi(2),
            Work::Copy { bytes } => 2.0 * bytes as f64,
        }
    }

    pub fn title(&self) -> String {
        match *self {
            Work::MatMul { n, dtype } => format!("matmul {n}³ {}", short(dtype)),
            Work::MatVec { k, transposed: false } => format!("mat-vec 1×{k} · {k}×{k} (W [K, N] f16)"),
            Work::MatVec { k, transposed: true } => format!("mat-vec 1×{k} · ({k}×{k})ᵀ (W [N, K] f16)"),
            Work::Copy { bytes } => format!("copy {} MiB f32", bytes >> 20),
        }
    }

    /// The request that prepares this workload in the peer helper.
    pub fn peer_spec(&self) -> Value {
        match *self {
            Work::MatMul { n, dtype } => json!({"kind": "matmul", "m": n, "k": n, "n": n, "dtype": short(dtype)}),
            Work::MatVec { k, transposed } => {
                json!({"kind": "matmul", "m": 1, "k": k, "n": k, "dtype": "f16", "transpose_b": transposed})
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
        Work::Copy { bytes } => Ok(vec![tensor(&[bytes / 4], 1.0, DType::F32)?]),
    }
}
