//! A sentence-transformers directory's configuration honoured or refused, never ignored: every pooling mode of
//! `1_Pooling/config.json` against an f64 numpy reference (`scripts/minilm_reference.py --pooling-json`, checked
//! against sentence-transformers itself when it was recorded), a `Dense` module and `Normalize` from
//! `modules.json`, and what is refused: several modes at once, an unknown module, modules out of order,
//! nonsensical numbers, a token id past the embedding table (on every backend). Directories are the real
//! all-MiniLM-L6-v2's files, linked, with the one file a case changes.
#![cfg(feature = "cli")]

mod common;

use common::minilm::{model_dir, variant};
use webtensor::models::bert::{EmbedderOptions, SentenceEmbedder};
use webtensor::Device;

const TRANSFORMER: &str = r#"{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"}"#;
const POOLING: &str = r#"{"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}"#;
const DENSE: &str = r#"{"idx": 2, "name": "2", "path": "2_Dense", "type": "sentence_transformers.models.Dense"}"#;
const NORMALIZE: &str =
    r#"{"idx": 3, "name": "3", "path": "3_Normalize", "type": "sentence_transformers.models.Normalize"}"#;

fn modules(list: &[&str]) -> String {
    format!("[{}]", list.join(", "))
}

fn pooling(mode: &str) -> String {
    let modes = ["cls_token", "mean_tokens", "max_tokens", "mean_sqrt_len_tokens", "weightedmean_tokens", "lasttoken"];
    let fields: Vec<String> = modes.iter().map(|m| format!("\"pooling_mode_{m}\": {}", *m == mode)).collect();
    format!("{{\"word_embedding_dimension\": 384, {}}}", fields.join(", "))
}

fn reference() -> serde_json::Value {
    serde_json::from_str(include_str!("data/minilm_pooling.json")).unwrap()
}

fn max_abs(a: &[f32], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| (*x as f64 - y).abs()).fold(0.0, f64::max)
}

#[test]
fn every_pooling_mode_matches_the_reference() {
    let r = reference();
    for (mode, key) in [
        ("mean_tokens", "mean"),
        ("cls_token", "cls"),
        ("max_tokens", "max"),
        ("mean_sqrt_len_tokens", "mean_sqrt_len"),
        ("weightedmean_tokens", "weightedmean"),
        ("lasttoken", "lasttoken"),
    ] {
        // without Normalize: the pooled vectors themselves
        let files = [("1_Pooling/config.json", pooling(mode)), ("modules.json", modules(&[TRANSFORMER, POOLING]))];
        let Some(dir) = variant(mode, &files) else { return };
        for device in common::devices() {
            let mut e = SentenceEmbedder::load(device, dir.to_str().unwrap(), EmbedderOptions::default()).unwrap();
            let texts: Vec<&str> = r["cases"].as_array().unwrap().iter().map(|c| c["text"].as_str().unwrap()).collect();
            let got = e.embed(&texts).unwrap();
            for (c, v) in r["cases"].as_array().unwrap().iter().zip(&got) {
                let want: Vec<f64> = c["modes"][key].as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect();
                let err = max_abs(v, &want);
                println!("{mode} on {}: max |diff| {err:.2e} ({:?})", device.capabilities().name, c["text"]);
                assert!(err < 2e-4, "{mode} on {}: {err}", device.capabilities().name);
            }
        }
    }
}

/// A `Dense` module (`tanh(p · Wᵀ + b)`, 384 -> 16) then `Normalize`, against the mean reference put through the
/// same layer in f64.
#[test]
fn dense_and_normalize_modules_are_applied_in_order() {
    let (inp, out) = (384usize, 16usize);
    let w: Vec<f32> = (0..inp * out).map(|i| ((i * 37 % 101) as f32 - 50.0) / 400.0).collect();
    let b: Vec<f32> = (0..out).map(|i| i as f32 / 100.0 - 0.05).collect();
    let header = format!(
        "{{\"linear.weight\":{{\"dtype\":\"F32\",\"shape\":[{out},{inp}],\"data_offsets\":[0,{}]}},\"linear.bias\":{{\"dtype\":\"F32\",\"shape\":[{out}],\"data_offsets\":[{},{}]}}}}",
        inp * out * 4,
        inp * out * 4,
        inp * out * 4 + out * 4
    );
    let mut st = (header.len() as u64).to_le_bytes().to_vec();
    st.extend(header.as_bytes());
    st.extend(w.iter().chain(&b).flat_map(|x| x.to_le_bytes()));
    let config = r#"{"in_features": 384, "out_features": 16, "bias": true, "activation_function": "torch.nn.modules.activation.Tanh"}"#;
    let files = [
        ("1_Pooling/config.json", pooling("mean_tokens")),
        ("modules.json", modules(&[TRANSFORMER, POOLING, DENSE, NORMALIZE])),
        ("2_Dense/config.json", config.to_string()),
    ];
    let Some(dir) = variant("dense", &files) else { return };
    std::fs::write(dir.join("2_Dense/model.safetensors"), st).unwrap();
    let r = reference();
    let case = &r["cases"][0];
    let mean: Vec<f64> = case["modes"]["mean"].as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect();
    let y: Vec<f64> = (0..out)
        .map(|o| ((0..inp).map(|i| w[o * inp + i] as f64 * mean[i]).sum::<f64>() + b[o] as f64).tanh())
        .collect();
    let n = y.iter().map(|v| v * v).sum::<f64>().sqrt();
    let want: Vec<f64> = y.iter().map(|v| v / n).collect();
    for device in common::devices() {
        let mut e = SentenceEmbedder::load(device, dir.to_str().unwrap(), EmbedderOptions::default()).unwrap();
        let got = e.embed(&[case["text"].as_str().unwrap()]).unwrap();
        assert_eq!(got[0].len(), out);
        assert!(max_abs(&got[0], &want) < 1e-4, "{:?} vs {want:?}", got[0]);
    }
}

#[test]
fn configurations_it_cannot_honour_are_refused() {
    let refuse = |name: &str, files: &[(&str, String)], needle: &str| {
        let Some(dir) = variant(name, files) else { return };
        let e = SentenceEmbedder::load(&Device::cpu(), dir.to_str().unwrap(), EmbedderOptions::default());
        let m = e.err().unwrap_or_else(|| panic!("{name}: loaded")).to_string();
        println!("{name}: {m}");
        assert!(m.contains(needle), "{name}: {m:?} lacks {needle:?}");
    };
    let two = pooling("mean_tokens").replace("\"pooling_mode_max_tokens\": false", "\"pooling_mode_max_tokens\": true");
    refuse("two-modes", &[("1_Pooling/config.json", two)], "several pooling modes");
    refuse("no-mode", &[("1_Pooling/config.json", pooling("none"))], "no pooling mode");
    let yes =
        pooling("mean_tokens").replace("\"pooling_mode_mean_tokens\": true", "\"pooling_mode_mean_tokens\": \"yes\"");
    refuse("mode-as-text", &[("1_Pooling/config.json", yes)], "pooling_mode_mean_tokens is \"yes\", not true or false");
    let odd = r#"{"idx": 2, "name": "2", "path": "2_X", "type": "sentence_transformers.models.LayerNorm"}"#;
    refuse("unknown-module", &[("modules.json", modules(&[TRANSFORMER, POOLING, odd]))], "LayerNorm is not supported");
    refuse("out-of-order", &[("modules.json", modules(&[TRANSFORMER, POOLING, NORMALIZE, DENSE]))], "cannot apply");
    let config = |edit: &str| -> String {
        let src = model_dir().map(|d| std::fs::read_to_string(d.join("config.json")).unwrap()).unwrap_or_default();
        let mut j: serde_json::Value = serde_json::from_str(&src).unwrap_or_default();
        let (k, v) = edit.split_once('=').unwrap();
        j[k] = serde_json::from_str(v).unwrap();
        j.to_string()
    };
    refuse("zero-heads", &[("config.json", config("num_attention_heads=0"))], "num_attention_heads is 0");
    refuse("bad-eps", &[("config.json", config("layer_norm_eps=-1.0"))], "layer_norm_eps");
    refuse("one-position", &[("config.json", config("max_position_embeddings=1"))], "max_position_embeddings");
    refuse("huge-width", &[("config.json", config("hidden_size=4294967296"))], "hidden_size");
    refuse("odd-act", &[("config.json", config("hidden_act=\"nonsense\""))], "config.json: hidden_act 'nonsense'");
    let relative = config("position_embedding_type=\"relative_key\"");
    refuse("relative-key", &[("config.json", relative)], "config.json: position_embedding_type \"relative_key\"");
    // layers the config does not count would be left out silently
    refuse("fewer-layers", &[("config.json", config("num_hidden_layers=1"))], "encoder.layer.1.");
    // an optional file there but unreadable is an error, not absent (a FIFO pooling config became mean pooling)
    #[cfg(unix)]
    if let Some(dir) = variant("fifo-pooling", &[("1_Pooling/config.json", pooling("cls_token"))]) {
        let file = dir.join("1_Pooling/config.json");
        std::fs::remove_file(&file).unwrap();
        assert!(std::process::Command::new("mkfifo").arg(&file).status().unwrap().success());
        let e = SentenceEmbedder::load(&Device::cpu(), dir.to_str().unwrap(), EmbedderOptions::default());
        let m = e.err().expect("a FIFO pooling config").to_string();
        assert!(m.contains("1_Pooling/config.json: not a regular file"), "{m}");
    }
    // a WordPiece vocabulary without its [UNK]: refused when loaded, not on the first unknown word
    if let Some(d) = model_dir() {
        let mut tk: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(d.join("tokenizer.json")).unwrap()).unwrap();
        tk["model"]["vocab"].as_object_mut().unwrap().remove("[UNK]");
        refuse("no-unk", &[("tokenizer.json", tk.to_string())], "tokenizer.json: the tokenizer cannot encode");
    }
    // a sentence length with no room for text (every text would embed alike), or not a count
    for (name, v) in [("seq-0", "0"), ("seq-2", "2"), ("seq-neg", "-5"), ("seq-str", "\"128\""), ("seq-frac", "12.5")] {
        let st = format!("{{\"max_seq_length\": {v}, \"do_lower_case\": false}}");
        refuse(name, &[("sentence_bert_config.json", st)], "max_seq_length is");
    }
}

#[test]
fn a_token_past_the_embedding_table_is_an_error_on_every_backend() {
    let Some(src) = model_dir() else { return };
    let mut tok: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(src.join("tokenizer.json")).unwrap()).unwrap();
    tok["model"]["vocab"]["zzqqxx"] = serde_json::json!(40000);
    let Some(dir) = variant("token-past-table", &[("tokenizer.json", tok.to_string())]) else { return };
    for device in common::devices() {
        let mut e = SentenceEmbedder::load(device, dir.to_str().unwrap(), EmbedderOptions::default()).unwrap();
        assert!(e.embed(&["fine"]).is_ok());
        let m = e.embed(&["zzqqxx"]).unwrap_err().to_string();
        assert!(m.contains("40000") && m.contains("outside the vocabulary"), "{}: {m}", device.capabilities().name);
    }
}
