"""What several subcommands share: their parsers' shape (a command described by its module's
docstring, a command of subcommands), choosing a system, typed flags read from a table, output
format and JSON printing, ``--model-arg`` and ``--budget``."""

from __future__ import annotations

import argparse
import functools
import inspect
import json
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from perfmodel._schema import FLAG_WORDS, split_assignments
from perfmodel.cli import _types as ty
from perfmodel.dtypes import Precision
from perfmodel.errors import ConfigError, FlagError
from perfmodel.intervals import DEFAULT_LEVEL
from perfmodel.scenario import HARDWARE_FIELDS

if TYPE_CHECKING:  # the topology stack (networkx) loads when a system is built, not at parse
    from perfmodel.comm.nccl_env import NcclEnv
    from perfmodel.topology import Topology

#: Scenario keys set by the :func:`add_system_args` flags (``--fabric`` -> ``fabric_topology``).
SYSTEM_KEYS = HARDWARE_FIELDS


# ------------------------------------------------------------------------------- parsers


def add_documented_command(subparsers: Any, name: str, help: str, doc: str | None) -> Any:
    """The parser of subcommand ``name`` whose description is its module's docstring ``doc``,
    shown as written (``RawDescriptionHelpFormatter``: the example command lines keep their
    line breaks); ``predict``, ``compare``, ``sweep``, ``model import-chakra``."""
    return subparsers.add_parser(
        name,
        help=help,
        description=doc,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )


def add_command_group(
    subparsers: Any, name: str, *, help: str, description: str, commands: Sequence[str]
) -> Any:
    """Add command ``name`` made of subcommands (``hw``, ``model``, ``topo``) and return the
    action that their parsers are added to: the chosen one is ``args.<name>_command``, listed
    as ``{a,b,...}`` from ``commands``. The command alone prints its help on stderr, exit 2."""
    parser = subparsers.add_parser(name, help=help, description=description)
    sub = parser.add_subparsers(dest=f"{name}_command", metavar="{" + ",".join(commands) + "}")

    def print_help(args: argparse.Namespace) -> int:
        parser.print_help(sys.stderr)
        return 2

    parser.set_defaults(func=print_help)
    return sub


#: A typed flag: ``(flag, kind, help)``, ``kind`` a :mod:`perfmodel.cli._types` factory.
TypedFlag = tuple[str, Callable[[str], Callable[[str], Any]], str]


def add_typed_arg(
    group: Any, flag: str, kind: Callable[[str], Callable[[str], Any]], **options: Any
) -> Any:
    """Add ``flag`` to ``group`` (a parser or an argument group) with its values parsed by
    ``kind(flag)``, a :mod:`perfmodel.cli._types` factory, so a bad value's error names the
    flag as it is declared here, stated once; ``options`` are ``add_argument``'s others
    (``default``, ``help``, ``metavar``, ...). Returns argparse's action."""
    return group.add_argument(flag, type=kind(flag), **options)


def add_typed_args(group: Any, rows: Sequence[TypedFlag]) -> None:
    """Add one flag per ``(flag, kind, help)`` row, in order (:func:`add_typed_arg`)."""
    for flag, kind, help in rows:
        add_typed_arg(group, flag, kind, help=help)


def flag_dest(flag: str) -> str:
    """The attribute argparse stores ``flag``'s value under (``--storage-write-GBps`` ->
    ``storage_write_GBps``)."""
    return flag.lstrip("-").replace("-", "_")


def print_json(data: Any, *, indent: int = 2) -> None:
    """Print ``data`` as JSON on stdout, then a newline: every ``--json`` of the CLI (values JSON
    has no type for, a path or an enum, as their ``str``)."""
    json.dump(data, sys.stdout, indent=indent, default=str)
    sys.stdout.write("\n")


# ---------------------------------------------------------------------------------- flags


def add_quiet_arg(
    parser: argparse.ArgumentParser,
    help: str = "no progress line on stderr (shown after 2 s when stderr is a terminal)",
) -> None:
    """``COMMAND --quiet``; its default is left out so that ``perfmodel --quiet COMMAND`` holds."""
    parser.add_argument("--quiet", action="store_true", default=argparse.SUPPRESS, help=help)


def add_system_args(parser: argparse.ArgumentParser, *, required: bool = True) -> None:
    """``--system`` plus the fabric overrides and the ``custom`` hardware-from-parts flags."""
    g = parser.add_argument_group("hardware")
    g.add_argument(
        "--system",
        required=required,
        help="catalogue system (perfmodel topo list), a .toml or .json system file (perfmodel topo "
        "import FILE -o box.toml writes one), 'custom' (hardware from parts), or "
        "'calibrated' (predict: the one device a --calibration profile measured, e.g. a CPU)",
    )
    # No --nodes given is None, not 1: a --nodes given (1 too) wins over a scenario file's or a
    # log's node count, as every flag does; the scenario's own default is 1 server.
    add_typed_arg(g, "--nodes", ty.positive_int, help="number of servers (default 1)")
    g.add_argument(
        "--network",
        help="fabric link technology, overrides the system default (e.g. ib-hdr, eth-40g)",
    )
    add_typed_arg(
        g, "--nics-per-node", ty.positive_int, help="NIC ports per server used by the fabric"
    )
    g.add_argument(
        "--fabric",
        dest="fabric_topology",
        choices=["single-switch", "fat-tree", "rail"],
        help="fabric topology",
    )
    add_typed_arg(
        g,
        "--oversubscription",
        ty.oversubscription,
        help="fat-tree leaf oversubscription (2 = 2:1)",
    )
    g.add_argument("--gpu", help="GPU model (custom systems and GPU-selectable systems)")
    add_typed_arg(g, "--gpus-per-node", ty.positive_int, help="custom systems: GPUs per server")
    g.add_argument(
        "--intra-node", help="custom systems: pcie3|pcie4|pcie5|nvlink1..nvlink5|nvswitch-v1..v4"
    )
    nccl = g.add_argument(
        "--nccl",
        metavar="RELEASE",
        help="NCCL release the job runs (e.g. 2.7, 2.18.3): %(nccl_releases)s",
    )
    nccl.nccl_releases = _HelpWhenShown(nccl_releases)  # type: ignore[attr-defined]
    g.add_argument(
        "--nccl-env",
        action="append",
        type=_nccl_env_item,
        metavar="NAME=VALUE",
        help="an NCCL variable of the job (repeatable): NCCL_ALGO (e.g. ^NVLS, Ring, "
        "allreduce:tree), NCCL_PROTO (e.g. ^LL128), NCCL_NVLS_ENABLE=0, NCCL_COLLNET_ENABLE=0 "
        "take what they switch off out of NCCL's choice; others change nothing",
    )


def _nccl_env_item(text: str) -> str:
    """One ``--nccl-env NAME=VALUE``, checked when parsed (NCCL's rules,
    :meth:`perfmodel.comm.nccl_env.NcclEnv.parse`): a bad one is a :class:`FlagError` naming
    the flag and the variable (exit 2) before any scenario is built."""
    from perfmodel.comm.nccl_env import NcclEnv

    try:
        NcclEnv.parse_assignments([text], where="--nccl-env")
    except ConfigError as exc:
        raise FlagError(str(exc), value=text, where="--nccl-env") from None
    return text


def _nccl_env_flag(args: argparse.Namespace) -> NcclEnv | None:
    """The ``--nccl-env`` items given (each checked as the flag was read: :func:`_nccl_env_item`)
    as one :class:`~perfmodel.comm.nccl_env.NcclEnv` that names ``--nccl-env`` as its origin
    (what an error about it later names); ``None`` when the flag is not given."""
    items = getattr(args, "nccl_env", None)
    if not items:
        return None
    from perfmodel.comm.nccl_env import NcclEnv

    return NcclEnv.parse_assignments(items, where="--nccl-env")


def system_flags(args: argparse.Namespace) -> dict[str, Any]:
    """The system flags given (:data:`SYSTEM_KEYS`), by scenario key, ``--nccl-env`` parsed
    (:func:`_nccl_env_flag`)."""
    d = {k: v for k in SYSTEM_KEYS if (v := getattr(args, k, None)) is not None}
    if d.get("nccl_env"):
        d["nccl_env"] = _nccl_env_flag(args)
    return d


def check_custom_only_flags(
    system: str, args: argparse.Namespace, file_keys: Mapping[str, Any] | None = None
) -> None:
    """Refuse ``--gpus-per-node`` / ``--intra-node`` (and a scenario file's ``gpus_per_node`` /
    ``intra_node`` the flags do not override, ``file_keys``) for a system other than
    ``custom``, naming the flag or the file's key
    (:func:`perfmodel.topology.builders.check_custom_only`, the one check)."""
    from perfmodel.topology.builders import CUSTOM_ONLY_KEYS, check_custom_only

    flags = {k: getattr(args, k, None) for k in CUSTOM_ONLY_KEYS}
    check_custom_only(system, flags, form="flag")
    if file_keys:
        left = {k: v for k, v in file_keys.items() if k in CUSTOM_ONLY_KEYS and flags[k] is None}
        check_custom_only(system, left, form="key", where=getattr(args, "scenario", None))


def system_from_args(args: argparse.Namespace) -> Topology:
    """Build the :class:`Topology` the hardware flags (:data:`SYSTEM_KEYS`, one per scenario
    hardware field) describe (:func:`perfmodel.topology.builders.build_system`, then
    ``--nccl``'s P2P rule and ``--nccl-env``)."""
    from perfmodel.topology.builders import build_system

    check_custom_only_flags(args.system, args)
    hw = {k: getattr(args, k) for k in SYSTEM_KEYS}
    if hw["nodes"] is None:  # no --nodes: one server
        hw["nodes"] = 1
    nccl = hw.pop("nccl")
    del hw["nccl_env"]  # parsed once: _nccl_env_flag
    topo = build_system(hw.pop("system"), **hw)
    if nccl:
        from perfmodel.topology.nccl_p2p import NcclRelease, with_nccl_p2p_rule

        topo = with_nccl_p2p_rule(topo, NcclRelease.parse(nccl, where="--nccl"))
    env = _nccl_env_flag(args)
    if env is not None:
        from perfmodel.comm.nccl_env import with_nccl_env

        topo = with_nccl_env(topo, env)
    return topo


#: ``--interval``'s default level: :data:`perfmodel.intervals.DEFAULT_LEVEL` (the package's
#: ``__init__`` alone: building the parser loads no interval machinery).
INTERVAL_LEVEL = DEFAULT_LEVEL


def add_interval_arg(parser: argparse.ArgumentParser, help: str) -> None:
    """``--interval LEVEL|off``: the prediction-interval level (:func:`ty.interval_level`;
    default :data:`INTERVAL_LEVEL`, issue 26); ``help`` says what the command does with it."""
    add_typed_arg(
        parser,
        "--interval",
        ty.interval_level,
        default=INTERVAL_LEVEL,
        metavar="LEVEL|off",
        help=f"{help}. LEVEL: {ty.INTERVAL_RULE}",
    )


#: The ``--precision`` values, :class:`perfmodel.dtypes.Precision`'s in its order (``fp32`` ...
#: ``fp8``): the choices and help texts of every command that takes the flag.
PRECISIONS = tuple(p.value for p in Precision)

# The values of the other choice flags that several commands take, one list each: their enums
# live below the CLI, in modules that building a parser does not load (issue 14, cold start);
# tests/cli/test_choice_lists.py checks each list against its enum.
#: ``--fp8-recipe``: :class:`perfmodel.workload.kernels.Fp8Recipe`.
FP8_RECIPES = ("te-delayed", "te-current", "torchao-tensorwise", "torchao-rowwise", "mxfp8")
#: ``--optimizer``: :class:`perfmodel.workload.memory.Optimizer`.
OPTIMIZERS = ("sgd", "momentum", "adam", "adamw", "lamb")


def nccl_default_releases() -> tuple[str, str]:
    """Which NCCL release each part of the model follows where ``--nccl`` states none, formatted
    from the constants the code uses (rev15b item 12; audit15 item 6): the P2P rule's default
    release (:data:`perfmodel.topology.nccl_p2p.DEFAULT_NCCL_RELEASE`), and the collective
    tuner's table per GPU generation (:data:`perfmodel.comm.tuner.DEFAULT_TUNER_EARLIER` before
    the first of :data:`~perfmodel.comm.tuner.MODERN_ARCHITECTURES`,
    :data:`~perfmodel.comm.tuner.DEFAULT_TUNER_MODERN` on them): ``("2.27", "2.8 before Hopper,
    2.29 on Hopper and Blackwell")``. Imported when asked (help printed, ``--explain``), not
    when the parser is built (cold start, issue 14)."""
    from perfmodel.comm.tuner import (
        COMPUTE_CAPABILITY,
        DEFAULT_TUNER_EARLIER,
        DEFAULT_TUNER_MODERN,
        MODERN_ARCHITECTURES,
    )
    from perfmodel.topology.nccl_p2p import DEFAULT_NCCL_RELEASE

    modern = [a.capitalize() for a in sorted(MODERN_ARCHITECTURES, key=COMPUTE_CAPABILITY.get)]
    tuner = (
        f"{DEFAULT_TUNER_EARLIER.release} before {modern[0]}, "
        f"{DEFAULT_TUNER_MODERN.release} on {' and '.join(modern)}"
    )
    return str(DEFAULT_NCCL_RELEASE), tuner


def nccl_explain_line(stated: str | None) -> str:
    """``--explain``'s NCCL line: which release the P2P level and the collective tuner follow
    (the statement of :func:`nccl_releases`, for this run)."""
    if stated:
        return f"NCCL {stated} (--nccl): its P2P level and its collective tuner's tables"
    p2p, tuner = nccl_default_releases()
    return (
        f"NCCL: no --nccl given: the P2P level is {p2p}'s (the P2P rule's default release), the "
        f"collective tuner the GPU generation's ({tuner}; the comm rows below name it)"
    )


def nccl_releases() -> str:
    """``--nccl``'s help: which release each part of the model follows, stated or not
    (:func:`nccl_default_releases`; the P2P note, :mod:`perfmodel.topology.nccl_p2p`, and
    ``predict --explain`` say the same)."""
    p2p, tuner = nccl_default_releases()
    return (
        "a stated release sets both the P2P level and the collective tuner's tables; without "
        f"--nccl the P2P level is {p2p}'s (P2P only through PCIe switches, except AMD hosts with "
        f"<= 2 GPUs) and the tuner is the GPU generation's ({tuner}; --explain names it)"
    )


class _HelpWhenShown:
    """A help parameter formatted when argparse prints the help (its ``%(name)s`` expansion
    calls ``str``), so building the parser imports nothing for it."""

    def __init__(self, text: Callable[[], str]) -> None:
        self._text = text

    def __str__(self) -> str:
        return self._text()


#: ``--recompute``: :class:`perfmodel.workload.memory.Recompute`.
RECOMPUTE = ("none", "selective", "full")
#: ``--fidelity``: :class:`perfmodel.scenario_parse.Fidelity`.
FIDELITIES = ("simulated", "analytic")


def add_format_args(parser: argparse.ArgumentParser) -> None:
    g = parser.add_mutually_exclusive_group()
    g.add_argument("--json", action="store_true", help="print JSON")
    g.add_argument("--csv", action="store_true", help="print CSV")


# ------------------------------------------------------------------------------- --model-arg

MODEL_ARG_HELP = (
    "model argument KEY=VALUE (image_size, num_classes, hidden, layers, heads, kv_heads, "
    "ffn_hidden, seq_len, vocab, widths=784,100,10, flash_attention=true ...; perfmodel model "
    "list --json); several after one flag and the flag repeatable. VALUE becomes an integer, "
    "else a boolean (true/false/yes/no/on/off), else a list if it is a comma list of integers, "
    "else stays text for the model to read"
)

_INT = re.compile(r"[+-]?[0-9]+")


PLAN_HELP = (
    "dp=D,tp=T,pp=P,microbatch=M,schedule=gpipe|1f1b|interleaved,interleave=V"
    "[,zero=Z,recompute=..,sp,mode=..,hybrid=owt], or a compare row's label as printed "
    "('dp2 tp4 pp2 mb1 interleaved(v=2) zero1 rc=full sp')"
)

#: ``--pipeline-layout``'s help (``predict`` and ``model maxbatch``: the scenario key
#: ``pipeline_layout``, parsed by :func:`perfmodel.parallel.pp_layout.parse_pipeline_layout`).
PIPELINE_LAYOUT_HELP = (
    "layers of each pipeline chunk, as Megatron-Core's --pipeline-model-parallel-layout "
    "string ('Et*4|(t*4|)*14tmL': E embedding, t decoder layer, m MTP depth, L loss, "
    "'|' between the pp x interleave chunks; default: chunks balanced on the layers' times; "
    "docs/predict.md)"
)


def plan_flag_items(text: str) -> dict[str, Any]:
    """``--plan``'s items (:func:`perfmodel.parallel.plan.parse_plan_string`) under their
    scenario keys (``microbatch_size`` is the scenario's ``microbatch``): what the flag sets,
    read by :func:`merge_plan_flag` and by the scenario-file error's "which keys came from a
    flag" (:func:`perfmodel.cli.predict_checks.name_the_file`).

    >>> plan_flag_items("tp2 mb4")
    {'tp': 2, 'microbatch': 4}
    """
    from perfmodel.parallel.plan import parse_plan_string

    return {
        "microbatch" if k == "microbatch_size" else k: v for k, v in parse_plan_string(text).items()
    }


def merge_plan_flag(fields: dict[str, Any], args: argparse.Namespace) -> None:
    """Put ``--plan``'s items (:func:`perfmodel.parallel.plan.parse_plan_string`) into the
    scenario keys ``fields``, replacing a ``plan`` key there; an item that contradicts a flag
    the command also has (``--recompute full --plan "... rc=selective"``, ``--tp 2 --plan tp4``)
    is refused. ``predict`` and ``model maxbatch`` read ``--plan`` through this one function.

    Raises
    ------
    ConfigError
        A bad plan item, or one a flag contradicts (``where="--plan"``).
    """
    if not args.plan:
        return
    fields.pop("plan", None)
    for key, v in plan_flag_items(args.plan).items():
        flag = getattr(args, key, None)
        if flag is not None and flag != v:  # --recompute full --plan "... rc=selective"
            raise ConfigError(
                f"--plan sets {key}={v!r} but --{key.replace('_', '-')} says {flag!r}",
                value=args.plan,
                where="--plan",
            )
        fields[key] = v


def add_model_arg(parser: argparse.ArgumentParser | Any) -> None:
    """``--model-arg KEY=VALUE ...`` (raw strings; convert with :func:`parse_model_args`)."""
    parser.add_argument(
        "--model-arg",
        nargs="+",
        action="extend",
        default=[],
        metavar="KEY=VALUE",
        help=MODEL_ARG_HELP,
    )


@functools.lru_cache(maxsize=1)
def list_valued_model_args() -> frozenset[str]:
    """Zoo builder arguments that take a list of integers (``widths``, ``cutoffs``): read from
    the builders' annotations, so a new list argument needs no change here."""
    from perfmodel.workload import list_models

    out: set[str] = set()
    for info in list_models():
        b = info.builder
        if inspect.isfunction(b) and not hasattr(b, "__wrapped__"):  # its own annotations
            # (a tenth of inspect.signature's cost, 62 builders per fresh process)
            anns = {k: v for k, v in b.__annotations__.items() if k != "return"}
        else:
            anns = {n: p.annotation for n, p in inspect.signature(b).parameters.items()}
        for name, ann in anns.items():
            if any(t in str(ann) for t in ("list[", "List[", "Sequence[", "tuple[")):
                out.add(name)
    return frozenset(out)


def model_arg_value(text: str, key: str = "") -> Any:
    """Convert one ``--model-arg`` VALUE (the rule is the same for every subcommand).

    In order: an integer (``128``, ``-1``); a boolean (``true``, ``false``, ``yes``, ``no``,
    ``on``, ``off``, any case); a comma list whose items are all integers (``784,100,10`` ->
    ``[784, 100, 10]``); anything else stays text (``gelu``, ``none``, ``0.5``). For the zoo's
    list arguments (``widths``, ``cutoffs``) one integer is a one-item list and ``x`` separates
    items too (``784x100x10``). The result equals a scenario file's typed values (TOML ``128``,
    ``true``, ``[784, 100, 10]``). No zoo argument takes a fraction, so ``0.5`` or ``1e3`` stay
    text and ``build_model`` rejects them for an integer argument ("is not an integer") instead
    of building a model with 10.5 classes; text is also how the zoo reads its string arguments.

    >>> [model_arg_value(v) for v in ("128", "Yes", "784,100,10", "gelu", "0.5", "1,a")]
    [128, True, [784, 100, 10], 'gelu', '0.5', '1,a']
    >>> model_arg_value("20000", key="cutoffs"), model_arg_value("784x10", key="widths")
    ([20000], [784, 10])
    """
    v = text.strip()
    if key in list_valued_model_args():
        items = [t.strip() for t in re.split(r"[,xX]", v) if t.strip()]
        if items and all(_INT.fullmatch(t) for t in items):
            return [int(t) for t in items]
        return v
    if _INT.fullmatch(v):
        return int(v)
    if v.lower() in FLAG_WORDS:  # after the integers: "1" and "0" stay integers
        return FLAG_WORDS[v.lower()]
    if "," in v:
        items = [t.strip() for t in v.split(",") if t.strip()]
        if items and all(_INT.fullmatch(t) for t in items):
            return [int(t) for t in items]
    return v


def parse_model_args(items: list[str] | tuple[str, ...]) -> dict[str, Any]:
    """``--model-arg`` items -> typed dict (later items win), the one parser of ``predict``,
    ``model show``/``maxbatch`` and ``compare``: each item splits as
    :func:`perfmodel._schema.split_assignments` splits ``--software-option``; its own rule on
    top is that the value may not be blank (a model argument has no empty setting). See
    :func:`model_arg_value` for how the value is typed.

    >>> parse_model_args(["seq_len=512", "flash_attention=true", "widths=784,100,10"])
    {'seq_len': 512, 'flash_attention': True, 'widths': [784, 100, 10]}
    >>> parse_model_args(["layers="])
    Traceback (most recent call last):
    ...
    perfmodel.errors.ConfigError: --model-arg 'layers=': expected KEY=VALUE with a non-empty value (e.g. seq_len=512)

    Raises
    ------
    ConfigError
        An item without ``=``, with an empty key or an empty value (``where="--model-arg"``,
        ``value`` the item).
    """
    where, example = "--model-arg", "seq_len=512"
    out: dict[str, Any] = {}
    for item in items:  # one at a time: the first malformed item is the one named
        ((key, value),) = split_assignments([item], where=where, example=example, form="KEY=VALUE")
        if not value.strip():
            raise ConfigError(
                f"{where} {item!r}: expected KEY=VALUE with a non-empty value (e.g. {example})",
                value=item,
                where=where,
            )
        out[key] = model_arg_value(value, key)
    return out


def attention_kind(name: str, model_args: dict[str, object]) -> str:
    """``"flash attention (the zoo entry's default; --model-arg flash_attention=false)"`` or
    the unfused kind, for a zoo model with a ``flash_attention`` argument; ``""`` otherwise.
    The kind sets the attention's memory (no s x s score matrix kept with fused kernels) and
    the zoo's GPT entries differ (``gpt`` on, ``gpt2`` off): issue 28, item 6."""
    import inspect

    from perfmodel.errors import PerfModelError
    from perfmodel.workload.zoo import get_model_info

    try:
        info = get_model_info(name)
    except PerfModelError:
        return ""
    if "flash_attention" in model_args:
        on, why = bool(model_args["flash_attention"]), "as asked"
    elif "flash_attention" in info.fixed:
        on, why = bool(info.fixed["flash_attention"]), "fixed by the zoo entry"
    elif "flash_attention" in info.defaults:
        on, why = bool(info.defaults["flash_attention"]), "the zoo entry's default"
    else:
        param = inspect.signature(info.builder).parameters.get("flash_attention")
        if param is None or param.default is inspect.Parameter.empty:
            return ""
        on, why = bool(param.default), "the builder's default"
    other = "false" if on else "true"
    kind = "flash attention" if on else "unfused attention (s x s scores kept)"
    return f"{kind} ({why}; --model-arg flash_attention={other} for the other)"


# ----------------------------------------------------------------------------------- --budget

#: How every ``--budget`` flag reads its value (``calibrate``, ``compare``).
DURATION_HELP = "a duration such as 90s, 5m or 1.5h; a bare number is seconds"

_ZERO = re.compile(r"^\s*0*\.?0+\s*(ms|s|sec|m|min|h)?\s*$", re.IGNORECASE)


def parse_budget(text: str | float, *, where: str = "--budget", allow_zero: bool = False) -> float:
    """``--budget`` text -> seconds, through ``perfmodel.calibration.runner.parse_duration``
    (``60s``, ``5m``, ``1.5h``, ``300``). ``allow_zero``: ``0`` is a valid budget (compare: the
    later search stages start no plan).

    >>> parse_budget("2m"), parse_budget("45"), parse_budget("0s", allow_zero=True)
    (120.0, 45.0, 0.0)
    """
    from perfmodel.calibration.runner import parse_duration

    try:
        return parse_duration(str(text), where=where)
    except ConfigError:
        if allow_zero and _ZERO.match(str(text)):
            return 0.0
        raise
