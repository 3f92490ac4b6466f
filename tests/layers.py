#!/usr/bin/env python3
"""Checks that the agent's modules are layers: each top-level module of agent/src imports only
from modules of its own layer or below, and no two top-level modules import each other, directly
or through others (a cycle).

The layers, bottom to top, are the ones agent/src/lib.rs and docs/architecture.md describe.
An import is any `crate::<module>` path in a module's source (a `use` line or a qualified path),
test modules included: a test that reaches up would hide a dependency the layering forbids.

Exit 0 when the layering holds; 1 with one line per violation; 2 when the source tree is not as
expected (an unknown module: add it to LAYERS). `--self-test` checks the checker.
"""

import pathlib
import re
import sys

# Bottom to top. A module may import from its own layer (without a cycle) and any layer below.
LAYERS = [
    {"host", "output", "retry", "telemetry", "contact", "heap", "exposition", "deadline"},
    {"collect", "spark", "probe"},
    {"kube_api", "leader", "apimon"},
    {"scan"},
    {"report", "metrics", "events", "conditions", "repair", "fence", "nrt"},
    {"config", "daemon"},
    {"cli"},
]

# Items of the crate root (lib.rs), which every layer may use.
ROOT_ITEMS = {"block_on", "runtime"}

CRATE_PATH = re.compile(r"\bcrate::([a-z_][a-z0-9_]*)")
USE_GROUP = re.compile(r"\buse\s+crate::\{([^;]*)\}", re.S)
COMMENT = re.compile(r"//[^\n]*")


def layer_of(module):
    for i, layer in enumerate(LAYERS):
        if module in layer:
            return i
    return None


def imports_of(text):
    """Top-level modules named by `crate::x` paths, comments left out."""
    code = COMMENT.sub("", text)
    found = set(CRATE_PATH.findall(code))
    for group in USE_GROUP.findall(code):
        for item in group.split(","):
            name = item.strip().split("::")[0].split(" ")[0]
            if re.fullmatch(r"[a-z_][a-z0-9_]*", name or "") and name != "self":
                found.add(name)
    return found


def graph(src):
    """{module: {imported modules}} for every top-level module of `src`."""
    edges = {}
    for path in sorted(src.rglob("*.rs")):
        rel = path.relative_to(src)
        if rel.name in ("lib.rs", "main.rs") and len(rel.parts) == 1:
            continue
        module = rel.parts[0].removesuffix(".rs")
        deps = imports_of(path.read_text(encoding="utf-8"))
        deps.discard(module)
        deps -= ROOT_ITEMS
        edges.setdefault(module, set()).update(deps)
    return edges


def cycles(edges):
    """Each cycle among modules, once, as a list that starts and ends with the same module."""
    found, seen = [], set()

    def walk(node, stack):
        for nxt in sorted(edges.get(node, ())):
            if nxt in stack:
                cycle = stack[stack.index(nxt):] + [nxt]
                key = frozenset(cycle)
                if key not in seen:
                    seen.add(key)
                    found.append(cycle)
            elif len(stack) < len(edges):
                walk(nxt, stack + [nxt])

    for start in sorted(edges):
        walk(start, [start])
    return found


def violations(edges):
    problems = []
    for module, deps in sorted(edges.items()):
        mine = layer_of(module)
        if mine is None:
            problems.append(f"unknown module {module}: add it to a layer in tests/layers.py")
            continue
        for dep in sorted(deps):
            theirs = layer_of(dep)
            if theirs is None:
                problems.append(f"{module} imports crate::{dep}, which is not a module of any layer")
            elif theirs > mine:
                problems.append(f"{module} (layer {mine + 1}) imports {dep} (layer {theirs + 1}): an upward import")
    for cycle in cycles(edges):
        problems.append("import cycle: " + " -> ".join(cycle))
    return problems


def self_test():
    assert imports_of("use crate::host::HostPaths;\n// crate::cli in a comment\nfn f() { crate::scan::x(); }") == {"host", "scan"}
    assert imports_of("use crate::{config::{self, Flags}, host};") == {"config", "host"}
    assert violations({"host": {"cli"}, "cli": set()}) == ["host (layer 1) imports cli (layer 7): an upward import"]
    both = violations({"collect": {"spark"}, "spark": {"collect"}})
    assert both == ["import cycle: collect -> spark -> collect"], both
    assert violations({"cli": {"host", "scan"}, "scan": {"collect"}, "collect": {"host"}, "host": set()}) == []
    assert violations({"widgets": set()})[0].startswith("unknown module widgets")
    print("layers.py self-test: 6 passed, 0 failed")


def main():
    if sys.argv[1:] == ["--self-test"]:
        self_test()
        return 0
    src = pathlib.Path(__file__).resolve().parent.parent / "agent" / "src"
    edges = graph(src)
    if not edges:
        print(f"no modules found under {src}", file=sys.stderr)
        return 2
    problems = violations(edges)
    for p in problems:
        print(f"layers: {p}")
    if problems:
        return 1
    print(f"layers: {len(edges)} modules in {len(LAYERS)} layers, no upward import, no cycle")
    return 0


if __name__ == "__main__":
    sys.exit(main())
