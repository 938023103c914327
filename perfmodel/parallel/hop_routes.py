"""Ring-path sharing factors read off route templates per hop kind (issue 27).

:func:`perfmodel.parallel.costs.ring_sharing_factor` of a new shape of concurrent groups
routed every ring hop of the groups' canonical image
(:func:`~perfmodel.parallel.costs._canonical_groups`), checked every route against a path
through a third server (:func:`~perfmodel.parallel.costs._routes_map_onto`) and counted the
links per name: ~0.6 ms for the 64 hops of the first pipeline stage of a GPT-3 175B dp2 tp32
pp16 plan on 128 DGX A100, once per plan. A hop between two servers is one of few kinds (the
servers' classes, the two local ids, which server sorts first), and every hop of a kind has
one route up to the server exchange, so :func:`templated_factor` routes one hop per kind and
counts the others' links off that route (:func:`hop_template`).
"""

from __future__ import annotations

from collections import Counter
from functools import lru_cache, partial
from typing import Any

from perfmodel._memo import BoundedMemo
from perfmodel.topology import Topology, effective_bandwidth, route
from perfmodel.topology.routing import path_edges, shorter_than_third_server
from perfmodel.topology.symmetry import server_symmetry

#: A hop's route as links between roles: ``((role, id), (role, id))`` per link, a role ``0``
#: (the hop's source server, id a local id), ``1`` (its destination server, id a local id) or
#: ``-1`` (the fabric, id the node's name), with the link of the route it was read off (its
#: nodes' names: the same effective bandwidth, :func:`link_bandwidth_Bps`).
Template = tuple[tuple[tuple[tuple[int, str], tuple[int, str]], ...], tuple[tuple[str, str], ...]]

#: :func:`hop_template` by ``(topology, source class, destination class, source local id,
#: destination local id, whether the source server sorts first (one class) or None)``.
_TEMPLATES: BoundedMemo[tuple[Any, ...], Template | None] = BoundedMemo(65_536)


def hop_template(topology: Topology, src: str, dst: str) -> Template | None:
    """The route of hop ``src -> dst`` (two nodes of two servers) as links between roles, or
    ``None`` where the route is not shorter than any path through a third server
    (:func:`~perfmodel.topology.routing.shorter_than_third_server`), or passes one.

    Why every hop of the same kind (the key of ``_TEMPLATES``) has this route with the roles
    read as its own servers, bit for bit, where it holds for one: exchanging the servers of one
    class is a graph automorphism keeping every node and edge attribute
    (:mod:`perfmodel.topology.symmetry`), so the fewest hops between a pair and the fabric
    distances of a local id are the same for every hop of the kind, and the third-server bound
    holds for all or for none. Under the bound, :func:`~perfmodel.topology.route` of a hop
    between two servers is the image of the route between the same local ids in the first
    servers of their classes, taken in the hop's own name order for one class
    (:meth:`~perfmodel.topology.symmetry.ServerSymmetry.pair_route` in
    :func:`perfmodel.topology.routing._route_by_symmetry`; for that pair itself, its own
    search, the route mapped): one canonical route per kind, mapped by a map sending its
    servers to the hop's source and destination and fixing the fabric, so the role form is
    the kind's. The automorphism keeps each link's ``bandwidth_Bps`` and ``efficiency``
    (:func:`~perfmodel.topology.effective_bandwidth` reads only those), so the links of the
    route the template was read off have every hop's bandwidths, link by link.
    """
    path = route(topology, src, dst)
    if not shorter_than_third_server(topology, src, dst, len(path) - 1):
        return None
    sym = server_symmetry(topology)
    server, local_id = sym.server, sym.local_id
    ends = {server[src]: 0, server[dst]: 1}

    def role(node: str) -> tuple[int, str] | None:
        s = server.get(node, -1)
        if s < 0:
            return (-1, node)
        r = ends.get(s)
        return None if r is None else (r, local_id[node])

    links = []
    named = tuple(path_edges(path))
    for u, v in named:
        ru, rv = role(u), role(v)
        if ru is None or rv is None:  # a third server's node (not under the bound)
            return None
        links.append((ru, rv))
    return tuple(links), named


@lru_cache(maxsize=65_536)
def link_bandwidth_Bps(topology: Topology, u: str, v: str) -> float:
    """:func:`~perfmodel.topology.effective_bandwidth` of link ``u -> v`` (bytes/s), kept:
    :func:`templated_factor` reads group 0's links' bandwidths off the links of the routes
    its templates were read from."""
    return effective_bandwidth(topology.graph, u, v)


def templated_factor(topology: Topology, groups: tuple[tuple[str, ...], ...]) -> float | None:
    """:func:`perfmodel.parallel.costs._ring_sharing_factor` of ``groups`` (the ring path:
    64 ranks or fewer), bit for bit, with each ring hop's links counted off its kind's
    :func:`hop_template`; ``None`` where a hop's two nodes are on one server, a member is
    outside the classes of interchangeable servers, or a kind has no template (the caller
    then takes the existing path).

    Why the same value: each hop's template, read with the roles as the hop's servers, is
    the hop's route (:func:`hop_template`); a link is named here by ``(server, local id)``
    for a server's node and ``(-1, name)`` for a fabric node, one key per node (no two nodes
    of a server share a local id), so the integer loads per link are those counted per name,
    and each link's bandwidth is its own. The factor's two minima (of ``bandwidth / load``
    over group 0's links) take the same floats in another order, and a minimum of floats does
    not depend on the order: the same ``max(1, alone / shared)``.

    The kind's last field (whether the source server sorts first, for one class) is
    defensive: no system is known where it changes a factor. Under the third-server bound a
    route is a source-server part, a fabric part and a destination-server part (a path that
    left a server and came back is as long as one through a third server), so the search's
    name comparisons between two candidates are within one server, between a server and the
    fabric, or within the fabric; the server exchange keeps all of these for servers of one
    class (a class keeps the servers' name order against the fabric's nodes), so the route
    of either name order is the image of the other's: every catalogue system's GPU
    local-id pairs are mirrored (``tests/parallel/test_hop_routes.py``, 4 servers, rails and
    fat tree). A synthetic cluster whose fabric names sort between two servers' names
    routes the two orders differently, but those servers are then in no common class. The bit is kept because that argument rests on
    the search's present tie-breaks (fewest hops, widest, lowest latency, smallest names,
    :mod:`perfmodel.topology.routing`), which ``_route_shape`` does not assume either (it
    tests :meth:`~perfmodel.topology.symmetry.ServerSymmetry.mirrored`); it costs one more
    template where a ring's hops run both ways between two servers of a class.
    """
    sym = server_symmetry(topology)
    server, local_id, cls, position = sym.server, sym.local_id, sym.cls, sym.position
    bandwidth: dict[tuple[tuple[int, str], tuple[int, str]], float] = {}
    main: Counter[tuple[tuple[int, str], tuple[int, str]]] = Counter()
    every: Counter[tuple[tuple[int, str], tuple[int, str]]] = Counter()
    for k, grp in enumerate(groups):
        n = len(grp)
        if n < 2:
            continue
        load = main if k == 0 else every
        for i, a in enumerate(grp):
            b = grp[(i + 1) % n]
            if a == b:
                continue  # route (a,): no link
            sa, sb = server.get(a, -1), server.get(b, -1)
            ca, cb = cls.get(sa), cls.get(sb)
            if sa == sb or ca is None or cb is None:
                return None
            la, lb = local_id[a], local_id[b]
            kind = (topology, ca, cb, la, lb, position[sa] < position[sb] if ca == cb else None)
            t = _TEMPLATES.get(kind, partial(hop_template, topology, a, b))
            if t is None:
                return None
            links, named = t
            at = {0: sa, 1: sb, -1: -1}
            keyed = [((at[ru], xu), (at[rv], xv)) for (ru, xu), (rv, xv) in links]
            load.update(keyed)
            if k == 0:
                for e, (u, v) in zip(keyed, named, strict=True):
                    bandwidth[e] = link_bandwidth_Bps(topology, u, v)
    if not main:
        return 1.0
    every.update(main)
    alone = min(bandwidth[e] / n for e, n in main.items())
    shared = min(bandwidth[e] / every[e] for e in main)
    return max(1.0, alone / shared)
