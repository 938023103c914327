"""``perfmodel compare``'s rows are what ``perfmodel predict --plan LABEL`` prints with the same
flags (the brief's item 5): the same step time, memory, fit and micro-batch, including the
micro-batch ``predict`` sizes itself when the plan names none (GPT 1.3B on 8 A100s, global
batch 256: predict runs dp4 tp2 micro-batch 16; the search tried 1, 2, 4, 8 and 64 only, so its
best, micro-batch 8, was 2% slower than predict's answer for the same plan)."""

from __future__ import annotations

import pytest

from perfmodel.cli import main
from tests.cli.cli_helpers import cli_json

A100 = ["--system", "dgx-a100", "--model", "gpt", "--precision", "fp16", "--optimizer", "adam"]
MEGATRON = ["--software", "megatron"]
GPT_1_3B = ["--model-arg", "hidden=2048", "layers=24", "heads=16", "seq_len=2048"]
GPT_2_7B = ["--model-arg", "hidden=2560", "layers=32", "heads=32", "seq_len=2048"]
CASES = {
    "gpt1.3b-1node": [*A100, *MEGATRON, *GPT_1_3B, "--nodes", "1", "--global-batch", "256"],
    "gpt2.7b-2nodes": [*A100, *MEGATRON, *GPT_2_7B, "--nodes", "2", "--global-batch", "512"],
    "gpt1.3b-2nodes-ddp": [*A100, *GPT_1_3B, "--nodes", "2", "--global-batch", "128"],
}
SEARCH = ["--analytic-k", "4", "--confirm-k", "1", "--interval", "off", "--top", "4"]


def _mb(report: dict) -> int:
    return int(report.get("microbatch") or report["plan"]["microbatch_size"])


@pytest.mark.parametrize("name", sorted(CASES))
def test_top_rows_are_what_predict_prints(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    flags = CASES[name]
    res = cli_json(capsys, ["compare", *flags, *SEARCH, "--json"])
    rows = [r for r in res["plans"] if r["stage"] != "screen"]
    assert len(rows) >= 3
    for row in rows:
        rep = row["reports"][row["stage"]]
        fid = row["stage"]
        pred = cli_json(
            capsys, ["predict", *flags, "--plan", row["label"], "--fidelity", fid, "--json"]
        )
        assert pred["iteration_time_s"] == rep["iteration_time_s"], row["label"]
        assert pred["memory_per_gpu_bytes"] == rep["memory_per_gpu_bytes"], row["label"]
        assert pred["fits_in_memory"] == rep["fits_in_memory"]
        assert _mb(pred) == _mb(rep)
        if row["plan"].get("microbatch") is None:  # predict's own choice, stated as its default
            assert row["microbatch_auto"] == _mb(pred)
            assert any("chosen automatically" in d for d in pred["defaults"])


def test_predict_without_a_microbatch_is_a_row(capsys: pytest.CaptureFixture[str]) -> None:
    flags = CASES["gpt1.3b-1node"]
    res = cli_json(capsys, ["compare", *flags, *SEARCH, "--json"])
    pred = cli_json(
        capsys,
        ["predict", *flags, "--plan", "dp4 tp2 pp1 zero1", "--fidelity", "simulated", "--json"],
    )
    best = res["plans"][0]
    assert best["label"] == "dp4 tp2 pp1 zero1" and best["microbatch_auto"] == 16
    # the added plans are counted apart from the enumerated ones, and in the screen's count
    screened = res["stages"][0]["evaluated"]
    assert res["auto_microbatch_plans"] > 0
    assert screened == res["enumerated"] + res["auto_microbatch_plans"]
    # every screened plan is feasible, pruned, or a dropped automatic one
    kept = screened - res["auto_microbatch_dropped"]
    assert kept == res["feasible"] + sum(res["pruned"].values())
    assert best["reports"]["simulated"]["iteration_time_s"] == pred["iteration_time_s"]


def test_output_states_the_microbatches_it_used(capsys: pytest.CaptureFixture[str]) -> None:
    flags = CASES["gpt1.3b-1node"]
    assert main(["compare", *flags, *SEARCH, "--top", "8"]) == 0
    out = capsys.readouterr().out
    assert "micro-batch auto-sized (a plan without mbN" in out
    assert " without mbN, for predict's choice; " in out
    assert " dropped: a size already searched, or refused), " in out
    assert "as `perfmodel predict --plan LABEL` chooses it: dp4 tp2 pp1 zero1 -> mb16" in out
    assert "rows #5-#8 (screened only) are the closed-form screen's estimates" in out
    assert "rows #2-#4 (not simulated) are `perfmodel predict --plan LABEL --fidelity" in out
    # sizes the user names are the sizes searched: no automatic plan
    assert main(["compare", *flags, *SEARCH, "--microbatch", "1,2,4,8"]) == 0
    out = capsys.readouterr().out
    assert "auto-sized" not in out and "dp4 tp2 pp1 mb8 zero1" in out
    assert "without mbN, for predict's choice" not in out
