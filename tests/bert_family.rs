//! Encoders of the BERT family beyond BERT itself, against the f64 numpy reference
//! (`scripts/minilm_reference.py --model DIR`, recorded in tests/data/bert_family.json): a RoBERTa / XLM-R
//! configuration (`model_type` `roberta`: positions counted from `pad_token_id + 1`) and a model without
//! token-type embeddings. The weights are all-MiniLM-L6-v2's real ones, in directories that differ from it by
//! the file each case changes, so the outputs differ from MiniLM's only by what the case changes.
#![cfg(feature = "cli")]

mod common;

use common::minilm::{model_dir, variant};
use webtensor::io::SafetensorsFile;
use webtensor::models::bert::{EmbedderOptions, SentenceEmbedder};

/// all-MiniLM-L6-v2's config.json with `model_type` set to `ty`.
fn config_as(ty: &str) -> Option<String> {
    let src = model_dir()?;
    let mut j: serde_json::Value = serde_json::from_slice(&std::fs::read(src.join("config.json")).unwrap()).unwrap();
    j["model_type"] = ty.into();
    Some(j.to_string())
}

/// The real model.safetensors without the tensor `drop`, its data packed again.
fn safetensors_without(drop: &str) -> Option<Vec<u8>> {
    let path = model_dir()?.join("model.safetensors");
    let f = SafetensorsFile::open(path.to_str().unwrap()).unwrap();
    let mut header = serde_json::Map::new();
    let mut data = Vec::new();
    for e in f.tensors().iter().filter(|e| e.name != drop) {
        let bytes = f.data(e).unwrap();
        let at = data.len();
        data.extend_from_slice(bytes.as_slice());
        let entry = serde_json::json!({"dtype": e.dtype, "shape": e.shape, "data_offsets": [at, data.len()]});
        header.insert(e.name.clone(), entry);
    }
    let header = serde_json::Value::Object(header).to_string();
    let mut out = (header.len() as u64).to_le_bytes().to_vec();
    out.extend(header.as_bytes());
    out.extend(data);
    Some(out)
}

/// Each sentence of the case `key` in tests/data/bert_family.json: ids and embedding.
fn reference(key: &str) -> Vec<(String, Vec<u32>, Vec<f64>)> {
    let j: serde_json::Value = serde_json::from_str(include_str!("data/bert_family.json")).unwrap();
    let nums =
        |v: &serde_json::Value| -> Vec<f64> { v.as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect() };
    j[key]["sentences"]
        .as_array()
        .unwrap_or_else(|| panic!("no case {key}"))
        .iter()
        .map(|s| {
            let ids = nums(&s["ids"]).into_iter().map(|x| x as u32).collect();
            (s["text"].as_str().unwrap().to_string(), ids, nums(&s["embedding"]))
        })
        .collect()
}

/// The embedder of `dir` on every device gives the reference's ids and vectors (cosine ≥ 0.99999), in one batch
/// (and one by one on the CPU backend).
fn check(key: &str, dir: &std::path::Path) {
    let cases = reference(key);
    let texts: Vec<&str> = cases.iter().map(|c| c.0.as_str()).collect();
    for device in common::devices() {
        let mut e = SentenceEmbedder::load(device, dir.to_str().unwrap(), EmbedderOptions::default()).unwrap();
        for (text, ids, _) in &cases {
            assert_eq!(&e.tokenize(text).unwrap(), ids, "{key}: {text:?}");
        }
        // one by one on the CPU backend only: on lavapipe each new length compiles pipelines (minutes in all)
        let batches: &[usize] = if device.is_cpu() { &[32, 1] } else { &[32] };
        for &batch in batches {
            let got = e.embed_batched(&texts, batch).unwrap();
            let mut worst = 1f64;
            for (g, (text, _, want)) in got.iter().zip(&cases) {
                let dot: f64 = g.iter().zip(want).map(|(a, b)| *a as f64 * b).sum();
                let na = g.iter().map(|a| (*a as f64).powi(2)).sum::<f64>().sqrt();
                let nb = want.iter().map(|b| b * b).sum::<f64>().sqrt();
                let cos = dot / (na * nb);
                worst = worst.min(cos);
                assert!(cos >= 0.99999, "{key} on {:?}, batch {batch}: {text:?} cosine {cos}", device);
            }
            println!("{key} on {:?}, batch {batch}: lowest cosine {worst:.7}", device.capabilities().name);
        }
    }
}

#[test]
fn roberta_positions_count_from_past_the_padding_id() {
    let Some(config) = config_as("roberta") else { return };
    let Some(dir) = variant("roberta", &[("config.json", config)]) else { return };
    check("roberta", &dir);
}

#[test]
fn a_model_without_token_type_embeddings() {
    let Some(st) = safetensors_without("embeddings.token_type_embeddings.weight") else { return };
    let Some(dir) = variant("no-token-types", &[("model.safetensors", st)]) else { return };
    check("no_token_types", &dir);
}

/// all-MiniLM-L6-v2 written as a BERT GGUF file by `scripts/bert_gguf.py` (llama.cpp's converter's layout and
/// names) with matrices of `ty`, in a scratch folder; `None` when the gguf package or the model is missing.
fn bert_gguf(ty: &str) -> Option<std::path::PathBuf> {
    model_dir()?;
    let out = common::cli::scratch(&format!("bert-gguf-{ty}")).join(format!("minilm-{ty}.gguf"));
    let script = common::repo_file("scripts/bert_gguf.py");
    let run = std::process::Command::new("python3")
        .args([script.as_str(), out.to_str().unwrap(), "--type", ty])
        .output()
        .unwrap();
    if !run.status.success() {
        let err = String::from_utf8_lossy(&run.stderr);
        assert!(std::env::var("REQUIRE_MODELS").as_deref() != Ok("1"), "bert_gguf.py failed: {err}");
        println!("SKIPPED: scripts/bert_gguf.py needs numpy and gguf: {err}");
        return None;
    }
    Some(out)
}

/// The 100 sentences of tests/data/minilm_reference.json: text, ids (truncated at 256) and embedding.
fn minilm_reference() -> Vec<(String, Vec<u32>, Vec<f64>)> {
    let j: serde_json::Value = serde_json::from_str(include_str!("data/minilm_reference.json")).unwrap();
    let nums =
        |v: &serde_json::Value| -> Vec<f64> { v.as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect() };
    j["sentences"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            let ids = nums(&s["ids"]).into_iter().map(|x| x as u32).collect();
            (s["text"].as_str().unwrap().to_string(), ids, nums(&s["embedding"]))
        })
        .collect()
}

fn cosine(a: &[f32], b: &[f64]) -> f64 {
    let dot: f64 = a.iter().zip(b).map(|(x, y)| *x as f64 * y).sum();
    let na = a.iter().map(|x| (*x as f64).powi(2)).sum::<f64>().sqrt();
    dot / (na * b.iter().map(|y| y * y).sum::<f64>().sqrt())
}

/// A BERT GGUF file embeds as its sentence-transformers directory does: the WordPiece vocabulary rebuilt from the
/// file gives the `tokenizers` package's ids for 100 varied sentences (Unicode, accents, CJK, emoji, digits, an
/// empty line; the file truncates at its 512 positions where the directory stops at 256), and the vectors match
/// the f64 reference (cosine ≥ 0.99999 with f32 matrices on every device; ≥ 0.998 with Q8_0 matrices on the CPU
/// backend, whose integer kernels also round the activations to 8 bits).
#[test]
fn bert_gguf_files_embed_as_the_directory() {
    let Some(f32_file) = bert_gguf("f32") else { return };
    let cases = minilm_reference();
    let cpu =
        SentenceEmbedder::load(&webtensor::Device::cpu(), f32_file.to_str().unwrap(), Default::default()).unwrap();
    assert!(cpu.normalize && cpu.max_seq_length == 512, "llama.cpp's defaults: normalized, n_ctx_train tokens");
    for (text, want, _) in &cases {
        let got = cpu.tokenize(text).unwrap();
        if want.len() < 256 {
            assert_eq!(&got, want, "{text:?}");
        } else {
            assert_eq!(got[..255], want[..255], "{text:?} (truncated by the directory at 256)");
        }
    }
    // the short sentences (the long ones are truncated differently)
    let short: Vec<_> = cases.iter().filter(|c| c.1.len() < 64).take(24).collect();
    let texts: Vec<&str> = short.iter().map(|c| c.0.as_str()).collect();
    for device in common::devices() {
        let mut e = SentenceEmbedder::load(device, f32_file.to_str().unwrap(), Default::default()).unwrap();
        let got = e.embed(&texts).unwrap();
        let worst = got.iter().zip(&short).map(|(g, c)| cosine(g, &c.2)).fold(1.0, f64::min);
        println!("bert GGUF f32 on {}: lowest cosine {worst:.7}", device.capabilities().name);
        assert!(worst >= 0.99999, "{}: {worst}", device.capabilities().name);
    }
    let Some(q8) = bert_gguf("q8_0") else { return };
    let mut e = SentenceEmbedder::load(&webtensor::Device::cpu(), q8.to_str().unwrap(), Default::default()).unwrap();
    let got = e.embed(&texts).unwrap();
    let worst = got.iter().zip(&short).map(|(g, c)| cosine(g, &c.2)).fold(1.0, f64::min);
    println!("bert GGUF q8_0 on the CPU: lowest cosine {worst:.7}");
    assert!(worst >= 0.998, "q8_0: {worst}");
}

/// `EmbedderOptions::f16_weights` stores a BERT GGUF file's f32 matrices in f16, as it stores a directory's: the
/// device holds exactly half their bytes, and the vectors still match the f64 reference (cosine ≥ 0.9999).
#[test]
fn bert_gguf_f16_weights_store_the_matrices_in_f16() {
    let Some(file) = bert_gguf("f32") else { return };
    let path = file.to_str().unwrap();
    let load = |f16: bool| {
        let device = webtensor::Device::cpu();
        let options = EmbedderOptions { f16_weights: f16, ..Default::default() };
        let e = SentenceEmbedder::load(&device, path, options).unwrap();
        (device.resident_bytes(), e)
    };
    let ((full, _), (half, mut e)) = (load(false), load(true));
    // MiniLM: 6 layers of Q, K, V, O [384, 384], up [1536, 384] and down [384, 1536]
    let matrix_elements = 6 * (4 * 384 * 384 + 2 * 384 * 1536);
    assert_eq!(full - half, 2 * matrix_elements as u64, "each matrix element in 2 bytes instead of 4");
    let cases = minilm_reference();
    let short: Vec<_> = cases.iter().filter(|c| c.1.len() < 64).take(16).collect();
    let texts: Vec<&str> = short.iter().map(|c| c.0.as_str()).collect();
    let got = e.embed(&texts).unwrap();
    let worst = got.iter().zip(&short).map(|(g, c)| cosine(g, &c.2)).fold(1.0, f64::min);
    println!("bert GGUF f32 file with f16_weights: lowest cosine {worst:.7}");
    assert!(worst >= 0.9999, "f16 matrices: {worst}");
}

/// `embed --model FILE.gguf` runs a BERT GGUF file; `inspect` says it does; a BERT file of another kind is
/// refused by name.
#[test]
fn the_cli_embeds_with_a_bert_gguf_file() {
    let Some(file) = bert_gguf("f16") else { return };
    let dir = file.parent().unwrap();
    let f = file.to_str().unwrap();
    let out = common::cli::assert_success(&common::cli::webtensor(dir, &["inspect", f]));
    assert!(
        out.lines().nth(1).unwrap().starts_with("architecture: bert (BERT sentence embedders): supported"),
        "{out}"
    );
    let args = ["embed", "--model", f, "--backend", "cpu", "--npy", "v.npy", "A man is eating food.", "Hello!"];
    common::cli::assert_success(&common::cli::webtensor(dir, &args));
    let v = webtensor::io::read_npy(dir.join("v.npy").to_str().unwrap()).unwrap();
    assert_eq!(v.shape, [2, 384]);
    let cases = minilm_reference();
    for (i, text) in ["A man is eating food.", "Hello!"].iter().enumerate() {
        let want = &cases.iter().find(|c| c.0 == *text).unwrap().2;
        let row = &v.data.to_f32()[i * 384..(i + 1) * 384];
        assert!(cosine(row, want) >= 0.9995, "{text}: {}", cosine(row, want));
    }
    // a language model's GGUF file is not an embedder: one error naming the architecture
    let llama = dir.join("tiny-llama.gguf");
    std::fs::write(&llama, common::tiny_gguf::TinyLlama::new().bytes()).unwrap();
    let args = ["embed", "--model", llama.to_str().unwrap(), "--backend", "cpu", "x"];
    common::cli::assert_error_last(&common::cli::webtensor(dir, &args), 1, &["tiny-llama.gguf", "'llama'", "(bert)"]);
}
