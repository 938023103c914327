"""Validation tier: today's large-model stacks (``../shared/data/modern.jsonl``).

Rows: torchtitan's December 2024 Llama 3.1 H100 tables (``--software torchtitan``), NVIDIA NeMo
24.07 FP8 DGX-H100 pre-training table (``--software nemo`` with each model's launcher config) and
the Megatron-Bridge 26.04.01 dense rows (``--software megatron-core``). Each mapped row is predicted with the analytic executor and its
signed error (predicted / measured tokens per second per GPU - 1) printed; nothing here feeds
the model (no constant is fitted to these rows).

Skipped, with the count printed:

* MoE rows (``ep > 1`` or experts): out of scope of issue 11 (no expert parallelism yet);
* context parallelism (``cp > 1``): not modelled;
* ``model_flops_per_gpu_per_s`` rows: the same runs as their ``tokens_per_s_per_gpu`` rows,
  restated with each source's own FLOP convention (not independent measurements);
* GPUs outside the H100 (the B200 rows are all MoE).

What the mapping assumes where the row is silent (stated per row in its ``note``): sequence
parallelism with every ``tp > 1`` (Megatron-Core recipes and torchtitan's TP plan both shard the
norms' sequence), no recomputation where it is "not stated", AdamW. torchtitan's
``torch.compile`` rows are predicted as their eager rows (compile's fusion is not modelled) and
its async-TP rows as plain TP; those rows say so in the table.
"""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

import pytest

from perfmodel.accuracy_modern import ModernResults, dense_results
from perfmodel.accuracy_modern import map_dense_row as map_row
from perfmodel.api import Scenario


@pytest.fixture(scope="module")
def modern_rows(shared_data: Path) -> list[dict]:
    path = shared_data / "modern.jsonl"
    if not path.exists():
        pytest.skip("modern.jsonl not found in the shared data")
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.fixture(scope="module")
def results(modern_rows: list[dict]) -> ModernResults:
    return dense_results(modern_rows)


def test_modern_rows_report(results: ModernResults) -> None:
    print("\n=== modern stacks (modern.jsonl, analytic executor) ===")
    print(f"{'row':46s} {'measured':>9s} {'predicted':>10s} {'error':>7s}  GiB/GPU")
    errs: dict[str, list[float]] = {}
    for d in results.done:
        row, tokens, gib, err = d.row, d.tokens_per_s_per_gpu, d.memory_gib, d.error
        group = row["id"].split("-")[0]
        errs.setdefault(group, []).append(err)
        print(f"{row['id']:46s} {row['measured']:9.0f} {tokens:10.0f} {err:+7.1%}  {gib:6.1f}")
    for group, e in sorted(errs.items()):
        print(
            f"{group:10s} n={len(e):2d}  median |err| {statistics.median(map(abs, e)):6.1%}  "
            f"median signed {statistics.median(e):+6.1%}  worst {max(e, key=abs):+6.1%}"
        )
    every = [x for e in errs.values() for x in e]
    if every:
        print(
            f"ALL        n={len(every):2d}  median |err| {statistics.median(map(abs, every)):6.1%}"
        )
    print(f"--- skipped {sum(results.skipped.values())} rows ---")
    for why, n in sorted(results.skipped.items(), key=lambda kv: -kv[1]):
        print(f"  {n:3d}  {why}")
    for rid, why in results.failed:
        print(f"  FAILED {rid}: {why}")


def test_every_mapped_modern_row_predicts(results: ModernResults) -> None:
    assert not results.failed, results.failed
    assert len(results.done) >= 15
    for d in results.done:
        assert math.isfinite(d.tokens_per_s_per_gpu) and d.tokens_per_s_per_gpu > 0


def test_every_mapped_modern_row_that_ran_fits(results: ModernResults) -> None:
    """Every row ran, so each is predicted to fit in its GPUs' memory (issue 24). Nemotron-4
    340B fits by its launcher config's bf16 optimizer state (86.5 GiB with FP32 Adam state)."""
    tight = [(d.row["id"], round(d.memory_gib, 1)) for d in results.done if not d.fits]
    assert not tight, tight


def test_nemotron_340b_fits_by_its_bf16_optimizer_state(modern_rows: list[dict]) -> None:
    """``nemotron_340b.yaml`` sets ``optim.dtype: bf16``: Apex distributed Adam keeps bf16
    moments and no master copy, 6 bytes per parameter (2 + 2 + 4 / dp, dp = 2) where FP32
    state would keep 9 (2 + 2 + 10 / 2). The first pipeline stage holds ~5.8e9 parameters
    (its 96 / 8 blocks' share over tp = 8, and the word embedding): FP32 state does not fit
    in 80 GiB, the config's bf16 state does."""
    from dataclasses import replace

    from perfmodel.api import predict

    row = next(r for r in modern_rows if r["id"] == "nemo2407-h100-nemotron-340b-tokens")
    sc = map_row(row)
    assert isinstance(sc, Scenario)
    assert sc.software_options["optimizer_dtype"] == "bf16" and sc.recompute == "selective"
    got = predict(sc, baseline=False)
    fp32 = predict(
        replace(sc, software_options={**sc.software_options, "optimizer_dtype": "fp32"}),
        baseline=False,
    )
    assert got.fits_in_memory and not fp32.fits_in_memory
    params = got.memory.grads_bytes / 2  # the bf16 gradient buffer: 2 bytes per parameter
    assert got.memory.optimizer_bytes == pytest.approx(4 * params / 2)
    assert fp32.memory.optimizer_bytes == pytest.approx(10 * params / 2)


def _median_abs_error(results: ModernResults) -> float:
    every = [d.error for d in results.done]
    return statistics.median(map(abs, every))


def test_modern_median_error_target(results: ModernResults) -> None:
    """Issue 24's target for today's dense stacks: median |error| <= 12 % (it was 37.9 % before
    issue 24's ceilings, kernels, recipes and pipeline fixes; every row was too fast)."""
    assert _median_abs_error(results) <= 0.12


def test_modern_median_error_does_not_regress(results: ModernResults) -> None:
    """The state when these rows were first mapped (median 49.6 %; 37.9 % once FP8 attention ran
    in BF16 and torchtitan's op-level selective AC was charged, issue 11; 26.7 % with each
    stack's kernels, issue 24): a guard against regressions, not a fit."""
    assert _median_abs_error(results) < 0.35


def test_mapping_keeps_what_the_row_says(modern_rows: list[dict]) -> None:
    row = next(r for r in modern_rows if r["id"] == "nemo2407-h100-llama2-70b-tokens")
    sc = map_row(row)
    assert isinstance(sc, Scenario)
    assert (sc.tp, sc.pp, sc.interleave, sc.microbatch, sc.global_batch) == (4, 4, 20, 1, 128)
    assert sc.model == "llama" and sc.model_args["kv_heads"] == 8
    assert sc.software == "nemo" and sc.precision == "fp8" and sc.sequence_parallel
    tt = next(r for r in modern_rows if r["id"] == "tt-2412-t1-8b-8g-fsdp")
    sc = map_row(tt)
    assert isinstance(sc, Scenario) and sc.software == "torchtitan"
    assert sc.recompute == "selective" and sc.global_batch == 16


def test_mapping_states_compile_and_the_fp8_recipe(modern_rows: list[dict]) -> None:
    """torchtitan's "+ torch.compile" rows run compiled; Megatron-Bridge's H100 FP8 rows state
    current scaling, its B200 rows MXFP8; NeMo 24.07's take the preset's (delayed scaling)."""
    by_id = {r["id"]: r for r in modern_rows}
    assert map_row(by_id["tt-2412-t1-8b-8g-fsdp"]).compile is None
    assert map_row(by_id["tt-2412-t1-8b-8g-fsdp-compile"]).compile is True
    mb = map_row(by_id["mbridge-260401-h100-llama3-70b-64g-gbs256-tokens"])
    assert mb.fp8_recipe == "te-current"
    nemo = map_row(by_id["nemo2407-h100-llama2-70b-tokens"])
    assert nemo.fp8_recipe is None and nemo.compile is None


def test_torchtitan_rows_run_on_their_500w_hbm2e_part(modern_rows: list[dict]) -> None:
    """torchtitan's Dec 2024 rows state 96 GB HBM2e H100s at a 500 W limit; NeMo's DGX H100."""
    tt = next(r for r in modern_rows if r["id"] == "tt-2412-t1-8b-8g-fsdp")
    nemo = next(r for r in modern_rows if r["id"] == "nemo2407-h100-llama2-70b-tokens")
    sc_tt, sc_nemo = map_row(tt), map_row(nemo)
    assert isinstance(sc_tt, Scenario) and isinstance(sc_nemo, Scenario)
    assert sc_tt.gpu == "H100-SXM5-96GB-500W" and sc_tt.system == "dgx-h100"
    assert sc_nemo.gpu is None


def test_nemo_2407_rows_take_their_launcher_configs(modern_rows: list[dict]) -> None:
    """NeMo 24.07 rows run the ``nemo`` preset (NeMo 1.0, Apex distributed Adam) with the
    knobs of their model's NeMo-Framework-Launcher 24.07 config (accuracy_modern.
    NEMO_2407_RECIPES): GPT-3 175B on 128 GPUs without userbuffers (gpt3/175b.yaml), on 512
    GPUs with them (NVIDIA's MLPerf v4.0 config the row links); Nemotron's FP32 gradient sync
    (no grad_sync_dtype), squared ReLU, RoPE, no biases, no dropout, untied embeddings; the
    340B's eight key/value groups."""
    by_id = {r["id"]: r for r in modern_rows}

    def sc(rid: str) -> Scenario:
        got = map_row(by_id[rid])
        assert isinstance(got, Scenario)
        return got

    g128, g512 = (
        sc("nemo2407-h100-gpt3-175b-128g-tokens"),
        sc("nemo2407-h100-gpt3-175b-512g-tokens"),
    )
    assert g128.software == g512.software == "nemo"
    assert g128.software_options["tp_comm_overlap"] is False
    assert g512.software_options["tp_comm_overlap"] is True
    n8 = sc("nemo2407-h100-nemotron-8b-tokens")
    assert n8.software_options == {
        "tp_comm_overlap": True,
        "grad_reduce_fp32": True,
        "bucket_bytes": 100,
    }
    assert n8.model_args == {
        "hidden": 4096, "layers": 32, "heads": 32, "vocab": 256000, "seq_len": 4096,
        "ffn_hidden": 16384, "kv_heads": 32, "mlp": "relu2", "position": "rope", "bias": False,
        "dropout": False, "tied_embeddings": False,
    }  # fmt: skip
    assert sc("nemo2407-h100-nemotron-340b-tokens").model_args["kv_heads"] == 8
    mb = sc("mbridge-260401-h100-llama3-70b-64g-gbs256-tokens")
    assert mb.software == "megatron-core"
    assert mb.software_options == {"cross_entropy": "te-fused"}  # the perf scripts' TE loss
