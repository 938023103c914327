"""Run the doctests of every perfmodel module (the hand-computable examples in docstrings)."""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import perfmodel

OPTIONAL = ("torch", "cupy", "dask", "distributed", "yaml")


def _modules() -> list[str]:
    names = [perfmodel.__name__]
    for info in pkgutil.walk_packages(perfmodel.__path__, prefix="perfmodel."):
        if info.name.endswith("__main__"):
            continue
        names.append(info.name)
    return sorted(names)


@pytest.mark.parametrize("name", _modules())
def test_module_doctests(name: str) -> None:
    try:
        module = importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name and exc.name.split(".")[0] in OPTIONAL:
            pytest.skip(f"{name} needs optional package {exc.name}")
        raise
    result = doctest.testmod(
        module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE, verbose=False
    )
    assert result.failed == 0, f"{result.failed} doctest(s) failed in {name}"
