"""Hypothetical hardware from parts: ``--system custom --gpu ... --intra-node ... --network ...``.

One server is built from a GPU model, a GPU count and an intra-node interconnect, then replicated
over ``nodes`` servers on a fabric by :func:`perfmodel.topology.cluster.build_cluster`.

Server layout (documented assumptions)
--------------------------------------
Host side (every variant)
    One CPU socket for up to 4 GPUs, two sockets above that (GPUs split as evenly as possible,
    the first socket taking the extra one). On each socket, GPUs sit in pairs behind PCIe switches
    (one switch per two GPUs, an x16 uplink to the CPU); a single GPU on a socket attaches to a
    CPU root port directly. NICs (``nics_per_node``) attach to CPU root ports, round-robin over
    the sockets. The two sockets are joined by the CPU interconnect of the PCIe generation's era:
    PCIe 3 - 2x UPI 10.4 GT/s, PCIe 4 - 3x UPI 11.2 GT/s, PCIe 5 - 4x UPI 16 GT/s.
``pcie3|pcie4|pcie5``
    Only the PCIe tree above, with x16 links of that generation.
``nvlink1..nvlink5``
    The PCIe tree (generation: the GPU's ``pcie_gen``, default 3) plus a direct NVLink mesh: each
    of the ``P = gpus_per_node - 1`` peers gets ``nvlink_links // P`` links (the GPU's links split
    evenly; remainder links unused). More peers than links is an error: such a box needs a switch.
``nvswitch-v1..v4``
    The PCIe tree plus one NVSwitch node (an aggregate of the baseboard's switch chips); each GPU
    connects with all its ``nvlink_links`` ports.

The NVLink generation must match the GPU's (``nvlink_gen`` in the GPU catalogue), and NVSwitch
``vN`` pairs with NVLink ``N + 1`` (v1: NVLink 2 / V100, v2: NVLink 3 / A100, v3: NVLink 4 /
H100, v4: NVLink 5 / B200).
"""

from __future__ import annotations

import math

from perfmodel._enum import ParsedEnum
from perfmodel.errors import ConfigError
from perfmodel.hardware.gpus import GPUSpec, get_gpu
from perfmodel.hardware.links import get_link
from perfmodel.topology.cluster import build_cluster
from perfmodel.topology.io import FABRIC_TOPOLOGIES, LinkSpec, NodeSpec, ServerDescription
from perfmodel.topology.io import link_from_tech as _link
from perfmodel.topology.model import FabricSpec, Topology
from perfmodel.topology.schema import NodeKind


class IntraNode(
    str, ParsedEnum, where="--intra-node", template="--intra-node {text!r} is not {expected}"
):
    """Intra-node interconnect choices of ``--intra-node``."""

    PCIE3 = "pcie3"
    PCIE4 = "pcie4"
    PCIE5 = "pcie5"
    NVLINK1 = "nvlink1"
    NVLINK2 = "nvlink2"
    NVLINK3 = "nvlink3"
    NVLINK4 = "nvlink4"
    NVLINK5 = "nvlink5"
    NVSWITCH_V1 = "nvswitch-v1"
    NVSWITCH_V2 = "nvswitch-v2"
    NVSWITCH_V3 = "nvswitch-v3"
    NVSWITCH_V4 = "nvswitch-v4"

    @property
    def family(self) -> str:
        """``pcie``, ``nvlink`` or ``nvswitch``."""
        return self.value.rstrip("0123456789").rstrip("-v").replace("-", "")

    @property
    def generation(self) -> int:
        """PCIe generation, NVLink generation, or NVSwitch generation."""
        return int(self.value[-1])

    @property
    def nvlink_generation(self) -> int | None:
        """NVLink generation the GPU must have (NVSwitch vN carries NVLink N+1)."""
        if self.family == "nvlink":
            return self.generation
        if self.family == "nvswitch":
            return self.generation + 1
        return None

    @classmethod
    def parse(cls, text: object, *, where: str | None = None) -> IntraNode:
        """The member named by ``text`` (surrounding white space dropped); ``None`` (no
        ``--intra-node`` given) raises `ConfigError` asking for one."""
        if text is None:
            raise ConfigError(
                f"--system custom needs --intra-node (one of {', '.join(m.value for m in cls)})",
                value=None,
                where="--intra-node",
            )
        if isinstance(text, cls):  # str(member) would be "IntraNode.X" (Python 3.11)
            return text
        return super().parse(str(text).strip(), where=where)


# CPU interconnect assumed for a host of the given PCIe generation: (link tech, count).
_SOCKET_LINK = {3: ("upi-10.4", 2), 4: ("upi-11.2", 3), 5: ("upi-16", 4)}


def _host_tree(
    gpu_model: str, gpus_per_node: int, nics_per_node: int, pcie_gen: int
) -> tuple[list[NodeSpec], list[LinkSpec]]:
    """CPUs, PCIe switches, GPUs and NICs of the host side (see the module docstring)."""
    pcie = f"pcie{pcie_gen}-x16"
    sockets = 1 if gpus_per_node <= 4 else 2
    per_socket = [math.ceil(gpus_per_node / sockets), gpus_per_node // sockets][:sockets]
    nodes: list[NodeSpec] = [NodeSpec(f"cpu{s}", NodeKind.CPU) for s in range(sockets)]
    links: list[LinkSpec] = []
    gpu_nodes: list[NodeSpec] = []
    if sockets == 2:
        tech, count = _SOCKET_LINK[pcie_gen]
        links.append(_link("cpu0", "cpu1", tech, count))
    gpu = 0
    switch = 0
    for s, n_gpus in enumerate(per_socket):
        if n_gpus == 1:
            gpu_nodes.append(NodeSpec(f"gpu{gpu}", NodeKind.GPU, model=gpu_model))
            links.append(_link(f"cpu{s}", f"gpu{gpu}", pcie))
            gpu += 1
            continue
        for first in range(0, n_gpus, 2):
            sw = f"plx{switch}"
            switch += 1
            nodes.append(NodeSpec(sw, NodeKind.PCIE_SWITCH))
            links.append(_link(f"cpu{s}", sw, pcie))
            for _ in range(min(2, n_gpus - first)):
                gpu_nodes.append(NodeSpec(f"gpu{gpu}", NodeKind.GPU, model=gpu_model))
                links.append(_link(sw, f"gpu{gpu}", pcie))
                gpu += 1
    nodes.extend(gpu_nodes)
    for k in range(nics_per_node):
        nodes.append(NodeSpec(f"nic{k}", NodeKind.NIC))
        links.append(_link(f"cpu{k % sockets}", f"nic{k}", pcie))
    return nodes, links


def _require_nvlink(spec: GPUSpec, intra: IntraNode) -> None:
    if spec.nvlink_links < 1:
        raise ConfigError(
            f"--intra-node {intra.value}: GPU {spec.name} has no NVLink ports; use pcie3|pcie4|pcie5",
            value=intra.value,
            where="--intra-node",
        )
    want = intra.nvlink_generation
    if spec.nvlink_gen is not None and want is not None and spec.nvlink_gen != want:
        raise ConfigError(
            f"--intra-node {intra.value} carries NVLink {want}, but GPU {spec.name} has NVLink "
            f"{spec.nvlink_gen}",
            value=intra.value,
            where="--intra-node",
        )


def custom_server(
    gpu: str | None, gpus_per_node: int | None, intra_node: str | None, nics_per_node: int = 1
) -> ServerDescription:
    """One custom server as a :class:`ServerDescription` (see the module docstring for the layout).

    Raises
    ------
    ConfigError
        Naming the flag (``--gpu``, ``--gpus-per-node``, ``--intra-node``, ``--nics-per-node``)
        of a missing or bad value.
    """
    if gpu is None:
        raise ConfigError("--system custom needs --gpu (see `perfmodel hw gpus`)", where="--gpu")
    spec = get_gpu(gpu, where="--gpu")
    if gpus_per_node is None:
        raise ConfigError("--system custom needs --gpus-per-node", where="--gpus-per-node")
    if not isinstance(gpus_per_node, int) or gpus_per_node < 1:
        raise ConfigError(
            f"--gpus-per-node must be a positive integer, got {gpus_per_node!r}",
            value=gpus_per_node,
            where="--gpus-per-node",
        )
    if not isinstance(nics_per_node, int) or nics_per_node < 0:
        raise ConfigError(
            f"--nics-per-node must be >= 0, got {nics_per_node!r}",
            value=nics_per_node,
            where="--nics-per-node",
        )
    intra = IntraNode.parse(intra_node)
    pcie_gen = intra.generation if intra.family == "pcie" else (spec.pcie_gen or 3)
    pcie_gen = min(max(pcie_gen, 3), 5)
    nodes, links = _host_tree(spec.name, gpus_per_node, nics_per_node, pcie_gen)
    if intra.family == "nvlink":
        _require_nvlink(spec, intra)
        peers = gpus_per_node - 1
        if peers > spec.nvlink_links:
            raise ConfigError(
                f"--gpus-per-node {gpus_per_node} with --intra-node {intra.value}: each GPU needs "
                f"{peers} direct peers but {spec.name} has {spec.nvlink_links} NVLinks; use an "
                "nvswitch option or fewer GPUs",
                value=gpus_per_node,
                where="--gpus-per-node",
            )
        per_pair = spec.nvlink_links // peers if peers else 0
        for a in range(gpus_per_node):
            for b in range(a + 1, gpus_per_node):
                links.append(_link(f"gpu{a}", f"gpu{b}", intra.value, per_pair))
    elif intra.family == "nvswitch":
        _require_nvlink(spec, intra)
        nodes.append(NodeSpec("nvswitch0", NodeKind.NVSWITCH, label="NVSwitch (aggregate)"))
        for a in range(gpus_per_node):
            links.append(_link(f"gpu{a}", "nvswitch0", intra.value, spec.nvlink_links))
    name = f"custom-{gpus_per_node}x{spec.name}-{intra.value}"
    return ServerDescription(
        name=name,
        nodes=tuple(nodes),
        links=tuple(links),
        fabric=None,
        description=(
            f"custom server: {gpus_per_node}x {spec.name}, intra-node {intra.value}, "
            f"{nics_per_node} NIC(s)"
        ),
        sources=("perfmodel.topology.custom (layout rules in its docstring)",),
        gpu=spec.name,
        gpu_selectable=True,
        source="--system custom",
    )


def custom_system(
    gpu: str | None = None,
    gpus_per_node: int | None = None,
    intra_node: str | None = None,
    network: str | None = None,
    nics_per_node: int | None = None,
    nodes: int = 1,
    fabric_topology: str | None = None,
    oversubscription: float | None = None,
) -> Topology:
    """Build hypothetical hardware from parts (``perfmodel ... --system custom``).

    Parameters
    ----------
    gpu
        GPU model (catalogue name or alias), ``--gpu``.
    gpus_per_node
        GPUs per server, ``--gpus-per-node``.
    intra_node
        ``pcie3|pcie4|pcie5|nvlink1..nvlink5|nvswitch-v1..v4``, ``--intra-node``.
    network
        Fabric link technology (``ib-hdr``, ``eth-25g``...), required when ``nodes > 1``.
    nics_per_node
        NICs per server (default 1).
    nodes
        Number of servers.
    fabric_topology
        ``single-switch``, ``fat-tree`` (default) or ``rail``.
    oversubscription
        Fat-tree leaf oversubscription (default 1.0).

    Examples
    --------
    >>> t = custom_system("V100-SXM2-16GB", 4, "nvlink2")
    >>> t.num_gpus, t.graph.edges["gpu0", "gpu1"]["count"]  # 6 links over 3 peers
    (4, 2)
    """
    if not isinstance(nodes, int) or nodes < 1:
        raise ConfigError(f"--nodes must be >= 1, got {nodes!r}", value=nodes, where="--nodes")
    nics = 1 if nics_per_node is None else nics_per_node
    if nodes > 1 and nics < 1:
        raise ConfigError(
            f"--nics-per-node {nics}: a {nodes}-node cluster needs at least one NIC per server",
            value=nics,
            where="--nics-per-node",
        )
    desc = custom_server(gpu, gpus_per_node, intra_node, nics)
    fabric = None
    if network is not None:
        get_link(network, where="--network")
    if nodes > 1 or network is not None:
        if network is None:
            raise ConfigError(
                f"--system custom with --nodes {nodes} needs --network (e.g. ib-hdr, eth-25g)",
                value=None,
                where="--network",
            )
        topology = fabric_topology or "fat-tree"
        if topology not in FABRIC_TOPOLOGIES:
            raise ConfigError(
                f"--fabric {topology!r} is not one of {FABRIC_TOPOLOGIES}",
                value=topology,
                where="--fabric",
            )
        over = 1.0 if oversubscription is None else float(oversubscription)
        if not over >= 1.0:
            raise ConfigError(
                f"--oversubscription {over} must be >= 1", value=over, where="--oversubscription"
            )
        fabric = FabricSpec(
            network=network, topology=topology, nics_per_node=nics, oversubscription=over
        )
    from perfmodel.topology.nccl_p2p import HostCpu, with_nccl_p2p_rule

    # NCCL's default P2P level; the host's sockets are joined by UPI (above): an Intel host
    return with_nccl_p2p_rule(build_cluster(desc, nodes, fabric), host=HostCpu.INTEL)


def device_system(spec: GPUSpec, *, name: str | None = None, source: str = "<profile>") -> Topology:
    """A one-device system for a compute device described by a spec outside the GPU catalogue.

    Used for ``--system calibrated``: the device a calibration profile measured (a CPU, or a GPU
    the catalogue lacks) with the spec the profile synthesises from its own fits
    (:meth:`perfmodel.calibration.CalibrationProfile.device_spec`). The device is the graph's one
    compute node (kind ``gpu`` in the schema: "the device that runs the layers"); there are no
    links, so only single-device plans are possible.
    """
    import networkx as nx

    graph = nx.Graph()
    graph.add_node(
        "dev0", kind=NodeKind.GPU, server=0, local_id="dev0", model=spec.name, gpu_index=0
    )
    return Topology(
        name or f"calibrated:{spec.name}",
        graph,
        1,
        f"single calibrated device {spec.name}",
        source,
        None,
        (),
        device_specs={spec.name: spec},
    )
