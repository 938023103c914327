"""``perfmodel model`` command line: list, show, maxbatch, errors."""

from __future__ import annotations

import json

import pytest

from perfmodel.cli import main
from perfmodel.cli.model import parse_model_args
from perfmodel.errors import ConfigError


def test_list_names_models(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["model", "list", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    names = {m["name"] for m in data}
    assert {"resnet50", "gpt2", "llama", "mlp", "inception_v3"} <= names
    gpt = next(m for m in data if m["name"] == "gpt")
    assert {"hidden", "layers", "heads", "seq_len", "vocab"} <= set(gpt["arguments"])


def test_show_json_totals_match_the_layers(capsys: pytest.CaptureFixture[str]) -> None:
    argv = [
        "model",
        "show",
        "mlp",
        "--model-arg",
        "widths=784,100,10",
        "--batch",
        "8",
        "--gpu",
        "V100-SXM2-16GB",
        "--json",
    ]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["totals"]["total_params"] == 784 * 100 + 100 + 100 * 10 + 10
    assert out["totals"]["fwd_s"] == pytest.approx(sum(r["fwd_s"] for r in out["layers"]))
    assert {r["bound"] for r in out["layers"]} <= {"compute", "memory"}


def test_show_table_and_csv(capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        main(["model", "show", "resnet50", "--batch", "16", "--gpu", "v100", "--precision", "fp16"])
        == 0
    )
    text = capsys.readouterr().out
    assert "25,557,032 parameters" in text and "images/s" in text and "waves" in text
    assert main(["model", "show", "lenet5", "--csv"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0].startswith("name,kind") and len(lines) > 5


def test_maxbatch_prints_breakdown(capsys: pytest.CaptureFixture[str]) -> None:
    argv = [
        "model",
        "maxbatch",
        "resnet50v2",
        "--gpu",
        "V100-SXM2-16GB",
        "--model-arg",
        "image_size=128",
        "--json",
    ]
    assert main(argv) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["batch_size"] > 0
    assert set(d["breakdown"]) >= {"weights_bytes", "activations_bytes", "total_bytes"}


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["model", "show", "resnet5"], "unknown model"),
        (["model", "show", "gpt", "--model-arg", "heads=7"], "heads"),
        (["model", "show", "resnet50", "--batch", "-4"], "--batch"),
        (["model", "show", "vgg16", "--model-arg", "image_size=8"], "image_size"),
        (["model", "show", "resnet50", "--model-arg", "heads=2"], "heads"),
        (["model", "maxbatch", "gpt2", "--gpu", "V1000"], "V1000"),
        (["model", "show", "gpt", "--model-arg", "seq_len"], "--model-arg"),
    ],
)
def test_bad_input_is_one_line_exit_2(argv, needle, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and needle in err


def test_parse_model_args_rejects_missing_equals() -> None:
    with pytest.raises(ConfigError):
        parse_model_args(["hidden"])
