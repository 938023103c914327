"""Drawing a topology as a PNG (matplotlib, headless Agg backend).

Layout: fabric switches on top, then per server its CPUs, PCIe switches (upper above leaf),
GPUs and NICs in one row (ordered by the PCIe tree, so devices of one switch sit together) and
NVSwitches at the bottom. Servers sit side by side. Direct GPU-GPU NVLinks are drawn as arcs
under the GPU row. Edge width grows with the square root of the effective bandwidth; colour gives
the link family.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import networkx as nx

from perfmodel._io import atomic_write
from perfmodel.errors import ConfigError
from perfmodel.hardware.links import LinkFamily
from perfmodel.topology.model import Topology
from perfmodel.topology.schema import NodeKind, effective_bandwidth
from perfmodel.units import GB

FAMILY_COLOURS = {
    LinkFamily.PCIE: "#1f77b4",
    LinkFamily.NVLINK: "#2ca02c",
    LinkFamily.NVSWITCH: "#17632a",
    LinkFamily.XGMI: "#d62728",
    LinkFamily.CPU: "#9467bd",
    LinkFamily.INFINIBAND: "#ff7f0e",
    LinkFamily.ETHERNET: "#8c564b",
    LinkFamily.HOST: "#7f7f7f",
}
KIND_STYLE = {
    NodeKind.GPU: ("s", "#76b900", 520),
    NodeKind.CPU: ("s", "#4c72b0", 700),
    NodeKind.PCIE_SWITCH: ("D", "#a6cee3", 260),
    NodeKind.NVSWITCH: ("h", "#17632a", 700),
    NodeKind.NIC: ("^", "#ff9f40", 300),
    NodeKind.NETWORK_SWITCH: ("o", "#bbbbbb", 500),
}
_Y = {
    NodeKind.CPU: 4.0,
    NodeKind.GPU: 1.5,
    NodeKind.NIC: 1.5,
    NodeKind.NVSWITCH: 0.0,
}


def _natural(s: str) -> tuple[object, ...]:
    return tuple(int(t) if t.isdigit() else t for t in re.split(r"(\d+)", s))


def edge_width(bandwidth_Bps: float) -> float:
    """Line width (points) for an effective bandwidth: ``min(10, 0.6 + 0.45 sqrt(GB/s))``."""
    return min(10.0, 0.6 + 0.45 * math.sqrt(bandwidth_Bps / GB))


def layout(topo: Topology) -> dict[str, tuple[float, float]]:
    """Positions (x, y) of every node (see the module docstring)."""
    g = topo.graph
    pos: dict[str, tuple[float, float]] = {}
    servers = sorted({d["server"] for _, d in g.nodes(data=True) if d["server"] >= 0})
    offset = 0.0
    for s in servers:
        members = [n for n, d in g.nodes(data=True) if d["server"] == s]
        width = _layout_server(g, members, offset, pos)
        offset += width + 2.0
    # fabric switches: above, centred on what they connect
    fabric = [n for n, d in g.nodes(data=True) if d["server"] < 0]
    for n in sorted(fabric, key=lambda n: (g.nodes[n].get("tier", 0), _natural(n))):
        below = [m for m in g.neighbors(n) if m in pos]
        x = sum(pos[m][0] for m in below) / len(below) if below else 0.0
        pos[n] = (x, 6.0 + 1.2 * int(g.nodes[n].get("tier", 0)))
    _spread(pos, [n for n in fabric], min_gap=1.2)
    return pos


def _layout_server(
    g: nx.Graph, members: list[str], offset: float, pos: dict[str, tuple[float, float]]
) -> float:
    kind = {n: g.nodes[n]["kind"] for n in members}
    tree_kinds = {NodeKind.CPU, NodeKind.PCIE_SWITCH, NodeKind.GPU, NodeKind.NIC}
    visited: set[str] = set()
    leaves: list[str] = []
    depth: dict[str, int] = {}
    children: dict[str, list[str]] = {}

    def visit(n: str, d: int) -> None:
        visited.add(n)
        depth[n] = d
        children[n] = []
        if kind[n] in (NodeKind.GPU, NodeKind.NIC):
            leaves.append(n)
            return
        nbrs = [
            m
            for m in g.neighbors(n)
            if m in kind
            and m not in visited
            and kind[m] in tree_kinds
            and kind[m] is not NodeKind.CPU
        ]
        order = {NodeKind.PCIE_SWITCH: 0, NodeKind.GPU: 1, NodeKind.NIC: 2}
        for m in sorted(nbrs, key=lambda m: (order.get(kind[m], 3), _natural(m))):
            if m not in visited:
                children[n].append(m)
                visit(m, d + 1)

    cpus = sorted((n for n in members if kind[n] is NodeKind.CPU), key=_natural)
    for c in cpus:
        visit(c, 0)
    for n in sorted(members, key=_natural):  # devices not under any CPU (odd graphs)
        if n not in visited and kind[n] in (NodeKind.GPU, NodeKind.NIC):
            leaves.append(n)
            visited.add(n)
            children[n] = []
    for i, n in enumerate(leaves):
        pos[n] = (offset + i, _Y[kind[n]])

    def place(n: str) -> float:
        if n in pos:
            return pos[n][0]
        xs = [place(c) for c in children.get(n, [])]
        x = sum(xs) / len(xs) if xs else offset
        if kind[n] is NodeKind.CPU:
            y = _Y[NodeKind.CPU]
        else:
            y = 3.3 - 0.7 * max(0, depth[n] - 1)
        pos[n] = (x, y)
        return x

    for c in cpus:
        place(c)
    for n in members:
        if n in pos:
            continue
        if kind[n] is NodeKind.NVSWITCH:
            gp = [pos[m][0] for m in g.neighbors(n) if m in pos]
            pos[n] = (sum(gp) / len(gp) if gp else offset, _Y[NodeKind.NVSWITCH])
        elif kind[n] is NodeKind.PCIE_SWITCH:
            place(n)
    _spread(pos, [n for n in members if kind[n] is NodeKind.NVSWITCH], min_gap=1.5)
    _spread(pos, cpus, min_gap=1.5)
    return float(max(len(leaves) - 1, 1))


def _spread(pos: dict[str, tuple[float, float]], nodes: list[str], *, min_gap: float) -> None:
    """Push apart nodes of one row that would overlap (keeping their order)."""
    rows: dict[float, list[str]] = {}
    for n in nodes:
        rows.setdefault(pos[n][1], []).append(n)
    for y, row in rows.items():
        row.sort(key=lambda n: pos[n][0])
        for i in range(1, len(row)):
            a, b = row[i - 1], row[i]
            if pos[b][0] - pos[a][0] < min_gap:
                pos[b] = (pos[a][0] + min_gap, y)


def draw_topology(topo: Topology, path: str | Path, *, title: str | None = None) -> Path:
    """Draw ``topo`` to a PNG file and return its path.

    GPUs (green squares), CPUs (blue squares), PCIe switches (light blue diamonds), NVSwitches
    (dark green hexagons), NICs (orange triangles) and network switches (grey circles); edges
    coloured by link family with width ``0.6 + 0.45 sqrt(GB/s)`` of the effective bandwidth
    (bundles drawn as one edge, labelled ``xN`` when ``N > 1``).
    """
    out = Path(path)
    if out.suffix.lower() != ".png":
        raise ConfigError(f"-o {out}: only .png output is supported", value=str(out), where="-o")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    g = topo.graph
    pos = layout(topo)
    xs = [p[0] for p in pos.values()]
    ys = [p[1] for p in pos.values()]
    width_in = min(max(8.0, 0.75 * (max(xs) - min(xs) + 3)), 48.0)
    height_in = 6.5 if max(ys) < 6 else 8.5
    fig, ax = plt.subplots(figsize=(width_in, height_in), dpi=110)
    _draw_edges(ax, g, pos)
    _draw_nodes(ax, g, pos, many=topo.num_nodes > 1)
    _draw_legends(ax, g)
    ax.set_title(
        title or f"{topo.name}: {topo.num_gpus}x {topo.gpu_spec().name}",
        fontsize=11,
        parse_math=False,  # user text: a "$" is a dollar sign (mathtext raised on "$x^")
    )
    ax.set_xlim(min(xs) - 1.5, max(xs) + 1.5)
    ax.set_ylim(min(ys) - 1.6, max(ys) + 1.6)
    ax.axis("off")
    fig.tight_layout()
    with atomic_write(out, "wb") as fh:
        fig.savefig(fh, format="png")
    plt.close(fig)
    return out


def _draw_edges(ax: Any, g: Any, pos: dict[str, tuple[float, float]]) -> None:
    """Every link as a line (an arc under the GPU row between two GPUs), coloured by family,
    its width by effective bandwidth, a bundle labelled ``xN``."""
    for u, v, d in g.edges(data=True):
        fam = d["family"]
        bw = effective_bandwidth(g, u, v)
        colour = FAMILY_COLOURS.get(fam, "#333333")
        lw = edge_width(bw)
        ku, kv = g.nodes[u]["kind"], g.nodes[v]["kind"]
        (x1, y1), (x2, y2) = pos[u], pos[v]
        if ku is NodeKind.GPU and kv is NodeKind.GPU:
            # quadratic Bezier arc under the GPU row, apex depth 0.35 + 0.12 |dx| (data units)
            depth = 0.35 + 0.12 * abs(x2 - x1)
            mx, my = (x1 + x2) / 2, (y1 + y2) / 2
            cx, cy = mx, my - 2 * depth
            ts = [i / 40 for i in range(41)]
            bx = [(1 - s) ** 2 * x1 + 2 * (1 - s) * s * cx + s**2 * x2 for s in ts]
            by = [(1 - s) ** 2 * y1 + 2 * (1 - s) * s * cy + s**2 * y2 for s in ts]
            ax.plot(bx, by, color=colour, lw=lw, alpha=0.75, zorder=1, solid_capstyle="round")
            _bundle_label(ax, mx, my - depth, int(d["count"]), colour)
            continue
        alpha = 0.45 if LinkFamily(fam) in (LinkFamily.INFINIBAND, LinkFamily.ETHERNET) else 0.85
        ax.plot(
            [x1, x2], [y1, y2], color=colour, lw=lw, alpha=alpha, zorder=1, solid_capstyle="round"
        )
        _bundle_label(ax, (x1 + x2) / 2, (y1 + y2) / 2, int(d["count"]), colour)


def _bundle_label(ax: Any, x: float, y: float, count: int, colour: str) -> None:
    """``xN`` at ``(x, y)`` for a bundle of ``N > 1`` links."""
    if count > 1:
        ax.text(
            x,
            y,
            f"x{count}",
            fontsize=7,
            ha="center",
            va="center",
            color=colour,
            zorder=4,
            bbox={"boxstyle": "round,pad=0.1", "fc": "white", "ec": "none"},
        )


def _draw_nodes(ax: Any, g: Any, pos: dict[str, tuple[float, float]], *, many: bool) -> None:
    """Every node as its kind's marker with its label (smaller for several servers)."""
    for kind, (marker, colour, size) in KIND_STYLE.items():
        nodes = [n for n, d in g.nodes(data=True) if d["kind"] is kind]
        if not nodes:
            continue
        ax.scatter(
            [pos[n][0] for n in nodes],
            [pos[n][1] for n in nodes],
            marker=marker,
            s=size * (0.7 if many else 1.0),
            c=colour,
            edgecolors="black",
            linewidths=0.6,
            zorder=3,
        )
        for n in nodes:
            d = g.nodes[n]
            label = d["local_id"] if d["server"] >= 0 else n.split("/")[-1]
            if kind is NodeKind.GPU:
                label = f"GPU{d['gpu_index']}"
            fs = 6 if many else 8
            dy = 0.36
            if kind is NodeKind.NVSWITCH:
                dy = -0.45
            ax.text(
                pos[n][0], pos[n][1] + dy, label, fontsize=fs, ha="center", va="center", zorder=5
            )


def _draw_legends(ax: Any, g: Any) -> None:
    """Two legends: the node kinds drawn, and the link families with the width of their
    widest link."""
    from matplotlib.lines import Line2D

    kind_handles = [
        Line2D(
            [],
            [],
            marker=m,
            color="none",
            markerfacecolor=c,
            markeredgecolor="black",
            markersize=9,
            label=k.value.replace("_", " "),
        )
        for k, (m, c, _) in KIND_STYLE.items()
        if any(d["kind"] is k for _, d in g.nodes(data=True))
    ]
    fam_bw: dict[LinkFamily, list[float]] = {}
    for u, v, d in g.edges(data=True):
        fam_bw.setdefault(d["family"], []).append(effective_bandwidth(g, u, v))
    fam_handles = [
        Line2D(
            [],
            [],
            color=FAMILY_COLOURS.get(f, "#333"),
            lw=edge_width(max(bws)),
            label=f"{f.value} (up to {max(bws) / GB:.0f} GB/s)",
        )
        for f, bws in sorted(fam_bw.items(), key=lambda kv: -max(kv[1]))
    ]
    leg1 = ax.legend(
        handles=kind_handles,
        loc="upper left",
        fontsize=8,
        title="devices",
        title_fontsize=8,
        framealpha=0.9,
    )
    ax.add_artist(leg1)
    ax.legend(
        handles=fam_handles,
        loc="upper right",
        fontsize=8,
        framealpha=0.9,
        title="links (width ~ sqrt of effective bandwidth per direction)",
        title_fontsize=8,
    )
