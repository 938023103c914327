"""Importing a trace of one rank as a workload of measured layers: a Kineto trace recorded for
this project (``calibration/h100-sxm5-80gb/``), and a Chakra ET that perfmodel itself wrote."""

from __future__ import annotations

from pathlib import Path

import pytest

from perfmodel.api import Scenario, predict, predict_curve, topology_of
from perfmodel.calibration.kineto import Phase, summarize_trace
from perfmodel.calibration.trace_workload import import_trace
from perfmodel.cli import main
from perfmodel.errors import ConfigError
from perfmodel.report.chakra import write_chakra

REPO = Path(__file__).resolve().parents[2]
KINETO = REPO / "calibration/h100-sxm5-80gb/trace-gpt2-bf16-b8-seq-len1024.json.gz"
GPT2_PARAMS = 124_439_808  # transformers.GPT2Model gpt2 (the zoo's reference count)


@pytest.fixture(scope="module")
def kineto():
    return import_trace(KINETO, params=GPT2_PARAMS)


def test_kineto_trace_imports(kineto) -> None:
    s = summarize_trace(str(KINETO))
    fwd = sum(x.time_s for x in s.layers if x.phase is Phase.FORWARD)
    assert kineto.gpu == "H100-SXM5-80GB"  # from the trace's deviceProperties
    assert len(kineto.layers) == sum(x.phase is Phase.FORWARD for x in s.layers) > 100
    assert kineto.fwd_s == pytest.approx(fwd)
    assert kineto.fwd_s + kineto.bwd_s + kineto.not_imported_s == pytest.approx(s.total())
    wl = kineto.workload(8, "bf16")
    assert sum(la.params for la in wl.layers) == GPT2_PARAMS == wl.total_params


def test_imported_workload_scales_out(kineto) -> None:
    sc = Scenario(system="dgx-h100", model="gpt2-trace", batch_per_gpu=8, precision="bf16",
                  gpus=1, fidelity="analytic")  # fmt: skip
    fn = kineto.workload_fn(8)
    one = predict(sc, workload_fn=fn, baseline=False)
    # the compute on one GPU is the measured forward + backward, nothing else
    assert one.breakdown.compute_s == pytest.approx(kineto.fwd_s + kineto.bwd_s, rel=1e-9)
    curve = predict_curve(sc, [1, 8], workload_fn=fn)
    assert curve[1].num_gpus == 8 and 1 < curve[1].speedup <= 8
    assert curve[1].memory.to_dict()  # weights, gradients and optimizer state of 124 M params


def test_missing_facts_are_config_errors(kineto) -> None:
    with pytest.raises(ConfigError, match="--params"):
        import_trace(KINETO)
    sc = Scenario(system="dgx-a100", model="t", batch_per_gpu=8, precision="bf16", gpus=1,
                  fidelity="analytic")  # fmt: skip
    with pytest.raises(ConfigError, match="measured on H100-SXM5-80GB, not A100"):
        predict(sc, workload_fn=kineto.workload_fn(8), baseline=False)
    with pytest.raises(ConfigError, match="batch 8"):
        kineto.workload_fn(8)(batch_size=4, precision="bf16")


def test_chakra_round_trip(tmp_path) -> None:
    """Export a data-parallel GPT step as Chakra ET, import rank 0, predict it again: the same
    compute time (to the microsecond rounding of the ET) and the parameters counted back from the
    gradient all-reduce sizes (fp32: 4 bytes per gradient)."""
    sc = Scenario(system="dgx-a100", model="gpt", precision="fp32", gpus=2, batch_per_gpu=4,
                  model_args={"hidden": 256, "layers": 2, "heads": 4, "seq_len": 128, "vocab": 1000},
                  fidelity="analytic")  # fmt: skip
    r = predict(sc, baseline=False)
    ranks = {g: i for i, g in enumerate(topology_of(sc).gpus)}
    (p0,) = [p for p in write_chakra(r.timeline, tmp_path, ranks=ranks) if p.name.endswith(".0.et")]
    t = import_trace(p0, gpu="A100-SXM4-80GB", precision="fp32")
    from perfmodel.workload import build_model

    params = build_model("gpt", batch_size=4, precision="fp32", **sc.model_args).total_params
    assert t.params == params
    again = predict(sc, workload_fn=t.workload_fn(4), baseline=False)
    n = len(t.layers)
    assert again.breakdown.compute_s == pytest.approx(r.breakdown.compute_s, abs=n * 1e-6)


def test_cli_import_chakra(capsys) -> None:
    args = ["model", "import-chakra", str(KINETO), "--params", str(GPT2_PARAMS), "--batch", "8",
            "--precision", "bf16", "--system", "dgx-h100", "--gpus", "1,8"]  # fmt: skip
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "measured on H100-SXM5-80GB" in out and "parameters 124,439,808" in out
    assert out.splitlines()[-1].split()[0] == "8"
    assert main(["model", "import-chakra", str(KINETO), "--batch", "8"]) == 2
    assert "--params" in capsys.readouterr().err
