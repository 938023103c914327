"""``perfmodel comm`` end to end."""

from __future__ import annotations

import json
from pathlib import Path

from perfmodel.cli import main

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "nccl"


def test_table(capsys):
    assert (
        main(
            [
                "comm",
                "--system",
                "dgx1-v100",
                "--gpus",
                "8",
                "--op",
                "allreduce",
                "--sizes",
                "1K:1G:32",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    lines = [line for line in out.splitlines() if not line.startswith("#")]
    assert len(lines) == 5  # 1K, 32K, 1M, 32M, 1G
    size, count, dtype, _time_us, algbw, busbw, algo, rng = lines[-1].split()
    assert int(size) == 1 << 30 and int(count) == (1 << 30) // 4 and dtype == "float"
    assert float(busbw) == float(algbw) * 1.75 or abs(float(busbw) - float(algbw) * 1.75) < 0.02
    assert algo.startswith("ring/")
    lo, hi = (float(x) for x in rng.split("-"))  # the 80% range of busbw (issue 26)
    assert lo < hi


def test_json_and_csv(capsys):
    assert (
        main(
            [
                "comm",
                "--system",
                "dgx-a100",
                "--nodes",
                "2",
                "--op",
                "allgather",
                "--sizes",
                "1M:4M",
                "--json",
            ]
        )
        == 0
    )
    doc = json.loads(capsys.readouterr().out)
    assert doc["gpus"] == 16 and len(doc["results"]) == 3
    assert doc["results"][0]["op"] == "allgather"
    assert (
        main(
            [
                "comm",
                "--system",
                "dgx1-v100",
                "--gpus",
                "4",
                "--op",
                "sendrecv",
                "--sizes",
                "1M",
                "--csv",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("size_bytes,time_s") and len(out) == 2


def test_simulated_and_plot(tmp_path, capsys):
    png = tmp_path / "bw.png"
    args = ["comm", "--system", "dgx1-v100", "--gpus", "4", "--op", "allreduce", "--sizes", "1M:16M:4",
            "--fidelity", "simulated", "--plot", str(png)]  # fmt: skip
    assert main(args) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_compare(tmp_path, capsys):
    png = tmp_path / "cmp.png"
    log = FIX / "a3mega-h100-2node-all_reduce.txt"
    assert (
        main(
            [
                "comm",
                "--compare",
                str(log),
                "--system",
                "dgx-h100",
                "--nodes",
                "2",
                "--plot",
                str(png),
            ]
        )
        == 3  # the A3 Mega's TCPXO network is slower than the catalogue's NDR InfiniBand
    )
    out = capsys.readouterr().out
    assert "median |time error|" in out and png.exists()
    assert out.strip().splitlines()[-1].startswith("verdict: DEGRADED")
    assert (
        main(["comm", "--compare", str(FIX / "old-layout-all_gather-with-nccl-info.txt"), "--json"])
        == 3
    )
    doc = json.loads(capsys.readouterr().out)
    assert doc["health"] == "degraded"
    assert (
        doc["op"] == "allgather" and doc["system"] == "dgx1-v100" and len(doc["skipped_lines"]) == 2
    )


def test_explicit_group(capsys):
    # gpu0-gpu3 are joined by 2 NVLink2 links on a DGX-1V: 2 x 22.5 GB/s
    args = ["comm", "--system", "dgx1-v100", "--group", "gpu0,gpu3", "--sizes", "1G", "--json"]
    assert main(args) == 0
    r = json.loads(capsys.readouterr().out)["results"][0]
    assert r["group_size"] == 2 and abs(r["bandwidth_Bps"] - 45e9) < 1e6
    assert main(["comm", "--system", "dgx1-v100", "--group", "gpu0,gpu42"]) == 2


def test_errors_are_one_line_exit_2(capsys):
    assert main(["comm", "--system", "dgx1-v100", "--gpus", "0"]) == 2
    assert main(["comm", "--system", "dgx1-v100", "--gpus", "9"]) == 2
    assert main(["comm", "--system", "dgx1-v100", "--sizes", "0"]) == 2
    assert main(["comm", "--compare", str(FIX / "malformed.txt"), "--system", "dgx1-v100"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 4 and all(line.startswith("perfmodel: error:") for line in err)


def test_algorithm_help_lists_every_algorithm(capsys):
    """``comm --algorithm``'s help is built from the enum (it lacked nvls, collnet, nvls_tree, pat)."""
    import pytest

    from perfmodel.comm.params import Algorithm

    with pytest.raises(SystemExit):
        main(["comm", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert f"one of {', '.join(a.value for a in Algorithm)}" in out
    for name in ("ring", "tree", "nvls", "collnet", "nvls_tree", "pat"):  # the ones it lacked, too
        assert f" {name}," in out or f" {name})" in out or f", {name}" in out, name
