""":func:`~perfmodel.comm.channels.channel_rates` hands the filling the incidence entries the
tuple-keyed merge gave (issue 27, session 26): a channel's multiplicity on a link is ``0.0`` plus
its hops' charges there in hop order, and the entries come sorted by (channel, link id)."""

from __future__ import annotations

import random
from typing import Any

import pytest

import perfmodel.comm.channels as channels
from perfmodel.comm.rings import Channel


class _Links:
    """Link ids of node paths (:meth:`DirectedLinks._ids_of`'s part that ``channel_rates``
    reads) and the capacities by id."""

    def __init__(self, ids: dict[tuple[str, ...], tuple[int, ...]], n: int) -> None:
        self._ids = ids
        self.capacity_list = [25e9] * n

    def _ids_of(self, path: tuple[str, ...]) -> tuple[int, ...]:
        return self._ids[path]


def _reference(links: _Links, chans: list[Channel], charge: Any) -> tuple[list, list, list]:
    """The entries as the merge before this change built them."""
    merged: dict[tuple[int, int], float] = {}
    for c, ch in enumerate(chans):
        for hop in ch.hops:
            weight = 1.0 if charge is None else float(charge(hop))
            for e in links._ids_of(hop):
                merged[(c, e)] = merged.get((c, e), 0.0) + weight
    keys = sorted(merged)
    return [c for c, _ in keys], [e for _, e in keys], [merged[k] for k in keys]


@pytest.mark.parametrize("charged", [False, True])
def test_entries_are_the_merged_ones(charged: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(11 + charged)
    got: list[tuple[list, list, list]] = []
    monkeypatch.setattr(channels, "fill_rates", lambda fi, ei, m, cap, n: got.append((fi, ei, m)))
    for trial in range(200):
        n_links = rng.randint(1, 12)
        ids: dict[tuple[str, ...], tuple[int, ...]] = {}
        chans = []
        for c in range(rng.randint(1, 6)):
            hops = []
            for h in range(rng.randint(1, 4)):
                path = tuple(f"t{trial}c{c}h{h}n{k}" for k in range(rng.randint(2, 6)))
                ids[path] = tuple(rng.randrange(n_links) for _ in range(len(path) - 1))
                hops.append(path)
            chans.append(Channel((hops[0][0], hops[-1][-1]), tuple(hops)))
        weights = {hop: rng.choice([1.0, 1.25, 0.8, 1 / 3, 3.0]) for ch in chans for hop in ch.hops}
        charge = weights.__getitem__ if charged else None
        links = _Links(ids, n_links)
        got.clear()
        channels.channel_rates(links, chans, charge)  # type: ignore[arg-type]
        assert got == [_reference(links, chans, charge)], trial
