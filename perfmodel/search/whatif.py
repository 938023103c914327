"""Hardware what-if: the same training job on several systems and GPU counts, with cost.

For each system option and GPU count the job is predicted once; from the report::

    speedup(g)        = the report's ``speedup`` (``predict``'s: throughput over its baseline,
                        :func:`perfmodel.pipeline.baseline.speedup`, named by ``speedup_basis``)
    epoch_time_s      = dataset_size / throughput          (or the report's epoch_time_s)
    run_time_s        = epochs * epoch_time_s
    cost_per_epoch    = g * price_per_gpu_s * epoch_time_s
    cost_per_run      = epochs * cost_per_epoch

The cheapest option for a deadline is the lowest ``cost_per_run`` among the options whose
``run_time_s`` is within the deadline (equal costs: the faster).

With an interval level (``compare --interval``, default 80 %) every point carries the residual
interval of its step (:func:`perfmodel.intervals.answers.step_interval`, the one ``predict``
prints): a time-like figure ``x`` (iteration, epoch and run time, every cost: each is
proportional to the step time) ranges over :meth:`~perfmodel.intervals.conformal.
ResidualInterval.time` of ``x``, a rate over its :meth:`~perfmodel.intervals.conformal.
ResidualInterval.speed`. Two options whose ranges of the compared figure overlap are a
statistical tie, the plan search's rule (:func:`perfmodel.intervals.answers.ties`); a deadline
the run-time range straddles is marked ``~``.

A system option is ``NAME[:key=value[:key=value...]]`` where the keys are scenario keys
(``network``, ``nics_per_node``, ``gpu``, ``fabric_topology``, ...), e.g.
``dgx1-v100:network=eth-100g`` versus ``dgx1-v100:network=ib-edr``
(:mod:`perfmodel.search.system_option`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from perfmodel import units
from perfmodel._record import FlatRecord
from perfmodel.errors import ConfigError, PerfModelError
from perfmodel.intervals.wording import (
    basis_clause,
    bounded,
    error_clause,
    overlaps,
    tie_legend,
)
from perfmodel.scenario import HARDWARE_FIELDS
from perfmodel.search._eval import Evaluator, default_evaluator
from perfmodel.search.cost import Pricing
from perfmodel.search.system_option import SystemOption, option_error

#: Scenario keys of an option's overrides that shape its hardware (what ``topology_of`` reads)
_HARDWARE_KEYS = frozenset({*HARDWARE_FIELDS, "calibration"} - {"system", "nodes", "nccl"})


def catalogue_gpus_per_node(option: SystemOption) -> int:
    """GPUs per server of a system option: its one-node topology, built as ``predict`` builds it
    (:func:`perfmodel.api.topology_of`), so ``custom`` and ``calibrated`` systems work too."""
    from perfmodel.api import Scenario, topology_of

    kw = {k: v for k, v in option.overrides.items() if k in _HARDWARE_KEYS}
    try:
        sc = Scenario.from_dict({**kw, "system": option.system, "nodes": 1}, where=option.label)
        return topology_of(sc).gpus_per_node
    except ConfigError as exc:
        raise option_error(option, exc) from exc


def catalogue_gpu_spec(option: SystemOption) -> Any:
    """The GPU of a system option's servers (:func:`perfmodel.api.topology_of`), for its power;
    ``None`` when the option cannot be built (its predictions fail and say why)."""
    from perfmodel.api import Scenario, topology_of

    kw = {k: v for k, v in option.overrides.items() if k in _HARDWARE_KEYS}
    try:
        sc = Scenario.from_dict({**kw, "system": option.system, "nodes": 1}, where=option.label)
        return topology_of(sc).gpu_spec()
    except PerfModelError:
        return None


def listed_prices(systems: Sequence[SystemOption]) -> dict[str, Pricing]:
    """The dated list price of each option whose system is a cloud instance with one
    (``[system.cloud]``), as a :class:`Pricing` naming its source; others are left out."""
    from perfmodel.api import Scenario, topology_of

    out: dict[str, Pricing] = {}
    for opt in systems:
        kw = {k: v for k, v in opt.overrides.items() if k in _HARDWARE_KEYS}
        try:
            sc = Scenario.from_dict({**kw, "system": opt.system, "nodes": 1}, where=opt.label)
            cloud = topology_of(sc).cloud
        except PerfModelError:
            continue
        if cloud is not None and cloud.price_per_gpu_hour is not None:
            out[opt.label] = Pricing(
                cloud.price_per_gpu_hour,
                source=cloud.price_label(),
            )
    return out


def per_token_figures(
    report: Mapping[str, Any], spec: Any, price: Pricing | None
) -> tuple[float | None, float | None, Any]:
    """``(tokens/s, cost per million tokens, the step's energy)`` of a report dict; each
    ``None`` where the model has no tokens, no price is given or the GPU has no power model.

    ``cost = price_per_gpu_hour * gpus * 1e6 / (tokens_per_s * 3600)``; the energy is the
    :class:`~perfmodel.report.goodput.StepEnergy` of :func:`per_token_energy` (GPU boards
    only), built once: callers read its ``kwh_per_million_tokens`` and keep it for the range.
    """
    tok = report.get("tokens_per_s")
    if not isinstance(tok, int | float) or not tok > 0:
        return None, None, None
    tok = float(tok)
    gpus = int(report.get("num_gpus") or 1)
    cost = None if price is None else price.price_per_gpu_hour * gpus * 1e6 / (tok * units.hour)
    return tok, cost, per_token_energy(report, spec)


def per_token_energy(report: Mapping[str, Any], spec: Any) -> Any:
    """The :class:`~perfmodel.report.goodput.StepEnergy` of a report dict's step (its tokens
    per step ``tokens_per_s * iteration_time_s``, busy seconds the breakdown's compute and
    optimizer), which :func:`per_token_figures` gives, whose ``kwh_per_million_tokens`` is
    :attr:`WhatIfPoint.kwh_per_million_tokens` and whose range :meth:`WhatIfPoint.range_of`
    reads; ``None`` without tokens, a breakdown or a power model."""
    tok = report.get("tokens_per_s")
    bd = report.get("breakdown")
    t = report.get("iteration_time_s")
    if not isinstance(tok, int | float) or not tok > 0 or spec is None:
        return None
    if not isinstance(bd, Mapping) or not isinstance(t, int | float) or not t > 0:
        return None
    from perfmodel.report.goodput import step_energy

    return step_energy(
        spec,
        num_gpus=int(report.get("num_gpus") or 1),
        iteration_time_s=float(t),
        busy_s=float(bd.get("compute_s", 0.0)) + float(bd.get("optimizer_s", 0.0)),
        tokens_per_step=float(tok) * float(t),
    )


def per_million_tokens_lines(
    points: Sequence[WhatIfPoint], why: Callable[[str, str], str | None] | None = None
) -> list[str]:
    """Each system's cheapest point (by cost per million tokens when priced, else by energy)
    ranked, and why the first beats the second: its cost ratio is the price ratio over the
    ratio of tokens/s per GPU (``cost = price / (tokens/s per GPU)``) and, where the points have
    intervals, whether the two costs' (or, unpriced, energies') ranges separate them
    (:func:`~perfmodel.intervals.wording.error_clause`), then ``why(first, second)`` (where the throughput difference comes from), when given. Empty for
    models without tokens."""
    usable = [p for p in points if p.fits_in_memory and p.tokens_per_s]
    if not usable:
        return []
    priced = any(p.cost_per_million_tokens is not None for p in usable)

    def key(p: WhatIfPoint) -> tuple[float, float]:
        c = p.cost_per_million_tokens if priced else p.kwh_per_million_tokens
        return (math.inf if c is None else c, -(p.tokens_per_s or 0.0))

    best: dict[str, WhatIfPoint] = {}
    for p in usable:
        if p.system not in best or key(p) < key(best[p.system]):
            best[p.system] = p
    ranked = sorted(best.values(), key=key)

    def cell(v: float | None, fmt: str) -> str:
        return "-" if v is None else format(v, fmt)

    sw = system_width(ranked)
    lines = [
        "per million tokens (failure-free; energy of the GPU boards only"
        + ("" if priced else "; no price given: ranked by energy")
        + ("; each system at its cheapest GPU count" if len(usable) > len(best) else "")
        + "):",
        f"  {'system':<{sw}} {'gpus':>5} {'tok/s/GPU':>10} {'price/GPU-h':>11} "
        f"{'cost/Mtok':>10} {'kWh/Mtok':>9}",
    ]
    pair = [p for p in ranked if p.cost_per_million_tokens is not None] if priced else ranked
    # what ranks them, and its range: the cost's (the step time's), or the energy's (the power
    # model at the step range's ends, WhatIfPoint.range_of)
    name = "cost_per_million_tokens" if priced else "kwh_per_million_tokens"
    first = pair[0].range_of(name) if pair else None
    tied = {  # the plan search's mark: a range overlapping the first's (both bounded)
        p.system
        for p in pair[1:]
        if first is not None
        and (r := p.range_of(name))
        and overlaps(first, r)
        and bounded(pair[0].interval, p.interval)
    }
    for p in ranked:
        mark = "~" if p.system in tied else " " if tied else ""
        c_mark, e_mark = (mark, "") if priced else ("", mark)
        lines.append(
            f"  {p.system:<{sw}} {p.gpus:>5} {cell(p.tokens_per_s_per_gpu, ',.0f'):>10} "
            f"{cell(p.price_per_gpu_hour, '.4g'):>11} "
            f"{cell(p.cost_per_million_tokens, '.4g') + c_mark:>10} "
            f"{cell(p.kwh_per_million_tokens, '.3g') + e_mark:>9}"
        )
    if tied:
        best, figure = ("cheapest", "cost ") if priced else ("least energy", "energy ")
        lines.append(tie_legend(pair[0].interval.level, best, figure))
    if len(pair) >= 2:
        a, b = pair[0], pair[1]
        tie = ""
        if a.interval is not None:
            tie = error_clause(
                a.range_of(name),
                b.range_of(name),
                a.interval.level,
                bounded=bounded(a.interval, b.interval),
            )
        lines.append(why_cheaper(a, b, priced=priced) + (f"; {tie}" if tie else ""))
        more = why(pair[0].system, pair[1].system) if why is not None else None
        if more:
            lines.append(f"  {more}")
    unpriced = [p.system for p in ranked if p.cost_per_million_tokens is None]
    if priced and unpriced:
        lines.append(
            f"  no price for {', '.join(unpriced)}: give --price-per-gpu-hour (one value or "
            "one per system) to rank them by cost"
        )
    if priced:
        for p in ranked:
            if p.price_source and p.price_source != "price per GPU-hour":
                lines.append(f"  price of {p.system}: {p.price_source}")
    return lines


def why_cheaper(a: WhatIfPoint, b: WhatIfPoint, *, priced: bool = True) -> str:
    """Why point ``a`` costs less per million tokens than ``b``: ``cost_a / cost_b =
    (price_a / price_b) / (tps_a / tps_b)`` with ``tps`` tokens/s per GPU.

    >>> a = WhatIfPoint("x", 8, 1, 1.0, 1.0, None, None, True, None, None, 4.0, None, None,
    ...                 None, tokens_per_s=8000.0, cost_per_million_tokens=0.5)
    >>> b = WhatIfPoint("y", 8, 1, 1.0, 1.0, None, None, True, None, None, 2.0, None, None,
    ...                 None, tokens_per_s=2000.0, cost_per_million_tokens=1.0)
    >>> why_cheaper(a, b)
    'cheapest per million tokens: x (0.5 vs 1 for y, 2.00x less): 4.00x the tokens/s per GPU (1,000 vs 250) at 2.00x the price per GPU-hour (4 vs 2)'
    """
    ta, tb = a.tokens_per_s_per_gpu or 0.0, b.tokens_per_s_per_gpu or 0.0
    if priced and a.cost_per_million_tokens and b.cost_per_million_tokens:
        ca, cb = a.cost_per_million_tokens, b.cost_per_million_tokens
        pa, pb = a.price_per_gpu_hour or 0.0, b.price_per_gpu_hour or 0.0
        head = (
            f"cheapest per million tokens: {a.system} ({ca:.4g} vs {cb:.4g} for {b.system}, "
            f"{cb / ca:.2f}x less)"
        )
        speed = f"{ta / tb:.2f}x the tokens/s per GPU ({ta:,.0f} vs {tb:,.0f})" if tb else ""
        if pa and pb:
            price = f"{pa / pb:.2f}x the price per GPU-hour ({pa:g} vs {pb:g})"
            return f"{head}: {speed} at {price}" if speed else f"{head}: {price}"
        return f"{head}: {speed}" if speed else head
    ea, eb = a.kwh_per_million_tokens, b.kwh_per_million_tokens
    if ea and eb:
        return (
            f"least energy per million tokens: {a.system} ({ea:.3g} vs {eb:.3g} kWh for "
            f"{b.system}): {ta / tb:.2f}x the tokens/s per GPU; give --price-per-gpu-hour to "
            "rank by cost"
            if tb
            else f"least energy per million tokens: {a.system}"
        )
    return (
        "give --price-per-gpu-hour (one value or one per system) to rank by cost per million tokens"
    )


@dataclass(frozen=True)
class WhatIfPoint(FlatRecord):
    """One system option at one GPU count (its JSON form:
    :class:`~perfmodel._record.FlatRecord`)."""

    system: str
    gpus: int
    nodes: int
    iteration_time_s: float
    throughput_samples_per_s: float
    speedup: float | None
    scaling_efficiency: float | None
    fits_in_memory: bool
    epoch_time_s: float | None
    run_time_s: float | None
    price_per_gpu_hour: float | None
    cost_per_epoch: float | None
    cost_per_run: float | None
    meets_deadline: bool | None
    notes: tuple[str, ...] = ()
    """The report's printed notes (:attr:`perfmodel.report.step.StepReport.printed_notes`)."""
    tokens_per_s: float | None = None
    """Tokens per second of the run (sequence models; ``None`` otherwise)."""
    cost_per_million_tokens: float | None = None
    """``price_per_gpu_hour * gpus / (tokens_per_s * 3600) * 1e6``, failure-free."""
    price_source: str = ""
    baseline_gpus: int = 1
    """GPUs of the run :attr:`speedup` divides by (the report's ``baseline_gpus``)."""
    speedup_basis: str = ""
    """What :attr:`speedup` divides by, in words: the report's ``speedup_basis``, the text
    ``predict`` prints (audit15 item 4: one meaning of speedup)."""
    memory_per_gpu_bytes: float | None = None
    """The report's peak memory per GPU (``None`` where it gives none)."""
    memory_tight: bool = False
    """The fit is within the memory model's measured error of the capacity (the report's
    ``memory_tight``, :func:`perfmodel.search.compare_table.tight`): ``!`` in the table."""
    interval: Any = None
    """The step's :class:`~perfmodel.intervals.conformal.ResidualInterval` (``None``: no
    interval asked for, or the record gives none); :meth:`range_of` reads it."""
    energy: Any = None
    """The step's :class:`~perfmodel.report.goodput.StepEnergy` (:func:`per_token_energy`),
    whose power model gives :attr:`kwh_per_million_tokens` its range (``None``: no energy)."""

    @property
    def kwh_per_million_tokens(self) -> float | None:
        """GPU-board energy of a million tokens: :attr:`energy`'s ``kwh_per_million_tokens``
        (:func:`perfmodel.report.goodput.step_energy`); :meth:`to_dict` writes it after
        ``cost_per_million_tokens``."""
        return None if self.energy is None else self.energy.kwh_per_million_tokens

    @property
    def tokens_per_s_per_gpu(self) -> float | None:
        return None if self.tokens_per_s is None else self.tokens_per_s / self.gpus

    def range_of(self, name: str) -> tuple[float, float] | None:
        """``(low, high)`` of a figure of the point at its interval's level: a rate of
        :data:`RANGE_SPEED_FIELDS` by :meth:`ResidualInterval.speed`, a time or cost of
        :data:`RANGE_TIME_FIELDS` (each proportional to the step time) by
        :meth:`ResidualInterval.time`; ``kwh_per_million_tokens`` by the power model at the step
        range's ends (:func:`perfmodel.report.goodput.kwh_per_million_tokens_range`, as
        ``predict --tokens`` ranges the run's energy); ``None`` without an interval or a
        value."""
        v = getattr(self, name)
        if self.interval is None or v is None:
            return None
        if name == "kwh_per_million_tokens":
            if self.energy is None:
                return None
            from perfmodel.report.goodput import kwh_per_million_tokens_range

            return kwh_per_million_tokens_range(
                self.energy, *self.interval.time(self.energy.iteration_time_s)
            )
        if name in RANGE_SPEED_FIELDS:
            return self.interval.speed(float(v))
        if name in RANGE_TIME_FIELDS:
            return self.interval.time(float(v))
        raise ValueError(f"{name!r} has no range (not a rate, time or cost of the point)")

    def straddles(self, deadline_s: float | None) -> bool:
        """Whether the run-time range holds ``deadline_s`` (``low <= deadline < high``: within the
        model's error) and is bounded: an unbounded range (the widest the record gives) makes no
        verdict, as the plan and systems searches mark no tie on one
        (:func:`perfmodel.intervals.answers.ties`)."""
        r = self.range_of("run_time_s")
        return (
            r is not None
            and deadline_s is not None
            and bounded(self.interval)
            and r[0] <= deadline_s < r[1]
        )

    def deadline_cell(self, deadline_s: float | None) -> str:
        """The deadline column: ``yes``/``no`` (the predicted run time against ``deadline_s``),
        ``yes~``/``no~`` where the run-time range straddles the deadline (:meth:`straddles`),
        ``-`` without a verdict."""
        if self.meets_deadline is None:
            return "-"
        return ("yes" if self.meets_deadline else "no") + (
            "~" if self.straddles(deadline_s) else ""
        )

    def to_dict(self) -> dict[str, Any]:
        """The fields (:class:`~perfmodel._record.FlatRecord`), the interval as ``predict
        --json`` writes it (:func:`~perfmodel.intervals.answers.interval_fields`:
        ``interval_level``, ``None`` without one, and with one ``interval_basis``,
        ``interval_warning``, ``interval_bias``, ``interval_bounded``, ``interval_capped``
        where a physical bound cut the range, ``interval_kind_*`` where the pool is of other
        kinds of model) and ``<field>_low`` / ``<field>_high`` of every rate, time and cost
        with a value and of ``kwh_per_million_tokens`` (:meth:`range_of`)."""
        out = super().to_dict()
        from perfmodel.intervals.answers import interval_fields

        at = list(out).index("cost_per_million_tokens") + 1
        items = list(out.items())
        out = dict(
            [*items[:at], ("kwh_per_million_tokens", self.kwh_per_million_tokens), *items[at:]]
        )

        out.pop("interval")
        out.pop("energy")
        out.update(interval_fields(self.interval))
        for name in (*RANGE_TIME_FIELDS, *RANGE_SPEED_FIELDS, "kwh_per_million_tokens"):
            r = self.range_of(name)
            if r is not None:
                out[f"{name}_low"], out[f"{name}_high"] = r
        return out


#: A :class:`WhatIfPoint`'s rates (a range divides them by the speed residual's factors) and its
#: times and costs (proportional to the step time: multiplied), :meth:`WhatIfPoint.range_of`.
RANGE_SPEED_FIELDS = ("throughput_samples_per_s", "tokens_per_s")
RANGE_TIME_FIELDS = (
    "iteration_time_s",
    "epoch_time_s",
    "run_time_s",
    "cost_per_epoch",
    "cost_per_run",
    "cost_per_million_tokens",
)


@dataclass(frozen=True)
class WhatIfResult:
    """Points per system and GPU count, failures, and the cheapest option for the deadline."""

    points: tuple[WhatIfPoint, ...]
    failures: Mapping[str, str]
    epochs: float | None
    deadline_s: float | None
    cheapest: WhatIfPoint | None
    fastest: WhatIfPoint | None
    verdict: str
    per_million_tokens: tuple[str, ...] = ()
    """The ranking by cost (or energy) per million tokens and why
    (:func:`per_million_tokens_lines`); empty for models without tokens."""

    def series(self) -> dict[str, list[WhatIfPoint]]:
        out: dict[str, list[WhatIfPoint]] = {}
        for p in self.points:
            out.setdefault(p.system, []).append(p)
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "points": [p.to_dict() for p in self.points],
            "failures": dict(self.failures),
            "epochs": self.epochs,
            "deadline_s": self.deadline_s,
            "cheapest": self.cheapest.to_dict() if self.cheapest else None,
            "fastest": self.fastest.to_dict() if self.fastest else None,
            "verdict": self.verdict,
            "per_million_tokens": list(self.per_million_tokens),
        }


def default_gpu_counts(gpus_per_node: int) -> tuple[int, ...]:
    """The what-if's GPU counts when ``--gpus`` is not given: the powers of two below one
    server's GPUs, and that count (1, 2, 4, 8 on an 8-GPU server; ... 32, 64, 72 on an NVL72
    rack, whose one "server" is the 72-GPU NVLink domain).

    >>> default_gpu_counts(8), default_gpu_counts(72), default_gpu_counts(1)
    ((1, 2, 4, 8), (1, 2, 4, 8, 16, 32, 64, 72), (1,))
    """
    if gpus_per_node < 1:
        raise ValueError(f"gpus_per_node must be positive, got {gpus_per_node}")
    out = [1 << k for k in range(gpus_per_node.bit_length()) if 1 << k < gpus_per_node]
    return (*out, gpus_per_node)


#: ``interval_of(scenario, report, level)``: a point's residual interval (``None``: none).
IntervalOf = Callable[[Mapping[str, Any], Mapping[str, Any], float], Any]


def step_residual(sc: Mapping[str, Any], report: Mapping[str, Any], level: float) -> Any:
    """The residual interval ``predict`` prints for ``report`` of scenario ``sc``
    (:func:`perfmodel.intervals.answers.step_interval`), ``None`` where the record gives none
    (the point stands without a range)."""
    from perfmodel.intervals.answers import step_interval

    try:
        return step_interval(report, level, scenario=sc).residual
    except PerfModelError:
        return None


def hardware_whatif(
    base: Mapping[str, Any],
    systems: Sequence[SystemOption],
    gpus: Sequence[int] | None,
    *,
    pricing: Mapping[str, Pricing] | None = None,
    epochs: float | None = None,
    dataset_size: int | None = None,
    deadline_s: float | None = None,
    evaluator: Evaluator | None = None,
    gpus_per_node: Callable[[SystemOption], int] = catalogue_gpus_per_node,
    gpu_spec: Callable[[SystemOption], Any] | None = None,
    interval: float | None = None,
    interval_of: IntervalOf = step_residual,
) -> WhatIfResult:
    """Predict ``base`` on every system option and GPU count.

    Parameters
    ----------
    base
        Scenario keys (model, batch, precision, ...); ``system``, ``gpus`` and ``nodes`` are set
        per point (``nodes = ceil(gpus / gpus_per_node)``).
    systems
        :class:`SystemOption` list.
    gpus
        GPU counts; a 1-GPU baseline is predicted for the speedup even if 1 is not listed.
        ``None``: each option's :func:`default_gpu_counts` (up to one server's GPUs).
    pricing
        ``{option label: Pricing}``; options without a price get no cost.
    epochs, dataset_size
        Epochs of the run and samples per epoch (``dataset_size`` may also come from ``base``).
    deadline_s
        Run-time limit for the cheapest-option verdict.
    evaluator
        Scenario dict -> report dict (default :func:`perfmodel.api.predict`).
    gpus_per_node
        GPUs per server of an option (default: from the catalogue).
    gpu_spec
        The GPU of an option, for its energy (default: the catalogue's; ``None`` from it: no
        energy).
    interval, interval_of
        The interval level (``None``: no ranges) and the function giving a point's residual
        interval (default :func:`step_residual`, ``predict``'s).
    """
    ev = evaluator or default_evaluator
    prices = dict(pricing or {})
    n_samples = dataset_size if dataset_size is not None else base.get("dataset_size")
    if epochs is not None and not (epochs > 0):
        raise ConfigError(
            f"--epochs must be positive, got {epochs!r}", value=epochs, where="--epochs"
        )
    if deadline_s is not None and not (deadline_s > 0):
        raise ConfigError(
            f"--deadline must be positive, got {deadline_s!r}", value=deadline_s, where="--deadline"
        )
    points: list[WhatIfPoint] = []
    failures: dict[str, str] = {}
    spec_of = gpu_spec or catalogue_gpu_spec
    for opt in systems:
        gpn = gpus_per_node(opt)
        spec = spec_of(opt)

        def scenario(g: int, opt: SystemOption = opt, gpn: int = gpn) -> dict[str, Any]:
            sc = dict(base)
            sc.update(opt.overrides)
            sc.update(system=opt.system, gpus=g, nodes=max(1, math.ceil(g / gpn)))
            if n_samples is not None:
                sc["dataset_size"] = n_samples
            return sc

        own: list[Any] = []  # this option's own 1-GPU run, evaluated at most once
        for g in gpus if gpus is not None else default_gpu_counts(gpn):
            sc = scenario(int(g))
            try:
                rep = ev(sc)
            except PerfModelError as exc:
                failures[f"{opt.label} x{g}"] = str(exc)
                continue
            if "speedup" in rep or g == 1:
                ref = rep
            else:  # an evaluator without predict's baseline: this option's own 1-GPU run
                if not own:
                    try:
                        own.append(ev(scenario(1)))
                    except PerfModelError as exc:
                        failures[f"{opt.label} x1"] = str(exc)
                        own.append(None)
                ref = own[0]
            run_of = _Run(n_samples, epochs, deadline_s, prices.get(opt.label))
            fits = bool(rep.get("fits_in_memory", True))  # a run that does not fit: no range
            iv = interval_of(sc, rep, interval) if interval is not None and fits else None
            points.append(_point(opt, int(g), gpn, rep, ref, spec, run_of, iv))
    usable = [p for p in points if p.fits_in_memory]
    fastest = min(usable, key=lambda p: (-p.throughput_samples_per_s, p.gpus), default=None)
    cheapest, verdict = _cheapest(usable, epochs, deadline_s)
    return WhatIfResult(
        tuple(points),
        failures,
        epochs,
        deadline_s,
        cheapest,
        fastest,
        verdict,
        tuple(per_million_tokens_lines(points)),
    )


@dataclass(frozen=True)
class _Run:
    """What a what-if point's run is: samples per epoch, epochs, deadline (s) and price."""

    samples: int | None
    epochs: float | None
    deadline_s: float | None
    price: Pricing | None


def _point(
    opt: SystemOption,
    g: int,
    gpn: int,
    rep: Mapping[str, Any],
    ref: Mapping[str, Any] | None,
    spec: Any,
    run: _Run,
    interval: Any = None,
) -> WhatIfPoint:
    """One option and GPU count: its speedup (:func:`_speedup`), epoch and run time, cost per
    epoch and run, the deadline, the per-token figures and the step's residual ``interval``."""
    n_samples, epochs, deadline_s, price = run.samples, run.epochs, run.deadline_s, run.price
    tput = float(rep["throughput_samples_per_s"])
    fits = bool(rep.get("fits_in_memory", True))
    speedup, eff, base_gpus, basis = _speedup(g, rep, ref)
    if n_samples:
        epoch_s: float | None = float(n_samples) / tput
    else:
        e = rep.get("epoch_time_s")
        epoch_s = float(e) if isinstance(e, int | float) and math.isfinite(e) else None
    run_s = epoch_s * epochs if (epoch_s is not None and epochs is not None) else None
    c_epoch = price.cost(int(g), epoch_s) if (price and epoch_s is not None) else None
    c_run = c_epoch * epochs if (c_epoch is not None and epochs is not None) else None
    meets = (run_s <= deadline_s) if (run_s is not None and deadline_s is not None) else None
    from perfmodel.search.compare_table import tight

    tok, c_mtok, energy = per_token_figures(rep, spec, price)
    mem = rep.get("memory_per_gpu_bytes")
    return WhatIfPoint(
        system=opt.label,
        gpus=int(g),
        nodes=max(1, math.ceil(int(g) / gpn)),
        iteration_time_s=float(rep["iteration_time_s"]),
        throughput_samples_per_s=tput,
        speedup=speedup,
        scaling_efficiency=eff,
        fits_in_memory=fits,
        epoch_time_s=epoch_s,
        run_time_s=run_s,
        price_per_gpu_hour=price.price_per_gpu_hour if price else None,
        cost_per_epoch=c_epoch,
        cost_per_run=c_run,
        meets_deadline=meets,
        notes=tuple(rep.get("printed_notes") or ()),
        tokens_per_s=tok,
        cost_per_million_tokens=c_mtok,
        price_source="" if price is None else price.source,
        baseline_gpus=base_gpus,
        speedup_basis=basis,
        memory_per_gpu_bytes=None if mem is None else float(mem),
        memory_tight=fits and tight(rep),
        interval=interval,
        energy=energy,
    )


#: :attr:`WhatIfPoint.speedup_basis` where the evaluator's report carries no speedup of its own.
OWN_REF_BASIS = "this option's 1-GPU run in this comparison (its report gives no speedup)"


def _speedup(
    g: int, rep: Mapping[str, Any], ref: Mapping[str, Any] | None
) -> tuple[float | None, float | None, int, str]:
    """``(speedup, scaling efficiency, baseline GPUs, basis)`` of a point: the report's own
    (``predict``'s ``speedup``, ``scaling_efficiency``, ``baseline_gpus`` and ``speedup_basis``:
    the figure ``predict --gpus`` prints for the same run, audit15 item 4) where it has a
    ``speedup`` key; otherwise (an evaluator without a baseline) ``throughput / throughput of
    the option's 1-GPU run ref`` with :data:`OWN_REF_BASIS`. None when the run, or its 1-GPU
    reference, does not fit in memory."""
    if "speedup" in rep:
        s = rep.get("speedup")
        e = rep.get("scaling_efficiency")
        return (
            None if s is None else float(s),
            None if e is None else float(e),
            int(rep.get("baseline_gpus") or 1),
            str(rep.get("speedup_basis") or "") if s is not None else "",
        )
    fits = bool(rep.get("fits_in_memory", True))
    if ref is None or not (fits and bool(ref.get("fits_in_memory", True))):
        return None, None, 1, ""
    s = float(rep["throughput_samples_per_s"]) / float(ref["throughput_samples_per_s"])
    return s, s / int(g), 1, OWN_REF_BASIS


def _span(p: WhatIfPoint, name: str, fmt: str, scale: float = 1.0, unit: str = "") -> str:
    """`` (80%: low-high UNIT)`` of a figure of ``p`` (divided by ``scale``), ``""`` without
    one."""
    r = p.range_of(name)
    if r is None:
        return ""
    return f" ({100 * p.interval.level:g}%: {r[0] / scale:{fmt}}-{r[1] / scale:{fmt}}{unit})"


def _versus(best: WhatIfPoint, ranked: Sequence[WhatIfPoint], name: str) -> str:
    """``; next <runner-up>: <error clause>`` of ``best`` and the runner-up of ``ranked`` by
    ``name`` (lower is better): the first point of another system (the choice a buyer makes),
    else of another GPU count; ``""`` without a runner-up or ranges."""
    others = [p for p in ranked if p is not best]
    if not others or best.interval is None:
        return ""
    o = next((p for p in others if p.system != best.system), others[0])
    clause = error_clause(
        best.range_of(name),
        o.range_of(name),
        best.interval.level,
        bounded=bounded(best.interval, o.interval),
    )
    return f"; next {o.system} x{o.gpus} ({getattr(o, name):,.2f}): {clause}" if clause else ""


def _cheapest(
    usable: Sequence[WhatIfPoint], epochs: float | None, deadline_s: float | None
) -> tuple[WhatIfPoint | None, str]:
    """The cheapest point that fits (within the deadline when one is given) and the verdict
    line saying so, or why there is none: whether the runner-up is within the model's error
    (:func:`~perfmodel.intervals.wording.error_clause`) and whether the cheapest's run-time
    range reaches past the deadline; with a deadline but no run time (no ``epochs``, or no samples per epoch), that it cannot
    judge and what to give; without a cost, the flags a cost needs."""
    if not usable:
        return None, "no option fits in GPU memory"
    if deadline_s is not None:
        hours = f"{deadline_s / 3600:.1f} h"
        if epochs is None or not any(p.run_time_s is not None for p in usable):
            need = [] if epochs is not None else ["--epochs"]
            if not any(p.epoch_time_s is not None for p in usable):
                need.append("--dataset-size (samples per epoch)")
            return None, (
                f"cannot judge the {hours} deadline: the run time is unknown; give "
                + " and ".join(need)
            )
        ok = [p for p in usable if p.meets_deadline and p.cost_per_run is not None]
        ok.sort(key=lambda p: (p.cost_per_run, p.run_time_s))
        cheapest = ok[0] if ok else None
        if cheapest is not None:
            verdict = (
                f"cheapest within {hours}: {cheapest.system} x{cheapest.gpus} GPUs, "
                f"{cheapest.run_time_s / 3600:.2f} h{_span(cheapest, 'run_time_s', '.2f', 3600, ' h')}, "
                f"cost {cheapest.cost_per_run:,.2f}{_span(cheapest, 'cost_per_run', ',.2f')}"
                + _versus(cheapest, ok, "cost_per_run")
            )
            if cheapest.straddles(deadline_s):
                verdict += (
                    f"; its run-time range reaches "
                    f"{cheapest.range_of('run_time_s')[1] / 3600:.2f} h: it may miss the deadline"
                )
        elif any(p.meets_deadline for p in usable):
            verdict = f"options meet the {hours} deadline but none has a price"
        else:
            best = min(
                (p for p in usable if p.run_time_s is not None),
                key=lambda p: p.run_time_s,
                default=None,
            )
            verdict = f"no option meets the {hours} deadline" + (
                f"; fastest is {best.system} x{best.gpus} at {best.run_time_s / 3600:.2f} h"
                f"{_span(best, 'run_time_s', '.2f', 3600, ' h')}"
                if best
                else ""
            )
        return cheapest, verdict
    priced = sorted(
        (p for p in usable if p.cost_per_run is not None),
        key=lambda p: (p.cost_per_run, p.run_time_s),
    )
    c = priced[0] if priced else None
    if c is not None:
        return c, (
            f"cheapest run: {c.system} x{c.gpus} GPUs, cost {c.cost_per_run:,.2f}"
            f"{_span(c, 'cost_per_run', ',.2f')}" + _versus(c, priced, "cost_per_run")
        )
    need = (
        []
        if any(p.price_per_gpu_hour is not None for p in usable)
        else ["--price-per-gpu-hour (or --purchase-price/--lifetime-years)"]
    )
    if epochs is None:
        need.append("--epochs")
    if not any(p.epoch_time_s is not None for p in usable):
        need.append("--dataset-size")
    return None, (
        f"give {' and '.join(need)} for costs; --deadline for the cheapest option meeting it"
        if need
        else "no option that fits has a cost"
    )


def format_whatif(result: WhatIfResult) -> str:
    """Plain-text table of a :class:`WhatIfResult`; with intervals, the ranges of each row
    (:func:`_range_lines`) under it and a legend for ``~``."""

    from perfmodel.search.compare_table import mem_cell, tight_line
    from perfmodel.units import GiB

    def f(v: float | None, fmt: str) -> str:
        return format(v, fmt) if v is not None else "-"

    sw = system_width(result.points)
    # a speedup against more than 1 GPU is marked in its cell (" vs4"): rows may differ
    speed = [f(p.speedup, ".2f") + _vs(p) for p in result.points]
    spw = max(8, *map(len, speed)) if speed else 8
    head = (
        f"{'system':<{sw}} {'gpus':>5} {'nodes':>5} {'iter ms':>9} {'samples/s':>11} "
        f"{'speedup':>{spw}} {'eff':>5} {'epoch h':>8} {'run h':>8} {'cost/epoch':>11} "
        f"{'cost/run':>11} {'mem GiB':>8} {'deadline':>8}"
    )
    lines = [head, "-" * len(head)]
    for p, sp in zip(result.points, speed, strict=True):
        dl = p.deadline_cell(result.deadline_s)
        mem = f(p.memory_per_gpu_bytes and p.memory_per_gpu_bytes / GiB, "8.1f")
        oom = "" if p.fits_in_memory else "  (out of memory)"
        lines.append(
            f"{p.system:<{sw}} {p.gpus:>5} {p.nodes:>5} {p.iteration_time_s * 1e3:9.1f} "
            f"{p.throughput_samples_per_s:11.1f} {sp:>{spw}} "
            f"{f(p.scaling_efficiency, '5.2f'):>5} "
            f"{f(p.epoch_time_s and p.epoch_time_s / 3600, '8.3f'):>8} "
            f"{f(p.run_time_s and p.run_time_s / 3600, '8.2f'):>8} "
            f"{f(p.cost_per_epoch, '11,.2f'):>11} {f(p.cost_per_run, '11,.2f'):>11} "
            f"{mem_cell({'memory_tight': p.memory_tight}, mem):>8} {dl:>8}{oom}"
        )
    for k, v in result.failures.items():
        lines.append(f"failed {k}: {v}")
    if any(_vs(p) for p in result.points):
        lines.append(
            "speedup vsN: against N GPUs of that system, not 1 (the smallest count that fits; "
            "'speedup against' below); eff divides by the same baseline"
        )
    if any(p.memory_tight for p in result.points):
        lines.append(tight_line())
    lines.extend(_range_lines(result))
    lines.extend(_per_system((p, n) for p in result.points for n in p.notes))
    lines.extend(_basis_lines(result.points))
    lines.append(result.verdict)
    lines.extend(result.per_million_tokens)
    return "\n".join(lines)


def _vs(p: WhatIfPoint) -> str:
    """A speedup cell's mark of a baseline other than 1 GPU (``" vs4"``), else ``""``."""
    return f" vs{p.baseline_gpus}" if p.speedup is not None and p.baseline_gpus != 1 else ""


def system_width(points: Sequence[WhatIfPoint]) -> int:
    """The system column's width: 28, or the longest option label (``aws-p5.48xlarge:
    precision=bf16``) so that no row overflows it."""
    return max(28, *(len(p.system) for p in points)) if points else 28


def _basis_lines(points: Sequence[WhatIfPoint]) -> list[str]:
    """What each row's speedup divides by (:attr:`WhatIfPoint.speedup_basis`, ``predict``'s
    words), each distinct text of a system once with its GPU counts; none for a row that is its
    own baseline (it reads 1.00)."""
    from perfmodel.pipeline.baseline import SELF_BASIS

    return _per_system(
        (p, f"speedup against {p.speedup_basis}")
        for p in points
        if p.speedup_basis and p.speedup_basis != SELF_BASIS
    )


def _per_system(texts: Iterable[tuple[WhatIfPoint, str]], indent: str = "") -> list[str]:
    """``SYSTEM xN/M: TEXT``: each distinct text of a system once, with the GPU counts of its
    points that said it (in the order first said)."""
    counts: dict[tuple[str, str], list[int]] = {}
    for p, text in texts:
        counts.setdefault((p.system, text), []).append(p.gpus)
    return [
        f"{indent}{system} x{'/'.join(map(str, gpus))}: {text}"
        for (system, text), gpus in counts.items()
    ]


def _range_lines(result: WhatIfResult) -> list[str]:
    """Each row's ranges (iteration time, throughput, run time and cost where the row has
    them), what each system's ranges rest on with the bias of runs like it and any warning
    (``predict``'s words, :func:`perfmodel.intervals.answers.interval_lines`), and what ``~``
    in the deadline column means. Empty without intervals."""
    pts = [p for p in result.points if p.interval is not None]
    if not pts:
        return []
    level = pts[0].interval.level
    pct = f"{100 * level:g}%"
    cols = [
        ("iteration_time_s", "iter ms", 1e-3, ".1f"),
        ("throughput_samples_per_s", "samples/s", 1.0, ".1f"),
    ]
    if any(p.run_time_s is not None for p in pts):
        cols.append(("run_time_s", "run h", 3600.0, ".2f"))
    if any(p.cost_per_run is not None for p in pts):
        cols.append(("cost_per_run", "cost/run", 1.0, ",.2f"))

    def cell(p: WhatIfPoint, name: str, scale: float, fmt: str) -> str:
        r = p.range_of(name)
        return "-" if r is None else f"{r[0] / scale:{fmt}}-{r[1] / scale:{fmt}}"

    rows = [[cell(p, name, scale, fmt) for name, _, scale, fmt in cols] for p in pts]
    widths = [max(len(c[1]), *(len(r[i]) for r in rows)) for i, c in enumerate(cols)]
    sw = system_width(pts)
    head = f"{pct} ranges: {'system':<{sw}} {'gpus':>5} " + " ".join(
        f"{c[1]:>{w}}" for c, w in zip(cols, widths, strict=True)
    )
    out = ["", head]
    pad = " " * len(f"{pct} ranges: ")
    for p, r in zip(pts, rows, strict=True):
        out.append(
            f"{pad}{p.system:<{sw}} {p.gpus:>5} "
            + " ".join(f"{v:>{w}}" for v, w in zip(r, widths, strict=True))
        )
    out.extend(_per_system(((p, basis_clause(p.interval, these=True)) for p in pts), "  "))
    if any(p.deadline_cell(result.deadline_s).endswith("~") for p in pts):
        out.append(
            f"  deadline ~: the {pct} run-time range straddles the deadline (within the "
            "model's error)"
        )
    return out
