"""Cold start (issue 14, item 5): ``import perfmodel`` and each command load only what they use.

Fresh interpreters (the test process has imported everything already): one for the package,
one for a catalogue command, one for an analytic prediction.
"""

from __future__ import annotations

import ast
import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

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
ours = sorted(m for m in sys.modules if m.startswith("perfmodel"))
print(json.dumps({"top": top, "calibration": calib, "perfmodel": ours}))
"""


def _loaded(args: list[str], probe: str = PROBE) -> dict[str, list[str]]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run(
        [sys.executable, "-c", probe, json.dumps(args)],
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
    # numpy too: the ring analysis of an analytic prediction is plain Python
    # (perfmodel.comm.maxmin.maxmin_rates_small, issue 14: numpy's import was ~40% of the CLI)
    assert not set(got["top"]) & {"numpy", "scipy", "matplotlib", "dask", "joblib", "simpy"}
    assert got["calibration"] == []
    # the package __init__ files re-export lazily (perfmodel._lazy): a prediction loads no
    # topology analysis and none of the plan search, sweep, what-if or fitting modules
    unused = {
        "perfmodel.topology.analysis",
        "perfmodel.topology.custom",
        "perfmodel.search.compare",
    }
    unused |= {"perfmodel.search.sweep", "perfmodel.search.whatif", "perfmodel.search.tta"}
    unused |= {"perfmodel.search.plans", "perfmodel.search.cost"}
    assert not set(got["perfmodel"]) & unused


LAZY_PACKAGES = ("perfmodel.topology", "perfmodel.search", "perfmodel.report")

PACKAGE_PROBE = """
import json, sys
for name in json.loads(sys.argv[1]):
    __import__(name)
print(json.dumps({"perfmodel": sorted(m for m in sys.modules if m.startswith("perfmodel"))}))
"""


def test_lazy_packages_import_no_submodule() -> None:
    got = set(_loaded(list(LAZY_PACKAGES), PACKAGE_PROBE)["perfmodel"])
    assert got == {"perfmodel", "perfmodel._lazy", *LAZY_PACKAGES}


def _type_checking_imports(package: str) -> dict[str, str]:
    """``{name: submodule}`` of the package's ``if TYPE_CHECKING:`` imports (what a type
    checker reads as its re-exports), read off its ``__init__.py``."""
    pkg = importlib.import_module(package)
    tree = ast.parse(Path(pkg.__file__).read_text(encoding="utf-8"))
    found = {}
    for node in tree.body:
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
            for imp in node.body:
                assert isinstance(imp, ast.ImportFrom) and imp.module
                assert imp.module.startswith(f"{package}."), imp.module
                found |= {a.asname or a.name: imp.module.split(".")[-1] for a in imp.names}
    return found


@pytest.mark.parametrize("package", LAZY_PACKAGES)
def test_lazy_package_exports_its_submodules_values(package: str) -> None:
    pkg = importlib.import_module(package)
    static = _type_checking_imports(package)
    # the run-time list (lazy_exports' map, whence __all__) is what the type checker reads
    assert sorted(static) == pkg.__all__
    for name, module in static.items():
        assert getattr(pkg, name) is getattr(importlib.import_module(f"{package}.{module}"), name)
    assert set(pkg.__all__) <= set(dir(pkg))
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        pkg.nope  # noqa: B018


PARSER_PROBE = """
import json, sys
from perfmodel.cli import build_parser
build_parser(json.loads(sys.argv[1])[0])
print(json.dumps({"top": sorted({m.split(".")[0] for m in sys.modules})}))
"""


@pytest.mark.parametrize("command", ["predict", "compare", "sweep", "validate"])
def test_parsing_a_command_loads_no_graph_or_array_library(command: str) -> None:
    # `perfmodel predict -h` and a bad flag answer before the topology stack loads
    assert not set(_loaded([command], PARSER_PROBE)["top"]) & set(HEAVY)


API_PROBE = """
import json, sys
from perfmodel.api import Scenario, predict
rep = predict(Scenario.from_dict(json.loads(sys.argv[1])[0]))
assert rep.speedup is not None
print(json.dumps({"top": sorted({m.split(".")[0] for m in sys.modules})}))
"""


def test_analytic_predict_across_servers_loads_no_numpy() -> None:
    # groups spanning servers (ring summaries), pipeline sends and the speedup baseline, through
    # the CLI and through perfmodel.api.predict
    cli = ["predict", "--system", "dgx-a100", "--nodes", "4", "--model", "gpt", "--model-arg",
           "hidden=2048", "layers=8", "heads=16", "--plan", "dp=8,tp=2,pp=2", "--global-batch",
           "64", "--fidelity", "analytic", "--quiet"]  # fmt: skip
    assert "numpy" not in _loaded(cli)["top"]
    sc = {"system": "dgx1-v100", "nodes": 2, "model": "gpt", "global_batch": 32, "dp": 16}
    sc |= {"model_args": {"hidden": 1024, "layers": 4, "heads": 16}, "fidelity": "analytic"}
    assert "numpy" not in _loaded([sc], API_PROBE)["top"]


BUDGET_PROBE = """
import json, sys
from perfmodel.cli._common import parse_budget
import perfmodel.cli.compare, perfmodel.search.tta, perfmodel.topology.analysis
assert parse_budget("2m", allow_zero=True) == 120.0
print(json.dumps({"top": sorted({m.split(".")[0] for m in sys.modules})}))
"""


def test_plan_search_budget_and_analysis_modules_load_no_numpy_or_scipy() -> None:
    # compare --budget parses a duration (perfmodel.calibration.runner): not the measurement
    # backends and fits; the time-to-accuracy fit and the bandwidth matrix import numpy when run
    assert not set(_loaded([], BUDGET_PROBE)["top"]) & {"numpy", "scipy", "simpy", "matplotlib"}
