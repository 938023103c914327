"""Layer primitives: the arithmetic that turns one layer's shape into a :class:`LayerCost`.

Internal to the zoo builders. A :class:`Net` accumulates layers in order while the builder walks
the network; the result is frozen into a :class:`~perfmodel.workload.layers.Workload`.

Conventions (used by every primitive, documented in ``docs/workload.md``):

* FLOP: one fused multiply-add = 2 FLOP. A GEMM ``(m x k) @ (k x n)`` costs ``2 m n k`` forward;
  the input gradient (dgrad) and the weight gradient (wgrad) cost the same each (Narayanan et al.
  SC21, eq. 1: backward = 2 x forward). The network's first layer has no dgrad (the input image or
  token ids need no gradient).
* Bytes: device-memory traffic, ``fwd_bytes`` = inputs read + weights read + outputs written;
  ``bwd_bytes`` = dgrad and wgrad traffic. Elements of activations take
  ``Precision.activation_bytes``, working weights ``Precision.param_bytes``.
* Saved activations: each layer counts the tensors *it* keeps for backward. A tensor shared by two
  consumers is counted once, at the consumer that saves it (PyTorch's in-place ReLU keeps its output,
  which the next convolution keeps anyway). Dropout keeps a 1-byte mask per element. The
  transformer accounting reproduces Korthikanti et al. 2022, eq. 1-2 exactly (see
  ``tests/workload/test_memory.py``).
* Kernels: ``kernels`` (forward) and ``bwd_kernels`` (backward) are the per-layer kernel counts
  of PyTorch 2.11 eager (cuDNN 9.19, cuBLAS) in the Kineto traces of the H100 training steps
  (``calibration/h100-sxm5-80gb/trace-*.json.gz``, per-layer ``events`` of the ``step_layer``
  measurements; the median over the layers of a kind in the TF32 ResNet-50 and BF16 GPT-2 steps).
  The autocast weight casts of mixed precision (one forward, one backward kernel per conv/linear)
  are added by the compute model, not here. They feed the launch overhead and the host-dispatch
  floor (``ComputeParams.host_dispatch_s``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from perfmodel.dtypes import Precision
from perfmodel.errors import InfeasiblePlanError
from perfmodel.ops import CollectiveOp
from perfmodel.workload._net_attention import AttentionLayers
from perfmodel.workload._net_conv import ConvLayers
from perfmodel.workload._net_shapes import Shape, numel
from perfmodel.workload.kernels import (
    DEFAULT_KERNELS,
    Fp8Recipe,
    KernelRecipe,
    OpKernels,
    fp8_linear,
    op_kernels,
)
from perfmodel.workload.layers import (
    CommPoint,
    ExpertRole,
    GemmShape,
    KernelClass,
    LayerCost,
    LayerKind,
    StackedLayers,
    layer_tensors,
)

#: FLOP per element of common element-wise kernels (forward, backward). Counted as arithmetic
#: operations of the textbook formula; they only matter for the roofline's compute side.
_ELEMENTWISE_FLOP = {
    "relu": (1.0, 1.0),
    "relu6": (2.0, 2.0),
    "relu2": (2.0, 3.0),  # relu(x)^2; backward 2 relu(x) dy
    "gelu": (8.0, 16.0),  # tanh approximation: ~8 ops forward
    "silu": (4.0, 8.0),
    "swiglu": (5.0, 10.0),  # silu(a) * b
    "sigmoid": (4.0, 3.0),
    "tanh": (4.0, 3.0),
    "add": (1.0, 0.0),
    "dropout": (2.0, 1.0),
    "scale": (1.0, 1.0),
    "copy": (0.0, 0.0),  # gather/scatter of rows (mixture-of-experts token permutation)
}


@dataclass(frozen=True)
class RankLayout:
    """How one rank's layers are cut from the model: the parallel degrees that change what a
    rank builds (data and pipeline parallelism take whole layers). :class:`Net` builds with one;
    :func:`perfmodel.workload.build_model` makes it from its keyword arguments.

    Attributes
    ----------
    tp
        Tensor-parallel degree (transformers: Megatron sharding; CNNs: fully connected layers).
    sequence_parallel
        Megatron sequence parallelism (Korthikanti et al. 2022): norms and dropouts are sharded
        along the sequence and the tensor-parallel all-reduces become all-gather/reduce-scatter.
    ep, etp
        Expert parallelism and expert tensor parallelism (mixture-of-experts layers shard their
        routed experts over ``ep`` ranks and each expert's GEMMs over ``etp``; 0 = ``tp``).
    cp
        Context parallelism: this rank holds ``1/cp`` of every sequence (:meth:`Net.local_seq`)
        and its fused attention exchanges keys and values with the ``cp`` group
        (:meth:`Net.attention`).
    """

    tp: int = 1
    sequence_parallel: bool = False
    ep: int = 1
    cp: int = 1
    etp: int = 0


#: The unsharded model: every degree 1.
WHOLE_RANK = RankLayout()


def _tp_ops(la: LayerCost) -> set[CollectiveOp]:
    """The ``tp`` collectives of ``la``'s forward: sequence parallelism's all-gather of its
    input (``ALLGATHER``) and reduce-scatter of its output (``REDUCESCATTER``)."""
    return {c.op for c in la.fwd_comm if c.group == "tp"}


class Net(ConvLayers, AttentionLayers):
    """Accumulates the layers of one model for one micro-batch on one rank.

    Parameters
    ----------
    batch_size
        Micro-batch size (samples).
    precision
        Training precision recipe (decides bytes per element).
    layout
        The rank's tensor, sequence, expert and context parallelism (:class:`RankLayout`),
        kept as the attributes ``tp``, ``sp`` (sequence parallelism with ``tp > 1``), ``ep``,
        ``cp`` and ``etp`` (``tp`` where the layout's is 0).
    kernels
        The stack's kernels (:class:`~perfmodel.workload.kernels.KernelRecipe`): the fusion mode
        the transformer builders decompose a block with, the FP8 recipe whose cast kernels
        follow every FP8 linear layer of a block, and FSDP2's copies around each unit's
        collectives (both added by :meth:`all_layers`).
    """

    def __init__(
        self,
        batch_size: int,
        precision: Precision,
        layout: RankLayout = WHOLE_RANK,
        *,
        kernels: KernelRecipe = DEFAULT_KERNELS,
    ) -> None:
        self.batch_size = batch_size
        self.kernels = kernels
        self.precision = precision
        self.tp = tp = layout.tp
        self.ep = layout.ep
        self.cp = layout.cp
        self.etp = layout.etp or tp
        self.sp = layout.sequence_parallel and tp > 1
        self.act_bytes = precision.activation_bytes
        self.param_bytes = precision.param_bytes
        self.layers: list[LayerCost] = []
        self.block: int | None = None
        self.buffers = 0
        self._first_weight_layer = True
        #: A stack of copies of a block left out of :attr:`layers` (:meth:`repeat_block`):
        #: ``(position in layers, template start, copies, first name index, block0)``.
        self.repeat: tuple[int, int, int, int, int] | None = None

    def repeat_block(self, start: int, copies: int, first: int) -> None:
        """Let ``copies`` copies of the block ``layers[start:]`` (the last one built) follow
        it, named ``layer{first + j}.`` + its names after their first ``.``-separated part,
        block indices after its own; they are kept as the block and a count
        (:class:`~perfmodel.workload.layers.StackedLayers`, :meth:`all_layers`), not appended to
        :attr:`layers`: layers built after this call follow the copies. Once per network."""
        if self.repeat is not None:
            raise ValueError("Net.repeat_block: one stack per network")
        block = self.layers[start].block
        assert block is not None
        self.repeat = (len(self.layers), start, copies, first, block + 1)
        if copies:
            self.block = block + copies

    def copy_block(self, start: int, buffers: int, name: str) -> None:
        """Append a copy of the last block, ``layers[start:]`` (built from ``buffers`` buffer
        bytes on), as the next block called ``name``: each layer
        :meth:`~perfmodel.workload.layers.LayerCost.changed` (its name's first part replaced,
        the next block index), its buffers counted again. Not
        :meth:`~perfmodel.workload.layers.LayerCost.relabelled`: the lowering treats such a
        copy as its source's (a shared cost source), which moved sums in their last bits;
        these layers stand alone, as the built ones did."""
        block = self.new_block()
        layers = self.layers[start:]
        strip = len(layers[0].name.split(".", 1)[0])
        self.layers += [la.changed(name=name + la.name[strip:], block=block) for la in layers]
        self.buffers += self.buffers - buffers

    def all_layers(self) -> tuple[LayerCost, ...] | StackedLayers:
        """Every layer in order: :attr:`layers` with the copies of :meth:`repeat_block` in
        place (a :class:`~perfmodel.workload.layers.StackedLayers` then, else a tuple), and the
        kernels of :attr:`kernels` that follow from the layers (:meth:`_recipe_kernels`: FP8
        casts, FSDP copies) inserted."""
        if self.repeat is None or self.repeat[2] == 0:
            return tuple(self._recipe_kernels(self.layers, root=True))
        pos, start, copies, first, block0 = self.repeat
        template = self.layers[start:pos]
        strip = len(template[0].name.split(".", 1)[0]) + 1
        return StackedLayers.of(
            self._recipe_kernels(self.layers[:pos], root=True),
            self._recipe_kernels(template),
            copies,
            self._recipe_kernels(self.layers[pos:]),
            first=first,
            strip=strip,
            block0=block0,
        )

    def _recipe_kernels(
        self, layers: Sequence[LayerCost], *, root: bool = False
    ) -> list[LayerCost]:
        """``layers`` (whole blocks) with the kernels the stack adds around them: an FP8 cast
        layer before every FP8 linear layer (:meth:`_fp8_cast`; its tensor-parallel all-gather
        in FP8, :meth:`_fp8_gather`), and an FSDP copy layer (:meth:`_fsdp_copy`) first in each
        block (one FSDP unit each: its all-gather's copy-out precedes its forward), plus one
        first of all for the parameters outside blocks (the root unit) when ``root``. A block's
        last layer stays its output (the memory model reads block boundaries off it)."""
        k = self.kernels
        if k.fp8 is None and not k.fsdp_copies:
            return list(layers)
        out: list[LayerCost] = []
        unit_params: dict[int, int] = {}
        unit_tensors: dict[int, int] = {}  # parameter tensors (FSDP2's accumulation launches)
        held = k.fsdp_step_share > 0.0  # tensors counted only where _fsdp_copy reads them
        if k.fsdp_copies:
            for i, la in enumerate(layers):
                if la.block is not None:
                    unit_params[la.block] = unit_params.get(la.block, 0) + la.params
                    if held:
                        n = len(layer_tensors(layers, (i,)))
                        unit_tensors[la.block] = unit_tensors.get(la.block, 0) + n
            if root:
                outside = [i for i, la in enumerate(self.layers) if la.block is None]
                rest = sum(self.layers[i].params for i in outside)
                if rest:
                    n = len(layer_tensors(self.layers, outside)) if held else 0
                    out.append(self._fsdp_copy("root.fsdp_copy", rest, None, n))
        prev: int | None = None
        for la in layers:
            if k.fsdp_copies and la.block is not None and la.block != prev:
                b = la.block
                out.append(
                    self._fsdp_copy(
                        f"layer{b}.fsdp_copy", unit_params[b], b, unit_tensors.get(b, 0)
                    )
                )
            prev = la.block
            if k.fp8 is not None and fp8_linear(la):
                norm_fed = (
                    k.fp8.fuses_norm_quantize and bool(out) and out[-1].kind is LayerKind.NORM
                )
                if norm_fed:
                    out[-1] = self._fp8_norm(out[-1], la)
                out.append(self._fp8_cast(la, norm_fed=norm_fed))
                la = self._fp8_gather(la)
            out.append(la)
        return out

    def _fp8_norm(self, norm: LayerCost, la: LayerCost) -> LayerCost:
        """``norm``, which feeds FP8 linear ``la`` and quantises its input (Transformer Engine's
        ``LayerNormLinear``, :attr:`~perfmodel.workload.kernels.Fp8Recipe.fuses_norm_quantize`),
        with its output written at :meth:`~perfmodel.workload.kernels.Fp8Recipe.norm_output_bytes`
        per element instead of ``act_bytes``. Its output has ``m k / seq_shard`` elements when
        sequence parallelism all-gathers ``la``'s input, else ``m k``."""
        assert self.kernels.fp8 is not None and la.gemm is not None
        g = la.gemm
        gathered = CollectiveOp.ALLGATHER in _tp_ops(la)
        el = float(g.m * g.k * g.batch) / (self.seq_shard if gathered else 1)
        saved = el * (self.act_bytes - self.kernels.fp8.norm_output_bytes(self.act_bytes))
        return norm if saved <= 0 else norm.changed(fwd_bytes=norm.fwd_bytes - saved)

    def _fp8_cast(self, la: LayerCost, *, norm_fed: bool = False) -> LayerCost:
        """The quantisation kernels of FP8 linear layer ``la`` under :attr:`kernels`' recipe
        (:class:`~perfmodel.workload.kernels.Fp8CastBytes`): forward casts of its input and
        weight, backward casts of the output gradient (and the re-quantised input and weight
        where the recipe needs them). The weight cast of a recipe that caches it
        (:attr:`~perfmodel.workload.kernels.Fp8Recipe.caches_weights`) is charged at
        ``weight_cast_share`` per micro-batch, bytes and launches; under FSDP with FP8
        all-gathers the weight is cast on its shard before the gather (``1/dp`` of it: left
        out). Launches: :meth:`~perfmodel.workload.kernels.Fp8Recipe.cast_launches` (a routed
        experts' grouped linear, ``gemm.batch`` local experts, quantises its input and output
        gradient per expert; MXFP8 swizzles the block scales of the weight and of any operand
        that sequence parallelism all-gathers, a ``tp`` all-gather or reduce-scatter in
        ``la.fwd_comm``, before each GEMM, 2 B per 32 elements each:
        :attr:`~perfmodel.workload.kernels.Fp8Recipe.scale_swizzle_bytes`). A grouped cast
        layer is marked an expert layer. ``norm_fed``: ``la``'s input comes from a norm that
        quantises it (:meth:`~perfmodel.workload.kernels.Fp8Recipe.norm_fed_input` replaces
        the input cast's launches and bytes)."""
        k = self.kernels
        assert k.fp8 is not None and la.gemm is not None
        cb = k.fp8.cast_bytes
        g = la.gemm
        grouped = la.expert_role is ExpertRole.EXPERT and g.batch > 1
        x_el = float(g.m * g.k * g.batch)
        dy_el = float(g.m * g.n * g.batch)
        w_el = float(g.k * g.n * g.batch)
        share = k.weight_cast_share if k.fp8.caches_weights else 1.0
        if k.fsdp_copies and k.fp8.fsdp_fp8_all_gather:
            share = 0.0
        dgrad = la.bwd_input_flop > 0
        tp_ops = _tp_ops(la)
        gathered = CollectiveOp.ALLGATHER in tp_ops
        scattered = CollectiveOp.REDUCESCATTER in tp_ops
        kernels, bwd_kernels = k.fp8.cast_launches(
            g.batch if grouped else 1,
            share,
            dgrad=dgrad,
            input_gathered=gathered,
            grad_gathered=scattered,
            norm_fed=norm_fed,
        )
        x_fwd, x_bwd = cb.x_fwd, cb.x_bwd
        if norm_fed:
            x_fwd, x_bwd = k.fp8.norm_fed_input()[2:]
        sw = k.fp8.scale_swizzle_bytes
        sw_fwd = sw * (w_el + (x_el if gathered else 0.0))
        sw_bwd = sw * (
            (w_el if dgrad else 0.0)
            + (x_el if gathered else 0.0)
            + (2 * dy_el if scattered else 0.0)
        )
        return LayerCost.built(
            name=f"{la.name}.fp8_cast",
            kind=LayerKind.ELEMENTWISE,
            fwd_flop=2.0 * x_el,
            bwd_input_flop=2.0 * dy_el,
            bwd_weight_flop=0.0,
            params=0,
            fwd_bytes=x_fwd * x_el + cb.w_fwd * w_el * share + sw_fwd,
            bwd_bytes=cb.dy_bwd * dy_el
            + x_bwd * x_el
            + (cb.w_bwd * w_el if dgrad else 0.0)
            + sw_bwd,
            activation_bytes=0.0,
            output_shape=la.output_shape,
            block=la.block,
            kernels=kernels,
            bwd_kernels=bwd_kernels,
            kernel_class=KernelClass.FP8_CAST,
            expert_role=ExpertRole.EXPERT if grouped else None,
        )

    def _fp8_gather(self, la: LayerCost) -> LayerCost:
        """``la`` with its sequence-parallel input all-gather in FP8 (1 byte per element), as
        Transformer Engine's FP8 ``LayerNormLinear``/``Linear`` (the cast precedes the
        all-gather) and torchtitan's ``Float8ColwiseParallel`` run it; torchao's row-wise and
        MXFP8 recipes gather the 16-bit input. Other collectives are unchanged."""
        fp8 = self.kernels.fp8
        if fp8 in (Fp8Recipe.TORCHAO_ROWWISE, Fp8Recipe.MXFP8) or not la.fwd_comm:
            return la
        comms = tuple(
            replace(c, message_bytes=c.message_bytes / self.act_bytes)
            if c.op is CollectiveOp.ALLGATHER and c.group == "tp"
            else c
            for c in la.fwd_comm
        )
        return la if comms == la.fwd_comm else la.changed(fwd_comm=comms)

    def _fsdp_copy(self, name: str, params: int, block: int | None, tensors: int) -> LayerCost:
        """FSDP2's copies for one unit of ``params`` parameters in ``tensors`` tensors per
        micro-batch (:attr:`~perfmodel.workload.kernels.KernelRecipe.fsdp_copies`): forward,
        the all-gather copy-out (read and write ``p`` bytes per parameter, ``p`` the 16-bit
        ``param_bytes``: FP8-gathered weights are counted at it too, not at 1 B); backward,
        the copy-out of the backward all-gather and the reduce-scatter copy-in (read the 16-bit
        gradient, write ``r = fsdp_reduce_bytes``). A unit held gathered for the step
        (``fsdp_step_share`` ``s > 0``): ``s`` of the forward copy-out and of the copy-in, no
        backward copy-out, and the unsharded gradient's accumulation, ``(p + 2 r)`` bytes per
        parameter in every backward (the first micro-batch's is a copy, ``p + r``, or none
        without a ``reduce_dtype``: within ``1/m`` of the copy traffic), one launch per
        parameter tensor (``tensors``, :func:`~perfmodel.workload.layers.layer_tensors`: a
        fused QKV projection counts one, and so do a LayerNorm's weight and bias;
        ``FSDPParamGroup.post_backward`` loops over the unit's parameters, autograd's
        ``AccumulateGrad`` adds each tensor's), plus the copy-in's launch ``s`` rounded half
        up; the forward's copy-out counts one launch per micro-batch (the
        compute model's and the host lead's floor of one forward kernel per layer: over by
        ``1 - s`` launch)."""
        k = self.kernels
        p = float(self.param_bytes)
        r = float(k.fsdp_reduce_bytes)
        gathered = 2.0 * p * params
        reduce_in = (p + r) * params
        s = k.fsdp_step_share
        if s > 0.0:
            once = math.floor(s + 0.5)  # launches of a once-a-step copy per micro-batch
            fwd, bwd = s * gathered, s * reduce_in + (p + 2.0 * r) * params
            bk = tensors + once
        else:
            fwd, bwd, bk = gathered, gathered + reduce_in, 2
        return LayerCost.built(
            name=name,
            params=0,  # copies of the unit's parameters, counted by its own layers
            kind=LayerKind.OTHER,
            fwd_flop=0.0,
            bwd_input_flop=0.0,
            bwd_weight_flop=0.0,
            fwd_bytes=fwd,
            bwd_bytes=bwd,
            activation_bytes=0.0,
            output_shape=(1,),  # copies of parameters: no activation tensor
            block=block,
            kernels=1,
            bwd_kernels=bk,
            kernel_class=KernelClass.FSDP_COPY,
        )

    @property
    def seq_shard(self) -> int:
        """Ranks the sequence is split over for norms and dropouts: ``tp`` with sequence
        parallelism, else 1."""
        return self.tp if self.sp else 1

    def local_seq(self, seq_len: int) -> int:
        """Sequence positions this rank holds: ``seq_len / cp``.

        Causal load balancing (Megatron-Core and torchtitan context parallelism) cuts the
        sequence into ``2 cp`` chunks and gives rank ``i`` chunks ``i`` and ``2 cp - 1 - i``, so
        ``seq_len`` must divide into ``2 cp`` equal chunks.

        Raises
        ------
        InfeasiblePlanError
            When ``2 cp`` does not divide ``seq_len`` (naming the ``cp`` values that do).
        """
        if self.cp == 1:
            return seq_len
        if seq_len % (2 * self.cp):
            fits = [c for c in range(1, min(seq_len, 1024) + 1) if seq_len % (2 * c) == 0]
            raise InfeasiblePlanError(
                f"cp={self.cp} must divide the sequence ({seq_len}) in 2 x cp = {2 * self.cp} "
                f"equal chunks (causal load balancing); cp values that do: {fits[:16]}",
                value=self.cp,
                where="cp",
            )
        return seq_len // self.cp

    # -- helpers ---------------------------------------------------------------------------
    def _add(self, layer: LayerCost) -> None:
        self.layers.append(layer)

    def _kernel(
        self,
        name: str,
        kind: LayerKind,
        *,
        fwd_flop: float,
        bwd_flop: float,
        fwd_bytes: float,
        bwd_bytes: float,
        output_shape: Shape,
        activation_bytes: float = 0.0,
        **extra: object,
    ) -> None:
        """Append a layer without parameters (no weight gradient) to the current block."""
        self._add(
            LayerCost.built(
                name=name,
                kind=kind,
                fwd_flop=fwd_flop,
                bwd_input_flop=bwd_flop,
                bwd_weight_flop=0.0,
                params=0,
                fwd_bytes=fwd_bytes,
                bwd_bytes=bwd_bytes,
                activation_bytes=activation_bytes,
                output_shape=output_shape,
                block=self.block,
                **extra,  # type: ignore[arg-type]
            )
        )

    def op_layer(
        self,
        name: str,
        ops: OpKernels,
        elements: float,
        *,
        output_shape: Shape,
        flop: tuple[float, float] = (0.0, 0.0),
        saved_bytes: float = 0.0,
        kind: LayerKind = LayerKind.ELEMENTWISE,
        params: int = 0,
        extra_bwd_bytes: float = 0.0,
        extra_bwd_kernels: int = 0,
        tensors: int = 1,
        fwd_comm: tuple[CommPoint, ...] = (),
    ) -> None:
        """A memory-bound operator of ``elements`` elements as the kernels of ``ops``
        (:data:`perfmodel.workload.kernels.OPS`): bytes ``elements x`` the kernels' bytes per
        element at the activation width, one launch per kernel, the class ``ops.klass``.
        ``flop`` are the forward and backward FLOP (the roofline's compute side only);
        ``params`` stay with the layer (a norm's weight: read in forward, its FP32 gradient
        written in backward). ``tensors``: the operator runs on that many tensors whose
        elements ``elements`` counts together (RoPE on the queries and the keys): as many
        launches of each kernel. ``fwd_comm``: collectives of the forward (the vocabulary-parallel
        loss's all-reduces)."""
        a = self.act_bytes
        p = self.param_bytes
        self._add(
            LayerCost.built(
                name=name,
                kind=kind,
                fwd_flop=flop[0],
                bwd_input_flop=flop[1],
                bwd_weight_flop=0.0,
                params=params,
                fwd_bytes=elements * ops.fwd_bytes(a) + params * p,
                bwd_bytes=elements * ops.bwd_bytes(a) + extra_bwd_bytes + params * (p + 4),
                activation_bytes=saved_bytes,
                output_shape=tuple(output_shape),
                block=self.block,
                kernels=max(tensors * ops.fwd_kernels(a), 1),
                bwd_kernels=tensors * ops.bwd_kernels(a) + extra_bwd_kernels,
                kernel_class=ops.klass,
                fwd_comm=fwd_comm,
            )
        )

    def _gemm_layer(
        self,
        name: str,
        kind: LayerKind,
        gemm: GemmShape,
        *,
        params: int,
        x_el: float,
        y_el: float,
        bias: bool,
        dgrad: bool,
        activation_bytes: float,
        output_shape: Shape,
        **extra: object,
    ) -> None:
        """Append a layer with weights computed as one GEMM (convolution, linear).

        Forward ``gemm.flop`` (+ ``y_el`` for the bias of a linear layer, which cuBLAS fuses:
        ``addmm``; convolutions pass ``bias=False`` and add a bias layer); backward dgrad ``gemm.flop`` (none for
        the network's first weight layer) and wgrad ``gemm.flop`` (+ bias). Bytes: forward reads
        ``x`` and the weights and writes ``y``; backward reads ``dy`` twice and ``x``, writes
        ``dx`` (with dgrad), reads the weights and writes their gradient.
        """
        a, p = self.act_bytes, self.param_bytes
        bias_flop = y_el if bias else 0
        self._add(
            LayerCost.built(
                name=name,
                kind=kind,
                fwd_flop=gemm.flop + bias_flop,
                bwd_input_flop=gemm.flop if dgrad else 0.0,
                bwd_weight_flop=gemm.flop + bias_flop,
                params=params,
                fwd_bytes=(x_el + y_el) * a + params * p,
                bwd_bytes=(2 * y_el + x_el + (x_el if dgrad else 0)) * a + 2 * params * p,
                activation_bytes=activation_bytes,
                output_shape=output_shape,
                gemm=gemm,
                block=self.block,
                **extra,  # type: ignore[arg-type]
            )
        )

    def unsave(self, index: int = -1) -> None:
        """The layer at ``index`` keeps a tensor that another layer already counts (two
        consumers of one input): its ``activation_bytes`` become 0, counted once."""
        self.layers[index] = self.layers[index].changed(activation_bytes=0.0)

    @property
    def after_weights(self) -> bool:
        """A weight layer came before (:meth:`_needs_dgrad`: the next one computes its input
        gradient); a transformer layer built now is then the one built after it
        (:func:`perfmodel.workload.zoo.transformer._stack`)."""
        return not self._first_weight_layer

    def _needs_dgrad(self) -> bool:
        first = self._first_weight_layer
        self._first_weight_layer = False
        return not first

    def new_block(self) -> int:
        """Start the next repeated block (pipeline stages cut between blocks)."""
        self.block = 0 if self.block is None else self.block + 1
        return self.block

    def end_blocks(self) -> None:
        """Layers after this call belong to no block (head, loss)."""
        self.block = None

    def act(self, name: str, x: Shape, fn: str = "relu", *, saves: bool = False) -> Shape:
        """Element-wise activation ``fn``; ``saves`` counts its input/output as kept for backward
        (``False`` when the consumer keeps the same tensor, e.g. in-place ReLU before a conv)."""
        kept = numel(x) * self.act_bytes if saves else 0.0
        return self.elementwise(name, x, fn, saved_bytes=kept, kind=LayerKind.ACTIVATION)

    def add(self, name: str, x: Shape) -> Shape:
        """Residual addition of two tensors of shape ``x``.

        Backward passes the gradient to both inputs, and the block input that fed both the
        branch and the skip receives two gradients, which autograd sums (PyTorch
        ``InputBuffer::accumulate``): one add kernel, ``3 el`` elements moved.
        """
        el = numel(x)
        a = self.act_bytes
        self._kernel(
            name,
            LayerKind.ELEMENTWISE,
            fwd_flop=float(el),
            bwd_flop=float(el),
            fwd_bytes=3 * el * a,
            bwd_bytes=3 * el * a,
            output_shape=tuple(x),
        )
        return tuple(x)

    def dropout(self, name: str, x: Shape, *, shard: int = 1, recomputable: bool = False) -> Shape:
        """Dropout: keeps a 1-byte mask per element (PyTorch bool mask). ``shard`` divides the
        elements held by this rank (sequence parallelism); ``recomputable``: selective
        recomputation may drop the mask (attention dropout)."""
        el = numel(x) / shard
        f, b = _ELEMENTWISE_FLOP["dropout"]
        a = self.act_bytes
        self._kernel(
            name,
            LayerKind.ELEMENTWISE,
            fwd_flop=f * el,
            bwd_flop=b * el,
            fwd_bytes=el * (2 * a + 1),
            bwd_bytes=el * (2 * a + 1),
            activation_bytes=el * 1.0,
            output_shape=tuple(x),
            recomputable_bytes=el * 1.0 if recomputable else 0.0,
        )
        return tuple(x)

    def linear(
        self,
        name: str,
        x: Shape,
        out_features: int,
        *,
        bias: bool = True,
        parallel: str | None = None,
        saves_input: bool = True,
        fwd_comm: tuple[CommPoint, ...] = (),
        bwd_comm: tuple[CommPoint, ...] = (),
        kind: LayerKind = LayerKind.LINEAR,
        input_shard: int = 1,
        casts_input: bool = False,
    ) -> Shape:
        """Fully connected layer on ``(..., in_features)``; returns the local output shape.

        ``parallel``: ``None`` (replicated), ``"column"`` (output features split over ``tp``,
        bias split) or ``"row"`` (input features split over ``tp``; the bias is added after the
        reduction and kept whole on every rank), as in Megatron-LM (Shoeybi et al. 2019).
        GEMM ``m = prod(leading dims)``, ``n = out/tp`` or ``out``, ``k = in`` or ``in/tp``.
        ``input_shard`` divides the saved input (sequence parallelism keeps the input of a
        column-parallel layer sharded and all-gathers it again in backward).
        """
        *lead, k_full = x
        m = numel(lead)
        tp = self.tp
        if parallel == "column":
            k, nloc, nbias = k_full, out_features // tp, out_features // tp
        elif parallel == "row":
            k, nloc, nbias = k_full // tp, out_features, out_features
        else:
            k, nloc, nbias = k_full, out_features, out_features
        gemm = GemmShape(m=m, n=nloc, k=k)
        params = k * nloc + (nbias if bias else 0)
        dgrad = self._needs_dgrad()
        x_el, y_el = m * k, m * nloc
        self._gemm_layer(
            name,
            kind,
            gemm,
            params=params,
            x_el=x_el,
            y_el=y_el,
            bias=bias,
            dgrad=dgrad,
            activation_bytes=(x_el * self.act_bytes / input_shard) if saves_input else 0.0,
            output_shape=(*lead, nloc),
            fwd_comm=fwd_comm,
            bwd_comm=bwd_comm,
            # trace: 1 forward (addmm fuses the bias); backward dgrad + wgrad + bias sum
            bwd_kernels=(2 if dgrad else 1) + (1 if bias else 0),
            casts_input=casts_input,
        )
        return (*lead, nloc)

    def matmul(
        self,
        name: str,
        batch: int,
        m: int,
        n: int,
        k: int,
        *,
        saved_bytes: float,
        recomputable_bytes: float = 0.0,
    ) -> Shape:
        """Activation x activation batched GEMM (unfused attention): both operands need
        gradients, so dgrad costs twice the forward GEMM and there is no wgrad."""
        gemm = GemmShape(m=m, n=n, k=k, batch=batch)
        a = self.act_bytes
        io = batch * (m * k + k * n + m * n)
        self._kernel(
            name,
            LayerKind.MATMUL,
            fwd_flop=gemm.flop,
            bwd_flop=2 * gemm.flop,
            fwd_bytes=io * a,
            bwd_bytes=2 * io * a,
            activation_bytes=saved_bytes,
            output_shape=(batch, m, n),
            gemm=gemm,
            recomputable_bytes=recomputable_bytes,
            bwd_kernels=2,  # one batched GEMM per operand gradient
        )
        return (batch, m, n)

    def softmax(
        self, name: str, x: Shape, *, saves: bool = True, recomputable: bool = False
    ) -> Shape:
        """Softmax over the last axis; saves its output (``recomputable``: selective
        recomputation may drop it)."""
        el = numel(x)
        a = self.act_bytes
        self._kernel(
            name,
            LayerKind.SOFTMAX,
            fwd_flop=5.0 * el,
            bwd_flop=4.0 * el,
            fwd_bytes=2 * el * a,
            bwd_bytes=3 * el * a,
            activation_bytes=el * a if saves else 0.0,
            output_shape=tuple(x),
            recomputable_bytes=el * a if (saves and recomputable) else 0.0,
        )
        return tuple(x)

    def norm(
        self,
        name: str,
        x: Shape,
        *,
        params: int,
        shard: int = 1,
        rms: bool = False,
        accumulate: bool = False,
    ) -> Shape:
        """Layer norm (``2h`` parameters) or RMS norm (``h``) over the last axis; saves its input.
        ``shard`` divides the activations held by this rank (sequence parallelism).

        Bytes (PyTorch ``layer_norm`` CUDA kernels, ``aten/src/ATen/native/cuda/layer_norm_kernel.cu``):
        forward reads ``x`` and the weights, writes ``y`` and the FP32 statistics (mean and
        reciprocal standard deviation, 4 bytes per row each; RMS norm only the latter).
        Backward runs two kernels over the activations: the input gradient reads ``dy``, ``x``,
        the saved statistics and the weight and writes ``dx``; the weight gradient
        (``GammaBetaBackward``) reads ``dy`` and ``x`` again and reduces them into FP32 partial
        sums, then writes the FP32 weight gradients: ``5 el`` activation elements instead of
        the ``3 el`` of a single fused pass. Trace: 1 forward, 3 backward kernels.

        ``accumulate``: the norm's input also feeds a residual skip (pre-norm transformer), so
        autograd sums the norm's input gradient with the skip's (``InputBuffer::accumulate``,
        run as the norm's backward delivers ``dx``): ``3 el`` more elements in backward.
        Marked ``autocast_fp32`` (see :class:`LayerCost`).
        """
        el = numel(x) / shard
        a = self.act_bytes
        rows = el / max(x[-1], 1)
        stats = (1 if rms else 2) * rows * 4.0
        self._add(
            LayerCost.built(
                name=name,
                kind=LayerKind.NORM,
                fwd_flop=(4.0 if rms else 8.0) * el,
                bwd_input_flop=(8.0 if rms else 12.0) * el,
                bwd_weight_flop=2.0 * el,
                params=params,
                fwd_bytes=2 * el * a + params * self.param_bytes + stats,
                bwd_bytes=(8 if accumulate else 5) * el * a
                + stats
                + params * (self.param_bytes + 4),
                activation_bytes=el * a,
                output_shape=tuple(x),
                block=self.block,
                bwd_kernels=3,
                autocast_fp32=True,
            )
        )
        return tuple(x)

    def elementwise(
        self,
        name: str,
        x: Shape,
        fn: str,
        *,
        saved_bytes: float = 0.0,
        inputs: int = 1,
        bwd_elements: float | None = None,
        autocast_fp32: bool = False,
        kind: LayerKind | None = None,
    ) -> Shape:
        """Generic element-wise kernel of ``inputs`` input tensors with explicit saved bytes:
        ``_ELEMENTWISE_FLOP[fn]`` FLOP per element, ``inputs + 1`` tensors moved forward.

        ``bwd_elements``: elements moved by the backward per output element (default
        ``inputs + 2``); ``autocast_fp32``: see :class:`LayerCost`; ``kind``: the layer's kind,
        by default ``ELEMENTWISE`` for ``add``, ``scale`` and ``copy``, else ``ACTIVATION``.
        """
        if kind is None:
            kind = LayerKind.ELEMENTWISE if fn in ("add", "scale", "copy") else LayerKind.ACTIVATION
        el = numel(x)
        f, b = _ELEMENTWISE_FLOP[fn]
        a = self.act_bytes
        self._kernel(
            name,
            kind,
            fwd_flop=f * el,
            bwd_flop=b * el,
            fwd_bytes=(inputs + 1) * el * a,
            bwd_bytes=(inputs + 2 if bwd_elements is None else bwd_elements) * el * a,
            activation_bytes=saved_bytes,
            output_shape=tuple(x),
            autocast_fp32=autocast_fp32,
        )
        return tuple(x)

    def loss(
        self, name: str, rows: int, classes: int, *, fwd_comm: tuple[CommPoint, ...] = ()
    ) -> Shape:
        """Softmax cross-entropy over ``classes`` (local, vocab-parallel when ``tp > 1``) for
        ``rows`` predictions, computed in FP32: saves the FP32 softmax (or log-softmax),
        ``4 rows classes`` bytes.

        Kernels and bytes per logit are the stack's (:meth:`op_layer` of
        :data:`perfmodel.workload.kernels.OPS` ``"loss"``): PyTorch's ``cross_entropy`` of the
        FP32-cast logits (eager, and under torchtitan's ``torch.compile``, which leaves the loss
        eager): the cast (``a + 4``), ``log_softmax`` (8), ``nll_loss``; backward the
        zero-filled FP32 gradient (4), ``log_softmax_backward`` (12) and the cast back
        (``4 + a``): ``(12 + a)`` bytes forward and ``(20 + a)`` backward per element, as the GPT-2
        H100 trace shows (copy, softmax and ``FillFunctor<float>`` kernels; GPT-2 b8: 2.77 ms
        measured against 0.98 predicted before the FP32 gradient was counted). Megatron-Core's
        fused vocabulary-parallel cross-entropy (``te``): ``(20 + a)`` forward, ``(12 + a)``
        backward.
        """
        el = float(rows * classes)
        ops = op_kernels("loss", self.kernels.fusion)
        assert ops is not None
        self.op_layer(
            name,
            ops,
            el,
            output_shape=(1,),
            flop=(5.0 * el, 2.0 * el),
            saved_bytes=4.0 * el,
            kind=LayerKind.LOSS,
            fwd_comm=fwd_comm,
        )
        return (1,)

    def other(self, layer: LayerCost) -> None:
        """Append a hand-built layer (parameters that are not a kernel: class tokens ...)."""
        self._add(layer)

    def comm(
        self, op: CollectiveOp, elements: float, *, element_bytes: float | None = None
    ) -> CommPoint:
        """A tensor-parallel collective over ``elements`` elements of ``element_bytes`` bytes
        each (default: the activation element size)."""
        size = self.act_bytes if element_bytes is None else element_bytes
        return CommPoint(op=op, message_bytes=float(elements) * size)
