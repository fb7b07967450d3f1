//! Reading a sentence-transformers directory's files: `config.json`, `modules.json`, `sentence_bert_config.json`,
//! `1_Pooling/config.json`, `tokenizer.json`, and the weights of `model.safetensors` (uploaded once; the `bert.`
//! prefix of some checkpoints accepted). The files come as bytes (natively memory-mapped or read from the
//! directory; in the browser, given by the page).

use super::graph::{BertConfig, Layer, Linear, Norm, Weights};
use crate::io::SafetensorsFile;
use crate::{DType, Data, Device, Error, HostTensor, Resident, Result};
use serde_json::Value as Json;

pub(super) fn parse_json(path: &str, bytes: &[u8]) -> Result<Json> {
    serde_json::from_slice(bytes)
        .map_err(|e| Error::Format { path: path.into(), message: format!("not valid JSON: {e}") })
}

pub(super) fn config(p: &str, j: &Json) -> Result<BertConfig> {
    let p = p.to_string();
    let num = |k: &str| -> Result<usize> {
        j[k].as_u64()
            .map(|x| x as usize)
            .ok_or_else(|| Error::Format { path: p.clone(), message: format!("{k} is missing") })
    };
    let c = BertConfig {
        hidden: num("hidden_size")?,
        heads: num("num_attention_heads")?,
        layers: num("num_hidden_layers")?,
        intermediate: num("intermediate_size")?,
        eps: j["layer_norm_eps"].as_f64().unwrap_or(1e-12) as f32,
        max_positions: num("max_position_embeddings")?,
        vocab: num("vocab_size")?,
    };
    if c.heads == 0 || !c.hidden.is_multiple_of(c.heads) {
        return Err(Error::Format { path: p, message: format!("{} heads do not divide width {}", c.heads, c.hidden) });
    }
    let act = j["hidden_act"].as_str().unwrap_or("gelu");
    if act != "gelu" {
        let reason = format!("hidden_act '{act}' is not supported (gelu)");
        return Err(Error::Unsupported { op: "bert".into(), backend: "webtensor::models::bert".into(), reason });
    }
    Ok(c)
}

/// The safetensors file with a lookup that uploads one tensor.
pub(super) struct Tensors {
    pub path: String,
    pub file: SafetensorsFile,
}

impl Tensors {
    fn upload(&self, device: &Device, name: &str, shape: &[usize], f16: bool) -> Result<Resident> {
        let found = self.file.entry(name).or_else(|| self.file.entry(&format!("bert.{name}")));
        let entry = found
            .filter(|e| e.dtype == "F32")
            .ok_or_else(|| Error::Format { path: self.path.clone(), message: format!("no F32 tensor {name}") })?;
        let got = &entry.shape;
        if got != shape {
            return Err(Error::Format {
                path: self.path.clone(),
                message: format!("tensor {name} is {got:?}, expected {shape:?}"),
            });
        }
        let bytes = self.file.data(entry)?;
        if f16 && shape.len() == 2 {
            let halves =
                Data::from_bytes(DType::F32, bytes.as_slice()).to_f32().into_iter().map(half::f16::from_f32).collect();
            return device.upload(name, HostTensor::new(shape, Data::F16(halves))?);
        }
        device.upload_bytes(name, DType::F32, shape, bytes)
    }
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
    let layers = (0..c.layers)
        .map(|i| {
            let p = format!("encoder.layer.{i}");
            Ok(Layer {
                q: lin(&format!("{p}.attention.self.query"), e, e)?,
                k: lin(&format!("{p}.attention.self.key"), e, e)?,
                v: lin(&format!("{p}.attention.self.value"), e, e)?,
                o: lin(&format!("{p}.attention.output.dense"), e, e)?,
                attn_norm: norm(&format!("{p}.attention.output.LayerNorm"))?,
                up: lin(&format!("{p}.intermediate.dense"), f, e)?,
                down: lin(&format!("{p}.output.dense"), e, f)?,
                out_norm: norm(&format!("{p}.output.LayerNorm"))?,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    let types = t
        .file
        .entry("embeddings.token_type_embeddings.weight")
        .or_else(|| t.file.entry("bert.embeddings.token_type_embeddings.weight"));
    let n_types = types.and_then(|e| e.shape.first().copied()).unwrap_or(2);
    Ok(Weights {
        word: t.upload(device, "embeddings.word_embeddings.weight", &[c.vocab, e], false)?,
        position: t.upload(device, "embeddings.position_embeddings.weight", &[c.max_positions, e], false)?,
        token_type: t.upload(device, "embeddings.token_type_embeddings.weight", &[n_types, e], false)?,
        embd_norm: norm("embeddings.LayerNorm")?,
        layers,
    })
}
