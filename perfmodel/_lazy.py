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
    namespace: MutableMapping[str, Any], exports: Mapping[str, tuple[str, ...]]
) -> tuple[Callable[[str], Any], Callable[[], list[str]], list[str]]:
    """``(__getattr__, __dir__, __all__)`` for the package whose globals are ``namespace``.

    ``exports`` maps each submodule (relative to the package, e.g. ``"routing"``) to the names
    the package re-exports from it, the one list of them the package states at run time (its
    ``TYPE_CHECKING`` imports state them for a type checker; ``tests/test_cold_imports.py``
    checks that the two agree). Each access imports the submodule (a dictionary lookup once it
    is loaded) and reads the name there; the value is not copied into the package, so a name
    replaced in its submodule (a test's ``monkeypatch``) is seen through the package too, and
    a replaced value is never kept after the test restores it. ``__all__`` is the exported
    names, sorted.

    >>> getattr_, dir_, all_ = lazy_exports({"__name__": "perfmodel"}, {"errors": ("PerfModelError",)})
    >>> getattr_("PerfModelError").__name__, "PerfModelError" in dir_(), all_
    ('PerfModelError', True, ['PerfModelError'])
    """
    package = namespace["__name__"]
    module_of = {name: module for module, names in exports.items() for name in names}

    def __getattr__(name: str) -> Any:
        module = module_of.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(f"{package}.{module}"), name)

    def __dir__() -> list[str]:
        return sorted({*namespace, *module_of})

    return __getattr__, __dir__, sorted(module_of)


__all__ = ["lazy_exports"]
