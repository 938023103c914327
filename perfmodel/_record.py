"""Flat records: a frozen dataclass written as one JSON object, every field under its own name.

A record whose JSON form is its fields in declaration order (an enum as its value, a tuple as a
list, a mapping as a plain dict) says so by inheriting :class:`FlatRecord`, instead of listing its
fields a second time in a ``to_dict``. Reading back stays with each record: what a field must be
(and the error naming it) differs per file format.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import fields
from typing import Any


def flat_value(value: Any) -> Any:
    """``value`` as JSON holds it: an enum's value, a tuple as a list, a mapping as a dict."""
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, tuple):
        return list(value)
    if isinstance(value, Mapping):
        return dict(value)
    return value


class FlatRecord:
    """Mixin of a dataclass whose :meth:`to_dict` is its fields, in order, by :func:`flat_value`."""

    def to_dict(self) -> dict[str, Any]:
        return {f.name: flat_value(getattr(self, f.name)) for f in fields(self)}  # type: ignore[arg-type]
