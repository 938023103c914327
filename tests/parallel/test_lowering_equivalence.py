"""The lowering refactor keeps the task graph (issue 11 item 6).

Golden values first recorded from the lowering before it was split into per-schedule / per-mode
emitters (commit 111b8c5), which the split reproduced exactly: for each scenario, the analytic step
time, a hash of every task (id, kind, device, stream, duration, dependencies, label, micro-batch,
chunk, communication spec) and of the per-stage memory, and the number of tasks. The same graph
gives the same simulation, so the SimPy executor is not re-run here.

They were re-recorded once when the round's model changes were merged (NCCL latency counted once,
rail-aligned rings, the training recipes' seams), and for issue 24 (sustained GEMM ceilings per
GPU and format, the eager host cost re-fitted to 35.55 us), and for ``megatron-3d``'s memory in
session 18 (recompute22: full recomputation keeps the input a later pipeline stage receives,
``perfmodel.workload.memory.first_block_input_elements``; its time and tasks unchanged) and again
(embed26: under sequence parallelism the first stage keeps the embedding's output scattered,
``s b h / t``, :func:`perfmodel.workload.zoo.transformer.scatter_embedding_output`; its first stage
894.164 -> 893.902 MiB, time and tasks unchanged). Any later change to these numbers must be an
intended model change: re-record with ``python3 tests/parallel/test_lowering_equivalence.py`` (it
prints the new ``GOLDEN``) and say why in the commit; a refactor must leave them as they are.
"""

from __future__ import annotations

import hashlib

import pytest

from perfmodel.api import Scenario, predict, resolve
from perfmodel.pipeline.lower import build_step

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
        sequence_parallel=False,  # the golden predates the preset's sequence-parallel default
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
# pipelined FSDP2: each unit gathered once a step, reduce-scattered after the stage's last
# backward (Recipe.gather_per_step, session 19): the fsdp case on two pipeline stages
CASES["fsdp-pp2"] = {
    **CASES["fsdp"],
    "batch_per_gpu": None,
    "global_batch": 32,
    "microbatch": 2,
    "pp": 2,
}
#: name -> (analytic step time s, graph hash, tasks); see the module docstring
GOLDEN = {
    "ddp-resnet": (0.032916543110067115, "d11692a6f318f023", 18),
    "horovod-2n": (0.039138925125869056, "a427a4b038ffb8ad", 7),
    "megatron-3d": (0.0315524674286196, "4691bc4ada54cef1", 89),
    "interleaved": (0.014443015609565929, "76c827b2c24740c9", 129),
    "mcore-il": (0.025177388572735312, "c72e632eaa6eaf3d", 256),
    "fsdp": (0.007698341581929262, "21cc120c9ecc1ec4", 33),
    "fsdp-pp2": (0.017569927923015306, "3658e0c07800cadd", 71),
    "zero2": (0.007310207654298593, "9651534a8fe87d23", 7),
    "owt": (0.042946288660748094, "c4969affcdbb5a3d", 6),
    "ps": (0.14827660521294028, "14b7b2986bcab21f", 5),
    "async": (0.12313204269420586, "0e3358d4eb11a225", 5),
    "cpu-merge": (0.1423747648426131, "6dd14a1e2cf6b77d", 5),
    "gpu-merge": (0.1060835826592505, "a886ab4f33add9bd", 6),
    "local-sgd": (0.10451275694361956, "003e75ce6d7dde79", 4),
    "crossbow": (0.004427432971452216, "815491d33593b71b", 5),
}


def _graph_hash(sc: Scenario) -> tuple[str, int]:
    step, _ = build_step(sc, resolve(sc))
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


if __name__ == "__main__":  # print a re-recorded GOLDEN (see the module docstring)
    print("GOLDEN = {")
    for name in CASES:
        sc = Scenario(fidelity="analytic", **CASES[name])  # type: ignore[arg-type]
        digest, tasks = _graph_hash(sc)
        step_s = predict(sc, baseline=False).iteration_time_s
        print(f"    {name!r}: ({step_s!r}, {digest!r}, {tasks}),")
    print("}")
