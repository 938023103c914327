"""The coarse flow replay of the step simulation against the fine, chunk-by-chunk one (issue 14).

``FlowComm(coarse=True)`` (the default of ``predict``'s simulated fidelity) replays each ring
channel of a collective as one flow over all its links; ``coarse=False`` replays every ring step
(and sub-chunk) as its own transfer. Where nothing else uses the ring's links the two are the
closed form; where pipeline sends share a NIC with a data-parallel ring they must still agree
within 1% (docs/design.md, "Coarsening of the step simulation").
"""

from __future__ import annotations

import pytest

from perfmodel.api import Scenario, resolve, topology_of
from perfmodel.comm import CommCostModel
from perfmodel.ops import CollectiveOp
from perfmodel.parallel.taskgraph import CommKind, CommSpec, GraphBuilder, TaskGraph, TaskKind
from perfmodel.pipeline.lower import build_step
from perfmodel.sim.engine import FlowComm, simulate
from perfmodel.topology import load_system

SMALL = {"hidden": 1024, "layers": 8, "heads": 16, "seq_len": 1024}


def _makespans(graph: TaskGraph, topo, fine_chunks: int = 4) -> tuple[float, float]:
    coarse = simulate(graph, network_factory=lambda env: FlowComm(env, topo, coarse=True))
    fine = simulate(
        graph,
        network_factory=lambda env: FlowComm(env, topo, coarse=False, chunks=fine_chunks),
    )
    return coarse.makespan_s, fine.makespan_s


@pytest.mark.parametrize(
    ("system", "nodes", "plan", "software", "batch"),
    [
        ("dgx-a100", 4, {"dp": 2, "tp": 4, "pp": 4, "microbatch": 1}, "megatron", 16),
        ("dgx-a100", 2, {"dp": 2, "tp": 4, "pp": 2, "microbatch": 1}, "pytorch-ddp", 16),
        ("dgx-a100", 4, {"dp": 4, "tp": 8}, "megatron", 32),
        ("dgx1-v100", 2, {"dp": 4, "tp": 2, "pp": 2, "microbatch": 1}, "megatron", 16),
    ],
)
def test_coarse_and_fine_step_simulations_agree(system, nodes, plan, software, batch) -> None:
    sc = Scenario.from_dict(
        {
            "system": system,
            "nodes": nodes,
            "model": "gpt",
            "model_args": SMALL,
            # the V100 has no BF16 tensor cores (refused since issue 28): it runs fp16
            "precision": "fp16" if system == "dgx1-v100" else "bf16",
            "optimizer": "adam",
            "software": software,
            "global_batch": batch,
            **plan,
        }
    )
    step, _ = build_step(sc, resolve(sc))
    coarse, fine = _makespans(step.graph, topology_of(sc))
    assert coarse == pytest.approx(fine, rel=0.01)


def _dp_and_pp(topo, group: tuple[str, ...], sends: int) -> tuple[TaskGraph, int]:
    """A 256 MB all-reduce over ``group`` and, on another stream of gpu0, ``sends`` pipeline
    sends of 32 MB to the first GPU of server 1, each after 1 ms of compute: the sends leave
    through gpu0's NIC, which the ring's channel through that NIC also uses."""
    g = topo.gpus
    b = GraphBuilder()
    dp = CommSpec(CollectiveOp.ALLREDUCE, 256e6, group, kind=CommKind.DP)
    ar = b.add(TaskKind.COLLECTIVE, g[0], "dp", 0.01, comm=dp)
    prev: tuple[int, ...] = ()
    for _ in range(sends):
        c = b.add(TaskKind.COMPUTE, g[0], "compute", 1e-3, list(prev))
        pp = CommSpec(CollectiveOp.SENDRECV, 32e6, (g[0], g[8]), kind=CommKind.PP)
        prev = (b.add(TaskKind.SENDRECV, g[0], "pp", 1e-4, [c], comm=pp),)
    return b.build(), ar


@pytest.mark.parametrize("ranks", [2, 16])
def test_coarse_and_fine_agree_where_pipeline_sends_contend_with_the_ring(ranks: int) -> None:
    """Two DGX A100: the all-reduce alone is the closed form in both replays; with eight
    pipeline sends on the same NIC it finishes later (contention), and the coarse replay's
    iteration still agrees with the fine one within 1%.

    The fine replay here moves one flow per ring step (``chunks=1``): with sub-chunks as
    concurrent flows, a ring hop would take 4/5 of a link it shares with one send instead of
    1/2, an artefact of the sub-chunking (NCCL moves a channel's slices one after another over
    one connection), not a difference of the coarsening.
    """
    topo = load_system("dgx-a100", nodes=2)
    group = (topo.gpus[0], topo.gpus[8]) if ranks == 2 else tuple(topo.gpus)
    closed = CommCostModel(topo).collective("allreduce", 256e6, group).time_s
    alone, ar = _dp_and_pp(topo, group, 0)
    a_coarse, a_fine = _makespans(alone, topo, fine_chunks=1)
    assert a_coarse == pytest.approx(a_fine, rel=1e-6)
    assert a_coarse == pytest.approx(closed, rel=0.02)
    shared, ar = _dp_and_pp(topo, group, 8)
    coarse = simulate(shared, network_factory=lambda env: FlowComm(env, topo))
    assert coarse.end_s[ar] > 1.1 * a_coarse  # the sends do slow the ring down
    c, f = _makespans(shared, topo, fine_chunks=1)
    assert c == pytest.approx(f, rel=0.01)


def _alone(topo, spec: CommSpec, *, replay_small: bool = False) -> float:
    b = GraphBuilder()
    b.add(TaskKind.COLLECTIVE, spec.group[0], "c", 1.0, comm=spec)
    return simulate(
        b.build(), network_factory=lambda env: FlowComm(env, topo, replay_small=replay_small)
    ).makespan_s


@pytest.fixture(scope="module")
def a100x2():
    return load_system("dgx-a100", nodes=2)


@pytest.mark.parametrize(
    ("op", "nbytes", "ranks", "hand_us"),
    [
        # NCCL hwLat (tuning.cc): one Simple step over the network 9.6 us / over NVLink 3.4 us
        ("sendrecv", 8.0, (0, 8), 9.6),
        ("sendrecv", 8.0, (0, 1), 3.4),
        # ring Simple across 2 servers, >= 64 KiB: plateau 1.9 x (base 8.4 + 2 network steps 9.6)
        ("allreduce", 1e6, (0, 8), None),
        # tree LL over 16 GPUs of 2 servers: 4.4 + 2 x (7 x 0.52 x 1.8 + log2(2) x 5.0)
        ("allreduce", 8.0, tuple(range(16)), 4.4 + 2 * (7 * 0.52 * 1.8 + 5.0)),
    ],
)
def test_step_simulation_counts_latency_once_as_the_closed_form(
    a100x2, op, nbytes, ranks, hand_us
) -> None:
    """Issue 12 "latency counted once" in the flow replay: alone, a pipeline send, a multi-node
    ring and a tree take exactly the closed form's time (before: sends paid the summed link
    latencies, 1.0 us instead of 3.4 us inside a DGX A100; the ring missed the plateau factor on
    NCCL's base latency, 7.56 us; the tree missed LL's 1.8x on intra-server steps). The LL tree
    is replayed here (``replay_small``): by default the step simulation takes its task's
    closed-form duration (``test_small_collectives_take_their_closed_form_duration``)."""
    g = a100x2.gpus
    group = tuple(g[i] for i in ranks)
    closed = CommCostModel(a100x2).collective(op, nbytes, group)
    if hand_us is not None:
        assert closed.time_s * 1e6 == pytest.approx(hand_us, rel=1e-3)
    else:
        assert closed.latency_s * 1e6 == pytest.approx(1.9 * (8.4 + 2 * 9.6), rel=1e-9)
    spec = CommSpec(CollectiveOp(op), nbytes, group)
    assert _alone(a100x2, spec, replay_small=True) == pytest.approx(closed.time_s, rel=1e-4)


@pytest.mark.parametrize("algorithm", ["hierarchical", "torus2d"])
def test_coarse_ring_phases_of_every_ring_algorithm_are_exact_alone(a100x2, algorithm) -> None:
    """A 64 MB all-reduce over 4 GPUs of each of two DGX A100 alone: the coarse replay of the
    ring phases of the hierarchical and 2D-torus algorithms ends when the chunk-by-chunk replay
    does (plain rings: the tests above)."""
    import simpy

    from perfmodel.comm import FlowNetwork, run_collective

    model = CommCostModel(a100x2)
    ends = []
    for coarse in (True, False):
        env = simpy.Environment()
        net = FlowNetwork(env, a100x2, model=model)
        group = a100x2.gpus[:4] + a100x2.gpus[8:12]
        run_collective(net, "allreduce", 64e6, group, algorithm, coarse=coarse)
        env.run()
        ends.append(env.now)
    assert ends[0] == pytest.approx(ends[1], rel=1e-9)


def test_in_switch_all_reduce_takes_its_closed_form_time_in_the_step_simulation() -> None:
    """NCCL's tuner picks NVLS for a 256 MB all-reduce over the 8 GPUs of one DGX H100; it has no
    flow model, so the step simulation charges its closed-form time (it raised "algorithm nvls
    cannot be simulated", so every default ``predict`` of a data-parallel DGX H100 failed)."""
    topo = load_system("dgx-h100")
    closed = CommCostModel(topo).collective("allreduce", 256e6, topo.gpus)
    assert closed.algorithm.value == "nvls"
    spec = CommSpec(CollectiveOp.ALLREDUCE, 256e6, tuple(topo.gpus))
    assert _alone(topo, spec) == pytest.approx(closed.time_s, rel=1e-12)


def test_zero_byte_collective_moves_nothing(a100x2) -> None:
    """A collective of 0 bytes (an expert-parallel MoE step lowers one) keeps its closed-form
    duration; the flow replay raised "message size must be > 0 bytes"."""
    spec = CommSpec(CollectiveOp.ALLREDUCE, 0.0, (a100x2.gpus[0], a100x2.gpus[8]))
    assert _alone(a100x2, spec) == 1.0  # _alone's task duration
