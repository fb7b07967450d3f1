//! Chat templates as Hugging Face's `apply_chat_template` renders them, and templates that try to exhaust the
//! renderer. The expected texts (`tests/data/chat_templates/expected.json`) were rendered by transformers' own
//! renderer from real models' templates (`scripts/make_chat_template_fixtures.py`); the hostile templates
//! (`tests/data/chat_templates/hostile/`) must fail with an error within a second and a bounded memory.

mod common;

use std::time::{Duration, Instant};
use webtensor::models::{ChatTemplate, Message};

fn fixture(name: &str) -> String {
    let path = common::repo_file(&format!("tests/data/chat_templates/{name}"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

#[test]
fn real_templates_render_as_transformers_does() {
    let cases: serde_json::Value = serde_json::from_str(&fixture("expected.json")).unwrap();
    let date = (2024, 7, 26);
    let mut checked = 0;
    let mut failures = Vec::new();
    for case in cases["cases"].as_array().unwrap() {
        let name = case["template"].as_str().unwrap();
        let template = ChatTemplate::with_date(&fixture(&format!("{name}.jinja")), Some(date))
            .unwrap_or_else(|e| panic!("{name} does not compile: {e}"));
        let messages: Vec<Message> = case["messages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| Message::new(m["role"].as_str().unwrap(), m["content"].as_str().unwrap()))
            .collect();
        let got = template.render_with(
            &messages,
            case["add_generation_prompt"].as_bool().unwrap(),
            case["bos_token"].as_str(),
            case["eos_token"].as_str(),
        );
        let what = format!("{name} / {} / generation prompt {}", case["conversation"], case["add_generation_prompt"]);
        match (&got, case["expected"].as_str(), case["error"].as_str()) {
            (Ok(text), Some(want), _) if text == want => {}
            (Err(e), None, Some(want)) if e.to_string().contains(want) => {}
            _ => failures
                .push(format!("{what}:\n  got  {got:?}\n  want {:?}", case.get("expected").or(case.get("error")))),
        }
        checked += 1;
    }
    println!("{checked} cases, {} failed", failures.len());
    assert!(checked >= 150, "only {checked} cases");
    assert!(failures.is_empty(), "{} of {checked} cases differ:\n{}", failures.len(), failures.join("\n"));
}

/// Each hostile template stops with an error in well under a second, and the process's peak memory grows by
/// less than 512 MiB over the whole test.
#[test]
fn hostile_templates_stop_within_a_second_and_bounded_memory() {
    let before = common::peak_rss_kib();
    for name in ["loop", "grow", "recursion", "huge-output"] {
        let t = ChatTemplate::new(&fixture(&format!("hostile/{name}.jinja"))).unwrap();
        let start = Instant::now();
        let r = t.render(&[Message::new("user", "hi")], true, "<s>", "</s>");
        let took = start.elapsed();
        println!("{name}: {took:?}: {:?}", r.as_ref().map(String::len));
        let e = r.expect_err(name);
        assert!(took < Duration::from_secs(1), "{name} took {took:?}");
        assert!(!e.to_string().is_empty());
    }
    let e = ChatTemplate::new(&fixture("hostile/syntax.jinja")).err().expect("a template that does not parse");
    assert!(e.to_string().contains("syntax error"), "{e}");
    let grown = common::peak_rss_kib().saturating_sub(before);
    assert!(grown < 512 << 10, "peak memory grew by {grown} KiB");
}

/// The Jinja that real templates use beyond the fixtures: loop controls, macros, namespaces, Python's string
/// and dict methods, whitespace control as transformers sets it.
#[test]
fn jinja_features_of_hugging_face_templates() {
    let cases = [
        ("{% for i in range(5) %}{% if i == 1 %}{% continue %}{% endif %}{% if i == 3 %}{% break %}{% endif %}{{ i }}{% endfor %}", "02"),
        ("{% macro q(x) %}[{{ x }}]{% endmacro %}{{ q('a') }}{{ q(1) }}", "[a][1]"),
        ("{% set ns = namespace(n=0) %}{% for m in messages %}{% set ns.n = ns.n + 1 %}{% endfor %}{{ ns.n }}", "2"),
        ("{{ 'hello world'.title() }} {{ ' x '.strip() }}|{{ 'a,b'.split(',')|join('+') }}", "Hello World x|a+b"),
        ("{% set d = {'a': 1, 'b': 2} %}{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}{{ d.get('c', 3) }}", "a=1;b=2;3"),
        ("{{ {'k': 'é\"', 'n': [1, 2.5, none, true]}|tojson }}", "{\"k\": \"é\\\"\", \"n\": [1, 2.5, null, true]}"),
        ("{{ 'é'|tojson(ensure_ascii=True) }} {{ [1]|tojson(indent=2) }}", "\"\\u00e9\" [\n  1\n]"),
        ("{{ 'x'.replace('x', 'yz') }}{{ 'ab'|replace('b', 'c') }}{{ 'Ab'.startswith('A') }}", "yzacTrue"),
        ("a\n  {% if true %}\nb\n  {% endif %}\nc", "a\nb\nc"),
        ("{{ raise_exception('no system role') }}", "ERROR:no system role"),
    ];
    for (src, want) in cases {
        let t = ChatTemplate::new(src).unwrap_or_else(|e| panic!("{src}: {e}"));
        let got = t.render(&[Message::new("user", "a"), Message::new("assistant", "b")], false, "", "");
        match want.strip_prefix("ERROR:") {
            Some(msg) => assert!(got.as_ref().is_err_and(|e| e.to_string().contains(msg)), "{src}: {got:?}"),
            None => assert_eq!(got.as_deref().unwrap_or_else(|e| panic!("{src}: {e}")), want, "{src}"),
        }
    }
}
