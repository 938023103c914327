"""A workload from a trace of one rank: a Chakra execution trace or a PyTorch (Kineto) trace.

(In ``calibration/`` because it turns measured times into model input, as the profile fits do;
the Chakra codec itself is :mod:`perfmodel.workload.chakra_et`.)

A trace gives *times*, not the FLOP and bytes the compute model predicts from, so every imported
layer carries its measured device time (:class:`perfmodel.workload.layers.MeasuredTime`), which
the compute model returns as it is, on the GPU the trace was recorded on. Everything around the
layers is predicted as for a zoo model: the gradient all-reduce and its overlap with the
backward, the optimizer step, the host issue of the kernels, and the speedup on more GPUs of the
same kind (``predict --gpus 1,2,4,8``).

Inputs:

- **Kineto / Chrome trace** (``.json`` or ``.json.gz``, ``torch.profiler`` ``export_chrome_trace``)
  with ``layer:<name>|<Module>`` ranges (perfmodel's step runner writes them; see
  :mod:`perfmodel.calibration.kineto`): one layer per traced module with its forward and
  backward kernel time and kernel counts. The optimizer's and unattributed kernels are reported,
  not imported (the optimizer is predicted from the parameter count).
- **Chakra ET** (``.et``, :mod:`perfmodel.workload.chakra_et`): one layer per GPU compute node
  (``is_cpu_op`` false); a node whose name contains ``backward`` (PyTorch's autograd names) or, in
  a trace perfmodel wrote, whose name starts with ``B``/``R`` (backward, recompute) is backward
  time; the data-parallel all-reduce sizes (``comm_size`` of ``ALL_REDUCE`` nodes whose
  ``perfmodel_comm_class`` is ``dp``, or all ``ALL_REDUCE`` nodes otherwise) give the gradient
  bytes, hence the parameter count.

What a trace does not say is stated, not guessed silently: the parameter count (``params``) when
the trace has no gradient all-reduce; its split over layers follows the forward time of the layers
that hold weights (a linear layer's FLOP, hence time, is proportional to its weights at a fixed
token count); saved activations are unknown (memory reports weights, gradients and optimizer
state only). The batch is the traced one: another batch or tensor parallelism needs a model
description, not a trace.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from perfmodel.calibration.kineto import Phase, read_trace_json, summarize_trace, trace_events
from perfmodel.dtypes import Precision
from perfmodel.errors import ConfigError
from perfmodel.workload.chakra_et import CommType, NodeType, read_trace
from perfmodel.workload.layers import LayerCost, LayerKind, MeasuredTime, Workload

#: module classes (Kineto import) that hold trainable weights
_WEIGHTED = re.compile(r"linear|conv|embedding|norm|attention", re.IGNORECASE)
_KIND = {
    "linear": LayerKind.LINEAR,
    "conv": LayerKind.CONV,
    "embedding": LayerKind.EMBEDDING,
    "norm": LayerKind.NORM,
    "attention": LayerKind.ATTENTION,
}


@dataclass(frozen=True)
class ImportedLayer:
    name: str
    module: str
    fwd_s: float
    bwd_s: float
    kernels: int
    bwd_kernels: int


@dataclass(frozen=True)
class ImportedTrace:
    """Layers of one traced step, and what the trace said about the rest.

    Attributes
    ----------
    layers
        Traced layers, forward order.
    gpu
        Catalogue GPU the times belong to.
    params
        Trainable parameters (from the all-reduce sizes, or given).
    params_source
        Where ``params`` came from.
    not_imported_s
        Device time of the trace that is not a layer (optimizer kernels, unattributed work).
    source
        The file.
    """

    layers: tuple[ImportedLayer, ...]
    gpu: str
    params: int
    params_source: str
    not_imported_s: float
    source: str
    tp: int = 1
    """Tensor-parallel degree of the traced run: a ``tp > 1`` trace is one rank's shard (its
    layers, times and parameters are the shard's) and predicts with the same ``tp``."""
    meta: dict[str, object] | None = None
    """What a perfmodel export states of its run (``perfmodel_*`` metadata, prefix removed)."""
    layer_params: tuple[int, ...] | None = None
    """Parameters per layer when the trace says them (a perfmodel export: the gradient
    buckets reduced after each backward segment), else split by forward time."""

    @property
    def fwd_s(self) -> float:
        return sum(x.fwd_s for x in self.layers)

    @property
    def bwd_s(self) -> float:
        return sum(x.bwd_s for x in self.layers)

    def workload(self, batch_size: int, precision: Precision | str, name: str = "") -> Workload:
        """The imported step as a :class:`Workload` of ``batch_size`` samples per micro-batch.

        Parameters go to the weighted layers in proportion to their forward time (all layers
        when none is recognisably weighted); the remainder of the integer split goes to the first.
        """
        prec = Precision.parse(precision, where="precision")
        weighted = [i for i, x in enumerate(self.layers) if _WEIGHTED.search(x.module)] or list(
            range(len(self.layers))
        )
        total_t = sum(self.layers[i].fwd_s for i in weighted) or 1.0
        shares = [0] * len(self.layers)
        for i in weighted:
            shares[i] = int(self.params * self.layers[i].fwd_s / total_t)
        if weighted:
            shares[weighted[0]] += self.params - sum(shares)
        if self.layer_params is not None and sum(self.layer_params) == self.params:
            shares = list(self.layer_params)
        layers = tuple(
            LayerCost(
                name=x.name,
                kind=next(
                    (k for key, k in _KIND.items() if key in x.module.lower()), LayerKind.OTHER
                ),
                fwd_flop=0.0,
                bwd_input_flop=0.0,
                bwd_weight_flop=0.0,
                params=shares[i],
                fwd_bytes=0.0,
                bwd_bytes=0.0,
                activation_bytes=0.0,
                output_shape=(batch_size,),
                kernels=x.kernels,
                bwd_kernels=x.bwd_kernels,
                measured=MeasuredTime(x.fwd_s, x.bwd_s, self.gpu),
            )
            for i, x in enumerate(self.layers)
        )
        return Workload(
            name=name or Path(self.source).name,
            layers=layers,
            batch_size=batch_size,
            precision=prec,
            total_params=self.params * self.tp,
            tp=self.tp,
        )

    def workload_fn(self, batch_size: int, name: str = "") -> Callable[..., Workload]:
        """``workload_fn`` for :func:`perfmodel.api.predict`: the traced batch and the traced
        tensor-parallel degree (a trace of one rank cannot be re-split)."""

        def fn(*, batch_size: int, precision, tp: int = 1, sequence_parallel: bool = False):
            if tp != self.tp:
                raise ConfigError(
                    f"the trace is one rank of tp={self.tp}: it predicts with tp={self.tp} "
                    f"(a trace of one rank cannot be re-split), not tp={tp}",
                    value=tp,
                    where="--plan",
                )
            if batch_size != traced:
                raise ConfigError(
                    f"the trace was recorded at batch {traced} per GPU, not {batch_size}: give "
                    f"--batch-per-gpu {traced}",
                    value=batch_size,
                    where="--batch-per-gpu",
                )
            return self.workload(batch_size, precision, name)

        traced = batch_size
        return fn


def _kineto(path: str, gpu: str | None, params: int | None) -> ImportedTrace:
    from perfmodel.compute.validation import resolve_gpu

    data = read_trace_json(path)
    summary = summarize_trace(trace_events(data, path), source=path)
    if gpu is None:
        props = data.get("deviceProperties") if isinstance(data, dict) else None
        if not props:
            raise ConfigError(
                f"{path}: the trace names no device (deviceProperties); give --gpu",
                value=path,
                where="--gpu",
            )
        gpu = resolve_gpu(str(props[0].get("name", ""))).name
    fwd: dict[str, tuple[str, float, int]] = {}
    bwd: dict[str, tuple[float, int]] = {}
    rest = 0.0
    for x in summary.layers:
        if x.phase is Phase.FORWARD:
            fwd[x.layer] = (x.module, x.time_s, x.events)
        elif x.phase is Phase.BACKWARD:
            bwd[x.layer] = (x.time_s, x.events)
        else:
            rest += x.time_s
    for name in set(bwd) - set(fwd):
        rest += bwd[name][0]
    layers = tuple(
        ImportedLayer(
            name, mod, t, bwd.get(name, (0.0, 0))[0], max(k, 1), bwd.get(name, (0.0, 0))[1]
        )
        for name, (mod, t, k) in fwd.items()
    )
    if params is None:
        raise ConfigError(
            f"{path}: a Kineto trace does not state the parameter count (the gradient all-reduce "
            "of data parallelism needs it); give --params",
            value=path,
            where="--params",
        )
    return ImportedTrace(layers, gpu, int(params), "given (--params)", rest, path)


_BACKWARD = re.compile(r"backward", re.IGNORECASE)


def _chakra(
    path: str, gpu: str | None, params: int | None, precision: Precision | None
) -> ImportedTrace:
    tr = read_trace(path)
    ours = tr.meta("producer") == "perfmodel"
    meta = {
        a.name[len("perfmodel_") :]: a.value for a in tr.metadata if a.name.startswith("perfmodel_")
    }
    if precision is None:
        precision = Precision.parse(str(meta.get("precision", "fp32")), where="trace precision")
    if gpu is None and meta.get("gpu"):
        from perfmodel.hardware import get_gpu

        gpu = get_gpu(str(meta["gpu"]), where=f"{path}: metadata perfmodel_gpu").name
    paired = _perfmodel_layers(tr) if ours else None
    layers: list[ImportedLayer] = []
    layer_params: tuple[int, ...] | None = None
    allreduce_bytes = dp_bytes = 0
    if paired is not None:
        layers, dp_bytes_per_layer = paired
        grad_b = int(meta.get("grad_reduce_bytes") or precision.grad_bytes)
        layer_params = tuple(round(b / grad_b) for b in dp_bytes_per_layer)
        dp_bytes = sum(dp_bytes_per_layer)
    else:
        for n in tr.nodes:
            if n.type is NodeType.COMP_NODE and not n.attr("is_cpu_op", True):
                t = n.duration_micros * 1e-6
                kind = n.attr("perfmodel_kind", "")
                back = bool(_BACKWARD.search(n.name)) or (
                    ours and kind in ("compute", "recompute") and n.name[:1] in "BR"
                )
                if ours and kind == "optimizer":
                    continue
                layers.append(
                    ImportedLayer(
                        n.name, "", 0.0 if back else t, t if back else 0.0, 1, 1 if back else 0
                    )
                )
            elif n.type is NodeType.COMM_COLL_NODE and n.attr("comm_type") == int(
                CommType.ALL_REDUCE
            ):
                size = int(n.attr("comm_size", 0) or 0)
                allreduce_bytes += size
                if n.attr("perfmodel_comm_class") == "dp":
                    dp_bytes += size
    if gpu is None:
        raise ConfigError(
            f"{path}: a Chakra ET does not name its GPU; give --gpu (a catalogue name)",
            value=path,
            where="--gpu",
        )
    src = "given (--params)"
    grad_bytes = int(meta.get("grad_reduce_bytes") or precision.grad_bytes)
    if params is None:
        grad = dp_bytes or allreduce_bytes
        if grad:
            params = round(grad / grad_bytes)
            src = f"{grad:,} all-reduced bytes / {grad_bytes} bytes per gradient"
        elif meta.get("rank_params") and int(meta.get("pp", 1) or 1) == 1:
            params = int(meta["rank_params"])  # type: ignore[arg-type]
            src = "the trace's metadata (perfmodel_rank_params)"
        else:
            raise ConfigError(
                f"{path}: no gradient all-reduce in the trace to count parameters from; give --params",
                value=path,
                where="--params",
            )
    tp = int(meta.get("tp", 1) or 1)  # type: ignore[arg-type]
    if layer_params is not None and sum(layer_params) != params:
        layer_params = None  # a --params of the caller's own: split by forward time instead
    return ImportedTrace(
        tuple(layers),
        gpu,
        int(params),
        src,
        0.0,
        path,
        tp=tp,
        meta=meta or None,
        layer_params=layer_params,
    )


def _perfmodel_layers(tr: object) -> tuple[list[ImportedLayer], list[int]] | None:
    """One layer per forward segment of a perfmodel export, with the backward segment that
    mirrors it and the data-parallel gradient bytes reduced after that backward segment.

    perfmodel writes a step's compute as segments (one task per run of layers between gradient
    buckets, :mod:`perfmodel.parallel.lowering`), forward ``F`` in order and backward ``B``
    (and recompute ``R``) in reverse; a tensor-parallel collective on the compute stream is
    exposed there and its measured time is kept with the segment it follows. Only micro-batch
    0 is read (one micro-batch's layers: the others repeat them). ``None`` when the trace does
    not pair up (another producer's, or a pipeline stage whose forward and backward counts
    differ): the caller reads node by node."""
    from perfmodel.workload.chakra_et import Trace

    assert isinstance(tr, Trace)
    fwd: list[list[float]] = []  # [seconds] per forward segment
    bwd: list[list[float]] = []
    grad_after: dict[int, int] = {}  # index into bwd -> dp bytes reduced after it
    last_b_node: dict[int, int] = {}  # node id -> backward segment index (any micro-batch)
    b_count: dict[int, int] = {}  # micro-batch -> backward segments seen
    phase = None
    for n in tr.nodes:
        mb = n.attr("perfmodel_microbatch", 0)
        kind = n.attr("perfmodel_kind", "")
        if n.type is NodeType.COMP_NODE and not n.attr("is_cpu_op", True):
            if kind == "optimizer":
                continue
            if mb not in (0, None):  # the same segments again: their ids, for the buckets
                if kind == "compute" and n.name[:1] == "B":
                    last_b_node[n.id] = b_count.get(mb, 0)
                    b_count[mb] = b_count.get(mb, 0) + 1
                continue
            t = n.duration_micros * 1e-6
            head = n.name[:1]
            if kind == "compute" and head == "F":
                fwd.append([t])
                phase = "F"
            elif kind in ("compute", "recompute") and head in "BR":
                if kind == "recompute" or head == "R":
                    if not bwd:
                        bwd.append([0.0])
                    bwd[-1].append(t)  # re-run forward, charged to the backward it precedes
                else:
                    bwd.append([t])
                    last_b_node[n.id] = len(bwd) - 1
                phase = "B"
            elif t > 0 and phase is not None:
                (fwd if phase == "F" else bwd)[-1].append(t)  # a join, a cast ...
        elif n.type is NodeType.COMM_COLL_NODE:
            cls = n.attr("perfmodel_comm_class", "")
            if cls == "dp":
                owner = next((last_b_node[d] for d in n.data_deps if d in last_b_node), None)
                if owner is None and bwd:
                    owner = len(bwd) - 1
                if owner is not None:
                    grad_after[owner] = grad_after.get(owner, 0) + int(n.attr("comm_size", 0) or 0)
            elif (
                n.attr("perfmodel_stream") == "compute" and mb in (0, None) and phase is not None
            ):  # a collective on the compute stream (blocking TP): exposed, kept with its segment
                (fwd if phase == "F" else bwd)[-1].append(n.duration_micros * 1e-6)
    if not fwd or len(fwd) != len(bwd):
        return None
    layers = []
    dp_bytes = []
    n_seg = len(fwd)
    for i, f in enumerate(fwd):
        j = n_seg - 1 - i  # the backward segment that mirrors forward segment i
        layers.append(ImportedLayer(f"segment {i}", "", sum(f), sum(bwd[j]), 1, 1))
        dp_bytes.append(grad_after.get(j, 0))
    return layers, dp_bytes


def import_trace(
    path: str | os.PathLike[str],
    *,
    gpu: str | None = None,
    params: int | None = None,
    precision: Precision | str | None = "fp32",
) -> ImportedTrace:
    """Read a Chakra ET (``.et``) or a Kineto trace (``.json``, ``.json.gz``) of one rank.

    ``gpu`` is the catalogue GPU the trace was recorded on (read from a Kineto trace's
    ``deviceProperties``, or a perfmodel ET's ``perfmodel_gpu`` metadata, when omitted);
    ``params`` the trainable parameters (required when the trace has no gradient all-reduce);
    ``precision`` sets the gradient bytes used to count parameters from all-reduce sizes
    (``None``: a perfmodel ET's own, else fp32; a perfmodel ET states its bytes per gradient).
    A perfmodel ET reads as one layer per forward segment with its mirrored backward segment
    and the gradient bytes reduced after it (so the scale-out prediction buckets as the export
    did), from micro-batch 0; a ``tp > 1`` export is one rank's shard.

    Raises
    ------
    ConfigError, ParseError
        An unreadable trace, or a fact the trace lacks and the caller did not give.
    """
    p = str(path)
    prec = None if precision is None else Precision.parse(precision, where="--precision")
    if gpu is not None:
        from perfmodel.hardware import get_gpu

        gpu = get_gpu(gpu, where="--gpu").name
    if p.endswith(".et"):
        return _chakra(p, gpu, params, prec)
    return _kineto(p, gpu, params)
