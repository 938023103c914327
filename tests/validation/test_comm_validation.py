"""Validation tier: collective communication against published measurements.

Rows: ``published.jsonl`` kind ``comm_microbenchmark`` (vTrain A100/V100 all-reduce curves,
DeepBench PCIe all-reduce times, CoreWeave nccl-tests logs, Megatron-LM numbers), mapped by
:func:`perfmodel.comm.validation.map_row` (the mapping and every skip reason are documented
there). No calibration: catalogue link numbers and NCCL's tuner constants only.

Targets (issue 3): large-message (>= 64 MiB) bus bandwidth within 15 % on single-node NVLink /
NVSwitch, within 25 % on PCIe and multi-node rows. The tests assert the median absolute error
of each interconnect group against its target; groups that miss are strict xfails whose reason
states the finding (so a fix shows up as XPASS). Run with ``-s`` to see the table.
"""

from __future__ import annotations

import statistics
from collections import defaultdict

import pytest

from perfmodel.comm.validation import CommComparison, CommScenario, CommSkip, compare, map_row

pytestmark = pytest.mark.validation

TARGET = {
    "NVLink": 0.15,
    "NVSwitch": 0.15,
    "PCIe": 0.25,
    "InfiniBand": 0.25,
    "GB200 NVL72": 0.25,
}
FINDINGS = {
    "PCIe": (
        "DeepBench P100 box measures ~5-6 GB/s bus bandwidth at every GPU count, even for 2 GPUs "
        "under one PCIe switch, where NCCL 2.0 always uses P2P (PIX; SHM only across sockets, "
        "which the mapping applies, with the Intel P2P TLP overhead of the Xeon E5-2690 v4 the "
        "workbook's Specs sheet states): only a host without GPU peer-to-peer (ACS/IOMMU, "
        "virtualisation) gives that, which the model reproduces with p2p off (printed below) but "
        "the source does not state (the Specs sheet: kernel 3.13.0-57, driver 375.66, CUDA "
        "8.0.88; no P2P/ACS setting); the 1080 Ti rows, same CPU, are within 19 %"
    ),
    "InfiniBand": (
        "CoreWeave A100 plateaus at 115 GB/s where 8 x HDR gives 184: the README states the A100 "
        "HGX clusters are 'built to the design of NVIDIA DGX SuperPODs' with Quantum InfiniBand "
        "and SHARP (the 8 x HDR rail the mapping assumes), the job selects NCCL_IB_HCA=ibp and "
        "rdma/ib: 1, and its image (coreweave/nccl-tests:2022-07-05, the initial Dockerfile: "
        "nvidia/cuda 11.6.2 devel base, HPC-X 2.11, SHARP plugin from master) loads libsharp, "
        "whose group messages are in the log; not stated: the NCCL release of that image (the "
        "README's table gives 2.12 for the 2022-09-28 image on the same CUDA base), GPUDirect "
        "RDMA (nvidia-peermem) and the HCAs per node; DeepBench P100 16-GPU rows >= 16M floats "
        "were measured with Baidu's MPI RingAllReduce (the workbook's 'Selected Algorithm'), "
        "not NCCL, over FDR (NICs per server and GPUDirect RDMA not stated)"
    ),
}


@pytest.fixture(scope="module")
def results(published_rows: list[dict]) -> list[CommComparison | CommSkip]:
    rows = [r for r in published_rows if r["kind"] == "comm_microbenchmark"]
    out: list[CommComparison | CommSkip] = []
    for r in rows:
        sc = map_row(r)
        out.append(sc if isinstance(sc, CommSkip) else compare(sc))
    return out


def _table(results: list[CommComparison | CommSkip]) -> str:
    lines = [
        f"{'row':42} {'interconnect':11} {'bytes':>11} {'metric':6} {'measured':>10} "
        f"{'predicted':>10} {'error':>8}  algorithm / note"
    ]
    for c in results:
        if isinstance(c, CommSkip):
            continue
        sc = c.scenario
        fmt = (
            (lambda v: f"{v / 1e9:8.2f}G")
            if sc.metric == "busbw"
            else (lambda v: f"{v * 1e3:7.3f}ms")
        )
        lines.append(
            f"{sc.row_id:42} {sc.interconnect:11} {sc.message_bytes:>11} {sc.metric:6} "
            f"{fmt(sc.measured):>10} {fmt(c.predicted):>10} {c.error * 100:+7.1f}%  {c.algorithm}"
            + (f"; {sc.note}" if sc.note else "")
        )
    by: dict[str, list[float]] = defaultdict(list)
    by_all: dict[str, list[float]] = defaultdict(list)
    for c in results:
        if isinstance(c, CommComparison):
            by_all[c.scenario.interconnect].append(c.error)
            if c.large:
                by[c.scenario.interconnect].append(c.error)
    lines.append("")
    lines.append(
        "median |error| (worst signed) by interconnect: large messages (>= 64 MiB) | all sizes"
    )
    for ic in TARGET:
        if ic not in by_all:
            continue
        large = by.get(ic, [])
        worst = max(large, key=abs) if large else float("nan")
        lines.append(
            f"  {ic:11} {statistics.median(map(abs, large)) * 100:6.1f}% ({worst * 100:+.1f}%, n={len(large)})"
            f" | {statistics.median(map(abs, by_all[ic])) * 100:6.1f}% (n={len(by_all[ic])})"
            f"   target {TARGET[ic] * 100:.0f}%"
        )
    skips = [c for c in results if isinstance(c, CommSkip)]
    lines.append(f"skipped {len(skips)} row(s):")
    reasons: dict[str, list[str]] = defaultdict(list)
    for s in skips:
        reasons[s.reason].append(s.row_id)
    for reason, ids in reasons.items():
        lines.append(f"  {len(ids)} x {reason} ({ids[0]}{', ...' if len(ids) > 1 else ''})")
    return "\n".join(lines)


def _p2p_off_finding(results: list[CommComparison | CommSkip]) -> str:
    """What-if, not a mapping: the DeepBench P100 rows with GPU peer-to-peer off (SHM path)."""
    errs = []
    for c in results:
        if isinstance(c, CommComparison) and c.scenario.row_id.startswith("deepbench-ar-p100"):
            if c.large:
                errs.append(compare(c.scenario, p2p=False).error)
    if not errs:
        return ""
    return (
        f"finding: DeepBench P100 rows >= 64 MiB with p2p off (NCCL SHM through host memory): "
        f"median |error| {statistics.median(map(abs, errs)) * 100:.1f}% "
        f"(worst {max(errs, key=abs) * 100:+.1f}%, n={len(errs)}); not counted (P2P not stated)"
    )


def test_print_error_table(results):
    print("\n" + _table(results))
    print(_p2p_off_finding(results))
    mapped = [c for c in results if isinstance(c, CommComparison)]
    assert len(mapped) >= 50
    assert all(c.predicted > 0 for c in mapped)


def _median_large(results, ic: str) -> float:
    errs = [
        abs(c.error)
        for c in results
        if isinstance(c, CommComparison) and c.large and c.scenario.interconnect == ic
    ]
    assert errs, ic
    return statistics.median(errs)


@pytest.mark.parametrize("ic", ["NVLink", "NVSwitch"])
def test_single_node_nvlink_within_target(results, ic):
    assert _median_large(results, ic) <= TARGET[ic]


@pytest.mark.parametrize("ic", ["PCIe", "InfiniBand"])
def test_pcie_and_multinode_targets(results, ic):
    if _median_large(results, ic) > TARGET[ic]:
        pytest.xfail(FINDINGS[ic])
    assert _median_large(results, ic) <= TARGET[ic]


def test_dgx1_nvlink_rows_are_tight(results):
    """The NVLink2 cube-mesh rows test the ring construction itself: every large row within 6 %."""
    errs = [
        c.error
        for c in results
        if isinstance(c, CommComparison) and c.large and c.scenario.interconnect == "NVLink"
    ]
    assert len(errs) == 9 and max(map(abs, errs)) < 0.06


def test_deepbench_p100_mapped_as_nccl_2_0_on_an_intel_host(published_rows):
    """Hand value: 4 P100 across CPU 0's two PCIe switches, NCCL 2.0 uses P2P through the root
    complex (PHB), which the Intel host forwards as 64-byte TLPs: ring bus bandwidth = PCIe 3.0
    x16 goodput / 1.2; NCCL 2.8 ring/Simple all-reduce: latency 8.4 + 6 x 5.7 us, algorithm
    bandwidth = bus x 4/6."""
    from perfmodel.hardware.links import get_link

    row = next(r for r in published_rows if r["id"] == "deepbench-ar-p100-64500000-4g")
    sc = map_row(row)
    assert isinstance(sc, CommScenario) and sc.nccl == "2.0"
    link = get_link("pcie3-x16")
    bus = link.bandwidth_Bps * link.efficiency / 1.2
    hand = (8.4 + 6 * 5.7) * 1e-6 + sc.message_bytes / (bus * 4 / 6)
    assert compare(sc).predicted == pytest.approx(hand, rel=1e-9)


def test_deepbench_rows_run_on_the_cpu_their_workbook_states(published_rows):
    """Every mapped DeepBench row (P100 and 1080 Ti) carries the CPU of its workbook's Specs
    sheet, an Intel Xeon E5-2690 v4 (Broadwell), so NCCL 2.0's P2P through one root complex
    pays Intel's TLP overhead on both boxes."""
    from perfmodel.comm.validation import DEEPBENCH_CPU
    from perfmodel.topology.nccl_p2p import HostCpu

    assert HostCpu.from_text(DEEPBENCH_CPU) is HostCpu.INTEL_BROADWELL
    mapped = [map_row(r) for r in published_rows if r["id"].startswith("deepbench-ar-")]
    mapped = [sc for sc in mapped if isinstance(sc, CommScenario)]
    assert {sc.system for sc in mapped} == {"pcie-8x-server", "deepbench-10gpu"}
    assert all(sc.cpu_model == DEEPBENCH_CPU for sc in mapped)


def test_deepbench_1080ti_ring_through_the_intel_root_pays_the_p2p_overhead(published_rows):
    """Hand values on the 10-GPU single-root box (2 PCIe switches x 5 GPUs), NCCL 2.0 ring/Simple
    all-reduce of 258 MB, latency 8.4 us + 2(n-1) x 5.7 us: 4 GPUs under one switch run at PCIe
    3.0 x16 goodput (bus bandwidth; algorithm bandwidth x 4/6); 8 GPUs cross the Intel root
    complex between the switches, whose P2P TLPs cost 6/5: goodput / 1.2 (algorithm x 8/14)."""
    from perfmodel.hardware.links import get_link

    by_id = {r["id"]: r for r in published_rows}
    link = get_link("pcie3-x16")
    goodput = link.bandwidth_Bps * link.efficiency
    for n, bus in ((4, goodput), (8, goodput / 1.2)):
        sc = map_row(by_id[f"deepbench-ar-1080ti-64500000-{n}g"])
        assert isinstance(sc, CommScenario)
        steps = 2 * (n - 1)
        hand = (8.4 + steps * 5.7) * 1e-6 + sc.message_bytes / (bus * n / steps)
        assert compare(sc).predicted == pytest.approx(hand, rel=1e-9)


# ------------------------------------------------------------------- GB200 NVL72 (CoreWeave)
GB200_ROWS = {
    # id: (racks, GPUs, bytes)
    "coreweave-gb200-nvl72-1rack-536870912B": (1, 72, 512 * 2**20),
    "coreweave-gb200-nvl72-1rack-8589934592B": (1, 72, 8 * 2**30),
    "coreweave-gb200-2racks-536870912B": (2, 144, 512 * 2**20),
    "coreweave-gb200-2racks-17179869184B": (2, 144, 16 * 2**30),
    "coreweave-gb200-20racks-536870912B": (20, 1440, 512 * 2**20),
    "coreweave-gb200-20racks-17179869184B": (20, 1440, 16 * 2**30),
}


def test_gb200_rows_map_to_nvl72_racks_with_nvls_and_collnet_off(published_rows):
    """Golden mapping: every CoreWeave GB200 row is ``gb200-nvl72`` with one rack per server,
    the size its id states, NCCL 2.26.2 and NVLS / NVLS tree / CollNet off (the job's
    ``NCCL_NVLS_ENABLE=0``, ``NCCL_COLLNET_ENABLE=0``); none is skipped."""
    from perfmodel.comm.params import Algorithm
    from perfmodel.ops import CollectiveOp

    by_id = {r["id"]: r for r in published_rows}
    assert {i for i in by_id if i.startswith("coreweave-gb200")} == set(GB200_ROWS)
    for rid, (racks, gpus, size) in GB200_ROWS.items():
        sc = map_row(by_id[rid])
        assert isinstance(sc, CommScenario), sc
        assert (sc.system, sc.nodes, sc.gpus, sc.message_bytes) == (
            "gb200-nvl72",
            racks,
            gpus,
            size,
        )
        assert (sc.metric, sc.interconnect, sc.nccl, sc.sharp) == (
            "busbw",
            "GB200 NVL72",
            "2.26.2",
            False,
        )
        off = set(sc.env.off(CollectiveOp.ALLREDUCE))
        assert off == {Algorithm.NVLS, Algorithm.NVLS_TREE, Algorithm.COLLNET}
        assert sc.measured == pytest.approx(float(by_id[rid]["value"]) * 1e9)
        assert "assumed" in sc.note and "NCCL_NVLS_ENABLE=0" in sc.note


def test_gb200_row_of_part_of_a_rack_is_skipped_with_the_reason(published_rows):
    """A GB200 row whose GPU count is not whole racks is skipped (like every unmappable row),
    not an error that would stop the validation tier."""
    from perfmodel.comm.validation import CommSkip

    row = next(r for r in published_rows if r["id"].startswith("coreweave-gb200"))
    odd = {**row, "hardware": {**row["hardware"], "gpus": 36}}
    got = map_row(odd)
    assert isinstance(got, CommSkip) and "36 GPUs is not a whole number" in got.reason


def test_gb200_rack_takes_ring_or_tree_never_nvls(published_rows):
    """With NVLS off, the full rack's all-reduce is NCCL's faster of ring and tree (by the
    tuner's time), and the catalogue rack alone would have chosen NVLS."""
    from dataclasses import replace

    row = next(r for r in published_rows if r["id"] == "coreweave-gb200-nvl72-1rack-8589934592B")
    sc = map_row(row)
    assert isinstance(sc, CommScenario)
    c = compare(sc)
    assert c.algorithm.split("/")[0] in ("ring", "tree")
    ring, tree = (compare(replace(sc, algorithm=a)) for a in ("ring", "tree"))
    # busbw of one size: the faster algorithm has the larger busbw
    assert c.predicted == max(ring.predicted, tree.predicted)
    from perfmodel.comm.nccl_env import DEFAULT_ENV

    assert compare(replace(sc, env=DEFAULT_ENV)).algorithm == "nvls/Simple"


def test_gb200_accuracy_line(published_rows):
    """The accuracy table has its own GB200 NVL72 collectives line over all six rows."""
    from perfmodel.accuracy import _collective_rows

    rows = [r for r in published_rows if r["kind"] == "comm_microbenchmark"]
    (line,) = [r for r in _collective_rows(rows) if "GB200 NVL72" in r.what]
    assert line.what == (
        "collectives, large messages, GB200 NVL72 (NVLink domain and across racks)"
    )
    assert line.rows == len(GB200_ROWS)
    assert line.target == 0.25


GB200_20_RACKS_FINDING = (
    "20 racks (1,440 GPUs, NVLS off): predicted NCCL tree at 308 GB/s busbw (512 MiB) and "
    "381 (16 GiB), measured 151 / 406 (+104% / -6%). The 16 GiB row is now within the target: "
    "NCCL 2.26.2's own table (Blackwell tree cap 2 x 36 = 72 GB/s per channel beyond two "
    "nodes, v2.26.2-1 src/graph/tuning.cc) chooses the tree there, priced by the 2.29 cap "
    "(24 GB/s x NCCL's 16 graph channels, comm/tuner.py pricing_tuner); it was +49% with the "
    "2.29 table choosing the ring. The 512 MiB row stays a miss: the measured curve "
    "(coreweave/nccl-tests README, 6 sizes) is a line, ~4.6 ms fixed + busbw ~430 GB/s "
    "asymptote; the fixed cost is 7x the tuner's tree latency (0.69 ms) and unexplained by a "
    "number in NCCL's source: NCCL's author says trees need 32 SMs for peak, 16 by default, "
    "and 'rings degrade at scale' (NVIDIA/nccl#1649). Not sourced to a number: a tree pipeline "
    "fill through the 72-GPU rack chain (a whole 512 KiB Simple step per hop would add ~3 ms "
    "at 20 racks but also at 2 racks, where 512 MiB is measured within 1% of the tuner's "
    "tree), the NICs NCCL's ring uses per rack (16 graph channels: 16 NICs, ~736 GB/s against "
    "the model's 32), and the 20-rack fabric (not stated)"
)


def test_gb200_20_racks_within_multinode_target(results):
    """Each 20-rack GB200 row within the 25 % multi-node target (a strict known miss: the
    512 MiB row)."""
    errs = [
        c.error
        for c in results
        if isinstance(c, CommComparison) and c.scenario.row_id.startswith("coreweave-gb200-20")
    ]
    assert len(errs) == 2
    if max(map(abs, errs)) > TARGET["GB200 NVL72"]:
        pytest.xfail(GB200_20_RACKS_FINDING)
    assert max(map(abs, errs)) <= TARGET["GB200 NVL72"]


def test_gb200_one_and_two_racks_within_target(results):
    """One and two racks (NVLink domain, then 2 racks over InfiniBand): every row within 10 %."""
    errs = [
        c.error
        for c in results
        if isinstance(c, CommComparison)
        and c.scenario.row_id.startswith("coreweave-gb200")
        and c.scenario.nodes <= 2
    ]
    assert len(errs) == 4
    assert max(map(abs, errs)) < 0.10
