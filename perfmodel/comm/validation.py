"""Map published communication measurements (``published.jsonl``, kind ``comm_microbenchmark``)
onto model scenarios and compare.

Each row becomes (system, servers, GPUs, op, bytes) only where the row states enough; the rest are
skipped with a reason. Nothing here is fitted: the model runs with catalogue numbers only.

Mapping (from the rows' own hardware text):

- vTrain A100 (8-GPU A100 node, NVLink): ``dgx-a100`` (NVSwitch; every 8-GPU A100 SXM board is
  an HGX with NVSwitch), first 2/4/8 GPUs; busbw (out-of-place).
- vTrain V100 (8-GPU V100 node, 2-GPU busbw of one NVLink2 link): ``dgx1-v100`` hybrid cube-mesh,
  first 2/4/8 GPUs; busbw.
- vTrain's process layout and NCCL release are not stated (VIA-Research/vTrain @f8dda84 holds
  the ``trace/*/AR_GPU*_LUT`` tables, no script that made them): the mapping takes nccl-tests'
  own single-node example, one process for ``-g N`` GPUs (NVIDIA/nccl-tests README, "Run on
  8 GPUs (-g 8)"), :data:`VTRAIN_PROCESSES`, and the tuner era's release (2.8 for V100 and
  A100): the V100 ring then writes through direct pointers and pays no local copy
  (:mod:`perfmodel.comm.p2p_read`); the A100 reads and pays it in any layout.
- DeepBench P100 (PCIe Gen3, 2 PLX switches per socket, dual root): ``pcie-8x-server --gpu P100``;
  16 GPUs = 2 servers on the stated FDR InfiniBand; time.
- DeepBench 1080 Ti (single root, 2 PLX switches x 5 GPUs): a 10-GPU server built from that
  statement (:func:`deepbench_10gpu_server`) with the Intel CPU of the workbook's Specs sheet
  (:data:`DEEPBENCH_CPU`: the only CPU the source states, possibly of another box; the Intel
  vendor is what the model reads); rows with more than 8 GPUs skipped (inter-node link not
  stated); time.
- CoreWeave HGX A100 x 16 servers (InfiniBand, HCA count/speed not stated; the README: "built
  to the design of NVIDIA DGX SuperPODs"): ``dgx-a100`` with its standard 8 x HDR rail fabric,
  flagged ``assumed fabric``; busbw.
- CoreWeave H100 with SHARP: ``dgx-h100`` x 8 with its default fabric marked SHARP-capable
  (the job is ``nccl-test-distributed-h100-64-las1-sharp-mpijob``): NCCL's CollNet competes
  with ring and tree.
- CoreWeave GB200 NVL72 (1, 2 and 20 racks of 72 GPUs, NCCL 2.26.2): ``gb200-nvl72`` with one
  rack per server and ``--nodes`` racks, its catalogue scale-out fabric (one 400 Gb/s NDR NIC
  per GPU; the job names four InfiniBand HCAs per 4-GPU compute tray, their speed is not
  stated), with NVLS and CollNet off as the job that produced the log sets them
  (:data:`CORE_WEAVE_GB200_JOB`): NCCL chooses between ring and tree (:func:`compare`).
- Skipped: Megatron-LM bisection bandwidths (aggregate traffic during training, not a
  collective time).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from perfmodel._io import system_file_stamp
from perfmodel.comm.model import CommCostModel
from perfmodel.comm.nccl_env import DEFAULT_ENV, NcclEnv, with_nccl_env
from perfmodel.comm.p2p_read import ProcessLayout, with_process_layout
from perfmodel.ops import CollectiveOp
from perfmodel.topology import Topology, load_system
from perfmodel.topology.builders import gpus_per_server
from perfmodel.units import GB, ms, us

#: Large-message threshold for the accuracy targets (bandwidth-bound regime), bytes.
LARGE_BYTES = 64 * 2**20


def stated_nccl(row: dict[str, Any]) -> str | None:
    """The NCCL release a row's ``software`` text states (``"NCCL 2.0 MPI"`` -> ``"2.0"``), whose
    P2P rule the mapping applies (:func:`perfmodel.topology.nccl_p2p.nccl_p2p_level`; NCCL 2.0:
    PCIe switches and one CPU root complex, not across sockets); ``None``: not stated, the
    default release's rule.

    >>> stated_nccl({"software": "NCCL 2.0 Single (DeepBench reports the fastest of ...)"})
    '2.0'
    """
    m = re.search(r"NCCL (\d+\.\d+(?:\.\d+)?)", str(row.get("software") or ""))
    return m.group(1) if m else None


#: The job behind CoreWeave's GB200 "Expected Performance" logs: coreweave/nccl-tests commit
#: bee97e7 (2025-05-05, "Add gb200 example with performance", the commit that added the logs),
#: ``slurm/nccl-test-distributed-gb200-nvl72-enroot.slurm`` and the matching MPIJob: image
#: ``nccl2.26.2-1``, ``NCCL_NVLS_ENABLE=0`` (commit a736384, 2025-04-14: "per NV ask, we need to
#: disable NVLS temporarily for our nccl-tests"), ``NCCL_COLLNET_ENABLE=0``,
#: ``NCCL_NET_GDR_C2C=1``, ``UCX_NET_DEVICES=ibp0:1,ibp1:1,ibp2:1,ibp3:1`` (four InfiniBand HCAs
#: per 4-GPU compute tray), ``all_reduce_perf -b 512M -e 8G -f 2 -g 1``. The README states all
#: three logs as NCCL 2.26.2 runs, but the 1- and 2-rack logs were first posted in pull request
#: #43 (2025-02-20), whose Slurm job had an NCCL 2.25.1 image and ``NCCL_NVLS_ENABLE=1``;
#: CoreWeave later wrote that NVLS "was disabled previously due to issues with older NCCL
#: versions" (pull request #60, 2025-08-27). Whether NVLS ran in those two logs is therefore not
#: stated; the mapping takes the README's job (NVLS off) for all six rows, an assumption for the
#: 1- and 2-rack rows that the row notes state (their measured 512 MiB - 8 GiB curve carries a
#: ~0.56 ms fixed cost per call, like the tuner's 72-rank ring latency, 0.49 ms, where NVLS's is
#: 25 us).
CORE_WEAVE_GB200_JOB = (
    "coreweave/nccl-tests@bee97e7 slurm/nccl-test-distributed-gb200-nvl72-enroot.slurm: "
    "NCCL_NVLS_ENABLE=0, NCCL_COLLNET_ENABLE=0, 4 IB HCAs per tray"
)

#: The CoreWeave GB200 job's environment (:data:`CORE_WEAVE_GB200_JOB`): NVLS, NVLS tree and
#: CollNet off, so NCCL chooses between ring and tree.
CORE_WEAVE_GB200_ENV: NcclEnv = NcclEnv.parse(
    [("NCCL_NVLS_ENABLE", "0"), ("NCCL_COLLNET_ENABLE", "0")], where=CORE_WEAVE_GB200_JOB
)

#: The only CPU DeepBench states, possibly of another box: the ``Specs`` sheet of both training
#: workbooks,
#: ``results/train/DeepBench_NV_P100.xlsx`` and ``DeepBench_NV_1080Ti.xlsx`` (baidu-research/
#: DeepBench @da81ba782073; the README: the libraries used "are mentioned in each of Excel
#: workbooks in `Specs` sheet"), cell B1: "Intel(R) Xeon(R) CPU E5-2690 v4@2.60GHz 3.5GHz Turbo
#: (Broadwell) HT On" (same sheet: CUDA 8.0.88, driver 375.66, kernel 3.13.0-57). The same sheet
#: names an ASUS X99-E WS board (one socket, seven x16 slots), which cannot hold the 8- or 10-GPU
#: all-reduce servers the README describes: the sheet likely describes the box of the single-GPU
#: kernels, so this CPU is not known to be the all-reduce servers'. What the model reads is the
#: vendor alone (NCCL's Intel P2P TLP overhead, 6/5, on paths through one root complex), which
#: the README's 8-GPU topology states for that box ("The two CPU sockets are connected via Intel
#: QPI"); for the 10-GPU 1080 Ti box the Intel vendor rests on this sheet only.
DEEPBENCH_CPU = "Intel Xeon E5-2690 v4 (Broadwell; DeepBench workbook Specs sheet)"


#: vTrain's nccl-tests process layout: not stated; nccl-tests' README single-node example
#: (``all_reduce_perf -b 8 -e 128M -f 2 -g 8``: one process, eight GPUs) taken.
VTRAIN_PROCESSES = ProcessLayout.PER_SERVER


@dataclass(frozen=True)
class CommScenario:
    row_id: str
    system: str
    nodes: int
    gpus: int
    op: CollectiveOp
    message_bytes: int
    metric: str  # "busbw" or "time"
    measured: float  # bytes/s or seconds
    interconnect: str  # NVLink | NVSwitch | PCIe | InfiniBand
    note: str = ""
    network: str | None = None
    gpu: str | None = None
    sharp: bool = False
    nccl: str | None = None
    """NCCL release the source states (its P2P rule, ``with_nccl_p2p_rule``); ``None``: the
    default release's rule, as loading applies it."""
    cpu_model: str | None = None
    """CPU model the source states (free text), replacing the catalogue's."""
    algorithm: str = "auto"
    """The algorithm the run forced (nccl-tests with ``NCCL_ALGO``), else ``auto``."""
    env: NcclEnv = DEFAULT_ENV
    """The run's NCCL environment (``NCCL_NVLS_ENABLE=0``, ``NCCL_COLLNET_ENABLE=0``): NCCL's
    choice weighs what it leaves on (:class:`~perfmodel.comm.nccl_env.NcclEnv`)."""
    processes: ProcessLayout = ProcessLayout.PER_GPU
    """The run's process layout (:class:`~perfmodel.comm.p2p_read.ProcessLayout`): one per GPU
    (MPI / srun with ``-g 1``, CoreWeave's jobs) unless the mapping says otherwise."""


@dataclass(frozen=True)
class CommSkip:
    row_id: str
    reason: str


@dataclass(frozen=True)
class CommComparison:
    scenario: CommScenario
    predicted: float
    algorithm: str

    @property
    def error(self) -> float:
        """Signed relative error of the prediction (predicted / measured - 1)."""
        return self.predicted / self.scenario.measured - 1.0

    @property
    def large(self) -> bool:
        return self.scenario.message_bytes >= LARGE_BYTES


def _size_from(row: dict[str, Any]) -> int | None:
    m = re.search(r"message (\d+) B", row.get("notes", ""))
    if m:
        return int(m.group(1))
    m = re.search(r"-(\d+)B$", row["id"])
    if m:
        return int(m.group(1))
    m = re.search(r"all_reduce of (\d+) float32", row.get("model", ""))
    if m:
        return 4 * int(m.group(1))
    return None


def map_row(row: dict[str, Any]) -> CommScenario | CommSkip:
    """The scenario a published row describes, or why it cannot be mapped."""
    rid = row["id"]
    hw = row["hardware"]
    if rid.startswith("ptdp-comm"):
        return CommSkip(
            rid, "aggregate bisection bandwidth observed during training, not a collective time"
        )
    size = _size_from(row)
    if size is None:
        return CommSkip(rid, "message size not stated")
    gpus = int(hw["gpus"])
    value = float(row["value"])
    unit = row["unit"]
    if unit == "GB/s":
        metric, measured = "busbw", value * GB
    elif unit == "ms":
        metric, measured = "time", value * ms
    elif unit == "us":
        metric, measured = "time", value * us
    else:
        return CommSkip(rid, f"unit {unit!r} not handled")
    op = CollectiveOp.ALLREDUCE
    if rid.startswith("vtrain-ar-a100"):
        return CommScenario(
            rid, "dgx-a100", 1, gpus, op, size, metric, measured, "NVSwitch",
            processes=VTRAIN_PROCESSES,
        )  # fmt: skip
    if rid.startswith("vtrain-ar-v100"):
        return CommScenario(
            rid, "dgx1-v100", 1, gpus, op, size, metric, measured, "NVLink",
            processes=VTRAIN_PROCESSES,
        )  # fmt: skip
    if rid.startswith("deepbench-ar-p100"):
        nodes = max(1, gpus // 8)
        ic = "PCIe" if nodes == 1 else "InfiniBand"
        return CommScenario(
            rid, "pcie-8x-server", nodes, gpus, op, size, metric, measured, ic,
            note="DeepBench time = fastest of NCCL 2.0 / MPI / OSU / Baidu ring; NCCL 2.0 P2P "
            "rule (not across sockets), Intel host (README: QPI; the Specs sheet's E5-2690 v4, "
            "possibly another box)",
            network="ib-fdr" if nodes > 1 else None, gpu="P100-PCIE-16GB",
            nccl=stated_nccl(row), cpu_model=DEEPBENCH_CPU,
        )  # fmt: skip
    if rid.startswith("deepbench-ar-1080ti"):
        if gpus > 8:
            return CommSkip(rid, "inter-node link of the 1080 Ti cluster not stated")
        return CommScenario(
            rid, "deepbench-10gpu", 1, gpus, op, size, metric, measured, "PCIe",
            note="10-GPU single-root server built from the DeepBench README; Intel CPU: the "
            "workbook's Specs sheet (E5-2690 v4), the only one stated, possibly of another box",
            nccl=stated_nccl(row), cpu_model=DEEPBENCH_CPU,
        )  # fmt: skip
    if rid.startswith("coreweave-a100"):
        if size < 1 << 20:
            return CommSkip(rid, "busbw printed as 0.00 GB/s (below the log's resolution)")
        return CommScenario(
            rid, "dgx-a100", gpus // 8, gpus, op, size, metric, measured, "InfiniBand",
            note="assumed fabric: 8x HDR rail, the DGX SuperPOD design the README states "
            "(HCA count/speed per node not stated)",
        )  # fmt: skip
    if rid.startswith("coreweave-gb200"):
        return map_gb200(row, size, measured, metric)
    if rid.startswith("coreweave-h100"):
        return CommScenario(
            rid, "dgx-h100", gpus // 8, gpus, op, size, metric, measured, "InfiniBand",
            note="fabric marked SHARP-capable (job name)", sharp=True,
        )  # fmt: skip
    return CommSkip(rid, "no mapping for this source")


def map_gb200(
    row: dict[str, Any], size: int, measured: float, metric: str
) -> CommScenario | CommSkip:
    """A CoreWeave GB200 NVL72 row as ``gb200-nvl72`` racks: ``gpus / 72`` racks (servers),
    the catalogue fabric (one ConnectX-7 NDR 400 Gb/s NIC per GPU, fat tree 1:1), NCCL 2.26
    as the row states, NVLS / NVLS tree / CollNet off (:data:`CORE_WEAVE_GB200_JOB`).

    The row's fabric text (Quantum-X800 InfiniBand with SHARP) names the switches; the job
    turns CollNet off, so SHARP takes no part, and it names four HCAs per 4-GPU tray without
    their speed: the catalogue's NDR 400 Gb/s NIC is assumed (NVIDIA DGX SuperPOD GB200
    reference: one ConnectX-7 400 Gb/s per GPU).
    """

    rid = row["id"]
    gpus = int(row["hardware"]["gpus"])
    rack = gpus_per_server("gb200-nvl72")  # one NVLink domain, as the catalogue file states it
    if gpus % rack:
        return CommSkip(rid, f"{gpus} GPUs is not a whole number of {rack}-GPU NVL72 racks")
    racks = gpus // rack
    return CommScenario(
        rid, "gb200-nvl72", racks, gpus, CollectiveOp.ALLREDUCE, size, metric, measured,
        "GB200 NVL72",
        note=f"{racks} rack(s) of {rack}; NVLS and CollNet off, ring or tree ({CORE_WEAVE_GB200_JOB}"
        f"{'' if racks > 2 else '; assumed for this log: first posted with an NVLS-on job, PR #43'}"
        "); assumed NIC speed: NDR 400 Gb/s, one per GPU (4 HCAs per tray stated, speed not)",
        nccl=stated_nccl(row), env=CORE_WEAVE_GB200_ENV,
    )  # fmt: skip


def deepbench_10gpu_server() -> Topology:
    """DeepBench's 10-GPU 1080 Ti box: one CPU root port tree, 2 PCIe switches x 5 GPUs (README)."""
    from perfmodel.topology.cluster import build_cluster
    from perfmodel.topology.io import parse_server

    nodes: list[dict[str, Any]] = [
        {"id": "cpu0", "kind": "cpu"},
        {"id": "plx0", "kind": "pcie_switch"},
        {"id": "plx1", "kind": "pcie_switch"},
    ]
    links: list[dict[str, Any]] = [
        {"a": "cpu0", "b": "plx0", "tech": "pcie3-x16"},
        {"a": "cpu0", "b": "plx1", "tech": "pcie3-x16"},
    ]
    for i in range(10):
        nodes.append({"id": f"gpu{i}", "kind": "gpu"})
        links.append({"a": f"plx{i // 5}", "b": f"gpu{i}", "tech": "pcie3-x16"})
    data = {
        "system": {
            "name": "deepbench-10gpu",
            "description": "DeepBench 10-GPU system: single root, 2 PLX switches x 5 GPUs",
            "gpu": "GTX-1080-Ti",
            "sources": ["baidu-research/DeepBench README, 'Topology for NVIDIA 10 GPU System'"],
        },
        "node": nodes,
        "link": links,
    }
    return build_cluster(parse_server(data, source="deepbench-10gpu"), 1, None)


def _model(
    system: str,
    nodes: int,
    network: str | None,
    gpu: str | None,
    sharp: bool = False,
    p2p: bool | None = None,
    nccl: str | None = None,
    cpu_model: str | None = None,
    env: NcclEnv = DEFAULT_ENV,
    processes: ProcessLayout = ProcessLayout.PER_GPU,
) -> CommCostModel:
    """The communication model of a scenario's system (memoised by :func:`_model_cached`, whose
    key holds the system file's :func:`~perfmodel._io.system_file_stamp`: a ``.toml`` row of
    ``validate --published DIR`` edited, or named again from another folder, is read again)."""
    stamp = system_file_stamp(system)
    args = (system, nodes, network, gpu, sharp, p2p, nccl, cpu_model, env, processes)
    return _model_cached(*args, stamp)


@lru_cache(maxsize=32)
def _model_cached(
    system: str,
    nodes: int,
    network: str | None,
    gpu: str | None,
    sharp: bool,
    p2p: bool | None,
    nccl: str | None,
    cpu_model: str | None,
    env: NcclEnv,
    processes: ProcessLayout,
    _stamp: tuple[str, int, int] | None,
) -> CommCostModel:
    from perfmodel.topology.nccl_p2p import NcclRelease, with_nccl_p2p_rule

    if system == "deepbench-10gpu":
        topo = deepbench_10gpu_server()
    else:
        topo = load_system(system, nodes=nodes, network=network, gpu=gpu)
    if sharp:
        topo = topo.with_sharp(True)
    if cpu_model is not None:
        topo = _with_cpu_model(topo, cpu_model)
    if nccl is not None or cpu_model is not None:
        # the rule depends on the CPU: re-derived after a CPU change (the release applied at load
        # time where the scenario states none)
        release = NcclRelease.parse(nccl, where="comm validation") if nccl is not None else None
        topo = with_nccl_p2p_rule(topo, release)
    if p2p is not None:
        topo = topo.with_p2p(p2p)
    if not env.default:
        topo = with_nccl_env(topo, env)
    if processes is not ProcessLayout.PER_GPU:
        topo = with_process_layout(topo, processes)
    return CommCostModel(topo)


def _with_cpu_model(topo: Topology, model: str) -> Topology:
    """The same system with every CPU node's ``model`` set to what the source states."""
    import dataclasses

    from perfmodel.topology.schema import NodeKind

    g = topo.graph.copy()
    for n in topo.nodes_of_kind(NodeKind.CPU):
        g.nodes[n]["model"] = model
    # every CPU changed alike: the cluster's build record still describes the copy
    return dataclasses.replace(topo, graph=g, pattern=topo._pattern_on(g))


def compare(
    sc: CommScenario, *, p2p: bool | None = None, cpu_model: str | None = None
) -> CommComparison:
    """Run the model on a scenario (analytic fidelity, ``auto`` algorithm). ``p2p`` forces GPU
    peer-to-peer on or off and ``cpu_model`` replaces the CPUs (what-ifs for findings, never the
    mapping itself)."""
    model = _model(
        sc.system, sc.nodes, sc.network, sc.gpu, sc.sharp, p2p, sc.nccl,
        cpu_model or sc.cpu_model, sc.env, sc.processes,
    )  # fmt: skip
    group = model.topology.gpus[: sc.gpus]
    r = model.collective(sc.op, sc.message_bytes, group, sc.algorithm)
    pred = r.busbw_Bps if sc.metric == "busbw" else r.time_s
    algo = r.algorithm.value + (f"/{r.protocol.value}" if r.protocol else "")
    return CommComparison(sc, pred, algo)
