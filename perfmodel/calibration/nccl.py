"""nccl-tests logs -> collective measurements -> fitted :class:`perfmodel.comm.LinkParams`.

Parsing is :func:`perfmodel.comm.nccl_tests.read_nccl_tests` (the communication model's reader);
this module turns its rows into :class:`Measurement` s (kind ``collective``) and fits the link
class they ran over.

Fitted model (ring algorithm, Thakur et al. 2005; NCCL's ring for the bandwidth-bound sizes)::

    t(S, n) = steps(op, n) * alpha_s + bus_factor(op, n) * S / bandwidth_Bps

with ``steps = 2 (n - 1)`` for all-reduce and ``n - 1`` for all-gather, reduce-scatter and
all-to-all (``1`` for broadcast/reduce/send-recv: pipelined chain), and ``bus_factor`` the
nccl-tests bus-bandwidth factor (:func:`perfmodel.ops.bus_factor`). So ``bandwidth_Bps`` is the
asymptotic bus bandwidth, which for a ring equals the bandwidth of its slowest link, and
``alpha_s`` the latency of one ring step. They become the ``alpha_s`` / ``bandwidth_Bps`` of the
link class the log ran over (``--link``: ``nvlink``, ``nvswitch``, ``pcie``, ``infiniband``,
``ethernet`` or a technology name such as ``ib-hdr``), which the user must name: a log does not
say which links its rings crossed.

That ring fit is only a summary of the log: its whole-ring bus bandwidth and per-step alpha are
not per-link quantities, so applied to single links they mispredict (a DGX-1V log refitted this
way predicted 299 GB/s against the 135 GB/s it came from). When the measurements name the system
they ran on (``params["system"]``, set by ``perfmodel calibrate --nccl-log ... --system`` or
guessed from the log's device names), :func:`fit_link_params_on_system` fits **through the
communication model itself**: the per-link goodput of the class and a latency that NCCL's step
table misses are adjusted until :class:`perfmodel.comm.CommCostModel` reproduces the log, so the
fitted profile predicts its own log (issue 12).
"""

from __future__ import annotations

import os
from collections import defaultdict
from collections.abc import Sequence
from types import MappingProxyType
from typing import Any

import numpy as np

from perfmodel.calibration.fit import fit_log_model
from perfmodel.calibration.measurement import (
    BenchKind,
    Measurement,
    TimingStats,
    collective_measurement,
)
from perfmodel.calibration.profile import FitSummary
from perfmodel.comm.params import link_class_name
from perfmodel.errors import CalibrationError
from perfmodel.ops import CollectiveOp, bus_factor


def ring_steps(op: CollectiveOp, n: int) -> int:
    """Latency-bearing steps of the ring algorithm for ``op`` over ``n`` ranks.

    >>> ring_steps(CollectiveOp.ALLREDUCE, 8), ring_steps(CollectiveOp.ALLGATHER, 8)
    (14, 7)
    """
    if op is CollectiveOp.ALLREDUCE:
        return 2 * (n - 1)
    if op in (CollectiveOp.ALLGATHER, CollectiveOp.REDUCESCATTER, CollectiveOp.ALLTOALL):
        return n - 1
    return 1


def import_nccl_tests(
    path: str | os.PathLike[str],
    *,
    link_class: str,
    op: CollectiveOp | str | None = None,
    inplace: bool = False,
) -> list[Measurement]:
    """Read an nccl-tests log into collective measurements over ``link_class``.

    Parameters
    ----------
    link_class
        The link family or technology the collective's rings crossed (recorded with every
        measurement; the fit targets it).
    op
        The collective when the log does not name its binary.
    inplace
        Use the in-place columns instead of the out-of-place ones.

    Raises
    ------
    ParseError
        From the reader, for a file with no table row.
    CalibrationError
        When the collective or the number of ranks cannot be told.
    """
    from perfmodel.comm.nccl_tests import read_nccl_tests

    log = read_nccl_tests(path, op=op)
    return log_measurements(log, link_class=link_class, inplace=inplace, where=str(path))


def log_measurements(
    log: Any, *, link_class: str, inplace: bool = False, where: str | None = None
) -> list[Measurement]:
    """The collective measurements of an already read nccl-tests log
    (:class:`~perfmodel.comm.nccl_tests.NcclTestsLog`): :func:`import_nccl_tests` without the
    file read. ``where`` names the log in errors (default: the log's ``source``)."""
    path = log.source if where is None else where
    if log.op is None:
        raise CalibrationError(
            f"{path}: the log does not name its collective; pass op= (--op)",
            value=None,
            where=str(path),
        )
    ranks = log.ranks
    if ranks < 2:
        raise CalibrationError(
            f"{path}: number of ranks not found in the log (no '# Rank ...' lines)",
            value=ranks,
            where=str(path),
        )
    link_class = link_class_name(link_class, where="--link")
    out = []
    for row in log.rows:
        t = row.inplace_time_s if inplace and row.inplace_time_s else row.time_s
        if not t or t <= 0:
            continue
        out.append(
            collective_measurement(
                log.op.value,
                row.size_bytes,
                ranks=ranks,
                nodes=log.nodes,
                dtype=row.dtype,
                link_class=link_class,
                timing=TimingStats(t, t, t, t, 1),
                backend="nccl-tests",
                notes=f"imported from {os.path.basename(str(path))} (line {row.line})",
                key_suffix="/inplace" if inplace else "",
                more_params={"inplace": bool(inplace)},
            )
        )
    if not out:
        raise CalibrationError(f"{path}: no usable rows", value=str(path), where=str(path))
    return out


def fit_link_params(
    measurements: Sequence[Measurement], *, min_bytes: int = 0
) -> tuple[Any, dict[str, FitSummary]]:
    """Fit ``alpha_s`` and ``bandwidth_Bps`` per link class from collective measurements.

    Returns
    -------
    (LinkParams, fits)
        ``fits["link.<class>"]`` holds each class's values, standard errors and residuals.

    Raises
    ------
    CalibrationError
        If a measurement has no ``link_class`` or a class has fewer than 3 sizes.
    """
    from perfmodel.comm import LinkParams

    by_class: dict[str, list[Measurement]] = defaultdict(list)
    for m in measurements:
        if m.kind is not BenchKind.COLLECTIVE or int(m.params.get("nbytes", 0)) < min_bytes:
            continue
        cls = m.params.get("link_class")
        if not cls:
            raise CalibrationError(
                f"{m.key}: collective measurement without 'link_class' (import with --link)",
                value=m.key,
                where=f"{m.key}.params.link_class",
            )
        by_class[str(cls)].append(m)
    classes: dict[str, dict[str, float]] = {}
    fits: dict[str, FitSummary] = {}
    for cls, pts in by_class.items():
        systems = {str(m.params.get("system") or "") for m in pts}
        if len(systems) == 1 and "" not in systems and len(pts) >= 3:
            from perfmodel.topology import load_system

            sysname = systems.pop()
            nodes = max(int(m.params.get("nodes") or 1) for m in pts)
            topo = load_system(sysname, nodes=nodes)
            values, summary = fit_link_params_on_system(pts, topo, cls)
            classes[cls] = values
            fits[f"link.{cls}"] = summary
            continue
        if len(pts) < 3:
            raise CalibrationError(
                f"link class {cls!r}: need >= 3 message sizes to fit, got {len(pts)}",
                value=len(pts),
                where=cls,
            )
        ops = [CollectiveOp.parse(str(m.params["op"])) for m in pts]
        ns = [int(m.params["ranks"]) for m in pts]
        steps = np.array([ring_steps(o, n) for o, n in zip(ops, ns)], dtype=float)
        factor = np.array([bus_factor(o, n) for o, n in zip(ops, ns)], dtype=float)
        size = np.array([float(m.params["nbytes"]) for m in pts])
        times = [m.time_s for m in pts]
        big = int(np.argmax(size))
        bw0 = max(factor[big] * size[big] / times[big], 1.0)
        alpha0 = max(min(times) / max(steps.min(), 1.0), 1e-9)
        r = fit_log_model(
            lambda p, steps=steps, factor=factor, size=size: (
                steps * p["alpha_s"] + factor * size / p["bandwidth_Bps"]
            ),
            times,
            {"alpha_s": alpha0, "bandwidth_Bps": bw0},
            bounds={"alpha_s": (1e-9, 1.0), "bandwidth_Bps": (1e6, 1e13)},
            where=f"link {cls}",
        )
        classes[cls] = {"alpha_s": r.values["alpha_s"], "bandwidth_Bps": r.values["bandwidth_Bps"]}
        fits[f"link.{cls}"] = r.summary(
            "t = steps(op, n) alpha_s + bus_factor(op, n) bytes / bandwidth_Bps (ring)",
            notes=f"{len(pts)} sizes; ops {sorted({o.value for o in ops})}; ranks {sorted(set(ns))}",
        )
    if not classes:
        raise CalibrationError(
            "no collective measurements to fit link parameters", value=0, where="measurements"
        )
    params = LinkParams.from_dict(
        {**classes, "source": "calibrated from collective measurements (nccl-tests)"}
    )
    return params, fits


def predict_ring(m: Measurement, alpha_s: float, bandwidth_Bps: float) -> float:
    """The fitted ring model's time for a collective measurement (seconds)."""
    op = CollectiveOp.parse(str(m.params["op"]))
    n = int(m.params["ranks"])
    return (
        ring_steps(op, n) * alpha_s + bus_factor(op, n) * float(m.params["nbytes"]) / bandwidth_Bps
    )


#: Sizes that set the bandwidth in :func:`fit_link_params_on_system` (bandwidth-bound regime).
_BW_BYTES = 64 * 2**20


def _class_link_bandwidth(topology: Any, cls: str) -> float:
    """Per-link goodput (bytes/s) the catalogue gives a link class in ``topology``."""
    from perfmodel.comm.links import DirectedLinks

    links = DirectedLinks(topology)
    g = topology.graph
    for (u, v), cap, units in zip(links.edges, links.capacity_Bps, links.units):
        d = g.edges[u, v]
        fam = getattr(d["family"], "value", str(d["family"]))
        if cls in (str(d["tech"]).lower(), str(fam).lower()):
            return float(cap) / float(units)
    raise CalibrationError(
        f"link class {cls!r} does not occur in system {topology.name}; name the class the log's "
        "collectives crossed (--link) or the system they ran on (--system)",
        value=cls,
        where="--link",
    )


def fit_link_params_on_system(
    measurements: Sequence[Measurement],
    topology: Any,
    link_class: str,
    *,
    iterations: int = 6,
) -> tuple[dict[str, float], FitSummary]:
    """Fit one link class so that the communication model reproduces collective measurements.

    The model's time for the bandwidth-bound sizes (>= 64 MiB, or the largest third of the
    sizes) is inversely proportional to the class's per-link goodput ``b`` where that class is
    the bottleneck, so ``b`` is updated as ``b <- b x median(t_model / t_measured)`` until it
    settles (a fixed point of the model itself, not of a ring closed form). Then the latency the
    NCCL step table misses, ``alpha_s`` per traversal of a link of the class, comes from the
    smallest third of the sizes: the model is linear in it, ``t(alpha) = t(0) + alpha x
    dt/dalpha``, so ``alpha = median((t_measured - t(0)) / (dt/dalpha))``, clipped at 0.

    Returns
    -------
    (values, summary)
        ``{"bandwidth_Bps": b}`` plus ``"alpha_s"`` when positive, and a :class:`FitSummary`
        whose residuals are ``ln(model / measured)`` at every size.

    Raises
    ------
    CalibrationError
        If the class does not occur in the system or the measurements mix groups.
    """
    from perfmodel.comm import CommCostModel, LinkParams

    pts = sorted(measurements, key=lambda m: float(m.params["nbytes"]))
    ranks = {int(m.params["ranks"]) for m in pts}
    if len(ranks) != 1:
        raise CalibrationError(
            f"link class {link_class!r}: measurements over several group sizes {sorted(ranks)}; "
            "fit one log at a time",
            value=sorted(ranks),
            where=link_class,
        )
    n = ranks.pop()
    if n > topology.num_gpus:
        raise CalibrationError(
            f"{n} ranks but system {topology.name} has {topology.num_gpus} GPUs",
            value=n,
            where="--system",
        )
    group = topology.gpus[:n]
    ops = [CollectiveOp.parse(str(m.params["op"])) for m in pts]
    size = np.array([float(m.params["nbytes"]) for m in pts])
    meas = np.array([m.time_s for m in pts])

    def predict(bw: float, alpha: float) -> np.ndarray:
        entry: dict[str, float] = {"bandwidth_Bps": bw}
        if alpha > 0:
            entry["alpha_s"] = alpha
        model = CommCostModel(topology, LinkParams.from_dict({link_class: entry}))
        return np.array([model.collective(o, s, group).time_s for o, s in zip(ops, size)])

    k = max(1, len(pts) // 3)
    big = size >= _BW_BYTES if np.count_nonzero(size >= _BW_BYTES) >= 2 else size >= size[-k]
    small = size <= size[k - 1]
    bw = _class_link_bandwidth(topology, link_class)
    alpha = 0.0
    for _ in range(2):
        for _ in range(iterations):
            ratio = float(np.median(predict(bw, alpha)[big] / meas[big]))
            bw *= ratio
            if abs(ratio - 1.0) < 1e-4:
                break
        t0 = predict(bw, 0.0)
        step = 1e-6
        slope = (predict(bw, step) - t0) / step
        ok = small & (slope > 0)
        new_alpha = max(0.0, float(np.median((meas[ok] - t0[ok]) / slope[ok]))) if ok.any() else 0.0
        if abs(new_alpha - alpha) <= 1e-9:
            break
        alpha = new_alpha
    final = predict(bw, alpha)
    resid = np.log(final / meas)
    values = {"bandwidth_Bps": bw}
    if alpha > 0:
        values["alpha_s"] = alpha
    summary = FitSummary(
        model=(
            f"CommCostModel({topology.name}, {link_class}: bandwidth_Bps, alpha_s).collective "
            f"over {n} ranks (the model itself; fixed point on the >= 64 MiB sizes)"
        ),
        values=MappingProxyType(dict(values)),
        stderr=MappingProxyType(dict.fromkeys(values, float("nan"))),
        n_points=len(pts),
        rms_log_residual=float(np.sqrt(np.mean(resid**2))),
        median_abs_error=float(np.median(np.abs(final / meas - 1.0))),
        notes=f"{len(pts)} sizes; ops {sorted({o.value for o in ops})}; ranks [{n}]",
    )
    return values, summary
