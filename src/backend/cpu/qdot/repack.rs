//! Weights repacked once, at their first use, for the AVX-512 VNNI kernel of every matmul with a quantized
//! weight: decode (one row of activations), several sequences decoded together (a few rows) and prefill
//! (many), as llama.cpp's CPU backend repacks Q4_0 and its kin at load (`ggml-cpu/repack.cpp`). Types: Q4_0,
//! Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K and Q6_K (llama.cpp's Q4_K_M and Q5_K_M mixes and the legacy types).
//!
//! The rows of a weight are taken 16 at a time (a panel, the 16 i32 lanes of a 512-bit vector). For each group
//! of 32 values, the panel's 16 rows are stored interleaved as `vpdpbusd` reads them: 64-byte chunks whose lane
//! `r` holds four consecutive values of row `r`, as unsigned bytes (`value = s·(q − offset) − o`). 4-bit values
//! are stored two to a byte (values `i` and `i + 16`, as Q4_0 stores them: one chunk gives two sets of four with
//! an `and` and a shift), Q6_K's two high bits four to a byte after them, Q8_0's bytes with their top bit flipped.
//! After a unit's groups (a block of 32, or a K super-block of 256), the 16 rows' scales: f16 as the file holds
//! them, and the K types' 6- or 8-bit sub-block scales as bytes. The layout holds as many bytes as the original
//! (Q4_K: 3% more), so decode reads no more memory than before; a panel's units lie one after another, and the
//! panels of a weight too, one stream the kernel prefetches ahead of.
//!
//! Arithmetic, per activation row and weight row: for each group of 32, the exact integer `Σ q·qa` (less the
//! offset times `Σ qa`; Q6_K per half of 16, each with its scale), converted to f32 and accumulated by one fused
//! multiply-add with `s·da`, then the offset types' `o·sa` by another: group after group, one accumulator per
//! output. The operations, and so every bit of the result, are those of the prefill panel kernel (`panel.rs`)
//! and do not depend on how many rows of activations a run has: a sequence decoded alone and decoded with
//! others, or a prompt read in one chunk or several, multiplies its rows identically.

use super::panel::for_each_group;
#[cfg(test)]
use super::row::Q8Row;
use super::row::{quantize_block, QK};
use crate::backend::cpu::parallel::for_chunks;
use crate::dtype::DType;
use crate::quant::{
    blocks, scale_min_k4, BlockQ4K, BlockQ4_0, BlockQ4_1, BlockQ5K, BlockQ5_0, BlockQ5_1, BlockQ6K, BlockQ8_0, F16Le,
};
use std::arch::x86_64::*;

/// Weight rows in a panel.
pub(crate) const NR: usize = 16;
/// Activation rows multiplied at a time (their accumulators in registers).
const MR: usize = 8;
/// Bytes ahead of the unit being read that the kernel prefetches.
const PREFETCH: usize = 4096;
/// Bytes of one group's values unpacked to bytes, for a panel.
const VALUES: usize = QK * NR;

/// Whether `dtype` has a repacked form and this CPU the instructions for it (AVX-512 F, BW and VNNI; off with
/// `WEBTENSOR_CPU_NO_VNNI`, as the other VNNI kernels).
pub(crate) fn available(dtype: DType) -> bool {
    kind(dtype).is_some() && super::panel::available(dtype)
}

/// The repacked types, as the kernel's const parameter.
const Q4_0: u8 = 0;
const Q4_1: u8 = 1;
const Q8_0: u8 = 2;
const Q4_K: u8 = 3;
const Q6_K: u8 = 4;
const Q5_0: u8 = 5;
const Q5_1: u8 = 6;
const Q5_K: u8 = 7;

/// `$e` with `$k` the const kind matching the run-time kind `$kind` (one monomorphization per repacked type).
macro_rules! by_kind {
    ($kind:expr, $k:ident => $e:expr) => {
        by_kind!(@arms $kind, $k, $e, [Q4_0 Q4_1 Q8_0 Q4_K Q5_0 Q5_1 Q5_K], Q6_K)
    };
    (@arms $kind:expr, $k:ident, $e:expr, [$($c:ident)*], $last:ident) => {
        match $kind {
            $($c => {
                const $k: u8 = $c;
                $e
            })*
            _ => {
                const $k: u8 = $last;
                $e
            }
        }
    };
}

/// The kinds with a fifth bit a value.
const fn fifth_bit(kind: u8) -> bool {
    matches!(kind, Q5_0 | Q5_1 | Q5_K)
}

/// The kinds with an offset `o` (Q4_1 and Q5_1's `m`, the K types' `dmin·m`).
const fn has_offset(kind: u8) -> bool {
    matches!(kind, Q4_1 | Q5_1 | Q4_K | Q5_K)
}

fn kind(dtype: DType) -> Option<u8> {
    match dtype {
        DType::Q4_0 => Some(Q4_0),
        DType::Q4_1 => Some(Q4_1),
        DType::Q8_0 => Some(Q8_0),
        DType::Q4_K => Some(Q4_K),
        DType::Q6_K => Some(Q6_K),
        DType::Q5_0 => Some(Q5_0),
        DType::Q5_1 => Some(Q5_1),
        DType::Q5_K => Some(Q5_K),
        _ => None,
    }
}

fn dtype_of(kind: u8) -> DType {
    match kind {
        Q4_0 => DType::Q4_0,
        Q4_1 => DType::Q4_1,
        Q8_0 => DType::Q8_0,
        Q4_K => DType::Q4_K,
        Q5_0 => DType::Q5_0,
        Q5_1 => DType::Q5_1,
        Q5_K => DType::Q5_K,
        _ => DType::Q6_K,
    }
}

/// A kind's repacked unit (a block of 32, or a K super-block of 256) for a panel.
#[derive(Clone, Copy)]
struct Form {
    /// Groups of 32 in a unit.
    groups: usize,
    /// Bytes of one group's values.
    group_bytes: usize,
    /// Bytes of the unit's scales, after its groups.
    scale_bytes: usize,
    /// `value = s·(q − offset) − o` with `q` the stored unsigned byte.
    offset: i32,
    /// Two scales a group, one for each half of 16 values (Q6_K).
    halves: bool,
}

impl Form {
    const fn of(kind: u8) -> Form {
        let (groups, group_bytes, scale_bytes, offset, halves) = match kind {
            Q4_0 => (1, 16 * NR, 2 * NR, 8, false),
            Q4_1 => (1, 16 * NR, 4 * NR, 0, false),
            Q8_0 => (1, VALUES, 2 * NR, 128, false),
            // d, dmin (f16), then 8 scales and 8 mins (bytes) per row
            Q4_K => (8, 16 * NR, 4 * NR + 16 * NR, 0, false),
            // 4-bit low parts, then the fifth bits; as Q4_0, Q4_1 and Q4_K
            Q5_0 => (1, 20 * NR, 2 * NR, 16, false),
            Q5_1 => (1, 20 * NR, 4 * NR, 0, false),
            Q5_K => (8, 20 * NR, 4 * NR + 16 * NR, 0, false),
            // 4-bit low parts, then 2-bit high parts; d (f16), then 16 scales (i8) per row
            _ => (8, 24 * NR, 2 * NR + 16 * NR, 32, true),
        };
        Form { groups, group_bytes, scale_bytes, offset, halves }
    }

    const fn unit_bytes(&self) -> usize {
        self.groups * self.group_bytes + self.scale_bytes
    }
}

/// The activations of a matmul rounded to 8-bit blocks as `Q8Row::quantize` rounds them, in groups of [`MR`] rows laid
/// out as the kernel reads them: per block, the group's rows' 32 values one after another, then their scales,
/// scaled sums, and integer sums (whole and per half). A last group of fewer rows has zeros after them.
pub(crate) struct Acts {
    groups: Vec<Group>,
}

#[derive(Default)]
struct Group {
    rows: usize,
    /// `[block][row][32]`
    q: Vec<i8>,
    /// `[block][d of MR rows, s of MR rows]`
    ds: Vec<f32>,
    /// `[block][row][whole, first half, second half]`
    sum: Vec<i32>,
}

impl Acts {
    /// `a [m, k]` (row-major), on the CPU's threads.
    pub(crate) fn quantize(a: &[f32], k: usize) -> Acts {
        let (m, nb) = (a.len() / k.max(1), k / QK);
        let mut groups: Vec<Group> = (0..m.div_ceil(MR)).map(|_| Group::default()).collect();
        for_chunks(&mut groups, 1, |gi, group| {
            let g = &mut group[0];
            g.rows = MR.min(m - gi * MR);
            (g.q, g.ds, g.sum) = (vec![0; nb * MR * QK], vec![0.0; nb * 2 * MR], vec![0; nb * MR * 3]);
            for i in 0..g.rows {
                let r = gi * MR + i;
                for (b, xs) in a[r * k..(r + 1) * k].chunks_exact(QK).enumerate() {
                    // as Q8Row::quantize rounds each block
                    let (d, sums) = quantize_block(xs, &mut g.q[(b * MR + i) * QK..(b * MR + i + 1) * QK]);
                    (g.ds[b * 2 * MR + i], g.ds[b * 2 * MR + MR + i]) = (d, d * sums[0] as f32);
                    g.sum[(b * MR + i) * 3..(b * MR + i) * 3 + 3].copy_from_slice(&sums);
                }
            }
        });
        Acts { groups }
    }
}

/// A weight `[rows, k]` of a repacked type, repacked (see the module docs).
pub(crate) struct Repacked {
    kind: u8,
    k: usize,
    rows: usize,
    data: Vec<u8>,
}

impl Repacked {
    /// Repacks `bytes` (`rows` rows of `k` values of `dtype`, a type [`available`] takes), on the CPU's threads,
    /// in slabs of about 32 MiB: after each, `done` is given the slab's byte range of the original (which the
    /// caller may give back), so that the original and the copy of a large weight are not both held at once.
    pub(crate) fn new(
        dtype: DType,
        bytes: &[u8],
        rows: usize,
        k: usize,
        done: &dyn Fn(std::ops::Range<usize>),
    ) -> Repacked {
        let kind = kind(dtype).expect("a repacked type");
        let form = Form::of(kind);
        let units = k / (QK * form.groups);
        let (pb, row_bytes) = (units * form.unit_bytes(), k / dtype.block_size() * dtype.block_bytes());
        let panels = rows.div_ceil(NR);
        let mut data = vec![0u8; panels * pb];
        let slab = (32 << 20) / (NR * row_bytes).max(1) + 1;
        for (si, slab_data) in data.chunks_mut(slab * pb).enumerate() {
            for_chunks(slab_data, pb.max(1), |i, panel| {
                let p = si * slab + i;
                for r in 0..NR.min(rows - p * NR) {
                    let row = &bytes[(p * NR + r) * row_bytes..(p * NR + r + 1) * row_bytes];
                    repack_row(kind, row, r, panel);
                }
            });
            let first = si * slab * NR;
            done(first * row_bytes..rows.min(first + slab * NR) * row_bytes);
        }
        Repacked { kind, k, rows, data }
    }

    /// Bytes held.
    pub(crate) fn bytes(&self) -> usize {
        self.data.len()
    }

    /// Rows of the weight.
    pub(crate) fn rows(&self) -> usize {
        self.rows
    }

    /// Values per row.
    pub(crate) fn k(&self) -> usize {
        self.k
    }

    /// Row `r` of the weight decoded into `out` (`k` values) from the copy, each value `s·(q − offset) − o` as the
    /// kernel's scales form it: the values `crate::quant::decode` gives for the original row, bit for bit, so that
    /// `get_rows` of a resident whose original pages were given back reads this copy instead of paging them in.
    ///
    /// # Panics
    /// When `r` is not a row of the weight or `out` is not `k` long (a caller's bug).
    pub(crate) fn row(&self, r: usize, out: &mut [f32]) {
        assert!(r < self.rows && out.len() == self.k, "row {r} of {} rows of {} values", self.rows, self.k);
        let f: unsafe fn(&[u8], usize, usize, &mut [f32]) = by_kind!(self.kind, K => decode_row::<K>);
        // SAFETY: a `Repacked` exists only where the CPU has the features (`available`); the data holds every
        // panel's units
        unsafe { f(&self.data, self.k, r, out) }
    }

    /// `c[i][j] = Σ acts[i] · w[panel·16 + lanes.start + j]` for every activation row and the panel's lanes in
    /// `lanes`, written at `c + i·ldc + j`.
    ///
    /// # Safety
    /// The CPU has AVX-512 F, BW and VNNI ([`available`]); the activations have this weight's `k` values a row;
    /// `panel` is a panel of the weight and `lanes` within 0..16; every `c + i·ldc + j` (i < the activations'
    /// rows, j < `lanes.len()`) is valid for writes and no other thread writes it.
    pub(crate) unsafe fn multiply(
        &self,
        panel: usize,
        acts: &Acts,
        c: *mut f32,
        ldc: usize,
        lanes: std::ops::Range<usize>,
    ) {
        let form = Form::of(self.kind);
        let (nb, units) = (self.k / QK, self.k / (QK * form.groups));
        let data = &self.data[panel * units * form.unit_bytes()..(panel + 1) * units * form.unit_bytes()];
        // several groups of rows (prefill): the panel's values unpacked to bytes once for all of them
        let unpacked = (self.kind != Q8_0 && acts.groups.len() > 1).then(|| {
            let mut bytes = vec![0u8; nb * VALUES];
            // SAFETY: the caller's features; `data` holds `units` units, `bytes` nb groups of VALUES bytes
            unsafe { unpack_fn(self.kind)(data.as_ptr(), units, &mut bytes) };
            bytes
        });
        // the weights stream from memory for the first group (prefetched); later groups find them in the cache
        let mut prefetch = true;
        for (g, group) in acts.groups.iter().enumerate() {
            debug_assert!(
                group.q.len() == nb * MR * QK && group.ds.len() == nb * 2 * MR && group.sum.len() == nb * MR * 3
            );
            let mut out = [[0f32; NR]; MR];
            let values = unpacked.as_ref().map(|u| u.as_ptr());
            // SAFETY: the caller's features and row lengths; the panel's data holds `units` units, and `values` nb
            // groups of VALUES bytes
            unsafe { tile_fn(self.kind, group.rows)(data.as_ptr(), values, units, group, &mut out, prefetch) };
            prefetch = false;
            for (i, o) in out.iter().enumerate().take(group.rows) {
                // SAFETY: the caller's: row g·MR + i < the activations' rows, lanes.len() columns
                unsafe {
                    let dst = c.add((g * MR + i) * ldc);
                    std::ptr::copy_nonoverlapping(o[lanes.clone()].as_ptr(), dst, lanes.len());
                }
            }
        }
    }
}

/// A weight row's blocks (`row`) into lane `r` of its panel's units.
fn repack_row(kind: u8, row: &[u8], r: usize, panel: &mut [u8]) {
    let form = Form::of(kind);
    let ub = form.unit_bytes();
    let dtype = dtype_of(kind);
    let mut vals = [0u8; QK];
    let mut gi = 0;
    for_each_group(dtype, row, &mut vals, |vals, _, _| {
        let (u, g) = (gi / form.groups, gi % form.groups);
        let at = u * ub + g * form.group_bytes;
        put_values(kind, &mut panel[at..at + form.group_bytes], r, vals, form.offset as u8);
        gi += 1;
    });
    for (u, unit) in panel.chunks_exact_mut(ub).enumerate() {
        put_scales(kind, &mut unit[form.groups * form.group_bytes..], r, row, u);
    }
}

/// Row `r`'s values of one group (`vals` as `panel::for_each_group` gives them: two's complement for the signed
/// types) into the panel's group `dst`, stored unsigned (`+ offset`).
fn put_values(kind: u8, dst: &mut [u8], r: usize, vals: &[u8; QK], offset: u8) {
    let v: [u8; QK] = std::array::from_fn(|i| vals[i].wrapping_add(offset));
    if kind == Q8_0 {
        for (c, quad) in v.chunks_exact(4).enumerate() {
            dst[c * 4 * NR + 4 * r..c * 4 * NR + 4 * r + 4].copy_from_slice(quad);
        }
        return;
    }
    // chunk c, lane r: the low 4 bits of values 4c.. (low nibbles) and 16 + 4c.. (high nibbles)
    for c in 0..4 {
        for t in 0..4 {
            let i = 4 * c + t;
            dst[c * 4 * NR + 4 * r + t] = (v[i] & 0x0f) | ((v[i + 16] & 0x0f) << 4);
        }
    }
    if fifth_bit(kind) {
        // after them, one chunk of the fifth bits: byte t of lane r holds those of values 4c + t at bit c
        for t in 0..4 {
            let bits = (0..8).fold(0u8, |acc, c| acc | (((v[4 * c + t] >> 4) & 1) << c));
            dst[4 * 4 * NR + 4 * r + t] = bits;
        }
    }
    if kind == Q6_K {
        // after them, two chunks of the high 2 bits: byte t of lane r holds those of values 4c + t (c < 4) at bits
        // 2c (the first chunk: values 0..16; the second: 16..32)
        for h in 0..2 {
            for t in 0..4 {
                let bits = (0..4).fold(0u8, |acc, c| acc | (((v[16 * h + 4 * c + t] >> 4) & 3) << (2 * c)));
                dst[(4 + h) * 4 * NR + 4 * r + t] = bits;
            }
        }
    }
}

/// Row `r`'s scales of unit `u` (of the row's bytes `row`) into the unit's scales `dst`.
fn put_scales(kind: u8, dst: &mut [u8], r: usize, row: &[u8], u: usize) {
    let f16 =
        |dst: &mut [u8], i: usize, h: F16Le| dst[i * 2 * NR + 2 * r..i * 2 * NR + 2 * r + 2].copy_from_slice(&h.0);
    // the K types' eight 6-bit scales and mins, as bytes
    let mut k_scales = |d: F16Le, dmin: F16Le, scales: &[u8; 12]| {
        f16(dst, 0, d);
        f16(dst, 1, dmin);
        for j in 0..8 {
            let (sc, m) = scale_min_k4(scales, j);
            (dst[4 * NR + j * NR + r], dst[12 * NR + j * NR + r]) = (sc, m);
        }
    };
    match kind {
        Q4_0 => f16(dst, 0, blocks::<BlockQ4_0>(row)[u].d),
        Q5_0 => f16(dst, 0, blocks::<BlockQ5_0>(row)[u].d),
        Q8_0 => f16(dst, 0, blocks::<BlockQ8_0>(row)[u].d),
        Q4_1 | Q5_1 => {
            let (d, m) = match kind {
                Q4_1 => (blocks::<BlockQ4_1>(row)[u].d, blocks::<BlockQ4_1>(row)[u].m),
                _ => (blocks::<BlockQ5_1>(row)[u].d, blocks::<BlockQ5_1>(row)[u].m),
            };
            f16(dst, 0, d);
            f16(dst, 1, m);
        }
        Q4_K => {
            let b = &blocks::<BlockQ4K>(row)[u];
            k_scales(b.d, b.dmin, &b.scales);
        }
        Q5_K => {
            let b = &blocks::<BlockQ5K>(row)[u];
            k_scales(b.d, b.dmin, &b.scales);
        }
        _ => {
            let b = &blocks::<BlockQ6K>(row)[u];
            f16(dst, 0, b.d);
            for j in 0..16 {
                dst[2 * NR + j * NR + r] = b.scales[j];
            }
        }
    }
}

/// Group `g` of a unit at `unit`, its values as the eight 64-byte chunks `vpdpbusd` multiplies.
///
/// # Safety
/// The CPU has the features; `unit` holds a whole unit of the kind.
#[inline(always)]
unsafe fn group_values<const KIND: u8>(unit: *const u8, g: usize) -> [__m512i; 8] {
    let form = Form::of(KIND);
    let low = _mm512_set1_epi8(0x0f);
    let mut q = [_mm512_setzero_si512(); 8];
    // SAFETY: the caller's; the group's bytes lie in the unit
    unsafe {
        let p = unit.add(g * form.group_bytes);
        if KIND == Q8_0 {
            for (c, q) in q.iter_mut().enumerate() {
                *q = _mm512_loadu_si512(p.add(64 * c).cast());
            }
            return q;
        }
        for c in 0..4 {
            let x = _mm512_loadu_si512(p.add(64 * c).cast());
            q[c] = _mm512_and_si512(x, low);
            q[c + 4] = _mm512_and_si512(_mm512_srli_epi16::<4>(x), low);
        }
        if fifth_bit(KIND) {
            // bit c of each byte to bit 4 (16-bit shifts: the mask drops what crosses a byte)
            let (x, bit) = (_mm512_loadu_si512(p.add(64 * 4).cast()), _mm512_set1_epi8(0x10));
            let parts = [
                _mm512_slli_epi16::<4>(x),
                _mm512_slli_epi16::<3>(x),
                _mm512_slli_epi16::<2>(x),
                _mm512_slli_epi16::<1>(x),
                x,
                _mm512_srli_epi16::<1>(x),
                _mm512_srli_epi16::<2>(x),
                _mm512_srli_epi16::<3>(x),
            ];
            for (q, part) in q.iter_mut().zip(parts) {
                *q = _mm512_or_si512(*q, _mm512_and_si512(part, bit));
            }
        }
        if KIND == Q6_K {
            // bits 2c..2c + 2 of each byte to bits 4..6 (16-bit shifts: the mask drops what crosses a byte)
            let top = _mm512_set1_epi8(0x30);
            for h in 0..2 {
                let x = _mm512_loadu_si512(p.add(64 * (4 + h)).cast());
                let parts = [_mm512_slli_epi16::<4>(x), _mm512_slli_epi16::<2>(x), x, _mm512_srli_epi16::<2>(x)];
                for (c, part) in parts.into_iter().enumerate() {
                    q[4 * h + c] = _mm512_or_si512(q[4 * h + c], _mm512_and_si512(part, top));
                }
            }
        }
    }
    q
}

type UnpackFn = unsafe fn(*const u8, usize, &mut [u8]);

fn unpack_fn(kind: u8) -> UnpackFn {
    by_kind!(kind, K => unpack::<K>)
}

/// A panel's `units` units at `data` unpacked into `out`: per group of 32, the eight chunks [`group_values`] gives.
///
/// # Safety
/// The CPU has the features; `data` holds `units` units of the kind, `out` [`VALUES`] bytes a group.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
unsafe fn unpack<const KIND: u8>(data: *const u8, units: usize, out: &mut [u8]) {
    let form = Form::of(KIND);
    for (i, dst) in out.chunks_exact_mut(VALUES).enumerate().take(units * form.groups) {
        // SAFETY: the caller's; dst holds 8 chunks of 64 bytes
        unsafe {
            let q = group_values::<KIND>(data.add(i / form.groups * form.unit_bytes()), i % form.groups);
            for (c, q) in q.iter().enumerate() {
                _mm512_storeu_si512(dst.as_mut_ptr().add(64 * c).cast(), *q);
            }
        }
    }
}

/// Row `r` (lane `r % 16` of panel `r / 16`) of a weight of `k` values a row repacked into `data`, decoded
/// into `out`.
///
/// # Safety
/// The CPU has the features; `data` holds the panel's units.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
unsafe fn decode_row<const KIND: u8>(data: &[u8], k: usize, r: usize, out: &mut [f32]) {
    let form = Form::of(KIND);
    let (ub, units, lane) = (form.unit_bytes(), k / (QK * form.groups), r % NR);
    let panel = &data[r / NR * units * ub..(r / NR + 1) * units * ub];
    let lanes = |v: __m512| {
        let mut x = [0f32; NR];
        // SAFETY: x holds 16 floats
        unsafe { _mm512_storeu_ps(x.as_mut_ptr(), v) };
        x[lane]
    };
    for u in 0..units {
        // SAFETY: unit u lies in the panel; its scales follow its groups
        unsafe {
            let unit = panel.as_ptr().add(u * ub);
            let scales = unit.add(form.groups * form.group_bytes);
            let d = _mm512_cvtph_ps(_mm256_loadu_si256(scales.cast()));
            let second = if has_offset(KIND) {
                _mm512_cvtph_ps(_mm256_loadu_si256(scales.add(2 * NR).cast()))
            } else {
                _mm512_setzero_ps()
            };
            for g in 0..form.groups {
                let [s, s_hi, o] = group_scales::<KIND>(scales, g, d, second);
                let (s, s_hi, o) = (lanes(s), lanes(s_hi), lanes(o));
                let dst = &mut out[(u * form.groups + g) * QK..(u * form.groups + g + 1) * QK];
                let mut bytes = [0u8; 64];
                for (c, q) in group_values::<KIND>(unit, g).iter().enumerate() {
                    _mm512_storeu_si512(bytes.as_mut_ptr().cast(), *q);
                    // chunk c holds the group's values 4c .. 4c + 4 of each of the 16 rows
                    for (i, &q) in bytes[4 * lane..4 * lane + 4].iter().enumerate() {
                        let j = 4 * c + i;
                        let v = (if j < QK / 2 { s } else { s_hi }) * (q as i32 - form.offset) as f32;
                        dst[j] = if has_offset(KIND) { v - o } else { v };
                    }
                }
            }
        }
    }
}

type TileFn = unsafe fn(*const u8, Option<*const u8>, usize, &Group, &mut [[f32; NR]; MR], bool);

/// The kernel of `rows` (1 to [`MR`]) activation rows for type `kind`.
fn tile_fn(kind: u8, rows: usize) -> TileFn {
    macro_rules! by_rows {
        ($k:expr) => {
            match rows {
                1 => tile::<1, { $k }>,
                2 => tile::<2, { $k }>,
                3 => tile::<3, { $k }>,
                4 => tile::<4, { $k }>,
                5 => tile::<5, { $k }>,
                6 => tile::<6, { $k }>,
                7 => tile::<7, { $k }>,
                _ => tile::<8, { $k }>,
            }
        };
    }
    by_kind!(kind, K => by_rows!(K))
}

/// Group `g`'s scales of a unit: `(s, s of the second half, o)` for 16 rows (`d`: the unit's f16 scale, `second`:
/// Q4_1's `m` or Q4_K's `dmin`), as `panel.rs` forms them (`d·sc`, `dmin·m`, `−m`: exact products of f16 and
/// small integers).
///
/// # Safety
/// The CPU has the features; `scales` points at a whole unit's scales.
#[inline(always)]
unsafe fn group_scales<const KIND: u8>(scales: *const u8, g: usize, d: __m512, second: __m512) -> [__m512; 3] {
    // SAFETY: the caller's; each load lies in the unit's scales
    unsafe {
        let bytes = |at: usize, signed: bool| {
            let x = _mm_loadu_si128(scales.add(at).cast());
            _mm512_cvtepi32_ps(if signed { _mm512_cvtepi8_epi32(x) } else { _mm512_cvtepu8_epi32(x) })
        };
        match KIND {
            Q4_1 | Q5_1 => [d, d, _mm512_sub_ps(_mm512_setzero_ps(), second)],
            Q4_K | Q5_K => {
                let s = _mm512_mul_ps(d, bytes(4 * NR + g * NR, false));
                [s, s, _mm512_mul_ps(second, bytes(12 * NR + g * NR, false))]
            }
            Q6_K => {
                let s = |h: usize| _mm512_mul_ps(d, bytes(2 * NR + (2 * g + h) * NR, true));
                [s(0), s(1), _mm512_setzero_ps()]
            }
            _ => [d, d, _mm512_setzero_ps()],
        }
    }
}

/// The first `R` rows of a group of activations times a panel (`units` units at `w`) into `out[..R]`,
/// prefetching the weights ahead where `prefetch`; the values read from `values` where given (unpacked to bytes,
/// [`unpack`]).
///
/// # Safety
/// The CPU has the features; `w` holds `units` units of the kind, `values` (if any) [`VALUES`] bytes for each of
/// their groups; the activations have as many groups.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
unsafe fn tile<const R: usize, const KIND: u8>(
    w: *const u8,
    values: Option<*const u8>,
    units: usize,
    acts: &Group,
    out: &mut [[f32; NR]; MR],
    prefetch: bool,
) {
    let form = Form::of(KIND);
    let (ub, has_o) = (form.unit_bytes(), has_offset(KIND));
    let mut acc = [_mm512_setzero_ps(); R];
    let (aq, ads, asum) = (acts.q.as_ptr(), acts.ds.as_ptr(), acts.sum.as_ptr());
    for u in 0..units {
        // SAFETY (the loads): unit u lies within the units·ub bytes, each group's values within `values`; the
        // activations hold every group of MR rows
        unsafe {
            let unit = w.add(u * ub);
            if prefetch {
                // the stream ahead (a panel's units, then the next panel's, lie one after another)
                for line in (0..ub).step_by(64) {
                    _mm_prefetch::<_MM_HINT_T0>(unit.wrapping_add(PREFETCH + line).cast());
                }
            }
            let scales = unit.add(form.groups * form.group_bytes);
            let d = _mm512_cvtph_ps(_mm256_loadu_si256(scales.cast()));
            let second = if has_o {
                _mm512_cvtph_ps(_mm256_loadu_si256(scales.add(2 * NR).cast()))
            } else {
                _mm512_setzero_ps()
            };
            for g in 0..form.groups {
                let b = u * form.groups + g;
                let q = match values {
                    Some(v) => std::array::from_fn(|c| _mm512_loadu_si512(v.add(b * VALUES + 64 * c).cast())),
                    None => group_values::<KIND>(unit, g),
                };
                let [s, s_hi, o] = group_scales::<KIND>(scales, g, d, second);
                let (qa, ds, sums) = (aq.add(b * MR * QK), ads.add(b * 2 * MR), asum.add(b * MR * 3));
                // each row's integer sums in two chains (the halves, or where the rows are few so that latencies
                // overlap), one chunk of values at a time for every row (independent instructions side by side)
                let split = form.halves || R < 4;
                let mut isum = [[_mm512_setzero_si512(); 2]; R];
                for (i, v) in isum.iter_mut().enumerate() {
                    if form.halves {
                        let off = |h: usize| _mm512_set1_epi32(-form.offset * *sums.add(3 * i + 1 + h));
                        *v = [off(0), off(1)];
                    } else if form.offset != 0 {
                        v[0] = _mm512_set1_epi32(-form.offset * *sums.add(3 * i));
                    }
                }
                for (c, q) in q.iter().enumerate() {
                    let chain = if form.halves {
                        c / 4
                    } else if split {
                        c % 2
                    } else {
                        0
                    };
                    for (i, v) in isum.iter_mut().enumerate() {
                        let x = _mm512_set1_epi32(std::ptr::read_unaligned(qa.add(i * QK + 4 * c).cast::<i32>()));
                        v[chain] = _mm512_dpbusd_epi32(v[chain], *q, x);
                    }
                }
                for (i, acc) in acc.iter_mut().enumerate() {
                    let da = _mm512_set1_ps(*ds.add(i));
                    if form.halves {
                        *acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[i][0]), _mm512_mul_ps(s, da), *acc);
                        *acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[i][1]), _mm512_mul_ps(s_hi, da), *acc);
                    } else {
                        // integer additions: exact, so the split changes no bit
                        let v = if split { _mm512_add_epi32(isum[i][0], isum[i][1]) } else { isum[i][0] };
                        *acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(v), _mm512_mul_ps(s, da), *acc);
                    }
                    if has_o {
                        *acc = _mm512_fnmadd_ps(o, _mm512_set1_ps(*ds.add(MR + i)), *acc);
                    }
                }
            }
        }
    }
    for (o, a) in out.iter_mut().zip(acc) {
        // SAFETY: o holds 16 floats
        unsafe { _mm512_storeu_ps(o.as_mut_ptr(), a) };
    }
}

#[cfg(test)]
mod tests {
    use super::super::panel::{Acts, Panel};
    use super::Acts as RepackedActs;
    use super::*;
    use crate::quant::decode;

    const TYPES: [DType; 8] =
        [DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q8_0, DType::Q4_K, DType::Q5_K, DType::Q6_K];

    /// A weight of 37 rows of 512 values of `dtype` (seeded by `seed` and the row's bytes), its row bytes and its
    /// repacked copy; `None` (said as skipped) where this CPU has no repacked kernels.
    fn weight(dtype: DType, seed: u64) -> Option<(usize, usize, usize, Vec<u8>, Repacked)> {
        if !available(dtype) {
            println!("SKIPPED: this CPU lacks AVX-512 VNNI (or WEBTENSOR_CPU_NO_VNNI is set)");
            return None;
        }
        let (k, rows) = (512, 37);
        let bb = k / dtype.block_size() * dtype.block_bytes();
        let w = super::super::tests::blocks(dtype, k * rows, seed + bb as u64);
        let rep = Repacked::new(dtype, &w, rows, k, &|_| {});
        Some((k, rows, bb, w, rep))
    }

    /// Every row decoded from the copy (`Repacked::row`, what `get_rows` reads) has the original's values.
    #[test]
    fn rows_decoded_from_the_copy_equal_the_originals_bitwise() {
        for dtype in TYPES {
            let Some((k, rows, _, w, rep)) = weight(dtype, 29) else { return };
            let mut want = vec![0f32; k * rows];
            decode(dtype, &w, &mut want);
            for r in 0..rows {
                let mut got = vec![f32::NAN; k];
                rep.row(r, &mut got);
                for (j, (g, x)) in got.iter().zip(&want[r * k..(r + 1) * k]).enumerate() {
                    assert_eq!(g.to_bits(), x.to_bits(), "{dtype}: row {r} value {j}: {g} vs {x}");
                }
            }
        }
    }

    /// The repacked kernel gives every bit the prefill panel kernel gives, for 1 to 11 activation rows, a weight
    /// of rows not a multiple of 16 and lanes from a panel's middle; and agrees with decoding the weights.
    #[test]
    fn repacked_equals_the_panel_kernel_bitwise() {
        for dtype in TYPES {
            let Some((k, rows, bb, w, rep)) = weight(dtype, 11) else { return };
            assert_eq!((rep.rows(), rep.k()), (rows, k));
            let mut wf = vec![0f32; k * rows];
            decode(dtype, &w, &mut wf);
            for m in [1, 2, 3, 7, 8, 11] {
                let a: Vec<f32> = (0..m * k).map(|i| ((i * 37 + 5 * m) % 101) as f32 / 50.0 - 1.0).collect();
                let rows_q: Vec<Q8Row> = a.chunks_exact(k).map(Q8Row::quantize).collect();
                let acts = RepackedActs::quantize(&a, k);
                for p in 0..rows.div_ceil(NR) {
                    let lanes = 0..NR.min(rows - p * NR);
                    let (mut got, mut want) = (vec![f32::NAN; m * NR], vec![f32::NAN; m * NR]);
                    // SAFETY: available() checked; got is [m, 16]
                    unsafe { rep.multiply(p, &acts, got.as_mut_ptr(), NR, lanes.clone()) };
                    let mut panel = Panel::new(dtype, k);
                    panel.fill(lanes.clone().map(|j| &w[(p * NR + j) * bb..(p * NR + j + 1) * bb]));
                    // SAFETY: as above
                    unsafe { panel.multiply(&Acts::quantize(dtype, &a, k), want.as_mut_ptr(), NR, lanes.len()) };
                    for r in 0..m {
                        for j in lanes.clone() {
                            let (g, x) = (got[r * NR + j], want[r * NR + j]);
                            assert_eq!(g.to_bits(), x.to_bits(), "{dtype} m {m} row {r} col {}", p * NR + j);
                            let wr = &wf[(p * NR + j) * k..(p * NR + j + 1) * k];
                            let q = &rows_q[r];
                            let exact: f64 = (0..k).map(|i| wr[i] as f64 * q.d[i / QK] as f64 * q.qs[i] as f64).sum();
                            let scale: f64 = (0..k).map(|i| (wr[i] as f64 * a[r * k + i] as f64).abs()).sum();
                            assert!((g as f64 - exact).abs() <= 1e-5 * scale, "{dtype}: {g} vs {exact}");
                        }
                    }
                    // a panel's middle lanes land at the first column
                    if lanes.len() > 5 {
                        let mut mid = vec![f32::NAN; m * 3];
                        // SAFETY: as above; mid is [m, 3]
                        unsafe { rep.multiply(p, &acts, mid.as_mut_ptr(), 3, 2..5) };
                        for r in 0..m {
                            assert_eq!(&mid[r * 3..r * 3 + 3], &got[r * NR + 2..r * NR + 5]);
                        }
                    }
                }
            }
        }
    }
}
