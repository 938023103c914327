"""One door for a frozen dataclass's instance made from its field dictionary (issue 27: the
frozen ``__init__`` sets each field through ``object.__setattr__``, ~2 k instructions a field,
on objects a new plan makes by the hundred: layers, layer times, communication results and
specs)."""

from __future__ import annotations

from typing import Any, TypeVar

T = TypeVar("T")


def from_fields(cls: type[T], fields: dict[str, Any]) -> T:
    """An instance of the frozen dataclass ``cls`` whose ``__dict__`` is ``fields`` itself.

    It is the instance ``cls(**fields)`` makes where ``fields`` names every field of ``cls`` in
    declaration order and ``cls`` has no ``__post_init__`` and no ``__slots__``: the dictionary
    ``__init__`` leaves (the same keys in the same order, the same value objects), so
    equality, hashing, ``repr``, pickling and every reader see the same value. The callers
    check those conditions (or know them) and keep a switch to ``__init__`` that their tests
    flip (``LayerCost.built`` / ``changed``, ``layer_time_of``, ``CommSpec.built``,
    ``AnalyticCommModel._result``); ``fields`` must not be shared with anything else.

    >>> from dataclasses import dataclass
    >>> @dataclass(frozen=True)
    ... class P:
    ...     x: int
    ...     y: int = 0
    >>> from_fields(P, {"x": 1, "y": 2}) == P(1, 2)
    True
    """
    new = object.__new__(cls)
    object.__setattr__(new, "__dict__", fields)
    return new


__all__ = ["from_fields"]
