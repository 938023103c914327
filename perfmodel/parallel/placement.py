"""Placement: which GPU of the topology runs which (dp, pp, tp) rank.

Default order (the frameworks' own): tensor-parallel ranks vary fastest, then data-parallel
replicas (context-parallel rank fastest inside them), then pipeline stages OUTERMOST, over
:attr:`Topology.gpus` (server-major rank order). Every framework the presets model does so:

- Megatron-LM ``megatron/mpu/initialize.py`` ``initialize_model_parallel`` @5489bda9bc (2021-02,
  the SC21 code): pipeline groups are ranks ``world/pp`` apart, data-parallel groups stride
  ``tp`` inside each stage's block of ``world/pp`` ranks;
- Megatron-Core ``megatron/core/parallel_state.py`` ``RankGenerator`` default order
  ``"tp-cp-ep-dp-pp"`` (@d98e8a64dd), which NeMo uses;
- torchtitan ``parallelisms/parallel_dims.py`` @49c6d6fc15ef: device mesh
  ``[pp, dp_replicate, dp_shard, cp, tp]`` (last dimension fastest);
- DeepSpeed ``deepspeed/runtime/pipe/topology.py`` @2eafdd39db: ``PipeModelDataParallelTopology``
  axes ``['pipe', 'data', 'model']`` (last axis fastest);
- InternEvo ``internlm/core/context/process_group_initializer.py``: ``MTP_GROUP_ORDER``
  ``[TENSOR, DATA, PIPELINE]``.

So a TP group of ``tp <= gpus_per_node`` sits inside one server and its collectives run on
NVLink/PCIe; a stage's data-parallel group fills the rest of the server before it spans NICs;
pipeline neighbours are ``tp x dp`` ranks apart (usually another server: a point-to-point
activation per microbatch, far fewer bytes than the gradient reduction). ``order`` permutes the
dimensions (``"tp,pp,dp"`` puts stages before DP replicas, as perfmodel's default did before)
and ``gpus`` overrides the GPU list entirely.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from perfmodel.errors import ConfigError, InfeasiblePlanError
from perfmodel.parallel.plan import Hybrid, ParallelismPlan
from perfmodel.topology import Topology

#: The default rank order, fastest first (pipeline stages outermost; the module docstring
#: names the frameworks).
DEFAULT_ORDER = ("tp", "dp", "pp")


def rank_strides(order: tuple[str, ...], dp: int, pp: int, tp: int) -> tuple[int, int, int]:
    """``(dp, pp, tp)`` rank strides of the mixed radix in ``order`` (fastest first) for
    dimensions of ``dp`` (the plan's ``dp x cp``), ``pp`` and ``tp`` ranks: the first
    dimension's stride is 1, each next one's the product of the sizes before it.

    >>> rank_strides(DEFAULT_ORDER, 2, 2, 4), rank_strides(("tp", "pp", "dp"), 2, 2, 4)
    ((4, 8, 1), (8, 4, 1))
    """
    size = {"dp": dp, "pp": pp, "tp": tp}
    stride, out = 1, {}
    for d in order:
        out[d] = stride
        stride *= size[d]
    return out["dp"], out["pp"], out["tp"]


@dataclass(frozen=True)
class Placement:
    """Rank-to-GPU map for a plan.

    Attributes
    ----------
    dp, tp, pp
        Plan dimensions (for one-weird-trick ``tp`` is 1 here: FC model parallelism spans the
        data-parallel group itself); ``dp`` is the plan's ``dp x cp`` (context-parallel rank
        fastest), the ranks that reduce the dense gradients together.
    gpus
        GPU node ids indexed by ``rank(dp_rank, pp_rank, tp_rank)``.
    order
        Dimension order, fastest first.
    """

    dp: int
    tp: int
    pp: int
    gpus: tuple[str, ...]
    order: tuple[str, str, str] = DEFAULT_ORDER

    @cached_property
    def _strides(self) -> tuple[int, int, int]:
        """``(dp, pp, tp)`` rank strides of the mixed radix in ``order`` (:func:`rank_strides`,
        computed once; not a field: equality and hashing ignore it)."""
        return rank_strides(self.order, self.dp, self.pp, self.tp)

    def rank(self, dp_rank: int, pp_rank: int, tp_rank: int) -> int:
        """Global rank of a coordinate (mixed radix in ``order``)."""
        s_dp, s_pp, s_tp = self._strides
        return dp_rank * s_dp + pp_rank * s_pp + tp_rank * s_tp

    def gpu(self, dp_rank: int, pp_rank: int, tp_rank: int) -> str:
        return self.gpus[self.rank(dp_rank, pp_rank, tp_rank)]

    # the groups are strided slices of ``gpus`` (a slice, not one rank() per member)
    def tp_group(self, dp_rank: int = 0, pp_rank: int = 0) -> tuple[str, ...]:
        r, step = self.rank(dp_rank, pp_rank, 0), self._strides[2]
        return self.gpus[r : r + step * self.tp : step]

    def dp_group(self, pp_rank: int = 0, tp_rank: int = 0) -> tuple[str, ...]:
        r, step = self.rank(0, pp_rank, tp_rank), self._strides[0]
        return self.gpus[r : r + step * self.dp : step]

    def pp_group(self, dp_rank: int = 0, tp_rank: int = 0) -> tuple[str, ...]:
        r, step = self.rank(dp_rank, 0, tp_rank), self._strides[1]
        return self.gpus[r : r + step * self.pp : step]


def place(
    plan: ParallelismPlan,
    topology: Topology,
    *,
    gpus: tuple[str, ...] | None = None,
    order: tuple[str, ...] = DEFAULT_ORDER,
) -> Placement:
    """Place ``plan`` on ``topology``.

    Parameters
    ----------
    gpus
        The GPUs to use, in rank order (default: the first ``plan.num_gpus`` of
        ``topology.gpus``).
    order
        Dimension order fastest first, e.g. ``("tp", "dp", "pp")`` (default: pipeline stages
        outermost, as every framework) or ``("tp", "pp", "dp")`` (text such as ``"tp,dp,pp"`` is parsed at the edge:
        :func:`perfmodel.scenario_parse.parse_placement`).

    Raises
    ------
    InfeasiblePlanError
        If the plan needs more GPUs than given, or does not use all of an explicit list.
    """
    if sorted(order) != sorted(DEFAULT_ORDER):
        raise ConfigError(
            f"placement order {','.join(order)!r} must be a permutation of tp,dp,pp",
            value=order,
            where="order",
        )
    n = plan.num_gpus
    if gpus is None:
        if n > topology.num_gpus:
            raise InfeasiblePlanError(
                f"plan {plan.describe()} needs {n} GPUs but system {topology.name} has "
                f"{topology.num_gpus}; shrink dp to {topology.num_gpus // (n // plan.dp) or 1}",
                value=n,
                where="plan",
            )
        gpus = topology.gpus[:n]
    else:
        known = frozenset(topology.gpus)  # a set: 16,384 GPUs checked against a tuple is O(n^2)
        unknown = [g for g in gpus if g not in known]
        if unknown:
            raise ConfigError(
                f"placement names GPUs not in {topology.name}: {unknown[:4]}",
                value=unknown,
                where="gpus",
            )
        if len(gpus) != n or len(set(gpus)) != n:
            raise InfeasiblePlanError(
                f"placement lists {len(set(gpus))} distinct GPUs but plan {plan.describe()} "
                f"needs exactly {n}",
                value=len(gpus),
                where="gpus",
            )
    tp = 1 if plan.hybrid is Hybrid.ONE_WEIRD_TRICK else plan.tp
    # context-parallel ranks hold replicas of the dense weights: they sit on the data axis,
    # context-parallel rank fastest (perfmodel.parallel.expert)
    return Placement(dp=plan.grad_replicas, tp=tp, pp=plan.pp, gpus=tuple(gpus), order=tuple(order))  # type: ignore[arg-type]
