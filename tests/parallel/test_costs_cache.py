"""SystemCosts caches layer times by ``LayerCost.cost_key`` (identical blocks cost once) and
memoises collectives by (op, bytes, group, algorithm)."""

from __future__ import annotations

from dataclasses import replace

from perfmodel.dtypes import Precision
from perfmodel.ops import CollectiveOp
from perfmodel.parallel.costs import SystemCosts
from perfmodel.topology import load_system
from perfmodel.workload import build_model


def test_identical_blocks_share_one_layer_time() -> None:
    costs = SystemCosts(load_system("dgx-a100"), Precision.parse("bf16"))
    wl = build_model("gpt", batch_size=1, precision="bf16", layers=4, hidden=256, heads=4)
    a = next(la for la in wl.layers if la.block == 1 and la.gemm is not None)
    b = next(la for la in wl.layers if la.block == 3 and la.name.endswith(a.name[7:]))
    assert a.name != b.name and a.cost_key() == b.cost_key()
    assert costs._layer(a) is costs._layer(b)
    assert costs._layer(replace(a, name="x", block=None)) is costs._layer(a)
    # a different cost field is a different entry
    assert costs._layer(replace(a, fwd_flop=2 * a.fwd_flop)) is not costs._layer(a)


def test_relabelled_equals_replace() -> None:
    wl = build_model("gpt", batch_size=1, layers=2, hidden=256, heads=4)
    la = wl.layers[-5]
    assert la.relabelled("y", 9) == replace(la, name="y", block=9)


def test_collective_memo_returns_the_model_time() -> None:
    topo = load_system("dgx-a100")
    costs = SystemCosts(topo, Precision.parse("bf16"))
    group = topo.gpus[:8]
    t = costs.collective_time(CollectiveOp.ALLREDUCE, 2**30, group)
    ref = costs.comm.collective(CollectiveOp.ALLREDUCE, 2**30, tuple(group)).time_s
    assert t == ref > 0
    assert costs.collective_time(CollectiveOp.ALLREDUCE, 2**30, list(group)) == t


def test_concurrent_time_keeps_the_factor_per_groups(monkeypatch) -> None:
    """The sharing factor reads the groups only: asked once per set of concurrent groups,
    whatever the op and size, and every answer equals the one computed afresh (issue 27)."""
    import perfmodel.parallel.costs as costs_mod

    topo = load_system("dgx-a100", nodes=4, network="roce-100g", nics_per_node=1)
    costs = SystemCosts(topo, Precision.parse("bf16"))
    gpus = topo.gpus
    # 8 data-parallel groups, one GPU per server each, all behind one NIC per server
    groups = [tuple(gpus[8 * s + i] for s in range(4)) for i in range(8)]
    asked = []
    real = costs_mod.ring_sharing_factor

    def counted(t, gs):
        asked.append(gs)
        return real(t, gs)

    monkeypatch.setattr(costs_mod, "ring_sharing_factor", counted)
    cases = [
        (op, nbytes)
        for op in (CollectiveOp.ALLREDUCE, CollectiveOp.REDUCESCATTER, CollectiveOp.ALLGATHER)
        for nbytes in (2**20, 3 * 2**24, 2**30)
    ]
    got = [costs.concurrent_time(op, nbytes, groups) for op, nbytes in cases]
    assert len(asked) == 1
    factor = real(topo, tuple(groups))
    assert factor > 1.0  # the NIC is shared: the memo has something to keep
    for (op, nbytes), t in zip(cases, got, strict=True):
        base = costs.comm.collective(op, nbytes, groups[0]).time_s
        lat = min(max(costs.comm.collective(op, nbytes, groups[0]).latency_s, 0.0), base)
        assert t == lat + (base - lat) * factor


def test_bounded_memos_answer_as_unbounded(monkeypatch) -> None:
    """Memos of one entry (:data:`~perfmodel.parallel.costs.COMM_MEMO_SIZE`,
    :data:`~perfmodel.parallel.costs.PRICES_SIZE`) drop each entry at the next new key and
    answer as the shipped bounds: a collective's time, latency and algorithm are one entry,
    dropped together, so a concurrent collective priced again after another still finds its
    latency (rev28: a sweep in one process grew them without end)."""
    import perfmodel.parallel.costs as costs_mod

    topo = load_system("dgx-a100", nodes=4, network="roce-100g", nics_per_node=1)
    gpus = topo.gpus
    groups = [tuple(gpus[8 * s + i] for s in range(4)) for i in range(8)]
    other = [tuple(gpus[8 * s + i] for s in range(2)) for i in range(8)]
    wl = build_model("gpt", batch_size=1, precision="bf16", layers=2, hidden=256, heads=4)
    asks = [(groups, 2**20), (other, 2**20), (groups, 3 * 2**24), (groups, 2**20), (other, 2**20)]

    def answers() -> list[object]:
        costs = SystemCosts(topo, Precision.parse("bf16"))
        out: list[object] = [costs.concurrent_time(CollectiveOp.ALLREDUCE, n, g) for g, n in asks]
        for g, n in asks:
            key = costs.concurrent_key(g)
            assert key is not None
            out.append(costs.concurrent_keyed(CollectiveOp.ALLREDUCE, n, g, "auto", key))
        out += [costs._layer(la) for la in wl.layers + wl.layers]
        return out

    monkeypatch.setattr(costs_mod, "_SHARED_COMPUTE", [])
    shipped = answers()
    monkeypatch.setattr(costs_mod, "_SHARED_COMPUTE", [])
    monkeypatch.setattr(costs_mod, "COMM_MEMO_SIZE", 1)
    monkeypatch.setattr(costs_mod, "PRICES_SIZE", 1)
    assert answers() == shipped
