"""The isolated runner's worker (``compare``'s later stages under ``--budget``): its
young-generation threshold, and its answers equal with the threshold and without it."""

from __future__ import annotations

import gc
from collections.abc import Iterator, Mapping
from typing import Any

import pytest

from perfmodel.search._eval import simulated_evaluator
from perfmodel.search.compare import WORKER_YOUNG_THRESHOLD, _IsolatedRunner

TINY = {
    "system": "dgx-a100",
    "model": "gpt",
    "model_args": {"layers": 4, "hidden": 256, "heads": 4, "seq_len": 128},
    "gpus": 8,
    "tp": 2,
    "pp": 2,
    "global_batch": 16,
    "microbatch": 1,
    "software": "pytorch-ddp",
}


def young_threshold(scenario: Mapping[str, Any]) -> dict[str, Any]:
    """An evaluator reporting the process's young-generation threshold (run in the worker)."""
    return {"young": gc.get_threshold()[0]}


@pytest.fixture()
def caller_threshold() -> Iterator[int]:
    """The caller's threshold set below the worker's (as the CLI's 200,000 is) and away from
    CPython's default 700 (a worker that reset to the default would not pass for one that
    inherits it under fork), restored after."""
    old = gc.get_threshold()
    gc.set_threshold(5000, *old[1:])
    try:
        yield 5000
    finally:
        gc.set_threshold(*old)


def _run(evaluator: Any, scenario: Mapping[str, Any], young: int | None) -> dict[str, Any]:
    runner = _IsolatedRunner()
    runner.WORKER_YOUNG = young
    try:
        return runner.run(evaluator, scenario, timeout_s=120.0)
    finally:
        runner.close()


def test_worker_raises_its_own_threshold_only(caller_threshold: int) -> None:
    assert _run(young_threshold, {}, WORKER_YOUNG_THRESHOLD)["young"] == WORKER_YOUNG_THRESHOLD
    assert gc.get_threshold()[0] == caller_threshold  # the caller's is untouched
    # the direct path: the worker keeps the threshold it inherits
    assert _run(young_threshold, {}, None)["young"] == caller_threshold


def test_worker_threshold_leaves_a_simulated_report_equal(caller_threshold: int) -> None:
    raised = _run(simulated_evaluator, TINY, WORKER_YOUNG_THRESHOLD)
    direct = _run(simulated_evaluator, TINY, None)
    assert raised["fidelity"] == "simulated"
    assert raised == direct
