"""Per-layer costs: the unit of a :class:`Workload`. Pure numbers, no time.

All quantities are for **one micro-batch of the workload's batch size on one rank** (after
any tensor-parallel sharding the workload was built with).
"""

from __future__ import annotations

import enum
import math
import os
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import MISSING, dataclass, field, fields, replace
from operator import attrgetter
from typing import Any, TypeVar

from perfmodel._frozen import from_fields
from perfmodel.dtypes import Precision
from perfmodel.ops import CollectiveOp

T = TypeVar("T")


class LayerKind(str, enum.Enum):
    CONV = "conv"
    LINEAR = "linear"  # dense GEMM with weights
    MATMUL = "matmul"  # activation x activation GEMM (unfused attention scores / context)
    ATTENTION = "attention"  # fused attention kernel (FlashAttention-style): no s x s matrix stored
    EMBEDDING = "embedding"
    NORM = "norm"  # batch norm, layer norm, RMS norm
    ACTIVATION = "activation"  # relu, gelu, swiglu gate ...
    POOL = "pool"
    ELEMENTWISE = "elementwise"  # residual add, dropout, scaling
    SOFTMAX = "softmax"
    LOSS = "loss"  # softmax cross-entropy
    OTHER = "other"


# Enum members the hot paths read, bound once: on CPython 3.11 `EnumType.__getattr__` makes
# each `Enum.MEMBER` read ~1,000 instructions (docs/design.md "Session 26 (speed41a)").
LAYER_ATTENTION = LayerKind.ATTENTION
LAYER_CONV = LayerKind.CONV
LAYER_LINEAR = LayerKind.LINEAR
LAYER_MATMUL = LayerKind.MATMUL


class KernelClass(str, enum.Enum):
    """What kind of kernel a layer's time is spent in, for a step's per-class breakdown
    (``StepReport.kernel_classes``, ``perfmodel model show``): GEMMs (reported by dtype) and
    fused attention are compute-bound; the rest are memory-bound kernels by what they do
    (:mod:`perfmodel.workload.kernels` decomposes a transformer block into them per stack).
    """

    GEMM = "gemm"
    ATTENTION = "attention"
    NORM = "norm"
    ROPE = "rope"
    ACTIVATION = "activation"
    RESIDUAL = "residual"
    DROPOUT = "dropout"
    SOFTMAX = "softmax"
    ELEMENTWISE = "elementwise"
    CAST = "cast"
    FP8_CAST = "fp8_cast"
    COPY = "copy"
    EMBEDDING = "embedding"
    POOL = "pool"
    LOSS = "loss"
    FSDP_COPY = "fsdp_copy"  # FSDP2's copy-out/copy-in; pipelined, the gradient accumulation too
    OPTIMIZER = "optimizer"
    OTHER = "other"


#: The class of a layer that does not state one, by its kind.
_CLASS_OF_KIND = {
    "conv": KernelClass.GEMM,
    "linear": KernelClass.GEMM,
    "matmul": KernelClass.GEMM,
    "attention": KernelClass.ATTENTION,
    "embedding": KernelClass.EMBEDDING,
    "norm": KernelClass.NORM,
    "activation": KernelClass.ACTIVATION,
    "pool": KernelClass.POOL,
    "elementwise": KernelClass.ELEMENTWISE,
    "softmax": KernelClass.SOFTMAX,
    "loss": KernelClass.LOSS,
    "other": KernelClass.OTHER,
}


class ExpertRole(str, enum.Enum):
    """Part a layer plays in a mixture-of-experts block, for an expert-parallel lowering.

    ``ROUTER``: the gate (scores every token against every expert; replicated). ``DISPATCH``:
    permutation of the routed tokens to their experts (becomes the all-to-all under expert
    parallelism). ``EXPERT``: grouped GEMMs and activation of the routed experts (weights shard
    by ep). ``COMBINE``: un-permutation and the probability-weighted sum of the ``top_k``
    outputs (the return all-to-all under expert parallelism).
    """

    ROUTER = "router"
    DISPATCH = "dispatch"
    EXPERT = "expert"
    COMBINE = "combine"


# (bound once, as above)
ROLE_COMBINE = ExpertRole.COMBINE
ROLE_DISPATCH = ExpertRole.DISPATCH
ROLE_EXPERT = ExpertRole.EXPERT


@dataclass(frozen=True)
class GemmShape:
    """The main matrix product of a layer in the forward pass: ``(m x k) @ (k x n)``, ``batch`` times.

    For a convolution, the implicit-GEMM view: ``m = N*H_out*W_out``, ``n = C_out``,
    ``k = C_in*R*S/groups`` (Chetlur et al. 2014, cuDNN).
    """

    m: int
    n: int
    k: int
    batch: int = 1

    @property
    def flop(self) -> float:
        """``2 m n k batch`` (one FMA = 2 FLOP)."""
        return 2.0 * self.m * self.n * self.k * self.batch


@dataclass(frozen=True)
class CommPoint:
    """A collective a layer issues inside forward or backward (tensor/sequence parallelism).

    ``message_bytes`` follows the nccl-tests convention of :class:`perfmodel.ops.CollectiveOp`;
    ``group`` names the parallel dimension it runs over (``"tp"``).
    """

    op: CollectiveOp
    message_bytes: float
    group: str = "tp"


@dataclass(frozen=True)
class MeasuredTime:
    """Forward and backward device time of one layer, measured on ``gpu`` (a catalogue name),
    seconds, for one micro-batch."""

    fwd_s: float
    bwd_s: float
    gpu: str


@dataclass(frozen=True)
class LayerCost:
    """Cost of one layer for one micro-batch on one rank.

    Attributes
    ----------
    fwd_flop, bwd_input_flop, bwd_weight_flop
        FLOP of the forward pass, the input-gradient (dgrad) and the weight-gradient (wgrad).
    params
        Trainable parameters held by this rank for this layer.
    fwd_bytes, bwd_bytes
        Device-memory bytes read plus written by the forward and by the backward kernels.
    activation_bytes
        Bytes saved in forward for use in backward (what recomputation frees).
    output_shape
        Shape of the output tensor (including the batch dimension).
    gemm
        The main GEMM for the efficiency model (``None`` for non-GEMM layers).
    fwd_comm, bwd_comm
        Collectives this layer issues (tensor parallelism), in order.
    block
        Index of the repeated block (transformer layer, ResNet stage unit) or ``None``; pipeline
        partitioning cuts between blocks.
    kernels
        Number of kernel launches in forward (backward counted as about twice).
    recomputable_bytes
        Part of ``activation_bytes`` that selective recomputation drops (the ``s x s``
        attention tensors, Korthikanti et al. 2022); added after the original fields.
    bwd_kernels
        Kernel launches of the backward (input- plus weight-gradient), or ``None`` for the
        legacy rule (``kernels`` per backward pass). The zoo sets it from the per-layer kernel
        counts of PyTorch 2.11 eager traces on an H100 (``calibration/h100-sxm5-80gb/``); the
        compute model uses it for launch overhead and the host-dispatch floor.
    autocast_fp32
        Under PyTorch autocast this layer's activations move in FP32: ``layer_norm`` (and
        ``rms_norm``) are on autocast's float32 op list, and the residual stream of a pre-norm
        transformer stays FP32 (the embedding output is FP32 and FP32 + BF16 promotes). The
        compute model scales the layer's bytes by ``4 / activation_bytes`` when
        ``ComputeParams.cast_weights_each_step`` (autocast) applies; Megatron-style 16-bit
        training keeps 16-bit activations.
    casts_input
        A linear layer whose input comes from an ``autocast_fp32`` layer (a layer norm): under
        autocast the input is cast to 16 bit in forward and its gradient back to FP32 in
        backward (one kernel and ``el (4 + a)`` bytes each way).
    """

    name: str
    kind: LayerKind
    fwd_flop: float
    bwd_input_flop: float
    bwd_weight_flop: float
    params: int
    fwd_bytes: float
    bwd_bytes: float
    activation_bytes: float
    output_shape: tuple[int, ...]
    gemm: GemmShape | None = None
    fwd_comm: tuple[CommPoint, ...] = ()
    bwd_comm: tuple[CommPoint, ...] = ()
    block: int | None = None
    kernels: int = 1
    recomputable_bytes: float = 0.0
    bwd_kernels: int | None = None
    autocast_fp32: bool = False
    casts_input: bool = False
    conv_window: tuple[int, int, int, int, int, int] | None = None
    """Convolutions: ``(kernel_h, kernel_w, stride_h, stride_w, dilation_h, dilation_w)``, which
    decides the algorithms cuDNN can use (Winograd needs 3x3, stride 1, no dilation); ``None``
    when not known (a layer imported or built by hand)."""
    expert_role: ExpertRole | None = None
    """Mixture-of-experts layers: the part this layer plays (:class:`ExpertRole`); ``None`` for
    dense layers."""
    experts: int = 0
    """``EXPERT`` layers: routed experts whose weights ``params`` holds (all of them: memory and
    gradient traffic are for the total); FLOP and bytes are for the ``top_k`` experts each
    token visits."""
    top_k: int = 0
    """``EXPERT`` layers: experts each token is routed to."""
    routing_groups: tuple[int, int] = (0, 0)
    """Group-limited routing of a mixture-of-experts layer, ``(groups, groups per token)``: the
    experts split into ``groups`` consecutive groups and a token's ``top_k`` experts are chosen
    in ``groups per token`` of them (DeepSeek-V3's node-limited routing; Megatron-Core
    ``--moe-router-num-groups`` / ``--moe-router-group-topk``); ``(0, 0)``: no limit. Read by
    the token dispatchers' deduplication (:func:`perfmodel.parallel.expert.dispatch_share`)."""
    router_tokens: int = 0
    """``DISPATCH`` layers: the tokens this rank's router scores (its own tokens, 1/tp of the
    sequence under sequence parallelism), before any routing or load imbalance: the rows of
    the rank's routing map (:func:`perfmodel.parallel.expert.routing_map_gather_bytes`);
    0 elsewhere."""
    ring_steps: int = 1
    """Fused attention under ring context parallelism: the ``cp`` kernel calls (ring steps) its
    FLOP is split over in equal shares, :attr:`gemm` being one call's block (step 0: the local
    queries against the local keys); 1 without context parallelism. Read by
    :func:`perfmodel.compute.model.attention_shape`."""
    sliding_window: int = 0
    """Fused attention over a causal sliding window: the keys each query sees (the window
    ``w``, shorter than the sequence), :attr:`gemm` being a block of ``w`` queries against the
    ``2 w`` keys it sweeps (:meth:`perfmodel.workload._net.Net.attention`); 0: not a sliding
    window (a whole or chunked attention, or a layer imported or built by hand that does not
    state one). Read by :func:`perfmodel.compute.model.attention_shape`: the window, not the
    block's shape, decides that the kernel runs at a sliding window's efficiency."""
    kernel_class: KernelClass | None = None
    """What its kernels do (:class:`KernelClass`); ``None``: the class of its kind
    (:attr:`klass`)."""
    keep_16bit: bool = False
    """A weight GEMM that FP8 recipes keep in 16 bit: the LM head (Megatron-Core's
    ``output_layer`` is a plain ``ColumnParallelLinear`` outside Transformer Engine's
    ``fp8_autocast`` modules; torchtitan converts every ``nn.Linear`` but ``output``,
    ``module_filter_fn=lambda mod, fqn: fqn != "output"`` in ``torchtitan/float8.py`` at
    ``9dec370``)."""

    @classmethod
    def parameters_only(cls, name: str, params: int, output_shape: tuple[int, ...]) -> LayerCost:
        """An ``OTHER`` layer that holds ``params`` parameters and costs nothing in forward and
        backward (the layers that use them charge the work): the weights and optimizer state
        in memory, the gradients in the data-parallel synchronisation."""
        return cls(
            name=name,
            kind=LayerKind.OTHER,
            fwd_flop=0.0,
            bwd_input_flop=0.0,
            bwd_weight_flop=0.0,
            params=params,
            fwd_bytes=0.0,
            bwd_bytes=0.0,
            activation_bytes=0.0,
            output_shape=output_shape,
        )

    @property
    def klass(self) -> KernelClass:
        """:attr:`kernel_class`, or the class of the layer's kind."""
        if self.kernel_class is not None:
            return self.kernel_class
        return _CLASS_OF_KIND[self.kind.value]

    @property
    def active_params(self) -> int:
        """Parameters one token uses: ``params x top_k / experts`` for a routed-expert layer,
        else ``params`` (every expert holds the same share of ``params``)."""
        if self.experts:
            return self.params // self.experts * self.top_k
        return self.params

    measured: MeasuredTime | None = None
    """Device time measured for this layer (imported from a trace,
    :mod:`perfmodel.calibration.trace_workload`): the compute model returns it instead of a
    prediction, on the GPU it was measured on only."""

    @property
    def bwd_flop(self) -> float:
        return self.bwd_input_flop + self.bwd_weight_flop

    @property
    def total_flop(self) -> float:
        return self.fwd_flop + self.bwd_flop

    @classmethod
    def built(cls, **fields_: Any) -> LayerCost:
        """``LayerCost(**fields_)`` at a third of its cost, for the network builders
        (:class:`perfmodel.workload._net.Net`: a new plan's workload makes 30-40 layers).

        The frozen dataclass's ``__init__`` sets each of the 30 fields with
        ``object.__setattr__`` (~3.5 us a layer); this makes the instance's ``__dict__`` at
        once: every field's default in declaration order, the given values in their places.
        That is the dictionary ``__init__`` leaves (the same keys in the same order, the same
        value objects; there is no ``__post_init__``), so equality, hashing, ``repr`` and
        every reader see the same layer. Unknown or missing field names go to ``__init__``,
        which raises its ``TypeError``. :data:`FAST_BUILD` off: ``__init__`` always (the
        reference ``tests/workload/test_layer_built.py`` compares against). A subclass (its
        own fields, defaults or ``__post_init__`` unknown here): ``__init__`` always."""
        if cls is not LayerCost:
            return cls(**fields_)
        d = {**_FIELD_DEFAULTS, **fields_}
        if not FAST_BUILD or len(d) != len(_FIELD_DEFAULTS) or not fields_.keys() >= _REQUIRED:
            return cls(**fields_)
        return from_fields(cls, d)

    def changed(self, **changes: Any) -> LayerCost:
        """``dataclasses.replace(self, **changes)`` by :meth:`built`: every field of this layer
        with ``changes`` in their places (a :meth:`relabelled` copy's link to its source is not
        a field, and is dropped as ``replace`` drops it); a subclass's layer by ``replace``."""
        if type(self) is not LayerCost:
            return replace(self, **changes)
        d = {**self.__dict__, **changes}  # every field, in declaration order
        d.pop("_cost_source", None)
        if not FAST_BUILD or len(d) != len(_FIELD_DEFAULTS):
            return replace(self, **changes)  # and its error for a name that is no field
        return from_fields(type(self), d)

    def relabelled(self, name: str, block: int | None) -> LayerCost:
        """This layer under another ``name`` and ``block`` index, every cost field shared.

        Equal to ``dataclasses.replace(self, name=name, block=block)`` at a tenth of its cost
        (no field is re-validated: they are this layer's), for copying a repeated block. The
        copy remembers the layer it was made from (:meth:`cost_source`, not a field: equality,
        hashing and ``repr`` ignore it), so a cost model prices the copies of a block once.
        """
        new = object.__new__(LayerCost)
        d = self.__dict__
        new.__dict__.update(d, name=name, block=block, _cost_source=d.get("_cost_source", self))
        return new

    def cost_source(self) -> LayerCost:
        """The layer this one was copied from by :meth:`relabelled` (itself if none): the same
        :meth:`cost_key`, so the same time on any GPU."""
        return self.__dict__.get("_cost_source", self)

    def cost_key(self) -> tuple[Any, ...]:
        """Every field except ``name`` and ``block``: the layer's value as a cost model sees it.

        Two layers with equal keys take the same time on any GPU (the blocks of a transformer
        stack differ only in their index), so cost models cache by this key and an identical
        block is costed once. Returns a tuple of the remaining fields in declaration order.
        """
        return _cost_fields(self)


#: Every field of :class:`LayerCost` and its default, in declaration order (``None`` for the
#: ten without one, :data:`_REQUIRED`): the template of :meth:`LayerCost.built`.
_FIELD_DEFAULTS: dict[str, Any] = {
    f.name: None if f.default is MISSING else f.default for f in fields(LayerCost)
}
_REQUIRED = frozenset(f.name for f in fields(LayerCost) if f.default is MISSING)

#: :meth:`LayerCost.built` makes the instance's dictionary at once; ``False``: it calls
#: ``LayerCost(**fields)`` (the switch a test flips against the direct path).
FAST_BUILD = True

_cost_fields = attrgetter(*(f.name for f in fields(LayerCost) if f.name not in ("name", "block")))


_COPY_LOCK = threading.Lock()
if hasattr(os, "register_at_fork"):  # a fork (compare's worker pool) never copies it held
    os.register_at_fork(
        before=_COPY_LOCK.acquire,
        after_in_parent=_COPY_LOCK.release,
        after_in_child=_COPY_LOCK.release,
    )


@dataclass(frozen=True)
class _Stack:
    """Storage of a :class:`StackedLayers`: ``head``, then ``copies`` relabelled copies of
    ``template`` (copy ``j``: names ``f"layer{first + j}."`` + a template name's characters from
    ``strip`` on, block ``block0 + j``), then ``tail``. ``cache`` holds the copies made so far,
    so that a layer read twice is the same object (id-keyed memos rely on it)."""

    head: tuple[LayerCost, ...]
    template: tuple[LayerCost, ...]
    copies: int
    first: int
    strip: int
    block0: int
    tail: tuple[LayerCost, ...]
    cache: list[LayerCost | None] = field(compare=False, repr=False)

    @property
    def size(self) -> int:
        return len(self.head) + self.copies * len(self.template) + len(self.tail)

    def layer(self, i: int) -> LayerCost:
        """Layer ``i`` (``0 <= i < size``), a copy made on first read."""
        h, p = len(self.head), len(self.template)
        if i < h:
            return self.head[i]
        r = i - h
        if r < self.copies * p:
            la = self.cache[r]
            if la is None:
                with _COPY_LOCK:  # one object per layer, also when threads read at once
                    la = self.cache[r]
                    if la is None:
                        j, t = divmod(r, p)
                        src = self.template[t]
                        la = self.cache[r] = src.relabelled(
                            f"layer{self.first + j}.{src.name[self.strip :]}", self.block0 + j
                        )
            return la
        return self.tail[r - self.copies * p]


class StackedLayers(Sequence[LayerCost]):
    """An immutable sequence of layers of which a run is copies of one block (a transformer
    stack), kept as the block and a count: the copies are made when first read
    (:meth:`LayerCost.relabelled`, then kept), so building a 96-block GPT-3 costs its first two
    blocks, and a reader that asks :func:`layer_runs` (the lowering, the memory model, the FLOP
    and parameter totals) reads the block once and multiplies.

    Behaves as the tuple of its layers for reading: ``len``, indexing, iteration, ``==`` with a
    tuple or another sequence of layers (element-wise), hashing as that tuple, ``repr`` as the
    tuple. A slice is a :class:`StackedLayers` over the same storage (the same layer objects).
    Pickles as its storage (copies made again on read).
    """

    __slots__ = ("_hi", "_lo", "_pieces", "_s")

    def __init__(self, stack: _Stack, lo: int = 0, hi: int | None = None) -> None:
        self._s = stack
        self._lo = lo
        self._hi = stack.size if hi is None else hi
        self._pieces: list[tuple[tuple[LayerCost, ...], int]] | None = None

    @classmethod
    def of(
        cls,
        head: Sequence[LayerCost],
        template: Sequence[LayerCost],
        copies: int,
        tail: Sequence[LayerCost],
        *,
        first: int,
        strip: int,
        block0: int,
    ) -> StackedLayers:
        """``head``, ``copies`` copies of ``template`` (see :class:`_Stack` for their names and
        blocks), ``tail``.

        The template is one block (its layers share one ``block`` index, not ``None``) and a
        copy's block differs from the layer before the copies and the layer after them, so each
        copy is one unit of consecutive layers with the same block, in the sequence and in any
        slice of it (what :meth:`pieces` readers count on); and the template's names share
        their first ``strip`` characters, ending in ``"."`` (a copy's name replaces that
        prefix, so a test of a dot-free name suffix, such as selective recomputation's
        ``attn_dropout``, answers for a copy as for its template layer); ``ValueError``
        otherwise."""
        blocks = {la.block for la in template}
        copy_blocks = range(block0, block0 + copies)
        if (
            len(blocks) != 1
            or None in blocks
            or (head and head[-1].block in copy_blocks)
            or (tail and tail[0].block in copy_blocks)
        ):
            raise ValueError(
                "StackedLayers: the template must be one block and its copies' blocks differ "
                "from the layers beside them"
            )
        prefix = template[0].name[:strip]
        if not prefix.endswith(".") or any(la.name[:strip] != prefix for la in template):
            raise ValueError(
                f"StackedLayers: strip={strip} must cut one name prefix ending in '.' shared by "
                f"every template layer (template[0].name={template[0].name!r})"
            )
        return cls(
            _Stack(
                tuple(head),
                tuple(template),
                copies,
                first,
                strip,
                block0,
                tuple(tail),
                [None] * (copies * len(template)),
            )
        )

    def __len__(self) -> int:
        return self._hi - self._lo

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            lo, hi, step = index.indices(len(self))
            if step != 1:
                return tuple(self[i] for i in range(lo, hi, step))
            return StackedLayers(self._s, self._lo + lo, self._lo + max(lo, hi))
        n = len(self)
        i = index + n if index < 0 else index
        if not 0 <= i < n:
            raise IndexError("layer index out of range")
        return self._s.layer(self._lo + i)

    def __iter__(self) -> Any:
        layer = self._s.layer
        return (layer(i) for i in range(self._lo, self._hi))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, StackedLayers):
            if other._s is self._s and (other._lo, other._hi) == (self._lo, self._hi):
                return True
            return tuple(self) == tuple(other)
        if isinstance(other, (tuple, list)):
            return tuple(self) == tuple(other)
        return NotImplemented

    def __hash__(self) -> int:
        return hash(tuple(self))

    def __repr__(self) -> str:
        return repr(tuple(self))

    def __add__(self, other: Any) -> tuple[LayerCost, ...]:
        return tuple(self) + tuple(other)

    def __radd__(self, other: Any) -> tuple[LayerCost, ...]:
        return tuple(other) + tuple(self)

    def __reduce__(self) -> tuple[Any, ...]:
        s = self._s
        stack = _Stack(
            s.head, s.template, s.copies, s.first, s.strip, s.block0, s.tail, [None] * len(s.cache)
        )
        return (StackedLayers, (stack, self._lo, self._hi))

    def pieces(self) -> list[tuple[tuple[LayerCost, ...], int]]:
        """This sequence as ``(layers, n)`` pieces in order: ``n`` copies of ``layers`` (the
        stack's template, ``n >= 2``) or ``n == 1`` and the layers themselves (a single whole
        copy comes as its own layers: the template's carry another block index); partial copies at
        the ends of a slice come as their own layers. See :func:`layer_runs`. Computed once
        per sequence (it is immutable); do not change the list."""
        if self._pieces is None:
            self._pieces = self._make_pieces()
        return self._pieces

    def _make_pieces(self) -> list[tuple[tuple[LayerCost, ...], int]]:
        s, lo, hi = self._s, self._lo, self._hi
        h, p = len(s.head), len(s.template)
        end = h + s.copies * p
        out: list[tuple[tuple[LayerCost, ...], int]] = []
        if lo < min(h, hi):
            out.append((s.head[lo : min(h, hi)], 1))
        a, b = max(lo, h), min(hi, end)
        if a < b:
            full_a = h + -(-(a - h) // p) * p  # first copy boundary at or after a
            full_b = h + (b - h) // p * p  # last copy boundary at or before b
            if full_a >= full_b:
                out.append((tuple(s.layer(i) for i in range(a, b)), 1))
            else:
                if a < full_a:
                    out.append((tuple(s.layer(i) for i in range(a, full_a)), 1))
                n = (full_b - full_a) // p
                if n > 1:
                    out.append((s.template, n))
                else:  # one copy: its own layers (the template's carry another block index)
                    out.append((tuple(s.layer(i) for i in range(full_a, full_b)), 1))
                if full_b < b:
                    out.append((tuple(s.layer(i) for i in range(full_b, b)), 1))
        if max(lo, end) < hi:
            out.append((s.tail[max(lo, end) - end : hi - end], 1))
        return out

    def copy_blocks(self) -> range:
        """Block indices of the whole copies this sequence holds (see :meth:`pieces`)."""
        s, lo, hi = self._s, self._lo, self._hi
        h, p = len(s.head), len(s.template)
        a, b = max(lo, h), min(hi, h + s.copies * p)
        if a >= b or p == 0:
            return range(0)
        ja, jb = -(-(a - h) // p), (b - h) // p
        return range(s.block0 + ja, s.block0 + max(ja, jb))


def feeds_gated_activation(linear: LayerCost, nxt: LayerCost | None) -> bool:
    """Whether ``linear`` is a gated MLP's fused input projection: the next layer is an
    activation whose output is half its output (SwiGLU / GEGLU: ``act(x W_gate) * (x W_up)``,
    Shazeer 2020, "GLU Variants Improve Transformer"), so its weight is two matrices (gate, up).
    """
    return (
        linear.kind is LayerKind.LINEAR
        and nxt is not None
        and nxt.kind is LayerKind.ACTIVATION
        and bool(nxt.output_shape)
        and bool(linear.output_shape)
        and 2 * math.prod(nxt.output_shape) == math.prod(linear.output_shape)
    )


def layer_tensors(layers: Sequence[LayerCost], ids: Sequence[int]) -> list[tuple[int, float]]:
    """``(layer id, elements)`` of each parameter tensor of the layers ``ids`` (ids into
    ``layers``, in order): one tensor per layer with parameters, two equal ones for a gated MLP's
    fused input projection (a linear layer feeding a gated activation,
    :func:`~perfmodel.workload.layers.feeds_gated_activation`: the zoo's ``fc1`` holds the gate
    and up matrices, which InternEvo keeps as two tensors, ``FeedForward.w1`` and
    ``w2``, InternLM ``fa7337b`` ``internlm/model/linear.py`` lines 27-44); a linear layer's
    bias (its parameters beyond the GEMM's ``k x n`` weight) is a tensor of its own, as
    ``nn.Linear`` keeps it (InternLM-7B's ``Wqkv.bias`` and ``out_proj.bias``). Read by
    InternEvo's owner broadcasts (:mod:`perfmodel.parallel.param_sync`) and FSDP2's
    gradient-accumulation launches (``Net._fsdp_copy``).

    >>> def layer(name, kind, params, width):
    ...     return LayerCost(name, kind, 0.0, 0.0, 0.0, params, 0.0, 0.0, 0.0, (1, width))
    >>> ls = [layer("b.ln2", LayerKind.NORM, 4, 4), layer("b.fc1", LayerKind.LINEAR, 80, 20),
    ...       layer("b.swiglu", LayerKind.ACTIVATION, 0, 10),
    ...       layer("b.fc2", LayerKind.LINEAR, 40, 4)]
    >>> layer_tensors(ls, [0, 1, 2, 3])
    [(0, 4.0), (1, 40.0), (1, 40.0), (3, 40.0)]
    """
    out: list[tuple[int, float]] = []
    for i in ids:
        p = float(layers[i].params)
        if p <= 0:
            continue
        g = layers[i].gemm
        bias = p - g.k * g.n if layers[i].kind is LayerKind.LINEAR and g is not None else 0.0
        p -= max(bias, 0.0)
        gated = feeds_gated_activation(layers[i], layers[i + 1] if i + 1 < len(layers) else None)
        out.extend([(i, p / 2), (i, p / 2)] if gated else [(i, p)])
        if bias > 0:
            out.extend([(i, bias / 2), (i, bias / 2)] if gated else [(i, bias)])
    return out


def layer_runs(layers: Sequence[LayerCost]) -> list[tuple[tuple[LayerCost, ...], int]]:
    """``layers`` as ``(block, n)`` pieces in order: ``n`` copies of ``block``'s layers, each
    copy equal to ``block`` in every field but ``name`` and ``block``
    (:meth:`StackedLayers.pieces`); a plain sequence is one piece of itself (``n == 1``).

    A sum over the layers of a field other than ``name`` and ``block`` is the sum over the
    pieces of ``n x`` the piece's sum; summed that way (``n > 1`` pieces once, then times ``n``)
    a float sum of non-negative terms is within ``2 k u`` relative of the layer-by-layer sum
    (``k`` layers, ``u = 2**-53``; Higham 2002, *Accuracy and Stability of Numerical
    Algorithms*, sec. 4.2): 2.6e-13 for a 1,158-layer GPT-3, inside the 1e-12 the speed work
    promises (docs/design.md, "Identical blocks cost once").
    """
    if isinstance(layers, StackedLayers):
        return layers.pieces()
    return [(tuple(layers), 1)]


def distinct_layers(layers: Sequence[LayerCost]) -> list[LayerCost]:
    """The layers of :func:`layer_runs`' pieces, each piece once, in order: every layer that is
    not a copy, and one block of the copies (equal to every copy but for ``name`` and
    ``block``), for a reader that looks for a layer by its cost fields."""
    return [la for block, _ in layer_runs(layers) for la in block]


def runs_sum(layers: Sequence[LayerCost], value: Callable[[LayerCost], float]) -> float:
    """``sum(value(la) for la in layers)``, a piece of ``n`` copies (:func:`layer_runs`) summed
    once and counted ``n`` times (``value`` must read fields other than ``name`` and ``block``);
    single pieces are added layer by layer in order, so a plain tuple gives the plain sum."""
    return sum_pieces(layer_runs(layers), value)


def sum_pieces(pieces: Iterable[tuple[Sequence[T], int]], value: Callable[[T], float]) -> float:
    """``sum`` of ``value`` over ``(items, n)`` pieces, ``n`` copies of ``items`` each: a
    single piece (``n == 1``) added item by item into the total in order, a piece of ``n > 1``
    copies summed once and added as ``n x`` its sum (:func:`runs_sum`; a segment's
    tensor-parallel collectives, :func:`perfmodel.parallel.lowering.build_chunk`)."""
    total = 0.0
    for items, n in pieces:
        if n == 1:
            for x in items:
                total += value(x)
        else:
            part = 0.0
            for x in items:
                part += value(x)
            total += n * part
    return total


def runs_isum(layers: Sequence[LayerCost], value: Callable[[LayerCost], int]) -> int:
    """:func:`runs_sum` of integers (exact)."""
    return sum(n * sum(value(la) for la in block) for block, n in layer_runs(layers))


def whole_copies(
    layers: Sequence[LayerCost],
) -> tuple[int, tuple[LayerCost, ...], range] | None:
    """Where the whole copies of a stack's block lie in ``layers``, without making them:
    ``(start, block, blocks)``: from position ``start`` on, ``len(blocks)`` copies of
    ``block``'s layers back to back (each equal to ``block`` in every field but ``name`` and
    ``block``), copy ``j`` with block index ``blocks[j]``
    (:meth:`StackedLayers.copy_blocks`). ``None`` for a plain sequence or a slice without a
    whole copy."""
    if not isinstance(layers, StackedLayers):
        return None
    blocks = layers.copy_blocks()
    if not blocks:
        return None
    s = layers._s
    start = len(s.head) + (blocks.start - s.block0) * len(s.template) - layers._lo
    return start, s.template, blocks


def split_at_copies(
    layers: Sequence[LayerCost],
) -> tuple[tuple[LayerCost, ...], tuple[LayerCost, ...], range, tuple[LayerCost, ...]]:
    """``(before, block, blocks, after)``: ``layers`` is ``before``, then ``len(blocks)``
    copies of ``block`` (:func:`whole_copies`), then ``after``; without whole copies
    ``(tuple(layers), (), range(0), ())``. Only the layers outside the copies are read."""
    wc = whole_copies(layers)
    if wc is None:
        return tuple(layers), (), range(0), ()
    start, block, blocks = wc
    return tuple(layers[:start]), block, blocks, tuple(layers[start + len(blocks) * len(block) :])


@dataclass(frozen=True)
class Workload:
    """A model at a given micro-batch size, precision and tensor-parallel degree.

    Attributes
    ----------
    batch_size
        Samples per micro-batch on one (data-parallel) rank.
    sample_unit
        What a sample is (``"images"``, ``"sequences"``); ``tokens_per_sample`` gives tokens.
    total_params
        Parameters of the whole model (all tensor-parallel ranks), for reports and DP traffic.
    model_args
        The arguments the zoo builder was called with (for reports and rebuilding).
    buffers
        Non-trainable numbers kept with the weights on one rank (batch-norm running statistics;
        Keras counts them as non-trainable parameters). Added after the original fields.
    layers
        The layers in order: a tuple, or (the zoo's transformer stacks) a
        :class:`StackedLayers`, which reads as that tuple and keeps its copies of a block as
        the block and a count (:func:`layer_runs`).
    """

    name: str
    layers: tuple[LayerCost, ...] | StackedLayers
    batch_size: int
    precision: Precision
    total_params: int
    sample_unit: str = "samples"
    tokens_per_sample: int = 1
    tp: int = 1
    sequence_parallel: bool = False
    model_args: dict[str, object] = field(default_factory=dict)
    buffers: int = 0
    total_active_params: int | None = None
    """Parameters of the whole model one token uses (mixture of experts: the ``top_k`` routed
    experts of each MoE layer, plus every dense layer); ``None``: ``total_params`` (dense)."""

    @property
    def active_params_total(self) -> int:
        """Whole-model parameters one token uses (``total_params`` for a dense model)."""
        return self.total_params if self.total_active_params is None else self.total_active_params

    @property
    def is_moe(self) -> bool:
        """The model has routed-expert layers."""
        return any(layer.experts for block, _ in layer_runs(self.layers) for layer in block)

    @property
    def all_experts_flop(self) -> float:
        """Forward + backward FLOP of one micro-batch on one rank if every token visited every
        expert (the dense equivalent of the total parameters): routed-expert layers scaled by
        ``experts / top_k``. Equals :attr:`total_flop` for a dense model."""
        return runs_sum(
            self.layers,
            lambda layer: (
                layer.total_flop
                * (
                    layer.experts / layer.top_k
                    if layer.experts and layer.expert_role is ExpertRole.EXPERT
                    else 1.0
                )
            ),
        )

    @property
    def params(self) -> int:
        """Parameters held by one rank (after tensor-parallel sharding)."""
        return runs_isum(self.layers, attrgetter("params"))

    @property
    def active_params(self) -> int:
        """Parameters of one rank that one token uses (:attr:`LayerCost.active_params`)."""
        return runs_isum(self.layers, attrgetter("active_params"))

    @property
    def fwd_flop(self) -> float:
        return runs_sum(self.layers, attrgetter("fwd_flop"))

    @property
    def total_flop(self) -> float:
        """Forward + backward FLOP of one micro-batch on one rank (no recomputation)."""
        return runs_sum(self.layers, attrgetter("total_flop"))
