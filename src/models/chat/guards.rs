//! The charged forms of what minijinja does inside one instruction or one builtin: every filter (also the ones
//! `map`, `select` and `reject` apply to each item), the tests that read their operands, `dict()`, subscripts,
//! slices and `loop.changed()`. Each charges the size of what it reads to the work budget and what it will build
//! to the byte budget before it builds it (see [`super::budget`]), so a filter that turns a 16 MB string into
//! 16 million one-item lists, a test of a 10 MB string in a loop, a subscript that counts a 10 MB string's
//! characters or a chain of lazy slices stops with an error instead of costing gigabytes or minutes.

use super::budget::{charge, charge_value, fits, walk, work};
use minijinja::value::{Rest, Value, ValueKind};
use minijinja::{filters as f, tests as t, Environment, Error, ErrorKind, State};
use std::borrow::Cow;

fn invalid(msg: impl Into<String>) -> Error {
    Error::new(ErrorKind::InvalidOperation, msg.into())
}

/// Bytes an item of a list costs the budget.
const ITEM_BYTES: usize = 16;

/// minijinja's builtin filters that chat templates may use (with Jinja2's names), the originals the charged
/// wrappers call.
fn builtin_filters() -> Vec<(&'static str, Value)> {
    vec![
        ("abs", Value::from_function(f::abs)),
        ("attr", Value::from_function(f::attr)),
        ("batch", Value::from_function(f::batch)),
        ("bool", Value::from_function(f::bool)),
        ("capitalize", Value::from_function(f::capitalize)),
        ("count", Value::from_function(f::length)),
        ("d", Value::from_function(f::default)),
        ("default", Value::from_function(f::default)),
        ("dictsort", Value::from_function(f::dictsort)),
        ("e", Value::from_function(f::escape)),
        ("escape", Value::from_function(f::escape)),
        ("first", Value::from_function(f::first)),
        ("float", Value::from_function(f::float)),
        ("groupby", Value::from_function(f::groupby)),
        ("int", Value::from_function(f::int)),
        ("items", Value::from_function(f::items)),
        ("last", Value::from_function(f::last)),
        ("length", Value::from_function(f::length)),
        ("list", Value::from_function(f::list)),
        ("lower", Value::from_function(f::lower)),
        ("map", Value::from_function(f::map)),
        ("max", Value::from_function(f::max)),
        ("min", Value::from_function(f::min)),
        ("reject", Value::from_function(f::reject)),
        ("rejectattr", Value::from_function(f::rejectattr)),
        ("reverse", Value::from_function(f::reverse)),
        ("round", Value::from_function(f::round)),
        ("safe", Value::from_function(f::safe)),
        ("select", Value::from_function(f::select)),
        ("selectattr", Value::from_function(f::selectattr)),
        ("slice", Value::from_function(f::slice)),
        ("sort", Value::from_function(f::sort)),
        ("split", Value::from_function(f::split)),
        ("string", Value::from_function(f::string)),
        ("sum", Value::from_function(f::sum)),
        ("title", Value::from_function(f::title)),
        ("trim", Value::from_function(f::trim)),
        ("unique", Value::from_function(f::unique)),
        ("upper", Value::from_function(f::upper)),
        ("lines", Value::from_function(f::lines)),
        ("chain", Value::from_function(f::chain)),
        ("zip", Value::from_function(f::zip)),
    ]
}

/// Installs `filters` (webtensor's own, checked ones) and the builtins in `allowed` behind [`apply`]; every other
/// filter of minijinja (`pprint`, `urlencode`) is removed, so no path (a `map` naming one included) reaches it.
pub(crate) fn install_filters(env: &mut Environment<'static>, filters: Vec<(&'static str, Value)>, allowed: &[&str]) {
    for name in ["pprint", "urlencode"] {
        env.remove_filter(name);
    }
    let own: Vec<&str> = filters.iter().map(|(n, _)| *n).collect();
    let builtins = builtin_filters().into_iter().filter(|(n, _)| !own.contains(n));
    for (name, original) in filters.into_iter().chain(builtins) {
        if !allowed.contains(&name) {
            env.remove_filter(name);
            continue;
        }
        env.add_filter(name, move |state: &State, args: Rest<Value>| apply(state, name, &original, &args));
    }
}

/// A filter application: its arguments must print within the budget (a filter taking a string formats a list it
/// is given) and are charged as work; what it will build is charged before it runs (`batch` and `slice` are
/// checked for the number of groups they would make); its result is charged after.
fn apply(state: &State, name: &str, original: &Value, args: &[Value]) -> Result<Value, Error> {
    fits(state, args)?;
    let parts = path_parts(name, args)?;
    if let (true, Some(input)) = (parts > 0, args.first()) {
        let items = input.as_str().map_or_else(|| input.len().unwrap_or(0), str::len);
        // sort looks its keys up on both sides of each of its n log n comparisons
        let per_item = if name == "sort" { 2 * (items.max(1).ilog2() as usize + 1) } else { 1 };
        work(state, items.saturating_mul(parts).saturating_mul(per_item))?;
    }
    let mut args = args.to_vec();
    if let ("batch" | "slice", Some(n)) = (name, args.get(1).and_then(Value::as_usize)) {
        let len = args[0].len().unwrap_or(0);
        match name {
            // more per batch than there are items, unfilled: one batch of them all
            "batch" if n > len && args.len() == 2 => args[1] = Value::from(len.max(1)),
            _ => charge(state, n.saturating_mul(ITEM_BYTES))?,
        }
    }
    if let Some(input) = args.first() {
        charge(state, built_ahead(state, name, input)?)?;
    }
    let out = original.call(state, &args)?;
    charge_value(state, &out)?;
    Ok(out)
}

/// The most parts an attribute path of a filter may have (`map(attribute='a.b')`, `sort(attribute='a, b')`,
/// `selectattr('a.b')`); real templates use one or two. minijinja walks a path for every item inside one call (a
/// string's `0` is a string, so `0.0.0..` never runs out), and `sort` builds a key of every part per comparison.
const MAX_PATH_PARTS: usize = 16;

/// The parts (dot- and comma-separated) of the attribute paths `args` give filter `name`, 0 for none; an error
/// beyond [`MAX_PATH_PARTS`].
fn path_parts(name: &str, args: &[Value]) -> Result<usize, Error> {
    let kwargs = args.last().filter(|v| v.is_kwargs());
    let positional = match name {
        "selectattr" | "rejectattr" | "groupby" => args.get(1).filter(|v| !v.is_kwargs()).cloned(),
        _ => None,
    };
    let keyword = kwargs.and_then(|k| k.get_attr("attribute").ok()).filter(|v| !v.is_undefined());
    let mut parts = 0usize;
    for path in positional.iter().chain(keyword.iter()) {
        let n = path.as_str().map_or(1, |s| s.split(['.', ',']).count());
        if n > MAX_PATH_PARTS {
            return Err(invalid(format!(
                "{name}: an attribute path of {n} parts (at most {MAX_PATH_PARTS} in chat templates)"
            )));
        }
        parts += n;
    }
    Ok(parts)
}

/// Bytes a filter will build from `input` beyond its result's own charge: a list of up to one item per character
/// or item of its input (`list`, `batch`, `map`, `sort`, `split`..), or the escaped text.
fn built_ahead(state: &State, name: &str, input: &Value) -> Result<usize, Error> {
    let items = match input.as_str() {
        Some(s) => s.len(),
        None => match input.len() {
            Some(n) => n,
            None if input.kind() == ValueKind::Iterable => walk(state, input, usize::MAX / 2)? / 2,
            None => 0,
        },
    };
    Ok(match name {
        "list" | "batch" | "slice" | "map" | "groupby" | "sort" | "unique" | "select" | "reject" | "selectattr"
        | "rejectattr" | "items" | "dictsort" | "chain" | "zip" | "lines" | "split" => items * ITEM_BYTES,
        "reverse" if input.as_str().is_none() => items * ITEM_BYTES,
        "e" | "escape" => match input.as_str() {
            Some(s) => escaped_len(s),
            None => walk(state, input, usize::MAX / 2)?.saturating_mul(6),
        },
        _ => 0,
    })
}

/// What a loop is about to iterate, charged as work for what starting it costs: minijinja counts a string's
/// characters there (sandbox.rs puts a call of this before every loop's start).
pub(crate) fn iterable(state: &State, v: Value) -> Result<Value, Error> {
    work(state, v.as_str().map_or(1, |s| s.len() / 16 + 1))?;
    Ok(v)
}

/// The length of `s` escaped for HTML as minijinja escapes it (`&quot;` for `"`, `&#x2f;` for `/`..).
pub(crate) fn escaped_len(s: &str) -> usize {
    s.bytes()
        .map(|b| match b {
            b'<' | b'>' => 4,
            b'&' => 5,
            b'"' | b'\'' | b'/' => 6,
            _ => 1,
        })
        .sum()
}

/// A test of two values; of two strings; of one string.
type ValueTest = fn(&Value, &Value) -> bool;
type TextTest = fn(Cow<'_, str>, Cow<'_, str>) -> bool;
type CaseTest = fn(&str) -> bool;

/// The tests that read their operands (equality, order, `in`, prefixes, case), charged for what they read; the
/// others only look at a value's kind. `select` and `reject` apply these, so their loops are charged too.
pub(crate) fn install_tests(env: &mut Environment<'static>) {
    let pairs: [(&[&str], ValueTest); 6] = [
        (&["eq", "equalto", "=="], t::is_eq),
        (&["ne", "!="], t::is_ne),
        (&["lt", "lessthan", "<"], t::is_lt),
        (&["le", "<="], t::is_le),
        (&["gt", "greaterthan", ">"], t::is_gt),
        (&["ge", ">="], t::is_ge),
    ];
    for (names, test) in pairs {
        for name in names {
            env.add_test(*name, move |state: &State, a: Value, b: Value| -> Result<bool, Error> {
                read(state, &[&a, &b])?;
                Ok(test(&a, &b))
            });
        }
    }
    env.add_test("in", |state: &State, a: Value, b: Value| -> Result<bool, Error> {
        read(state, &[&a, &b])?;
        t::is_in(state, &a, &b)
    });
    let prefixes: [(&str, TextTest); 2] = [("startingwith", t::is_startingwith), ("endingwith", t::is_endingwith)];
    for (name, test) in prefixes {
        env.add_test(name, move |state: &State, a: Value, b: Value| -> Result<bool, Error> {
            read(state, &[&a, &b])?;
            fits(state, &[a.clone(), b.clone()])?;
            Ok(test(text(&a), text(&b)))
        });
    }
    let cases: [(&str, CaseTest); 2] = [("lower", t::is_lower), ("upper", t::is_upper)];
    for (name, test) in cases {
        env.add_test(name, move |state: &State, a: Value| -> Result<bool, Error> {
            read(state, &[&a])?;
            fits(state, std::slice::from_ref(&a))?;
            Ok(test(&text(&a)))
        });
    }
}

/// A value as text (a string borrowed, anything else printed).
fn text(v: &Value) -> Cow<'_, str> {
    match v.as_str() {
        Some(s) => Cow::Borrowed(s),
        None => Cow::Owned(v.to_string()),
    }
}

/// Charges reading `values` whole (their items, 16 bytes of a string a unit) as work.
fn read(state: &State, values: &[&Value]) -> Result<(), Error> {
    for v in values {
        walk(state, v, usize::MAX / 2)?;
    }
    Ok(())
}

/// `dict(value, **kwargs)`, its copy of the map charged.
pub(crate) fn install_dict(env: &mut Environment<'static>) {
    let original = Value::from_function(minijinja::functions::dict);
    env.add_function("dict", move |state: &State, args: Rest<Value>| -> Result<Value, Error> {
        fits(state, &args)?;
        let items: usize = args.iter().map(|a| a.len().unwrap_or(0)).sum();
        charge(state, items.saturating_mul(ITEM_BYTES))?;
        original.call(state, &args).map_err(|e| match e.detail() {
            Some(_) => e,
            None => invalid("dict() takes a map and keyword arguments (not a list of pairs)"),
        })
    });
}

/// `container[key]`, as minijinja's VM computes it (a missing key or index is undefined), with what it reads
/// charged: a string's characters counted to find an index, a string key hashed, an iterable walked to an index.
pub(crate) fn get_item(state: &State, container: Value, key: Value) -> Result<Value, Error> {
    if !matches!(key.kind(), ValueKind::String | ValueKind::Number) {
        // a key that is a list or map is hashed whole
        walk(state, &key, usize::MAX / 2)?;
    }
    let mut units = key.as_str().map_or(0, |k| k.len() / 16);
    if let Some(s) = container.as_str() {
        units += s.len() / 16;
    } else if container.kind() == ValueKind::Iterable {
        units += key.as_i64().map_or(0, i64::unsigned_abs) as usize;
    }
    work(state, units)?;
    container.get_item(&key)
}

/// `value[start:stop:step]` with Python's semantics, the result built (a chain of lazy slices would cost the
/// square of its length) and charged.
pub(crate) fn slice(state: &State, value: Value, start: Value, stop: Value, step: Value) -> Result<Value, Error> {
    let bound = |v: &Value| -> Result<Option<i64>, Error> {
        if v.is_none() {
            Ok(None)
        } else {
            i64::try_from(v.clone()).map(Some)
        }
    };
    let (start, stop) = (bound(&start)?, bound(&stop)?);
    let step = bound(&step)?.unwrap_or(1);
    if step == 0 {
        return Err(invalid("cannot slice by step size of 0"));
    }
    if let Some(s) = value.as_str() {
        work(state, s.len() / 16 + 1)?;
        let chars: Vec<char> = s.chars().collect();
        let out: String = indices(chars.len(), start, stop, step).map(|i| chars[i]).collect();
        charge(state, out.len())?;
        return Ok(Value::from(out));
    }
    match value.kind() {
        ValueKind::Undefined | ValueKind::None => Ok(Value::from(Vec::<Value>::new())),
        ValueKind::Seq | ValueKind::Iterable => {
            let items: Vec<Value> = value.try_iter()?.collect();
            work(state, items.len())?;
            let out: Vec<Value> = indices(items.len(), start, stop, step).map(|i| items[i].clone()).collect();
            charge(state, out.len().saturating_mul(ITEM_BYTES))?;
            Ok(Value::from(out))
        }
        kind => Err(invalid(format!("value of type {kind} cannot be sliced"))),
    }
}

/// The indices of `seq[start:stop:step]` for a sequence of `len` items, as Python's `slice.indices` gives them.
fn indices(len: usize, start: Option<i64>, stop: Option<i64>, step: i64) -> impl Iterator<Item = usize> {
    let n = len as i64;
    let clamp = |i: i64, lo: i64, hi: i64| if i < 0 { (i + n).max(lo) } else { i.min(hi) };
    let (first, end) = if step > 0 {
        (start.map_or(0, |s| clamp(s, 0, n)), stop.map_or(n, |s| clamp(s, 0, n)))
    } else {
        (start.map_or(n - 1, |s| clamp(s, -1, n - 1)), stop.map_or(-1, |s| clamp(s, -1, n - 1)))
    };
    let (span, stride) = if step > 0 { (end - first, step) } else { (first - end, -step) };
    let count = if span > 0 { (span - 1) / stride + 1 } else { 0 };
    (0..count).map(move |k| (first + k * step) as usize)
}

/// `loop.changed(args..)`: compares its arguments with the last call's, so their size is charged as work.
pub(crate) fn loop_changed(state: &State, args: Rest<Value>) -> Result<Value, Error> {
    let Some((the_loop, values)) = args.split_first() else {
        return Err(invalid("loop.changed needs the loop"));
    };
    for v in values {
        walk(state, v, usize::MAX / 2)?;
    }
    the_loop.call_method(state, "changed", values)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slice_indices_follow_python() {
        let py = |len, a, b, s| indices(len, a, b, s).collect::<Vec<_>>();
        assert_eq!(py(5, None, None, -1), [4, 3, 2, 1, 0]);
        assert_eq!(py(5, Some(1), None, 1), [1, 2, 3, 4]);
        assert_eq!(py(5, Some(-2), None, 1), [3, 4]);
        assert_eq!(py(5, None, Some(-1), 2), [0, 2]);
        assert_eq!(py(5, Some(10), Some(-10), -2), [4, 2, 0]);
        assert_eq!(py(5, Some(-10), Some(10), 3), [0, 3]);
        assert_eq!(py(5, Some(3), Some(1), 1), Vec::<usize>::new());
        assert_eq!(py(0, None, None, -1), Vec::<usize>::new());
        assert_eq!(py(5, Some(2), Some(-7), -1), [2, 1, 0]);
    }
}
