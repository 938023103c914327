"""Communication: collective cost models, closed-form and flow-level on the topology graph.

Public API::

    from perfmodel.comm import CommCostModel, CommResult, FlowNetwork, LinkParams, run_collective

See ``docs/comm.md`` for the formulas, the NCCL tuner approximation and validation.
"""

from perfmodel.comm.flow import FlowNetwork, run_collective
from perfmodel.comm.model import CommCostModel, CommResult, GroupInfo
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
