"""No import circles inside ``perfmodel/`` (issue 29, item 2).

Every import that runs counts: module-level and function-level (a deferred import still makes
the two modules need each other), not those under ``if TYPE_CHECKING:`` (they never run). An
import names the module of its ``from`` part (``from perfmodel.comm import params`` imports the
package ``perfmodel.comm``, whose ``__init__`` runs), plus the submodule where the imported name
is one (``params`` here). Where two modules need each other, the part both need moves down into
a module of its own.
"""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx

PACKAGE = Path(__file__).resolve().parents[1] / "perfmodel"


def _modules(root: Path) -> dict[str, tuple[Path, bool]]:
    """Dotted module name -> (file, whether it is a package's ``__init__``)."""
    out = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        if is_package:
            parts.pop()
        out[".".join(parts)] = (path, is_package)
    return out


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    """Ids of the nodes under ``if TYPE_CHECKING:`` (imports that never run)."""
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If):
            test = node.test
            name = test.id if isinstance(test, ast.Name) else getattr(test, "attr", None)
            if name == "TYPE_CHECKING":
                for stmt in node.body:
                    skip.update(id(n) for n in ast.walk(stmt))
    return skip


def _imported(node: ast.AST, package: str, modules: dict[str, tuple[Path, bool]]) -> list[str]:
    """The ``perfmodel`` modules an ``import`` / ``from ... import`` statement runs."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if not isinstance(node, ast.ImportFrom):
        return []
    if node.level:
        base = package
        for _ in range(node.level - 1):
            base = base.rpartition(".")[0]
        source = base + ("." + node.module if node.module else "")
    else:
        source = node.module or ""
    names = [source]
    names += [f"{source}.{a.name}" for a in node.names if f"{source}.{a.name}" in modules]
    return names


def import_graph(root: Path = PACKAGE) -> nx.DiGraph:
    """Module -> the ``perfmodel`` modules it imports (every import that runs)."""
    modules = _modules(root)
    graph = nx.DiGraph()
    graph.add_nodes_from(modules)
    for name, (path, is_package) in modules.items():
        tree = ast.parse(path.read_text(), str(path))
        package = name if is_package else name.rpartition(".")[0]
        skip = _type_checking_nodes(tree)
        for node in ast.walk(tree):
            if id(node) in skip:
                continue
            for target in _imported(node, package, modules):
                while target and target not in modules:  # an attribute: its module
                    target = target.rpartition(".")[0]
                if target.startswith("perfmodel") and target != name:
                    graph.add_edge(name, target)
    return graph


def circles(graph: nx.DiGraph) -> set[frozenset[str]]:
    """The modules that import each other, directly or through others (strongly connected
    components of more than one module)."""
    return {frozenset(c) for c in nx.strongly_connected_components(graph) if len(c) > 1}


def test_no_import_circles() -> None:
    found = circles(import_graph())
    assert not found, f"import circles: {sorted(sorted(c) for c in found)}"


def test_the_scan_sees_function_level_and_package_imports(tmp_path: Path) -> None:
    pkg = tmp_path / "perfmodel"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("from perfmodel.sub.a import f\n")
    (pkg / "sub" / "a.py").write_text("def f():\n    from perfmodel.sub import b\n")
    (pkg / "sub" / "b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from perfmodel.sub import a\n"
    )
    (pkg / "sub" / "c.py").write_text("from . import b\nfrom perfmodel.sub import d\n")
    (pkg / "sub" / "d.py").write_text("import perfmodel.sub.c\n")
    graph = import_graph(pkg)
    # a deferred import of a sibling through the package counts (sub -> a -> sub); the
    # TYPE_CHECKING import does not (no b -> a)
    assert graph.has_edge("perfmodel.sub.a", "perfmodel.sub")
    assert graph.has_edge("perfmodel.sub.a", "perfmodel.sub.b")
    assert not graph.has_edge("perfmodel.sub.b", "perfmodel.sub.a")
    assert circles(graph) == {
        frozenset({"perfmodel.sub", "perfmodel.sub.a"}),
        frozenset({"perfmodel.sub.c", "perfmodel.sub.d"}),
    }
