//! Every decoder architecture of `webtensor::models::arch` against an independent float64 numpy forward pass:
//! `scripts/arch_models.py` writes a small random-weight GGUF file per architecture with the real tensor names
//! and metadata keys (llama, Llama 3's rope frequency factors, a Mistral-style llama with a sliding window, qwen2,
//! qwen3, phi3, gemma2, gemma3, the mixtures of experts: Mixtral, qwen3moe, qwen2moe, olmoe, gpt-oss, and the
//! hybrids of `scripts/hybrid_models.py`: qwen35, qwen3next, qwen35moe) and
//! the reference logits at every position of three prompts. Each file runs on the CPU backend and the GPU devices
//! of the suite, with f32 and f16 KV caches, as one prefill (in chunks of up to 4 tokens, and whole) and as
//! decode steps, and its logits must match within 1e-3 of their largest magnitude (f32 and f16 caches).
//! The batched decode (several sequences in one step, each with its own mask and window) must give each
//! sequence the tokens it gets alone.
#![cfg(feature = "cli")]

mod common;

use std::path::PathBuf;
use std::sync::OnceLock;
use webtensor::models::decoder::batch::{Batch, BatchEvent, BatchOptions};
use webtensor::models::{GenerateOptions, LanguageModel, LanguageModelOptions};
use webtensor::Device;

/// The directory of the written cases (once per test binary), or `None` when the Python packages are missing.
fn cases() -> Option<&'static PathBuf> {
    static DIR: OnceLock<Option<PathBuf>> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = common::cli::scratch("architectures");
        let out = std::process::Command::new("python3")
            .arg(common::repo_file("scripts/arch_models.py"))
            .arg(&dir)
            .output()
            .expect("python3 runs");
        if !out.status.success() {
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(std::env::var("REQUIRE_MODELS").as_deref() != Ok("1"), "arch_models.py failed: {err}");
            println!("SKIPPED: scripts/arch_models.py needs numpy and gguf: {err}");
            return None;
        }
        Some(dir)
    })
    .as_ref()
}

struct Prompt {
    ids: Vec<u32>,
    /// The reference logits after each position.
    logits: Vec<Vec<f64>>,
}

fn reference(case: &str) -> Vec<Prompt> {
    let path = cases().unwrap().join(format!("{case}.json"));
    let j: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let nums =
        |v: &serde_json::Value| -> Vec<f64> { v.as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect() };
    j["prompts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| Prompt {
            ids: nums(&p["ids"]).into_iter().map(|x| x as u32).collect(),
            logits: p["logits"].as_array().unwrap().iter().map(nums).collect(),
        })
        .collect()
}

/// max |got − want| / max |want|.
fn rel_err(got: &[f32], want: &[f64]) -> f64 {
    assert_eq!(got.len(), want.len(), "vocabulary size");
    let diff = got.iter().zip(want).map(|(&g, &w)| (g as f64 - w).abs()).fold(0.0, f64::max);
    diff / want.iter().map(|w| w.abs()).fold(0.0, f64::max)
}

fn load(case: &str, device: &Device, f32_cache: bool, max_chunk: usize) -> LanguageModel {
    let path = cases().unwrap().join(format!("{case}.gguf"));
    // the CPU's activations in f32 against block types (gpt-oss's MXFP4 experts): its default 8-bit activations
    // move the logits by about 2% (and may turn a router to another expert), which the quant suite measures
    let compile = webtensor::CompileOptions { f32_activations: true, ..Default::default() };
    let options = LanguageModelOptions { context: 32, f32_cache, max_chunk, compile };
    LanguageModel::load(device, path.to_str().unwrap(), options).unwrap_or_else(|e| panic!("{case}: {e}"))
}

/// The largest relative error of `case`'s logits on `device`: each prompt prefilled at once (chunks of up to
/// `max_chunk`), then token by token (decode steps).
fn worst_error(case: &str, device: &Device, f32_cache: bool, max_chunk: usize) -> f64 {
    let mut m = load(case, device, f32_cache, max_chunk);
    let mut worst: f64 = 0.0;
    for p in reference(case) {
        m.reset();
        let got = m.logits(&p.ids).unwrap();
        worst = worst.max(rel_err(&got, p.logits.last().unwrap()));
        m.reset();
        for (i, &id) in p.ids.iter().enumerate() {
            let got = m.logits(&[id]).unwrap();
            worst = worst.max(rel_err(&got, &p.logits[i]));
        }
    }
    worst
}

fn check(case: &str) {
    check_within(case, 1e-3);
}

/// [`check`] with `f16_tol` for the f16 cache.
fn check_within(case: &str, f16_tol: f64) {
    if cases().is_none() {
        return;
    }
    for device in common::devices() {
        for (f32_cache, max_chunk, tol) in [(true, 4, 1e-3), (true, 256, 1e-3), (false, 4, f16_tol)] {
            let err = worst_error(case, device, f32_cache, max_chunk);
            println!("{case} on {device:?}, f32 cache {f32_cache}, chunks of {max_chunk}: relative error {err:.2e}");
            assert!(err <= tol, "{case} on {device:?} (f32 cache {f32_cache}, chunks {max_chunk}): {err:.2e} > {tol}");
        }
    }
}

/// Greedy tokens of three prompts decoded together in one batch equal each alone.
fn batched_as_alone(case: &str) {
    if cases().is_none() {
        return;
    }
    let opts = GenerateOptions { max_tokens: 10, ignore_eos: true, ..Default::default() };
    for device in common::devices() {
        let prompts: Vec<Vec<u32>> = reference(case).into_iter().map(|p| p.ids).collect();
        let mut m = load(case, device, true, 4);
        let alone: Vec<Vec<u32>> = prompts
            .iter()
            .map(|p| {
                m.reset();
                m.generate(p, &opts, |_, _| true).unwrap().tokens
            })
            .collect();
        let mut batch = Batch::new(m, BatchOptions { slots: 3, prefill_tokens: 8 }).unwrap();
        let ids: Vec<_> = prompts.iter().map(|p| batch.add(p, &opts).unwrap()).collect();
        let mut got = vec![vec![]; prompts.len()];
        for _ in 0..100 {
            for e in batch.step().unwrap() {
                if let BatchEvent::Finished(id, g) = e {
                    got[ids.iter().position(|&i| i == id).unwrap()] = g.tokens;
                }
            }
            if batch.active() == 0 {
                break;
            }
        }
        assert_eq!(got, alone, "{case} on {device:?}: batched as alone");
    }
}

#[test]
fn llama() {
    check("llama");
}

#[test]
fn llama3_rope_frequency_factors() {
    check("llama3");
    batched_as_alone("llama3");
}

#[test]
fn mistral_sliding_window() {
    check("mistral");
    batched_as_alone("mistral");
}

#[test]
fn qwen2_qkv_bias() {
    check("qwen2");
}

#[test]
fn qwen2_yarn_rope_scaling() {
    check("qwen2_yarn");
}

#[test]
fn qwen3_qk_norm() {
    check("qwen3");
}

#[test]
fn phi3_fused_qkv_and_gate_up() {
    check("phi3");
    batched_as_alone("phi3");
}

#[test]
fn phi3_longrope() {
    check("phi3_longrope");
}

#[test]
fn gemma2_softcapping_and_alternating_windows() {
    check("gemma2");
    batched_as_alone("gemma2");
}

#[test]
fn gemma3_qk_norm_and_local_rope() {
    check("gemma3");
    batched_as_alone("gemma3");
}

#[test]
fn qwen3moe_experts_renormalized() {
    check("qwen3moe");
    batched_as_alone("qwen3moe");
}

#[test]
fn qwen2moe_shared_expert() {
    check("qwen2moe");
}

#[test]
fn mixtral_llama_with_experts() {
    check("mixtral");
}

#[test]
fn olmoe_whole_projection_qk_norm() {
    check("olmoe");
}

#[test]
fn gpt_oss_sinks_mxfp4_experts_and_alternating_windows() {
    // YaRN scales every rotated q and k by 1.35: an f16 cache's rounding moves the logits by 1.1e-3
    check_within("gptoss", 2e-3);
    batched_as_alone("gptoss");
}

/// Qwen3.5: gated delta-net layers (the causal conv, the delta rule's state carried from chunk to chunk and step
/// to step, value heads tiled over the key heads) beside gated full attention with partial rope.
#[test]
fn qwen35_gated_delta_net_beside_gated_attention() {
    // the f16 cache's rounding of the attention layers' keys and values moves the logits by 1.1e-3 (1.7e-6 with
    // an f32 cache): the q/k-normed heads' keys are of order 1 in every dim, the rounding unscaled
    check_within("qwen35", 2e-3);
    batched_as_alone("qwen35");
}

/// Qwen3-Next: Qwen3.5's layers with grouped value heads, β's and the decay's logits in one `ssm_ba`, and a
/// mixture of experts with a sigmoid-gated shared expert.
#[test]
fn qwen3next_grouped_heads_and_shared_expert() {
    // as qwen35's: 1.4e-3 with an f16 cache, 3.8e-6 with an f32 one
    check_within("qwen3next", 2e-3);
    batched_as_alone("qwen3next");
}

/// Qwen3.5 MoE: Qwen3.5's layers with a mixture of experts whose gate and up projections are one stacked tensor
/// (one `mul_mat_id` for both), and a sigmoid-gated shared expert.
#[test]
fn qwen35moe_fused_gate_up_experts() {
    check("qwen35moe");
    batched_as_alone("qwen35moe");
}

/// Q, K and V are one matmul where their weights share a dtype (the three concatenated at load, or a fused
/// `attn_qkv` as Phi-3's), biased or not, and three where they do not (the Mistral-style case keeps V in f16): the
/// decode plan's matmuls, on every device of the suite.
#[test]
fn qkv_projections_are_one_matmul_where_they_share_a_dtype() {
    if cases().is_none() {
        return;
    }
    // a layer: Q/K/V, the output projection, gate and up (one dual matmul where the backend has it), down
    for device in common::devices() {
        let mut counts = vec![];
        for case in ["llama", "qwen2", "phi3", "mistral"] {
            let mut m = load(case, device, true, 4);
            m.logits(&[3]).unwrap();
            let stats = m.plan_stats();
            let (t, decode) = &stats[0];
            assert_eq!(*t, 1, "{case}: the decode plan");
            let matmuls = decode.kernels.iter().filter(|k| k.contains("mat")).count();
            counts.push(matmuls);
            println!("{case} on {device:?}: {matmuls} matmuls in {:?}", decode.kernels);
        }
        let [llama, qwen2, phi3, mistral] = counts[..] else { unreachable!() };
        assert!(llama == qwen2 && llama == phi3, "{device:?}: one Q/K/V matmul each: {counts:?}");
        assert_eq!(mistral, llama + 2 * 2, "{device:?}: V in another dtype, three matmuls a layer (2 layers)");
    }
}

/// `inspect` names each file's architecture, says that it runs, and gives the widths its metadata declares.
#[test]
fn inspect_names_the_architecture() {
    let Some(dir) = cases() else { return };
    for (case, arch) in [
        ("llama", "llama"),
        ("llama3", "llama"),
        ("mistral", "llama"),
        ("qwen2", "qwen2"),
        ("qwen3", "qwen3"),
        ("phi3", "phi3"),
        ("gemma2", "gemma2"),
        ("gemma3", "gemma3"),
        ("mixtral", "llama"),
        ("qwen3moe", "qwen3moe"),
        ("qwen2moe", "qwen2moe"),
        ("olmoe", "olmoe"),
        ("gptoss", "gpt-oss"),
    ] {
        let path = dir.join(format!("{case}.gguf"));
        let out = common::cli::assert_success(&common::cli::webtensor(dir, &["inspect", path.to_str().unwrap()]));
        let line = out.lines().nth(1).unwrap_or_default();
        assert!(line.starts_with(&format!("architecture: {arch} (")), "{case}: {line}");
        assert!(line.contains("supported by generate, chat and serve") && line.contains(" layers, width "), "{line}");
    }
}

/// Each architecture's prefill and decode as real GPUs' adapters plan them (the recorded NVIDIA H200 and Apple
/// M1 Pro profiles: subgroup mat-vecs, shader-f16, their limits), carried out on lavapipe: the logits within 1e-5
/// of the f64 reference (f32 KV caches), and a llama-family decode step in 6 dispatches a layer (Q/K/V normed in one mat-vec;
/// the queries' rope and both KV-cache writes in one dispatch; attention, with its combine a 7th where the keys
/// are split; the output projection with the residual; gate and up normed in one dual mat-vec; down with the
/// residual), 4 more for the embedding and the head.
#[test]
fn decode_steps_as_real_gpus_plan_them() {
    let (Some(_), Some(gpu)) = (cases(), common::gpu()) else { return };
    for profile in ["nvidia-h200-vulkan", "apple-m1-pro-metal"] {
        let json = std::fs::read_to_string(common::repo_file(&format!("tests/data/profiles/{profile}.json"))).unwrap();
        let caps = webtensor::Capabilities::from_json(&json).unwrap();
        let kind = gpu.capabilities().backend;
        let device = webtensor::testing::device_with_profile(kind, &caps, false, (128, 8)).unwrap();
        let cases = ["llama", "llama3", "mistral", "qwen2", "qwen3", "phi3", "gemma2", "gemma3", "qwen3moe", "gptoss"];
        for case in cases {
            let err = worst_error(case, &device, true, 4);
            println!("{case} under {profile}: relative error {err:.2e}");
            assert!(err <= 1e-5, "{case} under {profile}: {err:.2e}");
            if ["llama", "llama3", "qwen2", "phi3"].contains(&case) {
                let mut m = load(case, &device, false, 4);
                m.logits(&[3]).unwrap();
                let (_, decode) = &m.plan_stats()[0];
                let layers = decode.kernels.iter().filter(|k| *k == "rope+kv_writes").count();
                assert!(layers > 0, "{case} under {profile}: {:?}", decode.kernels);
                let combines = decode.kernels.iter().filter(|k| k.ends_with("split")).count();
                let want = 6 * layers + combines + 4;
                assert_eq!(decode.dispatches, want, "{case} under {profile}: {:?}", decode.kernels);
            }
        }
    }
}
