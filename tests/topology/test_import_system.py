"""Your own machine end to end: `topo import FILE -o box.toml|box.json` writes a system file that
`--system` accepts (issue 25, item 5)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from perfmodel.api import Scenario, predict
from perfmodel.cli import main
from perfmodel.cli.topo import write_imported_system
from perfmodel.errors import ConfigError, TopologyError
from perfmodel.topology import load_system
from perfmodel.topology.files import WRITTEN_MARK
from perfmodel.topology.importers import import_topology
from perfmodel.topology.io import parse_server
from perfmodel.topology.nccl_p2p import with_nccl_p2p_rule

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "topology"
#: GPU model of each nvidia-smi fixture (the text does not name it); XML dumps infer it.
GPU_OF = {
    "smi-dgx1-v100.txt": "V100-SXM2-16GB",
    "smi-dgx-a100-nps4.txt": "A100-SXM4-80GB",
    "smi-dgx2.txt": "V100-SXM3-32GB",
    "smi-pcie-4gpu.txt": "V100-PCIE-16GB",
    "smi-pcie-8gpu-phb.txt": "V100-PCIE-16GB",
    "nccl-dgx1-v100.xml": None,
    "nccl-dgx-a100.xml": None,
}


def test_every_shipped_fixture_is_listed() -> None:
    assert sorted(GPU_OF) == sorted(p.name for p in FIXTURES.iterdir() if p.is_file())


def _graph(topo: object) -> tuple[dict, dict]:
    g = topo.graph  # type: ignore[attr-defined]
    nodes = {n: dict(a) for n, a in g.nodes(data=True)}
    edges = {frozenset((u, v)): dict(a) for u, v, a in g.edges(data=True)}
    return nodes, edges


@pytest.mark.parametrize("name", sorted(GPU_OF))
@pytest.mark.parametrize("suffix", [".toml", ".json"])
def test_import_writes_a_system_that_reads_back_exactly(
    tmp_path: Path, name: str, suffix: str
) -> None:
    """The file gives back the imported graph (every node and edge attribute), with NCCL's P2P
    rule applied as for every system, and its assumptions."""
    topo = import_topology(FIXTURES / name, gpu=GPU_OF[name])
    out = write_imported_system(
        topo, str(FIXTURES / name), str(tmp_path / f"box{suffix}"), force=False
    )
    back = load_system(str(out))
    assert _graph(back) == _graph(with_nccl_p2p_rule(topo))
    assert back.meta["nccl_p2p_rule"] == with_nccl_p2p_rule(topo).meta["nccl_p2p_rule"]
    stated = back.meta["assumptions"]
    assert set(topo.meta["assumptions"]) <= set(stated)
    # more servers on the file's fabric, or --network where the dump had no NIC speed
    net = None if back.fabric is not None else "ib-hdr"
    if any(k == "nic" for _, k in back.graph.nodes(data="kind")):
        two = load_system(str(out), nodes=2, network=net)
        assert two.num_gpus == 2 * back.num_gpus


@pytest.mark.parametrize("name", sorted(GPU_OF))
def test_cli_import_then_predict_on_every_fixture(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The issue's done-when: `topo import FIXTURE -o box.toml && predict --system box.toml`."""
    monkeypatch.chdir(tmp_path)
    gpu = ["--gpu", GPU_OF[name]] if GPU_OF[name] else []
    assert main(["topo", "import", str(FIXTURES / name), *gpu, "-o", "box.toml"]) == 0
    out = capsys.readouterr().out
    assert "wrote box.toml" in out and "assumption:" in out
    text = (tmp_path / "box.toml").read_text()
    assert text.startswith(WRITTEN_MARK) and "assumptions = [" in text
    argv = ["--model", "gpt2", "--batch-per-gpu", "4", "--precision", "fp16"]
    rc = main(["predict", "--system", "box.toml", *argv, "--fidelity", "analytic", "--json"])
    rep = json.loads(capsys.readouterr().out)
    assert rc == 0 and rep["iteration_time_s"] > 0
    assert any("imported machine" in n for n in rep["printed_notes"])
    # compare and comm take it too
    rc = main(
        ["compare", "--systems", "box.toml", *argv, "--gpus", "1,2", "--fidelity", "analytic"]
    )
    assert rc == 0 and "box.toml" in capsys.readouterr().out
    assert main(["comm", "--system", "box.toml", "--op", "allreduce", "--sizes", "64M"]) == 0
    capsys.readouterr()


def test_smi_import_matches_the_catalogue_prediction(tmp_path: Path) -> None:
    """The DGX-1V nvidia-smi text imports to the catalogue's DGX-1V server: a one-server
    prediction on the file is the catalogue's (same GPUs, NVLink, PCIe tree)."""
    topo = import_topology(FIXTURES / "smi-dgx1-v100.txt", gpu="V100-SXM2-16GB")
    out = write_imported_system(topo, "smi", str(tmp_path / "box.toml"), force=False)
    kw = dict(model="gpt2", batch_per_gpu=4, precision="fp16", fidelity="analytic")
    mine = predict(Scenario(system=str(out), **kw))  # type: ignore[arg-type]
    cat = predict(Scenario(system="dgx1-v100", **kw))  # type: ignore[arg-type]
    assert mine.iteration_time_s == pytest.approx(cat.iteration_time_s, rel=0.02)


def test_show_json_of_a_catalogue_system_is_a_system(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--system` reads what `topo show --json` prints: the same prediction as the name."""
    assert main(["topo", "show", "dgx-h100", "--json"]) == 0
    path = tmp_path / "h100.json"
    path.write_text(capsys.readouterr().out)
    kw = dict(model="gpt2", batch_per_gpu=4, precision="bf16", fidelity="analytic", nodes=2)
    a = predict(Scenario(system=str(path), **kw))  # type: ignore[arg-type]
    b = predict(Scenario(system="dgx-h100", **kw))  # type: ignore[arg-type]
    assert a.iteration_time_s == pytest.approx(b.iteration_time_s, rel=1e-9)
    assert a.num_gpus == 16


def test_a_file_perfmodel_did_not_write_is_kept(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    mine = tmp_path / "box.toml"
    mine.write_text("# my own notes\n")
    xml = str(FIXTURES / "nccl-dgx1-v100.xml")
    assert main(["topo", "import", xml, "-o", "box.toml"]) == 2
    assert "was not written by perfmodel" in capsys.readouterr().err
    assert mine.read_text() == "# my own notes\n"
    assert not [p for p in tmp_path.iterdir() if p.name != "box.toml"]  # no temporary left
    assert main(["topo", "import", xml, "-o", "box.toml", "--force"]) == 0
    assert mine.read_text().startswith(WRITTEN_MARK)
    # a file perfmodel wrote is replaced without --force
    assert main(["topo", "import", xml, "-o", "box.toml", "--gpu", "V100-SXM2-32GB"]) == 0
    assert 'gpu = "V100-SXM2-32GB"' in mine.read_text()
    (tmp_path / "x.json").write_text('{"a": 1}')
    assert main(["topo", "import", xml, "-o", "x.json"]) == 2
    capsys.readouterr()


def test_nic_speed_unknown_is_stated_and_asked_for(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    smi = str(FIXTURES / "smi-pcie-4gpu.txt")
    assert main(["topo", "import", smi, "--gpu", "V100-PCIE-16GB", "-o", "box.toml"]) == 0
    capsys.readouterr()
    assert "NIC speed unknown" in (tmp_path / "box.toml").read_text()
    argv = ["predict", "--system", "box.toml", "--nodes", "2", "--model", "gpt2"]
    argv += ["--batch-per-gpu", "4", "--fidelity", "analytic"]
    assert main(argv) == 2
    assert "--network" in capsys.readouterr().err
    assert main([*argv, "--network", "ib-edr"]) == 0
    capsys.readouterr()
    # given at import, the fabric is in the file
    args = [
        "topo",
        "import",
        smi,
        "--gpu",
        "V100-PCIE-16GB",
        "--network",
        "ib-hdr",
        "-o",
        "b2.toml",
    ]
    assert main(args) == 0
    capsys.readouterr()
    assert 'network = "ib-hdr"' in (tmp_path / "b2.toml").read_text()


def test_missing_system_file_and_bad_p2p_denied(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        load_system(str(tmp_path / "nope.toml"))
    text = """
[system]
name = "x"
gpu = "V100-PCIE-16GB"
[[node]]
id = "cpu0"
kind = "cpu"
[[node]]
id = "gpu0"
kind = "gpu"
p2p_denied = ["gpu9"]
[[link]]
a = "cpu0"
b = "gpu0"
tech = "pcie3-x16"
"""
    import tomllib

    with pytest.raises(TopologyError, match="gpu9"):
        parse_server(tomllib.loads(text), source="x.toml")


def test_sweep_takes_an_imported_system(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    xml = str(FIXTURES / "nccl-dgx-a100.xml")
    assert main(["topo", "import", xml, "-o", "box.toml"]) == 0
    (tmp_path / "s.toml").write_text(
        '[base]\nmodel = "gpt2"\nbatch_per_gpu = 4\nfidelity = "analytic"\n'
        'system = "box.toml"\n[axes]\ngpus = [1, 8]\n'
    )
    assert main(["sweep", "s.toml", "-o", "r.jsonl", "--backend", "serial"]) == 0
    capsys.readouterr()
    rows = [json.loads(x) for x in (tmp_path / "r.jsonl").read_text().splitlines()]
    assert len(rows) == 2 and all(r["status"] == "ok" for r in rows)
