"""Pipeline stages that are one another moved by whole servers, so that a stage's
data-parallel key, and the time of its pipeline sends, are an earlier stage's (issue 27).

A plan's stages are slices of one rank order (:class:`~perfmodel.parallel.placement.Placement`):
stage ``b``'s ranks are stage ``a``'s plus ``(b - a)`` times the pipeline stride. Where the
placement's GPUs are laid server by server (``g`` GPUs a server, the same local ids in the same
order in every server: :func:`_slots`) and the stride is a multiple of ``g``, rank ``r + D``
is the GPU of rank ``r``'s local id on the server ``D / g`` slots on. :class:`StageShift` says
when that server map, on the servers a stage touches, keeps every server's class of
interchangeable servers and the name order of the servers of each class
(:meth:`StageShift.moved`); :meth:`StageShift.key` then hands a stage the data-parallel
``SystemCosts.concurrent_key`` an earlier stage found, instead of reading its groups member by
member again (~30-60 us a stage of a GPT-3 175B plan on 128 DGX A100: the ring pattern of its
first group, the sharing shape of its sibling groups); :meth:`StageShift.send_time` likewise
hands the sends between two stages the time of the sends between two earlier stages as far
apart, where the one pair of stages is the other moved (classes only) and the time was read off
the sends' name-free transfer shape.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import lru_cache
from typing import Any

from perfmodel.parallel.costs import factor_by_shape
from perfmodel.parallel.placement import Placement
from perfmodel.topology import Topology
from perfmodel.topology.symmetry import server_symmetry


@lru_cache(maxsize=8)
def _slots(topology: Topology, gpus: tuple[str, ...]) -> tuple[int, tuple[int, ...]] | None:
    """``(g, the server of each slot)`` where ``gpus`` are laid server by server: slot ``k``
    holds ``gpus[k * g : (k + 1) * g]``, all on one server, the servers of the slots distinct,
    and the local ids of every slot those of the first slot in the same order (a last slot may
    hold fewer); ``None`` otherwise (a GPU in no server, servers of other sizes or orders)."""
    sym = server_symmetry(topology)
    try:
        srv = list(map(sym.server.__getitem__, gpus))
        lid = list(map(sym.local_id.__getitem__, gpus))
    except KeyError:
        return None
    first = srv[0]
    g = next((i for i, s in enumerate(srv) if s != first), len(srv))
    ids = lid[:g]
    for k in range(0, len(srv), g):
        run = srv[k : k + g]
        if run.count(run[0]) != len(run) or lid[k : k + g] != ids[: len(run)]:
            return None
    slots = tuple(srv[::g])
    if len(set(slots)) != len(slots) or min(slots) < 0:
        return None
    return g, slots


class StageShift:
    """Which pipeline stages of one placement are an earlier stage moved by whole servers in
    a way that every name-free reading of the comm model keeps (:meth:`moved`), and the
    data-parallel keys (:meth:`key`) and pipeline sends' times (:meth:`send_time`) they share.

    ``ON``: whether :meth:`key` shares keys and :meth:`send_time` sends' times between stages
    (tests compare both ways).
    """

    ON = True

    def __init__(self, topology: Topology | None, placement: Placement) -> None:
        self.topology = topology
        self.pl = placement
        #: stage -> its servers' classes in slot order (:meth:`_classes`)
        self._cls: dict[int, tuple[int, ...] | None] = {}
        #: stage -> its slots ordered by (class, position in the class's name order)
        self._orders: dict[int, tuple[int, ...]] = {}
        self._first: list[int] | None = None  # slots stage 0 touches (sorted), once asked
        self._layout: tuple[int, tuple[int, ...]] | None = None
        #: group kind -> (the stage whose key is shared, its key, whether its sharing shape
        #: reads name orders) where that key's factor is read off a name-free shape
        #: (:func:`~perfmodel.parallel.costs.factor_by_shape`)
        self._shared: dict[str, tuple[int, tuple[Any, ...], bool] | None] = {}
        #: (stages apart, bytes per rank) -> (the sending stage whose time is shared, the time)
        self._sends: dict[tuple[int, float], tuple[int, float]] = {}

    def _servers(self, s: int) -> list[int] | None:
        """Stage ``s``'s servers, those of stage 0's slots moved ``s`` strides on, in slot
        order; ``None`` where the layout is not by whole servers (:func:`_slots`) or the stride
        is not a multiple of a server's GPUs."""
        pl, topo = self.pl, self.topology
        if topo is None:
            return None
        stride = pl.rank(0, 1, 0) - pl.rank(0, 0, 0)
        if self._first is None:
            self._layout = _slots(topo, pl.gpus)
            if self._layout is None:
                return None
            g = self._layout[0]
            size = pl.dp * pl.tp
            if stride == size:  # pipeline stages outermost: stage 0 is ranks 0 .. size - 1
                self._first = list(range((size - 1) // g + 1))
            else:
                ranks = (pl.rank(d, 0, t) for d in range(pl.dp) for t in range(pl.tp))
                self._first = sorted({r // g for r in ranks})
        if self._layout is None or stride % self._layout[0]:
            return None
        g, slots = self._layout
        return [slots[j + s * stride // g] for j in self._first]

    def _classes(self, s: int) -> tuple[int, ...] | None:
        """The classes of interchangeable servers of stage ``s``'s servers (:meth:`_servers`)
        in slot order; ``None`` where there are no such servers or one is in no class."""
        if s in self._cls:
            return self._cls[s]
        at = self._servers(s)
        got = None
        if at is not None:
            sym = server_symmetry(self.topology)  # type: ignore[arg-type]
            classes = tuple(map(sym.cls.get, at))
            if None not in classes:
                got = classes  # type: ignore[assignment]
        self._cls[s] = got
        return got

    def _order(self, s: int) -> tuple[int, ...]:
        """Stage ``s``'s slots ordered by (class, position in the class's name order), for a
        stage whose :meth:`_classes` are known."""
        got = self._orders.get(s)
        if got is None:
            at = self._servers(s)
            pos = server_symmetry(self.topology).position  # type: ignore[arg-type]
            classes = self._cls[s]
            key = [(c, pos[x]) for c, x in zip(classes, at, strict=True)]  # type: ignore[arg-type]
            got = self._orders[s] = tuple(sorted(range(len(key)), key=key.__getitem__))
        return got

    def moved(self, a: int, b: int, names: bool) -> bool:
        """Whether stage ``b``'s groups are stage ``a``'s moved by a map of whole servers that
        keeps each server's class and, where ``names``, the name order of the servers of a
        class.

        Then member ``i`` of any group of stage ``b`` (a rank of stage ``a`` plus ``b - a``
        strides) has member ``i`` of stage ``a``'s group's local id, on the image of its server
        under that map (:func:`_slots`): one map, the slot ``j`` of stage ``a`` onto the slot
        ``j + (b - a) * stride / g``, one to one since the slots' servers are distinct. Equal
        classes in slot order (:meth:`_classes`) say that it keeps every class, equal slot
        orders by (class, position) that it keeps the name order within a class."""
        ca = self._classes(a)
        if ca is None or ca != self._classes(b):
            return False
        return not names or self._order(a) == self._order(b)

    def key(
        self,
        s: int,
        group: str,
        keys: dict[tuple[int, str], tuple[Any, ...]],
        groups_of: Callable[[int], Sequence[tuple[str, ...]]],
    ) -> tuple[Any, ...] | None:
        """The ``SystemCosts.concurrent_key`` of stage ``s``'s ``group`` kind read off an
        earlier stage's (``keys``: the lowering's keys so far; ``groups_of(r)``: stage ``r``'s
        groups, the first the priced one), or ``None`` (ask the cost model).

        Why it is stage ``s``'s own key, bit for bit: the key is ``(algorithm, numbers key
        of the first group, sharing factor of the groups)``. Under :meth:`moved`'s map every
        member keeps its local id and its server's class, servers stay distinct and keep
        their order of first appearance in a group, and, where the earlier stage's sharing
        shape reads name orders (``names``: what
        :func:`~perfmodel.parallel.costs.factor_by_shape` says, which :meth:`moved` then
        checks), same-class servers their name order; those are all that the ring pattern
        (:meth:`GroupMemo._ring_pattern <perfmodel.comm.group_memo.GroupMemo._ring_pattern>`:
        the first part's local ids, the parts' servers' classes) and the name-free sharing
        shapes (:func:`~perfmodel.parallel.costs._nic_shape`,
        :func:`~perfmodel.parallel.costs._route_shape`: classes, server indices in order of
        first appearance, local ids, same-class name orders, mirrored routes by class and
        local ids) read. So stage ``s``'s first group has the earlier stage's ring pattern,
        whose numbers every group of the pattern has (the pattern memo's own argument), and
        its groups the earlier ones' sharing shape; a key is shared only where its numbers
        are a ring pattern (a group spanning servers) and its factor is the shape's
        (:func:`~perfmodel.parallel.costs.factor_by_shape`), so the value is the one the
        cost model keeps for that shape. Issue 27: the 7 later stages of a GPT-3 175B dp32
        tp4 pp8 plan read their data-parallel groups member by member (~60 us each)."""
        if not self.ON or self.topology is None:
            return None
        got = self._shared.get(group)
        if got is None:
            if group in self._shared:
                return None
            first = next((r for (r, k), v in keys.items() if k == group and v and r != s), None)
            if first is None:
                return None  # no earlier stage has a key yet
            sk = keys[(first, group)]
            numbers = sk[1]
            names = None
            ring = isinstance(numbers, tuple) and numbers[:1] == ("ring",)
            if ring and self._classes(first) is not None:  # every member on a server of a class
                gs = tuple(map(tuple, groups_of(first)))
                names = factor_by_shape(self.topology, gs, classed=True)
            got = self._shared[group] = None if names is None else (first, sk, names)
            if got is None:
                return None
        first, sk, names = got
        return sk if self.moved(first, s, names) else None

    def send_time(
        self,
        s_from: int,
        s_to: int,
        nbytes: float,
        price: Callable[[], float],
        by_shape: Callable[[], bool] | None,
    ) -> float:
        """Seconds of the pipeline sends of ``nbytes`` a rank from stage ``s_from`` to
        ``s_to``: read off the sends between two stages as far apart where ``s_from`` and
        ``s_to`` are those stages moved (:meth:`moved`, classes only), else ``price()`` (the
        cost model's ``transfers_time`` of the pairs), kept for later stages where
        ``by_shape()`` (:meth:`Transfers.by_shape <perfmodel.comm.transfers.Transfers.by_shape>`
        of the pairs; ``None``: never kept).

        Why it is the pairs' own time, bit for bit: the sends of stage ``r`` to ``r + d`` and of
        ``r + k`` to ``r + d + k`` pair the same ranks ``k`` strides on, so one map of whole
        servers (slot ``j`` onto slot ``j + k * stride / g``, one to one) takes every endpoint
        of the one onto the matching endpoint of the other, local id kept; where it keeps the
        class of each server of both stages, the pairs' name-free transfer shape
        (:meth:`Transfers._shape <perfmodel.comm.transfers.Transfers._shape>`: classes and
        server indices in order of first appearance, local ids, mirrored routes by class and
        local ids; no name order; ``None``, so never kept, where a pair stays inside one
        server) is the same, and where that shape is kept (``by_shape``) both times are the
        slowest send over the one shape's terms at the one size. Issue 27: a dp2 tp32 pp16
        plan priced 30 sets of 32 sends, ~20 us each, all of one shape."""
        if not self.ON or by_shape is None:
            return price()
        apart = s_to - s_from
        ref = self._sends.get((apart, nbytes))
        if ref is not None:
            r, t = ref
            if self.moved(r, s_from, False) and self.moved(r + apart, s_to, False):
                return t
            return price()
        t = price()
        if self._classes(s_from) is not None and self._classes(s_to) is not None and by_shape():
            self._sends[(apart, nbytes)] = (s_from, t)
        return t
