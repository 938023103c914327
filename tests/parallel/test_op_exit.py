"""``forward`` / ``backward`` end an operation at once where a coarse chunk became one operation
task (``PipelineLowering._op_exit``, issue 27): the same report as the graph without operation
tasks wherever that exit is taken, and not taken where an activation offload wait must follow
the chunk's compute (the wait would be dropped)."""

from __future__ import annotations

import pytest

import perfmodel.api as api
from perfmodel.api import Scenario, predict
from perfmodel.parallel.lower_shortcuts import LoweringShortcuts

_LLAMA = {"hidden": 1024, "layers": 12, "heads": 16, "kv_heads": 4, "ffn_hidden": 2816,
          "seq_len": 8192, "vocab": 32000}  # fmt: skip


def _both(sc: Scenario, monkeypatch: pytest.MonkeyPatch) -> tuple[dict, dict]:
    out = []
    for on in (True, False):
        with monkeypatch.context() as m:
            m.setattr(LoweringShortcuts, "OP_TASKS", on)
            m.setattr(api, "_REPORTS", {})
            out.append(predict(sc, baseline=False).to_dict())
    return out[0], out[1]


@pytest.mark.parametrize("offload", [0, 6])
@pytest.mark.parametrize("software", ["megatron-core", "nemo"])
def test_reports_equal_with_and_without_operation_tasks(
    monkeypatch: pytest.MonkeyPatch, software: str, offload: int
) -> None:
    """Multi-segment (bucketed) chunks lowered coarse over 8 micro-batches on HGX B300, whose
    PCIe host path stalls the offloaded activations' copies (``offload`` blocks): the report
    with operation tasks (and the early exit) equals the one without, field by field."""
    opts = {"activation_offload_layers": offload} if offload else {}
    sc = Scenario(
        system="hgx-b300", model="llama", model_args=_LLAMA, precision="bf16",
        optimizer="adam", gpus=8, dp=8, microbatch=1, global_batch=64,
        fidelity="analytic", software=software, software_options=opts,
    )  # fmt: skip
    with_ops, without = _both(sc, monkeypatch)
    assert with_ops == without
    if offload:
        plain = Scenario(**{**sc.__dict__, "software_options": {}})
        monkeypatch.setattr(api, "_REPORTS", {})
        assert with_ops["iteration_time_s"] > predict(plain, baseline=False).iteration_time_s
