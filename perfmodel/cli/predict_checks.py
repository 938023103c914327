"""What ``perfmodel predict`` says it assumed and what it refuses (audit15 items 6, 10, 16):
the WARNING lines under the header (a transformer on the default optimizer, a flag that
switches the run's mode, a ZeRO stage a preset does not run, an automatic micro-batch the
batch's divisors left small), the flags a mode would silently ignore (refused before any
work), and the scenario file named in an error about it."""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterable
from typing import Any

from perfmodel.cli._common import plan_flag_items
from perfmodel.errors import ConfigError


def warnings(sc: Any, given: frozenset[str]) -> list[str]:
    """The WARNING lines printed under the header (on stderr with ``--json``): the default
    optimizer of a transformer, a mode a flag switched, a stage a preset does not run."""
    out = [default_optimizer_warning(sc, given), *flag_warnings(sc)]
    return [w for w in out if w]


def default_optimizer_warning(sc: Any, given: frozenset[str]) -> str:
    """A warning when a transformer runs on the default optimizer (plain SGD, no state) because
    the scenario named none: transformers train with Adam-class optimizers, whose two fp32
    moments per parameter (:meth:`perfmodel.workload.memory.Optimizer.state_bytes_per_param`:
    8 bytes against SGD's 0) and longer update change both the memory and the step; ``""``
    otherwise (the default itself stays SGD, the classic CNN runs' optimizer)."""
    from perfmodel.errors import PerfModelError
    from perfmodel.workload.zoo import get_model_info

    if "optimizer" in given or sc.optimizer != "sgd":
        return ""
    try:
        family = get_model_info(sc.model).family
    except PerfModelError:  # a workload of the user's own (workload_fn)
        return ""
    if family != "transformer":
        return ""
    from perfmodel.workload.memory import Optimizer

    adam, sgd = Optimizer.ADAMW.state_bytes_per_param, Optimizer.SGD.state_bytes_per_param
    return (
        f"WARNING: optimizer sgd is only the default (no --optimizer given); {sc.model} is a "
        f"transformer, trained with Adam/AdamW, whose {adam} bytes of state per parameter "
        f"(sgd: {sgd}) "
        "and longer update this prediction leaves out: memory and step time are optimistic; "
        "give --optimizer adamw (or the one you use)"
    )


def flag_warnings(sc: Any) -> list[str]:
    """A flag that changes what the run is without saying so (audit15 item 10):
    ``learners_per_gpu > 1`` switches data parallelism to Crossbow's synchronous model averaging
    (:func:`perfmodel.pipeline.resolve.plan_for`; no published Crossbow run is in the residual
    record, so the interval is not validated for it); ZeRO-2/3 under the ``megatron`` preset,
    whose Megatron-LM shards only the optimizer state (``--use-distributed-optimizer``, ZeRO-1:
    NVIDIA/Megatron-LM ``megatron/training/arguments.py``), is modelled on that preset's
    kernels with no published run behind it."""
    out = []
    mode_chosen = sc.software == "crossbow" or sc.dp_mode is not None
    if sc.learners_per_gpu is not None and sc.learners_per_gpu > 1 and not mode_chosen:
        out.append(
            f"WARNING: learners_per_gpu {sc.learners_per_gpu} runs Crossbow's synchronous model "
            f"averaging (mode=crossbow), not {sc.software}'s data parallelism; no published "
            "Crossbow run is in the interval's record, so its range is unvalidated for this mode"
        )
    if sc.software == "megatron" and sc.zero is not None and sc.zero >= 2:
        other = "deepspeed-zero2" if sc.zero == 2 else "deepspeed-zero3 or fsdp"
        out.append(
            f"WARNING: zero {sc.zero} with the megatron preset: Megatron-LM shards only the "
            "optimizer state (--use-distributed-optimizer, ZeRO-1); ZeRO-"
            f"{sc.zero} is modelled on megatron's kernels with no published run behind it "
            f"({other} runs it)"
        )
    return out


def report_warnings(report: Any, given: frozenset[str]) -> list[str]:
    """Warnings about one prediction's choices: an automatic micro-batch that the batch's
    divisors left far below what fits
    (:func:`perfmodel.pipeline.autobatch.coarse_split_warning`)."""
    from perfmodel.pipeline.autobatch import coarse_split_warning

    plan = report.plan
    dp, mb = int(plan.get("dp", 1)), plan.get("microbatch_size")
    learners = int(plan.get("learners_per_gpu", 1) or 1)
    if "microbatch" in given or not report.fits_in_memory or not mb or dp < 1:
        return []
    per_replica = report.samples_per_step // (dp * learners)
    warning = coarse_split_warning(per_replica, int(plan.get("pp", 1)), int(mb))
    return [warning] if warning else []


def refuse_ignored_flags(args: argparse.Namespace, sc: Any, curve: list[int] | None) -> None:
    """Refuse, before any prediction, a flag this mode would silently ignore (audit15 item 10):
    ``--plot`` without a GPU list (it draws the speedup curve), ``--trace``/``--gantt``/
    ``--chakra`` with one (each writes one step's schedule), ``--memory-format`` for a model
    without convolutions."""
    if args.plot and not curve:
        raise ConfigError(
            f"--plot {args.plot}: the plot is the speedup curve of a GPU list; give --gpus "
            "1,2,4,8 (one prediction has no curve)",
            value=str(args.plot),
            where="--plot",
        )
    if curve:
        for flag in ("trace", "gantt", "chakra"):
            value = getattr(args, flag, None)
            if value:
                raise ConfigError(
                    f"--{flag} {value}: writes one prediction's step, not a curve's; give one "
                    f"GPU count (--gpus {curve[-1]}) instead of the list {','.join(map(str, curve))}",
                    value=str(value),
                    where=f"--{flag}",
                )
    if args.memory_format is not None:
        from perfmodel.errors import PerfModelError
        from perfmodel.workload.zoo import get_model_info

        try:
            family = get_model_info(sc.model).family
        except PerfModelError:
            return
        if family != "cnn":
            raise ConfigError(
                f"--memory-format {args.memory_format}: {sc.model} has no convolutions (the "
                "flag sets the layout of a CNN's convolutions)",
                value=args.memory_format,
                where="--memory-format",
            )


#: The scenario keys an error's text may state as ``key=value`` (the GPUs and servers a run
#: uses: :func:`perfmodel.pipeline.resolve._gpus_used`), written as their flags
#: (``--nodes 2``) when no scenario file set them (:func:`name_the_flags`).
_STATED_KEYS = ("gpus", "nodes")


def check_curve_nodes(sc: Any, counts: Iterable[int]) -> None:
    """A GPU list on stated servers (``--nodes``, or a scenario file's ``nodes``): every count
    within them, as one count is (user23 item 4: ``predict --nodes 1 --gpus 8,16`` grew the
    16-GPU row to two servers, quietly, where ``--gpus 16`` alone is refused, and ``compare``
    now refuses it too, :func:`perfmodel.cli.compare_checks.check_nodes_cap`).

    Raises
    ------
    InfeasiblePlanError
        The first count above the servers' GPUs, in predict's words
        (:func:`perfmodel.pipeline.resolve.gpus_beyond_nodes`, ``where="gpus"``).
    """
    from perfmodel.api import topology_of
    from perfmodel.pipeline.resolve import gpus_beyond_nodes

    topo = topology_of(sc)
    over = [g for g in counts if g > topo.num_gpus]
    if over:
        raise gpus_beyond_nodes(over[0], topo.num_gpus, topo.gpus_per_node, sc.system, sc.nodes)


def name_the_flags(exc: Any, args: argparse.Namespace, flag_keys: Iterable[str]) -> None:
    """Let an error about a scenario key that no scenario file set name it as its flag, as the
    user writes it (user21: ``nodes=2049``, ``global_batch:``, ``scenario.precision:`` for
    ``--nodes``, ``--global-batch``, ``--precision``): ``where`` becomes the flag, and the
    ``key=value`` of :data:`_STATED_KEYS` in its text ``--key value``. A key the file set keeps
    its name (:func:`name_the_file` then names the file), and the stated keys given as flags
    in its text are still named as flags (rev27b item 5: a file's ``gpus = 20`` with
    ``--nodes 2`` said "use nodes=3"), and a key the file set, stated in a flag's error, is
    followed by the file (``nodes=1 (s1.toml)``, as a file key's error names it; rev29 item 2)."""
    where = exc.where if isinstance(exc.where, str) else ""
    key = where.removeprefix("scenario.")
    if where.startswith("-") or key not in {*flag_keys, "gpus"}:
        return
    file_keys = getattr(args, "scenario_keys", frozenset())
    from_file = {k for k in file_keys if getattr(args, k, None) is None}  # no flag is None
    flagged = {k for k in _STATED_KEYS if k not in from_file}
    if key in from_file:  # the file's key; the others given as flags are named as flags
        flagged = {k for k in flagged if getattr(args, k, None) is not None}
    msg = str(exc.args[0]) if exc.args else ""
    for k in flagged:
        msg = re.sub(rf"(?<![\w*.<>-]){k}=(?=\d)", f"--{k} ", msg)
    path = getattr(args, "scenario", None)
    if path and key not in from_file:  # a flag's error stating a file's key names the file
        for k in sorted(from_file & set(_STATED_KEYS)):
            msg = re.sub(rf"(?<![\w*.<>-])({k}=\d+)", rf"\1 ({path})", msg, count=1)
    exc.args = (msg, *exc.args[1:])
    if key not in from_file:
        exc.where = "--" + key.replace("_", "-")


def name_the_file(exc: Any, args: argparse.Namespace, flag_keys: Iterable[str]) -> None:
    """Let an error about the scenario name the scenario file it came from (audit15 item 16:
    a plan that does not match the GPUs, ``seq_len`` above ``max_positions``, ``nodes = 0`` in
    a file were reported without it). An error naming a flag (``where`` ``--plan``,
    ``--trace``...) or a key a flag set stays as it is; one naming a key of the file gets the
    file before it; one naming nothing gets the file, with "and the flags given" when flags
    set scenario keys too."""
    path = getattr(args, "scenario", None)
    if not path or str(path) in str(exc):
        return
    where = None if exc.where is None else str(exc.where)
    if where is not None and where.startswith("-"):
        return
    flagged = {key for key in flag_keys if getattr(args, key, None) is not None}
    if args.plan:
        flagged |= set(plan_flag_items(args.plan))
    if args.gpus:
        flagged.add("gpus")
    if args.model_arg:
        flagged.add("model_args")
    flagged -= {"fidelity", "calibration", "dataset", "data_loader", "data_loader_workers"}
    key = None if where is None else where.removeprefix("scenario.").split(".")[0].split(":")[0]
    if key is not None and key in flagged:
        return  # the value came from a flag
    source = f"{path} (and the flags given)" if key is None and flagged else str(path)
    exc.where = f"{source}: {where}" if where and where not in exc.args[0] else source
