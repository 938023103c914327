"""``compare --nodes N --gpus M`` (user23 item 4): an explicit ``--nodes`` is a cap, as
``predict`` reads the same flags. Before, the plan search sized ``ceil(M / per server)``
servers whatever ``--nodes`` said (``--nodes 1 --gpus 16`` on 8-GPU servers searched two,
quietly) and ``--systems`` dropped ``--nodes``; now a count above ``N`` servers' GPUs is
refused with predict's words (exit 2, naming ``--gpus`` and the fix). Without ``--nodes`` the
search still sizes the servers from ``--gpus`` (its documented default). ``predict``'s GPU
list read ``--nodes`` as a minimum (``--nodes 1 --gpus 8,16`` grew the 16-GPU row to two
servers) where one count is capped: now capped too, so both commands agree."""

from __future__ import annotations

import json

import pytest

from perfmodel.cli import main
from tests.cli.cli_helpers import refused

JOB = ["--model", "gpt2", "--global-batch", "64", "--optimizer", "adam"]
WORDS = "--gpus 16 but system dgx-h100 with --nodes 1 has 8 GPUs (8 per server); use --nodes 2"


@pytest.mark.parametrize(
    "argv",
    [
        ["compare", "--system", "dgx-h100", "--nodes", "1", "--gpus", "16"],
        ["compare", "--system", "dgx-h100", "--nodes", "1", "--gpus", "8,16"],
        ["compare", "--systems", "dgx-a100,dgx-h100", "--nodes", "1", "--gpus", "16"],
        ["compare", "--systems", "dgx-a100,dgx-h100", "--search", "--nodes", "1", "--gpus", "16"],
        ["predict", "--system", "dgx-h100", "--nodes", "1", "--gpus", "16"],
        ["predict", "--system", "dgx-h100", "--nodes", "1", "--gpus", "8,16"],
    ],
    ids=["search", "search-list", "whatif", "systems-search", "predict", "predict-curve"],
)
def test_a_count_above_the_given_nodes_is_refused_as_predict_refuses_it(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    err = refused(capsys, [*argv, *JOB])
    words = WORDS.replace("dgx-h100", "dgx-a100") if "dgx-a100,dgx-h100" in argv else WORDS
    assert words in err, err


def test_within_the_given_nodes_and_without_nodes_the_search_runs(
    capsys: pytest.CaptureFixture[str],
) -> None:
    base = ["compare", "--system", "dgx-h100", *JOB, "--no-screen", "--top", "1"]
    base += ["--tp", "1", "--pp", "1", "--zero", "1", "--microbatch", "4", "--json"]
    assert main([*base, "--nodes", "2", "--gpus", "16"]) == 0
    assert main([*base, "--gpus", "16"]) == 0  # no --nodes: two servers sized from --gpus
    capsys.readouterr()


def test_predict_curve_without_nodes_sizes_the_servers(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["predict", "--system", "dgx-h100", "--gpus", "8,16", *JOB, "--json"]
    assert main([*argv, "--fidelity", "analytic", "--interval", "off"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["hardware"]["nodes_used"] for r in rows] == [1, 2]
