"""Per-server NIC tables of a cluster that the server-level sharing factor reads
(:func:`perfmodel.parallel.costs._nic_sharing_factor`): each GPU local id's nearest fabric
NICs with the GPU-to-NIC and NIC port goodputs, and each server's NIC count; read off the first
server where the cluster's servers are copies (no whole-graph pass). Topology facts, read only
by that factor (moved out of ``costs`` in session 21)."""

from __future__ import annotations

from functools import lru_cache

from perfmodel.topology.model import Topology
from perfmodel.topology.routing import path_edges, route
from perfmodel.topology.schema import NodeKind, effective_bandwidth


@lru_cache(maxsize=64)
def near_nic_sets(topology: Topology) -> dict[str, tuple[tuple[str, ...], float, float]]:
    """Per GPU local id (first server; cluster servers are identical): the local ids of the
    fabric NICs at the smallest hop distance, the GPU -> NIC route's goodput and the NIC's
    fabric port goodput (bytes/s)."""
    g = topology.graph
    server = topology.server_of(topology.gpus[0])
    # that server's nodes alone (Topology.server_nodes reads them off the build record where
    # there is one: a pass over the whole graph makes every server of a cluster built by
    # copying, topology/lazy.py: all 512 servers of GPT-3 175B tp8 pp8 dp64 on 4096 A100)
    nodes = ((n, g.nodes[n]) for n in topology.server_nodes(server))
    nics = [
        n
        for n, d in nodes
        if d["kind"] is NodeKind.NIC
        and int(d["server"]) == server
        and any(int(g.nodes[v]["server"]) == -1 for v in g.neighbors(n))
    ]
    out: dict[str, tuple[tuple[str, ...], float, float]] = {}
    if not nics:
        return out
    port = {
        nic: max(
            effective_bandwidth(g, nic, v)
            for v in g.neighbors(nic)
            if int(g.nodes[v]["server"]) == -1
        )
        for nic in nics
    }
    for gpu in topology.gpus:
        if topology.server_of(gpu) != server:
            break
        paths = {nic: route(topology, gpu, nic) for nic in nics}
        d = min(len(p) for p in paths.values())
        best = sorted(nic for nic, p in paths.items() if len(p) == d)
        b_gpu = min(
            min(effective_bandwidth(g, u, v) for u, v in path_edges(paths[nic])) for nic in best
        )
        out[str(g.nodes[gpu]["local_id"])] = (
            tuple(str(g.nodes[n]["local_id"]) for n in best),
            b_gpu,
            min(port[n] for n in best),
        )
    return out


@lru_cache(maxsize=64)
def nics_per_server(topology: Topology) -> dict[int, int]:
    """Fabric and host NICs per server index (servers without one are absent): counted on
    server 0 and given to every server where the cluster's servers are copies of it, else
    counted over the whole graph."""
    out: dict[int, int] = {}
    p = topology.pattern
    if p is not None and p.describes(topology):  # copies of server 0 (no whole-graph pass)
        g = topology.graph
        k = sum(g.nodes[n]["kind"] is NodeKind.NIC for n in topology.server_nodes(0))
        return dict.fromkeys(range(p.servers), k) if k else out
    for _, d in topology.graph.nodes(data=True):
        if d["kind"] is NodeKind.NIC:
            out[int(d["server"])] = out.get(int(d["server"]), 0) + 1
    return out
