"""Transfers.by_shape (issue 27): which sets of sends have the time kept for their name-free
shape, so that pipeline stages moved by whole servers share it
(``perfmodel/parallel/stage_shift.py``)."""

from __future__ import annotations

from perfmodel.comm import CommCostModel
from perfmodel.topology import load_system


def test_transfers_by_shape() -> None:
    """Sends across servers of one class are kept by shape; none, a self-send, or sends
    inside one server are not."""
    topo = load_system("dgx-a100", nodes=4)
    tr = CommCostModel(topo).transfers
    g = topo.gpus
    assert tr.by_shape([(g[0], g[8]), (g[1], g[9])])
    assert not tr.by_shape([])
    assert not tr.by_shape([(g[0], g[0])])
    assert not tr.by_shape([(g[0], g[1])])
