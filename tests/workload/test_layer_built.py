"""``LayerCost.built`` and ``LayerCost.changed`` (issue 27, session 23): the network builders'
constructor and ``dataclasses.replace`` without the frozen ``__init__``'s 30 ``__setattr__``
calls must leave the layer ``__init__`` leaves: every zoo model, built with the switch
``layers.FAST_BUILD`` on and off, has the same layers, their dictionaries' keys in the same
order with values of the same type and value."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import pytest

from perfmodel._memo import BoundedMemo
from perfmodel.workload import build_model, layers, zoo
from perfmodel.workload.kernels import Fp8Recipe, Fusion, KernelRecipe
from perfmodel.workload.layers import LayerCost, LayerKind

#: Kernel recipes that reach every builder path: eager, Transformer Engine with FP8 casts
#: (``_fp8_cast``, ``_fp8_norm``, the FP8 all-gather), compiled blocks with FSDP2's copies.
KERNELS = (
    KernelRecipe(),
    KernelRecipe(fusion=Fusion.TE, fp8=Fp8Recipe.TE_DELAYED),
    KernelRecipe(fusion=Fusion.COMPILE, fsdp_copies=True, fsdp_step_share=0.5),
)


def _fields(la: LayerCost) -> list[tuple[str, type, Any]]:
    return [(k, type(v), v) for k, v in vars(la).items()]


def _zoo(fast: bool, monkeypatch: pytest.MonkeyPatch) -> dict[tuple[Any, ...], list[Any]]:
    monkeypatch.setattr(layers, "FAST_BUILD", fast)
    monkeypatch.setattr(zoo, "_WHOLE_BUILDS", BoundedMemo(16))  # no build shared across runs
    monkeypatch.setattr(zoo, "_WHOLE_COUNTS", BoundedMemo(256))
    out: dict[tuple[Any, ...], list[Any]] = {}
    for info in zoo.list_models():
        for tp, sp in ((1, False), (2, True)):
            for kernels in KERNELS:
                key = (info.name, tp, sp, kernels)
                try:
                    wl = build_model(
                        info.name,
                        batch_size=2,
                        precision="fp8" if kernels.fp8 else "bf16",
                        tp=tp,
                        sequence_parallel=sp,
                        kernels=kernels,
                    )
                except Exception as exc:
                    out[key] = [type(exc), str(exc)]
                    continue
                out[key] = [wl, [_fields(la) for la in wl.layers]]
    return out


def test_zoo_layers_built_fast_equal_the_direct_build(monkeypatch: pytest.MonkeyPatch) -> None:
    fast = _zoo(True, monkeypatch)
    direct = _zoo(False, monkeypatch)
    assert fast.keys() == direct.keys()
    built = sum(isinstance(v[0], zoo.Workload) for v in fast.values())
    assert built > 200  # the models build (a refusal is compared as a refusal)
    for key, got in fast.items():
        assert got == direct[key], key


LAYER = {
    "name": "fc",
    "kind": LayerKind.LINEAR,
    "fwd_flop": 1.0,
    "bwd_input_flop": 2.0,
    "bwd_weight_flop": 3.0,
    "params": 4,
    "fwd_bytes": 5.0,
    "bwd_bytes": 6.0,
    "activation_bytes": 7.0,
    "output_shape": (2, 3),
    "block": 1,
    "kernels": 2,
}


def test_built_and_changed_are_init_and_replace() -> None:
    direct = LayerCost(**LAYER)
    fast = LayerCost.built(**LAYER)
    assert fast == direct and hash(fast) == hash(direct) and repr(fast) == repr(direct)
    assert _fields(fast) == _fields(direct)
    copy = direct.relabelled("fc2", 3)  # a copy's link to its source is no field
    for la in (direct, copy):
        want = replace(la, params=9, keep_16bit=True)
        got = la.changed(params=9, keep_16bit=True)
        assert _fields(got) == _fields(want)
        assert got.cost_source() is got


@dataclass(frozen=True)
class _Shouted(LayerCost):
    """A subclass whose ``__post_init__`` (which the fast paths would skip) upper-cases the
    name: ``built`` and ``changed`` must be its ``__init__`` and ``replace``."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "name", self.name.upper())


def test_built_and_changed_of_a_subclass_are_init_and_replace() -> None:
    direct = _Shouted(**LAYER)
    fast = _Shouted.built(**LAYER)
    assert type(fast) is _Shouted and _fields(fast) == _fields(direct)
    assert fast.name == LAYER["name"].upper()
    got, want = direct.changed(name="fc3", params=9), replace(direct, name="fc3", params=9)
    assert type(got) is _Shouted and _fields(got) == _fields(want) and got.name == "FC3"


@pytest.mark.parametrize(
    "bad",
    [
        {k: v for k, v in LAYER.items() if k != "params"},  # a field without default missing
        {**LAYER, "param": 4},  # no such field
    ],
)
def test_built_refuses_as_init(bad: dict[str, Any]) -> None:
    with pytest.raises(TypeError) as direct:
        LayerCost(**bad)
    with pytest.raises(TypeError) as fast:
        LayerCost.built(**bad)
    assert str(fast.value) == str(direct.value)
    with pytest.raises(TypeError, match="param"):
        LayerCost(**LAYER).changed(param=4)
