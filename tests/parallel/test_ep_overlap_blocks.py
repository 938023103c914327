"""``ep_overlap`` exposes a transformer block's expert all-to-alls beside the same block's
compute of the other phase, block by block (Megatron-Core's combined 1F1B pairs layers:
``TransformerModelChunkSchedulePlan.run``, Megatron-LM 4415119), so the exposure does not
depend on how the gradient buckets group the layers into segments."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from perfmodel.dtypes import Precision
from perfmodel.ops import CollectiveOp
from perfmodel.parallel.lowering import Chunk, build_chunk
from perfmodel.parallel.plan import ParallelismPlan
from perfmodel.parallel.taskgraph import CommKind
from perfmodel.workload.layers import CommPoint, ExpertRole, LayerCost, LayerKind, Workload

#: forward seconds of each layer (backward: twice); an all-to-all of ``n`` bytes takes
#: ``n / 1e9`` s (1 GB/s): the dispatch and combine of either block move 3 MB each way
_FWD = {"attn0": 3e-3, "experts0": 1e-3, "attn1": 0.6e-3, "experts1": 0.4e-3, "head": 20e-3}
_A2A = CommPoint(CollectiveOp.ALLTOALL, 3e6, "ep")


class _Costs:
    precision = Precision.BF16

    def layer_time(self, layer: LayerCost) -> tuple[float, float, float]:
        f = _FWD.get(layer.name, 0.0)
        return f, f, f  # backward = input + weight gradients = 2 x forward

    def collective_time(self, *a: object, **k: object) -> float:
        return 0.0

    def concurrent_time(self, op: CollectiveOp, nbytes: float, groups: object, alg: str) -> float:
        return nbytes / 1e9


def _lay(name: str, block: int | None, role: ExpertRole | None, params: int) -> LayerCost:
    moves = role in (ExpertRole.DISPATCH, ExpertRole.COMBINE)
    return LayerCost(
        name=name, kind=LayerKind.LINEAR, fwd_flop=1.0, bwd_input_flop=1.0,
        bwd_weight_flop=1.0, params=params, fwd_bytes=1.0, bwd_bytes=1.0,
        activation_bytes=0.0, output_shape=(1,), block=block, expert_role=role,
        fwd_comm=(_A2A,) if moves else (), bwd_comm=(_A2A,) if moves else (),
    )  # fmt: skip


def _workload() -> Workload:
    """Two unlike MoE blocks: block 0 computes 4 ms forward / 8 ms backward, block 1
    1 / 2 ms; each has 6 ms of all-to-all per phase (dispatch and combine). A head outside
    the blocks (20 / 40 ms, no parameters: in block 1's last bucket) runs outside Megatron's
    layer pairs and hides nothing."""
    layers = [
        la
        for b in (0, 1)
        for la in (
            _lay(f"attn{b}", b, None, 100),
            _lay(f"dispatch{b}", b, ExpertRole.DISPATCH, 1),
            _lay(f"experts{b}", b, ExpertRole.EXPERT, 100),
            _lay(f"combine{b}", b, ExpertRole.COMBINE, 1),
        )
    ]
    layers.append(_lay("head", None, None, 0))
    return Workload(
        name="t", layers=tuple(layers), batch_size=1, precision=Precision.BF16, total_params=0
    )


def _chunk(bucket_bytes: float | None, by_block: bool = False, overlap: bool = True) -> Chunk:
    plan = ParallelismPlan(dp=2, ep=2, ep_overlap=overlap)
    return build_chunk(
        _workload(), list(range(9)), _Costs(), plan, ("g0",),  # type: ignore[arg-type]
        bucket_bytes=bucket_bytes, first_bucket_bytes=None, by_block=by_block,
        comm_groups={"ep": (("g0", "g1"),)},
    )  # fmt: skip


def _ep(chunk: Chunk, phase: str, what: str = "duration_s") -> float:
    return sum(
        getattr(c, what)
        for seg in chunk.segments
        for c in seg.ep_cp
        if c.kind is CommKind.EP and c.phase == phase
    )


def _sizes(chunk: Chunk) -> list[int]:
    return [len(chunk.segment_ids(k)) for k in range(len(chunk.segments))]


def test_two_unlike_blocks_in_one_segment_golden() -> None:
    """One segment holds both blocks (one bucket). Hand-computed, per block,
    ``max(0, a2a - other) + min(a2a, other) x 0.05``:
    block 0: forward 6 ms beside 8 ms of backward: 0.3 ms; backward 6 beside 4: 2.2 ms;
    block 1: forward 6 beside 2: 4.1 ms; backward 6 beside 1: 5.05 ms.
    Summed over the segment instead (12 ms beside 10 / 5 ms: 2.5 and 7.25 ms) block 0's
    spare backward compute (8 - 6 = 2 ms) would hide 2 ms of block 1's forward all-to-alls
    (exposed forward 4.4 -> 2.5 ms)."""
    chunk = _chunk(None)
    assert _sizes(chunk) == [9]
    assert _ep(chunk, "F") == pytest.approx(0.3e-3 + 4.1e-3)
    assert _ep(chunk, "B") == pytest.approx(2.2e-3 + 5.05e-3)
    # the transfers stay; the replayed bytes are the exposed share of each block's
    assert _ep(chunk, "F", "full_s") == pytest.approx(12e-3)
    assert _ep(chunk, "F", "message_bytes") == pytest.approx(6e6 * (0.3 / 6 + 4.1 / 6))
    # unpaired (warm-up / cool-down) operations expose the issued all-to-alls in full
    (seg,) = chunk.segments
    assert sum(c.duration_s for c in seg.ep_unpaired if c.phase == "F") == pytest.approx(12e-3)
    assert sum(c.duration_s for c in seg.ep_unpaired if c.phase == "B") == pytest.approx(12e-3)


@pytest.mark.parametrize(
    ("bucket_bytes", "by_block"),
    [(None, True), (2.0, False), (150.0, False), (410.0, False)],
)
def test_exposure_does_not_depend_on_the_buckets(
    bucket_bytes: float | None, by_block: bool
) -> None:
    """The same plan with one bucket, one segment per block, and buckets that split the
    blocks (2 bytes: a layer each; 150 bytes: each dispatch apart from its experts; 410 bytes:
    block 0's experts and combine with all of block 1): the same exposed all-to-all time per
    phase, and the same replayed bytes."""
    whole = _chunk(None)
    other = _chunk(bucket_bytes, by_block)
    assert len(other.segments) > 1
    for phase in ("F", "B"):
        assert _ep(other, phase) == pytest.approx(_ep(whole, phase), rel=1e-12)
        assert _ep(other, phase, "message_bytes") == pytest.approx(
            _ep(whole, phase, "message_bytes"), rel=1e-12
        )


def test_without_overlap_every_alltoall_is_exposed() -> None:
    """The plan without ``ep_overlap``: the issued all-to-alls in full, whatever the buckets."""
    for kw in ({"bucket_bytes": None}, {"bucket_bytes": 2.0}):
        chunk = _chunk(overlap=False, **kw)  # type: ignore[arg-type]
        assert _ep(chunk, "F") == pytest.approx(12e-3)
        assert all(not seg.ep_unpaired for seg in chunk.segments)


def _segment_layers(chunk: Chunk) -> Sequence[tuple[int, ...]]:
    return [tuple(chunk.segment_ids(k)) for k in range(len(chunk.segments))]


def test_a_split_block_takes_its_whole_share() -> None:
    """Buckets of 150 bytes (filled in backward order) cut block 1 between its dispatch and
    its experts: the dispatch's segment holds no compute of its block's backward, yet its
    forward all-to-all is exposed by block 1's share (4.1 / 6), not in full."""
    chunk = _chunk(150.0)
    segs = _segment_layers(chunk)
    assert any(5 in ids and 6 not in ids for ids in segs), segs
    seg = next(s for s, ids in zip(chunk.segments, segs, strict=True) if 5 in ids)
    got = sum(c.duration_s for c in seg.ep_cp if c.kind is CommKind.EP and c.phase == "F")
    assert got == pytest.approx(3e-3 * 4.1 / 6)


def test_context_collectives_beside_the_all_to_alls_stay_whole() -> None:
    """A layer that also runs a context-parallel collective (group ``cp``) keeps it as issued:
    ``ep_overlap`` hides only the expert all-to-alls (the cp entry's exposed time is its full
    time, 2 ms of 2 MB each phase), while the all-to-alls beside it are scaled."""
    from dataclasses import replace as _replace

    cp = CommPoint(CollectiveOp.ALLGATHER, 2e6, "cp")
    wl = _workload()
    layers = tuple(
        _replace(la, fwd_comm=(*la.fwd_comm, cp), bwd_comm=(*la.bwd_comm, cp))
        if la.name == "dispatch0"
        else la
        for la in wl.layers
    )
    plan = ParallelismPlan(dp=2, ep=2, cp=2, ep_overlap=True)
    chunk = build_chunk(
        _replace(wl, layers=layers), list(range(9)), _Costs(), plan, ("g0",),  # type: ignore[arg-type]
        bucket_bytes=None, first_bucket_bytes=None, by_block=False,
        comm_groups={"ep": (("g0", "g1"),), "cp": (("g0", "g2"),)},
    )  # fmt: skip
    cps = [c for seg in chunk.segments for c in seg.ep_cp if c.kind is CommKind.CP]
    assert sorted(c.phase for c in cps) == ["B", "F"]
    assert all(c.duration_s == c.full_s == pytest.approx(2e-3) for c in cps)
    assert _ep(chunk, "F") < _ep(chunk, "F", "full_s")


def test_selective_recomputation_adds_its_rerun_to_the_backward_compute() -> None:
    """Under selective recomputation a block's backward also re-runs a share of its forward
    (as ``lowering._segment_sums`` charges it), and that compute hides the other phase's
    all-to-alls too. Block 1 with half of each forward re-run: backward 2 + 0.5 x 1 = 2.5 ms,
    so its 6 ms of forward all-to-all expose ``6 - 2.5 + 2.5 x 0.05 = 3.625`` ms (4.1 ms
    without the rerun: the golden above); block 0's 8 + 2 = 10 ms hide all but 0.3 ms still."""
    from perfmodel.parallel.segment_comm import SegmentCommContext, _block_overlap_shares

    layers = _workload().layers
    plan = ParallelismPlan(dp=2, ep=2, ep_overlap=True)
    ctx = SegmentCommContext(
        _Costs(), {"ep": (("g0", "g1"),)}, "ring", plan,  # type: ignore[arg-type]
        selective_share=lambda layer: 0.5, chunk_layers=layers,
    )  # fmt: skip
    shares = _block_overlap_shares(layers, ctx)
    assert shares[1][0] * 6e-3 == pytest.approx(3.625e-3)
    assert shares[0][0] * 6e-3 == pytest.approx(0.3e-3)
