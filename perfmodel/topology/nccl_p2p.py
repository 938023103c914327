"""NCCL's peer-to-peer rule: which GPU pairs of a server NCCL lets talk peer-to-peer, by NCCL
release and host CPU family (``NCCL_P2P_LEVEL``'s default, ``src/graph/paths.cc``), applied to
a system as the pairs it refuses (``p2p_denied``: their traffic goes through host memory).

Every system loaded gets the rule of :data:`DEFAULT_NCCL_RELEASE` unless a release is stated
(``--nccl``); the importers apply it to the machines they read.
"""

from __future__ import annotations

import enum
import functools
import itertools
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import networkx as nx

from perfmodel._memo import BoundedMemo
from perfmodel.errors import ConfigError
from perfmodel.hardware.links import LinkFamily
from perfmodel.topology.model import Topology
from perfmodel.topology.schema import NodeKind


class HostCpu(str, enum.Enum):
    """The CPU family NCCL's P2P rule distinguishes (``ncclTopoCpuType``, ``src/graph/topo.cc``)."""

    INTEL = "intel"
    INTEL_BROADWELL = "intel-broadwell"
    AMD = "amd"
    ARM = "arm"
    POWER = "power"
    ZHAOXIN = "zhaoxin"
    UNKNOWN = "unknown"

    @classmethod
    def from_text(cls, text: str) -> HostCpu:
        """The family a CPU model names (:func:`_host_from_text`, memoised per text)."""
        return _host_from_text(str(text))

    @classmethod
    def _from_text(cls, text: str) -> HostCpu:
        """The family a CPU model names: a catalogue CPU (``perfmodel hw cpus``: vendor and
        architecture) or free text (``Intel Xeon E5-2650 v3``, ``GenuineIntel 85``); a Xeon
        E5 v4 is Broadwell with or without a space before ``v4`` (``E5-2698v4``).

        >>> HostCpu._from_text("xeon-e5-2698-v4").value, HostCpu._from_text("AMD EPYC 7763").value
        ('intel-broadwell', 'amd')
        """
        from perfmodel.errors import PerfModelError
        from perfmodel.hardware.cpus import get_cpu

        try:
            spec = get_cpu(text)
            low = f"{spec.vendor} {spec.architecture}".lower()
        except PerfModelError:
            low = text.lower()
        if "intel" in low or "xeon" in low:
            broadwell = "broadwell" in low or re.search(r"e5-\d{4}\w*?[\s_-]?v4\b", low)
            return cls.INTEL_BROADWELL if broadwell else cls.INTEL
        for words, host in (
            (("amd", "epyc"), cls.AMD),
            (("ibm", "power"), cls.POWER),
            (("arm", "aarch64", "grace", "neoverse", "graviton"), cls.ARM),
            (("zhaoxin", "centaurhauls", "shanghai"), cls.ZHAOXIN),
        ):
            if any(w in low for w in words):
                return host
        return cls.UNKNOWN

    @classmethod
    def of(cls, topo: Topology) -> HostCpu:
        """The family of the first server's CPUs (their first stated ``model``)."""
        g = topo.graph
        first = topo.server_of(topo.gpus[0]) if topo.gpus else 0
        for n in sorted(n for n in topo.server_nodes(first) if g.nodes[n]["kind"] is NodeKind.CPU):
            model = g.nodes[n].get("model")
            if model:
                return cls.from_text(str(model))
        return cls.UNKNOWN


@functools.lru_cache(maxsize=64)
def _host_from_text(text: str) -> HostCpu:
    """:meth:`HostCpu._from_text`, once per text: the CPU catalogue is the shipped file, read
    once per process, so a text names one family (issue 14: each of a ``predict``'s three
    topology builds asked for the same CPU model)."""
    return HostCpu._from_text(text)


class P2pLevel(str, enum.Enum):
    """NCCL's P2P level (``NCCL_P2P_LEVEL``): the farthest PCIe path type P2P may take.

    The graph knows CPUs, not host bridges, so the level counts the CPUs a P2P path may cross:
    ``PXB`` none (PCIe switches only), ``PHB`` one (one CPU's root complex; NCCL 2.4-2.5's
    ``PATH_NODE`` limit, one NUMA node, reads the same), ``SYS`` any (across sockets).
    """

    PXB = "PXB"
    PHB = "PHB"
    SYS = "SYS"

    @property
    def max_cpus(self) -> int | None:
        return {"PXB": 0, "PHB": 1, "SYS": None}[self.value]


@dataclass(frozen=True, order=True)
class NcclRelease:
    """An NCCL release, ``major.minor`` (the P2P rule changes only between minor releases)."""

    major: int
    minor: int

    @classmethod
    def parse(cls, text: str, *, where: str = "--nccl") -> NcclRelease:
        """``"2.27"``, ``"2.27.5"`` or ``"2.27.5-1"`` (a release tag).

        >>> NcclRelease.parse("2.18.3-1")
        NcclRelease(major=2, minor=18)
        """
        m = re.fullmatch(r"\s*v?(\d+)\.(\d+)(?:\.\d+)?(?:-\d+)?\s*", str(text))
        if m is None or int(m.group(1)) != 2:
            raise ConfigError(
                f"{where}: NCCL release {text!r} not understood; expected 2.MINOR[.PATCH] "
                "(e.g. 2.27 or 2.18.3)",
                value=text,
                where=where,
            )
        return cls(int(m.group(1)), int(m.group(2)))

    def __str__(self) -> str:
        return f"{self.major}.{self.minor}"


DEFAULT_NCCL_RELEASE = NcclRelease(2, 27)
"""The NCCL release whose P2P rule applies unless one is stated (``--nccl``): the 2.27 series
whose tuner the recent algorithms follow (:mod:`perfmodel.comm.nccl_recent`)."""

NVB_FROM = NcclRelease(2, 8)
"""First release that joins two GPUs over NVLink through a third GPU (``PATH_NVB``, NVIDIA/nccl
v2.8.3-1 ``src/graph/paths.cc``; release note "Optimized all-to-all performance on DGX-1"): the
P2P note names it where such pairs are denied (:func:`nccl_p2p_rule_note`)."""


def nccl_p2p_level(release: NcclRelease, host: HostCpu, gpus: int) -> P2pLevel | None:
    """NCCL's default P2P level for a host CPU family and ``gpus`` GPUs per server, by release;
    ``None`` where the CPU family decides and is unknown.

    - 2.0-2.5, ``p2pCanConnect`` (``src/transport/p2p.cc``): "Do not use P2P across root
      complexes by default" (``PATH_SOC`` in 2.0-2.3, ``PATH_NODE`` in 2.4-2.5): ``PHB``.
    - 2.6-2.7, ``ncclTopoCheckP2p`` (``src/graph/paths.cc``, 2018-2020 file): ``SYS`` by
      default; ARM ``PXB``; Intel Broadwell ``PXB``, other Intel ``PHB``.
    - 2.8-2.22: ARM, Intel (every model) and Zhaoxin (2.8.4, NVIDIA/nccl#435) ``PXB``; AMD
      and POWER ``SYS``.
    - 2.23 and later: ``PXB`` for every CPU, except ``SYS`` on AMD x86 with at most 2 GPUs
      (2.23 commit: "Set P2P level to PXB on AMD CPUs when using more than 2 GPUs per node";
      paths.cc of 2.27/2.28).

    NCCL counts the GPUs of the communicator on the host; the model takes the server's.

    >>> nccl_p2p_level(NcclRelease(2, 27), HostCpu.AMD, 2).value
    'SYS'
    >>> nccl_p2p_level(NcclRelease(2, 27), HostCpu.AMD, 8).value
    'PXB'
    """
    if release < NcclRelease(2, 6):
        return P2pLevel.PHB
    if host is HostCpu.UNKNOWN and (release < NcclRelease(2, 23) or gpus <= 2):
        return None
    if release < NcclRelease(2, 8):
        if host in (HostCpu.ARM, HostCpu.INTEL_BROADWELL):
            return P2pLevel.PXB
        return P2pLevel.PHB if host is HostCpu.INTEL else P2pLevel.SYS
    if release < NcclRelease(2, 23):
        if host in (HostCpu.AMD, HostCpu.POWER):
            return P2pLevel.SYS
        return P2pLevel.PXB
    return P2pLevel.SYS if host is HostCpu.AMD and gpus <= 2 else P2pLevel.PXB


def nccl_p2p_level_denied(topo: Topology, *, max_cpus: int | None) -> list[tuple[str, str]]:
    """GPU pairs (local ids, first server) whose PCIe path crosses more than ``max_cpus`` CPUs
    (:attr:`P2pLevel.max_cpus`; ``None``: no limit).

    Never denied: pairs whose route has no PCIe link (NVLink, NVSwitch, or POWER9's NVLink to
    the CPU: paths.cc keeps such paths ``PATH_NVL``). Routes are searched inside the first
    server only.

    NVB forwarding is not modelled: from NCCL 2.8 (``PATH_NVB``; 2.8.3: "Optimized all-to-all
    performance on DGX-1") two GPUs joined by NVLink through one intermediate GPU keep P2P
    over those two NVLinks, but the router never passes through a GPU (:mod:`routing`), so
    such a pair would travel the PCIe route across both CPUs, a path NCCL never uses. Those
    pairs stay denied (host memory), as NCCL 2.7 and earlier have them, in every release.
    """
    if max_cpus is None or not topo.gpus:
        return []
    first = topo.server_of(topo.gpus[0])
    g = topo.graph
    local = g.subgraph(topo.server_nodes(first))
    key = (max_cpus, _subgraph_key(local))  # an unhashable attribute value: computed, not kept
    return list(_DENIED.get(key, lambda: tuple(_denied_pairs(topo, local, max_cpus))))


#: :func:`nccl_p2p_level_denied` by (``max_cpus``, :func:`_subgraph_key` of the first server):
#: a ``predict`` builds the run's cluster and its k-GPU speedup baseline's from the same server
#: (issue 14: its 28 GPU pairs were routed for each; a one-server build names its nodes without
#: the ``n0/`` prefix, a key of its own).
_DENIED: BoundedMemo[tuple[int, tuple[Any, ...]], tuple[tuple[str, str], ...]] = BoundedMemo(64)


def _subgraph_key(local: nx.Graph) -> tuple[Any, ...]:
    """Everything :func:`_denied_pairs` reads of a server's graph, in graph order: node ids with
    their attributes, links with theirs (hashing it raises ``TypeError`` where a value is not
    hashable). Two servers with equal keys are the same graph, routed alike (the router's
    tie-breaks follow node and edge order, both kept). ~0.2 ms for a DGX A100 server against
    ~0.5 ms to route its 28 GPU pairs."""
    return (
        tuple((n, tuple(a.items())) for n, a in local.nodes(data=True)),
        tuple((u, v, tuple(a.items())) for u, v, a in local.edges(data=True)),
    )


def _denied_pairs(topo: Topology, local: nx.Graph, max_cpus: int) -> list[tuple[str, str]]:
    """:func:`nccl_p2p_level_denied` computed: routes inside the server ``local``."""
    from perfmodel.topology.routing import uncached_routes

    g = topo.graph
    one = Topology(topo.name, nx.Graph(local), source=topo.source)
    gpus = list(one.gpus)
    pairs = [(a, b) for i, a in enumerate(gpus) for b in gpus[i + 1 :]]
    out = []
    # `one` is thrown away: keep it out of the caches
    for (a, b), path in zip(pairs, uncached_routes(one, pairs), strict=True):
        if not any(g.edges[u, v]["family"] is LinkFamily.PCIE for u, v in itertools.pairwise(path)):
            continue
        if sum(g.nodes[x]["kind"] is NodeKind.CPU for x in path[1:-1]) > max_cpus:
            out.append((str(g.nodes[a]["local_id"]), str(g.nodes[b]["local_id"])))
    return out


def with_nccl_p2p_rule(
    topo: Topology, release: NcclRelease | None = None, host: HostCpu | None = None
) -> Topology:
    """The system with NCCL ``release``'s P2P rule (:func:`nccl_p2p_level`) applied: GPU pairs
    beyond the level are refused peer-to-peer (``p2p_denied``) and go through host memory.

    ``release`` defaults to the one applied before (``meta["nccl_p2p_rule"]``), else
    :data:`DEFAULT_NCCL_RELEASE`.

    ``host`` defaults to the CPU family of the first server's CPU ``model``. GPUs whose file
    states ``p2p`` (``[system] p2p = true``, ``--p2p on``) keep what it states, as with
    ``NCCL_P2P_LEVEL``. A rule applied before is replaced, not added to (pairs denied by
    other sources, such as ``nvidia-smi topo -p2p r``, stay). The rule, its level and its
    pairs are recorded in ``meta["nccl_p2p_rule"]``.
    """
    import dataclasses

    previous = topo.meta.get("nccl_p2p_rule")
    # a release named here is the scenario's (``--nccl``); none keeps what was stated before
    stated = release is not None or (isinstance(previous, dict) and bool(previous.get("stated")))
    if release is None:
        had_release = previous.get("release") if isinstance(previous, dict) else None
        release = NcclRelease.parse(had_release) if had_release else DEFAULT_NCCL_RELEASE
    stale = previous.get("pairs", ()) if isinstance(previous, dict) else ()
    g = topo.graph.copy() if stale else topo.graph  # copied only to strip the previous rule
    if stale:
        for a, b in stale:
            for n in topo.gpus:
                mine, other = str(g.nodes[n]["local_id"]), {a: b, b: a}
                if mine in other and other[mine] in g.nodes[n].get("p2p_denied", ()):
                    left = tuple(x for x in g.nodes[n]["p2p_denied"] if x != other[mine])
                    if left:
                        g.nodes[n]["p2p_denied"] = left
                    else:
                        del g.nodes[n]["p2p_denied"]
    # the stale pairs are stripped alike in every server (by local id)
    base = dataclasses.replace(topo._on_own_copy(g) if stale else topo, meta=dict(topo.meta))
    if host is None:
        host = HostCpu.of(base)
        if host is HostCpu.UNKNOWN and isinstance(previous, dict):
            host = HostCpu(previous["host"])  # e.g. an imported XML's CPU identification
    level = nccl_p2p_level(release, host, base.gpus_per_node if base.gpus else 0)
    pairs: list[tuple[str, str]] = []
    if level is not None:
        probe = base.gpus  # by local id; where servers are copies, server 0 says it for all
        if base.pattern is not None and base.pattern.describes(base):
            probe = probe[: base.gpus_per_node]
        fixed = {str(g.nodes[n]["local_id"]) for n in probe if "p2p" in g.nodes[n]}
        had = {
            (str(g.nodes[n]["local_id"]), x)
            for n in probe
            for x in g.nodes[n].get("p2p_denied", ())
        }
        pairs = [
            (a, b)
            for a, b in nccl_p2p_level_denied(base, max_cpus=level.max_cpus)
            if a not in fixed and b not in fixed and (a, b) not in had
        ]
    out = base.with_p2p_denied(pairs) if pairs else base
    out.meta["nccl_p2p_rule"] = {
        "release": str(release),
        "host": host.value,
        "level": level.value if level else None,
        "pairs": tuple(pairs),
        "stated": stated,
    }
    return out


def nccl_p2p_rule_note(topo: Topology, group: Iterable[str]) -> str | None:
    """One line naming the GPU pairs of ``group`` that NCCL's P2P rule sends through host
    memory, and the rule (release, level, host), or ``None`` when it sends none."""
    rule = topo.meta.get("nccl_p2p_rule")
    if not isinstance(rule, dict) or not rule.get("pairs"):
        return None
    g = topo.graph
    p = topo.pattern
    if p is not None and p.describes(topo):
        # servers are copies of server 0 (read by local id there, none other made): GPU
        # pairs, their NVLinks and P2P flags are server 0's
        from perfmodel.topology.lazy import server_of_name

        first = p.prefix(0)
        lid_set = frozenset(p.local_ids)
        named = {
            n[n.index("/") + 1 :]
            for n in group
            if server_of_name(n, p.servers, lid_set) is not None
        }
        group = [first + lid for lid in p.local_ids if lid in named]
        inside = set(topo.server_nodes(0))
        edges = [(u, v, d) for u, v, d in g.edges(inside, data=True) if u in inside and v in inside]
        gpus = topo.gpus[: topo.gpus_per_node]
    else:
        edges, gpus = list(g.edges(data=True)), topo.gpus
    ids = {
        str(g.nodes[n]["local_id"])
        for n in group
        if n in g and g.nodes[n]["kind"] is NodeKind.GPU and topo.p2p_capable(n)
    }
    pairs = [f"{a}-{b}" for a, b in rule["pairs"] if a in ids and b in ids]
    if not pairs:
        return None
    shown = ", ".join(pairs[:6]) + (f" ... ({len(pairs)} pairs)" if len(pairs) > 6 else "")
    release = NcclRelease.parse(rule["release"])
    where = (
        "src/transport/p2p.cc p2pCanConnect"
        if release < NcclRelease(2, 6)
        else "src/graph/paths.cc ncclTopoCheckP2p"
    )
    nvlinked = {
        frozenset((str(g.nodes[u]["local_id"]), str(g.nodes[v]["local_id"])))
        for u, v, d in edges
        if d["family"] in (LinkFamily.NVLINK, LinkFamily.NVSWITCH)
        and g.nodes[u]["kind"] is NodeKind.GPU
        and g.nodes[v]["kind"] is NodeKind.GPU
    }
    nvb = release >= NVB_FROM and any(
        frozenset((a, k)) in nvlinked and frozenset((k, b)) in nvlinked
        for a, b in rule["pairs"]
        if a in ids and b in ids
        for k in {str(g.nodes[n]["local_id"]) for n in gpus} - {a, b}
    )
    return (
        f"note: NCCL {rule['release']}'s P2P level {rule['level']} on this host "
        f"({_HOST_NAMES[rule['host']]} CPU; {where}): GPU pairs {shown} go through host memory "
        "in every server ("
        + (
            "the release --nccl states, for the collective tuner too"
            if rule.get("stated")
            else "no --nccl: the P2P rule's default release; the collective tuner is the GPU "
            "generation's (predict --explain names it); --nccl RELEASE states one release for both"
        )
        + "; comm --p2p on allows P2P between all GPUs)"
        + (
            f"; NCCL >= {NVB_FROM} joins some of them over NVLink through a third GPU (PATH_NVB), "
            "NVB forwarding not modelled"
            if nvb
            else ""
        )
    )


_HOST_NAMES = {
    "intel": "Intel",
    "intel-broadwell": "Intel Broadwell",
    "amd": "AMD",
    "arm": "ARM",
    "power": "POWER",
    "zhaoxin": "Zhaoxin",
    "unknown": "unstated",
}
