"""Rough edges a new user met (issue 16): legends, "written to" lines, plain axis labels, titles
that say what is plotted, units in column headers, headers naming precision, batch and sequence
length, no convolution wording for models without convolutions."""

from __future__ import annotations

import pytest
from search_fakes import fake_predict, fake_system_predict

from perfmodel.api import Scenario, predict
from perfmodel.cli import main
from perfmodel.report.trace import GANTT_LEGEND, plot_gantt
from perfmodel.search.compare import search_plans
from perfmodel.search.compare_table import format_table
from perfmodel.search.cost import Pricing
from perfmodel.search.plans import ModelFamily, ModelShape
from perfmodel.search.plots import plot_whatif
from perfmodel.search.system_option import parse_systems
from perfmodel.search.whatif import hardware_whatif


def test_gantt_has_a_legend(tmp_path) -> None:
    sc = Scenario(system="dgx-a100", model="gpt", pp=2, gpus=2, global_batch=8, microbatch=2,
                  model_args={"hidden": 128, "layers": 2, "heads": 2, "seq_len": 64, "vocab": 100})  # fmt: skip
    r = predict(sc, baseline=False)
    labels = plot_gantt(r.timeline, tmp_path / "g.png", title="custom title")
    assert labels == tuple(lab for _c, lab in GANTT_LEGEND)
    assert labels[:2] == ("forward", "backward") and (tmp_path / "g.png").stat().st_size > 1000


def test_predict_prints_written_to_for_gantt_and_plot(tmp_path, capsys) -> None:
    g, p = tmp_path / "g.png", tmp_path / "s.png"
    base = ["predict", "--system", "dgx1-v100", "--model", "mlp", "--batch-per-gpu", "8",
            "--fidelity", "analytic"]  # fmt: skip
    assert main([*base, "--gantt", str(g)]) == 0
    out = capsys.readouterr().out
    assert f"Gantt chart written to {g}" in out
    assert "convolutions" not in out.splitlines()[0]  # an MLP has none
    assert main([*base, "--gpus", "1,2", "--plot", str(p), "--dataset-size", "50000"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[-1] == f"speedup plot written to {p}"
    # the curve header names precision and batch; the table keeps the epoch time
    assert out[0] == (
        "mlp on dgx1-v100 x1 node(s), pytorch-ddp (default preset; --software to choose), "
        "fp32 (default), sgd (default), batch 8 per GPU"
    )
    assert out[1].split()[-1] == "epoch" and out[2].split()[-1] == "s"


def _whatif(priced: bool):
    systems = parse_systems("fast,slow")
    prices = {"fast": Pricing(4.0), "slow": Pricing(1.0)} if priced else None
    return hardware_whatif(
        {"model": "toy", "batch_per_gpu": 32},
        systems,
        [1, 2, 4, 8],
        pricing=prices,
        epochs=10 if priced else None,
        dataset_size=1_000_000 if priced else None,
        deadline_s=3600.0 if priced else None,
        evaluator=fake_system_predict,
        gpus_per_node=lambda o: 4,
    )


def test_whatif_plot_axes_and_titles(tmp_path) -> None:
    bare = plot_whatif(_whatif(False), tmp_path / "a.png", title="toy")
    assert bare["xticklabels"] == ["1", "2", "4", "8"]  # not 2^0 .. 2^3
    assert bare["title"] == "toy: speedup and throughput per system"  # no cost panel: no "cost"
    assert bare["panel_title"] == ""  # the "give --price-per-gpu-hour" hint stays on the terminal
    priced = plot_whatif(_whatif(True), tmp_path / "b.png", title="toy")
    assert priced["title"] == "toy: speedup and cost per run per system"
    assert priced["panel_title"].startswith("cheapest within 1.0 h")


def test_compare_table_units_and_epoch_column() -> None:
    shape = ModelShape(num_blocks=32, num_heads=32, family=ModelFamily.TRANSFORMER)

    def fast(sc):
        return fake_predict({**sc, "fidelity": "analytic"})

    res = search_plans(
        {"system": "toy", "model": "toy", "dataset_size": 100_000},
        gpus=[8],
        global_batches=[64],
        shape=shape,
        screen=False,
        fast_evaluator=fast,
    )
    head = format_table(res, top=3).splitlines()[0].split()
    for col in ("compute", "comm", "bubble", "epoch"):
        assert head[head.index(col) + 1] == "s", head
    row = format_table(res, top=3).splitlines()[2].split()
    assert float(row[-1]) == pytest.approx(res.ranked[0].report["epoch_time_s"], rel=1e-3)


def test_model_show_names_the_sequence_length(capsys) -> None:
    assert main(["model", "show", "gpt2"]) == 0
    assert "gpt2: batch 1, sequence length 1024, fp32" in capsys.readouterr().out
    assert main(["model", "show", "mlp"]) == 0
    assert "sequence length" not in capsys.readouterr().out
