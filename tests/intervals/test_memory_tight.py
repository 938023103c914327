""" "fits" near capacity (audit15 item 8): a plan within the memory model's measured error of its
GPU's capacity still fits (the rule is unchanged) but says "tight", with the margin and its
source; compare's mem column marks it and keeps its order."""

from __future__ import annotations

import json

import pytest

from perfmodel.cli import main
from perfmodel.intervals.memory import MEMORY_UNDER, stage_tight, tight, tight_text

GPT3 = ["--system", "dgx-a100", "--nodes", "128", "--model", "gpt", "--model-arg",
        "hidden=12288", "layers=96", "heads=96", "seq_len=2048", "--global-batch", "1536",
        "--precision", "fp16", "--optimizer", "adam", "--software", "megatron"]  # fmt: skip


def test_golden_edges() -> None:
    """80 GiB and the +23.1 % margin: 65.0 GiB is tight (x 1.2313 = 80.04), 64.9 is not
    (79.91)."""
    gib = 2**30
    assert MEMORY_UNDER == pytest.approx(0.2313, abs=1e-4)
    assert tight(65.0 * gib, 80 * gib) and not tight(64.9 * gib, 80 * gib)
    assert not tight(80.1 * gib, 80 * gib)
    stages = [{"total_bytes": 50 * gib, "capacity_bytes": 80 * gib},
              {"total_bytes": 70 * gib, "capacity_bytes": 80 * gib}]  # fmt: skip
    assert stage_tight(stages)
    stages[1]["total_bytes"] = 81 * gib  # a stage that does not fit: no fit, not tight
    assert not stage_tight(stages)


def test_predict_says_tight_and_still_fits(capsys) -> None:
    args = ["predict", *GPT3, "--plan", "dp32 tp4 pp8 mb1 interleaved(v=2) zero1",
            "--fidelity", "analytic"]  # fmt: skip
    assert main([*args, "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["fits_in_memory"] is True and d["memory_tight"] is True
    assert main(args) == 0
    out = capsys.readouterr().out
    assert f"79.66 GiB of 80.00 GiB  -> fits (tight: {tight_text()})" in out
    assert "up to 23% above its predictions, 18 torchtitan Llama 3.1 runs on H100" in out


def test_a_roomy_fit_is_not_tight(capsys) -> None:
    args = ["predict", "--system", "dgx-h100", "--model", "gpt2", "--global-batch", "8",
            "--fidelity", "analytic"]  # fmt: skip
    assert main([*args, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["memory_tight"] is False
    assert main(args) == 0
    assert "tight" not in capsys.readouterr().out


def test_compare_marks_tight_plans_and_keeps_its_order(capsys) -> None:
    assert main(["compare", *GPT3, "--top", "6"]) == 0
    lines = capsys.readouterr().out.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith("---")) + 1
    rows = lines[start : lines.index("", start)]
    assert [ln[:3].strip().rstrip("~") for ln in rows] == ["1", "2", "3", "4", "5", "6"]
    assert "79.7!" in rows[0] and "dp32 tp4 pp8 mb1 interleaved(v=2) zero1" in rows[0]
    # dp32 tp8 pp4 1f1b (55.4 GiB, not tight): sixth since the default placement tp,dp,pp
    # speeds the tp4 and tp2 pipelines up (their gradient reduction inside a server)
    assert "dp32 tp8 pp4 mb1 1f1b zero1" in rows[5]
    assert "55.4!" not in rows[5] and " 55.4 " in rows[5]
    assert f"! mem GiB: fits, but tight: {tight_text()}" in lines
