"""The screen builds each plan's workload as ``predict`` builds it (issue 27, item 5: one fact,
one place): the kernels of the plan's training recipe (the stack's fusion mode, the FP8
recipe's casts and the cached weight cast's share per micro-batch, FSDP2's copies), the base's
``compile``, FP8 recipe and ``software_options``, from ``predict``'s own workload cache. At
main d7951d8 the screen built every workload with the default (eager PyTorch) kernels."""

from __future__ import annotations

from typing import Any

import pytest

from perfmodel.api import Scenario, predict
from perfmodel.dtypes import Precision
from perfmodel.errors import ConfigError
from perfmodel.pipeline.inputs import zoo_workload
from perfmodel.pipeline.lower import step_workload
from perfmodel.pipeline.resolve import resolve
from perfmodel.search.screen import PlanScreen
from perfmodel.workload.kernels import DEFAULT_KERNELS, Fusion
from perfmodel.workload.layers import LayerKind

GPT = {"layers": 4, "hidden": 1024, "heads": 16, "seq_len": 1024}


def _base(software: str, **kw: Any) -> dict[str, Any]:
    return {
        "system": "dgx-h100",
        "gpus": 1,
        "model": "gpt",
        "model_args": GPT,
        "precision": "bf16",
        "optimizer": "adam",
        "software": software,
        "global_batch": 8,
        **kw,
    }


def _predicted(base: dict[str, Any], plan: dict[str, Any]) -> Any:
    sc = Scenario.from_dict({**base, **plan, "fidelity": "analytic"})
    return predict(sc, baseline=False)


# (software, base fields, the plan's zero): one GPU, 4 micro-batches of 2
CASES = [
    ("pytorch-ddp", {}, 0),  # eager: matched at main too
    ("megatron-core", {}, 0),  # Transformer Engine kernels (main: 1.9% more compute)
    ("megatron-core", {"precision": "fp8"}, 0),  # TE FP8 casts, 1/8 weight cast (main: 2.5% less)
    ("pytorch-ddp", {"compile": True}, 0),  # torch.compile (main: eager's, 1.1% more)
    ("torchtitan", {"precision": "fp8", "compile": True}, 3),  # FSDP2 copies, torchao casts
]


@pytest.mark.parametrize(("software", "extra", "zero"), CASES)
def test_one_gpu_screen_compute_is_predicts(
    software: str, extra: dict[str, Any], zero: int
) -> None:
    """On one GPU the screen's compute (its layer times of one micro-batch, times ``m``) is
    ``predict``'s analytic compute to the summation order: the same workload, the same cost
    model."""
    base, plan = _base(software, **extra), {"microbatch": 2, "zero": zero}
    screen = PlanScreen(base)(plan)
    pred = _predicted(base, plan)
    assert screen["compute_time_s"] == pytest.approx(pred.compute_time_s, rel=1e-12)


def test_screen_workload_is_predicts_cached_workload() -> None:
    """The screen's workload of a Megatron-Core FP8 plan is the object ``predict`` lowers
    (:func:`perfmodel.pipeline.lower.step_workload`: the same cache), built with the plan's
    recipe's kernels for its 4 micro-batches (FP8 parameters: 1/4 x 1/2 of the weight cast)."""
    base, plan = _base("megatron-core", precision="fp8"), {"microbatch": 2}
    screen = PlanScreen(base)
    screen(plan)
    sc = Scenario.from_dict({**base, **plan, "fidelity": "analytic"})
    r = resolve(sc)
    wl, _ = step_workload(sc, r, None)
    assert any(w is wl for w in screen._wl_cache.values())
    kernels = r.recipe.kernels(4)  # type: ignore[union-attr]
    assert kernels.fusion is Fusion.TE and kernels.weight_cast_share == 0.125
    assert kernels in screen._kernels
    # one micro-batch per step: the whole cast each micro-batch, another workload
    screen({"microbatch": 8})
    assert {k.weight_cast_share for k in screen._kernels} >= {0.125, 0.5}


# Llama with grouped-query attention (4 K/V heads of 16) and context parallelism 2
LLAMA = {"hidden": 2048, "layers": 2, "heads": 16, "kv_heads": 4, "ffn_hidden": 5632,
         "vocab": 32000, "seq_len": 4096}  # fmt: skip


@pytest.mark.parametrize(
    ("software", "heads_sent"),
    [("megatron-core", 4), ("torchtitan", 16)],
)
def test_context_exchange_bytes_are_the_stacks(software: str, heads_sent: int) -> None:
    """The ring's forward all-gather moves all ``cp`` chunks of K and V: ``cp x 2 x (s / cp)
    x heads x 128 x 2 B`` for one sample, 2 x 2 x 2048 x heads x 128 x 2. Transformer Engine
    sends the 4 K/V heads (8 MiB); PyTorch's ring the K/V repeated to the 16 query heads
    (32 MiB), which the screen charged every stack at main."""
    base = {**_base(software, model="llama", model_args=LLAMA), "optimizer": "adamw"}
    screen = PlanScreen(base)
    screen({"gpus": 2, "cp": 2, "microbatch": 1, "global_batch": 1, "zero": 0})
    (wl,) = screen._wl_cache.values()
    attn = next(la for la in wl.layers if la.kind is LayerKind.ATTENTION)
    assert attn.fwd_comm[0].group == "cp"
    assert attn.fwd_comm[0].message_bytes == 2 * 2 * 2048 * heads_sent * 128 * 2


def test_te_screen_differs_from_eager_where_the_kernels_differ() -> None:
    """Megatron-Core's screen of a bf16 plan times Transformer Engine's kernels: its compute
    is ``m`` times the layer times of the TE workload, not of the eager one (the same GEMMs,
    other memory-bound kernels: fused norms, bias-GELU, cross-entropy), which is over 1% more
    on the same cost model; at main the screen timed the eager workload."""
    screen = PlanScreen(_base("megatron-core"))
    rep = screen({"microbatch": 2, "zero": 0})
    costs = screen._system_costs(1)
    args = tuple(sorted(GPT.items()))

    def compute_s(kernels: Any) -> float:
        wl = zoo_workload("gpt", 2, Precision.BF16, 1, False, args, (1, 1, 0), kernels)
        return 4 * sum(sum(costs.layer_time(la)) for la in wl.layers)

    te = screen.recipe.kernels(4)
    assert te.fusion is Fusion.TE
    assert rep["compute_time_s"] == pytest.approx(compute_s(te), rel=1e-12)
    assert compute_s(DEFAULT_KERNELS) > 1.01 * rep["compute_time_s"]


def test_compile_is_read_as_predict_reads_it() -> None:
    """``compile=True`` (``--compile``): the screen's recipe runs torch.compile's kernels
    (fewer memory-bound kernels: less compute than eager); on a Transformer Engine stack it is
    ``predict``'s refusal, naming ``--compile``."""
    plan = {"microbatch": 2, "zero": 0}
    compiled = PlanScreen(_base("pytorch-ddp", compile=True))
    assert compiled.recipe.fusion is Fusion.COMPILE
    eager = PlanScreen(_base("pytorch-ddp"))
    assert compiled(plan)["compute_time_s"] < eager(plan)["compute_time_s"]
    with pytest.raises(ConfigError) as err:
        PlanScreen(_base("megatron-core", compile=True))
    assert err.value.where == "--compile"


def test_software_options_are_read() -> None:
    """``software_options`` set beside the preset reach the screen's recipe as ``predict``'s
    (NeMo's Adam state in bf16 without a master copy: 4 bytes per parameter, not 8 + 2)."""
    base = _base("nemo", software_options={"optim.dtype": "bf16"})
    screen = PlanScreen(base)
    sc = Scenario.from_dict({**base, "fidelity": "analytic"})
    assert screen.recipe.state_bytes == resolve(sc).recipe.state_bytes  # type: ignore[union-attr]
    assert screen.recipe.state_bytes < PlanScreen(_base("nemo")).recipe.state_bytes
