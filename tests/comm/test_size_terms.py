"""A new message size over a group with in-switch or recent candidates (NVLS, NVLS tree, PAT,
CollNet) prices the group's size-free terms (``NcclChoice._other_terms``, kept per table entry
where ``TERMS_KEPT``; ``nccl_recent.priced_terms``) instead of reading the group and the
release again (issue 27, wave 15b). Every result equals the one with the terms not kept, asked
in the same order, on systems with each kind of candidate and at sizes on both sides of the
one size threshold the terms have (the NVLS tree's correction below 2**24 x 64 B on
Blackwell with x86 hosts, NCCL 2.29); a group without such candidates keeps no terms.

That on/off comparison proves the cache exact, not the terms: both arms build the terms with
the same code (``_other_candidates`` is ``priced_terms(_other_terms(...))``), so a wrong term
is wrong in both. Each kind's term (NVLS all-reduce and all-gather, NVLS tree, CollNet, PAT) is
checked against its hand-computed latency and bandwidths below (mend18)."""

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


def _term(terms: list, algo: Algorithm) -> tuple:
    (t,) = [t for t in terms if t[0] is algo]
    return t


def _priced_at_1gib(
    model: CommCostModel, term: tuple, lat_s: float, algbw_Bps: float, bus_Bps: float
) -> None:
    """The term is ``(algo, Simple, lat_s, algbw_Bps, bus_Bps, False)`` and prices 1 GiB at
    ``lat_s + 2**30 / algbw_Bps`` reporting ``bus_Bps``."""
    assert term[1] is Protocol.SIMPLE and term[5] is False
    assert term[2:5] == pytest.approx((lat_s, algbw_Bps, bus_Bps), rel=1e-12)
    (got,) = priced_terms([term], 2.0**30, model.nccl.tuner)
    assert got == pytest.approx((lat_s + 2**30 / algbw_Bps, term[0], term[1], lat_s, bus_Bps))


def test_nvls_terms_by_hand() -> None:
    """One DGX H100, NVLS graph of k = 8 heads at s = 40 GB/s, nvlsEfficiency 0.85 (Hopper),
    latency 25 us. All-reduce (``in_switch_terms``): bus ``2 k s eff (k - 1)/k`` = 476 GB/s,
    algorithm bandwidth ``bus x n / (2 (n - 1))`` = 476 x 8 / 14 = 272 GB/s. All-gather
    (``recent_terms``): ``k s eff (k - 1)/k (n - 1)/n`` = 208.25 GB/s, no bus-factor ratio."""
    topo = load_system("dgx-h100")
    model = CommCostModel(topo)
    info = model.group_info(topo.gpus)
    ar = _term(model.nccl.in_switch_terms(info), Algorithm.NVLS)
    _priced_at_1gib(model, ar, 25e-6, 272e9, 476e9)
    ag = _term(recent_terms(model.nccl, CollectiveOp.ALLGATHER, info), Algorithm.NVLS)
    _priced_at_1gib(model, ag, 25e-6, 208.25e9, 208.25e9)


def test_nvls_tree_term_by_hand() -> None:
    """Four DGX H100, all 32 GPUs, all-reduce: bus ``min(intra, inter, k x
    perChMaxNVLSTreeBw)`` with intra the server's NVLS all-reduce bus bandwidth at the 400G
    port's speed (2 x 8 x 40 GB/s x 0.85 x 7/8 = 476 GB/s), inter the servers' ring bandwidth
    (368 GB/s, the group analysis'; x 1 beyond 2 servers) and the cap 8 x 45.5 GB/s = 364 GB/s
    (Hopper beyond 2 nodes): 364 GB/s; algorithm bandwidth 364 x 32 / 62 = 187.87 GB/s; latency
    ``25 us + 2 log2(4) x 20.9 us`` = 108.6 us."""
    topo = load_system("dgx-h100", nodes=4)
    model = CommCostModel(topo)
    info = model.group_info(topo.gpus)
    assert info.inter_bw_Bps == pytest.approx(368e9)
    tree = _term(recent_terms(model.nccl, CollectiveOp.ALLREDUCE, info), Algorithm.NVLS_TREE)
    _priced_at_1gib(model, tree, 108.6e-6, 364e9 * 32 / 62, 364e9)


def test_pat_term_by_hand() -> None:
    """Four DGX H100, one GPU per server, all-gather: algorithm bandwidth 0.75 x the ring's 46
    GB/s (the group analysis') = 34.5 GB/s, reported as is; latency ``8 + log2(4) x 14 / 3.5 +
    4 x 2.8`` = 27.2 us."""
    topo = load_system("dgx-h100", nodes=4)
    model = CommCostModel(topo)
    info = model.group_info(tuple(topo.gpus[s * 8] for s in range(4)))
    assert info.ring_bw_Bps == pytest.approx(46e9)
    pat = _term(recent_terms(model.nccl, CollectiveOp.ALLGATHER, info), Algorithm.PAT)
    _priced_at_1gib(model, pat, 27.2e-6, 34.5e9, 34.5e9)


def test_collnet_term_by_hand() -> None:
    """Two DGX H100 on SHARP, all 16 GPUs, all-reduce: bus ``min(intra, inter) x 0.85``
    (Hopper) = min(405, 368) x 0.85 = 312.8 GB/s (the group analysis' bandwidths), algorithm
    bandwidth half of it, 156.4 GB/s; latency ``2 (3.7 us + 7 x 0.4 us) + 31 us`` = 44 us."""
    topo = load_system("dgx-h100", nodes=2).with_sharp(True)
    model = CommCostModel(topo)
    info = model.group_info(topo.gpus)
    assert (info.intra_bw_Bps, info.inter_bw_Bps) == pytest.approx((405e9, 368e9))
    cn = _term(model.nccl.in_switch_terms(info), Algorithm.COLLNET)
    _priced_at_1gib(model, cn, 44e-6, 156.4e9, 312.8e9)


def test_bounded_memo_put_keeps_what_get_keeps() -> None:
    """``BoundedMemo.put`` (the writes of ``SharedResults._reads_of`` / ``_shared_reads``, and
    of ``get`` on a miss) keeps at most ``size`` entries, the first kept dropped first; a key
    already kept is replaced in place."""
    from perfmodel._memo import BoundedMemo

    put, got = BoundedMemo[int, int](3), BoundedMemo[int, int](3)
    for k in (5, 1, 5, 7, 2, 9, 1):
        got.get(k, lambda k=k: k * k)
        if k not in put.entries:
            put.put(k, k * k)
    assert put.entries == got.entries == {2: 4, 9: 81, 1: 1}
    put.put(9, 0)
    assert list(put.entries.items()) == [(2, 4), (9, 0), (1, 1)]
