"""comm --compare ends with a one-line health verdict and states its sign convention (issue 12)."""

from __future__ import annotations

import json
from pathlib import Path

from perfmodel.cli import main

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "nccl" / "json-all_reduce.json"


def _run(capsys, log: Path) -> list[str]:
    assert main(["comm", "--compare", str(log), "--system", "dgx-a100"]) == 0
    return capsys.readouterr().out.strip().splitlines()


def test_healthy_log(capsys):
    out = _run(capsys, FIX)
    assert out[-1].startswith("verdict: healthy")
    assert any("predicted / measured - 1" in line for line in out)
    assert any("in-pl us" in line for line in out)


def test_a_log_twice_as_slow_is_degraded(tmp_path, capsys):
    data = json.loads(FIX.read_text())
    for r in data["results"]:
        for col in ("out_of_place", "in_place"):
            r[col]["time"] *= 2.0
            r[col]["algbw"] /= 2.0
            r[col]["busbw"] /= 2.0
    slow = tmp_path / "slow.json"
    slow.write_text(json.dumps(data))
    out = _run(capsys, slow)
    assert out[-1].startswith("verdict: DEGRADED at sizes >= ")
    assert "below what this hardware should give" in out[-1]
