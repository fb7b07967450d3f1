// matmul_coop_emulation.wgsl — for tests on adapters without cooperative matrices
// (`testing::device_with_emulated_coop`): the three cooperative operations of matmul_coop.wgsl written out in
// plain WGSL with their documented semantics. An A or B fragment is a reference to its elements in workgroup
// memory (row-major: element (r, c) at `at + r * stride + c`; column-major: at `at + c * stride + r`), read when
// multiplied, which happens before the blocks are overwritten; lane `l` of the 32 in a (virtual) subgroup holds
// accumulator elements `l, l + 32, ..` (row-major). Token: PER_LANE = F * F / 32.
struct EmuFrag {
    at: u32,
    stride: u32,
    row_major: bool,
}

fn emu_load(at: u32, stride: u32, row_major: bool) -> EmuFrag {
    return EmuFrag(at, stride, row_major);
}

fn emu_at(m: EmuFrag, r: u32, c: u32) -> u32 {
    return select(m.at + c * m.stride + r, m.at + r * m.stride + c, m.row_major);
}

fn emu_multiply_add(a: EmuFrag, b: EmuFrag, c: array<f32, {{PER_LANE}}>, lane: u32) -> array<f32, {{PER_LANE}}> {
    var d = c;
    for (var t = 0u; t < {{PER_LANE}}u; t = t + 1u) {
        let e = lane + 32u * t;
        var s = d[t];
        for (var k = 0u; k < F; k = k + 1u) {
            s = fma(f32(a_s[emu_at(a, e / F, k)]), f32(b_s[emu_at(b, k, e % F)]), s);
        }
        d[t] = s;
    }
    return d;
}

fn emu_store(v: array<f32, {{PER_LANE}}>, at: u32, lane: u32) {
    for (var t = 0u; t < {{PER_LANE}}u; t = t + 1u) {
        c_s[at + lane + 32u * t] = v[t];
    }
}
