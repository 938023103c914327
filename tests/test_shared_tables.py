"""Tables shared across predictions (issue 27, sweeps and the public API's new-plan path): the
hardware axes of a sweep vary slowest, layer prices are shared by every topology of the same GPU,
the chunks of a plan without tensor, expert or context parallelism by every cluster size, and
speedup baselines are kept apart from the whole-report cache. Each share must leave every answer
as it was: the tests compare with the same prediction made without it."""

from __future__ import annotations

import dataclasses

import pytest

import perfmodel.api as api
import perfmodel.pipeline.baseline as baseline
import perfmodel.pipeline.inputs as inputs
from perfmodel.api import Scenario, predict, resolve
from perfmodel.dtypes import Precision
from perfmodel.parallel import costs, lower_shortcuts, lowering
from perfmodel.parallel.costs import SystemCosts
from perfmodel.pipeline.lower import build_step
from perfmodel.search.sweep import SweepSpec
from perfmodel.topology import load_system


def test_grouped_points_are_the_same_points_with_hardware_axes_slowest() -> None:
    spec = SweepSpec.from_dict(
        {
            "base": {"fidelity": "analytic"},
            "axes": {"model": ["a", "b"], "nodes": [1, 2, 3], "precision": ["x", "y"]},
            "zip": {"system": ["s1", "s2"], "batch_per_gpu": [1, 2]},
        }
    )
    plain = list(spec.points())
    grouped = list(spec.points(grouped=True))
    assert sorted(map(repr, plain)) == sorted(map(repr, grouped)) and len(grouped) == 24
    # nodes, then the zipped system: each (nodes, system) pair is one run of 4 points
    runs = [(a["nodes"], a["system"]) for a, _ in grouped]
    assert runs == [(n, s) for n in (1, 2, 3) for s in ("s1", "s2") for _ in range(4)]
    assert list(grouped[0][0]) == list(plain[0][0])  # the file's key order
    assert grouped[5][1]["batch_per_gpu"] == 2 and grouped[5][1]["system"] == "s2"


def test_layer_prices_are_shared_by_topologies_of_one_gpu() -> None:
    one, four = load_system("dgx1-v100"), load_system("dgx1-v100", nodes=4)
    a, b = SystemCosts(one, Precision.FP16), SystemCosts(four, Precision.FP16)
    assert a.price_table is b.price_table and a.compute is b.compute
    assert SystemCosts(one, Precision.FP32).price_table is not a.price_table
    a100 = SystemCosts(load_system("dgx-a100"), Precision.FP16)
    assert a100.price_table is not a.price_table


def _ddp(nodes: int, **kw: object) -> Scenario:
    d: dict[str, object] = {
        "system": "dgx1-v100",
        "nodes": nodes,
        "model": "resnet50",
        "batch_per_gpu": 64,
        "precision": "fp16",
        "software": "pytorch-ddp",
        "fidelity": "analytic",
    }
    return Scenario.from_dict({**d, **kw})


@pytest.mark.parametrize(
    "kw", [{}, {"software": "horovod"}, {"model": "bert_large", "batch_per_gpu": 8}]
)
def test_shared_chunks_are_the_chunks_a_cold_lowering_builds(kw: dict[str, object]) -> None:
    """The chunks of a 4-server plan read from the memo a 1-server plan filled equal those
    built from scratch, segment by segment, and the step and its report are the same."""
    # system costs kept from earlier tests may hold price tables the shared list has dropped
    inputs._system_costs.cache_clear()
    costs._SHARED_COMPUTE.clear()
    lower_shortcuts._SHARED_CHUNKS.clear()
    api._REPORTS.clear()
    small, big = _ddp(1, **kw), _ddp(4, **kw)
    build_step(small, resolve(small))
    assert len(lower_shortcuts._SHARED_CHUNKS) == 1
    warm, _ = build_step(big, resolve(big))
    assert len(lower_shortcuts._SHARED_CHUNKS) == 1  # read, not added
    rep_warm = predict(big, baseline=False)
    lower_shortcuts._SHARED_CHUNKS.clear()
    lowering._CHUNKS.clear()  # the chunks kept one by one as well
    api._REPORTS.clear()
    cold, _ = build_step(big, resolve(big))
    rep_cold = predict(big, baseline=False)
    assert warm.graph.tasks == cold.graph.tasks and warm.memory == cold.memory
    fields = ("iteration_time_s", "breakdown", "memory", "notes", "defaults")
    for f in fields:
        assert getattr(rep_warm, f) == getattr(rep_cold, f), f


def test_chunks_with_tensor_parallelism_are_not_shared() -> None:
    lower_shortcuts._SHARED_CHUNKS.clear()
    sc = Scenario(
        system="dgx-a100",
        nodes=2,
        model="gpt",
        model_args={"hidden": 1024, "layers": 4, "heads": 16, "seq_len": 512},
        global_batch=16,
        tp=2,
        software="megatron",
        precision="bf16",
        fidelity="analytic",
    )
    build_step(sc, resolve(sc))
    assert not lower_shortcuts._SHARED_CHUNKS


def test_a_speedup_baseline_is_predicted_once_for_every_cluster_size(monkeypatch) -> None:
    """Pure data parallelism on 1-8 servers shares one 1-GPU baseline: predicted once, read
    by the others, also once the whole-report cache has forgotten it; the speedups are those
    of a cold prediction."""
    baseline.BASELINES.entries.clear()
    api._REPORTS.clear()
    calls: list[Scenario] = []
    real = api._predict

    def counting(sc: Scenario, **kw: object):  # type: ignore[no-untyped-def]
        if kw.get("is_baseline"):
            calls.append(sc)
        return real(sc, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(api, "_predict", counting)
    reps = [predict(_ddp(n)) for n in (1, 2, 4, 8)]
    assert len(calls) == 1
    api._REPORTS.clear()
    predict(_ddp(16))
    assert len(calls) == 1
    monkeypatch.setattr(api, "_predict", real)
    baseline.BASELINES.entries.clear()
    api._REPORTS.clear()
    assert [predict(_ddp(n)).speedup for n in (1, 2, 4, 8)] == [r.speedup for r in reps]
    assert dataclasses.replace(reps[3], timeline=None) == dataclasses.replace(
        predict(_ddp(8)), timeline=None
    )
