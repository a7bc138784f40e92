"""The imports read as the layers: flows -> stages -> components (r1/) and data builders (data/).

Every import counts, at module level or inside a function (a function-level import is still a
dependency): no stage imports another stage, nothing below flows/ imports flows/, components and
data builders import no stage, and no module reaches itself through its imports.
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import ROOT

PACKAGES = ("r1", "data", "stages", "flows")


def _modules() -> dict[str, Path]:
    out = {}
    for pkg in PACKAGES:
        for path in (ROOT / pkg).rglob("*.py"):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join(parts)] = path
    return out


def _imports(path: Path, name: str, known: set[str]) -> set[str]:
    """Project modules that ``path`` imports (``from pkg import mod`` counts ``pkg.mod``)."""
    found = set()
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(
                    package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else [])
                )
            found.add(base)
            found |= {f"{base}.{a.name}" for a in node.names}
    return {m for m in found if m in known and m != name}


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: _imports(path, name, set(modules)) for name, path in modules.items()}


def _layer(module: str) -> str:
    return module.split(".")[0]


def test_no_stage_imports_another_and_nothing_imports_upwards():
    bad = []
    for module, deps in _graph().items():
        for dep in deps:
            up = {"r1": {"stages", "flows"}, "data": {"stages", "flows"}, "stages": {"flows"}}.get(
                _layer(module), set()
            )
            if _layer(dep) in up:
                bad.append(f"{module} imports {dep}")
            if _layer(module) == "stages" and _layer(dep) == "stages" and dep != "stages":
                bad.append(f"{module} imports {dep}")
    assert not bad, bad


def test_no_import_cycles():
    graph = _graph()
    cycles, state = [], {}

    def visit(m: str, path: list[str]) -> None:
        state[m] = "open"
        for dep in sorted(graph[m]):
            if dep.startswith(f"{m}.") or m.startswith(f"{dep}."):
                continue  # a package and its own modules: Python imports the package first
            if state.get(dep) == "open":
                cycles.append(
                    " -> ".join([*path[path.index(dep) :], dep]) if dep in path else f"{m} -> {dep}"
                )
            elif dep not in state:
                visit(dep, [*path, dep])
        state[m] = "done"

    for m in sorted(graph):
        if m not in state:
            visit(m, [m])
    assert not cycles, cycles
