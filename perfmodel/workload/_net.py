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
from dataclasses import replace

from perfmodel.dtypes import Precision
from perfmodel.errors import ConfigError, InfeasiblePlanError
from perfmodel.ops import CollectiveOp
from perfmodel.workload.kernels import (
    DEFAULT_KERNELS,
    FP32_BYTES,
    Fp8Recipe,
    Fusion,
    KernelRecipe,
    OpKernels,
    fp8_linear,
    op_kernels,
)
from perfmodel.workload.layers import (
    CommPoint,
    GemmShape,
    KernelClass,
    LayerCost,
    LayerKind,
    StackedLayers,
)
from perfmodel.workload.window import AttentionWindow, WindowKind

Shape = tuple[int, ...]

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


def _window_gemm(window: AttentionWindow, s: int, head_dim: int, heads: int) -> GemmShape:
    """Kernel shape of a windowed attention over ``s`` queries (:meth:`Net.attention`): blocks of
    ``span`` queries against ``span`` keys (chunks) or ``2 span`` keys (a sliding window)."""
    span = window.span(s)
    keys = span if window.kind is WindowKind.CHUNKED else 2 * span
    return GemmShape(m=span, n=keys, k=head_dim, batch=heads * -(-s // span))


def numel(shape: Sequence[int]) -> int:
    """Number of elements of a tensor of ``shape``.

    >>> numel((2, 3, 4))
    24
    """
    return math.prod(int(d) for d in shape)


def conv_out(size: int, kernel: int, stride: int, pad: int, dilation: int = 1) -> int:
    """Output length of a convolution/pooling along one axis: ``floor((L + 2p - d(k-1) - 1)/s) + 1``.

    >>> conv_out(224, 7, 2, 3)
    112
    """
    return (size + 2 * pad - dilation * (kernel - 1) - 1) // stride + 1


class Net:
    """Accumulates the layers of one model for one micro-batch on one rank.

    Parameters
    ----------
    batch_size
        Micro-batch size (samples).
    precision
        Training precision recipe (decides bytes per element).
    tp
        Tensor-parallel degree (transformers: Megatron sharding; CNNs: fully connected layers).
    sequence_parallel
        Megatron sequence parallelism (Korthikanti et al. 2022): norms and dropouts are sharded
        along the sequence and the tensor-parallel all-reduces become all-gather/reduce-scatter.
    ep, etp
        Expert parallelism and expert tensor parallelism (mixture-of-experts layers shard their
        routed experts over ``ep`` ranks and each expert's GEMMs over ``etp``; 0 = ``tp``).
    cp
        Context parallelism: this rank holds ``1/cp`` of every sequence (:meth:`local_seq`) and
        its fused attention exchanges keys and values with the ``cp`` group (:meth:`attention`).
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
        tp: int = 1,
        sequence_parallel: bool = False,
        *,
        ep: int = 1,
        cp: int = 1,
        etp: int = 0,
        kernels: KernelRecipe = DEFAULT_KERNELS,
    ) -> None:
        self.batch_size = batch_size
        self.kernels = kernels
        self.precision = precision
        self.tp = tp
        self.ep = ep
        self.cp = cp
        self.etp = etp or tp
        self.sp = sequence_parallel and tp > 1
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
        if k.fsdp_copies:
            for la in layers:
                if la.block is not None:
                    unit_params[la.block] = unit_params.get(la.block, 0) + la.params
            rest = sum(la.params for la in self.layers if la.block is None)
            if root and rest:
                out.append(self._fsdp_copy("root.fsdp_copy", rest, None))
        prev: int | None = None
        for la in layers:
            if k.fsdp_copies and la.block is not None and la.block != prev:
                out.append(
                    self._fsdp_copy(f"layer{la.block}.fsdp_copy", unit_params[la.block], la.block)
                )
            prev = la.block
            if k.fp8 is not None and fp8_linear(la):
                out.append(self._fp8_cast(la))
                la = self._fp8_gather(la)
            out.append(la)
        return out

    def _fp8_cast(self, la: LayerCost) -> LayerCost:
        """The quantisation kernels of FP8 linear layer ``la`` under :attr:`kernels`' recipe
        (:class:`~perfmodel.workload.kernels.Fp8CastBytes`): forward casts of its input and
        weight, backward casts of the output gradient (and the re-quantised input and weight
        where the recipe needs them). The weight cast of a recipe that caches it
        (:attr:`~perfmodel.workload.kernels.Fp8Recipe.caches_weights`) is charged at
        ``weight_cast_share`` per micro-batch; under FSDP with FP8 all-gathers the weight is
        cast on its shard before the gather (``1/dp`` of it: left out)."""
        k = self.kernels
        assert k.fp8 is not None and la.gemm is not None
        cb = k.fp8.cast_bytes
        g = la.gemm
        x_el = float(g.m * g.k * g.batch)
        dy_el = float(g.m * g.n * g.batch)
        w_el = float(g.k * g.n * g.batch)
        share = k.weight_cast_share if k.fp8.caches_weights else 1.0
        if k.fsdp_copies and k.fp8.fsdp_fp8_all_gather:
            share = 0.0
        dgrad = la.bwd_input_flop > 0
        return LayerCost(
            name=f"{la.name}.fp8_cast",
            kind=LayerKind.ELEMENTWISE,
            fwd_flop=2.0 * x_el,
            bwd_input_flop=2.0 * dy_el,
            bwd_weight_flop=0.0,
            params=0,
            fwd_bytes=cb.x_fwd * x_el + cb.w_fwd * w_el * share,
            bwd_bytes=cb.dy_bwd * dy_el + cb.x_bwd * x_el + (cb.w_bwd * w_el if dgrad else 0.0),
            activation_bytes=0.0,
            output_shape=la.output_shape,
            block=la.block,
            kernels=cb.kernels_fwd,
            bwd_kernels=cb.kernels_bwd,
            kernel_class=KernelClass.FP8_CAST,
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
        return la if comms == la.fwd_comm else replace(la, fwd_comm=comms)

    def _fsdp_copy(self, name: str, params: int, block: int | None) -> LayerCost:
        """FSDP2's copies for one unit of ``params`` parameters per micro-batch
        (:attr:`~perfmodel.workload.kernels.KernelRecipe.fsdp_copies`): forward, the
        all-gather copy-out (read and write ``p`` bytes per parameter, ``p`` the gathered
        width: 1 for FP8-gathered weights, else the 16-bit ``param_bytes``); backward, the
        copy-out of the backward all-gather and the reduce-scatter copy-in (read the 16-bit
        gradient, write ``fsdp_reduce_bytes``)."""
        k = self.kernels
        p = float(self.param_bytes)
        gathered = 2.0 * p * params
        reduce_in = (p + k.fsdp_reduce_bytes) * params
        return LayerCost(
            name=name,
            kind=LayerKind.OTHER,
            fwd_flop=0.0,
            bwd_input_flop=0.0,
            bwd_weight_flop=0.0,
            params=0,
            fwd_bytes=gathered,
            bwd_bytes=gathered + reduce_in,
            activation_bytes=0.0,
            output_shape=(1,),  # copies of parameters: no activation tensor
            block=block,
            kernels=1,
            bwd_kernels=2,
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
            LayerCost(
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
    ) -> None:
        """A memory-bound operator of ``elements`` elements as the kernels of ``ops``
        (:data:`perfmodel.workload.kernels.OPS`): bytes ``elements x`` the kernels' bytes per
        element at the activation width, one launch per kernel, the class ``ops.klass``.
        ``flop`` are the forward and backward FLOP (the roofline's compute side only);
        ``params`` stay with the layer (a norm's weight: read in forward, its FP32 gradient
        written in backward). ``tensors``: the operator runs on that many tensors whose
        elements ``elements`` counts together (RoPE on the queries and the keys): as many
        launches of each kernel."""
        a = self.act_bytes
        p = self.param_bytes
        self._add(
            LayerCost(
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
            LayerCost(
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
        self.layers[index] = replace(self.layers[index], activation_bytes=0.0)

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

    # -- convolutional networks ------------------------------------------------------------
    def conv(
        self,
        name: str,
        x: Shape,
        out_channels: int,
        kernel: int | tuple[int, int],
        stride: int | tuple[int, int] = 1,
        pad: int | tuple[int, int] = 0,
        *,
        groups: int = 1,
        bias: bool = False,
        dilation: int | tuple[int, int] = 1,
    ) -> Shape:
        """2-D convolution on an ``(N, C, H, W)`` input; returns the output shape.

        FLOP ``= 2 N H_o W_o C_out (C_in/groups) R S``; implicit GEMM ``m = N H_o W_o``,
        ``n = C_out/groups``, ``k = (C_in/groups) R S``, batched over ``groups`` (Chetlur et al.
        2014). Saves its input for the weight gradient.

        ``bias``: the bias is a kernel of its own in both cuDNN-based frameworks, appended as a
        layer ``{name}.bias`` (:meth:`_conv_bias`); its ``C_out`` parameters stay on the
        convolution, so parameter counts per layer are unchanged.
        """
        n, c, h, w = x
        kh, kw = (kernel, kernel) if isinstance(kernel, int) else kernel
        sh, sw = (stride, stride) if isinstance(stride, int) else stride
        ph, pw = (pad, pad) if isinstance(pad, int) else pad
        dh, dw = (dilation, dilation) if isinstance(dilation, int) else dilation
        ho, wo = conv_out(h, kh, sh, ph, dh), conv_out(w, kw, sw, pw, dw)
        if ho < 1 or wo < 1:
            raise ConfigError(
                f"image_size too small: layer {name} gets a {h}x{w} input and a {kh}x{kw} kernel "
                f"with stride {sh} (output {ho}x{wo})",
                value=(h, w),
                where="image_size",
            )
        if c % groups or out_channels % groups:
            raise ConfigError(
                f"layer {name}: groups={groups} must divide channels {c} -> {out_channels}",
                value=groups,
                where=name,
            )
        cin_g = c // groups
        gemm = GemmShape(m=n * ho * wo, n=out_channels // groups, k=cin_g * kh * kw, batch=groups)
        params = out_channels * cin_g * kh * kw + (out_channels if bias else 0)
        x_el, y_el = numel(x), n * out_channels * ho * wo
        dgrad = self._needs_dgrad()
        y = (n, out_channels, ho, wo)
        self._gemm_layer(
            name,
            LayerKind.CONV,
            gemm,
            params=params,
            x_el=x_el,
            y_el=y_el,
            bias=False,  # the bias is its own layer below
            dgrad=dgrad,
            activation_bytes=x_el * self.act_bytes,
            output_shape=y,
            # trace medians: 2 forward (1-3), 4 backward (dgrad + wgrad + helpers; 3-5)
            kernels=2,
            bwd_kernels=4 if dgrad else 2,
            conv_window=(kh, kw, sh, sw, dh, dw),
        )
        if bias:
            self._conv_bias(f"{name}.bias", y)
        return y

    def _conv_bias(self, name: str, y: Shape) -> None:
        """Bias of a convolution with output ``y``: a broadcast add in forward, a reduction over
        ``(N, H, W)`` for its gradient in backward, each a kernel of its own.

        PyTorch's ``_convolution`` runs ``cudnn_convolution`` and then
        ``output.add_(reshape_bias(...))``, and ``convolution_backward`` computes the bias
        gradient as ``grad_output.sum({0, 2, 3})`` (``aten/src/ATen/native/Convolution.cpp``).
        Keras ``Conv2D(use_bias=True)`` emits ``Conv2D`` then ``BiasAdd``, whose gradient is
        ``BiasAddGrad``; grappler's remapper fuses ``Conv2D + BiasAdd`` on the GPU only when a
        ReLU follows (``IsGpuCompatible(ContractionWithBiasAdd)`` returns false in
        ``tensorflow/core/grappler/optimizers/remapper.cc``), which it never does during
        training of the zoo's biased convolutions.

        Forward reads and writes the output and reads the ``C_out`` biases; backward reads the
        output gradient and writes ``C_out`` bias gradients (the gradient passes through to the
        convolution untouched). FLOP: one add per output element each way, counted as the
        weight gradient. Saves nothing: the add's backward needs only the incoming gradient.
        The parameters stay on the convolution (``params = 0`` here).
        """
        el = numel(y)
        c = y[1]
        a, p = self.act_bytes, self.param_bytes
        self._add(
            LayerCost(
                name=name,
                kind=LayerKind.ELEMENTWISE,
                fwd_flop=float(el),
                bwd_input_flop=0.0,
                bwd_weight_flop=float(el),
                params=0,
                fwd_bytes=2 * el * a + c * p,
                bwd_bytes=el * a + c * p,
                activation_bytes=0.0,
                output_shape=tuple(y),
                block=self.block,
                kernels=1,
                bwd_kernels=1,
            )
        )

    def pad(self, name: str, x: Shape, pad: int | tuple[int, int]) -> Shape:
        """Explicit zero padding of the spatial axes of ``(N, C, H, W)`` by ``pad`` on each side
        (Keras ``ZeroPadding2D``): the TensorFlow ``Pad`` op in forward (reads ``x``, writes the
        padded tensor), its gradient a ``Slice`` of the padded gradient (``_PadGrad`` in
        ``tensorflow/python/ops/array_grad.py``; counted as reading the padded gradient, whose
        border sectors come with the interior rows, and writing ``x``'s gradient). One kernel
        each way, no FLOP, saves nothing.

        A pad before the network's first weight layer pads the input images, which need no
        gradient: no backward.
        """
        n, c, h, w = x
        ph, pw = (pad, pad) if isinstance(pad, int) else pad
        y = (n, c, h + 2 * ph, w + 2 * pw)
        x_el, y_el = numel(x), numel(y)
        a = self.act_bytes
        grad = not self._first_weight_layer
        self._kernel(
            name,
            LayerKind.ELEMENTWISE,
            fwd_flop=0.0,
            bwd_flop=0.0,
            fwd_bytes=(x_el + y_el) * a,
            bwd_bytes=(x_el + y_el) * a if grad else 0.0,
            output_shape=y,
            kernels=1,
            bwd_kernels=1 if grad else 0,
        )
        return y

    def batchnorm(self, name: str, x: Shape, *, buffers_per_channel: int = 2) -> Shape:
        """Batch normalisation (training mode) over the channel axis 1.

        ``2 C`` trainable parameters (scale, shift) and ``buffers_per_channel x C`` running
        statistics (non-trainable; Keras counts them as non-trainable parameters). Forward reads
        the input twice (statistics, normalise) and writes once; backward reads ``dy`` and ``x``
        twice and writes ``dx``. Saves its input.
        """
        c = x[1]
        el = numel(x)
        a = self.act_bytes
        self.buffers += buffers_per_channel * c
        self._add(
            LayerCost(
                name=name,
                kind=LayerKind.NORM,
                fwd_flop=8.0 * el,
                bwd_input_flop=12.0 * el,
                bwd_weight_flop=2.0 * el,
                params=2 * c,
                fwd_bytes=3 * el * a + 4 * c * 4,
                bwd_bytes=5 * el * a + 4 * c * 4,
                activation_bytes=el * a,
                output_shape=tuple(x),
                block=self.block,
                kernels=3,  # trace: 3 forward, 2 backward (cuDNN BN; all 53 layers)
                bwd_kernels=2,
            )
        )
        return tuple(x)

    def act(self, name: str, x: Shape, fn: str = "relu", *, saves: bool = False) -> Shape:
        """Element-wise activation ``fn``; ``saves`` counts its input/output as kept for backward
        (``False`` when the consumer keeps the same tensor, e.g. in-place ReLU before a conv)."""
        el = numel(x)
        f, b = _ELEMENTWISE_FLOP[fn]
        a = self.act_bytes
        self._kernel(
            name,
            LayerKind.ACTIVATION,
            fwd_flop=f * el,
            bwd_flop=b * el,
            fwd_bytes=2 * el * a,
            bwd_bytes=3 * el * a,
            activation_bytes=el * a if saves else 0.0,
            output_shape=tuple(x),
        )
        return tuple(x)

    def pool(
        self, name: str, x: Shape, kernel: int, stride: int, pad: int = 0, *, mode: str = "max"
    ) -> Shape:
        """Max or average pooling over ``(N, C, H, W)``. Max pooling saves its input (cuDNN
        recomputes the argmax from it); average pooling saves nothing."""
        n, c, h, w = x
        ho, wo = conv_out(h, kernel, stride, pad), conv_out(w, kernel, stride, pad)
        if ho < 1 or wo < 1:
            raise ConfigError(
                f"image_size too small: pooling layer {name} gets a {h}x{w} input",
                value=(h, w),
                where="image_size",
            )
        y = (n, c, ho, wo)
        x_el, y_el = numel(x), numel(y)
        a = self.act_bytes
        self._kernel(
            name,
            LayerKind.POOL,
            fwd_flop=float(y_el * kernel * kernel),
            bwd_flop=float(y_el * kernel * kernel),
            fwd_bytes=(x_el + y_el) * a,
            bwd_bytes=(2 * x_el + y_el) * a if mode == "max" else (x_el + y_el) * a,
            activation_bytes=x_el * a if mode == "max" else 0.0,
            output_shape=y,
            bwd_kernels=2,  # trace (max pool): zero-fill + scatter of the gradient
        )
        return y

    def global_pool(self, name: str, x: Shape) -> Shape:
        """Global average pooling ``(N, C, H, W) -> (N, C)``."""
        n, c = x[0], x[1]
        el = numel(x)
        a = self.act_bytes
        self._kernel(
            name,
            LayerKind.POOL,
            fwd_flop=float(el),
            bwd_flop=float(el),
            fwd_bytes=(el + n * c) * a,
            bwd_bytes=(el + n * c) * a,
            output_shape=(n, c),
            bwd_kernels=3,  # trace (adaptive average pool backward)
        )
        return (n, c)

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

    def concat(self, name: str, shapes: Sequence[Shape], axis: int = 1) -> Shape:
        """Concatenation along ``axis`` (a copy in forward and a split in backward)."""
        out = list(shapes[0])
        out[axis] = sum(s[axis] for s in shapes)
        y = tuple(out)
        el = numel(y)
        a = self.act_bytes
        self._kernel(
            name,
            LayerKind.ELEMENTWISE,
            fwd_flop=0.0,
            bwd_flop=0.0,
            fwd_bytes=2 * el * a,
            bwd_bytes=2 * el * a,
            output_shape=y,
        )
        return y

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

    def grouped_linear(
        self,
        name: str,
        rows: int,
        in_features: int,
        out_features: int,
        *,
        groups: int,
        parallel: str | None = None,
        fwd_comm: tuple[CommPoint, ...] = (),
        bwd_comm: tuple[CommPoint, ...] = (),
        casts_input: bool = False,
        shard: int | None = None,
        **marks: object,
    ) -> Shape:
        """Grouped GEMM of ``groups`` weight matrices ``in x out`` (no bias) over ``rows`` rows
        in all: the routed experts of a mixture-of-experts layer, ``rows = tokens x top_k``
        (Megatron-Core ``TEGroupedMLP``). ``parallel`` shards each matrix as :meth:`linear`.

        FLOP ``2 rows n k`` per pass (exact, whatever the routing); the GEMM shape for the
        efficiency model is ``groups`` GEMMs of ``ceil(rows / groups)`` rows (balanced routing).
        Parameters ``groups k n``: every expert's weights are held and read. ``marks`` (the
        :class:`LayerCost` fields ``expert_role``, ``experts``, ``top_k``) are stored on the layer.
        ``shard`` is the tensor-parallel degree of the matrices (default ``tp``; expert tensor
        parallelism ``etp`` for routed experts).

        >>> from perfmodel.dtypes import Precision
        >>> net = Net(1, Precision.BF16)
        >>> _ = net.embedding("e", 1, 4, 10, 8)
        >>> net.grouped_linear("x", 6, 8, 16, groups=4)
        (6, 16)
        >>> la = net.layers[-1]
        >>> la.fwd_flop, la.params, la.gemm.m  # 2 x 6 x 16 x 8; 4 x 8 x 16; ceil(6 / 4)
        (1536.0, 512, 2)
        """
        tp = self.tp if shard is None else shard
        if parallel == "column":
            k, n = in_features, out_features // tp
        elif parallel == "row":
            k, n = in_features // tp, out_features
        else:
            k, n = in_features, out_features
        gemm = GemmShape(m=-(-rows // groups), n=n, k=k, batch=groups)
        flop = 2.0 * rows * n * k
        dgrad = self._needs_dgrad()
        x_el, y_el = rows * k, rows * n
        self._gemm_layer(
            name,
            LayerKind.LINEAR,
            gemm,
            params=groups * k * n,
            x_el=x_el,
            y_el=y_el,
            bias=False,
            dgrad=dgrad,
            activation_bytes=x_el * self.act_bytes,
            output_shape=(rows, n),
            fwd_comm=fwd_comm,
            bwd_comm=bwd_comm,
            bwd_kernels=2 if dgrad else 1,
            casts_input=casts_input,
            **marks,
        )
        self.layers[-1] = replace(
            self.layers[-1],
            fwd_flop=flop,
            bwd_input_flop=flop if dgrad else 0.0,
            bwd_weight_flop=flop,
        )
        return (rows, n)

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

    def attention(
        self,
        name: str,
        b: int,
        s: int,
        heads: int,
        kv_heads: int,
        head_dim: int,
        causal: bool,
        *,
        v_head_dim: int | None = None,
        window: AttentionWindow | None = None,
    ) -> Shape:
        """Fused attention kernel (FlashAttention, Dao et al. 2022) for ``heads`` local heads.

        FLOP forward ``2 b s^2 heads (d + d_v)`` (``QK^T`` over the query/key width ``d`` and
        ``PV`` over the value width ``d_v``, default ``d``: ``4 b s^2 heads d``), halved when
        ``causal`` (the kernel skips masked tiles); backward ``2.5x`` forward (FlashAttention
        recomputes ``P``: 5 GEMMs against 2). Saves ``Q, K, V`` and the fp32 log-sum-exp (``O``
        is kept by the output projection that consumes it); no ``s x s`` matrix. Multi-head
        latent attention (DeepSeek-V2/V3) has ``d = 192`` (128 + 64 rotary) and ``d_v = 128``.

        Context parallelism (``cp > 1``, ``s`` the local ``seq_len / cp`` queries): ring
        attention (Liu et al. 2023, arXiv:2310.01889; Megatron-Core/Transformer Engine
        ``cp_comm_type="p2p"``, torchtitan's ``context_parallel`` ring): the ``s`` local queries
        meet all ``cp s`` keys, FLOP ``2 b s (cp s) heads (d + d_v)``, halved when causal (the
        ``2 cp``-chunk load balancing gives every rank the same half), i.e. ``1/cp`` of the whole
        sequence's attention. The local ``K, V`` chunk travels ``cp - 1`` steps around the ring in
        forward (an all-gather of ``cp`` chunks, ``CommPoint`` group ``"cp"``) and ``K, V`` plus
        their gradients in backward (all-gather + reduce-scatter); the lowering overlaps them
        with the attention kernel (:func:`perfmodel.parallel.expert.ring_exposed_s`).

        The ``cp`` steps each launch the fused kernel on one pair of chunks: step 0 the causal
        ``s x s`` block, the others a full ``s x s/2`` block (load balancing keeps half of the
        received keys or half of the local queries; torch ``_templated_ring_attention``,
        Transformer Engine ``AttnFuncWithCPAndKVP2P``), so the kernel sees ``s`` queries against
        ``s/2`` keys ``cp`` times: ``GemmShape(s, s/2, d, b heads cp)``, whose FLOP is exactly
        the causal-halved ``QK^T``, and ``cp`` times the kernels of one call. Each step's
        partial output is merged into an FP32 accumulator by its log-sum-exp (torch
        ``_SDPAMerger`` with ``convert_to_f32``, TE ``flash_attn_fwd_out_correction``) and in
        backward each step's ``dQ, dK, dV`` are summed in FP32 accumulators (torch
        ``_templated_ring_attention_backward``'s ``accum_dtype``, TE's FP32 ``dq``/``dkv``):
        a memory-bound ``<name>_cp_merge`` layer after the attention moving, per element of
        ``O`` (forward) and of ``Q, K, V`` (backward), ``2`` bytes of the step's BF16 result and
        ``4 + 4`` of the accumulator per step plus a final ``4 + 2`` cast:
        ``(10 cp + 6)`` bytes, one kernel per step and one cast: the fused minimum, what
        Transformer Engine's merge kernels and a ``torch.compile``-d ring (inductor fuses the
        merge's pointwise chain) move.

        PyTorch's ``context_parallel`` (stacks that are not Transformer Engine's,
        :class:`perfmodel.parallel.expert.CPImpl` ``torch``) exchanges SDPA's inputs, K and V
        already repeated to all ``heads`` (torchtitan's ``repeat_kv`` precedes SDPA): the
        all-gather and the backward's accumulators are ``heads / kv_heads`` times larger, and
        the backward passes each step's FP32 dK/dV to the next rank (``CommPoint``
        ``SENDRECV`` of ``cp`` chunks at 4 bytes; ``convert_to_f32``). Eager (unfused) it runs
        the merge as ATen operators (torch ``_SDPAMerger._merge_one``: the FP32 upcast 2 + 4,
        ``out - block_out`` 4 + 4 + 4, the sigmoid-weighted product 4 + 4, ``out - ...``
        4 + 4 + 4: 38 bytes per element and step, 6 kernels) and accumulates the gradients
        with ``+=`` (2 + 4 + 4) and the send buffer's ``torch.cat`` (4 + 4) and the K/V ``cat``
        (2 + 2): 10 bytes per query element and 22 per key/value element per step.

        Local windows (``window``, :class:`~perfmodel.workload.window.AttentionWindow`; causal
        only, and only where the window is shorter than the sequence): sliding-window and
        chunked attention compute :meth:`~perfmodel.workload.window.AttentionWindow.pairs_fraction`
        of the ``s x s`` scores instead of half, ``fwd = 2 b s^2 heads (d + d_v) x fraction``,
        and keep the same ``Q, K, V`` and log-sum-exp. The efficiency model sees the kernel as
        causal blocks of ``span = min(w, s)`` queries: ``GemmShape(span, span, d, b heads
        ceil(s / span))`` for chunks (each chunk an independent causal attention), and
        ``GemmShape(span, 2 span, d, ...)`` for a sliding window (a block of ``w`` queries
        sweeps the ``2 w`` keys from ``w`` before its first query to its last, half of them
        masked, as the diagonal of a causal kernel), so the attention tables are read at key
        length ``span`` with the causal mask. With context parallelism a limiting window is not
        modelled (:class:`InfeasiblePlanError`; ring attention would skip most ring steps).
        """
        a = self.act_bytes
        dv = head_dim if v_head_dim is None else v_head_dim
        frac = 0.5 if causal else 1.0
        cp = self.cp
        local = self._window(window, s, causal)
        if local is not None:
            frac = local.pairs_fraction(s)
        fwd = 2.0 * b * s * (s * cp) * heads * (head_dim + dv) * frac
        q_el = b * s * heads * head_dim
        k_el = b * s * kv_heads * head_dim
        v_el = b * s * kv_heads * dv
        o_el = b * s * heads * dv
        io = (q_el + k_el + v_el + o_el) * a
        fwd_comm: tuple[CommPoint, ...] = ()
        bwd_comm: tuple[CommPoint, ...] = ()
        if local is not None:
            gemm = _window_gemm(local, s, head_dim, b * heads)
        elif cp == 1:
            gemm = GemmShape(m=s, n=s, k=head_dim, batch=b * heads)
        else:
            gemm = GemmShape(m=s, n=max(s // 2, 1), k=head_dim, batch=b * heads * cp)
        torch_cp = cp > 1 and self.kernels.fusion is not Fusion.TE
        # the keys and values the context-parallel exchange moves: PyTorch's SDPA inputs are
        # already repeated to every query head
        kx_el = b * s * heads * head_dim if torch_cp else k_el
        vx_el = b * s * heads * dv if torch_cp else v_el
        if cp > 1:
            ring = float(cp * (kx_el + vx_el) * a)  # all cp chunks of K and V (all-gather output)
            fwd_comm = (CommPoint(CollectiveOp.ALLGATHER, ring, "cp"),)
            if torch_cp:  # K/V gathered again; cp permutes of the FP32 dK/dV chunk
                grads = float(cp * (kx_el + vx_el) * FP32_BYTES)
                bwd_comm = (
                    CommPoint(CollectiveOp.ALLGATHER, ring, "cp"),
                    CommPoint(CollectiveOp.SENDRECV, grads, "cp"),
                )
            else:
                bwd_comm = (
                    CommPoint(CollectiveOp.ALLGATHER, ring, "cp"),
                    CommPoint(CollectiveOp.REDUCESCATTER, ring, "cp"),
                )
        self._kernel(
            name,
            LayerKind.ATTENTION,
            fwd_flop=fwd,
            bwd_flop=2.5 * fwd,
            fwd_bytes=io + b * heads * s * 4,
            bwd_bytes=2 * io + b * heads * s * 4,
            activation_bytes=(q_el + k_el + v_el) * a + b * heads * s * 4,
            output_shape=(b, s, heads * dv),
            gemm=gemm,
            fwd_comm=fwd_comm,
            bwd_comm=bwd_comm,
            # trace (SDPA flash, GPT-2): 2 forward, 6 backward (dO.O preprocessing, the
            # main kernel, dQ accumulator conversion, layout copies); once per ring step
            kernels=2 * cp,
            bwd_kernels=6 * cp,
        )
        if cp > 1:
            # bytes per element: cp merges and a final cast (see the docstring)
            eager = torch_cp and self.kernels.fusion is Fusion.EAGER
            per_f = (38.0 if eager else 10.0) * cp + 6.0
            per_q = 10.0 * cp + 6.0
            per_kv = (22.0 if eager else 10.0) * cp + 6.0
            steps = 6 if eager else 1  # kernels per step
            self._kernel(
                f"{name}_cp_merge",
                LayerKind.ELEMENTWISE,
                fwd_flop=5.0 * cp * o_el,
                bwd_flop=1.0 * cp * (q_el + kx_el + vx_el),
                fwd_bytes=per_f * o_el,
                bwd_bytes=per_q * q_el + per_kv * (kx_el + vx_el),
                output_shape=(b, s, heads * dv),
                kernels=steps * cp + 1,
                bwd_kernels=steps * cp + 1,
            )
        return (b, s, heads * dv)

    def _window(
        self, window: AttentionWindow | None, s: int, causal: bool
    ) -> AttentionWindow | None:
        """``window`` where it limits an attention over ``s`` local queries (else ``None``);
        refused without the causal mask or under context parallelism."""
        if window is None or not window.limits(s * self.cp):
            return None
        if not causal:
            raise ConfigError(
                f"a {window.label()} attention window needs the causal mask",
                value=window.size,
                where="attention window",
            )
        if self.cp > 1:
            raise InfeasiblePlanError(
                f"cp={self.cp}: context parallelism with {window.label()} attention (shorter "
                f"than the {s * self.cp}-token sequence) is not modelled; use cp=1",
                value=self.cp,
                where="cp",
            )
        return window

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
            LayerCost(
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
    ) -> Shape:
        """Generic element-wise kernel of ``inputs`` input tensors with explicit saved bytes.

        ``bwd_elements``: elements moved by the backward per output element (default
        ``inputs + 2``); ``autocast_fp32``: see :class:`LayerCost`.
        """
        el = numel(x)
        f, b = _ELEMENTWISE_FLOP[fn]
        a = self.act_bytes
        self._kernel(
            name,
            LayerKind.ACTIVATION if fn not in ("add", "scale", "copy") else LayerKind.ELEMENTWISE,
            fwd_flop=f * el,
            bwd_flop=b * el,
            fwd_bytes=(inputs + 1) * el * a,
            bwd_bytes=(inputs + 2 if bwd_elements is None else bwd_elements) * el * a,
            activation_bytes=saved_bytes,
            output_shape=tuple(x),
            autocast_fp32=autocast_fp32,
        )
        return tuple(x)

    def embedding(
        self,
        name: str,
        b: int,
        s: int,
        num: int,
        dim: int,
        *,
        parallel: bool = False,
        fwd_comm: tuple[CommPoint, ...] = (),
        indices: int | None = None,
    ) -> Shape:
        """Lookup table of ``num x dim``; forward gathers ``b s`` rows, backward scatter-adds into
        the dense gradient (written whole). ``parallel``: vocabulary split over ``tp``
        (Megatron ``VocabParallelEmbedding``; an all-reduce sums the partial lookups).

        ``indices``: distinct index entries looked up (default ``b s``; learned positions use
        ``s``, broadcast over the batch). PyTorch's ``embedding_dense_backward`` takes a direct
        path for at most 3072 indices and otherwise sorts them (``aten/src/ATen/native/cuda/
        Embedding.cu``): 2 backward kernels against 32 in the GPT-2 trace (8192 indices).
        """
        rows = num // self.tp if parallel else num
        params = rows * dim
        a, p = self.act_bytes, self.param_bytes
        el = b * s * dim
        self._first_weight_layer = False  # token ids need no gradient; later layers do
        self._add(
            LayerCost(
                name=name,
                kind=LayerKind.EMBEDDING,
                fwd_flop=0.0,
                bwd_input_flop=0.0,
                bwd_weight_flop=float(el),
                params=params,
                fwd_bytes=el * (a + p) + b * s * 8,
                bwd_bytes=el * a + params * p,
                activation_bytes=b * s * 8.0,  # int64 indices
                output_shape=(b, s, dim),
                fwd_comm=fwd_comm,
                block=self.block,
                bwd_kernels=2 if (b * s if indices is None else indices) <= 3072 else 32,
            )
        )
        return (b, s, dim)

    def loss(
        self, name: str, rows: int, classes: int, *, fwd_comm: tuple[CommPoint, ...] = ()
    ) -> Shape:
        """Softmax cross-entropy over ``classes`` (local, vocab-parallel when ``tp > 1``) for
        ``rows`` predictions, computed in FP32: saves the FP32 softmax (or log-softmax),
        ``4 rows classes`` bytes.

        Kernels and bytes per logit are the stack's (:data:`perfmodel.workload.kernels.OPS`
        ``"loss"``): PyTorch's ``cross_entropy`` of the FP32-cast logits (eager, and under
        torchtitan's ``torch.compile``, which leaves the loss eager): the cast (``a + 4``),
        ``log_softmax`` (8), ``nll_loss``; backward the zero-filled FP32 gradient (4),
        ``log_softmax_backward`` (12) and the cast back (``4 + a``): ``(12 + a)`` bytes forward
        and ``(20 + a)`` backward per element, as the GPT-2 H100 trace shows (copy, softmax and
        ``FillFunctor<float>`` kernels; GPT-2 b8: 2.77 ms measured against 0.98 predicted
        before the FP32 gradient was counted). Megatron-Core's fused vocabulary-parallel
        cross-entropy (``te``): ``(20 + a)`` forward, ``(12 + a)`` backward.
        """
        el = float(rows * classes)
        ops = op_kernels("loss", self.kernels.fusion)
        assert ops is not None
        a = self.act_bytes
        self._kernel(
            name,
            LayerKind.LOSS,
            fwd_flop=5.0 * el,
            bwd_flop=2.0 * el,
            fwd_bytes=el * ops.fwd_bytes(a),
            bwd_bytes=el * ops.bwd_bytes(a),
            activation_bytes=4.0 * el,
            output_shape=(1,),
            fwd_comm=fwd_comm,
            kernels=max(ops.fwd_kernels(a), 1),
            bwd_kernels=ops.bwd_kernels(a),
            kernel_class=KernelClass.LOSS,
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
