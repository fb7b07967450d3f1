//! Rendering a chat template from a model file, which nobody reviewed, within fixed bounds: every string the
//! template builds or emits is charged to a budget of [`super::budget::BUDGET_BYTES`] per render, instructions to minijinja's fuel,
//! recursion to a depth, so a template that loops forever, doubles a string or floods the output stops with an
//! error in well under a second and a bounded memory.
//!
//! How: the template is compiled with minijinja's own compiler, then the instructions that make strings out of
//! strings (`~`, `+`, `*`) become calls of functions that charge the result's size before building it, and every
//! filter application becomes a call that charges its result (the filters that can multiply their input's size —
//! `replace`, `join`, `indent`, `center`, `format`, `wordwrap`, `tojson` — are replaced by versions that check
//! first). Python's string, list and dict methods (minijinja-contrib's pycompat) are charged the same way, and
//! emitted values through the formatter. Literal text is written without a call, so its total is bounded by the
//! fuel times the longest literal: the fuel is lowered for templates with long literals.

use minijinja::machinery::{CompiledTemplate, Instruction, TemplateConfig, WhitespaceConfig};
use minijinja::value::{Rest, Value, ValueKind};
use minijinja::{Environment, Error, ErrorKind, State};

use super::budget::{charge, charge_value};
use std::sync::Arc;

/// Instructions a render may execute (real templates take thousands for a conversation).
const FUEL: u64 = 2_000_000;
/// Bytes that literal text may add to the output in all (see the module docs).
const LITERAL_BYTES: u64 = 64 << 20;
/// Nesting of macro calls and recursive loops.
const RECURSION: usize = 64;
/// Largest template source accepted, in bytes.
pub(crate) const MAX_SOURCE: usize = 1 << 20;

/// The filter table: `FILTERS`, the filters a template may use (minijinja's builtins that Hugging Face's renderer,
/// Jinja2, has too), and `FILTER_CALLS`, the charged function each is rerouted to (`__webtensor_filter_NAME`), in
/// the same order, from one list.
macro_rules! filters {
    ($($f:literal),* $(,)?) => {
        /// The filters a template may use.
        const FILTERS: &[&str] = &[$($f),*];
        /// `__webtensor_filter_NAME` for each of [`FILTERS`], in order.
        const FILTER_CALLS: &[&str] = &[$(concat!("__webtensor_filter_", $f)),*];
    };
}
filters!(
    "abs",
    "attr",
    "batch",
    "bool",
    "capitalize",
    "center",
    "count",
    "d",
    "default",
    "dictsort",
    "e",
    "escape",
    "first",
    "float",
    "format",
    "groupby",
    "indent",
    "int",
    "items",
    "join",
    "last",
    "length",
    "list",
    "lower",
    "map",
    "max",
    "min",
    "reject",
    "rejectattr",
    "replace",
    "reverse",
    "round",
    "safe",
    "select",
    "selectattr",
    "slice",
    "sort",
    "split",
    "string",
    "sum",
    "title",
    "tojson",
    "trim",
    "unique",
    "upper",
    "wordcount",
    "wordwrap",
    "lines",
    "chain",
    "zip",
);

fn invalid(msg: String) -> Error {
    Error::new(ErrorKind::InvalidOperation, msg)
}

/// `a ~ b`: both formatted as strings.
fn concat(state: &State, a: Value, b: Value) -> Result<Value, Error> {
    let (a, b) = (a.to_string(), b.to_string());
    charge(state, a.len() + b.len())?;
    Ok(Value::from(a + &b))
}

/// `a + b`, as minijinja computes it (numbers, strings, sequences), with strings and sequences charged.
fn add(state: &State, a: Value, b: Value) -> Result<Value, Error> {
    match (a.kind(), b.kind()) {
        (ValueKind::String, ValueKind::String) => concat(state, a, b),
        (ValueKind::Seq, ValueKind::Seq) | (ValueKind::Iterable, ValueKind::Iterable) => {
            let items: Vec<Value> = a.try_iter()?.chain(b.try_iter()?).collect();
            charge(state, items.len() * 16)?;
            Ok(Value::from(items))
        }
        (ValueKind::Number, ValueKind::Number) => arithmetic(a, b, i64::checked_add, |x, y| x + y, "+"),
        _ => Err(invalid(format!("unsupported operand types for +: {} and {}", a.kind(), b.kind()))),
    }
}

/// `a * b`: numbers, or a string or sequence repeated (charged).
fn mul(state: &State, a: Value, b: Value) -> Result<Value, Error> {
    let repeat = |v: &Value, n: &Value| -> Result<Value, Error> {
        let n = n
            .as_usize()
            .ok_or_else(|| invalid("a string or list can only be repeated an integer number of times".into()))?;
        if let Some(s) = v.as_str() {
            charge(state, s.len().saturating_mul(n))?;
            return Ok(Value::from(s.repeat(n)));
        }
        let items: Vec<Value> = v.try_iter()?.collect();
        charge(state, items.len().saturating_mul(n).saturating_mul(16))?;
        Ok(Value::from(items.iter().cycle().take(items.len() * n).cloned().collect::<Vec<_>>()))
    };
    match (a.kind(), b.kind()) {
        (ValueKind::Number, ValueKind::Number) => arithmetic(a, b, i64::checked_mul, |x, y| x * y, "*"),
        (ValueKind::String | ValueKind::Seq, ValueKind::Number) => repeat(&a, &b),
        (ValueKind::Number, ValueKind::String | ValueKind::Seq) => repeat(&b, &a),
        _ => Err(invalid(format!("unsupported operand types for *: {} and {}", a.kind(), b.kind()))),
    }
}

/// Integer arithmetic when both are integers (an overflow is an error, as in minijinja), else f64.
fn arithmetic(
    a: Value,
    b: Value,
    int: fn(i64, i64) -> Option<i64>,
    float: fn(f64, f64) -> f64,
    op: &str,
) -> Result<Value, Error> {
    let is_int = |v: &Value| v.is_integer();
    if is_int(&a) && is_int(&b) {
        let (x, y) = (i64::try_from(a.clone()), i64::try_from(b.clone()));
        if let (Ok(x), Ok(y)) = (x, y) {
            return int(x, y).map(Value::from).ok_or_else(|| invalid(format!("integer overflow in {x} {op} {y}")));
        }
    }
    let (x, y) = (f64::try_from(a)?, f64::try_from(b)?);
    Ok(Value::from(float(x, y)))
}

/// A filter application: the filter's result, charged (the amplifying filters are replaced: see [`environment`]).
fn apply(state: &State, name: &str, args: &[Value]) -> Result<Value, Error> {
    let out = state.apply_filter(name, args)?;
    charge_value(state, &out)?;
    Ok(out)
}

/// The compiled template with its string-building instructions and filter applications routed through the
/// charged functions; `Err` for a template that does not parse or uses a filter webtensor does not offer.
pub(crate) fn compile(source: &str) -> Result<CompiledTemplate<'_>, Error> {
    if source.len() > MAX_SOURCE {
        return Err(invalid(format!("the template has {} bytes (at most {MAX_SOURCE})", source.len())));
    }
    let config = TemplateConfig {
        syntax_config: Default::default(),
        // as transformers renders chat templates (jinja2.Environment(trim_blocks=True, lstrip_blocks=True))
        ws_config: WhitespaceConfig { keep_trailing_newline: false, lstrip_blocks: true, trim_blocks: true },
        default_auto_escape: Arc::new(|_: &str| minijinja::AutoEscape::None),
    };
    let mut t = CompiledTemplate::new("chat_template", source, &config)?;
    let n = t.instructions.len() as u32;
    for i in 0..n {
        let Some(instr) = t.instructions.get_mut(i) else { continue };
        let replacement = match instr {
            Instruction::StringConcat => Instruction::CallFunction("__webtensor_concat", Some(2)),
            Instruction::Add => Instruction::CallFunction("__webtensor_add", Some(2)),
            Instruction::Mul => Instruction::CallFunction("__webtensor_mul", Some(2)),
            Instruction::ApplyFilter(name, args, _) => {
                let Some(f) = FILTERS.iter().position(|f| f == name) else {
                    return Err(invalid(format!("filter '{name}' is not available in chat templates")));
                };
                Instruction::CallFunction(FILTER_CALLS[f], *args)
            }
            _ => continue,
        };
        *instr = replacement;
    }
    if !t.blocks.is_empty() {
        return Err(invalid("template blocks ({% block %}) are not used by chat templates".into()));
    }
    Ok(t)
}

/// The fuel for a template whose longest literal text has `longest` bytes (see the module docs).
pub(crate) fn fuel_for(t: &CompiledTemplate) -> u64 {
    let longest = (0..t.instructions.len() as u32)
        .filter_map(|i| match t.instructions.get(i) {
            Some(Instruction::EmitRaw(s)) => Some(s.len() as u64),
            _ => None,
        })
        .max()
        .unwrap_or(1)
        .max(64);
    FUEL.min(LITERAL_BYTES / longest)
}

/// The environment every chat template renders in: the charged operators and filters, Hugging Face's
/// functions (`raise_exception`, `strftime_now`), Python's methods, the formatter that charges output, the fuel,
/// the recursion bound. `today` is the date `strftime_now` reports (year, month, day; None: today, UTC).
pub(crate) fn environment(today: Option<(i64, u32, u32)>) -> Environment<'static> {
    let mut env = Environment::new();
    env.set_recursion_limit(RECURSION);
    env.set_fuel(Some(FUEL));
    env.add_function("__webtensor_concat", concat);
    env.add_function("__webtensor_add", add);
    env.add_function("__webtensor_mul", mul);
    for (name, call) in FILTERS.iter().zip(FILTER_CALLS) {
        env.add_function(*call, move |state: &State, args: Rest<Value>| apply(state, name, &args));
    }
    super::pyfns::add_to(&mut env, today);
    env.set_unknown_method_callback(|state, value, method, args| {
        super::pyfns::check_method(state, value, method, args)?;
        let out = minijinja_contrib::pycompat::unknown_method_callback(state, value, method, args)?;
        charge_value(state, &out)?;
        Ok(out)
    });
    env.set_formatter(|out, state, value| {
        charge(state, value.as_str().map_or_else(|| value.to_string().len(), str::len))?;
        minijinja::escape_formatter(out, state, value)
    });
    env
}
