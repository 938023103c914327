"""The lowering refactor keeps the task graph (issue 11 item 6).

Golden values recorded from the lowering before it was split into per-schedule / per-mode
emitters (commit 111b8c5): for each scenario, the analytic step time, a hash of every task (id,
kind, device, stream, duration, dependencies, label, micro-batch, chunk, communication spec) and
of the per-stage memory, and the number of tasks. The same graph gives the same simulation, so
the SimPy executor is not re-run here.
"""

from __future__ import annotations

import hashlib

import pytest

from perfmodel.api import Scenario, _build_step, predict, resolve

GPT = {"layers": 4, "hidden": 512, "heads": 8, "seq_len": 256, "vocab": 8000}
CASES = {
    "ddp-resnet": dict(
        system="dgx-a100",
        model="resnet50",
        batch_per_gpu=32,
        precision="fp16",
        software="pytorch-ddp",
    ),
    "horovod-2n": dict(
        system="dgx1-v100",
        nodes=2,
        model="resnet50",
        batch_per_gpu=32,
        precision="fp16",
        software="horovod",
    ),
    "megatron-3d": dict(
        system="dgx-a100",
        nodes=2,
        model="gpt",
        model_args=GPT,
        global_batch=32,
        tp=2,
        pp=2,
        microbatch=1,
        precision="bf16",
        optimizer="adam",
        software="megatron",
        sequence_parallel=True,
        recompute="full",
    ),
    "interleaved": dict(
        system="dgx-a100",
        model="gpt",
        model_args=GPT,
        global_batch=16,
        pp=4,
        interleave=1,
        schedule="gpipe",
        microbatch=1,
        precision="bf16",
        optimizer="adam",
        software="megatron",
    ),
    "mcore-il": dict(
        system="dgx-a100",
        model="gpt",
        model_args=GPT,
        global_batch=16,
        tp=2,
        pp=2,
        interleave=2,
        microbatch=1,
        precision="bf16",
        optimizer="adam",
        software="megatron-core",
    ),
    "fsdp": dict(
        system="dgx-a100",
        model="gpt",
        model_args=GPT,
        batch_per_gpu=2,
        precision="bf16",
        optimizer="adam",
        software="fsdp",
    ),
    "zero2": dict(
        system="dgx-a100",
        model="gpt",
        model_args=GPT,
        batch_per_gpu=2,
        precision="bf16",
        optimizer="adam",
        software="deepspeed-zero2",
    ),
    "owt": dict(
        system="dgx1-v100",
        model="alexnet",
        batch_per_gpu=128,
        hybrid="one-weird-trick",
        software="cuda-convnet2",
    ),
    "ps": dict(
        system="dgx1-v100",
        model="resnet50",
        batch_per_gpu=32,
        dp_mode="parameter-server",
        software="tf-replicated",
    ),
    "async": dict(
        system="dgx1-v100",
        model="resnet50",
        batch_per_gpu=32,
        dp_mode="async",
        software="tf-replicated",
    ),
    "cpu-merge": dict(
        system="dgx1-v100", gpus=4, model="resnet50", batch_per_gpu=32, software="keras-multi-gpu"
    ),
    "gpu-merge": dict(
        system="dgx1-v100",
        gpus=4,
        model="resnet50",
        batch_per_gpu=32,
        software="pytorch-dataparallel",
    ),
    "local-sgd": dict(
        system="dgx1-v100",
        model="resnet50",
        batch_per_gpu=32,
        dp_mode="local-sgd",
        sync_period=4,
        software="pytorch-ddp",
    ),
    "crossbow": dict(
        system="dgx1-v100",
        model="resnet32",
        batch_per_gpu=16,
        learners_per_gpu=2,
        software="crossbow",
    ),
}
#: name -> (analytic step time s, graph hash, tasks), recorded before the split
GOLDEN = {
    "ddp-resnet": (0.03003506151544874, "334d5ee3253b1af9", 17),
    "horovod-2n": (0.037885926695904355, "64ea2ca12de299c0", 7),
    "megatron-3d": (0.03489811750858262, "b6539380cc486cad", 87),
    "interleaved": (0.015542126532614027, "18464eafe4b8db85", 125),
    "mcore-il": (0.02743505875429132, "949344323206ef31", 254),
    "fsdp": (0.006746327827366351, "bb6e36277011448d", 32),
    "zero2": (0.006910914448642946, "d86d58710da820b1", 6),
    "owt": (0.04208243446973057, "c4357b55e3ef7bf7", 6),
    "ps": (0.1461192207182924, "cb0181ce18308a54", 5),
    "async": (0.12097405819955796, "1e7efcada86de43e", 5),
    "cpu-merge": (0.14079423905162575, "922a3c3f7b7fce63", 5),
    "gpu-merge": (0.1040925063349298, "7afc4a312ec3cf95", 6),
    "local-sgd": (0.10193157274008278, "803028aac91d3aba", 4),
    "crossbow": (0.004336232288539337, "36bc44cf18fa3ac0", 5),
}


def _graph_hash(sc: Scenario) -> tuple[str, int]:
    step, _ = _build_step(sc, resolve(sc))
    h = hashlib.sha256()
    for t in step.graph.tasks:
        key = (t.tid, t.kind.value, t.device, t.stream, round(t.duration_s, 12), t.deps, t.label)
        h.update(repr((*key, t.microbatch, t.chunk, t.comm)).encode())
    for m in step.memory:
        h.update(repr(round(m.total_bytes, 3)).encode())
    return h.hexdigest()[:16], len(step.graph.tasks)


@pytest.mark.parametrize("name", sorted(CASES))
def test_lowering_keeps_the_task_graph(name: str) -> None:
    sc = Scenario(fidelity="analytic", **CASES[name])  # type: ignore[arg-type]
    step_s, digest, tasks = GOLDEN[name]
    assert _graph_hash(sc) == (digest, tasks)
    assert predict(sc, baseline=False).iteration_time_s == pytest.approx(step_s, rel=1e-12)
