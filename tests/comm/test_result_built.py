"""``AnalyticCommModel._result`` makes a :class:`CommResult`'s ``__dict__`` at once
(:attr:`AnalyticCommModel.FAST_RESULT`): the same result as its ``__init__``, field for field
and in the same order, for every algorithm family (issue 27)."""

from __future__ import annotations

import pytest

from perfmodel.comm import CommCostModel
from perfmodel.comm.analytic import CommResult
from perfmodel.topology import load_system

CASES = [
    ("allreduce", "auto"),
    ("allreduce", "ring"),
    ("allreduce", "tree"),
    ("allreduce", "halving_doubling"),
    ("allgather", "auto"),
    ("reducescatter", "auto"),
    ("broadcast", "auto"),
    ("alltoall", "auto"),
    ("sendrecv", "auto"),
]


def _results(fast: bool) -> list[CommResult]:
    topo = load_system("dgx-a100", nodes=2)
    model = CommCostModel(topo)
    model.FAST_RESULT = fast
    groups = [topo.gpus[:2], topo.gpus[:8], topo.gpus[::4], topo.gpus]
    return [
        model.collective(op, size, group, algorithm=algo)
        for op, algo in CASES
        for group in groups
        for size in (1e3, 3.5e6, 2**30)
    ]


def test_result_built_is_init_result() -> None:
    built, direct = _results(True), _results(False)
    assert len(built) == len(direct) == 9 * 4 * 3
    for a, b in zip(built, direct, strict=True):
        assert type(a) is CommResult
        assert list(vars(a).items()) == list(vars(b).items())  # same fields, same order
        assert a == b and hash(a) == hash(b) and repr(a) == repr(b)
        assert a.to_dict() == b.to_dict()


def test_result_built_stays_frozen() -> None:
    res = _results(True)[0]
    with pytest.raises(AttributeError):
        res.time_s = 0.0  # type: ignore[misc]
