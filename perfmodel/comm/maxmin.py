"""Max-min fair bandwidth sharing by progressive filling (Bertsekas & Gallager, *Data Networks*,
2nd ed., section 6.5.2).

Flows cross capacitated resources (directed links). All unfrozen flows grow at the same rate;
when a resource saturates, every flow crossing it is frozen at its current rate. A flow may
cross a resource several times (``mult``): a pipelined ring *channel* is one flow whose hops all
move at the same rate, and two of its hops may share a link.

The function is shared by the closed-form model (steady-state rate of ring channels) and the
flow-level simulator (rates between two flow events), so the two fidelities agree by
construction where nothing else differs.

:func:`maxmin_rates` works on numpy arrays (the flow simulator's many flows);
:func:`maxmin_rates_small` is the same progressive filling in plain Python, operation for
operation, for the few entries of a group's ring channels: the analytic prediction then does not
import numpy (issue 14, cold start: numpy's import is ~0.1-0.25 s CPU of a fresh process). Both
give the same rates bit for bit (IEEE double arithmetic, the same operations in the same order;
``tests/comm/test_pure_python_rates.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray

_TOL = 1e-12
#: numpy's pairwise-summation block (``PW_BLOCKSIZE``, numpy/_core/src/umath/loops_utils.h.src)
_PW_BLOCK = 128


def maxmin_rates(
    flow_idx: NDArray[np.int64],
    edge_idx: NDArray[np.int64],
    mult: NDArray[np.float64],
    capacity_Bps: NDArray[np.float64],
    n_flows: int,
) -> NDArray[np.float64]:
    """Max-min fair rates (bytes/s) of ``n_flows`` flows.

    Parameters
    ----------
    flow_idx, edge_idx, mult
        Incidence entries: flow ``flow_idx[k]`` crosses resource ``edge_idx[k]`` ``mult[k]`` times.
    capacity_Bps
        Capacity of each resource, bytes/s (> 0).
    n_flows
        Number of flows; a flow with no entry gets ``inf`` (it crosses nothing).

    Returns
    -------
    numpy.ndarray
        Rate of every flow, bytes/s.

    Examples
    --------
    Two flows share a 10 GB/s link; the second also crosses a 2 GB/s link:

    >>> import numpy as np
    >>> r = maxmin_rates(np.array([0, 1, 1]), np.array([0, 0, 1]), np.ones(3), np.array([10e9, 2e9]), 2)
    >>> [float(x) / 1e9 for x in r]
    [8.0, 2.0]
    """
    import numpy as np

    rate = np.zeros(n_flows)
    if n_flows == 0:
        return rate
    has_entry = np.zeros(n_flows, dtype=bool)
    has_entry[flow_idx] = True
    rate[~has_entry] = np.inf
    active = has_entry.copy()
    remaining = np.asarray(capacity_Bps, dtype=float)
    if remaining.size > edge_idx.size:
        # Work on the resources the flows cross only, so the cost follows the flows, not the
        # links of the system (a 16,384-GPU cluster has ~10^5 directed links, a few sends cross
        # dozens); with more entries than resources the sort would cost more than it saves.
        used, edge_idx = np.unique(edge_idx, return_inverse=True)
        remaining = remaining[used]
    else:
        remaining = remaining.copy()
    n_edges = remaining.shape[0]
    tol = _TOL * np.maximum(remaining, 1.0)
    while active.any():
        entry_active = active[flow_idx]
        load = np.bincount(edge_idx[entry_active], weights=mult[entry_active], minlength=n_edges)
        loaded = load > 0
        share = np.full(n_edges, np.inf)
        share[loaded] = remaining[loaded] / load[loaded]
        t = float(share.min())
        if not np.isfinite(t):  # pragma: no cover - every active flow has an entry
            break
        t = max(t, 0.0)
        rate[active] += t
        remaining -= t * load
        saturated = loaded & (remaining <= tol + 1e-9 * t * load)
        hit = np.zeros(n_flows, dtype=bool)
        hit[flow_idx[saturated[edge_idx] & entry_active]] = True
        if not hit.any():  # numerical safety: freeze the flows of the tightest edge
            k = int(np.argmin(share))
            hit[flow_idx[(edge_idx == k) & entry_active]] = True
        active &= ~hit
    return rate


def maxmin_rates_small(
    flow_idx: Sequence[int],
    edge_idx: Sequence[int],
    mult: Sequence[float],
    capacity_Bps: Sequence[float],
    n_flows: int,
) -> list[float]:
    """:func:`maxmin_rates` in plain Python: the same rates, bit for bit, for few entries.

    Each step repeats :func:`maxmin_rates`'s float operations in its order: a resource's load
    is ``0.0`` plus its active entries' ``mult`` in entry order (``numpy.bincount``), the fill
    level ``t`` the smallest ``remaining / load``, every active flow's rate grows by ``t``, a
    resource saturates where ``remaining <= tol + (1e-9 * t) * load``, and the numerical-safety
    fallback freezes the flows of the lowest-numbered resource of smallest share (``argmin``
    over resources in id order, as both of :func:`maxmin_rates`'s resource numberings keep
    it). Cost ``O(steps x entries)`` without numpy's import or per-call overhead; the flow
    simulator's many flows stay on :func:`maxmin_rates`.

    ``capacity_Bps`` is read at the resources named in ``edge_idx`` only.

    >>> maxmin_rates_small([0, 1, 1], [0, 0, 1], [1.0, 1.0, 1.0], [10e9, 2e9], 2)
    [8000000000.0, 2000000000.0]
    """
    rate = [0.0] * n_flows
    if n_flows == 0:
        return rate
    active = [False] * n_flows
    for f in set(flow_idx):
        active[f] = True
    for f in range(n_flows):
        if not active[f]:
            rate[f] = float("inf")
    # resources by rank in id order (numpy.unique's, or the whole range's): column j of the
    # lists below is resource used[j]
    used = sorted(set(edge_idx))
    cols = range(len(used))
    col_of = dict(zip(used, cols))
    remaining = list(map(float, map(capacity_Bps.__getitem__, used)))
    tol = [_TOL * max(r, 1.0) for r in remaining]
    live = list(zip(flow_idx, map(col_of.__getitem__, edge_idx), mult))
    while live:  # the entries of the active flows, in entry order
        load = [0.0] * len(used)
        for _, j, m in live:
            load[j] += m
        t = float("inf")
        arg = None
        for j in cols:  # the first resource of the smallest share, in id order
            if load[j] > 0:
                share = remaining[j] / load[j]
                if share < t:
                    t, arg = share, j
        if arg is None:  # pragma: no cover - every active flow has an entry
            break
        t = max(t, 0.0)
        for f in range(n_flows):
            if active[f]:
                rate[f] += t
        slack = 1e-9 * t
        saturated = [False] * len(used)
        for j in cols:
            lj = load[j]
            if lj > 0:
                remaining[j] -= t * lj
                if remaining[j] <= tol[j] + slack * lj:
                    saturated[j] = True
        hit = {f for f, j, _ in live if saturated[j]}
        if not hit:  # numerical safety: freeze the flows of the tightest resource
            hit = {f for f, j, _ in live if j == arg}
        for f in hit:
            active[f] = False
        live = [x for x in live if active[x[0]]]
    return rate


def numpy_sum(values: Sequence[float]) -> float:
    """``float(numpy.sum(values))`` for a 1-d float64 sequence, in plain Python, bit for bit.

    numpy adds a contiguous float64 array by pairwise summation (``pairwise_sum`` in
    numpy/_core/src/umath/loops_utils.h.src, numpy 1.9 to 2.x): fewer than 8 values from
    ``0.0`` in order; up to 128 in 8 running sums combined as
    ``((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))`` then the remainder in order; more
    split at half rounded down to a multiple of 8. A group's bus bandwidth is the sum of its
    channels' rates (:mod:`perfmodel.comm.model`), so the sum without numpy is the same number.

    >>> numpy_sum([1.0] * 9 + [2.0 ** 53]) == ((2.0 + 2.0) + (2.0 + 2.0)) + 1.0 + 2.0 ** 53
    True
    """
    return _pairwise(list(values), 0, len(values))


def _pairwise(a: list[float], lo: int, n: int) -> float:
    if n < 8:
        res = 0.0
        for i in range(lo, lo + n):
            res += a[i]
        return res
    if n <= _PW_BLOCK:
        r = a[lo : lo + 8]
        i = 8
        whole = n - n % 8
        while i < whole:
            for j in range(8):
                r[j] += a[lo + i + j]
            i += 8
        res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]))
        for k in range(lo + i, lo + n):
            res += a[k]
        return res
    n2 = n // 2
    n2 -= n2 % 8
    return _pairwise(a, lo, n2) + _pairwise(a, lo + n2, n - n2)
