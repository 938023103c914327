"""Every JSON file reader goes through ``_io.parse_json`` with its own error class (issue 29):
a file that is not JSON gives that typed error naming the file (``value`` and ``where`` the
path; a JSONL measurements file names the line too), the JSON reason with line and column, and
exit status 2 with one line on stderr from the command that reads it."""

import gzip
from collections.abc import Callable
from pathlib import Path

import pytest

from perfmodel.calibration.kineto import read_trace_json
from perfmodel.calibration.profile import read_profile
from perfmodel.calibration.validate import load_measurements
from perfmodel.cli import main
from perfmodel.comm.nccl_tests import read_nccl_tests
from perfmodel.errors import CalibrationError, ParseError, PerfModelError
from perfmodel.topology.importers import import_topology

# name: (file name, bad text, the reader, its error class, the command reading the file)
CASES: dict[str, tuple[str, str, Callable, type[PerfModelError], list[str]]] = {
    "profile": (
        "prof.json",
        '{"format_version": 1, "x": ',
        read_profile,
        CalibrationError,
        ["validate", "--profile", "{f}", "-o", "{d}/out"],
    ),
    "measurements list": (
        "meas.json",
        '[{"a": 1},',
        load_measurements,
        CalibrationError,
        ["validate", "--measurements", "{f}", "-o", "{d}/out"],
    ),
    "topology": (
        "topo.json",
        '{"topology": ',
        import_topology,
        ParseError,
        ["topo", "import", "{f}"],
    ),
    "nccl-tests -J": (
        "nccl.json",
        '{"op": "allreduce", ',
        read_nccl_tests,
        ParseError,
        ["comm", "--system", "dgx-h100", "--compare", "{f}"],
    ),
    "kineto trace": (
        "trace.json",
        '{"traceEvents": [',
        read_trace_json,
        ParseError,
        ["model", "import-chakra", "{f}"],
    ),
}


def _write(tmp_path: Path, name: str, text: str) -> Path:
    f = tmp_path / name
    f.write_text(text)
    return f


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_bad_json_file_gives_the_readers_typed_error(case: str, tmp_path: Path) -> None:
    name, text, reader, error, _ = CASES[case]
    f = _write(tmp_path, name, text)
    with pytest.raises(PerfModelError) as info:
        reader(f)
    assert type(info.value) is error
    assert str(info.value).startswith(f"{f}: invalid JSON: ")
    assert "line 1 column" in str(info.value)
    assert info.value.value == info.value.where == str(f)


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_command_reading_a_bad_json_file_exits_2(
    case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    name, text, _, _, argv = CASES[case]
    f = _write(tmp_path, name, text)
    assert main([a.format(f=f, d=tmp_path) for a in argv]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"perfmodel: error: {f}: invalid JSON: ") and "line 1 column" in err
    assert len(err.splitlines()) == 1


def test_a_gzipped_trace_is_named_by_its_own_file(tmp_path: Path) -> None:
    f = tmp_path / "trace.json.gz"
    f.write_bytes(gzip.compress(b'{"traceEvents": ['))
    with pytest.raises(ParseError, match=r"trace\.json\.gz: invalid JSON: .*line 1 column 18"):
        read_trace_json(f)


def test_a_bad_jsonl_measurement_line_is_named_by_its_number(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    f = _write(tmp_path, "meas.jsonl", '{"a": 1}\n\n{bad\n')
    with pytest.raises(CalibrationError) as info:
        load_measurements(f)
    assert str(info.value).startswith(f"{f}:3: invalid JSON: ")
    assert info.value.value == info.value.where == f"{f}:3"
    assert main(["validate", "--measurements", str(f), "-o", str(tmp_path / "out")]) == 2
    assert f"{f}:3: invalid JSON" in capsys.readouterr().err
