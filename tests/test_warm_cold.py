"""Issue 27: a new plan's answer does not depend on what the process predicted before it. Every
table shared across predictions (group analyses by twin, ring pattern and image; NCCL choices
by analysis; workloads, layer prices and sharing factors by value; speedup baselines) must give
a plan the report it gets in a fresh process. Here the same GPT-3 175B plans on 1024 A100 are
predicted in this process one after another (each plan finding the previous plans' tables) and
in a fresh process in the reverse order (the last plan here the first there, with nothing kept),
and the reports compared field by field."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from perfmodel.api import Scenario, predict

ROOT = Path(__file__).resolve().parents[1]
GPT175 = {"hidden": 12288, "heads": 96, "layers": 96, "seq_len": 2048}
BASE = {
    "system": "dgx-a100", "nodes": 128, "model": "gpt", "model_args": GPT175,
    "precision": "fp16", "optimizer": "adam", "global_batch": 1536, "fidelity": "analytic",
}  # fmt: skip
#: (preset, plan, speedup baseline): new tensor-parallel shapes, micro-batches and stage
#: counts one after another; the last one without a micro-batch (the automatic search)
CASES = [
    ("megatron-core", {"dp": 64, "tp": 4, "pp": 4, "microbatch": 2}, False),
    ("megatron-core", {"dp": 32, "tp": 4, "pp": 8, "microbatch": 8}, False),
    ("pytorch-ddp", {"dp": 64, "tp": 8, "pp": 2, "microbatch": 24}, False),
    ("pytorch-ddp", {"dp": 32, "tp": 8, "pp": 4, "microbatch": 1}, False),
    ("megatron", {"dp": 16, "tp": 8, "pp": 8, "microbatch": 4}, True),
    ("megatron-core", {"dp": 32, "tp": 8, "pp": 4}, True),
]

_CHILD = """
import json, sys
from perfmodel.api import Scenario, predict
cases = json.loads(sys.stdin.read())
out = [predict(Scenario.from_dict(d), baseline=b).to_dict() for d, b in reversed(cases)]
print(json.dumps(out[::-1], sort_keys=True, default=str))
"""


def _scenarios() -> list[tuple[dict, bool]]:
    return [({**BASE, **plan, "software": preset}, bl) for preset, plan, bl in CASES]


def test_a_plan_answers_as_in_a_fresh_process() -> None:
    cases = _scenarios()
    warm = [predict(Scenario.from_dict(d), baseline=b).to_dict() for d, b in cases]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    proc = subprocess.run(
        [sys.executable, "-c", _CHILD],
        input=json.dumps(cases),
        capture_output=True,
        text=True,
        env=env,
        cwd=str(ROOT),
        check=True,
    )
    cold = json.loads(proc.stdout)
    assert json.loads(json.dumps(warm, sort_keys=True, default=str)) == cold
