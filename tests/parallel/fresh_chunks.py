"""What the chunk and same-rows tests share (``test_hidden_same_rows``,
``test_gather_same_rows``, ``test_chunk_values``, ``test_chunk_shapes``): a small GPT and GPT-3
175B on DGX A100, the memos to empty so that a test builds its own chunks (:func:`afresh`), and
a prediction that records one :class:`HiddenCollectives` method's calls and another's
answers, and every :class:`PipelineLowering` a prediction makes (:func:`lowerings`;
``test_shared_sums``, ``test_comm_spec_built``)."""

from __future__ import annotations

from typing import Any

import pytest

import perfmodel.api as api
import perfmodel.parallel.lower_shortcuts as shortcuts
import perfmodel.parallel.lowering as lowering
from perfmodel.api import Scenario, predict
from perfmodel.parallel.lower_hidden import HiddenCollectives
from perfmodel.parallel.lower_pipeline import PipelineLowering

GPT = {"layers": 16, "hidden": 2048, "heads": 16, "seq_len": 2048, "vocab": 32000}
BASE: dict[str, Any] = dict(
    system="dgx-a100",
    model="gpt",
    model_args=GPT,
    precision="bf16",
    optimizer="adam",
    fidelity="analytic",
    microbatch=1,
    global_batch=64,
)
GPT3 = dict(
    model_args={"hidden": 12288, "heads": 96, "layers": 96, "seq_len": 2048},
    nodes=128,
    gpus=1024,
    global_batch=1536,
    precision="fp16",
)


def run_recording(
    sc: Scenario, monkeypatch: pytest.MonkeyPatch, switch: tuple[str, bool], outer: str,
    inner: str,
) -> tuple[Any, list, list]:  # fmt: skip
    """``sc``'s report with :class:`HiddenCollectives` switch ``switch`` (name, value) set,
    chunks built afresh; each call of the method ``outer`` (a stage and a chunk, then more
    arguments: the stage, the arguments after the chunk and its answer) and whether each call
    of ``inner`` answered (``True``, or not ``None``)."""
    calls: list[Any] = []
    answers: list[bool] = []
    f, g = getattr(HiddenCollectives, outer), getattr(HiddenCollectives, inner)

    def record_outer(self, s, ch, *a):  # type: ignore[no-untyped-def]
        calls.append((s, *a, f(self, s, ch, *a)))
        return calls[-1][-1]

    def record_inner(self, *a):  # type: ignore[no-untyped-def]
        out = g(self, *a)
        answers.append(out is not None and out is not False)
        return out

    with monkeypatch.context() as m:
        m.setattr(HiddenCollectives, switch[0], switch[1])
        m.setattr(PipelineLowering, outer, record_outer)
        m.setattr(PipelineLowering, inner, record_inner)
        report = predict_afresh(sc, m)
    return report, calls, answers


def predict_afresh(sc: Scenario, m: pytest.MonkeyPatch) -> Any:
    """``sc``'s report with no chunk or report of another test (``m``: a monkeypatch context
    the caller undoes)."""
    afresh(m)
    return predict(sc, baseline=False)


def afresh(m: pytest.MonkeyPatch) -> None:
    """Empty the chunk memos and the report cache inside ``m`` (a monkeypatch context the caller
    undoes): what the test lowers next is built here, not read off an earlier test's plan."""
    m.setattr(shortcuts, "_SHARED_CHUNKS", {})
    m.setattr(lowering, "_CHUNKS", {})
    m.setattr(api, "_REPORTS", {})


def lowerings(sc: Scenario, m: pytest.MonkeyPatch) -> list[PipelineLowering]:
    """Every :class:`PipelineLowering` ``predict(sc)`` makes (chunks and reports afresh)."""
    seen: list[PipelineLowering] = []
    init = PipelineLowering.__init__

    def keep(self: PipelineLowering, *a: Any, **k: Any) -> None:
        init(self, *a, **k)
        seen.append(self)

    m.setattr(PipelineLowering, "__init__", keep)
    afresh(m)
    predict(sc, baseline=False)
    return seen
