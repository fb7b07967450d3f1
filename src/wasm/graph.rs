//! `Graph` and `Tensor`: the graph API in JS, one method per op.

use super::convert::{js_err, parse_dtype, shape_array, to_usize};
use super::tensors::{WebResident, WebState};
use crate::dtype::DType;
use crate::graph::Attention;
use crate::ops::{Rope, RopeMode};
use js_sys::{Array, Reflect};
use wasm_bindgen::prelude::*;

/// A handle to a tensor of a [`Graph`](WebGraph), returned by its op methods. Holds no data.
#[wasm_bindgen(js_name = Tensor)]
#[derive(Clone, Copy, Debug)]
pub struct WebTensor {
    pub(super) inner: crate::graph::Tensor,
}

#[wasm_bindgen(js_class = Tensor)]
impl WebTensor {
    /// Position of the node in its graph, in creation order.
    #[wasm_bindgen(getter)]
    pub fn index(&self) -> u32 {
        self.inner.id
    }

    /// Identifier of the graph that made this tensor (used to read `Tensor[]` arguments; a tensor of another
    /// graph is rejected).
    #[wasm_bindgen(getter, js_name = graphId)]
    pub fn graph_id(&self) -> u32 {
        self.inner.graph
    }
}

/// Reads a JS array of `Tensor` objects without taking them over (they stay usable).
pub(super) fn tensors_of(arr: &Array, what: &str) -> Result<Vec<crate::graph::Tensor>, JsError> {
    arr.iter()
        .enumerate()
        .map(|(i, v)| {
            let field = |k: &str| Reflect::get(&v, &JsValue::from_str(k)).ok().and_then(|x| x.as_f64());
            match (field("index"), field("graphId")) {
                (Some(id), Some(graph)) if v.is_object() => {
                    Ok(crate::graph::Tensor { id: id as u32, graph: graph as u32 })
                }
                _ => Err(JsError::new(&format!("{what}[{i}] is not a Tensor"))),
            }
        })
        .collect()
}

/// An optional `Tensor` argument, read without taking it over (a `Tensor` passed by value would be consumed).
fn opt_tensor(v: &JsValue, what: &str) -> Result<Option<crate::graph::Tensor>, JsError> {
    if v.is_undefined() || v.is_null() {
        return Ok(None);
    }
    Ok(Some(tensors_of(&Array::of1(v), what)?[0]))
}

/// A tensor graph under construction: declare inputs, chain ops, then [`Device.compile`](super::WebDevice::compile)
/// it. Every op validates its operands at once and throws with the library's message (naming the op and the
/// shapes) when they do not fit. Shapes are numpy order (outermost first), rank 0 to 4; a negative axis counts
/// from the end. Inputs are float32 unless declared otherwise; resident weights and states join with
/// `resident` and `state`.
#[wasm_bindgen(js_name = Graph)]
#[derive(Default)]
pub struct WebGraph {
    pub(super) inner: crate::graph::Graph,
}

type R = Result<WebTensor, JsError>;

fn wrap(r: crate::error::Result<crate::graph::Tensor>) -> R {
    r.map(|inner| WebTensor { inner }).map_err(js_err)
}

#[wasm_bindgen(js_class = Graph)]
impl WebGraph {
    /// An empty graph.
    #[wasm_bindgen(constructor)]
    pub fn new() -> WebGraph {
        WebGraph::default()
    }

    /// Number of nodes recorded so far (views included).
    #[wasm_bindgen(getter)]
    pub fn length(&self) -> u32 {
        self.inner.len() as u32
    }

    /// Shape of `x` (numpy order). Throws for a tensor of another graph.
    #[wasm_bindgen(unchecked_return_type = "number[]")]
    pub fn shape(&self, x: &WebTensor) -> Result<Array, JsError> {
        self.inner.shape(x.inner).map(shape_array).map_err(js_err)
    }

    /// Declares an input named `name` of `shape` and `dtype` (`"float32"` when left out; `"int32"` for token
    /// ids, positions and lengths; `"float16"`); its values are given to each `Plan.run`.
    /// Throws for rank over 4, a duplicate name or an unknown dtype (rank 0 is a scalar; a dim of 0 makes an
    /// empty tensor).
    pub fn input(
        &mut self,
        name: &str,
        #[wasm_bindgen(unchecked_param_type = "number[] | Uint32Array")] shape: Vec<u32>,
        #[wasm_bindgen(unchecked_optional_param_type = "DTypeName")] dtype: Option<String>,
    ) -> R {
        let dtype = match dtype {
            Some(d) => parse_dtype(&d)?,
            None => DType::F32,
        };
        wrap(self.inner.input(name, dtype, &to_usize(&shape)))
    }

    /// Dtype of `x` (`"float32"`, `"int32"`, ..). Throws for a tensor of another graph.
    pub fn dtype(&self, x: &WebTensor) -> Result<String, JsError> {
        self.inner.dtype(x.inner).map(|d| d.name().to_string()).map_err(js_err)
    }

    // ---- tensors that outlive a run

    /// The resident weight `r` as a tensor of this graph (the same tensor each time). Plans bind it at compile
    /// time; compiling on another device than `r`'s throws, naming it.
    pub fn resident(&mut self, r: &WebResident) -> R {
        wrap(self.inner.resident(&r.inner))
    }

    /// The state `s` as a tensor of this graph: read it through views (`slice`, `reshape`), write it with
    /// `setRows` and `copyInto`; writes happen in order and later reads of the same run see them.
    pub fn state(&mut self, s: &WebState) -> R {
        wrap(self.inner.state(&s.inner))
    }

    /// Writes row `i` of `src` `[N, C]` into row `idx[i]` (int32 `[N]`) of `dst` `[R, C]`, a state or a view of
    /// one, converting to its dtype (float32 into a float16 cache); returns `dst` after the write (ggml_set_rows).
    /// On the GPU an index outside `0..R` writes nothing; on the CPU it fails the run naming the index.
    #[wasm_bindgen(js_name = setRows)]
    pub fn set_rows(&mut self, dst: &WebTensor, idx: &WebTensor, src: &WebTensor) -> R {
        wrap(self.inner.set_rows(dst.inner, idx.inner, src.inner))
    }

    /// Copies `src` into `dst` (a state or a view of one, same shape, broadcasting `src`), converting dtype;
    /// returns `dst` after the write (ggml_cpy into a view).
    #[wasm_bindgen(js_name = copyInto)]
    pub fn copy_into(&mut self, dst: &WebTensor, src: &WebTensor) -> R {
        wrap(self.inner.copy_into(dst.inner, src.inner))
    }

    /// Rows `idx` (int32 `[N]` or `[B, N]`) of `table` `[R, C]` (float32, float16 or a block type), as float32
    /// rows `[.., N, C]` (ggml_get_rows; `torch.index_select(table, 0, idx)`).
    #[wasm_bindgen(js_name = getRows)]
    pub fn get_rows(&mut self, table: &WebTensor, idx: &WebTensor) -> R {
        wrap(self.inner.get_rows(table.inner, idx.inner))
    }

    /// The indices (int32 `[.., k]`) of the `k` largest values of each last-axis row of `x`, largest first (ties:
    /// the lower index; NaN above every number) (`torch.topk(x, k).indices`; ggml_top_k).
    #[wasm_bindgen(js_name = topK)]
    pub fn top_k(&mut self, x: &WebTensor, k: u32) -> R {
        wrap(self.inner.top_k(x.inner, k as usize))
    }

    /// `x[.., idx[.., j]]` along the last axis (`numpy.take_along_axis(x, idx, -1)`).
    #[wasm_bindgen(js_name = takeAlongAxis)]
    pub fn take_along_axis(&mut self, x: &WebTensor, idx: &WebTensor) -> R {
        wrap(self.inner.take_along_axis(x.inner, idx.inner))
    }

    /// `out[t, j, :] = a[t, j mod A, :] @ w[ids[t, j]]ᵀ`: a `[T, A, K]`, experts w `[E, N, K]` (any float or block
    /// type), ids int32 `[T, U]` → float32 `[T, U, N]` (ggml_mul_mat_id).
    #[wasm_bindgen(js_name = mulMatId)]
    pub fn mul_mat_id(&mut self, a: &WebTensor, w: &WebTensor, ids: &WebTensor) -> R {
        wrap(self.inner.mul_mat_id(a.inner, w.inner, ids.inner))
    }

    /// The causal depthwise conv over the sequence (ggml_ssm_conv): x `[B, T + K − 1, C]` (its first K − 1 rows
    /// the carried state), w `[C, K]` → float32 `[B, T, C]`, `out[b, t, c] = Σ_k w[c, k] · x[b, t + k, c]`.
    #[wasm_bindgen(js_name = ssmConv)]
    pub fn ssm_conv(&mut self, x: &WebTensor, w: &WebTensor) -> R {
        wrap(self.inner.ssm_conv(x.inner, w.inner))
    }

    /// The gated delta rule (ggml_gated_delta_net): q, k `[B, T, Hk, Dk]`, v `[B, T, Hv, Dv]`, g (log-decays) and
    /// beta `[B, T, Hv]`, state `[B, Hv, Dv, Dk]` → `[out [B, T, Hv, Dv], newState [B, Hv, Dv, Dk]]` (float32).
    #[wasm_bindgen(js_name = gatedDeltaNet)]
    #[allow(clippy::too_many_arguments)]
    pub fn gated_delta_net(
        &mut self,
        q: &WebTensor,
        k: &WebTensor,
        v: &WebTensor,
        g: &WebTensor,
        beta: &WebTensor,
        state: &WebTensor,
        scale: f32,
    ) -> Result<Vec<WebTensor>, JsError> {
        let (out, new_state) = self
            .inner
            .gated_delta_net(q.inner, k.inner, v.inner, g.inner, beta.inner, state.inner, scale)
            .map_err(js_err)?;
        Ok(vec![WebTensor { inner: out }, WebTensor { inner: new_state }])
    }

    /// `x` converted to `dtype` (`"float32"` or `"float16"`; a block-type weight is dequantized).
    pub fn cast(&mut self, x: &WebTensor, #[wasm_bindgen(unchecked_param_type = "DTypeName")] dtype: &str) -> R {
        wrap(self.inner.cast(x.inner, parse_dtype(dtype)?))
    }

    /// Rotary position embedding (ggml_rope_ext): the first `nDims` dims of each head of `x` `[T, H, D]` or
    /// `[B, T, H, D]` turn in pairs by `pos[t] · freqScale · freqBase^(-2i / nDims)` radians; `pos` is int32
    /// `[T]`; `mode` is `"normal"` (adjacent pairs) or `"neox"` (halves); `factors` (optional float32
    /// `[nDims / 2]`) divides each pair's angle (Llama 3's rope scaling).
    #[allow(clippy::too_many_arguments)]
    pub fn rope(
        &mut self,
        x: &WebTensor,
        pos: &WebTensor,
        #[wasm_bindgen(js_name = nDims)] n_dims: u32,
        #[wasm_bindgen(unchecked_param_type = "\"normal\" | \"neox\"")] mode: &str,
        #[wasm_bindgen(js_name = freqBase)] freq_base: f32,
        #[wasm_bindgen(js_name = freqScale)] freq_scale: f32,
        #[wasm_bindgen(unchecked_optional_param_type = "Tensor | null")] factors: JsValue,
    ) -> R {
        let mode = match mode {
            "normal" => RopeMode::Normal,
            "neox" => RopeMode::Neox,
            other => return Err(JsError::new(&format!("rope: unknown mode '{other}' (normal, neox)"))),
        };
        let factors = opt_tensor(&factors, "rope: factors")?;
        let rope = Rope { freq_scale, ..Rope::new(n_dims as usize, mode, freq_base) };
        wrap(self.inner.rope_ext(x.inner, pos.inner, factors, &rope))
    }

    /// `softmax(q·kᵀ·scale + mask)·v` in one op (flash attention on the GPU): q `[.., H, T, D]`, k `[.., Hkv, S, D]`,
    /// v `[.., Hkv, S, Dv]` → `[.., T, H, Dv]`, query head `h` using K/V head `h / (H / Hkv)`. `causal` hides keys
    /// after each query's position; `mask` (optional) is added to the scores; `kvLen` (optional int32 `[1]`)
    /// limits the keys to the first L at run time; `sinks` (optional float32 `[H]`) adds a logit per head to each
    /// softmax's denominator (gpt-oss). torch's `scaled_dot_product_attention(..).transpose(-3, -2)`.
    #[allow(clippy::too_many_arguments)]
    pub fn attention(
        &mut self,
        q: &WebTensor,
        k: &WebTensor,
        v: &WebTensor,
        scale: f32,
        causal: bool,
        #[wasm_bindgen(unchecked_optional_param_type = "Tensor | null")] mask: JsValue,
        #[wasm_bindgen(js_name = kvLen, unchecked_optional_param_type = "Tensor | null")] kv_len: JsValue,
        #[wasm_bindgen(unchecked_optional_param_type = "Tensor | null")] sinks: JsValue,
    ) -> R {
        let (mask, kv_len) = (opt_tensor(&mask, "attention: mask")?, opt_tensor(&kv_len, "attention: kvLen")?);
        let sinks = opt_tensor(&sinks, "attention: sinks")?;
        let a = Attention { scale, causal, mask, kv_len, sinks };
        wrap(self.inner.attention(q.inner, k.inner, v.inner, &a))
    }

    // ---- views

    /// The same elements with a new shape (`torch.reshape`). Throws when element counts differ.
    pub fn reshape(
        &mut self,
        x: &WebTensor,
        #[wasm_bindgen(unchecked_param_type = "number[] | Uint32Array")] shape: Vec<u32>,
    ) -> R {
        wrap(self.inner.reshape(x.inner, &to_usize(&shape)))
    }
    /// Reorders dims: `out.shape[i] = x.shape[dims[i]]` (`torch.permute`). A view.
    pub fn permute(
        &mut self,
        x: &WebTensor,
        #[wasm_bindgen(unchecked_param_type = "number[] | Uint32Array")] dims: Vec<u32>,
    ) -> R {
        wrap(self.inner.permute(x.inner, &to_usize(&dims)))
    }
    /// Swaps axes `a` and `b` (`torch.transpose`). A view.
    pub fn transpose(&mut self, x: &WebTensor, a: i32, b: i32) -> R {
        wrap(self.inner.transpose(x.inner, a as isize, b as isize))
    }
    /// Swaps the last two axes (a view; `matmul(x, t(w))` reads `w` in place). Throws for rank 1.
    pub fn t(&mut self, x: &WebTensor) -> R {
        wrap(self.inner.t(x.inner))
    }
    /// `x[.., start..end, ..]` along `axis`. A view. Throws for an empty or out-of-bounds range.
    pub fn slice(&mut self, x: &WebTensor, axis: i32, start: u32, end: u32) -> R {
        wrap(self.inner.slice(x.inner, axis as isize, start as usize, end as usize))
    }
    /// Stretches `x` to `shape` by numpy broadcasting. A view.
    #[wasm_bindgen(js_name = broadcastTo)]
    pub fn broadcast_to(
        &mut self,
        x: &WebTensor,
        #[wasm_bindgen(unchecked_param_type = "number[] | Uint32Array")] shape: Vec<u32>,
    ) -> R {
        wrap(self.inner.broadcast_to(x.inner, &to_usize(&shape)))
    }
    /// A contiguous copy of `x`.
    pub fn contiguous(&mut self, x: &WebTensor) -> R {
        wrap(self.inner.contiguous(x.inner))
    }
    /// Joins `xs` along `axis` (`numpy.concatenate`). Throws when other dims differ.
    pub fn concat(&mut self, #[wasm_bindgen(unchecked_param_type = "Tensor[]")] xs: Array, axis: i32) -> R {
        let xs = tensors_of(&xs, "xs")?;
        wrap(self.inner.concat(&xs, axis as isize))
    }

    // ---- matmul

    /// `numpy.matmul`: A `[..., M, K]` · B `[..., K, N]` → `[..., M, N]`, batch dims broadcast; either operand
    /// may be a view such as `t(w)`. Throws when K differs. ggml's `ggml_mul_mat(a, b)` is `matmul(b, t(a))`.
    pub fn matmul(&mut self, a: &WebTensor, b: &WebTensor) -> R {
        wrap(self.inner.matmul(a.inner, b.inner))
    }

    // ---- elementwise, two operands: one method per row of the binary table (`add`, `sub`, `mul`, `div`;
    // below), with numpy broadcasting

    // ---- elementwise, one operand: one method per row of the unary table (below), and these

    /// Any op of the unary table by name (`"gelu_erf"`), with its f32 parameters (`scale`: `[s]`, `clamp`:
    /// `[lo, hi]`). Throws for an unknown name or a wrong parameter count.
    pub fn unary(&mut self, name: &str, x: &WebTensor, params: Option<Vec<f32>>) -> R {
        let op: crate::ops::UnaryOp = name.parse().map_err(js_err)?;
        wrap(self.inner.unary(op, x.inner, &params.unwrap_or_default()))
    }
    /// `x * s` (ggml_scale).
    pub fn scale(&mut self, x: &WebTensor, s: f32) -> R {
        wrap(self.inner.scale(x.inner, s))
    }
    /// `min(max(x, lo), hi)` (`torch.clamp`).
    pub fn clamp(&mut self, x: &WebTensor, lo: f32, hi: f32) -> R {
        wrap(self.inner.clamp(x.inner, lo, hi))
    }

    // ---- gated linear units (the GLU table)

    /// `act(a) · b` for the GLU op named `name` (`"swiglu"`, `"geglu"`, `"geglu_erf"`, `"geglu_quick"`), split
    /// form; throws for an unknown name.
    pub fn glu(&mut self, name: &str, a: &WebTensor, b: &WebTensor) -> R {
        wrap(self.inner.glu(glu_op(name)?, a.inner, b.inner))
    }
    /// The fused form of [`glu`](WebGraph::glu): the last axis of `x` halved into gate and value.
    #[wasm_bindgen(js_name = gluFused)]
    pub fn glu_fused(&mut self, name: &str, x: &WebTensor) -> R {
        wrap(self.inner.glu_fused(glu_op(name)?, x.inner))
    }
    /// `silu(a) · b` (LLaMA's feed-forward gate).
    pub fn swiglu(&mut self, a: &WebTensor, b: &WebTensor) -> R {
        wrap(self.inner.swiglu(a.inner, b.inner))
    }
    /// `gelu(a) · b`.
    pub fn geglu(&mut self, a: &WebTensor, b: &WebTensor) -> R {
        wrap(self.inner.geglu(a.inner, b.inner))
    }

    // ---- rows (last axis): one method per row of the row-op table (`softmax`, `rmsNorm`, `layerNorm`, `l2Norm`; below)

    /// `softmax(x·scale + mask)` over the last axis (ggml_soft_max_ext); `mask` (optional) must broadcast to
    /// `x`'s shape, e.g. `[S, N]` for a causal mask. A row that is all −Infinity gives zeros.
    #[wasm_bindgen(js_name = softmaxExt)]
    pub fn softmax_ext(
        &mut self,
        x: &WebTensor,
        #[wasm_bindgen(unchecked_param_type = "Tensor | undefined | null")] mask: JsValue,
        scale: f32,
    ) -> R {
        wrap(self.inner.softmax_ext(x.inner, opt_tensor(&mask, "softmaxExt: mask")?, scale))
    }

    // ---- reductions: one method per row of the reduction table (`sum`, `mean`, `max`, `argmax`; below)
}

/// The GLU op named `name`.
fn glu_op(name: &str) -> Result<crate::ops::GluOp, JsError> {
    crate::ops::GluOp::ALL
        .iter()
        .copied()
        .find(|op| op.name() == name)
        .ok_or_else(|| JsError::new(&format!("glu: unknown GLU op '{name}'")))
}

// One JS method per parameterless row of the unary table (`neg`, `geluErf`, ...), each in its own impl block so
// that wasm-bindgen sees complete methods.
macro_rules! unary_js_method {
    (0, $method:ident, $js:literal, $doc:literal) => {
        #[wasm_bindgen(js_class = Graph)]
        impl WebGraph {
            #[doc = $doc]
            #[wasm_bindgen(js_name = $js)]
            pub fn $method(&mut self, x: &WebTensor) -> R {
                wrap(self.inner.$method(x.inner))
            }
        }
    };
    ($params:literal, $($rest:tt)*) => {};
}

macro_rules! unary_js_methods {
    ($(($var:ident, $method:ident, $js:literal, $acc:ident, |$x:ident, $a:ident, $b:ident| $cpu:expr,
        $wgsl:literal, $doc:literal, $params:tt))*) => {
        $(unary_js_method!($params, $method, $js, $doc);)*
    };
}
crate::ops::for_each_unary!(unary_js_methods);

// One JS method per row of the binary table (numpy broadcasting; throws when shapes do not broadcast).
macro_rules! binary_js_methods {
    ($(($var:ident, $method:ident, $acc:ident, |$x:ident, $y:ident| $cpu:expr, $int:expr, $wgsl:literal,
        $doc:literal))*) => {
        $(
            #[wasm_bindgen(js_class = Graph)]
            impl WebGraph {
                #[doc = $doc]
                pub fn $method(&mut self, a: &WebTensor, b: &WebTensor) -> R {
                    wrap(self.inner.$method(a.inner, b.inner))
                }
            }
        )*
    };
}
crate::ops::for_each_binary!(binary_js_methods);

// One JS method per row of the row-op table, over the last axis, taking the op's parameters after x.
macro_rules! row_js_methods {
    ($(($var:ident, $method:ident, $js:literal, [$($param:ident),*], $wgsl:literal, |$row:ident, $p:ident| $cpu:block,
        $doc:literal))*) => {
        $(
            #[wasm_bindgen(js_class = Graph)]
            impl WebGraph {
                #[doc = $doc]
                #[doc = "Over the last axis."]
                #[wasm_bindgen(js_name = $js)]
                pub fn $method(&mut self, x: &WebTensor $(, $param: f32)*) -> R {
                    wrap(self.inner.$method(x.inner $(, $param)*))
                }
            }
        )*
    };
}
crate::ops::for_each_row!(row_js_methods);

// One JS method per row of the reduction table: over the last axis, kept as size 1.
macro_rules! reduce_js_methods {
    ($(($var:ident, $method:ident, $wgsl:literal, |$row:ident| $cpu:expr, $doc:literal))*) => {
        $(
            #[wasm_bindgen(js_class = Graph)]
            impl WebGraph {
                #[doc = $doc]
                pub fn $method(&mut self, x: &WebTensor) -> R {
                    wrap(self.inner.$method(x.inner))
                }
            }
        )*
    };
}
crate::ops::for_each_reduce!(reduce_js_methods);
