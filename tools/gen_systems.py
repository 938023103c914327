"""Write the 2026 catalogue systems (``topologies/*.toml``) from one description each.

The rack-scale systems (72 GPUs, 36 CPUs, 72 NICs) and the cloud instances are regular: writing
their topology files by hand invites copy errors, so this script writes them and
``tests/topology/test_systems_2026.py`` checks that the shipped files are exactly its output.
The files stay the data (the graph every prediction reads); this script is how they are made.

Usage::

    python tools/gen_systems.py            # rewrite the files
    python tools/gen_systems.py --check    # exit 1 if a shipped file differs

Every number in a file comes from a catalogue entry (``perfmodel/hardware/*.toml``) or from the
``sources`` list of its ``[system]`` table.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "topologies"

HEADER = (
    "# Written by tools/gen_systems.py (do not edit by hand: edit the script and rerun it;\n"
    "# tests/topology/test_systems_2026.py checks this file is its output).\n"
)


def _q(text: str) -> str:
    """A TOML basic string."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _toml_value(v: object) -> str:
    """A TOML value: strings quoted, tables inline (``{ K = "v" }``), booleans lower case,
    numbers as written."""
    if isinstance(v, str):
        return _q(v)
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{k} = {_toml_value(x)}" for k, x in v.items()) + " }"
    return str(v)


@dataclass
class System:
    """One topology file being written (nodes and links in file order)."""

    name: str
    description: str
    sources: list[str]
    gpu: str
    fabric: dict[str, object]
    notes: str = ""
    nvlink_domain: int | None = None
    cloud: dict[str, object] | None = None
    references: list[dict[str, object]] = field(default_factory=list)
    lines_nodes: list[str] = field(default_factory=list)
    lines_links: list[str] = field(default_factory=list)

    def node(
        self,
        nid: str,
        kind: str,
        *,
        model: str = "",
        label: str = "",
        tray: int | None = None,
    ) -> None:
        out = ["[[node]]", f"id = {_q(nid)}", f"kind = {_q(kind)}"]
        if model:
            out.append(f"model = {_q(model)}")
        if label:
            out.append(f"label = {_q(label)}")
        if tray is not None:
            out.append(f"tray = {tray}")
        self.lines_nodes.append("\n".join(out))

    def link(self, a: str, b: str, tech: str, count: int = 1) -> None:
        out = ["[[link]]", f"a = {_q(a)}", f"b = {_q(b)}", f"tech = {_q(tech)}"]
        if count != 1:
            out.append(f"count = {count}")
        self.lines_links.append("\n".join(out))

    def comment(self, text: str) -> None:
        self.lines_links.append(f"\n# {text}")

    def text(self) -> str:
        lines = [HEADER, "[system]", f"name = {_q(self.name)}"]
        lines.append(f"description = {_q(self.description)}")
        lines.append("sources = [")
        lines += [f"  {_q(s)}," for s in self.sources]
        lines.append("]")
        lines.append(f"gpu = {_q(self.gpu)}")
        if self.nvlink_domain is not None:
            lines.append(f"nvlink_domain = {self.nvlink_domain}")
        if self.notes:
            lines.append(f"notes = {_q(self.notes)}")
        lines.append("[system.fabric]")
        for k, v in self.fabric.items():
            lines.append(f"{k} = {_q(v) if isinstance(v, str) else v}")
        if self.cloud is not None:
            lines.append("[system.cloud]")
            for k, v in self.cloud.items():
                lines.append(f"{k} = {_toml_value(v)}")
        for ref in self.references:
            lines.append("[[system.reference]]")
            for k, v in ref.items():
                lines.append(f"{k} = {_toml_value(v)}")
        lines.append("")
        lines += self.lines_nodes
        lines += self.lines_links
        return "\n".join(lines).rstrip() + "\n"


# ----------------------------------------------------------------------------------- racks

NVL72_SOURCES = [
    "NVIDIA DGX GB200 user guide, hardware: 72-GPU NVLink domain per rack, 18 1RU compute trays of 2 Grace CPUs and 4 Blackwell GPUs, 9 1RU NVLink switch trays",
    "NVIDIA GB200 NVL72 datasheet (2024): fifth-generation NVLink 1.8 TB/s per GPU, 130 TB/s per rack, 72 GPUs in one NVLink domain with NVLink SHARP (in-switch reduction); NVLink-C2C 900 GB/s between each Grace CPU and its 2 GPUs",
    "NVIDIA multi-node NVLink systems tuning guide, 'Understanding your Grace-Blackwell systems': 72x1 reference configuration, compute tray topology, one ConnectX NIC per GPU for the compute network",
    "nvidia-smi topo -m on GB200 compute trays (e.g. sgl-project/sglang issue #11208, 2025): NV18 between the tray's GPUs, SYS between GPUs and NICs: the NICs hang off the Grace CPUs' PCIe, GPUDirect RDMA crosses NVLink-C2C",
]


def nvl72(
    name: str,
    gpu: str,
    *,
    description: str,
    nic_label: str,
    network: str,
    leaf_radix: int,
    cx8: bool,
    extra_sources: list[str],
    notes: str,
    cloud: dict[str, object] | None = None,
) -> System:
    """A 72-GPU NVLink rack: 18 compute trays (2 Grace + 4 GPUs + 4 NICs), the NVLink switch
    trays as one aggregate switch (18 NVLink 5 ports per GPU), one NIC per GPU."""
    s = System(
        name=name,
        description=description,
        sources=[*NVL72_SOURCES, *extra_sources],
        gpu=gpu,
        nvlink_domain=72,
        notes=notes,
        fabric={
            "network": network,
            "topology": "fat-tree",
            "nics_per_node": 72,
            "oversubscription": 1.0,
            "leaf_radix": leaf_radix,
        },
        cloud=cloud,
    )
    s.node(
        "nvswitch0", "nvswitch", label="9 NVLink switch trays, 18 NVLink Switch chips (aggregate)"
    )
    for c in range(36):
        s.node(
            f"cpu{c}",
            "cpu",
            model="NVIDIA Grace",
            label="Grace CPU, 72 Arm Neoverse V2 cores",
            tray=c // 2,
        )
    for g in range(72):
        s.node(f"gpu{g}", "gpu", tray=g // 4)
    if cx8:
        for g in range(72):
            s.node(
                f"pcie_sw{g}",
                "pcie_switch",
                label="ConnectX-8 integrated PCIe Gen6 switch",
                tray=g // 4,
            )
    for g in range(72):
        s.node(f"nic{g}", "nic", label=nic_label, tray=g // 4)
    s.comment(
        "NVLink: 18 NVLink 5 ports per GPU, one to each NVLink Switch chip of the 9 switch trays"
    )
    for g in range(72):
        s.link(f"gpu{g}", "nvswitch0", "nvswitch-v4", 18)
    s.comment("NVLink-C2C: each Grace CPU to its 2 GPUs (one GB200/GB300 superchip half-tray)")
    for g in range(72):
        s.link(f"cpu{g // 2}", f"gpu{g}", "nvlink-c2c")
    if cx8:
        s.comment(
            "ConnectX-8: GPU and NIC port under the SuperNIC's PCIe Gen6 switch, the switch on its Grace CPU"
        )
        for g in range(72):
            s.link(f"gpu{g}", f"pcie_sw{g}", "pcie6-x16")
            s.link(f"pcie_sw{g}", f"nic{g}", "pcie6-x16")
            s.link(f"pcie_sw{g}", f"cpu{g // 2}", "pcie5-x16")
    else:
        s.comment("ConnectX-7: each NIC on a PCIe Gen5 x16 port of its Grace CPU")
        for g in range(72):
            s.link(f"cpu{g // 2}", f"nic{g}", "pcie5-x16")
    return s


GB200_DESC = "NVIDIA GB200 NVL72 rack: 72 GB200 Blackwell GPUs and 36 Grace CPUs in 18 compute trays, one 72-GPU NVLink domain through 9 NVLink switch trays (1.8 TB/s per GPU, NVLink SHARP), 72 ConnectX-7 400 Gb/s NICs (one per GPU) for the scale-out fabric"
GB300_DESC = "NVIDIA GB300 NVL72 rack: 72 Blackwell Ultra GPUs and 36 Grace CPUs in 18 compute trays, one 72-GPU NVLink domain through 9 NVLink switch trays (1.8 TB/s per GPU, NVLink SHARP), 72 ConnectX-8 800 Gb/s SuperNICs (one per GPU, PCIe Gen6) for the scale-out fabric"
RACK_NOTES = "perfmodel's server is the NVLink domain: one rack is one server, --nodes N joins N racks over the scale-out fabric. Tensor and expert parallel groups of up to 72 GPUs stay inside NVLink; NCCL treats the rack as one NVLink clique (MNNVL), so NVLS runs across all 72 GPUs. The NVLink switch trays are one aggregate switch node."


def gb200_nvl72() -> System:
    s = nvl72(
        "gb200-nvl72",
        "GB200-186GB",
        description=GB200_DESC,
        nic_label="ConnectX-7 400 Gb/s",
        network="ib-ndr",
        leaf_radix=32,
        cx8=False,
        extra_sources=[
            "NVIDIA DGX SuperPOD reference architecture (DGX GB200): NDR 400 Gb/s InfiniBand compute fabric, one ConnectX-7 per GPU; Quantum-2 QM9700 leaf switches (64 x 400 Gb/s ports: 32 down, 32 up at 1:1)",
        ],
        notes=RACK_NOTES,
    )
    s.references.append(
        {
            "op": "allreduce",
            "gpus": 72,
            "nodes": 1,
            "size_bytes": 8 * 2**30,
            "busbw_GBps": 834.57,
            "source": "coreweave/nccl-tests README 'Expected Performance', GB200 NVL72 (log first posted in pull request #43, 2025-02-20): all_reduce_perf over a full rack (72 ranks), 8 GiB out-of-place busbw 834.57 GB/s (846.82 in place); the README states the job of commit bee97e7 (NCCL 2.26.2, NCCL_NVLS_ENABLE=0, NCCL_COLLNET_ENABLE=0), while pull request #43's job ran NCCL 2.25.1 with NVLS on: whether NVLS ran is not stated, the README's job is taken",
            "nccl_env": {"NCCL_COLLNET_ENABLE": "0", "NCCL_NVLS_ENABLE": "0"},
        }
    )
    return s


def gb300_nvl72() -> System:
    return nvl72(
        "gb300-nvl72",
        "GB300-288GB",
        description=GB300_DESC,
        nic_label="ConnectX-8 SuperNIC 800 Gb/s",
        network="ib-xdr",
        leaf_radix=72,
        cx8=True,
        extra_sources=[
            "NVIDIA Enterprise Reference Architecture 'NVL72 AI factory' (GB300 NVL72), components: 18 compute trays of 4 Blackwell Ultra GPUs and 2 Grace CPUs, 2 mezzanine boards with 2 ConnectX-8 each (4 per tray), 9 NVSwitch trays",
            "NVIDIA Quantum-X800 InfiniBand (XDR) switch: 144 ports of 800 Gb/s (72 down, 72 up at 1:1)",
        ],
        notes=RACK_NOTES,
    )


# ------------------------------------------------------------------------ 8-GPU NVIDIA servers


def nvswitch_server(
    name: str,
    gpu: str,
    *,
    description: str,
    sources: list[str],
    cpu_model: str,
    cpu_label: str,
    socket_tech: str,
    socket_count: int,
    nvswitch_tech: str,
    nvswitch_label: str,
    host_pcie: str,
    gpu_pcie: str,
    nic_label: str,
    network: str,
    nics: int = 8,
    fabric_topology: str = "rail",
    leaf_radix: int = 32,
    notes: str = "",
    cloud: dict[str, object] | None = None,
    cx8: bool = False,
) -> System:
    """8 GPUs on an NVSwitch baseboard, 2 CPUs, one PCIe switch per GPU (``nics`` = 8: one NIC
    each) or per GPU pair (``nics`` = 4: A3 High's shared NICs)."""
    s = System(
        name=name,
        description=description,
        sources=sources,
        gpu=gpu,
        notes=notes,
        fabric={
            "network": network,
            "topology": fabric_topology,
            "nics_per_node": nics,
            "oversubscription": 1.0,
            "leaf_radix": leaf_radix,
        },
        cloud=cloud,
    )
    per_nic = 8 // nics
    switch_label = "ConnectX-8 integrated PCIe Gen6 switch" if cx8 else "PCIe Gen5 switch"
    for c in range(2):
        s.node(f"cpu{c}", "cpu", model=cpu_model, label=cpu_label)
    s.node("nvswitch0", "nvswitch", label=nvswitch_label)
    for k in range(nics):
        s.node(f"pcie_sw{k}", "pcie_switch", label=switch_label)
    for g in range(8):
        s.node(f"gpu{g}", "gpu")
    for k in range(nics):
        s.node(f"nic{k}", "nic", label=nic_label)
    s.comment("Socket interconnect")
    s.link("cpu0", "cpu1", socket_tech, socket_count)
    s.comment(
        f"PCIe: {per_nic} GPU(s) and one NIC under each switch; the first half of the switches on cpu0"
    )
    for k in range(nics):
        s.link(f"cpu{k * 2 // nics}", f"pcie_sw{k}", host_pcie)
        for g in range(k * per_nic, (k + 1) * per_nic):
            s.link(f"pcie_sw{k}", f"gpu{g}", gpu_pcie)
        s.link(f"pcie_sw{k}", f"nic{k}", gpu_pcie)
    s.comment("NVSwitch: 18 NVLink ports per GPU")
    for g in range(8):
        s.link(f"gpu{g}", "nvswitch0", nvswitch_tech, 18)
    return s


def hgx_b300() -> System:
    return nvswitch_server(
        "hgx-b300",
        "B300-SXM-288GB",
        description="NVIDIA HGX B300 (as in the DGX B300): 8x B300 288GB, 2 NVLink 5 Switch chips (aggregate, 18 NVLink 5 ports per GPU, 900 GB/s per direction), 2x Intel Xeon 6776P, 8x ConnectX-8 SuperNIC 800 Gb/s on the baseboard (one per GPU, PCIe Gen6 switch integrated)",
        sources=[
            "NVIDIA HGX B300 specifications (2025): 8x Blackwell Ultra, NVLink 5 Switch, 1.8 TB/s GPU-to-GPU, 14.4 TB/s total NVLink, 1.6 TB/s networking (8 x 800 Gb/s)",
            "NVIDIA DGX B300 user guide (2025): 2x Intel Xeon 6776P, 8x ConnectX-8 SuperNICs on the GPU baseboard (800 Gb/s each), 2x BlueField-3 for storage",
        ],
        cpu_model="Intel Xeon 6776P",
        cpu_label="Intel Xeon 6776P",
        socket_tech="upi-16",
        socket_count=4,
        nvswitch_tech="nvswitch-v4",
        nvswitch_label="2x NVLink 5 Switch (aggregate)",
        host_pcie="pcie5-x16",
        gpu_pcie="pcie6-x16",
        nic_label="ConnectX-8 SuperNIC 800 Gb/s",
        network="ib-xdr",
        leaf_radix=72,
        cx8=True,
        notes="Socket link: the catalogue's upi-16 stands for Xeon 6's UPI 2.0 (irrelevant to GPU traffic, which uses NVLink). CPU model not in the CPU catalogue (free text).",
    )


# --------------------------------------------------------------------------------- AMD OAM


def amd_oam(
    name: str,
    gpu: str,
    xgmi: str,
    *,
    description: str,
    sources: list[str],
    cpu_model: str,
    notes: str,
) -> System:
    """8 AMD Instinct OAM GPUs on a UBB: every GPU pair joined by one Infinity Fabric link (no
    switch), 2 EPYC CPUs, one PCIe Gen5 switch per GPU with its 400 Gb/s NIC."""
    s = System(
        name=name,
        description=description,
        sources=sources,
        gpu=gpu,
        nvlink_domain=8,
        notes=notes,
        fabric={
            "network": "roce-400g",
            "topology": "rail",
            "nics_per_node": 8,
            "oversubscription": 1.0,
            "leaf_radix": 32,
        },
    )
    for c in range(2):
        s.node(f"cpu{c}", "cpu", model=cpu_model)
    for k in range(8):
        s.node(f"pcie_sw{k}", "pcie_switch", label="PCIe Gen5 switch")
    for g in range(8):
        s.node(f"gpu{g}", "gpu")
    for k in range(8):
        s.node(f"nic{k}", "nic", label="400 Gb/s RDMA NIC (RoCE)")
    s.comment("Socket interconnect: 4 xGMI links")
    s.link("cpu0", "cpu1", "xgmi-3", 4)
    s.comment("PCIe Gen5: one switch per GPU with its rail NIC; GPUs 0-3 on cpu0")
    for k in range(8):
        s.link(f"cpu{k // 4}", f"pcie_sw{k}", "pcie5-x16")
        s.link(f"pcie_sw{k}", f"gpu{k}", "pcie5-x16")
        s.link(f"pcie_sw{k}", f"nic{k}", "pcie5-x16")
    s.comment("Infinity Fabric: one link per GPU pair (7 per GPU), no switch")
    for a in range(8):
        for b in range(a + 1, 8):
            s.link(f"gpu{a}", f"gpu{b}", xgmi)
    return s


AMD_PLATFORM_SOURCE = "AMD Instinct MI300X platform data sheet (2023): 8 OAM GPUs on a universal baseboard, each GPU joined to every other by one Infinity Fabric link (7 per GPU, fully connected, no switch), PCIe Gen5 x16 per GPU to the host"
AMD_NOTES = "Collectives run on RCCL: ring (and direct, point to point) algorithms over the mesh; there is no NVLink SHARP. nvlink_domain counts the GPUs joined by Infinity Fabric. The NIC stands for the 400 Gb/s RDMA NIC of typical platforms (ConnectX-7, Broadcom Thor2 or AMD Pensando Pollara 400) on a RoCE rail fabric; give --network ib-ndr for InfiniBand clusters."


def mi300x_8() -> System:
    return amd_oam(
        "mi300x-8",
        "MI300X",
        "xgmi-gfx94",
        description="AMD Instinct MI300X platform: 8x MI300X 192GB on one UBB, full Infinity Fabric mesh (one 64 GB/s-per-direction link per GPU pair), 2x AMD EPYC 9654, PCIe Gen5 switches, 8x 400 Gb/s RDMA NICs",
        sources=[
            AMD_PLATFORM_SOURCE,
            "AMD ROCm documentation, 'MI300X workload optimization' / system architecture: 8 GPUs per node, one NIC per GPU for scale-out",
        ],
        cpu_model="epyc-9654",
        notes=AMD_NOTES,
    )


def mi325x_8() -> System:
    return amd_oam(
        "mi325x-8",
        "MI325X",
        "xgmi-gfx94",
        description="AMD Instinct MI325X platform: 8x MI325X 256GB on one UBB, full Infinity Fabric mesh (one 64 GB/s-per-direction link per GPU pair), 2x AMD EPYC 9654, PCIe Gen5 switches, 8x 400 Gb/s RDMA NICs",
        sources=[
            AMD_PLATFORM_SOURCE,
            "AMD Instinct MI325X platform data sheet (2024): 8 GPUs, 896 GB/s Infinity Fabric per GPU, fully connected",
        ],
        cpu_model="epyc-9654",
        notes=AMD_NOTES,
    )


def mi355x_8() -> System:
    return amd_oam(
        "mi355x-8",
        "MI355X",
        "xgmi-gfx950",
        description="AMD Instinct MI355X platform: 8x MI355X 288GB on one UBB, full Infinity Fabric mesh (one 76.8 GB/s-per-direction link per GPU pair), 2x AMD EPYC 9005, PCIe Gen5 switches, 8x 400 Gb/s RDMA NICs",
        sources=[
            AMD_PLATFORM_SOURCE,
            "AMD Instinct MI355X platform data sheet (2025): 8 GPUs per platform, 1,075 GB/s Infinity Fabric per GPU, fully connected; AMD Pensando Pollara 400 AI NICs",
        ],
        cpu_model="AMD EPYC 9575F",
        notes=AMD_NOTES + " CPU model not in the CPU catalogue (free text).",
    )


# ------------------------------------------------------------------------------ cloud instances

_CLOUD_PRICE_NOTE = "A list price changes: give --price-per-gpu-hour to use yours."


def cloud(
    provider: str,
    instance: str,
    transport: str,
    *,
    gpus_per_instance: int = 8,
    price: float | None = None,
    date: str = "",
    source: str = "",
    region: str = "",
    stale: bool = False,
    high_by: float | None = None,
) -> dict[str, object]:
    out: dict[str, object] = {
        "provider": provider,
        "instance": instance,
        "gpus_per_instance": gpus_per_instance,
        "transport": transport,
    }
    if price is not None:
        out.update(
            price_per_gpu_hour=price,
            price_currency="USD",
            price_date=date,
            price_source=source,
            region=region,
        )
        if stale:
            out["price_stale"] = True
        if high_by is not None:
            out["price_high_by"] = high_by
    return out


def cloud_systems() -> list[System]:
    h100, h200, b200 = "H100-SXM5-80GB", "H200-SXM-141GB", "B200-SXM-180GB"
    sapphire = ("xeon-platinum-8480plus", "Intel Xeon Platinum (Sapphire Rapids)", "upi-16", 4)
    milan = ("AMD EPYC 7R13", "AMD EPYC 7R13 (3rd gen, Milan)", "xgmi-2", 4)
    emerald = (
        "Intel Xeon Platinum 8580 (Emerald Rapids)",
        "Intel Xeon 5th gen (Emerald Rapids)",
        "upi-16",
        4,
    )
    out: list[System] = []

    def mk(
        name: str,
        gpu: str,
        host: tuple[str, str, str, int],
        host_pcie: str,
        *,
        description: str,
        sources: list[str],
        network: str,
        nic_label: str,
        cloud_table: dict[str, object],
        nics: int = 8,
        fabric_topology: str = "fat-tree",
        notes: str = "",
    ) -> System:
        hopper = gpu in (h100, h200)
        return nvswitch_server(
            name,
            gpu,
            description=description,
            sources=sources,
            cpu_model=host[0],
            cpu_label=host[1],
            socket_tech=host[2],
            socket_count=host[3],
            nvswitch_tech="nvswitch-v3" if hopper else "nvswitch-v4",
            nvswitch_label="4x NVSwitch gen3 (aggregate)"
            if hopper
            else "2x NVLink 5 Switch (aggregate)",
            host_pcie=host_pcie,
            gpu_pcie="pcie5-x16",
            nic_label=nic_label,
            network=network,
            nics=nics,
            fabric_topology=fabric_topology,
            notes=(notes + " " if notes else "") + _CLOUD_PRICE_NOTE,
            cloud=cloud_table,
        )

    efa_note = "The EFA interfaces of each GPU are one NIC node of 400 Gb/s (efa-400g). The UltraCluster network is a non-blocking Clos (fat tree at 1:1 here)."
    out.append(
        mk(
            "aws-p5.48xlarge",
            h100,
            milan,
            "pcie4-x16",
            description="AWS EC2 p5.48xlarge: 8x H100 80GB SXM5 (NVSwitch, 900 GB/s NVLink per GPU), 2x AMD EPYC 7R13, 3,200 Gbps EFAv2 (32 x 100 Gb/s, 4 per GPU) with GPUDirect RDMA",
            sources=[
                "AWS EC2 accelerated computing instances, P5: p5.48xlarge 8x H100 (640 GB HBM3), 192 vCPUs (3rd gen AMD EPYC), 3,200 Gbps EFAv2 networking, NVSwitch 900 GB/s",
                "AWS documentation, 'Maximize network bandwidth on P5 instances': 32 EFA network cards, 4 per GPU",
            ],
            network="efa-400g",
            nic_label="4x EFAv2 100 Gb/s (bundled)",
            cloud_table=cloud(
                "aws",
                "p5.48xlarge",
                "EFA v2 (SRD, aws-ofi-nccl libfabric plugin, GPUDirect RDMA)",
                price=12.29,
                date="2023-07-27",
                source="AWS EC2 on-demand price at P5 launch, us-east-1, 98.32 USD per instance-hour / 8 GPUs, as tabulated by The Next Platform, 'H100 GPU Instance Pricing On AWS: Grin And Bear It' (2023-07-27). STALE: AWS cut P4/P5 on-demand prices by up to 45% in June 2025, and no dated figure after the cut was found (searched 2026-11-29: only undated or conflicting secondary pages); with the whole 45% the current price is 6.76 USD per GPU-hour and this one is 1.82x it (costs up to 82% too high); give --price-per-gpu-hour",
                region="us-east-1",
                stale=True,
                high_by=1.82,  # 12.29 / 6.76: the source's note above
            ),
            notes=efa_note + " Host PCIe is Gen4 (EPYC 7R13); GPU and NIC sit under Gen5 switches.",
        )
    )
    out.append(
        mk(
            "aws-p5e.48xlarge",
            h200,
            milan,
            "pcie4-x16",
            description="AWS EC2 p5e.48xlarge: 8x H200 141GB SXM (NVSwitch, 900 GB/s NVLink per GPU), 2x AMD EPYC 7R13, 3,200 Gbps EFAv2 (4 x 100 Gb/s per GPU) with GPUDirect RDMA",
            sources=[
                "AWS EC2 accelerated computing instances, P5e: p5e.48xlarge 8x H200 (1,128 GB HBM3e), 192 vCPUs (3rd gen AMD EPYC), 3,200 Gbps EFAv2"
            ],
            network="efa-400g",
            nic_label="4x EFAv2 100 Gb/s (bundled)",
            cloud_table=cloud(
                "aws",
                "p5e.48xlarge",
                "EFA v2 (SRD, aws-ofi-nccl libfabric plugin, GPUDirect RDMA)",
                price=5.408,
                date="2024-12-31",
                source="AWS EC2 Capacity Blocks for ML pricing page (rates in effect until 2025-01-01), US East (Ohio): effective accelerator hourly rate 5.408 USD per H200 (a Capacity Block reservation rate: no on-demand list price was published for p5e). STALE: the page revises Capacity Block rates (its table was due to change on 2025-01-01) and no later rate was found (searched 2026-11-29), so how far this one is off is not known; give --price-per-gpu-hour",
                region="us-east-2",
                stale=True,
            ),
            notes=efa_note,
        )
    )
    out.append(
        mk(
            "aws-p5en.48xlarge",
            h200,
            sapphire,
            "pcie5-x16",
            description="AWS EC2 p5en.48xlarge: 8x H200 141GB SXM (NVSwitch), 2x Intel Xeon Sapphire Rapids, 3,200 Gbps EFAv3 (16 x 200 Gb/s, 2 per GPU) with GPUDirect RDMA, PCIe Gen5 host",
            sources=[
                "AWS EC2 accelerated computing instances, P5en: p5en.48xlarge 8x H200, 192 vCPUs (4th gen Intel Xeon), 3,200 Gbps EFAv3, PCIe Gen5 between CPU and GPU"
            ],
            network="efa-400g",
            nic_label="2x EFAv3 200 Gb/s (bundled)",
            cloud_table=cloud(
                "aws",
                "p5en.48xlarge",
                "EFA v3 (SRD, aws-ofi-nccl libfabric plugin, GPUDirect RDMA)",
            ),
            notes=efa_note
            + " No dated list price was found for this instance; give --price-per-gpu-hour.",
        )
    )
    out.append(
        mk(
            "aws-p6-b200.48xlarge",
            b200,
            emerald,
            "pcie5-x16",
            description="AWS EC2 p6-b200.48xlarge: 8x B200 180GB (NVLink 5 Switch, 1.8 TB/s per GPU), 2x Intel Xeon Emerald Rapids, 3,200 Gbps EFAv4 (8 x 400 Gb/s) with GPUDirect RDMA",
            sources=[
                "AWS EC2 accelerated computing instances, P6-B200: p6-b200.48xlarge 8x B200 (1,440 GB HBM3e), 192 vCPUs (5th gen Intel Xeon), 3,200 Gbps EFAv4, NVLink 1.8 TB/s per GPU"
            ],
            network="efa-400g",
            nic_label="EFAv4 400 Gb/s",
            cloud_table=cloud(
                "aws",
                "p6-b200.48xlarge",
                "EFA v4 (SRD, aws-ofi-nccl libfabric plugin, GPUDirect RDMA)",
            ),
            notes=efa_note
            + " No dated list price was found for this instance; give --price-per-gpu-hour. CPU model not in the CPU catalogue (free text).",
        )
    )
    gcp_src = "Google Cloud documentation, 'Accelerator-optimized machine family' and 'GPU network bandwidths' (A3, A3 Mega, A3 Ultra, A4 machine types)"
    out.append(
        mk(
            "gcp-a3-highgpu-8g",
            h100,
            sapphire,
            "pcie5-x16",
            description="Google Cloud A3 High (a3-highgpu-8g): 8x H100 80GB SXM5 (NVSwitch), 2x Intel Xeon Sapphire Rapids, 4x 200 Gb/s GPU NICs with GPUDirect-TCPX (each NIC shared by 2 GPUs, 800 Gbps per VM)",
            sources=[
                gcp_src
                + ": a3-highgpu-8g, 8 H100, 4 x 200 Gbps GPU NICs (GPUDirect-TCPX), 800 Gbps"
            ],
            network="tcpx-200g",
            nic_label="gVNIC 200 Gb/s (GPUDirect-TCPX)",
            nics=4,
            cloud_table=cloud(
                "gcp", "a3-highgpu-8g", "GPUDirect-TCPX (NCCL net plugin, header-split TCP)"
            ),
            notes="No dated list price was found for this machine type; give --price-per-gpu-hour.",
        )
    )
    a3mega = len(out)
    out.append(
        mk(
            "gcp-a3-megagpu-8g",
            h100,
            sapphire,
            "pcie5-x16",
            description="Google Cloud A3 Mega (a3-megagpu-8g): 8x H100 80GB SXM5 (NVSwitch), 2x Intel Xeon Sapphire Rapids, 8x 200 Gb/s GPU NICs with GPUDirect-TCPXO (1,600 Gbps per VM)",
            sources=[
                gcp_src
                + ": a3-megagpu-8g, 8 H100, 8 x 200 Gbps GPU NICs (GPUDirect-TCPXO), 1,600 Gbps"
            ],
            network="tcpxo-200g",
            nic_label="200 Gb/s NIC (GPUDirect-TCPXO)",
            cloud_table=cloud(
                "gcp",
                "a3-megagpu-8g",
                "GPUDirect-TCPXO (NCCL FasTrak net plugin, NIC-offloaded TCP)",
            ),
            notes="No dated list price was found for this machine type; give --price-per-gpu-hour. Checked against a published 2-VM all_reduce (tests/fixtures/nccl/a3mega-h100-2node-all_reduce.txt).",
        )
    )
    out[a3mega].references.append(
        {
            "op": "allreduce",
            "gpus": 16,
            "nodes": 2,
            "size_bytes": 8 * 2**30,
            "busbw_GBps": 338.82,
            "source": "github.com/lessizzmore/create-a3mega-ztan-fork @02dd8f4 ztan-NCCL-test-result (tests/fixtures/nccl/a3mega-h100-2node-all_reduce.txt): all_reduce_perf on 2 x a3-megagpu-8g, 8 GiB busbw 338.82 GB/s; the tcpxo-200g efficiency was read off this log, so it checks the model's form, not an independent number",
        }
    )
    out.append(
        mk(
            "gcp-a3-ultragpu-8g",
            h200,
            emerald,
            "pcie5-x16",
            description="Google Cloud A3 Ultra (a3-ultragpu-8g): 8x H200 141GB (NVSwitch), 2x Intel Xeon Emerald Rapids, 8x ConnectX-7 400 Gb/s with GPUDirect RDMA over RoCE (3,200 Gbps per VM)",
            sources=[
                gcp_src
                + ": a3-ultragpu-8g, 8 H200, 8 x 400 Gbps ConnectX-7 NICs, RDMA over Converged Ethernet (RoCE), 3,200 Gbps"
            ],
            network="roce-400g",
            nic_label="ConnectX-7 400 Gb/s (RoCE)",
            fabric_topology="rail",
            cloud_table=cloud("gcp", "a3-ultragpu-8g", "GPUDirect RDMA over RoCE v2 (ConnectX-7)"),
            notes="No dated list price was found for this machine type; give --price-per-gpu-hour. CPU model not in the CPU catalogue (free text).",
        )
    )
    out.append(
        mk(
            "gcp-a4-highgpu-8g",
            b200,
            emerald,
            "pcie5-x16",
            description="Google Cloud A4 (a4-highgpu-8g): 8x B200 180GB (NVLink 5 Switch, 1.8 TB/s per GPU), 2x Intel Xeon Emerald Rapids, 8x ConnectX-7 400 Gb/s with GPUDirect RDMA over RoCE (3,200 Gbps per VM)",
            sources=[
                gcp_src + ": a4-highgpu-8g, 8 B200, 8 x 400 Gbps ConnectX-7 NICs, RoCE, 3,200 Gbps"
            ],
            network="roce-400g",
            nic_label="ConnectX-7 400 Gb/s (RoCE)",
            fabric_topology="rail",
            cloud_table=cloud("gcp", "a4-highgpu-8g", "GPUDirect RDMA over RoCE v2 (ConnectX-7)"),
            notes="No dated list price was found for this machine type; give --price-per-gpu-hour. CPU model not in the CPU catalogue (free text).",
        )
    )
    az_src = "Microsoft Azure documentation, ND-series virtual machines"
    for name, gpu, inst, label in (
        ("azure-nd-h100-v5", h100, "Standard_ND96isr_H100_v5", "ND H100 v5"),
        ("azure-nd-h200-v5", h200, "Standard_ND96isr_H200_v5", "ND H200 v5"),
    ):
        gpu_name = "H100 80GB SXM5" if gpu == h100 else "H200 141GB"
        out.append(
            mk(
                name,
                gpu,
                sapphire,
                "pcie5-x16",
                description=f"Microsoft Azure {label} ({inst}): 8x {gpu_name} (NVSwitch), 2x Intel Xeon Sapphire Rapids, 8x ConnectX-7 NDR 400 Gb/s InfiniBand (one per GPU, 3.2 Tb/s per VM)",
                sources=[
                    f"{az_src}: {label}, 8 GPUs interconnected by NVLink 4.0, 400 Gb/s NVIDIA Quantum-2 ConnectX-7 InfiniBand per GPU, 3.2 Tb/s per VM, 4th gen Intel Xeon"
                ],
                network="ib-ndr",
                nic_label="ConnectX-7 NDR 400 Gb/s",
                fabric_topology="rail",
                cloud_table=cloud("azure", inst, "InfiniBand NDR (GPUDirect RDMA)"),
                notes="No dated list price was found for this VM size; give --price-per-gpu-hour.",
            )
        )
    out.append(
        nvl72(
            "azure-nd-gb200-v6",
            "GB200-186GB",
            description="Microsoft Azure ND GB200 v6: GB200 NVL72 racks rented as VMs of 4 GPUs (Standard_ND128isr_NDR_GB200_v6); one system here is one rack of 18 VMs, a 72-GPU NVLink domain, with one ConnectX-7 NDR 400 Gb/s InfiniBand NIC per GPU",
            nic_label="ConnectX-7 NDR 400 Gb/s",
            network="ib-ndr",
            leaf_radix=32,
            cx8=False,
            extra_sources=[
                f"{az_src}: ND GB200 v6, 4 GB200 GPUs and 2 Grace CPUs per VM, NVLink across the rack's 72 GPUs, 4 x 400 Gb/s NDR InfiniBand per VM",
            ],
            notes=RACK_NOTES
            + " --nodes counts racks (18 VMs each). No dated list price was found; give --price-per-gpu-hour.",
            cloud=cloud(
                "azure",
                "Standard_ND128isr_NDR_GB200_v6",
                "InfiniBand NDR (GPUDirect RDMA)",
                gpus_per_instance=4,
            ),
        )
    )
    return out


SYSTEMS: tuple[Callable[[], System | list[System]], ...] = (
    gb200_nvl72,
    gb300_nvl72,
    hgx_b300,
    mi300x_8,
    mi325x_8,
    mi355x_8,
    cloud_systems,
)


def all_systems() -> dict[str, str]:
    """``{file name: text}`` of every generated system."""
    out: dict[str, str] = {}
    for make in SYSTEMS:
        made = make()
        for s in made if isinstance(made, list) else [made]:
            out[f"{s.name}.toml"] = s.text()
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if a file differs")
    args = parser.parse_args(argv)
    stale = []
    for name, text in all_systems().items():
        path = OUT / name
        if args.check:
            if not path.exists() or path.read_text() != text:
                stale.append(name)
        else:
            path.write_text(text)
    if stale:
        print("stale: " + ", ".join(stale), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
