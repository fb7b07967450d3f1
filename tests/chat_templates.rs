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

/// Templates whose cost hides inside one instruction or one value: a tag that parses into a tree as deep as it is
/// long (the compiler would overflow the stack), shared references printed or passed to a filter (10^11 bytes
/// from a 60-byte template), a folded constant of 2^62 items, a `batch` or `slice` of 10^12 groups, loops of
/// `in`, `sum`, `==` and `.count()` on large values, values nested 100,000 deep. Each is an error within a
/// second, with the process's peak memory growing by less than 256 MiB over all of them; the harmless forms
/// still render.
#[test]
fn costs_inside_one_instruction_or_value_are_bounded() {
    let before = common::peak_rss_kib();
    let deep = [
        format!("{{{{ {}true }}}}", "not ".repeat(50_000)),
        format!("{{{{ 'a'{} }}}}", "|lower".repeat(100_000)),
        format!("{{{{ {}'a' }}}}", "'a' ~ ".repeat(100_000)),
        format!("{{{{ messages{} }}}}", ".a".repeat(200_000)),
        format!("{{{{ {}1 }}}}", "-".repeat(200_000)),
        format!("{{% if false %}}{}{{% endif %}}x", "{% elif false %}".repeat(10_000)),
        "{{ ([1, 2] * 2**61)|length }}".to_string(),
    ];
    for src in &deep {
        let e = ChatTemplate::new(src).err().unwrap_or_else(|| panic!("compiled: {}", &src[..40]));
        println!("{}..: {e}", &src[..20]);
    }
    let refused = [
        "{% set a = ['x' * 1000 * messages|length] * 10000 %}{% set b = [a] * 10000 %}{{ b }}",
        "{% set a = ['x' * 1000 * messages|length] * 10000 %}{% set b = [a] * 10000 %}{{ b ~ '' }}",
        "{% set a = ['x' * 1000 * messages|length] * 10000 %}{% set b = [a] * 10000 %}{{ b|join(',') }}",
        "{% set a = ['x' * 1000 * messages|length] * 10000 %}{% set b = [a] * 10000 %}{{ b|upper }}",
        "{% set a = ['x' * 1000 * messages|length] * 10000 %}{% set b = [a] * 10000 %}{{ raise_exception(b) }}",
        "{% set a = ['x' * 1000 * messages|length] * 10000 %}{% set b = [a] * 10000 %}{{ 'z' in b|string }}",
        "{{ [1, 2, 3, 4, 5, 6, 7, 8] * 2**61 }}",
        "{{ range(10)|batch(10**12, fill_with='x')|list }}",
        "{{ range(10)|slice(10**12)|list }}",
        "{% set a = range(100000)|list %}{% for i in range(100000) %}{% if -1 in a %}{% endif %}{% endfor %}",
        "{% set a = range(100000)|list %}{% for i in range(100000) %}{{ a|sum }}{% endfor %}",
        "{% set a = range(100000)|list %}{% set b = range(100000)|list %}{% for i in range(100000) %}{{ a == b }}{% endfor %}",
        "{% set s = 'a' * (messages|length * 10000000) %}{% for i in range(100000) %}{{ s.count('b') }}{% endfor %}",
        "{% set ns = namespace(x=[]) %}{% for i in range(100000) %}{% set ns.x = [ns.x] %}{% endfor %}{{ ns.x }}",
        "{% set ns = namespace(x={}) %}{% for i in range(100000) %}{% set ns.x = {'k': ns.x} %}{% endfor %}{{ 1 }}",
        "{% set a = ['x' * 1000 * messages|length] * 10000 %}{% set b = [a] * 10000 %}{{ debug(b) }}",
        "{{ 4 is divisibleby(0) }}",
        "{{ '{:x>100000000000}'.format('a') }}",
        "{{ '%(a)100000000000s'|format({'a': 'x'}) }}",
    ];
    for src in &refused {
        let start = Instant::now();
        let r = ChatTemplate::new(src).and_then(|t| t.render(&[Message::new("user", "hi")], true, "<s>", "</s>"));
        let took = start.elapsed();
        let e = r.expect_err(src);
        println!("{took:?} {src}: {e}");
        assert!(took < Duration::from_secs(1), "{src} took {took:?}");
    }
    // nesting through namespaces (100,000 deep was rendered on the template's own deep stack): a namespace holds no
    // namespace now
    let deep = "{% set ns = namespace(a=none) %}{% for i in range(100000) %}{% set ns.a = namespace(a=ns.a) %}\
                {% endfor %}ok";
    let e = ChatTemplate::new(deep).unwrap().render(&[Message::new("user", "hi")], true, "<s>", "</s>").unwrap_err();
    assert!(e.to_string().contains("a namespace cannot hold a namespace"), "{e}");
    let grown = common::peak_rss_kib().saturating_sub(before);
    assert!(grown < 256 << 10, "peak memory grew by {grown} KiB");
    let fine = [
        ("{{ range(5)|batch(10**12)|list }}", "[[0, 1, 2, 3, 4]]"),
        ("{{ 2 in [1, 2] }} {{ 'b' in 'abc' }} {{ 'k' in {'k': 1} }} {{ 3 in [1, 2] }}", "True True True False"),
        ("{{ [1, [2]] == [1, [2]] }} {{ {'a': 1} != {'a': 2} }} {{ 'a' < 'b' }} {{ 2 >= 3 }}", "True True True False"),
        ("{% set m = {'b': 1, 'a': 2} %}{% for k, v in m.items() %}{{ k }}{{ v }}{% endfor %}", "b1a2"),
        ("{{ ([0] * 3)|length }}{{ messages|length }}", "31"),
    ];
    for (src, want) in fine {
        let got = ChatTemplate::new(src).unwrap().render(&[Message::new("user", "hi")], true, "<s>", "</s>").unwrap();
        assert_eq!(got, want, "{src}");
    }
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

/// The sources `work_inside_tests_subscripts_filters_and_folding_is_bounded` expects refused within a second.
fn bounded_refusals() -> Vec<String> {
    let fold40 = format!("{{% if false %}}{}{{% endif %}}ok", "{{ 'x' * 100000000 }}".repeat(40));
    // a 512 KiB constant under 70 operators is folded 71 times
    let deep_fold = format!("{{{{ {}'y' * 2 ** 19{} }}}}", "x ~ (".repeat(70), ")".repeat(70));
    let refused = [
        "{% set a = range(100000)|list %}{% for i in range(100000) %}{% if -1 is in a %}{% endif %}{% endfor %}x",
        "{% set a = range(100000)|list %}{{ (range(100000)|list)|select('in', a)|list|length }}",
        "{% set a = range(100000)|list %}{% set b = range(100000)|list %}{% for i in range(100000) %}{% if a is eq(b) %}{% endif %}{% endfor %}x",
        "{% set s = 'a' * (messages|length * 10000000) %}{% for i in range(100000) %}{% if s is startingwith(s) %}{% endif %}{% endfor %}x",
        "{% set s = 'a' * (messages|length * 10000000) %}{% for i in range(100000) %}{% set t = s[::-1] %}{% endfor %}x",
        "{% set s = 'a' * (messages|length * 10000000) %}{% for i in range(100000) %}{% set t = s[1:] %}{% endfor %}x",
        "{% set s = 'a' * (messages|length * 10000000) %}{% for i in range(100000) %}{% set c = s[-1] %}{% endfor %}x",
        "{% set s = 'a' * (messages|length * 10000000) %}{% set d = {s: 1} %}{% for i in range(100000) %}{% if d[s] %}{% endif %}{% endfor %}x",
        "{% set a = range(100000)|list %}{% set b = range(100000)|list %}{% for i in range(100000) %}{% if loop.changed(a if i is odd else b) %}{% endif %}{% endfor %}x",
        "{% set ns = namespace(d={}) %}{% for i in range(60000) %}{% set ns.d = dict(ns.d, **{i|string: i}) %}{% endfor %}{{ ns.d|length }}",
        "{% set s = 'a' * (messages|length * 4000000) %}{{ (s|batch(1))|length }}",
        "{% set s = 'a' * (messages|length * 4000000) %}{{ (s|map('batch', 1))|length }}",
        "{% set s = 'a' * (messages|length * 4000000) %}{{ (s|map('map', 'batch', 1))|length }}",
        "{% set s = 'a' * (messages|length * 4000000) %}{{ (s|groupby('x'))|length }}",
        "{% set s = 'a ' * (messages|length * 2000000) %}{{ s.split()|length }}",
        "{% set a = ['x' * 1000 * messages|length] * 10000 %}{% set b = [a] * 10000 %}{{ [b]|map('string')|list }}",
        "{% set a = ['x' * 1000 * messages|length] * 10000 %}{% set b = [a] * 10000 %}{{ [b]|map('pprint')|list }}",
        "{% autoescape true %}{{ '\"' * (messages|length * 16000000) }}{% endautoescape %}",
        "{{ ('\"' * (messages|length * 4000000))|e }}",
        &fold40[..],
        "{% if false %}{{ 0 in [1] * 2**61 }}{% endif %}ok",
        "{% if false %}{{ [1] * 2**61 == [1] * 2**61 }}{% endif %}ok",
        "{% if false %}{{ ([1] * 2**61) ~ 'a' }}{% endif %}ok",
        "{% if false %}{{ x ~ (x ~ (x ~ ('y' * (2 ** 20 + 1)))) }}{% endif %}ok",
        "{% if false %}{{ '' * (2 ** 2000) }}{% endif %}ok",
        "{% if false %}{{ [[1] * 1000] * 1000 }}{% endif %}ok",
        // a chained comparison's inner compares and spread arguments are refused (nothing charges them)
        "{% set a = range(300000)|list %}{% for i in range(100000) %}{% if a == a == 1 %}{% endif %}{% endfor %}",
        "{% set l = range(500000)|list %}{% for i in range(100000) %}{{ loop.cycle(*l) }}{% endfor %}",
        "{% set m = {'a': 1} %}{{ dict(**m) }}",
        // pycompat methods: count('') never ended, strip(chars) is |s| x |chars|, split('') is Python's error,
        // a width pads each placeholder
        "{{ 'abc'.count('') }}",
        "{% set s = 'a' * (messages|length * 1000000) %}{{ s.strip(s)|length }}",
        "{% set s = 'a' * (messages|length * 8000000) %}{{ s.split('')|length }}",
        "{% set s = '\n' * (messages|length * 8000000) %}{{ s.splitlines()|length }}",
        "{{ ('{0:>4000}' * 850000).format('')|length }}",
        // one argument printed by every placeholder of a format string
        "{% set b = 'x' * (messages|length * 1000000) %}{{ ('{0}' * 20000).format(b)|length }}",
        "{% set b = 'x' * (messages|length * 1000000) %}{{ ('%(a)s' * 20000)|format({'a': b})|length }}",
        &deep_fold,
        // attribute paths walk every item inside one call (a string's '0' is a string: '0.0.0..' never ends);
        // sort builds a key of every part per comparison
        "{% set p = '0.' * 400000 ~ '0' %}{{ (['a'] * (messages|length * 100000))|map(attribute=p)|list|length }}",
        "{% set p = '0.' * 400000 ~ '0' %}{{ (['a'] * (messages|length * 100000))|selectattr(p)|list|length }}",
        "{{ (range(1000)|list)|sort(attribute='a,' * 500000)|length }}",
        "{% set a = [{'k': 'x' * messages|length}] * 4000000 %}{{ a|map(attribute='k')|list|length }}",
        // a loop's start counts a string's characters: 8 MB counted 100,000 times
        "{% set s = 'a' * (messages|length * 8000000) %}{% for i in range(100000) %}{% for c in s %}{% break %}{% endfor %}{% endfor %}ok",
        "{% for m in messages recursive %}{{ m.role }}{% endfor %}",
        // a namespace holding itself (hashed: a stack overflow; every render's values leaked) or a graph of
        // namespaces sharing one another (hashed 2^60 times); a list's error message printed outside the budget
        "{% set ns = namespace(a=1) %}{% set ns.a = ns %}{{ {'x': 1}[ns] }}",
        "{% set ns = namespace(a=1) %}{% set ns.a = [{'k': ns}] %}ok",
        "{% set st = namespace(cur=0) %}{% for i in range(60) %}{% set st.cur = namespace(a=st.cur, b=st.cur) %}{% endfor %}{{ st.cur in {'x': 1} }}",
        "{% set x = namespace(a=1) %}{% set ns = namespace(b=[x]) %}ok",
        "{% set s = 'x' * 1000000 %}{% set l = [s] * 10000 %}{% include l %}",
        "{% import 'x' as y %}ok",
        // a key that is a list is hashed whole: charged
        "{% set k = [[1] * (messages|length * 1000)] * 1000 %}{% for i in range(20) %}{{ {'a': 1}[k] }}{% endfor %}",
    ];
    refused.into_iter().map(String::from).collect()
}

/// The same operations on ordinary values, with what Jinja2 renders for them.
fn bounded_fine() -> Vec<(&'static str, &'static str)> {
    vec![
        ("{{ 'abcde'[::-1] }} {{ 'abcde'[1:] }} {{ 'abcde'[-1] }} {{ 'abcde'[:-1:2] }} {{ 'é'[1:] }}|", "edcba bcde e ac |"),
        ("{{ [1, 2, 3, 4][::-1] }} {{ messages[-1].content }} {{ messages[5] is defined }} {{ [1, 2][5:] }}", "[4, 3, 2, 1] b False []"),
        // a chain of 30,000 slices (lazy, it took 124 s)
        ("{% set ns = namespace(a=[1,2,3]) %}{% for i in range(30000) %}{% set ns.a = ns.a[::1] %}{% endfor %}{{ ns.a }}", "[1, 2, 3]"),
        ("{{ (range(6)|list)[1::2] }} {{ {'k': 3}['k'] }} {{ none[1:] }} {{ (range(4)|reverse)[1] }}", "[1, 3, 5] 3 [] 2"),
        ("{{ 2 is in [1, 2] }} {{ 'ab' is startingwith('a') }} {{ [1, 2, 3]|select('gt', 1)|list }} {{ 'A' is upper }}", "True True [2, 3] True"),
        ("{{ [1, 2]|reject('eq', 1)|list }} {{ 'x' is eq('x') }} {{ 3 is le(2) }} {{ 'ab' is endingwith('b') }}", "[2] True False True"),
        ("{% for i in [1, 1, 2] %}{{ loop.changed(i) }}{% endfor %} {{ dict({'a': 1}, b=2) }} {{ dict(c=3)['c'] }}", "TrueFalseTrue {\"a\": 1, \"b\": 2} 3"),
        ("{{ 'ab'|map('upper')|join }} {{ ['b', 'a']|sort|join }} {{ 'a,b'|split(',')|list }} {{ '<a>'|e }}", "AB ab [\"a\", \"b\"] &lt;a&gt;"),
        // namespaces as real templates use them
        ("{% set ns = namespace(found=false, items=[]) %}{% for m in messages %}{% if m.role == 'user' %}{% set ns.found = true %}{% endif %}{% set ns.items = ns.items + [m.content] %}{% endfor %}{{ ns.found }} {{ ns.items }} {{ namespace({'a': 1}).a }} {{ ns.missing is defined }}", "True [\"a\", \"b\"] 1 False"),
        // loops (the charge put before a loop's start keeps its jumps right), attribute paths
        ("{% for c in 'ab' %}{{ c }}{% else %}-{% endfor %}{% for x in nothing %}x{% else %}e{% endfor %}{% for m in messages if m.role == 'user' %}{{ loop.index }}{% endfor %}{% for i in range(3) %}{% for j in range(2) %}{% if j %}{% break %}{% endif %}{{ i }}{% endfor %}{% endfor %}", "abe1012"),
        ("{% macro f(xs) %}{% for x in xs %}{{ x }}{% endfor %}{% endmacro %}{{ f('xy') }}{{ f([1, 2]) }} {{ messages|map(attribute='role')|join(',') }} {{ messages|selectattr('role', 'eq', 'user')|map(attribute='content')|first }} {{ [{'a': {'b': 2}}, {'a': {'b': 1}}]|sort(attribute='a.b')|map(attribute='a.b')|list }}", "xy12 user,assistant a [1, 2]"),
        ("{% autoescape true %}{{ '<&>' }}{% endautoescape %} {{ 'x' * 3 }} {{ [0] * 2 }} {{ 2 ** 10 }}", "&lt;&amp;&gt; xxx [0, 0] 1024"),
    ]
}

/// The second round's classes: work inside a Jinja test (also one `select` applies), a subscript or slice of a
/// large string, a chain of lazy slices, `loop.changed` and `dict(**)` copies, filters that build millions of
/// items from one string (also through `map`), `{% autoescape %}` sextupling the output, and constants that the
/// compiler would fold into gigabytes or evaluate for ever. Each is an error within a second, the process's peak
/// memory growing by less than 256 MiB over all of them; the same operations on ordinary values render as
/// Jinja2 renders them.
#[test]
fn work_inside_tests_subscripts_filters_and_folding_is_bounded() {
    let before = common::peak_rss_kib();
    let refused = bounded_refusals();
    for src in &refused {
        let start = Instant::now();
        let r = ChatTemplate::new(src).and_then(|t| t.render(&[Message::new("user", "hi")], true, "<s>", "</s>"));
        let took = start.elapsed();
        let e = r.expect_err(&src[..src.len().min(120)]);
        println!("{took:?} {}: {e}", &src[..src.len().min(120)]);
        assert!(took < Duration::from_secs(1), "{} took {took:?}", &src[..src.len().min(120)]);
    }
    let grown = common::peak_rss_kib().saturating_sub(before);
    assert!(grown < 256 << 10, "peak memory grew by {grown} KiB");
    let fine = bounded_fine();
    for (src, want) in fine {
        let t = ChatTemplate::new(src).unwrap_or_else(|e| panic!("{src}: {e}"));
        let got = t.render(&[Message::new("user", "a"), Message::new("assistant", "b")], true, "<s>", "</s>");
        assert_eq!(got.as_deref().unwrap_or_else(|e| panic!("{src}: {e}")), want, "{src}");
    }
}
