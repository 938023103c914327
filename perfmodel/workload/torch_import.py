"""Build a :class:`Workload` from any PyTorch ``nn.Module`` and a sample input (optional: torch).

The module runs once on the **meta device** (no weights are allocated or downloaded, no
arithmetic is done): a copy of the module is moved to ``meta`` and called on meta copies of the
sample input, under a :class:`torch.utils._python_dispatch.TorchDispatchMode` (the mechanism
behind ``torch.utils.flop_counter.FlopCounterMode``) that records every ATen operator.

* Parameterised leaf modules (``Conv1d/2d``, ``Linear``, ``BatchNorm``, ``LayerNorm``,
  ``GroupNorm``, ``RMSNorm``, ``Embedding``) become one layer each, with the same cost arithmetic
  as the zoo (``perfmodel.workload._net``), so totals agree with zoo models of the same layout.
* Operators outside those modules become layers too: ``mm``/``bmm``/``addmm``/``baddbmm``
  (activation x activation GEMMs), ``scaled_dot_product_attention`` (fused attention),
  convolutions, and element-wise/reduction kernels (memory-bound; their bytes are counted).
  Pure views (``view``, ``permute``, ``transpose``, ...) are free.
* Parameters not owned by a recognised module (class tokens, position tables, attention
  in-projections held by ``nn.MultiheadAttention``) are kept on one ``unassigned_parameters``
  layer so that ``Workload.params`` equals ``sum(p.numel() for p in module.parameters())``.

Saved-activation bytes of operators outside recognised modules are approximations (an
element-wise op is assumed to keep nothing; softmax keeps its output; dropout its mask).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from perfmodel.dtypes import Precision
from perfmodel.errors import ConfigError
from perfmodel.workload._net import Net, numel
from perfmodel.workload.layers import GemmShape, LayerCost, LayerKind, Workload

_FREE_OPS = {
    "view",
    "_unsafe_view",
    "reshape",
    "permute",
    "transpose",
    "t",
    "expand",
    "unsqueeze",
    "squeeze",
    "slice",
    "select",
    "split",
    "split_with_sizes",
    "detach",
    "alias",
    "as_strided",
    "unbind",
    "chunk",
    "narrow",
    "empty",
    "empty_like",
    "zeros",
    "ones",
    "full",
    "arange",
    "zeros_like",
    "ones_like",
    "full_like",
    "lift_fresh",
    "_to_copy",
    "clone",
    "new_empty",
    "new_zeros",
    "new_ones",
    "scalar_tensor",
    "expand_as",
    "view_as",
    "flatten",
    "triu",
    "tril",
    "masked_fill",
    "where",
    "sym_size",
    "sym_stride",
    "is_same_size",
    "_local_scalar_dense",
    "embedding",  # handled through nn.Embedding; functional use is a gather of rows
}
_GEMM_OPS = {"mm", "bmm", "addmm", "baddbmm"}


def _require_torch() -> Any:
    try:
        import torch
    except ImportError as exc:  # pragma: no cover - exercised when torch is absent
        raise ConfigError(
            "importing a PyTorch model needs torch (pip install 'perfmodel[torch]')",
            value="torch",
            where="torch_import",
        ) from exc
    return torch


def _shape(t: Any) -> tuple[int, ...]:
    return tuple(int(d) for d in t.shape)


def _image(x: tuple[int, ...]) -> tuple[int, ...]:
    """A convolution input as ``(N, C, H, W)``: a 1-D ``(N, C, L)`` input becomes ``H = 1``."""
    return x if len(x) == 4 else (*x[:2], 1, x[2])


def _pair(v: Any, fill: int) -> tuple[int, int]:
    """A 2-D convolution argument: a 1-D one ``(a,)`` becomes ``(fill, a)``."""
    return tuple(v) if len(v) == 2 else (fill, v[0])  # type: ignore[return-value]


def from_torch(
    module: Any,
    sample_input: Any,
    *,
    name: str | None = None,
    precision: Precision | str = "fp32",
    batch_size: int | None = None,
    sample_unit: str = "samples",
    tokens_per_sample: int = 1,
) -> Workload:
    """Layer list of ``module`` called on ``sample_input`` (a tensor or tuple of tensors).

    Parameters
    ----------
    module
        Any ``torch.nn.Module``; it is deep-copied to the meta device (the original is untouched).
    sample_input
        Tensor(s) of the real shapes; only shapes and dtypes matter (meta tensors are fine).
    precision
        Training precision for bytes and times (the traced dtypes are not used).
    batch_size
        Samples in ``sample_input`` (default: its first dimension).

    Raises
    ------
    ConfigError
        When torch is not installed or the module cannot run on the meta device.
    """
    torch = _require_torch()
    import copy

    prec = Precision.parse(precision, where="precision")
    inputs = sample_input if isinstance(sample_input, (tuple, list)) else (sample_input,)
    meta_inputs = tuple(x.to("meta") if hasattr(x, "to") else x for x in inputs)
    model = copy.deepcopy(module).to("meta")
    model.train()
    first = next((x for x in meta_inputs if hasattr(x, "shape")), None)
    batch = int(
        batch_size if batch_size is not None else (first.shape[0] if first is not None else 1)
    )
    net = Net(batch, prec)
    nn = torch.nn
    leaf_types = _leaf_types(nn)
    # tied parameters (an LM head sharing the embedding) are counted once, under their first
    # name; moving to meta may untie them in the copy, so the aliases come from the original
    aliases = {n for n, _ in module.named_parameters(remove_duplicate=False)} - {
        n for n, _ in module.named_parameters()
    }
    seen_params: set[str] = set()
    depth = [0]
    names = {m: n for n, m in model.named_modules()}

    def own_params(m: Any) -> int:
        total = 0
        for pname, p in m.named_parameters(recurse=False):
            fq = f"{names[m]}.{pname}" if names[m] else pname
            if fq not in aliases and fq not in seen_params:
                seen_params.add(fq)
                total += p.numel()
        return total

    def pre(m: Any, args: tuple[Any, ...]) -> None:
        depth[0] += 1

    def post(m: Any, args: tuple[Any, ...], out: Any) -> None:
        depth[0] -= 1
        if depth[0]:
            return
        x = _shape(args[0])
        nm = names[m] or "root"
        params = own_params(m)
        start = len(net.layers)
        _add_leaf(net, nn, m, nm, x, out, params)
        for i in range(start, len(net.layers)):
            net.layers[i] = replace(net.layers[i], params=params if i == start else 0)

    handles = []
    for m in model.modules():
        if isinstance(m, leaf_types):
            handles.append(m.register_forward_pre_hook(pre))
            handles.append(m.register_forward_hook(post))
    try:
        fused, recorder = _trace_modes(torch, net, depth)
        with fused, recorder:
            model(*meta_inputs)
    except Exception as exc:  # any failure of the user's module on the meta device
        raise ConfigError(
            f"cannot trace {type(module).__name__} on the meta device: {exc}",
            value=type(module).__name__,
            where="torch_import",
        ) from exc
    finally:
        for h in handles:
            h.remove()
    total = sum(p.numel() for p in module.parameters())
    _add_unassigned(net, total)
    buffers = sum(b.numel() for n, b in model.named_buffers() if "num_batches" not in n)
    return Workload(
        name=name or type(module).__name__,
        layers=tuple(net.layers),
        batch_size=batch,
        precision=prec,
        total_params=int(total),
        sample_unit=sample_unit,
        tokens_per_sample=tokens_per_sample,
        model_args={"imported_from": "torch"},
        buffers=int(buffers),
    )


def _trace_modes(torch: Any, net: Net, depth: list[int]) -> tuple[Any, Any]:
    """The two modes a trace runs under: one sees ``F.scaled_dot_product_attention`` before it
    decomposes on the meta device and records one fused-attention layer; the other records the
    layer of every ATen call made outside a recognised module (``depth[0] == 0``)."""
    from torch.overrides import TorchFunctionMode
    from torch.utils._python_dispatch import TorchDispatchMode

    sdpa = torch.nn.functional.scaled_dot_product_attention

    class FusedOps(TorchFunctionMode):
        """Sees ``F.scaled_dot_product_attention`` before it decomposes on the meta device and
        records it as one fused-attention layer (the kernel CUDA runs)."""

        def __torch_function__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            kwargs = kwargs or {}
            if func is not sdpa or depth[0]:
                return func(*args, **kwargs)
            q, k = _shape(args[0]), _shape(args[1])
            b, h, s, d = q if len(q) == 4 else (1, *q)
            causal = bool(kwargs.get("is_causal", args[5] if len(args) > 5 else False))
            net.attention(
                f"sdpa#{len(net.layers)}", b, s, h, k[-3] if len(k) >= 3 else h, d, causal
            )
            depth[0] += 1
            try:
                return func(*args, **kwargs)
            finally:
                depth[0] -= 1

    class Recorder(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            out = func(*args, **(kwargs or {}))
            if depth[0] == 0:
                _record(net, func, args, kwargs or {}, out)
            return out

    return FusedOps(), Recorder()


def _leaf_types(nn: Any) -> tuple[Any, ...]:
    """The ``torch.nn`` modules recorded as one layer each (their insides are not traced)."""
    return (
        nn.Conv1d,
        nn.Conv2d,
        nn.Linear,
        nn.BatchNorm1d,
        nn.BatchNorm2d,
        nn.LayerNorm,
        nn.GroupNorm,
        nn.Embedding,
    ) + ((nn.RMSNorm,) if hasattr(nn, "RMSNorm") else ())


def _add_leaf(
    net: Net, nn: Any, m: Any, nm: str, x: tuple[int, ...], out: Any, params: int
) -> None:
    """Append the layer of one recognised module ``m`` (named ``nm``) called on an input of
    shape ``x`` with output ``out``: a convolution (string padding resolved to the padding
    that gives the output), a linear layer, a batch norm, an embedding or a norm."""
    if isinstance(m, (nn.Conv1d, nn.Conv2d)):
        xs = _image(x)
        k, s, d = _pair(m.kernel_size, 1), _pair(m.stride, 1), _pair(m.dilation, 1)
        if isinstance(m.padding, str):  # "same"/"valid": the padding that gives the output
            oh, ow = _shape(out)[-2:] if len(x) == 4 else (1, _shape(out)[-1])
            span = (d[0] * (k[0] - 1) + 1, d[1] * (k[1] - 1) + 1)  # dilated kernel extent
            p = (
                ((oh - 1) * s[0] + span[0] - xs[2]) // 2,
                ((ow - 1) * s[1] + span[1] - xs[3]) // 2,
            )
        else:
            p = _pair(m.padding, 0)
        net.conv(
            nm,
            xs,
            m.out_channels,
            k,
            s,
            p,
            groups=m.groups,
            bias=m.bias is not None,
            dilation=d,
        )
    elif isinstance(m, nn.Linear):
        net.linear(nm, x, m.out_features, bias=m.bias is not None)
    elif isinstance(m, (nn.BatchNorm1d, nn.BatchNorm2d)):
        net.batchnorm(nm, x if len(x) > 1 else (x[0], 1))
    elif isinstance(m, nn.Embedding):
        tokens = numel(x)
        net.embedding(nm, tokens, 1, m.num_embeddings, m.embedding_dim)
    else:  # LayerNorm, GroupNorm, RMSNorm
        net.norm(nm, x, params=params, rms=type(m).__name__ == "RMSNorm")


def _add_unassigned(net: Net, total: int) -> None:
    """One layer holding the module's parameters no recorded layer owns (of modules the trace
    does not recognise), so the workload's parameter count is the module's."""
    rest = total - sum(la.params for la in net.layers)
    if rest:
        net.layers.append(LayerCost.parameters_only("unassigned_parameters", rest, ()))


def _record(net: Net, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any) -> None:
    """Append the layer of one ATen call made outside a recognised module."""
    op = func.overloadpacket.__name__ if hasattr(func, "overloadpacket") else str(func)
    base = op.split(".")[0].rstrip("_")
    if base in _FREE_OPS:
        return
    tensors = [a for a in args if hasattr(a, "shape")]
    outs = out if isinstance(out, (tuple, list)) else (out,)
    out_t = [o for o in outs if hasattr(o, "shape")]
    name = f"{op}#{len(net.layers)}"
    a = net.act_bytes
    if base in _GEMM_OPS:
        x, y = (tensors[-2], tensors[-1])
        xs, ys = _shape(x), _shape(y)
        batch = xs[0] if len(xs) == 3 else 1
        m, k = xs[-2], xs[-1]
        n = ys[-1]
        net.matmul(name, batch, m, n, k, saved_bytes=(numel(xs) + numel(ys)) * a)
        return
    if "scaled_dot_product" in base:
        q, key = _shape(tensors[0]), _shape(tensors[1])
        b, h, s, d = q if len(q) == 4 else (1, *q)
        causal = bool(
            kwargs.get(
                "is_causal", args[5] if len(args) > 5 and isinstance(args[5], bool) else False
            )
        )
        kvh = key[1] if len(key) == 4 else h
        net.attention(name, b, s, h, kvh, d, causal)
        return
    if base == "convolution":
        x, w = _shape(tensors[0]), _shape(tensors[1])
        stride, pad, dil, groups = args[3], args[4], args[5], args[8]
        k, s, p, d = _pair(w[2:], 1), _pair(stride, 1), _pair(pad, 0), _pair(dil, 1)
        net.conv(
            name, _image(x), w[0], k, s, p, groups=int(groups), bias=len(tensors) > 2, dilation=d
        )
        return
    if not out_t:
        return
    el_out = numel(_shape(out_t[0]))
    el_in = sum(numel(_shape(t)) for t in tensors)
    saved = 0.0
    kind = LayerKind.ELEMENTWISE
    if "softmax" in base:
        saved, kind = el_out * a, LayerKind.SOFTMAX
    elif "dropout" in base:
        saved = float(el_out)
    elif base in ("gelu", "silu", "tanh", "sigmoid"):
        saved, kind = el_in * a, LayerKind.ACTIVATION
    elif base in ("relu", "threshold", "hardtanh"):
        kind = LayerKind.ACTIVATION
    elif "pool" in base:
        kind = LayerKind.POOL
    elif "norm" in base:
        saved, kind = el_in * a, LayerKind.NORM
    elif "cross_entropy" in base or "nll_loss" in base or "log_softmax" in base:
        saved, kind = el_in * 4.0, LayerKind.LOSS
    net.other(
        LayerCost(
            name=name,
            kind=kind,
            fwd_flop=float(max(el_out, el_in)),
            bwd_input_flop=float(max(el_out, el_in)),
            bwd_weight_flop=0.0,
            params=0,
            fwd_bytes=(el_in + el_out) * a,
            bwd_bytes=(el_in + 2 * el_out) * a,
            activation_bytes=saved,
            output_shape=_shape(out_t[0]),
        )
    )


__all__ = ["GemmShape", "from_torch"]
