"""Input pipelines: how fast the host reads, decodes, augments and copies the samples of a step.

A training step consumes ``B`` samples per data-parallel replica. Before the GPU can use them a
loader reads each sample, decodes it (JPEG) or slices it from memory (CIFAR arrays), augments it
(random crop, flip, normalise) and copies the batch to the GPU. Per *pipeline* (one loader and the
processes or threads it runs) and step::

    prep_s = samples_per_pipeline x cpu_s_per_sample / parallelism
    copy_s = host-to-device time of each GPU's share over its real PCIe path, all GPUs of the
             server at once (a shared switch uplink is shared: ``SystemCosts.transfers_time``)

``parallelism`` is the loader's worker processes or threads, capped by the physical cores of the
server left after one core per training process (``(cores - processes) / processes``). The step
is then (prefetching loaders: the pipeline runs ahead of the GPU by at least one batch)::

    step = max(gpu_step + copy_pageable, prep_s, copy_pinned)      prefetch (overlapped)
    step = gpu_step + prep_s + copy_s                               synchronous loading

where a pinned copy (``pin_memory=True``, ``non_blocking``) runs on a copy engine beside compute and a
pageable one is part of the step. The *GPU step* is what the rest of perfmodel predicts; this module
only bounds it from below (prefetch) or adds to it (synchronous), the way
``ComputeModel.step_time`` bounds the GPU work by the eager host's kernel issue.

Where the numbers come from
---------------------------
Per-sample CPU costs (:data:`DATASETS`) are per physical core of a 2016-2024 server CPU; cores of
other generations differ by tens of percent (clock, IPC, AVX). ``perfmodel calibrate --device cpu
--only input`` measures them on your own CPU with the installed imaging library (Pillow) and a
``--calibration`` profile that holds them replaces these defaults
(:func:`measure_input_costs`). Framework loop defaults (:data:`FRAMEWORK_LOOPS`) are keyed by the
software preset's name and cite the framework's documentation.

What is not modelled: file-system reads (the data set is assumed in the page cache or on local
NVMe: ImageNet at 2,000 images/s x 110 KB is 0.22 GB/s), hyper-threads (a sibling thread adds
little to decode throughput), DALI's own GPU time (its decode kernels run on a side stream) and the
first epoch's start-up.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from perfmodel import units
from perfmodel._enum import parse_enum
from perfmodel.errors import ConfigError, InfeasiblePlanError


class DatasetKind(str, enum.Enum):
    """What a sample is before the loader touches it (``--dataset``)."""

    IMAGENET_JPEG = "imagenet-jpeg"  # one JPEG file per sample (~110 KB), decoded every epoch
    CIFAR_MEMORY = "cifar-memory"  # 32x32x3 uint8 arrays already in host memory
    SYNTHETIC = "synthetic"  # tensors generated on (or kept on) the GPU: no host work


class LoaderKind(str, enum.Enum):
    """Which library prepares the samples (``--data-loader``); decides the per-sample cost."""

    PYTORCH = "pytorch"  # torch DataLoader + torchvision transforms (PIL), worker processes
    TF_DATA = "tf-data"  # tf.data map(num_parallel_calls) + prefetch, TensorFlow's C++ thread pool
    KERAS = "keras"  # Keras fit_generator / Sequence + ImageDataGenerator (numpy/scipy), threads
    DALI = "dali"  # NVIDIA DALI: decode and augmentation on the GPU


@dataclass(frozen=True)
class DatasetSpec:
    """Per-sample costs of one data set kind.

    Attributes
    ----------
    kind
        The data set kind.
    h2d_bytes_per_sample
        Bytes copied to the GPU per sample by a CPU loader (the augmented float32 tensor).
    dali_h2d_bytes_per_sample
        Bytes copied per sample when DALI decodes on the GPU (the encoded file).
    cpu_s_per_sample
        CPU seconds per sample on one physical core, per loader library (0 for DALI).
    sources
        Where each number comes from.
    """

    kind: DatasetKind
    h2d_bytes_per_sample: float
    dali_h2d_bytes_per_sample: float
    cpu_s_per_sample: Mapping[LoaderKind, float]
    sources: tuple[str, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "cpu_s_per_sample", MappingProxyType(dict(self.cpu_s_per_sample)))


#: ImageNet JPEG: decode + random-resized crop to 224 + flip + normalise, CPU seconds per sample on
#: one physical core. Dell EMC "Ready Solutions for AI: Deep Learning with NVIDIA" v1.0 (2018),
#: section 3.1, Figure 13 and Table 7: ResNet-50 FP16 training at 2,940 images/s on one PowerEdge
#: C4140 (4x V100-SXM2, 2x Xeon Gold 6148 = 40 cores) with CPU utilisation "around 33% out of 40
#: cores" for I/O, TFRecord parsing and JPEG decoding/augmentation: 13.2 cores / 2,940 images/s =
#: 4.49 ms per image per core (an upper bound: the utilisation includes the framework's own
#: threads). Cross-check: Iglovikov & Kosarevsky, arXiv:2605.08731 (2026), Pillow decodes ImageNet
#: validation JPEGs alone at 537-726 images/s on one thread of current server CPUs (1.4-1.9 ms);
#: the crop, resize and normalisation roughly double it.
IMAGENET_JPEG_CPU_S = 13.2 / 2940.0

#: CIFAR-10 from in-memory uint8 arrays: pad-4 random crop + horizontal flip + normalise to float32,
#: CPU seconds per sample on one core, per library. Measured with :func:`measure_input_costs`
#: (the routine of ``perfmodel calibrate --device cpu --only input``; thread CPU time, so other
#: processes on the core do not count) on the project's reference container (AMD EPYC Zen 4 at
#: 2.6 GHz, Pillow 13.0, NumPy 2.4, SciPy 1.17; 2026-11-23): median of five runs of nine
#: 512-sample batches each, rounded. torchvision's per-sample PIL path (``Image.fromarray``, pad,
#: crop, flip, ``ToTensor``, ``Normalize``) 64 us (runs: 49-90 us); Keras ``ImageDataGenerator``
#: (``width/height_shift_range=0.1``, ``horizontal_flip``: one ``scipy.ndimage.affine_transform``
#: per channel, as keras_preprocessing ``apply_affine_transform``) 116 us (115-222 us); tf.data's
#: crop/flip/normalise taken at the NumPy per-sample cost 62 us (48-79 us), an upper bound for
#: TensorFlow's C++ kernels. The same runs give 2.99 ms (2.75-3.61 ms) for the ImageNet JPEG path
#: on this 2022 core, consistent with :data:`IMAGENET_JPEG_CPU_S` on a 2017 one. Measurements on
#: one machine, not fits to any validation row.
CIFAR_CPU_S = {
    LoaderKind.PYTORCH: 64 * units.us,
    LoaderKind.TF_DATA: 62 * units.us,
    LoaderKind.KERAS: 116 * units.us,
    LoaderKind.DALI: 0.0,
}

#: Float32 bytes of one 224x224x3 ImageNet training crop (torchvision ``ToTensor`` + ``Normalize``,
#: TF's ``image_preprocessing`` output) and of one 32x32x3 CIFAR image.
_IMAGENET_TENSOR_BYTES = 224 * 224 * 3 * 4
_CIFAR_TENSOR_BYTES = 32 * 32 * 3 * 4

#: Mean ImageNet training JPEG: 1,448,283,629,516 bytes / 12,811,670 files (10x ILSVRC2012) =
#: 113 KB (Dell EMC Ready Solutions for AI v1.0, section 3.1).
IMAGENET_JPEG_BYTES = 113e3

DATASETS: Mapping[DatasetKind, DatasetSpec] = MappingProxyType(
    {
        DatasetKind.IMAGENET_JPEG: DatasetSpec(
            kind=DatasetKind.IMAGENET_JPEG,
            h2d_bytes_per_sample=_IMAGENET_TENSOR_BYTES,
            dali_h2d_bytes_per_sample=IMAGENET_JPEG_BYTES,
            cpu_s_per_sample={
                LoaderKind.PYTORCH: IMAGENET_JPEG_CPU_S,
                LoaderKind.TF_DATA: IMAGENET_JPEG_CPU_S,
                LoaderKind.KERAS: IMAGENET_JPEG_CPU_S,
                LoaderKind.DALI: 0.0,
            },
            sources=(
                "cpu: Dell EMC Ready Solutions for AI v1.0 (2018) Fig. 13 / Table 7, see "
                "IMAGENET_JPEG_CPU_S (4.49 ms per image per core)",
                "bytes: 224x224x3 float32 crop; DALI copies the 113 KB JPEG (Dell v1.0 Table 7)",
            ),
        ),
        DatasetKind.CIFAR_MEMORY: DatasetSpec(
            kind=DatasetKind.CIFAR_MEMORY,
            h2d_bytes_per_sample=_CIFAR_TENSOR_BYTES,
            dali_h2d_bytes_per_sample=32 * 32 * 3,
            cpu_s_per_sample=CIFAR_CPU_S,
            sources=(
                "cpu: measure_input_costs on the reference container (2026-11-23), see CIFAR_CPU_S",
                "bytes: 32x32x3 float32 (uint8 for DALI)",
            ),
        ),
        DatasetKind.SYNTHETIC: DatasetSpec(
            kind=DatasetKind.SYNTHETIC,
            h2d_bytes_per_sample=0.0,
            dali_h2d_bytes_per_sample=0.0,
            cpu_s_per_sample=dict.fromkeys(LoaderKind, 0.0),
            sources=("synthetic data lives on the GPU (tf_cnn_benchmarks --use_synthetic data)",),
        ),
    }
)


class PipelineScope(str, enum.Enum):
    """How many input pipelines a server runs."""

    PER_PROCESS = "per-process"  # one per training process (one process per GPU)
    PER_SERVER = "per-server"  # one process drives all GPUs of the server and loads for all of them


@dataclass(frozen=True)
class FrameworkLoop:
    """How a software stack feeds its GPUs, as its framework ships it.

    Attributes
    ----------
    loader
        The loading library (decides the per-sample cost).
    workers
        Loader processes or threads per pipeline; ``None``: as many as the cores allow
        (tf.data ``AUTOTUNE``). Keras generator workers are threads (``use_multiprocessing=False``,
        the default) whose per-sample Python holds the GIL: one core whatever their number.
    scope
        One pipeline per training process or one per server for all replicas.
    prefetch
        Whether the loader prepares the next batches while the GPU runs (a background queue).
    pinned_copy
        Whether the host-to-device copy runs asynchronously from pinned memory.
    single_node
        ``None``, or the stack to name when a scenario spans servers (the loop is single-process).
    sources
        Framework documentation and default arguments, with versions.
    """

    loader: LoaderKind
    workers: int | None
    scope: PipelineScope
    prefetch: bool = True
    pinned_copy: bool = True
    single_node: str | None = None
    sources: tuple[str, ...] = ()


_PYTORCH_WORKERS = 4
_PT_SOURCES = (
    "pytorch/examples imagenet/main.py: --workers default 4 per process, pin_memory=True; "
    "torch.utils.data.DataLoader docs: num_workers default 0 (load in the main process, no "
    "prefetch), prefetch_factor 2 batches per worker",
)
_PT_DDP = FrameworkLoop(
    loader=LoaderKind.PYTORCH,
    workers=_PYTORCH_WORKERS,
    scope=PipelineScope.PER_PROCESS,
    sources=_PT_SOURCES,
)


def _tf_data_per_server(*sources: str) -> FrameworkLoop:
    """One pipeline per server on all its cores, prefetching, priced as tf.data's."""
    return FrameworkLoop(
        loader=LoaderKind.TF_DATA, workers=None, scope=PipelineScope.PER_SERVER, sources=sources
    )


_TF_SERVER = _tf_data_per_server(
    "tf.data performance guide (TF 2.x): map(num_parallel_calls=AUTOTUNE) uses the host's "
    "cores, prefetch overlaps the next batch with the step; MirroredStrategy and "
    "tf_cnn_benchmarks run one process per server",
)

#: Framework loops by software preset name (``perfmodel.parallel.software.PRESETS``).
FRAMEWORK_LOOPS: Mapping[str, FrameworkLoop] = MappingProxyType(
    {
        "pytorch-ddp": _PT_DDP,
        "pytorch-apex": _PT_DDP,  # DeepLearningExamples: torch.distributed.launch, DataLoader
        "megatron": _PT_DDP,
        "deepspeed-zero1": _PT_DDP,
        "deepspeed-zero2": _PT_DDP,
        "deepspeed-zero3": _PT_DDP,
        "fsdp": _PT_DDP,
        "megatron-core": _PT_DDP,  # torchrun, one process per GPU, PyTorch DataLoader
        "nemo": _PT_DDP,
        "torchtitan": _PT_DDP,
        "internevo": _PT_DDP,  # torchrun / srun, one process per GPU, PyTorch DataLoader
        "pytorch-dataparallel": FrameworkLoop(
            loader=LoaderKind.PYTORCH,
            workers=_PYTORCH_WORKERS,
            scope=PipelineScope.PER_SERVER,
            pinned_copy=False,
            single_node="pytorch-ddp (DistributedDataParallel)",
            sources=(
                *_PT_SOURCES,
                "torch.nn.DataParallel docs: single-process multi-thread on one machine; "
                "scatters the CPU batch to the GPUs inside forward (a synchronous copy)",
            ),
        ),
        "horovod": FrameworkLoop(
            loader=LoaderKind.TF_DATA,
            workers=None,
            scope=PipelineScope.PER_PROCESS,
            sources=(
                "Horovod docs (running.rst, tensorflow2 examples): one process per GPU, each "
                "with its own tf.data pipeline (dataset.shard), map(AUTOTUNE) + prefetch",
            ),
        ),
        "tf-mirrored": _TF_SERVER,
        "tf-replicated": _TF_SERVER,
        "keras-multi-gpu": FrameworkLoop(
            loader=LoaderKind.KERAS,
            workers=1,
            scope=PipelineScope.PER_SERVER,
            pinned_copy=False,
            single_node="horovod (Horovod's Keras API, hvd.DistributedOptimizer)",
            sources=(
                "tf.keras.utils.multi_gpu_model docs (TF 1.15/2.1): replicates the model on the "
                "GPUs of one machine; the inputs are sliced on the CPU, one pipeline for all",
                "Keras 2.2.4 Model.fit_generator: workers=1, use_multiprocessing=False, "
                "max_queue_size=10 (one background thread fills a queue: prefetch, one core)",
            ),
        ),
        "cuda-convnet2": _tf_data_per_server(
            "cuda-convnet2 convdata.py: JPEG decoding in a C++ thread pool of all cores, a "
            "loader thread prepares the next batch (per-sample cost taken as tf.data's)",
        ),
        "crossbow": _tf_data_per_server(
            "Koliousis et al., Crossbow (VLDB 2019), section 5: a multi-threaded C++ data "
            "pre-processor on the host CPUs feeds all learners (per-sample cost taken as "
            "tf.data's)",
        ),
    }
)


def framework_loop(preset: str) -> FrameworkLoop:
    """The loop of software preset ``preset`` (every preset has one: a test checks the table
    against ``PRESETS``; an unknown name falls back to PyTorch DDP's)."""
    return FRAMEWORK_LOOPS.get(str(preset), _PT_DDP)


def check_single_node(preset: str, num_gpus: int, gpus_per_node: int) -> None:
    """Refuse a single-process stack (Keras ``multi_gpu_model``, ``nn.DataParallel``) across servers.

    Raises
    ------
    InfeasiblePlanError
        When ``num_gpus`` exceeds one server's ``gpus_per_node``; names the stack to use instead.

    >>> check_single_node("keras-multi-gpu", 4, 4)
    >>> check_single_node("keras-multi-gpu", 8, 4)
    Traceback (most recent call last):
    ...
    perfmodel.errors.InfeasiblePlanError: software keras-multi-gpu runs all replicas in one process on one server, but 8 GPUs span 2 servers of 4; train across servers with horovod (Horovod's Keras API, hvd.DistributedOptimizer), or use gpus <= 4
    """
    loop = FRAMEWORK_LOOPS.get(str(preset))
    if loop is None or loop.single_node is None or num_gpus <= gpus_per_node:
        return
    raise InfeasiblePlanError(
        f"software {preset} runs all replicas in one process on one server, but {num_gpus} GPUs "
        f"span {math.ceil(num_gpus / gpus_per_node)} servers of {gpus_per_node}; train across "
        f"servers with {loop.single_node}, or use gpus <= {gpus_per_node}",
        value=num_gpus,
        where="software",
    )


def parse_dataset(text: object, *, where: str = "dataset") -> DatasetKind:
    """``--dataset`` text to a :class:`DatasetKind`."""
    return parse_enum(DatasetKind, text, where=where)


def parse_loader(text: object, *, where: str = "data_loader") -> LoaderKind:
    """``--data-loader`` text to a :class:`LoaderKind`."""
    return parse_enum(LoaderKind, text, where=where)


@dataclass(frozen=True)
class InputPipeline:
    """The input pipeline of one scenario and its per-step cost (one value, no timing of the GPU).

    Attributes
    ----------
    dataset, loader
        What is loaded and by which library.
    scope
        One pipeline per process or per server.
    pipelines_per_server
        Pipelines sharing one server's cores.
    samples_per_pipeline
        Samples one pipeline prepares per step.
    workers
        Loader processes/threads per pipeline as configured (0: in the training process).
    parallelism
        Cores one pipeline actually gets: ``min(workers, (cores - pipelines) / pipelines)``.
    server_cores
        Physical cores of one server (the topology's CPU sockets).
    cpu_s_per_sample
        CPU seconds per sample on one core.
    prep_s
        ``samples_per_pipeline x cpu_s_per_sample / parallelism``, seconds per step.
    copy_s
        Host-to-device copy of every GPU's share of the step, all GPUs of a server at once, s.
    overlapped
        The pipeline prefetches (runs beside the GPU step).
    pinned
        The copy is asynchronous from pinned memory (beside compute).
    sources
        Where the per-sample cost and the loop defaults come from.
    """

    dataset: DatasetKind
    loader: LoaderKind
    scope: PipelineScope
    pipelines_per_server: int
    samples_per_pipeline: float
    workers: int
    parallelism: float
    server_cores: int
    cpu_s_per_sample: float
    prep_s: float
    copy_s: float
    overlapped: bool
    pinned: bool
    sources: tuple[str, ...] = field(default=(), compare=False)

    def step_time(self, gpu_step_s: float) -> float:
        """The step with this pipeline feeding a GPU step of ``gpu_step_s`` seconds.

        >>> p = InputPipeline(DatasetKind.CIFAR_MEMORY, LoaderKind.KERAS, PipelineScope.PER_SERVER,
        ...                   1, 512, 1, 1.0, 28, 2e-4, 0.1024, 0.001, True, False)
        >>> round(p.step_time(0.05), 4), round(p.step_time(0.2), 4)  # input-bound, then not
        (0.1024, 0.201)
        >>> round(InputPipeline(DatasetKind.CIFAR_MEMORY, LoaderKind.PYTORCH,
        ...     PipelineScope.PER_PROCESS, 4, 128, 0, 1.0, 28, 1e-4, 0.0128, 0.001, False, False
        ... ).step_time(0.05), 4)  # synchronous: everything adds
        0.0638
        """
        if not self.overlapped:
            return gpu_step_s + self.prep_s + self.copy_s
        if self.pinned:
            return max(gpu_step_s, self.prep_s, self.copy_s)
        return max(gpu_step_s + self.copy_s, self.prep_s)

    def summary(self, gpu_step_s: float) -> dict[str, Any]:
        """JSON-ready numbers: the pipeline, the bound and by how much it slows the step."""
        step = self.step_time(gpu_step_s)
        return {
            "dataset": self.dataset.value,
            "loader": self.loader.value,
            "scope": self.scope.value,
            "pipelines_per_server": self.pipelines_per_server,
            "samples_per_pipeline": self.samples_per_pipeline,
            "workers": self.workers,
            "parallelism": self.parallelism,
            "server_cores": self.server_cores,
            "cpu_s_per_sample": self.cpu_s_per_sample,
            "prep_s": self.prep_s,
            "copy_s": self.copy_s,
            "overlapped": self.overlapped,
            "pinned": self.pinned,
            "gpu_step_s": gpu_step_s,
            "step_s": step,
            "input_bound": step > gpu_step_s * (1 + 1e-9),
            "slowdown": step / gpu_step_s - 1 if gpu_step_s > 0 else math.inf,
            "sources": list(self.sources),
        }

    def describe(self, gpu_step_s: float) -> str:
        """One line for reports: the pipeline's rate, the GPU step and the verdict."""
        step = self.step_time(gpu_step_s)
        if self.prep_s > 0:
            workers = "in the training process" if self.workers == 0 else f"{self.workers} workers"
            cpu = (
                f"{workers} x {self.pipelines_per_server} pipeline(s) per server on "
                f"{self.server_cores} cores ({self.parallelism:.3g} cores each, "
                f"{self.cpu_s_per_sample * 1e3:.3g} ms/sample/core): prep {self.prep_s * 1e3:.2f} ms "
                f"({self.samples_per_pipeline / self.prep_s:.0f} samples/s per pipeline)"
            )
        else:
            cpu = "no CPU work per sample (decoded and augmented on the GPU)"
        head = (
            f"input pipeline: {self.dataset.value} via {self.loader.value}, {cpu}, copy "
            f"{self.copy_s * 1e3:.2f} ms {'pinned' if self.pinned else 'pageable'}, "
            f"{'prefetched' if self.overlapped else 'synchronous'}; GPU step {gpu_step_s * 1e3:.2f} ms"
        )
        if step <= gpu_step_s * (1 + 1e-9):
            return head + " -> GPU-bound (input pipeline keeps up)"
        kind = "INPUT-BOUND" if self.overlapped else "input adds to the step"
        return f"{head} -> {kind}: step {step * 1e3:.2f} ms (+{100 * (step / gpu_step_s - 1):.0f}%)"


def _server_cores(topology: Any, server: int) -> int:
    """Physical cores of ``server``: the catalogue spec of each CPU node (sockets), the generic
    ``host-cpu`` socket for a CPU node whose model the catalogue lacks."""
    from perfmodel.hardware.cpus import get_cpu
    from perfmodel.topology.schema import NodeKind

    total = 0
    for n, d in topology.graph.nodes(data=True):
        if d["kind"] is not NodeKind.CPU or int(d["server"]) != server:
            continue
        spec = topology.cpu_spec(n)
        total += (spec or get_cpu("host-cpu")).cores
    if total <= 0:
        raise ConfigError(
            f"system {topology.name} has no CPU node in server {server}: the input pipeline "
            "needs the host's cores",
            value=server,
            where=topology.name,
        )
    return total


def _non_negative_int(value: object, *, where: str) -> int:
    """``value`` as an int >= 0 (a bool, a fraction or text that is not a whole number raises).

    >>> _non_negative_int("4", where="w"), _non_negative_int(0, where="w")
    (4, 0)
    """
    try:
        out = int(str(value)) if not isinstance(value, bool) else -1
    except ValueError:
        out = -1
    if out < 0:
        raise ConfigError(
            f"data loader workers must be an integer >= 0, got {value!r}", value=value, where=where
        )
    return out


def input_pipeline(
    *,
    dataset: DatasetKind | str | None,
    preset: str,
    topology: Any,
    gpus: Sequence[str],
    replicas: int,
    samples_per_step: float,
    costs: Any,
    loader: LoaderKind | str | None = None,
    workers: int | None = None,
    cpu_s_per_sample: Mapping[tuple[DatasetKind, LoaderKind], float] | None = None,
) -> InputPipeline | None:
    """The input pipeline of a scenario; ``None`` for synthetic data (nothing on the host).

    Parameters
    ----------
    dataset
        Data set kind (``None``: synthetic, the default).
    preset
        Software preset name: picks the :data:`FRAMEWORK_LOOPS` entry.
    topology, gpus
        The system and the GPUs the step uses (servers and CPUs come from the graph).
    replicas
        Data-parallel replicas (the step's samples are split evenly over them).
    samples_per_step
        Samples of the whole step.
    costs
        Object with ``transfers_time(pairs, nbytes)`` and ``cpu_of(gpu)``
        (:class:`~perfmodel.parallel.costs.SystemCosts`).
    loader, workers
        Overrides of the framework loop's library and workers per pipeline (``--data-loader``,
        ``--data-loader-workers``); ``workers=0`` loads in the training process (synchronous).
    cpu_s_per_sample
        Measured per-sample costs (a calibration profile), replacing :data:`DATASETS`' values.

    Raises
    ------
    ConfigError
        A negative worker count or an unknown data set / loader name.
    """
    if dataset is None:
        return None
    kind = parse_dataset(dataset)
    if kind is DatasetKind.SYNTHETIC:
        return None
    loop = framework_loop(preset)
    lib = loop.loader if loader is None else parse_loader(loader)
    if workers is not None:
        workers = _non_negative_int(workers, where="data_loader_workers")
    spec = DATASETS[kind]
    cost = spec.cpu_s_per_sample[lib]
    if cpu_s_per_sample and (kind, lib) in cpu_s_per_sample:
        cost = float(cpu_s_per_sample[(kind, lib)])
    server = topology.server_of(gpus[0])
    on_server = [g for g in gpus if topology.server_of(g) == server]
    servers = len({topology.server_of(g) for g in gpus})
    cores = _server_cores(topology, server)
    if loop.scope is PipelineScope.PER_PROCESS:
        per_server = len(on_server)
    else:
        per_server = 1
    pipelines = per_server * servers
    samples = samples_per_step / pipelines
    avail = max(1.0, (cores - per_server) / per_server)
    w = loop.workers if workers is None else workers
    overlapped = loop.prefetch
    if lib is LoaderKind.DALI:
        par = 1.0
        w = 0 if w is None else w
    elif w is None:  # AUTOTUNE: every core the other pipelines leave
        par = avail
        w = int(avail)
    elif w == 0:  # PyTorch num_workers=0: the training process loads, nothing runs ahead
        par, overlapped = 1.0, False
    elif lib is LoaderKind.KERAS:  # worker threads (use_multiprocessing=False) share the GIL
        par = 1.0
    else:
        par = min(float(w), avail)
    prep = samples * cost / par
    nbytes = spec.dali_h2d_bytes_per_sample if lib is LoaderKind.DALI else spec.h2d_bytes_per_sample
    per_gpu = samples_per_step / max(1, replicas) * nbytes
    pairs = [(costs.cpu_of(g), g) for g in on_server]
    copy = costs.transfers_time(pairs, per_gpu) if per_gpu > 0 else 0.0
    pinned = loop.pinned_copy or lib is LoaderKind.DALI
    return InputPipeline(
        dataset=kind,
        loader=lib,
        scope=loop.scope,
        pipelines_per_server=per_server,
        samples_per_pipeline=samples,
        workers=int(w),
        parallelism=par,
        server_cores=cores,
        cpu_s_per_sample=cost,
        prep_s=prep,
        copy_s=copy,
        overlapped=overlapped,
        pinned=pinned,
        sources=(*spec.sources, *loop.sources),
    )


__all__ = [
    "CIFAR_CPU_S",
    "DATASETS",
    "FRAMEWORK_LOOPS",
    "IMAGENET_JPEG_BYTES",
    "IMAGENET_JPEG_CPU_S",
    "DatasetKind",
    "DatasetSpec",
    "FrameworkLoop",
    "InputPipeline",
    "LoaderKind",
    "PipelineScope",
    "check_single_node",
    "framework_loop",
    "input_pipeline",
    "parse_dataset",
    "parse_loader",
]
