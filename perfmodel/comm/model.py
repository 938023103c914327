"""The communication cost model: one call, two fidelities.

``CommCostModel(topology).collective(op, message_bytes, group, algorithm="auto")`` answers "how
long does this collective take on these GPUs of this system", in nccl-tests terms (time, algbw,
busbw). ``fidelity="analytic"`` evaluates closed forms whose bandwidth comes from NCCL-style ring
channels on the topology graph (max-min fair steady state, :mod:`perfmodel.comm.rings`);
``fidelity="simulated"`` runs the same algorithm as chunked transfers in a fresh SimPy flow
network (:mod:`perfmodel.comm.flow`). Both are cached per model instance.

How ``auto`` chooses (an approximation of NCCL's tuner, ``src/graph/tuning.cc``, NCCL 2.7/2.8):
for every enabled (algorithm, protocol) pair among ring/tree x LL/LL128/Simple, the time is
``latency + bytes / algbw`` with NCCL's latency table and protocol bandwidth factors applied to
the topology-derived bus bandwidth, and the fastest pair wins. Tree is considered for all-reduce
only (as in NCCL 2.8), LL128 only when the GPUs are Volta or newer and every intra-server hop is
NVLink. All-to-all uses ``direct``, send/recv ``p2p``, other collectives ``ring``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from functools import partial
from typing import Any

import perfmodel.comm.closed_form as cf
import perfmodel.comm.params as P
from perfmodel._memo import BoundedMemo
from perfmodel.comm.channels import LazyChannels, build_channels, channel_rates, flow_rates
from perfmodel.comm.links import DirectedLinks
from perfmodel.comm.maxmin import numpy_sum
from perfmodel.comm.nccl_paths import net_path_type
from perfmodel.comm.nccl_recent import CLOSED_FORM_ONLY, nvls_servers, recent_candidates
from perfmodel.comm.nodes import all_gpus, check_group, split_by_server
from perfmodel.comm.nvls import nvls_bus_Bps, nvls_graph
from perfmodel.comm.params import Algorithm, HwClass, LinkParams, Protocol
from perfmodel.comm.ring_summary import RingSummary, ring_summary
from perfmodel.comm.rings import MAX_CHANNELS, Channel, pack_rings
from perfmodel.comm.tuner import (
    NVLS_FROM,
    PXN_FROM,
    NcclTuner,
    arch_index,
    ll128_enabled,
    nodes_index,
    released,
    tuner_for,
)
from perfmodel.errors import ConfigError, PerfModelError
from perfmodel.ops import CollectiveOp, bus_factor
from perfmodel.topology import Topology
from perfmodel.topology.routing import route
from perfmodel.topology.schema import NodeKind
from perfmodel.topology.symmetry import member_automorphism, server_symmetry

FIDELITIES = ("analytic", "simulated")

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


@dataclass(frozen=True)
class GroupInfo:
    """What the topology offers a group (cached per group)."""

    members: tuple[str, ...]
    gpus: tuple[str, ...]
    cpus: tuple[str, ...]
    parts: tuple[tuple[str, ...], ...]
    channels: Sequence[Channel]
    """The ring channels: a tuple, or for a wide group a :class:`LazyChannels` listed on first
    read (its length is known at once)."""
    ring_bw_Bps: float
    intra_bw_Bps: float
    inter_bw_Bps: float
    alpha_intra_s: float
    alpha_inter_s: float
    intra_class: HwClass
    gpu_arch: str
    gpu_memory_Bps: float
    extras: dict[str, float] = field(default_factory=dict)
    shm: bool = False
    net_path: int | None = None
    """NCCL's ``typeInter`` of the group's ring (:func:`perfmodel.comm.nccl_paths.net_path_type`:
    the worst path from a server's GPU to a NIC the ring uses), ``None`` on one server."""
    nvlinks: int = 0
    """NVLink links from each GPU to its NVSwitch (what NCCL's NVLS graph search loads,
    :mod:`perfmodel.comm.nvls`); 0 where the GPUs meet no NVSwitch."""
    net_port_Bps: float = math.inf
    """Line rate of the NIC ports the group's ring uses (NCCL's ``NET`` bandwidth, from the
    port speed), bytes/s; infinite on one server."""

    @property
    def n(self) -> int:
        return len(self.members)

    @property
    def nodes(self) -> int:
        return len(self.parts)

    @property
    def local(self) -> int:
        return max(len(p) for p in self.parts)


@dataclass(frozen=True)
class _RingPattern:
    """What :meth:`CommCostModel._build_group` finds for a group whose ring channels
    :func:`~perfmodel.comm.ring_summary.ring_summary` summarises, without a name: every group of the
    same pattern (:meth:`CommCostModel._pattern_key`) has these numbers
    (:meth:`CommCostModel._pattern_group`).

    ``numbers``: the analysis's :data:`_PATTERN_FIELDS` as ``(field, value)`` pairs;
    ``intra_hops``: the summary's intra-server hops (those of the group's first server) by
    local id; ``servers``: the servers the channels touch, as indices into the group's servers
    in order of first appearance (``-1``: the fabric).
    """

    n_channels: int
    numbers: tuple[tuple[str, Any], ...]
    intra_hops: tuple[tuple[str, ...], ...]
    servers: tuple[int, ...]


#: The :class:`GroupInfo` fields that name no node: what every group of one ring pattern
#: shares (every field but the members, their parts and the channels).
_PATTERN_FIELDS = tuple(
    f.name
    for f in fields(GroupInfo)
    if f.name not in {"members", "gpus", "cpus", "parts", "channels"}
)


#: Entries kept per model by each of the pattern-keyed memos (ring patterns, a dozen numbers
#: each; their member lists' keys; representative analyses; NCCL candidate tables): a plan
#: search meets a few dozen patterns.
PATTERN_MEMO_SIZE = 4096


_BY_GROUP_NUMBERS = frozenset({Algorithm.RING, Algorithm.TREE, *CLOSED_FORM_ONLY})
"""Algorithms whose analytic time reads only a group's :class:`GroupInfo` numbers and the
fabric (:meth:`CommCostModel._collective_shape`)."""


_ALGORITHM_BY_VALUE: dict[str, Algorithm] = {a.value: a for a in Algorithm}
"""Each :class:`Algorithm` by its value, what :meth:`Algorithm.parse` returns for that exact
text (the aliases name no member's value)."""


def _any_count_key(key: tuple[Any, ...]) -> tuple[Any, ...] | None:
    """The ring pattern ``key`` (:meth:`CommCostModel._ring_pattern`) without its server
    count: ``("ring*", local ids of a part, class)`` where every server is of that one class
    of interchangeable servers; else ``None``."""
    seq = key[2]
    first = seq[0]
    if isinstance(first, tuple) or any(c != first for c in seq):  # (>= 2 parts: _ring_pattern)
        return None
    return ("ring*", key[1], first)


def _relabel(value: Any, names: Mapping[str, str]) -> Any:
    """``value`` with every node name in it mapped through ``names`` (strings, tuples, channels
    and the fields of a :class:`GroupInfo`; other values unchanged)."""
    if isinstance(value, str):
        return names.get(value, value)
    if isinstance(value, LazyChannels):  # relabelled when listed
        hops = value.intra_hops
        return LazyChannels(
            len(value),
            partial(_relabel_listed, value, names),
            intra_hops=None if hops is None else _relabel(hops, names),
        )
    if isinstance(value, Channel):  # the bulk of a wide group's analysis: mapped flat
        get = names.get
        return Channel(
            tuple(get(n, n) for n in value.order),
            tuple(tuple(get(n, n) for n in hop) for hop in value.hops),
        )
    if isinstance(value, tuple):
        get = names.get
        if all(type(v) is str for v in value):  # members, a part, a hop: mapped flat
            return tuple([get(v, v) for v in value])
        return tuple([_relabel(v, names) for v in value])
    if isinstance(value, dict):
        return {k: _relabel(v, names) for k, v in value.items()}
    if isinstance(value, GroupInfo):
        return GroupInfo(
            **{f.name: _relabel(getattr(value, f.name), names) for f in fields(GroupInfo)}
        )
    return value


def _relabel_listed(channels: LazyChannels, names: Mapping[str, str]) -> tuple[Any, ...]:
    """``channels`` listed, every node name mapped through ``names``."""
    return _relabel(tuple(channels), names)


def _channel_servers(links: DirectedLinks, channels: Sequence[Channel]) -> set[int]:
    """The servers (``-1``: the fabric) the hops of ``channels`` touch, without listing
    channels whose summary knows them (:class:`LazyChannels`)."""
    known = getattr(channels, "servers", None)
    if known is not None:
        return set(known)
    srv = links.server
    return {srv[n] for ch in channels for hop in ch.hops for n in hop}


def _as_op(op: CollectiveOp | str) -> CollectiveOp:
    return op if isinstance(op, CollectiveOp) else CollectiveOp.parse(op, where="op")


def _check_bytes(message_bytes: float) -> float:
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


class CommCostModel:
    """Collective costs on a :class:`~perfmodel.topology.Topology`.

    Parameters
    ----------
    topology
        The system.
    link_params
        Per-link-class overrides (from calibration, or a dict for :meth:`LinkParams.from_dict`);
        ``None`` uses the topology's values.
    fidelity
        ``"analytic"`` (closed forms on topology-derived bandwidths) or ``"simulated"``
        (chunked transfers in a SimPy flow network with max-min fair sharing).

    Examples
    --------
    >>> from perfmodel.topology import load_system
    >>> topo = load_system("dgx1-v100")
    >>> r = CommCostModel(topo).collective("allreduce", 2**30, topo.gpus, algorithm="ring")
    >>> round(r.bandwidth_Bps / 1e9)  # bus bandwidth: 6 NVLink2 rings x 22.5 GB/s (25 x 0.9)
    135
    """

    def __init__(
        self,
        topology: Topology,
        link_params: LinkParams | Mapping[str, Any] | None = None,
        fidelity: str = "analytic",
        links: DirectedLinks | None = None,
    ) -> None:
        if fidelity not in FIDELITIES:
            raise ConfigError(
                f"unknown fidelity {fidelity!r}; expected one of {FIDELITIES}",
                value=fidelity,
                where="fidelity",
            )
        self.topology = topology
        if isinstance(link_params, Mapping):
            link_params = LinkParams.from_dict(link_params)
        self.link_params = link_params or LinkParams()
        self.fidelity = fidelity
        # ``links``: a table of the same topology and link parameters to share (not rebuilt)
        self.links = links if links is not None else DirectedLinks(topology, self.link_params)
        self.tuner, self.cpu_vendor, self.release = _tuner_of(topology)
        self._groups: dict[tuple[str, ...], GroupInfo] = {}
        self._cache: dict[tuple[Any, ...], CommResult] = {}
        self._packs: dict[tuple[str, ...], tuple[Channel, ...]] = {}
        self._shape_inside: dict[tuple[str, ...], bool] = {}
        #: (op, id of a GroupInfo) -> (that GroupInfo, :meth:`_nccl_table`)
        self._nccl_tables: BoundedMemo[tuple[CollectiveOp, int], tuple[GroupInfo, list[Any]]] = (
            BoundedMemo(PATTERN_MEMO_SIZE)
        )
        self._twin_inside: dict[tuple[str, ...], bool] = {}
        #: a server part's local GPUs (in its class's first server) -> (typeInter, NIC rate)
        self._net_paths: dict[tuple[str, ...], tuple[int, float]] = {}
        self._flow_cache: dict[tuple[tuple[str, str], ...], tuple[tuple[float, float], ...]] = {}
        self._shape_results: dict[tuple[Any, ...], CommResult] = {}
        self._patterns: BoundedMemo[tuple[Any, ...], _RingPattern] = BoundedMemo(PATTERN_MEMO_SIZE)
        self._pattern_keys: BoundedMemo[
            tuple[str, ...], tuple[tuple[Any, ...], list[list[str]]] | None
        ] = BoundedMemo(PATTERN_MEMO_SIZE)
        self._unsummarised: set[tuple[Any, ...]] = set()
        self._representatives: BoundedMemo[tuple[Any, ...], GroupInfo | None] = BoundedMemo(
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
        m = _check_bytes(message_bytes)
        # a member's exact value (``"auto"``, as the step costs pass it) names that member:
        # looked up without the parse (issue 14: ~1 us per collective of a new plan)
        algo = _ALGORITHM_BY_VALUE.get(algorithm) if type(algorithm) is str else None
        if algo is None:
            algo = Algorithm.parse(algorithm, where="algorithm")
        members = check_group(self.topology, group)
        key = (o, m, members, algo)
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        if algo is not Algorithm.AUTO and algo not in _ALLOWED[o]:
            raise ConfigError(
                f"algorithm {algo.value!r} does not implement {o.value}; use one of "
                f"{', '.join(a.value for a in _ALLOWED[o])} or auto",
                value=algo.value,
                where="algorithm",
            )
        if o is CollectiveOp.SENDRECV and len(members) < 2:
            raise ConfigError(
                "sendrecv needs at least 2 endpoints (source, destination)",
                value=members,
                where="group",
            )
        g = self.topology.graph
        no_cpu = all_gpus(self.topology, members)  # a GPU group: no node read per member
        cpus = [] if no_cpu else [x for x in members if g.nodes[x]["kind"] is NodeKind.CPU]
        if cpus and o is not CollectiveOp.SENDRECV:
            if algo is Algorithm.AUTO and o is CollectiveOp.ALLREDUCE:
                algo = Algorithm.PS  # a CPU in an all-reduce group is its parameter server
            elif algo not in (Algorithm.PS, Algorithm.HOST):
                raise ConfigError(
                    f"{cpus[0]!r} is a CPU: CPUs take part only as parameter servers (ps), the "
                    f"averaging host (host) or a sendrecv endpoint, not in {o.value}/{algo.value}",
                    value=cpus[0],
                    where="group",
                )
        if len(members) == 1:
            res = CommResult(0.0, math.inf, 0.0, algo, o, m, 1, None, self.fidelity)
        elif self.fidelity == "analytic":
            by_numbers = no_cpu and (algo is Algorithm.AUTO or algo in _BY_GROUP_NUMBERS)
            numbers = self._numbers_key(members) if by_numbers else None
            if numbers is not None:
                # a ring pattern or a twin's group met before: its numbers, hence the result
                nkey = (o, m, numbers, algo)
                res = self._shape_results.get(nkey)  # type: ignore[assignment]
                if res is None:
                    res = self._by_numbers(o, m, members, algo, numbers)
                    if res.algorithm in _BY_GROUP_NUMBERS:
                        self._shape_results[nkey] = res
                self._cache[key] = res
                return res
            shape = self._collective_shape(members, algo) if no_cpu else None
            inside = self._shape_inside
            if shape is not None and inside.get(shape) is True:
                hit = self._shape_results.get((o, m, shape, algo))
                if hit is None:
                    hit = self._by_shape(o, m, shape, algo)
                if hit is not None:
                    self._cache[key] = hit
                    return hit
            res = self._analytic(o, m, members, algo)
            if (
                shape is not None
                and inside.get(shape) is True
                and res.algorithm in _BY_GROUP_NUMBERS
            ):
                self._shape_results[(o, m, shape, algo)] = res
            if by_numbers and res.algorithm in _BY_GROUP_NUMBERS:
                numbers = self._numbers_key(members)  # known now that the group is analysed
                if numbers is not None:
                    self._shape_results[(o, m, numbers, algo)] = res
                    self._representatives.get(numbers, partial(self._groups.get, members))
        else:
            res = self._simulated(o, m, members, algo)
        self._cache[key] = res
        return res

    def _collective_shape(
        self, members: tuple[str, ...], algo: Algorithm
    ) -> tuple[str, ...] | None:
        """The members of the group of the same shape whose analytic result a group spanning
        servers may reuse (where ``_shape_inside`` says so), or ``None`` (priced as before).

        Issue 14: a pipeline's stages ask for the same collectives over translated groups.
        :meth:`group_info` of such a group (two servers or more: no :meth:`_twin_group`) is
        :meth:`_shape_group`'s relabelled analysis of the image in the first servers of its
        classes, used where that image's channels stay in its servers
        (``_shape_inside``, known once one translate has been analysed): the same bandwidths,
        latencies, channel count, parts and server attributes. The ring, tree and in-switch
        closed forms (:meth:`_nccl_candidates`, :meth:`_in_switch_candidates`) read only those
        numbers and the fabric, never a name, so the result is the same object's numbers, bit
        for bit; results of other algorithms (which route flows by name) are not shared
        (``_BY_GROUP_NUMBERS``), nor are explicit algorithms outside them.
        """
        if algo not in _BY_GROUP_NUMBERS and algo is not Algorithm.AUTO:
            return None
        srv = self.links.server
        servers = {srv[x] for x in members}
        if len(servers) < 2:
            return None
        sym = server_symmetry(self.topology)
        smap = sym.server_map(servers)
        if smap is None or all(k == v for k, v in smap.items()):
            return None
        return sym.map_nodes(members, smap)

    def group_info(self, group: Sequence[str]) -> GroupInfo:
        """Topology-derived bandwidths and latencies of a group (cached)."""
        members = check_group(self.topology, group)
        info = self._groups.get(members)
        if info is None:
            info = (
                self._twin_group(members)
                or self._pattern_group(members)
                or self._shape_group(members)
                or self._build_group(members)
            )
            self._groups[members] = info
        return info

    def _numbers_key(self, members: tuple[str, ...]) -> tuple[Any, ...] | None:
        """A key for the analysed numbers of a group of GPUs that other groups share, where
        they are known to: its ring pattern (:meth:`_pattern_key`) once a group of the pattern
        has been analysed, or, inside one server, ``("twin", the same local ids in the
        server's inside twin)`` once that group's channels are known to stay in the twin
        (:meth:`_twin_group`: then every server with that twin reads the twin's analysis);
        else ``None``. What ``_BY_GROUP_NUMBERS`` algorithms cost is a function of the key.
        """
        links = self.links
        srv = links.server
        s = srv[members[0]]
        if any(srv[x] != s for x in members):
            got = self._pattern_key(members)
            if got is None or got[0] not in self._patterns.entries:
                return None
            return got[0]
        if s < 0:
            return None
        fwd = server_symmetry(self.topology).twin_map(s)
        base = members if fwd is None else tuple([fwd[x] for x in members])
        inside = self._twin_inside.get(base)
        if inside is None:
            info = self._groups.get(base)
            if info is None:
                return None
            t = srv[base[0]]
            inside = self._twin_inside[base] = not (_channel_servers(links, info.channels) - {t})
        return ("twin", base) if inside else None

    def _pattern_key(
        self, members: tuple[str, ...]
    ) -> tuple[tuple[Any, ...], list[list[str]]] | None:
        """:meth:`_ring_pattern` of ``members``, memoised (asked up to four times for a new
        group: its collective before and after the analysis, the analysis, the record)."""
        return self._pattern_keys.get(members, partial(self._ring_pattern, members))

    def _ring_pattern(
        self, members: tuple[str, ...]
    ) -> tuple[tuple[Any, ...], list[list[str]]] | None:
        """The ring pattern of a group of GPUs spanning servers and its parts
        (:func:`~perfmodel.comm.nodes.split_by_server`), or ``None`` (one server, or parts of
        different local ids: :func:`~perfmodel.comm.ring_summary.ring_summary` summarises no such
        group).

        The pattern is ``("ring", local ids of a part, the servers' classes in order of first
        appearance)``, a server outside every class
        (:attr:`~perfmodel.topology.symmetry.ServerSymmetry.cls`) standing for itself. Issue
        14: a plan's data-parallel groups of every pipeline stage, and of every plan with that
        degree and tensor-parallel rank, have one pattern; their servers are other servers of
        the same classes in another name order, which the order-preserving images of
        :meth:`_shape_group` do not merge (GPT-3 175B dp32 tp4 pp8 on 128 DGX A100: eight
        groups, six images, one pattern per local id).

        Why every group of one pattern has :meth:`_build_group`'s numbers
        (:class:`_RingPattern`), bit for bit: :func:`~perfmodel.comm.ring_summary.ring_summary`
        reads of the servers only (a) the first server's ring packing, NICs and the routes
        from its GPUs to its NICs, which stay in the server and the fabric and compare names
        inside the server only (the same local-id sequence in name order in every server of
        a class: :func:`~perfmodel.topology.symmetry.server_symmetry`); (b) routes inside the
        servers, read off their common inside twin by local id; (c) per pair of classes of
        adjacent servers, the fabric route between the NICs, memoised by the NICs' fabric
        links, which servers of a class share (``_fabric_pattern``), and the NIC links'
        capacities; and (d) how many adjacent pairs each class pair has. Every resource of
        its max-min fill is keyed by local ids, capacities and fabric links, and met in the
        order of the channels and of the first boundaries of the class pairs: the same keys
        in the same order for every group of the pattern. The rest of :meth:`_build_group`
        reads the first part's packed rings and link attributes by local id
        (:meth:`_packed`), the GPU model and the P2P rule of the servers, alike in a class.
        """
        links = self.links
        if len(members) > 1:  # one member per server, one local id, servers in classes (a
            # data-parallel group): the same key and parts, read in C loops
            servers = list(map(links.server.__getitem__, members))
            lids = set(map(links.local_id.__getitem__, members))
            if len(lids) == 1 and len(set(servers)) == len(members):
                seq = tuple(map(links._symmetry.cls.get, servers))
                if None not in seq:
                    return ("ring", (lids.pop(),), seq), [[m] for m in members]
        parts = split_by_server(self.topology, members, links.server)
        if len(parts) < 2:
            return None
        lid = links.local_id.__getitem__
        key0 = tuple(map(lid, parts[0]))
        if any(tuple(map(lid, p)) != key0 for p in parts[1:]):
            return None
        srv = links.server
        cls = links._symmetry.cls
        seq = []
        for p in parts:
            s = srv[p[0]]
            c = cls.get(s)
            seq.append(c if c is not None else ("u", s))
        return ("ring", key0, tuple(seq)), parts

    def _pattern_group(self, members: tuple[str, ...]) -> GroupInfo | None:
        """The analysis of a group of GPUs spanning servers from the numbers of its ring
        pattern (:meth:`_pattern_key`), where a group of that pattern has been analysed (the
        channels are this group's own, listed when read); the group's own analysis where it
        is the first of its pattern (which records the pattern); ``None`` where the group has
        no pattern or its pattern's first group was not summarised."""
        if not all_gpus(self.topology, members):
            return None
        got = self._pattern_key(members)
        if got is None:
            return None
        key, parts = got
        pat = self._patterns.entries.get(key)
        if pat is None:
            pat = self._pattern_of_count(key, len(parts))
        if pat is None:
            if key in self._unsummarised:
                return None  # read off an image where one is (_shape_group)
            # the first group of its pattern: analysed as itself (no image to relabel)
            info = self._build_group(members)
            if key not in self._patterns.entries:
                self._unsummarised.add(key)
            return info
        links = self.links
        srv = links.server
        servers = [srv[p[0]] for p in parts]
        first = links.by_local[servers[0]]
        channels = LazyChannels(
            pat.n_channels,
            partial(build_channels, links, members),
            frozenset(-1 if i < 0 else servers[i] for i in pat.servers),
            tuple(tuple(first[x] for x in hop) for hop in pat.intra_hops),
        )
        return GroupInfo(
            members=members,
            gpus=members,
            cpus=(),
            parts=tuple(map(tuple, parts)),
            channels=channels,
            **dict(pat.numbers),
        )

    def _record_pattern(self, info: GroupInfo, summary: RingSummary) -> None:
        """Keep the numbers of a group summarised by :func:`ring_summary` under its ring
        pattern (:meth:`_pattern_key`), where its intra-server hops lie in its first server."""
        got = self._pattern_key(info.members)
        if got is None:
            return
        key, parts = got
        links = self.links
        srv, lid = links.server, links.local_id
        servers = [srv[p[0]] for p in parts]
        s0 = servers[0]
        if any(srv[x] != s0 for hop in summary.intra_hops for x in hop):
            return  # pragma: no cover - the summary's segments are the first server's rings
        index = {s: i for i, s in enumerate(servers)}
        index[-1] = -1
        if not summary.servers <= index.keys():
            return  # pragma: no cover - the channels touch the group's servers and the fabric
        pat = _RingPattern(
            n_channels=summary.n_channels,
            numbers=tuple((f, getattr(info, f)) for f in _PATTERN_FIELDS),
            intra_hops=tuple(tuple(lid[x] for x in hop) for hop in summary.intra_hops),
            servers=tuple(sorted(index[s] for s in summary.servers)),
        )
        self._patterns.get(key, lambda: pat)
        any_count = _any_count_key(key)
        every = set(index.values()) - {-1}
        if any_count is not None and summary.fabric_free and every <= set(pat.servers):
            self._patterns.get(any_count, lambda: pat)

    def _pattern_of_count(self, key: tuple[Any, ...], n_servers: int) -> _RingPattern | None:
        """The numbers of ring pattern ``key`` read off a group of the same local ids over
        another number of servers of the same one class (:func:`_any_count_key`), kept under
        ``key`` from now on; ``None`` where no such group has been summarised with every
        boundary's fabric part one switch (:attr:`~perfmodel.comm.ring_summary.RingSummary.fabric_free`).

        Issue 14: the data-parallel groups of 16, 32 and 64 servers of one class (GPT-3 175B
        on 128 DGX A100) are one analysis. Why it is :meth:`_build_group`'s answer, bit for
        bit: with one class, :func:`~perfmodel.comm.ring_summary.ring_summary` composes one class
        pair's boundary (the first two servers'; every server pair of the class composes the
        same, :meth:`_ring_pattern`), and the number of boundaries (the server count) enters
        only as the multiplier of the fabric-link loads, of which a fabric-free summary has
        none: the same resources, capacities and per-channel counts in the same order, so the
        same max-min rates; the channel count (the first part's rings and the server's NICs),
        the first server's hops, the latencies of the one boundary path and the server
        attributes do not read the count either. The channels touch every server of the group
        (and the fabric where the recorded group's did)."""
        any_count = _any_count_key(key)
        if any_count is None:
            return None
        base = self._patterns.entries.get(any_count)
        if base is None:
            return None
        touched = (-1, *range(n_servers)) if -1 in base.servers else tuple(range(n_servers))
        pat = replace(base, servers=touched)
        return self._patterns.get(key, lambda: pat)

    def _shape_group(self, members: tuple[str, ...]) -> GroupInfo | None:
        """The analysis of a group, read off the group of the same shape in the first servers
        of its servers' classes and relabelled, or ``None``.

        Interchangeable servers (:func:`perfmodel.topology.symmetry.server_symmetry`) are
        exchanged by a graph automorphism that keeps the name order of the group's servers'
        nodes and of the fabric, so the ring search (minimum hops, widest, then smallest node
        names; searched inside the group's servers and the fabric only) finds the mapped
        channels: the same bandwidths, latencies and channel count. Issue 14: the tensor-,
        pipeline- and data-parallel groups of every plan, data-parallel degree and cluster
        size are one analysis per shape (a GPT-3 tp16 pp16 plan on 128 DGX A100: 3.5 s of
        ring analysis for 31 new groups; the identical tensor-parallel groups of the pipeline
        stages, inside one server each, are one analysis). Used only when the canonical
        channels stay inside the canonical servers and the fabric (else the group is analysed
        directly).
        """
        links = self.links
        servers = set(map(links.server.__getitem__, members))
        sym = server_symmetry(self.topology)
        smap = sym.server_map(servers)
        if smap is None or all(k == v for k, v in smap.items()):
            return None
        fwd = sym.node_map(smap)
        base_members = tuple(fwd.get(m, m) for m in members)
        base = self._groups.get(base_members)
        if base is None:
            base = self._groups[base_members] = self._build_group(base_members)
        inside = self._shape_inside.get(base_members)
        if inside is None:  # once per shape: do the canonical channels stay in their servers?
            used = _channel_servers(links, base.channels)
            inside = self._shape_inside[base_members] = used <= {-1, *smap.values()}
        if not inside:
            return None
        return _relabel(base, {v: k for k, v in fwd.items()})

    def _twin_group(self, members: tuple[str, ...]) -> GroupInfo | None:
        """The analysis of a group inside one server, read off the same local ids in the
        server's inside twin (:meth:`perfmodel.topology.symmetry.ServerSymmetry.twin_map`) and
        relabelled, or ``None``.

        The twin is built alike inside and its nodes share outside switches no less (so no
        route through the fabric is shorter for this server than for the twin); used only when
        the twin's channels stay inside the twin, where the two servers are the same graph with
        the same name order. Issue 14: the identical tensor-parallel groups of the pipeline
        stages are analysed once, also on servers of other fat-tree leaves, which are no class
        of the twin's (:meth:`_shape_group`).
        """
        links = self.links
        s = links.server.get(members[0], -1)
        if s < 0 or any(links.server[m] != s for m in members):
            return None
        fwd = server_symmetry(self.topology).twin_map(s)
        if fwd is None:
            return None
        base_members = tuple(fwd[m] for m in members)
        base = self._groups.get(base_members)
        if base is None:
            base = self._groups[base_members] = self._build_group(base_members)
        t = links.server[base_members[0]]
        if _channel_servers(links, base.channels) - {t}:
            return None
        return _relabel(base, {v: k for k, v in fwd.items()})

    def choose(
        self, op: CollectiveOp | str, message_bytes: float, group: Sequence[str]
    ) -> tuple[Algorithm, Protocol | None]:
        """The (algorithm, protocol) ``auto`` picks for this call (analytic tuner)."""
        r = self._analytic(
            _as_op(op),
            _check_bytes(message_bytes),
            check_group(self.topology, group),
            Algorithm.AUTO,
        )
        return r.algorithm, r.protocol

    # ------------------------------------------------------------------ group analysis
    def _build_group(self, members: tuple[str, ...]) -> GroupInfo:
        if all_gpus(self.topology, members):  # no node read per member
            gpus, cpus = members, ()
        else:
            nodes = self.topology.graph.nodes
            kinds = [nodes[x]["kind"] for x in members]
            gpus = tuple(x for x, k in zip(members, kinds) if k is NodeKind.GPU)
            cpus = tuple(x for x, k in zip(members, kinds) if k is NodeKind.CPU)
        ring_members = gpus if gpus else members
        links = self.links
        parts = tuple(tuple(p) for p in split_by_server(self.topology, ring_members, links.server))
        summary = ring_summary(links, ring_members) if len(parts) > 1 else None
        channels: Sequence[Channel]
        if summary is not None:  # servers built alike: analysed without listing the channels
            channels = LazyChannels(
                summary.n_channels,
                partial(build_channels, links, ring_members),
                summary.servers,
                summary.intra_hops,
            )
            ring_bw = numpy_sum(summary.rates)
            intra_hops = list(summary.intra_hops)
            inter_hops = list(summary.inter_hops)
        else:
            if len(ring_members) >= 2:
                channels = (
                    self._packed(ring_members)
                    if len(parts) == 1
                    else build_channels(links, ring_members)
                )
                rates = channel_rates(links, channels, links.charge_p2p)
                ring_bw = numpy_sum(rates)
            else:
                channels, ring_bw = (), math.inf
            intra_hops = [h for ch in channels for h in ch.hops if self._same_server(h)]
            inter_hops = [h for ch in channels for h in ch.hops if not self._same_server(h)]
        # only what NCCL's per-step latency does not contain (sockets): latency counted once
        # (extra_latency returns 0.0 at once where no link has such latency)
        extra = links.extra_latency
        alpha_intra = max((extra(h) for h in intra_hops), default=0.0)
        alpha_inter = max((extra(h) for h in inter_hops), default=0.0)
        classes = {links.hw_class(h) for h in intra_hops}
        if not classes or classes == {HwClass.NVLINK}:
            intra_class = HwClass.NVLINK if classes else HwClass.PCI
        else:
            intra_class = HwClass.PCI
        # Bandwidth inside one server (ring over its members) and across servers (per server).
        biggest = max(parts, key=len) if parts else ()
        if len(parts) > 1 and len(biggest) >= 2:
            intra = self._packed(biggest)
            intra_bw = numpy_sum(channel_rates(links, intra, links.charge_p2p))
        elif len(parts) == 1:
            intra_bw = ring_bw
        else:
            intra_bw = math.inf
        if summary is not None:
            inter_bw = numpy_sum(summary.inter_rates)
        elif len(parts) > 1:
            inter_only = [
                Channel(ch.order, tuple(h for h in ch.hops if not self._same_server(h)))
                for ch in channels
            ]
            inter_bw = numpy_sum(channel_rates(links, inter_only))
        else:
            inter_bw = math.inf
        spec = self.topology.gpu_spec(gpus[0]) if gpus else None
        arch = spec.architecture.lower() if spec else ""
        mem_bw = spec.memory_bandwidth_Bps if spec else cf.DEFAULT_HOST_MEMORY_BANDWIDTH_Bps
        net_path, port = (None, math.inf) if len(parts) < 2 or not gpus else self._net_path(parts)
        info = GroupInfo(
            members=members,
            gpus=gpus,
            cpus=cpus,
            parts=parts,
            channels=channels,
            ring_bw_Bps=ring_bw,
            intra_bw_Bps=intra_bw,
            inter_bw_Bps=inter_bw,
            alpha_intra_s=alpha_intra,
            alpha_inter_s=alpha_inter,
            intra_class=intra_class,
            gpu_arch=arch,
            gpu_memory_Bps=mem_bw,
            shm=links.uses_shm(ring_members),
            net_path=net_path,
            nvlinks=self._nvlinks(gpus[0]) if gpus else 0,
            net_port_Bps=port,
        )
        if summary is not None and not cpus:
            self._record_pattern(info, summary)
        return info

    def _net_path(self, parts: Sequence[Sequence[str]]) -> tuple[int, float]:
        """NCCL's ``typeInter`` of a ring over ``parts`` (one per server) and the line rate of
        the NICs it uses: per server, the NICs its GPUs leave through
        (:meth:`~perfmodel.comm.links.DirectedLinks.gpu_nic`), each reached from its nearest
        GPU of the part (:func:`~perfmodel.comm.nccl_paths.net_path_type`); the worst server's
        path, the slowest port. Read off each server's inside twin
        (:attr:`~perfmodel.topology.symmetry.ServerSymmetry.twin`: built alike inside, which is
        all the GPU-to-NIC paths and the NIC ports read) and kept per twin and local ids, so a
        cluster of one server model analyses its first server only."""
        links = self.links
        sym = server_symmetry(self.topology)
        g = self.topology.graph
        worst, port = 0, math.inf
        seen: set[tuple[int, tuple[str, ...]]] = set()
        for part in parts:
            s = sym.server[part[0]]
            t = sym.twin.get(s, s)
            local = tuple(sym.local_id[x] for x in part)
            if (t, local) in seen:
                continue
            seen.add((t, local))
            base = tuple(sym.by_local[t][x] for x in local) if t != s else tuple(part)
            hit = self._net_paths.get(base)
            if hit is None:
                nics = sorted({n for x in base if (n := links.gpu_nic(x)) is not None})
                pxn = self.release is None or tuple(self.release) >= PXN_FROM
                kind = int(net_path_type(self.topology, base, nics, pxn=pxn))
                rate = min(
                    (
                        float(d["bandwidth_Bps"])
                        for n in nics
                        for v, d in g.adj[n].items()
                        if links.server.get(v, -1) < 0
                    ),
                    default=math.inf,
                )
                hit = self._net_paths[base] = (kind, rate)
            worst, port = max(worst, hit[0]), min(port, hit[1])
        return worst, port

    def _nvlinks(self, gpu: str) -> int:
        """NVLink links from ``gpu`` to NVSwitches (edge ``count``), 0 without a switch."""
        g = self.topology.graph
        return sum(
            int(d.get("count", 1))
            for v, d in g.adj[gpu].items()
            if g.nodes[v]["kind"] is NodeKind.NVSWITCH
        )

    def _packed(self, members: tuple[str, ...]) -> tuple[Channel, ...]:
        """:func:`~perfmodel.comm.rings.pack_rings` of GPUs of one server (what
        :func:`~perfmodel.comm.channels.build_channels` returns for them), computed once per local-id
        shape in the first server of the server's class and mapped back: the search stays inside
        the server, whose node-name order the exchange keeps (issue 14: a tensor-parallel group
        and the server parts of the wider groups of every plan pack one ring set)."""
        sym = server_symmetry(self.topology)
        s = self.links.server[members[0]]
        smap = sym.server_map((s,))
        if smap is None:
            return pack_rings(self.links, members)
        base_members = tuple(sym.map_node(m, smap) for m in members)
        base = self._packs.get(base_members)
        if base is None:
            base = self._image_pack(base_members) or pack_rings(self.links, base_members)
            self._packs[base_members] = base
        if smap[s] == s:
            return base
        return _relabel(base, sym.node_map({smap[s]: s}))

    def _image_pack(self, members: tuple[str, ...]) -> tuple[Channel, ...] | None:
        """The ring packing of GPUs ``members`` of one server read off an earlier packing of
        as many GPUs of that server that no name decided, where an automorphism of the server
        maps those GPUs onto ``members`` in order
        (:func:`~perfmodel.topology.symmetry.member_automorphism`), names mapped; else ``None``.

        Why it is :func:`~perfmodel.comm.rings.pack_rings`' own answer: the packing searches
        the server's nodes and links only, and reads of them the link units, capacities,
        latencies and classes, which transit nodes are, and the members' order (ring orders
        by index), all kept by the automorphism; its last tie-break, the name order, decided
        no choice of the earlier packing (``DirectedLinks._name_free``: every comparison
        settled before the names, no fallback routes, no host-memory detours). So the search on
        ``members`` makes the image of every comparison and choice, and finds the image
        rings. Issue 14: a tensor-parallel group of GPUs 4-7 of a DGX A100 takes GPUs 0-3's
        rings (the other PCIe complexes, CPU and NICs are the image)."""
        links = self.links
        s = links.server[members[0]]
        nodes = links.server_nodes[s]
        for done in list(self._packs):
            key = (done, MAX_CHANNELS)
            if len(done) != len(members) or done == members or key not in links._name_free:
                continue
            if links.server.get(done[0]) != s or any(links.server[x] != s for x in done):
                continue
            fwd = member_automorphism(self.topology, nodes, done, members)
            if fwd is not None:
                packed = _relabel(self._packs[done], fwd)
                links._packed[(members, MAX_CHANNELS)] = packed  # pack_rings' answer
                links._name_free.add((members, MAX_CHANNELS))
                return packed
        return None

    def _same_server(self, path: Sequence[str]) -> bool:
        srv = self.links.server
        return srv[path[0]] == srv[path[-1]]

    def gpu_reduce_Bps(self, info: GroupInfo) -> float:
        """Rate of an element-wise reduction on a GPU: memory bandwidth / 3 (read two inputs,
        write one output), or the calibrated override."""
        if self.link_params.gpu_reduce_bandwidth_Bps is not None:
            return self.link_params.gpu_reduce_bandwidth_Bps
        return info.gpu_memory_Bps / 3.0

    def host_memory_Bps(self, cpu: str | None = None) -> float:
        """Host memory bandwidth for CPU-side averaging (override, catalogue CPU, or default)."""
        if self.link_params.host_reduce_bandwidth_Bps is not None:
            return self.link_params.host_reduce_bandwidth_Bps
        if cpu is not None:
            import perfmodel.hardware as hw

            get_cpu = getattr(hw, "get_cpu", None)
            model = self.topology.graph.nodes[cpu].get("model")
            if get_cpu is not None and model:
                try:
                    spec = get_cpu(model)
                except ConfigError:
                    spec = None
                bw = getattr(spec, "memory_bandwidth_Bps", None) if spec is not None else None
                if bw:
                    return float(bw)
        return cf.DEFAULT_HOST_MEMORY_BANDWIDTH_Bps

    # ------------------------------------------------------------------ analytic
    def _by_numbers(
        self,
        op: CollectiveOp,
        m: float,
        members: tuple[str, ...],
        algo: Algorithm,
        numbers: tuple[Any, ...],
    ) -> CommResult:
        """The analytic result of a group whose numbers are those of ``numbers``
        (:meth:`_numbers_key`): priced on the analysis of the first group met with that key
        (no analysis of this group is made, nor kept), where the chosen algorithm reads only
        those numbers (``_BY_GROUP_NUMBERS``, as the shared results of :meth:`collective`);
        else on this group's own analysis."""
        rep = self._representatives.entries.get(numbers)
        if rep is not None and op not in (CollectiveOp.ALLTOALL, CollectiveOp.SENDRECV):
            res = self._analytic_info(op, m, rep, algo)
            if res.algorithm in _BY_GROUP_NUMBERS:
                return res
        res = self._analytic(op, m, members, algo)
        if res.algorithm in _BY_GROUP_NUMBERS:
            self._representatives.get(numbers, partial(self._groups.get, members))
        return res

    def _by_shape(
        self, op: CollectiveOp, m: float, shape: tuple[str, ...], algo: Algorithm
    ) -> CommResult | None:
        """A new message size of a group whose shape's image ``shape``
        (:meth:`_collective_shape`) is analysed and stays in its servers: priced on the
        image's analysis (no relabelled copy made), kept under the shape, where the chosen
        algorithm reads only the group's numbers (``_BY_GROUP_NUMBERS``: then the image's
        result is the group's, as for the sizes the shape shares in :meth:`collective`);
        ``None`` otherwise (the group is analysed itself)."""
        base = self._groups.get(shape)
        if base is None or op in (CollectiveOp.ALLTOALL, CollectiveOp.SENDRECV):
            return None
        res = self._analytic_info(op, m, base, algo)
        if res.algorithm not in _BY_GROUP_NUMBERS:
            return None
        self._shape_results[(op, m, shape, algo)] = res
        return res

    def _analytic(
        self, op: CollectiveOp, m: float, members: tuple[str, ...], algo: Algorithm
    ) -> CommResult:
        return self._analytic_info(op, m, self.group_info(members), algo)

    def _analytic_info(
        self, op: CollectiveOp, m: float, info: GroupInfo, algo: Algorithm
    ) -> CommResult:
        """The analytic result of ``op`` over the group ``info`` describes."""
        if algo is Algorithm.AUTO:
            cands = self._nccl_candidates(op, m, info)
            if not cands:
                algo = _ALLOWED[op][0]
            else:
                t, a, p, lat, bw = min(cands, key=lambda c: c[0])
                t, lat = self._chain_time(op, m, info, t, a, p, lat, bw)
                return self._result(op, m, info, t, a, p, lat, bw)
        if algo in (Algorithm.RING, Algorithm.TREE) or algo in CLOSED_FORM_ONLY:
            cands = [c for c in self._nccl_candidates(op, m, info) if c[1] is algo]
            if not cands:
                raise ConfigError(
                    f"{algo.value} is not available for {op.value} on this group",
                    value=algo.value,
                    where="algorithm",
                )
            t, a, p, lat, bw = min(cands, key=lambda c: c[0])
            t, lat = self._chain_time(op, m, info, t, a, p, lat, bw)
            return self._result(op, m, info, t, a, p, lat, bw)
        t, lat, bw = self._other(op, m, info, algo)
        return self._result(op, m, info, t, algo, None, lat, bw)

    def _chain_time(
        self,
        op: CollectiveOp,
        m: float,
        info: GroupInfo,
        t: float,
        algo: Algorithm,
        proto: Protocol,
        lat: float,
        bus: float,
    ) -> tuple[float, float]:
        """The time and latency of the choice ``(algo, proto)`` the tuner made (``t``,
        ``lat``): unchanged, except for a ring broadcast or reduce, a pipelined *chain* whose
        time the tuner does not model ("Add some chunk latency, waiting for proper chunk
        modeling", NVIDIA/nccl ``src/graph/tuning.cc`` of every release): NCCL chooses by its
        estimate, the chain takes its own time (:func:`perfmodel.comm.closed_form.chain_time`).

        The chain passes ``n - 1`` hops, ``nodes - 1`` of them across servers, each with its
        step latency (``hwLat`` of its transport), and forwards one protocol step at a time
        (:data:`perfmodel.comm.closed_form.STEP_BYTES`; ``BROADCAST_CHUNKSTEPS`` =
        ``BROADCAST_SLICESTEPS`` = 1): every network hop stores a whole step before its proxy
        posts it (``src/transport/net.cc`` ``sendProxyProgress`` waits for the GPU's tail), and
        so does every hop inside a server with Simple, whose receiver waits for the step's tail;
        LL and LL128 forward line by line inside a server. A step crosses a hop at the
        channel's share of the hop's bandwidth (the group's network or server bandwidth over
        its channels). 90 MB over 1,024 A100 (4 x 100 Gb RoCE, 12 channels, LL128): 127 network
        hops of 160 us fill the chain, 20 ms that the tuner's 4 ms latency leaves out.
        """
        if algo is not Algorithm.RING or op not in (CollectiveOp.BROADCAST, CollectiveOp.REDUCE):
            return t, lat
        nch = max(1, len(info.channels))
        step = self.tuner.step_latency_s
        hw_intra = info.intra_class
        n, nodes = info.n, info.nodes
        chain_lat = cf.chain_time(
            m,
            n,
            nodes,
            nch,
            proto,
            base_s=self.tuner.base_latency_s[("ring", proto)],
            intra_step_s=step[(hw_intra, "ring", proto)] + info.alpha_intra_s,
            inter_step_s=step[(HwClass.NET, "ring", proto)] + info.alpha_inter_s,
            intra_channel_Bps=info.intra_bw_Bps / nch,
            inter_channel_Bps=info.inter_bw_Bps / nch,
        )
        return chain_lat + m / bus, chain_lat

    def _result(
        self,
        op: CollectiveOp,
        m: float,
        info: GroupInfo,
        t: float,
        algo: Algorithm,
        proto: Protocol | None,
        lat: float,
        bw: float,
    ) -> CommResult:
        algbw = m / t if t > 0 else math.inf
        n = info.n
        return CommResult(
            time_s=t,
            algbw_Bps=algbw,
            busbw_Bps=algbw * bus_factor(op, n) if math.isfinite(algbw) else 0.0,
            algorithm=algo,
            op=op,
            message_bytes=m,
            group_size=n,
            protocol=proto,
            fidelity=self.fidelity,
            latency_s=lat,
            bandwidth_Bps=bw,
            channels=len(info.channels),
            nodes=info.nodes,
            shm=info.shm,
        )

    def protocols(self, info: GroupInfo) -> tuple[Protocol, ...]:
        """Protocols NCCL would enable for this group: LL and Simple always, LL128 by the rule
        of the release (:func:`perfmodel.comm.tuner.ll128_enabled`: the GPU generation, NVLink
        inside the servers and, across servers, the GPU-to-NIC path)."""
        ll128 = info.gpu_arch in P.LL128_ARCHITECTURES and ll128_enabled(
            self.release,
            info.gpu_arch,
            intra_nvlink=info.intra_class is HwClass.NVLINK,
            net_path=info.net_path if info.nodes > 1 else None,
        )
        return (
            (Protocol.LL, Protocol.LL128, Protocol.SIMPLE)
            if ll128
            else (Protocol.LL, Protocol.SIMPLE)
        )

    def _nccl_candidates(
        self, op: CollectiveOp, m: float, info: GroupInfo
    ) -> list[tuple[float, Algorithm, Protocol, float, float]]:
        """(time, algorithm, protocol, latency, busbw) of every NCCL ring/tree choice.

        The size-free part of each choice is :meth:`_nccl_table`'s, kept per (op, group
        analysis); here only what reads ``m`` is applied, in the same order of operations as
        one pass would (the ring plateau factor on the latency, the tree correction on the
        algorithm bandwidth), so every candidate is the same float, bit for bit."""
        if op in (CollectiveOp.ALLTOALL, CollectiveOp.SENDRECV):
            return []
        # the entry holds ``info``, so no other object has its id while the entry is kept
        table = self._nccl_tables.get((op, id(info)), lambda: (info, self._nccl_table(op, info)))
        assert table[0] is info
        out = []
        tuner = self.tuner
        if tuner.per_channel_caps:  # nBytes / (nChannels x nRanks) >= 64 (2.18+)
            plateau_from = tuner.plateau_bytes_per_rank_channel * info.n * len(info.channels)
        else:
            plateau_from = info.n * tuner.plateau_bytes_per_rank_channel
        plateau_factor = tuner.plateau(info.gpu_arch)
        ring = Algorithm.RING
        log_size = -1  # the tree correction's size bucket, found at the first tree choice
        for algo, proto, lat, algbw, bus, plateau in table[1]:
            if algo is ring:
                if plateau and m >= plateau_from:
                    lat *= plateau_factor
            else:
                if log_size < 0:
                    log_size = int(math.log2(max(m / 64.0, 1.0)))
                if log_size < tuner.tree_correction_below:
                    algbw *= tuner.tree_correction[proto][log_size]
            if algbw <= 0:
                continue
            out.append((lat + m / algbw, algo, proto, lat, bus))
        if op is CollectiveOp.ALLREDUCE:
            out.extend(self._in_switch_candidates(m, info))
        out.extend(recent_candidates(self, op, m, info))
        return out

    def _nccl_table(
        self, op: CollectiveOp, info: GroupInfo
    ) -> list[tuple[Algorithm, Protocol, float, float, float, bool]]:
        """Per NCCL ring/tree choice of ``op`` on ``info``'s group, what does not read the
        message size: (algorithm, protocol, latency before the ring plateau factor, algorithm
        bandwidth before the tree correction, bus bandwidth, whether the plateau factor applies
        from :meth:`_nccl_candidates`' size on), by the model's tuner table
        (:mod:`perfmodel.comm.tuner`): NCCL 2.8's (:meth:`_nccl_table_28`) or 2.29's
        (:meth:`_nccl_table_229`)."""
        if self.tuner.per_channel_caps:
            return self._nccl_table_229(op, info)
        return self._nccl_table_28(op, info)

    def _nccl_table_28(
        self, op: CollectiveOp, info: GroupInfo
    ) -> list[tuple[Algorithm, Protocol, float, float, float, bool]]:
        """:meth:`_nccl_table` with NCCL 2.7/2.8's constants (:mod:`perfmodel.comm.params`)."""
        n, nodes = info.n, info.nodes
        if op is CollectiveOp.ALLREDUCE:
            nsteps, ninter = 2 * (n - 1), 2 * (nodes - 1)
        elif op in (CollectiveOp.REDUCESCATTER, CollectiveOp.ALLGATHER):
            nsteps, ninter = n - 1, nodes - 1
        else:
            nsteps, ninter = n, nodes
        ppn = n / nodes
        sm80 = info.gpu_arch == "ampere"
        reduce_bw = self.gpu_reduce_Bps(info)
        reduces = op in (CollectiveOp.ALLREDUCE, CollectiveOp.REDUCESCATTER, CollectiveOp.REDUCE)
        out = []
        for proto in self.protocols(info):
            for algo in (Algorithm.RING, Algorithm.TREE):
                if algo is Algorithm.TREE and op is not CollectiveOp.ALLREDUCE:
                    continue
                a = algo.value
                bus = (
                    info.ring_bw_Bps
                    if algo is Algorithm.RING
                    else min(info.intra_bw_Bps, info.inter_bw_Bps)
                )
                if reduces:
                    bus = min(bus, reduce_bw)
                if sm80:
                    bus = min(bus, P.NCCL_SM80_MAX_BUSBW_Bps)
                if algo is Algorithm.RING:
                    if proto is Protocol.LL:
                        multi = nodes > 1 or op in (CollectiveOp.ALLREDUCE, CollectiveOp.REDUCE)
                        bus *= (
                            P.NCCL_RING_LL_FACTOR_ALLREDUCE
                            if multi
                            else P.NCCL_RING_LL_FACTOR_OTHER
                        )
                    elif proto is Protocol.LL128:
                        bus *= P.NCCL_LL128_FACTOR_ONE_PER_NODE if ppn < 2 else P.NCCL_LL128_FACTOR
                    algbw = bus * n / nsteps
                else:
                    cap = P.NCCL_TREE_MAX_BW_Bps[
                        ("multi" if nodes > 2 else "few", sm80 and proto is Protocol.LL128)
                    ]
                    bus = min(bus * P.NCCL_TREE_BW_FACTOR, cap)
                    if proto is Protocol.LL:
                        bus *= P.NCCL_TREE_LL_FACTOR
                    elif proto is Protocol.LL128:
                        bus *= (
                            P.NCCL_TREE_LL128_FACTOR_INTRA
                            if nodes == 1
                            else P.NCCL_TREE_LL128_FACTOR_INTER
                        )
                    algbw = bus * 0.5  # the size's correction: _nccl_candidates
                intra_lat = P.NCCL_STEP_LATENCY_S[(info.intra_class, a, proto)] + info.alpha_intra_s
                inter_lat = P.NCCL_STEP_LATENCY_S[(HwClass.NET, a, proto)] + info.alpha_inter_s
                if nodes > 1 and proto is Protocol.LL:
                    intra_lat *= P.NCCL_LL_MULTINODE_INTRA_LATENCY_FACTOR
                lat = P.NCCL_BASE_LATENCY_S[(a, proto)]
                plateau = False
                if algo is Algorithm.RING:
                    if op in (CollectiveOp.BROADCAST, CollectiveOp.REDUCE):
                        step = P.NCCL_STEP_LATENCY_S[
                            (
                                HwClass.NET if nodes > 1 else info.intra_class,
                                "tree" if proto is Protocol.SIMPLE else "ring",
                                proto,
                            )
                        ]
                        lat += (
                            nsteps * step
                            + (nsteps - ninter) * info.alpha_intra_s
                            + ninter * info.alpha_inter_s
                        )
                    else:
                        lat += (nsteps - ninter) * intra_lat + ninter * inter_lat
                    # the size's plateau factor: _nccl_candidates
                    plateau = (
                        proto is Protocol.SIMPLE and nodes > 1 and op is CollectiveOp.ALLREDUCE
                    )
                else:
                    lat += 2 * ((ppn - 1) * intra_lat + math.log2(nodes) * inter_lat)
                out.append((algo, proto, lat, algbw, bus, plateau))
        return out

    def _nccl_table_229(
        self, op: CollectiveOp, info: GroupInfo
    ) -> list[tuple[Algorithm, Protocol, float, float, float, bool]]:
        """:meth:`_nccl_table` with NCCL 2.29's tuner (``ncclTopoTuneModel``, v2.29.7-1).

        Bus bandwidth per choice (``B``: the ring bandwidth on the topology; for the tree the
        server's inside bandwidth on up to two servers, else (or with one GPU per server) the
        smaller of it and the network's, as NCCL's ``nNodes <= 2 ? bwIntra : bwInter``: on two
        servers a tree moves each byte across the network once per direction, a ring
        ``2 (n - 1) / n`` times; ``c``: the group's ring channels; caps by
        architecture and node count, :class:`~perfmodel.comm.tuner.NcclTuner`):

        - ring LL ``min(llMaxBw, B / 2)``; LL128 ``min(0.92 B, c x perChMaxRingLL128Bw)``;
          Simple ``B``; algorithm bandwidth ``bus x n / steps``;
        - tree ``min(0.92 B, c x perChMaxTreeBw)``, then LL ``min(bus / 3.8, llMaxBw)``, LL128
          ``min(bus x (7/9 on one node, else 120/128), c x perChMaxTreeLL128Bw)``; algorithm
          bandwidth ``bus / 2``.

        Latency: ``baseLat`` plus, for the ring, ``(steps - inter) x intra + inter x net`` with
        the intra-server step floored at the network post overhead once servers are spanned
        (``getNetOverhead``, x3 for Simple) and the tree network step where each server holds
        one GPU; for the tree ``2 ((n / nodes - 1) intra + floor(log2 nodes) net)``; broadcast
        and reduce rings ``steps x`` the step of their transport (the tree's for Simple).
        """
        tuner = self.tuner
        n, nodes = info.n, info.nodes
        if op is CollectiveOp.ALLREDUCE:
            nsteps, ninter = 2 * (n - 1), 2 * (nodes - 1)
        elif op in (CollectiveOp.REDUCESCATTER, CollectiveOp.ALLGATHER):
            nsteps, ninter = n - 1, nodes - 1
        else:
            nsteps, ninter = n, nodes
        if nodes == 1:
            ninter = 0
        ppn = n / nodes
        ai, ni = arch_index(info.gpu_arch), nodes_index(nodes)
        # LL cap: the GPU's row on one node, the host CPU vendor's across nodes
        li = ai if nodes == 1 else (1 if self.cpu_vendor == "amd" else 0)
        ll_max = tuner.ll_max_Bps[min(li, len(tuner.ll_max_Bps) - 1)][ni]
        nch = max(1, len(info.channels))
        reduce_bw = self.gpu_reduce_Bps(info)
        reduces = op in (CollectiveOp.ALLREDUCE, CollectiveOp.REDUCESCATTER, CollectiveOp.REDUCE)
        step = tuner.step_latency_s
        out = []
        for proto in self.protocols(info):
            for algo in (Algorithm.RING, Algorithm.TREE):
                if algo is Algorithm.TREE and op is not CollectiveOp.ALLREDUCE:
                    continue
                a = algo.value
                if algo is Algorithm.RING:
                    bus = info.ring_bw_Bps
                elif nodes <= 2 and math.isfinite(info.intra_bw_Bps):
                    bus = info.intra_bw_Bps  # one server's tree part (NCCL's bwIntra)
                else:  # more servers, or one GPU per server (no part inside a server)
                    bus = min(info.intra_bw_Bps, info.inter_bw_Bps)
                if reduces:
                    bus = min(bus, reduce_bw)
                if algo is Algorithm.RING:
                    if proto is Protocol.LL:
                        bus = min(ll_max, bus * 0.5)
                    elif proto is Protocol.LL128:
                        cap = nch * tuner.ring_ll128_max_per_channel_Bps[ai][ni]
                        bus = min(bus * P.NCCL_LL128_FACTOR, cap)
                    algbw = bus * n / nsteps
                else:
                    bus = min(
                        bus * tuner.tree_bw_factor, nch * tuner.tree_max_per_channel_Bps[ai][ni]
                    )
                    if proto is Protocol.LL:
                        bus = min(bus * P.NCCL_TREE_LL_FACTOR, ll_max)
                    elif proto is Protocol.LL128:
                        factor = P.NCCL_TREE_LL128_FACTOR_INTRA if nodes == 1 else 120.0 / 128.0
                        bus = min(bus * factor, nch * tuner.tree_ll128_max_per_channel_Bps[ai][ni])
                    algbw = bus * 0.5  # the size's correction: _nccl_candidates
                intra_lat = step[(info.intra_class, a, proto)] + info.alpha_intra_s
                net_algo = "tree" if ppn == 1 else a  # one GPU per server: latency exposed
                inter_lat = step[(HwClass.NET, net_algo, proto)] + info.alpha_inter_s
                lat = tuner.base_latency_s[(a, proto)]
                plateau = False
                if algo is Algorithm.RING:
                    if op in (CollectiveOp.BROADCAST, CollectiveOp.REDUCE):
                        hop = step[
                            (
                                HwClass.NET if nodes > 1 else info.intra_class,
                                "tree" if proto is Protocol.SIMPLE else "ring",
                                proto,
                            )
                        ]
                        lat += (
                            nsteps * hop
                            + (nsteps - ninter) * info.alpha_intra_s
                            + ninter * info.alpha_inter_s
                        )
                    else:
                        if nodes > 1:
                            intra_lat = max(intra_lat, tuner.overhead_s(self.cpu_vendor, proto))
                        lat += (nsteps - ninter) * intra_lat + ninter * inter_lat
                    plateau = (
                        proto is Protocol.SIMPLE and nodes > 1 and op is CollectiveOp.ALLREDUCE
                    )
                else:
                    lat += 2 * ((ppn - 1) * intra_lat + (nodes.bit_length() - 1) * inter_lat)
                out.append((algo, proto, lat, algbw, bus, plateau))
        return out

    def _in_switch_candidates(
        self, m: float, info: GroupInfo
    ) -> list[tuple[float, Algorithm, Protocol, float, float]]:
        """All-reduce with the switches reducing: NVLS in one server, CollNet (IB SHARP) across.

        NVLS (Simple protocol only; NCCL >= 2.17): NCCL 2.28+'s model of its NVLS graph
        (:mod:`perfmodel.comm.nvls`): bus bandwidth ``2 k s x eff x (k - 1)/k`` with ``k``
        heads of ``s`` bytes/s each (the NVLS graph NCCL searches on the GPUs' NVSwitch links)
        and ``eff`` NCCL's ``nvlsEfficiency``, algorithm bandwidth ``bus x n / (2 (n - 1))``
        (the tuner's ring-like ratio), latency 25 us (``hwLat[NVLINK][NVLS][Simple]``). The
        bus bandwidth stays flat with the domain's size: 476 GB/s on 8 H100 (~480 quoted by
        NCCL's author, NVIDIA/nccl-tests#212), 829 on 8 B200, 918 on a GB200 NVL72 rack
        (834.6 published, coreweave/nccl-tests#43).

        CollNet (NCCL 2.20.3 CollNet Direct, one GPU per NIC): bus bandwidth ``min(intra, inter)``
        per server, x 0.85 on Hopper+, algorithm bandwidth half of it; latency
        ``2 (3.7 us + (ppn - 1) 0.4 us) + 31 us``.
        """
        out: list[tuple[float, Algorithm, Protocol, float, float]] = []
        n = info.n
        if info.nodes == 1 and released(self.release, NVLS_FROM) and nvls_servers(self, info):
            k, s = nvls_graph(info.gpu_arch, n, info.nvlinks)
            bus = nvls_bus_Bps(P.NVLS_EFFICIENCY[info.gpu_arch], k, s, allreduce=True)
            if bus > 0:
                algbw = bus * n / (2 * (n - 1))
                lat = P.NCCL227_NVLS_LATENCY_S
                out.append((lat + m / algbw, Algorithm.NVLS, Protocol.SIMPLE, lat, bus))
        fabric = self.topology.fabric
        if info.nodes > 1 and fabric is not None and fabric.sharp and info.gpus:
            ppn = info.local
            bus = min(info.intra_bw_Bps, info.inter_bw_Bps)
            if info.gpu_arch in P.NVLS_EFFICIENCY:  # compute capability >= 9.0
                bus *= P.NCCL_COLLNET_HOPPER_FACTOR
            algbw = bus * P.NCCL_COLLNET_ALGBW_RATIO
            lat = (
                2 * (min(1, ppn - 1) * P.NCCL_COLLNET_INTRA_LATENCY_S
                     + (ppn - 1) * P.NCCL_COLLNET_ARITY_LATENCY_S)
                + P.NCCL_COLLNET_NET_LATENCY_S
            )  # fmt: skip
            if algbw > 0 and math.isfinite(algbw):
                out.append((lat + m / algbw, Algorithm.COLLNET, Protocol.SIMPLE, lat, bus))
        return out

    def _step_alpha(self, info: GroupInfo, cross_server: bool) -> float:
        """Per-step latency of non-NCCL algorithms: NCCL's Simple ring step for the transport
        class (software + hardware) plus what it does not contain (socket stacks)."""
        if cross_server:
            return (
                P.NCCL_STEP_LATENCY_S[(HwClass.NET, "ring", Protocol.SIMPLE)] + info.alpha_inter_s
            )
        return (
            P.NCCL_STEP_LATENCY_S[(info.intra_class, "ring", Protocol.SIMPLE)] + info.alpha_intra_s
        )

    def transfers_time(self, pairs: Sequence[tuple[str, str]], nbytes_each: float) -> float:
        """Completion time (s) of concurrent point-to-point sends of ``nbytes_each`` bytes.

        What pipeline-parallel sends and other explicit transfers cost: every GPU leaves its
        server through its own NIC (:meth:`DirectedLinks.p2p_route`, as NCCL binds each GPU to
        a near NIC) and pairs without peer-to-peer go through host memory; rates are max-min
        fair, each send pays NCCL's per-step latency (:meth:`_flows_time`). 8 tensor-parallel
        ranks of a DGX A100 sending 6.29 MB each to the next server share 8 NICs, not the 4
        that the plain shortest routes pick.
        """
        todo = [(s, d, float(nbytes_each)) for s, d in pairs if s != d]
        if not todo or nbytes_each <= 0:
            return 0.0
        return self._flows_time(todo)[0]

    def _flows_time(
        self, transfers: Sequence[tuple[str, str, float]]
    ) -> tuple[float, float, float]:
        """Concurrent point-to-point transfers: (time of the slowest, its alpha, its rate).

        Rates are max-min fair on the default routes; each transfer takes
        ``alpha + bytes / rate`` with ``alpha`` NCCL's per-step Simple cost for the route's
        transport plus what that cost does not contain (:meth:`DirectedLinks.extra_latency`).
        """
        terms = self._flow_terms(tuple((s, d) for s, d, _ in transfers))
        worst = (0.0, 0.0, math.inf)
        for (_, _, nbytes), (alpha, rate) in zip(transfers, terms):
            t = alpha + nbytes / rate
            if t > worst[0]:
                worst = (t, alpha, rate)
        return worst

    def _p2p_route(self, src: str, dst: str) -> tuple[str, ...]:
        """:meth:`DirectedLinks.p2p_route` between two servers, read off the same local ids in
        the first servers of their classes (:func:`~perfmodel.topology.symmetry.server_symmetry`)
        and mapped back, as :meth:`_shape_group` does for groups: the route and the NICs each
        GPU uses are searched inside the two servers and the fabric, whose name order the
        exchange keeps, so the mapped route is the route (issue 14: a pipeline's sends route
        every server pair once per shape, not once per pair)."""
        links = self.links
        if links.server[src] == links.server[dst]:
            return links.p2p_route(src, dst)
        path = server_symmetry(self.topology).pair_route(src, dst, links.p2p_route)
        return links.p2p_route(src, dst) if path is None else path

    def _canonical_pairs(
        self, pairs: tuple[tuple[str, str], ...]
    ) -> tuple[tuple[str, str], ...] | None:
        """``pairs`` mapped into the first servers of their servers' classes, or ``None``
        where a pair stays in one server or an endpoint is in no class
        (:meth:`~perfmodel.topology.symmetry.ServerSymmetry.server_map` of all the pairs'
        servers at once: the ``k``-th of them in a class, in name order, onto the class's
        ``k``-th server, nodes by local id).

        The :meth:`_flow_terms` of the image are those of ``pairs`` (issue 14: the
        TP-rank sends between every two pipeline stages, in every plan, are one route and
        rate computation per shape): each pair's route is :meth:`_p2p_route`, read off the
        same local ids in the first two servers of the class by
        :meth:`~perfmodel.topology.symmetry.ServerSymmetry.pair_route` for the pair and its
        image alike (the map keeps the classes and which server of a pair sorts first), so
        the image's routes are the routes with the names mapped. The map is a graph
        automorphism keeping every link's capacity, latency and class, so the per-route alpha
        (transport class, latency sum in path order) is the same number, bit for bit, and so
        are the max-min fair rates on the mapped links (the same capacities and the same flows
        on each): a link's load is summed in channel order, which the map keeps, and each fill
        level is a minimum, so the rates are bit-equal (tested on every system of
        ``tests/comm/test_shape_memo.py``; the GPT-3 175B plans of ``benchmarks/bench_scale.py``
        predict bit-equal). The one exception is max-min's numerical-safety fallback
        (:func:`~perfmodel.comm.maxmin.maxmin_rates`: no resource saturated within its
        tolerance in a step), which freezes the flows of the lowest-numbered link of
        smallest share: link ids are not kept by the map, so there the image could freeze
        other flows; never reached in the tests or the benchmark's plans. Pairs inside one server
        have no such map: they are read off the server's inside twin (:meth:`_twin_pairs`).
        """
        links = self.links
        server = links.server
        servers: set[int] = set()
        for s, d in pairs:
            a, b = server[s], server[d]
            if a == b:
                return None
            servers.add(a)
            servers.add(b)
        sym = server_symmetry(self.topology)
        smap = sym.server_map(servers)
        if smap is None:
            return None
        if all(k == v for k, v in smap.items()):
            return pairs
        flat = sym.map_nodes((n for pair in pairs for n in pair), smap)
        return tuple(zip(flat[::2], flat[1::2], strict=True))

    def _twin_pairs(self, pairs: tuple[tuple[str, str], ...]) -> tuple[tuple[str, str], ...] | None:
        """Sends inside one server as the same local ids' sends in the server's inside twin
        (:meth:`~perfmodel.topology.symmetry.ServerSymmetry.twin_map`), where every twin
        route stays inside the twin (:meth:`DirectedLinks._stays_inside`); else ``None``.

        Then each send's route is the twin's route renamed (:meth:`DirectedLinks._twin_route`
        reads it off the twin on exactly that condition), over links of the same capacities,
        latencies and classes in the same order, so the :meth:`_flow_terms` are the twin's,
        bit for bit, as for :meth:`_canonical_pairs` (and with its one exception, max-min's
        numerical-safety fallback). Issue 14: the sends between two pipeline stages on one
        server (tensor-parallel degree below the server's GPUs) are one computation for every
        server, not one per server.
        """
        links = self.links
        srv = links.server
        s = srv[pairs[0][0]]
        if s < 0 or any(srv[a] != s or srv[b] != s or a == b for a, b in pairs):
            return None
        fwd = server_symmetry(self.topology).twin_map(s)
        if fwd is None:
            return None
        twin = tuple((fwd[a], fwd[b]) for a, b in pairs)
        for a, b in twin:
            try:
                path = links.route(a, b)
            except PerfModelError:  # no route in the twin: the sends' own search names them
                return None
            if not links._stays_inside(a, b, path):
                return None
        return twin

    def _flow_terms(self, pairs: tuple[tuple[str, str], ...]) -> tuple[tuple[float, float], ...]:
        """``(alpha s, max-min fair rate B/s)`` of each of concurrent sends ``pairs`` (cached:
        neither depends on the bytes sent, so every message size of a pipeline's sends, in
        every plan with the same pairs, reuses one route and rate computation), and shared
        by every set of pairs of the same shape (:meth:`_canonical_pairs`)."""
        hit = self._flow_cache.get(pairs)
        if hit is not None:
            return hit
        canon = self._canonical_pairs(pairs)
        if canon is None:
            canon = self._twin_pairs(pairs)
        if canon is not None and canon != pairs:  # one route and rate computation per shape
            hit = self._flow_cache[pairs] = self._flow_terms(canon)
            return hit
        paths = [self._p2p_route(s, d) for s, d in pairs]
        rates = flow_rates(self.links, paths)
        step = P.NCCL_STEP_LATENCY_S
        hit = self._flow_cache[pairs] = tuple(
            (
                step[(self.links.hw_class(path), "ring", Protocol.SIMPLE)]
                + self.links.extra_latency(path),
                float(rate),
            )
            for path, rate in zip(paths, rates)
        )
        return hit

    def _other(
        self, op: CollectiveOp, m: float, info: GroupInfo, algo: Algorithm
    ) -> tuple[float, float, float]:
        """(time, alpha, bandwidth) of the non-NCCL algorithms."""
        ranks = info.gpus if info.gpus else info.members
        n = len(ranks)
        if algo is Algorithm.P2P:
            t, alpha, rate = self._flows_time(p2p_transfers(info.members, m))
            return t, alpha, rate
        if algo is Algorithm.DIRECT:
            # all-to-all: m/n to every peer; all-gather: own m/n shard to every peer;
            # reduce-scatter: every peer's m/n contribution to each shard owner
            share = m / n
            pairs = [(a, b, share) for a in ranks for b in ranks if a != b]
            pairs = _representative_pairs(self.topology, ranks, pairs)
            t, alpha, rate = self._flows_time(pairs)
            t += P.NCCL_DIRECT_BASE_LATENCY_S
            alpha += P.NCCL_DIRECT_BASE_LATENCY_S
            extra = 0.0
            if op is CollectiveOp.REDUCESCATTER:
                extra = (n - 1) / n * m / self.gpu_reduce_Bps(info)
            return t + extra, alpha, rate * (n - 1)
        if algo is Algorithm.HALVING_DOUBLING:
            return self._halving_doubling(op, m, info, ranks)
        if algo is Algorithm.HIERARCHICAL:
            if info.nodes == 1:
                raise ConfigError(
                    "hierarchical all-reduce needs a group spanning several servers",
                    value=info.nodes,
                    where="algorithm",
                )
            local = info.local
            a_in = self._step_alpha(info, False)
            a_out = self._step_alpha(info, True)
            t = (
                cf.hierarchical_allreduce_time(
                    local,
                    info.nodes,
                    m,
                    a_in,
                    info.intra_bw_Bps if local > 1 else math.inf,
                    a_out,
                    info.inter_bw_Bps / local,
                    self.gpu_reduce_Bps(info),
                )
                if local > 1
                else cf.ring_allreduce_time(
                    info.nodes, m, a_out, info.inter_bw_Bps, self.gpu_reduce_Bps(info)
                )
            )
            return t, a_out, info.inter_bw_Bps
        if algo is Algorithm.TORUS2D:
            return self._torus2d(m, info, ranks)
        if algo is Algorithm.PS:
            return self._parameter_server(m, info)
        if algo is Algorithm.HOST:
            return self._host_average(m, info)
        raise ConfigError(
            f"algorithm {algo.value} not implemented for {op.value}", value=algo, where="algorithm"
        )  # pragma: no cover

    def _halving_doubling(
        self, op: CollectiveOp, m: float, info: GroupInfo, ranks: Sequence[str]
    ) -> tuple[float, float, float]:
        n = len(ranks)
        p = 1 << (n.bit_length() - 1)
        core = list(ranks[:p])
        t = 0.0
        worst_rate = math.inf
        alpha_max = 0.0
        stages = p.bit_length() - 1
        for k in range(stages):
            dist = p >> (k + 1)
            nbytes = m / (2 ** (k + 1))
            pairs = [(core[i], core[i ^ dist], nbytes) for i in range(p)]
            st, alpha, rate = self._flows_time(pairs)
            worst_rate = min(worst_rate, rate)
            alpha_max = max(alpha_max, alpha)
            phases = 2 if op is CollectiveOp.ALLREDUCE else 1
            t += phases * st
        reduce_bw = self.gpu_reduce_Bps(info)
        if op in (CollectiveOp.ALLREDUCE, CollectiveOp.REDUCESCATTER):
            t += (p - 1) / p * m / reduce_bw
        if p != n:  # fold the extra ranks in and out
            extra = [(ranks[p + i], core[i], m) for i in range(n - p)]
            st, _, _ = self._flows_time(extra)
            t += 2 * st + m / reduce_bw
        return t, alpha_max, worst_rate

    def _torus2d(
        self, m: float, info: GroupInfo, ranks: Sequence[str]
    ) -> tuple[float, float, float]:
        n = len(ranks)
        if info.nodes > 1:
            cols = info.local
            if any(len(p) != cols for p in info.parts):
                raise ConfigError(
                    "torus2d needs the same number of GPUs on every server of the group",
                    value=[len(p) for p in info.parts],
                    where="group",
                )
            rows_g = [list(p) for p in info.parts]
        else:
            cols = _near_square_factor(n)
            rows_g = [list(ranks[i : i + cols]) for i in range(0, n, cols)]
        rows = len(rows_g)
        cols_g = [[r[j] for r in rows_g] for j in range(cols)]
        bw_row = self._concurrent_ring_bw(rows_g) if cols > 1 else math.inf
        bw_col = self._concurrent_ring_bw(cols_g) if rows > 1 else math.inf
        a_row = self._step_alpha(info, False)
        a_col = self._step_alpha(info, info.nodes > 1)
        t = cf.torus2d_allreduce_time(
            rows,
            cols,
            m,
            a_row,
            bw_row if cols > 1 else 1.0,
            a_col,
            bw_col if rows > 1 else 1.0,
            self.gpu_reduce_Bps(info),
        )
        return t, max(a_row, a_col), min(bw_row, bw_col)

    def _concurrent_ring_bw(self, groups: Sequence[Sequence[str]]) -> float:
        """Bandwidth of the slowest of several rings running at once (max-min over all channels)."""
        chans: list[Channel] = []
        owner: list[int] = []
        for i, grp in enumerate(groups):
            cs = build_channels(self.links, grp)
            chans.extend(cs)
            owner.extend([i] * len(cs))
        rates = channel_rates(self.links, chans)
        per = [0.0] * len(groups)
        for o, r in zip(owner, rates):
            per[o] += r
        return min(per)

    def _parameter_server(self, m: float, info: GroupInfo) -> tuple[float, float, float]:
        if info.cpus:
            servers = list(info.cpus)
            workers = list(info.gpus)
            reduce_bw = self.host_memory_Bps(servers[0])
        else:
            servers = [info.gpus[0]]
            workers = list(info.gpus[1:])
            reduce_bw = self.gpu_reduce_Bps(info)
        if not workers:
            raise ConfigError(
                "parameter server needs at least one worker GPU", value=info.members, where="group"
            )
        s = len(servers)
        push = [(w, srv, m / s) for w in workers for srv in servers if w != srv]
        pull = [(srv, w, m / s) for w in workers for srv in servers if w != srv]
        t_push, alpha, rate = self._flows_time(push)
        t_pull, _, rate2 = self._flows_time(pull)
        n_contrib = len(workers) + (0 if info.cpus else 1)
        t_sum = n_contrib * m / s / reduce_bw
        return t_push + t_sum + t_pull, alpha, min(rate, rate2)

    def _host_average(self, m: float, info: GroupInfo) -> tuple[float, float, float]:
        if info.cpus:
            host = info.cpus[0]
        else:
            host = _nearest_cpu(self.topology, info.gpus[0])
        gpus = list(info.gpus)
        t_gather, alpha, rate = self._flows_time([(g, host, m) for g in gpus])
        t_scatter, _, rate2 = self._flows_time([(host, g, m) for g in gpus])
        t_avg = (len(gpus) + 1) * m / self.host_memory_Bps(host)
        return t_gather + t_avg + t_scatter, alpha, min(rate, rate2)

    # ------------------------------------------------------------------ simulated
    def _simulated(
        self, op: CollectiveOp, m: float, members: tuple[str, ...], algo: Algorithm
    ) -> CommResult:
        from perfmodel.comm.flow import simulate_collective

        analytic = CommCostModel(self.topology, self.link_params, "analytic", links=self.links)
        analytic._groups = self._groups
        ref = analytic._analytic(op, m, members, algo)
        info = self.group_info(members)
        if ref.algorithm in CLOSED_FORM_ONLY:
            # in-switch reductions have no flow model: the switch, not the links, sets the pace
            return self._result(
                op, m, info, ref.time_s, ref.algorithm, ref.protocol, ref.latency_s,
                ref.bandwidth_Bps,
            )  # fmt: skip
        t = simulate_collective(self, op, m, members, ref.algorithm, ref.protocol, info)
        return self._result(
            op, m, info, t, ref.algorithm, ref.protocol, ref.latency_s, ref.bandwidth_Bps
        )


def _tuner_of(topology: Topology) -> tuple[NcclTuner, str, tuple[int, int] | None]:
    """The NCCL tuner table that prices collectives on ``topology``, the host CPU vendor its
    network post overhead reads (``"intel"``, ``"amd"`` or ``"other"``) and the release the
    scenario states (``None``: none stated).

    The table follows the NCCL release the scenario states (``meta["nccl_p2p_rule"]`` with
    ``stated``; :func:`perfmodel.topology.importers.with_nccl_p2p_rule`), else the GPUs'
    generation (:func:`perfmodel.comm.tuner.tuner_for`).
    """
    rule = topology.meta.get("nccl_p2p_rule")
    release = None
    host = ""
    if isinstance(rule, dict):
        host = str(rule.get("host") or "")
        if rule.get("stated"):
            major, _, minor = str(rule.get("release", "")).partition(".")
            if major.isdigit() and minor.isdigit():
                release = (int(major), int(minor))
    try:
        arch = topology.gpu_spec().architecture.lower() if topology.gpus else ""
    except PerfModelError:  # pragma: no cover - a topology without a GPU model
        arch = ""
    vendor = "amd" if host == "amd" else "intel" if host.startswith("intel") else "other"
    return tuner_for(release, arch), vendor, release


def shm_note(topology: Topology, group: Sequence[str]) -> str | None:
    """A one-line warning when GPUs of ``group`` in one server have no peer-to-peer, else ``None``.

    NCCL then stages their traffic through host memory (SHM transport), which halves the usable
    PCIe bandwidth where two GPUs share a switch uplink; see :meth:`DirectedLinks.shm_cpu`.
    """
    links = DirectedLinks(topology)
    if not links.uses_shm(group):
        return None
    no_p2p = [g for g in group if g in links.no_p2p]
    models = sorted(
        {topology.gpu_spec(g).name for g in no_p2p if not topology.gpu_spec(g).pcie_p2p}
    )
    if models:
        why = f"{', '.join(models)}: no PCIe peer-to-peer"
    elif no_p2p:
        why = "peer-to-peer disabled for this system (p2p = false / --p2p off)"
    else:
        why = "peer-to-peer refused between some GPU pairs (nvidia-smi topo -p2p r, NCCL P2P level)"
    return (
        f"note: GPUs communicate through host memory ({why}): NCCL's SHM transport stages every "
        "GPU-to-GPU transfer in CPU memory"
    )


def p2p_transfers(members: Sequence[str], m: float) -> list[tuple[str, str, float]]:
    """``sendrecv`` transfers: ``(src, dst)`` is one send of ``m`` bytes (a pipeline send); a
    group of ``n > 2`` is nccl-tests' ``sendrecv_perf`` pattern, every rank sending ``m`` bytes to
    the next one at once (a ring shift)."""
    if len(members) == 2:
        return [(members[0], members[1], m)]
    n = len(members)
    return [(members[i], members[(i + 1) % n], m) for i in range(n)]


def _near_square_factor(n: int) -> int:
    """Largest divisor of ``n`` not above sqrt(n) ... as the row length (>= 1)."""
    best = 1
    for c in range(1, math.isqrt(n) + 1):
        if n % c == 0:
            best = c
    return n // best


def _nearest_cpu(topology: Topology, gpu: str) -> str:
    cpus = topology.nodes_of_kind(NodeKind.CPU)
    same = [c for c in cpus if topology.server_of(c) == topology.server_of(gpu)]
    if not same:
        raise ConfigError(
            f"no CPU in the server of {gpu}; give a CPU node in the group for host averaging",
            value=gpu,
            where="group",
        )
    return min(same, key=lambda c: (len(route(topology, gpu, c)), c))


def _representative_pairs(
    topology: Topology,
    ranks: Sequence[str],
    pairs: list[tuple[str, str, float]],
    limit: int = 20000,
) -> list[tuple[str, str, float]]:
    """All pairs up to ``limit`` flows; beyond, only the flows touching the first server's ranks
    (symmetric systems: every server sees the same load; documented approximation)."""
    if len(pairs) <= limit:
        return pairs
    first = topology.server_of(ranks[0])
    return [
        p for p in pairs if topology.server_of(p[0]) == first or topology.server_of(p[1]) == first
    ]
