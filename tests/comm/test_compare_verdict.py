"""comm --compare ends with a one-line health verdict and states its sign convention (issue 12);
the verdict is the exit status, 0 healthy, 3 degraded, 4 nothing to judge (issue 28, item 8)."""

from __future__ import annotations

import json
from pathlib import Path

from perfmodel.cli import main

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "nccl" / "json-all_reduce.json"


def _run(capsys, log: Path, status: int = 0, *extra: str) -> list[str]:
    assert main(["comm", "--compare", str(log), "--system", "dgx-a100", *extra]) == status
    return capsys.readouterr().out.strip().splitlines()


def _scaled(tmp_path: Path, factor: float) -> Path:
    data = json.loads(FIX.read_text())
    for r in data["results"]:
        for col in ("out_of_place", "in_place"):
            r[col]["time"] *= factor
            r[col]["algbw"] /= factor
            r[col]["busbw"] /= factor
    slow = tmp_path / f"slow{factor}.json"
    slow.write_text(json.dumps(data))
    return slow


def test_healthy_log(capsys):
    out = _run(capsys, FIX)
    assert out[-1].startswith("verdict: healthy")
    assert any("predicted / measured - 1" in line for line in out)
    assert any("in-pl us" in line for line in out)


def test_a_log_twice_as_slow_is_degraded(tmp_path, capsys):
    out = _run(capsys, _scaled(tmp_path, 2.0), 3)
    assert out[-1].startswith("verdict: DEGRADED at sizes >= ")
    assert "below what this hardware should give" in out[-1]


def test_the_verdict_is_the_exit_status_in_json_too(tmp_path, capsys):
    doc = json.loads("\n".join(_run(capsys, _scaled(tmp_path, 2.0), 3, "--json")))
    assert doc["health"] == "degraded" and doc["exit_status"] == 3
    doc = json.loads("\n".join(_run(capsys, FIX, 0, "--json")))
    assert doc["health"] == "healthy" and doc["exit_status"] == 0


def test_a_log_of_small_sizes_only_is_not_judged(tmp_path, capsys):
    data = json.loads(FIX.read_text())
    data["results"] = data["results"][:1]
    data["results"][0]["size"] = 65536  # below the 1 MiB the verdict needs
    small = tmp_path / "small.json"
    small.write_text(json.dumps(data))
    out = _run(capsys, small, 4)
    assert out[-1].startswith("verdict: no sizes >= 1.0 MiB")
