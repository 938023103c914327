"""``perfmodel._malloc.keep_heap``: nested and failing uses leave the allocator setting as they
found it (the outermost ``with`` sets and restores it), and it never changes a result."""

from __future__ import annotations

import pytest

from perfmodel import _malloc


def test_keep_heap_sets_the_pad_for_the_outermost_use_only(monkeypatch) -> None:
    calls: list[tuple[int, int]] = []
    monkeypatch.setattr(_malloc, "_mallopt", lambda p, v: calls.append((p, v)) or 1)
    with _malloc.keep_heap():
        with _malloc.keep_heap(1 << 20):
            assert calls == [(_malloc.M_TOP_PAD, _malloc.TOP_PAD_BYTES)]
        assert len(calls) == 1
    assert calls == [
        (_malloc.M_TOP_PAD, _malloc.TOP_PAD_BYTES),
        (_malloc.M_TOP_PAD, _malloc.DEFAULT_TOP_PAD_BYTES),
    ]
    with pytest.raises(RuntimeError), _malloc.keep_heap():
        raise RuntimeError("boom")
    assert calls[-1] == (_malloc.M_TOP_PAD, _malloc.DEFAULT_TOP_PAD_BYTES)
    assert len(calls) == 4 and _malloc._HEAP.depth == 0


def test_keep_heap_does_nothing_without_glibc(monkeypatch) -> None:
    monkeypatch.setattr(_malloc, "_mallopt", False)
    with _malloc.keep_heap():
        assert _malloc._HEAP.depth == 1
    assert _malloc._HEAP.depth == 0
