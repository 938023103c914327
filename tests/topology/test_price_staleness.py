"""A stale catalogue price says so on every cost line, from the catalogue's ``price_stale`` and
``price_high_by`` fields (audit15 item 15: predict's cost line read "(source dated
2023-07-27)" only, though the catalogue knew the price may be 1.82x high)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from perfmodel.cli import main
from perfmodel.errors import TopologyError
from perfmodel.topology import load_system
from perfmodel.topology.files import read_server_file

ROOT = Path(__file__).resolve().parents[2]
P5_TEXT = (ROOT / "topologies" / "aws-p5.48xlarge.toml").read_text()


def test_price_label_from_the_catalogue_fields() -> None:
    p5 = load_system("aws-p5.48xlarge").cloud
    assert p5.price_stale and p5.price_high_by == pytest.approx(1.82)
    # the factor is the source note's own: price / (price after the stated cut)
    cut = int(re.search(r"by up to (\d+)%", p5.price_source).group(1)) / 100
    assert p5.price_high_by == pytest.approx(1 / (1 - cut), abs=0.005)
    assert p5.price_label().endswith("(price dated 2023-07-27, may be up to 1.8x high)")
    p5e = load_system("aws-p5e.48xlarge").cloud
    assert p5e.price_stale and p5e.price_high_by is None
    assert p5e.price_label().endswith(
        "(price dated 2024-12-31, may be out of date by an unknown amount)"
    )
    fresh = load_system("aws-p5en.48xlarge").cloud
    if fresh is not None and fresh.price_per_gpu_hour is not None:
        assert not fresh.price_stale and "source dated" in fresh.price_label()


def test_predict_cost_line_says_the_price_may_be_high(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["predict", "--system", "aws-p5.48xlarge", "--model", "gpt2", "--global-batch", "64"]
    argv += ["--precision", "bf16", "--fidelity", "analytic", "--tokens", "1e9"]
    assert main(argv) == 0
    cost = next(ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("cost "))
    assert "(price dated 2023-07-27, may be up to 1.8x high)" in cost


@pytest.mark.parametrize(
    "old, new, message",
    [
        ("price_stale = true", 'price_stale = "yes"', "price_stale = 'yes' must be true"),
        ("price_high_by = 1.82", "price_high_by = 0.5", "price_high_by = 0.5 must be"),
        ("price_stale = true", "price_stale = false", "price_high_by needs"),
    ],
)
def test_bad_staleness_fields_are_typed_errors(
    tmp_path: Path, old: str, new: str, message: str
) -> None:
    assert old in P5_TEXT
    p = tmp_path / "p5.toml"
    p.write_text(P5_TEXT.replace(old, new, 1))
    with pytest.raises(TopologyError, match=message):
        read_server_file(p)
