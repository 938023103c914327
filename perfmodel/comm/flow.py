"""Flow-level simulation of communication on the topology graph, with SimPy.

:class:`FlowNetwork` turns every directed link into a resource of its effective bandwidth.
A :meth:`FlowNetwork.transfer` follows the graph route; while flows are active, their rates
are max-min fair (progressive filling, :func:`perfmodel.comm.maxmin.maxmin_rates`), recomputed
at every flow arrival and completion, and the simulation jumps from one such event to the next
(the classic flow-level model: e.g. Casanova et al., SimGrid's fluid network model). A transfer
completes when its last byte has crossed its bottleneck plus the path latency (sum of link
latencies). Counters record bytes sent and received per node and bytes per directed link.

The network lives in a SimPy environment owned by the caller, so a training-step simulation can
run collectives and pipeline sends in the same environment and they contend on shared links.

Collectives run on it as processes issuing transfers (:mod:`perfmodel.comm.replay`).
"""

from __future__ import annotations

import itertools
import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import simpy

import perfmodel.comm.params as P
from perfmodel._memo import keep
from perfmodel.comm.analytic import AnalyticCommModel
from perfmodel.comm.channels import SMALL_ENTRIES
from perfmodel.comm.links import DirectedLinks
from perfmodel.comm.maxmin import maxmin_rates, maxmin_rates_small
from perfmodel.comm.params import LinkParams, Protocol
from perfmodel.comm.rings import Channel
from perfmodel.errors import ConfigError
from perfmodel.topology import Topology

_EPS_BYTES = 1e-6


@dataclass
class _Flow:
    edges: np.ndarray  # directed edge ids
    mult: np.ndarray  # multiplicity per edge id
    ids: Sequence[int]  # edges, as Python ints (the plain-Python rate computation)
    mults: Sequence[float]  # mult, as Python floats
    remaining: float
    latency_s: float
    event: simpy.Event
    accounting: tuple[tuple[str, str, float], ...]
    rate: float = 0.0


class FlowNetwork:
    """Links of a topology as shared resources in a SimPy environment.

    Parameters
    ----------
    env
        The SimPy environment (owned by the caller).
    topology
        The system.
    link_params
        Per-link-class overrides (as for :class:`~perfmodel.comm.model.CommCostModel`).
    links
        The directed links to use (default: built from ``topology`` and ``link_params``).
    model
        A :class:`~perfmodel.comm.model.CommCostModel` of the same system whose links and cached
        group analyses (ring channels) the collectives reuse (default: a fresh one, built on
        first use); its ``links`` take the place of ``links``/``link_params``.

    Examples
    --------
    Two 1 GB transfers from two GPUs of a DGX-1V into the same GPU over their NVLinks:

    >>> import simpy
    >>> from perfmodel.topology import load_system
    >>> env = simpy.Environment()
    >>> net = FlowNetwork(env, load_system("dgx1-v100"))
    >>> a = net.transfer("gpu1", "gpu0", 1e9)
    >>> b = net.transfer("gpu2", "gpu0", 1e9)
    >>> env.run()
    >>> round(env.now * 1e3, 1)  # one NVLink2 link each: 1 GB / 22.5 GB/s + 0.7 us
    44.4
    >>> net.bytes_received["gpu0"] == net.bytes_sent["gpu1"] + net.bytes_sent["gpu2"]
    True
    """

    #: Flows finishing together, due at one instant, share one delivery timeout
    #: (:meth:`_complete_finished`, issue 27); a test flips it off (a timeout each, the reference).
    SHARED_DELIVERY = True
    #: Rates kept per network by the flows' entries (:meth:`_rates_of`, issue 27); a test flips
    #: it off (every rate computation run, the reference).
    RATE_MEMO = True
    #: The most rate computations :meth:`_rates_of` keeps (one simulated GPT-3 175B plan of
    #: ``compare`` meets a few hundred distinct ones).
    RATE_MEMO_SIZE = 1024

    def __init__(
        self,
        env: simpy.Environment,
        topology: Topology,
        link_params: LinkParams | None = None,
        *,
        links: DirectedLinks | None = None,
        model: AnalyticCommModel | None = None,
    ) -> None:
        self.env = env
        self.topology = topology
        if model is not None:
            links = model.links
        self.links = links if links is not None else DirectedLinks(topology, link_params)
        self.bytes_sent: dict[str, float] = defaultdict(float)
        self.bytes_received: dict[str, float] = defaultdict(float)
        self._link_bytes: dict[tuple[str, str], float] = defaultdict(float)
        # (links crossed with their multiplicity, bytes) of each transfer not yet added to
        # link_bytes: added in order when it is read (the step simulation never reads it)
        self._pending_bytes: list[tuple[tuple[tuple[tuple[str, str], float], ...], float]] = []
        self.flows_started = 0
        self.flows_completed = 0
        self._flows: dict[int, _Flow] = {}
        self._ids = itertools.count()
        self._last_t = env.now
        self._gen = 0
        self._pending = False
        self._model: AnalyticCommModel | None = model
        self._send_alpha: dict[tuple[str, str], float] = {}
        self._paths: dict[tuple[str, str, tuple[str, ...] | None], Any] = {}
        # per channel (its hops): the flow's distinct link ids, their charged multiplicities and
        # the links with the number of hops crossing each (transfer_multi's, built once)
        self._multi: dict[tuple[tuple[str, ...], ...], Any] = {}
        # per channel tuple (by identity, kept alive here): each channel's share of a ring's
        # bytes (_ring's, computed once; a group's analysis hands out the same tuple)
        self._shares: dict[int, tuple[Sequence[Channel], list[float]]] = {}
        # per (source, destination, protocol): a phase transfer's route, its extra latency and
        # the latency paid before it starts (perfmodel.comm.replay._phase_proc's, built once)
        self._phase_hops: dict[tuple[str, str, Protocol], tuple[Any, float, float]] = {}
        # the flows' entries -> their max-min rates (_rates_of)
        self._rates: dict[tuple[Any, ...], Sequence[float] | np.ndarray] = {}

    # ------------------------------------------------------------------ public
    @property
    def link_bytes(self) -> dict[tuple[str, str], float]:
        """Bytes that crossed each directed link (a link crossed twice by one flow counts
        twice), summed in the order the transfers started."""
        out = self._link_bytes
        for crossed, nbytes in self._pending_bytes:
            for edge, c in crossed:
                out[edge] += nbytes * c
        self._pending_bytes.clear()
        return out

    def transfer(
        self,
        src: str,
        dst: str,
        nbytes: float,
        *,
        path: Sequence[str] | None = None,
        latency_s: float | None = None,
        charge: float = 1.0,
    ) -> simpy.Event:
        """Start sending ``nbytes`` from ``src`` to ``dst``; the event fires on delivery.

        The default path is :func:`perfmodel.topology.route` (minimum hops, widest), except that
        GPU-to-GPU traffic between servers uses each GPU's own NIC where several NICs are equally
        near (:meth:`DirectedLinks.p2p_route`; NCCL spreads GPUs over NICs, the plain route would
        send every GPU through the first NIC). ``path`` overrides it (a node sequence from
        ``src`` to ``dst``);
        ``latency_s`` overrides the path latency (sum of link latencies) added on delivery;
        ``charge`` is the link capacity the transfer spends per byte on every link of its path
        (the Intel P2P charge of a ring hop, :meth:`DirectedLinks.charge_p2p`; ``link_bytes``
        counts the bytes themselves).
        """
        if not nbytes >= 0:
            raise ConfigError(
                f"transfer size must be >= 0, got {nbytes!r}", value=nbytes, where="nbytes"
            )
        edges, uniq, counts, path_latency, ids, mults = self._path(src, dst, path)
        latency = path_latency if latency_s is None else float(latency_s)
        self._pending_bytes.append((edges, nbytes))
        if charge != 1.0:
            counts = counts * charge
            mults = [c * charge for c in mults]  # the same products as numpy's
        return self._start(uniq, counts, nbytes, latency, ((src, dst, nbytes),), ids, mults)

    def send(self, src: str, dst: str, nbytes: float) -> simpy.Event:
        """A point-to-point send (a pipeline send) on its default route, with latency counted
        once as the closed form counts it (``CommCostModel`` ``p2p``, issue 12): NCCL's per-step
        Simple latency of the route's transport plus what that does not contain
        (:meth:`DirectedLinks.extra_latency`), added on delivery, instead of the summed link
        latencies of :meth:`transfer`. Uncontended it takes ``alpha + nbytes / rate``, the
        closed form's time."""
        alpha = self._send_alpha.get((src, dst))
        if alpha is None:
            self._path(src, dst, None)  # validates the endpoints
            route = self.links.p2p_route(src, dst)
            alpha = self._send_alpha[(src, dst)] = p2p_alpha_s(self.links, route, Protocol.SIMPLE)
        return self.transfer(src, dst, nbytes, latency_s=alpha)

    def _path(
        self, src: str, dst: str, path: Sequence[str] | None
    ) -> tuple[
        tuple[tuple[tuple[str, str], float], ...],
        np.ndarray,
        np.ndarray,
        float,
        list[int],
        list[float],
    ]:
        """(directed edges each with multiplicity 1.0, distinct edge ids, multiplicity per id,
        path latency in s, the ids and multiplicities as Python lists) of a transfer's route,
        validated and cached per (source, destination, path)."""
        key = (src, dst, None if path is None else tuple(path))
        hit = self._paths.get(key)
        if hit is not None:
            return hit
        for node in (src, dst):
            if node not in self.topology.graph:
                raise ConfigError(
                    f"{node!r} is not a node of system {self.topology.name}",
                    value=node,
                    where="transfer",
                )
        p = tuple(path) if path is not None else self.links.p2p_route(src, dst)
        if p[0] != src or p[-1] != dst:
            raise ConfigError(f"path {p} does not go from {src} to {dst}", value=p, where="path")
        ids = self.links.path_ids(p)
        if ids:
            uniq, counts = np.unique(np.asarray(ids, dtype=np.int64), return_counts=True)
        else:
            uniq, counts = np.zeros(0, dtype=np.int64), np.zeros(0)
        # each edge crossed with multiplicity 1.0 (x * 1.0 == x: link_bytes adds the bytes)
        edges = tuple((self.links.link(e), 1.0) for e in ids)
        mult = counts.astype(float)
        hit = self._paths[key] = (
            edges,
            uniq,
            mult,
            self.links.path_latency(p),
            uniq.tolist(),
            mult.tolist(),
        )
        return hit

    def transfer_multi(
        self,
        hops: Sequence[Sequence[str]],
        nbytes: float,
        accounting: Sequence[tuple[str, str, float]],
        latency_s: float = 0.0,
    ) -> simpy.Event:
        """One flow of ``nbytes`` crossing the links of all ``hops`` at one rate (a pipelined
        ring channel in steady state); ``accounting`` lists the per-node bytes it represents.
        Each hop spends its Intel P2P charge (:meth:`DirectedLinks.charge_p2p`) of link
        capacity per byte, as :func:`~perfmodel.comm.channels.channel_rates` charges it, so a lone
        channel's flow runs at the closed form's channel rate."""
        key = hops if type(hops) is tuple else tuple(tuple(h) for h in hops)
        hit = self._multi.get(key)
        if hit is None:
            ids: list[int] = []
            weights: list[float] = []
            for hop in hops:
                hop_ids = self.links.path_ids(hop)
                ids.extend(hop_ids)
                weights.extend([self.links.charge_p2p(hop)] * len(hop_ids))
            uniq, inverse, counts = np.unique(
                np.asarray(ids, dtype=np.int64), return_inverse=True, return_counts=True
            )
            crossed = tuple(
                (self.links.link(int(e)), float(c)) for e, c in zip(uniq, counts, strict=True)
            )
            mult = np.bincount(inverse, weights=np.asarray(weights), minlength=len(uniq))
            hit = self._multi[key] = (uniq, mult, crossed, uniq.tolist(), mult.tolist())
        uniq, mult, crossed, ids, mults = hit
        self._pending_bytes.append((crossed, nbytes))
        return self._start(uniq, mult, nbytes, latency_s, tuple(accounting), ids, mults)

    @property
    def active_flows(self) -> int:
        return len(self._flows)

    def cost_model(self) -> AnalyticCommModel:
        """The analytic model on this network's links, kept so that repeated collectives on the
        same groups reuse their ring channels (cached per group)."""
        if self._model is None:
            self._model = AnalyticCommModel(self.topology, self.links.link_params, links=self.links)
        return self._model

    # ------------------------------------------------------------------ engine
    def _start(
        self,
        edges: np.ndarray,
        mult: np.ndarray,
        nbytes: float,
        latency_s: float,
        accounting: tuple[tuple[str, str, float], ...],
        ids: Sequence[int],
        mults: Sequence[float],
    ) -> simpy.Event:
        ev = self.env.event()
        self.flows_started += 1
        for s, _, b in accounting:
            self.bytes_sent[s] += b
        flow = _Flow(edges, mult, ids, mults, float(nbytes), latency_s, ev, accounting)
        if nbytes <= 0 or edges.size == 0:
            self._deliver(flow)
            return ev
        self._advance()
        self._flows[next(self._ids)] = flow
        self._request_update()
        return ev

    def _request_update(self) -> None:
        # Batch the arrivals of one instant into a single rate computation.
        if self._pending:
            return
        self._pending = True
        t = self.env.timeout(0)
        t.callbacks.append(self._update)

    def _advance(self) -> None:
        dt = self.env.now - self._last_t
        if dt > 0:
            for f in self._flows.values():
                f.remaining -= f.rate * dt
        self._last_t = self.env.now

    def _update(self, _event: Any = None) -> None:
        self._pending = False
        self._advance()
        self._complete_finished()
        if not self._flows:
            return
        flows = list(self._flows.values())
        rates = self._rates_of(flows)
        dt = math.inf
        for f, r in zip(flows, rates):
            f.rate = float(r)
            dt = min(dt, max(f.remaining, 0.0) / f.rate)
        self._gen += 1
        gen = self._gen
        timer = self.env.timeout(dt)
        timer.callbacks.append(lambda _e, g=gen: self._on_timer(g))

    def _rates_of(self, flows: list[_Flow]) -> Sequence[float] | np.ndarray:
        """The max-min fair rates (bytes/s) of ``flows``, in their order: plain Python for few
        entries (most rate computations: a few flows; the same rates bit for bit,
        :mod:`perfmodel.comm.maxmin`, without numpy's per-call overhead), else numpy.

        With :attr:`RATE_MEMO` (issue 27) the plain-Python answers are kept per network by the
        flows' entries: the number of flows, each entry's flow, link id and multiplicity, in
        flow order. Why a kept answer is the computation's, bit for bit: the progressive
        filling reads nothing else but the capacities of those links, which a link keeps from
        the moment it has an id (the links' table only appends). Multiplicities compare with
        ``==``: the only distinct floats that merges are ``0.0`` and ``-0.0``, which add the
        same load (``x + 0.0 == x + -0.0`` for ``x >= 0``). A ring collective's steps start the
        same channels again and again: the 20,315 plain rate computations of ``compare``'s
        three simulated GPT-3 175B plans had 305 distinct inputs (``bench_speed --only
        compare`` 5.1-5.6 -> 4.1-4.6 s CPU on a loaded box). The numpy path is not kept: its
        4,402 had 1,789 distinct inputs of up to 21,056 entries, whose keys held ~180 MB in one network.
        Bounded (:data:`RATE_MEMO_SIZE` entries of at most :data:`SMALL_ENTRIES`, oldest
        quarter out first)."""
        memo = self._rates if self.RATE_MEMO else None
        if sum(len(f.ids) for f in flows) <= SMALL_ENTRIES:
            fi: list[int] = []
            ei: list[int] = []
            mu: list[float] = []
            for i, f in enumerate(flows):
                fi += [i] * len(f.ids)
                ei += f.ids
                mu += f.mults
            if memo is None:
                return maxmin_rates_small(fi, ei, mu, self.links.capacity_list, len(flows))
            key: tuple[Any, ...] = (len(flows), tuple(fi), tuple(ei), tuple(mu))
            hit = memo.get(key)
            if hit is None:
                hit = maxmin_rates_small(fi, ei, mu, self.links.capacity_list, len(flows))
                keep(memo, key, hit, self.RATE_MEMO_SIZE)
            return hit
        return maxmin_rates(
            np.repeat(np.arange(len(flows), dtype=np.int64), [f.edges.size for f in flows]),
            np.concatenate([f.edges for f in flows]),
            np.concatenate([f.mult for f in flows]),
            self.links.capacity_view(),
            len(flows),
        )

    def _on_timer(self, gen: int) -> None:
        if gen != self._gen:
            return  # superseded by a newer rate computation
        self._update()

    def _complete_finished(self) -> None:
        """Deliver the flows whose bytes have all crossed.

        With :attr:`SHARED_DELIVERY` (issue 27) the flows finishing now that fall due at one
        instant (``now + latency``, SimPy's own sum) share one timeout that delivers them in
        completion order, instead of a timeout each: the same SimPy run bit for bit. Their
        timeouts were created one after the other here, with only other instants' events
        between, so they were processed one after the other in this order, each delivering
        (counters, then ``succeed``, which only schedules the transfer's event); one timeout at
        the first one's place does the same deliveries in the same order, and the removed
        timeouts scheduled nothing else. A latency that does not move the instant (``now +
        latency == now``) keeps its own timeout (it could interleave with this instant's
        events). A ring channel's flows finish together with equal latencies: 18 -> 1 event.
        """
        done = [
            k
            for k, f in self._flows.items()
            if f.remaining <= _EPS_BYTES + 1e-12 * f.rate
            or f.remaining <= 1e-9 * max(f.rate, 1.0) * 1e-9
        ]
        if not self.SHARED_DELIVERY:
            for k in done:
                flow = self._flows.pop(k)
                flow.rate = 0.0
                self._deliver(flow)
            return
        now = self.env.now
        due: dict[float, list[_Flow]] = {}
        for k in done:
            flow = self._flows.pop(k)
            flow.rate = 0.0
            at = now + flow.latency_s  # the instant SimPy's timeout falls due (its own sum)
            if flow.latency_s > 0 and at != now:
                group = due.get(at)
                if group is None:
                    group = due[at] = []
                    timer = self.env.timeout(flow.latency_s)
                    timer.callbacks.append(lambda _e, g=group: self._fire_all(g))
                group.append(flow)
            else:
                self._deliver(flow)

    def _fire_all(self, flows: list[_Flow]) -> None:
        """Deliver ``flows`` (due at this instant, in completion order): the callback of the one
        timeout :meth:`_complete_finished` shares among them."""
        for flow in flows:
            self._fire(flow)

    def _fire(self, flow: _Flow) -> None:
        self.flows_completed += 1
        for _, d, b in flow.accounting:
            self.bytes_received[d] += b
        flow.event.succeed()

    def _deliver(self, flow: _Flow) -> None:
        if flow.latency_s > 0:
            self.env.timeout(flow.latency_s).callbacks.append(lambda _e: self._fire(flow))
        else:
            self._fire(flow)


def p2p_alpha_s(links: DirectedLinks, path: Sequence[str], proto: Protocol) -> float:
    """Latency (s) of one point-to-point transfer along ``path``: NCCL's per-step latency of the
    route's transport for ``proto`` (``hwLat``, NCCL 2.7+ ``src/graph/tuning.cc``) plus what it
    does not contain (:meth:`DirectedLinks.extra_latency`, e.g. TCP sockets). The closed form
    (:meth:`Transfers.flows_time <perfmodel.comm.transfers.Transfers.flows_time>`) charges the same for Simple."""
    return P.NCCL_STEP_LATENCY_S[(links.hw_class(path), "ring", proto)] + links.extra_latency(path)
