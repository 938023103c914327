"""A report's kernel classes and explanation worked out on their first read
(``assemble.DEFER_ON_READ``, ``report.step.Deferred``) equal the ones worked out at once, class
for class and row for row, through every reader: the attributes, ``==``, ``repr``,
``to_dict``, ``dataclasses.replace``, pickling and deep copies (issue 27)."""

from __future__ import annotations

import copy
import pickle
from collections.abc import Iterator
from dataclasses import replace

import pytest

import perfmodel.api as api
import perfmodel.pipeline.assemble as assemble
from perfmodel.api import Scenario, predict
from perfmodel.report.step import Deferred, StepReport

LLAMA = {"layers": 4, "hidden": 4096, "heads": 32, "kv_heads": 8, "seq_len": 4096, "vocab": 32000}
SCENARIOS = [
    Scenario(system="dgx-h100", nodes=2, model="llama", model_args=LLAMA, global_batch=32,
             microbatch=1, precision="fp8", software="megatron-core", tp=2, pp=2,
             optimizer="adamw", fidelity="analytic"),
    Scenario(system="dgx-h100", gpus=8, model="llama", model_args=LLAMA, global_batch=16,
             microbatch=2, precision="bf16", software="torchtitan", recompute="selective",
             optimizer="adamw", fidelity="analytic"),
    Scenario(system="dgx-a100", nodes=2, model="gpt",
             model_args={"hidden": 4096, "layers": 8, "heads": 32, "seq_len": 2048},
             global_batch=64, tp=4, pp=2, microbatch=2, precision="fp16", software="megatron",
             fidelity="analytic"),
]  # fmt: skip


@pytest.fixture(autouse=True)
def _no_cached_reports() -> Iterator[None]:
    """Reports made here (some with a patched assembly) are not left for other tests."""
    api._REPORTS.clear()
    yield
    api._REPORTS.clear()


def _fresh(sc: Scenario, defer: bool, monkeypatch: pytest.MonkeyPatch) -> StepReport:
    monkeypatch.setattr(assemble, "DEFER_ON_READ", defer)
    api._REPORTS.clear()  # a new report, not the cached one
    return predict(sc, baseline=False)


@pytest.mark.parametrize("sc", SCENARIOS)
def test_deferred_equals_direct(sc: Scenario, monkeypatch: pytest.MonkeyPatch) -> None:
    direct = _fresh(sc, False, monkeypatch)
    assert type(direct.__dict__["explanation"]) is not Deferred
    assert direct.kernel_classes and direct.explanation is not None
    for read in (
        lambda r: r,
        lambda r: pickle.loads(pickle.dumps(r)),
        lambda r: copy.deepcopy(r),
        lambda r: replace(r, defaults=direct.defaults),
    ):
        for classes_first in (True, False):
            later = _fresh(sc, True, monkeypatch)
            assert type(later.__dict__["kernel_classes"]) is Deferred  # not worked out yet
            assert type(later.__dict__["explanation"]) is Deferred
            if classes_first:
                got = read(later)
                assert list(got.kernel_classes.items()) == list(direct.kernel_classes.items())
                got.kernel_classes.clear()  # its reader changing the report's dict ...
                got = read(later)  # ... changes nothing in the explanation
            else:
                got = read(later)
            assert got.explanation == direct.explanation
            assert got.explanation.to_dict() == direct.explanation.to_dict()
            assert later.explanation is later.explanation  # worked out once, then kept
    later = _fresh(sc, True, monkeypatch)
    assert repr(later) == repr(direct)
    later = _fresh(sc, True, monkeypatch)
    assert later == direct
    assert later.to_dict() == direct.to_dict()


def test_no_kernel_classes_no_explanation(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without kernel classes the explanation is ``None`` on its first read, as before."""
    monkeypatch.setattr(assemble, "_kernel_classes", lambda *a: ({}, -1))
    assert _fresh(SCENARIOS[0], True, monkeypatch).explanation is None


def test_a_callers_dict_changed_after_predict_changes_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The scenario keeps its caller's ``model_args`` dict: a caller reusing that dict for the
    next scenario must not move a report it already has (rev24: the deferred classes read the
    selective recomputation's shares off the scenario's workload when first read, and a
    changed ``seq_len`` moved them and made the explanation refuse its sums)."""
    selective = SCENARIOS[1]
    direct = _fresh(selective, False, monkeypatch)
    args = dict(LLAMA)
    sc = replace(selective, model_args=args)
    later = _fresh(sc, True, monkeypatch)
    assert type(later.__dict__["kernel_classes"]) is Deferred
    args["seq_len"], args["hidden"] = 2048, 2048  # the caller's next scenario
    assert list(later.kernel_classes.items()) == list(direct.kernel_classes.items())
    assert later.explanation.to_dict() == direct.explanation.to_dict()


def test_a_callers_workload_defers_and_is_not_called_on_the_read(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A caller's ``workload_fn`` (torchtitan's selective recomputation: its shares read off
    the workload) defers as a zoo model does: nothing of it is called when the fields are
    read, and they equal the ones worked out at once."""
    from perfmodel.workload import build_model

    calls: list[int] = []

    def wl(**kw: object):
        calls.append(1)
        return build_model("llama", **LLAMA, **kw)  # type: ignore[arg-type]

    sc = SCENARIOS[1]
    monkeypatch.setattr(assemble, "DEFER_ON_READ", False)
    direct = predict(sc, baseline=False, workload_fn=wl)
    monkeypatch.setattr(assemble, "DEFER_ON_READ", True)
    later = predict(sc, baseline=False, workload_fn=wl)
    assert type(later.__dict__["explanation"]) is Deferred
    made = len(calls)
    assert later.explanation.to_dict() == direct.explanation.to_dict()
    assert list(later.kernel_classes.items()) == list(direct.kernel_classes.items())
    assert len(calls) == made
