"""Systems by name: the catalogue (``topologies/*.toml``), a topology file by path, and the
system the hardware flags describe (a catalogue system, a file or ``--system custom``).

The graphs themselves are built in :mod:`perfmodel.topology.cluster`; NCCL's peer-to-peer rule
is applied by :func:`perfmodel.topology.nccl_p2p.with_nccl_p2p_rule`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from perfmodel._io import SYSTEM_FILE_SUFFIXES
from perfmodel.catalogue import topologies_dir
from perfmodel.errors import ConfigError, UnknownHardwareError
from perfmodel.hardware.links import get_link
from perfmodel.topology.cluster import build_cluster
from perfmodel.topology.files import read_server_file
from perfmodel.topology.model import FabricSpec, Topology
from perfmodel.topology.schema import NodeKind


def list_systems() -> list[str]:
    """Names of the catalogue systems (files ``topologies/*.toml``)."""
    return sorted(p.stem for p in topologies_dir().glob("*.toml"))


def system_path(name: str) -> Path:
    """Path of a catalogue system or of a topology file given by path."""
    p = Path(name)
    if p.suffix.lower() in SYSTEM_FILE_SUFFIXES:
        if p.is_file():
            return p
        raise UnknownHardwareError(
            f"system file {name!r} does not exist (a {p.suffix} system file: one that `perfmodel "
            "topo import FILE -o NAME.toml` or `topo show --json` writes, or a topology file)",
            value=name,
            where="--system",
        )
    cand = topologies_dir() / f"{name}.toml"
    if cand.exists():
        return cand
    import difflib

    close = difflib.get_close_matches(name, list_systems(), n=3, cutoff=0.4)
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    raise UnknownHardwareError(
        f"unknown system {name!r}{hint} (see `perfmodel topo list`)", value=name, where="--system"
    )


def gpus_per_server(name: str) -> int:
    """GPUs of one server of the catalogue system (or topology file) ``name``, as its file
    states them (a GB200 NVL72 rack: 72; a DGX: 8); the file is read once per process."""
    return len(read_server_file(system_path(name)).gpu_ids)


def load_system(
    name: str,
    *,
    nodes: int = 1,
    network: str | None = None,
    nics_per_node: int | None = None,
    gpu: str | None = None,
    fabric_topology: str | None = None,
    oversubscription: float | None = None,
) -> Topology:
    """Load a catalogue system (or a topology file path) as a :class:`Topology`.

    Parameters
    ----------
    name
        Catalogue name (``dgx1-v100``), a path to a ``.toml`` topology file, or to the JSON
        ``perfmodel topo show --json`` writes (server 0 of it, on its fabric).
    nodes
        Number of servers; > 1 joins them with the file's default fabric unless overridden.
    network, nics_per_node, fabric_topology, oversubscription
        Override the default fabric (``--network eth-50g``).
    gpu
        Replace the GPU model of a ``gpu_selectable`` system (``pcie-8x-server``), or pick a board
        variant of a fixed system's GPU: same architecture and form factor, another memory size
        (``dgx-a100 --gpu A100-SXM4-40GB`` is the 320 GB DGX A100; ``dgx1-v100 --gpu
        V100-SXM2-32GB`` the 32 GB DGX-1V). The wiring is unchanged by such a swap.
    """
    path = system_path(name)
    desc = read_server_file(path, gpu_override=None)
    if gpu is not None:
        if not desc.gpu_selectable and not _is_board_variant(desc.gpu, gpu):
            raise ConfigError(
                f"system {desc.name} has a fixed GPU ({desc.gpu}); --gpu {gpu} is not a variant of it "
                "(same architecture and form factor, e.g. another memory size). --gpu replaces any GPU only "
                "in GPU-selectable systems such as pcie-8x-server, or use --system custom",
                value=gpu,
                where="--gpu",
            )
        desc = read_server_file(path, gpu_override=gpu)
    fabric = desc.fabric
    if (
        network is not None
        or nics_per_node is not None
        or fabric_topology is not None
        or oversubscription is not None
    ):
        if fabric is None and network is None:
            raise ConfigError(
                f"system {desc.name} states no default fabric; give --network to set one "
                "(with --nics-per-node / --fabric / --oversubscription)",
                value=desc.name,
                where="--network",
            )
        base = fabric or FabricSpec(network=network)
        if network is not None:
            get_link(network, where="--network")
        fabric = dataclasses.replace(
            base,
            network=network or base.network,
            nics_per_node=nics_per_node if nics_per_node is not None else base.nics_per_node,
            topology=fabric_topology or base.topology,
            oversubscription=oversubscription
            if oversubscription is not None
            else base.oversubscription,
        )
        if nics_per_node is not None:
            nic_count = sum(1 for n in desc.nodes if n.kind is NodeKind.NIC)
            if nics_per_node < 1 or nics_per_node > max(nic_count, 1):
                raise ConfigError(
                    f"--nics-per-node {nics_per_node}: system {desc.name} has {nic_count} NIC(s)",
                    value=nics_per_node,
                    where="--nics-per-node",
                )
    from perfmodel.topology.nccl_p2p import with_nccl_p2p_rule  # NCCL's P2P level (issue 12)

    topo = with_nccl_p2p_rule(build_cluster(desc, nodes, fabric))
    if desc.assumptions:  # an imported machine's (topo import -o): topo show and predict say them
        topo.meta["assumptions"] = desc.assumptions
    return topo


def _is_board_variant(current: str, requested: str) -> bool:
    """True when ``requested`` is the same GPU board as ``current`` with other memory.

    Same architecture, same form factor and same NVLink count/generation, so the system's wiring
    is unchanged (DGX-1V 16/32 GB, DGX A100 40/80 GB).
    """
    from perfmodel.hardware.gpus import get_gpu

    a = get_gpu(current)
    b = get_gpu(requested, where="--gpu")
    return (
        a.architecture == b.architecture
        and a.form_factor == b.form_factor
        and a.nvlink_links == b.nvlink_links
        and a.nvlink_gen == b.nvlink_gen
    )


def build_system(
    system: str,
    *,
    nodes: int = 1,
    network: str | None = None,
    nics_per_node: int | None = None,
    gpu: str | None = None,
    gpus_per_node: int | None = None,
    intra_node: str | None = None,
    fabric_topology: str | None = None,
    oversubscription: float | None = None,
) -> Topology:
    """The system the hardware flags or scenario keys describe: ``custom`` (built from ``gpu``,
    ``gpus_per_node``, ``intra_node`` and the fabric, :func:`perfmodel.topology.custom.custom_system`),
    else a catalogue name or topology file (:func:`load_system`; ``gpus_per_node`` and
    ``intra_node`` describe only a custom system: given for another,
    :func:`check_custom_only` refuses them, naming them as scenario fields; the CLI and the
    what-if's ``--systems`` entries call it first, naming the flag, file key or entry)."""
    check_custom_only(system, {"gpus_per_node": gpus_per_node, "intra_node": intra_node})
    if system == "custom":
        from perfmodel.topology.custom import custom_system

        return custom_system(
            gpu=gpu,
            gpus_per_node=gpus_per_node,
            intra_node=intra_node,
            network=network,
            nics_per_node=nics_per_node,
            nodes=nodes,
            fabric_topology=fabric_topology,
            oversubscription=oversubscription,
        )
    return load_system(
        system,
        nodes=nodes,
        network=network,
        nics_per_node=nics_per_node,
        gpu=gpu,
        fabric_topology=fabric_topology,
        oversubscription=oversubscription,
    )


#: The hardware keys that describe only ``--system custom`` (a server built from parts): a
#: catalogue system or a system file states its GPUs per server and its wiring itself, and
#: :func:`load_system` reads neither key (user21: ``dgx-a100:intra_node=pcie4`` was predicted
#: as the NVSwitch DGX, PCIe costing nothing).
CUSTOM_ONLY_KEYS = ("gpus_per_node", "intra_node")

#: How a caller names a key: ``flag`` (``--intra-node pcie4``), ``key`` (a scenario file's
#: ``intra_node = "pcie4"``), ``entry`` (a ``--systems`` entry's ``intra_node=pcie4``) or
#: ``field`` (the Python API's ``scenario.intra_node='pcie4'``).
KeyForm = Literal["flag", "key", "entry", "field"]


def check_custom_only(
    system: str, given: Mapping[str, Any], *, form: KeyForm = "field", where: str | None = None
) -> None:
    """Refuse :data:`CUSTOM_ONLY_KEYS` set for a system other than ``custom``, and a bad
    ``intra_node`` value for any system: the one check of the CLI flags, the scenario files,
    the Python API (:func:`build_system`) and the what-if's ``--systems`` entries, each naming
    the keys as its user wrote them (``form``) and where they came from (``where``: the
    scenario file, the ``--systems`` entry; the flag or field otherwise).

    Raises
    ------
    ConfigError
        Naming the key, its value, its origin and the system; saying what to use instead
        (``--system custom --gpu ... --intra-node ...``, or a GPU-selectable catalogue PCIe
        server).
    """
    keys = [k for k in CUSTOM_ONLY_KEYS if given.get(k) is not None]
    if not keys:
        return
    head = f"--systems entry {where!r}: " if form == "entry" else f"{where}: " if where else ""
    intra = given.get("intra_node")
    if intra is not None:
        from perfmodel.topology.custom import IntraNode

        try:
            IntraNode.parse(intra)
        except ConfigError:
            raise ConfigError(
                f"{head}{_named('intra_node', intra, form)}: not an intra-node link; use one of "
                f"{', '.join(m.value for m in IntraNode)}",
                value=intra,
                where=_origin("intra_node", form, where),
            ) from None
    if system == "custom":
        return
    named = " and ".join(_named(k, given[k], form) for k in keys)
    verb = "describe" if len(keys) > 1 else "describes"
    desc = read_server_file(system_path(system)) if system != "calibrated" else None
    gpu = given.get("gpu") or (desc.gpu if desc is not None else None) or "GPU"
    per = given.get("gpus_per_node") or (len(desc.gpu_ids) if desc is not None else 8)
    link, card = _custom_parts(gpu)
    parts = {"gpu": gpu, "gpus_per_node": per, "intra_node": intra or link}
    what = (
        f"{len(desc.gpu_ids)} x {desc.gpu} per server, wired as its file states"
        if desc is not None
        else "the one device of a calibration profile"
    )
    servers = [s for s in list_systems() if s != system and _gpu_selectable(s)]
    pcie = " or ".join(_system_form(s, {"gpu": card}, form) for s in servers if card)
    raise ConfigError(
        f"{head}{named} {verb} only a custom system (one built from parts); system {system!r} "
        f"is {what}, which {'they do' if len(keys) > 1 else 'it does'} not change. Use "
        f"{_system_form('custom', parts, form)}"
        + (f", or a catalogue PCIe server whose GPU you choose: {pcie}" if pcie else ""),
        value=given[keys[0]],
        where=_origin(keys[0], form, where),
    )


def _custom_parts(gpu: str) -> tuple[str, str | None]:
    """The intra-node link a custom server of ``gpu`` suggests, and the PCIe card a catalogue
    PCIe server suggests (``None``: the GPU has no PCIe variant), from the GPU catalogue's
    fields, not its name (rev27b item 4: ``pcie4`` was suggested for every GPU, SXM parts for
    PCIe servers). A PCIe card: itself, over its own PCIe generation (``pcie_gen``, within the
    links :class:`~perfmodel.topology.custom.IntraNode` offers, 3-5). Another form factor: its
    NVLink generation (``nvlink_gen``; PCIe where it has none), and the PCIe card of its vendor
    and compute capability (the same silicon: H100 SXM5 -> H100 PCIe) nearest in memory. A
    GPU the catalogue lacks: ``pcie4`` and the name as given."""
    from perfmodel.hardware import get_gpu, list_gpus

    try:
        spec = get_gpu(gpu)
    except ConfigError:  # UnknownHardwareError included: the name as given
        return "pcie4", gpu
    pcie = f"pcie{min(max(spec.pcie_gen or 4, 3), 5)}"
    if spec.form_factor == "PCIe":
        return pcie, spec.name
    link = f"nvlink{spec.nvlink_gen}" if spec.nvlink_gen in (1, 2, 3, 4, 5) else pcie
    cards = [
        g
        for g in list_gpus()
        if g.form_factor == "PCIe"
        and g.vendor == spec.vendor
        and spec.compute_capability is not None
        and g.compute_capability == spec.compute_capability
    ]
    card = min(cards, key=lambda g: abs(g.memory_bytes - spec.memory_bytes), default=None)
    return link, None if card is None else card.name


def _named(key: str, value: Any, form: KeyForm) -> str:
    """``key`` set to ``value`` as its user wrote it (:data:`KeyForm`)."""
    if form == "flag":
        return f"--{key.replace('_', '-')} {value}"
    if form == "entry":
        return f"{key}={value}"
    if form == "key":
        return f"{key} = {value!r}"
    return f"scenario.{key}={value!r}"


def _origin(key: str, form: KeyForm, where: str | None) -> str:
    """The error's ``where``: the flag, the file, the ``--systems`` flag or the field."""
    if form == "flag":
        return f"--{key.replace('_', '-')}"
    if form == "entry":
        return "--systems"
    if form == "key" and where:
        return where
    return f"scenario.{key}"


def _system_form(system: str, parts: Mapping[str, Any], form: KeyForm) -> str:
    """``system`` with ``parts`` as the user would write them: ``--system custom --gpu X
    ...``, ``system = "custom", gpu = "X", ...``, ``custom:gpu=X:...`` or
    ``Scenario(system='custom', gpu='X', ...)``."""
    if form == "flag":
        return " ".join([f"--system {system}", *(_named(k, v, form) for k, v in parts.items())])
    if form == "entry":
        return ":".join([system, *(_named(k, v, form) for k, v in parts.items())])
    items = {"system": system, **parts}
    if form == "key":
        return ", ".join(f"{k} = {v!r}" for k, v in items.items())
    return f"Scenario({', '.join(f'{k}={v!r}' for k, v in items.items())})"


def _gpu_selectable(name: str) -> bool:
    """Whether catalogue system ``name`` takes any GPU (``gpu_selectable``: pcie-8x-server)."""
    return read_server_file(system_path(name)).gpu_selectable
