"""A gather chain's segments made once per class of one row and one spec triple, the classes
kept per rows object for every plan sharing those rows (issue 27, session 22:
``lower_chains.GatherChains._chain_classes``, ``SHARED_CLASSES``): every chain template
``_chain_items`` returns (or its refusal) equals the one made with the classes found per plan
and the one read segment by segment through ``_fine_segments`` (``CHAIN_DIRECT`` off), and so
do the report and the analytic graph's tasks; the kept classes are read by plans other than
the one they were found on (middle stages taking stage 1's rows)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from fresh_chunks import BASE, GPT, GPT3, predict_afresh

from perfmodel.api import Scenario
from perfmodel.parallel import lower_chains
from perfmodel.parallel.lower_hidden import HiddenCollectives
from perfmodel.parallel.taskgraph import ChainSegment, ChainStatic, Task, TaskKind, flat_rows

TWO_SERVERS = dict(nodes=2, gpus=16)

#: name -> (scenario overrides, whether some chain is refused): Megatron-Core's first forward
#: (segments only, a chain per stage; with middle stages, which take stage 1's rows, the
#: classes found on stage 1's plan are read by theirs; two stages have none)
CASES: dict[str, tuple[dict, bool]] = {
    # 48 layers on 4 stages: 8 bucket segments a stage, 5 classes
    "mcore-tp2-pp4": (
        dict(
            software="megatron-core",
            dp=2,
            tp=2,
            pp=4,
            global_batch=4,
            model_args={**GPT, "layers": 48},
            **TWO_SERVERS,
        ),
        False,
    ),
    # GPT-3 175B on 1024 A100 (issue 27's median Megatron-Core plan): 37 segments, 5 classes
    "gpt3-mcore-pp8": (
        dict(GPT3, software="megatron-core", dp=32, tp=4, pp=8, microbatch=8),
        False,
    ),
    # a first forward's segment whose TP outlasts its compute: one of two chains refused
    "gpt3-mcore-pp2-mb2": (
        dict(GPT3, software="megatron-core", dp=64, tp=8, pp=2, microbatch=2),
        True,
    ),
}


def _pair_classes(rows: Any, specs: Any) -> tuple[list[int], list[int]]:
    """The classes of ``rows`` and ``specs`` by both objects of each segment (the key
    ``_chain_classes`` read before session 26, which reads the row object alone)."""
    seen: dict[tuple[int, int], int] = {}
    index = [seen.setdefault((id(r), id(t)), len(seen)) for r, t in zip(rows, specs, strict=True)]
    return [index.index(j) for j in range(len(seen))], index


def _run(
    name: str, monkeypatch: pytest.MonkeyPatch, shared: bool, direct: bool = True
) -> tuple[Any, list, list]:
    """Case ``name``'s report, every ``_chain_items`` answer (in call order) and per
    ``_chain_classes`` call made within ``_chain_items`` the ids of its rows and specs
    (``_chain_after``'s refusal reads the classes whatever ``CHAIN_DIRECT``), chunks built
    afresh, with ``SHARED_CLASSES`` at ``shared`` and ``CHAIN_DIRECT`` at ``direct``."""
    sc = Scenario.from_dict({**BASE, **CASES[name][0]})
    answers: list[Any] = []
    calls: list[tuple[int, int]] = []
    items, classes = HiddenCollectives._chain_items, HiddenCollectives._chain_classes
    inside = [0]

    def record(self, *a: Any) -> Any:  # type: ignore[no-untyped-def]
        inside[0] += 1
        try:
            answers.append(items(self, *a))
        finally:
            inside[0] -= 1
        return answers[-1]

    def record_classes(self, rows: Any, specs: Any) -> Any:  # type: ignore[no-untyped-def]
        if inside[0]:
            calls.append((id(rows), id(specs)))
        got = classes(self, rows, specs)
        assert got == _pair_classes(rows, specs)  # the row object stands for its triple
        return got

    with monkeypatch.context() as m:
        m.setattr(HiddenCollectives, "SHARED_CLASSES", shared)
        m.setattr(HiddenCollectives, "CHAIN_DIRECT", direct)
        m.setattr(HiddenCollectives, "_chain_items", record)
        m.setattr(HiddenCollectives, "_chain_classes", record_classes)
        report = predict_afresh(sc, m)
    return report, answers, calls


@pytest.mark.parametrize("name", sorted(CASES))
def test_chain_items_of_kept_classes_equal_the_segment_walk(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    on, answers_on, calls = _run(name, monkeypatch, True)
    off, answers_off, _ = _run(name, monkeypatch, False)
    fine, answers_fine, no_calls = _run(name, monkeypatch, True, direct=False)
    refused = CASES[name][1]
    templates = [a for a in answers_on if a is not None]
    assert templates, "no chain: the comparison would be vacuous"
    assert (None in answers_on) == refused
    assert not no_calls  # the reference reads every segment through _fine_segments
    # classes kept on one plan read by another holding the same rows (middle stages: not on
    # the two-stage plan, the refused case)
    specs_of: dict[int, set[int]] = {}
    for rows, specs in calls:
        specs_of.setdefault(rows, set()).add(specs)
    assert any(len(v) > 1 for v in specs_of.values()) != refused, calls
    # some segments share a class (the point of the classes)
    assert any(len(set(map(id, t[0].items))) < len(t[0].items) for t in templates)
    assert answers_on == answers_off == answers_fine
    assert on.timeline.graph.tasks == off.timeline.graph.tasks == fine.timeline.graph.tasks
    assert on.to_dict() == off.to_dict() == fine.to_dict()


@pytest.mark.parametrize("shared", [True, False])
def test_classes_are_kept_per_rows_object(shared: bool) -> None:
    """Two plans of one length with other classes each get their own; a plan holding the
    rows of an earlier one (its spec triples made afresh, one per triple of that plan, as
    ``_gathers_like`` makes them) reads that plan's classes where they are kept."""
    a, b = tuple([1.0]), tuple([2.0])  # two rows, one spec triple each
    t, u = tuple(["t"]), tuple(["u"])
    low = SimpleNamespace(_chain_classes_memo={}, SHARED_CLASSES=shared)
    classes = HiddenCollectives._chain_classes
    rows1 = (a, b, a)
    first = classes(low, rows1, (t, u, t))
    assert first == ([0, 1], [0, 1, 0])
    assert classes(low, (a, a, b), (t, t, u)) == ([0, 2], [0, 0, 1])
    t2, u2 = tuple(["t"]), tuple(["u"])
    again = classes(low, rows1, (t2, u2, t2))
    assert again == first
    assert (again is first) == shared
    # classes are objects, not values: an equal row made apart is a class of its own
    a2 = tuple([1.0])
    assert classes(low, (a, a2, a), (t, u, t)) == ([0, 1], [0, 1, 0])


@pytest.mark.parametrize("name", sorted(CASES))
def test_flat_rows_of_the_classes_equal_the_rows_per_item(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``SHARED_FLAT`` (session 25): a chain's ``flat`` rows, read off its classes' rows by
    index, are the rows built item by item (``flat`` is not compared by ``==``: read here),
    and the report is the same either way."""
    got, used = {}, {}
    for shared in (True, False):
        calls: list[int] = []

        def counted(items: Any, calls: list[int] = calls) -> Any:
            calls.append(len(items))
            return flat_rows(items)

        with monkeypatch.context() as m:
            m.setattr(HiddenCollectives, "SHARED_FLAT", shared)
            m.setattr(lower_chains, "flat_rows", counted)  # the classes' rows, indexed
            got[shared] = _run(name, m, True)
        used[shared] = len(calls)
    assert used[True] > 0 == used[False]  # the switch takes the shortcut, and only on
    (on, answers_on, _), (off, answers_off, _) = got[True], got[False]
    statics = [(a[0], b[0]) for a, b in zip(answers_on, answers_off, strict=True) if a]
    assert any(s.flat for s, _ in statics), "no flat chain: the comparison would be vacuous"
    for s_on, s_off in statics:
        assert s_on.flat == s_off.flat == flat_rows(s_on.items)
        if s_on.flat:
            assert [list(map(repr, r)) for r in s_on.flat] == [
                list(map(repr, r)) for r in s_off.flat
            ]
    assert on.to_dict() == off.to_dict()


def test_flat_rows_are_refused_for_a_chain_with_runs() -> None:
    """``flat`` stands for a chain without runs: given rows with a runs' lead task are an
    error, not a chain the list schedule would run without its runs."""
    task = Task(-1, TaskKind.COMPUTE, "n0/gpu0", "grad-lead", 0.0)
    seg = ChainSegment(1.0, 2.0, (3.0,), 0.5, ("n0/gpu0",), ())
    args = ((seg,), "gather", "reduce", True, task, task, frozenset({"n0/gpu0"}))
    assert ChainStatic(*args, None).flat == ((1.0, 2.0, 3.0, 0.5),)
    assert ChainStatic(*args, task).flat is None
    with pytest.raises(ValueError, match="runs"):
        ChainStatic(*args, task, ((1.0, 2.0, 3.0, 0.5),))
