"""Issue 14: the automatic micro-batch search probes each candidate size once, and with
pipelining it does not lower the resolved default (micro-batch 1) before the search. Issue 27:
a probe reads the size's memory without lowering its task graph (``step_memory``), the same
values as the lowered step's; the chosen size is lowered once.

The speedup baseline of a model that does not fit one GPU is a one-replica prediction with the
micro-batch left open, so this search runs inside every such ``predict``.
"""

from __future__ import annotations

import pytest

from perfmodel import api
from perfmodel.pipeline import autosize

SMALL_GPT = {"layers": 4, "hidden": 1024, "heads": 16, "seq_len": 1024}


def _probes(monkeypatch: pytest.MonkeyPatch, sc: api.Scenario) -> tuple[list[int], list[int]]:
    """(the micro-batch sizes whose memory the search probed, the sizes lowered whole), in
    order; every probe's memory checked against its size's whole lowering."""
    probed: list[int] = []
    lowered: list[int] = []
    build, memory = autosize.build_step, autosize.step_memory

    def counting_build(sc_, r, workload_fn=None):
        lowered.append(r.microbatch)
        return build(sc_, r, workload_fn)

    def counting_memory(sc_, r, workload_fn=None):
        probed.append(r.microbatch)
        got = memory(sc_, r, workload_fn)
        assert got == build(sc_, r, workload_fn)[0].memory  # the lowered step's, exactly
        return got

    monkeypatch.setattr(autosize, "build_step", counting_build)
    monkeypatch.setattr(autosize, "step_memory", counting_memory)
    api._REPORTS.clear()
    api.predict(sc, baseline=False)
    return probed, lowered


def test_pipelined_search_lowers_only_the_probed_sizes(monkeypatch: pytest.MonkeyPatch) -> None:
    # dp=4 replicas of tp2 x pp2 on 16 GPUs, 64 / 4 = 16 samples per replica; with pp=2 the
    # candidates keep >= 2 micro-batches: [1, 2, 4, 8]. All fit (a 4-layer model): the search
    # probes index 1 (2), whose memory estimates that 8 fits, then 8 (a bisection would probe
    # 4 before 8) and chooses 8, lowered once; micro-batch 1 is never lowered (it was, as the
    # default, before the search).
    # every job setting stated: the automatic micro-batch is the first default
    sc = api.Scenario(
        system="dgx-a100", nodes=2, model="gpt", model_args=SMALL_GPT, global_batch=64,
        tp=2, pp=2, precision="bf16", optimizer="sgd", software="pytorch-ddp",
        fidelity="analytic",
    )  # fmt: skip
    assert _probes(monkeypatch, sc) == ([2, 8], [8])
    rep = api.predict(sc, baseline=False)
    assert rep.plan["microbatch_size"] == 8
    assert rep.defaults[0].startswith("micro-batch 8 chosen automatically")


def test_search_reuses_the_default_when_it_probes_it(monkeypatch: pytest.MonkeyPatch) -> None:
    # pure data parallelism on 2 GPUs, 8 samples per replica: the default is the whole batch
    # (8), lowered first because it stays when it fits. This 2.6B-parameter GPT with Adam at
    # sequence 2048 fits an 80 GB A100 with micro-batch 4 (68 GiB) but not 8, so the bisection
    # over [1, 2, 4, 8] probes 2 (fits), 4 (fits), then 8: the default's lowering, reused;
    # then 4 is lowered whole.
    sc = api.Scenario(
        system="dgx-a100", gpus=2, model="gpt",
        model_args={"layers": 32, "hidden": 2560, "heads": 32, "seq_len": 2048},
        batch_per_gpu=8, precision="bf16", optimizer="adam", fidelity="analytic",
    )  # fmt: skip
    assert _probes(monkeypatch, sc) == ([2, 4], [8, 4])
    rep = api.predict(sc, baseline=False)
    assert rep.plan["microbatch_size"] == 4 and rep.fits_in_memory


def test_interleaved_search_is_the_bisection(monkeypatch: pytest.MonkeyPatch) -> None:
    # the interleaved schedule refuses micro-batch counts pp does not divide, so fits is not
    # monotone there and the search takes the bisection's probes: 2, 4, 8 (the same plan with
    # 1F1B: 2, 8 above); here every count (16, 8, 4, 2) is even and all fit: 8 is lowered
    sc = api.Scenario(
        system="dgx-a100", nodes=2, model="gpt", model_args=SMALL_GPT, global_batch=64,
        tp=2, pp=2, schedule="interleaved", interleave=2, precision="bf16", fidelity="analytic",
    )  # fmt: skip
    assert _probes(monkeypatch, sc) == ([2, 4, 8], [8])


@pytest.mark.parametrize(
    "extra",
    [
        {"tp": 2, "pp": 2, "global_batch": 96},  # 24 per replica: 1, 2, 3, 4, 6, 12
        {"pp": 4, "global_batch": 256},  # 64 per replica, 4 stages
        {"gpus": 2, "global_batch": 48, "model_args": {"layers": 24, "hidden": 2560,
                                                        "heads": 32, "seq_len": 2048}},
        {"tp": 8, "global_batch": 512, "model_args": {"layers": 16, "hidden": 4096,
                                                       "heads": 32, "seq_len": 4096}},
    ],
)  # fmt: skip
def test_guided_search_answers_as_the_bisection(
    monkeypatch: pytest.MonkeyPatch, extra: dict
) -> None:
    """issue 14: the report of a search guided by the probes' memory is the bisection's."""
    from perfmodel.pipeline import autobatch

    args = {"system": "dgx-a100", "nodes": 2, "model": "gpt", "model_args": SMALL_GPT}
    sc = api.Scenario(**{**args, **extra, "precision": "bf16", "optimizer": "adam",
                         "fidelity": "analytic"})  # fmt: skip
    api._REPORTS.clear()
    guided = api.predict(sc)
    real = autobatch.choose_microbatch
    monkeypatch.setattr(
        autobatch, "choose_microbatch", lambda b, pp, fits, limit=None: real(b, pp, fits)
    )
    api._REPORTS.clear()
    bisected = api.predict(sc)
    assert guided.to_dict() == bisected.to_dict()
