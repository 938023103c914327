"""NCCL's choice of algorithm and protocol: every (algorithm, protocol) pair NCCL's tuner would
consider for a collective on a group, with its latency and bandwidth, and the chain time NCCL's
tuner leaves out.

How ``auto`` chooses (an approximation of NCCL's tuner, ``src/graph/tuning.cc``): for every
enabled (algorithm, protocol) pair among ring/tree x LL/LL128/Simple, the time is
``latency + bytes / algbw`` with the latency table and protocol bandwidth factors of the
release's tuner (:mod:`perfmodel.comm.tuner`: NCCL 2.8's or 2.29's) applied to the
topology-derived bus bandwidth, plus the in-switch reductions (NVLS, CollNet) and the 2.27+
algorithms (:mod:`perfmodel.comm.nccl_recent`); the fastest candidate wins
(:meth:`~perfmodel.comm.analytic.AnalyticCommModel._analytic_info`).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import perfmodel.comm.closed_form as cf
import perfmodel.comm.params as P
from perfmodel._memo import BoundedMemo
from perfmodel.comm.group import PATTERN_MEMO_SIZE, GroupInfo, gpu_reduce_Bps
from perfmodel.comm.nccl_env import NcclEnv, nccl_env_of
from perfmodel.comm.nccl_graph import NCCL_MAXCHANNELS, inter_graph_channels
from perfmodel.comm.nccl_recent import Term, nvls_servers, priced_terms, recent_terms
from perfmodel.comm.nvls import nvls_bus_Bps, nvls_graph
from perfmodel.comm.p2p_read import ring_copy_s
from perfmodel.comm.params import (
    ALGO_RING,
    ALGO_TREE,
    HW_NET,
    PROTO_LL,
    PROTO_LL128,
    PROTO_SIMPLE,
    Algorithm,
    HwClass,
    LinkParams,
    Protocol,
)
from perfmodel.comm.tuner import (
    NVLS_FROM,
    NcclTuner,
    arch_index,
    ll128_enabled,
    nodes_index,
    pricing_tuner,
    released,
    tuner_for,
)
from perfmodel.errors import ConfigError, PerfModelError
from perfmodel.ops import (
    ALLGATHER,
    ALLREDUCE,
    ALLTOALL,
    BROADCAST,
    REDUCE,
    REDUCESCATTER,
    SENDRECV,
    CollectiveOp,
)
from perfmodel.topology import Topology

if TYPE_CHECKING:
    from perfmodel.comm.links import DirectedLinks


class NcclChoice:
    """The candidates NCCL's tuner weighs for a collective on a group, by the tuner table of the
    scenario's NCCL release (:func:`tuner_of`); the size-free part of each group's table is kept
    per (op, group analysis).

    Attributes
    ----------
    tuner, cpu_vendor, release
        What :func:`tuner_of` reads off the topology.
    env
        The job's NCCL environment (:class:`~perfmodel.comm.nccl_env.NcclEnv`, recorded on the
        topology by :func:`~perfmodel.comm.nccl_env.with_nccl_env`): the algorithms and
        protocols it switches off are not candidates.
    """

    #: Whether :meth:`candidates` keeps per table entry that a group has no in-switch or
    #: recent candidates (:meth:`_other_candidates`) and asks no more (tests compare both ways).
    NONE_KEPT = True

    #: Whether :meth:`candidates` keeps per table entry the size-free terms of the in-switch
    #: and recent candidates (:meth:`_other_terms`) and prices them per size
    #: (:func:`~perfmodel.comm.nccl_recent.priced_terms`) instead of reading the group and
    #: the release again for each size (tests compare both ways: that proves the cache, both
    #: ways build the same terms; hand-computed cases check each kind's term).
    TERMS_KEPT = True

    def __init__(self, topology: Topology, links: DirectedLinks, link_params: LinkParams) -> None:
        self.topology = topology
        self.links = links
        self.link_params = link_params
        self.tuner, self.cpu_vendor, self.release = tuner_of(topology)
        #: the table that prices the choice :attr:`tuner` makes (:func:`pricing_tuner`)
        self.price_tuner: NcclTuner = pricing_tuner(self.tuner)
        self.env: NcclEnv = nccl_env_of(topology)
        #: (op, id of a GroupInfo, tuner release) -> [that GroupInfo, :meth:`table`, the ring
        #: plateau's (size from, factor), whether :meth:`_other_candidates` are none at any
        #: size (``None``: not asked yet), their size-free :meth:`_other_terms` (``None``: not
        #: read yet)]
        self._tables: BoundedMemo[tuple[CollectiveOp, int, str], list[Any]] = BoundedMemo(
            PATTERN_MEMO_SIZE
        )

    def protocols(self, info: GroupInfo, op: CollectiveOp | None = None) -> tuple[Protocol, ...]:
        """Protocols NCCL would enable for this group: LL and Simple always, LL128 by the rule
        of the release (:func:`perfmodel.comm.tuner.ll128_enabled`: the GPU generation, NVLink
        inside the servers and, across servers, the GPU-to-NIC path), or for ``op`` where the
        job's ``NCCL_PROTO`` turns LL128 on explicitly (NCCL skips its rule then;
        :attr:`~perfmodel.comm.nccl_env.NcclEnv.ll128_stated`). What ``NCCL_PROTO`` switches
        off is dropped in :meth:`candidates`."""
        ll128 = info.gpu_arch in P.LL128_ARCHITECTURES and (
            (op is not None and op in self.env.ll128_stated)
            or ll128_enabled(
                self.release,
                info.gpu_arch,
                intra_nvlink=info.intra_class is HwClass.NVLINK,
                net_path=info.net_path if info.nodes > 1 else None,
            )
        )
        return (PROTO_LL, PROTO_LL128, PROTO_SIMPLE) if ll128 else (PROTO_LL, PROTO_SIMPLE)

    def _choices(self, op: CollectiveOp, info: GroupInfo) -> Iterator[tuple[Protocol, Algorithm]]:
        """The (protocol, algorithm) pairs of NCCL's ring/tree table: the ring and, for an
        all-reduce, the tree, for every enabled protocol (:meth:`protocols`)."""
        for proto in self.protocols(info, op):
            for algo in (ALGO_RING, ALGO_TREE):
                if algo is ALGO_TREE and op is not ALLREDUCE:
                    continue
                yield proto, algo

    def best(
        self, op: CollectiveOp, m: float, info: GroupInfo, forced: Algorithm | None = None
    ) -> tuple[float, Algorithm, Protocol, float, float] | None:
        """The candidate NCCL runs (``None``: none, e.g. an all-to-all): the fastest of
        :meth:`candidates` (of ``forced`` alone, when given) by :attr:`tuner`'s times, priced
        by :attr:`price_tuner` (the same candidate of that table; itself where the two are
        one table, :func:`~perfmodel.comm.tuner.pricing_tuner`)."""
        cands = self.candidates(op, m, info, forced)
        if forced is not None:
            cands = [c for c in cands if c[1] is forced]
        if not cands:
            return None
        i = _fastest(cands)
        if self.price_tuner is self.tuner:
            return cands[i]
        priced = self.candidates(op, m, info, forced, tuner=self.price_tuner)
        if forced is not None:
            priced = [c for c in priced if c[1] is forced]
        assert [c[1:3] for c in priced] == [c[1:3] for c in cands]  # one list, other numbers
        return priced[i]

    def candidates(
        self,
        op: CollectiveOp,
        m: float,
        info: GroupInfo,
        forced: Algorithm | None = None,
        tuner: NcclTuner | None = None,
    ) -> list[tuple[float, Algorithm, Protocol, float, float]]:
        """(time, algorithm, protocol, latency, busbw) of every choice NCCL's tuner weighs
        that the job's environment (:attr:`env`) leaves on: ``NCCL_ALGO`` / ``NCCL_PROTO`` /
        ``NCCL_NVLS_ENABLE`` / ``NCCL_COLLNET_ENABLE`` drop theirs, as NCCL's
        ``algoEnable`` / ``protoEnable`` do before its tuner compares times. ``forced``: the
        algorithm a caller forces (``--algorithm``), kept whatever ``NCCL_ALGO`` says; the
        protocols the environment switches off stay off. ``tuner``: the table (default
        :attr:`tuner`, NCCL's own for the choice).

        Raises
        ------
        ConfigError
            The environment leaves no algorithm and protocol for ``op`` on this group (NCCL
            fails the call: "no algorithm/protocol available").

        The size-free part of each choice is :meth:`table`'s, kept per (op, group
        analysis); here only what reads ``m`` is applied, in the same order of operations as
        one pass would (the ring plateau factor on the latency, the tree correction on the
        algorithm bandwidth), so every candidate is the same float, bit for bit. Kept with it:
        the ring plateau's size and factor (functions of the tuner and the group), and whether
        the in-switch and recent candidates (:meth:`_other_candidates`) are none, which no
        size decides (every condition they test reads the group, the op, the release and the
        fabric, never ``m``), so a group without them is not asked again for each new size
        (issue 27: a new plan prices 20-40 new sizes); where they are some, their size-free
        terms (:meth:`_other_terms`: which candidates, each one's latency and bandwidths) are
        kept likewise and priced per size (:func:`~perfmodel.comm.nccl_recent.priced_terms`:
        ``latency + m / algbw``, and the NVLS tree's size correction below 1 GiB, the one
        size threshold they have, applied as in one pass), so a data-parallel all-gather or
        reduce-scatter over one GPU per server with PAT (NCCL >= 2.23) reads the group and
        the release once (issue 27, wave 15b)."""
        if op in (ALLTOALL, SENDRECV):
            return []
        tuner = tuner or self.tuner
        # the entry holds ``info``, so no other object has its id while the entry is kept
        key = (op, id(info), tuner.release)
        entry = self._tables.entries.get(key)
        if entry is None:
            entry = self._entry(op, info, tuner)
            self._tables.put(key, entry)
        assert entry[0] is info
        out = []
        plateau_from, plateau_factor = entry[2]
        ring = ALGO_RING
        log_size = -1  # the tree correction's size bucket, found at the first tree choice
        for algo, proto, lat, algbw, bus, plateau in entry[1]:
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
        if entry[3] is not True or not self.NONE_KEPT:  # unless known to be none at any size
            if self.TERMS_KEPT:  # the group's size-free terms, priced at this size
                if entry[4] is None:
                    entry[4] = self._other_terms(op, info)
                others = priced_terms(entry[4], m, self.tuner)
            else:
                others = self._other_candidates(op, m, info)
            entry[3] = not others if entry[3] is None else entry[3]
            out.extend(others)
        env = self.env
        if env.default or not out:
            return out
        if forced is not None:  # the caller's algorithm: the protocols alone are filtered
            return [c for c in out if (op, c[2]) not in env.disabled_protocols]
        kept = [c for c in out if env.allows(op, c[1], c[2])]
        if not kept:
            raise ConfigError(
                f"{env.where}: {env.text()} leaves NCCL no algorithm and protocol for "
                f"{op.value} on this group (it weighs "
                f"{', '.join(sorted({f'{c[1].value}/{c[2].value}' for c in out}))})",
                value=env.text(),
                where=env.where,
            )
        return kept

    def _entry(self, op: CollectiveOp, info: GroupInfo, tuner: NcclTuner) -> list[Any]:
        """A new :attr:`_tables` entry of ``op`` over ``info`` priced by ``tuner``: the
        group, :meth:`table`, the ring plateau's ``(size from which it applies, factor)`` and
        ``None`` (whether :meth:`_other_candidates` are none: not asked yet) and ``None``
        (their size-free :meth:`_other_terms`: not read yet)."""
        if tuner.per_channel_caps:  # nBytes / (nChannels x nRanks) >= 64 (2.18+)
            plateau_from = tuner.plateau_bytes_per_rank_channel * info.n * len(info.channels)
        else:
            plateau_from = info.n * tuner.plateau_bytes_per_rank_channel
        return [
            info,
            self.table(op, info, tuner),
            (plateau_from, tuner.plateau(info.gpu_arch)),
            None,
            None,
        ]

    def _other_candidates(
        self, op: CollectiveOp, m: float, info: GroupInfo
    ) -> list[tuple[float, Algorithm, Protocol, float, float]]:
        """The candidates beyond NCCL's ring/tree table, in the order :meth:`candidates` adds
        them: the in-switch all-reduces (:meth:`in_switch_terms`), then NVLS, NVLS tree and
        PAT (:func:`~perfmodel.comm.nccl_recent.recent_terms`): :meth:`_other_terms`
        priced at ``m`` bytes."""
        return priced_terms(self._other_terms(op, info), m, self.tuner)

    def _other_terms(self, op: CollectiveOp, info: GroupInfo) -> list[Term]:
        """:meth:`_other_candidates` without the size (:meth:`in_switch_terms`, then
        :func:`~perfmodel.comm.nccl_recent.recent_terms`)."""
        out = self.in_switch_terms(info) if op is ALLREDUCE else []
        out.extend(recent_terms(self, op, info))
        return out

    def table(
        self, op: CollectiveOp, info: GroupInfo, tuner: NcclTuner | None = None
    ) -> list[tuple[Algorithm, Protocol, float, float, float, bool]]:
        """Per NCCL ring/tree choice of ``op`` on ``info``'s group, what does not read the
        message size: (algorithm, protocol, latency before the ring plateau factor, algorithm
        bandwidth before the tree correction, bus bandwidth, whether the plateau factor applies
        from :meth:`candidates`' size on), by the model's tuner table
        (:mod:`perfmodel.comm.tuner`; ``tuner``, default :attr:`tuner`): NCCL 2.8's
        (:meth:`_table_28`) or a 2.18+ release's (:meth:`_table_229`)."""
        tuner = tuner or self.tuner
        if tuner.per_channel_caps:
            return self._table_229(op, info, tuner)
        return self._table_28(op, info)

    def _table_28(
        self, op: CollectiveOp, info: GroupInfo
    ) -> list[tuple[Algorithm, Protocol, float, float, float, bool]]:
        """:meth:`table` with NCCL 2.7/2.8's constants (:mod:`perfmodel.comm.params`)."""
        n, nodes = info.n, info.nodes
        nsteps, ninter = _ring_steps(op, n, nodes)
        ppn = n / nodes
        sm80 = info.gpu_arch == "ampere"
        reduce_bw = gpu_reduce_Bps(info, self.link_params)
        reduces = op in (ALLREDUCE, REDUCESCATTER, REDUCE)
        out = []
        for proto, algo in self._choices(op, info):
            a = algo.value
            bus = (
                info.ring_bw_Bps if algo is ALGO_RING else min(info.intra_bw_Bps, info.inter_bw_Bps)
            )
            if reduces:
                bus = min(bus, reduce_bw)
            if sm80:
                bus = min(bus, P.NCCL_SM80_MAX_BUSBW_Bps)
            if algo is ALGO_RING:
                if proto is PROTO_LL:
                    multi = nodes > 1 or op in (ALLREDUCE, REDUCE)
                    bus *= P.NCCL_RING_LL_FACTOR_ALLREDUCE if multi else P.NCCL_RING_LL_FACTOR_OTHER
                elif proto is PROTO_LL128:
                    bus *= P.NCCL_LL128_FACTOR_ONE_PER_NODE if ppn < 2 else P.NCCL_LL128_FACTOR
                algbw = bus * n / nsteps
            else:
                cap = P.NCCL_TREE_MAX_BW_Bps[
                    ("multi" if nodes > 2 else "few", sm80 and proto is PROTO_LL128)
                ]
                bus = min(bus * P.NCCL_TREE_BW_FACTOR, cap)
                if proto is PROTO_LL:
                    bus *= P.NCCL_TREE_LL_FACTOR
                elif proto is PROTO_LL128:
                    bus *= (
                        P.NCCL_TREE_LL128_FACTOR_INTRA
                        if nodes == 1
                        else P.NCCL_TREE_LL128_FACTOR_INTER
                    )
                algbw = bus * 0.5  # the size's correction: candidates
            intra_lat = P.NCCL_STEP_LATENCY_S[(info.intra_class, a, proto)] + info.alpha_intra_s
            inter_lat = P.NCCL_STEP_LATENCY_S[(HW_NET, a, proto)] + info.alpha_inter_s
            if nodes > 1 and proto is PROTO_LL:
                intra_lat *= P.NCCL_LL_MULTINODE_INTRA_LATENCY_FACTOR
            lat = P.NCCL_BASE_LATENCY_S[(a, proto)]
            plateau = False
            if algo is ALGO_RING:
                if op in (BROADCAST, REDUCE):
                    lat += _chain_latency(P.NCCL_STEP_LATENCY_S, info, proto, nsteps, ninter)
                else:
                    lat += (nsteps - ninter) * intra_lat + ninter * inter_lat
                # the size's plateau factor: candidates
                plateau = proto is PROTO_SIMPLE and nodes > 1 and op is ALLREDUCE
            else:
                lat += 2 * ((ppn - 1) * intra_lat + math.log2(nodes) * inter_lat)
            out.append((algo, proto, lat, algbw, bus, plateau))
        return out

    def _table_229(
        self, op: CollectiveOp, info: GroupInfo, tuner: NcclTuner
    ) -> list[tuple[Algorithm, Protocol, float, float, float, bool]]:
        """:meth:`table` with NCCL 2.29's tuner (``ncclTopoTuneModel``, v2.29.7-1).

        Bus bandwidth per choice (``B``: the ring bandwidth on the topology; for the tree the
        server's inside bandwidth on up to two servers, else (or with one GPU per server) the
        smaller of it and the network's, as NCCL's ``nNodes <= 2 ? bwIntra : bwInter``: on two
        servers a tree moves each byte across the network once per direction, a ring
        ``2 (n - 1) / n`` times; ``c``: NCCL's searched graph channels,
        :func:`graph_channels` (across servers the count of NCCL's graph search,
        :func:`~perfmodel.comm.nccl_graph.inter_graph_channels`; inside one server the group's
        ring channels); caps by architecture and node count,
        :class:`~perfmodel.comm.tuner.NcclTuner`):

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
        n, nodes = info.n, info.nodes
        nsteps, ninter = _ring_steps(op, n, nodes)
        if nodes == 1:
            ninter = 0
        ppn = n / nodes
        ai, ni = arch_index(info.gpu_arch), nodes_index(nodes)
        # LL cap: the GPU's row on one node, the host CPU vendor's across nodes
        li = ai if nodes == 1 else (1 if self.cpu_vendor == "amd" else 0)
        ll_max = tuner.ll_max_Bps[min(li, len(tuner.ll_max_Bps) - 1)][ni]
        nch = graph_channels(info)
        reduce_bw = gpu_reduce_Bps(info, self.link_params)
        reduces = op in (ALLREDUCE, REDUCESCATTER, REDUCE)
        step = tuner.step_latency_s
        out = []
        for proto, algo in self._choices(op, info):
            a = algo.value
            if algo is ALGO_RING:
                bus = info.ring_bw_Bps
            elif nodes <= 2 and math.isfinite(info.intra_bw_Bps):
                bus = info.intra_bw_Bps  # one server's tree part (NCCL's bwIntra)
            else:  # more servers, or one GPU per server (no part inside a server)
                bus = min(info.intra_bw_Bps, info.inter_bw_Bps)
            if reduces:
                bus = min(bus, reduce_bw)
            if algo is ALGO_RING:
                if proto is PROTO_LL:
                    bus = min(ll_max, bus * 0.5)
                elif proto is PROTO_LL128:
                    cap = nch * tuner.ring_ll128_max_per_channel_Bps[ai][ni]
                    bus = min(bus * P.NCCL_LL128_FACTOR, cap)
                algbw = bus * n / nsteps
            else:
                bus = min(bus * tuner.tree_bw_factor, nch * tuner.tree_max_per_channel_Bps[ai][ni])
                if proto is PROTO_LL:
                    bus = min(bus * P.NCCL_TREE_LL_FACTOR, ll_max)
                elif proto is PROTO_LL128:
                    factor = P.NCCL_TREE_LL128_FACTOR_INTRA if nodes == 1 else 120.0 / 128.0
                    bus = min(bus * factor, nch * tuner.tree_ll128_max_per_channel_Bps[ai][ni])
                algbw = bus * 0.5  # the size's correction: candidates
            intra_lat = step[(info.intra_class, a, proto)] + info.alpha_intra_s
            net_algo = "tree" if ppn == 1 else a  # one GPU per server: latency exposed
            inter_lat = step[(HW_NET, net_algo, proto)] + info.alpha_inter_s
            lat = tuner.base_latency_s[(a, proto)]
            plateau = False
            if algo is ALGO_RING:
                if op in (BROADCAST, REDUCE):
                    lat += _chain_latency(step, info, proto, nsteps, ninter)
                else:
                    if nodes > 1:
                        intra_lat = max(intra_lat, tuner.overhead_s(self.cpu_vendor, proto))
                    lat += (nsteps - ninter) * intra_lat + ninter * inter_lat
                plateau = proto is PROTO_SIMPLE and nodes > 1 and op is ALLREDUCE
            else:
                lat += 2 * ((ppn - 1) * intra_lat + (nodes.bit_length() - 1) * inter_lat)
            out.append((algo, proto, lat, algbw, bus, plateau))
        return out

    def in_switch_terms(self, info: GroupInfo) -> list[Term]:
        """All-reduce with the switches reducing: NVLS in one server, CollNet (IB SHARP) across;
        without the size (:data:`~perfmodel.comm.nccl_recent.Term`: no condition, latency or
        bandwidth here reads it).

        NVLS (Simple protocol only; NCCL >= 2.17): NCCL 2.28+'s model of its NVLS graph
        (:mod:`perfmodel.comm.nvls`): bus bandwidth ``2 k s x eff x (k - 1)/k`` with ``k``
        heads of ``s`` bytes/s each (the NVLS graph NCCL searches on the GPUs' NVSwitch links)
        and ``eff`` NCCL's ``nvlsEfficiency``, algorithm bandwidth ``bus x n / (2 (n - 1))``
        (the tuner's ring-like ratio), latency 25 us (``hwLat[NVLINK][NVLS][Simple]``). The
        bus bandwidth stays flat with the domain's size: 476 GB/s on 8 H100 (~480 quoted by
        NCCL's author, NVIDIA/nccl-tests#212), 829 on 8 B200, 918 on a GB200 NVL72 rack (no
        published NVLS log: CoreWeave's 834.6 ran with NVLS off, ring).

        CollNet (NCCL 2.20.3 CollNet Direct, one GPU per NIC): bus bandwidth ``min(intra, inter)``
        per server, x 0.85 on Hopper+, algorithm bandwidth half of it; latency
        ``2 (3.7 us + (ppn - 1) 0.4 us) + 31 us``.
        """
        out: list[Term] = []
        n = info.n
        if info.nodes == 1 and released(self.release, NVLS_FROM) and nvls_servers(self.links, info):
            k, s = nvls_graph(info.gpu_arch, n, info.nvlinks)
            bus = nvls_bus_Bps(P.NVLS_EFFICIENCY[info.gpu_arch], k, s, allreduce=True)
            if bus > 0:
                algbw = bus * n / (2 * (n - 1))
                lat = P.NCCL227_NVLS_LATENCY_S
                out.append((Algorithm.NVLS, PROTO_SIMPLE, lat, algbw, bus, False))
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
                out.append((Algorithm.COLLNET, PROTO_SIMPLE, lat, algbw, bus, False))
        return out

    def chain_time(
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
        ``lat``): unchanged, except for a ring/Simple all-reduce, all-gather or reduce-scatter
        inside one server whose GPUs NCCL joins over NVLink (``info.p2p``), which adds each
        rank's local ring copy the tuner leaves out (read mode: A100; write mode without
        direct pointers)
        (:func:`perfmodel.comm.p2p_read.local_copy_s`), and a ring broadcast or reduce, a
        pipelined *chain* whose
        time the tuner does not model ("Add some chunk latency, waiting for proper chunk
        modeling", NVIDIA/nccl ``src/graph/tuning.cc`` of every release): NCCL chooses by its
        estimate, the chain takes its own time (:func:`perfmodel.comm.closed_form.chain_time`).

        The chain passes ``n - 1`` hops, ``nodes - 1`` of them across servers, each with its
        step latency (``hwLat`` of its transport), and forwards one protocol step at a time
        (:data:`perfmodel.comm.closed_form.STEP_WIRE_BYTES`; ``BROADCAST_CHUNKSTEPS`` =
        ``BROADCAST_SLICESTEPS`` = 1, ``src/include/collectives.h``; ``broadcast.h`` ``runRing``
        hands each primitive call one step): every network hop stores a whole step before its
        proxy posts it (``src/transport/net.cc`` ``sendProxyProgress`` waits for the GPU's
        ``tail``, which ``prims_ll128.h`` ``postSend`` and the Simple primitives advance once per
        step), and so does every hop inside a server with Simple, whose receiver waits for the
        step's tail; LL and LL128 readers poll each line's flag, so a server's receiving GPU
        forwards line by line. A step crosses a hop at one channel's share of the hop.

        The channels are the ones NCCL runs (NVIDIA/nccl v2.14.3-1 ``src/graph/connect.cc``
        line 299, v2.29.7-1 line 453: ``ncclTopoPostset`` doubles the searched graph's
        channels), not the model's own ring channels: across servers ``2 s`` channels for
        NCCL's ``s`` search channels (:func:`perfmodel.comm.nccl_graph.inter_graph_channels`),
        and channel ``c`` and its copy ``c + s`` leave through the same NIC (``src/graph/
        topo.cc`` ``ncclTopoGetNetDev``: ``channelId % graph->nChannels``): a NIC carries
        ``2 ceil(s / nics)`` channels, each at that share of the NIC's rate, the group's network
        bandwidth over the ``nics`` NICs its GPUs leave through, at most the port's line rate.
        Inside one server, or where NCCL's search cannot be read off, the group's ring channels
        share the group's bandwidths. 90 MB
        over 1,024 A100 (4 x 100 Gb RoCE: 4 search channels at 12 GB/s, 8 run, two per NIC;
        LL128): 127 network hops of 4 us + 614,400 B at 46/8 GB/s (107 us) and 896 NVLink hops of
        1.9 us fill the chain, 16 ms that the tuner's 4 ms latency leaves out.
        """
        if algo is ALGO_RING:
            # NCCL's P2P transport: each rank's local ring copy, serial with the link steps of
            # the channel's thread block (perfmodel.comm.p2p_read; 0 for broadcast, reduce)
            t += ring_copy_s(info, op, m, info.n, proto) or 0.0
        if algo is not ALGO_RING or op not in (BROADCAST, REDUCE):
            return t, lat
        nch = max(1, len(info.channels))
        inter_channel_Bps = info.inter_bw_Bps / nch
        searched = (
            inter_graph_channels(
                info.gpu_arch,
                nvlinks=info.nvlinks,
                net_port_Bps=info.net_port_Bps,
                nics=info.net_nics,
            )
            if info.nodes > 1
            else None
        )
        if searched is not None:
            nch = min(NCCL_MAXCHANNELS, 2 * searched)  # ncclTopoPostset's doubling, capped
            per_nic = 2 * math.ceil(searched / info.net_nics)
            nic_Bps = min(info.inter_bw_Bps / info.net_nics, info.net_port_Bps)
            inter_channel_Bps = nic_Bps / per_nic
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
            inter_step_s=step[(HW_NET, "ring", proto)] + info.alpha_inter_s,
            intra_channel_Bps=info.intra_bw_Bps / nch,
            inter_channel_Bps=inter_channel_Bps,
        )
        return chain_lat + m / bus, chain_lat


def tuner_of(topology: Topology) -> tuple[NcclTuner, str, tuple[int, int] | None]:
    """The NCCL tuner table that prices collectives on ``topology``, the host CPU vendor its
    network post overhead reads (``"intel"``, ``"amd"`` or ``"other"``) and the release the
    scenario states (``None``: none stated).

    The table follows the NCCL release the scenario states (``meta["nccl_p2p_rule"]`` with
    ``stated``; :func:`perfmodel.topology.nccl_p2p.with_nccl_p2p_rule`), else the GPUs'
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


def _fastest(cands: Sequence[tuple[float, Any, Any, float, float]]) -> int:
    """The index of the first candidate of the least time (``min`` over the indices by
    time, without a key call per candidate): a later one replaces it only where strictly
    faster, as ``min`` compares."""
    i, best = 0, cands[0][0]
    for k in range(1, len(cands)):
        t = cands[k][0]
        if t < best:
            i, best = k, t
    return i


def graph_channels(info: GroupInfo) -> int:
    """The channel count NCCL's tuner multiplies its per-channel caps by
    (``graphs[a]->nChannels``): across servers the search channels of NCCL's ring graph,
    which its tree graph shares (:func:`perfmodel.comm.nccl_graph.inter_graph_channels`,
    NVIDIA/nccl ``src/graph/search.cc`` and ``src/init.cc``), where NCCL's numbers give it;
    else the group's ring channels.

    A GB200 NVL72 rack with 72 NICs has 32 ring channels in the model (one per NIC, up to
    32) but 16 in NCCL's graph (45.1 GB/s each, its NVLinks' 721.8 GB/s): the tree's 2.29 cap
    across more than two racks is 16 x 24 = 384 GB/s of bus bandwidth, not 32 x 24.
    """
    own = max(1, len(info.channels))
    if info.nodes < 2:
        return own
    searched = inter_graph_channels(
        info.gpu_arch, nvlinks=info.nvlinks, net_port_Bps=info.net_port_Bps, nics=info.net_nics
    )
    return own if searched is None else searched


def _ring_steps(op: CollectiveOp, n: int, nodes: int) -> tuple[int, int]:
    """NCCL's ring steps of ``op`` over ``n`` ranks on ``nodes`` servers and how many of them
    cross servers: all-reduce ``2 (n - 1)``, reduce-scatter / all-gather ``n - 1``, broadcast /
    reduce ``n`` (``src/graph/tuning.cc``, ``nsteps`` and ``nInterSteps``)."""
    if op is ALLREDUCE:
        return 2 * (n - 1), 2 * (nodes - 1)
    if op in (REDUCESCATTER, ALLGATHER):
        return n - 1, nodes - 1
    return n, nodes


def _chain_latency(
    step: Mapping[tuple[HwClass, str, Protocol], float],
    info: GroupInfo,
    proto: Protocol,
    nsteps: int,
    ninter: int,
) -> float:
    """The per-step latency of a ring broadcast or reduce (a chain): ``nsteps`` steps of its
    transport's ``hwLat`` (the network's across servers; the tree's for Simple), plus the
    latencies outside NCCL's tables, ``ninter`` of the steps across servers."""
    hop = step[
        (
            HW_NET if info.nodes > 1 else info.intra_class,
            "tree" if proto is PROTO_SIMPLE else "ring",
            proto,
        )
    ]
    return nsteps * hop + (nsteps - ninter) * info.alpha_intra_s + ninter * info.alpha_inter_s
