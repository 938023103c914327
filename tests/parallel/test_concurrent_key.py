"""Data-parallel prices shared between pipeline stages and plans by key (issue 27, wave 13:
``SystemCosts.concurrent_key`` / ``concurrent_keyed``, ``DataParallelEmitters._dp_keyed``):
every report equals the one priced without the shortcut, over presets, plans and catalogue
systems; each shared value equals the direct model's (``tests/comm/reference_models.py``:
every reuse between groups off); and keys differ where the value may."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from report_compare import PIPELINED_ZERO

import perfmodel.api as api
import perfmodel.pipeline.inputs as inputs
from perfmodel.api import Scenario, predict
from perfmodel.dtypes import Precision
from perfmodel.ops import CollectiveOp
from perfmodel.parallel import costs
from perfmodel.parallel.costs import SystemCosts
from perfmodel.topology import load_system
from tests.comm.reference_models import direct_model

GPT = {"layers": 16, "hidden": 2048, "heads": 16, "seq_len": 1024, "vocab": 32000}
#: (dp, tp, pp) on 16 servers of 8 GPUs: data-parallel groups over 2-16 servers, stages on
#: other servers or on other local ids of the same ones
PLANS = [(8, 4, 4), (4, 8, 4), (16, 2, 4), (2, 8, 8), (8, 2, 8), (4, 4, 8)]


def _sc(system: str, software: str, dp: int, tp: int, pp: int, **extra: Any) -> Scenario:
    return Scenario.from_dict(
        dict(
            **extra,
            system=system,
            nodes=16,
            model="gpt",
            model_args=GPT,
            precision="bf16",
            optimizer="adam",
            fidelity="analytic",
            software=software,
            dp=dp,
            tp=tp,
            pp=pp,
            microbatch=1,
            gpus=dp * tp * pp,
            global_batch=8 * dp,
        )
    )


def _fresh() -> None:
    inputs._system_costs.cache_clear()
    api._REPORTS.clear()


def _reports(system: str, software: str, **extra: Any) -> list[str]:
    """repr of each plan's report (timeline apart, then the timeline), the plans priced in one
    process after another (the later stages and plans read the earlier ones' values)."""
    _fresh()
    out = []
    for dp, tp, pp in PLANS:
        r = predict(_sc(system, software, dp, tp, pp, **extra), baseline=False)
        out.append(repr(dataclasses.replace(r, timeline=None)) + repr(r.timeline))
    return out


@pytest.mark.parametrize(
    "system, software, extra",
    [
        (system, software, {})
        for system in ("dgx-a100", "dgx-h100", "aws-p5.48xlarge")
        for software in ("megatron-core", "fsdp", "pytorch-ddp", "megatron")
    ]
    + [
        # DeepSpeed's pipeline engine refuses ZeRO-3 with pp > 1: a stack stating it runs it
        ("dgx-a100", "deepspeed-zero3", {"software_options": PIPELINED_ZERO}),
        ("dgx-a100", "fsdp", {"hsdp": 2}),  # the shard and replica groups
        ("dgx-h100", "torchtitan", {}),
    ],
)
def test_reports_equal_with_the_shortcut_off(
    system: str, software: str, extra: dict[str, Any]
) -> None:
    shared: list[Any] = []
    real = SystemCosts.concurrent_keyed

    def counted(self: SystemCosts, *a: Any) -> float:
        if (a[0], a[1], a[-1]) in self._by_concurrent_key:
            shared.append(a[-1])
        return real(self, *a)

    with pytest.MonkeyPatch.context() as m:
        m.setattr(SystemCosts, "concurrent_keyed", counted)
        on = _reports(system, software, **extra)
    assert shared  # values were read off other stages or plans
    with pytest.MonkeyPatch.context() as m:
        m.setattr(SystemCosts, "concurrent_key", lambda self, groups, algorithm="auto": None)
        off = _reports(system, software, **extra)
    _fresh()
    for a, b in zip(on, off, strict=True):
        assert a == b


def _stage_groups(topo: Any, dp: int, tp: int, pp: int, s: int, rank: int) -> list[tuple[str, ...]]:
    """Stage ``s``'s data-parallel group of tensor rank ``rank`` first, then its siblings
    (Megatron order: tp fastest, then dp, then pp)."""
    gpus = topo.gpus

    def group(r: int) -> tuple[str, ...]:
        return tuple(gpus[s * dp * tp + d * tp + r] for d in range(dp))

    return [group(rank), *(group(r) for r in range(tp) if r != rank)]


@pytest.mark.parametrize("system", ["dgx-a100", "dgx-h100"])
def test_shared_values_are_the_direct_models(system: str) -> None:
    """Every stage's value, read off an earlier stage's key or priced, equals the value of a
    cost model whose comm model reuses nothing between groups."""
    topo = load_system(system, nodes=16)
    fast = SystemCosts(topo, Precision.parse("bf16"))
    ref = SystemCosts(topo, Precision.parse("bf16"))
    ref.comm = direct_model(topo)
    ref.share_concurrent = False
    hits = 0
    for dp, tp, pp in PLANS:
        for s in range(pp):
            for rank in (0, tp - 1):
                groups = _stage_groups(topo, dp, tp, pp, s, rank)
                for op in (CollectiveOp.ALLREDUCE, CollectiveOp.REDUCESCATTER):
                    for nbytes in (2.0**20, 3 * 2.0**25):
                        key = fast.concurrent_key(groups)
                        before = len(fast._by_concurrent_key)
                        if key is None:
                            got = fast.concurrent_time(op, nbytes, groups)
                        else:
                            hits += (op, nbytes, key) in fast._by_concurrent_key
                            got = fast.concurrent_keyed(op, nbytes, groups, "auto", key)
                        assert len(fast._by_concurrent_key) >= before
                        assert got == ref.concurrent_time(op, nbytes, groups)
    assert hits > 0  # values were read off other stages and plans


def test_keys_differ_where_the_value_may() -> None:
    """The same data-parallel group alone and with siblings sharing its NIC, groups over
    other server counts, and a result the comm model does not share by numbers."""
    topo = load_system("dgx-a100", nodes=4, network="roce-100g", nics_per_node=1)
    c = SystemCosts(topo, Precision.parse("bf16"))
    gpus = topo.gpus
    groups = [tuple(gpus[8 * s + i] for s in range(4)) for i in range(8)]
    op, nbytes = CollectiveOp.ALLREDUCE, 2.0**28
    alone = c.concurrent_time(op, nbytes, groups[:1])
    shared = c.concurrent_time(op, nbytes, groups)
    k_alone, k_shared = c.concurrent_key(groups[:1]), c.concurrent_key(groups)
    assert k_alone is not None and k_shared is not None
    assert shared > alone and k_alone != k_shared  # one numbers key, two factors
    assert k_alone[1] == k_shared[1]
    assert c.concurrent_keyed(op, nbytes, groups, "auto", k_shared) == shared
    assert c.concurrent_keyed(op, nbytes, groups[:1], "auto", k_alone) == alone
    half = [g[:2] for g in groups]
    c.concurrent_time(op, nbytes, half)
    k_half = c.concurrent_key(half)
    assert k_half is not None and k_half[1] != k_shared[1]  # two servers, not four
    # a group with a CPU (a parameter server) has no key; nor before its pattern is known
    cpu = costs.nearest_cpu(topo, gpus[0])
    assert c.concurrent_key([(cpu, *groups[0])]) is None
    assert SystemCosts(topo, Precision.parse("bf16")).concurrent_key(groups) is None


def test_a_result_not_shared_by_numbers_is_not_kept() -> None:
    """An algorithm that routes flows by name (halving-doubling) is priced, never kept."""
    topo = load_system("dgx-a100", nodes=4)
    c = SystemCosts(topo, Precision.parse("bf16"))
    gpus = topo.gpus
    groups = [tuple(gpus[8 * s + i] for s in range(4)) for i in range(8)]
    c.concurrent_time(CollectiveOp.ALLREDUCE, 2.0**26, groups)
    key = c.concurrent_key(groups, "halving_doubling")
    assert key is not None
    t = c.concurrent_keyed(CollectiveOp.ALLREDUCE, 2.0**26, groups, "halving_doubling", key)
    assert t == c.concurrent_time(CollectiveOp.ALLREDUCE, 2.0**26, groups, "halving_doubling")
    assert (CollectiveOp.ALLREDUCE, 2.0**26, key) not in c._by_concurrent_key
