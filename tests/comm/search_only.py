"""Test helper: :class:`~perfmodel.comm.links.DirectedLinks` with every shortcut turned off, the
full computation the symmetry and fabric-pattern shortcuts are compared with."""

from __future__ import annotations

from perfmodel.comm.links import DirectedLinks
from perfmodel.comm.paths import min_hop_widest
from perfmodel.topology import route


class SearchOnly(DirectedLinks):
    """The full computation: every route searched, none mapped from another server."""

    def _canonical_route(self, src: str, dst: str) -> tuple[str, ...] | None:
        return None

    def _fabric_route(
        self, src: str, dst: str, fabric: frozenset[str], pattern: object = None
    ) -> tuple[str, ...]:
        res = min_hop_widest(self, None, src, dst, fabric | {src, dst}, per_unit=False)
        return res[2] if res is not None else route(self.topology, src, dst)
