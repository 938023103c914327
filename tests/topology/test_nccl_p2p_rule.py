"""NCCL's P2P level applied to every loaded system (issue 12 item 1: catalogue and custom servers).

Hand values. ``pcie-8xtitanx``: 2 Intel sockets, 2 PCIe switches per socket, 2 GPUs per switch,
28 GPU pairs. PXB (NCCL >= 2.8 on Intel, every CPU from 2.23): P2P only for the 4 pairs sharing
a switch, 24 pairs through host memory. PHB (NCCL 2.0-2.5): P2P also between the two switches of
one socket; only the 4 x 4 = 16 cross-socket pairs go through host memory. ``dgx1-v100``: each
GPU has NVLinks to 4 of its 7 peers, the other 3 sit on the other socket: 8 x 3 / 2 = 12 pairs
whose PCIe path crosses both CPUs; from NCCL 2.8 they talk over NVLink through an intermediate
GPU (PATH_NVB), before that through host memory. NVB forwarding is not modelled (the router
never passes through a GPU): the model keeps them in host memory in every release.
"""

from __future__ import annotations

import pytest

from perfmodel._memo import BoundedMemo
from perfmodel.errors import ConfigError
from perfmodel.topology import load_system
from perfmodel.topology.cluster import build_cluster
from perfmodel.topology.io import parse_server
from perfmodel.topology.nccl_p2p import (
    DEFAULT_NCCL_RELEASE,
    HostCpu,
    NcclRelease,
    P2pLevel,
    nccl_p2p_level,
    with_nccl_p2p_rule,
)

R = NcclRelease


def _pairs(topo):
    return set(topo.meta["nccl_p2p_rule"]["pairs"])


@pytest.fixture(scope="module")
def titanx():
    return load_system("pcie-8xtitanx")


def test_levels_by_release_and_host():
    assert nccl_p2p_level(R(2, 0), HostCpu.AMD, 8) is P2pLevel.PHB  # p2pCanConnect, any CPU
    assert nccl_p2p_level(R(2, 5), HostCpu.UNKNOWN, 8) is P2pLevel.PHB
    assert nccl_p2p_level(R(2, 7), HostCpu.INTEL_BROADWELL, 8) is P2pLevel.PXB
    assert nccl_p2p_level(R(2, 7), HostCpu.INTEL, 8) is P2pLevel.PHB
    assert nccl_p2p_level(R(2, 7), HostCpu.AMD, 8) is P2pLevel.SYS
    assert nccl_p2p_level(R(2, 18), HostCpu.INTEL, 8) is P2pLevel.PXB
    assert nccl_p2p_level(R(2, 18), HostCpu.AMD, 8) is P2pLevel.SYS
    assert nccl_p2p_level(R(2, 18), HostCpu.POWER, 8) is P2pLevel.SYS
    assert nccl_p2p_level(R(2, 23), HostCpu.AMD, 8) is P2pLevel.PXB
    assert nccl_p2p_level(R(2, 23), HostCpu.AMD, 2) is P2pLevel.SYS
    assert nccl_p2p_level(R(2, 27), HostCpu.UNKNOWN, 8) is P2pLevel.PXB  # CPU does not matter
    assert nccl_p2p_level(R(2, 27), HostCpu.UNKNOWN, 2) is None  # AMD or not decides
    assert nccl_p2p_level(R(2, 18), HostCpu.UNKNOWN, 8) is None


def test_two_socket_intel_pcie_box_by_release(titanx):
    new = _pairs(titanx)  # loading applies the default release
    assert titanx.meta["nccl_p2p_rule"]["release"] == str(DEFAULT_NCCL_RELEASE) == "2.27"
    assert len(new) == 24 and ("gpu0", "gpu1") not in new
    assert ("gpu0", "gpu2") in new and ("gpu0", "gpu4") in new  # two switches; two sockets
    old = _pairs(with_nccl_p2p_rule(titanx, R(2, 0)))
    assert len(old) == 16 and ("gpu0", "gpu2") not in old and ("gpu0", "gpu4") in old
    # the denial sits on the GPUs: gpu0 refuses the 6 GPUs outside its switch
    assert titanx.graph.nodes["gpu0"]["p2p_denied"] == (
        "gpu2",
        "gpu3",
        "gpu4",
        "gpu5",
        "gpu6",
        "gpu7",
    )


def test_rule_is_replaced_not_added_and_stated_pairs_stay(titanx):
    smi = titanx.with_p2p_denied([("gpu0", "gpu1")])  # e.g. nvidia-smi topo -p2p r: CNS
    old = with_nccl_p2p_rule(smi, R(2, 0))
    assert "gpu1" in old.graph.nodes["gpu0"]["p2p_denied"]
    assert "gpu2" not in old.graph.nodes["gpu0"]["p2p_denied"]
    back = with_nccl_p2p_rule(old, R(2, 27))
    assert back.graph.nodes["gpu0"]["p2p_denied"] == (
        "gpu1",  # stated
        *titanx.graph.nodes["gpu0"]["p2p_denied"],  # the rule's 6
    )


def test_amd_host_with_two_gpus_keeps_p2p_across_sockets():
    two = load_system("asus-z10pe-2x1080ti")  # one GPU per Broadwell socket
    assert _pairs(two) == {("gpu0", "gpu1")}
    assert _pairs(with_nccl_p2p_rule(two, host=HostCpu.AMD)) == set()  # 2.27: SYS on AMD, 2 GPUs
    assert _pairs(with_nccl_p2p_rule(two, R(2, 22), HostCpu.AMD)) == set()
    assert _pairs(with_nccl_p2p_rule(two, R(2, 0), HostCpu.AMD)) == {("gpu0", "gpu1")}
    eight = load_system("pcie-8x-server")  # generic CPU: 8 GPUs, PXB whatever the vendor
    assert len(_pairs(eight)) == 24
    assert len(_pairs(with_nccl_p2p_rule(eight, host=HostCpu.AMD))) == 24
    assert _pairs(with_nccl_p2p_rule(eight, R(2, 22), HostCpu.AMD)) == set()


def test_nvlink_systems_keep_p2p():
    from perfmodel.comm import CommCostModel

    v = load_system("dgx1-v100")
    # NVB forwarding (NCCL >= 2.8) is not modelled: the 12 pairs without a direct NVLink go
    # through host memory in every release, not P2P over PCIe across both CPUs
    assert len(_pairs(v)) == 12 and ("gpu0", "gpu5") in _pairs(v)
    assert _pairs(with_nccl_p2p_rule(v, R(2, 7))) == _pairs(v)
    links = CommCostModel(v).links
    assert links.shm_cpu("gpu0", "gpu5") is not None
    assert links.shm_cpu("gpu0", "gpu1") is None  # direct NVLink
    ac922 = load_system("ibm-ac922-4xv100")  # POWER9: GPU-CPU NVLink, no PCIe on the paths
    assert _pairs(with_nccl_p2p_rule(ac922, R(2, 0))) == set()
    for name in ("dgx-a100", "dgx-h100", "dgx2-v100", "dell-c4140-4xv100"):
        assert _pairs(load_system(name)) == set(), name


def test_custom_pcie_server_is_an_intel_host():
    from perfmodel.topology.custom import custom_system

    t = custom_system("A100-PCIE-80GB", 4, "pcie4")  # one socket, two switches
    assert t.meta["nccl_p2p_rule"]["host"] == "intel"
    assert _pairs(t) == {("gpu0", "gpu2"), ("gpu0", "gpu3"), ("gpu1", "gpu2"), ("gpu1", "gpu3")}


def test_a_file_stating_p2p_keeps_it():
    data = {
        "system": {"name": "t", "gpu": "A100-PCIE-40GB", "p2p": True},
        "node": [
            {"id": "cpu0", "kind": "cpu", "model": "xeon-gold-6148"},
            {"id": "cpu1", "kind": "cpu", "model": "xeon-gold-6148"},
            {"id": "gpu0", "kind": "gpu"},
            {"id": "gpu1", "kind": "gpu"},
        ],
        "link": [
            {"a": "cpu0", "b": "cpu1", "tech": "upi-10.4", "count": 3},
            {"a": "cpu0", "b": "gpu0", "tech": "pcie3-x16"},
            {"a": "cpu1", "b": "gpu1", "tech": "pcie3-x16"},
        ],
    }
    topo = build_cluster(parse_server(data, source="t.toml"), 1, None)
    assert _pairs(with_nccl_p2p_rule(topo)) == set()
    del data["system"]["p2p"]
    topo = build_cluster(parse_server(data, source="t.toml"), 1, None)
    assert _pairs(with_nccl_p2p_rule(topo)) == {("gpu0", "gpu1")}


def test_release_parsing():
    assert R.parse("2.18.3-1") == R(2, 18) and str(R.parse("v2.7")) == "2.7"
    assert R(2, 4) < R(2, 23) < R(2, 27)
    with pytest.raises(ConfigError, match=r"NCCL release '1\.3'"):
        R.parse("1.3")
    with pytest.raises(ConfigError, match="--nccl"):
        R.parse("latest")


def test_cli_comm_names_the_rule_and_takes_a_release(capsys):
    from perfmodel.cli import main

    assert main(["comm", "--system", "pcie-8xtitanx", "--sizes", "1G:1G"]) == 0
    out = capsys.readouterr().out
    assert "NCCL 2.27's P2P level PXB" in out and "(24 pairs)" in out and "Intel CPU" in out
    assert main(["comm", "--system", "pcie-8xtitanx", "--sizes", "1G:1G", "--nccl", "2.0"]) == 0
    out = capsys.readouterr().out
    assert "level PHB" in out and "(16 pairs)" in out and "p2pCanConnect" in out
    assert main(["comm", "--system", "pcie-8xtitanx", "--sizes", "1G:1G", "--p2p", "on"]) == 0
    assert "host memory" not in capsys.readouterr().out
    assert main(["comm", "--system", "pcie-8xtitanx", "--nccl", "latest"]) == 2


def test_scenario_field_states_the_release():
    from perfmodel.api import Scenario, topology_of

    base = Scenario(system="pcie-8xtitanx", model="resnet50", batch_per_gpu=32)
    assert topology_of(base).meta["nccl_p2p_rule"]["release"] == "2.27"
    old = topology_of(Scenario(system="pcie-8xtitanx", model="resnet50", nccl="2.0"))
    assert old.meta["nccl_p2p_rule"]["release"] == "2.0" and len(_pairs(old)) == 16
    with pytest.raises(ConfigError, match=r"scenario\.nccl"):
        topology_of(Scenario(system="pcie-8xtitanx", nccl="two"))


def test_cli_predict_names_the_rule(capsys):
    from perfmodel.cli import main

    args = ["predict", "--model", "resnet50", "--system", "pcie-8xtitanx", "--batch-per-gpu", "32"]
    assert main([*args, "--fidelity", "analytic", "--nccl", "2.0"]) == 0
    out = capsys.readouterr().out
    assert "GPU pairs" in out and "talk through host memory" in out
    assert "NCCL 2.0's P2P level PHB" in out


def test_cli_topo_show_names_the_rule(capsys):
    from perfmodel.cli import main

    assert main(["topo", "show", "pcie-8xtitanx", "--nccl", "2.0"]) == 0
    assert "NCCL 2.0's P2P level PHB" in capsys.readouterr().out
    assert main(["topo", "show", "dgx-a100"]) == 0
    assert "P2P level" not in capsys.readouterr().out  # NVSwitch pairs keep P2P


@pytest.mark.parametrize(
    ("text", "host"),
    [
        ("Intel Xeon E5-2698v4", HostCpu.INTEL_BROADWELL),  # no space before v4
        ("Intel Xeon E5-2698 v4", HostCpu.INTEL_BROADWELL),
        ("Xeon E5-2699Av4", HostCpu.INTEL_BROADWELL),
        ("Intel Xeon E5-2698v3", HostCpu.INTEL),
        ("Intel Xeon E5-2650 v3", HostCpu.INTEL),
    ],
)
def test_broadwell_spellings(text, host):
    assert HostCpu.from_text(text) is host
    # NCCL 2.6-2.7: Broadwell PXB, other Intel PHB
    want = P2pLevel.PXB if host is HostCpu.INTEL_BROADWELL else P2pLevel.PHB
    assert nccl_p2p_level(R(2, 6), HostCpu.from_text(text), 8) is want


def test_rule_survives_export_and_reimport(titanx):
    import json

    from perfmodel.errors import TopologyError
    from perfmodel.topology.export import export_dict, from_dict

    back = from_dict(json.loads(json.dumps(export_dict(titanx))))
    assert back.meta["nccl_p2p_rule"] == titanx.meta["nccl_p2p_rule"]
    old = with_nccl_p2p_rule(back, R(2, 0))  # replaces the exported 2.27 rule
    assert len(_pairs(old)) == 16
    assert old.graph.nodes["gpu0"]["p2p_denied"] == ("gpu4", "gpu5", "gpu6", "gpu7")
    assert "gpu2" not in old.graph.nodes["gpu0"]["p2p_denied"]
    data = export_dict(titanx)
    data["nccl_p2p_rule"] = {"release": "2.27", "host": "vax", "level": "PXB", "pairs": []}
    with pytest.raises(TopologyError, match="nccl_p2p_rule"):
        from_dict(data, source="t.json")


def test_rule_leaves_the_routing_caches_alone(titanx):
    """The throwaway one-server topology of nccl_p2p_level_denied is routed without the
    caches (keyed on the object, they would keep it alive), on the same routes."""
    from perfmodel.topology import routing
    from perfmodel.topology.nccl_p2p import nccl_p2p_level_denied

    caches = (routing._route_cached, routing._best_paths, routing._adjacency)

    def calls():
        return [c.cache_info().hits + c.cache_info().misses for c in caches]

    before = calls()
    assert len(nccl_p2p_level_denied(titanx, max_cpus=0)) == 24
    assert calls() == before
    for name in ("pcie-8xtitanx", "dgx1-v100", "ibm-ac922-4xv100"):
        topo = load_system(name)
        for a in topo.gpus:
            for b in topo.gpus:
                if a != b:
                    assert routing.uncached_route(topo, a, b) == routing.route(topo, a, b)


def test_note_says_nvb_forwarding_is_not_modelled(titanx):
    from perfmodel.topology.nccl_p2p import nccl_p2p_rule_note

    v = load_system("dgx1-v100")  # gpu0-gpu5: no NVLink, both NVLinked to gpu1 (hybrid cube)
    assert "NVB forwarding not modelled" in nccl_p2p_rule_note(v, ["gpu0", "gpu5"])
    old = with_nccl_p2p_rule(v, R(2, 7))  # no NVB before 2.8
    assert "NVB" not in nccl_p2p_rule_note(old, ["gpu0", "gpu5"])
    assert "NVB" not in nccl_p2p_rule_note(titanx, titanx.gpus)  # PCIe only


def test_denied_pairs_are_routed_once_per_server_graph(monkeypatch):
    """issue 14: the pairs of one server graph are routed once per process; another build of
    the same server (more nodes) or a changed link is a key of its own, and the memoised
    answer is the routed one (24 PXB pairs, 16 PHB pairs: the module docstring's hand values)."""
    from perfmodel.topology import nccl_p2p
    from perfmodel.topology.nccl_p2p import nccl_p2p_level_denied

    titanx = load_system("pcie-8xtitanx", nodes=3)  # servers n0/.. n2/ (one server: no prefix)
    two = load_system("pcie-8xtitanx", nodes=2)  # another build of the same server
    routed: list[int] = []
    real = nccl_p2p._denied_pairs

    def counting(topo, local, max_cpus):
        routed.append(max_cpus)
        return real(topo, local, max_cpus)

    monkeypatch.setattr(nccl_p2p, "_DENIED", BoundedMemo(64))
    monkeypatch.setattr(nccl_p2p, "_denied_pairs", counting)
    first = nccl_p2p_level_denied(titanx, max_cpus=0)
    assert len(first) == 24 and len(nccl_p2p_level_denied(titanx, max_cpus=1)) == 16
    assert nccl_p2p_level_denied(two, max_cpus=0) == first
    assert routed == [0, 1]
    slower = two.graph.copy()
    u, v = next(iter(slower.edges))
    slower.edges[u, v]["latency_s"] = slower.edges[u, v]["latency_s"] * 2
    changed = type(two)(two.name, slower, num_nodes=2)
    assert nccl_p2p_level_denied(changed, max_cpus=0) == first  # routed again, same pairs
    assert routed == [0, 1, 0]
    assert HostCpu.from_text("xeon-e5-2698-v4") is HostCpu.INTEL_BROADWELL  # memoised per text
