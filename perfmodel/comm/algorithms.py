"""Collective algorithms beyond NCCL's ring and tree, priced on the topology: all-to-all and
direct all-gather / reduce-scatter, point-to-point rings, recursive halving-doubling,
hierarchical and 2D-torus all-reduce, a parameter server, host averaging.

Each is a pattern of concurrent point-to-point transfers (:mod:`perfmodel.comm.transfers`) or
rings running at once (:mod:`perfmodel.comm.channels`), with the closed forms of
:mod:`perfmodel.comm.closed_form`; every step pays NCCL's Simple ring step latency for its
transport (:meth:`OtherAlgorithms.step_alpha`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

import perfmodel.comm.closed_form as cf
import perfmodel.comm.params as P
from perfmodel.comm.channels import build_channels, channel_rates
from perfmodel.comm.group import GroupInfo, gpu_reduce_Bps
from perfmodel.comm.params import Algorithm, HwClass, LinkParams, Protocol
from perfmodel.comm.rings import Channel
from perfmodel.comm.transfers import Transfers, p2p_transfers, representative_pairs
from perfmodel.errors import ConfigError
from perfmodel.ops import CollectiveOp
from perfmodel.topology import Topology
from perfmodel.topology.routing import route
from perfmodel.topology.schema import NodeKind

if TYPE_CHECKING:
    from perfmodel.comm.links import DirectedLinks


class OtherAlgorithms:
    """The algorithms of this module on one topology (:meth:`time`)."""

    def __init__(
        self,
        topology: Topology,
        links: DirectedLinks,
        link_params: LinkParams,
        transfers: Transfers,
    ) -> None:
        self.topology = topology
        self.links = links
        self.link_params = link_params
        self.transfers = transfers

    def time(
        self, op: CollectiveOp, m: float, info: GroupInfo, algo: Algorithm
    ) -> tuple[float, float, float]:
        """(time, alpha, bandwidth) of the non-NCCL algorithms."""
        ranks = info.gpus if info.gpus else info.members
        n = len(ranks)
        if algo is Algorithm.P2P:
            t, alpha, rate = self.transfers.flows_time(p2p_transfers(info.members, m))
            return t, alpha, rate
        if algo is Algorithm.DIRECT:
            # all-to-all: m/n to every peer; all-gather: own m/n shard to every peer;
            # reduce-scatter: every peer's m/n contribution to each shard owner
            share = m / n
            pairs = [(a, b, share) for a in ranks for b in ranks if a != b]
            pairs = representative_pairs(self.topology, ranks, pairs)
            t, alpha, rate = self.transfers.flows_time(pairs)
            t += P.NCCL_DIRECT_BASE_LATENCY_S
            alpha += P.NCCL_DIRECT_BASE_LATENCY_S
            extra = 0.0
            if op is CollectiveOp.REDUCESCATTER:
                extra = (n - 1) / n * m / gpu_reduce_Bps(info, self.link_params)
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
            a_in = self.step_alpha(info, False)
            a_out = self.step_alpha(info, True)
            t = (
                cf.hierarchical_allreduce_time(
                    local,
                    info.nodes,
                    m,
                    a_in,
                    info.intra_bw_Bps if local > 1 else math.inf,
                    a_out,
                    info.inter_bw_Bps / local,
                    gpu_reduce_Bps(info, self.link_params),
                )
                if local > 1
                else cf.ring_allreduce_time(
                    info.nodes, m, a_out, info.inter_bw_Bps, gpu_reduce_Bps(info, self.link_params)
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

    def step_alpha(self, info: GroupInfo, cross_server: bool) -> float:
        """Per-step latency of non-NCCL algorithms: NCCL's Simple ring step for the transport
        class (software + hardware) plus what it does not contain (socket stacks)."""
        if cross_server:
            return (
                P.NCCL_STEP_LATENCY_S[(HwClass.NET, "ring", Protocol.SIMPLE)] + info.alpha_inter_s
            )
        return (
            P.NCCL_STEP_LATENCY_S[(info.intra_class, "ring", Protocol.SIMPLE)] + info.alpha_intra_s
        )

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
            st, alpha, rate = self.transfers.flows_time(pairs)
            worst_rate = min(worst_rate, rate)
            alpha_max = max(alpha_max, alpha)
            phases = 2 if op is CollectiveOp.ALLREDUCE else 1
            t += phases * st
        reduce_bw = gpu_reduce_Bps(info, self.link_params)
        if op in (CollectiveOp.ALLREDUCE, CollectiveOp.REDUCESCATTER):
            t += (p - 1) / p * m / reduce_bw
        if p != n:  # fold the extra ranks in and out
            extra = [(ranks[p + i], core[i], m) for i in range(n - p)]
            st, _, _ = self.transfers.flows_time(extra)
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
            cols = near_square_factor(n)
            rows_g = [list(ranks[i : i + cols]) for i in range(0, n, cols)]
        rows = len(rows_g)
        cols_g = [[r[j] for r in rows_g] for j in range(cols)]
        bw_row = self.concurrent_ring_bw(rows_g) if cols > 1 else math.inf
        bw_col = self.concurrent_ring_bw(cols_g) if rows > 1 else math.inf
        a_row = self.step_alpha(info, False)
        a_col = self.step_alpha(info, info.nodes > 1)
        t = cf.torus2d_allreduce_time(
            rows,
            cols,
            m,
            a_row,
            bw_row if cols > 1 else 1.0,
            a_col,
            bw_col if rows > 1 else 1.0,
            gpu_reduce_Bps(info, self.link_params),
        )
        return t, max(a_row, a_col), min(bw_row, bw_col)

    def concurrent_ring_bw(self, groups: Sequence[Sequence[str]]) -> float:
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
            reduce_bw = host_memory_Bps(self.topology, self.link_params, servers[0])
        else:
            servers = [info.gpus[0]]
            workers = list(info.gpus[1:])
            reduce_bw = gpu_reduce_Bps(info, self.link_params)
        if not workers:
            raise ConfigError(
                "parameter server needs at least one worker GPU", value=info.members, where="group"
            )
        s = len(servers)
        push = [(w, srv, m / s) for w in workers for srv in servers if w != srv]
        pull = [(srv, w, m / s) for w in workers for srv in servers if w != srv]
        t_push, alpha, rate = self.transfers.flows_time(push)
        t_pull, _, rate2 = self.transfers.flows_time(pull)
        n_contrib = len(workers) + (0 if info.cpus else 1)
        t_sum = n_contrib * m / s / reduce_bw
        return t_push + t_sum + t_pull, alpha, min(rate, rate2)

    def _host_average(self, m: float, info: GroupInfo) -> tuple[float, float, float]:
        if info.cpus:
            host = info.cpus[0]
        else:
            host = nearest_cpu(self.topology, info.gpus[0])
        gpus = list(info.gpus)
        t_gather, alpha, rate = self.transfers.flows_time([(g, host, m) for g in gpus])
        t_scatter, _, rate2 = self.transfers.flows_time([(host, g, m) for g in gpus])
        t_avg = (len(gpus) + 1) * m / host_memory_Bps(self.topology, self.link_params, host)
        return t_gather + t_avg + t_scatter, alpha, min(rate, rate2)


def host_memory_Bps(topology: Topology, link_params: LinkParams, cpu: str | None = None) -> float:
    """Host memory bandwidth for CPU-side averaging (override, catalogue CPU, or default)."""
    if link_params.host_reduce_bandwidth_Bps is not None:
        return link_params.host_reduce_bandwidth_Bps
    if cpu is not None:
        import perfmodel.hardware as hw

        get_cpu = getattr(hw, "get_cpu", None)
        model = topology.graph.nodes[cpu].get("model")
        if get_cpu is not None and model:
            try:
                spec = get_cpu(model)
            except ConfigError:
                spec = None
            bw = getattr(spec, "memory_bandwidth_Bps", None) if spec is not None else None
            if bw:
                return float(bw)
    return cf.DEFAULT_HOST_MEMORY_BANDWIDTH_Bps


def near_square_factor(n: int) -> int:
    """Largest divisor of ``n`` not above sqrt(n) ... as the row length (>= 1)."""
    best = 1
    for c in range(1, math.isqrt(n) + 1):
        if n % c == 0:
            best = c
    return n // best


def nearest_cpu(topology: Topology, gpu: str) -> str:
    cpus = topology.nodes_of_kind(NodeKind.CPU)
    same = [c for c in cpus if topology.server_of(c) == topology.server_of(gpu)]
    if not same:
        raise ConfigError(
            f"no CPU in the server of {gpu}; give a CPU node in the group for host averaging",
            value=gpu,
            where="group",
        )
    return min(same, key=lambda c: (len(route(topology, gpu, c)), c))
