"""``read_server_file`` answers a file read before from memory only while the file is unchanged."""

from __future__ import annotations

import os
import shutil

import pytest

from perfmodel.errors import PerfModelError
from perfmodel.topology.builders import system_path
from perfmodel.topology.io import read_server_file


def _copy(tmp_path):
    dst = tmp_path / "box.toml"
    shutil.copyfile(system_path("dgx-a100"), dst)
    return dst


def test_unchanged_file_is_parsed_once(tmp_path):
    p = _copy(tmp_path)
    a = read_server_file(p)
    assert read_server_file(p) is a
    assert read_server_file(p, gpu_override="A100-SXM4-40GB") is not a  # another question


def test_edited_file_is_read_again(tmp_path):
    p = _copy(tmp_path)
    a = read_server_file(p)
    text = p.read_text()
    p.write_text(text.replace(f'name = "{a.name}"', 'name = "edited box"', 1))
    st = p.stat()
    os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))  # a later edit
    b = read_server_file(p)
    assert b is not a and b.name == "edited box"


def test_broken_edit_is_refused_not_served_from_memory(tmp_path):
    p = _copy(tmp_path)
    read_server_file(p)
    p.write_text("this is [not toml")
    with pytest.raises(PerfModelError, match="invalid TOML"):
        read_server_file(p)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs os.mkfifo")
def test_not_a_regular_file_is_not_remembered(tmp_path):
    fifo = tmp_path / "fifo.toml"
    os.mkfifo(fifo)
    with pytest.raises(PerfModelError):
        read_server_file(fifo)
