"""Bad topology files: one clear error naming the file, the element and the value."""

from __future__ import annotations

from pathlib import Path

import pytest

from perfmodel.cli import main
from perfmodel.errors import ConfigError, TopologyError
from perfmodel.topology import load_system

GOOD = """
[system]
name = "tiny"
description = "two GPUs on one PCIe switch"
sources = ["test"]
gpu = "V100-PCIE-16GB"
[system.fabric]
network = "ib-edr"

[[node]]
id = "cpu0"
kind = "cpu"
[[node]]
id = "sw0"
kind = "pcie_switch"
[[node]]
id = "gpu0"
kind = "gpu"
[[node]]
id = "gpu1"
kind = "gpu"
[[node]]
id = "nic0"
kind = "nic"

[[link]]
a = "cpu0"
b = "sw0"
tech = "pcie3-x16"
[[link]]
a = "sw0"
b = "gpu0"
tech = "pcie3-x16"
[[link]]
a = "sw0"
b = "gpu1"
tech = "pcie3-x16"
[[link]]
a = "cpu0"
b = "nic0"
tech = "pcie3-x16"
"""


def _write(tmp_path: Path, text: str, name: str = "tiny.toml") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def test_good_file_loads(tmp_path):
    t = load_system(str(_write(tmp_path, GOOD)), nodes=2)
    assert t.num_gpus == 4


@pytest.mark.parametrize(
    ("mutate", "needles"),
    [
        # corrupt TOML
        (lambda s: s.replace('kind = "nic"', 'kind = "nic'), ["tiny.toml", "invalid TOML"]),
        # incomplete: a link without 'b'
        (lambda s: s.replace('b = "nic0"\n', ""), ["tiny.toml", "link[3]", "'a' and 'b'"]),
        # unknown GPU model
        (lambda s: s.replace("V100-PCIE-16GB", "V200-PCIE"), ["tiny.toml", "gpu0", "V200-PCIE"]),
        # negative bandwidth (explicit numbers)
        (
            lambda s: s.replace(
                'a = "sw0"\nb = "gpu1"\ntech = "pcie3-x16"',
                'a = "sw0"\nb = "gpu1"\nbandwidth_GBps = -3.0\nlatency_us = 1.0',
            ),
            ["tiny.toml", "link[2]", "sw0-gpu1", "-3"],
        ),
        # the link numbers' rule (hardware.links.check_link_numbers, as for a catalogue entry)
        (
            lambda s: s.replace(
                'b = "gpu1"\ntech = "pcie3-x16"', 'b = "gpu1"\ntech = "pcie3-x16"\nefficiency = 1.5'
            ),
            ["tiny.toml", "link[2]", "sw0-gpu1", "efficiency 1.5 outside (0, 1]"],
        ),
        (
            lambda s: s.replace(
                'b = "gpu1"\ntech = "pcie3-x16"',
                'b = "gpu1"\ntech = "pcie3-x16"\nlatency_us = -1.0',
            ),
            ["tiny.toml", "link[2]", "sw0-gpu1", "negative latency -1e-06 s"],
        ),
        # unknown key
        (
            lambda s: s.replace('kind = "pcie_switch"', 'kind = "pcie_switch"\nspeed = 3'),
            ["tiny.toml", "node[1]", "speed"],
        ),
        # duplicate id
        (
            lambda s: s.replace('id = "gpu1"', 'id = "gpu0"'),
            ["tiny.toml", "node[3]", "duplicate", "gpu0"],
        ),
        # unknown node kind
        (
            lambda s: s.replace('kind = "pcie_switch"', 'kind = "plx"'),
            ["tiny.toml", "node[1]", "plx"],
        ),
        # unknown link technology
        (
            lambda s: s.replace('b = "nic0"\ntech = "pcie3-x16"', 'b = "nic0"\ntech = "pcie9-x16"'),
            ["tiny.toml", "link[3]", "pcie9-x16"],
        ),
        # link to an undeclared node
        (lambda s: s.replace('b = "nic0"', 'b = "nic9"'), ["tiny.toml", "link[3]", "nic9"]),
    ],
)
def test_bad_file_error_names_file_element_value(tmp_path, mutate, needles):
    path = _write(tmp_path, mutate(GOOD))
    with pytest.raises(ConfigError) as err:
        load_system(str(path))
    msg = str(err.value)
    for needle in needles:
        assert needle in msg, (needle, msg)


def test_disconnected_gpu(tmp_path):
    text = GOOD.replace('[[link]]\na = "sw0"\nb = "gpu1"\ntech = "pcie3-x16"\n', "")
    with pytest.raises(TopologyError) as err:
        load_system(str(_write(tmp_path, text)))
    msg = str(err.value)
    assert "tiny.toml" in msg and "gpu1" in msg and "disconnected" in msg


def test_cli_reports_one_line_exit_2_no_traceback(tmp_path, capsys):
    path = _write(tmp_path, GOOD.replace("V100-PCIE-16GB", "V200-PCIE"))
    rc = main(["topo", "show", str(path)])
    err = capsys.readouterr().err
    assert rc == 2
    assert err.count("\n") == 1 and "Traceback" not in err
    assert "tiny.toml" in err and "V200-PCIE" in err


def test_duplicate_local_id_in_one_server_is_refused() -> None:
    """Two nodes of one server with one local id (``n1/gpu1`` renamed ``gpu0``): the server's
    local-id table can hold only one of them, so the graph is refused naming both nodes."""
    from perfmodel.topology.schema import validate_graph

    g = load_system("dgx1-v100", nodes=2).graph.copy()
    validate_graph(g, source="dgx1-v100 x2")  # the catalogue's graph passes
    g.nodes["n1/gpu1"]["local_id"] = "gpu0"
    with pytest.raises(TopologyError, match=r"'n1/gpu0' and 'n1/gpu1' share local id 'gpu0'"):
        validate_graph(g, source="dgx1-v100 x2")


@pytest.mark.parametrize(
    ("attribute", "needle"),
    [
        ("server", "has server {bad!r}, not an integer index"),
        ("gpu_index", "has gpu_index {bad!r}, not an integer"),
        ("count", "has count {bad!r}, not an integer >= 1"),
    ],
)
@pytest.mark.parametrize("bad", [True, 0.0, "0", None])
def test_integer_attributes_share_one_test(attribute: str, needle: str, bad: object) -> None:
    """``server``, ``gpu_index`` and ``count`` go through the one integer test of the schema
    (``_is_integer``): a boolean, a float, text or ``None`` is refused naming the attribute and
    the value, while a NumPy integer (what an array-built graph holds) passes."""
    import re

    import numpy as np

    from perfmodel.topology.schema import validate_graph

    g = load_system("dgx1-v100").graph.copy()
    data = g.edges["gpu0", "gpu1"] if attribute == "count" else g.nodes["gpu0"]
    data[attribute] = np.int64(data[attribute])
    validate_graph(g, source="dgx1-v100")
    data[attribute] = bad
    with pytest.raises(TopologyError, match=re.escape(needle.format(bad=bad))):
        validate_graph(g, source="dgx1-v100")


@pytest.mark.parametrize(
    ("edit", "message", "value"),
    [
        (lambda g: g.nodes["gpu0"].update(kind="gpu"), "node 'gpu0' has kind 'gpu'", "gpu"),
        (
            lambda g: g.edges["gpu0", "gpu1"].update(efficiency=1.5),
            "link gpu0-gpu1 has efficiency 1.5 outside (0, 1]",
            1.5,
        ),
    ],
)
def test_graph_check_error_names_source_and_bad_value(edit, message: str, value: object) -> None:
    """Every check of the schema raises one form of error (``_graph_error``): the message
    starts with the source, ``where`` is the source and ``value`` the bad value."""
    from perfmodel.topology.schema import validate_graph

    g = load_system("dgx1-v100").graph.copy()
    edit(g)
    with pytest.raises(TopologyError) as err:
        validate_graph(g, source="my graph")
    assert err.value.args[0].startswith(f"my graph: {message}")
    assert err.value.where == "my graph"
    assert err.value.value == value
