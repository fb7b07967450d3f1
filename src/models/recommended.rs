//! The sampler settings a model file recommends: the `general.sampling.*` keys that llama.cpp's converters write
//! from a model's `generation_config.json` and that llama.cpp reads as its defaults.

use super::SamplingOptions;
use crate::io::gguf::{GgufFile, MetaValue};

/// Sampler settings read from a GGUF file's `general.sampling.temp`, `.top_k`, `.top_p`, `.min_p`,
/// `.penalty_repeat` and `.penalty_last_n` (llama.cpp's names and meanings); each `None` where the file has no
/// such key or its value is out of range (see [`RecommendedSampling::ignored`]).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RecommendedSampling {
    pub temperature: Option<f32>,
    /// `top_k ≤ 0` in the file means all tokens, 0 here.
    pub top_k: Option<usize>,
    pub top_p: Option<f32>,
    pub min_p: Option<f32>,
    pub repetition_penalty: Option<f32>,
    pub repeat_last_n: Option<usize>,
    /// `key = value` for every key present but unusable (of another type, not finite, out of range), so a caller
    /// can say why the file's advice was not taken.
    pub ignored: Vec<String>,
}

/// Longest repetition window a file may ask for (llama.cpp's −1, the whole context, maps to this).
const MAX_LAST_N: usize = 1 << 16;

impl RecommendedSampling {
    /// The recommendations in `file`; never fails (a bad value is listed in `ignored`, not used).
    pub fn from_gguf(file: &GgufFile) -> RecommendedSampling {
        let mut r = RecommendedSampling::default();
        let float = |name: &str, ok: fn(f32) -> bool, ignored: &mut Vec<String>| {
            let v = file.get(&format!("general.sampling.{name}"))?;
            match v.as_f64().map(|x| x as f32).filter(|x| x.is_finite() && ok(*x)) {
                Some(x) => Some(x),
                None => {
                    ignored.push(format!("general.sampling.{name} = {}", shown(v)));
                    None
                }
            }
        };
        let mut ignored = vec![];
        r.temperature = float("temp", |x| x >= 0.0, &mut ignored);
        r.top_p = float("top_p", |x| x > 0.0 && x <= 1.0, &mut ignored);
        r.min_p = float("min_p", |x| (0.0..=1.0).contains(&x), &mut ignored);
        r.repetition_penalty = float("penalty_repeat", |x| x > 0.0 && x <= 10.0, &mut ignored);
        r.top_k = int(file, "top_k", &mut ignored).map(|k| usize::try_from(k).unwrap_or(0));
        r.repeat_last_n = int(file, "penalty_last_n", &mut ignored).and_then(|n| match n {
            -1 => Some(MAX_LAST_N),
            n if (0..=MAX_LAST_N as i64).contains(&n) => Some(n as usize),
            n => {
                ignored.push(format!("general.sampling.penalty_last_n = {n}"));
                None
            }
        });
        r.ignored = ignored;
        r
    }

    /// True when the file recommends nothing usable.
    pub fn is_empty(&self) -> bool {
        self.temperature.is_none()
            && self.top_k.is_none()
            && self.top_p.is_none()
            && self.min_p.is_none()
            && self.repetition_penalty.is_none()
            && self.repeat_last_n.is_none()
    }

    /// `base` with every recommended value in place of its own.
    pub fn apply(&self, base: SamplingOptions) -> SamplingOptions {
        SamplingOptions {
            temperature: self.temperature.unwrap_or(base.temperature),
            top_k: self.top_k.unwrap_or(base.top_k),
            top_p: self.top_p.unwrap_or(base.top_p),
            min_p: self.min_p.unwrap_or(base.min_p),
            repetition_penalty: self.repetition_penalty.unwrap_or(base.repetition_penalty),
            repeat_last_n: self.repeat_last_n.unwrap_or(base.repeat_last_n),
            ..base
        }
    }

    /// The recommended settings as `name value` pairs, for saying where a default came from.
    pub fn describe(&self) -> String {
        let f = |n: &str, v: Option<f32>| v.map(|v| format!("{n} {v}"));
        let u = |n: &str, v: Option<usize>| v.map(|v| format!("{n} {v}"));
        [
            f("temperature", self.temperature),
            u("top-k", self.top_k),
            f("top-p", self.top_p),
            f("min-p", self.min_p),
            f("repetition penalty", self.repetition_penalty),
            u("penalty window", self.repeat_last_n),
        ]
        .into_iter()
        .flatten()
        .collect::<Vec<_>>()
        .join(", ")
    }
}

/// An integer key's value (any integer type; a float with no fraction, as some converters write them).
fn int(file: &GgufFile, name: &str, ignored: &mut Vec<String>) -> Option<i64> {
    let v = file.get(&format!("general.sampling.{name}"))?;
    let n = match v {
        MetaValue::I8(x) => Some(i64::from(*x)),
        MetaValue::I16(x) => Some(i64::from(*x)),
        MetaValue::I32(x) => Some(i64::from(*x)),
        MetaValue::I64(x) => Some(*x),
        _ => v.as_u64().and_then(|x| i64::try_from(x).ok()),
    };
    if n.is_none() {
        ignored.push(format!("general.sampling.{name} = {}", shown(v)));
    }
    n
}

/// A metadata value as shown in a note: a number as written, anything else by its type (never the whole
/// contents of a string or an array a file might make huge).
fn shown(v: &MetaValue) -> String {
    match v.as_f64() {
        Some(x) => x.to_string(),
        None => format!("{} value", v.type_name()),
    }
}
