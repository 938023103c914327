"""What ``perfmodel compare`` checks of its plan-search inputs before any prediction: the
statistical-efficiency model of ``--objective tta``, whether the mode reads ``--objective``
at all (user21: the what-if exited 0 with ``--objective tta``, ignored), and that an explicit
``--nodes`` holds the ``--gpus`` counts (user23 item 4)."""

from __future__ import annotations

import argparse
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from perfmodel.errors import ConfigError


def statistical_efficiency(args: argparse.Namespace) -> Any:
    """McCandlish et al. 2018's statistical-efficiency model the flags give
    (:class:`perfmodel.search.tta.StatisticalEfficiency`: ``--b-noise`` with ``--min-steps``,
    or ``--min-epochs`` and ``--dataset-size``), or ``None`` without ``--b-noise``."""
    from perfmodel.search.tta import StatisticalEfficiency

    if args.b_noise is None:
        return None
    if args.min_steps is not None:
        return StatisticalEfficiency(args.min_steps, args.b_noise, source="--min-steps/--b-noise")
    if args.min_epochs is not None:
        if not args.dataset_size:
            raise ConfigError("--min-epochs needs --dataset-size", where="--min-epochs")
        return StatisticalEfficiency.from_min_epochs(
            args.min_epochs, args.b_noise, args.dataset_size, source="--min-epochs/--b-noise"
        )
    raise ConfigError("--b-noise needs --min-steps or --min-epochs", where="--b-noise")


def check_objective(args: argparse.Namespace) -> None:
    """``--objective``'s inputs, checked once before any prediction for every path of
    ``compare`` (the plan search, ``--systems --search`` and the what-if): ``tta`` needs the
    statistical-efficiency model (:func:`statistical_efficiency`), as the search's score
    (:func:`perfmodel.search.compare.objective_score`) does; the what-if (``--systems``
    without ``--search``) ranks no plans, so an objective other than the default is refused
    there as the other plan-search flags are (``compare._refuse_plan_flags``; user21:
    ``--objective tta`` exited 0, ignored).

    Raises
    ------
    ConfigError
        Naming ``--objective``, its value and what it needs.
    """
    if args.objective == "tta" and statistical_efficiency(args) is None:
        raise ConfigError(
            "--objective tta needs a statistical-efficiency model: --b-noise with --min-steps "
            "(or --min-epochs and --dataset-size)",
            value=args.objective,
            where="--objective",
        )
    if args.systems and not args.search and args.objective != "throughput":
        raise ConfigError(
            f"--objective {args.objective}: the what-if (--systems without --search) predicts "
            "each system's default plan and ranks no plans by an objective (it prints times, "
            "costs with a price, and the cheapest option meeting --deadline); add --search "
            f"(one --gpus count) to search plans by {args.objective}",
            value=args.objective,
            where="--objective",
        )


def check_nodes_cap(
    args: argparse.Namespace,
    gpus: Sequence[int] | None,
    systems: Iterable[tuple[str, int]],
) -> None:
    """An explicit ``--nodes N`` caps every ``--gpus`` count at ``N`` servers of each system
    compared, as ``predict`` reads the same flags (``predict --nodes 1 --gpus 16`` on 8-GPU
    servers is refused: :func:`perfmodel.pipeline.resolve.gpus_beyond_nodes`, its words here,
    the flags named as predict names them). Without ``--nodes`` the search sizes each count's
    servers itself (``ceil(gpus / per server)``, the ``--gpus`` help). ``systems``: ``(name,
    GPUs per server)`` of ``--system``, or of each ``--systems`` entry
    (:func:`systems_per_server`). User23 item 4: ``compare
    --nodes 1 --gpus 16`` searched two servers, quietly; ``--systems`` dropped ``--nodes``.

    Raises
    ------
    InfeasiblePlanError
        The first count above a system's ``N`` servers, naming ``--gpus`` and the fix.
    """
    if args.nodes is None or not gpus:
        return
    from perfmodel.cli.predict_checks import name_the_flags
    from perfmodel.pipeline.resolve import gpus_beyond_nodes

    for name, per in systems:
        have = int(args.nodes) * per
        over = [g for g in gpus if g > have]
        if over:
            exc = gpus_beyond_nodes(over[0], have, per, name, args.nodes)
            name_the_flags(exc, args, ())  # gpus=16 -> --gpus 16, nodes=2 -> --nodes 2
            raise exc


def systems_per_server(options: Iterable[Any]) -> Iterator[tuple[str, int]]:
    """``(label, GPUs per server)`` of each parsed ``--systems`` entry
    (:func:`perfmodel.search.whatif.catalogue_gpus_per_node`), for :func:`check_nodes_cap`."""
    from perfmodel.search.whatif import catalogue_gpus_per_node

    return ((o.label, catalogue_gpus_per_node(o)) for o in options)
