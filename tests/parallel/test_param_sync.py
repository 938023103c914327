"""ZeRO-1 parameter sync by owner broadcasts: InternEvo's Hybrid ZeRO (issue 24)."""

from __future__ import annotations

import dataclasses
import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from perfmodel.api import Scenario, predict, resolve
from perfmodel.dtypes import Precision
from perfmodel.ops import CollectiveOp
from perfmodel.parallel.param_sync import (
    owner_bytes,
    owner_ranks,
    size_greedy_owner_ranks,
    tensor_owner_bytes,
)
from perfmodel.parallel.plan import ParallelismPlan
from perfmodel.parallel.recipe import ParamSync, build_recipe
from perfmodel.parallel.software import get_preset, with_software_options
from perfmodel.parallel.stack_choices import ParamOwners
from perfmodel.parallel.taskgraph import CommKind
from perfmodel.pipeline.lower import build_step, step_workload
from perfmodel.workload.layers import layer_tensors
from perfmodel.workload.memory import Optimizer


def test_internlm_7b_owners() -> None:
    """InternLM-7B's tensors (embedding, per block Wqkv, its bias, out_proj, its bias, two
    norms, w1, w2, w3; final norm, head) over 1,024 ranks: every tensor above the average share
    (7.3 M) opens a rank, the small ones ride along: 1 + 5 x 32 + 1 owners, rank 0 owns none."""
    h, f, v = 4096, 11008, 103168
    block = [3 * h * h, 3 * h, h * h, h, h, h, f * h, f * h, f * h]
    params = [v * h, *block * 32, h, v * h]
    owners = owner_ranks(params, 1024)
    assert len(set(owners)) == 162 and 0 not in owners
    assert owners[0] == 1 and owners[-1] == 162
    # 128 ranks (average 57 M): a rank fills with ~57 M before the next opens
    assert len(set(owner_ranks(params, 128))) < 128


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.integers(min_value=0, max_value=10**9), min_size=1, max_size=60),
    st.integers(min_value=1, max_value=2048),
)
def test_owner_partition_invariants(params: list[int], ranks: int) -> None:
    owners = owner_ranks(params, ranks)
    assert len(owners) == len(params)
    assert all(0 <= o < ranks for o in owners)
    assert all(b - a in (0, 1) for a, b in itertools.pairwise(owners))
    avg = sum(params) // ranks
    for p, o, prev in zip(params[1:], owners[1:], owners, strict=False):
        if p > avg * 1.01 and prev < ranks - 1:
            assert o == prev + 1  # a tensor above the share never joins the previous owner
    by_id = dict(enumerate(owners))
    sizes = dict(enumerate(map(float, params)))
    assert sum(owner_bytes(range(len(params)), by_id, sizes, 2.0)) == pytest.approx(
        2.0 * sum(params)
    )


def test_recipe_of_internevo() -> None:
    """Gradients all-reduced (not reduce-scattered) in 16 bit, owner broadcasts, ZeRO-1
    optimizer state; the other ZeRO stacks keep reduce-scatter and all-gather."""
    plan = ParallelismPlan(dp=8, zero=1)
    r = build_recipe(get_preset("internevo"), Precision.BF16, Optimizer.ADAMW, plan)
    assert r.grad_reduce_op is CollectiveOp.ALLREDUCE
    assert r.param_sync is ParamSync.OWNER_BROADCAST
    assert (r.grad_reduce_bytes, r.gather_bytes, r.sharding.stage) == (2, 2, 1)
    assert r.bucket_bytes == 512 * 1024 * 1024 * 2
    assert not r.param_gather.overlap  # torch.cuda.synchronize() ends the step after them
    for name in ("megatron-core", "deepspeed-zero1"):
        other = build_recipe(get_preset(name), Precision.BF16, Optimizer.ADAMW, plan)
        assert other.grad_reduce_op is CollectiveOp.REDUCESCATTER
        assert other.param_sync is ParamSync.ALLGATHER
    unsharded = ParallelismPlan(dp=8)
    plain = build_recipe(get_preset("pytorch-ddp"), Precision.BF16, Optimizer.ADAMW, unsharded)
    assert plain.grad_reduce_op is CollectiveOp.ALLREDUCE


def _internevo(gpus: int, **kw: object) -> Scenario:
    return Scenario(
        system="dgx-a100",
        nodes=max(1, gpus // 8),
        gpus=gpus,
        model="llama",
        model_args={
            "layers": 4,
            "hidden": 1024,
            "heads": 16,
            "kv_heads": 16,
            "ffn_hidden": 2816,
            "vocab": 32000,
            "seq_len": 1024,
        },
        global_batch=4 * gpus,
        microbatch=2,
        precision="bf16",
        optimizer="adamw",
        software="internevo",
        fidelity="analytic",
        **kw,  # type: ignore[arg-type]
    )


def test_lowering_broadcasts_after_the_optimizer() -> None:
    """One task after the optimizer whose duration is the sum of the owners' broadcasts over
    the data-parallel group, priced by the collective model; the gradients are all-reduced."""
    sc = _internevo(16)
    r = resolve(sc)
    step, costs = build_step(sc, r)
    tasks = step.graph.tasks
    sync = [t for t in tasks if t.comm is not None and t.comm.kind is CommKind.ZERO]
    assert len(sync) == 1 and sync[0].comm.op is CollectiveOp.BROADCAST
    opt = next(t for t in tasks if t.label == "optimizer")
    assert opt.tid in sync[0].deps
    grads = [t for t in tasks if t.comm is not None and t.comm.kind is CommKind.DP]
    assert grads and all(t.comm.op is CollectiveOp.ALLREDUCE for t in grads)
    workload, _ = step_workload(sc, r, None)
    ids = range(len(workload.layers))
    tensors = layer_tensors(workload.layers, ids)
    owners = owner_ranks([p for _, p in tensors], 16)
    group = sync[0].comm.group
    want = sum(
        costs.collective_time(CollectiveOp.BROADCAST, b, group)
        for b in tensor_owner_bytes(ids, tensors, owners, 2.0)
    )
    assert sync[0].duration_s == pytest.approx(want, rel=1e-12)


def test_owner_broadcasts_slow_the_step_as_the_group_grows() -> None:
    """Per-GPU throughput falls with the ZeRO group: each broadcast's ring spans every rank."""
    rates = [predict(_internevo(n), baseline=False).tokens_per_s_per_gpu for n in (16, 64, 256)]
    assert rates[0] > rates[1] > rates[2]


def _internlm_7b_tensors() -> list[int]:
    """InternLM-7B's tensors in module order (InternLM ``fa7337b`` ``modeling_internlm.py``:
    embedding; per block Wqkv, out_proj, two RMSNorm weights, w1, w2, w3, no biases; final
    norm; head)."""
    h, f, v = 4096, 11008, 103168
    block = [3 * h * h, h * h, h, h, f * h, f * h, f * h]
    return [v * h, *block * 32, h, v * h]


def _first_fit_by_size(params: list[int], ranks: int) -> list[int]:
    """InternLM ``fa7337b`` ``_partition_param_list`` as written there (a plain loop)."""
    load = [0] * ranks
    owner = [0] * len(params)
    for i in sorted(range(len(params)), key=lambda k: params[k], reverse=True):
        r = load.index(min(load))
        owner[i] = r
        load[r] += params[i]
    return owner


def test_internlm_7b_size_greedy_owners() -> None:
    """The July 2023 partition over 1,024 ranks: 227 tensors, each on a rank of its own, in
    size order (embedding rank 0, head rank 1: equal sizes keep module order; the 65 norms
    last), so 227 broadcasts where the module walk makes 162: 65 more, the norms'. Over 8 ranks
    the loads differ by less than the largest tensor."""
    params = _internlm_7b_tensors()
    owners = size_greedy_owner_ranks(params, 1024)
    assert sorted(owners) == list(range(len(params))) and len(params) == 227
    assert (owners[0], owners[-1]) == (0, 1)
    h = 4096
    assert sorted(o for p, o in zip(params, owners, strict=True) if p == h) == list(
        range(227 - 65, 227)
    )
    eight = size_greedy_owner_ranks(params, 8)
    loads = [sum(p for p, o in zip(params, eight, strict=True) if o == r) for r in range(8)]
    assert max(loads) - min(loads) <= max(params)


@settings(max_examples=80, deadline=None)
@given(
    st.lists(st.integers(min_value=0, max_value=10**9), min_size=1, max_size=60),
    st.integers(min_value=1, max_value=200),
)
def test_size_greedy_matches_internlm_loop(params: list[int], ranks: int) -> None:
    """Same owners as InternLM's own loop (ties: lowest rank; equal sizes: module order); a
    group with at least as many ranks as tensors gives every non-empty tensor its own rank."""
    owners = size_greedy_owner_ranks(params, ranks)
    assert list(owners) == _first_fit_by_size(params, ranks)
    if ranks >= len(params) and all(params):
        assert len(set(owners)) == len(params)


def test_overlap_sync_param_selects_the_owner_rule() -> None:
    """InternEvo's ``overlap_sync_param`` as a software option: false is the size-greedy
    partition, true the module walk (the preset's default); the rule's own names parse too."""
    base = get_preset("internevo")
    assert base.param_owners is ParamOwners.MODULE_WALK
    off = with_software_options(base, {"overlap_sync_param": False})
    assert off.param_owners is ParamOwners.SIZE_GREEDY
    assert with_software_options(base, {"param_owners": "module-walk"}).param_owners is (
        ParamOwners.MODULE_WALK
    )
    with pytest.raises(ValueError, match="param_owners"):
        with_software_options(base, {"param_owners": "round-robin"})


def test_size_greedy_owners_priced_in_the_lowering() -> None:
    """With ``param_owners=size-greedy`` the sync task sums one broadcast per size-greedy
    owner: on 16 ranks more owners than the module walk gives the same small model, so the
    series takes longer (every broadcast pays the chain's latency)."""
    durations = {}
    for rule in ParamOwners:
        sc = _internevo(16, software_options={"param_owners": rule.value})
        r = resolve(sc)
        step, costs = build_step(sc, r)
        sync = [t for t in step.graph.tasks if t.comm is not None and t.comm.kind is CommKind.ZERO]
        assert len(sync) == 1
        workload, _ = step_workload(sc, r, None)
        ids = range(len(workload.layers))
        tensors = layer_tensors(workload.layers, ids)
        sizes = [p for _, p in tensors]
        owners = (
            size_greedy_owner_ranks(sizes, 16)
            if rule is ParamOwners.SIZE_GREEDY
            else owner_ranks(sizes, 16)
        )
        by_owner = tensor_owner_bytes(ids, tensors, owners, 2.0)
        want = sum(
            costs.collective_time(CollectiveOp.BROADCAST, b, sync[0].comm.group) for b in by_owner
        )
        assert sync[0].duration_s == pytest.approx(want, rel=1e-12)
        durations[rule] = (len(by_owner), sync[0].duration_s)
    greedy, walk = durations[ParamOwners.SIZE_GREEDY], durations[ParamOwners.MODULE_WALK]
    assert greedy[0] > walk[0] and greedy[1] > walk[1]


def test_gated_fc1_is_two_tensors() -> None:
    """A Llama block's fused gate/up projection (``fc1`` before ``swiglu``) counts as InternEvo's
    two tensors ``w1`` and ``w2``: over more ranks than tensors each half has its own owner, so
    the block broadcasts five large tensors (qkv, attn_out, w1, w2, fc2), not four."""
    sc = _internevo(16)
    workload, _ = step_workload(sc, resolve(sc), None)
    ids = range(len(workload.layers))
    tensors = layer_tensors(workload.layers, ids)
    names = [workload.layers[i].name for i, _ in tensors]
    assert names.count("layer0.fc1") == 2
    assert len(tensors) == sum(1 for la in workload.layers if la.params > 0) + 4  # 4 blocks
    fc1 = next(la for la in workload.layers if la.name == "layer0.fc1")
    halves = [p for (i, p) in tensors if workload.layers[i] is fc1]
    assert halves == [fc1.params / 2, fc1.params / 2]
    owners = size_greedy_owner_ranks([p for _, p in tensors], 1024)
    assert len(tensor_owner_bytes(ids, tensors, owners, 2.0)) == len(tensors)


def test_linear_bias_is_a_tensor_of_its_own() -> None:
    """A biased linear layer lists its weight (``k x n`` of its GEMM) and its bias as two
    tensors; InternLM-7B with attention biases (the InternEvo mapping) then has the 291 tensors
    of ``test_internlm_7b_owners``' list (227 without them), of the same sizes."""
    from perfmodel.accuracy_scale import INTERNLM_7B

    h, f, v = 4096, 11008, 103168
    block = [3 * h * h, 3 * h, h * h, h, h, h, f * h, f * h, f * h]
    want = sorted([v * h, *block * 32, h, v * h])
    sc = Scenario(
        system="dgx-a100",
        model="llama",
        model_args=dict(INTERNLM_7B),
        global_batch=8,
        microbatch=1,
        precision="bf16",
        optimizer="adamw",
        software="internevo",
        dp=8,
        fidelity="analytic",
    )
    wl, _ = step_workload(sc, resolve(sc), None)
    got = layer_tensors(wl.layers, range(len(wl.layers)))
    assert sorted(p for _, p in got) == want
    no_bias = dataclasses.replace(sc, model_args={**INTERNLM_7B, "attn_bias": False})
    wl0, _ = step_workload(no_bias, resolve(no_bias), None)
    assert len(layer_tensors(wl0.layers, range(len(wl0.layers)))) == 227


def test_gated_projection_read_from_shapes_not_names() -> None:
    """A gated MLP's input projection is found by its activation halving the width (SwiGLU and
    GEGLU alike), not by the activation's name; a non-gated activation keeps one tensor."""
    from perfmodel.workload.layers import LayerCost, LayerKind, feeds_gated_activation

    def layer(name: str, kind: LayerKind, params: float, width: int) -> LayerCost:
        return LayerCost(name, kind, 0.0, 0.0, 0.0, params, 0.0, 0.0, 0.0, (1, width))

    fc1 = layer("b.fc1", LayerKind.LINEAR, 80, 20)
    geglu = layer("b.geglu", LayerKind.ACTIVATION, 0, 10)
    gelu = layer("b.gelu", LayerKind.ACTIVATION, 0, 20)
    assert feeds_gated_activation(fc1, geglu) and not feeds_gated_activation(fc1, gelu)
    assert layer_tensors([fc1, geglu], [0, 1]) == [(0, 40.0), (0, 40.0)]
    assert layer_tensors([fc1, gelu], [0, 1]) == [(0, 80.0)]


def test_first_forward_broadcasts_each_segments_own_layers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With ``overlap_param_gather`` the owners broadcast each bucket's layers before its first
    forward (``DataParallelEmitters.gather``): the ``k``-th broadcast of the first forward lasts
    :meth:`param_sync_s` of segment ``k``'s layers (``Chunk.segment_ids``; a segment holds
    no ids), and the buckets' broadcasts differ."""
    from fresh_chunks import lowerings

    sc = _internevo(16, software_options={"overlap_param_gather": True, "bucket_bytes": 10})
    with monkeypatch.context() as m:
        (low,) = lowerings(sc, m)
        step, _ = build_step(sc, resolve(sc))
    (ch,) = low.chunks
    want = [low.param_sync_s(0, ch.segment_ids(k)) for k in range(len(ch.segments))]
    got = [
        t.duration_s
        for t in step.graph.tasks
        if t.comm is not None and t.comm.op is CollectiveOp.BROADCAST and t.label.startswith("AG F")
    ]
    assert len(want) > 2 and len(set(want)) > 1
    assert got == want


def test_stage_end_broadcasts_every_chunk_of_the_stage(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without ``overlap_param_gather`` the owners broadcast a stage's parameters once after
    the optimizer (``DataParallelEmitters.finish_stage``): with interleaving a stage holds
    ``V`` chunks, and the broadcast lasts :meth:`param_sync_s` of every layer of all of them
    (``Chunk.layer_ids``), not of its first chunk's alone (rev26: no test pinned it)."""
    from fresh_chunks import lowerings

    sc = _internevo(16, tp=2, pp=2, schedule="interleaved", interleave=2)
    with monkeypatch.context() as m:
        (low,) = lowerings(sc, m)
        step, _ = build_step(sc, resolve(sc))
    P, V = low.P, low.V
    assert (P, V) == (2, 2)
    wait = low.preset.fusion_wait_s
    for s in range(P):
        ids = [i for c in range(V) for i in low.chunks[c * P + s].layer_ids]
        first = list(low.chunks[s].layer_ids)
        (task,) = [
            t
            for t in step.graph.tasks
            if t.label == "param owner broadcasts" and t.device == low.gpu[s]
        ]
        assert task.duration_s == low.param_sync_s(s, ids) + wait
        assert low.param_sync_s(s, first) != low.param_sync_s(s, ids)
