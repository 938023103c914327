"""The catalogue: every system loads, is connected, states its sources; golden pair bandwidths."""

from __future__ import annotations

import itertools

import pytest

from perfmodel.catalogue import topologies_dir
from perfmodel.topology import list_systems, load_system, path_bandwidth, route
from perfmodel.topology.files import read_server_file
from perfmodel.topology.schema import NodeKind

REQUIRED = {
    "asus-z10pe-2x1080ti",
    "ibm-ac922-4xv100",
    "dell-c4140-4xv100",
    "dgx1-p100",
    "dgx1-v100",
    "dgx2-v100",
    "dgx-a100",
    "dgx-h100",
    "hgx-h200",
    "dgx-b200",
    "pcie-8x-server",
    "pcie-8xtitanx",
}


def test_catalogue_has_every_required_system():
    assert REQUIRED <= set(list_systems())


@pytest.mark.parametrize("name", sorted(REQUIRED))
def test_file_states_name_sources_and_default_fabric(name):
    desc = read_server_file(topologies_dir() / f"{name}.toml")
    assert desc.name == name
    assert desc.sources, f"{name} lists no sources"
    assert desc.fabric is not None, f"{name} has no [system.fabric]"
    assert any(n.kind is NodeKind.NIC for n in desc.nodes)


@pytest.mark.parametrize("nodes", [1, 4])
@pytest.mark.parametrize("name", sorted(REQUIRED))
def test_every_gpu_reaches_every_other(name, nodes):
    topo = load_system(name, nodes=nodes)
    per_node = topo.gpus_per_node
    assert topo.num_gpus == per_node * nodes
    gpus = topo.gpus
    # all pairs on one node, and every GPU of node 0 to every GPU of the last node
    pairs = list(itertools.permutations(gpus[:per_node], 2))
    pairs += [(a, b) for a in gpus[:per_node] for b in gpus[-per_node:] if a != b]
    for a, b in pairs:
        p = route(topo, a, b)
        assert p[0] == a and p[-1] == b
        assert all(topo.graph.nodes[n]["kind"] is not NodeKind.GPU for n in p[1:-1])
        assert path_bandwidth(topo, a, b) > 0


def test_dgx1_v100_one_link_two_link_and_pcie_pairs():
    """DGX-1V whitepaper: pairs with 2 NVLinks get twice the bandwidth of 1-link pairs; pairs
    without NVLink go GPU-PLX-CPU-QPI-CPU-PLX-GPU and are the slowest."""
    t = load_system("dgx1-v100")
    one, two, pcie = [], [], []
    for a, b in itertools.combinations(t.gpus, 2):
        e = t.graph.get_edge_data(a, b)
        bw = path_bandwidth(t, a, b)
        if e is None:
            pcie.append(bw)
            assert "cpu0" in route(t, a, b) and "cpu1" in route(t, a, b)
        elif e["count"] == 2:
            two.append(bw)
        else:
            one.append(bw)
    assert len(one) == 8 and len(two) == 8 and len(pcie) == 12
    assert set(two) == {2 * one[0]} and set(one) == {one[0]}
    # 1 NVLink 2.0: 25 GB/s x 0.90 = 22.5 GB/s; PCIe 3.0 x16: 15.754 GB/s x 0.82 = 12.92 GB/s
    assert one[0] == pytest.approx(22.5e9)
    assert max(pcie) < min(one)
    assert max(pcie) == pytest.approx(12.918e9, rel=1e-3)


def test_seed_workstation_cross_socket_pair_bottleneck_is_pcie():
    """Golden: 2x GTX 1080 Ti, one per socket. gpu0 -> cpu0 -> cpu1 -> gpu1 crosses two
    PCIe 3.0 x16 links (15.754 GB/s x 0.82 = 12.918 GB/s) and 2 QPI links at 8.0 GT/s
    (2 x 16 GB/s x 0.70 = 22.4 GB/s): the bottleneck is PCIe, 12.918 GB/s."""
    t = load_system("asus-z10pe-2x1080ti")
    assert route(t, "gpu0", "gpu1") == ("gpu0", "cpu0", "cpu1", "gpu1")
    assert path_bandwidth(t, "gpu0", "gpu1") == pytest.approx(12.918e9, rel=1e-3)
    qpi = t.graph.edges["cpu0", "cpu1"]
    assert qpi["tech"] == "qpi-8.0" and qpi["count"] == 2


def test_ac922_gpu_pairs_nvlink_3_bricks_and_xbus_across_sockets():
    t = load_system("ibm-ac922-4xv100")
    # 3 bricks of NVLink 2.0: 3 x 25 GB/s x 0.9 = 67.5 GB/s
    assert path_bandwidth(t, "gpu0", "gpu1") == pytest.approx(67.5e9)
    assert route(t, "gpu0", "gpu2") == ("gpu0", "cpu0", "cpu1", "gpu2")
    assert path_bandwidth(t, "gpu0", "gpu2") < path_bandwidth(t, "gpu0", "gpu1")


@pytest.mark.parametrize(
    ("name", "ports"), [("dgx2-v100", 6), ("dgx-a100", 12), ("dgx-h100", 18), ("dgx-b200", 18)]
)
def test_nvswitch_systems_give_every_pair_the_full_gpu_bandwidth(name, ports):
    """Through the (aggregate) NVSwitch every pair gets the GPU's whole NVLink bandwidth, also
    across the DGX-2 baseboards (48-port trunk)."""
    t = load_system(name)
    link = t.graph.edges["gpu0", "nvswitch0"]
    assert link["count"] == ports
    per_gpu = link["bandwidth_Bps"] * link["efficiency"]
    bws = [path_bandwidth(t, a, b) for a, b in itertools.permutations(t.gpus, 2)]
    assert min(bws) == pytest.approx(per_gpu) and max(bws) == pytest.approx(per_gpu)


def test_network_override_on_catalogue_system():
    """`--system dgx1-p100 --nodes 44 --network eth-50g` replaces the EDR fabric."""
    t = load_system("dgx1-p100", nodes=44, network="eth-50g")
    assert t.num_gpus == 352 and t.fabric.network == "eth-50g"
    fabric_edges = [
        d
        for u, v, d in t.graph.edges(data=True)
        if NodeKind.NETWORK_SWITCH in (t.graph.nodes[u]["kind"], t.graph.nodes[v]["kind"])
    ]
    assert fabric_edges and {d["tech"] for d in fabric_edges} == {"eth-50g"}
    t2 = load_system("dgx1-p100", nodes=2, nics_per_node=1)
    nics_used = {
        u
        for u, v in t2.graph.edges()
        if t2.graph.nodes[u]["kind"] is NodeKind.NIC
        and t2.graph.nodes[v]["kind"] is NodeKind.NETWORK_SWITCH
    } | {
        v
        for u, v in t2.graph.edges()
        if t2.graph.nodes[v]["kind"] is NodeKind.NIC
        and t2.graph.nodes[u]["kind"] is NodeKind.NETWORK_SWITCH
    }
    assert nics_used == {"n0/nic0", "n1/nic0"}


def test_gpu_selectable_system_takes_another_gpu():
    t = load_system("pcie-8x-server", gpu="A100-PCIE-80GB")
    assert {t.graph.nodes[g]["model"] for g in t.gpus} == {"A100-PCIE-80GB"}


def test_cpu_models_use_the_cpu_catalogue_where_it_has_the_part():
    """CPU nodes name CPU-catalogue parts; only parts the catalogue lacks stay free text."""
    free_text = set()
    for name in sorted(REQUIRED):
        t = load_system(name)
        for cpu in t.nodes_of_kind(NodeKind.CPU):
            if t.cpu_spec(cpu) is None:
                free_text.add(t.graph.nodes[cpu]["model"])
    assert free_text == {
        "Intel Xeon E5-2650 v3",
        "Intel Xeon Platinum 8570",
    }
    assert load_system("dgx1-p100").cpu_spec().name == "xeon-e5-2698-v3"  # by its alias
    assert load_system("ibm-ac922-4xv100").cpu_spec().name == "power9-20c"
    assert load_system("dgx1-v100", nodes=2).cpu_spec("n1/cpu1").name == "xeon-e5-2698-v4"
