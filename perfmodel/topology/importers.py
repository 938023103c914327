"""Importing real machines: three input formats, auto-detected by :func:`import_topology`:

``nvidia-smi topo -m`` text
    The GPU/NIC connectivity matrix. The PCIe tree is rebuilt from the classes (see
    :func:`from_smi_text`); link generations come from the GPU model, which the text does not
    state (pass ``gpu``).
NCCL topology XML (``NCCL_TOPO_DUMP_FILE``)
    ``<system><cpu><pci><pci><gpu><nvlink/></gpu></pci>...<nic><net/></nic></cpu></system>``:
    CPUs, PCIe bridges (switches), GPUs with their NVLinks, NICs (see :func:`from_nccl_xml`).
JSON
    What ``perfmodel topo show --json`` prints: the exact graph, read back into an identical
    graph (:mod:`perfmodel.topology.export`).

Every assumption an importer makes is listed in ``Topology.meta["assumptions"]``; every
imported machine gets NCCL's P2P rule (:mod:`perfmodel.topology.nccl_p2p`).
"""

from __future__ import annotations

import math
import re
import xml.etree.ElementTree as ET
from pathlib import Path

from perfmodel.errors import ConfigError, ParseError
from perfmodel.hardware.gpus import GPUSpec, get_gpu
from perfmodel.hardware.links import LinkFamily, get_link
from perfmodel.topology.cluster import build_cluster
from perfmodel.topology.export import from_json_text
from perfmodel.topology.io import LinkSpec, NodeSpec, ServerDescription
from perfmodel.topology.io import link_from_tech as _link
from perfmodel.topology.model import FabricSpec, Topology
from perfmodel.topology.nccl_p2p import HostCpu, with_nccl_p2p_rule
from perfmodel.topology.schema import (
    NodeKind,
)
from perfmodel.topology.unionfind import UnionFind

__all__ = [
    "detect_format",
    "from_nccl_xml",
    "from_smi_text",
    "import_topology",
    "parse_p2p_status",
]


# CPU interconnect assumed from the PCIe generation of the GPUs when the input does not say.
_SOCKET_LINK_BY_PCIE = {3: ("qpi-9.6", 2), 4: ("upi-11.2", 3), 5: ("upi-16", 4)}


# ---------------------------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------------------------


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


def _imported(
    source: str,
    default_name: str,
    what: str,
    nodes: list[NodeSpec],
    links: list[LinkSpec],
    spec: GPUSpec,
) -> ServerDescription:
    """The description of an imported server: named after its file (``default_name`` for text
    given directly), described as ``imported from`` ``what``."""
    return ServerDescription(
        name=Path(source).stem if source and not source.startswith("<") else default_name,
        nodes=tuple(nodes),
        links=tuple(links),
        fabric=None,
        description=f"imported from {what}",
        sources=(source,),
        gpu=spec.name,
        source=source,
    )


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
    socket_of, cpus = _smi_sockets(devs, gpus, nics, cls, numa, assumptions)
    nodes: list[NodeSpec] = [NodeSpec(c, NodeKind.CPU) for c in cpus]
    links = _socket_links(cpus, spec, assumptions)
    dev_id = {g: f"gpu{g[3:]}" for g in gpus}
    dev_id.update({n: f"nic{k}" for k, n in enumerate(nics)})
    _smi_pcie_tree(cpus, devs, socket_of, cls, dev_id, pcie, nodes, links)
    for g in gpus:
        nodes.append(NodeSpec(dev_id[g], NodeKind.GPU, model=spec.name))
    nic_names = dict(re.findall(r"^\s*(NIC\d+)\s*:\s*(\S+)\s*$", text, flags=re.MULTILINE))
    for n in nics:
        nodes.append(NodeSpec(dev_id[n], NodeKind.NIC, label=nic_names.get(n, n)))
    _smi_nvlink(gpus, cls, dev_id, spec, source, nodes, links, assumptions)
    what = f"nvidia-smi topo -m ({len(gpus)} GPUs, {len(nics)} NICs)"
    desc = _imported(source, "imported-smi", what, nodes, links, spec)
    topo = _finish(desc, _fabric(network, len(nics), source), assumptions)
    _check_smi_roundtrip(topo, devs, dev_id, cls, assumptions)
    return topo


def _host_rel(cls: dict[tuple[str, str], str], a: str, b: str) -> str | None:
    """The PCIe / host class between two devices (``None``: NVLink or the same device)."""
    c = cls[a, b]
    return None if c.startswith("NV") or c == "X" else c


def _smi_sockets(
    devs: list[str],
    gpus: list[str],
    nics: list[str],
    cls: dict[tuple[str, str], str],
    numa: dict[str, str],
    assumptions: list[str],
) -> tuple[dict[str, str], list[str]]:
    """Each device's CPU node and the CPU nodes (sorted): one per NUMA node of the ``NUMA
    Affinity`` column, else one per connected group of non-``SYS`` relations; a NIC joins the
    CPU of a GPU it is not ``SYS`` to (else a CPU node of its own)."""
    socket_of: dict[str, str] = {}
    if numa and all(g in numa for g in gpus):
        for g in gpus:
            socket_of[g] = f"cpu{numa[g]}"
        assumptions.append("one CPU node per NUMA node of the 'NUMA Affinity' column")
    else:
        uf = UnionFind(devs)
        for a in devs:
            for b in devs:
                r = _host_rel(cls, a, b)
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
        near = [g for g in gpus if _host_rel(cls, n, g) not in (None, "SYS")]
        if near:
            socket_of[n] = socket_of[near[0]]
        else:
            socket_of[n] = f"cpu_nic{spare}"
            spare += 1
            assumptions.append(f"{n} is SYS to every GPU: put on a CPU node of its own")
    for g in gpus:
        socket_of.setdefault(g, "cpu0")
    cpus = sorted(set(socket_of.values()), key=lambda c: (not c[3:].isdigit(), c))
    return socket_of, cpus


def _socket_links(cpus: list[str], spec: GPUSpec, assumptions: list[str]) -> list[LinkSpec]:
    """The CPU nodes joined pairwise by the socket link of the GPU's PCIe era."""
    links: list[LinkSpec] = []
    sock_tech, sock_count = _SOCKET_LINK_BY_PCIE[_pcie_gen(spec)]
    if len(cpus) > 1:
        assumptions.append(f"CPU nodes joined pairwise by {sock_count}x {sock_tech}")
    for i, a in enumerate(cpus):
        for b in cpus[i + 1 :]:
            links.append(_link(a, b, sock_tech, sock_count))
    return links


def _smi_pcie_tree(
    cpus: list[str],
    devs: list[str],
    socket_of: dict[str, str],
    cls: dict[tuple[str, str], str],
    dev_id: dict[str, str],
    pcie: str,
    nodes: list[NodeSpec],
    links: list[LinkSpec],
) -> None:
    """Each CPU's PCIe tree (appended to ``nodes`` and ``links``): devices related by ``PIX``
    share a leaf switch, leaf switches related by ``PXB`` an upper switch; a lone device that is
    ``NODE`` to another of its CPU sits behind its own switch, else on a root port."""
    switch_no = 0
    for cpu in cpus:
        members = [d for d in devs if socket_of[d] == cpu]
        pix = UnionFind(members)
        pxb = UnionFind(members)
        for a in members:
            for b in members:
                r = _host_rel(cls, a, b)
                if r == "PIX":
                    pix.union(a, b)
                    pxb.union(a, b)
                elif r == "PXB":
                    pxb.union(a, b)
        for group in pxb.groups(members):
            leaves = pix.groups(group)
            if len(leaves) == 1 and len(leaves[0]) == 1:
                d = leaves[0][0]
                behind = any(_host_rel(cls, d, o) == "NODE" for o in members if o != d)
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


def _smi_nvlink(
    gpus: list[str],
    cls: dict[tuple[str, str], str],
    dev_id: dict[str, str],
    spec: GPUSpec,
    source: str,
    nodes: list[NodeSpec],
    links: list[LinkSpec],
    assumptions: list[str],
) -> None:
    """The ``NV#`` pairs as direct bundles of ``#`` links, or, where a GPU's counts add up to
    more links than its model has, every GPU on one NVSwitch node (appended to ``nodes`` and
    ``links``)."""
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
    gpu_elems = root.findall(".//gpu")
    if not gpu_elems:
        raise ParseError(f"{source}: no <gpu> element", value=None, where=source)
    spec = _xml_gpu_model(gpu_elems, gpu, source, assumptions)
    tree = _XmlTree(spec, source, assumptions)
    cpu_ids: list[str] = []
    for i, cpu in enumerate(cpus):
        cid = f"cpu{cpu.get('numaid', i)}"
        model = f"{cpu.get('vendor', '')} {cpu.get('modelid', '')}".strip()
        if _xml_host(cpu) is HostCpu.INTEL_BROADWELL:
            model += " (Broadwell)"  # kept for NCCL 2.6-2.7's P2P rule (nccl_p2p_level)
        tree.add_node(NodeSpec(cid, NodeKind.CPU, model=model))
        cpu_ids.append(cid)
        tree.walk(cpu, cid, cid)
    links = tree.links
    sock = _cpu_link(cpus[0], assumptions)
    for i, a in enumerate(cpu_ids):
        for b in cpu_ids[i + 1 :]:
            if sock is None:
                links.append(LinkSpec(a, b, "custom", LinkFamily.CPU, 4, 4 * 32e9, 0.7, 0.3e-6))
            else:
                links.append(_link(a, b, sock[0], sock[1]))
    if sock is None and len(cpu_ids) > 1:
        assumptions.append("AMD sockets joined by 4x xGMI-2 at 32 GB/s per direction (assumed)")
    if tree.nvlinks:
        tree.add_nvlinks()
    nic_count = len(tree.net_ports)
    if network is None and tree.net_ports:
        network = _xml_network(tree.net_ports[0], source, assumptions)
    what = f"NCCL topology XML ({len(gpu_elems)} GPUs, {nic_count} NICs)"
    desc = _imported(source, "imported-nccl", what, tree.nodes, links, spec)
    topo = _finish(desc, _fabric(network, nic_count, source), assumptions)
    # the rule is stated from meta["nccl_p2p_rule"] where it is shown (`topo import`, `topo show`),
    # so a rule applied again later (another release) is not contradicted by a stored sentence
    return with_nccl_p2p_rule(topo, host=_xml_host(cpus[0]))


def _xml_gpu_model(
    gpu_elems: list[ET.Element], gpu: str | None, source: str, assumptions: list[str]
) -> GPUSpec:
    """The GPU model: ``gpu`` where given, else the one of the first ``<gpu>``'s ``sm`` (an SXM
    board where NVLinks are present, a PCIe one otherwise)."""
    if gpu is not None:
        spec = get_gpu(gpu, where="--gpu")
        assumptions.append(f"GPU model {spec.name} (given)")
        return spec
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
    return spec


def _xml_network(net: ET.Element, source: str, assumptions: list[str]) -> str | None:
    """The fabric of the first ``<net>`` port: InfiniBand where it has a ``guid``, else
    Ethernet, by its speed; ``None`` where the speed is not in the catalogue."""
    speed = int(_xml_number(net, "speed", 0.0, source))
    table = _IB_SPEED if net.get("guid") else _ETH_SPEED
    network = table.get(speed)
    if network is None:
        assumptions.append(f"NIC speed {speed} Mb/s not in the catalogue: no default fabric")
    else:
        assumptions.append(f"fabric {network} from NIC speed {speed} Mb/s")
    return network


class _XmlTree:
    """The nodes and links of an NCCL topology XML, read by walking each ``<cpu>``'s ``<pci>``
    tree (:meth:`walk`), with the GPUs' NVLink records (:meth:`add_nvlinks`) and the NIC ports
    met on the way."""

    def __init__(self, spec: GPUSpec, source: str, assumptions: list[str]) -> None:
        self.spec = spec
        self.source = source
        self.assumptions = assumptions
        self.fallback_gen = _pcie_gen(spec)
        self.nodes: list[NodeSpec] = []
        self.links: list[LinkSpec] = []
        self.busid_to_gpu: dict[str, str] = {}
        self.gpu_cpu: dict[str, str] = {}
        self.nvlinks: list[tuple[str, str, int, str]] = []  # (gpu, target busid, count, tclass)
        self.net_ports: list[ET.Element] = []
        self._seen_ids: set[str] = set()
        self._switches = 0
        self._nics = 0

    def add_node(self, node: NodeSpec) -> None:
        if node.id in self._seen_ids:
            raise ParseError(
                f"{self.source}: duplicate element id {node.id!r}", value=node.id, where=self.source
            )
        self._seen_ids.add(node.id)
        self.nodes.append(node)

    def _add_nics(self, nic_elem: ET.Element, parent: str, tech: str) -> None:
        for net in nic_elem.findall("net"):
            nid = f"nic{self._nics}"
            self._nics += 1
            self.add_node(NodeSpec(nid, NodeKind.NIC, label=net.get("name", "")))
            self.links.append(_link(parent, nid, tech))
            self.net_ports.append(net)

    def walk(self, elem: ET.Element, parent: str, cpu_id: str) -> None:
        """The devices under ``elem`` (below node ``parent`` of CPU ``cpu_id``)."""
        fallback_gen, links = self.fallback_gen, self.links
        for child in elem:
            if child.tag == "pci":
                busid = child.get("busid", "?")
                where = f"pci {busid}"
                tech = _pcie_tech(child, fallback_gen, self.assumptions, where)
                g = child.find("gpu")
                n = child.find("nic")
                if g is not None:
                    self._add_gpu(g, busid, where, parent, tech, cpu_id)
                elif n is not None:
                    self._add_nics(n, parent, tech)
                else:
                    sid = f"pcie_sw{self._switches}"
                    self._switches += 1
                    self.add_node(NodeSpec(sid, NodeKind.PCIE_SWITCH, label=busid))
                    links.append(_link(parent, sid, tech))
                    self.walk(child, sid, cpu_id)
            elif child.tag == "nic":
                self.assumptions.append(f"NIC directly under {parent}: pcie{fallback_gen}-x16 link")
                self._add_nics(child, parent, f"pcie{fallback_gen}-x16")

    def _add_gpu(
        self, g: ET.Element, busid: str, where: str, parent: str, tech: str, cpu_id: str
    ) -> None:
        dev = g.get("dev")
        if dev is None or not dev.isdigit():
            raise ParseError(
                f"{self.source}: <gpu> under {where} lacks a numeric 'dev'",
                value=dev,
                where=self.source,
            )
        gid = f"gpu{dev}"
        self.add_node(NodeSpec(gid, NodeKind.GPU, model=self.spec.name))
        self.links.append(_link(parent, gid, tech))
        self.busid_to_gpu[busid.lower()] = gid
        self.gpu_cpu[gid] = cpu_id
        for nvl in g.findall("nvlink"):
            self.nvlinks.append(
                (
                    gid,
                    nvl.get("target", "").lower(),
                    _xml_int(nvl, "count", 1, self.source),
                    nvl.get("tclass", ""),
                )
            )

    def add_nvlinks(self) -> None:
        """The NVLink records as links: a direct bundle per GPU pair, every NVSwitch target
        aggregated onto one NVSwitch node, a GPU's NVLinks to its CPU (POWER9) replacing its
        PCIe link."""
        spec, source, links, busid_to_gpu = self.spec, self.source, self.links, self.busid_to_gpu
        direct, switch = _nvlink_techs(spec, source)
        pair_count: dict[frozenset[str], int] = {}
        switch_ports: dict[str, int] = {}
        cpu_ports: dict[str, int] = {}
        for gid, target, count, tclass in self.nvlinks:
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
            self.add_node(NodeSpec("nvswitch0", NodeKind.NVSWITCH, label="NVSwitch (aggregate)"))
            for gid, ports in switch_ports.items():
                links.append(_link(gid, "nvswitch0", switch, ports))
            self.assumptions.append(f"all NVSwitch targets aggregated into one node ({switch})")
        for gid, ports in cpu_ports.items():
            cpu_id = self.gpu_cpu[gid]
            # a GPU attached by NVLink to its CPU (POWER9) replaces its PCIe link
            links[:] = [
                lk
                for lk in links
                if not ({lk.a, lk.b} == {cpu_id, gid} and lk.family is LinkFamily.PCIE)
            ]
            links.append(_link(cpu_id, gid, direct, ports))
            self.assumptions.append(f"{gid}: {ports} NVLink(s) to {cpu_id}")


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
        return from_json_text(text, str(p))
    if kind == "nccl-xml":
        return from_nccl_xml(text, gpu=gpu, source=str(p), network=network)
    return from_smi_text(text, gpu=gpu, source=str(p), network=network)
