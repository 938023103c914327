"""The training recipe carries the stack's kernels (issue 24): fusion mode (``--compile``), FP8
recipe (``--fp8-recipe``), optimizer implementation; what each changes in a prediction."""

from __future__ import annotations

import json

import pytest

from perfmodel.api import Scenario, predict, resolve
from perfmodel.cli import main
from perfmodel.dtypes import Precision
from perfmodel.errors import ConfigError
from perfmodel.parallel.plan import ParallelismPlan
from perfmodel.parallel.recipe import build_recipe
from perfmodel.parallel.software import get_preset
from perfmodel.workload.kernels import Fp8Recipe, Fusion, GradClip, OptimizerImpl
from perfmodel.workload.memory import Optimizer

LLAMA = {
    "hidden": 1024,
    "layers": 4,
    "heads": 16,
    "kv_heads": 4,
    "ffn_hidden": 3584,
    "vocab": 32000,
    "seq_len": 2048,
}


def _sc(**kw: object) -> Scenario:
    base = dict(
        system="dgx-h100",
        model="llama",
        model_args=LLAMA,
        global_batch=16,
        microbatch=2,
        precision="bf16",
        optimizer="adamw",
        software="torchtitan",
        fidelity="analytic",
    )
    base.update(kw)
    return Scenario(**base)  # type: ignore[arg-type]


def test_presets_name_their_kernels() -> None:
    adam, plan = Optimizer.ADAMW, ParallelismPlan(dp=8)
    tt = build_recipe(
        get_preset("torchtitan"), Precision.FP8, adam, ParallelismPlan(dp=8, fsdp=True)
    )
    assert (tt.fusion, tt.fp8, tt.optimizer_impl, tt.grad_clip) == (
        Fusion.EAGER, Fp8Recipe.TORCHAO_TENSORWISE, OptimizerImpl.FOREACH, GradClip.FOREACH,
    )  # fmt: skip
    assert tt.stack_kernels.fsdp_copies and tt.gather_bytes == 1  # FSDP2 float8 all-gather
    mc = build_recipe(get_preset("megatron-core"), Precision.FP8, adam, plan)
    assert (mc.fusion, mc.fp8, mc.optimizer_impl) == (
        Fusion.TE,
        Fp8Recipe.TE_DELAYED,
        OptimizerImpl.FUSED,
    )
    # NeMo 2.0 FP8 keeps FP8 parameters: the distributed optimizer gathers 1 byte each
    assert not mc.stack_kernels.fsdp_copies and mc.fp8_params and mc.gather_bytes == 1
    mbf = build_recipe(get_preset("megatron-core"), Precision.BF16, adam, plan)
    assert not mbf.fp8_params and mbf.gather_bytes == 2
    bf = build_recipe(get_preset("torchtitan"), Precision.BF16, adam, plan, compile=True)
    assert bf.fusion is Fusion.COMPILE and bf.fp8 is None
    d = bf.to_dict()
    assert d["fusion"] == "compile" and d["fp8_recipe"] is None
    assert any("kernels: compile" in line for line in bf.describe())


def test_kernels_read_the_reduce_width_when_called() -> None:
    """FSDP2's reduce-scatter input width is the recipe's ``grad_reduce_bytes``, read by
    ``kernels()`` when called (review10 finding 8): a recipe replaced with another width gives
    kernels of that width, not the one the recipe was built with."""
    from dataclasses import replace

    plan = ParallelismPlan(dp=8, fsdp=True)
    for precision in (Precision.BF16, Precision.FP8):
        tt = build_recipe(get_preset("torchtitan"), precision, Optimizer.ADAMW, plan)
        assert tt.stack_kernels.fsdp_copies
        assert tt.kernels(1).fsdp_reduce_bytes == tt.grad_reduce_bytes
        other = 2 if tt.grad_reduce_bytes != 2 else 4
        moved = replace(tt, grad_reduce_bytes=other)
        assert moved.kernels(1).fsdp_reduce_bytes == other
        assert moved.kernels(4).fsdp_reduce_bytes == other


def test_recipe_refuses_what_the_stack_cannot_run() -> None:
    adam, plan = Optimizer.ADAMW, ParallelismPlan(dp=8)
    with pytest.raises(ConfigError, match="--compile"):
        build_recipe(get_preset("megatron-core"), Precision.BF16, adam, plan, compile=True)
    with pytest.raises(ConfigError, match="--precision fp8"):
        build_recipe(
            get_preset("torchtitan"), Precision.BF16, adam, plan, fp8_recipe=Fp8Recipe.MXFP8
        )
    with pytest.raises(ConfigError, match="Blackwell"):
        resolve(_sc(precision="fp8", fp8_recipe="mxfp8"))
    with pytest.raises(ConfigError, match="fp8_recipe"):
        resolve(_sc(precision="fp8", fp8_recipe="per-block-magic"))


def test_compile_is_faster_than_eager_by_its_fused_kernels() -> None:
    """The same step compiled: GEMM and attention time unchanged, the norm/RoPE/activation
    kernels shrink; the per-class breakdown sums to the compute time."""
    eager = predict(_sc(), baseline=False)
    comp = predict(_sc(compile=True), baseline=False)
    assert comp.iteration_time_s < eager.iteration_time_s
    e, c = eager.kernel_classes, comp.kernel_classes
    assert c["gemm:bf16"] == pytest.approx(e["gemm:bf16"])
    assert c["attention"] == pytest.approx(e["attention"])
    # RMSNorm 36 + 92 B/element eager against 4 + 10 fused, RoPE 20 + 20 against 4 + 4,
    # SwiGLU 10 + 18 against 6 + 10 (plus launches)
    for k, ratio in (("norm", 0.2), ("rope", 0.3), ("activation", 0.6)):
        assert c[k] < ratio * e[k]
    for rep in (eager, comp):
        kernels = sum(v for k, v in rep.kernel_classes.items() if k != "optimizer")
        assert kernels == pytest.approx(rep.breakdown.compute_s, rel=0.02)
        assert rep.kernel_classes["optimizer"] == pytest.approx(rep.breakdown.optimizer_s)


def test_fp8_recipes_cost_their_casts() -> None:
    """Row-wise torchao re-quantises in backward (more cast bytes than tensor-wise); every FP8
    recipe keeps the LM head in BF16."""
    reps = {
        r: predict(_sc(precision="fp8", compile=True, fp8_recipe=r), baseline=False)
        for r in ("torchao-tensorwise", "torchao-rowwise")
    }
    tw, rw = reps["torchao-tensorwise"], reps["torchao-rowwise"]
    assert rw.kernel_classes["fp8_cast"] > tw.kernel_classes["fp8_cast"] > 0
    assert tw.kernel_classes["gemm:bf16"] > 0 and tw.kernel_classes["gemm:fp8"] > 0
    assert tw.plan["recipe"]["fp8_recipe"] == "torchao-tensorwise"


def test_te_fp8_weight_cache_in_memory() -> None:
    """Transformer Engine keeps each FP8 linear's FP8 weight and its transpose: 2 bytes per
    parameter of the blocks' linear layers more than BF16 (``megatron``: 16-bit parameters);
    with FP8 parameters (``megatron-core``, NeMo ``fp8_params``) they replace the 16-bit weight."""
    h, f, q, kv, n = 1024, 3584, 1024, 2 * 4 * 64, 4
    linear = n * (h * (q + kv) + q * h + 3 * h * f)
    for software, extra in (("megatron", 2.0 * linear), ("megatron-core", 0.0)):
        sc = _sc(software=software, global_batch=8, microbatch=1, gpus=1)
        bf = predict(sc, baseline=False)
        f8 = predict(_sc(**{**sc.to_dict(), "precision": "fp8"}), baseline=False)
        assert f8.memory.weights_bytes - bf.memory.weights_bytes == pytest.approx(extra)


def test_cli_compile_and_fp8_recipe_flags(capsys: pytest.CaptureFixture[str]) -> None:
    argv = [
        "predict", "--system", "dgx-h100", "--model", "llama", "--global-batch", "16",
        "--plan", "microbatch=2", "--software", "torchtitan", "--fidelity", "analytic",
        "--optimizer", "adamw", "--precision", "fp8", "--fp8-recipe", "torchao-rowwise",
        "--compile", "--json",
        *(a for k, v in LLAMA.items() for a in ("--model-arg", f"{k}={v}")),
    ]  # fmt: skip
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["plan"]["recipe"]["fusion"] == "compile"
    assert out["plan"]["recipe"]["fp8_recipe"] == "torchao-rowwise"
    assert out["kernel_classes"]["fp8_cast"] > 0
    assert main([*(a for a in argv if a != "--json"), "--explain"]) == 0
    text = capsys.readouterr().out
    assert "where the step goes" in text and "fp8_cast" in text


def test_precision_fp8_names_the_recipe_it_assumed() -> None:
    """``--precision fp8`` keeps working; the report says which recipe it assumed (once: not
    again for the speedup baseline), and nothing when ``--fp8-recipe`` chose."""
    rep = predict(_sc(software="megatron-core", precision="fp8", gpus=2, global_batch=4))
    notes = [d for d in rep.defaults if "FP8 recipe" in d]
    assert notes == [
        "FP8 recipe te-delayed, the megatron-core preset's (--fp8-recipe chooses another)"
    ]
    chosen = predict(_sc(precision="fp8", fp8_recipe="te-current"), baseline=False)
    assert not [d for d in chosen.defaults if "FP8 recipe" in d]
    assert chosen.plan["recipe"]["fp8_recipe"] == "te-current"


def test_scenario_files_take_compile_and_fp8_recipe() -> None:
    sc = Scenario.from_dict({**_sc().to_dict(), "compile": "yes", "fp8-recipe": "te-current"})
    assert sc.compile is True and sc.fp8_recipe == "te-current"
    with pytest.raises(ConfigError, match="compile"):
        Scenario.from_dict({**_sc().to_dict(), "compile": "sometimes"})
