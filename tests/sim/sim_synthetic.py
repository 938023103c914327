"""Hand-computable workloads and costs for simulation tests (no hardware catalogue involved)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from hypothesis import strategies as st

from perfmodel.dtypes import Precision
from perfmodel.ops import CollectiveOp
from perfmodel.parallel.lower_step import lower
from perfmodel.parallel.lowering import LoweredStep, StepInputs
from perfmodel.parallel.placement import Placement
from perfmodel.parallel.plan import ParallelismPlan
from perfmodel.parallel.software import get_preset
from perfmodel.workload.layers import LayerCost, LayerKind, Workload
from perfmodel.workload.memory import Optimizer

GPUS = tuple(f"g{i}" for i in range(64))

#: A drawn task duration in seconds (1 us to 3 s, finite): the property tests of OverTasks and
#: chains (test_over_tasks, test_chains_with_over_tasks) draw every task's seconds from it.
DURATION_S = st.floats(min_value=1e-6, max_value=3.0, allow_nan=False, allow_infinity=False)


def block_workload(
    blocks: int, *, params: int = 1000, act: float = 1e6, batch: int = 1
) -> Workload:
    """``blocks`` identical linear layers, one per block; FLOP scale with the batch."""
    layers = tuple(
        LayerCost(
            name=f"fc{i}",
            kind=LayerKind.LINEAR,
            fwd_flop=1e9 * batch,
            bwd_input_flop=1e9 * batch,
            bwd_weight_flop=1e9 * batch,
            params=params,
            fwd_bytes=0.0,
            bwd_bytes=0.0,
            activation_bytes=act * batch,
            output_shape=(batch, 1000),
            block=i,
        )
        for i in range(blocks)
    )
    return Workload("synthetic", layers, batch, Precision.FP32, params * blocks)


@dataclass
class FakeCosts:
    """1 ms per 1e9 FLOP-unit of forward; backward twice forward; comm = bytes / bandwidth."""

    bandwidth_Bps: float = float("inf")
    alpha_s: float = 0.0
    precision: Precision = Precision.FP32
    gpu_spec: object = None

    def layer_time(self, layer: LayerCost) -> tuple[float, float, float]:
        f = layer.fwd_flop / 1e12
        return f, layer.bwd_input_flop / 1e12, layer.bwd_weight_flop / 1e12

    def optimizer_time(self, params: float, optimizer: str) -> float:
        return 0.0

    def _t(self, nbytes: float, factor: float = 1.0) -> float:
        if nbytes <= 0:
            return 0.0
        return self.alpha_s + factor * nbytes / self.bandwidth_Bps

    def collective_time(
        self, op: CollectiveOp, message_bytes: float, group: Sequence[str], algorithm: str = "auto"
    ) -> float:
        n = len(group)
        if n < 2:
            return 0.0
        return self._t(message_bytes, 2 * (n - 1) / n)

    def concurrent_time(self, op, message_bytes, groups, algorithm="auto") -> float:
        return self.collective_time(op, message_bytes, groups[0], algorithm)

    def transfers_time(self, pairs, nbytes_each) -> float:
        return self._t(nbytes_each) if pairs else 0.0

    def host_reduce_time(self, nbytes_touched: float) -> float:
        return 0.0

    def cpu_of(self, gpu: str) -> str:
        return "cpu0"


def lower_synthetic(
    plan: ParallelismPlan,
    workload: Workload,
    costs: FakeCosts,
    *,
    batch_per_replica: int,
    software: str = "pytorch-ddp",
    slowdown: float | None = None,
    optimizer: str = "sgd",
    **preset_overrides: object,
) -> LoweredStep:
    preset = get_preset(software)
    if slowdown is not None:
        preset = preset.with_overrides(overlap_compute_slowdown=slowdown)
    if preset_overrides:
        preset = preset.with_overrides(**preset_overrides)
    pl = Placement(dp=plan.dp, tp=plan.tp, pp=plan.pp, gpus=GPUS[: plan.num_gpus])
    inp = StepInputs(
        plan=plan,
        preset=preset,
        placement=pl,
        workload=workload,
        batch_per_replica=batch_per_replica,
        optimizer=Optimizer.parse(optimizer),  # the helper's edge: text -> type
        capacity_bytes=1e12,
    )
    return lower(inp, costs)
