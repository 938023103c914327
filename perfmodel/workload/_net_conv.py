"""Layer primitives of convolutional networks (:class:`ConvLayers`, a part of
:class:`~perfmodel.workload._net.Net`): convolutions with their padding and bias, batch norm,
pooling and concatenation. The conventions (FLOP, bytes, saved activations, kernels) are
:mod:`perfmodel.workload._net`'s; the methods use its helpers (``self._add``,
``self._kernel``, ``self._gemm_layer``, ...).
"""

from __future__ import annotations

from collections.abc import Sequence

from perfmodel.errors import ConfigError
from perfmodel.workload._net_shapes import Shape, conv_out, numel
from perfmodel.workload.layers import (
    GemmShape,
    LayerCost,
    LayerKind,
)


class ConvLayers:
    """The convolutional layers :class:`~perfmodel.workload._net.Net` appends."""

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
            LayerCost.built(
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
            LayerCost.built(
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


__all__ = ["ConvLayers"]
