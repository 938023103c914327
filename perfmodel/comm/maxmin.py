"""Max-min fair bandwidth sharing by progressive filling (Bertsekas & Gallager, *Data Networks*,
2nd ed., section 6.5.2).

Flows cross capacitated resources (directed links). All unfrozen flows grow at the same rate;
when a resource saturates, every flow crossing it is frozen at its current rate. A flow may
cross a resource several times (``mult``): a pipelined ring *channel* is one flow whose hops all
move at the same rate, and two of its hops may share a link.

The function is shared by the closed-form model (steady-state rate of ring channels) and the
flow-level simulator (rates between two flow events), so the two fidelities agree by
construction where nothing else differs.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

_TOL = 1e-12


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

    >>> r = maxmin_rates(np.array([0, 1, 1]), np.array([0, 0, 1]), np.ones(3), np.array([10e9, 2e9]), 2)
    >>> [float(x) / 1e9 for x in r]
    [8.0, 2.0]
    """
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
