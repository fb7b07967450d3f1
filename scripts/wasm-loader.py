#!/usr/bin/env python3
"""Makes the package's default `init()` pick its wasm build by what the engine validates.

scripts/build-wasm.sh builds the library twice: `webtensor_bg.wasm` (simd128: every engine with wasm SIMD) and
`webtensor_relaxed_bg.wasm` (simd128 and relaxed-simd: V8 since Chrome and Edge 114 and Node.js 21; other
engines get the simd128 build). Their JS glue is the same, so one `webtensor.js` loads either. This script edits
wasm-bindgen's glue (the version pinned in Cargo.lock) in place:

- `init()` with no argument fetches `wasmFile()` instead of `webtensor_bg.wasm`;
- `wasmFile()` is exported (and declared in webtensor.d.ts): the file name of the build this engine runs, for
  callers that load the bytes themselves (Node.js: `readFileSync(new URL(wasmFile(), import.meta.url))`).

The edit is an exact replacement of one line of the glue: when a wasm-bindgen upgrade changes that line, this
script fails with a message instead of leaving a package that loads the wrong file.

    python3 scripts/wasm-loader.py pkg/webtensor.js
"""

import pathlib
import sys

DEFAULT_URL = "module_or_path = new URL('webtensor_bg.wasm', import.meta.url);"
CHOSEN_URL = "module_or_path = new URL(wasmFile(), import.meta.url);"

# A module of one function, `f32x4.relaxed_madd` of three `f32x4.splat(1.0)`: valid only where the engine has
# relaxed-simd (opcode 0xfd 0x105). Engines implement the proposal whole, so one instruction stands for all.
PROBE = [
    0, 97, 115, 109, 1, 0, 0, 0,  # magic, version 1
    1, 5, 1, 96, 0, 1, 123,  # type section: () -> v128
    3, 2, 1, 0,  # function section: one function of type 0
    10, 28, 1, 26, 0,  # code section: one body of 26 bytes, no locals
    *([67, 0, 0, 128, 63, 253, 19] * 3),  # (f32x4.splat (f32.const 1.0)) three times
    253, 133, 2,  # f32x4.relaxed_madd
    11,  # end
]

JS = f"""
let wasmFileChosen;
/**
 * The file name of the wasm build this engine runs: `webtensor_relaxed_bg.wasm` (relaxed-simd: the CPU backend's
 * f32 matmul in fused multiply-adds) where `WebAssembly.validate` accepts relaxed-simd, else `webtensor_bg.wasm`
 * (simd128). `init()` with no argument fetches it from beside this module.
 * @returns {{string}}
 */
export function wasmFile() {{
    wasmFileChosen ??= WebAssembly.validate(new Uint8Array({PROBE!r}))
        ? 'webtensor_relaxed_bg.wasm'
        : 'webtensor_bg.wasm';
    return wasmFileChosen;
}}
"""

DTS = """
/**
 * The file name of the wasm build this engine runs: `webtensor_relaxed_bg.wasm` (relaxed-simd: the CPU backend's
 * f32 matmul in fused multiply-adds) where `WebAssembly.validate` accepts relaxed-simd, else `webtensor_bg.wasm`
 * (simd128). `init()` with no argument fetches it from beside this module; callers that load the bytes themselves
 * (Node.js) read this file.
 */
export function wasmFile(): string;
"""


def main() -> int:
    if len(sys.argv) != 2:
        print(__doc__.strip().splitlines()[-1].strip(), file=sys.stderr)
        return 2
    js = pathlib.Path(sys.argv[1])
    dts = js.with_suffix(".d.ts")
    text = js.read_text()
    if text.count(DEFAULT_URL) != 1:
        print(f"wasm-loader: {js} does not hold the line {DEFAULT_URL!r} once (a new wasm-bindgen?)", file=sys.stderr)
        return 1
    if not dts.exists():
        print(f"wasm-loader: {dts} is missing", file=sys.stderr)
        return 1
    js.write_text(text.replace(DEFAULT_URL, CHOSEN_URL) + JS)
    dts.write_text(dts.read_text() + DTS)
    return 0


if __name__ == "__main__":
    sys.exit(main())
