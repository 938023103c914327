"""Issue 27: an auto-size probe reads a micro-batch size's per-stage memory without lowering the
task graph (``pipeline.lower.step_memory`` -> ``parallel.lower_step.lower_memory``). The values
must be the lowered step's, bit for bit, and the refusals the same; a search on probes must
answer as a search on whole lowerings."""

from __future__ import annotations

import pytest

from perfmodel import api
from perfmodel.errors import InfeasiblePlanError
from perfmodel.pipeline import autosize
from perfmodel.pipeline.lower import build_step, step_memory
from perfmodel.pipeline.resolve import resolve
from perfmodel.scenario import Scenario
from tests.parallel.test_lowering_equivalence import CASES

GPT = {"layers": 8, "hidden": 1024, "heads": 16, "seq_len": 1024}

#: pipelines, sharding, recomputation and a tied embedding across stages, beyond the lowering
#: goldens' cases (every data-parallel mode and Krizhevsky's hybrid)
MORE = {
    "mcore-pp4-zero1": dict(
        system="dgx-a100", nodes=2, model="gpt", model_args=GPT, global_batch=64, tp=2, pp=4,
        microbatch=2, software="megatron-core", optimizer="adam", precision="bf16",
    ),
    "fsdp-pp2": dict(
        system="dgx-a100", model="gpt", model_args=GPT, global_batch=32, pp=2, microbatch=4,
        software="fsdp", optimizer="adam", precision="bf16",
    ),
    "zero3-full-recompute": dict(
        system="dgx-a100", model="gpt", model_args=GPT, batch_per_gpu=4,
        software="deepspeed-zero3", recompute="full", optimizer="adam", precision="bf16",
    ),
    "ddp-interleaved": dict(
        system="dgx-a100", nodes=2, model="gpt", model_args=GPT, global_batch=64, pp=4,
        schedule="interleaved", interleave=2, microbatch=2, software="pytorch-ddp",
        optimizer="adam", precision="fp16",
    ),
}  # fmt: skip


@pytest.mark.parametrize("fidelity", ["analytic", "simulated"])
@pytest.mark.parametrize("name", sorted(CASES) + sorted(MORE))
def test_probe_memory_is_the_lowered_steps(name: str, fidelity: str) -> None:
    sc = Scenario(fidelity=fidelity, **{**CASES, **MORE}[name])  # type: ignore[arg-type]
    r = resolve(sc)
    assert step_memory(sc, r) == build_step(sc, r)[0].memory


def test_probe_refuses_as_the_lowering() -> None:
    # the interleaved schedule needs pp | micro-batches: 24 / 4 = 6 micro-batches on pp 4
    sc = Scenario(
        system="dgx-a100", model="gpt", model_args=GPT, global_batch=24, pp=4,
        schedule="interleaved", interleave=2, microbatch=4, precision="bf16",
        fidelity="analytic",
    )  # fmt: skip
    r = resolve(sc)
    with pytest.raises(InfeasiblePlanError) as whole:
        build_step(sc, r)
    with pytest.raises(InfeasiblePlanError) as probe:
        step_memory(sc, r)
    assert str(probe.value) == str(whole.value)


@pytest.mark.parametrize(
    "extra",
    [
        {"software": "megatron-core", "tp": 2, "pp": 4, "schedule": "interleaved",
         "interleave": 2},
        {"software": "pytorch-ddp", "pp": 4},
        {"software": "fsdp", "pp": 2},
        {"software": "megatron", "tp": 8, "pp": 2,
         "model_args": {"layers": 16, "hidden": 8192, "heads": 64, "seq_len": 2048}},
    ],
)  # fmt: skip
def test_search_on_probes_answers_as_on_lowerings(
    monkeypatch: pytest.MonkeyPatch, extra: dict
) -> None:
    """The report (micro-batch chosen, its note, the speedup baseline's own searches) of a
    search on memory probes equals that of the same search on whole lowerings (issue 14's
    probes)."""
    sc = Scenario(
        **{"system": "dgx-a100", "nodes": 2, "model": "gpt", "model_args": GPT,
           "global_batch": 256, "precision": "bf16", "optimizer": "adam",
           "fidelity": "analytic", **extra}
    )  # fmt: skip
    api._REPORTS.clear()
    probed = api.predict(sc)
    monkeypatch.setattr(
        autosize, "step_memory", lambda sc_, r, wf=None: build_step(sc_, r, wf)[0].memory
    )
    api._REPORTS.clear()
    lowered = api.predict(sc)
    assert probed.to_dict() == lowered.to_dict()
    assert any(d.startswith("micro-batch") for d in probed.defaults)
