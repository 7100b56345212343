"""The package's import graph: no module imports itself back through others, and every arrow
between subpackages runs down the layers (imports only for type checking count too).

Run as a script (`python -m tests.test_import_graph`) to print the graph between subpackages.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "adaptivespec"
# Lowest first: a subpackage may import its own modules and those of the layers below it.
LAYERS = (
    ("", "errors"),  # "": the package's own __init__
    ("config",),
    ("engine", "settings"),
    ("controller", "train"),
    ("sim",),
    ("store",),
    ("server", "generate_command"),
    ("bench",),
    ("cli",),
)


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path) -> Iterator[str]:
    """Every adaptivespec module `path` imports, at any depth of the file."""
    here = module_name(path)
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names if alias.name.startswith("adaptivespec"))
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the importing module's package
                package = here.split(".")[: -node.level + (path.name == "__init__.py")]
                base = ".".join([*package, base] if base else package)
            if not base.startswith("adaptivespec"):
                continue
            yield base
            for alias in node.names:  # `from package import module` names a module
                if (PACKAGE.parent / Path(*f"{base}.{alias.name}".split("."))).with_suffix(".py").exists():
                    yield f"{base}.{alias.name}"


def graph() -> dict[str, set[str]]:
    modules = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    return {name: {m for m in imports(path) if m in modules and m != name} for name, path in modules.items()}


def subpackage(module: str) -> str:
    return module.split(".")[1] if "." in module else ""


def layer(module: str) -> int:
    name = subpackage(module)
    return next(i for i, names in enumerate(LAYERS) if name in names)


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """One cycle through each strongly connected group of modules (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in sorted(edges[node]):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return found


def test_no_module_imports_itself_back() -> None:
    assert cycles(graph()) == []


def test_every_subpackage_is_in_a_layer() -> None:
    names = {subpackage(m) for m in graph() if m != "adaptivespec"}
    assert names <= {n for names in LAYERS for n in names}, names


def test_arrows_between_subpackages_run_down_the_layers() -> None:
    upward = sorted(
        (source, target)
        for source, targets in graph().items()
        if source != "adaptivespec"
        for target in targets
        if subpackage(source) != subpackage(target) and layer(target) >= layer(source)
    )
    assert upward == []


def test_the_checker_sees_a_cycle_and_an_upward_arrow() -> None:
    """Power: the checks would fail on the shapes they exist to catch."""
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == [["a", "b", "c"]]
    assert layer("adaptivespec.config") < layer("adaptivespec.controller.cell")
    edges = graph()
    assert "adaptivespec.engine.telemetry" in edges["adaptivespec.controller.controller"]
    assert "adaptivespec.controller.cell_table" in edges["adaptivespec.controller.publisher"]


if __name__ == "__main__":
    between: dict[tuple[str, str], int] = {}
    for source, targets in graph().items():
        for target in targets:
            pair = (subpackage(source) or "adaptivespec", subpackage(target) or "adaptivespec")
            if pair[0] != pair[1]:
                between[pair] = between.get(pair, 0) + 1
    for (source, target), count in sorted(between.items(), key=lambda item: (layer("x." + item[0][0]), item)):
        print(f"{source:>10} -> {target:<10} {count:3d} imports")
