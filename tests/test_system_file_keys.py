"""A system file is its content, not its name: the caches it feeds (the topology, the speedup
baselines, whole reports) key on its real path, time and size (``_io.system_file_stamp``).
Found in session 15: ``predict --system box.toml`` in another folder, or after the file was
edited in place, answered with the first file's machine (8 GPUs on two 4-GPU servers where the
new box has 8 per server)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from perfmodel._io import system_file_stamp
from perfmodel.cli import main

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "topology"
IMPORTS = {
    "dgx1": ["smi-dgx1-v100.txt", "--gpu", "V100-SXM2-16GB"],  # 8 GPUs a server
    "pcie4": ["smi-pcie-4gpu.txt", "--gpu", "V100-PCIE-16GB"],  # 4 GPUs a server
}
PREDICT = ["predict", "--system", "box.toml", "--nodes", "2", "--network", "ib-edr"]
PREDICT += ["--model", "gpt2", "--batch-per-gpu", "8", "--precision", "fp16"]
PREDICT += ["--fidelity", "analytic", "--json"]


def _import(folder: Path, which: str, capsys: pytest.CaptureFixture[str]) -> None:
    name, *gpu = IMPORTS[which]
    argv = ["topo", "import", str(FIXTURES / name), *gpu, "-o", str(folder / "box.toml")]
    assert main([*argv, "--force"]) == 0
    capsys.readouterr()


def _gpus(capsys: pytest.CaptureFixture[str]) -> int:
    assert main(PREDICT) == 0
    return int(json.loads(capsys.readouterr().out)["num_gpus"])


def test_the_same_name_in_another_folder_is_another_system(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for which in ("pcie4", "dgx1"):
        (tmp_path / which).mkdir()
        _import(tmp_path / which, which, capsys)
    monkeypatch.chdir(tmp_path / "pcie4")
    assert _gpus(capsys) == 8  # two 4-GPU servers
    monkeypatch.chdir(tmp_path / "dgx1")
    assert _gpus(capsys) == 16  # two 8-GPU servers (was 8: the first box.toml's machine)
    # and its speedup divides by its own 1-GPU baseline, as a fresh process computes it (a
    # baseline keyed without the file's stamp gave 14.99 for 13.99: the other folder's)
    assert main(PREDICT) == 0
    speedup = json.loads(capsys.readouterr().out)["speedup"]
    fresh = subprocess.run(
        [sys.executable, "-m", "perfmodel", *PREDICT],
        cwd=tmp_path / "dgx1",
        capture_output=True,
        text=True,
        check=True,
    )
    assert speedup == json.loads(fresh.stdout)["speedup"]


def test_a_file_edited_in_place_is_read_again(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    _import(tmp_path, "pcie4", capsys)
    assert _gpus(capsys) == 8
    before = system_file_stamp("box.toml")
    _import(tmp_path, "dgx1", capsys)  # the same name, another machine
    assert system_file_stamp("box.toml") != before
    assert _gpus(capsys) == 16


def test_stamp_of_names_and_files(tmp_path: Path) -> None:
    """A catalogue name or a missing file has no stamp; a file's is its real path, time, size."""
    assert system_file_stamp("dgx-h100") is None
    assert system_file_stamp(str(tmp_path / "absent.toml")) is None
    src = Path(__file__).resolve().parents[1] / "topologies" / "dgx-h100.toml"
    shutil.copy(src, tmp_path / "mine.TOML")
    path, _ns, size = system_file_stamp(str(tmp_path / "mine.TOML"))
    assert path == str((tmp_path / "mine.TOML").resolve()) and size == src.stat().st_size


def test_file_stamp_tells_the_same_name_in_another_folder_apart(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One stamp for every file a cache keys on (``_io.file_stamp``: real path, time, size): a
    calibration profile of the same relative name, time and size in another folder is read
    again (the modification time alone served the first folder's profile)."""
    import os
    from types import SimpleNamespace

    import perfmodel.calibration.profile as profile
    from perfmodel._io import file_stamp
    from perfmodel.pipeline.inputs import host_only_profile

    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "prof.json").write_text(f"{{{name!r}: 1}}")
        os.utime(tmp_path / name / "prof.json", ns=(1_000_000_000, 1_000_000_000))
    read: list[str] = []

    def fake_read_profile(path: str) -> SimpleNamespace:
        read.append(os.path.realpath(path))
        return SimpleNamespace(measurements=())

    monkeypatch.setattr(profile, "read_profile", fake_read_profile)
    stamps = []
    for name in ("a", "b"):
        monkeypatch.chdir(tmp_path / name)
        stamps.append(file_stamp("prof.json"))
        host_only_profile("prof.json")
    assert stamps[0] != stamps[1] and stamps[0][1:] == stamps[1][1:]
    assert read == [str((tmp_path / n / "prof.json").resolve()) for n in ("a", "b")]
    assert file_stamp(str(tmp_path / "absent.json")) is None


def test_comm_validation_model_reads_an_edited_system_file_again(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``comm.validation._model`` (``compare()``, the intervals' residuals; a ``validate
    --published DIR`` row may name a ``.toml``) keys on the system file's stamp: the same name
    edited into another machine is another model (the name alone served the 4-GPU box)."""
    from perfmodel.comm.validation import _model

    monkeypatch.chdir(tmp_path)
    _import(tmp_path, "pcie4", capsys)
    assert len(_model("box.toml", 1, None, None).topology.gpus) == 4
    _import(tmp_path, "dgx1", capsys)
    assert len(_model("box.toml", 1, None, None).topology.gpus) == 8
