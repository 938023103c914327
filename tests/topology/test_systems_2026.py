"""The systems of the 2026 market (issue 25): rack-scale NVLink domains, AMD meshes, cloud
instances; the file schema's new keys and their errors."""

from __future__ import annotations

import importlib.util
import math
import re
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from perfmodel.catalogue import topologies_dir
from perfmodel.cli import main
from perfmodel.errors import TopologyError, UnknownHardwareError
from perfmodel.hardware.links import LinkFamily
from perfmodel.ops import CollectiveOp
from perfmodel.topology import list_systems, load_system
from perfmodel.topology.analysis import nvlink_domains, smi_matrix
from perfmodel.topology.files import read_server_file
from perfmodel.topology.io import parse_server

ROOT = Path(__file__).resolve().parents[2]

RACKS = ("gb200-nvl72", "gb300-nvl72", "azure-nd-gb200-v6")
EIGHT = (
    "hgx-b300", "mi300x-8", "mi325x-8", "mi355x-8", "aws-p5.48xlarge", "aws-p5e.48xlarge",
    "aws-p5en.48xlarge", "aws-p6-b200.48xlarge", "gcp-a3-highgpu-8g", "gcp-a3-megagpu-8g",
    "gcp-a3-ultragpu-8g", "gcp-a4-highgpu-8g", "azure-nd-h100-v5", "azure-nd-h200-v5",
)  # fmt: skip


def _generator():
    spec = importlib.util.spec_from_file_location("gen_systems", ROOT / "tools" / "gen_systems.py")
    mod = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    sys.modules.setdefault("gen_systems", mod)  # dataclasses resolve annotations through it
    spec.loader.exec_module(sys.modules["gen_systems"])
    return sys.modules["gen_systems"]


def test_shipped_files_are_the_generators_output() -> None:
    files = _generator().all_systems()
    assert set(files) == {f"{n}.toml" for n in (*RACKS, *EIGHT)}
    for name, text in files.items():
        assert (topologies_dir() / name).read_text() == text, f"{name}: run tools/gen_systems.py"


def test_listed() -> None:
    assert {*RACKS, *EIGHT} <= set(list_systems())


@pytest.mark.parametrize("name", RACKS)
def test_rack_is_one_nvlink_domain_of_72(name: str) -> None:
    t = load_system(name)
    assert t.num_gpus == t.gpus_per_node == 72
    assert [len(d) for d in nvlink_domains(t)] == [72]
    g = t.graph
    trays = {g.nodes[x]["tray"] for x in t.gpus}
    assert trays == set(range(18))
    assert all(sum(1 for x in t.gpus if g.nodes[x]["tray"] == k) == 4 for k in trays)
    # 2 Grace CPUs per tray, each joined to its 2 GPUs by NVLink-C2C; one NIC per GPU
    cpus = [x for x in g if g.nodes[x]["kind"].value == "cpu"]
    assert len(cpus) == 36
    assert all(sum(1 for v in g.adj[c] if g.nodes[v]["kind"].value == "gpu") == 2 for c in cpus)
    assert sum(1 for x in g if g.nodes[x]["kind"].value == "nic") == 72
    # nvidia-smi runs per tray: the matrix shows tray 0's 4 GPUs and 4 NICs
    labels, _ = smi_matrix(t)
    assert labels == ("GPU0", "GPU1", "GPU2", "GPU3", "NIC0", "NIC1", "NIC2", "NIC3")


@pytest.mark.parametrize("name", ("mi300x-8", "mi325x-8", "mi355x-8"))
def test_amd_platform_is_a_full_mesh_without_switch(name: str) -> None:
    t = load_system(name)
    g = t.graph
    assert not any(g.nodes[x]["kind"].value == "nvswitch" for x in g)
    for i, a in enumerate(t.gpus):
        for b in t.gpus[i + 1 :]:
            e = g.edges[a, b]
            assert e["family"] is LinkFamily.XGMI and e["count"] == 1
    assert [len(d) for d in nvlink_domains(t)] == [8]
    assert t.gpu_spec().vendor == "AMD"


def test_pcie_servers_have_no_nvlink_domain() -> None:
    assert [len(d) for d in nvlink_domains(load_system("pcie-8x-server"))] == [1] * 8
    assert [len(d) for d in nvlink_domains(load_system("dgx-b200"))] == [8]


def test_cloud_instances_name_instance_transport_and_price() -> None:
    p5 = load_system("aws-p5.48xlarge")
    assert p5.cloud is not None and p5.cloud.instance == "p5.48xlarge"
    assert p5.cloud.price_per_gpu_hour == pytest.approx(98.32 / 8, abs=0.01)
    assert p5.cloud.price_date == "2023-07-27" and "Next Platform" in p5.cloud.price_source
    assert p5.fabric is not None and p5.fabric.network == "efa-400g"
    a3 = load_system("gcp-a3-highgpu-8g")
    assert a3.fabric is not None and a3.fabric.nics_per_node == 4  # one NIC per 2 GPUs
    nd = load_system("azure-nd-gb200-v6")
    assert nd.cloud is not None and nd.cloud.gpus_per_instance == 4 and nd.num_gpus == 72
    for name in EIGHT[4:]:
        c = load_system(name).cloud
        assert c is not None and c.transport
        assert (c.price_per_gpu_hour is None) == (c.price_date == "")
    # a cluster keeps the instance
    assert load_system("aws-p5.48xlarge", nodes=2).cloud == p5.cloud


def test_cluster_of_racks_and_16k_gpus_stays_fast() -> None:
    import time

    t0 = time.process_time()
    t = load_system("gb200-nvl72", nodes=227)
    assert t.num_gpus == 227 * 72 == 16_344
    assert time.process_time() - t0 < 3.0  # ~0.3 s on the 2-core development machine


# ------------------------------------------------------------------------------ bad input

RACK_TEXT = (ROOT / "topologies" / "gb200-nvl72.toml").read_text()
P5_TEXT = (ROOT / "topologies" / "aws-p5.48xlarge.toml").read_text()


def _write(tmp_path: Path, text: str, name: str = "box.toml") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def test_unknown_gpu_names_value_and_close_match(tmp_path, capsys) -> None:
    p = _write(tmp_path, RACK_TEXT.replace('gpu = "GB200-186GB"', 'gpu = "GB200-186G"'))
    with pytest.raises(TopologyError) as info:
        read_server_file(p)
    assert "GB200-186G" in str(info.value) and "GB200-186GB" in str(info.value)
    out = tmp_path / "trace.json"
    rc = main(
        ["predict", "--system", str(p), "--model", "gpt2", "--batch-per-gpu", "1",
         "--fidelity", "analytic", "--trace", str(out)]
    )  # fmt: skip
    err = capsys.readouterr().err
    assert rc == 2 and "GB200-186GB" in err and len(err.strip().splitlines()) == 1
    assert not out.exists()


def test_negative_price_is_refused(tmp_path, capsys) -> None:
    p = _write(
        tmp_path, P5_TEXT.replace("price_per_gpu_hour = 12.29", "price_per_gpu_hour = -12.29")
    )
    with pytest.raises(
        TopologyError, match=re.escape("price_per_gpu_hour: expected a number > 0, got -12.29")
    ):
        read_server_file(p)
    out = tmp_path / "topo.json"
    assert main(["topo", "show", "--system", str(p), "--json"]) == 2
    assert "-12.29" in capsys.readouterr().err
    assert not out.exists()


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        ('price_date = "2023-07-27"', 'price_date = "27/07/2023"', "YYYY-MM-DD"),
        ('price_source = "AWS EC2', 'price_sourc = "AWS EC2', "unknown key"),
        ("gpus_per_instance = 8", "gpus_per_instance = 0", "gpus_per_instance"),
        (
            'transport = "EFA v2 (SRD, aws-ofi-nccl libfabric plugin, GPUDirect RDMA)"',
            'transport = ""',
            "missing key 'transport'",
        ),
    ],
)
def test_cloud_table_errors(tmp_path, old: str, new: str, message: str) -> None:
    assert old in P5_TEXT
    with pytest.raises(TopologyError, match=message):
        read_server_file(_write(tmp_path, P5_TEXT.replace(old, new, 1)))


def test_nvlink_domain_larger_than_the_gpus_held(tmp_path, capsys) -> None:
    p = _write(tmp_path, RACK_TEXT.replace("nvlink_domain = 72", "nvlink_domain = 144"))
    with pytest.raises(TopologyError, match="nvlink_domain = 144 is larger than the 72 GPUs"):
        read_server_file(p)
    assert main(["comm", "--system", str(p), "--op", "allreduce", "--sizes", "1M"]) == 2
    assert "144" in capsys.readouterr().err


def test_nvlink_domain_must_match_the_links(tmp_path) -> None:
    p = _write(tmp_path, RACK_TEXT.replace("nvlink_domain = 72", "nvlink_domain = 8"))
    with pytest.raises(TopologyError, match="join at most 72 GPUs"):
        read_server_file(p)
    mesh = (ROOT / "topologies" / "mi300x-8.toml").read_text()
    # drop every Infinity Fabric link of gpu7: the mesh joins 7 GPUs, not the 8 declared
    cut = "\n[[link]]".join(
        part for part in mesh.split("\n[[link]]") if not ('"gpu7"' in part and "xgmi-gfx94" in part)
    )
    with pytest.raises(TopologyError, match="join at most 7 GPUs"):
        read_server_file(_write(tmp_path, cut, "mesh.toml"))


def test_cloud_instance_typo_names_the_close_match(capsys) -> None:
    rc = main(["topo", "show", "--system", "aws-p5.48xlarg"])
    err = capsys.readouterr().err
    assert rc == 2 and "aws-p5.48xlarge" in err and len(err.strip().splitlines()) == 1
    with pytest.raises(UnknownHardwareError, match="gcp-a3-megagpu-8g"):
        load_system("gcp-a3-megagpu8g")


@settings(max_examples=40, deadline=None)
@given(
    st.one_of(
        st.floats(allow_nan=True, allow_infinity=True).filter(lambda x: not x > 0),
        st.integers(max_value=0),
        st.booleans(),
        st.text(max_size=5),
    )
)
def test_fuzz_bad_prices_are_typed_errors(value) -> None:
    import json

    text = P5_TEXT.replace(
        "price_per_gpu_hour = 12.29", f"price_per_gpu_hour = {json.dumps(value)}"
    )
    if isinstance(value, float) and not math.isfinite(value):
        text = P5_TEXT.replace("price_per_gpu_hour = 12.29", f"price_per_gpu_hour = {value!r}")
    try:
        from perfmodel._io import parse_toml

        data = parse_toml(text, Path("fuzz.toml"))
    except Exception:  # not TOML at all: the file loader's own error, tested elsewhere
        return
    with pytest.raises(TopologyError, match="price_per_gpu_hour"):
        parse_server(data, source="fuzz.toml")


@settings(max_examples=30, deadline=None)
@given(st.sampled_from([*RACKS, *EIGHT]), st.integers(0, 30), st.sampled_from("x-._0"))
def test_fuzz_system_name_typos_exit_2(name: str, at: int, ch: str) -> None:
    i = at % len(name)
    typo = name[:i] + ch + name[i + 1 :]
    if typo in list_systems():
        return
    with pytest.raises(UnknownHardwareError) as info:
        load_system(typo)
    assert repr(typo) in str(info.value)


# ------------------------------------------------------------------------------- references


def test_references_parse_and_are_checked_by_comm(capsys) -> None:
    t = load_system("gb200-nvl72")
    (ref,) = t.references
    assert ref.op is CollectiveOp.ALLREDUCE and ref.gpus == 72 and ref.message_bytes == 8 * 2**30
    assert ref.busbw_Bps == pytest.approx(834.57e9)
    rc = main(["comm", "--system", "gb200-nvl72", "--gpus", "72", "--op", "allreduce",
               "--sizes", "8G"])  # fmt: skip
    out = capsys.readouterr().out
    assert rc == 0 and "nvls/Simple" in out
    # the measured run had NVLS switched off: the call is priced again under its environment
    # (NCCL's choice without NVLS: ring or tree), like with like
    assert ref.nccl_env == (("NCCL_COLLNET_ENABLE", "0"), ("NCCL_NVLS_ENABLE", "0"))
    assert "# checked against coreweave/nccl-tests README" in out
    assert "predicted under its NCCL_COLLNET_ENABLE=0, NCCL_NVLS_ENABLE=0" in out
    assert "%, ring)" in out
    # the same run under that environment by the flag: the same line (both environments alike)
    assert main(["comm", "--system", "gb200-nvl72", "--gpus", "72", "--op", "allreduce",
                 "--sizes", "8G", "--nccl-env", "NCCL_NVLS_ENABLE=0",
                 "--nccl-env", "NCCL_COLLNET_ENABLE=0"]) == 0  # fmt: skip
    out = capsys.readouterr().out
    assert "# checked against coreweave/nccl-tests README" in out and "%, ring)" in out
    assert "predicted under its" not in out and "ring/Simple" in out
    # no line for a run the measurement does not describe
    assert main(["comm", "--system", "gb200-nvl72", "--gpus", "64", "--op", "allreduce",
                 "--sizes", "8G"]) == 0  # fmt: skip
    assert "checked against" not in capsys.readouterr().out


def test_reference_errors(tmp_path) -> None:
    bad = RACK_TEXT.replace('op = "allreduce"', 'op = "allreduse"')
    with pytest.raises(TopologyError, match="allreduse"):
        read_server_file(_write(tmp_path, bad))
    bad = RACK_TEXT.replace("busbw_GBps = 834.57", "busbw_GBps = -1")
    with pytest.raises(TopologyError, match="busbw_GBps"):
        read_server_file(_write(tmp_path, bad, "b.toml"))
    env = 'nccl_env = { NCCL_COLLNET_ENABLE = "0", NCCL_NVLS_ENABLE = "0" }'
    assert env in RACK_TEXT
    for wrong, named in (
        ('nccl_env = { NVLS = "0" }', "NVLS"),
        ("nccl_env = { NCCL_NVLS_ENABLE = 0 }", "NCCL_NVLS_ENABLE"),
        ('nccl_env = "0"', "nccl_env"),
        # review mend 6: values are parsed at load (was: loaded, then comm failed mid-table)
        ('nccl_env = { NCCL_NVLS_ENABLE = "off" }', "NCCL_NVLS_ENABLE='off'"),
        ('nccl_env = { NCCL_ALGO = "Rings" }', "rings"),
    ):
        with pytest.raises(TopologyError, match=named) as info:
            read_server_file(_write(tmp_path, RACK_TEXT.replace(env, wrong), "c.toml"))
        assert "nccl_env" in str(info.value) and "c.toml" in str(info.value)


def test_topo_show_states_the_domain_and_cloud(capsys) -> None:
    assert main(["topo", "show", "gb200-nvl72"]) == 0
    out = capsys.readouterr().out
    assert "NVLink domain per server: 1 x 72 GPUs; 18 compute trays of 4 GPUs" in out
    assert "compute tray 0" in out
    assert main(["topo", "show", "aws-p5.48xlarge", "--json"]) == 0
    import json

    data = json.loads(capsys.readouterr().out)
    assert data["summary"]["cloud"]["price_per_gpu_hour"] == pytest.approx(12.29)
    assert data["summary"]["nvlink_domains"] == [8]


def test_catalogue_is_read_beside_the_imported_code() -> None:
    """A checkout's code reads the checkout's catalogue, even when another checkout of perfmodel
    is installed editable in the same environment (its editable finder maps
    ``perfmodel.catalogue.topologies`` to *its* folder): new systems and their code agree."""
    import perfmodel

    here = Path(perfmodel.__file__).resolve().parents[1]
    assert topologies_dir() == here / "topologies"


def test_a_stale_list_price_says_how_far_off_it_may_be() -> None:
    """Audit 15, item 15: no dated P5 on-demand price after AWS's June 2025 cut (up to 45%) was
    found, so the shipped 2023 price stays and its source says it is stale and by how much:
    the bound and the price it implies follow from the stated cut."""
    import re

    for name in ("aws-p5.48xlarge", "aws-p5e.48xlarge"):
        cloud = load_system(name).cloud
        assert cloud is not None and "STALE" in cloud.price_source
        assert "STALE" in cloud.describe() and "--price-per-gpu-hour" in cloud.price_source
    p5 = load_system("aws-p5.48xlarge").cloud
    cut = int(re.search(r"by up to (\d+)%", p5.price_source).group(1)) / 100
    assert f"{p5.price_per_gpu_hour * (1 - cut):.2f} USD per GPU-hour" in p5.price_source
    assert f"{1 / (1 - cut):.2f}x it (costs up to {1 / (1 - cut) - 1:.0%} too high)" in (
        p5.price_source
    )
