"""nccl-tests log parser: real and hand-made fixtures."""

from __future__ import annotations

from pathlib import Path

import pytest

from perfmodel.comm.nccl_tests import parse_nccl_tests, read_nccl_tests
from perfmodel.errors import ParseError
from perfmodel.ops import CollectiveOp, bus_factor

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "nccl"


def test_real_log_current_layout():
    log = read_nccl_tests(FIX / "a3mega-h100-2node-all_reduce.txt")
    assert log.op is CollectiveOp.ALLREDUCE
    assert log.ranks == 16 and log.nodes == 2
    assert len(log.rows) == 31 and not log.skipped
    last = log.rows[-1]
    assert last.size_bytes == 8589934592 and last.redop == "sum" and last.root == -1
    assert last.time_s == pytest.approx(47535e-6)
    assert last.busbw_Bps == pytest.approx(338.82e9)
    assert last.inplace_time_s == pytest.approx(47743e-6)
    assert log.avg_busbw_Bps == pytest.approx(70.742e9)
    # nccl-tests' own definitions hold on the real numbers
    for row in log.rows[-8:]:
        assert row.algbw_Bps == pytest.approx(row.size_bytes / row.time_s, rel=0.01)
        assert row.busbw_Bps == pytest.approx(
            row.algbw_Bps * bus_factor(CollectiveOp.ALLREDUCE, 16), rel=0.01
        )


def test_old_layout_with_debug_lines_keeps_good_rows_and_reports_bad_ones():
    log = read_nccl_tests(FIX / "old-layout-all_gather-with-nccl-info.txt")
    assert log.op is CollectiveOp.ALLGATHER
    assert log.layout == "plain"
    assert [r.size_bytes for r in log.rows] == [
        1024,
        4096,
        16384,
        262144,
        4194304,
        16777216,
        67108864,
    ]
    assert [s.line for s in log.skipped] == [20, 22]
    assert "too few columns" in log.skipped[0].reason
    assert "x91.1" in log.skipped[1].reason


def test_json_output():
    log = read_nccl_tests(FIX / "json-all_reduce.json")
    assert log.layout == "json" and log.op is CollectiveOp.ALLREDUCE and log.ranks == 8
    assert [r.size_bytes for r in log.rows] == [1048576, 67108864, 1073741824]
    assert log.rows[2].busbw_Bps == pytest.approx(229.35e9)
    assert log.rows[2].inplace_time_s == pytest.approx(8180e-6)


def test_wholly_malformed_log_raises():
    with pytest.raises(ParseError, match="no nccl-tests result"):
        read_nccl_tests(FIX / "malformed.txt")
    with pytest.raises(ParseError):
        parse_nccl_tests("{not json")
    with pytest.raises(ParseError, match="not found"):
        read_nccl_tests(FIX / "missing.txt")


def test_layout_without_root_but_with_redop():
    text = (
        "#  size  count  type  redop  time  algbw  busbw  error  time  algbw  busbw  error\n"
        "  4096   1024  float  sum   20.5  0.20   0.35  0e+00  20.1  0.20   0.36  0e+00\n"
    )
    log = parse_nccl_tests(text, op="allreduce")
    assert log.layout == "redop" and log.rows[0].redop == "sum" and log.rows[0].root == -1
