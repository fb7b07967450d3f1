//! How the GPU's elementwise kernels read their operands: four outputs an invocation where the output's last axis
//! is a multiple of 4 (each operand laid out as the output, 4-aligned along a contiguous last axis, or broadcast
//! along it), one an invocation otherwise. On every device against the f64 reference, outputs poisoned with NaN;
//! views are interior windows of inputs bordered with NaN, so a read outside a view turns a result NaN.

mod common;

use common::reference::{self as r, Arr};
use common::{inp, inp_given, inp_raw, quant_fixture, run_suite, Case, Input};
use webtensor::DType::{self, F16, F32, Q4_K};
use webtensor::{GluOp, Graph, Result, Tensor};

const VEC4: &str = "elementwise vec4";

/// An input [rows + 2, cols + 8] whose interior rows 1..=rows, columns c0..c0 + cols hold values and the rest NaN.
fn bordered(dtype: DType, rows: usize, cols: usize, c0: usize, seed: u64) -> Input {
    let w = cols + 8;
    let inside = |i: usize| (1..=rows).contains(&(i / w)) && (c0..c0 + cols).contains(&(i % w));
    let v = (0..(rows + 2) * w).map(|i| if inside(i) { r::u(i, seed) } else { f64::NAN }).collect();
    inp_given(dtype, &[rows + 2, w], v)
}

/// The interior of [`bordered`] as a view.
fn interior(g: &mut Graph, x: Tensor, rows: usize, cols: usize, c0: usize) -> Result<Tensor> {
    let x = g.slice(x, 0, 1, rows + 1)?;
    g.slice(x, 1, c0, c0 + cols)
}

/// The interior of [`bordered`]'s values.
fn interior_ref(x: &Arr, rows: usize, cols: usize, c0: usize) -> Arr {
    x.slice(0, 1, rows + 1).slice(1, c0, c0 + cols)
}

/// Binary ops over operand shapes that read each way: laid out as the output, a row vector (4-aligned along the
/// last axis), a column (broadcast along it), a scalar, a middle broadcast, a single quad; and the same input
/// read two ways in one kernel (`x * x[:, 3:4]`: one declaration, read as vec4 and as scalars, the column's
/// elements at the fourth place of a vec4).
fn binary_cases(dtype: DType, cases: &mut Vec<Case>) {
    let pairs: &[(&str, &[usize], &[usize])] = &[
        ("flat", &[8, 36], &[8, 36]),
        ("row", &[8, 36], &[36]),
        ("column", &[8, 36], &[8, 1]),
        ("scalar", &[8, 36], &[1]),
        ("middle-broadcast", &[2, 2, 3, 8], &[2, 1, 3, 8]),
        ("column-first", &[5, 1], &[5, 12]),
        ("one-quad", &[4], &[4]),
    ];
    for &(name, a, b) in pairs {
        cases.push(
            Case::new(
                format!("{name}/{dtype}/{a:?}-{b:?}"),
                vec![inp(dtype, a, 1), inp(dtype, b, 2)],
                |g, x| g.sub(x[0], x[1]),
                |x| r::binary(&x[0], &x[1], |a, b| a - b),
            )
            .expect_kernel(VEC4),
        );
    }
    cases.push(
        Case::new(
            format!("same-input-two-widths/{dtype}"),
            vec![inp(dtype, &[8, 36], 1)],
            |g, x| {
                let col = g.slice(x[0], 1, 3, 4)?;
                g.mul(x[0], col)
            },
            |x| r::binary(&x[0], &x[0].slice(1, 3, 4), |a, b| a * b),
        )
        .expect_kernel(VEC4),
    );
    // memory of 9 elements (no multiple of 4) read as vec4 and, past the last whole vec4, as a scalar, in both
    // orders: the last element must be read (a vec4 declaration holds only the first 8)
    for (name, first) in [("vec4-then-tail", true), ("tail-then-vec4", false)] {
        cases.push(
            Case::new(
                format!("same-input-{name}/{dtype}/[9]"),
                vec![inp(dtype, &[9], 1)],
                move |g, x| {
                    let (head, tail) = (g.slice(x[0], 0, 0, 8)?, g.slice(x[0], 0, 8, 9)?);
                    if first {
                        g.sub(head, tail)
                    } else {
                        g.sub(tail, head)
                    }
                },
                move |x| {
                    let (head, tail) = (x[0].slice(0, 0, 8), x[0].slice(0, 8, 9));
                    if first {
                        r::binary(&head, &tail, |a, b| a - b)
                    } else {
                        r::binary(&tail, &head, |a, b| a - b)
                    }
                },
            )
            .expect_kernel(VEC4),
        );
    }
    cases.push(
        Case::new(
            format!("mixed-dtypes/{dtype}+f32"),
            vec![inp(dtype, &[8, 36], 1), inp(F32, &[36], 2)],
            |g, x| g.add(x[0], x[1]),
            |x| r::binary(&x[0], &x[1], |a, b| a + b),
        )
        .expect_kernel(VEC4),
    );
}

/// Views of NaN-bordered inputs: 4-aligned (offset and row stride multiples of 4: vec4 loads at each row's
/// coordinates) and not (one output an invocation), a transposed view (strided last axis), and a fused GLU's
/// halves (views at an offset of half the last axis).
fn view_cases(dtype: DType, cases: &mut Vec<Case>) {
    let (rows, cols) = (7, 36);
    for (c0, vec4) in [(4, true), (1, false), (3, false)] {
        let case = Case::new(
            format!("view-at-column-{c0}/{dtype}"),
            vec![bordered(dtype, rows, cols, c0, 1), bordered(dtype, rows, cols, 4, 2), inp(dtype, &[cols], 3)],
            move |g, x| {
                let a = interior(g, x[0], rows, cols, c0)?;
                let b = interior(g, x[1], rows, cols, 4)?;
                let y = g.mul(a, b)?;
                g.add(y, x[2])
            },
            move |x| {
                let ab =
                    r::binary(&interior_ref(&x[0], rows, cols, c0), &interior_ref(&x[1], rows, cols, 4), |a, b| a * b);
                r::binary(&ab, &x[2], |a, b| a + b)
            },
        );
        cases.push(if vec4 { case.expect_kernel(VEC4) } else { case });
    }
    cases.push(Case::new(
        format!("transposed/{dtype}"),
        vec![inp(dtype, &[12, 8], 1), inp(dtype, &[8, 12], 2)],
        |g, x| {
            let t = g.t(x[0])?;
            g.add(t, x[1])
        },
        |x| r::binary(&x[0].transpose(0, 1), &x[1], |a, b| a + b),
    ));
    cases.push(
        Case::new(
            format!("glu-fused-halves/{dtype}/[3,2,72]"),
            vec![inp(dtype, &[3, 2, 72], 1)],
            |g, x| g.glu_fused(GluOp::SwiGlu, x[0]),
            |x| r::binary(&x[0].slice(2, 0, 36), &x[0].slice(2, 36, 72), |a, b| r::silu(a) * b),
        )
        .expect_kernel(VEC4),
    );
    let chain = Case::new(
        format!("fused-chain/{dtype}/[16,64]"),
        vec![inp(dtype, &[16, 64], 1), inp(dtype, &[64], 2)],
        |g, x| {
            let y = g.exp(x[0])?;
            let y = g.mul(y, x[1])?;
            g.scale(y, 0.5)
        },
        |x| r::binary(&x[0], &x[1], |a, b| a.exp() * b * 0.5),
    );
    cases.push(chain.expect_kernel(VEC4));
}

#[test]
fn elementwise_reads_each_operand_as_its_layout_allows() {
    let mut cases = Vec::new();
    for dtype in [F32, F16] {
        binary_cases(dtype, &mut cases);
        view_cases(dtype, &mut cases);
    }
    // blocks dequantized from a window of whole rows (an offset of 2 rows of blocks), to f32 and f16
    let (_, bytes, decoded) = quant_fixture().into_iter().find(|(d, _, _)| *d == Q4_K).expect("a Q4_K fixture");
    for to in [F32, F16] {
        let (bytes, decoded) = (bytes.clone(), decoded.clone());
        let case = Case::new(
            format!("dequantize-rows/q4_k-to-{to}"),
            vec![inp_raw(Q4_K, &[9, 512], bytes, decoded)],
            move |g, x| {
                let rows = g.slice(x[0], 0, 2, 7)?;
                g.cast(rows, to)
            },
            |x| x[0].slice(0, 2, 7),
        );
        cases.push(case.tol(if to == F16 { 1e-6 } else { 0.0 }).expect_kernel(VEC4));
    }
    run_suite("elementwise", &cases);
}
