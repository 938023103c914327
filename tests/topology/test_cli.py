"""perfmodel topo list/show/draw/import."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from perfmodel.cli import main

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "topology"


def _run(capsys, argv):
    rc = main(argv)
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_list_shows_every_catalogue_name(capsys):
    rc, out, _ = _run(capsys, ["topo", "list"])
    assert rc == 0
    for name in [
        "asus-z10pe-2x1080ti",
        "ibm-ac922-4xv100",
        "dgx1-v100",
        "dgx2-v100",
        "dgx-b200",
        "pcie-8xtitanx",
    ]:
        assert name in out
    rc, out, _ = _run(capsys, ["topo", "list", "--json"])
    rows = json.loads(out)
    assert {r["name"]: r["gpus"] for r in rows}["dgx2-v100"] == 16


def test_show_json_matrix_in_bytes_per_second(capsys):
    rc, out, _ = _run(capsys, ["topo", "show", "dgx1-v100", "--json"])
    assert rc == 0
    data = json.loads(out)
    m = data["bandwidth_matrix"]["values_Bps"]
    assert m[0][0] is None
    assert m[0][3] == pytest.approx(2 * m[0][1])  # 2 NVLinks vs 1 NVLink
    assert m[0][5] < m[0][1]  # PCIe-only pair through the CPUs is slowest
    assert m[0][1] == pytest.approx(22.5e9)
    assert data["bisection"]["method"] == "exact"
    assert data["rings"]["channels"] == 6
    assert data["nvidia_smi_topo_m"]["rows"][0][:4] == ["X", "NV1", "NV1", "NV2"]


def test_show_text_and_hardware_flags(capsys):
    rc, out, _ = _run(capsys, ["topo", "show", "dgx1-v100"])
    assert rc == 0 and "Bisection bandwidth" in out and "NV2" in out and "GB/s" in out
    rc, out, _ = _run(
        capsys,
        [
            "topo",
            "show",
            "--system",
            "custom",
            "--gpu",
            "V100-SXM2-16GB",
            "--gpus-per-node",
            "4",
            "--intra-node",
            "nvlink2",
            "--nodes",
            "2",
            "--network",
            "eth-25g",
        ],
    )
    assert rc == 0 and "eth-25g" in out and "8 GPUs" in out
    rc, out, _ = _run(
        capsys, ["topo", "show", "dgx1-p100", "--nodes", "44", "--network", "eth-50g"]
    )
    assert rc == 0 and "352 GPUs" in out and "eth-50g" in out


def test_show_json_imports_back_to_the_same_graph(capsys, tmp_path):
    rc, out, _ = _run(capsys, ["topo", "show", "dgx-a100", "--nodes", "2", "--json"])
    exported = tmp_path / "a100x2.json"
    exported.write_text(out)
    rc, out2, _ = _run(capsys, ["topo", "import", str(exported), "--json"])
    assert rc == 0
    a, b = json.loads(out), json.loads(out2)
    assert a["topology"]["nodes"] == b["topology"]["nodes"]
    assert a["topology"]["links"] == b["topology"]["links"]
    assert a["bandwidth_matrix"] == b["bandwidth_matrix"]


def test_import_smi_and_xml(capsys):
    rc, out, _ = _run(
        capsys, ["topo", "import", str(FIXTURES / "smi-pcie-4gpu.txt"), "--gpu", "V100-PCIE-16GB"]
    )
    assert rc == 0 and "PIX" in out and "assumption" in out
    rc, out, _ = _run(capsys, ["topo", "import", str(FIXTURES / "nccl-dgx-a100.xml"), "--json"])
    assert rc == 0 and json.loads(out)["summary"]["gpu_model"] == "A100-SXM4-80GB"


def test_draw_writes_png(capsys, tmp_path):
    png = tmp_path / "dgx1.png"
    rc, _out, _ = _run(capsys, ["topo", "draw", "dgx1-v100", "-o", str(png)])
    assert rc == 0 and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert png.stat().st_size > 20_000


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["topo", "show", "dgx9"], "dgx9"),
        (["topo", "show"], "SYSTEM"),
        (["topo", "show", "dgx1-v100", "--system", "dgx-a100"], "two systems"),
        (["topo", "show", "--system", "custom", "--gpu", "V100-SXM2-16GB"], "--gpus-per-node"),
        (["topo", "show", "dgx1-v100", "--nodes", "2", "--network", "ib-qdr"], "ib-qdr"),
        (["topo", "draw", "dgx1-v100", "-o", "x.svg"], "png"),
        (["topo", "import", "/nonexistent/file.txt"], "/nonexistent/file.txt"),
        (["topo", "import", str(FIXTURES / "smi-dgx2.txt")], "--gpu"),
    ],
)
def test_errors_one_line_exit_2(capsys, argv, needle):
    rc, _, err = _run(capsys, argv)
    assert rc == 2
    assert err.count("\n") == 1 and "Traceback" not in err
    assert needle in err
