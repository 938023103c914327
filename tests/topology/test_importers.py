"""Importers: nvidia-smi text and NCCL XML fixtures, JSON export/import round trip."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import networkx as nx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from perfmodel.errors import ParseError, TopologyError
from perfmodel.topology import load_system, path_bandwidth
from perfmodel.topology.analysis import bandwidth_matrix, smi_matrix
from perfmodel.topology.custom import custom_system
from perfmodel.topology.export import export_dict, from_dict
from perfmodel.topology.importers import _parse_smi_matrix as parse_smi
from perfmodel.topology.importers import (
    detect_format,
    from_nccl_xml,
    from_smi_text,
    import_topology,
)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "topology"

SMI_CASES = [
    ("smi-dgx1-v100.txt", "V100-SXM2-16GB"),
    ("smi-pcie-4gpu.txt", "V100-PCIE-16GB"),
    ("smi-pcie-8gpu-phb.txt", "TITAN-X-PASCAL"),
    ("smi-dgx2.txt", "V100-SXM3-32GB"),
    ("smi-dgx-a100-nps4.txt", "A100-SXM4-80GB"),
]


@pytest.mark.parametrize(("fixture", "gpu"), SMI_CASES)
def test_smi_import_reproduces_every_pair_class(fixture, gpu):
    """The rebuilt graph gives back the class of every device pair of the input."""
    path = FIXTURES / fixture
    text = path.read_text()
    devs, cls, _ = parse_smi(text, str(path))
    topo = import_topology(path, gpu=gpu)
    labels, rows = smi_matrix(topo)
    assert len(labels) == len(devs)
    for i, a in enumerate(devs):
        for j, b in enumerate(devs):
            assert rows[i][j] == cls[a, b], (a, b)
    assert not any("not reproduced" in a for a in topo.meta["assumptions"])


def test_smi_dgx1_import_has_the_catalogue_bandwidths():
    imported = import_topology(FIXTURES / "smi-dgx1-v100.txt", gpu="V100-SXM2-16GB")
    catalogue = load_system("dgx1-v100")
    assert (bandwidth_matrix(imported) == bandwidth_matrix(catalogue)).all()


def test_smi_nvswitch_detection_and_pcie_box_classes():
    dgx2 = import_topology(FIXTURES / "smi-dgx2.txt", gpu="V100-SXM3-32GB")
    assert dgx2.graph.edges["gpu0", "nvswitch0"]["count"] == 6  # NV6 x 15 peers > 6 links
    box = import_topology(FIXTURES / "smi-pcie-4gpu.txt", gpu="V100-PCIE-16GB")
    assert box.graph.has_edge("cpu1", "gpu2") and box.graph.has_edge("cpu1", "gpu3")  # PHB
    assert path_bandwidth(box, "gpu0", "gpu1") == pytest.approx(12.918e9, rel=1e-3)  # PIX


def test_nccl_xml_dgx1_matches_catalogue_classes_and_bandwidths():
    topo = import_topology(FIXTURES / "nccl-dgx1-v100.xml")
    cat = load_system("dgx1-v100")
    assert smi_matrix(topo)[1] == smi_matrix(cat)[1]
    assert (bandwidth_matrix(topo) == bandwidth_matrix(cat)).all()
    assert topo.fabric is not None and topo.fabric.network == "ib-edr"
    assert topo.fabric.nics_per_node == 4
    assert any("sm=70" in a for a in topo.meta["assumptions"])


def test_nccl_xml_dgx_a100_aggregates_nvswitch_ports():
    topo = import_topology(FIXTURES / "nccl-dgx-a100.xml")
    assert topo.gpu_spec().name == "A100-SXM4-80GB"
    assert topo.graph.edges["gpu3", "nvswitch0"]["count"] == 12  # 6 switches x 2 links
    bws = {path_bandwidth(topo, a, b) for a, b in itertools.permutations(topo.gpus, 2)}
    assert bws == {12 * 22.5e9}
    labels, rows = smi_matrix(topo)
    assert rows[0][labels.index("NIC0")] == "PXB"  # GPU0 and its NICs under one switch complex
    assert topo.fabric.network == "ib-hdr"


def test_nccl_xml_gpu_override_and_errors(tmp_path):
    text = (FIXTURES / "nccl-dgx1-v100.xml").read_text()
    topo = from_nccl_xml(text, gpu="V100-SXM2-32GB")
    assert topo.gpu_spec().name == "V100-SXM2-32GB"
    bad = tmp_path / "broken.xml"
    bad.write_text(text[: len(text) // 2])
    with pytest.raises(ParseError, match=r"broken\.xml"):
        import_topology(bad)
    with pytest.raises(ParseError, match="no <gpu>"):
        from_nccl_xml('<system version="1"><cpu numaid="0"/></system>', source="x.xml")


def test_smi_errors_name_file_row_column_and_value(tmp_path):
    text = (FIXTURES / "smi-pcie-4gpu.txt").read_text()
    with pytest.raises(ParseError, match="--gpu"):
        from_smi_text(text, gpu=None)
    bad = tmp_path / "topo.txt"
    bad.write_text(text.replace("\tPIX", "\tPQX", 1))  # first matrix cell PIX (GPU0/GPU1)
    with pytest.raises(ParseError) as err:
        import_topology(bad, gpu="V100-PCIE-16GB")
    msg = str(err.value)
    assert "topo.txt" in msg and "GPU0" in msg and "GPU1" in msg and "PQX" in msg
    asym = tmp_path / "asym.txt"
    lines = text.splitlines()
    row = next(i for i, ln in enumerate(lines) if ln.startswith("GPU1"))
    lines[row] = lines[row].replace("SYS", "PHB", 1)  # row GPU1, column GPU2
    asym.write_text("\n".join(lines))
    with pytest.raises(ParseError, match="not symmetric"):
        import_topology(asym, gpu="V100-PCIE-16GB")
    junk = tmp_path / "junk.txt"
    junk.write_text("hello\n")
    with pytest.raises(ParseError, match="cannot tell the format"):
        import_topology(junk)


def test_detect_format():
    assert detect_format('{"a": 1}') == "json"
    assert detect_format('<?xml version="1.0"?>\n<system version="1"></system>') == "nccl-xml"
    assert detect_format((FIXTURES / "smi-dgx2.txt").read_text()) == "smi"


# --- round trip: what `topo show --json` exports imports back to the same graph ----------------


def _same_graph(a: nx.Graph, b: nx.Graph) -> bool:
    return nx.utils.graphs_equal(a, b)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    choice=st.one_of(
        st.tuples(
            st.just("catalogue"),
            st.sampled_from(
                ["dgx1-v100", "ibm-ac922-4xv100", "dgx-a100", "pcie-8x-server", "dgx2-v100"]
            ),
            st.sampled_from([1, 2, 3]),
        ),
        st.tuples(
            st.just("custom"),
            st.sampled_from(
                [
                    ("V100-SXM2-16GB", "nvlink2"),
                    ("A100-SXM4-80GB", "nvswitch-v2"),
                    ("RTX-3090", "pcie4"),
                    ("H100-SXM5-80GB", "nvswitch-v3"),
                ]
            ),
            st.integers(min_value=1, max_value=6),
        ),
    )
)
def test_export_import_round_trip(choice):
    if choice[0] == "catalogue":
        topo = load_system(choice[1], nodes=choice[2])
    else:
        (gpu, intra), gpn = choice[1], choice[2]
        topo = custom_system(gpu, gpn, intra, network="ib-hdr", nodes=2)
    text = json.dumps(export_dict(topo))
    back = from_dict(json.loads(text))
    assert _same_graph(topo.graph, back.graph)
    assert back.gpus == topo.gpus and back.num_nodes == topo.num_nodes
    assert back.fabric == topo.fabric


def test_json_import_errors_name_the_element(tmp_path):
    data = export_dict(load_system("dgx1-v100"))
    data["links"][3]["bandwidth_Bps"] = -5.0
    p = tmp_path / "neg.json"
    p.write_text(json.dumps(data))
    with pytest.raises(TopologyError) as err:
        import_topology(p)
    assert "neg.json" in str(err.value) and "-5.0" in str(err.value)
    data = export_dict(load_system("dgx1-v100"))
    data["nodes"][0]["colour"] = "red"
    p.write_text(json.dumps(data))
    with pytest.raises(TopologyError, match=r"nodes\[0\].*colour"):
        import_topology(p)
    p.write_text(json.dumps({"format": "something-else"}))
    with pytest.raises(ParseError, match="not a perfmodel topology"):
        import_topology(p)


def test_smi_numa_nodes_gpu_numa_id_column_and_nic_legend():
    """DGX A100 in NPS4: one CPU node per NUMA node (GPU pairs across NUMA nodes are SYS even on
    one socket); the 'GPU NUMA ID' column is skipped and NICs keep their mlx5 names."""
    topo = import_topology(FIXTURES / "smi-dgx-a100-nps4.txt", gpu="A100-SXM4-80GB")
    assert sorted(topo.nodes_of_kind(topo.graph.nodes["cpu3"]["kind"])) == [
        "cpu1",
        "cpu3",
        "cpu5",
        "cpu7",
    ]
    assert topo.graph.nodes["nic0"]["label"] == "mlx5_0"
    assert path_bandwidth(topo, "gpu0", "gpu7") == pytest.approx(12 * 22.5e9)
