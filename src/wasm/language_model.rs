//! `LanguageModel` in JS: GGUF language models (every architecture webtensor runs) over the Rust [`LanguageModel`], with their
//! generation options.

use super::convert::{init_console, js_bytes, js_err};
use super::device::WebDevice;
use super::fetch::{blob_bytes, fetch_bytes, LoadOptions};
use super::model_bytes::{busy, WebModelBytes};
use crate::models::{
    GenerateOptions, Generation, LanguageModel, LanguageModelOptions, Message, SamplingOptions, StopReason, TokenStream,
};
use crate::resident::Bytes;
use js_sys::{Array, Function, Object, Promise, Reflect, Uint32Array};
use std::cell::RefCell;
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;
use wasm_bindgen_futures::JsFuture;

#[wasm_bindgen(typescript_custom_section)]
const TS_MODELS: &'static str = r#"
/** How `LanguageModel.generate` and `chat` pick tokens; every field optional; by default until the model ends its answer or the context is full.
 *  `generate` defaults to greedy decoding (with llama.cpp's sampler defaults once `temperature` is above 0);
 *  `chat` to the chat defaults: temperature 0.7, top-k 40, top-p 0.9, min-p 0.05, repetition penalty 1.1 over
 *  the last 64 tokens, with the model file's own recommendations (`general.sampling.*`) in their place, and a new
 *  seed each call (the result says it; pass it back as `seed` to repeat the answer). */
export interface GenerateOptions {
  /** Most tokens to generate (default: until the model ends its answer or the context is full). */
  maxTokens?: number;
  /** Softmax temperature; 0 is greedy (`generate`'s default). */
  temperature?: number;
  /** Keep the K most likely tokens (default 40; 0: all). */
  topK?: number;
  /** Nucleus sampling threshold (default 0.95, chat 0.9; 1: off). */
  topP?: number;
  /** Drop tokens less likely than minP times the most likely (default 0.05; 0: off). */
  minP?: number;
  /** Repetition penalty over the last 64 tokens (default 1: off; chat 1.1). */
  repeatPenalty?: number;
  /** Seed of the draws (default 0; chat: a new one each call): the same seed and prompt give the same text. */
  seed?: number;
  /** Called as the prompt is evaluated: `(0, total)` first, then after each chunk (tokens done of those not
   *  already in the KV cache), for a "reading the prompt" line where a prefill takes seconds. */
  onPrefill?: (done: number, total: number) => void;
  /** Generation stops when the text contains one of these (the text ends before it). */
  stop?: string[];
  /** Stops the generation when aborted: checked before the prefill, after it and between tokens, each time after
   *  the page has run, so an abort from a Stop button (or a worker's message) ends it before another token is
   *  computed (a prefill under way finishes first); the result says `"cancelled"`. `null`: no signal. */
  signal?: AbortSignal | null;
}
/** A chat message. */
export interface ChatMessage { role: string; content: string }
/** Called with each token's new text (possibly empty while a character is incomplete) and id; return `false` to
 *  stop generating. */
export type OnToken = (text: string, id: number) => boolean | void;
/** What a finished generation gives. */
export interface GenerationResult {
  text: string;
  tokens: Uint32Array;
  /** Prompt tokens evaluated (those already in the cache from the previous turn are not). */
  prefillTokens: number;
  prefillMs: number;
  decodeSteps: number;
  decodeMs: number;
  /** tokens/s */
  prefillTokensPerS: number;
  /** tokens/s */
  decodeTokensPerS: number;
  /** `"eog"` (end-of-generation token), `"max_tokens"`, `"stop_string"`, `"context_full"` or `"cancelled"`. */
  stop: "eog" | "max_tokens" | "stop_string" | "context_full" | "cancelled";
  /** The settings the tokens were picked with, in words ("greedy", "temperature 0.7, top-k 40, ..."). */
  sampling: string;
  /** The seed the draws used: `seed` in the options repeats the generation. */
  seed: number;
}
/** The files of a sentence-transformers directory by their path in it (`config.json`, `tokenizer.json`,
 *  `model.safetensors`, and optionally `modules.json`, `sentence_bert_config.json`, `1_Pooling/config.json`). */
export type ModelFiles = Record<string, ArrayBuffer | ArrayBufferView>;
"#;

/// Reads a number field of a JS options object.
fn num(obj: &JsValue, key: &str) -> Result<Option<f64>, JsError> {
    if obj.is_undefined() || obj.is_null() {
        return Ok(None);
    }
    let v = Reflect::get(obj, &JsValue::from_str(key)).unwrap_or(JsValue::UNDEFINED);
    if v.is_undefined() {
        return Ok(None);
    }
    v.as_f64()
        .filter(|x| x.is_finite())
        .map(Some)
        .ok_or_else(|| JsError::new(&format!("options.{key} must be a number")))
}

fn count(obj: &JsValue, key: &str) -> Result<Option<usize>, JsError> {
    match num(obj, key)? {
        Some(x) if x >= 0.0 && x.fract() == 0.0 => Ok(Some(x as usize)),
        Some(x) => Err(JsError::new(&format!("options.{key} must be a whole number ≥ 0, got {x}"))),
        None => Ok(None),
    }
}

/// The options in `o`, each one left out taken from `d` (the greedy defaults, or the model's chat defaults).
fn generate_options(o: &JsValue, d: SamplingOptions) -> Result<GenerateOptions, JsError> {
    let sampling = SamplingOptions {
        temperature: num(o, "temperature")?.map_or(d.temperature, |x| x as f32),
        top_k: count(o, "topK")?.unwrap_or(d.top_k),
        top_p: num(o, "topP")?.map_or(d.top_p, |x| x as f32),
        min_p: num(o, "minP")?.map_or(d.min_p, |x| x as f32),
        repetition_penalty: num(o, "repeatPenalty")?.map_or(d.repetition_penalty, |x| x as f32),
        seed: count(o, "seed")?.map_or(d.seed, |x| x as u64),
        ..d
    };
    let stop =
        if o.is_object() { Reflect::get(o, &"stop".into()).unwrap_or(JsValue::UNDEFINED) } else { JsValue::UNDEFINED };
    let stop = match stop.dyn_ref::<Array>() {
        Some(a) => a
            .iter()
            .map(|s| s.as_string().ok_or_else(|| JsError::new("options.stop must hold strings")))
            .collect::<Result<_, _>>()?,
        None if stop.is_undefined() => vec![],
        None => return Err(JsError::new("options.stop must be an array of strings")),
    };
    Ok(GenerateOptions { max_tokens: count(o, "maxTokens")?.unwrap_or(usize::MAX), sampling, stop, ignore_eos: false })
}

/// `GenerateOptions` from JS: the sampling and stopping options, and an `AbortSignal`.
struct RunOptions {
    generate: GenerateOptions,
    /// `options.signal` (`None` when left out or null).
    signal: Option<JsValue>,
    /// `options.onPrefill`.
    on_prefill: Option<Function>,
}

impl RunOptions {
    fn of(o: &JsValue, defaults: SamplingOptions) -> Result<RunOptions, JsError> {
        let generate = generate_options(o, defaults)?;
        let signal = if o.is_object() { Reflect::get(o, &"signal".into()).ok() } else { None };
        let signal = signal.filter(|s| !s.is_undefined() && !s.is_null());
        let aborted_flag = |s: &JsValue| Reflect::get(s, &"aborted".into()).ok().and_then(|a| a.as_bool());
        if signal.as_ref().is_some_and(|s| !s.is_object() || aborted_flag(s).is_none()) {
            return Err(JsError::new("options.signal must be an AbortSignal"));
        }
        let on_prefill = if o.is_object() { Reflect::get(o, &"onPrefill".into()).ok() } else { None };
        let on_prefill = match on_prefill.filter(|f| !f.is_undefined() && !f.is_null()) {
            Some(f) => {
                Some(f.dyn_into::<Function>().map_err(|_| JsError::new("options.onPrefill must be a function"))?)
            }
            None => None,
        };
        Ok(RunOptions { generate, signal, on_prefill })
    }

    /// Whether `signal` is aborted now.
    fn aborted(&self) -> bool {
        self.signal.as_ref().is_some_and(|s| Reflect::get(s, &"aborted".into()).is_ok_and(|a| a.is_truthy()))
    }
}

fn stop_name(s: StopReason) -> &'static str {
    match s {
        StopReason::EndOfGeneration => "eog",
        StopReason::MaxTokens => "max_tokens",
        StopReason::StopString => "stop_string",
        StopReason::ContextFull => "context_full",
        StopReason::Cancelled => "cancelled",
    }
}

fn generation_object(g: &Generation, sampling: &SamplingOptions) -> JsValue {
    let o = Object::new();
    let set = |k: &str, v: JsValue| {
        let _ = Reflect::set(&o, &JsValue::from_str(k), &v);
    };
    set("text", g.text.as_str().into());
    set("tokens", Uint32Array::from(g.tokens.as_slice()).into());
    set("prefillTokens", (g.prefill_tokens as f64).into());
    set("prefillMs", g.prefill_ms.into());
    set("decodeSteps", (g.decode_steps as f64).into());
    set("decodeMs", g.decode_ms.into());
    set("prefillTokensPerS", g.prefill_tokens_per_s().into());
    set("decodeTokensPerS", g.decode_tokens_per_s().into());
    set("stop", stop_name(g.stop).into());
    set("sampling", sampling.describe().into());
    set("seed", (sampling.seed as f64).into());
    o.into()
}

/// Lets the page run (paint, handle a Stop click) between tokens: resolves on the next macrotask.
async fn yield_to_event_loop() {
    let set_timeout =
        Reflect::get(&js_sys::global(), &"setTimeout".into()).ok().and_then(|f| f.dyn_into::<Function>().ok());
    if let Some(set_timeout) = set_timeout {
        let p = Promise::new(&mut |resolve, _| {
            let _ = set_timeout.call2(&JsValue::NULL, &resolve, &JsValue::from(0));
        });
        let _ = JsFuture::from(p).await;
    }
}

/// A language model from a GGUF file (SmolLM2, Llama 3.2, Qwen2.5, Gemma 2, Phi-3, ...), with its KV cache:
/// a conversation's state. Made by `LanguageModel.load`.
#[wasm_bindgen(js_name = LanguageModel)]
pub struct WebLanguageModel {
    inner: RefCell<LanguageModel>,
}

#[wasm_bindgen(js_class = LanguageModel)]
impl WebLanguageModel {
    /// Loads the GGUF file `bytes` (an `ArrayBuffer` or `Uint8Array` of the whole file) onto `device`. The bytes
    /// are copied into wasm memory once; on WebGPU the weights are then uploaded and that copy freed, on the CPU
    /// backend they are used where they lie. `options.context` sets the positions of the KV cache (default: the
    /// model's training context, at most 4096).
    ///
    /// Rejects for a file that is not a valid GGUF or not a language model of an architecture webtensor runs
    /// (naming what is wrong), or when the device runs out of memory.
    pub async fn load(
        device: &WebDevice,
        #[wasm_bindgen(unchecked_param_type = "ArrayBuffer | ArrayBufferView")] bytes: JsValue,
        #[wasm_bindgen(unchecked_optional_param_type = "{ context?: number }")] options: JsValue,
    ) -> Result<WebLanguageModel, JsError> {
        WebLanguageModel::from_bytes(device, js_bytes("model", &bytes).map_err(js_err)?, &options)
    }

    /// `load` from a [`ModelBytes`](WebModelBytes) filled as the file streamed in (taken over: not copied
    /// again).
    #[wasm_bindgen(js_name = fromModelBytes)]
    pub async fn from_model_bytes(
        device: &WebDevice,
        bytes: WebModelBytes,
        #[wasm_bindgen(unchecked_optional_param_type = "{ context?: number }")] options: JsValue,
    ) -> Result<WebLanguageModel, JsError> {
        WebLanguageModel::from_bytes(device, bytes.buf, &options)
    }

    /// `load` from the GGUF file at `url`, streamed into wasm memory as it downloads (no whole copy in JS
    /// memory), reporting progress to `options.onProgress`. The file is kept in the Cache API (`options.cache`,
    /// default `"webtensor-models"`): the next load, after a reload too, reads it from there. The largest file is
    /// 3 GiB (wasm32 addresses 4 GiB).
    ///
    /// Rejects naming the URL on a network failure, an HTTP error status, an abort (`options.signal`) or a file
    /// over 3 GiB; then as `load` does.
    #[wasm_bindgen(js_name = fromUrl)]
    pub async fn from_url(
        device: &WebDevice,
        url: String,
        #[wasm_bindgen(unchecked_optional_param_type = "{ context?: number } & LoadOptions")] options: JsValue,
    ) -> Result<WebLanguageModel, JsError> {
        let load = LoadOptions::from_js(&options)?;
        let bytes = fetch_bytes(&url, &load, false).await?.unwrap_or_default();
        WebLanguageModel::from_bytes(device, bytes, &options)
    }

    /// `load` from a `Blob` (a `File` the user picked), read as a stream into wasm memory with progress
    /// (`options.onProgress`; `options.cache` does not apply).
    #[wasm_bindgen(js_name = fromBlob)]
    pub async fn from_blob(
        device: &WebDevice,
        blob: web_sys::Blob,
        #[wasm_bindgen(unchecked_optional_param_type = "{ context?: number } & LoadOptions")] options: JsValue,
    ) -> Result<WebLanguageModel, JsError> {
        let bytes = blob_bytes(&blob, &LoadOptions::from_js(&options)?).await?;
        WebLanguageModel::from_bytes(device, bytes, &options)
    }

    /// Positions the KV cache holds (prompt and generated tokens together).
    #[wasm_bindgen(getter)]
    pub fn context(&self) -> Result<u32, JsError> {
        Ok(self.inner.try_borrow().map_err(|_| busy("model"))?.context() as u32)
    }

    /// The vocabulary's size.
    #[wasm_bindgen(getter, js_name = vocabSize)]
    pub fn vocab_size(&self) -> Result<u32, JsError> {
        Ok(self.inner.try_borrow().map_err(|_| busy("model"))?.config.n_vocab as u32)
    }

    /// The token ids of `text` (with the BOS token when the file says to add one).
    pub fn tokenize(&self, text: &str) -> Result<Uint32Array, JsError> {
        let m = self.inner.try_borrow().map_err(|_| busy("model"))?;
        Ok(Uint32Array::from(m.tokenizer.encode(text).map_err(js_err)?.as_slice()))
    }

    /// The text of `ids`, special tokens left out.
    pub fn detokenize(&self, ids: Vec<u32>) -> Result<String, JsError> {
        let m = self.inner.try_borrow().map_err(|_| busy("model"))?;
        m.tokenizer.decode(&ids, true).map_err(js_err)
    }

    /// The prompt of a conversation: the file's chat template applied to `messages`, the assistant's turn
    /// opened, as ids. Throws when the file has no chat template.
    #[wasm_bindgen(js_name = chatPrompt)]
    pub fn chat_prompt(
        &self,
        #[wasm_bindgen(unchecked_param_type = "ChatMessage[]")] messages: Array,
    ) -> Result<Uint32Array, JsError> {
        let m = self.inner.try_borrow().map_err(|_| busy("model"))?;
        Ok(Uint32Array::from(m.chat_prompt(&messages_of(&messages)?).map_err(js_err)?.as_slice()))
    }

    /// Forgets the conversation (the next prompt is evaluated from position 0).
    pub fn reset(&self) -> Result<(), JsError> {
        self.inner.try_borrow_mut().map_err(|_| busy("model"))?.reset();
        Ok(())
    }

    /// Generates a continuation of `prompt` (text, tokenized with the model's tokenizer, or ids), streaming each
    /// token to `onToken` (return `false` from it to stop) and yielding to the page between tokens, so a Stop
    /// button takes effect within one token. Resolves to the whole generation with its timings. A prompt that
    /// starts with the conversation cached so far evaluates only the rest.
    ///
    /// Rejects for an empty prompt, one longer than the context, bad options, or a device failure; and when the
    /// model is already generating.
    #[wasm_bindgen(unchecked_return_type = "GenerationResult")]
    pub async fn generate(
        &self,
        #[wasm_bindgen(unchecked_param_type = "string | Uint32Array | number[]")] prompt: JsValue,
        #[wasm_bindgen(unchecked_optional_param_type = "GenerateOptions")] options: JsValue,
        #[wasm_bindgen(js_name = onToken, unchecked_optional_param_type = "OnToken")] on_token: JsValue,
    ) -> Result<JsValue, JsError> {
        let options = RunOptions::of(&options, SamplingOptions::default())?;
        let ids = match prompt.as_string() {
            Some(text) => {
                let m = self.inner.try_borrow().map_err(|_| busy("model"))?;
                m.tokenizer.encode_within(&text, m.context()).map_err(js_err)?
            }
            None => Uint32Array::new(&prompt).to_vec(),
        };
        self.run(&ids, &options, on_token.dyn_ref::<Function>()).await
    }

    /// `generate` on the chat template applied to `messages` (`{ role, content }`, roles `system`, `user`,
    /// `assistant`); the answer's text is in the result. Rejects as `generate` does, and when the file has no chat
    /// template.
    #[wasm_bindgen(unchecked_return_type = "GenerationResult")]
    pub async fn chat(
        &self,
        #[wasm_bindgen(unchecked_param_type = "ChatMessage[]")] messages: Array,
        #[wasm_bindgen(unchecked_optional_param_type = "GenerateOptions")] options: JsValue,
        #[wasm_bindgen(js_name = onToken, unchecked_optional_param_type = "OnToken")] on_token: JsValue,
    ) -> Result<JsValue, JsError> {
        // a new seed each answer unless the options give one (the result says it)
        let seed = (js_sys::Math::random() * 1e6) as u64;
        let defaults = self.inner.try_borrow().map_err(|_| busy("model"))?.chat_sampling(seed);
        let options = RunOptions::of(&options, defaults)?;
        let ids = self.chat_prompt(messages)?.to_vec();
        self.run(&ids, &options, on_token.dyn_ref::<Function>()).await
    }
}

impl WebLanguageModel {
    fn from_bytes(device: &WebDevice, bytes: Vec<u8>, options: &JsValue) -> Result<WebLanguageModel, JsError> {
        init_console();
        let file = crate::io::gguf::GgufFile::from_bytes("model.gguf", Bytes::from_vec(bytes)).map_err(js_err)?;
        let options = LanguageModelOptions { context: count(options, "context")?.unwrap_or(0), ..Default::default() };
        let model = LanguageModel::from_gguf(&device.inner, &file, options).map_err(js_err)?;
        Ok(WebLanguageModel { inner: RefCell::new(model) })
    }

    // The borrow lasts the whole generation on purpose: JS is single-threaded, and a second call meanwhile
    // (reentrant from `onToken` or from the page) gets the "busy" error from `try_borrow_mut`.
    #[allow(clippy::await_holding_refcell_ref)]
    async fn run(&self, ids: &[u32], options: &RunOptions, on_token: Option<&Function>) -> Result<JsValue, JsError> {
        let mut model = self.inner.try_borrow_mut().map_err(|_| busy("model"))?;
        if options.aborted() {
            return Ok(generation_object(&Generation::cancelled(ids), &options.generate.sampling));
        }
        // a throwing onPrefill is the page's bug, not the generation's: logged, and the prefill goes on
        let mut progress = |done: usize, total: usize| {
            if let Some(f) = &options.on_prefill {
                if let Err(e) = f.call2(&JsValue::NULL, &JsValue::from(done as f64), &JsValue::from(total as f64)) {
                    web_sys::console::warn_2(&"webtensor: onPrefill threw".into(), &e);
                }
            }
        };
        let start = model.start_with_progress_async(ids, &options.generate, &mut progress);
        let mut s: TokenStream = start.await.map_err(js_err)?;
        // an abort that came during the prefill (a worker handles its messages only now) ends it before a token
        if options.signal.is_some() {
            yield_to_event_loop().await;
            if options.aborted() {
                s.cancel();
            }
        }
        while let Some(t) = model.next_token_async(&mut s).await.map_err(js_err)? {
            if let Some(f) = on_token {
                let r = f.call2(&JsValue::NULL, &JsValue::from_str(&t.text), &JsValue::from(t.id));
                match r {
                    Ok(v) if v == JsValue::FALSE => s.cancel(),
                    Ok(_) => {}
                    Err(e) => {
                        s.cancel();
                        return Err(JsError::new(&format!(
                            "onToken threw: {}",
                            e.as_string().unwrap_or_else(|| format!("{e:?}"))
                        )));
                    }
                }
            }
            if !s.is_finished() {
                yield_to_event_loop().await;
                if options.aborted() {
                    s.cancel();
                }
            }
        }
        Ok(generation_object(s.generation(), &options.generate.sampling))
    }
}

fn messages_of(messages: &Array) -> Result<Vec<Message>, JsError> {
    messages
        .iter()
        .enumerate()
        .map(|(i, m)| {
            let field = |k: &str| Reflect::get(&m, &JsValue::from_str(k)).ok().and_then(|v| v.as_string());
            match (field("role"), field("content")) {
                (Some(role), Some(content)) => Ok(Message::new(&role, &content)),
                _ => Err(JsError::new(&format!("messages[{i}] must be {{ role: string, content: string }}"))),
            }
        })
        .collect()
}
