//! Every graph constructor over random operands (property tests): ranks 0 to 4, dims 0, 1 and odd, every dtype,
//! random axes and parameters. Each returns the shape numpy's (or PyTorch's) rule gives, or an `Error`, never a
//! panic; where the rule says the operands are legal, the constructor must accept them. Graphs that build are
//! compiled and run on every device: empty tensors run no kernel and come back empty, 0-d tensors are scalars,
//! and every device gives the CPU backend's values.

mod common;

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use std::panic::{catch_unwind, AssertUnwindSafe};
use webtensor::{BinaryOp, DType, Data, Error, GluOp, Graph, HostTensor, ReduceOp, Result, Tensor, UnaryOp};

const DTYPES: [DType; 5] = [DType::F32, DType::F16, DType::I32, DType::Q8_0, DType::BF16];

fn dims() -> impl Strategy<Value = Vec<usize>> {
    prop::collection::vec(prop::sample::select(vec![0usize, 1, 2, 3, 4, 5]), 0..=4)
}

/// numpy's broadcast of two shapes, or None.
fn broadcast(a: &[usize], b: &[usize]) -> Option<Vec<usize>> {
    let r = a.len().max(b.len());
    let get = |s: &[usize], i: usize| if i < r - s.len() { 1 } else { s[i - (r - s.len())] };
    (0..r)
        .map(|i| match (get(a, i), get(b, i)) {
            (x, y) if x == y => Some(x),
            (1, y) => Some(y),
            (x, 1) => Some(x),
            _ => None,
        })
        .collect()
}

/// numpy.matmul's result shape, or None; and its K.
fn matmul_shape(a: &[usize], b: &[usize]) -> Option<(Vec<usize>, usize)> {
    if a.is_empty() || b.is_empty() {
        return None;
    }
    let a2 = if a.len() == 1 { vec![1, a[0]] } else { a.to_vec() };
    let b2 = if b.len() == 1 { vec![b[0], 1] } else { b.to_vec() };
    let (m, k) = (a2[a2.len() - 2], a2[a2.len() - 1]);
    let (k2, n) = (b2[b2.len() - 2], b2[b2.len() - 1]);
    if k != k2 {
        return None;
    }
    let mut s = broadcast(&a2[..a2.len() - 2], &b2[..b2.len() - 2])?;
    if a.len() > 1 {
        s.push(m);
    }
    if b.len() > 1 {
        s.push(n);
    }
    Some((s, k))
}

/// Calls `f`, failing the case on a panic; returns its result.
fn no_panic<T>(what: &str, f: impl FnOnce() -> Result<T>) -> std::result::Result<Result<T>, TestCaseError> {
    catch_unwind(AssertUnwindSafe(f)).map_err(|_| TestCaseError::fail(format!("{what}: panicked")))
}

/// Checks a constructor's result: `Ok` with `want` when numpy's rule gives a shape (`legal`), else an `Error`
/// or (when the rule says nothing) any shape.
fn check(
    g: &Graph,
    what: &str,
    r: Result<Tensor>,
    want: Option<Vec<usize>>,
    legal: bool,
) -> std::result::Result<(), TestCaseError> {
    match (r, want) {
        (Ok(t), Some(w)) => prop_assert_eq!(g.shape(t).unwrap(), &w[..], "{}", what),
        (Ok(t), None) => prop_assert!(!legal, "{what}: gave {:?} where numpy refuses", g.shape(t).unwrap()),
        (Err(e), _) => prop_assert!(!legal, "{what}: refused a legal input: {e}"),
    }
    Ok(())
}

fn cfg(cases: u32) -> Config {
    Config { cases, failure_persistence: None, ..Config::default() }
}

#[test]
fn elementwise_and_reductions_follow_numpy() {
    let strategy = (dims(), dims(), 0..DTYPES.len(), 0..DTYPES.len(), any::<u8>(), -6isize..6);
    TestRunner::new(cfg(3000))
        .run(&strategy, |(sa, sb, da, db, pick, axis)| {
            let (da, db) = (DTYPES[da], DTYPES[db]);
            let mut g = Graph::new();
            let (Ok(a), Ok(b)) = (g.input("a", da, &sa), g.input("b", db, &sb)) else {
                // inputs refuse only storage formats whose rows are not whole blocks
                prop_assert!(da.is_storage_format() || db.is_storage_format());
                return Ok(());
            };
            let float = |d: DType| d == DType::F32 || d == DType::F16;
            let u = UnaryOp::ALL[pick as usize % UnaryOp::ALL.len()];
            let r = no_panic("unary", || g.unary(u, a, &[0.5; 3][..pick as usize % 3]))?;
            if let Ok(t) = r {
                prop_assert_eq!(g.shape(t).unwrap(), &sa[..]);
            }
            let op = BinaryOp::ALL[pick as usize % BinaryOp::ALL.len()];
            let r = no_panic("binary", || g.binary(op, a, b))?;
            check(
                &g,
                &format!("{op:?} {sa:?} {sb:?}"),
                r,
                broadcast(&sa, &sb),
                float(da) && da == db && broadcast(&sa, &sb).is_some(),
            )?;
            let want = matmul_shape(&sa, &sb);
            let nonempty_from_empty = want.as_ref().is_some_and(|(s, k)| *k == 0 && s.iter().product::<usize>() > 0);
            let r = no_panic("matmul", || g.matmul(a, b))?;
            let legal = float(da) && float(db) && want.is_some() && !nonempty_from_empty;
            check(&g, &format!("matmul {sa:?} {sb:?}"), r, want.map(|w| w.0), legal)?;
            let rop = ReduceOp::ALL[pick as usize % ReduceOp::ALL.len()];
            // torch.sum(x, -1, keepdim=True): the last axis kept as 1
            let want = (!sa.is_empty()).then(|| [&sa[..sa.len() - 1], &[1][..]].concat());
            let empty_axis = sa.last() == Some(&0) && want.as_ref().is_some_and(|w| w.iter().product::<usize>() > 0);
            let r = no_panic("reduce", || g.reduce(rop, a))?;
            check(&g, &format!("{rop:?} {sa:?}"), r, want.clone(), float(da) && want.is_some() && !empty_axis)?;
            for (name, r) in [
                ("softmax", no_panic("softmax", || g.softmax(a))?),
                ("rms_norm", no_panic("rms_norm", || g.rms_norm(a, 1e-5))?),
                ("layer_norm", no_panic("layer_norm", || g.layer_norm(a, 1e-5))?),
            ] {
                let want = (!sa.is_empty()).then(|| sa.clone());
                check(&g, &format!("{name} {sa:?}"), r, want, float(da) && !sa.is_empty())?;
            }
            let r = no_panic("cast", || g.cast(a, DType::F32))?;
            check(&g, "cast", r, Some(sa.clone()), !da.is_storage_format())?;
            let r = no_panic("glu", || g.glu(GluOp::ALL[pick as usize % GluOp::ALL.len()], a, b))?;
            check(&g, &format!("glu {sa:?} {sb:?}"), r, (sa == sb).then(|| sa.clone()), false)?;
            let r = no_panic("glu_fused", || g.glu_fused(GluOp::ALL[0], a))?;
            let want = sa.last().filter(|&&n| n % 2 == 0).map(|n| [&sa[..sa.len() - 1], &[n / 2][..]].concat());
            check(&g, &format!("glu_fused {sa:?}"), r, want, false)?;
            let _ = axis;
            Ok(())
        })
        .unwrap();
}

#[test]
fn views_joins_and_gathers_follow_numpy() {
    let strategy = (dims(), dims(), 0..DTYPES.len(), -6isize..6, -6isize..6, 0usize..7, 0usize..7, any::<u64>());
    TestRunner::new(cfg(3000))
        .run(&strategy, |(sa, sb, d, ax, ax2, start, end, seed)| {
            let dt = DTYPES[d];
            let mut g = Graph::new();
            let (Ok(a), Ok(b)) = (g.input("a", dt, &sa), g.input("b", dt, &sb)) else { return Ok(()) };
            let rank = sa.len() as isize;
            let axis = (-rank <= ax && ax < rank).then(|| ax.rem_euclid(rank.max(1)) as usize);
            let axis2 = (-rank <= ax2 && ax2 < rank).then(|| ax2.rem_euclid(rank.max(1)) as usize);
            // reshape to sb: legal when the element counts agree
            let n = |s: &[usize]| s.iter().product::<usize>();
            let r = no_panic("reshape", || g.reshape(a, &sb))?;
            check(&g, &format!("reshape {sa:?} {sb:?}"), r, (n(&sa) == n(&sb)).then(|| sb.clone()), n(&sa) == n(&sb))?;
            // permute by a seeded order of 0..rank (sometimes broken)
            let mut perm: Vec<usize> = (0..sa.len()).collect();
            perm.sort_by_key(|&i| (seed >> (i * 3)) & 7);
            if seed % 5 == 0 && !perm.is_empty() {
                perm[0] = sa.len();
            }
            let valid = perm.iter().all(|&p| p < sa.len());
            let r = no_panic("permute", || g.permute(a, &perm))?;
            check(
                &g,
                &format!("permute {sa:?} {perm:?}"),
                r,
                valid.then(|| perm.iter().map(|&p| sa[p]).collect()),
                valid,
            )?;
            let r = no_panic("transpose", || g.transpose(a, ax, ax2))?;
            let want = axis.zip(axis2).map(|(i, j)| {
                let mut s = sa.clone();
                s.swap(i, j);
                s
            });
            let legal = want.is_some();
            check(&g, &format!("transpose {sa:?} {ax} {ax2}"), r, want, legal)?;
            let r = no_panic("slice", || g.slice(a, ax, start, end))?;
            let want = axis.filter(|&i| start <= end && end <= sa[i]).map(|i| {
                let mut s = sa.clone();
                s[i] = end - start;
                s
            });
            let legal = want.is_some();
            check(&g, &format!("slice {sa:?} {ax} {start}..{end}"), r, want, legal)?;
            let r = no_panic("broadcast_to", || g.broadcast_to(a, &sb))?;
            let ok = broadcast(&sa, &sb).as_deref() == Some(&sb[..]);
            check(&g, &format!("broadcast_to {sa:?} {sb:?}"), r, ok.then(|| sb.clone()), ok)?;
            let r = no_panic("concat", || g.concat(&[a, b], ax))?;
            let want =
                axis.filter(|&i| sa.len() == sb.len() && (0..sa.len()).all(|j| j == i || sa[j] == sb[j])).map(|i| {
                    let mut s = sa.clone();
                    s[i] += sb[i];
                    s
                });
            let legal = want.is_some() && !dt.is_storage_format();
            check(&g, &format!("concat {sa:?} {sb:?} {ax}"), r, want, legal)?;
            let idx = g.input("idx", DType::I32, &sb).unwrap();
            let r = no_panic("get_rows", || g.get_rows(a, idx))?;
            let want = (sa.len() == 2 && sb.len() <= 3).then(|| [&sb[..], &[sa[1]][..]].concat());
            // numpy's indexing raises IndexError for any index into a table of no rows
            let no_rows = sa.first() == Some(&0) && want.as_ref().is_some_and(|w| n(w) > 0);
            let legal = want.is_some() && !dt.is_storage_format() && !no_rows;
            check(&g, &format!("get_rows {sa:?} {sb:?}"), r, want, legal)?;
            let r = no_panic("contiguous", || g.contiguous(a))?;
            check(&g, "contiguous", r, Some(sa.clone()), !dt.is_storage_format())?;
            Ok(())
        })
        .unwrap();
}

/// The model-building constructors (rope, attention, masked softmax, set_rows and copy_into into a state,
/// scale and clamp) over random operands: each returns an `Error` or a tensor of the shape its rule gives, never a
/// panic; legal operands (rope of `[T, H, D]` at `[T]`, attention of matching heads) are accepted.
#[test]
fn model_ops_follow_their_shape_rules() {
    let device = webtensor::Device::cpu();
    let strategy = (dims(), dims(), dims(), 0..DTYPES.len(), 0usize..9, any::<bool>());
    TestRunner::new(cfg(2000))
        .run(&strategy, |(sa, sb, sc, d, nd, causal)| {
            let dt = DTYPES[d];
            let mut g = Graph::new();
            let (Ok(a), Ok(b), Ok(c)) = (g.input("a", dt, &sa), g.input("b", dt, &sb), g.input("c", dt, &sc)) else {
                return Ok(());
            };
            let pos = g.input("pos", DType::I32, &sb).unwrap();
            let rope = webtensor::Rope::new(nd, webtensor::RopeMode::Normal, 1e4);
            let r = no_panic("rope", || g.rope(a, pos, &rope))?;
            let fits = (sa.len() == 3 || sa.len() == 4) && sb.len() == 1 && sb[0] == sa[sa.len() - 3];
            let legal = fits && dt == DType::F32 && nd > 0 && nd % 2 == 0 && nd <= sa[sa.len() - 1];
            check(&g, &format!("rope {sa:?} at {sb:?}, n_dims {nd}"), r, fits.then(|| sa.clone()), legal)?;
            let att = webtensor::Attention { scale: 0.5, causal, mask: None, kv_len: None, sinks: None };
            let r = no_panic("attention", || g.attention(a, b, c, &att))?;
            if let Ok(t) = r {
                let (h, tq) = (sa[sa.len() - 3], sa[sa.len() - 2]);
                let want = [&sa[..sa.len() - 3], &[tq, h, sc[sc.len() - 1]][..]].concat();
                prop_assert_eq!(g.shape(t).unwrap(), &want[..], "attention {:?} {:?} {:?}", sa, sb, sc);
            }
            let r = no_panic("softmax_ext", || g.softmax_ext(a, Some(b), 0.5))?;
            let want = (!sa.is_empty() && broadcast(&sb, &sa).as_deref() == Some(&sa[..])).then(|| sa.clone());
            check(&g, &format!("softmax_ext {sa:?} mask {sb:?}"), r, want, false)?;
            for (name, r) in [
                ("scale", no_panic("scale", || g.scale(a, 2.0))?),
                ("clamp", no_panic("clamp", || g.clamp(a, -1.0, 1.0))?),
            ] {
                check(&g, name, r, Some(sa.clone()), dt == DType::F32)?;
            }
            // a state as the destination
            let Ok(state) = device.state("s", DType::F32, &sa) else { return Ok(()) };
            let dst = g.state(&state).unwrap();
            let idx = g.input("idx", DType::I32, &sb).unwrap();
            let r = no_panic("set_rows", || g.set_rows(dst, idx, c))?;
            let legal =
                sa.len() == 2 && sb.len() == 1 && sc.len() == 2 && sc[0] == sb[0] && sc[1] == sa[1] && dt == DType::F32;
            check(&g, &format!("set_rows {sa:?} {sb:?} {sc:?}"), r, legal.then(|| sa.clone()), legal)?;
            let r = no_panic("copy_into", || g.copy_into(dst, c))?;
            let ok = broadcast(&sc, &sa).as_deref() == Some(&sa[..]);
            check(&g, &format!("copy_into {sa:?} {sc:?}"), r, ok.then(|| sa.clone()), ok && dt == DType::F32)?;
            Ok(())
        })
        .unwrap();
}

/// Values for an input of `shape`: small integers, exact in f16 and in every sum the graphs below make.
fn values(shape: &[usize], seed: u64) -> HostTensor {
    let n: usize = shape.iter().product();
    let v = (0..n).map(|i| ((i as u64 * 7 + seed * 13) % 9) as f32 - 4.0).collect();
    HostTensor::new(shape, Data::F32(v)).unwrap()
}

/// `relu(a + b) @ t(c)` and `sum(a · b)` over random shapes with zero and one dims, 0-d included: built where
/// numpy allows it, run on every device, each equal to the CPU backend's (and empty where the shape is).
#[test]
fn empty_and_scalar_tensors_run_on_every_device() {
    let small = prop::collection::vec(prop::sample::select(vec![0usize, 1, 3]), 0..=3);
    let devices = common::devices();
    TestRunner::new(cfg(if devices.len() > 1 { 40 } else { 120 }))
        .run(&(small, 0usize..4), |(s, n)| {
            let mut g = Graph::new();
            let a = g.input("a", DType::F32, &s).unwrap();
            let b = g.input("b", DType::F32, &s).unwrap();
            let c_shape: Vec<usize> = if s.is_empty() { vec![n] } else { vec![n, s[s.len() - 1]] };
            let c = g.input("c", DType::F32, &c_shape).unwrap();
            let sum = g.add(a, b).unwrap();
            let act = g.relu(sum).unwrap();
            let mut outs = vec![act];
            if !s.is_empty() {
                let ct = g.t(c).unwrap();
                if let Ok(m) = g.matmul(act, ct) {
                    outs.push(m);
                }
                let p = g.mul(a, b).unwrap();
                if let Ok(r) = g.sum(p) {
                    outs.push(r);
                }
            }
            let values = [(a, values(&s, 1)), (b, values(&s, 2)), (c, values(&c_shape, 3))];
            let mut want: Option<Vec<HostTensor>> = None;
            for d in devices {
                let got = no_panic("compile and run", || {
                    let mut plan = d.compile(&g, &outs)?;
                    let used = plan.inputs();
                    let inputs: Vec<(Tensor, &HostTensor)> =
                        values.iter().filter(|(t, _)| used.contains(t)).map(|(t, v)| (*t, v)).collect();
                    plan.run(&inputs)
                })?;
                let got = got.map_err(|e| TestCaseError::fail(format!("{s:?} on {}: {e}", d.capabilities().name)))?;
                for (t, o) in got.iter().zip(&outs) {
                    prop_assert_eq!(&t.shape[..], g.shape(*o).unwrap());
                }
                match &want {
                    None => want = Some(got),
                    Some(w) => prop_assert_eq!(w, &got, "{:?} on {}", s, d.capabilities().name),
                }
            }
            Ok(())
        })
        .unwrap();
}

/// The refusals numpy itself makes or that webtensor documents, as errors naming the op.
#[test]
fn refusals_are_errors_that_name_the_op() {
    let mut g = Graph::new();
    let e = g.input("e", DType::F32, &[2, 0]).unwrap();
    let w = g.input("w", DType::F32, &[0, 3]).unwrap();
    let s = g.input("s", DType::F32, &[]).unwrap();
    for (op, r) in [
        ("matmul", g.matmul(e, w)),
        ("matmul", g.matmul(s, s)),
        ("max", g.max(e)),
        ("sum", g.sum(s)),
        ("softmax", g.softmax(s)),
    ] {
        match r {
            Err(err @ (Error::InvalidShape { .. } | Error::ShapeMismatch { .. })) => {
                assert!(err.to_string().starts_with(op), "{err}")
            }
            other => panic!("{op}: expected a shape error, got {other:?}"),
        }
    }
}
