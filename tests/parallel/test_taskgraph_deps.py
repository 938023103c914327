"""GraphBuilder.add checks that every dependency precedes the task, decoded (review nit 12)."""

from __future__ import annotations

import pytest

from perfmodel.parallel.taskgraph import HEAD, SENT, GraphBuilder, TaskKind


def _two() -> GraphBuilder:
    g = GraphBuilder()
    g.add(TaskKind.COMPUTE, "d", "s", 1.0)
    g.add(TaskKind.COMPUTE, "d", "s", 1.0, (0,))
    return g


@pytest.mark.parametrize("deps", [(5, 0 + SENT), (7, 1 + HEAD), (0, 9, 1 + SENT)])
def test_a_later_plain_dependency_beside_an_encoded_one_is_caught(deps) -> None:
    """An encoded dependency (``tid + SENT``, ``tid + HEAD``) sorts last whatever its task, so
    checking only the largest let a plain dependency on a later task through."""
    with pytest.raises(AssertionError, match="precede"):
        _two().add(TaskKind.COMPUTE, "d", "s", 1.0, deps)


@pytest.mark.parametrize("deps", [(1, 0 + SENT), (0, 1 + HEAD), (0, 1, 1 + SENT), ()])
def test_earlier_dependencies_pass(deps) -> None:
    g = _two()
    tid = g.add(TaskKind.COMPUTE, "d", "s", 1.0, deps)
    assert tid == 2 and {d % SENT for d in g.tasks[tid].deps} <= {0, 1}
