//! `ModelBytes`: a model file received in parts, straight into wasm memory.

use js_sys::Uint8Array;
use wasm_bindgen::prelude::*;

/// The error of a call made while the object's previous call is still running.
pub(super) fn busy(what: &str) -> JsError {
    JsError::new(&format!("this {what} is busy: await the previous call before starting another"))
}

/// A model file received in parts, straight into wasm memory (as a download streams in), so that no whole copy
/// of it is held in JS memory. Give it to `LanguageModel.fromModelBytes` or `SentenceEmbedder.load`.
#[wasm_bindgen(js_name = ModelBytes)]
pub struct WebModelBytes {
    pub(super) buf: Vec<u8>,
}

#[wasm_bindgen(js_class = ModelBytes)]
impl WebModelBytes {
    /// An empty buffer; `expectedBytes` (e.g. a response's Content-Length) reserves room up front, at most
    /// 3 GiB (wasm32 addresses 4 GiB in all).
    #[wasm_bindgen(constructor)]
    pub fn new(#[wasm_bindgen(js_name = expectedBytes)] expected_bytes: Option<f64>) -> WebModelBytes {
        let reserve =
            expected_bytes.filter(|x| x.is_finite() && *x > 0.0).map_or(0.0, |x| x.min(3.0 * (1u64 << 30) as f64));
        WebModelBytes { buf: Vec::with_capacity(reserve as usize) }
    }

    /// Appends `chunk`. Throws when wasm memory cannot grow to hold it.
    pub fn push(&mut self, chunk: &Uint8Array) -> Result<(), JsError> {
        let n = chunk.length() as usize;
        self.buf.try_reserve(n).map_err(|_| {
            JsError::new(&format!("out of wasm memory after {} bytes (+{n}): the model is too large", self.buf.len()))
        })?;
        let at = self.buf.len();
        self.buf.resize(at + n, 0);
        chunk.copy_to(&mut self.buf[at..]);
        Ok(())
    }

    /// Bytes received so far.
    #[wasm_bindgen(getter)]
    pub fn length(&self) -> f64 {
        self.buf.len() as f64
    }
}
