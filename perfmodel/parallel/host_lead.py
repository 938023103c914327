"""The eager host leads the GPU: the kernels a host must issue per step and per stage
(:func:`step_kernels`, :func:`issue_times`), and how far ahead of the GPU it must start
(:func:`issue_lead`) so that the GPU never waits for a launch.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from perfmodel.parallel.costs import Costs
from perfmodel.parallel.lowering import Chunk
from perfmodel.parallel.partition import block_runs
from perfmodel.parallel.plan import (
    Recompute,
)
from perfmodel.parallel.recipe import (
    SelectiveRecompute,
)
from perfmodel.workload.layers import (
    LayerCost,
)
from perfmodel.workload.memory import RECOMPUTE_FULL, RECOMPUTE_SELECTIVE


def step_kernels(layer: LayerCost) -> int:
    """Kernel launches of one layer in one forward + backward pass.

    ``kernels + bwd_kernels`` (the per-layer counts of the H100 PyTorch traces, see
    :class:`~perfmodel.workload.layers.LayerCost`); a hand-built layer without ``bwd_kernels``
    counts its backward as ``2 x kernels`` (input and weight gradient), the compute model's
    legacy rule. At least one forward kernel per layer.

    >>> from perfmodel.workload.layers import LayerCost, LayerKind
    >>> base = dict(name="fc", kind=LayerKind.LINEAR, fwd_flop=1.0, bwd_input_flop=1.0,
    ...             bwd_weight_flop=1.0, params=1, fwd_bytes=1.0, bwd_bytes=1.0,
    ...             activation_bytes=1.0, output_shape=(1,))
    >>> step_kernels(LayerCost(**base, kernels=2, bwd_kernels=3)), step_kernels(LayerCost(**base))
    (5, 3)
    """
    fwd = max(1, int(layer.kernels))
    bwd = 2 * fwd if layer.bwd_kernels is None else max(0, int(layer.bwd_kernels))
    return fwd + bwd


#: Whether :func:`issue_times` gives a chunk read off another
#: (:attr:`~perfmodel.parallel.lowering.Chunk.values_of`) the time of that chunk or of the
#: first chunk read off it, without reading its layers' runs (tests compare both ways).
#:
#: Exact: such chunks exist only where the cost model prices by cost key
#: (:func:`~perfmodel.parallel.lowering._chunk_key`); each holds the consecutive ids at the
#: same offset in the same stack's block, as many, so :func:`block_runs` gives it the same
#: runs of the same source layers with the same counts, whose key (source ids, counts,
#: recomputed blocks or selective shares, all read off the source layers) is the other's:
#: the memo's hit, the same float (issue 27: 6 of a pp8 plan's 8 chunks).
SHIFTED_ISSUE = True


def issue_times(
    costs: Costs,
    chunks: Sequence[Chunk],
    P: int,
    V: int,
    m: int,
    recompute: Recompute,
    selective_share: Callable[[LayerCost], float] = SelectiveRecompute.ATTENTION_CORE.share,
) -> list[float]:
    """Host issue time of one step per pipeline stage (``m`` micro-batches of its chunks'
    forward, backward and re-computed forward kernels); zeros when the cost model has no host
    model or the stack is graph-mode. A run of identical units (:func:`~perfmodel.parallel.partition.block_runs`) is priced
    once and counted ``n`` times (within 1e-12 relative of the layer-by-layer sum: see
    ``perfmodel.parallel.lowering._segment_sums``)."""
    host_of = getattr(costs, "layer_host_time", None)
    out = [0.0] * P
    if host_of is None:
        return out
    memo: dict[tuple[object, ...], float] = {}  # identical chunks (a stack's stages) once
    shifted: dict[int, float] = {}  # SHIFTED_ISSUE: by id of the chunk (or the one read off)
    for k, ch in enumerate(chunks):
        src = ch.values_of if SHIFTED_ISSUE else None
        if src is not None:
            t = shifted.get(id(src))
            if t is not None:
                out[k % P] += m * t
                continue
        runs = block_runs(ch.layers, costs)
        key: tuple[object, ...] = tuple((rk, n) for _, rk, n in runs)
        if recompute is RECOMPUTE_FULL:
            key += tuple(tuple(la.block is None for la in unit) for unit, _, _ in runs)
        elif recompute is RECOMPUTE_SELECTIVE:
            key += tuple(tuple(selective_share(la) for la in unit) for unit, _, _ in runs)
        t = memo.get(key)
        if t is None:
            t = 0.0
            for unit, _, n in runs:  # a run of n > 1 identical units: n x one unit's time
                u = t if n == 1 else 0.0
                for layer in unit:
                    f, b = host_of(layer)
                    u += f + b
                    if recompute is RECOMPUTE_FULL and layer.block is not None:
                        u += f
                    elif recompute is RECOMPUTE_SELECTIVE:
                        u += f * selective_share(layer)
                t = u if n == 1 else t + n * u
            memo[key] = t
        if SHIFTED_ISSUE:
            shifted[id(ch if src is None else src)] = t
        out[k % P] += m * t
    return out


def issue_lead(
    costs: Costs,
    chunks: Sequence[Chunk],
    ops: Sequence[tuple[str, int, int]],
    P: int,
    s: int,
    recompute: Recompute,
    selective_share: Callable[[LayerCost], float] = SelectiveRecompute.ATTENTION_CORE.share,
) -> float:
    """Seconds the eager host must issue before stage ``s``'s GPU can run its step without
    waiting for a kernel that is not issued yet (0 without a host model or in graph mode).

    The host issues the kernels in program order while the GPU runs them, each no earlier than
    its launch: a two-machine flow shop in a fixed order. Layer ``i`` (host ``h_i``, GPU ``g_i``
    seconds, backward with its recomputed forward) is issued by ``H_i = h_1 + ... + h_i``; the
    GPU, having run ``G_{i-1} = g_1 + ... + g_{i-1}``, never waits if it starts
    ``D = max_i (H_i - G_{i-1})`` after the host (Johnson 1954, the two-stage production
    schedule, for a given order). While the host is slower than the GPU (the first forward's
    small kernels) this is the idle start of the step seen in eager traces; once the GPU is
    slower the host runs ahead. ``ops`` is the stage's operation order
    (:func:`~perfmodel.parallel.schedule.stage_ops`); a run of ``n`` identical units adds
    ``(n - 1) max(0, h - g)`` to its unit's lead. With pipelining, the sequence stops before
    the first operation after the first that waits for another stage (any operation of a later
    stage, a backward or a later chunk's forward on the first one): while the GPU waits there
    the host runs ahead, so later operations need no lead of their own.
    """
    host_of = getattr(costs, "layer_host_time", None)
    if host_of is None:
        return 0.0
    memo: dict[tuple[int, str], tuple[float, float, float]] = {}

    def op_lead(k: int, phase: str) -> tuple[float, float, float]:
        hit = memo.get((k, phase))
        if hit is not None:
            return hit
        runs = block_runs(chunks[k].layers, costs)
        H = G = lead = 0.0
        for unit, _, n in runs if phase == "F" else reversed(runs):
            uh = ug = ulead = 0.0
            for layer in unit if phase == "F" else reversed(unit):
                fh, bh = host_of(layer)
                f, bi, bw = costs.layer_time(layer)
                if phase == "F":
                    h, g = fh, f
                else:
                    if recompute is RECOMPUTE_FULL:
                        r = 1.0 if layer.block is not None else 0.0
                    elif recompute is RECOMPUTE_SELECTIVE:
                        r = selective_share(layer)
                    else:
                        r = 0.0
                    h, g = bh + r * fh, bi + bw + r * f
                ulead = max(ulead, uh + h - ug)
                uh += h
                ug += g
            lead = max(lead, H - G + ulead + max(0.0, (n - 1) * (uh - ug)))
            H += n * uh
            G += n * ug
        memo[(k, phase)] = (H, G, lead)
        return H, G, lead

    H = G = lead = 0.0
    for i, (phase, _, c) in enumerate(ops):
        if P > 1 and i > 0 and (s > 0 or phase == "B" or c > 0):
            break
        h, g, op = op_lead(c * P + s, phase)
        if h <= 0.0:
            continue
        lead = max(lead, H - G + op)
        H += h
        G += g
    return max(lead, 0.0)
