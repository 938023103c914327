"""The analytic communication cost model: one call, in nccl-tests terms.

``AnalyticCommModel(topology).collective(op, message_bytes, group, algorithm="auto")`` answers
"how long does this collective take on these GPUs of this system" (time, algbw, busbw) with
closed forms whose bandwidth comes from NCCL-style ring channels on the topology graph
(max-min fair steady state). :class:`perfmodel.comm.model.CommCostModel` is this model with a
second fidelity, the flow replay.

The model is a short pipeline over parts, one module each:

- the group's analysis (:mod:`perfmodel.comm.group`: ring channels, bandwidths, latencies),
  shared between groups the topology's symmetry makes alike (:mod:`perfmodel.comm.group_memo`);
- NCCL's algorithm and protocol choice (:mod:`perfmodel.comm.nccl_choice`, with the 2.27+
  algorithms of :mod:`perfmodel.comm.nccl_recent`);
- point-to-point transfers (:mod:`perfmodel.comm.transfers`) and the algorithms beyond NCCL's
  ring and tree (:mod:`perfmodel.comm.algorithms`).

All-to-all uses ``direct``, send/recv ``p2p``; ``auto`` picks NCCL's fastest candidate.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from perfmodel._frozen import from_fields
from perfmodel._memo import BoundedMemo
from perfmodel.comm.algorithms import OtherAlgorithms, host_memory_Bps
from perfmodel.comm.group import PATTERN_MEMO_SIZE, GroupAnalysis, GroupInfo, gpu_reduce_Bps
from perfmodel.comm.group_memo import GroupMemo, SharedResults
from perfmodel.comm.links import DirectedLinks
from perfmodel.comm.nccl_choice import NcclChoice
from perfmodel.comm.nccl_env import NCCL_FUNCTIONS
from perfmodel.comm.nccl_recent import CLOSED_FORM_ONLY
from perfmodel.comm.nodes import all_gpus, check_group
from perfmodel.comm.params import (
    ALGO_AUTO,
    ALGO_HOST,
    ALGO_PS,
    ALGO_RING,
    ALGO_TREE,
    Algorithm,
    LinkParams,
    Protocol,
)
from perfmodel.comm.transfers import Transfers
from perfmodel.errors import ConfigError
from perfmodel.ops import ALLREDUCE, SENDRECV, CollectiveOp, bus_factor
from perfmodel.topology import Topology
from perfmodel.topology.schema import NodeKind

_ALLOWED: dict[CollectiveOp, tuple[Algorithm, ...]] = {
    CollectiveOp.ALLREDUCE: (
        Algorithm.RING,
        Algorithm.TREE,
        Algorithm.NVLS,
        Algorithm.COLLNET,
        Algorithm.NVLS_TREE,
        Algorithm.HALVING_DOUBLING,
        Algorithm.HIERARCHICAL,
        Algorithm.TORUS2D,
        Algorithm.PS,
        Algorithm.HOST,
    ),
    CollectiveOp.REDUCESCATTER: (
        Algorithm.RING,
        Algorithm.HALVING_DOUBLING,
        Algorithm.DIRECT,
        Algorithm.NVLS,
        Algorithm.PAT,
    ),
    CollectiveOp.ALLGATHER: (
        Algorithm.RING,
        Algorithm.HALVING_DOUBLING,
        Algorithm.DIRECT,
        Algorithm.NVLS,
        Algorithm.PAT,
    ),
    CollectiveOp.BROADCAST: (Algorithm.RING,),
    CollectiveOp.REDUCE: (Algorithm.RING,),
    CollectiveOp.ALLTOALL: (Algorithm.DIRECT,),
    CollectiveOp.SENDRECV: (Algorithm.P2P,),
}


@dataclass(frozen=True)
class CommResult:
    """The cost of one collective, in nccl-tests terms.

    Attributes
    ----------
    time_s
        Duration of the collective, seconds.
    algbw_Bps
        ``message_bytes / time_s`` (nccl-tests "algbw"), bytes/s.
    busbw_Bps
        ``algbw_Bps * bus_factor(op, group_size)`` (nccl-tests "busbw"), bytes/s.
    algorithm, protocol
        What was used (``protocol`` is ``None`` outside NCCL's ring/tree).
    latency_s, bandwidth_Bps
        The alpha and the bus bandwidth the closed form used (analytic fidelity).
    channels, nodes
        Ring channels used and servers spanned by the group.
    """

    time_s: float
    algbw_Bps: float
    busbw_Bps: float
    algorithm: Algorithm
    op: CollectiveOp
    message_bytes: float
    group_size: int
    protocol: Protocol | None = None
    fidelity: str = "analytic"
    latency_s: float = 0.0
    bandwidth_Bps: float = 0.0
    channels: int = 0
    nodes: int = 1
    shm: bool = False
    """GPUs of one server exchange data through host memory (no peer-to-peer between them)."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "op": self.op.value,
            "message_bytes": self.message_bytes,
            "group_size": self.group_size,
            "nodes": self.nodes,
            "algorithm": self.algorithm.value,
            "protocol": self.protocol.value if self.protocol else None,
            "fidelity": self.fidelity,
            "time_s": self.time_s,
            "algbw_Bps": self.algbw_Bps if math.isfinite(self.algbw_Bps) else None,
            "busbw_Bps": self.busbw_Bps,
            "latency_s": self.latency_s,
            "bandwidth_Bps": self.bandwidth_Bps,
            "channels": self.channels,
            "shm": self.shm,
        }


_ALGORITHM_BY_VALUE: dict[str, Algorithm] = {a.value: a for a in Algorithm}
"""Each :class:`Algorithm` by its value, what :meth:`Algorithm.parse` returns for that exact
text (the aliases name no member's value)."""


def _as_op(op: CollectiveOp | str) -> CollectiveOp:
    return op if isinstance(op, CollectiveOp) else CollectiveOp.parse(op, where="op")


def check_message_bytes(message_bytes: float) -> float:
    """``message_bytes`` as a float of bytes, a positive finite number (numeric text reads as its
    number), else a ConfigError naming it: the one check of a collective's size, analytic and
    replayed (:func:`perfmodel.comm.replay.run_collective`)."""
    try:
        m = float(message_bytes)
    except (TypeError, ValueError) as exc:
        raise ConfigError(
            f"message size {message_bytes!r} is not a number",
            value=message_bytes,
            where="message_bytes",
        ) from exc
    if not (m > 0 and math.isfinite(m)):
        raise ConfigError(
            f"message size must be > 0 bytes, got {message_bytes!r}",
            value=message_bytes,
            where="message_bytes",
        )
    return m


class AnalyticCommModel:
    """Collective costs on a :class:`~perfmodel.topology.Topology`, analytic fidelity.

    Parameters
    ----------
    topology
        The system.
    link_params
        Per-link-class overrides (from calibration, or a dict for :meth:`LinkParams.from_dict`);
        ``None`` uses the topology's values.
    links
        A :class:`~perfmodel.comm.links.DirectedLinks` of the same topology and link parameters
        to share (not rebuilt).

    Attributes
    ----------
    links, nccl, groups, shared, transfers, others
        The parts (see the module docstring), each with its own memos.
    tuner, cpu_vendor, release
        NCCL's tuner table, the host CPU vendor and the stated release
        (:func:`~perfmodel.comm.nccl_choice.tuner_of`).
    """

    fidelity = "analytic"

    #: Whether :meth:`_check` keeps each group's checked members per group (tests compare
    #: both ways).
    KEEP_CHECKED = True

    #: Whether :meth:`_result` makes a :class:`CommResult`'s ``__dict__`` at once instead of
    #: calling its ``__init__`` (tests compare both ways).
    FAST_RESULT = True

    def __init__(
        self,
        topology: Topology,
        link_params: LinkParams | Mapping[str, Any] | None = None,
        links: DirectedLinks | None = None,
    ) -> None:
        self.topology = topology
        if isinstance(link_params, Mapping):
            link_params = LinkParams.from_dict(link_params)
        self.link_params = link_params or LinkParams()
        self.links = links if links is not None else DirectedLinks(topology, self.link_params)
        self.nccl = NcclChoice(topology, self.links, self.link_params)
        self.tuner, self.cpu_vendor, self.release = (
            self.nccl.tuner,
            self.nccl.cpu_vendor,
            self.nccl.release,
        )
        self.groups = GroupMemo(
            topology, self.links, GroupAnalysis(topology, self.links, self.release)
        )
        self.shared = SharedResults(self.groups, self._analytic_info)
        self.transfers = Transfers(topology, self.links)
        self.others = OtherAlgorithms(topology, self.links, self.link_params, self.transfers)
        self._cache: dict[tuple[Any, ...], CommResult] = {}
        #: a group (a tuple, as the step costs pass it) -> its checked members and whether
        #: every member is a GPU (:meth:`collective`; both functions of the group)
        # groups checked (a plan search asks a few per stage and plan), the oldest dropped first
        self._checked: BoundedMemo[tuple[str, ...], tuple[tuple[str, ...], bool]] = BoundedMemo(
            PATTERN_MEMO_SIZE
        )

    # ------------------------------------------------------------------ public API
    def collective(
        self,
        op: CollectiveOp | str,
        message_bytes: float,
        group: Sequence[str],
        algorithm: Algorithm | str = "auto",
    ) -> CommResult:
        """Cost of collective ``op`` of ``message_bytes`` (nccl-tests convention) over ``group``.

        Raises
        ------
        ConfigError
            Unknown op or algorithm, a size <= 0, an empty group, a node not in the system, or
            an algorithm that does not implement ``op``.
        """
        o = _as_op(op)
        m = check_message_bytes(message_bytes)
        # a member's exact value (``"auto"``, as the step costs pass it) names that member:
        # looked up without the parse (issue 14: ~1 us per collective of a new plan)
        algo = _ALGORITHM_BY_VALUE.get(algorithm) if type(algorithm) is str else None
        if algo is None:
            algo = Algorithm.parse(algorithm, where="algorithm")
        members, no_cpu = self._check(group)
        key = (o, m, members, algo)
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        if algo is not ALGO_AUTO and algo not in _ALLOWED[o]:
            raise ConfigError(
                f"algorithm {algo.value!r} does not implement {o.value}; use one of "
                f"{', '.join(a.value for a in _ALLOWED[o])} or auto",
                value=algo.value,
                where="algorithm",
            )
        if o is SENDRECV and len(members) < 2:
            raise ConfigError(
                "sendrecv needs at least 2 endpoints (source, destination)",
                value=members,
                where="group",
            )
        g = self.topology.graph
        cpus = [] if no_cpu else [x for x in members if g.nodes[x]["kind"] is NodeKind.CPU]
        if cpus and o is not SENDRECV:
            if algo is ALGO_AUTO and o is ALLREDUCE:
                algo = ALGO_PS  # a CPU in an all-reduce group is its parameter server
            elif algo not in (ALGO_PS, ALGO_HOST):
                raise ConfigError(
                    f"{cpus[0]!r} is a CPU: CPUs take part only as parameter servers (ps), the "
                    f"averaging host (host) or a sendrecv endpoint, not in {o.value}/{algo.value}",
                    value=cpus[0],
                    where="group",
                )
        if len(members) == 1:
            res = CommResult(0.0, math.inf, 0.0, algo, o, m, 1, None, self.fidelity)
        else:
            res = self._priced(o, m, members, algo, no_cpu)
        self._cache[key] = res
        return res

    def _check(self, group: Sequence[str]) -> tuple[tuple[str, ...], bool]:
        """:func:`~perfmodel.comm.nodes.check_group` of ``group`` (raising as it does) and
        whether every member is a GPU (:func:`~perfmodel.comm.nodes.all_gpus`: no node read
        per member), kept per group where it is a tuple: both read only the group and the
        topology, so a group asked again for another size (issue 27: a stage's
        data-parallel and tensor-parallel groups, 20-40 new sizes a new plan) is not checked
        again."""
        if type(group) is not tuple or not self.KEEP_CHECKED:
            return self._check_now(group)
        # an unhashable member: BoundedMemo computes without keeping, check_group names it
        return self._checked.get_from(group, self._check_now)  # type: ignore[arg-type]

    def _check_now(self, group: Sequence[str]) -> tuple[tuple[str, ...], bool]:
        """:meth:`_check` without the memo."""
        members = check_group(self.topology, group)
        return members, all_gpus(self.topology, members)

    def _priced(
        self, o: CollectiveOp, m: float, members: tuple[str, ...], algo: Algorithm, no_cpu: bool
    ) -> CommResult:
        """The result of a collective over two members or more (checked): analytic, shared
        between groups where :class:`~perfmodel.comm.group_memo.SharedResults` knows it."""
        return self.shared.analytic(o, m, members, algo, no_cpu)

    def group_info(self, group: Sequence[str]) -> GroupInfo:
        """Topology-derived bandwidths and latencies of a group (cached,
        :class:`~perfmodel.comm.group_memo.GroupMemo`)."""
        return self.groups.info(check_group(self.topology, group))

    def choose(
        self, op: CollectiveOp | str, message_bytes: float, group: Sequence[str]
    ) -> tuple[Algorithm, Protocol | None]:
        """The (algorithm, protocol) ``auto`` picks for this call (analytic tuner)."""
        r = self._analytic(
            _as_op(op),
            check_message_bytes(message_bytes),
            check_group(self.topology, group),
            ALGO_AUTO,
        )
        return r.algorithm, r.protocol

    def gpu_reduce_Bps(self, info: GroupInfo) -> float:
        """Rate of an element-wise reduction on a GPU (:func:`~perfmodel.comm.group.gpu_reduce_Bps`)."""
        return gpu_reduce_Bps(info, self.link_params)

    def host_memory_Bps(self, cpu: str | None = None) -> float:
        """Host memory bandwidth for CPU-side averaging
        (:func:`~perfmodel.comm.algorithms.host_memory_Bps`)."""
        return host_memory_Bps(self.topology, self.link_params, cpu)

    def protocols(self, info: GroupInfo, op: CollectiveOp | None = None) -> tuple[Protocol, ...]:
        """Protocols NCCL would enable for this group under the job's NCCL environment
        (:meth:`NcclChoice.protocols <perfmodel.comm.nccl_choice.NcclChoice.protocols>`, less
        what ``NCCL_PROTO`` switches off: for ``op``, or with ``op=None`` for every
        collective ``NCCL_PROTO`` can name)."""
        env = self.nccl.env
        ops = tuple(NCCL_FUNCTIONS.values()) if op is None else (op,)
        return tuple(
            p
            for p in self.nccl.protocols(info, op)
            if not all((o, p) in env.disabled_protocols for o in ops)
        )

    def transfers_time(self, pairs: Sequence[tuple[str, str]], nbytes_each: float) -> float:
        """Completion time (s) of concurrent point-to-point sends of ``nbytes_each`` bytes
        (:meth:`Transfers.time <perfmodel.comm.transfers.Transfers.time>`)."""
        return self.transfers.time(pairs, nbytes_each)

    # ------------------------------------------------------------------ analytic
    def _analytic(
        self, op: CollectiveOp, m: float, members: tuple[str, ...], algo: Algorithm
    ) -> CommResult:
        return self._analytic_info(op, m, self.group_info(members), algo)

    def _analytic_info(
        self, op: CollectiveOp, m: float, info: GroupInfo, algo: Algorithm
    ) -> CommResult:
        """The analytic result of ``op`` over the group ``info`` describes."""
        if algo is ALGO_AUTO:
            best = self.nccl.best(op, m, info)
            if best is None:
                algo = _ALLOWED[op][0]
            else:
                return self._tuned(op, m, info, best)
        if algo in (ALGO_RING, ALGO_TREE) or algo in CLOSED_FORM_ONLY:
            best = self.nccl.best(op, m, info, forced=algo)
            if best is None:
                env = self.nccl.env
                off = sorted(p.value for o, p in env.disabled_protocols if o is op)
                why = (
                    f": {env.where}: NCCL_PROTO={dict(env.variables).get('NCCL_PROTO')} "
                    f"switches off {', '.join(off)} for {op.value}"
                    if off
                    else ""
                )
                raise ConfigError(
                    f"{algo.value} is not available for {op.value} on this group{why}",
                    value=algo.value,
                    where="algorithm",
                )
            return self._tuned(op, m, info, best)
        t, lat, bw = self.others.time(op, m, info, algo)
        return self._result(op, m, info, (t, algo, None, lat, bw))

    def _tuned(
        self,
        op: CollectiveOp,
        m: float,
        info: GroupInfo,
        best: tuple[float, Algorithm, Protocol, float, float],
    ) -> CommResult:
        """The result of NCCL's choice ``best`` (time, algorithm, protocol, latency,
        bandwidth), its time and latency as the chain runs it
        (:meth:`NcclChoice.chain_time <perfmodel.comm.nccl_choice.NcclChoice.chain_time>`)."""
        t, lat = self.nccl.chain_time(op, m, info, *best)
        _, algo, proto, _, bw = best
        return self._result(op, m, info, (t, algo, proto, lat, bw))

    def _result(
        self,
        op: CollectiveOp,
        m: float,
        info: GroupInfo,
        chosen: tuple[float, Algorithm, Protocol | None, float, float],
    ) -> CommResult:
        """The :class:`CommResult` of ``op`` over ``info`` for ``chosen``: (time (s),
        algorithm, protocol or ``None``, latency (s), bandwidth (B/s)).

        Made by :func:`perfmodel._frozen.from_fields` where :attr:`FAST_RESULT` is on (the
        frozen ``__init__`` was ~38 k instructions a result, ~40% of a new message size's
        pricing; issue 27; ``tests/comm/test_result_built.py`` compares both ways)."""
        t, algo, proto, lat, bw = chosen
        algbw = m / t if t > 0 else math.inf
        n = info.n
        fields_ = {
            "time_s": t,
            "algbw_Bps": algbw,
            "busbw_Bps": algbw * bus_factor(op, n) if math.isfinite(algbw) else 0.0,
            "algorithm": algo,
            "op": op,
            "message_bytes": m,
            "group_size": n,
            "protocol": proto,
            "fidelity": self.fidelity,
            "latency_s": lat,
            "bandwidth_Bps": bw,
            "channels": len(info.channels),
            "nodes": info.nodes,
            "shm": info.shm,
        }
        if not self.FAST_RESULT:
            return CommResult(**fields_)
        return from_fields(CommResult, fields_)
