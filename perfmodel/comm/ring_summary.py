"""The analysis of a group's ring channels over servers built alike, without listing them.

:func:`ring_summary` gives what :func:`~perfmodel.comm.channels.build_channels` and
:func:`~perfmodel.comm.channels.channel_rates` would (the channels' count and max-min fair
rates, the hops' paths up to renaming) from the first server's rings and one boundary per pair
of server classes (issue 14: a 16,384-rank ring is analysed without its 262,144 hop paths).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from perfmodel.comm.channels import fill_rates, ring_plan
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
    boundary's count times that count).
    """

    n_channels: int
    rates: tuple[float, ...]
    inter_rates: tuple[float, ...]
    intra_hops: tuple[tuple[str, ...], ...]
    inter_hops: tuple[tuple[str, ...], ...]
    servers: frozenset[int]
    fabric_free: bool = False


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
    topo = links.topology
    parts = split_by_server(topo, members, links.server)
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
    plan = ring_plan(links, parts, max_channels)
    n_ch = len(plan.choices)
    seg_hops: list[tuple[tuple[str, ...], ...]] = []
    ends: list[tuple[str, str]] = []
    for c, (rot, _, _) in enumerate(plan.choices):
        ring = plan.first[c % len(plan.first)]
        k = len(ring.order)
        r = rot % k
        seg = ring.order[r:] + ring.order[:r]
        seg_hops.append((ring.hops[r:] + ring.hops[:r])[: k - 1])
        ends.append((lid[seg[-1]], lid[seg[0]]))
    if any(links.charge_p2p(h) != 1.0 for hops in seg_hops for h in hops):
        return None
    cap = links.capacity_list
    edges = links._table.edges  # by id, as the ids are handed out
    kind = links._table.kind
    by_local = links.by_local
    fabric = links.server_nodes.get(-1, frozenset())
    twin = sym.twin.get(servers[0], servers[0])
    inside: dict[tuple[str, str], tuple[str, ...] | None] = {}

    def inside_lids(x: str, y: str) -> tuple[str, ...] | None:
        # DirectedLinks.route between local ids x and y of any server of the group: the twin's
        # route where it provably stays inside (_twin_route), by local id; None: not shown
        key = (x, y)
        if key not in inside:
            zs, zd = by_local[twin][x], by_local[twin][y]
            path = links.route(zs, zd)
            ok = links._stays_inside(zs, zd, path)
            inside[key] = tuple(lid[n] for n in path) if ok else None
        return inside[key]

    def fabric_inner(x_out: str, x_in: str) -> tuple[str, ...] | None:
        # DirectedLinks.route between NICs of two servers: the fabric switches memoised by the
        # NICs' fabric links (_fabric_route; a class's first servers have the same links)
        # (route() of two NICs of different servers is this search, on the first servers of
        # their classes; called here directly, no server is made)
        pattern = links._fabric_pattern(x_out, x_in, fabric)
        hit = links._fabric_inner.get(pattern)
        if hit is None:
            links._fabric_route(x_out, x_in, fabric)
            hit = links._fabric_inner.get(pattern)
        return hit

    one_link: dict[str, bool] = {}

    def node_key(x: str, other: str) -> tuple[str, ...] | None:
        # a server node by local id; a fabric node as the one fabric node of ``other``
        if srv[x] >= 0:
            return ("s", lid[x])
        hit = one_link.get(other)
        if hit is None:
            hit = one_link[other] = len(links.fabric_neighbours(other, fabric)) == 1
        return ("F",) if hit else None

    # per-server link patterns -> capacities they have in some server
    pattern_caps: dict[Any, set[float]] = {}
    seg_count: list[dict[Any, int]] = []
    for hops in seg_hops:
        cnt: dict[Any, int] = {}
        for h in hops:
            for e in links._ids_of(h):
                u, v = edges[e]
                pk = (("s", lid[u]), ("s", lid[v]))
                cnt[pk] = cnt.get(pk, 0) + 1
                pattern_caps.setdefault(pk, set()).add(cap[e])
        seg_count.append(cnt)
    cls = [("c", sym.cls[s]) if s in sym.cls else ("u", s) for s in servers]
    n_srv = len(servers)
    pairs: dict[tuple[Any, Any], list[int]] = {}  # class pair -> [a boundary's index, count]
    for i in range(n_srv):
        hit = pairs.setdefault((cls[i], cls[(i + 1) % n_srv]), [i, 0])
        hit[1] += 1
    inter_hops: list[tuple[str, ...]] = []
    touched: set[int] = set(servers)
    out_tmpl: list[dict[Any, int]] | None = None  # per channel: counts on the leaving server
    in_tmpl: list[dict[Any, int]] | None = None  # per channel: counts on the entered server
    fab_load: list[dict[int, int]] = [{} for _ in range(n_ch)]
    # a later class pair of servers of the build record: its fabric part and NIC links per
    # (exit NIC's fabric side, entry NIC's fabric side), what they are a function of
    # (_fabric_pattern: servers of the record are never linked to each other); the
    # boundaries of a 2,048-server fat tree are 2,047 class pairs, a few sides each
    by_sides: dict[Any, tuple[tuple[int, ...], float, float]] = {}
    for i, count in pairs.values():
        a, b = servers[i], servers[(i + 1) % n_srv]
        outs: list[dict[Any, int]] = []
        ins: list[dict[Any, int]] = []
        sides_a = sides_b = None
        if out_tmpl is not None and not links._table.has_extra:
            sides_a, sides_b = links._attach_sides(a), links._attach_sides(b)
        for c, (_, exit_nic, entry_nic) in enumerate(plan.choices):
            if exit_nic is None or entry_nic is None:
                return None
            l_out, l_in = ends[c]
            n_out, n_in = plan.local_of[exit_nic], plan.local_of[entry_nic]
            side_key = None
            if sides_a is not None and sides_b is not None:
                so, si = sides_a.get(n_out), sides_b.get(n_in)
                if so is not None and si is not None:
                    side_key = (so, si)
                    got = by_sides.get(side_key)
                    if got is None:
                        # _fabric_pattern of the two NICs (servers of the record are never
                        # linked); the NIC names are made only for a search
                        pattern = (so, si, False)
                        mid = links._fabric_inner.get(pattern)
                        if mid is None:
                            x_out, x_in = by_local[a].get(n_out), by_local[b].get(n_in)
                            if x_out is None or x_in is None:
                                return None
                            links._fabric_route(x_out, x_in, fabric, pattern)
                            mid = links._fabric_inner.get(pattern)
                        # node_key's test: each NIC linked to one fabric node, the link's
                        # capacity in its side
                        if not mid or len(so) != 1 or len(si) != 1:
                            return None
                        if so[0][0] != mid[0] or si[0][0] != mid[-1]:  # pragma: no cover
                            raise AssertionError("a fabric route off the NICs' fabric sides")
                        got = by_sides[side_key] = (links._ids_of(mid), so[0][1], si[0][1])
                    ids, cap_o, cap_i = got
                    pattern_caps[(("s", n_out), ("F",))].add(cap_o)
                    pattern_caps[(("F",), ("s", n_in))].add(cap_i)
                    load = fab_load[c]
                    for e in ids:
                        load[e] = load.get(e, 0) + count
                    continue
            up, down = inside_lids(l_out, n_out), inside_lids(n_in, l_in)
            x_out, x_in = by_local[a].get(n_out), by_local[b].get(n_in)
            if up is None or down is None or x_out is None or x_in is None:
                return None
            mid = fabric_inner(x_out, x_in)
            if not mid:  # not memoised (the search fell back), or two NICs linked directly
                return None
            if out_tmpl is not None:
                # a later class pair: the parts inside the two servers are the first pair's by
                # local id (checked there); only the fabric part and the NICs' links are new
                for x in (x_out, x_in):
                    if node_key(mid[0], x) is None:  # a NIC linked to several fabric nodes
                        return None
                cap_o, cap_i = kind(mid[0], x_out)[0][0], kind(mid[-1], x_in)[0][0]
                pattern_caps[(("s", n_out), ("F",))].add(cap_o)
                pattern_caps[(("F",), ("s", n_in))].add(cap_i)
                load = fab_load[c]
                ids = links._ids_of(mid)
                for e in ids:
                    load[e] = load.get(e, 0) + count
                if side_key is not None:
                    by_sides[side_key] = (ids, cap_o, cap_i)
                # The hop's latency outside NCCL's tables is 0 unless some link met so far
                # has such latency: its fabric and NIC links were just met, and its links
                # inside the two servers have the attributes of the first pair's (every
                # server has one inside twin). The caller takes the largest: a 0 adds nothing.
                if links._table.has_extra:
                    inter_hops.append(
                        (*(by_local[a][x] for x in up), *mid, *(by_local[b][x] for x in down))
                    )
                continue
            path = (*(by_local[a][x] for x in up), *mid, *(by_local[b][x] for x in down))
            if len(set(path)) != len(path):  # _via_nics takes the plain route
                return None
            inter_hops.append(path)
            touched.add(-1)
            o: dict[Any, int] = {}
            n_: dict[Any, int] = {}
            for e in links._ids_of(path):
                u, v = edges[e]
                su, sv = srv[u], srv[v]
                if su < 0 and sv < 0:
                    fab_load[c][e] = fab_load[c].get(e, 0) + count
                    continue
                ku, kv = node_key(u, v), node_key(v, u)
                if ku is None or kv is None:  # a NIC linked to several fabric nodes
                    return None
                pk = (ku, kv)
                tgt = o if a in (su, sv) else n_
                tgt[pk] = tgt.get(pk, 0) + 1
                pattern_caps.setdefault(pk, set()).add(cap[e])
            outs.append(o)
            ins.append(n_)
        if out_tmpl is None:
            out_tmpl, in_tmpl = outs, ins
    assert out_tmpl is not None and in_tmpl is not None
    # fabric links of one capacity and the same count from every channel saturate together,
    # as the server links of one pattern (above): one resource stands for them (issue 14: the
    # 1,640 leaf up- and downlinks of a 2,048-server fat tree are a few resources)
    loads: dict[int, list[tuple[int, int]]] = {}
    for c in range(n_ch):
        for e, k in fab_load[c].items():
            loads.setdefault(e, []).append((c, k))
    fab_key = {e: ("f", cap[e], tuple(v)) for e, v in loads.items()}
    fab_entries: list[list[tuple[Any, float, int]]] = []  # per channel: (resource, capacity, k)
    for c in range(n_ch):
        seen: dict[Any, tuple[Any, float, int]] = {}
        for e, k in fab_load[c].items():
            rkey = fab_key[e]
            if rkey not in seen:
                seen[rkey] = (rkey, cap[e], k)
        fab_entries.append(list(seen.values()))

    def rates(with_segments: bool) -> tuple[float, ...]:
        res: dict[Any, int] = {}
        res_cap: list[float] = []
        fi: list[int] = []
        ri: list[int] = []
        mult: list[float] = []

        def add(c: int, rkey: Any, capacity: float, k: int) -> None:
            r = res.get(rkey)
            if r is None:
                r = res[rkey] = len(res_cap)
                res_cap.append(capacity)
            fi.append(c)
            ri.append(r)
            mult.append(float(k))

        for c in range(n_ch):
            cnt: dict[Any, int] = dict(seg_count[c]) if with_segments else {}
            for side in (out_tmpl[c], in_tmpl[c]):
                for pk, k in side.items():
                    cnt[pk] = cnt.get(pk, 0) + k
            for pk, k in cnt.items():
                for capacity in sorted(pattern_caps[pk]):
                    add(c, ("s", pk, capacity), capacity, k)
            for rkey, capacity, k in fab_entries[c]:
                add(c, rkey, capacity, k)
        if not fi:
            return (math.inf,) * n_ch
        return tuple(fill_rates(fi, ri, mult, res_cap, n_ch))

    return RingSummary(
        n_channels=n_ch,
        rates=rates(True),
        inter_rates=rates(False),
        intra_hops=tuple(h for hops in seg_hops for h in hops),
        inter_hops=tuple(inter_hops),
        servers=frozenset(touched),
        fabric_free=not any(fab_load),
    )
