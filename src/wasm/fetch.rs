//! Model files from a URL or a `Blob`, streamed chunk by chunk into wasm memory (no whole copy is held in JS
//! memory), with a progress callback, and kept in the browser's Cache API so that a reload does not download
//! them again. Works in a page and in a worker (the global `fetch` and `caches`); in Node.js, `fetch` works and
//! nothing is cached.

use js_sys::{Function, Object, Promise, Reflect, Uint8Array};
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;
use wasm_bindgen_futures::JsFuture;
use web_sys::{Blob, Cache, ReadableStream, ReadableStreamDefaultReader, Response};

#[wasm_bindgen(typescript_custom_section)]
const TS_FETCH: &'static str = r#"
/** How far a model file has come in; `total` is absent when the server sent no Content-Length. */
export interface LoadProgress {
  /** The file's URL (or `"blob"`). */
  file: string;
  /** Bytes received so far. */
  loaded: number;
  /** Bytes in all. */
  total?: number;
  /** Whether the bytes come from the Cache API rather than the network. */
  cached: boolean;
}
/** How model files are fetched by `LanguageModel.fromUrl`, `LanguageModel.fromBlob` and
 *  `SentenceEmbedder.fromUrl`; every field optional. */
export interface LoadOptions {
  /** Called as bytes arrive (every 4 MiB and at the end of each file). */
  onProgress?: (p: LoadProgress) => void;
  /** The Cache API cache that keeps the files (default `"webtensor-models"`); `false` neither reads nor
   *  writes it. */
  cache?: string | false;
  /** Aborts the download. */
  signal?: AbortSignal;
}
"#;

#[wasm_bindgen]
extern "C" {
    #[wasm_bindgen(js_name = fetch)]
    fn global_fetch(url: &str, init: &JsValue) -> Promise;
}

/// The most bytes one file may bring: wasm32 addresses 4 GiB, and the model and its buffers need the rest.
pub(super) const MAX_FILE_BYTES: u64 = 3 << 30;
/// Bytes between two progress reports.
const PROGRESS_EVERY: usize = 4 << 20;

/// `LoadOptions` read from JS.
pub(super) struct LoadOptions {
    progress: Option<Function>,
    cache: Option<String>,
    signal: JsValue,
}

impl LoadOptions {
    pub(super) fn from_js(o: &JsValue) -> Result<LoadOptions, JsError> {
        let get = |k: &str| {
            if o.is_object() {
                Reflect::get(o, &JsValue::from_str(k)).unwrap_or(JsValue::UNDEFINED)
            } else {
                JsValue::UNDEFINED
            }
        };
        let progress = match get("onProgress") {
            v if v.is_undefined() || v.is_null() => None,
            v => Some(v.dyn_into::<Function>().map_err(|_| JsError::new("options.onProgress must be a function"))?),
        };
        let cache = match get("cache") {
            v if v.is_undefined() || v.is_null() || v == JsValue::TRUE => Some("webtensor-models".to_string()),
            v if v == JsValue::FALSE => None,
            v => Some(v.as_string().ok_or_else(|| JsError::new("options.cache must be a cache name or false"))?),
        };
        Ok(LoadOptions { progress, cache, signal: get("signal") })
    }

    fn report(&self, file: &str, loaded: usize, total: Option<u64>, cached: bool) -> Result<(), JsError> {
        let Some(f) = &self.progress else { return Ok(()) };
        let p = Object::new();
        let _ = Reflect::set(&p, &"file".into(), &file.into());
        let _ = Reflect::set(&p, &"loaded".into(), &(loaded as f64).into());
        if let Some(t) = total {
            let _ = Reflect::set(&p, &"total".into(), &(t as f64).into());
        }
        let _ = Reflect::set(&p, &"cached".into(), &cached.into());
        f.call1(&JsValue::NULL, &p).map(|_| ()).map_err(|e| JsError::new(&format!("onProgress threw: {}", text(&e))))
    }
}

fn text(e: &JsValue) -> String {
    e.dyn_ref::<js_sys::Error>()
        .map(|e| String::from(e.message()))
        .or_else(|| e.as_string())
        .unwrap_or_else(|| format!("{e:?}"))
}

/// The bytes at `url`, from the cache when it holds them, else downloaded (and stored in the cache as they
/// stream in). `Ok(None)` when the server answers 404 and the file is `optional`.
///
/// Errors name the URL: a network failure, an HTTP status other than 2xx, a file over 3 GiB, an abort, or wasm
/// memory that cannot grow.
pub(super) async fn fetch_bytes(url: &str, opts: &LoadOptions, optional: bool) -> Result<Option<Vec<u8>>, JsError> {
    let cache = open_cache(opts).await;
    if let Some(cache) = &cache {
        let hit = JsFuture::from(cache.match_with_str(url)).await.unwrap_or(JsValue::UNDEFINED);
        if let Ok(hit) = hit.dyn_into::<Response>() {
            return read_response(url, &hit, opts, true).await.map(Some);
        }
    }
    let init = Object::new();
    if !opts.signal.is_undefined() {
        let _ = Reflect::set(&init, &"signal".into(), &opts.signal);
    }
    let response: Response = JsFuture::from(global_fetch(url, &init))
        .await
        .map_err(|e| JsError::new(&format!("{url}: fetch failed: {}", text(&e))))?
        .unchecked_into();
    if response.status() == 404 && optional {
        return Ok(None);
    }
    if !response.ok() {
        return Err(JsError::new(&format!("{url}: HTTP {} {}", response.status(), response.status_text())));
    }
    // the cache reads its branch of the body while we read ours, so the tee holds only the gap between them
    let stored = match (&cache, response.clone()) {
        (Some(cache), Ok(copy)) => Some(JsFuture::from(cache.put_with_str(url, &copy))),
        _ => None,
    };
    let bytes = read_response(url, &response, opts, false).await?;
    if let Some(stored) = stored {
        if let Err(e) = stored.await {
            web_sys::console::warn_1(&format!("webtensor: {url} was not cached: {}", text(&e)).into());
        }
    }
    Ok(Some(bytes))
}

/// The bytes of `blob` (a file the user picked), read as a stream.
pub(super) async fn blob_bytes(blob: &Blob, opts: &LoadOptions) -> Result<Vec<u8>, JsError> {
    read_stream("blob", &blob.stream(), Some(blob.size() as u64), opts, false).await
}

async fn open_cache(opts: &LoadOptions) -> Option<Cache> {
    let name = opts.cache.as_deref()?;
    let storage = Reflect::get(&js_sys::global(), &"caches".into()).ok().filter(|c| c.is_object())?;
    let storage: web_sys::CacheStorage = storage.unchecked_into();
    // open rejects where storage is denied (an opaque origin, some private modes): then nothing is cached
    JsFuture::from(storage.open(name)).await.ok().map(JsValue::unchecked_into)
}

async fn read_response(url: &str, r: &Response, opts: &LoadOptions, cached: bool) -> Result<Vec<u8>, JsError> {
    // Content-Length is the encoded size: only a hint for the reservation and the progress bar
    let total = r.headers().get("content-length").ok().flatten().and_then(|s| s.trim().parse::<u64>().ok());
    match r.body() {
        Some(body) => read_stream(url, &body, total, opts, cached).await,
        None => {
            opts.report(url, 0, Some(0), cached)?;
            Ok(Vec::new())
        }
    }
}

async fn read_stream(
    file: &str,
    stream: &ReadableStream,
    total: Option<u64>,
    opts: &LoadOptions,
    cached: bool,
) -> Result<Vec<u8>, JsError> {
    let too_big = |n: u64| {
        JsError::new(&format!("{file}: {n} bytes or more: over the 3 GiB a model file may take in wasm memory"))
    };
    if let Some(t) = total.filter(|&t| t > MAX_FILE_BYTES) {
        return Err(too_big(t));
    }
    let mut buf = Vec::new();
    // a failed reservation only means the vector grows as the bytes come
    let _ = buf.try_reserve_exact(total.unwrap_or(0) as usize);
    let reader: ReadableStreamDefaultReader = stream.get_reader().unchecked_into();
    let mut reported = 0;
    loop {
        let chunk = JsFuture::from(reader.read())
            .await
            .map_err(|e| JsError::new(&format!("{file}: download failed after {} bytes: {}", buf.len(), text(&e))))?;
        if Reflect::get(&chunk, &"done".into()).ok() == Some(JsValue::TRUE) {
            break;
        }
        let value: Uint8Array = Reflect::get(&chunk, &"value".into())
            .ok()
            .and_then(|v| v.dyn_into().ok())
            .ok_or_else(|| JsError::new(&format!("{file}: the stream gave something other than bytes")))?;
        let (at, n) = (buf.len(), value.length() as usize);
        if (at + n) as u64 > MAX_FILE_BYTES {
            reader.release_lock();
            return Err(too_big((at + n) as u64));
        }
        buf.try_reserve(n).map_err(|_| {
            JsError::new(&format!("{file}: out of wasm memory after {at} bytes (+{n}): the model is too large"))
        })?;
        buf.resize(at + n, 0);
        value.copy_to(&mut buf[at..]);
        if buf.len() - reported >= PROGRESS_EVERY {
            reported = buf.len();
            opts.report(file, reported, total.map(|t| t.max(reported as u64)), cached)?;
        }
    }
    opts.report(file, buf.len(), Some(buf.len() as u64), cached)?;
    Ok(buf)
}
