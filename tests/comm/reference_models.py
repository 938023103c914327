"""Reference models for the tests of the comm layer's sharing (issue 14): the same
:class:`~perfmodel.comm.CommCostModel` with every reuse between groups switched off, and a
topology where two servers' fabric distance differs (helpers of tests/comm)."""

from __future__ import annotations

import dataclasses

from perfmodel.comm import CommCostModel
from perfmodel.topology import Topology, load_system


def direct_model(topo: Topology) -> CommCostModel:
    """A model that analyses every group itself: no translated result, relabelled image (of
    another server or of other GPUs of one server), ring
    pattern or shared numbers."""
    model = CommCostModel(topo)
    model.groups.collective_shape = lambda members, algo: None  # type: ignore[method-assign]
    model.groups._shape_group = lambda members: None  # type: ignore[method-assign]
    model.groups._pattern_key = lambda members: None  # type: ignore[method-assign]
    model.groups.numbers_key = lambda members: None  # type: ignore[method-assign]
    model.groups._image_group = lambda members: None  # type: ignore[method-assign]
    return model


def direct_terms(topo: Topology, pairs: tuple[tuple[str, str], ...]) -> object:
    """:meth:`Transfers.terms` of ``pairs`` on their own routes: neither a canonical
    image's nor a twin server's nor another set of the same name-free shape's sends read."""
    model = CommCostModel(topo)
    model.transfers._shape = lambda p: None  # type: ignore[method-assign]
    model.transfers._canonical_pairs = lambda p: None  # type: ignore[method-assign]
    model.transfers._twin_pairs = lambda p: None  # type: ignore[method-assign]
    return model.transfers.terms(pairs)


def thin_spine_fat_tree() -> Topology:
    """Six DGX A100 on a two-level fat tree (leaves of 3 servers) whose spine links carry a
    quarter of an HDR NIC's 25 GB/s: a ring or a send across leaves is slower than one inside
    a leaf. Servers 0-1 and 3-4 form two classes (2 and 5 hold the leaves' uplinks apart)."""
    topo = load_system("dgx-a100", nodes=6, fabric_topology="fat-tree")
    g = topo.graph.copy()
    for u, v, d in g.edges(data=True):
        if "spine" in u or "spine" in v:
            d["bandwidth_Bps"] = 25e9 / 4
    return dataclasses.replace(topo, graph=g, pattern=None)
