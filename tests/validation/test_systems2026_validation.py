"""Validation tier: the hardware of 2026 (``validation/systems2026.jsonl``, issue 25).

Rows: the Megatron-Bridge 26.04.01 performance summary's GB300 NVL72, GB200 NVL72 and B300 rows
(the document and commit of ``modern.jsonl``'s Megatron-Bridge rows), mapped by
:mod:`perfmodel.accuracy_2026` and predicted with the analytic executor. Every mapped row's signed
error (predicted / measured tokens per second per GPU - 1) is printed, with the skip reasons and
their counts (NVFP4 rows, the hybrid Mamba Nemotron 3 rows, one plan with more pipeline chunks
than layers). Nothing here feeds the model.
"""

from __future__ import annotations

import math
import statistics

import pytest

from perfmodel.accuracy_2026 import load_rows, map_row, results
from perfmodel.accuracy_modern import ModernResults
from perfmodel.api import Scenario


@pytest.fixture(scope="module")
def rows() -> list[dict]:
    return load_rows()


@pytest.fixture(scope="module")
def res(rows: list[dict]) -> ModernResults:
    return results(rows)


def test_systems2026_rows_report(res: ModernResults) -> None:
    print("\n=== 2026 systems (systems2026.jsonl, analytic executor) ===")
    print(f"{'row':56s} {'measured':>9s} {'predicted':>10s} {'error':>7s}  GiB/GPU fits")
    groups: dict[str, list[float]] = {}
    for d in res.done:
        row = d.row
        gpu = row["system"]["gpu"].split()[0]
        groups.setdefault(gpu, []).append(d.error)
        print(
            f"{row['id']:56s} {row['measured']:9.0f} {d.tokens_per_s_per_gpu:10.0f} "
            f"{d.error:+7.1%}  {d.memory_gib:6.1f} {d.fits}"
        )
    for gpu, e in sorted(groups.items()):
        print(
            f"{gpu:6s} n={len(e):2d}  median |err| {statistics.median(map(abs, e)):6.1%}  "
            f"median signed {statistics.median(e):+6.1%}  worst {max(e, key=abs):+6.1%}"
        )
    every = [d.error for d in res.done]
    print(
        f"ALL    n={len(every):2d}  median |err| {statistics.median(map(abs, every)):6.1%}  "
        f"median signed {statistics.median(every):+6.1%}"
    )
    print(f"--- not mapped: {sum(res.skipped.values())} rows ---")
    for why, n in sorted(res.skipped.items(), key=lambda kv: -kv[1]):
        print(f"  {n:3d}  {why}")
    for rid, why in res.failed:
        print(f"  FAILED {rid}: {why}")


def test_every_mapped_row_predicts(res: ModernResults) -> None:
    assert not res.failed, res.failed
    assert len(res.done) == 20
    assert sum(res.skipped.values()) == 14
    for d in res.done:
        assert math.isfinite(d.tokens_per_s_per_gpu) and d.tokens_per_s_per_gpu > 0


def test_every_mapped_row_that_ran_fits(res: ModernResults) -> None:
    """Every row ran, so each is predicted to fit in its GPUs' memory (issue 24): DeepSeek-V3
    with its recipe's ``recompute_modules``, Llama 3 70B under Megatron FSDP with its recipe's
    activation CPU offloading and Transformer Engine's in-place cross entropy, the MoE rows
    with their recipes' pipeline layouts."""
    tight = [(d.row["id"], round(d.memory_gib, 1)) for d in res.done if not d.fits]
    assert not tight, tight


def test_dsv3_gb200_row_runs_its_recipe_layout(rows: list[dict], res: ModernResults) -> None:
    """The GB200 DeepSeek-V3 row (pp 4 x vp 4) with Megatron-Bridge's stated layout
    ``Et*4|(t*4|)*14tmL``: 16 blocks and the embedding on stage 0 (not the time-balanced cut's
    more, 193.5 GiB of 186 on opt21): 167.5 GiB per GPU, fits (171.2 until mem30b counted
    each chunk's activations at its own in-flight count)."""
    rid = "mbridge-260401-gb200-dsv3-256g-mxfp8-tokens"
    by_id = {r["id"]: r for r in rows}
    sc = map_row(by_id[rid])
    assert isinstance(sc, Scenario) and sc.pipeline_layout == "Et*4|(t*4|)*14tmL"
    done = {d.row["id"]: d for d in res.done}[rid]
    assert done.fits and done.memory_gib == pytest.approx(167.5, abs=0.05)
    # rows whose recipe states no layout keep the time-balanced cut
    assert (
        map_row(by_id["mbridge-260401-gb200-qwen3-235b-256g-mxfp8-tokens"]).pipeline_layout is None
    )


def test_median_error_does_not_regress(res: ModernResults) -> None:
    """The state when these rows were first mapped (median |error| 15.6 %, signed -1.1 %): a
    guard against regressions, not a fit (nothing was tuned to these rows)."""
    assert statistics.median(abs(d.error) for d in res.done) < 0.25


def test_mapping_keeps_what_the_row_says(rows: list[dict]) -> None:
    by_id = {r["id"]: r for r in rows}
    sc = map_row(by_id["mbridge-260401-gb300-dsv3-256g-mxfp8-tokens"])
    assert isinstance(sc, Scenario)
    assert (sc.system, sc.nodes, sc.gpus) == ("gb300-nvl72", 4, 256)  # 4 NVL72 racks
    assert (sc.pp, sc.interleave, sc.ep, sc.microbatch, sc.global_batch) == (2, 8, 32, 2, 4096)
    assert sc.model == "deepseek_v3" and sc.model_args["mtp_layers"] == 1  # the recipe's MTP
    assert (sc.fp8_recipe, sc.moe_dispatcher, sc.ep_overlap) == ("mxfp8", "hybridep", False)
    assert sc.recompute == "selective"
    fsdp = map_row(by_id["mbridge-260401-gb200-llama3-70b-64g-fp8-tokens"])
    assert isinstance(fsdp, Scenario)
    assert (fsdp.zero, fsdp.fp8_recipe, fsdp.system, fsdp.nodes) == (
        3,
        "te-current",
        "gb200-nvl72",
        1,
    )
    oss = map_row(by_id["mbridge-260401-b300-gptoss-120b-64g-bf16-tokens"])
    assert isinstance(oss, Scenario)
    assert (oss.model, oss.system, oss.nodes, oss.precision, oss.ep) == (
        "gpt_oss_120b",
        "hgx-b300",
        8,
        "bf16",
        8,
    )
    assert (oss.moe_dispatcher, oss.ep_overlap) == ("hybridep", False)
    gb200_oss = map_row(by_id["mbridge-260401-gb200-gptoss-120b-64g-bf16-tokens"])
    assert isinstance(gb200_oss, Scenario) and gb200_oss.ep_overlap  # moe_a2a_overlap=True


def test_mapping_takes_each_recipes_memory_settings(rows: list[dict]) -> None:
    """The recipes' ``recompute_modules`` as the rows name them (``layernorm`` not modelled:
    left out) and the Megatron FSDP Llama 3 70B recipes' activation CPU offloading
    (``cpu_offloading_num_layers`` 20 on GB300, 40 on GB200)."""
    by_id = {r["id"]: r for r in rows}

    def sc(rid: str) -> Scenario:
        got = map_row(by_id[rid])
        assert isinstance(got, Scenario)
        return got

    assert sc("mbridge-260401-gb300-dsv3-256g-mxfp8-tokens").recompute_modules == "mla_up_proj"
    assert sc("mbridge-260401-gb200-dsv3-256g-mxfp8-tokens").recompute_modules == "mlp"
    oss = sc("mbridge-260401-gb200-gptoss-120b-64g-bf16-tokens")
    assert (oss.recompute, oss.recompute_modules) == ("selective", "moe_act")
    assert sc("mbridge-260401-b300-gptoss-120b-64g-bf16-tokens").recompute_modules is None
    for rid, n in (
        ("mbridge-260401-gb300-llama3-70b-64g-fp8-tokens", 20),
        ("mbridge-260401-gb200-llama3-70b-64g-fp8-tokens", 40),
    ):
        assert sc(rid).software_options == {
            "cross_entropy": "te-fused",
            "activation_offload_layers": n,
        }
    mx = sc("mbridge-260401-gb300-llama3-70b-64g-mxfp8-tokens")
    assert mx.software_options == {"cross_entropy": "te-fused"}


def test_unmapped_rows_say_why(rows: list[dict]) -> None:
    by_id = {r["id"]: r for r in rows}
    assert "NVFP4" in map_row(by_id["mbridge-260401-gb300-llama3-70b-64g-nvfp4-tokens"])
    assert "not in the zoo" in map_row(by_id["mbridge-260401-b300-nemotron3-nano-8g-mxfp8-tokens"])
    assert "pipeline chunks" in map_row(
        by_id["mbridge-260401-gb200-llama31-405b-256g-mxfp8-tokens"]
    )


def test_offloading_rows_notes_say_what_is_modelled(rows: list[dict]) -> None:
    """A row whose recipe offloads activations (``ACTIVATION_OFFLOAD_2026``) has its offload
    modelled in memory: its note names the option and no longer calls it "not modelled"."""
    from perfmodel.accuracy_2026 import activation_offload

    offloading = [r for r in rows if activation_offload(r) is not None]
    assert offloading
    for r in offloading:
        n, _ = activation_offload(r)  # type: ignore[misc]
        assert "not modelled" not in r["note"], r["id"]
        assert f"activation_offload_layers={n}" in r["note"], r["id"]
