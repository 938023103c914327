"""Issue 28, item 11: the bad input a hostile new user still got through (each test failed
before its fix: a minute of work, exit 0, a temporary file's name, a Python type error, or a
``.NAME.lock`` left beside the output)."""

from __future__ import annotations

import errno
import json
import os
import time
from pathlib import Path

import pytest

from tests.cli.cli_helpers import run_cli

ROOT = Path(__file__).resolve().parents[2]
NCCL_LOG = ROOT / "tests" / "fixtures" / "nccl" / "a3mega-h100-2node-all_reduce.txt"
PRED = ["predict", "--system", "dgx1-v100", "--model", "resnet50", "--fidelity", "analytic"]


@pytest.mark.parametrize(
    "argv",
    [
        [*PRED, "--batch-per-gpu", "99999999999999999999"],
        [*PRED, "--batch-per-gpu", "2000000"],
        [*PRED, "--global-batch", "9" * 40],
        ["compare", "--system", "dgx1-v100", "--model", "resnet50", "--global-batch", "9" * 30],
        ["model", "show", "resnet50", "--batch", "9" * 25],
    ],
)
def test_huge_batch_is_refused_when_parsed(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    t0 = time.perf_counter()
    rc, err = run_cli(argv, capsys)
    assert rc == 2
    assert "batch" in err
    assert time.perf_counter() - t0 < 5.0  # 60 s and more before


def test_huge_batch_in_a_scenario_file_and_through_few_replicas(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sc = tmp_path / "s.json"
    sc.write_text(json.dumps({"system": "dgx1-v100", "model": "resnet50", "batch_per_gpu": 10**8}))
    rc, err = run_cli(["predict", str(sc), "--fidelity", "analytic"], capsys)
    assert rc == 2 and "batch_per_gpu" in err and "1048576" in err
    rc, err = run_cli([*PRED, "--global-batch", "20000000", "--gpus", "1"], capsys)
    assert rc == 2 and "per replica" in err


def test_title_length_is_capped_and_drawn_as_plain_text(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "t.png"
    rc, err = run_cli(["topo", "draw", "dgx1-v100", "-o", str(out), "--title", "x" * 300], capsys)
    assert rc == 2 and "--title" in err and "200" in err
    assert not out.exists()
    # mathtext syntax is a user's dollar sign, not a parse error (a traceback before)
    rc, _ = run_cli(["topo", "draw", "dgx1-v100", "-o", str(out), "--title", "$x^" * 20], capsys)
    assert rc == 0 and out.stat().st_size > 0


def test_whatif_option_with_nodes_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    base = ["compare", "--model", "resnet50", "--batch-per-gpu", "64", "--gpus", "1,2"]
    rc, err = run_cli([*base, "--systems", "dgx1-v100:nodes=0"], capsys)
    assert rc == 2 and "nodes" in err
    rc, err = run_cli([*base, "--systems", "dgx1-v100:nics_per_node=0"], capsys)
    assert rc == 2 and "positive" in err


@pytest.mark.parametrize("text", ["[]", "", "\n\n"])
def test_validate_with_an_empty_measurement_file_exits_2(
    text: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    m = tmp_path / "empty.json"
    m.write_text(text)
    prof = ROOT / "calibration" / "h100-sxm5-80gb.json"
    argv = ["validate", "--measurements", str(m), "--profile", str(prof), "-o", str(tmp_path / "r")]
    rc, err = run_cli(argv, capsys)
    assert rc == 2 and "no measurements" in err
    assert not (tmp_path / "r").exists()


def test_unwritable_output_is_named_by_the_users_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import tempfile

    from perfmodel._io import atomic_write

    def refuse(*args: object, **kw: object) -> tuple[int, str]:
        raise PermissionError(errno.EACCES, "Permission denied", str(tmp_path / ".c.png.x.tmp"))

    monkeypatch.setattr(tempfile, "mkstemp", refuse)
    with pytest.raises(OSError) as info, atomic_write(tmp_path / "c.png") as fh:
        fh.write("x")
    assert info.value.filename == str(tmp_path / "c.png")


def test_full_disk_is_named_by_the_users_path(tmp_path: Path) -> None:
    from perfmodel._io import atomic_write

    target = tmp_path / "p.json"
    with pytest.raises(OSError) as info, atomic_write(target):
        raise OSError(errno.ENOSPC, "No space left on device")
    assert info.value.filename == str(target)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.skipif(not Path("/sys/kernel").is_dir(), reason="no /sys/kernel")
def test_unwritable_plot_path_on_the_command_line(capsys: pytest.CaptureFixture[str]) -> None:
    rc, err = run_cli(
        [*PRED, "--batch-per-gpu", "8", "--gpus", "1,2", "--plot", "/sys/kernel/c.png"], capsys
    )
    assert rc == 2
    assert "/sys/kernel/c.png" in err and ".tmp" not in err


@pytest.mark.parametrize("arg", ["layers=1,2", "hidden=64,128"])
def test_list_value_for_an_integer_model_arg(arg: str, capsys: pytest.CaptureFixture[str]) -> None:
    rc, err = run_cli(["model", "show", "gpt", "--model-arg", arg], capsys)
    assert rc == 2
    assert "not a list" in err and "int()" not in err


def test_list_valued_model_args_still_take_lists(capsys: pytest.CaptureFixture[str]) -> None:
    rc, _ = run_cli(["model", "show", "mlp", "--model-arg", "widths=784,100,10"], capsys)
    assert rc == 0


def test_output_lock_leaves_no_companion_file(tmp_path: Path) -> None:
    from perfmodel._io import output_lock

    prof = tmp_path / "p.json"
    with output_lock(prof):
        assert (tmp_path / ".p.json.lock").exists()
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(RuntimeError), output_lock(prof):
        raise RuntimeError("the command failed")
    assert list(tmp_path.iterdir()) == []
    # a folder made for the lock alone is removed with it
    with output_lock(tmp_path / "new" / "p.json"):
        pass
    assert not (tmp_path / "new").exists()


def test_lock_removed_by_its_holder_is_not_shared(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The removal race: a process that opened the lock file just before its holder removed it
    must lock the new file at the path instead, so two holders never run at once."""
    import fcntl

    import perfmodel._io as io

    prof = tmp_path / "p.json"
    lock = tmp_path / ".p.json.lock"
    real_open = os.open
    calls = []

    def open_stale_first(path: object, flags: int, mode: int = 0o777) -> int:
        fd = real_open(path, flags, mode)
        if not calls:  # the holder removes the file right after this open
            os.unlink(lock)
        calls.append(path)
        return fd

    monkeypatch.setattr(io.os, "open", open_stale_first)
    with io.output_lock(prof):
        monkeypatch.setattr(io.os, "open", real_open)
        assert len(calls) == 2  # the stale inode was noticed and the new file locked
        fd = real_open(lock, os.O_RDWR)
        try:
            with pytest.raises(BlockingIOError):
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        finally:
            os.close(fd)
    assert not lock.exists()


def test_failed_and_successful_calibrate_leave_no_lock(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    prof = tmp_path / "p.json"
    argv = ["calibrate", "--nccl-log", str(NCCL_LOG), "--link", "infiniband", "--op", "allreduce"]
    rc, _ = run_cli([*argv, "-o", str(prof)], capsys)
    assert rc == 0 and prof.exists()
    bad = tmp_path / "bad.txt"
    bad.write_text("not an nccl-tests log\n")
    rc, _ = run_cli(
        [*argv[:1], "--nccl-log", str(bad), *argv[3:], "-o", str(tmp_path / "q.json")], capsys
    )
    assert rc == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.txt", "p.json"]
