"""An output file in a folder that does not exist is a typed error naming the folder, exit 2,
and no folder is made (audit15 item 12: ``--trace /nonexistent/x.json`` created
``/nonexistent/``); an output folder is still made with its parents."""

from __future__ import annotations

from pathlib import Path

import pytest

from perfmodel._io import atomic_write, check_output_path
from perfmodel.cli import main
from perfmodel.errors import FileAccessError

PREDICT = ["predict", "--system", "dgx-h100", "--model", "gpt2", "--batch-per-gpu", "8"]
PREDICT += ["--fidelity", "analytic"]


@pytest.mark.parametrize(
    "argv",
    [
        [*PREDICT, "--trace", "{d}/x.json"],
        [*PREDICT, "--gantt", "{d}/g.png"],
        ["sweep", "{spec}", "-o", "{d}/o.jsonl"],
    ],
)
def test_output_file_in_a_missing_folder_is_refused(
    tmp_path: Path, argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    spec = tmp_path / "s.toml"
    spec.write_text('[base]\nmodel = "gpt2"\nbatch_per_gpu = 8\nsystem = "dgx-h100"\n')
    missing = tmp_path / "no" / "such"
    args = [a.format(d=missing, spec=spec) for a in argv]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert f"folder {missing} does not exist" in err
    assert not (tmp_path / "no").exists()


def test_atomic_write_makes_no_folder(tmp_path: Path) -> None:
    target = tmp_path / "new" / "f.txt"
    with pytest.raises(FileAccessError, match=f"folder {tmp_path / 'new'} does not exist"):
        with atomic_write(target) as fh:
            fh.write("x")
    assert not (tmp_path / "new").exists()


def test_output_folder_is_still_made(tmp_path: Path) -> None:
    out = tmp_path / "a" / "b"
    check_output_path(out, where="--chakra", directory=True)
    assert main([*PREDICT, "--chakra", str(out)]) == 0
    assert any(out.glob("perfmodel.*.et"))
