//! Reading a sentence-transformers directory's files: `config.json`, `modules.json`, `sentence_bert_config.json`,
//! `1_Pooling/config.json`, `tokenizer.json`, and the weights of `model.safetensors` (uploaded once; the `bert.`
//! prefix of some checkpoints accepted). The files come as bytes (natively memory-mapped or read from the
//! directory; in the browser, given by the page).

use super::graph::{BertConfig, Dense, Layer, Linear, Norm, Weights};
use super::pooling::Pooling;
use crate::device::Device;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::io::SafetensorsFile;
use crate::models::arch::spec::Qkv;
use crate::resident::{Bytes, Resident};
use crate::tensor::{Data, HostTensor};
use serde_json::Value as Json;

pub(super) fn parse_json(path: &str, bytes: &[u8]) -> Result<Json> {
    serde_json::from_slice(bytes)
        .map_err(|e| Error::Format { path: path.into(), message: format!("not valid JSON: {e}") })
}

pub(super) fn config(p: &str, j: &Json) -> Result<BertConfig> {
    let bad = |message: String| Error::Format { path: p.to_string(), message };
    // a count from 1 to `max`: a number no real model comes near sizes nothing
    let num = |k: &str, max: u64| -> Result<usize> {
        match j[k].as_u64() {
            Some(n) if (1..=max).contains(&n) => Ok(n as usize),
            Some(n) => Err(bad(format!("{k} is {n}: it must be from 1 to {max}"))),
            None if j[k].is_null() => Err(bad(format!("{k} is missing"))),
            None => Err(bad(format!("{k} is {}, not a positive integer", j[k]))),
        }
    };
    let eps = match &j["layer_norm_eps"] {
        Json::Null => 1e-12,
        v => match v.as_f64() {
            Some(x) if x.is_finite() && x > 0.0 && x < 1.0 => x as f32,
            _ => return Err(bad(format!("layer_norm_eps is {v}: it must be finite, above 0 and below 1"))),
        },
    };
    let c = BertConfig {
        hidden: num("hidden_size", 1 << 16)?,
        heads: num("num_attention_heads", 1 << 10)?,
        layers: num("num_hidden_layers", 1 << 10)?,
        intermediate: num("intermediate_size", 1 << 18)?,
        eps,
        max_positions: num("max_position_embeddings", 1 << 20)?,
        position_offset: position_offset(j).map_err(bad)?,
        vocab: num("vocab_size", 1 << 24)?,
    };
    if c.max_positions < c.position_offset + 2 {
        return Err(bad(format!(
            "max_position_embeddings is {} with positions from {}: a sentence needs [CLS] and [SEP]",
            c.max_positions, c.position_offset
        )));
    }
    if !c.hidden.is_multiple_of(c.heads) {
        return Err(bad(format!("{} heads do not divide width {}", c.heads, c.hidden)));
    }
    let act = j["hidden_act"].as_str().unwrap_or("gelu");
    if act != "gelu" {
        return Err(bad(format!("hidden_act '{act}' is not supported (gelu)")));
    }
    // relative position embeddings (relative_key, relative_key_query) are another attention, not implemented
    match &j["position_embedding_type"] {
        Json::Null => {}
        Json::String(s) if s == "absolute" => {}
        other => return Err(bad(format!("position_embedding_type {other} is not supported (absolute)"))),
    }
    Ok(c)
}

/// The first position id: `pad_token_id + 1` for the RoBERTa family (its positions count past the padding id),
/// else 0.
fn position_offset(j: &Json) -> std::result::Result<usize, String> {
    let model_type = j["model_type"].as_str().unwrap_or("bert");
    if !matches!(model_type, "roberta" | "xlm-roberta" | "camembert") {
        return Ok(0);
    }
    match j["pad_token_id"].as_u64() {
        Some(p) if p < 1 << 20 => Ok(p as usize + 1),
        _ => Err(format!("pad_token_id is {}: a {model_type} model numbers positions from it", j["pad_token_id"])),
    }
}

/// The pooling mode of `1_Pooling/config.json` (mean when there is no such file).
///
/// # Errors
/// [`Error::Unsupported`] for several modes at once (sentence-transformers concatenates them) or none, and for
/// `include_prompt: false`.
pub(super) fn pooling(p: &str, j: Option<&Json>) -> Result<Pooling> {
    let Some(j) = j else { return Ok(Pooling::Mean) };
    let modes = [
        ("pooling_mode_cls_token", Pooling::Cls),
        ("pooling_mode_mean_tokens", Pooling::Mean),
        ("pooling_mode_max_tokens", Pooling::Max),
        ("pooling_mode_mean_sqrt_len_tokens", Pooling::MeanSqrtLen),
        ("pooling_mode_weightedmean_tokens", Pooling::WeightedMean),
        ("pooling_mode_lasttoken", Pooling::LastToken),
    ];
    let unsupported = |message: String| Error::Format { path: p.into(), message };
    if let Some((k, _)) = modes.iter().find(|(k, _)| !(j[*k].is_null() || j[*k].is_boolean())) {
        return Err(unsupported(format!("{k} is {}, not true or false", j[*k])));
    }
    let on: Vec<&(&str, Pooling)> = modes.iter().filter(|(k, _)| j[*k].as_bool() == Some(true)).collect();
    if j["include_prompt"].as_bool() == Some(false) {
        return Err(unsupported(
            "include_prompt: false (pooling without the instruction's tokens) is not supported".into(),
        ));
    }
    match on.as_slice() {
        [(_, mode)] => Ok(*mode),
        [] => Err(unsupported("no pooling mode is set".into())),
        several => {
            let names: Vec<&str> = several.iter().map(|(k, _)| *k).collect();
            Err(unsupported(format!("several pooling modes at once ({}: concatenated vectors)", names.join(", "))))
        }
    }
}

/// What `modules.json` asks for after pooling.
pub(super) struct Modules {
    /// The folder of a `Dense` module.
    pub dense: Option<String>,
    /// Whether a `Normalize` module comes last.
    pub normalize: bool,
}

/// The modules of `modules.json` (Transformer, Pooling, then Dense and Normalize, in that order; none: the
/// transformer and mean pooling alone, without normalization).
///
/// # Errors
/// [`Error::Unsupported`] naming a module of another type, or an order this runner cannot follow.
pub(super) fn modules(p: &str, j: Option<&Json>) -> Result<Modules> {
    let mut m = Modules { dense: None, normalize: false };
    let Some(list) = j else { return Ok(m) };
    let list =
        list.as_array().ok_or_else(|| Error::Format { path: p.into(), message: "not a list of modules".into() })?;
    let unsupported = |message: String| Error::Format { path: p.into(), message };
    let mut stage = 0;
    for module in list {
        let kind = module["type"].as_str().unwrap_or("(no type)");
        let name = kind.rsplit('.').next().unwrap_or(kind);
        let at = match name {
            "Transformer" => 0,
            "Pooling" => 1,
            "Dense" => 2,
            "Normalize" => 3,
            _ => {
                return Err(unsupported(format!(
                    "module {kind} is not supported (Transformer, Pooling, Dense, Normalize)"
                )))
            }
        };
        if at < stage || (at == stage && at > 0) {
            return Err(unsupported(format!(
                "module {kind} where this runner cannot apply it (order: Transformer, Pooling, Dense, Normalize)"
            )));
        }
        stage = at;
        match name {
            "Dense" => m.dense = Some(module["path"].as_str().unwrap_or("2_Dense").to_string()),
            "Normalize" => m.normalize = true,
            _ => {}
        }
    }
    Ok(m)
}

/// The `Dense` module in folder `dir` (`config.json`, `model.safetensors`), taking `hidden` values.
pub(super) fn dense(
    device: &Device,
    dir: &str,
    read: &dyn Fn(&str) -> Result<Option<crate::resident::Bytes>>,
    hidden: usize,
) -> Result<Dense> {
    let need = |name: &str| {
        read(name)?.ok_or_else(|| Error::Io {
            path: format!("{dir}/{name}"),
            message: "no such file (a Dense module needs config.json and model.safetensors)".into(),
        })
    };
    let c = parse_json(&format!("{dir}/config.json"), need("config.json")?.as_slice())?;
    let bad = |message: String| Error::Format { path: format!("{dir}/config.json"), message };
    let (inp, out) = (c["in_features"].as_u64(), c["out_features"].as_u64());
    let (Some(inp), Some(out)) = (inp, out) else {
        return Err(bad("in_features and out_features are required".into()));
    };
    if inp as usize != hidden || out == 0 || out > 1 << 16 {
        return Err(bad(format!("a Dense module of {inp} -> {out} after pooled vectors of {hidden}")));
    }
    let act = c["activation_function"].as_str().unwrap_or("torch.nn.modules.activation.Tanh");
    let tanh = match act.rsplit('.').next() {
        Some("Tanh") => true,
        Some("Identity") => false,
        _ => return Err(bad(format!("activation {act} is not supported (Tanh, Identity)"))),
    };
    let path = format!("{dir}/model.safetensors");
    let t = Tensors { path: path.clone(), file: SafetensorsFile::from_bytes(&path, need("model.safetensors")?)? };
    let w = t.upload(device, "linear.weight", &[out as usize, inp as usize], false)?;
    let b = match c["bias"].as_bool() {
        Some(false) => device.upload("linear.bias", HostTensor::f32(&[out as usize], vec![0.0; out as usize])?)?,
        _ => t.upload(device, "linear.bias", &[out as usize], false)?,
    };
    Ok(Dense { linear: Linear { w, b }, tanh, out: out as usize })
}

/// The safetensors file with a lookup that uploads one tensor.
pub(super) struct Tensors {
    pub path: String,
    pub file: SafetensorsFile,
}

impl Tensors {
    /// The entry `name`, or under a checkpoint's prefix (`bert.`, `roberta.`).
    fn entry(&self, name: &str) -> Option<&crate::io::safetensors::SafetensorsEntry> {
        let prefixed = ["bert.", "roberta."].into_iter().find_map(|p| self.file.entry(&format!("{p}{name}")));
        self.file.entry(name).or(prefixed)
    }

    /// The entry `name` of `shape` and its bytes, every value finite.
    fn checked(&self, name: &str, shape: &[usize]) -> Result<(&crate::io::safetensors::SafetensorsEntry, Bytes)> {
        let entry = self
            .entry(name)
            .ok_or_else(|| Error::Format { path: self.path.clone(), message: format!("no tensor {name}") })?;
        let got = &entry.shape;
        if got != shape {
            return Err(Error::Format {
                path: self.path.clone(),
                message: format!("tensor {name} is {got:?}, expected {shape:?}"),
            });
        }
        let bytes = self.file.data(entry)?;
        let dtype = match entry.dtype.as_str() {
            "F32" => Some(DType::F32),
            "F16" => Some(DType::F16),
            "BF16" => Some(DType::BF16),
            _ => None,
        };
        if let Some((i, v)) = dtype.and_then(|d| crate::quant::first_non_finite(d, bytes.as_slice())) {
            let message = crate::models::arch::loader::non_finite_message(name, DType::F32, i, v);
            return Err(Error::Format { path: self.path.clone(), message });
        }
        Ok((entry, bytes))
    }

    /// Tensor `name` of `shape` as f32 values: f16 and bf16 (checkpoints saved in half precision) widened.
    fn values(&self, name: &str, shape: &[usize]) -> Result<Vec<f32>> {
        let (entry, bytes) = self.checked(name, shape)?;
        Ok(match entry.dtype.as_str() {
            "F32" => Data::from_bytes(DType::F32, bytes.as_slice()).to_f32(),
            "F16" => Data::from_bytes(DType::F16, bytes.as_slice()).to_f32(),
            "BF16" => {
                bytes.as_slice().chunks_exact(2).map(|b| half::bf16::from_le_bytes([b[0], b[1]]).to_f32()).collect()
            }
            other => {
                let message = format!("tensor {name} is {other}, not a float (F32, F16 or BF16)");
                return Err(Error::Format { path: self.path.clone(), message });
            }
        })
    }

    /// Tensor `name` of `shape`, resident: f32 as it lies, else widened to f32; a matrix stored in f16 with `f16`.
    fn upload(&self, device: &Device, name: &str, shape: &[usize], f16: bool) -> Result<Resident> {
        let (entry, bytes) = self.checked(name, shape)?;
        if entry.dtype == "F32" && !(f16 && shape.len() == 2) {
            return device.upload_bytes(name, DType::F32, shape, bytes);
        }
        upload_values(device, name, shape, self.values(name, shape)?, f16)
    }

    /// Tensors `names`, each of `[rows, shape[1..]]` (`shape[0]` rows in all), one after another as one resident
    /// `name` of `shape` (a layer's Q, K and V as one matrix), widened to f32; a matrix stored in f16 with `f16`.
    fn concat(&self, device: &Device, name: &str, names: &[String], shape: &[usize], f16: bool) -> Result<Resident> {
        let mut part = shape.to_vec();
        part[0] /= names.len();
        let mut values = Vec::new();
        for n in names {
            values.extend(self.values(n, &part)?);
        }
        upload_values(device, name, shape, values, f16)
    }
}

/// f32 `values` of `shape` resident as `name`; a matrix stored in f16 with `f16`.
fn upload_values(device: &Device, name: &str, shape: &[usize], values: Vec<f32>, f16: bool) -> Result<Resident> {
    let data = if f16 && shape.len() == 2 {
        Data::F16(values.into_iter().map(half::f16::from_f32).collect())
    } else {
        Data::F32(values)
    };
    device.upload(name, HostTensor::new(shape, data)?)
}

/// A layer's Q, K and V (`{p}.query`, `.key`, `.value`, each `[e, e]` with a bias) as one matrix `[3e, e]` and one
/// bias, so that one matmul reads the layer's input for all three.
fn qkv(device: &Device, t: &Tensors, p: &str, e: usize, f16: bool) -> Result<Qkv> {
    let parts = ["query", "key", "value"];
    let names = |suffix: &str| parts.map(|q| format!("{p}.{q}.{suffix}")).to_vec();
    let name = format!("{p}.query+key+value");
    let w = t.concat(device, &format!("{name}.weight"), &names("weight"), &[3 * e, e], f16)?;
    let bias = t.concat(device, &format!("{name}.bias"), &names("bias"), &[3 * e], false)?;
    Ok(Qkv::Fused { w, bias: Some(bias) })
}

pub(super) fn weights(device: &Device, t: &Tensors, c: &BertConfig, f16: bool) -> Result<Weights> {
    let (e, f) = (c.hidden, c.intermediate);
    let lin = |n: &str, out: usize, inp: usize| -> Result<Linear> {
        Ok(Linear {
            w: t.upload(device, &format!("{n}.weight"), &[out, inp], f16)?,
            b: t.upload(device, &format!("{n}.bias"), &[out], false)?,
        })
    };
    let norm = |n: &str| -> Result<Norm> {
        Ok(Norm {
            w: t.upload(device, &format!("{n}.weight"), &[e], false)?,
            b: t.upload(device, &format!("{n}.bias"), &[e], false)?,
        })
    };
    // a layer the config does not count would be left out silently (llama.cpp refuses tensors it does not use)
    let counted = |name: &str| {
        let rest = name.split_once("encoder.layer.").map(|(_, r)| r);
        rest.and_then(|r| r.split('.').next()).and_then(|i| i.parse::<usize>().ok()).is_none_or(|i| i < c.layers)
    };
    if let Some(extra) = t.file.tensors().iter().find(|e| !counted(&e.name)) {
        let message = format!(
            "tensor {} is a layer beyond the {} of config.json's num_hidden_layers; is num_hidden_layers right?",
            extra.name, c.layers
        );
        return Err(Error::Format { path: t.path.clone(), message });
    }
    let layers = (0..c.layers)
        .map(|i| {
            let p = format!("encoder.layer.{i}");
            Ok(Layer {
                qkv: qkv(device, t, &format!("{p}.attention.self"), e, f16)?,
                o: lin(&format!("{p}.attention.output.dense"), e, e)?,
                attn_norm: norm(&format!("{p}.attention.output.LayerNorm"))?,
                up: lin(&format!("{p}.intermediate.dense"), f, e)?,
                down: lin(&format!("{p}.output.dense"), e, f)?,
                out_norm: norm(&format!("{p}.output.LayerNorm"))?,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    let types = t.entry("embeddings.token_type_embeddings.weight");
    let token_type = match types.and_then(|e| e.shape.first().copied()) {
        None => None,
        Some(n) => Some(t.upload(device, "embeddings.token_type_embeddings.weight", &[n.max(1), e], false)?),
    };
    Ok(Weights {
        word: t.upload(device, "embeddings.word_embeddings.weight", &[c.vocab, e], false)?,
        position: t.upload(device, "embeddings.position_embeddings.weight", &[c.max_positions, e], false)?,
        token_type,
        embd_norm: norm("embeddings.LayerNorm")?,
        layers,
        dense: None,
    })
}
