//! What a device is and can do: the backend kinds, device types and the [`Capabilities`] every backend reports,
//! plain data that the compiler reads and `webtensor info` prints.

use crate::dtype::DType;
use crate::error::{Error, Result};
use std::sync::atomic::{AtomicU64, Ordering};

/// Environment variable that forces a backend: `cpu`, `vulkan`, `gl`, `metal`, `dx12`, `webgpu` or `auto`.
pub const BACKEND_ENV: &str = "WEBTENSOR_BACKEND";

/// Which backend to run on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BackendKind {
    /// The best GPU adapter, else the CPU.
    Auto,
    /// The CPU backend (always available).
    Cpu,
    Vulkan,
    /// OpenGL / GLES (EGL on Linux).
    Gl,
    Metal,
    Dx12,
    /// WebGPU in the browser.
    WebGpu,
}

impl BackendKind {
    /// The lowercase name that [`FromStr`](std::str::FromStr) parses and [`BACKEND_ENV`] takes: `auto`, `cpu`, `vulkan`, `gl`,
    /// `metal`, `dx12` or `webgpu`.
    pub const fn name(self) -> &'static str {
        match self {
            BackendKind::Auto => "auto",
            BackendKind::Cpu => "cpu",
            BackendKind::Vulkan => "vulkan",
            BackendKind::Gl => "gl",
            BackendKind::Metal => "metal",
            BackendKind::Dx12 => "dx12",
            BackendKind::WebGpu => "webgpu",
        }
    }
}

impl std::fmt::Display for BackendKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for BackendKind {
    type Err = Error;
    fn from_str(s: &str) -> Result<BackendKind> {
        Ok(match s.to_ascii_lowercase().as_str() {
            "auto" | "" => BackendKind::Auto,
            "cpu" => BackendKind::Cpu,
            "vulkan" | "vk" => BackendKind::Vulkan,
            "gl" | "gles" | "opengl" => BackendKind::Gl,
            "metal" => BackendKind::Metal,
            "dx12" | "d3d12" => BackendKind::Dx12,
            "webgpu" => BackendKind::WebGpu,
            other => {
                return Err(Error::NoDevice(format!(
                    "unknown backend '{other}' (expected auto, cpu, vulkan, gl, metal, dx12 or webgpu)"
                )))
            }
        })
    }
}

/// The kind of device behind an adapter, as the driver reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DeviceType {
    /// A GPU of its own.
    DiscreteGpu,
    /// A GPU sharing the CPU's memory.
    IntegratedGpu,
    /// A GPU behind a virtualization layer.
    VirtualGpu,
    /// Computation on the CPU: a software adapter (lavapipe, llvmpipe, SwiftShader, WARP) or the CPU backend.
    Cpu,
    /// Anything else, or unknown (browsers often hide it).
    Other,
}

impl DeviceType {
    /// `DiscreteGpu`, `IntegratedGpu`, `VirtualGpu`, `Cpu` or `Other`.
    pub fn name(self) -> &'static str {
        match self {
            DeviceType::DiscreteGpu => "DiscreteGpu",
            DeviceType::IntegratedGpu => "IntegratedGpu",
            DeviceType::VirtualGpu => "VirtualGpu",
            DeviceType::Cpu => "Cpu",
            DeviceType::Other => "Other",
        }
    }
}

impl std::fmt::Display for DeviceType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// What the compiler may ask of a device. Everything the code depends on about an adapter is read into this
/// struct, in one place, and printed by `webtensor info`.
#[derive(Clone, Debug, PartialEq)]
pub struct Capabilities {
    /// The backend: `Cpu`, `Vulkan`, `Gl`, `Metal`, `Dx12` or `WebGpu`.
    pub backend: BackendKind,
    /// The adapter's name (e.g. `llvmpipe (LLVM 15.0.7, 256 bits)`), or the CPU's description.
    pub name: String,
    /// What kind of device the adapter is (a software rasterizer such as lavapipe reports `Cpu`).
    pub device_type: DeviceType,
    /// Driver name and version as the adapter reports them.
    pub driver: String,
    /// Largest storage-buffer binding, in bytes (`max_storage_buffer_binding_size`).
    pub max_storage_binding_bytes: u64,
    /// Largest buffer, in bytes (`max_buffer_size`).
    pub max_buffer_bytes: u64,
    /// Workgroup (shared) memory per workgroup, in bytes.
    pub max_workgroup_storage_bytes: u32,
    /// Invocations per workgroup.
    pub max_invocations_per_workgroup: u32,
    /// Workgroups per dispatch dimension.
    pub max_workgroups_per_dimension: u32,
    /// Alignment of storage-binding offsets, in bytes.
    pub min_storage_offset_alignment: u32,
    /// Alignment of uniform-binding offsets, in bytes.
    pub min_uniform_offset_alignment: u32,
    /// WGSL `enable f16;` (SHADER_F16) is available.
    pub shader_f16: bool,
    /// Subgroup operations are available.
    pub subgroups: bool,
    /// Smallest and largest subgroup size in invocations (0 when unknown).
    pub subgroup_size: (u32, u32),
    /// Cooperative-matrix tile shapes, e.g. `16x16x16 f16->f32` (empty when unsupported).
    pub cooperative_matrix: Vec<String>,
    /// Element types tensors may have on this device: f32, f16 and i32 computed on, and the storage formats
    /// (bf16, ggml's block types) as weights that matmul and get_rows read. f16 is listed whether or not the
    /// adapter has `shader_f16`: without it f16 tensors are stored packed and unpacked in the shader.
    pub dtypes: Vec<DType>,
    /// Why webtensor cannot run on this adapter (`None`: it can): it lacks compute shaders (an OpenGL context
    /// older than 4.3, GLES older than 3.1) or WebGPU's minimum compute limits. [`Device::best`](crate::Device::best)
    /// passes such adapters over and asking for one by backend is an error that gives this reason.
    pub unusable: Option<String>,
}

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// A fresh identity for a device or an external tensor (unique in the process).
pub(crate) fn next_id() -> u64 {
    NEXT_ID.fetch_add(1, Ordering::Relaxed)
}

impl std::str::FromStr for DeviceType {
    type Err = Error;
    fn from_str(s: &str) -> Result<DeviceType> {
        [DeviceType::DiscreteGpu, DeviceType::IntegratedGpu, DeviceType::VirtualGpu, DeviceType::Cpu, DeviceType::Other]
            .into_iter()
            .find(|t| t.name() == s)
            .ok_or_else(|| Error::InvalidArgument {
                op: "DeviceType::from_str",
                reason: format!(
                    "unknown device type '{s}' (expected DiscreteGpu, IntegratedGpu, VirtualGpu, Cpu or Other)"
                ),
            })
    }
}

impl Capabilities {
    /// Reads one adapter's capabilities as `webtensor info --json` prints them (an element of its `adapters`
    /// array): a recorded adapter profile, from which plans can be compiled and checked without the adapter.
    /// Missing `dtypes` means every dtype; missing `unusable` means usable.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] naming the field when the JSON is malformed or a field is missing or of the
    /// wrong type.
    pub fn from_json(json: &str) -> Result<Capabilities> {
        let bad = |reason: String| Error::InvalidArgument { op: "Capabilities::from_json", reason };
        let v: serde_json::Value = serde_json::from_str(json).map_err(|e| bad(format!("not JSON: {e}")))?;
        let field = |k: &str| v.get(k).ok_or_else(|| bad(format!("missing field '{k}'")));
        let text =
            |k: &str| field(k)?.as_str().map(str::to_string).ok_or_else(|| bad(format!("'{k}' is not a string")));
        let num = |k: &str| field(k)?.as_u64().ok_or_else(|| bad(format!("'{k}' is not a non-negative integer")));
        let num32 = |k: &str| u32::try_from(num(k)?).map_err(|_| bad(format!("'{k}' exceeds u32")));
        let flag = |k: &str| field(k)?.as_bool().ok_or_else(|| bad(format!("'{k}' is not a boolean")));
        let strings = |k: &str| -> Result<Vec<String>> {
            let a = field(k)?.as_array().ok_or_else(|| bad(format!("'{k}' is not an array")))?;
            a.iter()
                .map(|s| s.as_str().map(str::to_string).ok_or_else(|| bad(format!("'{k}' holds a non-string"))))
                .collect()
        };
        let sub = field("subgroup_size")?.as_array().filter(|a| a.len() == 2);
        let sub = sub.and_then(|a| Some((u32::try_from(a[0].as_u64()?).ok()?, u32::try_from(a[1].as_u64()?).ok()?)));
        let subgroup_size = sub.ok_or_else(|| bad("'subgroup_size' is not a pair of integers".into()))?;
        let dtypes = match v.get("dtypes") {
            None => DType::ALL.to_vec(),
            Some(_) => strings("dtypes")?
                .iter()
                .map(|n| {
                    DType::ALL
                        .iter()
                        .copied()
                        .find(|d| d.name() == n)
                        .ok_or_else(|| bad(format!("unknown dtype '{n}'")))
                })
                .collect::<Result<_>>()?,
        };
        let unusable = match v.get("unusable") {
            None | Some(serde_json::Value::Null) => None,
            Some(_) => Some(text("unusable")?),
        };
        Ok(Capabilities {
            backend: text("backend")?.parse()?,
            name: text("name")?,
            device_type: text("device_type")?.parse()?,
            driver: text("driver")?,
            max_storage_binding_bytes: num("max_storage_binding_bytes")?,
            max_buffer_bytes: num("max_buffer_bytes")?,
            max_workgroup_storage_bytes: num32("max_workgroup_storage_bytes")?,
            max_invocations_per_workgroup: num32("max_invocations_per_workgroup")?,
            max_workgroups_per_dimension: num32("max_workgroups_per_dimension")?,
            min_storage_offset_alignment: num32("min_storage_offset_alignment")?,
            min_uniform_offset_alignment: num32("min_uniform_offset_alignment")?,
            shader_f16: flag("shader_f16")?,
            subgroups: flag("subgroups")?,
            subgroup_size,
            cooperative_matrix: strings("cooperative_matrix")?,
            dtypes,
            unusable,
        })
    }
}
