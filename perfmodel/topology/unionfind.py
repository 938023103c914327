"""Disjoint sets of node ids (union-find with path halving; Tarjan 1975): the connected parts
that the topology code groups GPUs by (NVLink domains, PCIe switches and host bridges of an
imported ``nvidia-smi topo -m`` matrix).

The root of a set is always its smallest member (a union keeps the smaller root), so the groups
do not depend on the order of the unions.
"""

from __future__ import annotations

from collections.abc import Iterable


class UnionFind:
    """Disjoint sets over ``items`` (each alone at first).

    >>> uf = UnionFind(["g2", "g0", "g1", "sw"])
    >>> uf.union("g2", "sw"); uf.union("sw", "g0")
    >>> uf.find("g2"), uf.groups(["g0", "g1", "g2"])
    ('g0', [['g0', 'g2'], ['g1']])
    """

    def __init__(self, items: Iterable[str]) -> None:
        self.parent = {i: i for i in items}

    def __contains__(self, x: str) -> bool:
        return x in self.parent

    def find(self, x: str) -> str:
        """The root (smallest member) of ``x``'s set."""
        while self.parent[x] != x:
            self.parent[x] = self.parent[self.parent[x]]
            x = self.parent[x]
        return x

    def union(self, a: str, b: str) -> None:
        """Join the sets of ``a`` and ``b``."""
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[max(ra, rb)] = min(ra, rb)

    def groups(self, order: Iterable[str]) -> list[list[str]]:
        """The members of ``order`` grouped by set, each group and the groups in ``order``."""
        out: dict[str, list[str]] = {}
        for x in order:
            out.setdefault(self.find(x), []).append(x)
        return list(out.values())


__all__ = ["UnionFind"]
