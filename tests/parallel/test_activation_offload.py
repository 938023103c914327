"""Activation CPU offloading (``--software-option activation_offload_layers``, Megatron-Core
``cpu_offloading_num_layers``): the offloaded blocks' saved activations leave the GPU's peak
(Transformer Engine ``get_cpu_offload_context``: ``(num_layers - n) x T``); Megatron-Core's
conditions (no pipeline parallelism, no recomputation, fewer than the model's layers) are typed
errors. Each test failed before the offload was modelled (the option did not exist)."""

from __future__ import annotations

import pytest
from tiny_llama import LLAMA, scenario

from perfmodel.api import predict, resolve
from perfmodel.errors import ConfigError
from perfmodel.parallel.stage_memory import offloaded_activation_bytes
from perfmodel.pipeline.inputs import zoo_workload


def test_offloaded_blocks_leave_the_activation_peak() -> None:
    """Hand-computed: 8 GPUs of data parallelism, one micro-batch of 2 in flight; offloading
    3 of the 4 identical Llama blocks removes 3 blocks' saved bytes (each block's layers'
    ``activation_bytes``, summed from the zoo workload), and nothing else."""
    base = predict(scenario(), baseline=False)
    off = predict(scenario(software_options={"cpu_offloading_num_layers": 3}), baseline=False)
    r = resolve(scenario())
    wl = zoo_workload("llama", 2, r.precision, 1, False, tuple(sorted(LLAMA.items())))
    block = sum(la.activation_bytes for la in wl.layers if la.block == 0)
    assert block > 0
    assert base.memory.activations_bytes - off.memory.activations_bytes == pytest.approx(3 * block)
    assert off.memory.weights_bytes == base.memory.weights_bytes
    assert off.plan["recipe"]["activation_offload_layers"] == 3
    # 3 of 4 blocks: one block's activations on the GPU at a time, so no copy overlaps compute
    # (TE warns of it) and every offloaded block waits for its PCIe copies
    # (tests/parallel/test_activation_offload_time.py times the schedule)
    assert off.iteration_time_s > base.iteration_time_s


def test_fp8_offload_counts_the_fp8_inputs() -> None:
    """Under Transformer Engine FP8 a block keeps FP8 GEMM inputs: the offloaded share is of
    what the block keeps, so offloading every block but one leaves one such block."""
    kw = dict(precision="fp8")
    base = predict(scenario(**kw), baseline=False).memory.activations_bytes
    three = predict(
        scenario(**kw, software_options={"activation_offload_layers": 3}), baseline=False
    )
    one_block = (base - three.memory.activations_bytes) / 3
    bf16 = predict(scenario(), baseline=False).memory.activations_bytes
    bf16_3 = predict(scenario(software_options={"activation_offload_layers": 3}), baseline=False)
    assert one_block < (bf16 - bf16_3.memory.activations_bytes) / 3  # FP8 inputs: smaller


def test_megatron_core_conditions_are_typed_errors() -> None:
    with pytest.raises(ConfigError, match="needs pp=1"):
        predict(scenario(pp=2, software_options={"activation_offload_layers": 1}), baseline=False)
    with pytest.raises(ConfigError, match="needs recompute=none"):
        predict(
            scenario(recompute="full", software_options={"activation_offload_layers": 1}),
            baseline=False,
        )
    with pytest.raises(ConfigError, match="fewer than the model's 4 transformer blocks"):
        predict(scenario(software_options={"activation_offload_layers": 4}), baseline=False)
    with pytest.raises(ConfigError, match="whole number >= 0"):
        predict(scenario(software_options={"activation_offload_layers": "two"}), baseline=False)
    for eager in ("pytorch-ddp", "fsdp", "torchtitan"):  # TE's offload context only
        with pytest.raises(ConfigError, match="needs a Transformer Engine stack") as err:
            predict(
                scenario(software=eager, software_options={"activation_offload_layers": 1}),
                baseline=False,
            )
        assert err.value.where == "--software-option activation_offload_layers"


def test_no_blocks_offloaded_is_nothing() -> None:
    r = resolve(scenario())
    wl = zoo_workload("llama", 2, r.precision, 1, False, tuple(sorted(LLAMA.items())))
    assert offloaded_activation_bytes(wl.layers, 0, 2) == 0.0
