"""Training recipes (issue 11): one value read by compute, memory, communication and lowering.

Each test states a hand-computed value and failed before the recipe existed.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from perfmodel.api import Scenario, predict, resolve
from perfmodel.cli import main
from perfmodel.dtypes import Precision
from perfmodel.parallel.lowering import Chunk, Segment
from perfmodel.parallel.plan import ParallelismPlan, PipelineSchedule, Recompute
from perfmodel.parallel.recipe import AmpStyle, Sharding, build_recipe
from perfmodel.parallel.software import get_preset
from perfmodel.parallel.stage_memory import stage_memory
from perfmodel.parallel.taskgraph import CommKind, TaskKind
from perfmodel.pipeline.lower import build_step
from perfmodel.workload.layers import LayerCost, LayerKind
from perfmodel.workload.memory import Optimizer, full_recompute_bytes

GPT = {"layers": 4, "hidden": 512, "heads": 8, "seq_len": 256, "vocab": 8000}


def _sc(**kw: object) -> Scenario:
    base = dict(
        system="dgx-a100",
        model="gpt",
        model_args=GPT,
        batch_per_gpu=2,
        precision="bf16",
        optimizer="adam",
        fidelity="analytic",
    )
    base.update(kw)
    return Scenario(**base)  # type: ignore[arg-type]


def _graph(sc: Scenario):
    r = resolve(sc)
    step, _ = build_step(sc, r)
    return r, step


def _params(sc: Scenario) -> int:
    """Parameters of one model replica (``tp = 1``)."""
    from perfmodel.pipeline.inputs import zoo_workload

    r = resolve(sc)
    wl = zoo_workload(
        sc.model, r.microbatch, r.precision.value, r.plan.tp, False, tuple(sorted(GPT.items()))
    )
    return wl.params


# ------------------------------------------------------------------ precision seams


def test_ddp_amp_all_reduces_fp32_gradients() -> None:
    """Under torch.autocast DDP's gradients are FP32: bucket bytes = 4 x params."""
    sc = _sc(software="pytorch-ddp", precision="fp16")
    r, step = _graph(sc)
    assert r.recipe.amp is AmpStyle.AUTOCAST and r.recipe.autocast_casts
    grads = [t for t in step.graph.tasks if t.comm is not None and t.label.startswith("grad")]
    assert sum(t.comm.message_bytes for t in grads) == pytest.approx(4 * _params(sc))


def test_megatron_has_no_autocast_casts_and_reduces_in_fp32() -> None:
    sc = _sc(software="megatron", precision="bf16")
    r, step = _graph(sc)
    rc = r.recipe
    assert (rc.param_bytes, rc.grad_bytes, rc.grad_reduce_bytes, rc.master_bytes) == (2, 4, 4, 4)
    assert not rc.autocast_casts
    (grad_all,) = [t for t in step.graph.tasks if t.label == "grad all"]
    assert grad_all.comm.message_bytes == 4 * _params(sc)
    # and compute no longer charges autocast's weight casts: faster than the same run under DDP
    ddp = predict(replace(sc, software="pytorch-ddp", gpus=1), baseline=False)
    meg = predict(replace(sc, gpus=1), baseline=False)
    assert meg.breakdown.compute_s < ddp.breakdown.compute_s


def test_megatron_fp16_keeps_16_bit_gradients() -> None:
    rc = build_recipe(get_preset("megatron"), Precision.FP16, Optimizer.ADAM, ParallelismPlan(dp=2))
    assert rc.grad_reduce_bytes == 2


# ------------------------------------------------------------------ sharding and memory


def test_zero3_model_state_is_16_bytes_per_param_over_dp() -> None:
    """Mixed-precision Adam under ZeRO-3 / FSDP on 8 GPUs: (2 + 2 + 12) x params / 8."""
    for software in ("deepspeed-zero3", "fsdp", "torchtitan"):
        sc = _sc(software=software)
        r = predict(sc, baseline=False)
        m = r.memory
        state = m.weights_bytes + m.grads_bytes + m.optimizer_bytes
        assert state == pytest.approx(16 * _params(sc) / 8), software


def test_fsdp_at_shard_degree_one_runs_unsharded() -> None:
    """torchtitan applies fully_shard only when dp_shard > 1 or cp > 1 (parallel_dims
    .fsdp_enabled), FSDP1 clamps to NO_SHARD at world size 1, FSDP2 skips its collectives and
    copies on a one-rank mesh: one GPU (or hsdp=1) has no shard group and no FSDP2 copy kernels.
    Before: Sharding.FSDP with fsdp_copies on one GPU (llama3_8b on a B200: 146.8 s vs 142.2)."""
    bf16, adam = Precision.BF16, Optimizer.ADAM
    for software in ("fsdp", "torchtitan"):
        preset = get_preset(software)
        one = build_recipe(preset, bf16, adam, ParallelismPlan(dp=1, fsdp=True))
        assert one.sharding is Sharding.NONE and one.shard_group == 0, software
        assert not one.stack_kernels.fsdp_copies and one.gather_bytes == 2, software
        repl = build_recipe(preset, bf16, adam, ParallelismPlan(dp=8, fsdp=True, hsdp=1))
        assert repl.sharding is Sharding.NONE and repl.shard_group == 0, software
        # two ranks, or context parallelism alone, shard (torchtitan's dp_shard_cp mesh)
        for plan in (ParallelismPlan(dp=2, fsdp=True), ParallelismPlan(dp=1, cp=2, fsdp=True)):
            rc = build_recipe(preset, bf16, adam, plan)
            assert rc.sharding is Sharding.FSDP and rc.stack_kernels.fsdp_copies, software
        hsdp = build_recipe(preset, bf16, adam, ParallelismPlan(dp=8, fsdp=True, hsdp=2))
        assert hsdp.sharding is Sharding.HSDP and hsdp.shard_group == 2, software


def test_one_gpu_fsdp_is_the_unsharded_run() -> None:
    """A torchtitan run on one GPU and the same run with zero=0 are one prediction."""
    fsdp = predict(_sc(software="torchtitan", gpus=1), baseline=False)
    plain = predict(_sc(software="torchtitan", gpus=1, zero=0), baseline=False)
    assert fsdp.plan["recipe"]["sharding"] == "none"
    assert fsdp.iteration_time_s == plain.iteration_time_s
    assert fsdp.memory_per_gpu_bytes == plain.memory_per_gpu_bytes


def test_megatron_core_distributed_optimizer_memory() -> None:
    """bf16 weights (2) + bf16 grad buffer (2: the NeMo / Megatron-Bridge performance recipes
    turn grad_reduce_in_fp32 off) + (FP32 master 4 + Adam 8) / dp; Megatron-LM's own bf16
    recipe ('megatron') keeps the FP32 buffer (4)."""
    sc = _sc(software="megatron-core")
    r = predict(sc, baseline=False)
    m = r.memory
    p = _params(sc)
    assert r.plan["recipe"]["sharding"] == "distributed-optimizer"
    assert m.weights_bytes + m.grads_bytes + m.optimizer_bytes == pytest.approx(4 * p + 12 * p / 8)
    assert r.plan["recipe"]["grad_reduce_bytes"] == 2
    meg = build_recipe(get_preset("megatron"), Precision.BF16, Optimizer.ADAM, ParallelismPlan())
    assert meg.grad_bytes == meg.grad_reduce_bytes == 4


def test_nemo_distributed_fused_adam_keeps_master_remainders() -> None:
    """NeMo 1.0's Apex distributed Adam with a bf16 model: bf16 weights (2) + bf16 gradients
    (2) + (16-bit master remainders 2 + Adam 8) / dp."""
    sc = _sc(software="nemo")
    r = predict(sc, baseline=False)
    m = r.memory
    p = _params(sc)
    assert r.plan["recipe"]["master_bytes"] == 2
    assert m.weights_bytes + m.grads_bytes + m.optimizer_bytes == pytest.approx(4 * p + 10 * p / 8)


def test_nemo_bf16_optimizer_state_keeps_no_master_copy() -> None:
    """NeMo's ``optim.dtype: bf16`` (Nemotron-4 340B's launcher config): Apex distributed Adam
    keeps both moments in bf16 and, its dtype being the model's, no master copy
    (``store_params=False``): bf16 weights (2) + bf16 gradients (2) + (bf16 Adam 2 x 2) / dp.
    Hand-computed on the 8-GPU plan (dp = 8): ``4 p + 4 p / 8 = 4.5 p`` bytes, against
    ``4 p + 10 p / 8 = 5.25 p`` with FP32 state."""
    sc = _sc(software="nemo", software_options={"optimizer_dtype": "bf16"})
    r = predict(sc, baseline=False)
    m = r.memory
    p = _params(sc)
    rc = r.plan["recipe"]
    assert rc["master_bytes"] == 0 and rc["optimizer_state_bytes"] == 4
    assert rc["optimizer_dtype"] == "bf16"
    assert m.optimizer_bytes == pytest.approx(4 * p / 8)
    assert m.weights_bytes + m.grads_bytes + m.optimizer_bytes == pytest.approx(4.5 * p)
    fp32 = predict(_sc(software="nemo"), baseline=False).memory
    assert fp32.optimizer_bytes - m.optimizer_bytes == pytest.approx(6 * p / 8)


def test_apex_master_copy_follows_nemo_store_params_rule() -> None:
    """NeMo 1.0 ``setup_optimization`` (r2.0.0rc1): no master with the state in the model's
    dtype, the 16 low bits (2 B) for FP32 state over bf16, a full copy in the state's dtype for
    an FP16 model or FP8 parameters (``store_params=True``); Megatron-Core keeps its FP32
    master (4 B) whatever the moments' dtype."""
    from perfmodel.parallel.software import with_software_options

    plan = ParallelismPlan(dp=8, zero=1)
    nemo = get_preset("nemo")

    def master(preset, precision=Precision.BF16, **opts):  # type: ignore[no-untyped-def]
        p = with_software_options(preset, opts)
        rc = build_recipe(p, precision, Optimizer.ADAM, plan)
        return rc.master_bytes, rc.state_bytes

    assert master(nemo) == (2, 10)
    assert master(nemo, optimizer_dtype="bf16") == (0, 4)
    assert master(nemo, Precision.FP8, optimizer_dtype="bf16") == (0, 4)
    assert master(nemo, Precision.FP16) == (4, 12)
    assert master(nemo, Precision.FP16, optimizer_dtype="fp16") == (0, 4)
    assert master(nemo, optimizer_dtype="fp16") == (2, 6)  # an FP16 copy beside FP16 moments
    assert master(nemo, Precision.FP8, fp8_params=True) == (4, 12)
    assert master(get_preset("megatron-core"), optimizer_dtype="bf16") == (4, 8)


def test_megatron_core_fp8_saves_fp8_gemm_inputs() -> None:
    """Transformer Engine under FP8 saves each block GEMM's input in FP8: the activations of a
    megatron-core fp8 step are the bf16 step's plus :func:`fp8_saved_input_delta` (negative);
    torchtitan (torchao float8 saves the high-precision input) is unchanged."""
    from perfmodel.parallel.recipe import fp8_saved_input_delta
    from perfmodel.pipeline.inputs import zoo_workload

    for software, changes in (("megatron-core", True), ("torchtitan", False)):
        kw = dict(software=software, gpus=1, system="dgx-h100")
        bf16 = predict(_sc(**kw), baseline=False).memory
        fp8 = predict(_sc(**kw, precision="fp8"), baseline=False).memory
        if not changes:
            assert fp8.activations_bytes == pytest.approx(bf16.activations_bytes)
            continue
        r = resolve(_sc(**kw))
        wl = zoo_workload("gpt", r.microbatch, "bf16", 1, False, tuple(sorted(GPT.items())))
        delta = fp8_saved_input_delta(wl.layers, 2)
        assert delta < 0
        assert fp8.activations_bytes == pytest.approx(bf16.activations_bytes + delta)


def _layer(
    name: str,
    block: int | None,
    act: float,
    out: tuple[int, ...],
    kind: LayerKind = LayerKind.LINEAR,
) -> LayerCost:
    return LayerCost(
        name=name,
        kind=kind,
        fwd_flop=1.0,
        bwd_input_flop=1.0,
        bwd_weight_flop=1.0,
        params=0,
        fwd_bytes=1.0,
        bwd_bytes=1.0,
        activation_bytes=act,
        output_shape=out,
        block=block,
    )


class _Prec:
    precision = Precision.BF16


def test_full_recompute_one_working_set_per_stage() -> None:
    """4 micro-batches in flight, two blocks of 1000 B each after an embedding (out 10 el.).

    Kept per micro-batch: embedding activations 50 B + block inputs 2 x 10 el x 2 B = 90 B;
    working set (the largest block, recomputed one micro-batch at a time) 1000 B:
    4 x 90 + 1000 = 1360 B (was 4 x 1090 = 4360 B).
    """
    layers = (
        _layer("embed", None, 50.0, (10,)),
        _layer("b0", 0, 1000.0, (10,)),
        _layer("b1", 1, 1000.0, (10,)),
    )
    seg = Segment(0.0, 0.0, 0.0, 0.0, 0.0, 0, 0.0, 0.0)
    chunk = Chunk((seg,), 0.0, 0.0, 2, layers)
    plan = ParallelismPlan(pp=2, microbatch_size=1, recompute=Recompute.FULL)
    mem = stage_memory(
        [chunk],
        plan=plan,
        costs=_Prec(),  # type: ignore[arg-type]
        optimizer=Optimizer.SGD,
        in_flight=4,
        capacity_bytes=1e12,
        comm_buffer_bytes=0.0,
    )
    assert mem.activations_bytes == pytest.approx(1360.0)


def test_middle_stage_keeps_its_received_input() -> None:
    """4 micro-batches in flight on a stage of two pre-norm blocks (a norm and a linear layer,
    500 B each; outputs 10 elements, bf16): each keeps both block inputs, 2 x 10 x 2 = 40 B,
    plus one working set of 1000 B: 4 x 40 + 1000 = 1160 B (main18: 4 x 20 + 1000 = 1080 B,
    the received input left out). A block that begins with a linear layer is not guessed."""
    norm = LayerKind.NORM
    layers = tuple(
        la
        for b in (1, 2)
        for la in (_layer(f"b{b}.ln", b, 500.0, (10,), norm), _layer(f"b{b}.fc", b, 500.0, (10,)))
    )
    seg = Segment(0.0, 0.0, 0.0, 0.0, 0.0, 0, 0.0, 0.0)
    assert full_recompute_bytes(layers[1:], Precision.BF16) == (20.0, 1000.0)  # b1.fc first
    mem = stage_memory(
        [Chunk((seg,), 0.0, 0.0, 2, layers)],
        plan=ParallelismPlan(pp=2, microbatch_size=1, recompute=Recompute.FULL),
        costs=_Prec(),  # type: ignore[arg-type]
        optimizer=Optimizer.SGD,
        in_flight=4,
        capacity_bytes=1e12,
        comm_buffer_bytes=0.0,
    )
    assert mem.activations_bytes == 1160.0


# ------------------------------------------------------------------ overlap and streams


def test_fsdp_gathers_prefetch_on_their_own_stream() -> None:
    sc = _sc(software="fsdp")
    _, step = _graph(sc)
    gathers = [t for t in step.graph.tasks if t.comm is not None and t.comm.kind is CommKind.ZERO]
    grads = [t for t in step.graph.tasks if t.label.startswith("grad")]
    assert gathers and grads
    assert {t.stream for t in gathers} == {"ag"}
    assert {t.stream for t in grads} == {"dp"}


def test_fsdp_llama_exposed_comm_is_small() -> None:
    """Llama-2-7B FSDP on 8 A100, batch 1/GPU: the issue measured 104 ms exposed with the
    gathers FIFO behind the reduce-scatters; prefetched on their own stream it is < 30 ms."""
    sc = Scenario(
        system="dgx-a100",
        model="llama",
        software="fsdp",
        precision="bf16",
        optimizer="adam",
        batch_per_gpu=1,
        fidelity="analytic",
    )
    r = predict(sc, baseline=False)
    assert r.breakdown.exposed_comm_total_s < 30e-3
    m = r.memory
    assert m.weights_bytes + m.grads_bytes + m.optimizer_bytes == pytest.approx(
        16 * 6_738_415_616 / 8, rel=0.03
    )


def test_overlap_slowdown_scales_with_overlapped_comm() -> None:
    """Compute is slowed by 5 % of the communication under it, not 5 % of every segment."""
    sc = _sc(
        software="pytorch-ddp",
        gpus=2,
        model="resnet50",
        model_args={},
        batch_per_gpu=64,
        precision="fp16",
    )
    _, step = _graph(sc)
    base_r = resolve(sc)
    no_slow = replace(base_r, preset=base_r.preset.with_overrides(overlap_compute_slowdown=0.0))
    from perfmodel.pipeline.lower import build_step as build

    step0, _ = build(sc, no_slow)
    compute = sum(t.duration_s for t in step.graph.tasks if t.kind is TaskKind.COMPUTE)
    compute0 = sum(t.duration_s for t in step0.graph.tasks if t.kind is TaskKind.COMPUTE)
    comm = sum(t.duration_s for t in step.graph.tasks if t.label.startswith("grad"))
    assert 0 < compute - compute0 <= 0.05 * comm + 1e-12


def test_deepspeed_overlap_comm_defaults() -> None:
    """DeepSpeed's overlap_comm defaults to False for stages 1 and 2, True for stage 3."""
    plan = ParallelismPlan(dp=8)
    for name in ("deepspeed-zero1", "deepspeed-zero2"):
        assert not build_recipe(
            get_preset(name), Precision.BF16, Optimizer.ADAM, plan
        ).grad_comm.overlap
    z3 = build_recipe(
        get_preset("deepspeed-zero3"), Precision.BF16, Optimizer.ADAM, replace(plan, zero=3)
    )
    assert z3.grad_comm.overlap and z3.sharding is Sharding.ZERO3


def test_sequence_parallel_pipeline_send_divided_once() -> None:
    """tp=2 with SP: each rank sends its sequence shard b s h / tp x 2 B = 2 x 256 x 512 B."""
    sc = _sc(software="megatron", tp=2, pp=2, microbatch=2, sequence_parallel=True, batch_per_gpu=2)
    _, step = _graph(sc)
    sends = [t for t in step.graph.tasks if t.kind is TaskKind.SENDRECV]
    assert sends
    assert {t.comm.message_bytes for t in sends} == {2 * 256 * 512 / 2 * 2}


def test_tp_collectives_of_recompute_are_comm() -> None:
    sc = _sc(software="megatron", tp=2, recompute="full", batch_per_gpu=2, gpus=2)
    r = predict(sc, baseline=False)
    r0 = predict(replace(sc, recompute="none"), baseline=False)
    # recomputation repeats the forward's TP all-reduces: more exposed tp, not more compute-only
    assert r.breakdown.exposed_comm_s["tp"] > r0.breakdown.exposed_comm_s["tp"] * 1.2


def test_megatron_core_overlaps_tp_comm() -> None:
    """TE userbuffers: the TP collectives run on their own stream beside the GEMMs, but for
    the forward's pipelined reduce-scatter tails (1/8 of the forward's TP time, on the compute
    stream after the GEMMs)."""
    sc = _sc(software="megatron-core", tp=2, gpus=2, batch_per_gpu=2)
    _, step = _graph(sc)
    tp = [t for t in step.graph.tasks if t.label.startswith("TP ") and "tail" not in t.label]
    tails = [t for t in step.graph.tasks if t.label.startswith("TP tail")]
    assert tp and {t.stream for t in tp} == {"tp"}
    assert tails and {t.stream for t in tails} == {"compute"}
    assert all(t.label.startswith("TP tail F") for t in tails)
    fwd = sum(t.duration_s for t in tp if t.label.startswith("TP F"))
    assert sum(t.duration_s for t in tails) == pytest.approx((fwd + sum(
        t.duration_s for t in tails)) / 8)  # fmt: skip
    meg = predict(replace(sc, software="megatron"), baseline=False)
    core = predict(sc, baseline=False)
    assert core.breakdown.exposed_comm_s.get("tp", 0.0) < meg.breakdown.exposed_comm_s["tp"]


# ------------------------------------------------------------------ plan parsing


def test_interleave_implies_interleaved_schedule() -> None:
    r = resolve(_sc(software="megatron", pp=2, interleave=2, microbatch=1))
    assert r.plan.schedule is PipelineSchedule.INTERLEAVED


def test_predict_accepts_adamw(capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(
        [
            "predict",
            "--system",
            "dgx-a100",
            "--model",
            "gpt",
            "--model-arg",
            "layers=2",
            "hidden=256",
            "heads=4",
            "seq_len=128",
            "vocab=1000",
            "--precision",
            "bf16",
            "--optimizer",
            "adamw",
            "--batch-per-gpu",
            "1",
            "--fidelity",
            "analytic",
        ]
    )
    assert rc == 0
    assert "iteration time" in capsys.readouterr().out


def test_recipe_is_in_the_json_plan() -> None:
    r = predict(_sc(software="torchtitan"), baseline=False)
    rec = r.plan["recipe"]
    assert rec["sharding"] == "fsdp" and rec["grad_reduce_bytes"] == 4 and rec["gather_bytes"] == 2
    assert rec["param_gather"] == {"overlap": True, "stream": "ag"}


def test_predict_explain_prints_the_recipe(capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(
        [
            "predict",
            "--system",
            "dgx-a100",
            "--model",
            "gpt",
            "--model-arg",
            "layers=2",
            "hidden=256",
            "heads=4",
            "seq_len=128",
            "vocab=1000",
            "--precision",
            "bf16",
            "--optimizer",
            "adam",
            "--software",
            "megatron-core",
            "--batch-per-gpu",
            "1",
            "--fidelity",
            "analytic",
            "--explain",
        ]
    )
    out = capsys.readouterr().out
    assert rc == 0
    assert "sharding distributed-optimizer" in out
    assert "grad reduction 2" in out and "autocast casts each step: no" in out
    assert "source: Megatron-Core" in out


def test_tied_embedding_copy_on_last_stage_and_its_allreduce() -> None:
    """GPT with a tied LM head, pp=2, tp=1: the last stage holds the 8000 x 512 word embedding
    (4,096,000 parameters) and all-reduces its FP32 gradient (megatron bf16) with stage 0:
    16,384,000 bytes."""
    sc = _sc(software="megatron", pp=2, microbatch=1, gpus=2, batch_per_gpu=2)
    r, step = _graph(sc)
    (ar,) = [t for t in step.graph.tasks if t.label == "embedding grad all-reduce"]
    assert ar.comm.message_bytes == 8000 * 512 * 4
    assert len(ar.comm.group) == 2
    mem = step.memory
    rc = r.recipe
    # per parameter: 2 (bf16) + 4 (FP32 grad) + 12 (master + Adam) = 18 bytes on the copy too
    first_params = (mem[0].weights_bytes + mem[0].grads_bytes + mem[0].optimizer_bytes) / 18
    last_params = (mem[1].weights_bytes + mem[1].grads_bytes + mem[1].optimizer_bytes) / 18
    assert rc.param_bytes + rc.grad_bytes + rc.state_bytes == 18
    # the model's parameters once, plus the copy on the last stage
    assert first_params + last_params == pytest.approx(_params(sc) + 8000 * 512)


def test_hsdp_shards_within_the_server_and_all_reduces_across() -> None:
    """FSDP hybrid sharding, 2 DGX A100 (dp=16), shard group 8: model state 16 B x params / 8;
    each gradient unit is reduce-scattered over the 8 GPUs of a server, then its 1/8 shard
    (bf16: 2 B x unit params / 8) all-reduced over the 2 replicas."""
    sc = _sc(software="fsdp", nodes=2, hsdp=8)
    r, step = _graph(sc)
    assert r.recipe.sharding is Sharding.HSDP and r.recipe.shard_group == 8
    m = step.memory[0]
    assert m.weights_bytes + m.grads_bytes + m.optimizer_bytes == pytest.approx(
        16 * _params(sc) / 8
    )
    rs = [t for t in step.graph.tasks if t.label.startswith("grad") and "replicas" not in t.label]
    ar = [t for t in step.graph.tasks if t.label.endswith("replicas")]
    assert rs and len(rs) == len(ar)
    assert {len(t.comm.group) for t in rs} == {8} and {len(t.comm.group) for t in ar} == {2}
    for a, b in zip(rs, ar, strict=True):
        assert b.comm.message_bytes == pytest.approx(a.comm.message_bytes / 8)
    gathers = [t for t in step.graph.tasks if t.comm is not None and t.comm.kind is CommKind.ZERO]
    assert {len(t.comm.group) for t in gathers} == {8}


def test_hsdp_needs_fsdp_and_a_dividing_group() -> None:
    from perfmodel.errors import InfeasiblePlanError

    with pytest.raises(InfeasiblePlanError, match="hsdp=3"):
        resolve(_sc(software="fsdp", nodes=2, hsdp=3))
    with pytest.raises(InfeasiblePlanError, match="needs FSDP"):
        resolve(_sc(software="pytorch-ddp", hsdp=4))


def test_torchtitan_op_level_selective_recompute() -> None:
    """torchtitan's selective AC 'op' re-runs half of each block's matrix products and every
    cheaper op, never SDPA or layers outside blocks. Forward times 2 ms (linear), 1 ms (norm),
    4 ms (fused attention) in a block and 3 ms (embedding) outside: 1 + 1 + 0 + 0 = 2 ms
    recomputed (Megatron's attention-core selective: 0 ms with fused attention)."""
    from perfmodel.parallel.lowering import build_chunk
    from perfmodel.parallel.recipe import SelectiveRecompute
    from perfmodel.workload.layers import Workload

    def lay(name: str, kind: LayerKind, block: int | None) -> LayerCost:
        return replace(_layer(name, block, 0.0, (1,)), kind=kind)

    layers = (
        lay("embed", LayerKind.EMBEDDING, None),
        lay("norm", LayerKind.NORM, 0),
        lay("attn", LayerKind.ATTENTION, 0),
        lay("fc", LayerKind.LINEAR, 0),
    )
    fwd = {"embed": 3e-3, "norm": 1e-3, "attn": 4e-3, "fc": 2e-3}

    class FixedCosts:
        precision = Precision.BF16

        def layer_time(self, layer: LayerCost) -> tuple[float, float, float]:
            return fwd[layer.name], 0.0, 0.0

        def collective_time(self, *a: object, **k: object) -> float:
            return 0.0

    wl = Workload(name="t", layers=layers, batch_size=1, precision=Precision.BF16, total_params=0)
    plan = ParallelismPlan(recompute=Recompute.SELECTIVE)
    kw = dict(bucket_bytes=None, first_bucket_bytes=None, by_block=False)
    op = build_chunk(
        wl,
        [0, 1, 2, 3],
        FixedCosts(),
        plan,
        ("g0",),
        **kw,  # type: ignore[arg-type]
        selective_share=SelectiveRecompute.OP.share,
    )
    core = build_chunk(wl, [0, 1, 2, 3], FixedCosts(), plan, ("g0",), **kw)  # type: ignore[arg-type]
    assert op.segments[0].recompute_s == pytest.approx(2e-3)
    assert core.segments[0].recompute_s == 0.0
    assert get_preset("torchtitan").selective_recompute is SelectiveRecompute.OP


def test_torchtitan_splits_pipeline_stages_unevenly() -> None:
    """6 equal blocks over 4 stages: Megatron refuses (layers must divide), torchtitan splits
    as evenly as it can (2 + 2 + 1 + 1 blocks, the embedding and head joining the ends)."""
    from perfmodel.errors import InfeasiblePlanError

    args = {**GPT, "layers": 6}
    sc = _sc(software="torchtitan", pp=4, microbatch=1, gpus=4, model_args=args)
    _, step = _graph(sc)
    assert step.memory and len(step.memory) == 4
    from perfmodel.parallel.partition import partition
    from perfmodel.pipeline.inputs import zoo_workload

    wl = zoo_workload("gpt", 1, "bf16", 1, False, tuple(sorted(args.items())))
    parts = partition(wl, 4, [1.0] * len(wl.layers), allow_uneven=True)
    blocks = [len({wl.layers[i].block for i in p} - {None}) for p in parts]
    assert sorted(blocks) == [1, 1, 2, 2]
    # Megatron takes 6 blocks on 4 stages only as Llama 3 does (first and last stage one block
    # short: 1 + 2 + 2 + 1, lowering._uneven_ends); 5 blocks on 4 stages it refuses
    mega = partition(wl, 4, [1.0] * len(wl.layers))
    assert [len({wl.layers[i].block for i in p} - {None}) for p in mega] == [1, 2, 2, 1]
    five = {**args, "layers": 5}
    with pytest.raises(InfeasiblePlanError, match="do not divide"):
        _graph(replace(sc, software="megatron", model_args=five))


def test_sequence_parallel_follows_the_preset_with_tensor_parallelism() -> None:
    """megatron-core and torchtitan recipes turn sequence parallelism on with tp > 1 (NeMo 2.0 /
    Megatron-Bridge recipes; torchtitan's TP plan); megatron (2021) and tp = 1 do not; an explicit
    value wins."""
    from perfmodel.api import resolve

    def sp(**kw):
        return resolve(_sc(gpus=8, microbatch=1, **kw)).plan

    assert sp(software="megatron-core", tp=2).sequence_parallel
    assert sp(software="torchtitan", tp=2).sequence_parallel
    assert not sp(software="megatron-core", tp=1).sequence_parallel
    assert not sp(software="megatron", tp=2).sequence_parallel
    assert not sp(software="megatron-core", tp=2, sequence_parallel=False).sequence_parallel
    assert sp(software="megatron", tp=2, sequence_parallel=True).sequence_parallel


def test_fp8_saved_inputs_leave_the_moe_router_in_16_bit() -> None:
    """The MoE router's GEMM is not FP8 (Megatron-Core ``moe_router_dtype``), so its saved
    input keeps its 16-bit size: only the block's FP8 linears shrink. Hand count on one MoE
    block (b s = 32 tokens, h = 64, 4 experts top-2, f = 128, no attention output projection
    change counted here): qkv input 32 x 64, experts_fc1 input 64 rows x 64, experts_fc2
    input 64 x 128, each halved from 2 B to 1 B per element; attn_out gets its FP8 copy."""
    from perfmodel.parallel.recipe import fp8_saved_input_delta
    from perfmodel.workload import build_model

    w = build_model("moe", batch_size=1, seq_len=32, hidden=64, layers=1, heads=4, kv_heads=2,
                    ffn_hidden=128, experts=4, top_k=2, vocab=100, precision="bf16")  # fmt: skip
    by = {la.name: la for la in w.layers}
    assert by["layer0.router"].activation_bytes == 32 * 64 * 2
    qkv, fc1, fc2 = 32 * 64, 64 * 64, 64 * 128
    attn_out = 32 * 64  # its FP8 copy comes in addition (+1 B per element)
    assert fp8_saved_input_delta(w.layers, 2) == -(qkv + fc1 + fc2) + attn_out
