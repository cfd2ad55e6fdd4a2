"""The package's layers (docs/architecture.md): imports point down; no module imports itself back.

Every import counts, module-level and run-time (inside a function) alike.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "privfl"
# Lowest first; a module may import from its own layer or any layer listed before it.
LAYERS = [
    {"errors", "pulse"},
    {"config", "models"},
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


# Only the registry and the job parser may name a model kind in a comparison.
KIND_NAMES = {"logistic", "linear", "poisson", "multiclass", "secureboost", "taylor", "separable"}
ALLOWED = {"privfl.models.registry", "privfl.config.vertical"}


def kind_comparisons(path: Path) -> list[str]:
    """``x == "logistic"``, ``kind in ("linear", "poisson")`` and the like in ``path``."""

    def names(node: ast.AST) -> set[str]:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return {node.value} & KIND_NAMES
        if isinstance(node, ast.Tuple | ast.List | ast.Set):
            return set().union(*(names(e) for e in node.elts)) if node.elts else set()
        return set()

    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Compare):
            hits = set().union(*(names(n) for n in [node.left, *node.comparators]))
            if hits:
                found.append(f"{path.name}:{node.lineno} compares with {sorted(hits)}")
        elif isinstance(node, ast.match_case) and names(getattr(node.pattern, "value", node)):
            found.append(f"{path.name}:{node.pattern.lineno} matches a kind name")
    return found


def test_only_the_registry_and_the_parser_compare_model_kinds() -> None:
    found = [
        hit
        for name, path in modules().items()
        if name not in ALLOWED
        for hit in kind_comparisons(path)
    ]
    assert found == [], "\n".join(found)


def test_the_kind_scan_sees_a_comparison(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text('def f(k):\n    return k.kind in ("linear", "x") or k == "secureboost"\n')
    assert len(kind_comparisons(module)) == 2


def test_every_registered_function_resolves() -> None:
    from privfl.config.vertical import MODEL_KINDS
    from privfl.models.registry import KINDS

    assert tuple(KINDS) == MODEL_KINDS
    for kind in KINDS.values():
        refs = [kind.party, kind.predict, kind.report, kind.plot, kind.references]
        refs += [*kind.conformance.values(), *([kind.glm] if kind.glm else [])]
        for ref in refs:
            assert callable(kind.load(ref)), ref
