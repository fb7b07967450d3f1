//! `Resident` and `State`: tensors that outlive a run, from JS.

use super::convert::{js_err, output_array, values_of};
use wasm_bindgen::prelude::*;

/// A weight in a device's memory, made by [`Device.upload`](super::WebDevice::upload); use it in graphs with
/// `Graph.resident`. `free()` drops this handle; the memory goes when the plans using it are freed too.
#[wasm_bindgen(js_name = Resident)]
pub struct WebResident {
    pub(super) inner: crate::resident::Resident,
}

/// A tensor that persists across runs (a KV cache), made by [`Device.state`](super::WebDevice::state); graphs
/// read it through `Graph.state` and write it with `Graph.setRows` / `Graph.copyInto`.
#[wasm_bindgen(js_name = State)]
pub struct WebState {
    pub(super) inner: crate::resident::State,
}

macro_rules! accessors {
    ($js:literal, $t:ty) => {
        #[wasm_bindgen(js_class = $js)]
        impl $t {
            /// The name given at creation.
            #[wasm_bindgen(getter)]
            pub fn name(&self) -> String {
                self.inner.name().to_string()
            }
            /// The dtype's name.
            #[wasm_bindgen(getter)]
            pub fn dtype(&self) -> String {
                self.inner.dtype().name().to_string()
            }
            /// The shape (numpy order).
            #[wasm_bindgen(getter, unchecked_return_type = "number[]")]
            pub fn shape(&self) -> js_sys::Array {
                super::convert::shape_array(self.inner.shape())
            }
            /// Size in bytes.
            #[wasm_bindgen(getter)]
            pub fn bytes(&self) -> f64 {
                self.inner.bytes() as f64
            }
        }
    };
}
accessors!("Resident", WebResident);
accessors!("State", WebState);

#[wasm_bindgen(js_class = State)]
impl WebState {
    /// Sets every element to zero. Throws when the device was lost.
    pub fn zero(&self) -> Result<(), JsError> {
        self.inner.zero().map_err(js_err)
    }

    /// Overwrites the state with `values` (typed as a plan's input of the state's dtype and shape: see
    /// `InputValues`), e.g. to restore a saved session. Throws, naming the state, for the wrong type or length.
    pub fn write(&self, #[wasm_bindgen(unchecked_param_type = "InputValues")] values: JsValue) -> Result<(), JsError> {
        let s = &self.inner;
        let t = values_of(s.name(), s.dtype(), s.shape(), &values)?;
        s.write(&t).map_err(js_err)
    }

    /// The state's values as the last run that wrote them left them: an `Int32Array` for int32, a
    /// `Float32Array` for float32 and float16 (converted). Rejects when the device was lost.
    #[wasm_bindgen(unchecked_return_type = "Float32Array | Int32Array")]
    pub async fn read(&self) -> Result<JsValue, JsError> {
        let t = self.inner.read_async().await.map_err(js_err)?;
        Ok(output_array(&t))
    }
}
