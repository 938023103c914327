"""Durations the lowering needs, behind one small interface.

:class:`SystemCosts` binds the compute model (``perfmodel.compute.ComputeModel``), the collective
model (``perfmodel.comm.CommCostModel``) and the topology's links. Tests can pass any object with
the same methods (a :class:`Costs`), so the plan/lowering/simulation logic is testable with
hand-computable numbers.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from functools import lru_cache
from itertools import chain, repeat
from typing import TYPE_CHECKING, Any, Protocol

from perfmodel._memo import BoundedMemo, keep
from perfmodel.comm.group_memo import BY_GROUP_NUMBERS
from perfmodel.comm.nodes import all_gpus, check_group
from perfmodel.dtypes import Precision
from perfmodel.errors import ConfigError, TopologyError
from perfmodel.ops import CollectiveOp
from perfmodel.parallel.hop_routes import templated_factor
from perfmodel.topology import NodeKind, Topology, effective_bandwidth, route
from perfmodel.topology.nic_tables import near_nic_sets, nics_per_server
from perfmodel.topology.routing import path_edges, path_latency, shorter_than_third_server
from perfmodel.topology.symmetry import ServerSymmetry, server_symmetry
from perfmodel.workload.layers import LayerCost, LayerKind

if TYPE_CHECKING:
    from perfmodel.compute.model import LayerTime
    from perfmodel.parallel.recipe import ComputeRecipe
    from perfmodel.workload.memory import Optimizer


class Costs(Protocol):
    """What the lowering asks for (all times in seconds)."""

    precision: Precision

    def layer_time(self, layer: LayerCost) -> tuple[float, float, float]:
        """``(fwd_s, bwd_input_s, bwd_weight_s)`` of one layer for one micro-batch."""

    def optimizer_time(self, params: float, optimizer: Optimizer) -> float: ...

    def layer_host_time(self, layer: LayerCost) -> tuple[float, float]:
        """``(forward, backward)`` host time to issue the layer's kernels (eager stacks); a
        cost model without a host model may omit this method (no host floor)."""

    def collective_time(
        self, op: CollectiveOp, message_bytes: float, group: Sequence[str], algorithm: str = "auto"
    ) -> float: ...

    def concurrent_time(
        self,
        op: CollectiveOp,
        message_bytes: float,
        groups: Sequence[Sequence[str]],
        algorithm: str = "auto",
    ) -> float:
        """Time of ``groups[0]``'s collective while all ``groups`` run it at once."""

    def transfers_time(self, pairs: Sequence[tuple[str, str]], nbytes_each: float) -> float:
        """Time until all concurrent point-to-point transfers of ``nbytes_each`` finish."""

    def host_reduce_time(self, nbytes_touched: float) -> float: ...

    def cpu_of(self, gpu: str) -> str: ...


_LAYER_MEMO_SIZE = 65_536
"""Layer objects whose times :class:`SystemCosts` keeps by identity, the oldest dropped first
(:func:`perfmodel._memo.keep`; ~8 a GPT-3 plan, 324 after 40 preset plans; each entry keeps its
layer alive, ~6 objects). The cost-key cache behind it is exact: a drop only costs time."""


#: Compute models and their layer-price caches shared by :class:`SystemCosts` instances:
#: ``(GPU spec, compute params, FP8 recipe, precision, model, prices)``, the oldest dropped
#: first beyond :data:`_SHARED_COMPUTE_SIZE` (issue 27: a sweep over cluster sizes built one
#: per topology and priced every layer again; GPU specs and parameters do not hash, so the
#: entries are found by identity or equality).
_SHARED_COMPUTE: list[tuple[Any, Any, Any, Precision, Any, dict[tuple[Any, ...], LayerTime]]] = []
_SHARED_COMPUTE_SIZE = 32

#: Layer prices each shared price table (:func:`_compute_tables`) keeps by cost key, the oldest
#: dropped first (:func:`perfmodel._memo.keep`): a price is the compute model's pure function of
#: the cost key, so a dropped one costs a recompute, never a different answer. A GPT-3 plan
#: prices tens of keys; a sweep of distinct batches added ~5 a scenario without end.
PRICES_SIZE = 65_536

#: Entries each of a :class:`SystemCosts`' communication memos keeps (collective times, their
#: latencies and algorithms by ``(op, bytes, group, algorithm)``; sharing factors by groups;
#: :meth:`SystemCosts.concurrent_keyed` values), the oldest dropped first
#: (:func:`perfmodel._memo.keep`): each value is a pure function of its key (the comm model's
#: answer), so a dropped one costs a recompute, never a different answer. A sweep of distinct
#: batches or models in one process adds message sizes without end.
COMM_MEMO_SIZE = 65_536


def _compute_tables(
    gpu: Any, params: Any, fp8: Any, precision: Precision
) -> tuple[Any, dict[tuple[Any, ...], LayerTime]]:
    """The :class:`~perfmodel.compute.ComputeModel` of ``gpu`` with ``params`` and ``fp8`` and
    its layer prices in ``precision`` (keyed by :meth:`LayerCost.cost_key`), shared by every
    caller with the same four: the model is a pure function of them (its own caches too), so a
    price computed for one topology is the price for another with the same GPU."""
    from perfmodel.compute import ComputeModel

    for g, p, f, pr, model, prices in _SHARED_COMPUTE:
        if g is gpu and f == fp8 and pr == precision and (p is params or p == params):
            return model, prices
    model = ComputeModel(gpu, params, fp8_recipe=fp8)
    prices: dict[tuple[Any, ...], LayerTime] = {}
    if len(_SHARED_COMPUTE) >= _SHARED_COMPUTE_SIZE:
        _SHARED_COMPUTE.pop(0)
    _SHARED_COMPUTE.append((gpu, params, fp8, precision, model, prices))
    return model, prices


class SystemCosts:
    """Costs on a real topology from the compute and communication models.

    Parameters
    ----------
    topology
        The system.
    precision
        Training precision.
    compute_params, link_params
        Calibrated parameters (``None``: datasheet defaults).
    fidelity
        Passed to ``CommCostModel`` (``"analytic"`` closed forms or ``"simulated"`` flow-level
        replay of each collective); an unknown value raises ``ConfigError``.
    recipe
        The compute part of the training recipe (:class:`~perfmodel.parallel.recipe.ComputeRecipe`):
        the gradient and working-copy bytes the optimizer step moves (``None``: the precision's
        defaults). Autocast casts are ``compute_params``' ``cast_weights_each_step``, set from it
        by :func:`perfmodel.api.system_costs`.
    """

    #: :meth:`layer_time` and :meth:`layer_host_time` depend on a layer's
    #: :meth:`~perfmodel.workload.layers.LayerCost.cost_key` only (they price its
    #: :meth:`~perfmodel.workload.layers.LayerCost.cost_source`): the lowering may sum the
    #: layers of identical blocks once (:func:`perfmodel.parallel.partition.block_runs`).
    prices_by_cost_key = True

    def __init__(
        self,
        topology: Topology,
        precision: Precision,
        *,
        compute_params: Any = None,
        link_params: Any = None,
        fidelity: str = "analytic",
        recipe: ComputeRecipe | None = None,
    ) -> None:
        from perfmodel.comm import CommCostModel

        self.topology = topology
        self.precision = precision
        self.recipe = recipe
        self.gpu_spec = topology.gpu_spec()
        # the compute model and its layer prices: shared with every SystemCosts of the same GPU,
        # parameters, FP8 recipe and precision (a sweep over cluster sizes prices each layer once)
        self.compute, self._layer_cache = _compute_tables(
            self.gpu_spec, compute_params, None if recipe is None else recipe.fp8, precision
        )
        self.fidelity = fidelity
        self.comm = CommCostModel(topology, link_params=link_params, fidelity=fidelity)
        self.link_params = link_params
        self._by_layer: dict[
            int, tuple[LayerCost, tuple[tuple[float, float, float], tuple[float, float]]]
        ] = {}
        #: ``(time_s, latency_s, algorithm)`` of the ``CommResult`` of each collective
        #: :meth:`collective_time` priced, by ``(op, bytes, group, algorithm)``
        self._collectives: dict[tuple[Any, ...], tuple[float, float, Any]] = {}
        #: :func:`ring_sharing_factor` per set of concurrent groups (:meth:`concurrent_time`)
        self._factors: dict[tuple[tuple[str, ...], ...], float] = {}
        #: :meth:`concurrent_time` values by ``(op, bytes, concurrent_key)`` (:meth:`concurrent_keyed`)
        self._by_concurrent_key: dict[tuple[Any, ...], float] = {}
        #: whether :meth:`concurrent_key` gives keys (``False``: every call priced as before;
        #: the tests compare both)
        self.share_concurrent = fidelity == "analytic"

    @property
    def price_table(self) -> dict[tuple[Any, ...], LayerTime]:
        """The layer prices this instance reads (:func:`_compute_tables`): two instances with
        the same table price every layer alike, whatever their topologies."""
        return self._layer_cache

    def _layer(self, layer: LayerCost) -> LayerTime:
        # keyed by LayerCost.cost_key (no name, no block index): identical blocks cost once
        key = layer.cost_key()
        hit = self._layer_cache.get(key)
        if hit is None:
            hit = keep(
                self._layer_cache, key, self.compute.layer_time(layer, self.precision), PRICES_SIZE
            )
        return hit

    def _layer_times(
        self, layer: LayerCost
    ) -> tuple[tuple[float, float, float], tuple[float, float]]:
        """:meth:`layer_time` and :meth:`layer_host_time` of ``layer``, memoised per layer
        object as well (a cached workload's layers are priced again by every plan that lowers
        it; the object, kept in the entry, cannot be replaced by another with its id). A
        relabelled copy of a block is priced as its template (:meth:`LayerCost.cost_source`,
        the same cost key), so the copies of a stack share one entry."""
        src = layer.cost_source()
        hit = self._by_layer.get(id(src))
        if hit is not None and hit[0] is src:
            return hit[1]  # the pair as kept (no new tuple a call)
        lt = self._layer(src)
        times = (float(lt.fwd_s), float(lt.bwd_input_s), float(lt.bwd_weight_s))
        host = (float(lt.host_fwd_s), float(lt.host_s - lt.host_fwd_s))
        return keep(self._by_layer, id(src), (src, (times, host)), _LAYER_MEMO_SIZE)[1]

    def layer_time(self, layer: LayerCost) -> tuple[float, float, float]:
        return self._layer_times(layer)[0]

    def layer_detail(self, layer: LayerCost) -> LayerTime:
        """The compute model's whole :class:`~perfmodel.compute.model.LayerTime` of ``layer``
        (cached by cost key, as :meth:`layer_time`): the per-class breakdown reads its casts."""
        return self._layer(layer.cost_source())

    def ring_step_ratio(self, layer: LayerCost) -> tuple[float, float]:
        """``(forward, backward)`` time of a ring context-parallel attention's causal step over
        one unmasked step's (:attr:`perfmodel.compute.attention.AttentionEfficiency.
        causal_over_rest`); ``(1, 1)`` for any other layer."""
        if layer.kind is not LayerKind.ATTENTION or layer.ring_steps <= 1 or layer.gemm is None:
            return (1.0, 1.0)
        return self.compute.attention(layer.cost_source()).causal_over_rest

    def layer_host_time(self, layer: LayerCost) -> tuple[float, float]:
        """``(LayerTime.host_fwd_s, host_s - host_fwd_s)``: kernels x
        ``ComputeParams.host_dispatch_s`` (0 in graph mode), forward and backward."""
        return self._layer_times(layer)[1]

    def optimizer_time(self, params: float, optimizer: Optimizer) -> float:
        if params <= 0:
            return 0.0
        rc = self.recipe
        if rc is None:
            return float(self.compute.optimizer_time(params, optimizer, self.precision))
        return float(
            self.compute.optimizer_time(
                params,
                optimizer,
                self.precision,
                grad_bytes=rc.grad_bytes,
                working_copy_bytes=rc.working_copy_bytes,
                impl=rc.optimizer_impl,
                clip=rc.grad_clip,
                state_bytes=rc.state_bytes,
                weight_bytes=rc.weight_bytes,
            )
        )

    def collective_time(
        self, op: CollectiveOp, message_bytes: float, group: Sequence[str], algorithm: str = "auto"
    ) -> float:
        if len(group) < 2 or message_bytes <= 0:
            return 0.0
        # memoised before CommCostModel's own cache, which validates the group on every call
        key = (op, message_bytes, tuple(group), algorithm)
        hit = self._collectives.get(key)
        if hit is None:
            result = self.comm.collective(op, message_bytes, key[2], algorithm=algorithm)
            hit = (float(result.time_s), float(result.latency_s), result.algorithm)
            keep(self._collectives, key, hit, COMM_MEMO_SIZE)
        return hit[0]

    def concurrent_time(
        self,
        op: CollectiveOp,
        message_bytes: float,
        groups: Sequence[Sequence[str]],
        algorithm: str = "auto",
    ) -> float:
        """``groups[0]``'s collective while all ``groups`` run it at once: links shared by the
        groups divide their bandwidth (:func:`ring_sharing_factor`), not the latency, so only
        the time above the collective's latency (``CommResult.latency_s``: launch and step
        latencies, and a broadcast chain's fill, which the concurrent chains are taken not to
        meet on a NIC at once) is stretched by the factor."""
        base = self.collective_time(op, message_bytes, groups[0], algorithm)
        if len(groups) < 2 or base == 0.0:
            return base
        gs = tuple(map(tuple, groups))
        # the factor reads the groups only (not the op or size): kept per groups, as the
        # collective is per (op, bytes, group) (issue 27: Megatron-Core's buckets asked the
        # same 17 sets of data-parallel siblings 168 times in a GPT-3 175B tp16 pp16 plan)
        factor = self._factors.get(gs)
        if factor is None:
            factor = keep(self._factors, gs, ring_sharing_factor(self.topology, gs), COMM_MEMO_SIZE)
        return self._stretched(op, message_bytes, gs[0], algorithm, base, factor)

    def _stretched(
        self,
        op: CollectiveOp,
        message_bytes: float,
        group: tuple[str, ...],
        algorithm: str,
        base: float,
        factor: float,
    ) -> float:
        """:meth:`concurrent_time` of a collective over ``group`` that :meth:`collective_time`
        priced at ``base`` (> 0), its links shared by the sharing ``factor``."""
        if factor == 1.0:
            return base
        # the latency of the result collective_time priced (the comm model's same answer)
        lat = self._collectives[(op, message_bytes, group, algorithm)][1]
        lat = min(max(lat, 0.0), base)
        return lat + (base - lat) * factor

    def concurrent_key(
        self, groups: Sequence[Sequence[str]], algorithm: str = "auto"
    ) -> tuple[Any, ...] | None:
        """A key under which :meth:`concurrent_keyed` shares :meth:`concurrent_time`'s values
        between sets of groups, or ``None`` (none known yet: ask again once the group is
        priced): ``(algorithm, numbers key of groups[0], sharing factor)``.

        The numbers key is the comm model's
        (:meth:`GroupMemo.numbers_key <perfmodel.comm.group_memo.GroupMemo.numbers_key>`, a
        group of two GPUs or more, analytic fidelity), the factor
        :func:`ring_sharing_factor`'s value for ``groups`` (``None`` for one group).

        Why the key decides the value where :meth:`concurrent_keyed` keeps it, bit for bit:
        :meth:`concurrent_time` reads of the groups the collective's ``CommResult`` over
        ``groups[0]`` (its ``time_s`` and ``latency_s``) and the factor (its value only).
        A value is kept only where that result's algorithm is in
        :data:`~perfmodel.comm.group_memo.BY_GROUP_NUMBERS`, and such results are shared by
        the comm model itself between every group of GPUs with one numbers key
        (:class:`~perfmodel.comm.group_memo.SharedResults`: what those algorithms cost is a
        function of the key, the same op, size and algorithm), so another set of groups with
        the same key would be priced from the same ``time_s`` and ``latency_s`` and the same
        factor, in the same float operations. Issue 27: every pipeline stage priced each of
        its data-parallel collectives on its own (translated) groups, 10-30 us a call.
        """
        if not self.share_concurrent or len(groups[0]) < 2:
            return None
        g0 = check_group(self.topology, groups[0])
        if not all_gpus(self.topology, g0):
            return None
        numbers = self.comm.groups.numbers_key(g0)
        if numbers is None:
            return None
        if len(groups) < 2:
            return (algorithm, numbers, None)
        gs = tuple(map(tuple, groups))
        factor = self._factors.get(gs)
        if factor is None:
            factor = keep(self._factors, gs, ring_sharing_factor(self.topology, gs), COMM_MEMO_SIZE)
        return (algorithm, numbers, factor)

    def concurrent_keyed(
        self,
        op: CollectiveOp,
        message_bytes: float,
        groups: Sequence[Sequence[str]],
        algorithm: str,
        key: tuple[Any, ...],
    ) -> float:
        """:meth:`concurrent_time` of ``groups``, read off another set of groups with the same
        :meth:`concurrent_key` ``key`` where one was priced (see there why it is the same
        value), else priced and kept where its result is shared by numbers."""
        k = (op, message_bytes, key)
        hit = self._by_concurrent_key.get(k)
        if hit is not None:
            return hit
        # concurrent_time's operations, with the factor the key holds (the groups' own)
        g0 = tuple(groups[0])
        value = self.collective_time(op, message_bytes, g0, algorithm)
        factor = key[2]
        if factor is not None and value != 0.0:
            value = self._stretched(op, message_bytes, g0, algorithm, value, factor)
        got = self._collectives.get((op, message_bytes, g0, algorithm))
        if got is not None and got[2] in BY_GROUP_NUMBERS:
            keep(self._by_concurrent_key, k, value, COMM_MEMO_SIZE)
        return value

    def transfers_time(self, pairs: Sequence[tuple[str, str]], nbytes_each: float) -> float:
        return self.comm.transfers_time(tuple(pairs), nbytes_each)  # NIC-aware sends (issue 12)

    def host_reduce_time(self, nbytes_touched: float) -> float:
        """Host-side reduction/update time: bytes touched over the host memory bandwidth the
        communication model uses for CPU-side averaging (``CommCostModel.host_memory_Bps``:
        calibrated override, the CPU catalogue, or its documented default)."""
        cpu = nearest_cpu(self.topology, self.topology.gpus[0])
        return nbytes_touched / float(self.comm.host_memory_Bps(cpu))

    def cpu_of(self, gpu: str) -> str:
        return nearest_cpu(self.topology, gpu)


@lru_cache(maxsize=4096)
def nearest_cpu(topology: Topology, gpu: str) -> str:
    """The CPU node of ``gpu``'s server closest to it (fewest hops, then name)."""
    server = topology.server_of(gpu)
    cpus = [
        n
        for n, d in topology.graph.nodes(data=True)
        if d["kind"] is NodeKind.CPU and int(d["server"]) == server
    ]
    if not cpus:
        raise ConfigError(
            f"system {topology.name} has no CPU node in server {server} (needed for host-side "
            "merging / parameter servers)",
            value=server,
            where=topology.name,
        )
    hops: dict[str, float] = {}
    for c in cpus:  # a rack-scale server's other CPUs have no route to this GPU (GB200 NVL72)
        try:
            hops[c] = len(route(topology, c, gpu))
        except TopologyError:
            continue
    if not hops:
        raise ConfigError(
            f"system {topology.name}: no CPU of server {server} reaches {gpu}",
            value=gpu,
            where=topology.name,
        )
    return min(hops, key=lambda c: (hops[c], c))


def transfers_time(
    topology: Topology, pairs: tuple[tuple[str, str], ...], nbytes_each: float
) -> float:
    """Completion time of concurrent equal-size transfers sharing directed links.

    ``T = max_path_latency + max_e (flows_e * nbytes / bw_e)``: each directed edge ``e`` of
    effective bandwidth ``bw_e`` carries ``flows_e`` of the transfers (equal shares, the max-min
    fair allocation when the bottleneck is shared by equal flows).

    Raises
    ------
    TopologyError
        If a pair has no route.
    """
    if not pairs or nbytes_each <= 0:
        return 0.0
    load: Counter[tuple[str, str]] = Counter()
    lat = 0.0
    for s, d in pairs:
        if s == d:
            continue
        p = route(topology, s, d)
        lat = max(lat, path_latency(topology, s, d))
        load.update(path_edges(p))
    if not load:
        return 0.0
    g = topology.graph
    worst = max(n * nbytes_each / effective_bandwidth(g, u, v) for (u, v), n in load.items())
    return lat + worst


@lru_cache(maxsize=4096)
def ring_sharing_factor(topology: Topology, groups: tuple[tuple[str, ...], ...]) -> float:
    """How much slower ``groups[0]``'s ring collective runs when all ``groups`` run at once.

    Each group is taken as a ring in rank order; every hop's route loads directed links.
    Factor = (bottleneck share of group 0 alone) / (its bottleneck share with everyone):
    ``min_e bw_e / n0_e`` over ``min_e bw_e / nall_e`` on group 0's links. 1.0 when the groups
    use disjoint links (e.g. rail-optimised NICs).

    Memoised per shape (issue 14): the factor of ``groups`` is the factor of their image in the
    first servers of their servers' classes (:func:`_canonical_groups`), computed once for
    every pipeline stage and plan with that shape; see :func:`_canonical_groups` for why the
    image has the same answer, bit for bit. The server-level path (more than 64 ranks) is
    memoised by :func:`_nic_shape`. Groups with no image (servers in no class) and shapes
    whose ring routes might pass a third server (:func:`_routes_map_onto`) are analysed
    directly. Factors of the ring path are also kept by a name-free shape
    (:func:`_route_shape`), which merges images that do not keep the servers' name order.
    A new such shape whose every ring hop joins two servers is counted on the groups
    themselves, one route per hop kind
    (:func:`~perfmodel.parallel.hop_routes.templated_factor`: the groups' own factor, bit for
    bit, where every hop is under the third-server bound, as the shape memo asks).
    """
    if _uses_nic_sets(topology, groups):
        shape = _nic_shape(topology, groups)
        if shape is None:
            return _ring_sharing_factor(topology, groups)
        return _NIC_FACTORS.get(
            (topology, shape), lambda: _nic_sharing_factor(topology, _nic_counted(shape, groups))
        )
    named = _route_shape(topology, groups)
    if named is not None:
        hit = _ROUTE_FACTORS.entries.get((topology, named))
        if hit is not None:
            return hit
        # a new shape: the groups' own factor off one route per hop kind (issue 27), kept by
        # shape as the canonical image's below (every hop under the third-server bound)
        templated = templated_factor(topology, groups)
        if templated is not None:
            return _ROUTE_FACTORS.get((topology, named), lambda: templated)
    canon = _canonical_groups(topology, groups)
    if canon is not None and _routes_map_onto(topology, canon):
        factor = _ring_sharing_factor(topology, canon)
        if named is not None:
            _ROUTE_FACTORS.get((topology, named), lambda: factor)
        return factor
    return _ring_sharing_factor(topology, groups)


def factor_by_shape(
    topology: Topology, groups: tuple[tuple[str, ...], ...], classed: bool = False
) -> bool | None:
    """Whether :func:`ring_sharing_factor` of ``groups`` is its name-free shape's value, the
    one every set of groups of that shape has, and whether that shape reads the name order of
    servers of one class: ``False`` for one group (no factor), the server-level path with a
    shape (:func:`_nic_shape`, memoised by it, which reads no name) and the ring path whose
    shape leaves the name orders out (every same-class hop mirrored); ``True`` for the ring path
    whose shape holds them; in both ring cases only where the shape's factor is kept
    (:func:`_route_shape`, in :data:`_ROUTE_FACTORS`: read off a shape whose routes map onto
    one another, or counted per hop kind). ``None`` where the groups were counted on their own
    routes (a server in no class, or routes that may pass a third server). ``classed``: the
    caller knows every member to be a GPU of a server in a class, so that the server-level
    shape exists (:func:`_nic_shape` is ``None`` only for a name in no server or a server in
    no class) and is not read again (~80 us for 512 ranks)."""
    if len(groups) < 2:
        return False
    if _uses_nic_sets(topology, groups):
        return False if classed or _nic_shape(topology, groups) is not None else None
    named = _route_shape(topology, groups)
    if named is None or (topology, named) not in _ROUTE_FACTORS.entries:
        return None
    return named[-1] is not None


#: Ring-path sharing factors by name-free shape (:func:`_route_shape`).
_ROUTE_FACTORS: BoundedMemo[tuple[Any, ...], float] = BoundedMemo(4096)


def _route_shape(topology: Topology, groups: tuple[tuple[str, ...], ...]) -> tuple[Any, ...] | None:
    """What the ring path of :func:`ring_sharing_factor` reads of ``groups``, without a name:
    :func:`_nic_shape`'s classes, server indices (in order of first appearance) and local ids
    (as the group sizes and the members' indices and local ids in member order,
    :func:`_flat_shape`), and for every ring hop between two servers of one class whether the
    hop's first server sorts before its second in name order (``None`` in their place where
    every such hop's route is mirrored, :func:`_order_free`); ``None`` where a server is in no
    class.

    Why groups of one shape have one factor, bit for bit, where their canonical routes are
    shorter than any path through a third server (:func:`_routes_map_onto`, a property of the
    shape: hop counts and fabric distances go by class and local id): exchanging the servers
    of one class is a graph automorphism keeping every attribute; let ``s`` map the ``k``-th
    server of one set of groups to the ``k``-th of the other (same classes), nodes by local id,
    fabric nodes fixed. Under the bound a hop's route is read off the first servers of its
    servers' classes (:func:`perfmodel.topology.routing._route_by_symmetry`): for one class,
    the first two in the hop's own name order, which the shape keeps; for two classes, the
    first of each; in one server, that server's search among its nodes and the fabric, whose
    name order is every server's of the class. So every hop's route in the one set is the
    ``s``-image of the matching hop's route in the other, links map one to one (``s`` is
    injective) with the same effective bandwidths, and :func:`_ring_sharing_factor`'s integer
    loads and its minima of the same ratios are equal. Issue 14: the 16 sibling
    data-parallel groups of a dp4 tp16 pp16 stage of GPT-3 175B on 128 DGX A100 were strided
    by 32 servers (the order ``tp,pp,dp``, perfmodel's default before session 15), and name order (``n104`` before ``n40``) split the 16 stages into as many
    order-preserving images (:func:`_canonical_groups`).

    Where every hop between two servers of one class is mirrored
    (:meth:`~perfmodel.topology.symmetry.ServerSymmetry.mirrored` of :func:`route`: the
    route from the class's second server to its first is the exchanged image of the route
    from the first to the second, so both have one hop count and the bound holds in either
    order), the hop's route is the image of the first-to-second route under the map taking
    those two servers to the hop's own, whichever name sorts first, so the name orders are
    left out and ``s`` may be any map of the ``k``-th server to the ``k``-th (issue 27: the
    four sets of sibling data-parallel groups of a dp4 tp16 pp16 plan whose server names
    sort differently were four shapes).
    """
    sym = server_symmetry(topology)
    got = _flat_shape(sym, groups)
    if got is None:
        return None
    srv, classes, sizes, indices, lids = got
    free = _ORDER_FREE.get(
        (topology, classes, sizes, indices, lids),
        lambda: _order_free(topology, sym, _nested(srv, sizes), _nested(lids, sizes)),
    )
    if free:
        return (classes, sizes, indices, lids, None)
    # the hops' name orders, once per distinct server sequence (tensor-parallel siblings on
    # the same servers share one; the indices say which groups have which)
    cls, position = sym.cls, sym.position
    before = []
    for sv in dict.fromkeys(map(tuple, _nested(srv, sizes))):
        if len(sv) < 2:
            continue
        for a, b in zip(sv, (*sv[1:], sv[0])):
            if a != b and cls[a] == cls[b]:
                before.append(position[a] < position[b])
    return (classes, sizes, indices, lids, tuple(before))


def _flat_shape(
    sym: ServerSymmetry, groups: tuple[tuple[str, ...], ...]
) -> tuple[list[int], tuple[Any, ...], tuple[int, ...], tuple[int, ...], tuple[str, ...]] | None:
    """:func:`_route_shape`'s reads of ``groups`` over all members at once, in member order
    (the groups concatenated): each member's server, the classes of the servers in order of
    first appearance, the group sizes, each member's server as its index in that order and
    its local id; ``None`` where a name is in no server's table or a server in no class.

    The sizes and the concatenated indices and local ids say exactly what the per-group reads
    said (each group's servers and local ids, then the classes and server indices; kept as
    the tests' reference, ``tests/parallel/per_group_reads.py``), cut at the sizes, read in a
    few C loops over every member instead of two per group (issue 27: 32 groups of 2 GPUs
    cost ~25 us a pipeline stage group by group, ~9 us at once)."""
    reads = _flat_reads(sym, groups)
    if reads is None:
        return None
    srv, lids = reads
    indexed = _flat_indices(sym, srv)
    if indexed is None:
        return None
    return srv, indexed[0], tuple(map(len, groups)), indexed[1], lids


def _flat_reads(
    sym: ServerSymmetry, groups: tuple[tuple[str, ...], ...]
) -> tuple[list[int], tuple[str, ...]] | None:
    """Every member's server and local id in member order (:func:`_flat_shape`), or ``None``
    where a name is in no server's table."""
    server, local_id = sym.server, sym.local_id
    names = tuple(chain.from_iterable(groups))
    try:
        return list(map(server.__getitem__, names)), tuple(map(local_id.__getitem__, names))
    except KeyError:  # a name in no server's table
        return None


def _flat_indices(
    sym: ServerSymmetry, srv: list[int]
) -> tuple[tuple[Any, ...], tuple[int, ...]] | None:
    """The classes of the servers ``srv`` in order of first appearance and each entry's
    server as its index in that order (:func:`_flat_shape`), or ``None`` where a server is in
    no class."""
    order = dict.fromkeys(srv)
    classes = tuple(map(sym.cls.get, order))
    if None in classes:
        return None
    rank = {s: i for i, s in enumerate(order)}
    return classes, tuple(map(rank.__getitem__, srv))


def _nested(flat: Sequence[Any], sizes: tuple[int, ...]) -> list[Any]:
    """``flat`` cut into consecutive pieces of ``sizes`` (:func:`_flat_shape`'s groups)."""
    out = []
    i = 0
    for n in sizes:
        out.append(flat[i : i + n])
        i += n
    return out


#: :func:`_order_free` by shape without the name orders (:func:`_route_shape`).
_ORDER_FREE: BoundedMemo[tuple[Any, ...], bool] = BoundedMemo(4096)


def _order_free(
    topology: Topology,
    sym: ServerSymmetry,
    srvs: Sequence[Sequence[int]],
    lids: Sequence[Sequence[str]],
) -> bool:
    """Whether every ring hop between two servers of one class (servers ``srvs``, local ids
    ``lids`` of each group's members) has a mirrored route (:func:`_mirrored`), so that
    :func:`_route_shape` need not say which server of a hop sorts first."""
    cls = sym.cls
    for sv, ids in zip(srvs, lids, strict=True):
        n = len(sv)
        if n < 2:
            continue
        for i, a in enumerate(sv):
            j = (i + 1) % n
            b = sv[j]
            if a != b and cls[a] == cls[b] and not _mirrored(topology, cls[a], ids[i], ids[j]):
                return False
    return True


@lru_cache(maxsize=4096)
def _mirrored(topology: Topology, c: int, src_lid: str, dst_lid: str) -> bool:
    """Whether the :func:`~perfmodel.topology.route` between local ids ``src_lid`` and
    ``dst_lid`` of two servers of class ``c`` is mirrored
    (:meth:`~perfmodel.topology.symmetry.ServerSymmetry.mirrored`)."""
    return server_symmetry(topology).mirrored(
        c, src_lid, dst_lid, lambda a, b: route(topology, a, b)
    )


#: Server-level sharing factors by shape (:func:`_nic_shape`): a plan search meets a few per
#: data-parallel degree and tensor-parallel rank.
_NIC_FACTORS: BoundedMemo[tuple[Any, ...], float] = BoundedMemo(4096)


def _nic_shape(topology: Topology, groups: tuple[tuple[str, ...], ...]) -> tuple[Any, ...] | None:
    """What :func:`_nic_sharing_factor` reads of ``groups``, without a name: the classes of
    interchangeable servers (:attr:`~perfmodel.topology.symmetry.ServerSymmetry.cls`) of the
    groups' servers in order of first appearance, each member's server as its index in that
    order, and each member's local id (the group sizes and the members' indices and local ids
    in member order, read in one pass by :func:`_flat_reads` and :func:`_flat_indices`, as
    :func:`_flat_shape` reads them; issue 27); ``None`` where a server is in no class (or a
    name is in no server).

    :func:`_nic_sharing_factor` compares servers for equality only and reads per local id
    the first server's nearest NIC sets and per server its NIC count (equal in a class: the
    same :func:`~perfmodel.topology.symmetry.server_signature`), so groups of one shape have
    one factor, bit for bit: the same integer flow counts per (server index, NIC set), the
    same ratios, the same maximum. Issue 14: the data-parallel groups of every pipeline stage
    and of every plan with that degree and tensor-parallel rank are one shape, read in C
    loops (a name-mapped canonical form cost ~0.15 ms per stage for 8 groups of 64).
    Parallel rings (every group ``k`` GPUs on each of the same two or more servers of one
    class, in the same order, the same local ids on each) are ``("parallel", class, each
    group's local ids on a server)`` (:func:`_parallel_blocks`): each server then sends the
    same flows whatever the number of servers, so the factor of every data-parallel degree of
    those local ids is one.
    """
    sym = server_symmetry(topology)
    reads = _flat_reads(sym, groups)
    if reads is None:
        return None
    srv, lids = reads
    sizes = tuple(map(len, groups))
    n = sizes[0]
    first = srv[:n]
    if n >= 2 and sizes == (n,) * len(sizes) and srv == first * len(sizes):
        blocks = _parallel_blocks(sym, first, lids, len(sizes))
        if blocks is not None:
            return blocks
    indexed = _flat_indices(sym, srv)
    return None if indexed is None else (indexed[0], sizes, indexed[1], lids)


def _parallel_blocks(
    sym: ServerSymmetry, first: list[int], lids: tuple[str, ...], count: int
) -> tuple[Any, ...] | None:
    """``("parallel", class, each group's local ids on a server)`` where the ``count``
    groups (equal sizes, every one on the servers ``first`` in that order: :func:`_nic_shape`
    checked) are parallel rings of ``k >= 1`` GPUs a server: each group holds ``k``
    consecutive members on each of the same two or more distinct servers of one class, with
    the same local ids in the same order on every server; else ``None``.

    Why one factor per key, whatever the number of servers (:func:`_nic_counted` cuts to two):
    every server then holds of every group the members of the same local ids in the same
    order, so :func:`_nic_sharing_factor`'s per-server tables are the same on each server (the
    local ids, their NIC union built in one insertion order, the load per NIC summed over the
    groups in one order, the class's NIC count): each server's ratio is the same float (with
    ``k = 1``, each server sends one flow per group from its local id's NICs). Issue 27: the
    data-parallel groups of a
    tp4 plan hold GPUs 0 and 4 (1 and 5, ...) of each server; dp64 then dp32 counted every
    member of 4 x 64 and 4 x 32 (0.18-0.39 ms a plan on the 2-core development machine)."""
    n = len(first)
    k = next((i for i in range(1, n) if first[i] != first[0]), n)
    if n % k or n // k < 2:
        return None
    servers = first[::k]
    if first != list(chain.from_iterable(repeat(s, k) for s in servers)):
        return None
    c = sym.cls.get(servers[0])
    # one class (a fat tree's leaves are classes of their own): the cut reads two servers'
    # tables, the same only within a class
    if c is None or len(set(servers)) < len(servers) or any(sym.cls.get(s) != c for s in servers):
        return None
    ids = tuple(lids[g * n : g * n + k] for g in range(count))
    if lids != tuple(chain.from_iterable(b * (n // k) for b in ids)):
        return None
    return ("parallel", c, ids)


def _nic_counted(
    shape: tuple[Any, ...], groups: tuple[tuple[str, ...], ...]
) -> tuple[tuple[str, ...], ...]:
    """The groups :func:`_nic_sharing_factor` counts for ``groups`` of server-level shape
    ``shape`` (:func:`_nic_shape`): parallel rings of ``k`` GPUs a server cut to their first
    ``2 k`` members (two servers; :func:`_parallel_blocks`), other shapes whole.

    Why the cut groups have the factor of the whole ones, bit for bit: parallel rings put one
    GPU of every group on each of the same servers (two or more, distinct, of one class), so
    :func:`_nic_sharing_factor`'s per-server tables are the same on every server: the members'
    local ids there (one per group), their NIC union (one insertion order), the load on each
    (server, NIC) summed over the groups in the same order, the NIC count (a class's servers
    are built alike). Each server's ratio is then the same float, and the worst over two
    servers is the worst over all. Issue 27: the first data-parallel shape of a plan counted
    every member (4 x 64 GPUs: ~0.3 ms; 8 x 64: ~0.5 ms) where two servers give the answer
    (~0.02 ms).
    """
    if shape[0] == "parallel":  # k GPUs a server (_parallel_blocks): the first two servers
        return tuple(g[: 2 * len(shape[2][0])] for g in groups)
    return groups


def _canonical_groups(
    topology: Topology, groups: tuple[tuple[str, ...], ...]
) -> tuple[tuple[str, ...], ...] | None:
    """The shape of ``groups``: every node mapped into the first servers of its server's class,
    each ring rotated to start at its smallest name and the sibling rings (``groups[1:]``)
    sorted; ``None`` where a node is in no class of interchangeable servers (a lone or unlike
    server, a fabric node, a name not in the system).

    The server map is :meth:`perfmodel.topology.symmetry.ServerSymmetry.server_map` of all the
    groups' servers at once (the ``k``-th of them in a class, in name order, onto the class's
    ``k``-th server; nodes by local id): a graph automorphism that keeps every node and edge
    attribute and the name order of the mapped servers' and the fabric's nodes. (The
    server-level path, which reads no route, has its own name-free shape: :func:`_nic_shape`.)
    Why the sharing factor of the shape is that of ``groups``, bit for bit:

    - The ring path counts ring hops (``grp[i] -> grp[i + 1 mod n]``) per link, integer
      counts that neither a ring's rotation nor the siblings' order change, and takes
      ``min`` of ratios of the same numbers, which do not depend on order.
    - The ring path (:func:`_ring_sharing_factor`) reads the links of the ring hops' routes
      and their effective bandwidths. The automorphism keeps the bandwidths, and it maps each
      hop's route onto the image hop's route where no minimum-hop path between them can pass
      a third server (:func:`_routes_map_onto`): between two servers the route is then read
      off the same pair in the first two servers of the class either way
      (:func:`perfmodel.topology.routing._route_by_symmetry`; the order-preserving map keeps
      which of the pair sorts first); in one server every candidate path lies in the server
      and the fabric, whose name order and attributes the map keeps, so the search (minimum
      hops, widest, lowest latency, smallest names) makes the same choices. The per-link
      load counts then map one to one.
    """
    sym = server_symmetry(topology)
    server = sym.server
    smap = sym.server_map({server.get(n, -1) for g in groups for n in g})
    if smap is None:
        return None
    if all(k == v for k, v in smap.items()):
        mapped = groups
    else:
        mapped = tuple(sym.map_nodes(g, smap) for g in groups)
    rings = [_rotated(g) for g in mapped]
    return (rings[0], *sorted(rings[1:]))


def _rotated(ring: tuple[str, ...]) -> tuple[str, ...]:
    """``ring`` rotated to start at its smallest name (the same hops)."""
    if not ring:
        return ring
    i = ring.index(min(ring))
    return ring[i:] + ring[:i]


@lru_cache(maxsize=4096)
def _routes_map_onto(topology: Topology, canon: tuple[tuple[str, ...], ...]) -> bool:
    """Whether every ring hop ``a -> b`` of the canonical groups ``canon`` is routed shorter
    than any path through a third server can be
    (:func:`~perfmodel.topology.routing.shorter_than_third_server`). Hop counts and fabric
    distances are the same for every image of a hop, so the answer holds for every set of
    groups with this shape (:func:`_canonical_groups`)."""
    for grp in canon:
        if len(grp) < 2:
            continue
        for i, a in enumerate(grp):
            b = grp[(i + 1) % len(grp)]
            if not shorter_than_third_server(topology, a, b, len(route(topology, a, b)) - 1):
                return False
    return True


def _uses_nic_sets(topology: Topology, groups: tuple[tuple[str, ...], ...]) -> bool:
    """Whether :func:`ring_sharing_factor` takes the server-level :func:`_nic_sharing_factor`
    (a cluster and more than 64 ranks in all)."""
    return topology.num_nodes > 1 and sum(len(g) for g in groups) > 64


@lru_cache(maxsize=4096)
def _ring_sharing_factor(topology: Topology, groups: tuple[tuple[str, ...], ...]) -> float:
    """:func:`ring_sharing_factor` of exactly these groups (no shape memo)."""

    def loads(gs: tuple[tuple[str, ...], ...]) -> Counter[tuple[str, str]]:
        c: Counter[tuple[str, str]] = Counter()
        for grp in gs:
            if len(grp) < 2:
                continue
            for i, a in enumerate(grp):
                b = grp[(i + 1) % len(grp)]
                c.update(path_edges(route(topology, a, b)))
        return c

    if _uses_nic_sets(topology, groups):
        return _nic_sharing_factor(topology, groups)
    main = loads(groups[:1])
    if not main:
        return 1.0
    every = loads(groups)
    g = topology.graph
    alone = min(effective_bandwidth(g, u, v) / n for (u, v), n in main.items())
    shared = min(effective_bandwidth(g, u, v) / every[(u, v)] for (u, v) in main)
    return max(1.0, alone / shared)


def _nic_sharing_factor(topology: Topology, groups: tuple[tuple[str, ...], ...]) -> float:
    """Server-level version of :func:`ring_sharing_factor` for large clusters (no ring routing).

    A group's ring leaves a server through the NICs nearest its members there: NCCL spreads a
    ring's channels over the GPUs and NICs of the server, so a group with ``k`` members on a
    server sends through the union ``U`` of their nearest NIC sets (e.g. the two HDR NICs
    behind a DGX A100 PCIe switch), at most ``k`` GPU uplinks of goodput ``b_gpu`` at once.
    Alone, group 0 moves ``min(k b_gpu, sum of U's NIC goodputs)`` out of the server; beside
    the other groups, each NIC ``n`` of ``U`` is shared in proportion: every group loads its
    NICs evenly (``1 / |U_g|`` of its traffic on each), so group 0 keeps
    ``(1 / |U_0|) / load_n`` of NIC ``n``. The factor is the worst server's ratio.

    GPT-3 175B data parallelism on 128 DGX A100 (8 groups of 16, one GPU per server each, two
    GPUs per NIC pair): a lone ring is held by the GPU's PCIe 4 link (25.8 GB/s), together each
    GPU gets one HDR NIC (23 GB/s): x1.12, as the flow simulation finds (0.446 vs 0.397 s).
    Two tensor-parallel siblings of 4 GPUs per server over the same 4 NICs: x2, as the ring
    routes of a small cluster give. 1.0 with one NIC per GPU and no sharing.
    """
    near = near_nic_sets(topology)
    sym = server_symmetry(topology)  # node -> server and local id tables (as the graph's)
    server, local_id = sym.server, sym.local_id
    exit_set = {lid: v[0] for lid, v in near.items()}  # a GPU's nearest NICs, by local id
    nic_count = nics_per_server(topology)
    b_gpu_of = {lid: v[1] for lid, v in near.items()}
    b_nic_of = {n: v[2] for v in near.values() for n in v[0]}

    def exits(grp: tuple[str, ...]) -> dict[int, tuple[list[str], set[str]]]:
        """Per server the group leaves: its members' local ids there and their NIC union."""
        out: dict[int, tuple[list[str], set[str]]] = {}
        if len(grp) < 2:
            return out
        srv = list(map(server.__getitem__, grp))
        if len(set(srv)) < 2:
            return out
        for sa, lid in zip(srv, map(local_id.__getitem__, grp)):
            lids, nics = out.setdefault(sa, ([], set()))
            lids.append(lid)
            nics.update(exit_set.get(lid, ()))
        return out

    main = exits(groups[0])
    if not main:
        return 1.0
    load: dict[tuple[int, str], float] = {}  # (server, NIC local id) -> groups' share
    bare: dict[int, float] = {}  # servers without NIC information: flows per server
    for grp in groups:
        for srv, (_lids, nics) in exits(grp).items():
            if nics:
                for n in nics:
                    load[(srv, n)] = load.get((srv, n), 0.0) + 1.0 / len(nics)
            else:
                bare[srv] = bare.get(srv, 0.0) + 1.0
    worst = 1.0
    for srv, (lids, nics) in main.items():
        if nics:
            uplinks = sum(b_gpu_of.get(lid, math.inf) for lid in dict.fromkeys(lids))
            alone = min(uplinks, sum(b_nic_of[n] for n in nics))
            share = 1.0 / len(nics)
            shared = min(uplinks, sum(b_nic_of[n] * share / load[(srv, n)] for n in nics))
        else:  # no NIC information: one NIC per flow at most, as many as the server has
            k = max(nic_count.get(srv, 1), 1)
            alone, shared = min(1.0, k), min(1.0, k / bare[srv])
        worst = max(worst, alone / shared)
    return worst
