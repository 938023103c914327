"""Ring channels across servers, and the steady-state rates of channels on the links.

A *channel* is one ring over the ranks of a group together with the node path of each hop
(:class:`~perfmodel.comm.rings.Channel`). Across servers (:func:`build_channels`), each channel
is the concatenation, server after server, of a rotation of an intra-server ring
(:func:`~perfmodel.comm.rings.pack_rings`); rotations are chosen so that the channels leave the
servers through different NICs, as NCCL spreads its rings over all NICs. The steady-state
bandwidth of a set of channels is the max-min fair sharing of the real link capacities
(:func:`channel_rates`): the bus bandwidth of a bandwidth-bound ring is the sum of its
channels' rates, which for a single ring is the bottleneck link's bandwidth.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import chain
from typing import TYPE_CHECKING, Any

from perfmodel.comm.maxmin import maxmin_rates_small
from perfmodel.comm.nodes import nics_of, split_by_server
from perfmodel.comm.rings import MAX_CHANNELS, Channel, pack_rings
from perfmodel.comm.routes import near_nics

if TYPE_CHECKING:
    from perfmodel.comm.links import DirectedLinks


@dataclass(frozen=True)
class RingPlan:
    """What :func:`build_channels` decides on the first server of a group spanning servers.

    ``parts``: members by server (:func:`split_by_server`); ``first``: the ring channels of the
    first part (:func:`pack_rings`, or the lone member); ``choices[c]``: channel ``c``'s rotation
    of its intra-server ring and its exit and entry NIC (names in the first server, ``None``
    where the server has no fabric NIC); ``local_of``: NIC -> local id.
    """

    parts: list[list[str]]
    first: tuple[Channel, ...]
    choices: tuple[tuple[int, str | None, str | None], ...]
    local_of: dict[str, str]


def ring_plan(links: DirectedLinks, parts: list[list[str]], max_channels: int) -> RingPlan:
    """The channel count, rotations and NICs of :func:`build_channels` (first server only)."""
    topo = links.topology
    first_part = parts[0]
    first = (
        (Channel((first_part[0],), ()),)
        if len(first_part) == 1
        else pack_rings(links, first_part, max_channels=max_channels)
    )
    nics = nics_of(topo, topo.server_of(first_part[0]))
    n_rings = max(
        1 if len(p) == 1 else len(pack_rings(links, p, max_channels=max_channels))
        for p in _distinct_shapes(links, parts)
    )
    n_ch = max(n_rings, len(nics), 1)
    if nics:  # a multiple of the NIC count, so that every NIC carries as many channels
        n_ch = -(-n_ch // len(nics)) * len(nics)
    n_ch = min(max_channels, n_ch)
    near = {m: near_nics(links, m, nics) for m in first_part}
    out_load = dict.fromkeys(nics, 0)
    in_load = dict.fromkeys(nics, 0)
    local_of = {n: topo.graph.nodes[n]["local_id"] for n in nics}
    choices: list[tuple[int, str | None, str | None]] = []
    for c in range(n_ch):
        base = first[c % len(first)]
        k = len(base.order)
        best = None
        for r in range(k):
            outs = near[base.order[(r - 1) % k]]
            ins = near[base.order[r % k]]
            common = sorted(set(outs) & set(ins))
            if not outs or not ins:
                key: tuple[int, ...] = (0, 0, 0, (r - c) % k)
                choice = (None, None)
            elif common:
                # rail-aligned: leave and enter every server through the same NIC index, so
                # the hop stays on one rail (NCCL keeps the inter-node hop on one NIC;
                # crossNic = 0 in src/graph/search.cc). The exit GPU of this server and the
                # entry GPU of the next share that NIC.
                x = min(common, key=lambda nic: (max(out_load[nic], in_load[nic]), nic))
                o, i = out_load[x] + 1, in_load[x] + 1
                key = (0, max(o, i), o + i, (r - c) % k)
                choice = (x, x)
            else:
                xo = min(outs, key=lambda x: (out_load[x], x))
                xi = min(ins, key=lambda x: (in_load[x], x))
                o, i = out_load[xo] + 1, in_load[xi] + 1
                key = (1, max(o, i), o + i, (r - c) % k)
                choice = (xo, xi)
            if best is None or key < best[0]:
                best = (key, r, choice)
        assert best is not None
        _, rot, (exit_nic, entry_nic) = best
        if exit_nic is not None and entry_nic is not None:
            out_load[exit_nic] += 1
            in_load[entry_nic] += 1
        choices.append((rot, exit_nic, entry_nic))
    return RingPlan(parts, first, tuple(choices), local_of)


def _distinct_shapes(links: DirectedLinks, parts: list[list[str]]) -> list[list[str]]:
    """One part per local-id sequence (the parts :func:`build_channels` packs; the others are
    remapped copies with as many rings)."""
    lid = links.local_id.__getitem__
    first = list(map(lid, parts[0]))
    if len(set(map(len, parts))) == 1 and list(map(lid, chain.from_iterable(parts))) == first * len(
        parts
    ):
        return [parts[0]]  # one shape (a data-parallel ring: thousands of parts, one C pass)
    seen: dict[tuple[str, ...], list[str]] = {}
    for part in parts:
        seen.setdefault(tuple(map(links.local_id.__getitem__, part)), part)
    return list(seen.values())


def build_channels(
    links: DirectedLinks, members: Sequence[str], *, max_channels: int = MAX_CHANNELS
) -> tuple[Channel, ...]:
    """Ring channels over a group that may span servers (see the module docstring)."""
    topo = links.topology
    parts = split_by_server(topo, members)
    if len(parts) == 1:
        return pack_rings(links, members, max_channels=max_channels)
    plan = ring_plan(links, parts, max_channels)
    intra: list[tuple[Channel, ...]] = []
    cache: dict[tuple[str, ...], tuple[Channel, ...]] = {}
    for part in parts:
        key = tuple(links.local_id[m] for m in part)
        if len(part) == 1:
            intra.append((Channel((part[0],), ()),))
            continue
        if key in cache:
            intra.append(_remap(cache[key], links, part))
        else:
            rings = pack_rings(links, part, max_channels=max_channels)
            cache[key] = rings
            intra.append(rings)
    local_of = plan.local_of
    channels: list[Channel] = []
    for c, (rot, exit_nic, entry_nic) in enumerate(plan.choices):
        order: list[str] = []
        hops: list[tuple[str, ...]] = []
        for s, rings in enumerate(intra):
            ring = rings[c % len(rings)]
            kk = len(ring.order)
            r = rot % kk
            seg = ring.order[r:] + ring.order[:r]
            seg_hops = ring.hops[r:] + ring.hops[:r]
            order.extend(seg)
            hops.extend(seg_hops[: kk - 1])
            nxt = intra[(s + 1) % len(intra)][c % len(intra[(s + 1) % len(intra)])]
            kn = len(nxt.order)
            entry = nxt.order[rot % kn]
            hops.append(_via_nics(links, seg[-1], entry, exit_nic, entry_nic, local_of))
        channels.append(Channel(tuple(order), tuple(hops)))
    return tuple(channels)


def _via_nics(
    links: DirectedLinks,
    src: str,
    dst: str,
    exit_nic: str | None,
    entry_nic: str | None,
    local_of: dict[str, str],
) -> tuple[str, ...]:
    """Inter-server hop ``src -> dst`` leaving through ``exit_nic`` and entering through the NIC of
    ``dst``'s server with the same local id as ``entry_nic`` (NCCL assigns a NIC per channel);
    the plain route where no NIC is given or found, or the NIC path passes a node twice."""
    if exit_nic is None or entry_nic is None:
        return links.route(src, dst)
    x_out = links.by_local[links.server[src]].get(local_of[exit_nic])
    x_in = links.by_local[links.server[dst]].get(local_of[entry_nic])
    if x_out is None or x_in is None:
        return links.route(src, dst)
    a = links.route(src, x_out)
    b = links.route(x_out, x_in)
    c = links.route(x_in, dst)
    path = a + b[1:] + c[1:]
    if len(set(path)) != len(path):  # a detour through a node twice: use the plain route
        return links.route(src, dst)
    return path


def channel_route(links: DirectedLinks, src: str, dst: str, channel: int) -> tuple[str, ...]:
    """Route for channel ``channel`` of a collective: inside a server the plain route; across
    servers through the server's NIC number ``channel mod #NICs`` on both sides (NCCL gives each
    channel its own NIC), falling back to the plain route."""
    topo = links.topology
    a, b = links.server[src], links.server[dst]
    if a == b:
        return links.route(src, dst)
    nics = nics_of(topo, a)
    if not nics:
        return links.route(src, dst)
    nic = nics[channel % len(nics)]
    return _via_nics(links, src, dst, nic, nic, {nic: links.local_id[nic]})


def _remap(
    rings: tuple[Channel, ...], links: DirectedLinks, part: Sequence[str]
) -> tuple[Channel, ...]:
    """Map rings computed on one server onto an identical server (by local ids)."""
    by_local = links.by_local[links.server[part[0]]]
    lid = links.local_id
    out = []
    for ch in rings:
        order = tuple(by_local[lid[m]] for m in ch.order)
        hops = tuple(tuple(by_local[lid[x]] for x in hop) for hop in ch.hops)
        out.append(Channel(order, hops))
    return tuple(out)


#: Incidence entries above which :func:`channel_rates` runs numpy's progressive filling
#: (:func:`~perfmodel.comm.maxmin.maxmin_rates`) instead of the plain-Python one: the same rates
#: bit for bit either way, so only the speed depends on it. The analytic predictions' groups
#: have 48-416 entries (GPT-3 175B on 128 DGX A100, 32 GPUs of 4 DGX-1); measured on the
#: 2-core machine, plain Python takes 0.06 / 0.17 / 1.2 ms at 100 / 300 / 1,000 entries and
#: numpy 0.11 / 0.11 / 0.32 ms, its import ~0.1-0.25 s once per process.
SMALL_ENTRIES = 512


def channel_rates(
    links: DirectedLinks,
    channels: Sequence[Channel],
    charge: Callable[[tuple[str, ...]], float] | None = None,
) -> list[float]:
    """Steady-state max-min fair rate (bytes/s) of each channel, all hops of a channel at one rate.

    ``charge(hop)`` (default 1): how many bytes of link capacity a hop spends per byte it moves,
    on every link of that hop (the Intel P2P charge, :func:`perfmodel.comm.pcie_p2p.p2p_charge`):
    a lone channel runs at ``min over its links of capacity / (sum of its hops' charges there)``,
    so only the charged hops' links are slowed.

    A channel's multiplicity on a link is ``0.0`` plus its hops' charges there in hop order
    (``numpy.bincount``'s sum); the entries go to the filling sorted by (channel, link id).
    Up to :data:`SMALL_ENTRIES` of them in plain Python
    (:func:`~perfmodel.comm.maxmin.maxmin_rates_small`), above with numpy: the same numbers.
    """
    ids_of = links._ids_of
    fi: list[int] = []
    ei: list[int] = []
    mult: list[float] = []
    for c, ch in enumerate(channels):
        # per channel, link ids sorted (the docstring's order)
        on: dict[int, float] = {}
        for hop in ch.hops:
            weight = 1.0 if charge is None else float(charge(hop))
            for e in ids_of(hop):
                on[e] = on.get(e, 0.0) + weight
        ids = sorted(on)
        fi += [c] * len(ids)
        ei += ids
        mult += map(on.__getitem__, ids)
    if not fi:
        return [math.inf] * len(channels)
    return fill_rates(fi, ei, mult, links.capacity_list, len(channels))


def fill_rates(
    fi: list[int], ei: list[int], mult: list[float], capacity: Sequence[float], n: int
) -> list[float]:
    """Max-min fair rates of ``n`` flows with incidence entries ``(fi, ei, mult)`` over
    resources of ``capacity`` (bytes/s): plain Python up to :data:`SMALL_ENTRIES` entries,
    numpy above (the same rates bit for bit, :mod:`perfmodel.comm.maxmin`)."""
    if len(fi) <= SMALL_ENTRIES:
        return maxmin_rates_small(fi, ei, mult, capacity, n)
    import numpy as np

    from perfmodel.comm.maxmin import maxmin_rates

    rates = maxmin_rates(
        np.asarray(fi, dtype=np.int64),
        np.asarray(ei, dtype=np.int64),
        np.asarray(mult, dtype=float),
        np.asarray(capacity, dtype=float),
        n,
    )
    return [float(r) for r in rates]


def flow_rates(links: DirectedLinks, paths: Sequence[Sequence[str]]) -> list[float]:
    """Max-min fair rates of independent point-to-point flows along node paths."""
    return channel_rates(links, [Channel((p[0], p[-1]), (tuple(p),)) for p in paths])


class LazyChannels(Sequence[Channel]):
    """A group's ring channels, listed only when read (issue 14: the 16 channels of a 16,384-rank
    ring are 262,144 hop paths that the analytic fidelity never reads).

    ``len`` is known at once; iteration, indexing and comparison list the channels once through
    ``build`` (the direct :func:`build_channels`, so readers get what they got before).
    ``servers``: the servers (``-1``: the fabric) the hops touch, where known without listing;
    ``intra_hops``: the intra-server hops of one server, where every server of the group has
    the same ones by local id (:attr:`RingSummary.intra_hops`), else ``None``.
    """

    __slots__ = ("_build", "_items", "_n", "intra_hops", "servers")

    def __init__(
        self,
        n: int,
        build: Callable[[], Sequence[Channel]],
        servers: frozenset[int] | None = None,
        intra_hops: tuple[tuple[str, ...], ...] | None = None,
    ) -> None:
        self._n = n
        self._build = build
        self._items: tuple[Channel, ...] | None = None
        self.servers = servers
        self.intra_hops = intra_hops

    def _all(self) -> tuple[Channel, ...]:
        if self._items is None:
            items = tuple(self._build())
            if len(items) != self._n:  # pragma: no cover - the summary and the list disagree
                raise AssertionError(f"{len(items)} channels listed, {self._n} counted")
            self._items = items
        return self._items

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, i: Any) -> Any:
        return self._all()[i]

    def __iter__(self) -> Any:
        return iter(self._all())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (LazyChannels, tuple)):
            return self._all() == tuple(other)
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self._all())

    def __repr__(self) -> str:
        return f"LazyChannels({self._n} channels{'' if self._items is None else ', listed'})"
