"""rev27b item 6: a plan only the screen evaluated carries predict's "tight" memory mark.

Before, the screen's report had no ``memory_tight``, so a screened-only row of ``perfmodel
compare`` never got the ``!`` mark however close to capacity (llama2_7b on 2 A100 80GB, global
batch 8: ``dp1 tp1 pp2 mb8 1f1b rc=full`` at 70.4 GiB unmarked while a 69.2 GiB analytic row
was marked; ``predict`` calls it tight). Since session 18 that plan is 70.6 GiB: its last stage
keeps the input it receives (``perfmodel.workload.memory.first_block_input_elements``). The
screen's memory is predict's
(:mod:`perfmodel.search.screen_memory`), and the mark is predict's rule on it
(:func:`perfmodel.intervals.memory.stage_tight`).
"""

from __future__ import annotations

from perfmodel.api import Scenario, predict
from perfmodel.search.compare_table import mem_cell, tight
from perfmodel.search.screen import PlanScreen

BASE = {"system": "dgx-a100", "model": "llama2_7b", "precision": "bf16", "optimizer": "adamw",
        "gpus": 2, "global_batch": 8}  # fmt: skip
PLANS = [
    {"dp": 1, "tp": 1, "pp": 2, "microbatch": 8, "schedule": "1f1b", "recompute": "full"},
    {"dp": 1, "tp": 1, "pp": 2, "microbatch": 1, "schedule": "1f1b", "recompute": "full"},
]


def test_screen_marks_tight_as_predict() -> None:
    screen = PlanScreen({k: v for k, v in BASE.items() if k not in ("gpus", "global_batch")})
    marks = []
    for plan in PLANS:
        got = screen({**BASE, **plan})
        rep = predict(Scenario(**BASE, **plan, fidelity="analytic"), baseline=False)
        assert got["memory_per_gpu_bytes"] == rep.memory_per_gpu_bytes
        assert tight(got) is rep.memory_tight
        marks.append(mem_cell(got, f"{got['memory_per_gpu_bytes'] / 2**30:8.1f}"))
    assert marks == ["   70.6!", "    55.6"]  # the first one tight, as predict says
