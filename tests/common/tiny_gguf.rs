//! A tiny llama-architecture GGUF file written in the test (2 layers, width 8, a byte-level vocabulary of the 256
//! bytes plus 4 merges), whose metadata and tensors a test can change before writing: the valid file loads and
//! generates; a hostile change must give one clean error.

use std::collections::BTreeMap;

/// A metadata value as GGUF stores it.
#[derive(Clone, Debug)]
pub enum Meta {
    U32(u32),
    I32(i32),
    U64(u64),
    F32(f32),
    Bool(bool),
    Str(String),
    Strs(Vec<String>),
    F32s(Vec<f32>),
    I32s(Vec<i32>),
}

/// A tensor: ggml type id, dims in numpy order, data (f32 values written as the type's bytes; f32 or i32 only).
#[derive(Clone, Debug)]
pub struct TensorSpec {
    pub ggml_type: u32,
    pub shape: Vec<usize>,
    /// The bytes; None: f32 values from a seed.
    pub bytes: Option<Vec<u8>>,
    /// Written at this offset (relative to the data section) instead of after the previous tensor.
    pub offset: Option<u64>,
}

pub struct TinyLlama {
    pub meta: BTreeMap<String, Meta>,
    /// In file order.
    pub tensors: Vec<(String, TensorSpec)>,
}

/// The `llama.` keys of `t`.
fn self_keys(t: &TinyLlama) -> Vec<String> {
    t.meta.keys().filter(|k| k.starts_with("llama.")).cloned().collect()
}

/// GPT-2's byte-level character for byte `b`.
fn byte_char(b: u8) -> char {
    let printable = |b: u8| (b'!'..=b'~').contains(&b) || (0xA1..=0xAC).contains(&b) || (0xAE..=0xFF).contains(&b);
    if printable(b) {
        return char::from(b);
    }
    char::from_u32(256 + (0..b).filter(|&x| !printable(x)).count() as u32).unwrap()
}

impl TinyLlama {
    pub const WIDTH: usize = 8;
    pub const LAYERS: usize = 2;

    pub fn new() -> TinyLlama {
        let (e, ff) = (Self::WIDTH, 16);
        let mut tokens: Vec<String> = (0..=255u8).map(|b| byte_char(b).to_string()).collect();
        let merges = ["h e", "l l", "Ġ t", "he ll"];
        tokens.extend(["he", "ll", "Ġt", "hell"].map(String::from));
        tokens.push("<|end|>".into());
        let n = tokens.len();
        let mut types = vec![1i32; n];
        types[n - 1] = 3;
        let mut meta = BTreeMap::new();
        let mut set = |k: &str, v: Meta| {
            meta.insert(k.to_string(), v);
        };
        set("general.architecture", Meta::Str("llama".into()));
        set("llama.block_count", Meta::U32(Self::LAYERS as u32));
        set("llama.context_length", Meta::U32(64));
        set("llama.embedding_length", Meta::U32(e as u32));
        set("llama.feed_forward_length", Meta::U32(ff as u32));
        set("llama.attention.head_count", Meta::U32(2));
        set("llama.attention.head_count_kv", Meta::U32(1));
        set("llama.attention.layer_norm_rms_epsilon", Meta::F32(1e-5));
        set("llama.rope.freq_base", Meta::F32(10000.0));
        set("tokenizer.ggml.model", Meta::Str("gpt2".into()));
        set("tokenizer.ggml.pre", Meta::Str("gpt2".into()));
        set("tokenizer.ggml.tokens", Meta::Strs(tokens));
        set("tokenizer.ggml.token_type", Meta::I32s(types));
        set("tokenizer.ggml.merges", Meta::Strs(merges.map(String::from).to_vec()));
        set("tokenizer.ggml.eos_token_id", Meta::U32((n - 1) as u32));
        set("tokenizer.chat_template", Meta::Str("{% for m in messages %}{{ m.content }}\n{% endfor %}".into()));
        let (kv, hd) = (e / 2, e);
        let f32t = |shape: &[usize]| TensorSpec { ggml_type: 0, shape: shape.to_vec(), bytes: None, offset: None };
        let mut tensors = vec![("token_embd.weight".to_string(), f32t(&[n, e]))];
        for l in 0..Self::LAYERS {
            for (name, shape) in [
                ("attn_norm", vec![e]),
                ("attn_q", vec![hd, e]),
                ("attn_k", vec![kv, e]),
                ("attn_v", vec![kv, e]),
                ("attn_output", vec![e, hd]),
                ("ffn_norm", vec![e]),
                ("ffn_gate", vec![ff, e]),
                ("ffn_up", vec![ff, e]),
                ("ffn_down", vec![e, ff]),
            ] {
                tensors.push((format!("blk.{l}.{name}.weight"), f32t(&shape)));
            }
        }
        tensors.push(("output_norm.weight".to_string(), f32t(&[e])));
        TinyLlama { meta, tensors }
    }

    /// A tiny BERT encoder as llama.cpp's converter writes one (`bert` architecture: 1 layer, width 8, 2 heads, 16
    /// positions, a WordPiece vocabulary of 9 pieces in llama.cpp's phantom-space spelling, mean pooling).
    pub fn bert() -> TinyLlama {
        let (e, ff, positions) = (Self::WIDTH, 16, 16);
        let tokens =
            ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "\u{2581}hello", "\u{2581}world", "s", "\u{2581}a", "\u{2581}!"];
        let types: Vec<i32> = tokens.iter().map(|t| if t.starts_with('[') { 3 } else { 1 }).collect();
        let mut meta = BTreeMap::new();
        let mut set = |k: &str, v: Meta| {
            meta.insert(k.to_string(), v);
        };
        set("general.architecture", Meta::Str("bert".into()));
        set("bert.block_count", Meta::U32(1));
        set("bert.context_length", Meta::U32(positions as u32));
        set("bert.embedding_length", Meta::U32(e as u32));
        set("bert.feed_forward_length", Meta::U32(ff as u32));
        set("bert.attention.head_count", Meta::U32(2));
        set("bert.attention.layer_norm_epsilon", Meta::F32(1e-12));
        set("bert.attention.causal", Meta::Bool(false));
        set("bert.pooling_type", Meta::U32(1));
        set("tokenizer.ggml.model", Meta::Str("bert".into()));
        set("tokenizer.ggml.tokens", Meta::Strs(tokens.map(String::from).to_vec()));
        set("tokenizer.ggml.token_type", Meta::I32s(types));
        set("tokenizer.ggml.unknown_token_id", Meta::U32(1));
        set("tokenizer.ggml.cls_token_id", Meta::U32(2));
        set("tokenizer.ggml.seperator_token_id", Meta::U32(3));
        set("tokenizer.ggml.padding_token_id", Meta::U32(0));
        let f32t = |shape: &[usize]| TensorSpec { ggml_type: 0, shape: shape.to_vec(), bytes: None, offset: None };
        let mut tensors: Vec<(String, TensorSpec)> = vec![
            ("token_embd.weight".into(), f32t(&[tokens.len(), e])),
            ("position_embd.weight".into(), f32t(&[positions, e])),
            ("token_types.weight".into(), f32t(&[2, e])),
            ("token_embd_norm.weight".into(), f32t(&[e])),
            ("token_embd_norm.bias".into(), f32t(&[e])),
        ];
        for (name, out, inp) in [
            ("attn_q", e, e),
            ("attn_k", e, e),
            ("attn_v", e, e),
            ("attn_output", e, e),
            ("attn_output_norm", e, 0),
            ("ffn_up", ff, e),
            ("ffn_down", e, ff),
            ("layer_output_norm", e, 0),
        ] {
            let weight = if inp == 0 { vec![out] } else { vec![out, inp] };
            tensors.push((format!("blk.0.{name}.weight"), f32t(&weight)));
            tensors.push((format!("blk.0.{name}.bias"), f32t(&[out])));
        }
        TinyLlama { meta, tensors }
    }

    /// The tiny llama with a mixture of 4 experts (2 used) in place of each feed-forward, as Mixtral's file
    /// stores it: `llama.expert_count`, `llama.expert_used_count`, the router `ffn_gate_inp` `[4, 8]` and the stacked
    /// `ffn_gate_exps`, `ffn_up_exps` `[4, 16, 8]` and `ffn_down_exps` `[4, 8, 16]`.
    pub fn moe() -> TinyLlama {
        let (e, ff, x) = (Self::WIDTH, 16, 4);
        let mut t = TinyLlama::new().set("llama.expert_count", Meta::U32(x as u32));
        t = t.set("llama.expert_used_count", Meta::U32(2));
        let f32t = |shape: &[usize]| TensorSpec { ggml_type: 0, shape: shape.to_vec(), bytes: None, offset: None };
        t.tensors.retain(|(n, _)| !["ffn_gate.", "ffn_up.", "ffn_down."].iter().any(|s| n.contains(s)));
        for l in 0..Self::LAYERS {
            for (name, shape) in [
                ("ffn_gate_inp", vec![x, e]),
                ("ffn_gate_exps", vec![x, ff, e]),
                ("ffn_up_exps", vec![x, ff, e]),
                ("ffn_down_exps", vec![x, e, ff]),
            ] {
                t.tensors.push((format!("blk.{l}.{name}.weight"), f32t(&shape)));
            }
        }
        t
    }

    /// The tiny llama as a Qwen3.5 (`qwen35`) hybrid: block 0 a gated delta-net layer (1 key head and 2 value heads
    /// of 4, a 4-tap conv: `attn_qkv` `[16, 8]`, `attn_gate` `[8, 8]`, `ssm_*`), block 1 a gated attention layer
    /// (`attn_q` `[16, 8]`: each head's queries and gate; per-head q/k norms); `ffn_norm` named
    /// `post_attention_norm`; `full_attention_interval` 2.
    pub fn hybrid() -> TinyLlama {
        let e = Self::WIDTH;
        let (hk, hv, s, k) = (1usize, 2usize, 4usize, 4usize);
        let c = (2 * hk + hv) * s;
        let f32t = |shape: &[usize]| TensorSpec { ggml_type: 0, shape: shape.to_vec(), bytes: None, offset: None };
        let keys: Vec<String> = self_keys(&TinyLlama::new());
        let mut t = TinyLlama::new();
        for key in keys {
            let v = t.meta.remove(&key).expect("listed");
            t.meta.insert(format!("qwen35.{}", &key["llama.".len()..]), v);
        }
        t = t.set("general.architecture", Meta::Str("qwen35".into()));
        for (key, v) in [("conv_kernel", k), ("inner_size", hv * s), ("state_size", s), ("time_step_rank", hv)] {
            t = t.set(&format!("qwen35.ssm.{key}"), Meta::U32(v as u32));
        }
        t = t.set("qwen35.ssm.group_count", Meta::U32(hk as u32));
        t = t.set("qwen35.full_attention_interval", Meta::U32(2));
        let attention0 = ["attn_q", "attn_k", "attn_v", "attn_output"].map(|n| format!("blk.0.{n}.weight"));
        t.tensors.retain(|(n, _)| !attention0.contains(n));
        for (n, spec) in t.tensors.iter_mut() {
            if n.ends_with("ffn_norm.weight") {
                *n = n.replace("ffn_norm", "post_attention_norm");
            }
            if n == "blk.1.attn_q.weight" {
                spec.shape = vec![2 * e, e];
            }
        }
        for (name, shape) in [
            ("blk.0.attn_qkv.weight", vec![c, e]),
            ("blk.0.attn_gate.weight", vec![hv * s, e]),
            ("blk.0.ssm_beta.weight", vec![hv, e]),
            ("blk.0.ssm_alpha.weight", vec![hv, e]),
            ("blk.0.ssm_conv1d.weight", vec![c, k]),
            ("blk.0.ssm_dt.bias", vec![hv]),
            ("blk.0.ssm_a", vec![hv]),
            ("blk.0.ssm_norm.weight", vec![s]),
            ("blk.0.ssm_out.weight", vec![e, hv * s]),
            ("blk.1.attn_q_norm.weight", vec![e / 2]),
            ("blk.1.attn_k_norm.weight", vec![e / 2]),
        ] {
            t.tensors.push((name.to_string(), f32t(&shape)));
        }
        t
    }

    pub fn set(mut self, key: &str, v: Meta) -> TinyLlama {
        self.meta.insert(key.to_string(), v);
        self
    }

    pub fn remove(mut self, key: &str) -> TinyLlama {
        self.meta.remove(key);
        self
    }

    pub fn tensor(&mut self, name: &str) -> &mut TensorSpec {
        &mut self.tensors.iter_mut().find(|(n, _)| n == name).unwrap_or_else(|| panic!("no tensor {name}")).1
    }

    /// The file's bytes (GGUF v3, alignment 32).
    pub fn bytes(&self) -> Vec<u8> {
        let mut b = b"GGUF".to_vec();
        b.extend(3u32.to_le_bytes());
        b.extend((self.tensors.len() as u64).to_le_bytes());
        b.extend((self.meta.len() as u64).to_le_bytes());
        let s = |b: &mut Vec<u8>, x: &str| {
            b.extend((x.len() as u64).to_le_bytes());
            b.extend(x.as_bytes());
        };
        for (k, v) in &self.meta {
            s(&mut b, k);
            match v {
                Meta::U32(x) => b.extend(4u32.to_le_bytes().into_iter().chain(x.to_le_bytes())),
                Meta::I32(x) => b.extend(5u32.to_le_bytes().into_iter().chain(x.to_le_bytes())),
                Meta::F32(x) => b.extend(6u32.to_le_bytes().into_iter().chain(x.to_le_bytes())),
                Meta::U64(x) => b.extend(10u32.to_le_bytes().into_iter().chain(x.to_le_bytes())),
                Meta::Bool(x) => b.extend(7u32.to_le_bytes().into_iter().chain([*x as u8])),
                Meta::Str(x) => {
                    b.extend(8u32.to_le_bytes());
                    s(&mut b, x);
                }
                Meta::Strs(xs) => {
                    b.extend(9u32.to_le_bytes().into_iter().chain(8u32.to_le_bytes()));
                    b.extend((xs.len() as u64).to_le_bytes());
                    xs.iter().for_each(|x| s(&mut b, x));
                }
                Meta::F32s(xs) => {
                    b.extend(9u32.to_le_bytes().into_iter().chain(6u32.to_le_bytes()));
                    b.extend((xs.len() as u64).to_le_bytes());
                    xs.iter().for_each(|x| b.extend(x.to_le_bytes()));
                }
                Meta::I32s(xs) => {
                    b.extend(9u32.to_le_bytes().into_iter().chain(5u32.to_le_bytes()));
                    b.extend((xs.len() as u64).to_le_bytes());
                    xs.iter().for_each(|x| b.extend(x.to_le_bytes()));
                }
            }
        }
        let datas: Vec<Vec<u8>> = self
            .tensors
            .iter()
            .enumerate()
            .map(|(i, (_, t))| {
                t.bytes.clone().unwrap_or_else(|| {
                    let n: usize = t.shape.iter().product();
                    (0..n).flat_map(|j| (((j * 7 + i * 13) % 17) as f32 * 0.02 - 0.15).to_le_bytes()).collect()
                })
            })
            .collect();
        let mut at = 0u64;
        for ((name, t), data) in self.tensors.iter().zip(&datas) {
            s(&mut b, name);
            b.extend((t.shape.len() as u32).to_le_bytes());
            t.shape.iter().rev().for_each(|&d| b.extend((d as u64).to_le_bytes()));
            b.extend(t.ggml_type.to_le_bytes());
            b.extend(t.offset.unwrap_or(at).to_le_bytes());
            at += (data.len() as u64).div_ceil(32) * 32;
        }
        b.resize(b.len().div_ceil(32) * 32, 0);
        let start = b.len();
        let mut at = 0usize;
        for data in &datas {
            b.resize(start + at, 0);
            b.extend(data);
            at += data.len().div_ceil(32) * 32;
        }
        b.resize(start + at, 0);
        b
    }

    pub fn file(&self) -> webtensor::gguf::GgufFile {
        webtensor::gguf::GgufFile::from_bytes("tiny.gguf", webtensor::Bytes::from_vec(self.bytes())).unwrap()
    }
}

/// `t` loaded on the CPU backend (as `tiny.gguf`).
#[cfg(not(target_arch = "wasm32"))]
pub fn load(t: &TinyLlama) -> webtensor::Result<webtensor::models::LanguageModel> {
    let bytes = webtensor::Bytes::from_vec(t.bytes());
    let f = webtensor::gguf::GgufFile::from_bytes("tiny.gguf", bytes)?;
    let options = webtensor::models::LanguageModelOptions::default();
    webtensor::models::LanguageModel::from_gguf(&webtensor::Device::cpu(), &f, options)
}

/// `t` fails to load with an error of one line whose text has every one of `needles`.
#[cfg(not(target_arch = "wasm32"))]
pub fn refused(what: &str, t: TinyLlama, needles: &[&str]) {
    match load(&t) {
        Ok(_) => panic!("{what}: loaded"),
        Err(e) => {
            let m = e.to_string();
            println!("{what}: {m}");
            assert!(!m.contains('\n'), "{what}: one line: {m}");
            for n in needles {
                assert!(m.contains(n), "{what}: {m:?} lacks {n:?}");
            }
        }
    }
}
