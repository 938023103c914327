"""The host-memory note reads one server of a cluster built by copying (issue 27 item 3): a
test of node kinds over every GPU made all 2,048 servers of a 16,384-GPU cluster
(``topology/lazy.py``), ~0.15 s of a 0.25 s pure data-parallel prediction. Its answer is the
whole graph's."""

from __future__ import annotations

import dataclasses

import pytest

from perfmodel.report.notes import host_memory_notes
from perfmodel.topology import load_system

CASES = [
    ("dgx-a100", 64, None),  # NVLink everywhere: no note
    ("dgx1-v100", 6, None),  # cross-socket pairs without NVLink: a note
    ("pcie-8x-server", 5, "RTX-4090"),  # no PCIe peer-to-peer: every pair
]


@pytest.mark.parametrize(("system", "nodes", "gpu"), CASES)
def test_host_memory_notes_read_few_servers_and_equal_the_whole_graph(
    system: str, nodes: int, gpu: str | None
) -> None:
    topo = load_system(system, nodes=nodes, gpu=gpu)
    notes = host_memory_notes(topo, topo.gpus)
    filler = topo.graph._node._filler
    assert not filler.complete and len(filler.made) <= 2, sorted(filler.made)
    whole = dataclasses.replace(topo, pattern=None)  # the same graph, read whole
    assert notes == host_memory_notes(whole, whole.gpus)
    assert bool(notes) == (system != "dgx-a100")


def test_non_gpu_members_are_left_out() -> None:
    topo = load_system("dgx1-v100", nodes=2)
    cpus = [n for n in topo.graph.nodes if n.endswith("cpu0")]
    assert host_memory_notes(topo, [*cpus, *topo.gpus]) == host_memory_notes(topo, topo.gpus)
    assert host_memory_notes(topo, [topo.gpus[0], *cpus]) == ()
