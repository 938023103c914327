"""The communication cost model: one call, two fidelities.

``CommCostModel(topology).collective(op, message_bytes, group, algorithm="auto")`` answers "how
long does this collective take on these GPUs of this system", in nccl-tests terms (time, algbw,
busbw). ``fidelity="analytic"`` evaluates closed forms whose bandwidth comes from NCCL-style ring
channels on the topology graph (:class:`~perfmodel.comm.analytic.AnalyticCommModel`, whose
module docstring maps its parts); ``fidelity="simulated"`` runs the same algorithm as chunked
transfers in a fresh SimPy flow network (:mod:`perfmodel.comm.replay` on
:class:`~perfmodel.comm.flow.FlowNetwork`). Both are cached per model instance.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from perfmodel.comm.analytic import AnalyticCommModel, CommResult
from perfmodel.comm.links import DirectedLinks
from perfmodel.comm.nccl_recent import CLOSED_FORM_ONLY
from perfmodel.comm.params import Algorithm, LinkParams
from perfmodel.errors import ConfigError
from perfmodel.ops import CollectiveOp
from perfmodel.topology import Topology

FIDELITIES = ("analytic", "simulated")


class CommCostModel(AnalyticCommModel):
    """Collective costs on a :class:`~perfmodel.topology.Topology`, in either fidelity.

    Parameters
    ----------
    topology, link_params, links
        As for :class:`~perfmodel.comm.analytic.AnalyticCommModel`.
    fidelity
        ``"analytic"`` (closed forms on topology-derived bandwidths) or ``"simulated"``
        (chunked transfers in a SimPy flow network with max-min fair sharing).

    Examples
    --------
    >>> from perfmodel.topology import load_system
    >>> topo = load_system("dgx1-v100")
    >>> r = CommCostModel(topo).collective("allreduce", 2**30, topo.gpus, algorithm="ring")
    >>> round(r.bandwidth_Bps / 1e9)  # bus bandwidth: 6 NVLink2 rings x 22.5 GB/s (25 x 0.9)
    135
    """

    def __init__(
        self,
        topology: Topology,
        link_params: LinkParams | Mapping[str, Any] | None = None,
        fidelity: str = "analytic",
        links: DirectedLinks | None = None,
    ) -> None:
        if fidelity not in FIDELITIES:
            raise ConfigError(
                f"unknown fidelity {fidelity!r}; expected one of {FIDELITIES}",
                value=fidelity,
                where="fidelity",
            )
        super().__init__(topology, link_params, links)
        self.fidelity = fidelity

    def _priced(
        self, o: CollectiveOp, m: float, members: tuple[str, ...], algo: Algorithm, no_cpu: bool
    ) -> CommResult:
        """:meth:`AnalyticCommModel._priced`, or the flow replay's result (simulated fidelity)."""
        if self.fidelity == "analytic":  # AnalyticCommModel._priced, without its frame
            return self.shared.analytic(o, m, members, algo, no_cpu)
        return self._simulated(o, m, members, algo)

    # ------------------------------------------------------------------ simulated
    def _simulated(
        self, op: CollectiveOp, m: float, members: tuple[str, ...], algo: Algorithm
    ) -> CommResult:
        # the flow replay needs SimPy and numpy: imported when a simulated result is asked for
        from perfmodel.comm.replay import simulate_collective

        analytic = AnalyticCommModel(self.topology, self.link_params, links=self.links)
        analytic.groups.infos = self.groups.infos
        ref = analytic._analytic(op, m, members, algo)
        info = self.group_info(members)
        if ref.algorithm in CLOSED_FORM_ONLY:
            # in-switch reductions have no flow model: the switch, not the links, sets the pace
            t = ref.time_s
        else:
            t = simulate_collective(self, op, m, members, ref.algorithm, ref.protocol, info)
        return self._result(
            op, m, info, (t, ref.algorithm, ref.protocol, ref.latency_s, ref.bandwidth_Bps)
        )


def shm_note(topology: Topology, group: Sequence[str]) -> str | None:
    """A one-line warning when GPUs of ``group`` in one server have no peer-to-peer, else ``None``.

    NCCL then stages their traffic through host memory (SHM transport), which halves the usable
    PCIe bandwidth where two GPUs share a switch uplink; see :meth:`DirectedLinks.shm_cpu`.
    """
    links = DirectedLinks(topology)
    if not links.uses_shm(group):
        return None
    no_p2p = [g for g in group if g in links.no_p2p]
    models = sorted(
        {topology.gpu_spec(g).name for g in no_p2p if not topology.gpu_spec(g).pcie_p2p}
    )
    if models:
        why = f"{', '.join(models)}: no PCIe peer-to-peer"
    elif no_p2p:
        why = "peer-to-peer disabled for this system (p2p = false / --p2p off)"
    else:
        why = "peer-to-peer refused between some GPU pairs (nvidia-smi topo -p2p r, NCCL P2P level)"
    return (
        f"note: GPUs communicate through host memory ({why}): NCCL's SHM transport stages every "
        "GPU-to-GPU transfer in CPU memory"
    )
