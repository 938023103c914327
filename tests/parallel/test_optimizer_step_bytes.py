"""The optimizer step's memory traffic follows the recipe's state dtype and master copy
(``Recipe.optimizer_dtype``, :class:`~perfmodel.parallel.stack_choices.MasterCopy`), not an FP32
Adam whatever the run keeps."""

from __future__ import annotations

import pytest

from perfmodel.api import Scenario, predict
from perfmodel.dtypes import Precision
from perfmodel.parallel.plan import ParallelismPlan
from perfmodel.parallel.recipe import build_recipe
from perfmodel.parallel.software import get_preset, with_software_options
from perfmodel.workload.kernels import OptimizerImpl, optimizer_bytes_per_param
from perfmodel.workload.memory import Optimizer


@pytest.mark.parametrize(
    ("preset", "opts", "precision", "state", "weight", "working"),
    [
        ("megatron-core", {}, Precision.BF16, 4, 4, 2),  # FP32 master copy, bf16 written back
        ("nemo", {}, Precision.BF16, 4, 4, 0),  # Apex remainders: 2 + 2, in place
        ("nemo", {"optim.dtype": "bf16"}, Precision.BF16, 2, 2, 0),  # no master copy
        ("fsdp", {}, Precision.BF16, 4, 4, 0),  # FSDP2 keeps FP32 parameters
        ("pytorch-ddp", {}, Precision.FP32, 4, 4, 0),
    ],
)
def test_compute_recipe_optimizer_bytes(
    preset: str, opts: dict, precision: Precision, state: int, weight: int, working: int
) -> None:
    sw = with_software_options(get_preset(preset), opts) if opts else get_preset(preset)
    c = build_recipe(sw, precision, Optimizer.ADAM, ParallelismPlan(dp=2, zero=1)).compute
    assert (c.state_bytes, c.weight_bytes, c.working_copy_bytes) == (state, weight, working)


def test_foreach_bytes_scale_with_the_tensor_widths() -> None:
    """foreach AdamW: 4 w + 14 t + 3 g; SGD momentum: 3 w + 5 t + 3 g; SGD: 3 w + 3 g."""
    kw = dict(impl=OptimizerImpl.FOREACH, working_copy_bytes=0.0)
    assert optimizer_bytes_per_param(2, grad_bytes=2, state_bytes=2, weight_bytes=2, **kw) == (
        8 + 28 + 6
    )
    assert optimizer_bytes_per_param(1, grad_bytes=2, state_bytes=2, weight_bytes=2, **kw) == 22
    assert optimizer_bytes_per_param(0, grad_bytes=2, state_bytes=2, weight_bytes=2, **kw) == 12


def test_bf16_adam_state_halves_the_nemo_step() -> None:
    """NeMo (Apex DistributedFusedAdam, bf16 gradients, L2-norm clipping) on one GPU: FP32
    state with remainders moves 2 (g) + 8 (w) + 16 (m, v) + 2 (clip) = 28 B per parameter;
    bf16 state without a master copy 2 + 4 + 8 + 2 = 16 (ratio up to the two kernel launches,
    ~10 us of a ~2 ms step)."""

    def opt_s(opts: dict) -> float:
        sc = Scenario(
            system="dgx-h100",
            model="llama",
            model_args={"hidden": 1024, "layers": 4, "heads": 8, "seq_len": 1024, "vocab": 32000},
            precision="bf16",
            optimizer="adam",
            batch_per_gpu=1,
            gpus=1,
            fidelity="analytic",
            software="nemo",
            software_options=opts,
        )
        return predict(sc, baseline=False).breakdown.optimizer_s

    assert opt_s({"optimizer_dtype": "bf16"}) / opt_s({}) == pytest.approx(16 / 28, rel=5e-3)
