//! What the GPU backend derives from the tuning vocabulary ([`crate::tuning`]): the kernels a plan's matmuls may
//! use, and the decode attention's split override read from the environment.

use crate::tuning::{CoopConfig, MatmulChoice, DEFAULT_CONFIG};

/// [`DECODE_SPLIT_ENV`]'s value where it is set to a whole number (warned about and ignored otherwise). Read once
/// per process.
pub(crate) fn decode_split_override() -> Option<u32> {
    #[cfg(not(target_arch = "wasm32"))]
    {
        static KEYS: std::sync::OnceLock<Option<u32>> = std::sync::OnceLock::new();
        *KEYS.get_or_init(|| match std::env::var(crate::tuning::DECODE_SPLIT_ENV).as_deref() {
            Ok(v) if !v.is_empty() => v
                .parse()
                .inspect_err(|e| {
                    log::warn!(
                        "webtensor: {}={v} is not a whole number of keys ({e}); ignored",
                        crate::tuning::DECODE_SPLIT_ENV
                    )
                })
                .ok(),
            _ => None,
        })
    }
    #[cfg(target_arch = "wasm32")]
    None
}

/// The kernels a plan's matmuls may use: the tiled configuration (or the generic kernel) and, for f16 × f16
/// matmuls on adapters that have them, a cooperative-matrix configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct MatmulKernels {
    /// [`MatmulChoice::Tiled`] or [`MatmulChoice::Generic`].
    pub tiled: MatmulChoice,
    pub coop: Option<CoopConfig>,
    /// Pinned (a plan's `CompileOptions::matmul`, `WEBTENSOR_MATMUL`): matmuls of two rows or more take these
    /// kernels, never the serial mat-vec a row that a few rows take on software adapters otherwise.
    pub pinned: bool,
}

impl MatmulKernels {
    /// What a pinned [`MatmulChoice`] means: `Coop(c)` is `c` for f16 × f16 and the default tiled kernel for the
    /// rest; `Tiled` and `Generic` use no cooperative matrices.
    pub(crate) fn pinned(c: MatmulChoice) -> MatmulKernels {
        match c {
            MatmulChoice::Coop(cfg) => {
                MatmulKernels { tiled: MatmulChoice::Tiled(DEFAULT_CONFIG), coop: Some(cfg), pinned: true }
            }
            c => MatmulKernels { tiled: c, coop: None, pinned: true },
        }
    }
}
