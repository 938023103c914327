"""A new message size over a group with in-switch or recent candidates (NVLS, NVLS tree, PAT,
CollNet) prices the group's size-free terms (``NcclChoice._other_terms``, kept per table entry
where ``TERMS_KEPT``; ``nccl_recent.priced_terms``) instead of reading the group and the
release again (issue 27, wave 15b). Every result equals the one with the terms not kept, asked
in the same order, on systems with each kind of candidate and at sizes on both sides of the
one size threshold the terms have (the NVLS tree's correction below 2**24 x 64 B on
Blackwell with x86 hosts, NCCL 2.29); a group without such candidates keeps no terms."""

from __future__ import annotations

import math

import pytest

from perfmodel.comm import CommCostModel
from perfmodel.comm.nccl_choice import NcclChoice
from perfmodel.comm.nccl_recent import NVLS_TREE_CORRECTION_BELOW, priced_terms, recent_terms
from perfmodel.comm.params import Algorithm, Protocol
from perfmodel.errors import ConfigError
from perfmodel.ops import CollectiveOp
from perfmodel.topology import Topology, load_system
from perfmodel.topology.nccl_p2p import HostCpu, NcclRelease, with_nccl_p2p_rule

OPS = ("allreduce", "allgather", "reducescatter", "broadcast", "reduce")
#: 1 GiB = 2**24 x 64 B is the NVLS tree correction's threshold: sizes just below, at, above
THRESHOLD_BYTES = float(2**NVLS_TREE_CORRECTION_BELOW * 64)
SIZES = (4096.0, 1.5e6, 16 * 2**20, THRESHOLD_BYTES - 1.0, THRESHOLD_BYTES, 3e9)


def _b200_x86() -> Topology:
    """Four DGX B200 with NCCL 2.29 stated and an Intel host: the NVLS tree takes NCCL 2.29's
    size correction."""
    return with_nccl_p2p_rule(load_system("dgx-b200", nodes=4), NcclRelease(2, 29), HostCpu.INTEL)


SYSTEMS = {
    "dgx-h100x1": lambda: load_system("dgx-h100"),  # NVLS all-reduce / all-gather
    "dgx-h100x4": lambda: load_system("dgx-h100", nodes=4),  # NVLS tree, PAT
    "dgx-b200x4-2.29-x86": _b200_x86,  # NVLS tree with the size correction
    "sharp": lambda: load_system("dgx-h100", nodes=2).with_sharp(True),  # CollNet
    "dgx-a100x4": lambda: load_system("dgx-a100", nodes=4),  # PAT on Ampere
}


def _groups(topo: Topology) -> list[tuple[str, ...]]:
    """A server's GPUs, half of them, one GPU per server, two GPUs per server, all GPUs."""
    gpn, n = topo.gpus_per_node, topo.num_gpus // topo.gpus_per_node
    gpus = topo.gpus
    out = [tuple(gpus[:gpn]), tuple(gpus[: gpn // 2])]
    if n > 1:
        out.append(tuple(gpus[s * gpn] for s in range(n)))
        out.append(tuple(gpus[s * gpn + k] for s in range(n) for k in (0, 1)))
        out.append(tuple(gpus))
    return out


def _results(topo: Topology, on: bool, monkeypatch: pytest.MonkeyPatch) -> list:
    with monkeypatch.context() as mp:
        mp.setattr(NcclChoice, "TERMS_KEPT", on)
        model = CommCostModel(topo)
        out = []
        for m in (*SIZES, *(1.37 * s for s in SIZES)):  # the second pass: known groups
            for g in _groups(topo):
                for op in OPS:
                    for algo in ("auto", "nvls", "nvls_tree", "pat", "collnet", "ring"):
                        try:
                            out.append(model.collective(op, m, g, algorithm=algo))
                        except ConfigError as e:  # an algorithm the op or group lacks
                            out.append(("refused", str(e)))
        return out


@pytest.mark.parametrize("name", sorted(SYSTEMS))
def test_results_equal_with_the_terms_not_kept(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    topo = SYSTEMS[name]()
    on = _results(topo, True, monkeypatch)
    off = _results(topo, False, monkeypatch)
    assert on == off
    priced = [r for r in on if not isinstance(r, tuple)]
    assert len(priced) > len(on) // 3
    # the candidates the terms stand for are chosen or forced somewhere on each system
    assert {r.algorithm for r in priced} & {
        Algorithm.NVLS,
        Algorithm.NVLS_TREE,
        Algorithm.PAT,
        Algorithm.COLLNET,
    }


def test_terms_kept_where_the_group_has_such_candidates(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """PAT over one GPU per server keeps its terms; a ring/tree-only group (one A100 server's
    all-reduce: no NVLS on Ampere, one server) keeps none (the must-not-apply case: its entry
    says none at any size after the first, whose read found none, and no terms are read or
    priced for a new size)."""
    topo = load_system("dgx-h100", nodes=4)
    model = CommCostModel(topo)
    gpn = topo.gpus_per_node
    dp = tuple(topo.gpus[s * gpn] for s in range(4))
    model.collective("allgather", 2**20, dp)
    model.collective("allgather", 2**21, dp)
    info = model.group_info(dp)
    entries = [e for e in model.nccl._tables.entries.values() if e[0] is info]
    assert entries and all(e[3] is False for e in entries)
    assert [t[0] for t in entries[0][4]] == [Algorithm.PAT]

    a100 = load_system("dgx-a100")
    plain = CommCostModel(a100)
    plain.collective("allreduce", 2**20, a100.gpus)
    info = plain.group_info(a100.gpus)
    entries = [e for e in plain.nccl._tables.entries.values() if e[0] is info]
    assert entries and all(e[3] is True and e[4] == [] for e in entries)
    reads: list[object] = []
    monkeypatch.setattr(NcclChoice, "_other_terms", lambda *a: reads.append(a) or [])
    monkeypatch.setattr("perfmodel.comm.nccl_choice.priced_terms", lambda *a: reads.append(a))
    plain.collective("allreduce", 2**21, a100.gpus)
    assert reads == []


def test_nvls_tree_correction_across_its_threshold() -> None:
    """Hand-computed: an NVLS tree term of latency 25 us and algorithm bandwidth 100 GB/s on
    NCCL 2.29's table takes ``treeCorrectionFactor[Simple][23]`` one byte below 1 GiB
    (``floor(log2((2**30 - 1) / 64)) = 23 < 24``) and none at 1 GiB (``logSize = 24``); an
    uncorrected term never does."""
    tuner = CommCostModel(_b200_x86()).nccl.tuner
    corr = tuner.tree_correction[Protocol.SIMPLE]
    term = (Algorithm.NVLS_TREE, Protocol.SIMPLE, 25e-6, 100e9, 90e9, True)
    plain = (Algorithm.PAT, Protocol.SIMPLE, 25e-6, 100e9, 100e9, False)
    below, at = THRESHOLD_BYTES - 1.0, THRESHOLD_BYTES
    got = priced_terms([term, plain], below, tuner)
    assert got[0] == (25e-6 + below / (100e9 * corr[23]), *term[:2], 25e-6, 90e9)
    assert got[1] == (25e-6 + below / 100e9, *plain[:2], 25e-6, 100e9)
    assert corr[23] != 1.0  # the threshold matters on this table
    at_got = priced_terms([term], at, tuner)
    assert at_got[0][0] == 25e-6 + at / 100e9
    assert math.floor(math.log2(below / 64)) == 23


def test_recent_terms_of_an_nvls_tree_are_marked_for_the_correction() -> None:
    """The NVLS tree across four DGX B200 (NCCL 2.29, Intel host) is marked; on Hopper it is
    not (NCCL corrects only Blackwell with x86 hosts)."""
    for topo, marked in ((_b200_x86(), True), (load_system("dgx-h100", nodes=4), False)):
        model = CommCostModel(topo)
        info = model.group_info(topo.gpus)
        terms = recent_terms(model.nccl, CollectiveOp.ALLREDUCE, info)
        tree = [t for t in terms if t[0] is Algorithm.NVLS_TREE]
        assert len(tree) == 1 and tree[0][5] is marked


def test_bounded_memo_put_keeps_what_get_keeps() -> None:
    """``BoundedMemo.put`` (the writes of ``GroupMemo._member_keys`` and
    ``SharedResults._reads_of`` / ``_shared_reads``) keeps at most ``size`` entries, the first
    kept dropped first, as ``get`` does on a miss; a key already kept is replaced in place."""
    from perfmodel._memo import BoundedMemo

    put, got = BoundedMemo[int, int](3), BoundedMemo[int, int](3)
    for k in (5, 1, 5, 7, 2, 9, 1):
        got.get(k, lambda k=k: k * k)
        if k not in put.entries:
            put.put(k, k * k)
    assert put.entries == got.entries == {2: 4, 9: 81, 1: 1}
    put.put(9, 0)
    assert list(put.entries.items()) == [(2, 4), (9, 0), (1, 1)]
