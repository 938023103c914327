"""Topologies as networkx graphs: schema, file format, builders, routing and analysis.

- :func:`load_system` / :func:`list_systems`: the catalogue (``topologies/*.toml``);
  :func:`custom_system`: hardware from parts (``--system custom``).
- :func:`route`, :func:`path_bandwidth`, :func:`path_latency`: the routing rule.
- :mod:`perfmodel.topology.analysis`: bandwidth matrix, bisection, NCCL-style rings and trees,
  the ``nvidia-smi topo -m`` matrix.
- :mod:`perfmodel.topology.importers`: ``nvidia-smi topo -m`` text, NCCL topology XML, JSON.
- :mod:`perfmodel.topology.draw`: PNG pictures (imports matplotlib lazily).
"""

from typing import TYPE_CHECKING

from perfmodel._lazy import lazy_exports

if TYPE_CHECKING:
    from perfmodel.topology.analysis import (
        Bisection,
        Ring,
        RingSet,
        Tree,
        bandwidth_matrix,
        bisection_bandwidth,
        nccl_rings,
        nccl_trees,
        smi_matrix,
    )
    from perfmodel.topology.builders import list_systems, load_system
    from perfmodel.topology.cluster import build_cluster
    from perfmodel.topology.custom import IntraNode, custom_system
    from perfmodel.topology.export import export_dict, from_dict
    from perfmodel.topology.importers import import_topology
    from perfmodel.topology.model import FabricSpec, Topology
    from perfmodel.topology.routing import path_bandwidth, path_latency, route
    from perfmodel.topology.schema import NodeKind, effective_bandwidth, validate_graph

# name -> submodule, imported on first use (issue 14, cold start: a prediction needs no analysis)
_EXPORTS = {
    "Bisection": "analysis",
    "Ring": "analysis",
    "RingSet": "analysis",
    "Tree": "analysis",
    "bandwidth_matrix": "analysis",
    "bisection_bandwidth": "analysis",
    "nccl_rings": "analysis",
    "nccl_trees": "analysis",
    "smi_matrix": "analysis",
    "build_cluster": "cluster",
    "list_systems": "builders",
    "load_system": "builders",
    "IntraNode": "custom",
    "custom_system": "custom",
    "export_dict": "export",
    "from_dict": "export",
    "import_topology": "importers",
    "FabricSpec": "model",
    "Topology": "model",
    "path_bandwidth": "routing",
    "path_latency": "routing",
    "route": "routing",
    "NodeKind": "schema",
    "effective_bandwidth": "schema",
    "validate_graph": "schema",
}
__getattr__, __dir__ = lazy_exports(globals(), _EXPORTS)

__all__ = [
    "Bisection",
    "FabricSpec",
    "IntraNode",
    "NodeKind",
    "Ring",
    "RingSet",
    "Topology",
    "Tree",
    "bandwidth_matrix",
    "bisection_bandwidth",
    "build_cluster",
    "custom_system",
    "effective_bandwidth",
    "export_dict",
    "from_dict",
    "import_topology",
    "list_systems",
    "load_system",
    "nccl_rings",
    "nccl_trees",
    "path_bandwidth",
    "path_latency",
    "route",
    "smi_matrix",
    "validate_graph",
]
