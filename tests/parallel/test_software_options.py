"""``Scenario.software_options`` / ``--software-option``: a stack's knobs set beside its preset
(NeMo's launcher configs turn userbuffers, the gradient-sync dtype and buckets per model), and
the ``nemo`` preset as NeMo 24.07 runs (issue 24, wave 2)."""

from __future__ import annotations

import json

import pytest

from perfmodel.api import Scenario, predict, resolve
from perfmodel.cli import main
from perfmodel.errors import ConfigError
from perfmodel.parallel.software import (
    SOFTWARE_OPTIONS,
    get_preset,
    software_option_key,
    with_software_options,
)
from perfmodel.units import MiB

GPT = {"layers": 4, "hidden": 4096, "heads": 32, "seq_len": 2048, "vocab": 51200}


def _sc(**kw: object) -> Scenario:
    base = dict(system="dgx-h100", nodes=2, model="gpt", model_args=GPT, global_batch=32,
                microbatch=1, precision="bf16", software="nemo", tp=4, pp=2,
                optimizer="adam", fidelity="analytic")  # fmt: skip
    base.update(kw)
    return Scenario(**base)  # type: ignore[arg-type]


def test_aliases_name_the_same_knob() -> None:
    assert software_option_key("ub_tp_comm_overlap") == "tp_comm_overlap"
    assert software_option_key("Grad-Reduce-In-FP32") == "grad_reduce_fp32"
    assert software_option_key("bucket_cap_mb") == "bucket_bytes"
    with pytest.raises(ConfigError, match="unknown option 'grad_sync_fp32'"):
        software_option_key("grad_sync_fp32")
    assert set(SOFTWARE_OPTIONS) == {
        "tp_comm_overlap",
        "overlap_grad_comm",
        "overlap_param_gather",
        "grad_reduce_fp32",
        "fp8_params",
        "bucket_bytes",
        "optimizer_dtype",
        "activation_offload_layers",
        "cross_entropy",
        "param_owners",
        "apex_rms_norm",
        "fused_rope",
        "processes",
        "pipeline_max_zero",
    }
    assert software_option_key("cross_entropy_fusion_impl") == "cross_entropy"
    assert software_option_key("overlap_sync_param") == "param_owners"
    assert software_option_key("optim.dtype") == software_option_key("exp_avg_dtype")
    assert software_option_key("optim_dtype") == "optimizer_dtype"


def test_cross_entropy_takes_megatron_core_names() -> None:
    from perfmodel.parallel.stack_choices import CrossEntropy

    p = with_software_options(get_preset("megatron-core"), {"cross_entropy_fusion_impl": "te"})
    assert p.cross_entropy is CrossEntropy.TE_FUSED
    native = with_software_options(get_preset("megatron-core"), {"cross_entropy": "native"})
    assert native.cross_entropy is CrossEntropy.DEFAULT
    with pytest.raises(ConfigError, match="'flash'"):
        with_software_options(get_preset("megatron-core"), {"cross_entropy": "flash"})


def test_optimizer_dtype_is_parsed_once_and_checked() -> None:
    """``optimizer_dtype`` takes a dtype name (NeMo's ``bf16``, PyTorch's ``torch.bfloat16``)
    and becomes a :class:`DType` on the preset; anything but fp32/bf16/fp16 is refused, naming
    the value."""
    from perfmodel.dtypes import DType

    for text in ("bf16", "BF16", "torch.bfloat16", "bfloat16"):
        p = with_software_options(get_preset("nemo"), {"optim.dtype": text})
        assert p.optimizer_dtype is DType.BF16
    assert p.sources[-1] == "scenario software option optimizer_dtype=bf16"
    assert get_preset("nemo").optimizer_dtype is DType.FP32
    with pytest.raises(ConfigError, match="optimizer_dtype must be one of fp32, bf16, fp16"):
        with_software_options(get_preset("nemo"), {"optimizer_dtype": "fp8"})
    with pytest.raises(ConfigError, match="'fp12'"):
        with_software_options(get_preset("nemo"), {"optimizer_dtype": "fp12"})


def test_values_are_typed_and_checked() -> None:
    p = with_software_options(get_preset("nemo"), {"bucket_mb": "220", "fp8_params": "yes"})
    assert p.bucket_bytes == 220 * MiB and p.bucket_params is None and p.fp8_params is True
    assert p.sources[-1] == "scenario software option bucket_bytes=220 MiB, fp8_params=True"
    with pytest.raises(ConfigError, match="tp_comm_overlap must be true or false"):
        with_software_options(get_preset("nemo"), {"tp_comm_overlap": "maybe"})
    with pytest.raises(ConfigError, match="positive size in MiB"):
        with_software_options(get_preset("nemo"), {"bucket_mb": -1})
    assert with_software_options(get_preset("nemo"), {}) is get_preset("nemo")


def test_tp_comm_overlap_off_puts_tp_on_the_compute_stream() -> None:
    on = predict(_sc(), baseline=False)
    off_sc = _sc(software_options={"ub_tp_comm_overlap": False})
    off = predict(off_sc, baseline=False)
    assert resolve(off_sc).recipe.tp_comm.overlap is False  # type: ignore[union-attr]
    assert off.breakdown.exposed_comm_s["tp"] > 5 * on.breakdown.exposed_comm_s.get("tp", 0.0)
    assert off.iteration_time_s > on.iteration_time_s
    assert off_sc.content_hash() != _sc().content_hash()  # the report cache tells them apart


def test_grad_reduce_fp32_doubles_the_reduction_bytes() -> None:
    r16 = resolve(_sc()).recipe
    r32 = resolve(_sc(software_options={"grad_reduce_in_fp32": True})).recipe
    assert (r16.grad_reduce_bytes, r32.grad_reduce_bytes) == (2, 4)  # type: ignore[union-attr]


def test_scenario_round_trip_and_unknown_keys() -> None:
    sc = _sc(software_options={"tp_comm_overlap": False, "bucket_mb": 100})
    back = Scenario.from_dict(sc.to_dict())
    assert back == sc and back.content_hash() == sc.content_hash()
    with pytest.raises(ConfigError, match="software_options: unknown option"):
        predict(_sc(software_options={"nccl_channels": 8}), baseline=False)


def test_cli_flag(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["predict", "--system", "dgx-h100", "--nodes", "2", "--model", "gpt",
            *(a for k, v in GPT.items() for a in ("--model-arg", f"{k}={v}")),
            "--global-batch", "32", "--plan", "tp=4,pp=2,microbatch=1", "--precision", "bf16",
            "--software", "nemo", "--fidelity", "analytic", "--json",
            "--software-option", "tp_comm_overlap=false", "--software-option", "bucket_mb=50"]  # fmt: skip
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["scenario"]["software_options"] == {"tp_comm_overlap": "false", "bucket_mb": "50"}
    assert out["plan"]["recipe"]["tp_comm"]["overlap"] is False
    assert main([*argv[:-1], "tp_comm_overlap"]) == 2  # no '=': one line naming it
    assert "expected KEY=VALUE" in capsys.readouterr().err


def test_nemo_preset_runs_megatron_core_te_kernels_with_apex_adam() -> None:
    """NeMo 24.07 (NeMo 1.0): Megatron-Core GPT with Transformer Engine (mcore_gpt,
    transformer_engine in every launcher config), Apex distributed_fused_adam with bf16
    parameter sync (no fp8_params) and 16-bit master remainders."""
    rc = resolve(_sc(precision="fp8")).recipe
    assert rc is not None
    assert rc.fusion.value == "te" and rc.grad_clip.value == "l2norm"
    assert rc.fp8_params is False and rc.gather_bytes == 2 and rc.master_bytes == 2
    assert rc.bucket_bytes == 100 * MiB
