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

# submodule -> the names it exports, imported on first use (the package's one list of them at
# run time; issue 14, cold start: a prediction needs no analysis)
__getattr__, __dir__, __all__ = lazy_exports(
    globals(),
    {
        "analysis": (
            "Bisection",
            "Ring",
            "RingSet",
            "Tree",
            "bandwidth_matrix",
            "bisection_bandwidth",
            "nccl_rings",
            "nccl_trees",
            "smi_matrix",
        ),
        "builders": ("list_systems", "load_system"),
        "cluster": ("build_cluster",),
        "custom": ("IntraNode", "custom_system"),
        "export": ("export_dict", "from_dict"),
        "importers": ("import_topology",),
        "model": ("FabricSpec", "Topology"),
        "routing": ("path_bandwidth", "path_latency", "route"),
        "schema": ("NodeKind", "effective_bandwidth", "validate_graph"),
    },
)
