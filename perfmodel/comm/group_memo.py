"""Analyses shared by symmetry: which groups have the same analysis, bit for bit, so that it
is made once (issue 14: the groups of every plan of a search are a few dozen analyses).

:class:`GroupMemo` answers :meth:`~perfmodel.comm.analytic.AnalyticCommModel.group_info`: a
group's analysis read off its inside twin (one server), off the first group of its ring pattern
(servers of one class), off its image in the first servers of its servers' classes, else made
(:class:`~perfmodel.comm.group.GroupAnalysis`). :class:`SharedResults` shares the analytic
results of the collectives whose closed forms read only a group's numbers. Each shortcut states
why it is the direct analysis's answer; ``tests/comm/reference_models.py`` switches them off
and the tests compare.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields, replace
from functools import partial
from operator import itemgetter
from typing import TYPE_CHECKING, Any

from perfmodel._memo import BoundedMemo
from perfmodel.comm.channels import LazyChannels, build_channels
from perfmodel.comm.gpu_slices import server_runs
from perfmodel.comm.group import PATTERN_MEMO_SIZE, GroupAnalysis, GroupInfo, relabel
from perfmodel.comm.maxmin import numpy_sum
from perfmodel.comm.nccl_recent import CLOSED_FORM_ONLY, nvls_servers
from perfmodel.comm.nodes import all_gpus, equal_runs, split_by_server
from perfmodel.comm.params import ALGO_AUTO, Algorithm
from perfmodel.comm.ring_summary import RingSummary
from perfmodel.comm.rings import Channel
from perfmodel.ops import ALLTOALL, SENDRECV, CollectiveOp
from perfmodel.topology import Topology
from perfmodel.topology.symmetry import server_symmetry

if TYPE_CHECKING:
    from perfmodel.comm.analytic import CommResult
    from perfmodel.comm.links import DirectedLinks

#: The :class:`GroupInfo` fields that name no node: what every group of one ring pattern
#: shares (every field but the members, their parts and the channels).
_PATTERN_FIELDS = tuple(
    f.name
    for f in fields(GroupInfo)
    if f.name not in {"members", "gpus", "cpus", "parts", "channels"}
)

PROBE_SERVERS = 64
"""Servers of one class from which a ring pattern not yet known is read off the same local
ids over the group's first two servers (:meth:`GroupMemo._pattern_group`, then
:meth:`GroupMemo._pattern_of_count`, which states why that is the group's own analysis, bit for
bit) before the group is analysed itself. Issue 27: a data-parallel ring over 2,048 identical
servers is one boundary and a count; its own analysis loops over the servers (splits, per-part
checks, class pairs: ~3 us per server, 38-39 -> 33 ms CPU for the 16,384-GPU predict of
``benchmarks/bench_speed.py --only dp`` on the 2-core development machine). Where the
two-server summary loads fabric links (a boundary through more than one fabric switch) its
rates are recounted for the group's count (:meth:`GroupMemo._recounted`); where
:func:`~perfmodel.comm.ring_summary.ring_summary` summarises no such ring the probe is one
two-server analysis spent in vain, once per pattern; from 64 servers
(:attr:`~perfmodel.topology.lazy.NodeTable.WIDE`'s scale) on, the loops it saves where it
succeeds are of the same order. Below it a probe saves nothing: the first analysis of a
one-class ring composes one boundary whatever its count (issue 27: 2 GPUs a server over 16
DGX A100, ~0.8-1.4 ms, is the part's packing, the ring plan, one boundary and the fills)."""

BY_GROUP_NUMBERS = frozenset({Algorithm.RING, Algorithm.TREE, *CLOSED_FORM_ONLY})
"""Algorithms whose analytic time reads only a group's :class:`GroupInfo` numbers and the
fabric (:meth:`GroupMemo.collective_shape`)."""


@dataclass(frozen=True)
class _RingPattern:
    """What :meth:`GroupMemo.build` finds for a group whose ring channels
    :func:`~perfmodel.comm.ring_summary.ring_summary` summarises, without a name: every group of the
    same pattern (:meth:`GroupMemo._pattern_key`) has these numbers
    (:meth:`GroupMemo._pattern_group`).

    ``numbers``: the analysis's :data:`_PATTERN_FIELDS` as ``(field, value)`` pairs;
    ``intra_hops``: the summary's intra-server hops (those of the group's first server) by
    local id; ``servers``: the servers the channels touch, as indices into the group's servers
    in order of first appearance (``-1``: the fabric).
    """

    n_channels: int
    numbers: tuple[tuple[str, Any], ...]
    intra_hops: tuple[tuple[str, ...], ...]
    servers: tuple[int, ...]


def _any_count_key(key: tuple[Any, ...]) -> tuple[Any, ...] | None:
    """The ring pattern ``key`` (:meth:`CommCostModel._ring_pattern`) without its server
    count: ``("ring*", local ids of a part, class)`` where every server is of that one class
    of interchangeable servers; else ``None``."""
    seq = key[2]
    first = seq[0]
    if isinstance(first, tuple) or any(c != first for c in seq):  # (>= 2 parts: _ring_pattern)
        return None
    return ("ring*", key[1], first)


def _touched(base: _RingPattern, n_servers: int) -> tuple[int, ...]:
    """The servers (indices into a group's, ``-1``: the fabric) the channels of a group of
    ``base``'s pattern over ``n_servers`` servers touch: every one, and the fabric where
    ``base``'s did."""
    return (-1, *range(n_servers)) if -1 in base.servers else tuple(range(n_servers))


def _channel_servers(links: DirectedLinks, channels: Sequence[Channel]) -> set[int]:
    """The servers (``-1``: the fabric) the hops of ``channels`` touch, without listing
    channels whose summary knows them (:class:`LazyChannels`)."""
    known = getattr(channels, "servers", None)
    if known is not None:
        return set(known)
    srv = links.server
    return {srv[n] for ch in channels for hop in ch.hops for n in hop}


class GroupMemo:
    """The analysis of every group asked for, each made once per class of groups that the
    topology's symmetry makes alike (see the module docstring).

    ``infos``: members -> the group's :class:`~perfmodel.comm.group.GroupInfo` (every group
    asked for, analysed or read off a shared analysis); ``shape_inside``: the members of an
    image in the first servers of its classes -> whether its channels stay in those servers
    (:meth:`_shape_group`). The other memos are bounded (:data:`~perfmodel.comm.group.PATTERN_MEMO_SIZE`).
    """

    #: Whether :meth:`numbers_key` keeps what it reads of the members alone per members
    #: (tests compare both ways).
    MEMBER_KEYS = True
    #: Whether a one-class ring pattern whose summary loads fabric links is read off a group
    #: of the same local ids over another server count, its rates recounted
    #: (:meth:`_recounted`; tests compare both ways).
    RECOUNT = True

    def __init__(self, topology: Topology, links: DirectedLinks, analysis: GroupAnalysis) -> None:
        self.topology = topology
        self.links = links
        self.analysis = analysis
        self.infos: dict[tuple[str, ...], GroupInfo] = {}
        self.shape_inside: dict[tuple[str, ...], bool] = {}
        self._twin_inside: dict[tuple[str, ...], bool] = {}
        self._patterns: BoundedMemo[tuple[Any, ...], _RingPattern] = BoundedMemo(PATTERN_MEMO_SIZE)
        self._pattern_keys: BoundedMemo[
            tuple[str, ...], tuple[tuple[Any, ...], list[list[str]]] | None
        ] = BoundedMemo(PATTERN_MEMO_SIZE)
        self._unsummarised: set[tuple[Any, ...]] = set()
        #: a one-class ring pattern without its count -> (the pattern of a group summarised
        #: with fabric loads, its summary's recount: :meth:`_recounted`)
        self._counted: BoundedMemo[
            tuple[Any, ...], tuple[_RingPattern, Callable[[int], tuple[Any, Any]]]
        ] = BoundedMemo(PATTERN_MEMO_SIZE)
        #: members -> what :meth:`numbers_key` reads of the members alone (:meth:`_member_key`)
        self._member_keys: BoundedMemo[tuple[str, ...], tuple[bool, Any]] = BoundedMemo(
            PATTERN_MEMO_SIZE
        )

    def info(self, members: tuple[str, ...]) -> GroupInfo:
        """The analysis of the group ``members`` (checked), made or read off a shared one and
        kept."""
        info = self.infos.get(members)
        if info is None:
            info = (
                self._twin_group(members)
                or self._pattern_group(members)
                or self._shape_group(members)
                or self.build(members)
            )
            self.infos[members] = info
        return info

    def build(self, members: tuple[str, ...]) -> GroupInfo:
        """:meth:`GroupAnalysis.build <perfmodel.comm.group.GroupAnalysis.build>` of ``members``,
        its numbers recorded under its ring pattern where it was summarised (a group of GPUs);
        a group inside one server whose packing is an image read off as :meth:`_image_group`."""
        image = self._image_group(members)
        if image is not None:
            return image
        info, summary = self.analysis.build(members)
        if summary is not None and not info.cpus:
            self._record_pattern(info, summary)
        return info

    def _image_group(self, members: tuple[str, ...]) -> GroupInfo | None:
        """The analysis of GPUs inside one server (the first of its class) whose ring packing
        :meth:`GroupAnalysis.packed <perfmodel.comm.group.GroupAnalysis.packed>` read off an
        analysed group's through an automorphism of the server
        (:func:`~perfmodel.topology.symmetry.member_automorphism`), relabelled through that
        map; ``None`` otherwise (analysed as before).

        Why it is :meth:`GroupAnalysis.build <perfmodel.comm.group.GroupAnalysis.build>`'s
        answer, bit for bit: of a group inside one server, ``build`` reads the packing (the
        image of the earlier group's, ``_image_pack``), the max-min rates of its channels
        (the link ids of each hop, the links' capacities, and each hop's P2P charge: without a
        P2P rule (``no_p2p``, ``p2p_denied``: then no host-memory staging) the charge reads
        only the kind and model of the hop's inner nodes), each hop's extra latency and class
        (link attributes), the first GPU's model (its spec) and NVLink count, the P2P rule
        and the process layout. The automorphism keeps every node attribute but the names
        and the GPU number, and every link among the server's nodes with all its attributes,
        and sends the earlier members to these in order: the channels are the images hop for
        hop, so every link a hop crosses has the same capacity and attributes and the rates
        (per-link sums in channel order, minima: independent of the link numbering) are the
        same floats, summed in the same channel order. The single part is the members in
        their order, the images of the earlier part's. The NVLink count, which reads the
        first GPU's links to any switch, is compared. Issue 27: the second tensor-parallel
        quartet of a DGX A100 (GPUs 4-7, the image of 0-3) of a process's first tp 4 plan.
        """
        links = self.links
        srv = links.server
        s = srv.get(members[0], -1)
        if len(members) < 2 or s < 0 or any(map(s.__ne__, map(srv.__getitem__, members))):
            return None
        if links.no_p2p or links.p2p_denied or not all_gpus(self.topology, members):
            return None
        analysis = self.analysis
        analysis.packed(members)  # the group's packing, as build reads it (kept)
        source = analysis.images.get(members)
        if source is None:  # searched, or the server is not its class's first
            return None
        done, fwd = source
        base = self.infos.get(done)
        if base is None or base.nvlinks != analysis._nvlinks(members[0]):
            return None
        return relabel(base, fwd)

    def collective_shape(self, members: tuple[str, ...], algo: Algorithm) -> tuple[str, ...] | None:
        """The members of the group of the same shape whose analytic result a group spanning
        servers may reuse (where ``_shape_inside`` says so), or ``None`` (priced as before).

        Issue 14: a pipeline's stages ask for the same collectives over translated groups.
        :meth:`group_info` of such a group (two servers or more: no :meth:`_twin_group`) is
        :meth:`_shape_group`'s relabelled analysis of the image in the first servers of its
        classes, used where that image's channels stay in its servers
        (``_shape_inside``, known once one translate has been analysed): the same bandwidths,
        latencies, channel count, parts and server attributes. The ring, tree and in-switch
        closed forms (:meth:`NcclChoice.candidates <perfmodel.comm.nccl_choice.NcclChoice.candidates>`) read only those
        numbers and the fabric, never a name, so the result is the same object's numbers, bit
        for bit; results of other algorithms (which route flows by name) are not shared
        (``BY_GROUP_NUMBERS``), nor are explicit algorithms outside them.
        """
        if algo not in BY_GROUP_NUMBERS and algo is not ALGO_AUTO:
            return None
        runs = server_runs(self.topology, self.links, members)
        if runs is not None:  # a strided slice of the GPUs: its servers by arithmetic
            servers = set(runs[2])
        else:
            servers = set(map(self.links.server.__getitem__, members))
        if len(servers) < 2:
            return None
        sym = server_symmetry(self.topology)
        smap = sym.server_map(servers)
        if smap is None or all(k == v for k, v in smap.items()):
            return None
        return sym.map_nodes(members, smap)

    def inside_shape(self, members: tuple[str, ...], algo: Algorithm) -> tuple[str, ...] | None:
        """:meth:`collective_shape` of ``members`` where :attr:`shape_inside` holds ``True``
        for it (the one case :class:`SharedResults` reads a shape), else ``None``; not looked
        for while no shape is known to stay in its servers.

        Why that skips no shape :class:`SharedResults` would read: :attr:`shape_inside` only
        gains entries (:meth:`_shape_group`, once per image), so while none is ``True`` no
        shape can be one, and :meth:`collective_shape` is a function of the members, the
        algorithm and the topology (no memo of it is read or written elsewhere). Issue 27:
        every ring pattern's first group (a new plan's data-parallel groups) mapped its
        members onto the first servers of their classes for nothing, making the local-name
        tables of servers no one else reads (a dp64 group over 64 DGX A100: ~1.5 M
        instructions); in the GPT-3 175B preset plans no shape is ever found inside (every
        group is read off its twin or its ring pattern first)."""
        inside = self.shape_inside
        if True not in inside.values():
            return None
        shape = self.collective_shape(members, algo)
        return shape if shape is not None and inside.get(shape) is True else None

    def numbers_key(self, members: tuple[str, ...]) -> tuple[Any, ...] | None:
        """A key for the analysed numbers of a group of GPUs that other groups share, where
        they are known to: its ring pattern (:meth:`_pattern_key`) once a group of the pattern
        has been analysed, or, inside one server, ``("twin", the same local ids in the
        server's inside twin)`` once that group's channels are known to stay in the twin
        (:meth:`_twin_group`: then every server with that twin reads the twin's analysis);
        else ``None``. What ``BY_GROUP_NUMBERS`` algorithms cost is a function of the key.

        What it reads of the members alone (:meth:`_member_key`: whether they span servers,
        then their ring pattern's key, else their inside twin's members) is kept per members,
        so a group asked again (each new message size of a stage's data-parallel or
        tensor-parallel group: ~30-50 asks of a new GPT-3 175B plan) reads no server of its
        members; whether that pattern or twin has been analysed is asked every time, as
        before, so the answer is the same in every state of the memos (issue 27).
        """
        if self.MEMBER_KEYS:
            spans, key = self._member_keys.get_from(members, self._member_key)
        else:
            spans, key = self._member_key(members)
        if spans:  # the ring pattern's key, where a group of the pattern has been analysed
            return key if key is not None and key in self._patterns.entries else None
        if key is None:  # not a server's members
            return None
        inside = self._twin_inside.get(key)
        if inside is None:
            info = self.infos.get(key)
            if info is None:
                return None
            t = self.links.server[key[0]]
            inside = self._twin_inside[key] = not (
                _channel_servers(self.links, info.channels) - {t}
            )
        return ("twin", key) if inside else None

    def _member_key(self, members: tuple[str, ...]) -> tuple[bool, Any]:
        """What :meth:`numbers_key` reads of ``members`` alone, a function of the members
        (the topology's server tables and symmetry, and :meth:`_pattern_key`, which is one):
        ``(True, the ring pattern's key or None)`` for members spanning servers, else
        ``(False, the members in the server's inside twin)`` (``(False, None)`` outside every
        server)."""
        srv = self.links.server
        s = srv[members[0]]
        if any(map(s.__ne__, map(srv.__getitem__, members))):  # spans servers (C loops)
            got = self._pattern_key(members)
            return True, None if got is None else got[0]
        if s < 0:
            return False, None
        fwd = server_symmetry(self.topology).twin_map(s)
        return False, members if fwd is None else tuple([fwd[x] for x in members])

    def _pattern_key(
        self, members: tuple[str, ...]
    ) -> tuple[tuple[Any, ...], list[list[str]]] | None:
        """:meth:`_ring_pattern` of ``members``, memoised (asked up to four times for a new
        group: its collective before and after the analysis, the analysis, the record)."""
        return self._pattern_keys.get(members, partial(self._ring_pattern, members))

    def _ring_pattern(
        self, members: tuple[str, ...]
    ) -> tuple[tuple[Any, ...], list[list[str]]] | None:
        """The ring pattern of a group of GPUs spanning servers and its parts
        (:func:`~perfmodel.comm.nodes.split_by_server`), or ``None`` (one server, or parts of
        different local ids: :func:`~perfmodel.comm.ring_summary.ring_summary` summarises no such
        group).

        The pattern is ``("ring", local ids of a part, the servers' classes in order of first
        appearance)``, a server outside every class
        (:attr:`~perfmodel.topology.symmetry.ServerSymmetry.cls`) standing for itself. Issue
        14: a plan's data-parallel groups of every pipeline stage, and of every plan with that
        degree and tensor-parallel rank, have one pattern; their servers are other servers of
        the same classes in another name order, which the order-preserving images of
        :meth:`_shape_group` do not merge (GPT-3 175B dp32 tp4 pp8 on 128 DGX A100: eight
        groups, six images, one pattern per local id).

        Why every group of one pattern has :meth:`build`'s numbers
        (:class:`_RingPattern`), bit for bit: :func:`~perfmodel.comm.ring_summary.ring_summary`
        reads of the servers only (a) the first server's ring packing, NICs and the routes
        from its GPUs to its NICs, which stay in the server and the fabric and compare names
        inside the server only (the same local-id sequence in name order in every server of
        a class: :func:`~perfmodel.topology.symmetry.server_symmetry`); (b) routes inside the
        servers, read off their common inside twin by local id; (c) per pair of classes of
        adjacent servers, the fabric route between the NICs, memoised by the NICs' fabric
        links, which servers of a class share (``_fabric_pattern``), and the NIC links'
        capacities; and (d) how many adjacent pairs each class pair has. Every resource of
        its max-min fill is keyed by local ids, capacities and fabric links, and met in the
        order of the channels and of the first boundaries of the class pairs: the same keys
        in the same order for every group of the pattern. The rest of :meth:`build`
        reads the first part's packed rings and link attributes by local id
        (:meth:`GroupAnalysis.packed <perfmodel.comm.group.GroupAnalysis.packed>`), the GPU model and the P2P rule of the servers, alike in a class.
        """
        links = self.links
        runs = server_runs(self.topology, links, members)
        if runs is not None:  # a strided slice of the GPUs: no per-member read (gpu_slices)
            parts, key0, servers = runs
            if len(parts) < 2:
                return None
            return ("ring", key0, self._class_seq(servers)), parts
        of_member = list(map(links.server.__getitem__, members))
        if len(members) > 1:  # one member per server, one local id, servers in classes (a
            # data-parallel group): the same key and parts, read in C loops
            if len(set(of_member)) == len(members):
                lids = set(map(links.local_id.__getitem__, members))
                if len(lids) == 1:
                    seq = tuple(map(links._symmetry.cls.get, of_member))
                    if None not in seq:
                        return ("ring", (lids.pop(),), seq), [[m] for m in members]
        parts = equal_runs(members, of_member)
        if parts is None:
            parts = split_by_server(self.topology, members, links.server)
        if len(parts) < 2:
            return None
        lid = links.local_id.__getitem__
        key0 = tuple(map(lid, parts[0]))
        if len(set(map(len, parts))) == 1:  # parts of one size: every part's local ids at once
            if list(map(lid, itertools.chain.from_iterable(parts))) != list(key0) * len(parts):
                return None
        elif any(tuple(map(lid, p)) != key0 for p in parts[1:]):
            return None
        servers = list(map(links.server.__getitem__, map(itemgetter(0), parts)))
        return ("ring", key0, self._class_seq(servers)), parts

    def _class_seq(self, servers: Sequence[int]) -> tuple[Any, ...]:
        """The classes of ``servers`` in order (:meth:`_ring_pattern`'s key), a server outside
        every class standing for itself."""
        seq = tuple(map(self.links._symmetry.cls.get, servers))
        if None in seq:
            seq = tuple(c if c is not None else ("u", s) for s, c in zip(servers, seq, strict=True))
        return seq

    def _pattern_group(self, members: tuple[str, ...]) -> GroupInfo | None:
        """The analysis of a group of GPUs spanning servers from the numbers of its ring
        pattern (:meth:`_pattern_key`), where a group of that pattern has been analysed (the
        channels are this group's own, listed when read); the group's own analysis where it
        is the first of its pattern (which records the pattern); ``None`` where the group has
        no pattern or its pattern's first group was not summarised."""
        if not all_gpus(self.topology, members):
            return None
        got = self._pattern_key(members)
        if got is None:
            return None
        key, parts = got
        pat = self._patterns.entries.get(key)
        if pat is None:
            pat = self._pattern_of_count(key, len(parts))
        if pat is None and len(parts) >= PROBE_SERVERS and _any_count_key(key) is not None:
            # one class of servers: the group over its first two servers (:data:`PROBE_SERVERS`)
            self.info((*parts[0], *parts[1]))
            pat = self._pattern_of_count(key, len(parts))
        if pat is None:
            if key in self._unsummarised:
                return None  # read off an image where one is (_shape_group)
            # the first group of its pattern: analysed as itself (no image to relabel)
            info = self.build(members)
            if key not in self._patterns.entries:
                self._unsummarised.add(key)
            return info
        links = self.links
        runs = server_runs(self.topology, links, members)
        if runs is not None:  # a strided slice of the GPUs: its parts' servers by arithmetic
            servers = list(runs[2])
        else:
            srv = links.server
            servers = [srv[p[0]] for p in parts]
        first = links.by_local[servers[0]]
        channels = LazyChannels(
            pat.n_channels,
            partial(build_channels, links, members),
            frozenset(-1 if i < 0 else servers[i] for i in pat.servers),
            tuple(tuple(first[x] for x in hop) for hop in pat.intra_hops),
        )
        return GroupInfo(
            members=members,
            gpus=members,
            cpus=(),
            parts=tuple(map(tuple, parts)),
            channels=channels,
            **dict(pat.numbers),
        )

    def _record_pattern(self, info: GroupInfo, summary: RingSummary) -> None:
        """Keep the numbers of a group summarised by :func:`ring_summary` under its ring
        pattern (:meth:`_pattern_key`), where its intra-server hops lie in its first server."""
        got = self._pattern_key(info.members)
        if got is None:
            return
        key, parts = got
        links = self.links
        srv, lid = links.server, links.local_id
        servers = [srv[p[0]] for p in parts]
        s0 = servers[0]
        if any(srv[x] != s0 for hop in summary.intra_hops for x in hop):
            return  # pragma: no cover - the summary's segments are the first server's rings
        index = {s: i for i, s in enumerate(servers)}
        index[-1] = -1
        if not summary.servers <= index.keys():
            return  # pragma: no cover - the channels touch the group's servers and the fabric
        pat = _RingPattern(
            n_channels=summary.n_channels,
            numbers=tuple((f, getattr(info, f)) for f in _PATTERN_FIELDS),
            intra_hops=tuple(tuple(lid[x] for x in hop) for hop in summary.intra_hops),
            servers=tuple(sorted(index[s] for s in summary.servers)),
        )
        self._patterns.get(key, lambda: pat)
        any_count = _any_count_key(key)
        every = set(index.values()) - {-1}
        if any_count is None or not every <= set(pat.servers):
            return
        if summary.fabric_free:
            self._patterns.get(any_count, lambda: pat)
        elif self.RECOUNT and summary.recount is not None:
            self._counted.get(any_count, lambda: (pat, summary.recount))

    def _pattern_of_count(self, key: tuple[Any, ...], n_servers: int) -> _RingPattern | None:
        """The numbers of ring pattern ``key`` read off a group of the same local ids over
        another number of servers of the same one class (:func:`_any_count_key`), kept under
        ``key`` from now on: as they are where such a group was summarised with every
        boundary's fabric part one switch (:attr:`~perfmodel.comm.ring_summary.RingSummary.fabric_free`),
        else with its rates recounted (:meth:`_recounted`); ``None`` where no such group has
        been summarised.

        Issue 14: the data-parallel groups of 16, 32 and 64 servers of one class (GPT-3 175B
        on 128 DGX A100) are one analysis. Why it is :meth:`build`'s answer, bit for
        bit: with one class, :func:`~perfmodel.comm.ring_summary.ring_summary` composes one class
        pair's boundary (the first two servers'; every server pair of the class composes the
        same, :meth:`_ring_pattern`), and the number of boundaries (the server count) enters
        only as the multiplier of the fabric-link loads, of which a fabric-free summary has
        none: the same resources, capacities and per-channel counts in the same order, so the
        same max-min rates; the channel count (the first part's rings and the server's NICs),
        the first server's hops, the latencies of the one boundary path and the server
        attributes do not read the count either. The channels touch every server of the group
        (and the fabric where the recorded group's did)."""
        any_count = _any_count_key(key)
        if any_count is None:
            return None
        base = self._patterns.entries.get(any_count)
        if base is None:
            return self._recounted(key, any_count, n_servers)
        pat = replace(base, servers=_touched(base, n_servers))
        return self._patterns.get(key, lambda: pat)

    def _recounted(
        self, key: tuple[Any, ...], any_count: tuple[Any, ...], n_servers: int
    ) -> _RingPattern | None:
        """The numbers of ring pattern ``key`` read off a group of the same local ids over
        another number of servers of the same one class whose summary loads fabric links
        (not :attr:`~perfmodel.comm.ring_summary.RingSummary.fabric_free`: a boundary through
        more than one fabric switch, e.g. from rail 4 to rail 0 through the spine), with its
        rates recounted for ``n_servers`` servers; kept under ``key`` from now on. ``None``
        where no such group has been summarised (or :attr:`RECOUNT` is off).

        Why it is :meth:`build`'s answer, bit for bit: the count enters the summary only as
        the fabric loads' multiplier, and
        :attr:`RingSummary.recount <perfmodel.comm.ring_summary.RingSummary.recount>` (the
        bound :meth:`~perfmodel.comm.ring_summary._Summariser.recounted`) gives
        the rates :func:`~perfmodel.comm.ring_summary.ring_summary` finds over ``n_servers``
        servers; :meth:`GroupAnalysis.build <perfmodel.comm.group.GroupAnalysis.build>` reads
        them only as ``ring_bw_Bps`` and ``inter_bw_Bps`` (their ``numpy_sum``, summed here
        alike). Every other number reads no count (:meth:`_pattern_of_count`'s argument: the
        channel count, the first server's hops and packing, the one boundary path's
        latencies, the server attributes), and the channels touch every server of the group
        and the fabric. Issue 27: the data-parallel rings of GPUs 0 and 4 of a tp 4 plan's
        stages over 32 DGX A100 on rails, then over 16 (the next plan's): 0.8-1.4 ms of ring
        plan and boundary composition for the second.
        """
        got = self._counted.entries.get(any_count) if self.RECOUNT else None
        if got is None:
            return None
        base, recount = got
        rates, inter_rates = recount(n_servers)
        bw = {"ring_bw_Bps": numpy_sum(rates), "inter_bw_Bps": numpy_sum(inter_rates)}
        pat = replace(
            base,
            numbers=tuple((f, bw.get(f, v)) for f, v in base.numbers),
            servers=_touched(base, n_servers),
        )
        return self._patterns.get(key, lambda: pat)

    def _shape_group(self, members: tuple[str, ...]) -> GroupInfo | None:
        """The analysis of a group, read off the group of the same shape in the first servers
        of its servers' classes and relabelled, or ``None``.

        Interchangeable servers (:func:`perfmodel.topology.symmetry.server_symmetry`) are
        exchanged by a graph automorphism that keeps the name order of the group's servers'
        nodes and of the fabric, so the ring search (minimum hops, widest, then smallest node
        names; searched inside the group's servers and the fabric only) finds the mapped
        channels: the same bandwidths, latencies and channel count. Issue 14: the tensor-,
        pipeline- and data-parallel groups of every plan, data-parallel degree and cluster
        size are one analysis per shape (a GPT-3 tp16 pp16 plan on 128 DGX A100: 3.5 s of
        ring analysis for 31 new groups; the identical tensor-parallel groups of the pipeline
        stages, inside one server each, are one analysis). Used only when the canonical
        channels stay inside the canonical servers and the fabric (else the group is analysed
        directly).
        """
        links = self.links
        servers = set(map(links.server.__getitem__, members))
        sym = server_symmetry(self.topology)
        smap = sym.server_map(servers)
        if smap is None or all(k == v for k, v in smap.items()):
            return None
        fwd = sym.node_map(smap)
        base_members = tuple(fwd.get(m, m) for m in members)
        base = self.infos.get(base_members)
        if base is None:
            base = self.infos[base_members] = self.build(base_members)
        inside = self.shape_inside.get(base_members)
        if inside is None:  # once per shape: do the canonical channels stay in their servers?
            used = _channel_servers(links, base.channels)
            inside = self.shape_inside[base_members] = used <= {-1, *smap.values()}
        if not inside:
            return None
        return relabel(base, {v: k for k, v in fwd.items()})

    def _twin_group(self, members: tuple[str, ...]) -> GroupInfo | None:
        """The analysis of a group inside one server, read off the same local ids in the
        server's inside twin (:meth:`perfmodel.topology.symmetry.ServerSymmetry.twin_map`) and
        relabelled, or ``None``.

        The twin is built alike inside and its nodes share outside switches no less (so no
        route through the fabric is shorter for this server than for the twin); used only when
        the twin's channels stay inside the twin, where the two servers are the same graph with
        the same name order. Issue 14: the identical tensor-parallel groups of the pipeline
        stages are analysed once, also on servers of other fat-tree leaves, which are no class
        of the twin's (:meth:`_shape_group`).
        """
        links = self.links
        s = links.server.get(members[0], -1)
        if s < 0 or any(map(s.__ne__, map(links.server.__getitem__, members))):
            return None
        fwd = server_symmetry(self.topology).twin_map(s)
        if fwd is None:
            return None
        base_members = tuple(fwd[m] for m in members)
        base = self.infos.get(base_members)
        if base is None:
            base = self.infos[base_members] = self.build(base_members)
        t = links.server[base_members[0]]
        if _channel_servers(links, base.channels) - {t}:
            return None
        return relabel(base, {v: k for k, v in fwd.items()})


def pricing_reads(links: DirectedLinks, info: GroupInfo) -> tuple[Any, ...]:
    """Every value of a group of GPUs' analysis ``info`` that its analytic pricing reads
    where the algorithm is one of :data:`BY_GROUP_NUMBERS`
    (:meth:`~perfmodel.comm.analytic.AnalyticCommModel._analytic_info` and what it calls:
    :meth:`NcclChoice.best <perfmodel.comm.nccl_choice.NcclChoice.best>`, its tables, the
    in-switch and recent candidates, ``chain_time``, ``_result``): the member count, the
    parts' sizes (``nodes``, ``local``, the smallest part), the channel count, whether there
    are GPUs, whether every server offers NVLS (:func:`~perfmodel.comm.nccl_recent.nvls_servers`,
    the one reader of the channels' hops and the parts' members) and the analysis's numbers
    (:data:`_PATTERN_FIELDS`: bandwidths, latencies, link class, GPU architecture and memory
    bandwidth, shared memory, network path, NVLink count, NIC port and count, P2P path,
    extras). Two analyses with equal values are priced alike for every op, size and such
    algorithm (the model's tuner, release, environment, fabric and link parameters being one),
    so their results are one (:meth:`SharedResults._by_reads`)."""
    numbers = tuple(
        tuple(sorted(v.items())) if isinstance(v, dict) else v
        for v in (getattr(info, f) for f in _PATTERN_FIELDS)
    )
    return (
        info.n,
        tuple(map(len, info.parts)),
        len(info.channels),
        bool(info.gpus),
        nvls_servers(links, info),
        numbers,
    )


class SharedResults:
    """Analytic results of collectives shared between groups whose numbers are known to be the
    same (:meth:`GroupMemo.numbers_key`) and between translates of one shape
    (:meth:`GroupMemo.collective_shape`), for the algorithms whose closed forms read only those
    numbers (:data:`BY_GROUP_NUMBERS`); and between numbers keys whose representatives' analyses
    are equal in every value the pricing reads (:func:`pricing_reads`, :meth:`_by_reads`).

    ``price(op, bytes, info, algorithm)``: the analytic result of a collective over the group
    ``info`` describes (:meth:`~perfmodel.comm.analytic.AnalyticCommModel._analytic_info`).
    """

    #: Whether results are shared between representatives equal in every value the pricing
    #: reads (:meth:`_by_reads`; tests compare both ways).
    BY_READS = True

    def __init__(
        self,
        groups: GroupMemo,
        price: Callable[[CollectiveOp, float, GroupInfo, Algorithm], CommResult],
    ) -> None:
        self._groups = groups
        self._price = price
        #: (op, bytes, numbers key or shape, algorithm) -> result
        self._results: dict[tuple[Any, ...], CommResult] = {}
        #: numbers key -> the analysis of the first group met with it
        self._representatives: BoundedMemo[tuple[Any, ...], GroupInfo | None] = BoundedMemo(
            PATTERN_MEMO_SIZE
        )
        #: id of a representative -> (it, :func:`pricing_reads` of it)
        self._reads_of: BoundedMemo[int, tuple[GroupInfo, tuple[Any, ...]]] = BoundedMemo(
            PATTERN_MEMO_SIZE
        )
        #: (op, bytes, pricing reads' token, algorithm) -> result (:meth:`_by_reads`; bounded as the
        #: other memos: a plan search prices a few dozen sizes per pattern)
        self._shared_reads: BoundedMemo[tuple[Any, ...], CommResult] = BoundedMemo(
            PATTERN_MEMO_SIZE
        )
        #: :func:`pricing_reads` value -> the number :meth:`_reads_token` gives it
        self._tokens: BoundedMemo[tuple[Any, ...], int] = BoundedMemo(PATTERN_MEMO_SIZE)
        self._counter = itertools.count()

    def analytic(
        self,
        o: CollectiveOp,
        m: float,
        members: tuple[str, ...],
        algo: Algorithm,
        no_cpu: bool,
    ) -> CommResult:
        """The analytic result of ``o`` of ``m`` bytes over ``members`` (checked; ``no_cpu``:
        all GPUs) with ``algo``: shared where the group's numbers or shape are known, else
        priced on the group's own analysis (and shared from then on)."""
        by_numbers = no_cpu and (algo is ALGO_AUTO or algo in BY_GROUP_NUMBERS)
        numbers = self._groups.numbers_key(members) if by_numbers else None
        if numbers is not None:
            # a ring pattern or a twin's group met before: its numbers, hence the result
            nkey = (o, m, numbers, algo)
            res = self._results.get(nkey)  # type: ignore[assignment]
            if res is None:
                res = self._by_numbers(o, m, members, algo, numbers)
                if res.algorithm in BY_GROUP_NUMBERS:
                    self._results[nkey] = res
            return res
        shape = self._groups.inside_shape(members, algo) if no_cpu else None
        if shape is not None:
            hit = self._results.get((o, m, shape, algo))
            if hit is None:
                hit = self._by_shape(o, m, shape, algo)
            if hit is not None:
                return hit
        res = self._own(o, m, members, algo)
        if no_cpu and res.algorithm in BY_GROUP_NUMBERS:
            if shape is None:  # the group's own analysis may have found its shape inside
                shape = self._groups.inside_shape(members, algo)
            if shape is not None:
                self._results[(o, m, shape, algo)] = res
        if by_numbers and res.algorithm in BY_GROUP_NUMBERS:
            numbers = self._groups.numbers_key(members)  # known now that the group is analysed
            if numbers is not None:
                self._results[(o, m, numbers, algo)] = res
                self._representatives.get(numbers, partial(self._groups.infos.get, members))
        return res

    def _own(
        self, op: CollectiveOp, m: float, members: tuple[str, ...], algo: Algorithm
    ) -> CommResult:
        """The result priced on the group's own analysis (:meth:`GroupMemo.info`)."""
        return self._price(op, m, self._groups.info(members), algo)

    def _by_numbers(
        self,
        op: CollectiveOp,
        m: float,
        members: tuple[str, ...],
        algo: Algorithm,
        numbers: tuple[Any, ...],
    ) -> CommResult:
        """The analytic result of a group whose numbers are those of ``numbers``
        (:meth:`GroupMemo.numbers_key`): priced on the analysis of the first group met with that key
        (no analysis of this group is made, nor kept), where the chosen algorithm reads only
        those numbers (``BY_GROUP_NUMBERS``, as the shared results of :meth:`analytic`);
        else on this group's own analysis."""
        rep = self._representatives.entries.get(numbers)
        if rep is not None and op not in (ALLTOALL, SENDRECV):
            res = self._by_reads(op, m, rep, algo) if self.BY_READS else None
            if res is None:
                res = self._price(op, m, rep, algo)
            if res.algorithm in BY_GROUP_NUMBERS:
                return res
        res = self._own(op, m, members, algo)
        if res.algorithm in BY_GROUP_NUMBERS:
            self._representatives.get(numbers, partial(self._groups.infos.get, members))
        return res

    def _by_reads(
        self, op: CollectiveOp, m: float, rep: GroupInfo, algo: Algorithm
    ) -> CommResult | None:
        """The result of ``op`` of ``m`` bytes over the representative ``rep`` with ``algo``,
        shared between representatives of other numbers keys equal in every value the pricing
        reads (:func:`pricing_reads`; issue 27: the rings of local ids 0 and 4 of a tp 4 plan's
        stages on DGX A100, two ring patterns with one set of numbers, priced each message size
        twice); ``None`` where those values do not hash (then priced as before)."""
        got = self._reads_of.entries.get(id(rep))
        if got is None or got[0] is not rep:  # the entry holds rep: its id is rep's
            got = (rep, self._reads_token(pricing_reads(self._groups.links, rep)))
            self._reads_of.put(id(rep), got)
        if got[1] is None:  # a value the pricing reads that does not hash
            return None
        key = (op, m, got[1], algo)
        res = self._shared_reads.entries.get(key)
        if res is None:
            res = self._price(op, m, rep, algo)
            if res.algorithm in BY_GROUP_NUMBERS:
                self._shared_reads.put(key, res)
        return res

    def _reads_token(self, reads: tuple[Any, ...]) -> int | None:
        """A number that stands for the :func:`pricing_reads` value ``reads`` in
        :meth:`_by_reads`' keys (``None`` where it does not hash): equal values, one number,
        while the value's entry is kept; a value met again after its entry was dropped gets a
        new number (its results are priced again, never another value's). Issue 27: the value
        (~20 numbers and a frozen dataclass's Python ``__hash__``) was hashed three times for
        each new message size."""
        try:
            token = self._tokens.entries.get(reads)
        except TypeError:
            return None
        if token is None:
            token = next(self._counter)
            self._tokens.put(reads, token)
        return token

    def _by_shape(
        self, op: CollectiveOp, m: float, shape: tuple[str, ...], algo: Algorithm
    ) -> CommResult | None:
        """A new message size of a group whose shape's image ``shape``
        (:meth:`GroupMemo.collective_shape`) is analysed and stays in its servers: priced on the
        image's analysis (no relabelled copy made), kept under the shape, where the chosen
        algorithm reads only the group's numbers (``BY_GROUP_NUMBERS``: then the image's
        result is the group's, as for the sizes the shape shares in :meth:`analytic`);
        ``None`` otherwise (the group is analysed itself)."""
        base = self._groups.infos.get(shape)
        if base is None or op in (ALLTOALL, SENDRECV):
            return None
        res = self._price(op, m, base, algo)
        if res.algorithm not in BY_GROUP_NUMBERS:
            return None
        self._results[(op, m, shape, algo)] = res
        return res
