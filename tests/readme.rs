//! README's first screen stays a first screen, and what it and docs/ say stays true: under 120 lines, every
//! relative link to a file that exists, and every `webtensor` command of its shell blocks a subcommand whose help
//! lists each flag the line passes (the commands themselves run in tests/cli.rs and the model suites).
#![cfg(feature = "cli")]

mod common;

use common::cli::{assert_success, scratch, webtensor};

fn read(rel: &str) -> String {
    std::fs::read_to_string(common::repo_file(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

#[test]
fn the_first_screen_is_short() {
    let n = read("README.md").lines().count();
    assert!(n < 120, "README.md has {n} lines: the rest belongs in docs/");
}

#[test]
fn every_relative_link_names_a_file() {
    let mut pages = vec!["README.md".to_string()];
    for e in std::fs::read_dir(common::repo_file("docs")).unwrap() {
        pages.push(format!("docs/{}", e.unwrap().file_name().to_string_lossy()));
    }
    for page in pages {
        let text = read(&page);
        let dir = std::path::Path::new(&page).parent().unwrap().to_path_buf();
        for (i, _) in text.match_indices("](") {
            let target: String = text[i + 2..].chars().take_while(|&c| c != ')').collect();
            if target.starts_with("http") || target.starts_with('#') {
                continue;
            }
            let path = dir.join(target.split('#').next().unwrap());
            let full = common::repo_file(path.to_str().unwrap());
            assert!(std::path::Path::new(&full).exists(), "{page}: the link to {target} names no file");
        }
    }
}

#[test]
fn every_command_on_the_first_screen_exists_with_its_flags() {
    let dir = scratch("readme");
    let text = read("README.md");
    let mut checked = 0;
    for line in text.lines().map(str::trim).filter(|l| l.starts_with("webtensor ")) {
        let words: Vec<&str> = line.split('#').next().unwrap().split_whitespace().collect();
        let sub = words[1];
        let help = assert_success(&webtensor(&dir, &[sub, "--help"])).to_string();
        for flag in words.iter().filter(|w| w.starts_with("--")) {
            assert!(help.contains(flag), "README: `{line}`: `webtensor {sub} --help` has no {flag}");
        }
        checked += 1;
    }
    assert!(checked >= 5, "{checked} commands found in README.md");
}
