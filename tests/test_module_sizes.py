"""Module and function sizes inside ``perfmodel/`` (issue 29: rooms a newcomer can read).

No module over 1,000 lines and no function over 120 lines, unless its module docstring says
why it is better whole: a paragraph that starts with :data:`MARKER`, followed by ``this
module`` for the module or naming the function (``:func:`name```, ``:meth:`Class.name```).
The issue's "~1,000" is that reason: a module one helper over the line is split or says why not.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "perfmodel"

#: The reason marker: a paragraph of the module docstring that starts with it says why the
#: module (``this module``) or the functions it names are kept whole.
MARKER = "Kept whole (issue 29):"
#: Lines of a module and of a function (``def`` line to its last line, docstring included).
MODULE_LINES = 1_000
FUNCTION_LINES = 120


def _reasons(doc: str) -> list[str]:
    """The module docstring's paragraphs that start with :data:`MARKER`."""
    return [p for p in re.split(r"\n\s*\n", doc) if p.lstrip().startswith(MARKER)]


def _names(paragraph: str) -> set[str]:
    """The function names a reason paragraph cites (``:func:`f```, ``:meth:`C.f```: ``f``)."""
    return {m.rpartition(".")[2] for m in re.findall(r":(?:func|meth):`~?([\w.]+)`", paragraph)}


def oversized(root: Path = PACKAGE) -> list[str]:
    """Every module and function above its limit whose module docstring gives no reason."""
    found = []
    for path in sorted(root.rglob("*.py")):
        text = path.read_text()
        tree = ast.parse(text, str(path))
        reasons = _reasons(ast.get_docstring(tree) or "")
        named = set().union(*(_names(p) for p in reasons)) if reasons else set()
        where = path.relative_to(root.parent)
        lines = text.count("\n")
        whole = any(p.lstrip()[len(MARKER) :].lstrip().startswith("this module") for p in reasons)
        if lines > MODULE_LINES and not whole:
            found.append(f"{where}: {lines} lines")
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                n = node.end_lineno - node.lineno + 1  # type: ignore[operator]
                if n > FUNCTION_LINES and node.name not in named:
                    found.append(f"{where}::{node.name}: {n} lines")
    return found


def test_no_module_or_function_over_its_size_without_a_reason() -> None:
    found = oversized()
    assert not found, (
        f"split these by concept, or say in the module docstring why each is better whole "
        f"({MARKER!r}): {found}"
    )


def test_the_scan_sees_long_modules_and_functions_and_their_reasons(tmp_path: Path) -> None:
    pkg = tmp_path / "perfmodel"
    pkg.mkdir()
    body = "    x = 0\n" * 130
    long_fn = f"def long_one():\n{body}\n\ndef short_one():\n    pass\n"
    (pkg / "plain.py").write_text(f'"""A module."""\n\n{long_fn}')
    (pkg / "excused.py").write_text(
        f'"""A module.\n\n{MARKER} :func:`long_one` is one formula.\n"""\n\n{long_fn}'
    )
    (pkg / "wrong_name.py").write_text(
        f'"""A module.\n\n{MARKER} :func:`short_one` is one formula.\n"""\n\n{long_fn}'
    )
    filler = "y = 0\n" * 1_100
    (pkg / "big.py").write_text(f'"""A module."""\n\n{filler}')
    (pkg / "big_excused.py").write_text(
        f'"""A module.\n\n{MARKER} this module reads better whole.\n"""\n\n{filler}'
    )
    (pkg / "big_method.py").write_text(
        f'"""A module.\n\n{MARKER} :meth:`C.long_one` is one formula.\n"""\n\n'
        f"class C:\n" + "".join("    " + line + "\n" for line in long_fn.splitlines())
    )
    assert sorted(oversized(pkg)) == [
        "perfmodel/big.py: 1102 lines",
        "perfmodel/plain.py::long_one: 131 lines",
        "perfmodel/wrong_name.py::long_one: 131 lines",
    ]
