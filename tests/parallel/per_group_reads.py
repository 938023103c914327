"""The per-group reads of a set of groups' servers, the reference versions of
``perfmodel.parallel.costs``'s one-pass reads (issue 27: ``_flat_reads``, ``_flat_indices``,
``_flat_shape``), which ``_nic_shape`` and ``_route_shape`` read group by group before:
``tests/parallel/test_route_shape.py`` and ``tests/parallel/test_nic_sharing.py`` compare the
one-pass shapes with these."""

from __future__ import annotations

from collections.abc import Mapping
from itertools import chain
from typing import Any

from perfmodel.topology.symmetry import ServerSymmetry


def servers_and_lids(
    sym: ServerSymmetry, groups: tuple[tuple[str, ...], ...]
) -> tuple[list[list[int]], tuple[tuple[str, ...], ...]] | None:
    """Each group's members' servers and local ids, or ``None`` where a name is in no
    server's table."""
    server, local_id = sym.server, sym.local_id
    try:
        srvs = [list(map(server.__getitem__, g)) for g in groups]
        lids = tuple(tuple(map(local_id.__getitem__, g)) for g in groups)
    except KeyError:  # a name in no server's table
        return None
    return srvs, lids


def server_indices(
    cls: Mapping[int, Any], srvs: list[list[int]]
) -> tuple[tuple[Any, ...], tuple[tuple[int, ...], ...]] | None:
    """The classes of the groups' servers in order of first appearance and each member's
    server as its index in that order, or ``None`` where a server is in no class."""
    order = dict.fromkeys(chain.from_iterable(srvs))
    classes = tuple(map(cls.get, order))
    if None in classes:
        return None
    rank = {srv: i for i, srv in enumerate(order)}
    return classes, tuple(tuple(map(rank.__getitem__, sv)) for sv in srvs)
