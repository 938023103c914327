"""``read_server_file`` parses a file's text once: unchanged text is answered from memory, edited
text is parsed again whatever the file's timestamps say."""

from __future__ import annotations

import os
import shutil

import pytest

from perfmodel.errors import PerfModelError
from perfmodel.topology.builders import system_path
from perfmodel.topology.files import read_server_file


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
    p.write_text(p.read_text().replace(f'name = "{a.name}"', 'name = "edited box"', 1))
    b = read_server_file(p)
    assert b is not a and b.name == "edited box"


def test_same_size_edit_with_the_old_timestamp_is_read_again(tmp_path):
    # a rewrite inside one timestamp tick (coarse-timestamp file systems): same size, same mtime
    p = _copy(tmp_path)
    a = read_server_file(p)
    st = p.stat()
    p.write_text(p.read_text().replace(f'"{a.name}"', '"' + "X" * len(a.name) + '"', 1))
    os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert p.stat().st_size == st.st_size
    assert read_server_file(p).name == "X" * len(a.name)


def test_broken_edit_is_refused_not_served_from_memory(tmp_path):
    p = _copy(tmp_path)
    read_server_file(p)
    p.write_text("this is [not toml")
    with pytest.raises(PerfModelError, match="invalid TOML"):
        read_server_file(p)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs os.mkfifo")
def test_not_a_regular_file_is_refused(tmp_path):
    fifo = tmp_path / "fifo.toml"
    os.mkfifo(fifo)
    with pytest.raises(PerfModelError):
        read_server_file(fifo)
