"""Collectives replayed on a :class:`~perfmodel.comm.flow.FlowNetwork` as SimPy processes issuing
transfers.

:func:`run_collective` runs a collective as processes issuing transfers:

- ``ring``: each of the model's ring channels carries its share of the data
  (proportional to its steady-state rate); every step of the ring is split into ``chunks``
  sub-chunks that are forwarded as soon as they arrive (pipelined), each step pays NCCL's
  per-step latency. With ``coarse=True`` (the training-step simulation's choice), and always
  above :data:`COARSE_RING_RANKS` ranks, a channel is simulated as one flow across all its links
  at once (the steady state of the pipelined ring) plus its per-step latencies: exact alone,
  the fluid limit under contention, and its cost does not grow with steps or chunks.
  Latency is counted once, as the closed form counts it (NCCL's base latency and per-step
  ``hwLat``, with the ring plateau factor on both; point-to-point sends: :meth:`FlowNetwork.send`).
- ``tree``: two complementary trees (each half the data) over the servers, a chain inside each
  server; chunked reduce up and broadcast down.
- ``direct``/``p2p``/``ps``/``host``/``halving_doubling``/``hierarchical``/``torus2d``: their
  phases as concurrent transfers (see :mod:`perfmodel.comm.closed_form` for the algorithms).
"""

from __future__ import annotations

import itertools
import math
from collections import defaultdict
from collections.abc import Generator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import simpy

import perfmodel.comm.params as P
from perfmodel.comm.algorithms import near_square_factor, nearest_cpu
from perfmodel.comm.analytic import check_message_bytes
from perfmodel.comm.channels import build_channels, channel_rates, channel_route
from perfmodel.comm.flow import FlowNetwork, p2p_alpha_s
from perfmodel.comm.nccl_recent import CLOSED_FORM_ONLY
from perfmodel.comm.nodes import check_group, nics_of
from perfmodel.comm.p2p_read import ring_copy_s
from perfmodel.comm.params import Algorithm, HwClass, Protocol
from perfmodel.comm.rings import Channel
from perfmodel.comm.transfers import p2p_transfers
from perfmodel.errors import ConfigError
from perfmodel.ops import CollectiveOp

if TYPE_CHECKING:
    from perfmodel.comm.analytic import AnalyticCommModel, CommResult
    from perfmodel.comm.group import GroupInfo
    from perfmodel.comm.links import DirectedLinks

#: Rings with more ranks than this are simulated one flow per channel (see module docstring).
COARSE_RING_RANKS = 64


def run_collective(
    net: FlowNetwork,
    op: CollectiveOp | str,
    message_bytes: float,
    group: Sequence[str],
    algorithm: Algorithm | str = "ring",
    *,
    protocol: Protocol | str | None = None,
    chunks: int = 4,
    wire_factor: float = 1.0,
    coarse: bool = False,
) -> simpy.Process:
    """Start collective ``op`` on ``net`` as a SimPy process (completes when the collective does).

    Parameters
    ----------
    net
        The flow network (its environment runs the process).
    op, message_bytes, group
        As for :meth:`CommCostModel.collective`.
    algorithm
        ``ring``, ``tree``, ``direct``, ``p2p``, ``ps``, ``host``, ``halving_doubling``,
        ``hierarchical`` or ``torus2d`` (``auto`` = ``ring``, or ``direct``/``p2p`` where those
        are the only choice). An algorithm without a flow model (``nvls``, ``collnet``, chosen
        by the tuner or named) takes its closed-form time and loads no link.
    protocol
        NCCL protocol whose per-step latency is paid. ``None`` (default): the algorithm
        (for ``auto``) and protocol NCCL's tuner would choose, with the protocol's bandwidth
        overhead, exactly as ``CommCostModel(..., fidelity="simulated")`` does.
    chunks
        Sub-chunks per ring step / pipeline chunks of a chain or tree.
    wire_factor
        Bytes on the wire per payload byte (>= 1: protocol overhead such as LL's flags).
    coarse
        Replay each ring channel of an all-reduce, reduce-scatter or all-gather (also inside the
        hierarchical and 2D-torus algorithms) as one flow over all its links carrying the
        channel's bytes per link, after its per-step latencies (:func:`_ring_coarse`), instead
        of chunk by chunk. Exact where nothing else uses the channel's links (it is then the
        closed form); under contention it is the fluid limit of the pipelined ring (see
        docs/design.md, "Coarsening"). Its cost does not grow with ring steps or chunks.
    """

    o = op if isinstance(op, CollectiveOp) else CollectiveOp.parse(op, where="op")
    algo = Algorithm.parse(algorithm)
    proto = Protocol(protocol) if isinstance(protocol, str) else (protocol or Protocol.SIMPLE)
    if protocol is not None or algo not in (Algorithm.AUTO, Algorithm.RING, Algorithm.TREE):
        protocol = protocol or proto
    m = check_message_bytes(message_bytes)
    members = check_group(net.topology, group)
    model = net.cost_model()
    info = model.group_info(members)
    ref = None
    if protocol is None and len(members) > 1:
        # NCCL's choice (tuner approximation), as the simulated fidelity of CommCostModel uses
        ref = model._analytic(o, m, members, algo)
        algo, proto = ref.algorithm, ref.protocol or Protocol.SIMPLE
    elif algo is Algorithm.AUTO:
        algo = {
            CollectiveOp.ALLTOALL: Algorithm.DIRECT,
            CollectiveOp.SENDRECV: Algorithm.P2P,
        }.get(o, Algorithm.RING)
    if algo in CLOSED_FORM_ONLY and len(members) > 1:
        # no flow model (NVLS and CollNet in-switch reductions, PAT): the closed-form time, as
        # ``CommCostModel(fidelity="simulated")`` charges them: the switch, not the links, sets
        # the pace
        if ref is None:
            ref = model._analytic(o, m, members, algo)
        return net.env.process(_closed_form(net, ref.time_s))
    if ref is not None and wire_factor == 1.0:
        wire_factor = _wire_factor(ref, info, m)
    gen = _collective_gen(
        net,
        model,
        info,
        o,
        m,
        algo,
        proto,
        max(1, int(chunks)),
        wire_factor,
        coarse=coarse,
    )
    return net.env.process(gen)


def _closed_form(net: FlowNetwork, time_s: float) -> Generator[simpy.Event, Any, None]:
    """A collective without a flow model: its closed-form time, loading no link."""
    yield net.env.timeout(time_s)


def _wire_factor(ref: CommResult, info: GroupInfo, message_bytes: float) -> float:
    """Bytes on the wire per payload byte that make the simulated bandwidth match NCCL's tuner
    for the chosen protocol (LL's flags, LL128's 120/128, the A100 cap, tree factors)."""
    if ref.protocol is None or ref.algorithm not in (Algorithm.RING, Algorithm.TREE):
        return 1.0
    raw = (
        info.ring_bw_Bps
        if ref.algorithm is Algorithm.RING
        else min(info.intra_bw_Bps, info.inter_bw_Bps)
    )
    if not (ref.bandwidth_Bps > 0 and math.isfinite(raw)):
        return 1.0
    if ref.algorithm is Algorithm.RING:
        return max(1.0, raw / ref.bandwidth_Bps)
    # tree: bus x factors (ref.bandwidth_Bps) x NCCL's size correction
    algbw = message_bytes / (ref.time_s - ref.latency_s) if ref.time_s > ref.latency_s else 0.0
    corr = 2.0 * algbw / ref.bandwidth_Bps if algbw > 0 else 1.0
    return max(1.0, raw / (ref.bandwidth_Bps * corr))


def simulate_collective(
    model: AnalyticCommModel,
    op: CollectiveOp,
    message_bytes: float,
    members: tuple[str, ...],
    algo: Algorithm,
    proto: Protocol | None,
    info: GroupInfo,
) -> float:
    """Run one collective alone in a fresh environment; return its duration in seconds."""
    env = simpy.Environment()
    net = FlowNetwork(env, model.topology, model=model)
    wire = 1.0
    if proto is not None and algo in (Algorithm.RING, Algorithm.TREE):
        wire = _wire_factor(model._analytic(op, message_bytes, members, algo), info, message_bytes)
    gen = _collective_gen(
        net, model, info, op, message_bytes, algo, proto or Protocol.SIMPLE, 4, wire
    )
    env.process(gen)
    env.run()
    return float(env.now)


def _step_latency(info: GroupInfo, algo: str, proto: Protocol, cross: bool) -> float:
    """NCCL's per-step latency (``hwLat``) of one hop inside a server (``cross=False``) or across
    servers; an intra-server LL step costs ``NCCL_LL_MULTINODE_INTRA_LATENCY_FACTOR`` (1.8x) once
    the group spans servers (NCCL 2.7+ ``src/graph/tuning.cc``: ``if (nNodes > 1 && p ==
    NCCL_PROTO_LL) intraLat *= 1.8``, as the closed form charges it)."""
    if cross:
        return P.NCCL_STEP_LATENCY_S[(HwClass.NET, algo, proto)]
    ll_multi = (
        P.NCCL_LL_MULTINODE_INTRA_LATENCY_FACTOR if info.nodes > 1 and proto is Protocol.LL else 1.0
    )
    return P.NCCL_STEP_LATENCY_S[(info.intra_class, algo, proto)] * ll_multi


def _ring_plateau(info: GroupInfo, op: CollectiveOp, n: int, m: float, proto: Protocol) -> float:
    """NCCL's ring plateau factor on the whole latency (base and steps): multi-node Simple
    all-reduce of at least ``n / 16 x 64 KiB`` (tuning.cc; as the closed form), else 1."""
    if proto is Protocol.SIMPLE and info.nodes > 1 and op is CollectiveOp.ALLREDUCE:
        if m >= n / 16.0 * 65536:
            return P.NCCL_RING_PLATEAU_LATENCY_FACTOR
    return 1.0


@dataclass(frozen=True)
class _Call:
    """One collective to replay (the arguments of :func:`_collective_gen`'s phased algorithms)."""

    net: FlowNetwork
    model: AnalyticCommModel
    info: GroupInfo
    op: CollectiveOp
    m: float
    proto: Protocol
    chunks: int
    coarse: bool


def _collective_gen(
    net: FlowNetwork,
    model: AnalyticCommModel,
    info: GroupInfo,
    op: CollectiveOp,
    m: float,
    algo: Algorithm,
    proto: Protocol,
    chunks: int,
    wire: float,
    *,
    coarse: bool = False,
) -> Generator[simpy.Event, Any, None]:
    """The replay of ``algo`` for ``op`` of ``m`` bytes over the group ``info`` describes."""
    env = net.env
    if info.n < 2:
        return
    if algo is Algorithm.RING:
        ranks = info.gpus or info.members
        base = P.NCCL_BASE_LATENCY_S[("ring", proto)]
        yield env.timeout(base * _ring_plateau(info, op, len(ranks), m, proto))
        yield from _ring(net, model, info, ranks, op, m, proto, chunks, wire, coarse=coarse)
        copy_s = ring_copy_s(info, op, m, len(ranks), proto)  # as the analytic model adds it
        if copy_s is not None:
            yield env.timeout(copy_s)
    elif algo is Algorithm.TREE:
        yield env.timeout(P.NCCL_BASE_LATENCY_S[("tree", proto)])
        yield from _tree(net, info, m, proto, chunks, wire)
    elif algo is Algorithm.P2P:
        yield from _phase(net, info, p2p_transfers(info.members, m), proto)
    elif algo is Algorithm.DIRECT:
        ranks = info.gpus or info.members
        n = len(ranks)
        yield env.timeout(P.NCCL_DIRECT_BASE_LATENCY_S)
        yield from _phase(net, info, [(a, b, m / n) for a in ranks for b in ranks if a != b], proto)
        if op is CollectiveOp.REDUCESCATTER:
            yield env.timeout((n - 1) / n * m / model.gpu_reduce_Bps(info))
    elif algo in _PHASED:
        yield from _PHASED[algo](_Call(net, model, info, op, m, proto, chunks, coarse))
    else:  # pragma: no cover - guarded by the model
        raise ConfigError(
            f"algorithm {algo.value} cannot be simulated", value=algo.value, where="algorithm"
        )


def _parameter_server(c: _Call) -> Generator[simpy.Event, Any, None]:
    """A parameter server: push to the servers, their sum, pull back."""
    net, model, info, m, proto = c.net, c.model, c.info, c.m, c.proto
    env = net.env
    if info.cpus:
        servers, workers, red = (
            list(info.cpus),
            list(info.gpus),
            model.host_memory_Bps(info.cpus[0]),
        )
        contrib = len(workers)
    else:
        servers, workers, red = [info.gpus[0]], list(info.gpus[1:]), model.gpu_reduce_Bps(info)
        contrib = len(workers) + 1
    s = len(servers)
    yield from _phase(net, info, [(w, v, m / s) for w in workers for v in servers if w != v], proto)
    yield env.timeout(contrib * m / s / red)
    yield from _phase(net, info, [(v, w, m / s) for w in workers for v in servers if w != v], proto)


def _host_average(c: _Call) -> Generator[simpy.Event, Any, None]:
    """Averaging on a host CPU: gather, average in host memory, scatter."""
    net, model, info, m, proto = c.net, c.model, c.info, c.m, c.proto
    env = net.env
    host = info.cpus[0] if info.cpus else nearest_cpu(net.topology, info.gpus[0])
    gpus = list(info.gpus)
    yield from _phase(net, info, [(g, host, m) for g in gpus], proto)
    yield env.timeout((len(gpus) + 1) * m / model.host_memory_Bps(host))
    yield from _phase(net, info, [(host, g, m) for g in gpus], proto)


def _halving_doubling(c: _Call) -> Generator[simpy.Event, Any, None]:
    """Recursive halving-doubling over the largest power of two of ranks (the rest folded
    in and out)."""
    net, model, info, op, m, proto = c.net, c.model, c.info, c.op, c.m, c.proto
    env = net.env
    ranks = list(info.gpus or info.members)
    n = len(ranks)
    p = 1 << (n.bit_length() - 1)
    red = model.gpu_reduce_Bps(info)
    if p != n:
        yield from _phase(net, info, [(ranks[p + i], ranks[i], m) for i in range(n - p)], proto)
        yield env.timeout(m / red)
    stages = p.bit_length() - 1
    order = list(range(stages))
    phases = [order] if op is not CollectiveOp.ALLREDUCE else [order, order[::-1]]
    for phase in phases:
        for k in phase:
            dist = p >> (k + 1)
            nb = m / (2 ** (k + 1))
            yield from _phase(net, info, [(ranks[i], ranks[i ^ dist], nb) for i in range(p)], proto)
    if op in (CollectiveOp.ALLREDUCE, CollectiveOp.REDUCESCATTER):
        yield env.timeout((p - 1) / p * m / red)
    if p != n:
        yield from _phase(net, info, [(ranks[i], ranks[p + i], m) for i in range(n - p)], proto)


def _hierarchical(c: _Call) -> Generator[simpy.Event, Any, None]:
    """Reduce-scatter inside each server, all-reduce across servers per local rank,
    all-gather inside each server."""
    parts = [list(p) for p in c.info.parts]
    local = max(len(p) for p in parts)
    cols = [[p[j] for p in parts if j < len(p)] for j in range(local)]
    yield from _rows_and_columns(c, parts, cols, local, across=True)


def _torus2d(c: _Call) -> Generator[simpy.Event, Any, None]:
    """2D-torus all-reduce: reduce-scatter along the rows, all-reduce along the columns,
    all-gather along the rows."""
    info = c.info
    ranks = list(info.gpus or info.members)
    if info.nodes > 1:
        rows = [list(p) for p in info.parts]
        cols_n = len(rows[0])
    else:
        cols_n = near_square_factor(len(ranks))
        rows = [ranks[i : i + cols_n] for i in range(0, len(ranks), cols_n)]
    cols = [[r[j] for r in rows] for j in range(cols_n)]
    yield from _rows_and_columns(c, rows, cols, cols_n, across=len(rows) > 1)


def _rows_and_columns(
    c: _Call, rows: list[list[str]], cols: list[list[str]], width: int, *, across: bool
) -> Generator[simpy.Event, Any, None]:
    """Rings along the ``rows`` reduce-scatter ``m`` bytes (where a row has ``width > 1``
    ranks), rings along the ``cols`` all-reduce their ``m / width`` (where ``across``), the
    rows all-gather: the hierarchical and 2D-torus all-reduce."""
    net, model, info, m, proto, chunks, coarse = (
        c.net, c.model, c.info, c.m, c.proto, c.chunks, c.coarse
    )  # fmt: skip
    if width > 1:
        yield from _concurrent_rings(
            net, model, info, rows, CollectiveOp.REDUCESCATTER, m, proto, chunks, coarse=coarse
        )
    if across:
        yield from _concurrent_rings(
            net, model, info, cols, CollectiveOp.ALLREDUCE, m / width, proto, chunks, coarse=coarse
        )
    if width > 1:
        yield from _concurrent_rings(
            net, model, info, rows, CollectiveOp.ALLGATHER, m, proto, chunks, coarse=coarse
        )


#: The replays of the algorithms made of phases of transfers and rings (the others are inline
#: in :func:`_collective_gen`).
_PHASED = {
    Algorithm.PS: _parameter_server,
    Algorithm.HOST: _host_average,
    Algorithm.HALVING_DOUBLING: _halving_doubling,
    Algorithm.HIERARCHICAL: _hierarchical,
    Algorithm.TORUS2D: _torus2d,
}


#: :func:`_phase` runs all its transfers in one process (:func:`_phase_one`, issue 27) instead of
#: a process per transfer (:func:`_phase_each`, the reference); a test flips it.
PHASE_ONE_PROCESS = True


def _phase(
    net: FlowNetwork, info: GroupInfo, transfers: Sequence[tuple[str, str, float]], proto: Protocol
) -> Generator[simpy.Event, Any, None]:
    """Concurrent transfers, each after NCCL's per-step latency for its transport; wait for all."""
    if PHASE_ONE_PROCESS:
        yield from _phase_one(net, transfers, proto)
    else:
        yield from _phase_each(net, transfers, proto)


def _phase_each(
    net: FlowNetwork, transfers: Sequence[tuple[str, str, float]], proto: Protocol
) -> Generator[simpy.Event, Any, None]:
    """:func:`_phase` as a process per transfer (the reference of :func:`_phase_one`)."""
    env = net.env

    def one(src: str, dst: str, nb: float) -> Generator[simpy.Event, Any, None]:
        path = net.links.p2p_route(src, dst)
        extra = net.links.extra_latency(path)
        yield env.timeout(p2p_alpha_s(net.links, path, proto) - extra)
        yield net.transfer(src, dst, nb, path=path, latency_s=extra)

    procs = [env.process(one(s, d, b)) for s, d, b in transfers if s != d]
    if procs:
        yield env.all_of(procs)


def _phase_one(
    net: FlowNetwork, transfers: Sequence[tuple[str, str, float]], proto: Protocol
) -> Generator[simpy.Event, Any, None]:
    """:func:`_phase` as one process: the same SimPy run as :func:`_phase_each`, bit for bit,
    with ~3 events a transfer fewer (an all-to-all over 4 ranks: 12 transfers, ~61 -> ~26 events).

    Why it is the same run: SimPy processes events in (time, priority, insertion) order.
    :func:`_phase_each` creates ``k`` processes whose ``k`` initialisations (urgent) are
    consecutive, so they run one after the other and create the ``k`` latency timeouts
    consecutively; the timeouts due at one instant are processed one after the other in list
    order, each starting its transfer (nothing else can be scheduled between them). Here one
    process's initialisation stands where the first of those was and creates one timeout per
    distinct due instant (``now + latency``, so two latencies rounding to one instant are one
    group, in list order), whose processing starts that group's transfers in list order: the
    same flows started at the same points of the event sequence. On completion each transfer's
    process ended (one event each, with no other effect) and the last one's end triggered the
    ``all_of``, which resumed the caller; here a counter triggers ``done`` where the last
    process ended, this process ends where the ``all_of`` was triggered, and the caller resumes
    where it did. The removed events schedule nothing, so every remaining event keeps its place
    in the order: the same times, the same flows in the same order, the same floats.
    """
    env = net.env
    todo = [(s, d, b) for s, d, b in transfers if s != d]
    if todo:
        yield env.process(_phase_proc(net, todo, proto))


def _phase_proc(
    net: FlowNetwork, todo: Sequence[tuple[str, str, float]], proto: Protocol
) -> Generator[simpy.Event, Any, None]:
    """The process of :func:`_phase_one`."""
    env = net.env
    now = env.now
    # per due instant: the delay of its timeout (its first transfer's) and its transfers
    groups: dict[float, tuple[float, list[tuple[str, str, float, Any, float]]]] = {}
    hops = net._phase_hops  # per (source, destination, protocol): pure functions of the links
    for src, dst, nb in todo:
        hit = hops.get((src, dst, proto))
        if hit is None:
            path = net.links.p2p_route(src, dst)
            extra = net.links.extra_latency(path)
            hit = hops[(src, dst, proto)] = (
                path,
                extra,
                p2p_alpha_s(net.links, path, proto) - extra,
            )
        path, extra, delay = hit
        due = now + delay  # the instant SimPy's timeout falls due (its own sum)
        group = groups.get(due)
        if group is None:
            group = groups[due] = (delay, [])
        group[1].append((src, dst, nb, path, extra))
    done = env.event()
    left = [len(todo)]

    def arrived(_e: Any) -> None:
        left[0] -= 1
        if left[0] == 0:
            done.succeed()

    def start(_e: Any, group: list[tuple[str, str, float, Any, float]]) -> None:
        for src, dst, nb, path, extra in group:
            net.transfer(src, dst, nb, path=path, latency_s=extra).callbacks.append(arrived)

    for delay, transfers in groups.values():
        env.timeout(delay).callbacks.append(lambda e, g=transfers: start(e, g))
    yield done


def _ring_steps(op: CollectiveOp, n: int) -> int:
    if op is CollectiveOp.ALLREDUCE:
        return 2 * (n - 1)
    if op in (CollectiveOp.REDUCESCATTER, CollectiveOp.ALLGATHER):
        return n - 1
    return n - 1  # broadcast / reduce: a pipelined chain of n-1 hops


def _ring(
    net: FlowNetwork,
    model: AnalyticCommModel,
    info: GroupInfo,
    ranks: Sequence[str],
    op: CollectiveOp,
    m: float,
    proto: Protocol,
    chunks: int,
    wire: float,
    channels: Sequence[Channel] | None = None,
    *,
    coarse: bool = False,
) -> Generator[simpy.Event, Any, None]:
    env = net.env
    chans = (
        tuple(channels)
        if channels is not None
        else (
            info.channels
            if tuple(ranks) == (info.gpus or info.members)
            else build_channels(net.links, ranks)
        )
    )
    if not chans:
        return
    hit = net._shares.get(id(chans))
    if hit is not None and hit[0] is chans:
        shares = hit[1]
    else:  # a pure function of the links and channels: once per network and channel tuple
        rates = channel_rates(net.links, chans, net.links.charge_p2p)
        total = float(np.sum(rates))
        shares = (
            [float(r) / total for r in rates]
            if total > 0 and math.isfinite(total)
            else [1 / len(chans)] * len(chans)
        )
        net._shares[id(chans)] = (chans, shares)  # the tuple kept: its id is not reused
    n = len(ranks)
    if n > COARSE_RING_RANKS or (
        coarse and op not in (CollectiveOp.BROADCAST, CollectiveOp.REDUCE)
    ):
        # every channel one flow, all in this process (_ring_coarse)
        yield from _ring_coarse(net, info, chans, shares, op, m, proto, wire)
        return
    if n * len(chans) > 64:
        chunks = 1  # sub-chunks change nothing uncontended; keep big rings cheap
    procs = []
    for ch, share in zip(chans, shares):
        m_c = m * share
        if op in (CollectiveOp.BROADCAST, CollectiveOp.REDUCE):
            procs.append(env.process(_chain(net, info, ch, op, m_c, proto, chunks, wire)))
        else:
            steps = _ring_steps(op, n)
            lat_step = _ring_step_latency(info, op, n, m, proto)
            piece = m_c / n * wire
            sub = piece / chunks
            arrived: dict[tuple[int, int, int], simpy.Event] = {}

            def ev(i: int, k: int, s: int, _arr: dict = arrived) -> simpy.Event:
                key = (i, k, s)
                if key not in _arr:
                    _arr[key] = env.event()
                return _arr[key]

            def rank_proc(
                i: int,
                k: int,
                _ch: Channel = ch,
                _steps: int = steps,
                _sub: float = sub,
                _ev: Any = ev,
                _lat_step: float = lat_step,
            ) -> Generator[simpy.Event, Any, None]:
                nn = len(_ch.order)
                hop = _ch.hops[i]
                lat = _lat_step
                for s in range(_steps):
                    if s > 0:
                        yield _ev(i, k, s - 1)
                    yield env.timeout(lat)
                    # link latency is part of lat (averaged as the analytic model does)
                    yield net.transfer(
                        hop[0],
                        hop[-1],
                        _sub,
                        path=hop,
                        latency_s=0.0,
                        charge=net.links.charge_p2p(hop),
                    )
                    _ev((i + 1) % nn, k, s).succeed()

            for i in range(n):
                for k in range(chunks):
                    procs.append(env.process(rank_proc(i, k)))
    if procs:
        yield env.all_of(procs)


def _ring_step_latency(
    info: GroupInfo, op: CollectiveOp, n: int, m: float, proto: Protocol
) -> float:
    """Per-step latency of a ring (software + link), averaged as NCCL's tuner charges it: intra-server
    steps at the intra transport's latency, ``2(nodes-1)`` (all-reduce) or ``nodes-1`` steps at the
    network's, times 1.9 for multi-node Simple all-reduce above nRanks/16 x 64 KiB (tuning.cc).
    Pipelining hides the network latency on the other steps, which a step-by-step simulation
    would otherwise charge on every step."""
    nodes = info.nodes
    steps = _ring_steps(op, n)
    inter = 2 * (nodes - 1) if op is CollectiveOp.ALLREDUCE else nodes - 1
    inter = min(inter, steps)
    intra_l = _step_latency(info, "ring", proto, False)
    total = (steps - inter) * intra_l + inter * _step_latency(info, "ring", proto, True)
    # the same factor on the extra intra latency (_step_latency applies it to hwLat only; kept
    # separate: folding the sums would change the float rounding)
    ll_multi = (
        P.NCCL_LL_MULTINODE_INTRA_LATENCY_FACTOR if nodes > 1 and proto is Protocol.LL else 1.0
    )
    total += (steps - inter) * info.alpha_intra_s * ll_multi + inter * info.alpha_inter_s
    return total * _ring_plateau(info, op, n, m, proto) / steps


def _ring_coarse(
    net: FlowNetwork,
    info: GroupInfo,
    chans: Sequence[Channel],
    shares: Sequence[float],
    op: CollectiveOp,
    m: float,
    proto: Protocol,
    wire: float,
) -> Generator[simpy.Event, Any, None]:
    """Each channel of a ring as one flow over all its links (the steady state of the pipelined
    ring), channel ``c`` carrying ``m x shares[c]`` bytes: the first step's latency (the same
    for every channel) before the bytes move, then every channel's flow, started in channel
    order and delivered after the other steps' latencies; done when all are delivered. One
    process for the whole ring (issue 27: a process per channel started the same flows at the
    same times in the same order, with ~3 more events per channel)."""
    n = len(chans[0].order)
    steps = _ring_steps(op, n)
    lat_step = _ring_step_latency(info, op, n, m, proto)
    broadcast = op in (CollectiveOp.BROADCAST, CollectiveOp.REDUCE)
    if broadcast:
        steps = n - 1
    yield net.env.timeout(lat_step)
    events = []
    for ch, share in zip(chans, shares, strict=True):
        m_c = m * share
        per_rank = m_c if broadcast else steps * m_c / n
        nbytes = m_c * wire if broadcast else per_rank * wire
        acct = tuple((h[0], h[-1], per_rank) for h in ch.hops)
        events.append(net.transfer_multi(ch.hops, nbytes, acct, latency_s=(steps - 1) * lat_step))
    yield net.env.all_of(events)


def _chain(
    net: FlowNetwork,
    info: GroupInfo,
    ch: Channel,
    op: CollectiveOp,
    m_c: float,
    proto: Protocol,
    chunks: int,
    wire: float,
) -> Generator[simpy.Event, Any, None]:
    """Broadcast (root = first of the ring) or reduce (towards the last) along a pipelined chain."""
    env = net.env
    n = len(ch.order)
    hops = ch.hops[: n - 1]
    chunks = _pipeline_chunks(m_c * wire, max(chunks, 4 * (n - 1)))
    c = m_c * wire / chunks
    arrived = {(i, k): env.event() for i in range(n) for k in range(chunks)}
    lat_t = "tree" if proto is Protocol.SIMPLE else "ring"
    links = net.links

    def proc(i: int) -> Generator[simpy.Event, Any, None]:
        hop = hops[i]
        # NCCL's tuner charges the network step latency on every step once servers are spanned
        lat = P.NCCL_STEP_LATENCY_S[
            (HwClass.NET if info.nodes > 1 else info.intra_class, lat_t, proto)
        ]
        alpha = links.extra_latency(hop)  # the step latency holds the rest
        for k in range(chunks):
            if i > 0:
                yield arrived[(i, k)]
            # step and link latency on the first chunk (pipeline fill), then streaming
            if k == 0:
                yield env.timeout(lat)
            yield net.transfer(
                hop[0],
                hop[-1],
                c,
                path=hop,
                latency_s=alpha if k == 0 else 0.0,
                charge=links.charge_p2p(hop),
            )
            arrived[(i + 1, k)].succeed()

    yield env.all_of([env.process(proc(i)) for i in range(n - 1)])


def _pipeline_chunks(nbytes: float, minimum: int) -> int:
    """Chunks of a pipelined chain/tree: NCCL-like 512 KiB slices, between ``minimum`` and 64."""
    return int(min(64, max(minimum, math.ceil(nbytes / (512 * 1024)))))


def _tree(
    net: FlowNetwork, info: GroupInfo, m: float, proto: Protocol, chunks: int, wire: float
) -> Generator[simpy.Event, Any, None]:
    """NCCL's tree all-reduce, per channel: a chain inside each server, two complementary binary
    trees across servers (each half the channel's data); chunked reduce up, broadcast down."""
    env = net.env
    topo = net.topology
    links = net.links
    chans = info.channels
    rates = channel_rates(links, chans)
    total = float(np.sum(rates))
    procs = []
    for c_idx, (ch, rate) in enumerate(zip(chans, rates)):
        share = float(rate) / total if total > 0 and math.isfinite(total) else 1 / len(chans)
        segs: dict[int, list[str]] = {}
        for x in ch.order:
            segs.setdefault(topo.server_of(x), []).append(x)
        servers = list(segs)
        for srv in servers:  # lead each server's chain with the GPU nearest this channel's NIC
            segs[srv] = _lead(links, segs[srv], srv, c_idx)
        half = m * share / 2 * wire
        k_chunks = _pipeline_chunks(half, chunks)
        piece = half / k_chunks
        for t in range(2):
            parent: dict[str, str | None] = {}
            children: dict[str, list[str]] = defaultdict(list)
            pos_order = servers if t == 0 else servers[::-1]
            chains = {
                srv: (segs[srv] if t == 0 else [segs[srv][0], *segs[srv][:0:-1]]) for srv in servers
            }
            for pos, srv in enumerate(pos_order):
                chain = chains[srv]
                for a, b in itertools.pairwise(chain):
                    parent[b] = a
                    children[a].append(b)
                if pos == 0:
                    parent[chain[0]] = None
                else:
                    up_leader = chains[pos_order[(pos - 1) // 2]][0]
                    parent[chain[0]] = up_leader
                    children[up_leader].append(chain[0])
            up_ev = {(x, k): env.event() for x in parent for k in range(k_chunks)}
            down_ev = {(x, k): env.event() for x in parent for k in range(k_chunks)}

            def node_proc(
                x: str,
                _p=parent,
                _c=children,
                _u=up_ev,
                _d=down_ev,
                _k=k_chunks,
                _piece=piece,
                _ci=c_idx,
            ) -> Generator[simpy.Event, Any, None]:
                par = _p[x]
                for k in range(_k):
                    kids = [_u[(y, k)] for y in _c[x]]
                    if kids:
                        yield env.all_of(kids)
                    if par is not None:
                        cross = topo.server_of(x) != topo.server_of(par)
                        # per-step latency on the first chunk (pipeline fill), then streaming
                        if k == 0:
                            yield env.timeout(_step_latency(info, "tree", proto, cross))
                        up = channel_route(links, x, par, _ci)
                        yield net.transfer(
                            x,
                            par,
                            _piece,
                            path=up,
                            latency_s=links.extra_latency(up) if k == 0 else 0.0,
                        )
                    _u[(x, k)].succeed()
                for k in range(_k):
                    yield _u[(x, k)] if par is None else _d[(x, k)]
                    sends = []
                    for y in _c[x]:
                        down = channel_route(links, x, y, _ci)
                        lat = 0.0
                        if k == 0:  # one step latency per child, all children at once
                            cross = topo.server_of(x) != topo.server_of(y)
                            lat = _step_latency(info, "tree", proto, cross)
                            lat += links.extra_latency(down)
                        e = net.transfer(x, y, _piece, path=down, latency_s=lat)
                        e.callbacks.append(lambda _e, _y=y, _kk=k: _d[(_y, _kk)].succeed())
                        sends.append(e)
                    if sends:
                        yield env.all_of(sends)

            for x in parent:
                procs.append(env.process(node_proc(x)))
    yield env.all_of(procs)


def _lead(links: DirectedLinks, seg: list[str], server: int, channel: int) -> list[str]:
    nics = nics_of(links.topology, server)
    if not nics or len(seg) == 1:
        return seg
    nic = nics[channel % len(nics)]
    best = min(range(len(seg)), key=lambda i: (len(links.route(seg[i], nic)), i))
    return seg[best:] + seg[:best]


def _concurrent_rings(
    net: FlowNetwork,
    model: AnalyticCommModel,
    info: GroupInfo,
    groups: Sequence[Sequence[str]],
    op: CollectiveOp,
    m: float,
    proto: Protocol,
    chunks: int,
    *,
    coarse: bool = False,
) -> Generator[simpy.Event, Any, None]:
    env = net.env
    procs = []
    for grp in groups:
        if len(grp) < 2:
            continue
        chans = build_channels(net.links, grp)
        procs.append(
            env.process(
                _ring(
                    net, model, info, grp, op, m, proto, chunks, 1.0, channels=chans, coarse=coarse
                )
            )
        )
    if procs:
        yield env.all_of(procs)
