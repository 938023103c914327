"""Zoo builders whose keyword arguments come from a table (issue 29).

A zoo builder's keyword parameters are its model arguments: :class:`~perfmodel.workload.zoo.ModelInfo`
reads them off ``inspect.signature`` (names, defaults), ``build_model`` coerces strings to the
defaults' types. Models that differ from one another in a few numbers share one body; their
arguments are then one table (a dict of defaults in the builder's argument order, or another
builder's parameters with some pinned and some defaults changed) rather than a copy of the same
signature per model. ``help(builder)`` shows the table as the signature it replaces: each
parameter annotated with its default's type, or with the type the table states (``int | None``
for a default of ``None`` or a value that may also be ``None``).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any

_KW = inspect.Parameter.KEYWORD_ONLY


def _net_parameter(fn: Callable[..., Any]) -> inspect.Parameter:
    """``fn``'s first (``net``) parameter."""
    return next(iter(inspect.signature(fn).parameters.values()))


def _annotation(fn: Callable[..., Any], name: str, default: Any, types: Mapping[str, str]) -> str:
    """The annotation of ``fn``'s table parameter ``name``: ``types[name]`` where the table
    states it, else the default's type (``int`` for ``4096``); a ``None`` default must be stated
    (its type says nothing of the values the parameter takes)."""
    if name in types:
        return types[name]
    if default is None:
        raise ValueError(f"{fn.__name__}: state the type of {name} (default None)")  # invariant
    return type(default).__name__


def _with_signature(fn: Callable[..., Any], params: list[inspect.Parameter]) -> None:
    fn.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [_net_parameter(fn), *params], return_annotation=inspect.signature(fn).return_annotation
    )


def table_signature(
    fn: Callable[..., Any], defaults: Mapping[str, Any], types: Mapping[str, str] | None = None
) -> None:
    """Give ``fn`` (``net, **kwargs``) keyword-only parameters ``defaults`` (name -> default, in
    that order), each annotated with ``types[name]`` where given, else with its default's type
    (a ``None`` default needs its type in ``types``), so the zoo lists and coerces them and
    ``help(fn)`` shows them as a written signature would."""
    _with_signature(
        fn,
        [
            inspect.Parameter(k, _KW, default=v, annotation=_annotation(fn, k, v, types or {}))
            for k, v in defaults.items()
        ],
    )


def variant_signature(
    fn: Callable[..., Any],
    base: Callable[..., Any],
    names: tuple[str, ...],
    defaults: Mapping[str, Any],
) -> None:
    """Give ``fn`` (``net, **kwargs``, a variant of builder ``base``) the parameters ``names`` of
    ``base`` in that order, with ``defaults`` replacing ``base``'s defaults; a parameter whose
    default ``defaults`` replaces is annotated with the new default's type (``ffn_hidden: int =
    11008`` where ``base`` has ``int | None = None``), the others keep ``base``'s annotation."""
    own = inspect.signature(base).parameters
    params = [
        own[k].replace(default=defaults[k], annotation=_annotation(fn, k, defaults[k], {}))
        if k in defaults
        else own[k]
        for k in names
    ]
    _with_signature(fn, params)


def bound(fn: Callable[..., Any], net: Any, kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """``kwargs`` checked against ``fn``'s signature and completed with its defaults: every
    model argument of ``fn`` by name, ``net`` left out.

    Raises
    ------
    TypeError
        For an unknown argument, naming the builder as a written signature does
        (``gpt_oss() got an unexpected keyword argument 'hiden'``).
    """
    try:
        args = inspect.signature(fn).bind(net, **kwargs)
    except TypeError as exc:
        raise TypeError(f"{fn.__name__}() {exc}") from None
    args.apply_defaults()
    out = dict(args.arguments)
    del out[next(iter(out))]
    return out
