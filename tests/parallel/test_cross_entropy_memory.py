"""Transformer Engine's in-place cross entropy (``--software-option cross_entropy=te``,
Megatron-Core ``cross_entropy_fusion_impl='te'``, which Megatron-Bridge's performance scripts
set): the loss keeps the 16-bit logits with their gradient written in place. The test failed
before ``CrossEntropy.TE_FUSED`` existed (the option did not)."""

from __future__ import annotations

import pytest
from tiny_llama import LLAMA, scenario

from perfmodel.api import predict, resolve
from perfmodel.pipeline.inputs import zoo_workload


def test_te_fused_cross_entropy_keeps_16_bit_logits_in_place() -> None:
    """``cross_entropy=te`` (Megatron-Bridge's ``cross_entropy_fusion_impl``): the loss keeps
    the bf16 logits (2 B per logit, not the zoo's 4 B FP32 probabilities) and no pair of the
    LM head's output size is live in backward. Hand-computed from the zoo's layers: activations
    fall by half the loss layer's count; the largest transient pair becomes the largest other
    layer output's, and the workspace (with 5 % fragmentation over the total) follows."""
    from perfmodel.parallel.lowering import _elements
    from perfmodel.workload.layers import LayerKind
    from perfmodel.workload.memory import FRAGMENTATION

    base = predict(scenario(), baseline=False).memory
    te = predict(scenario(software_options={"cross_entropy_fusion_impl": "te"}), baseline=False)
    assert te.plan["recipe"]["cross_entropy"] == "te-fused"
    r = resolve(scenario())
    wl = zoo_workload("llama", 2, r.precision, 1, False, tuple(sorted(LLAMA.items())))
    loss = sum(la.activation_bytes for la in wl.layers if la.kind is LayerKind.LOSS)
    d_acts = loss / 2  # 4 -> 2 bytes per logit
    assert base.activations_bytes - te.memory.activations_bytes == pytest.approx(d_acts)

    def pair(keep) -> float:  # type: ignore[no-untyped-def]
        return max(2.0 * _elements(la.output_shape) * 2 for la in wl.layers if keep(la))

    peak_all = pair(lambda la: True)
    peak_te = pair(lambda la: not la.name.endswith("lm_head"))
    assert peak_all > peak_te  # the logits pair was the largest
    d_peak = peak_all - peak_te
    d_ws = d_peak * (1 + FRAGMENTATION) + FRAGMENTATION * d_acts
    assert base.workspace_bytes - te.memory.workspace_bytes == pytest.approx(d_ws)
    assert te.iteration_time_s == pytest.approx(
        predict(scenario(), baseline=False).iteration_time_s
    )
