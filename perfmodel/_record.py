"""Flat records: a frozen dataclass written as one JSON object, every field under its own name.

A record whose JSON form is its fields in declaration order (an enum as its value, a tuple as a
list, a mapping as a plain dict) says so by inheriting :class:`FlatRecord`, instead of listing its
fields a second time in a ``to_dict``. A record whose keys are its attribute names but not exactly
its fields (a derived property among them, or a field left out) names them once, in a tuple, to
:func:`record_dict`. Reading back stays with each record: what a field must be (and the error
naming it) differs per file format.
"""

from __future__ import annotations

import enum
import functools
from collections.abc import Iterable, Mapping
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


def record_dict(record: object, names: Iterable[str]) -> dict[str, Any]:
    """``{name: flat_value(record.name)}`` for each of ``names``, in their order.

    >>> from fractions import Fraction
    >>> record_dict(Fraction(3, 4), ("numerator", "denominator"))
    {'numerator': 3, 'denominator': 4}
    """
    return {name: flat_value(getattr(record, name)) for name in names}


class FlatRecord:
    """Mixin of a dataclass whose :meth:`to_dict` is its fields, in order, by :func:`flat_value`."""

    def to_dict(self) -> dict[str, Any]:
        return record_dict(self, _field_names(type(self)))


@functools.cache
def _field_names(record_type: type) -> tuple[str, ...]:
    """The names of a dataclass's fields, in order (read once per class)."""
    return tuple(f.name for f in fields(record_type))
