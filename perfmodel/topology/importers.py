"""Importing real machines and exporting topologies.

Three input formats, auto-detected by :func:`import_topology`:

``nvidia-smi topo -m`` text
    The GPU/NIC connectivity matrix. The PCIe tree is rebuilt from the classes (see
    :func:`from_smi_text`); link generations come from the GPU model, which the text does not
    state (pass ``gpu``).
NCCL topology XML (``NCCL_TOPO_DUMP_FILE``)
    ``<system><cpu><pci><pci><gpu><nvlink/></gpu></pci>...<nic><net/></nic></cpu></system>``:
    CPUs, PCIe bridges (switches), GPUs with their NVLinks, NICs (see :func:`from_nccl_xml`).
JSON
    What ``perfmodel topo show --json`` prints (or :func:`export_dict`): the exact graph, read
    back by :func:`from_dict` into an identical graph.

Every assumption an importer makes is listed in ``Topology.meta["assumptions"]``.
"""

from __future__ import annotations

import enum
import functools
import itertools
import json
import math
import re
import xml.etree.ElementTree as ET
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import networkx as nx

from perfmodel._memo import BoundedMemo
from perfmodel.errors import ConfigError, ParseError, TopologyError
from perfmodel.hardware.gpus import GPUSpec, get_gpu
from perfmodel.hardware.links import LinkFamily, get_link
from perfmodel.topology.cluster import build_cluster
from perfmodel.topology.io import LinkSpec, NodeSpec, ServerDescription
from perfmodel.topology.io import link_from_tech as _link
from perfmodel.topology.model import FabricSpec, Topology
from perfmodel.topology.schema import (
    EDGE_ATTRS_REQUIRED,
    NODE_ATTRS_OPTIONAL,
    NODE_ATTRS_REQUIRED,
    NodeKind,
    validate_graph,
)

__all__ = [
    "DEFAULT_NCCL_RELEASE",
    "EXPORT_FORMAT",
    "HostCpu",
    "NcclRelease",
    "P2pLevel",
    "detect_format",
    "export_dict",
    "from_dict",
    "from_nccl_xml",
    "from_smi_text",
    "import_topology",
    "nccl_p2p_level",
    "nccl_p2p_level_denied",
    "nccl_p2p_rule_note",
    "server_description",
    "with_nccl_p2p_rule",
]

EXPORT_FORMAT = "perfmodel-topology"
EXPORT_VERSION = 1

# CPU interconnect assumed from the PCIe generation of the GPUs when the input does not say.
_SOCKET_LINK_BY_PCIE = {3: ("qpi-9.6", 2), 4: ("upi-11.2", 3), 5: ("upi-16", 4)}


# ---------------------------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------------------------


class _UnionFind:
    def __init__(self, items: Iterable[str]) -> None:
        self.parent = {i: i for i in items}

    def find(self, x: str) -> str:
        while self.parent[x] != x:
            self.parent[x] = self.parent[self.parent[x]]
            x = self.parent[x]
        return x

    def union(self, a: str, b: str) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[max(ra, rb)] = min(ra, rb)

    def groups(self, order: Iterable[str]) -> list[list[str]]:
        out: dict[str, list[str]] = {}
        for x in order:
            out.setdefault(self.find(x), []).append(x)
        return list(out.values())


def _pcie_gen(spec: GPUSpec) -> int:
    return min(max(spec.pcie_gen or 3, 3), 5)


def _nvlink_techs(spec: GPUSpec, source: str) -> tuple[str, str]:
    """(direct NVLink tech, NVSwitch tech) for the GPU's NVLink generation."""
    gen = spec.nvlink_gen
    if not spec.nvlink_links or gen is None:
        raise ParseError(
            f"{source}: the input shows NVLinks but GPU model {spec.name} has none in the "
            "catalogue; pass the right --gpu",
            value=spec.name,
            where=source,
        )
    return f"nvlink{gen}", f"nvswitch-v{max(gen - 1, 1)}"


def _finish(desc: ServerDescription, fabric: FabricSpec | None, assumptions: list[str]) -> Topology:
    topo = build_cluster(desc, 1, fabric)
    topo.meta["assumptions"] = tuple(assumptions)
    topo.meta["imported_from"] = desc.source
    return topo


def _fabric(network: str | None, nics: int, source: str) -> FabricSpec | None:
    if network is None or nics == 0:
        return None
    get_link(network, where=f"{source}: network")
    return FabricSpec(network=network, topology="fat-tree", nics_per_node=nics)


# ---------------------------------------------------------------------------------------------
# nvidia-smi topo -m
# ---------------------------------------------------------------------------------------------

_SMI_CELL = re.compile(r"^(X|NV\d+|PIX|PXB|PHB|NODE|SYS|SOC)$")
_STOP_HEADER = {"CPU", "NUMA", "GPU NUMA", "Affinity"}


def _parse_smi_matrix(
    text: str, source: str
) -> tuple[list[str], dict[tuple[str, str], str], dict[str, str]]:
    """Device labels, pair classes and NUMA affinity per device from ``nvidia-smi topo -m``."""
    lines = [ln.rstrip("\n") for ln in text.splitlines()]
    header_i = next(
        (
            i
            for i, ln in enumerate(lines)
            if re.search(r"(^|\s)GPU0(\s|$)", ln) and ln[:1].isspace()
        ),
        None,
    )
    if header_i is None:
        raise ParseError(
            f"{source}: no nvidia-smi topo -m header (a line starting with blanks and 'GPU0')",
            value=None,
            where=source,
        )
    devs: list[str] = []
    header_tokens = lines[header_i].split()
    for tok in header_tokens:
        if tok in _STOP_HEADER:
            break
        devs.append(tok)
    has_numa = (
        "NUMA" in header_tokens and "Affinity" in header_tokens[header_tokens.index("NUMA") :]
    )
    classes: dict[tuple[str, str], str] = {}
    numa: dict[str, str] = {}
    rows_seen: set[str] = set()
    for ln in lines[header_i + 1 :]:
        toks = ln.split()
        if not toks or toks[0] not in devs:
            if toks and toks[0].rstrip(":") == "Legend":
                break
            continue
        row = toks[0]
        cells = [c.strip() for c in toks[1 : 1 + len(devs)]]
        if len(cells) < len(devs):
            raise ParseError(
                f"{source}: row {row} has {len(cells)} cells, expected {len(devs)}",
                value=ln,
                where=source,
            )
        for col, cell in zip(devs, cells, strict=True):
            if not _SMI_CELL.match(cell):
                raise ParseError(
                    f"{source}: row {row}, column {col}: unknown class {cell!r} "
                    "(expected X, NV#, PIX, PXB, PHB, NODE or SYS)",
                    value=cell,
                    where=source,
                )
            classes[row, col] = "SYS" if cell == "SOC" else cell
        rest = toks[1 + len(devs) :]
        if has_numa and row.startswith("GPU") and len(rest) >= 2 and rest[1].isdigit():
            numa[row] = rest[1]
        rows_seen.add(row)
    missing = [d for d in devs if d not in rows_seen]
    if missing:
        raise ParseError(f"{source}: no row for {missing}", value=missing, where=source)
    for a in devs:
        if classes[a, a] != "X":
            raise ParseError(
                f"{source}: diagonal of {a} is {classes[a, a]!r}, not X", value=a, where=source
            )
        for b in devs:
            if classes[a, b] != classes[b, a]:
                raise ParseError(
                    f"{source}: matrix not symmetric at {a}/{b}: {classes[a, b]} vs {classes[b, a]}",
                    value=(a, b),
                    where=source,
                )
    return devs, classes, numa


def from_smi_text(
    text: str,
    *,
    gpu: str | None,
    source: str = "<nvidia-smi topo -m>",
    network: str | None = None,
) -> Topology:
    """Rebuild a server graph from ``nvidia-smi topo -m`` output.

    Reconstruction (stated assumptions, also in ``meta["assumptions"]``):

    - CPU nodes: one per NUMA node of the ``NUMA Affinity`` column when present (GPUs of different
      NUMA nodes are ``SYS``), else one per connected group of non-``SYS`` relations; all CPU
      nodes are joined pairwise by the socket link of the GPU's PCIe era (PCIe 3: 2x QPI 9.6,
      4: 3x UPI 11.2, 5: 4x UPI 16). A NIC joins the CPU of a GPU it is not ``SYS`` to.
    - PCIe: devices related by ``PIX`` share a leaf switch; leaf switches related by ``PXB`` hang
      off a common upper switch; a device alone that is ``NODE`` to some device of its CPU sits
      behind its own switch, otherwise on a CPU root port (``PHB``). ``PHB`` between two devices
      behind switches (older drivers' name for ``NODE``) is read as ``NODE``.
    - NVLink: ``NV#`` pairs are direct bundles of ``#`` links, unless a GPU's ``NV#`` counts add up
      to more links than its model has: then all GPUs hang off one NVSwitch node with ``#`` ports.
    - Link generations come from the GPU model (NVLink generation, PCIe generation, x16 links).
    - NIC nodes are labelled with their device names from the ``NIC Legend`` (``mlx5_0``) when
      the output has one.
    """
    if gpu is None:
        raise ParseError(
            f"{source}: nvidia-smi topo -m does not name the GPU model; pass --gpu",
            value=None,
            where="--gpu",
        )
    spec = get_gpu(gpu, where="--gpu")
    devs, cls, numa = _parse_smi_matrix(text, source)
    gpus = [d for d in devs if re.fullmatch(r"GPU\d+", d)]
    nics = [d for d in devs if d not in gpus]
    if not gpus:
        raise ParseError(f"{source}: no GPU column", value=devs, where=source)
    assumptions: list[str] = [
        f"GPU model {spec.name} (given), PCIe gen {_pcie_gen(spec)} x16 links",
    ]
    pcie = f"pcie{_pcie_gen(spec)}-x16"

    def host_rel(a: str, b: str) -> str | None:
        c = cls[a, b]
        return None if c.startswith("NV") or c == "X" else c

    # --- sockets / NUMA nodes
    socket_of: dict[str, str] = {}
    if numa and all(g in numa for g in gpus):
        for g in gpus:
            socket_of[g] = f"cpu{numa[g]}"
        assumptions.append("one CPU node per NUMA node of the 'NUMA Affinity' column")
    else:
        uf = _UnionFind(devs)
        for a in devs:
            for b in devs:
                r = host_rel(a, b)
                if r is not None and r != "SYS":
                    uf.union(a, b)
        for i, grp in enumerate(g for g in uf.groups(devs) if any(x in gpus for x in g)):
            for d in grp:
                socket_of[d] = f"cpu{i}"
        assumptions.append("one CPU node per group of devices connected by non-SYS classes")
    spare = 0
    for n in nics:
        if n in socket_of:
            continue
        near = [g for g in gpus if host_rel(n, g) not in (None, "SYS")]
        if near:
            socket_of[n] = socket_of[near[0]]
        else:
            socket_of[n] = f"cpu_nic{spare}"
            spare += 1
            assumptions.append(f"{n} is SYS to every GPU: put on a CPU node of its own")
    for g in gpus:
        socket_of.setdefault(g, "cpu0")
    cpus = sorted(set(socket_of.values()), key=lambda c: (not c[3:].isdigit(), c))

    nodes: list[NodeSpec] = [NodeSpec(c, NodeKind.CPU) for c in cpus]
    links: list[LinkSpec] = []
    sock_tech, sock_count = _SOCKET_LINK_BY_PCIE[_pcie_gen(spec)]
    if len(cpus) > 1:
        assumptions.append(f"CPU nodes joined pairwise by {sock_count}x {sock_tech}")
    for i, a in enumerate(cpus):
        for b in cpus[i + 1 :]:
            links.append(_link(a, b, sock_tech, sock_count))

    dev_id = {g: f"gpu{g[3:]}" for g in gpus}
    dev_id.update({n: f"nic{k}" for k, n in enumerate(nics)})
    switch_no = 0
    for cpu in cpus:
        members = [d for d in devs if socket_of[d] == cpu]
        pix = _UnionFind(members)
        pxb = _UnionFind(members)
        for a in members:
            for b in members:
                r = host_rel(a, b)
                if r == "PIX":
                    pix.union(a, b)
                    pxb.union(a, b)
                elif r == "PXB":
                    pxb.union(a, b)
        for group in pxb.groups(members):
            leaves = pix.groups(group)
            if len(leaves) == 1 and len(leaves[0]) == 1:
                d = leaves[0][0]
                behind = any(host_rel(d, o) == "NODE" for o in members if o != d)
                if not behind:
                    links.append(_link(cpu, dev_id[d], pcie))
                    continue
            if len(leaves) == 1:
                sw = f"pcie_sw{switch_no}"
                switch_no += 1
                nodes.append(NodeSpec(sw, NodeKind.PCIE_SWITCH))
                links.append(_link(cpu, sw, pcie))
                links.extend(_link(sw, dev_id[d], pcie) for d in leaves[0])
                continue
            up = f"pcie_sw{switch_no}"
            switch_no += 1
            nodes.append(NodeSpec(up, NodeKind.PCIE_SWITCH, label="upper switch"))
            links.append(_link(cpu, up, pcie))
            for leaf in leaves:
                sw = f"pcie_sw{switch_no}"
                switch_no += 1
                nodes.append(NodeSpec(sw, NodeKind.PCIE_SWITCH))
                links.append(_link(up, sw, pcie))
                links.extend(_link(sw, dev_id[d], pcie) for d in leaf)
    for g in gpus:
        nodes.append(NodeSpec(dev_id[g], NodeKind.GPU, model=spec.name))
    nic_names = dict(re.findall(r"^\s*(NIC\d+)\s*:\s*(\S+)\s*$", text, flags=re.MULTILINE))
    for n in nics:
        nodes.append(NodeSpec(dev_id[n], NodeKind.NIC, label=nic_names.get(n, n)))

    # --- NVLink
    nv = {
        (a, b): int(cls[a, b][2:])
        for a in gpus
        for b in gpus
        if a < b and cls[a, b].startswith("NV")
    }
    if nv:
        direct, switch = _nvlink_techs(spec, source)
        per_gpu = {g: sum(c for (a, b), c in nv.items() if g in (a, b)) for g in gpus}
        if max(per_gpu.values()) > spec.nvlink_links:
            nodes.append(NodeSpec("nvswitch0", NodeKind.NVSWITCH, label="NVSwitch (aggregate)"))
            for g in gpus:
                ports = max((c for (a, b), c in nv.items() if g in (a, b)), default=0)
                if ports:
                    links.append(_link(dev_id[g], "nvswitch0", switch, ports))
            assumptions.append(
                f"NV# counts exceed {spec.nvlink_links} links per GPU: one NVSwitch node ({switch})"
            )
        else:
            for (a, b), c in nv.items():
                links.append(_link(dev_id[a], dev_id[b], direct, c))
            assumptions.append(f"NV# pairs are direct {direct} bundles")
    desc = ServerDescription(
        name=Path(source).stem if source and not source.startswith("<") else "imported-smi",
        nodes=tuple(nodes),
        links=tuple(links),
        fabric=None,
        description=f"imported from nvidia-smi topo -m ({len(gpus)} GPUs, {len(nics)} NICs)",
        sources=(source,),
        gpu=spec.name,
        source=source,
    )
    topo = _finish(desc, _fabric(network, len(nics), source), assumptions)
    _check_smi_roundtrip(topo, devs, dev_id, cls, assumptions)
    return topo


def _check_smi_roundtrip(
    topo: Topology,
    devs: list[str],
    dev_id: dict[str, str],
    cls: dict[tuple[str, str], str],
    assumptions: list[str],
) -> None:
    """Compare the rebuilt graph's classes with the input; record the naming dialect."""
    from perfmodel.topology.analysis import smi_class

    mismatches = [
        (a, b, cls[a, b], smi_class(topo, dev_id[a], dev_id[b]))
        for i, a in enumerate(devs)
        for b in devs[i + 1 :]
        if smi_class(topo, dev_id[a], dev_id[b]) != cls[a, b]
    ]
    if mismatches and all(want == "PHB" and got == "NODE" for _, _, want, got in mismatches):
        topo.meta["smi_node_label"] = "PHB"
        assumptions.append(
            "input says PHB between PCIe switches of one CPU (older drivers' name for NODE); "
            "topo -m output keeps that naming"
        )
    elif mismatches:
        shown = ", ".join(f"{a}/{b} {want}->{got}" for a, b, want, got in mismatches[:5])
        assumptions.append(f"{len(mismatches)} pair class(es) not reproduced: {shown}")
    topo.meta["assumptions"] = tuple(assumptions)


# ---------------------------------------------------------------------------------------------
# NCCL topology XML
# ---------------------------------------------------------------------------------------------

# Compute capability -> catalogue GPU (SXM parts when the GPU has NVLinks, PCIe parts otherwise).
_SM_SXM = {
    60: "P100-SXM2-16GB",
    70: "V100-SXM2-16GB",
    80: "A100-SXM4-80GB",
    90: "H100-SXM5-80GB",
    100: "B200-SXM-180GB",
}
_SM_PCIE = {
    37: "K80",
    52: "M40",
    60: "P100-PCIE-16GB",
    61: "GTX-1080-Ti",
    70: "V100-PCIE-16GB",
    75: "T4",
    80: "A100-PCIE-80GB",
    86: "RTX-3090",
    89: "L40S",
    90: "H100-PCIE-80GB",
}
_IB_SPEED = {
    56000: "ib-fdr",
    100000: "ib-edr",
    200000: "ib-hdr",
    400000: "ib-ndr",
    800000: "ib-xdr",
}
_ETH_SPEED = {
    10000: "eth-10g",
    25000: "eth-25g",
    40000: "eth-40g",
    50000: "eth-50g",
    100000: "eth-100g",
    200000: "eth-200g",
    400000: "eth-400g",
}
_CLASS_NVSWITCH = "0x068000"
_CLASS_BRIDGE = "0x060400"


def _xml_number(elem: ET.Element, attr: str, default: float, source: str = "XML") -> float:
    """A finite number from an XML attribute (missing or empty: ``default``); anything else is a
    :class:`ParseError` naming the element and attribute."""
    text = elem.get(attr)
    if text is None or not text.strip():
        return default
    try:
        v = float(text)
    except ValueError:
        v = float("nan")
    if not math.isfinite(v) or v < 0:
        raise ParseError(
            f"{source}: <{elem.tag} {attr}={text!r}>: expected a non-negative number",
            value=text,
            where=f"{source}:{elem.tag}.{attr}",
        )
    return v


def _xml_int(elem: ET.Element, attr: str, default: int, source: str = "XML") -> int:
    """A non-negative integer from an XML attribute (decimal, or ``0x`` hex as NCCL writes
    model ids); see :func:`_xml_number`."""
    text = elem.get(attr)
    if text is None or not text.strip():
        return default
    try:
        return int(text, 0) if text.strip().lower().startswith("0x") else int(text)
    except ValueError:
        raise ParseError(
            f"{source}: <{elem.tag} {attr}={text!r}>: expected an integer",
            value=text,
            where=f"{source}:{elem.tag}.{attr}",
        ) from None


def _cpu_link(cpu: ET.Element, assumptions: list[str]) -> tuple[str, int] | None:
    arch = cpu.get("arch", "")
    vendor = cpu.get("vendor", "")
    model = _xml_int(cpu, "modelid", 0)
    if arch.startswith("ppc64"):
        return ("xbus-p9", 1)
    if vendor == "AuthenticAMD":
        return None  # explicit xGMI numbers, below
    table = {63: ("qpi-9.6", 2), 79: ("qpi-9.6", 2), 85: ("upi-10.4", 2), 106: ("upi-11.2", 3)}
    if model in table:
        return table[model]
    if model in (143, 207):
        return ("upi-16", 4)
    assumptions.append(f"unknown CPU model {vendor} {model}: sockets joined by 2x upi-10.4")
    return ("upi-10.4", 2)


def _pcie_tech(elem: ET.Element, fallback_gen: int, assumptions: list[str], where: str) -> str:
    speed = elem.get("link_speed", "")
    width = elem.get("link_width", "")
    m = re.match(r"\s*([\d.]+)\s*GT/s", speed)
    gens = {2.5: 1, 5.0: 2, 8.0: 3, 16.0: 4, 32.0: 5}
    gen = gens.get(float(m.group(1))) if m else None
    w = int(width) if width.isdigit() else 0
    if gen is None or w not in (8, 16):
        assumptions.append(
            f"{where}: link_speed={speed!r} link_width={width!r} not PCIe 3-5 x8/x16; "
            f"assumed pcie{fallback_gen}-x16"
        )
        return f"pcie{fallback_gen}-x16"
    gen = min(max(gen, 3), 5)
    return f"pcie{gen}-x{w}"


def from_nccl_xml(
    text: str,
    *,
    gpu: str | None = None,
    source: str = "<NCCL topology XML>",
    network: str | None = None,
) -> Topology:
    """Map an NCCL topology dump (``NCCL_TOPO_DUMP_FILE``) onto the schema.

    - ``<cpu numaid=N>`` -> CPU node ``cpuN``; CPU nodes are joined pairwise by the socket link of
      the CPU's architecture (Intel model id: Haswell/Broadwell 2x QPI 9.6, Skylake/Cascade Lake
      2x UPI 10.4, Ice Lake 3x UPI 11.2, Sapphire/Emerald Rapids 4x UPI 16; AMD 4x xGMI-2 at
      32 GB/s; POWER9 X-Bus).
    - ``<pci>`` bridges (class ``0x0604..``) -> PCIe switch nodes; each ``<pci>`` element's
      ``link_speed``/``link_width`` is the link to its parent (``8 GT/s`` x16 -> ``pcie3-x16``).
    - ``<gpu dev=K>`` -> ``gpuK``; the model comes from ``gpu`` or, if not given, from ``sm``
      (70 -> V100 SXM2 when NVLinks are present, V100 PCIe otherwise, ...).
    - ``<nvlink target=BUSID count=C tclass=..>``: to another GPU -> a direct NVLink bundle; to an
      NVSwitch (``tclass 0x068000``) -> all of a GPU's switch links aggregated onto one NVSwitch
      node; to a CPU (POWER9) -> a CPU-GPU NVLink bundle. The generation comes from the GPU model.
    - ``<nic><net speed=..>`` -> one NIC node per ``<net>`` port; the fabric is InfiniBand when the
      port has a ``guid`` (speed 100000 Mb/s -> EDR, ...), else Ethernet, unless ``network`` says.
    """
    try:
        root = ET.fromstring(text)
    except ET.ParseError as exc:
        raise ParseError(f"{source}: not well-formed XML: {exc}", value=None, where=source) from exc
    if root.tag != "system":
        raise ParseError(
            f"{source}: root element <{root.tag}>, expected <system>", value=root.tag, where=source
        )
    assumptions: list[str] = []
    cpus = root.findall("cpu")
    if not cpus:
        raise ParseError(f"{source}: no <cpu> element", value=None, where=source)

    # GPU model
    gpu_elems = root.findall(".//gpu")
    if not gpu_elems:
        raise ParseError(f"{source}: no <gpu> element", value=None, where=source)
    if gpu is not None:
        spec = get_gpu(gpu, where="--gpu")
        assumptions.append(f"GPU model {spec.name} (given)")
    else:
        sm = _xml_int(gpu_elems[0], "sm", 0, source)
        has_nvlink = any(g.find("nvlink") is not None for g in gpu_elems)
        table = _SM_SXM if has_nvlink else _SM_PCIE
        if sm not in table:
            raise ParseError(
                f"{source}: cannot tell the GPU model from sm={sm}; pass --gpu",
                value=sm,
                where=source,
            )
        spec = get_gpu(table[sm], where=f"{source}: sm={sm}")
        assumptions.append(f"GPU model {spec.name} inferred from sm={sm}; pass --gpu to change")
    fallback_gen = _pcie_gen(spec)

    nodes: list[NodeSpec] = []
    links: list[LinkSpec] = []
    busid_to_gpu: dict[str, str] = {}
    gpu_cpu: dict[str, str] = {}
    nvlinks: list[tuple[str, str, int, str]] = []  # (gpu, target busid, count, tclass)
    net_ports: list[ET.Element] = []
    seen_ids: set[str] = set()
    counters = {"sw": 0, "nic": 0}

    def add_node(spec_: NodeSpec) -> None:
        if spec_.id in seen_ids:
            raise ParseError(
                f"{source}: duplicate element id {spec_.id!r}", value=spec_.id, where=source
            )
        seen_ids.add(spec_.id)
        nodes.append(spec_)

    def add_nics(nic_elem: ET.Element, parent: str, tech: str) -> None:
        for net in nic_elem.findall("net"):
            nid = f"nic{counters['nic']}"
            counters["nic"] += 1
            add_node(NodeSpec(nid, NodeKind.NIC, label=net.get("name", "")))
            links.append(_link(parent, nid, tech))
            net_ports.append(net)

    def walk(elem: ET.Element, parent: str, cpu_id: str) -> None:
        for child in elem:
            if child.tag == "pci":
                busid = child.get("busid", "?")
                where = f"pci {busid}"
                tech = _pcie_tech(child, fallback_gen, assumptions, where)
                g = child.find("gpu")
                n = child.find("nic")
                if g is not None:
                    dev = g.get("dev")
                    if dev is None or not dev.isdigit():
                        raise ParseError(
                            f"{source}: <gpu> under {where} lacks a numeric 'dev'",
                            value=dev,
                            where=source,
                        )
                    gid = f"gpu{dev}"
                    add_node(NodeSpec(gid, NodeKind.GPU, model=spec.name))
                    links.append(_link(parent, gid, tech))
                    busid_to_gpu[busid.lower()] = gid
                    gpu_cpu[gid] = cpu_id
                    for nvl in g.findall("nvlink"):
                        nvlinks.append(
                            (
                                gid,
                                nvl.get("target", "").lower(),
                                _xml_int(nvl, "count", 1, source),
                                nvl.get("tclass", ""),
                            )
                        )
                elif n is not None:
                    add_nics(n, parent, tech)
                else:
                    sid = f"pcie_sw{counters['sw']}"
                    counters["sw"] += 1
                    add_node(NodeSpec(sid, NodeKind.PCIE_SWITCH, label=busid))
                    links.append(_link(parent, sid, tech))
                    walk(child, sid, cpu_id)
            elif child.tag == "nic":
                assumptions.append(f"NIC directly under {parent}: pcie{fallback_gen}-x16 link")
                add_nics(child, parent, f"pcie{fallback_gen}-x16")

    cpu_ids: list[str] = []
    for i, cpu in enumerate(cpus):
        cid = f"cpu{cpu.get('numaid', i)}"
        model = f"{cpu.get('vendor', '')} {cpu.get('modelid', '')}".strip()
        if _xml_host(cpu) is HostCpu.INTEL_BROADWELL:
            model += " (Broadwell)"  # kept for NCCL 2.6-2.7's P2P rule (nccl_p2p_level)
        add_node(NodeSpec(cid, NodeKind.CPU, model=model))
        cpu_ids.append(cid)
        walk(cpu, cid, cid)
    sock = _cpu_link(cpus[0], assumptions)
    for i, a in enumerate(cpu_ids):
        for b in cpu_ids[i + 1 :]:
            if sock is None:
                links.append(LinkSpec(a, b, "custom", LinkFamily.CPU, 4, 4 * 32e9, 0.7, 0.3e-6))
            else:
                links.append(_link(a, b, sock[0], sock[1]))
    if sock is None and len(cpu_ids) > 1:
        assumptions.append("AMD sockets joined by 4x xGMI-2 at 32 GB/s per direction (assumed)")

    # NVLinks
    if nvlinks:
        direct, switch = _nvlink_techs(spec, source)
        pair_count: dict[frozenset[str], int] = {}
        switch_ports: dict[str, int] = {}
        cpu_ports: dict[str, int] = {}
        for gid, target, count, tclass in nvlinks:
            if target in busid_to_gpu:
                key = frozenset((gid, busid_to_gpu[target]))
                prev = pair_count.get(key)
                if prev is not None and prev != count:
                    raise ParseError(
                        f"{source}: NVLink count of {sorted(key)} differs by side ({prev} vs {count})",
                        value=sorted(key),
                        where=source,
                    )
                pair_count[key] = count
            elif tclass == _CLASS_NVSWITCH:
                switch_ports[gid] = switch_ports.get(gid, 0) + count
            elif tclass == _CLASS_BRIDGE or target not in busid_to_gpu:
                cpu_ports[gid] = cpu_ports.get(gid, 0) + count
        for key, count in sorted(pair_count.items(), key=lambda kv: sorted(kv[0])):
            a, b = sorted(key)
            links.append(_link(a, b, direct, count))
        if switch_ports:
            add_node(NodeSpec("nvswitch0", NodeKind.NVSWITCH, label="NVSwitch (aggregate)"))
            for gid, ports in switch_ports.items():
                links.append(_link(gid, "nvswitch0", switch, ports))
            assumptions.append(f"all NVSwitch targets aggregated into one node ({switch})")
        for gid, ports in cpu_ports.items():
            cpu_id = gpu_cpu[gid]
            # a GPU attached by NVLink to its CPU (POWER9) replaces its PCIe link
            links[:] = [
                lk
                for lk in links
                if not ({lk.a, lk.b} == {cpu_id, gid} and lk.family is LinkFamily.PCIE)
            ]
            links.append(_link(cpu_id, gid, direct, ports))
            assumptions.append(f"{gid}: {ports} NVLink(s) to {cpu_id}")

    # fabric
    nic_count = len(net_ports)
    if network is None and net_ports:
        net = net_ports[0]
        speed = int(_xml_number(net, "speed", 0.0, source))
        table = _IB_SPEED if net.get("guid") else _ETH_SPEED
        network = table.get(speed)
        if network is None:
            assumptions.append(f"NIC speed {speed} Mb/s not in the catalogue: no default fabric")
        else:
            assumptions.append(f"fabric {network} from NIC speed {speed} Mb/s")
    gpu_count = len(gpu_elems)
    desc = ServerDescription(
        name=Path(source).stem if source and not source.startswith("<") else "imported-nccl",
        nodes=tuple(nodes),
        links=tuple(links),
        fabric=None,
        description=f"imported from NCCL topology XML ({gpu_count} GPUs, {nic_count} NICs)",
        sources=(source,),
        gpu=spec.name,
        source=source,
    )
    topo = _finish(desc, _fabric(network, nic_count, source), assumptions)
    # the rule is stated from meta["nccl_p2p_rule"] where it is shown (`topo import`, `topo show`),
    # so a rule applied again later (another release) is not contradicted by a stored sentence
    return with_nccl_p2p_rule(topo, host=_xml_host(cpus[0]))


def _xml_host(cpu: ET.Element) -> HostCpu:
    """The CPU family of an NCCL XML ``<cpu arch= vendor= familyid= modelid=>`` as
    ``ncclTopoCpuType`` reads it (Broadwell: family 6, model 0x4F)."""
    arch = cpu.get("arch", "").lower()
    if arch in ("arm64", "aarch64", "arm"):
        return HostCpu.ARM
    if arch.startswith("ppc") or arch == "power":
        return HostCpu.POWER
    host = HostCpu.from_text(cpu.get("vendor", ""))
    if host is HostCpu.INTEL and (cpu.get("familyid"), cpu.get("modelid")) == ("6", "79"):
        return HostCpu.INTEL_BROADWELL
    return host


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
    base = dataclasses.replace(
        topo, graph=g, meta=dict(topo.meta), pattern=topo._pattern_on(g)
    )  # the stale pairs are stripped alike in every server (by local id)
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
    nvb = release >= NcclRelease(2, 8) and any(
        frozenset((a, k)) in nvlinked and frozenset((k, b)) in nvlinked
        for a, b in rule["pairs"]
        if a in ids and b in ids
        for k in {str(g.nodes[n]["local_id"]) for n in gpus} - {a, b}
    )
    return (
        f"note: NCCL {rule['release']}'s P2P level {rule['level']} on this host "
        f"({_HOST_NAMES[rule['host']]} CPU; {where}): GPU pairs {shown} go through host memory "
        "in every server (--nccl RELEASE states another release; comm --p2p on allows P2P "
        "between all GPUs)"
        + (
            "; NCCL >= 2.8 joins some of them over NVLink through a third GPU (PATH_NVB), "
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


_P2P_OK = {"X", "OK"}


def parse_p2p_status(
    text: str, *, source: str = "<nvidia-smi topo -p2p r>"
) -> list[tuple[str, str]]:
    """GPU pairs (``("gpu0", "gpu4")``) that ``nvidia-smi topo -p2p r`` (or ``w``) reports as
    not OK (``CNS`` chipset, ``GNS`` GPU, ``TNS`` topology, ``NS`` not supported, ``U``).

    >>> parse_p2p_status(chr(10).join(["  GPU0 GPU1", "GPU0 X CNS", "GPU1 CNS X"]))
    [('gpu0', 'gpu1')]
    """
    header: list[str] | None = None
    out: set[tuple[str, str]] = set()
    for ln in text.splitlines():
        toks = ln.split()
        if not toks:
            continue
        if header is None and all(re.fullmatch(r"GPU\d+", t) for t in toks):
            header = toks
            continue
        if header and re.fullmatch(r"GPU\d+", toks[0]) and len(toks) >= len(header) + 1:
            a = f"gpu{toks[0][3:]}"
            for name, status in zip(header, toks[1:]):
                b = f"gpu{name[3:]}"
                if a != b and status.upper() not in _P2P_OK:
                    out.add((min(a, b), max(a, b)))
    if header is None:
        raise ParseError(
            f"{source}: no GPU header line (expected nvidia-smi topo -p2p r output)",
            value=None,
            where=source,
        )
    return sorted(out)


# ---------------------------------------------------------------------------------------------
# JSON (export / import)
# ---------------------------------------------------------------------------------------------

# The exported attributes are the graph schema's (topology/schema.py), in its order.
_NODE_EXPORT = (*NODE_ATTRS_REQUIRED, *NODE_ATTRS_OPTIONAL)
_EDGE_EXPORT = EDGE_ATTRS_REQUIRED


def export_dict(topo: Topology) -> dict[str, Any]:
    """The exact graph as a JSON-ready dict (``format``, ``version``, ``nodes``, ``links``...).

    :func:`from_dict` turns it back into an identical graph (same nodes, edges and attributes).
    The record of NCCL's P2P rule (``meta["nccl_p2p_rule"]``: release, host, level and the
    pairs it refused) travels as ``nccl_p2p_rule``, so that a rule applied after re-import
    replaces the exported one (:func:`with_nccl_p2p_rule`) instead of adding to it.
    """
    g = topo.graph
    nodes = []
    for n, d in g.nodes(data=True):
        item: dict[str, Any] = {"id": n}
        for k in _NODE_EXPORT:
            if k in d:
                v = d[k]
                item[k] = v.value if isinstance(v, NodeKind) else v
        nodes.append(item)
    links = []
    for u, v, d in g.edges(data=True):
        item = {"a": u, "b": v}
        for k in _EDGE_EXPORT:
            val = d[k]
            item[k] = val.value if isinstance(val, LinkFamily) else val
        links.append(item)
    fabric = topo.fabric
    return {
        "format": EXPORT_FORMAT,
        "version": EXPORT_VERSION,
        "name": topo.name,
        "num_nodes": topo.num_nodes,
        "description": topo.description,
        "sources": list(topo.sources),
        "fabric": None
        if fabric is None
        else {
            "network": fabric.network,
            "topology": fabric.topology,
            "nics_per_node": fabric.nics_per_node,
            "oversubscription": fabric.oversubscription,
            "leaf_radix": fabric.leaf_radix,
            **({"sharp": True} if fabric.sharp else {}),
        },
        "nodes": nodes,
        "links": links,
        **(
            {"nccl_p2p_rule": _rule_export(topo.meta["nccl_p2p_rule"])}
            if "nccl_p2p_rule" in topo.meta
            else {}
        ),
        **(
            {"assumptions": [str(a) for a in topo.meta["assumptions"]]}
            if topo.meta.get("assumptions")
            else {}
        ),
    }


def _rule_export(rule: Any) -> dict[str, Any]:
    """``meta["nccl_p2p_rule"]`` as JSON: pairs as lists."""
    return {**rule, "pairs": [list(p) for p in rule["pairs"]]}


def _rule_import(rule: Any, where: str) -> dict[str, Any]:
    """An exported ``nccl_p2p_rule`` back as :func:`with_nccl_p2p_rule` records it, checked."""
    try:
        pairs = tuple((str(a), str(b)) for a, b in rule["pairs"])
        level = rule["level"]
        return {
            "release": str(NcclRelease.parse(str(rule["release"]), where=where)),
            "host": HostCpu(rule["host"]).value,
            "level": None if level is None else P2pLevel(level).value,
            "pairs": pairs,
            "stated": bool(rule.get("stated", False)),
        }
    except (TypeError, KeyError, ValueError) as exc:
        raise TopologyError(
            f"{where}: expected {{release, host, level, pairs: [[a, b], ...]}} ({exc})",
            value=rule,
            where=where,
        ) from exc


def from_dict(data: dict[str, Any], *, source: str = "<json>") -> Topology:
    """Rebuild a :class:`Topology` from :func:`export_dict` output (or ``topo show --json``)."""
    if "topology" in data and isinstance(data["topology"], dict):
        data = data["topology"]
    if data.get("format") != EXPORT_FORMAT:
        raise ParseError(
            f"{source}: not a perfmodel topology export (format {data.get('format')!r})",
            value=data.get("format"),
            where=source,
        )
    if int(data.get("version", 0)) > EXPORT_VERSION:
        raise ParseError(
            f"{source}: export version {data.get('version')} is newer than {EXPORT_VERSION}",
            value=data.get("version"),
            where=source,
        )
    g = nx.Graph()
    for i, item in enumerate(data.get("nodes", [])):
        where = f"{source}: nodes[{i}]"
        if "id" not in item or "kind" not in item:
            raise TopologyError(f"{where}: needs 'id' and 'kind'", value=item, where=where)
        nid = str(item["id"])
        if nid in g:
            raise TopologyError(f"{where}: duplicate node id {nid!r}", value=nid, where=where)
        unknown = sorted(set(item) - {"id", *_NODE_EXPORT})
        if unknown:
            raise TopologyError(f"{where}: unknown key(s) {unknown}", value=unknown, where=where)
        attrs = {k: item[k] for k in _NODE_EXPORT if k in item}
        attrs["kind"] = NodeKind.parse(item["kind"], where=where)
        if "p2p_denied" in attrs:  # a JSON array: the schema's tuple of local ids
            attrs["p2p_denied"] = tuple(str(x) for x in attrs["p2p_denied"])
        g.add_node(nid, **attrs)
    for i, item in enumerate(data.get("links", [])):
        where = f"{source}: links[{i}]"
        unknown = sorted(set(item) - {"a", "b", *_EDGE_EXPORT})
        if unknown:
            raise TopologyError(f"{where}: unknown key(s) {unknown}", value=unknown, where=where)
        missing = [k for k in ("a", "b", *_EDGE_EXPORT) if k not in item]
        if missing:
            raise TopologyError(f"{where}: missing key(s) {missing}", value=missing, where=where)
        a, b = str(item["a"]), str(item["b"])
        for end in (a, b):
            if end not in g:
                raise TopologyError(
                    f"{where}: endpoint {end!r} is not a node", value=end, where=where
                )
        if g.has_edge(a, b):
            raise TopologyError(f"{where}: duplicate link {a}-{b}", value=(a, b), where=where)
        try:
            family = LinkFamily(item["family"])
        except ValueError as exc:
            raise TopologyError(
                f"{where}: unknown link family {item['family']!r}",
                value=item["family"],
                where=where,
            ) from exc
        g.add_edge(
            a,
            b,
            tech=str(item["tech"]),
            family=family,
            count=int(item["count"]),
            bandwidth_Bps=item["bandwidth_Bps"],
            efficiency=item["efficiency"],
            latency_s=item["latency_s"],
        )
    validate_graph(g, source=source)
    fab = data.get("fabric")
    fabric = None if fab is None else _fabric_import(fab, f"{source}: fabric")
    meta: dict[str, Any] = {}
    if data.get("nccl_p2p_rule") is not None:
        meta["nccl_p2p_rule"] = _rule_import(data["nccl_p2p_rule"], f"{source}: nccl_p2p_rule")
    assumptions = data.get("assumptions")
    if assumptions:
        if not isinstance(assumptions, list):
            raise TopologyError(
                f"{source}: assumptions must be a list of sentences",
                value=assumptions,
                where=source,
            )
        meta["assumptions"] = tuple(str(a) for a in assumptions)
    return Topology(
        name=str(data.get("name", "imported")),
        graph=g,
        num_nodes=int(data.get("num_nodes", 1)),
        description=str(data.get("description", "")),
        source=source,
        fabric=fabric,
        sources=tuple(data.get("sources", ())),
        meta=meta,
    )


def _fabric_import(fab: Any, where: str) -> FabricSpec:
    """An exported ``fabric`` object, checked as a topology file's ``[system.fabric]`` is
    (:func:`perfmodel.topology.io.parse_fabric`): a bad key or value names the file."""
    from perfmodel.topology.io import parse_fabric

    return parse_fabric(fab, where)


def server_description(
    topo: Topology, *, name: str | None = None, source: str | None = None
) -> ServerDescription:
    """Server 0 of ``topo`` as the :class:`ServerDescription` a topology file holds: its nodes
    by local id (kind, model, label, rail, ``p2p``, tray, and the ``p2p_denied`` peers other
    than those of NCCL's P2P rule, which loading applies again), the links among them (tech,
    family, bundle count, bandwidth, efficiency, latency as in the graph) and the fabric.
    :func:`perfmodel.topology.cluster.build_cluster` of it rebuilds the same server.

    Raises
    ------
    TopologyError
        If server 0 has no GPU.
    """
    g = topo.graph
    members = topo.server_nodes(0)
    lid = {n: str(g.nodes[n].get("local_id", n)) for n in members}
    rule = topo.meta.get("nccl_p2p_rule")
    rule_pairs = {
        frozenset((str(a), str(b)))
        for a, b in (rule.get("pairs", ()) if isinstance(rule, dict) else ())
    }
    nodes: list[NodeSpec] = []
    for n in members:
        d = g.nodes[n]
        mine = lid[n]
        denied = tuple(
            str(x) for x in d.get("p2p_denied", ()) if frozenset((mine, str(x))) not in rule_pairs
        )
        nodes.append(
            NodeSpec(
                id=mine,
                kind=d["kind"],
                model=str(d.get("model", "")),
                label=str(d.get("label", "")),
                rail=d.get("rail"),
                p2p=d.get("p2p"),
                tray=d.get("tray"),
                p2p_denied=denied,
            )
        )
    if not any(x.kind is NodeKind.GPU for x in nodes):
        raise TopologyError(
            f"{topo.source}: server 0 has no GPU", value=topo.name, where=topo.source
        )
    inside = set(members)
    links = [
        LinkSpec(
            a=lid[u],
            b=lid[v],
            tech=str(d["tech"]),
            family=d["family"],
            count=int(d["count"]),
            bandwidth_Bps=float(d["bandwidth_Bps"]),
            efficiency=float(d["efficiency"]),
            latency_s=float(d["latency_s"]),
        )
        for u, v, d in g.edges(members, data=True)
        if u in inside and v in inside
    ]
    seen: set[frozenset[str]] = set()
    unique = []
    for link in links:  # g.edges(nbunch) yields each edge once; kept defensive
        key = frozenset((link.a, link.b))
        if key not in seen:
            seen.add(key)
            unique.append(link)
    return ServerDescription(
        name=name or topo.name,
        nodes=tuple(nodes),
        links=tuple(unique),
        fabric=topo.fabric,
        description=topo.description,
        sources=tuple(topo.sources),
        gpu=topo.gpu_spec().name,
        source=source or topo.source,
        assumptions=tuple(str(a) for a in topo.meta.get("assumptions", ())),
    )


# ---------------------------------------------------------------------------------------------
# auto-detection
# ---------------------------------------------------------------------------------------------


def detect_format(text: str) -> str:
    """``json``, ``nccl-xml`` or ``smi`` from the content of a file."""
    head = text.lstrip()
    if head.startswith("{"):
        return "json"
    if head.startswith("<") and "<system" in text:
        return "nccl-xml"
    if re.search(r"(^|\n)[ \t]+GPU0[ \t]", text):
        return "smi"
    raise ParseError(
        "cannot tell the format: expected nvidia-smi topo -m text, NCCL topology XML or "
        "perfmodel JSON",
        value=head[:40],
    )


def import_topology(
    path: str | Path, *, gpu: str | None = None, network: str | None = None
) -> Topology:
    """Read a file in any supported format (auto-detected) into a :class:`Topology`."""
    from perfmodel._io import read_text

    p = Path(path)
    try:
        text = read_text(p)
    except ConfigError as exc:
        raise ParseError(str(exc), value=str(p), where=str(p)) from exc
    try:
        kind = detect_format(text)
    except ParseError as exc:
        raise ParseError(f"{p}: {exc}", value=exc.value, where=str(p)) from exc
    if kind == "json":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ParseError(f"{p}: invalid JSON: {exc}", value=None, where=str(p)) from exc
        if not isinstance(data, dict):
            raise ParseError(f"{p}: JSON top level is not an object", value=None, where=str(p))
        return from_dict(data, source=str(p))
    if kind == "nccl-xml":
        return from_nccl_xml(text, gpu=gpu, source=str(p), network=network)
    return from_smi_text(text, gpu=gpu, source=str(p), network=network)
