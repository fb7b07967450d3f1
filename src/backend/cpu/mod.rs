//! The CPU backend: every op on every dtype, natively and on wasm. It runs the same pass list as the GPU (fusion,
//! in-place execution, the memory plan over one arena) and computes in f32 with f64 accumulation in row ops;
//! matmuls go through the `gemm` crate. It is the peer every GPU result is compared with in tuning, and every op is
//! checked against an f64 reference in the differential suite.

mod attention;
mod buffer;
mod elementwise;
mod gather;
mod matmul;
mod parallel;
mod qdot;
mod quant;
mod rows;
// natively the `gemm` crate multiplies (its AVX kernels); sgemm runs there only in its tests
#[cfg_attr(not(all(target_arch = "wasm32", target_feature = "simd128")), allow(dead_code))]
mod sgemm;

use super::{
    elapsed_us, fetched, gather as gather_view, now, Backend, CompileOptions, Executable, Inputs, LocalFuture,
    PlanStats,
};
use crate::caps::next_id;
use crate::caps::{BackendKind, Capabilities, DeviceType};
use crate::compile::ir::{Program, Step};
use crate::compile::memory::{MemoryLimits, MemoryPlan};
use crate::compile::{Compiled, Target};
use crate::graph::NodeId;
use crate::resident::{Bytes, External, ExternalMemory};
use crate::run::Fetch;
use crate::{DType, Data, Error, Graph, HostTensor, MatmulPrecision, Result, Tensor};
use attention::{AttentionKernel, RopeKernel};
use buffer::Memory;
use elementwise::{ElementwiseKernel, Leaf};
use gather::{ConcatKernel, CopyIntoKernel, GetRowsKernel, SetRowsKernel};
use matmul::{MatmulKernel, TransposedB};
use quant::{DequantizeKernel, GetRowsQKernel, QMatmulKernel, Weight};
use rows::{RowKind, RowsKernel};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Largest tensor the CPU backend holds, in bytes: 2 GiB on wasm32 (4 GiB address space), 16 GiB natively.
const MAX_TENSOR_BYTES: u64 = if cfg!(target_pointer_width = "32") { 1 << 31 } else { 1 << 34 };

/// The CPU backend's driver string: on wasm it names the build's SIMD (scripts/build-wasm.sh makes a simd128 build
/// and a relaxed-simd one; the package loads the latter where the engine validates it), so a page can show it.
const DRIVER: &str = if cfg!(all(target_arch = "wasm32", target_feature = "relaxed-simd")) {
    "webtensor cpu (wasm simd128, relaxed-simd)"
} else if cfg!(all(target_arch = "wasm32", target_feature = "simd128")) {
    "webtensor cpu (wasm simd128)"
} else {
    "webtensor cpu"
};

/// The SIMD the CPU backend's kernels run on this machine (figures differ by it: README's were measured with
/// AVX-512 on some days and AVX2 on others): the matmuls' (`gemm` picks at run time) and the quantized dot
/// products' (AVX2 + FMA, simd128, else scalar).
fn simd_path() -> &'static str {
    #[cfg(target_arch = "x86_64")]
    {
        let avx2 = std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma");
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

/// One lowered step.
#[derive(Clone, Debug)]
enum CpuKernel {
    Elementwise(ElementwiseKernel),
    MatMul(MatmulKernel),
    Rows(RowsKernel, usize),
    GetRows(GetRowsKernel),
    Concat(ConcatKernel),
    SetRows(SetRowsKernel),
    CopyInto(CopyIntoKernel),
    Rope(RopeKernel),
    Attention(AttentionKernel),
    Dequantize(DequantizeKernel),
    GetRowsQ(GetRowsQKernel),
    QMatmul(QMatmulKernel),
}

/// The CPU's side of the pass list.
struct CpuTarget {
    fusion: bool,
    device: u64,
    f32_activations: bool,
}

fn leaf(p: &Program, src: NodeId, shape: Option<&[usize]>) -> Leaf {
    let n = &p.nodes[src];
    let layout = match shape {
        Some(s) => n.layout.broadcast_operand(s),
        None => n.layout.clone(),
    };
    Leaf { storage: n.storage, dtype: n.dtype, layout }
}

/// The weight behind `t(w)` (layout `[K, N]`, strides `[1, K]`) and N.
fn weight_of_transposed(p: &Program, b: NodeId) -> (Weight, usize) {
    let l = &p.nodes[b].layout;
    let (k, n) = (l.shape[0], l.shape[1]);
    (Weight { storage: p.nodes[b].storage, dtype: p.nodes[b].dtype, row0: l.offset / k, k }, n)
}

/// The weight of a row-major `[.., K]` tensor (rows of a storage format) and its number of rows.
fn weight_of_rows(p: &Program, x: NodeId) -> (Weight, usize) {
    let l = &p.nodes[x].layout;
    let k = l.shape.last().copied().unwrap_or(1);
    (Weight { storage: p.nodes[x].storage, dtype: p.nodes[x].dtype, row0: l.offset / k, k }, l.numel() / k)
}

/// A mat-vec (at most `VEC_ROWS` rows of a) over an f16 weight read as `t(w)` (w `[N, K]` row-major): converted a
/// row at a time by the quantized kernel's mat-vec, not as a whole as `gemm`'s path would.
fn half_mat_vec(p: &Program, a: NodeId, b: NodeId) -> bool {
    let lb = &p.nodes[b].layout;
    let k = lb.shape[0];
    p.nodes[b].dtype == DType::F16
        && lb.rank() == 2
        && lb.strides == [1, k]
        && lb.offset.is_multiple_of(k)
        && p.nodes[a].layout.numel() / k.max(1) <= quant::VEC_ROWS
}

fn matmul_kernel(
    p: &Program,
    id: NodeId,
    a: NodeId,
    b: NodeId,
    epi: Option<&(crate::compile::ir::Expr, Vec<NodeId>)>,
) -> MatmulKernel {
    let node = &p.nodes[id];
    let shape = &node.layout.shape;
    let r = shape.len();
    let (m, n) = (shape[r - 2], shape[r - 1]);
    let k = p.nodes[a].layout.shape[p.nodes[a].layout.rank() - 1];
    let batch = &shape[..r - 2];
    let la = leaf(p, a, Some(&[batch, &[m, k]].concat()));
    let lb = leaf(p, b, Some(&[batch, &[k, n]].concat()));
    let epilogue = epi.map(|(e, srcs)| (e.clone(), srcs.iter().map(|&s| leaf(p, s, Some(shape))).collect()));
    // many rows against an f32 weight read as t(w): the weight's transposed copy (a few rows: gemm reads each
    // weight row once either way, and the copy would double the weight's memory for nothing)
    let b_transposed = match p.external(p.nodes[b].storage) {
        Some(r) if m > quant::VEC_ROWS => TransposedB::of(&r.ext, &p.nodes[b].layout),
        _ => None,
    };
    MatmulKernel { out: id, out_dtype: node.dtype, a: la, b: lb, m, k, n, epilogue, b_transposed }
}

impl Target for CpuTarget {
    type Kernel = CpuKernel;

    fn device_id(&self) -> u64 {
        self.device
    }

    fn fusion(&self) -> bool {
        self.fusion
    }

    fn memory_limits(&self) -> MemoryLimits {
        MemoryLimits { align: 64, max_arena: 1 << 40, max_tensor: MAX_TENSOR_BYTES, place_inputs: false }
    }

    fn lower(&self, p: &Program, _memory: &MemoryPlan, id: NodeId) -> Result<Vec<CpuKernel>> {
        self.kernel(p, id).map(|k| vec![k])
    }
}

impl CpuTarget {
    fn kernel(&self, p: &Program, id: NodeId) -> Result<CpuKernel> {
        let node = &p.nodes[id];
        let shape = &node.layout.shape;
        let (out, out_dtype) = (id, node.dtype);
        let rows = |op: RowKind, x: NodeId, mask: Option<NodeId>| {
            let x = leaf(p, x, None);
            let n = x.layout.shape.last().copied().unwrap_or(1);
            let count = x.layout.numel() / n.max(1);
            let mask = mask.map(|m| leaf(p, m, Some(&x.layout.shape)));
            CpuKernel::Rows(RowsKernel { op, out, out_dtype, x, mask, n }, count)
        };
        Ok(match &node.step {
            Step::Elementwise { expr, srcs } => CpuKernel::Elementwise(ElementwiseKernel {
                out,
                out_dtype,
                numel: node.layout.numel(),
                expr: expr.clone(),
                leaves: srcs.iter().map(|&s| leaf(p, s, Some(shape))).collect(),
            }),
            Step::MatMul { a, b, epilogue, prec }
                if p.nodes[*b].dtype.is_storage_format() || half_mat_vec(p, *a, *b) =>
            {
                let f32_activations = self.f32_activations || *prec == MatmulPrecision::F32;
                CpuKernel::QMatmul(qmatmul_kernel(p, id, (*a, *b), epilogue.as_ref(), f32_activations))
            }
            Step::MatMul { a, b, epilogue, .. } => CpuKernel::MatMul(matmul_kernel(p, id, *a, *b, epilogue.as_ref())),
            Step::GetRows { table, idx } if p.nodes[*table].dtype.is_storage_format() => {
                let (w, rows) = weight_of_rows(p, *table);
                CpuKernel::GetRowsQ(GetRowsQKernel { out, table: w, rows, idx: leaf(p, *idx, None) })
            }
            Step::Dequantize { x } => {
                let (w, rows) = weight_of_rows(p, *x);
                CpuKernel::Dequantize(DequantizeKernel { out, out_dtype, w, rows })
            }
            Step::Row { op, x, mask, params } => rows(RowKind::Row(*op, *params), *x, *mask),
            Step::Reduce { op, x } => rows(RowKind::Reduce(*op), *x, None),
            Step::GetRows { table, idx } => CpuKernel::GetRows(GetRowsKernel {
                out,
                out_dtype,
                table: leaf(p, *table, None),
                idx: leaf(p, *idx, None),
            }),
            Step::Concat { a, b, axis } => CpuKernel::Concat(ConcatKernel {
                out,
                out_dtype,
                out_shape: shape.clone(),
                a: leaf(p, *a, None),
                b: leaf(p, *b, None),
                axis: *axis,
            }),
            Step::SetRows { dst, idx, src } => CpuKernel::SetRows(SetRowsKernel {
                dst: leaf(p, *dst, None),
                idx: leaf(p, *idx, None),
                src: leaf(p, *src, None),
            }),
            Step::CopyInto { dst, src } => {
                let dst = leaf(p, *dst, None);
                let src = leaf(p, *src, Some(&dst.layout.shape));
                CpuKernel::CopyInto(CopyIntoKernel { dst, src })
            }
            Step::Rope { x, pos, rope } => CpuKernel::Rope(RopeKernel {
                out,
                out_dtype,
                x: leaf(p, *x, None),
                pos: leaf(p, *pos, None),
                rope: *rope,
            }),
            Step::Attention { q, k, v, mask, kv_len, scale, causal } => {
                let q = leaf(p, *q, None);
                let k = leaf(p, *k, None);
                let r = q.layout.rank();
                let mut full = q.layout.shape.clone();
                full[r - 1] = k.layout.shape[r - 2];
                CpuKernel::Attention(AttentionKernel {
                    out,
                    out_dtype,
                    q,
                    k,
                    v: leaf(p, *v, None),
                    mask: mask.map(|m| leaf(p, m, Some(&full))),
                    kv_len: kv_len.map(|l| leaf(p, l, None)),
                    scale: *scale,
                    causal: *causal,
                })
            }
            Step::Input { .. } | Step::View { .. } | Step::External { .. } => {
                unreachable!("inputs, views and externals are not scheduled")
            }
        })
    }
}

/// The kernel of a matmul whose weight `b` is stored in a block or half format (or a half mat-vec).
fn qmatmul_kernel(
    p: &Program,
    out: NodeId,
    (a, b): (NodeId, NodeId),
    epilogue: Option<&(crate::compile::ir::Expr, Vec<NodeId>)>,
    f32_activations: bool,
) -> QMatmulKernel {
    let node = &p.nodes[out];
    let (w, n) = weight_of_transposed(p, b);
    let epilogue =
        epilogue.map(|(e, srcs)| (e.clone(), srcs.iter().map(|&s| leaf(p, s, Some(&node.layout.shape))).collect()));
    QMatmulKernel { out, out_dtype: node.dtype, a: leaf(p, a, None), w, n, epilogue, f32_activations }
}

impl CpuKernel {
    fn run(&self, mem: &Memory) -> Result<()> {
        match self {
            CpuKernel::Elementwise(k) => k.run_all(mem),
            CpuKernel::MatMul(k) => k.run(mem),
            CpuKernel::Rows(k, rows) => k.run_all(mem, *rows),
            CpuKernel::GetRows(k) => k.run(mem)?,
            CpuKernel::Concat(k) => k.run(mem),
            CpuKernel::SetRows(k) => k.run(mem)?,
            CpuKernel::CopyInto(k) => k.run(mem),
            CpuKernel::Rope(k) => k.run(mem),
            CpuKernel::Attention(k) => k.run(mem)?,
            CpuKernel::Dequantize(k) => k.run(mem),
            CpuKernel::GetRowsQ(k) => k.run(mem)?,
            CpuKernel::QMatmul(k) => k.run(mem),
        }
        Ok(())
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
        let memory = if writable {
            let mut words = vec![0u64; bytes.len().div_ceil(8)];
            bytemuck::cast_slice_mut::<u64, u8>(&mut words)[..bytes.len()].copy_from_slice(bytes.as_slice());
            ExternalMemory::CpuState { words: std::cell::UnsafeCell::new(words), lock: std::sync::Mutex::new(()) }
        } else if aligned {
            ExternalMemory::CpuBytes(bytes, Default::default())
        } else {
            let mut words = vec![0u64; bytes.len().div_ceil(8)];
            bytemuck::cast_slice_mut::<u64, u8>(&mut words)[..bytes.len()].copy_from_slice(bytes.as_slice());
            let copy = Bytes::from_owner(std::sync::Arc::new(AlignedWords(words)), 0..bytes.len())?;
            ExternalMemory::CpuBytes(copy, Default::default())
        };
        self.resident.fetch_add(size, Ordering::Relaxed);
        // Send + Sync natively; on wasm32 (one thread) wgpu's handles are neither, as for Device
        #[allow(clippy::arc_with_non_send_sync)]
        let external = Arc::new(External {
            id: next_id(),
            name: name.into(),
            dtype,
            shape: shape.to_vec(),
            device: self.id,
            writable,
            memory,
            accounting: self.resident.clone(),
        });
        Ok(external)
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

fn compile(graph: &Graph, outputs: &[Tensor], options: &CompileOptions, device: u64) -> Result<CpuPlan> {
    let target = CpuTarget { fusion: !options.no_fusion, device, f32_activations: options.f32_activations };
    let Compiled { program, memory, kernels } = crate::compile::compile(graph, outputs, &target)?;
    for &id in program.inputs.iter() {
        let size = program.storage_bytes(id);
        if size > MAX_TENSOR_BYTES {
            let n = &program.nodes[id];
            return Err(Error::LimitExceeded {
                what: format!("input {} {:?} on the CPU backend", n.dtype, n.layout.shape),
                size,
                unit: "bytes",
                limit_name: "the CPU backend's largest tensor",
                limit: MAX_TENSOR_BYTES,
            });
        }
    }
    let arenas = memory.arena_bytes.iter().map(|&b| vec![0u64; (b as usize).div_ceil(8)]).collect();
    let kernels = kernels.into_iter().flatten().collect();
    Ok(CpuPlan { program, memory, kernels, arenas, poison: options.poison, last_us: 0.0 })
}

/// Runs `outputs` of `graph` once on the CPU backend (for checks inside the library, such as GPU tuning).
#[cfg(not(target_arch = "wasm32"))]
pub(crate) fn run_graph(
    graph: &Graph,
    outputs: &[Tensor],
    inputs: &[(Tensor, &HostTensor)],
) -> Result<Vec<HostTensor>> {
    // no external tensors: a device of its own will do
    let mut plan = compile(graph, outputs, &CompileOptions::default(), 0)?;
    let ins: Vec<(NodeId, &[u8])> = inputs.iter().map(|&(t, v)| (t.index(), v.data.as_bytes())).collect();
    let fetch = vec![Fetch::All; outputs.len()];
    Ok(plan.run_sync(&ins, &fetch)?.into_iter().flatten().collect())
}

struct CpuPlan {
    program: Program,
    memory: MemoryPlan,
    kernels: Vec<CpuKernel>,
    /// The memory plan's arenas (8-byte words; blocks are 64-byte aligned within them).
    arenas: Vec<Vec<u64>>,
    poison: bool,
    /// Wall time of the last run, in microseconds.
    last_us: f64,
}

impl Executable for CpuPlan {
    fn run<'a>(
        &'a mut self,
        inputs: &'a Inputs<'a>,
        fetch: &'a [Fetch],
    ) -> LocalFuture<'a, Result<Vec<Option<HostTensor>>>> {
        Box::pin(async move { self.run_sync(inputs, fetch) })
    }

    fn stats(&self) -> PlanStats {
        PlanStats {
            dispatches: self.kernels.len(),
            pipelines: 0,
            memory_bytes: self.memory.total_bytes(),
            peak_live_bytes: self.memory.peak_live_bytes,
            buffers: self.arenas.len(),
            kernels: self.program.steps.iter().map(|&s| self.program.nodes[s].step.name()).collect(),
            transfer: Default::default(),
        }
    }

    fn input_ids(&self) -> &[NodeId] {
        &self.program.inputs
    }

    fn last_host_us(&self) -> f64 {
        self.last_us
    }
}

impl CpuPlan {
    /// Where every storage node lives for a run: the caller's tensors for inputs (read in place, never written:
    /// steps only write their own blocks or states), the arena for steps, and resident and state tensors where
    /// they are.
    fn memory(&mut self, inputs: &Inputs<'_>) -> Result<Memory> {
        let mut mem = Memory::new(self.program.nodes.len());
        for &id in &self.program.inputs {
            let Some((_, bytes)) = inputs.iter().find(|(i, _)| *i == id) else {
                // `Plan::run` checks this first; an executable called without it must not read a stale tensor
                return Err(Error::BadInput { name: self.program.input_name(id).into(), reason: "missing".into() });
            };
            mem.set(id, bytes.as_ptr() as *mut u8, bytes.len());
        }
        let n_arenas = self.arenas.len();
        for (&id, blk) in &self.memory.blocks {
            if blk.arena >= n_arenas {
                continue;
            }
            let base = self.arenas[blk.arena].as_mut_ptr() as *mut u8;
            // SAFETY: the block lies inside its arena (the planner sized the arena to hold it).
            mem.set(id, unsafe { base.add(blk.offset as usize) }, blk.size as usize);
        }
        for r in &self.program.externals {
            let len = r.ext.bytes() as usize;
            let ptr = match &r.ext.memory {
                // never written: only states are written, and set_rows and copy_into check their destination
                ExternalMemory::CpuBytes(b, _) => b.as_slice().as_ptr() as *mut u8,
                ExternalMemory::CpuState { words, .. } => {
                    // SAFETY: the run holds the state's lock (see `run_sync`) while it uses this pointer.
                    unsafe { (*words.get()).as_mut_ptr() as *mut u8 }
                }
                ExternalMemory::Gpu { .. } => unreachable!("compile checked the device"),
            };
            mem.set(r.node, ptr, len);
        }
        Ok(mem)
    }

    fn run_sync(&mut self, inputs: &Inputs<'_>, fetch: &[Fetch]) -> Result<Vec<Option<HostTensor>>> {
        let start = now();
        let out = self.run_steps(inputs, fetch);
        self.last_us = elapsed_us(start);
        out
    }

    fn run_steps(&mut self, inputs: &Inputs<'_>, fetch: &[Fetch]) -> Result<Vec<Option<HostTensor>>> {
        if self.poison {
            self.arenas.iter_mut().for_each(|a| a.fill(u64::MAX));
        }
        // the states this plan uses, locked in a fixed order (ids) for the whole run
        let mut states: Vec<Arc<External>> =
            self.program.externals.iter().map(|r| r.ext.clone()).filter(|e| e.writable).collect();
        states.sort_by_key(|e| e.id);
        states.dedup_by_key(|e| e.id);
        let _guards: Vec<_> = states
            .iter()
            .filter_map(|e| match &e.memory {
                ExternalMemory::CpuState { lock, .. } => Some(lock.lock().unwrap_or_else(|p| p.into_inner())),
                _ => None,
            })
            .collect();
        let mem = self.memory(inputs)?;
        // natively the kernels run on one of rayon's threads, so that a kernel's parallel loop is shared by that
        // thread and the others: the caller sleeps once per run, not once per kernel (at ~300 kernels per decode
        // step of a language model, a blocked caller's wake-ups cost a third of the step). The states are locked
        // before, on the caller's thread: a rayon thread that runs another plan's kernels while it waits never
        // holds a lock that plan needs.
        let kernels = &self.kernels;
        let run_all = || kernels.iter().try_for_each(|k| k.run(&mem));
        #[cfg(not(target_arch = "wasm32"))]
        rayon::scope(|_| run_all())?;
        #[cfg(target_arch = "wasm32")]
        run_all()?;
        let mut out = Vec::with_capacity(fetch.len());
        for (&o, f) in self.program.outputs.iter().zip(fetch) {
            out.push(fetched(&self.program.nodes[o].layout, f)?.map(|l| self.read(&mem, o, &l)));
        }
        Ok(out)
    }

    /// The elements of output `o` under `layout` (its layout, or rows of it) as a new row-major tensor.
    fn read(&self, mem: &Memory, o: NodeId, layout: &crate::shape::Layout) -> HostTensor {
        let n = &self.program.nodes[o];
        let v = mem.view(n.storage, n.dtype);
        let shape = layout.shape.clone();
        if layout.is_contiguous() {
            // one copy of the elements as stored, straight into the result
            let range = layout.offset..layout.offset + layout.numel();
            let mut data = match n.dtype {
                DType::F32 => Data::F32(vec![0.0; range.len()]),
                DType::F16 => Data::F16(vec![half::f16::ZERO; range.len()]),
                DType::I32 => Data::I32(vec![0; range.len()]),
                dtype => Data::Raw { dtype, bytes: vec![0; dtype.bytes_of(range.len()).unwrap_or(0)] },
            };
            let bytes: &mut [u8] = match &mut data {
                Data::F32(d) => bytemuck::cast_slice_mut(d),
                Data::F16(d) => bytemuck::cast_slice_mut(d),
                Data::I32(d) => bytemuck::cast_slice_mut(d),
                Data::Raw { bytes, .. } => bytes,
            };
            v.copy_bytes(range, bytes);
            return HostTensor { shape, data };
        }
        let all = 0..v.len();
        let storage = match n.dtype {
            DType::F32 => Data::F32(all.map(|i| v.get(i)).collect()),
            DType::F16 => Data::F16(all.map(|i| half::f16::from_f32(v.get(i))).collect()),
            DType::I32 => Data::I32(all.map(|i| v.get_i32(i)).collect()),
            // a strided view of a storage format: compile refuses it (only whole rows are views of blocks)
            dtype => Data::Raw { dtype, bytes: v.block_bytes(0..v.len() / dtype.block_size()).to_vec() },
        };
        HostTensor { shape, data: gather_view(&storage, layout) }
    }
}
