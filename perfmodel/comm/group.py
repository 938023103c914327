"""What the topology offers a group of ranks: its ring channels, the bandwidths inside and
across servers, the latencies NCCL's tables do not contain, and the attributes the tuner reads
(:class:`GroupInfo`); and the analysis that finds them (:class:`GroupAnalysis`).

The analysis of one group reads its ring channels (:mod:`perfmodel.comm.channels`; over
servers built alike their summary, :mod:`perfmodel.comm.ring_summary`) and their max-min fair
rates; which groups share one analysis by symmetry is :mod:`perfmodel.comm.group_memo`'s job.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from functools import partial
from typing import TYPE_CHECKING, Any

import perfmodel.comm.closed_form as cf
from perfmodel.comm.channels import LazyChannels, build_channels, channel_rates
from perfmodel.comm.maxmin import numpy_sum
from perfmodel.comm.nccl_paths import PathType, host_path_types, net_path_type
from perfmodel.comm.nodes import all_gpus, split_by_server
from perfmodel.comm.p2p_read import P2pPath, p2p_path, priced_release, process_layout
from perfmodel.comm.params import HwClass, LinkParams
from perfmodel.comm.ring_summary import RingSummary, ring_summary
from perfmodel.comm.rings import MAX_CHANNELS, Channel, pack_rings
from perfmodel.comm.tuner import PXN_FROM
from perfmodel.topology import Topology
from perfmodel.topology.schema import NodeKind
from perfmodel.topology.symmetry import member_automorphism, server_symmetry

if TYPE_CHECKING:
    from perfmodel.comm.links import DirectedLinks

#: Entries kept per model by each of the pattern-keyed memos (ring patterns, a dozen numbers
#: each; their member lists' keys; representative analyses; NCCL candidate tables): a plan
#: search meets a few dozen patterns.
PATTERN_MEMO_SIZE = 4096


@dataclass(frozen=True)
class GroupInfo:
    """What the topology offers a group (cached per group)."""

    members: tuple[str, ...]
    gpus: tuple[str, ...]
    cpus: tuple[str, ...]
    parts: tuple[tuple[str, ...], ...]
    channels: Sequence[Channel]
    """The ring channels: a tuple, or for a wide group a :class:`LazyChannels` listed on first
    read (its length is known at once)."""
    ring_bw_Bps: float
    intra_bw_Bps: float
    inter_bw_Bps: float
    alpha_intra_s: float
    alpha_inter_s: float
    intra_class: HwClass
    gpu_arch: str
    gpu_memory_Bps: float
    extras: dict[str, float] = field(default_factory=dict)
    shm: bool = False
    net_path: int | None = None
    """NCCL's ``typeInter`` of the group's ring (:func:`perfmodel.comm.nccl_paths.net_path_type`:
    the worst path from a server's GPU to a NIC the ring uses), ``None`` on one server."""
    nvlinks: int = 0
    """NVLink links from each GPU to its NVSwitch (what NCCL's NVLS graph search loads,
    :mod:`perfmodel.comm.nvls`); 0 where the GPUs meet no NVSwitch."""
    net_port_Bps: float = math.inf
    """Line rate of the NIC ports the group's ring uses (NCCL's ``NET`` bandwidth, from the
    port speed), bytes/s; infinite on one server."""
    net_nics: int = 0
    """NICs a server's GPUs of the group leave through (the fewest over its servers; what
    NCCL's graph search spreads channels over, :mod:`perfmodel.comm.nccl_graph`); 0 on one
    server."""
    p2p: P2pPath | None = None
    """How NCCL's P2P transport moves ring steps over NVLink between the group's GPUs inside a
    server (read or write mode, direct pointers or not: :func:`perfmodel.comm.p2p_read.p2p_path`),
    which decides each rank's local ring copy (:func:`perfmodel.comm.p2p_read.local_copy_s`);
    ``None`` without NVLink between them."""

    @property
    def n(self) -> int:
        return len(self.members)

    @property
    def nodes(self) -> int:
        return len(self.parts)

    @property
    def local(self) -> int:
        return max(len(p) for p in self.parts)


def gpu_reduce_Bps(info: GroupInfo, link_params: LinkParams) -> float:
    """Rate of an element-wise reduction on a GPU of the group: memory bandwidth / 3 (read two
    inputs, write one output), or the calibrated override
    (:attr:`~perfmodel.comm.params.LinkParams.gpu_reduce_bandwidth_Bps`), bytes/s."""
    if link_params.gpu_reduce_bandwidth_Bps is not None:
        return link_params.gpu_reduce_bandwidth_Bps
    return info.gpu_memory_Bps / 3.0


def relabel(value: Any, names: Mapping[str, str]) -> Any:
    """``value`` with every node name in it mapped through ``names`` (strings, tuples, channels
    and the fields of a :class:`GroupInfo`; other values unchanged)."""
    if isinstance(value, str):
        return names.get(value, value)
    if isinstance(value, LazyChannels):  # relabelled when listed
        hops = value.intra_hops
        return LazyChannels(
            len(value),
            partial(_relabel_listed, value, names),
            intra_hops=None if hops is None else relabel(hops, names),
        )
    if isinstance(value, Channel):  # the bulk of a wide group's analysis: mapped flat
        get = names.get
        return Channel(
            tuple(get(n, n) for n in value.order),
            tuple(tuple(get(n, n) for n in hop) for hop in value.hops),
        )
    if isinstance(value, tuple):
        get = names.get
        if all(type(v) is str for v in value):  # members, a part, a hop: mapped flat
            return tuple([get(v, v) for v in value])
        return tuple([relabel(v, names) for v in value])
    if isinstance(value, dict):
        return {k: relabel(v, names) for k, v in value.items()}
    if isinstance(value, GroupInfo):
        return GroupInfo(
            **{f.name: relabel(getattr(value, f.name), names) for f in fields(GroupInfo)}
        )
    return value


def _relabel_listed(channels: LazyChannels, names: Mapping[str, str]) -> tuple[Any, ...]:
    """``channels`` listed, every node name mapped through ``names``."""
    return relabel(tuple(channels), names)


class GroupAnalysis:
    """The analysis of groups on one topology (:meth:`build`), with the memos it makes along the
    way: each server part's ring packing, shared by the servers of one class and by
    automorphic images inside a server (:meth:`packed`), and the NIC path type of each server
    part (:meth:`_net_path`).

    ``release``: the NCCL release the scenario states (``None``: none), which decides whether
    a GPU reaches a far NIC through a nearer GPU (PXN).
    """

    def __init__(
        self, topology: Topology, links: DirectedLinks, release: tuple[int, int] | None
    ) -> None:
        self.topology = topology
        self.links = links
        self.release = release
        self._packs: dict[tuple[str, ...], tuple[Channel, ...]] = {}
        #: a server part's local GPUs (in its class's first server) -> (typeInter, NIC rate)
        self._net_paths: dict[tuple[str, ...], tuple[int, float, int]] = {}
        #: a GPU of a class's first server -> its host path types (``nccl_paths.HostTypes``)
        self._host_types: dict[str, Mapping[str, PathType]] = {}
        #: members whose packing :meth:`_image_pack` read off an earlier one -> (the earlier
        #: packing's members, the server automorphism mapping those onto these)
        self.images: dict[tuple[str, ...], tuple[tuple[str, ...], dict[str, str]]] = {}

    def build(self, members: tuple[str, ...]) -> tuple[GroupInfo, RingSummary | None]:
        """The analysis of group ``members`` and, for a group over servers built alike, its
        ring summary (:func:`~perfmodel.comm.ring_summary.ring_summary`; ``None`` otherwise),
        which :class:`~perfmodel.comm.group_memo.GroupMemo` records under the group's ring
        pattern."""
        if all_gpus(self.topology, members):  # no node read per member
            gpus, cpus = members, ()
        else:
            nodes = self.topology.graph.nodes
            kinds = [nodes[x]["kind"] for x in members]
            gpus = tuple(x for x, k in zip(members, kinds) if k is NodeKind.GPU)
            cpus = tuple(x for x, k in zip(members, kinds) if k is NodeKind.CPU)
        ring_members = gpus if gpus else members
        links = self.links
        parts = tuple(tuple(p) for p in split_by_server(self.topology, ring_members, links.server))
        summary = ring_summary(links, ring_members) if len(parts) > 1 else None
        channels: Sequence[Channel]
        if summary is not None:  # servers built alike: analysed without listing the channels
            channels = LazyChannels(
                summary.n_channels,
                partial(build_channels, links, ring_members),
                summary.servers,
                summary.intra_hops,
            )
            ring_bw = numpy_sum(summary.rates)
            intra_hops = list(summary.intra_hops)
            inter_hops = list(summary.inter_hops)
        else:
            if len(ring_members) >= 2:
                channels = (
                    self.packed(ring_members)
                    if len(parts) == 1
                    else build_channels(links, ring_members)
                )
                rates = channel_rates(links, channels, links.charge_p2p)
                ring_bw = numpy_sum(rates)
            else:
                channels, ring_bw = (), math.inf
            intra_hops = [h for ch in channels for h in ch.hops if self._same_server(h)]
            inter_hops = [h for ch in channels for h in ch.hops if not self._same_server(h)]
        # only what NCCL's per-step latency does not contain (sockets): latency counted once
        # (extra_latency returns 0.0 at once where no link has such latency)
        extra = links.extra_latency
        alpha_intra = max((extra(h) for h in intra_hops), default=0.0)
        alpha_inter = max((extra(h) for h in inter_hops), default=0.0)
        classes = {links.hw_class(h) for h in intra_hops}
        if not classes or classes == {HwClass.NVLINK}:
            intra_class = HwClass.NVLINK if classes else HwClass.PCI
        else:
            intra_class = HwClass.PCI
        # Bandwidth inside one server (ring over its members) and across servers (per server).
        biggest = max(parts, key=len) if parts else ()
        if len(parts) > 1 and len(biggest) >= 2:
            intra = self.packed(biggest)
            intra_bw = numpy_sum(channel_rates(links, intra, links.charge_p2p))
        elif len(parts) == 1:
            intra_bw = ring_bw
        else:
            intra_bw = math.inf
        if summary is not None:
            inter_bw = numpy_sum(summary.inter_rates)
        elif len(parts) > 1 and not intra_hops:
            # every hop joins two servers: the inter-server channels are the channels, hop for
            # hop, and the P2P charge of a hop between servers is 1.0 (p2p_charge), the
            # weight channel_rates gives a hop without a charge: the same rates (issue 27: a
            # tied embedding's pair, one GPU per server, filled them twice)
            inter_bw = ring_bw
        elif len(parts) > 1:
            inter_only = [
                Channel(ch.order, tuple(h for h in ch.hops if not self._same_server(h)))
                for ch in channels
            ]
            inter_bw = numpy_sum(channel_rates(links, inter_only))
        else:
            inter_bw = math.inf
        spec = self.topology.gpu_spec(gpus[0]) if gpus else None
        arch = spec.architecture.lower() if spec else ""
        mem_bw = spec.memory_bandwidth_Bps if spec else cf.DEFAULT_HOST_MEMORY_BANDWIDTH_Bps
        # a summarised ring's parts have one local-id sequence and one inside twin
        # (ring_summary checks both), so every part has the first's key in _net_path: reading
        # the first alone gives the same answer without a pass over 2,048 servers' parts
        net_parts = parts[:1] if summary is not None else parts
        net_path, port, net_nics = (
            (None, math.inf, 0) if len(parts) < 2 or not gpus else self._net_path(net_parts)
        )
        info = GroupInfo(
            members=members,
            gpus=gpus,
            cpus=cpus,
            parts=parts,
            channels=channels,
            ring_bw_Bps=ring_bw,
            intra_bw_Bps=intra_bw,
            inter_bw_Bps=inter_bw,
            alpha_intra_s=alpha_intra,
            alpha_inter_s=alpha_inter,
            intra_class=intra_class,
            gpu_arch=arch,
            gpu_memory_Bps=mem_bw,
            shm=links.uses_shm(ring_members),
            net_path=net_path,
            nvlinks=self._nvlinks(gpus[0]) if gpus else 0,
            net_port_Bps=port,
            net_nics=net_nics,
            p2p=None
            if spec is None
            else p2p_path(
                spec.compute_capability,
                nvlink=bool(intra_hops) and intra_class is HwClass.NVLINK,
                layout=process_layout(self.topology),
                release=priced_release(self.release, arch),
            ),
        )
        return info, summary

    def _net_path(self, parts: Sequence[Sequence[str]]) -> tuple[int, float, int]:
        """NCCL's ``typeInter`` of a ring over ``parts`` (one per server), the line rate of
        the NICs it uses and how many (the fewest over servers): per server, the NICs its GPUs
        leave through
        (:meth:`~perfmodel.comm.links.DirectedLinks.gpu_nic`), each reached from its nearest
        GPU of the part (:func:`~perfmodel.comm.nccl_paths.net_path_type`); the worst server's
        path, the slowest port. Read off each server's inside twin
        (:attr:`~perfmodel.topology.symmetry.ServerSymmetry.twin`: built alike inside, which is
        all the GPU-to-NIC paths and the NIC ports read) and kept per twin and local ids, so a
        cluster of one server model analyses its first server only."""
        links = self.links
        sym = server_symmetry(self.topology)
        g = self.topology.graph
        worst, port, count = 0, math.inf, None
        seen: set[tuple[int, tuple[str, ...]]] = set()
        for part in parts:
            s = sym.server[part[0]]
            t = sym.twin.get(s, s)
            local = tuple(sym.local_id[x] for x in part)
            if (t, local) in seen:
                continue
            seen.add((t, local))
            base = tuple(sym.by_local[t][x] for x in local) if t != s else tuple(part)
            hit = self._net_paths.get(base)
            if hit is None:
                nics = sorted({n for x in base if (n := links.gpu_nic(x)) is not None})
                pxn = self.release is None or tuple(self.release) >= PXN_FROM
                kind = int(net_path_type(self.topology, base, nics, pxn=pxn, host=self._host))
                rate = min(
                    (
                        float(d["bandwidth_Bps"])
                        for n in nics
                        for v, d in g.adj[n].items()
                        if links.server.get(v, -1) < 0
                    ),
                    default=math.inf,
                )
                hit = self._net_paths[base] = (kind, rate, len(nics))
            worst, port = max(worst, hit[0]), min(port, hit[1])
            count = hit[2] if count is None else min(count, hit[2])
        return worst, port, 0 if count is None else count

    def _host(self, gpu: str) -> Mapping[str, PathType]:
        """:func:`~perfmodel.comm.nccl_paths.host_path_types` of ``gpu`` (a GPU of a class's
        first server, as :meth:`_net_path` asks), searched once per analysis: every part and
        NIC of that server reads the same table (issue 27: the first cross-server
        tensor-parallel group of a process searched each (GPU, NIC) pair, 232 times)."""
        hit = self._host_types.get(gpu)
        if hit is None:
            hit = self._host_types[gpu] = host_path_types(self.topology, gpu)
        return hit

    def _nvlinks(self, gpu: str) -> int:
        """NVLink links from ``gpu`` to NVSwitches (edge ``count``), 0 without a switch."""
        g = self.topology.graph
        return sum(
            int(d.get("count", 1))
            for v, d in g.adj[gpu].items()
            if g.nodes[v]["kind"] is NodeKind.NVSWITCH
        )

    def packed(self, members: tuple[str, ...]) -> tuple[Channel, ...]:
        """:func:`~perfmodel.comm.rings.pack_rings` of GPUs of one server (what
        :func:`~perfmodel.comm.channels.build_channels` returns for them), computed once per local-id
        shape in the first server of the server's class and mapped back: the search stays inside
        the server, whose node-name order the exchange keeps (issue 14: a tensor-parallel group
        and the server parts of the wider groups of every plan pack one ring set)."""
        sym = server_symmetry(self.topology)
        s = self.links.server[members[0]]
        smap = sym.server_map((s,))
        if smap is None:
            return pack_rings(self.links, members)
        base_members = tuple(sym.map_node(m, smap) for m in members)
        base = self._packs.get(base_members)
        if base is None:
            base = self._image_pack(base_members) or pack_rings(self.links, base_members)
            self._packs[base_members] = base
        if smap[s] == s:
            return base
        return relabel(base, sym.node_map({smap[s]: s}))

    def _image_pack(self, members: tuple[str, ...]) -> tuple[Channel, ...] | None:
        """The ring packing of GPUs ``members`` of one server read off an earlier packing of
        as many GPUs of that server that no name decided, where an automorphism of the server
        maps those GPUs onto ``members`` in order
        (:func:`~perfmodel.topology.symmetry.member_automorphism`), names mapped; else ``None``.

        Why it is :func:`~perfmodel.comm.rings.pack_rings`' own answer: the packing searches
        the server's nodes and links only, and reads of them the link units, capacities,
        latencies and classes, which transit nodes are, and the members' order (ring orders
        by index), all kept by the automorphism; its last tie-break, the name order, decided
        no choice of the earlier packing (``DirectedLinks._name_free``: every comparison
        settled before the names, no fallback routes, no host-memory detours). So the search on
        ``members`` makes the image of every comparison and choice, and finds the image
        rings. Issue 14: a tensor-parallel group of GPUs 4-7 of a DGX A100 takes GPUs 0-3's
        rings (the other PCIe complexes, CPU and NICs are the image)."""
        links = self.links
        s = links.server[members[0]]
        nodes = links.server_nodes[s]
        for done in list(self._packs):
            key = (done, MAX_CHANNELS)
            if len(done) != len(members) or done == members or key not in links._name_free:
                continue
            if links.server.get(done[0]) != s or any(links.server[x] != s for x in done):
                continue
            fwd = member_automorphism(self.topology, nodes, done, members)
            if fwd is not None:
                packed = relabel(self._packs[done], fwd)
                links._packed[(members, MAX_CHANNELS)] = packed  # pack_rings' answer
                links._name_free.add((members, MAX_CHANNELS))
                self.images[members] = (done, fwd)
                return packed
        return None

    def _same_server(self, path: Sequence[str]) -> bool:
        srv = self.links.server
        return srv[path[0]] == srv[path[-1]]
