//! The GPU tuning vocabulary (public as `webtensor::gpu`): the matmul kernels' tile configurations, the choice a
//! plan ([`CompileOptions::matmul`](crate::CompileOptions::matmul)) or the environment can pin, what tuning
//! found, and the environment variables the GPU backend reads. Plain data, below the backends that read it.
//! Everything else about a GPU device is in [`Capabilities`](crate::Capabilities).

use crate::error::{Error, Result};

/// Environment variable that pins the matmul kernel: a [`TileConfig`] name such as `128x128x8`, a
/// [`CoopConfig`] name such as `coop16-64x64x32-4sg`, or `generic`.
pub const MATMUL_ENV: &str = "WEBTENSOR_MATMUL";

/// Environment variable: whether the matmul kernels keep wgpu's runtime shader checks, `on` or `off`. wgpu clamps
/// every array index and bounds every loop by default; on tensor-core kernels that costs 3.5× (measured on an
/// H200). The matmul kernels are in bounds by construction (every global access is guarded against the operand's
/// own extent, every workgroup and private index is bounded by tile constants, every loop ends), which tests with
/// NaN guard borders check. Default: `off` on Vulkan, where the driver's robustBufferAccess (which wgpu enables)
/// still confines buffer accesses; `on` elsewhere. Browsers always check.
pub const SHADER_CHECKS_ENV: &str = "WEBTENSOR_SHADER_CHECKS";

/// Environment variable: the fewest keys a split of a decode step's attention takes on a GPU device, a whole
/// number of keys (rounded up to whole tiles). Default: 256 on adapters that run on CPU cores, else one tile, so
/// that each split runs on a workgroup of its own (docs/kernels.md). For timing one choice against another on
/// the same device (`scripts/gpu-check.sh` times the decode step with 256).
pub const DECODE_SPLIT_ENV: &str = "WEBTENSOR_DECODE_SPLIT";

/// Environment variable: how long, in milliseconds, a run waits natively for the GPU to finish its work and map
/// the outputs before it fails with [`Error::Gpu`] (default 60000, i.e. 60 s). Read once per process.
///
/// The bound turns a GPU that never finishes into an error; it is not a performance budget. A real GPU's driver
/// resets a dispatch that runs for seconds (Windows TDR: 2 s) and the device is then reported lost, so the
/// timeout only matters where no watchdog exists, such as lavapipe, where a large plan on a slow CPU can
/// legitimately take tens of seconds: hence the default of a minute. In the browser the runtime bounds the wait
/// (the map fails when the device is lost) and this variable is not read.
pub const READBACK_TIMEOUT_ENV: &str = "WEBTENSOR_READBACK_TIMEOUT_MS";

/// Environment variable: where the per-device tuning results are kept. `off` disables the file; a path puts it
/// there; unset, it is `$XDG_CACHE_HOME/webtensor/matmul-tuning.txt` (or `~/.cache/webtensor/...`). The file has
/// one line per tuned device, `backend|adapter name|driver = choice` (and `...|f16 coop = choice` for the
/// cooperative-matrix kernel); the last line for a device wins, and deleting the file re-tunes.
pub const TUNE_CACHE_ENV: &str = "WEBTENSOR_TUNE_CACHE";

/// What the tuning cache holds for an adapter: the matmul kernel tuned for f32 (and f16 without cooperative
/// matrices), the cooperative-matrix configuration tuned for f16 (`none` when every one failed), and why the
/// generic kernel or none was left, when so. `None` fields: not tuned yet (or the cache is off).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TunedKernels {
    /// The tiled configuration's name, or `generic`.
    pub tiled: Option<String>,
    /// Why no tiled configuration was chosen (each candidate and its failure).
    pub tiled_why: Option<String>,
    /// The cooperative-matrix configuration's name, or `none`.
    pub coop: Option<String>,
    /// Why no cooperative-matrix configuration was chosen.
    pub coop_why: Option<String>,
}

/// A tile shape of `matmul_tiled.wgsl`: TM = 64·rm rows, TN = 64·rn columns, K steps of bk.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TileConfig {
    /// Row blocks of 64: the tile has TM = 64·rm rows.
    pub rm: u32,
    /// Column blocks of 64: the tile has TN = 64·rn columns.
    pub rn: u32,
    /// K elements staged in workgroup memory per step.
    pub bk: u32,
}

impl TileConfig {
    /// `TMxTNxBK`, e.g. `128x128x8`.
    pub fn name(self) -> String {
        format!("{}x{}x{}", 64 * self.rm, 64 * self.rn, self.bk)
    }

    /// Workgroup memory the configuration needs, in bytes.
    pub fn shared_bytes(self) -> u32 {
        (64 * self.rm + 64 * self.rn) * self.bk * 4
    }
}

/// Every tile configuration the tuner may choose from (each loads a whole number of vec4 per invocation).
pub const TILE_CONFIGS: [TileConfig; 4] = [
    TileConfig { rm: 2, rn: 2, bk: 8 },
    TileConfig { rm: 1, rn: 1, bk: 16 },
    TileConfig { rm: 2, rn: 2, bk: 16 },
    TileConfig { rm: 2, rn: 1, bk: 16 },
];

/// The configuration used when nothing was tuned (on wasm, and before tuning): 128x128x16, the fastest on both
/// software adapters measured (SwiftShader, as in headless Chromium, and lavapipe); its 16 KiB of workgroup
/// memory is WebGPU's guaranteed minimum.
pub const DEFAULT_CONFIG: TileConfig = TILE_CONFIGS[2];

/// A tile shape of `matmul_coop.wgsl`: a workgroup of `wm × wn` subgroups (32 invocations each), each owning
/// `sm × sn` accumulator fragments of `frag × frag` elements; K advances `bk` elements per step.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CoopConfig {
    /// Fragment size in elements (16 for `coop_mat16x16`; the template also takes 8, `coop_mat8x8`).
    pub frag: u32,
    /// Subgroups along M (rows of the block).
    pub wm: u32,
    /// Subgroups along N (columns of the block).
    pub wn: u32,
    /// Accumulator fragments per subgroup along M.
    pub sm: u32,
    /// Accumulator fragments per subgroup along N.
    pub sn: u32,
    /// K elements staged per step (a multiple of `frag`).
    pub bk: u32,
}

/// Every cooperative-matrix configuration the tuner may choose from. All use 16×16×16 fragments: the only
/// adapters offering 8×8×8 f16 → f32 (Metal) have variable subgroup sizes, which the kernel cannot use.
pub const COOP_CONFIGS: [CoopConfig; 4] = [
    CoopConfig { frag: 16, wm: 2, wn: 2, sm: 2, sn: 2, bk: 32 },
    CoopConfig { frag: 16, wm: 2, wn: 2, sm: 4, sn: 2, bk: 32 },
    CoopConfig { frag: 16, wm: 2, wn: 2, sm: 4, sn: 4, bk: 32 },
    CoopConfig { frag: 16, wm: 2, wn: 4, sm: 4, sn: 2, bk: 32 },
];

impl CoopConfig {
    /// Block rows (elements).
    pub fn bm(self) -> u32 {
        self.wm * self.sm * self.frag
    }

    /// Block columns (elements).
    pub fn bn(self) -> u32 {
        self.wn * self.sn * self.frag
    }

    /// Invocations per workgroup (32 per subgroup).
    pub fn invocations(self) -> u32 {
        32 * self.wm * self.wn
    }

    /// `coopF-BMxBNxBK-Ssg`, e.g. `coop16-64x64x32-4sg`.
    pub fn name(self) -> String {
        format!("coop{}-{}x{}x{}-{}sg", self.frag, self.bm(), self.bn(), self.bk, self.wm * self.wn)
    }

    /// Row strides (in halves) of the A and B staging blocks for the operands' layouts.
    pub(crate) fn strides(self, a_kcontig: bool, b_ncontig: bool) -> (u32, u32) {
        let sa = if a_kcontig { self.bk + 8 } else { self.bm() + 8 };
        let sb = if b_ncontig { self.bn() + 8 } else { self.bk + 8 };
        (sa, sb)
    }

    /// Workgroup memory the configuration needs, in bytes (the larger of the two operand layouts).
    pub fn shared_bytes(self) -> u32 {
        let a = (self.bm() * (self.bk + 8)).max(self.bk * (self.bm() + 8));
        let b = (self.bn() * (self.bk + 8)).max(self.bk * (self.bn() + 8));
        2 * (a + b) + 4 * self.wm * self.wn * self.frag * self.frag
    }
}

/// A pinned or tuned choice of matmul kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MatmulChoice {
    /// Always the generic strided kernel.
    Generic,
    /// The tiled kernel with this configuration where its preconditions hold (no cooperative matrices).
    Tiled(TileConfig),
    /// f16 × f16 matmuls on cooperative matrices with this configuration where the adapter and the layouts
    /// allow it; every other matmul takes the tiled kernel with [`DEFAULT_CONFIG`].
    Coop(CoopConfig),
}

impl MatmulChoice {
    /// The name `WEBTENSOR_MATMUL` accepts for this choice.
    pub fn name(self) -> String {
        match self {
            MatmulChoice::Generic => "generic".into(),
            MatmulChoice::Tiled(c) => c.name(),
            MatmulChoice::Coop(c) => c.name(),
        }
    }
}

impl std::str::FromStr for MatmulChoice {
    type Err = Error;
    fn from_str(s: &str) -> Result<MatmulChoice> {
        if s == "generic" {
            return Ok(MatmulChoice::Generic);
        }
        let tiled = TILE_CONFIGS.iter().map(|&c| MatmulChoice::Tiled(c));
        let all = tiled.chain(COOP_CONFIGS.iter().map(|&c| MatmulChoice::Coop(c)));
        all.clone().find(|c| c.name() == s).ok_or_else(|| {
            let names: Vec<String> = all.map(|c| c.name()).collect();
            Error::InvalidArgument {
                op: "matmul",
                reason: format!("unknown matmul kernel '{s}' (expected generic or one of {})", names.join(", ")),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn coop_configs_load_whole_vec4s_and_fit_steps() {
        for c in COOP_CONFIGS {
            let inv = c.invocations();
            assert_eq!((c.bm() * c.bk / 4) % inv, 0, "{}: A loads", c.name());
            assert_eq!((c.bn() * c.bk / 4) % inv, 0, "{}: B loads", c.name());
            assert_eq!(c.bk % c.frag, 0, "{}: K step", c.name());
            // padded rows and fragment offsets keep every cooperative load's pointer and stride 16-byte aligned
            // (Vulkan: the lesser of 16 bytes and one row), in all four layouts; the f32 scratch too
            assert_eq!(c.frag % 8, 0);
            for (a, b) in [(true, true), (true, false), (false, true), (false, false)] {
                let (sa, sb) = c.strides(a, b);
                assert_eq!((sa * 2) % 16, 0, "{}: A stride {sa}", c.name());
                assert_eq!((sb * 2) % 16, 0, "{}: B stride {sb}", c.name());
            }
            assert_eq!((c.frag * c.frag * 4) % 16, 0);
        }
        let names: std::collections::HashSet<String> = COOP_CONFIGS.iter().map(|c| c.name()).collect();
        assert_eq!(names.len(), COOP_CONFIGS.len(), "names are unique");
    }
}
