"""``compare --ep N`` on a dense model is refused as ``predict --plan ep=N`` refuses it (one
check, :func:`perfmodel.workload.zoo.check_expert_degree`); the what-if (``--systems`` without
``--search``), which predicts each system's default plan, refuses plan-search flags it would
ignore (audit15 item 10: ``compare --ep 2`` on gpt2 ran, exit 0)."""

from __future__ import annotations

import pytest

from tests.cli.cli_helpers import JOB, refused

DENSE = "ep=2: model gpt2 has no routed experts (use ep=1 or a MoE model)"


def test_predict_and_compare_refuse_ep_on_a_dense_model_alike(
    capsys: pytest.CaptureFixture[str],
) -> None:
    pred = refused(capsys, ["predict", "--system", "dgx-h100", *JOB, "--plan", "dp=8,ep=2"])
    assert DENSE in pred
    assert DENSE in refused(capsys, ["compare", "--system", "dgx-h100", *JOB, "--ep", "2"])
    search = ["compare", "--systems", "dgx-h100,dgx-a100", "--search", *JOB, "--ep", "1,2"]
    assert DENSE in refused(capsys, search)


@pytest.mark.parametrize(
    "flag, value",
    [
        ("--ep", "2"),
        ("--tp", "2"),
        ("--zero", "1"),
        ("--pp", "2"),
        ("--max-tp", "4"),  # read under max_tp
        ("--sequence-parallel", "true"),  # read under sequence_parallel
    ],
)
def test_whatif_refuses_plan_search_flags(
    flag: str, value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    err = refused(capsys, ["compare", "--systems", "dgx-h100", *JOB, flag, value])
    assert f"{flag} {value}: the what-if" in err and "add --search" in err
