"""Activation CPU offloading in time (Transformer Engine's default schedule): the copies hide
behind the blocks' compute where the host link keeps up (NVLink-C2C on GB200) and stall it where
it does not (PCIe on HGX B300); the schedule's own rules (at most ``L - n`` layers' activations
on the GPU, reloads before each offloaded layer's backward) in closed cases."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from perfmodel.api import Scenario, predict
from perfmodel.parallel.costs import nearest_cpu
from perfmodel.parallel.offload import offload_stalls_s
from perfmodel.topology.builders import load_system


def test_te_figure_4_stalls_both_phases() -> None:
    """5 layers, 3 offloaded (2 sets on the GPU), copies of 2 against layers of 1: forward
    layer 4 waits for layer 2's copy (done at 4), layer 5 for layer 3's (6): 7 - 5 = 2;
    backward reloads 3, 2, 1 finish at 3, 5, 7 and layers 3, 2, 1 wait for them: 8 - 5 = 3."""
    assert offload_stalls_s(5, 3, 1.0, 1.0, 2.0) == (2.0, 3.0)


def test_one_layer_kept_cannot_overlap_the_reload() -> None:
    """n = L - 1: one set on the GPU, each reload starts when the layer above is done (TE warns
    that compute and transfers cannot overlap): every offloaded backward waits a copy."""
    assert offload_stalls_s(4, 3, 1.0, 1.0, 0.5) == (0.0, 1.5)


@settings(max_examples=60, deadline=None)
@given(
    blocks=st.integers(3, 40),
    frac=st.floats(0.0, 1.0),
    f=st.floats(0.1, 10.0),
    b=st.floats(0.1, 10.0),
    c=st.floats(0.0, 20.0),
)
def test_copies_no_slower_than_compute_hide(
    blocks: int, frac: float, f: float, b: float, c: float
) -> None:
    n = min(blocks - 2, int(frac * blocks))
    fs, bs = offload_stalls_s(blocks, n, f, b, c)
    assert fs >= 0 and bs >= 0
    if c <= min(f, b):
        assert (fs, bs) == (0.0, 0.0)
    slower = offload_stalls_s(blocks, n, f, b, 2 * c + 1.0)
    assert slower[0] >= fs and slower[1] >= bs


def test_nvl72_gpu_finds_its_grace() -> None:
    """A GB200 NVL72 rack is one server of 36 Grace CPUs: the GPU's host is the one its
    NVLink-C2C reaches (the others have no route to it)."""
    topo = load_system("gb200-nvl72")
    assert nearest_cpu(topo, "gpu0") == "cpu0"


def _step_s(system: str, offload: int) -> float:
    opts = {"activation_offload_layers": offload} if offload else {}
    sc = Scenario(
        system=system,
        model="llama",
        model_args={
            "hidden": 4096,
            "layers": 12,
            "heads": 32,
            "kv_heads": 8,
            "ffn_hidden": 14336,
            "seq_len": 8192,
            "vocab": 32000,
        },
        precision="bf16",
        optimizer="adam",
        batch_per_gpu=1,
        gpus=8,
        fidelity="analytic",
        software="megatron-core",
        software_options=opts,
    )
    return predict(sc, baseline=False).iteration_time_s


def test_offload_hides_on_c2c_and_stalls_on_pcie() -> None:
    """A 1.1 GB block copy: ~2.8 ms over GB200's NVLink-C2C (under a ~4 ms block forward),
    ~22 ms over HGX B300's PCIe path: half the blocks offloaded cost nothing on GB200 and
    roughly double the step on B300."""
    assert _step_s("gb200-nvl72", 6) == pytest.approx(_step_s("gb200-nvl72", 0), rel=1e-12)
    assert _step_s("hgx-b300", 6) > 1.5 * _step_s("hgx-b300", 0)


_LLAMA12 = {"hidden": 1024, "layers": 12, "heads": 16, "kv_heads": 4, "ffn_hidden": 2816,
            "seq_len": 2048, "vocab": 32000}  # fmt: skip


@pytest.mark.parametrize(
    ("model", "extra"),
    [("llama", {}), ("moe", {"experts": 4, "top_k": 2, "first_dense_layers": 1})],
    ids=["stacked-llama", "dense-then-moe"],
)
def test_stall_compares_with_the_mean_of_every_block(monkeypatch, model: str, extra: dict) -> None:
    """The offload schedule gets the mean block time over all 12 blocks, each block's layers
    priced as the step prices them (a plain loop over every layer here): a stack of copies
    (Llama: one block and a count) and a mixed stack (1 dense block, then 11 MoE blocks). The
    mean used to run over the stack's distinct block shapes, which weighs a few unlike blocks
    like the many copies; every zoo stack's copies are alike today, so the two agreed."""
    import perfmodel.parallel.offload as offload_mod
    from perfmodel.parallel.lower_pipeline import PipelineLowering

    seen: list[tuple[float, float, float, float]] = []
    lowerings: list[PipelineLowering] = []
    real_stalls, real_method = offload_mod.offload_stalls_s, PipelineLowering._offload_stall

    def spy(blocks: int, n: int, f: float, b: float, c: float) -> tuple[float, float]:
        seen.append((blocks, n, f, b))
        return real_stalls(blocks, n, f, b, c)

    def method(self: PipelineLowering) -> tuple[float, float]:
        lowerings.append(self)
        return real_method(self)

    monkeypatch.setattr(offload_mod, "offload_stalls_s", spy)
    monkeypatch.setattr(PipelineLowering, "_offload_stall", method)
    args = {**_LLAMA12, **extra}
    sc = Scenario(system="hgx-b300", model=model, model_args=args, precision="bf16",
                  optimizer="adam", batch_per_gpu=1, gpus=8, fidelity="analytic",
                  software="megatron-core", software_options={"activation_offload_layers": 2})  # fmt: skip
    predict(sc, baseline=False)
    blocks, n, f, b = seen[0]
    low = lowerings[0]
    times = [low.costs.layer_time(la) for la in low.wl.layers if la.block is not None]
    assert (blocks, n) == (12, 2)
    assert f == pytest.approx(sum(t[0] for t in times) / 12, rel=1e-12)
    assert b == pytest.approx(sum(t[1] + t[2] for t in times) / 12, rel=1e-12)
