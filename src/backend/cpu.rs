//! The CPU backend: every op, written to be obviously right, because it is the oracle the GPU is tested
//! against. Elementwise math runs in f64 and rounds once to the output dtype; matmul goes through the `gemm`
//! crate (multithreaded natively, runtime-detected SIMD up to AVX-512) with f32 accumulation.

use super::{gather, Backend, Capabilities, CompileOptions, Executable, LocalFuture, PlanStats};
use crate::compile::Program;
use crate::graph::{operand_layout, BinaryOp, NodeId, Op, ReduceOp, UnaryOp};
use crate::shape::Layout;
use crate::{DType, Data, Error, HostTensor, Result};
use half::f16;

/// Largest tensor the CPU backend holds, in bytes: 2 GiB on wasm32 (4 GiB address space), 16 GiB natively.
const MAX_TENSOR_BYTES: u64 = if cfg!(target_pointer_width = "32") { 1 << 31 } else { 1 << 34 };

pub(crate) struct CpuBackend {
    caps: Capabilities,
}

impl CpuBackend {
    pub fn new() -> CpuBackend {
        let threads = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
        CpuBackend {
            caps: Capabilities {
                backend: "cpu".into(),
                name: format!("{} CPU, {threads} threads", std::env::consts::ARCH),
                device_type: "Cpu".into(),
                driver: "webtensor cpu".into(),
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
                dtypes: vec![DType::F32, DType::F16, DType::I32],
            },
        }
    }
}

impl Backend for CpuBackend {
    fn capabilities(&self) -> &Capabilities {
        &self.caps
    }

    fn compile<'a>(
        &'a self,
        program: Program,
        options: &'a CompileOptions,
    ) -> LocalFuture<'a, Result<Box<dyn Executable>>> {
        // Inputs are read from the caller's tensors at run time: only the steps get buffers.
        let mut bufs: Vec<Option<Data>> = vec![None; program.nodes.len()];
        let mut bytes = 0;
        for &id in program.inputs.iter().chain(&program.steps) {
            let n = &program.nodes[id];
            let size = program.storage_bytes(id);
            if size > MAX_TENSOR_BYTES {
                let e = Error::LimitExceeded {
                    what: format!("{} {} {:?} on the CPU backend", n.op.name(), n.dtype, n.layout.shape),
                    size,
                    limit_name: "the CPU backend's largest tensor",
                    limit: MAX_TENSOR_BYTES,
                };
                return Box::pin(async move { Err(e) });
            }
            if !matches!(n.op, Op::Input { .. }) {
                bufs[id] = Some(filled(n.dtype, n.layout.numel()));
                bytes += size;
            }
        }
        let plan: Box<dyn Executable> = Box::new(CpuPlan { program, bufs, poison: options.poison, bytes });
        Box::pin(async move { Ok(plan) })
    }
}

/// A buffer of `n` elements filled with the NaN sentinel (all bits set; -1 for i32).
fn filled(dtype: DType, n: usize) -> Data {
    match dtype {
        DType::F32 => Data::F32(vec![f32::from_bits(u32::MAX); n]),
        DType::F16 => Data::F16(vec![f16::from_bits(u16::MAX); n]),
        DType::I32 => Data::I32(vec![-1; n]),
    }
}

fn get(d: &Data, i: usize) -> f64 {
    match d {
        Data::F32(v) => v[i] as f64,
        Data::F16(v) => v[i].to_f64(),
        Data::I32(v) => v[i] as f64,
    }
}

/// Fills `d` with the NaN sentinel of [`filled`], in place.
fn poison(d: &mut Data) {
    match d {
        Data::F32(v) => v.fill(f32::from_bits(u32::MAX)),
        Data::F16(v) => v.fill(f16::from_bits(u16::MAX)),
        Data::I32(v) => v.fill(-1),
    }
}

fn set(d: &mut Data, i: usize, x: f64) {
    match d {
        Data::F32(v) => v[i] = x as f32,
        Data::F16(v) => v[i] = f16::from_f64(x),
        Data::I32(v) => v[i] = x as i32,
    }
}

struct CpuPlan {
    program: Program,
    /// One buffer per step, indexed by node id (`None` for inputs: a run reads the caller's tensors in place).
    bufs: Vec<Option<Data>>,
    poison: bool,
    bytes: u64,
}

impl Executable for CpuPlan {
    fn run<'a>(&'a mut self, inputs: &'a [(NodeId, &'a HostTensor)]) -> LocalFuture<'a, Result<Vec<HostTensor>>> {
        Box::pin(async move { self.run_sync(inputs) })
    }

    fn stats(&self) -> PlanStats {
        PlanStats {
            dispatches: self.program.steps.len(),
            pipelines: 0,
            memory_bytes: self.bytes,
            peak_live_bytes: self.bytes,
            buffers: self.program.steps.len(),
            kernels: self.program.steps.iter().map(|&s| self.program.nodes[s].op.name()).collect(),
        }
    }
}

/// The caller's input tensors for one run, indexed by node id: a run borrows them, it never copies them into
/// the plan. Steps only ever write their own buffers, so nothing (in-place updates included) can write into an
/// input.
type Inputs<'a> = [Option<&'a Data>];

impl CpuPlan {
    fn run_sync(&mut self, inputs: &[(NodeId, &HostTensor)]) -> Result<Vec<HostTensor>> {
        let mut ins: Vec<Option<&Data>> = vec![None; self.program.nodes.len()];
        for &(id, t) in inputs {
            ins[id] = Some(&t.data);
        }
        if let Some(&id) = self.program.inputs.iter().find(|&&id| ins[id].is_none()) {
            // `Plan::run` checks this first; an executable called without it must not read a stale tensor
            return Err(Error::BadInput { name: self.program.input_name(id).into(), reason: "missing".into() });
        }
        for i in 0..self.program.steps.len() {
            let id = self.program.steps[i];
            let mut out = self.bufs[id].take().expect("allocated at compile time");
            if self.poison {
                poison(&mut out);
            }
            let r = self.step(&ins, id, &mut out);
            self.bufs[id] = Some(out);
            r?;
        }
        Ok(self
            .program
            .outputs
            .iter()
            .map(|&o| {
                let n = &self.program.nodes[o];
                HostTensor { shape: n.layout.shape.clone(), data: gather(self.storage(&ins, n.storage), &n.layout) }
            })
            .collect())
    }

    /// The data of storage node `s`: the caller's tensor for an input, else the step's buffer.
    fn storage<'a>(&'a self, ins: &Inputs<'a>, s: NodeId) -> &'a Data {
        match ins[s] {
            Some(d) => d,
            None => self.bufs[s].as_ref().expect("an input, or a step computed before use"),
        }
    }

    /// The storage and the layout (broadcast to `shape`) through which an op reads operand `src`.
    fn operand<'a>(&'a self, ins: &Inputs<'a>, src: NodeId, shape: &[usize]) -> (&'a Data, Layout) {
        let n = &self.program.nodes[src];
        (self.storage(ins, n.storage), operand_layout(&n.layout, shape))
    }

    fn row_operand<'a>(&'a self, ins: &Inputs<'a>, src: NodeId) -> (&'a Data, Layout) {
        let n = &self.program.nodes[src];
        (self.storage(ins, n.storage), n.layout.clone())
    }

    fn step(&self, ins: &Inputs<'_>, id: NodeId, out: &mut Data) -> Result<()> {
        let node = &self.program.nodes[id];
        let shape = &node.layout.shape;
        let numel = node.layout.numel();
        match node.op {
            Op::Unary { op, x } => {
                let (d, l) = self.operand(ins, x, shape);
                for i in 0..numel {
                    set(out, i, unary(op, get(d, l.index_of(i))));
                }
            }
            Op::Binary { op, a, b } => {
                let (da, la) = self.operand(ins, a, shape);
                let (db, lb) = self.operand(ins, b, shape);
                for i in 0..numel {
                    let (x, y) = (get(da, la.index_of(i)), get(db, lb.index_of(i)));
                    set(
                        out,
                        i,
                        match op {
                            BinaryOp::Add => x + y,
                            BinaryOp::Sub => x - y,
                            BinaryOp::Mul => x * y,
                            BinaryOp::Div => x / y,
                        },
                    );
                }
            }
            Op::MatMul { a, b } => {
                let nodes = &self.program.nodes;
                let (m, k) = (
                    nodes[a].layout.shape[nodes[a].layout.rank() - 2],
                    nodes[a].layout.shape[nodes[a].layout.rank() - 1],
                );
                let n = shape[shape.len() - 1];
                let batch = &shape[..shape.len() - 2];
                let la = operand_layout(&nodes[a].layout, &[batch, &[m, k]].concat());
                let lb = operand_layout(&nodes[b].layout, &[batch, &[k, n]].concat());
                let (da, db) = (self.storage(ins, nodes[a].storage), self.storage(ins, nodes[b].storage));
                crate::backend::cpu_matmul::matmul(da, &la, db, &lb, out, m, k, n);
            }
            Op::Softmax { x, mask, scale } => {
                let (dx, lx) = self.row_operand(ins, x);
                let m = mask.map(|m| self.operand(ins, m, shape));
                for_rows(shape, |r, cols| {
                    let v: Vec<f64> = cols
                        .clone()
                        .map(|i| {
                            get(dx, lx.index_of(i)) * scale as f64
                                + m.as_ref().map_or(0.0, |(dm, lm)| get(dm, lm.index_of(i)))
                        })
                        .collect();
                    let max = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                    let e: Vec<f64> =
                        v.iter().map(|&x| if max == f64::NEG_INFINITY { 0.0 } else { (x - max).exp() }).collect();
                    let s: f64 = e.iter().sum();
                    for (j, i) in cols.enumerate() {
                        set(out, i, if s > 0.0 { e[j] / s } else { 0.0 });
                    }
                    let _ = r;
                });
            }
            Op::RmsNorm { x, eps } | Op::LayerNorm { x, eps } => {
                let layer = matches!(node.op, Op::LayerNorm { .. });
                let (dx, lx) = self.row_operand(ins, x);
                for_rows(shape, |_, cols| {
                    let v: Vec<f64> = cols.clone().map(|i| get(dx, lx.index_of(i))).collect();
                    let nf = v.len() as f64;
                    let mean = if layer { v.iter().sum::<f64>() / nf } else { 0.0 };
                    let var = v.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / nf;
                    let inv = 1.0 / (var + eps as f64).sqrt();
                    for (j, i) in cols.enumerate() {
                        set(out, i, (v[j] - mean) * inv);
                    }
                });
            }
            Op::Reduce { op, x } => {
                let (dx, lx) = self.row_operand(ins, x);
                let in_shape = &self.program.nodes[x].layout.shape;
                for_rows(in_shape, |r, cols| {
                    let v: Vec<f64> = cols.map(|i| get(dx, lx.index_of(i))).collect();
                    let (mut best, mut arg) = (v[0], 0usize);
                    for (j, &x) in v.iter().enumerate() {
                        if x > best {
                            (best, arg) = (x, j);
                        }
                    }
                    set(
                        out,
                        r,
                        match op {
                            ReduceOp::Sum => v.iter().sum(),
                            ReduceOp::Mean => v.iter().sum::<f64>() / v.len() as f64,
                            ReduceOp::Max => best,
                            ReduceOp::ArgMax => arg as f64,
                        },
                    );
                });
            }
            Op::GetRows { table, idx } => {
                let (dt, lt) = self.row_operand(ins, table);
                let (di, li) = self.row_operand(ins, idx);
                let (rows, dim) = (lt.shape[0], lt.shape[1]);
                for r in 0..li.numel() {
                    let row = get(di, li.index_of(r));
                    if row < 0.0 || row >= rows as f64 {
                        return Err(Error::BadInput {
                            name: "get_rows".into(),
                            reason: format!("index {row} at position {r} is outside 0..{rows} of table {:?}", lt.shape),
                        });
                    }
                    for c in 0..dim {
                        set(out, r * dim + c, get(dt, lt.index_of(row as usize * dim + c)));
                    }
                }
            }
            Op::Concat { a, b, axis } => {
                let (da, la) = self.row_operand(ins, a);
                let (db, lb) = self.row_operand(ins, b);
                let split = la.shape[axis];
                let (oshape, _) = node.layout.padded4();
                let lead = 4 - shape.len();
                for i in 0..numel {
                    let mut c = [0usize; 4];
                    let mut rem = i;
                    for d in (0..4).rev() {
                        c[d] = rem % oshape[d];
                        rem /= oshape[d];
                    }
                    let (src, l, ca) = if c[lead + axis] < split {
                        (da, &la, c)
                    } else {
                        let mut cb = c;
                        cb[lead + axis] -= split;
                        (db, &lb, cb)
                    };
                    let pos = l.offset + (0..l.rank()).map(|d| ca[lead + d] * l.strides[d]).sum::<usize>();
                    set(out, i, get(src, pos));
                }
            }
            Op::Input { .. } | Op::View { .. } => unreachable!("not a step"),
            Op::Fused { .. } | Op::MatMulFused { .. } => unreachable!("fusion runs only for GPU plans"),
        }
        Ok(())
    }
}

/// Calls `f(row, flat indices of the row)` for each row of the last axis of `shape`.
fn for_rows(shape: &[usize], mut f: impl FnMut(usize, std::ops::Range<usize>)) {
    let n = shape[shape.len() - 1];
    let rows = shape.iter().product::<usize>() / n;
    for r in 0..rows {
        f(r, r * n..(r + 1) * n);
    }
}

/// The f64 value of an elementwise function, as PyTorch defines it.
pub(crate) fn unary(op: UnaryOp, x: f64) -> f64 {
    let sigmoid = |x: f64| if x >= 0.0 { 1.0 / (1.0 + (-x).exp()) } else { x.exp() / (1.0 + x.exp()) };
    match op {
        UnaryOp::Scale(s) => x * f32::from_bits(s) as f64,
        UnaryOp::Neg => -x,
        UnaryOp::Abs => x.abs(),
        UnaryOp::Sqr => x * x,
        UnaryOp::Sqrt => x.sqrt(),
        UnaryOp::Exp => x.exp(),
        UnaryOp::Log => x.ln(),
        UnaryOp::Tanh => x.tanh(),
        UnaryOp::Relu => x.max(0.0),
        UnaryOp::Gelu => {
            let c = (2.0 / std::f64::consts::PI).sqrt();
            0.5 * x * (1.0 + (c * (x + 0.044715 * x * x * x)).tanh())
        }
        UnaryOp::GeluErf => 0.5 * x * (1.0 + libm::erf(x / std::f64::consts::SQRT_2)),
        UnaryOp::Silu => x * sigmoid(x),
        UnaryOp::Sigmoid => sigmoid(x),
        UnaryOp::Copy => x,
    }
}
