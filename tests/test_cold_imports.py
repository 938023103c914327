"""Cold start (issue 14, item 5): ``import perfmodel`` and each command load only what they use.

Fresh interpreters (the test process has imported everything already): one for the package,
one for a catalogue command, one for an analytic prediction.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("numpy", "networkx", "scipy", "matplotlib", "simpy", "dask", "joblib")

PROBE = """
import contextlib, io, json, sys
args = json.loads(sys.argv[1])
if args:
    from perfmodel.cli import main
    with contextlib.redirect_stdout(io.StringIO()):
        assert main(args) == 0
else:
    import perfmodel
top = sorted({m.split(".")[0] for m in sys.modules})
calib = sorted(m for m in sys.modules if m.startswith("perfmodel.calibration"))
print(json.dumps({"top": top, "calibration": calib}))
"""


def _loaded(args: list[str]) -> dict[str, list[str]]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps(args)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(out.stdout)


def test_import_perfmodel_loads_no_third_party_package() -> None:
    assert not set(_loaded([])["top"]) & set(HEAVY)


def test_catalogue_command_loads_no_graph_or_array_library() -> None:
    # only the `hw` subcommand is registered: not the topology stack of `topo` or `predict`
    assert not set(_loaded(["--quiet", "hw", "gpus"])["top"]) & set(HEAVY)


def test_analytic_predict_loads_no_plotting_fitting_or_calibration() -> None:
    got = _loaded(["predict", "--system", "dgx-a100", "--model", "resnet50", "--global-batch", "256", "--fidelity",
                   "analytic", "--quiet"])  # fmt: skip
    assert not set(got["top"]) & {"scipy", "matplotlib", "dask", "joblib"}
    assert got["calibration"] == []
