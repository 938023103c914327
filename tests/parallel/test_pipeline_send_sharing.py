"""Pipeline sends of every replica share a server's NICs (review of fix21, item 1).

With the default rank order tp, dp, pp every pipeline neighbour is on another server and every
data-parallel replica of a stage sends at once. Golden case by hand: tp=2, pp=2, dp=4 on two
``pcie-8x-server`` servers (8 GPUs, 2 NICs each): rank of ``(d, s, t)`` is ``t + 2 d + 8 s``, so
stage 0 is server 0 and stage 1 server 1, and the eight pairs ``(i, 8 + i)``, i = 0..7, leave
server 0 at once through its two NICs. The lowering priced replica 0's two pairs only (11.68 ms
for 64 MiB a pair against 23.35 ms for the eight). On ``dgx-h100`` (a NIC per GPU) the other
replicas' pairs take their own NICs: the time is replica 0's.
"""

from __future__ import annotations

import pytest

from perfmodel.api import resolve, topology_of
from perfmodel.comm import CommCostModel
from perfmodel.parallel.taskgraph import CommKind
from perfmodel.pipeline.lower import build_step
from perfmodel.scenario import Scenario


def _scenario(system: str, precision: str, **keys: object) -> Scenario:
    base: dict[str, object] = {
        "system": system,
        "nodes": 2,
        "model": "gpt",
        "model_args": {"layers": 4, "hidden": 2048, "heads": 16, "seq_len": 2048, "vocab": 32000},
        "global_batch": 16,
        "pp": 2,
        "microbatch": 1,
        "precision": precision,
        "optimizer": "adam",
        "software": "megatron",
        "fidelity": "analytic",
    }
    return Scenario(**{**base, **keys})  # type: ignore[arg-type]


def _first_send(sc: Scenario):  # type: ignore[no-untyped-def]
    step, _ = build_step(sc, resolve(sc))
    return next(t for t in step.graph.tasks if t.comm is not None and t.comm.kind is CommKind.PP)


def test_every_replicas_pairs_share_the_nics_by_hand() -> None:
    sc = _scenario("pcie-8x-server", "fp16", tp=2)  # dp = 16 / (2 x 2) = 4
    topo = topology_of(sc)
    g = topo.gpus
    send = _first_send(sc)
    pairs = [send.comm.group, *send.comm.siblings]
    # pairs[0] the representative (replica 0, tp rank 0), then tp rank 1, then replicas 1-3
    assert [[g.index(a), g.index(b)] for a, b in pairs] == [[i, 8 + i] for i in range(8)]
    model = CommCostModel(topo)
    nbytes = send.comm.message_bytes
    every = model.transfers_time([(g[i], g[8 + i]) for i in range(8)], nbytes)
    replica0 = model.transfers_time([(g[0], g[8]), (g[1], g[9])], nbytes)
    assert send.duration_s == pytest.approx(every, rel=1e-12)
    assert every > 1.5 * replica0  # 2 NICs for 8 senders: the sharing the old pricing missed


def test_a_nic_per_gpu_keeps_replica_zeros_time() -> None:
    """dgx-h100: tp=4 pp=2 dp=2, pairs (i, 8 + i) through eight NICs, one each."""
    sc = _scenario("dgx-h100", "bf16", tp=4)
    topo = topology_of(sc)
    g = topo.gpus
    send = _first_send(sc)
    assert len(send.comm.siblings) == 7
    model = CommCostModel(topo)
    replica0 = model.transfers_time([(g[t], g[8 + t]) for t in range(4)], send.comm.message_bytes)
    assert send.duration_s == pytest.approx(replica0, rel=1e-12)
