"""A catalogue looks a name up by parsing only the entries whose text holds it (issue 14, cold
start): same specs as the whole file, errors and refusals from the whole file's checks."""

from __future__ import annotations

from pathlib import Path

import pytest

from perfmodel.errors import ConfigError, UnknownHardwareError
from perfmodel.hardware import cpus, gpus, links
from perfmodel.hardware._catalogue import Catalogue
from perfmodel.hardware.gpus import GPUSpec


def _fresh(cat: Catalogue, data: Path | None = None) -> Catalogue:
    return Catalogue(
        table=cat.table,
        kind=cat.kind,
        unknown=cat.unknown,
        command=cat.command,
        spec_type=cat.spec_type,
        parse=cat.parse,
        data=cat.data if data is None else data,
    )


@pytest.mark.parametrize("shipped", [gpus._GPUS, links._LINKS, cpus._CPUS])
def test_every_name_and_alias_without_the_whole_file(shipped: Catalogue) -> None:
    whole = shipped.read(shipped.data)
    cat = _fresh(shipped)
    for spec in whole.values():
        for name in (spec.name, *spec.aliases):
            assert cat.get(name.upper(), "test") == spec
    assert cat._loaded is None  # no whole-file parse was needed
    got = cat.get(spec.name, "test")
    assert cat.specs() == list(whole.values())
    assert cat.get(spec.name, "test") is got  # the whole file keeps the specs already returned


def test_find_and_unknown_names() -> None:
    cat = _fresh(links._LINKS)
    assert cat.find("no-such-link") is None
    assert cat._loaded is None  # a name absent from the text needs no parse
    assert cat.find("IB-HDR") == links.get_link("ib-hdr")
    with pytest.raises(UnknownHardwareError, match=r"unknown link technology 'ib-hdx'.*ib-hdr"):
        cat.get("ib-hdx", "test")
    assert links.find_link("custom") is None


def _entry(name: str, aliases: str, notes: str = "") -> str:
    return f"""
[[gpu]]
name = "{name}"
aliases = [{aliases}]
architecture = "Ampere"
form_factor = "SXM"
sm_count = 108
boost_clock_GHz = 1.41
memory_GB = 80.0
memory_bytes = 85899345920
memory_bandwidth_GBps = 2039.0
{notes}
[gpu.peak_TFLOPS]
fp32 = 19.5
[gpu.sources]
compute = "a"
memory = "b"
sm = "c"
board = "d"
"""


def test_a_duplicate_alias_is_still_refused(tmp_path: Path) -> None:
    p = tmp_path / "gpus.toml"
    p.write_text("# header\n" + _entry("X1", '"shared"') + _entry("X2", '"shared"'))
    for key in ("shared", "x1", "X2"):  # an entry one of whose names another entry quotes:
        with pytest.raises(ConfigError, match="alias 'shared' already names X1"):
            _fresh(gpus._GPUS, p).get(key, "test")  # the whole file decides


@pytest.mark.parametrize(
    ("first", "second"),
    [
        (("X1", '"a"'), ("X1", '"b"')),  # a duplicate name (review: collapsed, not refused)
        (("X1", '"a"'), ("X2", "'x1'")),  # an alias in a literal string
        (("X1", '"a"'), ("X2", '"\\u0078\\u0031"')),  # an alias spelt with escapes
    ],
)
def test_files_the_whole_read_refuses_are_refused(
    tmp_path: Path, first: tuple[str, str], second: tuple[str, str]
) -> None:
    """A name the whole read refuses is refused by the lookup too (review: a duplicate
    name returned the second entry for both its own alias and the first entry's; names in
    literal strings or escapes were not seen)."""
    p = tmp_path / "gpus.toml"
    p.write_text(_entry(*first) + _entry(*second))
    with pytest.raises(ConfigError):
        _fresh(gpus._GPUS, p).read(p)
    for key in ("x1", "a", "b", "x2"):
        with pytest.raises((ConfigError, UnknownHardwareError)):
            _fresh(gpus._GPUS, p).get(key, "test")


def test_files_the_cut_would_misread_are_parsed_whole(tmp_path: Path) -> None:
    p = tmp_path / "gpus.toml"
    notes = 'notes = """\n[[gpu]]\n"""'
    p.write_text(_entry("X1", '"a"', notes) + _entry("X2", '"b"'))
    cat = _fresh(gpus._GPUS, p)
    assert isinstance(cat.get("b", "test"), GPUSpec)
    assert cat._loaded is not None  # a multi-line string: no cut
    q = tmp_path / "gpus2.toml"
    q.write_text("title = 1\n" + _entry("X1", '"a"'))
    with pytest.raises(ConfigError, match="unknown top-level key"):
        _fresh(gpus._GPUS, q).get("x1", "test")
