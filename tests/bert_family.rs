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
