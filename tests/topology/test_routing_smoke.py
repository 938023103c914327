from perfmodel.topology import load_system, path_bandwidth, route


def test_dgx1v_nvlink_pairs_and_pcie_pairs():
    t = load_system("dgx1-v100")
    assert route(t, "gpu0", "gpu3") == ("gpu0", "gpu3")
    # 2 NVLinks are twice 1 NVLink; a pair without NVLink goes through PCIe and QPI (slowest)
    assert path_bandwidth(t, "gpu0", "gpu3") == 2 * path_bandwidth(t, "gpu0", "gpu1")
    assert path_bandwidth(t, "gpu0", "gpu5") < path_bandwidth(t, "gpu0", "gpu1")
    assert route(t, "gpu0", "gpu5") == ("gpu0", "plx0", "cpu0", "cpu1", "plx2", "gpu5")
