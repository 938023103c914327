"""A reader that closes the pipe early (``perfmodel hw gpus | head -1``) gets no traceback."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_closed_pipe_ends_quietly_with_the_sigpipe_status() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "perfmodel", "--quiet", "hw", "gpus"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # the reader goes away before the interpreter has even started

    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 141  # 128 + SIGPIPE, as a shell reports; 1 is a bug
    assert "Traceback" not in err and "BrokenPipeError" not in err
