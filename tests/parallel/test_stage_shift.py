"""Data-parallel keys shared between pipeline stages that are one another moved by whole
servers (issue 27: ``perfmodel/parallel/stage_shift.py``): every report equals the one
priced with the door shut, every shared key is the stage's own ``SystemCosts.concurrent_key``,
and the door stays shut where the layout, the classes or the name orders differ."""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable
from typing import Any

import pytest

from perfmodel.api import Scenario, predict
from perfmodel.parallel import costs
from perfmodel.parallel.lower_data_parallel import DataParallelEmitters
from perfmodel.parallel.placement import Placement
from perfmodel.parallel.stage_shift import StageShift, _slots
from perfmodel.topology import load_system
from perfmodel.topology.symmetry import server_symmetry
from tests.comm.reference_models import thin_spine_fat_tree
from tests.parallel.test_concurrent_key import GPT, _fresh, _reports


def _checked_keys(m: pytest.MonkeyPatch) -> list[tuple[Any, ...]]:
    """Every key the door hands a stage, checked against the stage's own key as the cost
    model finds it (the cost model's ``concurrent_key`` of the stage's groups)."""
    shared: list[tuple[Any, ...]] = []
    real_key, real_keyed = StageShift.key, DataParallelEmitters._dp_keyed
    handed: dict[tuple[int, int, str], tuple[Any, ...]] = {}

    def key(self: StageShift, s: int, group: str, *a: Any) -> Any:
        got = real_key(self, s, group, *a)
        if got is not None:
            handed[(id(self), s, group)] = got
        return got

    def keyed(self: Any, s: int, group: str, op: Any, nbytes: float, groups: Any) -> float:
        value = real_keyed(self, s, group, op, nbytes, groups)
        got = handed.pop((id(self.stage_shift), s, group), None)
        if got is not None:
            assert got == self.costs.concurrent_key(groups, self.alg)
            shared.append(got)
        return value

    real_send = StageShift.send_time

    def send_time(
        self: StageShift, s_from: int, s_to: int, nbytes: float, price: Any, by: Any
    ) -> float:
        asked: list[float] = []
        got = real_send(self, s_from, s_to, nbytes, lambda: asked.append(price()) or asked[-1], by)
        if not asked:  # read off an earlier pair of stages: the pairs' own time
            assert got == price()
            shared.append(("send", s_from, s_to))
        return got

    m.setattr(StageShift, "key", key)
    m.setattr(StageShift, "send_time", send_time)
    m.setattr(DataParallelEmitters, "_dp_keyed", keyed)
    return shared


SYSTEMS = ("dgx-a100", "dgx-h100", "aws-p5.48xlarge")
PRESETS = ("megatron-core", "pytorch-ddp", "megatron", "fsdp")
CASES = [(a, b, {}) for a, b in itertools.product(SYSTEMS, PRESETS)]


def _on_and_off(reports: Callable[[], list[str]]) -> list[tuple[Any, ...]]:
    """``reports()`` with the door open (every key and sends' time it hands checked:
    :func:`_checked_keys`) equal to ``reports()`` with it shut; what the door handed."""
    with pytest.MonkeyPatch.context() as m:
        shared = _checked_keys(m)
        on = reports()
    with pytest.MonkeyPatch.context() as m:
        m.setattr(StageShift, "ON", False)
        off = reports()
    _fresh()
    assert on == off
    return shared


@pytest.mark.parametrize("system, software, extra", [*CASES, ("dgx-a100", "fsdp", {"hsdp": 2})])
def test_reports_equal_with_the_door_shut(
    system: str, software: str, extra: dict[str, Any]
) -> None:
    shared = _on_and_off(lambda: _reports(system, software, **extra))
    # later stages read an earlier stage's key and sends' time (on aws-p5.48xlarge the
    # stages' servers are mostly of other classes, other leaves, than the earlier stages')
    sends = [x for x in shared if x[0] == "send"]
    assert (sends and len(sends) < len(shared)) or system == "aws-p5.48xlarge"


MOE = {"layers": 8, "hidden": 1024, "heads": 16, "seq_len": 1024, "vocab": 32000}
MOE.update(experts=8, top_k=2, ffn_hidden=2048)


@pytest.mark.parametrize(
    "plan",
    [
        pytest.param(
            {"dp": 4, "tp": 4, "pp": 8, "schedule": "interleaved", "interleave": 2},
            id="interleaved",
        ),
        pytest.param({"dp": 4, "tp": 8, "pp": 4, "placement": "tp,pp,dp"}, id="tp,pp,dp"),
        pytest.param(
            {"dp": 4, "tp": 8, "pp": 4, "placement": "tp,pp,dp", "system": "aws-p5.48xlarge"},
            id="p5-tp,pp,dp",
        ),
        pytest.param({"dp": 2, "tp": 4, "pp": 4, "cp": 4}, id="cp4"),
        pytest.param({"dp": 8, "tp": 2, "pp": 4, "ep": 4, "model": "moe"}, id="moe-ep4"),
        pytest.param({"dp": 4, "tp": 8, "pp": 4, "nodes": 17}, id="nodes17"),
    ],
)
def test_other_plans_equal_with_the_door_shut(plan: dict[str, Any]) -> None:
    """An interleaved schedule, the rank order tp,pp,dp (stage 0's servers not the first ones;
    on AWS P5 too, whose leaves make classes), context and expert parallelism, and a system of
    17 servers (one left over): the same reports with the door open and shut, and the door
    opens."""
    moe = plan.get("model") == "moe"
    plan = {
        "system": "dgx-a100",
        "nodes": 16,
        "model": "gpt",
        "model_args": MOE if moe else GPT,
        "precision": "bf16",
        "optimizer": "adam",
        "fidelity": "analytic",
        "software": "megatron-core",
        "microbatch": 1,
        "gpus": plan["dp"] * plan["tp"] * plan["pp"] * plan.get("cp", 1),
        "global_batch": 16 * plan["dp"],
        **plan,
    }

    def reports() -> list[str]:
        _fresh()
        r = predict(Scenario.from_dict(plan), baseline=False)
        return [repr(dataclasses.replace(r, timeline=None)), repr(r.timeline)]

    assert _on_and_off(reports)  # later stages read an earlier stage's key or sends' time


def _placement(
    topo: Any, dp: int, tp: int, pp: int, gpus: tuple[str, ...] | None = None
) -> Placement:
    return Placement(dp=dp, tp=tp, pp=pp, gpus=gpus or topo.gpus[: dp * tp * pp])


def test_moved_reads_classes_and_name_orders() -> None:
    """Stages of four servers on 16 DGX A100 (one class): every stage keeps the classes; the
    name orders (``n10`` sorts before ``n8``) only where the servers' positions agree."""
    topo = load_system("dgx-a100", nodes=16)
    sym = server_symmetry(topo)
    shift = StageShift(topo, _placement(topo, 4, 8, 4))
    pos = sym.position

    def order(b: int) -> list[int]:
        servers = [sym.server[topo.gpus[32 * b + 8 * i]] for i in range(4)]
        return sorted(range(4), key=lambda i: pos[servers[i]])

    differ = 0
    for b in range(4):
        assert shift.moved(0, b, False)
        assert shift.moved(0, b, True) == (order(b) == order(0))
        differ += order(b) != order(0)
    assert differ  # n8-n11 sort n10, n11, n8, n9


def test_the_door_stays_shut() -> None:
    """No key where the stride is not whole servers, the GPUs are not laid server by server,
    a server is in no class, or there is no topology; a key the door hands is never asked for
    an unshareable group kind twice."""
    topo = load_system("dgx-a100", nodes=4)
    assert not StageShift(topo, _placement(topo, 2, 2, 4)).moved(0, 1, False)  # 4 GPUs a stage
    shuffled = (*topo.gpus[1:8], topo.gpus[0], *topo.gpus[8:32])
    assert _slots(topo, shuffled) is None
    assert not StageShift(topo, _placement(topo, 1, 8, 4, shuffled)).moved(0, 1, False)
    assert _slots(topo, topo.gpus) == (8, tuple(range(4)))
    thin = StageShift(thin_spine_fat_tree(), _placement(thin_spine_fat_tree(), 1, 8, 6))
    assert thin.moved(0, 1, True)  # servers 0 and 1: one class
    assert not thin.moved(0, 2, False)  # server 2 in no class
    assert not thin.moved(0, 3, False)  # servers 3-4: another class
    assert (
        StageShift(None, _placement(topo, 1, 8, 4)).key(1, "dp", {(0, "dp"): ("k",)}, list) is None
    )
    # a key whose numbers are no ring pattern (a group inside one server) is not shared
    shift = StageShift(topo, _placement(topo, 2, 4, 4))
    keys: dict[tuple[int, str], tuple[Any, ...]] = {(0, "dp"): ("auto", ("twin", ("x",)), 1.0)}
    assert shift.key(1, "dp", keys, lambda r: [("a", "b")]) is None
    assert shift._shared == {"dp": None}
    # nor one whose sharing factor was counted on the groups' own routes (a server in no
    # class), though stages 0 and 1 (servers 0 and 1) are one another moved
    topo = thin_spine_fat_tree()
    shift = StageShift(topo, _placement(topo, 1, 8, 6))
    assert shift.moved(0, 1, True)
    ring = {(0, "dp"): ("auto", ("ring", ("gpu0",), (0, 0)), 1.0)}
    g = topo.gpus
    assert shift.key(1, "dp", ring, lambda r: [(g[0], g[16]), (g[1], g[17])]) is None
    assert (
        StageShift(topo, shift.pl).key(1, "dp", ring, lambda r: [(g[0], g[8])]) == ring[(0, "dp")]
    )


def test_factor_by_shape(monkeypatch: pytest.MonkeyPatch) -> None:
    """One group: no factor; many ranks: the server-level shape; a shape whose factor is not
    kept: not by shape."""
    topo = load_system("dgx-a100", nodes=16)
    gpus = topo.gpus
    one = ((gpus[0], gpus[8]),)
    assert costs.factor_by_shape(topo, one) is False
    wide = tuple(tuple(gpus[8 * s + i] for s in range(16)) for i in range(8))
    assert costs.factor_by_shape(topo, wide) is False
    narrow = tuple(tuple(gpus[8 * s + i] for s in range(4)) for i in range(2))
    monkeypatch.setattr(costs._ROUTE_FACTORS, "entries", {})  # the shapes kept: none
    assert costs.factor_by_shape(topo, narrow) is None  # not counted yet
    costs.ring_sharing_factor.cache_clear()
    costs.ring_sharing_factor(topo, narrow)
    assert costs.factor_by_shape(topo, narrow) is False  # kept, read without name order


def test_send_times_kept_by_shape_only() -> None:
    """A sends' time is kept for later stages only where its pairs' transfer shape is kept
    (``by_shape``) and both stages' servers lie in classes; a later pair of stages whose
    classes differ is priced."""
    topo = load_system("dgx-a100", nodes=4)
    shift = StageShift(topo, _placement(topo, 1, 8, 4))
    assert shift.send_time(0, 1, 1.0, lambda: 2.0, lambda: False) == 2.0
    assert shift._sends == {}  # not by shape: not kept
    assert shift.send_time(0, 1, 1.0, lambda: 2.0, None) == 2.0 and shift._sends == {}
    assert shift.send_time(0, 1, 1.0, lambda: 2.0, lambda: True) == 2.0
    assert shift.send_time(1, 2, 1.0, lambda: 3.0, lambda: True) == 2.0  # stages 1, 2: 0, 1 moved
    assert shift.send_time(2, 1, 1.0, lambda: 3.0, lambda: True) == 3.0  # the other way: priced
    thin = StageShift(thin_spine_fat_tree(), _placement(thin_spine_fat_tree(), 1, 8, 6))
    assert thin.send_time(0, 1, 1.0, lambda: 2.0, lambda: True) == 2.0
    assert thin.send_time(3, 4, 1.0, lambda: 5.0, lambda: True) == 5.0  # another class
    # the receivers' classes count too: the sends 1 -> 2 are the sends 0 -> 1 moved one server
    # on, which keeps the senders' class (servers 0 -> 1) but not the receivers' (1 -> 2,
    # server 2 in no class): priced, not read off the kept 0 -> 1
    assert thin.send_time(1, 2, 1.0, lambda: 7.0, lambda: True) == 7.0


def _clear_ring_factors() -> None:
    """Forget the ring-path sharing factors and what their shapes read
    (:func:`~perfmodel.parallel.costs.ring_sharing_factor`, its name-free shapes' memos)."""
    costs._ORDER_FREE.entries.clear()
    costs._ROUTE_FACTORS.entries.clear()
    costs.ring_sharing_factor.cache_clear()


def test_keys_read_name_orders_where_the_shape_does() -> None:
    """Where the earlier stage's sharing shape holds the name orders of same-class servers
    (every hop's route said not mirrored), a key goes only to the stages whose servers keep
    that order: on 16 DGX A100, stages 1 and 3 of dp4 tp8 pp4, not stage 2 (``n10`` sorts
    before ``n8``)."""
    topo = load_system("dgx-a100", nodes=16)
    pl = _placement(topo, 4, 8, 4)

    def groups_of(r: int) -> list[tuple[str, ...]]:
        return [pl.dp_group(r, t) for t in range(pl.tp)]

    _clear_ring_factors()
    try:
        with pytest.MonkeyPatch.context() as m:
            m.setattr(costs, "_mirrored", lambda *_: False)
            first = tuple(map(tuple, groups_of(0)))
            factor = costs.ring_sharing_factor(topo, first)
            assert costs.factor_by_shape(topo, first, classed=True) is True  # reads names
            shift = StageShift(topo, pl)
            keys = {(0, "dp"): ("auto", ("ring", ("x",)), factor)}
            got = [shift.key(b, "dp", keys, groups_of) is not None for b in range(1, 4)]
            assert got == [True, False, True]
            assert [shift.moved(0, b, False) for b in range(1, 4)] == [True] * 3
    finally:
        _clear_ring_factors()
