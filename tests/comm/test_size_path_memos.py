"""A new message size over a group already asked for (issue 27: the 20-40 new sizes of a new
plan's data-parallel and tensor-parallel collectives) reads nothing of the group again: its
checked members (``AnalyticCommModel._check``, ``KEEP_CHECKED``), what ``numbers_key`` reads of
the members alone (``GroupMemo._member_key``, ``MEMBER_KEYS``) and whether the group has in-switch
or recent candidates at all (``NcclChoice._other_candidates``, ``NONE_KEPT``) are kept, and two
ring patterns whose analyses price alike share their results (``SharedResults._by_reads``,
``BY_READS``). Every
result equals the one with those memos off, asked in the same order, on uniform, fat-tree,
NVLS, non-uniform and imported systems; the memos answer as before where the state they do
not keep changes (a ring pattern dropped from its memo), and an invalid group is refused
every time."""

from __future__ import annotations

import dataclasses
import enum
import math
import random
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from perfmodel.cli.topo import write_imported_system
from perfmodel.comm import CommCostModel
from perfmodel.comm.analytic import AnalyticCommModel
from perfmodel.comm.group_memo import GroupMemo, SharedResults
from perfmodel.comm.nccl_choice import NcclChoice, _fastest
from perfmodel.errors import ConfigError
from perfmodel.ops import CollectiveOp
from perfmodel.topology import Topology, load_system
from perfmodel.topology.importers import import_topology

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "topology"
OPS = ("allreduce", "allgather", "reducescatter", "broadcast", "reduce")
SIZES = (4096.0, 1.5e6, 25 * 2**20, 402653184.0, 3e9)


def _non_uniform() -> Topology:
    """Three DGX A100, one NVLink of the second server at half its bandwidth (the second
    server in no class of interchangeable servers)."""
    topo = load_system("dgx-a100", nodes=3)
    g = topo.graph.copy()
    u, v = next((u, v) for u, v in g.edges if u.startswith("n1/") and v.startswith("n1/"))
    g.edges[u, v]["bandwidth_Bps"] *= 0.5
    return dataclasses.replace(topo, graph=g)


def _imported() -> Topology:
    """An NCCL XML dump of one DGX A100, imported (``topo import``) and read back as a
    system of two such servers on an HDR fabric."""
    src = FIXTURES / "nccl-dgx-a100.xml"
    out = Path(tempfile.mkdtemp()) / "box.toml"
    write_imported_system(import_topology(src), str(src), str(out), force=False)
    topo = load_system(str(out), nodes=2)
    return topo if topo.fabric is not None else load_system(str(out), nodes=2, network="ib-hdr")


SYSTEMS = {
    "dgx-a100x4": lambda: load_system("dgx-a100", nodes=4),
    "fat-tree": lambda: load_system("dgx-a100", nodes=4, fabric_topology="fat-tree"),
    "dgx-h100x2": lambda: load_system("dgx-h100", nodes=2),
    "non-uniform": _non_uniform,
    "imported": _imported,
}


def _groups(topo: Topology) -> list[tuple[str, ...]]:
    """Groups of every kind a plan asks for: in one server (tensor parallel, 2-8 GPUs), one
    GPU per server (data parallel, strided), pairs across servers (a tied embedding), two
    GPUs per server, and a group with the host CPU."""
    gpn, n = topo.gpus_per_node, topo.num_gpus // topo.gpus_per_node
    gpus = topo.gpus
    out: list[tuple[str, ...]] = []
    for s in range(n):
        out += [tuple(gpus[s * gpn : s * gpn + k]) for k in (2, 4, gpn)]
        out.append(tuple(gpus[s * gpn + gpn // 2 : s * gpn + gpn]))
    if n > 1:
        for lid in (0, 1, gpn - 1):
            out.append(tuple(gpus[s * gpn + lid] for s in range(n)))
            out.append(tuple(gpus[s * gpn + lid] for s in range(n - 1, -1, -1)))
        out.append((gpus[0], gpus[gpn + gpn - 1]))
        out.append(tuple(gpus[s * gpn + k] for s in range(n) for k in (0, 1)))
    cpus = [x for x, k in topo.graph.nodes(data="kind") if getattr(k, "value", k) == "cpu"]
    if cpus:
        out.append((gpus[0], gpus[1], cpus[0]))
    return out


def _asks(topo: Topology, seed: int) -> list[tuple[str, float, tuple[str, ...], str]]:
    """Every (op, size, group, algorithm) once, then a shuffled second pass with new sizes
    (the memos filled in another order than they were asked for first)."""
    rng = random.Random(seed)
    groups = _groups(topo)
    first = [(op, m, g, "auto") for g in groups for op in OPS for m in SIZES]
    first += [
        (op, 2**20, g, a) for g in groups[:6] for op in ("allreduce",) for a in ("ring", "tree")
    ]
    again = [(op, m * 1.37, g, a) for op, m, g, a in first]
    rng.shuffle(again)
    return first + again


def _results(topo: Topology, asks: list[Any], on: bool, monkeypatch: pytest.MonkeyPatch) -> list:
    with monkeypatch.context() as mp:
        mp.setattr(AnalyticCommModel, "KEEP_CHECKED", on)
        mp.setattr(GroupMemo, "MEMBER_KEYS", on)
        mp.setattr(NcclChoice, "NONE_KEPT", on)
        mp.setattr(SharedResults, "BY_READS", on)
        model = CommCostModel(topo)
        out = []
        for op, m, g, a in asks:
            try:
                out.append(model.collective(op, m, g, algorithm=a))
            except ConfigError as e:  # a CPU outside ps/host, an algorithm the group lacks
                out.append(("refused", str(e)))
        return out


@pytest.mark.parametrize("name", sorted(SYSTEMS))
def test_results_equal_with_the_memos_off(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    topo = SYSTEMS[name]()
    asks = _asks(topo, seed=len(name))
    on = _results(topo, asks, True, monkeypatch)
    off = _results(topo, asks, False, monkeypatch)
    assert on == off
    assert sum(1 for r in on if isinstance(r, tuple)) < len(on) // 2  # most are priced


def test_numbers_key_follows_the_pattern_memo(monkeypatch: pytest.MonkeyPatch) -> None:
    """A data-parallel group's key is ``None`` until a group of its ring pattern is analysed,
    the pattern's key after, and ``None`` again once the pattern is dropped from its memo
    (the member memo keeps the pattern's key, not whether it is known): as with the memo off,
    in each state."""
    topo = load_system("dgx-a100", nodes=4)
    gpn = topo.gpus_per_node
    group = tuple(topo.gpus[s * gpn + 3] for s in range(4))
    for on in (True, False):
        with monkeypatch.context() as mp:
            mp.setattr(GroupMemo, "MEMBER_KEYS", on)
            model = CommCostModel(topo)
            memo = model.groups
            assert memo.numbers_key(group) is None
            model.collective("allreduce", 2**20, group)
            key = memo.numbers_key(group)
            assert key is not None and key[0] == "ring"
            memo._patterns.entries.clear()  # the pattern dropped (its memo is bounded)
            assert memo.numbers_key(group) is None
            assert bool(memo._member_keys) is on


def test_twin_key_needs_the_twin_analysed(monkeypatch: pytest.MonkeyPatch) -> None:
    """Inside a server the key is ``None`` until the group's twin is analysed, then the twin's
    members: the first server's where the servers are built alike, the group's own in a
    server unlike the others (non-uniform)."""
    uniform = load_system("dgx-a100", nodes=2)
    for topo, twin_server in ((uniform, 0), (_non_uniform(), 1)):
        gpn = topo.gpus_per_node
        group = tuple(topo.gpus[gpn : gpn + 4])
        twin = tuple(topo.gpus[twin_server * gpn : twin_server * gpn + 4])
        for on in (True, False):
            with monkeypatch.context() as mp:
                mp.setattr(GroupMemo, "MEMBER_KEYS", on)
                model = CommCostModel(topo)
                assert model.groups.numbers_key(group) is None
                model.collective("allreduce", 2**20, group)
                assert model.groups.numbers_key(group) == ("twin", twin), on


def test_an_invalid_group_is_refused_every_time() -> None:
    """Only checked groups are kept: a name outside the system, a repeated GPU and an
    unhashable member are refused on every ask; a list is checked each time, not kept."""
    topo = load_system("dgx-a100", nodes=2)
    model = CommCostModel(topo)
    g = topo.gpus
    for bad in ((g[0], "n9/gpu0"), (g[0], g[0]), (g[0], ["x"])):
        for _ in range(2):
            with pytest.raises(ConfigError):
                model.collective("allreduce", 2**20, bad)  # type: ignore[arg-type]
    as_list = [g[0], g[1]]
    r = model.collective("allreduce", 2**20, as_list)
    assert r == model.collective("allreduce", 2**20, tuple(as_list))
    assert tuple(as_list) in model._checked.entries and len(model._checked) == 1


def test_nvls_candidates_are_asked_at_every_size() -> None:
    """One DGX H100 has NVLS all-reduces (in-switch candidates at every size: never marked
    none); one DGX A100 has none, marked after its first size, and its later sizes price
    as its first did with the memo off (the test above)."""
    for system, has in (("dgx-h100", True), ("dgx-a100", False)):
        topo = load_system(system)
        model = CommCostModel(topo)
        info = model.group_info(topo.gpus)
        for m in SIZES:
            cands = model.nccl.candidates(CollectiveOp.ALLREDUCE, m, info)
            assert any(c[1].value == "nvls" for c in cands) is has
        entry = model.nccl._tables.entries[
            (CollectiveOp.ALLREDUCE, id(info), model.nccl.tuner.release)
        ]
        assert entry[3] is (not has)


@given(st.lists(st.sampled_from([0.0, 1.0, 2.0, 2.0, 3.5, math.inf, math.nan, -1.0]), min_size=1))
def test_fastest_is_min_by_time(times: list[float]) -> None:
    """``_fastest`` picks the index ``min`` picks over the times (the first of equal times,
    NaN compared as ``min`` compares)."""
    cands = [(t, None, None, 0.0, 0.0) for t in times]
    assert _fastest(cands) == min(range(len(cands)), key=lambda k: cands[k][0])


GPT = {"layers": 8, "hidden": 2048, "heads": 16, "seq_len": 2048, "vocab": 32000}
#: (system, nodes) x (preset, dp, tp, pp) of the reports below: a rail-optimised and an NVLS
#: cluster and an imported system (``None``: the NCCL XML dump written as a system file)
REPORT_SYSTEMS = (("dgx-a100", 2), ("dgx-h100", 2), (None, 2))
REPORT_PLANS = (
    ("pytorch-ddp", 4, 2, 2),
    ("megatron-core", 2, 4, 2),
    ("fsdp", 8, 1, 2),
    ("pytorch-ddp", 16, 1, 1),
)


def _report_dicts(system: str, nodes: int, on: bool, monkeypatch: pytest.MonkeyPatch) -> list:
    """Every plan's report on ``system`` from fresh cost models (the memos off or on)."""
    import perfmodel.api as api
    import perfmodel.parallel.lower_shortcuts as shortcuts
    import perfmodel.parallel.lowering as lowering
    from perfmodel.api import Scenario, predict
    from perfmodel.pipeline import inputs

    out = []
    with monkeypatch.context() as mp:
        mp.setattr(AnalyticCommModel, "KEEP_CHECKED", on)
        mp.setattr(GroupMemo, "MEMBER_KEYS", on)
        mp.setattr(NcclChoice, "NONE_KEPT", on)
        mp.setattr(SharedResults, "BY_READS", on)
        mp.setattr(shortcuts, "_SHARED_CHUNKS", {})
        mp.setattr(lowering, "_CHUNKS", {})
        mp.setattr(api, "_REPORTS", {})
        inputs._system_costs.cache_clear()
        for preset, dp, tp, pp in REPORT_PLANS:
            sc = Scenario.from_dict(
                dict(system=system, nodes=nodes, gpus=dp * tp * pp, model="gpt",
                     model_args=GPT, precision="bf16", optimizer="adam", software=preset,
                     dp=dp, tp=tp, pp=pp, microbatch=1, global_batch=8 * dp,
                     fidelity="analytic")
            )  # fmt: skip
            out.append(predict(sc, baseline=False).to_dict())
    inputs._system_costs.cache_clear()
    return out


@pytest.mark.parametrize(("system", "nodes"), REPORT_SYSTEMS)
def test_reports_equal_with_the_memos_off(
    system: str | None, nodes: int, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Data-, tensor- and pipeline-parallel plans of three presets: every report field equal
    with the three memos off, each run on cost models of its own."""
    if system is None:
        src = FIXTURES / "nccl-dgx-a100.xml"
        out = tmp_path / "box.toml"
        write_imported_system(import_topology(src), str(src), str(out), force=False)
        system = str(out)
    on = _report_dicts(system, nodes, True, monkeypatch)
    off = _report_dicts(system, nodes, False, monkeypatch)
    assert on == off


def _rings(topo: Topology, lid: int) -> tuple[str, ...]:
    gpn = topo.gpus_per_node
    return tuple(topo.gpus[s * gpn + lid] for s in range(topo.num_gpus // gpn))


def _slow_gpu4_uplinks(topo: Topology) -> Topology:
    """Every server's GPU 4 on a PCIe link to its switch at half the bandwidth (the servers
    still alike: one class), so the ring of GPUs 4 moves less than the ring of GPUs 0."""
    g = topo.graph.copy()
    for u, v in list(g.edges):
        for a, b in ((u, v), (v, u)):
            if a.endswith("/gpu4") and getattr(g.nodes[b]["kind"], "value", "") == "pcie_switch":
                g.edges[u, v]["bandwidth_Bps"] *= 0.5
    return dataclasses.replace(topo, graph=g)


@pytest.mark.parametrize("slow", [False, True])
def test_rings_of_two_local_ids_share_only_equal_numbers(
    slow: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The rings of GPUs 0 and of GPUs 4 over four DGX A100 are two ring patterns with equal
    numbers: once the first is priced at a size, the second's same size is read off it (no new
    shared result); with GPU 4's uplinks slowed the numbers differ and every size is priced.
    Either way every result equals the one with the sharing off."""
    topo = load_system("dgx-a100", nodes=4)
    if slow:
        topo = _slow_gpu4_uplinks(topo)
    zero, four = _rings(topo, 0), _rings(topo, 4)
    sizes = (2.0**20, 3e7, 25 * 2**20, 6e8)
    got = {}
    for on in (True, False):
        with monkeypatch.context() as mp:
            mp.setattr(SharedResults, "BY_READS", on)
            model = CommCostModel(topo)
            first = [model.collective("allreduce", m, zero) for m in (1e5, *sizes)]
            model.collective("allreduce", 1e5, four)  # the pattern's own analysis
            kept = len(model.shared._shared_reads)
            second = [model.collective("allreduce", m, four) for m in sizes]
            grew = len(model.shared._shared_reads) - kept
            got[on] = (first, second, grew)
    assert got[True][:2] == got[False][:2]
    assert got[True][2] == (len(sizes) if slow else 0)
    assert (got[True][1] == got[True][0][1:]) is (not slow)  # equal numbers, equal results


def _other(v: Any) -> Any:
    """A value of ``v``'s kind that differs from it (the next enum member, a field of a
    dataclass changed, a key added to a dict)."""
    if isinstance(v, bool):
        return not v
    if isinstance(v, enum.Enum):
        return next(x for x in type(v) if x is not v)
    if isinstance(v, int):
        return v + 1
    if isinstance(v, float):
        return 2.0 * v if math.isfinite(v) and v else 1.0
    if isinstance(v, str):
        return v + "-other"
    if isinstance(v, dict):
        return {**v, "probe": 1.0}
    if dataclasses.is_dataclass(v):
        f = dataclasses.fields(v)[0].name
        return dataclasses.replace(v, **{f: _other(getattr(v, f))})  # type: ignore[type-var]
    assert v is None, v
    return 0


def test_pricing_reads_holds_every_read_value(monkeypatch: pytest.MonkeyPatch) -> None:
    """``pricing_reads`` changes when any one value the pricing reads changes: each
    ``_PATTERN_FIELDS`` number, the member count, a part's size, the channel count, whether
    there are GPUs and ``nvls_servers`` (two DGX H100, every GPU). A list that omitted one
    would let two analyses that price differently share their results."""
    from perfmodel.comm import group_memo

    topo = load_system("dgx-h100", nodes=2)
    model = CommCostModel(topo)
    info = model.group_info(topo.gpus)
    base = group_memo.pricing_reads(model.links, info)
    assert len(info.parts) == 2 and len(info.channels) > 1 and info.gpus
    # the fields that name no node, listed here apart from _PATTERN_FIELDS
    nodes = {"members", "gpus", "cpus", "parts", "channels"}
    numbers = [f.name for f in dataclasses.fields(info) if f.name not in nodes]
    changed = {
        **{f: {f: _other(getattr(info, f))} for f in numbers},
        "n": {"members": info.members[:-1]},
        "parts": {"parts": (info.parts[0][:-1], *info.parts[1:])},
        "channels": {"channels": tuple(info.channels)[:-1]},
        "gpus": {"gpus": ()},
    }
    for what, kw in changed.items():
        assert group_memo.pricing_reads(model.links, dataclasses.replace(info, **kw)) != base, what
    orig = group_memo.nvls_servers
    monkeypatch.setattr(group_memo, "nvls_servers", lambda links, i: not orig(links, i))
    assert group_memo.pricing_reads(model.links, info) != base, "nvls_servers"


def test_shared_reads_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    """``SharedResults._shared_reads`` keeps at most ``PATTERN_MEMO_SIZE`` results (here 3),
    the oldest dropped first, and every result equals the one with the sharing off."""
    from perfmodel.comm import group_memo

    topo = load_system("dgx-a100", nodes=2)
    gpus = set(topo.gpus)
    groups = [g for g in _groups(topo) if gpus.issuperset(g)]
    asks = [(op, m, g, "auto") for g in groups for op in OPS for m in SIZES]
    off = _results(topo, asks, False, monkeypatch)
    monkeypatch.setattr(group_memo, "PATTERN_MEMO_SIZE", 3)
    model = CommCostModel(topo)
    on = [model.collective(op, m, g, algorithm=a) for op, m, g, a in asks]
    assert on == off
    assert len(model.shared._shared_reads) == 3
