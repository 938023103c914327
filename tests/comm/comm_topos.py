"""Tiny synthetic topologies with hand-computable numbers (helpers of tests/comm)."""

from __future__ import annotations

import networkx as nx

from perfmodel.hardware.links import LinkFamily
from perfmodel.topology import Topology, validate_graph
from perfmodel.topology.schema import NodeKind

GPU_MODEL = "V100-SXM2-16GB"


def add_gpu(g: nx.Graph, name: str, index: int, server: int = 0) -> None:
    g.add_node(
        name, kind=NodeKind.GPU, server=server, local_id=name, model=GPU_MODEL, gpu_index=index
    )


def link(
    g: nx.Graph,
    a: str,
    b: str,
    bw_Bps: float,
    lat_s: float = 0.0,
    family: LinkFamily = LinkFamily.NVLINK,
    count: int = 1,
    tech: str = "custom",
) -> None:
    g.add_edge(
        a,
        b,
        tech=tech,
        family=family,
        count=count,
        bandwidth_Bps=bw_Bps,
        efficiency=1.0,
        latency_s=lat_s,
    )


def star(
    n: int, bw_Bps: float, lat_s: float = 0.0, slow: dict[int, float] | None = None
) -> Topology:
    """``n`` GPUs on one switch, each by one link of ``bw_Bps`` (``slow`` overrides some GPUs)."""
    g = nx.Graph()
    g.add_node("sw", kind=NodeKind.NVSWITCH, server=0, local_id="sw")
    for i in range(n):
        add_gpu(g, f"gpu{i}", i)
        link(g, f"gpu{i}", "sw", (slow or {}).get(i, bw_Bps), lat_s, LinkFamily.NVSWITCH)
    validate_graph(g, source="star")
    return Topology("star", g)


def two_level(bw_Bps: float, lat_s: float) -> Topology:
    """4 GPUs: gpu0, gpu1 on switch a; gpu2, gpu3 on switch b; a-b joined (one more hop)."""
    g = nx.Graph()
    for s in ("a", "b"):
        g.add_node(s, kind=NodeKind.PCIE_SWITCH, server=0, local_id=s)
    for i in range(4):
        add_gpu(g, f"gpu{i}", i)
        link(g, f"gpu{i}", "a" if i < 2 else "b", bw_Bps, lat_s, LinkFamily.PCIE)
    link(g, "a", "b", bw_Bps, lat_s, LinkFamily.PCIE)
    validate_graph(g, source="two_level")
    return Topology("two_level", g)
