"""The analysis of a group's ring channels over servers built alike, without listing them.

:func:`ring_summary` gives what :func:`~perfmodel.comm.channels.build_channels` and
:func:`~perfmodel.comm.channels.channel_rates` would (the channels' count and max-min fair
rates, the hops' paths up to renaming) from the first server's rings and one boundary per pair
of server classes (issue 14: a 16,384-rank ring is analysed without its 262,144 hop paths).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any

from perfmodel.comm.channels import RingPlan, fill_rates, ring_plan
from perfmodel.comm.nodes import split_by_server
from perfmodel.comm.rings import MAX_CHANNELS

if TYPE_CHECKING:
    from perfmodel.comm.links import DirectedLinks


@dataclass(frozen=True)
class RingSummary:
    """The analysis of a group's ring channels without listing them (:func:`ring_summary`).

    ``rates``: every channel's max-min fair rate (bytes/s), as :func:`~perfmodel.comm.channels.channel_rates` of the
    listed channels with the P2P charge gives; ``inter_rates``: the same with the
    inter-server hops only (no charge); ``intra_hops``: the first server's intra-server hops,
    which every server of the group has by local id; ``inter_hops``: one path for every
    inter-server hop up to renaming (one boundary of each class pair), with the same links'
    attributes in the same order as every hop it stands for; ``servers``: the servers (``-1``:
    fabric) the channels' hops touch; ``fabric_free``: no channel loads a link between two
    fabric nodes (each boundary's fabric part is one switch), so the rates read no count of
    boundaries (the ring's server count enters only through fabric-link loads, which are each
    boundary's count times that count); ``recount``: where every server is of one class (one
    class pair), a callable from a server count to the rates and inter-server rates the
    summary of the same local ids over that many servers of the class has
    (:meth:`_Summariser.recounted`), else ``None`` (``GroupMemo`` keeps it only for summaries
    that are not ``fabric_free``: a fabric-free one is reused as it is).
    """

    n_channels: int
    rates: tuple[float, ...]
    inter_rates: tuple[float, ...]
    intra_hops: tuple[tuple[str, ...], ...]
    inter_hops: tuple[tuple[str, ...], ...]
    servers: frozenset[int]
    fabric_free: bool = False
    recount: Callable[[int], tuple[tuple[float, ...], tuple[float, ...]]] | None = field(
        default=None, compare=False, repr=False
    )


def ring_summary(
    links: DirectedLinks, members: Sequence[str], *, max_channels: int = MAX_CHANNELS
) -> RingSummary | None:
    """:func:`build_channels` over servers built alike, analysed without walking every hop; or
    ``None`` where that is not shown exact (the caller then lists the channels).

    Channel ``c`` of :func:`build_channels` is, in every server, the same local-id segment of
    the first server's ring (:func:`_remap`), then one boundary hop to the next server through
    NICs of fixed local ids (:func:`_via_nics`): the route from the segment's last GPU to the
    exit NIC, the NIC-to-NIC route through the fabric, the route from the entry NIC to the next
    segment's first GPU. Where every server has the same inside twin
    (:attr:`~perfmodel.topology.symmetry.ServerSymmetry.twin`: built alike inside), the two
    routes inside a server are, by local id, the twin's wherever the twin's stays inside
    (:meth:`DirectedLinks._twin_route` reads them off it then), and the fabric part is memoised
    by the two NICs' fabric links (:meth:`DirectedLinks._fabric_route`; servers of one class,
    :attr:`~perfmodel.topology.symmetry.ServerSymmetry.cls`, hang off the same ones). So the
    boundary between servers of classes ``(A, B)`` (a server outside classes is its own) is
    composed once per class pair, without a route search per server, and:

    - a link with an end in a server carries, from channel ``c``, the count of its pattern
      (local ids; a NIC's one fabric link as "its fabric link") in ``c``'s segment and in the
      two boundaries' parts in that server: the same counts in every server, so one link per
      (pattern, capacity) stands for all;
    - a fabric link carries, from channel ``c``, its count in each class pair's boundary times
      the number of boundaries of that pair (its true load); fabric links of one capacity and
      the same load from every channel are one resource, as above.

    Progressive filling (:func:`~perfmodel.comm.maxmin.maxmin_rates`) keeps links with the same
    capacity and the same per-channel counts at the same load and residual at every step, so
    they saturate together: one link of each such set gives the same rates, bit for bit (the
    counts are integers, summed exactly). Servers whose P2P rule refuses pairs (host-memory
    routes, :meth:`DirectedLinks.shm_cpu`) are summarised alike: the segments are the first
    server's packed rings, host-memory hops included, remapped in every server by
    :func:`build_channels`; the boundary routes join a GPU and a NIC (never a refused pair);
    and the rule is the same in every server of one inside twin (a node attribute of the
    server signature; on a cluster built by copying, applied to server 0's template). Not used
    (``None``): one server; parts of different local ids;
    servers built differently inside; an Intel P2P charge on a segment hop (fractional
    weights); a server route that may leave the server; a fabric route the search did not
    find inside the fabric; a boundary on the plain route; a NIC with several fabric links or
    linked to another server's NIC.
    """
    parts = split_by_server(links.topology, members, links.server)
    if len(parts) < 2:
        return None
    lid = links.local_id
    key0 = tuple(lid[m] for m in parts[0])
    if any(tuple(map(lid.__getitem__, p)) != key0 for p in parts[1:]):
        return None
    sym = links._symmetry
    srv = links.server
    servers = [srv[p[0]] for p in parts]
    if len({sym.twin.get(s, s) for s in servers}) != 1:
        return None
    summary = _Summariser(links, ring_plan(links, parts, max_channels), servers)
    if not summary.segments():
        return None
    pairs = summary.class_pairs()
    if not all(summary.boundary(i, count) for i, count in pairs):
        return None
    return summary.result(pairs)


_Incidence = tuple[list[int], list[int], list[float], list[float], list[tuple[int, int]]]
"""A max-min fill's input (:meth:`_Summariser._incidence`): per entry its channel, resource
and multiplier; per resource its capacity; the fabric entries' positions and integer counts."""


class _Summariser:
    """One :func:`ring_summary` in progress: the group's ring plan over its servers, the link
    tables it reads, and what it has found so far (each per-server link pattern with the
    capacities it has, the segments' counts per pattern, the boundary templates, the
    fabric-link loads per channel)."""

    #: Whether :meth:`recounted` scales the incidence :meth:`result` kept (off: built anew
    #: from the scaled loads; tests compare both ways).
    KEEP_INCIDENCE = True

    def __init__(self, links: DirectedLinks, plan: RingPlan, servers: list[int]) -> None:
        self.links = links
        self.plan = plan
        self.servers = servers
        self.n_ch = len(plan.choices)
        sym = links._symmetry
        self.lid = links.local_id
        self.srv = links.server
        self.twin = sym.twin.get(servers[0], servers[0])
        self.cls = [("c", sym.cls[s]) if s in sym.cls else ("u", s) for s in servers]
        self.seg_hops: list[tuple[tuple[str, ...], ...]] = []
        self.ends: list[tuple[str, str]] = []  # per channel: its segment's last and first GPU
        self.seg_count: list[dict[Any, int]] = []
        #: per-server link pattern -> the capacities it has in some server
        self.pattern_caps: dict[Any, set[float]] = {}
        self.inter_hops: list[tuple[str, ...]] = []
        self.touched: set[int] = set(servers)
        self.out_tmpl: list[dict[Any, int]] | None = None  # per channel: the leaving server's
        self.in_tmpl: list[dict[Any, int]] | None = None  # per channel: the entered server's
        self.fab_load: list[dict[int, int]] = [{} for _ in range(self.n_ch)]
        # a later class pair of servers of the build record: its fabric part and NIC links per
        # (exit NIC's fabric side, entry NIC's fabric side), what they are a function of
        # (_fabric_pattern: servers of the record are never linked to each other); the
        # boundaries of a 2,048-server fat tree are 2,047 class pairs, a few sides each
        self.by_sides: dict[Any, tuple[tuple[int, ...], float, float]] = {}
        self._inside: dict[tuple[str, str], tuple[str, ...] | None] = {}
        self._one_link: dict[str, bool] = {}
        #: the incidence :meth:`result` filled, with and without the segments (recountable
        #: summaries only; :meth:`recounted`)
        self._kept: tuple[_Incidence, _Incidence] | None = None

    # ------------------------------------------------------------------ the first server
    def segments(self) -> bool:
        """Each channel's segment of the first server's rings and its counts per link pattern;
        ``False`` where a segment hop bears an Intel P2P charge (fractional weights)."""
        lid, links = self.lid, self.links
        for c, (rot, _, _) in enumerate(self.plan.choices):
            ring = self.plan.first[c % len(self.plan.first)]
            k = len(ring.order)
            r = rot % k
            seg = ring.order[r:] + ring.order[:r]
            self.seg_hops.append((ring.hops[r:] + ring.hops[:r])[: k - 1])
            self.ends.append((lid[seg[-1]], lid[seg[0]]))
        if any(links.charge_p2p(h) != 1.0 for hops in self.seg_hops for h in hops):
            return False
        cap, edges = links.capacity_list, links._table.edges  # by id, as handed out
        for hops in self.seg_hops:
            cnt: dict[Any, int] = {}
            for h in hops:
                for e in links._ids_of(h):
                    u, v = edges[e]
                    pk = (("s", lid[u]), ("s", lid[v]))
                    cnt[pk] = cnt.get(pk, 0) + 1
                    self.pattern_caps.setdefault(pk, set()).add(cap[e])
            self.seg_count.append(cnt)
        return True

    def _inside_lids(self, x: str, y: str) -> tuple[str, ...] | None:
        """:meth:`DirectedLinks.route` between local ids ``x`` and ``y`` of any server of the
        group: the twin's route where it provably stays inside (``_twin_route``), by local id;
        ``None``: not shown."""
        key = (x, y)
        if key not in self._inside:
            links, twin = self.links, self.links.by_local[self.twin]
            zs, zd = twin[x], twin[y]
            path = links.route(zs, zd)
            ok = links._stays_inside(zs, zd, path)
            self._inside[key] = tuple(self.lid[n] for n in path) if ok else None
        return self._inside[key]

    def _fabric_inner(self, x_out: str, x_in: str) -> tuple[str, ...] | None:
        """:meth:`DirectedLinks.route` between NICs of two servers: the fabric switches memoised
        by the NICs' fabric links (``_fabric_route``; a class's first servers have the same
        links); searched here directly (route() of two NICs of different servers is this
        search, on the first servers of their classes), no server is made."""
        links = self.links
        fabric = links.server_nodes.get(-1, frozenset())
        pattern = links._fabric_pattern(x_out, x_in, fabric)
        hit = links._fabric_inner.get(pattern)
        if hit is None:
            links._fabric_route(x_out, x_in, fabric)
            hit = links._fabric_inner.get(pattern)
        return hit

    def _node_key(self, x: str, other: str) -> tuple[str, ...] | None:
        """A server node by local id; a fabric node as the one fabric node of ``other`` (``None``
        where ``other`` has several)."""
        if self.srv[x] >= 0:
            return ("s", self.lid[x])
        hit = self._one_link.get(other)
        if hit is None:
            fabric = self.links.server_nodes.get(-1, frozenset())
            hit = self._one_link[other] = len(self.links.fabric_neighbours(other, fabric)) == 1
        return ("F",) if hit else None

    # ------------------------------------------------------------------ the boundaries
    def class_pairs(self) -> list[list[int]]:
        """``[a boundary's index, how many]`` per pair of neighbouring servers' classes, in ring
        order of first appearance."""
        n, cls = len(self.servers), self.cls
        pairs: dict[tuple[Any, Any], list[int]] = {}
        for i in range(n):
            hit = pairs.setdefault((cls[i], cls[(i + 1) % n]), [i, 0])
            hit[1] += 1
        return list(pairs.values())

    def boundary(self, i: int, count: int) -> bool:
        """Compose the boundary from server ``i`` to the next, standing for ``count``
        boundaries of its class pair: the first pair's parts inside the two servers become the
        templates, every pair's fabric part loads the fabric links ``count`` times. ``False``
        where the boundary is not shown exact."""
        links, plan, servers = self.links, self.plan, self.servers
        a, b = servers[i], servers[(i + 1) % len(servers)]
        outs: list[dict[Any, int]] = []
        ins: list[dict[Any, int]] = []
        sides_a = sides_b = None
        if self.out_tmpl is not None and not links._table.has_extra:
            sides_a, sides_b = links._attach_sides(a), links._attach_sides(b)
        for c, (_, exit_nic, entry_nic) in enumerate(plan.choices):
            if exit_nic is None or entry_nic is None:
                return False
            n_out, n_in = plan.local_of[exit_nic], plan.local_of[entry_nic]
            side_key = None
            if sides_a is not None and sides_b is not None:
                so, si = sides_a.get(n_out), sides_b.get(n_in)
                if so is not None and si is not None:
                    side_key = (so, si)
                    got = self.by_sides.get(side_key)
                    if got is None:
                        got = self._by_sides(a, b, n_out, n_in, so, si)
                        if got is None:
                            return False
                        self.by_sides[side_key] = got
                    self._load(c, count, n_out, n_in, *got)
                    continue
            route = self._boundary_route(c, a, b, n_out, n_in)
            if route is None:
                return False
            if self.out_tmpl is not None:
                ok = self._later_boundary(c, count, a, b, n_out, n_in, side_key, route)
            else:
                ok = self._first_boundary(c, count, a, b, route, outs, ins)
            if not ok:
                return False
        if self.out_tmpl is None:
            self.out_tmpl, self.in_tmpl = outs, ins
        return True

    def _by_sides(
        self, a: int, b: int, n_out: str, n_in: str, so: Any, si: Any
    ) -> tuple[tuple[int, ...], float, float] | None:
        """The fabric part (its link ids) and the two NIC links' capacities of a later class
        pair's boundary, from the NICs' fabric sides: ``_fabric_pattern`` of the two NICs
        (servers of the record are never linked); the NIC names are made only for a search.
        ``None`` where a NIC has several fabric links or the search found no fabric route."""
        links = self.links
        pattern = (so, si, False)
        mid = links._fabric_inner.get(pattern)
        if mid is None:
            x_out, x_in = links.by_local[a].get(n_out), links.by_local[b].get(n_in)
            if x_out is None or x_in is None:
                return None
            links._fabric_route(x_out, x_in, links.server_nodes.get(-1, frozenset()), pattern)
            mid = links._fabric_inner.get(pattern)
        # _node_key's test: each NIC linked to one fabric node, the link's capacity in its side
        if not mid or len(so) != 1 or len(si) != 1:
            return None
        if so[0][0] != mid[0] or si[0][0] != mid[-1]:  # pragma: no cover
            raise AssertionError("a fabric route off the NICs' fabric sides")
        return links._ids_of(mid), so[0][1], si[0][1]

    def _load(
        self,
        c: int,
        count: int,
        n_out: str,
        n_in: str,
        ids: Sequence[int],
        cap_o: float,
        cap_i: float,
    ) -> None:
        """Channel ``c``'s boundary through NICs ``n_out`` and ``n_in`` (local ids) over fabric
        links ``ids``, ``count`` times: the NIC links' capacities and the fabric loads."""
        self.pattern_caps[(("s", n_out), ("F",))].add(cap_o)
        self.pattern_caps[(("F",), ("s", n_in))].add(cap_i)
        load = self.fab_load[c]
        for e in ids:
            load[e] = load.get(e, 0) + count

    def _boundary_route(
        self, c: int, a: int, b: int, n_out: str, n_in: str
    ) -> tuple[tuple[str, ...], tuple[str, ...], str, str, tuple[str, ...]] | None:
        """Channel ``c``'s boundary hop from server ``a`` to ``b`` through NICs ``n_out`` and
        ``n_in``: (the part in ``a`` by local id, the part in ``b`` by local id, the two NICs,
        the fabric switches); ``None`` where a part may leave its server, a NIC is missing, or
        the fabric route is not memoised (the search fell back, or the NICs are linked)."""
        l_out, l_in = self.ends[c]
        up, down = self._inside_lids(l_out, n_out), self._inside_lids(n_in, l_in)
        by_local = self.links.by_local
        x_out, x_in = by_local[a].get(n_out), by_local[b].get(n_in)
        if up is None or down is None or x_out is None or x_in is None:
            return None
        mid = self._fabric_inner(x_out, x_in)
        if not mid:
            return None
        return up, down, x_out, x_in, mid

    def _path(
        self, a: int, b: int, up: tuple[str, ...], mid: tuple[str, ...], down: tuple[str, ...]
    ) -> tuple[str, ...]:
        """The boundary hop's node path from server ``a`` to ``b``."""
        by_local = self.links.by_local
        return (*(by_local[a][x] for x in up), *mid, *(by_local[b][x] for x in down))

    def _later_boundary(
        self,
        c: int,
        count: int,
        a: int,
        b: int,
        n_out: str,
        n_in: str,
        side_key: Any,
        route: tuple[tuple[str, ...], tuple[str, ...], str, str, tuple[str, ...]],
    ) -> bool:
        """A later class pair's boundary of channel ``c``: the parts inside the two servers are
        the first pair's by local id (checked there); only the fabric part and the NICs' links
        are new."""
        links = self.links
        up, down, x_out, x_in, mid = route
        for x in (x_out, x_in):
            if self._node_key(mid[0], x) is None:  # a NIC linked to several fabric nodes
                return False
        kind = links._table.kind
        cap_o, cap_i = kind(mid[0], x_out)[0][0], kind(mid[-1], x_in)[0][0]
        ids = links._ids_of(mid)
        self._load(c, count, n_out, n_in, ids, cap_o, cap_i)
        if side_key is not None:
            self.by_sides[side_key] = (ids, cap_o, cap_i)
        # The hop's latency outside NCCL's tables is 0 unless some link met so far has such
        # latency: its fabric and NIC links were just met, and its links inside the two
        # servers have the attributes of the first pair's (every server has one inside twin).
        # The caller takes the largest: a 0 adds nothing.
        if links._table.has_extra:
            self.inter_hops.append(self._path(a, b, up, mid, down))
        return True

    def _first_boundary(
        self,
        c: int,
        count: int,
        a: int,
        b: int,
        route: tuple[tuple[str, ...], tuple[str, ...], str, str, tuple[str, ...]],
        outs: list[dict[Any, int]],
        ins: list[dict[Any, int]],
    ) -> bool:
        """The first class pair's boundary of channel ``c``: its path, the counts per link
        pattern in the leaving and the entered server (``outs``, ``ins``: the templates) and the
        fabric loads."""
        up, down, _, _, mid = route
        path = self._path(a, b, up, mid, down)
        if len(set(path)) != len(path):  # _via_nics takes the plain route
            return False
        self.inter_hops.append(path)
        self.touched.add(-1)
        srv, cap, edges = self.srv, self.links.capacity_list, self.links._table.edges
        load = self.fab_load[c]
        o: dict[Any, int] = {}
        n_: dict[Any, int] = {}
        for e in self.links._ids_of(path):
            u, v = edges[e]
            su, sv = srv[u], srv[v]
            if su < 0 and sv < 0:
                load[e] = load.get(e, 0) + count
                continue
            ku, kv = self._node_key(u, v), self._node_key(v, u)
            if ku is None or kv is None:  # a NIC linked to several fabric nodes
                return False
            pk = (ku, kv)
            tgt = o if a in (su, sv) else n_
            tgt[pk] = tgt.get(pk, 0) + 1
            self.pattern_caps.setdefault(pk, set()).add(cap[e])
        outs.append(o)
        ins.append(n_)
        return True

    # ------------------------------------------------------------------ the rates
    def _fabric_entries(self, fab_load: list[dict[int, int]]) -> list[list[tuple[Any, float, int]]]:
        """Per channel: (resource, capacity, count) of the fabric links it loads (``fab_load``:
        per channel, link id -> count). Fabric links of one capacity and the same count from
        every channel saturate together, as the server links of one pattern: one resource
        stands for them (issue 14: the 1,640 leaf up- and downlinks of a 2,048-server fat tree
        are a few resources)."""
        cap = self.links.capacity_list
        loads: dict[int, list[tuple[int, int]]] = {}
        for c in range(self.n_ch):
            for e, k in fab_load[c].items():
                loads.setdefault(e, []).append((c, k))
        fab_key = {e: ("f", cap[e], tuple(v)) for e, v in loads.items()}
        entries: list[list[tuple[Any, float, int]]] = []
        for c in range(self.n_ch):
            seen: dict[Any, tuple[Any, float, int]] = {}
            for e, k in fab_load[c].items():
                rkey = fab_key[e]
                if rkey not in seen:
                    seen[rkey] = (rkey, cap[e], k)
            entries.append(list(seen.values()))
        return entries

    def _rates(
        self, fab_entries: list[list[tuple[Any, float, int]]], with_segments: bool
    ) -> tuple[float, ...]:
        """Max-min fair rates of the channels over one resource per (pattern, capacity) and per
        fabric resource; the segments' hops counted where ``with_segments``."""
        return self._filled(self._incidence(fab_entries, with_segments))

    def _incidence(
        self, fab_entries: list[list[tuple[Any, float, int]]], with_segments: bool
    ) -> _Incidence:
        """What :meth:`_rates` fills: the flow (channel) and resource index and multiplier of
        every incidence entry, the resources' capacities, and the fabric entries' positions
        with their integer counts (:meth:`recounted` scales those)."""
        assert self.out_tmpl is not None and self.in_tmpl is not None
        res: dict[Any, int] = {}
        res_cap: list[float] = []
        fi: list[int] = []
        ri: list[int] = []
        mult: list[float] = []
        fabric: list[tuple[int, int]] = []

        def add(c: int, rkey: Any, capacity: float, k: int) -> None:
            r = res.get(rkey)
            if r is None:
                r = res[rkey] = len(res_cap)
                res_cap.append(capacity)
            fi.append(c)
            ri.append(r)
            mult.append(float(k))

        for c in range(self.n_ch):
            cnt: dict[Any, int] = dict(self.seg_count[c]) if with_segments else {}
            for side in (self.out_tmpl[c], self.in_tmpl[c]):
                for pk, k in side.items():
                    cnt[pk] = cnt.get(pk, 0) + k
            for pk, k in cnt.items():
                for capacity in sorted(self.pattern_caps[pk]):
                    add(c, ("s", pk, capacity), capacity, k)
            for rkey, capacity, k in fab_entries[c]:
                fabric.append((len(mult), k))
                add(c, rkey, capacity, k)
        return fi, ri, mult, res_cap, fabric

    def _filled(self, inc: _Incidence) -> tuple[float, ...]:
        """The channels' max-min fair rates over the incidence ``inc`` (:meth:`_incidence`)."""
        fi, ri, mult, res_cap, _ = inc
        if not fi:
            return (math.inf,) * self.n_ch
        return tuple(fill_rates(fi, ri, mult, res_cap, self.n_ch))

    def recounted(self, count: int, n_servers: int) -> tuple[tuple[float, ...], tuple[float, ...]]:
        """The rates and inter-server rates of this summary's ring had it ``n_servers`` servers
        of its one class instead of ``count`` (the count its one class pair was composed
        with).

        Why it is :func:`ring_summary`'s answer over ``n_servers`` servers of that class (the
        same local ids), bit for bit: with one class there is one class pair,
        ``[0, n]`` (:meth:`class_pairs`), so its boundary is composed once, from the first
        server to the second, through :meth:`_first_boundary`; what that reads of the two
        servers (routes inside them by local id, the fabric route memoised by the NICs'
        fabric links, the link capacities) is the same for every two servers of the class
        (:meth:`GroupMemo._ring_pattern <perfmodel.comm.group_memo.GroupMemo._ring_pattern>`'s
        argument), as are the segments, the ring plan (one part shape, the first server's
        NICs) and the templates. The count enters only as the amount each fabric link of a
        channel's boundary path adds to that channel's load, once per time the path crosses
        it: a load ``m * count`` becomes ``m * n_servers``, exact integers, in the same
        insertion order; :meth:`_fabric_entries` then groups the same links (scaling by
        ``n_servers / count`` is one-to-one on the count tuples) in the same order, and
        :meth:`_rates` fills the same resources with those counts. Issue 27: the
        data-parallel ring of GPUs 0 and 4 of 32 DGX A100 on rails crosses rails through the
        spine; the same ring over 16 servers (the next plan's) was composed again.

        With :attr:`KEEP_INCIDENCE` the incidence :meth:`result` filled is kept and only its
        fabric entries' multipliers are scaled (``k // count * n_servers``): by the argument
        above the grouping, its order and so every resource index, channel, capacity and
        server multiplier are those the scaled loads give (fabric resources' keys, ``"f"``
        first, never meet the servers' ``"s"`` keys), and each fabric entry's count is its
        first link's, scaled alike; the same lists, hence the same fill (issue 27: a new
        plan's data-parallel ring over a new server count, 0.28 ms on the 2-core development
        machine, most of it building the incidence anew).
        """
        kept = self._kept if self.KEEP_INCIDENCE else None
        if kept is None:
            # every load is a per-boundary crossing count times ``count`` (:meth:`boundary`),
            # so ``k // count`` is exact
            scaled = [
                {e: k // count * n_servers for e, k in load.items()} for load in self.fab_load
            ]
            entries = self._fabric_entries(scaled)
            return self._rates(entries, True), self._rates(entries, False)
        out = []
        for fi, ri, mult, res_cap, fabric in kept:
            mult = list(mult)
            for i, k in fabric:
                mult[i] = float(k // count * n_servers)
            out.append(self._filled((fi, ri, mult, res_cap, fabric)))
        return out[0], out[1]

    def result(self, pairs: list[list[int]]) -> RingSummary:
        """The summary of the composed boundaries; ``pairs`` is :meth:`class_pairs` (a ring of
        distinct servers has one class pair only where every server is of one class, so one
        pair of a class, not a server standing for itself, is a recountable pattern)."""
        entries = self._fabric_entries(self.fab_load)
        inc = (self._incidence(entries, True), self._incidence(entries, False))
        recount = None
        if len(pairs) == 1 and self.cls[0][0] == "c":
            recount = partial(self.recounted, pairs[0][1])
            self._kept = inc
        return RingSummary(
            n_channels=self.n_ch,
            rates=self._filled(inc[0]),
            inter_rates=self._filled(inc[1]),
            intra_hops=tuple(h for hops in self.seg_hops for h in hops),
            inter_hops=tuple(self.inter_hops),
            servers=frozenset(self.touched),
            fabric_free=not any(self.fab_load),
            recount=recount,
        )
