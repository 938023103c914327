"""``perfmodel predict``: how fast will this training run on that hardware, and why.

::

    perfmodel predict --system dgx1-v100 --model resnet50 --batch-per-gpu 64
    perfmodel predict --system dgx-a100 --nodes 16 --model gpt --model-arg layers=96 ...
                      --global-batch 1536 --plan dp=16,tp=8,pp=8,microbatch=1 --precision bf16
    perfmodel predict scenario.toml --json
    perfmodel predict --system dgx1-v100 --model resnet50 --batch-per-gpu 64 --gpus 1,2,4,8 --plot s.png
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from typing import Any

from perfmodel import units
from perfmodel._schema import split_assignments
from perfmodel.cli import _types as ty
from perfmodel.cli import predict_checks as checks
from perfmodel.cli._common import (
    FIDELITIES,
    FP8_RECIPES,
    INTERVAL_LEVEL,
    OPTIMIZERS,
    PIPELINE_LAYOUT_HELP,
    PLAN_HELP,
    PRECISIONS,
    RECOMPUTE,
    SYSTEM_KEYS,
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
    merge_plan_flag,
    nccl_explain_line,
    parse_model_args,
    print_json,
    system_flags,
)
from perfmodel.cli.headers import (
    below_header,
    cli_defaults,
    hardware_fields,
    hardware_line,
    predict_header,
)
from perfmodel.cli.predict_file import RunKey, file_only_keys, take_file_keys, where_given
from perfmodel.errors import ConfigError


def register(subparsers: Any) -> None:
    p = add_documented_command(
        subparsers,
        "predict",
        "predict iteration time, throughput, speedup and memory of a training run",
        __doc__,
    )
    p.add_argument(
        "scenario", nargs="?", help="scenario file (.toml/.yaml/.json) with the same keys"
    )
    add_system_args(p, required=False)  # no --nodes is None: a --nodes 1 given wins over a file's
    p.add_argument("--gpus", help="GPUs used (default all); a list 1,2,4,8 gives a speedup curve")
    p.add_argument("--model", help="zoo model (perfmodel model list)")
    add_model_arg(p)
    b = p.add_mutually_exclusive_group()
    add_typed_arg(
        b, "--batch-per-gpu", ty.batch_int, help="samples per data-parallel replica per step"
    )
    b.add_argument(
        "--global-batch",
        type=ty.batch_int("--global-batch", global_batch=True),
        help="samples per step over all replicas",
    )
    p.add_argument("--precision", choices=PRECISIONS)
    p.add_argument(
        "--fp8-recipe",
        choices=FP8_RECIPES,
        help="FP8 recipe of --precision fp8 (default: the software preset's, printed by "
        "--explain): its cast/amax/transpose kernels, split-accumulation GEMM passes, FP8 "
        "gathers and weight caches (docs/workload.md)",
    )
    p.add_argument(
        "--compile",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="the model runs under torch.compile: inductor fuses each block's norms, RoPE, "
        "SwiGLU, dropout and residual adds (default: the preset's kernels; PyTorch presets "
        "only; docs/workload.md)",
    )
    p.add_argument("--plan", help=PLAN_HELP)
    p.add_argument("--pipeline-layout", help=PIPELINE_LAYOUT_HELP)
    p.add_argument("--recompute", choices=RECOMPUTE)
    add_quiet_arg(p)
    _add_software_args(p)
    _add_data_args(p)
    add_run_args(p)
    _add_output_args(p)
    p.set_defaults(func=run)


def _add_software_args(p: argparse.ArgumentParser) -> None:
    """``predict``'s flags of the training stack: sequence parallelism, ZeRO, the software
    preset and its options, the optimizer, the convolution memory format and Crossbow's
    learners."""
    p.add_argument(
        "--sequence-parallel",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="Megatron sequence parallelism (default: on with tp > 1 for megatron-core and "
        "torchtitan, off otherwise)",
    )
    p.add_argument("--zero", type=int, choices=[0, 1, 2, 3])
    p.add_argument(
        "--software",
        help="software preset: pytorch-ddp, pytorch-apex, pytorch-dataparallel, horovod, tf-mirrored, "
        "tf-replicated, "
        "cuda-convnet2, keras-multi-gpu, megatron, megatron-core, nemo, deepspeed-zero1..3, fsdp, "
        "torchtitan, internevo, "
        "crossbow (docs/predict.md)",
    )
    p.add_argument(
        "--software-option",
        action="append",
        metavar="KEY=VALUE",
        help="set one knob of the stack beside its preset (repeatable): tp_comm_overlap, "
        "overlap_grad_comm, overlap_param_gather, grad_reduce_fp32, fp8_params (true/false), "
        "bucket_bytes (MiB), optimizer_dtype (fp32/bf16/fp16), activation_offload_layers (N), "
        "cross_entropy (te/native/eager-fp32/loss-parallel); Megatron/NeMo names are accepted "
        "(ub_tp_comm_overlap, grad_reduce_in_fp32, bucket_cap_mb, optim.dtype, "
        "cpu_offloading_num_layers, cross_entropy_fusion_impl...); docs/predict.md",
    )
    p.add_argument("--optimizer", choices=OPTIMIZERS)
    p.add_argument(
        "--memory-format",
        help="convolution memory format: nchw (PyTorch's default contiguous layout) or nhwc "
        "(channels_last); default: the software preset's framework default (docs/predict.md)",
    )
    add_typed_arg(p, "--learners-per-gpu", ty.positive_int, help="Crossbow learners per GPU")


def _add_data_args(p: argparse.ArgumentParser) -> None:
    """``predict``'s flags of the data: epoch size, input pipeline, token budget and price."""
    add_typed_arg(
        p, "--dataset-size", ty.positive_int, help="samples per epoch (gives epoch_time_s)"
    )
    p.add_argument(
        "--dataset",
        choices=["imagenet-jpeg", "cifar-memory", "synthetic"],
        help="what the input pipeline loads (default synthetic: no host work); docs/host.md",
    )
    p.add_argument(
        "--data-loader",
        choices=["pytorch", "tf-data", "keras", "dali"],
        help="loading library (default: the software preset's framework loader); docs/host.md",
    )
    add_typed_arg(
        p,
        "--data-loader-workers",
        ty.nonneg_int,
        help="loader workers per pipeline (PyTorch num_workers; 0 = load in the training process)",
    )
    add_typed_arg(
        p,
        "--tokens",
        ty.positive_float,
        help="training budget in tokens (e.g. 26e9; sequence models): prints the time to train",
    )
    add_typed_arg(
        p,
        "--price-per-gpu-hour",
        ty.positive_float,
        help="price of one GPU-hour (your currency): with --tokens, prints the cost",
    )


def _add_output_args(p: argparse.ArgumentParser) -> None:
    """``predict``'s flags of the calibration, the executor and what is written or printed."""
    p.add_argument("--calibration", help="calibration profile JSON (perfmodel calibrate)")
    p.add_argument("--fidelity", choices=FIDELITIES)
    p.add_argument(
        "--trace",
        type=ty.output_file("--trace", ".json"),
        help="write a Chrome/Perfetto trace JSON of the step",
    )
    add_typed_arg(p, "--gantt", ty.png_file, help="write a Gantt PNG of the schedule")
    add_typed_arg(
        p,
        "--chakra",
        ty.output_dir,
        metavar="DIR",
        help="write MLCommons Chakra execution traces (ASTRA-sim's workload), DIR/perfmodel.<rank>.et "
        "for every simulated rank",
    )
    add_typed_arg(p, "--plot", ty.png_file, help="with a GPU list: write the speedup curve PNG")
    p.add_argument("--json", action="store_true", help="print JSON")
    add_interval_arg(
        p,
        "prediction interval from the published runs like this one (default %(default)s, "
        f"an {INTERVAL_LEVEL:.0%}% range; e.g. 0.9, or off): split conformal prediction over "
        "the validation record, docs/intervals.md",
    )
    p.add_argument(
        "--explain",
        action="store_true",
        help="also print the training recipe (dtypes, sharding, overlap and streams) and where "
        "the step goes: kernel classes (GEMM by dtype, attention by backend, memory-bound by "
        "kind, casts, loss, optimizer) with the ceiling each ran at, the overlap slowdown, "
        "exposed communication per kind, host, idle and the slowest-GPU wait, adding up to the "
        "iteration time, each with its source (with --json: an 'explain' object)",
    )


#: Flags copied into the scenario under their own name (when given).
_FLAG_KEYS = (
    *SYSTEM_KEYS,
    "model",
    "batch_per_gpu",
    "global_batch",
    "precision",
    "fp8_recipe",
    "pipeline_layout",
    "compile",
    "recompute",
    "sequence_parallel",
    "zero",
    "software",
    "optimizer",
    "memory_format",
    "learners_per_gpu",
    "dataset_size",
    "dataset",
    "data_loader",
    "data_loader_workers",
    "calibration",
    "fidelity",
)


def scenario_dict(args: argparse.Namespace) -> tuple[dict[str, Any], list[int] | None]:
    """Merge the scenario file (if any) and the flags (flags win); split off a GPU list."""
    from perfmodel._io import load_structured

    d: dict[str, Any] = {}
    if args.scenario:
        d.update({k.replace("-", "_"): v for k, v in load_structured(args.scenario).items()})
        take_file_keys(d, args, str(args.scenario), FILE_RUN_KEYS)
    from_file = dict(d)
    args.scenario_keys = frozenset(from_file)  # what an error names as the file's key
    for key in _FLAG_KEYS:
        v = getattr(args, key, None)
        if v is None:
            continue
        d[key] = v
    if d.get("nccl_env") is getattr(args, "nccl_env", None) is not None:  # the flag's, parsed
        d["nccl_env"] = system_flags(args)["nccl_env"]
    if args.batch_per_gpu is not None:
        d.pop("global_batch", None)
    if args.global_batch is not None:
        d.pop("batch_per_gpu", None)
    if args.model_arg:
        ma = dict(d.get("model_args") or {})
        ma.update(parse_model_args(args.model_arg))
        d["model_args"] = ma
    if getattr(args, "software_option", None):
        so = dict(d.get("software_options") or {})
        so.update(_software_options(args.software_option))
        d["software_options"] = so
    merge_plan_flag(d, args)
    curve: list[int] | None = None
    gpus = args.gpus if args.gpus is not None else d.pop("gpus", None)
    if isinstance(gpus, list):
        curve = [int(g) for g in gpus]
    elif gpus is not None:
        text = str(gpus)
        try:
            vals = [int(x) for x in text.split(",") if x.strip()]
            if not vals:  # "--gpus ''" must not fall back to every GPU silently
                raise ValueError(text)
        except ValueError as exc:
            raise ConfigError(
                f"--gpus {text!r}: expected an integer or a list like 1,2,4,8",
                value=text,
                where="--gpus",
            ) from exc
        if "," in text:
            curve = vals
        elif vals:
            d["gpus"] = vals[0]
    if "system" not in d:
        raise ConfigError(
            "no system: give --system or a scenario file with 'system'", where="--system"
        )
    if "model" not in d:
        raise ConfigError("no model: give --model or a scenario file with 'model'", where="--model")
    if isinstance(d["system"], str):  # another type: Scenario.from_dict names it
        check_custom_only_flags(d["system"], args, from_file)
    return d, curve


def _software_options(items: list[str]) -> dict[str, str]:
    """``--software-option KEY=VALUE`` items as a mapping, later items winning (values stripped
    but still text: the scenario's parser types them,
    :func:`perfmodel.parallel.software.with_software_options`)."""
    pairs = split_assignments(
        items, where="--software-option", example="tp_comm_overlap=false", form="KEY=VALUE"
    )
    return {key: value.strip() for key, value in pairs}


def _speedup_cells(r: Any) -> str:
    """``speedup`` and ``eff`` cells of a curve row; ``-`` where the row has none (it does not
    fit in memory)."""
    if r.speedup is None or r.scaling_efficiency is None:
        return f"{'-':>8} {'-':>5}"
    return f"{r.speedup:7.2f}x {100 * r.scaling_efficiency:4.0f}%"


def curve_lines(reports: Any, attr: str) -> list[str]:
    """One line per distinct entry of the rows' ``attr`` (``defaults`` or ``printed_notes``):
    an entry every row has once, an entry of some rows with their GPU counts (a curve repeated
    each default once per row; issue 28, item 6). A row's "the 1-GPU baseline runs X" is left
    out when the rows say X themselves."""
    order: dict[str, list[int]] = {}
    for r in reports:
        own = set(getattr(r, attr))
        for entry in getattr(r, attr):
            if entry.startswith("the 1-GPU baseline runs ") and entry[24:] in own:
                continue
            order.setdefault(entry, []).append(r.num_gpus)
    out = []
    for entry, counts in order.items():
        if len(counts) == len(reports) and len(reports) > 1:
            out.append(f"  all rows: {entry}" if attr == "defaults" else entry)
        else:
            out.append(f"  {_curve_where(counts, [])}: {entry}")
    return out


def _basis_lines(reports: Any) -> list[str]:
    """What each row's speedup divides by (:func:`_curve_basis`), each distinct text once
    with the GPU counts it concerns: a row at the baseline's count reads 1.00x, the others name
    the scenario they are against (audit15 item 4)."""
    seen: dict[str, list[int]] = {}
    for r in reports:
        if text := _curve_basis(r, reports):
            seen.setdefault(text, []).append(r.num_gpus)
    return [f"  {_curve_where(counts, reports)}: speedup against {t}" for t, counts in seen.items()]


#: Relative difference of two throughputs below which a row's speedup baseline is another
#: row (:func:`_curve_basis`): one prediction reached twice differs by rounding (~1e-15).
_SAME_RUN_REL = 1e-9


def _curve_basis(r: Any, reports: Any) -> str:
    """What row ``r``'s speedup divides by (``StepReport.speedup_basis``): said to be the row
    at the baseline's GPU count where that row's throughput is the baseline's (``r``'s over its
    speedup, to :data:`_SAME_RUN_REL`: the speedup is the rows' ratio), else said to be
    another scenario, with the rows' ratio (rev15b item 1). Empty without a speedup."""
    basis = r.speedup_basis
    row = next((b for b in reports if b.num_gpus == r.baseline_gpus), None)
    if not basis or not r.speedup or r.num_gpus == r.baseline_gpus or row is None:
        return basis
    base = r.throughput_samples_per_s / r.speedup
    n = f"{row.num_gpus}-{'GPU' if row.device == 'GPU' else row.device}"
    if abs(base - row.throughput_samples_per_s) <= _SAME_RUN_REL * base:
        return f"the {n} row, {basis}"
    ratio = r.throughput_samples_per_s / row.throughput_samples_per_s
    return (
        f"{basis}; not the {n} row, another scenario (the rows' throughputs are {ratio:.2f}x apart)"
    )


def _curve_where(counts: list[int], reports: Any) -> str:
    """The rows a curve note concerns: ``all rows`` (more than one), else ``1 GPU``, ``2/8 GPUs``."""
    if len(counts) == len(reports) > 1:
        return "all rows"
    return f"{'/'.join(map(str, counts))} GPU{'s' if counts != [1] else ''}"


def _curve_fits_cell(r: Any) -> str:
    """A curve row's ``fits`` cell: ``yes``, ``yes!`` where the fit is tight
    (``StepReport.memory_tight``, the single prediction's ``fits (tight: ...)``) or ``NO``."""
    if not r.fits_in_memory:
        return f"{'NO':>4}"
    return "yes!" if r.memory_tight else f"{'yes':>4}"


def _curve_tight_lines(reports: Any) -> list[str]:
    """The line saying what a curve's ``yes!`` cells mean, with their rows (none without)."""
    counts = [r.num_gpus for r in reports if r.fits_in_memory and r.memory_tight]
    if not counts:
        return []
    from perfmodel.intervals.memory import tight_text

    return [f"  {_curve_where(counts, reports)}: memory fits, but tight (yes!): {tight_text()}"]


def _epoch_text(seconds: float | None) -> str:
    """``"12.345 s"`` or ``"34732 s (9 h 38 min)"`` (from a minute on); ``"-"`` when unknown."""
    if seconds is None:
        return "-"
    if seconds < 60:
        return f"{seconds:.3f} s"
    return f"{seconds:.0f} s ({units.format_duration(seconds)})"


def listed_pricing(sc: Any) -> Any:
    """The dated list price of the cloud instance the scenario's system names
    (``[system.cloud]``), as a :class:`~perfmodel.search.cost.Pricing` naming its source, or
    ``None`` (not a cloud system, or no price shipped). ``--price-per-gpu-hour`` wins."""
    from perfmodel.api import topology_of
    from perfmodel.search.cost import Pricing

    cloud = topology_of(sc).cloud
    if cloud is None or cloud.price_per_gpu_hour is None:
        return None
    return Pricing(
        cloud.price_per_gpu_hour,
        source=cloud.price_label(),
    )


def explain_lines(sc: Any, report: Any) -> list[str]:
    """``--explain`` text: the training recipe with its sources, then where the step goes
    (:meth:`perfmodel.report.explain.StepExplanation.format_lines`: the kernel classes with
    their ceilings, the overlap slowdown, exposed communication, host, idle and the
    slowest-GPU wait, adding up to the iteration time)."""
    from perfmodel.api import resolve

    recipe = resolve(sc).recipe
    lines = []
    if recipe is not None:
        lines.append("training recipe:")
        attention = bool(report.is_sequence_model)
        tp, pp = int(report.plan.get("tp", 1)), int(report.plan.get("pp", 1))
        lines += [f"  {line}" for line in recipe.describe(tp=tp, pp=pp, attention=attention)]
        lines.append(f"  {nccl_explain_line(sc.nccl)}")
        lines += [f"  source: {src}" for src in recipe.sources]
    if report.explanation is not None:
        lines += report.explanation.format_lines()
    elif report.kernel_classes:
        lines += report.format_kernel_classes()
    return lines


def explain_dict(sc: Any, report: Any) -> dict[str, Any]:
    """``--json --explain``: the recipe (``plan.recipe`` already holds it) and the
    explanation's rows (``explain``: key, group, seconds, share, ceiling, source; they sum to
    ``iteration_time_s``)."""
    exp = report.explanation
    return {"explain": None if exp is None else exp.to_dict()}


def run(args: argparse.Namespace) -> int:
    from perfmodel.api import Scenario
    from perfmodel.errors import PerfModelError

    d, curve = scenario_dict(args)
    where = args.scenario or "command line"
    try:
        sc = Scenario.from_dict(d, where=where, also_accepted=file_only_keys(FILE_RUN_KEYS))
        pricing = _pricing(args, sc)
        given = frozenset(d)
        checks.refuse_ignored_flags(args, sc, curve)
        if curve:
            return _run_curve(args, sc, curve, pricing, given)
        return _run_one(args, sc, pricing, given)
    except PerfModelError as exc:
        checks.name_the_flags(exc, args, _FLAG_KEYS)
        checks.name_the_file(exc, args, _FLAG_KEYS)
        raise


def _pricing(args: argparse.Namespace, sc: Any) -> Any:
    """The price of a ``--tokens`` budget: ``--price-per-gpu-hour`` (refused without
    ``--tokens``), else the cloud system's list price (:func:`listed_pricing`), else ``None``."""
    if args.price_per_gpu_hour is not None:
        from perfmodel.search.cost import Pricing

        if args.tokens is None:
            name = where_given(args, "price_per_gpu_hour", "--price-per-gpu-hour")
            raise ConfigError(
                f"{name} needs --tokens (the budget it prices{_TOKENS_NEEDED})",
                value=args.price_per_gpu_hour,
                where=name,
            )
        return Pricing(args.price_per_gpu_hour)
    if args.tokens is not None:
        return listed_pricing(sc)
    return None


def _run_curve(
    args: argparse.Namespace, sc: Any, curve: list[int], pricing: Any, given: frozenset[str]
) -> int:
    """``--gpus 1,2,4,8``: one prediction per GPU count, as JSON rows or a table, and the
    speedup plot."""
    from perfmodel.api import predict_curve
    from perfmodel.report.trace import plot_speedup

    if "nodes" in given:  # stated servers cap every count, as they cap one
        checks.check_curve_nodes(sc, curve)
    reports = predict_curve(sc, curve)
    level = getattr(args, "interval", None)
    ivs = [_intervals(r, level) for r in reports]
    if args.plot:
        plot_speedup(
            reports,
            args.plot,
            title=f"{sc.model} on {sc.system} ({sc.software})",
            intervals=[None if sp is None else (sp[0], sp[1]) for _, sp, _ in ivs],
            level=level,
        )
    if args.json:
        rows = [r.to_dict() for r in reports]
        for row, r in zip(rows, reports, strict=True):  # as one prediction's (docs/predict.md)
            row["defaults"] = cli_defaults(row["defaults"], sc)
            if r.device != "CPU":  # on the row's servers (predict_curve adds them)
                on = dataclasses.replace(sc, nodes=int(r.scenario.get("nodes", sc.nodes)))
                row["hardware"] = hardware_fields(on, r.num_gpus)
        if getattr(args, "explain", False):
            for row, r in zip(rows, reports, strict=True):
                row.update(explain_dict(sc, r))
        if args.tokens is not None:
            for row, r, iv in zip(rows, reports, ivs, strict=True):
                budget = r.token_budget(args.tokens, pricing).to_dict()
                row["token_budget"] = _run_json(iv[0], "token_budget", budget)
        for row, iv in zip(rows, ivs, strict=True):
            row.update(_interval_json(level, *iv))
        print_json(rows)
        for warning in checks.warnings(sc, given):
            print(warning, file=sys.stderr)
    else:
        _print_curve(args, sc, reports, ivs, level, given, pricing)
    if args.plot:
        print(f"speedup plot written to {args.plot}", file=sys.stderr if args.json else sys.stdout)
    return 0


def _print_curve(
    args: argparse.Namespace,
    sc: Any,
    reports: Any,
    ivs: Any,
    level: float | None,
    given: frozenset[str],
    pricing: Any = None,
) -> None:
    """A curve's table: one row per GPU count, then the executor, the choices and notes of the
    rows (each once) and what the ranges rest on."""
    print(predict_header(sc, reports[-1], curve=True, given=given))
    for warning in checks.warnings(sc, given):
        print(warning)
    for r in reports:
        for warning in checks.report_warnings(r, given):
            print(f"{r.num_gpus} GPU{'s' if r.num_gpus != 1 else ''}: {warning}")
    epoch = any(r.epoch_time_s is not None for r in reports)
    pct = f"{100 * level:g}%" if level is not None else ""
    print(
        f"{'GPUs':>5} {'plan':<28} {'iter time':>11} "
        + (f"{pct + ' iter time':>21} " if level is not None else "")
        + f"{'samples/s':>11} {'speedup':>8} {'eff':>5} "
        + (f"{pct + ' speedup':>13} " if level is not None else "")
        + f"{'exp.comm':>9} {'mem/GPU':>9} fits"
        + (f" {'epoch':>24}" if epoch else "")
        + (f" {pct + ' epoch':>25}" if epoch and level is not None else "")
        + (f" {'time to train':>24}" if args.tokens is not None else "")
        + (f" {pct + ' time to train':>25}" if args.tokens is not None and level else "")
    )
    for r, iv in zip(reports, ivs, strict=True):
        t_cell, s_cell = _curve_interval_cells(*iv) if level is not None else ("", "")
        print(
            f"{r.num_gpus:>5} {r.plan['describe']:<28} {r.iteration_time_s * 1e3:9.2f}ms "
            + t_cell
            + f"{r.throughput_samples_per_s:11.1f} {_speedup_cells(r)} "
            + s_cell
            + f"{r.exposed_comm_time_s * 1e3:7.2f}ms "
            f"{r.memory_per_gpu_bytes / units.GiB:7.2f}Gi {_curve_fits_cell(r)}"
            + (f" {_epoch_text(r.epoch_time_s):>24}" if epoch else "")
            + (f" {_run_range_cell(iv[0], r.epoch_time_s)}" if epoch and level else "")
            + (
                f" {_epoch_text(r.token_budget(args.tokens).time_s):>24}"
                if args.tokens is not None
                else ""
            )
            + (
                f" {_run_range_cell(iv[0], r.token_budget(args.tokens).time_s)}"
                if args.tokens is not None and level
                else ""
            )
        )
    if args.tokens is not None and pricing is not None:
        print(_curve_cost_line(reports, args.tokens, pricing))
    # the executor that timed the rows, as the single prediction's "[analytic]" says
    print(f"fidelity used: {', '.join(sorted({r.fidelity for r in reports}))}")
    # choices made per row (automatic micro-batch, speedup baseline) and notes: each
    # once, with the GPU counts it concerns unless every row has it
    shown = [below_header(r, sc) for r in reports]  # the header names the job's defaults
    for line in curve_lines(shown, "defaults") + curve_lines(reports, "printed_notes"):
        print(line)
    for line in _basis_lines(reports) + _curve_tight_lines(reports):
        print(line)
    for line in _curve_interval_notes(level, reports, ivs):
        print(line)


def _curve_cost_line(reports: Any, tokens: float, pricing: Any) -> str:
    """The cost of the token budget at each row's GPU count (``--price-per-gpu-hour`` or the
    cloud list price with a GPU list; audit15 item 10: the text table printed none)."""
    cells = []
    source = ""
    for r in reports:
        budget = r.token_budget(tokens, pricing)
        source = budget.price_source
        cost = "-" if budget.cost is None else f"{budget.cost:,.2f}"
        cells.append(f"{r.num_gpus} GPU{'s' if r.num_gpus != 1 else ''} {cost}")
    return f"cost of {tokens:,.0f} tokens: {'; '.join(cells)} (at {source})"


def _run_one(args: argparse.Namespace, sc: Any, pricing: Any, given: frozenset[str]) -> int:
    """One prediction: the files asked for (trace, Gantt chart, Chakra traces), then JSON or
    the table with its interval, explanation, token budget and training-run estimate."""
    from perfmodel.api import predict

    run_opts = run_options(args)
    report = predict(sc)
    budget = None if args.tokens is None else report.token_budget(args.tokens, pricing)
    estimate = None if budget is None else training_run(sc, report, args, pricing, run_opts)
    chakra_paths = _write_files(args, sc, report)
    level = getattr(args, "interval", None)
    step_iv, _speed_iv, iv_error = _intervals(report, level, speedup=False)
    hw = None if report.device == "CPU" else hardware_fields(sc, report.num_gpus)
    if args.json:
        out = report.to_dict()
        out["defaults"] = cli_defaults(out["defaults"], sc)  # the flags' words
        if hw is not None:
            out["hardware"] = hw
        if getattr(args, "explain", False):
            out.update(explain_dict(sc, report))
        out.update(_interval_json(level, step_iv, None, iv_error))
        if budget is not None:
            out["token_budget"] = _run_json(step_iv, "token_budget", budget.to_dict())
        if estimate is not None:
            out["training_run"] = _run_json(step_iv, "training_run", estimate.to_dict(), estimate)
        if chakra_paths:
            out["chakra_files"] = [str(p) for p in chakra_paths]
        print_json(out)
        for warning in checks.warnings(sc, given) + checks.report_warnings(report, given):
            print(warning, file=sys.stderr)
        return 0
    print(predict_header(sc, report, given=given))
    if hw is not None:
        print(hardware_line(hw))
    for warning in checks.warnings(sc, given) + checks.report_warnings(report, given):
        print(warning)
    shown = below_header(report, sc)  # the header names the job's defaults
    print(_table_with_interval(shown, _interval_text(report, step_iv, iv_error)))
    if getattr(args, "explain", False):
        print("\n".join(explain_lines(sc, report)))
    span = _run_span(step_iv)
    if budget is not None:
        print("\n".join(budget.format_lines(span)))
    if estimate is not None:
        print("\n".join(estimate.format_lines(span)))
    if args.trace:
        print(f"trace written to {args.trace} (open in https://ui.perfetto.dev)")
    if args.gantt:
        print(f"Gantt chart written to {args.gantt}")
    if chakra_paths:
        names = (
            chakra_paths[0].name
            if len(chakra_paths) == 1
            else f"{chakra_paths[0].name} ... {chakra_paths[-1].name}"
        )
        print(
            f"Chakra traces written to {args.chakra}: {len(chakra_paths)} file(s), "
            f"{names} (one per simulated rank)"
        )
    return 0


def _write_files(args: argparse.Namespace, sc: Any, report: Any) -> list[Any]:
    """Write ``--trace``, ``--gantt`` and ``--chakra`` of one prediction; the Chakra files."""
    from perfmodel.report.trace import plot_gantt, write_chrome_trace

    if args.trace and report.timeline is not None:
        write_chrome_trace(report.timeline, args.trace)
    if args.gantt and report.timeline is not None:
        plot_gantt(report.timeline, args.gantt, title=f"{sc.model}: {report.plan['describe']}")
    if not (args.chakra and report.timeline is not None):
        return []
    from perfmodel.api import chakra_metadata, topology_of
    from perfmodel.report.chakra import write_chakra

    ranks = {g: i for i, g in enumerate(topology_of(sc).gpus)}
    return write_chakra(report.timeline, args.chakra, ranks=ranks, meta=chakra_metadata(sc, report))


# ------------------------------------------------------------------ token budget: what it costs


#: The flags of a token budget's failures, checkpoints and restarts: ``(flag, kind, help)``.
RUN_FLAGS: tuple[TypedFlag, ...] = (
    (
        "--mtbf-gpu-hours",
        ty.positive_float,
        "mean GPU-hours between interruptions charged per GPU (default 79,230: Llama 3 "
        "405B, Table 5 GPU rows)",
    ),
    (
        "--mtbf-node-hours",
        ty.positive_float,
        "mean host-hours between interruptions charged per host (default 17,578: Llama 3 "
        "405B, Table 5 other rows)",
    ),
    (
        "--storage-write-GBps",
        ty.positive_float,
        "aggregate checkpoint write bandwidth, GB/s (default: DGX SuperPOD 'Better', 4 GB/s "
        "per 8 GPUs up to 20 GB/s per 256 GPUs)",
    ),
    (
        "--storage-read-GBps",
        ty.positive_float,
        "aggregate checkpoint read bandwidth, GB/s (default: 8 GB/s per 8 GPUs up to 40 "
        "GB/s per 256 GPUs)",
    ),
    (
        "--checkpoint-save-s",
        ty.positive_float,
        "seconds a checkpoint save blocks training (an asynchronous save; default: "
        "checkpoint bytes / write bandwidth)",
    ),
    (
        "--checkpoint-interval-s",
        ty.positive_float,
        "your compute seconds between checkpoints (default: Daly's optimum)",
    ),
    (
        "--restart-s",
        ty.nonneg_float,
        "relaunch seconds of a restart before the checkpoint is read (default 600, an estimate)",
    ),
)


#: How the error of a budget setting without a budget ends: a scenario file may give it too.
_TOKENS_NEEDED = "; a scenario file may give 'tokens'"

#: The token budget's flags a scenario file may give as keys (``tokens = 26e9``): ``(key, flag,
#: kind)`` (:func:`perfmodel.cli.predict_file.take_file_keys`).
FILE_RUN_KEYS: tuple[RunKey, ...] = (
    ("tokens", "--tokens", ty.positive_float),
    ("price_per_gpu_hour", "--price-per-gpu-hour", ty.positive_float),
    *((flag_dest(flag), flag, kind) for flag, kind, _ in RUN_FLAGS),
)


def add_run_args(p: argparse.ArgumentParser) -> None:
    """Flags of a token budget's failures, checkpoints and restarts (``--tokens``;
    :mod:`perfmodel.report.goodput`, docs/predict.md "Goodput"): :data:`RUN_FLAGS`."""
    g = p.add_argument_group(
        "token budget: failures, checkpoints, energy (with --tokens; docs/predict.md 'Goodput')"
    )
    add_typed_args(g, RUN_FLAGS)


def run_options(args: argparse.Namespace) -> tuple[Any, Any, float | None]:
    """``(Reliability, Storage, checkpoint interval or None)`` from the flags of
    :func:`add_run_args`; a flag given without ``--tokens`` is refused (it would do nothing)."""
    from perfmodel.report.goodput import RESTART_OVERHEAD_S, Reliability, Storage

    given = [f for f, _, _ in RUN_FLAGS if getattr(args, flag_dest(f), None) is not None]
    named = [where_given(args, flag_dest(f), f) for f in given]  # "FILE: key" or the flag
    if given and getattr(args, "tokens", None) is None:
        raise ConfigError(
            f"{named[0]} needs --tokens (the budget whose failures and checkpoints it "
            f"describes{_TOKENS_NEEDED})",
            value=getattr(args, flag_dest(given[0])),
            where=named[0],
        )
    rel = Reliability(
        **{
            k: getattr(args, k)
            for k in ("mtbf_gpu_hours", "mtbf_node_hours")
            if getattr(args, k, None) is not None
        }
    )
    if mtbf_given := [n for f, n in zip(given, named, strict=True) if f.startswith("--mtbf-")]:
        import dataclasses

        rel = dataclasses.replace(rel, source=f"{', '.join(mtbf_given)} given; " + rel.source)
    w, r = getattr(args, "storage_write_GBps", None), getattr(args, "storage_read_GBps", None)
    restart = getattr(args, "restart_s", None)
    sto = Storage(
        write_Bps=None if w is None else w * units.GB,
        read_Bps=None if r is None else r * units.GB,
        restart_overhead_s=RESTART_OVERHEAD_S if restart is None else restart,
        save_s=getattr(args, "checkpoint_save_s", None),
    )
    return rel, sto, getattr(args, "checkpoint_interval_s", None)


def training_run(
    sc: Any, report: Any, args: argparse.Namespace, pricing: Any, opts: tuple[Any, Any, Any]
) -> Any:
    """The :class:`~perfmodel.report.goodput.RunEstimate` of ``--tokens`` for one prediction."""
    from perfmodel.api import run_estimate

    rel, sto, interval = opts
    return run_estimate(
        sc,
        report,
        args.tokens,
        pricing=pricing,
        reliability=rel,
        storage=sto,
        interval_s=interval,
    )


# --------------------------------------------------------------------------- intervals (issue 26)


def _intervals(report: Any, level: float | None, *, speedup: bool = True) -> tuple[Any, Any, str]:
    """``(step interval, speedup interval, error)`` of a report at ``level``
    (:mod:`perfmodel.intervals.answers`); ``None`` for each with ``--interval off``, and the
    reason when the residual record cannot give one (the prediction is printed anyway)."""
    from perfmodel.errors import PerfModelError

    if level is None:
        return None, None, ""
    from perfmodel.intervals.answers import speedup_interval, step_interval

    try:
        step = step_interval(report, level)
        speed = speedup_interval(report, level) if speedup else None
    except PerfModelError as exc:
        return None, None, f"no interval: {exc}"
    return step, speed, ""


def _interval_json(level: float | None, step: Any, speed: Any, error: str = "") -> dict[str, Any]:
    """The ``--json`` interval fields (``interval_level`` ``None`` with ``--interval off``)."""
    if step is None:
        out: dict[str, Any] = {"interval_level": None}
        if error:
            out["interval_error"] = error
        return out
    out = step.to_dict()
    if speed is not None:
        out["speedup_low"], out["speedup_high"] = speed[0], speed[1]
        out["speedup_interval_basis"] = speed[2].basis
        out["speedup_capped_at_linear"] = speed[3] is not None
    return out


def _run_span(step: Any) -> Any:
    """The step interval as the range of a run's times and costs (``TokenBudget`` and
    ``RunEstimate.format_lines``); ``None`` without one (``--interval off``, no record, a plan
    that does not fit)."""
    if step is None or step.low.get("iteration_time_s") is None:
        return None
    return step


def _run_json(step: Any, name: str, d: dict[str, Any], estimate: Any = None) -> dict[str, Any]:
    """A token budget's or run estimate's JSON (``name``: ``token_budget``, ``training_run``)
    with ``<field>_low`` / ``<field>_high`` of its times and costs
    (:func:`perfmodel.intervals.answers.run_fields`, the step time's range) and, given the run
    ``estimate``, of its energy (``answers.ENERGY_FIELDS``: ``RunEstimate.energy_ranges``, the
    text's energy range line); none without a step range (:func:`_run_span`)."""
    span = _run_span(step)
    if span is None:
        return d
    from perfmodel.intervals.answers import RUN_FIELDS, run_fields

    energy = {} if estimate is None else estimate.energy_ranges(span)
    return {**d, **run_fields(span, d, RUN_FIELDS[name]), **energy}


def _interval_text(report: Any, step: Any, error: str) -> list[str]:
    if step is None:
        return [f"note: {error}"] if error else []
    from perfmodel.intervals.answers import interval_lines

    borrowed = borrowed_stack_note(report, step)
    return interval_lines(report, step) + ([f"  {borrowed}"] if borrowed else [])


def borrowed_stack_note(report: Any, step: Any) -> str:
    """``"unvalidated: ..."`` when none of the published runs an interval rests on
    (``step.residual.pool.rows``) used the report's framework family
    (:func:`perfmodel.intervals.features.stack_family` of its software preset): the range is
    borrowed from other frameworks' runs (keras-multi-gpu Llama-3-8B from Megatron/NeMo/
    torchtitan runs; audit15 item 10); ``""`` otherwise."""
    from perfmodel.intervals.features import stack_family

    software = str(report.plan.get("software") or report.scenario.get("software") or "")
    rows = step.residual.pool.rows
    stacks = {str(getattr(row.features, "family", "")) for row in rows} - {""}
    if not software or not stacks or stack_family(software) in stacks:
        return ""
    return (
        f"unvalidated for {software}: none of the {len(rows)} runs this range rests on used "
        f"the {stack_family(software)} stack (they ran {', '.join(sorted(stacks))}); the range "
        "is borrowed from other frameworks"
    )


def _table_with_interval(report: Any, lines: list[str]) -> str:
    """The report's table with the interval ``lines`` before its closing notes (the numbers
    they bound stay in view)."""
    table = report.format_table()
    notes = "\n".join(report.printed_notes)
    if not lines:
        return table
    if notes and table.endswith("\n" + notes):
        head = table[: -len(notes) - 1]
        return "\n".join([head, *lines, notes])
    return "\n".join([table, *lines])


def _curve_interval_cells(step: Any, speed: Any, _error: str = "") -> tuple[str, str]:
    """The ``iter time`` and ``speedup`` range cells of a curve row, each with its trailing
    space (``-`` where there is none: the baseline itself, a run that does not fit); the
    iteration-time range in milliseconds, as the ``iter time`` column."""
    t = "-"
    if step is not None and step.low["iteration_time_s"] is not None:
        # in the unit of the row's own iteration time (ms), not format_time's (audit15 item 16)
        t = f"{step.low['iteration_time_s'] * 1e3:.2f}-{step.high['iteration_time_s'] * 1e3:.2f}ms"
    sp = "-" if speed is None else f"{speed[0]:.2f}-{speed[1]:.2f}x" + ("*" if speed[3] else "")
    return f"{t:>21} ", f"{sp:>13} "


def _run_range_cell(step: Any, seconds: float | None) -> str:
    """A curve row's range of an epoch or a token budget's time to train
    (:meth:`perfmodel.intervals.answers.StepInterval.run_range`: the iteration time's range scaled), 25
    characters; ``-`` where the row has no range or no such time."""
    span = _run_span(step)
    if span is None or seconds is None:
        return f"{'-':>25}"
    lo, hi = span.run_range(seconds)
    return f"{units.format_duration(lo) + '-' + units.format_duration(hi):>25}"


def _curve_interval_notes(level: float | None, reports: Any, ivs: Any) -> list[str]:
    """What a curve's ranges rest on (:func:`perfmodel.intervals.wording.basis_clause`: the
    what-if's and the systems search's words, with the bias of runs like these and the notes),
    each distinct text once, with its GPU counts."""
    from perfmodel.intervals.wording import basis_clause

    if level is None:
        return []
    pct = f"{100 * level:g}%"
    seen: dict[str, list[int]] = {}
    for r, (step, speed, error) in zip(reports, ivs, strict=True):
        if step is None:
            if error:
                seen.setdefault(error, []).append(r.num_gpus)
            continue
        text = f"{pct} iteration time range {basis_clause(step.residual, these=True)}"
        if borrowed := borrowed_stack_note(r, step):
            text += f"; {borrowed}"
        seen.setdefault(text, []).append(r.num_gpus)
        if speed is not None:
            seen.setdefault(
                f"{pct} speedup range from {speed[2].basis} (the ratio's own residuals)", []
            ).append(r.num_gpus)
            if speed[3] is not None:
                seen.setdefault(
                    "* speedup range capped at linear scaling (GPUs / baseline GPUs): the model "
                    "predicts no superlinear mechanism here, and no measured pair exceeds it by more than 0.2%",
                    [],
                ).append(r.num_gpus)
    return [f"  {_curve_where(counts, reports)}: {text}" for text, counts in seen.items()]
