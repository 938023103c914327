import json

import pytest

from perfmodel._io import atomic_write, load_structured, parse_json, write_json_atomic
from perfmodel.errors import CalibrationError, ConfigError


def test_atomic_write_leaves_nothing_on_error(tmp_path):
    target = tmp_path / "out.json"
    target.write_text("old")
    with pytest.raises(RuntimeError), atomic_write(target) as fh:
        fh.write("half")
        raise RuntimeError("boom")
    assert target.read_text() == "old"
    assert list(tmp_path.iterdir()) == [target]


def test_write_json_atomic_roundtrip(tmp_path):
    target = tmp_path / "r.json"  # no folder is made (audit15 item 12: test_output_parent_missing)
    write_json_atomic(target, {"a": 1})
    assert json.loads(target.read_text()) == {"a": 1}


def test_load_structured_errors_name_the_file(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("a = [")
    with pytest.raises(ConfigError) as info:
        load_structured(bad)
    assert "bad.toml" in str(info.value)
    with pytest.raises(ConfigError):
        load_structured(tmp_path / "missing.toml")
    other = tmp_path / "x.ini"
    other.write_text("")
    with pytest.raises(ConfigError) as info:
        load_structured(other)
    assert ".ini" in str(info.value)


def test_bad_json_names_the_file_with_the_callers_error(tmp_path):
    """One JSON reader (``parse_json``) for ``load_structured`` and the typed loaders that
    raise their own error class; the text names the file, the reason, line and column."""
    bad = tmp_path / "bad.json"
    bad.write_text('{"a": 1,}')
    with pytest.raises(ConfigError) as info:
        load_structured(bad)
    assert str(info.value).startswith(f"{bad}: invalid JSON: ") and "line 1 column 9" in str(
        info.value
    )
    assert info.value.where == info.value.value == str(bad)
    with pytest.raises(CalibrationError, match=r"p\.json: invalid JSON"):
        parse_json(b"[1,", "p.json", error=CalibrationError)
    assert parse_json(b'{"a": [1]}', bad) == {"a": [1]}


def test_atomic_write_respects_umask(tmp_path):
    import os

    target = tmp_path / "perm.txt"
    old = os.umask(0o022)
    try:
        with atomic_write(target) as fh:
            fh.write("x")
    finally:
        os.umask(old)
    assert (target.stat().st_mode & 0o777) == 0o644


def test_umask_is_read_without_changing_it(monkeypatch):
    """Reading the umask must not set it, even briefly, where the OS reports it (threads)."""
    import os

    from perfmodel import _io

    if not os.path.exists("/proc/self/status"):
        import pytest

        pytest.skip("no /proc on this OS: the locked set-and-restore path is used")
    calls = []
    real = os.umask
    monkeypatch.setattr(os, "umask", lambda m: calls.append(m) or real(m))
    old = real(0o027)
    try:
        assert _io._umask() == 0o027
        assert calls == []
    finally:
        real(old)
