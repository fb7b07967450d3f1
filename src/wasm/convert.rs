//! Values between JS and the library: errors, shapes, dtypes by name, typed arrays in and out, the console.

use crate::caps::BackendKind;
use crate::dtype::DType;
use crate::error::Error;
use crate::tensor::{Data, HostTensor};
use half::f16;
use js_sys::{Array, ArrayBuffer, Float32Array, Int32Array, Uint16Array, Uint8Array};
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;

pub(super) fn js_err(e: Error) -> JsError {
    JsError::new(&e.to_string())
}

pub(super) fn to_usize(shape: &[u32]) -> Vec<usize> {
    shape.iter().map(|&d| d as usize).collect()
}

pub(super) fn shape_array(shape: &[usize]) -> Array {
    shape.iter().map(|&d| JsValue::from(d as u32)).collect()
}

/// Routes `log` warnings and errors, and panic messages, to the browser console (installed once, on first use).
/// The panic hook chains to the one installed before it.
pub(super) fn init_console() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    if std::thread::panicking() {
        return;
    }
    ONCE.call_once(|| {
        struct Console;
        impl log::Log for Console {
            fn enabled(&self, m: &log::Metadata) -> bool {
                m.level() <= log::Level::Warn
            }
            fn log(&self, r: &log::Record) {
                if self.enabled(r.metadata()) {
                    let msg = JsValue::from(format!("{}", r.args()));
                    if r.level() == log::Level::Error {
                        web_sys::console::error_1(&msg);
                    } else {
                        web_sys::console::warn_1(&msg);
                    }
                }
            }
            fn flush(&self) {}
        }
        static LOGGER: Console = Console;
        if log::set_logger(&LOGGER).is_ok() {
            log::set_max_level(log::LevelFilter::Warn);
        }
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            web_sys::console::error_1(&JsValue::from(format!("webtensor panicked: {info}")));
            previous(info);
        }));
    });
}

pub(super) fn parse_backend(backend: Option<String>) -> Result<BackendKind, JsError> {
    let kind: BackendKind = backend.as_deref().unwrap_or("auto").parse().map_err(js_err)?;
    match kind {
        BackendKind::Auto | BackendKind::Cpu | BackendKind::WebGpu => Ok(kind),
        other => Err(JsError::new(&format!(
            "no device: backend {other:?} is not available in the browser (use \"auto\", \"webgpu\" or \"cpu\")"
        ))),
    }
}

/// The dtype named `name`: [`DType::name`]'s names, and `f32`, `f16`, `i32`.
pub(super) fn parse_dtype(name: &str) -> Result<DType, JsError> {
    let n = name.to_ascii_lowercase();
    let alias = match n.as_str() {
        "f32" => "float32",
        "f16" => "float16",
        "i32" => "int32",
        other => other,
    };
    DType::ALL.into_iter().find(|d| d.name() == alias).ok_or_else(|| {
        let known: Vec<&str> = DType::ALL.iter().map(|d| d.name()).collect();
        JsError::new(&format!("unknown dtype '{name}' (known: {})", known.join(", ")))
    })
}

/// The bytes of an `ArrayBuffer` or a typed array / `DataView` (its own range of its buffer), copied into wasm
/// memory.
pub(super) fn js_bytes(name: &str, v: &JsValue) -> crate::error::Result<Vec<u8>> {
    if let Some(buf) = v.dyn_ref::<ArrayBuffer>() {
        return Ok(Uint8Array::new(buf).to_vec());
    }
    if ArrayBuffer::is_view(v) {
        let field = |k: &str| js_sys::Reflect::get(v, &JsValue::from_str(k)).unwrap_or(JsValue::UNDEFINED);
        let (buffer, offset, len) = (field("buffer"), field("byteOffset"), field("byteLength"));
        if let (Some(offset), Some(len)) = (offset.as_f64(), len.as_f64()) {
            return Ok(Uint8Array::new_with_byte_offset_and_length(&buffer, offset as u32, len as u32).to_vec());
        }
    }
    Err(Error::BadInput { name: name.into(), reason: "must be an ArrayBuffer or a typed array".into() })
}

/// The values `v` of input `name` (`dtype`, `shape`) as a host tensor: a `Float32Array` for float32, an
/// `Int32Array` for int32, a `Uint16Array` of half bits or a `Float32Array` for float16.
pub(super) fn values_of(name: &str, dtype: DType, shape: &[usize], v: &JsValue) -> Result<HostTensor, JsError> {
    let bad = |reason: String| js_err(Error::BadInput { name: name.into(), reason });
    let data = match dtype {
        DType::F32 => v.dyn_ref::<Float32Array>().map(|a| Data::F32(a.to_vec())),
        DType::I32 => v.dyn_ref::<Int32Array>().map(|a| Data::I32(a.to_vec())),
        DType::F16 => match (v.dyn_ref::<Uint16Array>(), v.dyn_ref::<Float32Array>()) {
            (Some(bits), _) => Some(Data::F16(bits.to_vec().into_iter().map(f16::from_bits).collect())),
            (_, Some(a)) => Some(Data::F16(a.to_vec().into_iter().map(f16::from_f32).collect())),
            _ => None,
        },
        other => return Err(bad(format!("inputs of dtype {other} are not supported (upload it as a weight)"))),
    };
    let array_type = match dtype {
        DType::I32 => "an Int32Array",
        DType::F16 => "a Uint16Array (half bits) or a Float32Array",
        _ => "a Float32Array",
    };
    let data = data.ok_or_else(|| bad(format!("must be {array_type} (the input is {dtype} {shape:?})")))?;
    let want: usize = shape.iter().product();
    if data.len() != want {
        return Err(bad(format!("has {} values, its shape {shape:?} holds {want}", data.len())));
    }
    HostTensor::new(shape, data).map_err(js_err)
}

/// A read-back tensor as a JS typed array: `Int32Array` for int32, `Float32Array` otherwise (f16 converted).
pub(super) fn output_array(t: &HostTensor) -> JsValue {
    match &t.data {
        Data::I32(v) => Int32Array::from(v.as_slice()).into(),
        _ => f32_array(t).into(),
    }
}

/// A read-back tensor as a `Float32Array` (other dtypes converted; f32 copied once, straight from its values).
pub(super) fn f32_array(t: &HostTensor) -> Float32Array {
    match &t.data {
        Data::F32(v) => Float32Array::from(v.as_slice()),
        other => Float32Array::from(other.to_f32().as_slice()),
    }
}

/// Copies a read-back tensor into `target`: an `Int32Array` for int32, a `Float32Array` otherwise (f16
/// converted), of the tensor's element count. Its type and length were checked before the run; they are checked
/// again here, as the page may have transferred (detached) its buffer since.
pub(super) fn write_output(t: &HostTensor, target: &JsValue, what: &str) -> Result<(), JsError> {
    let changed = || JsError::new(&format!("{what}: its array was detached or replaced during the run"));
    match &t.data {
        Data::I32(v) => {
            let a = target.dyn_ref::<Int32Array>().filter(|a| a.length() as usize == v.len()).ok_or_else(changed)?;
            a.copy_from(v);
        }
        data => {
            let a =
                target.dyn_ref::<Float32Array>().filter(|a| a.length() as usize == t.data.len()).ok_or_else(changed)?;
            match data {
                Data::F32(v) => a.copy_from(v),
                other => a.copy_from(&other.to_f32()),
            }
        }
    }
    Ok(())
}
