"""The question a prediction answers, as the user wrote it: :class:`Scenario`.

A scenario keeps text and numbers (the ``perfmodel predict`` flags, a scenario file's keys, a
sweep axis); :func:`perfmodel.scenario_parse.parse_scenario` turns it into typed values once,
and :mod:`perfmodel.pipeline` derives everything else from those (``docs/design.md``, "The
prediction API"). This module is the bottom of the prediction pipeline: it imports no model
code, so the parser, the pipeline and the search can all import it.

>>> sc = Scenario.from_dict({"system": "dgx-a100", "plan": "tp=2", "batch_per_gpu": 8})
>>> sc.tp, sc.batch_per_gpu, len(sc.content_hash())
(2, 8, 64)
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from perfmodel._schema import as_int, as_mapping, as_number, as_str, describe, parse_flag
from perfmodel.errors import ConfigError, SchemaError, did_you_mean


class _Default(str):
    """A :class:`Scenario` field's default text, the same value as the ``str`` but marked as
    not given (``Scenario(batch_per_gpu=8)`` runs resnet50 on dgx1-v100: the report's
    ``defaults`` says so, :func:`unstated_defaults`). Equal to, hashed and serialised as the
    plain text, so a scenario that states the default value has the same content hash."""

    __slots__ = ()


@dataclass(frozen=True)
class Scenario:
    """One question: this model, this batch, this plan, this software, on this hardware.

    Keys are the ``perfmodel predict`` flags (see ``docs/predict.md``). Beyond the
    ``docs/design.md`` contract: ``dp_mode`` (data-parallel variant, default from the software
    preset), ``hybrid`` (``one-weird-trick``), ``sync_period`` (local SGD), ``ps_host`` and
    ``ps_shards`` (parameter server), ``placement`` (dimension order, fastest first),
    ``memory_format`` (``nchw``/``nhwc`` convolution layout; ``None`` takes the software preset's
    framework default, :attr:`~perfmodel.parallel.software.SoftwarePreset.memory_format`),
    ``dataset`` (``imagenet-jpeg``, ``cifar-memory``; ``None`` or ``synthetic``: no input pipeline),
    ``data_loader`` and ``data_loader_workers`` (the input pipeline's library and workers per
    pipeline; ``None``: the preset's framework loop, :mod:`perfmodel.host.input_pipeline`).

    ``batch_per_gpu`` is the batch of one data-parallel replica (for Crossbow: of one learner);
    ``global_batch`` is split over the replicas.
    """

    system: str = _Default("dgx1-v100")
    nodes: int = 1
    gpus: int | None = None
    network: str | None = None
    nics_per_node: int | None = None
    gpu: str | None = None
    gpus_per_node: int | None = None
    intra_node: str | None = None
    fabric_topology: str | None = None
    oversubscription: float | None = None
    nccl: str | None = None
    """NCCL release whose P2P level applies (``"2.7"``); ``None``: the default release
    (:func:`perfmodel.topology.importers.with_nccl_p2p_rule`)."""
    nccl_env: Any = ()
    """The job's NCCL variables (a file's table ``nccl_env = { NCCL_NVLS_ENABLE = "0" }``,
    ``--nccl-env NCCL_NVLS_ENABLE=0``), parsed once when the scenario is built into a frozen
    :class:`perfmodel.comm.nccl_env.NcclEnv` that keeps where they were stated (a value
    given in code is parsed as ``scenario.nccl_env``: :meth:`NcclEnv.of
    <perfmodel.comm.nccl_env.NcclEnv.of>`); ``()``: none stated. The algorithms and
    protocols they switch off are not in NCCL's choice. :meth:`to_dict` writes the sorted
    ``(name, value)`` pairs."""
    model: str = _Default("resnet50")
    model_args: Mapping[str, Any] = field(default_factory=dict)
    """Keyword arguments of the zoo model's builder (``hidden``, ``layers``, ``widths``...);
    copied when the scenario is built (a list or table value deeply), so a later change to
    what the caller gave does not reach it (so is :attr:`software_options`); ``None``: none."""
    batch_per_gpu: int | None = None
    global_batch: int | None = None
    precision: str = _Default("fp32")
    optimizer: str = _Default("sgd")
    dp: int | None = None
    tp: int = 1
    pp: int = 1
    microbatch: int | None = None
    schedule: str = "1f1b"
    interleave: int = 1
    recompute: str = "none"
    sequence_parallel: bool | None = None
    """Megatron sequence parallelism; ``None``: the preset's default (on with ``tp > 1`` for
    ``megatron-core`` and ``torchtitan``, off otherwise; ``SoftwarePreset.sequence_parallel_with_tp``)."""
    zero: int | None = None
    software: str = _Default("pytorch-ddp")
    learners_per_gpu: int = 1
    dataset_size: int | None = None
    calibration: str | None = None
    fidelity: str = "simulated"
    dp_mode: str | None = None
    hybrid: str | None = None
    sync_period: int = 1
    ps_host: str = "cpu"
    ps_shards: int = 1
    placement: str = "tp,dp,pp"
    memory_format: str | None = None
    hsdp: int | None = None
    ep: int = 1
    cp: int = 1
    etp: int | None = None
    cp_comm: str | None = None
    ep_overlap: bool = False
    moe_dispatcher: str | None = None
    """Token dispatcher of expert-parallel layers (``alltoall``, ``deepep``, ``hybridep``,
    ``allgather``; :class:`~perfmodel.parallel.plan.MoEDispatcher`); ``None``: ``alltoall``."""
    dataset: str | None = None
    data_loader: str | None = None
    data_loader_workers: int | None = None
    compile: bool | None = None
    """The model runs under ``torch.compile`` (inductor fuses each block's pointwise chains:
    :class:`~perfmodel.workload.kernels.Fusion`); ``None``: the software preset's kernels
    (eager for the PyTorch presets, Transformer Engine's for Megatron)."""
    fp8_recipe: str | None = None
    """FP8 recipe of ``precision="fp8"`` (``te-delayed``, ``te-current``,
    ``torchao-tensorwise``, ``torchao-rowwise``, ``mxfp8``:
    :class:`~perfmodel.workload.kernels.Fp8Recipe`); ``None``: the software preset's."""
    recompute_modules: str | None = None
    """Megatron-Core's ``recompute_modules`` of a ``recompute="selective"`` run,
    comma-separated (``core_attn``, ``mla_up_proj``, ``mlp``, ``moe_act``:
    :class:`~perfmodel.workload.memory.RecomputeModule`); ``None``: the software preset's
    selective rule."""
    pipeline_layout: str | None = None
    """Which layers each pipeline chunk holds, as Megatron-Core's
    ``pipeline_model_parallel_layout`` string (``Et*4|(t*4|)*14tmL``:
    :mod:`perfmodel.parallel.pp_layout`; ``pp x interleave`` chunks, chunk ``s`` on stage
    ``s % pp``); ``None``: chunks balanced on the layers' times."""
    software_options: Mapping[str, Any] = field(default_factory=dict)
    """Knobs of the stack set beside its preset, by name (``--software-option KEY=VALUE``;
    :data:`perfmodel.parallel.software.SOFTWARE_OPTIONS`: ``tp_comm_overlap``,
    ``overlap_grad_comm``, ``overlap_param_gather``, ``grad_reduce_fp32``, ``fp8_params``,
    ``bucket_bytes`` in MiB, or their Megatron/NeMo names); empty: the preset as it is."""

    def __post_init__(self) -> None:
        # the two mappings are copied here, whatever built the scenario, a value that is not
        # text, a number or a flag deeply (model_args' widths, cutoffs): a frozen scenario
        # does not change when its caller later changes what it gave (None: none)
        for key in _MAPPINGS:
            given = getattr(self, key)
            own = {} if given is None else _own_copy(as_mapping(given, key, where="scenario"))
            object.__setattr__(self, key, own)
        # the NCCL environment is parsed here, once, whatever built the scenario (a Scenario
        # built in code skips from_dict); none stated stays () without importing comm/
        env = self.nccl_env
        if env == ():
            return
        from perfmodel.comm.nccl_env import NcclEnv

        parsed = NcclEnv.of(env, where="scenario.nccl_env")
        object.__setattr__(self, "nccl_env", parsed if parsed else ())

    # ------------------------------------------------------------------ (de)serialisation
    @classmethod
    def from_dict(
        cls, d: Mapping[str, Any], *, where: str = "scenario", also_accepted: Iterable[str] = ()
    ) -> Scenario:
        """Build from a mapping with the same keys (``plan = "dp=..,tp=.."`` also accepted).

        Parameters
        ----------
        also_accepted
            Keys the caller took out of the mapping before (``perfmodel predict``'s file:
            ``tokens``, ``fabric``...), listed with the fields when a key is unknown.

        Raises
        ------
        ConfigError
            On an unknown key (naming it, the closest accepted key, and the accepted keys).
        """
        from perfmodel.parallel.plan import parse_plan_string

        data = {str(k).replace("-", "_"): v for k, v in dict(d).items()}
        if "plan" in data:
            plan = data.pop("plan")
            if not isinstance(plan, str | Mapping):
                raise SchemaError(
                    f"{where}: plan: expected text such as 'dp=2,tp=4' or a table, "
                    f"got {describe(plan)}",
                    value=plan,
                    where=f"{where}: plan",
                )
            parsed = (
                parse_plan_string(plan, where=f"{where}: plan")
                if isinstance(plan, str)
                else dict(plan)
            )
            for k, v in parsed.items():
                data.setdefault({"microbatch_size": "microbatch"}.get(k, k), v)
        if "microbatch_size" in data:
            data["microbatch"] = data.pop("microbatch_size")
        check_keys(data, where=where, also_accepted=also_accepted)
        for flag in ("sequence_parallel", "compile"):
            if data.get(flag) is not None:  # null: the preset's default
                data[flag] = parse_flag(data[flag], where=f"{where}: {flag}")
        for key in _MAPPINGS:  # null (JSON) is none; checked here to name the file's place
            if data.get(key) is not None:
                as_mapping(data[key], key, where=where)
        if "nccl_env" in data:
            from perfmodel.comm.nccl_env import NcclEnv

            env = NcclEnv.of(data["nccl_env"], where=f"{where}: nccl_env")
            data["nccl_env"] = env if env else ()
        for k, v in data.items():
            if k not in (*_MAPPINGS, "sequence_parallel", "compile", "nccl_env"):
                data[k] = _check_field_type(k, v, where)
        return cls(**data)

    def to_dict(self) -> dict[str, Any]:
        """Every field by name, the two mappings as new dicts sharing no list or table.

        The value ``dataclasses.asdict`` gives (a field of text, number, flag or ``None`` is
        itself; any other value a deep copy), without its generic walk: a scenario's hash and
        report read it on every prediction (issue 14). ``pipeline_layout`` is left out while
        ``None`` (a scenario without a stated layout keeps the hash it had before the key)."""
        d = {}
        for name in _FIELD_NAMES:
            v = getattr(self, name)
            if name == "pipeline_layout" and v is None:
                continue
            if name in _MAPPINGS:  # the caller's copy: its lists are not the scenario's
                d[name] = _own_copy(v)
            elif name == "nccl_env":  # the pairs: JSON, and one hash wherever they were stated
                d[name] = v.variables if v else ()
            else:
                d[name] = (
                    v
                    if v is None or type(v) in _SCALARS
                    else str(v)
                    if type(v) is _Default
                    else copy.deepcopy(v)
                )
        return d

    def content_hash(self) -> str:
        """sha256 of the canonical JSON of :meth:`to_dict` (stable across runs)."""
        blob = json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"), default=str)
        return hashlib.sha256(blob.encode()).hexdigest()


#: The job's settings a header names after the model and the system, in its order (``predict``,
#: the plan search, the what-if: :func:`perfmodel.cli.headers.job_settings`), each marked
#: where the scenario took its default (:func:`setting_words`).
JOB_SETTINGS = ("software", "precision", "optimizer")

#: The fields whose default :func:`unstated_defaults` states: those ``perfmodel predict``
#: refuses to run without (``no system: give --system``), then :data:`JOB_SETTINGS`.
_STATED_DEFAULTS = ("system", "model", *JOB_SETTINGS)


#: What chooses the software preset, in the words of each face (:func:`setting_words`): the
#: command line's flag, the Python API's :class:`Scenario` field.
SOFTWARE_CHOOSER = {"cli": "--software", "api": "Scenario(software=...)"}


def setting_words(key: str, value: str, stated: bool, *, face: str = "cli") -> str:
    """A job setting (one of :data:`JOB_SETTINGS`) as a header names it: ``value`` when
    ``stated``, else marked ``"(default)"``, the software preset (the framework whose plans
    run) also with what chooses it (issue 28, item 6) on the ``face`` that speaks
    (:data:`SOFTWARE_CHOOSER`: ``"cli"`` the flag, ``"api"`` the Scenario field; rev29 item 3:
    the API told its caller to use ``--software``). The one wording of the CLI headers and the
    API's ``defaults`` (:func:`unstated_defaults`).

    >>> setting_words("precision", "fp32", False), setting_words("software", "fsdp", True)
    ('fp32 (default)', 'fsdp')
    >>> setting_words("software", "pytorch-ddp", False)
    'pytorch-ddp (default preset; --software to choose)'
    >>> setting_words("software", "pytorch-ddp", False, face="api")
    'pytorch-ddp (default preset; Scenario(software=...) to choose)'
    """
    if stated:
        return value
    if key != "software":
        return f"{value} (default)"
    return f"{value} (default preset; {SOFTWARE_CHOOSER[face]} to choose)"


def unstated_defaults(sc: Scenario, *, face: str = "api") -> tuple[str, ...]:
    """The defaults ``sc`` took because its caller named none, in the header's words
    (:func:`setting_words`) of ``face`` (the API's report by default; ``"cli"``: ``perfmodel
    predict --json``), each after its key: the fields the CLI always asks for (``system``,
    ``model``; always given from the command line or a scenario file), then the software
    preset, precision and optimizer the CLI header marks (user23 item 2: the API named only
    the first two). ``()`` when all were given.

    >>> unstated_defaults(Scenario(model="gpt2", precision="bf16", optimizer="adam"))
    ('system dgx1-v100 (default)', 'software pytorch-ddp (default preset; Scenario(software=...) to choose)')
    """
    return tuple(
        f"{name} {setting_words(name, str(getattr(sc, name)), False, face=face)}"
        for name in _STATED_DEFAULTS
        if type(getattr(sc, name)) is _Default
    )


def job_defaults(sc: Scenario) -> frozenset[str]:
    """The entries of :func:`unstated_defaults` (the API's words, as a report's ``defaults``
    holds them) that a job header states itself (the
    :data:`JOB_SETTINGS` marked ``(default)``): ``perfmodel predict`` leaves them out of its
    ``default`` lines below the header (``--json`` keeps them: it has no header)."""
    return frozenset(d for d in unstated_defaults(sc) if d.split(" ", 1)[0] in JOB_SETTINGS)


#: The fields that name the hardware, in flag order (:func:`perfmodel.pipeline.inputs.topology_of`'s
#: cache key, ``nccl`` and ``nccl_env`` last; the other names are :func:`perfmodel.topology.build_system`'s
#: keywords; the ``perfmodel predict`` system flags set them).
HARDWARE_FIELDS = (
    "system",
    "nodes",
    "network",
    "nics_per_node",
    "gpu",
    "gpus_per_node",
    "intra_node",
    "fabric_topology",
    "oversubscription",
    "nccl",
    "nccl_env",
)

_FIELD_NAMES = tuple(f.name for f in fields(Scenario))
#: The scenario's two mapping fields: copied when a scenario is built (``__post_init__``), a
#: table or ``None`` in a file, a ``dict`` in :meth:`Scenario.to_dict`.
_MAPPINGS = ("model_args", "software_options")

_SCALARS = frozenset({str, int, float, bool})  # immutable: dataclasses.asdict keeps them as is


def _own_copy(mapping: Mapping[str, Any]) -> dict[str, Any]:
    """``mapping`` as a new ``dict`` sharing nothing mutable with it: text, numbers and flags as
    they are, any other value (a list of widths, a table) a deep copy."""
    return {k: v if type(v) in _SCALARS else copy.deepcopy(v) for k, v in mapping.items()}


#: The JSON/TOML type each scenario key must have (from the :class:`Scenario` annotations):
#: ``(kind, optional)`` with kind ``"str"``, ``"int"``, ``"float"`` or ``"any"``.
_FIELD_KINDS: dict[str, tuple[str, bool]] = {}


def check_keys(
    keys: Iterable[str],
    *,
    where: str,
    also_accepted: Iterable[str] = (),
    why: Mapping[str, str] | None = None,
    refused: Iterable[str] = (),
) -> None:
    """Refuse the first of ``keys`` (``-`` read as ``_``) that :meth:`Scenario.from_dict`
    does not take (a field, ``plan`` or ``microbatch_size``) or that is in ``refused`` (keys
    the caller sets itself: a ``compare --systems`` entry's ``system``): the error names it,
    the accepted key closest to it (:func:`difflib.get_close_matches`, as ``perfmodel``
    suggests a system or model name), ``why[key]`` where the caller knows why it is not
    taken, and every accepted key, with ``also_accepted`` (keys the caller reads itself and
    took out before: ``perfmodel predict``'s file's ``tokens``...).

    Raises
    ------
    ConfigError
        Naming ``where`` and the key.
    """
    refused = set(refused)
    taken = {*_FIELD_NAMES, "plan", "microbatch_size"} - refused
    unknown = sorted({str(k).replace("-", "_") for k in keys} - taken)
    if not unknown:
        return
    key = unknown[0]
    names = sorted({*taken, *also_accepted})
    # a refused key is a real key taken elsewhere: no look-alike to suggest
    hint = "" if key in refused else did_you_mean(key, names)
    reason = f": {why[key]}" if why and key in why else ""
    raise ConfigError(
        f"{where}: unknown key {key!r}{hint}{reason}; accepted keys: {', '.join(names)}",
        value=key,
        where=where,
    )


def _check_field_type(key: str, value: Any, where: str) -> Any:
    """A scenario value of the type its field is annotated with, or a :class:`SchemaError`
    naming the key, the value and the type (``system = ["dgx1-v100"]``: expected text). An
    integral float (``4.0`` from JSON) is taken as the integer; a boolean is not an integer;
    ``null`` only where the field may be ``None``."""
    if not _FIELD_KINDS:
        for f in fields(Scenario):
            ann = str(f.type)
            kind = (
                "str" if ann.startswith("str") else "int" if ann.startswith("int")
                else "float" if ann.startswith("float") else "any"
            )  # fmt: skip
            _FIELD_KINDS[f.name] = (kind, "None" in ann)
    kind, optional = _FIELD_KINDS.get(key, ("any", True))
    if value is None and optional:
        return value
    if kind == "str":
        return as_str(value, key, where=where)
    if kind == "int":
        if isinstance(value, float) and value.is_integer():
            return int(value)
        return as_int(value, key, where=where)
    if kind == "float":
        if key == "oversubscription":  # the topology files' rule
            from perfmodel.topology.io import MIN_OVERSUBSCRIPTION

            return as_number(value, key, where=where, minimum=MIN_OVERSUBSCRIPTION)
        return as_number(value, key, where=where)
    return value


__all__ = [
    "HARDWARE_FIELDS",
    "JOB_SETTINGS",
    "Scenario",
    "check_keys",
    "job_defaults",
    "setting_words",
    "unstated_defaults",
]
