//! `SentenceEmbedder` in JS: sentence-transformers directories and BERT GGUF files over [`SentenceEmbedder`].

use super::convert::{init_console, js_bytes, js_err};
use super::device::WebDevice;
use super::fetch::{fetch_bytes, LoadOptions};
use super::model_bytes::busy;
use crate::models::bert::{EmbedderOptions, SentenceEmbedder};
use crate::resident::Bytes;
use js_sys::{Float32Array, Object, Reflect};
use std::cell::RefCell;
use wasm_bindgen::prelude::*;

/// A sentence embedder (all-MiniLM-L6-v2 and its kin) from a sentence-transformers directory's files, as
/// `SentenceTransformer.encode` computes: tokenized, a batch padded to its longest sentence, mean (or CLS)
/// pooling, L2 normalized. Made by `SentenceEmbedder.load`.
#[wasm_bindgen(js_name = SentenceEmbedder)]
pub struct WebEmbedder {
    inner: RefCell<SentenceEmbedder>,
}

#[wasm_bindgen(js_class = SentenceEmbedder)]
impl WebEmbedder {
    /// Loads the embedder whose files `files` holds by their path in the directory (see `ModelFiles`) onto
    /// `device`; `options.f16Weights` stores the weight matrices in float16 (needs `shader-f16` on WebGPU).
    ///
    /// Rejects naming the file that is missing or does not parse.
    pub async fn load(
        device: &WebDevice,
        #[wasm_bindgen(unchecked_param_type = "ModelFiles")] files: Object,
        #[wasm_bindgen(unchecked_optional_param_type = "{ f16Weights?: boolean }")] options: JsValue,
    ) -> Result<WebEmbedder, JsError> {
        let read = |name: &str| -> crate::error::Result<Option<Bytes>> {
            let v = Reflect::get(&files, &JsValue::from_str(name)).unwrap_or(JsValue::UNDEFINED);
            if v.is_undefined() {
                return Ok(None);
            }
            Ok(Some(Bytes::from_vec(js_bytes(name, &v)?)))
        };
        WebEmbedder::from_read(device, &read, &options)
    }

    /// `load` from the sentence-transformers directory at `baseUrl` (`config.json`, `tokenizer.json` and
    /// `model.safetensors` are needed; `modules.json`, `sentence_bert_config.json` and `1_Pooling/config.json`
    /// are read when the server has them), each file streamed into wasm memory with progress and kept in the
    /// Cache API as `LanguageModel.fromUrl` does.
    ///
    /// Rejects naming the URL that failed, then as `load` does.
    #[wasm_bindgen(js_name = fromUrl)]
    pub async fn from_url(
        device: &WebDevice,
        #[wasm_bindgen(js_name = baseUrl)] base_url: String,
        #[wasm_bindgen(unchecked_optional_param_type = "{ f16Weights?: boolean } & LoadOptions")] options: JsValue,
    ) -> Result<WebEmbedder, JsError> {
        const NEEDED: [&str; 3] = ["config.json", "tokenizer.json", "model.safetensors"];
        const OPTIONAL: [&str; 3] = ["modules.json", "sentence_bert_config.json", "1_Pooling/config.json"];
        let load = LoadOptions::from_js(&options)?;
        let base = base_url.trim_end_matches('/');
        let mut files = std::collections::HashMap::new();
        for (name, optional) in NEEDED.iter().map(|n| (n, false)).chain(OPTIONAL.iter().map(|n| (n, true))) {
            if let Some(bytes) = fetch_bytes(&format!("{base}/{name}"), &load, optional).await? {
                files.insert(*name, Bytes::from_vec(bytes));
            }
        }
        let read = |name: &str| -> crate::error::Result<Option<Bytes>> { Ok(files.get(name).cloned()) };
        WebEmbedder::from_read(device, &read, &options)
    }

    /// The BERT encoder of a GGUF file as llama.cpp's converter writes it (`general.architecture` `bert`), from
    /// its bytes: its WordPiece vocabulary, `bert.pooling_type` (mean, CLS, last token) and weights in the file's
    /// dtypes; vectors L2-normalized, as the native `SentenceEmbedder::from_gguf`.
    ///
    /// Rejects naming what the file lacks or gets wrong (another architecture, a missing tensor or key).
    #[wasm_bindgen(js_name = fromGguf)]
    pub fn from_gguf(
        device: &WebDevice,
        #[wasm_bindgen(unchecked_param_type = "Uint8Array | ArrayBuffer")] bytes: JsValue,
    ) -> Result<WebEmbedder, JsError> {
        init_console();
        let bytes = Bytes::from_vec(js_bytes("model.gguf", &bytes).map_err(js_err)?);
        let file = crate::io::gguf::GgufFile::from_bytes("model.gguf", bytes).map_err(js_err)?;
        let e = SentenceEmbedder::from_gguf(&device.inner, &file, EmbedderOptions::default()).map_err(js_err)?;
        Ok(WebEmbedder { inner: RefCell::new(e) })
    }

    /// Width of the embeddings (384 for MiniLM).
    #[wasm_bindgen(getter)]
    pub fn dimension(&self) -> Result<u32, JsError> {
        Ok(self.inner.try_borrow().map_err(|_| busy("embedder"))?.config.hidden as u32)
    }

    /// One unit-length `Float32Array` per text (in order), computed in batches of `batch` (default 32), each
    /// padded to its longest sentence. An empty list gives an empty array. Rejects for a batch of 0, a device
    /// failure, or while another `embed` of this embedder runs.
    #[allow(clippy::await_holding_refcell_ref)] // as `LanguageModel::run`
    pub async fn embed(&self, texts: Vec<String>, batch: Option<u32>) -> Result<Vec<Float32Array>, JsError> {
        let mut e = self.inner.try_borrow_mut().map_err(|_| busy("embedder"))?;
        let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
        let out = e.embed_async(&refs, batch.unwrap_or(32) as usize).await.map_err(js_err)?;
        Ok(out.iter().map(|v| Float32Array::from(v.as_slice())).collect())
    }
}

impl WebEmbedder {
    fn from_read(
        device: &WebDevice,
        read: &dyn Fn(&str) -> crate::error::Result<Option<Bytes>>,
        options: &JsValue,
    ) -> Result<WebEmbedder, JsError> {
        init_console();
        let f16 = options.is_object() && Reflect::get(options, &"f16Weights".into()).ok() == Some(JsValue::TRUE);
        let options = EmbedderOptions { f16_weights: f16, ..Default::default() };
        let e = SentenceEmbedder::from_files(&device.inner, "model", read, options).map_err(js_err)?;
        Ok(WebEmbedder { inner: RefCell::new(e) })
    }
}
