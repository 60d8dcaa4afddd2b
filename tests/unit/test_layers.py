"""The package shows its architecture: areas by role, imports one way, no circle (docs/design.md, Architecture).

The import graph is read statically (every ``import``, lazy ones inside functions included), so an arrow
hidden in a function body counts as much as one at the top of a module.
"""

from __future__ import annotations

import ast
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("skillflow", "flows", "tasks")
AREAS = {
    "kernel",
    "capture",
    "injection",
    "promotion",
    "lifecycle",
    "storage",
    "quality",
    "operations",
    "lab",
    "cli",
}
# What each domain area may import inside skillflow (besides itself); the lab and the CLI may import anything.
ALLOWED = {
    "kernel": set(),
    "storage": {"kernel"},
    "capture": {"kernel", "storage"},
    "injection": {"kernel", "storage"},
    "promotion": {"kernel", "storage", "injection"},
    "lifecycle": {"kernel", "storage", "injection", "promotion"},
    "quality": {"kernel", "storage"},
    "operations": {"kernel", "storage", "injection", "promotion", "lifecycle", "quality"},
    # The runtime redacts live requests with the promotion's redaction, so both sides compare in one form.
    "runtime": {"kernel", "storage", "capture", "injection", "promotion"},
}
FORBIDDEN_IN_DOMAIN = {"prefect", "flows", "tasks"}


def modules() -> dict[str, Path]:
    found = {}
    for pkg in PACKAGES:
        for path in (ROOT / pkg).rglob("*.py"):
            name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            found[name.removesuffix(".__init__")] = path
    return found


def imports(path: Path, known: dict[str, Path]) -> set[str]:
    """Every imported name: project modules resolved to the module, third-party ones to the top package."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [
                f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in known else node.module for a in node.names
            ]
        else:
            continue
        for name in names:
            if name.split(".")[0] not in PACKAGES:
                out.add(name.split(".")[0])
                continue
            while name and name not in known:
                name = name.rpartition(".")[0]
            if name:
                out.add(name)
    return out


def area(module: str) -> str:
    parts = module.split(".")
    return parts[1] if parts[0] == "skillflow" and len(parts) > 1 else parts[0]


def graph() -> dict[str, set[str]]:
    known = modules()
    return {m: {t for t in imports(p, known) if t != m} for m, p in known.items()}


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
            if w not in edges:
                continue
            if w not in index:
                visit(w)
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
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def test_the_package_is_grouped_by_role() -> None:
    entries = {p.name for p in (ROOT / "skillflow").iterdir() if not p.name.startswith(("_", "."))}
    assert {e for e in entries if (ROOT / "skillflow" / e).is_dir()} == AREAS
    assert {e for e in entries if e.endswith(".py")} == {"runtime.py"}


def test_the_import_graph_has_no_circle() -> None:
    edges = graph()
    assert len(edges) > 100
    assert cycles(edges) == []


def test_a_planted_circle_is_found() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_the_domain_imports_one_way() -> None:
    wrong = []
    for module, targets in graph().items():
        if not module.startswith("skillflow") or area(module) in {"lab", "cli"}:
            continue
        own = area(module)
        for target in targets:
            if target.split(".")[0] in FORBIDDEN_IN_DOMAIN or (
                target.startswith("skillflow.") and area(target) not in ALLOWED[own] | {own}
            ):
                wrong.append(f"{module} → {target}")
    assert wrong == []


def test_tasks_never_import_flows_and_flows_import_no_other_flow() -> None:
    edges = graph()
    assert [m for m in edges if m.startswith("tasks") and any(t.startswith("flows") for t in edges[m])] == []
    crossing = {
        m: sorted(t for t in edges[m] if t.startswith("flows.") and t != m)
        for m in edges
        if m.startswith("flows.") and m != "flows.serve"
    }
    assert {m: ts for m, ts in crossing.items() if ts} == {}


def test_the_domain_never_loads_prefect_and_no_product_module_loads_sqlglot_at_run_time() -> None:
    """Belt and braces, in one fresh interpreter: importing every domain module loads no prefect, flows or tasks;
    importing every ``skillflow`` module after them (lab and CLI too) loads no sqlglot, the dev-only parser of
    the Oracle checker in tests/support/oracle."""
    edges = graph()
    domain = sorted(m for m in edges if m.startswith("skillflow") and area(m) not in {"lab", "cli"})
    rest = sorted(m for m in edges if m.startswith("skillflow") and m not in domain)
    code = (
        "import importlib, sys\n"
        f"for name in {domain!r}:\n"
        "    importlib.import_module(name)\n"
        "bad = sorted({m.split('.')[0] for m in sys.modules} & {'prefect', 'flows', 'tasks'})\n"
        "assert not bad, bad\n"
        f"for name in {rest!r}:\n"
        "    importlib.import_module(name)\n"
        "assert 'sqlglot' not in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


def test_no_product_module_imports_the_dev_only_sql_checker() -> None:
    """The Oracle checker needs sqlglot (a dev extra), so it lives in tests/support, outside the wheel: no module
    of skillflow, flows or tasks imports sqlglot or anything under tests (lazy imports included)."""
    edges = graph()
    assert sorted(m for m, targets in edges.items() if "sqlglot" in targets or "tests" in targets) == []
    wheel = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["hatch"]["build"]["targets"]
    assert sorted(wheel["wheel"]["packages"]) == sorted(PACKAGES)  # tests/support/oracle is not shipped
