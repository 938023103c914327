"""``Topology.servers_used``: the GPUs of each server among the first ``n`` in rank order, read
off the build pattern of a cluster (issue 27: ``predict``'s hardware line read every GPU node
of a 16,384-GPU cluster), equal to the count over every GPU's node, with and without one."""

from __future__ import annotations

import dataclasses

import pytest

from perfmodel.api import Scenario, topology_of


def _counted(topo, n: int) -> dict[int, int]:
    out: dict[int, int] = {}
    for g in topo.gpus[: max(n, 0)]:
        out[topo.server_of(g)] = out.get(topo.server_of(g), 0) + 1
    return out


@pytest.mark.parametrize(("system", "nodes"), [("dgx-a100", 3), ("dgx-h100", 2), ("dgx1-v100", 4)])
def test_servers_used_equals_the_count_over_the_nodes(system: str, nodes: int) -> None:
    topo = topology_of(Scenario(system=system, nodes=nodes, model="gpt2"))
    assert topo.pattern is not None and topo.pattern.describes(topo)  # the pattern's path
    plain = dataclasses.replace(topo, pattern=None)  # the same graph, counted node by node
    for n in range(-1, topo.num_gpus + 3):
        want = _counted(topo, n)
        assert list(topo.servers_used(n).items()) == list(want.items())
        assert list(plain.servers_used(n).items()) == list(want.items())
