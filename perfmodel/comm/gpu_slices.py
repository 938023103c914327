"""A group that is a strided slice of a cluster's GPUs, split by server without a per-member read
(issue 27, in-process cost flat in GPU count).

A placement's groups are strided slices of ``topology.gpus``
(:meth:`Placement.dp_group <perfmodel.parallel.placement.Placement.dp_group>`). On a cluster
of copies of server 0 (:class:`~perfmodel.topology.model.ReplicaPattern`) that order is
server by server, each server's GPUs in one local-id order, so a slice's servers and local ids
are index arithmetic: member ``i`` is GPU ``r + i * step``, on server ``(r + i * step) // G``
at slot ``(r + i * step) % G`` (``G`` GPUs a server). Reading them instead through the
server tables (:class:`~perfmodel.topology.lazy.NodeTable`) makes an entry per member: the
16,384-GPU data-parallel ring made 2 x 16,384 entries (~6 ms CPU on the 2-core development
machine) to learn that it is 2,048 whole servers.
"""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING

from perfmodel.topology.lazy import NodeTable, server_of_name

if TYPE_CHECKING:
    from perfmodel.comm.nodes import NodeTables
    from perfmodel.topology import Topology

#: Switch: ``False`` makes :func:`server_runs` answer ``None`` (every caller then reads the
#: server tables member by member, the direct path its tests compare against).
ON = True

#: Smaller groups are read member by member: a made table entry reads in ~0.1 us, the slice
#: check costs ~2 us (tests lower it to 2 to compare every slice).
MIN_MEMBERS = 64


def server_runs(
    topology: Topology, links: NodeTables, members: tuple[str, ...]
) -> tuple[list[list[str]], tuple[str, ...], range] | None:
    """``(parts, local ids of each part, the parts' servers)`` of a group of GPUs that is
    ``topology.gpus[r : r + step * n : step]`` with the same number of members on each of
    its servers, or ``None`` (any other group, fewer than :data:`MIN_MEMBERS` members, or
    :data:`ON` off: read member by member).

    The answer is what the server tables give member by member, exactly:
    ``links.server`` and ``links.local_id`` are the pattern's :class:`NodeTable` s, whose
    entry of node ``n<s>/<lid>`` is ``s`` and ``lid`` by construction
    (:func:`~perfmodel.topology.symmetry.server_symmetry`), and the slice equals the members
    (one tuple comparison). With ``step`` a multiple of ``G`` each member is alone on its
    server, at slot ``r % G``; with ``step`` dividing ``G`` and the slice starting in its
    server's first ``step`` slots, each server holds ``G // step`` consecutive members at slots
    ``r % G + k * step`` (kept only where ``n`` fills whole servers). Either way the parts are
    the runs of equal servers (:func:`~perfmodel.comm.nodes.equal_runs`'s and
    :func:`~perfmodel.comm.nodes.split_by_server`'s parts, servers in order of first
    appearance), every part with the same local ids.
    """
    n = len(members)
    if not ON or n < max(2, MIN_MEMBERS):
        return None
    p = links._pattern
    if p is None or type(links.server) is not NodeTable or type(links.local_id) is not NodeTable:
        return None
    slots = _slots(topology)
    if slots is None:
        return None
    g, slot_of, lid_set = slots
    at = []
    for name in members[:2]:
        s = server_of_name(name, p.servers, lid_set)
        if s is None:
            return None
        slot = slot_of.get(name[name.index("/") + 1 :])
        if slot is None:
            return None
        at.append(s * g + slot)
    r, step = at[0], at[1] - at[0]
    if step <= 0 or topology.gpus[r : r + step * n : step] != members:
        return None
    lids = list(slot_of)
    s0, slot0 = divmod(r, g)
    if step % g == 0:  # one member a server
        return [[m] for m in members], (lids[slot0],), range(s0, s0 + n * (step // g), step // g)
    if g % step or slot0 >= step or n % (g // step):
        return None
    k = g // step  # members a server, at slots slot0, slot0 + step, ...
    parts = list(map(list, zip(*[iter(members)] * k, strict=True)))
    return parts, tuple(lids[slot0::step]), range(s0, s0 + n // k)


@lru_cache(maxsize=64)
def _slots(topology: Topology) -> tuple[int, dict[str, int], frozenset[str]] | None:
    """``(G, local id -> slot in server 0's GPU order, every local id)`` of a cluster of copies
    (``topology.gpus`` is server by server, ``G`` GPUs each), or ``None`` (not one); kept per
    topology as :func:`~perfmodel.topology.symmetry.server_symmetry`."""
    p = topology.pattern
    if p is None or not p.describes(topology):
        return None
    gpus = topology.gpus
    g = topology.gpus_per_node  # every server is a copy of server 0
    if g * p.servers != len(gpus):
        return None
    cut = len(p.prefix(0))
    return g, {x[cut:]: i for i, x in enumerate(gpus[:g])}, frozenset(p.local_ids)
