"""A ring pattern read off the group's first two servers (issue 27,
``GroupMemo._pattern_group`` with :data:`~perfmodel.comm.group_memo.PROBE_SERVERS`): every group
so read has its own direct analysis's numbers, channels and collective results, bit for bit, on
clusters of 3-16 servers of several systems (the probe lowered to 3 servers), and a
data-parallel ring of one class is then built over two servers only."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from reference_models import direct_model
from test_ring_patterns import _same_info

import perfmodel.comm.group_memo as group_memo
from perfmodel.comm import CommCostModel
from perfmodel.topology import Topology, load_system

SYSTEMS = (
    ("dgx-a100", ()),  # rails: one class, fabric-free boundaries
    ("dgx-a100", (("fabric_topology", "fat-tree"),)),
    ("dgx-h100", ()),
    ("dgx1-v100", ()),
)
_TOPOS: dict[tuple[str, tuple[tuple[str, str], ...], int], Topology] = {}


def _topo(system: str, kw: tuple[tuple[str, str], ...], nodes: int) -> Topology:
    key = (system, kw, nodes)
    if key not in _TOPOS:
        _TOPOS[key] = load_system(system, nodes=nodes, **dict(kw))
    return _TOPOS[key]


@st.composite
def _cases(draw):  # type: ignore[no-untyped-def]
    system, kw = draw(st.sampled_from(SYSTEMS))
    nodes = draw(st.integers(3, 16))
    topo = _topo(system, kw, nodes)
    gpn = topo.gpus_per_node
    servers = draw(st.permutations(range(nodes)))[: draw(st.integers(3, nodes))]
    lids = draw(st.lists(st.integers(0, gpn - 1), min_size=1, max_size=gpn, unique=True))
    group = tuple(topo.gpus[s * gpn + k] for s in servers for k in lids)
    return topo, group


@pytest.fixture
def probe_at_3(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(group_memo, "PROBE_SERVERS", 3)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(case=_cases())
def test_probed_pattern_equals_direct_analysis(case, probe_at_3) -> None:  # type: ignore[no-untyped-def]
    topo, group = case
    model, direct = CommCostModel(topo), direct_model(topo)
    for op in ("allreduce", "allgather", "reducescatter"):
        for m in (2**12, 2**27):
            assert model.collective(op, m, group) == direct.collective(op, m, group), (op, m)
    _same_info(model, model.group_info(group), direct.group_info(group))


def test_one_class_ring_is_built_over_two_servers(probe_at_3) -> None:  # type: ignore[no-untyped-def]
    """12 DGX A100 on rails (one class): the 96-GPU ring's analysis is the first two servers'
    (one build of 16 GPUs), and equals the direct one."""
    topo = load_system("dgx-a100", nodes=12)
    model = CommCostModel(topo)
    built: list[tuple[str, ...]] = []
    real = model.groups.build
    model.groups.build = lambda m: built.append(m) or real(m)  # type: ignore[method-assign]
    group = tuple(topo.gpus)
    got = model.group_info(group)
    assert built == [group[:16]]
    _same_info(model, got, direct_model(topo).group_info(group))
