"""The eager host's lead at the start of a step (issue 24 cause 7): the GPU runs a kernel only
once the host has issued it, so while the host is slower than the GPU (the forward's small
kernels) the GPU idles at the step's start; the two-machine flow shop in a fixed order
(Johnson 1954) gives the lead the host needs."""

from __future__ import annotations

import pytest

from perfmodel.api import Scenario, resolve
from perfmodel.dtypes import Precision
from perfmodel.parallel.host_lead import issue_lead
from perfmodel.parallel.lowering import Chunk, Segment
from perfmodel.parallel.plan import Recompute
from perfmodel.pipeline.lower import build_step
from perfmodel.workload.layers import LayerCost, LayerKind

MS = 1e-3


def _layer(name: str) -> LayerCost:
    return LayerCost(
        name=name, kind=LayerKind.LINEAR, fwd_flop=1.0, bwd_input_flop=1.0, bwd_weight_flop=1.0,
        params=0, fwd_bytes=1.0, bwd_bytes=1.0, activation_bytes=1.0, output_shape=(1,),
    )  # fmt: skip


class _Costs:
    """Per-layer forward/backward GPU and host milliseconds by name."""

    precision = Precision.BF16

    def __init__(self, gpu: dict[str, tuple[float, float]], host: dict[str, tuple[float, float]]):
        self.gpu, self.host = gpu, host

    def layer_time(self, layer: LayerCost) -> tuple[float, float, float]:
        f, b = self.gpu[layer.name]
        return f * MS, b * MS, 0.0

    def layer_host_time(self, layer: LayerCost) -> tuple[float, float]:
        f, b = self.host[layer.name]
        return f * MS, b * MS


def _chunk(*names: str) -> Chunk:
    layers = tuple(_layer(n) for n in names)
    seg = Segment(0.0, 0.0, 0.0, 0.0, 0.0, 0, 0.0, 0.0)
    return Chunk((seg,), 0.0, 0.0, 0, layers)


def test_lead_hand_computed() -> None:
    """Forward: host 1 ms per layer, GPU 2 ms (the GPU is slower: lead 1 ms for the first);
    backward: host 3 ms per layer, GPU 1 ms. The host finishes issuing the backward's layers at
    6, 9, 12 ms while the GPU, after the forward's 6 ms, would reach them at 6, 7, 8 ms: a lead
    of 12 - 8 = 4 ms keeps it from ever waiting (it ends at 4 + 9 = 13 ms)."""
    costs = _Costs(
        gpu={n: (2.0, 1.0) for n in "abc"},
        host={n: (1.0, 3.0) for n in "abc"},
    )
    ops = [("F", 0, 0), ("B", 0, 0)]
    lead = issue_lead(costs, [_chunk("a", "b", "c")], ops, 1, 0, Recompute.NONE)  # type: ignore[arg-type]
    assert lead == pytest.approx(4 * MS)


def test_no_lead_when_gpu_bound_after_first_kernel() -> None:
    """GPU slower everywhere: the lead is the first layer's issue only."""
    costs = _Costs(gpu={n: (5.0, 5.0) for n in "ab"}, host={n: (1.0, 1.0) for n in "ab"})
    ops = [("F", 0, 0), ("B", 0, 0), ("F", 1, 0), ("B", 1, 0)]
    lead = issue_lead(costs, [_chunk("a", "b")], ops, 1, 0, Recompute.NONE)  # type: ignore[arg-type]
    assert lead == pytest.approx(1 * MS)


def test_full_recompute_counts_the_recomputed_forward() -> None:
    """Backward of a block under full recomputation issues the forward again first: host
    1 + 1, GPU 1 + 1 per layer (layers in a block)."""
    la = LayerCost(
        name="a", kind=LayerKind.LINEAR, fwd_flop=1.0, bwd_input_flop=1.0, bwd_weight_flop=1.0,
        params=0, fwd_bytes=1.0, bwd_bytes=1.0, activation_bytes=1.0, output_shape=(1,), block=0,
    )  # fmt: skip
    seg = Segment(0.0, 0.0, 0.0, 0.0, 0.0, 0, 0.0, 0.0)
    ch = Chunk((seg,), 0.0, 0.0, 1, (la,))
    costs = _Costs(gpu={"a": (0.5, 0.5)}, host={"a": (1.0, 1.0)})
    ops = [("F", 0, 0), ("B", 0, 0)]
    none = issue_lead(costs, [ch], ops, 1, 0, Recompute.NONE)  # type: ignore[arg-type]
    full = issue_lead(costs, [ch], ops, 1, 0, Recompute.FULL)  # type: ignore[arg-type]
    # none: host 1, 2 vs GPU before 0, 0.5 -> 1.5; full: backward host 2 (3 total) vs 0.5 -> 2.5
    assert (none, full) == pytest.approx((1.5 * MS, 2.5 * MS))


def test_first_compute_waits_for_the_lead_eager_only() -> None:
    """PyTorch (eager): a 'kernel issue lead' host task precedes the first compute and the
    issue task is the rest of the issue time; TensorFlow graphs: none."""
    base = dict(system="dgx-h100", gpus=1, model="resnet50", batch_per_gpu=32,
                precision="bf16", fidelity="analytic")  # fmt: skip
    for software, has in (("pytorch-ddp", True), ("tf-replicated", False)):
        sc = Scenario(software=software, **base)  # type: ignore[arg-type]
        step, _ = build_step(sc, resolve(sc))
        lead = [t for t in step.graph.tasks if t.label.startswith("kernel issue lead")]
        assert bool(lead) is has, software
        if has:
            (first,) = [t for t in step.graph.tasks if t.label == "F0"][:1]
            assert lead[0].tid in first.deps
            (issue,) = [t for t in step.graph.tasks if t.label == "kernel issue (eager host)"]
            assert issue.deps == (lead[0].tid,)
