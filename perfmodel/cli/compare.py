"""``perfmodel compare``: which plan, which hardware, which batch size.

Three questions, one subcommand::

    # plan search: rank the parallelism plans of a model on N GPUs
    perfmodel compare --system dgx-a100 --nodes 128 --model gpt \\
        --model-arg hidden=12288 layers=96 heads=96 seq_len=2048 --global-batch 1536 \\
        --precision fp16 --optimizer adam --software megatron --top 10 --plot plans.png

    # hardware what-if: speedup and cost of the same job on several systems
    perfmodel compare --systems dgx1-v100,dgx-a100,pcie-8x-server --model resnet50 \\
        --batch-per-gpu 64 --gpus 1,2,4,8 --price-per-gpu-hour 2.5,4.1,1.2 \\
        --epochs 90 --dataset-size 1281167 --deadline 24 --plot whatif.png

    # time to accuracy: fit McCandlish's model to measured points, predict TTA vs batch and GPUs
    perfmodel compare --tta-data seeds.jsonl --tta-match crossbow \\
        --system pcie-8xtitanx --model resnet32 --gpus 1,2,4,8 --learners 1,2,4 --plot tta.png
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from perfmodel.cli import _types as ty
from perfmodel.cli import error_exit
from perfmodel.cli._common import (
    DURATION_HELP,
    FIDELITIES,
    OPTIMIZERS,
    PRECISIONS,
    RECOMPUTE,
    TypedFlag,
    add_documented_command,
    add_interval_arg,
    add_model_arg,
    add_quiet_arg,
    add_system_args,
    add_typed_arg,
    add_typed_args,
    check_custom_only_flags,
    flag_dest,
    parse_budget,
    parse_model_args,
    print_json,
    system_flags,
)
from perfmodel.cli.compare_checks import (
    check_nodes_cap,
    check_objective,
    statistical_efficiency,
    systems_per_server,
)
from perfmodel.cli.compare_systems import format_systems_search
from perfmodel.cli.headers import job_header
from perfmodel.errors import ConfigError

if TYPE_CHECKING:  # the search stack loads when a search runs, not at parse
    from perfmodel.search.compare import SearchResult
    from perfmodel.search.plans import SearchSpace


def _ints(text: str | None, where: str, maximum: int | None = None) -> tuple[int, ...] | None:
    from perfmodel.search.plans import parse_int_list

    return None if text is None else parse_int_list(text, where=where, maximum=maximum)


def _batches(text: str | None) -> tuple[int, ...] | None:
    """``--global-batch`` list, each at most :data:`perfmodel.scenario_parse.MAX_GLOBAL_BATCH`."""
    from perfmodel.scenario_parse import MAX_GLOBAL_BATCH

    return _ints(text, "--global-batch", MAX_GLOBAL_BATCH)


def _max_batch() -> int:
    from perfmodel.scenario_parse import MAX_BATCH_PER_REPLICA

    return MAX_BATCH_PER_REPLICA


def _strs(text: str | None, where: str = "") -> tuple[str, ...] | None:
    if text is None:
        return None
    items = tuple(t.strip() for t in text.split(",") if t.strip())
    if not items and where:  # "--schedules ''" must not fall back to the default silently
        raise ConfigError(f"{where} {text!r}: expected a comma list", value=text, where=where)
    return items


def _zero_stages(text: str | None) -> tuple[int, ...] | None:
    """``--zero`` stages; ``None`` (not given): the software preset's
    (:func:`perfmodel.search.plans.preset_zero_stages`)."""
    if text is None:
        return None
    out = []
    for t in _strs(text, "--zero") or ("0",):
        if not t.isdigit():
            raise ConfigError(f"--zero: {t!r} is not a ZeRO stage (0-3)", value=t, where="--zero")
        out.append(int(t))
    return tuple(out)


def _bools(text: str | None, where: str) -> tuple[bool, ...] | None:
    """``true``/``false`` list; ``None`` (not given): the software preset's default."""
    if text is None:
        return None
    out = []
    for t in _strs(text) or ("false",):
        if t.lower() not in ("true", "false"):
            raise ConfigError(f"{where}: {t!r} is not true or false", value=t, where=where)
        out.append(t.lower() == "true")
    return tuple(out)


def register(subparsers: Any) -> None:
    p = add_documented_command(
        subparsers,
        "compare",
        "rank parallelism plans, compare systems and costs, time to accuracy",
        __doc__,
    )
    add_system_args(p, required=False)
    p.add_argument("--systems", help="what-if: comma list of NAME[:key=value...] system options")
    p.add_argument(
        "--search",
        action="store_true",
        help="with --systems and one --gpus: search the parallelism plans on each system (the "
        "plan-search flags apply: --tp, --ep, --pp, ...) and compare the best plans, with why "
        "(e.g. whether an expert-parallel group stays inside one NVLink domain)",
    )
    p.add_argument(
        "--gpus",
        help="GPU count(s), comma list (default: plan search: all GPUs of --system and its "
        "--nodes; what-if: each system's powers of two up to one server's GPUs and that count, "
        "1,2,4,8 on an 8-GPU server, ...,32,64,72 on an NVL72 rack; --search: required, one "
        "count; time to accuracy: 1)",
    )
    p.add_argument("--model", help="zoo model (perfmodel model list)")
    add_model_arg(p)
    b = p.add_mutually_exclusive_group()
    b.add_argument(
        "--global-batch", help="samples per step over all replicas (comma list to search)"
    )
    add_typed_arg(b, "--batch-per-gpu", ty.batch_int, help="samples per replica per step")
    p.add_argument("--precision", default=None, choices=PRECISIONS)
    p.add_argument("--optimizer", default=None, choices=OPTIMIZERS)
    p.add_argument(
        "--software", help="software preset (megatron, pytorch-ddp, deepspeed-zero1, ...)"
    )
    add_typed_arg(p, "--dataset-size", ty.positive_int, help="samples per epoch")
    p.add_argument("--calibration", help="calibration profile JSON")
    add_typed_arg(p, "--top", ty.positive_int, default=10, help="plans to show (default 10)")
    p.add_argument("--objective", default="throughput", choices=["throughput", "tta", "cost"])
    add_typed_arg(
        p,
        "--plot",
        ty.plot_file,
        help="write a PNG (plan heatmap + Pareto, speedup curves, or TTA)",
    )
    p.add_argument("--json", action="store_true", help="print JSON")
    add_interval_arg(
        p,
        "mark plans whose prediction interval (default %(default)s) overlaps the best plan's as "
        "statistically tied; with --systems: each row's ranges (time, throughput, run time, "
        "cost), and whether the cheapest/fastest verdict is within the model's error "
        "(docs/intervals.md); off: no intervals",
    )
    add_quiet_arg(p)
    _add_search_args(p)
    _add_cost_args(p)
    p.set_defaults(func=run)


def _add_search_args(p: argparse.ArgumentParser) -> None:
    """The plan search's space (degrees, micro-batches, schedules, ZeRO, recomputation) and
    stages (screen, analytic, simulated; budget and processes)."""
    s = p.add_argument_group("plan search space")
    s.add_argument(
        "--tp", help="tensor-parallel degrees to try (default: powers of two dividing heads)"
    )
    s.add_argument("--pp", help="pipeline degrees to try (default: divisors of the blocks)")
    s.add_argument(
        "--ep", help="expert-parallel degrees (MoE; default: powers of two dividing the experts)"
    )
    s.add_argument("--cp", default="1", help="context-parallel degrees to try (default 1)")
    add_typed_arg(s, "--max-tp", ty.positive_int, help="largest tensor-parallel degree")
    s.add_argument(
        "--microbatch",
        help="micro-batch sizes (default 1,2,4,8, the whole replica batch, and the one "
        "`perfmodel predict` chooses when a plan names none: the largest that fits, with "
        "pipelining at least pp micro-batches a replica)",
    )
    s.add_argument("--schedules", default="1f1b,interleaved", help="gpipe,1f1b,interleaved")
    s.add_argument(
        "--interleave", default="2", help="chunks per device for interleaved (default 2)"
    )
    s.add_argument(
        "--zero",
        help="ZeRO stages (default: what the software preset runs: its own stage for fsdp, "
        "torchtitan and deepspeed-zero2/3, else 0,1)",
    )
    s.add_argument("--recompute", default=",".join(RECOMPUTE), help="recomputation settings")
    s.add_argument(
        "--sequence-parallel",
        help="false, true or false,true (default: the software preset's: on with tp > 1 for "
        "megatron-core and torchtitan, off otherwise)",
    )
    s.add_argument("--learners", default="1", help="Crossbow learners per GPU (CNNs), e.g. 1,2,4")
    s.add_argument("--cnn-tp", action="store_true", help="also split CNN fully-connected layers")
    st = p.add_argument_group("search stages")
    st.add_argument("--no-screen", action="store_true", help="analytic predictor for every plan")
    add_typed_arg(
        st, "--analytic-k", ty.nonneg_int, default=8, help="plans re-ranked analytically (8)"
    )
    add_typed_arg(
        st, "--confirm-k", ty.nonneg_int, default=3, help="plans confirmed by simulation (3)"
    )
    st.add_argument(
        "--budget",
        default="30s",
        metavar="DURATION",
        help=f"wall-time limit of the analytic+simulated stages: {DURATION_HELP} (default 30s)",
    )
    add_typed_arg(
        st, "--jobs", ty.jobs_int, default=1, help="processes for a non-screen first stage"
    )


#: McCandlish et al. 2018's statistical efficiency
#: (:func:`~perfmodel.cli.compare_checks.statistical_efficiency`): ``(flag, kind, help)``.
STATISTICAL_EFFICIENCY_FLAGS: tuple[TypedFlag, ...] = (
    ("--b-noise", ty.positive_float, "gradient noise scale B_noise (samples)"),
    ("--min-steps", ty.positive_float, "S_min: steps to target at infinite batch"),
    ("--min-epochs", ty.positive_float, "E_min in epochs (needs --dataset-size)"),
)


def _add_cost_args(p: argparse.ArgumentParser) -> None:
    """Prices, run length and deadline of the what-if, and time to accuracy's inputs."""
    c = p.add_argument_group("cost, deadline and time to accuracy")
    c.add_argument(
        "--price-per-gpu-hour", help="price of one GPU-hour (one value or one per system)"
    )
    c.add_argument("--purchase-price", help="purchase price per GPU (one value or one per system)")
    add_typed_arg(
        c, "--lifetime-years", ty.positive_float, help="amortisation period of --purchase-price"
    )
    add_typed_arg(
        c, "--utilization", ty.positive_float, default=1.0, help="fraction of lifetime in use (1.0)"
    )
    add_typed_arg(c, "--epochs", ty.positive_float, help="epochs of the training run")
    add_typed_arg(c, "--deadline", ty.positive_float, help="hours the run may take")
    c.add_argument("--fidelity", default="simulated", choices=FIDELITIES, help="what-if")
    add_typed_args(c, STATISTICAL_EFFICIENCY_FLAGS)
    c.add_argument(
        "--tta-data", help="JSONL with time_to_accuracy rows to fit (seeds.jsonl schema)"
    )
    c.add_argument("--tta-match", help="keep rows whose id/model contains this text")


def _base(args: argparse.Namespace) -> dict[str, Any]:
    if not args.model:
        raise ConfigError("--model is required", where="--model")
    d: dict[str, Any] = {"model": args.model, "model_args": parse_model_args(args.model_arg)}
    d.update(system_flags(args))  # --nccl-env parsed once, naming the flag
    if args.systems:  # the flags apply to every entry (each entry's own keys: SystemOption)
        _custom_flags_on_every_entry(args)
    elif args.system:
        check_custom_only_flags(args.system, args)
    for attr in (
        "precision",
        "optimizer",
        "software",
        "dataset_size",
        "calibration",
    ):
        v = getattr(args, attr, None)
        if v is not None:
            d[attr] = v
    if "calibration" in d:  # read and check it once, before any plan is evaluated with it
        from perfmodel.calibration.profile import read_profile

        read_profile(d["calibration"])
    return d


def _custom_flags_on_every_entry(args: argparse.Namespace) -> None:
    """Refuse ``--gpus-per-node`` / ``--intra-node`` with ``--systems`` where an entry is not
    ``custom``: the flags apply to every entry, so the refusal says so and suggests the entry's
    own key (``custom:gpus_per_node=4:...``), not ``predict``'s ``--system custom`` wording
    (rev27b item 3). A value the flag cannot take is refused as ``predict`` refuses it.

    Raises
    ------
    ConfigError
        Naming the flags, the first entry that is not ``custom`` and the entry form.
    """
    from perfmodel.search.system_option import parse_systems
    from perfmodel.topology.builders import CUSTOM_ONLY_KEYS

    check_custom_only_flags("custom", args)  # an --intra-node that is no link
    given = {k: v for k in CUSTOM_ONLY_KEYS if (v := getattr(args, k, None)) is not None}
    options = parse_systems(args.systems)
    other = next((o for o in options if o.system != "custom"), None)
    if not given or other is None:
        return
    flags = " and ".join(f"--{k.replace('_', '-')} {v}" for k, v in given.items())
    custom = [
        o.label + "".join(f":{k}={v}" for k, v in given.items() if k not in o.overrides)
        for o in options
        if o.system == "custom"
    ]
    form = " or ".join(custom) or "custom:" + ":".join(f"{k}={v}" for k, v in given.items())
    form += "" if custom else ":gpu=..."
    where = "the custom entry alone" if custom else "a custom entry"
    raise ConfigError(
        f"{flags} {'apply' if len(given) > 1 else 'applies'} to every --systems entry, and "
        f"entry {other.label!r} is a catalogue system, not custom (built from parts), which "
        f"{'they do' if len(given) > 1 else 'it does'} not change; set "
        f"{'them' if len(given) > 1 else 'it'} on {where}, as its key"
        f"{'s' if len(given) > 1 else ''}: {form}",
        value=next(iter(given.values())),
        where="--" + next(iter(given)).replace("_", "-"),
    )


def _pricing(args: argparse.Namespace, labels: list[str]) -> dict[str, Any]:
    from perfmodel.search.cost import Pricing, parse_prices

    if args.price_per_gpu_hour and args.purchase_price:
        raise ConfigError(
            "give --price-per-gpu-hour or --purchase-price, not both", where="--price-per-gpu-hour"
        )
    if args.price_per_gpu_hour:
        vals = parse_prices(args.price_per_gpu_hour, labels, where="--price-per-gpu-hour")
        return {k: Pricing(v) for k, v in vals.items()}
    if args.purchase_price:
        if args.lifetime_years is None:
            raise ConfigError("--purchase-price needs --lifetime-years", where="--lifetime-years")
        vals = parse_prices(args.purchase_price, labels, where="--purchase-price")
        return {
            k: Pricing.amortised(v, args.lifetime_years, args.utilization) for k, v in vals.items()
        }
    return {}


def _system_prices(args: argparse.Namespace, systems: list[Any]) -> dict[str, Any]:
    """Each option's price: the flags' (``--price-per-gpu-hour``, ``--purchase-price``), else a
    cloud system's dated list price (:func:`perfmodel.search.whatif.listed_prices`)."""
    from perfmodel.search.whatif import listed_prices

    return {**listed_prices(systems), **_pricing(args, [s.label for s in systems])}


def run(args: argparse.Namespace) -> int:
    if args.tta_data:
        return _run_tta(args)
    check_objective(args)
    if args.systems:
        return _run_systems_search(args) if args.search else _run_whatif(args)
    if args.search:
        raise ConfigError("--search compares systems: give --systems A,B", where="--search")
    if not args.system:
        raise ConfigError(
            "give --system (plan search), --systems (hardware what-if) or --tta-data",
            where="compare",
        )
    return _run_search(args)


def _gpus_per_node(base: dict[str, Any]) -> tuple[int, int]:
    """(GPUs per server, GPUs in the described system)."""
    from perfmodel.api import Scenario, topology_of

    one = topology_of(
        Scenario.from_dict({**{k: v for k, v in base.items() if k != "nodes"}, "nodes": 1})
    )
    return one.gpus_per_node, one.gpus_per_node * int(base.get("nodes", 1))


def _search_plans(
    args: argparse.Namespace,
    base: dict[str, Any],
    gpus: Sequence[int],
    batches: Sequence[int],
    space: SearchSpace,
    gpus_per_node: int,
    **extra: Any,
) -> SearchResult:
    """The plan search of ``base`` as the flags set it: the search stages (``--objective``,
    ``--no-screen``, ``--analytic-k``, ``--confirm-k``, ``--budget`` as a hard limit, ``--jobs``)
    and the statistical efficiency
    (:func:`~perfmodel.cli.compare_checks.statistical_efficiency`); each GPU count runs on
    ``ceil(gpus / gpus_per_node)`` servers. One reading of these flags for ``compare --system``
    and ``compare --systems --search``; ``extra``: more :func:`search_plans` keywords."""
    from perfmodel.search.compare import search_plans
    from perfmodel.search.sweep_workers import cap_workers

    return search_plans(
        base,
        gpus=gpus,
        global_batches=batches,
        space=space,
        objective=args.objective,
        stat=statistical_efficiency(args),
        screen=not args.no_screen,
        analytic_k=args.analytic_k,
        confirm_k=args.confirm_k,
        budget_s=parse_budget(args.budget, allow_zero=True),
        jobs=cap_workers(args.jobs, stream=sys.stderr, label="compare"),
        nodes_for=lambda g: max(1, math.ceil(g / gpus_per_node)),
        hard_budget=True,
        auto_microbatch=args.microbatch is None,
        **extra,
    )


def _run_search(args: argparse.Namespace) -> int:
    from perfmodel.search.compare_table import format_table
    from perfmodel.search.predict_parity import analytic_line, auto_line, screen_line

    base = _base(args)
    gpn, total = _gpus_per_node(base)
    gpus = _ints(args.gpus, "--gpus") or (total,)
    check_nodes_cap(args, gpus, [(args.system, gpn)])
    if args.global_batch is not None:
        batches = _batches(args.global_batch)
    elif args.batch_per_gpu is not None:
        if len(gpus) > 1:
            raise ConfigError("with several --gpus give --global-batch", where="--batch-per-gpu")
        batches = (args.batch_per_gpu * gpus[0],)
    else:
        raise ConfigError("give --global-batch (or --batch-per-gpu)", where="--global-batch")
    space = _search_space(args)
    pricing = _pricing(args, ["plan"]).get("plan")

    res = _search_plans(
        args,
        base,
        gpus,
        batches,
        space,
        gpn,
        pricing=pricing,
        progress=getattr(args, "progress", None),
    )
    if args.plot:
        from perfmodel.search.plots import plot_search

        plot_search(
            res,
            args.plot,
            title=f"{args.model} on {','.join(map(str, gpus))} GPUs of {args.system}",
            interval=args.interval,
        )
    _job_warnings(args)
    if args.json:
        print_json(res.to_dict(top=args.top, interval=args.interval))
    else:
        print(_header(args, base, gpus, batches))
        print(format_table(res, top=args.top, interval=args.interval))
        for line in (
            analytic_line(res.ranked, args.top),
            screen_line(res.ranked, args.top),
            auto_line(res.ranked[: args.top]),
        ):
            if line:
                print(line)
        if args.plot:
            print(f"plot written to {args.plot}")
    if not res.ranked:  # the table says why per reason; the exit status says it failed
        why = "; ".join(f"{n} {r}" for r, n in sorted(res.pruned.items(), key=lambda x: -x[1])[:3])
        pruned = f" (pruned: {why})" if why else ""
        note = _pipeline_zero_note(res, base)
        return error_exit(f"no feasible plan among {res.enumerated} enumerated{pruned}{note}")
    if res.unconfirmed:  # screen-only rows are not a ranking: no winner, exit 2
        return error_exit(res.unconfirmed)
    return 0


def _header(
    args: argparse.Namespace, base: dict[str, Any], gpus: tuple[int, ...], batches: Any
) -> str:
    """The plan search's :func:`~perfmodel.cli.headers.job_header`: the system and its servers, GPU counts and global
    batches, and how to run a plan the table names."""
    return job_header(
        args,
        f"{args.system} x{base.get('nodes', 1)} node(s)",
        f"{'/'.join(map(str, gpus))} GPUs, global batch {'/'.join(map(str, batches))}; plans a "
        "label names run with `perfmodel predict --plan LABEL` and the same flags",
    )


def _job_warnings(args: argparse.Namespace) -> None:
    """Print on stderr the WARNING ``predict`` prints for the job its :func:`~perfmodel.cli.headers.job_header`
    names: a transformer on the default optimizer (plain SGD, no state;
    :func:`perfmodel.cli.predict_checks.default_optimizer_warning`), which leaves out the
    Adam-class state and update the run has. Called by the plan search, the hardware what-if
    and the systems search, with ``--json`` or not (stdout stays the table or the JSON)."""
    from types import SimpleNamespace

    from perfmodel.api import Scenario
    from perfmodel.cli.predict_checks import default_optimizer_warning

    if not args.model:
        return
    sc = SimpleNamespace(model=args.model, optimizer=args.optimizer or Scenario.optimizer)
    given = frozenset({"optimizer"} if args.optimizer else ())
    if warning := default_optimizer_warning(sc, given):
        print(warning, file=sys.stderr)


def _systems_where(options: Sequence[Any]) -> str:
    """The systems of a what-if, as the header names them."""
    return " / ".join(o.label for o in options)


def _search_space(args: argparse.Namespace) -> Any:
    from perfmodel.search.plans import SearchSpace

    return SearchSpace(
        tp_degrees=_ints(args.tp, "--tp"),
        pp_degrees=_ints(args.pp, "--pp"),
        max_tp=args.max_tp,
        microbatch_sizes=(
            _ints(args.microbatch, "--microbatch", _max_batch())
            if args.microbatch
            else SearchSpace.microbatch_sizes
        )
        or (1,),
        schedules=_strs(args.schedules, "--schedules") or ("1f1b",),
        interleave=_ints(args.interleave, "--interleave") or (2,),
        zero_stages=_zero_stages(args.zero),
        recompute=_strs(args.recompute, "--recompute") or ("none",),
        sequence_parallel=_bools(args.sequence_parallel, "--sequence-parallel"),
        learners_per_gpu=_ints(args.learners, "--learners") or (1,),
        cnn_tensor_parallel=args.cnn_tp,
        ep_degrees=_ints(args.ep, "--ep"),
        cp_degrees=_ints(args.cp, "--cp") or (1,),
    )


def _run_systems_search(args: argparse.Namespace) -> int:
    """``compare --systems A,B --search --gpus N``: the best plan of the job on each system
    (the plan search of ``--system``), side by side, and why the winner wins (issue 25: "is
    NVL72 worth it for this MoE model")."""
    from perfmodel.search.system_option import option_error, parse_systems
    from perfmodel.search.whatif import step_residual

    base = _base(args)
    base.pop("system", None)
    base.pop("nodes", None)
    gpus = _ints(args.gpus, "--gpus")
    if not gpus or len(gpus) != 1:
        raise ConfigError("--search takes one --gpus count (the job's size)", where="--gpus")
    options = parse_systems(args.systems)
    check_nodes_cap(args, gpus, systems_per_server(options))
    if args.global_batch is None:
        raise ConfigError("--search needs --global-batch", where="--global-batch")
    batches = _ints(args.global_batch, "--global-batch")
    space = _search_space(args)
    results: list[tuple[str, Any, Any, int, int]] = []  # label, best candidate, result, gpn, dom
    failures: dict[str, str] = {}
    prices = _system_prices(args, options)
    for opt in options:
        sc = {**base, **opt.overrides, "system": opt.system}
        try:
            gpn, _ = _gpus_per_node(sc)
            domain = _nvlink_domain(sc)
        except ConfigError as exc:  # named as the entry's key, not predict's flag
            raise option_error(opt, exc) from exc
        res = _search_plans(args, sc, gpus, batches, space, gpn, pricing=prices.get(opt.label))
        # the best plan the deepest stage kept in memory (a later stage may find the screen's
        # favourite out of memory: its score is then infinite)
        best = next(
            (
                c
                for c in res.ranked
                if math.isfinite(c.score) and c.report.get("fits_in_memory", True)
            ),
            None,
        )
        if best is None:
            why = "; ".join(
                f"{n} {r}" for r, n in sorted(res.pruned.items(), key=lambda x: -x[1])[:3]
            )
            failures[opt.label] = (
                f"no plan fits ({why or f'{len(res.ranked)} evaluated, none in memory'})"
                + _pipeline_zero_note(res, sc)
            )
            continue
        results.append((opt.label, best, res, gpn, domain))
    level = args.interval
    residuals = {
        label: None if level is None else step_residual(best.scenario, best.report, level)
        for label, best, _, _, _ in results
    }
    by_cost = None
    if args.objective == "cost":  # rank the systems as each one's plans were ranked
        by_cost = {lab: prices[lab].price_per_gpu_hour for lab, *_ in results if lab in prices}
    out = format_systems_search(results, failures, residuals, by_cost or None)
    summary = out.splitlines()[-1] if results else None
    cost_lines = _search_cost_lines(results, options, prices, residuals, shown=out)
    if cost_lines:
        out += "\n" + "\n".join(cost_lines)
    _job_warnings(args)
    if args.json:
        print_json(
            {
                "systems": [
                    {
                        "system": label,
                        "gpus_per_node": gpn,
                        "nvlink_domain_gpus": dom,
                        "best": best.report,
                        "plan": best.label,
                        **_interval_json(residuals[label], best.report),
                    }
                    for label, best, _, gpn, dom in results
                ],
                "failures": failures,
                "per_million_tokens": cost_lines,
                "summary": summary,
            }
        )
    else:
        print(
            job_header(
                args,
                _systems_where(options),
                f"{gpus[0]} GPUs, global batch {'/'.join(map(str, batches))}; each system's "
                "best plan (`perfmodel predict --system S --plan LABEL` and the same flags runs "
                "it)",
                [(o.label, o.overrides) for o in options],
            )
        )
        print(out)
    if not results:
        return error_exit("no system has a feasible plan")
    return 0


def _pipeline_zero_note(res: Any, base: dict[str, Any]) -> str:
    """``"; N plans with pp > 1 not enumerated: ..."`` when the search's software refuses
    ZeRO stages with pipelining (:func:`perfmodel.search.plans.pipeline_zero_note`), else
    ``""``: a search whose every plan was refused says why and what runs instead."""
    from perfmodel.search.compare import search_preset
    from perfmodel.search.plans import pipeline_zero_note

    note = pipeline_zero_note(res.rejected, search_preset(base))
    return f"; {note}" if note else ""


def _interval_json(iv: Any, report: Any) -> dict[str, Any]:
    """A best plan's range in ``--json``, as ``predict --json`` names it
    (:func:`perfmodel.intervals.answers.interval_fields`) with ``iteration_time_s_low`` /
    ``_high``."""
    from perfmodel.intervals.answers import interval_fields

    out = interval_fields(iv)
    if iv is not None:
        t = float(report["iteration_time_s"])
        out["iteration_time_s_low"], out["iteration_time_s_high"] = iv.time(t)
    return out


def _search_cost_lines(
    results: list[tuple[str, Any, Any, int, int]],
    options: list[Any],
    prices: dict[str, Any],
    residuals: dict[str, Any],
    *,
    shown: str = "",
) -> list[str]:
    """The best plans of ``compare --systems --search`` ranked by cost (or energy) per million
    tokens, with why (:func:`perfmodel.search.whatif.per_million_tokens_lines`; each point with
    its system's residual interval, so the cheapest line says whether the costs' ranges
    separate them). A "why ... wins" line already in ``shown`` (the table's verdict) is not
    repeated."""
    from perfmodel.search.whatif import (
        WhatIfPoint,
        catalogue_gpu_spec,
        per_million_tokens_lines,
        per_token_figures,
    )

    by_label = {o.label: o for o in options}
    points = []
    for label, best, _, gpn, _ in results:
        rep = dict(best.report)
        rep.setdefault("num_gpus", best.gpus)
        price = prices.get(label)
        spec = catalogue_gpu_spec(by_label[label])
        tok, cost, energy = per_token_figures(rep, spec, price)
        t = float(rep["iteration_time_s"])
        points.append(
            WhatIfPoint(
                system=label,
                gpus=int(best.gpus),
                nodes=max(1, math.ceil(int(best.gpus) / gpn)),
                iteration_time_s=t,
                throughput_samples_per_s=float(rep.get("samples_per_step") or best.global_batch)
                / t,
                speedup=None,
                scaling_efficiency=None,
                fits_in_memory=True,
                epoch_time_s=None,
                run_time_s=None,
                price_per_gpu_hour=None if price is None else price.price_per_gpu_hour,
                cost_per_epoch=None,
                cost_per_run=None,
                meets_deadline=None,
                tokens_per_s=tok,
                cost_per_million_tokens=cost,
                price_source="" if price is None else price.source,
                interval=residuals.get(label),
                energy=energy,
            )
        )
    reports = {label: best for label, best, _, _, _ in results}

    def why(a: str, b: str) -> str | None:
        from perfmodel.search.why import why_best

        ra, rb = reports[a], reports[b]
        fa, fb = float(ra.report["iteration_time_s"]), float(rb.report["iteration_time_s"])
        if fa > fb:  # the cheaper system is the slower one: its price decides
            return None
        line = why_best([f"{a} ({ra.label})", f"{b} ({rb.label})"], [ra.report, rb.report])
        return None if line and line in shown.splitlines() else line

    return per_million_tokens_lines(points, why)


def _nvlink_domain(sc: dict[str, Any]) -> int:
    """GPUs of the largest NVLink domain of one server of the scenario's system."""
    from perfmodel.api import Scenario, topology_of
    from perfmodel.topology.analysis import nvlink_domains

    one = topology_of(Scenario.from_dict({**sc, "nodes": 1}))
    return len(nvlink_domains(one)[0])


#: Plan-search flags without a default of their own (``None``): the what-if predicts each
#: system's default plan and read none of them (``compare --systems ... --ep 2`` ran silently).
#: Each is read under its argparse attribute (:func:`~perfmodel.cli._common.flag_dest`).
_PLAN_FLAGS = ("--tp", "--pp", "--ep", "--max-tp", "--zero", "--sequence-parallel")


def _refuse_plan_flags(args: argparse.Namespace) -> None:
    """Refuse a plan-search flag given to the what-if (``--systems`` without ``--search``),
    which predicts each system's default plan and would ignore it.

    Raises
    ------
    ConfigError
        The first such flag, naming it and ``--search``.
    """
    for flag in _PLAN_FLAGS:
        v = getattr(args, flag_dest(flag), None)
        if v is not None:
            raise ConfigError(
                f"{flag} {v}: the what-if (--systems without --search) predicts each system's "
                "default plan and reads no plan-search flag; add --search (one --gpus count) to "
                "search plans with it",
                value=v,
                where=flag,
            )


def _run_whatif(args: argparse.Namespace) -> int:
    """``compare --systems A,B``: the job on each system and GPU count (default: each system's
    :func:`perfmodel.search.whatif.default_gpu_counts`), with ``--interval`` ranges and cost.
    Exit 2 when every system failed or no row fits in memory (no option to buy, as the plan
    search exits 2 with no feasible plan); the table is printed first."""
    from perfmodel.search._eval import default_evaluator
    from perfmodel.search.system_option import parse_systems
    from perfmodel.search.whatif import format_whatif, hardware_whatif

    _refuse_plan_flags(args)
    base = _base(args)
    base.pop("system", None)
    base.pop("nodes", None)
    if args.global_batch is not None:
        gbs = _batches(args.global_batch)
        if len(gbs) != 1:
            raise ConfigError("what-if takes one --global-batch", where="--global-batch")
        base["global_batch"] = gbs[0]
        batch = f"global batch {gbs[0]}"
    elif args.batch_per_gpu is not None:
        base["batch_per_gpu"] = args.batch_per_gpu
        batch = f"batch {args.batch_per_gpu} per GPU"
    else:
        raise ConfigError("give --batch-per-gpu or --global-batch", where="--batch-per-gpu")
    base["fidelity"] = args.fidelity
    systems = parse_systems(args.systems)
    gpus = _ints(args.gpus, "--gpus")
    check_nodes_cap(args, gpus, systems_per_server(systems))
    res = hardware_whatif(
        base,
        systems,
        gpus,
        pricing=_system_prices(args, systems),
        epochs=args.epochs,
        dataset_size=args.dataset_size,
        deadline_s=args.deadline * 3600.0 if args.deadline is not None else None,
        evaluator=default_evaluator,
        interval=args.interval,
    )
    if args.plot:
        from perfmodel.search.plots import plot_whatif

        plot_whatif(res, args.plot, title=str(args.model))
    _job_warnings(args)
    if args.json:
        print_json(res.to_dict())
    else:
        counts = (
            f"{'/'.join(map(str, gpus))} GPUs"
            if gpus
            else "GPU counts: powers of two up to one server's GPUs, and that count (default; "
            "--gpus to choose)"
        )
        rows = [(o.label, o.overrides) for o in systems]
        print(job_header(args, _systems_where(systems), f"{counts}, {batch}", rows))
        print(format_whatif(res))
        if args.plot:
            print(f"plot written to {args.plot}")
    if not res.points:
        why = "; ".join(f"{k}: {v}" for k, v in list(res.failures.items())[:3])
        return error_exit(f"every system failed ({why})")
    if not any(p.fits_in_memory for p in res.points):
        return error_exit(
            "no system fits the job in GPU memory at any GPU count tried (every row is out of "
            "memory); try a smaller batch per GPU, more GPUs, or --search with one --gpus count "
            "(plans that shard the model)"
        )
    return 0


def _run_tta(args: argparse.Namespace) -> int:
    from perfmodel.search.tta import fit_time_to_accuracy, load_tta_points, tta_grid

    b, t, desc = load_tta_points(args.tta_data, match=args.tta_match)
    fit = fit_time_to_accuracy(b, t, source=desc)
    out: dict[str, Any] = {"fit_affine": fit.to_dict()}
    lines = [_fit_text("fit with the step time t = t_fixed + B t_sample (data only)", fit)]
    grid: list[Any] = []
    pfit = None
    if args.system and args.model:
        from perfmodel.search._eval import default_evaluator

        base = _base(args)
        base["fidelity"] = args.fidelity
        # 1. predicted step times at the measured batches on one GPU -> fit S_min and B_noise
        step = []
        for bb in b:
            rep = default_evaluator({**base, "gpus": 1, "global_batch": int(bb)})
            step.append(float(rep["iteration_time_s"]))
        pfit = fit_time_to_accuracy(
            b, t, step_time_s=step, source=desc + " with predicted step times"
        )
        out["fit_predicted"] = pfit.to_dict()
        out["predicted_step_time_s"] = dict(zip([int(x) for x in b], step))
        lines.append(
            _fit_text(f"fit with perfmodel's step times ({args.model} on {args.system})", pfit)
        )
        # 2. TTA over global batch x GPUs x learners
        stat = pfit.statistical_efficiency()
        gpus = _ints(args.gpus, "--gpus") or (1,)
        learners = _ints(args.learners, "--learners") or (1,)
        lo, hi = int(min(b)), int(max(b))
        batches = sorted({2**k for k in range(int(math.log2(lo)), int(math.log2(hi)) + 2)})
        base_grid = {**base}
        if any(k > 1 for k in learners):
            base_grid["dp_mode"] = "crossbow"
        grid = tta_grid(
            stat,
            base_grid,
            global_batches=batches,
            gpus=gpus,
            learners_per_gpu=learners,
            evaluator=default_evaluator,
        )
        out["grid"] = [p.to_dict() for p in grid]
        lines.append("")
        lines.append(
            f"{'gpus':>5} {'learners':>8} {'batch':>6} {'step ms':>9} {'steps':>9} {'TTA s':>9}"
        )
        for p in sorted(grid, key=lambda p: (p.gpus, p.learners_per_gpu, p.global_batch)):
            lines.append(
                f"{p.gpus:>5} {p.learners_per_gpu:>8} {p.global_batch:>6} {p.step_time_s * 1e3:9.2f} "
                f"{p.steps:9.0f} {p.time_to_accuracy_s:9.1f}"
            )
        if grid:
            best = min(grid, key=lambda p: p.time_to_accuracy_s)
            lines.append(
                f"fastest to accuracy: {best.gpus} GPU(s), {best.learners_per_gpu} learner(s)/GPU, "
                f"batch {best.global_batch}: {best.time_to_accuracy_s:.0f} s"
            )
    if args.plot:
        from perfmodel.search.plots import plot_tta

        plot_tta([fit, pfit] if pfit else [fit], args.plot, grid=grid, title=desc)
        lines.append(f"plot written to {args.plot}")
    if args.json:
        print_json(out)
    else:
        print("\n".join(lines))
    return 0


def _fit_text(title: str, fit: Any) -> str:
    rows = [title + ":"]
    for name, val in fit.params.items():
        lo, hi = fit.param_range.get(name, (math.nan, math.nan))
        rows.append(f"  {name:<20} {val:12.4g}   (bootstrap 16-84%: {lo:.4g} - {hi:.4g})")
    if not fit.identifiable:
        rows.append(
            "  note: parameters not separately identifiable (singular Jacobian); see ranges"
        )
    lo, hi = fit.optimal_batch_range
    rows.append(f"  optimal batch B* = {fit.optimal_batch:.0f} (16-84%: {lo:.0f} - {hi:.0f})")
    rows.append(f"  {'batch':>6} {'measured s':>11} {'fitted s':>9} {'error':>7}")
    for bb, m, f, e in zip(fit.batch_sizes, fit.measured_s, fit.fitted_s, fit.signed_errors_pct):
        rows.append(f"  {bb:6.0f} {m:11.1f} {f:9.1f} {e:+6.1f}%")
    rows.append(f"  rms log error {fit.rms_log_error:.3f}")
    return "\n".join(rows)
