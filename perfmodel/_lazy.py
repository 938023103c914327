"""Lazy re-exports for package ``__init__`` modules (PEP 562 module ``__getattr__``).

A package that re-exports names from its submodules imports all of them when it is first
imported, and with them what they import. ``import perfmodel.topology`` from the prediction path
would then load the analysis module (bisection, rings, ``nvidia-smi`` matrices) and
``perfmodel.search`` would load the plan search, sweeps and time-to-accuracy fitting that a
``predict`` never calls (issue 14, cold start: a command imports only what it uses). With
:func:`lazy_exports` the package names the submodule of each export and imports it on first
access; ``from package import name`` and ``package.name`` behave as before (a type checker
reads the package's ``TYPE_CHECKING`` imports).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, MutableMapping
from typing import Any


def lazy_exports(
    namespace: MutableMapping[str, Any], exports: Mapping[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for the package whose globals are ``namespace``.

    ``exports`` maps each re-exported name to the submodule that defines it (relative to the
    package, e.g. ``{"route": "routing"}``). Each access imports the submodule (a dictionary
    lookup once it is loaded) and reads the name there; the value is not copied into the
    package, so a name replaced in its submodule (a test's ``monkeypatch``) is seen through
    the package too, and a replaced value is never kept after the test restores it.

    >>> getattr_, dir_ = lazy_exports({"__name__": "perfmodel"}, {"PerfModelError": "errors"})
    >>> getattr_("PerfModelError").__name__, "PerfModelError" in dir_()
    ('PerfModelError', True)
    """
    package = namespace["__name__"]

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(f"{package}.{module}"), name)

    def __dir__() -> list[str]:
        return sorted({*namespace, *exports})

    return __getattr__, __dir__


__all__ = ["lazy_exports"]
