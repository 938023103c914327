"""Every dependency encoding, in each copy of the list schedule's dependency loop.

The analytic list schedule decodes a task's dependencies in four places: its hot loop
(``sim.engine._list_schedule``), the same loop from a graph's first gather chain on
(``sim.engine._chain_mode``) and an OverTask's collective (``sim.engine._over``), each with the
plain and ``SENT`` cases inline, and by a call (``sim.chains._dep_end``) for a chain's anchors
and ``_over``'s ``HEAD`` and ``CHAIN`` cases. A new encoding must reach all four. Here a graph
depends on every kind (a plain task id, ``tid + SENT`` on a folded pipeline send,
:func:`~perfmodel.parallel.taskgraph.piece_end` on an operation task's first compute
and each of its pieces, :func:`~perfmodel.parallel.taskgraph.chain_mark` on each mark of
a chain, a plain id of a chain and of an OverTask) from a plain task and from an OverTask, each
alone on a stream of its own (so it starts exactly at that end), before the first chain and
after it; the schedule is compared with a reference written here from the encodings'
definitions (``perfmodel.parallel.taskgraph``): this test's decoder for every dependency and a
chain's anchors (the schedule's copies: the two loops' inline cases, ``_dep_end`` /
``_encoded_end``, and a chain's anchors read inline in ``sim.chains._chain``, or through
``_anchors`` where one is not a mark). The second chain is anchored on the first's marks or on
plain tasks. Both chains take ``_chain``'s flat recurrence (its anchors read as those of a chain
of hidden gather runs or of a several-piece ``then_s``, which ``_chain_runs`` is handed)."""

from __future__ import annotations

from collections import defaultdict

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

import perfmodel.sim.chains as sim_chains
from perfmodel.ops import CollectiveOp
from perfmodel.parallel.taskgraph import (
    _S_SEND,
    _S_SEND_S,
    CHAIN,
    CHAIN_MARK,
    HEAD,
    SENT,
    ChainSegment,
    ChainStatic,
    CommKind,
    CommSpec,
    GraphBuilder,
    OverTask,
    Task,
    TaskGraph,
    TaskKind,
    chain_mark,
    piece_end,
)
from perfmodel.sim.engine import _list_schedule


def _ref_end(d: int, start: list[float], end: list[float], tasks, marks) -> float:  # type: ignore[no-untyped-def]
    """The end dependency ``d`` stands for, from ``taskgraph``'s definitions of the encodings."""
    if d >= CHAIN:  # chain_mark(tid, j): mark j of chain tid
        j, tid = divmod(d - CHAIN, SENT)
        return marks[tid][j]
    if d >= HEAD:  # piece_end(tid, j): its first compute, then j pieces, added in order
        j, tid = divmod(d - HEAD, SENT)
        e = start[tid] + tasks[tid].duration_s
        for x in tasks[tid].then_s[:j]:
            e += x
        return e
    if d >= SENT:  # tid + SENT: the folded send's end
        return end[d - SENT] + tasks[d - SENT].send_s
    return end[d]


def _marks(chains: dict, tasks) -> dict[int, list[float]]:  # type: ignore[type-arg, no-untyped-def]
    """Each chain's marks (``sim.chains.chain_marks``)."""
    return {k: sim_chains.chain_marks(tasks[k].chain[0], v) for k, v in chains.items()}


def _ref_chain(t, s, free, start, end, tasks, chains) -> tuple[float, float]:  # type: ignore[no-untyped-def]
    """``sim.chains._chain``'s recurrence of chain ``t`` with its anchors decoded here: each
    anchor (a mark of an earlier chain, a task's end, ...) by :func:`_ref_end`, handed to
    ``_chain`` as the end of a plain id past the graph's tasks (so the recurrence is
    ``_chain``'s, the anchors' decoding this test's, not ``chains.py``'s inline copies)."""
    static, a0, a1 = t.chain
    marks = _marks(chains, tasks)
    ends = list(end)
    plain = []
    for a in (a0, a1):
        if a < 0:  # no anchor
            plain.append(a)
        else:
            plain.append(len(ends))
            ends.append(_ref_end(a, start, end, tasks, marks))
    object.__setattr__(t, "chain", (static, *plain))  # the frozen task, restored below
    try:
        return sim_chains._chain(t, s, free, start, ends, tasks, chains)  # type: ignore[arg-type]
    finally:
        object.__setattr__(t, "chain", (static, a0, a1))


def _reference(graph: TaskGraph) -> tuple[list[float], list[float], dict[int, float], dict]:  # type: ignore[type-arg]
    """The list schedule with :func:`_ref_end` for every dependency (a chain's recurrence is
    ``sim.chains._chain``'s, an OverTask's ``OverTask``'s docstring): starts, ends, each
    OverTask's collective start, each chain's marks."""
    tasks = graph.tasks
    n = len(tasks)
    start, end = [0.0] * n, [0.0] * n
    free: sim_chains.Free = defaultdict(dict)  # per device, per stream (what _chain reads)
    chains: dict = {}  # type: ignore[type-arg]
    overs: dict[int, float] = {}
    for t in tasks:
        ends = [_ref_end(d, start, end, tasks, _marks(chains, tasks))
                for d in t.deps]  # fmt: skip
        fd = free[t.device]
        s = max([fd.get(t.stream, 0.0), *ends])
        if t.then_s is CHAIN_MARK:
            s, e = _ref_chain(t, s, free, start, end, tasks, chains)
        else:
            e = s + t.duration_s
            if type(t) is OverTask:
                stream, tp_s = t.over
                cs = overs[t.tid] = max([fd.get(stream, 0.0), *ends])
                fd[stream] = cs + tp_s
                e = max(e, cs + tp_s)
            for x in t.then_s or ():
                e += x
        start[t.tid], end[t.tid] = s, e
        fd[t.stream] = e
    return start, end, overs, _marks(chains, tasks)


def _static(n: int) -> ChainStatic:
    grp = ("g0", "g1")
    g_spec = CommSpec(CollectiveOp.ALLGATHER, 1e6, grp, "auto", CommKind.ZERO)
    r_spec = CommSpec(CollectiveOp.REDUCESCATTER, 1e6, grp, "auto", CommKind.DP)
    items = tuple(ChainSegment(0.7 + 0.3 * i, 1.1, (0.2,), 0.4, grp, grp) for i in range(n))
    g_proto = Task(-1, TaskKind.COLLECTIVE, "g0", "zero", 0.0, comm=g_spec)
    r_proto = Task(-1, TaskKind.COLLECTIVE, "g0", "dp", 0.0, comm=r_spec)
    return ChainStatic(items, "zero", "dp", True, g_proto, r_proto, frozenset(grp), None)


@pytest.mark.parametrize("anchored", [False, True])  # the second chain on the first's marks
def test_every_dependency_kind_before_and_after_the_first_chain(anchored: bool) -> None:
    b = GraphBuilder()
    probes: list[tuple[int, int]] = []  # (probe task, its one dependency)

    def probe(dep: int, over: bool) -> None:
        """A task waiting on ``dep`` only, alone on its device: a plain collective, or an
        OverTask (its compute and its collective both wait on ``dep``)."""
        dev = f"p{len(probes)}"
        if over:
            tid = b.add_over(dev, 0.3, [dep], "probe", 0, 0, (0.05,), ("tp", 0.45))
        else:
            tid = b.add(TaskKind.COLLECTIVE, dev, "probe", 0.1, [dep])
        probes.append((tid, dep))

    a = b.add(TaskKind.COMPUTE, "g0", "compute", 1.25)
    op = b.add(TaskKind.COMPUTE, "g0", "compute", 1.5, [a], "op", 0, 0, None, (0.5, 0.375, 0.0625))
    pp = CommSpec(CollectiveOp.SENDRECV, 1e6, ("g0", "g2"), "auto", CommKind.PP)
    _S_SEND_S(b.tasks[op], 0.625)
    _S_SEND(b.tasks[op], pp)
    ov = b.add_over("g0", 0.5, [op + SENT], "ov", 0, 0, (0.125, 0.25), ("tp", 0.875))
    kinds = [a, op, op + SENT, ov, piece_end(op, 0), piece_end(op, 1), piece_end(op, 2),
             piece_end(ov, 0)]  # fmt: skip
    for over in (False, True):
        for d in kinds:
            probe(d, over)
    first_probes = len(probes)
    n = 3
    c = b.add_chain("g0", [ov], "F0", 0, 0, (_static(n), -1, a))
    a0, a1 = (chain_mark(c, n - 2), chain_mark(c, n - 1)) if anchored else (op, ov)
    c2 = b.add_chain("g0", [c, chain_mark(c, n)], "F1", 1, 0, (_static(2), a0, a1))
    after = [*kinds, c, c2, *(chain_mark(c, j) for j in range(n + 1)), chain_mark(c2, 1)]
    for over in (False, True):
        for d in after:
            probe(d, over)
    ov2 = b.add_over("g0", 0.5, [c2, op + SENT], "ov2", 1, 0, (0.125,), ("tp", 0.875))
    for over in (False, True):
        for d in (ov2, piece_end(ov2, 1)):
            probe(d, over)
    graph = b.build()
    first_chain = next(t.tid for t in graph.tasks if t.then_s is CHAIN_MARK)
    assert first_chain == c
    assert all(tid < c for tid, _ in probes[:first_probes])  # in _list_schedule's loop
    assert all(tid > c for tid, _ in probes[first_probes:])  # in _chain_mode's loop

    tl = _list_schedule(graph)
    start, end, overs, marks = _reference(graph)
    assert list(tl.start_s) == start and list(tl.end_s) == end
    assert tl.overs == overs
    assert tl.chains is not None and {k: tl.chain_marks(k) for k in tl.chains} == marks
    for tid, dep in probes:  # each probe starts exactly at its dependency's end, later than 0
        want = _ref_end(dep, start, end, graph.tasks, marks)
        assert want > 0.0
        assert tl.start_s[tid] == want
        if type(graph.tasks[tid]) is OverTask:  # its collective too (_over's decoding)
            assert tl.overs[tid] == want
    # the probes read distinct ends: no kind is decoded as another
    ends = [_ref_end(d, start, end, graph.tasks, marks) for d in after]
    assert len(set(ends)) == len(after)


@given(tid=st.integers(0, SENT - 1), j=st.integers(0, 4095), base=st.sampled_from([CHAIN, HEAD]))
def test_bit_decoding_is_divmod(tid: int, j: int, base: int) -> None:
    """``sim.chains.SHIFT`` / ``LOW`` (the decoders' two bit operations) split an encoded
    dependency less its base as ``divmod(x, SENT)`` does, for every task id below ``SENT``
    and mark or piece index (``HEAD`` ones below ``CHAIN``)."""
    x = base + tid + j * SENT
    assume(not (base == HEAD and x >= CHAIN))
    assert ((x - base) >> sim_chains.SHIFT, (x - base) & sim_chains.LOW) == divmod(x - base, SENT)
