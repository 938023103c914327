"""Topologies as networkx graphs: schema, file format, builders, routing and analysis."""

from perfmodel.topology.builders import build_cluster, list_systems, load_system
from perfmodel.topology.model import FabricSpec, Topology
from perfmodel.topology.routing import path_bandwidth, path_latency, route
from perfmodel.topology.schema import NodeKind, effective_bandwidth, validate_graph

__all__ = [
    "FabricSpec",
    "NodeKind",
    "Topology",
    "build_cluster",
    "effective_bandwidth",
    "list_systems",
    "load_system",
    "path_bandwidth",
    "path_latency",
    "route",
    "validate_graph",
]
