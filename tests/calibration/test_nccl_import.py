"""nccl-tests logs become collective measurements and fitted link parameters."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from perfmodel.calibration.measurement import (
    BenchKind,
    Measurement,
    TimingStats,
    collective_measurement,
)
from perfmodel.calibration.nccl import fit_link_params, import_nccl_tests, predict_ring, ring_steps
from perfmodel.comm import LinkParams
from perfmodel.errors import CalibrationError
from perfmodel.ops import CollectiveOp, bus_factor

NCCL = Path(__file__).resolve().parents[1] / "fixtures" / "nccl"


def test_real_log_imports_and_fits():
    ms = import_nccl_tests(NCCL / "a3mega-h100-2node-all_reduce.txt", link_class="infiniband")
    assert len(ms) >= 20 and all(m.kind is BenchKind.COLLECTIVE for m in ms)
    assert ms[0].params["ranks"] == 16 and ms[0].params["nodes"] == 2
    params, fits = fit_link_params(ms)
    assert isinstance(params, LinkParams)
    assert LinkParams.from_dict(params.to_dict()) == params
    fit = fits["link.infiniband"]
    # a two-parameter ring model over 8 B .. 8 GiB: honest about its error, and its bus bandwidth
    # is of the order of the best bus bandwidth the log shows (protocol changes are not modelled)
    assert fit.median_abs_error < 0.25
    best_busbw = max(
        bus_factor(CollectiveOp.ALLREDUCE, 16) * m.params["nbytes"] / m.time_s for m in ms
    )
    assert 0.5 * best_busbw < fit.values["bandwidth_Bps"] < 1.5 * best_busbw
    big = max(ms, key=lambda m: m.params["nbytes"])
    pred = predict_ring(big, fit.values["alpha_s"], fit.values["bandwidth_Bps"])
    assert abs(pred / big.time_s - 1) < 0.5
    assert 0 < fit.stderr["bandwidth_Bps"] < fit.values["bandwidth_Bps"]


def test_imported_row_form():
    # line 27 of the log: 64 B all-reduce, in-place time 122.9 us
    log = NCCL / "a3mega-h100-2node-all_reduce.txt"
    m = import_nccl_tests(log, link_class="infiniband", inplace=True)[3]
    assert m.to_dict() == {
        "kind": "collective",
        "key": "collective/allreduce/n16/64/inplace",
        "params": {"op": "allreduce", "nbytes": 64, "ranks": 16, "nodes": 2, "dtype": "float",
                   "link_class": "infiniband", "inplace": True},
        "time_s": 0.0001229, "min_s": 0.0001229, "p10_s": 0.0001229, "p90_s": 0.0001229,
        "repeats": 1, "work_flop": None, "work_bytes": 64.0, "backend": "nccl-tests",
        "notes": "imported from a3mega-h100-2node-all_reduce.txt (line 27)",
    }  # fmt: skip
    assert import_nccl_tests(log, link_class="infiniband")[3].key == "collective/allreduce/n16/64"


def test_benchmarked_collective_form():
    # what calibration.collectives writes for one torch.distributed size
    m = collective_measurement(
        "allgather", 4096, ranks=2, nodes=1, dtype="float", link_class="pcie",
        timing=TimingStats(1e-4, 1e-4, 1e-4, 1e-4, 3), backend="torch.distributed-gloo",
        notes="n", more_params={"backend": "gloo"},
    )  # fmt: skip
    assert m.kind is BenchKind.COLLECTIVE and m.key == "collective/allgather/n2/4096"
    assert list(m.params.items()) == [
        ("op", "allgather"), ("nbytes", 4096), ("ranks", 2), ("nodes", 1), ("dtype", "float"),
        ("link_class", "pcie"), ("backend", "gloo"),
    ]  # fmt: skip
    assert (m.work_bytes, m.work_flop, m.backend, m.notes) == (
        4096.0,
        None,
        "torch.distributed-gloo",
        "n",
    )


def test_synthetic_ring_recovered():
    alpha, bw, n = 3e-6, 150e9, 8
    rng = np.random.default_rng(0)
    ms = []
    for size in (2**k for k in range(10, 31, 2)):
        t = (
            ring_steps(CollectiveOp.ALLREDUCE, n) * alpha
            + bus_factor(CollectiveOp.ALLREDUCE, n) * size / bw
        ) * math.exp(rng.normal(0, 0.02))
        ms.append(
            Measurement(
                BenchKind.COLLECTIVE,
                f"c/{size}",
                {"op": "allreduce", "nbytes": size, "ranks": n, "link_class": "nvlink"},
                TimingStats(t, t, t, t, 1),
            )
        )
    params, _ = fit_link_params(ms)
    assert params.classes["nvlink"].bandwidth_Bps == pytest.approx(bw, rel=0.05)
    assert params.classes["nvlink"].alpha_s == pytest.approx(alpha, rel=0.1)


def test_missing_link_class_is_named():
    m = Measurement(
        BenchKind.COLLECTIVE,
        "c/1",
        {"op": "allreduce", "nbytes": 1024, "ranks": 2},
        TimingStats(1e-5, 1e-5, 1e-5, 1e-5, 1),
    )
    with pytest.raises(CalibrationError, match="link_class"):
        fit_link_params([m])


def test_cli_import_records_rows_device_and_link_fit(tmp_path, capsys):
    from perfmodel.calibration.profile import read_profile
    from perfmodel.cli import main

    out = tmp_path / "p.json"
    log = NCCL / "a3mega-h100-2node-all_reduce.txt"
    rc = main(["calibrate", "--nccl-log", str(log), "--link", "infiniband", "-o", str(out)])
    assert rc == 0
    prof = read_profile(out)
    assert prof.device.name == "NVIDIA H100 80GB HBM3"
    assert len(prof.measurements_of(BenchKind.COLLECTIVE)) == len(
        import_nccl_tests(log, link_class="infiniband")
    )
    assert "link.infiniband" in prof.fits
    assert "imported 31 collective measurements" in capsys.readouterr().out
