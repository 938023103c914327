"""Point-to-point transfers on the topology: concurrent sends with their routes, max-min fair
rates and per-step latency (what pipeline sends, all-to-all and the non-NCCL algorithms cost).

Each GPU leaves its server through its own NIC (:meth:`~perfmodel.comm.links.DirectedLinks.p2p_route`),
pairs without peer-to-peer go through host memory, rates are max-min fair on the routes
(:func:`~perfmodel.comm.channels.flow_rates`) and every send pays NCCL's per-step Simple
latency for its transport. Neither the routes nor the rates depend on the bytes sent, so they
are kept per set of pairs and shared by every set of the same shape
(:meth:`Transfers._canonical_pairs`, :meth:`Transfers._twin_pairs`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from itertools import chain, repeat
from operator import eq
from typing import TYPE_CHECKING, Any

import perfmodel.comm.params as P
from perfmodel.comm.channels import flow_rates
from perfmodel.comm.params import Protocol
from perfmodel.errors import PerfModelError
from perfmodel.topology import Topology
from perfmodel.topology.symmetry import server_symmetry

if TYPE_CHECKING:
    from perfmodel.comm.links import DirectedLinks


class Transfers:
    """Concurrent point-to-point sends on one topology's links (see the module docstring)."""

    def __init__(self, topology: Topology, links: DirectedLinks) -> None:
        self.topology = topology
        self.links = links
        #: pairs -> (alpha s, rate B/s) of each send (:meth:`terms`)
        self._cache: dict[tuple[tuple[str, str], ...], tuple[tuple[float, float], ...]] = {}
        #: name-free shape (:meth:`_shape`) -> the same terms
        self._shapes: dict[tuple[Any, ...], tuple[tuple[float, float], ...]] = {}
        #: (class, source local id, destination local id) -> :meth:`_mirrored`'s answer
        self._mirror: dict[tuple[int, str, str], bool] = {}
        #: endpoint in a server of a class -> (server, class, local id), as :meth:`_shape`
        #: reads them (:func:`~perfmodel.topology.symmetry.server_symmetry`'s tables)
        self._of_node: dict[str, tuple[int, int, str]] = {}
        #: the symmetry's ``{server: class}`` (set with the first entries of :attr:`_of_node`)
        self._cls: dict[int, int] = {}

    def time(self, pairs: Sequence[tuple[str, str]], nbytes_each: float) -> float:
        """Completion time (s) of concurrent point-to-point sends of ``nbytes_each`` bytes.

        What pipeline-parallel sends and other explicit transfers cost: every GPU leaves its
        server through its own NIC (:meth:`DirectedLinks.p2p_route`, as NCCL binds each GPU to
        a near NIC) and pairs without peer-to-peer go through host memory; rates are max-min
        fair, each send pays NCCL's per-step latency (:meth:`flows_time`). 8 tensor-parallel
        ranks of a DGX A100 sending 6.29 MB each to the next server share 8 NICs, not the 4
        that the plain shortest routes pick.
        """
        if nbytes_each <= 0 or not pairs:
            return 0.0
        key = pairs if type(pairs) is tuple else tuple(pairs)
        if any(type(p) is not tuple for p in key):  # pairs given as 2-lists: hashable tuples
            key = tuple(map(tuple, key))
        src, dst = zip(*key)
        if any(map(eq, src, dst)):  # a rank "sending" to itself costs nothing: left out
            key = tuple((s, d) for s, d in key if s != d)
            if not key:
                return 0.0
        # :meth:`flows_time`'s slowest send, its loop on the one size (issue 27, wave 12b)
        nbytes, worst = float(nbytes_each), 0.0
        for alpha, rate in self.terms(key):
            t = alpha + nbytes / rate
            if t > worst:
                worst = t
        return worst

    def by_shape(self, pairs: Sequence[tuple[str, str]]) -> bool:
        """Whether :meth:`time` of ``pairs`` reads the terms kept for their name-free shape
        (:meth:`_shape` is not ``None``: no pair inside one server, every server in a class,
        every same-class pair's route mirrored): then every set of sends of that shape has the
        same terms, bit for bit (:meth:`_shape`), so :meth:`time` of any size is the same
        number for all of them. ``False`` for an empty set or one with a self-send."""
        key = tuple(map(tuple, pairs))
        if not key or any(a == b for a, b in key):
            return False
        return self._shape(key) is not None  # type: ignore[arg-type]

    def flows_time(self, transfers: Sequence[tuple[str, str, float]]) -> tuple[float, float, float]:
        """Concurrent point-to-point transfers: (time of the slowest, its alpha, its rate).

        Rates are max-min fair on the default routes; each transfer takes
        ``alpha + bytes / rate`` with ``alpha`` NCCL's per-step Simple cost for the route's
        transport plus what that cost does not contain (:meth:`DirectedLinks.extra_latency`).
        """
        terms = self.terms(tuple((s, d) for s, d, _ in transfers))
        worst = (0.0, 0.0, math.inf)
        for (_, _, nbytes), (alpha, rate) in zip(transfers, terms):
            t = alpha + nbytes / rate
            if t > worst[0]:
                worst = (t, alpha, rate)
        return worst

    def p2p_route(self, src: str, dst: str) -> tuple[str, ...]:
        """:meth:`DirectedLinks.p2p_route` between two servers, read off the same local ids in
        the first servers of their classes (:func:`~perfmodel.topology.symmetry.server_symmetry`)
        and mapped back, as :meth:`GroupMemo._shape_group` does for groups: the route and the NICs each
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

        The :meth:`terms` of the image are those of ``pairs`` (issue 14: the
        TP-rank sends between every two pipeline stages, in every plan, are one route and
        rate computation per shape): each pair's route is :meth:`p2p_route`, read off the
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
        latencies and classes in the same order, so the :meth:`terms` are the twin's,
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

    def _shape(self, pairs: tuple[tuple[str, str], ...]) -> tuple[Any, ...] | None:
        """What :meth:`terms` reads of ``pairs``, without a name: the classes of the pairs'
        servers in order of first appearance, each pair's servers as indices in that order, and
        each pair's local ids; ``None`` where a pair stays in one server, a server is in no
        class, or two servers of one class are joined by a pair whose local ids' route is not
        :meth:`_mirrored` (its route then depends on which server's name sorts first).

        Why sets of one shape have one :meth:`terms`, bit for bit: :meth:`p2p_route` reads a
        pair's route off the same local ids in the first servers of the classes
        (:meth:`~perfmodel.topology.symmetry.ServerSymmetry.pair_route`), between two servers
        of one class off the first two in the pair's own name order; where the local ids'
        route is mirrored, either order gives the image of the one route from the class's first
        server to its second under the map taking those to the pair's source and destination
        servers. So the ``k``-th server of one set taken to the ``k``-th of the other (same
        classes; a permutation of each class's servers, a graph automorphism keeping every
        attribute, fabric fixed) takes every route of the one set onto the matching route of
        the other, and the alphas and max-min rates are equal as for
        :meth:`_canonical_pairs` (with its one exception, max-min's numerical-safety
        fallback). What it adds to :meth:`_canonical_pairs`: that map keeps the name order of
        the servers, which the shape does not, so the sends between stages ``n4-n7`` and
        ``n8-n11`` (``n10`` sorts before ``n4``) and between ``n0-n3`` and ``n4-n7`` are one
        route and rate computation (issue 27: a tensor-parallel degree of 32 on 128 DGX A100
        met four such images of one shape per plan).
        """
        if not pairs:
            return self._shape_read(pairs)
        src, dst = zip(*pairs)
        of = self._of_node
        try:  # every endpoint's server known: one C lookup per endpoint (issue 27, wave 12b)
            at_src, c_src, l_src = zip(*map(of.__getitem__, src))
            at_dst, c_dst, l_dst = zip(*map(of.__getitem__, dst))
        except KeyError:
            # an endpoint still unknown after learning its server (two nodes of one server with
            # one local id, which ``by_local`` cannot both hold): read the tables, not recurse
            learned = self._learn(chain(src, dst))
            if not learned or not all(map(of.__contains__, chain(src, dst))):
                return self._shape_read(pairs)
            return self._shape(pairs)
        if any(map(eq, at_src, at_dst)):
            return None
        mirror = self._mirror
        for c, d, *ids in set(zip(c_src, c_dst, l_src, l_dst)):  # the distinct sends
            if c == d:
                hit = mirror.get((c, *ids))
                if not (hit or (hit is None and self._mirrored(c, *ids))):
                    return None
        return _shape_key(self._cls, at_src, at_dst, l_src, l_dst)

    def _learn(self, nodes: Iterable[str]) -> bool:
        """Keep in :attr:`_of_node` every node of the servers of ``nodes`` not kept yet (its
        server, the server's class and its local id, from
        :func:`~perfmodel.topology.symmetry.server_symmetry`'s tables); ``False`` where a node
        is outside every server of a class (then :meth:`_shape` reads the tables itself)."""
        sym = server_symmetry(self.topology)
        of, server, cls = self._of_node, sym.server, sym.cls
        self._cls = cls
        for n in nodes:
            if n in of:
                continue
            at = server.get(n, -1)
            c = cls.get(at)
            if c is None:
                return False
            for lid, m in sym.by_local[at].items():
                of[m] = (at, c, lid)
        return True

    def _shape_read(self, pairs: tuple[tuple[str, str], ...]) -> tuple[Any, ...] | None:
        """:meth:`_shape` read off the symmetry's tables endpoint by endpoint (what the
        kept table :attr:`_of_node` holds; tested equal)."""
        sym = server_symmetry(self.topology)
        server, cls, local_id = sym.server, sym.cls, sym.local_id
        src, dst = [s for s, _ in pairs], [d for _, d in pairs]
        at_src = list(map(server.get, src, repeat(-1)))
        at_dst = list(map(server.get, dst, repeat(-1)))
        c_src, c_dst = list(map(cls.get, at_src)), list(map(cls.get, at_dst))
        if None in c_src or None in c_dst or any(map(eq, at_src, at_dst)):
            return None
        l_src, l_dst = list(map(local_id.__getitem__, src)), list(map(local_id.__getitem__, dst))
        mirror = self._mirror
        for key in {(c, a, b) for c, d, a, b in zip(c_src, c_dst, l_src, l_dst) if c == d}:
            hit = mirror.get(key)
            if not (hit or (hit is None and self._mirrored(*key))):
                return None
        return _shape_key(cls, at_src, at_dst, l_src, l_dst)

    def _mirrored(self, c: int, src_lid: str, dst_lid: str) -> bool:
        """Whether the :meth:`DirectedLinks.p2p_route` between local ids ``src_lid`` and
        ``dst_lid`` of two servers of class ``c`` is mirrored
        (:meth:`~perfmodel.topology.symmetry.ServerSymmetry.mirrored`: the search
        :meth:`p2p_route` maps for every pair of servers of the class); kept per
        ``(c, src_lid, dst_lid)``."""
        key = (c, src_lid, dst_lid)
        hit = self._mirror.get(key)
        if hit is None:
            sym = server_symmetry(self.topology)
            hit = self._mirror[key] = sym.mirrored(c, src_lid, dst_lid, self.links.p2p_route)
        return hit

    def terms(self, pairs: tuple[tuple[str, str], ...]) -> tuple[tuple[float, float], ...]:
        """``(alpha s, max-min fair rate B/s)`` of each of concurrent sends ``pairs`` (cached:
        neither depends on the bytes sent, so every message size of a pipeline's sends, in
        every plan with the same pairs, reuses one route and rate computation), and shared
        by every set of pairs of the same shape (:meth:`_shape`, :meth:`_canonical_pairs`)."""
        hit = self._cache.get(pairs)
        if hit is not None:
            return hit
        shape = self._shape(pairs)
        if shape is not None:
            hit = self._shapes.get(shape)
            if hit is None:
                hit = self._shapes[shape] = self._terms(pairs)
            self._cache[pairs] = hit
            return hit
        return self._terms(pairs)

    def _terms(self, pairs: tuple[tuple[str, str], ...]) -> tuple[tuple[float, float], ...]:
        """:meth:`terms` of ``pairs`` read off their canonical image or twin, or searched."""
        hit = self._cache.get(pairs)
        if hit is not None:
            return hit
        canon = self._canonical_pairs(pairs)
        if canon is None:
            canon = self._twin_pairs(pairs)
        if canon is not None and canon != pairs:  # one route and rate computation per shape
            hit = self._cache[pairs] = self.terms(canon)
            return hit
        paths = [self.p2p_route(s, d) for s, d in pairs]
        rates = flow_rates(self.links, paths)
        step = P.NCCL_STEP_LATENCY_S
        hit = self._cache[pairs] = tuple(
            (
                step[(self.links.hw_class(path), "ring", Protocol.SIMPLE)]
                + self.links.extra_latency(path),
                float(rate),
            )
            for path, rate in zip(paths, rates)
        )
        return hit


def _shape_key(
    cls: dict[int, int],
    at_src: Sequence[int],
    at_dst: Sequence[int],
    lid_src: Sequence[str],
    lid_dst: Sequence[str],
) -> tuple[Any, ...]:
    """:meth:`Transfers._shape` of sends from servers ``at_src`` to ``at_dst`` (their
    classes ``cls``) and local ids ``lid_src`` to ``lid_dst``: the classes of the servers in
    order of first appearance, the sources' then the destinations' server indices in that
    order, the sources' and the destinations' local ids (one flat tuple each, read in C
    loops; the pairs are the ``k``-th of each half)."""
    order = dict.fromkeys(chain.from_iterable(zip(at_src, at_dst)))
    index = dict(zip(order, range(len(order))))
    at = tuple(map(index.__getitem__, chain(at_src, at_dst)))
    return (tuple(map(cls.__getitem__, order)), at, tuple(lid_src), tuple(lid_dst))


def p2p_transfers(members: Sequence[str], m: float) -> list[tuple[str, str, float]]:
    """``sendrecv`` transfers: ``(src, dst)`` is one send of ``m`` bytes (a pipeline send); a
    group of ``n > 2`` is nccl-tests' ``sendrecv_perf`` pattern, every rank sending ``m`` bytes to
    the next one at once (a ring shift)."""
    if len(members) == 2:
        return [(members[0], members[1], m)]
    n = len(members)
    return [(members[i], members[(i + 1) % n], m) for i in range(n)]


def representative_pairs(
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
