"""``perfmodel model maxbatch --pipeline-layout`` (user23 item 1): maxbatch cut every pipeline by
the layers' times and had no ``--pipeline-layout`` (argparse refused it, exit 2), where predict,
compare and the scenario key state the stages (:mod:`perfmodel.parallel.pp_layout`). The flag is
parsed by predict's parser, refused with predict's errors naming the flag, and the stages it
states bound the micro-batch: a DeepSeek-V3-like model (8 decoder layers and one MTP depth,
B200, dp8 ep8 pp4) whose layout puts the embedding alone on stage 0 fits micro-batch 8 where
the time-balanced cut fits 6, and predict on the same plan and layout agrees."""

from __future__ import annotations

import json
from typing import Any

import pytest

from perfmodel.api import Scenario, predict
from perfmodel.cli import main

ARGV = ["model", "maxbatch", "deepseek_v3", "--gpu", "B200", "--precision", "bf16"]
ARGV += ["--optimizer", "adam", "--software", "megatron-core", "--plan", "dp8,ep8,pp4"]
ARGV += ["--model-arg", "layers=8", "mtp_layers=1"]
LAYOUT = "E|t*3|t*3|t*2mL"


def _memory(mb: int, layout: str | None) -> Any:
    """Predict's memory of the plan at micro-batch ``mb`` on 32 GPUs of a DGX B200."""
    d = {
        "system": "dgx-b200",
        "nodes": 4,
        "gpus": 32,
        "model": "deepseek_v3",
        "model_args": {"layers": 8, "mtp_layers": 1},
        "global_batch": 8 * 4 * mb,
        "precision": "bf16",
        "optimizer": "adam",
        "software": "megatron-core",
        "plan": f"dp8 ep8 pp4 mb{mb}",
        "fidelity": "analytic",
    }
    if layout is not None:
        d["pipeline_layout"] = layout
    return predict(Scenario.from_dict(d), baseline=False).memory


def _predicted(mb: int, layout: str | None) -> tuple[bool, float]:
    """Whether predict fits the plan at micro-batch ``mb``, and its memory total (bytes)."""
    mem = _memory(mb, layout)
    return bool(mem.fits), float(mem.total_bytes)


def _weights(mb: int, layout: str | None) -> float:
    """Predict's weight bytes of the fullest stage at micro-batch ``mb``."""
    return float(_memory(mb, layout).weights_bytes)


def _maxbatch(capsys: pytest.CaptureFixture[str], *extra: str) -> dict:
    assert main([*ARGV, *extra, "--json"]) == 0
    return json.loads(capsys.readouterr().out)  # type: ignore[no-any-return]


def test_layout_stages_bound_the_batch_as_predict_sizes_them(
    capsys: pytest.CaptureFixture[str],
) -> None:
    balanced = _maxbatch(capsys)
    d = _maxbatch(capsys, "--pipeline-layout", LAYOUT)
    mb = d["batch_size"]
    assert (balanced["batch_size"], mb) == (6, 8)
    assert d["pipeline_layout"] == LAYOUT and "pipeline_layout" not in balanced
    fits, total = _predicted(mb, LAYOUT)
    assert fits and not _predicted(mb + 1, LAYOUT)[0]
    # predict's accounting, to rounding (user24: maxbatch held each stage as the whole workload,
    # so the stage took all the router biases' buffers, 4.4 kB more weights than predict's)
    assert d["breakdown"]["total_bytes"] == pytest.approx(total, rel=1e-9)
    assert d["breakdown"]["weights_bytes"] == pytest.approx(_weights(mb, LAYOUT), rel=1e-12)
    assert not _predicted(mb, None)[0]  # the time-balanced cut does not fit it: the layout does
    b = balanced["batch_size"]
    assert balanced["breakdown"]["total_bytes"] == pytest.approx(_predicted(b, None)[1], rel=1e-9)
    assert balanced["breakdown"]["weights_bytes"] == pytest.approx(_weights(b, None), rel=1e-12)


def test_text_names_the_layout(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*ARGV, "--pipeline-layout", LAYOUT]) == 0
    head = capsys.readouterr().out.splitlines()[0]
    assert f", pipeline layout {LAYOUT} (4 micro-batches per step" in head
    assert head.endswith("largest micro-batch 8")


@pytest.mark.parametrize(
    "layout, why",
    [
        ("Et*3|Q", "unknown layer characters ['Q']"),
        ("Et*3|t*5mL", "states 2 chunks but the plan runs 4 (pp x interleave)"),
        ("E|t*3|t*3|tmL", "places 7 decoder layers 't' and 1 MTP depths 'm'; model deepseek_v3"),
        ("E|t*3|t*3|t*2m", "the loss 'L' must be the last layer"),
    ],
)
def test_bad_layout_is_refused_as_predict_refuses_it(
    layout: str, why: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Exit 2, naming the flag and the value, with predict's words for the same layout."""
    assert main([*ARGV, "--pipeline-layout", layout]) == 2
    err = capsys.readouterr().err
    assert err.startswith("perfmodel: error: --pipeline-layout: ") and f"={layout!r}" in err
    assert why in err
    argv = ["predict", "--system", "dgx-b200", "--nodes", "4", "--model", "deepseek_v3"]
    argv += ["--model-arg", "layers=8", "mtp_layers=1", "--global-batch", "32"]
    argv += ["--precision", "bf16", "--optimizer", "adam", "--software", "megatron-core"]
    argv += ["--plan", "dp8,ep8,pp4", "--fidelity", "analytic", "--pipeline-layout", layout]
    assert main(argv) == 2
    assert capsys.readouterr().err.splitlines()[0] == err.splitlines()[0]


def test_one_stage_layout_is_checked_too(capsys: pytest.CaptureFixture[str]) -> None:
    """Without pipelining one chunk holds every layer: ``Et*8mL`` states the model (the same
    answer as no layout), ``Et*7mL`` does not (refused, as predict refuses it)."""
    argv = [a if a != "dp8,ep8,pp4" else "dp8,ep8" for a in ARGV]
    assert main([*argv, "--json"]) == 0
    plain = json.loads(capsys.readouterr().out)
    assert main([*argv, "--json", "--pipeline-layout", "Et*8mL"]) == 0
    stated = json.loads(capsys.readouterr().out)
    assert stated["breakdown"] == plain["breakdown"]
    assert main([*argv, "--pipeline-layout", "Et*7mL"]) == 2
    assert "--pipeline-layout: pipeline_layout='Et*7mL' places 7" in capsys.readouterr().err
