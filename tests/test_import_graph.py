"""The package's import graph, read from the source: every `import` (function-local ones included)
is an edge from the importing module to the module it names, except the names imported only for the
type checker under `if TYPE_CHECKING:` (never imported at run time); no circle, and
fine-tuning uses only the public names of the training core."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "headsup_lens"


def modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def imports(name: str, path: Path, known: dict[str, Path]) -> list[tuple[str, str]]:
    """(module imported, name imported from it or "") of every import statement in the module."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    tree = ast.parse(path.read_text())
    for_type_checker = {
        id(inner)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"
        for statement in node.body
        for inner in ast.walk(statement)
    }
    found = []
    for node in ast.walk(tree):
        if id(node) in for_type_checker:
            continue
        if isinstance(node, ast.Import):
            found += [(alias.name, "") for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            for alias in node.names:
                submodule = f"{target}.{alias.name}"
                found.append((submodule, "") if submodule in known else (target, alias.name))
    return found


def graph() -> dict[str, set[str]]:
    known = modules()
    return {
        name: {target for target, _ in imports(name, path, known) if target in known and target != name}
        for name, path in known.items()
    }


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def test_the_finder_sees_a_circle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    edges = graph()
    assert "headsup_lens.training._loop" in edges["headsup_lens.training._train"]
    assert "headsup_lens.training._train" in edges["headsup_lens.training._estimate"]


def test_no_module_imports_itself_through_others():
    """Among them: the training-time estimate and the trainer (`_estimate` -> `_train`, one way)."""
    assert cycles(graph()) == []


def test_fine_tuning_and_the_organism_use_only_public_names_of_the_training_core():
    known = modules()
    for name, path in known.items():
        if not name.startswith(("headsup_lens.sft", "headsup_lens.organism")):
            continue
        for target, imported in imports(name, path, known):
            if target.startswith("headsup_lens.training"):
                assert target == "headsup_lens.training", (name, target)
                assert not imported.startswith("_"), (name, imported)


def test_every_package_lists_its_exports_once_and_each_resolves():
    """A package's public names are the imports of its `__init__.pyi` (read by `lazy_loader`, the type
    checker and the API reference); each one imports, and the `__init__.py` imports nothing itself
    (the top package: only its version and the type checks that its export lists drive)."""
    import importlib

    for stub in sorted(PACKAGE.rglob("__init__.pyi")):
        name = ".".join(stub.relative_to(PACKAGE.parent).parent.parts)
        listed = {alias.asname or alias.name for node in ast.parse(stub.read_text()).body for alias in node.names}
        package = importlib.import_module(name)
        assert set(package.__all__) == listed, name
        for export in listed:
            assert getattr(package, export) is not None, (name, export)
        own = {
            target for target, _ in imports(name, stub.with_suffix(".py"), modules()) if target.startswith(PACKAGE.name)
        }
        assert own <= {"headsup_lens._version", "headsup_lens._typecheck"}, name
