"""The seam between the comparison layer and the prediction API.

Everything in :mod:`perfmodel.search` evaluates *scenario dicts* (the keys of
:class:`perfmodel.api.Scenario`) through an **evaluator**: a picklable callable taking a scenario
dict and returning a report dict (``StepReport.to_dict()``). The default goes through
:func:`perfmodel.api.predict`; tests and benchmarks inject cheaper ones. Keeping dicts at the seam
lets worker processes receive and return plain data.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from typing import Any

from perfmodel.intervals import DEFAULT_LEVEL

Evaluator = Callable[[Mapping[str, Any]], Mapping[str, Any]]
KeyFunction = Callable[[Mapping[str, Any]], str]


def default_evaluator(scenario: Mapping[str, Any]) -> dict[str, Any]:
    """``perfmodel.api.predict(Scenario.from_dict(scenario)).to_dict()``."""
    return _report(scenario, baseline=True)


def _report(scenario: Mapping[str, Any], *, baseline: bool) -> dict[str, Any]:
    from perfmodel.api import Scenario, predict

    sc = Scenario.from_dict(dict(scenario), where="scenario")
    return predict(sc, baseline=baseline).to_dict()


def interval_evaluator(scenario: Mapping[str, Any], level: float = DEFAULT_LEVEL) -> dict[str, Any]:
    """:func:`default_evaluator`'s report with the prediction interval at ``level``
    (:meth:`perfmodel.intervals.answers.StepInterval.to_dict`: ``<field>_low``, ``<field>_high``,
    ``interval_level``, ``interval_basis``, ...): a sweep row's range (issue 26). Picklable with
    ``functools.partial(interval_evaluator, level=...)``."""
    from perfmodel.api import Scenario, predict
    from perfmodel.errors import PerfModelError
    from perfmodel.intervals.answers import step_interval

    sc = Scenario.from_dict(dict(scenario), where="scenario")
    report = predict(sc, baseline=True)
    out = report.to_dict()
    try:
        out.update(step_interval(report, level, scenario=sc).to_dict())
    except PerfModelError as exc:  # no record to read: the prediction stands without a range
        out.update(interval_level=None, interval_error=str(exc))
    return out


def analytic_evaluator(scenario: Mapping[str, Any]) -> dict[str, Any]:
    """The default evaluator with ``fidelity="analytic"`` (the closed-form fast path), without
    the 1-GPU speedup baseline (``speedup`` is ``None``): plan ranking reads step times, and the
    baseline of a model that needs several GPUs is itself a search (issue 14: seconds)."""
    return _report({**scenario, "fidelity": "analytic"}, baseline=False)


def simulated_evaluator(scenario: Mapping[str, Any]) -> dict[str, Any]:
    """The default evaluator with ``fidelity="simulated"`` (the SimPy event simulation), without
    the 1-GPU speedup baseline (as :func:`analytic_evaluator`)."""
    return _report({**scenario, "fidelity": "simulated"}, baseline=False)


def default_key(scenario: Mapping[str, Any]) -> str:
    """``Scenario.from_dict(scenario).content_hash()``: the key sweeps resume on."""
    from perfmodel.api import Scenario

    return Scenario.from_dict(dict(scenario), where="scenario").content_hash()


def canonical_key(scenario: Mapping[str, Any]) -> str:
    """SHA-256 of the scenario dict as canonical JSON (sorted keys).

    Used where no :class:`~perfmodel.api.Scenario` is involved (tests, custom evaluators): unlike
    :func:`default_key` it does not fill in defaults, so ``{"tp": 1}`` and ``{}`` differ.

    >>> canonical_key({"b": 1, "a": 2}) == canonical_key({"a": 2, "b": 1})
    True
    """
    text = json.dumps(dict(scenario), sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()
