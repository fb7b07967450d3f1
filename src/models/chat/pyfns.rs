//! What Hugging Face's chat-template renderer adds to Jinja, for minijinja: `raise_exception`, `strftime_now`,
//! `tojson` as Python's `json.dumps` writes it (no HTML escaping, `", "` and `": "` separators, non-ASCII kept,
//! keys in insertion order), and the filters and methods that can multiply a string's size checked against the
//! render's budget before they build anything (see [`super::budget`]).

use super::budget::{charge as charge_ahead, fits, work, BUDGET_BYTES};
use minijinja::value::{Kwargs, Rest, Value, ValueKind};
use minijinja::{Environment, Error, ErrorKind, State};

fn invalid(msg: impl Into<String>) -> Error {
    Error::new(ErrorKind::InvalidOperation, msg.into())
}

/// Adds the functions to `env` and returns the checked filters (name, function), which the sandbox installs
/// behind its charges; `today` is the date `strftime_now` reports.
pub(crate) fn add_to(env: &mut Environment<'static>, today: Option<(i64, u32, u32)>) -> Vec<(&'static str, Value)> {
    let mut filters = Vec::new();
    env.add_function("raise_exception", |state: &State, msg: Value| -> Result<Value, Error> {
        fits(state, std::slice::from_ref(&msg))?;
        Err(invalid(msg.to_string()))
    });
    env.add_function("strftime_now", move |state: &State, format: Value| -> Result<Value, Error> {
        fits(state, std::slice::from_ref(&format))?;
        let format = format.to_string();
        charge_ahead(state, format.len().saturating_mul(4))?;
        let (y, m, d, secs) = match today {
            Some((y, m, d)) => (y, m, d, 0),
            None => now_utc(),
        };
        strftime(&format, y, m, d, secs).map(Value::from)
    });
    filters.push(("tojson", Value::from_function(tojson)));
    filters.push((
        "replace",
        Value::from_function(|state: &State, s: String, old: String, new: String, count: Option<usize>| {
            charge_ahead(state, replaced_len(&s, &old, &new, count))?;
            Ok::<_, Error>(match count {
                Some(n) => s.replacen(&old, &new, n),
                None => s.replace(&old, &new),
            })
        }),
    ));
    filters.push((
        "join",
        Value::from_function(|state: &State, items: Value, sep: Option<String>, attr: Option<String>| {
            let sep = sep.unwrap_or_default();
            let parts: Vec<String> = items
                .try_iter()?
                .map(|v| match &attr {
                    Some(a) => v.get_attr(a).map(|x| x.to_string()),
                    None => Ok(v.to_string()),
                })
                .collect::<Result<_, Error>>()?;
            charge_ahead(state, parts.iter().map(String::len).sum::<usize>() + sep.len() * parts.len())?;
            Ok::<_, Error>(parts.join(&sep))
        }),
    ));
    filters.push((
        "indent",
        Value::from_function(|state: &State, s: String, width: Value, first: Option<bool>, blank: Option<bool>| {
            let pad = match width.as_str() {
                Some(p) => p.to_string(),
                None => " ".repeat(width_arg(state, &width, s.lines().count() + 1)?),
            };
            charge_ahead(state, s.len() + pad.len() * (s.lines().count() + 1))?;
            let mut out = String::new();
            for (i, line) in s.split('\n').enumerate() {
                if i > 0 {
                    out.push('\n');
                }
                if (i > 0 || first == Some(true)) && (blank == Some(true) || !line.trim().is_empty()) {
                    out.push_str(&pad);
                }
                out.push_str(line);
            }
            Ok::<_, Error>(out)
        }),
    ));
    filters.push((
        "center",
        Value::from_function(|state: &State, s: String, width: Value| {
            let w = width_arg(state, &width, 1)?;
            let len = s.chars().count();
            if w <= len {
                return Ok::<_, Error>(s);
            }
            let left = (w - len) / 2;
            Ok(format!("{}{s}{}", " ".repeat(left), " ".repeat(w - len - left)))
        }),
    ));
    filters.push((
        "wordwrap",
        Value::from_function(|state: &State, s: String, width: Option<usize>| {
            charge_ahead(state, 2 * s.len())?;
            let width = width.unwrap_or(79).max(1);
            let mut out = String::new();
            for line in s.split('\n') {
                let mut n = 0;
                for word in line.split(' ') {
                    if n > 0 && n + 1 + word.chars().count() > width {
                        out.push('\n');
                        n = 0;
                    } else if n > 0 {
                        out.push(' ');
                        n += 1;
                    }
                    out.push_str(word);
                    n += word.chars().count();
                }
                out.push('\n');
            }
            out.pop();
            Ok::<_, Error>(out)
        }),
    ));
    filters.push((
        "format",
        Value::from_function(|state: &State, fmt: String, args: Rest<Value>| {
            check_format_widths(&fmt)?;
            charge_ahead(state, formatted_len(&fmt, '%', &args))?;
            minijinja::format_filter(minijinja::FormatStyle::Printf, &fmt, &args)
        }),
    ));
    filters
}

/// A width argument (`center`, `indent`), charged `times` over before anything is built.
fn width_arg(state: &State, width: &Value, times: usize) -> Result<usize, Error> {
    let w = width.as_usize().ok_or_else(|| invalid("a width must be a non-negative integer"))?;
    charge_ahead(state, w.saturating_mul(times))?;
    Ok(w)
}

/// `%`-format widths and precisions above 4096 are refused (a number there sizes the result); so is any run of
/// five or more digits, wherever a fill character or a mapping key put it.
fn check_format_widths(fmt: &str) -> Result<(), Error> {
    let mut run = 0usize;
    for c in fmt.chars() {
        run = if c.is_ascii_digit() { run + 1 } else { 0 };
        if run > 4 {
            return Err(invalid("a format string with a number of five or more digits (a width above 4096?)"));
        }
    }
    let mut digits = 0usize;
    let mut value = 0usize;
    let mut in_spec = false;
    for c in fmt.chars() {
        match c {
            '%' | '{' => in_spec = !in_spec || c == '{',
            '0'..='9' if in_spec => {
                digits += 1;
                value = value.saturating_mul(10).saturating_add(c as usize - '0' as usize);
                if digits > 4 || value > 4096 {
                    return Err(invalid("a format width or precision above 4096"));
                }
            }
            _ => {
                digits = 0;
                value = 0;
                if c.is_ascii_alphabetic() || c == '}' {
                    in_spec = false;
                }
            }
        }
    }
    Ok(())
}

/// An upper bound of the bytes `fmt` formats `args` into: each of its placeholders (a `marker`: `%` or `{`) may
/// print any argument, and one argument many times (`'{0}' * 20000`, `%(a)s` repeated).
fn formatted_len(fmt: &str, marker: char, args: &[Value]) -> usize {
    // a placeholder's width or precision pads it up to 4096 (check_format_widths)
    let longest = args.iter().map(|a| a.to_string().len()).max().unwrap_or(0).saturating_add(4096);
    fmt.len().saturating_add(fmt.matches(marker).count().saturating_mul(longest))
}

/// Bytes of `s` with `old` replaced by `new` (at most `count` times).
fn replaced_len(s: &str, old: &str, new: &str, count: Option<usize>) -> usize {
    let n = if old.is_empty() { s.chars().count() + 1 } else { s.matches(old).count() };
    let n = count.map_or(n, |c| c.min(n));
    (s.len() + n * new.len()).saturating_sub(n * old.len())
}

/// Checks, before minijinja-contrib's pycompat runs it, a string method that could multiply its input's size.
pub(crate) fn check_method(state: &State, value: &Value, method: &str, args: &[Value]) -> Result<(), Error> {
    let Some(s) = value.as_str() else {
        // a map's items, keys or values: a list of them
        return match (value.kind(), method) {
            (ValueKind::Map, "items" | "keys" | "values") => charge_ahead(state, value.len().unwrap_or(0) * 16),
            _ => Ok(()),
        };
    };
    let arg = |i: usize| args.get(i).and_then(Value::as_str).unwrap_or("");
    match method {
        "replace" => charge_ahead(state, replaced_len(s, arg(0), arg(1), args.get(2).and_then(Value::as_usize))),
        "center" | "ljust" | "rjust" | "zfill" => {
            width_arg(state, args.first().unwrap_or(&Value::from(0)), 1).map(drop)
        }
        "expandtabs" => {
            charge_ahead(state, s.len().saturating_mul(args.first().and_then(Value::as_usize).unwrap_or(8)))
        }
        "join" => {
            let items = args.first().map(|a| a.try_iter().map(|it| it.map(|v| v.to_string().len()).sum::<usize>()));
            let total = items.transpose()?.unwrap_or(0);
            charge_ahead(state, total + s.len() * args.first().and_then(|a| a.len()).unwrap_or(0))
        }
        // a list of up to one piece a separator (16 bytes each)
        "split" | "rsplit" if arg(0).is_empty() && args.first().is_some_and(|a| !a.is_none()) => {
            Err(invalid("split: empty separator"))
        }
        "split" | "rsplit" | "splitlines" => {
            let pieces = match args.first().and_then(Value::as_str) {
                Some(sep) if method != "splitlines" => s.matches(sep).count() + 1,
                _ if method == "splitlines" => s.bytes().filter(|&b| b == b'\n' || b == b'\r').count() + 1,
                _ => s.split_whitespace().count() + 1,
            };
            charge_ahead(state, pieces.saturating_mul(16))
        }
        // minijinja-contrib's count('') never ends; Python's is one more than the characters
        "count" if arg(0).is_empty() && args.first().is_some_and(|a| a.as_str().is_some()) => {
            Err(invalid("count: an empty substring (webtensor's templates do not count it)"))
        }
        // each character of s tried against each of chars
        "strip" | "lstrip" | "rstrip" => work(state, (s.len() / 16 + 1).saturating_mul(arg(0).chars().count().max(1))),
        "format" => {
            check_format_widths(s)?;
            charge_ahead(state, formatted_len(s, '{', args))
        }
        _ => Ok(()),
    }
}

/// `tojson(value, indent=None)` as transformers' chat-template environment defines it: Python's `json.dumps`
/// with `ensure_ascii=False`.
fn tojson(state: &State, value: Value, kwargs: Kwargs) -> Result<Value, Error> {
    let indent: Option<usize> = kwargs.get("indent")?;
    let sort_keys: Option<bool> = kwargs.get("sort_keys")?;
    let ensure_ascii: Option<bool> = kwargs.get("ensure_ascii")?;
    let separators: Option<Vec<String>> = kwargs.get("separators")?;
    kwargs.assert_all_used()?;
    if indent.is_some_and(|n| n > 64) {
        return Err(invalid("tojson: an indent above 64"));
    }
    let seps = match separators.as_deref() {
        Some([item, key]) => (item.clone(), key.clone()),
        Some(_) => return Err(invalid("tojson: separators must be two strings")),
        None if indent.is_some() => (",".to_string(), ": ".to_string()),
        None => (", ".to_string(), ": ".to_string()),
    };
    let style = JsonStyle { indent, sort: sort_keys == Some(true), ascii: ensure_ascii == Some(true), seps };
    let mut out = String::new();
    write_json(&mut out, &value, &style, 0)?;
    charge_ahead(state, out.len())?;
    Ok(Value::from_safe_string(out))
}

/// How `json.dumps` was asked to write.
struct JsonStyle {
    indent: Option<usize>,
    sort: bool,
    ascii: bool,
    /// (between items, between a key and its value)
    seps: (String, String),
}

fn write_json(out: &mut String, v: &Value, st: &JsonStyle, depth: usize) -> Result<(), Error> {
    if depth > 64 || out.len() > BUDGET_BYTES {
        return Err(invalid("tojson: a value nested too deep or too large"));
    }
    let newline = |out: &mut String, d: usize| {
        if let Some(n) = st.indent {
            out.push('\n');
            out.push_str(&" ".repeat(n * d));
        }
    };
    let (item_sep, key_sep) = (st.seps.0.as_str(), st.seps.1.as_str());
    match v.kind() {
        ValueKind::Undefined | ValueKind::None => out.push_str("null"),
        ValueKind::Bool => out.push_str(if v.is_true() { "true" } else { "false" }),
        ValueKind::Number => {
            if v.is_integer() {
                out.push_str(&v.to_string());
            } else {
                out.push_str(&python_float(f64::try_from(v.clone())?));
            }
        }
        ValueKind::String => json_string(out, v.as_str().unwrap_or_default(), st.ascii),
        ValueKind::Seq | ValueKind::Iterable => {
            let items: Vec<Value> = v.try_iter()?.collect();
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(item_sep);
                }
                newline(out, depth + 1);
                write_json(out, item, st, depth + 1)?;
            }
            if !items.is_empty() {
                newline(out, depth);
            }
            out.push(']');
        }
        ValueKind::Map => {
            let mut keys: Vec<Value> = v.try_iter()?.collect();
            if st.sort {
                keys.sort_by_key(|k| k.to_string());
            }
            out.push('{');
            for (i, k) in keys.iter().enumerate() {
                if i > 0 {
                    out.push_str(item_sep);
                }
                newline(out, depth + 1);
                json_string(out, &k.to_string(), st.ascii);
                out.push_str(key_sep);
                write_json(out, &v.get_item(k)?, st, depth + 1)?;
            }
            if !keys.is_empty() {
                newline(out, depth);
            }
            out.push('}');
        }
        _ => json_string(out, &v.to_string(), st.ascii),
    }
    Ok(())
}

/// A JSON string as Python writes it (`ascii`: `ensure_ascii=True`, everything past U+007F as `\uXXXX`, in
/// UTF-16 surrogate pairs past U+FFFF).
fn json_string(out: &mut String, s: &str, ascii: bool) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{08}' => out.push_str("\\b"),
            '\u{0c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c if ascii && (c as u32) > 0x7f => {
                let mut units = [0u16; 2];
                for u in c.encode_utf16(&mut units) {
                    out.push_str(&format!("\\u{:04x}", u));
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// A float as Python's `repr` writes it (`1.0`, `0.5`, `1e+20`, `NaN`, `Infinity` as json.dumps writes those).
fn python_float(x: f64) -> String {
    if x.is_nan() {
        return "NaN".into();
    }
    if x.is_infinite() {
        return if x > 0.0 { "Infinity".into() } else { "-Infinity".into() };
    }
    let s = format!("{x:?}");
    if x != 0.0 && (x.abs() >= 1e16 || x.abs() < 1e-4) {
        let e = format!("{x:e}");
        let (m, exp) = e.split_once('e').unwrap_or((&e, "0"));
        let exp: i32 = exp.parse().unwrap_or(0);
        return format!("{m}e{}{:02}", if exp < 0 { '-' } else { '+' }, exp.abs());
    }
    s
}

/// Today's date and seconds since midnight, UTC.
fn now_utc() -> (i64, u32, u32, u64) {
    // std's clock is not there on wasm32-unknown-unknown: the page's is
    #[cfg(target_arch = "wasm32")]
    let secs = (js_sys::Date::now() / 1e3).max(0.0) as u64;
    #[cfg(not(target_arch = "wasm32"))]
    let secs = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let (y, m, d) = civil_from_days((secs / 86_400) as i64);
    (y, m, d, secs % 86_400)
}

/// (year, month, day) of the day `z` days after 1970-01-01 (Howard Hinnant's algorithm).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

const MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];
const DAYS: [&str; 7] = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"];

/// Python's `strftime` for the directives chat templates use (`%d %b %Y`, `%Y-%m-%d`, ...).
fn strftime(format: &str, y: i64, m: u32, d: u32, secs: u64) -> Result<String, Error> {
    let days = days_from_civil(y, m, d);
    let weekday = (days + 3).rem_euclid(7) as usize; // 1970-01-01 was a Thursday
    let yday = days - days_from_civil(y, 1, 1) + 1;
    let (hh, mm, ss) = (secs / 3600, secs / 60 % 60, secs % 60);
    let mut out = String::new();
    let mut chars = format.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        let month = MONTHS[(m - 1) as usize];
        match chars.next() {
            Some('d') => out.push_str(&format!("{d:02}")),
            Some('-') if chars.clone().next() == Some('d') => {
                chars.next();
                out.push_str(&d.to_string());
            }
            Some('e') => out.push_str(&format!("{d:>2}")),
            Some('m') => out.push_str(&format!("{m:02}")),
            Some('Y') => out.push_str(&y.to_string()),
            Some('y') => out.push_str(&format!("{:02}", y.rem_euclid(100))),
            Some('b') => out.push_str(&month[..3]),
            Some('B') => out.push_str(month),
            Some('a') => out.push_str(&DAYS[weekday][..3]),
            Some('A') => out.push_str(DAYS[weekday]),
            Some('j') => out.push_str(&format!("{yday:03}")),
            Some('H') => out.push_str(&format!("{hh:02}")),
            Some('I') => out.push_str(&format!("{:02}", (hh + 11) % 12 + 1)),
            Some('p') => out.push_str(if hh < 12 { "AM" } else { "PM" }),
            Some('M') => out.push_str(&format!("{mm:02}")),
            Some('S') => out.push_str(&format!("{ss:02}")),
            Some('%') => out.push('%'),
            other => {
                return Err(invalid(format!("strftime_now: directive %{} is not supported", other.unwrap_or(' '))))
            }
        }
    }
    Ok(out)
}

/// Days from 1970-01-01 to (y, m, d).
fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = i64::from((m + 9) % 12);
    let doy = (153 * mp + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_and_json_as_python_writes_them() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(days_from_civil(2024, 7, 26)), (2024, 7, 26));
        assert_eq!(strftime("%d %b %Y", 2024, 7, 26, 0).unwrap(), "26 Jul 2024");
        assert_eq!(strftime("%A %Y-%m-%d %j", 2024, 7, 26, 0).unwrap(), "Friday 2024-07-26 208");
        let mut s = String::new();
        json_string(&mut s, "a\"é\n\u{1}", false);
        assert_eq!(s, "\"a\\\"é\\n\\u0001\"");
        assert_eq!(python_float(1.0), "1.0");
        assert_eq!(python_float(1e20), "1e+20");
        assert_eq!(python_float(0.5), "0.5");
        assert_eq!(replaced_len("aaa", "a", "bb", None), 6);
    }
}
