"""Small collectives in the step simulation (issue 27, item 1): an NCCL LL-protocol tree or chain
takes its task's closed-form duration and loads no link (``FlowComm(replay_small=False)``, the
default), instead of one transfer per chunk, tree edge, channel and sibling group
(``replay_small=True``, the reference). docs/design.md, "Coarsening of the step simulation",
states the bound these tests check.
"""

from __future__ import annotations

import pytest

from perfmodel.comm import CommCostModel
from perfmodel.ops import CollectiveOp
from perfmodel.parallel.taskgraph import CommSpec, GraphBuilder, TaskGraph, TaskKind
from perfmodel.sim.engine import FlowComm, Timeline, simulate
from perfmodel.topology import load_system

NODES = 16


@pytest.fixture(scope="module")
def a100x16():
    topo = load_system("dgx-a100", nodes=NODES)
    return topo, CommCostModel(topo)


def _rail(topo, k: int) -> tuple[str, ...]:
    """GPU ``k`` of every server: a data-parallel group of a tp8 plan."""
    return tuple(topo.gpus[8 * i + k] for i in range(NODES))


def _run(topo, model, graph: TaskGraph, replay_small: bool) -> tuple[Timeline, FlowComm]:
    made: list[FlowComm] = []

    def factory(env):
        made.append(FlowComm(env, topo, model=model, replay_small=replay_small))
        return made[-1]

    return simulate(graph, network_factory=factory), made[0]


def _spec(topo, nbytes: float, siblings: bool = True) -> CommSpec:
    return CommSpec(
        CollectiveOp.ALLREDUCE,
        nbytes,
        _rail(topo, 0),
        siblings=tuple(_rail(topo, k) for k in range(1, 8)) if siblings else (),
    )


def test_an_ll_tree_takes_its_duration_and_moves_no_flow(a100x16) -> None:
    """96 KiB over the 16 servers' GPU 0 (with the seven other rails' groups as siblings): NCCL's
    tuner picks a tree with LL; the replay moves 15,360 transfers (16 ranks x 8 channels x 2
    trees x 4 chunks, up and down, x 8 groups), the default none, and the task ends after its
    duration exactly. A 4 MiB all-reduce over the same groups (a Simple ring) is replayed either
    way, with the same flows."""
    topo, model = a100x16
    small = _spec(topo, 98304.0)
    ref = model.collective("allreduce", 98304.0, small.group)
    assert (ref.algorithm.value, ref.protocol.value) == ("tree", "LL")
    b = GraphBuilder()
    b.add(TaskKind.COLLECTIVE, small.group[0], "dp", 1.1e-4, comm=small)
    graph = b.build()
    tl, fc = _run(topo, model, graph, replay_small=False)
    assert fc.small_collective(small)
    assert fc.net.flows_started == 0
    assert tl.makespan_s == 1.1e-4
    tl_ref, fc_ref = _run(topo, model, graph, replay_small=True)
    assert fc_ref.net.flows_started == 15360
    assert tl_ref.makespan_s > 1.1e-4  # seven sibling trees share the NICs

    big = _spec(topo, 4 * 2**20)
    assert model.collective("allreduce", big.message_bytes, big.group).protocol.value == "Simple"
    b = GraphBuilder()
    b.add(TaskKind.COLLECTIVE, big.group[0], "dp", 1e-3, comm=big)
    runs = [_run(topo, model, b.build(), replay_small=r) for r in (False, True)]
    assert not runs[0][1].small_collective(big)
    assert runs[0][1].net.flows_started == runs[1][1].net.flows_started > 0
    assert runs[0][0].makespan_s == runs[1][0].makespan_s


@pytest.mark.parametrize("nbytes", [4096.0, 98304.0])
def test_a_step_with_a_small_collective_agrees_with_its_replay(a100x16, nbytes) -> None:
    """A 256 MB ring all-reduce of the 8 rail groups runs while one GPU computes 1 ms, all-reduces
    ``nbytes`` over its rail group (the NICs the big one loads) and computes 1 ms more. The step
    agrees with the replay of the small all-reduce within 1% (the ring coarsening's criterion;
    measured: 0.0000% at 8 B, 0.03% at 4 KiB, 0.32% at 64 KiB, 0.46% at 96 KiB): the small one's
    replay under contention takes up to 2.5x its closed form (242 vs 98 us at 96 KiB: every chunk
    of its tree waits for a fair share of NICs a 256 MB ring saturates), which the closed form's
    sibling sharing does not know; the big ring ends within the same 0.5%."""
    topo, model = a100x16
    small = _spec(topo, nbytes)
    small_s = model.collective("allreduce", nbytes, small.group).time_s
    b = GraphBuilder()
    big = b.add(TaskKind.COLLECTIVE, small.group[0], "dp", 0.02, comm=_spec(topo, 256e6))
    c0 = b.add(TaskKind.COMPUTE, small.group[0], "compute", 1e-3)
    ar = b.add(TaskKind.COLLECTIVE, small.group[0], "dp2", small_s, [c0], comm=small)
    b.add(TaskKind.COMPUTE, small.group[0], "compute", 1e-3, [ar])
    graph = b.build()
    coarse, _ = _run(topo, model, graph, replay_small=False)
    fine, _ = _run(topo, model, graph, replay_small=True)
    assert coarse.end_s[ar] - coarse.start_s[ar] == pytest.approx(small_s, rel=1e-12)
    assert coarse.makespan_s == pytest.approx(fine.makespan_s, rel=0.01)
    assert coarse.end_s[big] == pytest.approx(fine.end_s[big], rel=0.01)
