"""The prediction API and the predict CLI on real catalogue systems and zoo models."""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path

import pytest

from perfmodel.api import Scenario, baseline_scenario, predict, predict_curve
from perfmodel.cli import main
from perfmodel.errors import ConfigError, InfeasiblePlanError
from perfmodel.search.sweep import REPORT_COLUMNS

GPT = {"layers": 8, "hidden": 1024, "heads": 16, "seq_len": 512, "vocab": 32000}


def _gpt(**kw: object) -> Scenario:
    base = dict(
        system="dgx-a100",
        model="gpt",
        model_args=GPT,
        global_batch=32,
        precision="bf16",
        optimizer="adam",
        fidelity="analytic",
        software="megatron",
    )
    base.update(kw)
    return Scenario(**base)  # type: ignore[arg-type]


def test_scenario_round_trip_and_hash() -> None:
    sc = _gpt(tp=2, pp=2)
    d = sc.to_dict()
    assert Scenario.from_dict(d) == sc
    assert Scenario.from_dict(d).content_hash() == sc.content_hash()
    assert replace(sc, tp=4).content_hash() != sc.content_hash()
    with pytest.raises(ConfigError, match="unknown key 'batchsize'"):
        Scenario.from_dict({"batchsize": 3}, where="x.toml")
    assert Scenario.from_dict({"plan": "dp=2,tp=4,microbatch=2"}).microbatch == 2


def test_predict_report_has_contract_keys() -> None:
    r = predict(
        Scenario(
            system="dgx1-v100",
            model="resnet50",
            batch_per_gpu=32,
            fidelity="analytic",
            dataset_size=1_281_167,
        )
    )
    d = r.to_dict()
    assert len(REPORT_COLUMNS) == 13  # the docs/design.md contract keys (+ printed_notes)
    for key in REPORT_COLUMNS:
        assert key in d
    assert 0 < d["mfu"] < 1
    assert d["epoch_time_s"] == pytest.approx(-(-1_281_167 // 256) * d["iteration_time_s"])
    assert 1 < d["speedup"] <= 8 + 1e-9
    assert d["scaling_efficiency"] == pytest.approx(d["speedup"] / 8)
    b = r.breakdown
    assert b.total_s == pytest.approx(r.iteration_time_s, rel=1e-9)


@pytest.mark.parametrize("software", ["pytorch-ddp", "horovod", "tf-mirrored"])
def test_simulated_agrees_with_analytic_without_contention(software: str) -> None:
    sc = Scenario(system="dgx1-v100", gpus=4, model="resnet50", batch_per_gpu=32, software=software)
    a = predict(replace(sc, fidelity="analytic"))
    s = predict(sc)
    assert s.iteration_time_s == pytest.approx(a.iteration_time_s, rel=0.05)
    assert s.fidelity.startswith("simulated") and a.fidelity == "analytic"


@pytest.mark.parametrize(
    "kw,match",
    [
        (dict(tp=3), r"tp\*pp=3 does not divide the 8 GPUs"),
        (dict(tp=2, pp=2, dp=3), r"dp\*tp\*pp = 3\*2\*2 = 12 but 8"),
        (dict(global_batch=30), r"global batch 30 does not split over dp=8"),
        (
            dict(pp=8, microbatch=1, model_args={**GPT, "layers": 4}),
            r"8 pipeline chunks but model gpt has only 4 blocks",
        ),
        (
            dict(tp=8, model_args={**GPT, "hidden": 1536, "heads": 12}),
            r"tp values that fit: \[1, 2, 3, 4, 6, 12\]",
        ),
        (dict(pp=2, microbatch=3), r"micro-batch size 3 does not divide"),
        (dict(gpus=16), r"use nodes=2"),
    ],
)
def test_infeasible_plans_say_what_fits(kw: dict, match: str) -> None:
    with pytest.raises(InfeasiblePlanError, match=match):
        predict(_gpt(**kw))


def test_pipeline_layers_must_divide() -> None:
    with pytest.raises(InfeasiblePlanError, match=r"do not divide the 8 layers.*\[1, 2, 4, 8\]"):
        predict(
            _gpt(pp=2, gpus=6, schedule="interleaved", interleave=3, microbatch=1, global_batch=36)
        )


def test_out_of_memory_is_reported_in_curves() -> None:
    sc = Scenario(
        system="dgx1-v100",
        model="gpt2_xl",
        global_batch=64,
        precision="fp16",
        optimizer="adam",
        fidelity="analytic",
    )
    reports = predict_curve(sc, [1, 8])
    assert reports[0].fits_in_memory is False  # 1.5 B params with Adam on one 16 GB V100
    assert reports[0].memory_per_gpu_bytes > 16e9


def test_zero_and_fsdp_reduce_memory() -> None:
    sc = _gpt(system="dgx-a100", software="pytorch-ddp")
    mem = [
        predict(replace(sc, software=s)).memory_per_gpu_bytes
        for s in ("pytorch-ddp", "deepspeed-zero1", "deepspeed-zero2", "deepspeed-zero3", "fsdp")
    ]
    assert mem[0] > mem[1] > mem[2] > mem[3]
    assert mem[4] < mem[2]  # FSDP shards like ZeRO-3 (DeepSpeed's 1 GB buckets aside)


def test_recompute_trades_memory_for_time() -> None:
    unfused = {**GPT, "flash_attention": False}  # selective recompute drops the s x s tensors
    r = {
        rc: predict(_gpt(tp=2, pp=2, microbatch=2, recompute=rc, model_args=unfused))
        for rc in ("none", "selective", "full")
    }
    assert (
        r["none"].memory.activations_bytes
        > r["selective"].memory.activations_bytes
        > r["full"].memory.activations_bytes
    )
    assert r["none"].iteration_time_s < r["full"].iteration_time_s


def test_tensor_parallel_across_servers_costs_more() -> None:
    inside = predict(_gpt(nodes=2, tp=8, global_batch=32))
    across = predict(_gpt(nodes=2, tp=8, global_batch=32, placement="dp,pp,tp"))
    assert across.exposed_comm_time_s > inside.exposed_comm_time_s


def test_baseline_is_one_gpu_of_the_same_system() -> None:
    sc = _gpt(tp=2, pp=2)
    b = baseline_scenario(sc)
    assert (b.gpus, b.tp, b.pp, b.system) == (1, 1, 1, "dgx-a100")
    assert b.batch_per_gpu == 32 // 8  # global batch over the GPUs


def test_cli_json_and_scenario_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    resnet18 = ["predict", "--system", "dgx1-v100", "--model", "resnet18", "--batch-per-gpu", "32"]
    analytic = [*resnet18, "--fidelity", "analytic"]
    rc = main([*analytic, "--gpus", "2", "--json", "--trace", str(tmp_path / "t.json")])
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    assert out["num_gpus"] == 2 and out["fits_in_memory"] is True
    assert json.loads((tmp_path / "t.json").read_text())["traceEvents"]
    f = tmp_path / "s.toml"
    f.write_text(
        'system = "dgx1-v100"\nmodel = "resnet18"\nbatch_per_gpu = 32\nfidelity = "analytic"\nplan = "dp=4"\ngpus = 4\n'
    )
    assert main(["predict", str(f), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["num_gpus"] == 4
    assert main([*analytic, "--gpus", "1,2", "--json", "--plot", str(tmp_path / "c.png")]) == 0
    curve = json.loads(capsys.readouterr().out)
    assert [c["num_gpus"] for c in curve] == [1, 2] and (tmp_path / "c.png").exists()
    assert main([*resnet18, "--plan", "dp=3"]) == 2
    assert "dp=8" in capsys.readouterr().err


def test_mlp_weight_splitting_dettmers_style() -> None:
    """Tensor parallelism of an MLP (list-valued model argument) shards the weights."""
    base = Scenario(
        system="dgx1-v100",
        gpus=4,
        model="mlp",
        model_args={"widths": [1024, 4096, 4096, 10]},
        batch_per_gpu=64,
        fidelity="analytic",
    )
    r1 = predict(base)
    r4 = predict(replace(base, tp=4))
    assert r4.memory.weights_bytes == pytest.approx(r1.memory.weights_bytes / 4, rel=0.05)
    assert r4.breakdown.exposed_comm_s.get("tp", 0.0) > 0
    assert Scenario.from_dict(base.to_dict()).content_hash() == base.content_hash()


def test_calibration_profile_changes_the_prediction() -> None:
    prof = Path(__file__).resolve().parents[1] / "calibration" / "h100-sxm5-80gb.json"
    if not prof.exists():
        pytest.skip("calibration profile not shipped")
    sc = Scenario(
        system="dgx-h100",
        gpus=8,
        model="resnet50",
        batch_per_gpu=64,
        precision="bf16",
        fidelity="analytic",
    )
    assert (
        predict(replace(sc, calibration=str(prof))).iteration_time_s != predict(sc).iteration_time_s
    )


@pytest.mark.parametrize("slow,fast", [("eth-10g", "ib-hdr"), ("eth-25g", "eth-100g")])
def test_faster_network_never_slows_a_real_plan(slow: str, fast: str) -> None:
    base = Scenario(
        system="custom",
        gpu="V100-SXM2-16GB",
        gpus_per_node=4,
        intra_node="nvlink2",
        nodes=2,
        model="resnet50",
        batch_per_gpu=32,
        fidelity="analytic",
    )
    t_slow = predict(replace(base, network=slow)).iteration_time_s
    t_fast = predict(replace(base, network=fast)).iteration_time_s
    assert t_fast <= t_slow


def test_crossbow_learners_raise_small_batch_throughput() -> None:
    """Crossbow (Koliousis et al. 2019): several small-batch learners keep a GPU busy."""
    base = Scenario(
        system="pcie-8xtitanx",
        gpus=8,
        model="resnet32",
        batch_per_gpu=32,
        software="crossbow",
        fidelity="analytic",
    )
    one = predict(base)
    four = predict(replace(base, learners_per_gpu=4))
    assert four.samples_per_step == 4 * one.samples_per_step == 4 * 8 * 32
    assert four.throughput_samples_per_s > one.throughput_samples_per_s
    assert four.memory.weights_bytes == pytest.approx(
        4 * one.memory.weights_bytes
    )  # a model per learner
    g = predict(replace(base, batch_per_gpu=None, global_batch=1024, learners_per_gpu=4))
    assert g.samples_per_step == 1024
    with pytest.raises(InfeasiblePlanError, match=r"8 replicas x 4 learners"):
        predict(replace(base, batch_per_gpu=None, global_batch=1000, learners_per_gpu=4))


def test_yaml_scenario_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("yaml")
    f = tmp_path / "s.yaml"
    f.write_text(
        "system: dgx1-v100\nmodel: resnet18\nglobal_batch: 128\ngpus: 4\nfidelity: analytic\nsoftware: horovod\n"
    )
    assert main(["predict", str(f), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["samples_per_step"] == 128 and out["plan"]["software"] == "horovod"
    f.write_text("system: dgx1-v100\nmodel: resnet18\nbatch_size: 128\n")
    assert main(["predict", str(f)]) == 2
    assert "unknown key 'batch_size'" in capsys.readouterr().err


def test_predict_can_skip_the_baseline() -> None:
    sc = _gpt(tp=2, pp=2)
    full = predict(sc)
    fast = predict(sc, baseline=False)
    assert full.speedup is not None and full.scaling_efficiency is not None
    assert fast.speedup is None and fast.scaling_efficiency is None
    assert fast.iteration_time_s == full.iteration_time_s
    assert fast.to_dict()["speedup"] is None
    # the cached baseline gives the same speedup as a fresh one
    again = predict(sc)
    assert again.speedup == full.speedup
    base = predict(baseline_scenario(sc), baseline=False)
    assert full.speedup == pytest.approx(
        full.throughput_samples_per_s / base.throughput_samples_per_s
    )


def test_calibration_profile_rewritten_on_disk_is_read_again(tmp_path: Path) -> None:
    """The profile caches key on the file's modification time, not only its path."""
    src = Path(__file__).resolve().parents[1] / "calibration" / "h100-sxm5-80gb.json"
    if not src.exists():
        pytest.skip("H100 profile not in this checkout")
    prof = tmp_path / "h100.json"
    data = json.loads(src.read_text())
    prof.write_text(json.dumps(data))
    sc = Scenario(
        system="dgx-h100",
        gpus=2,
        model="resnet50",
        batch_per_gpu=32,
        fidelity="analytic",
        calibration=str(prof),
    )
    before = predict(sc)
    data["compute_params"]["memory_efficiency"] /= 4
    data["compute_params"]["tensor_core_efficiency"] /= 4
    data["compute_params"]["cuda_core_efficiency"] /= 4
    prof.write_text(json.dumps(data))
    st = prof.stat()
    os.utime(prof, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))  # a later write, whatever the clock
    after = predict(sc)
    assert after.iteration_time_s > 1.5 * before.iteration_time_s
    # the baseline (speedup) follows the rewritten profile too
    assert after.speedup == pytest.approx(before.speedup, rel=0.2)
    assert predict(sc).iteration_time_s == after.iteration_time_s


def test_predict_help_names_every_software_preset(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from perfmodel.parallel.software import PRESETS

    monkeypatch.setenv("COLUMNS", "1000")  # no wrapping at the hyphens of preset names
    with pytest.raises(SystemExit):
        main(["predict", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    for name in PRESETS:
        assert name.replace("zero2", "zero1..3").replace("zero3", "zero1..3") in text


def test_fidelity_is_parsed_like_every_other_choice() -> None:
    sc = Scenario(system="dgx1-v100", gpus=2, model="resnet18", batch_per_gpu=32)
    assert predict(replace(sc, fidelity="Analytic"), baseline=False).fidelity == "analytic"
    with pytest.raises(
        ConfigError,
        match=r"unknown fidelity 'exact' \(scenario.fidelity\); expected one of simulated, analytic",
    ) as info:
        predict(replace(sc, fidelity="exact"))
    assert info.value.where == "scenario.fidelity"


def test_speedup_follows_the_batch_key_strong_or_weak_scaling():
    """--global-batch fixes the work per step (strong scaling): the speedup is the throughput
    ratio to the curve's 1-GPU row. --batch-per-gpu fixes each GPU's batch (weak scaling)."""
    import pytest

    from perfmodel.api import Scenario, predict_curve

    base = dict(system="dgx-a100", model="resnet50", precision="bf16", fidelity="analytic")
    strong = predict_curve(Scenario(**base, global_batch=256), [1, 2, 8])
    for r in strong:
        assert r.speedup == pytest.approx(
            r.throughput_samples_per_s / strong[0].throughput_samples_per_s
        )
    assert strong[-1].scaling_efficiency < 0.8  # 32 images per GPU: the host sets the step
    weak = predict_curve(Scenario(**base, batch_per_gpu=32), [1, 8])
    assert weak[-1].speedup == pytest.approx(
        weak[-1].throughput_samples_per_s / weak[0].throughput_samples_per_s
    )
    assert weak[-1].speedup > strong[-1].speedup
