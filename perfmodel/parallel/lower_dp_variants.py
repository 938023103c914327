"""Lowering of the data-parallel variants other than bucketed all-reduce (``tp = pp = 1``).

One emitter per :class:`~perfmodel.parallel.plan.DPMode`, each readable on its own:
:func:`cpu_merge` (Keras ``multi_gpu_model``), :func:`gpu_merge` (``nn.DataParallel``),
:func:`parameter_server` (synchronous and asynchronous), :func:`local_sgd` and :func:`crossbow`.
They share a :class:`Variant` (the task builder, the replica's chunk, the gradient and parameter
bytes of the step's recipe) and its :meth:`Variant.compute_step`; :func:`lower_dp_variant`
dispatches and adds the memory.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from perfmodel.ops import CollectiveOp
from perfmodel.parallel.costs import Costs
from perfmodel.parallel.host_lead import step_kernels
from perfmodel.parallel.lowering import Chunk, LoweredStep, StepInputs, build_chunk
from perfmodel.parallel.plan import DPMode, PSHost
from perfmodel.parallel.stage_memory import stage_buffer_bytes, stage_memory
from perfmodel.parallel.taskgraph import CommKind, CommSpec, GraphBuilder, TaskKind


@dataclass
class Variant:
    """What every data-parallel variant emitter reads and writes.

    ``grad_bytes`` and ``param_bytes`` are the whole replica's gradient-reduction and weight
    bytes under the recipe; ``deps`` the host step task (if any) compute starts after; the
    emitters set ``min_period_s``, ``staleness`` and ``replicas_on_gpu`` where they apply.
    """

    inp: StepInputs
    costs: Costs
    b: GraphBuilder
    ch: Chunk
    m: int
    grad_bytes: float
    param_bytes: float
    deps: list[int]
    min_period_s: float = 0.0
    staleness: dict[int, float] = field(default_factory=dict)
    replicas_on_gpu: int = 1

    @property
    def n(self) -> int:
        return self.inp.plan.dp

    @property
    def gpus(self) -> tuple[str, ...]:
        return tuple(self.inp.placement.dp_group(0, 0))

    @property
    def g0(self) -> str:
        return self.gpus[0]

    @property
    def alg(self) -> str:
        return self.inp.preset.comm_algorithm

    def optimizer(self, deps: list[int], label: str, replicas: int = 1) -> int:
        """The optimizer step over ``replicas`` copies of the replica's parameters on GPU 0."""
        t = self.costs.optimizer_time(self.ch.params * replicas, self.inp.optimizer)
        return self.b.add(TaskKind.OPTIMIZER, self.g0, "compute", t, deps, label=label)

    def compute_step(self, pre: list[int], overlapped_comm_s: float = 0.0) -> int:
        """``m`` micro-batches of forward and backward; ``overlapped_comm_s`` seconds of
        communication running beside them slow them by ``overlap_compute_slowdown`` for the
        overlapped share: factor ``1 + slowdown x min(1, comm / compute)``."""
        ch, m, b = self.ch, self.m, self.b
        total = m * (ch.fwd_s + ch.bwd_s)
        share = min(1.0, overlapped_comm_s / total) if total > 0 else 0.0
        slow = 1.0 + self.inp.preset.overlap_compute_slowdown * share
        last = pre
        tid = -1
        for mb in range(m):
            tid = b.add(
                TaskKind.COMPUTE,
                self.g0,
                "compute",
                ch.fwd_s * slow,
                last,
                label=f"F{mb}",
                microbatch=mb,
                chunk=0,
            )
            tid = b.add(
                TaskKind.COMPUTE,
                self.g0,
                "compute",
                ch.bwd_s * slow,
                [tid],
                label=f"B{mb}",
                microbatch=mb,
                chunk=0,
            )
            last = [tid]
        return tid


def cpu_merge(v: Variant) -> None:
    """Weights live on the host: each GPU pulls them, computes, pushes its gradients; the CPU
    sums ``n`` gradient copies and applies the update (reads ``n + 1`` copies, writes one)."""
    b, costs, g0 = v.b, v.costs, v.g0
    cpu_pairs = [(costs.cpu_of(g), g) for g in v.gpus]
    up = [(g, c) for c, g in cpu_pairs]
    pull = b.add(
        TaskKind.HOST,
        g0,
        "h2d",
        costs.transfers_time(cpu_pairs, v.param_bytes),
        v.deps,
        label="pull weights from CPU",
        comm=CommSpec(
            CollectiveOp.SENDRECV,
            v.param_bytes,
            cpu_pairs[0],
            kind=CommKind.HOST,
            siblings=tuple(cpu_pairs[1:]),
        ),
    )
    last = v.compute_step([pull])
    push = b.add(
        TaskKind.HOST,
        g0,
        "d2h",
        costs.transfers_time(up, v.grad_bytes),
        [last],
        label="push grads to CPU",
        comm=CommSpec(
            CollectiveOp.SENDRECV, v.grad_bytes, up[0], kind=CommKind.HOST, siblings=tuple(up[1:])
        ),
    )
    reduce = costs.host_reduce_time((v.n + 2) * v.grad_bytes)
    b.add(TaskKind.HOST, costs.cpu_of(g0), "host", reduce, [push], label="CPU merge + update")
    b.notes.append(
        "cpu-merge: weights live on the host; every step each GPU pulls weights and pushes "
        "gradients over its PCIe path"
    )


def gpu_merge(v: Variant) -> None:
    """``nn.DataParallel``: broadcast the parameters from GPU 0, dispatch every replica's
    kernels from one GIL-bound process, reduce the gradients to GPU 0, update there."""
    b, costs, g0, gpus, alg, inp = v.b, v.costs, v.g0, v.gpus, v.alg, v.inp
    bc = b.add(
        TaskKind.COLLECTIVE,
        g0,
        "comm",
        costs.collective_time(CollectiveOp.BROADCAST, v.param_bytes, gpus, alg),
        v.deps,
        label="replicate (broadcast params)",
        comm=CommSpec(CollectiveOp.BROADCAST, v.param_bytes, gpus, alg, CommKind.DP),
    )
    kernels = sum(step_kernels(layer) for layer in inp.workload.layers)
    disp = v.n * kernels * inp.preset.dispatch_per_op_s * v.m
    host = b.add(TaskKind.HOST, g0, "host", disp, [bc], label="GIL-serialised dispatch of replicas")
    last = v.compute_step([bc])
    red = b.add(
        TaskKind.COLLECTIVE,
        g0,
        "comm",
        costs.collective_time(CollectiveOp.REDUCE, v.grad_bytes, gpus, alg),
        [last, host],
        label="reduce grads to GPU0",
        comm=CommSpec(CollectiveOp.REDUCE, v.grad_bytes, gpus, alg, CommKind.DP),
    )
    v.optimizer([red], "optimizer (GPU0)")
    b.notes.append(
        "gpu-merge (nn.DataParallel): broadcast from GPU0, reduce to GPU0, serialised Python "
        "dispatch of all replicas"
    )


def parameter_server(v: Variant) -> None:
    """Pull parameters from ``ps_shards`` servers (CPU or GPU), compute, push gradients, the
    servers update. Asynchronous SGD: one worker's own push and pull per step; the servers'
    links bound the period (every worker's push and pull once per worker step)."""
    b, costs, g0, gpus, inp = v.b, v.costs, v.g0, v.gpus, v.inp
    plan = inp.plan
    mode = plan.dp_mode
    shards = plan.ps_shards
    if plan.ps_host is PSHost.CPU:
        servers = sorted({costs.cpu_of(g) for g in gpus})
    else:
        servers = list(gpus)
    servers = [servers[i % len(servers)] for i in range(shards)]
    per_shard = v.grad_bytes / shards
    if mode is DPMode.PARAMETER_SERVER:
        push_pairs = [(g, sv) for g in gpus for sv in servers if g != sv]
        pull_pairs = [(sv, g) for g in gpus for sv in servers if g != sv]
    else:  # asynchronous: a worker's own push, others spread over the step (see min_period)
        push_pairs = [(g0, sv) for sv in servers if sv != g0]
        pull_pairs = [(sv, g0) for sv in servers if sv != g0]
    pull = b.add(
        TaskKind.SENDRECV,
        g0,
        "comm",
        costs.transfers_time(pull_pairs, per_shard),
        v.deps,
        label="pull params",
        comm=None,
    )
    last = v.compute_step([pull])
    push = b.add(
        TaskKind.SENDRECV,
        g0,
        "comm",
        costs.transfers_time(push_pairs, per_shard),
        [last],
        label="push grads",
        comm=None,
    )
    if plan.ps_host is PSHost.CPU:
        touched = (v.n + 2) * per_shard if mode is DPMode.PARAMETER_SERVER else 3 * per_shard
        upd = costs.host_reduce_time(touched)
    else:
        upd = costs.optimizer_time(v.ch.params / shards, inp.optimizer)
    b.add(
        TaskKind.HOST if plan.ps_host is PSHost.CPU else TaskKind.OPTIMIZER,
        servers[0],
        "server",
        upd,
        [push],
        label="server update",
    )
    if mode is DPMode.ASYNC:
        all_push = [(g, sv) for g in gpus for sv in servers if g != sv]
        v.min_period_s = 2 * costs.transfers_time(all_push, per_shard)
        v.staleness = {v.n - 1: 1.0}
        b.notes.append(
            "async SGD: identical workers in steady state apply gradients round-robin, so each "
            f"gradient is {v.n - 1} updates stale (a point distribution; jitter would spread it)"
        )


def local_sgd(v: Variant) -> None:
    """Local steps with a model all-reduce every ``sync_period`` steps, amortised per step."""
    b, costs, g0, inp = v.b, v.costs, v.g0, v.inp
    k = inp.plan.sync_period
    last = v.compute_step(v.deps)
    opt = v.optimizer([last], "optimizer")
    t_ar = costs.collective_time(CollectiveOp.ALLREDUCE, v.param_bytes, v.gpus, v.alg)
    b.add(
        TaskKind.COLLECTIVE,
        g0,
        "dp",
        t_ar / k,
        [opt],
        label=f"model average / {k}",
        comm=None,
    )
    b.notes.append(f"local SGD: model all-reduce every {k} steps, amortised per step")


def crossbow(v: Variant) -> None:
    """``learners_per_gpu`` learners share the GPU (their kernels run concurrently: the workload
    is one batch of ``learners x b``, built so by :mod:`perfmodel.api`); synchronous model
    averaging across GPUs (the all-reduce of the previous step's model difference) overlaps this
    step's compute; the learners are averaged on the GPU (memory bound) and updated."""
    b, costs, g0, inp = v.b, v.costs, v.g0, v.inp
    v.replicas_on_gpu = inp.plan.learners_per_gpu
    ar = costs.collective_time(CollectiveOp.ALLREDUCE, v.param_bytes, v.gpus, v.alg)
    last = v.compute_step(v.deps, overlapped_comm_s=ar if v.n > 1 else 0.0)
    bw = _memory_bandwidth_Bps(costs)
    t_local = (v.replicas_on_gpu + 1) * v.param_bytes / bw if bw > 0 else 0.0
    avg = b.add(TaskKind.COMPUTE, g0, "compute", t_local, [last], label="intra-GPU model average")
    b.add(
        TaskKind.COLLECTIVE,
        g0,
        "dp",
        ar,
        v.deps,
        label="SMA all-reduce (previous step)",
        comm=CommSpec(CollectiveOp.ALLREDUCE, v.param_bytes, v.gpus, v.alg, CommKind.DP),
    )
    v.optimizer([avg], "learner updates", v.replicas_on_gpu)


#: The emitter of each variant.
EMITTERS: dict[DPMode, Callable[[Variant], None]] = {
    DPMode.CPU_MERGE: cpu_merge,
    DPMode.GPU_MERGE: gpu_merge,
    DPMode.PARAMETER_SERVER: parameter_server,
    DPMode.ASYNC: parameter_server,
    DPMode.LOCAL_SGD: local_sgd,
    DPMode.CROSSBOW: crossbow,
}


def lower_dp_variant(inp: StepInputs, costs: Costs, mode: DPMode) -> LoweredStep:
    """Lower a parameter-server, CPU/GPU-merge, asynchronous, local-SGD or Crossbow step."""
    plan, preset = inp.plan, inp.preset
    ch = _single_chunk(inp, costs)
    rc = inp.recipe_for(costs)
    b = GraphBuilder()
    g0 = inp.placement.dp_group(0, 0)[0]
    deps: list[int] = []
    if preset.host_step_s > 0:
        deps = [b.add(TaskKind.HOST, g0, "host", preset.host_step_s, label="host step")]
    v = Variant(
        inp=inp,
        costs=costs,
        b=b,
        ch=ch,
        m=plan.num_microbatches(inp.batch_per_replica),
        grad_bytes=ch.params * rc.grad_reduce_bytes,
        param_bytes=ch.params * rc.param_bytes,
        deps=deps,
    )
    EMITTERS[mode](v)
    # gradient accumulation holds one micro-batch's activations at a time
    mem = stage_memory(
        [ch],
        plan=plan,
        costs=costs,
        optimizer=inp.optimizer,
        in_flight=1,
        capacity_bytes=inp.capacity_bytes,
        comm_buffer_bytes=0.0,
        replicas_on_gpu=v.replicas_on_gpu,
        buffer_bytes=stage_buffer_bytes(inp.workload, ch.layers),
        recipe=rc,
    )
    return LoweredStep(
        graph=b.build(multiplicity=v.n),
        memory=(mem,),
        samples_per_step=inp.batch_per_replica * v.n,
        model_flop_per_step=inp.workload.total_flop * v.m * v.n,
        num_gpus=v.n,
        min_period_s=v.min_period_s,
        staleness=v.staleness,
        stage_layers=((ch.layers,),),
        microbatches=max(1, v.m),
    )


def _single_chunk(inp: StepInputs, costs: Costs) -> Chunk:
    w = inp.workload
    return build_chunk(
        w,
        list(range(len(w.layers))),
        costs,
        inp.plan,
        (inp.placement.gpus[0],),
        bucket_bytes=None,
        first_bucket_bytes=None,
        by_block=False,
    )


def _memory_bandwidth_Bps(costs: Costs) -> float:
    """GPU memory bandwidth (bytes/s) when the cost model knows it, else 0."""
    spec = getattr(costs, "gpu_spec", None)
    return float(getattr(spec, "memory_bandwidth_Bps", 0.0) or 0.0)
