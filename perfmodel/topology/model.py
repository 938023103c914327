"""The :class:`Topology` value: a validated graph plus what the cluster builder knows about it."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import networkx as nx

from perfmodel.errors import ConfigError
from perfmodel.hardware.cpus import CPUSpec
from perfmodel.hardware.gpus import GPUSpec, get_gpu
from perfmodel.ops import CollectiveOp
from perfmodel.topology.lazy import server_node
from perfmodel.topology.schema import NodeKind, check_given_graph, own_graph


@dataclass(frozen=True)
class FabricSpec:
    """How the servers of a cluster are connected.

    Attributes
    ----------
    network
        Link technology of the NIC ports and switch ports (``ib-hdr``, ``eth-40g``...).
    topology
        ``single-switch``, ``fat-tree`` (two-level leaf/spine) or ``rail`` (rail-optimised:
        NIC k of every server on leaf k).
    nics_per_node
        NICs (ports) per server used for the fabric.
    oversubscription
        Leaf downlink to uplink bandwidth ratio of a fat tree (1.0 = non-blocking, 2.0 = 2:1).
    leaf_radix
        Server-facing ports per leaf switch (fat tree), e.g. 20 of a 40-port HDR switch at 1:1.
    sharp
        The switches reduce in the network (InfiniBand SHARP, NCCL's CollNet with the SHARP
        plugin); ``False`` unless the system file or the caller says so.
    """

    network: str
    topology: str = "fat-tree"
    nics_per_node: int = 1
    oversubscription: float = 1.0
    leaf_radix: int = 32
    sharp: bool = False

    def described(self) -> dict[str, Any]:
        """The fabric as a user names it (``--network``, ``--fabric-topology``,
        ``--nics-per-node``, ``--oversubscription``): the fields ``predict``'s hardware line
        states and a topology export leads with.

        >>> FabricSpec("ib-ndr", nics_per_node=8).described()
        {'network': 'ib-ndr', 'topology': 'fat-tree', 'nics_per_node': 8, 'oversubscription': 1.0}
        """
        return {
            "network": self.network,
            "topology": self.topology,
            "nics_per_node": self.nics_per_node,
            "oversubscription": self.oversubscription,
        }


@dataclass(frozen=True)
class CloudSpec:
    """A cloud instance type a system file describes (``[system.cloud]``): what it is, how its
    GPUs reach the network, and a dated list price the user may override.

    Attributes
    ----------
    provider, instance
        ``aws``/``gcp``/``azure`` and the provider's instance or machine type name.
    gpus_per_instance
        GPUs one instance (VM) holds; a system may hold several instances (an NVL72 rack rented
        as VMs of 4 GPUs is one system of 18 instances).
    transport
        The network transport NCCL uses there (EFA, GPUDirect-TCPX/TCPXO, RoCE, InfiniBand);
        its achieved efficiency is the NIC link technology's (``perfmodel hw show``).
    price_per_gpu_hour, price_currency, price_date, price_source, region
        An on-demand (or stated) list price of one GPU-hour, the date of the source it was read
        from (ISO ``YYYY-MM-DD``), that source, and the region; ``None``/empty where no dated
        price was found. ``--price-per-gpu-hour`` overrides it.
    price_stale, price_high_by
        Whether the source is known to be out of date (a price change after its date, stated in
        ``price_source``), and the most the price may exceed today's as a factor (``None``:
        not known); :meth:`price_label` states both on every cost line.
    """

    provider: str
    instance: str
    gpus_per_instance: int
    transport: str
    price_per_gpu_hour: float | None = None
    price_currency: str = ""
    price_date: str = ""
    price_source: str = ""
    region: str = ""
    price_stale: bool = False
    price_high_by: float | None = None

    def price_label(self) -> str:
        """What a cost at this list price is at: ``"aws p5.48xlarge list price, USD (price
        dated 2023-07-27, may be up to 1.8x high)"`` for a stale price with a known factor,
        ``"(price dated ..., may be out of date by an unknown amount)"`` without one, else
        ``"(source dated ...)"``."""
        head = f"{self.provider} {self.instance} list price, {self.price_currency}"
        if not self.price_stale:
            return f"{head} (source dated {self.price_date})"
        how = (
            f"may be up to {self.price_high_by:.1f}x high"
            if self.price_high_by is not None
            else "may be out of date by an unknown amount"
        )
        return f"{head} (price dated {self.price_date}, {how})"

    def describe(self) -> str:
        """One line: instance, transport and price with its date (or that none is shipped)."""
        head = f"cloud: {self.provider} {self.instance} ({self.gpus_per_instance} GPUs each), network {self.transport}"
        if self.price_per_gpu_hour is None:
            return head + "; no dated list price shipped (give --price-per-gpu-hour)"
        return (
            f"{head}; list price {self.price_per_gpu_hour:g} {self.price_currency} per GPU-hour "
            f"({self.region}, source dated {self.price_date}: {self.price_source}); "
            "override with --price-per-gpu-hour"
        )


@dataclass(frozen=True)
class ReferenceMeasurement:
    """A published collective measurement on a catalogue system (``[[system.reference]]``):
    what ``perfmodel comm`` states its prediction against. A reference, never an input.

    Attributes
    ----------
    op
        The collective (:class:`perfmodel.ops.CollectiveOp`).
    gpus, nodes
        Ranks and servers (``--gpus``, ``--nodes``) of the measurement.
    message_bytes
        nccl-tests size (bytes).
    busbw_Bps
        Measured bus bandwidth (nccl-tests convention), bytes/s.
    source
        Where to check it (repository, pull request or log, date).
    nccl_env
        NCCL environment variables the source states for the run, as ``(name, value)`` pairs
        (``NCCL_NVLS_ENABLE = "0"``): what the measured run's NCCL could choose
        (:class:`perfmodel.comm.nccl_env.NcclEnv` parses them), so ``perfmodel comm`` prices
        the call under them before comparing (like with like).
    """

    op: CollectiveOp
    gpus: int
    nodes: int
    message_bytes: int
    busbw_Bps: float
    source: str
    nccl_env: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, eq=False)
class ReplicaPattern:
    """How :func:`~perfmodel.topology.cluster.build_cluster` made a cluster: servers
    ``0 .. servers-1`` are copies of server 0 and the fabric switches join their NICs.

    Recorded at build time so that questions about the cluster's symmetry
    (:func:`perfmodel.topology.symmetry.server_symmetry`) are answered from how it was built
    instead of by comparing every server's nodes and links (issue 14: 2,048 server signatures
    of a 16,384-GPU cluster, 0.7 s CPU).

    Valid only for the graph it names (:meth:`describes`): a Topology whose graph was replaced
    drops back to the full comparison unless the change is the same in every server
    (:meth:`Topology.with_p2p`, :meth:`Topology.with_p2p_denied` carry the pattern over).

    Attributes
    ----------
    graph
        The graph the pattern describes (compared by identity).
    servers
        Number of servers; server ``s`` has node ids ``n<s>/<local id>``.
    local_ids
        Server 0's local ids in graph node order (every server has them, in this order).
    fabric_nodes
        The fabric's nodes (server ``-1``) in graph node order, after every server's nodes.
    attach
        Per server, its links to the fabric as sorted ``(local id, fabric node, link count)``;
        links of one count have the same attributes (one catalogue link per bundle size).
        Servers wired alike share one tuple (on rails: every server).
    """

    graph: nx.Graph
    servers: int
    local_ids: tuple[str, ...]
    fabric_nodes: tuple[str, ...]
    attach: tuple[tuple[tuple[str, str, int], ...], ...]

    @staticmethod
    def prefix(server: int) -> str:
        """Node-id prefix of server ``server`` (``n<server>/``; the one naming rule is
        :func:`~perfmodel.topology.lazy.server_node`)."""
        return server_node(server, "")

    def describes(self, topology: Topology) -> bool:
        """Whether this pattern is the one of ``topology``'s graph."""
        return topology.graph is self.graph


@dataclass(frozen=True, eq=False)
class Topology:
    """A hardware system as a validated networkx graph (see :mod:`perfmodel.topology.schema`).

    Treat ``graph`` as read-only: the functions of :mod:`perfmodel.topology` cache per Topology
    object. Build a new Topology to change the hardware.
    """

    name: str
    graph: nx.Graph
    num_nodes: int = 1
    description: str = ""
    source: str = "<memory>"
    fabric: FabricSpec | None = None
    sources: tuple[str, ...] = ()
    meta: dict[str, object] = field(default_factory=dict)
    device_specs: Mapping[str, GPUSpec] = field(default_factory=dict)
    """Specs of compute devices outside the GPU catalogue, by model name (a device described by
    a calibration profile, e.g. a CPU); :meth:`gpu_spec` consults them before the catalogue."""
    pattern: ReplicaPattern | None = None
    """How the cluster builder made the graph (servers copied from server 0), or ``None``."""
    cloud: CloudSpec | None = None
    """The cloud instance type the system file describes (``[system.cloud]``), or ``None``."""
    references: tuple[ReferenceMeasurement, ...] = ()
    """Published collective measurements on this system (``[[system.reference]]``)."""

    def __post_init__(self) -> None:
        """Check a graph given by hand against the schema
        (:func:`~perfmodel.topology.schema.check_given_graph`): a bad graph raises
        :class:`~perfmodel.errors.TopologyError` naming its nodes here, where it enters, not a
        ``KeyError`` in routing. A graph given by hand is checked every time (it may have been
        edited since an earlier topology was made of it). Graphs perfmodel made and checked
        (the loaders', the ``with_*`` copies: :func:`~perfmodel.topology.schema.own_graph`),
        and a cluster's graph its build record describes (server 0 and the fabric checked, the
        other servers copies of server 0: :func:`~perfmodel.topology.cluster.build_cluster`),
        are not checked again."""
        if self.pattern is not None and self.pattern.describes(self):
            return
        where = self.source if self.source != "<memory>" else f"topology {self.name!r}"
        check_given_graph(self.graph, source=where, device_models=tuple(self.device_specs))

    def _pattern_on(self, graph: nx.Graph) -> ReplicaPattern | None:
        """The build pattern carried over to ``graph``, a copy of this topology's graph changed
        alike in every server (same change for the same local id), or ``None``."""
        import dataclasses

        if self.pattern is None or not self.pattern.describes(self):
            return None
        return dataclasses.replace(self.pattern, graph=graph)

    def _on_own_copy(self, graph: nx.Graph) -> Topology:
        """This topology on ``graph``, a copy of its graph that perfmodel changed (the build
        record carried over where it still describes it); the copy, checked as the topology is
        made, is recorded as perfmodel's own (:func:`~perfmodel.topology.schema.own_graph`), so
        replacing other fields later does not check it again."""
        import dataclasses

        out = dataclasses.replace(self, graph=graph, pattern=self._pattern_on(graph))
        own_graph(graph)
        return out

    def _changed_gpus(self, change: Callable[[str, dict[str, Any]], None]) -> Topology:
        """This topology with ``change(local id, attributes)`` applied to every GPU's node
        attributes in a copy of the graph (the build record carried over where it described
        the graph: the change is the same for the same local id)."""
        g = self.graph.copy()
        for n in self.gpus:
            change(str(g.nodes[n]["local_id"]), g.nodes[n])
        return self._on_own_copy(g)

    def _changed_alike(self, change: Callable[[str, dict[str, Any]], None]) -> Topology | None:
        """This topology with every server's node attributes changed alike (``change(local
        id, attributes)``), its servers made when first read (:func:`perfmodel.topology.lazy.
        changed_copy`), or ``None`` where the graph is not a lazily built cluster's (the
        caller then changes a ``graph.copy()``)."""
        from perfmodel.topology.lazy import changed_copy

        if self.pattern is None or not self.pattern.describes(self):
            return None
        g = changed_copy(self.graph, change)
        if g is None:
            return None
        return self._on_own_copy(g)

    @cached_property
    def gpus(self) -> tuple[str, ...]:
        """GPU node ids in global rank order (server, then local GPU index)."""
        p = self.pattern
        if p is not None and p.describes(self):  # server 0's order, in every copy
            first = p.prefix(0)
            nodes = self.graph.nodes
            local = sorted(
                (nodes[first + lid]["gpu_index"], i, lid)
                for i, lid in enumerate(p.local_ids)
                if nodes[first + lid]["kind"] is NodeKind.GPU
            )
            lids = [lid for _, _, lid in local]
            return tuple([pre + lid for pre in map(p.prefix, range(p.servers)) for lid in lids])
        keyed = [
            ((d["server"], d["gpu_index"]), i, n)
            for i, (n, d) in enumerate(self.graph.nodes(data=True))
            if d["kind"] is NodeKind.GPU
        ]  # the node order breaks ties, as a stable sort on (server, gpu_index) would
        return tuple(n for _, _, n in sorted(keyed))

    @property
    def num_gpus(self) -> int:
        return len(self.gpus)

    @cached_property
    def gpus_per_node(self) -> int:
        """GPUs in each server (the largest count if servers differ)."""
        p = self.pattern
        if p is not None and p.describes(self):  # every server is a copy of server 0
            return len(self.gpus) // p.servers
        return max(self.servers_used(len(self.gpus)).values())  # its node-by-node count

    def servers_used(self, num_gpus: int) -> dict[int, int]:
        """GPUs of each server among the first ``num_gpus`` of :attr:`gpus` (rank order: they
        fill one server before the next), by server index in first-use order. Read off the
        build pattern where there is one (every server holds :attr:`gpus_per_node` GPUs,
        consecutive in rank order, server ``s`` the ``s``-th run), instead of reading every
        GPU's node, which a lazily built cluster makes on first read (issue 27: ``predict``'s
        hardware line made all 16,384 GPU nodes of a 2,048-server cluster, 0.13 s CPU)."""
        gpus = self.gpus[: max(num_gpus, 0)]
        p = self.pattern
        if p is not None and p.describes(self):
            full, part = divmod(len(gpus), self.gpus_per_node)
            out = dict.fromkeys(range(full), self.gpus_per_node)
            if part:
                out[full] = part
            return out
        counts: dict[int, int] = {}
        for g in gpus:
            s = self.server_of(g)
            counts[s] = counts.get(s, 0) + 1
        return counts

    def server_nodes(self, server: int) -> list[str]:
        """Nodes of server ``server`` in graph order (read off the build pattern where there
        is one, instead of a pass over every node)."""
        p = self.pattern
        if p is not None and p.describes(self) and 0 <= server < p.servers:
            prefix = p.prefix(server)
            return [prefix + lid for lid in p.local_ids]
        return [n for n, s in self.graph.nodes(data="server") if s == server]

    def server_of(self, node: str) -> int:
        """Server index of a node (``-1`` for fabric switches)."""
        return int(self.graph.nodes[node]["server"])

    def gpu_spec(self, gpu: str | None = None) -> GPUSpec:
        """GPU model of ``gpu`` (default: the first GPU; systems are usually homogeneous)."""
        node = self.gpus[0] if gpu is None else gpu
        data = self.graph._node.get(node)  # networkx's node dict (every GPU of a cluster asks)
        if data is None or data["kind"] is not NodeKind.GPU:
            raise ConfigError(
                f"{node!r} is not a GPU of system {self.name}", value=node, where=self.name
            )
        model = data["model"]
        spec = self._spec_of_model.get(model)
        if spec is None:
            spec = self._spec_of_model[model] = (
                self.device_specs[model] if model in self.device_specs else get_gpu(model)
            )
        return spec

    @cached_property
    def _spec_of_model(self) -> dict[str, GPUSpec]:
        """Specs looked up so far, by model name: one catalogue lookup per model, not per GPU
        (every GPU of a 16,384-GPU cluster asks)."""
        return {}

    def cpu_spec(self, cpu: str | None = None) -> CPUSpec | None:
        """Catalogue spec of CPU node ``cpu`` (default: the first CPU), or ``None`` when the
        file names a model the CPU catalogue lacks (free text such as "Intel Xeon E5-2698 v3")
        or no model at all. Catalogue systems use catalogue names where one exists."""
        from perfmodel.errors import UnknownHardwareError
        from perfmodel.hardware.cpus import get_cpu

        cpus = self.nodes_of_kind(NodeKind.CPU)
        node = (sorted(cpus)[0] if cpus else None) if cpu is None else cpu
        if (
            node is None
            or node not in self.graph
            or self.graph.nodes[node]["kind"] is not NodeKind.CPU
        ):
            raise ConfigError(
                f"{node!r} is not a CPU of system {self.name}", value=node, where=self.name
            )
        model = self.graph.nodes[node].get("model")
        if not model:
            return None
        try:
            return get_cpu(str(model))
        except UnknownHardwareError:
            return None

    def p2p_capable(self, gpu: str) -> bool:
        """Whether GPU ``gpu`` may use PCIe peer-to-peer: its node's ``p2p`` attribute, else its
        model's ``pcie_p2p`` (see :mod:`perfmodel.topology.schema`)."""
        flag = self.graph._node[gpu].get("p2p")
        if flag is not None:
            return bool(flag)
        return self.gpu_spec(gpu).pcie_p2p

    def with_p2p(self, enabled: bool) -> Topology:
        """The same system with PCIe peer-to-peer forced on or off for every GPU (``--p2p``)."""

        def change(lid: str, attrs: dict[str, Any]) -> None:
            if attrs["kind"] is NodeKind.GPU:
                attrs["p2p"] = bool(enabled)

        lazy = self._changed_alike(change)
        return lazy if lazy is not None else self._changed_gpus(change)

    def with_p2p_denied(self, pairs: Iterable[tuple[str, str]]) -> Topology:
        """The same system with peer-to-peer refused between GPU pairs given by local id
        (``("gpu0", "gpu4")``), in every server: what ``nvidia-smi topo -p2p r`` reports as
        not OK, or NCCL's P2P level rule (see :mod:`perfmodel.topology.schema`, ``p2p_denied``)."""

        denied: dict[str, set[str]] = {}
        for a, b in pairs:
            denied.setdefault(str(a), set()).add(str(b))
            denied.setdefault(str(b), set()).add(str(a))

        def change(lid: str, attrs: dict[str, Any]) -> None:
            extra = denied.get(str(attrs["local_id"]))
            if attrs["kind"] is NodeKind.GPU and extra:
                old = set(attrs.get("p2p_denied", ()))
                attrs["p2p_denied"] = tuple(sorted(old | extra))

        lazy = self._changed_alike(change)
        return lazy if lazy is not None else self._changed_gpus(change)

    def with_sharp(self, enabled: bool) -> Topology:
        """The same system with in-network reduction (InfiniBand SHARP) on or off its fabric."""
        import dataclasses

        if self.fabric is None:
            raise ConfigError(
                f"system {self.name} has no fabric to mark SHARP-capable",
                value=self.name,
                where="sharp",
            )
        return dataclasses.replace(
            self, fabric=dataclasses.replace(self.fabric, sharp=bool(enabled))
        )

    def gpu(self, rank: int) -> str:
        """Node id of the GPU with global rank ``rank``."""
        if not 0 <= rank < self.num_gpus:
            raise ConfigError(
                f"GPU rank {rank} not in system {self.name} ({self.num_gpus} GPUs)",
                value=rank,
                where=self.name,
            )
        return self.gpus[rank]

    def nodes_of_kind(self, kind: NodeKind) -> list[str]:
        return [n for n, d in self.graph.nodes(data=True) if d["kind"] is kind]

    def __repr__(self) -> str:
        return f"Topology({self.name!r}, nodes={self.num_nodes}, gpus={self.num_gpus})"
