"""The vectorised whole-graph route search equals the scalar one, node for node."""

import pytest

from perfmodel.topology import load_system
from perfmodel.topology import routing as R


@pytest.mark.parametrize(
    ("system", "nodes"), [("dgx-a100", 24), ("dgx1-v100", 20), ("pcie-8x-server", 12)]
)
def test_vectorised_search_matches_scalar(system, nodes, monkeypatch):
    topo = load_system(system, nodes=nodes)
    adj = R._adjacency(topo)
    for dst in topo.gpus[:: max(1, len(topo.gpus) // 7)]:
        vec = R._best_paths_vectorised(topo, adj.index[dst])
        monkeypatch.setattr(R, "_VECTOR_MIN_NODES", 10**9)
        R._best_paths.cache_clear()
        ref = R._best_paths(topo, dst, None)
        monkeypatch.setattr(R, "_VECTOR_MIN_NODES", 2000)
        R._best_paths.cache_clear()
        assert list(vec[0]) == list(ref[0]), f"BFS distances differ for {dst}"
        assert list(vec[1]) == list(ref[1]), f"next hops differ for {dst}"
