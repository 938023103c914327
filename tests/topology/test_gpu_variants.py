"""--gpu on a fixed catalogue system accepts board variants only."""

import pytest

from perfmodel.errors import ConfigError
from perfmodel.topology import load_system
from perfmodel.topology.builders import system_path


def test_memory_variant_of_fixed_system():
    t = load_system("dgx-a100", gpu="A100-SXM4-40GB")
    assert {t.gpu_spec(g).name for g in t.gpus} == {"A100-SXM4-40GB"}
    t = load_system("dgx1-v100", gpu="V100-SXM2-32GB")
    assert t.gpu_spec().memory_bytes == 32 * 2**30


def test_other_gpu_on_fixed_system_is_refused():
    with pytest.raises(ConfigError) as info:
        load_system("dgx1-v100", gpu="A100-SXM4-80GB")
    assert "A100-SXM4-80GB" in str(info.value) and "variant" in str(info.value)


def test_fabric_override_without_a_network_needs_one(tmp_path):
    """A file with no default fabric gets no silent network: the user must name one."""
    src = system_path("dgx1-v100").read_text()
    start = src.index("[system.fabric]")
    end = src.index("[[node]]")
    path = tmp_path / "nofabric.toml"
    path.write_text(src[:start] + src[end:])
    with pytest.raises(ConfigError) as info:
        load_system(str(path), nodes=2, nics_per_node=2)
    assert "--network" in str(info.value)
    topo = load_system(str(path), nodes=2, network="ib-hdr", nics_per_node=2)
    assert topo.num_gpus == 16
