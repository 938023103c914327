"""`perfmodel hw ...`: tables, JSON in SI units, show with sources, exit codes."""

from __future__ import annotations

import json

import pytest

from perfmodel.cli import main
from perfmodel.hardware import list_cpus, list_gpus, list_links


@pytest.mark.parametrize(
    ("what", "names"),
    [
        ("gpus", lambda: [g.name for g in list_gpus()]),
        ("links", lambda: [lk.name for lk in list_links()]),
        ("cpus", lambda: [c.name for c in list_cpus()]),
    ],
)
def test_tables_list_every_entry(capsys, what: str, names) -> None:
    assert main(["hw", what]) == 0
    out = capsys.readouterr().out
    for name in names():
        assert name in out


def test_gpus_json_in_si_units(capsys) -> None:
    assert main(["hw", "gpus", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    h100 = next(r for r in rows if r["name"] == "H100-SXM5-80GB")
    assert h100["peak_flops"]["bf16"] == pytest.approx(989.4e12)
    assert h100["memory_bytes"] == 80 * 2**30
    assert h100["sources"]["compute"]


def test_links_and_cpus_json(capsys) -> None:
    assert main(["hw", "links", "--json"]) == 0
    links = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    assert links["eth-40g"]["bandwidth_Bps"] == pytest.approx(5e9)
    assert main(["hw", "cpus", "--json"]) == 0
    cpus = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    assert cpus["host-cpu"]["sockets"] == 1


@pytest.mark.parametrize(
    ("name", "expect"),
    [
        ("v100", "V100-SXM2-16GB"),
        ("edr", "ib-edr"),
        ("power9", "power9-20c"),
        ("PCIE3", "pcie3-x16"),
    ],
)
def test_show_any_kind_with_sources(capsys, name: str, expect: str) -> None:
    assert main(["hw", "show", name]) == 0
    out = capsys.readouterr().out
    assert expect in out and "sources" in out


def test_show_json(capsys) -> None:
    assert main(["hw", "show", "nvlink4", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["kind"] == "link" and data["bandwidth_Bps"] == pytest.approx(25e9)


def test_show_unknown_is_one_line_exit_2(capsys) -> None:
    assert main(["hw", "show", "H100-SXM5-80G"]) == 2
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert captured.out == ""
    assert len(err.splitlines()) == 1
    assert "'H100-SXM5-80G'" in err and "H100-SXM5-80GB" in err
    assert "Traceback" not in err


def test_bare_hw_is_usage_error(capsys) -> None:
    assert main(["hw"]) == 2
    assert "gpus" in capsys.readouterr().err


def test_unknown_subcommand_exits_2() -> None:
    with pytest.raises(SystemExit) as info:
        main(["hw", "fpgas"])
    assert info.value.code == 2
