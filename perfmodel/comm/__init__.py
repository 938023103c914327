"""Communication: collective cost models, closed-form and flow-level on the topology graph.

Public API::

    from perfmodel.comm import CommCostModel, CommResult, FlowNetwork, LinkParams, run_collective

See ``docs/comm.md`` for the formulas, the NCCL tuner approximation and validation.
"""

from typing import Any

from perfmodel.comm.analytic import CommResult
from perfmodel.comm.group import GroupInfo
from perfmodel.comm.model import CommCostModel
from perfmodel.comm.params import Algorithm, LinkClassParams, LinkParams, Protocol

__all__ = [
    "Algorithm",
    "CommCostModel",
    "CommResult",
    "FlowNetwork",
    "GroupInfo",
    "LinkClassParams",
    "LinkParams",
    "Protocol",
    "run_collective",
]


def __getattr__(name: str) -> Any:
    # The flow-level simulator needs SimPy; import it lazily so that the closed-form model and
    # LinkParams load where SimPy is absent (e.g. a calibration run on a GPU machine).
    if name == "FlowNetwork":
        from perfmodel.comm.flow import FlowNetwork

        return FlowNetwork
    if name == "run_collective":
        from perfmodel.comm.replay import run_collective

        return run_collective
    raise AttributeError(f"module 'perfmodel.comm' has no attribute {name!r}")
