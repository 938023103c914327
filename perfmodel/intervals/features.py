"""What a prediction is like: the features that decide which validation rows resemble it.

A validation row and a user's scenario go through the same functions here, so "rows like this
one" means the same thing when the residual record is written (:mod:`perfmodel.intervals.record`)
and when an interval is asked for (:mod:`perfmodel.intervals.conformal`).

Three kinds of answer have their own features (:class:`Quantity`):

``step``
    one training step (iteration time, throughput, tokens/s, MFU: all one number, the step
    time, seen through the batch and the FLOP count): GPU and its architecture, the
    interconnect the step's GPUs talk over, the software preset and its family, precision,
    model kind and size, the parallelism kinds in use, and the GPU count;
``speedup``
    the ratio of two steps' throughputs at two GPU counts (a speedup curve's point): the
    features of the larger run;
``collective``
    one collective (``perfmodel comm``): GPU architecture, interconnect, operation, GPU count
    and message size;
``kernel``
    one kernel on one GPU (DeepBench GEMM / convolution, matmul ceilings): GPU architecture,
    kind of kernel and precision.

Every feature is a plain string or number (the record is JSON); bands are documented with the
function that makes them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any, Self

from perfmodel._enum import ParsedEnum
from perfmodel._record import FlatRecord
from perfmodel.units import MiB


class Quantity(str, ParsedEnum, where="quantity"):
    """Which kind of answer a residual (or an interval) is about."""

    STEP = "step"
    SPEEDUP = "speedup"
    COLLECTIVE = "collective"
    KERNEL = "kernel"


class Interconnect(str, ParsedEnum, where="interconnect", normalize=str):
    """What the GPUs of a step or collective talk over (the slowest tier they use)."""

    SINGLE = "single GPU"
    NVLINK = "NVLink"
    NVSWITCH = "NVSwitch"
    PCIE = "PCIe"
    INFINIBAND = "InfiniBand"
    ETHERNET = "Ethernet"


#: Software presets grouped by the framework whose kernels and host loop they run (the
#: presets of :mod:`perfmodel.parallel.software`; a preset not listed is its own family).
STACK_FAMILY: Mapping[str, str] = {
    "megatron": "megatron",
    "megatron-core": "megatron",
    "nemo": "megatron",
    "pytorch-ddp": "pytorch",
    "pytorch-dataparallel": "pytorch",
    "fsdp": "pytorch",
    "torchtitan": "pytorch",
    "deepspeed-zero1": "pytorch",
    "deepspeed-zero2": "pytorch",
    "deepspeed-zero3": "pytorch",
    "internevo": "pytorch",
    "tf-mirrored": "tensorflow",
    "tf-replicated": "tensorflow",
    "keras-multi-gpu": "tensorflow",
    "horovod": "horovod",
    "cuda-convnet2": "cuda-convnet2",
    "crossbow": "crossbow",
}


def stack_family(software: str) -> str:
    """The framework family of a software preset (:data:`STACK_FAMILY`; else the name)."""
    return STACK_FAMILY.get(software, software)


def gpu_band(gpus: int) -> str:
    """GPU-count band: ``"1"``, ``"2-8"`` (one server), ``"9-64"``, ``"65-512"``, ``"513+"``
    (powers of 8: one server, a few racks, a pod, beyond).

    >>> [gpu_band(n) for n in (1, 8, 16, 512, 1024)]
    ['1', '2-8', '9-64', '65-512', '513+']
    """
    if gpus <= 1:
        return "1"
    for hi, name in ((8, "2-8"), (64, "9-64"), (512, "65-512")):
        if gpus <= hi:
            return name
    return "513+"


def size_band(params: float) -> str:
    """Model-size band by parameters: ``"<1B"``, ``"1-10B"``, ``"10-100B"``, ``">100B"``.

    >>> [size_band(p) for p in (25e6, 8e9, 70e9, 405e9)]
    ['<1B', '1-10B', '10-100B', '>100B']
    """
    for hi, name in ((1e9, "<1B"), (1e10, "1-10B"), (1e11, "10-100B")):
        if params < hi:
            return name
    return ">100B"


def size_class(params: float) -> str:
    """The two model-size classes the intervals' pools tell apart: ``"<1B"`` and ``"1B+"``
    (the first boundary of :func:`size_band`).

    Under a billion parameters (BERT-base/large, ResNets, GPT-2 small) a layer's GEMMs have a
    hidden size of at most ~1,024-1,600, far from the sizes where a GPU sustains its matmul
    ceiling, so the step is shaped by small kernels, launches and the host loop, whose
    prediction errs differently per framework and release; from a billion parameters on
    (hidden 2,048 and more) the step is dominated by large GEMMs and the collectives of the
    parallel plan, which the model times from calibrated ceilings on every GPU alike (NVIDIA
    "Matrix Multiplication Background User's Guide", sections "Tile quantization" and "Wave
    quantization": a GEMM reaches the large-tile rate once its tiles fill every SM, as
    :mod:`perfmodel.compute.model` models it). A transformer of 7B parameters on A100 is
    therefore more like one of 8B on H100 than like BERT-base on A100, and pools keep the class
    before the architecture (:data:`perfmodel.intervals.conformal.LEVELS`). The boundary is
    :func:`size_band`'s first decade, not fitted to any row.

    >>> [size_class(p) for p in (0, 110e6, 1e9, 7e9)]
    ['<1B', '<1B', '1B+', '1B+']
    """
    return "<1B" if size_band(params) == "<1B" else "1B+"


def message_band(message_bytes: float) -> str:
    """Collective message-size band: ``"<1MiB"``, ``"1-64MiB"``, ``">=64MiB"`` (latency-bound,
    mixed, bandwidth-bound: :data:`perfmodel.comm.validation.LARGE_BYTES`'s side).

    >>> [message_band(b) for b in (4096, 2**24, 2**33)]
    ['<1MiB', '1-64MiB', '>=64MiB']
    """
    if message_bytes < MiB:
        return "<1MiB"
    if message_bytes < 64 * MiB:  # comm.validation.LARGE_BYTES (not imported: it loads topologies)
        return "1-64MiB"
    return ">=64MiB"


#: How :meth:`_FlatFeatures.from_dict` reads a field back, by its annotation (this module's
#: annotations are strings: ``from __future__ import annotations``).
_READ_FIELD: Mapping[str, Callable[[Any], Any]] = {
    "str": str,
    "int": int,
    "float": float,
    "Interconnect": lambda v: Interconnect.parse(str(v)),
    "tuple[str, ...]": lambda v: tuple(str(p) for p in v),
}


class _FlatFeatures(FlatRecord):
    """Features as one flat JSON record (:class:`~perfmodel._record.FlatRecord`: every field
    under its own name, an enum as its value, a tuple as a list), read back by each field's type
    (:meth:`from_dict`)."""

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Self:
        read = {f.name: _READ_FIELD[str(f.type)](d[f.name]) for f in fields(cls)}  # type: ignore[arg-type]
        return cls(**read)


class _OnGpus:
    """A record of work over ``gpus`` GPUs: its :func:`gpu_band`."""

    gpus: int

    @property
    def gpu_band(self) -> str:
        return gpu_band(self.gpus)


@dataclass(frozen=True)
class StepFeatures(_OnGpus, _FlatFeatures):
    """What a training step is like.

    Attributes
    ----------
    gpu, architecture
        Catalogue GPU name (``H100-SXM5-80GB``) and its architecture (``Hopper``).
    interconnect
        :class:`Interconnect` of the GPUs the step uses.
    software, family
        Software preset (``torchtitan``) and its :func:`stack_family` (``pytorch``).
    precision
        ``fp32``, ``tf32``, ``fp16``, ``bf16`` or ``fp8``.
    model_kind
        ``cnn``, ``transformer``, ``moe`` (a transformer with experts) or ``mlp``.
    params
        Whole-model parameters.
    parallelism
        The parallel dimensions in use, sorted: ``dp``, ``tp``, ``pp``, ``cp``, ``ep``,
        ``zero`` (ZeRO-1/2 or a distributed optimizer), ``fsdp`` (ZeRO-3 / FSDP).
    gpus
        GPUs of the step.
    """

    gpu: str
    architecture: str
    interconnect: Interconnect
    software: str
    family: str
    precision: str
    model_kind: str
    params: float
    parallelism: tuple[str, ...]
    gpus: int

    @property
    def size_band(self) -> str:
        return size_band(self.params)

    @property
    def size_class(self) -> str:
        """:func:`size_class` of the parameter count (``"<1B"`` or ``"1B+"``)."""
        return size_class(self.params)


@dataclass(frozen=True)
class CollectiveFeatures(_OnGpus, _FlatFeatures):
    """What a collective is like: GPU, architecture, interconnect, operation, GPU count and
    message size in bytes."""

    gpu: str
    architecture: str
    interconnect: Interconnect
    op: str
    gpus: int
    message_bytes: float

    @property
    def message_band(self) -> str:
        return message_band(self.message_bytes)


@dataclass(frozen=True)
class KernelFeatures(_FlatFeatures):
    """What a single-GPU kernel measurement is like: GPU, architecture, kernel kind (the
    compute tier's group, e.g. ``deepbench-gemm``) and precision."""

    gpu: str
    architecture: str
    kernel: str
    precision: str


Features = StepFeatures | CollectiveFeatures | KernelFeatures

_FEATURE_TYPES: Mapping[Quantity, type] = {
    Quantity.STEP: StepFeatures,
    Quantity.SPEEDUP: StepFeatures,
    Quantity.COLLECTIVE: CollectiveFeatures,
    Quantity.KERNEL: KernelFeatures,
}


def features_from_dict(quantity: Quantity, d: Mapping[str, Any]) -> Features:
    """The features of ``quantity`` read back from their :meth:`to_dict` form."""
    return _FEATURE_TYPES[quantity].from_dict(d)  # type: ignore[no-any-return]


# --------------------------------------------------------------------------- from a topology


def interconnect_of(
    topology: Any, gpus: int, *, group: Sequence[str] | None = None
) -> Interconnect:
    """The tier ``gpus`` GPUs of ``topology`` (the first ones in rank order, or ``group``) talk
    over.

    One GPU: :attr:`Interconnect.SINGLE`. GPUs on more than one server: the network of the
    first server's NICs (InfiniBand if any NIC link is InfiniBand, else Ethernet; RoCE is
    Ethernet). Within one server: NVSwitch if the server has an NVSwitch, NVLink if two of its
    GPUs share an NVLink (or AMD xGMI) link, else PCIe. Only one server's nodes and links are
    read (every server of a catalogue cluster is a copy of it); without ``group``, of the first
    ``gpus`` GPUs only the first and the last (a lazily built cluster's other servers stay
    unmade: reading every GPU's node made all 2,048 servers of a 16,384-GPU cluster, ~0.1 s of
    a fresh ``predict``).
    """
    from perfmodel.hardware.links import LinkFamily
    from perfmodel.topology.schema import NodeKind

    if gpus <= 1:
        return Interconnect.SINGLE
    g = topology.graph
    if group is None:  # rank order is server-major: the first and last GPU span the servers
        first = topology.gpus[:gpus]
        servers = {topology.server_of(first[0]), topology.server_of(first[-1])}
    else:
        servers = {topology.server_of(n) for n in group if g.nodes[n]["kind"] is NodeKind.GPU}
    if not servers:  # a group of hosts (CPUs): the first GPU's server
        servers = {topology.server_of(topology.gpus[0])}
    nodes = topology.server_nodes(min(servers))
    kinds = {n: g.nodes[n]["kind"] for n in nodes}
    if len(servers) > 1:
        fams = {
            d.get("family")
            for n, k in kinds.items()
            if k is NodeKind.NIC
            for _, _, d in g.edges(n, data=True)
        }
        if LinkFamily.INFINIBAND in fams:
            return Interconnect.INFINIBAND
        return Interconnect.ETHERNET
    if NodeKind.NVSWITCH in kinds.values():
        return Interconnect.NVSWITCH
    for n, k in kinds.items():
        if k is not NodeKind.GPU:
            continue
        for _, v, d in g.edges(n, data=True):
            if g.nodes[v]["kind"] is NodeKind.GPU and d.get("family") in (
                LinkFamily.NVLINK,
                LinkFamily.XGMI,
            ):
                return Interconnect.NVLINK
    return Interconnect.PCIE


def step_features(sc: Any, resolved: Any | None = None) -> StepFeatures:
    """The :class:`StepFeatures` of a :class:`perfmodel.api.Scenario` (resolved with
    :func:`perfmodel.pipeline.resolve.resolve` unless ``resolved`` is given).

    The parameter count is the zoo workload's (``total_params``); a scenario whose model the
    zoo cannot build counts 0 parameters.
    """
    from perfmodel.errors import PerfModelError
    from perfmodel.pipeline.lower import step_workload
    from perfmodel.pipeline.resolve import resolve
    from perfmodel.workload.zoo import get_model_info

    r = resolved if resolved is not None else resolve(sc)
    spec = r.topology.gpu_spec()
    plan = r.plan
    params = 0.0
    moe = False
    try:
        wl, _ = step_workload(sc, r, None)
        params = float(wl.total_params or wl.params * plan.tp)
        moe = wl.total_active_params is not None
    except PerfModelError:
        pass
    try:
        family = get_model_info(sc.model).family
    except PerfModelError:
        family = "other"
    kind = "moe" if moe or plan.ep > 1 else family
    used = []
    if plan.dp > 1:
        used.append("dp")
    for name in ("tp", "pp", "cp", "ep"):
        if getattr(plan, name) > 1:
            used.append(name)
    if plan.fsdp_shards or (plan.zero == 3 and not plan.fsdp):
        used.append("fsdp")  # an FSDP plan of shard degree 1 runs unsharded: not counted
    elif plan.zero in (1, 2):
        used.append("zero")
    return StepFeatures(
        gpu=spec.name,
        architecture=spec.architecture,
        interconnect=interconnect_of(r.topology, r.num_gpus),
        software=r.preset.name,
        family=stack_family(r.preset.name),
        precision=r.precision.value,
        model_kind=kind,
        params=params,
        parallelism=tuple(sorted(used)),
        gpus=r.num_gpus,
    )
