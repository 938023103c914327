"""Audit 15, item 11: MX block-scaled FP8 is a capability of the GPU's catalogue entry
(``GPUSpec.mxfp8_gemm``), not an architecture-name test: CDNA 4 (MI355X) runs it, the 12.0
Blackwell cards and every Hopper/CDNA 3 part do not (Transformer Engine's
``check_mxfp8_support``, ROCm/TransformerEngine @030b792)."""

from __future__ import annotations

import pytest

from perfmodel.api import Scenario, resolve
from perfmodel.errors import ConfigError
from perfmodel.hardware import get_gpu, read_gpus
from perfmodel.hardware.gpus import list_gpus

LLAMA = {"hidden": 1024, "layers": 4, "heads": 16, "kv_heads": 4, "ffn_hidden": 3584,
         "vocab": 32000, "seq_len": 2048}  # fmt: skip


def _sc(system: str, **kw: object) -> Scenario:
    base: dict[str, object] = dict(
        system=system, model="llama", model_args=LLAMA, global_batch=16, microbatch=2,
        precision="fp8", fp8_recipe="mxfp8", optimizer="adamw", software="megatron-core",
        fidelity="analytic",
    )  # fmt: skip
    base.update(kw)
    return Scenario(**base)  # type: ignore[arg-type]


@pytest.mark.parametrize("system", ["mi355x-8", "dgx-b200", "hgx-b300"])
def test_mxfp8_runs_where_the_gpu_states_it(system: str) -> None:
    r = resolve(_sc(system))
    assert r.recipe is not None and r.recipe.fp8 is not None
    assert r.recipe.fp8.value == "mxfp8"


@pytest.mark.parametrize("system", ["mi300x-8", "mi325x-8", "dgx-h100"])
def test_mxfp8_is_refused_elsewhere_naming_the_gpu(system: str) -> None:
    with pytest.raises(ConfigError, match="MX block-scaled FP8") as exc:
        resolve(_sc(system))
    assert exc.value.where == "--fp8-recipe" and exc.value.value == "mxfp8"
    assert get_gpu(system.split("-")[0] if system.startswith("mi") else "h100").name in str(
        exc.value
    )


def test_catalogue_follows_transformer_engines_check() -> None:
    """NVIDIA: compute capability 10.x only (12.0 refused by TE); AMD: CDNA 4 only; every
    entry that states it names its source."""
    gpus = list_gpus()
    for g in gpus:
        if g.compute_capability is not None:
            assert g.mxfp8_gemm == (g.compute_capability[0] == 10), g.name
        elif g.vendor == "AMD":
            assert g.mxfp8_gemm == (g.architecture == "CDNA4"), g.name
        if g.mxfp8_gemm:
            assert "check_mxfp8_support" in g.sources["compute"], g.name
    assert get_gpu("MI355X").mxfp8_gemm and not get_gpu("RTX-5090").mxfp8_gemm


def test_the_flag_needs_a_boolean(write_toml) -> None:
    from test_hw_loaders import GPU_OK

    arch = 'architecture = "Volta"\n'
    with pytest.raises(ConfigError, match="mxfp8_gemm"):
        read_gpus(write_toml(GPU_OK.replace(arch, arch + 'mxfp8_gemm = "yes"\n')))
    assert read_gpus(write_toml(GPU_OK.replace(arch, arch + "mxfp8_gemm = true\n")))[
        "TEST-GPU"
    ].mxfp8_gemm
    assert not read_gpus(write_toml(GPU_OK))["TEST-GPU"].mxfp8_gemm


def test_the_refusal_names_the_catalogues_gpus(monkeypatch) -> None:
    """rev15b item 12: the refusal lists the GPUs whose catalogue entry states the capability,
    read from the catalogue (before: a typed list, which a new entry would not join)."""
    import dataclasses

    import perfmodel.hardware

    with pytest.raises(ConfigError) as exc:
        resolve(_sc("dgx-h100"))
    named = [g.name for g in list_gpus() if g.mxfp8_gemm]
    assert named and all(n in str(exc.value) for n in named)
    assert "Blackwell: B200-SXM-180GB" in str(exc.value) and "CDNA4: MI355X" in str(exc.value)
    h100 = get_gpu("H100-SXM5-80GB")
    extra = dataclasses.replace(h100, name="H100-MX-TEST", mxfp8_gemm=True)
    monkeypatch.setattr(perfmodel.hardware, "list_gpus", lambda: [*list_gpus(), extra])
    from perfmodel.pipeline.resolve import mxfp8_gpus

    assert mxfp8_gpus().endswith("Hopper: H100-MX-TEST")


def test_amd_mxfp8_note_names_rocm_te_switch() -> None:
    """On AMD the prediction says ROCm TransformerEngine needs NVTE_ROCM_ENABLE_MXFP8=1 to run
    the recipe (its check_mxfp8_support, ROCm/TransformerEngine @030b792); NVIDIA has no such
    switch. Before: never said."""
    from perfmodel.api import predict

    amd = predict(_sc("mi355x-8"))
    assert any("NVTE_ROCM_ENABLE_MXFP8=1" in n for n in amd.notes)
    nv = predict(_sc("dgx-b200"))
    assert not any("NVTE_ROCM_ENABLE_MXFP8" in n for n in nv.notes)
    other = predict(_sc("mi355x-8", fp8_recipe="te-delayed"))
    assert not any("NVTE_ROCM_ENABLE_MXFP8" in n for n in other.notes)
