"""The screen reads a transformer stack as its block and a count (issue 14): it makes none of
the stack's copies, and answers exactly as it does on the same layers as a plain tuple."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from perfmodel.pipeline.inputs import zoo_workload
from perfmodel.search.plans import ModelShape
from perfmodel.search.screen import PlanScreen
from perfmodel.workload import build_model
from perfmodel.workload.layers import StackedLayers, split_at_copies, whole_copies

ARGS = {"layers": 6, "hidden": 512, "heads": 8, "seq_len": 256}
BASE = {"system": "dgx-a100", "model": "gpt", "model_args": ARGS, "precision": "bf16"}


@pytest.fixture(autouse=True)
def _fresh_workloads() -> None:
    """The screen's workloads are ``predict``'s cached ones (``zoo_workload``): start from an
    empty cache, so that the copies counted are this test's."""
    zoo_workload.cache_clear()


def _made(screen: PlanScreen) -> int:
    """Copies the screen's workloads have made (layers read from a stack's copies)."""
    stacks = [wl.layers for wl in screen._wl_cache.values()]
    assert stacks and all(isinstance(s, StackedLayers) for s in stacks)
    return sum(la is not None for s in stacks for la in s._s.cache)  # type: ignore[attr-defined]


def _plan(tp: int, pp: int, recompute: str = "none") -> dict[str, Any]:
    return {"gpus": 2 * tp * pp, "tp": tp, "pp": pp, "global_batch": 16, "microbatch": 1} | {
        "recompute": recompute
    }


def test_screen_makes_no_copy_of_the_stack() -> None:
    """6 blocks (blocks 0 and 1 built, 4 copies of block 1): first stages of 6, 2 and 1
    blocks hold 4 or no whole copies, so none is made (before, every one of the 4 x 12 was)."""
    screen = PlanScreen(BASE)
    for tp, pp in ((1, 1), (2, 1), (2, 3), (1, 3)):  # pp 2: see the next test
        for rc in ("none", "full"):
            screen(_plan(tp, pp, rc))
    assert _made(screen) == 0


def test_a_last_stage_of_one_copy_makes_that_copy_only() -> None:
    """pp 6: the last stage (whose memory the screen takes too, with the LM head and loss;
    issue 28) is the stack's last copy and the layers after it: that one copy is made once,
    whatever the recomputation."""
    screen = PlanScreen(BASE)
    for rc in ("none", "full"):
        screen(_plan(1, 6, rc))
    template = whole_copies(screen._workload(1, 1, False).layers)[1]  # type: ignore[index]
    assert _made(screen) == len(template)


def test_a_stage_with_one_whole_copy_makes_only_that_copy() -> None:
    """A stage of 3 blocks holds one whole copy, which ``layer_runs`` gives as the copy's own
    layers (:meth:`StackedLayers.pieces`; the template's carry another block index, and the
    full-recompute memory must count two blocks, not one): only that copy is made."""
    screen = PlanScreen(BASE)
    screen(_plan(1, 2, "full"))
    template = whole_copies(screen._workload(1, 1, False).layers)[1]  # type: ignore[index]
    assert _made(screen) == len(template)


class _TupleScreen(PlanScreen):
    """The same screen on the same layers held as a plain tuple (read layer by layer)."""

    def _workload(
        self, batch: int, tp: int, sp: bool, ep: int = 1, cp: int = 1, kern: int = 0, etp: int = 0
    ) -> Any:
        wl = super()._workload(batch, tp, sp, ep, cp, kern, etp)
        return replace(wl, layers=tuple(wl.layers))


@pytest.mark.parametrize("recompute", ["none", "selective", "full"])
def test_stack_reports_equal_the_tuple_reports(recompute: str) -> None:
    """Every report number bit-equal to a layer-by-layer read: the block sums add the same
    block times in the same order, the FLOP and parameter sums the same numbers in order."""
    stacked, plain = PlanScreen(BASE), _TupleScreen(BASE)
    for tp, pp in ((1, 1), (2, 1), (1, 2), (2, 2), (1, 3), (2, 4), (1, 6)):
        a, b = stacked(_plan(tp, pp, recompute)), plain(_plan(tp, pp, recompute))
        assert a == b, (tp, pp)
    assert isinstance(plain._workload(1, 1, False).layers, tuple)


def test_split_at_copies_finds_the_copies() -> None:
    """6 blocks: the built layers (embedding, blocks 0 and 1), 4 copies of block 1 with
    indices 2-5, the head; a slice is cut at its whole copies; a tuple has none."""
    layers = build_model("gpt", batch_size=1, **ARGS).layers
    before, block, blocks, after = split_at_copies(layers)
    assert blocks == range(2, 6) and {la.block for la in block} == {1}
    assert len(before) + 4 * len(block) + len(after) == len(layers)
    assert [la.block for la in layers[len(before) : len(before) + len(block)]] == [2] * len(block)
    assert before[-1].block == 1 and after[0].block is None
    p, start = len(block), len(before)
    assert whole_copies(layers[start + 1 : start + 3 * p]) == (p - 1 + 0, block, range(3, 5))
    assert whole_copies(layers[: start + p - 1]) is None
    assert split_at_copies(tuple(layers))[2] == range(0)


def test_model_shape_counts_the_copies() -> None:
    """The block count reads the copies' indices: 6 (96 for GPT-3) without making them."""
    assert ModelShape.from_model("gpt", ARGS).num_blocks == 6
    assert ModelShape.from_model("gpt", {**ARGS, "layers": 96}).num_blocks == 96
