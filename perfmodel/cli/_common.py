"""Arguments shared by several subcommands: choosing a system, output format."""

from __future__ import annotations

import argparse

from perfmodel.topology import Topology, load_system


def add_system_args(parser: argparse.ArgumentParser, *, required: bool = True) -> None:
    """``--system`` plus the fabric overrides and the ``custom`` hardware-from-parts flags."""
    g = parser.add_argument_group("hardware")
    g.add_argument(
        "--system",
        required=required,
        help="catalogue system (perfmodel topo list), a .toml file, 'custom' (hardware from parts), or "
        "'calibrated' (predict: the one device a --calibration profile measured, e.g. a CPU)",
    )
    g.add_argument("--nodes", type=int, default=1, help="number of servers (default 1)")
    g.add_argument(
        "--network",
        help="fabric link technology, overrides the system default (e.g. ib-hdr, eth-40g)",
    )
    g.add_argument("--nics-per-node", type=int, help="NIC ports per server used by the fabric")
    g.add_argument(
        "--fabric",
        dest="fabric_topology",
        choices=["single-switch", "fat-tree", "rail"],
        help="fabric topology",
    )
    g.add_argument(
        "--oversubscription", type=float, help="fat-tree leaf oversubscription (2 = 2:1)"
    )
    g.add_argument("--gpu", help="GPU model (custom systems and GPU-selectable systems)")
    g.add_argument("--gpus-per-node", type=int, help="custom systems: GPUs per server")
    g.add_argument(
        "--intra-node", help="custom systems: pcie3|pcie4|pcie5|nvlink1..nvlink5|nvswitch-v1..v4"
    )


def system_from_args(args: argparse.Namespace) -> Topology:
    """Build the :class:`Topology` the hardware flags describe."""
    if args.system == "custom":
        from perfmodel.topology.custom import custom_system

        return custom_system(
            gpu=args.gpu,
            gpus_per_node=args.gpus_per_node,
            intra_node=args.intra_node,
            network=args.network,
            nics_per_node=args.nics_per_node,
            nodes=args.nodes,
            fabric_topology=args.fabric_topology,
            oversubscription=args.oversubscription,
        )
    return load_system(
        args.system,
        nodes=args.nodes,
        network=args.network,
        nics_per_node=args.nics_per_node,
        gpu=args.gpu,
        fabric_topology=args.fabric_topology,
        oversubscription=args.oversubscription,
    )


def add_format_args(parser: argparse.ArgumentParser) -> None:
    g = parser.add_mutually_exclusive_group()
    g.add_argument("--json", action="store_true", help="print JSON")
    g.add_argument("--csv", action="store_true", help="print CSV")
