"""Zoo builders whose keyword arguments come from a table (issue 29).

A zoo builder's keyword parameters are its model arguments: :class:`~perfmodel.workload.zoo.ModelInfo`
reads them off ``inspect.signature`` (names, defaults), ``build_model`` coerces strings to the
defaults' types. Models that differ from one another in a few numbers share one body; their
arguments are then one table (a row of defaults per model, or another builder's parameters with
some pinned and some defaults changed) rather than a copy of the same signature per model.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any

_KW = inspect.Parameter.KEYWORD_ONLY
_EMPTY = inspect.Parameter.empty


def _net_parameter(fn: Callable[..., Any]) -> inspect.Parameter:
    """``fn``'s first (``net``) parameter."""
    return next(iter(inspect.signature(fn).parameters.values()))


def table_signature(fn: Callable[..., Any], defaults: Mapping[str, Any]) -> None:
    """Give ``fn`` (``net, **kwargs``) keyword-only parameters ``defaults`` (name -> default, in
    that order, each annotated with its default's type, a ``None`` default not annotated), so the zoo lists and coerces them."""
    params = [_net_parameter(fn)]
    params += [
        inspect.Parameter(k, _KW, default=v, annotation=type(v).__name__)
        for k, v in defaults.items()
    ]
    fn.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        params, return_annotation=inspect.signature(fn).return_annotation
    )


def variant_signature(
    fn: Callable[..., Any],
    base: Callable[..., Any],
    names: tuple[str, ...],
    defaults: Mapping[str, Any],
) -> None:
    """Give ``fn`` (``net, **kwargs``, a variant of builder ``base``) the parameters ``names`` of
    ``base`` in that order, with ``defaults`` replacing ``base``'s defaults."""
    own = inspect.signature(base).parameters
    params = [_net_parameter(fn)]
    params += [own[k].replace(default=defaults.get(k, own[k].default)) for k in names]
    fn.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        params, return_annotation=inspect.signature(fn).return_annotation
    )


def bound(fn: Callable[..., Any], net: Any, kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """``kwargs`` checked against ``fn``'s signature (a ``TypeError`` for an unknown or
    positional argument, as a plain signature raises) and completed with its defaults: every
    model argument of ``fn`` by name, ``net`` left out."""
    args = inspect.signature(fn).bind(net, **kwargs)
    args.apply_defaults()
    out = dict(args.arguments)
    del out[next(iter(out))]
    return out
