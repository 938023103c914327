"""``layer_time_of`` (issue 27, session 24): a new layer's :class:`LayerTime` without the
frozen ``__init__``'s twelve ``__setattr__`` calls must be the value ``__init__`` makes: every
zoo model's layers priced with the switch ``layer_time.FAST_BUILD`` on and off (two GPUs, 16-bit
and FP8, autocast casts and host dispatch on) give the same times, their dictionaries' keys in
the same order with values of the same type and value."""

from __future__ import annotations

from typing import Any

import pytest

from perfmodel.compute import ComputeModel, ComputeParams, layer_time
from perfmodel.compute.layer_time import LayerTime, layer_time_of
from perfmodel.hardware import get_gpu
from perfmodel.workload import build_model, zoo
from perfmodel.workload.kernels import Fp8Recipe, Fusion, KernelRecipe

#: (GPU, precision, kernel recipe, autocast casts each step)
CASES = (
    ("A100-SXM4-80GB", "bf16", KernelRecipe(), False),
    ("A100-SXM4-80GB", "fp16", KernelRecipe(), True),
    ("H100-SXM5-80GB", "fp8", KernelRecipe(fusion=Fusion.TE, fp8=Fp8Recipe.TE_DELAYED), False),
)


def _priced(fast: bool, monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    monkeypatch.setattr(layer_time, "FAST_BUILD", fast)
    out: list[Any] = []
    for gpu_name, precision, kernels, casts in CASES:
        gpu = get_gpu(gpu_name)
        params = ComputeParams.for_gpu(gpu, cast_weights_each_step=casts, host_dispatch_s=3.5e-5)
        model = ComputeModel(gpu, params)  # a fresh model: every layer priced anew
        for info in zoo.list_models():
            try:
                wl = build_model(info.name, batch_size=2, precision=precision, kernels=kernels)
                times = [model.layer_time(la, precision) for la in wl.layers]
            except Exception as exc:
                out.append((info.name, type(exc), str(exc)))
                continue
            out.append([(t, [(k, type(v), v) for k, v in vars(t).items()]) for t in times])
    return out


def test_zoo_prices_built_fast_equal_the_direct_build(monkeypatch: pytest.MonkeyPatch) -> None:
    fast = _priced(True, monkeypatch)
    direct = _priced(False, monkeypatch)
    assert sum(isinstance(v, list) for v in fast) > 150  # the models price
    assert fast == direct


def test_fast_path_skips_init(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every field in declaration order: no ``__init__``; a missing or misplaced field:
    ``__init__`` (and its error for a missing one)."""
    values = {name: 1.0 for name in layer_time._FIELDS}

    def refuse(*_a: Any, **_k: Any) -> None:
        raise AssertionError("__init__ called")

    monkeypatch.setattr(LayerTime, "__init__", refuse)
    assert vars(layer_time_of(**values)) == values
    with pytest.raises(AssertionError, match="__init__ called"):
        layer_time_of(**dict(reversed(values.items())))
    monkeypatch.undo()
    values.pop("cast_fwd_s")
    values.pop("fwd_s")
    with pytest.raises(TypeError):
        layer_time_of(**values)


def test_matmul_dtype_of_a_string_precision_is_the_enums() -> None:
    """``Precision`` is a ``str`` enum: the string ``"fp8"`` reads the same formats as
    ``Precision.FP8`` (rev24-a: the table lookup took the string, the FP8 test did not, so a
    fused attention under ``"fp8"`` read FP8 instead of BF16)."""
    from perfmodel.compute.layer_time import class_key, layer_matmul_dtype
    from perfmodel.dtypes import Precision
    from perfmodel.workload.layers import LayerCost, LayerKind

    att = LayerCost(name="attn", kind=LayerKind.ATTENTION, fwd_flop=1.0, bwd_input_flop=1.0,
                    bwd_weight_flop=0.0, params=0, fwd_bytes=1.0, bwd_bytes=1.0,
                    activation_bytes=1.0, output_shape=(1,))  # fmt: skip
    for p in Precision:
        assert layer_matmul_dtype(att, p.value) is layer_matmul_dtype(att, p)  # type: ignore[arg-type]
        assert class_key(att, p.value) == class_key(att, p)  # type: ignore[arg-type]
