#!/usr/bin/env python3
"""Structure checks that CI runs: no import cycle between src/'s modules, at most one import against the stage
order (STAGES), no function over 80 lines (in src/, tests/, benches/, examples/ and web/; WGSL beside its Rust in
src/) but the few named in LONG_FUNCTIONS with their reasons, and every graph op documented.

Modules are files (src/a/b.rs and src/a/b/mod.rs are module a::b). An edge A -> B means A's code names an item of
B (`use crate::b::..`, `use super::..`, `crate::b::..` in code); a name re-exported by a module (`pub use x::Y`) is
followed to the module that defines it, and `mod` declarations are not edges. Any strongly connected component of
more than one module is a cycle. Function length counts the lines from `fn` to its closing brace.

    python3 scripts/check-structure.py [--max-fn-lines 80]
"""
import os
import re
import sys

SRC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src")

# The library's stages, lowest first: a module may import from its own stage and the ones below. The path of data
# (docs/kernels.md) from the element types up to the model runners and the bindings.
STAGES = [
    ["dtype"],
    ["quant", "error"],
    ["shape", "ops", "caps", "tuning"],
    ["tensor", "options", "run"],
    ["resident"],
    ["graph", "io"],
    ["compile"],
    ["backend"],
    ["device"],
    [""],  # lib.rs: the public face's re-exports
    ["models"],
    ["wasm"],
]
# Imports against the stage order that are allowed, at most this many (each named where it is kept).
MAX_AGAINST_STAGES = 1
# dtype -> quant: the type table takes each block type's sizes and scale offsets from its block struct.

# Functions allowed past the limit, with the reason each must be longer.
LONG_FUNCTIONS = {
    "src/backend/cpu/qdot/repack.rs:tile": "an AVX-512 VNNI kernel's inner tile: its accumulators stay in registers "
    "only while the loop is one function",
    "src/backend/gpu/kernels/attention.wgsl:main": "a GPU kernel's entry: its workgroup memory, barriers and "
    "registers in one function (a helper call per tile costs registers on drivers that do not inline)",
}


def module_of(path):
    rel = os.path.relpath(path, SRC)[:-3].split(os.sep)
    if rel[-1] == "mod":
        rel = rel[:-1]
    if rel in (["lib"], ["main"]):
        return ""
    return "::".join(rel)


def strip_comments(text):
    text = re.sub(r"//[^\n]*", "", text)
    return re.sub(r'"(?:\\.|[^"\\])*"', '""', text)


def use_trees(text):
    """Every path a `use` declaration names, expanded from its braces."""
    out = []
    for m in re.finditer(r"\buse\s+([^;]+);", text):
        out.extend(expand(m.group(1).replace("\n", " ").replace(" ", "")))
    return out


def expand(tree):
    i = tree.find("{")
    if i < 0:
        return [tree.split(" as ")[0]]
    prefix, inner = tree[:i], tree[i + 1 : tree.rfind("}")]
    parts, depth, cur = [], 0, ""
    for ch in inner:
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
            continue
        depth += ch == "{"
        depth -= ch == "}"
        cur += ch
    parts.append(cur)
    return [p for part in parts if part for p in expand(prefix + part)]


def module_graph():
    """Every module of the library crate and the modules each imports from."""
    files = {}
    for root, _, names in os.walk(SRC):
        for n in names:
            p = os.path.join(root, n)
            # the library crate only: the binary (main.rs, cli/) is a crate of its own over the public API
            if n.endswith(".rs") and n != "main.rs" and not os.path.relpath(p, SRC).startswith("cli"):
                text = open(p).read()
                # unit tests (a `#[cfg(test)] mod tests` at the end) are not part of the layering
                cut = text.find("#[cfg(test)]\nmod tests")
                files[module_of(p)] = text if cut < 0 else text[:cut]
    modules = set(files)

    children = {m: set(re.findall(r"^\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+(\w+)\s*;", t, re.M)) for m, t in files.items()}

    def absolute(mod, path):
        segs = path.split("::")
        base = mod.split("::") if mod else []
        if segs[0] in children.get(mod, ()):
            return base + segs
        if segs[0] == "crate":
            segs = segs[1:]
            base = []
        elif segs[0] in ("super", "self"):
            while segs and segs[0] in ("super", "self"):
                if segs.pop(0) == "super":
                    base = base[:-1] if base else []
        else:
            return None  # an external crate or a local name
        return base + segs

    reexports = {}  # (module, name) -> absolute segments of the source
    for mod, text in files.items():
        for m in re.finditer(r"\bpub(?:\([^)]*\))?\s+use\s+([^;]+);", strip_comments(text)):
            for p in expand(m.group(1).replace("\n", " ").replace(" ", "")):
                segs = absolute(mod, p)
                name = p.split("::")[-1].split(" as ")[-1]
                if segs is None:
                    segs = (mod.split("::") if mod else []) + p.split("::")
                reexports[(mod, name)] = segs

    def resolve(segs, depth=0):
        """The module defining the item named by `segs`."""
        for cut in range(len(segs), -1, -1):
            m = "::".join(segs[:cut])
            if m in modules:
                rest = segs[cut:]
                if rest and (m, rest[0]) in reexports and depth < 10:
                    return resolve(reexports[(m, rest[0])] + rest[1:], depth + 1)
                return m
        return None

    edges = {m: set() for m in modules}
    for mod, text in files.items():
        code = strip_comments(text)
        kids = "|".join(sorted(children[mod])) or "crate"
        paths = use_trees(code) + re.findall(r"(?<![\w:])(?:crate|super|" + kids + r")(?:::\w+)+", code)
        for p in paths:
            segs = absolute(mod, p)
            if segs is None:
                continue
            target = resolve(segs)
            if target is not None and target != mod:
                edges[mod].add(target)
    return modules, edges


def main():
    max_fn = 80
    if "--max-fn-lines" in sys.argv:
        max_fn = int(sys.argv[sys.argv.index("--max-fn-lines") + 1])
    modules, edges = module_graph()
    failures = []
    failures += against_stages(edges)
    # Tarjan's strongly connected components
    index, low, stack, on, sccs = {}, {}, [], set(), []

    def strong(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges[v]:
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            sccs.append(comp)

    sys.setrecursionlimit(10000)
    for v in sorted(modules):
        if v not in index:
            strong(v)
    for comp in sccs:
        if len(comp) > 1:
            names = sorted(c or "crate" for c in comp)
            detail = "; ".join(f"{a or 'crate'} -> {b or 'crate'}" for a in comp for b in sorted(edges[a]) if b in comp)
            failures.append(f"import cycle between {', '.join(names)} ({detail})")
    # functions of at most max_fn lines, in the library (its WGSL too) and in the tests and pages' scripts
    failures += [f for f in long_functions(("src", "tests", "benches", "examples", "web"), max_fn) if not allowed_long(f)]
    # every public op of the graph API documents its shapes, dtypes, errors and reference
    ops_dir = os.path.join(SRC, "graph")
    undocumented = []
    for n in sorted(x for x in os.listdir(ops_dir) if x != "mod.rs"):  # mod.rs: accessors, not ops
        lines = open(os.path.join(ops_dir, n)).read().split("\n")
        for i, line in enumerate(lines):
            m = re.match(r"\s*pub fn (\w+)", line)
            if not m:
                continue
            j, doc = i - 1, []
            while j >= 0 and (lines[j].strip().startswith("///") or lines[j].strip().startswith("#[")):
                doc.append(lines[j])
                j -= 1
            text = "\n".join(doc)
            missing = [h for h in ("# Shapes", "# DTypes", "# Errors", "# Reference") if h not in text]
            if missing and "impl Graph" in "\n".join(lines[:i]):
                undocumented.append(f"src/graph/{n}:{i + 1}: Graph::{m.group(1)} lacks {', '.join(missing)}")
    failures += undocumented
    for f in failures:
        print(f)
    print(f"{len(modules)} modules, {sum(len(e) for e in edges.values())} module edges: "
          f"{'no import cycle' if not any('cycle' in f for f in failures) else 'CYCLES'}; "
          f"{sum('lines (max' in f for f in failures)} functions over {max_fn} lines")
    return 1 if failures else 0


def stage_of(module):
    top = module.split("::")[0]
    for i, names in enumerate(STAGES):
        if top in names:
            return i
    return None


def against_stages(edges):
    """Failures: a module in no stage, or more than MAX_AGAINST_STAGES imports against the stage order (all named)."""
    failures = [f"module {m or 'crate'} is in no stage of STAGES" for m in sorted(edges) if stage_of(m) is None]
    against = sorted(f"{a or 'crate'} -> {b}" for a, bs in edges.items() for b in bs
                     if stage_of(a) is not None and stage_of(b) is not None and stage_of(b) > stage_of(a))
    print(f"{len(against)} import(s) against the stage order (at most {MAX_AGAINST_STAGES}): {', '.join(against)}")
    if len(against) > MAX_AGAINST_STAGES:
        failures.append(f"{len(against)} imports against the stage order: {', '.join(against)}")
    return failures


def allowed_long(failure):
    """Whether a long-function failure ('path:line: fn name has ...') is one LONG_FUNCTIONS names."""
    path, _, rest = failure.partition(":")
    name = rest.split(" fn ", 1)[1].split(" ", 1)[0] if " fn " in rest else ""
    return f"{path}:{name}" in LONG_FUNCTIONS


# A function's first line, by language: Rust, WGSL (src/backend/gpu/), JavaScript (web/, tests/e2e/: declarations, methods
# and arrow functions bound to a name).
FN_START = {
    ".rs": r"\s*(?:pub(?:\([^)]*\))?\s+)?(?:async\s+)?(?:unsafe\s+)?(?:const\s+)?fn\s+(\w+)",
    ".wgsl": r"\s*fn\s+(\w+)",
    ".js": r"\s*(?:export\s+)?(?:async\s+)?(?:function\s*\*?\s*(\w+)|(?:const|let)\s+(\w+)\s*=\s*(?:async\s+)?(?:\([^)]*\)|\w+)\s*=>\s*\{|(?:static\s+)?(?!if\b|for\b|while\b|switch\b|catch\b|return\b)(\w+)\s*\([^)]*\)\s*\{)",
}
FN_START[".mjs"] = FN_START[".js"]


def strip_any_strings(line):
    """A line without comments and without '...', "..." and `...` strings (one line's worth)."""
    line = re.sub(r"//[^\n]*", "", line)
    return re.sub(r"'(?:\\.|[^'\\])*'|\"(?:\\.|[^\"\\])*\"|`(?:\\.|[^`\\])*`", "''", line)


def long_functions(tops, max_fn):
    """'path:line: fn name has N lines (max M)' for each function longer than max_fn under the folders `tops`."""
    root = os.path.join(SRC, "..")
    out = []
    for top in tops:
        for dirpath, dirs, names in os.walk(os.path.join(root, top)):
            dirs[:] = [d for d in dirs if d not in ("node_modules", "vendor", "pkg", "models", "data", "snapshots")]
            for n in sorted(names):
                ext = os.path.splitext(n)[1]
                if ext not in FN_START:
                    continue
                p = os.path.join(dirpath, n)
                lines = open(p, errors="replace").read().split("\n")
                for i, line in enumerate(lines):
                    m = re.match(FN_START[ext], line)
                    if not m or line.rstrip().endswith(";"):
                        continue
                    name = next(g for g in m.groups() if g) if m.groups() else "?"
                    depth, start, end = 0, None, None
                    strip = strip_comments if ext == ".rs" else strip_any_strings
                    for j in range(i, min(len(lines), i + 5000)):
                        code = strip(lines[j])
                        for ch in code:
                            if ch == "{":
                                depth += 1
                                start = j if start is None else start
                            elif ch == "}":
                                depth -= 1
                        if start is not None and depth <= 0:
                            end = j
                            break
                        if start is None and code.rstrip().endswith(";"):
                            break
                    if end is not None and end - i + 1 > max_fn:
                        out.append(f"{os.path.relpath(p, root)}:{i + 1}: fn {name} has {end - i + 1} lines (max {max_fn})")
    return out


if __name__ == "__main__":
    sys.exit(main())
