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
        (
            "price_stale = true",
            'price_stale = "yes"',
            "price_stale must be true or false, got 'yes'",
        ),
        (
            "price_high_by = 1.82",
            "price_high_by = 0.5",
            "price_high_by: expected a number >= 1, got 0.5",
        ),
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


@pytest.mark.parametrize(
    ("old", "new", "value"),
    [
        ("price_per_gpu_hour = 12.29", "price_per_gpu_hour = 7", 7.0),
        ("price_high_by = 1.82", "price_high_by = 1", 1.0),  # a factor of 1 is allowed
        ("price_high_by = 1.82", "price_high_by = 2", 2.0),
    ],
)
def test_price_numbers_are_floats(tmp_path: Path, old: str, new: str, value: float) -> None:
    """The number check of a system file's prices and bandwidths (``_schema.as_number``)
    returns a float, the bound of ``price_high_by`` inclusive."""
    p = tmp_path / "p5.toml"
    p.write_text(P5_TEXT.replace(old, new, 1))
    cloud = read_server_file(p).cloud
    got = cloud.price_per_gpu_hour if "per_gpu" in old else cloud.price_high_by
    assert type(got) is float and got == value


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        (
            "price_high_by = 1.82",
            "price_high_by = true",
            "price_high_by: expected a number, got True (bool)",
        ),
        (
            "price_high_by = 1.82",
            'price_high_by = "2"',
            "price_high_by: expected a number, got '2' (str)",
        ),
        (
            "price_per_gpu_hour = 12.29",
            "price_per_gpu_hour = 0",
            "price_per_gpu_hour: expected a number > 0, got 0 (int)",
        ),
        (
            "price_per_gpu_hour = 12.29",
            "price_per_gpu_hour = true",
            "price_per_gpu_hour: expected a number, got True",
        ),
        (
            'tech = "xgmi-2"',
            'tech = "xgmi-2"\nbandwidth_GBps = true',
            "bandwidth_GBps: expected a number, got True",
        ),
        (
            'tech = "xgmi-2"',
            'tech = "xgmi-2"\nbandwidth_Gbps = 0',
            "bandwidth_Gbps: expected a number > 0, got 0 (int)",
        ),
        # infinity is no price, factor or bandwidth (TOML reads ``inf`` as a float)
        (
            "price_per_gpu_hour = 12.29",
            "price_per_gpu_hour = inf",
            "price_per_gpu_hour: expected a finite number, got inf (float)",
        ),
        (
            "price_high_by = 1.82",
            "price_high_by = inf",
            "price_high_by: expected a finite number, got inf (float)",
        ),
        (
            'tech = "xgmi-2"',
            'tech = "xgmi-2"\nbandwidth_GBps = inf',
            "bandwidth_GBps: expected a finite number, got inf (float)",
        ),
    ],
)
def test_one_number_check_for_prices_and_bandwidths(
    tmp_path: Path, old: str, new: str, message: str
) -> None:
    """Prices, the price factor and link bandwidths share one check (``_schema.as_number``): a
    boolean, text, infinity or a value out of range is a TopologyError naming the key and the
    value."""
    p = tmp_path / "p5.toml"
    p.write_text(P5_TEXT.replace(old, new, 1))
    with pytest.raises(TopologyError, match=re.escape(message)):
        read_server_file(p)
