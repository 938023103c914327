"""A chunk's expert / context exchange or host synchronisation refusal read once per
``_values_key`` (``LoweringShortcuts._exchanges``, issue 27): every chunk's answer is the one
its own segments give, a chunk read off another reads that chunk's entry (``BY_VALUES``; off:
each chunk its own), and the lowerings' refusals (coarse, runs, replays, hidden walks) take it."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from fresh_chunks import BASE, lowerings

import perfmodel.parallel.lower_shortcuts as shortcuts
from perfmodel.api import Scenario
from perfmodel.parallel.lower_shortcuts import LoweringShortcuts, _ep_cp_or_sync
from perfmodel.parallel.lowering import Segment
from tests.parallel.moe_shapes import SMALL_MOE


def _seg(sync: float = 0.0) -> Segment:
    return Segment(1.0, 1.0, 0.0, 0.0, 0.0, 1, 1.0, 1.0, host_sync_s=sync)


def _door(by_values: bool) -> Any:
    low = SimpleNamespace(_xchg={}, BY_VALUES=by_values)
    low._values_key = lambda ch: LoweringShortcuts._values_key(low, ch)  # type: ignore[arg-type]
    return low


@pytest.mark.parametrize("by_values", [True, False])
def test_each_chunk_answers_its_own(by_values: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    plain = SimpleNamespace(segments=(_seg(), _seg()), values_of=None)
    copy = SimpleNamespace(segments=(_seg(), _seg()), values_of=plain)
    synced = SimpleNamespace(segments=(_seg(), _seg(0.5)), values_of=None)
    calls: list[object] = []

    def counted(segs: tuple[Segment, ...]) -> bool:
        calls.append(segs)
        return _ep_cp_or_sync(segs)

    monkeypatch.setattr(shortcuts, "_ep_cp_or_sync", counted)
    low = _door(by_values)
    for _ in range(2):
        for ch in (plain, copy, synced):
            assert LoweringShortcuts._exchanges(low, ch) is _ep_cp_or_sync(ch.segments)  # type: ignore[arg-type]
    # once per values key: the copy reads its source's entry where BY_VALUES holds
    assert len(calls) == (2 if by_values else 3)


@pytest.mark.parametrize("flags", [(), ((False, 0.0),), ((False, 0.0), (True, 0.0)),
                                   ((False, 0.0), (False, 1e-6)), ((True, 2.0), (False, 0.0)),
                                   ((False, 0.0), (False, -0.0), (False, float("nan")))])  # fmt: skip
def test_ep_cp_or_sync_is_the_any(flags: tuple[tuple[bool, float], ...]) -> None:
    """The refusal's C passes answer the generator form, zeros and NaN included."""
    segs = tuple(
        Segment(1.0, 1.0, 0.0, 0.0, 0.0, 1, 1.0, 1.0, ep_cp=(object(),) if ep else (),  # type: ignore[arg-type]
                host_sync_s=sync)
        for ep, sync in flags
    )  # fmt: skip
    want = any(seg.ep_cp or seg.host_sync_s for seg in segs)
    assert _ep_cp_or_sync(segs) is want


#: name -> scenario overrides: a dense pipeline (chunks read off others) and an EP one
_MOE = dict(system="dgx-h100", model="moe", model_args={**SMALL_MOE, "layers": 4},
            software="megatron-core", ep=4, pp=2, interleave=2, schedule="interleaved",
            global_batch=16)  # fmt: skip
CASES: dict[str, dict[str, Any]] = {
    "gpt-pp4": dict(software="megatron-core", dp=2, tp=2, pp=4, nodes=2, gpus=16),
    "moe-ep4-interleaved": _MOE,
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_lowerings_read_each_chunks_own(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    sc = Scenario.from_dict({**BASE, **CASES[name]})
    lows = lowerings(sc, monkeypatch)
    assert lows
    seen = set()
    for low in lows:
        for k, ch in enumerate(low.chunks):
            own = _ep_cp_or_sync(ch.segments)
            seen.add(own)
            assert low._exchanges(ch) is own
            if hasattr(low, "_replay_chunk"):
                assert low._replay_chunk[k] is not own
    assert seen == {name.startswith("moe")}  # each case all one way: the unit test mixes them
