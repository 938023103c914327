"""Ring-path sharing factors counted off one route per hop kind (issue 27,
``parallel/hop_routes.py``): equal bit for bit to the groups' own routes' factor on several
catalogue systems and fabrics, random groups in any name order; every report over presets and
plans equals the one priced without the templates; not applied where a hop stays in one
server or a route is not under the third-server bound."""

from __future__ import annotations

import dataclasses
import itertools
import random
from functools import partial
from typing import Any

import pytest

from perfmodel.api import predict
from perfmodel.errors import PerfModelError
from perfmodel.parallel import costs, hop_routes
from perfmodel.topology import Topology, load_system, route
from perfmodel.topology.builders import list_systems
from perfmodel.topology.symmetry import server_symmetry
from tests.parallel.test_concurrent_key import PLANS, _fresh, _sc

SYSTEMS = [
    ("dgx-a100", {}),
    ("dgx-a100", {"fabric_topology": "fat-tree"}),
    ("dgx-h100", {}),
    ("aws-p5.48xlarge", {}),
]


def _clear() -> None:
    costs._ROUTE_FACTORS.entries.clear()
    costs.ring_sharing_factor.cache_clear()
    hop_routes._TEMPLATES.entries.clear()


def _spread(topo: Topology, rng: random.Random) -> tuple[tuple[str, ...], ...]:
    """Sibling groups of one GPU per server each (the data-parallel groups of a stage), on
    random servers in random order, random local ids."""
    gpn = topo.gpus_per_node
    servers = rng.sample(range(topo.num_nodes), rng.choice((2, 3, 4)))
    lids = rng.sample(range(gpn), rng.choice((1, 2, 4)))
    return tuple(tuple(topo.gpus[s * gpn + lid] for s in servers) for lid in lids)


@pytest.mark.parametrize("system, kw", SYSTEMS)
def test_templated_factor_equals_direct(system: str, kw: dict[str, Any]) -> None:
    topo = load_system(system, nodes=12, **kw)
    rng = random.Random(27)
    _clear()
    applied = 0
    for _ in range(60):
        groups = _spread(topo, rng)
        got = hop_routes.templated_factor(topo, groups)
        if got is not None:
            applied += 1
            assert got == costs._ring_sharing_factor(topo, groups), groups
        assert costs.ring_sharing_factor(topo, groups) == costs._ring_sharing_factor(topo, groups)
    for _ in range(60):  # any GPUs: hops inside one server are left to the canonical path
        groups = tuple(tuple(rng.sample(topo.gpus, rng.choice((2, 3)))) for _ in range(3))
        got = hop_routes.templated_factor(topo, groups)
        assert got is None or got == costs._ring_sharing_factor(topo, groups), groups
    if "fabric_topology" not in kw:
        assert applied == 60  # every route between servers on rails is under the bound
    assert applied > 0


def test_not_applied_in_one_server_or_past_the_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    topo = load_system("dgx-a100", nodes=4)
    gpn = topo.gpus_per_node
    inside = ((topo.gpus[0], topo.gpus[1]), (topo.gpus[2], topo.gpus[3]))
    assert hop_routes.templated_factor(topo, inside) is None
    across = tuple((topo.gpus[lid], topo.gpus[gpn + lid]) for lid in range(4))
    _clear()
    assert hop_routes.templated_factor(topo, across) is not None
    _clear()
    monkeypatch.setattr(hop_routes, "shorter_than_third_server", lambda *a: False)
    assert hop_routes.templated_factor(topo, across) is None
    assert costs.ring_sharing_factor(topo, across) == costs._ring_sharing_factor(topo, across)
    _clear()


def test_kinds_keep_the_name_order_of_one_class() -> None:
    """A hop from the server that sorts second to the one that sorts first is another kind
    than the reverse (its route is the image of the other search where it is not mirrored)."""
    topo = load_system("dgx-a100", nodes=12)
    gpn = topo.gpus_per_node
    _clear()
    fwd = ((topo.gpus[2 * gpn], topo.gpus[10 * gpn + 1]),)  # n2 -> n10 (n10 sorts first)
    hop_routes.templated_factor(topo, fwd)
    kinds = {k[1:] for k in hop_routes._TEMPLATES.entries}
    assert (0, 0, "gpu0", "gpu1", False) in kinds and (0, 0, "gpu1", "gpu0", True) in kinds
    _clear()


def _reports(system: str, software: str) -> list[str]:
    _fresh()
    _clear()
    out = []
    for dp, tp, pp in PLANS:
        r = predict(_sc(system, software, dp, tp, pp), baseline=False)
        out.append(repr(dataclasses.replace(r, timeline=None)) + repr(r.timeline))
    return out


@pytest.mark.parametrize(
    "system, software",
    [
        (system, software)
        for system in ("dgx-a100", "dgx-h100", "aws-p5.48xlarge")
        for software in ("megatron-core", "pytorch-ddp")
    ],
)
def test_reports_equal_with_the_templates_off(system: str, software: str) -> None:
    used: list[object] = []
    real = hop_routes.templated_factor

    def counted(topo: Topology, groups: Any) -> float | None:
        got = real(topo, groups)
        used.append(got)
        return got

    with pytest.MonkeyPatch.context() as m:
        m.setattr(costs, "templated_factor", counted)
        on = _reports(system, software)
    assert any(u is not None for u in used)
    with pytest.MonkeyPatch.context() as m:  # no templates: every new shape routed hop by hop
        m.setattr(costs, "templated_factor", lambda topo, groups: None)
        off = _reports(system, software)
    _fresh()
    _clear()
    for a, b in zip(on, off, strict=True):
        assert a == b


def test_catalogue_routes_are_mirrored() -> None:
    """Why the kinds' name-order bit is defensive (``templated_factor``'s docstring): on every
    catalogue system (4 servers, and a fat tree where it builds one) the route between any
    two GPU local ids of two servers of one class is the exchanged image of the reverse-order
    route, so both name orders read one template's image."""
    pairs = 0
    for name in list_systems():
        for kw in ({}, {"fabric_topology": "fat-tree"}):
            try:
                topo = load_system(name, nodes=4, **kw)
            except PerfModelError:  # no fat tree for this system
                continue
            sym = server_symmetry(topo)
            for c, servers in sym.ordered.items():
                if len(servers) < 2:
                    continue
                lids = [sym.local_id[g] for g in topo.gpus if sym.server[g] == servers[0]]
                for la, lb in itertools.product(lids, lids):
                    pairs += 1
                    assert sym.mirrored(c, la, lb, partial(route, topo)), (name, kw)
    assert pairs > 1000
