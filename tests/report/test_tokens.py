"""Token vocabulary: tokens/s, tokens/s per GPU, time (and cost) to train on a token budget, and
durations in hours next to the seconds."""

from __future__ import annotations

import json
import math
import re

import pytest

from perfmodel.api import Scenario, predict
from perfmodel.cli import main
from perfmodel.errors import ConfigError
from perfmodel.search.cost import Pricing
from perfmodel.units import format_duration

# GPT-3 XL (1.3B; Brown et al. 2020 Table 2.1: 24 layers, d 2048, 16 heads, context 2048)
GPT_1_3B = [
    "--model", "gpt",
    "--model-arg", "hidden=2048", "--model-arg", "layers=24",
    "--model-arg", "heads=16", "--model-arg", "seq_len=2048",
]  # fmt: skip
PREDICT_16_H100 = [
    "predict", "--system", "dgx-h100", "--nodes", "2", *GPT_1_3B,
    "--global-batch", "512", "--precision", "bf16", "--fidelity", "analytic",
]  # fmt: skip


def _small_gpt() -> Scenario:
    return Scenario(
        system="dgx-h100",
        model="gpt",
        model_args={"hidden": 256, "layers": 2, "heads": 4, "seq_len": 128, "vocab": 1000},
        global_batch=16,
        precision="bf16",
        gpus=2,
        fidelity="analytic",
    )


def test_tokens_per_s_and_budget_by_hand() -> None:
    r = predict(_small_gpt(), baseline=False)
    assert r.tokens_per_sample == 128
    assert r.tokens_per_s == pytest.approx(r.throughput_samples_per_s * 128)
    assert r.tokens_per_s_per_gpu == pytest.approx(r.tokens_per_s / 2)
    # 1e6 tokens at 16 x 128 = 2048 tokens per step: ceil(488.28) = 489 whole steps
    b = r.token_budget(1e6, Pricing(price_per_gpu_hour=3.6))
    assert b.steps == 489
    assert b.time_s == pytest.approx(489 * r.iteration_time_s)
    # 2 GPUs x time x 3.6 / 3600 s = 0.002 x time
    assert b.cost == pytest.approx(0.002 * b.time_s)
    assert b.gpu_hours == pytest.approx(2 * b.time_s / 3600)
    d = r.to_dict()
    assert (
        d["tokens_per_s"] == r.tokens_per_s and d["tokens_per_s_per_gpu"] == r.tokens_per_s_per_gpu
    )


def test_cnn_has_no_tokens() -> None:
    sc = Scenario(
        system="dgx1-v100", model="resnet18", batch_per_gpu=8, gpus=1, fidelity="analytic"
    )
    r = predict(sc, baseline=False)
    assert r.tokens_per_s is None and r.to_dict()["tokens_per_s_per_gpu"] is None
    assert "tokens/s" not in r.format_table()
    with pytest.raises(ConfigError, match="sequence model"):
        r.token_budget(1e9)


@pytest.mark.parametrize("bad", [0, -5, math.inf, math.nan])
def test_bad_budget(bad) -> None:
    r = predict(_small_gpt(), baseline=False)
    with pytest.raises(ConfigError, match="token budget"):
        r.token_budget(bad)


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(34732.214, "9 h 38 min"), (34740.0, "9 h 39 min"), (90061.0, "1 d 1 h"), (75, "1 min 15 s"),
     (12.34, "12.3 s")],
)  # fmt: skip
def test_format_duration(seconds, text) -> None:
    assert format_duration(seconds) == text


def test_cli_tokens_1_3b_gpt_on_16_h100(capsys) -> None:
    assert main([*PREDICT_16_H100, "--tokens", "26e9", "--price-per-gpu-hour", "2.5"]) == 0
    out = capsys.readouterr().out
    assert "sequence length 2048" in out.splitlines()[0]
    assert "convolutions" not in out
    m = re.search(r"time to train\s+([\d,]+) s \((\d+) h (\d+) min\) for 2\.6e\+10 tokens", out)
    assert m, out
    secs = float(m.group(1).replace(",", ""))
    assert 3600 * int(m.group(2)) + 60 * int(m.group(3)) == pytest.approx(secs, abs=60)
    cost = float(re.search(r"cost\s+([\d,.]+)", out).group(1).replace(",", ""))
    assert cost == pytest.approx(16 * secs / 3600 * 2.5, rel=1e-3)
    assert re.search(r"tokens/s\s+[\d,]+ tokens/s\s+\([\d,]+ per GPU", out)


def test_cli_tokens_json(capsys) -> None:
    assert main([*PREDICT_16_H100, "--tokens", "26e9", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    tb = d["token_budget"]
    assert tb["tokens"] == 26e9 and tb["cost"] is None
    assert tb["steps"] == math.ceil(26e9 / (512 * 2048))
    assert tb["time_to_train_s"] == pytest.approx(tb["steps"] * d["iteration_time_s"])
    assert d["tokens_per_s"] == pytest.approx(d["throughput_samples_per_s"] * 2048)
    assert d["tokens_per_s_per_gpu"] == pytest.approx(d["tokens_per_s"] / 16)


def test_cli_tokens_on_a_cnn_is_a_config_error(capsys) -> None:
    args = ["predict", "--system", "dgx1-v100", "--model", "resnet18", "--batch-per-gpu", "8",
            "--gpus", "1", "--fidelity", "analytic", "--tokens", "1e9"]  # fmt: skip
    assert main(args) == 2
    assert "--tokens" in capsys.readouterr().err


def test_cli_price_without_tokens(capsys) -> None:
    assert main([*PREDICT_16_H100, "--price-per-gpu-hour", "2"]) == 2
    assert "needs --tokens" in capsys.readouterr().err


def test_cli_tokens_on_a_curve(capsys) -> None:
    args = [*PREDICT_16_H100, "--gpus", "8,16", "--tokens", "26e9"]
    assert main(args) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[1].startswith("WARNING: optimizer sgd is only the default")  # gpt, no --optimizer
    assert lines[2].endswith("time to train         80% time to train")
    rows = [ln for ln in lines[3:] if re.match(r"\s*(8|16) dp=", ln)]  # the two table rows
    assert len(rows) == 2
    # the time to train, then its range (the iteration time's, scaled)
    dur = r"\d+(?:\.\d)? (?:d|h|min|s)(?: \d+ (?:h|min|s))?"  # units.format_duration's two largest units
    assert all(re.search(rf"\d+ s \(\d+ h \d+ min\) +{dur}-{dur}$", ln) for ln in rows)
    assert main([*args, "--json", "--price-per-gpu-hour", "2"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["num_gpus"] for r in rows] == [8, 16]
    for r in rows:
        tb = r["token_budget"]
        assert tb["cost"] == pytest.approx(r["num_gpus"] * tb["time_to_train_s"] / 3600 * 2)
