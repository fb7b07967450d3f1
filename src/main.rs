//! The `webtensor` command-line tool: `info`, `demo` and `matmul`. Run `webtensor --help`.
//!
//! Everything lives in `src/cli/`; this file only hands over to it. The CLI is native-only: in the browser,
//! use the library's wasm-bindgen API instead.

#[cfg(not(target_arch = "wasm32"))]
mod cli;

#[cfg(not(target_arch = "wasm32"))]
fn main() -> std::process::ExitCode {
    cli::main()
}

#[cfg(target_arch = "wasm32")]
fn main() {}
