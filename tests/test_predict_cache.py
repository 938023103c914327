"""predict answers a repeated zoo-model question from its report cache (StepReport is immutable)."""

from __future__ import annotations

from dataclasses import replace

from perfmodel.api import Scenario, predict


def _sc(**kw: object) -> Scenario:
    d = {"system": "dgx1-v100", "model": "mlp", "batch_per_gpu": 8, "gpus": 2}
    return Scenario.from_dict({**d, "fidelity": "analytic", **kw})


def test_repeat_is_the_same_report() -> None:
    a = predict(_sc())
    assert predict(_sc()) is a
    assert predict(_sc(), baseline=False) is not a  # the flags are part of the key
    assert predict(_sc(), baseline=False).speedup is None and a.speedup is not None


def test_other_question_other_report() -> None:
    a = predict(_sc())
    b = predict(_sc(batch_per_gpu=16))
    assert b is not a and b.samples_per_step == 2 * a.samples_per_step


def test_custom_workload_is_not_cached() -> None:
    from perfmodel.workload import build_model

    sc = _sc()

    def wl(**kw: object):
        return build_model("mlp", **kw)  # type: ignore[arg-type]

    assert predict(sc, workload_fn=wl) is not predict(sc, workload_fn=wl)
    assert replace(predict(sc, workload_fn=wl), timeline=None).iteration_time_s > 0
