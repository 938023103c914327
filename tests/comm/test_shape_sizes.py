"""A new message size of a group spanning servers whose image in the first servers of its
classes is analysed is priced on the image's analysis (issue 14, ``SharedResults._by_shape``):
no relabelled copy is made, and the result equals the group's own, bit for bit."""

from __future__ import annotations

import pytest
from reference_models import direct_model

from perfmodel.comm import CommCostModel
from perfmodel.topology import Topology
from tests.comm.test_shape_memo import CASES


@pytest.mark.parametrize(("name", "topo"), CASES, ids=[c[0] for c in CASES])
def test_new_sizes_of_images_equaldirect_model(name: str, topo: Topology) -> None:
    """First and last pipeline stages' GPUs of other local ids (no ring pattern), each
    translate asked at a size no other group asked for."""
    model, direct = CommCostModel(topo), direct_model(topo)
    n, gpn = topo.num_nodes, topo.gpus_per_node
    pairs = [(0, 1), (1, 2), (0, 2), (2, 0), (n - 1, 1)]
    for k, (a, b) in enumerate(pairs):
        group = (topo.gpus[a * gpn], topo.gpus[b * gpn + gpn // 2])
        for op in ("allreduce", "allgather", "alltoall"):
            for m in (2**20 + 64 * k, 2**27 + 64 * k):
                assert model.collective(op, m, group) == direct.collective(op, m, group), (
                    name,
                    group,
                    op,
                    m,
                )


def test_images_priced_without_relabelling(monkeypatch: pytest.MonkeyPatch) -> None:
    from perfmodel.topology import load_system

    topo = load_system("dgx-a100", nodes=4)
    model = CommCostModel(topo)
    first, other = ("n0/gpu0", "n1/gpu4"), ("n0/gpu0", "n3/gpu4")
    model.collective("allreduce", 2**20, first)
    model.collective("allreduce", 2**20, other)  # the image's analysis, relabelled once
    relabelled: list[tuple[str, ...]] = []
    real = model.groups._shape_group
    monkeypatch.setattr(model.groups, "_shape_group", lambda m: relabelled.append(m) or real(m))
    other2 = ("n1/gpu0", "n2/gpu4")
    got = model.collective("allreduce", 3 * 2**20, other2)
    assert relabelled == []
    assert got == direct_model(topo).collective("allreduce", 3 * 2**20, other2)


def test_nccl_table_reads_size_per_call() -> None:
    """The size-free candidate table is kept per (op, group analysis); what reads the size
    (the ring plateau from n/16 x 64 KiB, the tree correction up to 2^21 x 64 B) is applied per
    call: every size and op equals a fresh model's first pass, bit for bit, and every candidate
    list equals the one-pass computation before the table (commit 3d41050: the same
    candidates' ``repr`` digested, so a plateau or correction applied to the wrong op, algorithm
    or size fails here, not only where a step time happens to move)."""
    import hashlib

    from perfmodel.ops import CollectiveOp
    from perfmodel.topology import load_system

    topo = load_system("dgx-a100", nodes=4)
    model = CommCostModel(topo)
    groups = [tuple(topo.gpus[s * 8] for s in range(4)), tuple(topo.gpus[:8]), topo.gpus[:16]]
    sizes = [64.0, 4096.0, 4 * 65536 - 1, 4 * 65536, 2**27 - 1, 2**27, 2**28, 3e9]
    digest = hashlib.sha256()
    for group in groups:
        for op in (CollectiveOp.ALLREDUCE, CollectiveOp.ALLGATHER, CollectiveOp.BROADCAST):
            for m in sizes:
                got = model.nccl.candidates(op, m, model.group_info(group))
                fresh = CommCostModel(topo)
                assert got == fresh.nccl.candidates(op, m, fresh.group_info(group))
                digest.update(repr(got).encode())
    assert len(model.nccl._tables) == 3 * len(groups)
    assert digest.hexdigest()[:16] == "dff310a7a28fe614"


def test_no_shape_looked_for_while_none_is_inside(monkeypatch: pytest.MonkeyPatch) -> None:
    """While no image is known to stay in its servers (``GroupMemo.shape_inside`` holds no
    ``True``), a group's shape is not looked for (``GroupMemo.inside_shape``): a ring pattern's
    data-parallel groups are priced without mapping their members; once an image is inside, its
    translates' shapes are read again, and every result equals the direct model's."""
    from perfmodel.topology import load_system

    topo = load_system("dgx-a100", nodes=4)
    model, direct = CommCostModel(topo), direct_model(topo)
    looked: list[tuple[str, ...]] = []
    real = model.groups.collective_shape
    monkeypatch.setattr(
        model.groups, "collective_shape", lambda m, a: looked.append(m) or real(m, a)
    )
    dp = [tuple(topo.gpus[s * 8 + lid] for s in range(4)) for lid in (0, 4)]
    for group in dp:
        for m in (2**20, 2**27):
            assert model.collective("allreduce", m, group) == direct.collective(
                "allreduce", m, group
            )
    assert not any(model.groups.shape_inside.values())
    assert looked == []
    pair, translate = ("n0/gpu0", "n1/gpu4"), ("n1/gpu0", "n2/gpu4")  # no ring pattern
    for group in (pair, translate):
        assert model.collective("allreduce", 3 * 2**20, group) == direct.collective(
            "allreduce", 3 * 2**20, group
        )
    assert True in model.groups.shape_inside.values()
    assert translate in looked
