"""Parsing strings from files and the command line into enums (one place for the error wording)."""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar

from perfmodel.errors import ConfigError, PerfModelError

E = TypeVar("E", bound=enum.Enum)


def choices(cls: type[enum.Enum]) -> str:
    """The members' values, comma separated, in definition order.

    >>> from perfmodel.dtypes import Precision
    >>> choices(Precision)
    'fp32, tf32, fp16, bf16, fp8'
    """
    return ", ".join(str(m.value) for m in cls)


def squash(text: str) -> str:
    """Lower case without ``_`` and ``-``, a ``normalize`` for :func:`parse_enum`.

    >>> squash("All_Re-duce")
    'allreduce'
    """
    return text.lower().replace("_", "").replace("-", "")


def dashed(text: str) -> str:
    """Lower case with ``_`` read as ``-``, a ``normalize`` for :func:`parse_enum`.

    >>> dashed("Interleaved_1F1B")
    'interleaved-1f1b'
    """
    return text.lower().replace("_", "-")


def snake(text: str) -> str:
    """Lower case with ``-`` read as ``_``, a ``normalize`` for :func:`parse_enum`.

    >>> snake("Halving-Doubling")
    'halving_doubling'
    """
    return text.lower().replace("-", "_")


def parse_enum(
    cls: type[E],
    text: object,
    *,
    where: str,
    noun: str | None = None,
    aliases: Mapping[str, str] | None = None,
    normalize: Callable[[str], str] = str.lower,
    expected: str | None = None,
    template: str | None = None,
    error: type[PerfModelError] = ConfigError,
) -> E:
    """Return the member of ``cls`` named by ``text`` (a member is returned as is).

    ``text`` goes through ``normalize`` (default: lower case), then ``aliases``, then ``cls(...)``.
    An unknown value raises ``error`` (default `ConfigError`) naming the value, where it came
    from and the choices::

        unknown {where} {text!r}; expected one of a, b            (noun=None)
        unknown {noun} {text!r} ({where}); expected one of a, b   (noun given)

    ``expected`` replaces ``"one of a, b"``; ``template`` replaces the whole message (fields
    ``where``, ``noun``, ``text``, ``expected``).

    >>> from perfmodel.dtypes import DType
    >>> parse_enum(DType, "FP16", where="dtype")
    <DType.FP16: 'fp16'>
    >>> parse_enum(DType, "fp12", where="--dtype")
    Traceback (most recent call last):
    ...
    perfmodel.errors.ConfigError: unknown --dtype 'fp12'; expected one of fp64, fp32, tf32, fp16, bf16, fp8, fp6, fp4
    """
    if isinstance(text, cls):
        return text
    key = normalize(str(text))
    if aliases:
        key = aliases.get(key, key)
    try:
        return cls(key)
    except ValueError as exc:
        if expected is None:
            expected = f"one of {choices(cls)}"
        if template is None:
            if noun is None:
                template = "unknown {where} {text!r}; expected {expected}"
            else:
                template = "unknown {noun} {text!r} ({where}); expected {expected}"
        message = template.format(where=where, noun=noun, text=text, expected=expected)
        raise error(message, value=text, where=where) from exc


@dataclass(frozen=True)
class ParseRule:
    """How :meth:`ParsedEnum.parse` reads one enum: :func:`parse_enum`'s keywords, a default
    ``where``, and ``unset``, the value of the member that ``None`` stands for (``None``: ``None``
    is an unknown value like any other)."""

    where: str | None = None
    noun: str | None = None
    aliases: Mapping[str, str] | None = None
    normalize: Callable[[str], str] = str.lower
    expected: str | None = None
    template: str | None = None
    error: type[PerfModelError] = ConfigError
    unset: str | None = None


P = TypeVar("P", bound="ParsedEnum")


class ParsedEnum(enum.Enum):
    """Base of the enums read from files and flags: one ``parse`` with :func:`parse_enum`'s wording.

    A subclass states its :class:`ParseRule` as class keywords (the fields of the rule)::

        class Precision(str, ParsedEnum, where="--precision", noun="precision"):
            FP32 = "fp32"

    ``Precision.parse(text, where=...)`` then returns the member, or raises the rule's error
    naming the value, ``where`` (the caller's, else the rule's) and the choices.

    >>> from perfmodel.dtypes import Precision
    >>> Precision.parse("BF16")
    <Precision.BF16: 'bf16'>
    >>> Precision.parse("fp12", where="scenario.precision")
    Traceback (most recent call last):
    ...
    perfmodel.errors.ConfigError: unknown precision 'fp12' (scenario.precision); expected one of fp32, tf32, fp16, bf16, fp8
    """

    _parse_rule: ClassVar[ParseRule]

    def __init_subclass__(cls, **rule: Any) -> None:
        """Store the class keywords as the subclass's :class:`ParseRule` (an unknown keyword is a
        ``TypeError`` naming it)."""
        super().__init_subclass__()
        cls._parse_rule = ParseRule(**rule)

    @classmethod
    def parse(cls: type[P], text: object, *, where: str | None = None) -> P:
        """The member named by ``text`` (see :func:`parse_enum`); ``where`` defaults to the rule's."""
        rule = cls._parse_rule
        if text is None and rule.unset is not None:
            return cls(rule.unset)
        if where is None:
            where = rule.where
        if where is None:
            raise TypeError(f"{cls.__name__}.parse needs where= (its rule names none)")
        return parse_enum(
            cls, text, where=where, noun=rule.noun, aliases=rule.aliases,
            normalize=rule.normalize, expected=rule.expected, template=rule.template,
            error=rule.error,
        )  # fmt: skip
