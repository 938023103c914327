"""StackedLayers reads as the tuple of its layers, makes each copy once, and describes itself
as pieces (a block and its copies) that match the layers one by one."""

from __future__ import annotations

import pickle

import pytest

from perfmodel.workload.layers import LayerCost, LayerKind, StackedLayers, layer_runs, runs_sum


def _layer(name: str, block: int | None, flop: float = 1.0) -> LayerCost:
    return LayerCost(
        name=name,
        kind=LayerKind.LINEAR,
        fwd_flop=flop,
        bwd_input_flop=flop,
        bwd_weight_flop=flop,
        params=3,
        fwd_bytes=1.0,
        bwd_bytes=1.0,
        activation_bytes=0.1,
        output_shape=(2, 3),
        block=block,
    )


def _stack() -> tuple[StackedLayers, tuple[LayerCost, ...]]:
    """emb, layer0 (block 0), layer1 (block 1, the template: a, b), 3 copies (blocks 2-4),
    head; and the same sequence built by hand."""
    emb, l0 = _layer("emb", None), _layer("layer0.a", 0, 5.0)
    t = (_layer("layer1.a", 1, 2.0), _layer("layer1.b", 1, 3.0))
    head = _layer("head", None, 7.0)
    st = StackedLayers.of((emb, l0, *t), t, 3, (head,), first=2, strip=len("layer1."), block0=2)
    copies = tuple(la.relabelled(f"layer{i}.{la.name[7:]}", i) for i in (2, 3, 4) for la in t)
    return st, (emb, l0, *t, *copies, head)


def test_reads_as_the_tuple() -> None:
    st, flat = _stack()
    assert len(st) == len(flat) == 11
    assert st == flat and flat == st and tuple(st) == flat
    assert [la.name for la in st] == [la.name for la in flat]
    assert [la.block for la in st] == [None, 0, 1, 1, 2, 2, 3, 3, 4, 4, None]
    assert st[-1] is flat[-1] and st[6] is st[6]  # a copy is made once
    assert st[6].cost_source() is flat[2]
    assert hash(st) == hash(flat) and repr(st) == repr(flat)
    tail, head = st.__add__((flat[0],)), st.__radd__((flat[0],))  # tuple + works both ways
    assert tail == (*flat, flat[0]) and head == (flat[0], *flat)
    assert st[::2] == flat[::2] and st[3:8] == flat[3:8] and st[3:8][1:] == flat[4:8]
    with pytest.raises(IndexError):
        st[11]
    back = pickle.loads(pickle.dumps(st))
    assert isinstance(back, StackedLayers) and back == flat


@pytest.mark.parametrize(("lo", "hi"), [(0, 11), (3, 9), (4, 10), (5, 8), (6, 8), (5, 7), (9, 11)])
def test_pieces_match_the_layers(lo: int, hi: int) -> None:
    st, flat = _stack()
    view = st[lo:hi]
    layers = [la for block, n in layer_runs(view) for _ in range(n) for la in block]
    assert [la.cost_key() for la in layers] == [la.cost_key() for la in flat[lo:hi]]
    total = runs_sum(view, lambda la: la.fwd_flop)  # integers: exact in any order
    assert total == sum(la.fwd_flop for la in flat[lo:hi])
    whole = {la.block for la in flat[lo:hi]}
    assert set(view.copy_blocks()) <= whole


def test_pieces_of_a_slice_by_hand() -> None:
    st, _ = _stack()
    # layers 5..9: the last layer of the first copy (block 2), then the other two copies whole
    pieces = st[5:10].pieces()
    assert [(len(b), n) for b, n in pieces] == [(1, 1), (2, 2)]
    assert st[5:10].copy_blocks() == range(3, 5)
    assert layer_runs((st[0],)) == [((st[0],), 1)]


def test_template_must_be_one_block() -> None:
    a, b = _layer("layer1.a", 1), _layer("layer1.b", 2)
    with pytest.raises(ValueError, match="one block"):
        StackedLayers.of((a, b), (a, b), 2, (), first=2, strip=7, block0=3)
    with pytest.raises(ValueError, match="one block"):  # the tail would continue copy 2's block
        StackedLayers.of((a,), (a,), 2, (_layer("x", 3),), first=2, strip=7, block0=2)


@pytest.mark.parametrize(
    ("names", "strip"),
    [
        (("fc", "layer1.attn_dropout"), 9),  # the prefix cut inside a name (and a name too short)
        (("layer1.a", "layer2.b"), 7),  # two prefixes: a copy would rename one wrongly
        (("layer1.a", "layer1.b"), 6),  # the prefix does not end in "."
    ],
)
def test_template_names_share_the_stripped_prefix(names: tuple[str, ...], strip: int) -> None:
    """A copy's name replaces the template's first ``strip`` characters, so they must be one
    dotted prefix of every template name (session 25: ``copies_runs`` reads the template's
    names for a copy's, as selective recomputation's ``attn_dropout`` test does)."""
    template = tuple(_layer(n, 1) for n in names)
    with pytest.raises(ValueError, match="name prefix"):
        StackedLayers.of((), template, 2, (), first=2, strip=strip, block0=1)
    ok = tuple(_layer(f"layer1.{n[-1]}", 1) for n in names)
    assert len(StackedLayers.of((), ok, 2, (), first=2, strip=7, block0=1)) == 2 * len(ok)
