"""What a scenario's names load, each behind a cache: its topology, its calibration profile, its
zoo workload and the cost models of a topology (:class:`~perfmodel.parallel.costs.SystemCosts`).

Every cache that a calibration profile feeds keys on the profile's :func:`file_stamp` (its real
path, modification time and size), so a profile rewritten on disk, or the same name in another
folder, is read again; every cache a system file feeds keys on
:func:`~perfmodel._io.system_file_stamp` (the same stamp). Strings reaching this module are
names of files and catalogue entries only; what they mean was parsed at the edge
(:mod:`perfmodel.scenario_parse`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from functools import lru_cache
from typing import Any

from perfmodel._io import file_stamp, system_file_stamp
from perfmodel.comm.p2p_read import ProcessLayout, process_layout, with_process_layout
from perfmodel.dtypes import Precision
from perfmodel.errors import ConfigError
from perfmodel.parallel.costs import SystemCosts
from perfmodel.parallel.recipe import ComputeRecipe, Recipe
from perfmodel.scenario import HARDWARE_FIELDS, Scenario
from perfmodel.scenario_parse import pos_int
from perfmodel.topology import Topology
from perfmodel.workload.kernels import DEFAULT_KERNELS, KernelRecipe

#: ``workload_fn(batch_size=, precision=, tp=, sequence_parallel=) -> Workload``
WorkloadFn = Callable[..., Any]


@lru_cache(maxsize=64)
def _topology(key: tuple[Any, ...], system_file: tuple[str, int, int] | None) -> Topology:
    """The topology of the hardware fields ``key`` (values of :data:`HARDWARE_FIELDS`, in order;
    ``nccl_env`` as ``(NcclEnv, where it was stated)``, or ``()`` for none: the parsed value,
    its origin in the key so that an error names what the user typed); ``system_file`` is the
    system file's :func:`~perfmodel._io.system_file_stamp` (``None`` for a catalogue name), in
    the key only."""
    hw = dict(zip(HARDWARE_FIELDS, key, strict=True))
    env = hw.pop("nccl_env")
    if env:  # the job's NCCL variables: what NCCL's choice weighs (comm/nccl_env.py)
        from perfmodel.comm.nccl_env import with_nccl_env

        base = _topology((*key[:-1], ()), system_file)
        return with_nccl_env(base, env[0])
    nccl = hw.pop("nccl")
    if nccl is not None:  # the stated NCCL release's P2P level (issue 12)
        from perfmodel.topology.nccl_p2p import NcclRelease, with_nccl_p2p_rule

        base = _topology((*key[:-2], None, ()), system_file)
        return with_nccl_p2p_rule(base, NcclRelease.parse(nccl, where="scenario.nccl"))
    from perfmodel.topology.builders import build_system

    return build_system(hw.pop("system"), **hw)


def _calibrated_device(path: str) -> Topology:
    return _calibrated_device_cached(path, file_stamp(path))


@lru_cache(maxsize=16)
def _calibrated_device_cached(path: str, _stamp: tuple[str, int, int] | None) -> Topology:
    from perfmodel.calibration import load_profile
    from perfmodel.topology.custom import device_system

    prof = load_profile(path)
    return device_system(prof.device_spec(), source=path)


def topology_of(sc: Scenario) -> Topology:
    """The :class:`Topology` a scenario names (cached per hardware key).

    ``system="calibrated"`` is the single device a calibration profile measured (e.g. the CPU
    of ``perfmodel calibrate --device cpu``), with the spec the profile derives from its fits.
    """
    if sc.system == "calibrated":
        if not sc.calibration:
            raise ConfigError(
                "system 'calibrated' is the device of a calibration profile: give --calibration FILE",
                value=sc.system,
                where="--system",
            )
        return _calibrated_device(str(sc.calibration))
    nodes = pos_int(sc.nodes, "nodes")
    key = tuple(nodes if f == "nodes" else getattr(sc, f) for f in HARDWARE_FIELDS)
    env = sc.nccl_env  # parsed when the scenario was built (Scenario.__post_init__)
    return _topology((*key[:-1], (env, env.where) if env else ()), system_file_stamp(sc.system))


def freeze(v: Any) -> Any:
    """Hashable form of a model argument (lists become tuples, thawed again in ``zoo_workload``)."""
    if isinstance(v, (list, tuple)):
        return ("__list__", tuple(freeze(x) for x in v))
    if isinstance(v, dict):
        raise ConfigError(
            f"model argument value {v!r} must be a number, string or list",
            value=v,
            where="model_args",
        )
    return v


def frozen_args(model_args: Mapping[str, Any]) -> tuple[tuple[str, Any], ...]:
    """``model_args`` as :func:`zoo_workload`'s cache key takes them: ``(name, value)`` pairs
    sorted by name, each value :func:`freeze`-d (``predict``'s lowering, its plan checks and
    the search's screen all build the key here).

    >>> frozen_args({"widths": [8, 4], "layers": 2})
    (('layers', 2), ('widths', ('__list__', (8, 4))))
    """
    return tuple(sorted((str(k), freeze(v)) for k, v in dict(model_args).items()))


def _thaw(v: Any) -> Any:
    if isinstance(v, tuple) and len(v) == 2 and v[0] == "__list__":
        return [_thaw(x) for x in v[1]]
    return v


@lru_cache(maxsize=512)
def zoo_workload(
    model: str,
    batch: int,
    precision: Precision,
    tp: int,
    sp: bool,
    args: tuple[tuple[str, Any], ...],
    parallel: tuple[int, int, int] = (1, 1, 0),
    kernels: KernelRecipe = DEFAULT_KERNELS,
) -> Any:
    """Zoo workload of one rank; ``parallel`` is ``(ep, cp, etp)`` (expert, context and expert
    tensor parallelism, :func:`perfmodel.workload.build_model`), ``kernels`` the training
    stack's (:meth:`perfmodel.parallel.recipe.Recipe.kernels`)."""
    from perfmodel.workload import build_model

    kwargs = {k: _thaw(v) for k, v in args}
    ep, cp, etp = parallel
    extra: dict[str, Any] = {"ep": ep, "cp": cp, "etp": etp} if (ep, cp, etp) != (1, 1, 0) else {}
    if kernels != DEFAULT_KERNELS:
        extra["kernels"] = kernels
    return build_model(
        model, batch_size=batch, precision=precision, tp=tp, sequence_parallel=sp, **extra, **kwargs
    )


@lru_cache(maxsize=64)
def _calibration(
    path: str, gpu: str | None, _stamp: tuple[str, int, int] | None
) -> tuple[Any, Any, float | None]:
    """``(ComputeParams, LinkParams, measured host s per kernel or None)`` of a profile.

    The host cost per kernel of a *training step* is what the model needs
    (``ComputeParams.host_dispatch_s``). A GPU profile's ``launch.eager`` fit times a bare
    1-element kernel, a lower bound (the H100's 9.68 us against 35.55 us per kernel of its
    host-bound training steps), so for torch (GPU) profiles it is not used: their own eager host
    fit over host-bound steps (``fits["host.eager_step"]``, see
    :func:`perfmodel.calibration.runner.finish_profile`) if they have one, else the software
    preset's default applies; a profile of the predicted device itself run with another backend
    (NumPy on the CPU, ``--system calibrated``) has only its own dispatch cost, which is used.
    Cached per (path, GPU, :func:`file_stamp`).
    """
    from perfmodel.calibration import load_profile

    prof = load_profile(path, gpu=gpu)
    cp = prof.training_compute_params  # burst GEMM peaks capped at sustained rates (issue 24)
    backend = str(prof.provenance.get("backend", ""))
    eager = None
    if "host.eager_step" in prof.fits:  # the profile's own host-bound training steps
        eager = float(prof.fits["host.eager_step"].values["per_kernel_s"])
    elif not backend.startswith("torch"):
        if cp is not None and cp.host_dispatch_s > 0:
            eager = float(cp.host_dispatch_s)
        elif "launch.eager" in prof.fits:
            eager = float(prof.fits["launch.eager"].values["launch_s"])
        else:
            eager = 0.0  # the device's own dispatch is its fitted launch cost (kernel_launch_s)
    return cp, prof.link_params, eager


def system_costs(
    topo: Topology,
    precision: Precision,
    calibration: str | None,
    preset: Any = None,
    memory_format: str | None = None,
    recipe: Recipe | None = None,
) -> SystemCosts:
    """Cost models of ``topo``, cached per (topology, precision, profile, host dispatch cost).

    ``ComputeParams.host_dispatch_s`` follows the software preset
    (:meth:`~perfmodel.parallel.software.SoftwarePreset.host_dispatch_s`): PyTorch eager stacks
    get ``HOST_DISPATCH_S["pytorch-eager"]``, or the profile's own dispatch cost for a profile of
    a non-torch device (see :func:`_calibration`); graph-mode stacks get 0. ``preset=None`` keeps
    the profile's (or the datasheet default's) value. ``memory_format`` (``"nchw"`` or
    ``"nhwc"``, parsed at the edge: :func:`perfmodel.compute.params.parse_memory_format`) sets
    ``ComputeParams.conv_layout``; ``None`` keeps the profile's or default's.
    ``recipe`` (the scenario's training recipe) sets ``ComputeParams.cast_weights_each_step``
    from :attr:`Recipe.autocast_casts`, ``ComputeParams.attention_backend`` from
    :attr:`Recipe.attention_backend` and the optimizer step's bytes; ``None`` keeps them.
    The preset's process layout (:attr:`~perfmodel.parallel.software.SoftwarePreset.processes`)
    is stamped on the topology the costs price collectives on (:func:`laid_out`): NCCL's direct
    pointers inside one process (:func:`perfmodel.comm.p2p_read.p2p_path`).
    """
    if preset is not None:
        topo = laid_out(topo, preset.processes)
    cp = None
    measured = None
    gpu = stamp = None
    if calibration:
        calibration = str(calibration)
        # a device outside the GPU catalogue (system "calibrated") is the profile's own device
        gpu = None if topo.device_specs else topo.gpu_spec().name
        stamp = file_stamp(calibration)
        cp, _, measured = _calibration(calibration, gpu, stamp)
    if preset is not None:
        host = preset.host_dispatch_s(measured)
    else:
        host = float(cp.host_dispatch_s) if cp is not None else 0.0
    compute = None if recipe is None else recipe.compute  # plan-independent: one cache entry
    return _system_costs(topo, precision, calibration, gpu, stamp, host, memory_format, compute)


@lru_cache(maxsize=64)
def _laid_out(topo: Topology, layout: ProcessLayout) -> Topology:
    return with_process_layout(topo, layout)


def laid_out(topo: Topology, layout: ProcessLayout) -> Topology:
    """``topo`` run by a job of process ``layout`` (a
    :class:`~perfmodel.comm.p2p_read.ProcessLayout`): ``topo`` itself where it already records
    that layout (one process per GPU on every built system), else one stamped copy per
    (topology, layout), so that :func:`_system_costs`, cached on the topology's identity, finds
    it again."""
    if process_layout(topo) is layout:
        return topo
    return _laid_out(topo, layout)


@lru_cache(maxsize=256)
def _system_costs(
    topo: Topology,
    precision: Precision,
    calibration: str | None,
    gpu: str | None,
    stamp: tuple[str, int, int] | None,
    host_dispatch_s: float,
    conv_layout: str | None = None,
    recipe: ComputeRecipe | None = None,
) -> SystemCosts:
    """:class:`SystemCosts` of :func:`system_costs` (``Topology`` hashes by identity)."""
    cp = lp = None
    if calibration:
        cp, lp, _ = _calibration(calibration, gpu, stamp)
    casts = None if recipe is None else recipe.autocast_casts
    attention = None if recipe is None else recipe.attention_backend
    tf32_conv = None if recipe is None else recipe.fp32_conv_tf32
    if (
        host_dispatch_s > 0
        or cp is not None
        or conv_layout not in (None, "nhwc")
        or casts is not None
    ):
        from perfmodel.compute import ComputeParams

        base = cp if cp is not None else ComputeParams.for_gpu(topo.gpu_spec())
        cp = replace(
            base,
            host_dispatch_s=host_dispatch_s,
            conv_layout=conv_layout or base.conv_layout,
            cast_weights_each_step=base.cast_weights_each_step if casts is None else casts,
            attention_backend=base.attention_backend if attention is None else attention,
            fp32_conv_tf32=base.fp32_conv_tf32 if tf32_conv is None else tf32_conv,
        )
    return SystemCosts(topo, precision, compute_params=cp, link_params=lp, recipe=recipe)


@lru_cache(maxsize=16)
def host_profile(
    path: str, _stamp: tuple[str, int, int] | None
) -> tuple[bool, Mapping[Any, float]]:
    """``(input only, per-sample costs)`` of a calibration profile's ``input`` measurements
    (``calibrate --only input``); cached per (path, :func:`file_stamp`)."""
    from perfmodel.calibration.profile import read_profile
    from perfmodel.host.measure import input_costs_of, input_only

    ms = read_profile(path).measurements
    return input_only(ms), input_costs_of(ms)


def host_only_profile(path: str | None) -> bool:
    """A ``calibrate --only input`` profile: the host loader's costs only, for any system."""
    return bool(path) and host_profile(str(path), file_stamp(str(path)))[0]
