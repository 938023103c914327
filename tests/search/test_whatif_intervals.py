"""``compare --systems`` (the hardware what-if) and ``--systems --search`` with ``--interval``:
each row's ranges from predict's interval, verdicts within the model's error said so, the
deadline when the run time is unknown, the default GPU counts, the exit status when nothing
fits, and the search's "why" line printed once (audit 15, items 2, 3, 14a, 16)."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pytest

from perfmodel.cli import main
from perfmodel.errors import InfeasiblePlanError
from perfmodel.intervals.wording import error_clause
from perfmodel.search.compare import _prune_reason
from perfmodel.search.compare_table import WRAP_COLUMNS, wrap
from perfmodel.search.cost import Pricing
from perfmodel.search.system_option import parse_systems
from perfmodel.search.whatif import (
    default_gpu_counts,
    format_whatif,
    hardware_whatif,
)
from tests.search.search_fakes import fake_system_predict


@dataclass(frozen=True)
class _Residual:
    """A residual interval of fixed log bounds (duck-typed
    :class:`~perfmodel.intervals.conformal.ResidualInterval`: what the what-if reads)."""

    r_lo: float
    r_hi: float
    level: float = 0.8
    basis: str = "toy rows"
    warning: str = ""
    bias: float = 0.1
    bounded: bool = True
    sources: int = 7

    def time(self, v: float) -> tuple[float, float]:
        return v * math.exp(self.r_lo), v * math.exp(self.r_hi)

    def speed(self, v: float) -> tuple[float, float]:
        return v * math.exp(-self.r_hi), v * math.exp(-self.r_lo)


def _whatif(r_lo: float, r_hi: float, *, bounded: bool = True, **kw: Any) -> Any:
    args: dict[str, Any] = dict(
        pricing={"fast": Pricing(4.0), "slow": Pricing(1.0)},
        epochs=10,
        dataset_size=1_000_000,
        deadline_s=7200.0,
        evaluator=fake_system_predict,
        gpus_per_node=lambda o: 4,
        interval=0.8,
        interval_of=lambda sc, rep, level: _Residual(r_lo, r_hi, level, bounded=bounded),
    )
    args.update(kw)
    return hardware_whatif(
        {"model": "toy", "batch_per_gpu": 32}, parse_systems("fast,slow"), [1, 4], **args
    )


def test_each_row_has_its_ranges_by_hand() -> None:
    res = _whatif(-0.2, 0.3)
    p = next(q for q in res.points if (q.system, q.gpus) == ("slow", 4))
    lo, hi = math.exp(-0.2), math.exp(0.3)
    # times and costs are proportional to the step time: multiplied by exp(r)
    assert p.range_of("run_time_s") == pytest.approx((p.run_time_s * lo, p.run_time_s * hi))
    assert p.range_of("cost_per_run") == pytest.approx((p.cost_per_run * lo, p.cost_per_run * hi))
    # a rate divides by them
    tput = p.throughput_samples_per_s
    assert p.range_of("throughput_samples_per_s") == pytest.approx((tput / hi, tput / lo))
    d = p.to_dict()
    assert d["interval_level"] == 0.8 and d["interval_basis"] == "toy rows"
    assert d["interval_bias"] == pytest.approx(math.expm1(0.1))
    assert d["cost_per_run_low"] == pytest.approx(p.cost_per_run * lo)
    assert d["iteration_time_s_high"] == pytest.approx(p.iteration_time_s * hi)
    assert "interval" not in d
    json.dumps(res.to_dict())  # the JSON form holds numbers and text only
    text = format_whatif(res)
    assert "80% ranges: system" in text
    assert "fast x1/4: from toy rows; runs like these were predicted 11% too fast" in text


def test_without_an_interval_no_ranges() -> None:
    res = _whatif(-0.2, 0.3, interval=None)
    assert all(p.interval is None and p.to_dict()["interval_level"] is None for p in res.points)
    assert "ranges" not in format_whatif(res) and "model's error" not in res.verdict


def test_cheapest_within_and_beyond_the_models_error() -> None:
    # slow x1 costs 6.94 a run; the runner-up is the other system's cheapest, fast x1 at 11.11
    # (not slow x4 at 9.03: the choice is between systems): ranges x e^-1..e^1 overlap,
    # x e^-0.05..e^0.05 do not (6.94 e^0.05 = 7.30 < 11.11 e^-0.05 = 10.57)
    wide = _whatif(-1.0, 1.0, deadline_s=None)
    assert wide.verdict.startswith("cheapest run: slow x1 GPUs, cost 6.94 (80%: 2.55-18.88)")
    assert "next fast x1 (11.11)" in wide.verdict
    assert "within the model's error: the two 80% ranges overlap" in wide.verdict
    narrow = _whatif(-0.05, 0.05, deadline_s=None)
    assert "beyond the model's error: the two 80% ranges do not overlap" in narrow.verdict


def test_deadline_inside_the_run_time_range_is_marked() -> None:
    res = _whatif(-0.5, 0.5, deadline_s=None)
    run = {(p.system, p.gpus): p.run_time_s for p in res.points}
    deadline = run[("slow", 4)] * 1.1  # met, but inside the range (x1.65 at the top)
    res = _whatif(-0.5, 0.5, deadline_s=deadline)
    p = next(q for q in res.points if (q.system, q.gpus) == ("slow", 4))
    assert p.meets_deadline and p.deadline_cell(deadline) == "yes~"
    far = next(q for q in res.points if (q.system, q.gpus) == ("slow", 1))
    assert far.deadline_cell(deadline) == "no"  # 4x slower: beyond the range
    text = format_whatif(res)
    assert "deadline ~: the 80% run-time range straddles the deadline" in text
    assert "it may miss the deadline" in res.verdict


def test_deadline_mark_only_where_the_run_time_range_is_bounded() -> None:
    """Before: ``yes~`` on an unbounded range (the widest the record gives, standing in for one
    it cannot bound), where the plan and systems searches mark no tie (``answers.ties``)."""
    res = _whatif(-0.5, 0.5, deadline_s=None)
    run = {(p.system, p.gpus): p.run_time_s for p in res.points}
    deadline = run[("slow", 4)] * 1.1  # inside the range: marked when bounded (test above)
    res = _whatif(-0.5, 0.5, bounded=False, deadline_s=deadline)
    p = next(q for q in res.points if (q.system, q.gpus) == ("slow", 4))
    assert p.meets_deadline and p.deadline_cell(deadline) == "yes"
    assert "deadline ~" not in format_whatif(res) and "may miss" not in res.verdict


def test_deadline_without_a_run_time_cannot_be_judged() -> None:
    """Before: 'no option meets the 1.0 h deadline' with every run time unknown (item 3)."""
    res = _whatif(-0.1, 0.1, dataset_size=None, deadline_s=3600.0)
    assert res.cheapest is None
    assert res.verdict == (
        "cannot judge the 1.0 h deadline: the run time is unknown; give --dataset-size "
        "(samples per epoch)"
    )
    res = _whatif(-0.1, 0.1, dataset_size=None, epochs=None, deadline_s=3600.0)
    assert res.verdict.endswith("give --epochs and --dataset-size (samples per epoch)")


def test_error_clause_is_the_overlap_rule() -> None:
    assert error_clause(None, (1.0, 2.0), 0.8) == ""
    assert "overlap" in error_clause((1.0, 2.0), (2.0, 3.0), 0.8)  # touching ranges tie
    assert "do not overlap" in error_clause((1.0, 2.0), (2.01, 3.0), 0.8)


def test_default_gpu_counts_reach_each_systems_server() -> None:
    assert default_gpu_counts(8) == (1, 2, 4, 8)
    assert default_gpu_counts(72)[-3:] == (32, 64, 72)
    assert default_gpu_counts(6) == (1, 2, 4, 6)
    seen: dict[str, list[int]] = {}

    def ev(sc: Mapping[str, Any]) -> dict[str, Any]:
        seen.setdefault(sc["system"], []).append(int(sc["gpus"]))
        return fake_system_predict(sc)

    res = hardware_whatif(
        {"batch_per_gpu": 32},
        parse_systems("fast,slow"),
        None,
        evaluator=ev,
        gpus_per_node=lambda o: 16 if o.system == "fast" else 4,
    )
    got = {(p.system, p.gpus) for p in res.points}
    assert got == {("fast", g) for g in (1, 2, 4, 8, 16)} | {("slow", g) for g in (1, 2, 4)}


def test_cli_whatif_ranges_header_and_interval_off(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["compare", "--systems", "dgx-h100,dgx-a100", "--model", "gpt2", "--global-batch"]
    argv += ["64", "--gpus", "8", "--fidelity", "analytic", "--price-per-gpu-hour", "3,2"]
    argv += ["--epochs", "1", "--dataset-size", "1000000"]
    assert main(argv) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == (
        "gpt2 on dgx-h100 / dgx-a100, pytorch-ddp (default preset; --software to choose), "
        "fp32 (default), sgd (default); 8 GPUs, global batch 64"
    )
    assert any(x.startswith("80% ranges: system") for x in out)
    verdict = next(x for x in out if x.startswith("cheapest run:"))
    assert "model's error" in verdict
    assert main([*argv, "--json"]) == 0
    pts = json.loads(capsys.readouterr().out)["points"]
    for p in pts:
        assert p["interval_level"] == 0.8
        assert p["run_time_s_low"] < p["run_time_s"] < p["run_time_s_high"]
        assert p["cost_per_run_low"] < p["cost_per_run"] < p["cost_per_run_high"]
    assert main([*argv, "--interval", "off"]) == 0
    text = capsys.readouterr().out
    assert "ranges" not in text and "model's error" not in text


def test_cli_whatif_exits_2_when_nothing_fits(capsys: pytest.CaptureFixture[str]) -> None:
    """Before: exit 0 with every row out of memory (compare's plan search exits 2)."""
    argv = ["compare", "--systems", "dgx1-v100,dgx-a100", "--model", "llama3_8b"]
    argv += ["--batch-per-gpu", "8", "--gpus", "1,2", "--fidelity", "analytic", "--optimizer"]
    argv += ["adam"]
    assert main(argv) == 2
    cap = capsys.readouterr()
    assert cap.out.count("(out of memory)") == 4  # the table is printed first
    assert "80% ranges" not in cap.out  # a run that does not fit has no range
    assert cap.err.startswith("perfmodel: error: no system fits the job in GPU memory")


def test_cli_systems_search_why_once_and_error(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["compare", "--systems", "dgx-h100,dgx-a100", "--search", "--model", "gpt2", "--gpus",
            "8", "--global-batch", "64", "--precision", "bf16", "--confirm-k", "0",
            "--analytic-k", "2", "--price-per-gpu-hour", "3,2", "--quiet"]  # fmt: skip
    rc = main(argv)
    out = capsys.readouterr().out.splitlines()
    assert rc == 0
    assert out[0].startswith("gpt2 on dgx-h100 / dgx-a100, pytorch-ddp (default preset")
    assert "80% iter s" in out[1]
    wins = [x for x in out if " wins: " in x]
    assert len(wins) == 1, wins  # the cost section printed the verdict's "why" line again
    verdict = next(x for x in out if x.startswith("verdict:"))
    assert "the model's error: the two 80% ranges" in verdict
    assert any(x.startswith("  dgx-a100: 80% range from ") for x in out)
    assert main([*argv, "--json"]) == 0
    for row in json.loads(capsys.readouterr().out)["systems"]:
        t = row["best"]["iteration_time_s"]
        assert row["interval_level"] == 0.8
        assert row["iteration_time_s_low"] < t < row["iteration_time_s_high"]


def test_pruned_reason_is_whole_and_wrapped_not_cut() -> None:
    exc = InfeasiblePlanError(
        "cp=2: context parallelism is modelled for decoders with fused attention (gpt, llama, "
        "moe families); model bert does not support it",
        value=2,
        where="cp",
    )
    reason = _prune_reason(exc)
    assert reason.endswith("(gpt, llama, moe families)")  # was cut at 90: "moe familie"
    text = wrap(f"pruned: 183 {reason}; 12 {reason}")
    assert all(len(x) <= WRAP_COLUMNS for x in text.splitlines())
    assert text.replace("\n  ", " ") == f"pruned: 183 {reason}; 12 {reason}"


def test_without_a_cost_the_verdict_names_only_what_is_missing() -> None:
    """Before: 'give --price-per-gpu-hour ..., --epochs and --dataset-size' with prices given."""
    res = _whatif(-0.1, 0.1, epochs=None, dataset_size=None, deadline_s=None)
    assert res.verdict == (
        "give --epochs and --dataset-size for costs; --deadline for the cheapest option meeting it"
    )
    res = _whatif(-0.1, 0.1, pricing={}, deadline_s=None)
    assert res.verdict.startswith("give --price-per-gpu-hour (or --purchase-price/")
    assert "--epochs" not in res.verdict and "--dataset-size" not in res.verdict


def test_gpus_help_states_each_modes_default(capsys: pytest.CaptureFixture[str]) -> None:
    """Before: '(default: all GPUs of the system)' while the what-if ran 1,2,4,8 (item 14a)."""
    with pytest.raises(SystemExit):
        main(["compare", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "plan search: all GPUs of --system" in text
    assert "what-if: each system's powers of two up to one server's GPUs and that count" in text
    assert "time to accuracy: 1" in text


def test_cli_systems_search_marks_a_tie(capsys: pytest.CaptureFixture[str]) -> None:
    """H200 vs H100 on gpt2: 1.28x as fast, but the two 80% ranges overlap (same Hopper rows):
    the slower row's range and its cost/Mtok are marked ``~`` and the verdict says it."""
    rc = main(
        ["compare", "--systems", "dgx-h100,hgx-h200", "--search", "--model", "gpt2", "--gpus",
         "8", "--global-batch", "64", "--precision", "bf16", "--confirm-k", "0",
         "--analytic-k", "2", "--price-per-gpu-hour", "3,3.5", "--quiet"]
    )  # fmt: skip
    out = capsys.readouterr().out.splitlines()
    assert rc == 0
    rows = {x.split()[0]: x for x in out[3:5]}
    assert rows["dgx-h100"].split()[-5].endswith("~")  # the range cell
    assert not rows["hgx-h200"].split()[-5].endswith("~")
    assert "  ~: its 80% range overlaps the fastest system's" in "\n".join(out)
    verdict = next(x for x in out if x.startswith("verdict: hgx-h200"))
    assert "within the model's error: the two 80% ranges overlap" in verdict
    cost = next(x for x in out if x.startswith("  dgx-h100 ") and x.split()[1] == "8")
    assert cost.split()[-2].endswith("~")
    cheapest = next(x for x in out if x.startswith("cheapest per million tokens: hgx-h200"))
    assert "within the model's error" in cheapest


def test_an_unbounded_range_gives_no_tie_verdict() -> None:
    """Review rev15b, finding 2: where the record cannot bound the level's range (the widest
    it gives stands in) the overlap is no tie verdict; predict's note says so; the JSON says
    ``interval_bounded``."""
    assert error_clause((1.0, 2.0), (1.5, 3.0), 0.9, bounded=False).startswith(
        "no verdict on the model's error: the record cannot bound a 90% range"
    )
    res = _whatif(-1.0, 1.0, deadline_s=None, bounded=False)
    assert "statistical tie" not in res.verdict and "within the model's error" not in res.verdict
    assert "no verdict on the model's error" in res.verdict
    text = format_whatif(res)
    assert "note: 7 publications cannot bound a 80% range; the widest they give stands in" in text
    assert res.points[0].to_dict()["interval_bounded"] is False
    assert _whatif(-1.0, 1.0, deadline_s=None).points[0].to_dict()["interval_bounded"] is True


def test_cli_systems_search_at_an_unbounded_level_is_no_tie(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The review's command: dgx-h100 3.03x as fast as dgx-a100 was "a statistical tie" from
    90% ranges the record cannot bound (predict: "18 publications cannot bound a 90% range")."""
    argv = ["compare", "--systems", "dgx-h100,dgx-a100", "--search", "--gpus", "8", "--model",
            "gpt2", "--global-batch", "64", "--interval", "0.9", "--quiet"]  # fmt: skip
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "statistical tie" not in text and "~" not in text
    verdict = next(x for x in text.splitlines() if x.startswith("verdict: dgx-h100"))
    assert "no verdict on the model's error: the record cannot bound a 90% range" in verdict
    assert "publications cannot bound a 90% range; the widest they give stands in" in text
    assert main([*argv, "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["systems"]
    assert [r["interval_bounded"] for r in rows] == [False, False]


@pytest.mark.parametrize(
    "mode",
    [
        ["--system", "dgx-a100", "--gpus", "8", "--confirm-k", "0", "--analytic-k", "2"],
        ["--systems", "dgx-h100,dgx-a100", "--gpus", "8", "--fidelity", "analytic"],
        ["--systems", "dgx-h100,dgx-a100", "--search", "--gpus", "8", "--confirm-k", "0"],
    ],
    ids=["plan-search", "what-if", "systems-search"],
)
def test_compare_warns_of_the_default_optimizer_as_predict_does(
    mode: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """Review rev15b, finding 3: the headers said ``sgd (default)`` for gpt2 without predict's
    WARNING (a transformer trains with Adam-class state the prediction leaves out): on stderr,
    with --json or not; none with --optimizer given or for a CNN."""
    argv = ["compare", *mode, "--model", "gpt2", "--global-batch", "64", "--quiet"]
    for extra in ([], ["--json"]):
        assert main([*argv, *extra]) == 0
        cap = capsys.readouterr()
        assert cap.err.count("WARNING: optimizer sgd is only the default") == 1, cap.err
        assert "WARNING" not in cap.out
    assert main([*argv, "--optimizer", "adamw"]) == 0
    assert "WARNING: optimizer" not in capsys.readouterr().err
    argv[argv.index("gpt2")] = "resnet50"
    assert main(argv) == 0
    assert "WARNING: optimizer" not in capsys.readouterr().err


LLAMA_TIGHT = ["--model", "llama3_8b", "--global-batch", "256", "--precision", "bf16",
               "--optimizer", "adamw", "--software", "torchtitan", "--interval", "off"]  # fmt: skip


def test_whatif_and_systems_search_mark_a_tight_fit(capsys: pytest.CaptureFixture[str]) -> None:
    """Review rev15b, finding 4: llama3_8b on one B200 (174.6 GiB of 180, within the memory
    model's error) fits tight: ``!`` in the mem GiB cell and the legend, as the plan search
    marks it (compare_table.mem_cell); 8 B200s (114.9 GiB) are roomy; the what-if JSON says
    ``memory_tight``."""
    from perfmodel.intervals.memory import tight_text

    argv = ["compare", "--systems", "dgx-b200", "--gpus", "1,8", *LLAMA_TIGHT]
    assert main(argv) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[1].split()[-2:] == ["GiB", "deadline"]
    rows = {int(x.split()[1]): x for x in out[3:5]}
    assert rows[1].split()[-2] == "174.6!" and rows[8].split()[-2] == "114.9"
    assert f"! mem GiB: fits, but tight: {tight_text()}" in out
    assert main([*argv, "--json"]) == 0
    pts = {p["gpus"]: p for p in json.loads(capsys.readouterr().out)["points"]}
    assert pts[1]["memory_tight"] is True and pts[8]["memory_tight"] is False
    assert pts[1]["memory_per_gpu_bytes"] / 2**30 == pytest.approx(174.6, abs=0.05)
    argv = ["compare", "--systems", "dgx-b200", "--search", "--gpus", "1", *LLAMA_TIGHT]
    assert main([*argv, "--quiet"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[3].startswith("dgx-b200") and out[3].split()[-1] == "174.6!"
    assert f"! mem GiB: fits, but tight: {tight_text()}" in out
