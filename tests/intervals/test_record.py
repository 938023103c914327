"""The residual record: rows, sources, the derived speedup pairs, the file format, and the
features a scenario has (:mod:`perfmodel.intervals.record`, :mod:`perfmodel.intervals.features`)."""

from __future__ import annotations

import math

import pytest

from perfmodel.api import Scenario
from perfmodel.errors import ConfigError
from perfmodel.intervals.features import (
    CollectiveFeatures,
    Interconnect,
    KernelFeatures,
    Quantity,
    StepFeatures,
    gpu_band,
    interconnect_of,
    step_features,
)
from perfmodel.intervals.record import (
    ResidualRow,
    parse_record,
    read_record,
    record_path,
    source_key,
    to_jsonl,
)
from perfmodel.intervals.residuals import speedup_rows
from perfmodel.topology import load_system


def _step(gpus: int) -> StepFeatures:
    return StepFeatures(
        "A100-SXM4-80GB", "Ampere", Interconnect.NVSWITCH, "pytorch-ddp", "pytorch", "tf32",
        "cnn", 25.6e6, ("dp",) if gpus > 1 else (), gpus,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("text", "key"),
    [
        (
            "NVIDIA/DeepLearningExamples @78ec680207ad PyTorch/LanguageModeling/BERT/README.md, 'P'",
            "NVIDIA/DeepLearningExamples PyTorch/LanguageModeling/BERT",
        ),
        (
            "lambdal/deeplearning-benchmark @aa5addb6a536 pytorch/pytorch-train-throughput-fp16.csv",
            "lambdal/deeplearning-benchmark pytorch",
        ),
        (
            "coreweave/nccl-tests @a0cb1a67e9a5 README.md (example launcher log)",
            "coreweave/nccl-tests",
        ),
        (
            "togethercomputer/together-dgxc-benchmarking@661e8e14461c672315ea1a129380fb2e84b8dcc2 "
            "worklog/2026-04-27_nccl_rebaseline_report.md, 'Results'",
            "togethercomputer/together-dgxc-benchmarking worklog",
        ),
        ("Narayanan et al., 'Efficient Large-Scale ...' (SC21), Table 1", "Narayanan et al."),
    ],
)
def test_source_key(text: str, key: str) -> None:
    assert source_key(text) == key


def test_two_releases_of_one_page_are_one_source() -> None:
    a = "NVIDIA/DeepLearningExamples @729963dd47e7 PyTorch/LanguageModeling/BERT/README.md, 'x'"
    b = "NVIDIA/DeepLearningExamples @78ec680207ad PyTorch/LanguageModeling/BERT/README.md, 'y'"
    assert source_key(a) == source_key(b)


def test_speedup_rows_pair_each_count_with_the_series_smallest() -> None:
    """Throughput rows at 1, 2 and 8 GPUs: pairs 2/1 and 8/1; an iteration-time series pairs
    the inverse times; the ratio's residual is the difference of the two rows' residuals."""
    rows = [
        ResidualRow("t1", "f", "S", Quantity.STEP, "g", "throughput", 1, 110.0, 100.0, _step(1), "s1"),
        ResidualRow("t2", "f", "S", Quantity.STEP, "g", "throughput", 1, 200.0, 190.0, _step(2), "s1"),
        ResidualRow("t8", "f", "S", Quantity.STEP, "g", "throughput", 1, 800.0, 640.0, _step(8), "s1"),
        ResidualRow("i1", "f", "S", Quantity.STEP, "g", "iteration", -1, 1.0, 1.1, _step(1), "s2"),
        ResidualRow("i2", "f", "S", Quantity.STEP, "g", "iteration", -1, 1.2, 1.2, _step(2), "s2"),
        ResidualRow("x", "f", "S", Quantity.STEP, "g", "throughput", 1, 1.0, 1.0, _step(4)),
    ]  # fmt: skip
    pairs = {p.row_id: p for p in speedup_rows(rows)}
    assert set(pairs) == {"t2/t1", "t8/t1", "i2/i1"}
    p = pairs["t8/t1"]
    assert (p.predicted, p.measured) == pytest.approx((800 / 110, 640 / 100))
    assert p.speed_residual == pytest.approx(math.log(800 / 640) - math.log(110 / 100))
    assert p.quantity is Quantity.SPEEDUP and p.features.gpus == 8
    i = pairs["i2/i1"]  # speed = 1 / time: predicted 1/1.2 / (1/1.0), measured 1/1.2 / (1/1.1)
    assert (i.predicted, i.measured) == pytest.approx((1.0 / 1.2, 1.1 / 1.2))


def test_record_round_trip_and_bad_input() -> None:
    r = ResidualRow(
        "a", "published.jsonl", "S", Quantity.STEP, "g", "throughput", 1, 1.5, 1.25, _step(8),
        "s1", (0.1, -0.2),
    )  # fmt: skip
    text = to_jsonl([r])
    assert parse_record(text) == (r,)
    assert text.splitlines()[0].startswith('{"format": 1')
    with pytest.raises(ConfigError, match="format 99"):
        parse_record('{"format": 99}\n')
    with pytest.raises(ConfigError, match=r"residuals\.jsonl:2: invalid JSON"):
        parse_record("\n{\n")
    for line in ("[1]", "3", '"x"'):  # a JSON line that is no object: an error, not a crash
        with pytest.raises(ConfigError, match=r"residuals\.jsonl:1: expected a JSON object"):
            parse_record(line)
    with pytest.raises(ConfigError, match="malformed"):
        parse_record('{"id": "x", "quantity": "step"}\n')
    bad = text.replace('"predicted": 1.5', '"predicted": -1.5')
    with pytest.raises(ConfigError, match="positive values"):
        parse_record(bad)


def test_shipped_record_reads() -> None:
    rows = read_record()
    assert rows and all(r.score is not None for r in rows)
    assert {r.quantity for r in rows} == set(Quantity)
    assert len({r.row_id for r in rows}) == len(rows)


def test_shipped_record_rewrites_to_the_same_text() -> None:
    """Every feature kind (step, collective, kernel) reads back and writes out as the file
    holds it: field order, enums as their values, tuples as lists, numbers unchanged."""
    path = record_path()
    rows = read_record(path)
    assert {type(r.features) for r in rows} == {StepFeatures, CollectiveFeatures, KernelFeatures}
    assert to_jsonl(rows) == path.read_text(encoding="utf-8")


@pytest.mark.parametrize(
    ("system", "nodes", "gpus", "want"),
    [
        ("dgx-a100", 1, 1, Interconnect.SINGLE),
        ("dgx-a100", 1, 8, Interconnect.NVSWITCH),
        ("dgx-a100", 2, 16, Interconnect.INFINIBAND),
        ("dgx1-v100", 1, 8, Interconnect.NVLINK),
        ("pcie-8x-server", 1, 4, Interconnect.PCIE),
        ("mi300x-8", 1, 8, Interconnect.NVLINK),  # xGMI, RCCL's NVLink class
    ],
)
def test_interconnect_of(system: str, nodes: int, gpus: int, want: Interconnect) -> None:
    assert interconnect_of(load_system(system, nodes=nodes), gpus) is want


def test_interconnect_of_a_cluster_reads_two_servers() -> None:
    """Every GPU of a 64-server cluster: the network, read off the first and the last server
    (the lazily built cluster makes no other; reading every GPU made all 64)."""
    topo = load_system("dgx-a100", nodes=64)
    made = topo.graph._node._filler.made
    assert interconnect_of(topo, topo.num_gpus) is Interconnect.INFINIBAND
    assert made <= {0, 63}
    assert interconnect_of(topo, 8) is Interconnect.NVSWITCH  # the first server alone


def test_interconnect_of_roce_is_ethernet_and_a_group_spanning_servers_is_the_network() -> None:
    topo = load_system("dgx-a100", nodes=2, network="roce-100g")
    assert interconnect_of(topo, 16) is Interconnect.ETHERNET
    pair = (topo.gpus[0], topo.gpus[8])  # one GPU on each server
    assert interconnect_of(topo, 2, group=pair) is Interconnect.ETHERNET
    assert interconnect_of(topo, 2, group=topo.gpus[:2]) is Interconnect.NVSWITCH


def test_step_features_of_a_scenario() -> None:
    sc = Scenario(
        system="dgx-h100", nodes=2, model="llama3_8b", software="torchtitan", precision="bf16",
        global_batch=32, tp=2,
    )  # fmt: skip
    f = step_features(sc)
    assert (f.gpu, f.architecture, f.interconnect) == (
        "H100-SXM5-80GB",
        "Hopper",
        Interconnect.INFINIBAND,
    )
    assert (f.software, f.family, f.precision, f.model_kind) == (
        "torchtitan",
        "pytorch",
        "bf16",
        "transformer",
    )
    assert f.parallelism == ("dp", "fsdp", "tp") and f.gpus == 16
    assert 7e9 < f.params < 9e9 and f.size_band == "1-10B" and f.gpu_band == "9-64"
    moe = step_features(Scenario(system="dgx-h100", model="mixtral_8x7b", global_batch=8, ep=8,
                                 precision="bf16", software="megatron-core"))  # fmt: skip
    assert moe.model_kind == "moe" and "ep" in moe.parallelism


def test_gpu_band_edges() -> None:
    assert [gpu_band(n) for n in (1, 2, 8, 9, 64, 65, 512, 513)] == [
        "1", "2-8", "2-8", "9-64", "9-64", "65-512", "65-512", "513+",
    ]  # fmt: skip


def test_large_message_band_is_the_accuracy_tables_threshold() -> None:
    """``message_band`` restates ``comm.validation.LARGE_BYTES`` (it may not import it: that
    module loads topologies); the two stay one threshold."""
    from perfmodel.comm.validation import LARGE_BYTES
    from perfmodel.intervals.features import message_band

    assert message_band(LARGE_BYTES - 1) != ">=64MiB"
    assert message_band(LARGE_BYTES) == ">=64MiB"


def test_step_features_count_what_runs_on_one_gpu() -> None:
    """fix17 item 1c: a torchtitan plan on one GPU (FSDP shard degree 1) runs unsharded
    (``ParallelismPlan.fsdp_shards``), so its features count no ``fsdp`` kind; on two GPUs it
    shards and counts it."""
    one = step_features(Scenario(system="dgx-h100", gpus=1, model="gpt2", software="torchtitan",
                                 precision="bf16", global_batch=8))  # fmt: skip
    assert one.parallelism == () and one.gpus == 1
    two = step_features(Scenario(system="dgx-h100", gpus=2, model="gpt2", software="torchtitan",
                                 precision="bf16", global_batch=8))  # fmt: skip
    assert two.parallelism == ("dp", "fsdp")
