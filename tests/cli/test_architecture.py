"""The package's layers (docs/architecture.md): imports point down; no module imports itself back.

Every import counts, module-level and run-time (inside a function) alike.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "privfl"
# Lowest first; a module may import from its own layer or any layer listed before it.
LAYERS = [
    {"errors"},
    {"config"},
    {"crypto", "mechanisms", "data"},
    {"protocol"},
    {"learning"},
    {"parties"},
    {"runs"},
    {"tools"},
    {"cli", "__main__"},
]
RANK = {top: rank for rank, tops in enumerate(LAYERS) for top in tops}


def modules() -> dict[str, Path]:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = ("privfl", *path.relative_to(PACKAGE).with_suffix("").parts)
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


def imports(path: Path, known: dict[str, Path]) -> set[str]:
    """Every privfl module ``path`` imports (its packages' ``__init__`` too), anywhere in it."""
    targets: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names: list[str] = []
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("privfl"):
            for alias in node.names:
                full = f"{node.module}.{alias.name}"
                names.append(full if full in known else node.module)
        elif isinstance(node, ast.Import):
            names += [a.name for a in node.names if a.name.startswith("privfl")]
        for name in names:
            parts = name.split(".")
            targets |= {".".join(parts[:i]) for i in range(2, len(parts) + 1)} & known.keys()
    return targets


def graph() -> dict[str, set[str]]:
    known = modules()
    return {name: imports(path, known) - {name} for name, path in known.items()}


def layer(module: str) -> int:
    return RANK[module.split(".")[1]] if "." in module else 0


def test_every_top_level_package_has_a_layer() -> None:
    tops = {name.split(".")[1] for name in modules() if "." in name}
    assert tops <= RANK.keys(), tops - RANK.keys()


def test_imports_point_down() -> None:
    upward = [
        f"{source} imports {target}"
        for source, targets in graph().items()
        for target in targets
        if "." in source and layer(target) > layer(source)
    ]
    assert upward == []


def test_no_import_cycle() -> None:
    edges = graph()
    state: dict[str, int] = {}  # 1 = on the current path, 2 = done
    cycles: list[list[str]] = []

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(edges[node]):
            if state.get(nxt) == 1:
                cycles.append([*path[path.index(nxt) :], nxt])
            elif nxt not in state:
                visit(nxt, [*path, nxt])
        state[node] = 2

    for start in sorted(edges):
        if start not in state:
            visit(start, [start])
    assert cycles == []


def test_the_checker_sees_run_time_imports(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text("def f():\n    from privfl.cli import main\n    return main\n")
    assert "privfl.cli" in imports(module, modules())
